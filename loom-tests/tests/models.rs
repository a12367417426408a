//! Loom models of logbus's concurrency. Run with:
//!
//! ```text
//! RUSTFLAGS="--cfg loom --cfg crossbeam_loom" LOOM_MAX_PREEMPTIONS=2 \
//!     cargo test -p logbus-loom-tests --release --target-dir target/loom
//! ```
//!
//! Under `cfg(loom)` logbus swaps every atomic, mutex, cell and the futex for loom's models, and each
//! log owns its own epoch `Collector`, so every iteration starts clean. Each model names the
//! invariant of DESIGN.md it checks. A model runs in a process without membarrier unless it says
//! otherwise ([`Paths`]): the paths a Linux process takes differ from those only where a
//! single producer keeps its place by value.

#![cfg(loom)]

use std::sync::atomic::{
    AtomicUsize,
    Ordering::{Relaxed, SeqCst},
};

use logbus::{
    Overflow, Producer, Producers, PublishError, ReadError, Reader, Record, Start, Topic,
    TopicConfig, WaitStrategy,
};
use loom::{sync::Arc, thread};

/// Which publish paths a model's topics take (`logbus::loom_free_light_barrier`).
#[derive(Clone, Copy, Debug)]
enum Paths {
    /// A process without membarrier: every publish tests the kind of log itself (`Path::Other`).
    /// The many-producer short paths are one generic function whichever the process (the kind
    /// of log a constant or tested), and so is the single producer's, given a writer; so the
    /// models run here unless they need the one path only the other kind has.
    Fences,
    /// A Linux process, whose membarrier makes the light barrier free. What only it has: a
    /// `Producer` of a single-producer topic without timestamps keeps its place by value
    /// (`Log::publish_kept`). Both sides of the park/wake handshake stay `fence(SeqCst)` under
    /// loom, which is what membarrier makes of the light side's compiler fence.
    Membarrier,
}

/// [`model_on`] in a process without membarrier.
fn model(f: impl Fn() + Sync + Send + 'static) {
    model_on(Paths::Fences, f);
}

/// Runs a model in the kind of process `paths` says, with room for the epoch collector's many
/// atomic steps, and says how many interleavings it explored and how long it took (visible with
/// `--nocapture`).
fn model_on(paths: Paths, f: impl Fn() + Sync + Send + 'static) {
    model_within(paths, None, f);
}

/// [`model_on`], with at most `preemptions` preemptions per interleaving where that is `Some`
/// (in place of `LOOM_MAX_PREEMPTIONS`): for a model too large to explore with more.
fn model_within(paths: Paths, preemptions: Option<usize>, f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.max_branches = 100_000;
    if preemptions.is_some() {
        builder.preemption_bound = preemptions;
    }
    let runs = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = std::sync::Arc::clone(&runs);
    let started = std::time::Instant::now();
    builder.check(move || {
        counter.fetch_add(1, SeqCst);
        // Loom runs every modelled thread on this OS thread, whose flag this sets.
        logbus::loom_free_light_barrier(matches!(paths, Paths::Membarrier));
        f()
    });
    let name = std::thread::current().name().unwrap_or("model").to_owned();
    eprintln!(
        "loom: {name} ({paths:?}): {} interleavings in {:.1?}",
        runs.load(SeqCst),
        started.elapsed()
    );
}

/// A topic, a reader at its start, and a thread that publishes `value` into it once.
fn reader_and_one_publish(
    config: TopicConfig<u64>,
    value: u64,
) -> (Topic<u64>, Reader<u64>, thread::JoinHandle<()>) {
    let topic = Topic::<u64>::new("m", config).unwrap();
    let reader = topic.reader(0, Start::Earliest).unwrap();
    let t = topic.clone();
    let publisher = thread::spawn(move || {
        t.publish(value).unwrap();
    });
    (topic, reader, publisher)
}

/// Readers park as soon as nothing is ready: the smallest state space, and the park path always
/// runs.
fn config<T>() -> TopicConfig<T> {
    TopicConfig::default()
        .segment_size(2)
        .wait(WaitStrategy::park_at_once())
}

/// I1, I2: two producers reserve and publish concurrently; a concurrent reader never sees an
/// unwritten slot, sees the offsets in order, and each value exactly once. (Each handle publishes
/// once before the threads start, so the model explores the hot path, not segment set-up.)
#[test]
fn reserve_publish_read() {
    model(|| {
        let topic = Topic::<u64>::new("m", config().segment_size(4)).unwrap();
        let mut reader = topic.reader(0, Start::Earliest).unwrap();
        let mut handles: Vec<_> = (0..2).map(|_| topic.producer().unwrap()).collect();
        for (p, h) in handles.iter_mut().enumerate() {
            assert_eq!(h.publish(p as u64).unwrap().offset, p as u64);
        }
        assert_eq!(*reader.next().unwrap(), 0);
        let producers: Vec<_> = handles
            .into_iter()
            .enumerate()
            .map(|(p, mut producer)| {
                thread::spawn(move || producer.publish(100 + p as u64).unwrap().offset)
            })
            .collect();
        let mut seen = Vec::new();
        for want in 1..4 {
            let r = reader.next().unwrap();
            assert_eq!(r.offset(), want);
            seen.push(*r);
        }
        let mut offsets: Vec<u64> = producers.into_iter().map(|h| h.join().unwrap()).collect();
        offsets.sort();
        assert_eq!(offsets, vec![2, 3]);
        seen.sort();
        assert_eq!(seen, vec![1, 100, 101]);
    });
}

/// A topic, a reader at its start, and a producer that published record 0 alone: under loom
/// that is enough for the lease (and sets the segment up outside the model's race).
fn leased_topic(config: TopicConfig<u64>) -> (Topic<u64>, Reader<u64>, Producer<u64>) {
    let topic = Topic::<u64>::new("m", config.segment_size(4).timestamps(false)).unwrap();
    let reader = topic.reader(0, Start::Earliest).unwrap();
    let mut holder = topic.producer().unwrap();
    assert_eq!(holder.publish(0).unwrap().offset, 0);
    (topic, reader, holder)
}

