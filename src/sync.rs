//! The one facade for every synchronization primitive logbus uses.
//!
//! No other file names `std::sync::atomic`, `UnsafeCell`, the futex or the epoch collector. Under
//! `cfg(loom)` every primitive here is swapped for loom's model (the switch keys on `cfg(loom)` alone,
//! because `loom-tests/` builds this crate as a dependency), and crossbeam-epoch is built with its own
//! loom support (`--cfg crossbeam_loom`).
//!
//! What lives here:
//! - atomics, `fence`, `Arc`, `Mutex`, `Condvar`, `thread`, `UnsafeCell` (with loom's closure API on
//!   both sides), and [`SlotBase`], a writer's raw handle on an array of cells;
//! - [`StaticLock`]: a mutex for a `static` (the standard one under loom too);
//! - [`OwnValue`]: a single writer's read of its own atomic (loom's `unsync_load` under loom, so
//!   that loom's scheduler sees the races of other threads' loads with its stores);
//! - [`Futex`]: a 32-bit word a thread can sleep on (atomic-wait), with a timed wait of our own;
//! - [`light_barrier`] / [`heavy_barrier`]: the asymmetric pair used by the park/wake handshake;
//! - [`Epoch`]: pinning for crossbeam-epoch reclamation;
//! - [`WaitersByCpu`]: how many threads wait for records on each CPU (a heuristic for pauses);
//! - spin and yield hints, and `CachePadded`.
//!
//! # Orderings
//! The barrier pair is the main ordering decision made in this file. Both sides of the park/wake
//! handshake do "store my flag, then load the other side's flag". Without a full barrier on both sides
//! each load may be satisfied before the other side's store is visible (store buffering), and a wake-up is
//! lost. The fast side (a publisher, on every publish) calls [`light_barrier`]; the rare side (a reader
//! about to park) calls [`heavy_barrier`]. On Linux the heavy side is
//! `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`, which makes every running thread of this process
//! execute a full barrier before it returns; so for each publisher either its stamp store is visible to
//! the parking reader's re-check, or its later load of the parked count observes the reader's increment.
//! That lets the light side be a compiler fence only. When membarrier is unavailable both sides fall back
//! to `fence(SeqCst)`; under loom both sides are `fence(SeqCst)`, which is what loom can model, and a
//! model picks which publish paths its logs take (`loom_free_light_barrier`, under loom only).
//! [`WaitersByCpu`]'s counts publish nothing and are `Relaxed` (see there). [`OwnValue`] is a
//! `Relaxed` load of a word whose every store is ordered before it already (its caller's own, or
//! made under a lock the caller holds): coherence gives the latest value, and nothing is
//! published through it.

#[cfg(not(loom))]
pub(crate) use std::sync::{
    atomic::{fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering},
    Arc, Condvar, Mutex, MutexGuard,
};

#[cfg(loom)]
pub(crate) use loom::sync::{
    atomic::{fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering},
    Arc, Condvar, Mutex, MutexGuard,
};

/// Threads (the subscriptions' own threads), so that loom can schedule them too.
#[cfg(not(loom))]
pub(crate) use std::thread;

#[cfg(loom)]
pub(crate) use loom::thread;

/// Thread-local storage (the debug check of where values may be dropped, and the mark of a thread
/// dropping retired values), so that under loom each modelled thread has its own.
#[cfg(not(loom))]
pub(crate) use std::thread_local;

#[cfg(loom)]
pub(crate) use loom::thread_local;

pub(crate) use arc_swap::ArcSwap;
pub(crate) use crossbeam_epoch::{unprotected, Atomic, Guard, Owned};
pub(crate) use crossbeam_utils::CachePadded;

use std::time::Duration;

/// Locks a mutex, ignoring poisoning: no user code ever runs under an engine lock, so a poisoned lock
/// can only come from an engine bug that already panicked, and the data it guards stays consistent.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    unpoisoned(m.lock())
}

/// What a lock (or a wait on one) gave, poisoned or not (see [`lock`]). Loom's locks give std's
/// `LockResult` too.
fn unpoisoned<G>(result: std::sync::LockResult<G>) -> G {
    result.unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A lock that can live in a `static`: process-wide state no loom model reaches (the late-drop
/// thread's list of pools), so the standard mutex on both sides (loom's cannot be built in a
/// `const`). Poisoning is ignored, as in [`lock`].
pub(crate) struct StaticLock<T>(std::sync::Mutex<T>);

impl<T> StaticLock<T> {
    pub(crate) const fn new(value: T) -> Self {
        StaticLock(std::sync::Mutex::new(value))
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, T> {
        unpoisoned(self.0.lock())
    }
}

/// Waits on a condition variable for at most `timeout`, ignoring poisoning (see [`lock`]).
pub(crate) fn wait_timeout<'a, T>(
    cond: &Condvar,
    guard: MutexGuard<'a, T>,
    timeout: Duration,
) -> MutexGuard<'a, T> {
    unpoisoned(cond.wait_timeout(guard, timeout)).0
}

/// Sets every flag to 0 through `&mut` (no other thread can reach them): plain stores, which the
/// compiler turns into one `memset` instead of a store per flag. Used on a pooled segment's stamps
/// before it is installed again; the install's Release store publishes the zeros.
pub(crate) fn clear_flags(flags: &mut [AtomicU8]) {
    for f in flags.iter_mut() {
        #[cfg(not(loom))]
        {
            *f.get_mut() = 0;
        }
        #[cfg(loom)]
        f.with_mut(|v| *v = 0);
    }
}

/// Asks the CPU to start loading the cache line at `p` into this core's cache: a hint that reads
/// nothing and never faults, whatever the address.
#[inline(always)]
pub(crate) fn prefetch<T>(p: *const T) {
    prefetch_into::<TO_L1, T>(p)
}

/// Like [`prefetch`], into this core's second-level cache only: for lines wanted a little later,
/// which should not crowd out the first level meanwhile.
#[inline(always)]
pub(crate) fn prefetch_l2<T>(p: *const T) {
    prefetch_into::<TO_L2, T>(p)
}

/// x86's `_MM_HINT_T0` and `_MM_HINT_T1`: which caches a read prefetch fills. Numbers rather
/// than the intrinsics' names, which exist only on x86-64; checked against them there.
const TO_L1: i32 = 3;
const TO_L2: i32 = 2;
#[cfg(target_arch = "x86_64")]
const _: () =
    assert!(TO_L1 == std::arch::x86_64::_MM_HINT_T0 && TO_L2 == std::arch::x86_64::_MM_HINT_T1);

#[inline(always)]
fn prefetch_into<const LEVEL: i32, T>(p: *const T) {
    #[cfg(all(not(loom), target_arch = "x86_64"))]
    // SAFETY: a prefetch accesses no memory in the language's sense and cannot fault.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<LEVEL>(p.cast())
    };
    #[cfg(any(loom, not(target_arch = "x86_64")))]
    let _ = p;
}

