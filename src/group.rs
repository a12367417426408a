//! Consumer groups: members share a topic's partitions; every group sees every record.
//!
//! Each partition belongs to at most one member of a group at a time. An [`Assignor`] computes the
//! target assignment from the sorted member names whenever a member joins or leaves (default
//! [`RangeAssignor`]). Moving a partition is a hand-over:
//! 1. its current owner learns of the rebalance on its next poll ([`GroupError::Rebalanced`] with
//!    the partition in `revoked`) and still owns it, so it may commit;
//! 2. on its following poll (or when it leaves) it releases the partition;
//! 3. only then does the new owner take it, starting at the group's committed offset.
//!
//! So no record is delivered to two members of one group between commits, except the records
//! after the last commit of a revoked partition (at least once). A member that leaves, or is
//! dropped, releases its partitions at once.
//!
//! # Orderings
//! `version` is bumped with SeqCst under the group lock on every change (join, leave, release); a
//! member compares it (SeqCst load) with the version it last synced at, and takes the lock only
//! when they differ. After a bump every member's waker is interrupted, so a member sleeping in
//! `poll_timeout` re-syncs. The group's end with a closed topic (`done`) is decided under the
//! group lock too, and the member that decides it interrupts every member's waker; a member with
//! nothing to read looks at `done` under the lock after announcing its park, so either it sees
//! `done` or the interrupt wakes it (the loom model
//! `the_group_getting_done_wakes_a_member_without_partitions`).

use std::{
    collections::HashMap,
    fmt,
    time::{Duration, Instant, SystemTime},
};

use crate::{
    broker::check_name,
    error::{Error, ReadError},
    log::{Log, Waker},
    reader::{resume_position, seek_all_to_time, Batch, Reader, Start},
    sync::{lock, Arc, AtomicU64, Mutex, Ordering},
    topic::Topic,
    trace::event,
    wait::{count_once, scan, take_rotating, wait_any, Waited},
};

/// Decides which member gets which partitions. Members are given sorted by name, so an assignor
/// that depends only on its inputs is deterministic.
///
/// It runs on the thread that joins or leaves, holding none of the group's locks, so it may call
/// the group (its [`Group::stats`], say). If it panics, that rebalance uses [`RangeAssignor`]'s
/// plan and the panic reaches [`Group::join`]'s caller (a leaving member's drop swallows it).
pub trait Assignor: Send + Sync {
    /// For `partitions` partitions and the sorted `members`, the partitions of each member
    /// (same order as `members`). Every partition must go to exactly one member; any partition
    /// left out is treated as unassigned.
    fn assign(&self, partitions: u32, members: &[&str]) -> Vec<Vec<u32>>;
}

/// Contiguous ranges: with 8 partitions and 3 members, `[0,1,2] [3,4,5] [6,7]` (Kafka's default).
#[derive(Clone, Copy, Debug, Default)]
pub struct RangeAssignor;

impl Assignor for RangeAssignor {
    fn assign(&self, partitions: u32, members: &[&str]) -> Vec<Vec<u32>> {
        let n = members.len() as u32;
        if n == 0 {
            return Vec::new();
        }
        let (each, extra) = (partitions / n, partitions % n);
        let mut next = 0;
        (0..n)
            .map(|m| {
                let count = each + u32::from(m < extra);
                let range = (next..next + count).collect();
                next += count;
                range
            })
            .collect()
    }
}

/// Dealt like cards: with 8 partitions and 3 members, `[0,3,6] [1,4,7] [2,5]`.
#[derive(Clone, Copy, Debug, Default)]
pub struct RoundRobinAssignor;

impl Assignor for RoundRobinAssignor {
    fn assign(&self, partitions: u32, members: &[&str]) -> Vec<Vec<u32>> {
        let n = members.len();
        let mut out = vec![Vec::new(); n];
        if n > 0 {
            for p in 0..partitions {
                out[p as usize % n].push(p);
            }
        }
        out
    }
}

/// A change of a member's partitions, reported by its next poll.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rebalance {
    /// Partitions being taken away. The member still owns them until its next poll, so it may
    /// commit them now; they are released then.
    pub revoked: Vec<u32>,
    /// Partitions just taken over, starting at the group's committed offsets.
    pub assigned: Vec<u32>,
}

