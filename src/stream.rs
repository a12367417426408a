//! Async readers, consumers and group members (the `async` feature): `next_async` / `poll_async`
//! futures and `futures_core::Stream`, runtime-agnostic.
//!
//! A task waits the way a thread does (see [`crate::wait`] and the log's `Waker`). First it yields:
//! for the topic's [`WaitStrategy::yield_for`](crate::WaitStrategy::yield_for) from the first poll
//! that found nothing, each such poll wakes its own task and returns `Pending`, so the executor
//! runs its other tasks and polls this one again, as a thread yields its core and looks again.
//! Then it parks: it stores its task waker beside the futex word, announces itself as parked in
//! every log it reads (the word, the logs' parked counts, the heavy barrier), checks again, and
//! only then returns `Pending`. A publisher that finds a parked reader wakes the futex and the task
//! waker alike; a publisher that finds none does no more work than without async (I5).
//!
//! A wait is kept by the reader, consumer or group member, not by the future: it lasts until a
//! poll completes, so a task that drops its `next_async` (a `select!` whose other branch won) and
//! polls a fresh one goes on with the same wait, and parks once `yield_for` has passed since its
//! first empty poll rather than yielding afresh on every future.
//!
//! A task that finds records at every poll would keep its thread until it caught up, starving
//! the other tasks there (a replay of a long history does). So after
//! [`WaitStrategy::task_budget`](crate::WaitStrategy::task_budget) polls in a row completed at
//! once, the next one wakes the task and returns `Pending`, taking nothing: a runtime-agnostic
//! form of tokio's cooperative budget.
//!
//! The yielding spares a stream that pauses briefly the announcement's heavy barrier (an interrupt
//! to every other core running the process, several microseconds on a VM) and the wake-up; a task
//! that announced at every poll finding nothing paid it each time it caught up with its publisher,
//! and then waited for the wake-up (the harness's `async` scenario measures both; see
//! `perf/README.md`). [`WaitStrategy::park_at_once`](crate::WaitStrategy::park_at_once) parks at
//! the first poll that finds nothing, as before. A publishing task blocked by
//! [`Overflow::Block`](crate::Overflow::Block) (`Topic::publish_async`, `Producer::publish_async`)
//! yields the same way before it announces itself blocked; both publishes share that wait
//! (`wait_for_room`).
//!
//! The announcement is withdrawn at the next poll, when the future completes, and when a pending
//! future (or a reader polled as a stream) is dropped, so a cancelled wait (a `select!` that took
//! another branch) leaves nothing behind and loses no record: records are only taken from the log
//! inside a poll that returns them.
//!
//! # Orderings
//! No atomics of its own: the handshake is `Log::announce` / `Log::withdraw` and the publisher's
//! side in the log, whose orderings are documented there.

use std::{
    fmt,
    future::Future,
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use futures_core::Stream;

use crate::{
    clock,
    config::{Overflow, TopicConfig},
    consumer::Consumer,
    error::{PublishError, ReadError},
    group::{GroupError, GroupMember},
    log::{Log, Waker},
    reader::{Batch, OwnedRecord, Reader, Record, SCAN},
    sync::Arc,
    topic::{Producer, Published, Topic},
    wait::scan,
};

/// A task's wait, carried from poll to poll, and from one future to the next, by the reader,
/// consumer or group member it reads; a blocked `publish_async` keeps its own (`announced`:
/// counted blocked in its log).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct TaskWait {
    /// Announced as parked in the logs it reads ([`poll_ready`]).
    announced: bool,
    /// Polls in a row that completed at once, against the strategy's `task_budget`.
    ready_run: u32,
    /// When a poll first found nothing ([`clock::now_nanos`]); 0 once a poll completed.
    idle_since: u64,
}

impl TaskWait {
    /// At the start of a poll: once `budget` polls in a row have completed at once (0: never),
    /// wakes the task, which the caller then leaves with `Pending`, taking nothing, and says so.
    #[inline]
    fn spent(&mut self, budget: u32, cx: &Context<'_>) -> bool {
        if self.within(budget) {
            return false;
        }
        self.ready_run = 0;
        cx.waker().wake_by_ref();
        true
    }

