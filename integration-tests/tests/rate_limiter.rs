//! RateLimiter against a real redis-server: the window bound under many clients, checked on
//! Redis's own clock; the burst; `retry_after`, exact on Redis's clock and enough to sleep;
//! waiters that sleep instead of polling and share one head per client; a rate change and a
//! delete waking waiters; set/overwrite semantics; bad input; idle state expiring; a cancelled
//! decision giving its units back; and the test cluster.
//!
//! Every test starts its own server, so the tests run in parallel. Times that matter are read
//! from Redis (`TIME`) around each decision, so the checks are exact even on a small, loaded
//! machine: a decision happened somewhere between the `TIME` before it and the `TIME` after it.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{
    assert_invalid, assert_wrong_type, client, eventually, exists, int, join_all,
    most_in_one_window, ms, Admitted,
};
use redisync::prelude::*;
use redisync_test_harness::{RedisCluster, RedisServer};

/// How long a condition that should hold "soon" may take before the test fails.
const SETTLE: Duration = Duration::from_secs(10);

/// How long a wake-up by message may take: half of the longest sleep of a waiter
/// (`MAX_SLEEP`, 10 s), after which it would look again without one.
const WAKE: Duration = Duration::from_secs(5);

fn config_key(name: &str) -> String {
    common::keys::rate(name).rate
}

fn state_key(name: &str) -> String {
    common::keys::rate(name).state
}

fn changed_channel(name: &str) -> String {
    common::keys::rate(name).changed
}

/// A connection of the test's own, to read Redis's clock.
async fn clock(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect")
}

/// Redis's clock, in microseconds.
async fn redis_now(con: &mut redis::aio::MultiplexedConnection) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(con).await.expect("TIME");
    secs * 1_000_000 + micros
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_clients_never_exceed_rate_plus_burst_in_any_window() {
    let server = RedisServer::start();
    let name = "hammered";
    let rate = Rate::new(20, ms(500)).burst(4);
    let per_us = 500_000;
    let first = client(&server).await;
    assert!(first.rate_limiter(name).try_set_rate(rate).await.unwrap());

    // Four clients, two tasks each, asking as fast as they can for five windows; requests of
    // 1 to 3 units, so that the bound is on units, not requests.
    let mut clients = vec![first];
    for _ in 1..4 {
        clients.push(client(&server).await);
    }
    let run_for = ms(2_500);
    let mut tasks = Vec::new();
    for (c, client) in clients.iter().enumerate() {
        for t in 0..2u64 {
            let limiter = client.rate_limiter(name);
            let mut con = clock(&server).await;
            tasks.push(tokio::spawn(async move {
                let started = tokio::time::Instant::now();
                let mut admitted = Vec::new();
                let mut i = c as u64 + t;
                while started.elapsed() < run_for {
                    let units = 1 + i % 3;
                    i += 1;
                    let before = redis_now(&mut con).await;
                    let decision = limiter.try_acquire(units).await.expect("decision");
                    let after = redis_now(&mut con).await;
                    if decision.allowed {
                        admitted.push(Admitted {
                            before,
                            after,
                            units,
                        });
                    } else {
                        assert!(decision.retry_after > Duration::ZERO, "{decision:?}");
                        // Hammer, but leave the CPU to the other tasks now and then.
                        tokio::task::yield_now().await;
                    }
                }
                admitted
            }));
        }
    }
    let admitted: Vec<Admitted> = join_all(tasks).await.into_iter().flatten().collect();
    let total: u64 = admitted.iter().map(|a| a.units).sum();
    // Material for the check: more than one window's worth (five windows would allow up to
    // 5 × 20 + 4).
    assert!(
        total > 2 * rate.window_limit(),
        "only {total} units admitted in five windows"
    );
    let (most, anchor) = most_in_one_window(&admitted, per_us);
    assert!(
        most <= rate.window_limit(),
        "{most} units in the window starting at {anchor:?}, more than {}",
        rate.window_limit()
    );
}

#[tokio::test]
async fn the_check_itself_catches_one_unit_too_many() {
    // The window check above, on made-up admissions: exactly at the bound passes, one more
    // unit certainly inside a window fails.
    let per = 1_000;
    let at = |t: u64, units: u64| Admitted {
        before: t,
        after: t + 5,
        units,
    };
    let at_bound = vec![at(0, 2), at(100, 1), at(500, 1), at(1_100, 3)];
    assert_eq!(most_in_one_window(&at_bound, per).0, 4);
    let too_many = vec![at(0, 2), at(100, 1), at(500, 1), at(990, 1)];
    assert_eq!(most_in_one_window(&too_many, per).0, 5);
}

