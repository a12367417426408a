//! The side-by-side harness: fan-out throughput with pinned threads, and this machine's
//! core-to-core floor printed beside every figure.
//!
//! ```text
//! cargo run --release -p logbus-perf -- [--quick] [--records N] [--runs K]
//! ```
//!
//! Each scenario runs every contender through the [`Contender`] trait in the same process,
//! interleaved run by run, and reports the median (with min and max) of the slowest subscriber's
//! rate. Before each run the harness probes the core-to-core round trip and waits (bounded) for the
//! VM's fast state, then prints the probe beside the figures.

use std::{
    sync::{
        atomic::{AtomicU64, Ordering},
        mpsc, Arc, Barrier, Condvar, Mutex,
    },
    thread,
    time::{Duration, Instant},
};

use logbus::{ReadError, Start, Topic, TopicConfig};

/// A library under test: one producer publishes `0..n`, `subscribers` threads each receive all of
/// it in order; returns the time until the slowest subscriber is done.
trait Contender: Sync {
    fn name(&self) -> &'static str;
    fn run(&self, subscribers: usize, n: u64, pins: &Pins) -> Duration;
}

/// Where threads go: the producer on the first core, subscribers round-robin on the others.
struct Pins {
    cores: Vec<core_affinity::CoreId>,
}

impl Pins {
    fn new() -> Self {
        Pins {
            cores: core_affinity::get_core_ids().unwrap_or_default(),
        }
    }

    fn producer(&self) {
        if let Some(c) = self.cores.first() {
            core_affinity::set_for_current(*c);
        }
    }

    fn subscriber(&self, i: usize) {
        match self.cores.len() {
            0 => {}
            1 => {
                core_affinity::set_for_current(self.cores[0]);
            }
            n => {
                core_affinity::set_for_current(self.cores[1 + i % (n - 1)]);
            }
        }
    }

    /// The core id subscriber `i` goes to (for libraries that pin their own threads).
    fn subscriber_core(&self, i: usize) -> usize {
        match self.cores.len() {
            0 | 1 => 0,
            n => self.cores[1 + i % (n - 1)].id,
        }
    }

    fn describe(&self, subscribers: usize) -> String {
        match self.cores.len() {
            0 => "unpinned".into(),
            1 => "all on core 0".into(),
            n => {
                let subs: Vec<String> = (0..subscribers)
                    .map(|i| self.cores[1 + i % (n - 1)].id.to_string())
                    .collect();
                format!(
                    "producer on core {}, subscribers on cores [{}]",
                    self.cores[0].id,
                    subs.join(",")
                )
            }
        }
    }
}

/// One-way core-to-core latency: two pinned threads bounce one cache line; half the round trip.
fn probe_floor(pins: &Pins) -> Duration {
    let line = Arc::new(AtomicU64::new(0));
    let rounds = 20_000u64;
    let l2 = line.clone();
    let cores = pins.cores.clone();
    let echo = thread::spawn(move || {
        if let Some(c) = cores.get(1).or(cores.first()) {
            core_affinity::set_for_current(*c);
        }
        for i in 0..rounds {
            while l2.load(Ordering::Acquire) != 2 * i + 1 {
                std::hint::spin_loop();
            }
            l2.store(2 * i + 2, Ordering::Release);
        }
    });
    pins.producer();
    let start = Instant::now();
    for i in 0..rounds {
        line.store(2 * i + 1, Ordering::Release);
        while line.load(Ordering::Acquire) != 2 * i + 2 {
            std::hint::spin_loop();
        }
    }
    let elapsed = start.elapsed();
    echo.join().unwrap();
    elapsed / (2 * rounds as u32)
}

/// Probes until the one-way floor is under `fast`, for at most `budget`; returns the last probe.
fn wait_for_fast_state(pins: &Pins, fast: Duration, budget: Duration) -> Duration {
    let start = Instant::now();
    loop {
        // On a thread of its own, so the main thread stays unpinned.
        let floor = thread::scope(|s| s.spawn(|| probe_floor(pins)).join().unwrap());
        if floor <= fast || start.elapsed() >= budget {
            return floor;
        }
        thread::sleep(Duration::from_millis(200));
    }
}