/// I1, I2 with the lease (`Log::try_lease`; under loom a writer takes it after one reservation
/// of its own): the holder publishes from the lease while another thread's publish, whose
/// `fetch_add` finds the lease held and reserves nothing, ends it (heavy barrier, wait while
/// the holder is busy, `tail` from the holder's next offset) and reserves again. Whichever side
/// of the holder's busy mark the end lands on, the offsets are distinct and dense and the
/// reader sees both values once. Needs a free light barrier (the lease's fast side).
#[test]
fn lease_ended_by_another_publisher() {
    model_on(Paths::Membarrier, || {
        let (topic, mut reader, mut holder) = leased_topic(config());
        let leased = thread::spawn(move || {
            let offset = holder.publish(100).unwrap().offset;
            (offset, holder)
        });
        let t = topic.clone();
        let other = thread::spawn(move || t.publish(200).unwrap().offset);
        let mut seen = vec![*reader.next().unwrap()];
        for want in 1..3 {
            let r = reader.next().unwrap();
            assert_eq!(r.offset(), want);
            seen.push(*r);
        }
        let (a, holder) = leased.join().unwrap();
        let mut offsets = vec![a, other.join().unwrap()];
        offsets.sort();
        assert_eq!(offsets, vec![1, 2], "distinct and dense (I1)");
        seen.sort();
        assert_eq!(seen, vec![0, 100, 200]);
        drop(holder);
        assert_eq!(
            topic.publish(300).unwrap().offset,
            3,
            "tail goes on after the lease"
        );
    });
}

/// I1, I2 with the lease's two words: a second producer ends the holder's lease and, alone for
/// a segment's start, takes one of its own, on the other word, before the first knows its own
/// ended. Then the first publishes (its store to its old word reaches nobody; it finds the lease
/// over, acknowledges, and its `fetch_add` ends the second's lease) while the second publishes
/// from its lease. Whatever the order, the offsets are distinct and dense and the reader sees
/// every value once.
///
/// With one preemption: 2,617 interleavings in 0.5 s here (stop 79; 1,557 in 0.7 s since each
/// modelled thread keeps one epoch handle, stop 80). With the two leases on one word and no wait
/// for the first's acknowledgement, it fails there. Two preemptions:
/// `lease_taken_on_the_other_word_two_preemptions`.
#[test]
fn lease_taken_on_the_other_word_before_the_last_holder_knows() {
    model_within(Paths::Membarrier, Some(1), lease_taken_on_the_other_word);
}

/// `lease_taken_on_the_other_word_before_the_last_holder_knows` with two preemptions: 14,355
/// interleavings in 5.5 s here. It ran on request only until stop 80 (945,924 in 241 s), when
/// a pin registered the modelled thread with the epoch afresh (see `logbus`'s `sync::Epoch`).
#[test]
fn lease_taken_on_the_other_word_two_preemptions() {
    model_on(Paths::Membarrier, lease_taken_on_the_other_word);
}

/// The two models above.
fn lease_taken_on_the_other_word() {
    let topic = Topic::<u64>::new("m", config().timestamps(false)).unwrap();
    let mut reader = topic.reader(0, Start::Earliest).unwrap();
    let mut first = topic.producer().unwrap();
    assert_eq!(first.publish(0).unwrap().offset, 0);
    let mut second = topic.producer().unwrap();
    // Ends the first's lease, then enters the second segment alone: its lease.
    assert_eq!(second.publish(200).unwrap().offset, 1);
    assert_eq!(second.publish(201).unwrap().offset, 2);
    let racing = thread::spawn(move || {
        let offset = first.publish(100).unwrap().offset;
        (offset, first)
    });
    let b = second.publish(202).unwrap().offset;
    let mut seen = Vec::new();
    for want in 0..5 {
        let r = reader.next().unwrap();
        assert_eq!(r.offset(), want);
        seen.push(*r);
    }
    let (a, first) = racing.join().unwrap();
    let mut offsets = vec![a, b];
    offsets.sort();
    assert_eq!(offsets, vec![3, 4], "distinct and dense (I1)");
    seen.sort();
    assert_eq!(seen, vec![0, 100, 200, 201, 202]);
    drop((first, second));
    assert_eq!(topic.publish(300).unwrap().offset, 5, "tail goes on after");
}

/// The lease under `Block`: the holder waits for room (outside its busy mark) until the slow
/// reader goes away; another thread's publish, then, ends the lease, before the holder's wait
/// is over or after, whichever side of its busy mark. The holder's wait is not lost (loom reports
/// a deadlock if it is), and the offsets are distinct and dense (I1).
///
/// With two preemptions: 107,326 interleavings in 25 s here (stop 80). Until each modelled thread
/// kept one epoch handle (see `logbus`'s `sync::Epoch`) it ran with one, 50,843 interleavings in
/// 17 s, as two did not finish in ten minutes. (Nor did a model in which the other publisher
/// waits for room too, or the reader frees room one record at a time, even with one; not tried
/// since.) The lease's race with a busy holder is `lease_ended_by_another_publisher`'s; the
/// same race as this one on two threads is `leased_holder_blocked_for_room_two_threads`'s.
#[test]
fn leased_holder_blocked_for_room() {
    model_on(Paths::Membarrier, || {
        leased_holder_blocked_then_another_publishes(true)
    });
}

/// `leased_holder_blocked_for_room` with two threads, small enough to run with two preemptions:
/// the model's own thread lets the reader go and then publishes, ending the lease while the
/// holder waits for room or after its wait.
///
/// 31,333 interleavings in 8.7 s here. It ran on request only until stop 80 (1,885,676 in
/// 462 s), when a pin registered the modelled thread with the epoch afresh.
#[test]
fn leased_holder_blocked_for_room_two_threads() {
    model_on(Paths::Membarrier, || {
        leased_holder_blocked_then_another_publishes(false)
    });
}

