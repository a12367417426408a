//! Criterion benchmarks of the engine's hot paths.
//!
//! `cargo bench` runs them; `.ci/run` runs them once each in test mode (`cargo bench -- --test`) so
//! they never rot. Cross-thread figures depend on how this VM places its two vCPUs: compare them
//! only with figures from the same run (see `perf/` for side-by-side comparisons with peers).

use std::{
    hint::black_box,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Barrier,
    },
    thread,
    time::{Duration, Instant},
};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use logbus::{Producers, ReadError, Record, Start, Topic, TopicConfig};

const N: u64 = 1 << 16;

fn topic(producers: Producers) -> Topic<u64> {
    // Retention keeps memory flat across criterion's many iterations.
    Topic::new(
        "bench",
        TopicConfig::default()
            .producers(producers)
            .max_records(1 << 20),
    )
    .unwrap()
}

fn modes() -> [(&'static str, Producers); 2] {
    [("multi", Producers::Multi), ("single", Producers::Single)]
}

/// Publishing from one thread, no reader.
fn publish(c: &mut Criterion) {
    let mut g = c.benchmark_group("publish");
    g.throughput(Throughput::Elements(N));
    for (name, mode) in modes() {
        let t = topic(mode);
        let mut p = t.producer().unwrap();
        g.bench_function(BenchmarkId::new("one_by_one", name), |b| {
            b.iter(|| {
                for i in 0..N {
                    black_box(p.publish(i).unwrap());
                }
            })
        });
        let mut buf = Vec::with_capacity(256);
        g.bench_function(BenchmarkId::new("batch_256", name), |b| {
            b.iter(|| {
                for chunk in 0..N / 256 {
                    buf.clear();
                    buf.extend(chunk * 256..(chunk + 1) * 256);
                    black_box(p.publish_batch(buf.drain(..)).unwrap());
                }
            })
        });
        // The same batches from a slice the caller keeps: no staging copy.
        g.bench_function(BenchmarkId::new("slice_256", name), |b| {
            b.iter(|| {
                for chunk in 0..N / 256 {
                    buf.clear();
                    buf.extend(chunk * 256..(chunk + 1) * 256);
                    black_box(p.publish_slice(&buf).unwrap());
                }
            })
        });
    }
    // The convenience path: a pin and a segment look-up per publish (see `Log::publish_unheld`).
    for (name, mode) in modes() {
        let t = topic(mode);
        g.bench_function(BenchmarkId::new("topic_publish", name), |b| {
            b.iter(|| {
                for i in 0..N {
                    black_box(t.publish(i).unwrap());
                }
            })
        });
    }
    g.finish();
}

/// Reading what is already published, from one thread.
fn read(c: &mut Criterion) {
    let mut g = c.benchmark_group("read");
    g.throughput(Throughput::Elements(N));
    for (name, mode) in modes() {
        let t = topic(mode);
        let mut p = t.producer().unwrap();
        for i in 0..N {
            p.publish(i).unwrap();
        }
        let mut r = t.reader(0, Start::Earliest).unwrap();
        g.bench_function(BenchmarkId::new("one_by_one", name), |b| {
            b.iter(|| {
                r.seek(Start::Offset(0)).unwrap();
                let mut sum = 0u64;
                for _ in 0..N {
                    sum += *r.next().unwrap();
                }
                black_box(sum)
            })
        });
        g.bench_function(BenchmarkId::new("batch_256", name), |b| {
            b.iter(|| {
                r.seek(Start::Offset(0)).unwrap();
                let mut sum = 0u64;
                let mut n = 0;
                while n < N {
                    let batch = r.next_batch(256).unwrap();
                    n += batch.len() as u64;
                    sum += batch.values().sum::<u64>();
                }
                black_box(sum)
            })
        });
    }
    g.finish();
}

/// The other ways to read, from one thread, over records already published: a named consumer's
/// `poll` (Kafka's loop, a commit per poll) and a reader's owning iterator. Their fast paths are
/// the reader's, one call further out; these benches are how a call that stops inlining shows.
fn consume(c: &mut Criterion) {
    let mut g = c.benchmark_group("consume");
    g.throughput(Throughput::Elements(N));
    let t = topic(Producers::Single);
    let mut p = t.producer().unwrap();
    for i in 0..N {
        p.publish(i).unwrap();
    }
    let mut consumer = t.consumer("bench", Start::Earliest).unwrap();
    for (name, max, commit) in [
        ("poll/1", 1, false),
        ("poll/256", 256, false),
        ("poll_commit/256", 256, true),
    ] {
        g.bench_function(name, |b| {
            b.iter(|| {
                consumer.seek_to_beginning();
                let mut sum = 0u64;
                let mut n = 0;
                while n < N {
                    let batch = consumer.poll(max).unwrap();
                    n += batch.len() as u64;
                    sum += batch.values().sum::<u64>();
                    if commit {
                        consumer.commit();
                    }
                }
                black_box(sum)
            })
        });
    }
    let mut r = t.reader(0, Start::Earliest).unwrap();
    g.bench_function("reader_iter", |b| {
        b.iter(|| {
            r.seek(Start::Offset(0)).unwrap();
            let sum: u64 = r
                .iter()
                .take(N as usize)
                .map(|rec| rec.unwrap().value)
                .sum();
            black_box(sum)
        })
    });
    g.finish();
}

/// A push subscription's delivery loop: records published while it is paused, then the time from
/// `resume` until the handler (on the subscription's thread) has seen the last one. The producer
/// is out of the timing, so this is the loop's own cost per record, as `read` is the reader's.
fn subscription(c: &mut Criterion) {
    let mut g = c.benchmark_group("subscription");
    g.throughput(Throughput::Elements(N));
    g.sample_size(20);
    let t = topic(Producers::Single);
    let handled = Arc::new(AtomicU64::new(0));
    let progress = handled.clone();
    let mut count = 0;
    let sub = t
        .subscribe("bench", Start::Latest, move |_: &Record<'_, u64>| {
            // A store, not a locked add: the handler is the only writer.
            count += 1;
            progress.store(count, Ordering::Release);
            Ok::<(), std::convert::Infallible>(())
        })
        .unwrap();
    let mut p = t.producer().unwrap();
    let mut published = 0;
    g.bench_function("handler", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                sub.pause();
                for i in 0..N {
                    p.publish(i).unwrap();
                }
                published += N;
                let start = Instant::now();
                sub.resume();
                // Yield, not sleep: a sleep's timer slack (~50 µs) would be a tenth of the time.
                while handled.load(Ordering::Acquire) < published {
                    thread::yield_now();
                }
                total += start.elapsed();
            }
            total
        })
    });
    g.finish();
}

