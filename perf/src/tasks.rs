//! The `async` scenario's contenders: subscribers as tasks rather than threads, for the users who
//! read from tokio. Every subscriber of a run is a task of one current-thread tokio runtime, whose
//! thread is pinned where the first subscriber thread would be (core 1 on two cores); the producer
//! is a plain pinned thread, as a feed handler publishing into an async service would be. Each
//! task receives one message at a time (`Reader::next_async`, `recv().await`), in order, into the
//! same sinks the thread scenarios use.
//!
//! Peers: tokio's own channels (a `broadcast` sized not to lag, as in the thread scenarios, and an
//! `mpsc` channel per subscriber that the producer fills with `blocking_send`) and kanal's async
//! receivers (a bounded channel per subscriber, sent to through its blocking side). The other peers
//! have no async receive.

use std::{future::Future, thread};

use logbus::{Reader, Start, Topic, TopicConfig, WaitStrategy};

use crate::{logbus_ring, Bus, LogbusTx, Pins, Run, Sink, TokioTx, Tx};

/// Runs `body(receiver, sink)` as one task per receiver, all on a current-thread runtime on a
/// thread of their own, pinned to the first subscriber's core; returns a function that waits for
/// every task to finish.
fn spawn_tasks<R: Send + 'static, S: Sink, F: Future<Output = ()> + Send + 'static>(
    pins: &Pins,
    receivers: Vec<R>,
    sink: impl Fn(usize) -> S,
    body: fn(R, S) -> F,
) -> Box<dyn FnOnce()> {
    let tasks: Vec<F> = receivers
        .into_iter()
        .enumerate()
        .map(|(i, r)| body(r, sink(i)))
        .collect();
    let pins = pins.clone();
    let runtime = thread::spawn(move || {
        pins.subscriber(0);
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a current-thread runtime")
            .block_on(async move {
                let handles: Vec<_> = tasks.into_iter().map(tokio::spawn).collect();
                for h in handles {
                    h.await.expect("a subscriber task panicked");
                }
            })
    });
    Box::new(move || runtime.join().unwrap())
}

/// logbus's ring-like topic (the thread scenarios' single-producer one), read by tasks.
pub(crate) struct LogbusTasks {
    pub(crate) name: &'static str,
    /// [`WaitStrategy::park_at_once`] rather than the default: a task then announces itself
    /// parked (a heavy barrier) at every poll that finds nothing, as every task did before stop 65.
    /// It is the topic's strategy, so the publisher, blocked when the ring is full, parks at once
    /// too (before stop 65 it yielded first): only the paced rows compare with the engine before.
    pub(crate) park_at_once: bool,
}

impl Bus for LogbusTasks {
    type Tx = LogbusTx;
    fn name(&self) -> &'static str {
        self.name
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
    ) -> (Vec<LogbusTx>, Box<dyn FnOnce()>) {
        let mut config: TopicConfig<u64> = logbus_ring(run.capacity);
        if self.park_at_once {
            config = config.wait(WaitStrategy::park_at_once());
        }
        let topic = Topic::<u64>::new("perf", config).unwrap();
        let readers = (0..subscribers)
            .map(|_| topic.reader(0, Start::Earliest).unwrap())
            .collect();
        let join = spawn_tasks(pins, readers, sink, read_logbus_task);
        let txs = (0..producers)
            .map(|_| LogbusTx(topic.producer().unwrap()))
            .collect();
        (txs, join)
    }
}

async fn read_logbus_task<S: Sink>(mut reader: Reader<u64>, mut sink: S) {
    loop {
        match reader.next_async().await {
            Ok(record) => {
                if sink.take(*record) {
                    return;
                }
            }
            Err(e) => panic!("{e}"),
        }
    }
}

/// `tokio::sync::broadcast`, sized to hold the whole run so that no task ever lags (it has no
/// back-pressure), as in the thread scenarios; its sender is theirs.
pub(crate) struct TokioBroadcastTasks;

