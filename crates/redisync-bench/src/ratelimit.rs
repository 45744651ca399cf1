//! Scenario 8: rate limiter decisions per second, against a floor measured in the same round:
//! the cheapest one-round-trip limiter there is, a fixed-window counter (a pipelined `INCR` +
//! `PEXPIRE` of the current window's key), which is neither exact across window edges nor
//! able to say when to retry.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redisync::prelude::*;
use redisync_test_harness::RedisServer;

use crate::report::Figures;

/// The floor's name in the table.
pub const FLOOR: &str = "floor: fixed window (INCR + PEXPIRE)";

/// What the limiter under test answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// A rate far above what the run can ask: every decision allows.
    Allowed,
    /// An exhausted limiter (1 per hour, spent): every decision refuses, with a retry time.
    Refused,
}

impl Verdict {
    pub const ALL: [Verdict; 2] = [Verdict::Allowed, Verdict::Refused];

    pub fn name(self) -> &'static str {
        match self {
            Verdict::Allowed => "redisync try_acquire, allowed",
            Verdict::Refused => "redisync try_acquire, refused",
        }
    }

    /// The decision, without the contender: `try_acquire, allowed` or `try_acquire, refused`.
    pub fn decision(self) -> &'static str {
        self.name().trim_start_matches("redisync ")
    }
}

/// A limiter named `name` that answers every decision with `verdict`: a rate far above what
/// a run can ask, or one spent unit per hour, already spent.
pub async fn limiter(client: &Client, name: &str, verdict: Verdict) -> Result<RateLimiter, String> {
    let e = |e: Error| e.to_string();
    let limiter = client.rate_limiter(name);
    limiter.delete().await.map_err(e)?;
    match verdict {
        Verdict::Allowed => limiter
            .set_rate(Rate::per_second(1 << 30).burst(1 << 20))
            .await
            .map_err(e)?,
        Verdict::Refused => {
            limiter.set_rate(Rate::per_hour(1)).await.map_err(e)?;
            if !limiter.try_acquire(1).await.map_err(e)?.allowed {
                return Err("the only unit of the hour was not allowed".to_owned());
            }
        }
    }
    Ok(limiter)
}

/// `tasks` tasks of one client (its default pool of connections) deciding for `duration`.
pub async fn decisions(
    server: &RedisServer,
    verdict: Verdict,
    tasks: usize,
    duration: Duration,
    round: usize,
    out: &mut Figures,
) {
    let client = Client::connect(server.url()).await.expect("connect");
    let name = format!("bench:rate:{}:{round}", verdict.name().len());
    let limiter = limiter(&client, &name, verdict).await.expect("limiter");
    let scripts_before = client.stats().scripts_sent;
    let (allowed, refused) = decide_for(tasks, duration, out, |_| {
        let limiter = limiter.clone();
        move || {
            let limiter = limiter.clone();
            async move { limiter.try_acquire(1).await.ok().map(|d| d.allowed) }
        }
    })
    .await;
    let decided = allowed + refused;
    let scripts = client.stats().scripts_sent - scripts_before;
    out.add(
        "round trips/decision",
        scripts as f64 / decided.max(1) as f64,
    );
    limiter.delete().await.expect("delete");
    client.shutdown().await;
}

/// The floor: `tasks` tasks over `connections` multiplexed connections (redisync's default
/// pool is 4), each decision one pipelined `INCR` + `PEXPIRE` of the current second's key.
pub async fn floor(
    server: &RedisServer,
    tasks: usize,
    connections: usize,
    duration: Duration,
    out: &mut Figures,
) {
    let pool = crate::scenarios::raw_connections(server, connections).await;
    let limit = 1i64 << 40;
    let origin = Instant::now();
    decide_for(tasks, duration, out, |i| {
        let conn = pool[i % pool.len()].clone();
        move || {
            let mut conn = conn.clone();
            async move {
                let window = origin.elapsed().as_secs();
                let key = format!("bench:fixed-window:{window}");
                let reply: redis::RedisResult<(i64, i64)> = redis::pipe()
                    .incr(&key, 1)
                    .pexpire(&key, 1000)
                    .query_async(&mut conn)
                    .await;
                reply.ok().map(|(count, _)| count <= limit)
            }
        }
    })
    .await;
    out.add("round trips/decision", 1.0);
}

/// Runs `tasks` tasks, each calling its decider (`make(i)` for task `i`) in a loop for
/// `duration`, and reports decisions/s and allowed % into `out`. A decider answers whether a
/// decision allowed, or `None` for one that failed (not counted). Returns (allowed, refused).
async fn decide_for<D, Fut>(
    tasks: usize,
    duration: Duration,
    out: &mut Figures,
    mut make: impl FnMut(usize) -> D,
) -> (u64, u64)
where
    D: FnMut() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Option<bool>> + Send,
{
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..tasks)
        .map(|i| {
            let mut decide = make(i);
            let stop = stop.clone();
            tokio::spawn(async move {
                let (mut allowed, mut refused) = (0u64, 0u64);
                while !stop.load(Ordering::Relaxed) {
                    match decide().await {
                        Some(true) => allowed += 1,
                        Some(false) => refused += 1,
                        None => {}
                    }
                }
                (allowed, refused)
            })
        })
        .collect();
    let started = Instant::now();
    tokio::time::sleep(duration).await;
    stop.store(true, Ordering::Relaxed);
    let (mut allowed, mut refused) = (0u64, 0u64);
    for handle in handles {
        let (a, r) = handle.await.expect("task");
        allowed += a;
        refused += r;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let decided = allowed + refused;
    out.add("decisions/s", decided as f64 / elapsed);
    out.add("allowed %", 100.0 * allowed as f64 / decided.max(1) as f64);
    (allowed, refused)
}
