//! Snapshots of topics and readers. Taken on demand, never on the hot path.

/// A snapshot of one topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicStats {
    /// The topic's name.
    pub name: String,
    /// Whether the topic is closed.
    pub closed: bool,
    /// One entry per partition.
    pub partitions: Vec<PartitionStats>,
}

/// A snapshot of one partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionStats {
    /// The partition's number.
    pub partition: u32,
    /// The oldest retained offset.
    pub start: u64,
    /// The next offset to be published.
    pub end: u64,
    /// Records retained: `end - start`.
    pub retained: u64,
    /// Segments in the log (including the one installed ahead of need).
    pub segments: u64,
    /// Emptied segments kept for reuse.
    pub spare_segments: u64,
    /// Bytes retained, as counted by the topic's size function (0 without byte retention).
    pub bytes: u64,
    /// Readers attached to the partition.
    pub readers: Vec<ReaderStats>,
    /// How many of them are parked right now.
    pub parked_readers: u64,
    /// How many times a publisher had to wake a parked reader (a futex wake call each). Publishes
    /// that find no reader parked never add to it: they make no system call at all.
    pub wakeups: u64,
    /// How many times a reader went to park here: having found nothing while it polled and
    /// yielded, it announced itself asleep, a heavy barrier each (an interrupt to every other
    /// core running the process). Most parks end with a wake-up; one whose last look before
    /// sleeping finds a record, or whose deadline passes, ends without one.
    pub parks: u64,
}

/// A snapshot of one reader's progress, as last reported by the reader: at each look for new
/// records, which finds up to 256 at a time (or the batch size asked for, if larger), and at the
/// first look that finds nothing after it took some. A reader taking records one at a time
/// reports again when it has taken what the last look found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReaderStats {
    /// The next offset it will read.
    pub position: u64,
    /// Records published that it has not read.
    pub lag: u64,
}
