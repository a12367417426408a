//! A tour of logbus, end to end: `cargo run --release --example tour`.
//!
//! Every scenario prints what happened and checks it, so the tour fails loudly if the engine
//! misbehaves.

use std::{
    sync::{Arc, Mutex},
    thread,
    time::{Duration, Instant, SystemTime},
};

use logbus::{
    Backoff, Batch, Broker, DeadLetter, GroupError, Overflow, Producers, PublishError, ReadError,
    Record, Retry, Start, TopicConfig, WaitStrategy,
};

/// An order: which publisher thread made it and its sequence number in that thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Order {
    publisher: u32,
    seq: u32,
}

fn main() {
    println!("# Delivery: push subscriptions, dead letters, pull consumers, acks\n");
    let broker = Broker::new();
    subscriptions_fast_and_slow(&broker);
    poison_to_dead_letters(&broker);
    pull_consumer_rollback(&broker);
    unknown_topic(&broker);
    acks_and_redelivery();
    println!("\n# The engine: readers, replay, keys, retention, back-pressure, parking\n");
    fan_out(&broker);
    replay(&broker);
    keyed(&broker);
    retention_and_lag(&broker);
    back_pressure(&broker);
    parked_readers(&broker);
    groups(&broker);
    println!("\nTopics in the broker: {:?}", broker.topics());
    println!("Tour complete: every check passed.");
}

/// Who received what, by publisher: checks each publisher's 25 records arrived in order.
fn check_publisher_order(name: &str, got: &[Order]) {
    for publisher in 0..4 {
        let seqs: Vec<u32> = got
            .iter()
            .filter(|o| o.publisher == publisher)
            .map(|o| o.seq)
            .collect();
        assert_eq!(
            seqs,
            (0..25).collect::<Vec<_>>(),
            "{name}: publisher {publisher}'s order"
        );
    }
}

/// Scenario 1: a fast and a slow subscriber; the slow one delays nobody.
fn subscriptions_fast_and_slow(broker: &Broker) {
    println!("== 1. `orders`: a fast and a slow (20 ms per record) subscriber, 4 publishers ==");
    let orders = broker
        .topic::<Order>("orders", TopicConfig::default())
        .unwrap();
    orders
        .publish(Order {
            publisher: 9,
            seq: 0,
        })
        .unwrap();
    let collect = |delay: Duration| {
        let got = Arc::new(Mutex::new(Vec::new()));
        let sink = got.clone();
        let handler = move |r: &Record<'_, Order>| {
            thread::sleep(delay);
            sink.lock().unwrap().push(**r);
            Ok::<_, String>(())
        };
        (got, handler)
    };
    let (fast_got, fast_handler) = collect(Duration::ZERO);
    let fast = orders
        .subscribe("fast", Start::Earliest, fast_handler)
        .unwrap();
    let (slow_got, slow_handler) = collect(Duration::from_millis(20));
    let slow = orders
        .subscribe("slow", Start::Latest, slow_handler)
        .unwrap();
    let start = Instant::now();
    let publishers: Vec<_> = (0..4u32)
        .map(|publisher| {
            let orders = orders.clone();
            thread::spawn(move || {
                for seq in 0..25 {
                    orders.publish(Order { publisher, seq }).unwrap();
                }
            })
        })
        .collect();
    for p in publishers {
        p.join().unwrap();
    }
    let published = start.elapsed();
    assert!(fast.wait_idle(Duration::from_secs(60)));
    let fast_done = start.elapsed();
    assert!(slow.wait_idle(Duration::from_secs(60)));
    let slow_done = start.elapsed();
    let (fast_got, slow_got) = (fast_got.lock().unwrap(), slow_got.lock().unwrap());
    check_publisher_order("fast", &fast_got);
    check_publisher_order("slow", &slow_got);
    println!("  publishers done in {published:.1?}; nobody waited for the slow subscriber");
    println!(
        "  fast: {} records (from the beginning), all in by {fast_done:.1?}",
        fast_got.len()
    );
    println!(
        "  slow: {} records (from latest), all in by {slow_done:.1?}",
        slow_got.len()
    );
    println!("  each publisher's 25 records arrived in order at both");
    assert_eq!((fast_got.len(), slow_got.len()), (101, 100));
}