/// The two models above: a leased holder waits for room under `Block` until the reader goes,
/// and another publish, on a thread of its own (`spawn_other`) or on the model's, ends the lease.
fn leased_holder_blocked_then_another_publishes(spawn_other: bool) {
    let config = config().max_records(1).overflow(Overflow::Block);
    let (topic, reader, mut holder) = leased_topic(config);
    let leased = thread::spawn(move || {
        let offset = holder.publish(100).unwrap().offset;
        (offset, holder)
    });
    drop(reader);
    let other: Box<dyn FnOnce() -> u64> = if spawn_other {
        let t = topic.clone();
        let other = thread::spawn(move || t.publish(200).unwrap().offset);
        Box::new(move || other.join().unwrap())
    } else {
        let offset = topic.publish(200).unwrap().offset;
        Box::new(move || offset)
    };
    let (a, holder) = leased.join().unwrap();
    let mut offsets = vec![a, other()];
    offsets.sort();
    assert_eq!(offsets, vec![1, 2], "distinct and dense (I1)");
    drop(holder);
    assert_eq!(topic.stats().partitions[0].end, 3);
}

/// The lease against `close` while its holder waits for room under `Block`, outside its busy
/// mark: the close ends the lease without waiting for the holder and wakes it, and its publish is
/// refused. The reader gets the record that was there, then the close.
#[test]
fn leased_holder_blocked_then_closed() {
    model_on(Paths::Membarrier, || {
        let config = config().max_records(1).overflow(Overflow::Block);
        let (topic, mut reader, mut holder) = leased_topic(config);
        let leased = thread::spawn(move || match holder.publish(100) {
            Err(PublishError::Closed(v)) => v,
            other => panic!("published past the capacity or the close: {other:?}"),
        });
        topic.close();
        assert_eq!(leased.join().unwrap(), 100, "the refused value comes back");
        assert_eq!(*reader.next().unwrap(), 0);
        assert!(matches!(reader.next(), Err(ReadError::Closed)));
    });
}

/// The lease against `close`: the close ends it first, under the lease's lock, so the holder's
/// publish is either before the close (published, and inside the final end the reader drains
/// to) or after it (refused). Never a record past the end the reader was told.
#[test]
fn lease_ended_by_close() {
    model_on(Paths::Membarrier, || {
        let (topic, mut reader, mut holder) = leased_topic(config());
        let leased = thread::spawn(move || match holder.publish(100) {
            Ok(p) => Some(p.offset),
            Err(PublishError::Closed(_)) => None,
            Err(e) => panic!("{e}"),
        });
        topic.close();
        let mut seen = Vec::new();
        loop {
            match reader.next() {
                Ok(r) => seen.push((r.offset(), *r)),
                Err(ReadError::Closed) => break,
                Err(e) => panic!("{e}"),
            }
        }
        match leased.join().unwrap() {
            Some(offset) => {
                assert_eq!(offset, 1);
                assert_eq!(seen, vec![(0, 0), (1, 100)], "published before the close");
            }
            None => assert_eq!(seen, vec![(0, 0)], "refused after it"),
        }
    });
}

/// I5: a reader that parks is woken by the publish it waits for: no lost wake-up, whatever the
/// interleaving of "mark parked, re-check, sleep" with "publish, check parked, wake".
#[test]
fn park_wake_race_multi_producer() {
    model(|| {
        let (_topic, mut reader, publisher) = reader_and_one_publish(config(), 7);
        assert_eq!(*reader.next().unwrap(), 7);
        publisher.join().unwrap();
    });
}

/// I5 on the single-producer path (watermark instead of stamps).
#[test]
fn park_wake_race_single_producer() {
    model(|| single_producer_park_wake(config()));
}

/// I5 on a single producer's place kept by value (a topic without timestamps in a process with
/// membarrier: `Log::publish_kept`): the watermark's store, the look at `state` behind the free
/// light barrier, and the wake-up. Without membarrier the same topic takes `Path::Other`.
#[test]
fn park_wake_race_kept_place() {
    model_on(Paths::Membarrier, || {
        single_producer_park_wake(config().timestamps(false))
    });
}

/// A single producer publishes two records while a reader parks for each.
fn single_producer_park_wake(config: TopicConfig<u64>) {
    let topic = Topic::<u64>::new("m", config.producers(Producers::Single)).unwrap();
    let mut reader = topic.reader(0, Start::Earliest).unwrap();
    let mut producer = topic.producer().unwrap();
    let publisher = thread::spawn(move || {
        producer.publish(7).unwrap();
        producer.publish(8).unwrap();
    });
    assert_eq!(*reader.next().unwrap(), 7);
    assert_eq!(*reader.next().unwrap(), 8);
    publisher.join().unwrap();
}

/// I1 on the single-producer path: the producer role passes between threads (each convenience
/// publish claims it and gives it back), and the next writer continues from the watermark the
/// last one left, which the hand-over of the role alone orders before it (the flag saying "done"
/// is Relaxed: no happens-before of its own). Distinct offsets, and the reader sees both values.
#[test]
fn single_writer_role_hand_over() {
    model(|| {
        let topic = Topic::<u64>::new("m", config().producers(Producers::Single)).unwrap();
        let done = Arc::new(loom::sync::atomic::AtomicBool::new(false));
        let first = {
            let (t, done) = (topic.clone(), Arc::clone(&done));
            thread::spawn(move || {
                let offset = t.publish(10).unwrap().offset;
                done.store(true, Relaxed);
                offset
            })
        };
        while !done.load(Relaxed) {
            thread::yield_now();
        }
        let second = match topic.publish(20) {
            Ok(p) => p.offset,
            Err(PublishError::Busy(_)) => panic!("the first publisher gave the role back"),
            Err(e) => panic!("{e}"),
        };
        assert_eq!((first.join().unwrap(), second), (0, 1));
        let mut reader = topic.reader(0, Start::Earliest).unwrap();
        assert_eq!(*reader.next().unwrap(), 10);
        assert_eq!(*reader.next().unwrap(), 20);
    });
}

