//! Readers: a blocking cursor over one partition, handing out borrowed records.
//!
//! A reader owns its position. It keeps one counted reference to the segment it reads, so the
//! `&T` it hands out stays valid until the next call (which needs `&mut self`), even if retention
//! trims that segment meanwhile. It never pins the epoch except for the instant it takes that
//! reference, and never while parked.
//!
//! Waiting follows the topic's [`WaitStrategy`](crate::WaitStrategy): poll at a flat interval, yield,
//! then park on the reader's own futex word (see [`crate::sync`] for the handshake).

use std::{
    fmt,
    time::{Duration, Instant, SystemTime},
};

use crate::{
    clock,
    error::{Error, ReadError},
    log::{segment::SegRef, CursorRef, Log, Waker, STREAMING_RUN, WATCH_AFTER},
    sync::{Arc, CountedWait, ProcessCount},
    wait::{wait_any, Waited},
};

/// Where a reader (or consumer) starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// The oldest retained record.
    Earliest,
    /// The next record to be published (skips everything already published).
    Latest,
    /// This offset; it must lie in the retained range `[start, end]`.
    Offset(u64),
    /// The first record published at or after this time (the end if none is). Record timestamps
    /// are within 100 µs of the wall clock, so this may include a record published up to 100 µs
    /// before; it never skips a later one. (For 1 ms after the wall clock is stepped, stamps are
    /// off by the step: see [`Record::timestamp`].)
    Timestamp(SystemTime),
}

/// Records handed out per refresh when a caller asks for one at a time.
pub(crate) const SCAN: u64 = 256;

/// A blocking cursor over one partition of a topic.
///
/// Records are borrowed: [`Record`] derefs to `&T`, valid until the reader is used again. Nothing is
/// cloned or allocated per record. The borrow checker enforces it: a record cannot be kept across
/// the next read (clone the value if you need it longer).
///
/// ```compile_fail
/// use logbus::{Start, Topic, TopicConfig};
/// let topic = Topic::<String>::new("t", TopicConfig::default()).unwrap();
/// topic.publish("a".into()).unwrap();
/// topic.publish("b".into()).unwrap();
/// let mut reader = topic.reader(0, Start::Earliest).unwrap();
/// let first = reader.next().unwrap();
/// let second = reader.next().unwrap(); // error: `reader` is still borrowed by `first`
/// println!("{} {}", *first, *second);
/// ```
///
/// ```
/// use logbus::{Broker, ReadError, Start, TopicConfig};
/// let broker = Broker::new();
/// let topic = broker.topic::<String>("greetings", TopicConfig::default()).unwrap();
/// let mut reader = topic.reader(0, Start::Earliest).unwrap();
/// topic.publish("hello".to_string()).unwrap();
/// topic.close();
/// assert_eq!(reader.next().unwrap().as_str(), "hello");
/// assert_eq!(reader.next().unwrap_err(), ReadError::Closed);
/// ```
pub struct Reader<T: Send + Sync + 'static> {
    log: Arc<Log<T>>,
    cursor: CursorRef,
    partition: u32,
    /// Next offset to hand out.
    next: u64,
    /// Offsets in `[next, ready)` are published and lie in `seg`.
    ready: u64,
    seg: Option<SegRef<T>>,
    /// How many records the reader took, or has ready, since it last found nothing new, as of the
    /// last refresh that caught up with the producers (0: it found none, or stopped at its limit
    /// or the segment's end). See `wait_any`.
    fed: u64,
    /// The position at the last look that found nothing new, or at the last pause (or where
    /// the reader was placed): where the run that `fed` counts began. A run cut at the limit or
    /// a segment's end is the same stream as the one after it, so the pause after catching up
    /// is as long as the whole.
    caught_up_at: u64,
    /// Whether the log counts this reader as watching its published end between records (see
    /// `Log::watch`): since it last found nothing new there, and until it takes a long run.
    watching: bool,
    /// Looks that found nothing new since the last long run, while not watching (see
    /// `Log::watch`).
    empty_looks: u32,
    /// The position last stored in the cursor, where publishers under `Block` and `Reject` and
    /// the statistics see it (only `report` stores it, so the two agree).
    reported: u64,
    /// When the waiting thread's turn started, in [`clock::now_nanos`]'s terms: its last yield
    /// after a short run, or, alone on its CPU, its once-a-long-turn yield, in a pause or in the
    /// yielding phase (see `wait::pause_after` and `wait::round_end`); a set of readers waited on
    /// together keeps it in its first.
    pub(crate) yielded_at: u64,
    /// Whether the waiting thread's last pause looked before handing its core over and found
    /// records (see `wait::looks_before`): its next hands the core over first. A set of readers
    /// waited on together keeps it in its first.
    pub(crate) looked_before: bool,
    /// What the waiting thread's watched pauses found lately (see `wait::Bursts`); a set of
    /// readers waited on together keeps it in its first.
    pub(crate) bursts: crate::wait::Bursts,
    /// Where the waiting thread is counted among those waiting on each CPU (see
    /// `wait::pause_after`); a set of readers waited on together keeps it in its first (see
    /// `wait::count_once`).
    pub(crate) waits_on: CountedWait,
    /// This reader's wait as a `Stream` across polls: its yielding, its announcement as parked
    /// (see `crate::stream`).
    #[cfg(feature = "async")]
    pub(crate) task_wait: crate::stream::TaskWait,
}