/// Scenario 2: a poison record goes to the dead-letter topic after 3 attempts.
fn poison_to_dead_letters(broker: &Broker) {
    println!("== 2. `pay`: ok, poison, ok2; the handler fails on poison ==");
    let pay = broker
        .topic::<String>("pay", TopicConfig::default())
        .unwrap();
    for v in ["ok", "poison", "ok2"] {
        pay.publish(v.to_string()).unwrap();
    }
    let sub = pay
        .subscription("payments")
        .start(Start::Earliest)
        .retry(
            Retry::default()
                .max_attempts(3)
                .backoff(Backoff::Fixed(Duration::from_millis(1))),
        )
        .handler(|r| match r.as_str() {
            "poison" => Err(format!("cannot process {:?}", r.value())),
            _ => Ok(()),
        })
        .unwrap();
    assert!(sub.wait_idle(Duration::from_secs(10)));
    let stats = sub.stats();
    let dlq = broker.get::<DeadLetter<String>>("pay.dlq").unwrap();
    let mut letters = dlq.reader(0, Start::Earliest).unwrap();
    let letter = letters.next().unwrap();
    println!(
        "  attempts on poison: {}; dead letter in `pay.dlq`: {:?} from offset {} after {} attempts ({})",
        stats.failed_attempts, letter.value, letter.offset, letter.attempts, letter.error
    );
    println!("  subscription position: {}", stats.positions[0]);
    assert_eq!(
        (letter.offset, letter.attempts, stats.positions[0]),
        (1, 3, 3)
    );
}

/// Scenario 3: poll, commit, poll, roll back, poll again.
fn pull_consumer_rollback(broker: &Broker) {
    println!("== 3. a pull consumer on `pay` ==");
    let pay = broker.get::<String>("pay").unwrap();
    let mut c = pay.consumer("ledger", Start::Earliest).unwrap();
    let offsets = |b: Batch<'_, String>| b.iter().map(|r| r.offset()).collect::<Vec<_>>();
    let first = offsets(c.poll(2).unwrap());
    c.commit();
    let second = offsets(c.poll(5).unwrap());
    println!("  poll(2) -> offsets {first:?}, commit; poll(5) -> {second:?} (not committed)");
    c.rollback_to_committed();
    let position = c.position(0).unwrap();
    let replay = offsets(c.poll(5).unwrap());
    println!("  rollback_to_committed -> position {position}; next poll replays {replay:?}");
    assert_eq!(
        (first, second, position, replay),
        (vec![0, 1], vec![2], 2, vec![2])
    );
}

/// Scenario 4: a clear error for an unknown topic.
fn unknown_topic(broker: &Broker) {
    println!("== 4. publishing to an unknown topic ==");
    match broker.publish("refunds", "r1".to_string()) {
        Err(e) => {
            let message = e.to_string();
            println!(
                "  error: {message} (the value {:?} is handed back)",
                e.into_inner()
            );
        }
        Ok(_) => panic!("published to a topic that does not exist"),
    }
}

