//! One partition's append-only log.
//!
//! # Algorithm
//! Offsets are dense `u64`s. Offset `o` lives in segment `o >> shift`, slot `o & mask`; segments
//! are found through the [`Directory`] in O(1), so replay and seek cost the same as reading the head.
//!
//! Publishing is reserve, write, publish:
//! - **Multi-producer**: reserve with one `fetch_add(n)` on the cache-padded `tail`, write the value
//!   and metadata, then store the slot's stamp (a byte: 1, see `segment`) with Release.
//! - **Single-producer**: the one [`Writer`] takes its next offset from its own copy of the
//!   `watermark` (which only it stores; it never loads the shared word to publish), writes, then
//!   stores the watermark (every offset below it is published) with Release. No
//!   read-modify-write at all.
//! - **Multi-producer, one publisher at a time: the lease.** A `fetch_add` is a locked
//!   instruction, and on x86 that waits until the publisher's earlier stores have left its store
//!   buffer, among them the last record's stamp, whose line a caught-up reader polls: a
//!   cross-core round trip a record. A writer that has reserved [`LEASE_AFTER`] offsets in a
//!   row, nobody else reserving between, takes the lease ([`Log::try_lease`]): `tail` gets
//!   [`TAIL_LEASED`], and the writer reserves from its own next offset, with plain stores to
//!   the lease's word (that offset, and a busy bit while it publishes) on a line of its own.
//!   Its stamps publish the slots as before, so readers see no difference. Anyone else's
//!   reservation (a `fetch_add` that finds `TAIL_LEASED` reserved nothing), and `close`, end
//!   the lease first ([`Log::end_lease`]): move `lease_gen` on, issue the heavy barrier, wait
//!   while the holder is busy, then store its next offset into `tail`. The holder's side of
//!   that race is the light barrier between its busy mark and its look at `lease_gen`, as in
//!   the park/wake handshake. A writer that sees its lease ended acknowledges it
//!   (`lease_stale`); until then it may still store to its word. So there are two words,
//!   `lease[0]` and `lease[1]`, taken by consecutive generations in turn ([`TAIL_LEASE_WORD`]
//!   says which), and no lease is granted on a word whose last holder has not acknowledged:
//!   a producer that lost the lease and then sits idle (descheduled, or done with a burst)
//!   leaves the other word to the next lease, and only the lease after that waits for it to
//!   publish again or be dropped. (With one word, it kept every other publisher on
//!   `fetch_add` until then.) A writer claimed for one call never holds a lease past it
//!   (released, it gives the lease back).
//!
//!   Measured on a 16-core Xeon (every thread on its own core; a build whose lone publisher
//!   reserved with a plain load and store, the bound of the lease, against `fetch_add`,
//!   alternating, 6 rounds): the default topic 1→1 / 1→2 / 1→4 ~12 / ~5 / ~3.5 → ~25 / ~22 /
//!   ~10 M records/s, ring-like many-producer topic ~66 / ~60 / ~20 → ~265 / ~210 / ~260.
//!
//! No user code runs between reserving and publishing (I6): sizes and key hashes are computed
//! before the reservation and batches are collected first, so a panicking iterator reserves nothing.
//!
//! A writer that enters segment `i` makes sure segment `i + 1` is installed (allocated ahead, from
//! the pool), and the same admin step applies retention: whole segments are unlinked from the
//! directory and their directory reference is released through crossbeam-epoch (I4), after which
//! the segment goes back to the pool. It takes that step after publishing its record, not before
//! ([`Log::prepare`]): segment `i` was installed ahead already, so the record a reader waits for
//! does not wait for the step. Values that need a drop wait in the pool, retired, for a
//! publisher to drop them after its publish (I6): the epoch may run the release in any pin,
//! under the admin lock or between a reservation and its publish. The admin step sets
//! [`TO_DROP`] in `state` when the pool holds such segments, and the publisher that next looks at
//! `state` after publishing drops them ([`Log::drop_retired`]). A log with a capacity
//! (`max_records` under `Block` or `Reject`) stocks its pool with its whole cycle of segments
//! when it is created ([`ring_segments`]), so its writers never allocate.
//!
//! Readers park on their own futex word. A publisher reads the `state` word once after publishing;
//! when no reader is parked it does no wake-up work at all (I5). See [`crate::sync`] for why the
//! handshake needs a barrier on both sides and how the cost sits on the parking side.
//!
//! # Invariants
//! - I1: `tail` hands out each offset once (`fetch_add`), or the single writer advances the
//!   `watermark`, which only it stores. While a lease is held, `tail` hands out none and only the
//!   holder takes offsets; the lease ends only when the holder is not busy, and `tail` then
//!   continues from the holder's next offset.
//! - I2: a slot is read only after an Acquire load saw its stamp, or a watermark above it.
//! - I4: a segment's values are dropped once, after its last reference goes, by a publisher
//!   after its publish or by the log's `Drop` (see `segment`).
//! - `start` only grows, always a segment boundary (or the initial 0), and `start <= end`.
//!
//! # Orderings
//! - `tail.fetch_add` / `compare_exchange`: Relaxed. Atomicity alone makes offsets unique; the slot's
//!   contents are published by the stamp, not by the tail. `fetch_or(TAIL_CLOSED)` in `close` is
//!   SeqCst so that every later reservation sees it (RMWs on one word are totally ordered anyway).
//! - `lease` / `lease_gen`: the holder stores its word (busy) Relaxed, then the light barrier,
//!   then loads `lease_gen` Relaxed; `end_lease` moves `lease_gen` on (SeqCst RMW), then the
//!   heavy barrier, then loads the word with Acquire. As with parking, one sees the other: the
//!   holder finds the new generation and takes no offset, or `end_lease` finds it busy and waits
//!   for the Release store that ends its publish. A grant stores the word before its Release
//!   compare-exchange on `tail`; `reserved_end` loads `tail` Relaxed and, finding the lease, an
//!   Acquire fence orders its look at the word after that. `TAIL_LEASED` and
//!   `TAIL_LEASE_WORD` are set and cleared only under `lease_lock`. A `Producer`'s kept lease
//!   (`publish_kept_lease`) goes through the same two steps (`mark_busy`, `mark_not_busy`);
//!   where it finds the lease ended it undoes its busy mark as `lease_lost` does, and leaves the
//!   acknowledgement to the writer's own path.
//! - `lease_stale`: `end_lease` sets the word's bit (Relaxed RMW, under the lock) before its
//!   SeqCst RMW of `lease_gen`. The last holder clears it with a Release RMW once it knows: it
//!   saw the new generation with a Relaxed load and an Acquire fence follows (so the clearing
//!   comes after the setting), or it read the generation under the lock. A grant, under the
//!   lock, loads it with Acquire, so that holder's stores to the word come before the next
//!   holder's.
//! - stamps / `watermark`: Release store after writing, Acquire load before reading (I2). A
//!   batch's run stores its stamps Relaxed after one Release fence (`Segment::publish_slots`).
//!   The single writer keeps its next offset in its `Writer`, loaded (Relaxed) from the watermark
//!   when it claims the role: the previous writer's last store, ordered before the claim by
//!   `writer_claimed` (Release store, Acquire swap). Its cold paths, and its short path while no
//!   reader watches (the copy is then `STALE`), load its own latest store (Relaxed: only this
//!   writer stores the watermark, and a thread's load sees its own latest store).
//! - `state` (parked readers, blocked producers, closed, watching readers): increments by a waiter
//!   (parked or blocked) are SeqCst RMWs followed by `heavy_barrier`; the publisher's load is
//!   Acquire after `light_barrier`, so if it sees a parked count it also sees the reader's PARKED
//!   word (stored before the increment).
//! - A polling reader's hint (`Log::may_be_published`): a Relaxed load of the watermark (a
//!   many-producer log's stamp and flag are loaded as a scan loads them, Acquire). Nothing is
//!   read through it: a hint that says yes only lets that reader's look-up run
//!   (`Reader::poll_ready`), which loads the watermark again with Acquire, and one that says no,
//!   read stale, only delays that look-up to a later poll (the store is seen in finite time). A
//!   single producer's reader whose position is stored and inside the segment it holds also
//!   ends a look-up on a no (`Reader::refresh_as`): it returns `Empty`, or `Closed` from the
//!   Acquire load of `state`, which a stale watermark cannot make wrong (`Closed` needs the
//!   position at `final_end`).
//! - `start`: Release store after unlinking trimmed segments; Acquire load by readers.
//! - `installed`: Release store after the directory entry; Acquire load before a lookup.
//! - `final_end`: stored (Release) before `state` gets `FINAL`; readers load `state` with Acquire.
//! - cursor positions: Release by the reader after it is done with the records below; Acquire by
//!   publishers computing room.
//! - `state`'s watching count: Relaxed RMWs by readers, read in the publisher's `state` load. A
//!   hint that picks between two equally correct ways for the single writer to find its next
//!   offset (its copy, or its own latest store to the watermark); nothing is read through it.
//! - `block_yield_nanos`: Relaxed. A tuning hint for blocked publishers; no data depends on it.
//! - `state`'s `TO_DROP`: Relaxed RMWs. A hint that sends a publisher to the pool, whose mutex
//!   orders the retired segments themselves; a bit seen late only leaves values waiting for the
//!   next segment switch (`install_through`) to set it again.
//! - `room_end`: Relaxed everywhere. It is a hint the short paths trust only as an upper bound (the
//!   long path recomputes room from the cursors), and as a close flag it is as good as the Relaxed
//!   `state` load it replaced. `close` stores 0 and the refresh is a read-modify-write that keeps a
//!   0, so once a publisher can see the 0 no later value lets it back onto a short path.

pub(crate) mod directory;
pub(crate) mod segment;

use std::time::{Duration, Instant};

use crate::{
    clock,
    config::{Overflow, SizeFn, TopicConfig, WaitStrategy},
    error::{Error, PublishError},
    sync::{
        fence, heavy_barrier, init_barriers, keep_store_order, light_barrier, light_barrier_as,
        light_barrier_is_free, lock, spin_hint, unprotected, yield_now, Arc, Atomic, AtomicBool,
        AtomicU64, CachePadded, CountedWait, Epoch, Futex, Guard, Mutex, Ordering, OwnValue, Owned,
        ProcessCount, SlotBase, StampBase,
    },
};
use directory::Directory;
use segment::{
    bar_user_code, flush_until_back, resume_unless_unwinding, DropsUnderWay, Meta, Pool, SegRef,
    Segment,
};

/// `tail` bit 63: the log is closed; reservations that see it fail.
const TAIL_CLOSED: u64 = 1 << 63;
/// `tail` bit 62: a writer holds the lease (many producers; see the module docs): it takes its
/// offsets from `lease`, not from `tail`, and a `fetch_add` that sees this bit reserved nothing.
const TAIL_LEASED: u64 = 1 << 62;
/// `tail` bit 61, only with [`TAIL_LEASED`]: the lease's word is `lease[1]`, not `lease[0]`.
/// The generation says it too ([`lease_word`]), but a reader that looked at `lease_gen` after
/// `tail` could see a later generation than the lease `tail` showed it; the bit names that
/// lease's word, in the same load.
const TAIL_LEASE_WORD: u64 = 1 << 61;
/// `lease` bit 0: the holder is between taking an offset and publishing it. The bits above are
/// the holder's next offset.
const LEASE_BUSY: u64 = 1;

/// How many reservations in a row a writer of a many-producer log must make (nobody else
/// reserving between) before it takes the lease; counted where its publishes leave the short path
/// (at a segment's end, and on the long path: see [`Writer::count_run`]), so with the default
/// segments after one to two segments of single records alone, and 4096 batches. A writer that
/// publishes alone then reserves without a read-modify-write; one that does not is back on
/// `fetch_add` after one end of the lease (a membarrier), so at most one such end every this
/// many reservations.
///
/// The short path's share of it is one increment a record: a first version compared each
/// reservation with the writer's last one there, and its ~8 instructions and two stores a
/// record cost the many-producer 2→2 ×0.82 on the 2-core EPYC guest (6 alternating rounds, the
/// lease itself never granted) and ×0.83–0.88 on the lent 16-core Xeon.
#[cfg(not(loom))]
const LEASE_AFTER: u32 = 4096;
/// Under loom, at once: the models should explore the lease.
#[cfg(loom)]
const LEASE_AFTER: u32 = 1;

/// The longest a blocked publisher yields before parking, as a multiple of the wait strategy's
/// `yield_for` (see [`Log::adapt_block_yield`]).
const MAX_BLOCK_YIELD_FACTOR: u64 = 16;

/// A duration in whole nanoseconds, saturating.
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// `state` bits 0..24: number of parked readers.
const PARKED_ONE: u64 = 1;
const PARKED_MASK: u64 = (1 << 24) - 1;
/// `state` bit 24: the log is closed; nothing more may be published. Next to the parked count,
/// so that the test every publish makes, `PARKED_MASK | CLOSED`, fits an instruction's 32-bit
/// immediate (at bit 63 the compiler built the mask in a register, an instruction more a publish).
const CLOSED: u64 = 1 << 24;
/// `state` bit 25: `final_end` holds the last offset + 1 ever published.
const FINAL: u64 = 1 << 25;
/// `state` bit 26: the pool holds retired segments whose values a publisher should drop (see
/// [`Log::drop_retired`]). In the mask every publish tests, which it keeps an immediate.
const TO_DROP: u64 = 1 << 26;
/// What every publish tests in `state` after publishing: parked readers, the log closed, or
/// retired values to drop.
const AFTER_LOOK: u64 = PARKED_MASK | CLOSED | TO_DROP;
/// `state` bits 31..40: number of readers of a single-producer log that watch its published end
/// between records (see [`Log::watch`]). While it is zero the writer keeps no copy of its next
/// offset (see `Writer::next`; a `Producer` on a [`Path::PlainSingle`] log keeps one always, by
/// value: [`Kept`]). A hint: a reader that finds it full is not counted, and tries again
/// later.
const WATCHING_ONE: u64 = 1 << 31;
const WATCHING_MASK: u64 = ((1 << 9) - 1) << 31;
/// `state` bits 40..64: number of publishers parked by `Overflow::Block`.
const BLOCKED_ONE: u64 = 1 << 40;
const BLOCKED_MASK: u64 = ((1 << 24) - 1) << 40;
/// What a single writer's publish must look at when it finds any of it in `state`: parked
/// readers, the log closed, retired values, readers watching (the copy to store), or a blocked
/// publisher (nothing to do: in the mask only so that its upper bits are all set, which an
/// instruction's 32-bit immediate gives, sign-extended; a mask that needed its own register cost
/// the saturated 1→1 stream ×0.92, 6 alternating rounds).
const SINGLE_LOOK: u64 = AFTER_LOOK | WATCHING_MASK | BLOCKED_MASK;
const _: () = assert!(SINGLE_LOOK == 0xffff_ffff_85ff_ffff);
const _: () = assert!(AFTER_LOOK == 0x05ff_ffff);

/// How many looks that find nothing new make a reader count as watching. Not the first: a reader
/// streaming behind a saturated producer finds nothing now and then for a moment, and each change
/// of the count costs the producer a miss on `state`'s line. Counted in the harness's saturated
/// 1→1 (stop 31): watching from the first empty look, the count changed once every ~640 records
/// (about once a microsecond); from the 16th, once every ~3,700. In a standalone 1→1 loop, the
/// producer then kept its copy for 0.01–0.15% of its publishes.
///
/// The looks are counted since the reader's last long run ([`STREAMING_RUN`]) or a run that
/// stopped at its limit (it was behind), not since its last record: a reader waiting for a
/// record paced 2 µs apart looks dozens of times between records, but one paced every 300–500
/// ns only a few times, and counting from each record it never watched there, so its producer
/// loaded the watermark line the reader kept polling. Alternating binaries (medians of 3 runs a
/// round, 6 rounds, ring-like topic, both with the short-run pause of `crate::wait`): 1→1 p50
/// ×0.97 and p90 ×0.77 at 300 ns, ×0.92 and ×0.97 at 500 ns, against counting from each record.
#[cfg(not(loom))]
pub(crate) const WATCH_AFTER: u32 = 16;
/// Under loom, the first empty look: the models' readers look once before they park, and the
/// models should explore the writer keeping its copy too.
#[cfg(loom)]
pub(crate) const WATCH_AFTER: u32 = 1;

/// The caught-up run after which a reader stops counting as watching: a run this long means the
/// producer published this many records while the reader paused (see `crate::wait`), so the
/// reader looks at the published end once per run, not per record. A stream paced slower than the
/// reader's looks gives runs of one; a saturated one, runs of hundreds.
pub(crate) const STREAMING_RUN: u64 = 16;

/// A cursor's futex word values.
pub(crate) const RUNNING: u32 = 0;
pub(crate) const PARKED: u32 = 1;

/// How many segments a log keeps for reuse (at least; a log with a capacity keeps its whole
/// cycle, see [`ring_segments`]).
const POOL_KEEP: usize = 4;

/// The most bytes of segments a topic with a capacity allocates when it is created, shared among
/// its partitions (see [`ring_segments`]). A larger capacity allocates the rest as it first fills,
/// like an unbounded log.
const STOCK_MAX_BYTES: usize = 32 << 20;

/// How many segments a log allocates up front: for a log with a capacity (`max_records` under
/// `Block` or `Reject`, `capacity` here), every segment it cycles through once full, as far as its
/// share of [`STOCK_MAX_BYTES`] (`budget`) allows. None for a log whose `max_records` is a
/// retention limit (`DropOldest`): like Kafka's, such a limit is a ceiling many topics never reach,
/// and allocating it up front would make every quiet topic cost its whole retention. None either
/// for an unbounded log, which cannot know how far it will grow, or one bounded by bytes or age.
/// The cycle is what retention keeps (the capacity, rounded up to whole segments), the one being
/// written, the one installed ahead, and three trimmed ones the epoch has not handed back yet. A
/// trimmed segment usually returns to the pool at the next switch or the one after (crossbeam-epoch
/// frees garbage two epochs on, and advances only while no thread is pinned in an older one); now
/// and then it takes a third: the single-producer run of `tests/alloc.rs` allocated a segment in
/// each of 40 runs with two in reserve, and in none of 40 with three.
fn ring_segments(capacity: Option<u64>, size: usize, footprint: usize, budget: usize) -> usize {
    let Some(n) = capacity else {
        return 0;
    };
    let kept = usize::try_from(n.div_ceil(size as u64)).unwrap_or(usize::MAX);
    let cycle = kept.saturating_add(5);
    cycle.min(budget / footprint.max(1))
}

/// Where a reader sleeps: a futex word (`PARKED` while it sleeps or is about to, `RUNNING`
/// otherwise) and an interrupt flag. Usually one per reader; a consumer reading several
/// partitions shares one among its readers, so one sleep waits on all of them.
///
/// With the `async` feature a task waits the same way: it stores its task waker here, then
/// announces itself exactly like a parking thread (the word, the logs' parked counts, the heavy
/// barrier, the re-check), and returns `Pending` instead of sleeping. A publisher that finds the
/// word `PARKED` wakes both the futex and the stored task waker, so the "only if someone waits"
/// fast path is the same for threads and tasks.
#[derive(Debug)]
pub(crate) struct Waker {
    futex: Futex,
    interrupted: AtomicBool,
    #[cfg(feature = "async")]
    task: Mutex<Option<std::task::Waker>>,
}

impl Waker {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Waker {
            futex: Futex::new(RUNNING),
            interrupted: AtomicBool::new(false),
            #[cfg(feature = "async")]
            task: Mutex::new(None),
        })
    }

    /// Stores the task to wake (async waiters, before they announce themselves).
    ///
    /// Cloning a waker and dropping one run the executor's code, so both happen outside the
    /// lock (I6). Only the waiter's own future stores here; a publisher may take the old task
    /// between the two locks, and wakes it, which is harmless.
    #[cfg(feature = "async")]
    pub(crate) fn set_task(&self, task: &std::task::Waker) {
        if lock(&self.task)
            .as_ref()
            .is_some_and(|old| old.will_wake(task))
        {
            return;
        }
        let new = task.clone();
        let old = lock(&self.task).replace(new);
        drop(old);
    }

    /// Forgets the stored task (a dropped future). The waker is dropped after the lock is
    /// released (see `set_task`).
    #[cfg(feature = "async")]
    pub(crate) fn clear_task(&self) {
        let old = lock(&self.task).take();
        drop(old);
    }

    /// Wakes the stored task, if any. The waker runs after the lock is released: it is the
    /// executor's code, and no engine lock is held while foreign code runs (I6).
    fn wake_task(&self) {
        #[cfg(feature = "async")]
        {
            let task = lock(&self.task).take();
            if let Some(task) = task {
                task.wake();
            }
        }
    }

    /// Makes the sleeper (or the next park) return at once, with `take_interrupt() == true`.
    pub(crate) fn interrupt(&self) {
        // Store, full fence, swap; the parker does store PARKED, full fence (`heavy_barrier`), load
        // the flag. Of the two fences one comes first: either the parker's re-check sees the flag,
        // or its PARKED store comes before our swap in the word's order, the swap takes the word
        // back to RUNNING and the wake below reaches it (the futex re-checks the word). Interrupts
        // are rare (pause, close, group changes), so the fence costs nothing that matters. (SeqCst
        // accesses alone would do in the C++ model, but loom models them as AcqRel and reports a
        // lost wake-up; the fence makes the argument one that loom checks.)
        self.interrupted.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        self.futex.word().swap(RUNNING, Ordering::SeqCst);
        self.futex.wake_all();
        self.wake_task();
    }

    /// Whether an interrupt is pending (and clears it).
    pub(crate) fn take_interrupt(&self) -> bool {
        // SeqCst: see `interrupt`. A relaxed first load keeps the common case read-only.
        self.interrupted.load(Ordering::Relaxed) && self.interrupted.swap(false, Ordering::SeqCst)
    }

    pub(crate) fn is_interrupted(&self) -> bool {
        // SeqCst: see `interrupt`.
        self.interrupted.load(Ordering::SeqCst)
    }
}

/// The shared part of a reader: its position (on its own cache line) and where it sleeps.
#[derive(Debug)]
pub(crate) struct Cursor {
    /// The next offset the reader will deliver; everything below was handed out. See Orderings.
    pub(crate) pos: AtomicU64,
    pub(crate) waker: Arc<Waker>,
}

pub(crate) type CursorRef = Arc<CachePadded<Cursor>>;

struct Admin {
    /// Index of the oldest segment still in the directory.
    oldest: u64,
}

