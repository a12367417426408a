//! Waiting for records on one or several readers: poll, yield, then park.
//!
//! Measured on the 2-core VM we develop on (DESIGN.md): exponential backoff lands a record paced
//! every 2 µs in the middle of a long spin and, with two readers sharing a core, holds the core for
//! a whole time slice. So a waiting reader polls at a flat short interval ([`WaitStrategy`]'s
//! `spin_polls`), yields for a while, polling between yields (`yield_for`: a futex wake-up costs
//! ~19 µs here, so this covers records paced up to ~100 µs apart), then parks on its waker. Parking
//! is the only step with a system call for the reader, and the publisher's side of it costs nothing
//! when nobody is parked (see `log`). Before all that, a reader that just caught up with the
//! producers pauses, yielding, in proportion to the run it took (`batch_pause`): readers that share
//! a core take turns, and a reader alone on its core stops pulling the producer's freshly written
//! cache lines a few records at a time; alone on its CPU, it watches the published end through
//! its pause and ends it once a burst is whole (`watch_pause`, `yield_watching`). A short run's
//! pause is one yield, or a few spin hints while the thread yielded less than a microsecond ago
//! (`pause_after`), so that records paced a few hundred nanoseconds apart do not land inside a
//! yield each; where that yield hands the core to another waiting thread, a short run's reader
//! looks once more first (`looks_before`), taking what came while it handed its run over before
//! the switch rather than a turn later. A thread that is the only one waiting for records on its
//! CPU (the process counts them by CPU: `WaitersByCpu` in `sync`) spins through every pause short
//! of the cap instead, watching it, polls on where its yielding phase would yield (`round_end`),
//! and yields once in 50 µs: there is nobody to take turns with, and a yield, 0.2–0.75 µs even
//! alone, is a window records land in. A thread that shares its CPU with another waiting thread
//! skips the first polling phase instead: the core is better spent on the other.
//! Where that other is the only one, and every other reader of its logs has taken the short run
//! this thread just took (the other read it while this one was away), the thread keeps the core
//! after the run instead of yielding, and polls a round before its first yield (`stays`): each
//! record then costs the core one switch between the two rather than two or more.
//! (A publisher blocked for room under `Overflow::Block` is counted too, while it polls and
//! yields, and skips its polls the same way: `Log::wait_for_room`.)
//! And a reader whose position is reserved but not yet published (a multi-producer publish in
//! flight) keeps yielding instead of parking.
//!
//! A reader of a single-producer log that keeps finding nothing new (`WATCH_AFTER` looks since its
//! last long run) tells the log it watches the published end, until it takes a long caught-up run
//! (`STREAMING_RUN`) or is dropped. While nobody watches, the producer keeps no private copy of its
//! next offset and reads it from the watermark instead, one store a publish fewer: a saturated
//! stream's readers look once a run, so that line is usually still in the producer's cache; a
//! paced stream's readers poll it between records, and the copy spares the producer a miss on it
//! (see `Writer::next` in `log`). A `Producer` on a single-producer topic without timestamps
//! keeps its own copy always, by value, and never loads the watermark (`Log::publish_kept`); the
//! count still serves the other single writers (the stamped topics' producers, `Topic::publish`).
//!
//! A consumer reading several partitions waits on all of them at once: its readers share one waker,
//! and the parking step announces it in every partition's log before sleeping.

use std::time::{Duration, Instant};

use crate::{
    clock,
    config::WaitStrategy,
    error::ReadError,
    log::{Log, Waker},
    reader::{Batch, Reader},
    sync::{spin_hint, yield_now, Arc},
};

/// How long a reader that caught up pauses per record of the run it just took: as long as a
/// stream of ~31 M records/s takes to publish one. A stream at least that fast fills each pause
/// with a longer run than the last, so its runs grow to what [`MAX_BATCH_PAUSE`] holds; a slower
/// one settles at short runs and short pauses (a paced stream's runs of one pause 32 ns: one
/// yield, or spin hints within a turn, see [`pause_after`]).
///
/// It was 8 ns (a threshold of 125 M/s) until this VM showed what that costs: the rate where
/// runs stop growing sat inside the range a saturated producer runs at when line transfers are
/// slow (its slowest state, a one-way floor of 150–250 ns: 50–80 M/s), so there the readers'
/// pauses shrank to one yield and their looks, each taking the producer's current line and the
/// published end, slowed the producer further. Alternating 8 and 32 ns builds: the fast state
/// alike for the ring-like topics (12 rounds of 1→1, 4 of every fan-out), the default
/// many-producer topic 1→1 32–34 → 35–37 M/s (4 of 4 rounds), the slow-state 1→1 samples 0.68×
/// the Disruptor at 8 ns against 0.74–1.01× at 32 ns (three), the 2 µs-paced latency unchanged.
/// The price: a stream of 31–125 M/s, whose runs used to stay short, now batches up to
/// [`MAX_BATCH_PAUSE`] like a faster one.
const PAUSE_PER_RECORD: Duration = Duration::from_nanos(32);

/// The longest pause after a run: what the first record published during it can wait for. Only
/// a stream of ~31 M records/s or more reaches it (runs of ~500 records); a paced stream's runs
/// of one pause 32 ns. It was 4 µs until the perf harness's own per-message check stopped
/// bounding the readers: with readers that keep up easily, a 1→1 reader alone on its core then
/// looked every 4 µs, and each look took the producer's current line and the published end from
/// it (the producer stalled on the store after it in ~40% of its samples). At 16 µs, alternating
/// binaries on the 2-core VM, 3 rounds: single-producer 1→1 154–220 → 238–280 M/s, many
/// producers 94–116 → 139–168; the other fan-outs and the 2 µs-paced latency unchanged.
const MAX_BATCH_PAUSE: Duration = Duration::from_micros(16);

/// Less than the shortest `sched_yield` measured on the 2-core VM (~0.1 µs): a pause this short is
/// not timed, but one yield, or spin hints while the thread yielded less than [`TURN_NANOS`] ago
/// (which reads the crate's TSC clock, ~9 ns here, rather than `Instant`, ~26 ns).
const SHORTEST_YIELD: Duration = Duration::from_nanos(100);

/// The longest a reader taking short runs keeps its core without yielding, in nanoseconds (see
/// [`pause_after`]).
///
/// A pause shorter than [`SHORTEST_YIELD`] (a run of up to three records) used to be one yield
/// every time. A lone `sched_yield` takes ~0.2 µs on the 2-vCPU Xeon VM, so a stream paced at a
/// few hundred nanoseconds landed most records inside one: at one record per 300 ns the 1→1 p50
/// was 0.72× the Disruptor's BusySpin (400 against 288–294 ns) and the p90 0.57×. Spin hints
/// instead, always, fixed that but let two readers sharing a core starve each other (2 µs-paced
/// 1→2 p50 ~950 ns → 54 µs: a reader that keeps finding records never yields). So a reader spins
/// through such a pause only while it yielded less than this long ago. Readers sharing a core
/// then still hand it over at every record paced 1 µs or more apart, and a faster stream's reader
/// taking short runs goes about this long at most between yields.
///
/// Alternating binaries on the 2-vCPU Xeon VM (medians of 3 runs a round, 6 rounds, ring-like
/// topic), against one yield a pause: 1→1 p50 ×0.66 and p90 ×0.79 at 300 ns, ×0.77 and ×0.83 at
/// 500 ns, alike at 1 and 2 µs (×0.95–1.03), the 2 µs-paced 1→2 p50 ×0.99 and p90 ×1.01 (8
/// rounds); that build also counted empty looks across short runs (see `WATCH_AFTER` in `log`).
/// Saturated 1→1 ×0.97 (8 rounds, 0.66–1.04), whose reader took no short-run pause at all in 10
/// M records (counted: ~300 pauses, all after long runs), so placement and noise. With 3 µs
/// instead of 1, the 300 ns p90 improved further but readers sharing a core waited: the 1 µs-
/// and 2 µs-paced 1→2 p90 ~3 µs against ~1–2.
const TURN_NANOS: u64 = 1_000;

/// The longest a thread that is the only one waiting for records on its CPU (see
/// [`WaitersByCpu`](crate::sync::WaitersByCpu)) goes without yielding in its pauses and its
/// yielding phase, in nanoseconds. Within it, such a thread spins through every pause under
/// [`TURN_NANOS`], and polls on at the end of each round of its yielding phase ([`round_end`]):
/// with nobody to take turns with, a yield only opens a window for records to wait in (a lone
/// `sched_yield` takes 0.55–0.75 µs on the 2-vCPU EPYC guest of stops 27 to 41, 0.2 µs on the
/// Xeon). Past it, the thread pauses as if it shared its CPU, once: a thread the count does not
/// see (not a logbus reader, or a reader not counted yet because it has not run since it came to
/// this CPU) gets the core at least this often. Saturated streams' pauses (from a microsecond)
/// still yield, alone or not, so that a producer on the same CPU runs while records pile up.
/// 50 µs is a choice, not a measured optimum: a yield's window then takes ~1% of a 300 ns-paced
/// stream's records, and an uncounted thread waits far less than a scheduler slice (0.75–3 ms).
/// A turn of 200 µs measured alike on the 50 µs-paced latency (stop 41, 10 alternating rounds:
/// 1→1 p50 ×1.02, p90 ×0.98), so the shorter turn, fairer to uncounted threads, stays.
///
/// Why: on the EPYC guest a reader of a stream paced at 300 ns, alone on its core, yielded after
/// each run at least once a microsecond, and every yield let two records wait: the 1→1 p50 was
/// 531 ns against the Disruptor's BusySpinWithSpinLoopHint 156 (0.29×; stop 39). Readers that do
/// share a core (1→2, 1→4) are counted on it, and pause exactly as before. Runs of 4 to 31 records
/// pause spinning too: with yields, each such pause's yield piled up the next run, and about one
/// wait in ten was one of them (counted over a 300 ns-paced run: 13,270 timed pauses in 148,251
/// waits).
///
/// Alternating binaries on the EPYC guest (medians of 3 runs a round, 6 rounds, the ring-like
/// single-producer topic; median of the rounds' ratios): 300 ns-paced 1→1 p50 772 → 156 ns
/// (×0.20) and p90 1249 → 238 ns (×0.20), the SpinLoopHint's ~155 and ~213 in the same runs;
/// 300 ns-paced 1→2 alike (p50 ×0.97, p90 ×1.02). Spinning through the long pauses as well
/// measured the same there.
const ALONE_TURN_NANOS: u64 = 50_000;

/// How a reader that caught up with the producers pauses before it looks again.
#[derive(Debug, PartialEq, Eq)]
enum Pause {
    /// This many spin hints, keeping the core.
    Spin(u64),
    /// No pause, and a round of polls before the thread's first yield, instead of a short run's
    /// yield: the other readers of its logs have taken the run already ([`stays`]).
    Stay,
    /// Spin hints until this many nanoseconds have passed since `now`, keeping the core, unless
    /// the records stop coming first ([`watch_pause`]).
    Watch { nanos: u64, now: u64 },
    /// One yield, at `now`: the thread's turn starts again there.
    Yield { now: u64 },
    /// Yields until this much time has passed; where `restart` says when, the thread's turn
    /// starts again there. A thread alone on its CPU `watch`es whether the records stop coming
    /// ([`yield_watching`]).
    YieldFor {
        pause: Duration,
        restart: Option<u64>,
        watch: bool,
    },
}

