//! Topics: typed, partitioned, cheaply cloned handles; and producers, the fast way to publish.
//!
//! # Orderings
//! - `round_robin`: Relaxed `fetch_add`; it only spreads unkeyed records over partitions, nothing
//!   is published through it.

use std::{collections::HashMap, fmt, hash::Hash, ops::Range, ptr::NonNull, sync::OnceLock};

use crate::{
    broker::{check_name, Broker, BrokerRef},
    config::{Overflow, SizeFn, TopicConfig},
    consumer::Consumer,
    error::{Error, PublishError},
    group::{Group, GroupShared},
    key,
    log::{Kept, KeptLease, Log, Path, Writer},
    reader::{Reader, Start},
    stats::{PartitionStats, ReaderStats, TopicStats},
    subscription::{Subscription, SubscriptionBuilder},
    sync::{lock, Arc, AtomicUsize, CachePadded, Mutex, Ordering},
};

/// Where a record landed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Published {
    /// The partition.
    pub partition: u32,
    /// The record's offset in that partition.
    pub offset: u64,
}

/// Where a batch landed: one partition, a contiguous run of offsets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PublishedBatch {
    /// The partition.
    pub partition: u32,
    /// The offsets, in the order the values were given.
    pub offsets: Range<u64>,
}

pub(crate) struct TopicInner<T: Send + Sync + 'static> {
    name: String,
    config: TopicConfig<T>,
    partitions: Box<[Arc<Log<T>>]>,
    round_robin: AtomicUsize,
    /// Committed offsets by consumer or subscription name, one slot per partition. Touched on
    /// commit and on creating a consumer, never on the hot path; no user code runs under it.
    offsets: Mutex<HashMap<String, Vec<Option<u64>>>>,
    /// The broker that registered the topic, if any.
    broker: OnceLock<BrokerRef>,
    /// Consumer groups by name.
    groups: Mutex<HashMap<String, Arc<GroupShared>>>,
}

/// A named, typed stream of records, split into partitions. Cloning is cheap (one `Arc`).
///
/// Records are shared by every reader on every thread, so `T` must be `Send + Sync`:
///
/// ```compile_fail
/// use std::rc::Rc;
/// use logbus::{Topic, TopicConfig};
/// let topic = Topic::<Rc<u8>>::new("t", TopicConfig::default()); // error: `Rc` is not `Send`
/// ```
///
/// Every reader of a partition receives every record of it, in offset order, at its own pace.
/// Records with the same key go to the same partition, so their order is kept.
///
/// ```
/// use logbus::{Broker, Start, TopicConfig};
/// let broker = Broker::new();
/// let orders = broker.topic::<u64>("orders", TopicConfig::default().partitions(2)).unwrap();
/// let first = orders.publish_keyed(&"alice", 10).unwrap();
/// let again = orders.publish_keyed(&"alice", 20).unwrap();
/// assert_eq!(first.partition, again.partition);
/// assert_eq!(again.offset, first.offset + 1);
/// let mut reader = orders.reader(first.partition, Start::Earliest).unwrap();
/// assert_eq!(*reader.next().unwrap(), 10);
/// assert_eq!(*reader.next().unwrap(), 20);
/// ```
pub struct Topic<T: Send + Sync + 'static> {
    inner: Arc<TopicInner<T>>,
}

impl<T: Send + Sync + 'static> Clone for Topic<T> {
    fn clone(&self) -> Self {
        Topic {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<T: Send + Sync + 'static> fmt::Debug for Topic<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Topic")
            .field("name", &self.inner.name)
            .field("partitions", &self.inner.partitions.len())
            .finish()
    }
}