    /// Whether another poll may complete at once without yielding: `ready_run < budget`, where
    /// a budget of 0 (never spent) wraps to the most.
    #[inline(always)]
    fn within(&self, budget: u32) -> bool {
        self.ready_run <= budget.wrapping_sub(1)
    }

    /// For a poll that found nothing: within `yield_for` of the wait's first such poll (this one,
    /// if it is the first), wakes the task, which the caller then leaves with `Pending`,
    /// announcing nothing, and says so; after it, says the task is to park. The wait lasts until
    /// a poll completes, across futures: a fresh `next_async` after a `select!` dropped the last
    /// one goes on with it. Zero never yields.
    fn yielded(&mut self, yield_for: Duration, cx: &Context<'_>) -> bool {
        self.ready_run = 0;
        if yield_for.is_zero() {
            return false;
        }
        let now = clock::now_nanos().max(1);
        if self.idle_since == 0 {
            self.idle_since = now;
        } else if now.saturating_sub(self.idle_since)
            >= u64::try_from(yield_for.as_nanos()).unwrap_or(u64::MAX)
        {
            return false;
        }
        cx.waker().wake_by_ref();
        true
    }

    /// The poll completes (records found, or an error to report): the next wait yields afresh,
    /// and the poll counts against the budget.
    #[inline]
    fn ended<R>(&mut self, result: R) -> Poll<R> {
        self.idle_since = 0;
        self.ready_run = self.ready_run.saturating_add(1);
        Poll::Ready(result)
    }
}

/// The fast path's test (see [`poll_one`]): `reader` has records already looked up, and the wait
/// is neither announced nor out of budget.
#[inline(always)]
fn ready_at_once<T: Send + Sync + 'static>(wait: &TaskWait, reader: &Reader<T>) -> bool {
    !wait.announced && wait.within(reader.log().wait.task_budget) && reader.has_ready()
}

/// The task budget of a set of readers (they share a topic and its wait strategy).
fn budget<T: Send + Sync + 'static>(readers: &[Reader<T>]) -> u32 {
    readers.first().map_or(0, |r| r.log().wait.task_budget)
}

/// One poll of an async wait over `readers` (sharing `waker`): the index of a reader with records
/// ready, an error, or `Pending`, either yielding (the task woken already) or with the task
/// announced (`wait.announced` set).
fn poll_ready<T: Send + Sync + 'static>(
    readers: &mut [Reader<T>],
    from: usize,
    waker: &Waker,
    wait: &mut TaskWait,
    cx: &mut Context<'_>,
    limit: u64,
) -> Poll<Result<usize, (usize, ReadError)>> {
    withdraw(readers, waker, &mut wait.announced);
    match scan(readers, from, limit) {
        Ok(None) => {}
        found => return wait.ended(found.map(|i| i.expect("checked above"))),
    }
    // The readers of a set share a topic, and so its wait strategy; a set of none parks at once.
    let yield_for = readers
        .first()
        .map_or(Duration::ZERO, |r| r.log().wait.yield_for);
    if wait.yielded(yield_for, cx) {
        return Poll::Pending;
    }
    waker.set_task(cx.waker());
    for r in readers.iter_mut() {
        r.publish_position();
    }
    with_logs(readers, |logs| Log::announce(logs, waker));
    wait.announced = true;
    // The re-check after announcing: either it sees the record, or the publisher sees us (I5).
    match scan(readers, from, limit) {
        Ok(None) => Poll::Pending,
        found => {
            withdraw(readers, waker, &mut wait.announced);
            wait.ended(found.map(|i| i.expect("checked above")))
        }
    }
}

fn with_logs<T: Send + Sync + 'static, R>(
    readers: &[Reader<T>],
    f: impl FnOnce(&[&Log<T>]) -> R,
) -> R {
    if let [one] = readers {
        f(&[&**one.log()])
    } else {
        let logs: Vec<Arc<Log<T>>> = readers.iter().map(|r| Arc::clone(r.log())).collect();
        let refs: Vec<&Log<T>> = logs.iter().map(|l| &**l).collect();
        f(&refs)
    }
}

/// Withdraws an announcement, if there is one.
fn withdraw<T: Send + Sync + 'static>(readers: &[Reader<T>], waker: &Waker, announced: &mut bool) {
    if std::mem::take(announced) {
        with_logs(readers, |logs| Log::withdraw(logs, waker));
    }
}

