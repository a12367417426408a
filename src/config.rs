//! Topic configuration: partitions, segment size, producers, retention, overflow and waiting.

use std::{fmt, sync::Arc, time::Duration};

use crate::error::Error;

/// How many threads may publish to a topic at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Producers {
    /// Any number of producers (the default): offsets are reserved with one `fetch_add`, or,
    /// while one [`Producer`](crate::Producer) publishes alone (4,096 records in a row with
    /// nobody else publishing), with plain stores: it takes the partition's lease, which the next
    /// publish from anywhere else ends (see the README's How it works).
    #[default]
    Multi,
    /// One producer at a time, through one [`Producer`](crate::Producer) handle: offsets are reserved
    /// with no read-modify-write at all and published with a watermark. The fastest path: where
    /// readers have cores of their own, a `Multi` topic's `fetch_add` waits for the lines readers
    /// just read to come back, and even a lone producer holding the lease (above) marks each
    /// publish busy and checks the lease. On a 16-core machine, one producer and two readers
    /// each on a core of its own: about 270 M records/s on a ring-like `Multi` topic against
    /// 600–770 M on a `Single` one; on default topics, 30 M against 26–34 M (see the README).
    Single,
}

/// What a publisher does when a bounded topic has no room because a subscriber lags.
///
/// Room is counted in records: `Block` and `Reject` need [`TopicConfig::max_records`], and a record
/// counts against it until every attached reader has read it, as the reader reports its position:
/// when it next looks for records (see [`ReaderStats`](crate::ReaderStats)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Overflow {
    /// Retention trims old segments whether or not a reader has read them (the default). A reader
    /// that falls behind the retained range is told `Lagged(n)` and continues at the oldest record.
    #[default]
    DropOldest,
    /// The publisher waits (spin, yield, then park) until the slowest attached reader frees room.
    /// A reader that is dropped stops holding publishers back. A publisher that has to wait
    /// resumes once a segment's worth of records fits (at most a quarter of `max_records`), or
    /// when a reader wakes it from a park, rather than at the first free slot: the readers are
    /// the bottleneck then, and checking their positions per record would slow them further.
    ///
    /// With many producers the capacity is a bound each publish checks, not an exact one: a
    /// producer looks for room, then reserves, so producers racing past the same look may
    /// together go beyond `max_records` by up to one publish (or batch) each. Nothing unread is
    /// trimmed for it; the extra records only take segments beyond those allocated up front.
    /// (`Reject` reserves with a compare-exchange and is exact.)
    Block,
    /// The publish fails with [`PublishError::Full`](crate::PublishError::Full) and hands the value
    /// back.
    Reject,
}

