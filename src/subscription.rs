//! Push subscriptions: a dedicated thread per subscription runs a handler for every record, in log
//! order, with retries, backoff, dead letters and (in ack mode) acknowledgements and redelivery.
//!
//! A subscription reads through its own [`Consumer`], so it is isolated: a slow handler delays
//! nobody else, and publishers never wait for it (unless the topic's overflow policy is `Block`).
//! The handler runs on the subscription's thread with no engine lock held, so it may publish to any
//! topic, its own included.
//!
//! # At least once (I7)
//! A subscription's position (and the offset it commits under its name) passes a record only after
//! the handler succeeded, the record was acked, filtered out, or written to the dead-letter topic.
//! Closing mid-record leaves the position at that record, so a subscription started again with the
//! same name sees it again. So does a dead letter that cannot be written: it waits for room
//! (hearing `close`), and a dead-letter topic that refuses it for good stops the subscription
//! ([`Stopped`] says why a subscription stopped).
//!
//! # Orderings
//! - `attention`: set with Release by `pause`/`close` (after changing the control state under its
//!   lock), read with Acquire between records: a cheap check that avoids taking the lock per record.
//! - `positions` and `idle_waiters`: the thread stores a position (Release), then reads the waiter
//!   count; `wait_idle` increments the count, then reads the positions. That store-then-load race on
//!   both sides needs a full barrier on both, and it is the same handshake as a reader parking: the
//!   per-record side pays only [`light_barrier`], the rare `wait_idle` pays [`heavy_barrier`] (see
//!   [`crate::sync`]). So one side sees the other and an idle waiter is never left sleeping; the
//!   waiter then checks under the control lock, where the thread notifies.
//! - `in_flight`: a statistic and a hint; no fence needed. While a record is in flight its partition's
//!   position has not passed it, so a waiter can never wrongly conclude it is idle from a stale 0.
//!   Stored Release (when cleared) and loaded Acquire so a reader of 0 also sees the position stored
//!   before it.
//! - `assigned` and `finished` change rarely (rebalance, exit) and use SeqCst, followed by a notify
//!   under the control lock.
//! - The statistics counters are Relaxed: they are only read for snapshots.

use std::{
    fmt,
    panic::{catch_unwind, AssertUnwindSafe},
    time::{Duration, Instant},
};

use crate::{
    broker::{check_name, Broker},
    config::TopicConfig,
    consumer::Consumer,
    error::{Error, PublishError, ReadError},
    group::{GroupError, GroupMember},
    log::Waker,
    reader::{Batch, Record, Start},
    sync::{
        heavy_barrier, light_barrier, lock,
        thread::{self, JoinHandle},
        wait_timeout, Arc, AtomicBool, AtomicU64, AtomicUsize, Condvar, Mutex, Ordering, OwnValue,
    },
    topic::Topic,
    trace::event,
};

/// The broker's topic `name` as it is, whatever its configuration (the application may have made
/// it with its own), or a new one with the default configuration. Errors: a topic of that name
/// with another record type ([`Error::TypeMismatch`]).
fn default_dead_letter_topic<T: Clone + Send + Sync + 'static>(
    broker: &Broker,
    name: &str,
) -> Result<Topic<DeadLetter<T>>, Error> {
    loop {
        match broker.get(name) {
            Err(Error::UnknownTopic(_)) => {}
            found => return found,
        }
        match broker.topic(name, TopicConfig::default()) {
            // Made with another configuration since the look above: take that one.
            Err(Error::ConfigMismatch(_)) => continue,
            made => return made,
        }
    }
}

/// A record that a subscription gave up on, as written to the dead-letter topic.
#[derive(Clone, PartialEq, Eq)]
pub struct DeadLetter<T> {
    /// The topic the record came from.
    pub topic: String,
    /// Its partition.
    pub partition: u32,
    /// Its offset.
    pub offset: u64,
    /// The subscription that gave up.
    pub subscription: String,
    /// How many times it was delivered (0 when the subscription's filter panicked on it).
    pub attempts: u32,
    /// The last error (the handler's error text, a panic message, or why it was terminated).
    pub error: String,
    /// The value (a clone of the record's value).
    pub value: T,
}

impl<T> fmt::Debug for DeadLetter<T> {
    /// Everything but the payload.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeadLetter")
            .field("topic", &self.topic)
            .field("partition", &self.partition)
            .field("offset", &self.offset)
            .field("subscription", &self.subscription)
            .field("attempts", &self.attempts)
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

/// How long to wait before the next attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backoff {
    /// Retry at once.
    None,
    /// The same delay before every retry.
    Fixed(Duration),
    /// `initial`, doubling each retry up to `max`; with `jitter`, each delay is drawn uniformly
    /// from its upper half, so many subscriptions failing together do not retry in lockstep.
    Exponential {
        /// The first delay.
        initial: Duration,
        /// The largest delay.
        max: Duration,
        /// Whether to randomize the delays.
        jitter: bool,
    },
}

impl Backoff {
    /// The delay before retry number `retry` (1 for the first retry).
    fn delay(&self, retry: u32, seed: &mut u64) -> Duration {
        match *self {
            Backoff::None => Duration::ZERO,
            Backoff::Fixed(d) => d,
            Backoff::Exponential {
                initial,
                max,
                jitter,
            } => {
                let factor = 1u32
                    .checked_shl(retry.saturating_sub(1).min(31))
                    .unwrap_or(u32::MAX);
                let d = initial.saturating_mul(factor).min(max);
                if !jitter || d.is_zero() {
                    return d;
                }
                // xorshift64: cheap, and good enough to spread retries.
                *seed ^= *seed << 13;
                *seed ^= *seed >> 7;
                *seed ^= *seed << 17;
                let half = d / 2;
                half + Duration::from_nanos(*seed % (half.as_nanos() as u64 + 1))
            }
        }
    }
}

/// How often a failing record is tried, and how long to wait in between.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a retry policy does nothing until a subscription builder takes it"]
pub struct Retry {
    max_attempts: u32,
    backoff: Backoff,
}

impl Default for Retry {
    /// 3 attempts, exponential backoff from 1 ms to 100 ms with jitter.
    fn default() -> Self {
        Retry {
            max_attempts: 3,
            backoff: Backoff::Exponential {
                initial: Duration::from_millis(1),
                max: Duration::from_millis(100),
                jitter: true,
            },
        }
    }
}