/// What a pending future or stream does when dropped: withdraws its announcement, if any, and
/// forgets its task.
fn leave<T: Send + Sync + 'static>(readers: &[Reader<T>], waker: &Waker, announced: &mut bool) {
    if *announced {
        withdraw(readers, waker, announced);
        waker.clear_task();
    }
}

/// A reader, or its pending `next_async`, dropped while announced withdraws here.
pub(crate) fn leave_one<T: Send + Sync + 'static>(reader: &mut Reader<T>) {
    let mut announced = std::mem::take(&mut reader.task_wait.announced);
    if announced {
        let waker = Arc::clone(reader.waker());
        leave(std::slice::from_ref(reader), &waker, &mut announced);
    }
}

/// One poll of a single reader, its wait kept in the reader. A record already looked up is taken
/// here, inlined into the caller's future: nothing else to do, no waker touched, and the record
/// handed back in registers (out of line, the caller read it back from memory just written, a
/// stall that cost more than the rest of the poll). Everything else is [`poll_one_slow`].
#[inline(always)]
fn poll_one<T: Send + Sync + 'static>(
    reader: &mut Reader<T>,
    cx: &mut Context<'_>,
) -> Poll<Result<(), ReadError>> {
    if ready_at_once(&reader.task_wait, reader) {
        return reader.task_wait.ended(Ok(()));
    }
    poll_one_slow(reader, cx)
}

/// The rest of [`poll_one`]: the budget, a look-up in the log, and the wait.
#[inline(never)]
fn poll_one_slow<T: Send + Sync + 'static>(
    reader: &mut Reader<T>,
    cx: &mut Context<'_>,
) -> Poll<Result<(), ReadError>> {
    if !reader.task_wait.announced {
        let budget = reader.log().wait.task_budget;
        if reader.task_wait.spent(budget, cx) {
            return Poll::Pending;
        }
        match reader.poll_ready(SCAN) {
            Ok(false) => {}
            found => return reader.task_wait.ended(found.map(|_| ())),
        }
    }
    let waker = Arc::clone(reader.waker());
    let mut wait = reader.task_wait;
    let polled = poll_ready(std::slice::from_mut(reader), 0, &waker, &mut wait, cx, SCAN);
    reader.task_wait = wait;
    polled.map(|r| r.map(|_| ()).map_err(|(_, e)| e))
}

impl<T: Send + Sync + 'static> Reader<T> {
    /// The next record, waiting for it without blocking the thread (the `async` feature).
    /// Cancel-safe: dropping the future before it completes takes nothing from the log.
    ///
    /// ```
    /// # futures::executor::block_on(async {
    /// use logbus::{Start, Topic, TopicConfig};
    /// let topic = Topic::<u32>::new("ticks", TopicConfig::default()).unwrap();
    /// let mut reader = topic.reader(0, Start::Earliest).unwrap();
    /// let t = topic.clone();
    /// std::thread::spawn(move || t.publish(7).unwrap());
    /// let record = reader.next_async().await.unwrap();
    /// assert_eq!((record.offset(), *record), (0, 7));
    /// # });
    /// ```
    pub fn next_async(&mut self) -> NextRecord<'_, T> {
        NextRecord { reader: Some(self) }
    }
}

/// The future of [`Reader::next_async`].
#[must_use = "futures do nothing unless polled"]
pub struct NextRecord<'r, T: Send + Sync + 'static> {
    reader: Option<&'r mut Reader<T>>,
}

impl<T: Send + Sync + 'static> fmt::Debug for NextRecord<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NextRecord")
            .field("done", &self.reader.is_none())
            .finish_non_exhaustive()
    }
}

impl<'r, T: Send + Sync + 'static> Future for NextRecord<'r, T> {
    type Output = Result<Record<'r, T>, ReadError>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let reader = this
            .reader
            .as_mut()
            .expect("NextRecord polled after it completed");
        match poll_one(reader, cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Ready(Ok(())) => {
                let reader = this.reader.take().expect("checked above");
                Poll::Ready(Ok(reader.take_one()))
            }
        }
    }
}

impl<T: Send + Sync + 'static> Drop for NextRecord<'_, T> {
    #[inline]
    fn drop(&mut self) {
        if let Some(reader) = self.reader.as_mut() {
            if reader.task_wait.announced {
                leave_one(reader);
            }
        }
    }
}

