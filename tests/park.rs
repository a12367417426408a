//! I5: a parked reader costs no CPU and is woken by the publish it waits for; a publish with no
//! reader parked does no wake-up work (no system call). A publisher blocked by `Overflow::Block`
//! parks too, however often its readers woke it before. A reader between polling and parking
//! yields, polling between its yields unless its strategy does not poll: a record or a deadline
//! ends that phase, and nothing wakes it.

#![cfg(target_os = "linux")]

use std::{
    sync::mpsc,
    thread,
    time::{Duration, Instant},
};

use logbus::{Overflow, ReadError, Start, Topic, TopicConfig, WaitStrategy};

/// User + system CPU time of one thread, in clock ticks, from /proc.
fn thread_cpu_ticks(tid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
    // Fields after the command name (which is in parentheses and may hold spaces).
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the full line: 12 and 13 after the name.
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

fn thread_state(tid: i32) -> char {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
    stat[stat.rfind(')').unwrap() + 2..].chars().next().unwrap()
}

fn wait_until(mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "condition never became true"
        );
        thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_parked_reader_sleeps_and_costs_no_cpu() {
    let topic = Topic::<u64>::new("idle", TopicConfig::default()).unwrap();
    let mut reader = topic.reader(0, Start::Earliest).unwrap();
    let (tx, rx) = mpsc::channel();
    let h = thread::spawn(move || {
        // SAFETY: gettid has no preconditions.
        tx.send(unsafe { libc::gettid() }).unwrap();
        *reader.next().unwrap()
    });
    let tid = rx.recv().unwrap();
    wait_until(|| topic.stats().partitions[0].parked_readers == 1);
    let before = thread_cpu_ticks(tid);
    thread::sleep(Duration::from_millis(300));
    assert_eq!(
        thread_state(tid),
        'S',
        "the parked reader is asleep in the kernel"
    );
    let used = thread_cpu_ticks(tid) - before;
    assert!(
        used <= 1,
        "a parked reader used {used} ticks of CPU in 300 ms"
    );
    topic.publish(7).unwrap();
    assert_eq!(h.join().unwrap(), 7, "the publish woke it");
    let stats = &topic.stats().partitions[0];
    assert_eq!(stats.wakeups, 1);
    assert_eq!(stats.parked_readers, 0);
    // Once, unless the futex returned spuriously and the reader parked again.
    assert!(stats.parks >= 1, "the park is counted");
}

/// One producer or many, with or without timestamps: each kind of log publishes its own way.
fn kinds() -> [(&'static str, TopicConfig<u64>); 4] {
    [
        ("many producers", TopicConfig::default()),
        (
            "many producers, no timestamps",
            TopicConfig::default().timestamps(false),
        ),
        ("single producer", TopicConfig::default().single_producer()),
        (
            "single producer, no timestamps",
            TopicConfig::default().single_producer().timestamps(false),
        ),
    ]
}

/// Every kind of log has its own publish path (one or many producers, with or without
/// timestamps; a single producer without them takes a path of its own), and each must wake a
/// reader parked on it. The reader's deadline only keeps a missed wake-up from hanging the test.
#[test]
fn a_producer_wakes_a_parked_reader_on_every_kind_of_log() {
    for (kind, config) in kinds() {
        let topic = Topic::<u64>::new("kinds", config).unwrap();
        let mut producer = topic.producer().unwrap();
        let mut reader = topic.reader(0, Start::Earliest).unwrap();
        // A producer's first publish in a segment takes the long path, the next ones the short.
        producer.publish(4).unwrap();
        let h = thread::spawn(move || {
            let first = reader.next().map(|r| *r.value());
            let second = reader
                .next_timeout(Duration::from_secs(30))
                .map(|r| *r.value());
            (first, second)
        });
        wait_until(|| topic.stats().partitions[0].parked_readers == 1);
        producer.publish(5).unwrap();
        assert_eq!(
            h.join().unwrap(),
            (Ok(4), Ok(5)),
            "{kind}: the publish woke the reader"
        );
        let stats = &topic.stats().partitions[0];
        assert_eq!(stats.wakeups, 1, "{kind}");
        assert_eq!(stats.parked_readers, 0, "{kind}");
    }
}

/// The same for slices: a single producer without timestamps publishes them from the place it
/// keeps for its single records too (inside a segment it has entered), the others through their
/// writers.
#[test]
fn a_slice_wakes_a_parked_reader_on_every_kind_of_log() {
    for (kind, config) in kinds() {
        let topic = Topic::<u64>::new("kinds", config).unwrap();
        let mut producer = topic.producer().unwrap();
        let mut reader = topic.reader(0, Start::Earliest).unwrap();
        // The first slice enters the segment, so the second is inside it.
        assert_eq!(producer.publish_slice(&[4]).unwrap().offsets, 0..1);
        let h = thread::spawn(move || {
            let first = reader.next().map(|r| *r.value());
            let mut rest = Vec::new();
            for _ in 0..2 {
                rest.push(
                    reader
                        .next_timeout(Duration::from_secs(30))
                        .map(|r| *r.value()),
                );
            }
            (first, rest)
        });
        wait_until(|| topic.stats().partitions[0].parked_readers == 1);
        assert_eq!(producer.publish_slice(&[5, 6]).unwrap().offsets, 1..3);
        assert_eq!(
            h.join().unwrap(),
            (Ok(4), vec![Ok(5), Ok(6)]),
            "{kind}: the slice woke the reader"
        );
        let stats = &topic.stats().partitions[0];
        assert_eq!(stats.wakeups, 1, "{kind}");
        assert_eq!(stats.parked_readers, 0, "{kind}");
    }
}

#[test]
fn publishing_with_nobody_parked_does_no_wake_work() {
    let topic = Topic::<u64>::new("busy", TopicConfig::default()).unwrap();
    let mut reader = topic.reader(0, Start::Earliest).unwrap();
    let mut p = topic.producer().unwrap();
    for i in 0..100_000 {
        p.publish(i).unwrap();
    }
    for i in 0..100_000 {
        assert_eq!(*reader.next().unwrap(), i);
    }
    let stats = &topic.stats().partitions[0];
    assert_eq!(stats.wakeups, 0, "no reader was parked, no wake-up made");
    assert_eq!(stats.parks, 0, "every record was ready when read");
}

#[test]
fn only_parked_readers_are_woken() {
    let topic = Topic::<u64>::new("some", TopicConfig::default()).unwrap();
    let parked: Vec<_> = (0..3)
        .map(|_| {
            let mut r = topic.reader(0, Start::Earliest).unwrap();
            thread::spawn(move || *r.next().unwrap())
        })
        .collect();
    // A fourth reader exists but is not waiting.
    let _idle = topic.reader(0, Start::Earliest).unwrap();
    wait_until(|| topic.stats().partitions[0].parked_readers == 3);
    topic.publish(11).unwrap();
    for h in parked {
        assert_eq!(h.join().unwrap(), 11);
    }
    assert_eq!(topic.stats().partitions[0].wakeups, 3);
}

#[test]
fn a_blocked_publisher_parks_after_many_short_parks_and_costs_no_cpu() {
    const CAP: u64 = 64;
    const ROUNDS: u64 = 40;
    let topic = Topic::<u64>::new(
        "blocked",
        TopicConfig::default()
            .max_records(CAP)
            .overflow(Overflow::Block),
    )
    .unwrap();
    let mut reader = topic.reader(0, Start::Earliest).unwrap();
    let mut producer = topic.producer().unwrap();
    let (tx, rx) = mpsc::channel();
    let h = thread::spawn(move || {
        // SAFETY: gettid has no preconditions.
        tx.send(unsafe { libc::gettid() }).unwrap();
        for i in 0..CAP * (ROUNDS + 2) {
            producer.publish(i).unwrap();
        }
    });
    let tid = rx.recv().unwrap();
    let asleep = |tid| {
        let start = Instant::now();
        while thread_state(tid) != 'S' {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "the blocked publisher never went to sleep"
            );
        }
    };
    let mut next = 0;
    // Wake it as soon as it sleeps, many times: each park is short, which lengthens how long it
    // yields before the next one (up to a bound).
    for _ in 0..ROUNDS {
        asleep(tid);
        for _ in 0..CAP {
            assert_eq!(*reader.next().unwrap(), next, "in order, nothing lost");
            next += 1;
        }
    }
    // Now the reader stops: the publisher still ends up asleep, and stays there at no cost.
    asleep(tid);
    let before = thread_cpu_ticks(tid);
    thread::sleep(Duration::from_millis(300));
    assert_eq!(thread_state(tid), 'S', "the blocked publisher sleeps");
    let used = thread_cpu_ticks(tid) - before;
    assert!(
        used <= 1,
        "a parked publisher used {used} ticks of CPU in 300 ms"
    );
    while next < CAP * (ROUNDS + 2) {
        assert_eq!(
            *reader.next().unwrap(),
            next,
            "the reader woke it; nothing lost"
        );
        next += 1;
    }
    h.join().unwrap();
}

/// Checks that no reader of `topic`'s partition 0 ever parked (its `parks` count, which a reader
/// that has since returned still shows; `parked_readers` would not).
fn assert_never_parked(topic: &Topic<u64>, what: &str) {
    assert_eq!(topic.stats().partitions[0].parks, 0, "{what}");
}

/// Strategies that keep a reader in its yielding phase for at least an hour: one that polls
/// between its yields (a quarter of `spin_polls`), one that only yields, and the preset that
/// never parks.
fn yielding_for_an_hour() -> [(&'static str, WaitStrategy); 3] {
    let hour = Duration::from_secs(3600);
    [
        (
            "polling between yields",
            WaitStrategy::default().spin_polls(64).yield_for(hour),
        ),
        (
            "only yielding",
            WaitStrategy::default().spin_polls(0).yield_for(hour),
        ),
        ("busy spin", WaitStrategy::busy_spin()),
    ]
}

#[test]
fn a_yielding_reader_takes_a_record_without_a_wake_up() {
    for (kind, wait) in yielding_for_an_hour() {
        let topic = Topic::<u64>::new("yielding", TopicConfig::default().wait(wait)).unwrap();
        let mut reader = topic.reader(0, Start::Earliest).unwrap();
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            tx.send(None).unwrap();
            tx.send(Some(*reader.next().unwrap())).unwrap();
        });
        assert_eq!(rx.recv().unwrap(), None);
        thread::sleep(Duration::from_millis(20)); // past its polls, into its yields
        assert_eq!(
            topic.stats().partitions[0].parked_readers,
            0,
            "{kind}: still yielding"
        );
        topic.publish(9).unwrap();
        let got = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("{kind}: the yielding reader never looked again"));
        assert_eq!(got, Some(9), "{kind}");
        assert_eq!(
            topic.stats().partitions[0].wakeups,
            0,
            "{kind}: taken while yielding, with no wake-up"
        );
    }
}