impl<T: Send + Sync + 'static> Reader<T> {
    pub(crate) fn new(log: Arc<Log<T>>, partition: u32, start: Start) -> Result<Self, Error> {
        let pos = resolve(&log, start)?;
        let mut reader = Self::at(log, partition, pos, Waker::new());
        reader.settle_start(start);
        Ok(reader)
    }

    /// Called right after placing a reader by `start`: registering it (with no committed offset),
    /// or moving it back. Retention may have trimmed past its position meanwhile, in a trim that
    /// read where the reader was before (or that it was not there yet). A reader asked for the
    /// earliest record then starts at the new start rather than reporting lag it never had (under
    /// `Block` a seek back made readers lag, found by `tests/stress_kinds.rs`). The start is read
    /// once every such trim has ended (`Log::start_after_trims`); later trims see the position.
    pub(crate) fn settle_start(&mut self, start: Start) {
        if start == Start::Earliest {
            let now = self.log.start_after_trims();
            if now > self.next {
                self.reposition(now);
            }
        }
    }

    /// A reader at `pos` (already resolved) that sleeps on `waker`.
    pub(crate) fn at(log: Arc<Log<T>>, partition: u32, pos: u64, waker: Arc<Waker>) -> Self {
        let cursor = log.register(pos, waker);
        Reader {
            log,
            cursor,
            partition,
            next: pos,
            ready: pos,
            seg: None,
            fed: 0,
            caught_up_at: pos,
            watching: false,
            empty_looks: 0,
            reported: pos,
            yielded_at: 0,
            looked_before: false,
            bursts: crate::wait::Bursts::default(),
            waits_on: CountedWait::new(ProcessCount),
            #[cfg(feature = "async")]
            task_wait: crate::stream::TaskWait::default(),
        }
    }

    /// Where this reader sleeps (shared with the other readers of a consumer).
    #[cfg(any(test, feature = "async"))]
    pub(crate) fn waker(&self) -> &Arc<Waker> {
        &self.cursor.waker
    }

    /// The records from here on, each cloned out of the log, waiting for each; the iteration ends
    /// when the topic is closed and fully read. Lag is an item: `Err(ReadError::Lagged(n))`.
    ///
    /// ```
    /// use logbus::{Start, Topic, TopicConfig};
    /// let topic = Topic::<String>::new("names", TopicConfig::default()).unwrap();
    /// let mut reader = topic.reader(0, Start::Earliest).unwrap();
    /// topic.publish("ada".to_owned()).unwrap();
    /// topic.publish("grace".to_owned()).unwrap();
    /// topic.close();
    /// let names: Vec<String> = reader.iter().map(|r| r.unwrap().value).collect();
    /// assert_eq!(names, ["ada", "grace"]);
    /// ```
    pub fn iter(&mut self) -> Iter<'_, T>
    where
        T: Clone,
    {
        Iter { reader: self }
    }

    pub(crate) fn log(&self) -> &Arc<Log<T>> {
        &self.log
    }

    /// Whether records are ready at the position (looking them up if needed).
    pub(crate) fn poll_ready(&mut self, limit: u64) -> Result<bool, ReadError> {
        if self.next < self.ready {
            return Ok(true);
        }
        self.refresh(limit)
    }

    /// How many records the reader took since it last caught up, as of the last look-up, which
    /// caught up with the producers (0: none, or more may be ready); clears the mark. For a
    /// reader that has taken everything it found and pauses: the next run counts from here.
    pub(crate) fn take_fed(&mut self) -> u64 {
        self.caught_up_at = self.next;
        std::mem::take(&mut self.fed)
    }

    /// Whether a publish is under way at this reader's position (reserved, not yet published).
    pub(crate) fn publish_in_flight(&self) -> bool {
        self.log.reserved_beyond(self.next)
    }

    /// Starts loading the next record's cache line (a hint): for a reader that waited for it,
    /// whose record was just written on the producer's core.
    pub(crate) fn prefetch_next(&self) {
        if let Some((seg, i)) = self.slot_of_position() {
            seg.prefetch_value(i);
        }
    }

    /// The segment held and the position's slot in it, if the position is in that segment.
    #[inline(always)]
    fn slot_of_position(&self) -> Option<(&crate::log::segment::Segment<T>, usize)> {
        let seg = self.seg.as_deref()?;
        let i = self.next.wrapping_sub(seg.base());
        (i < seg.len() as u64).then_some((seg, i as usize))
    }

    /// Where the records looked up so far end (the position, when none are waiting).
    pub(crate) fn ready_end(&self) -> u64 {
        self.ready
    }

    /// Looks up what was published since the last look-up, even with records waiting, and
    /// returns where the records ready now end: for a pausing reader that watches whether the
    /// stream it caught up with goes on (see `wait`).
    ///
    /// A look that finds retention past the position moves nothing and returns the lag as an
    /// error without taking it: the read that follows the pause reports it, exactly. (Until stop
    /// 72 this look took the lag as a read does, moving to the oldest retained record, and the
    /// watch dropped the error: a reader that retention overtook during a watched pause skipped
    /// the records it lost with no `Lagged`, under `DropOldest`.)
    pub(crate) fn look_again(&mut self, limit: u64) -> Result<u64, ReadError> {
        self.refresh_as::<false>(limit)?;
        Ok(self.ready)
    }

    /// Whether a look-up ([`Reader::poll_ready`]) may find records now, by a load or two (see
    /// [`Log::may_be_published`]): for a polling loop that has looked up everything found so
    /// far, and runs the look-up again only once this says yes (see `wait::look_hinted`). A
    /// single producer's look-up inside the segment it holds asks it first too, and ends on a
    /// no (see `refresh_as`).
    #[inline(always)]
    pub(crate) fn may_be_ready(&self) -> bool {
        self.log.may_be_published(self.seg.as_deref(), self.next)
    }

    /// Whether records already looked up are waiting to be taken.
    #[inline]
    pub(crate) fn has_ready(&self) -> bool {
        self.next < self.ready
    }

    /// Stores the position where publishers (Block) and statistics see it, unless it is stored
    /// already: before a park the scan's empty look usually has, and a store of the same value
    /// would only take the cursor's line from the publishers that read it.
    pub(crate) fn publish_position(&mut self) {
        if self.reported != self.next {
            self.report(self.next);
        }
    }

    /// Stores `pos` in the cursor (see `reported`).
    fn report(&mut self, pos: u64) {
        self.reported = pos;
        self.log.moved(&self.cursor, pos);
    }

    /// Moves to `offset` without a range check below the retained range: a position that retention
    /// already passed is reported as `Lagged` by the next read. `offset` must not exceed the end.
    pub(crate) fn reposition(&mut self, offset: u64) {
        let back = offset < self.next;
        self.next = offset;
        self.ready = offset;
        self.caught_up_at = offset;
        self.seg = None;
        self.report(offset);
        if back {
            self.log.reader_moved_back();
        }
    }

    /// The partition this reader reads.
    pub fn partition(&self) -> u32 {
        self.partition
    }

    /// The offset of the next record this reader will hand out.
    pub fn position(&self) -> u64 {
        self.next
    }

    /// Records published but not yet read by this reader.
    pub fn lag(&self) -> u64 {
        self.log.end().saturating_sub(self.next)
    }

    /// Moves the reader. Offsets outside the retained range are refused with
    /// [`Error::OffsetOutOfRange`] and the reader stays where it was. [`Start::Earliest`] lands on
    /// the oldest record retained once the seek is done, even if retention trimmed meanwhile.
    pub fn seek(&mut self, to: Start) -> Result<(), Error> {
        if to == Start::Earliest {
            self.seek_earliest();
            return Ok(());
        }
        let pos = resolve(&self.log, to)?;
        self.reposition(pos);
        Ok(())
    }

    /// Moves to the oldest retained record (see [`Reader::settle_start`]).
    pub(crate) fn seek_earliest(&mut self) {
        let start = self.log.start();
        self.reposition(start);
        self.settle_start(Start::Earliest);
    }

    /// The next record, waiting for it if needed.
    ///
    /// Errors: [`ReadError::Lagged`] once when retention removed records this reader had not read
    /// (it then continues at the oldest retained record), [`ReadError::Closed`] when the topic is
    /// closed and everything published was read.
    // Not `Iterator::next`: a record borrows the reader (a lending cursor), which `Iterator` cannot
    // express without cloning values.
    #[allow(clippy::should_implement_trait)]
    #[inline]
    pub fn next(&mut self) -> Result<Record<'_, T>, ReadError> {
        self.wait_ready(None, SCAN)?;
        Ok(self.take_one())
    }

    /// The next record if one is ready now; [`ReadError::Empty`] otherwise.
    #[inline]
    pub fn try_next(&mut self) -> Result<Record<'_, T>, ReadError> {
        if self.next >= self.ready && !self.refresh(SCAN)? {
            return Err(ReadError::Empty);
        }
        Ok(self.take_one())
    }

    /// The next record, waiting at most `timeout`; [`ReadError::Timeout`] if none came.
    ///
    /// `atomic-wait` has no timed wait, so a reader that must park with a deadline sleeps on the
    /// same futex word through the Linux futex call with a timeout (elsewhere: short sleeps).
    pub fn next_timeout(&mut self, timeout: Duration) -> Result<Record<'_, T>, ReadError> {
        let deadline = Instant::now().checked_add(timeout);
        self.wait_ready(Some(deadline.unwrap_or_else(far_future)), SCAN)?;
        Ok(self.take_one())
    }

    /// Up to `max` contiguous records, waiting for at least one. A batch never spans segments, so it
    /// may hold fewer than `max` even when more are ready. `max == 0` is treated as 1.
    #[inline]
    pub fn next_batch(&mut self, max: usize) -> Result<Batch<'_, T>, ReadError> {
        let max = max.max(1) as u64;
        self.wait_ready(None, max)?;
        Ok(self.take_batch(max))
    }

    /// Like [`Reader::next_batch`], but [`ReadError::Empty`] instead of waiting.
    pub fn try_next_batch(&mut self, max: usize) -> Result<Batch<'_, T>, ReadError> {
        let max = max.max(1) as u64;
        if self.next >= self.ready && !self.refresh(max)? {
            return Err(ReadError::Empty);
        }
        Ok(self.take_batch(max))
    }

    /// Like [`Reader::next_batch`], waiting at most `timeout`.
    pub fn next_batch_timeout(
        &mut self,
        max: usize,
        timeout: Duration,
    ) -> Result<Batch<'_, T>, ReadError> {
        let max = max.max(1) as u64;
        let deadline = Instant::now()
            .checked_add(timeout)
            .unwrap_or_else(far_future);
        self.wait_ready(Some(deadline), max)?;
        Ok(self.take_batch(max))
    }

    #[inline]
    pub(crate) fn take_one(&mut self) -> Record<'_, T> {
        debug_assert!(self.next < self.ready);
        let offset = self.next;
        self.next += 1;
        let seg = self
            .seg
            .as_deref()
            .expect("a ready range implies a segment");
        Record {
            seg,
            index: (offset - seg.base()) as usize,
            offset,
            partition: self.partition,
        }
    }

    pub(crate) fn take_batch(&mut self, max: u64) -> Batch<'_, T> {
        debug_assert!(self.next < self.ready);
        let first = self.next;
        let len = (self.ready - first).min(max);
        self.next += len;
        let seg = self
            .seg
            .as_deref()
            .expect("a ready range implies a segment");
        let from = (first - seg.base()) as usize;
        // A single producer's run was just written on its core, and comes faster than readers
        // sharing a core take it: fetch each page's first lines now (see `prefetch_page_heads`).
        // Many producers, each paying a `fetch_add` per reservation, are slower than their
        // readers, and there it measured ×0.96–0.99 (single-record 2→2, four sets of 4–6 rounds).
        if self.log.single_producer() {
            seg.prefetch_page_heads(from, len as usize);
        }
        Batch {
            seg,
            from,
            len: len as usize,
            first,
            partition: self.partition,
        }
    }

    /// Looks for published records at `next`. `Ok(true)`: `[next, ready)` is non-empty.
    ///
    /// It looks at least [`SCAN`] records ahead whatever the caller takes (`limit`): a consumer
    /// polling one record at a time then takes the next 255 with a compare each, as
    /// [`Reader::next`] does, instead of a look-up each (×1.7 for `Consumer::poll(1)` in the
    /// criterion bench). The position other threads see (`report`) is stored at the start of
    /// each look-up after records were taken, so it trails the reader's by at most what one
    /// look-up found. (Until stop 74 the look-up that found records stored it after the look: a
    /// store and the `Block` check behind it on the way back with a record.)
    fn refresh(&mut self, limit: u64) -> Result<bool, ReadError> {
        self.refresh_as::<true>(limit)
    }

    /// [`Reader::refresh`]; `TAKE_LAG` false leaves a lag where it is (returning it as the error
    /// all the same) for a look that does not hand errors to the caller ([`Reader::look_again`]).
    #[inline(always)]
    fn refresh_as<const TAKE_LAG: bool>(&mut self, limit: u64) -> Result<bool, ReadError> {
        // One producer, the position already stored, and inside the segment held: when the
        // watermark has not moved past it, that load says the look finds nothing, and the rest
        // of the look-up would say the same (no lag: retention never passes the end, which the
        // position is at). A reader polling `try_next` in its own loop then polls a load and the
        // close check, where it ran the whole look-up each time: bursts of one through such a
        // loop, the Disruptor's time over logbus's ~0.84–0.87 → ~0.88–0.90 (scratch, alternating
        // binaries, 8–10 rounds a set). A position past the held segment's end takes the whole
        // look-up, which lets that segment go and takes the next as soon as it is installed.
        // (Without that condition, stop 79, a loom model ran into a state it could not replay;
        // the cause was the models' epoch registration, not this look: see `sync::Epoch`.)
        if self.log.single_producer()
            && self.reported == self.next
            && self.slot_of_position().is_some()
            && !self.may_be_ready()
        {
            return self.found_nothing();
        }
        let limit = limit.max(SCAN);
        let start = self.log.start();
        if self.next < start {
            let lost = start - self.next;
            if !TAKE_LAG {
                return Err(ReadError::Lagged(lost));
            }
            self.next = start;
            self.ready = start;
            self.caught_up_at = start;
            self.seg = None;
            self.report(start);
            return Err(ReadError::Lagged(lost));
        }
        if self.reported != self.next {
            // Records taken since the position was last stored: store it now, before the look,
            // so that a look that finds records hands them over without a store and the
            // `Block` check behind it.
            self.report(self.next);
        }
        let shift = self.log.segment_shift();
        let index = self.next >> shift;
        if self.seg.as_ref().map(|s| s.base() >> shift) != Some(index) {
            self.seg = None;
            self.seg = self.log.acquire(index);
        }
        if let Some(seg) = self.seg.as_deref() {
            let end = self.log.ready_end(seg, self.next, limit);
            if end > self.next {
                // Caught up: the run stopped at what was published, not at `limit` or the
                // segment's end (see `wait_any` for what that changes).
                let cap = (seg.base() + seg.len() as u64).min(self.next.saturating_add(limit));
                self.fed = if end < cap {
                    end.saturating_sub(self.caught_up_at)
                } else {
                    0
                };
                // A long run, or one cut at the limit or the segment's end (`fed` 0: it was
                // behind, or the run's last record closed its segment): streaming, so the empty
                // looks count afresh. Short runs keep the count: a fast paced stream gives only a
                // few empty looks between its records (see `WATCH_AFTER`).
                if self.fed == 0 || self.fed >= STREAMING_RUN {
                    self.empty_looks = 0;
                }
                if self.watching && self.fed >= STREAMING_RUN {
                    // Streaming: it looks once a run now, so the writer may drop its copy.
                    self.log.unwatch();
                    self.watching = false;
                }
                self.ready = end;
                return Ok(true);
            }
        }
        self.found_nothing()
    }

    /// The end of a look-up that found nothing at the position: caught up, counting towards
    /// watching the writer's end, and `Closed` once the log is closed and read to its end.
    #[inline(always)]
    fn found_nothing(&mut self) -> Result<bool, ReadError> {
        self.caught_up_at = self.next;
        if !self.watching {
            // Nothing new, again: it waits at the end and will look again soon, so the writer
            // had better keep its copy.
            self.empty_looks += 1;
            if self.empty_looks >= WATCH_AFTER {
                self.empty_looks = 0;
                self.watching = self.log.watch();
            }
        }
        match self.log.final_end() {
            Some(end) if self.next >= end => Err(ReadError::Closed),
            _ => Ok(false),
        }
    }

    /// Waits until `[next, ready)` is non-empty (see [`crate::wait`]).
    #[inline]
    fn wait_ready(&mut self, deadline: Option<Instant>, limit: u64) -> Result<(), ReadError> {
        if self.next < self.ready {
            return Ok(());
        }
        self.wait_more(deadline, limit)
    }

    /// [`Reader::wait_ready`] once the records already found are taken: out of line, so that
    /// a read of a record found before is a compare and the record's address in the caller.
    #[inline(never)]
    fn wait_more(&mut self, deadline: Option<Instant>, limit: u64) -> Result<(), ReadError> {
        // Right behind the producer: `wait_any` pauses before it looks, unless the pause hands
        // the core to another waiting thread after a short run (see there).
        let behind = self.fed > 0 && self.log.wait.yield_after_batch;
        if !behind && self.refresh(limit)? {
            return Ok(());
        }
        let waker = Arc::clone(&self.cursor.waker);
        let wait = self.log.wait;
        match wait_any(std::slice::from_mut(self), 0, &waker, wait, deadline, limit) {
            Ok(Waited::Ready(_)) => Ok(()),
            // Nobody else holds this reader's waker, so an interrupt cannot happen; if it did,
            // returning early is what a timeout means.
            Ok(Waited::TimedOut | Waited::Interrupted) => Err(ReadError::Timeout),
            Err((_, e)) => Err(e),
        }
    }
}

fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600)
}

/// Where a named reader (consumer, subscription, group member) resumes in a partition: at its
/// committed offset if it has one (one that retention has passed is then reported as lag by the
/// first read), otherwise at `start`.
pub(crate) fn resume_position<T: Send + Sync + 'static>(
    log: &Log<T>,
    committed: Option<u64>,
    start: Start,
) -> Result<u64, Error> {
    match committed {
        Some(offset) => Ok(offset.min(log.end())),
        None => resolve(log, start),
    }
}

/// Moves each reader of a consumer's or group member's set to its first record published at or
/// after `t` (see `Consumer::seek_to_time`). The readers share one topic, so on a topic without
/// timestamps the first one refuses and none moves.
pub(crate) fn seek_all_to_time<T: Send + Sync + 'static>(
    readers: &mut [Reader<T>],
    t: SystemTime,
) -> Result<(), Error> {
    readers
        .iter_mut()
        .try_for_each(|r| r.seek(Start::Timestamp(t)))
}

/// Resolves a start position against a log's retained range.
pub(crate) fn resolve<T: Send + Sync + 'static>(log: &Log<T>, start: Start) -> Result<u64, Error> {
    match start {
        Start::Earliest => Ok(log.start()),
        Start::Latest => Ok(log.end()),
        Start::Offset(o) => {
            let (s, e) = (log.start(), log.end());
            if o < s || o > e {
                Err(Error::OffsetOutOfRange {
                    offset: o,
                    start: s,
                    end: e,
                })
            } else {
                Ok(o)
            }
        }
        Start::Timestamp(_) if !log.has_timestamps() => Err(Error::InvalidConfig(
            "this topic keeps no timestamps (TopicConfig::timestamps(false))",
        )),
        Start::Timestamp(t) => Ok(log.offset_for_time(clock::to_nanos(t))),
    }
}

