//! A segment: `2^k` slots of one partition's log, with a reference count and a home pool.
//!
//! Slot `i` of a segment whose first offset is `base` holds offset `base + i`. Each slot has three
//! parts kept in separate arrays, so that a reader pulls only the bytes it uses:
//! - the value (`MaybeUninit<T>`), written once by the producer that reserved the offset;
//! - the metadata ([`Meta`]: timestamp and key hash), read only when a caller asks for it. The
//!   time word is packed into 6 bytes (see [`Segment::write`]), so a timestamped record of `T`
//!   costs `size_of::<T>() + 6` bytes; the key array, the wide-time array for timestamps that do
//!   not fit the packing and, on a topic without timestamps, the time words themselves (only a
//!   keyed record writes one there) are allocated only when a segment first needs them;
//! - on multi-producer logs only, the stamp: one byte, 1 once the slot is published in the
//!   segment's current life (its current `base`), 0 before. A segment's stamps are all 0 when it is
//!   installed (fresh, or zeroed when taken from the pool), and each slot is reserved exactly once
//!   per life (I1), so a 1 can only be this life's publication. Beside them, one flag byte for
//!   every [`GROUP`] slots: a batch's run publishes each whole group it covers by its flag, and
//!   only the slots at its ends by their stamps, so it stores an eighth as many bytes (a slot is
//!   published when its stamp or its group's flag is 1). Single-producer logs publish a
//!   watermark instead and keep neither.
//!
//! # Lifetime
//! A segment is reference counted. The log's directory owns one reference from install until the
//! segment is trimmed; each reader and producer that works in it owns one more ([`SegRef`]). A
//! reference is only ever taken while pinned in the epoch and after loading the segment from the
//! directory, so the directory's reference is still held (its release is deferred through the epoch).
//! When the count reaches zero the segment goes back to its pool. A segment of values that need
//! no drop is spare at once. Otherwise it waits in the pool's retired list until a publisher,
//! after its publish, drops the values (each exactly once, I4) and makes it spare
//! ([`Pool::drop_retired`]). The count can reach zero in places where the application's code
//! must not run (I6): in a deferred function that any pin anywhere may run, so under the admin
//! lock or between a reservation and its publish, and in a producer that switches segments
//! between the two. Debug builds and loom models check that no value is dropped in such a place
//! ([`bar_user_code`]). Once the log is gone, the segments the epoch still holds come back to a
//! pool kept alive by the process's late-drop thread, which drops their values
//! ([`Pool::drop_late`]); the release, wherever it runs, only retires them.
//!
//! # Orderings
//! - `refs`: increments are Relaxed (the caller already holds a reference or is pinned, so the
//!   segment is alive; like `Arc::clone`). Decrements are Release, and the one that reaches zero is
//!   followed by an Acquire fence, so every write to the slots by any former holder happens-before the
//!   values are dropped (like `Arc::drop`). A retired segment's values are dropped on another
//!   thread: the releasing thread pushes it to the pool's `retired` list after its fence and the
//!   dropping thread takes it from there, both under that mutex, which carries the order on.
//! - `stamps[i]`: stored with Release after the value and metadata are written; loaded with Acquire
//!   by readers, which makes the value visible (I2). A batch's run of slots
//!   ([`Segment::publish_slots`]) stores its stamps and its whole groups' flags (`groups[k]`)
//!   Relaxed after one Release fence: a reader's Acquire load that reads one synchronizes with
//!   that fence, which follows every write of the run. The drop scan runs after the Acquire fence
//!   above and may use Relaxed, and so may the zeroing of a pooled segment's stamps and flags in
//!   `Pool::take`: the segment is ours alone there, and installing it publishes the zeros with
//!   Release.
//! - `filled` (single producer): stored with Release by the producer when it leaves the segment,
//!   before it drops its reference; read after the zero-count Acquire fence.
//! - `bytes`: a Relaxed counter used by byte retention, read under the log's admin lock.
//! - `Pool::lent`: a Relaxed count of segments out of the pool. Only `Log`'s `Drop` reads it, to
//!   wait (boundedly) for it to reach zero; the segments themselves come back through the pool's
//!   mutexes, which order everything done to them.
//! - `keys` and `wide` (the lazily allocated key and wide-time arrays): installed with an AcqRel
//!   compare-exchange from null, loaded with Acquire, so whoever uses the pointer sees the
//!   allocation. A reader only follows one for a slot whose packed time word (`HAS_KEY`, or the
//!   `WIDE` mark) it saw after the slot's publication (Acquire), which the writer stored after
//!   installing or loading the array and writing the slot's word in it.
//! - `times` (the time words): on a timestamped log set when the segment is allocated, before it
//!   is ever installed; on a log without timestamps installed like `keys`, by the first keyed
//!   record's writer before it writes that slot's word and publishes the slot. A reader loads it
//!   with Acquire after observing a slot's publication with Acquire, so for a slot whose word was
//!   written it sees the array; null means no record of this life or any earlier one wrote a
//!   word, so every word reads 0. A non-null array seen for a slot that wrote none holds 0 there
//!   (allocated zeroed, cleared when the segment is taken from the pool).

use std::mem::MaybeUninit;
use std::panic::{self, AssertUnwindSafe};
use std::ptr::NonNull;

use crate::clock;

use crate::sync::{
    clear_flags, fence, keep_store_order, lock, move_into, prefetch, prefetch_l2, prefetch_write,
    touch_pages, values_of, Arc, AtomicPtr, AtomicU64, AtomicU8, AtomicUsize, Epoch, Mutex,
    Ordering, SlotBase, StampBase, StaticLock, UnsafeCell,
};

// The count behind [`UserCodeBarred`]: debug builds, and loom models (built for release, but
// each modelled thread has its own count there).
#[cfg(all(debug_assertions, not(loom)))]
crate::sync::thread_local! {
    /// How many places this thread is in where the application's code must not run (I6).
    static BARRED: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

// Loom's macro takes no `const` initializer.
#[cfg(loom)]
crate::sync::thread_local! {
    static BARRED: std::cell::Cell<u32> = std::cell::Cell::new(0);
}

#[cfg(any(debug_assertions, loom))]
impl Drop for UserCodeBarred {
    fn drop(&mut self) {
        BARRED.with(|b| b.set(b.get() - 1));
    }
}

/// Marks, until dropped, a place where the application's code must not run (I6): under the admin
/// lock, or between reserving an offset and publishing it. Debug builds and loom models count
/// these per thread, and [`Segment::drop_values`] panics if it would drop values (the
/// application's `Drop`) inside one; release builds keep nothing.
#[must_use]
pub(crate) struct UserCodeBarred(());

/// See [`UserCodeBarred`].
#[inline(always)]
pub(crate) fn bar_user_code() -> UserCodeBarred {
    #[cfg(any(debug_assertions, loom))]
    BARRED.with(|b| b.set(b.get() + 1));
    UserCodeBarred(())
}

/// Whether this thread is in a place marked by [`bar_user_code`] (always false in release builds).
fn user_code_barred() -> bool {
    #[cfg(any(debug_assertions, loom))]
    return BARRED.with(|b| b.get() != 0);
    #[cfg(not(any(debug_assertions, loom)))]
    false
}

/// A cache line, and how far ahead producers fetch the lines they will write ([`AHEAD`] bytes,
/// [`Segment::prefetch_ahead`]).
const LINE: usize = 64;
const AHEAD: usize = 8 * LINE;

/// Slots a group flag stands for (see `Segment::groups`): a batch's run stores one flag for eight
/// of its slots, and a reader's scan loads one for eight.
pub(crate) const GROUP: usize = 8;

/// `range` split at the whole groups it covers: the slots before the first whole group, the
/// whole groups (as group indices), and the slots after the last; with no whole group inside,
/// all of `range` is the first part. A batch's run publishes the first and last parts by their
/// stamps and the groups by their flags (`Segment::publish_slots`); a reader's scan takes them
/// the same way (`Segment::published_run`).
#[inline]
fn split_by_groups(
    range: std::ops::Range<usize>,
) -> (
    std::ops::Range<usize>,
    std::ops::Range<usize>,
    std::ops::Range<usize>,
) {
    let (first, last) = (range.start.div_ceil(GROUP), range.end / GROUP);
    if first < last {
        (
            range.start..first * GROUP,
            first..last,
            last * GROUP..range.end,
        )
    } else {
        (range.clone(), first..first, range.end..range.end)
    }
}

/// The first and the longest nap of the late-drop thread ([`drop_late_pools`]) between its rounds.
const LATE_NAP: std::time::Duration = std::time::Duration::from_millis(1);
const LATE_NAP_MAX: std::time::Duration = std::time::Duration::from_millis(100);

/// The page size the CPU's stream prefetchers work within, and how many lines at the head of
/// each page a reader fetches ahead ([`Segment::prefetch_page_heads`]).
const PAGE: usize = 4096;
const PAGE_HEAD_LINES: usize = 4;

/// Fetches for writing the line `BYTES` bytes past element `i` of `array`, when `i` is the first
/// element of a line (for elements up to a line long), and the target is inside the array.
/// Outside loom our cells and atomics are laid out like their contents, so the array is `len`
/// contiguous elements of that size.
#[inline(always)]
fn fetch_line_ahead<E, const BYTES: usize>(array: &[E], i: usize) {
    if i.is_multiple_of(per_line::<E>()) {
        fetch_ahead::<E, BYTES>(array, i);
    }
}

/// How many elements of `E` a line holds (at least one: larger elements start a line each, as
/// far as [`fetch_line_ahead`] is concerned).
const fn per_line<E>() -> usize {
    let size = std::mem::size_of::<E>();
    if size == 0 || size >= LINE {
        1
    } else {
        LINE / size
    }
}

/// [`fetch_line_ahead`] without the test that `i` starts a line.
#[inline(always)]
fn fetch_ahead<E, const BYTES: usize>(array: &[E], i: usize) {
    let target = i + (BYTES / std::mem::size_of::<E>().max(1)).max(1);
    if target < array.len() {
        prefetch_write(array.as_ptr().wrapping_add(target));
    }
}

/// One slot of a lazily allocated array (keys, or timestamps too far from the segment's base).
type WordCell = UnsafeCell<MaybeUninit<u64>>;

/// One slot's packed time word (see [`Packed`]), little-endian.
type TimeCell = UnsafeCell<[u8; 6]>;

/// A zero time word.
fn zero_word() -> TimeCell {
    UnsafeCell::new([0; 6])
}

/// Per-slot metadata, written by the producer before it publishes the slot.
///
/// Stored as a packed 6-byte time word per slot and a key array allocated on first use, so that
/// an unkeyed publish writes 6 bytes of metadata (none at all on a topic without timestamps).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Meta {
    /// Bits 0..63: nanoseconds since the UNIX epoch (fits until the year 2262).
    /// Bit 63 ([`Meta::HAS_KEY`]): set when the record was published with a key.
    pub(crate) ts_and_flag: u64,
    /// The stable 64-bit hash of the record's key; meaningful only when `HAS_KEY` is set.
    pub(crate) key: u64,
}

