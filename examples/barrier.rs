//! A batch job split into shards, processed by workers in three services (three clients). A
//! coordinator arms a `CountDownLatch` with the number of shards; each worker counts it down
//! when its shard is done, and the coordinator waits for the latch to open, then reports how
//! soon after the last count-down it woke (the pub/sub wake-up). The same latch is then armed
//! again for a second batch: a latch is reusable once open.
//!
//! `cargo run -p redisync --example barrier` with `REDIS_URL` set, or `scripts/demo.sh barrier`.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redisync::prelude::*;

const SERVICES: usize = 3;
const SHARDS: u32 = 12;
const BATCHES: u32 = 2;
const PATIENCE: Duration = Duration::from_secs(10);

type AnyError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), AnyError> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let mut services = Vec::new();
    for _ in 0..SERVICES {
        services.push(
            Client::builder(url.as_str())
                .key_prefix("redisync-demo")
                .build()
                .await?,
        );
    }
    let coordinator = services[0].count_down_latch("batch");
    // Start from an open latch even when an earlier run left one armed.
    coordinator.delete().await?;
    println!("barrier: {BATCHES} batches of {SHARDS} shards, workers in {SERVICES} services");

    let mut failures = Vec::new();
    for batch in 1..=BATCHES {
        if !coordinator.try_set_count(u64::from(SHARDS)).await? {
            return Err(format!("batch {batch}: the latch was still armed").into());
        }
        // A second coordinator arming it now is refused: the count stays as it is.
        let rival = services[1].count_down_latch("batch");
        let rival_armed = rival.try_set_count(99).await?;
        println!(
            "batch {batch}: armed with {} (a rival's try_set_count(99): {rival_armed})",
            coordinator.count().await?
        );

        let shards_done = Arc::new(AtomicU32::new(0));
        // When the last count-down was sent.
        let last_count_down = Arc::new(Mutex::new(None::<Instant>));
        let started = Instant::now();
        let mut workers = Vec::new();
        for shard in 0..SHARDS {
            let latch = services[shard as usize % SERVICES].count_down_latch("batch");
            let (shards_done, last_count_down) = (shards_done.clone(), last_count_down.clone());
            workers.push(tokio::spawn(async move {
                // Shards take uneven time: 50 to 325 ms.
                let work = Duration::from_millis(50 + u64::from((shard * 7 + batch * 5) % 12) * 25);
                tokio::time::sleep(work).await;
                shards_done.fetch_add(1, Ordering::SeqCst);
                {
                    let mut last = last_count_down.lock().expect("no task panics holding it");
                    *last = (*last).max(Some(Instant::now()));
                }
                latch.count_down().await
            }));
        }

        let opened = coordinator.wait_for(PATIENCE).await?;
        let woke = Instant::now();
        let done = shards_done.load(Ordering::SeqCst);
        let last = *last_count_down.lock().expect("no task panics holding it");
        for worker in workers {
            worker.await??;
        }
        let late_by = last.map_or(Duration::ZERO, |last| woke.saturating_duration_since(last));
        println!(
            "batch {batch}: opened {opened} after {:.2?}, with {done} of {SHARDS} shards done; \
             the coordinator woke {late_by:.2?} after the last count-down",
            woke - started
        );
        // A waiter on another service, arriving after the opening, returns at once.
        let latecomer = services[2].count_down_latch("batch");
        let asked = Instant::now();
        latecomer.wait().await?;
        println!(
            "batch {batch}: a late waiter on service 2 returned in {:.2?}; count now {}",
            asked.elapsed(),
            coordinator.count().await?
        );
        if !opened || done != SHARDS || rival_armed {
            failures.push(batch);
        }
    }
    for (i, client) in services.iter().enumerate() {
        println!("service {i} stats: {:?}", client.stats());
        client.shutdown().await;
    }
    if !failures.is_empty() {
        return Err(format!("batches {failures:?} opened early, late or twice armed").into());
    }
    Ok(())
}