/// The pause after a caught-up run of `fed` records, for a waiting thread whose turn started at
/// `yielded_at` (in [`clock::now_nanos`]'s terms, as `now` reads it: not for a saturated stream's
/// pause), and that can ask whether it is `alone` on its CPU among the threads that wait for
/// records (see [`WaitersByCpu`](crate::sync::WaitersByCpu); asked only where the answer matters,
/// since it reads the CPU number).
///
/// A thread that shares its CPU, or cannot tell, pauses as it did before the count: a long run's
/// pause is timed ([`batch_pause`]), yielding; a short one's is one yield, or spin hints (one a
/// record) while the thread yielded less than [`TURN_NANOS`] ago. A thread alone on its CPU spins
/// through its pauses instead, which hand nothing to anyone, watching whether the records stop
/// coming ([`watch_pause`]), and once its turn of [`ALONE_TURN_NANOS`] is over yields as if it
/// shared, which starts the next. A pause at its cap ([`MAX_BATCH_PAUSE`], a saturated stream's)
/// yields either way, and reads no clock; alone, it looks a few times whether the records stopped
/// ([`yield_watching`]).
fn pause_after(
    fed: u64,
    yielded_at: u64,
    now: impl FnOnce() -> u64,
    alone: impl FnOnce() -> bool,
) -> Pause {
    let pause = batch_pause(fed);
    if pause >= MAX_BATCH_PAUSE {
        // A saturated stream's pause (runs of 500 records or more), alone or not: a thread the
        // count does not see (a producer on this CPU) gets the core while the records pile up.
        return Pause::YieldFor {
            pause,
            restart: None,
            watch: alone(),
        };
    }
    let short = pause < SHORTEST_YIELD;
    let now = now();
    // Wrapping: a clock that went back (the stamps' wall clock can) makes a huge difference, so
    // the thread yields and its turn starts again, rather than spinning until the clock is back.
    let since = now.wrapping_sub(yielded_at);
    if short && since < TURN_NANOS {
        return Pause::Spin(fed);
    }
    if !alone() {
        return if short {
            Pause::Yield { now }
        } else {
            Pause::YieldFor {
                pause,
                restart: None,
                watch: false,
            }
        };
    }
    match (short, since < ALONE_TURN_NANOS) {
        (true, true) => Pause::Spin(fed),
        (false, true) => Pause::Watch {
            nanos: u64::try_from(pause.as_nanos()).unwrap_or(u64::MAX),
            now,
        },
        (true, false) => Pause::Yield { now },
        (false, false) => Pause::YieldFor {
            pause,
            restart: Some(now),
            watch: true,
        },
    }
}

/// Whether a waiting thread whose short run's pause is a yield ([`Pause::Yield`]) stays on its
/// CPU instead ([`Pause::Stay`]): where its CPU counts two waiting threads, itself included (see
/// [`WaitersByCpu`](crate::sync::WaitersByCpu)), and every other reader of its logs has taken the
/// run already ([`taken_by_others`]). Where the other waiting thread there is one of those
/// readers, it read the run while this one was away, and the yield would only hand it a core it
/// has nothing to do with: each switch takes a turn (the harness's handover probe: ~1.4–1.8 µs
/// on the 2-core EPYC guest). Where it waits for another log's records, it gets the core a round
/// of polls later than it would have (~4 µs with the default strategy's 128 polls a round), as
/// it does after any round in the yielding phase. With three or more waiting threads, or a
/// reader of its logs that has not taken the run (one that did not get the core since it came),
/// it yields as before.
///
/// Why: two readers sharing a core, each yielding after every record it took, switched at
/// every record twice or more (to the one that had not taken it yet, back to the first, which
/// found nothing and yielded again at once), for records paced 2 µs apart: most records came
/// during a switch and waited for it. The second reader to take a record now keeps the core, so
/// the two take turns being the first to see one, and each record costs the core one switch.
///
/// Alternating binaries on the 2-core EPYC guest (stop 74; medians of 3 runs a round, the median
/// of the rounds' ratios, the ring-like single-producer topic): 2 µs-paced 1→2 p50 ×0.96 and
/// p90 ×0.65 (8 rounds; the p90 ~3.3 → ~1.7–2.2 µs, one turn over the first reader's), 1→1 alike
/// (×1.00); 50 µs-paced 1→2 p50 ×1.02 and ×1.07, p90 ×0.83 and ×1.04 (two sets of 6); 300
/// ns-paced 1→2 p50 ×1.03, p90 ×1.07 (6, 0.96–1.41); saturated tput 1→2 / 1→4 ×1.00 / ×1.00 (8)
/// and batch ×1.03 / ×1.00 (6). A first build stayed wherever the thread came back from a yield
/// to records, on the count alone: p50 ×0.87 and p90 ×0.75 at 2 µs, but at 50 µs the p90 ×1.45
/// (6.2–9.2 µs in three rounds of six): records that came during a switch, which the other had
/// not seen, then waited for the stayer's round of polls.
fn stays<T: Send + Sync + 'static>(readers: &mut [Reader<T>]) -> bool {
    readers
        .first_mut()
        .is_some_and(|first| first.waits_on.settle_counting() == Some(2))
        && taken_by_others(readers)
}

/// Runs shorter than this look once more before a pause that hands the core over
/// ([`looks_before`]): their pause is under ~2 µs ([`batch_pause`]), about one switch between two
/// threads on a core.
const LOOK_BEFORE_HANDING_OVER: u64 = 64;

/// Whether a reader that caught up after a run of `fed` records looks once more before `pause`:
/// where the run was short ([`LOOK_BEFORE_HANDING_OVER`]) and the pause yields to other threads
/// waiting on its CPU ([`hands_over`]), unless the wait before this one `looked` so and found
/// records. Once between two hand-overs, then: a reader whose handling takes about as long as the
/// stream's pace would otherwise find a record or two at every such look and keep the core from
/// the threads it shares it with (another log's reader, say) until the kernel preempts it.
///
/// Handing its run to its caller takes the reader time, and records published meanwhile are
/// there to take: a yield hands the core to another reader for a turn (a switch, ~1.4–1.8 µs on
/// the 2-core EPYC guest), and those records waited for that turn and the next switch back. A
/// paced stream's readers sharing a core took turns of one run each; now each takes what came
/// during its run before it yields, and the other's turn starts that look and a record or two
/// later. A long run (a saturated stream's) still yields first, so that readers sharing a core
/// take turns and the records pile up, and a reader alone on its CPU pauses as before: a first
/// form that looked before every short run's pause, alone or not, took the producer's freshly
/// written lines a few records at a time there, and ran bursts of 1 / 10 / 100 (the Disruptor's
/// benchmark) ×1.05 / ×1.08 / ×1.08 slower (8 rounds).
///
/// Measured on the 2-core EPYC guest with the harness's ring-like single-producer topic (medians
/// of 3 runs a round, the median of the rounds' ratios; lower is better for latency, higher for
/// throughput). One binary with the look switched on and off by hand (unbounded): 300 ns-paced
/// 1→2 p50 ×0.78 and p90 ×0.91 (8 rounds), 50 µs-paced 1→2 p90 ×0.76 and p50 ×1.00 (4), 2
/// µs-paced 1→2 p50 ×1.01 (6); saturated tput 1→2 / 1→4 ×1.00 / ×1.00 and batch ×0.96 / ×0.99
/// (6 and 4 rounds); readers alone on their CPU, which this does not change, alike. Against stop
/// 76's engine, in the same 8 rounds: 300 ns-paced 1→2 p50 ×0.80 and p90 ×0.89 with the bound
/// of once between hand-overs, ×0.77 and ×0.86 without it. The harness's reader stamps each
/// record with `Instant::now()` (~30 ns here), so a run of 15 takes ~0.5 µs to hand over. A
/// scratch loop of two readers on one core, stamping so, showed the turns: one run each before,
/// a run and then the one or two records that came during it now.
///
/// The trade, where a busy reader shares the core with a sparse one: the busy reader keeps it a
/// look and a record or two longer each turn. A scratch with a reader of a 300 ns-paced topic
/// handling each record for 100–150 ns and a reader of a 20 µs-paced topic on one core (4–6
/// rounds a setting, against stop 76's engine): the busy reader's p50 ×0.55–0.6 (6.1–8.4 µs →
/// 3.6–5.0), the sparse one's p50 noisy (0.15–3.2 µs → 0.4–3.2) and its p90 ×1.1–1.4 (6.5–10.0
/// µs → 8.2–15.1, one round 154 µs).
fn looks_before(fed: u64, pause: &Pause, looked: bool) -> bool {
    !looked && fed < LOOK_BEFORE_HANDING_OVER && hands_over(pause)
}

/// Whether `pause` yields to other threads waiting on the thread's CPU: [`Pause::Yield`], or
/// [`Pause::YieldFor`] unwatched, which a thread alone on its CPU never gets (alone, it gets
/// `Yield` only at its once-a-long-turn yield, where one more look is nothing).
#[inline(always)]
fn hands_over(pause: &Pause) -> bool {
    matches!(
        pause,
        Pause::Yield { .. } | Pause::YieldFor { watch: false, .. }
    )
}

/// Where [`looks_before`] says so, [`look`] before `pause`, noting in the first reader whether it
/// found records, so that the next pause hands the core over first. Out of line, and called only
/// for a pause that [`hands_over`]: inlined into [`wait_any`] (without the call's guard), the
/// look moved the code of a reader alone on its CPU, which never needs it, and that reader's
/// saturated 1→1 ran ×0.87 and its batches ×0.74 against the build before (alternating
/// binaries, 6 and 4 rounds), where one binary with the look switched on and off by hand had
/// measured them alike.
#[inline(never)]
fn look_before_handing_over<T: Send + Sync + 'static>(
    readers: &mut [Reader<T>],
    from: usize,
    waker: &Waker,
    limit: u64,
    fed: u64,
    pause: &Pause,
) -> Look {
    let looked = std::mem::take(&mut readers[0].looked_before);
    if !looks_before(fed, pause, looked) {
        return Ok(None);
    }
    let seen = look(readers, from, waker, limit);
    // Records only: an interrupt ends the wait and says nothing about the turns.
    readers[0].looked_before = matches!(seen, Ok(Some(Waited::Ready(_))));
    seen
}

/// Whether every other reader of each of `readers`' logs has taken everything `readers` took, and
/// each log has another reader (see [`stays`]). Stores the readers' positions first.
fn taken_by_others<T: Send + Sync + 'static>(readers: &mut [Reader<T>]) -> bool {
    readers.iter_mut().all(|r| {
        r.publish_position();
        r.log().read_by_others(r.position())
    })
}

/// How often a reader pausing alone on its CPU looks at the published end ([`watch_pause`]), in
/// nanoseconds: a few spin hints apart.
const WATCH_EVERY_NANOS: u64 = 32;