impl Meta {
    pub(crate) const HAS_KEY: u64 = 1 << 63;

    pub(crate) fn new(ts_nanos: u64, key: Option<u64>) -> Self {
        debug_assert!(ts_nanos < Self::HAS_KEY, "timestamp overflows 63 bits");
        match key {
            Some(k) => Meta {
                ts_and_flag: ts_nanos | Self::HAS_KEY,
                key: k,
            },
            None => Meta {
                ts_and_flag: ts_nanos,
                key: 0,
            },
        }
    }

    /// No timestamp and no key: nothing to write, as a slot's time word already reads that way
    /// (see [`Segment::write`]).
    #[inline(always)]
    pub(crate) fn is_empty(&self) -> bool {
        self.ts_and_flag == 0
    }

    pub(crate) fn timestamp_nanos(&self) -> u64 {
        self.ts_and_flag & !Self::HAS_KEY
    }

    pub(crate) fn key(&self) -> Option<u64> {
        (self.ts_and_flag & Self::HAS_KEY != 0).then_some(self.key)
    }
}

/// One segment of a partition's log.
pub(crate) struct Segment<T> {
    /// Offset of slot 0. Written only while the segment is owned by one thread (new, or taken from
    /// the pool), then published by the Release store that installs it in the directory.
    base: u64,
    refs: AtomicUsize,
    /// Single producer only: slots `[0, filled)` hold values. See the module's Orderings.
    filled: AtomicUsize,
    /// Sum of the sizes of the records in this segment (byte retention only).
    bytes: AtomicU64,
    values: Box<[UnsafeCell<MaybeUninit<T>>]>,
    /// The packed time word of each slot (`len` of them), zero until written; only non-zero words
    /// are written. On a timestamped log allocated with the segment, since every record writes
    /// its word. On a log without timestamps only a keyed record writes one, so, like `keys`, the
    /// array is allocated by the first keyed publish into the segment and null until then: such a
    /// topic that publishes no keys costs `size_of::<T>()` bytes a record (a stamp byte and an
    /// eighth of a flag byte more with many producers) instead of 6 more. Once allocated it stays
    /// with the segment, through the pool, until the segment is freed.
    times: AtomicPtr<TimeCell>,
    /// What packed timestamps are relative to: the wall clock when the segment was installed
    /// (timestamped logs only), less `Packed::BIAS`. Written while the segment is owned by one
    /// thread, like `base`.
    tzero: u64,
    /// `Meta::key` of each slot (`len` of them); written (and so initialized) only when `HAS_KEY`
    /// is set. Allocated by the first keyed publish into the segment, null until then: most
    /// topics publish without keys and would pay 8 bytes per record for nothing. Once allocated
    /// it stays with the segment, through the pool, until the segment is freed.
    keys: AtomicPtr<WordCell>,
    /// Full timestamps of the slots whose packed word says `WIDE` (stamped more than ~19 hours
    /// from the segment's install). Allocated on first need, like `keys`.
    wide: AtomicPtr<WordCell>,
    /// 1 once published in this life, 0 before (multi-producer logs); empty on single-producer
    /// logs. One byte a slot, where it was the 8-byte `offset + 1`: a reader's scan of them pulls
    /// one line per 64 records instead of one per 8, beside the values' lines, and a retained
    /// record costs 7 bytes less.
    stamps: Box<[AtomicU8]>,
    /// 1 once a batch's run published all [`GROUP`] slots `GROUP * k..GROUP * (k + 1)` in this
    /// life, 0 before (multi-producer logs; empty on single-producer ones). A slot is published
    /// when its stamp or its group's flag is 1 ([`Segment::published_run`]). A run stores one
    /// flag for each whole group it covers instead of eight stamps, and stamps only at its ends
    /// (see [`Segment::publish_slots`]); a one-record publish stores its stamp alone. Zeroed
    /// with the stamps.
    groups: Box<[AtomicU8]>,
    /// Where the segment goes when its last reference is dropped. `None` while it sits in the pool,
    /// so the pool never owns a reference to itself.
    pool: Option<Arc<Pool<T>>>,
}

// SAFETY: a segment hands out `&T` to many threads (needs `T: Sync`) and drops values on whichever
// thread releases it last (needs `T: Send`). The cells are only written by the producer that
// reserved the slot, before publication; all other fields are atomics or immutable after install.
unsafe impl<T: Send + Sync> Send for Segment<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Sync for Segment<T> {}

impl<T> Segment<T> {
    fn allocate(size: usize, stamped: bool, timestamps: bool) -> Box<Self> {
        let times = if timestamps {
            let cells: Box<[TimeCell]> = (0..size).map(|_| zero_word()).collect();
            Box::into_raw(cells) as *mut TimeCell
        } else {
            std::ptr::null_mut()
        };
        Box::new(Segment {
            base: 0,
            refs: AtomicUsize::new(0),
            filled: AtomicUsize::new(0),
            bytes: AtomicU64::new(0),
            values: (0..size)
                .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
                .collect(),
            times: AtomicPtr::new(times),
            tzero: 0,
            keys: AtomicPtr::new(std::ptr::null_mut()),
            wide: AtomicPtr::new(std::ptr::null_mut()),
            stamps: if stamped {
                (0..size).map(|_| AtomicU8::new(0)).collect()
            } else {
                Box::default()
            },
            groups: if stamped {
                (0..size.div_ceil(GROUP))
                    .map(|_| AtomicU8::new(0))
                    .collect()
            } else {
                Box::default()
            },
            pool: None,
        })
    }

    /// The bytes a segment of `size` slots allocates up front (its key and wide-time arrays
    /// come later, if ever, and so do its time words on a log without timestamps).
    pub(crate) fn footprint(size: usize, stamped: bool, timestamps: bool) -> usize {
        let per_slot =
            std::mem::size_of::<T>() + 6 * usize::from(timestamps) + usize::from(stamped);
        let groups = if stamped { size.div_ceil(GROUP) } else { 0 };
        size.saturating_mul(per_slot).saturating_add(groups)
    }

    #[inline]
    pub(crate) fn base(&self) -> u64 {
        self.base
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.values.len()
    }

    /// The slot of `offset` in this segment, if it is this segment's: one subtraction and one
    /// compare, where testing the offset's base against the segment's takes the log's mask
    /// too.
    #[inline(always)]
    pub(crate) fn slot_of(&self, offset: u64) -> Option<usize> {
        let i = offset.wrapping_sub(self.base);
        (i < self.values.len() as u64).then_some(i as usize)
    }

    /// A handle for writing this segment's values by offset (see [`SlotBase`]): the single
    /// producer's one-record path, which then needs neither the segment's address nor its mask.
    pub(crate) fn slot_base(&self) -> SlotBase<T> {
        SlotBase::new(&self.values, self.base)
    }

    /// A handle on this segment's stamps by offset (see [`StampBase`]): the lease holder's kept
    /// state (`log::KeptLease`). `None` where the segment has no stamps (a single-producer log's).
    pub(crate) fn stamp_base(&self) -> Option<StampBase> {
        (self.stamps.len() == self.values.len()).then(|| StampBase::new(&self.stamps, self.base))
    }

    /// Starts loading slot `i`'s value into this core's cache (a hint; see [`prefetch`]).
    #[inline]
    pub(crate) fn prefetch_value(&self, i: usize) {
        prefetch(self.values.as_ptr().wrapping_add(i));
    }

    /// Starts fetching, into this core's second-level cache, the first lines of every 4 KiB page
    /// that the values of slots `from..from + len` enter after the first: a reader calls it when
    /// it takes a run. The CPU's stream prefetcher follows a run of reads only within a page, so
    /// without it the reader waits at the start of every page (512 `u64`s) for lines that come
    /// from the producer's core until the prefetcher has caught on again. Four lines a page: a
    /// batch of 4096 `u64`s asks for 28 to 32. Alternating harness binaries on the 2-vCPU Xeon,
    /// rounds taking the median of 3 runs (single producer, ring-like topic): where two or four
    /// readers share a core, 1→2 ×1.03–1.07 and batch 1→2 ×1.04 (6 and 8 rounds, none below
    /// 0.99), 1→4 ×1.03 and batch 1→4 ×1.01; 1→1, where the producer bounds the run, ×1.01 and
    /// batch ×0.99. Two lines a page measured like four in the harness (1→1, 2→2) and below it
    /// in a standalone loop of batches (1540–1560 against 1570–1620 M/s; 8 or 16 lines like 4).
    /// In a standalone single-record 1→1 loop whose reader checks each value against a counter,
    /// leaving it out gave 570–643 M/s against 822–859 (two alternating sets); in standalone batch
    /// 1→1, 16 lines a page gave 1116–1129 M/s against 1136–1240 for 4, 64 lines 927–958, and
    /// every line of the run 928–929 (two sets). A hint only: nothing outside x86-64 or under loom.
    #[inline]
    pub(crate) fn prefetch_page_heads(&self, from: usize, len: usize) {
        let start = self.values.as_ptr().wrapping_add(from).cast::<u8>();
        let bytes = len.saturating_mul(std::mem::size_of::<UnsafeCell<MaybeUninit<T>>>());
        // Bytes from `start` to the next page; the page `start` is in is already being read.
        let mut page = PAGE - (start.addr() & (PAGE - 1));
        while page < bytes {
            for line in 0..PAGE_HEAD_LINES {
                let at = page + line * LINE;
                if at < bytes {
                    prefetch_l2(start.wrapping_add(at));
                }
            }
            page += PAGE;
        }
    }

