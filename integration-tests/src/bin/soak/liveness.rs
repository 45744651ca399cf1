//! After the faults heal and the workers stop: is everything usable again? Every lock
//! acquirable within its bound, every semaphore back to its full count, every latch round's
//! count exactly what its count-downs left.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use redisync::prelude::*;

use crate::checker::RoundTally;
use crate::events::Resource;
use crate::worker::{latch_name, LATCH_COUNT};

/// Slack on every bound, for a small machine shared with other work.
const SLACK: Duration = Duration::from_secs(2);

/// How long a fair lock's dead waiter keeps its place with the workers' command timeout of
/// 1 s: three heartbeats of 1 s, plus a heartbeat for the next waiter to go ahead.
const FAIR_QUEUE_BOUND: Duration = Duration::from_secs(4);

/// What the liveness checks found.
#[derive(Debug, Default)]
pub struct Liveness {
    /// How long each resource took to be free again.
    pub recovered: Vec<(String, Duration)>,
    /// Resources not usable again within their bound, described.
    pub stuck: Vec<String>,
    /// Latch rounds counted down more often than asked, described.
    pub violations: Vec<String>,
    /// Latch rounds that ended open.
    pub rounds_open: u64,
}

/// Runs every check with `client` (connected straight to the Redis under test).
pub async fn check(
    client: &Client,
    lease: Duration,
    permits: u64,
    rounds_armed: u64,
    rounds: &BTreeMap<u64, RoundTally>,
) -> Liveness {
    let mut found = Liveness::default();
    let lock_bound = lease + SLACK;
    let fair_bound = lease.max(FAIR_QUEUE_BOUND) + SLACK;
    lock(
        &mut found,
        Resource::Lock,
        &client.lock(Resource::Lock.name()),
        lease,
        lock_bound,
    )
    .await;
    lock(
        &mut found,
        Resource::FairLock,
        &client.fair_lock(Resource::FairLock.name()),
        lease,
        fair_bound,
    )
    .await;
    lock(
        &mut found,
        Resource::RwWrite,
        &client.read_write_lock(Resource::RwWrite.name()).writer(),
        lease,
        lock_bound,
    )
    .await;
    let semaphore = client.semaphore(Resource::Semaphore.name());
    permits_back(&mut found, Resource::Semaphore, permits, lock_bound, || {
        semaphore.available_permits()
    })
    .await;
    let expirable = client.expirable_semaphore(Resource::Expirable.name());
    permits_back(&mut found, Resource::Expirable, permits, lock_bound, || {
        expirable.available_permits()
    })
    .await;
    for round in 1..=rounds_armed {
        latch(client, &mut found, round, rounds.get(&round).copied()).await;
    }
    found
}

/// Takes the lock (`Lease::Fixed(lease)`, then releases it) within `bound`.
async fn lock<A: Acquire>(
    found: &mut Liveness,
    res: Resource,
    lock: &A,
    lease: Duration,
    bound: Duration,
) {
    let started = Instant::now();
    let deadline = started + bound;
    let mut last_error = String::from("the wait ran out");
    while Instant::now() < deadline {
        let wait = deadline.saturating_duration_since(Instant::now());
        match lock
            .acquire_with(Wait::For(wait), Lease::Fixed(lease))
            .await
        {
            Ok(Some(guard)) => {
                found.recovered.push((res.name().into(), started.elapsed()));
                let _ = guard.release().await;
                return;
            }
            Ok(None) => break,
            Err(err) => {
                last_error = err.to_string();
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    found.stuck.push(format!(
        "{res}: not acquirable within {bound:?} ({last_error})"
    ));
}

/// Waits until `available()` says all `permits` are back, at most `bound`.
async fn permits_back<F, Fut>(
    found: &mut Liveness,
    res: Resource,
    permits: u64,
    bound: Duration,
    available: F,
) where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<i64>>,
{
    let started = Instant::now();
    let mut last = String::new();
    while started.elapsed() < bound {
        match available().await {
            Ok(n) if n == permits as i64 => {
                found.recovered.push((res.name().into(), started.elapsed()));
                return;
            }
            Ok(n) => last = format!("{n} available"),
            Err(err) => last = err.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    found.stuck.push(format!(
        "{res}: not back to {permits} permits within {bound:?} ({last})"
    ));
}

/// Checks that latch `round`'s count is what its count-downs left: at least those confirmed
/// and at most those begun were applied; an open round lets a waiter through.
async fn latch(client: &Client, found: &mut Liveness, round: u64, tally: Option<RoundTally>) {
    let tally = tally.unwrap_or_default();
    let latch = client.count_down_latch(latch_name(round));
    let count = match latch.count().await {
        Ok(count) => count,
        Err(err) => {
            found
                .stuck
                .push(format!("latch round {round}: count unreadable ({err})"));
            return;
        }
    };
    let applied = LATCH_COUNT.saturating_sub(count);
    if applied < tally.confirmed {
        found.stuck.push(format!(
            "latch round {round}: count {count}, but {} count-downs were confirmed",
            tally.confirmed
        ));
    }
    if applied > tally.begun {
        found.violations.push(format!(
            "latch round {round}: count {count}, but only {} count-downs began",
            tally.begun
        ));
    }
    if count == 0 {
        found.rounds_open += 1;
        if !matches!(latch.wait_for(Duration::from_secs(2)).await, Ok(true)) {
            found.stuck.push(format!(
                "latch round {round}: open, but a wait does not return"
            ));
        }
    }
}