/// Why a group member's poll returned no records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GroupError {
    /// The member's partitions changed (see [`Rebalance`]); poll again to go on.
    Rebalanced(Rebalance),
    /// A read error from one of its partitions.
    Read(ReadError),
}

impl fmt::Display for GroupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GroupError::Rebalanced(r) => {
                write!(
                    f,
                    "rebalanced: revoked {:?}, assigned {:?}",
                    r.revoked, r.assigned
                )
            }
            GroupError::Read(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for GroupError {}

/// A snapshot of a group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupStats {
    /// The group's name.
    pub name: String,
    /// Its members, sorted by name.
    pub members: Vec<String>,
    /// By partition: the member reading it now, if any.
    pub owners: Vec<Option<String>>,
    /// By partition: the group's committed offset, if any.
    pub committed: Vec<Option<u64>>,
    /// By partition: records published after the committed offset (or after the start of the
    /// retained range if nothing is committed).
    pub lag: Vec<u64>,
}

struct MemberSlot {
    id: u64,
    name: String,
    waker: Arc<Waker>,
}

struct GroupState {
    next_id: u64,
    members: Vec<MemberSlot>,
    /// By partition: the member that owns it.
    owner: Vec<Option<u64>>,
    /// By partition: its owner has read it to its closed end (cleared when a member takes it; an
    /// unowned partition counts as unread anyway). The group is done with a closed topic when
    /// every partition is owned and read so.
    read_to_end: Vec<bool>,
    /// The group has been done with the closed topic: it stays done, so members that leave on
    /// `Closed` (handing their partitions over) do not hold back those still to hear it.
    done: bool,
    /// By member id: the partitions it should own.
    target: HashMap<u64, Vec<u32>>,
    start: Start,
    /// Shared, so that a rebalance can run it without the lock (it is the application's code).
    /// Boxed inside: loom's `Arc` (under `cfg(loom)`) takes no unsized value.
    assignor: Arc<Box<dyn Assignor>>,
    /// Bumped whenever a member joins or leaves: a plan made for an older membership is stale.
    membership: u64,
}

pub(crate) struct GroupShared {
    name: String,
    /// The key under which the group's offsets are committed in the topic (names cannot contain
    /// `:`, so it never clashes with a consumer's name).
    offsets_key: String,
    state: Mutex<GroupState>,
    version: AtomicU64,
}

impl GroupShared {
    pub(crate) fn new(name: &str, partitions: u32) -> Self {
        GroupShared {
            name: name.to_owned(),
            offsets_key: format!("group:{name}"),
            state: Mutex::new(GroupState {
                next_id: 0,
                members: Vec::new(),
                owner: vec![None; partitions as usize],
                read_to_end: vec![false; partitions as usize],
                done: false,
                target: HashMap::new(),
                start: Start::Earliest,
                assignor: Arc::new(Box::new(RangeAssignor)),
                membership: 0,
            }),
            version: AtomicU64::new(0),
        }
    }

    /// The key the group's offsets are committed under (see the field).
    fn offsets_key(&self) -> &str {
        &self.offsets_key
    }

    /// Recomputes the target assignment and tells every member. The assignor is the
    /// application's code, so it runs without the lock (I6), on a snapshot of the members; a plan
    /// made while a member joined or left is made again for the new membership. The caller must
    /// not hold the lock.
    ///
    /// An assignor that panics gets the group [`RangeAssignor`]'s plan for this rebalance, so
    /// every member still has a valid target; its panic is handed back for the caller to resume.
    fn rebalance(&self) -> Result<(), Box<dyn std::any::Any + Send>> {
        let mut panicked = None;
        loop {
            let (assignor, names, partitions, membership) = {
                let mut st = lock(&self.state);
                st.members.sort_by(|a, b| a.name.cmp(&b.name));
                let names: Vec<String> = st.members.iter().map(|m| m.name.clone()).collect();
                let partitions = st.owner.len() as u32;
                (Arc::clone(&st.assignor), names, partitions, st.membership)
            };
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            let run = || assignor.assign(partitions, &names);
            let plan = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)) {
                Ok(plan) => plan,
                Err(panic) => {
                    panicked = Some(panic);
                    RangeAssignor.assign(partitions, &names)
                }
            };
            let mut st = lock(&self.state);
            if st.membership == membership {
                self.apply(&mut st, &plan);
                return panicked.map_or(Ok(()), Err);
            }
        }
    }

    /// Sets the target assignment from `plan` (by member, in the members' sorted order) and tells
    /// every member. Caller holds the lock, and the members are those the plan was made for.
    fn apply(&self, st: &mut GroupState, plan: &[Vec<u32>]) {
        let partitions = st.owner.len() as u32;
        st.target = st
            .members
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let mut mine: Vec<u32> = plan
                    .get(i)
                    .map(|v| v.iter().copied().filter(|p| *p < partitions).collect())
                    .unwrap_or_default();
                mine.sort_unstable();
                mine.dedup();
                (m.id, mine)
            })
            .collect();
        self.changed(st);
    }

    /// Bumps the version and interrupts every member's waker. Caller holds the lock.
    fn changed(&self, st: &GroupState) {
        // SeqCst: see the module's Orderings.
        self.version.fetch_add(1, Ordering::SeqCst);
        st.wake_members();
    }
}

