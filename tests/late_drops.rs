//! Topics dropped while another thread holds the epoch back. Its own test binary: the test holds
//! the process's epoch, which would keep other tests' trimmed segments out too.

use std::sync::{mpsc, Arc, Mutex};
use std::thread::{self, ThreadId};
use std::time::{Duration, Instant};

use logbus::{Topic, TopicConfig};

/// Where each value was dropped: its topic, its id, and the thread that dropped it.
type Drops = Arc<Mutex<Vec<Dropped>>>;

#[derive(Clone, Debug)]
struct Dropped {
    topic: u64,
    id: u64,
    by: String,
    thread: ThreadId,
}

struct Noted {
    topic: u64,
    id: u64,
    drops: Drops,
}

/// The one value whose `Drop` panics (after noting where it ran): in the first topic.
const BOMB: (u64, u64) = (0, 5);

impl Drop for Noted {
    fn drop(&mut self) {
        let here = thread::current();
        self.drops.lock().unwrap().push(Dropped {
            topic: self.topic,
            id: self.id,
            by: here.name().unwrap_or("").to_owned(),
            thread: here.id(),
        });
        if (self.topic, self.id) == BOMB {
            panic!("the application's Drop panics ({BOMB:?})");
        }
    }
}

/// A thread pinned in the process's epoch until `go` is sent; returns once it is pinned.
fn hold_the_epoch() -> (mpsc::Sender<()>, thread::JoinHandle<()>) {
    let (pinned, is_pinned) = mpsc::channel();
    let (go, wait) = mpsc::channel::<()>();
    let holder = thread::spawn(move || {
        let guard = crossbeam_epoch::pin();
        pinned.send(()).unwrap();
        wait.recv().unwrap();
        drop(guard);
    });
    is_pinned.recv().unwrap();
    (go, holder)
}

const RECORDS: u64 = 64;

/// Publishes `RECORDS` values to a topic that keeps 4, and drops it.
fn publish_and_drop(topic: u64, drops: &Drops) {
    let config = TopicConfig::default().segment_size(4).max_records(4);
    let log = Topic::<Noted>::new(&format!("late-{topic}"), config).unwrap();
    for id in 0..RECORDS {
        let drops = drops.clone();
        log.publish(Noted { topic, id, drops }).unwrap();
    }
    drop(log);
}

/// Lets the epoch move, and publishes to another topic until `total` values were dropped (or a
/// minute passed, a guard against hanging only): its publishes pin, and so may run the deferred
/// releases of the dropped topics' segments.
fn release_and_publish_until(
    go: mpsc::Sender<()>,
    holder: thread::JoinHandle<()>,
    drops: &Drops,
    total: usize,
) {
    go.send(()).unwrap();
    holder.join().unwrap();
    let other = Topic::<u64>::new(
        "other",
        TopicConfig::default().segment_size(4).max_records(4),
    )
    .unwrap();
    let give_up = Instant::now() + Duration::from_secs(60);
    while drops.lock().unwrap().len() < total && Instant::now() < give_up {
        for v in 0..1_000 {
            other.publish(v).unwrap();
        }
        thread::sleep(Duration::from_millis(1));
    }
}

/// The threads of this process named `logbus-drop` (Linux only: `None` elsewhere).
fn late_drop_threads() -> Option<usize> {
    let tasks = std::fs::read_dir("/proc/self/task").ok()?;
    let named = tasks
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.trim_end() == "logbus-drop")
        .count();
    Some(named)
}

/// Topics' segments that retention trimmed come back through the epoch, which a pinned thread
/// holds back. Dropping a topic's last handle waits a little (~20 ms), then leaves them to the
/// process's late-drop thread, `logbus-drop`: their values are dropped there, each once, once
/// the epoch lets them go, and never by another thread that pins meanwhile, such as one
/// publishing to another topic (where a value's `Drop` would run between that publish's
/// reservation and its publish: I6). Three topics dropped so share one such thread, and one
/// value's `Drop` that panics stops none of the others. The values the topics still retained are
/// dropped by the thread that dropped them. Once every value is dropped the thread ends, and
/// the next topic dropped so starts it again.
#[test]
fn topics_dropped_while_the_epoch_is_held_drop_their_trimmed_values_on_one_thread_of_their_own() {
    const TOPICS: u64 = 3;
    let drops: Drops = Arc::new(Mutex::new(Vec::new()));
    let here = thread::current().id();
    let (go, holder) = hold_the_epoch();
    for topic in 0..TOPICS {
        publish_and_drop(topic, &drops);
    }
    let at_drop = drops.lock().unwrap().clone();
    assert!(
        at_drop.iter().all(|d| d.thread == here),
        "before the epoch moved, only the retained values were dropped, by the topics' dropper: {at_drop:?}"
    );
    assert!(
        (at_drop.len() as u64) < TOPICS * RECORDS,
        "the held epoch kept the trimmed segments out, so not every value was dropped yet"
    );

    release_and_publish_until(go, holder, &drops, (TOPICS * RECORDS) as usize);
    let all = drops.lock().unwrap().clone();
    let late: Vec<_> = all[at_drop.len()..].to_vec();
    assert_eq!(
        late.len() + at_drop.len(),
        (TOPICS * RECORDS) as usize,
        "every trimmed value was dropped in the end: {late:?}"
    );
    assert!(
        late.iter().all(|d| d.by == "logbus-drop"),
        "the trimmed values were dropped by the late-drop thread, not inside another publish: {late:?}"
    );
    let mut threads: Vec<ThreadId> = late.iter().map(|d| d.thread).collect();
    threads.dedup();
    assert!(
        threads.len() == 1,
        "one late-drop thread dropped every topic's, the bomb's panic did not end it: {threads:?}"
    );
    for topic in 0..TOPICS {
        assert!(
            late.iter().any(|d| d.topic == topic),
            "topic {topic} had trimmed values dropped late"
        );
    }
    let mut ids: Vec<(u64, u64)> = all.iter().map(|d| (d.topic, d.id)).collect();
    ids.sort();
    let each: Vec<(u64, u64)> = (0..TOPICS)
        .flat_map(|t| (0..RECORDS).map(move |id| (t, id)))
        .collect();
    assert_eq!(ids, each, "each value dropped once");

    // With nothing left to drop, the thread ends (seen where the platform lists threads by name).
    let give_up = Instant::now() + Duration::from_secs(60);
    while late_drop_threads().is_some_and(|n| n > 0) && Instant::now() < give_up {
        thread::sleep(Duration::from_millis(1));
    }
    assert!(
        late_drop_threads().is_none_or(|n| n == 0),
        "the late-drop thread ended once it had nothing left"
    );

    // The next topic dropped while the epoch is held starts it again.
    let (go, holder) = hold_the_epoch();
    publish_and_drop(TOPICS, &drops);
    let before = drops.lock().unwrap().len();
    release_and_publish_until(go, holder, &drops, ((TOPICS + 1) * RECORDS) as usize);
    let again: Vec<_> = drops.lock().unwrap()[before..].to_vec();
    assert_eq!(
        before + again.len(),
        ((TOPICS + 1) * RECORDS) as usize,
        "every value of the fourth topic was dropped: {again:?}"
    );
    assert!(
        !again.is_empty()
            && again
                .iter()
                .all(|d| d.by == "logbus-drop" && d.thread != late[0].thread),
        "a new late-drop thread dropped the fourth topic's trimmed values: {again:?}"
    );
}
