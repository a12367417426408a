//! The directory: segment index to segment, in O(1), for every retained segment.
//!
//! A ring of pointers indexed by `segment index & mask`. Live segments always fit: before an install
//! would wrap onto a live entry the ring doubles (a new table, entries copied). The new table keeps
//! the one it replaced, which is freed with the directory, never before: tables only double, so
//! the old ones together are smaller than the current one, and a lookup never needs a pin for the
//! table it reads. Only the log's admin lock holder installs, grows or removes; readers and
//! producers look up lock-free, pinned where a segment may be removed under them
//! ([`Directory::get`]), unpinned where none ever is ([`Directory::get_kept`]).
//!
//! # Orderings
//! - `table`: stored with Release after the new table's entries are filled, loaded with Acquire, so a
//!   reader of the new table sees its entries. A load may still return the table it replaced: that
//!   one holds every entry installed before the swap, and a lookup of segment `i` comes after the
//!   install of `i` it needs (the Acquire load of `installed`, or the publisher's own
//!   `Log::prepare`), which was after any swap that install needed, so whichever table it loads
//!   holds `i`. Entries removed after a swap stay set in the table it replaced; a lookup that loads
//!   that table long after is pinned ([`Directory::get`]: the epoch delays the segment's release
//!   past its pin, and a pin taken after the release sees the newer table), or its log removes
//!   nothing ([`Directory::get_kept`]).
//! - entries: stored with Release when a segment is installed (publishing its `base` and its initial
//!   reference) and loaded with Acquire by lookups. Removal stores null with Release; the removed
//!   segment's directory reference is released through the epoch, never at once.
//! - Loads and stores by the admin lock holder of entries it alone writes may be Relaxed. Its
//!   loads of what only it stores (the table pointer, entries) are `OwnValue::own_value`, so that
//!   loom's scheduler tries the lookups' loads of the same words on both sides of its stores.

use crate::{
    log::segment::Segment,
    sync::{AtomicPtr, Guard, Ordering, OwnValue},
};

struct Table<T> {
    entries: Box<[AtomicPtr<Segment<T>>]>,
    /// The table this one replaced (null for the first), owned: freed with this one, so that a
    /// lookup that loaded it before the swap may still read it.
    replaced: *mut Table<T>,
}

// SAFETY: a table is its entries (atomic pointers, `Send` and `Sync` whatever `T` is) and the
// table it replaced, which it owns outright and only frees in `drop`: it shares nothing a plain
// `Box<Table<T>>` would not.
unsafe impl<T> Send for Table<T> {}
// SAFETY: as above; `&Table` gives only atomic loads and stores of its entries.
unsafe impl<T> Sync for Table<T> {}

impl<T> Table<T> {
    fn with_capacity(cap: usize) -> Self {
        debug_assert!(cap.is_power_of_two());
        Table {
            entries: (0..cap)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
            replaced: std::ptr::null_mut(),
        }
    }

    #[inline]
    fn entry(&self, index: u64) -> &AtomicPtr<Segment<T>> {
        // The cast keeps the low bits, which is all the mask looks at.
        &self.entries[(index as usize) & (self.entries.len() - 1)]
    }
}

pub(crate) struct Directory<T> {
    /// The current table, made by `Box::into_raw`; never null.
    table: AtomicPtr<Table<T>>,
    shift: u32,
}

/// Entries of a directory's first table. Under loom, two: a log installs its first two segments
/// when it is made, so a model's third segment already doubles the ring.
const FIRST_TABLE: usize = if cfg!(loom) { 2 } else { 8 };

impl<T> Directory<T> {
    pub(crate) fn new(shift: u32) -> Self {
        Directory {
            table: AtomicPtr::new(Box::into_raw(Box::new(Table::with_capacity(FIRST_TABLE)))),
            shift,
        }
    }

    /// The current table, for a lookup. Valid as long as `&self`: a table is freed only with the
    /// directory (each keeps the one it replaced), so a lookup needs no pin for it.
    #[inline]
    fn table(&self) -> &Table<T> {
        // Acquire: see the module's Orderings.
        let table = self.table.load(Ordering::Acquire);
        // SAFETY: never null, and valid while `&self` is (above).
        unsafe { &*table }
    }

    /// The current table, for the admin lock holder, which alone stores the pointer.
    #[inline]
    fn held(&self) -> *mut Table<T> {
        self.table.own_value()
    }

