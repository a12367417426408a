//! Fault injection: handlers that fail or panic on 20% of attempts, across three subscriptions and
//! 100,000 records. Every record reaches every subscription at least once, in order, and each record
//! whose attempts ran out is in the dead-letter topic exactly once.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use logbus::{Backoff, Broker, DeadLetter, ReadError, Retry, Start, TopicConfig};

const RECORDS: u64 = 100_000;
const ATTEMPTS: u32 = 3;

#[derive(Default)]
struct Seen {
    /// Offsets in the order of their first attempt.
    first_attempts: Vec<u64>,
    /// Attempts of the current offset.
    current: Option<(u64, u32)>,
    /// Offsets whose every attempt failed.
    gave_up: Vec<u64>,
}

#[test]
fn random_failures_and_panics_lose_nothing_and_keep_order() {
    // Panics are expected by the thousand; keep the output readable.
    std::panic::set_hook(Box::new(|_| {}));
    let broker = Broker::new();
    let topic = broker.topic::<u64>("work", TopicConfig::default()).unwrap();
    let mut subs = Vec::new();
    let mut seen = Vec::new();
    for s in 0..3u64 {
        let state = Arc::new(Mutex::new(Seen::default()));
        seen.push(state.clone());
        let mut rng = 0x2545_f491_4f6c_dd1d_u64 ^ (s + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let sub = topic
            .subscription(&format!("sub-{s}"))
            .start(Start::Earliest)
            .retry(
                Retry::default()
                    .max_attempts(ATTEMPTS)
                    .backoff(Backoff::None),
            )
            .handler(move |r| {
                let mut st = state.lock().unwrap();
                let attempt = match st.current {
                    Some((o, n)) if o == r.offset() => n + 1,
                    _ => {
                        st.first_attempts.push(r.offset());
                        1
                    }
                };
                st.current = Some((r.offset(), attempt));
                assert_eq!(**r, r.offset(), "the value is the offset");
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let roll = rng % 10;
                if roll >= 2 {
                    return Ok(());
                }
                if attempt == ATTEMPTS {
                    st.gave_up.push(r.offset());
                }
                drop(st);
                if roll == 0 {
                    panic!("injected panic");
                }
                Err("injected failure")
            })
            .unwrap();
        subs.push(sub);
    }
    let mut producer = topic.producer().unwrap();
    for i in 0..RECORDS {
        producer.publish(i).unwrap();
    }
    for sub in &subs {
        assert!(sub.wait_idle(Duration::from_secs(300)));
    }
    let dlq = broker.get::<DeadLetter<u64>>("work.dlq").unwrap();
    let mut letters: HashMap<(String, u64), u32> = HashMap::new();
    let mut reader = dlq.reader(0, Start::Earliest).unwrap();
    loop {
        match reader.try_next() {
            Ok(l) => {
                assert_eq!(l.value, l.offset);
                assert_eq!(l.attempts, ATTEMPTS);
                *letters
                    .entry((l.subscription.clone(), l.offset))
                    .or_default() += 1;
            }
            Err(ReadError::Empty) => break,
            Err(e) => panic!("{e}"),
        }
    }
    for (s, (sub, state)) in subs.iter().zip(&seen).enumerate() {
        let st = state.lock().unwrap();
        assert_eq!(
            st.first_attempts.len() as u64,
            RECORDS,
            "every record reached sub-{s}"
        );
        assert!(
            st.first_attempts
                .iter()
                .enumerate()
                .all(|(i, o)| *o == i as u64),
            "in order"
        );
        let name = format!("sub-{s}");
        for o in &st.gave_up {
            assert_eq!(
                letters.get(&(name.clone(), *o)),
                Some(&1),
                "{name} offset {o} dead-lettered once"
            );
        }
        let in_dlq = letters.keys().filter(|(n, _)| *n == name).count();
        assert_eq!(in_dlq, st.gave_up.len(), "nothing else was dead-lettered");
        assert!(
            !st.gave_up.is_empty(),
            "the injected rate must exhaust some records"
        );
        let stats = sub.stats();
        assert_eq!(stats.positions, vec![RECORDS]);
        assert_eq!(stats.dead_lettered, st.gave_up.len() as u64);
        assert_eq!(stats.delivered + stats.dead_lettered, RECORDS);
    }
}

/// Publishers whose batch iterators panic halfway, racing publishers that succeed: a panicking
/// batch reserves nothing, so offsets stay dense and readers never wait on a hole.
#[test]
fn publishers_dropped_mid_batch_leave_no_hole() {
    std::panic::set_hook(Box::new(|_| {}));
    let topic =
        logbus::Topic::<u64>::new("batches", TopicConfig::default().segment_size(64)).unwrap();
    let mut reader = topic.reader(0, Start::Earliest).unwrap();
    let publishers: Vec<_> = (0..4u64)
        .map(|p| {
            let topic = topic.clone();
            std::thread::spawn(move || {
                let mut producer = topic.producer().unwrap();
                let mut published = 0u64;
                for round in 0..2_000u64 {
                    let fail = round % 3 == p % 3;
                    let batch = (0..8u64).map(move |i| {
                        assert!(!(fail && i == 5), "the batch's source fails");
                        p << 32 | round << 4 | i
                    });
                    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        producer.publish_batch(batch).map(|b| b.offsets.count())
                    }));
                    match result {
                        Ok(Ok(n)) => published += n as u64,
                        Ok(Err(e)) => panic!("{e}"),
                        Err(_) => assert!(fail, "only the failing batches panic"),
                    }
                }
                published
            })
        })
        .collect();
    let published: u64 = publishers.into_iter().map(|h| h.join().unwrap()).sum();
    let _ = std::panic::take_hook();
    topic.close();
    let mut n = 0;
    loop {
        match reader.next() {
            Ok(r) => {
                assert_eq!(r.offset(), n, "dense");
                assert_ne!(*r & 0xf, 5 + 16, "nothing of a failed batch is published");
                n += 1;
            }
            Err(ReadError::Closed) => break,
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(n, published);
    assert!(published > 0 && published < 4 * 2_000 * 8);
}

/// A subscription dropped while its handler is mid-record (plain mode) or while a delivery waits
/// for its ack (ack mode): the drop returns once the handler returns, and a subscription with the
/// same name resumes at the first record not finished (plain: the next one; ack mode: the unacked
/// one is delivered again).
#[test]
fn subscriptions_dropped_mid_delivery_resume_by_name() {
    use std::sync::mpsc::channel;
    let broker = Broker::new();
    let topic = broker.topic::<u64>("mid", TopicConfig::default()).unwrap();
    for v in 0..3 {
        topic.publish(v).unwrap();
    }
    // Plain mode: the handler is inside record 1 when the subscription is dropped.
    let (entered_tx, entered_rx) = channel();
    let (release_tx, release_rx) = channel::<()>();
    let release_rx = Mutex::new(release_rx);
    let sub = topic
        .subscription("plain")
        .start(Start::Earliest)
        .handler(move |r| {
            if r.offset() == 1 {
                entered_tx.send(()).unwrap();
                release_rx.lock().unwrap().recv().unwrap();
            }
            Ok::<(), String>(())
        })
        .unwrap();
    entered_rx.recv().unwrap();
    let dropper = std::thread::spawn(move || drop(sub));
    std::thread::sleep(Duration::from_millis(20)); // let the drop start waiting (not a check)
    release_tx.send(()).unwrap();
    dropper.join().unwrap();
    let c = topic.consumer("plain", Start::Latest).unwrap();
    assert_eq!(
        c.position(0).unwrap(),
        2,
        "record 1 finished, record 2 not started"
    );

    // Ack mode: record 0 is delivered and never acked; dropping leaves it unpassed.
    let (handles_tx, handles_rx) = channel();
    let sub = topic
        .subscription("acked")
        .start(Start::Earliest)
        .ack_handler(move |d: logbus::Delivery<'_, u64>| {
            handles_tx.send(d.handle()).unwrap();
            Ok::<(), String>(())
        })
        .unwrap();
    let first = handles_rx.recv().unwrap();
    assert_eq!(first.offset(), 0);
    drop(sub);
    assert!(
        !first.ack(),
        "an ack after the drop is refused: the record was not passed"
    );
    let c = topic.consumer("acked", Start::Latest).unwrap();
    assert_eq!(c.position(0).unwrap(), 0);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&seen);
    let again = topic
        .subscription("acked")
        .ack_handler(move |d: logbus::Delivery<'_, u64>| {
            sink.lock().unwrap().push(d.record().offset());
            d.ack();
            Ok::<(), String>(())
        })
        .unwrap();
    assert!(again.wait_idle(Duration::from_secs(10)));
    assert_eq!(
        *seen.lock().unwrap(),
        vec![0, 1, 2],
        "resumed at the unacked record"
    );
}

