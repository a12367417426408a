//! The side-by-side harness: logbus and the libraries users would pick instead, in one run, on the
//! same machine, interleaved run by run.
//!
//! ```text
//! cargo run --release -p logbus-perf --
//!     [all|tput|batch|ceiling|lat|lat-fast|lat-slow|async|async-shared|async-replay|idle|memory|floor]
//!     [--quick] [--records N] [--runs K] [--samples S] [--no-wait]
//!     [--only NAMES] [--subs N] [--period NS]
//! ```
//!
//! Every contender implements [`Bus`]: it starts `subscribers` consumer threads (in the `async`
//! scenario, tasks of one runtime thread: see `tasks`) that each call a sink for every message, in
//! order, and hands back `producers` senders. The scenarios are generic
//! over `Bus`, so each library runs monomorphized code, with no dynamic dispatch per message.
//! Threads are pinned, each to its own physical core where there are enough (see [`Pins`]);
//! otherwise producers on the first core, subscribers round-robin over the others (all on core 1
//! on a 2-core machine). Before each run of each contender the core-to-core round trip is
//! probed; the harness waits (bounded) for the VM's fast state, and each table's title gives the
//! range of the probes its runs started from (a run that started slow is there to see). Each
//! figure is the median of `--runs` runs, with min and max. Tables are printed and written to
//! `perf/results/latest.md`; latency percentiles are plotted to `perf/results/latency.svg`.

use std::{
    fmt::Write as _,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Barrier, Condvar, Mutex,
    },
    thread,
    time::{Duration, Instant},
};

use hdrhistogram::Histogram;
use logbus::{Overflow, ReadError, Reader, Start, Topic, TopicConfig};

mod burst;
mod ceiling;
mod tasks;

// ------------------------------------------------------------------------------------------------
// Placement.

/// Where threads go. Where there are cores enough, every thread has its own: producers on the
/// first cores, one each, subscribers on the next ones. Otherwise (the 2-core case) producers share
/// the first core and subscribers go round-robin on the others. Cores are ordered so that the first
/// logical CPU of each physical core comes before any SMT sibling: two threads never share a
/// physical core while a free one is left.
#[derive(Clone)]
struct Pins {
    cores: Vec<core_affinity::CoreId>,
    /// How many of the first cores the producers take (1 unless each producer gets its own).
    producer_cores: usize,
}

impl Pins {
    fn new() -> Self {
        let ids: Vec<usize> = core_affinity::get_core_ids()
            .unwrap_or_default()
            .iter()
            .map(|c| c.id)
            .collect();
        // (package, core) of a logical CPU, from sysfs.
        let topology = |id: usize| {
            let read = |f: &str| {
                std::fs::read_to_string(format!("/sys/devices/system/cpu/cpu{id}/topology/{f}"))
                    .ok()
                    .and_then(|s| s.trim().parse::<usize>().ok())
            };
            (read("physical_package_id"), read("core_id"))
        };
        Pins::from_ids(siblings_last(&ids, topology))
    }

    fn from_ids(ids: Vec<usize>) -> Self {
        Pins {
            cores: ids
                .into_iter()
                .map(|id| core_affinity::CoreId { id })
                .collect(),
            producer_cores: 1,
        }
    }

    /// The placement on the first `cores` cores only (`--cores N`; all of them with `None`).
    fn within(&self, cores: Option<usize>) -> Pins {
        let n = cores.map_or(self.cores.len(), |n| n.clamp(1, self.cores.len().max(1)));
        Pins {
            cores: self.cores.iter().take(n).copied().collect(),
            producer_cores: self.producer_cores,
        }
    }

    /// The placement for a run with `producers` producers.
    fn for_producers(&self, producers: usize) -> Pins {
        let own = producers > 1 && self.cores.len() >= producers + 2;
        Pins {
            cores: self.cores.clone(),
            producer_cores: if own { producers } else { 1 },
        }
    }

    fn producer_core(&self, p: usize) -> Option<core_affinity::CoreId> {
        self.cores.get(p % self.producer_cores).copied()
    }

    fn producer(&self, p: usize) {
        if let Some(c) = self.producer_core(p) {
            core_affinity::set_for_current(c);
        }
    }

    fn subscriber_core(&self, i: usize) -> usize {
        let first = self.producer_cores;
        match self.cores.len() {
            n if n <= first => self.cores.first().map_or(0, |c| c.id),
            n => self.cores[first + i % (n - first)].id,
        }
    }

    fn subscriber(&self, i: usize) {
        if !self.cores.is_empty() {
            core_affinity::set_for_current(core_affinity::CoreId {
                id: self.subscriber_core(i),
            });
        }
    }

    fn describe(&self, producers: usize, subscribers: usize) -> String {
        if self.cores.is_empty() {
            return "unpinned".into();
        }
        let list = |ids: Vec<usize>| {
            ids.iter()
                .map(|c| c.to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        let pins = self.for_producers(producers);
        let prods = (0..producers)
            .filter_map(|p| pins.producer_core(p).map(|c| c.id))
            .collect();
        let subs = (0..subscribers).map(|i| pins.subscriber_core(i)).collect();
        format!(
            "{producers} producer(s) on cores [{}], subscribers on cores [{}]",
            list(prods),
            list(subs)
        )
    }
}

/// Logical CPUs in order, the first of each physical core (as `topology` names it: package and
/// core id; a CPU whose core id is unknown counts as a core of its own) before its SMT siblings.
fn siblings_last(
    ids: &[usize],
    topology: impl Fn(usize) -> (Option<usize>, Option<usize>),
) -> Vec<usize> {
    let mut seen = std::collections::HashSet::new();
    let mut keyed: Vec<(bool, usize)> = ids
        .iter()
        .map(|&id| {
            let t = topology(id);
            (t.1.is_some() && !seen.insert(t), id)
        })
        .collect();
    keyed.sort();
    keyed.into_iter().map(|(_, id)| id).collect()
}

/// One-way core-to-core latency: two pinned threads bounce one cache line; half the round trip.
fn probe_floor(pins: &Pins) -> Duration {
    let line = Arc::new(AtomicU64::new(0));
    let rounds = 20_000u64;
    let l2 = line.clone();
    let p2 = pins.clone();
    thread::scope(|s| {
        s.spawn(move || {
            p2.subscriber(0);
            for i in 0..rounds {
                while l2.load(Ordering::Acquire) != 2 * i + 1 {
                    std::hint::spin_loop();
                }
                l2.store(2 * i + 2, Ordering::Release);
            }
        });
        s.spawn(|| {
            pins.producer(0);
            let start = Instant::now();
            for i in 0..rounds {
                line.store(2 * i + 1, Ordering::Release);
                while line.load(Ordering::Acquire) != 2 * i + 2 {
                    std::hint::spin_loop();
                }
            }
            start.elapsed() / (2 * rounds as u32)
        })
        .join()
        .unwrap()
    })
}

/// What a subscriber core charges for handing itself from one reader to another: two threads
/// pinned to the first subscriber's core take turns, each waiting for its turn by yielding
/// (`sched_yield`), as a waiting reader of any library here does before it parks. The time per
/// turn, and the turns taken (all of them: a probe that returns has alternated). Where two
/// subscribers share a core (1→2 on two cores) the second to see a record waits about this long
/// after the first, whatever the library: on the 2-vCPU AMD VM 1.4–2.0 µs, the 2 µs-paced 1→2
/// p50 of every contender that keeps up there.
fn probe_handover(pins: &Pins) -> (Duration, u64) {
    let turn = AtomicU64::new(0);
    let rounds = 5_000u64;
    let per_turn = thread::scope(|s| {
        let threads: Vec<_> = (0..2u64)
            .map(|me| {
                let turn = &turn;
                s.spawn(move || {
                    pins.subscriber(0);
                    let start = Instant::now();
                    for k in 0..rounds {
                        while turn.load(Ordering::Acquire) != 2 * k + me {
                            thread::yield_now();
                        }
                        turn.store(2 * k + me + 1, Ordering::Release);
                    }
                    start.elapsed()
                })
            })
            .collect();
        let longest = threads
            .into_iter()
            .map(|t| t.join().unwrap())
            .max()
            .unwrap_or_default();
        longest / (2 * rounds as u32)
    });
    (per_turn, turn.into_inner())
}

/// The range of a table's floor probes, as its title prints it.
fn floor_range(floors: &[Duration]) -> String {
    let lo = floors.iter().min().copied().unwrap_or_default();
    let hi = floors.iter().max().copied().unwrap_or_default();
    if lo == hi {
        format!("{lo:?}")
    } else {
        format!("{lo:?}–{hi:?}")
    }
}

/// A one-way floor at most this is the VM's fast state.
const FAST: Duration = Duration::from_nanos(120);

/// How many times a run whose floor probe (before or after it) said slow is done again.
const MAX_REDOS: usize = 2;

/// The runs of one table: each waits (up to `wait`) for the fast state and is done again (up to
/// `max_redos` more times) while the probe before or after it says slow, so that a phase change
/// inside a run does not become the table's figure; after each, what it freed is handed back
/// ([`hand_back_freed_memory`]). Keeps the kept runs' probes and counts the runs done again, for
/// the table's title.
struct Kept {
    wait: Duration,
    max_redos: usize,
    floors: Vec<Duration>,
    redone: usize,
}

impl Kept {
    /// A table whose first probe (taken before its runs) was `floor`.
    fn new(wait: Duration, max_redos: usize, floor: Duration) -> Self {
        Kept {
            wait,
            max_redos,
            floors: vec![floor],
            redone: 0,
        }
    }

    /// Does `run` as described above; returns the last run's result.
    fn run<R>(&mut self, pins: &Pins, mut run: impl FnMut() -> R) -> R {
        let mut redo = 0;
        loop {
            let before = wait_for_fast_state(pins, FAST, self.wait);
            let v = run();
            hand_back_freed_memory();
            let after = probe_floor(pins);
            if (before <= FAST && after <= FAST) || redo == self.max_redos {
                self.floors.extend([before, after]);
                return v;
            }
            redo += 1;
            self.redone += 1;
        }
    }

    /// The one-way floor around the run [`Kept::run`] kept last: the mean of its probes before
    /// and after it.
    fn last_floor(&self) -> Duration {
        match self.floors[..] {
            [.., before, after] => (before + after) / 2,
            _ => Duration::ZERO,
        }
    }

    /// The range of the probes, as a table's title prints it.
    fn floor(&self) -> String {
        floor_range(&self.floors)
    }

    /// What a table's title says about runs done again after a slow probe.
    fn redone_note(&self) -> String {
        match self.redone {
            0 => String::new(),
            n => format!("; {n} run(s) done again after a slow probe"),
        }
    }
}

/// Has glibc give back to the kernel what the run just freed, so that the next run (another
/// contender's, maybe) does not pay for it.
///
/// glibc hands freed heap memory back lazily: on a later `free` that leaves enough free space at
/// the top of a heap, in whichever thread makes it. After the unbounded default topic's run frees
/// its ~150 MB, that `free` came inside the next run: a logbus reader's pin ran an epoch
/// collection, whose own `free` of the last live chunk above the freed space then unmapped
/// tens of MiB (`madvise`, `munmap`) while holding the process's memory map lock; its other threads
/// waited on that lock (a new thread's `mmap`, page faults). On the 2-vCPU guest that cost the
/// ring-like 1→2 run after it ~30% (stop 52, three alternating invocations of each build, the 12
/// runs that followed the neighbour: 275–297 M/s without this call, 391–447 with it); the
/// Disruptor's runs, which free nothing and pin no epoch, ran ~300 with or without it.
/// `malloc_trim` does that giving back here, between runs.
fn hand_back_freed_memory() {
    // SAFETY: `malloc_trim` takes a size and touches only the allocator's own state.
    unsafe { libc::malloc_trim(0) };
}

/// One throughput run of `bus` (see [`tput`]), kept as [`Kept`] says; `None` when `bus` does not
/// take part (too many producers for it, or not named by `--only`).
fn kept_tput<B: Bus>(
    bus: &B,
    o: &Options,
    pins: &Pins,
    kept: &mut Kept,
    (producers, subs): (usize, usize),
    batch: bool,
) -> Option<f64> {
    if !runs_here(bus, o, producers) {
        return None;
    }
    kept.run(pins, || {
        thread::scope(|s| {
            s.spawn(|| tput(bus, o, pins, producers, subs, batch))
                .join()
                .unwrap()
        })
    })
}

/// Probes until the one-way floor is at most `fast`, for at most `budget`; returns the last probe.
fn wait_for_fast_state(pins: &Pins, fast: Duration, budget: Duration) -> Duration {
    let start = Instant::now();
    loop {
        let floor = probe_floor(pins);
        if floor <= fast || start.elapsed() >= budget {
            return floor;
        }
        thread::sleep(Duration::from_millis(200));
    }
}

// ------------------------------------------------------------------------------------------------
// The common trait.

/// What a subscriber does with each message: `take` returns true when it expects no more.
trait Sink: Send + 'static {
    fn take(&mut self, v: u64) -> bool;

    /// Takes a batch that a library's reader hands over whole, in order (the `batch` scenario's
    /// logbus readers: a batch is one slice); true when it expects no more. A sink that does
    /// something with each message does it once a message, as `take` would.
    #[inline(always)]
    fn take_batch<'a>(&mut self, batch: impl ExactSizeIterator<Item = &'a u64>) -> bool {
        take_each(self, batch)
    }
}