/// How a blocked reader (or a publisher blocked by [`Overflow::Block`]) waits.
///
/// It first polls at a flat short interval (`spin_polls` checks, each followed by one CPU spin
/// hint), then yields its time slice for up to `yield_for` (a reader polls `spin_polls / 4` times
/// between yields, a publisher does not), then parks on its own futex word and costs no CPU until a
/// publisher wakes it. With `yield_after_batch`, a reader that has caught up with the producers and
/// taken everything it found pauses before it looks again, yielding for a time in proportion to the
/// run it took since it last caught up (32 ns a record, at most 16 µs; after a run of up to three
/// records, one yield, or a few spin hints when it yielded less than a microsecond ago): readers
/// that share a core take turns, and a reader with a core to itself lets records pile up instead
/// of pulling the producer's cache lines over a few records at a time. A reader whose thread is
/// the only one waiting for records on its CPU (logbus counts its waiting threads by CPU, on Linux)
/// spins through its pauses under 16 µs instead, looking at the published end every 32 ns, and
/// ends a pause as soon as records came, at one or two looks, and then stopped coming (a burst,
/// whole: a producer that waits for what its reader does with each burst waits that much less;
/// records still coming at a third look are a stream, and the pause goes on unwatched; if nothing
/// comes within a microsecond it yields the rest of the pause). At 16 µs it yields, and looks at
/// 1, 2, 4 and 8 µs. After two pauses in a row ended so, it skips its next seven pauses. It polls
/// on through its yielding phase instead of yielding, and yields at least once in 50 µs either
/// way; one that shares its CPU with another such thread skips the polling phase and starts at
/// the yielding one. Where that other thread is the only one and every other reader of the topic
/// partitions it reads has taken the short run it just took, it keeps its core after the run
/// rather than yield, and polls a round before its first yield. So does a publisher blocked by
/// [`Overflow::Block`], which counts itself on its CPU while it polls and yields: the reader it
/// waits for, or another publisher waiting for the same room, may be the thread its polls keep
/// off the core. A reader that has not caught up never yields. While a multi-producer publish is
/// in flight at its position (reserved, not yet published) a reader yields rather than parks:
/// that publisher is only descheduled and will publish as soon as it runs. A blocked publisher
/// lengthens its yielding (doubling it, up to 16 × `yield_for`) while its parks keep ending sooner
/// than that: a park costs the readers, the bottleneck then, a barrier on their cores and a
/// wake-up call; a park that lasts longer puts it back to `yield_for`.
///
/// A task waiting for records (the `async` feature) cannot spin or yield its thread: it yields to
/// its executor instead, for `yield_for` from its first poll that found nothing (each such poll
/// wakes the task itself and returns `Pending`), then parks as a thread does, its task waker
/// beside its futex word. A publishing task blocked by [`Overflow::Block`] does the same before it
/// waits for room. `spin_polls` and `yield_after_batch` do not apply to tasks, nor does a blocked
/// publisher's lengthening of its yielding. A task's wait lasts until it finds records, across
/// futures: one that drops its `next_async` and polls a fresh one (a `select!` whose other branch
/// won) goes on with the same wait, so it still parks once `yield_for` has passed. A task that
/// finds records at every poll yields to its executor once in
/// [`task_budget`](WaitStrategy::task_budget) polls.
///
/// The defaults were measured on a 2-core VM (see the README): polling lands a record paced every
/// 2 µs within ~100 ns; yielding before parking avoids the ~19 µs futex wake-up for records paced up
/// to ~100 µs apart, while an idle reader still goes to sleep within a fraction of a millisecond.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a wait strategy does nothing until a topic config takes it"]
pub struct WaitStrategy {
    pub(crate) spin_polls: u32,
    pub(crate) yield_for: Duration,
    pub(crate) yield_after_batch: bool,
    pub(crate) task_budget: u32,
}

/// tokio's own budget: the operations a task may complete before its resources make it yield.
const TASK_BUDGET: u32 = 128;

impl Default for WaitStrategy {
    fn default() -> Self {
        WaitStrategy {
            spin_polls: 512,
            yield_for: Duration::from_micros(200),
            yield_after_batch: true,
            task_budget: TASK_BUDGET,
        }
    }
}

impl WaitStrategy {
    /// Number of flat polls before yielding (0: go straight to yielding). A reader, or a
    /// publisher blocked by [`Overflow::Block`], whose thread shares its CPU with another waiting
    /// thread goes straight to yielding anyway.
    pub fn spin_polls(mut self, n: u32) -> Self {
        self.spin_polls = n;
        self
    }

    /// How long to keep yielding before parking (zero: park right after polling). A task waiting
    /// for records or for room (the `async` feature) yields to its executor for this long,
    /// counted from its first poll that found none: each such poll wakes the task itself and
    /// returns `Pending`, so the executor runs its other tasks before polling it again; then it
    /// parks.
    pub fn yield_for(mut self, d: Duration) -> Self {
        self.yield_for = d;
        self
    }

    /// Whether a reader that caught up with the producers yields before it looks again (see
    /// [`WaitStrategy`]).
    pub fn yield_after_batch(mut self, yes: bool) -> Self {
        self.yield_after_batch = yes;
        self
    }

