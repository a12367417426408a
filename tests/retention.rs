//! Retention (records, bytes, age), the overflow policies, and I4 (every value dropped once).

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    thread,
    time::Duration,
};

use logbus::{Overflow, Producers, PublishError, ReadError, Start, Topic, TopicConfig};

#[test]
fn max_records_trims_whole_segments_and_readers_see_lagged() {
    for producers in [Producers::Multi, Producers::Single] {
        let t = Topic::<u64>::new(
            "r",
            TopicConfig::default()
                .segment_size(4)
                .max_records(6)
                .producers(producers),
        )
        .unwrap();
        let mut r = t.reader(0, Start::Earliest).unwrap();
        let mut p = t.producer().unwrap();
        for i in 0..20 {
            p.publish(i).unwrap();
        }
        let s = &t.stats().partitions[0];
        // Keep at least 6 records, trim whole segments of 4 when a new segment starts: end 20,
        // start at a segment boundary, fewer than 6 + 2 * 4 records retained.
        assert_eq!(s.end, 20);
        assert_eq!(s.start % 4, 0);
        assert!(
            s.retained >= 6 && s.retained < 6 + 2 * 4,
            "retained {}",
            s.retained
        );
        assert!(s.start > 0);
        match r.next() {
            Err(ReadError::Lagged(n)) => assert_eq!(n, s.start),
            other => panic!("expected Lagged, got {:?}", other.map(|v| *v)),
        }
        // Then it continues, in order, from the oldest retained record, without further gaps.
        for want in s.start..20 {
            assert_eq!(*r.next().unwrap(), want);
        }
        assert_eq!(r.try_next().unwrap_err(), ReadError::Empty);
        // Seeking below the retained range is refused.
        assert!(r.seek(Start::Offset(0)).is_err());
        assert!(t.reader(0, Start::Offset(s.start - 1)).is_err());
    }
}

#[test]
fn lagged_count_is_exact_and_offsets_never_repeat() {
    let t = Topic::<u64>::new("r", TopicConfig::default().segment_size(8).max_records(8)).unwrap();
    let mut r = t.reader(0, Start::Earliest).unwrap();
    let mut expected = 0u64;
    let mut lost = 0u64;
    for round in 0..50u64 {
        for i in 0..(round % 23) {
            t.publish(round * 1000 + i).unwrap();
        }
        // Read a little each round; sometimes we fall behind retention.
        for _ in 0..(round % 7) {
            match r.try_next() {
                Ok(rec) => {
                    assert_eq!(rec.offset(), expected, "no silent gap (I3)");
                    expected += 1;
                }
                Err(ReadError::Lagged(n)) => {
                    lost += n;
                    expected += n;
                }
                Err(ReadError::Empty) => break,
                Err(e) => panic!("{e}"),
            }
        }
    }
    loop {
        match r.try_next() {
            Ok(rec) => {
                assert_eq!(rec.offset(), expected);
                expected += 1;
            }
            Err(ReadError::Lagged(n)) => {
                lost += n;
                expected += n;
            }
            Err(ReadError::Empty) => break,
            Err(e) => panic!("{e}"),
        }
    }
    let end = t.stats().partitions[0].end;
    assert_eq!(expected, end, "read + lost accounts for every offset");
    assert!(lost > 0, "the scenario must actually lag");
}

#[test]
fn max_bytes_trims_and_refuses_oversized_records() {
    let t = Topic::<Vec<u8>>::new(
        "b",
        TopicConfig::default()
            .segment_size(4)
            .max_bytes(100, |v: &Vec<u8>| v.len()),
    )
    .unwrap();
    for _ in 0..40 {
        t.publish(vec![0u8; 10]).unwrap();
    }
    let s = &t.stats().partitions[0];
    assert!(s.start > 0, "old segments trimmed");
    // At most 100 bytes once the head segment (up to 4 records of 10 bytes) is added.
    assert!(s.bytes <= 100 + 40, "bytes {}", s.bytes);
    assert_eq!(s.bytes, s.retained * 10);
    let big = vec![1u8; 101];
    match t.publish(big) {
        Err(PublishError::TooLarge(v)) => assert_eq!(v.len(), 101),
        other => panic!("expected TooLarge, got {other:?}"),
    }
    match t.publish_batch(vec![vec![0u8; 5], vec![0u8; 500]]) {
        Err(PublishError::TooLarge(v)) => assert_eq!(v.len(), 2, "the whole batch comes back"),
        other => panic!("expected TooLarge, got {other:?}"),
    }
}