/// One partition's log.
pub(crate) struct Log<T> {
    shift: u32,
    mask: u64,
    single: bool,
    /// Multi-producer: next offset to reserve, bit 63 `TAIL_CLOSED`, bit 62 `TAIL_LEASED` (the
    /// offset part is then stale: the holder's next offset is in `lease`). Single-producer logs
    /// leave it at 0: their writer continues from the watermark.
    tail: CachePadded<AtomicU64>,
    /// Multi-producer, while a writer holds the lease: its next offset, shifted left by one, with
    /// [`LEASE_BUSY`] while it publishes, in the word of the lease's generation
    /// ([`lease_word`]). Only the holder stores to it, on its own line, and after the lease
    /// ends, the holder again until it knows (see `lease_stale`).
    lease: [CachePadded<AtomicU64>; 2],
    /// Multi-producer: the lease's generation. A holder checks it at each publish; every end of
    /// a lease moves it on, so consecutive leases take the two words in turn.
    lease_gen: AtomicU64,
    /// Multi-producer: bit `i` set while the last holder of `lease[i]` has not seen its lease
    /// end: its next publish may still store to that word before it finds out
    /// ([`Log::lease_lost`]), so no lease is granted on it until then. The other word is free:
    /// a producer that lost the lease and then sits idle (a burst, then quiet) no longer keeps
    /// every other publisher on `fetch_add`, unless the lease after it ended too.
    lease_stale: AtomicU64,
    /// Serializes granting and ending leases, and a many-producer `close`.
    lease_lock: Mutex<()>,
    /// Many producers and a free light barrier (the lease's fast side is a compiler fence; with a
    /// real fence a lease would cost what the `fetch_add` does).
    leasable: bool,
    /// Single-producer: every offset below is published.
    watermark: CachePadded<AtomicU64>,
    /// Parked readers, blocked publishers, `FINAL` and `CLOSED` (see the constants).
    state: CachePadded<AtomicU64>,
    /// First retained offset.
    start: CachePadded<AtomicU64>,
    /// One past the newest installed segment index.
    installed: AtomicU64,
    /// After close: one past the last published offset.
    final_end: AtomicU64,
    /// Offsets below it may take the short paths: the room last seen under Block/Reject (a lower
    /// bound of the slowest reader's position plus `max_records`, refreshed from the cursors when
    /// it runs out), `u64::MAX` when publishes never wait for readers, and 0 from `close` on
    /// (never raised again). Open, it is at least 1 (`max_records` is). Kept as one word so a
    /// single-producer short path checks room and close with one load and one compare.
    room_end: AtomicU64,
    /// Bytes retained (byte retention only).
    total_bytes: AtomicU64,
    /// Futex wake calls issued for parked readers (a statistic; only the cold wake path counts).
    wakeups: AtomicU64,
    /// Times a reader announced itself parked here (a statistic; counted by [`Log::announce`]).
    /// Readers write it, and it may share a line with what every publish reads: once a park,
    /// beside the heavy barrier that each park already costs.
    parks: AtomicU64,
    /// How long a publisher blocked by `Overflow::Block` yields before it parks, in nanoseconds:
    /// the wait strategy's `yield_for`, doubled after each park that a longer yield would have
    /// avoided (see [`Log::wait_for_room`]).
    block_yield_nanos: AtomicU64,
    /// Single-producer: a writer holds the producer role.
    writer_claimed: AtomicBool,
    /// Which short path [`Log::publish`] tries (see [`Path`]): one load and a compare or two
    /// settle the kind of log, the timestamps and, for a single producer, the barrier.
    path: Path,
    /// Publishers blocked by `Overflow::Block` sleep here; readers bump it when they make room.
    space: Futex,
    /// Async publishers blocked by `Overflow::Block`, woken with `space`.
    #[cfg(feature = "async")]
    blocked_tasks: Mutex<Vec<std::task::Waker>>,
    admin: Mutex<Admin>,
    /// The attached readers: an immutable snapshot, replaced under the admin lock and retired
    /// through the epoch (publishers read it only to wake parked readers or to compute room).
    readers: Atomic<Vec<CursorRef>>,
    dir: Directory<T>,
    pool: Arc<Pool<T>>,
    epoch: Epoch,
    max_records: Option<u64>,
    /// Topic name and partition, for tracing events.
    #[cfg(feature = "tracing")]
    label: (String, u32),
    max_bytes: Option<(u64, SizeFn<T>)>,
    max_age_nanos: Option<u64>,
    overflow: Overflow,
    /// Whether records are stamped with the time (see `TopicConfig::timestamps`).
    timestamps: bool,
    /// No byte retention (no sizes to count): publishes may take the short paths of
    /// [`Log::publish`] (single producer: inside the writer's segment and, under `Block`/`Reject`,
    /// the room last seen; many producers: under `DropOldest`, or `Block` inside that room).
    fast: bool,
    /// `max_records` when the policy is `Block` or `Reject` (a publish must find room), else `None`.
    room_cap: Option<u64>,
    /// No retention (no `max_records`, `max_bytes` or `max_age`): no segment leaves the directory
    /// while the log lives, so a publish without a writer looks its segment up unpinned
    /// ([`Directory::get_kept`]).
    keeps_all: bool,
    pub(crate) wait: WaitStrategy,
}

/// The short path a log's publishes try first, settled when the log is made. `PlainSingle` has
/// its own function, [`Log::publish_plain_single`], and `StampedSingle` goes through
/// [`Log::publish_stamped`]; the others' numbers are [`Log::publish_short`]'s `KIND` (const
/// generics take integers, not this enum).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Path {
    /// A process whose light barrier is not free: the publish tests the timestamps and the kind
    /// of log itself.
    Other = 0,
    /// One producer, no timestamps, and a free light barrier (`sync::light_barrier_is_free`).
    PlainSingle = 1,
    /// Many producers, no timestamps, a free light barrier, and the short path open: no byte
    /// retention, and an overflow policy other than `Reject` (whose reservations stay on the
    /// long path). A many-producer log without the last two takes `Other`, so that
    /// [`Log::publish_short`] need not test them on every publish of these two paths.
    PlainMulti = 2,
    /// One producer, timestamps, and a free light barrier.
    StampedSingle = 3,
    /// Many producers, timestamps, a free light barrier, and the short path open, as for
    /// `PlainMulti` (the default topic's path).
    StampedMulti = 4,
}

/// `KIND` for a caller that knows nothing of the log but what it tests ([`Path::Other`]).
const ANY: u8 = Path::Other as u8;
/// `KIND` for [`Path::PlainMulti`].
const PLAIN_MULTI: u8 = Path::PlainMulti as u8;
/// `KIND` for [`Path::StampedMulti`].
const STAMPED_MULTI: u8 = Path::StampedMulti as u8;

/// A raw segment pointer moved into an epoch-deferred release.
struct Retired<T>(*const Segment<T>);
// SAFETY: the pointer stands for one owned reference to a `Send + Sync` segment; releasing it on
// another thread is what `SegRef`'s `Send` already allows.
unsafe impl<T: Send + Sync> Send for Retired<T> {}