impl Retry {
    /// Attempts per record before it is dead-lettered (at least 1).
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = n;
        self
    }

    /// The delay between attempts.
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }
}

/// A snapshot of a subscription's progress.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubscriptionStats {
    /// Its name.
    pub name: String,
    /// The next offset to process, by partition.
    pub positions: Vec<u64>,
    /// Records published and not yet processed.
    pub lag: u64,
    /// Records processed: handled successfully, acked, or filtered out.
    pub delivered: u64,
    /// Attempts that failed (an error, a panic, or a nak).
    pub failed_attempts: u64,
    /// Deliveries after the first of a record (ack mode).
    pub redelivered: u64,
    /// Records written to the dead-letter topic.
    pub dead_lettered: u64,
    /// Records retention removed before the subscription got to them.
    pub lagged: u64,
    /// Records being handled right now (0 or 1).
    pub in_flight: u64,
    /// Why the thread stopped, once it has (`None` while it runs; see
    /// [`Subscription::is_finished`]).
    pub stopped: Option<Stopped>,
}

/// Why a subscription's thread stopped ([`SubscriptionStats::stopped`]).
///
/// Only [`Stopped::Closed`] and [`Stopped::TopicClosed`] are the ends of a healthy subscription.
/// After the others the record named (or, after a panic, whatever was processed since the last
/// commit) is not passed: a subscription started again under the same name begins there (I7).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Stopped {
    /// [`Subscription::close`] was called.
    Closed,
    /// The topic was closed and every record published to it was processed (for a group
    /// subscription: the group was done with the topic, see [`Group`](crate::Group)).
    TopicClosed,
    /// The dead-letter topic was closed, so it can never take the dead letter of the record at
    /// `offset` in `partition` (see [`SubscriptionBuilder::dead_letter`]).
    DeadLetterClosed {
        /// The record's partition, in the subscription's topic.
        partition: u32,
        /// Its offset.
        offset: u64,
    },
    /// The record at `offset` in `partition`, as a dead letter, is larger than the dead-letter
    /// topic's byte retention allows.
    DeadLetterTooLarge {
        /// The record's partition, in the subscription's topic.
        partition: u32,
        /// Its offset.
        offset: u64,
    },
    /// A panic that no attempt catches ended the thread: the record value's `Clone` (for a
    /// delivery or a dead letter), the dead-letter topic's size function, a tracing subscriber.
    /// A handler's or a filter's panic is caught (a failed attempt, a dead letter) and never ends
    /// the thread.
    Panicked {
        /// The panic's message (`"panic"` if it carried none that is a string).
        message: String,
    },
}

impl fmt::Display for Stopped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stopped::Closed => f.write_str("closed"),
            Stopped::TopicClosed => f.write_str("the topic closed and everything was processed"),
            Stopped::DeadLetterClosed { partition, offset } => write!(
                f,
                "the dead-letter topic is closed; record {partition}/{offset} is unprocessed"
            ),
            Stopped::DeadLetterTooLarge { partition, offset } => write!(
                f,
                "record {partition}/{offset} is too large for the dead-letter topic and is \
                 unprocessed"
            ),
            Stopped::Panicked { message } => write!(f, "the thread ended in a {message}"),
        }
    }
}

/// What became of an ack-mode delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Ack,
    Nak(Duration),
    Term,
}

struct Control {
    paused: bool,
    closing: bool,
    /// Why the thread stopped or is stopping; the first reason set stays.
    stopped: Option<Stopped>,
    /// Ack mode: the current delivery's token, and what became of it.
    token: u64,
    outcome: Option<Outcome>,
    redeliver: bool,
}

struct Shared {
    name: String,
    control: Mutex<Control>,
    changed: Condvar,
    attention: AtomicBool,
    positions: Vec<AtomicU64>,
    /// By partition: whether this subscription reads it now (always, unless it is a group member).
    assigned: Vec<AtomicBool>,
    in_flight: AtomicU64,
    idle_waiters: AtomicUsize,
    finished: AtomicBool,
    delivered: AtomicU64,
    failed: AtomicU64,
    redelivered: AtomicU64,
    dead_lettered: AtomicU64,
    lagged: AtomicU64,
}

impl Shared {
    /// Sleeps up to `d` unless the subscription is closing; returns whether it is. A delay too
    /// long for a deadline (`Duration::MAX` from a backoff or a nak) sleeps until the close.
    fn sleep_unless_closing(&self, d: Duration) -> bool {
        let deadline = Instant::now().checked_add(d);
        let mut c = lock(&self.control);
        loop {
            if c.closing {
                return true;
            }
            let left = match deadline {
                Some(at) => match at.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => left,
                    _ => return false,
                },
                None => Duration::from_secs(3600),
            };
            c = wait_timeout(&self.changed, c, left);
        }
    }

    /// Records why the thread stops, unless a reason is recorded already (the first one stays: a
    /// refused dead letter closes the subscription, and the close that follows is its doing).
    fn stop_because(&self, why: Stopped) {
        lock(&self.control).stopped.get_or_insert(why);
    }

    /// Marks the thread finished, `why` recorded first (unless a reason is already), so that
    /// whoever sees it finished finds the reason. The caller then notifies
    /// ([`Shared::notify_changed`]).
    fn finish(&self, why: Stopped) {
        self.stop_because(why);
        // SeqCst: see the module's Orderings (`finished`).
        self.finished.store(true, Ordering::SeqCst);
    }

    /// Wakes `wait_idle` callers to look again (after a position moved). Inlined: per record it
    /// is a compiler fence and a load, with the notify out of line.
    #[inline]
    fn notify_idle_waiters(&self) {
        light_barrier();
        // Relaxed after the light barrier: see the module's Orderings (`positions`).
        if self.idle_waiters.load(Ordering::Relaxed) > 0 {
            self.notify_changed();
        }
    }

    /// Wakes everyone waiting on the control state: the rare half of
    /// [`Shared::notify_idle_waiters`] (someone waits), and the end of the thread.
    #[inline(never)]
    fn notify_changed(&self) {
        let _c = lock(&self.control);
        self.changed.notify_all();
    }
}