/// A reader is a stream of owned records (values cloned out of the log); it ends when the topic is
/// closed and fully read, and lag is an item (`Err(ReadError::Lagged(n))`). For borrowed records
/// without a clone, use [`Reader::next_async`].
impl<T: Clone + Send + Sync + 'static> Stream for Reader<T> {
    type Item = Result<OwnedRecord<T>, ReadError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        match poll_one(this, cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(ReadError::Closed)) => Poll::Ready(None),
            Poll::Ready(Err(e)) => Poll::Ready(Some(Err(e))),
            Poll::Ready(Ok(())) => Poll::Ready(Some(Ok(this.take_one().to_owned_record()))),
        }
    }
}

impl<T: Send + Sync + 'static> Consumer<T> {
    /// Up to `max` records of one partition, waiting for them without blocking the thread (the
    /// `async` feature). Like [`Consumer::poll`], but it waits instead of returning `Empty`.
    /// Cancel-safe.
    ///
    /// ```
    /// # futures::executor::block_on(async {
    /// use logbus::{Start, Topic, TopicConfig};
    /// let topic = Topic::<u32>::new("orders", TopicConfig::default().partitions(2)).unwrap();
    /// let mut consumer = topic.consumer("billing", Start::Earliest).unwrap();
    /// topic.publish_to(1, 5).unwrap();
    /// let batch = consumer.poll_async(10).await.unwrap();
    /// assert_eq!((batch.partition(), batch.len()), (1, 1));
    /// # });
    /// ```
    pub fn poll_async(&mut self, max: usize) -> PollBatch<'_, T> {
        PollBatch {
            consumer: Some(self),
            max: max.max(1) as u64,
        }
    }
}

/// The future of [`Consumer::poll_async`].
#[must_use = "futures do nothing unless polled"]
pub struct PollBatch<'c, T: Send + Sync + 'static> {
    consumer: Option<&'c mut Consumer<T>>,
    max: u64,
}

impl<T: Send + Sync + 'static> fmt::Debug for PollBatch<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PollBatch")
            .field("max", &self.max)
            .field("done", &self.consumer.is_none())
            .finish_non_exhaustive()
    }
}

impl<'c, T: Send + Sync + 'static> Future for PollBatch<'c, T> {
    type Output = Result<Batch<'c, T>, ReadError>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let consumer = this
            .consumer
            .as_mut()
            .expect("PollBatch polled after it completed");
        match poll_consumer(consumer, cx, this.max) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err((i, e))) => Poll::Ready(Err(consumer.lagged_or(i, e))),
            Poll::Ready(Ok(i)) => {
                let consumer = this.consumer.take().expect("checked above");
                Poll::Ready(Ok(consumer.take_ready(i, this.max)))
            }
        }
    }
}

impl<T: Send + Sync + 'static> Drop for PollBatch<'_, T> {
    #[inline]
    fn drop(&mut self) {
        if let Some(consumer) = self.consumer.as_mut() {
            if consumer.task_wait.announced {
                leave_consumer(consumer);
            }
        }
    }
}

/// One poll of a consumer, its wait kept in the consumer: the index of a reader with records
/// ready, an error, or `Pending` (yielding, or announced). Inlined where the partition whose turn
/// it is has records already looked up (as [`poll_one`]; out of line, with the waker's reference
/// count taken and given back, a one-record poll cost several times a reader's); everything else
/// is [`poll_consumer_slow`].
#[inline(always)]
fn poll_consumer<T: Send + Sync + 'static>(
    consumer: &mut Consumer<T>,
    cx: &mut Context<'_>,
    max: u64,
) -> Poll<Result<usize, (usize, ReadError)>> {
    if let Some((i, reader)) = consumer.turn() {
        if ready_at_once(&consumer.task_wait, reader) {
            return consumer.task_wait.ended(Ok(i));
        }
    }
    poll_consumer_slow(consumer, cx, max)
}

/// The rest of [`poll_consumer`]: the budget, a scan of the partitions, and the wait.
#[inline(never)]
fn poll_consumer_slow<T: Send + Sync + 'static>(
    consumer: &mut Consumer<T>,
    cx: &mut Context<'_>,
    max: u64,
) -> Poll<Result<usize, (usize, ReadError)>> {
    let mut wait = consumer.task_wait;
    if wait.spent(budget(consumer.readers_mut()), cx) {
        consumer.task_wait = wait;
        return Poll::Pending;
    }
    let waker = consumer.waker();
    let from = consumer.rotation();
    let polled = poll_ready(consumer.readers_mut(), from, &waker, &mut wait, cx, max);
    consumer.task_wait = wait;
    polled
}

