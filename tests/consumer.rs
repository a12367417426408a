//! Pull consumers: poll, commit, seek, rollback, resume by name, lag and several partitions.

use std::{
    thread,
    time::{Duration, SystemTime},
};

use logbus::{Broker, Error, ReadError, Reset, Start, Topic, TopicConfig};

mod common;
use common::publish_either_side_of_a_time;

fn offsets(batch: logbus::Batch<'_, String>) -> Vec<u64> {
    batch.iter().map(|r| r.offset()).collect()
}

#[test]
fn poll_commit_rollback_replays_uncommitted() {
    // The tour's scenario 3.
    let pay = Topic::<String>::new("pay", TopicConfig::default()).unwrap();
    for v in ["ok", "poison", "ok2"] {
        pay.publish(v.to_string()).unwrap();
    }
    let mut c = pay.consumer("ledger", Start::Earliest).unwrap();
    assert_eq!(offsets(c.poll(2).unwrap()), vec![0, 1]);
    c.commit();
    assert_eq!(c.committed(0).unwrap(), Some(2));
    assert_eq!(offsets(c.poll(5).unwrap()), vec![2]);
    assert_eq!(c.position(0).unwrap(), 3);
    assert_eq!(c.committed(0).unwrap(), Some(2), "not committed");
    c.rollback_to_committed();
    assert_eq!(c.position(0).unwrap(), 2);
    let replay = c.poll(5).unwrap();
    assert_eq!(
        replay.values().map(String::as_str).collect::<Vec<_>>(),
        ["ok2"]
    );
    assert_eq!(c.poll(5).unwrap_err(), ReadError::Empty);
}

#[test]
fn a_consumer_with_the_same_name_resumes_at_the_committed_offset() {
    let t = Topic::<String>::new("t", TopicConfig::default()).unwrap();
    for i in 0..10 {
        t.publish(i.to_string()).unwrap();
    }
    {
        let mut c = t.consumer("app", Start::Earliest).unwrap();
        c.poll(4).unwrap();
        c.commit_offset(0, 3).unwrap();
        c.poll(4).unwrap();
    }
    let mut again = t.consumer("app", Start::Latest).unwrap();
    assert_eq!(
        again.position(0).unwrap(),
        3,
        "committed wins over the start position"
    );
    assert_eq!(offsets(again.poll(1).unwrap()), vec![3]);
    // Another name starts where it is told.
    let other = t.consumer("other", Start::Latest).unwrap();
    assert_eq!(other.position(0).unwrap(), 10);
    assert_eq!(other.committed(0).unwrap(), None);
}

#[test]
fn commit_past_the_position_is_refused() {
    let t = Topic::<String>::new("t", TopicConfig::default()).unwrap();
    t.publish("a".into()).unwrap();
    let mut c = t.consumer("c", Start::Earliest).unwrap();
    assert_eq!(
        c.commit_offset(0, 1).unwrap_err(),
        Error::CommitBeyondPosition {
            partition: 0,
            offset: 1,
            position: 0
        }
    );
    assert_eq!(c.committed(0).unwrap(), None, "nothing changed");
    assert!(matches!(
        c.commit_offset(3, 0),
        Err(Error::NoSuchPartition { .. })
    ));
    assert!(matches!(c.position(3), Err(Error::NoSuchPartition { .. })));
}

#[test]
fn seek_errors_name_the_retained_range() {
    let t =
        Topic::<String>::new("t", TopicConfig::default().segment_size(2).max_records(2)).unwrap();
    for i in 0..10 {
        t.publish(i.to_string()).unwrap();
    }
    let mut c = t.consumer("c", Start::Earliest).unwrap();
    let start = c.position(0).unwrap();
    assert!(start > 0);
    match c.seek(0, 0) {
        Err(Error::OffsetOutOfRange {
            offset: 0,
            start: s,
            end: 10,
        }) => assert_eq!(s, start),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        c.position(0).unwrap(),
        start,
        "a refused seek moves nothing"
    );
    c.seek(0, 9).unwrap();
    assert_eq!(c.poll(1).unwrap().values().next().unwrap(), "9");
    c.seek_to_beginning();
    assert_eq!(c.position(0).unwrap(), start);
    assert_eq!(c.lag(), 10 - start);
    c.seek_to_end();
    assert_eq!(c.lag(), 0);
    assert_eq!(c.poll(1).unwrap_err(), ReadError::Empty);
}