/// Hands `sink` a batch's messages one by one; true once it expects no more.
#[inline(always)]
fn take_each<'a, S: Sink + ?Sized>(sink: &mut S, batch: impl Iterator<Item = &'a u64>) -> bool {
    for v in batch {
        if sink.take(*v) {
            return true;
        }
    }
    false
}

impl<F: FnMut(u64) -> bool + Send + 'static> Sink for F {
    #[inline(always)]
    fn take(&mut self, v: u64) -> bool {
        self(v)
    }
}

/// Runs a subscriber's loop, `read`, with its sink moved into the loop's own frame, as a user's
/// loop keeps its state in local variables: every subscriber loop the harness writes runs inside
/// one. (The Disruptor calls a handler it holds itself, so its sink stays there.)
///
/// A sink handed to the loop's function as an argument lives in the caller's memory, which the
/// caller may still read if the loop panics, and a sink dropped in place hands its address to
/// an out-of-line call (its `Arc`'s). Either way the compiler must keep the sink's state in
/// memory, so the order check stored its count back at every message in the loops that inline
/// their reads (logbus's and the minimal rings', in their machine code). Here the sink is a
/// local that is never dropped in place: it is moved out to be dropped after the loop (not at
/// all if the loop panics, which ends the harness anyway). It has to be called inside each
/// loop's own function: `spawn_each` calls the loops through a function pointer, so a frame it
/// made for the sink would again be a caller's.
///
/// Stop 61, 2-vCPU EPYC guest, three alternating pairs of `ceiling` runs: the read limit's two
/// rows ×1.07 and ×1.09 (logbus's loop reads ~3.3 → ~3.6 G messages/s); logbus's batch 1→1
/// ×0.95, which its producer bounds once the reader keeps up (see `perf/HISTORY.md`).
#[inline(always)]
fn held<S: Sink, T>(sink: S, read: impl FnOnce(&mut S) -> T) -> T {
    let mut sink = std::mem::ManuallyDrop::new(sink);
    let out = read(&mut sink);
    drop(std::mem::ManuallyDrop::into_inner(sink));
    out
}

/// A sender of one producer. Every `send` is `#[inline(always)]`, so that a run's loop holds each
/// library's publish inline, as a user's tight loop would (with `#[inline]` alone the compiler kept
/// some out of line, logbus's among them: one call per message, though on the 2-vCPU Xeon that
/// measured alike for logbus, whose reader bounded it; see `order_sink`).
trait Tx: Send {
    fn send(&mut self, v: u64);
    /// Sends producer `p`'s messages `0..n` in order, one by one (the throughput scenario's loop,
    /// here so that a boxed sender pays one indirect call per run rather than per message).
    ///
    /// Always inline, into the producer thread's closure, where the sender is a local: out of
    /// line, the loop reaches the sender through `&mut self` and keeps what it holds in memory.
    /// With `#[inline]` alone, a sender type that two contenders share (logbus's, since the
    /// `async` scenario's tasks) got an out-of-line copy, and the ring-like topic's tput 1→1 ran
    /// at ×0.62–0.78 of the same engine in the harness before (stop 65, 8–10 alternating rounds).
    #[inline(always)]
    fn send_run(&mut self, p: u64, n: u64) {
        for v in tagged_run(p, 0, n) {
            self.send(v);
        }
    }
    fn send_batch(&mut self, vs: &[u64]) {
        for v in vs {
            self.send(*v);
        }
    }
}

/// The size of a run: `capacity` is the ring or channel size every bounded library gets (and the
/// retention of the ring-like logbus); `total` the messages the run will send (for libraries with
/// no back-pressure, which must hold them all).
#[derive(Clone, Copy)]
struct Run {
    capacity: usize,
    total: usize,
    /// The `batch` scenario: readers that can hand the sink a whole batch do
    /// ([`Sink::take_batch`]).
    batch: bool,
}

/// A library under test.
trait Bus: Sync {
    type Tx: Tx + 'static;
    fn name(&self) -> &'static str;
    /// The most producers it supports (single-producer designs say 1).
    fn max_producers(&self) -> usize {
        usize::MAX
    }
    /// Starts `subscribers` pinned consumer threads, the i-th calling `sink(i)`'s sink for every
    /// message in order until it returns true, and returns `producers` senders plus a function
    /// that waits until every consumer is done (call it after dropping the senders).
    fn start<S: Sink>(
        &self,
        producers: usize,
        subscribers: usize,
        run: Run,
        pins: &Pins,
        sink: impl Fn(usize) -> S,
    ) -> (Vec<Self::Tx>, Box<dyn FnOnce()>);
}

/// Spawns one pinned subscriber thread per receiver, running `body(receiver, sink)`, and returns a
/// function that joins them all.
fn spawn_each<R: Send + 'static, S: Sink>(
    pins: &Pins,
    receivers: Vec<R>,
    sink: impl Fn(usize) -> S,
    body: fn(R, S),
) -> Box<dyn FnOnce()> {
    let handles: Vec<_> = receivers
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            let (s, pins) = (sink(i), pins.clone());
            thread::spawn(move || {
                pins.subscriber(i);
                body(r, s)
            })
        })
        .collect();
    Box::new(move || {
        for h in handles {
            h.join().unwrap();
        }
    })
}

// --- logbus ---

struct Logbus {
    name: &'static str,
    config: fn(usize) -> TopicConfig<u64>,
    single: bool,
}

struct LogbusTx(logbus::Producer<u64>);

impl Tx for LogbusTx {
    #[inline(always)]
    fn send(&mut self, v: u64) {
        self.0.publish(v).unwrap();
    }
    fn send_batch(&mut self, vs: &[u64]) {
        self.0.publish_slice(vs).unwrap();
    }
}

impl Bus for Logbus {
    type Tx = LogbusTx;
    fn name(&self) -> &'static str {
        self.name
    }
    fn max_producers(&self) -> usize {
        if self.single {
            1
        } else {
            usize::MAX
        }
    }
    fn start<S: Sink>(
        &self,
        producers: usize,
        subscribers: usize,
        run: Run,
        pins: &Pins,
        sink: impl Fn(usize) -> S,
    ) -> (Vec<LogbusTx>, Box<dyn FnOnce()>) {
        let topic = Topic::<u64>::new("perf", (self.config)(run.capacity)).unwrap();
        let readers = (0..subscribers)
            .map(|_| topic.reader(0, Start::Earliest).unwrap())
            .collect();
        let join = if run.batch {
            spawn_each(pins, readers, sink, read_logbus::<true, S>)
        } else {
            spawn_each(pins, readers, sink, read_logbus::<false, S>)
        };
        let txs = (0..producers)
            .map(|_| LogbusTx(topic.producer().unwrap()))
            .collect();
        (txs, join)
    }
}

/// A logbus subscriber's loop, in every scenario: batches of up to 4096 records until the sink
/// has all it expects, each value to the sink, or with `WHOLE` (the `batch` scenario) each batch
/// whole ([`Sink::take_batch`]). Out of line, so that the ceiling scenario's read limit
/// ([`ceiling::read_limit`]) runs the very machine code the throughput runs do.
#[inline(never)]
fn read_logbus<const WHOLE: bool, S: Sink>(mut reader: Reader<u64>, sink: S) {
    held(sink, |sink| loop {
        match reader.next_batch(4096) {
            Ok(b) if WHOLE => {
                if sink.take_batch(b.values()) {
                    return;
                }
            }
            Ok(b) => {
                for v in b.values() {
                    if sink.take(*v) {
                        return;
                    }
                }
            }
            Err(ReadError::Lagged(n)) => panic!("lagged by {n}"),
            Err(e) => panic!("{e}"),
        }
    })
}

/// The default topic (unbounded retention, timestamps), one producer.
fn logbus_single(_: usize) -> TopicConfig<u64> {
    TopicConfig::default().single_producer()
}

/// The default topic, many producers.
fn logbus_multi(_: usize) -> TopicConfig<u64> {
    TopicConfig::default()
}

/// Like a ring buffer: `capacity` records retained, publishers wait for the slowest reader, no
/// timestamps (the Disruptor's events carry none either).
fn logbus_ring(capacity: usize) -> TopicConfig<u64> {
    TopicConfig::default()
        .single_producer()
        .max_records(capacity as u64)
        .overflow(Overflow::Block)
        .timestamps(false)
}

/// The ring-like topic whose readers never park ([`logbus::WaitStrategy::busy_spin`]): the
/// Disruptor's BusySpin in logbus terms, which the default strategy trades for a parked reader's
/// idleness (the `idle` table) and pays for with a futex wake-up after a quiet spell (the
/// `burst` scenario's first burst after a pause).
fn logbus_ring_spin(capacity: usize) -> TopicConfig<u64> {
    logbus_ring(capacity).wait(logbus::WaitStrategy::busy_spin())
}

/// Like a ring buffer, many producers: the Disruptor's multi-producer set-up in logbus terms.
fn logbus_multi_ring(capacity: usize) -> TopicConfig<u64> {
    TopicConfig::default()
        .max_records(capacity as u64)
        .overflow(Overflow::Block)
        .timestamps(false)
}

// --- disruptor ---

struct Disruptor<W>(&'static str, W);

struct DisruptorTx<P>(P);

impl<P: disruptor::Producer<u64> + Send> Tx for DisruptorTx<P> {
    #[inline(always)]
    fn send(&mut self, v: u64) {
        self.0.publish(|e| *e = v);
    }
    fn send_batch(&mut self, vs: &[u64]) {
        let mut k = 0;
        self.0.batch_publish(vs.len(), |iter| {
            for e in iter {
                *e = vs[k];
                k += 1;
            }
        });
    }
}

type BoxedTx = Box<dyn TxObj>;

/// Object-safe form of `Tx`, for libraries whose sender type depends on the fan-out.
trait TxObj: Send {
    fn send_obj(&mut self, v: u64);
    fn send_run_obj(&mut self, p: u64, n: u64);
    fn send_batch_obj(&mut self, vs: &[u64]);
}

impl<T: Tx> TxObj for T {
    fn send_obj(&mut self, v: u64) {
        self.send(v)
    }
    fn send_run_obj(&mut self, p: u64, n: u64) {
        self.send_run(p, n)
    }
    fn send_batch_obj(&mut self, vs: &[u64]) {
        self.send_batch(vs)
    }
}

impl Tx for BoxedTx {
    #[inline(always)]
    fn send(&mut self, v: u64) {
        // `(**self)`: the boxed sender, not the box (which is itself a `TxObj` through `Tx`).
        (**self).send_obj(v)
    }
    fn send_run(&mut self, p: u64, n: u64) {
        (**self).send_run_obj(p, n)
    }
    fn send_batch(&mut self, vs: &[u64]) {
        (**self).send_batch_obj(vs)
    }
}

impl<W: disruptor::wait_strategies::WaitStrategy + Copy + Send + Sync + 'static> Bus
    for Disruptor<W>
{
    // The producer's type depends on the number of handlers, so it is boxed: one indirect call
    // per throughput run (`send_run`) or batch, and per message only in the paced latency runs,
    // where one call is lost in the 2 µs between messages.
    type Tx = BoxedTx;
    fn name(&self) -> &'static str {
        self.0
    }
    fn start<S: Sink>(
        &self,
        producers: usize,
        subscribers: usize,
        run: Run,
        pins: &Pins,
        sink: impl Fn(usize) -> S,
    ) -> (Vec<BoxedTx>, Box<dyn FnOnce()>) {
        use disruptor::{ProcessorSettings, Sequence};
        let size = run.capacity.next_power_of_two();
        let handler = |i: usize| {
            let mut sink = sink(i);
            let mut done = false;
            move |e: &u64, _: Sequence, _: bool| {
                if !done {
                    done = sink.take(*e);
                }
            }
        };
        let core = |i| pins.subscriber_core(i);
        macro_rules! fan_out {
            ($builder:expr) => {{
                let b = $builder.pin_at_core(core(0)).handle_events_with(handler(0));
                match subscribers {
                    1 => split(b.build(), producers),
                    2 => split(
                        b.pin_at_core(core(1))
                            .handle_events_with(handler(1))
                            .build(),
                        producers,
                    ),
                    4 => split(
                        b.pin_at_core(core(1))
                            .handle_events_with(handler(1))
                            .pin_at_core(core(2))
                            .handle_events_with(handler(2))
                            .pin_at_core(core(3))
                            .handle_events_with(handler(3))
                            .build(),
                        producers,
                    ),
                    n => panic!("no disruptor set-up for {n} subscribers"),
                }
            }};
        }
        fn split<P: disruptor::Producer<u64> + Send + 'static>(p: P, n: usize) -> Vec<BoxedTx> {
            assert_eq!(n, 1);
            vec![Box::new(DisruptorTx(p))]
        }
        fn split_multi<P: disruptor::Producer<u64> + Clone + Send + 'static>(
            p: P,
            n: usize,
        ) -> Vec<BoxedTx> {
            (0..n)
                .map(|_| Box::new(DisruptorTx(p.clone())) as BoxedTx)
                .collect()
        }
        let txs = if producers == 1 {
            fan_out!(disruptor::build_single_producer(size, || 0u64, self.1))
        } else {
            let b = disruptor::build_multi_producer(size, || 0u64, self.1)
                .pin_at_core(core(0))
                .handle_events_with(handler(0));
            match subscribers {
                1 => split_multi(b.build(), producers),
                2 => split_multi(
                    b.pin_at_core(core(1))
                        .handle_events_with(handler(1))
                        .build(),
                    producers,
                ),
                n => panic!("no multi-producer disruptor set-up for {n} subscribers"),
            }
        };
        // Dropping the last producer waits for the handlers to drain.
        (txs, Box::new(|| {}))
    }
}

