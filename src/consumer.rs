//! Pull consumers: `poll`, `commit`, `seek`, `rollback_to_committed`, resuming by name.
//!
//! A consumer owns one reader per partition; they share one waker, so `poll_timeout` sleeps on all
//! partitions at once (see [`crate::wait`]). Each poll returns records of one partition, in order,
//! and successive polls rotate over the partitions that have records, so none starves.
//!
//! Committed offsets are kept by the topic under the consumer's name: a new consumer with the same
//! name resumes at the committed offsets (a committed offset is the next offset to read, as in
//! Kafka). Committing is explicit.

use std::{
    fmt,
    time::{Duration, Instant, SystemTime},
};

use crate::{
    broker::check_name,
    error::{Error, ReadError},
    log::Waker,
    reader::{resume_position, seek_all_to_time, Batch, Reader, Start},
    sync::Arc,
    topic::Topic,
    wait::{scan, take_rotating, wait_any, Waited},
};

/// Where a consumer goes when retention removed records it had not read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Reset {
    /// Continue at the oldest retained record (the default).
    #[default]
    Earliest,
    /// Skip to the end: only records published from now on.
    Latest,
}

/// A named pull consumer of every partition of a topic.
///
/// ```
/// use logbus::{Broker, Start, TopicConfig};
/// let topic = Broker::new().topic::<u32>("pay", TopicConfig::default()).unwrap();
/// for v in [10, 20, 30] {
///     topic.publish(v).unwrap();
/// }
/// let mut c = topic.consumer("billing", Start::Earliest).unwrap();
/// let batch = c.poll(2).unwrap();
/// assert_eq!(batch.values().copied().collect::<Vec<_>>(), [10, 20]);
/// c.commit();
/// assert_eq!(*c.poll(5).unwrap().iter().next().unwrap(), 30);
/// c.rollback_to_committed();
/// assert_eq!(c.position(0).unwrap(), 2);
/// drop(c);
/// // The same name resumes at the committed offset.
/// let mut again = topic.consumer("billing", Start::Earliest).unwrap();
/// assert_eq!(again.poll(5).unwrap().first_offset(), 2);
/// ```
pub struct Consumer<T: Send + Sync + 'static> {
    topic: Topic<T>,
    name: String,
    readers: Vec<Reader<T>>,
    waker: Arc<Waker>,
    /// The partition the next poll looks at first.
    next: usize,
    /// Where each partition started, for a rollback with nothing committed.
    started: Vec<u64>,
    reset: Reset,
    /// This consumer's wait as a `Stream` across polls (`crate::stream`).
    #[cfg(feature = "async")]
    pub(crate) task_wait: crate::stream::TaskWait,
}

impl<T: Send + Sync + 'static> fmt::Debug for Consumer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumer")
            .field("topic", &self.topic.name())
            .field("name", &self.name)
            .field("positions", &self.positions())
            .finish_non_exhaustive()
    }
}