#[test]
fn seek_to_time_moves_every_partition_to_its_first_record_from_then() {
    let t = Topic::<u64>::new("t", TopicConfig::default().partitions(2)).unwrap();
    let before = SystemTime::now() - Duration::from_secs(60);
    let middle = publish_either_side_of_a_time(&t, 10);
    let mut c = t.consumer("c", Start::Earliest).unwrap();
    // Read a little first: the seek moves a consumer wherever it is.
    assert_eq!(c.poll(3).unwrap().len(), 3);
    c.seek_to_time(middle).unwrap();
    // Round-robin: each partition took 5 records of each half.
    assert_eq!(c.positions(), [5, 5]);
    let mut values = Vec::new();
    while let Ok(batch) = c.poll(100) {
        values.extend(batch.values().copied());
    }
    values.sort_unstable();
    assert_eq!(values, (10..20).collect::<Vec<_>>());
    // Before everything: the oldest record; after everything: the end.
    c.seek_to_time(before).unwrap();
    assert_eq!(c.positions(), [0, 0]);
    c.seek_to_time(SystemTime::now() + Duration::from_secs(3600))
        .unwrap();
    assert_eq!(c.positions(), [10, 10]);
    assert_eq!(c.lag(), 0);
    // Committed offsets are the consumer's to move: the seek commits nothing.
    assert_eq!(c.committed(0).unwrap(), None);
}

#[test]
fn seek_to_time_lands_inside_the_retained_range() {
    let t = Topic::<u64>::new("t", TopicConfig::default().segment_size(4).max_records(4)).unwrap();
    let before = SystemTime::now() - Duration::from_secs(60);
    let mut c = t.consumer("c", Start::Earliest).unwrap();
    for i in 0..20 {
        t.publish(i).unwrap();
    }
    let start = t.stats().partitions[0].start;
    assert!(start > 0, "retention trimmed");
    c.seek_to_time(before).unwrap();
    assert_eq!(c.position(0).unwrap(), start);
    assert_eq!(*c.poll(1).unwrap().values().next().unwrap(), start);
}

#[test]
fn seek_to_time_on_a_topic_without_timestamps_moves_nothing() {
    let t = Topic::<u64>::new("t", TopicConfig::default().partitions(2).timestamps(false)).unwrap();
    for i in 0..6 {
        t.publish(i).unwrap();
    }
    let mut c = t.consumer("c", Start::Earliest).unwrap();
    c.seek(1, 2).unwrap();
    assert!(matches!(
        c.seek_to_time(SystemTime::now()),
        Err(Error::InvalidConfig(_))
    ));
    assert_eq!(c.positions(), [0, 2]);
}

#[test]
fn lag_resets_to_earliest_or_latest() {
    for reset in [Reset::Earliest, Reset::Latest] {
        let t = Topic::<String>::new("t", TopicConfig::default().segment_size(4).max_records(4))
            .unwrap();
        let mut c = t.consumer("c", Start::Earliest).unwrap().with_reset(reset);
        for i in 0..20 {
            t.publish(i.to_string()).unwrap();
        }
        let retained_start = t.stats().partitions[0].start;
        match c.poll(1) {
            Err(ReadError::Lagged(n)) => match reset {
                Reset::Earliest => assert_eq!(n, retained_start),
                Reset::Latest => assert_eq!(n, 20),
            },
            other => panic!("expected lag, got {:?}", other.map(|b| b.len())),
        }
        match reset {
            Reset::Earliest => assert_eq!(c.poll(1).unwrap().first_offset(), retained_start),
            Reset::Latest => {
                assert_eq!(c.poll(1).unwrap_err(), ReadError::Empty);
                t.publish("new".into()).unwrap();
                assert_eq!(c.poll(1).unwrap().first_offset(), 20);
            }
        }
    }
}

#[test]
fn a_committed_offset_that_retention_passed_is_reported_as_lag() {
    let t =
        Topic::<String>::new("t", TopicConfig::default().segment_size(4).max_records(4)).unwrap();
    t.publish("0".into()).unwrap();
    let mut c = t.consumer("c", Start::Earliest).unwrap();
    c.commit();
    for i in 1..30 {
        t.publish(i.to_string()).unwrap();
    }
    c.rollback_to_committed();
    assert!(matches!(c.poll(1), Err(ReadError::Lagged(n)) if n > 0));
}