impl<T: Send + Sync + 'static> Topic<T> {
    /// A topic outside any broker. [`Broker::topic`](crate::Broker::topic) is the usual way; this
    /// one checks the configuration but not the name.
    pub fn new(name: &str, config: TopicConfig<T>) -> Result<Self, Error> {
        config.validate()?;
        let partitions = (0..config.partitions)
            .map(|_p| {
                let log = Log::new(&config);
                #[cfg(feature = "tracing")]
                let log = log.with_label(name, _p);
                Arc::new(log)
            })
            .collect();
        Ok(Topic {
            inner: Arc::new(TopicInner {
                name: name.to_owned(),
                config,
                partitions,
                round_robin: AtomicUsize::new(0),
                offsets: Mutex::new(HashMap::new()),
                broker: OnceLock::new(),
                groups: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// The topic's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Number of partitions.
    pub fn partitions(&self) -> u32 {
        self.inner.partitions.len() as u32
    }

    /// The configuration the topic was created with.
    pub fn config(&self) -> &TopicConfig<T> {
        &self.inner.config
    }

    fn log(&self, partition: u32) -> Result<&Arc<Log<T>>, Error> {
        self.inner
            .partitions
            .get(partition as usize)
            .ok_or(Error::NoSuchPartition {
                partition,
                partitions: self.partitions(),
            })
    }

    /// The round-robin partition for the next keyless publish.
    pub(crate) fn next_partition(&self) -> u32 {
        let n = self.inner.partitions.len();
        if n == 1 {
            return 0;
        }
        // Relaxed: see the module's Orderings.
        (self.inner.round_robin.fetch_add(1, Ordering::Relaxed) % n) as u32
    }

    fn size_of(&self, value: &T) -> u64 {
        match self.inner.partitions[0].size_fn() {
            Some(f) => f(value) as u64,
            None => 0,
        }
    }

    /// Publishes a record (round-robin over partitions) and says where it landed.
    ///
    /// Any thread may call it on a shared topic. Each call looks the partition's segment up (under
    /// an epoch pin where retention may remove segments); on a single-producer topic it also
    /// claims the producer role for the call, and fails with [`PublishError::Busy`] while a
    /// `Producer` holds it. A [`Producer`] keeps its segment between publishes and is the fast
    /// path.
    pub fn publish(&self, value: T) -> Result<Published, PublishError<T>> {
        let partition = self.next_partition();
        self.publish_at(partition, None, value)
    }

    /// Like `publish_at`, but under `Block` fails with `Full` instead of waiting (async publishes,
    /// which wait as tasks; dead letters, whose wait must hear the subscription close).
    pub(crate) fn publish_or_full(
        &self,
        partition: u32,
        value: T,
    ) -> Result<Published, PublishError<T>> {
        let policy = self.inner.partitions[partition as usize].overflow_without_waiting();
        self.publish_under(partition, None, value, policy)
    }

    /// Publishes to `partition`, which the caller checked is in range.
    fn publish_at(
        &self,
        partition: u32,
        key: Option<u64>,
        value: T,
    ) -> Result<Published, PublishError<T>> {
        let policy = self.inner.partitions[partition as usize].overflow();
        self.publish_under(partition, key, value, policy)
    }

    /// Publishes to `partition` under `policy`, without holding a writer (see
    /// `Log::publish_unheld`).
    fn publish_under(
        &self,
        partition: u32,
        key: Option<u64>,
        value: T,
        policy: Overflow,
    ) -> Result<Published, PublishError<T>> {
        let log = &self.inner.partitions[partition as usize];
        // Measured before anything is reserved: the size function is the application's code.
        let size = self.size_of(&value);
        log.publish_unheld(value, key, Some(size), policy)
            .map(|offset| Published { partition, offset })
    }

    /// Publishes a record to one partition. Errors: [`Error::NoSuchPartition`] (with the value
    /// handed back), or the publish errors of [`Topic::publish`].
    pub fn publish_to(&self, partition: u32, value: T) -> Result<Published, PublishToError<T>> {
        if let Err(e) = self.log(partition) {
            return Err(PublishToError::Target(e, value));
        }
        self.publish_at(partition, None, value)
            .map_err(PublishToError::Publish)
    }

    /// Publishes a record to the partition its key hashes to (a stable hash: the same key always
    /// goes to the same partition, so per-key order holds). The key hash is computed before the
    /// record is reserved and is kept with the record ([`Record::key`](crate::Record::key)).
    pub fn publish_keyed<K: Hash + ?Sized>(
        &self,
        key: &K,
        value: T,
    ) -> Result<Published, PublishError<T>> {
        let h = key::hash(key);
        self.publish_at(key::partition(h, self.partitions()), Some(h), value)
    }

    /// Publishes values as one contiguous run in one partition (round-robin). The iterator is
    /// drained before anything is reserved, so a panic in it publishes nothing. On error the values
    /// are handed back.
    pub fn publish_batch<I: IntoIterator<Item = T>>(
        &self,
        values: I,
    ) -> Result<PublishedBatch, PublishError<Vec<T>>> {
        let mut values: Vec<T> = values.into_iter().collect();
        let mut sizes = Vec::new();
        measure(self.inner.partitions[0].size_fn(), &values, &mut sizes);
        let partition = self.next_partition();
        let log = &self.inner.partitions[partition as usize];
        let Ok(mut claimed) = log.claim() else {
            return Err(PublishError::Busy(values));
        };
        let result = log.publish_batch(&mut claimed.w, &mut values, &sizes);
        drop(claimed);
        match result {
            Ok(offsets) => Ok(PublishedBatch { partition, offsets }),
            Err(e) => Err(e.map(|()| values)),
        }
    }

    /// A producer: the fast way to publish from one thread. On a single-producer topic only one
    /// exists at a time ([`Error::ProducerInUse`] otherwise); dropping it lets another be made.
    pub fn producer(&self) -> Result<Producer<T>, Error> {
        let mut writers = Vec::with_capacity(self.inner.partitions.len());
        for log in self.inner.partitions.iter() {
            match log.claim_writer() {
                Ok(w) => writers.push(w),
                Err(e) => {
                    for (log, mut w) in self.inner.partitions.iter().zip(writers) {
                        log.release_writer(&mut w);
                    }
                    return Err(e);
                }
            }
        }
        // One partition: its path, which `publish` may take without picking a partition.
        let direct = match &self.inner.partitions[..] {
            [log] => Some(log.path()),
            _ => None,
        };
        // A topic has at least one partition (`TopicConfig` refuses zero).
        let first = CachePadded::new((self.inner.partitions[0].clone(), writers.remove(0)));
        let rest = self.inner.partitions[1..]
            .iter()
            .cloned()
            .zip(writers)
            .map(CachePadded::new)
            .collect();
        let inner = Inner {
            topic: self.clone(),
            first,
            rest,
            size_of: self.inner.partitions[0].size_fn().cloned(),
            next: 0,
            buffer: Vec::new(),
            sizes: Vec::new(),
        };
        Ok(Producer::new(inner, direct))
    }

    /// Starts a push subscription from `start` (or from what is committed under `name`) with
    /// default settings; see [`Topic::subscription`] for the rest.
    pub fn subscribe<E, H>(
        &self,
        name: &str,
        start: Start,
        handler: H,
    ) -> Result<Subscription<T>, Error>
    where
        T: Clone,
        E: fmt::Display,
        H: FnMut(&crate::Record<'_, T>) -> Result<(), E> + Send + 'static,
    {
        self.subscription(name).start(start).handler(handler)
    }

    /// Configures a push subscription: a thread of its own runs a handler for every record, with
    /// retries, backoff, dead letters, filters and (in ack mode) acknowledgements. The thread is
    /// started by the one that subscribes and inherits its CPU affinity: subscribe from a thread
    /// that is not pinned to a publisher's core, unless the handler should share it.
    pub fn subscription(&self, name: &str) -> SubscriptionBuilder<T>
    where
        T: Clone,
    {
        SubscriptionBuilder::new(self.clone(), name)
    }

    /// The consumer group `name` of this topic (created on first use). Its members share the
    /// partitions; every group sees every record. Errors: [`Error::InvalidName`].
    ///
    /// ```
    /// use logbus::{Broker, TopicConfig};
    /// let topic = Broker::new().topic::<u32>("jobs", TopicConfig::default().partitions(4)).unwrap();
    /// let group = topic.group("workers").unwrap();
    /// let a = group.join("a").unwrap();
    /// assert_eq!(a.assignment(), [0, 1, 2, 3]);
    /// let b = group.join("b").unwrap(); // b waits until a hands partitions 2 and 3 over
    /// assert!(b.assignment().is_empty());
    /// ```
    pub fn group(&self, name: &str) -> Result<Group<T>, Error> {
        check_name(name)?;
        let mut groups = lock(&self.inner.groups);
        let shared = groups
            .entry(name.to_owned())
            .or_insert_with(|| Arc::new(GroupShared::new(name, self.partitions())));
        Ok(Group::new(self.clone(), Arc::clone(shared)))
    }

    /// A named pull consumer of every partition. If offsets are committed under `name`, it resumes
    /// there; otherwise it starts at `start`. Errors: [`Error::InvalidName`], and
    /// [`Error::OffsetOutOfRange`] for an offset start outside a partition's retained range.
    pub fn consumer(&self, name: &str, start: Start) -> Result<Consumer<T>, Error> {
        Consumer::new(self.clone(), name, start)
    }

    pub(crate) fn set_broker(&self, broker: BrokerRef) {
        let _ = self.inner.broker.set(broker);
    }

    /// The broker that holds this topic, if it is registered in one and still alive.
    pub(crate) fn broker(&self) -> Option<Broker> {
        self.inner.broker.get().and_then(BrokerRef::upgrade)
    }

    pub(crate) fn partition_log(&self, partition: u32) -> &Arc<Log<T>> {
        &self.inner.partitions[partition as usize]
    }

    pub(crate) fn committed_offsets(&self, name: &str) -> Option<Vec<Option<u64>>> {
        lock(&self.inner.offsets).get(name).cloned()
    }

    /// Commits each `(partition, offset)` under `name`, all under one lock. Only a name's first
    /// commit allocates (a commit per poll is the usual loop).
    pub(crate) fn commit_offsets(&self, name: &str, offsets: impl IntoIterator<Item = (u32, u64)>) {
        fn fill(slots: &mut [Option<u64>], offsets: impl IntoIterator<Item = (u32, u64)>) {
            for (partition, offset) in offsets {
                slots[partition as usize] = Some(offset);
            }
        }
        let mut committed = lock(&self.inner.offsets);
        if let Some(slots) = committed.get_mut(name) {
            fill(slots, offsets);
            return;
        }
        let mut slots = vec![None; self.inner.partitions.len()];
        fill(&mut slots, offsets);
        committed.insert(name.to_owned(), slots);
    }

    /// A reader of one partition, starting at `start`.
    pub fn reader(&self, partition: u32, start: Start) -> Result<Reader<T>, Error> {
        let log = self.log(partition)?;
        Reader::new(Arc::clone(log), partition, start)
    }

    /// Closes the topic: publishes fail with `Closed` from now on, readers read what was published
    /// and then get [`ReadError::Closed`](crate::ReadError::Closed). Idempotent.
    ///
    /// On a multi-producer topic the close is exact: a publish either happened before it (and every
    /// reader will read it) or fails. On a single-producer topic, close from the producing thread
    /// (or after dropping its [`Producer`]) for the same guarantee; a publish racing with a close
    /// from another thread may be missed by readers that already saw `Closed`.
    pub fn close(&self) {
        for log in self.inner.partitions.iter() {
            log.close();
        }
    }

    /// Whether the topic is closed.
    pub fn is_closed(&self) -> bool {
        self.inner.partitions[0].is_closed()
    }

    /// A snapshot of every partition and its readers.
    pub fn stats(&self) -> TopicStats {
        let partitions = self
            .inner
            .partitions
            .iter()
            .enumerate()
            .map(|(i, log)| {
                let s = log.stats();
                PartitionStats {
                    partition: i as u32,
                    start: s.start,
                    end: s.end,
                    retained: s.end.saturating_sub(s.start),
                    segments: s.segments,
                    spare_segments: s.spare_segments,
                    bytes: s.bytes,
                    readers: s
                        .readers
                        .iter()
                        .map(|&p| ReaderStats {
                            position: p,
                            lag: s.end.saturating_sub(p),
                        })
                        .collect(),
                    parked_readers: s.parked,
                    wakeups: s.wakeups,
                    parks: s.parks,
                }
            })
            .collect();
        TopicStats {
            name: self.inner.name.clone(),
            closed: self.is_closed(),
            partitions,
        }
    }

    pub(crate) fn same_config(&self, other: &TopicConfig<T>) -> bool {
        self.inner.config == *other
    }
}

/// Why [`Topic::publish_to`] or [`Producer::publish_to`] failed; the value is handed back.
#[derive(Debug)]
pub enum PublishToError<T> {
    /// The target does not exist (no such topic or partition).
    Target(Error, T),
    /// The publish itself failed.
    Publish(PublishError<T>),
}

impl<T> PublishToError<T> {
    /// The value that was not published.
    pub fn into_inner(self) -> T {
        match self {
            PublishToError::Target(_, v) => v,
            PublishToError::Publish(e) => e.into_inner(),
        }
    }
}

impl<T> fmt::Display for PublishToError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PublishToError::Target(e, _) => e.fmt(f),
            PublishToError::Publish(e) => e.fmt(f),
        }
    }
}

impl<T: fmt::Debug> std::error::Error for PublishToError<T> {}

/// One partition's log and a producer's place in it.
type Part<T> = (Arc<Log<T>>, Writer<T>);

/// Each value's size for byte retention, into `sizes` (emptied first; left empty without byte
/// retention, where the log reads a missing size as 0).
fn measure<T>(size_of: Option<&SizeFn<T>>, values: &[T], sizes: &mut Vec<u64>) {
    sizes.clear();
    if let Some(f) = size_of {
        sizes.extend(values.iter().map(|v| f(v) as u64));
    }
}

/// Partition `p`'s log and writer, out of a producer's `first` and `rest` (`p` is in range: the
/// callers picked or checked it).
#[inline(always)]
fn part<'a, T>(
    first: &'a mut CachePadded<Part<T>>,
    rest: &'a mut [CachePadded<Part<T>>],
    p: u32,
) -> &'a mut Part<T> {
    match p.checked_sub(1) {
        None => first,
        Some(i) => &mut rest[i as usize],
    }
}