impl<T: Send + Sync + 'static> Drop for Reader<T> {
    fn drop(&mut self) {
        #[cfg(feature = "async")]
        crate::stream::leave_one(self);
        self.seg = None;
        if self.watching {
            self.log.unwatch();
        }
        self.log.deregister(&self.cursor);
    }
}

impl<T: Send + Sync + 'static> fmt::Debug for Reader<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reader")
            .field("partition", &self.partition)
            .field("position", &self.next)
            .finish_non_exhaustive()
    }
}

/// One record, borrowed from the log. Derefs to the value.
pub struct Record<'a, T> {
    seg: &'a crate::log::segment::Segment<T>,
    index: usize,
    offset: u64,
    partition: u32,
}

impl<'a, T> Record<'a, T> {
    /// Another handle to the same borrowed record. (Not `Clone`: `record.clone()` clones the
    /// value, through `Deref`, as users expect.)
    pub(crate) fn duplicate(&self) -> Record<'a, T> {
        Record {
            seg: self.seg,
            index: self.index,
            offset: self.offset,
            partition: self.partition,
        }
    }

    /// The value.
    #[inline]
    pub fn value(&self) -> &'a T {
        // SAFETY: the reader saw this slot published (Acquire) and holds a reference to the segment
        // for at least `'a` (the borrow of the reader).
        unsafe { self.seg.value(self.index) }
    }

    /// The record's offset in its partition.
    #[inline]
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The partition the record is in.
    #[inline]
    pub fn partition(&self) -> u32 {
        self.partition
    }

    /// When the record was published (wall clock, extrapolated from the CPU's time-stamp counter
    /// between wall-clock reads: within 100 µs, typically well under a microsecond). A step of the
    /// wall clock (NTP stepping it, someone setting it) reaches the stamps within 1 ms, and until
    /// then they are off by the step.
    pub fn timestamp(&self) -> SystemTime {
        // SAFETY: as in `value`.
        clock::from_nanos(unsafe { self.seg.meta(self.index) }.timestamp_nanos())
    }

    /// The stable 64-bit hash of the key the record was published with, if any. (Keys pick the
    /// partition; put the key itself in the value if readers need it.)
    pub fn key(&self) -> Option<u64> {
        // SAFETY: as in `value`.
        unsafe { self.seg.meta(self.index) }.key()
    }
}