#[tokio::test]
async fn a_full_limiter_admits_burst_plus_one_then_one_per_interval() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let limiter = client.rate_limiter("burst");
    limiter
        .try_set_rate(Rate::per_minute(60).burst(3))
        .await
        .unwrap();
    let mut remaining = Vec::new();
    for _ in 0..4 {
        let decision = limiter.try_acquire(1).await.unwrap();
        assert!(decision.allowed, "{decision:?}");
        assert_eq!(decision.retry_after, Duration::ZERO);
        remaining.push(decision.remaining);
    }
    assert_eq!(remaining, [3, 2, 1, 0]);
    let refused = limiter.try_acquire(1).await.unwrap();
    assert!(!refused.allowed);
    assert_eq!(refused.remaining, 0);
    // The next unit is one interval (1 s) after the bucket emptied: a little less now.
    assert!(refused.retry_after <= Duration::from_secs(1), "{refused:?}");
    assert!(refused.retry_after > ms(500), "{refused:?}");

    // A request for burst + 1 units at once is the largest: allowed on a full limiter.
    let whole = client.rate_limiter("whole");
    whole
        .try_set_rate(Rate::per_minute(60).burst(3))
        .await
        .unwrap();
    assert!(whole.try_acquire(4).await.unwrap().allowed);
    let again = whole.try_acquire(4).await.unwrap();
    assert!(!again.allowed);
    // Four units refill in four seconds.
    assert!(again.retry_after > Duration::from_secs(3), "{again:?}");
    assert!(again.retry_after <= Duration::from_secs(4), "{again:?}");
}

