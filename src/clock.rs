//! Record timestamps: wall-clock nanoseconds since the UNIX epoch, cheap enough for every publish.
//!
//! `SystemTime::now()` costs ~34 ns on the 2-core VM we measure on, more than the rest of a
//! publish. A coarse clock (`CLOCK_REALTIME_COARSE`, ~5 ns) was tried and dropped: its value can lag
//! the real time by more than its nominal 4 ms tick on tickless kernels, so `Start::Timestamp` could
//! skip a record published after the time asked for.
//!
//! On x86_64 with an invariant TSC (the kernel's clocksource is `tsc`), records are stamped by
//! extrapolating the TSC (~9 ns to read here) from a per-thread anchor: a pair (TSC, wall clock)
//! taken with `SystemTime::now()`, refreshed every [`REANCHOR_NS`] (1 ms; ~0.1 µs a refresh),
//! with the tick rate calibrated against the monotonic clock and shared by all threads. Between
//! anchors the error is the rate error times 1 ms, well under a microsecond; [`TOLERANCE_NANOS`]
//! is what `Start::Timestamp` allows for. A step of the wall clock (NTP stepping it, someone
//! setting it) reaches the stamps at each thread's next refresh, so for up to 1 ms stamps are off
//! by the step. Elsewhere the precise clock is read every time.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long a thread's anchor is used before it is refreshed from the wall clock: how long a
/// step of the wall clock may take to reach the stamps.
#[cfg_attr(any(loom, not(target_arch = "x86_64")), allow(dead_code))]
pub(crate) const REANCHOR_NS: u64 = 1_000_000;

/// How far a stamp may be from the wall clock (generous: the measured error is far smaller).
pub(crate) const TOLERANCE_NANOS: u64 = 100_000;

/// Now, in nanoseconds since the UNIX epoch (0 before 1970, saturating at 2^63 - 1).
#[inline]
pub(crate) fn now_nanos() -> u64 {
    #[cfg(all(target_arch = "x86_64", not(loom)))]
    if let Some(n) = tsc::now() {
        return n;
    }
    precise_nanos()
}

/// [`now_nanos`] where that is a few instructions with no call: the calling thread's anchor is
/// fresh (x86_64), or never (`None`: call [`now_nanos`]). Never 0. For the stamped publish paths,
/// which send `None` to a cold copy of themselves, so that the anchor's refresh (a wall-clock
/// read, a calibration) is no part of their common case.
#[inline(always)]
pub(crate) fn now_if_anchored() -> Option<u64> {
    #[cfg(all(target_arch = "x86_64", not(loom)))]
    return tsc::now_if_anchored().map(|n| n.max(1));
    #[cfg(not(all(target_arch = "x86_64", not(loom))))]
    return None;
}

/// The wall clock, read precisely.
pub(crate) fn precise_nanos() -> u64 {
    to_nanos(SystemTime::now())
}

pub(crate) fn to_nanos(t: SystemTime) -> u64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => u64::try_from(d.as_nanos())
            .unwrap_or(u64::MAX)
            .min(u64::MAX >> 1),
        Err(_) => 0,
    }
}

pub(crate) fn from_nanos(n: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(n)
}

#[cfg(all(target_arch = "x86_64", not(loom)))]
mod tsc {
    use std::{cell::Cell, sync::OnceLock, time::Instant};

    use super::{precise_nanos, REANCHOR_NS};

    /// The widest TSC bracket around a clock read that is used: 2–10 µs at 1–5 GHz, where the
    /// read itself takes ~30 ns.
    const BRACKET_TICKS: u64 = 10_000;

    /// How many times a wide bracket is read again before the anchor is left as it was.
    const BRACKET_TRIES: u32 = 3;

    /// Shortest span of the monotonic clock over which a tick rate is measured (1 ms: placing a
    /// read within a typical bracket, ~100 ticks, is then off by 20 ppm at most, and each later
    /// span refines the rate).
    const CALIBRATE_NS: u64 = 1_000_000;

