//! Readers, start positions, seeks, batches, timeouts and closing, through the public API.

use std::{
    thread,
    time::{Duration, SystemTime},
};

use logbus::{Broker, Error, Producers, ReadError, Start, Topic, TopicConfig};

mod common;
use common::publish_either_side_of_a_time;

fn topic(config: TopicConfig<u64>) -> Topic<u64> {
    Topic::new("t", config).unwrap()
}

fn both_modes() -> [TopicConfig<u64>; 2] {
    [
        TopicConfig::default().segment_size(8),
        TopicConfig::default()
            .segment_size(8)
            .producers(Producers::Single),
    ]
}

#[test]
fn every_reader_gets_every_record_in_order() {
    for config in both_modes() {
        let t = topic(config);
        let mut a = t.reader(0, Start::Earliest).unwrap();
        let mut b = t.reader(0, Start::Earliest).unwrap();
        let mut p = t.producer().unwrap();
        for i in 0..100u64 {
            assert_eq!(p.publish(i * 3).unwrap().offset, i);
        }
        for r in [&mut a, &mut b] {
            for i in 0..100u64 {
                let rec = r.next().unwrap();
                assert_eq!(rec.offset(), i);
                assert_eq!(*rec, i * 3);
                assert_eq!(rec.partition(), 0);
            }
            assert_eq!(r.try_next().unwrap_err(), ReadError::Empty);
        }
    }
}

#[test]
fn start_positions() {
    for config in both_modes() {
        let t = topic(config);
        let before = SystemTime::now();
        let middle = publish_either_side_of_a_time(&t, 10);
        assert_eq!(t.reader(0, Start::Earliest).unwrap().position(), 0);
        assert_eq!(t.reader(0, Start::Latest).unwrap().position(), 20);
        assert_eq!(t.reader(0, Start::Offset(7)).unwrap().position(), 7);
        assert_eq!(t.reader(0, Start::Offset(20)).unwrap().position(), 20);
        assert_eq!(t.reader(0, Start::Timestamp(before)).unwrap().position(), 0);
        let mut r = t.reader(0, Start::Timestamp(middle)).unwrap();
        assert_eq!(r.position(), 10);
        assert_eq!(*r.next().unwrap(), 10);
        let future = SystemTime::now() + Duration::from_secs(3600);
        assert_eq!(
            t.reader(0, Start::Timestamp(future)).unwrap().position(),
            20
        );
        match t.reader(0, Start::Offset(21)) {
            Err(Error::OffsetOutOfRange {
                offset: 21,
                start: 0,
                end: 20,
            }) => {}
            other => panic!("unexpected {other:?}"),
        }
        assert!(matches!(
            t.reader(1, Start::Earliest),
            Err(Error::NoSuchPartition {
                partition: 1,
                partitions: 1
            })
        ));
    }
}

#[test]
fn timestamp_start_never_skips_a_record_published_after_t() {
    let t = topic(TopicConfig::default());
    for i in 0..3 {
        t.publish(i).unwrap();
    }
    let at = SystemTime::now();
    t.publish(3).unwrap();
    let mut r = t.reader(0, Start::Timestamp(at)).unwrap();
    // It may start a little early (same clock tick), but it reaches 3 without skipping it.
    loop {
        let v = *r.next().unwrap();
        if v == 3 {
            break;
        }
        assert!(v < 3);
    }
}

#[test]
fn latest_skips_what_was_published_before() {
    let t = topic(TopicConfig::default());
    t.publish(1).unwrap();
    let mut r = t.reader(0, Start::Latest).unwrap();
    t.publish(2).unwrap();
    assert_eq!(*r.next().unwrap(), 2);
}

#[test]
fn seek_moves_and_refuses_out_of_range() {
    let t = topic(TopicConfig::default().segment_size(4));
    for i in 0..10 {
        t.publish(i).unwrap();
    }
    let mut r = t.reader(0, Start::Earliest).unwrap();
    r.seek(Start::Offset(6)).unwrap();
    assert_eq!(*r.next().unwrap(), 6);
    r.seek(Start::Offset(1)).unwrap();
    assert_eq!(*r.next().unwrap(), 1);
    assert_eq!(
        r.seek(Start::Offset(11)).unwrap_err(),
        Error::OffsetOutOfRange {
            offset: 11,
            start: 0,
            end: 10
        }
    );
    // A refused seek leaves the reader where it was.
    assert_eq!(r.position(), 2);
    r.seek(Start::Latest).unwrap();
    assert_eq!(r.try_next().unwrap_err(), ReadError::Empty);
    assert_eq!(r.lag(), 0);
    r.seek(Start::Earliest).unwrap();
    assert_eq!(r.lag(), 10);
}