    /// The stamp of slot `i` without a bounds check, for the publish paths (three instructions
    /// a many-producer publish).
    ///
    /// # Safety
    /// `i < self.len()`, and the segment is a multi-producer log's (which gives every slot a
    /// stamp).
    #[inline(always)]
    pub(crate) unsafe fn stamp_unchecked(&self, i: usize) -> &AtomicU8 {
        debug_assert!(i < self.stamps.len());
        // SAFETY: the caller's contract: `stamps` has `len` entries and `i` is below that.
        unsafe { self.stamps.get_unchecked(i) }
    }

    #[inline]
    pub(crate) fn bytes(&self) -> &AtomicU64 {
        &self.bytes
    }

    /// Records how many slots a single producer filled, before it lets go of the segment.
    #[inline]
    pub(crate) fn set_filled(&self, n: usize) {
        debug_assert!(n <= self.len());
        // Release: see the module's Orderings (paired with the zero-count Acquire fence).
        self.filled.store(n, Ordering::Release);
    }

    /// Writes the value and metadata of slot `i`.
    ///
    /// The metadata goes into the slot's 6-byte time word ([`Packed`]): the timestamp as an
    /// offset from the time the segment was installed (±2^46 ns, about 19.5 hours) plus the key
    /// flag; the key, and a timestamp outside that range, go to arrays allocated on first use.
    ///
    /// # Safety
    /// `i < self.len()`. The caller reserved the offset `base + i` (so no one else writes this
    /// slot) and has not yet published it (so no one reads it), and holds a reference to the
    /// segment or is pinned and loaded it from the directory (see [`Segment::retain`]).
    #[inline(always)]
    pub(crate) unsafe fn write(&self, i: usize, value: T, meta: Meta) {
        debug_assert!(i < self.len());
        // The metadata first: the value's line is the one a waiting reader holds, so its store
        // waits for it, and the publishing store (watermark or stamp) must queue right behind it
        // to have its own line fetched meanwhile (see `Log::publish_single_short`). With the
        // time word between them, the 2 µs-paced 1→1 p50 of the default (timestamped) topics
        // was ×1.30 (single producer) and ×1.23 (many) of this order's (6 alternating rounds
        // each, medians of 3 runs, 2-vCPU Xeon; single producer with the watermark fix too).
        // SAFETY: the caller's contract, passed on.
        unsafe { self.write_meta(i, meta) };
        keep_store_order();
        // SAFETY: `i < len` (the caller's contract), and every array has `len` slots.
        let value_cell = unsafe { self.values.get_unchecked(i) };
        value_cell.with_mut(|p| {
            // SAFETY: exclusive access to an unpublished, reserved slot (the caller's contract).
            unsafe { (*p).write(value) };
        });
    }

    /// Moves `n` values from `src` into slots `i..i + n` as one copy (a batch publish's run), each
    /// with the metadata `meta`.
    ///
    /// No lines are fetched ahead for writing. From stop 22 to stop 71 each line of the run
    /// fetched (`prefetchw`) the line 32 lines (256 `u64`s, a batch) past it: on the 2-vCPU Xeon
    /// of stop 22, whose rings' segments cycled through less memory than a core's L2, that was
    /// batch 1→1 ×1.09 (and no prefetch ×0.84 in a process's first run). Since a ring's segments
    /// hold its capacity (stop 71) its producer writes lines that have left both cores' private
    /// caches, a sequential stream the CPU's own prefetcher follows: in a profile of the
    /// ring-like batch 1→1 on the 2-vCPU EPYC guest, 39% of `publish_run`'s samples waited on the
    /// `prefetchw`s themselves (the misses they had in flight filled the core's queue), and a
    /// lone thread publishing batches of 256 into a ring-like topic with no reader ran 2.95 → 3.3
    /// G records/s without them. Alternating harness binaries (stop 72): batch 1→1 ×1.13 (4
    /// rounds, 1.07–1.20), many-producer batch 1→1 ×1.11 (6 rounds), 1→2, 1→4 and 2→2, where the
    /// readers bound the run, ×0.99–1.01.
    ///
    /// # Safety
    /// `i + n <= self.len()`; the caller reserved those offsets, has not published them, and holds
    /// a reference to the segment (as for [`Segment::write`]); `src` points to `n` initialized
    /// values that the caller gives up (moved: it must not use or drop them again).
    #[inline]
    pub(crate) unsafe fn write_values(&self, i: usize, src: *const T, n: usize, meta: Meta) {
        debug_assert!(i + n <= self.len());
        // The metadata first, as in `Segment::write`.
        if !meta.is_empty() {
            for k in i..i + n {
                // SAFETY: `k < i + n <= len`, and the slots are the caller's (its contract).
                unsafe { self.write_meta(k, meta) };
            }
        }
        keep_store_order();
        // SAFETY: slots `i..i + n` exist and are the caller's alone; `src` holds `n` values the
        // caller gives up (the caller's contract).
        unsafe { move_into(&self.values[i..i + n], src) };
    }

    /// Writes the metadata of slot `i` (see [`Segment::write`]).
    ///
    /// # Safety
    /// As for [`Segment::write`].
    #[inline(always)]
    unsafe fn write_meta(&self, i: usize, meta: Meta) {
        // A zero word (no timestamp, no key) is not written: the slot's word is already 0
        // (segments start zeroed, and the pool zeroes a reused one that may hold a key's flag),
        // which spares topics without timestamps a store per record.
        if meta.is_empty() {
            return;
        }
        // The common case, an unkeyed stamp within range, in one compare (a keyed record's flag
        // bit, like a stamp out of range, puts `delta` out of range).
        let delta = meta.ts_and_flag.wrapping_sub(self.tzero);
        let word = if Packed::in_range(delta) {
            delta
        } else {
            // SAFETY: the caller's contract, passed on.
            unsafe { self.write_rare(i, meta) }
        };
        // Acquire: see the module's Orderings (`times`). Null only on a log without timestamps
        // whose segment no keyed record has written into yet.
        let mut cells = self.times.load(Ordering::Acquire);
        if cells.is_null() {
            cells = array_or_allocate(&self.times, self.len(), zero_word).cast_mut();
        }
        // SAFETY: `i < len` (the caller's contract), and the array has `len` cells.
        let time_cell = unsafe { &*cells.add(i) };
        time_cell.with_mut(|p| {
            let p = p.cast::<u8>();
            // Two stores (4 and 2 bytes); written as a byte array, the compiler emits six.
            // SAFETY: exclusive access as above; the cell is 6 bytes from `p`, and unaligned
            // writes need no alignment.
            unsafe {
                p.cast::<u32>().write_unaligned((word as u32).to_le());
                p.add(4)
                    .cast::<u16>()
                    .write_unaligned(((word >> 32) as u16).to_le());
            }
        });
    }

    /// The rest of [`Segment::write`] for a keyed record or a stamp outside the packed range:
    /// writes the key and the full stamp where they go and returns the packed word (not 0).
    ///
    /// # Safety
    /// As for [`Segment::write`].
    #[cold]
    #[inline(never)]
    unsafe fn write_rare(&self, i: usize, meta: Meta) -> u64 {
        let ts = meta.timestamp_nanos();
        let mut word = Packed::delta(ts, self.tzero);
        if word == Packed::WIDE {
            // SAFETY: `i < len`, exclusive access to the slot (the caller's contract).
            unsafe { Self::put_word(&self.wide, self.len(), i, ts) };
        }
        if meta.ts_and_flag & Meta::HAS_KEY != 0 {
            word |= Packed::HAS_KEY;
            // SAFETY: as above.
            unsafe { Self::put_word(&self.keys, self.len(), i, meta.key) };
        }
        word
    }

    /// Writes `word` into slot `i` of the lazily allocated array behind `array`.
    ///
    /// # Safety
    /// `i < len`, `len` is the segment's, and the caller has exclusive access to slot `i` (as in
    /// [`Segment::write`]).
    #[inline]
    unsafe fn put_word(array: &AtomicPtr<WordCell>, len: usize, i: usize, word: u64) {
        let cells = array_or_allocate(array, len, || UnsafeCell::new(MaybeUninit::uninit()));
        // SAFETY: the array has `len` cells and `i < len`; exclusive access (the caller's contract).
        unsafe { &*cells.add(i) }.with_mut(|p| {
            // SAFETY: as above.
            unsafe { (*p).write(word) };
        });
    }

    /// Asks the CPU to start fetching, for writing, the cache line that holds the value of slot
    /// `i + ahead`, where `ahead` is about 8 cache lines, when `i` is the first slot of a line
    /// (many producers call it for every slot they write; a batch's run,
    /// [`Segment::write_values`], for the first of each line; the single producer's one-record
    /// path does not, see `Log::publish_single_short`). The lines they are about to write were
    /// last read by the readers a whole retention window ago, so without it each store waits for
    /// its line to come back. A hint only: no effect outside x86-64, under loom, or past the segment's end.
    #[inline(always)]
    pub(crate) fn prefetch_ahead(&self, i: usize) {
        fetch_line_ahead::<_, AHEAD>(&self.values, i);
    }