/// Asks the CPU to start fetching the cache line at `p` for writing (`prefetchw`: the line comes
/// in exclusive, so a later store does not wait for other cores to let go of it). A hint that
/// writes nothing and never faults, whatever the address.
#[inline(always)]
pub(crate) fn prefetch_write<T>(p: *const T) {
    #[cfg(all(not(loom), target_arch = "x86_64"))]
    // `prefetchw` itself rather than `_mm_prefetch::<_MM_HINT_ET0>`, which without the `prfchw`
    // target feature compiles to a read prefetch; CPUs that lack it execute it as a no-op.
    // SAFETY: a prefetch is a hint: it never faults and changes no memory and no flags.
    unsafe {
        std::arch::asm!(
            "prefetchw byte ptr [{p}]",
            p = in(reg) p,
            options(nostack, preserves_flags, readonly),
        )
    };
    #[cfg(any(loom, not(target_arch = "x86_64")))]
    let _ = p;
}

/// The value of an atomic whose every store is ordered before this load: one only the calling
/// thread stores to (a single writer reading its own latest store), or one only stored under a
/// lock the caller holds. A `Relaxed` load, which coherence makes exact.
///
/// Under loom it is `unsync_load`, which is not a scheduling event and panics if any store to the
/// atomic is not ordered before it, so a model also checks that claim. A plain load would hide
/// races from loom's scheduler: it checks a store only against the last access to the atomic
/// before it, and when that is the writer's own load, an earlier load by another thread is never
/// tried after the store (tokio-rs/loom#166, #392). On a single-producer log, which reads its
/// watermark before storing it, the models then never let a reader look between two publishes
/// of the same producer.
pub(crate) trait OwnValue {
    type Value;
    /// See the trait.
    fn own_value(&self) -> Self::Value;
}

impl OwnValue for AtomicU64 {
    type Value = u64;
    #[inline(always)]
    fn own_value(&self) -> u64 {
        #[cfg(not(loom))]
        {
            // Relaxed: see `OwnValue`.
            self.load(Ordering::Relaxed)
        }
        #[cfg(loom)]
        // SAFETY: loom's `unsync_load` touches no real memory unsafely; what it asks of the
        // caller (no concurrent store) is what loom checks, and a breach fails the model.
        unsafe {
            self.unsync_load()
        }
    }
}

impl<T> OwnValue for AtomicPtr<T> {
    type Value = *mut T;
    #[inline(always)]
    fn own_value(&self) -> *mut T {
        #[cfg(not(loom))]
        {
            // Relaxed: see `OwnValue`.
            self.load(Ordering::Relaxed)
        }
        #[cfg(loom)]
        // SAFETY: as for `AtomicU64`.
        unsafe {
            self.unsync_load()
        }
    }
}

/// A hint inside a busy-wait loop. Under loom it yields, so that the model can make progress.
#[inline]
pub(crate) fn spin_hint() {
    #[cfg(not(loom))]
    std::hint::spin_loop();
    #[cfg(loom)]
    loom::thread::yield_now();
}

/// Gives the rest of this time slice to another thread.
#[inline]
pub(crate) fn yield_now() {
    #[cfg(not(loom))]
    std::thread::yield_now();
    #[cfg(loom)]
    loom::thread::yield_now();
}

/// `UnsafeCell` with loom's closure API, so the same code runs under both.
#[derive(Debug)]
#[repr(transparent)]
pub(crate) struct UnsafeCell<T>(
    #[cfg(not(loom))] std::cell::UnsafeCell<T>,
    #[cfg(loom)] loom::cell::UnsafeCell<T>,
);

impl<T> UnsafeCell<T> {
    pub(crate) fn new(value: T) -> Self {
        #[cfg(not(loom))]
        return UnsafeCell(std::cell::UnsafeCell::new(value));
        #[cfg(loom)]
        return UnsafeCell(loom::cell::UnsafeCell::new(value));
    }

    /// Runs `f` with a shared pointer to the contents.
    #[inline]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        #[cfg(not(loom))]
        return f(self.0.get());
        #[cfg(loom)]
        return self.0.with(f);
    }

    /// Runs `f` with a mutable pointer to the contents.
    #[inline]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        #[cfg(not(loom))]
        return f(self.0.get());
        #[cfg(loom)]
        return self.0.with_mut(f);
    }
}