/// When a reader that yields through its pause ([`yield_watching`]) first looks at the published
/// end; it looks again at twice the time, and so on.
const FIRST_YIELDING_LOOK: Duration = Duration::from_micros(1);

/// What a pausing reader set has seen of the published end: the sum of its readers' ends where
/// they caught up, and at the last look (ends only grow, so the sum moves when any end does), and
/// how many looks found it moved.
///
/// A burst comes whole, or nearly: a publish of a slice moves the end once. A stream that keeps
/// coming moves it at look after look, and stops for a moment now and then (a page fault, ~1.5
/// µs on the EPYC guest; a segment switch): ending the pause there cut its runs short, and the
/// shorter pauses that followed were watched closely, each look a line the producer had to win
/// back. The default topic's tput 1→1 ran ×0.74 with every stop ending the pause (6 alternating
/// rounds). So the records must have come in at most `comings` looks; past that the stream is
/// taken to be flowing, and the pause goes on unwatched.
struct Watch {
    caught_up: u64,
    last: u64,
    comings: u8,
}

/// What a look during a pause found.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    /// Nothing published since the readers caught up.
    Nothing,
    /// Records published since the look before.
    Coming,
    /// Records published since the look before, at more looks than a burst takes: the rest of
    /// the pause goes unwatched.
    Flowing,
    /// Records published since the readers caught up, none since the look before: a burst,
    /// whole (or a reader in error, lagged or closed, which the caller's look reports).
    Stopped,
}

impl Watch {
    /// For readers that have caught up and taken everything they found, and a burst that
    /// comes in at most `comings` looks.
    fn new<T: Send + Sync + 'static>(readers: &[Reader<T>], comings: u8) -> Self {
        let caught_up = readers
            .iter()
            .fold(0u64, |sum, r| sum.wrapping_add(r.ready_end()));
        Watch {
            caught_up,
            last: caught_up,
            comings,
        }
    }

    /// Looks at every reader's published end again. A reader's error (a lag, which
    /// [`Reader::look_again`] leaves where it is, or a close) ends the pause as `Stopped`: the
    /// read after the pause reports it. The error itself is not kept here.
    fn look<T: Send + Sync + 'static>(&mut self, readers: &mut [Reader<T>], limit: u64) -> Seen {
        let ends = readers.iter_mut().try_fold(0u64, |sum, r| {
            r.look_again(limit).ok().map(|end| sum.wrapping_add(end))
        });
        match ends {
            Some(end) if end != self.last => {
                self.last = end;
                if self.comings == 0 {
                    return Seen::Flowing;
                }
                self.comings -= 1;
                Seen::Coming
            }
            Some(end) if end == self.caught_up => Seen::Nothing,
            _ => Seen::Stopped,
        }
    }
}

/// How many pauses in a row a reader set skips once its watched pauses ended twice in a row with
/// the records stopped ([`Bursts`]): the next is watched again.
const BURSTY_SKIPS: u8 = 7;

/// What a reader set's watched pauses found lately, kept in its first reader: a stream that
/// comes in bursts its producer then waits on (each watched pause ended with the records
/// stopped) gains nothing from a pause, and loses the watch's confirming look at every burst
/// (~0.1 µs on a burst of 10). After two such pauses in a row the set skips the next
/// [`BURSTY_SKIPS`] pauses and looks at once, as a reader that never pauses does; the one after
/// them is watched again, so a stream that starts flowing is seen within eight runs, and one
/// watched pause that runs its course ends the skipping.
#[derive(Debug, Default)]
pub(crate) struct Bursts {
    /// Watched pauses in a row that ended with the records stopped.
    streak: u8,
    /// Pauses left to skip.
    skips: u8,
}

impl Bursts {
    /// Whether to skip this pause (counting it).
    fn skip(&mut self) -> bool {
        if self.skips == 0 {
            return false;
        }
        self.skips -= 1;
        true
    }

    /// A watched pause ended; `stopped`: because the records stopped.
    fn watched(&mut self, stopped: bool) {
        if stopped {
            self.streak = self.streak.saturating_add(1);
            if self.streak >= 2 {
                self.skips = BURSTY_SKIPS;
            }
        } else {
            self.streak = 0;
        }
    }
}

/// How a watched pause ended.
#[derive(Debug, PartialEq, Eq)]
enum WatchEnd {
    /// The records stopped ([`Seen::Stopped`]).
    Stopped,
    /// It lasted its length, keeping the core.
    Lasted,
    /// Nothing came within a turn; it yielded from this time ([`clock::now_nanos`]) to its end.
    Yielded(u64),
}

/// Spins through a pause of `nanos` that began at `start` (in [`clock::now_nanos`]'s terms),
/// looking at the published end every [`WATCH_EVERY_NANOS`], and ends it as soon as the records
/// stop coming ([`Seen::Stopped`]); records that keep coming past a burst's two looks
/// ([`Seen::Flowing`]) are a stream, and it spins through the rest unwatched. Where nothing at
/// all is published within a turn ([`TURN_NANOS`]), it yields for the rest of the pause
/// instead, as a pause did before: a producer on this CPU (which the count of waiting threads
/// does not see) publishes only when it gets the core; then the thread's turn starts again at
/// its first yield.
///
/// Why: the pause is a bet that the stream goes on, taken on the run's length alone; a burst
/// loses it. A producer that publishes a burst and then waits for what its reader does with it
/// (a request and its reply, the Disruptor's own benchmark) waited out the whole pause at every
/// burst: 3.2 µs after a burst of 100, where the burst itself took ~0.5 µs to go round. A look
/// costs a stream that keeps coming a line transfer; it pays three a pause here (two with
/// [`yield_watching`] at the cap). A burst published a record at a time, past two looks, is taken
/// for a stream: it waits out the pause, as before.
#[inline(never)]
fn watch_pause<T: Send + Sync + 'static>(
    readers: &mut [Reader<T>],
    limit: u64,
    nanos: u64,
    start: u64,
) -> WatchEnd {
    // A slice's burst moves the end once; a look may land inside a many-producer publish.
    let mut watch = Watch::new(readers, 2);
    let mut next_look = WATCH_EVERY_NANOS;
    loop {
        spin_hint();
        let now = clock::now_nanos();
        // Wrapping: a clock that went back ends the pause.
        let t = now.wrapping_sub(start);
        if t >= nanos {
            return WatchEnd::Lasted;
        }
        if t < next_look {
            continue;
        }
        next_look = t + WATCH_EVERY_NANOS;
        match watch.look(readers, limit) {
            Seen::Coming => {}
            Seen::Flowing => {
                while clock::now_nanos().wrapping_sub(start) < nanos {
                    spin_hint();
                }
                return WatchEnd::Lasted;
            }
            Seen::Stopped => return WatchEnd::Stopped,
            Seen::Nothing if t < TURN_NANOS => {}
            Seen::Nothing => loop {
                yield_now();
                if clock::now_nanos().wrapping_sub(start) >= nanos {
                    return WatchEnd::Yielded(now);
                }
            },
        }
    }
}

/// Yields through a pause of `pause`, and looks at the published end after
/// [`FIRST_YIELDING_LOOK`] of it, then at twice the time, and so on: ends it where a look finds the
/// records stopped ([`Seen::Stopped`]), as [`watch_pause`] does more closely. A stream that
/// keeps coming pays two looks a pause (at 1 and 2 µs of [`MAX_BATCH_PAUSE`]:
/// [`Seen::Flowing`]); a burst of more records than a watched pause is measured for (500) is
/// taken ~2 µs after it came rather than at the end of the pause. Returns whether the records
/// stopped.
#[inline(never)]
fn yield_watching<T: Send + Sync + 'static>(
    readers: &mut [Reader<T>],
    limit: u64,
    pause: Duration,
) -> bool {
    let start = Instant::now();
    // Looks a microsecond or more apart: a burst has come whole by the first that sees it.
    let mut watch = Watch::new(readers, 1);
    let mut look_at = FIRST_YIELDING_LOOK;
    loop {
        yield_now();
        let t = start.elapsed();
        if t >= pause {
            return false;
        }
        if t >= look_at {
            look_at = t.saturating_mul(2);
            match watch.look(readers, limit) {
                Seen::Stopped => return true,
                Seen::Flowing => look_at = Duration::MAX,
                Seen::Nothing | Seen::Coming => {}
            }
        }
    }
}

/// What a reader set in its yielding phase does when a round of polls ends.
#[derive(Debug, PartialEq, Eq)]
enum RoundEnd {
    /// Polls on, keeping the core.
    Poll,
    /// Yields; where `restart` says when, the thread's turn starts again there.
    Yield { restart: Option<u64> },
}

/// How a round of polls in the yielding phase ends, for a thread whose turn started at
/// `yielded_at` (as in [`pause_after`]) and that can ask whether it is `alone` on its CPU among
/// the threads that wait for records.
///
/// A thread that shares its CPU, or cannot tell, yields, as it did before the count, and reads no
/// clock. A thread alone on its CPU polls on within its turn of [`ALONE_TURN_NANOS`]: its yields
/// handed the core to nobody, and a record published during one waited for it to return (on the
/// EPYC guest a lone yield takes 0.55–0.75 µs and a round of 128 polls ~3.6 µs, so a yield was
/// about a sixth of the phase, where records paced 50 µs apart land). Once its turn is over it
/// yields, which starts the next, so a thread the count does not see gets the core at least that
/// often.
///
/// Alternating binaries on the EPYC guest (stop 41; medians of 3 runs a round, 20 rounds, the
/// ring-like single-producer topic and the Disruptor's BusySpin in each run): 50 µs-paced 1→1
/// p50 ×0.89 and p90 ×0.57 (against the BusySpin of the same runs, logbus's p50 and p90 went from
/// 1.06× and 1.36× its figures to 0.99× and 0.95×); 50 µs-paced 1→2, whose readers share a
/// core, alike (p50 ×1.00, p90 ×1.03); the 2 µs-paced latency (8 rounds) and saturated
/// throughput (8 rounds, every fan-out), whose readers do not get this far, alike.
fn round_end(yielded_at: u64, now: impl FnOnce() -> u64, alone: impl FnOnce() -> bool) -> RoundEnd {
    if !alone() {
        return RoundEnd::Yield { restart: None };
    }
    let now = now();
    if now.wrapping_sub(yielded_at) < ALONE_TURN_NANOS {
        RoundEnd::Poll
    } else {
        RoundEnd::Yield { restart: Some(now) }
    }
}

/// The pause after a caught-up run of `n` records. The perf harness's minimal rings
/// (`perf/src/ceiling.rs`) pause the same way and repeat these figures: change both.
fn batch_pause(n: u64) -> Duration {
    PAUSE_PER_RECORD
        .saturating_mul(u32::try_from(n).unwrap_or(u32::MAX))
        .min(MAX_BATCH_PAUSE)
}