#[test]
fn batches_are_contiguous_and_stop_at_segment_ends() {
    for config in both_modes() {
        let t = topic(config);
        let mut p = t.producer().unwrap();
        let b = p.publish_batch(0..20u64).unwrap();
        assert_eq!(b.offsets, 0..20);
        let mut r = t.reader(0, Start::Offset(2)).unwrap();
        let mut seen = Vec::new();
        while seen.len() < 18 {
            let batch = r.next_batch(100).unwrap();
            assert!(batch.len() <= 8, "a batch never spans segments");
            let first = batch.first_offset();
            for (k, rec) in batch.iter().enumerate() {
                assert_eq!(rec.offset(), first + k as u64);
                seen.push(*rec);
            }
        }
        assert_eq!(seen, (2..20).collect::<Vec<_>>());
        let mut r = t.reader(0, Start::Earliest).unwrap();
        let small = r.next_batch(3).unwrap();
        assert_eq!(small.values().copied().collect::<Vec<_>>(), vec![0, 1, 2]);
        assert_eq!(
            r.try_next_batch(0).unwrap().len(),
            1,
            "max 0 is treated as 1"
        );
        assert_eq!(r.position(), 4);
    }
}

#[test]
fn timeouts() {
    let t = topic(TopicConfig::default());
    let mut r = t.reader(0, Start::Earliest).unwrap();
    assert_eq!(
        r.next_timeout(Duration::from_millis(30)).unwrap_err(),
        ReadError::Timeout
    );
    assert_eq!(
        r.next_timeout(Duration::ZERO).unwrap_err(),
        ReadError::Timeout
    );
    assert_eq!(
        r.next_batch_timeout(4, Duration::from_millis(1))
            .unwrap_err(),
        ReadError::Timeout
    );
    let t2 = t.clone();
    let h = thread::spawn(move || {
        thread::sleep(Duration::from_millis(50));
        t2.publish(9).unwrap();
    });
    assert_eq!(*r.next_timeout(Duration::from_secs(60)).unwrap(), 9);
    h.join().unwrap();
    // A huge timeout does not overflow.
    t.publish(10).unwrap();
    assert_eq!(*r.next_timeout(Duration::MAX).unwrap(), 10);
}

#[test]
fn close_drains_then_reports_closed() {
    for config in both_modes() {
        let t = topic(config);
        let mut r = t.reader(0, Start::Earliest).unwrap();
        for i in 0..5 {
            t.publish(i).unwrap();
        }
        t.close();
        assert!(t.is_closed());
        let err = t.publish(99).unwrap_err();
        assert_eq!(err.into_inner(), 99, "a refused value is handed back");
        for i in 0..5 {
            assert_eq!(*r.next().unwrap(), i);
        }
        assert_eq!(r.next().unwrap_err(), ReadError::Closed);
        assert_eq!(r.try_next().unwrap_err(), ReadError::Closed);
        assert_eq!(
            r.next_timeout(Duration::from_secs(5)).unwrap_err(),
            ReadError::Closed
        );
        // Closing twice is harmless.
        t.close();
        assert_eq!(r.next().unwrap_err(), ReadError::Closed);
    }
}

#[test]
fn close_wakes_a_parked_reader() {
    let t = topic(TopicConfig::default());
    let mut r = t.reader(0, Start::Earliest).unwrap();
    let h = thread::spawn(move || r.next().map(|v| *v));
    // Wait until the reader is parked (it parks quickly: the default yield budget is 200 µs).
    while t.stats().partitions[0].parked_readers == 0 {
        thread::sleep(Duration::from_millis(1));
    }
    t.close();
    assert_eq!(h.join().unwrap(), Err(ReadError::Closed));
}

#[test]
fn broker_delete_closes_readers() {
    let broker = Broker::new();
    let t = broker.topic::<u64>("gone", TopicConfig::default()).unwrap();
    let mut r = t.reader(0, Start::Earliest).unwrap();
    t.publish(1).unwrap();
    let h = thread::spawn(move || {
        let first = *r.next().unwrap();
        (first, r.next().map(|v| *v))
    });
    thread::sleep(Duration::from_millis(20));
    broker.delete("gone").unwrap();
    assert_eq!(h.join().unwrap(), (1, Err(ReadError::Closed)));
    assert!(matches!(t.publish(2), Err(logbus::PublishError::Closed(2))));
}

