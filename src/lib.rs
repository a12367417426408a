//! # logbus
//!
//! An in-process, lock-free publish/subscribe engine: a Kafka-like log that lives inside one
//! program.
//!
//! - A [`Topic`] is a named, typed stream of records, split into partitions. Each partition is an
//!   append-only, segmented log with dense `u64` offsets.
//! - Publishers reserve offsets with one atomic `fetch_add` (none at all on a single-producer
//!   topic), write the slot, then publish it with one Release store. No lock, no allocation per
//!   record (one segment every `2^k` records, reused from a pool once retention trims).
//! - A [`Reader`] owns its cursor and receives every record of its partition, in offset order, at
//!   its own pace, borrowed (`&T`, never cloned). When nothing is ready it polls briefly, yields,
//!   then parks on its own futex word; a publisher wakes only parked readers, and does no wake-up
//!   work at all when none is parked.
//! - Retention (by records, bytes or age) trims whole segments; memory is reclaimed through
//!   crossbeam-epoch. A slow reader never slows the others: by default it is told
//!   [`ReadError::Lagged`] and continues at the oldest retained record; [`Overflow::Block`] makes
//!   publishers wait for it instead, [`Overflow::Reject`] makes them fail with `Full`.
//!
//! ```
//! use std::thread;
//! use logbus::{Broker, ReadError, Start, TopicConfig};
//!
//! let broker = Broker::new();
//! let topic = broker.topic::<u64>("ticks", TopicConfig::default()).unwrap();
//!
//! // Two readers, each sees every record.
//! let readers: Vec<_> = (0..2)
//!     .map(|_| {
//!         let mut reader = topic.reader(0, Start::Earliest).unwrap();
//!         thread::spawn(move || {
//!             let mut sum = 0;
//!             loop {
//!                 match reader.next() {
//!                     Ok(record) => sum += *record,
//!                     Err(ReadError::Closed) => return sum,
//!                     Err(e) => panic!("{e}"),
//!                 }
//!             }
//!         })
//!     })
//!     .collect();
//!
//! let mut producer = topic.producer().unwrap();
//! for i in 1..=100 {
//!     producer.publish(i).unwrap();
//! }
//! topic.close();
//! for r in readers {
//!     assert_eq!(r.join().unwrap(), 5050);
//! }
//! ```
//!
//! ## Lag
//! ```
//! use logbus::{Broker, ReadError, Start, TopicConfig};
//! let topic = Broker::new()
//!     .topic::<u32>("small", TopicConfig::default().segment_size(4).max_records(4))
//!     .unwrap();
//! let mut reader = topic.reader(0, Start::Earliest).unwrap();
//! for i in 0..20 {
//!     topic.publish(i).unwrap();
//! }
//! // Retention removed whole segments the reader had not read.
//! let Err(ReadError::Lagged(n)) = reader.next() else { panic!("expected lag") };
//! assert_eq!(*reader.next().unwrap(), n as u32);
//! ```
//!
//! ## Invariants
//! Tests and loom models are written against these (see `DESIGN.md`):
//! I1 offsets are dense and unique; I2 a reader sees a record only after it is fully written;
//! I3 a reader sees offsets in increasing order and every gap is reported as `Lagged(n)`;
//! I4 every value is dropped exactly once; I5 a parked reader is woken by a publish it waits for,
//! and a publish with nobody parked does no wake-up work; I6 no user code runs under an engine lock
//! or between reserving and publishing.

#![deny(unsafe_op_in_unsafe_fn)]
#![deny(missing_docs)]
#![warn(unreachable_pub, missing_debug_implementations)]

mod broker;
mod clock;
mod config;
mod consumer;
mod error;
mod group;
mod key;
mod log;
mod reader;
mod stats;
#[cfg(feature = "async")]
mod stream;
mod subscription;
mod sync;
mod topic;
mod wait;

pub use broker::{Broker, MAX_NAME_LEN};
pub use config::{
    Overflow, Producers, SizeFn, TopicConfig, WaitStrategy, DEFAULT_SEGMENT_SIZE, MAX_PARTITIONS,
    MAX_SEGMENT_SIZE,
};
pub use consumer::{Consumer, Reset};
pub use error::{Error, PublishError, ReadError};
pub use group::{
    Assignor, Group, GroupError, GroupMember, GroupStats, RangeAssignor, Rebalance,
    RoundRobinAssignor,
};
pub use reader::{Batch, Iter, OwnedRecord, Reader, Record, Start};
pub use stats::{PartitionStats, ReaderStats, TopicStats};
pub use subscription::{
    AckHandle, Backoff, DeadLetter, Delivery, Retry, Subscription, SubscriptionBuilder,
    SubscriptionStats,
};
pub use topic::{Producer, PublishToError, Published, PublishedBatch, Topic};
