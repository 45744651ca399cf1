//! Scenario 7: leader election hand-over, from the leader starting its resignation to the
//! next campaigner's `campaign()` returning, against the pub/sub hand-off floor of 2b.

use std::time::{Duration, Instant};

use redisync::prelude::*;
use redisync_test_harness::RedisServer;

use crate::report::{percentile, Figures};
use crate::scenarios::os_sleep;

/// `handoffs` hand-overs between two clients, each after the leader led for 50–51 ms (the
/// hold of scenario 2b), with the other client campaigning from the moment the leader won.
pub async fn handover(server: &RedisServer, handoffs: usize, out: &mut Figures) {
    const LEAD: Duration = Duration::from_millis(50);
    let (Ok(a), Ok(b)) = (
        Client::connect(server.url()).await,
        Client::connect(server.url()).await,
    ) else {
        return;
    };
    let (leader, candidate) = (
        a.leader_election("bench:election"),
        b.leader_election("bench:election"),
    );
    let warm_up = 2;
    let mut samples = Vec::with_capacity(handoffs);
    let mut failures = 0u64;
    let mut seed = 0x9E37_79B9_7F4A_7C15_u64;
    for i in 0..warm_up + handoffs {
        let Ok(leadership) = leader.campaign("a").await else {
            failures += 1;
            continue;
        };
        let next = candidate.clone();
        let waiting = tokio::spawn(async move {
            let won = next.campaign("b").await;
            (won, Instant::now())
        });
        // As in 2b: the release falls anywhere, not on a timer tick.
        os_sleep(LEAD + Duration::from_micros(crate::scenarios::xorshift(&mut seed) % 1000)).await;
        let resigned_at = Instant::now();
        let resigned = leadership.resign().await;
        let Ok((Ok(next_leader), led_at)) = waiting.await else {
            failures += 1;
            continue;
        };
        if resigned.is_err() || next_leader.resign().await.is_err() {
            failures += 1;
            continue;
        }
        if i >= warm_up {
            samples.push(led_at.duration_since(resigned_at).as_secs_f64() * 1e6);
        }
    }
    a.shutdown().await;
    b.shutdown().await;
    out.add("handoff p50 µs", percentile(&samples, 50.0));
    out.add("handoff p99 µs", percentile(&samples, 99.0));
    out.add("hand-offs", samples.len() as f64);
    out.add("failed acquires", failures as f64);
    out.samples.extend(samples);
}