impl GroupState {
    /// Interrupts every member's waker, so each one looks at the group again.
    fn wake_members(&self) {
        for m in &self.members {
            m.waker.interrupt();
        }
    }
}

/// A consumer group of a topic; made by [`Topic::group`]. Cheap to clone.
pub struct Group<T: Send + Sync + 'static> {
    topic: Topic<T>,
    shared: Arc<GroupShared>,
}

impl<T: Send + Sync + 'static> Clone for Group<T> {
    fn clone(&self) -> Self {
        Group {
            topic: self.topic.clone(),
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<T: Send + Sync + 'static> fmt::Debug for Group<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Group")
            .field("name", &self.shared.name)
            .finish_non_exhaustive()
    }
}

impl<T: Send + Sync + 'static> Group<T> {
    /// The topic the group consumes.
    pub fn topic(&self) -> &Topic<T> {
        &self.topic
    }

    pub(crate) fn new(topic: Topic<T>, shared: Arc<GroupShared>) -> Self {
        Group { topic, shared }
    }

    /// The group's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Where a partition with nothing committed starts (default [`Start::Earliest`]).
    pub fn set_start(&self, start: Start) {
        lock(&self.shared.state).start = start;
    }

    /// The assignment strategy, applied from the next join or leave (default [`RangeAssignor`]).
    ///
    /// The topic keeps the assignor as long as the topic lives. An assignor that holds a handle
    /// of this group or its topic therefore keeps the topic, and what it retains, alive for good
    /// (a reference cycle, as with any `Arc`); set another assignor to end it.
    pub fn set_assignor(&self, assignor: impl Assignor + 'static) {
        let new = Arc::new(Box::new(assignor) as Box<dyn Assignor>);
        let old = std::mem::replace(&mut lock(&self.shared.state).assignor, new);
        // Dropped after the lock is released: the application's code (I6).
        drop(old);
    }

    /// Joins the group as `member` (a name unique in the group): a rebalance follows, and free
    /// partitions of the new target are taken at once. Errors: [`Error::InvalidName`],
    /// [`Error::MemberExists`].
    pub fn join(&self, member: &str) -> Result<GroupMember<T>, Error> {
        check_name(member)?;
        let waker = Waker::new();
        let id = {
            let mut st = lock(&self.shared.state);
            if st.members.iter().any(|m| m.name == member) {
                return Err(Error::MemberExists(member.to_owned()));
            }
            let id = st.next_id;
            st.next_id += 1;
            st.members.push(MemberSlot {
                id,
                name: member.to_owned(),
                waker: Arc::clone(&waker),
            });
            st.membership += 1;
            id
        };
        let mut m = GroupMember {
            topic: self.topic.clone(),
            group: Arc::clone(&self.shared),
            id,
            name: member.to_owned(),
            waker,
            readers: Vec::new(),
            seen: u64::MAX,
            reported_revoke: None,
            pending: None,
            next: 0,
            #[cfg(feature = "async")]
            task_wait: crate::stream::TaskWait::default(),
        };
        // Made first, so that an assignor's panic leaves through `m`'s drop, which frees the name.
        if let Err(panic) = self.shared.rebalance() {
            std::panic::resume_unwind(panic);
        }
        // Take what is free now; the assignment is reported by the first poll.
        m.pending = m.sync_locked();
        Ok(m)
    }

    /// A snapshot: members, owners, committed offsets and lag by partition.
    pub fn stats(&self) -> GroupStats {
        let st = lock(&self.shared.state);
        let committed = self
            .topic
            .committed_offsets(self.shared.offsets_key())
            .unwrap_or_else(|| vec![None; st.owner.len()]);
        let name_of = |id: u64| {
            st.members
                .iter()
                .find(|m| m.id == id)
                .map(|m| m.name.clone())
        };
        let lag = (0..st.owner.len())
            .map(|p| {
                let log = self.topic.partition_log(p as u32);
                log.end()
                    .saturating_sub(committed[p].unwrap_or(log.start()))
            })
            .collect();
        GroupStats {
            name: self.shared.name.clone(),
            members: st.members.iter().map(|m| m.name.clone()).collect(),
            owners: st.owner.iter().map(|o| o.and_then(name_of)).collect(),
            committed,
            lag,
        }
    }
}

