//! Metrics: publish, consume and dead-letter a little, export the statistics into the `metrics`
//! facade, and print a snapshot (a debugging recorder stands in for Prometheus or StatsD). Run with:
//!
//! ```text
//! cargo run --release --example metrics --features metrics
//! ```

use std::time::Duration;

use logbus::{Backoff, Broker, Retry, Start, TopicConfig};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

fn main() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().unwrap();

    let broker = Broker::new();
    let topic = broker
        .topic::<u32>(
            "payments",
            TopicConfig::default().partitions(2).max_records(1_000),
        )
        .unwrap();
    let sub = topic
        .subscription("settle")
        .start(Start::Earliest)
        .retry(Retry::default().max_attempts(2).backoff(Backoff::None))
        .handler(|r| {
            if **r % 100 == 13 {
                Err("declined")
            } else {
                Ok(())
            }
        })
        .unwrap();
    let mut consumer = topic.consumer("ledger", Start::Earliest).unwrap();
    for amount in 0..5_000 {
        topic.publish(amount).unwrap();
    }
    let _ = consumer.poll(500);
    assert!(sub.wait_idle(Duration::from_secs(10)));

    // On a real service: every few seconds, or from the scrape handler.
    topic.export_metrics();
    sub.export_metrics();
    consumer.export_metrics();

    let mut rows: Vec<String> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let key = key.key();
            let labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            let value = match value {
                DebugValue::Counter(n) => n.to_string(),
                DebugValue::Gauge(g) => g.to_string(),
                DebugValue::Histogram(h) => format!("{} samples", h.len()),
            };
            format!("{:<32} {:<44} {value}", key.name(), labels.join(","))
        })
        .collect();
    rows.sort();
    for row in rows {
        println!("{row}");
    }
}