// --- channels, one per subscriber ---

struct Channels<C>(&'static str, C);

trait Channel: Sync {
    type S: Send + Clone + 'static;
    type R: Send + 'static;
    fn pair(&self, capacity: usize) -> (Self::S, Self::R);
    fn send(s: &Self::S, v: u64);
    fn recv(r: &mut Self::R) -> u64;
}

/// The two channel crates have the same shape of API: one adapter, written once.
macro_rules! channel_adapter {
    ($name:ident, $krate:ident) => {
        struct $name;
        impl Channel for $name {
            type S = $krate::Sender<u64>;
            type R = $krate::Receiver<u64>;
            fn pair(&self, capacity: usize) -> (Self::S, Self::R) {
                $krate::bounded(capacity)
            }
            #[inline(always)]
            fn send(s: &Self::S, v: u64) {
                s.send(v).unwrap();
            }
            #[inline]
            fn recv(r: &mut Self::R) -> u64 {
                r.recv().unwrap()
            }
        }
    };
}

channel_adapter!(CrossbeamChannel, crossbeam_channel);
channel_adapter!(KanalChannel, kanal);

struct ChannelTx<C: Channel>(Vec<C::S>);

impl<C: Channel> Tx for ChannelTx<C> {
    #[inline(always)]
    fn send(&mut self, v: u64) {
        for s in &self.0 {
            C::send(s, v);
        }
    }
}

impl<C: Channel + 'static> Bus for Channels<C> {
    type Tx = ChannelTx<C>;
    fn name(&self) -> &'static str {
        self.0
    }
    fn start<S: Sink>(
        &self,
        producers: usize,
        subscribers: usize,
        run: Run,
        pins: &Pins,
        sink: impl Fn(usize) -> S,
    ) -> (Vec<ChannelTx<C>>, Box<dyn FnOnce()>) {
        let (senders, receivers): (Vec<_>, Vec<_>) =
            (0..subscribers).map(|_| self.1.pair(run.capacity)).unzip();
        let join = spawn_each(pins, receivers, sink, |mut r, sink| {
            held(sink, |sink| while !sink.take(C::recv(&mut r)) {})
        });
        let txs = (0..producers).map(|_| ChannelTx(senders.clone())).collect();
        (txs, join)
    }
}

// --- tokio broadcast ---

struct TokioBroadcast;

struct TokioTx(tokio::sync::broadcast::Sender<u64>);

impl Tx for TokioTx {
    #[inline(always)]
    fn send(&mut self, v: u64) {
        let _ = self.0.send(v);
    }
}

impl Bus for TokioBroadcast {
    type Tx = TokioTx;
    fn name(&self) -> &'static str {
        "tokio broadcast (sized not to lag)"
    }
    fn start<S: Sink>(
        &self,
        producers: usize,
        subscribers: usize,
        run: Run,
        pins: &Pins,
        sink: impl Fn(usize) -> S,
    ) -> (Vec<TokioTx>, Box<dyn FnOnce()>) {
        // Sized to hold the whole run, so that no receiver ever lags (it has no back-pressure).
        let (tx, _) = tokio::sync::broadcast::channel::<u64>(run.total.next_power_of_two());
        let receivers = (0..subscribers).map(|_| tx.subscribe()).collect();
        let join = spawn_each(pins, receivers, sink, |mut rx, sink| {
            held(sink, |sink| {
                while !sink.take(rx.blocking_recv().expect("sized not to lag")) {}
            })
        });
        let txs = (0..producers).map(|_| TokioTx(tx.clone())).collect();
        (txs, join)
    }
}

// --- bus ---

struct BusCrate;

struct BusTx(bus::Bus<u64>);

impl Tx for BusTx {
    #[inline(always)]
    fn send(&mut self, v: u64) {
        self.0.broadcast(v);
    }
}

impl Bus for BusCrate {
    type Tx = BusTx;
    fn name(&self) -> &'static str {
        "bus"
    }
    fn max_producers(&self) -> usize {
        1
    }
    fn start<S: Sink>(
        &self,
        _producers: usize,
        subscribers: usize,
        run: Run,
        pins: &Pins,
        sink: impl Fn(usize) -> S,
    ) -> (Vec<BusTx>, Box<dyn FnOnce()>) {
        let mut b = bus::Bus::new(run.capacity);
        let receivers = (0..subscribers).map(|_| b.add_rx()).collect();
        let join = spawn_each(pins, receivers, sink, |mut rx, sink| {
            held(sink, |sink| while !sink.take(rx.recv().unwrap()) {})
        });
        (vec![BusTx(b)], join)
    }
}

// --- multiqueue2 ---

struct MultiQueue;

struct MultiQueueTx(multiqueue2::BroadcastSender<u64>);

impl Tx for MultiQueueTx {
    #[inline(always)]
    fn send(&mut self, mut v: u64) {
        // multiqueue2 has no blocking send: spin (with a hint) while the queue is full.
        while let Err(e) = self.0.try_send(v) {
            v = match e {
                std::sync::mpsc::TrySendError::Full(v) => v,
                std::sync::mpsc::TrySendError::Disconnected(_) => panic!("disconnected"),
            };
            std::hint::spin_loop();
        }
    }
}

impl Bus for MultiQueue {
    type Tx = MultiQueueTx;
    fn name(&self) -> &'static str {
        "multiqueue2"
    }
    fn start<S: Sink>(
        &self,
        producers: usize,
        subscribers: usize,
        run: Run,
        pins: &Pins,
        sink: impl Fn(usize) -> S,
    ) -> (Vec<MultiQueueTx>, Box<dyn FnOnce()>) {
        let (tx, rx) = multiqueue2::broadcast_queue::<u64>(run.capacity as u64);
        let streams = (0..subscribers).map(|_| rx.add_stream()).collect();
        let join = spawn_each(pins, streams, sink, |stream, sink| {
            held(sink, |sink| while !sink.take(stream.recv().unwrap()) {})
        });
        rx.unsubscribe();
        let txs = (0..producers).map(|_| MultiQueueTx(tx.clone())).collect();
        (txs, join)
    }
}

// --- the textbook baseline ---

struct MutexLog;

struct MutexLogTx(Arc<(Mutex<Vec<u64>>, Condvar)>);

impl Tx for MutexLogTx {
    #[inline(always)]
    fn send(&mut self, v: u64) {
        let (lock, cond) = &*self.0;
        lock.lock().unwrap().push(v);
        cond.notify_all();
    }
}

impl Bus for MutexLog {
    type Tx = MutexLogTx;
    fn name(&self) -> &'static str {
        "Mutex<Vec> + Condvar (textbook)"
    }
    fn start<S: Sink>(
        &self,
        producers: usize,
        subscribers: usize,
        _run: Run,
        pins: &Pins,
        sink: impl Fn(usize) -> S,
    ) -> (Vec<MutexLogTx>, Box<dyn FnOnce()>) {
        let log = Arc::new((Mutex::new(Vec::<u64>::new()), Condvar::new()));
        let logs = (0..subscribers).map(|_| log.clone()).collect();
        let join = spawn_each(
            pins,
            logs,
            sink,
            |log: Arc<(Mutex<Vec<u64>>, Condvar)>, sink| {
                let (mut next, mut local) = (0, Vec::new());
                held(sink, |sink| loop {
                    {
                        let (lock, cond) = &*log;
                        let mut v = lock.lock().unwrap();
                        while v.len() == next {
                            v = cond.wait(v).unwrap();
                        }
                        local.extend_from_slice(&v[next..]);
                        next = v.len();
                    }
                    for x in local.drain(..) {
                        if sink.take(x) {
                            return;
                        }
                    }
                })
            },
        );
        let txs = (0..producers).map(|_| MutexLogTx(log.clone())).collect();
        (txs, join)
    }
}

// ------------------------------------------------------------------------------------------------
// Scenarios.

struct Options {
    records: u64,
    runs: usize,
    samples: u64,
    slow_samples: u64,
    idle: Duration,
    what: String,
    /// Throughput and latency rows only for contenders whose name contains one of these
    /// (comma-separated, or `;`-separated when a name has a comma).
    only: Option<String>,
    /// Throughput fan-outs only with this many subscribers (`--subs N`).
    subs: Option<usize>,
    /// Throughput fan-outs only with this many producers (`--producers N`; 1: 1→1, 1→2, 1→4).
    producers: Option<usize>,
    /// The `lat` scenario's schedule: one message per this (`--period NS`; 2 µs by default).
    period: Duration,
    /// Throughput runs on the first this many cores only (`--cores N`): `--cores 1` puts the
    /// producers and the subscribers on one core, as on a machine with more threads than cores.
    /// The floor is still probed between two cores.
    cores: Option<usize>,
}

/// The ring, channel or retention size every bounded contender gets.
const CAPACITY: usize = 1 << 16;

/// Producer `p`'s message `k` in a multi-producer run (`k` stays below 2^48). The loops that send
/// or fill a run take a whole run at once from [`tagged_run`].
fn tagged(p: u64, k: u64) -> u64 {
    p << 48 | k
}

/// Producer `p`'s messages `k..n` ([`tagged`] of each), as a plain range: with `k` below 2^48 the
/// tag may as well be added.
///
/// The loops iterate over this range rather than over `k..n` mapped through `tagged`: an OR a
/// message, which the loop that fills a batch ran as three more vector instructions every four
/// messages. That loop is most of the producer's core where the producer bounds a run (logbus's
/// batch 1→1: its stores queue behind the copy's stores into the reader's lines). Stop 62, 2-vCPU
/// EPYC guest: a standalone 1→1 loop of 256-record `publish_slice` batches filled with the OR ran
/// 3245–3448 M/s against 3819–4011 without it (three alternating pairs of 7-run medians); in the
/// harness, alternating binaries (4 rounds), logbus's batch 1→1 ×1.14, its single-record 1→1
/// ×1.06 and 2→2 ×0.96, the Disruptor BusySpin's batch 1→1 ×1.10 (see `perf/HISTORY.md`).
fn tagged_run(p: u64, k: u64, n: u64) -> std::ops::Range<u64> {
    let tag = tagged(p, 0);
    tag + k..tag + n
}

/// A sink that checks order (per producer) and reports when it has all `expected` messages.
///
/// The check is the same for every contender and runs for every message on the subscriber's
/// core, so it is kept small enough to be inlined into each library's read loop: the failure and
/// the finish are out of line. (When the whole closure was one call per message, its cost bounded
/// every contender's reads alike: ~half the subscriber core's samples in a batch 1→1 profile.)
fn order_sink(producers: usize, expected: u64, done: Arc<Mutex<Vec<Instant>>>) -> OrderSink {
    assert!(
        (1..=2).contains(&producers),
        "the runs have one or two producers"
    );
    OrderSink {
        single: producers == 1,
        next0: 0,
        next1: 0,
        per: expected / producers as u64,
        got: 0,
        expected,
        done,
    }
}

