//! A tour of logbus, end to end: `cargo run --release --example tour`.
//!
//! Every scenario prints what happened and checks it, so the tour fails loudly if the engine
//! misbehaves.

use std::{
    thread,
    time::{Duration, Instant, SystemTime},
};

use logbus::{
    Broker, Overflow, Producers, PublishError, ReadError, Record, Start, TopicConfig, WaitStrategy,
};

/// An order: which publisher thread made it and its sequence number in that thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Order {
    publisher: u32,
    seq: u32,
}

fn main() {
    let broker = Broker::new();
    fan_out(&broker);
    replay(&broker);
    keyed(&broker);
    retention_and_lag(&broker);
    back_pressure(&broker);
    parked_readers(&broker);
    println!("\nTopics in the broker: {:?}", broker.topics());
    println!("Tour complete: every check passed.");
}

/// Four threads publish, three readers each receive everything, in log order.
fn fan_out(broker: &Broker) {
    println!("== 1. fan-out: 4 publishers, 3 readers ==");
    let orders = broker
        .topic::<Order>("orders", TopicConfig::default())
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
        println!(
            "  {name:>5} reader received {} records; each publisher's 25 in order",
            got.len()
        );
    }
}

/// Readers can start anywhere in the retained log and seek back.
fn replay(broker: &Broker) {
    println!("== 2. replay: start at an offset or a time, seek back ==");
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
    println!("== 3. partitions by key ==");
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
    println!("== 4. retention and lag ==");
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
    println!("== 5. back-pressure ==");
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
    println!("== 6. parked readers ==");
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
    println!("  one publish woke them: {} futex wake-ups", stats.wakeups);
}