/// Acknowledges one ack-mode delivery. Cheap to clone and `Send`: it may be kept and used after the
/// handler returns, from any thread. Acking an older delivery, or acking twice, changes nothing.
#[derive(Clone)]
pub struct AckHandle {
    shared: Arc<Shared>,
    token: u64,
    partition: u32,
    offset: u64,
}

impl fmt::Debug for AckHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AckHandle")
            .field("partition", &self.partition)
            .field("offset", &self.offset)
            .finish()
    }
}

impl AckHandle {
    fn settle(&self, outcome: Outcome) -> bool {
        let mut c = lock(&self.shared.control);
        if c.token != self.token || c.outcome.is_some() {
            return false;
        }
        c.outcome = Some(outcome);
        self.shared.changed.notify_all();
        true
    }

    /// The record was processed: the subscription moves on. Returns false if this delivery was
    /// already settled or is no longer current: its ack deadline passed, redelivery was asked for,
    /// or the subscription closed (then nothing changes, and the record is delivered again).
    pub fn ack(&self) -> bool {
        self.settle(Outcome::Ack)
    }

    /// Not processed: deliver it again after `delay` (counts as a failed attempt).
    pub fn nak(&self, delay: Duration) -> bool {
        self.settle(Outcome::Nak(delay))
    }

    /// Never deliver it again: dead-letter it now.
    pub fn term(&self) -> bool {
        self.settle(Outcome::Term)
    }

    /// The record's offset.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The record's partition.
    pub fn partition(&self) -> u32 {
        self.partition
    }
}

/// One delivery of a record to an ack-mode handler. Derefs to the value.
pub struct Delivery<'a, T> {
    record: Record<'a, T>,
    handle: AckHandle,
    attempt: u32,
}

impl<T> fmt::Debug for Delivery<'_, T> {
    /// Shows which delivery it is, not the payload.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Delivery")
            .field("partition", &self.record.partition())
            .field("offset", &self.record.offset())
            .field("attempt", &self.attempt)
            .finish()
    }
}

impl<'a, T> Delivery<'a, T> {
    /// The record.
    pub fn record(&self) -> &Record<'a, T> {
        &self.record
    }

    /// Which delivery of this record this is (1 for the first).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// A handle to settle this delivery later, from anywhere.
    pub fn handle(&self) -> AckHandle {
        self.handle.clone()
    }

    /// See [`AckHandle::ack`].
    pub fn ack(&self) -> bool {
        self.handle.ack()
    }

    /// See [`AckHandle::nak`].
    pub fn nak(&self, delay: Duration) -> bool {
        self.handle.nak(delay)
    }

    /// See [`AckHandle::term`].
    pub fn term(&self) -> bool {
        self.handle.term()
    }
}

impl<T> std::ops::Deref for Delivery<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.record.value()
    }
}

type Filter<T> = Box<dyn Fn(&T) -> bool + Send>;

/// Configures a subscription; made by [`Topic::subscription`].
#[must_use = "nothing runs until `handler` or `ack_handler` starts the subscription"]
pub struct SubscriptionBuilder<T: Send + Sync + 'static> {
    topic: Topic<T>,
    name: String,
    start: Start,
    retry: Retry,
    dead_letter: Option<Topic<DeadLetter<T>>>,
    filter: Option<Filter<T>>,
    ack_wait: Duration,
    max_deliver: u32,
    group: Option<String>,
}

impl<T: Send + Sync + 'static> fmt::Debug for SubscriptionBuilder<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SubscriptionBuilder")
            .field("topic", &self.topic.name())
            .field("name", &self.name)
            .field("start", &self.start)
            .field("retry", &self.retry)
            .field("ack_wait", &self.ack_wait)
            .field("max_deliver", &self.max_deliver)
            .finish_non_exhaustive()
    }
}