impl<T: Send + Sync + 'static> Log<T> {
    pub(crate) fn new(config: &TopicConfig<T>) -> Self {
        init_barriers();
        let size = config.segment_len();
        let shift = size.trailing_zeros();
        let single = config.producers == crate::config::Producers::Single;
        let room_cap = config.capacity();
        let ring = ring_segments(
            room_cap,
            size,
            Segment::<T>::footprint(size, !single, config.timestamps),
            STOCK_MAX_BYTES / config.partitions.max(1) as usize,
        );
        // Whether many producers may take the short path (see `Path::PlainMulti`).
        let multi_short = config.max_bytes.is_none() && config.overflow != Overflow::Reject;
        let log = Log {
            shift,
            mask: size as u64 - 1,
            single,
            tail: CachePadded::new(AtomicU64::new(0)),
            lease: [
                CachePadded::new(AtomicU64::new(0)),
                CachePadded::new(AtomicU64::new(0)),
            ],
            lease_gen: AtomicU64::new(0),
            lease_stale: AtomicU64::new(0),
            lease_lock: Mutex::new(()),
            leasable: !single && light_barrier_is_free(),
            watermark: CachePadded::new(AtomicU64::new(0)),
            state: CachePadded::new(AtomicU64::new(0)),
            start: CachePadded::new(AtomicU64::new(0)),
            installed: AtomicU64::new(0),
            final_end: AtomicU64::new(0),
            // The room counted from a reader at 0 (see `set_room_from`).
            room_end: AtomicU64::new(room_cap.unwrap_or(u64::MAX)),
            total_bytes: AtomicU64::new(0),
            wakeups: AtomicU64::new(0),
            parks: AtomicU64::new(0),
            block_yield_nanos: AtomicU64::new(nanos(config.wait.yield_for)),
            writer_claimed: AtomicBool::new(false),
            path: match (single, config.timestamps, light_barrier_is_free()) {
                (true, false, true) => Path::PlainSingle,
                (false, false, true) if multi_short => Path::PlainMulti,
                (true, true, true) => Path::StampedSingle,
                (false, true, true) if multi_short => Path::StampedMulti,
                _ => Path::Other,
            },
            space: Futex::new(0),
            #[cfg(feature = "async")]
            blocked_tasks: Mutex::new(Vec::new()),
            admin: Mutex::new(Admin { oldest: 0 }),
            readers: Atomic::new(Vec::new()),
            dir: Directory::new(shift),
            pool: Pool::new(size, !single, config.timestamps, POOL_KEEP.max(ring)),
            epoch: Epoch::new(),
            max_records: config.max_records,
            #[cfg(feature = "tracing")]
            label: (String::new(), 0),
            max_bytes: config.max_bytes.clone(),
            max_age_nanos: config.max_age.map(nanos),
            overflow: config.overflow,
            timestamps: config.timestamps,
            fast: config.max_bytes.is_none(),
            room_cap,
            keeps_all: config.max_records.is_none()
                && config.max_bytes.is_none()
                && config.max_age.is_none(),
            wait: config.wait,
        };
        log.pool.stock(ring);
        drop(log.install_through(0, false));
        log
    }

    /// The policy for a full log.
    pub(crate) fn overflow(&self) -> Overflow {
        self.overflow
    }

    /// log2 of the segment size: offset `o` is in segment `o >> segment_shift()`.
    #[inline]
    pub(crate) fn segment_shift(&self) -> u32 {
        self.shift
    }

    /// Whether one producer writes this log (`TopicConfig::single_producer`).
    #[inline]
    pub(crate) fn single_producer(&self) -> bool {
        self.single
    }

    pub(crate) fn has_timestamps(&self) -> bool {
        self.timestamps
    }

    pub(crate) fn size_fn(&self) -> Option<&SizeFn<T>> {
        self.max_bytes.as_ref().map(|(_, f)| f)
    }

    // -------------------------------------------------------------------------------------------
    // Positions.

    /// First retained offset.
    pub(crate) fn start(&self) -> u64 {
        // Acquire: pairs with the Release store in `trim`.
        self.start.load(Ordering::Acquire)
    }

    /// The start once every trim that may have missed a cursor position stored before this call
    /// has ended. Trims run under the admin lock: one that ran before this takes it finished (its
    /// new start is seen here, the lock ordering the store before this load), and every later one
    /// reads the cursors after the lock hands over, so it sees the position.
    pub(crate) fn start_after_trims(&self) -> u64 {
        drop(lock(&self.admin));
        self.start()
    }

    /// One past the newest offset reserved (multi) or published (single); `final_end` once closed.
    pub(crate) fn end(&self) -> u64 {
        // Acquire: see Orderings (`final_end` is valid once FINAL is seen).
        if self.state.load(Ordering::Acquire) & FINAL != 0 {
            return self.final_end.load(Ordering::Acquire);
        }
        if self.single {
            // Acquire: pairs with the writer's Release store.
            self.watermark.load(Ordering::Acquire)
        } else {
            self.reserved_end()
        }
    }

    /// `tail` without the closed bit: one past the newest reservation (multi producer).
    #[inline(always)]
    fn reserved_end(&self) -> u64 {
        // Relaxed: only a position (room checks, how to wait, `end`); nothing is read through
        // it, and slots are published by their stamps. (Where it finds a lease, `leased_end`'s
        // fence orders the look at `lease` after it.)
        let t = self.tail.load(Ordering::Relaxed);
        if t & TAIL_LEASED == 0 {
            t & !TAIL_CLOSED
        } else {
            self.leased_end(t)
        }
    }

    /// [`Log::reserved_end`] while a writer holds the lease (`tail` read as `t`): its next
    /// offset, or one past the one it is publishing.
    #[cold]
    fn leased_end(&self, t: u64) -> u64 {
        // Acquire fence: with the Relaxed load of `tail` that found the lease, it pairs with the
        // grant's Release compare-exchange (`try_lease`), so the lease's word reads at least the
        // grant's offset. Here, not on the load: that load is on the many-producer short path.
        fence(Ordering::Acquire);
        // Relaxed: a position, as in `reserved_end`.
        let l = self.lease[tail_word(t)].load(Ordering::Relaxed);
        (l >> 1) + (l & LEASE_BUSY)
    }

    /// The watermark as the single writer sees it: the next offset it will publish. For claiming
    /// the role, the writer's cold paths, and its short path while it keeps no copy; otherwise
    /// its publishes use `Writer::next`, which then equals it (see there for when a copy).
    #[inline(always)]
    fn single_next(&self) -> u64 {
        // The writer reads its own latest store; a new writer is ordered after the last one's
        // stores by the `writer_claimed` swap (Acquire) that gave it the role, which pairs with
        // the Release store that gave the role back.
        self.watermark.own_value()
    }

    /// The single writer's next offset: its copy, or where it keeps none, the watermark.
    #[inline(always)]
    fn writer_next(&self, w: &Writer<T>) -> u64 {
        if w.next == STALE {
            self.single_next()
        } else {
            w.next
        }
    }

    /// A reader of a single-producer log starts watching its published end between records: it
    /// keeps finding nothing new there, and will look again soon. Returns whether it was counted
    /// (see [`WATCHING_MASK`]; false on a log with many producers, whose publish keeps no copy).
    #[inline]
    pub(crate) fn watch(&self) -> bool {
        // Relaxed: see Orderings (`state`'s watching count). A compare-exchange, so that a full
        // count never carries into the blocked publishers' field above it.
        self.single
            && self
                .state
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| {
                    (s & WATCHING_MASK != WATCHING_MASK).then_some(s + WATCHING_ONE)
                })
                .is_ok()
    }

    /// A reader counted by [`Log::watch`] stops watching: it caught up with a long run (see
    /// [`STREAMING_RUN`]) or is dropped.
    pub(crate) fn unwatch(&self) {
        // Relaxed: as in `watch`.
        self.state.fetch_sub(WATCHING_ONE, Ordering::Relaxed);
    }

    /// Whether an offset at or above `pos` is reserved (multi-producer logs; a single producer
    /// publishes what it reserves in one step, so never). A hint for how to wait: the reader
    /// re-checks the stamps with Acquire.
    pub(crate) fn reserved_beyond(&self, pos: u64) -> bool {
        !self.single && self.reserved_end() > pos
    }

    pub(crate) fn is_closed(&self) -> bool {
        // Acquire: a reader that sees CLOSED then reads what was published before it.
        self.state.load(Ordering::Acquire) & CLOSED != 0
    }

    /// Whether `offset` may be published: the watermark above it (one producer), or, where
    /// `seg` holds it, its stamp or its group's flag set (many; true where `seg` does not hold
    /// it). A polling reader's hint, one or two loads, for a loop that runs the reader's look-up
    /// ([`Log::ready_end`], the retention and close checks around it) only once this says yes
    /// (see `wait::look_hinted`): a close, which publishes nothing, is found by the full look
    /// that the loop runs every so often anyway. One producer's watermark alone says it: below
    /// `offset` there is nothing to look up, in `seg` or past it (so a single producer's reader
    /// also ends a look-up that finds nothing on it, `Reader::refresh_as`).
    #[inline(always)]
    pub(crate) fn may_be_published(&self, seg: Option<&Segment<T>>, offset: u64) -> bool {
        if self.single {
            // Relaxed: a hint (see Orderings); a look-up it lets run loads the watermark again,
            // and one it ends reads nothing.
            return self.watermark.load(Ordering::Relaxed) > offset;
        }
        seg.is_none_or(|seg| {
            let i = offset.wrapping_sub(seg.base());
            i >= seg.len() as u64 || seg.slot_stamped(i as usize)
        })
    }

    /// `Some(end)` when the log is closed and `end` is final.
    #[inline]
    pub(crate) fn final_end(&self) -> Option<u64> {
        // Acquire: see Orderings.
        if self.state.load(Ordering::Acquire) & FINAL != 0 {
            Some(self.final_end.load(Ordering::Acquire))
        } else {
            None
        }
    }

    // -------------------------------------------------------------------------------------------
    // Segments.

    /// A counted reference to segment `index`, if it is installed and retained.
    pub(crate) fn acquire(&self, index: u64) -> Option<SegRef<T>> {
        // Acquire: pairs with the Release store in `install_through`, so the entry is in the
        // directory.
        if index >= self.installed.load(Ordering::Acquire) {
            return None;
        }
        self.counted(index, &self.epoch.pin())
    }

    /// A counted reference to segment `index`, if the directory holds it, under `pinned`.
    fn counted(&self, index: u64, pinned: &Guard) -> Option<SegRef<T>> {
        let seg = self.dir.get(index, pinned)?;
        // SAFETY: loaded from the directory while pinned, so alive (see `segment`'s Lifetime).
        unsafe { seg.retain() };
        // SAFETY: we just took the reference we hand over.
        Some(unsafe { SegRef::from_owned(seg) })
    }

    /// Called when a writer's publish ([`Writer::segment`]) enters segment `index`, before it
    /// writes there: makes sure the
    /// segment is installed. The rest of the step (installing the segment after it and applying
    /// retention) is the writer's to take once its record is published, if the next segment is
    /// not installed yet: an [`Owed`] says so, and the writer hands it to [`Log::prepare_ahead`]
    /// after its publish. Takes the admin lock here only when segment `index` itself is missing
    /// (a batch that enters two segments, or a writer that overtook the one that was to install
    /// it), which is rare: every segment is installed ahead, by the writer that entered the one
    /// before it. Even then the step is taken again after the publish, so that retention counts
    /// what the batch published.
    ///
    /// Why after the publish: that step is most of a segment switch's cost (installing the next
    /// segment from the pool, unlinking trimmed ones, handing them to the epoch's collector,
    /// ~1.2 µs of a ~1.4 µs switch on the 2-vCPU EPYC guest, one publish in 16384 on a ring-like
    /// topic, 2 µs-paced), and before the write it delayed the record a reader was waiting for.
    ///
    /// A one-record write without a writer (`Topic::publish`) takes [`Log::prepare_pinned`]
    /// instead.
    #[inline(always)]
    #[must_use]
    fn prepare(&self, index: u64) -> Option<Owed> {
        // Acquire: pairs with the Release store in `install_through`.
        let installed = self.installed.load(Ordering::Acquire);
        if installed <= index + 1 {
            let again = installed <= index;
            if again {
                drop(self.install_through(index, false));
            }
            return Some(Owed { index, again });
        }
        None
    }

    /// After a publish that entered a segment, what its [`Log::prepare`] said it owes (or, for
    /// [`Log::settle_pinned`], the segment's first offset): installs the next segment and
    /// applies retention, unless another writer did so meanwhile (many producers: each writer
    /// that entered the segment before the step was taken owes it), then drops the values of
    /// segments retired meanwhile (the application's `Drop`: the caller holds no lock and no
    /// unpublished reservation; it may hold the single-producer role, as
    /// [`Log::after_publish_slow`]'s callers may). With `take_next`, hands back a counted
    /// reference to the segment after the one entered (see [`Log::install_through`]).
    #[cold]
    #[inline(never)]
    fn prepare_ahead(&self, owed: Owed, take_next: bool) -> Option<SegRef<T>> {
        // Acquire: pairs with the Release store in `install_through`.
        let next = if owed.again || self.installed.load(Ordering::Acquire) <= owed.index + 1 {
            self.install_through(owed.index, take_next)
        } else if take_next {
            self.acquire(owed.index + 1)
        } else {
            None
        };
        // Relaxed: see Orderings (`TO_DROP`).
        if std::mem::needs_drop::<T>() && self.state.load(Ordering::Relaxed) & TO_DROP != 0 {
            self.drop_retired();
        }
        next
    }

    /// After a writer's publish that switched segments ([`Writer::segment`]): lets the segment
    /// it left go, and takes the switch step if it owes it ([`Log::prepare_ahead`]), then the
    /// segment after the one it entered, for its next switch.
    #[inline(always)]
    fn settle_ahead(&self, w: &mut Writer<T>) {
        if w.ahead.is_some() || w.left.is_some() {
            self.settle_switch(w);
        }
    }

    /// [`Log::settle_ahead`]'s work.
    #[cold]
    #[inline(never)]
    fn settle_switch(&self, w: &mut Writer<T>) {
        drop(w.left.take());
        if let Some(owed) = w.ahead.take() {
            w.next_seg = self.prepare_ahead(owed, true);
        }
    }

    /// [`Log::prepare`] for a one-record write without a writer ([`Log::write_pinned`], under
    /// `Topic::publish`, which calls it for every record): installs segment `index` only if it
    /// is missing (a writer that overtook the one that was to install it). The rest of the step
    /// falls to whoever publishes the segment's first offset, after its publish
    /// ([`Log::settle_pinned`]), so nothing is carried from here to after the publish. Carrying
    /// `prepare`'s answer there cost `Topic::publish` 10 instructions a record of 169
    /// (callgrind, `perf/instructions.sh`, `topic-publish`). The check is inlined and the rest
    /// out of line: an out-of-line call that returned at once cost that path 27 instructions a
    /// record of 285 (the same count, an earlier engine).
    #[inline(always)]
    fn prepare_pinned(&self, index: u64) {
        // Acquire: pairs with the Release store in `install_through`.
        if self.installed.load(Ordering::Acquire) <= index {
            drop(self.install_through(index, false));
        }
    }

    /// After a one-record publish at `offset` without a writer: if that was a segment's first
    /// offset, the switch step ([`Log::prepare_ahead`]), unless another writer took it.
    #[inline(always)]
    fn settle_pinned(&self, offset: u64) {
        if offset & self.mask == 0 {
            let owed = Owed {
                index: offset >> self.shift,
                again: false,
            };
            drop(self.prepare_ahead(owed, false));
        }
    }

    /// [`Log::prepare`]'s work once a segment must be installed: under the admin lock, installs
    /// segment `index` and the next one (those not yet installed) and applies retention. With
    /// `take_next`, returns a counted reference to segment `index + 1` for a writer's next
    /// switch, taken under the step's own pin. (Taken through [`Log::acquire`] after the step, a
    /// second pin, it made loom report the model `batch_publish_races_the_trim_of_its_segment`
    /// as not deterministic; a bare pin there did the same. Not looked into further: one pin
    /// serves both.)
    #[inline(never)]
    fn install_through(&self, index: u64, take_next: bool) -> Option<SegRef<T>> {
        let barred = bar_user_code();
        let mut admin = lock(&self.admin);
        let guard = self.epoch.pin();
        // `installed` is only stored under the admin lock we hold.
        let mut next = self.installed.own_value();
        while next <= index + 1 {
            let seg = Pool::take(&self.pool, next << self.shift);
            self.dir.install(next, admin.oldest, seg);
            next += 1;
            // Release: the directory entry is stored before lookups may ask for it.
            self.installed.store(next, Ordering::Release);
        }
        let trimmed = self.trim(&mut admin, &guard);
        let next = if take_next {
            self.counted(index + 1, &guard)
        } else {
            None
        };
        drop(guard);
        drop(admin);
        // The pin above, or one since the last segment, may have run the deferred release of a
        // trimmed segment, or a reader may have let one go: the next look after a publish drops
        // their values (see `drop_retired`).
        if std::mem::needs_drop::<T>() && self.pool.has_retired() {
            // Relaxed: see Orderings (`TO_DROP`).
            self.state.fetch_or(TO_DROP, Ordering::Relaxed);
        }
        drop(barred);
        if let Some(start) = trimmed {
            // After the lock: a tracing subscriber is the application's code (I6).
            crate::trace::event!(
                debug,
                topic = %self.label.0,
                partition = self.label.1,
                start,
                "retention trimmed"
            );
            let _ = start;
        }
        next
    }

    /// Names the log in tracing events.
    #[cfg(feature = "tracing")]
    pub(crate) fn with_label(mut self, topic: &str, partition: u32) -> Self {
        self.label = (topic.to_owned(), partition);
        self
    }

    /// Unlinks whole segments that retention no longer keeps; the new start if it moved. Caller
    /// holds the admin lock.
    fn trim(&self, admin: &mut Admin, guard: &Guard) -> Option<u64> {
        if self.keeps_all {
            return None;
        }
        let end = self.end();
        let head = end >> self.shift;
        let gate = match self.overflow {
            Overflow::DropOldest => u64::MAX,
            Overflow::Block | Overflow::Reject => self.slowest_reader().unwrap_or(u64::MAX),
        };
        let now = if self.max_age_nanos.is_some() {
            clock::now_nanos()
        } else {
            0
        };
        let mut trimmed_to = None;
        while admin.oldest < head {
            let index = admin.oldest;
            let seg_end = (index + 1) << self.shift;
            if seg_end > gate {
                break;
            }
            let Some(seg) = self.dir.get(index, guard) else {
                break;
            };
            let by_count = self.max_records.is_some_and(|n| end - seg_end >= n);
            // Relaxed: `total_bytes` is a statistic-like counter; a stale value trims one segment
            // later or earlier, never unsafely.
            let by_bytes = self
                .max_bytes
                .as_ref()
                .is_some_and(|(n, _)| self.total_bytes.load(Ordering::Relaxed) > *n);
            let by_age = self.max_age_nanos.is_some_and(|age| {
                let last = seg.len() - 1;
                self.slot_published(seg, last)
                    // SAFETY: the slot is published (checked just above) and the segment is
                    // alive while we are pinned.
                    && now.saturating_sub(unsafe { seg.meta(last) }.timestamp_nanos()) > age
            });
            if !(by_count || by_bytes || by_age) {
                break;
            }
            let ptr = self.dir.remove(index);
            debug_assert_eq!(ptr as *const Segment<T>, seg as *const Segment<T>);
            // Relaxed: see `by_bytes`.
            self.total_bytes
                .fetch_sub(seg.bytes().load(Ordering::Relaxed), Ordering::Relaxed);
            admin.oldest += 1;
            trimmed_to = Some(seg_end);
            let retired = Retired(ptr as *const Segment<T>);
            // SAFETY: the segment is unlinked; pinned threads may still use it, so the directory's
            // reference is released only after every current pin ends. The closure owns that one
            // reference and is `Send` (see `Retired`).
            unsafe {
                guard.defer_unchecked(move || {
                    let retired = retired;
                    Segment::release(retired.0)
                })
            };
        }
        if let Some(new_start) = trimmed_to {
            // Release: the unlinks above are ordered before readers see the new start.
            self.start.store(new_start, Ordering::Release);
            // Segments are large garbage: hand them to the collector now rather than when this
            // thread's bag of deferred functions fills up, so they come back to the pool soon.
            guard.flush();
        }
        trimmed_to
    }

    /// Whether slot `i` of `seg` is published.
    #[inline]
    fn slot_published(&self, seg: &Segment<T>, i: usize) -> bool {
        let offset = seg.base() + i as u64;
        if self.single {
            // Acquire: pairs with the writer's Release store of the watermark.
            offset < self.watermark.load(Ordering::Acquire)
        } else {
            // Acquire (inside): pairs with the writer's Release store of the stamp, or with the
            // Release fence before a batch's Relaxed stamp and flag stores
            // (`Segment::publish_slots`) (I2).
            seg.slot_stamped(i)
        }
    }

    /// One past the last published offset of a contiguous run in `seg` starting at `from`, looking
    /// at most `limit` slots ahead.
    #[inline]
    pub(crate) fn ready_end(&self, seg: &Segment<T>, from: u64, limit: u64) -> u64 {
        let seg_end = seg.base() + seg.len() as u64;
        let cap = seg_end.min(from.saturating_add(limit));
        if self.single {
            // Acquire: pairs with the writer's Release store of the watermark (I2).
            self.watermark.load(Ordering::Acquire).min(cap)
        } else {
            // Each slot published by its stamp or its group's flag (`Segment::published_run`).
            // (Until stop 54 the scan took eight stamps at a time while all eight were set, then
            // one at a time to the first that was not: callgrind `multi-read-batch` 8.6 → 5.1 a
            // record, `multi-read` 19.6 → 16.2; with the one-copy batch publish of `publish_run`,
            // the harness's many-producer ring-like batch 1→2 ×2.0 over 4 rounds on the EPYC, 1→4
            // ×1.25.)
            let (first, end) = (from - seg.base(), cap.max(from) - seg.base());
            let ready = seg.published_run(first as usize, end as usize);
            from + ready as u64
        }
    }

    /// Timestamp of a published offset, if it is retained and published.
    fn timestamp_at(&self, offset: u64) -> Option<u64> {
        let seg = self.acquire(offset >> self.shift)?;
        let i = (offset & self.mask) as usize;
        // SAFETY: published (checked first) and we hold a reference.
        self.slot_published(&seg, i)
            .then(|| unsafe { seg.meta(i) }.timestamp_nanos())
    }

    /// The first retained offset whose timestamp is at or after `t` (the end if none). Stamps are
    /// within `clock::TOLERANCE_NANOS` of the wall clock, so the search starts that much before `t`:
    /// it never skips a record published after `t`, and may include one published just before
    /// (but for stamps taken within 1 ms of a step of the wall clock, which are off by the step).
    /// A binary search, which assumes timestamps follow offsets (true for one producer; with
    /// several, up to how far apart their clock reads and reservations are).
    ///
    /// A slot it cannot read counts as at or after `t`: one reserved and not yet published (its
    /// stamp will be about now), or one retention trimmed during the search. For the latter the
    /// answer is raised to the start as it is then, so it is never below the retained range (a
    /// reader placed there would report the trimmed records as lag, and a consumer's seek to it
    /// would be refused).
    pub(crate) fn offset_for_time(&self, t_nanos: u64) -> u64 {
        let t_nanos = t_nanos.saturating_sub(clock::TOLERANCE_NANOS);
        let (mut lo, mut hi) = (self.start(), self.end());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.timestamp_at(mid) {
                Some(ts) if ts < t_nanos => lo = mid + 1,
                _ => hi = mid,
            }
        }
        lo.max(self.start())
    }

    // -------------------------------------------------------------------------------------------
    // Readers.

    pub(crate) fn register(&self, pos: u64, waker: Arc<Waker>) -> CursorRef {
        let cursor = Arc::new(CachePadded::new(Cursor {
            pos: AtomicU64::new(pos),
            waker,
        }));
        let _admin = lock(&self.admin);
        self.replace_readers(|list| list.push(Arc::clone(&cursor)));
        self.set_room_from(0);
        cursor
    }

    /// A reader moved back (seek, rollback): the room publishers remember under `Block`/`Reject`
    /// was counted from where it was, so it is forgotten, as when a reader registers.
    pub(crate) fn reader_moved_back(&self) {
        // The reader's new position was stored with Release just before; the next room check
        // that runs out recomputes from the cursors.
        self.set_room_from(0);
    }

    /// Remembers the room as counted from `min_read`, a lower bound of the slowest reader (unless
    /// the log is closed: the 0 that `close` stored stays).
    fn set_room_from(&self, min_read: u64) {
        let end = match self.room_cap {
            Some(cap) => min_read.saturating_add(cap),
            None => u64::MAX,
        };
        // Relaxed: a hint; every short path that trusts it is bounded by it, and the long path
        // recomputes from the cursors when it says no. A read-modify-write, so that it never
        // overwrites `close`'s 0: RMWs on one word see each other in its modification order.
        let _ = self
            .room_end
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |now| {
                (now != 0).then_some(end)
            });
    }

    pub(crate) fn deregister(&self, cursor: &CursorRef) {
        {
            let _admin = lock(&self.admin);
            self.replace_readers(|list| list.retain(|c| !Arc::ptr_eq(c, cursor)));
        }
        self.made_room();
    }

    /// Publishes a changed copy of the reader list. Caller holds the admin lock.
    fn replace_readers(&self, change: impl FnOnce(&mut Vec<CursorRef>)) {
        // Under the admin lock, and the pin may run deferred releases (see `segment`'s Lifetime).
        let _barred = bar_user_code();
        let guard = self.epoch.pin();
        // Relaxed: the list is only replaced under the admin lock, which the caller holds.
        let current = self.readers.load(Ordering::Relaxed, &guard);
        // SAFETY: never null; only the admin lock holder retires it.
        let mut list = Vec::clone(unsafe { current.deref() });
        change(&mut list);
        // Release: publishes the new list's contents to readers of the pointer (Acquire).
        let old = self
            .readers
            .swap(Owned::new(list), Ordering::Release, &guard);
        // SAFETY: unlinked just now; pinned threads may still iterate it, so it is destroyed after
        // every current pin ends.
        unsafe { guard.defer_destroy(old) };
    }

    /// Runs `f` over the attached readers' cursors.
    fn with_readers<R>(&self, f: impl FnOnce(&[CursorRef]) -> R) -> R {
        let guard = self.epoch.pin();
        // Acquire: pairs with the Release swap in `replace_readers`.
        let list = self.readers.load(Ordering::Acquire, &guard);
        // SAFETY: never null, and retired only through the epoch while we are pinned.
        f(unsafe { list.deref() })
    }

    /// A reader moved its cursor (forward or by seek).
    pub(crate) fn moved(&self, cursor: &Cursor, pos: u64) {
        // Release: see Orderings (cursor positions).
        cursor.pos.store(pos, Ordering::Release);
        if self.overflow == Overflow::Block {
            self.made_room();
        }
    }

    /// Wakes publishers blocked by `Overflow::Block`, if any (threads and, with the `async`
    /// feature, tasks).
    fn made_room(&self) {
        light_barrier();
        // Acquire: see Orderings (`state`).
        if self.state.load(Ordering::Acquire) & BLOCKED_MASK != 0 {
            // Release: the new word value tells sleeping publishers to re-check.
            self.space.word().fetch_add(1, Ordering::Release);
            self.space.wake_all();
            self.wake_blocked_tasks();
        }
    }

    /// Wakes the async publishers waiting for room (after the lock is released: wakers are the
    /// executor's code, I6).
    fn wake_blocked_tasks(&self) {
        #[cfg(feature = "async")]
        {
            let tasks = std::mem::take(&mut *lock(&self.blocked_tasks));
            for task in tasks {
                task.wake();
            }
        }
    }

    /// An async publisher that found no room (`Block`) announces itself like a blocked thread:
    /// stores its task waker, counts itself blocked, then the heavy barrier. The caller must
    /// re-check for room afterwards (see [`Log::room_for_one`]) and withdraw once per announce.
    #[cfg(feature = "async")]
    pub(crate) fn announce_blocked(&self, task: &std::task::Waker) {
        // Cloned, and dropped if not needed, outside the lock: the executor's code (I6).
        let mut mine = Some(task.clone());
        {
            let mut tasks = lock(&self.blocked_tasks);
            if !tasks.iter().any(|t| t.will_wake(task)) {
                tasks.extend(mine.take());
            }
        }
        drop(mine);
        // SeqCst: the same handshake as `wait_for_room` (see Orderings, `state`).
        self.state.fetch_add(BLOCKED_ONE, Ordering::SeqCst);
        heavy_barrier();
    }

    /// Undoes [`Log::announce_blocked`].
    #[cfg(feature = "async")]
    pub(crate) fn withdraw_blocked(&self) {
        // Relaxed: as in `wait_for_room`, a reader seeing us a moment longer only makes one spare
        // wake-up.
        self.state.fetch_sub(BLOCKED_ONE, Ordering::Relaxed);
    }

    /// Whether one more record fits now, or the log is closed (an async publisher's re-check).
    #[cfg(feature = "async")]
    pub(crate) fn room_for_one(&self) -> bool {
        // `end` is the next offset either kind of log hands out while it is open: the watermark
        // (single producer, whose writer the async publisher released before asking) or `tail`.
        self.is_closed() || self.has_room(self.end(), 1)
    }

    /// Whether the log has more than one reader attached and every one of them is at `end` or
    /// past it (a reader that stored `end` as its position asks whether all the others took what
    /// it took: `wait::stays`).
    pub(crate) fn read_by_others(&self, end: u64) -> bool {
        self.with_readers(|list| {
            // Acquire: pairs with the readers' Release stores of their positions.
            list.len() > 1 && list.iter().all(|c| c.pos.load(Ordering::Acquire) >= end)
        })
    }

    fn slowest_reader(&self) -> Option<u64> {
        // Acquire: pairs with the readers' Release stores of their positions.
        self.with_readers(|list| list.iter().map(|c| c.pos.load(Ordering::Acquire)).min())
    }

    /// Parks the calling thread, a reader of every log in `logs` sleeping on `waker`, until a
    /// publisher to one of them wakes it, `ready()` holds, the waker is interrupted, or `deadline`
    /// passes. `ready` is the re-check; it runs after the reader announced itself in every log (I5).
    pub(crate) fn park_on<R>(
        logs: &[&Log<T>],
        waker: &Waker,
        deadline: Option<Instant>,
        mut ready: impl FnMut() -> Option<R>,
    ) -> Option<R> {
        Self::announce(logs, waker);
        let found = ready();
        if found.is_none() && !waker.is_interrupted() {
            match deadline {
                None => waker.futex.wait(PARKED),
                Some(d) => {
                    let now = Instant::now();
                    if d > now {
                        waker.futex.wait_timeout(PARKED, d - now);
                    }
                }
            }
        }
        Self::withdraw(logs, waker);
        found
    }

    /// The first half of parking: marks `waker` parked and counts it in every log, then the heavy
    /// barrier. The caller must re-check for records after this, before it sleeps (I5).
    pub(crate) fn announce(logs: &[&Log<T>], waker: &Waker) {
        // SeqCst: see `Waker::interrupt`; also published by the SeqCst increments below.
        waker.futex.word().store(PARKED, Ordering::SeqCst);
        for log in logs {
            // SeqCst: the publisher's side of the handshake reads this count (see Orderings).
            log.state.fetch_add(PARKED_ONE, Ordering::SeqCst);
            // Relaxed: a statistic.
            log.parks.fetch_add(1, Ordering::Relaxed);
        }
        heavy_barrier();
    }

    /// Undoes [`Log::announce`], once per announce.
    pub(crate) fn withdraw(logs: &[&Log<T>], waker: &Waker) {
        // Relaxed: only the sleeper and its wakers touch the word; it carries no data.
        waker.futex.word().store(RUNNING, Ordering::Relaxed);
        for log in logs {
            // Relaxed: a stale count only costs a publisher one needless look at the readers.
            log.state.fetch_sub(PARKED_ONE, Ordering::Relaxed);
        }
    }

    #[cold]
    fn wake_readers(&self) {
        self.with_readers(|list| {
            for c in list {
                let word = c.waker.futex.word();
                // Relaxed: the word carries no data; the reader re-checks the log with Acquire
                // loads.
                if word.load(Ordering::Relaxed) == PARKED
                    && word.swap(RUNNING, Ordering::Relaxed) == PARKED
                {
                    c.waker.futex.wake_one();
                    c.waker.wake_task();
                    // Relaxed: a statistic.
                    self.wakeups.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    }

    // -------------------------------------------------------------------------------------------
    // Publishing.

    /// Whether `n` more records fit before the slowest reader under Block/Reject.
    fn has_room(&self, end: u64, n: u64) -> bool {
        let Some(cap) = self.room_cap else {
            return true;
        };
        // Relaxed: a bound from a lower bound only; refreshed from the cursors below when it
        // says no.
        if end + n <= self.room_end.load(Ordering::Relaxed) {
            return true;
        }
        match self.slowest_reader() {
            None => {
                // With no reader attached the room is all ahead of us (a reader that registers
                // resets it).
                self.set_room_from(end);
                true
            }
            Some(min) => {
                self.set_room_from(min);
                end + n <= min.saturating_add(cap)
            }
        }
    }

    /// Waits until `n` records fit (Block). `end` reads the current end.
    fn wait_for_room(&self, n: u64, end: impl Fn() -> u64) -> Result<(), Closedish> {
        let mut polls = 0u32;
        let mut yield_since: Option<Instant> = None;
        // Counted as waiting on its CPU from its first poll until it parks or returns. One that
        // shares its CPU with another waiting thread (a reader, or another blocked publisher)
        // skips the polls and yields from the start: the core is better spent on the thread
        // that frees the room, or that waits for the same room. Alternating binaries on the EPYC
        // guest (stop 55), every thread on one core (the harness's `--cores 1`, 6 rounds):
        // ring-like tput 1→1 / 1→2 / 1→4 ×1.55 / ×1.20 / ×1.13 with one producer, ×1.22 / ×1.08 /
        // ×1.08 (2→2 ×1.08) with many; batch ×1.68 / ×1.25 / ×1.16 and ×1.64 / ×1.22 / ×1.16
        // (2→2 ×1.12). Pinned on two cores, where a lone publisher's core counts nobody else,
        // every row ×0.97–1.01 (10 rounds).
        let mut counted = CountedWait::new(ProcessCount);
        // Once it has to wait, a publisher waits (while it spins and yields) for room for a
        // segment's worth of records (at most a quarter of the cap), not for the first free slot:
        // resuming at one free slot means waiting again at the next publish, and each room check
        // reads every reader's cursor line while the readers are the bottleneck. After a park it
        // takes whatever room woke it, so a wake-up never leads straight to another park.
        let resume = n.max((1u64 << self.shift).min(self.max_records.unwrap_or(0) / 4));
        let mut want = n; // the first look (and the first after a park) asks for `n` only

        // Relaxed: a tuning hint; any value any publisher stored is a valid window.
        let yield_for = Duration::from_nanos(self.block_yield_nanos.load(Ordering::Relaxed));
        loop {
            if self.is_closed() {
                return Err(Closedish);
            }
            if self.has_room(end(), want) {
                return Ok(());
            }
            want = resume;
            if polls == 0 && self.wait.spin_polls != 0 && counted.shares() {
                polls = self.wait.spin_polls;
            }
            if polls < self.wait.spin_polls {
                polls += 1;
                spin_hint();
                continue;
            }
            let since = *yield_since.get_or_insert_with(Instant::now);
            if since.elapsed() < yield_for {
                yield_now();
                continue;
            }
            // Acquire: the value we sleep on; any later bump by a reader makes the wait return.
            let seq = self.space.word().load(Ordering::Acquire);
            self.state.fetch_add(BLOCKED_ONE, Ordering::SeqCst);
            heavy_barrier();
            if !self.is_closed() && !self.has_room(end(), n) {
                counted.leave();
                let asleep = Instant::now();
                self.space.wait(seq);
                self.adapt_block_yield(asleep.elapsed());
            }
            // Relaxed: withdrawing costs nothing if a reader sees us a moment longer (it only
            // makes one spare wake-up call); the count only has to be there before we sleep.
            self.state.fetch_sub(BLOCKED_ONE, Ordering::Relaxed);
            want = n;
        }
    }

    /// Tunes how long blocked publishers yield before they park, after a park that lasted `slept`.
    ///
    /// A park costs the readers, who are the bottleneck while a publisher is blocked: the heavy
    /// barrier interrupts their cores, and one of them makes the wake-up call. When readers free
    /// room steadily but a segment's worth takes longer than the window (measured on the 2-core
    /// VM: four readers sharing a core, the publisher parked every few hundred µs), the publisher
    /// parks at every wait. So a park shorter than the window (yielding that much longer would
    /// have avoided it) doubles the window, up to [`MAX_BLOCK_YIELD_FACTOR`] times the strategy's
    /// `yield_for`; a longer one (readers stalled, not slow) puts it back to `yield_for`. A
    /// strategy that never yields keeps a zero window.
    fn adapt_block_yield(&self, slept: Duration) {
        let base = nanos(self.wait.yield_for);
        // Relaxed: a tuning hint (see `wait_for_room`).
        let now = self.block_yield_nanos.load(Ordering::Relaxed);
        let next = if nanos(slept) < now {
            now.saturating_mul(2)
                .min(base.saturating_mul(MAX_BLOCK_YIELD_FACTOR))
        } else {
            base
        };
        // Unchanged (at the cap, or at `yield_for`) is not stored: the word shares a line with
        // what every publish reads.
        if next != now {
            // Relaxed: as above; racing publishers each store a window within the bounds.
            self.block_yield_nanos.store(next, Ordering::Relaxed);
        }
    }

    /// Reserves `n` offsets for a multi-producer publish; applies the overflow policy.
    #[inline]
    fn reserve_multi(&self, n: u64, policy: Overflow) -> Result<u64, Refusal> {
        if let Some(cap) = self.max_records {
            if policy != Overflow::DropOldest && n > cap {
                return Err(Refusal::TooLarge);
            }
        }
        match policy {
            Overflow::DropOldest => {}
            Overflow::Block => {
                self.wait_for_room(n, || self.reserved_end())
                    .map_err(|_| Refusal::Closed)?;
            }
            Overflow::Reject => {
                // Relaxed: see Orderings (`tail`).
                let mut t = self.tail.load(Ordering::Relaxed);
                loop {
                    if t & TAIL_CLOSED != 0 {
                        return Err(Refusal::Closed);
                    }
                    if t & TAIL_LEASED != 0 {
                        self.end_lease();
                        // Relaxed: as above.
                        t = self.tail.load(Ordering::Relaxed);
                        continue;
                    }
                    if !self.has_room(t, n) {
                        return Err(Refusal::Full);
                    }
                    // Relaxed: as for `fetch_add`, atomicity alone makes offsets unique; the slots
                    // are published by their stamps.
                    match self.tail.compare_exchange_weak(
                        t,
                        t + n,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    ) {
                        Ok(_) => return Ok(t),
                        Err(actual) => t = actual,
                    }
                }
            }
        }
        loop {
            // Relaxed: see Orderings (`tail`).
            let t = self.tail.fetch_add(n, Ordering::Relaxed);
            if t & TAIL_CLOSED != 0 {
                return Err(Refusal::Closed);
            }
            if t & TAIL_LEASED == 0 {
                return Ok(t);
            }
            // A writer holds the lease: this reserved nothing (see the module docs).
            self.end_lease();
        }
    }

    /// Reserves `n` offsets for a many-producer publish through `w`: from the lease if `w` holds
    /// it (then busy until [`Log::lease_end`]; `w.lease` is still `Some` on return exactly
    /// then), else from `tail` ([`Log::reserve_multi`]), counting towards the lease.
    fn reserve_for(&self, w: &mut Writer<T>, n: u64, policy: Overflow) -> Result<u64, Refusal> {
        if let Some(gen) = w.lease {
            // Admitted as a single producer's publish is: nobody else reserves while we hold
            // the lease, so the room below our next offset is ours.
            let next = self.lease_next(gen);
            self.admit_single(next, n, policy)?;
            if self.lease_begin(w, gen, next) {
                return Ok(next);
            }
        }
        let t = self.reserve_multi(n, policy)?;
        w.mine += n;
        w.count_run(t, n);
        Ok(t)
    }

    /// Checks a single-producer publish of `n` records at `next` against close and overflow.
    #[inline]
    fn admit_single(&self, next: u64, n: u64, policy: Overflow) -> Result<(), Refusal> {
        // Relaxed: the closed flag only; see `close` for the race this leaves on single-producer
        // logs.
        if self.state.load(Ordering::Relaxed) & CLOSED != 0 {
            return Err(Refusal::Closed);
        }
        if let Some(cap) = self.max_records {
            if policy != Overflow::DropOldest && n > cap {
                return Err(Refusal::TooLarge);
            }
        }
        match policy {
            Overflow::DropOldest => Ok(()),
            Overflow::Block => self.wait_for_room(n, || next).map_err(|_| Refusal::Closed),
            Overflow::Reject if self.has_room(next, n) => Ok(()),
            Overflow::Reject => Err(Refusal::Full),
        }
    }

    /// Claims the single-producer role.
    pub(crate) fn claim_writer(&self) -> Result<Writer<T>, Error> {
        if !self.single {
            return Ok(Writer {
                seg: None,
                limit: 0,
                next: 0,
                slots: SlotBase::unset(),
                lease: None,
                mine: 0,
                alone: 0,
                ahead: None,
                next_seg: None,
                left: None,
            });
        }
        if !self.claim_role() {
            return Err(Error::ProducerInUse);
        }
        // The watermark the previous writer left is ours to continue from (`single_next`).
        Ok(Writer {
            seg: None,
            limit: 0,
            next: self.single_next(),
            slots: SlotBase::unset(),
            lease: None,
            mine: 0,
            alone: 0,
            ahead: None,
            next_seg: None,
            left: None,
        })
    }

    /// A writer for one call ([`Log::claim_writer`]), given back when the call is done.
    pub(crate) fn claim(&self) -> Result<Claimed<'_, T>, Error> {
        Ok(Claimed {
            log: self,
            w: self.claim_writer()?,
        })
    }

    /// Gives the single-producer role back.
    pub(crate) fn release_writer(&self, w: &mut Writer<T>) {
        if w.lease.is_some() {
            self.give_lease_back(w);
        }
        (w.limit, w.slots) = (0, SlotBase::unset());
        w.next_seg = None;
        if let Some(seg) = w.seg.take() {
            if self.single {
                seg.set_filled((self.writer_next(w) - seg.base()).min(seg.len() as u64) as usize);
            }
        }
        if self.single {
            self.give_role_back();
        }
    }

    /// Takes the single-producer role; false if someone holds it.
    #[inline]
    fn claim_role(&self) -> bool {
        // Acquire: pairs with the Release in `give_role_back`: we continue where the last
        // holder stopped (`single_next`).
        !self.writer_claimed.swap(true, Ordering::Acquire)
    }

    /// Gives the single-producer role back.
    #[inline]
    fn give_role_back(&self) {
        // Release: the next claimant sees our watermark (`single_next`).
        self.writer_claimed.store(false, Ordering::Release);
    }

    /// The timestamp for a record published now (0 when the topic keeps no timestamps).
    #[inline]
    fn stamp(&self) -> u64 {
        if self.timestamps {
            // Never 0: a zero time word means "not written" (see `Segment::write`).
            clock::now_nanos().max(1)
        } else {
            0
        }
    }

    /// Publishes one record.
    ///
    /// The short paths (no byte retention) are what a `Producer` takes for all but a few records
    /// per segment. Single producer: the offset is inside the writer's segment and below the room
    /// last seen (`room_end`, which is also the close check); then a publish is the write, the
    /// watermark store and the parked check. Many producers (`DropOldest`, or `Block` inside the
    /// room last seen): the `fetch_add`, the write and the slot's stamp, and the parked check.
    ///
    /// Which short path to try is one byte, `path`, settled when the log is made: a topic
    /// without time stamps goes straight to its kind's path, which also knows the light barrier
    /// is free (a compiler fence) where the process has it so, instead of testing the time
    /// stamps, the kind of log, and after the publish the process-wide barrier state (two
    /// dependent loads through the global offset table), on every publish. That is about seven
    /// instructions of a ~45-instruction single-producer publish; alternating builds in `perf/`,
    /// ring-like topics: single producer 1→1 252–268 → 258–294 M/s, 1→2 211–261 → 264–277;
    /// many producers 2→2 153–158 → 171–174, 1→2 121–138 → 166–171.
    ///
    /// The two plain short paths (no time stamps) are inlined into the caller. They make no
    /// call and need no more than the caller-saved registers, so a caller that publishes from a
    /// small function (an adapter, a benchmark's `send`) does not save and restore registers on
    /// every publish. Reading the clock needs more registers, and inlining it made the compiler
    /// do that for every kind of topic (single-thread publish through such a function, same
    /// session: single producer ~200 -> ~345 M/s, many producers ~150 -> ~205 M/s without it),
    /// so a topic with time stamps takes the same short paths one call away, in
    /// [`Log::publish_stamped`] (a third and fourth inlined copy made the caller's code 60%
    /// longer), and the rare topic in a process whose light barrier is not free in
    /// [`Log::publish_other`]. That call costs a stamped topic ~9%
    /// (one producer) and ~20% (many) in a tight single-thread loop (criterion, same session),
    /// where reading the clock was already the largest part of a publish. Everything else
    /// (switching segments, retention, waiting for room, refusals) is in [`Log::publish_with`].
    ///
    /// The record's size for byte retention is measured on the long path, before anything is
    /// reserved (I6): the short paths never need it.
    #[inline(always)]
    pub(crate) fn publish(
        &self,
        w: &mut Writer<T>,
        value: T,
        key: Option<u64>,
    ) -> Result<u64, PublishError<T>> {
        match self.path {
            Path::PlainSingle => self.publish_plain_single(w, value, key),
            Path::PlainMulti => self.publish_plain_multi(w, value, key),
            Path::StampedSingle => self.publish_stamped::<false>(w, value, key),
            Path::StampedMulti => self.publish_stamped::<true>(w, value, key),
            Path::Other => self.publish_other(w, value, key),
        }
    }

    /// Which short path this log's publishes try (see [`Path`]).
    pub(crate) fn path(&self) -> Path {
        self.path
    }

    /// [`Log::publish`] for [`Path::PlainSingle`]: the single producer's short path, else the
    /// long path. A `Producer` of a one-partition topic called it directly, without picking a
    /// partition or reading the path byte (see [`Log::path`]), until it kept its place by value
    /// and took [`Log::publish_kept`] instead (`Topic::publish` on such a log still comes here).
    ///
    /// Its own function rather than `publish_short` with the path as a constant, which did the
    /// same work but where the compiler loaded the overflow policy (for the long path's call)
    /// before the checks, on every publish. What the direct call saves is the partition pick
    /// and the path byte's test: alternating binaries, ring-like topics, 12 rounds, medians
    /// (2-core VM, one session; both builds still fetching lines ahead for writing, since
    /// removed, see [`Log::publish_single_short`]): single producer 1→1
    /// 196 → 208 M/s, 1→2 196 → 210; many producers ([`Log::publish_plain_multi`]) 1→1 123 →
    /// 128, 1→2 105 → 129, 2→2 110 → 125. A loop of publishes alone, without a reader, showed no
    /// difference beyond code placement (which moved even a minimal ring's loop by 20% between
    /// binaries on this VM).
    #[inline(always)]
    pub(crate) fn publish_plain_single(
        &self,
        w: &mut Writer<T>,
        value: T,
        key: Option<u64>,
    ) -> Result<u64, PublishError<T>> {
        match self.publish_single_short(w, value, || Meta::new(0, key)) {
            Ok(offset) => self.published_single(w, offset, true),
            Err(value) => self.publish_long(w, value, key),
        }
    }

    /// [`Log::publish`] for [`Path::PlainMulti`] (a one-partition topic's `Producer` calls it
    /// directly, as [`Log::publish_plain_single`]).
    #[inline(always)]
    pub(crate) fn publish_plain_multi(
        &self,
        w: &mut Writer<T>,
        value: T,
        key: Option<u64>,
    ) -> Result<u64, PublishError<T>> {
        self.publish_short::<PLAIN_MULTI>(w, value, key, None, self.overflow, || 0)
    }

    /// The single producer's short path: writes `value` at the writer's next offset and
    /// publishes it (the watermark store), when that offset is inside the writer's segment and
    /// below the room last seen; else hands `value` back for the long path. `meta` runs only
    /// once the record is sure to be written there.
    #[inline(always)]
    fn publish_single_short(
        &self,
        w: &mut Writer<T>,
        value: T,
        meta: impl FnOnce() -> Meta,
    ) -> Result<u64, T> {
        // Without a copy (no reader watches), the writer's own latest store (see `Writer::next`).
        // That case is the one laid out inline: it is the saturated stream's, where a publish
        // takes a few cycles and every jump counts; a paced publish pays the jump.
        let copy = w.next;
        let kept = copy != STALE;
        let offset = if unlikely(kept) {
            // Marked stale before the record (a store to the writer's own line, where it costs
            // a paced publish nothing): [`Log::published_single`] stores it again if a reader
            // still watches, and the streaming case there then has nothing to undo.
            w.next = STALE;
            // Before the record, never between it and the watermark (see below).
            keep_store_order();
            copy
        } else {
            self.single_next()
        };
        // `room_cached` is also the close check: `close` sets the cached room to 0 (see `close`
        // for the race this leaves on single-producer logs).
        if offset < w.limit && self.room_cached(offset) {
            // No prefetch for writing here, unlike the other publish paths: it cost this loop
            // more than the line transfers it hid. Alternating binaries, each pair run back to
            // back so that both see the same VM state (2-core AMD VM, aligned builds): publishing
            // alone 200 → 265 M/s (20 pairs, median ratio 1.30); ring-like 1→1 140 → 156 (1.12),
            // and in the harness (40 pairs) 1→1 ×1.08, 1→2 ×1.02, 1→4 ×1.00, its fast state's
            // best runs 259–267 → 281–295; 2 µs-paced latency alike (p50 ×1.04 against the
            // Disruptor's own ×1.01–1.02 between the same pairs). It was 32 lines ahead; 8 and 16
            // measured like 32. On the 2-vCPU Xeon, 8 lines ahead again: publishing alone 830 →
            // 600 M/s, 1→1 (a standalone loop, 3 pairs) 720 → 540.
            //
            // The value goes through `w.slots`, not the segment: a plain topic's publish (no
            // timestamp, no key: `meta` is zero, known at compile time on that path) then loads
            // nothing but the log's `room_end` and `state` and the writer's own words. On the
            // Xeon this loop is what bounds 1→1 (the reader waits for it half the time), and it
            // ran ~33 instructions a publish. Through `w.slots`, with the producer's first
            // partition kept in the producer (`Producer::first` then), it runs 25 (22 since
            // `Producer` tests one flag for this path); publishing alone 830 → 1075 M/s, and the
            // harness's ring-like 1→1 ×1.28 (4 alternating pairs, 1.21–1.37). It costs the 2
            // µs-paced 1→1 p50 about as much as it gives 1→1 (×1.06 each, the handle alone
            // against the segment's path, 8 and 4 alternating pairs).
            let meta = meta();
            if meta.is_empty() {
                // SAFETY: `offset` is below `limit`, the end of `w.seg`, and not below its base
                // (the writer took that segment for an offset at or before `offset`, and only
                // moves forward), so it is one of the cells `w.slots` was made from, alive while
                // `w` holds its reference; we are the single writer (`limit` is only non-zero
                // for it) and `offset` is not published yet (the watermark is at most `offset`).
                unsafe { w.slots.write(offset, value) };
            } else if let Some(seg) = w.seg.as_deref() {
                // SAFETY: the slot index `offset & mask` is below the segment's `mask + 1`
                // slots, and the rest is as above.
                unsafe { seg.write((offset & self.mask) as usize, value, meta) };
            } else {
                return Err(value); // no segment (never with `limit` set): the long path
            }
            // The watermark's store comes right behind the value's, with no store to any other
            // line between them. A reader waiting here holds both lines, so both stores must
            // fetch theirs from its core, and the CPU overlapped those two transfers only when
            // the second store was next in line: with one store between them, even to a line
            // the producer owns (the writer's copy of the offset, stored first until stop 30),
            // the watermark's line was fetched only after the value's had come. A minimal
            // two-thread ring on the 2-vCPU Xeon, 2 µs pacing, time until both stores are
            // visible (a fence after them, TSC ticks at 2.3 GHz, medians of 3 passes): value
            // then watermark 224–262; value, another line's store, watermark 372–424; four
            // stores to the value's line, then the watermark, 232–238. The reader saw the
            // record 100–250 ticks later with the store between. In the harness, alternating
            // binaries (medians of 3 runs a round): the 2 µs-paced 1→1 p50 ×0.85 (8 rounds,
            // 0.73–0.89), tput 1→1 ×1.13 (8 rounds), 1→2 ×1.08, 1→4 ×1.18 (6 rounds each).
            // For the same reason the time word is written before the value (`Segment::write`).
            // The writer's copy of its next offset, if it keeps one, is stored after the look at
            // `state` that says whether to (`Log::published_single`).
            // Release: publishes the slot (I2).
            self.watermark.store(offset + 1, Ordering::Release);
            return Ok(offset);
        }
        Err(value)
    }

    /// The single producer's short path for a writer kept by value in a [`Producer`]
    /// ([`Kept`], see there for why): writes `value` at `h.next` and publishes it when that
    /// offset is inside the writer's segment and below the room last seen, then looks at `state`
    /// (waking parked readers, settling a close, dropping retired values: all cold); else hands
    /// `value` back for [`Log::publish_long`], which the caller runs on the writer itself before
    /// taking the state again.
    ///
    /// Unlike [`Log::publish_single_short`] it never loads the watermark: its next offset is
    /// `h.next`, which the producer's caller may keep in a register from one publish to the next.
    /// Then the loop of a caller publishing alone is 11 instructions a record, with no load that
    /// waits for the last record's stores; the old path's loop reloaded its next offset from the
    /// watermark it had just stored, a store-to-load chain from record to record (see
    /// `Producer::fast`). Alternating harness binaries on the 2-vCPU AMD EPYC guest, ring-like
    /// topic (the harness's throughput runs keep their sender in a local of the producing thread):
    /// tput 1→1 ×1.58 (4 rounds, 1.30–1.77), 1→2 ×1.73 (3 rounds, 1.52–2.21); the 2 µs-paced 1→1
    /// p50 ×0.87 (4 rounds; lower is better). A producer the compiler must keep in memory (its
    /// address taken, as a struct's field is) stores `h.next` as a third store: publishing alone
    /// alike, 1→1 ×1.21 (4 rounds of 3, 0.91–1.35), as it no longer loads the watermark line its
    /// reader polls.
    ///
    /// [`Producer`]: crate::Producer
    #[inline(always)]
    pub(crate) fn publish_kept(&self, h: &mut Kept<T>, value: T) -> Result<u64, T> {
        let offset = h.next;
        // `room_cached` is also the close check, as in `publish_single_short`.
        if offset < h.limit && self.room_cached(offset) {
            // SAFETY: `offset` is below `limit`, the end of the writer's segment, and not below
            // its base (the writer took that segment for an offset at or before `offset` and only
            // moves forward), so it is one of the cells `h.slots` was made from, alive while the
            // writer holds its counted reference (`take_kept` leaves it with the writer, which
            // the producer holds); we are the single writer (`limit` is only non-zero for it) and
            // `offset` is not published yet (the watermark is `offset`).
            unsafe { h.slots.write(offset, value) };
            // Release: publishes the slot (I2). Right behind the value's store (see
            // `publish_single_short` for why no other store may come between them).
            self.watermark.store(offset + 1, Ordering::Release);
            // The free light barrier: kept state comes only from `Path::PlainSingle` logs, which
            // have one (`take_kept`).
            let s = self.look_after_publish(true);
            // After the look: in memory (a producer the compiler could not keep in registers)
            // this is a third store, which must not come between the value and the watermark.
            h.next = offset + 1;
            if unlikely(s & AFTER_LOOK != 0) {
                self.after_publish_slow(s);
            }
            return Ok(offset);
        }
        Err(value)
    }

    /// [`Log::publish_kept`] for a run of copies (`Producer::publish_slice`): writes `values` from
    /// `h.next` on and publishes them with one watermark store, when the whole run lies inside
    /// the writer's segment and below the room last seen; else writes nothing and returns
    /// `Err(())`, for the writer's own path ([`Log::publish_copies`]: an empty run, a segment's
    /// end, waiting for room, a close). The room's bound is the capacity's check too: the room
    /// ends at most `max_records` past a reader at or before `h.next`.
    ///
    /// Why: that path runs the writer's whole publish (handed the kept offset, admitted, copied
    /// by segment, published, settled ahead, the kept state taken again), ~40% of a one-thread
    /// loop of `publish_slice` of 10 and `try_next_batch` on the 2-vCPU EPYC guest, where a
    /// burst's round trip waits for all of it (the `burst` scenario). That loop measured alike
    /// with this path (36 ns a round: the copy's wide loads then wait for the caller's
    /// just-written values, which the long path's instructions had hidden); across cores,
    /// alternating harness binaries, batch 1→1 ×1.12, ×1.17 and ×1.25 (5, 8 and 5 rounds),
    /// bursts of 10 ×0.94 and ×0.96 ns (8 and 6 rounds), bursts of 100 and the other batch rows
    /// inside the noise (stop 73).
    #[inline(always)]
    pub(crate) fn publish_kept_copies(&self, h: &mut Kept<T>, values: &[T]) -> Result<u64, ()>
    where
        T: Copy,
    {
        let (first, n) = (h.next, values.len() as u64);
        // `first < limit` first: a cleared state's `next` is `STALE` and its limit 0. Then
        // `first + n` stays within the segment, far from overflowing.
        if n != 0 && first < h.limit && n <= h.limit - first && self.room_cached(first + n - 1) {
            // SAFETY: `first..first + n` lies below `limit`, the end of the writer's segment,
            // and not below its base (as in `publish_kept`), so these are cells `h.slots` was
            // made from, alive while the writer holds its counted reference; we are the single
            // writer and none of them is published yet (the watermark is `first`).
            unsafe { h.slots.write_copies(first, values) };
            // Release: publishes the run (I2), right behind its stores, as in `publish_kept`.
            self.watermark.store(first + n, Ordering::Release);
            let s = self.look_after_publish(true);
            h.next = first + n;
            if unlikely(s & AFTER_LOOK != 0) {
                self.after_publish_slow(s);
            }
            return Ok(first);
        }
        Err(())
    }

    /// The single writer's short-path state, to be kept by value in a [`Producer`] (see
    /// [`Kept`]). `w` keeps its segment and marks its copy of the next offset [`STALE`]: the
    /// watermark, which every publish from the kept state stores, says it. So `w` can still be
    /// used directly (the long path, batches, release) with nothing handed back: the kept
    /// state's limit and slots change only when `w` does, after which it is taken again.
    ///
    /// Only for a [`Path::PlainSingle`] log's writer: [`Log::publish_kept`] takes that path's
    /// free light barrier for granted.
    ///
    /// [`Producer`]: crate::Producer
    pub(crate) fn take_kept(&self, w: &mut Writer<T>) -> Kept<T> {
        debug_assert!(self.path == Path::PlainSingle);
        let next = self.writer_next(w);
        w.next = STALE;
        Kept {
            next,
            limit: w.limit,
            slots: w.slots,
        }
    }

    /// Hands a single writer's kept next offset back to `w` before a [`Producer`] uses `w`
    /// directly (its slices and batches, a segment's end, `publish_to`): `next` becomes `w`'s copy
    /// (see `Writer::next`), which every path of `w`'s moves on or marks stale, as after a
    /// publish while a reader watches. [`STALE`] (a [`Kept::none`]'s, what a call that unwound
    /// leaves) hands no copy: `w` then loads the watermark, as it did always before.
    ///
    /// That load is what this saves. A reader waiting for the next record polls the watermark,
    /// and once it has read the last one the line has gone to its core: the writer's load missed,
    /// and the call's stores (the run's copy, the watermark) waited behind it. A round trip of
    /// bursts of 10 (`publish_slice`, then wait until the reader has the last; a scratch program
    /// timing each part with `rdtsc`, medians of 200 K bursts, 2-vCPU EPYC guest): the call took
    /// 104–156 ticks against 26 for a minimal ring's stores, 70% of `publish_run`'s samples on
    /// the instruction after that load; handed back, 78–104, and the round trip 416–546 → 390–442.
    /// Alternating harness binaries (8 rounds each): `burst` 10 ×0.84 ns (every round lower),
    /// batch 1→1 ×1.07 M/s, tput 1→1 ×1.07 (the single-record loop alike: it never comes here
    /// but at a segment's end).
    ///
    /// [`Producer`]: crate::Producer
    #[inline(always)]
    pub(crate) fn give_back_kept(&self, w: &mut Writer<T>, next: u64) {
        debug_assert!(self.path == Path::PlainSingle);
        debug_assert!(next == STALE || next == self.single_next());
        w.next = next;
    }

    /// The lease holder's short path, from its kept state (`h`, the next offset and segment, and
    /// `x`, the lease: see [`KeptLease`]): the lease path of [`Log::publish_short`] (busy mark,
    /// light barrier, generation, slot, stamp, the word again, the look at `state`) on a state
    /// the caller may keep in registers. Hands `value` back where that path would leave the short
    /// path (a segment's end, the room last seen, the lease ended, no lease kept), for
    /// [`Log::publish_plain_multi`].
    ///
    /// Only for a [`Path::PlainMulti`] log's writer: no timestamps, no byte retention, and the
    /// free light barrier taken for granted.
    ///
    /// The writer's lease path reaches the lease, its word and its segment through the writer
    /// behind the producer's pointer, and computes the word from the generation and the slot from
    /// the segment's base: ~47 instructions a record in the saturated loop (stop 56), which is
    /// bound by the instructions it issues. From the kept state behind the producer's `inner`
    /// pointer, loaded again at every record and the next offset stored back (stop 58): 30, the
    /// harness's own 5 included. Since stop 59 the producer keeps the state in its own `Fast`,
    /// sharing the single producer's [`Kept`], and hands it the log from there too, so the loop
    /// keeps the next offset, the segment's end and the log in registers: 26 instructions,
    /// against 31 for the state behind `inner` built in the same stop (see `Fast::lease` for the
    /// figures).
    ///
    /// It fetches no lines ahead, as the single producer's kept path does not: with no
    /// `fetch_add`, no instruction here waits for the store buffer to drain
    /// (`Segment::prefetch_slot_ahead` says why that made the stamps' prefetch matter there).
    /// Not measured with it.
    ///
    /// Stop 58's kept state, behind `inner`, against the writer's path, alternating harness
    /// binaries on the 2-vCPU EPYC guest (6 rounds of 3 runs, ring-like many-producer topic, one
    /// producer): tput 1→1 ×1.19 (1.16–1.86), 1→2 ×1.13 (1.11–1.17), 1→4 ×1.04; with two
    /// producers sharing a core (2→2) ×0.95 (0.94–0.97): its readers then caught up and took
    /// turns through `sched_yield` for a third of their core. The single-producer rows alike
    /// (×0.96–1.02).
    #[inline(always)]
    pub(crate) fn publish_kept_lease(
        &self,
        h: &mut Kept<T>,
        x: &KeptLease,
        value: T,
    ) -> Result<u64, T> {
        let offset = h.next;
        // `room_cached` is also the close check, as in `publish_short`.
        if offset < h.limit && self.room_cached(offset) {
            // SAFETY: `h.limit` is non-zero only where `take_kept_lease` set `h` and `x` together
            // from a writer that held the lease of generation `x.gen` (a many-producer
            // producer's `Kept` is never taken by `take_kept`), and `h` is cleared before that
            // writer could acknowledge the lease's end (see `KeptLease`); `x.word` is that
            // lease's word in this log, which the caller (the producer) keeps alive.
            let word = unsafe { &*x.word };
            if self.mark_busy(word, x.gen, offset) {
                // SAFETY: `offset` is ours (we hold the lease, busy) and unpublished, and lies
                // in the writer's segment (below `limit`, and not below its base: the holder
                // took that segment for an offset at or before `next` and only moves forward),
                // alive while the writer holds its counted reference. `h.slots` and `x.stamps`
                // were made from that segment, together, which has a stamp a slot (a
                // many-producer log's).
                unsafe {
                    h.slots.write(offset, value);
                    // Release: publishes the slot (I2), right behind the value's store.
                    x.stamps.get(offset).store(1, Ordering::Release);
                }
                mark_not_busy(word, offset + 1);
                let s = self.look_after_publish(true);
                h.next = offset + 1;
                if unlikely(s & AFTER_LOOK != 0) {
                    self.after_publish_slow(s);
                }
                return Ok(offset);
            }
            // The lease was ended meanwhile: not busy after all (whoever ended it may be waiting
            // for that), as in `lease_lost`. The writer's own path finds the end, and
            // acknowledges it, at its busy mark.
            mark_not_busy(word, offset);
            h.clear();
        }
        Err(value)
    }

    /// [`Log::publish_plain_multi`] for a writer whose lease `h` and `x` keep (a `Producer`'s):
    /// from the kept lease where it can, else through the writer's own path (a reservation by
    /// `fetch_add`, a segment's end, the lease's start or end), after which the lease is taken
    /// again. Cleared before the writer's path, as `Producer::on_inner` clears `kept`: that path
    /// may unwind after it moved the writer on. All inline, as before the kept lease: the
    /// contended many-producer publish takes the writer's path every time (out of line, 2→2 ran
    /// ×0.82).
    #[inline(always)]
    pub(crate) fn publish_plain_multi_kept(
        &self,
        w: &mut Writer<T>,
        h: &mut Kept<T>,
        x: &mut KeptLease,
        value: T,
    ) -> Result<u64, PublishError<T>> {
        match self.publish_kept_lease(h, x, value) {
            Ok(offset) => Ok(offset),
            Err(value) => {
                h.clear();
                let published = self.publish_plain_multi(w, value, None);
                self.take_kept_lease(w, h, x);
                published
            }
        }
    }

    /// The lease holder's short-path state, to be kept by value in a [`Producer`] (see
    /// [`KeptLease`]): `w`'s next offset and segment into `h`, its lease and the segment's
    /// stamps into `x`; `h` cleared (no short path) if `w` holds no lease or no segment with
    /// that offset in it.
    ///
    /// Only for a [`Path::PlainMulti`] log's writer (see [`Log::publish_kept_lease`]).
    ///
    /// [`Producer`]: crate::Producer
    #[inline(always)]
    pub(crate) fn take_kept_lease(&self, w: &Writer<T>, h: &mut Kept<T>, x: &mut KeptLease) {
        debug_assert!(self.path == Path::PlainMulti);
        let (Some(gen), Some(seg)) = (w.lease, w.seg.as_deref()) else {
            h.clear();
            return;
        };
        let next = self.lease_next(gen);
        match seg.stamp_base() {
            Some(stamps) if seg.slot_of(next).is_some() => {
                *h = Kept {
                    next,
                    limit: seg.base() + seg.len() as u64,
                    slots: seg.slot_base(),
                };
                *x = KeptLease {
                    gen,
                    word: self.lease_of(gen),
                    stamps,
                };
            }
            _ => h.clear(),
        }
    }

    /// The single writer publishes every offset below `end` (written already), on its long and
    /// batch paths: the watermark, and its copy after it. (The short path stores the watermark
    /// itself and its copy, if it keeps one, in [`Log::published_single`].)
    ///
    /// The watermark is stored right after the record, and the writer's own copy after it: see
    /// [`Log::publish_single_short`] for why no other store may come between them.
    #[inline(always)]
    fn publish_single_up_to(&self, w: &mut Writer<T>, end: u64) {
        // Release: publishes the slots below `end` (I2).
        self.watermark.store(end, Ordering::Release);
        keep_store_order();
        w.next = end;
    }

    /// The long path under the log's own policy, out of line, so that the short paths' callers
    /// do not load the policy for it on every publish.
    #[inline(never)]
    pub(crate) fn publish_long(
        &self,
        w: &mut Writer<T>,
        value: T,
        key: Option<u64>,
    ) -> Result<u64, PublishError<T>> {
        self.publish_with(w, value, key, None, self.overflow)
    }

    /// [`Log::publish`] for [`Path::StampedSingle`] (`MULTI` false) and [`Path::StampedMulti`]
    /// (true), out of line (see [`Log::publish`]).
    ///
    /// Their own function, with the stamp read first and a thread whose clock anchor is due (once
    /// in 10 ms) sent to a cold copy: in [`Log::publish_other`], which tested the time stamps,
    /// the kind of log and the barrier on every publish and kept the anchor's refresh inline,
    /// callgrind (`perf/instructions.sh`) counted 134.2 instructions a `Producer::publish` with
    /// one producer (`publish`) and 147.2 with many (`multi-publish`); here 113.2 and 132.2
    /// (123.2 with [`Log::write_in`]'s `SHORT_MULTI`). Criterion barely sees it (2-vCPU AMD EPYC
    /// guest, `publish/one_by_one/single` ×1.03, `multi` ×1.07, 8 alternating rounds, inside its
    /// noise): the clock's read (`rdtsc`, microcode) is most of a stamped publish, and the
    /// instructions saved ran beside it. (The function still saves six registers: the segment
    /// switch and the wide time word's calls, which run once a segment, keep values across
    /// them.)
    #[inline(never)]
    fn publish_stamped<const MULTI: bool>(
        &self,
        w: &mut Writer<T>,
        value: T,
        key: Option<u64>,
    ) -> Result<u64, PublishError<T>> {
        match clock::now_if_anchored() {
            Some(stamp) => self.publish_stamped_at::<MULTI>(w, value, key, stamp),
            None => self.publish_stamped_cold::<MULTI>(w, value, key),
        }
    }

    /// [`Log::publish_stamped`] for a thread whose clock anchor is due.
    #[cold]
    #[inline(never)]
    fn publish_stamped_cold<const MULTI: bool>(
        &self,
        w: &mut Writer<T>,
        value: T,
        key: Option<u64>,
    ) -> Result<u64, PublishError<T>> {
        self.publish_stamped_at::<MULTI>(w, value, key, self.stamp())
    }

    /// The short path of the log's kind with `stamp`, else the long path (which stamps again).
    #[inline(always)]
    fn publish_stamped_at<const MULTI: bool>(
        &self,
        w: &mut Writer<T>,
        value: T,
        key: Option<u64>,
        stamp: u64,
    ) -> Result<u64, PublishError<T>> {
        if MULTI {
            return self
                .publish_short::<STAMPED_MULTI>(w, value, key, None, self.overflow, || stamp);
        }
        match self.publish_single_short(w, value, || Meta::new(stamp, key)) {
            Ok(offset) => self.published_single(w, offset, true),
            Err(value) => self.publish_long(w, value, key),
        }
    }

    /// [`Log::publish`] for [`Path::Other`] (a process without a free light barrier), out of
    /// line (see there).
    #[inline(never)]
    fn publish_other(
        &self,
        w: &mut Writer<T>,
        value: T,
        key: Option<u64>,
    ) -> Result<u64, PublishError<T>> {
        if self.timestamps {
            self.publish_short::<ANY>(w, value, key, None, self.overflow, || self.stamp())
        } else {
            self.publish_short::<ANY>(w, value, key, None, self.overflow, || 0)
        }
    }

    /// [`Log::publish`] with the record's `size` measured already (`None`: the long path measures
    /// it) and under `policy` (the log's own, or `Reject` for an async publish to a `Block` log:
    /// the short paths only run where there is room, so they serve both). For the topic's
    /// convenience paths, which claim the writer per publish.
    #[inline(always)]
    pub(crate) fn publish_measured(
        &self,
        w: &mut Writer<T>,
        value: T,
        key: Option<u64>,
        size: Option<u64>,
        policy: Overflow,
    ) -> Result<u64, PublishError<T>> {
        self.publish_short::<ANY>(w, value, key, size, policy, || self.stamp())
    }

    /// [`Log::publish_measured`] for a caller that holds no writer: the topic's convenience
    /// paths (`Topic::publish` and the like). `Busy` if a `Producer` holds a single-producer
    /// log's writer.
    ///
    /// Without byte retention it writes while pinned instead of through a writer: the segment is
    /// looked up in the directory under the pin and written without a counted reference. The pin
    /// keeps it alive (the directory's reference is released only through the epoch, see
    /// [`Segment::retain`]), so this spares the reference's two locked operations, which a
    /// writer taken and dropped per publish paid every time, and the writer's set-up and
    /// release; the pin the look-up needs anyway is all it keeps. Criterion, stamped topics,
    /// alternating binaries: `publish/topic_publish/multi` ×1.63 (6 rounds, 1.58–1.80), `single`
    /// 14.0 → 17.6–21.0 M/s (3 rounds). A many-producer publish under `Reject`, or past the room
    /// last seen, and every publish under byte retention claim a writer for the one record and
    /// take the usual paths.
    ///
    /// On a log without retention no segment ever leaves the directory, so the look-up needs no
    /// pin there ([`Log::write_pinned`]): the pin was ~40 of a default topic's publish's ~210
    /// instructions, and on x86 a locked instruction (stop 42; 20 M publishes from one thread,
    /// alternating binaries: ×1.08 over 12 rounds, 45.5 → 40.8 ns a record with page faults).
    ///
    /// Inlined into the topic's one caller, which passes a known key and size: the compiler folds
    /// the branches on them and the call goes. Callgrind (`perf/instructions.sh topic-publish`):
    /// 266.7 → 210.7 instructions a `Topic::publish` on a many-producer stamped topic, and 170.8
    /// since the unpinned look-up.
    #[inline]
    pub(crate) fn publish_unheld(
        &self,
        value: T,
        key: Option<u64>,
        size: Option<u64>,
        policy: Overflow,
    ) -> Result<u64, PublishError<T>> {
        if self.fast {
            if self.single {
                return self.publish_pinned_single(value, key, policy);
            }
            if policy != Overflow::Reject && self.room_cached_multi() {
                return self.publish_pinned(value, key);
            }
        }
        let Ok(mut claimed) = self.claim() else {
            return Err(PublishError::Busy(value));
        };
        self.publish_measured(&mut claimed.w, value, key, size, policy)
    }

    /// [`Log::publish_unheld`] on a single-producer log without byte retention: claim the
    /// producer role for this one record, admit it, write it (under a pin where retention may
    /// trim: see [`Log::write_pinned`]), publish it, give the role back.
    ///
    /// Admission is `room_cached`, as on a `Producer`'s short path (it is also the close check:
    /// `close` stores a cached room of 0); only when it says no does [`Log::admit_single`] look
    /// further (`Block` waits there, holding the role, before the pin). The rest after the
    /// publish (waking parked readers, the switch step, retired values) is one test into
    /// [`Log::published_unheld_slow`]. Until stop 64 this was a call of its own, which
    /// called `admit_single` and took the end after the publish inline: 254 instructions a
    /// record through `Topic::publish` (callgrind, `topic-publish-single`) against 170 on a
    /// many-producer topic; 172 now (criterion ×1.15, 8 alternating rounds).
    #[inline]
    fn publish_pinned_single(
        &self,
        value: T,
        key: Option<u64>,
        policy: Overflow,
    ) -> Result<u64, PublishError<T>> {
        if !self.claim_role() {
            return Err(PublishError::Busy(value));
        }
        let next = self.single_next();
        if !self.room_cached(next) {
            if let Err(r) = self.admit_single(next, 1, policy) {
                self.give_role_back();
                return Err(r.with(value));
            }
        }
        // Stamped once admitted, so a publish that waited for room is stamped when it is
        // appended, and the stamps of a single producer's records never go back.
        let meta = Meta::new(self.stamp(), key);
        // SAFETY: we hold the producer role, so `next` is ours and unpublished.
        let gone = unsafe { self.write_pinned(next, value, meta) };
        // Release: publishes the slot (I2).
        self.watermark.store(next + 1, Ordering::Release);
        let seen = self.look_after_publish(false);
        if seen & AFTER_LOOK != 0 || next & self.mask == 0 {
            let _ = self.published_unheld_slow(seen, next, true);
        } else {
            self.give_role_back();
        }
        // The application's code (a value whose segment is gone), so after the role is given
        // back: a panic in it leaves the role free.
        drop(gone);
        Ok(next)
    }

    /// The many-producer short path of [`Log::publish_unheld`]: reserve, write (under a pin
    /// where retention may trim: see [`Log::write_pinned`]), publish. The caller checked what
    /// `publish_short` checks before its own reservation.
    #[inline]
    fn publish_pinned(&self, value: T, key: Option<u64>) -> Result<u64, PublishError<T>> {
        let meta = Meta::new(self.stamp(), key);
        let offset = loop {
            // Relaxed: see Orderings (`tail`).
            let offset = self.tail.fetch_add(1, Ordering::Relaxed);
            if offset & TAIL_CLOSED != 0 {
                return Err(PublishError::Closed(value));
            }
            if offset & TAIL_LEASED == 0 {
                break offset;
            }
            // A writer holds the lease: this reserved nothing (see the module docs).
            self.end_lease();
        };
        // SAFETY: the `fetch_add` reserved `offset` for us, and nobody has published it.
        let gone = unsafe { self.write_pinned(offset, value, meta) };
        // `published`, with a segment's first offset sent to the cold path too, for the switch
        // step (`settle_pinned`): one test, where a second after `published` kept the offset
        // and the result alive across its cold call.
        let s = self.look_after_publish(false);
        let result = if s & AFTER_LOOK != 0 || offset & self.mask == 0 {
            self.published_unheld_slow(s, offset, false)
        } else {
            Ok(offset)
        };
        // The application's code (a value whose segment is gone), so after the publish.
        drop(gone);
        result
    }

    /// The cold end of a one-record publish at `offset` without a writer
    /// ([`Log::publish_pinned`], [`Log::publish_pinned_single`]), `s` being its look at `state`:
    /// wakes parked readers or, single producer, extends a close's final end; gives the role back
    /// if `role` (the single producer's: only after that extension, which reads `single_next` as
    /// the end, as only the role's holder may); then takes the switch step if `offset` was a
    /// segment's first ([`Log::settle_pinned`]; without the role, so a `Topic::publish` racing
    /// this one for it does not wait for the admin lock) and drops retired values (the
    /// application's code, with the role free). Returns `Ok(offset)`: the many-producer caller
    /// returns it as its result, which keeps the offset out of what lives across the call.
    #[cold]
    #[inline(never)]
    fn published_unheld_slow(
        &self,
        s: u64,
        offset: u64,
        role: bool,
    ) -> Result<u64, PublishError<T>> {
        if s & (PARKED_MASK | CLOSED) != 0 {
            self.wake_after_publish(s);
        }
        if role {
            self.give_role_back();
        }
        self.settle_pinned(offset);
        if s & TO_DROP != 0 {
            self.drop_retired();
        }
        Ok(offset)
    }

    /// Writes (and, many producers, publishes) the reserved slot `offset` while pinned, without
    /// a counted reference to its segment; a single producer's write also records the segment's
    /// fill. A log without retention skips the pin: its segments leave the directory only when
    /// the log drops ([`Directory::get_kept`]). Hands the value back if retention already
    /// removed the segment (as in `write`: the record is then published and trimmed at once),
    /// for the caller to drop once nothing else is left to do: the drop is the application's
    /// code. The segment switch's step is the caller's after its publish
    /// ([`Log::settle_pinned`]). Nothing in here runs user code (I6).
    ///
    /// # Safety
    /// The caller reserved `offset` (the `fetch_add`, or it holds the single-producer role) and
    /// has not published it.
    #[inline(always)]
    unsafe fn write_pinned(&self, offset: u64, value: T, meta: Meta) -> Option<T> {
        let index = offset >> self.shift;
        // The pin may run deferred releases (see `segment`'s Lifetime).
        let _barred = bar_user_code();
        // Before the pin: installing a segment takes the admin lock, and a thread that waits
        // pinned holds the epoch back for every log in the process (the pool then gets its
        // trimmed segments back late or not at all while publishers contend).
        self.prepare_pinned(index);
        if self.keeps_all {
            // SAFETY: no retention, so no segment leaves the directory while `&self` lives, and
            // `prepare` above came after the install this lookup needs.
            let Some(seg) = (unsafe { self.dir.get_kept(index) }) else {
                debug_assert!(false, "a log without retention lost segment {index}");
                return Some(value);
            };
            // SAFETY: `offset` is reserved by us and unpublished (this function's contract), and
            // `seg` is its segment, alive as long as the log.
            unsafe { self.write_found(seg, offset, value, meta) };
            return None;
        }
        let guard = self.epoch.pin();
        let Some(seg) = self.dir.get(index, &guard) else {
            return Some(value);
        };
        // SAFETY: `offset` is reserved by us and unpublished (this function's contract), and
        // `seg` is its segment (the directory's entry for its index), alive while we stay
        // pinned: its directory reference is released only through the epoch. The write, the
        // slot's stamp included, and the fill come before the unpin, so they happen before that
        // release and before `drop_values` looks at them.
        unsafe { self.write_found(seg, offset, value, meta) };
        drop(guard);
        None
    }

    /// [`Log::write_pinned`]'s write once it found the segment: the slot (and, many producers,
    /// its stamp), then, single producer, the segment's fill.
    ///
    /// # Safety
    /// As `write_in`'s: `offset` is reserved by the caller and unpublished, `seg` is its segment
    /// and stays alive until this returns.
    #[inline(always)]
    unsafe fn write_found(&self, seg: &Segment<T>, offset: u64, value: T, meta: Meta) {
        // SAFETY: the caller's contract.
        unsafe { self.write_in(seg, offset, value, meta, 0) };
        if self.single {
            // What `drop_values` will drop of this segment; a writer that leaves a segment says
            // the same (`release_writer`). Only the role's holder writes it, and only forward.
            seg.set_filled((offset & self.mask) as usize + 1);
        }
    }

    /// The short path for the log's kind, else the long path. `stamp` gives the record's time
    /// stamp, called once the record is sure to take the short path (`|| 0` where the caller
    /// knows the topic keeps none, so the clock code is left out; a stamp read already where the
    /// caller read it first); `KIND` is what the caller knows of the log: [`ANY`] (then a
    /// single-producer log takes [`Log::publish_single_short`] here), [`PLAIN_MULTI`] or
    /// [`STAMPED_MULTI`].
    #[inline(always)]
    fn publish_short<const KIND: u8>(
        &self,
        w: &mut Writer<T>,
        mut value: T,
        key: Option<u64>,
        size: Option<u64>,
        policy: Overflow,
        stamp: impl FnOnce() -> u64,
    ) -> Result<u64, PublishError<T>> {
        if KIND == ANY && self.single {
            match self.publish_single_short(w, value, || Meta::new(stamp(), key)) {
                Ok(offset) => return self.published_single(w, offset, false),
                Err(v) => value = v,
            }
        } else if KIND != ANY || (self.fast && policy != Overflow::Reject) {
            // `Reject` stays on the long path, which reserves with a compare-exchange so that it
            // never hands out an offset past the room. The many-producer kinds are only given to
            // logs where this holds, and always with the log's own policy (see `Path`), so they
            // skip the test.
            debug_assert!(KIND == ANY || (self.fast && policy == self.overflow && size.is_none()));
            if let Some(gen) = w.lease {
                // The lease's holder: its next offset, if the room last seen covers it (the
                // long path waits for room, or finds the lease gone).
                let offset = self.lease_next(gen);
                if self.room_cached(offset) {
                    let meta = Meta::new(stamp(), key);
                    if self.lease_begin(w, gen, offset) {
                        // SAFETY: `offset` is ours (we hold the lease, busy) and unpublished.
                        return unsafe {
                            self.publish_multi_short(w, offset, Some(gen), value, meta, KIND != ANY)
                        };
                    }
                }
            } else if self.room_cached_multi() {
                let meta = Meta::new(stamp(), key);
                // Relaxed: see Orderings (`tail`).
                let offset = self.tail.fetch_add(1, Ordering::Relaxed);
                if offset & (TAIL_CLOSED | TAIL_LEASED) != 0 {
                    // The log's own policy read here, not passed in, for the many-producer
                    // kinds (see the end of this function).
                    let policy = if KIND != ANY { self.overflow } else { policy };
                    return self.reserved_nothing(w, offset, value, key, size, policy);
                }
                w.mine += 1;
                // SAFETY: the `fetch_add` reserved `offset` for us, and nobody has published it.
                return unsafe {
                    self.publish_multi_short(w, offset, None, value, meta, KIND != ANY)
                };
            }
        }
        if KIND != ANY {
            // The long path under the log's own policy (which these kinds are always given,
            // with no size: see `Path`), out of line, so that the short path does not keep the
            // policy at hand on every publish for this call.
            return self.publish_long(w, value, key);
        }
        self.publish_with(w, value, key, size, policy)
    }

    /// The end of a many-producer short path that has reserved `offset`, from the lease of
    /// generation `lease` (`Some`: the publish then moves the lease on) or from `tail` (`None`;
    /// a constant where inlined, as each caller passes one or the other): writes the slot and its
    /// stamp in the writer's segment, else switches segments ([`Log::publish_reserved`]), then
    /// [`Log::published`]. Nothing here runs user code until the record is published (I6); no
    /// byte retention on a short path (`fast`), so no size to count.
    ///
    /// The lease holder's saturated loop is bound by the instructions it issues (~50 a record
    /// in a 1→1 profile on the EPYC guest, its core 97% in the loop, none above 13% of it), so the
    /// segment test is [`Segment::slot_of`] (a subtraction and a compare, where testing the
    /// bases took the log's mask, a negation and a mask more) and the two prefetch tests are
    /// one ([`Segment::prefetch_slot_ahead`]). Both together, alternating binaries, 8 rounds of 3
    /// runs: the ring-like many-producer topic 1→1 ×1.03–1.04, 1→2 ×1.02–1.06, 1→4 ×1.02–1.03
    /// (two sets of rounds), 2→2 alike (noisy: ×1.04 and ×1.10, rounds 0.64–1.38).
    ///
    /// # Safety
    /// `offset` is reserved by the caller and unpublished.
    #[inline(always)]
    unsafe fn publish_multi_short(
        &self,
        w: &mut Writer<T>,
        offset: u64,
        lease: Option<u64>,
        value: T,
        meta: Meta,
        free_barrier: bool,
    ) -> Result<u64, PublishError<T>> {
        match w
            .seg
            .as_deref()
            .and_then(|seg| Some((seg, seg.slot_of(offset)?)))
        {
            Some((seg, i)) => {
                // SAFETY: `offset` is reserved and unpublished (this function's contract), and
                // `seg`, held by `w`, is its segment, where its slot is `i`.
                unsafe { self.write_slot::<true>(seg, i, value, meta, 0) };
                if let Some(gen) = lease {
                    self.lease_end(gen, offset + 1);
                }
                self.published(offset, free_barrier)
            }
            _ => self.publish_reserved(w, offset, value, meta, lease),
        }
    }

    /// A many-producer short path whose `fetch_add` found the log closed (`Closed`) or the lease
    /// held (`reserved`): the reservation is void; the lease is ended and the long path
    /// reserves again.
    #[cold]
    #[inline(never)]
    fn reserved_nothing(
        &self,
        w: &mut Writer<T>,
        reserved: u64,
        value: T,
        key: Option<u64>,
        size: Option<u64>,
        policy: Overflow,
    ) -> Result<u64, PublishError<T>> {
        if reserved & TAIL_CLOSED != 0 {
            return Err(PublishError::Closed(value));
        }
        self.end_lease();
        self.publish_with(w, value, key, size, policy)
    }

    /// A many-producer short path whose reservation of `offset` is in another segment than the
    /// writer's: switches segments (see [`Writer::segment`]), writes and publishes; `lease`:
    /// the offset is from the lease of that generation, which the publish then moves on.
    #[inline(never)]
    fn publish_reserved(
        &self,
        w: &mut Writer<T>,
        offset: u64,
        value: T,
        meta: Meta,
        lease: Option<u64>,
    ) -> Result<u64, PublishError<T>> {
        let gone = self.write(w, offset, value, meta, 0);
        if let Some(gen) = lease {
            self.lease_end(gen, offset + 1);
        } else {
            w.count_run(offset, 1);
        }
        self.after_publish();
        self.settle_ahead(w);
        if w.may_lease() {
            self.try_lease(w);
        }
        // The application's code (see `write`), so after the publish.
        drop(gone);
        Ok(offset)
    }

    /// The end of a short path: [`Log::after_publish`], then `Ok(offset)` (the rare case out of
    /// line, so the inline short paths make no call). `free_barrier`: the caller knows the log's
    /// path, so the light barrier is known to be free (a constant where inlined).
    ///
    /// The rare case returns the result itself: a version whose out-of-line part returned
    /// nothing, the `Ok` built after it, measured the 2 µs-paced 1→1 p50 ×1.05–1.08 slower on
    /// the Xeon (alternating binaries, 6 rounds each; its cause was not looked into).
    #[inline(always)]
    fn published(&self, offset: u64, free_barrier: bool) -> Result<u64, PublishError<T>> {
        let s = self.look_after_publish(free_barrier);
        if s & AFTER_LOOK != 0 {
            return self.published_slow(s, offset);
        }
        Ok(offset)
    }

    /// The publisher's side of the park/wake handshake after a publish: the light barrier, then
    /// `state` (see Orderings). `free_barrier`: as in [`Log::published`].
    #[inline(always)]
    fn look_after_publish(&self, free_barrier: bool) -> u64 {
        if free_barrier {
            light_barrier_as(true);
        } else {
            light_barrier();
        }
        // Acquire: see Orderings (`state`).
        self.state.load(Ordering::Acquire)
    }

    /// [`Log::published`] for the single writer's short path, which has stored the watermark and
    /// left its copy [`STALE`]: stores the copy again while some reader watches the published end
    /// (see `Writer::next`). Here, after the look at `state`, so that the copy never comes between
    /// the record and the watermark either.
    ///
    /// The streaming case (nobody watches, parked or closed) is one test against an immediate
    /// ([`SINGLE_LOOK`]) and the loop's one jump. A first version left the copy in place and
    /// marked it stale here when the last watcher had left: one compare and jump more in that
    /// case, and the saturated 1→1 stream ran ×0.83 of the build that always keeps the copy (3
    /// alternating rounds), against ×1.12 with the mark moved to the start and ×1.22 with the
    /// mask an immediate too (6 rounds). A loop of ~20 instructions a record at ~4 cycles is that
    /// sensitive to each one.
    #[inline(always)]
    fn published_single(
        &self,
        w: &mut Writer<T>,
        offset: u64,
        free_barrier: bool,
    ) -> Result<u64, PublishError<T>> {
        // Its light barrier is a compiler fence at least, so the copy below cannot be moved
        // above the watermark's store either.
        let s = self.look_after_publish(free_barrier);
        if !unlikely(s & SINGLE_LOOK != 0) {
            return Ok(offset);
        }
        if s & WATCHING_MASK != 0 {
            w.next = offset + 1;
        }
        if s & AFTER_LOOK != 0 {
            return self.published_slow(s, offset);
        }
        Ok(offset)
    }

    #[cold]
    #[inline(never)]
    fn published_slow(&self, s: u64, offset: u64) -> Result<u64, PublishError<T>> {
        self.after_publish_slow(s);
        Ok(offset)
    }

    /// [`Log::room_cached`] for the next multi-producer reservation (always true under
    /// `DropOldest`, without touching `tail`).
    #[inline(always)]
    fn room_cached_multi(&self) -> bool {
        self.room_cap.is_none() || self.room_cached(self.reserved_end())
    }

    /// Whether a record at `offset` fits under `Block`/`Reject` by the cached bound alone (always
    /// under `DropOldest`) and the log was open when last looked at. `false` only sends the
    /// publish down the long path, which re-checks both.
    #[inline(always)]
    fn room_cached(&self, offset: u64) -> bool {
        // Relaxed: a bound from a lower bound only, as in `has_room` (`u64::MAX` when there is
        // no room to keep: `DropOldest` or no `max_records`); as a close flag it is as good as
        // the Relaxed load of `state` it replaces: a publish ordered after `close` (same thread,
        // or through any synchronization) reads the 0 or a later value, and none is non-zero.
        offset < self.room_end.load(Ordering::Relaxed)
    }

    /// The policy for a publish that must not wait: the log's own, but `Reject` for `Block`, so
    /// that a full log fails with `Full`: async publishers wait as tasks instead (see
    /// `Log::announce_blocked`), and a subscription's dead letters on the subscription's own
    /// condition variable, which its `close` wakes.
    pub(crate) fn overflow_without_waiting(&self) -> Overflow {
        match self.overflow {
            Overflow::Block => Overflow::Reject,
            other => other,
        }
    }

    /// The long path of [`Log::publish`] that never waits: under `Block` it fails with `Full`
    /// where it would have waited for room (a producer's async publish, which waits as a task).
    #[cfg(feature = "async")]
    pub(crate) fn publish_or_full(
        &self,
        w: &mut Writer<T>,
        value: T,
    ) -> Result<u64, PublishError<T>> {
        self.publish_with(w, value, None, None, self.overflow_without_waiting())
    }

    /// The long path of [`Log::publish`]: every policy, every kind of log.
    #[inline(never)]
    fn publish_with(
        &self,
        w: &mut Writer<T>,
        value: T,
        key: Option<u64>,
        size: Option<u64>,
        policy: Overflow,
    ) -> Result<u64, PublishError<T>> {
        let size = match &self.max_bytes {
            None => 0,
            Some((max, size_of)) => {
                // The size function is the application's code: it runs here, before anything is
                // reserved (I6), unless the caller measured the record already.
                let size = size.unwrap_or_else(|| size_of(&value) as u64);
                if size > *max {
                    return Err(PublishError::TooLarge(value));
                }
                size
            }
        };
        let meta = Meta::new(self.stamp(), key);
        let offset = if self.single {
            let next = self.writer_next(w);
            if let Err(r) = self.admit_single(next, 1, policy) {
                return Err(r.with(value));
            }
            next
        } else {
            match self.reserve_for(w, 1, policy) {
                Ok(o) => o,
                Err(r) => return Err(r.with(value)),
            }
        };
        // Nothing below runs user code until the record is published (I6).
        let gone = self.write(w, offset, value, meta, size);
        if self.single {
            self.publish_single_up_to(w, offset + 1);
        } else if let Some(gen) = w.lease {
            self.lease_end(gen, offset + 1);
        }
        self.after_publish();
        self.settle_ahead(w);
        if w.may_lease() {
            self.try_lease(w);
        }
        // The application's code (see `write`), so after the publish.
        drop(gone);
        Ok(offset)
    }

    /// Publishes every value of `values` (which it drains) as one contiguous run. On error nothing
    /// is published and `values` is left as it was.
    #[inline(always)]
    pub(crate) fn publish_batch(
        &self,
        w: &mut Writer<T>,
        values: &mut Vec<T>,
        sizes: &[u64],
    ) -> Result<std::ops::Range<u64>, PublishError<()>> {
        let (src, n) = (values.as_mut_ptr(), values.len());
        // SAFETY: the first `n` elements of the Vec's buffer are initialized and stay in place
        // while we run (the Vec is borrowed, and `set_len` moves nothing). Once admitted, the Vec
        // forgets them before any is moved out (so that nothing can drop a value twice), and the
        // run moves each out exactly once.
        unsafe { self.publish_run(w, src, n, sizes, || values.set_len(0)) }
            .map(|first| first..first + n as u64)
    }

    /// Publishes copies of `values` as one contiguous run: [`Log::publish_batch`] without the
    /// caller's staging buffer. Copying `Copy` values runs no user code (I6), so they go from the
    /// caller's slice straight into the log.
    #[inline(always)]
    pub(crate) fn publish_copies(
        &self,
        w: &mut Writer<T>,
        values: &[T],
        sizes: &[u64],
    ) -> Result<std::ops::Range<u64>, PublishError<()>>
    where
        T: Copy,
    {
        // SAFETY: the slice's values are initialized and borrowed for the call; a bitwise copy of
        // a `Copy` value leaves the original valid, so the slice keeps them and needs no `taken`.
        unsafe { self.publish_run(w, values.as_ptr(), values.len(), sizes, || ()) }
            .map(|first| first..first + values.len() as u64)
    }

    /// The run behind [`Log::publish_batch`] and [`Log::publish_copies`]: admits `n` records,
    /// calls `taken`, moves the values at `src..src + n` into their slots (a bitwise read of each,
    /// exactly once), and publishes them. On error it has read none and not called `taken`.
    ///
    /// Returns the run's first offset: its two callers, inlined into theirs, make the range. A
    /// returned `Range` went back through the stack as two 8-byte stores, which the caller read
    /// as one 16-byte load. x86 cores do not forward two stores into one load, so that load
    /// waited for the stores to reach the cache, and with them, in order, every store before
    /// them: the run's copy into lines the readers had taken. In a profile of the perf harness's
    /// batch 1→1 (ring-like topic, 2-vCPU EPYC guest, with a reader loop that kept up) the
    /// producer's core spent ~38% of its time on that load.
    ///
    /// # Safety
    /// `src` points to `n` initialized values, readable for the whole call; the caller gives up
    /// ownership of them when `taken` runs (after that it must neither drop nor use them, unless
    /// they are `Copy`).
    unsafe fn publish_run(
        &self,
        w: &mut Writer<T>,
        src: *const T,
        n: usize,
        sizes: &[u64],
        taken: impl FnOnce(),
    ) -> Result<u64, PublishError<()>> {
        let n = n as u64;
        if n == 0 {
            return Ok(if self.single {
                self.writer_next(w)
            } else {
                self.end()
            });
        }
        if let Some((max, _)) = &self.max_bytes {
            if sizes.iter().any(|s| s > max) {
                return Err(PublishError::TooLarge(()));
            }
        }
        let meta = Meta::new(self.stamp(), None);
        let first = if self.single {
            let next = self.writer_next(w);
            self.admit_single(next, n, self.overflow)
                .map_err(|r| r.with(()))?;
            next
        } else {
            self.reserve_for(w, n, self.overflow)
                .map_err(|r| r.with(()))?
        };
        let end = first + n;
        // From here the values are ours to move (moving bytes runs no user code: I6).
        taken();
        // Values whose segment retention removed before they were written (many producers).
        let mut gone = Vec::new();
        if self.fast {
            // The common case in a tight loop: no sizes to count. One copy per segment's run;
            // on a many-producer log its stamps follow after one fence. (Many-producer batches
            // went in one value and one stamp at a time until stop 49: callgrind
            // `ring-multi-publish-slice`, runs of 256, 34.9 → 8.5 instructions a record; the
            // harness's many-producer ring-like batch 1→1, alternating binaries on the 2-vCPU
            // EPYC, ×3.4 over 4 rounds.)
            for (offset, run_end) in self.segment_runs(first, end) {
                let (k, len) = ((offset - first) as usize, (run_end - offset) as usize);
                let i = (offset & self.mask) as usize;
                // Values `k..k + len` are initialized and neither moved nor dropped yet (runs do
                // not overlap).
                match w.segment(self, offset >> self.shift) {
                    // SAFETY: `offset..run_end` is inside the segment, reserved by us and
                    // unpublished, and `seg`, its segment, is held by `w`; the values are as
                    // above, and are moved once; the run is written before it is published.
                    Some(seg) => unsafe {
                        seg.write_values(i, src.add(k), len, meta);
                        if !self.single {
                            seg.publish_slots(i..i + len);
                        }
                    },
                    // Trimmed already (see `write`; a single writer's own segment never is, as
                    // retention stops at its watermark): dropped once the whole run is
                    // published, as on the path below.
                    None if std::mem::needs_drop::<T>() => {
                        // SAFETY: the values are as above, and each is read once. (Not on the
                        // slice path, `publish_copies`, whose `Copy` values need no drop.)
                        gone.extend((k..k + len).map(|j| unsafe { src.add(j).read() }))
                    }
                    None => {}
                }
            }
        } else {
            // Byte retention: the values move into their slots one by one, each size counted,
            // one segment's run at a time (the segment is looked up once per run).
            for (offset, run_end) in self.segment_runs(first, end) {
                let run = (offset..run_end).map(|o| {
                    // SAFETY: value `o - first` is initialized and read exactly once (runs do not
                    // overlap, and each offset is visited once): the caller's contract.
                    (o, unsafe { src.add((o - first) as usize).read() })
                });
                match w.segment(self, offset >> self.shift) {
                    Some(seg) => {
                        for (o, value) in run {
                            let size = sizes.get((o - first) as usize).copied().unwrap_or(0);
                            // SAFETY: `o` is reserved by us and unpublished, and `seg` is its
                            // segment, which `w` holds.
                            unsafe { self.write_in(seg, o, value, meta, size) };
                        }
                    }
                    // Trimmed already (see `write`): the values are dropped once the whole run
                    // is published, exactly once (the rest of the run is still reserved here).
                    None if std::mem::needs_drop::<T>() => gone.extend(run.map(|(_, v)| v)),
                    // Nothing to drop: the bitwise reads are skipped too.
                    None => {}
                }
            }
        }
        if self.single {
            self.publish_single_up_to(w, first + n);
        } else if let Some(gen) = w.lease {
            self.lease_end(gen, first + n);
        }
        self.after_publish();
        self.settle_ahead(w);
        if w.may_lease() {
            self.try_lease(w);
        }
        drop(gone);
        Ok(first)
    }

    /// The offsets `first..end` split at segment boundaries: `(start, end)` of each segment's part.
    fn segment_runs(&self, first: u64, end: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
        let mut offset = first;
        std::iter::from_fn(move || {
            (offset < end).then(|| {
                let start = offset;
                offset = (((start >> self.shift) + 1) << self.shift).min(end);
                (start, offset)
            })
        })
    }

    /// Writes (and, multi-producer, publishes) one reserved slot. Hands the value back if
    /// retention already removed the segment (only possible when a multi-producer publish was
    /// descheduled for longer than the retained range takes to pass by): the record is then
    /// published and trimmed at once, and the caller drops the value, exactly once, after the
    /// publish (its drop is the application's code, I6).
    #[inline]
    #[must_use]
    fn write(&self, w: &mut Writer<T>, offset: u64, value: T, meta: Meta, size: u64) -> Option<T> {
        let Some(seg) = w.segment(self, offset >> self.shift) else {
            return Some(value);
        };
        // SAFETY: `offset` is reserved by us and unpublished, and `seg` is its segment, held by
        // `w`.
        unsafe { self.write_in(seg, offset, value, meta, size) };
        None
    }

    /// Writes (and, multi-producer, publishes) one reserved slot of `seg`.
    ///
    /// # Safety
    /// The caller reserved `offset` (fetch_add, or it is the single writer), has not published
    /// it, and `seg` is the segment holding `offset`, which the caller holds a reference to,
    /// loaded from the directory and stays pinned for, or found in a log that keeps every
    /// segment while it lives (see [`Log::write_pinned`]).
    #[inline(always)]
    unsafe fn write_in(&self, seg: &Segment<T>, offset: u64, value: T, meta: Meta, size: u64) {
        // SAFETY: `offset & mask` is `offset`'s slot in its segment, `seg`; the rest is this
        // function's contract.
        unsafe { self.write_slot::<false>(seg, (offset & self.mask) as usize, value, meta, size) }
    }

    /// [`Log::write_in`] for the slot `i` of `seg`.
    ///
    /// `SHORT_MULTI`: the caller is a many-producer short path, so the log is known to have many
    /// producers and no byte retention (four instructions a publish fewer than testing both).
    ///
    /// # Safety
    /// As for `write_in`, of the offset whose slot in `seg` is `i` (so `i` is below the
    /// segment's `mask + 1` slots).
    #[inline(always)]
    unsafe fn write_slot<const SHORT_MULTI: bool>(
        &self,
        seg: &Segment<T>,
        i: usize,
        value: T,
        meta: Meta,
        size: u64,
    ) {
        let multi = SHORT_MULTI || !self.single;
        if multi {
            seg.prefetch_slot_ahead(i);
        } else {
            seg.prefetch_ahead(i);
        }
        // SAFETY: `i` is below the segment's `mask + 1` slots; the rest is this function's
        // contract.
        unsafe { seg.write(i, value, meta) };
        if !SHORT_MULTI && self.max_bytes.is_some() {
            // Relaxed: counters read by `trim` under the admin lock; see `trim`.
            seg.bytes().fetch_add(size, Ordering::Relaxed);
            self.total_bytes.fetch_add(size, Ordering::Relaxed);
        }
        if multi {
            // Right behind the value's store when no bytes are counted (see
            // `Log::publish_single_short` for why nothing may come between them).
            // SAFETY: `i` is below the segment's `mask + 1` slots (as above), and a log with
            // many producers gives its segments stamps.
            let stamp = unsafe { seg.stamp_unchecked(i) };
            // Release: publishes the slot (I2).
            stamp.store(1, Ordering::Release);
        }
    }

    /// After a publish: one load of `state`. With no reader parked (and the log open) it does
    /// nothing more (I5).
    #[inline(always)]
    fn after_publish(&self) {
        let s = self.look_after_publish(false);
        if s & AFTER_LOOK != 0 {
            self.after_publish_slow(s);
        }
    }

    /// What a publish found in `state` ([`AFTER_LOOK`]): wakes parked readers, settles a close,
    /// then drops retired values. The caller holds no reservation it has not published and no
    /// lock; it may hold the single-producer role (a `Producer`'s, or a call's, which it gives
    /// back on unwinding too), so the drop is the last thing here.
    #[cold]
    fn after_publish_slow(&self, s: u64) {
        self.wake_after_publish(s);
        if s & TO_DROP != 0 {
            self.drop_retired();
        }
    }

    /// Drops the values of retired segments (the application's `Drop`). Clears [`TO_DROP`] first,
    /// so a segment retired meanwhile is found at the next segment switch. A `Drop` that panics
    /// reaches the caller once every retired value is dropped (unless the caller is itself a `Drop`
    /// publishing as its thread unwinds: see [`resume_unless_unwinding`]).
    ///
    /// Not again further down the stack of a thread that is doing it already (a `Drop` that
    /// publishes, see [`DropsUnderWay`]): that call drains its pool until it is empty, so if
    /// this log is its log, what this publish retired is dropped there; otherwise `TO_DROP`,
    /// left set, sends this log's next publish here. A chain of `Drop`s that publish into their
    /// own topic overflowed a test thread's stack here (`tests/drops.rs`, the echoing values:
    /// 4 runs of the debug test binary in 60 with the lease, none in 60 before it). The same
    /// file's `a_chain_of_drops_that_publish_does_not_nest` shows it every run: without this
    /// rule its 20 links' drops nest 20 deep, and 200 overflow the stack.
    #[cold]
    fn drop_retired(&self) {
        let Some(_outer) = DropsUnderWay::enter() else {
            return;
        };
        // Relaxed: see Orderings (`TO_DROP`).
        self.state.fetch_and(!TO_DROP, Ordering::Relaxed);
        resume_unless_unwinding(self.pool.drop_retired());
    }

    /// The wake-up and close part of [`Log::after_publish_slow`]; runs no user code.
    #[cold]
    fn wake_after_publish(&self, s: u64) {
        if s & PARKED_MASK != 0 {
            self.wake_readers();
        }
        // The light barrier above pairs with the SeqCst RMW and heavy barrier in `close`: either
        // close saw our watermark, or we see CLOSED here and extend the final end to cover what we
        // just published (single producer only; a multi-producer close is exact by itself).
        if self.single && s & CLOSED != 0 {
            self.final_end
                .fetch_max(self.single_next(), Ordering::AcqRel);
            self.wake_readers();
        }
    }

    // -------------------------------------------------------------------------------------------
    // The lease (many producers; see the module docs).

    /// A writer of a many-producer log that reserved [`LEASE_AFTER`] offsets in a row (see
    /// [`Writer::count_run`]) takes the lease if it is free and nobody reserved since: from
    /// here it alone reserves, from `lease`, without a read-modify-write, until another
    /// reservation ends the lease ([`Log::end_lease`]). After a publish, never between a
    /// reservation and its publish.
    #[cold]
    #[inline(never)]
    fn try_lease(&self, w: &mut Writer<T>) {
        w.alone = 0;
        if !self.leasable || w.lease.is_some() {
            return;
        }
        let _held = lock(&self.lease_lock);
        // Relaxed: the generation changes only under the lock.
        let gen = self.lease_gen.load(Ordering::Relaxed);
        let word = lease_word(gen);
        // Acquire: pairs with the acknowledgement of this word's last holder
        // (`lease_acknowledged`), whose stores to the word then come before ours.
        if self.lease_stale.load(Ordering::Acquire) & 1 << word != 0 {
            return;
        }
        // Relaxed: `TAIL_LEASED` changes only under the lock, and any other change (a
        // reservation, a close) makes the compare-exchange below fail.
        let t = self.tail.load(Ordering::Relaxed);
        if t != w.next {
            return; // Someone reserved since (or the log is closed).
        }
        // Relaxed: published by the compare-exchange's Release.
        self.lease[word].store(t << 1, Ordering::Relaxed);
        let leased = t | TAIL_LEASED | if word == 1 { TAIL_LEASE_WORD } else { 0 };
        // Release: a reader of `tail` that sees the lease (`reserved_end`, its Acquire fence) reads
        // the word from the store above on. Relaxed on failure: nothing was granted.
        if self
            .tail
            .compare_exchange(t, leased, Ordering::Release, Ordering::Relaxed)
            .is_ok()
        {
            w.lease = Some(gen);
        }
    }

    /// The word of the lease of generation `gen` (held, or held last and not yet known to be
    /// over): its holder's next offset is there.
    #[inline(always)]
    fn lease_of(&self, gen: u64) -> &AtomicU64 {
        &self.lease[lease_word(gen)]
    }

    /// The next offset of the holder of the lease of generation `gen`, for the holder (or the
    /// last one, until it has acknowledged the lease's end): its own latest store to the
    /// lease's word. Kept there only, not in its `Writer` too, so that a publish from the lease
    /// stores to one line of its own, not two (on the Xeon a core commits about one store a
    /// cycle unless the next is to the same line; see `Writer::next`).
    #[inline(always)]
    fn lease_next(&self, gen: u64) -> u64 {
        // Relaxed: the holder reads its own latest store. Nobody else stores to the word while
        // it holds the lease, nor after, until it has acknowledged the end (`lease_stale`).
        self.lease_of(gen).load(Ordering::Relaxed) >> 1
    }

    /// The lease's holder starts a publish at `next` ([`Log::lease_next`]): marks itself busy,
    /// then checks that the lease (generation `gen`) is still its own. False if it was ended
    /// meanwhile: the writer then holds none, and reserves as any other.
    #[inline(always)]
    fn lease_begin(&self, w: &mut Writer<T>, gen: u64, next: u64) -> bool {
        if self.mark_busy(self.lease_of(gen), gen, next) {
            return true;
        }
        self.lease_lost(w, gen, next);
        false
    }

    /// The holder of the lease of generation `gen`, whose word is `word`, marks itself busy at
    /// `next`, then says whether that lease is still its own. The writer's path
    /// ([`Log::lease_begin`]) and a producer's kept lease ([`Log::publish_kept_lease`]) both
    /// start a publish here.
    #[inline(always)]
    fn mark_busy(&self, word: &AtomicU64, gen: u64, next: u64) -> bool {
        // Relaxed store, light barrier, Relaxed load: the holder's side of the store-then-load
        // race with `end_lease` (see Orderings, `lease`).
        word.store(next << 1 | LEASE_BUSY, Ordering::Relaxed);
        light_barrier_as(true);
        self.lease_gen.load(Ordering::Relaxed) == gen
    }

    /// The holder of the lease of generation `gen` published everything below `end`: that is
    /// its next offset, and it is not busy.
    #[inline(always)]
    fn lease_end(&self, gen: u64, end: u64) {
        mark_not_busy(self.lease_of(gen), end);
    }

    /// [`Log::lease_begin`] found the lease of generation `gen` ended: not busy after all
    /// (whoever ended it may be waiting for that), and the writer, which knows now, lets a new
    /// lease be granted on its word.
    #[cold]
    #[inline(never)]
    fn lease_lost(&self, w: &mut Writer<T>, gen: u64, next: u64) {
        mark_not_busy(self.lease_of(gen), next);
        // Acquire fence: the Relaxed load in `lease_begin` read a later generation, stored by
        // `end_lease`'s SeqCst read-modify-write after it marked this word stale, so the
        // acknowledgement below comes after that mark and clears it.
        fence(Ordering::Acquire);
        w.next = next;
        self.lease_acknowledged(w, gen);
    }

    /// The writer that held the lease of generation `gen` last knows it ended, and its `next` is
    /// the lease's last: it holds none, and a new lease may be granted on that lease's word
    /// (its stores to it are over).
    fn lease_acknowledged(&self, w: &mut Writer<T>, gen: u64) {
        (w.lease, w.alone, w.mine) = (None, 0, 0);
        // Release: pairs with `try_lease`'s Acquire load (see there).
        self.lease_stale
            .fetch_and(!(1 << lease_word(gen)), Ordering::Release);
    }

    /// A writer that holds the lease, or held it last, is released: if the lease is still its
    /// own (it is not busy), `tail` continues from its next offset; if someone ended it, the
    /// writer acknowledges that.
    #[cold]
    fn give_lease_back(&self, w: &mut Writer<T>) {
        let Some(gen) = w.lease else {
            return;
        };
        w.next = self.lease_next(gen);
        let held = lock(&self.lease_lock);
        // Relaxed: under the lock, which every change of the generation holds (and every
        // stale mark: so the lock orders this lease's after it).
        if self.lease_gen.load(Ordering::Relaxed) == gen {
            // Relaxed: under the lock; no holder is left to check it against.
            self.lease_gen.fetch_add(1, Ordering::Relaxed);
            // Relaxed: only a count. A swap, not a store: a read-modify-write like every
            // reservation, so it takes its place in their order (`fetch_add`s before it reserved
            // nothing and wait for the lock, in `end_lease`; those after it reserve from
            // `w.next`), which a plain store racing with them need not under the memory model
            // (loom showed two reservations of one offset with a store here).
            self.tail.swap(w.next, Ordering::Relaxed);
            w.lease = None;
            return;
        }
        drop(held);
        self.lease_acknowledged(w, gen);
    }

    /// Ends the lease, whoever holds it: for a publisher whose reservation found it held, or for
    /// `close`. The holder finds out at its next publish ([`Log::lease_begin`]).
    #[cold]
    #[inline(never)]
    fn end_lease(&self) {
        let _held = lock(&self.lease_lock);
        self.end_lease_locked();
    }

    /// [`Log::end_lease`] with the lease's lock held: moves the generation on, waits until the
    /// holder is not between taking an offset and publishing it, then lets `tail` continue from
    /// the holder's next offset.
    fn end_lease_locked(&self) {
        // Relaxed: `TAIL_LEASED` (and the word with it) is set and cleared only under the lock.
        let t = self.tail.load(Ordering::Relaxed);
        if t & TAIL_LEASED == 0 {
            return; // Ended already.
        }
        let word = tail_word(t);
        // The holder may store to its word until it finds out: no lease on that word before
        // then. Relaxed: grants read it under the lock we hold; the holder's acknowledgement is
        // ordered after it by the generation's RMW below (see `lease_lost`).
        self.lease_stale.fetch_or(1 << word, Ordering::Relaxed);
        // SeqCst RMW, then the heavy barrier, then the loads: our side of `lease_begin`'s race.
        self.lease_gen.fetch_add(1, Ordering::SeqCst);
        heavy_barrier();
        let mut polls = 0u32;
        let next = loop {
            // Acquire: pairs with the holder's Release stores (`lease_end`, `lease_lost`).
            let l = self.lease[word].load(Ordering::Acquire);
            if l & LEASE_BUSY == 0 {
                break l >> 1;
            }
            // The holder is inside a publish: well under a microsecond, unless descheduled.
            if polls < self.wait.spin_polls {
                polls += 1;
                spin_hint();
            } else {
                yield_now();
            }
        };
        // Relaxed, and a swap: as in `give_lease_back`.
        self.tail.swap(next, Ordering::Relaxed);
    }

    // -------------------------------------------------------------------------------------------
    // Closing.

    /// Closes the log: later publishes fail, readers drain what was published, then get `Closed`.
    ///
    /// Multi-producer logs close exactly: the close is one RMW on `tail`, so every reservation is
    /// either before it (and will be published) or after it (and fails). On a single-producer log
    /// a publish racing with `close` from another thread may land after a reader already returned
    /// `Closed`; close from the producing thread, or after dropping its `Producer`, to avoid that.
    pub(crate) fn close(&self) {
        let end = if self.single {
            if self.state.fetch_or(CLOSED, Ordering::SeqCst) & CLOSED != 0 {
                return; // Closed already (or being closed by another thread, which finishes it).
            }
            heavy_barrier();
            // Acquire: pairs with the writer's Release store of the watermark.
            self.watermark.load(Ordering::Acquire)
        } else {
            // Under the lease's lock, so that no lease is granted between its end and the close.
            let held = lock(&self.lease_lock);
            self.end_lease_locked();
            let t = self.tail.fetch_or(TAIL_CLOSED, Ordering::SeqCst);
            drop(held);
            if t & TAIL_CLOSED != 0 {
                // Closed already: later failed reservations moved `tail`, so it is not the end.
                return;
            }
            self.state.fetch_or(CLOSED, Ordering::SeqCst);
            t & !TAIL_CLOSED
        };
        // Relaxed: turns the short paths off (see `room_end`); the flags above are what the long
        // path and `after_publish` go by, so a publish that read the room before this store is
        // the race described above, no worse.
        self.room_end.store(0, Ordering::Relaxed);
        // AcqRel: a racing single writer may have raised it already (see `after_publish`).
        self.final_end.fetch_max(end, Ordering::AcqRel);
        // SeqCst: FINAL publishes `final_end` (see Orderings).
        self.state.fetch_or(FINAL, Ordering::SeqCst);
        self.wake_readers();
        // Release: tells blocked publishers to re-check (they will see CLOSED).
        self.space.word().fetch_add(1, Ordering::Release);
        self.space.wake_all();
        self.wake_blocked_tasks();
    }

    // -------------------------------------------------------------------------------------------
    // Statistics.

    pub(crate) fn stats(&self) -> LogStats {
        let start = self.start();
        let end = self.end();
        // Relaxed: a snapshot for statistics.
        let positions: Vec<u64> =
            self.with_readers(|list| list.iter().map(|c| c.pos.load(Ordering::Relaxed)).collect());
        let oldest = lock(&self.admin).oldest;
        // A snapshot for statistics: each value may be a moment old, none is used to read slots, so
        // Relaxed is enough (Acquire on `installed` only matches how it is published).
        LogStats {
            start,
            end,
            segments: self
                .installed
                .load(Ordering::Acquire)
                .saturating_sub(oldest),
            spare_segments: self.pool.spare() as u64,
            readers: positions,
            parked: self.state.load(Ordering::Relaxed) & PARKED_MASK,
            bytes: self.total_bytes.load(Ordering::Relaxed),
            wakeups: self.wakeups.load(Ordering::Relaxed),
            parks: self.parks.load(Ordering::Relaxed),
        }
    }
}

/// A snapshot of one log, turned into public stats by the topic.
pub(crate) struct LogStats {
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) segments: u64,
    pub(crate) spare_segments: u64,
    pub(crate) readers: Vec<u64>,
    pub(crate) parked: u64,
    pub(crate) bytes: u64,
    pub(crate) wakeups: u64,
    pub(crate) parks: u64,
}

struct Closedish;

enum Refusal {
    Closed,
    Full,
    TooLarge,
}

impl Refusal {
    fn with<V>(self, v: V) -> PublishError<V> {
        match self {
            Refusal::Closed => PublishError::Closed(v),
            Refusal::Full => PublishError::Full(v),
            Refusal::TooLarge => PublishError::TooLarge(v),
        }
    }
}

impl<T> Drop for Log<T> {
    fn drop(&mut self) {
        let admin = match self.admin.get_mut() {
            Ok(a) => a,
            Err(p) => p.into_inner(),
        };
        // Relaxed: `&mut self`, no other thread can reach this log.
        let installed = self.installed.load(Ordering::Relaxed);
        let guard = self.epoch.pin();
        for index in admin.oldest..installed {
            let ptr = self.dir.remove(index);
            if !ptr.is_null() {
                // SAFETY: the directory's reference; no reader or writer of this log is left
                // (they hold the log alive), so releasing at once is safe.
                unsafe { Segment::release(ptr) };
            }
        }
        // SAFETY: `&mut self`: nobody else can load the reader list any more.
        unsafe {
            let list = self.readers.load(Ordering::Relaxed, unprotected());
            drop(list.into_owned());
        }
        // Push this thread's deferred releases out and let the collector run them, so that the
        // values of segments trimmed last are dropped here, not by whichever thread pins next.
        // Each round flushes again while segments come back (`flush_until_back`). Bounded: a
        // thread descheduled while pinned holds the epoch back until it runs again, so after a
        // few rounds this sleeps between them, letting such threads run, for at most about
        // `DROP_WAIT` in all. What is still out then goes to the late-drop thread
        // (`Pool::drop_late`).
        guard.flush();
        drop(guard);
        let rounds = if std::mem::needs_drop::<T>() && !cfg!(loom) {
            DROP_YIELDS + DROP_NAPS
        } else {
            2
        };
        // A `Drop` that panics stops nothing here either: the first panic is resumed at the end.
        let mut dropped = Ok(());
        let mut drain = || {
            let (out, this) = self.pool.drop_returned();
            if dropped.is_ok() {
                dropped = this;
            }
            out
        };
        let mut all_back = false;
        for round in 0..rounds {
            let out = if cfg!(loom) {
                // One flush a round keeps the models small: a model's own collector holds a
                // few bags at most.
                self.epoch.pin().flush();
                drain()
            } else {
                // Again while segments come back: a backlog of bags comes back 8 a flush.
                flush_until_back(&self.epoch, &mut drain)
            };
            all_back = out == 0;
            if all_back || round + 1 == rounds {
                break;
            }
            if cfg!(loom) {
                // Loom's collector runs what is left when the log's `Epoch` goes.
            } else if round < DROP_YIELDS {
                yield_now();
            } else {
                std::thread::sleep(DROP_WAIT / DROP_NAPS);
            }
        }
        if !all_back && std::mem::needs_drop::<T>() && !cfg!(loom) {
            (self.pool.drop_late)(Arc::clone(&self.pool));
        }
        resume_unless_unwinding(dropped);
    }
}

/// How a dropped log waits for the segments it trimmed last to come back through the epoch (see
/// `Log`'s `Drop`): this many rounds with a yield between them (a few suffice when no thread stays
/// pinned: the epoch must advance twice past a release), then `DROP_NAPS` rounds with a sleep,
/// `DROP_WAIT` in all. Only logs of values that need a drop wait, and only while segments are out.
const DROP_YIELDS: u32 = 8;
const DROP_NAPS: u32 = 50;
const DROP_WAIT: Duration = Duration::from_millis(20);

/// Marks a branch as rarely taken, so that the compiler lays the other one out inline (what
/// `std::hint::cold_path` does, which is newer than the crate's minimum Rust).
#[cold]
#[inline]
fn cold() {}

/// A lease's holder is not busy, and its next offset is `next`: the store that ends each of
/// its publishes ([`Log::lease_end`], [`Log::publish_kept_lease`]), or that undoes a busy mark
/// made after its lease had ended ([`Log::lease_lost`], and the kept lease's own).
#[inline(always)]
fn mark_not_busy(word: &AtomicU64, next: u64) {
    // Release: pairs with `end_lease`'s Acquire load, so an ended lease hands over as a lock
    // does (the slots themselves are published by their stamps).
    word.store(next << 1, Ordering::Release);
}

/// Which of the log's two lease words the lease of generation `gen` takes: consecutive leases
/// take them in turn (see `Log::lease_stale`).
#[inline(always)]
fn lease_word(gen: u64) -> usize {
    (gen & 1) as usize
}

/// The lease word that `t`, a value of `tail` with [`TAIL_LEASED`], names.
fn tail_word(t: u64) -> usize {
    usize::from(t & TAIL_LEASE_WORD != 0)
}

#[inline(always)]
fn unlikely(b: bool) -> bool {
    if b {
        cold();
    }
    b
}

/// [`Writer::next`] while the single writer keeps no copy of its next offset: it loads the
/// watermark instead. Never an offset (a log would need 2^64 - 1 records first).
const STALE: u64 = u64::MAX;

/// A producer's private state in one partition: its current segment (one counted reference) and,
/// for the single producer, its next offset.
pub(crate) struct Writer<T> {
    seg: Option<SegRef<T>>,
    /// Single producer: the next offset to publish, equal to the log's watermark (only this
    /// writer stores it), or [`STALE`] where it keeps no copy (see below for when). Many
    /// producers: one past this writer's last reservation as of its last count
    /// ([`Writer::count_run`]); while it holds the lease, its next offset is in the log's `lease`
    /// instead ([`Log::lease_next`]), and this is set from there when the lease goes.
    ///
    /// A copy, so that a publish does not load the watermark: a reader waiting for the next
    /// record polls it, and once it has read a new value the writer's next load missed (the line
    /// had gone to the reader's core), a cross-core round trip at the head of the publish that
    /// everything else in it waited for. Stored after the watermark, never between the record and
    /// the watermark (see [`Log::publish_single_short`]).
    ///
    /// A `Producer` on a [`Path::PlainSingle`] log publishes from a copy of its own, by value,
    /// which it always keeps ([`Kept`], see [`Log::publish_kept`]), and leaves this one
    /// [`STALE`] meanwhile; it hands its copy back here before each call that uses the writer
    /// itself ([`Log::give_back_kept`]). What follows is for the writers that publish through
    /// here: the stamped single producer's, and those claimed for one call (`Topic::publish`).
    ///
    /// Its short path keeps the copy only while some reader watches (`state`'s watching count,
    /// see [`Log::watch`]); the long path (slices, batches, a segment's end) stores it whether
    /// or not anyone watches, and the next short publish drops it if nobody does. Why not
    /// always: the
    /// copy's store is a publish's third, and on the Xeon VM of stops 28–31 a core commits one
    /// store a cycle unless the next is to the same line, so in a saturated stream the copy cost
    /// a publish a third more time than the record and the watermark alone. A minimal loop
    /// publishing alone (stop 31): record and watermark 885–974 M/s; with a store to a line of
    /// its own after them 556–715; to a second word of the watermark's line 776–1035; with two
    /// lines of its own 500–541. With a reader that pauses as logbus's do, the minimal ring that
    /// publishes a run in one loop ran 641 M/s, and 476 when it stored its position every record
    /// (the harness's `ceiling` table). Readers that stream (each look takes a long run, see
    /// [`STREAMING_RUN`]) look at the published end once a run, so the writer's own latest store
    /// there is usually still in its cache. A build that never kept the copy: tput 1→1 ×1.31
    /// and ×1.40 (6 rounds each), but the 2 µs-paced 1→1 p50, whose reader polls the watermark
    /// between records, ×1.59 worse (211 → 335 ns). So the copy is kept while a reader watches
    /// and dropped while all stream: against the copy kept always, alternating binaries, tput
    /// 1→1 ×1.14 (6 rounds, 1.09–1.28), 1→2 ×1.23 (1.01–1.34), 1→4 ×1.05 (4 rounds each), the
    /// 2 µs-paced p50 ×1.02 (6 rounds, 0.95–1.08), the 50 µs-paced p50 ×0.91 (4 rounds,
    /// 0.88–0.94; lower is better). The rest of the gap to the build without the copy is the look
    /// at the copy a publish must make (one load, compare and jump; see
    /// [`Log::published_single`] for how much such instructions weigh here).
    ///
    /// Earlier, on the 2-core AMD VM (below), a store of the copy measured as costing nothing
    /// beyond code placement; on the Xeon it is the store commit that bounds a saturated stream.
    ///
    /// Measured on the 2-core VM, ring-like topic, alternating binaries built with the
    /// workspace's code alignment (`.cargo/config.toml`): the 2 µs-paced 1→1 p50 243 → 206 ns
    /// (the Disruptor's BusySpin 177 in the same runs, 6 rounds), saturated throughput alike
    /// (14 rounds: 1→1 159/162 M/s, 1→2 158/160, 1→4 122/125). Built without that alignment
    /// the same pair had shown the copy costing 20% of 1→1 throughput, and so had the old code
    /// with an unused store added; but so did the old code with only an unrelated function
    /// added to the harness (242 → 203 M/s): code placement, not the store. A minimal ring
    /// reproduces the load's cost: p50 183 → 220 ns when its writer loads the word it publishes.
    next: u64,
    /// Single producer without byte retention: the end of `seg`, so offsets below it may take the
    /// short path of [`Log::publish`]. Zero otherwise (every publish takes the long path).
    limit: u64,
    /// `seg`'s values by offset, written through by the short path for offsets below `limit`
    /// (unset, and never used, while `limit` is zero). It spares that path four instructions a
    /// publish (the segment's address, its mask, the array's address and the `Some` test), a
    /// sixth of its loop on the Xeon, where the single producer's loop bounds 1→1 (see
    /// [`Log::publish_single_short`]).
    slots: SlotBase<T>,
    /// Many producers: the generation of the lease this writer holds (see the module docs), or
    /// held last and may not have seen ended yet. `None` once it knows it holds none.
    lease: Option<u64>,
    /// Many producers: how many offsets this writer reserved from `next` on (from its last
    /// count). The short path's only bookkeeping for the lease: one increment;
    /// [`Writer::count_run`] looks at it where a publish leaves the short path (a segment's end,
    /// the long path).
    mine: u64,
    /// Many producers: how many reservations in a row up to `next` were all this writer's (a
    /// record or a whole batch each: see [`Writer::count_run`]).
    alone: u64,
    /// The switch step this writer owes after the publish under way ([`Log::prepare`],
    /// [`Log::settle_ahead`]). `None` between publishes.
    ahead: Option<Owed>,
    /// The segment after `seg`, taken after the publish whose switch step this writer took
    /// ([`Log::settle_ahead`]), so that its next switch neither looks it up nor counts a
    /// reference to it before publishing. Dropped if the writer enters another (many producers:
    /// others took the offsets in it), or when the writer is released. So an idle writer holds
    /// two segments, not one, until it publishes again.
    next_seg: Option<SegRef<T>>,
    /// The segment this writer left in the publish under way, let go after it
    /// ([`Log::settle_ahead`]). `None` between publishes.
    left: Option<SegRef<T>>,
}

/// A segment switch's step that a writer owes once its record is published ([`Log::prepare`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Owed {
    /// The segment the writer entered.
    index: u64,
    /// The writer installed that segment itself, before writing: the step ran then, with the
    /// end from before the publish, so it runs again after it, for retention. Otherwise it runs
    /// only if no other writer took it meanwhile.
    again: bool,
}