/// How many times a reader in its yielding phase polls between two yields: a quarter of the
/// strategy's `spin_polls` (128 by default; none for a strategy that does not poll).
///
/// A record published while the reader is inside `sched_yield` waits for the call to return, and a
/// reader that only yielded spent nearly all its time there: records paced 50 µs apart, which land
/// in this phase, were taken ~0.1–0.15 µs later than polled ones (a lone yield takes 0.2–0.6 µs on
/// the 2-core VMs). Polling between yields shrinks that share to the yield's part of each round
/// (~10% on the Xeon VM of stop 28, whose spin hint takes 12 ns and a yield 0.2 µs), while readers
/// that share a core still hand it over every round, as often as the polling phase before it lets
/// them. Alternating binaries on that VM (medians of 3 runs a round, 8 rounds, both ring-like
/// topics), against yields alone: the 50 µs-paced 1→1 p50 ×0.78–0.82 and p90 ×0.71–0.88, 1→2
/// (readers sharing a core) p50 ×0.95–1.02 and p90 ×0.71–0.75; saturated throughput and the
/// 2 µs-paced latency, whose readers never get this far, alike. 128 polls against 32: 1→1 p50
/// ×0.95 and p90 ×0.78 (4 rounds).
fn polls_between_yields(wait: &WaitStrategy) -> u32 {
    wait.spin_polls / 4
}

/// What one look says: the wait is over (`Some`: records ready, or an interrupt), it goes on
/// (`None`), or a reader's error with that reader's index ([`look`], [`look_hinted`],
/// [`look_before_handing_over`]).
type Look = Result<Option<Waited>, (usize, ReadError)>;

/// How a wait ended.
pub(crate) enum Waited {
    /// Reader `i` has records ready.
    Ready(usize),
    /// The deadline passed.
    TimedOut,
    /// The waker was interrupted (the interrupt is consumed).
    Interrupted,
}

/// The reader after `i` of `n`, back to 0 after the last. A compare, not `%`: a division on every
/// poll sat in front of the look at the published end. Alternating binaries, medians of 3 runs a
/// round: 1→4 ×1.03 (4 of 4 rounds above 1), 1→2 ×0.99, the 2 µs-paced 1→1 p50 ×0.99 (10
/// rounds), all near the noise.
#[inline(always)]
fn after(i: usize, n: usize) -> usize {
    if i + 1 >= n {
        0
    } else {
        i + 1
    }
}

/// Takes up to `max` ready records from reader `i` and makes the next look start after it, so that
/// successive takes rotate over the readers and none starves (consumers and group members).
pub(crate) fn take_rotating<'r, T: Send + Sync + 'static>(
    readers: &'r mut [Reader<T>],
    next: &mut usize,
    i: usize,
    max: u64,
) -> Batch<'r, T> {
    *next = after(i, readers.len());
    readers[i].take_batch(max)
}

/// One pass over the readers, starting at `from`: the first with records ready, or why none is.
pub(crate) fn scan<T: Send + Sync + 'static>(
    readers: &mut [Reader<T>],
    from: usize,
    limit: u64,
) -> Result<Option<usize>, (usize, ReadError)> {
    let n = readers.len();
    if n == 0 {
        return Ok(None); // nothing to read (callers with no partitions wait on their waker instead)
    }
    let mut closed = 0;
    // `from` may be past the end when the set shrank since it was taken (a rebalance).
    let first = if from < n { from } else { from % n };
    let mut i = first;
    for _ in 0..n {
        match readers[i].poll_ready(limit) {
            Ok(true) => return Ok(Some(i)),
            Ok(false) => {}
            Err(ReadError::Closed) => closed += 1,
            Err(e) => return Err((i, e)),
        }
        i = after(i, n);
    }
    if closed == n {
        Err((first, ReadError::Closed))
    } else {
        Ok(None)
    }
}

/// Returns from the waiting function with what [`look`] found, if it found anything.
macro_rules! check {
    ($readers:ident, $from:ident, $waker:ident, $limit:ident) => {
        if let Some(w) = look($readers, $from, $waker, $limit)? {
            return Ok(w);
        }
    };
}

/// One look for [`wait_any`]: whether the wait is over (records ready, or interrupted).
#[inline(always)]
fn look<T: Send + Sync + 'static>(
    readers: &mut [Reader<T>],
    from: usize,
    waker: &Waker,
    limit: u64,
) -> Look {
    if waker.take_interrupt() {
        return Ok(Some(Waited::Interrupted));
    }
    if let Some(i) = scan(readers, from, limit)? {
        // The record was just published, so its line is on the producer's core: start
        // fetching it now, so the transfer overlaps the way back to the caller, who reads
        // it next (a 2 µs-paced record lands ~20–30 ns sooner on the 2-core VM). Only here,
        // where the reader waited: one that finds records at once gains nothing from it.
        readers[i].prefetch_next();
        return Ok(Some(Waited::Ready(i)));
    }
    Ok(None)
}

/// The polling phase's look (see [`wait_any`]): the look-up of each reader whose hint says it
/// may find records ([`Reader::may_be_ready`]), in [`scan`]'s order from `from`, each straight
/// through [`Reader::poll_ready`]; none where no hint says yes. The waker's interrupt is taken
/// first, as [`look`] takes it, once a hint says yes. A close goes to the full look, which
/// counts it against the set.
///
/// A poll is then the prefetch, a load and a compare per reader, and the spin hint, where the
/// look-up was two calls (the interrupt's, the scan's) and the retention and close checks around
/// the load (stop 75): a paced reader's record is found in the poll after its publish lands, so
/// a lighter poll comes round sooner. Scratch round trips against the Disruptor's
/// BusySpinWithSpinLoopHint in one process (2 µs-paced 1→1, rdtsc stamps, 8 alternating rounds):
/// the p50's gap to it ~38 → ~20 ns, ~10 of which is the scratch's second stamp.
///
/// Why not then [`look`] once a hint says yes, as stop 75 had it: the interrupt's load, `scan`
/// out of line walking every reader, its answer passed back through memory, and the look-up
/// loading the published end again. A reader whose records come in bursts, right after it took
/// the last one, lands each in the first few polls, and the way from the load that sees it to
/// the caller is what it waits for. Scratch round trips on the 2-vCPU EPYC guest (bursts of one,
/// the Disruptor's own benchmark, against its BusySpinWithSpinLoopHint in the same process;
/// medians of the rounds' ratios to it, in the host's fast state): `next_batch` 1.20× → 1.09×
/// (10 and 6 rounds) with this and the spin hint after the look, where a loop of `try_next_batch`
/// and a spin hint measured 1.05–1.07×. The harness, logbus and that spinner in the same
/// processes (20 alternating rounds in two sets), which mixes the host's states: bursts of 1
/// 1.196× → 1.166×, bursts of 10 1.073× → 1.046× (the first set's 1.245× → 1.067× did not
/// repeat); the 2 µs-paced 1→1 p50 against the better of the Disruptor's two spinners alike
/// (1.027× → 1.008×, 20 rounds).
#[inline(always)]
fn look_hinted<T: Send + Sync + 'static>(
    readers: &mut [Reader<T>],
    from: usize,
    waker: &Waker,
    limit: u64,
) -> Look {
    let n = readers.len();
    let mut i = if from < n { from } else { from % n.max(1) };
    for _ in 0..n {
        if readers[i].may_be_ready() {
            if waker.take_interrupt() {
                return Ok(Some(Waited::Interrupted));
            }
            match readers[i].poll_ready(limit) {
                Ok(true) => return Ok(Some(Waited::Ready(i))),
                Ok(false) => {}
                Err(ReadError::Closed) => return look(readers, from, waker, limit),
                Err(e) => return Err((i, e)),
            }
        }
        i = after(i, n);
    }
    Ok(None)
}

/// Waits until one of `readers` (all sleeping on `waker`) has records ready, the deadline passes,
/// or the waker is interrupted. Lag and close are reported with the reader's index; a set is
/// closed when every reader in it is.
pub(crate) fn wait_any<T: Send + Sync + 'static>(
    readers: &mut [Reader<T>],
    from: usize,
    waker: &Waker,
    wait: WaitStrategy,
    deadline: Option<Instant>,
    limit: u64,
) -> Result<Waited, (usize, ReadError)> {
    // A reader whose last look-up caught up with the producers, and has taken everything it
    // found, pauses before it looks again, yielding: at least once, and for a time in proportion
    // to the run it took (`batch_pause`). When readers share a core this lets them take turns.
    // When a reader has a core to itself it keeps it from re-reading the producer's cache lines
    // (the published end, the slot being written) a few records at a time, each look costing the
    // producer a cache-line transfer: the longer the run, the faster the stream, and the longer
    // it pays to let records pile up. The pause is timed rather than counted in yields: a
    // `sched_yield` on the 2-core VM takes from ~0.1 to ~0.6 µs depending on the phase the host
    // puts it in, and a fixed count (it was 1 + n/128, at most 8) left a 1→1 loop's runs anywhere
    // from ~40 to ~1200 records (45–240 M/s) where the timed pause keeps them at ~1600 (~290 M/s).
    // A sparse stream (runs of up to three) yields once, or spins briefly when this thread
    // yielded less than a microsecond ago; a thread alone on its CPU spins through pauses under
    // a microsecond (`pause_after`).
    let mut stay = false;
    if wait.yield_after_batch && readers.iter().all(|r| !r.has_ready()) {
        let fed = readers.iter_mut().fold(0, |fed, r| r.take_fed().max(fed));
        if let Some(first) = readers
            .first_mut()
            .filter(|_| fed > 0)
            .and_then(|first| (!first.bursts.skip()).then_some(first))
        {
            let alone = || first.waits_on.settle();
            let mut pause = pause_after(fed, first.yielded_at, clock::now_nanos, alone);
            if matches!(pause, Pause::Yield { .. }) && stays(readers) {
                pause = Pause::Stay;
            }
            if hands_over(&pause) {
                if let Some(w) = look_before_handing_over(readers, from, waker, limit, fed, &pause)?
                {
                    return Ok(w);
                }
            }
            let first = &mut readers[0];
            match pause {
                Pause::Spin(hints) => {
                    for _ in 0..hints {
                        spin_hint();
                    }
                }
                Pause::Stay => stay = true,
                Pause::Watch { nanos, now } => {
                    let end = watch_pause(readers, limit, nanos, now);
                    let first = &mut readers[0];
                    first.bursts.watched(end == WatchEnd::Stopped);
                    if let WatchEnd::Yielded(at) = end {
                        first.yielded_at = at;
                    }
                }
                Pause::Yield { now } => {
                    first.yielded_at = now;
                    // Where the other readers of its logs can see that it took the run: one that
                    // gets the core now may keep it (`stays`).
                    for r in readers.iter_mut() {
                        r.publish_position();
                    }
                    yield_now();
                }
                Pause::YieldFor {
                    pause,
                    restart,
                    watch,
                } => {
                    if let Some(now) = restart {
                        first.yielded_at = now;
                    }
                    if watch {
                        let stopped = yield_watching(readers, limit, pause);
                        readers[0].bursts.watched(stopped);
                    } else {
                        let start = Instant::now();
                        loop {
                            yield_now();
                            if start.elapsed() >= pause {
                                break;
                            }
                        }
                    }
                }
            }
        }
    }
    check!(readers, from, waker, limit);
    // A thread that shares its CPU with another waiting for records skips this phase: polling
    // here keeps the core from a thread that may have records to read (and, where publishers
    // wait for the slowest reader, from the one that holds them back), for `spin_polls` spin
    // hints, ~12 µs on the EPYC guest. Its yielding phase still polls between its yields.
    // Alternating binaries on that guest (stop 54, with the many-producer group flags): one
    // producer's ring-like topic, batch 1→2 / 1→4 ×1.34 / ×1.48 (4 rounds), tput 1→2 / 1→4
    // ×1.18 / ×1.51 (6 rounds); batch 2→2 ×1.15 over the flags alone (4 rounds); 2 µs-paced
    // 1→2 p50 ×1.01, 50 µs-paced ×0.99 (lower is better).
    let polls = if wait.spin_polls == 0 || shares_cpu(readers) {
        0
    } else {
        wait.spin_polls
    };
    for k in 0..polls {
        // Keep asking for the next record's line while polling: the producer's write takes it
        // away, and the next prefetch after that starts bringing the new contents while this
        // reader still polls the published end, so the two lines cross together instead of one
        // after the other. Alternating binaries (aligned builds, 8 rounds): 2 µs-paced 1→1 p50
        // 184 → 173 ns single producer, 192 → 181 many (the Disruptor's BusySpin 168 in both),
        // saturated throughput alike (10 rounds, every fan-out).
        for r in readers.iter() {
            r.prefetch_next();
        }
        // Every `FULL_LOOK_EVERY`th poll looks up regardless of the hints (`look_hinted`), for
        // what they cannot see: a close and an interrupt publish nothing, and a strategy may
        // poll for seconds (`spin_polls` up to `u32::MAX`). Both are rare, so ~2 µs late is
        // nothing; a lone reader's waker is interrupted by nobody.
        let periodic = k % FULL_LOOK_EVERY == FULL_LOOK_EVERY - 1;
        if periodic {
            check!(readers, from, waker, limit);
            // A deadline too, at the same pace: polls that last longer than it (a large
            // `spin_polls`) would otherwise overrun it until they end.
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(Waited::TimedOut);
            }
        } else if let Some(w) = look_hinted(readers, from, waker, limit)? {
            return Ok(w);
        }
        // The hint after the look, not before it: the first poll looks at once, right behind the
        // look before the loop, and a record that lands during a hint is looked for as soon as
        // it ends, either way.
        spin_hint();
    }
    yield_then_park(readers, from, waker, wait, deadline, limit, stay)
}