    /// A thread's anchor, one cell per field: a read loads just the fields it uses, straight
    /// from thread-local storage. (One cell holding the whole anchor was copied to the stack on
    /// every read, two 16-byte stores then 8-byte loads from them, which a store buffer does not
    /// always forward.) Beside it, the point the thread's next rate is measured from.
    struct AnchorCell {
        /// A TSC reading and the wall clock's time at it.
        tsc: Cell<u64>,
        nanos: Cell<u64>,
        /// Nanoseconds per tick in 32.32 fixed point; 0 while uncalibrated.
        rate_q32: Cell<u64>,
        /// Ticks after `tsc` at which the anchor is refreshed; 0 (never fresh) before the first.
        horizon: Cell<u64>,
        /// A TSC reading and the monotonic clock's time at it (`None` before the first).
        since_tsc: Cell<u64>,
        since: Cell<Option<Instant>>,
    }

    impl AnchorCell {
        /// No anchor, no rate, nothing measured yet.
        const fn new() -> Self {
            AnchorCell {
                tsc: Cell::new(0),
                nanos: Cell::new(0),
                rate_q32: Cell::new(0),
                horizon: Cell::new(0),
                since_tsc: Cell::new(0),
                since: Cell::new(None),
            }
        }
    }

    thread_local! {
        static ANCHOR: AnchorCell = const { AnchorCell::new() };
    }

    /// The calibrated rate shared by all threads (set once by the first thread to calibrate).
    static SHARED_RATE: OnceLock<u64> = OnceLock::new();

    /// Whether the TSC is trustworthy here (the kernel uses it as its clocksource).
    pub(super) fn usable() -> bool {
        static USABLE: OnceLock<bool> = OnceLock::new();
        *USABLE.get_or_init(|| {
            std::fs::read_to_string(
                "/sys/devices/system/clocksource/clocksource0/current_clocksource",
            )
            .is_ok_and(|s| s.trim() == "tsc")
        })
    }

    #[inline]
    fn rdtsc() -> u64 {
        // SAFETY: `rdtsc` has no preconditions on x86_64; it only reads the time-stamp counter.
        unsafe { core::arch::x86_64::_rdtsc() }
    }

    #[inline]
    pub(super) fn now() -> Option<u64> {
        let tsc = rdtsc();
        ANCHOR.with(|cell| anchored(cell, tsc).or_else(|| reanchor(cell)))
    }

    /// [`now`] where the anchor is fresh, else `None`.
    #[inline(always)]
    pub(super) fn now_if_anchored() -> Option<u64> {
        let tsc = rdtsc();
        ANCHOR.with(|cell| anchored(cell, tsc))
    }

    /// `tsc` as wall-clock nanoseconds by `cell`'s anchor, if that is fresh.
    #[inline(always)]
    fn anchored(cell: &AnchorCell, tsc: u64) -> Option<u64> {
        let dt = tsc.wrapping_sub(cell.tsc.get());
        // `horizon` is 0 while uncalibrated, so this also checks the rate is set.
        if dt < cell.horizon.get() {
            let rate = cell.rate_q32.get();
            Some(cell.nanos.get() + ((u128::from(dt) * u128::from(rate)) >> 32) as u64)
        } else {
            None
        }
    }

    #[cold]
    fn reanchor(cell: &AnchorCell) -> Option<u64> {
        if !usable() {
            return None;
        }
        let reading = match read() {
            Ok(reading) => reading,
            Err(nanos) => return Some(nanos),
        };
        if let Some(measured) = refresh(cell, reading, SHARED_RATE.get().copied()) {
            let _ = SHARED_RATE.set(measured);
        }
        Some(reading.nanos)
    }

    /// What one refresh reads: the wall clock and the monotonic clock, each with the TSC's
    /// value at the moment of the read.
    #[derive(Clone, Copy)]
    struct Reading {
        tsc: u64,
        nanos: u64,
        mono_tsc: u64,
        mono: Instant,
    }

