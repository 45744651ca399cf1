//! Several services (three clients) share one API quota: 20 calls per second with a burst of
//! 5, kept by a `RateLimiter` in Redis. Workers that must make their call wait for a unit with
//! `acquire` (they sleep, never poll); a front end that would rather refuse answers "429, retry
//! after ..." from `try_acquire`. Halfway through, an operator halves the quota with
//! `set_rate`, and the waiting workers slow down at once. At the end the program counts the
//! calls that fell into any one second (on Redis's clock) against the quota.
//!
//! `cargo run -p redisync --example api_quota` with `REDIS_URL` set, or
//! `scripts/demo.sh api_quota`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redisync::prelude::*;

const SERVICES: usize = 3;
const WORKERS_PER_SERVICE: usize = 3;
const RUN_FOR: Duration = Duration::from_secs(4);

type AnyError = Box<dyn std::error::Error + Send + Sync>;

/// Redis's clock in microseconds, read through a connection of the demo's own: the
/// limiter decides on it, so the report counts on it too.
async fn redis_now(con: &mut redis::aio::MultiplexedConnection) -> Result<u64, AnyError> {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(con).await?;
    Ok(secs * 1_000_000 + micros)
}

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
    let quota = Rate::per_second(20).burst(5);
    let admin = services[0].rate_limiter("partner-api");
    admin.delete().await?; // a fresh quota, whatever an earlier run left
    admin.try_set_rate(quota).await?;
    // Every service sets it at start-up; only the first one to get there does.
    for service in &services[1..] {
        if service
            .rate_limiter("partner-api")
            .try_set_rate(quota)
            .await?
        {
            return Err("a second try_set_rate replaced the quota".into());
        }
    }
    println!(
        "api_quota: {SERVICES} services x {WORKERS_PER_SERVICE} workers share {quota}; \
         at most {} calls in any second",
        quota.window_limit()
    );

    // When each call was made (Redis µs, just after its unit was granted) and by whom.
    let calls = Arc::new(Mutex::new(Vec::<(u64, usize)>::new()));
    let deadline = tokio::time::Instant::now() + RUN_FOR;
    let mut workers = Vec::new();
    for (s, service) in services.iter().enumerate() {
        for _ in 0..WORKERS_PER_SERVICE {
            let limiter = service.rate_limiter("partner-api");
            let calls = calls.clone();
            let mut con = redis::Client::open(url.as_str())?
                .get_multiplexed_async_connection()
                .await?;
            workers.push(tokio::spawn(async move {
                while tokio::time::Instant::now() < deadline {
                    let left = deadline - tokio::time::Instant::now();
                    if !limiter.acquire_for(1, left).await? {
                        break;
                    }
                    let at = redis_now(&mut con).await?;
                    calls.lock().map_err(|_| "poisoned")?.push((at, s));
                }
                Ok::<(), AnyError>(())
            }));
        }
    }

    // A front end that refuses rather than waits.
    let front = services[1].rate_limiter("partner-api");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let decision = front.try_acquire(1).await?;
    if decision.allowed {
        println!(
            "front end: allowed ({} left in the burst)",
            decision.remaining
        );
    } else {
        println!(
            "front end: 429 Too Many Requests, Retry-After {:?}",
            decision.retry_after
        );
    }

    tokio::time::sleep(RUN_FOR / 2 - Duration::from_millis(500)).await;
    let halved = Rate::per_second(10).burst(5);
    admin.set_rate(halved).await?;
    println!("operator: quota changed to {halved}; waiting workers re-decide at once");

    for worker in workers {
        worker.await??;
    }
    let mut calls = calls.lock().map_err(|_| "poisoned")?.clone();
    calls.sort_unstable();
    let Some(&(first, _)) = calls.first() else {
        return Err("no calls were made".into());
    };
    let mut per_second = Vec::new();
    for &(at, _) in &calls {
        let second = ((at - first) / 1_000_000) as usize;
        if per_second.len() <= second {
            per_second.resize(second + 1, 0);
        }
        per_second[second] += 1;
    }
    // The most calls in any one-second window starting at a call. The calls are stamped
    // just after their grant, so this can over-count by a call or two under load.
    let busiest = calls
        .iter()
        .map(|&(start, _)| {
            calls
                .iter()
                .filter(|&&(at, _)| at >= start && at < start + 1_000_000)
                .count()
        })
        .max()
        .unwrap_or(0);
    let by_service: Vec<usize> = (0..SERVICES)
        .map(|s| calls.iter().filter(|&&(_, by)| by == s).count())
        .collect();
    println!(
        "{} calls in {RUN_FOR:?}: per second {per_second:?}, by service {by_service:?}",
        calls.len()
    );
    println!(
        "busiest one-second window: {busiest} calls (quota {} before the change, {} after)",
        quota.window_limit(),
        halved.window_limit()
    );
    for service in &services {
        println!(
            "service stats: {} scripts sent for its calls",
            service.stats().scripts_sent
        );
    }
    admin.delete().await?;
    Ok(())
}