#[test]
fn max_age_trims_old_segments_when_a_new_one_starts() {
    let t = Topic::<u64>::new(
        "a",
        TopicConfig::default()
            .segment_size(4)
            .max_age(Duration::from_millis(30)),
    )
    .unwrap();
    for i in 0..8 {
        t.publish(i).unwrap();
    }
    assert_eq!(t.stats().partitions[0].start, 0);
    thread::sleep(Duration::from_millis(60));
    for i in 8..12 {
        t.publish(i).unwrap();
    }
    let s = &t.stats().partitions[0];
    assert_eq!(s.start, 8, "both old segments are past their age");
    let mut r = t.reader(0, Start::Earliest).unwrap();
    assert_eq!(*r.next().unwrap(), 8);
}

/// A `Reject` topic that keeps 5 records in segments of 4.
fn small_reject_topic(producers: Producers) -> Topic<u64> {
    Topic::new(
        "x",
        TopicConfig::default()
            .segment_size(4)
            .max_records(5)
            .overflow(Overflow::Reject)
            .producers(producers),
    )
    .unwrap()
}

#[test]
fn reject_hands_the_value_back_when_a_reader_lags() {
    for producers in [Producers::Multi, Producers::Single] {
        let t = small_reject_topic(producers);
        let mut r = t.reader(0, Start::Earliest).unwrap();
        let mut p = t.producer().unwrap();
        for i in 0..5 {
            p.publish(i).unwrap();
        }
        match p.publish(5) {
            Err(PublishError::Full(v)) => assert_eq!(v, 5),
            other => panic!("expected Full, got {other:?}"),
        }
        match p.publish_batch(vec![7; 6]) {
            Err(PublishError::TooLarge(v)) => assert_eq!(v.len(), 6, "larger than capacity"),
            other => panic!("expected TooLarge, got {other:?}"),
        }
        // The reader frees room by reading (its position is reported once per batch).
        for i in 0..5 {
            assert_eq!(*r.next().unwrap(), i);
        }
        let _ = r.try_next();
        p.publish(5).unwrap();
        // Nothing was lost: the reader sees 5 next, no lag.
        assert_eq!(*r.next().unwrap(), 5);
        // With no reader attached there is nobody to wait for.
        drop(r);
        for i in 6..30 {
            p.publish(i).unwrap();
        }
    }
}

/// `Topic::publish` on a single-producer topic claims the producer role for one record: it is
/// admitted as a `Producer`'s publish is (room, close), and gives the role back whatever the
/// outcome.
#[test]
fn topic_publish_on_a_single_producer_topic_admits_and_gives_the_role_back() {
    let t = small_reject_topic(Producers::Single);
    let mut r = t.reader(0, Start::Earliest).unwrap();
    for i in 0..5 {
        assert_eq!(t.publish(i).unwrap().offset, i);
    }
    match t.publish(5) {
        Err(PublishError::Full(v)) => assert_eq!(v, 5),
        other => panic!("expected Full, got {other:?}"),
    }
    // The refusal gave the role back (a producer can be made), and took no offset.
    drop(
        t.producer()
            .expect("the role is free after a refused publish"),
    );
    for i in 0..5 {
        assert_eq!(*r.next().unwrap(), i);
    }
    let _ = r.try_next();
    assert_eq!(t.publish(5).unwrap().offset, 5);
    assert_eq!(*r.next().unwrap(), 5);
    // A reader parked on the topic is woken by the publish.
    let waiting = thread::spawn(move || *r.next().unwrap());
    thread::sleep(Duration::from_millis(20));
    assert_eq!(t.publish(6).unwrap().offset, 6);
    assert_eq!(waiting.join().unwrap(), 6);
    t.close();
    match t.publish(7) {
        Err(PublishError::Closed(v)) => assert_eq!(v, 7),
        other => panic!("expected Closed, got {other:?}"),
    }
    assert_eq!(
        t.stats().partitions[0].end,
        7,
        "nothing published after the close"
    );
    drop(
        t.producer()
            .expect("the role is free after a closed publish"),
    );
}