#[tokio::test]
async fn retry_after_is_exact_on_redis_time_and_enough_to_sleep() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let mut con = clock(&server).await;
    let limiter = client.rate_limiter("retry");
    // 3 per second: the interval, 333 333.33 µs, is no whole number of microseconds.
    limiter.try_set_rate(Rate::per_second(3)).await.unwrap();
    let interval_us = 1_000_000.0 / 3.0;

    for round in 0..3 {
        let b0 = redis_now(&mut con).await;
        let first = limiter.try_acquire(1).await.unwrap();
        let a0 = redis_now(&mut con).await;
        assert!(first.allowed, "round {round}: {first:?}");
        let b1 = redis_now(&mut con).await;
        let refused = limiter.try_acquire(1).await.unwrap();
        let a1 = redis_now(&mut con).await;
        assert!(!refused.allowed, "round {round}: {refused:?}");
        // Allowed again at the first whole microsecond at least one interval after the unit
        // taken at t0 in [b0, a0], asked at t1 in [b1, a1].
        let retry = refused.retry_after.as_micros() as f64;
        let earliest = b0 as f64 + interval_us - a1 as f64;
        let latest = a0 as f64 + interval_us - b1 as f64 + 1.0;
        assert!(
            retry >= earliest && retry <= latest,
            "round {round}: retry_after {retry} µs outside [{earliest}, {latest}]"
        );
        tokio::time::sleep(refused.retry_after).await;
        let after_sleep = limiter.try_acquire(1).await.unwrap();
        assert!(after_sleep.allowed, "round {round}: {after_sleep:?}");
        // Leave the bucket full for the next round.
        tokio::time::sleep(ms(700)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_sleep_and_share_one_head_instead_of_polling() {
    let server = RedisServer::start();
    let name = "queue";
    let setter = client(&server).await;
    setter
        .rate_limiter(name)
        .try_set_rate(Rate::per_second(5))
        .await
        .unwrap();
    let waiting = client(&server).await;
    let waiters = 6u64;
    let before = waiting.stats().scripts_sent;
    let started = tokio::time::Instant::now();
    let tasks: Vec<_> = (0..waiters)
        .map(|_| {
            let limiter = waiting.rate_limiter(name);
            tokio::spawn(async move { limiter.acquire(1).await })
        })
        .collect();
    for result in join_all(tasks).await {
        result.expect("acquired");
    }
    // Six units at five a second: the last came a second after the first.
    assert!(started.elapsed() >= ms(900), "{:?}", started.elapsed());
    let sent = waiting.stats().scripts_sent - before;
    // Each waiter may try once on arrival; then the head asks once after subscribing and
    // once per sleep, for each unit. A poll every few milliseconds would be hundreds.
    assert!(
        sent <= waiters + 3 * waiters,
        "{sent} scripts for {waiters} waiters"
    );
    common::assert_idle(&[&waiting, &setter]);
}

#[tokio::test]
async fn set_rate_wakes_waiters_under_the_new_rate() {
    let server = RedisServer::start();
    let name = "changing";
    let admin = client(&server).await;
    let limiter = admin.rate_limiter(name);
    limiter.try_set_rate(Rate::per_hour(1)).await.unwrap();
    assert!(limiter.try_acquire(1).await.unwrap().allowed);

    let user = client(&server).await;
    let waiter = {
        let limiter = user.rate_limiter(name);
        tokio::spawn(async move { limiter.acquire_for(1, Duration::from_secs(600)).await })
    };
    // Subscribed: the waiter sleeps for most of an hour unless woken.
    eventually("the waiter subscribed", SETTLE, || {
        server.numsub(&changed_channel(name)) == 1
    })
    .await;
    // Without a message the waiter would look again only after MAX_SLEEP (10 s).
    limiter.set_rate(Rate::per_second(10)).await.unwrap();
    let got = tokio::time::timeout(WAKE, waiter)
        .await
        .expect("woken by the rate change")
        .expect("task")
        .expect("acquire_for");
    assert!(got);
}

#[tokio::test]
async fn delete_wakes_waiters_who_then_find_no_rate() {
    let server = RedisServer::start();
    let name = "deleted";
    let admin = client(&server).await;
    let limiter = admin.rate_limiter(name);
    limiter.try_set_rate(Rate::per_hour(1)).await.unwrap();
    assert!(limiter.try_acquire(1).await.unwrap().allowed);
    let user = client(&server).await;
    let waiter = {
        let limiter = user.rate_limiter(name);
        tokio::spawn(async move { limiter.acquire(1).await })
    };
    eventually("the waiter subscribed", SETTLE, || {
        server.numsub(&changed_channel(name)) == 1
    })
    .await;
    assert!(limiter.delete().await.unwrap());
    let outcome = tokio::time::timeout(WAKE, waiter)
        .await
        .expect("woken by the delete")
        .expect("task");
    assert_invalid("acquire after delete", outcome);
    assert!(!exists(&server, &config_key(name)));
    assert!(!exists(&server, &state_key(name)));
    assert!(!limiter.delete().await.unwrap());
}

#[tokio::test]
async fn try_set_rate_sets_once_and_set_rate_overwrites() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let limiter = client.rate_limiter("settings");
    assert_eq!(limiter.rate().await.unwrap(), None);
    let first = Rate::new(7, ms(250)).burst(2);
    assert!(limiter.try_set_rate(first).await.unwrap());
    assert!(!limiter.try_set_rate(Rate::per_second(1)).await.unwrap());
    assert_eq!(limiter.rate().await.unwrap(), Some(first));

    // Another handle, another client: the same rate.
    let other = common::client(&server).await;
    assert_eq!(
        other.rate_limiter("settings").rate().await.unwrap(),
        Some(first)
    );

    let second = Rate::per_minute(1000);
    limiter.set_rate(second).await.unwrap();
    assert_eq!(limiter.rate().await.unwrap(), Some(second));
    assert!(!limiter.try_set_rate(first).await.unwrap());

    // What was taken stays taken across a change: a burst spent under the old rate is not
    // refilled by the new one.
    let spent = client.rate_limiter("spent");
    spent
        .try_set_rate(Rate::per_hour(1).burst(1))
        .await
        .unwrap();
    assert!(spent.try_acquire(2).await.unwrap().allowed);
    spent.set_rate(Rate::per_second(1).burst(1)).await.unwrap();
    let after_change = spent.try_acquire(1).await.unwrap();
    assert!(!after_change.allowed, "{after_change:?}");

    assert!(limiter.delete().await.unwrap());
    assert_eq!(limiter.rate().await.unwrap(), None);
    assert!(limiter.try_set_rate(first).await.unwrap());
}

#[tokio::test]
async fn bad_input_is_refused_with_a_typed_error() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let limiter = client.rate_limiter("bad");
    let bad_rates = [
        ("zero units", Rate::per_second(0)),
        ("zero period", Rate::new(1, Duration::ZERO)),
        (
            "sub-microsecond period",
            Rate::new(1, Duration::from_nanos(1_500)),
        ),
        (
            "period too long",
            Rate::new(1, Duration::from_secs(11 * 365 * 86_400)),
        ),
        (
            "units × burst overflow",
            Rate::per_second(1 << 40).burst(1 << 20),
        ),
        ("units overflow", Rate::per_second(u64::MAX)),
        ("burst overflow", Rate::per_second(1).burst(u64::MAX)),
        ("refill too long", Rate::per_day(1).burst(20 * 365)),
    ];
    for (what, rate) in bad_rates {
        assert_invalid(what, limiter.try_set_rate(rate).await);
        assert_invalid(what, limiter.set_rate(rate).await);
    }
    assert!(!exists(&server, &config_key("bad")));

    // No rate set: acquiring is InvalidArgument, and writes nothing.
    assert_invalid("no rate", limiter.try_acquire(1).await);
    assert_invalid("no rate", limiter.acquire(1).await);
    assert_invalid("no rate", limiter.acquire_for(1, ms(10)).await);
    assert!(!exists(&server, &state_key("bad")));

    limiter
        .try_set_rate(Rate::per_second(10).burst(4))
        .await
        .unwrap();
    assert_invalid("zero units", limiter.try_acquire(0).await);
    assert_invalid("zero units", limiter.acquire(0).await);
    assert_invalid("beyond burst + 1", limiter.try_acquire(6).await);
    assert_invalid("beyond burst + 1", limiter.acquire(6).await);
    assert_invalid("beyond burst + 1", limiter.acquire_for(6, ms(10)).await);
    assert_invalid("huge", limiter.try_acquire(u64::MAX).await);
    assert_invalid("wait too long", limiter.acquire_for(1, Duration::MAX).await);
    assert!(!exists(&server, &state_key("bad")));
    assert!(limiter.try_acquire(5).await.unwrap().allowed);

    assert_invalid("empty name", client.rate_limiter("").try_acquire(1).await);
    assert_invalid(
        "empty name",
        client
            .rate_limiter("")
            .try_set_rate(Rate::per_second(1))
            .await,
    );

    // Foreign data where the rate lives.
    server.cmd(&["SET", &config_key("foreign"), "x"]);
    assert_wrong_type(
        "foreign",
        client.rate_limiter("foreign").try_acquire(1).await,
    );
    assert_wrong_type("foreign", client.rate_limiter("foreign").rate().await);
    assert_wrong_type(
        "foreign",
        client
            .rate_limiter("foreign")
            .try_set_rate(Rate::per_second(1))
            .await,
    );
    assert_wrong_type(
        "foreign",
        client
            .rate_limiter("foreign")
            .set_rate(Rate::per_second(1))
            .await,
    );
    assert_eq!(
        redis::from_redis_value_ref::<String>(&server.cmd(&["GET", &config_key("foreign")]))
            .expect("a string"),
        "x",
        "foreign data is left alone"
    );

    // Text that is no rate.
    for text in ["100", "x/s", "10/5y", "10/"] {
        assert!(text.parse::<Rate>().is_err(), "{text}");
    }
}