/// A single writer's short-path state, by value (see [`Log::take_kept`]): what
/// [`Log::publish_kept`] reads and writes, so that a [`Producer`] can hold it in its own memory,
/// which the compiler may keep in registers across the caller's loop, rather than behind a
/// pointer that every publish reloads. A lease holder's kept state uses the same three words,
/// beside a [`KeptLease`] taken with them ([`Log::take_kept_lease`]): a producer's one `Kept`
/// serves whichever of the two paths its topic takes.
///
/// [`Producer`]: crate::Producer
pub(crate) struct Kept<T> {
    /// The next offset to publish (equal to the watermark while kept; [`STALE`] in
    /// [`Kept::none`]).
    next: u64,
    /// As [`Writer`]'s `limit`.
    limit: u64,
    /// As [`Writer`]'s `slots`.
    slots: SlotBase<T>,
}

impl<T> Clone for Kept<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Kept<T> {}

impl<T> Kept<T> {
    /// A state that takes no short path (every publish hands its value back), and whose next
    /// offset hands a writer no copy ([`STALE`]: see [`Log::give_back_kept`]).
    pub(crate) const fn none() -> Self {
        Kept {
            next: STALE,
            limit: 0,
            slots: SlotBase::unset(),
        }
    }

    /// The next offset (a single writer's: see [`Log::give_back_kept`]).
    #[inline(always)]
    pub(crate) fn next(&self) -> u64 {
        self.next
    }