/// The address of the first value in `cells`, through which the whole array may be read and
/// written (as far as the caller's access allows): our cell is `repr(transparent)` over std's,
/// which is laid out like its contents, so the cells are an array of `T`. Outside loom only
/// (loom's cells track each access and must be used one by one).
#[cfg(not(loom))]
#[inline(always)]
fn values_ptr<T>(cells: &[UnsafeCell<std::mem::MaybeUninit<T>>]) -> *mut T {
    let first = cells
        .as_ptr()
        .cast::<std::cell::UnsafeCell<std::mem::MaybeUninit<T>>>();
    std::cell::UnsafeCell::raw_get(first).cast::<T>()
}

/// Writes a zero byte into every page of `cells`' memory, so that the OS maps each page now and
/// not at the first write to it. A page's first touch is a page fault; on the 2-vCPU VM one
/// stalled a 2 µs-paced publisher for about 5 µs, once per 4 KiB of a fresh segment's values.
/// Used on the segments a log with a capacity allocates when it is created. A no-op under loom
/// (loom's cells and atomics are not laid out like their contents, and a model has no pages to
/// map).
///
/// # Safety
/// A zero byte must be a valid content for any byte of an element, whatever the element's other
/// bytes hold: true of `MaybeUninit`, byte arrays and `AtomicU8`.
pub(crate) unsafe fn touch_pages<E>(cells: &mut [E]) {
    #[cfg(not(loom))]
    {
        const PAGE: usize = 4096;
        let start = cells.as_mut_ptr().cast::<u8>();
        let bytes = std::mem::size_of_val(cells);
        // One byte a page from the first, and the last byte: an array that starts inside a page
        // ends inside a page that the steps from its start would miss.
        let last = bytes.checked_sub(1);
        let steps = (0..bytes).step_by(PAGE);
        for at in steps.chain(last) {
            // SAFETY: `at < bytes`, so inside the array, to which `&mut` gives us exclusive
            // access; the byte may hold 0 (the caller's contract). Volatile: the store is the
            // point, so it must not be dropped as dead (say, into memory known to be zeroed).
            unsafe { start.add(at).write_volatile(0) };
        }
    }
    #[cfg(loom)]
    let _ = cells;
}

/// A writer's handle on an array of value cells (a segment's), addressed by log offset: the
/// array's address less its first offset, so that writing the value at an offset is one store,
/// with no mask, no bounds check and no load of the array's address. Under loom it keeps the array
/// and its first offset instead, and writes through the cell, which loom tracks.
///
/// It owns nothing: whoever holds one must hold the array alive too (a writer holds a counted
/// reference to the segment beside it). It writes only through `&mut self`, so sharing `&SlotBase`
/// between threads allows nothing.
pub(crate) struct SlotBase<T> {
    /// `cells[0]`'s address, moved back by `first` elements (with wrapping arithmetic: it may
    /// point outside the array; only `first..first + len` are ever written through it).
    #[cfg(not(loom))]
    origin: *mut T,
    #[cfg(loom)]
    cells: *const UnsafeCell<std::mem::MaybeUninit<T>>,
    #[cfg(loom)]
    first: u64,
}

// SAFETY: a `SlotBase` is only an address; the right to write through it comes from the caller's
// contract on `write` (exclusive access to an unpublished slot of a live array), which moves with
// the writer that holds it. `T: Send`: the values written through it are sent to the array.
unsafe impl<T: Send> Send for SlotBase<T> {}
// SAFETY: nothing can be done through `&SlotBase` (writes take `&mut self`).
unsafe impl<T> Sync for SlotBase<T> {}

// A copy is only the address again: writing through either still takes `write`'s contract.
impl<T> Clone for SlotBase<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for SlotBase<T> {}

impl<T> SlotBase<T> {
    /// A handle that must not be written through (a writer with no segment yet).
    pub(crate) const fn unset() -> Self {
        SlotBase {
            #[cfg(not(loom))]
            origin: std::ptr::null_mut(),
            #[cfg(loom)]
            cells: std::ptr::null(),
            #[cfg(loom)]
            first: 0,
        }
    }

    /// The handle on `cells`, whose element 0 holds offset `first`.
    pub(crate) fn new(cells: &[UnsafeCell<std::mem::MaybeUninit<T>>], first: u64) -> Self {
        #[cfg(not(loom))]
        {
            // Wrapping: `origin` keeps the array's provenance and only ever comes back inside it
            // (see `write`).
            let origin = values_ptr(cells).wrapping_sub(first as usize);
            SlotBase { origin }
        }
        #[cfg(loom)]
        SlotBase {
            cells: cells.as_ptr(),
            first,
        }
    }

    /// Moves `value` into the cell of `offset`.
    ///
    /// # Safety
    /// `offset` lies in `first..first + len` of the array this handle was made from, that array
    /// is still alive, and the caller has exclusive access to that cell, which holds no value
    /// (reserved, not yet published).
    #[inline(always)]
    pub(crate) unsafe fn write(&mut self, offset: u64, value: T) {
        #[cfg(not(loom))]
        // SAFETY: `origin + offset` is `cells[offset - first]` (the same wrapping arithmetic
        // backwards), inside the live array by the caller's contract, which also gives us the
        // exclusive access that writing through a shared cell needs.
        unsafe {
            self.origin.wrapping_add(offset as usize).write(value)
        };
        #[cfg(loom)]
        // SAFETY: as above: the cell is inside the live array, and ours alone for now.
        unsafe {
            (*self.cells.add((offset - self.first) as usize)).with_mut(|p| (*p).write(value));
        }
    }

