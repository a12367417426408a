//! The bad-input table: every kind of bad input gets a clear, typed error, hands back what it was
//! given, and leaves the state as it was (checked by comparing snapshots before and after).

use std::time::{Duration, SystemTime};

use logbus::{
    Broker, Error, Overflow, PublishError, PublishToError, Retry, Start, Topic, TopicConfig,
    TopicStats,
};

/// What the state looked like: the broker's topics and every stats snapshot we can take.
#[derive(Debug, PartialEq)]
struct Snapshot {
    topics: Vec<String>,
    stats: TopicStats,
}

fn snapshot(broker: &Broker, topic: &Topic<String>) -> Snapshot {
    Snapshot {
        topics: broker.topics(),
        stats: topic.stats(),
    }
}

fn setup() -> (Broker, Topic<String>) {
    let broker = Broker::new();
    let topic = broker
        .topic::<String>(
            "table",
            TopicConfig::default()
                .partitions(2)
                .max_records(4)
                .overflow(Overflow::Reject)
                .max_bytes(100, |v: &String| v.len()),
        )
        .unwrap();
    topic.publish_to(0, "a".into()).unwrap();
    (broker, topic)
}

fn bad_config(config: TopicConfig<String>) -> Error {
    Broker::new().topic::<String>("c", config).unwrap_err()
}