    /// The segment with index `index`, if its entry holds it.
    ///
    /// # Safety
    /// A segment found stays alive for `'a`: the caller is pinned for `'a` (a removed segment's
    /// directory reference is released only through the epoch), or no segment of this directory
    /// is removed during `'a`.
    #[inline]
    unsafe fn find<'a>(&self, index: u64) -> Option<&'a Segment<T>> {
        // Acquire: pairs with the Release store in `install`.
        let ptr = self.table().entry(index).load(Ordering::Acquire);
        if ptr.is_null() {
            return None;
        }
        // SAFETY: a non-null entry is a segment the directory holds or held, alive for `'a` by
        // the caller's contract.
        let seg = unsafe { &*ptr };
        (seg.base() >> self.shift == index).then_some(seg)
    }

    /// The segment with index `index`, if it is installed and not removed.
    #[inline]
    pub(crate) fn get<'g>(&self, index: u64, _pinned: &'g Guard) -> Option<&'g Segment<T>> {
        // SAFETY: we are pinned for `'g`.
        unsafe { self.find(index) }
    }

    /// [`Directory::get`] without a pin, for a log that never removes a segment while it lives
    /// (one without retention).
    ///
    /// # Safety
    /// No segment of this directory is removed while the returned reference is used: only
    /// dropping the log removes them then, and it needs the log to itself. A lookup of `index`
    /// must also come after the install of segment `index` that it needs (`Log::prepare` by the
    /// same thread, or the Acquire load of `installed` that saw it), so that whichever table it
    /// reads, old or current, holds the entry.
    #[inline]
    pub(crate) unsafe fn get_kept(&self, index: u64) -> Option<&Segment<T>> {
        // SAFETY: the caller's contract: no segment is removed while the reference is used.
        unsafe { self.find(index) }
    }

    /// Installs `seg` as segment `index`. `oldest` is the index of the oldest live segment.
    /// Caller holds the admin lock.
    pub(crate) fn install(&self, index: u64, oldest: u64, seg: *mut Segment<T>) {
        debug_assert!(index >= oldest);
        let current = self.held();
        // SAFETY: never null, and valid while `&self` is (see `table`).
        let mut table = unsafe { &*current };
        let live = index - oldest + 1;
        if live > table.entries.len() as u64 {
            let mut cap = table.entries.len();
            while (cap as u64) < live {
                cap *= 2;
            }
            let mut bigger = Table::with_capacity(cap);
            for i in oldest..index {
                // Entries are written only under the admin lock we hold. Relaxed: the table is
                // published below.
                bigger
                    .entry(i)
                    .store(table.entry(i).own_value(), Ordering::Relaxed);
            }
            // The new table owns the old one from here on (see `Table::replaced`), through the
            // pointer the directory held, which `Table::drop` frees it by (not one made from the
            // shared reference `table`, which grants no right to free).
            bigger.replaced = current;
            let bigger = Box::into_raw(Box::new(bigger));
            // Release: publishes the copied entries with the table (see Orderings).
            self.table.store(bigger, Ordering::Release);
            // SAFETY: just made, and valid while `&self` is (see `table`).
            table = unsafe { &*bigger };
        }
        // Release: publishes the segment's base and reference count (see Orderings).
        table.entry(index).store(seg, Ordering::Release);
    }

    /// Unlinks segment `index` and returns it (null if absent). Caller holds the admin lock and
    /// must release the directory's reference through the epoch.
    pub(crate) fn remove(&self, index: u64) -> *mut Segment<T> {
        // Release: the null is ordered after everything we did to the log before trimming. The
        // Acquire half is more than needed (the admin lock already orders us after the install
        // that stored the entry); a cold path, left as it was.
        // SAFETY: never null, and valid while `&self` is (see `table`).
        unsafe { &*self.held() }
            .entry(index)
            .swap(std::ptr::null_mut(), Ordering::AcqRel)
    }
}

impl<T> Drop for Table<T> {
    fn drop(&mut self) {
        let mut replaced = self.replaced;
        // A loop, not a recursive drop: a directory that doubled many times frees a long chain.
        while !replaced.is_null() {
            // SAFETY: `replaced` is a table made by `Box::into_raw` and unlinked from the
            // directory, owned by this chain alone (set once, under the admin lock, when its
            // successor was made) and so by its newest member, which is being dropped: no lookup
            // is left.
            let mut table = unsafe { Box::from_raw(replaced) };
            replaced = std::mem::replace(&mut table.replaced, std::ptr::null_mut());
        }
    }
}

impl<T> Drop for Directory<T> {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no lookups are running, and the log released every segment
        // first. The table was made by `Box::into_raw` and only the directory holds it.
        drop(unsafe { Box::from_raw(self.held()) });
    }
}
