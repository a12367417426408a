//! Consumer groups: assignment, hand-over, leave, churn under load, push members, stats, errors.

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc, Mutex,
    },
    thread,
    time::Duration,
};

use logbus::{
    Assignor, Error, GroupError, RangeAssignor, ReadError, Rebalance, RoundRobinAssignor, Start,
    Topic, TopicConfig, WaitStrategy,
};

mod common;
use common::publish_either_side_of_a_time;

fn topic(partitions: u32) -> Topic<u64> {
    Topic::new("t", TopicConfig::default().partitions(partitions)).unwrap()
}

#[test]
fn assignors_are_deterministic_and_cover_every_partition() {
    let members = ["a", "b", "c"];
    assert_eq!(
        RangeAssignor.assign(8, &members),
        vec![vec![0, 1, 2], vec![3, 4, 5], vec![6, 7]]
    );
    assert_eq!(
        RoundRobinAssignor.assign(8, &members),
        vec![vec![0, 3, 6], vec![1, 4, 7], vec![2, 5]]
    );
    // More members than partitions: the extra ones get nothing.
    assert_eq!(
        RangeAssignor.assign(2, &members),
        vec![vec![0], vec![1], vec![]]
    );
    assert_eq!(
        RoundRobinAssignor.assign(2, &members),
        vec![vec![0], vec![1], vec![]]
    );
    assert!(RangeAssignor.assign(4, &[]).is_empty());
}

#[test]
fn a_member_joining_an_idle_group_gets_partitions_at_once() {
    let t = topic(4);
    let group = t.group("g").unwrap();
    let mut a = group.join("a").unwrap();
    assert_eq!(a.assignment(), [0, 1, 2, 3]);
    // The first poll reports the assignment.
    assert_eq!(
        a.poll(10).unwrap_err(),
        GroupError::Rebalanced(Rebalance {
            revoked: vec![],
            assigned: vec![0, 1, 2, 3]
        })
    );
    assert_eq!(a.poll(10).unwrap_err(), GroupError::Read(ReadError::Empty));
}

#[test]
fn hand_over_lets_the_old_owner_commit_and_the_new_one_resume() {
    let t = topic(4);
    for i in 0..40 {
        t.publish_to(i % 4, u64::from(i)).unwrap();
    }
    let group = t.group("g").unwrap();
    let mut b = group.join("b").unwrap();
    let _ = b.poll(1); // the assignment event
                       // b reads partition 0 and 1 a little and commits.
    let mut read = 0;
    while read < 8 {
        match b.poll(3) {
            Ok(batch) => read += batch.len(),
            Err(e) => panic!("{e}"),
        }
    }
    b.commit();
    // `a` sorts first, so the range assignor gives it partitions 0 and 1: b must hand them over.
    let mut a = group.join("a").unwrap();
    assert!(a.assignment().is_empty(), "a waits until b releases");
    assert_eq!(
        group.stats().owners,
        [
            Some("b".into()),
            Some("b".into()),
            Some("b".into()),
            Some("b".into())
        ]
    );
    // Step 1: b hears of it and still owns the partitions; it may commit.
    match b.poll(1) {
        Err(GroupError::Rebalanced(r)) => assert_eq!(r.revoked, [0, 1]),
        other => panic!("expected a revocation, got {:?}", other.map(|b| b.len())),
    }
    assert_eq!(b.assignment(), [0, 1, 2, 3]);
    b.commit();
    let committed: Vec<_> = (0..2).map(|p| b.committed(p).unwrap()).collect();
    // Step 2: b's next poll releases them.
    let _ = b.poll(1);
    assert_eq!(b.assignment(), [2, 3]);
    // Step 3: a takes them, at the group's committed offsets.
    match a.poll(1) {
        Err(GroupError::Rebalanced(r)) => assert_eq!(r.assigned, [0, 1]),
        other => panic!("expected an assignment, got {:?}", other.map(|b| b.len())),
    }
    assert_eq!(a.assignment(), [0, 1]);
    for p in 0..2 {
        assert_eq!(Some(a.position(p).unwrap()), committed[p as usize]);
    }
    assert_eq!(
        a.position(2).unwrap_err(),
        Error::NotAssigned { partition: 2 }
    );
    let stats = group.stats();
    assert_eq!(stats.members, ["a", "b"]);
    assert_eq!(
        stats.owners,
        [
            Some("a".into()),
            Some("a".into()),
            Some("b".into()),
            Some("b".into())
        ]
    );
}