impl<T: Clone> Record<'_, T> {
    /// The record with its value cloned out of the log (what iterators and streams hand out).
    #[inline]
    pub fn to_owned_record(&self) -> OwnedRecord<T> {
        // One look-up of the time word for both the timestamp and the key.
        // SAFETY: as in `value`.
        let meta = unsafe { self.seg.meta(self.index) };
        OwnedRecord {
            offset: self.offset,
            partition: self.partition,
            timestamp: clock::from_nanos(meta.timestamp_nanos()),
            key: meta.key(),
            value: self.value().clone(),
        }
    }
}

/// A record whose value was cloned out of the log: what [`Reader::iter`] and the async streams
/// hand out, since an iterator cannot lend borrowed [`Record`]s.
#[derive(Clone, PartialEq, Eq)]
pub struct OwnedRecord<T> {
    /// The record's offset in its partition.
    pub offset: u64,
    /// The partition the record is in.
    pub partition: u32,
    /// When it was published (see [`Record::timestamp`]).
    pub timestamp: SystemTime,
    /// The hash of its key, if it had one (see [`Record::key`]).
    pub key: Option<u64>,
    /// The value.
    pub value: T,
}

impl<T> fmt::Debug for OwnedRecord<T> {
    /// Shows where the record is, not its payload.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnedRecord")
            .field("partition", &self.partition)
            .field("offset", &self.offset)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

/// A blocking iterator over a reader's records (see [`Reader::iter`]).
pub struct Iter<'r, T: Send + Sync + 'static> {
    reader: &'r mut Reader<T>,
}

impl<T: Send + Sync + 'static> fmt::Debug for Iter<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Iter").field(&self.reader).finish()
    }
}

