//! The hot path allocates nothing. Inside installed segments, 100,000 publishes and reads make zero
//! allocations; in the steady state of a trimming topic (segments recycled through the pool) the
//! allocations are per segment (crossbeam-epoch's garbage-queue node when a trimmed segment is
//! retired, and a fresh segment when the pool's spares are not reclaimed yet), never per record.

use std::{
    alloc::{GlobalAlloc, Layout, System},
    sync::atomic::{AtomicBool, AtomicUsize, Ordering},
};

use logbus::{Producers, Start, Topic, TopicConfig};

struct Counting;

static ALLOCS: AtomicUsize = AtomicUsize::new(0);
static COUNTING: AtomicBool = AtomicBool::new(false);

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn run(config: TopicConfig<u64>) -> usize {
    let topic = Topic::<u64>::new("alloc", config).unwrap();
    let mut reader = topic.reader(0, Start::Earliest).unwrap();
    let mut producer = topic.producer().unwrap();
    let mut batch_buf = Vec::with_capacity(64);
    let mut round = |count: bool| {
        COUNTING.store(count, Ordering::SeqCst);
        let mut sum = 0u64;
        for i in 0..100_000u64 {
            if i % 1000 < 900 {
                producer.publish(i).unwrap();
                sum += *reader.next().unwrap();
            } else if i % 1000 == 900 {
                batch_buf.clear();
                batch_buf.extend(900..1000u64);
                producer.publish_batch(batch_buf.drain(..)).unwrap();
                while let Ok(b) = reader.try_next_batch(64) {
                    sum += b.values().sum::<u64>();
                }
            }
        }
        COUNTING.store(false, Ordering::SeqCst);
        sum
    };
    // Warm up: the pool fills with trimmed segments, the epoch's garbage bags exist.
    for _ in 0..3 {
        round(false);
    }
    ALLOCS.store(0, Ordering::SeqCst);
    round(true);
    ALLOCS.load(Ordering::SeqCst)
}

/// The allocator counts process-wide, so the two measurements must not run at the same time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn zero_allocations_inside_installed_segments() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    for producers in [Producers::Multi, Producers::Single] {
        // One segment holds all 4 x 100,000 records of the run; it and the next one are installed
        // when the topic is created.
        let config = TopicConfig::default()
            .producers(producers)
            .segment_size(1 << 19);
        let allocs = run(config);
        assert_eq!(
            allocs, 0,
            "{producers:?}: allocations while publishing and reading"
        );
    }
}

#[test]
fn steady_state_allocates_per_segment_not_per_record() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    for producers in [Producers::Multi, Producers::Single] {
        let config = TopicConfig::default()
            .producers(producers)
            .segment_size(4096)
            .max_records(8192);
        let allocs = run(config);
        // 100,000 records cross 25 segments of 4096. Each retired segment costs the epoch one
        // garbage node, and now and then a segment is allocated because the pool's spare was not
        // reclaimed yet: a small constant per segment, never one per record.
        assert!(
            allocs <= 2 * 25,
            "{producers:?}: {allocs} allocations for 100,000 records"
        );
    }
}
