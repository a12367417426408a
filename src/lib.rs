//! # logbus
//!
//! An in-process, lock-free publish/subscribe engine: a Kafka-like log that lives inside one
//! program.
//!
//! - A [`Topic`] is a named, typed stream of records, split into partitions. Each partition is an
//!   append-only, segmented log with dense `u64` offsets.
//! - Publishers reserve offsets with one atomic `fetch_add` (none at all on a single-producer
//!   topic, nor while one producer publishes alone on a many-producer one: it holds the
//!   partition's lease), write the slot, then publish it with one Release store. No lock, no allocation per
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
//! ## Consuming: readers, consumers, subscriptions, groups
//! A [`Reader`] is the raw cursor over one partition. A [`Consumer`] reads every partition and adds
//! Kafka's pull API: `poll`, `commit` (under its name, so a consumer of that name resumes there),
//! `seek`, `rollback_to_committed`. A [`Subscription`] pushes each record to a handler on its own
//! thread with retries, backoff and a dead-letter topic, or in ack mode waits for an ack (and
//! redelivers after a nak or the ack deadline). A [`Group`] shares a topic's partitions among its
//! members: each record goes to one member of each group.
//!
//! ```
//! use logbus::{Broker, Start, TopicConfig};
//! let broker = Broker::new();
//! let topic = broker.topic::<String>("orders", TopicConfig::default()).unwrap();
//! topic.publish("first".into()).unwrap();
//! topic.publish("second".into()).unwrap();
//!
//! let mut consumer = topic.consumer("billing", Start::Earliest).unwrap();
//! let batch = consumer.poll(1).unwrap();
//! assert_eq!(batch.values().next().unwrap(), "first");
//! consumer.commit(); // the next consumer named "billing" starts at offset 1
//! drop(consumer);
//! let again = topic.consumer("billing", Start::Earliest).unwrap();
//! assert_eq!(again.position(0).unwrap(), 1);
//! ```
//!
//! Delivery is at least once (I7): a subscription's committed position passes a record only after
//! the handler succeeded, the record was acked or dead-lettered. Handlers may see a record again
//! (after a nak, a restart, a rebalance), so make them idempotent.
//!
//! ## Close and drop
//! [`Topic::close`] (or [`Broker::delete`]) stops publishing: publishes fail with `Closed` and
//! hand the value back; readers drain what was published, then get [`ReadError::Closed`] (the
//! members of a consumer group together, once the group has read every partition). Dropping
//! a reader or consumer releases its cursor (and any `Block` wait it caused); dropping a
//! [`Subscription`] closes it and joins its thread; values are dropped exactly once (I4), when
//! retention reclaims their segment or the last handle of the topic goes, even where a `Drop`
//! panics (the others are still dropped, and the first panic is raised after them, as a `Vec`
//! does). A reclaimed segment's values are dropped by a publishing thread after one of its
//! publishes, never under the engine's lock or between a reservation and its publish (I6), so a
//! value's `Drop` may publish too. A topic dropped while another thread holds the epoch back for
//! more than ~20 ms (logbus pins crossbeam-epoch's process-wide collector, so a guard the
//! application holds on it counts) leaves the segments still out to the process's one late-drop
//! thread, `logbus-drop`, which drops their values once the epoch lets them go and ends when none
//! is left (a `Drop` that panics there is reported by the panic hook and stops none of the
//! others); only if no thread can be started are they dropped by whichever thread releases the
//! last of them, which may be inside a publish to another topic.
//!
//! ## Feature flags
//! | feature | what it adds |
//! | --- | --- |
//! | `async` | `Reader::next_async`, `Consumer::poll_async`, `GroupMember::poll_async` and `futures_core::Stream` for readers, consumers and group members; `Topic::publish_async`, which waits as a task under `Overflow::Block` (runtime-agnostic, cancel-safe) |
//! | `metrics` | `export_metrics` on topics, consumers, groups and subscriptions (the `metrics` facade; names below) |
//! | `tracing` | `tracing` spans and events for the rare paths (names below) |
//!
//! None is on by default, and none adds work to publishing or reading when it is off.
//!
//! ## Async
//! A task waits like a parked thread: it registers its waker beside the reader's futex word, and a
//! publisher wakes it only if it is waiting. Futures are cancel-safe: a dropped `next_async` takes
//! nothing from the log.
//!
//! ```
//! # #[cfg(feature = "async")]
//! # futures::executor::block_on(async {
//! use futures::StreamExt;
//! use logbus::{Start, Topic, TopicConfig};
//! let topic = Topic::<u64>::new("ticks", TopicConfig::default()).unwrap();
//! let mut reader = topic.reader(0, Start::Earliest).unwrap();
//! topic.publish(1).unwrap();
//! assert_eq!(*reader.next_async().await.unwrap(), 1); // borrowed, no clone
//! topic.publish(2).unwrap();
//! topic.close();
//! let rest: Vec<u64> = reader.map(|r| r.unwrap().value).collect().await; // owned, until closed
//! assert_eq!(rest, [2]);
//! # });
//! ```
//!
//! ## Metrics
//! With the `metrics` feature, `export_metrics` copies a snapshot of the statistics into the
//! `metrics` facade; call it on a cadence (nothing is recorded per record, except the ack latency
//! histogram, which an ack-mode subscription's own thread records as each delivery settles). Names
//! are `logbus_<what>`, counters end in `_total`; every metric has the label `topic`.
//!
//! | metric | kind | more labels | meaning |
//! | --- | --- | --- | --- |
//! | `logbus_published_total` | counter | partition | records ever published (the end offset) |
//! | `logbus_retained_records` | gauge | partition | records retention keeps now |
//! | `logbus_retained_bytes` | gauge | partition | their size (byte retention only) |
//! | `logbus_segments_live` | gauge | partition | segments in the log plus spares in its pool |
//! | `logbus_readers` | gauge | partition | readers attached |
//! | `logbus_parked_readers` | gauge | partition | readers asleep right now |
//! | `logbus_wakeups_total` | counter | partition | wake-ups publishers had to make |
//! | `logbus_parks_total` | counter | partition | times readers went to park |
//! | `logbus_delivered_total` | counter | subscription | records processed (handled, acked, filtered) |
//! | `logbus_failed_attempts_total` | counter | subscription | attempts that failed or were naked |
//! | `logbus_redelivered_total` | counter | subscription | deliveries after the first |
//! | `logbus_dead_lettered_total` | counter | subscription | records sent to the dead-letter topic |
//! | `logbus_lagged_total` | counter | subscription | records retention removed before it read them |
//! | `logbus_subscriber_lag` | gauge | subscription, consumer or group | published, not yet processed |
//! | `logbus_group_members` | gauge | group | members of the group |
//! | `logbus_ack_latency_seconds` | histogram | subscription | delivery to ack |
//!
//! ## Tracing
//! With the `tracing` feature (target `logbus`, never per record; always emitted with no engine lock
//! held): a subscription's thread runs in span `logbus.subscription` (topic, subscription) and logs
//! `subscription started` / `subscription stopped` (info); `attempt failed, retrying` (debug:
//! offset, attempt, error, delay); `dead-lettering a record` (warn: partition, offset, attempts,
//! error); `the dead-letter topic refused a record for good; the subscription stops` (error:
//! partition, offset, why); `group rebalance` (info: topic, group, member, revoked, assigned);
//! `retention trimmed` (debug: topic, partition, start).
//!
//! ## Minimum Rust
//! 1.87 (`rust-version`); CI rejects any newer standard-library API with clippy's
//! `incompatible_msrv` lint. Raising it is a minor-version change, noted in the changelog.
//!
//! ## Invariants
//! Tests and loom models are written against these (see `DESIGN.md`):
//! I1 offsets are dense and unique; I2 a reader sees a record only after it is fully written;
//! I3 a reader sees offsets in increasing order and every gap is reported as `Lagged(n)`;
//! I4 every value is dropped exactly once; I5 a parked reader is woken by a publish it waits for,
//! and a publish with nobody parked does no wake-up work; I6 no user code runs under an engine lock
//! or between reserving and publishing; I7 at least once for subscriptions.

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
#[cfg(feature = "metrics")]
mod metrics;
mod reader;
mod stats;
#[cfg(feature = "async")]
mod stream;
mod subscription;
mod sync;
mod topic;
mod trace;
mod wait;

pub use broker::{Broker, MAX_NAME_LEN};
pub use config::{
    Overflow, Producers, SizeFn, TopicConfig, WaitStrategy, DEFAULT_SEGMENT_SIZE,
    MAX_DEFAULT_SEGMENT_SIZE, MAX_PARTITIONS, MAX_SEGMENT_SIZE,
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
    AckHandle, Backoff, DeadLetter, Delivery, Retry, Stopped, Subscription, SubscriptionBuilder,
    SubscriptionStats,
};
pub use topic::{Producer, PublishToError, Published, PublishedBatch, Topic};

/// Loom only (`--cfg loom`, see `loom-tests/`): whether the topics made from now on, on this
/// thread, take the publish paths of a process whose light barrier is free (Linux's membarrier,
/// which every Linux process has in practice: the single producer's kept place, the short paths
/// without a runtime test) rather than those of a process without it. Both are modelled with
/// `fence(SeqCst)` on both sides of the park/wake handshake, which is what membarrier makes of
/// the light side's compiler fence.
#[cfg(loom)]
#[doc(hidden)]
pub fn loom_free_light_barrier(free: bool) {
    sync::loom_free_light_barrier(free);
}