/// Close wakes a parked reader, which then drains and reports `Closed`.
#[test]
fn close_wakes_parked_reader() {
    model(|| {
        let topic = Topic::<u64>::new("m", config()).unwrap();
        let mut reader = topic.reader(0, Start::Earliest).unwrap();
        let t = topic.clone();
        let closer = thread::spawn(move || {
            t.publish(1).unwrap();
            t.close();
        });
        assert_eq!(*reader.next().unwrap(), 1);
        assert_eq!(reader.next().unwrap_err(), ReadError::Closed);
        closer.join().unwrap();
    });
}

/// On a single-producer topic a close from another thread races the producer's publish: the
/// publish either fails with `Closed` or lands, and then the log's final end covers it (the
/// producer sees `CLOSED` after its own store and extends the end, or the close saw its store), so
/// the log's end counts it and a reader that comes after both reads every record the producer was
/// told was published, then `Closed`. On both single-producer paths (a `Producer`'s kept place,
/// and `Topic::publish`, which claims the role for the record and is admitted by the cached room
/// that `close` zeroes), each also in a process without membarrier.
#[test]
fn close_races_a_single_producer_publish() {
    for paths in [Paths::Fences, Paths::Membarrier] {
        for through_topic in [false, true] {
            model_on(paths, move || close_race_single(through_topic));
        }
    }
}

/// [`close_races_a_single_producer_publish`]'s model, publishing through a `Producer` or
/// through `Topic::publish`.
fn close_race_single(through_topic: bool) {
    let config = config().timestamps(false).producers(Producers::Single);
    let topic = Topic::<u64>::new("m", config).unwrap();
    let mut producer = (!through_topic).then(|| topic.producer().unwrap());
    let mut publish = |value| match producer.as_mut() {
        Some(p) => p.publish(value),
        None => topic.publish(value),
    };
    // The first publish installs the segment, before the race.
    publish(1).unwrap();
    let t = topic.clone();
    let closer = thread::spawn(move || t.close());
    let landed = match publish(2) {
        Ok(p) => Some(p.offset),
        Err(PublishError::Closed(2)) => None,
        Err(e) => panic!("{e}"),
    };
    closer.join().unwrap();
    // The log's end, which `Start::Latest`, `lag` and the stats go by, covers it too.
    let end = topic.stats().partitions[0].end;
    assert_eq!(end, landed.map_or(1, |offset| offset + 1));
    let mut reader = topic.reader(0, Start::Earliest).unwrap();
    assert_eq!(*reader.next().unwrap(), 1);
    if landed.is_some() {
        assert_eq!(*reader.next().unwrap(), 2);
    }
    assert_eq!(reader.next().unwrap_err(), ReadError::Closed);
}

/// Reads the first `n` records in batches of whatever is published, each batch starting where
/// the one before ended.
fn read_in_batches(reader: &mut Reader<u64>, n: usize) -> Vec<u64> {
    let mut seen = Vec::new();
    while seen.len() < n {
        let batch = reader.next_batch(n - seen.len()).unwrap();
        assert_eq!(batch.first_offset(), seen.len() as u64);
        seen.extend(batch.values().copied());
    }
    seen
}

/// I2 for a batch: a many-producer batch's run is written as one copy, then published by its
/// stamps, stored Relaxed after one Release fence (`Segment::publish_slots`). Neither run covers
/// a whole group of eight slots, so stamps publish every slot. A reader reading batches as the
/// run is published, whose scan takes the stamps one or eight at a time
/// (`Segment::published_run`), sees each value written (loom reports a read of a slot's cell that
/// races its write), in order, once.
#[test]
fn batch_publish_read() {
    two_runs_read(8, 6, 8);
}

/// I2 for batch runs that cover whole groups of eight slots: a group's flag publishes those
/// eight, and stamps publish a run's other slots, all stored Relaxed after one Release fence
/// (`Segment::publish_slots`). The second run starts on a group boundary, so its group's flag is
/// the only store a reader can learn those values from, and stamps publish its last three slots.
/// A reader reading batches as the run is published (`Segment::published_run`: a whole group by
/// its flag, the slots around it by their stamps) sees each value written (loom reports a read of
/// a slot's cell that races its write), in order, once.
#[test]
fn batch_publish_whole_group_read() {
    two_runs_read(32, 8, 19);
}

/// The batch models' shape: on a many-producer topic of `segment_size`-slot segments without
/// timestamps, `0..split` is published as one run, then `split..end` as another from a second
/// thread while this one reads batches ([`read_in_batches`]) until it has every value.
fn two_runs_read(segment_size: usize, split: u64, end: u64) {
    model(move || {
        let config = config().segment_size(segment_size).timestamps(false);
        let topic = Topic::<u64>::new("m", config).unwrap();
        let mut reader = topic.reader(0, Start::Earliest).unwrap();
        let mut producer = topic.producer().unwrap();
        let first: Vec<u64> = (0..split).collect();
        assert_eq!(producer.publish_slice(&first).unwrap().offsets, 0..split);
        let publisher = thread::spawn(move || {
            let run: Vec<u64> = (split..end).collect();
            assert_eq!(producer.publish_slice(&run).unwrap().offsets, split..end);
        });
        let all: Vec<u64> = (0..end).collect();
        assert_eq!(read_in_batches(&mut reader, all.len()), all);
        publisher.join().unwrap();
    });
}