/// The fast way to publish from one thread: keeps its place in each partition, so a publish is one
/// reservation, one write and one publishing store.
///
/// `Send` but not `Sync`: move it to the publishing thread. Dropping it hands a single-producer
/// topic's producer role back.
///
/// ```compile_fail,E0277
/// fn shared<S: Sync>() {}
/// shared::<logbus::Producer<u64>>(); // one thread publishes through a producer at a time
/// ```
pub struct Producer<T: Send + Sync + 'static> {
    /// A one-partition single-producer topic's place in its log ([`Path::PlainSingle`]), by
    /// value, in the producer's own memory.
    ///
    /// Everything else lives behind `inner`'s pointer, and nothing that is not inlined is ever
    /// handed the producer's address (the methods that do real work are `inner`'s). So where a
    /// caller keeps its producer in a local and publishes in a loop, the compiler may keep this
    /// state in registers from one publish to the next. A producer in memory reloads its next
    /// offset at each publish from the store the last one made, and waits for that store to be
    /// forwarded: a chain from record to record that bounds the whole loop. The same loop in C
    /// on the 2-vCPU AMD EPYC guest: 610–630 M/s with the offset reloaded, 1290–1350 with it in
    /// a register. Logbus's own loop, publishing alone into a ring-like topic, ran 613–642 M/s
    /// in the guest's fast phase before; see `Log::publish_kept` for what it runs now.
    fast: Fast<T>,
    inner: Box<Inner<T>>,
}

