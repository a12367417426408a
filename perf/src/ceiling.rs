//! The `ceiling` scenario's contenders: minimal single-producer rings, written only to bound what a
//! design like logbus's can reach on the machine at hand, 1→1 beside logbus and the Disruptor.
//!
//! Each is the least a watermark ring does: the producer writes a slot and stores the published
//! end; the reader loads the end, reads what is new, and stores how far it has read (the
//! producer's room). They differ in the three things the scenario asks about:
//!
//! - **Where the producer keeps its state between records.** `one call a record` publishes
//!   through `send(&mut self)`, one call per record, as a library's `publish` is called. After
//!   each publish it looks at a word where readers would say they sleep, behind a compiler fence,
//!   as any ring whose readers can park must (logbus's publish does the same). That fence, and the
//!   slot write through a pointer the compiler cannot tell from the sender's own fields, make it
//!   store and reload its position and the ring's shape every record, wherever the sender's address
//!   is known outside the loop (a field of the thread's closure, as the harness's senders were
//!   until stop 43, or any sender whose address some call is handed). `run in one loop` publishes a
//!   whole run inside one call, with the same fence and look, its position and the ring's shape in
//!   registers. Since stop 43 the throughput runs move each sender into a local of its thread,
//!   where the compiler can keep a call-per-record loop's state in registers too, if nothing but
//!   inlined code sees the sender's address. Logbus's `Producer` on a ring-like topic is built for
//!   that (its `fast` in `src/topic.rs`). This ring's sender got only part of it: in its one-call
//!   loop the position stays in a register, but is still stored to the sender every record, and the
//!   ring's address, shape and room are reloaded from memory every record (the machine code of stop
//!   43's harness), so its one-call rows still run about what a call-per-record producer kept in
//!   memory runs (stop 43's run: 398 M/s, against 416 in stop 42's). `run in one loop, storing its
//!   position` is the one-loop ring with one store added per record, of its position to the sender,
//!   after the published end: the one measure of what that store costs.
//! - **How many stores a record takes** (since stop 53). `end stored every 8th record` is the
//!   one-loop ring publishing its end only after every eighth record and at the run's end: one
//!   store a record and an eighth, where every other ring (and logbus, and the Disruptor) stores
//!   two, the value and the end, so that each record is visible when its publish returns. `storing
//!   its position, end every 8th` adds back one store a record, of its position to the sender's
//!   own line, which no reader loads. Together they say whether a single-record stream is bound
//!   by the stores themselves or by the line the reader polls: on the 2-vCPU EPYC guest the
//!   first ran 2.7–3.3× the one-loop ring and the second as fast as that ring (0.98–1.01×), so it
//!   is the stores (see `perf/README.md`).
//! - **What the reader does once it has caught up.** `spinning` looks again at once (after a spin
//!   hint); `pausing` yields for 32 ns per record of the run it just took, up to 16 µs, as
//!   logbus's readers do (`wait.rs`), so that readers sharing a core take turns. Either reads a
//!   run of at most 4096 records as slices of the array, as a logbus batch is read.
//!
//! In the read-limit table (since stop 72) the one-loop ring with a pausing reader also runs the
//! `batch` scenario: each batch of 256 goes in as one copy with one store of the end
//! (`MinimalTx::send_batch`), and the reader hands each run to the check whole, as logbus's
//! batch readers do there: what batches reach on the machine at hand when nothing but the copy
//! and the reading is done.
//!
//! None of them is a peer: they have no retention, no parking, no fan-out, no safety checks a
//! caller could rely on. They are here so that "at most X" has a figure measured in the same run.

use std::{
    cell::UnsafeCell,
    sync::{
        atomic::{compiler_fence, AtomicU64, Ordering},
        mpsc, Arc,
    },
    thread,
    time::{Duration, Instant},
};

use logbus::{Reader, Start, Topic};

use crate::{
    held, logbus_ring, order_sink, read_logbus, spawn_each, Bus, Pins, Run, Sink, Tx, CAPACITY,
};

/// A word on a cache line pair of its own (the CPU's adjacent-line prefetcher works on pairs).
#[repr(align(128))]
struct Line(AtomicU64);

/// How many times its capacity in slots a minimal ring cycles through: 4 MiB of `u64`s at the
/// harness's capacity, at least the memory logbus's ring-like topic cycles through (six segments of
/// its capacity since stop 71). A producer rewriting a line the reader still holds from the last
/// lap waits for its invalidation, and a ring that fits the readers' private caches pays that for
/// every line: these rings bounded nothing once logbus's cycle outgrew those caches (see
/// `RING_SEGMENT_BYTES` in `src/config.rs`).
const CYCLE: u64 = 8;

