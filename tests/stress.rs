//! Many producers, many readers: offsets dense and unique (I1), every producer's order kept in
//! every reader (I3), nothing lost. Scaled by `LOGBUS_STRESS` (default 1; CI may lower it with 0).

use std::{collections::HashSet, thread};

use logbus::{Producers, ReadError, Start, Topic, TopicConfig};

fn scale() -> u64 {
    std::env::var("LOGBUS_STRESS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

/// Value = producer id in the high 16 bits, sequence number in the low 48.
fn value(producer: u64, seq: u64) -> u64 {
    producer << 48 | seq
}

/// How the producers publish.
#[derive(Clone, Copy, PartialEq)]
enum Via {
    /// A `Producer`, one record at a time.
    Producer,
    /// A `Producer`, batches of 1 to 17 records mixed with single records.
    Batches,
    /// `Topic::publish` on a clone of the topic: no producer held (see `Log::publish_unheld`).
    Topic,
    /// A `Producer` that publishes in turns of [`TURN`] records, one producer at a time: long
    /// enough alone to take the lease (`Log::try_lease`), which the next turn's first publish
    /// ends; every fourth turn's records go in batches of 100.
    Turns,
}

/// Records a producer publishes alone in `Via::Turns`: more than the 4,096 in a row that take
/// the lease.
const TURN: u64 = 5_000;

fn run(producers: u64, readers: usize, per_producer: u64, config: TopicConfig<u64>, via: Via) {
    let topic = Topic::<u64>::new("stress", config).unwrap();
    let turn = std::sync::Arc::new(std::sync::Mutex::new(()));
    let total = producers * per_producer;
    let reader_threads: Vec<_> = (0..readers)
        .map(|_| {
            let mut r = topic.reader(0, Start::Earliest).unwrap();
            thread::spawn(move || {
                let mut next_seq = vec![0u64; producers as usize];
                let mut expected_offset = 0u64;
                loop {
                    match r.next_batch(64) {
                        Ok(b) => {
                            for rec in b.iter() {
                                assert_eq!(rec.offset(), expected_offset, "dense, in order");
                                expected_offset += 1;
                                let (p, seq) = ((*rec >> 48) as usize, *rec & ((1 << 48) - 1));
                                assert_eq!(seq, next_seq[p], "producer {p}'s order");
                                next_seq[p] += 1;
                            }
                        }
                        Err(ReadError::Closed) => break,
                        Err(e) => panic!("{e}"),
                    }
                }
                (expected_offset, next_seq)
            })
        })
        .collect();
    let offsets: Vec<_> = (0..producers)
        .map(|p| {
            let topic = topic.clone();
            let turn = turn.clone();
            thread::spawn(move || {
                let mut offsets = Vec::with_capacity(per_producer as usize);
                if via == Via::Topic {
                    for seq in 0..per_producer {
                        offsets.push(topic.publish(value(p, seq)).unwrap().offset);
                    }
                    return offsets;
                }
                let mut producer = topic.producer().unwrap();
                let mut seq = 0;
                if via == Via::Turns {
                    for (i, start) in (0..per_producer).step_by(TURN as usize).enumerate() {
                        let end = (start + TURN).min(per_producer);
                        let _alone = turn.lock().unwrap();
                        if i % 4 == 3 {
                            for from in (start..end).step_by(100) {
                                let to = (from + 100).min(end);
                                let b = producer
                                    .publish_batch((from..to).map(|s| value(p, s)))
                                    .unwrap();
                                offsets.extend(b.offsets);
                            }
                        } else {
                            for s in start..end {
                                offsets.push(producer.publish(value(p, s)).unwrap().offset);
                            }
                        }
                    }
                    return offsets;
                }
                while seq < per_producer {
                    if via == Via::Batches && seq % 3 == 0 {
                        let n = (per_producer - seq).min(1 + seq % 17);
                        let b = producer
                            .publish_batch((seq..seq + n).map(|s| value(p, s)))
                            .unwrap();
                        offsets.extend(b.offsets);
                        seq += n;
                    } else {
                        offsets.push(producer.publish(value(p, seq)).unwrap().offset);
                        seq += 1;
                    }
                }
                offsets
            })
        })
        .collect();
    let mut all = HashSet::new();
    for h in offsets {
        for o in h.join().unwrap() {
            assert!(all.insert(o), "offset {o} handed out twice (I1)");
        }
    }
    assert_eq!(all.len() as u64, total);
    assert!(
        all.iter().all(|&o| o < total),
        "dense: offsets are exactly 0..total"
    );
    topic.close();
    for h in reader_threads {
        let (read, seqs) = h.join().unwrap();
        assert_eq!(read, total);
        assert!(seqs.iter().all(|&s| s == per_producer));
    }
}

#[test]
fn four_producers_three_readers() {
    let n = 25_000 * scale().max(1);
    run(
        4,
        3,
        n,
        TopicConfig::default().segment_size(64),
        Via::Producer,
    );
}

/// Producers that take turns, each long enough alone to take the lease, in small segments and
/// under a capacity that makes the holder wait for room: each turn's first publish ends the last
/// holder's lease, and offsets stay dense and unique across every hand-over.
#[test]
fn producers_taking_turns_hand_the_lease_over() {
    let n = 4 * TURN * scale().max(1);
    run(3, 2, n, TopicConfig::default().segment_size(64), Via::Turns);
    let ring = TopicConfig::default()
        .segment_size(64)
        .max_records(1_024)
        .overflow(logbus::Overflow::Block);
    run(3, 2, n, ring, Via::Turns);
}

/// The convenience path from many threads, across many small segments: each write under a pin
/// lands in the right slot of its segment. (Its race with retention is in `retention.rs`.)
#[test]
fn four_threads_publish_through_the_topic() {
    let n = 25_000 * scale().max(1);
    run(4, 2, n, TopicConfig::default().segment_size(64), Via::Topic);
}

#[test]
fn four_producers_batches_default_segments() {
    let n = 25_000 * scale().max(1);
    run(4, 2, n, TopicConfig::default(), Via::Batches);
}

/// The convenience path on a single-producer topic: the role claimed per record, the record
/// written under a pin and published by the watermark.
#[test]
fn single_producer_publishes_through_the_topic() {
    let n = 100_000 * scale().max(1);
    let config = TopicConfig::default()
        .producers(Producers::Single)
        .segment_size(64);
    run(1, 3, n, config, Via::Topic);
}

#[test]
fn single_producer_many_readers() {
    let n = 200_000 * scale().max(1);
    run(
        1,
        4,
        n,
        TopicConfig::default().producers(Producers::Single),
        Via::Batches,
    );
}

#[test]
fn readers_park_and_wake_when_producers_pause() {
    // Producers pause between bursts long enough for readers to park; nothing may be lost.
    let topic = Topic::<u64>::new(
        "pauses",
        TopicConfig::default().wait(logbus::WaitStrategy::park_at_once()),
    )
    .unwrap();
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let mut r = topic.reader(0, Start::Earliest).unwrap();
            thread::spawn(move || {
                let mut n = 0u64;
                while let Ok(rec) = r.next() {
                    assert_eq!(*rec, n);
                    n += 1;
                }
                n
            })
        })
        .collect();
    let mut p = topic.producer().unwrap();
    for i in 0..2_000u64 {
        p.publish(i).unwrap();
        if i % 100 == 0 {
            thread::sleep(std::time::Duration::from_micros(300));
        }
    }
    topic.close();
    for r in readers {
        assert_eq!(r.join().unwrap(), 2_000);
    }
}