/// logbus with a given configuration.
struct Logbus(&'static str, fn() -> TopicConfig<u64>);

/// The default topic (unbounded retention, timestamps) with one producer.
fn logbus_default_single() -> TopicConfig<u64> {
    TopicConfig::default().single_producer()
}

/// The default topic with many producers allowed.
fn logbus_default_multi() -> TopicConfig<u64> {
    TopicConfig::default()
}

/// Like a ring buffer: 64 Ki records retained, publishers wait for the slowest reader, no
/// timestamps (the Disruptor's events carry none either).
fn logbus_ring_single() -> TopicConfig<u64> {
    TopicConfig::default()
        .single_producer()
        .max_records(1 << 16)
        .overflow(logbus::Overflow::Block)
        .timestamps(false)
}

impl Contender for Logbus {
    fn name(&self) -> &'static str {
        self.0
    }

    fn run(&self, subscribers: usize, n: u64, pins: &Pins) -> Duration {
        let topic = Topic::<u64>::new("perf", (self.1)()).unwrap();
        let barrier = Arc::new(Barrier::new(subscribers + 1));
        let handles: Vec<_> = (0..subscribers)
            .map(|i| {
                let mut r = topic.reader(0, Start::Earliest).unwrap();
                let barrier = barrier.clone();
                let pins = Pins {
                    cores: pins.cores.clone(),
                };
                thread::spawn(move || {
                    pins.subscriber(i);
                    barrier.wait();
                    let mut expected = 0u64;
                    while expected < n {
                        match r.next_batch(4096) {
                            Ok(b) => {
                                for v in b.values() {
                                    assert_eq!(*v, expected, "out of order");
                                    expected += 1;
                                }
                            }
                            Err(ReadError::Lagged(_)) => panic!("lag without retention"),
                            Err(e) => panic!("{e}"),
                        }
                    }
                    Instant::now()
                })
            })
            .collect();
        pins.producer();
        let mut p = topic.producer().unwrap();
        barrier.wait();
        let start = Instant::now();
        for i in 0..n {
            p.publish(i).unwrap();
        }
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .max()
            .unwrap()
            - start
    }
}

/// The textbook design: an append-only `Mutex<Vec<_>>` log, a `Condvar`, per-subscriber offsets.
struct MutexLog;

impl Contender for MutexLog {
    fn name(&self) -> &'static str {
        "Mutex<Vec> + Condvar"
    }

    fn run(&self, subscribers: usize, n: u64, pins: &Pins) -> Duration {
        let log = Arc::new((
            Mutex::new(Vec::<u64>::with_capacity(n as usize)),
            Condvar::new(),
        ));
        let barrier = Arc::new(Barrier::new(subscribers + 1));
        let handles: Vec<_> = (0..subscribers)
            .map(|i| {
                let log = log.clone();
                let barrier = barrier.clone();
                let pins = Pins {
                    cores: pins.cores.clone(),
                };
                thread::spawn(move || {
                    pins.subscriber(i);
                    barrier.wait();
                    let mut next = 0usize;
                    while (next as u64) < n {
                        let (lock, cond) = &*log;
                        let mut v = lock.lock().unwrap();
                        while v.len() == next {
                            v = cond.wait(v).unwrap();
                        }
                        for (k, x) in v[next..].iter().enumerate() {
                            assert_eq!(*x, (next + k) as u64);
                        }
                        next = v.len();
                    }
                    Instant::now()
                })
            })
            .collect();
        pins.producer();
        barrier.wait();
        let start = Instant::now();
        for i in 0..n {
            let (lock, cond) = &*log;
            lock.lock().unwrap().push(i);
            cond.notify_all();
        }
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .max()
            .unwrap()
            - start
    }
}

/// One bounded crossbeam-style channel per subscriber (std's `sync_channel`), the producer sends
/// to each.
struct ChannelPerSubscriber;