/// Scenario 5: acks; billing skips its first ack and gets M0 again.
fn acks_and_redelivery() {
    println!("== 5. `orders` in ack mode: `audit` acks at once, `billing` skips its first ack ==");
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
    let billing_saw = Arc::new(Mutex::new(Vec::new()));
    let saw = billing_saw.clone();
    let mut skipped = false;
    let billing = orders
        .subscription("billing")
        .start(Start::Earliest)
        .ack_handler(move |d| {
            saw.lock().unwrap().push(d.to_string());
            if std::mem::replace(&mut skipped, true) {
                d.ack();
            }
            Ok::<_, String>(())
        })
        .unwrap();
    orders.publish("M0".to_string()).unwrap();
    while billing.stats().in_flight == 0 {
        thread::sleep(Duration::from_millis(1));
    }
    billing.redeliver_unacked();
    orders.publish("M1".to_string()).unwrap();
    assert!(audit.wait_idle(Duration::from_secs(10)));
    assert!(billing.wait_idle(Duration::from_secs(10)));
    let (a, b) = (audit.stats(), billing.stats());
    let saw = billing_saw.lock().unwrap();
    println!(
        "  next offsets: audit {}, billing {}",
        a.positions[0], b.positions[0]
    );
    println!("  billing saw {saw:?} ({} redelivery)", b.redelivered);
    assert_eq!((a.positions[0], b.positions[0]), (2, 2));
    assert_eq!(*saw, ["M0", "M0", "M1"]);
}

/// Four threads publish, three readers each receive everything, in log order.
fn fan_out(broker: &Broker) {
    println!("== 6. readers: 4 publishers, 3 readers, each reader gets every record ==");
    let orders = broker
        .topic::<Order>("order-log", TopicConfig::default())
        .unwrap();
    orders
        .publish(Order {
            publisher: 99,
            seq: 0,
        })
        .unwrap();
    // An early reader sees the record published before it subscribed; a late one does not.
    let readers: Vec<_> = [
        ("early", Start::Earliest),
        ("late", Start::Latest),
        ("slow", Start::Latest),
    ]
    .into_iter()
    .map(|(name, start)| {
        let mut reader = orders.reader(0, start).unwrap();
        thread::spawn(move || {
            let mut got = Vec::new();
            loop {
                match reader.next() {
                    Ok(record) => {
                        got.push(*record);
                        if name == "slow" {
                            thread::sleep(Duration::from_millis(1));
                        }
                    }
                    Err(ReadError::Closed) => break,
                    Err(e) => panic!("{name}: {e}"),
                }
            }
            (name, got)
        })
    })
    .collect();
    let publishers: Vec<_> = (0..4u32)
        .map(|publisher| {
            let orders = orders.clone();
            thread::spawn(move || {
                let mut producer = orders.producer().unwrap();
                for seq in 0..25 {
                    producer.publish(Order { publisher, seq }).unwrap();
                }
            })
        })
        .collect();
    for p in publishers {
        p.join().unwrap();
    }
    orders.close();
    for r in readers {
        let (name, got) = r.join().unwrap();
        check_publisher_order(name, &got);
        println!(
            "  {name:>5} reader received {} records; each publisher's 25 in order",
            got.len()
        );
    }
}

/// Readers can start anywhere in the retained log and seek back.
fn replay(broker: &Broker) {
    println!("== 7. replay: start at an offset or a time, seek back ==");
    let events = broker
        .topic::<String>("events", TopicConfig::default())
        .unwrap();
    let mut producer = events.producer().unwrap();
    for i in 0..5 {
        producer.publish(format!("morning-{i}")).unwrap();
    }
    thread::sleep(Duration::from_millis(5));
    let noon = SystemTime::now();
    thread::sleep(Duration::from_millis(5));
    let batch = producer
        .publish_batch((0..3).map(|i| format!("afternoon-{i}")))
        .unwrap();
    println!("  batch published at offsets {:?}", batch.offsets);
    let show = |r: Record<'_, String>| format!("{}@{}", r.value(), r.offset());
    let mut from_noon = events.reader(0, Start::Timestamp(noon)).unwrap();
    let first = show(from_noon.next().unwrap());
    println!("  reader from noon starts with {first}");
    assert_eq!(first, "afternoon-0@5");
    let mut from_2 = events.reader(0, Start::Offset(2)).unwrap();
    let b = from_2.next_batch(10).unwrap();
    let values: Vec<&String> = b.values().collect();
    println!(
        "  reader from offset 2 takes one batch of {}: {values:?}",
        b.len()
    );
    from_2.seek(Start::Earliest).unwrap();
    println!("  after seek(Earliest): {}", show(from_2.next().unwrap()));
    match events.reader(0, Start::Offset(100)) {
        Err(e) => println!("  start at offset 100 is refused: {e}"),
        Ok(_) => panic!("out-of-range start accepted"),
    }
}