/// I2 and I5 for a single producer (a topic without timestamps in a process with membarrier)
/// that mixes the ways its records go in from its place kept by value: single records
/// (`Log::publish_kept`), a slice inside the writer's segment (`Log::publish_kept_copies`), and
/// an empty slice, which goes through the writer itself: it starts from the next offset the kept
/// state hands back (`Log::give_back_kept`) instead of loading the watermark, and the kept state
/// is taken again after it (a slice that crosses into the next segment goes the same way; with
/// the segment switch the model took ~2.2 M interleavings, 9 minutes). A reader reading batches
/// as they are published (it parks at once when nothing is ready) sees each value written (loom
/// reports a read of a slot's cell that races its write), in order, once. The first record goes
/// in first, on the long path, so that the writer holds its segment.
#[test]
fn kept_records_and_a_slice_read() {
    model_on(Paths::Membarrier, || {
        let config = config()
            .producers(Producers::Single)
            .segment_size(8)
            .timestamps(false);
        let topic = Topic::<u64>::new("m", config).unwrap();
        let mut reader = topic.reader(0, Start::Earliest).unwrap();
        let mut producer = topic.producer().unwrap();
        assert_eq!(producer.publish(0).unwrap().offset, 0);
        let publisher = thread::spawn(move || {
            assert_eq!(producer.publish(1).unwrap().offset, 1);
            assert_eq!(producer.publish_slice(&[2, 3]).unwrap().offsets, 2..4);
            assert_eq!(producer.publish_slice(&[]).unwrap().offsets, 4..4);
            assert_eq!(producer.publish(4).unwrap().offset, 4);
        });
        let all: Vec<u64> = (0..5).collect();
        assert_eq!(read_in_batches(&mut reader, all.len()), all);
        publisher.join().unwrap();
    });
}

/// Segment install by racing producers: each crosses into a new segment (size 2) at once; every
/// record lands in the right slot of the one installed segment.
#[test]
fn racing_segment_install() {
    model(|| {
        let topic = Topic::<u64>::new("m", config()).unwrap();
        let producers: Vec<_> = (0..2u64)
            .map(|p| {
                let t = topic.clone();
                thread::spawn(move || {
                    let mut producer = t.producer().unwrap();
                    producer.publish_batch([p * 10, p * 10 + 1]).unwrap();
                })
            })
            .collect();
        for h in producers {
            h.join().unwrap();
        }
        let mut reader = topic.reader(0, Start::Earliest).unwrap();
        let mut seen: Vec<u64> = (0..4).map(|_| *reader.try_next().unwrap()).collect();
        seen.sort();
        assert_eq!(seen, vec![0, 1, 10, 11]);
    });
}

/// Two producers of a topic without timestamps, one on another thread, each publish one record
/// (`first` and `second`) while a reader reads whatever is published; `check` sees every record the
/// reader gets, as it comes and after both are published. The values read, sorted.
fn two_publishes_read_back(
    first: impl FnOnce(&mut Producer<u64>) + Send + 'static,
    second: impl FnOnce(&mut Producer<u64>),
    check: impl Fn(&Record<'_, u64>),
) -> Vec<u64> {
    let topic = Topic::<u64>::new("m", config().timestamps(false)).unwrap();
    let mut reader = topic.reader(0, Start::Earliest).unwrap();
    let t = topic.clone();
    let other = thread::spawn(move || first(&mut t.producer().unwrap()));
    second(&mut topic.producer().unwrap());
    let mut seen = Vec::new();
    if let Ok(r) = reader.try_next() {
        check(&r);
        seen.push(*r);
    }
    other.join().unwrap();
    while let Ok(r) = reader.try_next() {
        check(&r);
        seen.push(*r);
    }
    seen.sort();
    seen
}

/// The key array of a segment is allocated by its first keyed publish (on a topic without
/// timestamps, so are its time words): two producers race to allocate them while a reader reads
/// whatever is published. Every record a reader sees carries its key (the reader follows the
/// arrays' pointers only after the slot's stamp), and the losing allocations are freed (loom
/// checks every access to the cells).
#[test]
fn racing_key_array_allocation() {
    model(|| {
        let seen = two_publishes_read_back(
            |p| {
                p.publish_keyed(&1u64, 10).unwrap();
            },
            |p| {
                p.publish_keyed(&2u64, 20).unwrap();
            },
            |r| {
                assert!(
                    r.key().is_some(),
                    "a keyed record read back without its key"
                )
            },
        );
        assert_eq!(seen, vec![10, 20]);
    });
}

/// On a topic without timestamps a segment's time words are allocated by its first keyed
/// publish. An unkeyed record published beside it reads back without a key whether the reader
/// finds the words missing (all zero) or allocated (its word zero), and the keyed one with its key.
#[test]
fn unkeyed_record_beside_time_words_allocation() {
    model(|| {
        let seen = two_publishes_read_back(
            |p| {
                p.publish(10).unwrap();
            },
            |p| {
                p.publish_keyed(&2u64, 20).unwrap();
            },
            |r| {
                assert_eq!(
                    r.key().is_some(),
                    **r == 20,
                    "record {} read back with key {:?}",
                    **r,
                    r.key()
                )
            },
        );
        assert_eq!(seen, vec![10, 20]);
    });
}

struct Counted(Arc<AtomicUsize>);
impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, SeqCst);
    }
}

/// I4: retention trims and reclaims segments while a reader reads them; the reader never reads
/// freed memory (loom checks every access), every value is dropped exactly once.
#[test]
fn trim_and_reclaim_while_reading() {
    model(|| trim_while_reading(config()));
}

/// I1, I2, I4 on a single producer's place kept by value: it moves into each new segment (the
/// long path, after which the `Producer` takes it again) while retention trims the segments
/// behind it and a reader reads them. The kept slot handle never writes a segment the writer no
/// longer holds, nor the reader reads a freed one (loom checks every access), and every value is
/// dropped exactly once.
#[test]
fn kept_place_moves_on_while_its_segments_are_trimmed() {
    model_on(Paths::Membarrier, || {
        trim_while_reading(config().timestamps(false).producers(Producers::Single))
    });
}