impl Contender for ChannelPerSubscriber {
    fn name(&self) -> &'static str {
        "std mpsc::sync_channel per subscriber"
    }

    fn run(&self, subscribers: usize, n: u64, pins: &Pins) -> Duration {
        let barrier = Arc::new(Barrier::new(subscribers + 1));
        let mut senders = Vec::new();
        let handles: Vec<_> = (0..subscribers)
            .map(|i| {
                let (tx, rx) = mpsc::sync_channel::<u64>(4096);
                senders.push(tx);
                let barrier = barrier.clone();
                let pins = Pins {
                    cores: pins.cores.clone(),
                };
                thread::spawn(move || {
                    pins.subscriber(i);
                    barrier.wait();
                    for expected in 0..n {
                        assert_eq!(rx.recv().unwrap(), expected);
                    }
                    Instant::now()
                })
            })
            .collect();
        pins.producer();
        barrier.wait();
        let start = Instant::now();
        for i in 0..n {
            for tx in &senders {
                tx.send(i).unwrap();
            }
        }
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .max()
            .unwrap()
            - start
    }
}

/// The LMAX Disruptor port (nicholassm's `disruptor` crate), single producer, one event handler
/// per subscriber on a 64 Ki ring.
struct Disruptor<W: disruptor::wait_strategies::WaitStrategy + Copy + Send + Sync + 'static>(
    &'static str,
    W,
);

impl<W: disruptor::wait_strategies::WaitStrategy + Copy + Send + Sync + 'static> Contender
    for Disruptor<W>
{
    fn name(&self) -> &'static str {
        self.0
    }

    fn run(&self, subscribers: usize, n: u64, pins: &Pins) -> Duration {
        use disruptor::Sequence;
        let done: Arc<Mutex<Vec<Instant>>> = Arc::new(Mutex::new(Vec::new()));
        let handler = |done: Arc<Mutex<Vec<Instant>>>| {
            let mut expected = 0u64;
            move |e: &u64, _seq: Sequence, _end: bool| {
                assert_eq!(*e, expected, "out of order");
                expected += 1;
                if expected == n {
                    done.lock().unwrap().push(Instant::now());
                }
            }
        };
        use disruptor::ProcessorSettings;
        let core = |i| pins.subscriber_core(i);
        let b = disruptor::build_single_producer(1 << 16, || 0u64, self.1)
            .pin_at_core(core(0))
            .handle_events_with(handler(done.clone()));
        // The builder's and producer's types change with the number of handlers, so each fan-out
        // is spelled out.
        fn drive<P: disruptor::Producer<u64>>(mut producer: P, n: u64, pins: &Pins) -> Instant {
            pins.producer();
            let start = Instant::now();
            for i in 0..n {
                producer.publish(|e| *e = i);
            }
            drop(producer); // waits for every handler to finish
            start
        }
        let start = match subscribers {
            1 => drive(b.build(), n, pins),
            2 => drive(
                b.pin_at_core(core(1))
                    .handle_events_with(handler(done.clone()))
                    .build(),
                n,
                pins,
            ),
            4 => drive(
                b.pin_at_core(core(1))
                    .handle_events_with(handler(done.clone()))
                    .pin_at_core(core(2))
                    .handle_events_with(handler(done.clone()))
                    .pin_at_core(core(3))
                    .handle_events_with(handler(done.clone()))
                    .build(),
                n,
                pins,
            ),
            other => panic!("no disruptor set-up for {other} subscribers"),
        };
        let done = done.lock().unwrap();
        assert_eq!(done.len(), subscribers);
        *done.iter().max().unwrap() - start
    }
}

/// One bounded crossbeam channel per subscriber; the producer sends to each.
struct Crossbeam;