/// How often the polling phase of [`wait_any`] looks up whatever its hint says: every this many
/// polls (~2 µs of spin hints on the EPYC guest), so a close or an interrupt is found that soon,
/// and a deadline that passed is seen as soon.
const FULL_LOOK_EVERY: u32 = 64;

/// Whether the thread waiting on `readers` shares its CPU with another thread waiting for
/// records (counting it there, as its first reader's). Out of line: the polling loop after it is
/// the one a paced reader lands its records in.
#[inline(never)]
fn shares_cpu<T: Send + Sync + 'static>(readers: &mut [Reader<T>]) -> bool {
    readers
        .first_mut()
        .is_some_and(|first| first.waits_on.shares())
}

/// Makes a reader set's count on its thread's CPU (see [`WaitersByCpu`](crate::sync::WaitersByCpu))
/// its first reader's: a reader that held it while it was first, before the set changed (a
/// group's rebalance), hands it over, or gives it up where the first holds one already. A thread
/// waiting on one set is then counted once, wherever its set's readers moved.
pub(crate) fn count_once<T: Send + Sync + 'static>(readers: &mut [Reader<T>]) {
    if let Some((first, rest)) = readers.split_first_mut() {
        for r in rest.iter_mut().filter(|r| r.waits_on.is_counted()) {
            if first.waits_on.is_counted() {
                r.waits_on.leave();
            } else {
                std::mem::swap(&mut first.waits_on, &mut r.waits_on);
            }
        }
    }
}