impl<T: Clone + Send + Sync + 'static> SubscriptionBuilder<T> {
    pub(crate) fn new(topic: Topic<T>, name: &str) -> Self {
        SubscriptionBuilder {
            topic,
            name: name.to_owned(),
            start: Start::Latest,
            retry: Retry::default(),
            dead_letter: None,
            filter: None,
            ack_wait: Duration::from_secs(30),
            max_deliver: 5,
            group: None,
        }
    }

    /// Joins consumer group `group` as a member named after the subscription: the group's members
    /// share the topic's partitions, each on its own thread (see [`Topic::group`]). Positions are
    /// then committed for the group, and where nothing is committed a partition starts at the
    /// group's start position.
    pub fn group(mut self, group: &str) -> Self {
        self.group = Some(group.to_owned());
        self
    }

    /// Where to start when nothing is committed under this name (default [`Start::Latest`]). A
    /// group member ([`SubscriptionBuilder::group`]) starts at the group's start position instead
    /// ([`Group::set_start`](crate::Group::set_start)).
    pub fn start(mut self, start: Start) -> Self {
        self.start = start;
        self
    }

    /// Attempts and backoff for a failing handler (default [`Retry::default`]).
    pub fn retry(mut self, retry: Retry) -> Self {
        self.retry = retry;
        self
    }

    /// Where dead letters go. Default: the broker's topic `<topic>.dlq` (used with whatever
    /// configuration it was made with, or created with the default one if needed), or
    /// for a topic outside a broker, a new topic of that name (see
    /// [`Subscription::dead_letter_topic`]).
    ///
    /// While that topic has no room for a letter (a capacity under `Block` or `Reject`, with a
    /// reader lagging) or its single producer's role is held elsewhere, the subscription waits with
    /// the record and tries again, pausing up to 10 ms between tries; `close` still stops it at
    /// once, leaving the record unpassed. If the topic refuses the letter for good (it is closed,
    /// or the record is larger than its byte retention allows), the subscription stops as if
    /// closed, with the record unpassed: its name resumes there. Its stats then name the record
    /// ([`Stopped::DeadLetterClosed`], [`Stopped::DeadLetterTooLarge`]).
    pub fn dead_letter(mut self, topic: Topic<DeadLetter<T>>) -> Self {
        self.dead_letter = Some(topic);
        self
    }

    /// Only records for which `keep` is true reach the handler; the others count as delivered.
    /// It runs on the subscription's thread, under no lock. A record on which it panics goes to
    /// the dead-letter topic at once (0 attempts, the panic's message as the error).
    pub fn filter(mut self, keep: impl Fn(&T) -> bool + Send + 'static) -> Self {
        self.filter = Some(Box::new(keep));
        self
    }

    /// Ack mode: how long a delivery may stay unacked before it is delivered again (default 30 s).
    pub fn ack_wait(mut self, d: Duration) -> Self {
        self.ack_wait = d;
        self
    }

    /// Ack mode: deliveries of one record before it is dead-lettered (default 5, at least 1).
    pub fn max_deliver(mut self, n: u32) -> Self {
        self.max_deliver = n;
        self
    }

    /// Starts the subscription with a handler for each record. An `Err` or a panic is a failed
    /// attempt. Errors: [`Error::InvalidName`], [`Error::InvalidConfig`] (zero attempts), and those
    /// of creating the dead-letter topic.
    pub fn handler<E, H>(self, mut handler: H) -> Result<Subscription<T>, Error>
    where
        E: fmt::Display,
        H: FnMut(&Record<'_, T>) -> Result<(), E> + Send + 'static,
    {
        self.spawn(move |ctx, record| ctx.run_plain(record, &mut handler))
    }

    /// Starts the subscription in ack mode: the handler gets a [`Delivery`] to ack, nak or term
    /// (now, or later through its [`AckHandle`]). The next record waits until the current one is
    /// settled or its `ack_wait` passes (then it is delivered again), so order is kept.
    pub fn ack_handler<E, H>(self, mut handler: H) -> Result<Subscription<T>, Error>
    where
        E: fmt::Display,
        H: FnMut(Delivery<'_, T>) -> Result<(), E> + Send + 'static,
    {
        self.spawn(move |ctx, record| ctx.run_acked(record, &mut handler))
    }

    fn spawn(
        self,
        mut process: impl FnMut(&mut Context<T>, &Record<'_, T>) -> Step + Send + 'static,
    ) -> Result<Subscription<T>, Error> {
        check_name(&self.name)?;
        if self.retry.max_attempts == 0 {
            return Err(Error::InvalidConfig(
                "a subscription needs at least one attempt",
            ));
        }
        if self.max_deliver == 0 {
            return Err(Error::InvalidConfig("max_deliver must be at least 1"));
        }
        if self.ack_wait.is_zero() {
            return Err(Error::InvalidConfig("ack_wait must be more than zero"));
        }
        let dead_letter = match self.dead_letter {
            Some(t) => t,
            None => {
                let name = format!("{}.dlq", self.topic.name());
                match self.topic.broker() {
                    Some(broker) => default_dead_letter_topic(&broker, &name)?,
                    None => Topic::new(&name, TopicConfig::default())?,
                }
            }
        };
        let source = match &self.group {
            None => Source::Solo(Consumer::new(self.topic.clone(), &self.name, self.start)?),
            Some(g) => Source::Member(self.topic.group(g)?.join(&self.name)?),
        };
        let partitions = self.topic.partitions();
        let shared = Arc::new(Shared {
            name: self.name.clone(),
            control: Mutex::new(Control {
                paused: false,
                closing: false,
                stopped: None,
                token: 0,
                outcome: None,
                redeliver: false,
            }),
            changed: Condvar::new(),
            attention: AtomicBool::new(false),
            positions: (0..partitions)
                .map(|p| AtomicU64::new(source.position(p).unwrap_or(0)))
                .collect(),
            assigned: (0..partitions)
                .map(|p| AtomicBool::new(source.position(p).is_some()))
                .collect(),
            in_flight: AtomicU64::new(0),
            idle_waiters: AtomicUsize::new(0),
            finished: AtomicBool::new(false),
            delivered: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            redelivered: AtomicU64::new(0),
            dead_lettered: AtomicU64::new(0),
            lagged: AtomicU64::new(0),
        });
        let waker = source.waker();
        let mut ctx = Context {
            shared: Arc::clone(&shared),
            topic: self.topic.clone(),
            dead_letter: dead_letter.clone(),
            retry: self.retry,
            filter: self.filter,
            ack_wait: self.ack_wait,
            max_deliver: self.max_deliver,
            #[cfg(feature = "metrics")]
            ack_latency: None,
            seed: 0x9e37_79b9_7f4a_7c15 ^ (Arc::as_ptr(&shared) as u64),
        };
        let thread = thread::Builder::new()
            .name(format!("logbus-sub-{}", self.name))
            .spawn(move || {
                let shared = Arc::clone(&ctx.shared);
                // A panic that no attempt catches ends the thread here, and says so: `stats` then
                // shows why it stopped and `wait_idle` returns, instead of waiting for a thread
                // that is gone. What it processed since its last commit is handled again by the
                // next subscription of that name (at least once, I7).
                let ran = catch_unwind(AssertUnwindSafe(move || {
                    #[cfg(feature = "tracing")]
                    let _span = tracing::info_span!(
                        target: "logbus",
                        "logbus.subscription",
                        topic = %ctx.topic.name(),
                        subscription = %ctx.shared.name
                    )
                    .entered();
                    event!(info, "subscription started");
                    ctx.run(source, &mut process);
                    event!(info, "subscription stopped");
                }));
                if let Err(panic) = ran {
                    let message = panic_message(panic);
                    shared.finish(Stopped::Panicked { message });
                    shared.notify_changed();
                }
            })
            .map_err(|_| Error::InvalidConfig("could not start the subscription's thread"))?;
        Ok(Subscription {
            shared,
            waker,
            thread: Some(thread),
            topic: self.topic,
            dead_letter,
        })
    }
}

/// Where a subscription's records come from.
enum Source<T: Send + Sync + 'static> {
    /// Its own consumer of every partition.
    Solo(Consumer<T>),
    /// A membership in a consumer group.
    Member(GroupMember<T>),
}

/// What a fetch from a source brought.
enum Fetched<'a, T> {
    Batch(Batch<'a, T>),
    /// Interrupted (pause, close, or a group change): look at the control state again.
    Nothing,
    Lagged(u64),
    Closed,
    /// Group member: these partitions go away at the next fetch.
    Revoked(Vec<u32>),
    /// Group member: these partitions were just taken over.
    Assigned(Vec<u32>),
}

impl<T: Send + Sync + 'static> Source<T> {
    fn next(&mut self) -> Fetched<'_, T> {
        match self {
            Source::Solo(c) => match c.next_batch_or_interrupt(BATCH) {
                Ok(Some(b)) => Fetched::Batch(b),
                Ok(None) => Fetched::Nothing,
                Err(ReadError::Lagged(n)) => Fetched::Lagged(n),
                Err(_) => Fetched::Closed,
            },
            Source::Member(m) => match m.next_or_interrupt(BATCH) {
                Ok(Some(b)) => Fetched::Batch(b),
                Ok(None) => Fetched::Nothing,
                Err(GroupError::Rebalanced(r)) if !r.revoked.is_empty() => {
                    Fetched::Revoked(r.revoked)
                }
                Err(GroupError::Rebalanced(r)) => Fetched::Assigned(r.assigned),
                Err(GroupError::Read(ReadError::Lagged(n))) => Fetched::Lagged(n),
                Err(GroupError::Read(_)) => Fetched::Closed,
            },
        }
    }

    fn waker(&self) -> Arc<Waker> {
        match self {
            Source::Solo(c) => c.waker(),
            Source::Member(m) => m.waker(),
        }
    }

    /// The position of `partition`, if this source reads it.
    fn position(&self, partition: u32) -> Option<u64> {
        match self {
            Source::Solo(c) => c.position(partition).ok(),
            Source::Member(m) => m.position(partition).ok(),
        }
    }

    fn rewind(&mut self, partition: u32, offset: u64) {
        match self {
            Source::Solo(c) => c.rewind(partition, offset),
            Source::Member(m) => m.rewind(partition, offset),
        }
    }

    /// The name offsets are committed under.
    fn commit_key(&self, subscription: &str) -> String {
        match self {
            Source::Solo(_) => subscription.to_owned(),
            Source::Member(m) => m.offsets_key().to_owned(),
        }
    }
}