    /// How many polls in a row a task (the `async` feature) may complete at once, records found
    /// or an error to report, before its next poll yields to its executor: that poll wakes the
    /// task itself and returns `Pending`, taking nothing, and the one after goes on where it
    /// stopped. So a task reading a backlog (a replay from the earliest offset, a reader that
    /// fell behind) lets the other tasks of its thread run, as tokio's own channels do under its
    /// cooperative budget, whose size, 128, is the default. Each `poll_async` batch counts as
    /// one, and so does a group member's rebalance; any `Pending` starts the count again.
    /// 0: never yield while records are ready (the task keeps its thread until it has caught
    /// up). Threads and `publish_async` are not affected.
    pub fn task_budget(mut self, polls: u32) -> Self {
        self.task_budget = polls;
        self
    }

    /// Park as soon as nothing is ready: lowest CPU use, highest latency. A task's
    /// [`task_budget`](WaitStrategy::task_budget) is the default's.
    pub fn park_at_once() -> Self {
        WaitStrategy {
            spin_polls: 0,
            yield_for: Duration::ZERO,
            yield_after_batch: false,
            task_budget: TASK_BUDGET,
        }
    }

    /// Never park: the default's polling and yielding, kept up however long the topic stays
    /// quiet (`yield_for` without end). Like the Disruptor's `BusySpin`, a reader catches the
    /// first record after a quiet spell as fast as the next one in a stream; a parked reader
    /// pays a futex wake-up there instead (~20–100 µs on the 2-vCPU guest of the README's
    /// Figures, the `burst` scenario's first burst after a pause). A reader whose thread is the
    /// only one waiting on its CPU polls (a spin hint between looks) and yields once in 50 µs, so
    /// it holds a core while the topic is quiet (the `idle` scenario); readers that share a CPU
    /// yield to each other between rounds of polls. A publisher blocked by [`Overflow::Block`]
    /// never parks either, and a task (the `async` feature) yields to its executor until records
    /// come. A deadline (`next_timeout`) still ends a wait.
    pub fn busy_spin() -> Self {
        WaitStrategy::default().yield_for(Duration::MAX)
    }
}

/// The size of a record in bytes, as the user counts it, for byte retention.
pub type SizeFn<T> = Arc<dyn Fn(&T) -> usize + Send + Sync>;

/// The configuration of a topic. Every partition of the topic shares it.
///
/// ```
/// use logbus::{Overflow, TopicConfig};
/// let config = TopicConfig::<u64>::default()
///     .partitions(4)
///     .max_records(1 << 20)
///     .overflow(Overflow::Block);
/// assert_eq!(config.partition_count(), 4);
/// ```
#[must_use = "a config does nothing until a topic is made with it"]
pub struct TopicConfig<T> {
    pub(crate) partitions: u32,
    /// Set by [`TopicConfig::segment_size`]; `None`: derived (see [`TopicConfig::segment_len`]).
    pub(crate) segment_size: Option<usize>,
    pub(crate) producers: Producers,
    pub(crate) max_records: Option<u64>,
    pub(crate) max_bytes: Option<(u64, SizeFn<T>)>,
    pub(crate) max_age: Option<Duration>,
    pub(crate) overflow: Overflow,
    pub(crate) wait: WaitStrategy,
    pub(crate) timestamps: bool,
}

/// Default segment length in slots of a topic without `max_records`, and the least a bounded
/// topic gets by default: a partition allocates two segments up front (the current one and the
/// next), so this keeps an idle partition small (28 KiB for `u64` records with timestamps).
pub const DEFAULT_SEGMENT_SIZE: usize = 1024;

/// The longest default segment of a topic with `max_records` as a retention limit
/// (`max_records / 4`, rounded down to a power of two, within [`DEFAULT_SEGMENT_SIZE`]..=this; a
/// ring's may be longer, see [`TopicConfig::segment_size`]). Entering a segment costs a few
/// cross-core cache-line transfers (its directory entry, reference counts, the pool, the epoch),
/// about 0.8 µs here when a reader follows the producer on the other core, so longer segments
/// pay off on busy bounded topics: a ring-like topic keeping 64 Ki records did 1→1 154 M/s with
/// 1 Ki segments and 188 M/s with 16 Ki ones in one run of `perf/` (batches: 224 vs 345 M/s).
pub const MAX_DEFAULT_SEGMENT_SIZE: usize = 1 << 14;

