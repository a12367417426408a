//! Fault injection: handlers that fail or panic on 20% of attempts, across three subscriptions and
//! 100,000 records. Every record reaches every subscription at least once, in order, and each record
//! whose attempts ran out is in the dead-letter topic exactly once.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use logbus::{Backoff, Broker, DeadLetter, ReadError, Retry, Start, TopicConfig};

const RECORDS: u64 = 100_000;
const ATTEMPTS: u32 = 3;

#[derive(Default)]
struct Seen {
    /// Offsets in the order of their first attempt.
    first_attempts: Vec<u64>,
    /// Attempts of the current offset.
    current: Option<(u64, u32)>,
    /// Offsets whose every attempt failed.
    gave_up: Vec<u64>,
}

#[test]
fn random_failures_and_panics_lose_nothing_and_keep_order() {
    // Panics are expected by the thousand; keep the output readable.
    std::panic::set_hook(Box::new(|_| {}));
    let broker = Broker::new();
    let topic = broker.topic::<u64>("work", TopicConfig::default()).unwrap();
    let mut subs = Vec::new();
    let mut seen = Vec::new();
    for s in 0..3u64 {
        let state = Arc::new(Mutex::new(Seen::default()));
        seen.push(state.clone());
        let mut rng = 0x2545_f491_4f6c_dd1d_u64 ^ (s + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let sub = topic
            .subscription(&format!("sub-{s}"))
            .start(Start::Earliest)
            .retry(
                Retry::default()
                    .max_attempts(ATTEMPTS)
                    .backoff(Backoff::None),
            )
            .handler(move |r| {
                let mut st = state.lock().unwrap();
                let attempt = match st.current {
                    Some((o, n)) if o == r.offset() => n + 1,
                    _ => {
                        st.first_attempts.push(r.offset());
                        1
                    }
                };
                st.current = Some((r.offset(), attempt));
                assert_eq!(**r, r.offset(), "the value is the offset");
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let roll = rng % 10;
                if roll >= 2 {
                    return Ok(());
                }
                if attempt == ATTEMPTS {
                    st.gave_up.push(r.offset());
                }
                drop(st);
                if roll == 0 {
                    panic!("injected panic");
                }
                Err("injected failure")
            })
            .unwrap();
        subs.push(sub);
    }
    let mut producer = topic.producer().unwrap();
    for i in 0..RECORDS {
        producer.publish(i).unwrap();
    }
    for sub in &subs {
        assert!(sub.wait_idle(Duration::from_secs(300)));
    }
    let dlq = broker.get::<DeadLetter<u64>>("work.dlq").unwrap();
    let mut letters: HashMap<(String, u64), u32> = HashMap::new();
    let mut reader = dlq.reader(0, Start::Earliest).unwrap();
    loop {
        match reader.try_next() {
            Ok(l) => {
                assert_eq!(l.value, l.offset);
                assert_eq!(l.attempts, ATTEMPTS);
                *letters
                    .entry((l.subscription.clone(), l.offset))
                    .or_default() += 1;
            }
            Err(ReadError::Empty) => break,
            Err(e) => panic!("{e}"),
        }
    }
    for (s, (sub, state)) in subs.iter().zip(&seen).enumerate() {
        let st = state.lock().unwrap();
        assert_eq!(
            st.first_attempts.len() as u64,
            RECORDS,
            "every record reached sub-{s}"
        );
        assert!(
            st.first_attempts
                .iter()
                .enumerate()
                .all(|(i, o)| *o == i as u64),
            "in order"
        );
        let name = format!("sub-{s}");
        for o in &st.gave_up {
            assert_eq!(
                letters.get(&(name.clone(), *o)),
                Some(&1),
                "{name} offset {o} dead-lettered once"
            );
        }
        let in_dlq = letters.keys().filter(|(n, _)| *n == name).count();
        assert_eq!(in_dlq, st.gave_up.len(), "nothing else was dead-lettered");
        assert!(
            !st.gave_up.is_empty(),
            "the injected rate must exhaust some records"
        );
        let stats = sub.stats();
        assert_eq!(stats.positions, vec![RECORDS]);
        assert_eq!(stats.dead_lettered, st.gave_up.len() as u64);
        assert_eq!(stats.delivered + stats.dead_lettered, RECORDS);
    }
}
