//! The hot path allocates nothing. Inside installed segments, 100,000 publishes and reads make zero
//! allocations; in the steady state of a trimming topic (segments recycled through the pool) the
//! allocations are per segment (crossbeam-epoch's garbage-queue node when a trimmed segment is
//! retired, and a fresh segment when the pool's spares are not reclaimed yet), never per record. A
//! topic with a capacity (`max_records` under `Block` or `Reject`) allocates its segments when it
//! is created, within a fixed budget, and none while publishing, also when its values need a drop
//! (their segments wait for a publisher to drop them before they are spare again).

use std::{
    alloc::{GlobalAlloc, Layout, System},
    sync::atomic::{AtomicBool, AtomicUsize, Ordering},
};

use logbus::{Overflow, Producers, Start, Topic, TopicConfig};

struct Counting;

static ALLOCS: AtomicUsize = AtomicUsize::new(0);
/// Allocations of at least [`LARGE`] bytes: a segment's arrays, nothing smaller.
static LARGE_ALLOCS: AtomicUsize = AtomicUsize::new(0);
/// Bytes asked for, all allocations together.
static BYTES: AtomicUsize = AtomicUsize::new(0);
static COUNTING: AtomicBool = AtomicBool::new(false);

/// The large allocations made while `RECORDING` is set: (address, size) pairs, in a fixed table
/// (the allocator cannot allocate).
static RECORDING: AtomicBool = AtomicBool::new(false);
static RECORDED: [(AtomicUsize, AtomicUsize); 64] =
    [const { (AtomicUsize::new(0), AtomicUsize::new(0)) }; 64];
static RECORDED_LEN: AtomicUsize = AtomicUsize::new(0);

/// Smaller than the values or time words of a 4096-slot segment of `u64` (32 and 24 KiB), larger
/// than anything else the engine allocates while publishing (the epoch's garbage bags are ~2 KiB).
const LARGE: usize = 16 << 10;

impl Counting {
    /// Counts an allocation, then makes it: a large one from fresh pages (which read zero), any
    /// other from the system allocator.
    ///
    /// # Safety
    /// `GlobalAlloc::alloc`'s contract.
    unsafe fn make(layout: Layout, zeroed: bool) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
            BYTES.fetch_add(layout.size(), Ordering::Relaxed);
            if layout.size() >= LARGE {
                LARGE_ALLOCS.fetch_add(1, Ordering::Relaxed);
            }
        }
        #[cfg(target_os = "linux")]
        if layout.size() >= LARGE {
            let p = fresh_pages(layout);
            if RECORDING.load(Ordering::Relaxed) {
                let k = RECORDED_LEN.fetch_add(1, Ordering::Relaxed);
                if let Some((at, len)) = RECORDED.get(k) {
                    at.store(p as usize, Ordering::Relaxed);
                    len.store(layout.size(), Ordering::Relaxed);
                }
            }
            return p;
        }
        // SAFETY: the caller's contract is `alloc`'s, which `alloc_zeroed` shares.
        unsafe {
            if zeroed {
                System.alloc_zeroed(layout)
            } else {
                System.alloc(layout)
            }
        }
    }
}

/// Where a large allocation starts in its mapping: past a header, as with malloc's large chunks,
/// so that an array's pages do not line up with its start (its last page is then one that steps
/// of a page from its start miss).
const HEADER: usize = 64;

/// Large allocations come straight from the OS, one mapping each, so that they are always fresh
/// pages (as a heap's first use of memory is), never pages a freed allocation left mapped: the
/// page-fault test below then sees each first touch, whatever ran before it.
#[cfg(target_os = "linux")]
fn fresh_pages(layout: Layout) -> *mut u8 {
    assert!(layout.align() <= HEADER);
    // SAFETY: an anonymous private mapping; no memory of ours is involved.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            layout.size() + HEADER,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        std::ptr::null_mut()
    } else {
        // SAFETY: the mapping is `HEADER` bytes longer than the allocation.
        unsafe { p.cast::<u8>().add(HEADER) }
    }
}