/// Messages a producer publishes at a time in the `batch` scenario: its `k`-th batch holds its
/// messages `k * BATCH..`, the last one fewer if its count is not a multiple.
const BATCH: u64 = 256;

/// [`order_sink`]'s state.
struct OrderSink {
    single: bool,
    /// Producer 0's and 1's next messages (unused with one producer, whose check is the count).
    next0: u64,
    next1: u64,
    /// Messages each producer sends.
    per: u64,
    got: u64,
    expected: u64,
    done: Arc<Mutex<Vec<Instant>>>,
}

#[cold]
#[inline(never)]
fn out_of_order(p: usize, k: u64, expected: Option<u64>) -> ! {
    match expected {
        Some(e) => panic!("out of order: producer {p} sent {k}, expected {e}"),
        None => panic!("out of order: message from unknown producer {p}"),
    }
}

#[cold]
#[inline(never)]
fn finish(done: &Mutex<Vec<Instant>>) -> bool {
    done.lock().unwrap().push(Instant::now());
    true
}

impl OrderSink {
    /// Two producers: checks that `v` is its producer's next message; its producer and count.
    /// The next message by value, not through a `&mut` to it (see `take`).
    #[inline(always)]
    fn expect_next(&self, v: u64) -> (usize, u64) {
        let (p, k) = ((v >> 48) as usize, v & ((1 << 48) - 1));
        let next = match p {
            0 => self.next0,
            1 => self.next1,
            _ => out_of_order(p, k, None),
        };
        if k != next {
            out_of_order(p, k, Some(next));
        }
        (p, k)
    }

    /// Two producers: producer `p` (0 or 1, as [`OrderSink::expect_next`] found) sent `n` more.
    #[inline(always)]
    fn advance(&mut self, p: usize, n: u64) {
        if p == 0 {
            self.next0 += n;
        } else {
            self.next1 += n;
        }
    }
}

impl Sink for OrderSink {
    #[inline(always)]
    fn take(&mut self, v: u64) -> bool {
        if self.single {
            // One producer: its k-th message must be the k-th received (`tagged(0, k)` is `k`), so
            // the count is the check, in a register. A check that kept each producer's next
            // message in memory (a vector, as this one did for two producers until stop 53) loads
            // it back right after storing it, which chains every message to the one before: on a
            // 2-vCPU Xeon that bounded every contender's 1→1 reader at ~500 M/s (~14 instructions
            // a message), hiding the libraries' differences.
            if v != self.got {
                out_of_order(0, v, Some(self.got));
            }
        } else {
            // Two producers: each one's next message in a variable of its own, so the compiler
            // compares against a register and only stores the new count back, never loading it.
            // (Picked through a `&mut` to one of them, they went back to memory: hence the value
            // and the increment each by its own match on `p`.)
            // With a vector, the chain above bounded the 2→2 readers: in stop 53's batch 2→2
            // profile, 55% of the subscriber core's samples fell right after the load of the
            // producer's next message. Without it (alternating builds, 6 rounds of 3 runs, EPYC
            // guest): batch 2→2 ×1.10 for logbus's many-producer ring-like topic and ×1.15 for the
            // Disruptor's Sleep; single-record 2→2, where the producers bound the run, ×0.97 both.
            let (p, _) = self.expect_next(v);
            self.advance(p, 1);
        }
        self.got += 1;
        self.got == self.expected && finish(&self.done)
    }

    /// With one producer, a whole batch is checked in one pass with no branch per message: each
    /// value XOR its expected count, ORed together, is 0 only if every one is in place. The
    /// compiler makes that pass vector instructions, several messages a cycle, where `take`'s
    /// compare and branch a message bound a 1→1 reader at ~1.1–1.7 G messages/s on the EPYC guest
    /// (the `ceiling` scenario's read limit), about what logbus's single records reach. So only
    /// a reader that hands over whole batches can show what batches gain.
    ///
    /// Two producers' batches interleave, but each is one contiguous run of the log (what
    /// `publish_slice` promises, and the only library whose reader hands batches over whole is
    /// logbus). So the check takes the batch a run at a time: the run's first message picks its
    /// producer and must be that producer's next, and the rest, up to the end of that producer's
    /// batch (a multiple of [`BATCH`] of its messages, or its last) or of the read, go through the
    /// same XOR pass against the first's followers. A message of the other producer inside a run
    /// fails the check, as a batch that is not one run of the log should.
    #[inline(always)]
    fn take_batch<'a>(&mut self, batch: impl ExactSizeIterator<Item = &'a u64>) -> bool {
        let (from, n) = (self.got, batch.len() as u64);
        if self.single {
            let wrong = batch
                .zip(from..from + n)
                .fold(0, |wrong, (v, want)| wrong | (v ^ want));
            if wrong != 0 {
                misplaced(from, n);
            }
        } else {
            let (mut batch, mut left) = (batch, n);
            while let Some(&first) = batch.next() {
                let (p, k) = self.expect_next(first);
                if k >= self.per {
                    more_than_sent(p, k);
                }
                // The run: this message and its producer's next ones to the end of its batch,
                // as far as this read goes.
                let run = (BATCH - k % BATCH).min(self.per - k).min(left);
                let wrong = batch
                    .by_ref()
                    .take(run as usize - 1)
                    .zip(first + 1..)
                    .fold(0, |wrong, (v, want)| wrong | (v ^ want));
                if wrong != 0 {
                    not_one_run(p, k, run);
                }
                self.advance(p, run);
                left -= run;
            }
        }
        self.got += n;
        self.got >= self.expected && finish(&self.done)
    }
}

#[cold]
#[inline(never)]
fn more_than_sent(p: usize, k: u64) -> ! {
    panic!("out of order: producer {p} sent message {k}, past the last it sends")
}

#[cold]
#[inline(never)]
fn not_one_run(p: usize, k: u64, n: u64) -> ! {
    panic!("out of order: producer {p}'s {n} messages from {k} are not one run of the log")
}

#[cold]
#[inline(never)]
fn misplaced(from: u64, n: u64) -> ! {
    panic!("out of order: a batch of {n} from message {from} holds a message out of place")
}

/// A topic with `config` after `n` u64 records were published to it (its producer dropped).
fn filled(config: TopicConfig<u64>, n: u64) -> Topic<u64> {
    let t = Topic::<u64>::new("mem", config).unwrap();
    let mut p = t.producer().unwrap();
    for i in 0..n {
        p.publish(i).unwrap();
    }
    t
}

/// Adds one run of a table (each contender's figure, `None` where it did not run) to its rows,
/// naming the rows at the first run.
fn add_run<T>(rows: &mut Vec<Row<T>>, results: Vec<(&'static str, bool, Option<T>)>) {
    if rows.is_empty() {
        rows.extend(
            results
                .iter()
                .map(|(name, ours, _)| (*name, *ours, Vec::new())),
        );
    }
    for (row, (_, _, v)) in rows.iter_mut().zip(results) {
        row.2.extend(v);
    }
}

/// Column `q` of rows whose runs each gave several figures (a latency run's percentiles, a
/// replay's rate and waits), as rows of one figure a run, for [`Report::table`].
fn column<const K: usize>(rows: &[Row<[f64; K]>], q: usize) -> Vec<Row<f64>> {
    rows.iter()
        .map(|(n, o, v)| (*n, *o, v.iter().map(|x| x[q]).collect()))
        .collect()
}

/// Whether `bus` takes part in a throughput run with `producers` producers (it supports that
/// many, and `--only` names it).
fn runs_here<B: Bus>(bus: &B, o: &Options, producers: usize) -> bool {
    producers <= bus.max_producers() && picked(o, bus.name())
}

/// Whether `--only` (if given) picks the contender called `name`.
fn picked(o: &Options, name: &str) -> bool {
    match &o.only {
        // Names contain commas, so `;` separates when present (`--only "single producer, ring-like;Sleep"`).
        Some(only) => {
            let sep = if only.contains(';') { ';' } else { ',' };
            only.split(sep).any(|w| name.contains(w))
        }
        None => true,
    }
}

/// Throughput: messages per second of the slowest subscriber, in millions.
fn tput<B: Bus>(
    bus: &B,
    o: &Options,
    pins: &Pins,
    producers: usize,
    subs: usize,
    batch: bool,
) -> Option<f64> {
    if !runs_here(bus, o, producers) {
        return None;
    }
    let pins = &pins.within(o.cores).for_producers(producers);
    let per = o.records / producers as u64;
    let total = per * producers as u64;
    let done = Arc::new(Mutex::new(Vec::new()));
    let d2 = done.clone();
    let run = Run {
        capacity: CAPACITY,
        total: total as usize,
        batch,
    };
    let (txs, join) = bus.start(producers, subs, run, pins, move |_| {
        order_sink(producers, total, d2.clone())
    });
    let barrier = Arc::new(Barrier::new(producers + 1));
    let handles: Vec<_> = txs
        .into_iter()
        .enumerate()
        .map(|(p, tx)| {
            let (barrier, pins) = (barrier.clone(), pins.clone());
            thread::spawn(move || {
                // A local of the thread, as a sender made on its thread would be, rather than a
                // field of the closure, which is reached through a pointer.
                let mut tx = tx;
                pins.producer(p);
                barrier.wait();
                if batch {
                    send_batches(tx, p as u64, per);
                } else {
                    tx.send_run(p as u64, per);
                }
            })
        })
        .collect();
    // Taken before releasing the producers: a short run can finish before this thread wakes up.
    let start = Instant::now();
    barrier.wait();
    for h in handles {
        h.join().unwrap();
    }
    join();
    let done = done.lock().unwrap();
    assert_eq!(done.len(), subs);
    Some(total as f64 / (*done.iter().max().unwrap() - start).as_secs_f64() / 1e6)
}

/// Producer `p`'s `per` messages in batches of [`BATCH`] (the `batch` scenario's producer loop).
///
/// Out of line, taking the sender by value (a reference would make the caller keep it in memory
/// for the single-record loop too): inlined beside that loop (`Tx::send_run`), logbus's slice
/// publish (`Producer::publish_slice`, which tests the producer's short-path flag and works on
/// its kept state) made the compiler keep that state in memory for the whole function,
/// single-record loop included (stop 73: its next offset, segment end and slots loaded from the
/// stack and the flag tested at every record; tput 1→1 ×0.58 over 8 alternating rounds). A
/// user's loop that publishes single records has no batch loop beside it.
#[inline(never)]
fn send_batches<T: Tx>(mut tx: T, p: u64, per: u64) {
    let mut buf = Vec::with_capacity(BATCH as usize);
    let mut k = 0;
    while k < per {
        buf.clear();
        buf.extend(tagged_run(p, k, (k + BATCH).min(per)));
        tx.send_batch(&buf);
        k += buf.len() as u64;
    }
}

/// Latency: one producer sends on a fixed schedule (one message per `period`), each message
/// carrying its scheduled send time; subscribers record `now - scheduled` (so a late send counts
/// against the library: corrected for coordinated omission). Returns the merged histogram.
fn latency<B: Bus>(
    bus: &B,
    pins: &Pins,
    subs: usize,
    period: Duration,
    samples: u64,
) -> Histogram<u64> {
    let warmup = samples / 10;
    let total = warmup + samples;
    let base = Instant::now();
    let hists = Arc::new(Mutex::new(Vec::new()));
    let h2 = hists.clone();
    let run = Run {
        capacity: CAPACITY,
        total: total as usize,
        batch: false,
    };
    let (txs, join) = bus.start(1, subs, run, pins, move |_| {
        let hists = h2.clone();
        let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
        let mut got = 0u64;
        move |v: u64| {
            let now = base.elapsed().as_nanos() as u64;
            got += 1;
            if got > warmup {
                hist.saturating_record(now.saturating_sub(v).max(1));
            }
            if got == total {
                hists.lock().unwrap().push(std::mem::replace(
                    &mut hist,
                    Histogram::<u64>::new(1).unwrap(),
                ));
                return true;
            }
            false
        }
    });
    let mut tx = txs.into_iter().next().unwrap();
    let pins2 = pins.clone();
    thread::spawn(move || {
        pins2.producer(0);
        thread::sleep(Duration::from_millis(20)); // let the subscribers start waiting
        let start = base.elapsed();
        for k in 0..total {
            let due = start + period * k as u32;
            while base.elapsed() < due {
                std::hint::spin_loop();
            }
            tx.send(due.as_nanos() as u64);
        }
    })
    .join()
    .unwrap();
    join();
    let mut merged = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
    for h in hists.lock().unwrap().iter() {
        merged.add(h).unwrap();
    }
    merged
}

/// CPU time (user + system) of this process so far.
fn cpu_time() -> Duration {
    let mut r = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: getrusage writes a full rusage into the pointer we give it.
    let r = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, r.as_mut_ptr());
        r.assume_init()
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(r.ru_utime) + tv(r.ru_stime)
}