#[test]
fn records_carry_timestamp_and_key() {
    let t = topic(TopicConfig::default().partitions(3));
    let before = SystemTime::now();
    let a = t.publish_keyed("user-7", 1).unwrap();
    let b = t.publish_keyed("user-7", 2).unwrap();
    let after = SystemTime::now();
    assert_eq!(a.partition, b.partition);
    assert_eq!(b.offset, a.offset + 1);
    let mut r = t.reader(a.partition, Start::Offset(a.offset)).unwrap();
    let rec = r.next().unwrap();
    assert!(rec.key().is_some());
    let key = rec.key();
    // Stamps are within 100 µs of the wall clock.
    let slack = Duration::from_micros(100);
    assert!(rec.timestamp() + slack >= before && rec.timestamp() <= after + slack);
    assert_eq!(r.next().unwrap().key(), key);
    let plain = t.publish_to(0, 5).unwrap();
    let mut r0 = t.reader(0, Start::Offset(plain.offset)).unwrap();
    assert_eq!(r0.next().unwrap().key(), None);
}

#[test]
fn keys_spread_over_partitions_stably() {
    let t = topic(TopicConfig::default().partitions(4));
    let mut used = [0u32; 4];
    for k in 0..400u32 {
        let first = t.publish_keyed(&k, u64::from(k)).unwrap().partition;
        let second = t.publish_keyed(&k, u64::from(k)).unwrap().partition;
        assert_eq!(first, second);
        used[first as usize] += 1;
    }
    assert!(used.iter().all(|&n| n > 50), "keys cluster: {used:?}");
    // The same key maps to the same partition in a new topic too (the hash is not seeded).
    let other = topic(TopicConfig::default().partitions(4));
    assert_eq!(
        t.publish_keyed("stable", 0).unwrap().partition,
        other.publish_keyed("stable", 0).unwrap().partition
    );
}

#[test]
fn unkeyed_publishes_round_robin() {
    let t = topic(TopicConfig::default().partitions(3));
    let parts: Vec<u32> = (0..6).map(|i| t.publish(i).unwrap().partition).collect();
    let mut sorted = parts.clone();
    sorted.sort();
    assert_eq!(sorted, vec![0, 0, 1, 1, 2, 2]);
    let mut p = t.producer().unwrap();
    let parts: Vec<u32> = (0..3).map(|i| p.publish(i).unwrap().partition).collect();
    assert_eq!(parts, vec![0, 1, 2]);
    assert!(p.publish_to(3, 1).is_err());
    assert_eq!(p.publish_to(3, 42).unwrap_err().into_inner(), 42);
    assert_eq!(t.publish_to(9, 43).unwrap_err().into_inner(), 43);
}

#[test]
fn single_producer_role_is_exclusive() {
    let t = topic(TopicConfig::default().single_producer());
    let p = t.producer().unwrap();
    assert_eq!(t.producer().unwrap_err(), Error::ProducerInUse);
    assert!(matches!(t.publish(1), Err(logbus::PublishError::Busy(1))));
    assert!(matches!(t.publish_batch([1, 2]), Err(logbus::PublishError::Busy(v)) if v == [1, 2]));
    drop(p);
    // The role passes on, and offsets continue where the last producer stopped.
    let mut p = t.producer().unwrap();
    p.publish(5).unwrap();
    drop(p);
    assert_eq!(t.publish(6).unwrap().offset, 1);
    let mut p = t.producer().unwrap();
    assert_eq!(p.publish(7).unwrap().offset, 2);
}

/// The single producer's offsets survive every way of publishing and the role changing hands,
/// on the short path (no time stamps, bounded: the set-up of a ring buffer) across segments: each
/// producer continues where the last one stopped, and a refused publish takes no offset.
#[test]
fn single_producer_offsets_stay_dense_across_paths_and_producers() {
    let t = topic(
        TopicConfig::default()
            .single_producer()
            .timestamps(false)
            .segment_size(4)
            .max_records(64)
            .overflow(logbus::Overflow::Reject),
    );
    let mut r = t.reader(0, Start::Earliest).unwrap();
    let mut p = t.producer().unwrap();
    for v in 0..6 {
        assert_eq!(p.publish(v).unwrap().offset, v);
    }
    assert_eq!(p.publish_batch(6..9).unwrap().offsets, 6..9);
    assert_eq!(p.publish_keyed("k", 9).unwrap().offset, 9);
    drop(p);
    assert_eq!(t.publish(10).unwrap().offset, 10);
    let mut p = t.producer().unwrap();
    assert_eq!(p.publish(11).unwrap().offset, 11);
    assert_eq!(p.publish_batch(std::iter::empty()).unwrap().offsets, 12..12);
    // Fill the room: the refused publish hands its value back and takes no offset.
    let mut next = 12;
    let refused = loop {
        match p.publish(next) {
            Ok(rec) => {
                assert_eq!(rec.offset, next);
                next += 1;
                assert!(next < 1000, "a bounded topic never refused");
            }
            Err(e) => break e.into_inner(),
        }
    };
    assert_eq!(refused, next);
    let got: Vec<u64> = (0..next).map(|_| *r.next().unwrap().value()).collect();
    assert_eq!(got, (0..next).collect::<Vec<_>>());
    drop(p);
    let mut p = t.producer().unwrap();
    assert_eq!(
        p.publish(next).unwrap().offset,
        next,
        "room again once read"
    );
}