/// A producer on another thread publishes three records into segments of two under a retention
/// of one record, the first before it starts, while a reader reads twice, whatever is there.
fn trim_while_reading(config: TopicConfig<Counted>) {
    let drops = Arc::new(AtomicUsize::new(0));
    let topic = Topic::<Counted>::new("m", config.max_records(1)).unwrap();
    let mut reader = topic.reader(0, Start::Earliest).unwrap();
    let mut producer = topic.producer().unwrap();
    producer.publish(Counted(drops.clone())).unwrap();
    let d = drops.clone();
    let publisher = thread::spawn(move || {
        // The third record starts segment 1 and installs segment 2, which trims segment 0.
        for _ in 1..3 {
            producer.publish(Counted(d.clone())).unwrap();
        }
    });
    // Read whatever is there; lag is allowed, reading freed memory is not (loom reports it).
    for _ in 0..2 {
        match reader.try_next() {
            Ok(r) => {
                let _ = r.0.load(SeqCst);
            }
            Err(ReadError::Empty | ReadError::Lagged(_)) => {}
            Err(e) => panic!("{e}"),
        }
    }
    publisher.join().unwrap();
    drop(reader);
    drop(topic);
    assert_eq!(drops.load(SeqCst), 3);
}

/// I4, I6: `Topic::publish` on a many-producer topic writes under an epoch pin, without a counted
/// reference to the segment. Here another thread publishes past it until retention trims the
/// segment it reserved in, possibly before its write, during it or after: it never writes freed
/// memory (loom checks every access), and every value is dropped exactly once, written or not.
#[test]
fn pinned_publish_races_the_trim_of_its_segment() {
    model(|| {
        let drops = Arc::new(AtomicUsize::new(0));
        let topic = Topic::<Counted>::new("m", config().max_records(1)).unwrap();
        let (t, d) = (topic.clone(), drops.clone());
        let publisher = thread::spawn(move || t.publish(Counted(d)).unwrap().offset);
        // Offset 2 starts segment 1 and installs segment 2, which trims segment 0.
        let mut offsets: Vec<u64> = (0..2)
            .map(|_| topic.publish(Counted(drops.clone())).unwrap().offset)
            .collect();
        offsets.push(publisher.join().unwrap());
        offsets.sort();
        assert_eq!(offsets, vec![0, 1, 2]);
        drop(topic);
        assert_eq!(drops.load(SeqCst), 3);
    });
}

/// I4, I6 for a batch: a many-producer batch's run goes in as one copy (`Log::publish_run`).
/// Here another thread publishes past it until retention trims segment 0, which the batch may
/// have reserved: before the batch looks its segment up (then its values wait, unwritten, until
/// the run is published, and are dropped there), while it writes, or after. It never writes
/// freed memory (loom checks every access), and every value is dropped exactly once, written or
/// not. A reader that comes after reads only what retention kept, in order.
#[test]
fn batch_publish_races_the_trim_of_its_segment() {
    model(|| {
        let drops = Arc::new(AtomicUsize::new(0));
        let topic = Topic::<Counted>::new("m", config().max_records(1)).unwrap();
        let (t, d) = (topic.clone(), drops.clone());
        // If the batch reserved 0..2, offset 2 starts segment 1 and installs segment 2, which
        // trims segment 0. (The batch on the model's first thread: then one preemption reaches
        // its run trimmed before it is written.)
        let singles = thread::spawn(move || {
            (0..2)
                .map(|_| t.publish(Counted(d.clone())).unwrap().offset)
                .collect::<Vec<u64>>()
        });
        let values = [Counted(drops.clone()), Counted(drops.clone())];
        let run = topic.publish_batch(values).unwrap().offsets;
        let mut offsets = singles.join().unwrap();
        assert_eq!(run.end - run.start, 2);
        offsets.extend(run);
        offsets.sort();
        assert_eq!(offsets, vec![0, 1, 2, 3]);
        // Retention keeps the last record (and may keep its segment's other one).
        let mut reader = topic.reader(0, Start::Earliest).unwrap();
        let first = reader.try_next().unwrap().offset();
        assert!(first >= 2, "record {first} outlived retention");
        for want in first + 1..4 {
            assert_eq!(reader.try_next().unwrap().offset(), want);
        }
        assert!(matches!(reader.try_next(), Err(ReadError::Empty)));
        drop(reader);
        drop(topic);
        assert_eq!(drops.load(SeqCst), 4);
    });
}

/// I1, I2: on a topic without retention `Topic::publish` looks its segment up unpinned
/// (`Directory::get_kept`). Here two threads publish at once: whichever reserves offset 2 installs
/// segment 2, which doubles the directory's ring (two entries under loom), and the other writes
/// offset 1 without a pin. Both records land, and a reader reads every record once, in order.
/// (Eleven interleavings; in three a lookup reads the table the growth replaced, which stays
/// alive with the directory. Until the admin lock holder's own loads of the table pointer were
/// `OwnValue::own_value`, loom tried four, none of them that one.)
#[test]
fn unpinned_publish_races_directory_growth() {
    model(|| {
        let topic = Topic::<u64>::new("m", config()).unwrap();
        let mut reader = topic.reader(0, Start::Earliest).unwrap();
        topic.publish(100).unwrap();
        let t = topic.clone();
        let publisher = thread::spawn(move || t.publish(101).unwrap().offset);
        let mine = topic.publish(102).unwrap().offset;
        let theirs = publisher.join().unwrap();
        let mut offsets = [mine, theirs];
        offsets.sort();
        assert_eq!(offsets, [1, 2]);
        let read: Vec<(u64, u64)> = (0..3)
            .map(|_| {
                let r = reader.try_next().unwrap();
                (r.offset(), *r)
            })
            .collect();
        let value_at = |offset| if offset == mine { 102 } else { 101 };
        assert_eq!(read, vec![(0, 100), (1, value_at(1)), (2, value_at(2))]);
        assert!(matches!(reader.try_next(), Err(ReadError::Empty)));
    });
}