// SAFETY: forwards to the system allocator, or maps fresh zeroed pages for a large allocation
// (`HEADER` bytes into a page-aligned mapping, so any alignment up to `HEADER` holds; unmapped by
// `dealloc`, which sees the same size); only counts besides.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract.
        unsafe { Self::make(layout, false) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract.
        unsafe { Self::make(layout, true) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        #[cfg(target_os = "linux")]
        if layout.size() >= LARGE {
            // SAFETY: `ptr` is `HEADER` bytes into a mapping of `layout.size() + HEADER` bytes
            // made by `fresh_pages`.
            unsafe { libc::munmap(ptr.sub(HEADER).cast(), layout.size() + HEADER) };
            return;
        }
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Counts the allocations (all of them, and the large ones) of 100,000 publishes and reads of
/// `u64` records, after `warm_up` uncounted rounds of the same.
fn run(config: TopicConfig<u64>, warm_up: usize) -> (usize, usize) {
    run_as(config, warm_up, |i| i, |v| *v)
}

/// [`run`] for records of type `T`, made from their number by `make` and read back by `value`.
fn run_as<T: Send + Sync + 'static>(
    config: TopicConfig<T>,
    warm_up: usize,
    make: fn(u64) -> T,
    value: fn(&T) -> u64,
) -> (usize, usize) {
    let topic = Topic::<T>::new("alloc", config).unwrap();
    let mut reader = topic.reader(0, Start::Earliest).unwrap();
    let mut producer = topic.producer().unwrap();
    let mut batch_buf = Vec::with_capacity(100);
    let mut round = |count: bool| {
        COUNTING.store(count, Ordering::SeqCst);
        let mut sum = 0u64;
        for i in 0..100_000u64 {
            if i % 1000 < 900 {
                producer.publish(make(i)).unwrap();
                sum += value(&reader.next().unwrap());
            } else if i % 1000 == 900 {
                batch_buf.clear();
                batch_buf.extend((900..1000u64).map(make));
                producer.publish_batch(batch_buf.drain(..)).unwrap();
                while let Ok(b) = reader.try_next_batch(64) {
                    sum += b.values().map(value).sum::<u64>();
                }
            }
        }
        COUNTING.store(false, Ordering::SeqCst);
        sum
    };
    // Warm up: the pool fills with trimmed segments, the epoch's garbage bags exist.
    for _ in 0..warm_up {
        round(false);
    }
    ALLOCS.store(0, Ordering::SeqCst);
    LARGE_ALLOCS.store(0, Ordering::SeqCst);
    let sum = round(true);
    // Every record read: the single ones' numbers, and each batch's 900..1000.
    let single: u64 = (0..100_000u64).filter(|i| i % 1000 < 900).sum();
    assert_eq!(sum, single + 100 * (900..1000u64).sum::<u64>());
    (
        ALLOCS.load(Ordering::SeqCst),
        LARGE_ALLOCS.load(Ordering::SeqCst),
    )
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
        let (allocs, _) = run(config, 3);
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
        let (allocs, _) = run(config, 3);
        // 100,000 records cross 25 segments of 4096. Each retired segment costs the epoch one
        // garbage node, and now and then a segment is allocated because the pool's spare was not
        // reclaimed yet: a small constant per segment, never one per record.
        assert!(
            allocs <= 2 * 25,
            "{producers:?}: {allocs} allocations for 100,000 records"
        );
    }
}

#[test]
fn a_topic_with_a_capacity_allocates_its_segments_when_created() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    for producers in [Producers::Multi, Producers::Single] {
        // No warm-up: from the first record on, 100,000 records cross 25 segments.
        let (_, large) = run(ring(producers), 0);
        assert_eq!(
            large, 0,
            "{producers:?}: segments allocated while publishing into a topic with a capacity"
        );
    }
}

/// A capacity of 2 segments of 4096 under `Block`: the topic cycles through 7 (2 kept, the one
/// being written, the one ahead, 3 on their way back through the epoch), all allocated by `new`.
fn ring<T>(producers: Producers) -> TopicConfig<T> {
    TopicConfig::default()
        .producers(producers)
        .segment_size(4096)
        .max_records(8192)
        .overflow(Overflow::Block)
}

/// Drops of [`Owned`] values so far.
static OWNED_DROPS: AtomicUsize = AtomicUsize::new(0);

/// A record that needs a drop, as a `String` or a handle does, without allocating itself.
struct Owned(u64);