impl<T: Clone + Send + Sync + 'static> Iterator for Iter<'_, T> {
    type Item = Result<OwnedRecord<T>, ReadError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        match self.reader.next() {
            Ok(r) => Some(Ok(r.to_owned_record())),
            Err(ReadError::Closed) => None,
            Err(e) => Some(Err(e)),
        }
    }
}

/// `for record in &mut reader`: the same as [`Reader::iter`].
impl<'r, T: Clone + Send + Sync + 'static> IntoIterator for &'r mut Reader<T> {
    type Item = Result<OwnedRecord<T>, ReadError>;
    type IntoIter = Iter<'r, T>;

    fn into_iter(self) -> Iter<'r, T> {
        self.iter()
    }
}

impl<T> std::ops::Deref for Record<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        self.value()
    }
}

impl<T> fmt::Debug for Record<'_, T> {
    /// Shows where the record is, not its payload (records may carry secrets; print the value
    /// yourself where that is fine).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Record")
            .field("partition", &self.partition)
            .field("offset", &self.offset)
            .finish_non_exhaustive()
    }
}

/// A run of contiguous records from one segment.
pub struct Batch<'a, T> {
    seg: &'a crate::log::segment::Segment<T>,
    from: usize,
    len: usize,
    first: u64,
    partition: u32,
}