impl Contender for Crossbeam {
    fn name(&self) -> &'static str {
        "crossbeam-channel, one per subscriber"
    }

    fn run(&self, subscribers: usize, n: u64, pins: &Pins) -> Duration {
        let barrier = Arc::new(Barrier::new(subscribers + 1));
        let mut senders = Vec::new();
        let handles: Vec<_> = (0..subscribers)
            .map(|i| {
                let (tx, rx) = crossbeam_channel::bounded::<u64>(4096);
                senders.push(tx);
                let barrier = barrier.clone();
                let pins = Pins {
                    cores: pins.cores.clone(),
                };
                thread::spawn(move || {
                    pins.subscriber(i);
                    barrier.wait();
                    for expected in 0..n {
                        assert_eq!(rx.recv().unwrap(), expected);
                    }
                    Instant::now()
                })
            })
            .collect();
        pins.producer();
        barrier.wait();
        let start = Instant::now();
        for i in 0..n {
            for tx in &senders {
                tx.send(i).unwrap();
            }
        }
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .max()
            .unwrap()
            - start
    }
}

struct Options {
    records: u64,
    runs: usize,
}

fn options() -> Options {
    let mut o = Options {
        records: 10_000_000,
        runs: 5,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--quick" => {
                o.records = 200_000;
                o.runs = 3;
            }
            "--records" => {
                i += 1;
                o.records = args
                    .get(i)
                    .and_then(|s| s.parse().ok())
                    .expect("--records N");
            }
            "--runs" => {
                i += 1;
                o.runs = args.get(i).and_then(|s| s.parse().ok()).expect("--runs K");
            }
            other => {
                eprintln!("unknown argument {other}; use --quick, --records N, --runs K");
                std::process::exit(2);
            }
        }
        i += 1;
    }
    o
}

fn main() {
    let o = options();
    let pins = Pins::new();
    let contenders: Vec<Box<dyn Contender>> = vec![
        Box::new(Logbus("logbus single producer", logbus_default_single)),
        Box::new(Logbus(
            "logbus single producer, ring-like",
            logbus_ring_single,
        )),
        Box::new(Logbus("logbus multi producer", logbus_default_multi)),
        Box::new(Disruptor("disruptor BusySpin", disruptor::BusySpin)),
        Box::new(Disruptor(
            "disruptor BusySpinWithSpinLoopHint",
            disruptor::BusySpinWithSpinLoopHint,
        )),
        Box::new(Crossbeam),
        Box::new(ChannelPerSubscriber),
        Box::new(MutexLog),
    ];
    println!("# logbus perf: fan-out throughput (u64 records, slowest subscriber)");
    println!(
        "machine: {} cores; {} records per run; median of {} runs",
        pins.cores.len(),
        o.records,
        o.runs
    );
    for subscribers in [1usize, 2, 4] {
        let floor = wait_for_fast_state(&pins, Duration::from_nanos(120), Duration::from_secs(20));
        println!(
            "\n## tput 1→{subscribers}  ({})",
            pins.describe(subscribers)
        );
        println!("core-to-core one-way floor before this table: {floor:?}\n");
        let mut results: Vec<Vec<f64>> = vec![Vec::new(); contenders.len()];
        for _ in 0..o.runs {
            for (k, c) in contenders.iter().enumerate() {
                // A fresh thread per run: pinning it leaves the main thread's affinity alone (some
                // libraries check the cores they may use from the thread that builds them).
                let d = thread::scope(|s| {
                    s.spawn(|| c.run(subscribers, o.records, &pins))
                        .join()
                        .unwrap()
                });
                results[k].push(o.records as f64 / d.as_secs_f64() / 1e6);
            }
        }
        let medians: Vec<f64> = results
            .iter_mut()
            .map(|r| {
                r.sort_by(|a, b| a.partial_cmp(b).unwrap());
                r[r.len() / 2]
            })
            .collect();
        let best_peer = medians[3..].iter().cloned().fold(0.0, f64::max);
        println!("| contender | median Mmsg/s | min | max | / best peer |");
        println!("|---|---:|---:|---:|---:|");
        for (k, c) in contenders.iter().enumerate() {
            let r = &results[k];
            println!(
                "| {} | {:.1} | {:.1} | {:.1} | {:.2}× |",
                c.name(),
                medians[k],
                r[0],
                r[r.len() - 1],
                medians[k] / best_peer
            );
        }
    }
}