/// What processing one record came to.
enum Step {
    /// Done with it: the position may pass it.
    Done,
    /// Stop without passing it (closing, or the dead-letter topic refused it).
    Stop,
}

/// The subscription thread's state.
struct Context<T: Send + Sync + 'static> {
    shared: Arc<Shared>,
    topic: Topic<T>,
    dead_letter: Topic<DeadLetter<T>>,
    retry: Retry,
    filter: Option<Filter<T>>,
    ack_wait: Duration,
    max_deliver: u32,
    seed: u64,
    /// Registered on the first acked delivery (ack mode only).
    #[cfg(feature = "metrics")]
    ack_latency: Option<metrics::Histogram>,
}

/// Records a subscription takes from its consumer at a time.
const BATCH: usize = 64;
/// How often (in records) the position is committed under the subscription's name, besides on exit.
const COMMIT_EVERY: u64 = 256;

/// The first pause before a dead letter that found no room is tried again (see
/// [`Context::dead_letter`]); it doubles up to [`DEAD_LETTER_MAX_PAUSE`].
const DEAD_LETTER_PAUSE: Duration = Duration::from_micros(100);

/// The longest pause between two tries of a dead letter: how late it may be written after room
/// appears. A full dead-letter topic is an exceptional state, not a stream to keep up with.
const DEAD_LETTER_MAX_PAUSE: Duration = Duration::from_millis(10);