/// A consumer, or its pending `poll_async`, dropped while announced withdraws here.
fn leave_consumer<T: Send + Sync + 'static>(consumer: &mut Consumer<T>) {
    let mut announced = std::mem::take(&mut consumer.task_wait.announced);
    if announced {
        let waker = consumer.waker();
        leave(consumer.readers_mut(), &waker, &mut announced);
    }
}

/// A consumer is a stream of owned records, one at a time over its partitions (values cloned out
/// of the log); it ends when every partition is closed and fully read. Lag is an item.
impl<T: Clone + Send + Sync + 'static> Stream for Consumer<T> {
    type Item = Result<OwnedRecord<T>, ReadError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        match poll_consumer(this, cx, 1) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err((_, ReadError::Closed))) => Poll::Ready(None),
            Poll::Ready(Err((i, e))) => Poll::Ready(Some(Err(this.lagged_or(i, e)))),
            Poll::Ready(Ok(i)) => {
                let batch = this.take_ready(i, 1);
                let record = batch.iter().next().expect("a ready batch is not empty");
                Poll::Ready(Some(Ok(record.to_owned_record())))
            }
        }
    }
}

impl<T: Send + Sync + 'static> Drop for Consumer<T> {
    fn drop(&mut self) {
        leave_consumer(self);
    }
}

impl<T: Send + Sync + 'static> GroupMember<T> {
    /// Up to `max` records of one assigned partition, or a rebalance, waiting without blocking the
    /// thread (the `async` feature). Like [`GroupMember::poll_timeout`] with no timeout: a member
    /// with no partitions waits until the group changes. Cancel-safe.
    pub fn poll_async(&mut self, max: usize) -> PollGroup<'_, T> {
        PollGroup {
            member: Some(self),
            max: max.max(1) as u64,
        }
    }
}

/// The future of [`GroupMember::poll_async`].
#[must_use = "futures do nothing unless polled"]
pub struct PollGroup<'m, T: Send + Sync + 'static> {
    member: Option<&'m mut GroupMember<T>>,
    max: u64,
}

impl<T: Send + Sync + 'static> fmt::Debug for PollGroup<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PollGroup")
            .field("max", &self.max)
            .field("done", &self.member.is_none())
            .finish_non_exhaustive()
    }
}

/// One poll of a member, its wait kept in the member: a ready reader's index, a rebalance or
/// error, or `Pending` (yielding, or announced). Inlined where the member has no group change to
/// apply and the partition whose turn it is has records already looked up (as [`poll_one`]);
/// everything else is [`poll_member_slow`].
#[inline(always)]
fn poll_member<T: Send + Sync + 'static>(
    member: &mut GroupMember<T>,
    cx: &mut Context<'_>,
    max: u64,
) -> Poll<Result<usize, GroupError>> {
    if let Some((i, reader)) = member.settled_turn() {
        if ready_at_once(&member.task_wait, reader) {
            return member.task_wait.ended(Ok(i));
        }
    }
    poll_member_slow(member, cx, max)
}

/// The rest of [`poll_member`]: the budget, the group's changes, a scan, and the wait.
#[inline(never)]
fn poll_member_slow<T: Send + Sync + 'static>(
    member: &mut GroupMember<T>,
    cx: &mut Context<'_>,
    max: u64,
) -> Poll<Result<usize, GroupError>> {
    let mut wait = member.task_wait;
    let polled = poll_member_with(member, &mut wait, cx, max);
    member.task_wait = wait;
    polled
}