    /// Copies `values` into the cells of `offset..offset + values.len()`, in one copy.
    ///
    /// # Safety
    /// As for [`SlotBase::write`], for each of those offsets.
    #[inline(always)]
    pub(crate) unsafe fn write_copies(&mut self, offset: u64, values: &[T])
    where
        T: Copy,
    {
        #[cfg(not(loom))]
        // SAFETY: as in `write`: `origin + offset` is the cell of `offset`, and the run's cells
        // follow it inside the live array (the caller's contract), ours alone for now; the
        // source is the caller's slice, outside the array (the array's cells are only ever
        // borrowed as `&T` once published, and these are not).
        unsafe {
            std::ptr::copy_nonoverlapping(
                values.as_ptr(),
                self.origin.wrapping_add(offset as usize),
                values.len(),
            )
        };
        #[cfg(loom)]
        for (k, value) in values.iter().enumerate() {
            // SAFETY: as above, cell by cell.
            unsafe { self.write(offset + k as u64, *value) };
        }
    }
}

/// A many-producer writer's handle on a segment's stamps (one `AtomicU8` a slot), addressed by
/// log offset, as [`SlotBase`] is on its values: the array's address less its first offset, so
/// that the stamp of an offset is one address computation, with no bounds check and no load of
/// the array's address (the lease holder's kept state, `log::KeptLease`).
///
/// It owns nothing: whoever holds one must hold the array alive too (a writer holds a counted
/// reference to the segment beside it).
#[derive(Clone, Copy)]
pub(crate) struct StampBase {
    /// `stamps[0]`'s address, moved back by the array's first offset (wrapping: it may point
    /// outside the array; only the offsets of the array's slots are ever looked up through it).
    origin: *const AtomicU8,
}

impl StampBase {
    /// A handle that must not be looked up through (no segment).
    pub(crate) const fn unset() -> Self {
        StampBase {
            origin: std::ptr::null(),
        }
    }

    /// The handle on `stamps`, whose element 0 is the stamp of offset `first`.
    pub(crate) fn new(stamps: &[AtomicU8], first: u64) -> Self {
        // Wrapping: `origin` keeps the array's provenance and only ever comes back inside it
        // (see `get`).
        StampBase {
            origin: stamps.as_ptr().wrapping_sub(first as usize),
        }
    }

    /// The stamp of `offset`.
    ///
    /// # Safety
    /// `offset` lies in `first..first + len` of the array this handle was made from, and that
    /// array outlives the returned reference.
    #[inline(always)]
    pub(crate) unsafe fn get(&self, offset: u64) -> &AtomicU8 {
        // SAFETY: `origin + offset` is `stamps[offset - first]` (the same wrapping arithmetic
        // backwards), inside the live array by the caller's contract; the stamps are atomics,
        // so a shared reference is all any access needs.
        unsafe { &*self.origin.wrapping_add(offset as usize) }
    }
}

/// The values held in `cells`, in order: outside loom a plain slice's iterator (see
/// [`values_ptr`]), whose loop keeps the array's address in a register; under loom a read through
/// each cell, which loom tracks.
///
/// # Safety
/// Every cell holds a value, and none is written or dropped while the returned borrow lasts.
#[cfg(not(loom))]
#[inline]
pub(crate) unsafe fn values_of<T>(
    cells: &[UnsafeCell<std::mem::MaybeUninit<T>>],
) -> std::slice::Iter<'_, T> {
    // SAFETY: the cells are `cells.len()` contiguous `T`s (see `values_ptr`), all initialized and
    // left unwritten while borrowed (the caller's contract).
    unsafe { std::slice::from_raw_parts(values_ptr(cells), cells.len()) }.iter()
}

/// See the non-loom `values_of`.
///
/// # Safety
/// As there.
#[cfg(loom)]
#[inline]
pub(crate) unsafe fn values_of<T>(
    cells: &[UnsafeCell<std::mem::MaybeUninit<T>>],
) -> impl ExactSizeIterator<Item = &T> {
    // SAFETY: each cell holds a value and is not written while borrowed (the caller's contract).
    cells
        .iter()
        .map(|cell| cell.with(|p| unsafe { (*p).assume_init_ref() }))
}

/// Moves `cells.len()` values from `src` into `cells`: one copy outside loom (see
/// [`values_ptr`]), cell by cell under loom, whose cells track each access.
///
/// # Safety
/// The caller has exclusive access to every cell, and `src` points to `cells.len()` initialized
/// values, outside `cells`, that it gives up: they are moved, and must not be used or dropped again.
#[inline]
pub(crate) unsafe fn move_into<T>(cells: &[UnsafeCell<std::mem::MaybeUninit<T>>], src: *const T) {
    #[cfg(not(loom))]
    {
        // SAFETY: the destination is derived from the whole slice, whose cells hold `T`s
        // contiguously (see `values_ptr`) and may be written through a shared reference (they
        // are `UnsafeCell`s) by the caller, who has exclusive access; `src` holds `cells.len()`
        // values outside them.
        unsafe { std::ptr::copy_nonoverlapping(src, values_ptr(cells), cells.len()) };
    }
    #[cfg(loom)]
    for (k, cell) in cells.iter().enumerate() {
        cell.with_mut(|p| {
            // SAFETY: exclusive access to the cell, and value `k` of `src` is moved out once.
            unsafe { (*p).write(src.add(k).read()) };
        });
    }
}

// ---------------------------------------------------------------------------------------------------
// The futex.