/// Records with the same key land in the same partition, in order.
fn keyed(broker: &Broker) {
    println!("== 8. partitions by key ==");
    let trades = broker
        .topic::<u32>("trades", TopicConfig::default().partitions(4))
        .unwrap();
    let symbols = ["AAPL", "MSFT", "NVDA", "AMZN", "TSLA", "META"];
    let mut home = std::collections::HashMap::new();
    for i in 0..24u32 {
        let symbol = symbols[i as usize % symbols.len()];
        let at = trades.publish_keyed(symbol, i).unwrap();
        // The same key always lands in the same partition.
        assert_eq!(*home.entry(symbol).or_insert(at.partition), at.partition);
    }
    println!("  key -> partition: {home:?}");
    for p in 0..trades.partitions() {
        let mut reader = trades.reader(p, Start::Earliest).unwrap();
        let mut got = Vec::new();
        while let Ok(r) = reader.try_next() {
            got.push(*r);
        }
        println!("  partition {p}: {got:?}");
    }
}

/// Retention trims whole segments; a reader that fell behind is told how much it lost.
fn retention_and_lag(broker: &Broker) {
    println!("== 9. retention and lag ==");
    let config = TopicConfig::default().segment_size(16).max_records(32);
    let ticks = broker.topic::<u64>("ticks", config).unwrap();
    let mut reader = ticks.reader(0, Start::Earliest).unwrap();
    for i in 0..200 {
        ticks.publish(i).unwrap();
    }
    let stats = &ticks.stats().partitions[0];
    println!(
        "  published 200, retained {} (offsets {}..{}), {} segments",
        stats.retained, stats.start, stats.end, stats.segments
    );
    match reader.next() {
        Err(ReadError::Lagged(n)) => println!("  the idle reader is told: lagged by {n}"),
        other => panic!("expected lag, got {:?}", other.map(|r| *r)),
    }
    println!("  and continues at {}", *reader.next().unwrap());
}

/// A bounded topic: Block waits for the slow reader, Reject hands the value back.
fn back_pressure(broker: &Broker) {
    println!("== 10. back-pressure ==");
    let config = TopicConfig::default()
        .max_records(8)
        .overflow(Overflow::Reject);
    let jobs = broker.topic::<u32>("jobs", config).unwrap();
    let _slow = jobs.reader(0, Start::Earliest).unwrap();
    let mut refused = None;
    for i in 0..10 {
        if let Err(PublishError::Full(v)) = jobs.publish(i) {
            refused = Some(v);
            break;
        }
    }
    println!("  Reject: publish of {refused:?} refused while the reader lags 8 records");
    assert_eq!(refused, Some(8));

    let config = TopicConfig::default()
        .max_records(8)
        .overflow(Overflow::Block)
        .producers(Producers::Single);
    let work = broker.topic::<u32>("work", config).unwrap();
    let mut reader = work.reader(0, Start::Earliest).unwrap();
    let consumer = thread::spawn(move || {
        let mut n = 0;
        while let Ok(r) = reader.next() {
            assert_eq!(*r, n);
            n += 1;
            if n % 25 == 0 {
                thread::sleep(Duration::from_millis(2));
            }
        }
        n
    });
    let start = Instant::now();
    let mut producer = work.producer().unwrap();
    for i in 0..200 {
        producer.publish(i).unwrap();
    }
    drop(producer);
    work.close();
    let n = consumer.join().unwrap();
    println!(
        "  Block: 200 records through a capacity of 8 in {:?}, none lost ({n} read)",
        start.elapsed()
    );
    assert_eq!(n, 200);
}