impl<T: Clone + Send + Sync + 'static> Context<T> {
    fn run(
        &mut self,
        mut source: Source<T>,
        process: &mut impl FnMut(&mut Context<T>, &Record<'_, T>) -> Step,
    ) {
        let mut since_commit = 0u64;
        let key = source.commit_key(&self.shared.name);
        let why = loop {
            {
                let mut c = lock(&self.shared.control);
                while c.paused && !c.closing {
                    c = wait_timeout(&self.shared.changed, c, Duration::from_secs(3600));
                }
                if c.closing {
                    break Stopped::Closed;
                }
                // Relaxed: the flag is re-derived from the control state we just read under lock.
                self.shared.attention.store(false, Ordering::Relaxed);
            }
            let mut rewind = None;
            match source.next() {
                Fetched::Nothing => continue,
                Fetched::Batch(batch) => {
                    let p = batch.partition();
                    // The batch loop's own handle on the shared state: the handler takes `self`,
                    // so through `self.shared` the loop would load it, and check the position's
                    // index, for every record. Taken once a batch (two locked operations per up
                    // to 256 records): taken once a run instead, it stays on the stack and the
                    // loop reloads it, one instruction more a record (callgrind 51.1 vs 50.1).
                    let shared = Arc::clone(&self.shared);
                    let position = &shared.positions[p as usize];
                    for record in batch.iter() {
                        // Acquire: see the module's Orderings.
                        if shared.attention.load(Ordering::Acquire) {
                            rewind = Some((p, record.offset()));
                            break;
                        }
                        match process(self, &record) {
                            Step::Done => {
                                // Release: see the module's Orderings (`positions`).
                                position.store(record.offset() + 1, Ordering::Release);
                                shared.notify_idle_waiters();
                                since_commit += 1;
                                if since_commit >= COMMIT_EVERY {
                                    since_commit = 0;
                                    self.commit(&key);
                                }
                            }
                            Step::Stop => {
                                rewind = Some((p, record.offset()));
                                break;
                            }
                        }
                    }
                }
                Fetched::Lagged(n) => {
                    // Relaxed: a statistic.
                    self.shared.lagged.fetch_add(n, Ordering::Relaxed);
                    self.refresh_positions(&source);
                }
                Fetched::Revoked(partitions) => {
                    // The partitions are still ours until the next fetch: commit what was done.
                    self.commit(&key);
                    for p in partitions {
                        self.shared.assigned[p as usize].store(false, Ordering::SeqCst);
                    }
                    self.shared.notify_idle_waiters();
                }
                Fetched::Assigned(partitions) => {
                    for p in partitions {
                        // SeqCst: see the module's Orderings.
                        self.shared.assigned[p as usize].store(true, Ordering::SeqCst);
                    }
                    self.refresh_positions(&source);
                }
                Fetched::Closed => break Stopped::TopicClosed, // Everything was processed.
            }
            if let Some((p, offset)) = rewind {
                source.rewind(p, offset);
            }
        };
        self.commit(&key);
        self.shared.finish(why);
        drop(source); // A group member leaves here, before anyone is told the thread is done.
        self.shared.notify_changed();
    }

    /// Takes the positions of the assigned partitions from the source (after lag or assignment).
    fn refresh_positions(&self, source: &Source<T>) {
        for (p, pos) in self.shared.positions.iter().enumerate() {
            if let Some(at) = source.position(p as u32) {
                // Release: see the module's Orderings (`positions`).
                pos.store(at, Ordering::Release);
            }
        }
        self.shared.notify_idle_waiters();
    }

    /// Commits the processed position of every assigned partition under `key`.
    fn commit(&self, key: &str) {
        let assigned = self
            .shared
            .positions
            .iter()
            .enumerate()
            // SeqCst: see the module's Orderings (`assigned`).
            .filter(|&(p, _)| self.shared.assigned[p].load(Ordering::SeqCst))
            // Relaxed: only this thread stores positions.
            .map(|(p, pos)| (p as u32, pos.load(Ordering::Relaxed)));
        self.topic.commit_offsets(key, assigned);
    }

    /// Runs the filter: `Some` when the record goes no further, filtered out (`Done`, counted as
    /// delivered) or dead-lettered because the filter panicked. A panicking filter sends the
    /// record to the dead-letter topic at once, with 0 attempts and the panic's message: the
    /// handler never saw it, passing it would leave it unhandled (I7), and asking a predicate
    /// about the same value again would most likely panic again.
    ///
    /// It and [`Context::dead_letter`], both out of line, take the record's value, partition and
    /// offset rather than `&Record`: passing the record's address made the delivery loop build
    /// every record on the stack before it knew whether either would run. Callgrind counted 50
    /// instructions a record in `subscription/handler`'s loop that way, 44 this way.
    #[inline(never)]
    fn filtered(&self, value: &T, partition: u32, offset: u64) -> Option<Step> {
        // `filter_record` looks first; a subscription without a filter keeps every record.
        let keep = self.filter.as_ref()?;
        match catch_unwind(AssertUnwindSafe(|| keep(value))) {
            Ok(true) => None,
            Ok(false) => {
                self.count(&self.shared.delivered);
                Some(Step::Done)
            }
            Err(panic) => {
                let why = format!("the filter: {}", panic_message(panic));
                Some(self.dead_letter(value, partition, offset, 0, why))
            }
        }
    }

    /// Adds one to a statistic. Only this thread writes them, so a load and a store do: a locked
    /// add per record cost the delivery loop more than half its time (criterion
    /// `subscription/handler`: 54–60 → 124–165 M records/s).
    fn count(&self, counter: &AtomicU64) {
        // Relaxed: a statistic that only this thread writes (so its own value, which under loom
        // is no scheduling event: see `OwnValue`); snapshots read it Relaxed.
        counter.store(counter.own_value() + 1, Ordering::Relaxed);
    }

    /// [`Context::filtered`] for the record at hand, given its parts. Its run is out of line:
    /// without a filter, a record costs this compare.
    #[inline(always)]
    fn filter_record(&self, record: &Record<'_, T>) -> Option<Step> {
        if self.filter.is_some() {
            self.filtered(record.value(), record.partition(), record.offset())
        } else {
            None
        }
    }

    /// [`Context::dead_letter`] for the record at hand, given its parts (see [`Context::filtered`]:
    /// its address would make the delivery loop build every record on the stack).
    #[inline(always)]
    fn dead_letter_record(&self, record: &Record<'_, T>, attempts: u32, error: String) -> Step {
        let (value, partition, offset) = (record.value(), record.partition(), record.offset());
        self.dead_letter(value, partition, offset, attempts, error)
    }

    /// Writes the record to the dead-letter topic.
    ///
    /// While that topic has no room (a capacity under `Block` or `Reject`, a reader lagging) or
    /// its single producer's role is taken, this waits and tries again, the pause doubling from
    /// [`DEAD_LETTER_PAUSE`] to [`DEAD_LETTER_MAX_PAUSE`], on the subscription's own condition
    /// variable: a `close` meanwhile ends the wait and the record stays unpassed (`Step::Stop`,
    /// I7). The engine's own wait for room would not hear the close. If the topic refuses the
    /// record for good (closed, or the record too large for it), the subscription stops as if
    /// closed, leaving the record unpassed: passing it would lose it, and handling it again
    /// would fail the same way.
    #[cold]
    #[inline(never)]
    fn dead_letter(
        &self,
        value: &T,
        partition: u32,
        offset: u64,
        attempts: u32,
        error: String,
    ) -> Step {
        event!(
            warn,
            partition,
            offset,
            attempts,
            error = %error,
            "dead-lettering a record"
        );
        let mut letter = DeadLetter {
            topic: self.topic.name().to_owned(),
            partition,
            offset,
            subscription: self.shared.name.clone(),
            attempts,
            error,
            value: value.clone(),
        };
        let mut pause = DEAD_LETTER_PAUSE;
        loop {
            let to = self.dead_letter.next_partition();
            match self.dead_letter.publish_or_full(to, letter) {
                Ok(_) => {
                    self.count(&self.shared.dead_lettered);
                    return Step::Done;
                }
                Err(PublishError::Full(back) | PublishError::Busy(back)) => {
                    letter = back;
                    if self.shared.sleep_unless_closing(pause) {
                        return Step::Stop;
                    }
                    pause = (pause * 2).min(DEAD_LETTER_MAX_PAUSE);
                }
                Err(PublishError::Closed(_)) => {
                    return self.stop_for_good(partition, offset, false)
                }
                Err(PublishError::TooLarge(_)) => {
                    return self.stop_for_good(partition, offset, true)
                }
            }
        }
    }

    /// The dead-letter topic refused the record at `offset` in `partition` for good (it is
    /// closed, or the letter is `too_large` for it): the subscription stops as if closed, leaving
    /// the record unpassed (see [`Context::dead_letter`]), and says why in its stats.
    fn stop_for_good(&self, partition: u32, offset: u64, too_large: bool) -> Step {
        let (why, stopped) = if too_large {
            (
                "too large",
                Stopped::DeadLetterTooLarge { partition, offset },
            )
        } else {
            ("closed", Stopped::DeadLetterClosed { partition, offset })
        };
        event!(
            error,
            partition,
            offset,
            why,
            "the dead-letter topic refused a record for good; the subscription stops"
        );
        let _ = why;
        let mut c = lock(&self.shared.control);
        c.closing = true;
        c.stopped.get_or_insert(stopped);
        Step::Stop
    }

    fn run_plain<E: fmt::Display>(
        &mut self,
        record: &Record<'_, T>,
        handler: &mut impl FnMut(&Record<'_, T>) -> Result<(), E>,
    ) -> Step {
        if let Some(step) = self.filter_record(record) {
            return step;
        }
        let mut attempt = 0;
        loop {
            attempt += 1;
            // Relaxed: see the module's Orderings (`in_flight`).
            self.shared.in_flight.store(1, Ordering::Relaxed);
            let result = catch_unwind(AssertUnwindSafe(|| handler(record)));
            self.shared.in_flight.store(0, Ordering::Release); // see Orderings (`in_flight`)
            let error = match result {
                Ok(Ok(())) => {
                    self.count(&self.shared.delivered);
                    return Step::Done;
                }
                Ok(Err(e)) => e.to_string(),
                Err(panic) => panic_message(panic),
            };
            self.count(&self.shared.failed);
            if attempt >= self.retry.max_attempts {
                return self.dead_letter_record(record, attempt, error);
            }
            let delay = self.retry.backoff.delay(attempt, &mut self.seed);
            event!(
                debug,
                offset = record.offset(),
                attempt,
                error = %error,
                ?delay,
                "attempt failed, retrying"
            );
            if self.shared.sleep_unless_closing(delay) {
                return Step::Stop;
            }
        }
    }

    fn run_acked<E: fmt::Display>(
        &mut self,
        record: &Record<'_, T>,
        handler: &mut impl FnMut(Delivery<'_, T>) -> Result<(), E>,
    ) -> Step {
        if let Some(step) = self.filter_record(record) {
            return step;
        }
        let mut deliveries = 0u32;
        let mut failures = 0u32;
        loop {
            deliveries += 1;
            if deliveries > 1 {
                self.count(&self.shared.redelivered);
            }
            let token = {
                let mut c = lock(&self.shared.control);
                c.token += 1;
                c.outcome = None;
                c.redeliver = false;
                c.token
            };
            let handle = AckHandle {
                shared: Arc::clone(&self.shared),
                token,
                partition: record.partition(),
                offset: record.offset(),
            };
            let delivery = Delivery {
                record: record.duplicate(),
                handle: handle.clone(),
                attempt: deliveries,
            };
            // Relaxed: see the module's Orderings (`in_flight`).
            self.shared.in_flight.store(1, Ordering::Relaxed);
            #[cfg(feature = "metrics")]
            let delivered_at = Instant::now();
            let result = catch_unwind(AssertUnwindSafe(|| handler(delivery)));
            let mut error = match result {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e.to_string()),
                Err(panic) => Some(panic_message(panic)),
            };
            if error.is_some() {
                // A failed handler naks, unless it settled the delivery before failing.
                handle.nak(Duration::ZERO);
            }
            let outcome = self.await_outcome(token);
            self.shared.in_flight.store(0, Ordering::Release); // see Orderings (`in_flight`)
            let retry_after = match outcome {
                Awaited::Settled(Outcome::Ack) => {
                    #[cfg(feature = "metrics")]
                    {
                        let (topic, name) = (self.topic.name(), &self.shared.name);
                        self.ack_latency
                            .get_or_insert_with(|| crate::metrics::ack_latency(topic, name))
                            .record(delivered_at.elapsed().as_secs_f64());
                    }
                    self.count(&self.shared.delivered);
                    return Step::Done;
                }
                Awaited::Settled(Outcome::Term) => {
                    let why = error
                        .take()
                        .unwrap_or_else(|| "terminated by the handler".into());
                    return self.dead_letter_record(record, deliveries, why);
                }
                Awaited::Settled(Outcome::Nak(delay)) => {
                    self.count(&self.shared.failed);
                    failures += 1;
                    error.get_or_insert_with(|| "nak".into());
                    if delay.is_zero() && failures > 0 {
                        self.retry.backoff.delay(failures, &mut self.seed)
                    } else {
                        delay
                    }
                }
                Awaited::Redeliver => {
                    error.get_or_insert_with(|| "redelivered by request".into());
                    Duration::ZERO
                }
                Awaited::TimedOut => {
                    error.get_or_insert_with(|| "not acknowledged in time".into());
                    Duration::ZERO
                }
                Awaited::Closing => return Step::Stop,
            };
            if deliveries >= self.max_deliver {
                let why = error.unwrap_or_default();
                return self.dead_letter_record(record, deliveries, why);
            }
            if self.shared.sleep_unless_closing(retry_after) {
                return Step::Stop;
            }
        }
    }

    /// Waits until delivery `token` is settled, redelivery is requested, `ack_wait` passes, or the
    /// subscription closes.
    fn await_outcome(&self, token: u64) -> Awaited {
        let deadline = Instant::now().checked_add(self.ack_wait);
        let mut c = lock(&self.shared.control);
        loop {
            debug_assert_eq!(c.token, token);
            if let Some(o) = c.outcome {
                return Awaited::Settled(o);
            }
            if c.closing {
                // The record stays unpassed (I7): an ack arriving now must be refused, not
                // reported as taken.
                c.token += 1;
                return Awaited::Closing;
            }
            if c.redeliver {
                // Further acks of this delivery are stale.
                c.token += 1;
                return Awaited::Redeliver;
            }
            let now = Instant::now();
            match deadline {
                Some(d) if now >= d => {
                    c.token += 1;
                    return Awaited::TimedOut;
                }
                Some(d) => c = wait_timeout(&self.shared.changed, c, d - now),
                None => c = wait_timeout(&self.shared.changed, c, Duration::from_secs(3600)),
            }
        }
    }
}

enum Awaited {
    Settled(Outcome),
    Redeliver,
    TimedOut,
    Closing,
}

fn panic_message(panic: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        format!("panic: {s}")
    } else if let Some(s) = panic.downcast_ref::<String>() {
        format!("panic: {s}")
    } else {
        "panic".to_owned()
    }
}