#[tokio::test]
async fn idle_state_expires_when_the_bucket_is_full_again_and_the_rate_stays() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let name = "idle";
    let limiter = client.rate_limiter(name);
    limiter
        .try_set_rate(Rate::per_second(10).burst(2))
        .await
        .unwrap();
    assert!(limiter.try_acquire(3).await.unwrap().allowed);
    // Three units at 100 ms each: full again within 300 ms.
    let ttl = int(&server, &["PTTL", &state_key(name)]);
    assert!(ttl > 0 && ttl <= 300, "state PTTL {ttl}");
    assert_eq!(int(&server, &["PTTL", &config_key(name)]), -1);
    eventually("the state expired", SETTLE, || {
        !exists(&server, &state_key(name))
    })
    .await;
    assert!(exists(&server, &config_key(name)));
    // And an expired state is a full bucket.
    assert_eq!(limiter.try_acquire(1).await.unwrap().remaining, 2);
    // A refusal changes nothing, the expiry included.
    let _ = limiter.try_acquire(3).await.unwrap();
    let ttl = int(&server, &["PTTL", &state_key(name)]);
    assert!(ttl > 0 && ttl <= 100, "state PTTL {ttl}");
}

/// The crate's table of round trips and commands: a decision is one script, and runs exactly
/// the commands listed there, allowed or refused.
#[tokio::test]
async fn a_decision_runs_the_commands_the_crate_lists() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let limiter = c.rate_limiter("counted");
    // A full limiter admits burst + 1 = 2 units at once, then none for half an hour.
    limiter.set_rate(Rate::per_hour(2).burst(1)).await.unwrap();
    // Warm up: the script is loaded before counting.
    assert!(limiter.try_acquire(1).await.unwrap().allowed);
    for (verdict, allowed, writes) in [("allowed", true, 1), ("refused", false, 0)] {
        server.cmd(&["CONFIG", "RESETSTAT"]);
        let scripts = c.stats().scripts_sent;
        let decision = limiter.try_acquire(1).await.unwrap();
        assert_eq!(decision.allowed, allowed, "{verdict}: {decision:?}");
        assert_eq!(
            c.stats().scripts_sent - scripts,
            1,
            "{verdict}: one round trip"
        );
        // The rate and the state (HMGET each) and Redis's clock; an allowed decision also
        // writes the state and its expiry.
        let mut expected = vec![("evalsha", 1), ("hmget", 2), ("time", 1)];
        if writes == 1 {
            expected.extend([("hset", 1), ("pexpire", 1)]);
        }
        assert_eq!(
            common::operation_stats(&server),
            common::command_counts(&expected),
            "{verdict}"
        );
    }
}

