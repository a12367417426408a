//! Metrics through the `metrics` facade (the `metrics` feature).
//!
//! Nothing is recorded on the publish or read paths: the engine already counts what matters in its
//! statistics, and `export_metrics` copies a snapshot of them into the facade. Call it on a cadence
//! (every few seconds, or from your scrape handler). The one exception is the ack latency
//! histogram, recorded by an ack-mode subscription's own thread as each delivery settles.
//!
//! The names and labels are listed in the crate docs ([Metrics](crate#metrics)).

use metrics::{counter, gauge, Histogram};

use crate::{consumer::Consumer, group::Group, subscription::Subscription, topic::Topic};

impl<T: Send + Sync + 'static> Topic<T> {
    /// Copies this topic's statistics into the `metrics` facade (see the [names](crate#metrics)).
    ///
    /// ```
    /// use logbus::{Topic, TopicConfig};
    /// let topic = Topic::<u8>::new("sensor", TopicConfig::default()).unwrap();
    /// topic.publish(1).unwrap();
    /// topic.export_metrics(); // without a recorder installed this does nothing
    /// ```
    pub fn export_metrics(&self) {
        let stats = self.stats();
        for p in &stats.partitions {
            let labels = [
                ("topic", self.name().to_owned()),
                ("partition", p.partition.to_string()),
            ];
            counter!("logbus_published_total", &labels).absolute(p.end);
            gauge!("logbus_retained_records", &labels).set(p.retained as f64);
            gauge!("logbus_retained_bytes", &labels).set(p.bytes as f64);
            gauge!("logbus_segments_live", &labels).set((p.segments + p.spare_segments) as f64);
            gauge!("logbus_readers", &labels).set(p.readers.len() as f64);
            gauge!("logbus_parked_readers", &labels).set(p.parked_readers as f64);
            counter!("logbus_wakeups_total", &labels).absolute(p.wakeups);
            counter!("logbus_parks_total", &labels).absolute(p.parks);
        }
    }
}

impl<T: Send + Sync + 'static> Subscription<T> {
    /// Copies this subscription's statistics into the `metrics` facade.
    pub fn export_metrics(&self) {
        let s = self.stats();
        let labels = [
            ("topic", self.topic().name().to_owned()),
            ("subscription", s.name.clone()),
        ];
        counter!("logbus_delivered_total", &labels).absolute(s.delivered);
        counter!("logbus_failed_attempts_total", &labels).absolute(s.failed_attempts);
        counter!("logbus_redelivered_total", &labels).absolute(s.redelivered);
        counter!("logbus_dead_lettered_total", &labels).absolute(s.dead_lettered);
        counter!("logbus_lagged_total", &labels).absolute(s.lagged);
        gauge!("logbus_subscriber_lag", &labels).set(s.lag as f64);
    }
}

impl<T: Send + Sync + 'static> Consumer<T> {
    /// Copies this consumer's lag into the `metrics` facade.
    pub fn export_metrics(&self) {
        let labels = [
            ("topic", self.topic().name().to_owned()),
            ("consumer", self.name().to_owned()),
        ];
        gauge!("logbus_subscriber_lag", &labels).set(self.lag() as f64);
    }
}

impl<T: Send + Sync + 'static> Group<T> {
    /// Copies this group's size and lag (past its committed offsets) into the `metrics` facade.
    pub fn export_metrics(&self) {
        let s = self.stats();
        let labels = [
            ("topic", self.topic().name().to_owned()),
            ("group", s.name.clone()),
        ];
        gauge!("logbus_group_members", &labels).set(s.members.len() as f64);
        gauge!("logbus_subscriber_lag", &labels).set(s.lag.iter().sum::<u64>() as f64);
    }
}

/// The ack latency histogram of one subscription, registered once when its thread starts.
pub(crate) fn ack_latency(topic: &str, subscription: &str) -> Histogram {
    metrics::histogram!(
        "logbus_ack_latency_seconds",
        "topic" => topic.to_owned(),
        "subscription" => subscription.to_owned()
    )
}
