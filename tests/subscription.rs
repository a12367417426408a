//! Push subscriptions: isolation, retries and dead letters, ack mode, filters, lifecycle, stats.

use std::{
    sync::{
        atomic::{AtomicBool, AtomicU32, Ordering},
        mpsc, Arc, Mutex,
    },
    thread,
    time::Duration,
};

use logbus::{Backoff, Broker, Error, Retry, Start, Stopped, Topic, TopicConfig};

const LONG: Duration = Duration::from_secs(30);

fn no_backoff(attempts: u32) -> Retry {
    Retry::default()
        .max_attempts(attempts)
        .backoff(Backoff::None)
}

#[test]
fn a_slow_subscriber_delays_nobody_and_both_keep_publisher_order() {
    // The tour's scenario 1, with the slow handler held on a gate instead of sleeping, so the test
    // does not depend on timing.
    let broker = Broker::new();
    let orders = broker
        .topic::<(u32, u32)>("orders", TopicConfig::default())
        .unwrap();
    orders.publish((99, 0)).unwrap();
    let fast_seen = Arc::new(Mutex::new(Vec::new()));
    let seen = fast_seen.clone();
    let fast = orders
        .subscribe("fast", Start::Earliest, move |r| {
            seen.lock().unwrap().push(**r);
            Ok::<_, String>(())
        })
        .unwrap();
    let (gate_tx, gate_rx) = mpsc::channel::<()>();
    let (entered_tx, entered_rx) = mpsc::channel::<()>();
    let slow_seen = Arc::new(Mutex::new(Vec::new()));
    let seen = slow_seen.clone();
    let slow = orders
        .subscribe("slow", Start::Latest, move |r| {
            let _ = entered_tx.send(());
            gate_rx.recv().map_err(|e| e.to_string())?;
            seen.lock().unwrap().push(**r);
            Ok::<_, String>(())
        })
        .unwrap();
    // Re-bound after `slow`, so that a failed assertion drops the gate before the subscription
    // (whose drop waits for the handler): the test then fails instead of hanging.
    let gate_tx = gate_tx;
    let publishers: Vec<_> = (0..4u32)
        .map(|p| {
            let orders = orders.clone();
            thread::spawn(move || {
                for seq in 0..25 {
                    orders.publish((p, seq)).unwrap();
                }
            })
        })
        .collect();
    for p in publishers {
        p.join().unwrap();
    }
    // The fast subscriber finishes everything while the slow one is stuck on its first record
    // (waiting until its handler has started: its thread may not have run yet).
    assert!(fast.wait_idle(LONG));
    entered_rx.recv_timeout(LONG).unwrap();
    assert_eq!(fast_seen.lock().unwrap().len(), 101);
    assert!(slow_seen.lock().unwrap().is_empty());
    assert_eq!(slow.stats().in_flight, 1);
    for _ in 0..100 {
        gate_tx.send(()).unwrap();
    }
    assert!(slow.wait_idle(LONG));
    let slow_seen = slow_seen.lock().unwrap();
    assert_eq!(slow_seen.len(), 100);
    for seen in [&*fast_seen.lock().unwrap(), &*slow_seen] {
        for p in 0..4 {
            let seqs: Vec<u32> = seen
                .iter()
                .filter(|(q, _)| *q == p)
                .map(|(_, s)| *s)
                .collect();
            assert_eq!(seqs, (0..25).collect::<Vec<_>>());
        }
    }
}

