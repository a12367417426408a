//! Async consumers on tokio: a reader task and a consumer task wait without blocking a thread,
//! while a plain thread publishes; then a producer task publishes into a small `Block` topic,
//! waiting as a task whenever its reader task falls behind. Run with:
//!
//! ```text
//! cargo run --release --example async --features async
//! ```

use std::time::Duration;

use futures::StreamExt;
use logbus::{Broker, Overflow, ReadError, Start, TopicConfig};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let broker = Broker::new();
    let topic = broker
        .topic::<u64>("prices", TopicConfig::default().partitions(2))
        .unwrap();

    // A reader of partition 0, borrowing each record (no clone), until the topic closes.
    let mut reader = topic.reader(0, Start::Earliest).unwrap();
    let sum_task = tokio::spawn(async move {
        let mut sum = 0;
        loop {
            match reader.next_async().await {
                Ok(record) => sum += *record,
                Err(ReadError::Closed) => return sum,
                Err(e) => panic!("{e}"),
            }
        }
    });
    // A consumer of both partitions as a stream of owned records, with a timeout per record:
    // a timed-out wait is dropped and loses nothing.
    let consumer = topic.consumer("audit", Start::Earliest).unwrap();
    let count_task = tokio::spawn(async move {
        let mut stream = consumer;
        let (mut seen, mut timeouts) = (0u64, 0u64);
        loop {
            match tokio::time::timeout(Duration::from_millis(5), stream.next()).await {
                Ok(Some(record)) => {
                    record.unwrap();
                    seen += 1;
                }
                Ok(None) => return (seen, timeouts),
                Err(_) => timeouts += 1,
            }
        }
    });

    // A plain thread publishes, pausing now and then so the tasks really wait.
    let t = topic.clone();
    std::thread::spawn(move || {
        for i in 0..10_000u64 {
            t.publish(i).unwrap(); // round-robin over the two partitions
            if i % 1_000 == 0 {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        t.close();
    })
    .join()
    .unwrap();

    let sum = sum_task.await.unwrap();
    let (seen, timeouts) = count_task.await.unwrap();
    let want: u64 = (0..10_000u64).filter(|i| i % 2 == 0).sum();
    println!("reader task: sum of partition 0 = {sum} (expected {want})");
    println!("consumer stream: {seen} records of 10000, {timeouts} timed-out waits, none lost");
    assert_eq!((sum, seen), (want, 10_000));

    // A producer task and a reader task: the topic keeps 64 records, and under `Block` the
    // producer's `publish_async` waits (as a task, not a thread) until the reader makes room.
    let config = TopicConfig::default()
        .single_producer()
        .max_records(64)
        .overflow(Overflow::Block);
    let gate = broker.topic::<u64>("gate", config).unwrap();
    let mut reader = gate.reader(0, Start::Earliest).unwrap();
    let reading = tokio::spawn(async move {
        let mut sum = 0;
        while let Ok(record) = reader.next_async().await {
            sum += *record;
        }
        sum
    });
    let mut producer = gate.producer().unwrap();
    for i in 0..100_000u64 {
        producer.publish_async(i).await.unwrap();
    }
    gate.close();
    let sum = reading.await.unwrap();
    println!("producer task: 100000 records through a 64-record Block topic, sum {sum}");
    assert_eq!(sum, (0..100_000u64).sum());
}