/// A `Producer` of a one-partition single-producer topic without time stamps keeps its place in
/// itself, by value, and takes it from its log again after anything else used its writer (see
/// `Producer::fast`). Every other way of publishing, a refused target, and the close, in between
/// single publishes, across segments of four: each publish takes the next offset, the reader gets
/// every record in order, and after the close a publish hands its value back.
#[test]
fn a_producer_keeps_its_place_across_every_other_way_of_publishing() {
    let t = topic(
        TopicConfig::default()
            .single_producer()
            .timestamps(false)
            .segment_size(4),
    );
    let mut r = t.reader(0, Start::Earliest).unwrap();
    let mut p = t.producer().unwrap();
    let mut next = 0;
    let single = |p: &mut logbus::Producer<u64>, next: &mut u64| {
        for _ in 0..3 {
            assert_eq!(p.publish(*next).unwrap().offset, *next);
            *next += 1;
        }
    };
    for round in 0..4 {
        single(&mut p, &mut next);
        let slice = [next, next + 1];
        assert_eq!(p.publish_slice(&slice).unwrap().offsets, next..next + 2);
        next += 2;
        single(&mut p, &mut next);
        assert_eq!(p.publish_to(0, next).unwrap().offset, next);
        next += 1;
        assert!(matches!(
            p.publish_to(1, 999),
            Err(logbus::PublishToError::Target(
                Error::NoSuchPartition {
                    partition: 1,
                    partitions: 1
                },
                999
            ))
        ));
        single(&mut p, &mut next);
        assert_eq!(p.publish_keyed(&round, next).unwrap().offset, next);
        next += 1;
        single(&mut p, &mut next);
        assert_eq!(
            p.publish_batch(next..next + 5).unwrap().offsets,
            next..next + 5
        );
        next += 5;
    }
    single(&mut p, &mut next);
    let got: Vec<u64> = (0..next).map(|_| *r.next().unwrap().value()).collect();
    assert_eq!(got, (0..next).collect::<Vec<_>>());
    t.close();
    assert!(matches!(p.publish(next), Err(logbus::PublishError::Closed(v)) if v == next));
    assert_eq!(r.try_next().unwrap_err(), ReadError::Closed);
}

/// A single producer keeps a private copy of its next offset only while some reader waits at the
/// published end between records, and reads the watermark otherwise (see `Writer::next`). Its
/// readers switch it back and forth as the stream alternates between bursts (long runs: nobody
/// watches) and paced records (each reader keeps finding nothing: they watch), one of them
/// dropped and replaced halfway. Whatever the switches' timing, every publish takes the next
/// offset and every reader gets every record in order.
#[test]
fn single_producer_records_stay_dense_while_readers_switch_between_streaming_and_watching() {
    const ROUNDS: u64 = 12;
    const BURST: u64 = 3000;
    const PACED: u64 = 30;
    let total = ROUNDS * (BURST + PACED);
    let t = topic(
        TopicConfig::default()
            .single_producer()
            .timestamps(false)
            .max_records(1 << 12)
            .overflow(logbus::Overflow::Block),
    );
    let read = |mut r: logbus::Reader<u64>, from: u64, to: u64| {
        thread::spawn(move || {
            let mut next = from;
            while next < to {
                for v in r.next_batch(4096).unwrap().values() {
                    assert_eq!(*v, next, "records out of order");
                    next += 1;
                }
            }
            next
        })
    };
    let whole = read(t.reader(0, Start::Earliest).unwrap(), 0, total);
    let first_half = read(t.reader(0, Start::Earliest).unwrap(), 0, total / 2);
    let mut second_half = None;
    let mut p = t.producer().unwrap();
    let mut next = 0;
    for round in 0..ROUNDS {
        if round == ROUNDS / 2 {
            // The role changes hands with whichever way the writer kept its offset.
            drop(p);
            second_half = Some(read(t.reader(0, Start::Offset(next)).unwrap(), next, total));
            p = t.producer().unwrap();
        }
        for _ in 0..BURST {
            assert_eq!(p.publish(next).unwrap().offset, next);
            next += 1;
        }
        for _ in 0..PACED {
            thread::sleep(Duration::from_micros(20));
            assert_eq!(p.publish(next).unwrap().offset, next);
            next += 1;
        }
    }
    assert_eq!(whole.join().unwrap(), total);
    assert!(first_half.join().unwrap() >= total / 2);
    assert_eq!(second_half.unwrap().join().unwrap(), total);
}