    /// [`Segment::prefetch_ahead`], and the same for the stamp of slot `i + ahead`, for a
    /// many-producer publish of one record. The stamps' line matters most there: a `fetch_add`
    /// drains the store buffer, so it waits for every line its earlier stores still wait for (on
    /// a 16-core Xeon, fetching the stamps ahead too took a many-producer 1→1 from 30–45 to
    /// 64–72 M records/s). Where every line of stamps starts at a slot whose value starts a line
    /// too (values of a power-of-two size up to a line, or larger), the stamps' test is made only
    /// at those slots: one test a record instead of two, on a path whose saturated loop is bound
    /// by the instructions it issues (see `Log::publish_multi_short`).
    #[inline(always)]
    pub(crate) fn prefetch_slot_ahead(&self, i: usize) {
        let (values, stamps) = (
            per_line::<UnsafeCell<MaybeUninit<T>>>(),
            per_line::<AtomicU8>(),
        );
        if stamps.is_multiple_of(values) {
            if i.is_multiple_of(values) {
                fetch_ahead::<_, AHEAD>(&self.values, i);
                if i.is_multiple_of(stamps) {
                    fetch_ahead::<_, AHEAD>(&self.stamps, i);
                }
            }
        } else {
            self.prefetch_ahead(i);
            fetch_line_ahead::<_, AHEAD>(&self.stamps, i);
        }
    }

    /// Publishes slots `range` (multi-producer logs), whose values and metadata the caller wrote:
    /// a batch's run, after [`Segment::write_values`]. One fence for the run, then a plain store
    /// for each whole group's flag and for each stamp outside whole groups (callgrind
    /// `ring-multi-publish-slice`: see `Log::publish_run`). A stamp a slot, as until stop 54, took
    /// ~90% of the samples of `publish_run` in a batch 2→2 profile on the EPYC guest, where the
    /// two producers' core bounded the run: on a line the readers keep taking, each store
    /// waits, and a core holds only so many stores that wait. With the flags, alternating
    /// binaries on that guest (4 rounds each): the many-producer ring-like topic's batch 1→1
    /// ×1.32, whose reader is alone on its core, and batch 2→2 ×1.05, whose readers were then
    /// the bound.
    ///
    /// # Safety
    /// The caller reserved the offsets of `range`, wrote every slot of it, and has not published
    /// them; `range` is within the segment, a multi-producer log's (which gives every slot a
    /// stamp).
    #[inline]
    pub(crate) unsafe fn publish_slots(&self, range: std::ops::Range<usize>) {
        // The whole groups inside the run get a flag each; the slots before the first and after
        // the last get their stamps. No other run holds a slot of a whole group of ours (I1), so
        // its flag is ours alone to store.
        let (head, groups, tail) = split_by_groups(range);
        // Release: every write of the run (values, metadata) is ordered before each stamp and
        // flag store below; a reader's Acquire load of one pairs with it (I2).
        fence(Ordering::Release);
        for stamp in self.stamps[head].iter().chain(&self.stamps[tail]) {
            // Relaxed: ordered by the fence above.
            stamp.store(1, Ordering::Relaxed);
        }
        for flag in &self.groups[groups] {
            // Relaxed: as above.
            flag.store(1, Ordering::Relaxed);
        }
    }

    /// How many slots from `from` on, up to `end` (both inside the segment), are published in a
    /// row (multi-producer logs): a reader's scan. Whole groups take one load of their flag, or,
    /// where one-record publishes or a run's ends stamped them, eight of their stamps (a stamp is
    /// 0 or 1, so their AND says whether all are); slots outside whole groups, one or two loads
    /// each.
    #[inline]
    pub(crate) fn published_run(&self, from: usize, end: usize) -> usize {
        // One slot at a time up to the first whole group (or to `end`, with none left), then
        // whole groups, then one at a time again. The groups' flags and stamps are sliced once,
        // bounds checked once: indexing each stamp cost a scan three instructions a slot more
        // (callgrind `multi-read`, `Reader::next` on a many-producer topic: 27.6 → 19.6 a
        // record; criterion, alternating binaries on the 2-vCPU EPYC: `read/one_by_one/multi`
        // ×1.16 over 12 rounds, `batch_256/multi` ×1.30 over 8), and so did indexing each group
        // at first here (`multi-read` 16.2 → 18.7, `multi-read-batch` 5.1 → 7.6, against 16.8
        // and 5.7 sliced: the flag's load and test, an eighth of them a record, over the stamps).
        // The same split as a run's (`split_by_groups`), so a group the scan takes whole is one
        // a run could have flagged.
        let (head, groups, _) = split_by_groups(from..end);
        let mut i = from;
        while i < head.end {
            if !self.slot_stamped(i) {
                return i - from;
            }
            i += 1;
        }
        // From where the first part ends: with no whole group that is `end`, inside the segment
        // however small it is (group indices alone could point past a segment under eight slots).
        let body = head.end..head.end + groups.len() * GROUP;
        for (flag, stamps) in self.groups[groups]
            .iter()
            .zip(self.stamps[body].chunks_exact(GROUP))
        {
            // Acquire, here and below: pairs with each writer's Release store of a stamp, or with
            // the Release fence before a run's Relaxed stamp and flag stores (I2).
            let whole = flag.load(Ordering::Acquire) != 0
                || stamps
                    .iter()
                    .fold(1, |all, stamp| all & stamp.load(Ordering::Acquire))
                    != 0;
            if !whole {
                break;
            }
            i += GROUP;
        }
        while i < end && self.slot_stamped(i) {
            i += 1;
        }
        i - from
    }

    /// Whether slot `i`'s stamp or its group's flag is set (multi-producer logs).
    #[inline]
    pub(crate) fn slot_stamped(&self, i: usize) -> bool {
        // Acquire: as in `published_run`.
        self.stamps[i].load(Ordering::Acquire) != 0
            || self.groups[i / GROUP].load(Ordering::Acquire) != 0
    }

    /// The value of slot `i`.
    ///
    /// # Safety
    /// Slot `i` is published and the caller observed that with Acquire (a stamp or the watermark),
    /// and the caller holds a reference to the segment for as long as the returned borrow lives.
    #[inline(always)]
    pub(crate) unsafe fn value(&self, i: usize) -> &T {
        debug_assert!(i < self.len());
        // SAFETY: a published slot's index is below `len` (offsets map into their segment).
        let cell = unsafe { self.values.get_unchecked(i) };
        // SAFETY: published slots are initialized and never written again (the caller's contract).
        cell.with(|p| unsafe { (*p).assume_init_ref() })
    }

    /// The values of slots `i..i + n`, in order (a batch's, read in one loop).
    ///
    /// # Safety
    /// `i + n <= self.len()`, and each of those slots as for [`Segment::value`].
    #[inline]
    pub(crate) unsafe fn values(&self, i: usize, n: usize) -> impl ExactSizeIterator<Item = &T> {
        debug_assert!(i + n <= self.len());
        // SAFETY: the range is inside the array, and its slots are published, hence initialized
        // and never written while the segment is held (the caller's contract).
        unsafe { values_of(self.values.get_unchecked(i..i + n)) }
    }

    /// The metadata of slot `i`.
    ///
    /// # Safety
    /// Same as [`Segment::value`].
    #[inline]
    pub(crate) unsafe fn meta(&self, i: usize) -> Meta {
        // Acquire: see the module's Orderings (`times`).
        let cells = self.times.load(Ordering::Acquire);
        if cells.is_null() {
            return Meta::default(); // no word was ever written: no timestamp, no key
        }
        // SAFETY: the array has `len` cells and a published slot's index is below `len`.
        let word = unsafe { &*cells.add(i) }.with(|p| {
            let p = p.cast::<u8>();
            // SAFETY: written (or zeroed) before publication, never written again while published;
            // the cell is 6 bytes from `p`, read unaligned (see `write`).
            let (low, high) = unsafe {
                (
                    u32::from_le(p.cast::<u32>().read_unaligned()),
                    u16::from_le(p.add(4).cast::<u16>().read_unaligned()),
                )
            };
            u64::from(low) | u64::from(high) << 32
        });
        let ts = match word & Packed::DELTA {
            0 => 0,
            // SAFETY: the word says the wide array holds this slot's timestamp, written (after
            // allocating the array) before the word; `i < len` as for the word.
            Packed::WIDE => unsafe { Self::get_word(&self.wide, i) },
            delta => Packed::timestamp(delta, self.tzero),
        };
        if word & Packed::HAS_KEY != 0 {
            // SAFETY: HAS_KEY is set only after the key was written, so the array exists and the
            // word is initialized; `i < len` (the caller's contract: a published slot).
            let key = unsafe { Self::get_word(&self.keys, i) };
            Meta {
                ts_and_flag: ts | Meta::HAS_KEY,
                key,
            }
        } else {
            Meta {
                ts_and_flag: ts,
                key: 0,
            }
        }
    }

    /// Slot `i` of the lazily allocated array behind `array`.
    ///
    /// # Safety
    /// The array exists and slot `i` was written before the slot's publication, which the caller
    /// observed with Acquire; `i < len`.
    #[inline]
    unsafe fn get_word(array: &AtomicPtr<WordCell>, i: usize) -> u64 {
        // Acquire: the slot's publication (which the caller observed with Acquire) already
        // orders the array's allocation before us; Acquire keeps that reasoning local.
        let cells = array.load(Ordering::Acquire);
        debug_assert!(!cells.is_null(), "packed word points to a missing array");
        // SAFETY: the caller's contract.
        unsafe { &*cells.add(i) }.with(|p| unsafe { (*p).assume_init() })
    }

    /// Takes one more reference.
    ///
    /// # Safety
    /// The segment is alive: the caller holds a reference or is pinned and loaded it from the
    /// directory (whose reference is released only through the epoch).
    #[inline]
    pub(crate) unsafe fn retain(&self) {
        // Relaxed: see the module's Orderings.
        self.refs.fetch_add(1, Ordering::Relaxed);
    }