/// Keyed and unkeyed records from four producers racing into the same small segments: the first
/// keyed publish into a segment allocates its key array (two producers may race to do it), and
/// every record reads back with its own key or none. Each producer keys its records with the
/// value's low bits, so records with equal low bits carry equal key hashes.
#[test]
fn racing_producers_allocate_key_arrays_once() {
    let per = 5_000 * scale().max(1);
    let t = Topic::<u64>::new(
        "keys",
        TopicConfig::default().segment_size(8).timestamps(false),
    )
    .unwrap();
    let handles: Vec<_> = (0..4u64)
        .map(|p| {
            let t = t.clone();
            thread::spawn(move || {
                let mut producer = t.producer().unwrap();
                for k in 0..per {
                    let v = value(p, k);
                    if k % 3 == 0 {
                        producer.publish(v).unwrap();
                    } else {
                        producer.publish_keyed(&(v % 16), v).unwrap();
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    t.close();
    let mut r = t.reader(0, Start::Earliest).unwrap();
    let mut key_of = std::collections::HashMap::new();
    let mut n = 0;
    loop {
        match r.next() {
            Ok(rec) => {
                let v = *rec;
                let seq = v & ((1 << 48) - 1);
                match rec.key() {
                    None => assert_eq!(seq % 3, 0, "record {v:#x} lost its key"),
                    Some(h) => {
                        assert_ne!(seq % 3, 0, "record {v:#x} got a key it was not given");
                        assert_eq!(
                            *key_of.entry(v % 16).or_insert(h),
                            h,
                            "equal keys, equal hashes"
                        );
                    }
                }
                n += 1;
            }
            Err(ReadError::Closed) => break,
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(n, 4 * per);
    assert_eq!(key_of.len(), 16);
}