impl Bus for TokioBroadcastTasks {
    type Tx = TokioTx;
    fn name(&self) -> &'static str {
        "tokio broadcast (sized not to lag), tasks"
    }
    fn start<S: Sink>(
        &self,
        producers: usize,
        subscribers: usize,
        run: Run,
        pins: &Pins,
        sink: impl Fn(usize) -> S,
    ) -> (Vec<TokioTx>, Box<dyn FnOnce()>) {
        let (tx, _) = tokio::sync::broadcast::channel::<u64>(run.total.next_power_of_two());
        let receivers = (0..subscribers).map(|_| tx.subscribe()).collect();
        let join = spawn_tasks(pins, receivers, sink, |mut rx, mut sink| async move {
            while !sink.take(rx.recv().await.expect("sized not to lag")) {}
        });
        let txs = (0..producers).map(|_| TokioTx(tx.clone())).collect();
        (txs, join)
    }
}

/// A channel crate's bounded channel, received from by a task and sent to from a plain thread:
/// one adapter per crate, one [`Bus`] for them all ([`ChannelTasks`]), as the thread scenarios'
/// `Channel` does.
pub(crate) trait TaskChannel: Sync {
    type S: Send + Clone + 'static;
    type R: Send + 'static;
    fn pair(&self, capacity: usize) -> (Self::S, Self::R);
    /// Blocks the producer's thread while the channel is full.
    fn send(s: &Self::S, v: u64);
    fn recv(r: &mut Self::R) -> impl Future<Output = u64> + Send;
}

/// `tokio::sync::mpsc`: the producer's thread sends with `blocking_send`.
pub(crate) struct TokioMpsc;

impl TaskChannel for TokioMpsc {
    type S = tokio::sync::mpsc::Sender<u64>;
    type R = tokio::sync::mpsc::Receiver<u64>;
    fn pair(&self, capacity: usize) -> (Self::S, Self::R) {
        tokio::sync::mpsc::channel(capacity)
    }
    #[inline(always)]
    fn send(s: &Self::S, v: u64) {
        s.blocking_send(v).unwrap();
    }
    async fn recv(r: &mut Self::R) -> u64 {
        r.recv().await.expect("the producer sends them all")
    }
}

/// kanal's async receiver, sent to through the channel's blocking side.
pub(crate) struct KanalAsync;

impl TaskChannel for KanalAsync {
    type S = kanal::Sender<u64>;
    type R = kanal::AsyncReceiver<u64>;
    fn pair(&self, capacity: usize) -> (Self::S, Self::R) {
        let (s, r) = kanal::bounded_async(capacity);
        (s.to_sync(), r)
    }
    #[inline(always)]
    fn send(s: &Self::S, v: u64) {
        s.send(v).unwrap();
    }
    async fn recv(r: &mut Self::R) -> u64 {
        r.recv().await.expect("the producer sends them all")
    }
}

/// A bounded channel per subscriber task; the producer sends to each in turn.
pub(crate) struct ChannelTasks<C>(pub(crate) &'static str, pub(crate) C);

pub(crate) struct ChannelTasksTx<C: TaskChannel>(Vec<C::S>);

impl<C: TaskChannel> Tx for ChannelTasksTx<C> {
    #[inline(always)]
    fn send(&mut self, v: u64) {
        for s in &self.0 {
            C::send(s, v);
        }
    }
}

impl<C: TaskChannel + 'static> Bus for ChannelTasks<C> {
    type Tx = ChannelTasksTx<C>;
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
    ) -> (Vec<ChannelTasksTx<C>>, Box<dyn FnOnce()>) {
        let (senders, receivers): (Vec<_>, Vec<_>) =
            (0..subscribers).map(|_| self.1.pair(run.capacity)).unzip();
        let join = spawn_tasks(pins, receivers, sink, |mut rx, mut sink| async move {
            while !sink.take(C::recv(&mut rx).await) {}
        });
        let txs = (0..producers)
            .map(|_| ChannelTasksTx(senders.clone()))
            .collect();
        (txs, join)
    }
}

