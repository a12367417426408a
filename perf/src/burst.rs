//! The `burst` scenario: the Disruptor's own benchmark, run for every contender.
//!
//! nicholassm/disruptor-rs measures itself (`benches/spsc.rs`) by a round trip: one producer
//! publishes a burst of 1, 10 or 100 events into a ring of 128, then spins until its one
//! handler, on another thread, has stored the burst's last value into a shared word; then the
//! next burst. It reports the time per burst, after a pause of 0, 1 or 10 ms before each sample
//! of bursts. This is that shape for every contender of the thread scenarios: their subscriber
//! loops as they are (logbus's reader parks after spinning briefly, the channels' `recv` parks,
//! the Disruptor's wait strategies do what they do), each subscriber's sink storing every value
//! it receives into a shared word after checking that it is the next one, the producer a pinned
//! thread publishing each burst through the library's batch publish where it has one (the bench
//! gives the Disruptor its `batch_publish`) and spinning on that word.
//!
//! Two figures come out of a run. With no pause, the median over samples of the mean time per
//! burst: what the bench reports. After a pause, the first burst alone (the median over
//! samples): a pause as long as the bench's leaves a parked subscriber parked, so the first burst
//! pays its wake-up, which the bench's figure spreads over a whole sample of bursts, and a
//! spinning one has spent a core the whole while (the `idle` scenario says how much).

use std::{
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    thread,
    time::{Duration, Instant},
};

use crate::{median, Bus, Pins, Run, Tx};

/// The ring (or channel) size the bench gives the Disruptor and crossbeam.
pub(crate) const CAPACITY: usize = 128;

/// The bench's burst sizes.
pub(crate) const SIZES: [u64; 3] = [1, 10, 100];

/// The bench's pauses before a sample of bursts, after the one without.
pub(crate) const PAUSES: [Duration; 2] = [Duration::from_millis(1), Duration::from_millis(10)];

/// How much a run does: `bursts` bursts a sample, `samples` samples at each pause (and with none),
/// after one sample's worth of bursts to warm up.
#[derive(Clone, Copy)]
pub(crate) struct Shape {
    pub(crate) size: u64,
    pub(crate) bursts: u64,
    pub(crate) samples: usize,
}

/// One run of `bus`: nanoseconds per burst with no pause (the median over samples of each
/// sample's mean), then for each of [`PAUSES`] the first burst after it (the median over
/// samples).
pub(crate) fn burst<B: Bus>(bus: &B, pins: &Pins, shape: Shape) -> [f64; 3] {
    let Shape {
        size,
        bursts,
        samples,
    } = shape;
    let sample_runs = 1 + samples as u64 * (1 + PAUSES.len() as u64);
    let total = sample_runs * bursts * size;
    // The last value the subscriber has received: values run 1..=total, so 0 is none yet.
    let seen = Arc::new(AtomicU64::new(0));
    let sink_seen = seen.clone();
    let run = Run {
        capacity: CAPACITY,
        total: total as usize,
        batch: false,
    };
    let (txs, join) = bus.start(1, 1, run, pins, move |_| {
        let seen = sink_seen.clone();
        let mut next = 1u64;
        move |v: u64| {
            if v != next {
                out_of_order(v, next);
            }
            next += 1;
            // Release: the producer's Acquire load of the last value sees the burst done.
            seen.store(v, Ordering::Release);
            v == total
        }
    });
    let tx = txs.into_iter().next().expect("one sender");
    let pins = pins.clone();
    let figures = thread::spawn(move || {
        // A local of the thread, as in the throughput runs.
        let mut tx = tx;
        pins.producer(0);
        let mut buf = Vec::with_capacity(size as usize);
        let mut next = 1u64;
        let mut one_burst = |tx: &mut B::Tx| {
            if size == 1 {
                tx.send(next);
            } else {
                buf.clear();
                buf.extend(next..next + size);
                tx.send_batch(&buf);
            }
            next += size;
            let last = next - 1;
            // Acquire: pairs with the sink's Release store (the bench spins on its word alike).
            while seen.load(Ordering::Acquire) != last {}
        };
        // One sample's worth to warm up: the subscriber's first wake-up, the first lines moved.
        for _ in 0..bursts {
            one_burst(&mut tx);
        }
        let mut per_burst = Vec::with_capacity(samples);
        for _ in 0..samples {
            let start = Instant::now();
            for _ in 0..bursts {
                one_burst(&mut tx);
            }
            per_burst.push(start.elapsed().as_nanos() as f64 / bursts as f64);
        }
        let mut firsts = [0.0; PAUSES.len()];
        for (pause, first) in PAUSES.iter().zip(&mut firsts) {
            let mut times = Vec::with_capacity(samples);
            for _ in 0..samples {
                thread::sleep(*pause);
                let start = Instant::now();
                one_burst(&mut tx);
                times.push(start.elapsed().as_nanos() as f64);
                for _ in 1..bursts {
                    one_burst(&mut tx);
                }
            }
            *first = median(&mut times);
        }
        assert_eq!(next - 1, total, "the run sent what it planned");
        [median(&mut per_burst), firsts[0], firsts[1]]
    })
    .join()
    .unwrap();
    join();
    figures
}

#[cold]
#[inline(never)]
fn out_of_order(v: u64, expected: u64) -> ! {
    panic!("out of order: got {v}, expected {expected}")
}