/// The rest of [`wait_any`], once polling found nothing: yield, polling between yields, then park.
/// Out of line, so that the callers' loops carry only the pause and the polls (a reader that keeps
/// up never gets here). Inline, this phase with its polls between yields (a second look in the loop)
/// grew the readers' loop until `scan` went out of line for every look: saturated 1→1 ×0.97–0.98
/// in two sets of 16 alternating rounds (×0.88 in 8), where the reader never reaches this phase;
/// out of line ×0.995 and ×1.004.
#[inline(never)]
fn yield_then_park<T: Send + Sync + 'static>(
    readers: &mut [Reader<T>],
    from: usize,
    waker: &Waker,
    wait: WaitStrategy,
    deadline: Option<Instant>,
    limit: u64,
    poll_first: bool,
) -> Result<Waited, (usize, ReadError)> {
    // Counted on this CPU from here on, parked or not: a reader that will want the core when
    // its record comes makes the others on this CPU take turns. The set's first reader holds the
    // count.
    count_once(readers);
    if let Some(first) = readers.first_mut() {
        first.waits_on.settle();
    }
    let yield_start = Instant::now();
    let between = polls_between_yields(&wait);
    // Polls left before the next yield: a thread that stays on its CPU (`Pause::Stay`) polls a
    // round first.
    let mut polls = if poll_first { between } else { 0 };
    let mut k = 0u32;
    while !wait.yield_for.is_zero() {
        // One look a turn, whether the turn yielded or polled: each `check!` inlines a `scan`.
        let timed = if polls > 0 {
            polls -= 1;
            spin_hint();
            // The clock now and then between yields too, so that a round of polls longer than
            // the deadline (a large `spin_polls`) ends at it.
            polls % FULL_LOOK_EVERY == 0
        } else {
            polls = between;
            // A round of polls ends in a yield, unless the thread is alone on its CPU within its
            // turn: then it polls on (a strategy that polls between yields at all).
            let end = match readers.first_mut() {
                Some(first) if between > 0 => {
                    let end = round_end(first.yielded_at, clock::now_nanos, || {
                        first.waits_on.settle()
                    });
                    if let RoundEnd::Yield { restart: Some(now) } = end {
                        first.yielded_at = now;
                    }
                    end
                }
                _ => RoundEnd::Yield { restart: None },
            };
            if end == RoundEnd::Poll {
                spin_hint();
            } else {
                yield_now();
                k += 1;
            }
            // The clock every 8 yields when nothing is polled between them (a yield is ~0.2 µs),
            // every round when its polls make it ~10× longer.
            between > 0 || k.is_multiple_of(8)
        };
        check!(readers, from, waker, limit);
        // The clock after the look: a yield that gave the core to other readers can return
        // long after the window ended, usually with records published meanwhile. With the
        // clock first, such a reader went to park, and announcing itself costs a heavy barrier
        // (an interrupt to every other core running the process) before the look that found
        // them. Four readers sharing a core with batch publishing (2-core Xeon VM): 1403 of
        // 1423 barriers came from the readers' core, a fifth of its time; with the look first,
        // 9. Alternating binaries, medians of 3 runs a round: batch 1→4 ×1.40 (4 rounds against
        // the same build with the clock first, 1.34–1.40; ×1.38 and ×1.40 in 8 and 6 against
        // the build before); tput 1→2 ×0.92 and ×1.05 (12 and 10 rounds), 1→4 ×1.10, 2→2
        // ×1.01, the 50 µs-paced 1→2 p50 ×0.95: noise. (A many-producer log's reservation
        // already kept its readers from parking: see below.)
        if timed {
            let now = Instant::now();
            if now - yield_start >= wait.yield_for || deadline.is_some_and(|d| now >= d) {
                break;
            }
        }
    }
    loop {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(Waited::TimedOut);
        }
        // A reservation at a reader's position that is not published yet belongs to a publisher
        // between its reservation and its stamp (often descheduled there, when publishers share
        // a core): it will publish as soon as it runs again, so yield to it rather than park
        // (a park costs the barrier, and the publisher a wake-up call).
        if readers.iter().any(|r| r.publish_in_flight()) {
            yield_now();
            check!(readers, from, waker, limit);
            continue;
        }
        // Park with every position published, so Block publishers see them.
        for r in readers.iter_mut() {
            r.publish_position();
        }
        let recheck = |readers: &mut [Reader<T>]| match scan(readers, from, limit) {
            Ok(Some(i)) => Some(Ok(Waited::Ready(i))),
            Ok(None) => None,
            Err(e) => Some(Err(e)),
        };
        let found = if readers.len() == 1 {
            let log = Arc::clone(readers[0].log());
            Log::park_on(&[&*log], waker, deadline, || recheck(readers))
        } else {
            // A set parks rarely and a sleep costs a system call anyway: two small vectors are fine.
            let logs: Vec<Arc<Log<T>>> = readers.iter().map(|r| Arc::clone(r.log())).collect();
            let refs: Vec<&Log<T>> = logs.iter().map(|l| &**l).collect();
            Log::park_on(&refs, waker, deadline, || recheck(readers))
        };
        if let Some(r) = found {
            return r;
        }
        check!(readers, from, waker, limit);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::sync::{CountedWait, CpuSlot, WaitersByCpu, CPU_SLOTS, WAITERS_BY_CPU};

    #[test]
    fn the_pause_after_a_run_grows_with_the_run_up_to_its_cap() {
        assert_eq!(batch_pause(1), PAUSE_PER_RECORD);
        assert_eq!(batch_pause(100), PAUSE_PER_RECORD * 100);
        assert!(batch_pause(100) < batch_pause(200));
        assert_eq!(batch_pause(1 << 20), MAX_BATCH_PAUSE);
        assert_eq!(batch_pause(u64::MAX), MAX_BATCH_PAUSE, "no overflow");
    }

    #[test]
    fn a_short_run_spins_only_within_a_turn_of_the_last_yield() {
        let t = 5_000_000; // any clock reading
        let shared = || false;
        let unasked = || -> bool { panic!("within a turn the CPU is not asked about") };
        let never = || -> u64 { panic!("a saturated stream's pause reads no clock") };
        // A run of one, 0.3 µs after the thread's last yield: spin hints, one a record, without
        // asking about the CPU.
        assert_eq!(pause_after(1, t, || t + 300, unasked), Pause::Spin(1));
        assert_eq!(pause_after(3, t, || t + 999, unasked), Pause::Spin(3));
        // A turn or more after it, on a shared CPU: one yield, which starts the next turn.
        assert_eq!(
            pause_after(1, t, || t + TURN_NANOS, shared),
            Pause::Yield {
                now: t + TURN_NANOS
            }
        );
        assert_eq!(
            pause_after(2, 0, || t, shared),
            Pause::Yield { now: t },
            "a reader that never yielded yields"
        );
        // A clock that went back (the stamps' wall clock can): a yield, so that a step back never
        // keeps the thread from yielding until the clock has caught up, alone or not.
        for alone in [true, false] {
            assert_eq!(
                pause_after(1, t, || t - 1_000_000, || alone),
                Pause::Yield { now: t - 1_000_000 }
            );
        }
        // Longer runs (from four records) pause by the clock, yielding, whenever the last yield
        // was, and leave the turn as it was.
        let long = (SHORTEST_YIELD.as_nanos() / PAUSE_PER_RECORD.as_nanos()) as u64 + 1;
        assert_eq!(long, 4);
        assert_eq!(
            pause_after(long, t, || t + 10, shared),
            Pause::YieldFor {
                pause: batch_pause(long),
                restart: None,
                watch: false
            }
        );
        // A saturated stream's (from 500 records) reads no clock, and watches only where the
        // thread is alone on its CPU.
        for alone in [true, false] {
            assert_eq!(
                pause_after(1 << 20, 0, never, || alone),
                Pause::YieldFor {
                    pause: MAX_BATCH_PAUSE,
                    restart: None,
                    watch: alone
                }
            );
        }
    }

    #[test]
    fn a_short_run_looks_once_more_before_a_pause_that_hands_over_the_core() {
        let t = 5_000_000; // any clock reading, long after the thread's last yield at 0
        let since_long_ago = |fed, alone: bool| pause_after(fed, 0, || t, || alone);
        // Sharing its CPU: a short run's pause yields to the other waiting threads (one yield,
        // or yields for the run's pause), so the reader looks first.
        for fed in [1, 3, 4, 20, LOOK_BEFORE_HANDING_OVER - 1] {
            let pause = since_long_ago(fed, false);
            assert!(
                matches!(pause, Pause::Yield { .. } | Pause::YieldFor { .. }),
                "{fed}: {pause:?}"
            );
            assert!(looks_before(fed, &pause, false), "{fed}: {pause:?}");
            assert!(
                !looks_before(fed, &pause, true),
                "once between two hand-overs: {fed}"
            );
        }
        // A long run, or a saturated stream's, yields first: the readers sharing the core take
        // turns and the records pile up meanwhile.
        for fed in [LOOK_BEFORE_HANDING_OVER, 600, 1 << 20] {
            let pause = since_long_ago(fed, false);
            assert!(matches!(pause, Pause::YieldFor { .. }), "{fed}: {pause:?}");
            assert!(!looks_before(fed, &pause, false), "{fed}: {pause:?}");
        }
        // A pause that keeps the core looks when it ends, as before: spin hints within a turn,
        // a watched pause alone on the CPU, a thread that stays.
        let within_a_turn = pause_after(2, t, || t + 300, || false);
        assert_eq!(within_a_turn, Pause::Spin(2));
        assert!(!looks_before(2, &within_a_turn, false));
        let alone = pause_after(20, t, || t + 300, || true);
        assert!(matches!(alone, Pause::Watch { .. }), "{alone:?}");
        assert!(!looks_before(20, &alone, false));
        assert!(!looks_before(1, &Pause::Stay, false));
    }

    #[test]
    fn a_look_before_handing_over_that_finds_records_hands_over_first_the_next_time() {
        use crate::{Start, Topic, TopicConfig};
        let topic = Topic::<u64>::new("look", TopicConfig::default().single_producer()).unwrap();
        let mut reader = topic.reader(0, Start::Earliest).unwrap();
        let waker = Arc::clone(reader.waker());
        let readers = std::slice::from_mut(&mut reader);
        let hand_over = Pause::Yield { now: 1 };
        let nothing = look_before_handing_over(readers, 0, &waker, u64::MAX, 1, &hand_over);
        assert!(matches!(nothing, Ok(None)), "nothing published yet");
        assert!(
            !readers[0].looked_before,
            "found nothing: it hands over now"
        );
        waker.interrupt();
        let interrupted = look_before_handing_over(readers, 0, &waker, u64::MAX, 1, &hand_over);
        assert!(matches!(interrupted, Ok(Some(Waited::Interrupted))));
        assert!(
            !readers[0].looked_before,
            "an interrupt is no records: the next pause still looks first"
        );
        topic.publish(5).unwrap();
        let found = look_before_handing_over(readers, 0, &waker, u64::MAX, 1, &hand_over);
        assert!(
            matches!(found, Ok(Some(Waited::Ready(0)))),
            "the record is found"
        );
        assert!(
            readers[0].looked_before,
            "found records: the next pause hands over first"
        );
        // The next pause that hands over does so without looking, though a record is there.
        topic.publish(6).unwrap();
        let skipped = look_before_handing_over(readers, 0, &waker, u64::MAX, 1, &hand_over);
        assert!(matches!(skipped, Ok(None)), "once between two hand-overs");
        assert!(!readers[0].looked_before, "and the one after looks again");
        let again = look_before_handing_over(readers, 0, &waker, u64::MAX, 1, &hand_over);
        assert!(matches!(again, Ok(Some(Waited::Ready(0)))));
        // A long run hands over first, whatever came.
        readers[0].looked_before = false;
        let long = look_before_handing_over(
            readers,
            0,
            &waker,
            u64::MAX,
            LOOK_BEFORE_HANDING_OVER,
            &hand_over,
        );
        assert!(matches!(long, Ok(None)));
        let mut taken = Vec::new();
        while let Ok(batch) = reader.try_next_batch(16) {
            taken.extend(batch.values().copied());
        }
        assert_eq!(taken, [5, 6], "the looks took nothing");
    }

    #[test]
    fn a_thread_alone_on_its_cpu_spins_through_its_pauses_and_yields_once_a_long_turn() {
        let t = 5_000_000;
        let alone = || true;
        // Short runs past the turn: spin hints instead of the yield.
        assert_eq!(pause_after(1, t, || t + TURN_NANOS, alone), Pause::Spin(1));
        assert_eq!(pause_after(3, t, || t + 40_000, alone), Pause::Spin(3));
        // Runs of 4 to 499 records: the same timed pause, spinning and watching whether the
        // records stop coming (`watch_pause`).
        for (run, nanos) in [(4, 128), (31, 992), (32, 1024), (499, 15_968)] {
            assert_eq!(
                pause_after(run, t, || t + 10, alone),
                Pause::Watch { nanos, now: t + 10 },
                "a run of {run}"
            );
        }
        // Where it shares its CPU, from a turn's worth of pause on, it yields as before.
        assert_eq!(
            pause_after(32, t, || t + 10, || false),
            Pause::YieldFor {
                pause: batch_pause(32),
                restart: None,
                watch: false
            }
        );
        // A saturated stream's pause (at its cap) yields, reading no clock: a producer on this
        // CPU, which the count does not see, gets the core. Alone, it watches between yields.
        let never = || -> u64 { panic!("a saturated stream's pause reads no clock") };
        assert_eq!(
            pause_after(500, t, never, alone),
            Pause::YieldFor {
                pause: MAX_BATCH_PAUSE,
                restart: None,
                watch: true
            }
        );
        // Once its long turn is over it yields as if it shared, which starts the next turn (a
        // thread that came to its CPU since gets the core at least that often).
        let due = t + ALONE_TURN_NANOS;
        assert_eq!(pause_after(1, t, || due, alone), Pause::Yield { now: due });
        assert_eq!(
            pause_after(4, t, || due, alone),
            Pause::YieldFor {
                pause: batch_pause(4),
                restart: Some(due),
                watch: true
            }
        );
    }

    #[test]
    fn a_round_of_polls_ends_in_a_yield_unless_the_thread_is_alone_within_its_turn() {
        let t = 5_000_000;
        let never = || -> u64 { panic!("a thread that shares its CPU reads no clock") };
        // Shared (or cannot tell): a yield that leaves the turn as it was, as before the count.
        assert_eq!(
            round_end(t, never, || false),
            RoundEnd::Yield { restart: None }
        );
        // Alone, within its turn: polls on.
        assert_eq!(round_end(t, || t + 1, || true), RoundEnd::Poll);
        assert_eq!(
            round_end(t, || t + ALONE_TURN_NANOS - 1, || true),
            RoundEnd::Poll
        );
        // Alone, its turn over (or never yielded, or a clock that went back): a yield that
        // starts the next turn.
        let due = t + ALONE_TURN_NANOS;
        assert_eq!(
            round_end(t, || due, || true),
            RoundEnd::Yield { restart: Some(due) }
        );
        assert_eq!(
            round_end(0, || t, || true),
            RoundEnd::Yield { restart: Some(t) }
        );
        assert_eq!(
            round_end(t, || t - 1, || true),
            RoundEnd::Yield {
                restart: Some(t - 1)
            }
        );
    }

    #[test]
    fn waiting_threads_are_counted_on_one_cpu_at_a_time() {
        let counts = WaitersByCpu::new();
        let (cpu0, cpu1) = (CpuSlot::new(0), CpuSlot::new(1));
        let (mut a, mut b) = (None, None);
        assert!(
            counts.settle_on(cpu0, &mut a),
            "the first on its CPU is alone"
        );
        assert!(
            counts.settle_on(cpu0, &mut a),
            "counted once, however often it looks"
        );
        assert!(
            !counts.settle_on(cpu0, &mut b),
            "a second thread there shares it"
        );
        assert!(!counts.settle_on(cpu0, &mut a));
        assert_eq!(counts.count_on(cpu0, &mut a), 2, "itself and one other");
        assert_eq!(counts.count_on(cpu0, &mut b), 2);
        // `b` moves to another CPU: both are alone now.
        assert!(counts.settle_on(cpu1, &mut b));
        assert!(counts.settle_on(cpu0, &mut a));
        // `a` leaves (its reader is dropped): `b` follows it to CPU 0 and is alone there.
        counts.leave(&mut a);
        assert_eq!(a, None);
        counts.leave(&mut a); // leaving twice counts nothing
        assert!(counts.settle_on(cpu0, &mut b));
        assert_eq!(b, Some(cpu0));
        // CPUs that share a slot count as one.
        let mut c = None;
        assert!(!counts.settle_on(CpuSlot::new(CPU_SLOTS), &mut c));
    }

    #[test]
    fn a_blocked_publisher_is_counted_on_its_cpu_only_while_it_waits() {
        let counts = WaitersByCpu::new();
        let mut wait = CountedWait::new(&counts);
        assert_eq!(wait.slot(), None, "not counted before it looks");
        let shared = wait.shares();
        if !cfg!(target_os = "linux") {
            assert!(!shared, "a thread whose CPU cannot be told never shares it");
            return;
        }
        let slot = wait.slot().expect("counted on the CPU it looked from");
        assert!(!shared, "alone in a count nobody else is in");
        assert_eq!(counts.count(slot), 1);
        wait.leave();
        assert_eq!(wait.slot(), None);
        assert_eq!(counts.count(slot), 0, "left its CPU before parking");
        // A reader counted on every slot: wherever the thread runs now, it shares its CPU.
        let mut readers = [None; CPU_SLOTS];
        for (i, reader) in readers.iter_mut().enumerate() {
            assert!(counts.settle_on(CpuSlot::new(i), reader));
        }
        assert!(wait.shares(), "a reader is counted on its CPU");
        let slot = wait.slot().expect("counted again");
        assert_eq!(counts.count(slot), 2);
        drop(wait); // the publish got its room and returned
        assert_eq!(counts.count(slot), 1, "only the reader is left");
    }

    #[test]
    fn a_reader_polls_between_yields_only_if_its_strategy_polls() {
        assert_eq!(polls_between_yields(&WaitStrategy::default()), 128);
        assert_eq!(
            polls_between_yields(&WaitStrategy::default().spin_polls(8)),
            2
        );
        assert_eq!(polls_between_yields(&WaitStrategy::park_at_once()), 0);
    }

    #[test]
    fn a_reader_that_paused_is_counted_on_its_cpu() {
        use crate::{Start, Topic, TopicConfig};
        let topic = Topic::<u64>::new("cpu", TopicConfig::default()).unwrap();
        let mut reader = topic.reader(0, Start::Earliest).unwrap();
        assert_eq!(reader.waits_on.slot(), None, "not counted before it waits");
        topic.publish(1).unwrap();
        let first: Vec<u64> = reader.next_batch(16).unwrap().values().copied().collect();
        assert_eq!(first, [1]);
        // Caught up after a run of one (not stopped by its limit), with nothing new, the reader
        // pauses before it looks again; it has never yielded, so it asks whether it is alone on
        // its CPU, which counts it there.
        let waited = reader.next_batch_timeout(16, Duration::from_millis(1));
        assert_eq!(waited.err(), Some(ReadError::Timeout));
        if cfg!(target_os = "linux") {
            let slot = reader
                .waits_on
                .slot()
                .expect("counted on the CPU it paused on");
            assert!(WAITERS_BY_CPU.count(slot) >= 1);
        }
    }

    #[test]
    fn a_set_whose_first_reader_changed_hands_its_count_to_the_new_first() {
        use crate::{Start, Topic, TopicConfig};
        let topic = Topic::<u64>::new("cpu-hand-over", TopicConfig::default()).unwrap();
        let reader = || topic.reader(0, Start::Earliest).unwrap();
        // The second reader was first before the set changed, and holds the thread's count.
        let mut readers = vec![reader(), reader(), reader()];
        let slot = CpuSlot::new(3);
        readers[1].waits_on.settle_on(slot);
        count_once(&mut readers);
        let held: Vec<_> = readers.iter().map(|r| r.waits_on.slot()).collect();
        assert_eq!(held, [Some(slot), None, None], "handed over, not copied");
        // The first holds a count already: a stale one elsewhere in the set is given up.
        readers[2].waits_on.settle_on(CpuSlot::new(4));
        count_once(&mut readers);
        let held: Vec<_> = readers.iter().map(|r| r.waits_on.slot()).collect();
        assert_eq!(held, [Some(slot), None, None]);
        // An empty set, or one nobody counted, is left as it is.
        count_once::<u64>(&mut []);
        let mut uncounted = vec![reader(), reader()];
        count_once(&mut uncounted);
        assert!(uncounted.iter().all(|r| !r.waits_on.is_counted()));
    }

    #[test]
    fn a_set_of_readers_is_counted_once_by_its_first() {
        use crate::{Start, Topic, TopicConfig};
        let wait = WaitStrategy::default().yield_for(Duration::from_nanos(1));
        let topic = Topic::<u64>::new("cpu-set", TopicConfig::default().wait(wait)).unwrap();
        let mut readers = vec![
            topic.reader(0, Start::Earliest).unwrap(),
            topic.reader(0, Start::Earliest).unwrap(),
        ];
        // The second reader was the set's first before it changed, and holds a count.
        readers[1].waits_on.settle_on(CpuSlot::new(0));
        let waker = Arc::clone(readers[0].waker());
        let deadline = Some(Instant::now());
        let waited = yield_then_park(&mut readers, 0, &waker, wait, deadline, u64::MAX, false);
        assert!(matches!(waited, Ok(Waited::TimedOut)));
        assert_eq!(readers[1].waits_on.slot(), None, "gave its count up");
        if cfg!(target_os = "linux") {
            assert!(
                readers[0].waits_on.is_counted(),
                "the first holds the set's count"
            );
        }
    }

    /// A yield that gives the core to other readers can return after the yielding window ended,
    /// with records published meanwhile: the reader takes them without announcing itself parked.
    /// Here the window is shorter than any yield, so the first yield ends it, and the record is
    /// there before that yield. (On a many-producer log the reservation alone already keeps a
    /// reader from parking; a single producer's log has no reservation to see.)
    #[test]
    fn a_reader_looks_after_the_yield_that_ends_its_window_before_it_parks() {
        use crate::{Start, Topic, TopicConfig};
        for single in [true, false] {
            for polls in [512, 8] {
                let wait = WaitStrategy::default()
                    .spin_polls(polls)
                    .yield_for(Duration::from_nanos(1));
                let config = TopicConfig::default().wait(wait);
                let config = if single {
                    config.single_producer()
                } else {
                    config
                };
                let topic = Topic::<u64>::new("window", config).unwrap();
                let mut reader = topic.reader(0, Start::Earliest).unwrap();
                topic.publish(7).unwrap();
                let waker = Arc::clone(reader.waker());
                let readers = std::slice::from_mut(&mut reader);
                let waited = yield_then_park(readers, 0, &waker, wait, None, u64::MAX, false);
                let kind = format!("single producer {single}, {polls} polls");
                assert!(matches!(waited, Ok(Waited::Ready(0))), "{kind}");
                assert_eq!(
                    topic.stats().partitions[0].parks,
                    0,
                    "{kind}: announced itself parked with a record ready"
                );
                assert_eq!(reader.try_next().map(|r| *r.value()), Ok(7), "{kind}");
            }
        }
    }

    /// A run cut at the reader's limit or a segment's end is part of the stream the run after it
    /// ends: the pause after catching up is measured by all of it, counted from the last pause.
    #[test]
    fn the_run_a_pause_measures_includes_the_cut_runs_before_it() {
        use crate::{Start, Topic, TopicConfig};
        let topic = Topic::<u64>::new("fed", TopicConfig::default().single_producer()).unwrap();
        let mut reader = topic.reader(0, Start::Earliest).unwrap();
        topic.publish_batch(0..5000u64).unwrap();
        let mut taken = Vec::new();
        while taken.len() < 5000 {
            let batch = reader.try_next_batch(4096).unwrap();
            assert!(batch.len() < 5000, "cut at the limit or a segment's end");
            taken.extend(batch.values().copied());
        }
        assert_eq!(taken, (0..5000).collect::<Vec<_>>());
        assert_eq!(
            reader.take_fed(),
            5000,
            "every run since the reader was placed"
        );
        // The pause starts the count afresh.
        topic.publish_batch(0..10u64).unwrap();
        assert_eq!(reader.try_next_batch(4096).unwrap().len(), 10);
        assert_eq!(reader.take_fed(), 10);
    }

    /// A reader whose stream stopped (a burst, published whole) ends its pause at the look that
    /// finds no more: here the pause would outlast any test, so returning at all is the check,
    /// with the burst ready and the turn left as it was.
    #[test]
    fn a_watched_pause_ends_once_the_records_stop_coming() {
        use crate::{Start, Topic, TopicConfig};
        for single in [true, false] {
            let config = TopicConfig::default();
            let config = if single {
                config.single_producer()
            } else {
                config
            };
            let topic = Topic::<u64>::new("watch", config).unwrap();
            let mut reader = topic.reader(0, Start::Earliest).unwrap();
            topic.publish_batch(0..100u64).unwrap();
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let readers = std::slice::from_mut(&mut reader);
                let end = watch_pause(readers, u64::MAX, u64::MAX, clock::now_nanos());
                tx.send((end, reader)).unwrap();
            });
            let (end, mut reader) = rx
                .recv_timeout(Duration::from_secs(600))
                .expect("the pause ended once the burst was whole");
            assert_eq!(end, WatchEnd::Stopped, "it never yielded");
            let batch: Vec<u64> = reader
                .try_next_batch(1000)
                .unwrap()
                .values()
                .copied()
                .collect();
            assert_eq!(
                batch,
                (0..100).collect::<Vec<_>>(),
                "single producer {single}"
            );
        }
    }

    /// A reader that took a short run keeps its core rather than yield where the other readers of
    /// its log took the run already (`stays`): the protocol stores each reader's position before
    /// it asks, and before a short run's yield.
    #[test]
    fn a_run_is_taken_by_others_once_every_other_reader_of_its_log_stored_it() {
        use crate::{Start, Topic, TopicConfig};
        use std::slice::from_mut;
        let topic = Topic::<u64>::new("taken", TopicConfig::default().single_producer()).unwrap();
        let mut a = topic.reader(0, Start::Earliest).unwrap();
        topic.publish_batch(0..3u64).unwrap();
        assert_eq!(a.try_next_batch(10).unwrap().len(), 3);
        assert!(
            !taken_by_others(from_mut(&mut a)),
            "a log with one reader has nobody to leave the core to"
        );
        let mut b = topic.reader(0, Start::Earliest).unwrap();
        assert!(!taken_by_others(from_mut(&mut a)), "b has taken nothing");
        assert_eq!(b.try_next_batch(2).unwrap().len(), 2);
        assert!(taken_by_others(from_mut(&mut b)), "a took all that b took");
        assert!(!taken_by_others(from_mut(&mut a)), "b is one record short");
        assert_eq!(b.try_next_batch(2).unwrap().len(), 1);
        assert!(
            !taken_by_others(from_mut(&mut a)),
            "b took the last record but has not stored its position yet"
        );
        assert!(taken_by_others(from_mut(&mut b)));
        assert!(taken_by_others(from_mut(&mut a)), "both took all three");
        assert_eq!((a.position(), b.position()), (3, 3), "asking moves nobody");
    }

    /// A polling reader's hint (`Reader::may_be_ready`) says yes once its next record is
    /// published and no before: one producer's watermark; many producers' stamps, and a
    /// batch's group flags inside the run; and yes where the reader holds no segment yet.
    #[test]
    fn the_polling_hint_says_yes_once_the_next_record_is_published() {
        use crate::{Start, Topic, TopicConfig};
        for config in [
            TopicConfig::<u64>::default().single_producer(),
            TopicConfig::default(),
        ] {
            let single = config.producers == crate::config::Producers::Single;
            let topic = Topic::new("hint", config).unwrap();
            let mut reader = topic.reader(0, Start::Earliest).unwrap();
            let mut producer = topic.producer().unwrap();
            // No segment held yet: one producer's watermark says no; many producers' hint
            // cannot tell without the segment, so it lets the look-up run.
            assert_eq!(reader.may_be_ready(), !single);
            producer.publish(0).unwrap();
            assert!(reader.may_be_ready());
            assert_eq!(reader.try_next_batch(10).unwrap().len(), 1);
            assert!(!reader.may_be_ready(), "everything published was taken");
            // 1..17: with many producers, stamps at the run's ends and a flag for the whole
            // group 8..16 inside it.
            let values: Vec<u64> = (1..17).collect();
            producer.publish_slice(&values).unwrap();
            assert!(reader.may_be_ready());
            assert_eq!(reader.try_next_batch(9).unwrap().first_offset(), 1);
            assert_eq!(reader.position(), 10);
            assert!(
                reader.may_be_ready(),
                "offset 10 lies inside the flagged group"
            );
            assert_eq!(reader.try_next_batch(100).unwrap().len(), 7);
            assert!(!reader.may_be_ready());
            producer.publish(17).unwrap();
            assert!(reader.may_be_ready());
        }
    }

    /// The polling phase's look (`look_hinted`) finds what the full look finds, where a hint says
    /// yes: the first ready reader from `from` on, an interrupt before records, a lag exactly
    /// once, and a set's close only once every reader in it is closed.
    #[test]
    fn the_polling_look_finds_what_the_full_look_finds() {
        use crate::{Overflow, Start, Topic, TopicConfig};
        let ready = |w: Look| match w {
            Ok(Some(Waited::Ready(i))) => Some(i),
            Ok(None) => None,
            Ok(Some(Waited::Interrupted)) => panic!("interrupted"),
            Ok(Some(Waited::TimedOut)) => panic!("timed out"),
            Err((i, e)) => panic!("reader {i}: {e:?}"),
        };
        let config = TopicConfig::<u64>::default()
            .single_producer()
            .partitions(2);
        let topic = Topic::new("polling-look", config).unwrap();
        let mut set = [
            topic.reader(0, Start::Earliest).unwrap(),
            topic.reader(1, Start::Earliest).unwrap(),
        ];
        let waker = Arc::clone(set[0].waker());
        assert_eq!(ready(look_hinted(&mut set, 0, &waker, 64)), None);
        topic.publish_to(1, 10).unwrap();
        assert_eq!(ready(look_hinted(&mut set, 0, &waker, 64)), Some(1));
        topic.publish_to(0, 20).unwrap();
        assert_eq!(
            ready(look_hinted(&mut set, 1, &waker, 64)),
            Some(1),
            "from 1 on"
        );
        assert_eq!(
            ready(look_hinted(&mut set, 0, &waker, 64)),
            Some(0),
            "from 0 on"
        );
        assert_eq!(
            ready(look_hinted(&mut set, 7, &waker, 64)),
            Some(1),
            "7 of 2 is 1"
        );
        // An interrupt is taken before records, once.
        waker.interrupt();
        assert!(matches!(
            look_hinted(&mut set, 0, &waker, 64),
            Ok(Some(Waited::Interrupted))
        ));
        assert_eq!(ready(look_hinted(&mut set, 0, &waker, 64)), Some(0));
        // Taking the records turns the hints back to no, and an interrupt then waits for the
        // full look.
        for r in set.iter_mut() {
            assert_eq!(r.try_next_batch(10).unwrap().len(), 1);
        }
        waker.interrupt();
        assert_eq!(ready(look_hinted(&mut set, 0, &waker, 64)), None);
        assert!(matches!(
            look(&mut set, 0, &waker, 64),
            Ok(Some(Waited::Interrupted))
        ));

        // A lag is reported once, with its size; the next look finds the oldest retained record.
        let config = TopicConfig::<u64>::default()
            .single_producer()
            .segment_size(4)
            .max_records(4)
            .overflow(Overflow::DropOldest);
        let lossy = Topic::new("polling-look-lag", config).unwrap();
        let mut behind = [lossy.reader(0, Start::Earliest).unwrap()];
        lossy.publish_batch(0..40u64).unwrap();
        let waker = Arc::clone(behind[0].waker());
        let start = match look_hinted(&mut behind, 0, &waker, 64) {
            Err((0, ReadError::Lagged(lost))) => lost,
            other => panic!("expected a lag, got {:?}", other.map(|w| w.is_some())),
        };
        assert!(start > 0 && start < 40);
        assert_eq!(ready(look_hinted(&mut behind, 0, &waker, 64)), Some(0));
        assert_eq!(behind[0].try_next_batch(100).unwrap().first_offset(), start);

        // Many producers' hints say yes while a reader holds no segment yet, so a closed reader
        // reaches the look-up, and the full look: a close is the set's only once every reader in
        // it is closed.
        let many =
            Topic::<u64>::new("polling-look-close", TopicConfig::default().partitions(2)).unwrap();
        let mut set = [
            many.reader(0, Start::Earliest).unwrap(),
            many.reader(1, Start::Earliest).unwrap(),
        ];
        many.publish_to(0, 5).unwrap();
        let mut later = [
            many.reader(0, Start::Latest).unwrap(),
            many.reader(1, Start::Latest).unwrap(),
        ];
        many.close();
        let waker = Arc::clone(set[0].waker());
        assert_eq!(
            ready(look_hinted(&mut set, 1, &waker, 64)),
            Some(0),
            "reader 1's close is not the set's while reader 0 has a record"
        );
        let waker = Arc::clone(later[0].waker());
        assert!(matches!(
            look_hinted(&mut later, 1, &waker, 64),
            Err((1, ReadError::Closed))
        ));
    }

    /// A reader yielding through its pause (at the cap, or past its turn) looks a few times too,
    /// and ends the pause once a burst is whole.
    #[test]
    fn a_yielding_pause_ends_once_the_records_stop_coming() {
        use crate::{Start, Topic, TopicConfig};
        let topic = Topic::<u64>::new("yield-watch", TopicConfig::default()).unwrap();
        let mut reader = topic.reader(0, Start::Earliest).unwrap();
        topic.publish_batch(0..1000u64).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let hour = Duration::from_secs(3600);
            let stopped = yield_watching(std::slice::from_mut(&mut reader), u64::MAX, hour);
            tx.send((stopped, reader)).unwrap();
        });
        let (stopped, mut reader) = rx
            .recv_timeout(Duration::from_secs(600))
            .expect("the pause ended once the burst was whole");
        assert!(stopped);
        let mut taken = Vec::new();
        while let Ok(batch) = reader.try_next_batch(4096) {
            taken.extend(batch.values().copied());
        }
        assert_eq!(taken, (0..1000).collect::<Vec<_>>());
    }

    /// Where nothing is published within a turn (a producer that shares the CPU gets it only by
    /// a yield), the pause yields for the rest of its length; nothing is lost.
    #[test]
    fn a_watched_pause_that_sees_nothing_yields_the_rest() {
        use crate::{Start, Topic, TopicConfig};
        let topic = Topic::<u64>::new("watch-idle", TopicConfig::default()).unwrap();
        let mut reader = topic.reader(0, Start::Earliest).unwrap();
        let readers = std::slice::from_mut(&mut reader);
        let start = clock::now_nanos();
        // A pause of 1 s: the turn passes long before it, unless the thread is kept off its
        // CPU for the best part of a second.
        let WatchEnd::Yielded(at) = watch_pause(readers, u64::MAX, 1_000_000_000, start) else {
            panic!("a pause that saw nothing within a turn yields the rest");
        };
        assert!(at.wrapping_sub(start) >= TURN_NANOS, "not before a turn");
        assert!(!reader.has_ready());
        topic.publish(5).unwrap();
        assert_eq!(reader.try_next().map(|r| *r.value()), Ok(5));
    }

    /// Two watched pauses in a row that ended with the records stopped: the next seven pauses
    /// are skipped, the eighth is watched again; one that runs its course ends the skipping.
    #[test]
    fn a_bursty_stream_skips_its_pauses_but_one_in_eight() {
        let mut bursts = Bursts::default();
        bursts.watched(true);
        assert!(!bursts.skip(), "one stopped pause is not a pattern");
        bursts.watched(false);
        bursts.watched(true);
        assert!(!bursts.skip(), "a pause that lasted broke the streak");
        bursts.watched(true);
        let skips = |bursts: &mut Bursts| (0..20).take_while(|_| bursts.skip()).count();
        assert_eq!(skips(&mut bursts), usize::from(BURSTY_SKIPS));
        // The pause after the skips is watched: stopped again, seven more.
        bursts.watched(true);
        assert_eq!(skips(&mut bursts), usize::from(BURSTY_SKIPS));
        // One that lasts its length ends it.
        bursts.watched(false);
        assert!(!bursts.skip());
        bursts.watched(true);
        assert!(!bursts.skip(), "the streak starts again from one");
    }

    /// A look that finds retention past a pausing reader ends the pause and moves nothing; the
    /// read after it reports the exact lag (the look used to move the reader, and the watch
    /// dropped the `Lagged`).
    #[test]
    fn a_watch_that_finds_retention_past_the_reader_leaves_the_lag_to_the_read() {
        use crate::{Overflow, Start, Topic, TopicConfig};
        let config = TopicConfig::default()
            .single_producer()
            .segment_size(4)
            .max_records(8)
            .overflow(Overflow::DropOldest);
        let topic = Topic::<u64>::new("watch-lag", config).unwrap();
        let mut reader = topic.reader(0, Start::Earliest).unwrap();
        topic.publish_batch(0..3u64).unwrap();
        let readers = std::slice::from_mut(&mut reader);
        assert_eq!(readers[0].try_next_batch(10).unwrap().len(), 3);
        let mut watch = Watch::new(readers, 2);
        // Retention passes the reader's position (3) while it pauses: 40 published, 8 kept.
        topic.publish_batch(3..40u64).unwrap();
        let start = topic.stats().partitions[0].start;
        assert!(
            start > 3,
            "retention trimmed past the reader: start {start}"
        );
        assert_eq!(watch.look(readers, u64::MAX), Seen::Stopped);
        assert_eq!(readers[0].position(), 3, "the look moved nothing");
        // The read after the pause reports exactly what was lost, then goes on from the start.
        match readers[0].try_next() {
            Err(ReadError::Lagged(n)) => assert_eq!(n, start - 3),
            other => panic!("expected Lagged, got {:?}", other.map(|r| r.offset())),
        }
        assert_eq!(readers[0].try_next().unwrap().offset(), start);
    }

    /// A look finds nothing until records come; records that stop after at most `comings`
    /// looks are a burst, whole; records still coming after that are a stream.
    #[test]
    fn a_watch_tells_a_whole_burst_from_a_stream() {
        use crate::{Start, Topic, TopicConfig};
        let topic = Topic::<u64>::new("watch-looks", TopicConfig::default()).unwrap();
        let mut reader = topic.reader(0, Start::Earliest).unwrap();
        let readers = std::slice::from_mut(&mut reader);
        let mut burst = Watch::new(readers, 2);
        assert_eq!(burst.look(readers, u64::MAX), Seen::Nothing);
        topic.publish_batch(0..10u64).unwrap();
        assert_eq!(burst.look(readers, u64::MAX), Seen::Coming);
        topic.publish(10).unwrap();
        assert_eq!(burst.look(readers, u64::MAX), Seen::Coming);
        assert_eq!(burst.look(readers, u64::MAX), Seen::Stopped);
        // Taken, and watched afresh: a third look that finds more is a stream.
        let taken = readers[0].try_next_batch(100).unwrap().len();
        assert_eq!(taken, 11);
        let mut stream = Watch::new(readers, 2);
        for (k, seen) in [Seen::Coming, Seen::Coming, Seen::Flowing]
            .into_iter()
            .enumerate()
        {
            topic.publish(11 + k as u64).unwrap();
            assert_eq!(stream.look(readers, u64::MAX), seen, "look {k}");
        }
        let taken: Vec<u64> = readers[0]
            .try_next_batch(100)
            .unwrap()
            .values()
            .copied()
            .collect();
        assert_eq!(taken, [11, 12, 13]);
    }
}