    /// Takes no short path until taken again (a lease holder's: see [`Log::take_kept_lease`]).
    #[inline(always)]
    pub(crate) fn clear(&mut self) {
        self.limit = 0;
    }

    /// Whether the next publish may take the short path.
    #[cfg(test)]
    pub(crate) fn is_kept(&self) -> bool {
        self.next < self.limit
    }
}

/// The lease's part of a lease holder's short-path state, by value (see
/// [`Log::take_kept_lease`]): with the [`Kept`] beside it (the next offset, the segment's end and
/// values), what [`Log::publish_kept_lease`] reads and writes, so that a [`Producer`] of a
/// many-producer topic that publishes alone can hold its place in its own memory, as a single
/// producer does with its `Kept` alone, rather than reach the writer, its lease and its segment
/// through pointers that every publish reloads. The producer holds both in its `Fast`, and the
/// `Kept` is the single producer's one: a producer takes one path or the other, and sharing the
/// three words is what let the caller's loop keep either path's state in registers (see
/// `Producer::fast`).
///
/// A cache of the writer's state, not a second owner of it: the lease's word still holds the
/// holder's next offset after every publish, so the writer's own paths go on from there with
/// nothing handed back. Cleared (the `Kept`'s `limit` 0: no short path) before anything else uses
/// the writer, and taken again after the writer's own publish path; cleared too whenever the
/// writer holds no lease. So it never stores to a lease's word once the writer has acknowledged
/// that lease's end (`lease_stale`), after which the word may be another holder's.
///
/// [`Producer`]: crate::Producer
pub(crate) struct KeptLease {
    /// The generation of the lease the writer holds.
    gen: u64,
    /// That lease's word (`Log::lease_of(gen)`), in the log the producer keeps alive.
    word: *const AtomicU64,
    /// The segment's stamps by offset.
    stamps: StampBase,
}