    /// Drops one reference; the last one drops the values and recycles the segment.
    ///
    /// # Safety
    /// `this` came from [`Pool::take`] (through the directory) and the caller owns one reference,
    /// which it gives up; it must not touch the segment afterwards.
    pub(crate) unsafe fn release(this: *const Segment<T>) {
        // SAFETY: the caller owns a reference, so the segment is alive for this decrement.
        let last = unsafe { (*this).refs.fetch_sub(1, Ordering::Release) } == 1;
        if !last {
            return;
        }
        fence(Ordering::Acquire);
        // SAFETY: the count reached zero: nobody else references the segment, and it was created by
        // `Box::into_raw` in `Pool::take`.
        let mut seg = unsafe { Box::from_raw(this as *mut Segment<T>) };
        match seg.pool.take() {
            // Nothing to drop (`drop_values` would do nothing): spare at once.
            Some(pool) if !std::mem::needs_drop::<T>() => pool.put(seg),
            // The values are the application's, and this may be a place where its code must not
            // run (see Lifetime): a publisher drops them later.
            Some(pool) => pool.put_retired(seg),
            // Not from a pool (tests): dropped here, values and all.
            None => drop(seg),
        }
    }

    /// Drops every initialized value (once: the slots are then considered empty).
    ///
    /// A `Drop` that panics does not stop the others: like a `Vec`'s, every value is dropped,
    /// and the first panic is handed back for the caller to resume where the application's code
    /// may see it.
    ///
    /// Debug builds panic if the thread is in a place where the application's code must not run
    /// ([`bar_user_code`]) and there is a value to drop.
    fn drop_values(&mut self) -> Result<(), Panic> {
        self.drop_values_checked(true)
    }

    /// [`Segment::drop_values`]; `check` says whether to make its debug check.
    fn drop_values_checked(&mut self, check: bool) -> Result<(), Panic> {
        if !std::mem::needs_drop::<T>() {
            return Ok(());
        }
        let stamped = !self.stamps.is_empty();
        // Relaxed: we own the segment exclusively, after the Acquire fence in `release`.
        let filled = self.filled.swap(0, Ordering::Relaxed);
        let len = self.values.len();
        let mut first_panic = None;
        let mut next = 0;
        // Each mark is cleared, and `next` moved past its slot, before the value is dropped: after
        // a panic the scan resumes at the next slot, and nothing is dropped twice.
        while next < len {
            let scan = panic::catch_unwind(AssertUnwindSafe(|| {
                while next < len {
                    let i = next;
                    next += 1;
                    let present = if stamped {
                        // Relaxed: as for `filled`. A group's flag is cleared after the scan.
                        self.stamps[i].swap(0, Ordering::Relaxed) != 0
                            || self.groups[i / GROUP].load(Ordering::Relaxed) != 0
                    } else {
                        i < filled
                    };
                    if present {
                        assert!(
                            !(check && user_code_barred()),
                            "a segment's values dropped where the application's code must not run (I6)"
                        );
                        self.values[i].with_mut(|p| {
                            // SAFETY: the slot was published (stamp or fill count) so it is
                            // initialized; we own the segment exclusively and cleared its mark (or
                            // passed it in `next`) above, so no double drop.
                            unsafe { (*p).assume_init_drop() };
                        });
                    }
                }
            }));
            if let Err(p) = scan {
                first_panic.get_or_insert(p);
            }
        }
        // Every value is dropped: no flag may say so again (a pooled segment freed later).
        clear_flags(&mut self.groups);
        first_panic.map_or(Ok(()), Err)
    }
}

impl<T> Drop for Segment<T> {
    fn drop(&mut self) {
        // Values are dropped by `Pool::drop_retired`; a spare segment holds none (it was emptied,
        // and `filled`/stamps say so). A retired one still holds them when its pool goes with its
        // log before a publisher got to them; then this is the only place left to drop them,
        // unchecked (see `Log`'s `Drop` and `Pool::drop_late`, which leave that only where no
        // thread could be started).
        let dropped = self.drop_values_checked(false);
        let len = self.len();
        // Relaxed: `&mut self`, nobody else can reach the segment.
        // SAFETY: each is null or a boxed slice of `len` cells (allocated in `array_or_allocate`,
        // or `times` in `allocate`), and this is its only release.
        unsafe {
            free_array(self.keys.load(Ordering::Relaxed), len);
            free_array(self.wide.load(Ordering::Relaxed), len);
            free_array(self.times.load(Ordering::Relaxed), len);
        }
        resume_unless_unwinding(dropped);
    }
}

/// A panic caught from the application's `Drop`, kept to be resumed where its code may run.
pub(crate) type Panic = Box<dyn std::any::Any + Send>;