/// The ring both threads share.
struct Ring {
    slots: Box<[UnsafeCell<u64>]>,
    mask: u64,
    /// How far ahead of the reader the producer may write: the capacity.
    capacity: u64,
    /// One past the newest published slot.
    published: Line,
    /// How far the reader has read (the producer may write up to this plus the capacity).
    read: Line,
    /// Readers asleep (never set here: the minimal reader never parks, but a publish must look).
    asleep: Line,
}

// SAFETY: a slot is written only by the producer while it is at or past `published` (so no reader
// reads it), and read only by the reader while it is below `published` and at or past `read` (so
// the producer does not write it); both words are published with Release and read with Acquire.
unsafe impl Sync for Ring {}

/// Writes slot `at & mask` of `slots`: the producer's next position, which has room.
#[inline(always)]
fn write(slots: &[UnsafeCell<u64>], mask: u64, at: u64, v: u64) {
    // SAFETY: see `Ring`'s `Sync`: `at` is not published yet, and it has room, so the reader is
    // past the slot's previous lap.
    unsafe { *slots[(at & mask) as usize].get() = v };
}

impl Ring {
    /// The slots of positions `from..to` (published, not yet marked read, at most the capacity):
    /// the run up to the end of the array, then the rest from its start.
    fn run(&self, from: u64, to: u64) -> (&[UnsafeCell<u64>], &[UnsafeCell<u64>]) {
        let (start, len) = ((from & self.mask) as usize, (to - from) as usize);
        let first = len.min(self.slots.len() - start);
        (
            &self.slots[start..start + first],
            &self.slots[..len - first],
        )
    }

    /// Waits until slot `at` has room, returns the new room end.
    #[cold]
    #[inline(never)]
    fn wait_for_room(&self, at: u64) -> u64 {
        loop {
            // Acquire: the reader's reads of the slots below come before our writes to them.
            let room = self.read.0.load(Ordering::Acquire) + self.capacity;
            if at < room {
                return room;
            }
            std::hint::spin_loop();
        }
    }

    /// Would wake sleeping readers (none ever sleep here).
    #[cold]
    #[inline(never)]
    fn wake(&self) {
        unreachable!("the minimal reader never sleeps");
    }

    /// Publishes `end` and looks for sleeping readers.
    #[inline(always)]
    fn publish(&self, end: u64) {
        // Release: the slots below `end` are written before a reader can see `end`.
        self.published.0.store(end, Ordering::Release);
        // Between the store and the look, as a park/wake handshake needs (logbus's light barrier).
        compiler_fence(Ordering::SeqCst);
        // Relaxed: nothing is read through it (only a sleeping reader would set it).
        if self.asleep.0.load(Ordering::Relaxed) != 0 {
            self.wake();
        }
    }
}

/// A minimal ring: `LOOP` publishes a run inside one call (else one call a record), `PAUSE`
/// makes the reader pause after catching up (else it spins), `KEEP` makes the loop store its
/// position in the sender after every record (only with `LOOP`: one call a record does anyway),
/// `EVERY` makes the loop store the published end only after every `EVERY`-th record and at the
/// run's end (only with `LOOP`; see the module docs).
pub(crate) struct Minimal<
    const LOOP: bool,
    const PAUSE: bool,
    const KEEP: bool = false,
    const EVERY: u64 = 1,