/// A producer spreads its publishes round-robin over the partitions on every kind of topic, the
/// single producer's plain ones included (whose one-partition publish skips the partition pick),
/// and each partition holds its records densely and in order, across segment boundaries.
#[test]
fn a_producer_goes_round_robin_over_partitions_on_every_kind_of_topic() {
    for single in [true, false] {
        for timestamps in [true, false] {
            for partitions in [1u32, 3] {
                let mut config = TopicConfig::default()
                    .segment_size(4)
                    .partitions(partitions)
                    .timestamps(timestamps);
                if single {
                    config = config.single_producer();
                }
                let case = format!("single {single}, timestamps {timestamps}, {partitions}");
                let t = topic(config);
                let mut p = t.producer().unwrap();
                let mut want = vec![Vec::new(); partitions as usize];
                for v in 0..30u64 {
                    let at = p.publish(v).unwrap();
                    let part = (v % u64::from(partitions)) as usize;
                    assert_eq!(at.partition as usize, part, "{case}: record {v}");
                    assert_eq!(at.offset, want[part].len() as u64, "{case}: record {v}");
                    want[part].push(v);
                }
                t.close();
                for (part, want) in want.iter().enumerate() {
                    let mut r = t.reader(part as u32, Start::Earliest).unwrap();
                    let got: Vec<u64> = r.iter().map(|rec| rec.unwrap().value).collect();
                    assert_eq!(&got, want, "{case}: partition {part}");
                }
            }
        }
    }
}

#[test]
fn a_panicking_batch_iterator_publishes_nothing() {
    for config in both_modes() {
        let t = topic(config);
        let mut r = t.reader(0, Start::Earliest).unwrap();
        let mut p = t.producer().unwrap();
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            p.publish_batch((0..10u64).map(|i| if i == 5 { panic!("bad iterator") } else { i }))
        }));
        assert!(outcome.is_err());
        // Nothing was reserved: the next publish gets offset 0 and the reader sees it.
        assert_eq!(p.publish(42).unwrap().offset, 0);
        assert_eq!(*r.next().unwrap(), 42);
        assert_eq!(r.try_next().unwrap_err(), ReadError::Empty);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            t.publish_batch((0..3u64).map(|_| -> u64 { panic!("bad") }))
        }));
        assert!(outcome.is_err());
        drop(p);
        assert_eq!(t.publish(43).unwrap().offset, 1);
    }
}

#[test]
fn empty_batch_is_fine() {
    let t = topic(TopicConfig::default());
    let b = t.publish_batch(Vec::new()).unwrap();
    assert!(b.offsets.is_empty());
    assert_eq!(t.publish(1).unwrap().offset, 0);
}

#[test]
fn stats_report_positions_and_lag() {
    let t = topic(TopicConfig::default().segment_size(4));
    let mut r = t.reader(0, Start::Earliest).unwrap();
    for i in 0..10 {
        t.publish(i).unwrap();
    }
    r.next().unwrap();
    r.next().unwrap();
    let s = t.stats();
    let p = &s.partitions[0];
    assert_eq!((p.start, p.end, p.retained), (0, 10, 10));
    assert_eq!(p.readers.len(), 1);
    // Positions are reported once per batch: the reader took offsets 0..4 (one segment) at once.
    assert_eq!(p.readers[0].position, 0);
    assert_eq!(r.position(), 2);
    assert_eq!(r.lag(), 8);
    assert!(
        p.segments >= 3,
        "10 records in segments of 4, plus one ahead"
    );
    drop(r);
    assert!(t.stats().partitions[0].readers.is_empty());
}

/// A reader's position, as others see it (statistics; publishers waiting for room), is stored at
/// its look-ups once it took records: a reader that only polls and never waits still shows where
/// it is after its next look, whether that look finds records or not.
#[test]
fn a_polling_reader_stores_its_position_at_its_next_look() {
    for config in both_modes() {
        let t = topic(config);
        let mut r = t.reader(0, Start::Earliest).unwrap();
        let stored = || t.stats().partitions[0].readers[0].position;
        for i in 0..4 {
            t.publish(i).unwrap();
        }
        for i in 0..4 {
            assert_eq!(r.try_next().unwrap().value(), &i);
        }
        assert_eq!(stored(), 0, "the look that found the four came before them");
        assert_eq!(r.try_next().unwrap_err(), ReadError::Empty);
        assert_eq!(stored(), 4, "the empty look stored it");
        t.publish(4).unwrap();
        assert_eq!(r.try_next().unwrap().value(), &4);
        assert_eq!(stored(), 4);
        t.publish(5).unwrap();
        assert_eq!(r.try_next().unwrap().value(), &5);
        assert_eq!(stored(), 5, "a look that finds records stores it too");
        assert_eq!(r.position(), 6);
    }
}

