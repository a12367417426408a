//! Every error case of the core, typed, and nothing lost.

use logbus::{Broker, Error, Overflow, Producers, PublishError, Start, Topic, TopicConfig};

#[test]
fn invalid_names() {
    let broker = Broker::new();
    let long = "x".repeat(250);
    for name in [
        "",
        ".",
        "..",
        "has space",
        "slash/name",
        "ümlaut",
        long.as_str(),
    ] {
        match broker.topic::<u8>(name, TopicConfig::default()) {
            Err(Error::InvalidName { name: n, .. }) => assert_eq!(n, name),
            other => panic!("{name:?} accepted: {other:?}"),
        }
    }
    let longest = "y".repeat(249);
    for name in ["a", "orders.dlq", "A-b_c.9", longest.as_str()] {
        broker.topic::<u8>(name, TopicConfig::default()).unwrap();
    }
    assert_eq!(broker.topics().len(), 4);
}

#[test]
fn invalid_configs() {
    let broker = Broker::new();
    let cases: Vec<TopicConfig<u8>> = vec![
        TopicConfig::default().partitions(0),
        TopicConfig::default().partitions(5000),
        TopicConfig::default().segment_size(0),
        TopicConfig::default().segment_size(1),
        TopicConfig::default().segment_size(1000),
        TopicConfig::default().segment_size(1 << 25),
        TopicConfig::default().max_records(0),
        TopicConfig::default().max_bytes(0, |_| 1),
        TopicConfig::default().max_age(std::time::Duration::ZERO),
        TopicConfig::default().overflow(Overflow::Block),
        TopicConfig::default().overflow(Overflow::Reject),
    ];
    for config in cases {
        let shown = format!("{config:?}");
        match broker.topic::<u8>("c", config) {
            Err(Error::InvalidConfig(why)) => assert!(!why.is_empty()),
            other => panic!("{shown} accepted: {other:?}"),
        }
    }
    assert!(broker.topics().is_empty(), "nothing was created");
    assert!(matches!(
        Topic::<u8>::new("direct", TopicConfig::default().partitions(0)),
        Err(Error::InvalidConfig(_))
    ));
}