/// A history for the `async-replay` table: `n` messages already in the source before any task
/// reads, each subscriber a task replaying them all from the first, as a service does on start.
pub(crate) trait Replay: Sync {
    type R: Send + 'static;
    fn name(&self) -> &'static str;
    /// The source, filled with 0..n, and a receiver per subscriber reading it from the start;
    /// the first holds whatever keeps the source alive.
    fn filled(&self, n: usize, subscribers: usize) -> (Box<dyn Send>, Vec<Self::R>);
    fn recv(r: &mut Self::R) -> impl Future<Output = u64> + Send;
}

/// logbus: a ring-like topic holding the history, read by readers from the earliest offset; with
/// the default task budget, or none (every task keeps its thread until it has caught up, as
/// before stop 66).
pub(crate) struct LogbusReplay {
    pub(crate) name: &'static str,
    pub(crate) budget: Option<u32>,
}

impl Replay for LogbusReplay {
    type R = Reader<u64>;
    fn name(&self) -> &'static str {
        self.name
    }
    fn filled(&self, n: usize, subscribers: usize) -> (Box<dyn Send>, Vec<Reader<u64>>) {
        let mut config: TopicConfig<u64> = logbus_ring(n);
        if let Some(b) = self.budget {
            config = config.wait(WaitStrategy::default().task_budget(b));
        }
        let topic = Topic::<u64>::new("replay", config).unwrap();
        let readers = (0..subscribers)
            .map(|_| topic.reader(0, Start::Earliest).unwrap())
            .collect();
        let mut producer = topic.producer().unwrap();
        for v in 0..n as u64 {
            producer.publish(v).unwrap();
        }
        (Box::new(topic), readers)
    }
    async fn recv(r: &mut Reader<u64>) -> u64 {
        *r.next_async().await.expect("the history is there")
    }
}

/// tokio's broadcast, sized to hold the whole history.
pub(crate) struct TokioBroadcastReplay;

impl Replay for TokioBroadcastReplay {
    type R = tokio::sync::broadcast::Receiver<u64>;
    fn name(&self) -> &'static str {
        "tokio broadcast (sized to hold it), tasks"
    }
    fn filled(&self, n: usize, subscribers: usize) -> (Box<dyn Send>, Vec<Self::R>) {
        let (tx, _) = tokio::sync::broadcast::channel::<u64>(n.next_power_of_two());
        let receivers = (0..subscribers).map(|_| tx.subscribe()).collect();
        for v in 0..n as u64 {
            tx.send(v).unwrap();
        }
        (Box::new(tx), receivers)
    }
    async fn recv(r: &mut Self::R) -> u64 {
        r.recv().await.expect("sized not to lag")
    }
}

/// A channel per subscriber, each filled with the history ([`TaskChannel`]'s crates).
pub(crate) struct ChannelReplay<C>(pub(crate) &'static str, pub(crate) C);

impl<C: TaskChannel> Replay for ChannelReplay<C> {
    type R = C::R;
    fn name(&self) -> &'static str {
        self.0
    }
    fn filled(&self, n: usize, subscribers: usize) -> (Box<dyn Send>, Vec<C::R>) {
        let (senders, receivers): (Vec<_>, Vec<_>) =
            (0..subscribers).map(|_| self.1.pair(n)).unzip();
        for s in &senders {
            for v in 0..n as u64 {
                C::send(s, v);
            }
        }
        (Box::new(senders), receivers)
    }
    async fn recv(r: &mut C::R) -> u64 {
        C::recv(r).await
    }
}

/// A yield that any executor honours: the first poll wakes the task and returns `Pending`.
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        if std::mem::replace(&mut self.0, true) {
            std::task::Poll::Ready(())
        } else {
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        }
    }
}