/// A producer's state that its one-partition publish reads (see `Producer::fast`).
struct Fast<T> {
    /// One partition, whose log takes [`Path::PlainSingle`] (no time stamps, one producer):
    /// `publish` goes straight to it, through `kept`, without picking a partition or reading the
    /// log's path byte (measured in `Log::publish_plain_single`'s doc). Two flags, not the
    /// `Path`: the compiler tested a `Path` for the many-producer path first, whatever the
    /// source's order or the values, so the single producer's publish made two compares (and
    /// matching an `Option<Path>` made a jump table, an indirect jump per publish).
    plain_single: bool,
    /// One partition, whose log takes [`Path::PlainMulti`]: `publish` goes straight to it.
    plain_multi: bool,
    /// Partition 0's log: `inner.first`'s, which keeps it alive as long as the producer. Kept
    /// here too, so that the publish loop holds it with `kept` rather than reaching it through
    /// `inner` (two dependent loads a publish wherever the compiler reloads them). The
    /// many-producer publish takes it from here too: reached through `inner`, it was loaded
    /// again at every record, since the publish's stores may write anywhere `inner` points
    /// (stop 59: two instructions fewer a record, 31 to 29; many producers, one producer, 1→1 /
    /// 1→2 ×1.05 / ×1.04).
    log: NonNull<Log<T>>,
    /// Partition 0's writer's short-path state: with `plain_single`, the single producer's
    /// ([`Log::take_kept`]), taken again after anything else used that writer; with
    /// `plain_multi`, the lease holder's next offset and segment, beside `lease`
    /// ([`Log::take_kept_lease`]), cleared before anything but `publish` uses that writer and
    /// taken again by the next publish it hands back; unused otherwise.
    kept: Kept<T>,
    /// With `plain_multi`, the rest of the lease holder's short-path state: the lease's
    /// generation and word, and the segment's stamps ([`KeptLease`]).
    ///
    /// One `kept` for both paths, not a whole kept lease of its own beside it: with one, the
    /// caller's loop kept the single producer's state in memory, not registers (stop 58:
    /// single-producer tput 1→1 ×0.55–0.70 in the harness, so the kept lease lived behind
    /// `inner`, reloaded at every record); sharing the three words, each loop keeps its next
    /// offset, segment end and log in registers. Alternating harness binaries on the 2-vCPU EPYC
    /// guest (stop 59, 8 rounds of 3 runs, against the kept lease behind `inner`): many
    /// producers, one producer, tput 1→1 / 1→2 / 1→4 ×1.18 / ×1.21 / ×1.01, two producers ×1.07;
    /// the single producer's ×0.97 / ×1.00 / ×1.01 (its loop now reloads its values' address
    /// from the stack: one register short).
    lease: KeptLease,
}