#[test]
fn a_leaving_member_releases_its_partitions_and_nothing_is_lost() {
    let t = topic(2);
    let group = t.group("g").unwrap();
    let mut a = group.join("a").unwrap();
    let mut b = group.join("b").unwrap();
    // Settle: a gives partition 1 to b.
    for _ in 0..3 {
        let _ = a.poll(1);
        let _ = b.poll(1);
    }
    assert_eq!((a.assignment(), b.assignment()), (vec![0], vec![1]));
    for i in 0..10 {
        t.publish_to(i % 2, u64::from(i)).unwrap();
    }
    // b reads partition 1 but commits only the first record, then leaves.
    let first = b.poll(1).unwrap().first_offset();
    b.commit();
    let _ = b.poll(10).unwrap();
    b.leave();
    // a takes partition 1 over at the committed offset: the uncommitted records come again.
    let mut seen_p1 = Vec::new();
    loop {
        match a.poll_timeout(10, Duration::from_secs(5)) {
            Ok(batch) => {
                if batch.partition() == 1 {
                    seen_p1.extend(batch.iter().map(|r| r.offset()));
                }
            }
            Err(GroupError::Rebalanced(_)) => {}
            Err(GroupError::Read(ReadError::Timeout)) => break,
            Err(e) => panic!("{e}"),
        }
        if a.assignment() == [0, 1] && seen_p1.len() == 4 {
            break;
        }
    }
    assert_eq!(seen_p1, (first + 1..5).collect::<Vec<_>>());
}

/// A rebalance reaches a member that is still polling its partitions, however long its
/// polling phase: the interrupt publishes nothing, so the polls' look at the published ends
/// cannot see it, and a full look-up now and then must. Here the polls alone would last about
/// two minutes.
#[test]
fn a_join_reaches_a_member_in_a_long_polling_phase() {
    let wait = WaitStrategy::default()
        .spin_polls(u32::MAX)
        .yield_for(Duration::from_secs(3600));
    a_join_reaches_a_waiting_member(wait, "polling");
}

/// A rebalance reaches a member in its yielding phase, where a thread alone on its CPU polls on
/// between its yields: the interrupt publishes nothing, so a look at the published ends alone
/// cannot see it. `busy_spin` never parks, so otherwise the member would wait for ever.
#[test]
fn a_join_reaches_a_member_in_its_yielding_phase() {
    a_join_reaches_a_waiting_member(WaitStrategy::busy_spin(), "yielding");
}

/// A member of a two-partition topic waits with `wait` on its empty partitions for 20 ms (`how`
/// it waits by then), and a second member's join must revoke partition 1 from it.
fn a_join_reaches_a_waiting_member(wait: WaitStrategy, how: &str) {
    let t = Topic::<u64>::new("t", TopicConfig::default().partitions(2).wait(wait)).unwrap();
    let group = t.group("g").unwrap();
    let mut a = group.join("a").unwrap();
    assert!(matches!(a.poll(1), Err(GroupError::Rebalanced(r)) if r.assigned == [0, 1]));
    let (tx, rx) = std::sync::mpsc::channel();
    thread::spawn(move || {
        tx.send(a.poll_timeout(1, Duration::from_secs(600)).map(|b| b.len()))
            .unwrap();
    });
    thread::sleep(Duration::from_millis(20));
    let _b = group.join("b").unwrap();
    let got = rx
        .recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| panic!("the {how} member never heard of the rebalance"));
    assert!(
        matches!(got, Err(GroupError::Rebalanced(ref r)) if r.revoked == [1]),
        "{how}: {got:?}"
    );
}