/// The most bytes of values a ring's default segment holds (see [`TopicConfig::segment_size`]).
///
/// A producer that writes a line a reader still holds in its private cache (it read it on the
/// ring's last lap) waits for the reader's copy to be invalidated, a round trip between cores;
/// one that writes a line that has left both cores' private caches since takes it from the
/// shared cache, with no round trip. So a ring whose cycle of memory outgrows the readers'
/// private caches runs faster than one that fits. Until stop 71 a ring-like topic of 65,536 `u64`
/// had segments of a quarter of that (16,384 slots, 128 KiB of values), cycling through nine of
/// them (1.15 MiB, about a 2-vCPU EPYC guest's 1 MiB second-level cache); in one segment of
/// 65,536 it cycles through six (3 MiB). Alternating harness binaries on that guest, 6 rounds
/// each: tput 1→1 ×3.38 (2.05–3.76), 1→2 ×2.05 (1.99–2.09), 1→4 ×1.07, batch 1→1 ×1.55
/// (1.47–1.92), every round above 1; batch 1→2 and 1→4, bound by their readers, ×1.01. A
/// segment of 32,768 (seven of them, 1.8 MiB) measured ×1.88 at tput 1→1, and 4,096 and 1,024
/// (672 and 552 KiB) ×0.58 and ×0.50 (8 rounds). A minimal ring outside the crate shows the same
/// with no segments at all: 512 KiB of `u64` slots 222–406 M/s, 4 MiB 567–901. The rule as
/// built, against the quarter (6 rounds each): tput 1→1 ×3.79, 1→2 ×2.08, 1→4 ×1.10, batch 1→1
/// ×1.49; the 2 µs-paced latency alike within the host's noise (`perf/HISTORY.md`, stop 71).
///
/// The bound keeps a ring of large records from cycling through five spare segments of many
/// megabytes each: their cycle outgrows the caches at the quarter already.
const RING_SEGMENT_BYTES: usize = 512 << 10;

/// `n` rounded down to a power of two (`n` at least 1; the callers' are at most 2^19).
fn pow2_floor(n: u64) -> usize {
    1 << (63 - n.leading_zeros())
}

/// The largest segment length accepted (2^24 slots).
pub const MAX_SEGMENT_SIZE: usize = 1 << 24;

/// The most partitions a topic may have.
pub const MAX_PARTITIONS: u32 = 4096;

impl<T> Default for TopicConfig<T> {
    fn default() -> Self {
        TopicConfig {
            partitions: 1,
            segment_size: None,
            producers: Producers::Multi,
            max_records: None,
            max_bytes: None,
            max_age: None,
            overflow: Overflow::DropOldest,
            wait: WaitStrategy::default(),
            timestamps: true,
        }
    }
}

impl<T> Clone for TopicConfig<T> {
    fn clone(&self) -> Self {
        TopicConfig {
            partitions: self.partitions,
            segment_size: self.segment_size,
            producers: self.producers,
            max_records: self.max_records,
            max_bytes: self.max_bytes.as_ref().map(|(n, f)| (*n, Arc::clone(f))),
            max_age: self.max_age,
            overflow: self.overflow,
            wait: self.wait,
            timestamps: self.timestamps,
        }
    }
}

impl<T> fmt::Debug for TopicConfig<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TopicConfig")
            .field("partitions", &self.partitions)
            .field("segment_size", &self.segment_len())
            .field("producers", &self.producers)
            .field("max_records", &self.max_records)
            .field("max_bytes", &self.max_bytes.as_ref().map(|(n, _)| *n))
            .field("max_age", &self.max_age)
            .field("overflow", &self.overflow)
            .field("wait", &self.wait)
            .field("timestamps", &self.timestamps)
            .finish()
    }
}