#[test]
fn a_poison_record_is_dead_lettered_after_its_attempts() {
    // The tour's scenario 2.
    let broker = Broker::new();
    let pay = broker
        .topic::<String>("pay", TopicConfig::default())
        .unwrap();
    for v in ["ok", "poison", "ok2"] {
        pay.publish(v.to_string()).unwrap();
    }
    let attempts = Arc::new(AtomicU32::new(0));
    let a = attempts.clone();
    let sub = pay
        .subscription("payments")
        .start(Start::Earliest)
        .retry(no_backoff(3))
        .handler(move |r| {
            if r.as_str() == "poison" {
                a.fetch_add(1, Ordering::SeqCst);
                return Err(format!("cannot pay {}", r.value()));
            }
            Ok(())
        })
        .unwrap();
    assert!(sub.wait_idle(LONG));
    assert_eq!(attempts.load(Ordering::SeqCst), 3);
    let stats = sub.stats();
    assert_eq!(stats.positions, vec![3]);
    assert_eq!(
        (stats.delivered, stats.failed_attempts, stats.dead_lettered),
        (2, 3, 1)
    );
    // The dead-letter topic is a real topic in the broker: `pay.dlq`.
    let dlq = broker.get::<logbus::DeadLetter<String>>("pay.dlq").unwrap();
    let mut r = dlq.reader(0, Start::Earliest).unwrap();
    let letter = r.next().unwrap();
    assert_eq!(letter.value, "poison");
    assert_eq!(
        (letter.topic.as_str(), letter.partition, letter.offset),
        ("pay", 0, 1)
    );
    assert_eq!(
        (letter.attempts, letter.subscription.as_str()),
        (3, "payments")
    );
    assert_eq!(letter.error, "cannot pay poison");
    assert!(r.try_next().is_err(), "exactly one dead letter");
}

#[test]
fn a_panicking_handler_is_a_failed_attempt_and_the_thread_survives() {
    let t = Topic::<u32>::new("t", TopicConfig::default()).unwrap();
    let calls = Arc::new(AtomicU32::new(0));
    let c = calls.clone();
    let sub = t
        .subscription("s")
        .start(Start::Earliest)
        .retry(no_backoff(2))
        .handler(move |r| {
            c.fetch_add(1, Ordering::SeqCst);
            if **r == 1 {
                panic!("boom on {}", **r);
            }
            Ok::<_, String>(())
        })
        .unwrap();
    for i in 0..3 {
        t.publish(i).unwrap();
    }
    assert!(sub.wait_idle(LONG));
    assert_eq!(calls.load(Ordering::SeqCst), 4, "0, 1 twice, 2");
    let letter: logbus::DeadLetter<u32> = sub
        .dead_letter_topic()
        .reader(0, Start::Earliest)
        .unwrap()
        .next()
        .unwrap()
        .clone();
    assert_eq!(letter.offset, 1);
    assert_eq!(letter.error, "panic: boom on 1");
    assert_eq!(sub.stats().positions, vec![3]);
}

#[test]
fn backoff_delays_grow_and_are_bounded() {
    let t = Topic::<u32>::new("t", TopicConfig::default()).unwrap();
    let times = Arc::new(Mutex::new(Vec::new()));
    let tm = times.clone();
    let backoff = Backoff::Exponential {
        initial: Duration::from_millis(5),
        max: Duration::from_millis(20),
        jitter: false,
    };
    let sub = t
        .subscription("s")
        .start(Start::Earliest)
        .retry(Retry::default().max_attempts(5).backoff(backoff))
        .handler(move |_| {
            tm.lock().unwrap().push(std::time::Instant::now());
            Err("always")
        })
        .unwrap();
    t.publish(1).unwrap();
    assert!(sub.wait_idle(LONG));
    let times = times.lock().unwrap();
    assert_eq!(times.len(), 5);
    // Waits of at least 5, 10, 20, 20 ms (sleeps never end early).
    for (k, min) in [5u64, 10, 20, 20].iter().enumerate() {
        assert!(times[k + 1] - times[k] >= Duration::from_millis(*min));
    }
    assert_eq!(sub.stats().dead_lettered, 1);
}