#[test]
fn a_member_without_partitions_sleeps_until_the_group_changes() {
    let t = topic(1);
    let group = t.group("g").unwrap();
    let a = group.join("b").unwrap();
    let mut idle = group.join("c").unwrap();
    assert!(idle.assignment().is_empty());
    assert_eq!(
        idle.poll_timeout(1, Duration::from_millis(10)).unwrap_err(),
        GroupError::Read(ReadError::Timeout)
    );
    let h = thread::spawn(move || loop {
        match idle.poll_timeout(1, Duration::from_secs(30)) {
            Err(GroupError::Rebalanced(r)) if r.assigned == [0] => return true,
            Err(GroupError::Read(ReadError::Timeout)) => return false,
            _ => {}
        }
    });
    thread::sleep(Duration::from_millis(20));
    drop(a); // releases partition 0 and wakes the sleeping member
    assert!(h.join().unwrap());
}

/// Every member hears `Closed` once the group has read a closed topic to its end: the one with
/// no partitions waits (it could still be given one) and wakes when the owner finishes.
#[test]
fn members_hear_closed_once_the_group_has_read_everything() {
    let t = topic(1);
    let group = t.group("g").unwrap();
    let mut a = group.join("a").unwrap();
    let mut idle = group.join("b").unwrap();
    assert!(idle.assignment().is_empty());
    t.publish(7).unwrap();
    t.close();
    assert_eq!(
        idle.poll(1).unwrap_err(),
        GroupError::Read(ReadError::Empty),
        "the owner has not read its partition yet"
    );
    let asleep = thread::spawn(move || {
        let got = idle.poll_timeout(1, Duration::from_secs(60)).unwrap_err();
        (got, idle)
    });
    assert!(matches!(a.poll(1), Err(GroupError::Rebalanced(_))));
    assert_eq!(*a.poll(1).unwrap().values().next().unwrap(), 7);
    assert_eq!(a.poll(1).unwrap_err(), GroupError::Read(ReadError::Closed));
    let (got, mut idle) = asleep.join().unwrap();
    assert_eq!(got, GroupError::Read(ReadError::Closed));
    assert_eq!(
        idle.poll(1).unwrap_err(),
        GroupError::Read(ReadError::Closed)
    );
    // A member that leaves hands its partition over, and the group is not done until the new
    // owner has read it, from the group's commit (none here: at least once).
    drop(a);
    assert!(matches!(idle.poll(1), Err(GroupError::Rebalanced(r)) if r.assigned == [0]));
    assert_eq!(*idle.poll(1).unwrap().values().next().unwrap(), 7);
    assert_eq!(
        idle.poll(1).unwrap_err(),
        GroupError::Read(ReadError::Closed)
    );
}

/// A member whose partition is still on its way from another member when the topic closes waits
/// for it instead of saying `Closed`: the partition holds records nobody has read, and a member
/// that left on `Closed` would leave them without a reader.
#[test]
fn a_partition_on_its_way_is_read_after_the_close() {
    let t = topic(2);
    let group = t.group("g").unwrap();
    let mut a = group.join("a").unwrap();
    assert_eq!(a.assignment(), [0, 1]);
    let mut b = group.join("b").unwrap(); // meant to have partition 1, which `a` still holds
    assert!(b.assignment().is_empty());
    t.publish_to(0, 10).unwrap();
    t.publish_to(1, 11).unwrap();
    t.close();
    assert_eq!(b.poll(1).unwrap_err(), GroupError::Read(ReadError::Empty));
    let waiting = thread::spawn(move || {
        let got = b.poll_timeout(1, Duration::from_secs(60));
        (got.map(|batch| batch.len()), b)
    });
    // `a` hears of its assignment, then of the revocation, lets partition 1 go on its next poll,
    // and reads its own.
    assert!(matches!(a.poll(1), Err(GroupError::Rebalanced(r)) if r.assigned == [0, 1]));
    assert!(matches!(a.poll(1), Err(GroupError::Rebalanced(r)) if r.revoked == [1]));
    assert_eq!(*a.poll(1).unwrap().values().next().unwrap(), 10);
    assert_eq!(
        a.poll(1).unwrap_err(),
        GroupError::Read(ReadError::Empty),
        "partition 1 is not read yet"
    );
    let (got, mut b) = waiting.join().unwrap();
    assert_eq!(
        got.unwrap_err(),
        GroupError::Rebalanced(Rebalance {
            revoked: vec![],
            assigned: vec![1]
        })
    );
    assert_eq!(*b.poll(1).unwrap().values().next().unwrap(), 11);
    assert_eq!(b.poll(1).unwrap_err(), GroupError::Read(ReadError::Closed));
    assert_eq!(a.poll(1).unwrap_err(), GroupError::Read(ReadError::Closed));
}