// SAFETY: `log` is only read through, as a `&Log<T>` (`Log<T>` is `Sync` for these `T`), and the
// `Arc` that keeps it alive moves with the producer (`inner`); `kept` (and `lease`) write
// only into the segment that `inner`'s writer holds (and into the lease word of that log which
// the writer holds), from whichever one thread owns the producer, as the writer itself would.
unsafe impl<T: Send + Sync + 'static> Send for Producer<T> {}

/// Everything of a producer but its fast path's state, behind a pointer (see `Producer::fast`).
struct Inner<T: Send + Sync + 'static> {
    topic: Topic<T>,
    /// Partition 0's log and this producer's place in it. Cache-padded: a writer's words change
    /// as it publishes, and whatever sits next to them (a reader's words, say) would otherwise
    /// share their cache line with another core.
    first: CachePadded<Part<T>>,
    /// The other partitions', likewise (no pointer chase per publish beyond the vector's).
    rest: Vec<CachePadded<Part<T>>>,
    size_of: Option<SizeFn<T>>,
    next: usize,
    buffer: Vec<T>,
    sizes: Vec<u64>,
}

impl<T: Send + Sync + 'static> fmt::Debug for Producer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Producer")
            .field("topic", &self.inner.topic.name())
            .finish_non_exhaustive()
    }
}