/// A running push subscription. Dropping it closes it (see [`Subscription::close`]).
///
/// ```
/// use std::time::Duration;
/// use logbus::{Broker, Start, TopicConfig};
/// let broker = Broker::new();
/// let topic = broker.topic::<u32>("jobs", TopicConfig::default()).unwrap();
/// let (tx, rx) = std::sync::mpsc::channel();
/// let sub = topic
///     .subscribe("worker", Start::Earliest, move |r| tx.send(**r).map_err(|e| e.to_string()))
///     .unwrap();
/// topic.publish(7).unwrap();
/// assert_eq!(rx.recv().unwrap(), 7);
/// assert!(sub.wait_idle(Duration::from_secs(5)));
/// assert_eq!(sub.stats().delivered, 1);
/// ```
#[must_use = "dropping a subscription closes it at once"]
pub struct Subscription<T: Send + Sync + 'static> {
    shared: Arc<Shared>,
    waker: Arc<Waker>,
    thread: Option<JoinHandle<()>>,
    topic: Topic<T>,
    dead_letter: Topic<DeadLetter<T>>,
}

impl<T: Send + Sync + 'static> fmt::Debug for Subscription<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subscription")
            .field("topic", &self.topic.name())
            .field("name", &self.shared.name)
            .finish_non_exhaustive()
    }
}