>(pub(crate) &'static str);

pub(crate) struct MinimalTx<const LOOP: bool, const KEEP: bool, const EVERY: u64> {
    ring: Arc<Ring>,
    /// The next position to publish.
    next: u64,
    /// Positions below it have room.
    room: u64,
}

impl<const LOOP: bool, const KEEP: bool, const EVERY: u64> Tx for MinimalTx<LOOP, KEEP, EVERY> {
    #[inline(always)]
    fn send(&mut self, v: u64) {
        if self.next >= self.room {
            self.room = self.ring.wait_for_room(self.next);
        }
        write(&self.ring.slots, self.ring.mask, self.next, v);
        // The published end right behind the slot, the position after it, as logbus stores them
        // (see `Log::publish_single_short`: a store between the two delays the end's). The
        // compiler already emitted this order when the position was stored first in the source
        // (it sank that store); written so, the order no longer rests on that.
        let end = self.next + 1;
        self.ring.publish(end);
        self.next = end;
    }

    #[inline]
    fn send_run(&mut self, p: u64, n: u64) {
        if !LOOP {
            for v in crate::tagged_run(p, 0, n) {
                self.send(v);
            }
            return;
        }
        // The same publish, with the position, the room and the ring's shape in locals the
        // compiler keeps in registers: the fence in `publish` orders memory, and these never are.
        let (ring, mut next, mut room) = (&*self.ring, self.next, self.room);
        let (slots, mask) = (&*ring.slots, ring.mask);
        for v in crate::tagged_run(p, 0, n) {
            if next >= room {
                room = ring.wait_for_room(next);
            }
            write(slots, mask, next, v);
            next += 1;
            if next.is_multiple_of(EVERY) {
                ring.publish(next);
            }
            if KEEP {
                // The one thing the one-call loops do every record that this loop does not: a
                // store of the position to a line of the sender's own, after the published end,
                // as logbus's writer stores its next offset. Volatile, so that the compiler keeps
                // it in the loop (it would sink it out as a dead store).
                // SAFETY: a plain field of `self`, which we borrow mutably.
                unsafe { std::ptr::write_volatile(&mut self.next, next) };
            }
        }
        if !next.is_multiple_of(EVERY) {
            ring.publish(next); // the run's last records (never with `EVERY` 1)
        }
        (self.next, self.room) = (next, room);
    }

    /// Publishes `vs` as one run (a run of at most the capacity at a time): room for all of it,
    /// one copy into the slots (two where it wraps), one store of the published end, as logbus's
    /// `publish_slice` does. The `batch` scenario's minimal ring (the `ceiling` scenario's
    /// read-limit table).
    fn send_batch(&mut self, vs: &[u64]) {
        let ring = &*self.ring;
        for chunk in vs.chunks(ring.capacity as usize) {
            let end = self.next + chunk.len() as u64;
            if end > self.room {
                self.room = ring.wait_for_room(end - 1);
            }
            let (a, b) = ring.run(self.next, end);
            let (to_a, to_b) = chunk.split_at(a.len());
            for (slots, from) in [(a, to_a), (b, to_b)] {
                // SAFETY: as in `write`, for every slot of the run (not published yet, with room);
                // `UnsafeCell<u64>` has the layout of `u64`, and `from` holds `slots.len()` values.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        from.as_ptr(),
                        UnsafeCell::raw_get(slots.as_ptr()),
                        slots.len(),
                    )
                };
            }
            ring.publish(end);
            self.next = end;
        }
    }
}

/// The longest run a look takes (logbus's readers in the harness ask for 4096 at a time).
const MAX_RUN: u64 = 4096;

/// The reader's pause after a run that caught up, as logbus's (`batch_pause` in `src/wait.rs`,
/// private to the crate, so its figures are repeated here: `PAUSE_PER_RECORD` 32 ns a record, at
/// most `MAX_BATCH_PAUSE` 16 µs, yielding; a pause under `SHORTEST_YIELD` is one yield, without
/// reading the clock), `run` counting every record taken since the reader last caught up, as
/// logbus's has since stop 67. Logbus spins through that short pause instead while its thread
/// yielded less than `TURN_NANOS` (1 µs) ago; a saturated ring's reader takes such short runs too
/// seldom for that to matter (none in 10 M records of the harness's 1→1, counted), so it is left
/// out. So is logbus's watch through a pause (since stop 67), which a saturated stream's pause
/// at the cap meets as two looks, at 1 and 2 µs of its 16.
fn pause_after(run: u64) {
    let pause = Duration::from_nanos(32 * run).min(Duration::from_micros(16));
    let start = (pause >= Duration::from_nanos(100)).then(Instant::now);
    loop {
        thread::yield_now();
        if start.is_none_or(|t| t.elapsed() >= pause) {
            return;
        }
    }
}

/// The reader: takes runs of at most [`MAX_RUN`], marks them read, and when a run reached the
/// published end spins or pauses. `WHOLE`: it hands the sink each part of a run whole
/// ([`Sink::take_batch`], the `batch` scenario's readers), else each record.
fn read_all<const PAUSE: bool, const WHOLE: bool, S: Sink>(ring: Arc<Ring>, sink: S) {
    let mut next = 0u64;
    // Where the reader last caught up: the start of the run its next pause measures.
    let mut caught_up_at = 0u64;
    held(sink, |sink| loop {
        // Acquire: pairs with the producer's Release store; the slots below are written.
        let end = ring.published.0.load(Ordering::Acquire);
        if end == next {
            caught_up_at = next;
            std::hint::spin_loop();
            continue;
        }
        let stop = end.min(next + MAX_RUN);
        let (a, b) = ring.run(next, stop);
        for part in [a, b] {
            if WHOLE {
                // SAFETY: see `Ring`'s `Sync`: the slots are published and not yet marked read.
                if sink.take_batch(part.iter().map(|slot| unsafe { &*slot.get() })) {
                    return;
                }
                continue;
            }
            for slot in part {
                // SAFETY: see `Ring`'s `Sync`: the slot is published and not yet marked read.
                if sink.take(unsafe { *slot.get() }) {
                    return;
                }
            }
        }
        next = stop;
        // Release: our reads of the slots come before the producer's next writes to them.
        ring.read.0.store(next, Ordering::Release);
        if PAUSE && stop == end {
            pause_after(stop - caught_up_at);
            caught_up_at = next;
        }
    })
}

