//! Runs one of the engine's single-thread paths over a number of records, for `perf/instructions.sh`
//! to count its instructions under callgrind.
//!
//! ```text
//! cargo run --release -p logbus-perf --bin count -- PATH RECORDS
//! cargo run --release -p logbus-perf --bin count -- paths    # the path names, one a line
//! ```
//!
//! `paths` is where `perf/instructions.sh` and `.ci/run` take their lists from, so a new path
//! needs adding here only.
//!
//! Each path's records go through one function of this binary (`measure_*`, never inlined) or,
//! for `subscription`, through the subscription thread's loop; the script takes that function's
//! inclusive count at two record counts and reports the difference per record, so the set-up
//! (topics, publishing what a read path reads) is left out. A count is exact and the same run
//! after run, where a timing on this VM moves by a third: it tells whether a change added
//! instructions to a loop, not how fast the loop is.

use std::{hint::black_box, process::ExitCode, sync::mpsc};

use logbus::{Overflow, Producers, Record, Start, Topic, TopicConfig};

/// One path: its name, what it counts, and how it runs over `n` records.
type PathEntry = (&'static str, &'static str, fn(u64));

/// The paths: the only list of them (`count paths` prints it for the scripts).
const PATHS: [PathEntry; 14] = [
    (
        "publish",
        "Producer::publish, single producer, no reader",
        |n| measure_publish(&topic(Producers::Single), n),
    ),
    (
        "multi-publish",
        "Producer::publish on the default topic (many producers), no reader",
        |n| measure_publish(&topic(Producers::Multi), n),
    ),
    (
        "ring-publish",
        "the same into the harness's ring-like topic (no timestamps)",
        |n| measure_publish(&ring(Producers::Single), n),
    ),
    (
        "ring-multi-publish",
        "the same into the harness's many-producer ring-like topic",
        |n| measure_publish(&ring(Producers::Multi), n),
    ),
    (
        "ring-publish-slice",
        "Producer::publish_slice of 256 into the ring-like topic (the harness's batch publish)",
        |n| measure_publish_slice(&ring(Producers::Single), n),
    ),
    (
        "ring-multi-publish-slice",
        "the same into the many-producer ring-like topic",
        |n| measure_publish_slice(&ring(Producers::Multi), n),
    ),
    (
        "topic-publish",
        "Topic::publish, many producers, no reader",
        |n| measure_topic_publish(&topic(Producers::Multi), n),
    ),
    (
        "topic-publish-single",
        "Topic::publish, single producer (the role claimed and given back each record), no reader",
        |n| measure_topic_publish(&topic(Producers::Single), n),
    ),
    ("read", "Reader::next over records already published", |n| {
        assert_sum(measure_read(&published(n), n), n)
    }),
    (
        "multi-read",
        "the same on the default topic (many producers: a stamp a slot)",
        |n| assert_sum(measure_read(&published_by(Producers::Multi, n), n), n),
    ),
    (
        "read-batch",
        "Reader::next_batch(256), summing the values",
        |n| assert_sum(measure_read_batch(&published(n), n), n),
    ),
    (
        "multi-read-batch",
        "the same on the default topic (many producers: a stamp a slot)",
        |n| assert_sum(measure_read_batch(&published_by(Producers::Multi, n), n), n),
    ),
    ("poll", "Consumer::poll(256) and a commit per poll", |n| {
        assert_sum(measure_poll(&published(n), n), n)
    }),
    (
        "subscription",
        "a subscription's loop, a handler that counts",
        |n| subscription(&published(n), n),
    ),
];

fn topic(producers: Producers) -> Topic<u64> {
    Topic::new("count", TopicConfig::default().producers(producers)).expect("a valid topic")
}

/// The harness's ring-like topics (`logbus_ring` and `logbus_multi_ring` in `main.rs`): a
/// capacity, publishers wait for the slowest reader (there is none here), no timestamps.
fn ring(producers: Producers) -> Topic<u64> {
    let config = TopicConfig::default()
        .producers(producers)
        .max_records(1 << 16)
        .overflow(Overflow::Block)
        .timestamps(false);
    Topic::new("count", config).expect("a valid topic")
}

/// A topic holding `0..n`.
fn published(n: u64) -> Topic<u64> {
    published_by(Producers::Single, n)
}