#[test]
fn ack_mode_redelivers_until_acked() {
    // The tour's scenario 5.
    let broker = Broker::new();
    let orders = broker
        .topic::<String>("orders", TopicConfig::default())
        .unwrap();
    let audit = orders
        .subscription("audit")
        .start(Start::Earliest)
        .ack_handler(|d| {
            d.ack();
            Ok::<_, String>(())
        })
        .unwrap();
    let billing_seen = Arc::new(Mutex::new(Vec::new()));
    let seen = billing_seen.clone();
    let skipped = Arc::new(AtomicBool::new(false));
    let billing = orders
        .subscription("billing")
        .start(Start::Earliest)
        .ack_wait(Duration::from_secs(3600))
        .ack_handler(move |d| {
            seen.lock().unwrap().push(d.to_string());
            if !skipped.swap(true, Ordering::SeqCst) {
                return Ok::<_, String>(()); // no ack the first time
            }
            d.ack();
            Ok(())
        })
        .unwrap();
    orders.publish("M0".into()).unwrap();
    assert!(audit.wait_idle(LONG));
    // Billing holds M0 unacked; its next record waits.
    while billing.stats().in_flight == 0 {
        thread::sleep(Duration::from_millis(1));
    }
    assert!(
        !billing.wait_idle(Duration::from_millis(20)),
        "M0 is not acked yet"
    );
    billing.redeliver_unacked();
    orders.publish("M1".into()).unwrap();
    assert!(audit.wait_idle(LONG));
    assert!(billing.wait_idle(LONG));
    assert_eq!(audit.stats().positions, vec![2]);
    assert_eq!(billing.stats().positions, vec![2]);
    assert_eq!(*billing_seen.lock().unwrap(), ["M0", "M0", "M1"]);
    assert_eq!(billing.stats().redelivered, 1);
}

#[test]
fn ack_wait_expiry_redelivers_and_max_deliver_dead_letters() {
    let t = Topic::<u32>::new("t", TopicConfig::default()).unwrap();
    let deliveries = Arc::new(AtomicU32::new(0));
    let d2 = deliveries.clone();
    let sub = t
        .subscription("s")
        .start(Start::Earliest)
        .ack_wait(Duration::from_millis(10))
        .max_deliver(3)
        .ack_handler(move |d| {
            d2.fetch_add(1, Ordering::SeqCst);
            assert_eq!(d.attempt(), d2.load(Ordering::SeqCst));
            Ok::<_, String>(()) // never acks
        })
        .unwrap();
    t.publish(5).unwrap();
    assert!(sub.wait_idle(LONG));
    assert_eq!(deliveries.load(Ordering::SeqCst), 3);
    let stats = sub.stats();
    assert_eq!(
        (stats.redelivered, stats.dead_lettered, stats.delivered),
        (2, 1, 0)
    );
    let letter: logbus::DeadLetter<u32> = sub
        .dead_letter_topic()
        .reader(0, Start::Earliest)
        .unwrap()
        .next()
        .unwrap()
        .clone();
    assert_eq!((letter.value, letter.attempts), (5, 3));
    assert_eq!(letter.error, "not acknowledged in time");
}

#[test]
fn nak_term_and_late_or_duplicate_acks() {
    let t = Topic::<u32>::new("t", TopicConfig::default()).unwrap();
    let handles = Arc::new(Mutex::new(Vec::new()));
    let h2 = handles.clone();
    let sub = t
        .subscription("s")
        .start(Start::Earliest)
        .ack_handler(move |d| {
            h2.lock().unwrap().push(d.handle());
            match (*d, d.attempt()) {
                (0, 1) => assert!(d.nak(Duration::from_millis(1))),
                (0, _) => {
                    assert!(d.ack());
                    assert!(!d.ack(), "a duplicate ack changes nothing");
                    assert!(!d.term());
                }
                (1, _) => assert!(d.term()),
                _ => {
                    d.ack();
                }
            }
            Ok::<_, String>(())
        })
        .unwrap();
    for i in 0..3 {
        t.publish(i).unwrap();
    }
    assert!(sub.wait_idle(LONG));
    // A handle of an old delivery settles nothing.
    let handles = handles.lock().unwrap();
    assert!(!handles[0].ack(), "stale delivery");
    assert_eq!((handles[0].offset(), handles[0].partition()), (0, 0));
    let stats = sub.stats();
    assert_eq!(stats.positions, vec![3]);
    assert_eq!(
        (stats.delivered, stats.failed_attempts, stats.dead_lettered),
        (2, 1, 1)
    );
    let letter: logbus::DeadLetter<u32> = sub
        .dead_letter_topic()
        .reader(0, Start::Earliest)
        .unwrap()
        .next()
        .unwrap()
        .clone();
    assert_eq!(
        (letter.offset, letter.error.as_str()),
        (1, "terminated by the handler")
    );
}