#[cfg(not(loom))]
crate::sync::thread_local! {
    /// Whether this thread is dropping retired values after a publish (see [`DropsUnderWay`]).
    static DROPPING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

// Loom's macro takes no `const` initializer.
#[cfg(loom)]
crate::sync::thread_local! {
    static DROPPING: std::cell::Cell<bool> = std::cell::Cell::new(false);
}

/// Marks, until dropped, that this thread is dropping retired values after a publish
/// (`Log::drop_retired`), so that a `Drop` among them that publishes does not do the same again
/// further down the stack: a chain of such `Drop`s (each publish retiring values whose `Drop`
/// publishes) would otherwise nest one publish and one drop deeper per link, until the stack
/// overflowed. The outer call drains its pool until it is empty instead (`Pool::drop_retired`).
pub(crate) struct DropsUnderWay(());

impl DropsUnderWay {
    /// The mark, or `None` if this thread is dropping retired values already.
    pub(crate) fn enter() -> Option<Self> {
        // Not `then_some`: its argument is built either way, and dropping the unused mark would
        // clear the outer call's.
        if DROPPING.with(|d| d.replace(true)) {
            None
        } else {
            Some(DropsUnderWay(()))
        }
    }
}

impl Drop for DropsUnderWay {
    fn drop(&mut self) {
        DROPPING.with(|d| d.set(false));
    }
}

/// Resumes the panic in `dropped`, if any, unless this thread is already unwinding from another:
/// a second panic leaving a `Drop` there would abort the process, so the values are dropped and
/// this panic goes unreported.
pub(crate) fn resume_unless_unwinding(dropped: Result<(), Panic>) {
    if let Err(p) = dropped {
        if !std::thread::panicking() {
            panic::resume_unwind(p);
        }
    }
}

/// The pools of dropped logs whose last segments the epoch still held when their log went (see
/// [`Pool::drop_late`]), and whether the thread that drains them runs.
struct LatePools {
    pools: Vec<Box<dyn LateDrop>>,
    running: bool,
}

static LATE: StaticLock<LatePools> = StaticLock::new(LatePools {
    pools: Vec::new(),
    running: false,
});

/// A pool on the late-drop list (the list's reference to it), whatever its record type.
trait LateDrop: Send {
    /// [`Pool::drop_returned`], whatever the pool's record type.
    fn drop_returned(&self) -> (usize, Result<(), Panic>);
}

impl<T: Send + Sync> LateDrop for Arc<Pool<T>> {
    fn drop_returned(&self) -> (usize, Result<(), Panic>) {
        // The pool's own method (`self.drop_returned()` would be this one again).
        Pool::drop_returned(self)
    }
}

/// How many flushes in a row that bring none of the awaited segments back end a round of
/// [`flush_until_back`]. Bags of deferred releases come due two epochs after they were sealed,
/// so two flushes may find nothing due even once nothing holds the epoch back.
const IDLE_FLUSHES: u32 = 4;

/// One round of waiting for segments the epoch still holds: pins and flushes the epoch, letting
/// deferred releases run, then calls `drain` (which drops the values of the segments that came
/// back and returns how many are still out), again and again while segments keep coming back.
/// Returns how many are still out: none, or some after [`IDLE_FLUSHES`] flushes in a row
/// brought none back (a thread holds the epoch back; the caller waits before its next round).
///
/// One flush is not enough: the collector runs at most 8 bags of deferred releases a flush, and
/// a trim hands its releases over in a bag of their own (`Log::trim`), so a thread that held
/// the epoch back while a topic trimmed leaves one bag per trim behind it. The late-drop thread
/// used to flush once a round, between naps that grow to 100 ms: 8 segments came back a round.
/// Measured on the 2-vCPU VM, a topic of segments of 2 that trimmed 10,000 of them while
/// another thread held the epoch, then dropped: 160 of its 20,000 values a second came back
/// after the epoch let go, so 2 minutes for all of them (valgrind's memcheck, which runs one
/// thread at a time and so holds the epoch back often, once left 1,818 undropped 10 s after
/// such a drop in `tests/retention.rs`). Flushing while they come back, all came back in the
/// round after the epoch let go.
pub(crate) fn flush_until_back(epoch: &Epoch, mut drain: impl FnMut() -> usize) -> usize {
    let mut out = drain();
    let mut idle = 0;
    while out > 0 && idle < IDLE_FLUSHES {
        epoch.pin().flush();
        let now = drain();
        idle = if now < out { 0 } else { idle + 1 };
        out = now;
    }
    out
}

/// The late-drop thread: round after round it takes the pools newly listed, flushes the epoch
/// (letting deferred releases run) and drains every pool it holds while their segments come back
/// ([`flush_until_back`]), letting go of each whose segments all came back. It naps between
/// rounds, from 1 ms growing to 100 ms (back to 1 ms when a pool arrives or segments came back),
/// and ends, under the list's lock, once it holds none and none is listed. A
/// value's `Drop` that panics stops none of the others and not the thread: the panic hook
/// reported it where it happened, and its payload is dropped here.
fn drop_late_pools() {
    /// Should the thread ever unwind (an engine bug: the values' panics are caught), the next
    /// pool listed starts another, and the pools this one held go with their last segments.
    struct Stopped;
    impl Drop for Stopped {
        fn drop(&mut self) {
            if std::thread::panicking() {
                LATE.lock().running = false;
            }
        }
    }
    let _stopped = Stopped;
    let epoch = Epoch::new();
    let mut pools: Vec<Box<dyn LateDrop>> = Vec::new();
    let mut nap = LATE_NAP;
    // How many segments the pools held were still out after the last round.
    let mut was_out = usize::MAX;
    loop {
        {
            let mut late = LATE.lock();
            if !late.pools.is_empty() {
                pools.append(&mut late.pools);
                nap = LATE_NAP;
            } else if pools.is_empty() {
                late.running = false;
                return;
            }
        }
        let out = flush_until_back(&epoch, || {
            let mut out = 0;
            pools.retain(|pool| {
                let (still_out, dropped) = pool.drop_returned();
                if let Err(payload) = dropped {
                    // A payload whose own `Drop` panics is left undropped rather than end the
                    // thread.
                    if let Err(again) = panic::catch_unwind(AssertUnwindSafe(move || drop(payload)))
                    {
                        std::mem::forget(again);
                    }
                }
                out += still_out;
                still_out > 0
            });
            out
        });
        if out > 0 {
            // Back to the shortest nap while segments come back: the epoch may let go of the
            // rest soon (a thread that holds it back only now and then). A pool that arrived
            // this round set it already, whatever its segments add to the count.
            if out < was_out {
                nap = LATE_NAP;
            }
            was_out = out;
            std::thread::sleep(nap);
            nap = (nap * 2).min(LATE_NAP_MAX);
        }
    }
}

/// Frees an array of `len` cells made by `Box::into_raw` of a boxed slice; nothing if null.
///
/// # Safety
/// `cells` is null or such an array of exactly `len` cells, which nobody uses afterwards.
unsafe fn free_array<E>(cells: *mut E, len: usize) {
    if !cells.is_null() {
        // SAFETY: the caller's contract.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(cells, len)) });
    }
}

/// The lazily allocated array behind `array` (`len` cells, each made by `cell`), allocating it
/// on first use. Two producers racing here both allocate; one array wins and the other is freed
/// at once.
#[cold]
fn array_or_allocate<E>(array: &AtomicPtr<E>, len: usize, cell: impl Fn() -> E) -> *const E {
    // Acquire: pairs with the AcqRel exchange below, so another producer's array is seen
    // fully allocated.
    let current = array.load(Ordering::Acquire);
    if !current.is_null() {
        return current;
    }
    let fresh: Box<[E]> = (0..len).map(|_| cell()).collect();
    let fresh = Box::into_raw(fresh) as *mut E;
    // AcqRel on success: publishes the allocation to later loads (Acquire); Acquire on failure:
    // we use the winner's array, which must be seen allocated.
    match array.compare_exchange(
        std::ptr::null_mut(),
        fresh,
        Ordering::AcqRel,
        Ordering::Acquire,
    ) {
        Ok(_) => fresh,
        Err(winner) => {
            // SAFETY: `fresh` came from `Box::into_raw` of a slice of `len` cells just above
            // and was never shared.
            unsafe { free_array(fresh, len) };
            winner
        }
    }
}

/// The 48-bit time word of a slot: bit 47 is the key flag, bits 0..47 the timestamp.
///
/// The timestamp field holds `0` for "no timestamp" (a topic without them), [`Packed::WIDE`]
/// for "in the wide array", and otherwise `ts - tzero` (`tzero`: the segment's install time less
/// `BIAS`), which covers stamps from about 19.5 hours before the segment was installed to 19.5
/// hours after. A segment is installed when the one before it starts filling, so every stamp
/// fits when two segments' worth of records take less than that: at 1 Ki slots, a topic
/// publishing a record every 30 s or more often; at 16 Ki, one every 2 s. Stamps taken just
/// before the segment was installed (a producer that read the clock, then waited) are covered by
/// the bias. Slower topics put the stamps that do not fit in the wide array (8 bytes more each).
struct Packed;

impl Packed {
    const HAS_KEY: u64 = 1 << 47;
    const DELTA: u64 = Self::HAS_KEY - 1;
    const WIDE: u64 = Self::DELTA;
    const BIAS: u64 = 1 << 46;

    /// The timestamp field for `ts` in a segment whose range starts at `tzero`.
    fn delta(ts: u64, tzero: u64) -> u64 {
        if ts == 0 {
            return 0;
        }
        // Wrapping: a stamp before `tzero` wraps to a huge value, which is out of range.
        let d = ts.wrapping_sub(tzero);
        if Self::in_range(d) {
            d
        } else {
            Self::WIDE
        }
    }

    /// Whether `d` (a stamp less `tzero`) can stand in the field: neither 0 nor `WIDE` or more,
    /// in one compare.
    #[inline(always)]
    fn in_range(d: u64) -> bool {
        d.wrapping_sub(1) < Self::WIDE - 1
    }

    /// The timestamp a field from [`Packed::delta`] (neither 0 nor `WIDE`) stands for.
    #[inline]
    fn timestamp(delta: u64, tzero: u64) -> u64 {
        delta.wrapping_add(tzero)
    }
}

/// Spare segments of one log, kept so that steady-state publishing allocates nothing.
pub(crate) struct Pool<T> {
    size: usize,
    stamped: bool,
    /// Whether the log keeps timestamps. If so, a segment's base time is set when it is taken;
    /// if not, a reused segment's time words must read 0 again (see `Segment::write`), so they
    /// are cleared when the segment ever held a keyed record.
    timestamps: bool,
    keep: usize,
    /// Spare segments, a stack: the one handed out is the one that came back last. First in, first
    /// out, a ring turns through every segment it stocked, the one taken used the longest ago; that
    /// measured tput 1→1 ×1.07 but the 2 µs-paced 1→1 p50 ×1.07 and p90 ×1.05 worse (stop 71, 6
    /// and 8 alternating rounds; `perf/experiments/fifo-pool.patch`), so it stays a stack.
    ///
    /// Boxed on purpose: segments are handed out as raw pointers (`Box::into_raw`) and must not
    /// move.
    #[allow(clippy::vec_box)]
    spare: Mutex<Vec<Box<Segment<T>>>>,
    /// Segments no longer referenced whose values still need dropping (see Lifetime).
    #[allow(clippy::vec_box)]
    retired: Mutex<Vec<Box<Segment<T>>>>,
    /// Segments taken and not yet spare again (see [`Pool::lent`]).
    lent: AtomicUsize,
    /// [`Pool::drop_late`], for `Log`'s `Drop`, which cannot name the bounds the late-drop
    /// thread's list needs (`T: Send + Sync + 'static`); `new`, which can, picks it.
    pub(crate) drop_late: fn(Arc<Self>),
}

impl<T> Pool<T> {
    pub(crate) fn new(size: usize, stamped: bool, timestamps: bool, keep: usize) -> Arc<Self>
    where
        T: Send + Sync + 'static,
    {
        Arc::new(Pool {
            size,
            stamped,
            timestamps,
            keep,
            spare: Mutex::new(Vec::new()),
            retired: Mutex::new(Vec::new()),
            lent: AtomicUsize::new(0),
            drop_late: Self::drop_late,
        })
    }

    /// Allocates `count` segments now (at most `keep`), with every page the log will write
    /// mapped, and keeps them as spares: a log with a capacity (`max_records` under `Block` or
    /// `Reject`) stocks the segments it will cycle through when it is created, as a ring buffer
    /// allocates its slots up front, so that none of its segment switches allocates and none of
    /// its writes faults a fresh page in. Measured on the 2-vCPU VM, 2 µs-paced publisher of a
    /// ring-like topic: a switch that allocated took 11–77 µs (against about 1 µs from the
    /// pool), and the first write into each 4 KiB of a fresh segment's values took ~5 µs.
    pub(crate) fn stock(&self, count: usize) {
        let mut fresh = Vec::with_capacity(count.min(self.keep));
        for _ in 0..count.min(self.keep) {
            let mut seg = Segment::allocate(self.size, self.stamped, self.timestamps);
            // Relaxed: the segment is ours alone. Null on a log without timestamps, whose time
            // words only a keyed record writes, allocating them then.
            let times = seg.times.load(Ordering::Relaxed);
            // SAFETY: any byte of a `MaybeUninit`, of a stamp, of a group's flag or of a 6-byte
            // time word may be 0; `times`, when not null, is the segment's array of `size`
            // cells, which we alone can reach (the segment is not shared yet).
            unsafe {
                touch_pages(&mut seg.values);
                touch_pages(&mut seg.stamps);
                touch_pages(&mut seg.groups);
                if !times.is_null() {
                    touch_pages(std::slice::from_raw_parts_mut(times, self.size));
                }
            }
            fresh.push(seg);
        }
        lock(&self.spare).append(&mut fresh);
    }

    /// A segment for the offsets `[base, base + size)`, with one reference (the directory's).
    pub(crate) fn take(this: &Arc<Self>, base: u64) -> *mut Segment<T> {
        let spare = lock(&this.spare).pop();
        let mut seg = match spare {
            Some(mut seg) => {
                // Its last life's publications: a stamp must mean this life's (see the module
                // docs). `drop_values` cleared the stamps of values it dropped (so that a pooled
                // segment freed later does not drop them again); values that need no drop kept
                // theirs.
                clear_flags(&mut seg.stamps);
                clear_flags(&mut seg.groups);
                // Relaxed: the segment is ours alone (it came out of the pool).
                let times = seg.times.load(Ordering::Relaxed);
                // On a log without timestamps the words an earlier life's keyed records wrote
                // must read 0 again (see `Segment::write`); on a timestamped log this life
                // rewrites every word.
                if !this.timestamps && !times.is_null() {
                    // SAFETY: the segment's array of `size` cells, ours alone (pooled segment).
                    for cell in unsafe { std::slice::from_raw_parts(times, this.size) } {
                        // SAFETY: as above.
                        cell.with_mut(|p| unsafe { *p = [0; 6] });
                    }
                }
                seg
            }
            None => Segment::allocate(this.size, this.stamped, this.timestamps),
        };
        seg.base = base;
        // On a timestamped log every slot's word is rewritten relative to this (never 0).
        seg.tzero = if this.timestamps {
            clock::now_nanos().wrapping_sub(Packed::BIAS)
        } else {
            0
        };
        // Relaxed: the segment is not shared yet; installing it publishes these with Release.
        seg.refs.store(1, Ordering::Relaxed);
        seg.filled.store(0, Ordering::Relaxed);
        seg.bytes.store(0, Ordering::Relaxed);
        seg.pool = Some(Arc::clone(this));
        // Relaxed: see `put`.
        this.lent.fetch_add(1, Ordering::Relaxed);
        Box::into_raw(seg)
    }

    fn put(&self, seg: Box<Segment<T>>) {
        // Relaxed: a count, read only by `Log`'s `Drop` to wait for it to reach zero; nothing is
        // read through it (the segments come back through the mutexes).
        self.lent.fetch_sub(1, Ordering::Relaxed);
        self.keep_spare(seg);
    }

    /// Keeps an emptied segment as spare, or frees it when the pool has enough.
    fn keep_spare(&self, seg: Box<Segment<T>>) {
        let mut spare = lock(&self.spare);
        if spare.len() < self.keep {
            spare.push(seg);
        }
    }

    /// Keeps a segment whose values still need dropping, for [`Pool::drop_retired`].
    fn put_retired(&self, seg: Box<Segment<T>>) {
        lock(&self.retired).push(seg);
    }

    /// Whether segments wait for [`Pool::drop_retired`].
    pub(crate) fn has_retired(&self) -> bool {
        !lock(&self.retired).is_empty()
    }

    /// Drops the values of the segments retired so far and makes them spare. The values are the
    /// application's: call it only where its code may run (after a publish, holding no lock).
    ///
    /// A `Drop` that panics stops nothing: every value is dropped and every segment made spare,
    /// and the first panic is returned for the caller to resume.
    pub(crate) fn drop_retired(&self) -> Result<(), Panic> {
        let mut dropped = Ok(());
        // Until none is left: the values' `Drop`s may publish, and so retire more segments.
        loop {
            let retired = std::mem::take(&mut *lock(&self.retired));
            if retired.is_empty() {
                return dropped;
            }
            // Relaxed: see `put`.
            self.lent.fetch_sub(retired.len(), Ordering::Relaxed);
            for mut seg in retired {
                let this = seg.drop_values();
                dropped = dropped.and(this);
                self.keep_spare(seg);
            }
        }
    }

    /// Hands the segments still out when the pool's log goes (held back by the epoch, see
    /// `Log`'s `Drop`) to the process's one late-drop thread, named `logbus-drop`, which waits for
    /// them and drops their values ([`drop_late_pools`]). The pool stays alive on its list, so a
    /// deferred release run by another thread's pin, maybe inside a publish to another log, only
    /// retires its segment here and runs none of the application's code there (I6). The thread
    /// is started for the first such pool and ends once no pool is left on its list, so a
    /// program that drops many topics while some thread stays pinned has one such thread, not
    /// one a topic. If no thread can be started, the pool goes with the last of the segments,
    /// which drops their values wherever that is released.
    fn drop_late(pool: Arc<Self>)
    where
        T: Send + Sync + 'static,
    {
        let mut late = LATE.lock();
        late.pools.push(Box::new(pool));
        if late.running {
            return;
        }
        let started = std::thread::Builder::new()
            .name("logbus-drop".into())
            .spawn(drop_late_pools);
        late.running = started.is_ok();
        // Not started: the pool leaves the list (dropped after the lock, as nothing is run under it).
        let unlisted = if late.running { None } else { late.pools.pop() };
        drop(late);
        drop(unlisted);
    }

    /// Drops the values of the segments that came back so far (see [`Pool::drop_retired`]: a
    /// panic stops nothing, and the first is returned) and says how many segments are still out.
    /// A dropped log's wait for its last segments calls it after each flush of the epoch
    /// ([`flush_until_back`]). Only where the application's code may run.
    pub(crate) fn drop_returned(&self) -> (usize, Result<(), Panic>) {
        let dropped = self.drop_retired();
        (self.lent(), dropped)
    }

    /// How many segments are out of the pool (installed, or held by a reader, a producer or a
    /// deferred release) and not yet back as spare.
    pub(crate) fn lent(&self) -> usize {
        // Relaxed: see `put`.
        self.lent.load(Ordering::Relaxed)
    }

    /// Number of segments waiting for reuse.
    pub(crate) fn spare(&self) -> usize {
        lock(&self.spare).len()
    }
}

/// One owned reference to a segment; dropping it releases the reference.
///
/// Held as a `NonNull`, so an `Option<SegRef<T>>` (a writer's current segment) is one word and
/// testing it is one compare.
pub(crate) struct SegRef<T> {
    ptr: NonNull<Segment<T>>,
}

// SAFETY: a `SegRef` is a counted reference to a `Segment`, which is `Send + Sync` for these `T`.
unsafe impl<T: Send + Sync> Send for SegRef<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Sync for SegRef<T> {}

impl<T> SegRef<T> {
    /// Wraps a reference the caller owns.
    ///
    /// # Safety
    /// The caller transfers ownership of one reference to `ptr`'s segment (so `ptr` is not null).
    pub(crate) unsafe fn from_owned(ptr: *const Segment<T>) -> Self {
        // SAFETY: a pointer that carries a reference points at a live segment, never null.
        let ptr = unsafe { NonNull::new_unchecked(ptr.cast_mut()) };
        SegRef { ptr }
    }
}

impl<T> std::ops::Deref for SegRef<T> {
    type Target = Segment<T>;
    #[inline]
    fn deref(&self) -> &Segment<T> {
        // SAFETY: we own a reference, so the segment is alive.
        unsafe { self.ptr.as_ref() }
    }
}

impl<T> Drop for SegRef<T> {
    fn drop(&mut self) {
        // SAFETY: we own exactly one reference and never touch the segment again.
        unsafe { Segment::release(self.ptr.as_ptr()) }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    const HOUR: u64 = 3_600_000_000_000;

    /// What `flush_until_back` does with a drain that reports `outs` in turn (how many segments
    /// are still out after each call): how many are out at its end, and how many drains it made.
    fn flushing(outs: &[usize]) -> (usize, usize) {
        let epoch = Epoch::new();
        let mut calls = 0;
        let out = flush_until_back(&epoch, || {
            calls += 1;
            outs[calls - 1]
        });
        (out, calls)
    }

    #[test]
    fn a_wait_flushes_again_while_segments_come_back_and_ends_when_none_are_out_or_none_come() {
        // Nothing out: no flush at all.
        assert_eq!(flushing(&[0]), (0, 1));
        // Each flush brings some back (a backlog comes back 8 bags a flush): on to the last.
        assert_eq!(flushing(&[900, 892, 884, 8, 0]), (0, 5));
        // Flushes that bring none back, fewer than IDLE_FLUSHES in a row, end nothing (bags
        // come due two epochs after they were sealed); a flush that brings some starts the
        // count again.
        assert_eq!(flushing(&[5, 5, 5, 5, 3, 3, 3, 0]), (0, 8));
        // IDLE_FLUSHES in a row that bring none back end the round (the epoch is held).
        let held = [4, 4, 4, 4, 4, 0];
        assert_eq!(flushing(&held), (4, 1 + IDLE_FLUSHES as usize));
    }

    /// Writes `metas` into slots 0.. of a segment whose base time is `tbase`, releases it into
    /// its pool, and returns what was read back before the release.
    fn round_trip(pool: &Arc<Pool<u64>>, tbase: Option<u64>, metas: &[Meta]) -> Vec<Meta> {
        let ptr = Pool::take(pool, 0);
        // SAFETY: freshly taken, so ours alone until released below.
        let seg = unsafe { &mut *ptr };
        if let Some(t) = tbase {
            seg.tzero = t.wrapping_sub(Packed::BIAS);
        }
        let read = metas
            .iter()
            .enumerate()
            .map(|(i, &m)| {
                // SAFETY: `i` is inside the segment, written once, read on this thread after.
                unsafe { seg.write(i, i as u64, m) };
                // SAFETY: as above.
                unsafe { seg.meta(i) }
            })
            .collect();
        seg.set_filled(metas.len());
        // SAFETY: we own the one reference `take` handed out.
        unsafe { Segment::release(ptr) };
        read
    }

    fn same(a: &[Meta], b: &[Meta]) -> bool {
        a.len() == b.len()
            && a.iter()
                .zip(b)
                .all(|(x, y)| x.timestamp_nanos() == y.timestamp_nanos() && x.key() == y.key())
    }

    #[test]
    fn an_offset_has_a_slot_only_in_its_own_segment() {
        let pool = Pool::<u64>::new(32, true, false, 4);
        let ptr = Pool::take(&pool, 64);
        // SAFETY: freshly taken, so ours alone until released below.
        let seg = unsafe { &*ptr };
        assert_eq!(seg.slot_of(64), Some(0));
        assert_eq!(seg.slot_of(95), Some(31));
        // The next segment's first offset, the one before this segment, and offsets far enough
        // below the base that the subtraction wraps.
        for outside in [96, 63, 0, u64::MAX] {
            assert_eq!(seg.slot_of(outside), None, "{outside}");
        }
        // SAFETY: we own the one reference `take` handed out.
        unsafe { Segment::release(ptr) };
    }

    #[test]
    fn a_line_holds_elements_by_their_size_and_at_least_one() {
        assert_eq!(per_line::<u8>(), 64);
        assert_eq!(per_line::<u64>(), 8);
        assert_eq!(per_line::<[u8; 24]>(), 2);
        assert_eq!(per_line::<[u8; 64]>(), 1);
        assert_eq!(per_line::<[u8; 100]>(), 1);
        assert_eq!(per_line::<()>(), 1);
    }

    #[test]
    fn packed_times_round_trip_near_and_far_from_the_base() {
        let pool = Pool::<u64>::new(16, false, true, 1);
        let base = 1_800_000_000_000_000_000; // 2027
        let metas = [
            Meta::new(base, None),
            Meta::new(base + 1, Some(7)),
            Meta::new(base - 1, None),
            Meta::new(base + 19 * HOUR, Some(u64::MAX)),
            Meta::new(base - 19 * HOUR, None),
            // Outside the packed range: the wide array.
            Meta::new(base + 20 * HOUR, None),
            Meta::new(base - 20 * HOUR, Some(0)),
            Meta::new(1, None),
            Meta::new(1 << 62, Some(3)),
        ];
        let read = round_trip(&pool, Some(base), &metas);
        assert!(same(&read, &metas), "{read:?} != {metas:?}");
        // Reused from the pool with another base: every word is rewritten.
        let moved: Vec<Meta> = metas
            .iter()
            .map(|m| Meta::new(m.timestamp_nanos() + 40 * HOUR, m.key()))
            .collect();
        assert_eq!(pool.spare(), 1);
        let read = round_trip(&pool, Some(base + 40 * HOUR), &moved);
        assert!(same(&read, &moved), "{read:?} != {moved:?}");
        // A base near zero (the wrapping arithmetic).
        let read = round_trip(&pool, Some(5), &metas);
        assert!(same(&read, &metas), "{read:?} != {metas:?}");
    }

    #[test]
    fn time_words_wait_for_a_keyed_record_on_topics_without_timestamps() {
        let words = |seg: &Segment<u64>| !seg.times.load(Ordering::Relaxed).is_null();
        let pool = Pool::<u64>::new(8, false, false, 1);
        let ptr = Pool::take(&pool, 0);
        // SAFETY: freshly taken, so ours alone until released below.
        let seg = unsafe { &*ptr };
        let write = |i: usize, meta: Meta| {
            // SAFETY: `i` is inside the segment, and each slot is written once, before any read.
            unsafe { seg.write(i, i as u64, meta) }
        };
        let key = |i: usize| {
            // SAFETY: slot `i` was written on this thread before.
            unsafe { seg.meta(i) }.key()
        };
        assert!(!words(seg), "allocated before any record");
        write(0, Meta::new(0, None));
        assert!(!words(seg), "allocated by an unkeyed record");
        assert_eq!(key(0), None);
        write(1, Meta::new(0, Some(9)));
        assert!(words(seg), "not allocated by a keyed record");
        write(2, Meta::new(0, None));
        assert_eq!([key(0), key(1), key(2)], [None, Some(9), None]);
        seg.set_filled(3);
        // SAFETY: we own the one reference `take` handed out.
        unsafe { Segment::release(ptr) };
        // A timestamped topic's segments have theirs from the start.
        let pool = Pool::<u64>::new(8, false, true, 1);
        let ptr = Pool::take(&pool, 0);
        // SAFETY: as above.
        assert!(words(unsafe { &*ptr }));
        // SAFETY: as above.
        unsafe { Segment::release(ptr) };
    }

    #[test]
    fn topics_without_timestamps_read_zero_and_keep_keys() {
        let pool = Pool::<u64>::new(8, true, false, 1);
        let metas = [
            Meta::new(0, None),
            Meta::new(0, Some(42)),
            Meta::new(0, None),
        ];
        let read = round_trip(&pool, None, &metas);
        assert!(same(&read, &metas), "{read:?} != {metas:?}");
        // The reused segment forgets the key flag of slot 1.
        let read = round_trip(&pool, None, &[Meta::new(0, None); 3]);
        assert!(read
            .iter()
            .all(|m| m.key().is_none() && m.timestamp_nanos() == 0));
    }

    /// Publishes `runs` of a fresh 32-slot multi-producer segment (a run `(a, b)` by
    /// `publish_slots`, a one-slot run `(a, a + 1)` marked `one` by its stamp alone, as a
    /// one-record publish stores it) and, after each, checks every scan `published_run(from,
    /// end)` against the slots published so far. Returns the segment, still held.
    fn publish_and_scan<T: Send + Sync + 'static>(
        pool: &Arc<Pool<T>>,
        runs: &[(usize, usize, bool)],
        value: impl Fn(usize) -> T,
    ) -> *mut Segment<T> {
        let ptr = Pool::take(pool, 0);
        // SAFETY: freshly taken, so ours alone until the caller releases it.
        let seg = unsafe { &*ptr };
        let mut published = [false; 32];
        for &(a, b, one) in runs {
            for k in a..b {
                // SAFETY: `k` is inside the segment and written once, before its publication.
                unsafe { seg.write(k, value(k), Meta::new(0, None)) };
            }
            if one {
                assert_eq!(b, a + 1);
                // SAFETY: `a` is inside the segment, a multi-producer one.
                unsafe { seg.stamp_unchecked(a) }.store(1, Ordering::Release);
            } else {
                // SAFETY: the run is inside the segment, written above and not yet published.
                unsafe { seg.publish_slots(a..b) };
            }
            published[a..b].fill(true);
            for from in 0..=32 {
                for end in from..=32 {
                    let expected = published[from..end].iter().take_while(|p| **p).count();
                    assert_eq!(
                        seg.published_run(from, end),
                        expected,
                        "scan {from}..{end} after publishing {a}..{b}"
                    );
                }
            }
        }
        ptr
    }

    /// Runs that start and end on and off group boundaries, one-record publishes inside and
    /// between groups, and slots 24 and 25 never published. Only group 1 (slots 8..16) lies whole
    /// inside one run.
    const MIXED: [(usize, usize, bool); 6] = [
        (3, 19, false),
        (0, 2, false),
        (2, 3, true),
        (19, 20, true),
        (20, 24, false),
        (26, 32, false),
    ];

    /// Runs on group boundaries: every group whole inside one run.
    const ALIGNED: [(usize, usize, bool); 3] = [(8, 24, false), (0, 8, false), (24, 32, false)];

    /// Runs to publish, the group flags they should set, and the slots they should stamp.
    type Case = (&'static [(usize, usize, bool)], [u8; 4], Vec<usize>);

    #[test]
    fn a_run_publishes_its_whole_groups_by_flag_and_a_scan_counts_flags_and_stamps_alike() {
        let cases: [Case; 2] = [
            (
                &MIXED,
                [0, 1, 0, 0],
                (0..8).chain(16..24).chain(26..32).collect(),
            ),
            (&ALIGNED, [1, 1, 1, 1], Vec::new()),
        ];
        for (runs, flags, stamps) in cases {
            let pool = Pool::<u64>::new(32, true, false, 4);
            let ptr = publish_and_scan(&pool, runs, |k| k as u64);
            // SAFETY: held since `take`, used on this thread only.
            let seg = unsafe { &*ptr };
            // Relaxed here and below: the stores were this thread's.
            let set: Vec<u8> = seg
                .groups
                .iter()
                .map(|f| f.load(Ordering::Relaxed))
                .collect();
            assert_eq!(set, flags, "{runs:?}");
            let stamped: Vec<usize> = (0..32)
                .filter(|&i| seg.stamps[i].load(Ordering::Relaxed) != 0)
                .collect();
            assert_eq!(stamped, stamps, "{runs:?}");
            let unpublished = if runs == MIXED { 24..26 } else { 0..0 };
            for i in 0..32 {
                // SAFETY: slots published above were written first.
                let value = seg.slot_stamped(i).then(|| *unsafe { seg.value(i) });
                let expected = (!unpublished.contains(&i)).then_some(i as u64);
                assert_eq!(value, expected, "slot {i} of {runs:?}");
            }
            // SAFETY: we own the one reference `take` handed out.
            unsafe { Segment::release(ptr) };
        }
    }

    /// A value that counts its drops.
    struct Counted(Arc<AtomicUsize>);

    impl Drop for Counted {
        fn drop(&mut self) {
            // Relaxed: read on this thread after the drops.
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn values_published_by_flag_or_stamp_are_dropped_once_and_the_flags_cleared() {
        let drops = Arc::new(AtomicUsize::new(0));
        let pool = Pool::<Counted>::new(32, true, false, 4);
        let ptr = publish_and_scan(&pool, &MIXED, |_| Counted(Arc::clone(&drops)));
        // SAFETY: held since `take`, ours alone: nobody else has a reference.
        let seg = unsafe { &mut *ptr };
        seg.drop_values().unwrap();
        // Relaxed: see `Counted`.
        assert_eq!(
            drops.load(Ordering::Relaxed),
            30,
            "every published slot, once"
        );
        // Relaxed: our own stores.
        assert!(seg.groups.iter().all(|f| f.load(Ordering::Relaxed) == 0));
        assert!((0..32).all(|i| !seg.slot_stamped(i)));
        seg.drop_values().unwrap();
        // SAFETY: we own the one reference `take` handed out.
        unsafe { Segment::release(ptr) };
        drop(pool);
        assert_eq!(drops.load(Ordering::Relaxed), 30, "and never again");
    }

    #[test]
    fn segments_smaller_than_a_group_publish_and_scan_by_stamps() {
        for size in [2usize, 4] {
            let pool = Pool::<u64>::new(size, true, false, 4);
            let ptr = Pool::take(&pool, 0);
            // SAFETY: freshly taken, ours alone until released below.
            let seg = unsafe { &*ptr };
            for from in 0..=size {
                for end in from..=size {
                    assert_eq!(seg.published_run(from, end), 0, "{size}: {from}..{end}");
                }
            }
            for k in 0..size {
                // SAFETY: `k` is inside the segment, written once before its publication.
                unsafe { seg.write(k, k as u64, Meta::new(0, None)) };
            }
            // SAFETY: the run is inside the segment, written above and not yet published.
            unsafe { seg.publish_slots(1..size) };
            for from in 0..=size {
                for end in from..=size {
                    let expected = if from == 0 { 0 } else { end - from };
                    assert_eq!(
                        seg.published_run(from, end),
                        expected,
                        "{size}: {from}..{end}"
                    );
                }
            }
            // SAFETY: we own the one reference `take` handed out.
            unsafe { Segment::release(ptr) };
        }
    }
}