/// A deadline ends the yielding phase, and the polling phase however long its polls would last
/// (`spin_polls(u32::MAX)`: about two minutes of them).
#[test]
fn a_deadline_ends_the_yielding_phase() {
    let polling_for_minutes = (
        "polling for minutes",
        WaitStrategy::default()
            .spin_polls(u32::MAX)
            .yield_for(Duration::from_secs(3600)),
    );
    for (kind, wait) in yielding_for_an_hour()
        .into_iter()
        .chain([polling_for_minutes])
    {
        let topic = Topic::<u64>::new("deadline", TopicConfig::default().wait(wait)).unwrap();
        let mut reader = topic.reader(0, Start::Earliest).unwrap();
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let got = reader
                .next_timeout(Duration::from_millis(10))
                .map(|r| *r.value());
            tx.send(got).unwrap();
        });
        // Far longer than the deadline, far shorter than the hour the reader would otherwise yield.
        let got = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("{kind}: the deadline did not end the yielding"));
        assert_eq!(got, Err(ReadError::Timeout), "{kind}");
        assert_never_parked(&topic, &format!("{kind}: timed out without parking"));
    }
}

/// A close reaches a reader that is still polling, however long its polling phase: it
/// publishes nothing, so the polls' cheap look at the published end cannot see it, and a full
/// look-up now and then must. Here the polls alone would last about two minutes.
#[test]
fn a_close_reaches_a_reader_in_a_long_polling_phase() {
    let hour = Duration::from_secs(3600);
    for config in [
        TopicConfig::<u64>::default().single_producer(),
        TopicConfig::default(),
    ] {
        let wait = WaitStrategy::default().spin_polls(u32::MAX).yield_for(hour);
        let topic = Topic::<u64>::new("polling", config.wait(wait)).unwrap();
        let mut reader = topic.reader(0, Start::Earliest).unwrap();
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let first = reader.next().map(|r| *r.value());
            tx.send(first).unwrap();
            tx.send(reader.next().map(|r| *r.value())).unwrap();
        });
        topic.publish(7).unwrap();
        assert_eq!(rx.recv().unwrap(), Ok(7));
        thread::sleep(Duration::from_millis(20)); // back to polling for the next record
        topic.close();
        let got = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the polling reader never saw the close");
        assert_eq!(got, Err(ReadError::Closed));
        assert_never_parked(&topic, "seen while polling, never parked");
    }
}