#[tokio::test]
async fn a_cancelled_decision_gives_its_units_back() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let name = "cancelled";
    let limiter = client.rate_limiter(name);
    limiter.try_set_rate(Rate::per_hour(1)).await.unwrap();
    // Cut at its first await point: the request is on the wire, its caller gone.
    let cut = common::cut_at_await(0, limiter.try_acquire(1)).await;
    assert!(cut.is_none(), "the decision finished before it was cut");
    // It ran, took the unit, and gave it back.
    eventually("the give-back ran", SETTLE, || {
        exists(&server, &state_key(name))
            && server.cmd(&["HEXISTS", &state_key(name), "last"]) == redis::Value::Int(0)
    })
    .await;
    assert!(limiter.try_acquire(1).await.unwrap().allowed);

    common::assert_idle(&[&client]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn works_on_the_test_cluster() {
    let cluster = Arc::new(RedisCluster::start(3, 0));
    let client = Client::cluster_builder(cluster.seed_urls())
        .build()
        .await
        .expect("connect to the cluster");
    let mut names = Vec::new();
    for i in 0..6 {
        let name = format!("cluster-{i}");
        let limiter = client.rate_limiter(&name);
        assert!(limiter
            .try_set_rate(Rate::per_minute(60).burst(1))
            .await
            .unwrap());
        assert!(limiter.try_acquire(2).await.unwrap().allowed);
        let refused = limiter.try_acquire(1).await.unwrap();
        assert!(!refused.allowed);
        assert!(refused.retry_after <= Duration::from_secs(1));
        tokio::time::sleep(refused.retry_after).await;
        assert!(limiter.try_acquire(1).await.unwrap().allowed);
        names.push(name);
    }
    // A waiter woken by a rate change over the cluster's (sharded) pub/sub.
    let limiter = client.rate_limiter(&names[0]);
    limiter.set_rate(Rate::per_hour(1)).await.unwrap();
    let _ = limiter.try_acquire(1).await.unwrap();
    let other = Client::cluster_builder(cluster.seed_urls())
        .build()
        .await
        .expect("connect to the cluster");
    let waiter = {
        let limiter = other.rate_limiter(&names[0]);
        tokio::spawn(async move { limiter.acquire_for(1, Duration::from_secs(600)).await })
    };
    // The waiter needs an hour unless woken.
    let channel = changed_channel(&names[0]);
    eventually("the waiter subscribed", SETTLE, || {
        (0..3)
            .map(|node| common::shard_subscribers(&cluster, node, &channel))
            .sum::<u64>()
            == 1
    })
    .await;
    limiter.set_rate(Rate::per_second(100)).await.unwrap();
    let got = tokio::time::timeout(WAKE, waiter)
        .await
        .expect("woken by the rate change")
        .expect("task")
        .expect("acquire_for");
    assert!(got);
    for name in &names {
        assert!(client.rate_limiter(name).delete().await.unwrap());
    }
}