/// A topic of `producers` holding `0..n`.
fn published_by(producers: Producers, n: u64) -> Topic<u64> {
    let t = topic(producers);
    let mut p = t.producer().expect("the producer role is free");
    for i in 0..n {
        p.publish(i).expect("an unbounded topic takes every record");
    }
    t
}

#[inline(never)]
fn measure_publish(t: &Topic<u64>, n: u64) {
    let mut p = t.producer().expect("the producer role is free");
    for i in 0..n {
        black_box(p.publish(i).expect("an unbounded topic takes every record"));
    }
}

#[inline(never)]
fn measure_publish_slice(t: &Topic<u64>, n: u64) {
    let mut p = t.producer().expect("the producer role is free");
    let mut values = [0u64; 256];
    let mut sent = 0;
    while sent < n {
        let len = (n - sent).min(256) as usize;
        for (k, v) in values[..len].iter_mut().enumerate() {
            *v = sent + k as u64;
        }
        black_box(
            p.publish_slice(&values[..len])
                .expect("a ring with no reader takes every record"),
        );
        sent += len as u64;
    }
}

#[inline(never)]
fn measure_topic_publish(t: &Topic<u64>, n: u64) {
    for i in 0..n {
        black_box(t.publish(i).expect("an unbounded topic takes every record"));
    }
}

#[inline(never)]
fn measure_read(t: &Topic<u64>, n: u64) -> u64 {
    let mut r = t.reader(0, Start::Earliest).expect("partition 0 exists");
    let mut sum = 0;
    for _ in 0..n {
        sum += *r.next().expect("every record is published");
    }
    sum
}

#[inline(never)]
fn measure_read_batch(t: &Topic<u64>, n: u64) -> u64 {
    let mut r = t.reader(0, Start::Earliest).expect("partition 0 exists");
    let (mut sum, mut seen) = (0, 0);
    while seen < n {
        let batch = r.next_batch(256).expect("every record is published");
        seen += batch.len() as u64;
        sum += batch.values().sum::<u64>();
    }
    sum
}

#[inline(never)]
fn measure_poll(t: &Topic<u64>, n: u64) -> u64 {
    let mut c = t.consumer("count", Start::Earliest).expect("a fresh name");
    let (mut sum, mut seen) = (0, 0);
    while seen < n {
        let batch = c.poll(256).expect("every record is published");
        seen += batch.len() as u64;
        sum += batch.values().sum::<u64>();
        c.commit();
    }
    sum
}

/// The subscription's thread runs the loop; this thread waits on a channel, so it adds nothing
/// while the loop runs.
fn subscription(t: &Topic<u64>, n: u64) {
    let (done, finished) = mpsc::channel();
    let mut seen = 0;
    let mut sub = t
        .subscribe("count", Start::Earliest, move |_: &Record<'_, u64>| {
            seen += 1;
            if seen == n {
                let _ = done.send(());
            }
            Ok::<(), std::convert::Infallible>(())
        })
        .expect("a fresh name");
    finished.recv().expect("the handler sees the last record");
    sub.close();
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [only] = &args[..] {
        if only == "paths" {
            for (name, _, _) in PATHS {
                println!("{name}");
            }
            return ExitCode::SUCCESS;
        }
    }
    let (path, n) = match &args[..] {
        [path, n] => match n.parse::<u64>() {
            Ok(n) if n > 0 => (path.as_str(), n),
            _ => return usage("RECORDS is a whole number above 0"),
        },
        _ => return usage("expected PATH RECORDS"),
    };
    match PATHS.iter().find(|(name, _, _)| *name == path) {
        Some((_, _, run)) => run(n),
        None => return usage(&format!("no path {path:?}")),
    }
    ExitCode::SUCCESS
}

/// Every read path checks that it read `0..n`.
fn assert_sum(sum: u64, n: u64) {
    assert_eq!(sum, n * (n - 1) / 2, "the records read are not 0..{n}");
}

fn usage(why: &str) -> ExitCode {
    eprintln!("count: {why}\nusage: count PATH RECORDS | count paths\npaths:");
    let width = PATHS
        .iter()
        .map(|(name, _, _)| name.len())
        .max()
        .unwrap_or(0);
    for (name, what, _) in PATHS {
        eprintln!("  {name:<width$} {what}");
    }
    ExitCode::from(2)
}