#[test]
fn every_bad_input_is_a_typed_error_and_changes_nothing() {
    let (broker, topic) = setup();
    let mut reader = topic.reader(0, Start::Earliest).unwrap();
    let before = snapshot(&broker, &topic);
    let mut kinds = 0;
    let mut check = |what: &str, ok: bool| {
        assert!(ok, "bad input not handled as expected: {what}");
        kinds += 1;
    };

    // Names.
    check(
        "empty name",
        matches!(
            broker.topic::<String>("", TopicConfig::default()),
            Err(Error::InvalidName { .. })
        ),
    );
    let long = "n".repeat(250);
    check(
        "name over 249 bytes",
        matches!(
            broker.topic::<String>(&long, TopicConfig::default()),
            Err(Error::InvalidName { .. })
        ),
    );
    check(
        "name with a slash",
        matches!(
            broker.topic::<String>("a/b", TopicConfig::default()),
            Err(Error::InvalidName { .. })
        ),
    );
    check(
        "name `..`",
        matches!(
            broker.topic::<String>("..", TopicConfig::default()),
            Err(Error::InvalidName { .. })
        ),
    );
    check(
        "consumer name with a space",
        matches!(
            topic.consumer("a b", Start::Earliest),
            Err(Error::InvalidName { .. })
        ),
    );
    check(
        "group name with a colon",
        matches!(topic.group("g:1"), Err(Error::InvalidName { .. })),
    );

    // Types and lookups.
    check(
        "wrong record type",
        matches!(broker.get::<u64>("table"), Err(Error::TypeMismatch { .. })),
    );
    check(
        "unknown topic",
        broker.get::<String>("nope").unwrap_err() == Error::UnknownTopic("nope".into()),
    );
    check(
        "same name, other config",
        broker
            .topic::<String>("table", TopicConfig::default())
            .unwrap_err()
            == Error::ConfigMismatch("table".into()),
    );
    check(
        "delete unknown topic",
        broker.delete("nope").unwrap_err() == Error::UnknownTopic("nope".into()),
    );
    match broker.publish("nope", "v".to_string()) {
        Err(PublishToError::Target(Error::UnknownTopic(_), v)) => {
            check("publish to unknown topic hands the value back", v == "v")
        }
        other => panic!("{other:?}"),
    }

    // Configurations.
    check(
        "zero partitions",
        matches!(
            bad_config(TopicConfig::default().partitions(0)),
            Error::InvalidConfig(_)
        ),
    );
    check(
        "segment size not a power of two",
        matches!(
            bad_config(TopicConfig::default().segment_size(1000)),
            Error::InvalidConfig(_)
        ),
    );
    check(
        "segment size too large",
        matches!(
            bad_config(TopicConfig::default().segment_size(1 << 30)),
            Error::InvalidConfig(_)
        ),
    );
    check(
        "zero max_records",
        matches!(
            bad_config(TopicConfig::default().max_records(0)),
            Error::InvalidConfig(_)
        ),
    );
    check(
        "zero max_bytes",
        matches!(
            bad_config(TopicConfig::default().max_bytes(0, |v: &String| v.len())),
            Error::InvalidConfig(_)
        ),
    );
    check(
        "zero max_age",
        matches!(
            bad_config(TopicConfig::default().max_age(Duration::ZERO)),
            Error::InvalidConfig(_)
        ),
    );
    check(
        "Block without a capacity",
        matches!(
            bad_config(TopicConfig::default().overflow(Overflow::Block)),
            Error::InvalidConfig(_)
        ),
    );
    check(
        "max_age without timestamps",
        matches!(
            bad_config(
                TopicConfig::default()
                    .timestamps(false)
                    .max_age(Duration::from_secs(1))
            ),
            Error::InvalidConfig(_)
        ),
    );

    // Positions.
    check(
        "start past the end",
        matches!(
            topic.reader(0, Start::Offset(9)),
            Err(Error::OffsetOutOfRange {
                offset: 9,
                start: 0,
                end: 1
            })
        ),
    );
    check(
        "no such partition",
        matches!(
            topic.reader(7, Start::Earliest),
            Err(Error::NoSuchPartition {
                partition: 7,
                partitions: 2
            })
        ),
    );
    check(
        "seek past the end",
        matches!(
            reader.seek(Start::Offset(5)),
            Err(Error::OffsetOutOfRange { .. })
        ) && reader.position() == 0,
    );
    let mut consumer = topic.consumer("c", Start::Earliest).unwrap();
    check(
        "commit past the position",
        consumer.commit_offset(0, 1)
            == Err(Error::CommitBeyondPosition {
                partition: 0,
                offset: 1,
                position: 0,
            }),
    );
    check(
        "commit of a partition that does not exist",
        matches!(
            consumer.commit_offset(9, 0),
            Err(Error::NoSuchPartition { .. })
        ),
    );
    drop(consumer);

    // Publishing.
    match topic.publish_to(9, "x".into()) {
        Err(PublishToError::Target(Error::NoSuchPartition { .. }, v)) => check(
            "publish to a missing partition hands the value back",
            v == "x",
        ),
        other => panic!("{other:?}"),
    }
    match topic.publish("y".repeat(101)) {
        Err(PublishError::TooLarge(v)) => check("record over the byte limit", v.len() == 101),
        other => panic!("{other:?}"),
    }
    match topic.publish_batch(vec!["b".to_string(); 5]) {
        Err(PublishError::TooLarge(v)) => check("batch over the capacity", v.len() == 5),
        other => panic!("{other:?}"),
    }

    // Subscriptions and groups.
    let zero = topic
        .subscription("s")
        .retry(Retry::default().max_attempts(0))
        .handler(|_| Ok::<_, String>(()));
    check(
        "zero max attempts",
        matches!(zero, Err(Error::InvalidConfig(_))),
    );
    let zero = topic
        .subscription("s")
        .ack_wait(Duration::ZERO)
        .ack_handler(|_| Ok::<_, String>(()));
    check(
        "zero ack wait",
        matches!(zero, Err(Error::InvalidConfig(_))),
    );

    // Time on a topic that keeps none.
    let untimed = Topic::<String>::new("u", TopicConfig::default().timestamps(false)).unwrap();
    check(
        "start at a time on a topic without timestamps",
        matches!(
            untimed.reader(0, Start::Timestamp(SystemTime::now())),
            Err(Error::InvalidConfig(_))
        ),
    );
    let mut untimed_consumer = untimed.consumer("c", Start::Earliest).unwrap();
    check(
        "seek a consumer to a time on a topic without timestamps",
        matches!(
            untimed_consumer.seek_to_time(SystemTime::now()),
            Err(Error::InvalidConfig(_))
        ),
    );

    // Nothing above changed anything.
    assert_eq!(
        snapshot(&broker, &topic),
        before,
        "bad input changed the state"
    );
    assert!(kinds >= 20, "the table covers {kinds} kinds");
}

#[test]
fn a_closed_topic_refuses_everything_and_hands_values_back() {
    let (broker, topic) = setup();
    broker.delete("table").unwrap();
    let before = topic.stats();
    assert!(matches!(topic.publish("late".into()), Err(PublishError::Closed(v)) if v == "late"));
    assert!(
        matches!(topic.publish_batch(vec!["a".into()]), Err(PublishError::Closed(v)) if v == ["a"])
    );
    assert!(
        matches!(topic.publish_keyed("k", "v".into()), Err(PublishError::Closed(v)) if v == "v")
    );
    let mut p = topic.producer().unwrap();
    assert!(matches!(p.publish("p".into()), Err(PublishError::Closed(v)) if v == "p"));
    assert_eq!(topic.stats(), before);
    assert!(broker.topics().is_empty());
}

#[test]
fn huge_timeouts_do_not_overflow() {
    let (_broker, topic) = setup();
    let mut reader = topic.reader(0, Start::Earliest).unwrap();
    assert_eq!(*reader.next_timeout(Duration::MAX).unwrap(), "a");
    let mut consumer = topic.consumer("c", Start::Earliest).unwrap();
    assert_eq!(
        consumer
            .poll_timeout(1, Duration::MAX)
            .unwrap()
            .first_offset(),
        0
    );
}