/// Two configurations are equal when every setting is; size functions are equal when they are the
/// same `Arc` (closures cannot be compared otherwise).
impl<T> PartialEq for TopicConfig<T> {
    fn eq(&self, other: &Self) -> bool {
        let bytes_eq = match (&self.max_bytes, &other.max_bytes) {
            (None, None) => true,
            (Some((a, f)), Some((b, g))) => a == b && Arc::ptr_eq(f, g),
            _ => false,
        };
        self.partitions == other.partitions
            && self.segment_len() == other.segment_len()
            && self.producers == other.producers
            && self.max_records == other.max_records
            && bytes_eq
            && self.max_age == other.max_age
            && self.overflow == other.overflow
            && self.wait == other.wait
            && self.timestamps == other.timestamps
    }
}

impl<T> TopicConfig<T> {
    /// Number of partitions (default 1; at most [`MAX_PARTITIONS`]).
    pub fn partitions(mut self, n: u32) -> Self {
        self.partitions = n;
        self
    }

    /// Slots per segment: a power of two from 2 to [`MAX_SEGMENT_SIZE`]. Retention trims whole
    /// segments. By default [`DEFAULT_SEGMENT_SIZE`]; with [`TopicConfig::max_records`] a quarter
    /// of it (rounded down to a power of two) up to [`MAX_DEFAULT_SEGMENT_SIZE`]; and where
    /// `max_records` is a capacity ([`Overflow::Block`] or [`Overflow::Reject`]: a ring) the whole
    /// capacity in one segment, rounded down to a power of two, as long as its values take at most
    /// 512 KiB (65,536 `u64`s), if that is longer than the quarter.
    ///
    /// Why a ring's segments are that long: the memory a ring cycles through then outgrows a
    /// core's private caches, which is what lets its producer run at full speed (see
    /// [`TopicConfig::max_records`] for the memory it takes).
    pub fn segment_size(mut self, slots: usize) -> Self {
        self.segment_size = Some(slots);
        self
    }

    /// The segment length this config gives: the one set, or the default for its retention.
    pub(crate) fn segment_len(&self) -> usize {
        self.segment_size.unwrap_or_else(|| match self.max_records {
            Some(n) => {
                let quarter = pow2_floor(
                    (n / 4).clamp(DEFAULT_SEGMENT_SIZE as u64, MAX_DEFAULT_SEGMENT_SIZE as u64),
                );
                if self.capacity().is_none() {
                    return quarter; // a retention limit
                }
                let fits = (RING_SEGMENT_BYTES / std::mem::size_of::<T>().max(1)) as u64;
                quarter.max(pow2_floor(n.min(fits).max(1)))
            }
            None => DEFAULT_SEGMENT_SIZE,
        })
    }

    /// `max_records` where it is a capacity, bounding the producers (`Block`, `Reject`: a ring);
    /// `None` where it is a retention limit (`DropOldest`) or not set.
    pub(crate) fn capacity(&self) -> Option<u64> {
        self.max_records
            .filter(|_| self.overflow != Overflow::DropOldest)
    }

    /// One producer at a time ([`Producers::Single`]) or many (the default).
    pub fn producers(mut self, p: Producers) -> Self {
        self.producers = p;
        self
    }

    /// Shorthand for `producers(Producers::Single)`.
    pub fn single_producer(self) -> Self {
        self.producers(Producers::Single)
    }