#[test]
fn an_ack_from_another_thread_releases_the_next_record() {
    let t = Topic::<u32>::new("t", TopicConfig::default()).unwrap();
    let (tx, rx) = mpsc::channel();
    let sub = t
        .subscription("s")
        .start(Start::Earliest)
        .ack_handler(move |d| tx.send(d.handle()).map_err(|e| e.to_string()))
        .unwrap();
    t.publish(1).unwrap();
    t.publish(2).unwrap();
    let first = rx.recv().unwrap();
    assert_eq!(first.offset(), 0);
    assert!(
        rx.recv_timeout(Duration::from_millis(20)).is_err(),
        "order: 1 waits for the ack"
    );
    thread::spawn(move || assert!(first.ack())).join().unwrap();
    let second = rx.recv().unwrap();
    assert_eq!(second.offset(), 1);
    second.ack();
    assert!(sub.wait_idle(LONG));
}

#[test]
fn filtered_records_count_as_delivered() {
    let t = Topic::<u32>::new("t", TopicConfig::default()).unwrap();
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = got.clone();
    let sub = t
        .subscription("evens")
        .start(Start::Earliest)
        .filter(|v| v % 2 == 0)
        .handler(move |r| {
            g.lock().unwrap().push(**r);
            Ok::<_, String>(())
        })
        .unwrap();
    for i in 0..10 {
        t.publish(i).unwrap();
    }
    assert!(sub.wait_idle(LONG));
    assert_eq!(*got.lock().unwrap(), [0, 2, 4, 6, 8]);
    assert_eq!(sub.stats().delivered, 10);
    assert_eq!(sub.stats().lag, 0);
}

#[test]
fn pause_resume_close_and_resume_by_name() {
    let t = Topic::<u32>::new("t", TopicConfig::default()).unwrap();
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = got.clone();
    let mut sub = t
        .subscribe("s", Start::Earliest, move |r| {
            g.lock().unwrap().push(**r);
            Ok::<_, String>(())
        })
        .unwrap();
    t.publish(0).unwrap();
    assert!(sub.wait_idle(LONG));
    sub.pause();
    for i in 1..5 {
        t.publish(i).unwrap();
    }
    assert!(
        !sub.wait_idle(Duration::from_millis(30)),
        "paused: nothing more is processed"
    );
    assert_eq!(*got.lock().unwrap(), [0]);
    sub.resume();
    assert!(sub.wait_idle(LONG));
    assert_eq!(*got.lock().unwrap(), [0, 1, 2, 3, 4]);
    sub.close();
    sub.close(); // idempotent
    assert!(sub.is_finished());
    for i in 5..8 {
        t.publish(i).unwrap();
    }
    // A new subscription with the same name resumes at the committed position.
    let g = got.clone();
    let again = t
        .subscribe("s", Start::Earliest, move |r| {
            g.lock().unwrap().push(**r);
            Ok::<_, String>(())
        })
        .unwrap();
    assert!(again.wait_idle(LONG));
    assert_eq!(*got.lock().unwrap(), [0, 1, 2, 3, 4, 5, 6, 7]);
}

#[test]
fn dropping_a_subscription_stops_its_thread() {
    struct Flag(Arc<AtomicBool>);
    impl Drop for Flag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let t = Topic::<u32>::new("t", TopicConfig::default()).unwrap();
    let dropped = Arc::new(AtomicBool::new(false));
    let flag = Flag(dropped.clone());
    let sub = t
        .subscribe("s", Start::Earliest, move |_| {
            let _keep = &flag;
            Ok::<_, String>(())
        })
        .unwrap();
    t.publish(1).unwrap();
    assert!(sub.wait_idle(LONG));
    drop(sub);
    // The handler (and so the flag) is dropped when the thread ends; drop joined it.
    assert!(dropped.load(Ordering::SeqCst));
}