#[test]
fn create_or_get_type_and_config_mismatch() {
    let broker = Broker::new();
    let a = broker
        .topic::<u32>("t", TopicConfig::default().partitions(2))
        .unwrap();
    let b = broker
        .topic::<u32>("t", TopicConfig::default().partitions(2))
        .unwrap();
    a.publish(1).unwrap();
    assert_eq!(
        b.stats().partitions.iter().map(|p| p.end).sum::<u64>(),
        1,
        "the same topic"
    );
    match broker.topic::<u64>("t", TopicConfig::default()) {
        Err(Error::TypeMismatch {
            topic,
            requested,
            actual,
        }) => {
            assert_eq!(topic, "t");
            assert!(requested.contains("u64") && actual.contains("u32"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        broker
            .topic::<u32>("t", TopicConfig::default().partitions(3))
            .unwrap_err(),
        Error::ConfigMismatch("t".into())
    );
    assert!(matches!(
        broker.get::<String>("t"),
        Err(Error::TypeMismatch { .. })
    ));
    assert_eq!(
        broker.get::<u32>("nope").unwrap_err(),
        Error::UnknownTopic("nope".into())
    );
    assert_eq!(
        broker.delete("nope").unwrap_err(),
        Error::UnknownTopic("nope".into())
    );
    assert_eq!(broker.topics(), vec!["t".to_string()]);
    broker.delete("t").unwrap();
    assert!(broker.topics().is_empty());
    assert!(a.is_closed());
    // The name is free again, even for another type.
    broker.topic::<String>("t", TopicConfig::default()).unwrap();
    let shown = Error::UnknownTopic("x".into()).to_string();
    assert!(shown.contains("x"));
}

#[test]
fn publish_errors_hand_values_back() {
    let t = Topic::<String>::new("p", TopicConfig::default()).unwrap();
    t.close();
    match t.publish("a".into()) {
        Err(PublishError::Closed(v)) => assert_eq!(v, "a"),
        other => panic!("{other:?}"),
    }
    match t.publish_batch(vec!["b".to_string(), "c".to_string()]) {
        Err(PublishError::Closed(v)) => assert_eq!(v, ["b", "c"]),
        other => panic!("{other:?}"),
    }
    let mut p = t.producer().unwrap();
    assert_eq!(
        p.publish_keyed("k", "d".into()).unwrap_err().into_inner(),
        "d"
    );
    let e = p.publish("e".into()).unwrap_err();
    assert_eq!(e.to_string(), "the topic is closed");
    assert_eq!(format!("{e:?}"), "Closed(..)");
    // A single-producer topic refuses a second producer with a typed error.
    let s = Topic::<u8>::new("s", TopicConfig::default().producers(Producers::Single)).unwrap();
    let _p = s.producer().unwrap();
    assert_eq!(s.producer().unwrap_err(), Error::ProducerInUse);
}

#[test]
fn handles_are_send_sync_where_they_should_be() {
    fn send<T: Send>() {}
    fn sync<T: Sync>() {}
    send::<Broker>();
    sync::<Broker>();
    send::<Topic<String>>();
    sync::<Topic<String>>();
    send::<logbus::Producer<String>>();
    send::<logbus::Reader<String>>();
    sync::<logbus::Reader<String>>();
    send::<Error>();
    sync::<Error>();
    send::<logbus::Consumer<String>>();
    send::<logbus::GroupMember<String>>();
    send::<logbus::Group<String>>();
    sync::<logbus::Group<String>>();
    send::<logbus::Subscription<String>>();
    sync::<logbus::Subscription<String>>();
    send::<logbus::AckHandle>();
    sync::<logbus::AckHandle>();
    send::<logbus::OwnedRecord<String>>();
    send::<logbus::PublishError<String>>();
    sync::<logbus::ReadError>();
    // Errors are std errors, so `?` into `Box<dyn Error + Send + Sync>` works.
    fn std_error<E: std::error::Error + Send + Sync + 'static>() {}
    std_error::<Error>();
    std_error::<logbus::ReadError>();
    std_error::<logbus::PublishError<String>>();
    std_error::<logbus::GroupError>();
}

/// `Debug` says where a record is, never what it carries.
#[test]
fn debug_output_never_prints_payloads() {
    let topic = Topic::<String>::new("secrets", TopicConfig::default()).unwrap();
    let mut reader = topic.reader(0, Start::Earliest).unwrap();
    topic.publish("hunter2".to_owned()).unwrap();
    topic.publish("hunter3".to_owned()).unwrap();
    let shown = {
        let r = reader.try_next().unwrap();
        format!("{r:?} {:?}", r.to_owned_record())
    };
    let batch = format!("{:?}", reader.try_next_batch(8).unwrap());
    let refused = format!("{:?}", logbus::PublishError::Closed("hunter4".to_owned()));
    for text in [&shown, &batch, &refused] {
        assert!(!text.contains("hunter"), "payload printed: {text}");
    }
    assert!(shown.contains("offset: 0"), "{shown}");
}

/// A producer already writing inside a segment (its short path) is refused once the topic is
/// closed, for every kind of topic, and a reader moving back after the close (which makes a
/// bounded topic recount its room) does not let the short path in again.
#[test]
fn a_warm_producer_is_refused_after_close() {
    let configs = [
        TopicConfig::default().single_producer().timestamps(false),
        TopicConfig::default().single_producer(),
        TopicConfig::default()
            .single_producer()
            .max_records(64)
            .overflow(Overflow::Block)
            .timestamps(false),
        TopicConfig::default()
            .single_producer()
            .max_records(64)
            .overflow(Overflow::Reject),
        TopicConfig::default(),
        TopicConfig::default()
            .max_records(64)
            .overflow(Overflow::Block)
            .timestamps(false),
    ];
    for (k, config) in configs.into_iter().enumerate() {
        let t = Topic::<u64>::new("warm", config).unwrap();
        let mut reader = t.reader(0, Start::Earliest).unwrap();
        let mut p = t.producer().unwrap();
        for i in 0..10 {
            assert_eq!(p.publish(i).unwrap().offset, i, "config {k}");
        }
        for i in 0..5 {
            assert_eq!(*reader.next().unwrap().value(), i, "config {k}");
        }
        t.close();
        assert!(
            matches!(p.publish(10), Err(PublishError::Closed(10))),
            "config {k}: published after close"
        );
        reader.seek(Start::Earliest).unwrap();
        let mut fresh = t.reader(0, Start::Earliest).unwrap();
        assert!(
            matches!(p.publish(11), Err(PublishError::Closed(11))),
            "config {k}: published after a reader moved back on a closed topic"
        );
        // Exactly the ten records before the close, then `Closed`, for both readers.
        for r in [&mut reader, &mut fresh] {
            for i in 0..10 {
                assert_eq!(*r.next().unwrap().value(), i, "config {k}");
            }
            assert_eq!(
                r.next().unwrap_err(),
                logbus::ReadError::Closed,
                "config {k}"
            );
        }
    }
}

/// A producer measures a record for byte retention once, before reserving it, and refuses one
/// larger than the limit, handing it back (the size function runs on the producer's long path).
#[test]
fn a_producer_measures_each_record_once_for_byte_retention() {
    use std::sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    };
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let t = Topic::<Vec<u8>>::new(
        "bytes",
        TopicConfig::default()
            .single_producer()
            .segment_size(4)
            .max_bytes(100, move |v: &Vec<u8>| {
                counted.fetch_add(1, Ordering::Relaxed);
                v.len()
            }),
    )
    .unwrap();
    let mut p = t.producer().unwrap();
    for _ in 0..40 {
        p.publish(vec![0u8; 10]).unwrap();
    }
    assert_eq!(calls.load(Ordering::Relaxed), 40);
    let s = &t.stats().partitions[0];
    assert_eq!(s.bytes, s.retained * 10, "every record counted once");
    assert!(s.start > 0, "old segments trimmed");
    match p.publish(vec![1u8; 101]) {
        Err(PublishError::TooLarge(v)) => assert_eq!(v.len(), 101),
        other => panic!("expected TooLarge, got {other:?}"),
    }
    assert_eq!(calls.load(Ordering::Relaxed), 41);
}