/// A close reaches a reader in its yielding phase, whatever it does there (polls between yields,
/// only yields, or polls on alone on its CPU): a close publishes nothing, so a look at the
/// published end alone cannot see it. Otherwise each reader here would yield for an hour, and
/// the busy spinner for ever.
#[test]
fn a_close_reaches_a_reader_in_its_yielding_phase() {
    for (kind, wait) in yielding_for_an_hour() {
        for config in [
            TopicConfig::<u64>::default().single_producer(),
            TopicConfig::default(),
        ] {
            let topic = Topic::<u64>::new("yielding", config.wait(wait)).unwrap();
            let mut reader = topic.reader(0, Start::Earliest).unwrap();
            let (tx, rx) = mpsc::channel();
            thread::spawn(move || {
                tx.send(reader.next().map(|r| *r.value())).unwrap();
                tx.send(reader.next().map(|r| *r.value())).unwrap();
            });
            topic.publish(3).unwrap();
            assert_eq!(rx.recv().unwrap(), Ok(3), "{kind}");
            thread::sleep(Duration::from_millis(20)); // past its polls, into its yields
            assert_eq!(
                topic.stats().partitions[0].parked_readers,
                0,
                "{kind}: still yielding"
            );
            topic.close();
            let got = rx
                .recv_timeout(Duration::from_secs(30))
                .unwrap_or_else(|_| panic!("{kind}: the yielding reader never saw the close"));
            assert_eq!(got, Err(ReadError::Closed), "{kind}");
            assert_never_parked(
                &topic,
                &format!("{kind}: seen while yielding, never parked"),
            );
        }
    }
}