impl<T: Send + Sync + 'static> Subscription<T> {
    /// The subscription's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The topic it subscribes to.
    pub fn topic(&self) -> &Topic<T> {
        &self.topic
    }

    /// Where this subscription's dead letters go.
    pub fn dead_letter_topic(&self) -> &Topic<DeadLetter<T>> {
        &self.dead_letter
    }

    fn poke(&self, change: impl FnOnce(&mut Control)) {
        let mut c = lock(&self.shared.control);
        change(&mut c);
        // Release: see the module's Orderings.
        self.shared.attention.store(true, Ordering::Release);
        self.shared.changed.notify_all();
        drop(c);
        self.waker.interrupt();
    }

    /// Stops handing out records after the current one, until [`Subscription::resume`].
    pub fn pause(&self) {
        self.poke(|c| c.paused = true);
    }

    /// Resumes after [`Subscription::pause`].
    pub fn resume(&self) {
        self.poke(|c| c.paused = false);
    }

    /// Ack mode: delivers the current unacked record again now, without waiting for `ack_wait`.
    pub fn redeliver_unacked(&self) {
        let mut c = lock(&self.shared.control);
        if c.outcome.is_none() {
            c.redeliver = true;
            self.shared.changed.notify_all();
        }
    }

    /// Stops after the current record (which is finished, or left unpassed if it was waiting for a
    /// retry or an ack), commits the position under the subscription's name and joins the thread.
    /// Idempotent. Called from the subscription's own handler, it stops without joining.
    pub fn close(&mut self) {
        self.poke(|c| c.closing = true);
        if let Some(t) = self.thread.take() {
            if t.thread().id() != thread::current().id() {
                let _ = t.join();
            }
        }
    }

    /// Waits until everything published before this call has been processed (and nothing is in
    /// flight), or the subscription finished; false if `timeout` passed first.
    pub fn wait_idle(&self, timeout: Duration) -> bool {
        let ends: Vec<u64> = (0..self.topic.partitions())
            .map(|p| self.topic.partition_log(p).end())
            .collect();
        let deadline = Instant::now().checked_add(timeout);
        // SeqCst, then the heavy barrier: see the module's Orderings (`positions`).
        self.shared.idle_waiters.fetch_add(1, Ordering::SeqCst);
        heavy_barrier();
        let mut c = lock(&self.shared.control);
        let idle = loop {
            // Acquire loads (SeqCst for the rare flags): see the module's Orderings.
            let done = self.shared.finished.load(Ordering::SeqCst)
                || (self.shared.in_flight.load(Ordering::Acquire) == 0
                    && ends
                        .iter()
                        .zip(&self.shared.positions)
                        .zip(&self.shared.assigned)
                        .all(|((end, pos), mine)| {
                            !mine.load(Ordering::SeqCst) || pos.load(Ordering::Acquire) >= *end
                        }));
            if done {
                break true;
            }
            let now = Instant::now();
            match deadline {
                Some(d) if now >= d => break false,
                Some(d) => c = wait_timeout(&self.shared.changed, c, d - now),
                None => c = wait_timeout(&self.shared.changed, c, Duration::from_secs(3600)),
            }
        };
        drop(c);
        // SeqCst: see the module's Orderings.
        self.shared.idle_waiters.fetch_sub(1, Ordering::SeqCst);
        idle
    }

    /// Whether the thread has stopped: closed, the topic closed and everything was processed, a
    /// refused dead letter, or a panic. [`SubscriptionStats::stopped`] says which.
    pub fn is_finished(&self) -> bool {
        self.shared.finished.load(Ordering::SeqCst)
    }

    /// A snapshot of the subscription's progress.
    pub fn stats(&self) -> SubscriptionStats {
        let positions: Vec<u64> = self
            .shared
            .positions
            .iter()
            // Acquire: see the module's Orderings (`positions`).
            .map(|p| p.load(Ordering::Acquire))
            .collect();
        let lag = positions
            .iter()
            .enumerate()
            .map(|(p, pos)| {
                self.topic
                    .partition_log(p as u32)
                    .end()
                    .saturating_sub(*pos)
            })
            .sum();
        // Relaxed: statistics.
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        SubscriptionStats {
            name: self.shared.name.clone(),
            positions,
            lag,
            delivered: get(&self.shared.delivered),
            failed_attempts: get(&self.shared.failed),
            redelivered: get(&self.shared.redelivered),
            dead_lettered: get(&self.shared.dead_lettered),
            lagged: get(&self.shared.lagged),
            // Acquire: see the module's Orderings (`in_flight`).
            in_flight: self.shared.in_flight.load(Ordering::Acquire),
            // Only once finished: a refused dead letter records its reason before the thread
            // has wound up.
            stopped: if self.is_finished() {
                lock(&self.shared.control).stopped.clone()
            } else {
                None
            },
        }
    }
}

impl<T: Send + Sync + 'static> Drop for Subscription<T> {
    fn drop(&mut self) {
        self.close();
    }
}
