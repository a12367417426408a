//! What a segment switch costs the record that starts the segment, on a paced stream: one
//! producer publishes a record every `PERIOD_NS` (2 µs unless given) on its own core into the
//! harness's ring-like topic (single producer, `max_records(1 << 16)`, `Block`, no timestamps,
//! segments of 16384), or with `default` into a default topic (many producers, timestamps, no
//! retention, segments of 1024); one reader on another core notes when each record reaches it.
//! The table splits the records into those that start a segment, the one after each, and the
//! rest; a record's latency is from its scheduled send time, as in the harness's `lat`.
//!
//! ```text
//! cargo run --release -p logbus-perf --bin switch [-- RECORDS [PERIOD_NS [ring|default]]]
//! ```
//!
//! logbus alone: the peers have no segments. It is for comparing builds of the engine, so run
//! two builds' binaries alternately, a few rounds each, and compare round by round: on the
//! 2-vCPU VM the whole table moves with the host's phase (see `perf/README.md`).

use std::{
    process::ExitCode,
    thread,
    time::{Duration, Instant},
};

use logbus::{Overflow, Start, Topic, TopicConfig};

/// The most records a run takes: it keeps three 8-byte times a record (2.4 GB at this many).
const MAX_RECORDS: u64 = 100_000_000;

/// The topic a run publishes into.
#[derive(Clone, Copy)]
enum Kind {
    /// The harness's ring-like topic.
    Ring,
    /// `TopicConfig::default()`.
    Default,
}

impl Kind {
    /// Slots a segment: the ring-like topic's (a quarter of its retention, at most 16384), or
    /// the default.
    fn segment(self) -> u64 {
        match self {
            Kind::Ring => 1 << 14,
            Kind::Default => logbus::DEFAULT_SEGMENT_SIZE as u64,
        }
    }

    fn config(self) -> TopicConfig<u64> {
        match self {
            Kind::Ring => TopicConfig::default()
                .single_producer()
                .max_records(1 << 16)
                .overflow(Overflow::Block)
                .timestamps(false)
                .segment_size(self.segment() as usize),
            Kind::Default => TopicConfig::default(),
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number = |i: usize, default: u64| match args.get(i) {
        None => Ok(default),
        Some(a) => a.parse::<u64>().ok().filter(|&n| n > 0).ok_or(a.clone()),
    };
    let kind = match args.get(2).map(String::as_str) {
        None | Some("ring") => Some(Kind::Ring),
        Some("default") => Some(Kind::Default),
        Some(_) => None,
    };
    let (records, period, kind) = match (number(0, 2_000_000), number(1, 2_000), kind) {
        (Ok(r), Ok(p), Some(k))
            if (4 * k.segment()..=MAX_RECORDS).contains(&r) && args.len() <= 3 =>
        {
            (r, p, k)
        }
        _ => {
            eprintln!(
                "usage: switch [RECORDS [PERIOD_NS [ring|default]]]: whole numbers, RECORDS at \
                 least four segments (65536 on the ring-like topic, 4096 on the default one) and \
                 at most {MAX_RECORDS}"
            );
            return ExitCode::FAILURE;
        }
    };
    let segment = kind.segment();
    let run = measure(records, period, kind);
    // The first tenth warms up (the pool's segments, the caches), as in `lat`.
    let warm = records / 10;
    let latency = |k: u64| run.arrived[k as usize].saturating_sub(run.due[k as usize]);
    let pick = |keep: fn(u64) -> bool| -> Vec<u64> {
        (warm..records)
            .filter(|&k| keep(k % segment))
            .map(latency)
            .collect()
    };
    let topic = match kind {
        Kind::Ring => "the ring-like topic",
        Kind::Default => "a default topic",
    };
    println!(
        "# segment switch: {records} records into {topic} (segments of {segment}), one per \
         {period} ns, 1→1 (producer on core 0, reader on core 1), the first {warm} not counted\n"
    );
    println!("| records | count | p50 ns | p90 ns | p99 ns | max ns |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (name, keep) in [
        ("starting a segment", (|i| i == 0) as fn(u64) -> bool),
        ("the next one", |i| i == 1),
        ("all others", |i| i > 1),
    ] {
        let mut v = pick(keep);
        v.sort_unstable();
        let q = |f: f64| v[((v.len() - 1) as f64 * f) as usize];
        println!(
            "| {name} | {} | {} | {} | {} | {} |",
            v.len(),
            q(0.5),
            q(0.9),
            q(0.99),
            q(1.0)
        );
    }
    let mut calls: Vec<u64> = (warm..records)
        .filter(|k| k % segment == 0)
        .map(|k| run.took[k as usize])
        .collect();
    calls.sort_unstable();
    println!(
        "\nThe publish calls that start a segment took {} ns (median; the call returns after \
         the switch's step, which follows the record's publish).",
        calls[calls.len() / 2]
    );
    ExitCode::SUCCESS
}

/// Nanoseconds since the run's base, per record: when it was due, when the reader had it, and
/// how long its publish call took.
struct Run {
    due: Vec<u64>,
    arrived: Vec<u64>,
    took: Vec<u64>,
}

fn pin(core: usize) {
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    if cores.len() >= 2 {
        core_affinity::set_for_current(cores[core]);
    }
}

fn measure(records: u64, period_ns: u64, kind: Kind) -> Run {
    let topic = Topic::new("switch", kind.config()).expect("a valid configuration");
    let mut reader = topic.reader(0, Start::Earliest).expect("partition 0");
    let mut producer = topic.producer().expect("a producer");
    let base = Instant::now();
    let n = records as usize;
    let read = thread::spawn(move || {
        pin(1);
        let mut arrived = vec![0; n];
        let mut next = 0;
        while next < n {
            let batch = reader.next_batch(4096).expect("the topic stays open");
            let now = base.elapsed().as_nanos() as u64;
            for &v in batch.values() {
                assert_eq!(v, next as u64, "records arrive in order");
                arrived[next] = now;
                next += 1;
            }
        }
        arrived
    });
    pin(0);
    // Let the reader start waiting.
    thread::sleep(Duration::from_millis(20));
    let start = base.elapsed();
    let (mut due, mut took) = (vec![0; n], vec![0; n]);
    for k in 0..records {
        let at = start + Duration::from_nanos(period_ns.saturating_mul(k));
        while base.elapsed() < at {
            std::hint::spin_loop();
        }
        let before = base.elapsed();
        producer.publish(k).expect("the topic stays open");
        took[k as usize] = (base.elapsed() - before).as_nanos() as u64;
        due[k as usize] = at.as_nanos() as u64;
    }
    let arrived = read.join().expect("the reader checks the order");
    Run { due, arrived, took }
}