fn poll_member_with<T: Send + Sync + 'static>(
    member: &mut GroupMember<T>,
    wait: &mut TaskWait,
    cx: &mut Context<'_>,
    max: u64,
) -> Poll<Result<usize, GroupError>> {
    if wait.spent(member.task_budget(), cx) {
        return Poll::Pending;
    }
    loop {
        // Withdraw before syncing: a rebalance changes the readers the announcement was made in.
        let (readers, _, waker) = member.async_parts();
        withdraw(readers, &waker, &mut wait.announced);
        if let Some(r) = member.sync_async() {
            return wait.ended(Err(GroupError::Rebalanced(r)));
        }
        // No partitions: the group getting done after this look interrupts the waker, which
        // `disturbed` below sees.
        if member.has_no_partitions() && member.group_done(false) {
            return wait.ended(Err(GroupError::Read(ReadError::Closed)));
        }
        let (readers, from, waker) = member.async_parts();
        match poll_ready(readers, from, &waker, wait, cx, max) {
            Poll::Ready(Ok(i)) => return Poll::Ready(Ok(i)),
            // All of ours read to their closed end: `Closed` once the whole group is done (see
            // `GroupMember::group_done`). Until then, wait as a task, announced in no log: a
            // group change or the group getting done interrupts the waker and wakes the task.
            Poll::Ready(Err((_, ReadError::Closed))) => {
                if member.group_done(true) {
                    return Poll::Ready(Err(GroupError::Read(ReadError::Closed)));
                }
                waker.set_task(cx.waker());
                if member.disturbed() {
                    continue;
                }
                wait.ready_run = 0;
                return Poll::Pending;
            }
            Poll::Ready(Err((_, e))) => return Poll::Ready(Err(GroupError::Read(e))),
            // Announced: a group change from now on interrupts the waker and wakes the task; one
            // that came before is seen here (the same handshake as a parking thread).
            Poll::Pending if member.disturbed() => continue,
            Poll::Pending => return Poll::Pending,
        }
    }
}

impl<'m, T: Send + Sync + 'static> Future for PollGroup<'m, T> {
    type Output = Result<Batch<'m, T>, GroupError>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let member = this
            .member
            .as_mut()
            .expect("PollGroup polled after it completed");
        match poll_member(member, cx, this.max) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Ready(Ok(i)) => {
                let member = this.member.take().expect("checked above");
                Poll::Ready(Ok(member.take_ready(i, this.max)))
            }
        }
    }
}

impl<T: Send + Sync + 'static> Drop for PollGroup<'_, T> {
    #[inline]
    fn drop(&mut self) {
        if let Some(member) = self.member.as_mut() {
            if member.task_wait.announced {
                leave_member(member);
            }
        }
    }
}

/// A member is a stream of owned records over its partitions; rebalances are items
/// (`Err(GroupError::Rebalanced(_))`, after which it goes on), and it ends when its partitions are
/// closed and the group has read every partition to its end (see [`GroupMember::poll`]).
impl<T: Clone + Send + Sync + 'static> Stream for GroupMember<T> {
    type Item = Result<OwnedRecord<T>, GroupError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        match poll_member(this, cx, 1) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(GroupError::Read(ReadError::Closed))) => Poll::Ready(None),
            Poll::Ready(Err(e)) => Poll::Ready(Some(Err(e))),
            Poll::Ready(Ok(i)) => {
                let batch = this.take_ready(i, 1);
                let record = batch.iter().next().expect("a ready batch is not empty");
                Poll::Ready(Some(Ok(record.to_owned_record())))
            }
        }
    }
}

/// A member, or its pending `poll_async`, dropped while announced withdraws here.
pub(crate) fn leave_member<T: Send + Sync + 'static>(member: &mut GroupMember<T>) {
    let mut announced = std::mem::take(&mut member.task_wait.announced);
    if announced {
        let (readers, _, waker) = member.async_parts();
        leave(readers, &waker, &mut announced);
    }
}

impl<T: Send + Sync + 'static> Topic<T> {
    /// Publishes a record (round-robin over partitions) without blocking the thread: on a topic
    /// whose overflow policy is [`Overflow::Block`], the task waits until the slowest reader makes
    /// room (or the topic closes); under the other policies it completes at once, like
    /// [`Topic::publish`]. The value is handed back on every error; dropping the future before it
    /// completes publishes nothing and drops the value.
    ///
    /// ```
    /// # futures::executor::block_on(async {
    /// use logbus::{Overflow, Start, Topic, TopicConfig};
    /// let config = TopicConfig::default().max_records(1).overflow(Overflow::Block);
    /// let topic = Topic::<u32>::new("gate", config).unwrap();
    /// let mut reader = topic.reader(0, Start::Earliest).unwrap();
    /// topic.publish_async(1).await.unwrap();
    /// // The log is full until the reader reads; a thread reads in a moment.
    /// let t = std::thread::spawn(move || *reader.next().unwrap());
    /// let second = topic.publish_async(2).await.unwrap();
    /// assert_eq!((second.offset, t.join().unwrap()), (1, 1));
    /// # });
    /// ```
    pub fn publish_async(&self, value: T) -> PublishAsync<'_, T> {
        PublishAsync {
            topic: self,
            partition: self.next_partition(),
            value: Some(value),
            wait: TaskWait::default(),
        }
    }
}