#[test]
fn every_partition_is_read_in_order() {
    let broker = Broker::new();
    let t = broker
        .topic::<String>("multi", TopicConfig::default().partitions(3))
        .unwrap();
    for i in 0..30 {
        t.publish_keyed(&(i % 5), format!("{}:{i}", i % 5)).unwrap();
    }
    let mut c = t.consumer("all", Start::Earliest).unwrap();
    let mut per_key: Vec<Vec<u32>> = vec![Vec::new(); 5];
    let mut total = 0;
    loop {
        match c.poll(4) {
            Ok(batch) => {
                let p = batch.partition();
                let mut last = None;
                for r in batch.iter() {
                    assert_eq!(r.partition(), p);
                    assert!(last.is_none_or(|l| r.offset() == l + 1));
                    last = Some(r.offset());
                    let (k, i) = r.split_once(':').unwrap();
                    per_key[k.parse::<usize>().unwrap()].push(i.parse().unwrap());
                    total += 1;
                }
            }
            Err(ReadError::Empty) => break,
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(total, 30);
    for (k, seen) in per_key.iter().enumerate() {
        let want: Vec<u32> = (0..30).filter(|i| i % 5 == k as u32).collect();
        assert_eq!(seen, &want, "key {k} in order");
    }
    assert_eq!(c.positions().iter().sum::<u64>(), 30);
}

#[test]
fn poll_timeout_waits_on_every_partition() {
    let t = Topic::<String>::new("t", TopicConfig::default().partitions(4)).unwrap();
    let mut c = t.consumer("c", Start::Earliest).unwrap();
    assert_eq!(
        c.poll_timeout(1, Duration::from_millis(20)).unwrap_err(),
        ReadError::Timeout
    );
    // The consumer parks (the default yield budget is short), then a publish to the last partition
    // wakes it.
    let t2 = t.clone();
    let h = thread::spawn(move || {
        thread::sleep(Duration::from_millis(50));
        t2.publish_to(3, "late".into()).unwrap();
    });
    let batch = c.poll_timeout(1, Duration::from_secs(60)).unwrap();
    assert_eq!(batch.partition(), 3);
    assert_eq!(batch.values().next().unwrap(), "late");
    h.join().unwrap();
}

#[test]
fn closed_after_everything_is_read() {
    let t = Topic::<String>::new("t", TopicConfig::default().partitions(2)).unwrap();
    t.publish_to(1, "x".into()).unwrap();
    t.close();
    let mut c = t.consumer("c", Start::Earliest).unwrap();
    assert_eq!(
        offsets(c.poll_timeout(8, Duration::from_secs(5)).unwrap()),
        vec![0]
    );
    assert_eq!(
        c.poll_timeout(8, Duration::from_secs(5)).unwrap_err(),
        ReadError::Closed
    );
    assert_eq!(c.poll(8).unwrap_err(), ReadError::Closed);
}

#[test]
fn invalid_consumer_names_are_refused() {
    let t = Topic::<String>::new("t", TopicConfig::default()).unwrap();
    assert!(matches!(
        t.consumer("", Start::Earliest),
        Err(Error::InvalidName { .. })
    ));
    assert!(matches!(
        t.consumer("a b", Start::Earliest),
        Err(Error::InvalidName { .. })
    ));
    assert!(matches!(
        t.consumer("c", Start::Offset(5)),
        Err(Error::OffsetOutOfRange { .. })
    ));
}

#[test]
fn publishing_to_an_unknown_topic_is_a_clear_error() {
    let broker = Broker::new();
    match broker.publish("nowhere", 5u32) {
        Err(logbus::PublishToError::Target(Error::UnknownTopic(name), v)) => {
            assert_eq!((name.as_str(), v), ("nowhere", 5));
        }
        other => panic!("{other:?}"),
    }
    let err = broker.publish("nowhere", 5u32).unwrap_err();
    assert_eq!(err.to_string(), "unknown topic `nowhere`");
    broker.topic::<u32>("here", TopicConfig::default()).unwrap();
    assert_eq!(broker.publish("here", 6u32).unwrap().offset, 0);
    assert!(matches!(
        broker.publish("here", "wrong type"),
        Err(logbus::PublishToError::Target(
            Error::TypeMismatch { .. },
            "wrong type"
        ))
    ));
}