/// A 32-bit word that threads can sleep on until another thread changes it and wakes them.
///
/// `wait(expected)` returns at once when the word is not `expected`; otherwise it sleeps until a
/// `wake_*` call on this word (spurious returns are allowed, callers re-check). The untimed wait is
/// `atomic-wait` (futex on Linux, `WaitOnAddress` on Windows, ulock on macOS). `atomic-wait` has no
/// timeout, so [`Futex::wait_timeout`] calls the Linux futex directly with a relative timeout, and on
/// other systems sleeps in short slices (at most 1 ms) while checking the word.
///
/// Under loom the futex is modelled with a mutex and a condition variable: the value check and the
/// sleep are atomic with respect to `wake_*`, exactly like the kernel's futex, so loom finds any lost
/// wake-up the real code could suffer.
#[derive(Debug)]
pub(crate) struct Futex {
    word: AtomicU32,
    #[cfg(loom)]
    lock: loom::sync::Mutex<()>,
    #[cfg(loom)]
    cond: loom::sync::Condvar,
}

impl Futex {
    pub(crate) fn new(value: u32) -> Self {
        Futex {
            word: AtomicU32::new(value),
            #[cfg(loom)]
            lock: loom::sync::Mutex::new(()),
            #[cfg(loom)]
            cond: loom::sync::Condvar::new(),
        }
    }

    /// The word itself, for loads, stores and swaps by the caller (who documents their ordering).
    #[inline]
    pub(crate) fn word(&self) -> &AtomicU32 {
        &self.word
    }

    /// Sleeps while the word equals `expected`, until woken (or spuriously).
    pub(crate) fn wait(&self, expected: u32) {
        #[cfg(not(loom))]
        atomic_wait::wait(&self.word, expected);
        #[cfg(loom)]
        {
            let guard = lock(&self.lock);
            // SeqCst: in the model the check must be ordered with the waker's store like the kernel's
            // futex check, which happens under the futex bucket lock.
            if self.word.load(Ordering::SeqCst) == expected {
                drop(self.cond.wait(guard));
            }
        }
    }

    /// Like [`Futex::wait`], but returns after about `timeout` at the latest.
    pub(crate) fn wait_timeout(&self, expected: u32, timeout: Duration) {
        #[cfg(all(not(loom), target_os = "linux"))]
        {
            let ts = libc::timespec {
                tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
                tv_nsec: timeout.subsec_nanos() as libc::c_long,
            };
            // SAFETY: FUTEX_WAIT reads the aligned 32-bit word behind a valid reference and the
            // timespec on our stack; both outlive the call. Errors (EAGAIN, EINTR, ETIMEDOUT) are all
            // "return and let the caller re-check", so the result is ignored on purpose.
            unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    self.word.as_ptr(),
                    libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                    expected,
                    &ts as *const libc::timespec,
                );
            }
        }
        #[cfg(all(not(loom), not(target_os = "linux")))]
        {
            let deadline = std::time::Instant::now() + timeout;
            // Acquire: like a futex wake-up, seeing the new value orders what the waker did before.
            while self.word.load(Ordering::Acquire) == expected {
                let now = std::time::Instant::now();
                if now >= deadline {
                    break;
                }
                std::thread::sleep((deadline - now).min(Duration::from_millis(1)));
            }
        }
        #[cfg(loom)]
        {
            // The model treats a timed wait as one that may time out at once: every caller re-checks.
            let _ = (expected, timeout);
            yield_now();
        }
    }

    /// Wakes every thread sleeping on this word.
    pub(crate) fn wake_all(&self) {
        #[cfg(not(loom))]
        atomic_wait::wake_all(&self.word);
        #[cfg(loom)]
        {
            let _guard = lock(&self.lock);
            self.cond.notify_all();
        }
    }

    /// Wakes one thread sleeping on this word.
    pub(crate) fn wake_one(&self) {
        #[cfg(not(loom))]
        atomic_wait::wake_one(&self.word);
        #[cfg(loom)]
        {
            let _guard = lock(&self.lock);
            self.cond.notify_one();
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// The asymmetric barrier.

#[cfg(all(not(loom), target_os = "linux"))]
mod membarrier {
    use std::sync::{
        atomic::{AtomicU8, Ordering},
        Once,
    };

    use crossbeam_utils::CachePadded;

    const CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
    const CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

    /// 0: not known yet, 1: membarrier works, 2: fall back to fences.
    ///
    /// Publishes that do not know the answer read it (in `light_barrier`: timestamped topics,
    /// batches, the long path; a log without timestamps keeps the answer, see
    /// `light_barrier_is_free`), so it has a cache line to itself: the linker puts the statics
    /// of every crate in a program side by side (in the perf binary its line held parking_lot's
    /// thread count and kanal's and std's globals), and a neighbour that other threads write
    /// would cost those publishes a miss. A guard, not a measured gain: in the perf harness,
    /// whose neighbours are quiet, padded and unpadded builds run alike.
    static STATE: CachePadded<AtomicU8> = CachePadded::new(AtomicU8::new(0));
    static INIT: Once = Once::new();

    /// Registers this process for private expedited membarrier. Must run before any light barrier
    /// relies on it: `Log::new` calls it, so no publisher exists before the state is settled.
    pub(super) fn init() {
        INIT.call_once(|| {
            // SAFETY: membarrier takes no pointers; an unsupported command returns -1 (EINVAL/ENOSYS).
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_membarrier,
                    CMD_REGISTER_PRIVATE_EXPEDITED,
                    0 as libc::c_long,
                    0 as libc::c_long,
                )
            };
            // Relaxed is enough for readers of STATE on other threads: `Once` publishes it to every
            // thread that calls `init` (all log constructors), and any thread that got a log did so
            // through a happens-before edge from its construction.
            STATE.store(if rc == 0 { 1 } else { 2 }, Ordering::Relaxed);
        });
    }

    #[inline]
    pub(super) fn available() -> bool {
        // Relaxed: written once in `init`, which happens-before every use (see there).
        STATE.load(Ordering::Relaxed) == 1
    }

    #[cfg(test)]
    #[test]
    fn the_state_every_publish_reads_has_a_cache_line_to_itself() {
        // Nothing else can share the line: the static starts on a line boundary and spans it.
        assert!(std::mem::align_of_val(&STATE) >= 64);
        assert!(std::mem::size_of_val(&STATE) >= 64);
        assert_eq!(std::ptr::from_ref(&STATE).addr() % 64, 0);
    }

    pub(super) fn issue() -> bool {
        // SAFETY: as in `init`; the command needs no pointers.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_membarrier,
                CMD_PRIVATE_EXPEDITED,
                0 as libc::c_long,
                0 as libc::c_long,
            )
        };
        rc == 0
    }
}

