//! A topic dropped while another thread holds the epoch back. Its own test binary: the test holds
//! the process's epoch, which would keep other tests' trimmed segments out too.

use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use logbus::{Topic, TopicConfig};

/// Where each value was dropped: its id and the name of the thread that dropped it.
type Drops = Arc<Mutex<Vec<(u64, String)>>>;

struct Noted {
    id: u64,
    drops: Drops,
}

/// The one value whose `Drop` panics (after noting where it ran).
const BOMB: u64 = 5;

impl Drop for Noted {
    fn drop(&mut self) {
        let name = thread::current().name().unwrap_or("").to_owned();
        self.drops.lock().unwrap().push((self.id, name));
        if self.id == BOMB {
            panic!("the application's Drop panics ({BOMB})");
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

/// A topic's segments that retention trimmed come back through the epoch, which a pinned thread
/// holds back. Dropping the topic's last handle waits a little (~20 ms), then leaves them to a
/// thread of its own, `logbus-drop`: their values are dropped there, each once, once the epoch
/// lets them go, and never by another thread that pins meanwhile, such as one publishing to
/// another topic (where a value's `Drop` would run between that publish's reservation and its
/// publish: I6). One of them panics, which stops none of the others (the panic ends that thread,
/// reported by the panic hook). The values the topic still retained are dropped by the thread
/// that dropped it.
#[test]
fn a_topic_dropped_while_the_epoch_is_held_drops_its_trimmed_values_on_a_thread_of_its_own() {
    const RECORDS: u64 = 64;
    let drops: Drops = Arc::new(Mutex::new(Vec::new()));
    let here = thread::current().name().unwrap_or("").to_owned();
    let (go, holder) = hold_the_epoch();
    let config = TopicConfig::default().segment_size(4).max_records(4);
    let topic = Topic::<Noted>::new("late", config).unwrap();
    for id in 0..RECORDS {
        let drops = drops.clone();
        topic.publish(Noted { id, drops }).unwrap();
    }
    drop(topic);
    let at_drop = drops.lock().unwrap().clone();
    assert!(
        at_drop.iter().all(|(_, by)| *by == here),
        "before the epoch moved, only the retained values were dropped, by the topic's dropper: {at_drop:?}"
    );
    let retained = at_drop.len() as u64;
    assert!(
        retained < RECORDS,
        "the held epoch kept the trimmed segments out, so not every value was dropped yet"
    );

    // Let the epoch move, and publish to another topic meanwhile: its publishes pin, and so may
    // run the deferred releases of the dropped topic's segments.
    go.send(()).unwrap();
    holder.join().unwrap();
    let other = Topic::<u64>::new(
        "other",
        TopicConfig::default().segment_size(4).max_records(4),
    )
    .unwrap();
    // Only a guard against hanging: the outcome checked is where the values went.
    let give_up = Instant::now() + Duration::from_secs(60);
    while (drops.lock().unwrap().len() as u64) < RECORDS && Instant::now() < give_up {
        for v in 0..1_000 {
            other.publish(v).unwrap();
        }
        thread::sleep(Duration::from_millis(1));
    }

    let mut all = drops.lock().unwrap().clone();
    let late: Vec<_> = all[at_drop.len()..].to_vec();
    assert_eq!(
        late.len() as u64,
        RECORDS - retained,
        "every trimmed value was dropped in the end: {late:?}"
    );
    assert!(
        late.iter().all(|(_, by)| by == "logbus-drop"),
        "the trimmed values were dropped by the late-drop thread, not inside another publish: {late:?}"
    );
    all.sort();
    let ids: Vec<u64> = all.iter().map(|(id, _)| *id).collect();
    assert_eq!(
        ids,
        (0..RECORDS).collect::<Vec<_>>(),
        "each value dropped once"
    );
}