    /// Keep at least the newest `n` records of each partition and trim whole segments older than
    /// that. Trimming happens when a partition starts a new segment, so between `n` and
    /// `n + 2 * segment_size` records are kept (so up to `1.5 * n` with the default segment size
    /// for large `n`). Also the capacity for `Block`/`Reject`.
    ///
    /// Under [`Overflow::Block`] or [`Overflow::Reject`], where `n` is a capacity, a partition
    /// allocates the segments it cycles through (those `n` records keep, plus five: the one being
    /// written, the one installed ahead and three on their way back to the partition's pool) when
    /// the topic is created, and writes to every page of them, as a ring buffer does; publishing
    /// then allocates no segment and takes no page fault. At most 32 MiB of segments a topic
    /// (shared among its partitions) are allocated that way; beyond that, segments are allocated
    /// as a partition first fills. Under [`Overflow::DropOldest`], where `n` is a retention limit
    /// that a quiet topic may never reach, segments are allocated as the partition fills, as on an
    /// unbounded topic.
    ///
    /// A ring's default segment holds its whole capacity where its values take at most 512 KiB
    /// (see [`TopicConfig::segment_size`]): a ring of `n` small records, `n` a power of two, then
    /// keeps up to `3 * n` and cycles through six segments, `6 * n` slots (3 MiB of values for
    /// 65,536 `u64`s, against 1.15 MiB in nine segments of a quarter). That memory is what lets
    /// its producer run at full speed; a smaller `segment_size` trades it back.
    pub fn max_records(mut self, n: u64) -> Self {
        self.max_records = Some(n);
        self
    }

    /// Trim the oldest segments while a partition holds more than `n` bytes, each record counted
    /// by `size_of` (called before the record is reserved, never inside the engine). A single record
    /// larger than `n` is refused with [`PublishError::TooLarge`](crate::PublishError::TooLarge).
    pub fn max_bytes(
        mut self,
        n: u64,
        size_of: impl Fn(&T) -> usize + Send + Sync + 'static,
    ) -> Self {
        self.max_bytes = Some((n, Arc::new(size_of)));
        self
    }

    /// Trim segments whose newest record is older than `age`, checked whenever a partition starts a
    /// new segment.
    pub fn max_age(mut self, age: Duration) -> Self {
        self.max_age = Some(age);
        self
    }

    /// The slow-subscriber policy (default [`Overflow::DropOldest`]).
    pub fn overflow(mut self, policy: Overflow) -> Self {
        self.overflow = policy;
        self
    }

    /// How blocked readers and publishers wait.
    pub fn wait(mut self, strategy: WaitStrategy) -> Self {
        self.wait = strategy;
        self
    }

    /// Whether records carry the time they were published (default true). Reading the clock is
    /// about half the cost of a single-producer publish on the VM we measure on (~6 ns of ~12 ns),
    /// so a topic that never needs times can turn it off: its records' timestamps are then the
    /// UNIX epoch, and `Start::Timestamp` readers and `max_age` retention are refused. It saves
    /// memory too: a record keeps only its value (and, with many producers, a one-byte stamp)
    /// until a segment sees a keyed record, which needs a 6-byte word a slot for its key flag.
    pub fn timestamps(mut self, on: bool) -> Self {
        self.timestamps = on;
        self
    }

    /// The configured number of partitions.
    pub fn partition_count(&self) -> u32 {
        self.partitions
    }

    pub(crate) fn validate(&self) -> Result<(), Error> {
        let bad = |why: &'static str| Err(Error::InvalidConfig(why));
        if self.partitions == 0 {
            return bad("a topic needs at least one partition");
        }
        if self.partitions > MAX_PARTITIONS {
            return bad("too many partitions (at most 4096)");
        }
        let segment = self.segment_len();
        if !segment.is_power_of_two() || segment < 2 {
            return bad("segment size must be a power of two, at least 2");
        }
        if segment > MAX_SEGMENT_SIZE {
            return bad("segment size too large (at most 2^24 slots)");
        }
        if self.max_records == Some(0) {
            return bad("max_records must be at least 1");
        }
        if let Some((0, _)) = self.max_bytes {
            return bad("max_bytes must be at least 1");
        }
        if self.max_age == Some(Duration::ZERO) {
            return bad("max_age must be more than zero");
        }
        if matches!(self.overflow, Overflow::Block | Overflow::Reject) && self.max_records.is_none()
        {
            return bad("Block and Reject need a capacity: set max_records");
        }
        if !self.timestamps && self.max_age.is_some() {
            return bad("max_age needs timestamps");
        }
        if self.max_records.is_some_and(|n| n > (1 << 62)) {
            return bad("max_records too large");
        }
        Ok(())
    }
}
