//! A pool of workers in two services (two clients) shares 3 slots of a scarce resource (say,
//! GPUs) through an `ExpirableSemaphore`: every job holds a permit while it runs, so at most 3
//! jobs run at once, whichever service they are in. A third service takes a permit and
//! crashes with it: it never releases it and its watchdog stops renewing it. The permit comes
//! back to the pool by itself once its lease (that client's 1 s watchdog timeout) runs out,
//! and from then on the pool runs 3 jobs at a time again.
//!
//! `cargo run -p redisync --example workers` with `REDIS_URL` set, or `scripts/demo.sh workers`.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redisync::prelude::*;

const PERMITS: u64 = 3;
const WORKERS_PER_SERVICE: usize = 6;
const JOBS: u32 = 90;
const JOB_TAKES: Duration = Duration::from_millis(40);
const CRASHED_LEASE: Duration = Duration::from_secs(1);

type AnyError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), AnyError> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let services = [
        Client::builder(url.as_str())
            .key_prefix("redisync-demo")
            .build()
            .await?,
        Client::builder(url.as_str())
            .key_prefix("redisync-demo")
            .build()
            .await?,
    ];
    let slots = services[0].expirable_semaphore("gpu-slots");
    // Start from a clean pool even when an earlier run left one behind.
    slots.delete().await?;
    slots.try_set_permits(PERMITS).await?;
    println!(
        "workers: {PERMITS} permits, {WORKERS_PER_SERVICE} workers in each of 2 services, \
         {JOBS} jobs of {JOB_TAKES:?}"
    );

    // The crashing service: its permits live as long as its watchdog renews them.
    let doomed = Client::builder(url.as_str())
        .key_prefix("redisync-demo")
        .watchdog_timeout(CRASHED_LEASE)
        .build()
        .await?;
    let permit = doomed.expirable_semaphore("gpu-slots").acquire().await?;
    let crashed_id = permit.id().to_owned();
    // A crash runs no destructor (so nothing is released) and stops the watchdog.
    std::mem::forget(permit);
    doomed.shutdown().await;
    let crashed_at = Instant::now();
    println!(
        "crashed service took permit {crashed_id} and died: {} of {PERMITS} permits left",
        slots.available_permits().await?
    );

    let next_job = Arc::new(AtomicU32::new(0));
    let running = Arc::new(AtomicUsize::new(0));
    let most_running = Arc::new(AtomicUsize::new(0));
    // When the pool first ran `PERMITS` jobs at once: the crashed permit was back by then.
    let full_pool_at = Arc::new(Mutex::new(None::<Duration>));
    let mut workers = Vec::new();
    for (s, client) in services.iter().enumerate() {
        for w in 0..WORKERS_PER_SERVICE {
            let slots = client.expirable_semaphore("gpu-slots");
            let (next_job, running) = (next_job.clone(), running.clone());
            let (most_running, full_pool_at) = (most_running.clone(), full_pool_at.clone());
            workers.push(tokio::spawn(async move {
                let mut done = 0u32;
                while next_job.fetch_add(1, Ordering::Relaxed) < JOBS {
                    let permit = slots.acquire().await?;
                    let now_running = running.fetch_add(1, Ordering::SeqCst) + 1;
                    most_running.fetch_max(now_running, Ordering::SeqCst);
                    if now_running == PERMITS as usize {
                        let mut at = full_pool_at.lock().expect("no task panics holding it");
                        at.get_or_insert_with(|| crashed_at.elapsed());
                    }
                    tokio::time::sleep(JOB_TAKES).await; // the job
                    running.fetch_sub(1, Ordering::SeqCst);
                    permit.release().await?;
                    done += 1;
                }
                Ok::<_, AnyError>((s, w, done))
            }));
        }
    }
    let mut per_service = [0u32; 2];
    for worker in workers {
        let (service, _, done) = worker.await??;
        per_service[service] += done;
    }
    let elapsed = crashed_at.elapsed();

    let most = most_running.load(Ordering::SeqCst);
    let full_pool_at = *full_pool_at.lock().expect("no task panics holding it");
    let available = slots.available_permits().await?;
    let reclaimed = !slots.release_by_id(&crashed_id).await?;
    println!(
        "{} jobs in {elapsed:.2?} (service 0: {}, service 1: {}); at most {most} ran at once \
         (limit {PERMITS})",
        per_service.iter().sum::<u32>(),
        per_service[0],
        per_service[1]
    );
    match full_pool_at {
        Some(at) => println!(
            "the crashed permit came back by itself: {PERMITS} jobs ran at once from {at:.2?} \
             after the crash (its lease: {CRASHED_LEASE:?})"
        ),
        None => println!("the crashed permit never came back"),
    }
    println!(
        "afterwards: {available} of {PERMITS} permits available; crashed permit already \
         reclaimed: {reclaimed}"
    );
    for (i, client) in services.iter().enumerate() {
        println!("service {i} stats: {:?}", client.stats());
        client.shutdown().await;
    }
    let sum: u32 = per_service.iter().sum();
    if most > PERMITS as usize || full_pool_at.is_none() || available != PERMITS as i64 {
        return Err("the semaphore let too many jobs run, or leaked the crashed permit".into());
    }
    if sum != JOBS || !reclaimed {
        return Err("jobs went missing, or the crashed permit was still out".into());
    }
    Ok(())
}