/// `WaitStrategy::busy_spin` never parks: neither a reader waiting on a quiet topic nor a
/// publisher blocked by `Overflow::Block`. Both stay runnable ('R', running or yielding, never
/// asleep in the kernel) however long they wait, and what ends their waits needs no wake-up call.
/// The default parks both within a fraction of a millisecond (the tests above).
#[test]
fn a_busy_spinning_reader_and_blocked_publisher_never_park() {
    const CAP: u64 = 64;
    let topic = Topic::<u64>::new(
        "spinning",
        TopicConfig::default()
            .max_records(CAP)
            .overflow(Overflow::Block)
            .wait(WaitStrategy::busy_spin()),
    )
    .unwrap();
    let never_asleep = |tid, who: &str| {
        // 100 ms: 500 times the default's yielding phase, long enough for any park to happen.
        for _ in 0..20 {
            thread::sleep(Duration::from_millis(5));
            assert_eq!(
                thread_state(tid),
                'R',
                "the {who} never sleeps in the kernel"
            );
        }
    };

    // A reader waiting on a quiet topic.
    let mut reader = topic.reader(0, Start::Earliest).unwrap();
    let (tx, rx) = mpsc::channel();
    let h = thread::spawn(move || {
        // SAFETY: gettid has no preconditions.
        tx.send(unsafe { libc::gettid() }).unwrap();
        let first = *reader.next().unwrap();
        (first, reader)
    });
    let tid = rx.recv().unwrap();
    never_asleep(tid, "waiting reader");
    topic.publish(1).unwrap();
    let (first, mut reader) = h.join().unwrap();
    assert_eq!(first, 1);
    let stats = &topic.stats().partitions[0];
    assert_eq!(
        (stats.parks, stats.wakeups),
        (0, 0),
        "the reader never parked, so nobody woke it"
    );

    // A publisher blocked by a full topic: the reader took one record, the publisher fills the
    // rest and one more, then waits for room.
    let (tx, rx) = mpsc::channel();
    let h = thread::spawn(move || {
        // SAFETY: gettid has no preconditions.
        tx.send(unsafe { libc::gettid() }).unwrap();
        for i in 2..=CAP + 2 {
            topic.publish(i).unwrap();
        }
        topic
    });
    let tid = rx.recv().unwrap();
    never_asleep(tid, "blocked publisher");
    for want in 2..=CAP + 2 {
        assert_eq!(*reader.next().unwrap(), want, "in order, nothing lost");
    }
    let topic = h.join().unwrap();
    let stats = &topic.stats().partitions[0];
    assert_eq!((stats.parks, stats.wakeups), (0, 0), "nobody parked");
}