/// Four members of a group on a two-partition topic read until `Closed` while records are
/// published and the topic closes, round after round: the two without partitions, and the one
/// waiting for a partition from the first owner (members join in turn, so hand-overs are under
/// way as the topic closes), all hear the close, and between them they read every record.
#[test]
fn every_member_hears_the_close_and_the_group_reads_everything() {
    for round in 0..100 {
        let t = topic(2);
        let group = t.group("g").unwrap();
        let (done, finished) = std::sync::mpsc::channel();
        let members: Vec<_> = (0..4)
            .map(|m| {
                let mut member = group.join(&format!("m{m}")).unwrap();
                let done = done.clone();
                thread::spawn(move || {
                    let mut read = 0;
                    loop {
                        match member.poll_timeout(64, Duration::from_secs(60)) {
                            Ok(batch) => read += batch.len(),
                            Err(GroupError::Rebalanced(_)) => {}
                            Err(GroupError::Read(ReadError::Closed)) => break,
                            Err(e) => panic!("round {round}, member {m}: {e}"),
                        }
                        member.commit();
                    }
                    done.send(read).unwrap();
                })
            })
            .collect();
        for v in 0..2000 {
            t.publish(v).unwrap();
        }
        t.close();
        let read: usize = (0..4)
            .map(|_| {
                finished
                    .recv_timeout(Duration::from_secs(60))
                    .unwrap_or_else(|_| panic!("round {round}: a member never heard the close"))
            })
            .sum();
        for m in members {
            m.join().unwrap();
        }
        // At least once: a partition handed over is read again from the last commit.
        assert!(read >= 2000, "round {round}: the group read {read} of 2000");
    }
}