    /// Reads the wall clock, then the monotonic clock, each between two TSC reads, and places
    /// each read at its bracket's midpoint. A thread descheduled inside a bracket would put the
    /// read off by up to half the gap (a 1 ms preemption on a busy 2-vCPU VM put stamps 0.5 ms
    /// early, past `TOLERANCE_NANOS`), so a wide bracket is read again; if every try is wide, the
    /// last wall-clock read (precise by itself) is the error, and the caller keeps the old
    /// anchor, so the next stamp tries again.
    fn read() -> Result<Reading, u64> {
        let mut tries = 0;
        loop {
            let t0 = rdtsc();
            let nanos = precise_nanos();
            let t1 = rdtsc();
            let mono = Instant::now();
            let t2 = rdtsc();
            // Huge if the counter went back (another core's).
            let (wall_gap, mono_gap) = (t1.wrapping_sub(t0), t2.wrapping_sub(t1));
            if wall_gap <= BRACKET_TICKS && mono_gap <= BRACKET_TICKS {
                return Ok(Reading {
                    tsc: t0 + wall_gap / 2,
                    nanos,
                    mono_tsc: t1 + mono_gap / 2,
                    mono,
                });
            }
            tries += 1;
            if tries == BRACKET_TRIES {
                return Err(nanos);
            }
        }
    }

    /// Makes `reading` the thread's anchor, with its tick rate (or `shared`, the rate another
    /// thread measured, until it has one of its own; with neither, the anchor is not set and the
    /// precise clock is read meanwhile). Returns the rate it measured, if a long enough span
    /// passed since the thread last measured one.
    ///
    /// The rate is measured against the monotonic clock: the kernel slews it as it slews the wall
    /// clock (NTP's frequency corrections), but never steps it. Measured against the wall clock,
    /// a step (NTP stepping it, someone setting it) counted as elapsed time: a guest whose wall
    /// clock stepped 0.5 ms ahead every 100 ms got rates 5% off, and stamps 0.5 ms off within one
    /// anchor.
    fn refresh(cell: &AnchorCell, reading: Reading, shared: Option<u64>) -> Option<u64> {
        let Reading {
            tsc,
            nanos,
            mono_tsc,
            mono,
        } = reading;
        let own = cell.rate_q32.get();
        let span_ns = cell
            .since
            .get()
            .map(|since| mono.saturating_duration_since(since).as_nanos());
        let since_tsc = cell.since_tsc.get();
        let measured = match span_ns {
            Some(ns) if ns >= u128::from(CALIBRATE_NS) && mono_tsc > since_tsc => {
                let m = ((ns << 32) / u128::from(mono_tsc - since_tsc)) as u64;
                Some(if own == 0 { m } else { (own * 3 + m) / 4 })
            }
            _ => None,
        };
        // The next span starts here once this one is measured, or at the thread's first reading.
        if measured.is_some() || span_ns.is_none() {
            cell.since_tsc.set(mono_tsc);
            cell.since.set(Some(mono));
        }
        let rate = measured.or((own != 0).then_some(own)).or(shared);
        if let Some(rate) = rate.filter(|&r| r != 0) {
            cell.tsc.set(tsc);
            cell.nanos.set(nanos);
            cell.rate_q32.set(rate);
            cell.horizon
                .set(((u128::from(REANCHOR_NS) << 32) / u128::from(rate)) as u64);
        }
        measured
    }

    #[cfg(test)]
    mod tests {
        use std::time::Duration;

        use super::*;