#[test]
fn a_closed_topic_finishes_its_subscriptions() {
    let t = Topic::<u32>::new("t", TopicConfig::default()).unwrap();
    let sub = t
        .subscribe("s", Start::Earliest, |_| Ok::<_, String>(()))
        .unwrap();
    t.publish(1).unwrap();
    t.close();
    assert!(sub.wait_idle(LONG));
    while !sub.is_finished() {
        thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(sub.stats().positions, vec![1]);
}

#[test]
fn a_handler_may_publish_to_its_own_topic() {
    let t = Topic::<u32>::new("t", TopicConfig::default()).unwrap();
    let t2 = t.clone();
    let other = Topic::<u32>::new("other", TopicConfig::default()).unwrap();
    let o2 = other.clone();
    let sub = t
        .subscribe("chain", Start::Earliest, move |r| {
            o2.publish(**r * 10).map_err(|e| e.to_string())?;
            if **r < 9 {
                t2.publish(**r + 1).map_err(|e| e.to_string())?;
            }
            Ok::<_, String>(())
        })
        .unwrap();
    t.publish(0).unwrap();
    let mut r = other.reader(0, Start::Earliest).unwrap();
    for i in 0..10 {
        assert_eq!(*r.next().unwrap(), i * 10);
    }
    assert!(sub.wait_idle(LONG));
    assert_eq!(sub.stats().positions, vec![10]);
}

#[test]
fn subscriptions_read_every_partition() {
    let t = Topic::<u32>::new("t", TopicConfig::default().partitions(3)).unwrap();
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = got.clone();
    let sub = t
        .subscribe("s", Start::Earliest, move |r| {
            g.lock().unwrap().push((r.partition(), **r));
            Ok::<_, String>(())
        })
        .unwrap();
    for i in 0..30 {
        t.publish_keyed(&(i % 3), i).unwrap();
    }
    assert!(sub.wait_idle(LONG));
    let got = got.lock().unwrap();
    assert_eq!(got.len(), 30);
    for key in 0..3u32 {
        let vals: Vec<u32> = got
            .iter()
            .filter(|(_, v)| v % 3 == key)
            .map(|(_, v)| *v)
            .collect();
        assert_eq!(
            vals,
            (0..30).filter(|v| v % 3 == key).collect::<Vec<_>>(),
            "key order"
        );
    }
    assert_eq!(sub.stats().positions.iter().sum::<u64>(), 30);
}

#[test]
fn bad_subscription_settings_are_typed_errors() {
    let t = Topic::<u32>::new("t", TopicConfig::default()).unwrap();
    let ok = |_: &logbus::Record<'_, u32>| Ok::<_, String>(());
    assert!(matches!(
        t.subscribe("", Start::Earliest, ok),
        Err(Error::InvalidName { .. })
    ));
    let zero = t
        .subscription("s")
        .retry(Retry::default().max_attempts(0))
        .handler(ok);
    assert!(matches!(zero, Err(Error::InvalidConfig(_))));
    let zero = t
        .subscription("s")
        .max_deliver(0)
        .ack_handler(|_| Ok::<_, String>(()));
    assert!(matches!(zero, Err(Error::InvalidConfig(_))));
    let zero = t
        .subscription("s")
        .ack_wait(Duration::ZERO)
        .ack_handler(|_| Ok::<_, String>(()));
    assert!(matches!(zero, Err(Error::InvalidConfig(_))));
    let far = t.subscription("s").start(Start::Offset(9)).handler(ok);
    assert!(matches!(far, Err(Error::OffsetOutOfRange { .. })));
}

/// A dead-letter topic with a capacity under `Block`, full because its own reader reads nothing,
/// holds the subscription's dead letters back, but not its `close`: the thread waiting for room
/// hears the close, stops without passing the record (I7: it is not committed, so the
/// subscription's name resumes at it), and `close` returns.
#[test]
fn close_is_not_held_by_a_full_dead_letter_topic_under_block() {
    use logbus::{DeadLetter, Overflow};
    let topic = Topic::<u64>::new("jobs", TopicConfig::default()).unwrap();
    let dlq = Topic::<DeadLetter<u64>>::new(
        "jobs.dlq",
        TopicConfig::default()
            .max_records(1)
            .overflow(Overflow::Block),
    )
    .unwrap();
    let mut idle = dlq.reader(0, Start::Earliest).unwrap();
    for v in 0..3 {
        topic.publish(v).unwrap();
    }
    let mut sub = topic
        .subscription("worker")
        .start(Start::Earliest)
        .retry(no_backoff(1))
        .dead_letter(dlq.clone())
        .handler(|_| Err("always fails"))
        .unwrap();
    // The first record's letter fits; the second's waits for room that never comes.
    wait_until(|| sub.stats().dead_lettered == 1 && sub.stats().failed_attempts >= 2);
    let (done_tx, done_rx) = mpsc::channel();
    let closer = thread::spawn(move || {
        sub.close();
        done_tx.send(sub.stats()).unwrap();
    });
    let stats = done_rx
        .recv_timeout(LONG)
        .expect("close returned while the dead-letter topic was full");
    closer.join().unwrap();
    assert_eq!(stats.dead_lettered, 1);
    assert_eq!(
        stats.positions,
        vec![1],
        "the record waiting for room was not passed"
    );
    assert_eq!(idle.try_next().unwrap().value().offset, 0);
    // The name resumes at the record whose letter was not written.
    let again = topic.consumer("worker", Start::Latest).unwrap();
    assert_eq!(again.position(0).unwrap(), 1);
}

/// A single-producer dead-letter topic whose producer role is held elsewhere refuses the letter
/// (`Busy`) for as long as it is held: the subscription waits, holding the record, and writes the
/// letter once the role is free; nothing is handled twice and nothing is passed before it.
#[test]
fn a_dead_letter_waits_for_a_busy_single_producer_topic() {
    use logbus::DeadLetter;
    let topic = Topic::<u64>::new("jobs", TopicConfig::default()).unwrap();
    let dlq = Topic::<DeadLetter<u64>>::new("jobs.dlq", TopicConfig::default().single_producer())
        .unwrap();
    let held = dlq.producer().unwrap();
    let attempts = Arc::new(AtomicU32::new(0));
    let a = attempts.clone();
    let sub = topic
        .subscription("worker")
        .start(Start::Earliest)
        .retry(no_backoff(1))
        .dead_letter(dlq.clone())
        .handler(move |r| {
            a.fetch_add(1, Ordering::SeqCst);
            if **r == 0 {
                Err("poison")
            } else {
                Ok(())
            }
        })
        .unwrap();
    for v in 0..2 {
        topic.publish(v).unwrap();
    }
    wait_until(|| attempts.load(Ordering::SeqCst) >= 1);
    let stats = sub.stats();
    assert_eq!((stats.dead_lettered, stats.positions[0]), (0, 0));
    drop(held);
    assert!(sub.wait_idle(LONG));
    let stats = sub.stats();
    assert_eq!((stats.dead_lettered, stats.delivered), (1, 1));
    assert_eq!(stats.positions, vec![2]);
    assert_eq!(
        attempts.load(Ordering::SeqCst),
        2,
        "each record handled once"
    );
    let mut r = dlq.reader(0, Start::Earliest).unwrap();
    assert_eq!(r.next().unwrap().value().offset, 0);
}

/// A closed dead-letter topic can never take the letter: the subscription stops as if closed,
/// with the record unpassed (I7) and its handler not run again and again.
#[test]
fn a_closed_dead_letter_topic_stops_the_subscription_without_passing_the_record() {
    use logbus::DeadLetter;
    let topic = Topic::<u64>::new("jobs", TopicConfig::default()).unwrap();
    let dlq = Topic::<DeadLetter<u64>>::new("jobs.dlq", TopicConfig::default()).unwrap();
    dlq.close();
    let attempts = Arc::new(AtomicU32::new(0));
    let a = attempts.clone();
    let mut sub = topic
        .subscription("worker")
        .start(Start::Earliest)
        .retry(no_backoff(2))
        .dead_letter(dlq)
        .handler(move |_| {
            a.fetch_add(1, Ordering::SeqCst);
            Err("always fails")
        })
        .unwrap();
    for v in 0..2 {
        topic.publish(v).unwrap();
    }
    wait_until(|| sub.is_finished());
    let stats = sub.stats();
    assert_eq!(
        stats.stopped,
        Some(Stopped::DeadLetterClosed {
            partition: 0,
            offset: 0
        })
    );
    assert_eq!(stats.positions, vec![0]);
    assert_eq!((stats.dead_lettered, stats.failed_attempts), (0, 2));
    assert_eq!(
        attempts.load(Ordering::SeqCst),
        2,
        "the record's two attempts, once"
    );
    sub.close();
    let again = topic.consumer("worker", Start::Latest).unwrap();
    assert_eq!(
        again.position(0).unwrap(),
        0,
        "the name resumes at the record"
    );
}

/// Polls `done` until it holds (or fails the test after [`LONG`]).
fn wait_until(mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + LONG;
    while !done() {
        assert!(std::time::Instant::now() < deadline, "timed out");
        thread::sleep(Duration::from_millis(1));
    }
}

/// The default dead-letter topic is the broker's `<topic>.dlq` whatever its configuration: one
/// the application made first, with a capacity of its own, is used as it is.
#[test]
fn an_existing_dlq_topic_is_used_whatever_its_configuration() {
    use logbus::{DeadLetter, Overflow};
    let broker = Broker::new();
    let jobs = broker.topic::<u64>("jobs", TopicConfig::default()).unwrap();
    let made = broker
        .topic::<DeadLetter<u64>>(
            "jobs.dlq",
            TopicConfig::default()
                .max_records(64)
                .overflow(Overflow::Reject),
        )
        .unwrap();
    let sub = jobs
        .subscription("worker")
        .start(Start::Earliest)
        .retry(no_backoff(1))
        .handler(|_| Err("always fails"))
        .unwrap();
    jobs.publish(7).unwrap();
    assert!(sub.wait_idle(LONG));
    assert_eq!(sub.stats().dead_lettered, 1);
    let mut r = made.reader(0, Start::Earliest).unwrap();
    assert_eq!(r.next().unwrap().value().value, 7);
}

/// Delays too long for a deadline (`Duration::MAX`) are waits until `close`, not a panic on the
/// subscription's thread: a retry backoff, and a nak's delay in ack mode.
#[test]
fn the_longest_delays_wait_for_close() {
    let topic = Topic::<u64>::new("jobs", TopicConfig::default()).unwrap();
    topic.publish(1).unwrap();
    let mut plain = topic
        .subscription("plain")
        .start(Start::Earliest)
        .retry(
            Retry::default()
                .max_attempts(2)
                .backoff(Backoff::Fixed(Duration::MAX)),
        )
        .handler(|_| Err("fails"))
        .unwrap();
    let mut acking = topic
        .subscription("acking")
        .start(Start::Earliest)
        .ack_handler(|d| {
            d.nak(Duration::MAX);
            Ok::<_, String>(())
        })
        .unwrap();
    wait_until(|| plain.stats().failed_attempts == 1 && acking.stats().failed_attempts == 1);
    for sub in [&mut plain, &mut acking] {
        sub.close();
        let stats = sub.stats();
        assert_eq!(
            stats.stopped,
            Some(Stopped::Closed),
            "{}: the thread ran to its end",
            stats.name
        );
        assert_eq!(stats.positions, vec![0], "{}", stats.name);
        assert_eq!(stats.failed_attempts, 1, "{}", stats.name);
    }
}

/// A filter that panics on a record sends that record to the dead-letter topic (0 attempts, the
/// panic's message) and the subscription goes on with the next; its thread survives.
#[test]
fn a_panicking_filter_dead_letters_the_record_and_the_thread_survives() {
    let broker = Broker::new();
    let topic = broker.topic::<u64>("jobs", TopicConfig::default()).unwrap();
    let handled = Arc::new(Mutex::new(Vec::new()));
    let h = handled.clone();
    let sub = topic
        .subscription("worker")
        .start(Start::Earliest)
        .filter(|v| {
            assert!(*v != 1, "cannot judge {v}");
            true
        })
        .handler(move |r| {
            h.lock().unwrap().push(**r);
            Ok::<_, String>(())
        })
        .unwrap();
    for v in 0..3 {
        topic.publish(v).unwrap();
    }
    assert!(sub.wait_idle(LONG));
    assert_eq!(*handled.lock().unwrap(), vec![0, 2]);
    let stats = sub.stats();
    assert_eq!((stats.delivered, stats.dead_lettered), (2, 1));
    assert_eq!(stats.positions, vec![3]);
    assert_eq!(stats.stopped, None, "still running");
    let dlq = broker.get::<logbus::DeadLetter<u64>>("jobs.dlq").unwrap();
    let mut r = dlq.reader(0, Start::Earliest).unwrap();
    let letter = r.next().unwrap();
    assert_eq!((letter.offset, letter.attempts, letter.value), (1, 0, 1));
    assert!(letter.error.contains("cannot judge 1"), "{}", letter.error);
}

/// A record whose value panics when cloned for its dead letter: the panic ends the subscription's
/// thread, which then shows as finished (`wait_idle` returns, `close` joins), with the record
/// unpassed.
#[test]
fn a_thread_ended_by_a_panic_shows_as_finished() {
    #[derive(Debug)]
    struct Brittle(u64);
    impl Clone for Brittle {
        fn clone(&self) -> Self {
            panic!("cannot clone {}", self.0)
        }
    }
    let topic = Topic::<Brittle>::new("jobs", TopicConfig::default()).unwrap();
    topic.publish(Brittle(0)).unwrap();
    let mut sub = topic
        .subscription("worker")
        .start(Start::Earliest)
        .retry(no_backoff(1))
        .handler(|_| Err("fails"))
        .unwrap();
    assert!(
        sub.wait_idle(LONG),
        "wait_idle returns once the thread is gone"
    );
    let stats = sub.stats();
    match &stats.stopped {
        Some(Stopped::Panicked { message }) => {
            assert!(message.contains("cannot clone 0"), "{message}")
        }
        other => panic!("stopped: {other:?}"),
    }
    assert_eq!((stats.positions[0], stats.dead_lettered), (0, 0));
    sub.close();
    assert!(
        matches!(sub.stats().stopped, Some(Stopped::Panicked { .. })),
        "a close afterwards keeps the first reason"
    );
}

/// A dead letter larger than the dead-letter topic's byte retention can never be written: the
/// subscription stops, says which record, and leaves it unpassed (I7).
#[test]
fn a_dead_letter_too_large_for_its_topic_stops_the_subscription_and_says_which() {
    use logbus::DeadLetter;
    let topic = Topic::<u64>::new("jobs", TopicConfig::default().partitions(2)).unwrap();
    let small = TopicConfig::default().max_bytes(64, |_: &DeadLetter<u64>| 100);
    let dlq = Topic::<DeadLetter<u64>>::new("jobs.dlq", small).unwrap();
    topic.publish_to(1, 7).unwrap();
    topic.publish_to(1, 8).unwrap();
    let mut sub = topic
        .subscription("worker")
        .start(Start::Earliest)
        .retry(no_backoff(1))
        .dead_letter(dlq.clone())
        .handler(|r| if **r == 8 { Err("eight") } else { Ok(()) })
        .unwrap();
    wait_until(|| sub.is_finished());
    let stats = sub.stats();
    assert_eq!(
        stats.stopped,
        Some(Stopped::DeadLetterTooLarge {
            partition: 1,
            offset: 1
        })
    );
    assert_eq!(stats.positions, vec![0, 1], "the record stays unpassed");
    assert_eq!((stats.delivered, stats.dead_lettered), (1, 0));
    assert_eq!(dlq.stats().partitions[0].end, 0, "nothing written");
    sub.close();
    let text = Stopped::DeadLetterTooLarge {
        partition: 1,
        offset: 1,
    }
    .to_string();
    assert!(text.contains("1/1") && text.contains("too large"), "{text}");
}

/// A subscription that read everything of a closed topic stops with `TopicClosed`; one closed
/// by its owner with `Closed`, and a later topic close does not change that.
#[test]
fn a_subscription_says_whether_it_or_its_topic_was_closed() {
    let topic = Topic::<u64>::new("jobs", TopicConfig::default()).unwrap();
    let drains = topic
        .subscription("drains")
        .start(Start::Earliest)
        .handler(|_| Ok::<_, String>(()))
        .unwrap();
    let mut closed = topic
        .subscription("closed")
        .start(Start::Earliest)
        .handler(|_| Ok::<_, String>(()))
        .unwrap();
    topic.publish(1).unwrap();
    assert!(closed.wait_idle(LONG));
    assert_eq!(closed.stats().stopped, None);
    closed.close();
    assert_eq!(closed.stats().stopped, Some(Stopped::Closed));
    topic.close();
    wait_until(|| drains.is_finished());
    let stats = drains.stats();
    assert_eq!(
        (stats.stopped, stats.positions, stats.delivered),
        (Some(Stopped::TopicClosed), vec![1], 1)
    );
    assert_eq!(closed.stats().stopped, Some(Stopped::Closed));
}