impl<'a, T> Batch<'a, T> {
    /// Number of records.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a batch holds at least one record.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The partition the records are in.
    pub fn partition(&self) -> u32 {
        self.partition
    }

    /// Offset of the first record.
    pub fn first_offset(&self) -> u64 {
        self.first
    }

    /// The records, in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = Record<'a, T>> + '_ {
        let (seg, from, first, partition) = (self.seg, self.from, self.first, self.partition);
        (0..self.len).map(move |k| Record {
            seg,
            index: from + k,
            offset: first + k as u64,
            partition,
        })
    }

    /// The values, in order.
    ///
    /// One slice's iterator (outside loom): the loop keeps the values' address in a register.
    /// Indexing the segment per record reloaded it for every record whenever the caller's loop
    /// stored anything (the compiler cannot tell the store from the segment's words): in the
    /// harness's 1→1 reader, whose check stores its count, that was 9 instructions a record
    /// where 7 do.
    pub fn values(&self) -> impl ExactSizeIterator<Item = &'a T> + '_ {
        let seg: &'a crate::log::segment::Segment<T> = self.seg;
        // SAFETY: every slot of the batch was seen published, the batch lies inside one segment,
        // and the reader holds that segment for at least `'a`.
        unsafe { seg.values(self.from, self.len) }
    }
}

impl<T> fmt::Debug for Batch<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Batch")
            .field("partition", &self.partition)
            .field("first_offset", &self.first)
            .field("len", &self.len)
            .finish()
    }
}
