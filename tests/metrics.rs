//! The `metrics` feature: `export_metrics` copies the statistics into the facade under the
//! documented names and labels; ack-mode subscriptions record ack latency.

use std::{collections::HashMap, time::Duration};

use logbus::{Backoff, Retry, Start, Topic, TopicConfig};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

/// (name, sorted labels) → value, from a snapshot.
fn snapshot(
    snapshotter: &metrics_util::debugging::Snapshotter,
) -> HashMap<(String, Vec<(String, String)>), DebugValue> {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let key = key.key();
            let mut labels: Vec<(String, String)> = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            labels.sort();
            ((key.name().to_owned(), labels), value)
        })
        .collect()
}

fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    v.sort();
    v
}

#[test]
fn exported_metrics_match_the_statistics() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this test binary");

    let topic = Topic::<u32>::new(
        "orders",
        TopicConfig::default()
            .partitions(2)
            .segment_size(4)
            .max_records(8),
    )
    .unwrap();
    for v in 0..40 {
        topic.publish_to(0, v).unwrap();
    }
    topic.publish_to(1, 7).unwrap();
    let mut consumer = topic.consumer("billing", Start::Earliest).unwrap();
    let _ = consumer.poll(100);
    let group = topic.group("audit").unwrap();
    let _member = group.join("a").unwrap();
    let sub = topic
        .subscription("ship")
        .start(Start::Earliest)
        .retry(Retry::default().max_attempts(1).backoff(Backoff::None))
        .ack_handler(|d: logbus::Delivery<'_, u32>| {
            if *d.record().value() == 7 {
                d.term();
            } else {
                d.ack();
            }
            Ok::<(), String>(())
        })
        .unwrap();
    assert!(sub.wait_idle(Duration::from_secs(10)));

    topic.export_metrics();
    consumer.export_metrics();
    group.export_metrics();
    sub.export_metrics();
    let stats = topic.stats();
    let sub_stats = sub.stats();
    let m = snapshot(&snapshotter);
    let get = |name: &str, l: &[(&str, &str)]| {
        m.get(&(name.to_owned(), labels(l)))
            .unwrap_or_else(|| panic!("{name} {l:?} missing from {:?}", m.keys()))
    };
    let p0 = [("topic", "orders"), ("partition", "0")];
    assert_eq!(get("logbus_published_total", &p0), &DebugValue::Counter(40));
    let retained = stats.partitions[0].retained as f64;
    assert!(
        (8.0..40.0).contains(&retained),
        "retention trimmed: {retained}"
    );
    assert_eq!(
        get("logbus_retained_records", &p0),
        &DebugValue::Gauge(retained.into())
    );
    assert_eq!(
        get(
            "logbus_published_total",
            &[("topic", "orders"), ("partition", "1")]
        ),
        &DebugValue::Counter(1)
    );
    let ship = [("topic", "orders"), ("subscription", "ship")];
    assert_eq!(
        get("logbus_delivered_total", &ship),
        &DebugValue::Counter(sub_stats.delivered)
    );
    assert_eq!(
        get("logbus_dead_lettered_total", &ship),
        &DebugValue::Counter(1)
    );
    assert_eq!(
        get("logbus_lagged_total", &ship),
        &DebugValue::Counter(sub_stats.lagged)
    );
    assert_eq!(
        get(
            "logbus_subscriber_lag",
            &[("topic", "orders"), ("consumer", "billing")]
        ),
        &DebugValue::Gauge((consumer.lag() as f64).into())
    );
    assert_eq!(
        get(
            "logbus_group_members",
            &[("topic", "orders"), ("group", "audit")]
        ),
        &DebugValue::Gauge(1.0.into())
    );
    // One latency sample per acked delivery, recorded by the subscription's thread.
    match get("logbus_ack_latency_seconds", &ship) {
        DebugValue::Histogram(samples) => {
            assert_eq!(samples.len() as u64, sub_stats.delivered);
            assert!(samples.iter().all(|s| s.into_inner() >= 0.0));
        }
        other => panic!("{other:?}"),
    }
}
