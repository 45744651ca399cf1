//! Redis's clock runs fast (an NTP daemon slewing it, a drifting oscillator): the server runs
//! under libfaketime at a rate ([`RedisServer::set_clock_rate`]), so a hold ends in Redis a
//! share of its lease early as the client counts time. The client's lease margin, the fixed
//! 2 ms plus its clock drift bound's share of the lease
//! ([`ClientBuilder::clock_drift_ppm`]), must make a guard report lost before that: when
//! `lost()` fires, the hold is still there in Redis, and nobody else got in.
//!
//! The bound and the rate leave tens of milliseconds on either side: a 2 s lease on a clock
//! 4 % fast ends in Redis after about 1923 ms; a bound of 8 % makes the client give it up
//! after about 1838 ms, where the fixed 2 ms alone would have kept it until 1998 ms.
//! Timings are printed as `REPORT drift` lines (`-- --nocapture`).

mod common;

use std::time::{Duration, Instant};

use common::{int, lock_key};
use redisync::prelude::*;
use redisync_test_harness::{ChaosProxy, RedisServer};

/// How much faster than the host's the server's clock runs.
const FAST: f64 = 1.04;
/// The client's drift bound: above the server's drift.
const BOUND_PPM: u32 = 80_000;
/// The fixed lease of the holds.
const LEASE: Duration = Duration::from_secs(2);

/// A server whose clock runs `FAST`, and a client whose drift bound covers it.
async fn fast_server_and_client() -> (RedisServer, Client) {
    let server = RedisServer::start_with_fake_clock(&[]);
    server.set_clock_rate(FAST);
    let client = Client::builder(server.url())
        .clock_drift_ppm(BOUND_PPM)
        .build()
        .await
        .expect("connect");
    assert_eq!(client.clock_drift_ppm(), BOUND_PPM);
    (server, client)
}

/// Waits for `lost` (within twice the lease) and returns how long after `since` it fired.
async fn lost_after(lost: impl std::future::Future<Output = ()>, since: Instant) -> Duration {
    tokio::time::timeout(LEASE * 2, lost)
        .await
        .expect("the fixed lease runs out");
    since.elapsed()
}

#[tokio::test]
async fn a_fixed_lock_lease_is_given_up_before_a_fast_redis_clock_ends_it() {
    let (server, client) = fast_server_and_client().await;
    let asked = Instant::now();
    let guard = client.lock("drift").lock_with_lease(LEASE).await.unwrap();
    let after = lost_after(guard.lost(), asked).await;
    let left = int(&server, &["PTTL", &lock_key("drift")]);
    println!(
        "REPORT drift lock: lost {after:?} after the acquire was sent; Redis had {left} ms left"
    );
    assert!(
        left > 0,
        "the guard still reported the lock held after Redis had freed it (PTTL {left})"
    );
    assert!(after > LEASE / 2, "given up far too early: {after:?}");
    assert!(guard.is_lost());
}

#[tokio::test]
async fn a_fixed_expirable_permit_is_given_up_before_a_fast_redis_clock_frees_it() {
    let (server, client) = fast_server_and_client().await;
    let semaphore = client.expirable_semaphore("drift-permits");
    assert!(semaphore.try_set_permits(1).await.unwrap());
    let other = Client::connect(server.url()).await.unwrap();
    let other = other.expirable_semaphore("drift-permits");
    let asked = Instant::now();
    let permit = semaphore.acquire_with_lease(LEASE).await.unwrap();
    let after = lost_after(permit.lost(), asked).await;
    // Not lost in Redis yet: another client still finds no permit free.
    let got = other.try_acquire().await.unwrap();
    println!(
        "REPORT drift permit: lost {after:?} after the acquire was sent; another client {}",
        if got.is_some() {
            "got it"
        } else {
            "found none free"
        }
    );
    assert!(
        got.is_none(),
        "another client got the permit while its holder still reported it held"
    );
    assert!(after > LEASE / 2, "given up far too early: {after:?}");
    // Redis frees it by itself soon after.
    let freed = other.try_acquire_for(Duration::from_secs(5)).await.unwrap();
    assert!(freed.is_some(), "the permit's lease ended in Redis");
}

/// A watchdog lease counts its margin from every renewal: renewals stop (the network to Redis
/// goes dark) and the guard reports lost before the last renewal's lease ends in Redis.
#[tokio::test]
async fn a_watchdog_lease_cut_off_from_renewals_is_given_up_before_a_fast_redis_clock_ends_it() {
    let server = RedisServer::start_with_fake_clock(&[]);
    server.set_clock_rate(FAST);
    let proxy = ChaosProxy::start(&server);
    let client = Client::builder(proxy.url())
        .watchdog_timeout(LEASE)
        .clock_drift_ppm(BOUND_PPM)
        .build()
        .await
        .expect("connect");
    let guard = client.lock("drift-renewed").lock().await.unwrap();
    let renewals = client.stats().renewals;
    common::eventually("a renewal was confirmed", LEASE * 5, || {
        client.stats().renewals > renewals
    })
    .await;
    proxy.blackhole(true);
    let cut = Instant::now();
    let after = lost_after(guard.lost(), cut).await;
    let left = int(&server, &["PTTL", &lock_key("drift-renewed")]);
    println!(
        "REPORT drift watchdog: lost {after:?} after renewals were cut; Redis had {left} ms left"
    );
    assert!(
        left > 0,
        "the guard still reported the lock held after Redis had freed it (PTTL {left})"
    );
    proxy.blackhole(false);
}

#[tokio::test]
async fn the_drift_bound_is_checked_when_the_client_is_built() {
    let server = RedisServer::start();
    let default = Client::connect(server.url()).await.unwrap();
    assert_eq!(
        default.clock_drift_ppm(),
        redisync::core::DEFAULT_CLOCK_DRIFT_PPM
    );
    for ppm in [0, 1, redisync::core::MAX_CLOCK_DRIFT_PPM] {
        let client = Client::builder(server.url())
            .clock_drift_ppm(ppm)
            .build()
            .await
            .unwrap_or_else(|e| panic!("{ppm} ppm refused: {e}"));
        assert_eq!(client.clock_drift_ppm(), ppm);
    }
    for ppm in [redisync::core::MAX_CLOCK_DRIFT_PPM + 1, 1_000_000, u32::MAX] {
        let built = Client::builder(server.url())
            .clock_drift_ppm(ppm)
            .build()
            .await;
        common::assert_invalid(&format!("a drift bound of {ppm} ppm"), built);
    }
}