/// A reader polling `try_next` at the end of the log, many times over (the look a single
/// producer's reader then runs is its watermark's load and the close check), still sees what
/// comes: records in the next segment, the exact lag when retention passes it, and the close.
#[test]
fn a_reader_polling_at_the_end_sees_records_lag_and_close() {
    for config in both_modes() {
        let t = topic(
            config
                .max_records(16)
                .overflow(logbus::Overflow::DropOldest),
        );
        let mut r = t.reader(0, Start::Earliest).unwrap();
        let poll_empty = |r: &mut logbus::Reader<u64>| {
            for _ in 0..100 {
                assert_eq!(r.try_next().unwrap_err(), ReadError::Empty);
                assert_eq!(r.try_next_batch(4).unwrap_err(), ReadError::Empty);
            }
        };
        poll_empty(&mut r);
        // Up to the segment's end (8 slots), then past it while the reader polls between.
        for i in 0..8 {
            t.publish(i).unwrap();
        }
        let first: Vec<u64> = r.try_next_batch(100).unwrap().values().copied().collect();
        assert_eq!(
            first,
            (0..8).collect::<Vec<_>>(),
            "a batch stops at the segment's end"
        );
        poll_empty(&mut r);
        t.publish(8).unwrap();
        assert_eq!(*r.try_next().unwrap(), 8, "the next segment's first record");
        poll_empty(&mut r);
        // Retention (16 records) passes the polling reader: the lag comes whole, once.
        for i in 9..60 {
            t.publish(i).unwrap();
        }
        let start = t.stats().partitions[0].start;
        assert!(start > 9, "retention passed the reader");
        assert_eq!(r.try_next().unwrap_err(), ReadError::Lagged(start - 9));
        for i in start..60 {
            assert_eq!(*r.try_next().unwrap(), i);
        }
        poll_empty(&mut r);
        assert_eq!(t.stats().partitions[0].readers[0].position, 60, "stored");
        t.close();
        assert_eq!(r.try_next().unwrap_err(), ReadError::Closed);
        assert_eq!(r.try_next_batch(4).unwrap_err(), ReadError::Closed);
    }
}

#[test]
fn topics_without_timestamps() {
    let t = topic(TopicConfig::default().timestamps(false));
    t.publish_keyed("k", 1).unwrap();
    let mut r = t.reader(0, Start::Earliest).unwrap();
    let rec = r.next().unwrap();
    assert_eq!(rec.timestamp(), std::time::UNIX_EPOCH);
    assert!(rec.key().is_some(), "keys are kept");
    assert!(matches!(
        t.reader(0, Start::Timestamp(SystemTime::now())),
        Err(Error::InvalidConfig(_))
    ));
    assert!(matches!(
        Topic::<u64>::new(
            "x",
            TopicConfig::default()
                .timestamps(false)
                .max_age(Duration::from_secs(1))
        ),
        Err(Error::InvalidConfig(_))
    ));
}

/// Every record a reader of partition `p` of `t` holds now, as (offset, value).
fn drain(t: &Topic<u64>, p: u32) -> Vec<(u64, u64)> {
    let mut r = t.reader(p, Start::Earliest).unwrap();
    let mut seen = Vec::new();
    while let Ok(batch) = r.try_next_batch(usize::MAX) {
        seen.extend(batch.iter().map(|rec| (rec.offset(), *rec)));
    }
    seen
}

