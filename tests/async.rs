//! The `async` feature: readers and consumers as futures and streams, on tokio and on the `futures`
//! executor; cancellation loses nothing; a waiting task is announced like a parked thread and a
//! dropped future withdraws.

use std::{
    future::Future,
    pin::pin,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    task::{Context, Poll, Wake, Waker},
    time::Duration,
};

use futures::{executor::block_on, task::noop_waker, StreamExt};
use logbus::{ReadError, Start, Topic, TopicConfig, WaitStrategy};

const N: u64 = 20_000;

fn topic(name: &str) -> Topic<u64> {
    Topic::new(name, TopicConfig::default().segment_size(64)).unwrap()
}

fn publish_from_thread(
    topic: &Topic<u64>,
    n: u64,
    pause_every: u64,
) -> std::thread::JoinHandle<()> {
    let topic = topic.clone();
    std::thread::spawn(move || {
        for v in 0..n {
            topic.publish(v).unwrap();
            if pause_every > 0 && v % pause_every == 0 {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        topic.close();
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokio_reader_gets_every_record_in_order() {
    let topic = topic("tokio-reader");
    let mut reader = topic.reader(0, Start::Earliest).unwrap();
    let publisher = publish_from_thread(&topic, N, 1_000);
    let mut want = 0;
    loop {
        match reader.next_async().await {
            Ok(r) => {
                assert_eq!((r.offset(), *r), (want, want));
                want += 1;
            }
            Err(ReadError::Closed) => break,
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(want, N);
    publisher.join().unwrap();
}

#[test]
fn futures_executor_reader_stream_collects_until_closed() {
    let topic = topic("stream");
    let reader = topic.reader(0, Start::Earliest).unwrap();
    let publisher = publish_from_thread(&topic, N, 2_000);
    let values: Vec<u64> = block_on(reader.map(|r| r.unwrap().value).collect());
    assert_eq!(values, (0..N).collect::<Vec<_>>());
    publisher.join().unwrap();
}

/// A `select!` that drops a pending `next_async()` again and again loses no record and repeats
/// none. The publisher only publishes a chunk after the timer has won, so every chunk is preceded
/// by at least one cancelled wait on an empty log: the cancellations happen on every machine, not
/// only when the scheduler happens to be slow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_waits_lose_nothing_on_tokio() {
    const CHUNKS: u64 = 200;
    const CHUNK: u64 = N / CHUNKS;
    let topic = topic("cancel-tokio");
    let mut reader = topic.reader(0, Start::Earliest).unwrap();
    let (go, on_go) = std::sync::mpsc::channel::<()>();
    let t = topic.clone();
    let publisher = std::thread::spawn(move || {
        for chunk in 0..CHUNKS {
            on_go.recv().unwrap(); // wait until a read was cancelled
            for v in chunk * CHUNK..(chunk + 1) * CHUNK {
                t.publish(v).unwrap();
            }
        }
        t.close();
    });
    let (mut want, mut cancelled) = (0, 0u64);
    loop {
        tokio::select! {
            r = reader.next_async() => match r {
                Ok(r) => {
                    assert_eq!(*r, want);
                    want += 1;
                }
                Err(ReadError::Closed) => break,
                Err(e) => panic!("{e}"),
            },
            _ = tokio::time::sleep(Duration::from_micros(50)) => {
                cancelled += 1;
                let _ = go.send(()); // the publisher may be done already
            }
        }
    }
    assert_eq!(want, N);
    assert!(
        cancelled >= CHUNKS,
        "every chunk waits for a cancelled read, so at least {CHUNKS} reads were dropped"
    );
    publisher.join().unwrap();
}

#[test]
fn cancelled_waits_lose_nothing_on_the_futures_executor() {
    let topic = topic("cancel-futures");
    let mut reader = topic.reader(0, Start::Earliest).unwrap();
    let publisher = publish_from_thread(&topic, N, 100);
    let mut want = 0;
    block_on(async {
        loop {
            let next = reader.next_async();
            let timer = futures::future::ready(());
            futures::pin_mut!(next);
            // Poll the read once with the timer already done: most polls are cancelled.
            match futures::future::select(next, timer).await {
                futures::future::Either::Left((r, _)) => match r {
                    Ok(r) => {
                        assert_eq!(*r, want);
                        want += 1;
                    }
                    Err(ReadError::Closed) => break,
                    Err(e) => panic!("{e}"),
                },
                futures::future::Either::Right(((), _)) => std::thread::yield_now(),
            }
        }
    });
    assert_eq!(want, N);
    publisher.join().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_poll_async_across_partitions_and_stream() {
    let topic: Topic<u64> = Topic::new("orders", TopicConfig::default().partitions(3)).unwrap();
    let mut consumer = topic.consumer("billing", Start::Earliest).unwrap();
    let t = topic.clone();
    let publisher = std::thread::spawn(move || {
        for v in 0..3_000u64 {
            t.publish(v).unwrap(); // round-robin over the 3 partitions
        }
        t.close();
    });
    let mut per_partition = [Vec::new(), Vec::new(), Vec::new()];
    loop {
        match consumer.poll_async(64).await {
            Ok(batch) => {
                let p = batch.partition() as usize;
                per_partition[p].extend(batch.values().copied());
            }
            Err(ReadError::Closed) => break,
            Err(e) => panic!("{e}"),
        }
    }
    for (p, values) in per_partition.iter().enumerate() {
        let want: Vec<u64> = (0..1_000).map(|i| i * 3 + p as u64).collect();
        assert_eq!(values, &want, "partition {p} in order, complete");
    }
    consumer.commit();
    publisher.join().unwrap();
    // The consumer as a stream: a new one by name starts after the commit and sees the end.
    let rest = topic.consumer("billing", Start::Earliest).unwrap();
    assert_eq!(rest.collect::<Vec<_>>().await.len(), 0);
}

/// A pending task is announced as a parked reader (so publishers wake it); dropping the pending
/// future withdraws, so publishers go back to doing no wake-up work.
#[test]
fn a_pending_future_is_parked_and_dropping_it_withdraws() {
    let topic: Topic<u64> = Topic::new(
        "withdraw",
        TopicConfig::default().wait(WaitStrategy::park_at_once()),
    )
    .unwrap();
    let mut reader = topic.reader(0, Start::Earliest).unwrap();
    let waker = noop_waker();
    let mut cx = Context::from_waker(&waker);
    {
        let mut next = pin!(reader.next_async());
        assert!(next.as_mut().poll(&mut cx).is_pending());
        assert_eq!(topic.stats().partitions[0].parked_readers, 1);
    }
    assert_eq!(topic.stats().partitions[0].parked_readers, 0);
    topic.publish(1).unwrap();
    assert_eq!(
        topic.stats().partitions[0].wakeups,
        0,
        "nobody waits: no wake-up"
    );
    // Record 1 is ready at once; then the task waits, a publish wakes it (counted once) and the
    // next poll completes.
    {
        let mut next = pin!(reader.next_async());
        let Poll::Ready(Ok(r)) = next.as_mut().poll(&mut cx) else {
            panic!("the record is ready")
        };
        assert_eq!(*r, 1);
    }
    let mut next = pin!(reader.next_async());
    assert!(next.as_mut().poll(&mut cx).is_pending());
    topic.publish(2).unwrap();
    assert_eq!(topic.stats().partitions[0].wakeups, 1);
    let Poll::Ready(Ok(r)) = next.as_mut().poll(&mut cx) else {
        panic!("the publish woke the task and the record is ready")
    };
    assert_eq!(*r, 2);
    assert_eq!(topic.stats().partitions[0].parked_readers, 0);
}

/// A task waker that counts its wakes.
#[derive(Default)]
struct Counting(AtomicUsize);

impl Wake for Counting {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn counting_waker() -> (Arc<Counting>, Waker) {
    let count = Arc::new(Counting::default());
    (Arc::clone(&count), Waker::from(count))
}

fn wakes(count: &Counting) -> usize {
    count.0.load(Ordering::SeqCst)
}

/// (parked readers, parks, wake-ups) of partition 0.
fn parking(topic: &Topic<u64>) -> (u64, u64, u64) {
    let p = &topic.stats().partitions[0];
    (p.parked_readers, p.parks, p.wakeups)
}

/// Within the strategy's `yield_for` of its first empty poll, a waiting task yields: the poll
/// wakes the task itself and returns `Pending`, announcing nothing, so a publish then has nobody
/// to wake and the next poll takes the record.
#[test]
fn a_waiting_task_yields_before_it_parks() {
    let wait = WaitStrategy::default().yield_for(Duration::from_secs(3600));
    let topic: Topic<u64> = Topic::new("yield", TopicConfig::default().wait(wait)).unwrap();
    let mut reader = topic.reader(0, Start::Earliest).unwrap();
    let (count, waker) = counting_waker();
    let mut cx = Context::from_waker(&waker);
    let mut next = pin!(reader.next_async());
    for polls in 1..=3 {
        assert!(next.as_mut().poll(&mut cx).is_pending());
        assert_eq!(wakes(&count), polls, "each empty poll wakes its own task");
        assert_eq!(parking(&topic), (0, 0, 0), "and announces nothing");
    }
    topic.publish(5).unwrap();
    assert_eq!(parking(&topic), (0, 0, 0), "nobody parked: no wake-up");
    let Poll::Ready(Ok(r)) = next.as_mut().poll(&mut cx) else {
        panic!("the record is ready")
    };
    assert_eq!((r.offset(), *r), (0, 5));
}

/// Once `yield_for` has passed since its first empty poll, a task parks as a thread does: the
/// poll announces it and does not wake it, a publish wakes it; a record found starts the next
/// wait's yielding afresh. Through a future, a reader polled as a stream (whose wait lasts
/// from poll to poll), and a consumer's `poll_async`.
#[test]
fn a_waiting_task_parks_once_its_yielding_is_over() {
    let yield_for = Duration::from_millis(2);
    let wait = WaitStrategy::default().yield_for(yield_for);
    let config = || TopicConfig::default().wait(wait);
    let past_it = || std::thread::sleep(yield_for * 3);

    // A future per record.
    let topic: Topic<u64> = Topic::new("park-future", config()).unwrap();
    let mut reader = topic.reader(0, Start::Earliest).unwrap();
    let (count, waker) = counting_waker();
    let mut cx = Context::from_waker(&waker);
    {
        let mut next = pin!(reader.next_async());
        assert!(next.as_mut().poll(&mut cx).is_pending());
        assert_eq!((wakes(&count), parking(&topic)), (1, (0, 0, 0)));
        past_it();
        assert!(next.as_mut().poll(&mut cx).is_pending());
        assert_eq!(
            (wakes(&count), parking(&topic)),
            (1, (1, 1, 0)),
            "parked, not woken"
        );
        topic.publish(1).unwrap();
        assert_eq!((wakes(&count), parking(&topic)), (2, (1, 1, 1)), "woken");
        let Poll::Ready(Ok(r)) = next.as_mut().poll(&mut cx) else {
            panic!("woken with the record ready")
        };
        assert_eq!((*r, parking(&topic)), (1, (0, 1, 1)), "and withdrawn");
    }

    // A stream: the yielding's start is kept in the reader between polls, and reset by a record.
    let topic: Topic<u64> = Topic::new("park-stream", config()).unwrap();
    let mut stream = topic.reader(0, Start::Earliest).unwrap();
    let (count, waker) = counting_waker();
    let mut cx = Context::from_waker(&waker);
    assert!(stream.poll_next_unpin(&mut cx).is_pending());
    past_it();
    assert!(stream.poll_next_unpin(&mut cx).is_pending());
    assert_eq!((wakes(&count), parking(&topic)), (1, (1, 1, 0)));
    topic.publish(2).unwrap();
    let Poll::Ready(Some(Ok(r))) = stream.poll_next_unpin(&mut cx) else {
        panic!("woken with the record ready")
    };
    assert_eq!((r.value, wakes(&count)), (2, 2));
    assert!(stream.poll_next_unpin(&mut cx).is_pending());
    assert_eq!(
        (wakes(&count), parking(&topic)),
        (3, (0, 1, 1)),
        "a new wait yields first"
    );

    // A consumer's batch.
    let topic: Topic<u64> = Topic::new("park-consumer", config()).unwrap();
    let mut consumer = topic.consumer("c", Start::Earliest).unwrap();
    let (count, waker) = counting_waker();
    let mut cx = Context::from_waker(&waker);
    let mut poll = pin!(consumer.poll_async(8));
    assert!(poll.as_mut().poll(&mut cx).is_pending());
    assert_eq!((wakes(&count), parking(&topic)), (1, (0, 0, 0)));
    past_it();
    assert!(poll.as_mut().poll(&mut cx).is_pending());
    assert_eq!((wakes(&count), parking(&topic)), (1, (1, 1, 0)));
    topic.publish(3).unwrap();
    assert_eq!(wakes(&count), 2);
    let Poll::Ready(Ok(batch)) = poll.as_mut().poll(&mut cx) else {
        panic!("woken with the record ready")
    };
    assert_eq!(batch.values().copied().collect::<Vec<_>>(), [3]);
}

/// A wait spans the futures it is made of: a task that keeps dropping its `next_async` (a
/// `select!` whose other branch fires more often than `yield_for`) still parks once `yield_for`
/// has passed since its first empty poll, instead of yielding on every fresh future and keeping
/// its thread busy for as long as the stream stays idle; it stays one wait until a record comes.
#[test]
fn a_wait_cancelled_again_and_again_still_parks() {
    let yield_for = Duration::from_millis(2);
    let wait = WaitStrategy::default().yield_for(yield_for);
    let topic: Topic<u64> = Topic::new("reselect", TopicConfig::default().wait(wait)).unwrap();
    let mut reader = topic.reader(0, Start::Earliest).unwrap();
    let (count, waker) = counting_waker();
    let mut cx = Context::from_waker(&waker);
    let begun = std::time::Instant::now();
    let mut polls = 0;
    let parked = loop {
        let mut next = pin!(reader.next_async());
        assert!(next.as_mut().poll(&mut cx).is_pending());
        polls += 1;
        if parking(&topic).0 == 1 {
            break true;
        }
        // Each poll until then yielded; the future is dropped here, as a `select!` drops it.
        assert_eq!((wakes(&count), parking(&topic)), (polls, (0, 0, 0)));
        if begun.elapsed() > Duration::from_secs(5) {
            break false;
        }
    };
    assert!(parked, "a wait made of fresh futures parked within 5 s");
    assert!(begun.elapsed() >= yield_for, "not before yield_for");
    assert_eq!(parking(&topic), (0, 1, 0), "the dropped future withdrew");
    let woken = wakes(&count);

    // Parked at once on every fresh future: the same wait.
    for _ in 0..3 {
        let mut next = pin!(reader.next_async());
        assert!(next.as_mut().poll(&mut cx).is_pending());
        assert_eq!(parking(&topic).0, 1, "announced at once");
    }
    assert_eq!(wakes(&count), woken, "no poll woke its task");

    // A record ends the wait: the publish wakes the parked task; the wait after it yields first.
    {
        let mut next = pin!(reader.next_async());
        assert!(next.as_mut().poll(&mut cx).is_pending());
        topic.publish(9).unwrap();
        assert_eq!(wakes(&count), woken + 1, "the publish woke it");
        let Poll::Ready(Ok(r)) = next.as_mut().poll(&mut cx) else {
            panic!("the record is ready")
        };
        assert_eq!(*r, 9);
    }
    let mut next = pin!(reader.next_async());
    assert!(next.as_mut().poll(&mut cx).is_pending());
    assert_eq!(
        (wakes(&count), parking(&topic).0),
        (woken + 2, 0),
        "yielding"
    );
}

/// A task that finds records at every poll yields to its executor once in `task_budget` polls
/// (wakes itself, returns `Pending`, takes nothing), as tokio's own channels do under its
/// cooperative budget; the next poll goes on where it stopped. Through a reader's futures, a
/// reader stream, a consumer's `poll_async`, a consumer stream and a group member's
/// `poll_async`; a budget of 0 never yields.
#[test]
fn a_task_with_records_ready_yields_once_in_its_budget() {
    const BUDGET: u32 = 16;
    const RECORDS: u64 = 3 * BUDGET as u64 + 5;
    let topic_of = |budget: u32| -> Topic<u64> {
        let wait = WaitStrategy::default().task_budget(budget);
        Topic::new("budget", TopicConfig::default().wait(wait)).unwrap()
    };
    /// Polls `poll` until it has given `RECORDS` values; the values, and the polls that yielded.
    fn drain(mut poll: impl FnMut(&mut Context<'_>) -> Poll<Vec<u64>>) -> (Vec<u64>, Vec<usize>) {
        let (count, waker) = counting_waker();
        let mut cx = Context::from_waker(&waker);
        let (mut values, mut yielded) = (Vec::new(), Vec::new());
        for i in 0.. {
            if values.len() as u64 >= RECORDS {
                break;
            }
            match poll(&mut cx) {
                Poll::Ready(v) => values.extend(v),
                Poll::Pending => {
                    yielded.push(i);
                    assert_eq!(wakes(&count), yielded.len(), "a yield wakes its own task");
                }
            }
            assert!(i < 2 * RECORDS as usize, "no progress");
        }
        (values, yielded)
    }
    // With the budget, polls 0..16 complete, 16 yields, 17..33 complete, 33 yields, and so on.
    let stride = BUDGET as usize + 1;
    let yields: Vec<usize> = (1..=3).map(|k| k * stride - 1).collect();
    let all: Vec<u64> = (0..RECORDS).collect();

    for (budget, expected) in [(BUDGET, yields), (0, vec![])] {
        let topic = topic_of(budget);
        let mut reader = topic.reader(0, Start::Earliest).unwrap();
        let mut stream = topic.reader(0, Start::Earliest).unwrap();
        let mut consumer = topic.consumer("c", Start::Earliest).unwrap();
        let mut consumer_stream = topic.consumer("s", Start::Earliest).unwrap();
        let mut member = topic.group("g").unwrap().join("m").unwrap();
        for v in 0..RECORDS {
            topic.publish(v).unwrap();
        }
        let futures = drain(|cx| {
            pin!(reader.next_async())
                .poll(cx)
                .map(|r| vec![*r.unwrap()])
        });
        assert_eq!(futures, (all.clone(), expected.clone()), "futures");
        let streamed = drain(|cx| {
            stream
                .poll_next_unpin(cx)
                .map(|r| vec![r.unwrap().unwrap().value])
        });
        assert_eq!(streamed, (all.clone(), expected.clone()), "stream");
        let batches = drain(|cx| {
            pin!(consumer.poll_async(1))
                .poll(cx)
                .map(|b| b.unwrap().values().copied().collect())
        });
        assert_eq!(batches, (all.clone(), expected.clone()), "consumer");
        let consumed = drain(|cx| {
            consumer_stream
                .poll_next_unpin(cx)
                .map(|r| vec![r.unwrap().unwrap().value])
        });
        assert_eq!(consumed, (all.clone(), expected.clone()), "consumer stream");
        // The member's first poll reports its assignment, which counts as a completed poll:
        // the member's yields come one poll earlier.
        let waker = noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(matches!(
            pin!(member.poll_async(1)).poll(&mut cx),
            Poll::Ready(Err(logbus::GroupError::Rebalanced(_)))
        ));
        let members = drain(|cx| {
            pin!(member.poll_async(1))
                .poll(cx)
                .map(|b| b.unwrap().values().copied().collect())
        });
        let earlier = expected.iter().map(|i| i - 1).collect();
        assert_eq!(members, (all.clone(), earlier), "group member");
    }
}

/// What the budget is for: on a single-threaded runtime, a task replaying a long history (every
/// record ready) lets the runtime's other tasks run while it reads, instead of holding the
/// thread until it has read it all.
#[test]
fn a_replaying_task_lets_its_neighbours_run() {
    const RECORDS: u64 = 100_000;
    let topic = topic("replay");
    for v in 0..RECORDS {
        topic.publish(v).unwrap();
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let read = Arc::new(AtomicUsize::new(0));
    let (seen_by_neighbour, total) = runtime.block_on(async {
        let mut reader = topic.reader(0, Start::Earliest).unwrap();
        let counter = Arc::clone(&read);
        let replay = tokio::spawn(async move {
            for expected in 0..RECORDS {
                assert_eq!(*reader.next_async().await.unwrap(), expected);
                counter.fetch_add(1, Ordering::SeqCst);
            }
        });
        let counter = Arc::clone(&read);
        let neighbour = tokio::spawn(async move { counter.load(Ordering::SeqCst) });
        let seen = neighbour.await.unwrap();
        replay.await.unwrap();
        (seen, read.load(Ordering::SeqCst))
    });
    assert_eq!(total, RECORDS as usize);
    assert!(
        seen_by_neighbour < total,
        "the neighbour ran only after the whole replay ({seen_by_neighbour} records read)"
    );
}

/// A member task that has records looked up in every partition still hears of a group change
/// before it takes another: a join revokes two of its partitions at its next poll, which reports
/// it, and after the hand-over it reads only the partitions it kept.
#[test]
fn a_member_task_with_records_ready_hears_of_a_join_first() {
    use logbus::GroupError;
    let topic: Topic<u64> = Topic::new("join-ready", TopicConfig::default().partitions(4)).unwrap();
    let group = topic.group("g").unwrap();
    let mut b = group.join("b").unwrap();
    for v in 0..40 {
        topic.publish_to((v % 4) as u32, v).unwrap();
    }
    let waker = noop_waker();
    let mut cx = Context::from_waker(&waker);
    let mut poll = |m: &mut logbus::GroupMember<u64>| match pin!(m.poll_async(1)).poll(&mut cx) {
        Poll::Ready(Ok(batch)) => Ok((batch.partition(), batch.len())),
        Poll::Ready(Err(e)) => Err(e),
        Poll::Pending => panic!("records are ready"),
    };
    assert!(matches!(poll(&mut b), Err(GroupError::Rebalanced(r)) if r.assigned == [0, 1, 2, 3]));
    // Two turns over the partitions: each has its records looked up.
    for turn in 0..8 {
        let (partition, len) = poll(&mut b).unwrap();
        assert_eq!((partition, len), (turn % 4, 1));
    }
    // `a` sorts first, so it is to have partitions 0 and 1.
    let mut a = group.join("a").unwrap();
    assert!(matches!(poll(&mut b), Err(GroupError::Rebalanced(r)) if r.revoked == [0, 1]));
    let _ = poll(&mut b); // releases them (or reads a record of a kept partition)
    assert_eq!(b.assignment(), [2, 3]);
    for _ in 0..6 {
        let (partition, _) = poll(&mut b).unwrap();
        assert!(
            [2, 3].contains(&partition),
            "read partition {partition} after losing it"
        );
    }
    assert!(matches!(poll(&mut a), Err(GroupError::Rebalanced(r)) if r.assigned == [0, 1]));
}

/// The iterator adapters (no feature needed, tested here beside the streams they mirror).
#[test]
fn iterating_a_reader() {
    let topic = topic("iter");
    let mut reader = topic.reader(0, Start::Earliest).unwrap();
    let publisher = publish_from_thread(&topic, 1_000, 0);
    let mut n = 0;
    for record in &mut reader {
        let record = record.unwrap();
        assert_eq!((record.offset, record.value), (n, n));
        n += 1;
    }
    assert_eq!(n, 1_000);
    publisher.join().unwrap();
}

/// A group member with no partitions waits (as a pending task) until the group changes: when the
/// owner leaves, the task is woken, hears of its assignment, then gets the records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_group_member_task_wakes_when_the_owner_leaves() {
    let topic: Topic<u64> = Topic::new("jobs", TopicConfig::default()).unwrap();
    let group = topic.group("workers").unwrap();
    let mut a = group.join("a").unwrap();
    let mut b = group.join("b").unwrap();
    assert!(matches!(a.poll(8), Err(logbus::GroupError::Rebalanced(_))));
    assert!(b.assignment().is_empty(), "one partition, owned by a");
    for v in 0..5 {
        topic.publish(v).unwrap();
    }
    let waiter = tokio::spawn(async move {
        let mut got = Vec::new();
        let mut rebalances = 0;
        while got.len() < 5 {
            match b.poll_async(8).await {
                Ok(batch) => got.extend(batch.values().copied()),
                Err(logbus::GroupError::Rebalanced(r)) => {
                    rebalances += 1;
                    assert_eq!(r.assigned, vec![0]);
                }
                Err(e) => panic!("{e}"),
            }
        }
        (got, rebalances)
    });
    tokio::time::sleep(Duration::from_millis(20)).await; // let b wait (not a check)
    drop(a.poll(8)); // a still owns the partition and reads nothing it does not commit
    drop(a);
    let (got, rebalances) = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the idle member's task was never woken")
        .unwrap();
    assert_eq!(
        got,
        vec![0, 1, 2, 3, 4],
        "nothing was committed: b starts at the start"
    );
    assert_eq!(rebalances, 1);
}

/// Members with no partitions, waiting as tasks, wake when the group is done with the closed
/// topic (the owner has read its partition to the end): a poll says `Closed`, a stream ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_group_member_tasks_hear_closed_once_the_group_is_done() {
    let topic: Topic<u64> = Topic::new("jobs", TopicConfig::default()).unwrap();
    let group = topic.group("workers").unwrap();
    let mut owner = group.join("a").unwrap();
    let mut polled = group.join("b").unwrap();
    let streamed = group.join("c").unwrap();
    assert_eq!(owner.assignment(), [0]);
    let poll = tokio::spawn(async move { polled.poll_async(8).await.map(|b| b.len()) });
    let stream = tokio::spawn(streamed.collect::<Vec<_>>());
    topic.publish(5).unwrap();
    topic.close();
    tokio::time::sleep(Duration::from_millis(20)).await; // let them wait (not a check)
    assert!(
        !poll.is_finished() && !stream.is_finished(),
        "the owner has not read yet"
    );
    assert!(matches!(
        owner.poll(8),
        Err(logbus::GroupError::Rebalanced(_))
    ));
    assert_eq!(owner.poll(8).unwrap().len(), 1);
    assert_eq!(
        owner.poll(8).unwrap_err(),
        logbus::GroupError::Read(ReadError::Closed)
    );
    let polled = tokio::time::timeout(Duration::from_secs(60), poll)
        .await
        .expect("the polling task was never woken")
        .unwrap();
    assert_eq!(
        polled.unwrap_err(),
        logbus::GroupError::Read(ReadError::Closed)
    );
    let items = tokio::time::timeout(Duration::from_secs(60), stream)
        .await
        .expect("the stream never ended")
        .unwrap();
    assert!(items.is_empty(), "{items:?}");
}

/// The values a group member's stream gave, sorted; rebalances skipped, any other error fails.
fn sorted_values(items: Vec<Result<logbus::OwnedRecord<u64>, logbus::GroupError>>) -> Vec<u64> {
    let mut values: Vec<u64> = items
        .into_iter()
        .filter_map(|i| match i {
            Ok(r) => Some(r.value),
            Err(logbus::GroupError::Rebalanced(_)) => None,
            Err(e) => panic!("{e}"),
        })
        .collect();
    values.sort_unstable();
    values
}

/// Hands partition 1 from `a` to `b` when `c` joins; `b` keeps partition 2 (see the test below).
struct Shift;

impl logbus::Assignor for Shift {
    fn assign(&self, _partitions: u32, members: &[&str]) -> Vec<Vec<u32>> {
        match members {
            [_] => vec![vec![0, 1, 2]],
            [_, _] => vec![vec![0, 1], vec![2]],
            _ => vec![vec![0], vec![1, 2], vec![]],
        }
    }
}

/// A member that has read its own partitions to the closed end, while another partition is on
/// its way to it, waits as a task for that partition rather than end: its records would be left
/// without a reader. It ends once the group has read everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drained_member_task_waits_for_a_partition_on_its_way() {
    let topic: Topic<u64> = Topic::new("shift", TopicConfig::default().partitions(3)).unwrap();
    let group = topic.group("g").unwrap();
    group.set_assignor(Shift);
    let mut a = group.join("a").unwrap();
    assert!(matches!(a.poll(8), Err(logbus::GroupError::Rebalanced(_)))); // a: 0, 1, 2
    let mut b = group.join("b").unwrap();
    assert!(matches!(a.poll(8), Err(logbus::GroupError::Rebalanced(r)) if r.revoked == [2]));
    assert!(a.poll(8).is_err()); // lets 2 go
    assert!(matches!(b.poll(8), Err(logbus::GroupError::Rebalanced(r)) if r.assigned == [2]));
    let _c = group.join("c").unwrap(); // b is now meant to have 1 and 2; a still holds 1
    for p in 0..3 {
        topic.publish_to(p, u64::from(p)).unwrap();
    }
    topic.close();
    // The task hands `b` back rather than drop it when its stream ends: `b` leaving would
    // rebalance the group, and `a` could hear that before `Closed` (a race this test once lost).
    let stream = tokio::spawn(async move {
        let items = (&mut b).collect::<Vec<_>>().await;
        (items, b)
    });
    tokio::time::sleep(Duration::from_millis(20)).await; // let b read 2 and wait (not a check)
    assert!(!stream.is_finished(), "b ended with partition 1 on its way");
    // `a` hears of the revocation, lets partition 1 go on its next poll, reads its own, and
    // hears `Closed` once b has read 1 and 2 as well.
    assert!(matches!(a.poll(8), Err(logbus::GroupError::Rebalanced(r)) if r.revoked == [1]));
    assert_eq!(*a.poll(8).unwrap().values().next().unwrap(), 0);
    // `a` stays in the group until b has ended: leaving would hand partition 0 to b, which would
    // then read it again from the group's commit (none: at least once).
    let a_done = tokio::task::spawn_blocking(move || {
        let got = a.poll_timeout(8, Duration::from_secs(60)).map(|b| b.len());
        (got, a)
    });
    let (items, b) = tokio::time::timeout(Duration::from_secs(60), stream)
        .await
        .expect("b never ended")
        .unwrap();
    let values = sorted_values(items);
    assert_eq!(values, [1, 2]);
    let (got, a) = a_done.await.unwrap();
    assert_eq!(
        got.unwrap_err(),
        logbus::GroupError::Read(ReadError::Closed)
    );
    drop((a, b));
}

#[test]
fn a_group_member_is_a_stream_until_closed() {
    let topic: Topic<u64> = Topic::new("stream-g", TopicConfig::default().partitions(2)).unwrap();
    let member = topic.group("g").unwrap().join("only").unwrap();
    let publisher = publish_from_thread(&topic, 1_000, 100);
    let items: Vec<_> = block_on(member.collect::<Vec<_>>());
    publisher.join().unwrap();
    let values = sorted_values(items);
    assert_eq!(values, (0..1_000).collect::<Vec<_>>());
}

/// `publish_async` under `Block` waits as a task, not a thread: on a single-threaded runtime another
/// task keeps running while the publisher waits, and lets a reader make room, which wakes it. With
/// one producer or many (their logs find the next offset in different places when the task
/// re-checks for room).
#[test]
fn publish_async_waits_under_block_without_blocking_the_thread() {
    publish_async_waits_under_block(false);
    publish_async_waits_under_block(true);
}

fn publish_async_waits_under_block(single: bool) {
    use logbus::Overflow;
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let result = runtime.block_on(async {
            let mut config = TopicConfig::default()
                .max_records(2)
                .overflow(Overflow::Block);
            if single {
                config = config.single_producer();
            }
            let topic: Topic<u64> = Topic::new("gate", config).unwrap();
            let mut reader = topic.reader(0, Start::Earliest).unwrap();
            let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
            let reader_thread = std::thread::spawn(move || {
                go_rx.recv().unwrap();
                let mut got = Vec::new();
                while let Ok(r) = reader.next() {
                    got.push(*r);
                }
                got
            });
            // The other task: only it can let the reader go.
            let ticker = tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                go_tx.send(()).unwrap();
            });
            for v in 0..100u64 {
                let published = topic.publish_async(v).await.unwrap();
                assert_eq!(published.offset, v);
            }
            ticker.await.unwrap();
            topic.close();
            reader_thread.join().unwrap()
        });
        done_tx.send(result).unwrap();
    });
    let got = done_rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the publisher blocked its thread: the other task never ran");
    assert_eq!(got, (0..100).collect::<Vec<_>>());
}

/// Reads `expected`, then looks again, finding nothing: the reader reports its position, which
/// makes the room a publisher under `Block` waits for.
fn read_one(reader: &mut logbus::Reader<u64>, expected: u64) {
    assert_eq!(*reader.try_next().unwrap(), expected);
    assert_eq!(reader.try_next().unwrap_err(), ReadError::Empty);
}

/// A publishing task blocked by `Block` yields first, as a reading task does: the poll wakes the
/// task itself and a reader making room has nobody to wake; once `yield_for` has passed it waits
/// announced, the poll no longer wakes it and the reader's read does. Single and many producers.
#[test]
fn a_blocked_publishing_task_yields_then_waits_for_room() {
    use logbus::Overflow;
    for single in [false, true] {
        let yield_for = Duration::from_millis(2);
        let mut config = TopicConfig::default()
            .max_records(1)
            .overflow(Overflow::Block)
            .wait(WaitStrategy::default().yield_for(yield_for));
        if single {
            config = config.single_producer();
        }
        let topic: Topic<u64> = Topic::new("gate", config).unwrap();
        let mut reader = topic.reader(0, Start::Earliest).unwrap();
        let (count, waker) = counting_waker();
        let mut cx = Context::from_waker(&waker);
        topic.publish(0).unwrap();
        let mut publish = pin!(topic.publish_async(1));
        assert!(publish.as_mut().poll(&mut cx).is_pending(), "full");
        assert_eq!(wakes(&count), 1, "yielding: woken by its own poll");
        read_one(&mut reader, 0);
        assert_eq!(wakes(&count), 1, "not announced: the read wakes nobody");
        let Poll::Ready(Ok(p)) = publish.as_mut().poll(&mut cx) else {
            panic!("room after the read")
        };
        assert_eq!(p.offset, 1);

        let mut publish = pin!(topic.publish_async(2));
        assert!(publish.as_mut().poll(&mut cx).is_pending());
        assert_eq!(wakes(&count), 2);
        std::thread::sleep(yield_for * 3);
        assert!(publish.as_mut().poll(&mut cx).is_pending());
        assert_eq!(wakes(&count), 2, "announced: not woken by its poll");
        read_one(&mut reader, 1);
        assert_eq!(wakes(&count), 3, "the read made room and woke it");
        let Poll::Ready(Ok(p)) = publish.as_mut().poll(&mut cx) else {
            panic!("room after the read")
        };
        assert_eq!(p.offset, 2);
    }
}

/// A `Producer`'s async publish waits as `Topic::publish_async` does: yielding first, then
/// announced, woken by the read that makes room; the value goes where the first try meant it.
/// Single and many producers, one partition and two.
#[test]
fn a_producer_task_yields_then_waits_for_room() {
    use logbus::Overflow;
    for (single, partitions) in [(true, 1), (false, 1), (true, 2), (false, 2)] {
        let yield_for = Duration::from_millis(2);
        let mut config = TopicConfig::default()
            .partitions(partitions)
            .max_records(1)
            .overflow(Overflow::Block)
            .wait(WaitStrategy::default().yield_for(yield_for));
        if single {
            config = config.single_producer();
        }
        let topic: Topic<u64> = Topic::new("gate", config).unwrap();
        let mut readers: Vec<_> = (0..partitions)
            .map(|p| topic.reader(p, Start::Earliest).unwrap())
            .collect();
        let mut producer = topic.producer().unwrap();
        let (count, waker) = counting_waker();
        let mut cx = Context::from_waker(&waker);
        // Fill every partition.
        for v in 0..partitions as u64 {
            let mut publish = pin!(producer.publish_async(v));
            let Poll::Ready(Ok(p)) = publish.as_mut().poll(&mut cx) else {
                panic!("room for the first record")
            };
            assert_eq!((p.partition, p.offset), (v as u32, 0));
        }
        // The next goes to partition 0, full: yielding, then announced.
        let mut publish = pin!(producer.publish_async(10));
        assert!(publish.as_mut().poll(&mut cx).is_pending(), "full");
        assert_eq!(wakes(&count), 1, "yielding: woken by its own poll");
        std::thread::sleep(yield_for * 3);
        assert!(publish.as_mut().poll(&mut cx).is_pending());
        assert_eq!(wakes(&count), 1, "announced: not woken by its poll");
        if partitions > 1 {
            read_one(&mut readers[1], 1);
            assert_eq!(wakes(&count), 1, "room elsewhere wakes nobody");
        }
        read_one(&mut readers[0], 0);
        assert_eq!(wakes(&count), 2, "the read made room and woke it");
        let Poll::Ready(Ok(p)) = publish.as_mut().poll(&mut cx) else {
            panic!("room after the read")
        };
        assert_eq!(
            (p.partition, p.offset),
            (0, 1),
            "where the first try meant it"
        );
        assert_eq!(parking(&topic).0, 0);
        read_one(&mut readers[0], 10);
    }
}

/// A producer task and the reader task that makes its room share one runtime thread: a producer
/// that blocked its thread when the log is full would never let the reader run. Through a small
/// `Block` log, every record arrives in order.
#[test]
fn a_producer_task_and_its_reader_share_a_thread() {
    use logbus::Overflow;
    const RECORDS: u64 = 20_000;
    let config = TopicConfig::default()
        .single_producer()
        .max_records(8)
        .overflow(Overflow::Block);
    let topic: Topic<u64> = Topic::new("shared", config).unwrap();
    let mut reader = topic.reader(0, Start::Earliest).unwrap();
    let mut producer = topic.producer().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let read = runtime.block_on(async move {
        let reading = tokio::spawn(async move {
            for expected in 0..RECORDS {
                assert_eq!(*reader.next_async().await.unwrap(), expected);
            }
            RECORDS
        });
        for v in 0..RECORDS {
            assert_eq!(producer.publish_async(v).await.unwrap().offset, v);
        }
        reading.await.unwrap()
    });
    assert_eq!(read, RECORDS);
}

/// Closing the topic wakes an async publisher waiting for room; it gets its value back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_wakes_a_waiting_async_publisher() {
    use logbus::{Overflow, PublishError};
    let config = TopicConfig::default()
        .max_records(1)
        .overflow(Overflow::Block);
    let topic: Topic<u64> = Topic::new("closing", config).unwrap();
    let _stuck = topic.reader(0, Start::Earliest).unwrap();
    topic.publish_async(1).await.unwrap();
    let t = topic.clone();
    let waiting = tokio::spawn(async move { t.publish_async(2).await });
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(
        !waiting.is_finished(),
        "the log is full: the publisher waits"
    );
    assert_eq!(topic.stats().partitions[0].end, 1);
    topic.close();
    let result = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("close did not wake the waiting publisher")
        .unwrap();
    assert!(matches!(result, Err(PublishError::Closed(2))));
}

/// The async publishes' errors carry the value back at once: `Full` under `Reject` (no waiting),
/// `Closed` once the topic is closed; through a topic and through a producer.
#[test]
fn async_publish_errors_hand_the_value_back() {
    use logbus::{Overflow, PublishError};
    let waker = noop_waker();
    let mut cx = Context::from_waker(&waker);
    for single in [false, true] {
        let mut config = TopicConfig::default()
            .max_records(1)
            .overflow(Overflow::Reject);
        if single {
            config = config.single_producer();
        }
        let topic: Topic<u64> = Topic::new("reject", config).unwrap();
        let _stuck = topic.reader(0, Start::Earliest).unwrap();
        {
            let mut producer = topic.producer().unwrap();
            let first = pin!(producer.publish_async(1)).poll(&mut cx);
            assert!(matches!(first, Poll::Ready(Ok(p)) if p.offset == 0));
            let full = pin!(producer.publish_async(2)).poll(&mut cx);
            assert!(matches!(full, Poll::Ready(Err(PublishError::Full(2)))));
        }
        let full = pin!(topic.publish_async(3)).poll(&mut cx);
        assert!(matches!(full, Poll::Ready(Err(PublishError::Full(3)))));
        topic.close();
        let closed = pin!(topic.publish_async(4)).poll(&mut cx);
        assert!(matches!(closed, Poll::Ready(Err(PublishError::Closed(4)))));
        let mut producer = topic.producer().unwrap();
        let closed = pin!(producer.publish_async(5)).poll(&mut cx);
        assert!(matches!(closed, Poll::Ready(Err(PublishError::Closed(5)))));
    }
}