/// One producer thread, `readers` reader threads; time until the slowest reader has all records.
fn fan_out(mode: Producers, readers: usize, iters: u64) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        let t = topic(mode);
        let barrier = Arc::new(Barrier::new(readers + 1));
        let handles: Vec<_> = (0..readers)
            .map(|_| {
                let mut r = t.reader(0, Start::Earliest).unwrap();
                let barrier = barrier.clone();
                thread::spawn(move || {
                    barrier.wait();
                    let mut expected = 0u64;
                    while expected < N {
                        match r.next_batch(1024) {
                            Ok(b) => {
                                for v in b.values() {
                                    assert_eq!(*v, expected);
                                    expected += 1;
                                }
                            }
                            Err(ReadError::Lagged(_)) => panic!("no retention in this bench"),
                            Err(e) => panic!("{e}"),
                        }
                    }
                    Instant::now()
                })
            })
            .collect();
        let mut p = t.producer().unwrap();
        barrier.wait();
        let start = Instant::now();
        for i in 0..N {
            p.publish(i).unwrap();
        }
        let end = handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .max()
            .unwrap();
        total += end - start;
    }
    total
}

fn cross_thread(c: &mut Criterion) {
    let mut g = c.benchmark_group("cross_thread");
    g.throughput(Throughput::Elements(N));
    g.sample_size(20);
    for (name, mode) in modes() {
        g.bench_function(BenchmarkId::new("1to1", name), |b| {
            b.iter_custom(|iters| fan_out(mode, 1, iters))
        });
        g.bench_function(BenchmarkId::new("1to4", name), |b| {
            b.iter_custom(|iters| fan_out(mode, 4, iters))
        });
    }
    g.finish();
    // What the timing above includes besides the records: from the barrier to the end of a
    // reader thread that has none to read. A group of its own, without the record throughput
    // (criterion would report N records per wake-up). Both threads first meet at a barrier, so
    // the thread is running; the time is from the main thread's arrival at a second barrier to
    // the thread's end. (From the barrier's release, as above, the thread's end often came first:
    // a zero time, which criterion rejects.)
    let mut g = c.benchmark_group("cross_thread_baseline");
    g.sample_size(20);
    g.bench_function("barrier_to_thread_end", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let barrier = Arc::new(Barrier::new(2));
                let b2 = barrier.clone();
                let h = thread::spawn(move || {
                    b2.wait();
                    b2.wait();
                    Instant::now()
                });
                barrier.wait();
                let start = Instant::now();
                barrier.wait();
                total += h.join().unwrap().saturating_duration_since(start);
            }
            total
        })
    });
    g.finish();
}

criterion_group!(benches, publish, read, consume, subscription, cross_thread);
criterion_main!(benches);