/// Idle readers sleep in the kernel; a publish wakes exactly them.
fn parked_readers(broker: &Broker) {
    println!("== 11. parked readers ==");
    let config = TopicConfig::default().wait(WaitStrategy::default().yield_for(Duration::ZERO));
    let alerts = broker.topic::<&'static str>("alerts", config).unwrap();
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let mut reader = alerts.reader(0, Start::Earliest).unwrap();
            thread::spawn(move || *reader.next().unwrap())
        })
        .collect();
    while alerts.stats().partitions[0].parked_readers < 3 {
        thread::sleep(Duration::from_millis(1));
    }
    println!("  3 readers parked (no CPU while they wait)");
    alerts.publish("fire drill").unwrap();
    for r in readers {
        assert_eq!(r.join().unwrap(), "fire drill");
    }
    let stats = &alerts.stats().partitions[0];
    println!(
        "  one publish woke them: {} futex wake-ups for {} parks",
        stats.wakeups, stats.parks
    );
}

/// Consumer groups: members share the partitions; a second group sees everything again.
fn groups(broker: &Broker) {
    println!("== 12. consumer groups ==");
    let config = TopicConfig::default().partitions(4);
    let clicks = broker.topic::<u64>("clicks", config).unwrap();
    for i in 0..400 {
        clicks.publish_keyed(&(i % 40), i).unwrap();
    }
    let group = clicks.group("analytics").unwrap();
    let mut a = group.join("a").unwrap();
    println!(
        "  `a` joins an idle group and gets partitions {:?} at once",
        a.assignment()
    );
    let mut read_a = 0;
    while read_a < 150 {
        match a.poll(50) {
            Ok(batch) => read_a += batch.len(),
            Err(GroupError::Rebalanced(_)) => {} // the assignment, reported by the first poll
            Err(e) => panic!("{e}"),
        }
    }
    a.commit();
    println!("  `a` reads {read_a} records and commits");
    let mut b = group.join("b").unwrap();
    // `a` hears that partitions 2 and 3 go to `b`, commits, and lets go on its next poll.
    let mut rounds = 0;
    while b.assignment().is_empty() {
        match a.poll(50) {
            Err(GroupError::Rebalanced(r)) if !r.revoked.is_empty() => {
                println!(
                    "  `b` joins: `a` is told partitions {:?} are revoked, and commits",
                    r.revoked
                );
                a.commit();
            }
            Ok(batch) => {
                read_a += batch.len();
                a.commit();
            }
            _ => {}
        }
        let _ = b.poll(50);
        rounds += 1;
        assert!(rounds < 100, "hand-over did not finish");
    }
    println!(
        "  after the hand-over: a {:?}, b {:?}",
        a.assignment(),
        b.assignment()
    );
    let mut read_b = 0;
    loop {
        let mut progress = false;
        for m in [&mut a, &mut b] {
            if let Ok(batch) = m.poll(50) {
                let n = batch.len();
                if m.name() == "a" {
                    read_a += n;
                } else {
                    read_b += n;
                }
                m.commit();
                progress = true;
            }
        }
        if !progress {
            break;
        }
    }
    println!(
        "  group `analytics`: a read {read_a}, b read {read_b}: {} in all, each once",
        read_a + read_b
    );
    assert_eq!(read_a + read_b, 400);
    let stats = group.stats();
    println!(
        "  owners {:?}, committed {:?}",
        stats.owners, stats.committed
    );
    // Another group is independent: it reads everything again.
    let mut solo = clicks.group("archive").unwrap().join("only").unwrap();
    let mut read = 0;
    loop {
        match solo.poll(100) {
            Ok(batch) => read += batch.len(),
            Err(GroupError::Rebalanced(_)) => {}
            Err(_) => break,
        }
    }
    println!("  group `archive` (one member) reads all {read} as well");
    assert_eq!(read, 400);
}