/// A push subscription whose member has no partitions finishes once the group is done with the
/// closed topic: when the pull member that owns the partition has read it to the end.
#[test]
fn a_group_subscription_without_partitions_finishes_once_the_group_is_done() {
    let t = topic(1);
    let mut owner = t.group("workers").unwrap().join("a").unwrap();
    let sub = t
        .subscription("b")
        .group("workers")
        .handler(|_| Ok::<_, String>(()))
        .unwrap();
    assert_eq!(owner.assignment(), [0]);
    t.publish(1).unwrap();
    t.close();
    loop {
        match owner.poll_timeout(8, Duration::from_secs(60)) {
            Err(GroupError::Read(ReadError::Closed)) => break,
            Err(GroupError::Read(e)) => panic!("{e}"),
            _ => {}
        }
    }
    for _ in 0..60_000 {
        if sub.is_finished() {
            break;
        }
        thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(sub.stats().stopped, Some(logbus::Stopped::TopicClosed));
}

/// Two groups on one 8-partition topic; members join and leave at random during 200,000 publishes.
/// Members commit after every batch and when revoked, so each group sees every record exactly
/// once, and each partition's records in order inside each member.
#[test]
fn two_groups_see_every_record_exactly_once_under_churn() {
    const RECORDS: u64 = 200_000;
    let t = Topic::<u64>::new("churn", TopicConfig::default().partitions(8)).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let mut groups = Vec::new();
    for g in 0..2 {
        let group = t.group(&format!("group-{g}")).unwrap();
        if g == 1 {
            group.set_assignor(RoundRobinAssignor);
        }
        let seen = Arc::new(Mutex::new(HashMap::<(u32, u64), u32>::new()));
        let count = Arc::new(AtomicU64::new(0));
        let (group2, seen2, count2, done2) =
            (group.clone(), seen.clone(), count.clone(), done.clone());
        let controller = thread::spawn(move || {
            let mut rng = 0x1234_5678_9abc_def1_u64 + g;
            let mut next_name = 0;
            let mut members: Vec<(Arc<AtomicBool>, thread::JoinHandle<()>)> = Vec::new();
            let start_member = |name: String| {
                let stop = Arc::new(AtomicBool::new(false));
                let mut m = group2.join(&name).unwrap();
                let (seen, count, stop2) = (seen2.clone(), count2.clone(), stop.clone());
                let h = thread::spawn(move || {
                    let mut last: HashMap<u32, u64> = HashMap::new();
                    while !stop2.load(Ordering::SeqCst) {
                        match m.poll_timeout(256, Duration::from_millis(5)) {
                            Ok(batch) => {
                                let p = batch.partition();
                                let mut seen = seen.lock().unwrap();
                                for r in batch.iter() {
                                    if let Some(l) = last.get(&p) {
                                        assert!(r.offset() > *l, "partition order inside a member");
                                    }
                                    last.insert(p, r.offset());
                                    *seen.entry((p, r.offset())).or_default() += 1;
                                    count.fetch_add(1, Ordering::SeqCst);
                                }
                                drop(seen);
                                m.commit();
                            }
                            Err(GroupError::Rebalanced(r)) => {
                                if !r.revoked.is_empty() {
                                    m.commit();
                                }
                                for p in r.assigned {
                                    last.remove(&p);
                                }
                            }
                            Err(GroupError::Read(ReadError::Timeout | ReadError::Empty)) => {}
                            Err(e) => panic!("{e}"),
                        }
                    }
                    m.commit();
                });
                (stop, h)
            };
            while !done2.load(Ordering::SeqCst) {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                if members.is_empty() || (members.len() < 4 && !rng.is_multiple_of(3)) {
                    members.push(start_member(format!("m{next_name}")));
                    next_name += 1;
                } else if members.len() > 1 {
                    let (stop, h) = members.remove((rng % members.len() as u64) as usize);
                    stop.store(true, Ordering::SeqCst);
                    h.join().unwrap();
                }
                thread::sleep(Duration::from_micros(500 + rng % 3000));
            }
            for (stop, h) in members {
                stop.store(true, Ordering::SeqCst);
                h.join().unwrap();
            }
            next_name
        });
        groups.push((group, seen, count, controller));
    }
    let mut p = t.producer().unwrap();
    for i in 0..RECORDS {
        p.publish_keyed(&(i % 1000), i).unwrap();
        if i % 2000 == 0 {
            // Spread the publishes out so that members come and go while they happen.
            thread::sleep(Duration::from_millis(1));
        }
    }
    // Wait until both groups have seen everything (bounded), then stop the churn.
    for _ in 0..6000 {
        if groups
            .iter()
            .all(|(_, _, c, _)| c.load(Ordering::SeqCst) >= RECORDS)
        {
            break;
        }
        thread::sleep(Duration::from_millis(10));
    }
    done.store(true, Ordering::SeqCst);
    for (group, seen, count, controller) in groups {
        let joined = controller.join().unwrap();
        assert!(
            joined >= 10,
            "{}: only {joined} members joined: not much churn",
            group.name()
        );
        let seen = seen.lock().unwrap();
        let dups: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).take(5).collect();
        assert!(
            dups.is_empty(),
            "{}: delivered twice between commits: {dups:?}",
            group.name()
        );
        assert_eq!(
            seen.len() as u64,
            RECORDS,
            "{}: every record once",
            group.name()
        );
        assert_eq!(count.load(Ordering::SeqCst), RECORDS);
        let stats = group.stats();
        assert!(stats.members.is_empty());
        assert_eq!(stats.lag, vec![0; 8], "everything committed");
    }
}