impl<const LOOP: bool, const PAUSE: bool, const KEEP: bool, const EVERY: u64> Bus
    for Minimal<LOOP, PAUSE, KEEP, EVERY>
{
    type Tx = MinimalTx<LOOP, KEEP, EVERY>;

    fn name(&self) -> &'static str {
        self.0
    }

    fn max_producers(&self) -> usize {
        1
    }

    fn start<S: Sink>(
        &self,
        producers: usize,
        subscribers: usize,
        run: Run,
        pins: &Pins,
        sink: impl Fn(usize) -> S,
    ) -> (Vec<Self::Tx>, Box<dyn FnOnce()>) {
        assert!(producers == 1 && subscribers == 1, "a minimal ring is 1→1");
        let capacity = run.capacity.next_power_of_two() as u64;
        let ring = Arc::new(Ring {
            slots: (0..capacity * CYCLE).map(|_| UnsafeCell::new(0)).collect(),
            mask: capacity * CYCLE - 1,
            capacity,
            published: Line(AtomicU64::new(0)),
            read: Line(AtomicU64::new(0)),
            asleep: Line(AtomicU64::new(0)),
        });
        let join = if run.batch {
            spawn_each(pins, vec![ring.clone()], sink, read_all::<PAUSE, true, S>)
        } else {
            spawn_each(pins, vec![ring.clone()], sink, read_all::<PAUSE, false, S>)
        };
        let tx = MinimalTx {
            ring,
            next: 0,
            room: capacity,
        };
        (vec![tx], join)
    }
}

