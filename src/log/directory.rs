//! The directory: segment index to segment, in O(1), for every retained segment.
//!
//! A ring of pointers indexed by `segment index & mask`. Live segments always fit: before an install
//! would wrap onto a live entry the ring doubles (a new table, entries copied, the old table retired
//! through the epoch). Only the log's admin lock holder installs, grows or removes; readers and
//! producers look up lock-free while pinned.
//!
//! # Orderings
//! - `table`: stored with Release after the new table's entries are filled, loaded with Acquire, so a
//!   reader of the new table sees its entries.
//! - entries: stored with Release when a segment is installed (publishing its `base` and its initial
//!   reference) and loaded with Acquire by lookups. Removal stores null with Release; the removed
//!   segment's directory reference is released through the epoch, never at once.
//! - Loads and stores by the admin lock holder of entries it alone writes may be Relaxed.

use crate::{
    log::segment::Segment,
    sync::{Atomic, AtomicPtr, Guard, Ordering, Owned, Shared},
};

struct Table<T> {
    entries: Box<[AtomicPtr<Segment<T>>]>,
}

impl<T> Table<T> {
    fn with_capacity(cap: usize) -> Self {
        debug_assert!(cap.is_power_of_two());
        Table {
            entries: (0..cap)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
        }
    }

    #[inline]
    fn entry(&self, index: u64) -> &AtomicPtr<Segment<T>> {
        // The cast keeps the low bits, which is all the mask looks at.
        &self.entries[(index as usize) & (self.entries.len() - 1)]
    }
}

pub(crate) struct Directory<T> {
    table: Atomic<Table<T>>,
    shift: u32,
}

impl<T> Directory<T> {
    pub(crate) fn new(shift: u32) -> Self {
        Directory {
            table: Atomic::new(Table::with_capacity(8)),
            shift,
        }
    }

    /// The segment with index `index`, if it is installed and not removed.
    #[inline]
    pub(crate) fn get<'g>(&self, index: u64, guard: &'g Guard) -> Option<&'g Segment<T>> {
        // Acquire: see the module's Orderings.
        let table = self.table.load(Ordering::Acquire, guard);
        // SAFETY: the table is never null and is retired only through the epoch; we are pinned.
        let table = unsafe { table.deref() };
        // Acquire: pairs with the Release store in `install`.
        let ptr = table.entry(index).load(Ordering::Acquire);
        if ptr.is_null() {
            return None;
        }
        // SAFETY: a non-null entry is a live segment: its directory reference is released only through
        // the epoch after removal, and we are pinned.
        let seg = unsafe { &*ptr };
        (seg.base() >> self.shift == index).then_some(seg)
    }

    /// Installs `seg` as segment `index`. `oldest` is the index of the oldest live segment.
    /// Caller holds the admin lock.
    pub(crate) fn install(&self, index: u64, oldest: u64, seg: *mut Segment<T>, guard: &Guard) {
        debug_assert!(index >= oldest);
        // Relaxed: only the admin lock holder stores the table.
        let mut table_ptr = self.table.load(Ordering::Relaxed, guard);
        // SAFETY: never null; the admin lock holder is the only one that retires tables.
        let mut table = unsafe { table_ptr.deref() };
        let live = index - oldest + 1;
        if live > table.entries.len() as u64 {
            let mut cap = table.entries.len();
            while (cap as u64) < live {
                cap *= 2;
            }
            let bigger = Table::with_capacity(cap);
            for i in oldest..index {
                // Relaxed: entries are written only under the admin lock we hold.
                let p = table.entry(i).load(Ordering::Relaxed);
                bigger.entry(i).store(p, Ordering::Relaxed);
            }
            // Release: publishes the copied entries with the table (see Orderings).
            let old = self
                .table
                .swap(Owned::new(bigger), Ordering::Release, guard);
            // SAFETY: `old` is unlinked; pinned lookups may still read it, so it is destroyed only
            // after every current pin ends.
            unsafe { guard.defer_destroy(old) };
            table_ptr = self.table.load(Ordering::Relaxed, guard);
            // SAFETY: just stored, non-null.
            table = unsafe { table_ptr.deref() };
        }
        // Release: publishes the segment's base and reference count (see Orderings).
        table.entry(index).store(seg, Ordering::Release);
    }

    /// Unlinks segment `index` and returns it (null if absent). Caller holds the admin lock and
    /// must release the directory's reference through the epoch.
    pub(crate) fn remove(&self, index: u64, guard: &Guard) -> *mut Segment<T> {
        // Relaxed: only the admin lock holder stores the table.
        let table = self.table.load(Ordering::Relaxed, guard);
        // SAFETY: never null; retired only by the admin lock holder (us).
        let table = unsafe { table.deref() };
        // Release: the null is ordered after everything we did to the log before trimming.
        table
            .entry(index)
            .swap(std::ptr::null_mut(), Ordering::AcqRel)
    }
}

impl<T> Drop for Directory<T> {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no lookups are running, and the log released every segment first.
        unsafe {
            let guard = crate::sync::unprotected();
            let table = self.table.load(Ordering::Relaxed, guard);
            if table != Shared::null() {
                drop(table.into_owned());
            }
        }
    }
}