/// `Block`: the publisher waits for the slow reader; when that reader goes away it must stop
/// holding the publisher back (no deadlock).
#[test]
fn block_gate_released_by_leaving_reader() {
    model(|| {
        let topic =
            Topic::<u64>::new("m", config().max_records(1).overflow(Overflow::Block)).unwrap();
        let reader = topic.reader(0, Start::Earliest).unwrap();
        let t = topic.clone();
        let publisher = thread::spawn(move || {
            t.publish(1).unwrap();
            t.publish(2).unwrap();
        });
        drop(reader);
        publisher.join().unwrap();
        assert_eq!(topic.stats().partitions[0].end, 2);
    });
}

/// `Block`: a publisher that finds no room parks until the reader frees some, and the reader, parked
/// for the next record, is woken by that publish. Each side announces itself (a count in `state`,
/// then the heavy barrier) before its last look, and the other side looks for that count after
/// its own store: neither wake-up is lost (loom reports a deadlock if one is), and the reader gets
/// every record once, in order, the publisher never more than the capacity ahead of it.
/// (Announcing after that last look instead deadlocks here.) The
/// handshake is the same for both kinds of producer; the single producer's is the smaller model,
/// here on a ring-like topic's path in a Linux process: its `Producer` keeps its place by value,
/// finds no room there, and takes its place again after the long path has waited.
#[test]
fn blocked_publisher_and_parked_reader_wake_each_other() {
    model_on(Paths::Membarrier, || {
        let config = config()
            .timestamps(false)
            .producers(Producers::Single)
            .max_records(1);
        let topic = Topic::<u64>::new("m", config.overflow(Overflow::Block)).unwrap();
        let mut reader = topic.reader(0, Start::Earliest).unwrap();
        let mut producer = topic.producer().unwrap();
        let publisher = thread::spawn(move || {
            for v in 0..2 {
                producer.publish(v).unwrap();
            }
        });
        for v in 0..2 {
            // The capacity holds whenever the reader looks: the producer waited for room.
            assert!(reader.lag() <= 1, "the producer ran past the capacity");
            assert_eq!(*reader.next().unwrap().value(), v);
        }
        publisher.join().unwrap();
    });
}

/// Groups: a revoked partition is never read by two members at once. Member `b` owns the only
/// partition; `a` joins (and, sorting first, is assigned it); `b` hears of the revocation, then
/// releases it on its next poll; `a` takes it. Whenever a member holds a reader of the partition,
/// the group records it as the partition's one owner; and `b` always lets go.
#[test]
fn group_hand_over_never_shares_a_partition() {
    model(|| {
        let topic = Topic::<u64>::new("m", config()).unwrap();
        topic.publish(1).unwrap();
        let group = topic.group("g").unwrap();
        let mut b = group.join("b").unwrap();
        let mut a = group.join("a").unwrap();
        assert!(a.assignment().is_empty(), "a waits for b to release");
        let owner = |g: &logbus::Group<u64>| g.stats().owners[0].clone();
        let g2 = group.clone();
        let newcomer = thread::spawn(move || {
            for _ in 0..3 {
                let got = a.poll(1).map(|batch| batch.first_offset());
                if !a.assignment().is_empty() {
                    assert_eq!(owner(&g2).as_deref(), Some("a"));
                }
                if let Ok(offset) = got {
                    assert_eq!(offset, 0);
                    return;
                }
                thread::yield_now();
            }
        });
        // b: its polls report its own assignment (from joining), then the revocation, then release.
        for _ in 0..3 {
            let _ = b.poll(1);
            if !b.assignment().is_empty() {
                assert_eq!(owner(&group).as_deref(), Some("b"));
            }
        }
        assert!(b.assignment().is_empty());
        newcomer.join().unwrap();
    });
}

/// A group member with no partitions sleeps on its own waker, in no partition's log, until the
/// group is done with the closed topic: the owner that reads the last partition to its end must
/// wake it, or it sleeps for good. Without a timeout (`Duration::MAX`), so a lost wake-up is a
/// deadlock loom reports.
#[test]
fn the_group_getting_done_wakes_a_member_without_partitions() {
    model(|| {
        use logbus::GroupError;
        use std::time::Duration;
        let topic = Topic::<u64>::new("m", config()).unwrap();
        let group = topic.group("g").unwrap();
        let mut owner = group.join("a").unwrap();
        let mut idle = group.join("b").unwrap();
        assert!(idle.assignment().is_empty());
        let t = topic.clone();
        let closer = thread::spawn(move || {
            t.close();
            assert!(matches!(owner.poll(1), Err(GroupError::Rebalanced(_))));
            assert_eq!(
                owner.poll(1).unwrap_err(),
                GroupError::Read(ReadError::Closed)
            );
            owner // kept in the group: leaving would hand its partition to `idle`
        });
        assert_eq!(
            idle.poll_timeout(1, Duration::MAX).unwrap_err(),
            GroupError::Read(ReadError::Closed)
        );
        drop(closer.join().unwrap());
    });
}