/// The future of [`Topic::publish_async`].
#[must_use = "futures do nothing unless polled"]
pub struct PublishAsync<'t, T: Send + Sync + 'static> {
    topic: &'t Topic<T>,
    partition: u32,
    value: Option<T>,
    wait: TaskWait,
}

impl<T: Send + Sync + 'static> fmt::Debug for PublishAsync<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PublishAsync")
            .field("topic", &self.topic.name())
            .field("partition", &self.partition)
            .field("done", &self.value.is_none())
            .finish_non_exhaustive()
    }
}

impl<T: Send + Sync + 'static> Unpin for PublishAsync<'_, T> {}

impl<T: Send + Sync + 'static> Future for PublishAsync<'_, T> {
    type Output = Result<Published, PublishError<T>>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let (topic, partition) = (this.topic, this.partition);
        let try_publish = |slot: &mut Option<T>| {
            let value = slot.take().expect("PublishAsync polled after it completed");
            topic
                .publish_or_full(partition, value)
                .map(|p| p.offset)
                .map_err(|e| e.map(|value| *slot = Some(value)))
        };
        let tried = if this.wait.announced {
            Err(PublishError::Full(()))
        } else {
            try_publish(&mut this.value)
        };
        let done = match tried {
            Err(PublishError::Full(())) => {
                let log = topic.partition_log(partition);
                let retry = || try_publish(&mut this.value);
                match wait_for_room(log, topic.config(), &mut this.wait, cx, retry) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(done) => done,
                }
            }
            done => done,
        };
        Poll::Ready(published(done, partition, &mut this.value))
    }
}

/// What an async publish gives back, built once where its paths meet: the offset a try gave,
/// or its error with the value it handed back into `slot`. (A whole
/// `Result<Published, PublishError<T>>` from an out-of-line path made the caller's inlined fast
/// path store its result in memory for the join and read it back at once, wider than its
/// stores: a stall. A try's two words stay in registers.)
#[inline(always)]
fn published<T>(
    done: Result<u64, PublishError<()>>,
    partition: u32,
    slot: &mut Option<T>,
) -> Result<Published, PublishError<T>> {
    match done {
        Ok(offset) => Ok(Published { partition, offset }),
        Err(e) => Err(e.map(|()| slot.take().expect("a failed try hands the value back"))),
    }
}

/// The wait of an async publish whose last try found `log` full, or which waits announced
/// (`wait.announced`): withdraws and tries again (`retry`, which hands the value back on
/// failure), and while the log stays full under `Block`, yields, then announces itself blocked
/// and re-checks. Out of line: the common case is a try that publishes. The outcome as `retry`
/// gives it; `Full` at once under `Reject`.
#[inline(never)]
fn wait_for_room<T: Send + Sync + 'static>(
    log: &Log<T>,
    config: &TopicConfig<T>,
    wait: &mut TaskWait,
    cx: &mut Context<'_>,
    mut retry: impl FnMut() -> Result<u64, PublishError<()>>,
) -> Poll<Result<u64, PublishError<()>>> {
    loop {
        if std::mem::take(&mut wait.announced) {
            log.withdraw_blocked();
            match retry() {
                Err(PublishError::Full(())) => {}
                done => return Poll::Ready(done),
            }
        }
        if config.overflow != Overflow::Block {
            return Poll::Ready(Err(PublishError::Full(())));
        }
        // Yielding first, as a waiting reader's task does (see `poll_ready`).
        if wait.yielded(config.wait.yield_for, cx) {
            return Poll::Pending;
        }
        log.announce_blocked(cx.waker());
        wait.announced = true;
        // The re-check after announcing: either it sees the room a reader made, or that reader
        // sees us and wakes the task (the handshake of `Log::wait_for_room`).
        if !log.room_for_one() {
            return Poll::Pending;
        }
    }
}