/// Records a subscriber's core reads a second when reading is all it does. A writer publishes 32
/// Ki u64 records (half the retention) to a fresh ring-like logbus topic and hands its readers to
/// the subscriber's core, which reads them through the harness's logbus reader loop and check
/// ([`read_logbus`] and [`order_sink`]: the machine code of the throughput runs), timing only the
/// reading; the writer waits for that before its next round, until `records` records were read.
///
/// - `from_producer`: the writer is on the producer's core and one reader takes each chunk, so
///   every line comes from that core, as in a 1→1 run, but with nothing else to wait for.
/// - otherwise: the writer shares the subscriber's core and 8 readers take each chunk in turn, so
///   the lines are already in that core's cache: what its reading costs alone. No subscriber
///   there reads faster, and where readers share the core (1→2 and 1→4 on two cores) their sum
///   is bounded likewise.
///
/// `whole`: the reader hands the check each batch whole ([`read_logbus`]'s `WHOLE`, the `batch`
/// scenario's reader loop) rather than each record.
pub(crate) fn read_limit(pins: &Pins, records: u64, from_producer: bool, whole: bool) -> f64 {
    const CHUNK: u64 = CAPACITY as u64 / 2;
    let readers = if from_producer { 1 } else { 8 };
    let rounds = records.div_ceil(CHUNK * readers as u64);
    let (to_subscriber, chunks) = mpsc::sync_channel::<Vec<Reader<u64>>>(0);
    // Rounds read. The writer waits for the next one without sleeping: a core left idle while
    // the other reads its lines answers for them more slowly (on this VM, up to half as fast).
    let read = Arc::new(AtomicU64::new(0));
    let writer = {
        let (pins, read) = (pins.clone(), read.clone());
        thread::spawn(move || {
            if from_producer {
                pins.producer(0);
            } else {
                pins.subscriber(0);
            }
            for round in 0..rounds {
                let topic = Topic::<u64>::new("read-limit", logbus_ring(CAPACITY)).unwrap();
                let readers = (0..readers)
                    .map(|_| topic.reader(0, Start::Earliest).unwrap())
                    .collect();
                let mut producer = topic.producer().unwrap();
                for v in 0..CHUNK {
                    producer.publish(v).unwrap();
                }
                to_subscriber.send(readers).unwrap();
                // Relaxed: a count, guarding no data (the topic orders its own records, and
                // each round's topic is dropped by whichever side lets it go last).
                while read.load(Ordering::Relaxed) == round {
                    if from_producer {
                        std::hint::spin_loop();
                    } else {
                        thread::yield_now(); // the reader needs this core
                    }
                }
            }
        })
    };
    let pins = pins.clone();
    let subscriber = thread::spawn(move || {
        pins.subscriber(0);
        let (mut n, mut reading) = (0, Duration::ZERO);
        for readers in chunks {
            for reader in readers {
                let sink = order_sink(1, CHUNK, Arc::default());
                let started = Instant::now();
                if whole {
                    read_logbus::<true, _>(reader, sink);
                } else {
                    read_logbus::<false, _>(reader, sink);
                }
                reading += started.elapsed();
                n += CHUNK;
            }
            // Relaxed: as the writer's load, a count only.
            read.fetch_add(1, Ordering::Relaxed);
        }
        n as f64 / reading.as_secs_f64() / 1e6
    });
    writer.join().unwrap();
    subscriber.join().unwrap()
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// Sends `n` records through a minimal ring of capacity 64 (512 slots: it wraps many times),
    /// the first half one by one and the rest as a run, and returns what the reader received.
    fn round_trip<const LOOP: bool, const PAUSE: bool, const KEEP: bool, const EVERY: u64>(
        n: u64,
    ) -> Vec<u64> {
        let got = Arc::new(Mutex::new(Vec::new()));
        let sink = |_| {
            let got = got.clone();
            move |v| {
                let mut got = got.lock().unwrap();
                got.push(v);
                got.len() as u64 == n
            }
        };
        let run = Run {
            capacity: 64,
            total: n as usize,
            batch: false,
        };
        let (mut txs, join) = Minimal::<LOOP, PAUSE, KEEP, EVERY>("test").start(
            1,
            1,
            run,
            &Pins::from_ids(Vec::new()),
            sink,
        );
        let mut tx = txs.pop().unwrap();
        for v in 0..n / 2 {
            tx.send(v);
        }
        // `send_run` sends `tagged(0, k)` for `k` from 0, which is `k`: the second half counts
        // from 0 again (see `expected`).
        tx.send_run(0, n - n / 2);
        drop(tx);
        join();
        let got = got.lock().unwrap().clone();
        got
    }

    fn expected(n: u64) -> Vec<u64> {
        (0..n / 2).chain(0..n - n / 2).collect()
    }

    #[test]
    fn the_read_limit_reads_every_chunk_in_order() {
        // Each reader of a round reads the round's 32 Ki records; `order_sink` panics on a record
        // out of place, and a reader short of its 32 Ki would wait for ever.
        for (from_producer, whole) in [(true, false), (false, false), (true, true)] {
            let rate = read_limit(&Pins::from_ids(Vec::new()), 100_000, from_producer, whole);
            assert!(rate.is_finite() && rate > 0.0, "{rate}");
        }
    }

    #[test]
    fn the_minimal_ring_delivers_batches_whole_in_order_across_wraps() {
        // Capacity 64 (512 slots): batches of 100 wrap the array and outgrow the room, so they
        // go in as chunks of the capacity, some split at the array's end. The reader hands each
        // part of a run to the check whole (`order_sink` panics on a record out of place).
        let n = 10_000u64;
        let done = Arc::new(Mutex::new(Vec::new()));
        let d2 = done.clone();
        let run = Run {
            capacity: 64,
            total: n as usize,
            batch: true,
        };
        let (mut txs, join) = Minimal::<true, true>("test").start(
            1,
            1,
            run,
            &Pins::from_ids(Vec::new()),
            move |_| order_sink(1, n, d2.clone()),
        );
        let mut tx = txs.pop().unwrap();
        let values: Vec<u64> = (0..n).collect();
        for batch in values.chunks(100) {
            tx.send_batch(batch);
        }
        drop(tx);
        join();
        assert_eq!(done.lock().unwrap().len(), 1, "the reader took all {n}");
    }

    #[test]
    fn every_minimal_ring_delivers_every_record_in_order_across_wraps() {
        let n = 10_000;
        assert_eq!(round_trip::<false, false, false, 1>(n), expected(n));
        assert_eq!(round_trip::<false, true, false, 1>(n), expected(n));
        assert_eq!(round_trip::<true, false, false, 1>(n), expected(n));
        assert_eq!(round_trip::<true, true, false, 1>(n), expected(n));
        assert_eq!(round_trip::<true, true, true, 1>(n), expected(n));
        // 9999 records: the run ends at 9999, not a multiple of 8, so its last seven are
        // published only by the run's end.
        assert_eq!(round_trip::<true, true, false, 8>(n - 1), expected(n - 1));
        assert_eq!(round_trip::<true, true, true, 8>(n - 1), expected(n - 1));
    }
}