impl<T: Send + Sync + 'static> Producer<T> {
    fn new(inner: Inner<T>, direct: Option<Path>) -> Self {
        let mut inner = Box::new(inner);
        let plain_single = direct == Some(Path::PlainSingle);
        // A many-producer topic's `kept` starts cleared: a writer just claimed holds no lease.
        // Its first publish through the writer's path takes it, once there is one.
        let (log, w) = &mut *inner.first;
        let kept = if plain_single {
            log.take_kept(w)
        } else {
            Kept::none()
        };
        let log = NonNull::from(&**log);
        Producer {
            fast: Fast {
                plain_single,
                plain_multi: direct == Some(Path::PlainMulti),
                log,
                kept,
                lease: KeptLease::none(),
            },
            inner,
        }
    }

    /// The topic this producer publishes to.
    #[inline]
    pub fn topic(&self) -> &Topic<T> {
        &self.inner.topic
    }

    /// Runs `f` on `inner` (out of line, handed only `inner`'s address: see `Producer::fast`),
    /// then takes partition 0's kept state again, as `f` may have moved its writer on: a single
    /// producer's at once, a lease holder's by the next publish, which hands the writer back.
    /// A single producer's next offset goes to its writer first ([`Inner::handed`]), so that `f`
    /// need not load the watermark the readers poll (see [`Log::give_back_kept`]).
    ///
    /// Until then the kept state takes no short path: `f` may publish and then unwind (a value's
    /// `Drop` that panics as the log drops retired values), and a caller that catches the panic
    /// and publishes again must not publish from the place `f` left behind.
    #[inline(always)]
    fn on_inner<R>(&mut self, f: impl FnOnce(&mut Inner<T>) -> R) -> R {
        let next = self.fast.kept.next();
        self.fast.kept = Kept::none();
        let r = self.inner.handed(next, f);
        if self.fast.plain_single {
            self.fast.kept = self.inner.take_first_kept();
        }
        r
    }

    /// Publishes a record (round-robin over partitions).
    #[inline(always)]
    pub fn publish(&mut self, value: T) -> Result<Published, PublishError<T>> {
        let fast = &mut self.fast;
        let published = if fast.plain_single {
            // SAFETY: `inner.first` holds the `Arc` that keeps the log alive (see `Fast::log`).
            let log = unsafe { fast.log.as_ref() };
            match log.publish_kept(&mut fast.kept, value) {
                Ok(offset) => Ok(offset),
                Err(value) => self.on_inner(|inner| inner.publish_first_long(value)),
            }
        } else if fast.plain_multi {
            // SAFETY: as above. The log from `fast`, not `first`: the caller's loop may then
            // keep its address in a register instead of loading it through `inner` each publish.
            let log = unsafe { fast.log.as_ref() };
            log.publish_plain_multi_kept(
                &mut self.inner.first.1,
                &mut fast.kept,
                &mut fast.lease,
                value,
            )
        } else {
            // Not `on_inner`: no kept state to take again off this path (`plain_single` is not
            // set), and the stamped logs' publish is out of line already (`Log::publish_stamped`).
            let inner = &mut *self.inner;
            let p = inner.pick();
            return inner.publish_at(p, None, value);
        };
        published.map(|offset| Published {
            partition: 0,
            offset,
        })
    }

    /// Publishes a record to one partition.
    #[inline]
    pub fn publish_to(&mut self, partition: u32, value: T) -> Result<Published, PublishToError<T>> {
        self.on_inner(|inner| inner.publish_to(partition, value))
    }

    /// Publishes a record to the partition of its key (see [`Topic::publish_keyed`]).
    #[inline]
    pub fn publish_keyed<K: Hash + ?Sized>(
        &mut self,
        key: &K,
        value: T,
    ) -> Result<Published, PublishError<T>> {
        let h = key::hash(key);
        self.on_inner(|inner| inner.publish_hashed(h, value))
    }

    /// Publishes values as one contiguous run in one partition (round-robin), with one reservation
    /// and one wake-up check. The iterator is drained into a buffer this producer reuses before
    /// anything is reserved (so a panic in it publishes nothing, and a warm producer allocates
    /// nothing). On a single-producer topic without byte retention the buffer then goes into the
    /// log in one copy per segment it spans, rather than value by value. On error the values are
    /// handed back.
    #[inline]
    pub fn publish_batch<I: IntoIterator<Item = T>>(
        &mut self,
        values: I,
    ) -> Result<PublishedBatch, PublishError<Vec<T>>> {
        self.on_inner(|inner| {
            let p = inner.pick();
            inner.publish_batch_to(p, values)
        })
    }

    /// Publishes copies of `values` as one contiguous run in one partition (round-robin), like
    /// [`Producer::publish_batch`], but straight from the slice: copying `Copy` values runs no
    /// code of yours, so they need no staging buffer and go into the log in one copy per segment
    /// they span (on a single-producer topic without byte retention; value by value otherwise).
    /// Your slice is left as it was, whatever the outcome, so an error carries nothing back.
    ///
    /// ```
    /// use logbus::{Start, Topic, TopicConfig};
    ///
    /// let topic = Topic::<u64>::new("ticks", TopicConfig::default().single_producer()).unwrap();
    /// let mut reader = topic.reader(0, Start::Earliest).unwrap();
    /// let mut producer = topic.producer().unwrap();
    /// let prices = [101, 102, 103];
    /// assert_eq!(producer.publish_slice(&prices).unwrap().offsets, 0..3);
    /// let batch = reader.try_next_batch(10).unwrap();
    /// assert_eq!(batch.values().copied().collect::<Vec<_>>(), prices);
    /// ```
    #[inline]
    pub fn publish_slice(&mut self, values: &[T]) -> Result<PublishedBatch, PublishError<()>>
    where
        T: Copy,
    {
        if self.fast.plain_single {
            // SAFETY: `inner.first` holds the `Arc` that keeps the log alive (see `Fast::log`).
            let log = unsafe { self.fast.log.as_ref() };
            if let Ok(first) = log.publish_kept_copies(&mut self.fast.kept, values) {
                return Ok(PublishedBatch {
                    partition: 0,
                    offsets: first..first + values.len() as u64,
                });
            }
        }
        self.on_inner(|inner| inner.publish_slice(values))
    }
}

#[cfg(feature = "async")]
impl<T: Send + Sync + 'static> Producer<T> {
    /// One try of an async publish (`Producer::publish_async`): publishes the value in `slot` to
    /// `partition`, picking it first if it is `None` (round-robin, as `publish`), and under
    /// `Block` fails with `Full` where `publish` would wait; on failure the value is back in
    /// `slot`. A one-partition single-producer topic takes the kept short path first, as
    /// `publish` does, and leaves `partition` alone (it is 0).
    ///
    /// The outcome is two words, in registers: the caller's future builds its `Published` or
    /// error once, after its fast and slow paths meet. A whole `Result<Published, PublishError<T>>`
    /// from the out-of-line path made the caller's inlined fast path store its result in memory
    /// for the join, and read it back at once, with a wider load than its stores (a stall).
    #[inline(always)]
    pub(crate) fn try_publish(
        &mut self,
        partition: &mut Option<u32>,
        slot: &mut Option<T>,
    ) -> Result<u64, PublishError<()>> {
        let value = slot.take().expect("a value to publish");
        let value = if self.fast.plain_single {
            // SAFETY: `inner.first` holds the `Arc` that keeps the log alive (see `Fast::log`).
            let log = unsafe { self.fast.log.as_ref() };
            match log.publish_kept(&mut self.fast.kept, value) {
                Ok(offset) => return Ok(offset),
                Err(value) => value,
            }
        } else {
            value
        };
        self.on_inner(|inner| inner.try_publish(partition, value, slot))
    }
}

