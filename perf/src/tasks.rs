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
                if sink(*record) {
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
            while !sink(rx.recv().await.expect("sized not to lag")) {}
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
            while !sink(C::recv(&mut rx).await) {}
        });
        let txs = (0..producers)
            .map(|_| ChannelTasksTx(senders.clone()))
            .collect();
        (txs, join)
    }
}