/// `Topic::publish` on a single-producer `Block` topic waits for the slowest reader, holding the
/// role, and loses nothing.
#[test]
fn topic_publish_on_a_single_producer_topic_blocks_and_loses_nothing() {
    let t = small_block_topic("blk-topic", Producers::Single);
    let mut slow = t.reader(0, Start::Earliest).unwrap();
    let total = 500u64;
    let pt = t.clone();
    let publisher = thread::spawn(move || {
        for i in 0..total {
            assert_eq!(pt.publish(i).unwrap().offset, i);
        }
    });
    for i in 0..total {
        if i % 100 == 0 {
            thread::sleep(Duration::from_millis(2));
        }
        assert_eq!(*slow.next().expect("Block never makes a reader lag"), i);
    }
    publisher.join().unwrap();
    assert_eq!(t.stats().partitions[0].end, total);
}

/// A `Block` topic that keeps 8 records in segments of 4.
fn small_block_topic(name: &str, producers: Producers) -> Topic<u64> {
    Topic::new(
        name,
        TopicConfig::default()
            .segment_size(4)
            .max_records(8)
            .overflow(Overflow::Block)
            .producers(producers),
    )
    .unwrap()
}

/// Publishes `0..total` to `t` from a thread of its own.
fn publish_from_a_thread(t: &Topic<u64>, total: u64) -> thread::JoinHandle<()> {
    let t = t.clone();
    thread::spawn(move || {
        let mut p = t.producer().unwrap();
        for i in 0..total {
            p.publish(i).unwrap();
        }
    })
}

#[test]
fn block_waits_for_the_slowest_reader_and_loses_nothing() {
    for producers in [Producers::Multi, Producers::Single] {
        let t = small_block_topic("blk", producers);
        let mut fast = t.reader(0, Start::Earliest).unwrap();
        let mut slow = t.reader(0, Start::Earliest).unwrap();
        let total = 2_000u64;
        let publisher = publish_from_a_thread(&t, total);
        let fast_h = thread::spawn(move || {
            for i in 0..total {
                assert_eq!(*fast.next().unwrap(), i);
            }
        });
        for i in 0..total {
            if i % 200 == 0 {
                thread::sleep(Duration::from_millis(2));
            }
            let rec = slow.next().expect("Block never makes a reader lag");
            assert_eq!(*rec, i);
        }
        publisher.join().unwrap();
        fast_h.join().unwrap();
    }
}

#[test]
fn block_is_released_when_the_slow_reader_goes_away() {
    let t = Topic::<u64>::new(
        "blk2",
        TopicConfig::default()
            .segment_size(4)
            .max_records(4)
            .overflow(Overflow::Block),
    )
    .unwrap();
    let slow = t.reader(0, Start::Earliest).unwrap();
    let pt = t.clone();
    let publisher = thread::spawn(move || {
        for i in 0..100u64 {
            pt.publish(i).unwrap();
        }
    });
    // The publisher fills the capacity and blocks on the reader that never reads.
    while t.stats().partitions[0].end < 4 {
        thread::sleep(Duration::from_millis(1));
    }
    thread::sleep(Duration::from_millis(20));
    assert_eq!(t.stats().partitions[0].end, 4, "blocked at capacity");
    drop(slow);
    publisher.join().unwrap();
    assert_eq!(t.stats().partitions[0].end, 100);
}

#[test]
fn block_is_released_by_close() {
    let t = Topic::<u64>::new(
        "blk3",
        TopicConfig::default()
            .segment_size(4)
            .max_records(4)
            .overflow(Overflow::Block),
    )
    .unwrap();
    let _slow = t.reader(0, Start::Earliest).unwrap();
    let pt = t.clone();
    let publisher = thread::spawn(move || {
        for i in 0..100u64 {
            if let Err(e) = pt.publish(i) {
                return (i, e.into_inner());
            }
        }
        (100, 0)
    });
    thread::sleep(Duration::from_millis(30));
    t.close();
    assert_eq!(
        publisher.join().unwrap(),
        (4, 4),
        "the blocked value is handed back"
    );
}