/// Settles which barrier pair this process uses. Called before any log is shared.
pub(crate) fn init_barriers() {
    #[cfg(all(not(loom), target_os = "linux"))]
    membarrier::init();
}

/// Keeps the compiler from moving memory accesses across this point; no instruction is emitted.
/// For an order of stores that matters to speed, not to correctness: a publishing store right
/// behind the record's, with no store between (see `Log::publish_single_short`). The compiler may
/// move a plain store from after a Release store to before it, and did not, so far; this says it
/// must not.
#[inline(always)]
pub(crate) fn keep_store_order() {
    // SeqCst: a compiler-only fence, and only this one keeps later stores below earlier ones.
    std::sync::atomic::compiler_fence(Ordering::SeqCst);
}

/// The fast side of the park/wake handshake: sits between "publish" and "load the parked count".
#[inline]
pub(crate) fn light_barrier() {
    light_barrier_as(light_barrier_is_free());
}

/// Whether [`light_barrier`] costs nothing at run time in this process (the heavy side issues a
/// membarrier; the light side only stops the compiler). Settled by [`init_barriers`], after which
/// it never changes, so a log may keep the answer and spare its hottest path the global's load.
///
/// Under loom it is whatever the model chose with `loom_free_light_barrier` (`false` unless
/// it did): the logs it then makes take the short paths of a process with membarrier, which is
/// every Linux process in practice, while both sides of the barrier stay `fence(SeqCst)`.
#[inline]
pub(crate) fn light_barrier_is_free() -> bool {
    #[cfg(all(not(loom), target_os = "linux"))]
    {
        membarrier::available()
    }
    #[cfg(loom)]
    {
        LOOM_FREE_BARRIER.with(std::cell::Cell::get)
    }
    #[cfg(not(any(loom, target_os = "linux")))]
    {
        false
    }
}

/// [`light_barrier`], given what [`light_barrier_is_free`] answered after [`init_barriers`].
#[inline(always)]
pub(crate) fn light_barrier_as(free: bool) {
    // Under loom the free barrier is modelled as what membarrier makes of it: a full fence at
    // this point of the publisher's program, paired with the heavy side's (also `fence(SeqCst)`
    // there). The compiler fence alone would be a plain program point to loom, which would
    // then report the store buffering membarrier rules out.
    if free && cfg!(not(loom)) {
        // The heavy side's membarrier supplies the hardware barrier; we only stop the compiler.
        std::sync::atomic::compiler_fence(Ordering::SeqCst);
    } else {
        fence(Ordering::SeqCst);
    }
}