#[test]
fn a_published_slice_lands_in_order_across_segments_and_the_slice_is_kept() {
    let configs = [
        TopicConfig::default().segment_size(8),
        TopicConfig::default().segment_size(8).single_producer(),
        TopicConfig::default()
            .segment_size(8)
            .single_producer()
            .timestamps(false)
            .max_records(64)
            .overflow(logbus::Overflow::Block),
        // Byte retention: the values go in one by one, each with its size.
        TopicConfig::default()
            .segment_size(8)
            .single_producer()
            .max_bytes(1 << 20, |_: &u64| 8),
    ];
    for config in configs {
        let t = topic(config.clone());
        let mut p = t.producer().unwrap();
        let first: Vec<u64> = (100..105).collect();
        let second: Vec<u64> = (200..220).collect();
        assert_eq!(p.publish_slice(&first).unwrap().offsets, 0..5);
        // Spans three segments of 8, starting inside one.
        assert_eq!(p.publish_slice(&second).unwrap().offsets, 5..25);
        assert_eq!(p.publish_slice(&[]).unwrap().offsets, 25..25);
        assert_eq!(first, (100..105).collect::<Vec<_>>(), "{config:?}");
        let want: Vec<(u64, u64)> = first
            .iter()
            .chain(&second)
            .copied()
            .enumerate()
            .map(|(o, v)| (o as u64, v))
            .collect();
        assert_eq!(drain(&t, 0), want, "{config:?}");
        // The next record follows the slices.
        assert_eq!(p.publish(1).unwrap().offset, 25, "{config:?}");
    }
}

#[test]
fn slices_go_round_robin_over_partitions_like_batches() {
    let t = topic(TopicConfig::default().partitions(2).segment_size(8));
    let mut p = t.producer().unwrap();
    assert_eq!(p.publish_slice(&[1, 2, 3]).unwrap().partition, 0);
    assert_eq!(p.publish_slice(&[4, 5]).unwrap().partition, 1);
    assert_eq!(drain(&t, 0), vec![(0, 1), (1, 2), (2, 3)]);
    assert_eq!(drain(&t, 1), vec![(0, 4), (1, 5)]);
}

#[test]
fn a_refused_slice_publishes_nothing() {
    let t = topic(
        TopicConfig::default()
            .segment_size(4)
            .single_producer()
            .max_records(8)
            .overflow(logbus::Overflow::Reject),
    );
    let _r = t.reader(0, Start::Earliest).unwrap();
    let mut p = t.producer().unwrap();
    let too_many: Vec<u64> = (0..64).collect();
    assert!(matches!(
        p.publish_slice(&too_many),
        Err(logbus::PublishError::TooLarge(()))
    ));
    assert_eq!(p.publish_slice(&[7, 8]).unwrap().offsets, 0..2);
    t.close();
    assert!(matches!(
        p.publish_slice(&[9]),
        Err(logbus::PublishError::Closed(()))
    ));
    assert_eq!(drain(&t, 0), vec![(0, 7), (1, 8)]);
}

/// A `Producer`'s slices on a single-producer topic without timestamps (whose single records
/// take the place the producer keeps by value), at the edges of the capacity (12, so that the
/// room ends inside a segment of 8) and of segments, mixed with single records: offsets,
/// refusals whole (nothing of a refused run is published) and the close.
#[test]
fn a_single_producers_slice_is_published_or_refused_whole_at_every_edge() {
    let t = topic(
        TopicConfig::default()
            .segment_size(8)
            .single_producer()
            .timestamps(false)
            .max_records(12)
            .overflow(logbus::Overflow::Reject),
    );
    let mut r = t.reader(0, Start::Earliest).unwrap();
    let mut p = t.producer().unwrap();
    let run = |from: u64, n: u64| (from..from + n).collect::<Vec<u64>>();
    assert!(matches!(
        p.publish_slice(&run(0, 13)),
        Err(logbus::PublishError::TooLarge(()))
    ));
    assert_eq!(p.publish_slice(&run(0, 3)).unwrap().offsets, 0..3);
    // Up to the segment's end; then the next segment's first record, and a run up to the room.
    assert_eq!(p.publish_slice(&run(3, 5)).unwrap().offsets, 3..8);
    assert_eq!(p.publish(8).unwrap().offset, 8);
    assert_eq!(p.publish_slice(&run(9, 3)).unwrap().offsets, 9..12);
    // The room ends at 12, inside the segment: a run past it is refused whole.
    for n in [1, 2, 4] {
        assert!(matches!(
            p.publish_slice(&run(12, n)),
            Err(logbus::PublishError::Full(()))
        ));
    }
    // The reader takes all twelve, and its look that finds nothing more reports where it is.
    for want in 0..12 {
        assert_eq!(*r.next().unwrap(), want);
    }
    assert!(matches!(r.try_next(), Err(ReadError::Empty)));
    assert_eq!(p.publish_slice(&run(12, 4)).unwrap().offsets, 12..16);
    // The next segment's first record alone, then its seven others: that run ends at the
    // segment's end and at the room both.
    assert_eq!(p.publish(16).unwrap().offset, 16);
    assert_eq!(p.publish_slice(&run(17, 7)).unwrap().offsets, 17..24);
    assert_eq!(p.publish_slice(&[]).unwrap().offsets, 24..24);
    assert!(matches!(
        p.publish_slice(&run(24, 1)),
        Err(logbus::PublishError::Full(()))
    ));
    t.close();
    for want in 12..24 {
        assert_eq!(
            *r.next().unwrap(),
            want,
            "every run in order, nothing refused in it"
        );
    }
    assert!(matches!(r.next(), Err(ReadError::Closed)));
    assert!(matches!(
        p.publish_slice(&run(24, 1)),
        Err(logbus::PublishError::Closed(()))
    ));
}