impl<T: Send + Sync + 'static> Consumer<T> {
    pub(crate) fn new(topic: Topic<T>, name: &str, start: Start) -> Result<Self, Error> {
        check_name(name)?;
        let committed = topic.committed_offsets(name);
        let waker = Waker::new();
        let mut readers = Vec::with_capacity(topic.partitions() as usize);
        let mut started = Vec::with_capacity(readers.capacity());
        for p in 0..topic.partitions() {
            let log = topic.partition_log(p);
            let resume = committed.as_ref().and_then(|c| c[p as usize]);
            let pos = resume_position(log, resume, start)?;
            let mut reader = Reader::at(Arc::clone(log), p, pos, Arc::clone(&waker));
            if resume.is_none() {
                reader.settle_start(start);
            }
            started.push(reader.position());
            readers.push(reader);
        }
        Ok(Consumer {
            topic,
            name: name.to_owned(),
            readers,
            waker,
            next: 0,
            started,
            reset: Reset::Earliest,
            #[cfg(feature = "async")]
            task_wait: crate::stream::TaskWait::default(),
        })
    }

    /// Sets where the consumer goes after lagging (default [`Reset::Earliest`]).
    pub fn with_reset(mut self, reset: Reset) -> Self {
        self.reset = reset;
        self
    }

    /// The consumer's name (its committed offsets are kept under it).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The topic it consumes.
    pub fn topic(&self) -> &Topic<T> {
        &self.topic
    }

    fn reader(&self, partition: u32) -> Result<&Reader<T>, Error> {
        self.readers
            .get(partition as usize)
            .ok_or(Error::NoSuchPartition {
                partition,
                partitions: self.readers.len() as u32,
            })
    }

    /// Up to `max` records of one partition that are ready now, in order (`max == 0` counts as 1).
    /// Errors: [`ReadError::Empty`] when nothing is ready, [`ReadError::Lagged`] when retention
    /// removed records this consumer had not read (it then continues per its [`Reset`] policy),
    /// [`ReadError::Closed`] when the topic is closed and fully read.
    pub fn poll(&mut self, max: usize) -> Result<Batch<'_, T>, ReadError> {
        let max = max.max(1) as u64;
        match scan(&mut self.readers, self.next, max) {
            Ok(Some(i)) => Ok(self.take(i, max)),
            Ok(None) => Err(ReadError::Empty),
            Err((i, e)) => Err(self.on_error(i, e)),
        }
    }

    /// Like [`Consumer::poll`], but waits up to `timeout` for a record ([`ReadError::Timeout`]).
    pub fn poll_timeout(
        &mut self,
        max: usize,
        timeout: Duration,
    ) -> Result<Batch<'_, T>, ReadError> {
        let max = max.max(1) as u64;
        let deadline = Instant::now().checked_add(timeout);
        let wait = self.topic.partition_log(0).wait;
        loop {
            match wait_any(
                &mut self.readers,
                self.next,
                &self.waker,
                wait,
                deadline,
                max,
            ) {
                Ok(Waited::Ready(i)) => return Ok(self.take(i, max)),
                Ok(Waited::TimedOut) => return Err(ReadError::Timeout),
                // Nobody interrupts a consumer's waker; go round again if it ever happens.
                Ok(Waited::Interrupted) => continue,
                Err((i, e)) => return Err(self.on_error(i, e)),
            }
        }
    }

    /// Waits for the next batch; `Ok(None)` when the waker was interrupted (subscriptions).
    pub(crate) fn next_batch_or_interrupt(
        &mut self,
        max: usize,
    ) -> Result<Option<Batch<'_, T>>, ReadError> {
        let max = max.max(1) as u64;
        let wait = self.topic.partition_log(0).wait;
        match wait_any(&mut self.readers, self.next, &self.waker, wait, None, max) {
            Ok(Waited::Ready(i)) => Ok(Some(self.take(i, max))),
            Ok(Waited::TimedOut | Waited::Interrupted) => Ok(None),
            Err((i, e)) => Err(self.on_error(i, e)),
        }
    }

    pub(crate) fn waker(&self) -> Arc<Waker> {
        Arc::clone(&self.waker)
    }

    /// Puts `partition` back at `offset` (records handed out but not processed).
    pub(crate) fn rewind(&mut self, partition: u32, offset: u64) {
        self.readers[partition as usize].reposition(offset);
    }

    /// The reader whose turn it is (async polls' fast path).
    #[cfg(feature = "async")]
    #[inline]
    pub(crate) fn turn(&self) -> Option<(usize, &Reader<T>)> {
        self.readers.get(self.next).map(|r| (self.next, r))
    }

    /// Where the next scan starts (async polls).
    #[cfg(feature = "async")]
    pub(crate) fn rotation(&self) -> usize {
        self.next
    }

    #[cfg(feature = "async")]
    pub(crate) fn readers_mut(&mut self) -> &mut [Reader<T>] {
        &mut self.readers
    }

    #[cfg(feature = "async")]
    pub(crate) fn take_ready(&mut self, i: usize, max: u64) -> Batch<'_, T> {
        self.take(i, max)
    }

    #[cfg(feature = "async")]
    pub(crate) fn lagged_or(&mut self, i: usize, e: ReadError) -> ReadError {
        self.on_error(i, e)
    }

    fn take(&mut self, i: usize, max: u64) -> Batch<'_, T> {
        take_rotating(&mut self.readers, &mut self.next, i, max)
    }

    fn on_error(&mut self, i: usize, e: ReadError) -> ReadError {
        match (e, self.reset) {
            (ReadError::Lagged(n), Reset::Latest) => {
                let r = &mut self.readers[i];
                let end = r.log().end();
                let skipped = end.saturating_sub(r.position());
                r.reposition(end);
                ReadError::Lagged(n + skipped)
            }
            _ => e,
        }
    }

    /// The next offset this consumer will read in `partition`.
    pub fn position(&self, partition: u32) -> Result<u64, Error> {
        Ok(self.reader(partition)?.position())
    }

    /// The next offset of every partition, by partition.
    pub fn positions(&self) -> Vec<u64> {
        self.readers.iter().map(|r| r.position()).collect()
    }

    /// Commits every partition's position: a consumer with this name resumes there.
    pub fn commit(&mut self) {
        self.topic.commit_offsets(
            &self.name,
            self.readers.iter().map(|r| (r.partition(), r.position())),
        );
    }

    /// Commits `offset` (the next offset to read) for `partition`. It must not be past the
    /// position: [`Error::CommitBeyondPosition`] otherwise, and nothing changes.
    pub fn commit_offset(&mut self, partition: u32, offset: u64) -> Result<(), Error> {
        let position = self.position(partition)?;
        if offset > position {
            return Err(Error::CommitBeyondPosition {
                partition,
                offset,
                position,
            });
        }
        self.topic.commit_offsets(&self.name, [(partition, offset)]);
        Ok(())
    }

    /// The committed offset of `partition`, if any.
    pub fn committed(&self, partition: u32) -> Result<Option<u64>, Error> {
        self.reader(partition)?;
        Ok(self
            .topic
            .committed_offsets(&self.name)
            .and_then(|c| c[partition as usize]))
    }

    /// Moves `partition` to `offset`. Outside the retained range: [`Error::OffsetOutOfRange`]
    /// naming the range, and the position stays.
    pub fn seek(&mut self, partition: u32, offset: u64) -> Result<(), Error> {
        self.reader(partition)?;
        self.readers[partition as usize].seek(Start::Offset(offset))
    }

    /// Moves every partition to its oldest retained record.
    pub fn seek_to_beginning(&mut self) {
        for r in &mut self.readers {
            r.seek_earliest();
        }
    }

    /// Moves every partition to its end (only records published from now on).
    pub fn seek_to_end(&mut self) {
        for r in &mut self.readers {
            let end = r.log().end();
            r.reposition(end);
        }
    }

    /// Moves every partition to its first record published at or after `t`, or to its end where
    /// none is: where a consumer starting at [`Start::Timestamp`] would be (replay the last hour,
    /// or skip to a point in time, as Kafka's offsets for times do). A record's timestamp is
    /// within 100 µs of the wall clock, so a partition may land on a record published up to
    /// 100 µs before `t`; it never skips one published after (except within 1 ms of a step of
    /// the wall clock: see [`Record::timestamp`](crate::Record::timestamp)).
    ///
    /// Errors: [`Error::InvalidConfig`] on a topic without timestamps
    /// ([`TopicConfig::timestamps`](crate::TopicConfig::timestamps)); then nothing moves.
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use logbus::{Start, Topic, TopicConfig};
    /// let topic = Topic::<&str>::new("audit", TopicConfig::default()).unwrap();
    /// topic.publish("old").unwrap();
    /// std::thread::sleep(Duration::from_millis(2));
    /// let since = SystemTime::now();
    /// topic.publish("new").unwrap();
    /// let mut c = topic.consumer("replay", Start::Latest).unwrap();
    /// c.seek_to_time(since).unwrap();
    /// assert_eq!(c.poll(10).unwrap().values().copied().collect::<Vec<_>>(), ["new"]);
    /// ```
    pub fn seek_to_time(&mut self, t: SystemTime) -> Result<(), Error> {
        seek_all_to_time(&mut self.readers, t)
    }

    /// Moves every partition back to its committed offset (or, with nothing committed, to where
    /// this consumer started). A committed offset that retention passed is reported as lag by the
    /// next poll.
    pub fn rollback_to_committed(&mut self) {
        let committed = self.topic.committed_offsets(&self.name);
        for (p, r) in self.readers.iter_mut().enumerate() {
            let to = committed
                .as_ref()
                .and_then(|c| c[p])
                .unwrap_or(self.started[p]);
            r.reposition(to.min(r.log().end()));
        }
    }

    /// Records published and not yet read, over all partitions.
    pub fn lag(&self) -> u64 {
        self.readers.iter().map(|r| r.lag()).sum()
    }
}