// Per OS thread: loom runs every modelled thread of a model on the thread that called it, and
// the test harness runs each test on its own thread, so concurrent tests do not see each other's.
#[cfg(loom)]
std::thread_local! {
    static LOOM_FREE_BARRIER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Loom only: whether the logs made from now on, on this OS thread, take the short paths of a
/// process whose light barrier is free (see [`light_barrier_is_free`]). Without it a model
/// reaches only [`Path::Other`](crate::log::Path), the paths of a process without membarrier.
#[cfg(loom)]
pub(crate) fn loom_free_light_barrier(free: bool) {
    LOOM_FREE_BARRIER.with(|f| f.set(free));
}

/// The rare side of the park/wake handshake: sits between "announce I park" and "re-check".
pub(crate) fn heavy_barrier() {
    #[cfg(all(not(loom), target_os = "linux"))]
    {
        if membarrier::available() && membarrier::issue() {
            return;
        }
        // `available()` said yes but the call failed: impossible after a successful registration.
        // A fence still keeps this side correct; the light side was already a compiler fence only,
        // so debug builds flag it.
        debug_assert!(
            !membarrier::available(),
            "membarrier failed after registration"
        );
    }
    fence(Ordering::SeqCst);
}

// ---------------------------------------------------------------------------------------------------
// Epoch-based reclamation.

/// Pins threads for crossbeam-epoch. Outside loom it is the process-wide default collector (pinning
/// through a thread-local handle costs a few nanoseconds); under loom each log owns a `Collector` so
/// every model iteration starts clean, and each modelled thread keeps one handle on it, registered
/// at its first pin, as a thread's handle on the default collector stays registered.
///
/// Why one handle a thread under loom, not one a pin: crossbeam-epoch inserts a registered handle
/// into its list of participants with a compare-exchange on the list's head, which compares
/// addresses, and loom may hand that insert a stale head. The exchange then succeeds only where
/// the current head was allocated at the address of the freed participant the stale value names,
/// which depends on the allocator's state, not on loom's choices: a replay of the same choices
/// took the other branch, and loom stopped with "Reached unexpected exploration state. Is the
/// model fully deterministic?" (stop 80 found it by recording the call stack at every loom branch
/// and comparing it on replay: a register retried the exchange, its replay did not). Registering
/// at every pin made that likely in models that pin often, such as a reader that looks up the
/// next segment at every look (`blocked_publisher_and_parked_reader_wake_each_other`, stop 79).
/// With one registration a thread, no participant is freed while the log lives; each pin still
/// flushes (see `Epoch::pin`), so reclamation runs between the models' steps as it did.
pub(crate) struct Epoch {
    /// Declared before the collector, so dropped first: each handle leaves the list, and the
    /// collector's last reference then runs what is left.
    #[cfg(loom)]
    handles: std::sync::Mutex<Vec<(loom::thread::ThreadId, Box<LoomHandle>)>>,
    #[cfg(loom)]
    collector: crossbeam_epoch::Collector,
}

/// A modelled thread's handle on a log's collector (see [`Epoch`]).
#[cfg(loom)]
struct LoomHandle(crossbeam_epoch::LocalHandle);

// SAFETY: loom runs every modelled thread of a model on one OS thread, and only the modelled
// thread that registered a handle pins through it (`Epoch::pin` looks it up by that thread's id);
// the others never touch it, and the `Epoch`'s drop, which unregisters them all, runs when no
// thread can pin through its log any more (and none holds a guard: guards end in the scope that
// pinned).
#[cfg(loom)]
unsafe impl Send for LoomHandle {}

impl Epoch {
    pub(crate) fn new() -> Self {
        Epoch {
            #[cfg(loom)]
            handles: std::sync::Mutex::new(Vec::new()),
            #[cfg(loom)]
            collector: crossbeam_epoch::Collector::new(),
        }
    }

    /// Pins the current thread. Never hold the guard across a park.
    #[inline]
    pub(crate) fn pin(&self) -> Guard {
        #[cfg(not(loom))]
        return crossbeam_epoch::pin();
        #[cfg(loom)]
        {
            // Std's lock, held over no step of the model: registering and pinning are loom's
            // steps, at which loom may run another modelled thread, which may pin too (on this
            // same OS thread). So the look-up and the push each take it for their statement only.
            let me = loom::thread::current().id();
            let known = unpoisoned(self.handles.lock())
                .iter()
                .find(|(id, _)| *id == me)
                .map(|(_, h)| std::ptr::from_ref::<LoomHandle>(h));
            let handle = known.unwrap_or_else(|| {
                let registered = Box::new(LoomHandle(self.collector.register()));
                let h = std::ptr::from_ref::<LoomHandle>(&registered);
                unpoisoned(self.handles.lock()).push((me, registered));
                h
            });
            // SAFETY: the box is never dropped or moved out of before `self` is (entries are only
            // pushed), so the handle lives while `&self` does; and only this modelled thread uses it.
            let guard = unsafe { (*handle).0.pin() };
            // Hand this thread's deferred releases over and try to advance the epoch at every pin,
            // as the registration a pin used to make did (a new participant's first pin collects,
            // and its unregistering hands its deferred releases over): reclamation then runs as
            // early as the epoch allows, in between the model's other steps. Outside loom the
            // collector does that every 128 pins of a thread, and at a trim's flush.
            guard.flush();
            return guard;
        }
    }
}

impl std::fmt::Debug for Epoch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Epoch")
    }
}

// ---------------------------------------------------------------------------------------------------
// Waiting threads by CPU.

/// How many slots [`WaitersByCpu`] has: CPUs share a slot modulo this many, which can only make
/// a thread think it shares its CPU when it does not (it then yields as if it did).
pub(crate) const CPU_SLOTS: usize = 64;

/// A slot in [`WaitersByCpu`]: the CPU a waiting thread was last seen on, modulo [`CPU_SLOTS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CpuSlot(u8);

impl CpuSlot {
    /// CPU `cpu`'s slot.
    pub(crate) fn new(cpu: usize) -> Self {
        CpuSlot((cpu % CPU_SLOTS) as u8)
    }
}

/// How many threads that wait for records were last seen on each CPU, so that a reader that keeps
/// catching up with a sparse stream can tell whether another such thread may want its core (see
/// `wait::pause_after` and `wait::round_end`). A heuristic: a thread is counted where it last
/// looked, until it looks from elsewhere or its reader is dropped, parked or not. A publisher
/// blocked for room is counted too, only while it polls and yields. Each holds its count in a
/// [`CountedWait`].
///
/// # Orderings
/// Every operation is `Relaxed` (`Ordering` is std's under loom too): no data is published
/// through these counts. A count read stale by a few nanoseconds makes one pause, or one round of
/// the yielding phase, end in a yield or not, and the next one reads it again.
pub(crate) struct WaitersByCpu {
    /// Std's atomics even under loom: a static cannot hold loom's, and a heuristic count has
    /// nothing for loom to check (under loom nobody is counted: [`current_cpu`] is `None`).
    counts: [CachePadded<std::sync::atomic::AtomicU32>; CPU_SLOTS],
}

/// The process's count (a test may make its own).
pub(crate) static WAITERS_BY_CPU: WaitersByCpu = WaitersByCpu::new();

impl WaitersByCpu {
    pub(crate) const fn new() -> Self {
        WaitersByCpu {
            counts: [const { CachePadded::new(std::sync::atomic::AtomicU32::new(0)) }; CPU_SLOTS],
        }
    }

    /// Counts the calling thread on the CPU it runs on now, moving it there from `seen` if it was
    /// counted elsewhere, and says whether it is the only waiting thread counted on that CPU.
    /// `false` where the CPU cannot be told (then `seen` is left as it is).
    pub(crate) fn settle(&self, seen: &mut Option<CpuSlot>) -> bool {
        let Some(cpu) = current_cpu() else {
            return false;
        };
        self.settle_on(CpuSlot::new(cpu), seen)
    }