impl Drop for Owned {
    fn drop(&mut self) {
        OWNED_DROPS.fetch_add(1, Ordering::Relaxed);
    }
}

/// Values that need a drop take a longer way back to the pool than `u64`s: a trimmed segment
/// waits, retired, until a publisher drops its values after a publish (I6), and only then is it
/// spare again. The cycle a topic with a capacity stocks must cover that wait too.
#[test]
fn a_topic_of_values_that_need_a_drop_allocates_no_segment_while_publishing() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    for producers in [Producers::Multi, Producers::Single] {
        let before = OWNED_DROPS.load(Ordering::Relaxed);
        let (_, large) = run_as(ring(producers), 0, Owned, |v| v.0);
        assert_eq!(
            large, 0,
            "{producers:?}: segments allocated while publishing values that need a drop"
        );
        // Each value was dropped once: the batches' and the trimmed segments' as the run went, the
        // rest with the topic (the pool's segments keep no values).
        assert_eq!(
            OWNED_DROPS.load(Ordering::Relaxed) - before,
            100_000,
            "{producers:?}: drops"
        );
    }
}

/// Bytes allocated while creating a `u64` topic with `config`.
fn bytes_to_create(config: TopicConfig<u64>) -> usize {
    BYTES.store(0, Ordering::SeqCst);
    COUNTING.store(true, Ordering::SeqCst);
    let topic = Topic::<u64>::new("created", config).unwrap();
    COUNTING.store(false, Ordering::SeqCst);
    drop(topic);
    BYTES.load(Ordering::SeqCst)
}

#[test]
fn what_a_topic_allocates_when_created_is_its_cycle_within_a_budget() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    // A 4096-slot single-producer segment of `u64` allocates 8 + 6 bytes a slot up front.
    let segment = 4096 * 14;
    let config = TopicConfig::default()
        .single_producer()
        .segment_size(4096)
        .max_records(8192);
    for overflow in [Overflow::Block, Overflow::Reject] {
        let ring = bytes_to_create(config.clone().overflow(overflow));
        // 2 kept, plus 5: 7 segments, and a few small allocations besides.
        assert!(
            (7 * segment..8 * segment).contains(&ring),
            "{overflow:?}: {ring} bytes for a topic with a capacity of 8192 records"
        );
    }
    // Without timestamps the time words wait for a keyed record: 8 bytes a slot up front.
    let ring = bytes_to_create(config.clone().timestamps(false).overflow(Overflow::Block));
    assert!(
        (7 * 4096 * 8..7 * 4096 * 8 + segment).contains(&ring),
        "{ring} bytes for a topic without timestamps with a capacity of 8192 records"
    );
    // A retention limit and no limit at all: the first two segments only.
    for (what, config) in [
        (
            "a retention limit",
            config.clone().overflow(Overflow::DropOldest),
        ),
        (
            "no limit",
            TopicConfig::default().single_producer().segment_size(4096),
        ),
    ] {
        let lazy = bytes_to_create(config);
        assert!(
            (2 * segment..3 * segment).contains(&lazy),
            "{lazy} bytes for a topic with {what}"
        );
    }
    // A huge capacity stops at the budget (32 MiB a topic), whatever the partitions.
    for partitions in [1, 8] {
        let huge = bytes_to_create(
            TopicConfig::default()
                .partitions(partitions)
                .max_records(1 << 62)
                .overflow(Overflow::Reject),
        );
        assert!(
            (16 << 20..34 << 20).contains(&huge),
            "{huge} bytes for {partitions} partition(s) with a huge capacity"
        );
    }
}

/// Page faults this thread has taken so far (minor ones: a fresh page mapped at first touch).
#[cfg(target_os = "linux")]
fn thread_page_faults() -> u64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: getrusage fills the whole struct we point it at, and reports failure otherwise.
    let usage = unsafe {
        assert_eq!(libc::getrusage(libc::RUSAGE_THREAD, usage.as_mut_ptr()), 0);
        usage.assume_init()
    };
    usage.ru_minflt as u64
}