/// Under `Block` a slice waits for room: runs of five into a capacity of 16, against a reader on
/// another thread.
#[test]
fn a_single_producers_slices_wait_for_room_and_arrive_in_order() {
    const RUNS: u64 = 2_000;
    let t = topic(
        TopicConfig::default()
            .segment_size(8)
            .single_producer()
            .timestamps(false)
            .max_records(16)
            .overflow(logbus::Overflow::Block),
    );
    let mut r = t.reader(0, Start::Earliest).unwrap();
    let reader = thread::spawn(move || {
        for want in 0..RUNS * 5 {
            assert_eq!(*r.next().unwrap(), want, "in order, nothing lost");
        }
    });
    let mut p = t.producer().unwrap();
    for k in 0..RUNS {
        let first = k * 5;
        let values: Vec<u64> = (first..first + 5).collect();
        assert_eq!(p.publish_slice(&values).unwrap().offsets, first..first + 5);
    }
    reader.join().unwrap();
}

/// A handle that reads without waiting, one of four ways; each call reads what one call of that
/// way returns (the number of records, or why none).
fn poller(t: &Topic<u64>, how: &str) -> Box<dyn FnMut() -> Result<usize, ReadError>> {
    match how {
        "try_next" => {
            let mut r = t.reader(0, Start::Earliest).unwrap();
            Box::new(move || r.try_next().map(|_| 1))
        }
        "try_next_batch(3)" => {
            let mut r = t.reader(0, Start::Earliest).unwrap();
            Box::new(move || r.try_next_batch(3).map(|b| b.len()))
        }
        "poll(1)" | "poll(8)" => {
            let max = if how == "poll(1)" { 1 } else { 8 };
            let mut c = t.consumer("c", Start::Earliest).unwrap();
            Box::new(move || c.poll(max).map(|b| b.len()))
        }
        _ => unreachable!("{how}"),
    }
}

const POLLERS: [&str; 4] = ["try_next", "try_next_batch(3)", "poll(1)", "poll(8)"];

/// A topic with room for eight records.
fn eight_records(overflow: logbus::Overflow) -> Topic<u64> {
    topic(TopicConfig::default().max_records(8).overflow(overflow))
}

#[test]
fn a_reader_that_only_polls_frees_the_room_of_what_it_read() {
    for how in POLLERS {
        let t = eight_records(logbus::Overflow::Reject);
        let mut read = poller(&t, how);
        let mut p = t.producer().unwrap();
        let mut published = 0;
        while p.publish(published).is_ok() {
            published += 1;
        }
        assert_eq!(published, 8, "{how}");
        let mut n = 0;
        loop {
            match read() {
                Ok(k) => n += k,
                Err(ReadError::Empty) => break,
                Err(e) => panic!("{how}: {e}"),
            }
        }
        assert_eq!(n, 8, "{how}");
        // Read to the end and looked once more: its position is where publishers see it.
        assert_eq!(t.stats().partitions[0].readers[0].lag, 0, "{how}");
        assert_eq!(
            p.publish(8).map(|at| at.offset).ok(),
            Some(8),
            "{how}: room again"
        );
    }
}

#[test]
fn a_reader_that_only_polls_lets_a_blocked_publisher_go_on() {
    const RECORDS: u64 = 200;
    for how in POLLERS {
        let t = eight_records(logbus::Overflow::Block);
        let mut read = poller(&t, how);
        let publisher = {
            let t = t.clone();
            thread::spawn(move || {
                let mut p = t.producer().unwrap();
                for v in 0..RECORDS {
                    p.publish(v).unwrap();
                }
            })
        };
        // A hang guard, not a measurement: before the fix this never finished.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let mut n = 0;
        while n < RECORDS as usize {
            match read() {
                Ok(k) => n += k,
                Err(ReadError::Empty) => {
                    assert!(
                        std::time::Instant::now() < deadline,
                        "{how}: stuck after {n} records, the publisher waiting for room"
                    );
                    thread::yield_now();
                }
                Err(e) => panic!("{how}: {e}"),
            }
        }
        publisher.join().unwrap();
        assert_eq!(n, RECORDS as usize, "{how}");
    }
}