/// A topic deleted while readers, consumers, group members and subscriptions are parked on it and
/// a publisher is blocked by `Block`: every one of them returns a typed `Closed`, nothing hangs.
#[test]
fn topic_deleted_while_everyone_blocks() {
    let broker = Broker::new();
    let topic = broker
        .topic::<u64>(
            "doomed",
            TopicConfig::default()
                .partitions(2)
                .max_records(4)
                .overflow(logbus::Overflow::Block),
        )
        .unwrap();
    let mut reader = topic.reader(1, Start::Latest).unwrap();
    let mut consumer = topic.consumer("c", Start::Latest).unwrap();
    let mut member = topic.group("g").unwrap().join("m").unwrap();
    let sub = topic
        .subscribe("s", Start::Latest, |_| Ok::<(), String>(()))
        .unwrap();
    let waiting = [
        std::thread::spawn(move || matches!(reader.next(), Err(ReadError::Closed))),
        std::thread::spawn(move || {
            // Positions stay at the end: drain until Closed.
            loop {
                match consumer.poll_timeout(8, Duration::from_secs(30)) {
                    Ok(_) => continue,
                    Err(e) => break e == ReadError::Closed,
                }
            }
        }),
        std::thread::spawn(move || loop {
            match member.poll_timeout(8, Duration::from_secs(30)) {
                Ok(_) | Err(logbus::GroupError::Rebalanced(_)) => continue,
                Err(e) => break e == logbus::GroupError::Read(ReadError::Closed),
            }
        }),
    ];
    // A reader that never reads holds the Block gate: the publisher fills partition 0 and blocks.
    let stuck = topic.reader(0, Start::Earliest).unwrap();
    let t = topic.clone();
    let publisher = std::thread::spawn(move || loop {
        match t.publish_to(0, 1) {
            Ok(_) => continue,
            Err(e) => break e,
        }
    });
    std::thread::sleep(Duration::from_millis(50)); // let them all park (not a check)
    broker.delete("doomed").unwrap();
    for h in waiting {
        assert!(
            h.join().unwrap(),
            "a waiter got something other than Closed"
        );
    }
    assert!(matches!(
        publisher.join().unwrap(),
        logbus::PublishToError::Publish(logbus::PublishError::Closed(1))
    ));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !sub.is_finished() {
        assert!(
            std::time::Instant::now() < deadline,
            "the subscription's thread did not end with its topic"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(stuck);
    assert!(matches!(
        broker.get::<u64>("doomed"),
        Err(logbus::Error::UnknownTopic(_))
    ));
}
