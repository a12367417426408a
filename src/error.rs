//! Typed errors. Errors from publishing hand the value back; lag is a value, not a panic.

use std::fmt;

/// Errors from the broker and from topic and reader set-up.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// No topic has this name.
    UnknownTopic(String),
    /// The topic exists with another record type.
    TypeMismatch {
        /// The topic's name.
        topic: String,
        /// The record type asked for.
        requested: &'static str,
        /// The record type the topic was created with.
        actual: &'static str,
    },
    /// The topic exists with another configuration.
    ConfigMismatch(String),
    /// The topic name is not allowed.
    InvalidName {
        /// The name given.
        name: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// The configuration is not valid.
    InvalidConfig(&'static str),
    /// The topic has no such partition.
    NoSuchPartition {
        /// The partition asked for.
        partition: u32,
        /// How many partitions the topic has.
        partitions: u32,
    },
    /// The offset is outside the partition's retained range `[start, end]`.
    OffsetOutOfRange {
        /// The offset asked for.
        offset: u64,
        /// The oldest retained offset.
        start: u64,
        /// The next offset to be published.
        end: u64,
    },
    /// A single-producer topic already has its producer.
    ProducerInUse,
    /// A commit past the consumer's position (it would skip records never handed out).
    CommitBeyondPosition {
        /// The partition.
        partition: u32,
        /// The offset asked to commit.
        offset: u64,
        /// The consumer's position in that partition.
        position: u64,
    },
    /// The topic is closed.
    Closed,
    /// A group already has a member of this name.
    MemberExists(String),
    /// The group member does not own this partition now.
    NotAssigned {
        /// The partition.
        partition: u32,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::UnknownTopic(t) => write!(f, "unknown topic `{t}`"),
            Error::TypeMismatch {
                topic,
                requested,
                actual,
            } => write!(
                f,
                "topic `{topic}` holds records of type `{actual}`, not `{requested}`"
            ),
            Error::ConfigMismatch(t) => write!(f, "topic `{t}` exists with another configuration"),
            Error::InvalidName { name, reason } => {
                write!(f, "invalid topic name {name:?}: {reason}")
            }
            Error::InvalidConfig(why) => write!(f, "invalid topic configuration: {why}"),
            Error::NoSuchPartition {
                partition,
                partitions,
            } => {
                write!(f, "no partition {partition}: the topic has {partitions}")
            }
            Error::OffsetOutOfRange { offset, start, end } => {
                write!(
                    f,
                    "offset {offset} is outside the retained range {start}..={end}"
                )
            }
            Error::ProducerInUse => f.write_str("the single-producer topic already has a producer"),
            Error::CommitBeyondPosition {
                partition,
                offset,
                position,
            } => write!(
                f,
                "cannot commit offset {offset} in partition {partition}: the position is {position}"
            ),
            Error::Closed => f.write_str("the topic is closed"),
            Error::MemberExists(m) => write!(f, "the group already has a member named `{m}`"),
            Error::NotAssigned { partition } => {
                write!(f, "partition {partition} is not assigned to this member")
            }
        }
    }
}

impl std::error::Error for Error {}

/// Why a publish failed. Every variant hands back what was being published (`V` is the value, or
/// the `Vec` of values for a batch), so nothing is lost.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PublishError<V> {
    /// The topic is closed.
    Closed(V),
    /// [`Overflow::Reject`](crate::Overflow::Reject): a reader lags and the topic is at capacity.
    Full(V),
    /// The record (or batch) is larger than the topic's byte retention or its capacity allows.
    TooLarge(V),
    /// A single-producer topic's producer is held by a [`Producer`](crate::Producer) handle.
    Busy(V),
}

impl<V> PublishError<V> {
    /// The value (or values) that were not published.
    pub fn into_inner(self) -> V {
        match self {
            PublishError::Closed(v)
            | PublishError::Full(v)
            | PublishError::TooLarge(v)
            | PublishError::Busy(v) => v,
        }
    }

    pub(crate) fn map<W>(self, f: impl FnOnce(V) -> W) -> PublishError<W> {
        match self {
            PublishError::Closed(v) => PublishError::Closed(f(v)),
            PublishError::Full(v) => PublishError::Full(f(v)),
            PublishError::TooLarge(v) => PublishError::TooLarge(f(v)),
            PublishError::Busy(v) => PublishError::Busy(f(v)),
        }
    }

    fn what(&self) -> &'static str {
        match self {
            PublishError::Closed(_) => "the topic is closed",
            PublishError::Full(_) => "the topic is full (a reader lags)",
            PublishError::TooLarge(_) => "the record is larger than the topic allows",
            PublishError::Busy(_) => "the single producer is held by a Producer handle",
        }
    }
}

impl<V> fmt::Debug for PublishError<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            PublishError::Closed(_) => "Closed",
            PublishError::Full(_) => "Full",
            PublishError::TooLarge(_) => "TooLarge",
            PublishError::Busy(_) => "Busy",
        };
        write!(f, "{name}(..)")
    }
}

impl<V> fmt::Display for PublishError<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.what())
    }
}

impl<V> std::error::Error for PublishError<V> {}

/// Why a read returned no record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadError {
    /// Retention removed `n` records before this reader read them. The reader now stands at the
    /// oldest retained record; the next read continues from there.
    Lagged(u64),
    /// The topic is closed and this reader has read everything published before the close (a
    /// group member: the whole group has, see [`GroupMember::poll`](crate::GroupMember::poll)).
    Closed,
    /// Nothing is ready yet (only from `try_` reads).
    Empty,
    /// Nothing became ready in time (only from `_timeout` reads).
    Timeout,
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Lagged(n) => write!(f, "lagged: {n} records were removed before being read"),
            ReadError::Closed => f.write_str("the topic is closed and fully read"),
            ReadError::Empty => f.write_str("no record is ready"),
            ReadError::Timeout => f.write_str("no record became ready in time"),
        }
    }
}

impl std::error::Error for ReadError {}