/// A member of a consumer group: a pull consumer of the partitions assigned to it.
pub struct GroupMember<T: Send + Sync + 'static> {
    topic: Topic<T>,
    group: Arc<GroupShared>,
    id: u64,
    name: String,
    waker: Arc<Waker>,
    /// Readers of the owned partitions, sorted by partition.
    readers: Vec<Reader<T>>,
    /// The group version this member last synced at.
    seen: u64,
    /// Revoked partitions already reported to the user; released on the next sync.
    reported_revoke: Option<Vec<u32>>,
    /// A change made at join time, reported by the first poll.
    pending: Option<Rebalance>,
    next: usize,
    /// This member's wait as a `Stream` across polls (`crate::stream`).
    #[cfg(feature = "async")]
    pub(crate) task_wait: crate::stream::TaskWait,
}

impl<T: Send + Sync + 'static> fmt::Debug for GroupMember<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupMember")
            .field("group", &self.group.name)
            .field("name", &self.name)
            .field("assignment", &self.assignment())
            .finish_non_exhaustive()
    }
}

impl<T: Send + Sync + 'static> GroupMember<T> {
    /// The member's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The partitions this member reads now, sorted.
    pub fn assignment(&self) -> Vec<u32> {
        self.readers.iter().map(|r| r.partition()).collect()
    }

    /// Applies any change of the group; `Some` when the user must hear of it.
    fn sync(&mut self) -> Option<Rebalance> {
        let change = match self.pending.take() {
            Some(r) => Some(r),
            // SeqCst: see the module's Orderings.
            None if self.group.version.load(Ordering::SeqCst) == self.seen
                && self.reported_revoke.is_none() =>
            {
                return None
            }
            None => self.sync_locked(),
        };
        // After the group lock is released: a tracing subscriber is the application's code (I6).
        if let Some(r) = &change {
            event!(
                info,
                topic = %self.topic.name(),
                group = %self.group.name,
                member = %self.name,
                revoked = ?r.revoked,
                assigned = ?r.assigned,
                "group rebalance"
            );
            let _ = r;
        }
        change
    }

    fn sync_locked(&mut self) -> Option<Rebalance> {
        let mut st = lock(&self.group.state);
        let target = st.target.get(&self.id).cloned().unwrap_or_default();
        let owned = self.assignment();
        let revoked: Vec<u32> = owned
            .iter()
            .copied()
            .filter(|p| !target.contains(p))
            .collect();
        let mut changed = false;
        if !revoked.is_empty() {
            if self.reported_revoke.as_ref() != Some(&revoked) {
                // Step 1 of the hand-over: report, keep ownership (the user may commit).
                self.reported_revoke = Some(revoked.clone());
                return Some(Rebalance {
                    revoked,
                    assigned: Vec::new(),
                });
            }
            // Step 2: release.
            self.readers.retain(|r| !revoked.contains(&r.partition()));
            for p in &revoked {
                st.owner[*p as usize] = None;
            }
            changed = true;
        }
        self.reported_revoke = None;
        // Step 3: take the target partitions nobody owns.
        let committed = self.topic.committed_offsets(self.group.offsets_key());
        let mut assigned = Vec::new();
        for p in target {
            if owned.contains(&p) || st.owner[p as usize].is_some() {
                continue;
            }
            let log = self.topic.partition_log(p);
            let resume = committed.as_ref().and_then(|c| c[p as usize]);
            // An offset start that retention passed starts at the start.
            let pos = resume_position(log, resume, st.start).unwrap_or_else(|_| log.start());
            st.owner[p as usize] = Some(self.id);
            st.read_to_end[p as usize] = false;
            let mut reader = Reader::at(Arc::clone(log), p, pos, Arc::clone(&self.waker));
            if resume.is_none() {
                reader.settle_start(st.start);
            }
            self.readers.push(reader);
            assigned.push(p);
        }
        self.readers.sort_by_key(|r| r.partition());
        // The member's thread is counted on its CPU by its first reader, which may have changed.
        count_once(&mut self.readers);
        if changed || !assigned.is_empty() {
            self.group.changed(&st);
        }
        // SeqCst: see the module's Orderings (read under the lock, after our own bump). Our own
        // bump also interrupted our waker: that costs one extra turn of a wait loop, no more (the
        // interrupt is left alone, as it may also carry a subscription's pause or close).
        self.seen = self.group.version.load(Ordering::SeqCst);
        (!assigned.is_empty()).then_some(Rebalance {
            revoked: Vec::new(),
            assigned,
        })
    }

    /// Up to `max` records of one assigned partition that are ready now. Errors:
    /// [`GroupError::Rebalanced`] when the assignment changes (poll again to go on), and the read
    /// errors of [`Consumer::poll`](crate::Consumer::poll) (`Empty` also when nothing is assigned).
    ///
    /// `Closed` comes once the group is done with a closed topic: every partition is owned by a
    /// member that has read it to its end. Until then a member with nothing left to read (no
    /// partitions, or its own read to the end) gets `Empty` (or waits, in `poll_timeout`): a
    /// partition may still come its way, handed over or left by a member that leaves, with
    /// records nobody has read. So no member leaves on `Closed` while records are unread.
    pub fn poll(&mut self, max: usize) -> Result<Batch<'_, T>, GroupError> {
        if let Some(r) = self.sync() {
            return Err(GroupError::Rebalanced(r));
        }
        let own = !self.readers.is_empty();
        if own {
            let max = max.max(1) as u64;
            match scan(&mut self.readers, self.next, max) {
                Ok(Some(i)) => return Ok(self.take(i, max)),
                Ok(None) => return Err(GroupError::Read(ReadError::Empty)),
                Err((_, ReadError::Closed)) => {} // all of ours read to their closed end
                Err((_, e)) => return Err(GroupError::Read(e)),
            }
        }
        // Here with partitions of our own, all of them are read to their closed end.
        Err(GroupError::Read(if self.group_done(own) {
            ReadError::Closed
        } else {
            ReadError::Empty
        }))
    }

    /// Like [`GroupMember::poll`], waiting up to `timeout` for records or a rebalance. A member
    /// with nothing to read (no partitions, or its partitions read to their closed end) sleeps
    /// until the group changes or is done with the closed topic.
    pub fn poll_timeout(
        &mut self,
        max: usize,
        timeout: Duration,
    ) -> Result<Batch<'_, T>, GroupError> {
        let max = max.max(1) as u64;
        let deadline = Instant::now().checked_add(timeout);
        match self.wait_ready(max, deadline, false)? {
            Some(i) => Ok(self.take(i, max)),
            None => Err(GroupError::Read(ReadError::Timeout)),
        }
    }

    /// Waits for a reader with records (its index), a rebalance, the deadline, or, with
    /// `stop_on_interrupt`, an interrupt of the waker (`Ok(None)`).
    fn wait_ready(
        &mut self,
        max: u64,
        deadline: Option<Instant>,
        stop_on_interrupt: bool,
    ) -> Result<Option<usize>, GroupError> {
        let wait = self.topic.partition_log(0).wait;
        loop {
            if let Some(r) = self.sync() {
                return Err(GroupError::Rebalanced(r));
            }
            let own = !self.readers.is_empty();
            if own {
                match wait_any(
                    &mut self.readers,
                    self.next,
                    &self.waker,
                    wait,
                    deadline,
                    max,
                ) {
                    Ok(Waited::Ready(i)) => return Ok(Some(i)),
                    Ok(Waited::TimedOut) => return Err(GroupError::Read(ReadError::Timeout)),
                    Ok(Waited::Interrupted) if stop_on_interrupt => return Ok(None),
                    Ok(Waited::Interrupted) => continue,
                    Err((_, ReadError::Closed)) => {} // all of ours read to their closed end
                    Err((_, e)) => return Err(GroupError::Read(e)),
                }
            }
            // Nothing of ours to read (with partitions of our own, all are read to their closed
            // end): wait for the group to change (a partition arriving) or to be done.
            if self.group_done(own) {
                return Err(GroupError::Read(ReadError::Closed));
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(GroupError::Read(ReadError::Timeout));
            }
            let seen = self.seen;
            let me = &*self;
            // A change, or the group getting done, after the look above interrupts the waker
            // (`changed`, `group_done`), which ends the park; the look inside spares the sleep.
            Log::<T>::park_on(&[], &me.waker, deadline, || {
                // SeqCst: see the module's Orderings.
                let changed = me.group.version.load(Ordering::SeqCst) != seen;
                (changed || me.group_done(false)).then_some(())
            });
            if self.waker.take_interrupt() && stop_on_interrupt {
                return Ok(None);
            }
        }
    }

    fn take(&mut self, i: usize, max: u64) -> Batch<'_, T> {
        take_rotating(&mut self.readers, &mut self.next, i, max)
    }

    /// Whether this member owns no partition now.
    #[cfg(feature = "async")]
    pub(crate) fn has_no_partitions(&self) -> bool {
        self.readers.is_empty()
    }

    /// Whether the group is done with the topic, for a member with nothing of its own left to
    /// read: the topic is closed, and every partition is owned by a member that has read it to
    /// its closed end. With `drained` (all of this member's readers said `Closed`), first marks
    /// this member's partitions read so; the member that completes the group wakes every member,
    /// so those waiting hear it. Once done, the group stays done: a member that leaves on
    /// `Closed` hands its partitions over, and a member given one then still reads it (from the
    /// group's commit) before it hears `Closed` again, but nobody waits for that.
    ///
    /// A member alone cannot tell: a partition still on its way to it, or given to it when
    /// another member leaves, may hold records nobody has read, and a member that left on
    /// `Closed` could not read them. So every member waits until the whole group is done, and
    /// then they all hear `Closed`. Takes the group's lock; only a closed topic asks.
    pub(crate) fn group_done(&self, drained: bool) -> bool {
        if !self.topic.is_closed() {
            return false;
        }
        let mut st = lock(&self.group.state);
        if st.done {
            return true;
        }
        if drained {
            for r in &self.readers {
                let p = r.partition() as usize;
                if st.owner[p] == Some(self.id) {
                    st.read_to_end[p] = true;
                }
            }
        }
        st.done = st.owner.iter().all(Option::is_some) && st.read_to_end.iter().all(|read| *read);
        if st.done {
            st.wake_members();
        }
        st.done
    }

    /// Applies a group change (async polls); `Some` when the user must hear of it.
    #[cfg(feature = "async")]
    pub(crate) fn sync_async(&mut self) -> Option<Rebalance> {
        self.sync()
    }

    /// Whether the group changed since this member last synced, or its waker was interrupted
    /// (consumes the interrupt). Async polls check it after announcing themselves.
    #[cfg(feature = "async")]
    pub(crate) fn disturbed(&self) -> bool {
        // SeqCst: see the module's Orderings.
        self.waker.take_interrupt() || self.group.version.load(Ordering::SeqCst) != self.seen
    }

    /// The reader whose turn it is, if the member has nothing to sync (no change of the group to
    /// apply or report): an async poll's fast path takes records from it without syncing.
    #[cfg(feature = "async")]
    #[inline]
    pub(crate) fn settled_turn(&self) -> Option<(usize, &Reader<T>)> {
        // SeqCst: as `sync`'s look at the version (see the module's Orderings).
        let settled = self.pending.is_none()
            && self.reported_revoke.is_none()
            && self.group.version.load(Ordering::SeqCst) == self.seen;
        settled
            .then(|| self.readers.get(self.next).map(|r| (self.next, r)))
            .flatten()
    }

    /// The topic's task budget (see `WaitStrategy::task_budget`).
    #[cfg(feature = "async")]
    pub(crate) fn task_budget(&self) -> u32 {
        self.topic.config().wait.task_budget
    }

    #[cfg(feature = "async")]
    pub(crate) fn async_parts(&mut self) -> (&mut [Reader<T>], usize, Arc<Waker>) {
        (&mut self.readers, self.next, Arc::clone(&self.waker))
    }

    #[cfg(feature = "async")]
    pub(crate) fn take_ready(&mut self, i: usize, max: u64) -> Batch<'_, T> {
        self.take(i, max)
    }

    fn owned(&self, partition: u32) -> Result<usize, Error> {
        self.readers
            .iter()
            .position(|r| r.partition() == partition)
            .ok_or(Error::NotAssigned { partition })
    }

    /// The next offset this member will read in an assigned partition.
    pub fn position(&self, partition: u32) -> Result<u64, Error> {
        Ok(self.readers[self.owned(partition)?].position())
    }

    /// Commits the position of every assigned partition for the group.
    pub fn commit(&mut self) {
        self.topic.commit_offsets(
            self.group.offsets_key(),
            self.readers.iter().map(|r| (r.partition(), r.position())),
        );
    }

    /// Commits `offset` for an assigned partition; it must not pass the position.
    pub fn commit_offset(&mut self, partition: u32, offset: u64) -> Result<(), Error> {
        let position = self.position(partition)?;
        if offset > position {
            return Err(Error::CommitBeyondPosition {
                partition,
                offset,
                position,
            });
        }
        self.topic
            .commit_offsets(self.group.offsets_key(), [(partition, offset)]);
        Ok(())
    }

    /// The group's committed offset of `partition` (assigned or not).
    pub fn committed(&self, partition: u32) -> Result<Option<u64>, Error> {
        if partition >= self.topic.partitions() {
            return Err(Error::NoSuchPartition {
                partition,
                partitions: self.topic.partitions(),
            });
        }
        Ok(self
            .topic
            .committed_offsets(self.group.offsets_key())
            .and_then(|c| c[partition as usize]))
    }

    /// Moves an assigned partition to `offset` (inside the retained range).
    pub fn seek(&mut self, partition: u32, offset: u64) -> Result<(), Error> {
        let i = self.owned(partition)?;
        self.readers[i].seek(Start::Offset(offset))
    }

    /// Moves every assigned partition to its first record published at or after `t`, or to its
    /// end where none is, as [`Consumer::seek_to_time`](crate::Consumer::seek_to_time) does.
    /// Errors: [`Error::InvalidConfig`] on a topic without timestamps; then nothing moves.
    pub fn seek_to_time(&mut self, t: SystemTime) -> Result<(), Error> {
        seek_all_to_time(&mut self.readers, t)
    }

    /// Moves every assigned partition back to the group's committed offset (or its start).
    pub fn rollback_to_committed(&mut self) {
        let committed = self.topic.committed_offsets(self.group.offsets_key());
        for r in &mut self.readers {
            let p = r.partition() as usize;
            let to = committed
                .as_ref()
                .and_then(|c| c[p])
                .unwrap_or(r.log().start());
            r.reposition(to.min(r.log().end()));
        }
    }

    /// Records published and not yet read in the assigned partitions.
    pub fn lag(&self) -> u64 {
        self.readers.iter().map(|r| r.lag()).sum()
    }

    /// Leaves the group (as dropping does): its partitions are released at once.
    pub fn leave(self) {}

    pub(crate) fn offsets_key(&self) -> &str {
        self.group.offsets_key()
    }

    pub(crate) fn waker(&self) -> Arc<Waker> {
        Arc::clone(&self.waker)
    }

    /// Puts an assigned `partition` back at `offset` (subscriptions: records not processed).
    pub(crate) fn rewind(&mut self, partition: u32, offset: u64) {
        if let Ok(i) = self.owned(partition) {
            self.readers[i].reposition(offset);
        }
    }

    /// Waits for the next batch; `Ok(None)` when the waker was interrupted (subscriptions).
    pub(crate) fn next_or_interrupt(
        &mut self,
        max: usize,
    ) -> Result<Option<Batch<'_, T>>, GroupError> {
        let max = max.max(1) as u64;
        match self.wait_ready(max, None, true)? {
            Some(i) => Ok(Some(self.take(i, max))),
            None => Ok(None),
        }
    }
}

impl<T: Send + Sync + 'static> Drop for GroupMember<T> {
    fn drop(&mut self) {
        #[cfg(feature = "async")]
        crate::stream::leave_member(self);
        let mut st = lock(&self.group.state);
        self.readers.clear();
        for o in st.owner.iter_mut() {
            if *o == Some(self.id) {
                *o = None;
            }
        }
        st.members.retain(|m| m.id != self.id);
        st.membership += 1;
        drop(st);
        // An assignor that panics here got the fallback plan; a drop does not pass its panic on
        // (it may run while unwinding already).
        let _ = self.group.rebalance();
    }
}