    /// Counts the calling thread as [`WaitersByCpu::settle`] does, and says whether another
    /// waiting thread is counted on its CPU: `false` where the CPU cannot be told.
    pub(crate) fn shares(&self, seen: &mut Option<CpuSlot>) -> bool {
        current_cpu().is_some_and(|cpu| !self.settle_on(CpuSlot::new(cpu), seen))
    }

    /// Counts the calling thread as [`WaitersByCpu::settle`] does and says how many waiting
    /// threads its CPU counts, itself included: `None` where the CPU cannot be told.
    pub(crate) fn settle_counting(&self, seen: &mut Option<CpuSlot>) -> Option<u32> {
        current_cpu().map(|cpu| self.count_on(CpuSlot::new(cpu), seen))
    }

    /// [`WaitersByCpu::settle`] on a known slot.
    pub(crate) fn settle_on(&self, slot: CpuSlot, seen: &mut Option<CpuSlot>) -> bool {
        self.count_on(slot, seen) == 1
    }

    /// Counts the calling thread on `slot` (moving it there from `seen`) and returns how many
    /// waiting threads `slot` counts, itself included.
    pub(crate) fn count_on(&self, slot: CpuSlot, seen: &mut Option<CpuSlot>) -> u32 {
        let count = &self.counts[usize::from(slot.0)];
        if *seen != Some(slot) {
            self.leave(seen);
            // Relaxed: see Orderings.
            count.fetch_add(1, Ordering::Relaxed);
            *seen = Some(slot);
        }
        // Relaxed: see Orderings.
        count.load(Ordering::Relaxed)
    }

    /// How many waiting threads `slot` counts.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn count(&self, slot: CpuSlot) -> u32 {
        // Relaxed: see Orderings.
        self.counts[usize::from(slot.0)].load(Ordering::Relaxed)
    }

    /// Stops counting a thread last seen on `seen`, if it was counted.
    pub(crate) fn leave(&self, seen: &mut Option<CpuSlot>) {
        if let Some(old) = seen.take() {
            // Relaxed: see Orderings.
            self.counts[usize::from(old.0)].fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Which [`WaitersByCpu`] a [`CountedWait`] counts in: the process's ([`ProcessCount`], which
/// takes no room in a `Reader`), or a test's own.
pub(crate) trait Counts {
    fn counts(&self) -> &WaitersByCpu;
}

/// The process's count, [`WAITERS_BY_CPU`].
pub(crate) struct ProcessCount;

impl Counts for ProcessCount {
    fn counts(&self) -> &WaitersByCpu {
        &WAITERS_BY_CPU
    }
}

impl Counts for &WaitersByCpu {
    fn counts(&self) -> &WaitersByCpu {
        self
    }
}

/// A thread's count in a [`WaitersByCpu`], given up when this is dropped. A reader keeps one
/// from one wait to the next (`Reader::waits_on`); a publisher blocked for room holds one while
/// it polls and yields, and leaves it before it parks.
pub(crate) struct CountedWait<C: Counts = ProcessCount> {
    counts: C,
    seen: Option<CpuSlot>,
}

impl<C: Counts> CountedWait<C> {
    /// Not counted yet.
    pub(crate) const fn new(counts: C) -> Self {
        CountedWait { counts, seen: None }
    }

    /// Counts the calling thread on the CPU it runs on now and says whether it is alone there
    /// ([`WaitersByCpu::settle`]).
    pub(crate) fn settle(&mut self) -> bool {
        self.counts.counts().settle(&mut self.seen)
    }

    /// Counts the calling thread on the CPU it runs on now and says how many waiting threads
    /// are counted there, itself included ([`WaitersByCpu::settle_counting`]).
    pub(crate) fn settle_counting(&mut self) -> Option<u32> {
        self.counts.counts().settle_counting(&mut self.seen)
    }

    /// Counts the calling thread on the CPU it runs on now and says whether another waiting
    /// thread is counted there ([`WaitersByCpu::shares`]).
    pub(crate) fn shares(&mut self) -> bool {
        self.counts.counts().shares(&mut self.seen)
    }

    /// Stops counting the thread (one about to park leaves its CPU to the others).
    pub(crate) fn leave(&mut self) {
        self.counts.counts().leave(&mut self.seen);
    }

    /// Whether the thread is counted somewhere.
    pub(crate) fn is_counted(&self) -> bool {
        self.seen.is_some()
    }

    /// Where the thread is counted.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn slot(&self) -> Option<CpuSlot> {
        self.seen
    }

    /// [`CountedWait::settle`] on a known slot.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn settle_on(&mut self, slot: CpuSlot) -> bool {
        self.counts.counts().settle_on(slot, &mut self.seen)
    }
}

impl<C: Counts> Drop for CountedWait<C> {
    fn drop(&mut self) {
        self.leave();
    }
}

/// The CPU the calling thread runs on, where the system says (glibc reads it from the thread's
/// `rseq` area: a few nanoseconds). Under loom, none: readers then always pause as if they shared
/// their CPU, the behaviour the models check.
fn current_cpu() -> Option<usize> {
    #[cfg(all(not(loom), target_os = "linux"))]
    {
        // SAFETY: `sched_getcpu` takes no arguments and touches no memory of ours.
        let cpu = unsafe { libc::sched_getcpu() };
        usize::try_from(cpu).ok()
    }
    #[cfg(not(all(not(loom), target_os = "linux")))]
    {
        None
    }
}
