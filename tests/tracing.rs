//! The `tracing` feature: the rare paths emit events (subscription lifecycle, retries, dead
//! letters, rebalances, retention trims); publishing and reading emit none.

use std::{
    io::Write,
    sync::{Arc, Mutex},
    time::Duration,
};

use logbus::{Backoff, Retry, Start, Topic, TopicConfig};

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn take(&self) -> String {
        String::from_utf8(std::mem::take(&mut *self.0.lock().unwrap())).unwrap()
    }
}

#[test]
fn rare_paths_emit_events_and_the_hot_path_none() {
    let out = Captured::default();
    let writer = out.clone();
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .init();

    let topic = Topic::<u32>::new(
        "jobs",
        TopicConfig::default().segment_size(4).max_records(4),
    )
    .unwrap();
    // Publishing and reading: no events, except the trims retention makes.
    let mut reader = topic.reader(0, Start::Earliest).unwrap();
    for v in 0..3 {
        topic.publish(v).unwrap();
        let _ = reader.try_next();
    }
    assert_eq!(out.take(), "", "the hot path emits nothing");
    for v in 3..20 {
        topic.publish(v).unwrap();
    }
    let trims = out.take();
    assert!(trims.contains("retention trimmed"), "{trims}");
    assert!(
        trims.contains("topic=jobs") && trims.contains("partition=0"),
        "{trims}"
    );

    // A subscription that fails record 19 twice, then dead-letters it.
    let mut sub = topic
        .subscription("worker")
        .start(Start::Offset(19))
        .retry(Retry::default().max_attempts(2).backoff(Backoff::None))
        .handler(|r| if **r == 19 { Err("boom") } else { Ok(()) })
        .unwrap();
    assert!(sub.wait_idle(Duration::from_secs(10)));
    sub.close();
    let lifecycle = out.take();
    for needle in [
        "subscription started",
        "attempt failed, retrying",
        "dead-lettering a record",
        "error=boom",
        "subscription stopped",
        "subscription=worker",
    ] {
        assert!(
            lifecycle.contains(needle),
            "{needle} missing in {lifecycle}"
        );
    }

    // A rebalance reaches a member.
    let group = topic.group("g").unwrap();
    let mut member = group.join("m1").unwrap();
    let _ = member.poll(1);
    let rebalance = out.take();
    assert!(rebalance.contains("group rebalance"), "{rebalance}");
    assert!(rebalance.contains("member=m1"), "{rebalance}");
}
