//! Helpers shared by the integration tests (each test file includes this module).

use std::{
    thread,
    time::{Duration, SystemTime},
};

use logbus::Topic;

/// Publishes `0..n`, then `n..2n`, round-robin over the topic's partitions, with a gap of a few
/// milliseconds (far more than the 100 µs a record's timestamp may be off by) on both sides of
/// the returned time, which splits the two halves.
pub(crate) fn publish_either_side_of_a_time(t: &Topic<u64>, n: u64) -> SystemTime {
    for i in 0..n {
        t.publish(i).unwrap();
    }
    let gap = Duration::from_millis(5);
    thread::sleep(gap);
    let middle = SystemTime::now();
    thread::sleep(gap);
    for i in n..2 * n {
        t.publish(i).unwrap();
    }
    middle
}