impl<T: Send + Sync + 'static> Inner<T> {
    /// [`Producer::try_publish`] past the kept short path: a log that never waits publishes as
    /// `publish` does, by its short path; one under `Block` by the long path, which says `Full`
    /// instead of waiting.
    #[cfg(feature = "async")]
    #[inline(never)]
    fn try_publish(
        &mut self,
        partition: &mut Option<u32>,
        value: T,
        slot: &mut Option<T>,
    ) -> Result<u64, PublishError<()>> {
        let p = *partition.get_or_insert_with(|| self.pick());
        let (log, w) = part(&mut self.first, &mut self.rest, p);
        let published = if log.overflow() == Overflow::Block {
            log.publish_or_full(w, value)
        } else {
            log.publish(w, value, None)
        };
        published.map_err(|e| e.map(|value| *slot = Some(value)))
    }

    /// Runs `f` after handing partition 0's writer `next`, the next offset from the producer's
    /// kept state, where the producer keeps one (one partition on [`Path::PlainSingle`]; see
    /// [`Log::give_back_kept`]). That is `Fast::plain_single`'s test, made again here from
    /// `inner` so that the caller hands over one word.
    ///
    /// Out of line, so the test and the store are not in the caller's loop: inlined into
    /// `Producer::on_inner`, they left the harness's single-record loop one register short, the
    /// segment's slot base reloaded from the stack every record, and its tput 1→1 ran ×0.83 (8
    /// alternating rounds; 2-vCPU EPYC guest).
    #[inline(never)]
    fn handed<R>(&mut self, next: u64, f: impl FnOnce(&mut Self) -> R) -> R {
        if self.rest.is_empty() {
            let (log, w) = &mut *self.first;
            if log.path() == Path::PlainSingle {
                log.give_back_kept(w, next);
            }
        }
        f(self)
    }

    /// Partition 0's kept state, taken again (see `Producer::on_inner`). Inlined: a few loads
    /// and one store, through `inner`'s address only, after a call that did real work.
    #[inline(always)]
    fn take_first_kept(&mut self) -> Kept<T> {
        let (log, w) = &mut *self.first;
        log.take_kept(w)
    }

    #[inline(always)]
    fn pick(&mut self) -> u32 {
        let n = 1 + self.rest.len();
        if n == 1 {
            return 0; // one partition: nothing to rotate (the common case, kept to one compare)
        }
        let p = self.next;
        self.next = if p + 1 == n { 0 } else { p + 1 };
        p as u32
    }

    #[inline(always)]
    fn publish_at(
        &mut self,
        partition: u32,
        key: Option<u64>,
        value: T,
    ) -> Result<Published, PublishError<T>> {
        let (log, w) = part(&mut self.first, &mut self.rest, partition);
        // No size: the log's long path measures the record when byte retention needs it (the
        // producer holds no claim it could leak if the size function panics).
        log.publish(w, value, key)
            .map(|offset| Published { partition, offset })
    }

    /// The long path of partition 0's kept state.
    #[inline(never)]
    fn publish_first_long(&mut self, value: T) -> Result<u64, PublishError<T>> {
        let (log, w) = &mut *self.first;
        log.publish_long(w, value, None)
    }

    #[inline(never)]
    fn publish_to(&mut self, partition: u32, value: T) -> Result<Published, PublishToError<T>> {
        if let Err(e) = self.topic.log(partition) {
            return Err(PublishToError::Target(e, value));
        }
        self.publish_at(partition, None, value)
            .map_err(PublishToError::Publish)
    }

    #[inline(never)]
    fn publish_hashed(&mut self, h: u64, value: T) -> Result<Published, PublishError<T>> {
        self.publish_at(key::partition(h, self.topic.partitions()), Some(h), value)
    }

    /// Out of line, so its `PublishedBatch` goes back through memory: a caller that copies the
    /// offsets with one 16-byte load waits for them as `Log::publish_run` describes. Inlined
    /// (stop 62, a standalone 1→1 loop keeping every batch's offsets, 2-vCPU EPYC guest) it
    /// measured ×1.06, then ×0.97 and ×0.99 over 7, 5 and 6 alternating rounds: within the
    /// noise, so it stays out of line (see `perf/HISTORY.md`).
    #[inline(never)]
    fn publish_slice(&mut self, values: &[T]) -> Result<PublishedBatch, PublishError<()>>
    where
        T: Copy,
    {
        let partition = self.pick();
        // User code (the size function) runs here, before any reservation (I6).
        measure(self.size_of.as_ref(), values, &mut self.sizes);
        let (log, w) = part(&mut self.first, &mut self.rest, partition);
        let offsets = log.publish_copies(w, values, &self.sizes)?;
        Ok(PublishedBatch { partition, offsets })
    }

    /// Like [`Producer::publish_batch`], into `partition`, which the caller checked is in range.
    fn publish_batch_to<I: IntoIterator<Item = T>>(
        &mut self,
        partition: u32,
        values: I,
    ) -> Result<PublishedBatch, PublishError<Vec<T>>> {
        self.buffer.clear();
        // User code (the iterator, the size function) runs here, before any reservation (I6).
        self.buffer.extend(values);
        measure(self.size_of.as_ref(), &self.buffer, &mut self.sizes);
        let (log, w) = part(&mut self.first, &mut self.rest, partition);
        match log.publish_batch(w, &mut self.buffer, &self.sizes) {
            Ok(offsets) => Ok(PublishedBatch { partition, offsets }),
            Err(e) => Err(e.map(|()| std::mem::take(&mut self.buffer))),
        }
    }
}