/// Idle: CPU used by 4 subscribers waiting for a message that does not come, as a fraction of one
/// core per subscriber.
fn idle<B: Bus>(bus: &B, pins: &Pins, wait: Duration) -> f64 {
    let (txs, join) = bus.start(
        1,
        4,
        Run {
            capacity: CAPACITY,
            total: 2,
            batch: false,
        },
        pins,
        |_| {
            let mut got = 0;
            move |_v: u64| {
                got += 1;
                got == 2
            }
        },
    );
    let mut tx = txs.into_iter().next().unwrap();
    tx.send(0);
    thread::sleep(Duration::from_millis(300)); // let them settle into their idle state
    let before = cpu_time();
    thread::sleep(wait);
    let used = cpu_time() - before;
    tx.send(1);
    drop(tx);
    join();
    used.as_secs_f64() / wait.as_secs_f64() / 4.0
}

/// Resident set size of this process.
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

// ------------------------------------------------------------------------------------------------
// Running everything.

/// The order in which [`each_bus!`] runs the contenders in run `run` of a table: the list's own
/// in run 0, a different shuffle in each later run (a fixed sequence, so that two binaries of the
/// harness run the same orders).
///
/// Each contender's runs then follow different neighbours. In one fixed order a contender always
/// ran right after the same one, and what that one left behind moved it: on the 2-vCPU EPYC guest
/// (stop 46), the ring-like single-producer topic's tput 1→2 ran ~300 M/s right after the
/// unbounded single-producer topic (which writes and frees ~140 MB a run) and ~410 M/s where it
/// came first, from the same binary (four invocations of six runs each); a predecessor with a
/// capacity left it alone. Shuffled, such a neighbour's mark falls on a different contender in
/// each run, rather than on the same one in all of them.
fn run_order(run: usize, n: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    if run == 0 {
        return order;
    }
    // Fisher-Yates with a 64-bit linear congruential generator (Knuth's MMIX constants), seeded
    // by the run: no statistical quality is needed, only orders that differ from run to run.
    let mut state = (run as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for i in (1..n).rev() {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let j = ((state >> 33) % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    order
}

/// Where the `async` scenario's threads go: the producer on the first core, the runtime thread
/// running every subscriber task where the first subscriber thread would be.
fn tasks_placement(pins: &Pins, subs: usize) -> String {
    match pins.producer_core(0) {
        None => format!("{subs} subscriber task(s) on one runtime thread, unpinned"),
        Some(c) => format!(
            "1 producer on core [{}], {subs} subscriber task(s) on one current-thread tokio runtime on core [{}]",
            c.id,
            pins.subscriber_core(0)
        ),
    }
}

/// Runs `$f` for each contender, in the order [`run_order`] gives for run `$run`, and returns
/// what each gave (whatever `$f` gives: a figure, or a latency run's five) in the list's order.
macro_rules! each_bus {
    ($f:ident, $run:expr) => {
        each_bus!(@in_order $f, $run;
            (
                &Logbus { name: "logbus single producer", config: logbus_single, single: true },
                true
            ),
            (
                &Logbus {
                    name: "logbus single producer, ring-like",
                    config: logbus_ring,
                    single: true
                },
                true
            ),
            (
                &Logbus {
                    name: "logbus single producer, ring-like, busy spin",
                    config: logbus_ring_spin,
                    single: true
                },
                true
            ),
            (
                &Logbus { name: "logbus multi producer", config: logbus_multi, single: false },
                true
            ),
            (
                &Logbus {
                    name: "logbus multi producer, ring-like",
                    config: logbus_multi_ring,
                    single: false
                },
                true
            ),
            (&Disruptor("disruptor BusySpin", disruptor::BusySpin), false),
            (
                &Disruptor("disruptor BusySpinWithSpinLoopHint", disruptor::BusySpinWithSpinLoopHint),
                false
            ),
            (
                &Disruptor("disruptor Sleep(10µs)", disruptor::Sleep::new(Duration::from_micros(10))),
                false
            ),
            (&Channels("crossbeam-channel per subscriber", CrossbeamChannel), false),
            (&Channels("kanal per subscriber", KanalChannel), false),
            (&TokioBroadcast, false),
            (&BusCrate, false),
            (&MultiQueue, false),
            (&MutexLog, false)
        )
    };
    // The `async` scenario's: subscribers as tasks (see `tasks`).
    (tasks $f:ident, $run:expr) => {
        each_bus!(@in_order $f, $run;
            (
                &tasks::LogbusTasks { name: "logbus single producer, ring-like, tasks", park_at_once: false },
                true
            ),
            (
                &tasks::LogbusTasks {
                    name: "logbus single producer, ring-like, tasks parking at once",
                    park_at_once: true
                },
                true
            ),
            (&tasks::TokioBroadcastTasks, false),
            (&tasks::ChannelTasks("tokio mpsc per subscriber, tasks", tasks::TokioMpsc), false),
            (&tasks::ChannelTasks("kanal per subscriber, tasks", tasks::KanalAsync), false)
        )
    };
    (@in_order $f:ident, $run:expr; $(($bus:expr, $ours:expr)),* $(,)?) => {{
        const N: usize = [$(stringify!($bus)),*].len();
        // The element type is `$f`'s, inferred from the assignments below.
        let mut out: Vec<Option<_>> = (0..N).map(|_| None).collect();
        for pick in run_order($run, N) {
            let mut k = 0usize;
            $(
                if k == pick {
                    out[k] = Some($f!($bus, $ours));
                }
                k += 1;
            )*
        }
        out.into_iter()
            .map(|r| r.expect("each contender ran once"))
            .collect::<Vec<_>>()
    }};
}

/// A table's row before it is printed: the contender's name, whether it is logbus, and what
/// each of its runs gave.
type Row<T> = (&'static str, bool, Vec<T>);

#[derive(Default)]
struct Report {
    md: String,
    svg_series: Vec<(String, Vec<f64>)>,
}

impl Report {
    fn line(&mut self, s: &str) {
        println!("{s}");
        self.md.push_str(s);
        self.md.push('\n');
    }

    /// One contender's row: the median, least and greatest of its runs `v`, and what `ratio`
    /// makes of the median in the last column (or columns); "n/a" where it did not run.
    fn row(&mut self, name: &str, v: &[f64], ratio: impl FnOnce(f64) -> String) {
        if v.is_empty() {
            return self.line(&format!("| {name} | n/a | | | |"));
        }
        let mut sorted = v.to_vec();
        let m = median(&mut sorted);
        let ratio = ratio(m);
        self.line(&format!(
            "| {name} | {m:.2} | {:.2} | {:.2} | {ratio} |",
            sorted[0],
            sorted[sorted.len() - 1]
        ));
    }

    /// A table of one figure per contender (median, min, max over runs), higher or lower better,
    /// with logbus's rows against the best peer (the peer with the best median) twice: median
    /// against median, and round by round ([`paired_ratio`]).
    fn table(&mut self, title: &str, unit: &str, rows: &[Row<f64>], higher_is_better: bool) {
        self.line("");
        self.line(title);
        self.line("");
        self.line(&format!(
            "| contender | median {unit} | min | max | logbus / best peer | round by round |"
        ));
        self.line("|---|---:|---:|---:|---:|---:|");
        let med: Vec<Option<f64>> = rows
            .iter()
            .map(|(_, _, v)| (!v.is_empty()).then(|| median(&mut v.clone())))
            .collect();
        let better = |a: f64, b: f64| if higher_is_better { a > b } else { a < b };
        let best = rows
            .iter()
            .zip(&med)
            .filter_map(|((_, ours, v), m)| m.filter(|_| !ours).map(|m| (m, v)))
            .fold(None, |best: Option<(f64, &Vec<f64>)>, (m, v)| match best {
                Some((b, _)) if !better(m, b) => best,
                _ => Some((m, v)),
            });
        let best_peer = best.map_or(f64::NAN, |(m, _)| m);
        for (name, ours, v) in rows {
            let paired = best
                .filter(|_| *ours)
                .and_then(|(_, peer)| paired_ratio(v, peer, higher_is_better));
            self.row(name, v, |m| {
                let shown = |ratio: f64| {
                    if ratio.is_nan() {
                        String::new()
                    } else if m < 0.005 && best_peer < 0.005 {
                        // Both below what the table prints (0.00): a ratio of noise, say so.
                        "both 0.00".to_owned()
                    } else {
                        format!("{ratio:.2}×")
                    }
                };
                let ratio = match (*ours, higher_is_better) {
                    (false, _) => f64::NAN,
                    (true, true) => m / best_peer,
                    (true, false) => best_peer / m,
                };
                format!("{} | {}", shown(ratio), shown(paired.unwrap_or(f64::NAN)))
            });
        }
        if !higher_is_better {
            self.line("\n(lower is better here, so the ratios are best peer / logbus: above 1 means logbus is better)");
        }
    }

    /// After a p50 table: logbus's p50s as multiples of the one-way floor, which #5 asks the 1→1
    /// p50 to be given as. Each row's `runs` are its runs' (p50, floor) in nanoseconds, the floor
    /// probed around that run ([`Kept::last_floor`]); the multiple is the median over the runs
    /// of each run's p50 over its own floor, since a table's runs can fall in different phases of
    /// the VM, whose floors differ sevenfold. Nothing where no logbus row ran.
    fn floor_multiples(&mut self, rows: &[Row<(f64, f64)>]) {
        let ours: Vec<String> = rows
            .iter()
            .filter(|(_, ours, _)| *ours)
            .filter_map(|(name, _, runs)| {
                let mut multiples: Vec<f64> = runs
                    .iter()
                    .filter(|(_, floor)| *floor > 0.0)
                    .map(|(p50, floor)| p50 / floor)
                    .collect();
                (!multiples.is_empty()).then(|| format!("{name} {:.1}×", median(&mut multiples)))
            })
            .collect();
        if !ours.is_empty() {
            self.line(&format!(
                "
p50 as a multiple of the one-way floor (each run's p50 over the floor probed around it, the median over the runs): {}",
                ours.join(", ")
            ));
        }
    }
}

/// The median over a table's rounds of `ours`'s figure against `peer`'s in the same round
/// (`ours / peer`, or `peer / ours` where lower is better, so that above 1 is logbus ahead);
/// `None` unless both ran in every round (index `i` of each is round `i`).
///
/// A round runs every contender once, one right after another, so each ratio pairs two runs
/// seconds apart. The VM this harness grew up on changes phase every few minutes (its one-way
/// floor 20–30 ns or 150–200 ns), and a table of five rounds takes minutes: its medians can put
/// one contender's slow-phase runs against another's fast-phase ones, which the pairs do not.
fn paired_ratio(ours: &[f64], peer: &[f64], higher_is_better: bool) -> Option<f64> {
    if ours.is_empty() || ours.len() != peer.len() {
        return None;
    }
    let mut ratios: Vec<f64> = ours
        .iter()
        .zip(peer)
        .map(|(&a, &b)| if higher_is_better { a / b } else { b / a })
        .collect();
    // `median` sorts with `partial_cmp`: a round of 0 / 0 (both below any figure) says nothing.
    ratios.retain(|r| !r.is_nan());
    (!ratios.is_empty()).then(|| median(&mut ratios))
}

fn main() {
    let mut o = Options {
        records: 10_000_000,
        runs: 5,
        samples: 200_000,
        slow_samples: 20_000,
        idle: Duration::from_secs(2),
        what: "all".into(),
        only: None,
        subs: None,
        producers: None,
        period: Duration::from_micros(2),
        cores: None,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    // A machine whose floor does not move (not this VM): probe and print, never wait or redo.
    let steady = quick || args.iter().any(|a| a == "--no-wait");
    let mut i = 0;
    while i < args.len() {
        let num = |i: usize| args.get(i).and_then(|s| s.parse::<u64>().ok());
        match args[i].as_str() {
            "--no-wait" => {}
            "--quick" => {
                o.records = 200_000;
                o.runs = 1;
                o.samples = 5_000;
                o.slow_samples = 500;
                o.idle = Duration::from_millis(200);
            }
            "--records" => {
                i += 1;
                o.records = num(i).expect("--records N");
            }
            "--runs" => {
                i += 1;
                o.runs = num(i).expect("--runs K") as usize;
            }
            "--only" => {
                i += 1;
                o.only = args.get(i).cloned();
            }
            "--subs" => {
                i += 1;
                o.subs = Some(num(i).expect("--subs N") as usize);
            }
            "--producers" => {
                i += 1;
                o.producers = Some(num(i).expect("--producers N") as usize);
            }
            "--cores" => {
                i += 1;
                o.cores = Some(num(i).expect("--cores N") as usize);
            }
            "--period" => {
                i += 1;
                o.period = Duration::from_nanos(num(i).expect("--period NS").max(1));
            }
            "--samples" => {
                i += 1;
                o.samples = num(i).expect("--samples S");
                o.slow_samples = (o.samples / 10).max(100);
            }
            w @ ("all" | "tput" | "batch" | "ceiling" | "lat" | "lat-fast" | "lat-slow"
            | "burst" | "async" | "async-shared" | "async-replay" | "idle" | "memory"
            | "floor") => o.what = w.to_owned(),
            other => {
                eprintln!("unknown argument {other}");
                std::process::exit(2);
            }
        }
        i += 1;
    }
    let pins = Pins::new();
    // `async` names its throughput tables and its two latency ones (`async-lat`, `async-lat-slow`).
    let want =
        |s: &str| o.what == "all" || o.what == s || (o.what == "async" && s.starts_with("async-"));
    let mut r = Report::default();
    r.line("# logbus perf: side by side");
    r.line(&format!(
        "\nmachine: {} cores ({}); {} records per throughput run; {} latency samples (lat-slow {}); median of {} run(s)",
        pins.cores.len(),
        std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|c| c.lines().find(|l| l.starts_with("model name")).map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned()))
            .unwrap_or_default(),
        o.records,
        o.samples,
        o.slow_samples,
        o.runs
    ));
    let table_wait = Duration::from_secs(if steady { 0 } else { 20 });
    let floor_now = |pins: &Pins| wait_for_fast_state(pins, FAST, table_wait);
    // Before each run: a shorter wait, so that a long slow phase costs minutes, not hours (and
    // none in the quick smoke run, which only checks that everything runs).
    let run_wait = Duration::from_secs(if steady { 0 } else { 2 });
    // The quick smoke run (and `--no-wait`) keeps every run (see `Kept`).
    let max_redos = if steady { 0 } else { MAX_REDOS };

    if want("floor") {
        let f = floor_now(&pins);
        let (handover, _) = probe_handover(&pins);
        r.line(&format!(
            "\n## floor\n\ncore-to-core one-way latency: {f:?}\n\none reader handing its core to another (two threads on core {} taking turns through `sched_yield`): {handover:?} a turn",
            pins.subscriber_core(0)
        ));
    }
    for (scenario, batch, in_tasks) in [
        ("tput", false, false),
        ("batch", true, false),
        ("async", false, true),
    ] {
        if !want(scenario) {
            continue;
        }
        for (producers, subs) in [(1usize, 1usize), (1, 2), (1, 4), (2, 2)] {
            if o.subs.is_some_and(|n| n != subs)
                || o.producers.is_some_and(|n| n != producers)
                || (in_tasks && producers > 1)
            {
                continue;
            }
            let mut kept = Kept::new(run_wait, max_redos, floor_now(&pins));
            let mut rows: Vec<Row<f64>> = Vec::new();
            for run in 0..o.runs {
                macro_rules! go {
                    ($bus:expr, $ours:expr) => {{
                        let bus = $bus;
                        if std::env::var_os("PERF_TRACE").is_some() {
                            eprintln!("{scenario} {producers}->{subs}: {}", bus.name());
                        }
                        let v = kept_tput(bus, &o, &pins, &mut kept, (producers, subs), batch);
                        if std::env::var_os("PERF_TRACE").is_some() {
                            match v {
                                Some(v) => eprintln!("  {v:.1} Mmsg/s"),
                                None => eprintln!("  not run here"),
                            }
                        }
                        (bus.name(), $ours, v)
                    }};
                }
                let results = if in_tasks {
                    each_bus!(tasks go, run)
                } else {
                    each_bus!(go, run)
                };
                add_run(&mut rows, results);
            }
            let placement = if in_tasks {
                tasks_placement(&pins.within(o.cores), subs)
            } else {
                pins.within(o.cores).describe(producers, subs)
            };
            r.table(
                &format!(
                    "## {scenario} {producers}→{subs} (Mmsg/s of the slowest subscriber; {placement}; floor {}{})",
                    kept.floor(),
                    kept.redone_note()
                ),
                "Mmsg/s",
                &rows,
                true,
            );
        }
    }
    if want("ceiling") {
        let mut kept = Kept::new(run_wait, max_redos, floor_now(&pins));
        ceiling_table(&mut r, &o, &pins, &mut kept);
    }
    for (scenario, period, samples, in_tasks) in [
        ("lat", o.period, o.samples, false),
        ("lat-fast", Duration::from_nanos(300), o.samples, false),
        ("lat-slow", Duration::from_micros(50), o.slow_samples, false),
        ("async-lat", o.period, o.samples, true),
        (
            "async-lat-slow",
            Duration::from_micros(50),
            o.slow_samples,
            true,
        ),
    ] {
        if !want(scenario) {
            continue;
        }
        for subs in [1usize, 2] {
            let mut kept = Kept::new(run_wait, max_redos, floor_now(&pins));
            // Where the readers share a core, the second to see a record waits for the core. (Tasks
            // share their runtime's thread wherever the cores are: no turn of threads to probe.)
            let shared = (1..subs).any(|i| pins.subscriber_core(i) == pins.subscriber_core(0));
            let handover = if shared && !in_tasks {
                format!(
                    "; a turn on the readers' core {:?}",
                    probe_handover(&pins).0
                )
            } else {
                String::new()
            };
            // Each run: p50, p90, p99, p99.9 and max (ns), then the floor probed around it.
            let mut rows: Vec<Row<[f64; 6]>> = Vec::new();
            for run in 0..o.runs {
                macro_rules! go {
                    ($bus:expr, $ours:expr) => {{
                        let bus = $bus;
                        let v = runs_here(bus, &o, 1).then(|| {
                            let h = kept.run(&pins, || {
                                thread::scope(|s| {
                                    s.spawn(|| latency(bus, &pins, subs, period, samples))
                                        .join()
                                        .unwrap()
                                })
                            });
                            let q = [0.5, 0.9, 0.99, 0.999].map(|q| h.value_at_quantile(q) as f64);
                            let floor = kept.last_floor().as_nanos() as f64;
                            [q[0], q[1], q[2], q[3], h.max() as f64, floor]
                        });
                        (bus.name(), $ours, v)
                    }};
                }
                let results = if in_tasks {
                    each_bus!(tasks go, run)
                } else {
                    each_bus!(go, run)
                };
                add_run(&mut rows, results);
            }
            let labels = ["p50", "p90", "p99", "p99.9", "max"];
            for (q, label) in labels.iter().enumerate() {
                let table = column(&rows, q);
                r.table(
                    &format!(
                        "## {scenario} 1→{subs} {label} (ns; one message per {period:?}; floor {} one-way{handover}{})",
                        kept.floor(),
                        kept.redone_note()
                    ),
                    "ns",
                    &table,
                    false,
                );
                if *label == "p50" {
                    let runs: Vec<Row<(f64, f64)>> = rows
                        .iter()
                        .map(|(n, o, v)| (*n, *o, v.iter().map(|x| (x[0], x[5])).collect()))
                        .collect();
                    r.floor_multiples(&runs);
                }
            }
            if scenario == "lat" {
                for (name, _, v) in rows.iter().filter(|(_, _, v)| !v.is_empty()) {
                    let med: Vec<f64> = (0..5)
                        .map(|q| median(&mut v.iter().map(|x| x[q]).collect::<Vec<_>>()))
                        .collect();
                    r.svg_series.push((format!("{name} (1→{subs})"), med));
                }
            }
        }
    }
    if want("burst") {
        // A sample of about a thousand records at full size (ten at `--quick`); 20 samples a
        // pause at full size.
        let per_sample = (o.records / 10_000).clamp(10, 1000);
        let samples = (o.records / 500_000).clamp(2, 20) as usize;
        for size in burst::SIZES {
            let shape = burst::Shape {
                size,
                bursts: (per_sample / size).max(1),
                samples,
            };
            let mut kept = Kept::new(run_wait, max_redos, floor_now(&pins));
            let mut rows: Vec<Row<[f64; 3]>> = Vec::new();
            for run in 0..o.runs {
                macro_rules! go {
                    ($bus:expr, $ours:expr) => {{
                        let bus = $bus;
                        let v = runs_here(bus, &o, 1).then(|| {
                            kept.run(&pins, || {
                                thread::scope(|s| {
                                    s.spawn(|| burst::burst(bus, &pins, shape)).join().unwrap()
                                })
                            })
                        });
                        (bus.name(), $ours, v)
                    }};
                }
                add_run(&mut rows, each_bus!(go, run));
            }
            let what = format!(
                "{} burst(s) of {size} a sample, {samples} samples; a ring or channel of {}; {}; floor {} one-way{}",
                shape.bursts,
                burst::CAPACITY,
                pins.describe(1, 1),
                kept.floor(),
                kept.redone_note()
            );
            r.table(
                &format!("## burst {size}, no pause (ns a burst: {size} published, then the producer spins until the subscriber has the last; {what})"),
                "ns",
                &column(&rows, 0),
                false,
            );
            for (q, pause) in burst::PAUSES.iter().enumerate() {
                r.table(
                    &format!(
                        "## burst {size}, the first burst after a {pause:?} pause (ns; {what})"
                    ),
                    "ns",
                    &column(&rows, q + 1),
                    false,
                );
            }
        }
    }
    if want("async-shared") {
        use tasks::SharedTasks;
        let run = Run {
            capacity: CAPACITY,
            total: o.records as usize,
            batch: false,
        };
        for subs in [1usize, 2, 4] {
            if o.subs.is_some_and(|n| n != subs) {
                continue;
            }
            let mut kept = Kept::new(run_wait, max_redos, floor_now(&pins));
            let mut rows: Vec<Row<f64>> = Vec::new();
            for k in 0..o.runs {
                macro_rules! go {
                    ($c:expr, $ours:expr) => {{
                        let c = $c;
                        let v = picked(&o, c.name())
                            .then(|| kept.run(&pins, || tasks::shared(c, &pins, run, subs)));
                        (c.name(), $ours, v)
                    }};
                }
                let results = each_bus!(@in_order go, k;
                    (&tasks::LogbusShared, true),
                    (&tasks::TokioBroadcastShared, false),
                    (&tasks::TokioMpscShared, false),
                    (&tasks::KanalShared, false)
                );
                add_run(&mut rows, results);
            }
            let placement = tasks_placement(&pins.within(o.cores), subs);
            r.table(
                &format!(
                    "## async-shared 1→{subs} (Mmsg/s of the slowest subscriber; the publisher a task too, on the subscribers' runtime, waiting while the source is full; {placement}{})",
                    kept.redone_note()
                ),
                "Mmsg/s",
                &rows,
                true,
            );
        }
    }
    if want("async-replay") {
        use tasks::Replay;
        // A history of a tenth of a throughput run's records, replayed by 1 or 4 tasks.
        let n = (o.records / 10).max(1) as usize;
        for subs in [1usize, 4] {
            let mut kept = Kept::new(run_wait, max_redos, floor_now(&pins));
            // Each run: the slowest task's Mmsg/s, then the neighbour's p99 and longest gap (µs).
            let mut rows: Vec<Row<[f64; 3]>> = Vec::new();
            for run in 0..o.runs {
                macro_rules! go {
                    ($c:expr, $ours:expr) => {{
                        let c = $c;
                        let v = picked(&o, c.name()).then(|| {
                            let (rate, gaps) = kept.run(&pins, || tasks::replay(c, &pins, n, subs));
                            let us = |q: f64| gaps.value_at_quantile(q) as f64 / 1e3;
                            [rate, us(0.99), gaps.max() as f64 / 1e3]
                        });
                        (c.name(), $ours, v)
                    }};
                }
                let results = each_bus!(@in_order go, run;
                    (&tasks::LogbusReplay { name: "logbus single producer, ring-like, tasks", budget: None }, true),
                    (
                        &tasks::LogbusReplay {
                            name: "logbus single producer, ring-like, tasks without a budget",
                            budget: Some(0)
                        },
                        true
                    ),
                    (&tasks::TokioBroadcastReplay, false),
                    (&tasks::ChannelReplay("tokio mpsc per subscriber, tasks", tasks::TokioMpsc), false),
                    (&tasks::ChannelReplay("kanal per subscriber, tasks", tasks::KanalAsync), false)
                );
                add_run(&mut rows, results);
            }
            let placement = tasks_placement(&pins.within(o.cores), subs);
            for (q, what, unit, higher) in [
                (0, "Mmsg/s of the slowest task", "Mmsg/s", true),
                (
                    1,
                    "p99 of a neighbour task's waits for its turn, µs",
                    "µs",
                    false,
                ),
                (
                    2,
                    "a neighbour task's longest wait for its turn, µs",
                    "µs",
                    false,
                ),
            ] {
                let table = column(&rows, q);
                r.table(
                    &format!(
                        "## async-replay 1→{subs}: {n} records in the log before {subs} task(s) replay them from the first ({what}; the neighbour yields in a loop on the same runtime; {placement}{})",
                        kept.redone_note()
                    ),
                    unit,
                    &table,
                    higher,
                );
            }
        }
    }
    if want("idle") {
        let mut rows = Vec::new();
        macro_rules! go {
            ($bus:expr, $ours:expr) => {{
                let bus = $bus;
                let v = thread::scope(|s| s.spawn(|| idle(bus, &pins, o.idle)).join().unwrap());
                (bus.name(), $ours, Some(v * 100.0))
            }};
        }
        for (name, ours, v) in each_bus!(go, 0) {
            rows.push((name, ours, v.into_iter().collect::<Vec<_>>()));
        }
        r.table(
            &format!(
                "## idle (% of one core per subscriber, 4 subscribers waiting {:?})",
                o.idle
            ),
            "%",
            &rows,
            false,
        );
    }
    if want("memory") {
        let n = o.records;
        // Retention first, in a fresh heap: what a long-running bounded topic costs.
        let before = rss_bytes();
        let t = filled(
            TopicConfig::default()
                .single_producer()
                .max_records(1 << 16),
            n,
        );
        let bounded = rss_bytes().saturating_sub(before);
        drop(t);
        // Then an unbounded topic (timestamps on, no keys): bytes per retained record.
        let before = rss_bytes();
        let t = filled(TopicConfig::default().single_producer(), n);
        let grown = rss_bytes().saturating_sub(before);
        drop(t);
        let after_drop = rss_bytes().saturating_sub(before);
        // glibc keeps freed heap pages mapped until asked: trimming shows they were freed.
        hand_back_freed_memory();
        let after_trim = rss_bytes().saturating_sub(before);
        // Bytes per retained record of an unbounded topic filled with `n` records; the topic is
        // dropped and its freed pages handed back before the next one.
        let bytes_per_record = |config: TopicConfig<u64>| {
            let before = rss_bytes();
            let t = filled(config, n);
            let grown = rss_bytes().saturating_sub(before);
            drop(t);
            hand_back_freed_memory();
            grown as f64 / n as f64
        };
        // Without timestamps (and without keys) a record costs its value alone.
        let plain = bytes_per_record(TopicConfig::default().single_producer().timestamps(false));
        // The default topic takes many producers: each slot has a stamp byte too, and every eight
        // slots a flag byte.
        let multi = bytes_per_record(TopicConfig::default());
        r.line(&format!(
            "\n## memory (u64 records)\n\n| measure | value |\n|---|---:|\n| RSS growth, {n} records through a topic keeping 65,536 | {:.1} MiB |\n| bytes per retained record, {n} records, unbounded single-producer topic | {:.2} (target ≤ size_of::<u64>() + 8 = 16) |\n| RSS above baseline after dropping that topic | {:.1} MiB |\n| the same after `malloc_trim(0)` (glibc keeps freed heap pages until asked) | {:.1} MiB |\n| bytes per retained record, {n} records, unbounded topic taking many producers (the default) | {:.2} |\n| bytes per retained record, {n} records, unbounded single-producer topic without timestamps | {:.2} |",
            bounded as f64 / 1048576.0,
            grown as f64 / n as f64,
            after_drop as f64 / 1048576.0,
            after_trim as f64 / 1048576.0,
            multi,
            plain
        ));
    }
    if quick || o.what != "all" || o.only.is_some() {
        return; // a smoke or partial run: keep the last full results
    }
    let _ = std::fs::create_dir_all("perf/results");
    let _ = std::fs::write("perf/results/latest.md", &r.md);
    if !r.svg_series.is_empty() {
        let _ = std::fs::write("perf/results/latency.svg", svg(&r.svg_series));
        println!("\n(wrote perf/results/latest.md and perf/results/latency.svg)");
    }
}

/// The `ceiling` scenario: single-record 1→1 for logbus (ring-like), the Disruptor's two best
/// waits, and the minimal rings of [`ceiling`], each figure beside logbus's; then logbus's batch
/// 1→1 and its single-record 1→1 beside what the subscriber's core reads when reading is all it
/// does, from the producer's core's lines and from its own ([`ceiling::read_limit`]).
fn ceiling_table(r: &mut Report, o: &Options, pins: &Pins, kept: &mut Kept) {
    use ceiling::Minimal;
    let (mut single, mut read) = (Rows::default(), Rows::default());
    for _ in 0..o.runs {
        single.next_run();
        read.next_run();
        macro_rules! go {
            ($bus:expr) => {{
                let bus = $bus;
                single.record(bus.name(), kept_tput(bus, o, pins, kept, (1, 1), false));
            }};
        }
        let ours = Logbus {
            name: "logbus single producer, ring-like",
            config: logbus_ring,
            single: true,
        };
        let ours_single = kept_tput(&ours, o, pins, kept, (1, 1), false);
        single.record(ours.name(), ours_single);
        go!(&Disruptor(
            "disruptor BusySpinWithSpinLoopHint",
            disruptor::BusySpinWithSpinLoopHint
        ));
        go!(&Disruptor(
            "disruptor Sleep(10µs)",
            disruptor::Sleep::new(Duration::from_micros(10))
        ));
        go!(&Minimal::<false, true>(
            "minimal ring: one call a record, pausing reader"
        ));
        go!(&Minimal::<false, false>(
            "minimal ring: one call a record, spinning reader"
        ));
        go!(&Minimal::<true, true>(
            "minimal ring: run in one loop, pausing reader"
        ));
        go!(&Minimal::<true, false>(
            "minimal ring: run in one loop, spinning reader"
        ));
        go!(&Minimal::<true, true, true>(
            "minimal ring: run in one loop storing its position, pausing reader"
        ));
        go!(&Minimal::<true, true, false, 8>(
            "minimal ring: run in one loop, end stored every 8th record, pausing reader"
        ));
        go!(&Minimal::<true, true, true, 8>(
            "minimal ring: run in one loop storing its position, end every 8th, pausing reader"
        ));
        if runs_here(&ours, o, 1) {
            read.record(
                "reading only, lines from the producer's core",
                Some(kept.run(pins, || ceiling::read_limit(pins, o.records, true, false))),
            );
            read.record(
                "reading only, lines already in the subscriber's core",
                Some(kept.run(pins, || ceiling::read_limit(pins, o.records, false, false))),
            );
            read.record(
                "reading only whole batches, lines from the producer's core",
                Some(kept.run(pins, || ceiling::read_limit(pins, o.records, true, true))),
            );
            read.record(
                "logbus ring-like, batches of 256",
                kept_tput(&ours, o, pins, kept, (1, 1), true),
            );
            let minimal = Minimal::<true, true>("minimal ring: batches of 256, pausing reader");
            read.record(
                minimal.name(),
                kept_tput(&minimal, o, pins, kept, (1, 1), true),
            );
            read.record("logbus ring-like, single records (above)", ours_single);
        }
    }
    let placement = pins.for_producers(1).describe(1, 1);
    r.line("");
    r.line(&format!(
        "## ceiling 1→1 (Mmsg/s of the subscriber, single records; {placement}; floor {}{})",
        kept.floor(),
        kept.redone_note()
    ));
    r.line("");
    r.line("The minimal rings are not peers: they bound what a watermark ring reaches here (see `perf/src/ceiling.rs`).");
    single.table(r, "/ logbus");
    if read.rows.is_empty() {
        return;
    }
    r.line("");
    r.line(&format!(
        "## read limit 1→1 (Mmsg/s of the subscriber; {placement})"
    ));
    r.line("");
    r.line("Reading only: the subscriber's core reads chunks of 32 Ki records just written by the producer's core (first and third rows) or by its own (second), with the harness's logbus reader loops and check, a record at a time as in `tput` (first two rows) or each batch whole as in `batch` (third); only the reading is timed (see `ceiling::read_limit`). The first row is what a 1→1 reader of single records gets with nothing else to wait for; the third, what the `batch` scenario's 1→1 reader gets.");
    read.table(r, "/ first row");
}

/// The rows of a table built run by run: each run records its figures in the same order, and the
/// first run makes the rows.
#[derive(Default)]
struct Rows {
    rows: Vec<(&'static str, Vec<f64>)>,
    /// The row this run records next.
    k: usize,
}

impl Rows {
    fn next_run(&mut self) {
        self.k = 0;
    }

    fn record(&mut self, name: &'static str, v: Option<f64>) {
        if self.k == self.rows.len() {
            self.rows.push((name, Vec::new()));
        }
        self.rows[self.k].1.extend(v);
        self.k += 1;
    }

    /// Prints the rows' medians, min and max, each median as a multiple of the first row's.
    fn table(&self, r: &mut Report, against: &str) {
        r.line("");
        r.line(&format!(
            "| contender | median Mmsg/s | min | max | {against} |"
        ));
        r.line("|---|---:|---:|---:|---:|");
        let base = self
            .rows
            .first()
            .filter(|(_, v)| !v.is_empty())
            .map(|(_, v)| median(&mut v.clone()));
        for (name, v) in &self.rows {
            r.row(name, v, |m| {
                base.map_or(String::new(), |b| format!("{:.2}×", m / b))
            });
        }
    }
}

/// A log-scale line plot of latency percentiles, one line per library.
fn svg(series: &[(String, Vec<f64>)]) -> String {
    let (w, h, left, top, bottom) = (900.0, 520.0, 70.0, 20.0, 40.0);
    let right = 330.0;
    let max = series
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .fold(1.0, f64::max);
    let (lo, hi) = (10f64.log10(), max.log10().ceil().max(2.0));
    let x = |i: usize| left + i as f64 * (w - left - right) / 4.0;
    let y = |v: f64| top + (hi - v.max(10.0).log10()) / (hi - lo) * (h - top - bottom);
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = write!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    for d in (lo as i32)..=(hi as i32) {
        let yy = y(10f64.powi(d));
        let _ = write!(
            s,
            r##"<line x1="{left}" x2="{}" y1="{yy}" y2="{yy}" stroke="#ddd"/><text x="5" y="{}">{}</text>"##,
            w - right,
            yy + 4.0,
            fmt_ns(10f64.powi(d))
        );
    }
    for (i, label) in ["p50", "p90", "p99", "p99.9", "max"].iter().enumerate() {
        let _ = write!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">{label}</text>"#,
            x(i),
            h - 15.0
        );
    }
    let colors = [
        "#d62728", "#ff7f0e", "#8c564b", "#1f77b4", "#17becf", "#2ca02c", "#9467bd", "#e377c2",
        "#7f7f7f", "#bcbd22", "#393b79", "#637939",
    ];
    for (k, (name, v)) in series.iter().enumerate() {
        let c = colors[k % colors.len()];
        let pts: Vec<String> = v
            .iter()
            .enumerate()
            .map(|(i, val)| format!("{},{}", x(i), y(*val)))
            .collect();
        let dash = if name.contains("1→2") {
            r#" stroke-dasharray="5,3""#
        } else {
            ""
        };
        let _ = write!(
            s,
            r#"<polyline fill="none" stroke="{c}" stroke-width="2"{dash} points="{}"/>"#,
            pts.join(" ")
        );
        let ly = top + 14.0 * k as f64;
        let _ = write!(
            s,
            r#"<line x1="{}" x2="{}" y1="{ly}" y2="{ly}" stroke="{c}" stroke-width="2"{dash}/><text x="{}" y="{}">{name}</text>"#,
            w - right + 10.0,
            w - right + 30.0,
            w - right + 35.0,
            ly + 4.0
        );
    }
    s.push_str("</svg>\n");
    s
}

fn fmt_ns(v: f64) -> String {
    if v >= 1e6 {
        format!("{} ms", v / 1e6)
    } else if v >= 1e3 {
        format!("{} µs", v / 1e3)
    } else {
        format!("{v} ns")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placement(cores: usize, producers: usize, subs: usize) -> (Vec<usize>, Vec<usize>) {
        let pins = Pins::from_ids((0..cores).collect()).for_producers(producers);
        let prods = (0..producers)
            .map(|p| pins.producer_core(p).unwrap().id)
            .collect();
        let subs = (0..subs).map(|i| pins.subscriber_core(i)).collect();
        (prods, subs)
    }

    #[test]
    fn a_tagged_run_is_each_message_tagged_in_order() {
        for p in 0..2 {
            let run: Vec<u64> = tagged_run(p, 5, 9).collect();
            let tagged_each: Vec<u64> = (5..9).map(|k| tagged(p, k)).collect();
            assert_eq!(run, tagged_each);
        }
        let last = (1 << 48) - 1;
        // The last message a producer can tag: the run holds it and nothing else.
        assert_eq!(
            tagged_run(1, last, last + 1).collect::<Vec<_>>(),
            [tagged(1, last)]
        );
    }

    #[test]
    fn the_order_check_reports_done_once_it_has_every_message_of_every_producer() {
        let done = Arc::new(Mutex::new(Vec::new()));
        let mut sink = order_sink(2, 4, done.clone());
        // Two producers, interleaved: each in its own order.
        assert!(!sink.take(tagged(0, 0)));
        assert!(!sink.take(tagged(1, 0)));
        assert!(!sink.take(tagged(1, 1)));
        assert!(done.lock().unwrap().is_empty());
        assert!(sink.take(tagged(0, 1)));
        assert_eq!(done.lock().unwrap().len(), 1);
    }

    #[test]
    #[should_panic(expected = "producer 0 sent 2, expected 1")]
    fn the_order_check_fails_on_a_gap() {
        let mut sink = order_sink(1, 10, Arc::new(Mutex::new(Vec::new())));
        sink.take(tagged(0, 0));
        sink.take(tagged(0, 2));
    }

    #[test]
    #[should_panic(expected = "producer 1 sent 1, expected 2")]
    fn the_order_check_fails_on_a_repeat_from_the_second_producer() {
        let mut sink = order_sink(2, 10, Arc::new(Mutex::new(Vec::new())));
        sink.take(tagged(1, 0));
        sink.take(tagged(0, 0));
        sink.take(tagged(1, 1));
        sink.take(tagged(0, 1));
        sink.take(tagged(1, 1));
    }

    #[test]
    #[should_panic(expected = "unknown producer 3")]
    fn the_order_check_fails_on_a_message_from_no_producer() {
        let mut sink = order_sink(2, 10, Arc::new(Mutex::new(Vec::new())));
        sink.take(tagged(3, 0));
    }

    #[test]
    fn the_batch_check_takes_whole_batches_in_order_and_reports_done_at_the_last() {
        let done = Arc::new(Mutex::new(Vec::new()));
        let mut sink = order_sink(1, 10, done.clone());
        assert!(!sink.take_batch([0, 1, 2].iter()));
        // Single messages and batches follow on from each other.
        assert!(!sink.take(3));
        assert!(!sink.take_batch((4..9).collect::<Vec<u64>>().iter()));
        assert!(done.lock().unwrap().is_empty());
        assert!(sink.take_batch([9].iter()));
        assert_eq!(done.lock().unwrap().len(), 1);
    }

    #[test]
    #[should_panic(expected = "a batch of 4 from message 2 holds a message out of place")]
    fn the_batch_check_fails_on_a_swap_inside_a_batch() {
        let mut sink = order_sink(1, 10, Arc::new(Mutex::new(Vec::new())));
        sink.take_batch([0, 1].iter());
        sink.take_batch([2, 4, 3, 5].iter());
    }

    /// Producer `p`'s messages `k..n`, tagged, as a read would hand them over.
    fn messages(p: u64, k: u64, n: u64) -> Vec<u64> {
        tagged_run(p, k, n).collect()
    }

    #[test]
    fn the_batch_check_of_two_producers_takes_their_batches_interleaved_and_split_across_reads() {
        // Each producer sends BATCH + 10: a whole batch, then a last one of 10.
        let per = BATCH + 10;
        let done = Arc::new(Mutex::new(Vec::new()));
        let mut sink = order_sink(2, 2 * per, done.clone());
        // A read that ends inside producer 1's first batch...
        let mut read = messages(0, 0, BATCH);
        read.extend(messages(1, 0, 100));
        assert!(!sink.take_batch(read.iter()));
        // ...the next takes up its rest, then each producer's short last batch, back to back.
        let mut read = messages(1, 100, BATCH);
        read.extend(messages(0, BATCH, per));
        read.extend(messages(1, BATCH, per - 1));
        assert!(!sink.take_batch(read.iter()));
        // Single messages and batches follow on from each other.
        assert!(done.lock().unwrap().is_empty());
        assert!(sink.take(tagged(1, per - 1)));
        assert_eq!(done.lock().unwrap().len(), 1);
    }

    #[test]
    #[should_panic(expected = "producer 0 sent 1, expected 2")]
    fn the_batch_check_of_two_producers_checks_each_producer_in_turn() {
        let mut sink = order_sink(2, 20, Arc::new(Mutex::new(Vec::new())));
        let mut read = messages(1, 0, 10);
        read.extend(messages(0, 0, 2));
        assert!(!sink.take_batch(read.iter()));
        sink.take_batch(messages(0, 1, 10).iter());
    }

    #[test]
    #[should_panic(expected = "producer 0's 256 messages from 0 are not one run of the log")]
    fn the_batch_check_of_two_producers_fails_on_a_batch_that_is_not_one_run() {
        let mut sink = order_sink(2, 2 * BATCH, Arc::new(Mutex::new(Vec::new())));
        // The other producer's message inside producer 0's first batch.
        let mut read = messages(0, 0, 100);
        read.push(tagged(1, 0));
        read.extend(messages(0, 100, BATCH));
        sink.take_batch(read.iter());
    }

    #[test]
    #[should_panic(expected = "producer 1 sent message 20, past the last it sends")]
    fn the_batch_check_of_two_producers_fails_on_a_message_past_the_last() {
        let mut sink = order_sink(2, 40, Arc::new(Mutex::new(Vec::new())));
        sink.take_batch(messages(1, 0, 20).iter());
        sink.take_batch(messages(1, 20, 21).iter());
    }

    #[test]
    #[should_panic(expected = "producer 1's 5 messages from 3 are not one run of the log")]
    fn the_batch_check_of_two_producers_fails_on_a_swap_inside_a_run() {
        let mut sink = order_sink(2, 2 * BATCH, Arc::new(Mutex::new(Vec::new())));
        sink.take_batch(messages(1, 0, 3).iter());
        sink.take_batch([3, 5, 4, 6, 7].map(|k| tagged(1, k)).iter());
    }

    #[test]
    fn round_by_round_pairs_each_round_with_the_same_round() {
        // Higher is better: rounds 2 / 4 / 6 against 1 / 4 / 2 are 2×, 1×, 3×.
        assert_eq!(
            paired_ratio(&[2.0, 4.0, 6.0], &[1.0, 4.0, 2.0], true),
            Some(2.0)
        );
        // Lower is better: the peer's figure over ours, so above 1 is still logbus ahead.
        assert_eq!(
            paired_ratio(&[100.0, 200.0, 50.0], &[200.0, 200.0, 200.0], false),
            Some(2.0)
        );
        // Only where both ran in every round.
        assert_eq!(paired_ratio(&[1.0, 2.0], &[1.0], true), None);
        assert_eq!(paired_ratio(&[], &[], true), None);
        // A round where both show nothing (0 / 0) is left out, not a panic in the sort.
        assert_eq!(paired_ratio(&[0.0, 3.0], &[0.0, 1.0], true), Some(3.0));
    }

    #[test]
    fn a_table_gives_the_median_ratio_and_the_round_by_round_one() {
        let mut r = Report::default();
        // The VM in its slow phase for our first three rounds and the peers' last three: median
        // against median says 0.20×, the same rounds say 2×.
        let rows = vec![
            ("logbus a", true, vec![1.0, 1.0, 1.0, 10.0, 10.0]),
            ("peer slow", false, vec![0.5, 0.5, 0.5, 0.5, 0.5]),
            ("peer best", false, vec![0.5, 0.5, 5.0, 5.0, 5.0]),
            ("peer absent", false, Vec::new()),
        ];
        r.table("## t", "Mmsg/s", &rows, true);
        let lines: Vec<&str> = r.md.lines().collect();
        assert!(
            lines.contains(&"| logbus a | 1.00 | 1.00 | 10.00 | 0.20× | 2.00× |"),
            "{}",
            r.md
        );
        assert!(
            lines.contains(&"| peer best | 5.00 | 0.50 | 5.00 |  |  |"),
            "{}",
            r.md
        );
        assert!(lines.contains(&"| peer absent | n/a | | | |"), "{}", r.md);
    }

    #[test]
    fn a_p50_table_gives_logbus_rows_as_multiples_of_each_runs_floor() {
        let mut r = Report::default();
        // Runs in both phases of the VM: 110 ns over a floor of 22 (5×), 800 over 160 (5×),
        // 120 over 20 (6×). The table's medians (120 ns, a 22 ns floor) would say 5.5×, and
        // over a slow-phase floor less than 1×.
        let rows = vec![
            (
                "logbus a",
                true,
                vec![(110.0, 22.0), (800.0, 160.0), (120.0, 20.0)],
            ),
            ("logbus not probed", true, vec![(100.0, 0.0)]),
            ("peer", false, vec![(50.0, 25.0)]),
        ];
        r.floor_multiples(&rows);
        assert_eq!(
            r.md.trim(),
            "p50 as a multiple of the one-way floor (each run's p50 over the floor probed around it, the median over the runs): logbus a 5.0×"
        );
        // No logbus row: no line.
        let mut quiet = Report::default();
        quiet.floor_multiples(&rows[2..]);
        assert!(quiet.md.is_empty(), "{}", quiet.md);
    }

    #[test]
    fn the_last_floor_is_the_mean_of_the_last_runs_two_probes() {
        let mut kept = Kept::new(Duration::ZERO, 0, Duration::from_nanos(150));
        // Only the table's first probe: no run kept yet.
        assert_eq!(kept.last_floor(), Duration::ZERO);
        kept.floors
            .extend([20, 30, 160, 200].map(Duration::from_nanos));
        assert_eq!(kept.last_floor(), Duration::from_nanos(180));
    }

    #[test]
    fn the_handover_probe_takes_every_turn() {
        let (per_turn, turns) = probe_handover(&Pins::new());
        assert_eq!(turns, 10_000);
        assert!(per_turn > Duration::ZERO);
    }

    #[test]
    fn every_thread_gets_its_own_core_where_there_are_enough() {
        assert_eq!(placement(16, 1, 4), (vec![0], vec![1, 2, 3, 4]));
        assert_eq!(placement(16, 2, 2), (vec![0, 1], vec![2, 3]));
    }

    #[test]
    fn on_two_cores_producers_share_the_first_and_subscribers_the_second() {
        assert_eq!(placement(2, 1, 4), (vec![0], vec![1, 1, 1, 1]));
        assert_eq!(placement(2, 2, 2), (vec![0, 0], vec![1, 1]));
        assert_eq!(placement(3, 2, 2), (vec![0, 0], vec![1, 2]));
    }

    #[test]
    fn cores_limits_the_runs_to_the_first_cores() {
        let within = |cores: usize, limit: Option<usize>, producers: usize, subs: usize| {
            let pins = Pins::from_ids((0..cores).collect())
                .within(limit)
                .for_producers(producers);
            let prods: Vec<usize> = (0..producers)
                .map(|p| pins.producer_core(p).unwrap().id)
                .collect();
            let subs: Vec<usize> = (0..subs).map(|i| pins.subscriber_core(i)).collect();
            (prods, subs)
        };
        // One core: everything on it.
        assert_eq!(within(16, Some(1), 1, 4), (vec![0], vec![0, 0, 0, 0]));
        assert_eq!(within(2, Some(1), 2, 2), (vec![0, 0], vec![0, 0]));
        // Three of sixteen: the two-core rule on cores 0-2.
        assert_eq!(within(16, Some(3), 1, 4), (vec![0], vec![1, 2, 1, 2]));
        // None, or more than there are: every core.
        assert_eq!(within(16, None, 1, 4), placement(16, 1, 4));
        assert_eq!(within(2, Some(8), 1, 2), placement(2, 1, 2));
        // Zero counts as one.
        assert_eq!(within(4, Some(0), 1, 1), (vec![0], vec![0]));
    }

    #[test]
    fn smt_siblings_come_after_every_physical_core() {
        // CPUs 0-3 on cores 0,1 of package 0 (siblings 0/2 and 1/3), CPU 4 with no topology.
        let topo = |id: usize| match id {
            4 => (None, None),
            id => (Some(0), Some(id % 2)),
        };
        assert_eq!(siblings_last(&[0, 1, 2, 3, 4], topo), vec![0, 1, 4, 2, 3]);
        // The same core id in two packages is two cores.
        let two = |id: usize| (Some(id / 2), Some(0));
        assert_eq!(siblings_last(&[0, 1, 2, 3], two), vec![0, 2, 1, 3]);
    }
}