/// Page faults taken by a thread that publishes and reads 100,000 records through a fresh topic.
#[cfg(target_os = "linux")]
fn faults_publishing(config: TopicConfig<u64>) -> u64 {
    let topic = Topic::<u64>::new("faults", config).unwrap();
    std::thread::spawn(move || {
        let mut reader = topic.reader(0, Start::Earliest).unwrap();
        let mut producer = topic.producer().unwrap();
        // The thread's own first steps (stack, thread-local state) fault too: not counted.
        producer.publish(0).unwrap();
        assert_eq!(*reader.next().unwrap(), 0);
        let before = thread_page_faults();
        for i in 1..100_000u64 {
            producer.publish(i).unwrap();
            assert_eq!(*reader.next().unwrap(), i);
        }
        thread_page_faults() - before
    })
    .join()
    .unwrap()
}

#[cfg(target_os = "linux")]
#[test]
fn a_topic_with_a_capacity_maps_its_pages_when_created() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    for producers in [Producers::Multi, Producers::Single] {
        // Timestamped, so the time words are written too. 100,000 records cross 25 segments
        // of 4096: as fresh memory, 25 x (8 + 6 + 1 pages) for the unbounded topic.
        let config = TopicConfig::default()
            .producers(producers)
            .segment_size(4096);
        let unbounded = faults_publishing(config.clone());
        let ring = faults_publishing(config.max_records(8192).overflow(Overflow::Block));
        // The unbounded topic shows that the count sees fresh pages; the one with a capacity
        // writes only into pages its creation mapped. A few faults come from elsewhere: the
        // epoch's first garbage bags (3 in a debug build, 0 in a release one). Which pages
        // creation maps, exactly, is the next test's.
        assert!(
            unbounded >= 100,
            "{producers:?}: only {unbounded} page faults through an unbounded topic"
        );
        assert!(
            ring <= 8,
            "{producers:?}: {ring} page faults through a topic with a capacity (unbounded: \
             {unbounded})"
        );
    }
}

/// Runs `make` and counts, over the large allocations it made, the pages not mapped (resident)
/// while what it made is still alive: (allocations, unmapped pages).
#[cfg(target_os = "linux")]
fn pages_unmapped_after<R>(make: impl FnOnce() -> R) -> (usize, usize) {
    RECORDED_LEN.store(0, Ordering::SeqCst);
    RECORDING.store(true, Ordering::SeqCst);
    let made = make();
    RECORDING.store(false, Ordering::SeqCst);
    let arrays = RECORDED_LEN.load(Ordering::SeqCst);
    assert!(arrays <= RECORDED.len(), "{arrays} large allocations");
    let page = 4096;
    let mut unmapped = 0;
    for (at, len) in &RECORDED[..arrays] {
        let (at, len) = (at.load(Ordering::SeqCst), len.load(Ordering::SeqCst));
        let first = at / page * page;
        let pages = (at + len).div_ceil(page) - first / page;
        let mut resident = vec![0u8; pages];
        // SAFETY: `first` is page-aligned and the range lies in a live mapping of ours (`made`
        // still holds the allocation); `resident` has a byte for each page.
        let rc = unsafe { libc::mincore(first as *mut _, pages * page, resident.as_mut_ptr()) };
        assert_eq!(rc, 0, "mincore");
        unmapped += resident.iter().filter(|&&r| r & 1 == 0).count();
    }
    drop(made);
    (arrays, unmapped)
}

#[cfg(target_os = "linux")]
#[test]
fn every_page_a_topic_with_a_capacity_will_write_is_mapped_when_created() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    // The count sees pages that are not mapped: 64 KiB reserved and never written.
    let (arrays, unmapped) = pages_unmapped_after(|| Vec::<u8>::with_capacity(64 << 10));
    assert_eq!(
        (arrays, unmapped),
        (1, 17),
        "an untouched allocation's pages"
    );
    // Timestamped, so each segment allocates two large arrays: values (32 KiB) and time words
    // (24 KiB), each placed past a header, so that neither starts or ends on a page boundary.
    let config = TopicConfig::default()
        .single_producer()
        .segment_size(4096)
        .max_records(8192)
        .overflow(Overflow::Block);
    let (arrays, unmapped) = pages_unmapped_after(|| Topic::<u64>::new("mapped", config).unwrap());
    assert_eq!(arrays, 2 * 7, "a capacity of 2 segments stocks 7");
    assert_eq!(unmapped, 0, "pages of a stocked segment left unmapped");
}