#[test]
fn push_subscriptions_share_a_group() {
    let t = Topic::<u64>::new("jobs", TopicConfig::default().partitions(4)).unwrap();
    let handled = Arc::new(Mutex::new(Vec::new()));
    let mut subs = Vec::new();
    for name in ["w1", "w2"] {
        let h = handled.clone();
        let sub = t
            .subscription(name)
            .group("workers")
            .handler(move |r| {
                h.lock().unwrap().push((r.partition(), r.offset()));
                Ok::<_, String>(())
            })
            .unwrap();
        subs.push(sub);
    }
    for i in 0..1000u64 {
        t.publish_keyed(&i, i).unwrap();
    }
    let group = t.group("workers").unwrap();
    for _ in 0..3000 {
        if handled.lock().unwrap().len() >= 1000 && group.stats().owners.iter().all(Option::is_some)
        {
            break;
        }
        thread::sleep(Duration::from_millis(1));
    }
    for s in &subs {
        assert!(s.wait_idle(Duration::from_secs(30)));
    }
    let handled = handled.lock().unwrap();
    let mut sorted = handled.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), 1000, "every record handled");
    assert_eq!(handled.len(), 1000, "by exactly one member");
    let stats = group.stats();
    assert_eq!(stats.members, ["w1", "w2"]);
    assert_eq!(
        stats.owners,
        [
            Some("w1".into()),
            Some("w1".into()),
            Some("w2".into()),
            Some("w2".into())
        ]
    );
}

#[test]
fn a_member_seeks_its_partitions_to_a_time() {
    let t = topic(4);
    let middle = publish_either_side_of_a_time(&t, 8);
    let g = t.group("g").unwrap();
    let mut a = g.join("a").unwrap();
    let _b = g.join("b").unwrap();
    // The join of `b` reaches `a` through its polls: revoked, released, then settled.
    for _ in 0..100 {
        if a.assignment().len() == 2 {
            break;
        }
        let _ = a.poll(1);
    }
    assert_eq!(a.assignment().len(), 2, "the rebalance settled");
    let owned = a.assignment();
    a.seek_to_time(middle).unwrap();
    for &p in &owned {
        // Round-robin publishing: each partition took two records of each half.
        assert_eq!(a.position(p).unwrap(), 2, "partition {p}");
    }
    let mut values = Vec::new();
    while let Ok(batch) = a.poll(100) {
        values.extend(batch.values().copied());
    }
    values.sort_unstable();
    let want: Vec<u64> = (8..16)
        .filter(|v| owned.contains(&((v % 4) as u32)))
        .collect();
    assert_eq!(values, want);
    let untimed = Topic::<u64>::new("u", TopicConfig::default().timestamps(false)).unwrap();
    let mut m = untimed.group("g").unwrap().join("m").unwrap();
    assert!(matches!(
        m.seek_to_time(middle),
        Err(Error::InvalidConfig(_))
    ));
}

#[test]
fn group_errors_are_typed() {
    let t = topic(2);
    assert!(matches!(
        t.group("bad name"),
        Err(Error::InvalidName { .. })
    ));
    let g = t.group("g").unwrap();
    let _a = g.join("a").unwrap();
    assert_eq!(g.join("a").unwrap_err(), Error::MemberExists("a".into()));
    assert!(matches!(g.join(""), Err(Error::InvalidName { .. })));
    let mut a2 = g.join("z").unwrap();
    assert!(matches!(
        a2.seek(0, 0),
        Err(Error::NotAssigned { partition: 0 })
    ));
    assert!(matches!(
        a2.commit_offset(1, 0),
        Err(Error::NotAssigned { .. })
    ));
    assert!(matches!(
        a2.committed(5),
        Err(Error::NoSuchPartition { .. })
    ));
    // Start positions apply where nothing is committed.
    t.publish_to(0, 1).unwrap();
    let late = t.group("late").unwrap();
    late.set_start(Start::Latest);
    let m = late.join("m").unwrap();
    assert_eq!(m.position(0).unwrap(), 1);
}