/// One replay: `subscribers` tasks read the `n` messages of a filled source, in order, on one
/// current-thread runtime pinned where the first subscriber thread would be, beside a neighbour
/// task that yields in a loop and times the gaps between its turns. Returns the slowest task's
/// rate (Mmsg/s) and the neighbour's gaps (ns).
pub(crate) fn replay<C: Replay>(
    c: &C,
    pins: &Pins,
    n: usize,
    subscribers: usize,
) -> (f64, hdrhistogram::Histogram<u64>) {
    use std::sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    };
    let (source, receivers) = c.filled(n, subscribers);
    let pins = pins.clone();
    let runtime = thread::spawn(move || {
        pins.subscriber(0);
        let done = Arc::new(AtomicBool::new(false));
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a current-thread runtime")
            .block_on(async move {
                let begun = std::time::Instant::now();
                // The neighbour first: its first turn comes before any replay starts.
                let stop = Arc::clone(&done);
                let neighbour = tokio::spawn(async move {
                    let mut gaps =
                        hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)
                            .unwrap();
                    let mut last = std::time::Instant::now();
                    while !stop.load(Ordering::Relaxed) {
                        YieldOnce(false).await;
                        let now = std::time::Instant::now();
                        gaps.saturating_record((now - last).as_nanos() as u64);
                        last = now;
                    }
                    gaps
                });
                let handles: Vec<_> = receivers
                    .into_iter()
                    .map(|mut r| {
                        tokio::spawn(async move {
                            for expected in 0..n as u64 {
                                assert_eq!(C::recv(&mut r).await, expected, "out of order");
                            }
                        })
                    })
                    .collect();
                for h in handles {
                    h.await.expect("a replaying task panicked");
                }
                let elapsed = begun.elapsed();
                done.store(true, Ordering::Relaxed);
                (elapsed, neighbour.await.expect("the neighbour panicked"))
            })
    });
    let (elapsed, gaps) = runtime.join().unwrap();
    drop(source);
    (n as f64 / elapsed.as_secs_f64() / 1e6, gaps)
}

/// A source and its subscribers for the `async-shared` tables: the publisher is a task too, on
/// the subscribers' runtime, so the whole stream runs on one thread, as in a service that both
/// publishes and reads. Each send waits (as a task) while the source is full.
pub(crate) trait SharedTasks: Sync {
    type P: Send + 'static;
    type R: Send + 'static;
    fn name(&self) -> &'static str;
    /// The publishing side and a receiver per subscriber, for a run of `total` messages.
    fn open(&self, run: Run, subscribers: usize) -> (Self::P, Vec<Self::R>);
    fn send(p: &mut Self::P, v: u64) -> impl Future<Output = ()> + Send;
    fn recv(r: &mut Self::R) -> impl Future<Output = u64> + Send;
}

/// logbus's ring-like topic: a `Producer` publishing with `publish_async`, readers with
/// `next_async`.
pub(crate) struct LogbusShared;

impl SharedTasks for LogbusShared {
    type P = logbus::Producer<u64>;
    type R = Reader<u64>;
    fn name(&self) -> &'static str {
        "logbus single producer, ring-like, tasks"
    }
    fn open(&self, run: Run, subscribers: usize) -> (Self::P, Vec<Reader<u64>>) {
        let topic = Topic::<u64>::new("shared", logbus_ring(run.capacity)).unwrap();
        let readers = (0..subscribers)
            .map(|_| topic.reader(0, Start::Earliest).unwrap())
            .collect();
        (topic.producer().unwrap(), readers)
    }
    async fn send(p: &mut Self::P, v: u64) {
        p.publish_async(v).await.expect("open");
    }
    async fn recv(r: &mut Reader<u64>) -> u64 {
        *r.next_async().await.expect("open")
    }
}

/// tokio's broadcast, sized to hold the run (it never makes a sender wait, and so never lags).
pub(crate) struct TokioBroadcastShared;