/// A value that counts its drops.
struct Counted {
    id: u64,
    drops: Arc<AtomicUsize>,
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn every_value_is_dropped_exactly_once() {
    for producers in [Producers::Multi, Producers::Single] {
        for retention in [None, Some(10u64)] {
            let drops = Arc::new(AtomicUsize::new(0));
            let mut config = TopicConfig::default().segment_size(4).producers(producers);
            if let Some(n) = retention {
                config = config.max_records(n);
            }
            let t = Topic::<Counted>::new("d", config).unwrap();
            let mut r = t.reader(0, Start::Earliest).unwrap();
            let n = 1_000u64;
            {
                let mut p = t.producer().unwrap();
                for id in 0..n / 2 {
                    p.publish(Counted {
                        id,
                        drops: drops.clone(),
                    })
                    .unwrap();
                }
                let batch: Vec<Counted> = (n / 2..n)
                    .map(|id| Counted {
                        id,
                        drops: drops.clone(),
                    })
                    .collect();
                p.publish_batch(batch).unwrap();
            }
            // A refused publish hands the value back; dropping it then counts once too.
            t.close();
            let refused = t
                .publish(Counted {
                    id: n,
                    drops: drops.clone(),
                })
                .unwrap_err();
            assert_eq!(refused.into_inner().id, n);
            // Nothing retained was dropped: only trimmed values and the refused one.
            let retained = t.stats().partitions[0].retained as usize;
            assert!(drops.load(Ordering::SeqCst) <= 1 + n as usize - retained);
            if retention.is_none() {
                assert_eq!(
                    drops.load(Ordering::SeqCst),
                    1,
                    "only the refused value is gone"
                );
            }
            // Read some while retention trims: borrowed values are never dropped by reading.
            let mut seen = 0;
            loop {
                match r.next() {
                    Ok(rec) => {
                        assert!(rec.id < n);
                        seen += 1;
                    }
                    Err(ReadError::Lagged(_)) => {}
                    Err(ReadError::Closed) => break,
                    Err(e) => panic!("{e}"),
                }
            }
            assert!(seen > 0);
            drop(r);
            drop(t);
            // Trimmed segments are released through the epoch; dropping the topic flushes it,
            // or hands what another test's thread holds back to the late-drop thread. The bound
            // only keeps a value never dropped from hanging the test (0.5 s was short on two
            // busy vCPUs for `tests/drops.rs`'s like wait, stop 59).
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while drops.load(Ordering::SeqCst) != n as usize + 1
                && std::time::Instant::now() < deadline
            {
                thread::sleep(Duration::from_millis(5));
            }
            assert_eq!(
                drops.load(Ordering::SeqCst),
                n as usize + 1,
                "{producers:?} {retention:?}"
            );
        }
    }
}

/// `Topic::publish` writes under an epoch pin, without a counted reference to its segment.
/// Threads publishing that way into tiny segments that retention trims at once (on a
/// many-producer topic, another thread's publish may trim the segment of a record not yet
/// written), with a reader reading what it can: every offset handed out once, every value
/// dropped once. A single-producer topic gets one publishing thread, since a second would find
/// the role taken (`Busy`).
#[test]
fn publishing_through_the_topic_races_retention_and_drops_every_value_once() {
    for (producers, threads) in [(Producers::Multi, 4u64), (Producers::Single, 1)] {
        let drops = Arc::new(AtomicUsize::new(0));
        let config = TopicConfig::default()
            .producers(producers)
            .segment_size(2)
            .max_records(2);
        let t = Topic::<Counted>::new("race", config).unwrap();
        let mut r = t.reader(0, Start::Earliest).unwrap();
        let each = 5_000u64;
        let publishers: Vec<_> = (0..threads)
            .map(|p| {
                let (t, drops) = (t.clone(), drops.clone());
                thread::spawn(move || {
                    (0..each)
                        .map(|i| {
                            let id = p * each + i;
                            let drops = drops.clone();
                            t.publish(Counted { id, drops }).unwrap().offset
                        })
                        .collect::<Vec<u64>>()
                })
            })
            .collect();
        let total = threads * each;
        let mut read = 0u64;
        while read < 1_000 {
            match r.try_next() {
                Ok(rec) => {
                    assert!(rec.id < total, "a value that was published");
                    read += 1;
                }
                Err(ReadError::Lagged(_) | ReadError::Empty) => {}
                Err(e) => panic!("{e}"),
            }
            if publishers.iter().all(|h| h.is_finished()) {
                break;
            }
        }
        let mut offsets: Vec<u64> = publishers
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        offsets.sort_unstable();
        let dense: Vec<u64> = (0..total).collect();
        assert_eq!(offsets, dense, "{producers:?}: dense and unique (I1)");
        drop(r);
        drop(t);
        // Trimmed segments are released through the epoch; dropping the topic flushes it while
        // they come back, and the late-drop thread drops what the epoch hands back after. The
        // bound is for a hang, not a speed. Under valgrind in CI, 1,804 of 20,000 values were
        // still to come after 500 ms once (stop 54), and 1,818 after 10 s (stop 67): valgrind
        // runs one thread at a time, so a publisher descheduled while pinned held the epoch
        // back, each trim left a bag of its own, and both waits flushed once a round, running 8
        // bags each (`tests/late_drops.rs` has the backlog on its own).
        for _ in 0..2_000 {
            if drops.load(Ordering::SeqCst) == total as usize {
                break;
            }
            thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(
            drops.load(Ordering::SeqCst),
            total as usize,
            "{producers:?}"
        );
    }
}

#[test]
fn a_borrowed_record_outlives_the_trim_of_its_segment() {
    let drops = Arc::new(AtomicUsize::new(0));
    let t = Topic::<Counted>::new(
        "keep",
        TopicConfig::default().segment_size(2).max_records(2),
    )
    .unwrap();
    let mut r = t.reader(0, Start::Earliest).unwrap();
    t.publish(Counted {
        id: 0,
        drops: drops.clone(),
    })
    .unwrap();
    let rec = r.next().unwrap();
    // Retention trims the segment holding `rec` while the reader still borrows it.
    for id in 1..50 {
        t.publish(Counted {
            id,
            drops: drops.clone(),
        })
        .unwrap();
    }
    assert!(t.stats().partitions[0].start > 0);
    assert_eq!(rec.id, 0, "the borrowed value is still there");
    assert_eq!(rec.offset(), 0);
}

/// A topic without timestamps writes a slot's time word only for keyed records, so a segment
/// that comes back from the pool must not show an earlier record's key on an unkeyed one (nor a
/// time on any). Rounds alternate keyed and unkeyed records over a 2-segment retention, so every
/// slot is reused with the other kind again and again.
#[test]
fn reused_segments_forget_earlier_keys() {
    for producers in [Producers::Single, Producers::Multi] {
        let mut config = TopicConfig::default()
            .segment_size(4)
            .max_records(8)
            .timestamps(false);
        if producers == Producers::Single {
            config = config.single_producer();
        }
        let t = Topic::<u64>::new("keys", config).unwrap();
        let mut p = t.producer().unwrap();
        let mut r = t.reader(0, Start::Earliest).unwrap();
        let mut reused = false;
        // At least 200 rounds, and on until the pool has handed a segment back: trimmed segments
        // return through the epoch, which other tests' threads in this process can hold back a
        // while (a thread descheduled while pinned).
        let mut round = 0u64;
        while round < 200 || (!reused && round < 20_000) {
            let keyed = round.is_multiple_of(2);
            for i in 0..4 {
                let v = round * 4 + i;
                if keyed {
                    p.publish_keyed(&v, v).unwrap();
                } else {
                    p.publish(v).unwrap();
                }
            }
            for i in 0..4 {
                let rec = r.next().unwrap();
                assert_eq!(*rec, round * 4 + i);
                assert_eq!(rec.key().is_some(), keyed, "round {round}, {producers:?}");
                assert_eq!(rec.timestamp(), std::time::UNIX_EPOCH);
            }
            reused |= t.stats().partitions[0].spare_segments > 0;
            round += 1;
        }
        assert!(
            reused,
            "the pool must have handed segments back for this test to mean anything"
        );
    }
}

/// Room under `Block`/`Reject` counts from the slowest reader, including one that seeks back: the
/// room a publisher remembered from the reader's old position must be forgotten, or retention
/// trims what the reader went back for. (`Reject` makes the limit visible without threads; `Block`
/// uses the same room check.)
#[test]
fn room_counts_from_a_reader_that_seeked_back() {
    let t = Topic::<u64>::new(
        "back",
        TopicConfig::default()
            .single_producer()
            .segment_size(4)
            .max_records(8)
            .overflow(Overflow::Reject),
    )
    .unwrap();
    let mut p = t.producer().unwrap();
    let mut r = t.reader(0, Start::Earliest).unwrap();
    let mut next = 0u64;
    // Publish until full and read everything, a few times: the publisher's remembered room moves
    // up with the reader.
    for _ in 0..4 {
        while p.publish(next).is_ok() {
            next += 1;
        }
        while r.try_next().is_ok() {}
    }
    assert_eq!(r.position(), next);
    // One more publish refreshes the remembered room from the reader's position (`next`).
    p.publish(next).unwrap();
    next += 1;
    // Now the reader goes back to the oldest retained record, below that position.
    let start = t.stats().partitions[0].start;
    assert!(start < r.position());
    r.seek(Start::Offset(start)).unwrap();
    let end_at_seek = next;
    while p.publish(next).is_ok() {
        next += 1;
    }
    // Room for 8 past the reader's new position (retention may keep a little more than 8, so the
    // end may already be past that: then nothing more fits).
    assert!(
        next <= end_at_seek.max(start + 8),
        "published up to {next} with the reader at {start} and room for 8 (end was {end_at_seek})"
    );
    // And the reader reads all of it, without a gap.
    for want in start..next {
        assert_eq!(*r.try_next().unwrap(), want);
    }
}

/// Publishes `0..total` to partition 0 of `t` through a producer, and returns the retained start
/// after each trim (0 first), looked at more often than trims happen (every 32 records; the
/// segments of the tests that call this are at least 64).
fn trim_starts(t: &Topic<u64>, total: u64) -> Vec<u64> {
    let mut p = t.producer().unwrap();
    let mut starts = vec![0];
    for i in 0..total {
        p.publish(i).unwrap();
        if i % 32 == 0 || i == total - 1 {
            let start = t.stats().partitions[0].start;
            if start != *starts.last().unwrap() {
                starts.push(start);
            }
        }
    }
    starts
}

#[test]
fn bounded_topics_get_segments_a_quarter_of_their_retention() {
    // The default segment follows `max_records` (a quarter, 1 Ki to 16 Ki slots), which shows in
    // how retention trims: one whole segment at a time.
    let cases = [
        (None, 1 << 16, 1 << 14),
        (None, 40_000, 1 << 13), // 10,000 rounded down to a power of two
        (None, 100, logbus::DEFAULT_SEGMENT_SIZE as u64),
        (None, 1 << 18, logbus::MAX_DEFAULT_SEGMENT_SIZE as u64),
        (Some(64), 1 << 16, 64), // a segment size set explicitly wins
    ];
    // Configs compare by the segment length they give, set or derived (a broker re-opening a
    // topic by name accepts either spelling).
    let derived = TopicConfig::<u64>::default().max_records(1 << 16);
    assert!(
        derived
            == TopicConfig::default()
                .max_records(1 << 16)
                .segment_size(1 << 14)
    );
    assert!(
        derived
            != TopicConfig::default()
                .max_records(1 << 16)
                .segment_size(1 << 10)
    );
    let broker = logbus::Broker::new();
    broker.topic("reopened", derived).unwrap();
    broker
        .topic(
            "reopened",
            TopicConfig::<u64>::default()
                .max_records(1 << 16)
                .segment_size(1 << 14),
        )
        .unwrap();
    for (explicit, max, segment) in cases {
        let mut config = TopicConfig::default().single_producer().max_records(max);
        if let Some(s) = explicit {
            config = config.segment_size(s);
        }
        let t = Topic::<u64>::new("seg", config).unwrap();
        let total = max + 3 * segment + 5;
        let starts = trim_starts(&t, total);
        assert!(starts.len() >= 3, "max {max}: trims at {starts:?}");
        for step in starts.windows(2) {
            assert_eq!(step[1] - step[0], segment, "max {max}: trims at {starts:?}");
        }
        let s = &t.stats().partitions[0];
        assert_eq!(s.end, total);
        assert!(
            s.retained >= max && s.retained < max + 2 * segment,
            "max {max}: retained {}",
            s.retained
        );
        let mut r = t.reader(0, Start::Earliest).unwrap();
        assert_eq!(r.try_next().unwrap().offset(), s.start);
    }
}

#[test]
fn rings_get_segments_as_long_as_their_capacity() {
    // Where `max_records` is a capacity (Block, Reject), the default segment holds all of it, as
    // long as its values take at most 512 KiB, and at least the quarter a retention limit gets.
    fn ring<T>(n: u64, overflow: Overflow) -> TopicConfig<T> {
        TopicConfig::default().max_records(n).overflow(overflow)
    }
    let u64s = [
        (1 << 16, Overflow::Block, 1 << 16),
        (40_000, Overflow::Reject, 1 << 15), // rounded down to a power of two
        (100, Overflow::Block, logbus::DEFAULT_SEGMENT_SIZE),
        (1 << 20, Overflow::Block, 1 << 16), // 512 KiB of `u64`s
        (1 << 16, Overflow::DropOldest, 1 << 14), // a retention limit: the quarter
    ];
    for (n, overflow, segment) in u64s {
        // Configs compare by the segment length they give, set or derived.
        assert!(
            ring::<u64>(n, overflow) == ring(n, overflow).segment_size(segment),
            "{n} {overflow:?}: segments of {segment}"
        );
        assert!(ring::<u64>(n, overflow) != ring(n, overflow).segment_size(segment / 2));
    }
    // Records of 256 bytes: 2,048 of them fill 512 KiB, fewer than the quarter of 65,536.
    let large = ring::<[u64; 32]>(1 << 16, Overflow::Block);
    assert!(large == ring(1 << 16, Overflow::Block).segment_size(1 << 14));

    // And retention trims whole segments of the capacity: with no reader, a `Block` ring has
    // room for everything, and keeps its newest 4,096 (a quarter would trim every 1,024).
    let n = 1 << 12;
    let t = Topic::<u64>::new(
        "ring",
        TopicConfig::default()
            .single_producer()
            .max_records(n)
            .overflow(Overflow::Block),
    )
    .unwrap();
    let starts = trim_starts(&t, n + 3 * n + 5);
    assert!(starts.len() >= 3, "trims at {starts:?}");
    for step in starts.windows(2) {
        assert_eq!(step[1] - step[0], n, "trims at {starts:?}");
    }
}

/// A multi-producer slot's stamp means "published" for its segment's current life only: a
/// segment that comes back from the pool must not show its last life's records as new ones.
#[test]
fn a_reused_segment_shows_no_records_of_its_last_life() {
    let t = Topic::<u64>::new(
        "reuse",
        TopicConfig::default().segment_size(4).max_records(4),
    )
    .unwrap();
    let mut p = t.producer().unwrap();
    // Segments of 4 slots keeping 4 records: each goes back to the pool and out again, full of
    // its last life's published records, many times over.
    for i in 0..256 {
        p.publish(i).unwrap();
    }
    let mut r = t.reader(0, Start::Latest).unwrap();
    for k in 0..64u64 {
        assert_eq!(
            r.try_next().map(|rec| *rec).unwrap_err(),
            ReadError::Empty,
            "offset {} was never published",
            256 + k
        );
        p.publish(1000 + k).unwrap();
        let rec = r.try_next().unwrap();
        assert_eq!((*rec, rec.offset()), (1000 + k, 256 + k));
    }
}

/// A reader that goes back to the oldest retained record, again and again, while publishers fill
/// a Block topic: a trim that read its position before the move must not pass where it lands.
/// Block never makes an attached reader lag, and "earliest" is wherever the start is once it moved.
#[test]
fn seeking_to_the_earliest_record_under_block_never_lags() {
    const TOTAL: u64 = 200_000;
    for producers in [Producers::Multi, Producers::Single] {
        let t = small_block_topic("seek-back", producers);
        let mut r = t.reader(0, Start::Earliest).unwrap();
        // Valgrind's memcheck (`LOGBUS_STRESS=0` in CI) runs one thread at a time: keep it short.
        let total = if std::env::var("LOGBUS_STRESS").as_deref() == Ok("0") {
            1_000
        } else {
            TOTAL
        };
        let publisher = publish_from_a_thread(&t, total);
        let mut seeks = 0u64;
        // The highest value read so far: after a seek back the reader reads records again, but
        // it never skips one.
        let mut high: Option<u64> = None;
        while high != Some(total - 1) {
            let v = match r.next_timeout(Duration::from_secs(30)) {
                Ok(rec) => *rec,
                Err(e) => panic!("{producers:?}: {e} after {seeks} seeks to the earliest record"),
            };
            let next = high.map_or(0, |h| h + 1);
            assert!(v <= next, "{producers:?}: skipped from {next} to {v}");
            if v == next {
                high = Some(v);
                // Back to the start at every third new record (the publishers keep filling).
                if v % 3 == 0 {
                    r.seek(Start::Earliest).unwrap();
                    seeks += 1;
                }
            }
        }
        publisher.join().unwrap();
    }
}