/// I7 and the ack deadline: the handler hands its delivery's `AckHandle` to another thread, and the
/// deadline (1 ns here, so it has always passed by the time the subscription checks it: the check
/// comes after a lock and a model scheduling point, microseconds later) races the ack.
/// Exactly one side wins: either the ack settles the only delivery (the record counts as delivered,
/// never redelivered), or the deadline expires it first, the ack is refused as stale, and the record
/// is delivered again (then dead-lettered when that delivery is not acked either). A stale ack never
/// settles a later delivery.
#[test]
fn ack_deadline_races_a_late_ack() {
    model(|| {
        use std::time::Duration;
        let topic = Topic::<u64>::new("m", config().timestamps(false)).unwrap();
        topic.publish(7).unwrap();
        let handles = Arc::new((
            loom::sync::Mutex::new(Vec::new()),
            loom::sync::Condvar::new(),
        ));
        let sink = Arc::clone(&handles);
        let mut sub = topic
            .subscription("s")
            .start(Start::Earliest)
            .ack_wait(Duration::from_nanos(1))
            .max_deliver(2)
            .ack_handler(move |d: logbus::Delivery<'_, u64>| {
                sink.0.lock().unwrap().push(d.handle());
                sink.1.notify_all();
                Ok::<(), String>(())
            })
            .unwrap();
        let first = {
            let mut list = handles.0.lock().unwrap();
            while list.is_empty() {
                list = handles.1.wait(list).unwrap();
            }
            list[0].clone()
        };
        let acked = first.ack();
        // Wait until the subscription is done with the record: delivered or dead-lettered.
        assert!(sub.wait_idle(Duration::from_secs(3600)));
        sub.close();
        let s = sub.stats();
        let deliveries = handles.0.lock().unwrap().len();
        if acked {
            assert_eq!((s.delivered, s.dead_lettered, deliveries), (1, 0, 1));
        } else {
            assert_eq!((s.delivered, s.dead_lettered, deliveries), (0, 1, 2));
            assert_eq!(s.redelivered, 1);
        }
        // Either way the record was passed (I7): the name resumes after it.
        let c = topic.consumer("s", Start::Earliest).unwrap();
        assert_eq!(c.position(0).unwrap(), 1);
    });
}

/// Closing a subscription while a publisher wakes its parked thread: close always returns (the
/// thread is joined, whether it was parked, woken, or mid-record), the record is handled at most
/// once, and the position committed under the name never passes a record the handler did not
/// finish (I7), nor lags behind one it did.
#[test]
fn subscription_close_while_publisher_wakes_it() {
    model(|| {
        let topic = Topic::<u64>::new("m", config().timestamps(false)).unwrap();
        let handled = Arc::new(AtomicUsize::new(0));
        let seen = Arc::clone(&handled);
        let mut sub = topic
            .subscribe("s", Start::Earliest, move |r| {
                assert_eq!(**r, 9);
                seen.fetch_add(1, SeqCst);
                Ok::<(), String>(())
            })
            .unwrap();
        let t = topic.clone();
        let publisher = thread::spawn(move || t.publish(9).unwrap().offset);
        sub.close();
        assert!(sub.is_finished());
        assert_eq!(publisher.join().unwrap(), 0);
        let handled = handled.load(SeqCst) as u64;
        assert!(handled <= 1);
        let c = topic.consumer("s", Start::Earliest).unwrap();
        assert_eq!(c.position(0).unwrap(), handled);
    });
}

/// The async waker contract (I5 for tasks): a task waiting in `next_async` is announced like a
/// parked thread, and a concurrent publish either is seen by the task's re-check or wakes its task
/// waker; no interleaving leaves the task pending forever (loom's `block_on` reports that as a
/// deadlock).
#[test]
fn async_task_is_woken_by_a_publish() {
    model(|| {
        let (_topic, mut reader, publisher) = reader_and_one_publish(config().timestamps(false), 5);
        let got = loom::future::block_on(async { *reader.next_async().await.unwrap() });
        assert_eq!(got, 5);
        publisher.join().unwrap();
    });
}

/// A pending `next_async` dropped while a publisher runs withdraws its announcement: afterwards no
/// reader counts as parked, and the record is still there for the next read (cancellation loses
/// nothing).
#[test]
fn dropped_async_wait_withdraws() {
    model(|| {
        use std::{future::Future, pin::pin, task::Context};
        let (topic, mut reader, publisher) = reader_and_one_publish(config().timestamps(false), 5);
        {
            let waker = futures_noop_waker();
            let mut cx = Context::from_waker(&waker);
            let mut next = pin!(reader.next_async());
            if let std::task::Poll::Ready(r) = next.as_mut().poll(&mut cx) {
                assert_eq!(*r.unwrap(), 5);
                publisher.join().unwrap();
                return;
            }
        }
        publisher.join().unwrap();
        assert_eq!(topic.stats().partitions[0].parked_readers, 0);
        assert_eq!(*reader.try_next().unwrap(), 5);
    });
}

/// A waker that does nothing (the model checks the announcement, not the wake-up).
fn futures_noop_waker() -> std::task::Waker {
    use std::task::{RawWaker, RawWakerVTable};
    fn clone(_: *const ()) -> RawWaker {
        RawWaker::new(std::ptr::null(), &VTABLE)
    }
    fn noop(_: *const ()) {}
    static VTABLE: RawWakerVTable = RawWakerVTable::new(clone, noop, noop, noop);
    // SAFETY: every function of the vtable ignores the (null) data pointer.
    unsafe { std::task::Waker::from_raw(RawWaker::new(std::ptr::null(), &VTABLE)) }
}

/// The models see what they claim to: a reader may look at any point of a single producer's
/// stream, here before, between and after two publishes, on both single-producer paths. Loom's
/// scheduler tries a store only against the last access before it, so if the producer loaded its
/// own watermark as other threads do (an event to loom) before storing it, the models would never
/// let a reader look between the two (tokio-rs/loom#166, #392; see `sync::own_value`).
#[test]
fn a_reader_may_look_between_two_publishes() {
    for (paths, config) in [
        (Paths::Fences, config().producers(Producers::Single)),
        (
            Paths::Membarrier,
            config().timestamps(false).producers(Producers::Single),
        ),
    ] {
        let seen = std::sync::Arc::new(std::sync::Mutex::new(std::collections::BTreeSet::new()));
        let outcomes = std::sync::Arc::clone(&seen);
        model_on(paths, move || {
            let topic = Topic::<u64>::new("m", config.clone()).unwrap();
            let reader = topic.reader(0, Start::Earliest).unwrap();
            let mut producer = topic.producer().unwrap();
            let publisher = thread::spawn(move || {
                producer.publish(1).unwrap();
                producer.publish(2).unwrap();
            });
            outcomes.lock().unwrap().insert(reader.lag());
            publisher.join().unwrap();
        });
        let seen: Vec<u64> = seen.lock().unwrap().iter().copied().collect();
        assert_eq!(seen, [0, 1, 2], "{paths:?}");
    }
}