impl SharedTasks for TokioBroadcastShared {
    type P = tokio::sync::broadcast::Sender<u64>;
    type R = tokio::sync::broadcast::Receiver<u64>;
    fn name(&self) -> &'static str {
        "tokio broadcast (sized not to lag), tasks"
    }
    fn open(&self, run: Run, subscribers: usize) -> (Self::P, Vec<Self::R>) {
        let (tx, _) = tokio::sync::broadcast::channel::<u64>(run.total.next_power_of_two());
        let receivers = (0..subscribers).map(|_| tx.subscribe()).collect();
        (tx, receivers)
    }
    async fn send(p: &mut Self::P, v: u64) {
        p.send(v).expect("subscribed");
    }
    async fn recv(r: &mut Self::R) -> u64 {
        r.recv().await.expect("sized not to lag")
    }
}

/// tokio's mpsc, a bounded channel per subscriber; the publisher task sends to each in turn.
pub(crate) struct TokioMpscShared;

impl SharedTasks for TokioMpscShared {
    type P = Vec<tokio::sync::mpsc::Sender<u64>>;
    type R = tokio::sync::mpsc::Receiver<u64>;
    fn name(&self) -> &'static str {
        "tokio mpsc per subscriber, tasks"
    }
    fn open(&self, run: Run, subscribers: usize) -> (Self::P, Vec<Self::R>) {
        (0..subscribers)
            .map(|_| tokio::sync::mpsc::channel(run.capacity))
            .unzip()
    }
    async fn send(p: &mut Self::P, v: u64) {
        for s in p.iter() {
            s.send(v).await.expect("open");
        }
    }
    async fn recv(r: &mut Self::R) -> u64 {
        r.recv().await.expect("open")
    }
}

/// kanal, a bounded channel per subscriber, async on both sides. (Not one adapter with tokio's
/// over `TaskChannel`, whose kanal sender is the blocking side: sending through its `as_async`
/// view ran kanal's `async-shared` 1→1 at 61–69 M/s against 83 with the async sender, in
/// alternating binaries.)
pub(crate) struct KanalShared;

impl SharedTasks for KanalShared {
    type P = Vec<kanal::AsyncSender<u64>>;
    type R = kanal::AsyncReceiver<u64>;
    fn name(&self) -> &'static str {
        "kanal per subscriber, tasks"
    }
    fn open(&self, run: Run, subscribers: usize) -> (Self::P, Vec<Self::R>) {
        (0..subscribers)
            .map(|_| kanal::bounded_async(run.capacity))
            .unzip()
    }
    async fn send(p: &mut Self::P, v: u64) {
        for s in p.iter() {
            s.send(v).await.expect("open");
        }
    }
    async fn recv(r: &mut Self::R) -> u64 {
        r.recv().await.expect("open")
    }
}

/// One run: a publisher task sends `run.total` messages, `subscribers` tasks receive them all in
/// order, every task on one current-thread runtime pinned where the first subscriber thread would
/// be. Returns the slowest subscriber's rate (Mmsg/s, from the runtime's start to the last
/// task's end).
pub(crate) fn shared<C: SharedTasks>(c: &C, pins: &Pins, run: Run, subscribers: usize) -> f64 {
    let (mut p, receivers) = c.open(run, subscribers);
    let n = run.total as u64;
    let pins = pins.clone();
    let elapsed = thread::spawn(move || {
        pins.subscriber(0);
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a current-thread runtime")
            .block_on(async move {
                let begun = std::time::Instant::now();
                let handles: Vec<_> = receivers
                    .into_iter()
                    .map(|mut r| {
                        tokio::spawn(async move {
                            for expected in 0..n {
                                assert_eq!(C::recv(&mut r).await, expected, "out of order");
                            }
                        })
                    })
                    .collect();
                let publisher = tokio::spawn(async move {
                    for v in 0..n {
                        C::send(&mut p, v).await;
                    }
                    p
                });
                let p = publisher.await.expect("the publisher panicked");
                for h in handles {
                    h.await.expect("a subscriber task panicked");
                }
                drop(p);
                begun.elapsed()
            })
    })
    .join()
    .unwrap();
    n as f64 / elapsed.as_secs_f64() / 1e6
}