impl KeptLease {
    /// No lease (only ever beside a cleared [`Kept`]).
    pub(crate) const fn none() -> Self {
        KeptLease {
            gen: 0,
            word: std::ptr::null(),
            stamps: StampBase::unset(),
        }
    }
}

/// A writer claimed for one call ([`Log::claim`]), released when dropped: on unwinding too, as a
/// publish may end by dropping retired values ([`Log::drop_retired`], the application's `Drop`).
pub(crate) struct Claimed<'a, T: Send + Sync + 'static> {
    log: &'a Log<T>,
    pub(crate) w: Writer<T>,
}

impl<T: Send + Sync + 'static> Drop for Claimed<'_, T> {
    fn drop(&mut self) {
        self.log.release_writer(&mut self.w);
    }
}

impl<T: Send + Sync + 'static> Writer<T> {
    /// A single writer's copy of its next offset, `None` while [`STALE`] (for tests elsewhere in
    /// the crate).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn next_copy(&self) -> Option<u64> {
        (self.next != STALE).then_some(self.next)
    }

    /// Towards the lease ([`LEASE_AFTER`]), after a many-producer reservation of `t..t + n`
    /// that `mine` counts already: if every offset from `next` to `t + n` was this writer's,
    /// its reservations since the last count add to those it made in a row, else that count
    /// starts again. Off the short path (a segment's end, the long path): the short path only
    /// counts its records, one reservation each, so the reservations are `mine`, less this
    /// one's `n`, plus one.
    ///
    /// Reservations, not offsets: what the lease saves is a read-modify-write a reservation,
    /// and what ending it costs (a membarrier, which interrupts every core the process runs
    /// on) does not depend on how many records it covered. Counted in offsets, a batch of 256
    /// counted 256, so two producers of batches sharing a core took and ended the lease about
    /// every ~20 K records (430 ends in a 10 M-record batch 2→2 run with two lease words, one
    /// every ~43 µs) for one `fetch_add` saved every 256 records.
    #[inline]
    fn count_run(&mut self, t: u64, n: u64) {
        let end = t + n;
        debug_assert!(self.mine >= n, "`mine` counts this reservation already");
        // Wrapping: `next` is never above a later reservation's end, but a count is no reason
        // to risk a panic.
        self.alone = if end.wrapping_sub(self.next) == self.mine {
            self.alone.saturating_add(self.mine.saturating_sub(n) + 1)
        } else {
            0
        };
        (self.mine, self.next) = (0, end);
    }

    /// Whether this writer has made enough reservations in a row to ask for the lease.
    #[inline(always)]
    fn may_lease(&self) -> bool {
        self.alone >= u64::from(LEASE_AFTER)
    }

    /// The segment with `index`, switching (and preparing the log) when the writer moves on.
    #[inline]
    fn segment(&mut self, log: &Log<T>, index: u64) -> Option<&Segment<T>> {
        let current = self.seg.as_ref().map(|s| s.base() >> log.shift);
        if current != Some(index) {
            // Between a reservation and its publish: letting the old segment go, and the pins in
            // `prepare` and `acquire`, may release segments (see `segment`'s Lifetime).
            let _barred = bar_user_code();
            if let Some(old) = self.seg.take() {
                if log.single {
                    // The single writer leaves this segment full (it only moves forward).
                    old.set_filled(old.len());
                }
                // Let go after the publish: that is a read-modify-write of its reference count,
                // a line its readers write too. (A batch that enters two segments lets the
                // first go here, at the second switch.)
                self.left = Some(old);
            }
            // The switch's step is left for after the publish (see `Log::prepare`); a batch that
            // enters two segments owes only the later one's, which installs through the one
            // after it.
            if let Some(owed) = log.prepare(index) {
                self.ahead = Some(owed);
            }
            self.seg = match self.next_seg.take() {
                // Taken after the last switch's publish (`Log::settle_ahead`).
                Some(seg) if seg.base() >> log.shift == index => Some(seg),
                _ => log.acquire(index),
            };
            (self.limit, self.slots) = match &self.seg {
                Some(seg) if log.single && log.fast => {
                    (seg.base() + seg.len() as u64, seg.slot_base())
                }
                _ => (0, SlotBase::unset()),
            };
        }
        self.seg.as_deref()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::{error::ReadError, reader::Reader, Start};

    /// How many readers the log counts as watching its published end.
    fn watching(log: &Log<u64>) -> u64 {
        (log.state.load(Ordering::Relaxed) & WATCHING_MASK) / WATCHING_ONE
    }

    /// A single-producer log without timestamps, with segments of `segment` slots: the log, its
    /// writer, and a reader from the earliest record.
    fn single_log(segment: usize) -> (Arc<Log<u64>>, Writer<u64>, Reader<u64>) {
        let config = TopicConfig::<u64>::default()
            .single_producer()
            .timestamps(false)
            .segment_size(segment);
        let log = Arc::new(Log::new(&config));
        let w = log.claim_writer().unwrap();
        let r = Reader::new(Arc::clone(&log), 0, Start::Earliest).unwrap();
        (log, w, r)
    }

    /// Looks at the published end `WATCH_AFTER` times, finding nothing each time.
    fn wait_at_end(r: &mut Reader<u64>) {
        for _ in 0..WATCH_AFTER {
            assert_eq!(r.try_next().unwrap_err(), ReadError::Empty);
        }
    }

    #[test]
    fn the_single_writer_keeps_its_copy_only_while_a_reader_watches() {
        let (log, mut w, mut r) = single_log(64);
        // The first publish takes the long path (the writer has no segment yet), which keeps
        // the copy; the short path keeps none while nobody watches.
        assert_eq!(log.publish(&mut w, 0, None).unwrap(), 0);
        assert_eq!(log.publish(&mut w, 1, None).unwrap(), 1);
        assert_eq!(w.next, STALE, "no reader has looked yet: no copy");
        assert_eq!(*r.try_next().unwrap(), 0);
        assert_eq!(*r.try_next().unwrap(), 1);
        assert_eq!(
            watching(&log),
            0,
            "a reader that found records does not watch"
        );
        for _ in 1..WATCH_AFTER {
            assert_eq!(r.try_next().unwrap_err(), ReadError::Empty);
        }
        assert_eq!(watching(&log), 0, "not after a few empty looks");
        assert_eq!(r.try_next().unwrap_err(), ReadError::Empty);
        assert_eq!(
            watching(&log),
            1,
            "it keeps finding nothing new: it watches"
        );
        assert_eq!(log.publish(&mut w, 2, None).unwrap(), 2);
        assert_eq!(w.next, 3, "a reader watches: the copy is kept");
        assert_eq!(*r.try_next().unwrap(), 2);
        assert_eq!(watching(&log), 1, "a run of one: still watching");
        for v in 3..3 + STREAMING_RUN {
            assert_eq!(log.publish(&mut w, v, None).unwrap(), v);
        }
        let run: Vec<u64> = r.try_next_batch(4096).unwrap().values().copied().collect();
        assert_eq!(run, (3..3 + STREAMING_RUN).collect::<Vec<_>>());
        assert_eq!(watching(&log), 0, "a long run: it streams");
        // Without the copy the writer goes on from the watermark, across the segment's end
        // (offset 64, the long path) and through a batch.
        let end = 3 + STREAMING_RUN;
        assert_eq!(log.publish(&mut w, end, None).unwrap(), end);
        assert_eq!(w.next, STALE, "nobody watches: the copy is dropped");
        for v in end + 1..100 {
            assert_eq!(log.publish(&mut w, v, None).unwrap(), v);
        }
        let mut batch = vec![100, 101, 102];
        assert_eq!(
            log.publish_batch(&mut w, &mut batch, &[]).unwrap(),
            100..103
        );
        let mut got = Vec::new();
        while let Ok(b) = r.try_next_batch(4096) {
            got.extend(b.values().copied()); // one batch a segment
        }
        assert_eq!(got, (end..103).collect::<Vec<_>>());
        wait_at_end(&mut r);
        assert_eq!(
            watching(&log),
            1,
            "it caught up and found nothing: it watches again"
        );
        assert_eq!(log.publish(&mut w, 103, None).unwrap(), 103);
        assert_eq!(w.next, 104);
        // A second reader that streams does not drop the copy while the first watches.
        let mut other = Reader::new(Arc::clone(&log), 0, Start::Offset(104)).unwrap();
        wait_at_end(&mut other);
        assert_eq!(watching(&log), 2);
        for v in 104..104 + STREAMING_RUN {
            log.publish(&mut w, v, None).unwrap();
        }
        assert_eq!(
            other.try_next_batch(4096).unwrap().len() as u64,
            STREAMING_RUN
        );
        assert_eq!(watching(&log), 1);
        log.publish(&mut w, 120, None).unwrap();
        assert_eq!(w.next, 121, "the first reader still watches");
        // Dropping a watching reader takes it off the count.
        drop(r);
        assert_eq!(watching(&log), 0);
        log.publish(&mut w, 121, None).unwrap();
        assert_eq!(w.next, STALE);
        // The role handed back without a copy: the next writer continues at the watermark.
        log.release_writer(&mut w);
        let mut w = log.claim_writer().unwrap();
        assert_eq!(log.publish(&mut w, 122, None).unwrap(), 122);
        let rest: Vec<u64> = other
            .try_next_batch(4096)
            .unwrap()
            .values()
            .copied()
            .collect();
        assert_eq!(rest, (120..123).collect::<Vec<_>>());
    }

    #[test]
    fn empty_looks_add_up_across_short_runs_and_start_again_after_a_long_one() {
        let (log, mut w, mut r) = single_log(1024);
        // A stream faster than `WATCH_AFTER` looks: a record, then a few empty looks, again.
        let few = WATCH_AFTER / 4;
        let mut v = 0;
        for gap in 1..=WATCH_AFTER / few {
            log.publish(&mut w, v, None).unwrap();
            assert_eq!(*r.try_next().unwrap(), v);
            v += 1;
            for _ in 0..few {
                assert_eq!(r.try_next().unwrap_err(), ReadError::Empty);
            }
            let counted = gap * few >= WATCH_AFTER;
            assert_eq!(watching(&log), u64::from(counted), "after {gap} gaps");
        }
        assert_eq!(w.next, STALE, "the copy comes back with the next publish");
        log.publish(&mut w, v, None).unwrap();
        v += 1;
        assert_eq!(w.next, v, "a reader watches: the copy is kept");
        // A long run: streaming. The count starts again, so a few empty looks are not enough.
        for _ in 0..STREAMING_RUN {
            log.publish(&mut w, v, None).unwrap();
            v += 1;
        }
        let run = r.try_next_batch(4096).unwrap().len() as u64;
        assert_eq!(run, STREAMING_RUN + 1);
        assert_eq!(watching(&log), 0, "a long run: it streams");
        for _ in 0..few {
            assert_eq!(r.try_next().unwrap_err(), ReadError::Empty);
        }
        assert_eq!(
            watching(&log),
            0,
            "the looks before the long run do not count"
        );
        // A short run cut at its segment's end starts the count again too: what follows is in the
        // next segment, so the reader cannot tell that it caught up. (A run cut at the reader's
        // limit does the same, but a look-up looks at least `SCAN` ahead, a long run anyway.)
        while v < 1024 - 2 {
            log.publish(&mut w, v, None).unwrap();
            v += 1;
        }
        while r.position() < v {
            r.try_next_batch(4096).unwrap();
        }
        for _ in 0..few {
            assert_eq!(r.try_next().unwrap_err(), ReadError::Empty);
        }
        log.publish(&mut w, v, None).unwrap();
        log.publish(&mut w, v + 1, None).unwrap();
        assert_eq!(*r.try_next().unwrap(), v, "two records, the segment's last");
        assert_eq!(*r.try_next().unwrap(), v + 1);
        for _ in 0..WATCH_AFTER - 1 {
            assert_eq!(r.try_next().unwrap_err(), ReadError::Empty);
        }
        assert_eq!(
            watching(&log),
            0,
            "counted from the run cut at the segment's end, not from before it"
        );
        assert_eq!(r.try_next().unwrap_err(), ReadError::Empty);
        assert_eq!(watching(&log), 1);
    }

    #[test]
    fn a_reader_that_would_overflow_the_watching_count_is_not_counted() {
        let config = TopicConfig::<u64>::default().single_producer();
        let log = Log::new(&config);
        log.state
            .fetch_or(WATCHING_MASK | BLOCKED_ONE, Ordering::Relaxed);
        assert!(!log.watch(), "the count is full");
        assert_eq!(
            log.state.load(Ordering::Relaxed) & WATCHING_MASK,
            WATCHING_MASK,
            "and stays as it was"
        );
        assert_eq!(
            log.state.load(Ordering::Relaxed) & !WATCHING_MASK,
            BLOCKED_ONE,
            "the other fields are untouched (one blocked publisher)"
        );
        log.unwatch();
        assert!(log.watch());
        let multi = Log::new(&TopicConfig::<u64>::default());
        assert!(
            !multi.watch(),
            "many producers keep no copy: nobody is counted"
        );
        assert_eq!(multi.state.load(Ordering::Relaxed), 0);
    }

    fn window(log: &Log<u64>) -> Duration {
        Duration::from_nanos(log.block_yield_nanos.load(Ordering::Relaxed))
    }

    #[test]
    fn a_blocked_publishers_yield_window_grows_after_short_parks_and_resets_after_a_long_one() {
        let base = Duration::from_micros(200);
        let config = TopicConfig::<u64>::default()
            .max_records(8)
            .overflow(Overflow::Block)
            .wait(WaitStrategy::default().yield_for(base));
        let log = Log::new(&config);
        assert_eq!(window(&log), base, "it starts at the strategy's yield_for");
        log.adapt_block_yield(Duration::from_micros(50));
        assert_eq!(
            window(&log),
            base * 2,
            "a park shorter than the window doubles it"
        );
        for _ in 0..10 {
            log.adapt_block_yield(Duration::ZERO);
        }
        assert_eq!(
            window(&log),
            base * MAX_BLOCK_YIELD_FACTOR as u32,
            "it stops at the cap"
        );
        log.adapt_block_yield(base * 100);
        assert_eq!(
            window(&log),
            base,
            "a long park (readers stalled) resets it"
        );

        let never = Log::new(&config.clone().wait(WaitStrategy::park_at_once()));
        never.adapt_block_yield(Duration::ZERO);
        assert_eq!(
            window(&never),
            Duration::ZERO,
            "a strategy that never yields keeps none"
        );
    }

    /// A many-producer log (no timestamps unless `stamped`, segments of 64) whose light barrier
    /// is free, as on Linux: the log, a reader from the earliest record.
    fn multi_log(config: TopicConfig<u64>) -> (Arc<Log<u64>>, Reader<u64>) {
        let log = Arc::new(Log::new(&config.segment_size(64)));
        assert!(
            log.leasable,
            "this test needs membarrier (Linux): the lease is off without it"
        );
        let r = Reader::new(Arc::clone(&log), 0, Start::Earliest).unwrap();
        (log, r)
    }

    /// Publishes `values` through `w`, checking each lands at the next offset.
    fn publish_all(log: &Log<u64>, w: &mut Writer<u64>, values: std::ops::Range<u64>) {
        for v in values {
            assert_eq!(log.publish(w, v, None).unwrap(), v, "offsets stay dense");
        }
    }

    /// Everything the reader can take now.
    fn drain(r: &mut Reader<u64>) -> Vec<u64> {
        let mut got = Vec::new();
        while let Ok(b) = r.try_next_batch(4096) {
            got.extend(b.values().copied());
        }
        got
    }

    fn leased(log: &Log<u64>) -> bool {
        log.tail.load(Ordering::Relaxed) & TAIL_LEASED != 0
    }

    /// A many-producer log without timestamps, a reader from its start, and a writer that
    /// published `0..LEASE_AFTER + extra` alone and holds the lease; and `LEASE_AFTER`.
    fn leased_log(extra: u64) -> (Arc<Log<u64>>, Reader<u64>, Writer<u64>, u64) {
        let (log, r) = multi_log(TopicConfig::default().timestamps(false));
        let mut w = log.claim_writer().unwrap();
        let n = u64::from(LEASE_AFTER);
        publish_all(&log, &mut w, 0..n + extra);
        assert!(w.lease.is_some() && leased(&log));
        (log, r, w, n)
    }

    #[test]
    fn a_lone_writer_takes_the_lease_and_gives_it_back_where_it_stopped() {
        for stamped in [false, true] {
            let (log, mut r) = multi_log(TopicConfig::default().timestamps(stamped));
            let mut w = log.claim_writer().unwrap();
            // Counted where a publish leaves the short path: the first of each segment, here
            // the one at LEASE_AFTER, the first after that many.
            let n = u64::from(LEASE_AFTER) + 1;
            publish_all(&log, &mut w, 0..n - 1);
            assert!(
                w.lease.is_none() && !leased(&log),
                "not before {LEASE_AFTER} in a row"
            );
            publish_all(&log, &mut w, n - 1..n);
            assert!(
                w.lease.is_some() && leased(&log),
                "the lease, after {LEASE_AFTER}"
            );
            // Across segment ends (the long path), single records and a batch.
            publish_all(&log, &mut w, n..n + 100);
            let mut batch = vec![n + 100, n + 101, n + 102];
            assert_eq!(
                log.publish_batch(&mut w, &mut batch, &[]).unwrap(),
                n + 100..n + 103
            );
            assert!(w.lease.is_some(), "the holder's own publishes keep it");
            assert_eq!(log.end(), n + 103, "the end comes from the lease");
            assert_eq!(drain(&mut r), (0..n + 103).collect::<Vec<_>>());
            log.release_writer(&mut w);
            assert!(!leased(&log), "given back with its writer");
            assert_eq!(log.end(), n + 103);
            let mut next = log.claim_writer().unwrap();
            publish_all(&log, &mut next, n + 103..n + 104);
            assert_eq!(drain(&mut r), vec![n + 103]);
            if stamped {
                assert!(log.timestamp_at(n + 50).is_some_and(|t| t > 0), "stamped");
            }
        }
    }

    #[test]
    fn a_writer_of_batches_takes_the_lease_after_as_many_batches_as_single_records() {
        let (log, mut r) = multi_log(TopicConfig::default().timestamps(false));
        let mut w = log.claim_writer().unwrap();
        let n = u64::from(LEASE_AFTER);
        let mut publish_batches = |from: u64, count: u64| {
            for b in 0..count {
                let at = from + 8 * b;
                let mut batch: Vec<u64> = (at..at + 8).collect();
                assert_eq!(
                    log.publish_batch(&mut w, &mut batch, &[]).unwrap(),
                    at..at + 8
                );
            }
            from + 8 * count
        };
        // Eight times as many records as the lease asks for, in one reservation a batch.
        let at = publish_batches(0, n - 1);
        assert!(!leased(&log), "{} batches are not {n} reservations", n - 1);
        let at = publish_batches(at, 1);
        assert!(leased(&log), "the lease, after {n} batches");
        assert_eq!(drain(&mut r), (0..at).collect::<Vec<_>>());
        log.release_writer(&mut w);
        assert!(!leased(&log));
    }

    /// A many-producer `Producer`'s kept lease: a `Kept` and a `KeptLease`, as its `Fast` holds
    /// them.
    struct Held {
        core: Kept<u64>,
        words: KeptLease,
    }

    impl Held {
        fn none() -> Self {
            Held {
                core: Kept::none(),
                words: KeptLease::none(),
            }
        }

        fn is_kept(&self) -> bool {
            self.core.is_kept()
        }
    }

    /// Publishes `value` as a many-producer `Producer` does ([`Log::publish_plain_multi_kept`]).
    /// Says whether the kept state could take it.
    fn publish_as_producer(
        log: &Log<u64>,
        w: &mut Writer<u64>,
        h: &mut Held,
        value: u64,
    ) -> (u64, bool) {
        let kept = h.is_kept();
        (
            log.publish_plain_multi_kept(w, &mut h.core, &mut h.words, value)
                .unwrap(),
            kept,
        )
    }

    #[test]
    fn a_kept_lease_publishes_as_its_writer_would_and_the_writer_goes_on_from_it() {
        let (log, mut r, mut w, n) = leased_log(3);
        assert_eq!(log.path, Path::PlainMulti, "the path the kept lease is for");
        let mut h = Held::none();
        log.take_kept_lease(&w, &mut h.core, &mut h.words);
        assert!(
            h.core.limit > h.core.next,
            "a held lease in a segment with room: kept"
        );
        // Across segment ends (64 slots): the writer's path switches, the kept state goes on.
        let end = n + 3 + 300;
        let mut kept = 0;
        for v in n + 3..end {
            let (offset, from_kept) = publish_as_producer(&log, &mut w, &mut h, v);
            assert_eq!(offset, v, "offsets stay dense");
            kept += u64::from(from_kept);
        }
        assert!(
            kept >= 300 - 300 / 64 - 1,
            "all but a segment's first ({kept} of 300)"
        );
        assert!(w.lease.is_some() && leased(&log), "still the holder");
        assert_eq!(log.end(), end, "the end comes from the lease's word");
        // The writer's own paths go on from where the kept state stopped: a batch, then one.
        let mut batch = vec![end, end + 1];
        assert_eq!(
            log.publish_batch(&mut w, &mut batch, &[]).unwrap(),
            end..end + 2
        );
        log.take_kept_lease(&w, &mut h.core, &mut h.words);
        assert_eq!(
            publish_as_producer(&log, &mut w, &mut h, end + 2),
            (end + 2, true)
        );
        assert_eq!(drain(&mut r), (0..end + 3).collect::<Vec<_>>());
        log.release_writer(&mut w);
        assert!(!leased(&log), "given back with its writer");
        let mut next = log.claim_writer().unwrap();
        publish_all(&log, &mut next, end + 3..end + 4);
        assert_eq!(drain(&mut r), vec![end + 3]);
    }

    #[test]
    fn a_kept_lease_ended_by_another_publisher_hands_back_not_busy_and_no_offset_is_lost() {
        let (log, mut r, mut holder, n) = leased_log(3);
        let mut h = Held::none();
        log.take_kept_lease(&holder, &mut h.core, &mut h.words);
        let gen = holder.lease.unwrap();
        assert_eq!(
            publish_as_producer(&log, &mut holder, &mut h, n + 3),
            (n + 3, true)
        );
        // Another publish ends the lease.
        assert_eq!(
            log.publish_unheld(1_000_000, None, None, Overflow::DropOldest)
                .unwrap(),
            n + 4
        );
        assert!(!leased(&log), "ended");
        // The kept state finds out, leaves its word as it found it (not busy), and hands the
        // value back; nothing is published for it.
        assert_eq!(log.publish_kept_lease(&mut h.core, &h.words, 7), Err(7));
        assert_eq!(
            log.lease_of(gen).load(Ordering::Relaxed),
            (n + 4) << 1,
            "not busy, at the holder's next offset"
        );
        assert_eq!(log.end(), n + 5);
        assert!(h.core.limit == 0, "no short path until taken again");
        // The writer's path acknowledges the end and reserves as any other.
        h.core.clear();
        assert_eq!(
            log.publish_plain_multi(&mut holder, 7, None).unwrap(),
            n + 5
        );
        log.take_kept_lease(&holder, &mut h.core, &mut h.words);
        assert!(
            holder.lease.is_none() && h.core.limit == 0,
            "no lease, nothing kept"
        );
        assert_eq!(log.lease_stale.load(Ordering::Relaxed), 0, "acknowledged");
        assert_eq!(
            publish_as_producer(&log, &mut holder, &mut h, 8),
            (n + 6, false)
        );
        let mut want: Vec<u64> = (0..n + 4).collect();
        want.extend([1_000_000, 7, 8]);
        assert_eq!(drain(&mut r), want, "every record once, in offset order");
        log.release_writer(&mut holder);
    }

    #[test]
    fn a_kept_lease_publishes_nothing_after_a_close() {
        let (log, mut r, mut w, n) = leased_log(1);
        let mut h = Held::none();
        log.take_kept_lease(&w, &mut h.core, &mut h.words);
        assert!(h.core.limit > h.core.next, "kept");
        log.close();
        assert_eq!(log.publish_kept_lease(&mut h.core, &h.words, 5), Err(5));
        assert!(matches!(
            log.publish_plain_multi(&mut w, 5, None),
            Err(PublishError::Closed(5))
        ));
        assert_eq!(drain(&mut r), (0..n + 1).collect::<Vec<_>>());
        log.release_writer(&mut w);
    }

    #[test]
    fn another_publisher_ends_the_lease_and_the_offsets_stay_dense() {
        let (log, mut r, mut holder, n) = leased_log(10);
        // A publish without a writer (`Topic::publish`) ends it.
        assert_eq!(
            log.publish_unheld(1_000_000, None, None, Overflow::DropOldest)
                .unwrap(),
            n + 10
        );
        assert!(!leased(&log), "ended");
        assert_ne!(log.lease_stale.load(Ordering::Relaxed), 0, "not seen yet");
        // The holder finds out at its next publish and reserves as any other.
        publish_all(&log, &mut holder, n + 11..n + 12);
        assert!(holder.lease.is_none(), "it knows");
        assert_eq!(log.lease_stale.load(Ordering::Relaxed), 0, "and said so");
        // A second writer, then the first again: neither is alone, so neither takes it.
        let mut other = log.claim_writer().unwrap();
        for i in 0..2 * n {
            let w = if i % 2 == 0 { &mut other } else { &mut holder };
            log.publish(w, n + 12 + i, None).unwrap();
        }
        assert!(!leased(&log), "interleaved writers take no lease");
        // One of them alone again: it takes it (counted from the first segment it fills alone),
        // and a batch from the other ends it.
        publish_all(&log, &mut holder, 3 * n + 12..4 * n + 12);
        assert!(
            holder.lease.is_none(),
            "its first segment alone was partly the other's"
        );
        publish_all(&log, &mut holder, 4 * n + 12..5 * n + 12);
        assert!(holder.lease.is_some() && leased(&log));
        let mut batch = vec![7, 8];
        let at = 5 * n + 12;
        assert_eq!(
            log.publish_batch(&mut other, &mut batch, &[]).unwrap(),
            at..at + 2
        );
        publish_all(&log, &mut holder, at + 2..at + 3);
        let mut want: Vec<u64> = (0..n + 10).collect();
        want.push(1_000_000);
        want.extend(n + 11..at);
        want.extend([7, 8, at + 2]);
        assert_eq!(drain(&mut r), want, "every record once, in offset order");
        log.release_writer(&mut holder);
        log.release_writer(&mut other);
    }

    #[test]
    fn a_new_lease_takes_the_other_word_while_the_last_holder_has_not_seen_its_end() {
        let (log, mut r, mut first, n) = leased_log(1);
        let mut second = log.claim_writer().unwrap();
        // The second writer ends it, then publishes alone, long enough for a lease of its own.
        // The first has not published since, so it may still mark itself busy in its word: the
        // second's lease takes the other one.
        publish_all(&log, &mut second, n + 1..3 * n);
        assert!(second.lease.is_some() && leased(&log), "granted");
        assert_ne!(first.lease, second.lease, "another generation");
        assert_eq!(
            lease_word(first.lease.unwrap()) ^ lease_word(second.lease.unwrap()),
            1,
            "and the other word"
        );
        // The first publishes again: it finds its lease over (its store to its word goes
        // nowhere the second looks), acknowledges, ends the second's lease, and goes on from
        // the end of it.
        publish_all(&log, &mut first, 3 * n..3 * n + 1);
        assert!(first.lease.is_none() && !leased(&log));
        assert_eq!(drain(&mut r), (0..3 * n + 1).collect::<Vec<_>>());
        log.release_writer(&mut first);
        log.release_writer(&mut second);
        assert_eq!(log.end(), 3 * n + 1);
    }

    #[test]
    fn no_lease_is_granted_on_a_word_whose_last_holder_has_not_seen_its_end() {
        let (log, mut r, mut first, n) = leased_log(1);
        let mut second = log.claim_writer().unwrap();
        // The second ends the first's lease and takes one of its own (the other word); a
        // publish without a writer ends that one too. Neither holder has published since.
        publish_all(&log, &mut second, n + 1..3 * n);
        assert!(second.lease.is_some());
        assert_eq!(
            log.publish_unheld(3 * n, None, None, Overflow::DropOldest)
                .unwrap(),
            3 * n
        );
        assert!(!leased(&log));
        assert_eq!(log.lease_stale.load(Ordering::Relaxed), 0b11, "both unseen");
        // The second finds out at its next publish and then publishes alone: the next lease
        // would take the first's word, whose holder may still store to it.
        publish_all(&log, &mut second, 3 * n + 1..5 * n);
        assert!(second.lease.is_none() && !leased(&log), "held back");
        // Released, the first acknowledges; the second's next segments alone take the lease.
        log.release_writer(&mut first);
        assert_eq!(log.lease_stale.load(Ordering::Relaxed), 0);
        publish_all(&log, &mut second, 5 * n..6 * n + 64);
        assert!(second.lease.is_some() && leased(&log));
        assert_eq!(drain(&mut r), (0..6 * n + 64).collect::<Vec<_>>());
        log.release_writer(&mut second);
        assert!(!leased(&log));
        assert_eq!(log.end(), 6 * n + 64);
    }

    #[test]
    fn a_close_ends_the_lease_and_later_publishes_fail() {
        let (log, mut r, mut w, n) = leased_log(5);
        log.close();
        assert!(!leased(&log));
        assert!(matches!(
            log.publish(&mut w, 0, None),
            Err(PublishError::Closed(0))
        ));
        assert_eq!(log.final_end(), Some(n + 5));
        assert_eq!(drain(&mut r), (0..n + 5).collect::<Vec<_>>());
        assert_eq!(r.try_next().unwrap_err(), ReadError::Closed);
        log.release_writer(&mut w);
    }

    #[test]
    fn the_holder_keeps_a_capacity_exactly() {
        // Reject, and Block's room check: one reader that reads nothing holds the room.
        let cap = 2 * u64::from(LEASE_AFTER);
        let config = TopicConfig::default()
            .timestamps(false)
            .max_records(cap)
            .overflow(Overflow::Reject);
        let (log, _r) = multi_log(config);
        let mut w = log.claim_writer().unwrap();
        publish_all(&log, &mut w, 0..cap);
        assert!(w.lease.is_some(), "it publishes alone");
        assert!(matches!(
            log.publish(&mut w, cap, None),
            Err(PublishError::Full(_))
        ));
        assert!(w.lease.is_some(), "a refusal keeps the lease");
        let mut batch = vec![1];
        assert!(log.publish_batch(&mut w, &mut batch, &[]).is_err());
        assert_eq!(log.end(), cap, "nothing past the room");
        log.release_writer(&mut w);
    }

    /// What a publish that entered segment `j` leaves once it returns, whichever path took it:
    /// the segment after `j` installed, retention applied (segments of 4, the newest 4 records
    /// kept, so the start is segment `j - 1`'s base), no switch step still owed, and a writer
    /// that switched holding the segment after `j` for its next switch.
    fn check_switched(log: &Log<u64>, w: Option<&Writer<u64>>, last: u64, path: &str) {
        let j = last / 4;
        assert_eq!(
            log.installed.load(Ordering::Relaxed),
            j + 2,
            "{path}, up to offset {last}: the next segment is installed"
        );
        assert_eq!(
            log.start(),
            j.saturating_sub(1) * 4,
            "{path}, up to offset {last}: retention trimmed"
        );
        if let Some(w) = w {
            assert_eq!(w.ahead, None, "{path}, up to offset {last}: nothing owed");
            assert!(
                w.left.is_none(),
                "{path}, up to offset {last}: nothing held back"
            );
            // From the first switch on (the log installed its first two segments itself).
            let ahead = (j >= 1).then_some((j + 1) * 4);
            assert_eq!(
                w.next_seg.as_ref().map(|seg| seg.base()),
                ahead,
                "{path}, up to offset {last}: the next segment taken ahead"
            );
        }
    }

    #[test]
    fn every_publish_path_has_taken_the_segment_switch_step_when_it_returns() {
        for single in [true, false] {
            for stamped in [true, false] {
                let config = || {
                    let config = TopicConfig::<u64>::default()
                        .timestamps(stamped)
                        .segment_size(4)
                        .max_records(4);
                    if single {
                        config.single_producer()
                    } else {
                        config
                    }
                };
                let kind = format!("single {single}, stamped {stamped}");

                // One record at a time through a writer: the short paths until a segment's
                // end, then the long path (or, many producers, `publish_reserved`).
                let log = Log::new(&config());
                let mut w = log.claim_writer().unwrap();
                for v in 0..20 {
                    assert_eq!(log.publish(&mut w, v, None).unwrap(), v);
                    check_switched(&log, Some(&w), v, &format!("{kind}, publish"));
                }
                log.release_writer(&mut w);

                // A writer claimed for each record (`Topic::publish`, `write_pinned`).
                let log = Log::new(&config());
                for v in 0..20 {
                    let offset = log.publish_unheld(v, None, None, log.overflow()).unwrap();
                    assert_eq!(offset, v);
                    check_switched(&log, None, v, &format!("{kind}, unheld"));
                }

                // Batches of 3, which cross segments' ends; one of 9 enters three segments,
                // the middle one installed before its run is written.
                let log = Log::new(&config());
                let mut w = log.claim_writer().unwrap();
                for first in (0..18).step_by(3) {
                    let run = [first, first + 1, first + 2];
                    let offsets = log.publish_copies(&mut w, &run, &[]).unwrap();
                    assert_eq!(offsets, first..first + 3);
                    check_switched(&log, Some(&w), first + 2, &format!("{kind}, batch"));
                }
                let run: Vec<u64> = (18..27).collect();
                assert_eq!(log.publish_copies(&mut w, &run, &[]).unwrap(), 18..27);
                check_switched(&log, Some(&w), 26, &format!("{kind}, long batch"));
                log.release_writer(&mut w);
            }
        }
    }
}