impl<T: Send + Sync + 'static> Drop for PublishAsync<'_, T> {
    #[inline]
    fn drop(&mut self) {
        if self.wait.announced {
            self.topic.partition_log(self.partition).withdraw_blocked();
        }
    }
}

impl<T: Send + Sync + 'static> Producer<T> {
    /// Publishes a record (round-robin over partitions, as [`Producer::publish`]) without
    /// blocking the thread: on a topic whose overflow policy is [`Overflow::Block`], the task
    /// waits until the slowest reader makes room (or the topic closes), yielding to its executor
    /// first and then parked, as [`Topic::publish_async`] waits; under the other policies it
    /// completes at once. Where the record fits, the poll is [`Producer::publish`]'s own path,
    /// inlined into the caller's future. The value is handed back on every error; dropping the
    /// future before it completes publishes nothing and drops the value.
    ///
    /// ```
    /// # futures::executor::block_on(async {
    /// use logbus::{Overflow, Start, Topic, TopicConfig};
    /// let config = TopicConfig::default().single_producer().max_records(1).overflow(Overflow::Block);
    /// let topic = Topic::<u32>::new("gate", config).unwrap();
    /// let mut reader = topic.reader(0, Start::Earliest).unwrap();
    /// let mut producer = topic.producer().unwrap();
    /// producer.publish_async(1).await.unwrap();
    /// // The log is full until the reader reads; a thread reads in a moment.
    /// let t = std::thread::spawn(move || *reader.next().unwrap());
    /// let second = producer.publish_async(2).await.unwrap();
    /// assert_eq!((second.offset, t.join().unwrap()), (1, 1));
    /// # });
    /// ```
    pub fn publish_async(&mut self, value: T) -> ProducerPublish<'_, T> {
        ProducerPublish {
            producer: self,
            partition: None,
            value: Some(value),
            wait: TaskWait::default(),
        }
    }
}

/// The future of [`Producer::publish_async`].
#[must_use = "futures do nothing unless polled"]
pub struct ProducerPublish<'p, T: Send + Sync + 'static> {
    producer: &'p mut Producer<T>,
    /// Picked by the first try, kept for the tries after it (the value goes where it was meant).
    partition: Option<u32>,
    value: Option<T>,
    wait: TaskWait,
}

impl<T: Send + Sync + 'static> fmt::Debug for ProducerPublish<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProducerPublish")
            .field("topic", &self.producer.topic().name())
            .field("partition", &self.partition)
            .field("done", &self.value.is_none())
            .finish_non_exhaustive()
    }
}

impl<T: Send + Sync + 'static> Unpin for ProducerPublish<'_, T> {}

impl<T: Send + Sync + 'static> Future for ProducerPublish<'_, T> {
    type Output = Result<Published, PublishError<T>>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let tried = if this.wait.announced {
            Err(PublishError::Full(()))
        } else {
            this.producer
                .try_publish(&mut this.partition, &mut this.value)
        };
        let done = match tried {
            Err(PublishError::Full(())) => match producer_wait(this, cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(done) => done,
            },
            done => done,
        };
        Poll::Ready(published(
            done,
            this.partition.unwrap_or(0),
            &mut this.value,
        ))
    }
}

/// [`wait_for_room`] for a producer's publish, out of line with it.
#[inline(never)]
fn producer_wait<T: Send + Sync + 'static>(
    this: &mut ProducerPublish<'_, T>,
    cx: &mut Context<'_>,
) -> Poll<Result<u64, PublishError<()>>> {
    let topic = this.producer.topic().clone();
    // Picked by the try that found the log full (a one-partition topic's kept path leaves it).
    let log = topic.partition_log(this.partition.unwrap_or(0));
    let (producer, partition, slot) = (&mut *this.producer, &mut this.partition, &mut this.value);
    let retry = || producer.try_publish(partition, slot);
    wait_for_room(log, topic.config(), &mut this.wait, cx, retry)
}

impl<T: Send + Sync + 'static> Drop for ProducerPublish<'_, T> {
    #[inline]
    fn drop(&mut self) {
        if self.wait.announced {
            let p = self.partition.unwrap_or(0);
            self.producer.topic().partition_log(p).withdraw_blocked();
        }
    }
}