impl<T: Send + Sync + 'static> Drop for Inner<T> {
    fn drop(&mut self) {
        // Partition 0's kept state needs no handing back (see `Log::take_kept`), nor its kept
        // lease (the lease's word holds its next offset: see `KeptLease`).
        for part in std::iter::once(&mut self.first).chain(self.rest.iter_mut()) {
            let (log, w) = &mut **part;
            log.release_writer(w);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// What the writer's own paths start from when a single producer's kept state hands its
    /// place back: the kept next offset as the writer's copy (so they need not load the
    /// watermark), which they move on; taken again, the copy is marked stale. Other producers'
    /// writers are left as they are.
    #[test]
    fn a_single_producer_hands_its_next_offset_back_to_the_writer() {
        let config = TopicConfig::default()
            .single_producer()
            .timestamps(false)
            .segment_size(8);
        let topic = Topic::<u64>::new("t", config).unwrap();
        let mut p = topic.producer().unwrap();
        assert!(
            p.fast.plain_single,
            "this test needs membarrier (Linux): the kept path is off without it"
        );
        for v in 0..3 {
            assert_eq!(p.publish(v).unwrap().offset, v);
        }
        assert_eq!(
            p.inner.first.1.next_copy(),
            None,
            "kept in the producer meanwhile"
        );
        let next = p.fast.kept.next();
        assert_eq!(next, 3);
        let (seen, batch) = p.inner.handed(next, |inner| {
            let seen = inner.first.1.next_copy();
            (seen, inner.publish_slice(&[3, 4]))
        });
        assert_eq!(seen, Some(3), "the writer starts from the handed offset");
        assert_eq!(batch.unwrap().offsets, 3..5);
        assert_eq!(
            p.inner.first.1.next_copy(),
            Some(5),
            "and moves its copy on"
        );
        // Taken again, as `on_inner` does: the copy is stale again, the next offset in the
        // producer.
        p.fast.kept = p.inner.take_first_kept();
        assert_eq!(p.publish_slice(&[5, 6, 7]).unwrap().offsets, 5..8);
        assert_eq!(p.inner.first.1.next_copy(), None);
        assert_eq!(p.fast.kept.next(), 8);
        // Across a segment's end, through the long path, and back.
        assert_eq!(p.publish(8).unwrap().offset, 8);
        assert_eq!(p.publish_slice(&[9, 10]).unwrap().offsets, 9..11);
        let mut r = topic.reader(0, Start::Earliest).unwrap();
        let mut got = Vec::new();
        while let Ok(b) = r.try_next_batch(64) {
            got.extend(b.values().copied());
        }
        assert_eq!(got, (0..11).collect::<Vec<_>>());

        // Two partitions: no kept state, and the writer's copy is not touched.
        let config = TopicConfig::default()
            .single_producer()
            .timestamps(false)
            .partitions(2);
        let topic = Topic::<u64>::new("t2", config).unwrap();
        let mut p = topic.producer().unwrap();
        assert!(!p.fast.plain_single);
        let before = p.inner.first.1.next_copy();
        p.inner
            .handed(77, |inner| assert_eq!(inner.first.1.next_copy(), before));
        // Many producers, one partition: the writer's count of its reservations stays.
        let topic = Topic::<u64>::new("t3", TopicConfig::default().timestamps(false)).unwrap();
        let mut p = topic.producer().unwrap();
        assert_eq!(p.publish(0).unwrap().offset, 0);
        let before = p.inner.first.1.next_copy();
        p.inner
            .handed(77, |inner| assert_eq!(inner.first.1.next_copy(), before));
        assert_eq!(p.publish_slice(&[1, 2]).unwrap().offsets, 1..3);
    }

    #[test]
    fn a_lone_producer_on_a_many_producer_topic_publishes_from_its_kept_lease() {
        let config = TopicConfig::default().timestamps(false).segment_size(64);
        let topic = Topic::<u64>::new("t", config).unwrap();
        let mut r = topic.reader(0, Start::Earliest).unwrap();
        let mut p = topic.producer().unwrap();
        assert!(
            p.fast.plain_multi,
            "this test needs membarrier (Linux): the lease is off without it"
        );
        let mut kept = 0;
        for v in 0..10_000 {
            kept += u32::from(p.fast.kept.is_kept());
            assert_eq!(p.publish(v).unwrap().offset, v);
        }
        // The lease comes after 4,096 reservations alone; from then on every publish but a
        // segment's first is from the kept state.
        assert!(
            kept > 5_000,
            "{kept} of 10,000 publishes from the kept lease"
        );
        // Another use of the writer clears it; the next publish takes it again.
        assert_eq!(p.publish_to(0, 10_000).unwrap().offset, 10_000);
        assert!(!p.fast.kept.is_kept(), "cleared by publish_to");
        assert_eq!(p.publish(10_001).unwrap().offset, 10_001);
        assert!(p.fast.kept.is_kept(), "taken again by the next publish");
        // Another publisher ends the lease: the holder's next publish goes through its writer,
        // and nothing is kept until it holds a lease again.
        assert_eq!(topic.publish(20_000).unwrap().offset, 10_002);
        assert_eq!(p.publish(10_003).unwrap().offset, 10_003);
        assert!(!p.fast.kept.is_kept(), "no lease, nothing kept");
        let mut got = Vec::new();
        while let Ok(b) = r.try_next_batch(4096) {
            got.extend(b.values().copied());
        }
        let mut want: Vec<u64> = (0..10_002).collect();
        want.extend([20_000, 10_003]);
        assert_eq!(got, want, "every record once, in offset order");
    }
}