/// An assignor that looks at its group while it assigns: what it saw, and the group it looks at
/// (set once the group exists).
struct Watching {
    group: Arc<std::sync::OnceLock<logbus::Group<u64>>>,
    saw: Arc<Mutex<Vec<Vec<String>>>>,
    panic_for: Option<&'static str>,
}

impl Assignor for Watching {
    fn assign(&self, partitions: u32, members: &[&str]) -> Vec<Vec<u32>> {
        if let Some(group) = self.group.get() {
            // The group's own lock: an assignor run under it would deadlock here.
            self.saw.lock().unwrap().push(group.stats().members);
        }
        if let Some(name) = self.panic_for {
            assert!(!members.contains(&name), "the assignor refuses {name}");
        }
        RoundRobinAssignor.assign(partitions, members)
    }
}

/// The assignor is the application's code: it runs holding none of the group's locks (I6), so
/// it may call the group, and its plan still decides the assignment.
#[test]
fn an_assignor_may_call_its_group() {
    let t = topic(4);
    let group = t.group("g").unwrap();
    let (cell, saw) = (Arc::new(std::sync::OnceLock::new()), Arc::default());
    group.set_assignor(Watching {
        group: cell.clone(),
        saw: Arc::clone(&saw),
        panic_for: None,
    });
    cell.set(group.clone()).ok().unwrap();
    let mut a = group.join("a").unwrap();
    assert_eq!(a.assignment(), [0, 1, 2, 3]);
    let _b = group.join("b").unwrap();
    // `a` hands over what the assignor's plan (round robin) gives `b`.
    let _ = a.poll(10); // the first assignment
    assert_eq!(
        a.poll(10).unwrap_err(),
        GroupError::Rebalanced(Rebalance {
            revoked: vec![1, 3],
            assigned: vec![]
        })
    );
    assert_eq!(
        *saw.lock().unwrap(),
        [vec!["a".to_owned()], vec!["a".to_owned(), "b".to_owned()]],
        "the members the group showed the assignor, at each join"
    );
    // The assignor holds the group, which holds the topic, which holds the assignor: replacing
    // it ends the cycle, so the topic is freed with the test's handles.
    group.set_assignor(RangeAssignor);
}

/// An assignor that panics: the join that ran it panics, the group keeps a valid assignment
/// (the range assignor's, for that rebalance) and the name is free again.
#[test]
fn a_panicking_assignor_fails_the_join_and_breaks_nothing() {
    let t = topic(4);
    let group = t.group("g").unwrap();
    group.set_assignor(Watching {
        group: Arc::default(),
        saw: Arc::default(),
        panic_for: Some("bad"),
    });
    let mut a = group.join("a").unwrap();
    let joined = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| group.join("bad")));
    assert!(joined.is_err(), "the assignor's panic reaches the caller");
    assert_eq!(group.stats().members, ["a"], "the failed member left");
    // `a` is alone again and keeps every partition: nothing to hand over.
    loop {
        match a.poll(10) {
            Err(GroupError::Rebalanced(r)) => assert!(r.revoked.is_empty(), "{r:?}"),
            Err(GroupError::Read(ReadError::Empty)) => break,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(a.assignment(), [0, 1, 2, 3]);
    group.set_assignor(RangeAssignor);
    let _bad = group.join("bad").unwrap();
    assert_eq!(
        group.stats().members,
        ["a", "bad"],
        "the name is free again"
    );
}