        /// A wall clock stepped 0.5 ms ahead every 100 ms (as one sandbox here did for minutes),
        /// stamped every 100 µs for a second by a 2.5 GHz counter, as the publish paths stamp
        /// (refreshing the anchor when it is stale): the rate is the counter's against the
        /// monotonic clock, and a stamp is within 1 µs of the wall clock, but for the refresh
        /// period after a step, when it is behind by the step at most. (Measured against the wall
        /// clock, a span across a step read the rate 50% off.)
        #[test]
        fn a_stepped_wall_clock_moves_neither_the_rate_nor_later_stamps() {
            let cell = AnchorCell::new();
            const STEP_NS: u64 = 500_000;
            const EVERY_NS: u64 = 100_000_000;
            const PERIOD_NS: u64 = 100_000;
            let base = Instant::now();
            let wall = |t: u64| 1_700_000_000_000_000_000 + t + t / EVERY_NS * STEP_NS;
            let tsc = |t: u64| 1_000_000 + t * 5 / 2;
            let mut refreshed = 0;
            for t in (0..1_000_000_000).step_by(PERIOD_NS as usize) {
                let stamp = anchored(&cell, tsc(t)).unwrap_or_else(|| {
                    refreshed += 1;
                    let reading = Reading {
                        tsc: tsc(t),
                        nanos: wall(t),
                        mono_tsc: tsc(t),
                        mono: base + Duration::from_nanos(t),
                    };
                    refresh(&cell, reading, None);
                    wall(t)
                });
                let after_step = t >= EVERY_NS && t % EVERY_NS < REANCHOR_NS + PERIOD_NS;
                let allowed = if after_step { STEP_NS + 1_000 } else { 1_000 };
                let off = stamp.abs_diff(wall(t));
                assert!(off <= allowed, "at {t} ns the stamp is {off} ns off");
            }
            let expected: u64 = (1 << 32) * 2 / 5; // 0.4 ns a tick
            let rate = cell.rate_q32.get();
            assert!(
                rate.abs_diff(expected) <= expected / 100_000,
                "rate {rate}, expected {expected}"
            );
            // About one refresh a millisecond, not one a stamp.
            assert!((900..1_100).contains(&refreshed), "{refreshed} refreshes");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{collections::VecDeque, time::Instant};

    use super::*;

    /// How far the wall clock stepped lately, against the monotonic clock, which is never
    /// stepped: the spread of their difference over the samples of the last few anchor
    /// refreshes. A stamp may be off by that much, besides [`TOLERANCE_NANOS`], until its thread's
    /// anchor is refreshed. About 0 where nothing steps the wall clock (one sandbox here stepped
    /// it 0.5 ms ahead every 100 ms); a thread preempted between the two reads only widens it.
    struct Steps {
        base: Instant,
        seen: VecDeque<(u64, i128)>,
    }

    impl Steps {
        const WINDOW_NS: u64 = 3 * REANCHOR_NS;

        fn new() -> Self {
            Steps {
                base: Instant::now(),
                seen: VecDeque::new(),
            }
        }

        /// Samples the difference now; returns the spread over the window.
        fn sample(&mut self) -> u64 {
            let mono = self.base.elapsed().as_nanos() as u64;
            let offset = i128::from(precise_nanos()) - i128::from(mono);
            self.seen.push_back((mono, offset));
            while self
                .seen
                .front()
                .is_some_and(|&(t, _)| t + Self::WINDOW_NS < mono)
            {
                self.seen.pop_front();
            }
            let offsets = self.seen.iter().map(|&(_, o)| o);
            let spread = offsets.clone().max().unwrap_or(0) - offsets.min().unwrap_or(0);
            spread as u64
        }
    }

    /// Asserts `stamp` lies within the tolerance, plus the wall clock's recent steps, of the
    /// wall-clock reads `before` and `after` it.
    fn assert_tracks(stamp: u64, before: u64, after: u64, steps: u64) {
        let slack = TOLERANCE_NANOS + steps;
        assert!(
            stamp + slack >= before,
            "stamp {stamp} before {before} (wall clock stepped {steps} ns lately)"
        );
        assert!(
            stamp <= after + slack,
            "stamp {stamp} after {after} (wall clock stepped {steps} ns lately)"
        );
    }

    #[test]
    fn stamps_track_the_wall_clock() {
        let mut steps = Steps::new();
        for _ in 0..200 {
            steps.sample();
            let before = precise_nanos();
            let stamp = now_nanos();
            let after = precise_nanos();
            assert_tracks(stamp, before, after, steps.sample());
            std::thread::sleep(Duration::from_micros(300));
        }
    }

    /// The publish paths' stamp, once the thread's anchor is set and calibrated (a millisecond
    /// or so of `now_nanos` calls), tracks the wall clock as `now_nanos` does.
    #[test]
    fn anchored_stamps_track_the_wall_clock() {
        let mut steps = Steps::new();
        let mut anchored = 0;
        for _ in 0..200 {
            steps.sample();
            let before = precise_nanos();
            let _ = now_nanos(); // anchors the thread and calibrates its rate as time passes
            let stamp = now_if_anchored();
            let after = precise_nanos();
            let stepped = steps.sample();
            if let Some(stamp) = stamp {
                anchored += 1;
                assert!(stamp > 0);
                assert_tracks(stamp, before, after, stepped);
            }
            std::thread::sleep(Duration::from_micros(300));
        }
        #[cfg(all(target_arch = "x86_64", not(loom)))]
        if tsc::usable() {
            assert!(anchored > 100, "anchored for {anchored} of 200 reads");
        }
        #[cfg(not(all(target_arch = "x86_64", not(loom))))]
        assert_eq!(anchored, 0, "no anchor off x86_64");
    }
}
