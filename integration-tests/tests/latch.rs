//! CountDownLatch against a real redis-server: waiting for zero across tasks and clients, timed
//! waits, the count that never goes below zero, delete as an opening, re-arming and the arming
//! ids that let an earlier waiter return after a re-arm, a killed subscriber connection, an
//! outage, cancellation, the count-down records that make a retry harmless, statistics and bad
//! input.
//!
//! Every test starts its own server, so the tests run in parallel. Waits are for events
//! (`wait_until` on server or client state); the time bounds are generous, for a small, loaded
//! machine. Where a bound must tell a wake-up by message from the waiter's periodic
//! re-check (once a second), the test arranges for the message to matter by a wide margin.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{
    assert_idle, assert_invalid, assert_wrong_type, client, cut_at_await, eventually, exists, int,
    is_outage, ms, text,
};
use redis::Value;
use redisync::prelude::*;
use redisync::LocalState;
use redisync::COUNT_DOWN_MEMORY;
use redisync_test_harness::RedisServer;
use tokio::task::JoinHandle;

/// How long a condition that should hold "soon" may take before the test fails.
const SETTLE: Duration = Duration::from_secs(10);

/// The latch's periodic re-check (`redisync_latch::RECHECK`, which the facade does not
/// re-export): a waiter re-reads the latch at least this often even if no message arrives.
const RECHECK: Duration = Duration::from_secs(1);

/// A wake-up by message must come well within this; one that waited for the periodic re-check
/// would take about [`RECHECK`].
const BY_MESSAGE: Duration = Duration::from_millis(500);

// ---------------------------------------------------------------------------------------------
// Redis names under the default prefix, the scripts, and server-side inspection.

fn latch_key(name: &str) -> String {
    common::keys::latch(name).latch
}

fn latch_channel(name: &str) -> String {
    common::keys::latch(name).channel
}

/// Where the count-downs of the arming that opened last are remembered.
fn opened_key(name: &str) -> String {
    common::keys::latch(name).opened
}

/// The clients with tasks waiting on the latch.
fn waiters_key(name: &str) -> String {
    common::keys::latch(name).waiters
}

/// The count-downs remembered in the hash `key` (the latch, or [`opened_key`]): request id →
/// outcome.
fn remembered(server: &RedisServer, key: &str) -> BTreeMap<String, String> {
    let value = server.cmd(&["HGETALL", key]);
    let mut fields = redis::from_redis_value_ref::<BTreeMap<String, String>>(&value)
        .unwrap_or_else(|e| panic!("HGETALL: unexpected reply {value:?}: {e}"));
    for layout in ["count", "arming", "prior"] {
        fields.remove(layout);
    }
    fields
}

const PRELUDE_LUA: &str = concat!(
    include_str!("../../lua/publish_prelude.lua"),
    include_str!("../../lua/latch_prelude.lua")
);
const COUNT_DOWN_LUA: &str = include_str!("../../lua/latch_count_down.lua");
const TRY_SET_COUNT_LUA: &str = include_str!("../../lua/latch_try_set_count.lua");

/// A latch script as the library sends it: the shared prelude, then the script.
fn latch_script(body: &str) -> String {
    format!("{PRELUDE_LUA}{body}")
}

/// An `EVAL` of `latch_count_down.lua` with the request id `request`.
fn raw_count_down(name: &str, request: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(latch_script(COUNT_DOWN_LUA))
        .arg(3)
        .arg(latch_key(name))
        .arg(opened_key(name))
        .arg(waiters_key(name))
        .arg(request)
        // An arming this opens is remembered this long; short, so the test sees it go.
        .arg(RAW_OPENED_KEEP_MS)
        .arg(latch_channel(name));
    cmd
}

/// How long an arming [`raw_count_down`] opens is remembered, in ms.
const RAW_OPENED_KEEP_MS: u64 = 2_000;

/// An `EVAL` of `latch_try_set_count.lua` with the arming id `arming`.
fn raw_try_set_count(name: &str, count: u64, arming: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(latch_script(TRY_SET_COUNT_LUA))
        .arg(2)
        .arg(latch_key(name))
        .arg(opened_key(name))
        .arg(count)
        .arg(arming);
    cmd
}

/// The latch hash's fields, empty when the key does not exist.
fn latch_fields(server: &RedisServer, name: &str) -> BTreeMap<String, String> {
    let value = server.cmd(&["HGETALL", &latch_key(name)]);
    redis::from_redis_value_ref::<BTreeMap<String, String>>(&value)
        .unwrap_or_else(|e| panic!("HGETALL: unexpected reply {value:?}: {e}"))
}

/// The id of the arming the latch is armed with, `None` when it is open.
fn arming(server: &RedisServer, name: &str) -> Option<String> {
    latch_fields(server, name).get("arming").cloned()
}

fn keys(server: &RedisServer, pattern: &str) -> Vec<String> {
    let value = server.cmd(&["KEYS", pattern]);
    let mut keys = redis::from_redis_value_ref::<Vec<String>>(&value)
        .unwrap_or_else(|e| panic!("KEYS: unexpected reply {value:?}: {e}"));
    keys.sort();
    keys
}

async fn connect_with_timeout(server: &RedisServer, command_timeout: Duration) -> Client {
    Client::builder(server.url())
        .command_timeout(command_timeout)
        .build()
        .await
        .expect("connect")
}

/// A task waiting on `latch` with `wait()`; it returns the outcome and when it came.
fn spawn_wait(latch: &CountDownLatch) -> JoinHandle<(Result<()>, Instant)> {
    let latch = latch.clone();
    tokio::spawn(async move {
        let outcome = latch.wait().await;
        (outcome, Instant::now())
    })
}

/// [`assert_idle`] once the clients' background withdrawals are over: a waiter that leaves
/// while its client is registered among the latch's waiters withdraws the client in the
/// background, and keeps trying through an outage for a few command timeouts.
async fn assert_settled(clients: &[&Client]) {
    eventually("the background withdrawals are over", SETTLE, || {
        clients
            .iter()
            .all(|client| client.local_state() == LocalState::default())
    })
    .await;
    assert_idle(clients);
}

/// Awaits a waiter task, failing the test if it takes longer than `within`.
async fn finish<T>(what: &str, within: Duration, task: JoinHandle<T>) -> T {
    tokio::time::timeout(within, task)
        .await
        .unwrap_or_else(|_| panic!("{what}: did not return within {within:?}"))
        .unwrap_or_else(|e| panic!("{what}: task failed: {e}"))
}

/// A waiter on the armed `latch` once Redis is back after an outage, subscribed. It must not
/// fail: the client's pub/sub hub may still be in its reconnect backoff, but a waiter that
/// arrives after the outage gets a whole command timeout of its own (see
/// `a_wait_started_right_after_an_outage_waits`).
async fn waiter_after_recovery(
    server: &RedisServer,
    latch: &CountDownLatch,
) -> JoinHandle<(Result<()>, Instant)> {
    let channel = latch_channel(latch.name());
    let waiter = spawn_wait(latch);
    eventually("a waiter subscribes or fails", SETTLE, || {
        waiter.is_finished() || server.numsub(&channel) == 1
    })
    .await;
    if waiter.is_finished() {
        let outcome = finish("a failed waiter", SETTLE, waiter).await;
        panic!("a waiter after an outage returned {outcome:?}");
    }
    waiter
}

/// Waits until `subscribers` clients are subscribed to the latch's channel.
async fn subscribed(server: &RedisServer, name: &str, subscribers: u64) {
    let channel = latch_channel(name);
    eventually(
        format!("{subscribers} clients subscribe to {channel}"),
        SETTLE,
        || server.numsub(&channel) == subscribers,
    )
    .await;
}

// ---------------------------------------------------------------------------------------------
// 1. A wait returns once the count reaches zero.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_returns_once_another_task_counts_down_to_zero() {
    let server = RedisServer::start();
    let name = "zero";
    let c = client(&server).await;
    let other = client(&server).await;
    let latch = c.count_down_latch(name);
    assert!(latch.try_set_count(1).await.expect("arm"));
    assert_eq!(latch.count().await.expect("count"), 1);

    let started = Instant::now();
    let counter = {
        let latch = other.count_down_latch(name);
        tokio::spawn(async move {
            tokio::time::sleep(ms(500)).await;
            latch.count_down().await.expect("count_down");
            Instant::now()
        })
    };
    let opened = latch
        .wait_for(Duration::from_secs(2))
        .await
        .expect("wait_for");
    let returned_at = Instant::now();
    let waited = returned_at.duration_since(started);
    let counted_at = finish("the count-down", SETTLE, counter).await;
    println!(
        "wait_for returned after {waited:?}, {:?} after the count-down completed",
        returned_at.saturating_duration_since(counted_at)
    );
    assert!(opened, "wait_for timed out although the latch opened");
    assert!(
        waited >= ms(450),
        "wait_for returned early, after {waited:?}"
    );
    assert!(waited < ms(1500), "wait_for returned only after {waited:?}");
    assert_eq!(latch.count().await.expect("count"), 0);
    assert!(
        !exists(&server, &latch_key(name)),
        "an open latch has no key"
    );
    eventually("the waiter unsubscribed", SETTLE, || {
        server.numsub(&latch_channel(name)) == 0
    })
    .await;
    assert_settled(&[&c, &other]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn count_down_and_delete_wake_waiters_by_message_not_by_the_recheck() {
    // The waiter subscribes, checks, and would sleep a whole RECHECK if no message came; the
    // latch opens right after that check, so only the message can wake it within BY_MESSAGE.
    let server = RedisServer::start();
    let name = "by-message";
    let waiter_client = client(&server).await;
    let opener_client = client(&server).await;
    let opener = opener_client.count_down_latch(name);
    let mut latencies = Vec::new();
    for round in 0..6 {
        assert!(opener.try_set_count(1).await.expect("arm"));
        let waiter = spawn_wait(&waiter_client.count_down_latch(name));
        subscribed(&server, name, 1).await;
        let opened_at = Instant::now();
        if round % 2 == 0 {
            opener.count_down().await.expect("count_down");
        } else {
            assert!(opener.delete().await.expect("delete"));
        }
        let (outcome, returned_at) = finish("the waiter", SETTLE, waiter).await;
        outcome.expect("wait");
        let latency = returned_at.duration_since(opened_at);
        latencies.push(latency);
        let how = if round % 2 == 0 {
            "count_down"
        } else {
            "delete"
        };
        assert!(
            latency < BY_MESSAGE,
            "round {round}: the waiter returned {latency:?} after the {how}"
        );
        subscribed(&server, name, 0).await;
        assert_settled(&[&waiter_client, &opener_client]).await;
    }
    println!("wake-up latencies: {latencies:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_opening_is_found_by_the_periodic_recheck() {
    // The key removed behind the scripts' back publishes nothing: the waiter re-reads the latch
    // by itself, at least every RECHECK.
    let server = RedisServer::start();
    let name = "silent";
    let c = client(&server).await;
    let latch = c.count_down_latch(name);
    for round in 0..2 {
        assert!(latch.try_set_count(1).await.expect("arm"));
        let waiter = spawn_wait(&latch);
        subscribed(&server, name, 1).await;
        let opened_at = Instant::now();
        assert_eq!(int(&server, &["DEL", &latch_key(name)]), 1);
        let (outcome, returned_at) = finish("the waiter", SETTLE, waiter).await;
        outcome.expect("wait");
        let after = returned_at.duration_since(opened_at);
        println!("round {round}: a silent opening was found after {after:?}");
        assert!(
            after < RECHECK + ms(1000),
            "round {round}: found only after {after:?}"
        );
        subscribed(&server, name, 0).await;
    }
    assert_settled(&[&c]).await;
}

// ---------------------------------------------------------------------------------------------
// 2. A timed wait gives up.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_returns_false_after_about_the_timeout() {
    let server = RedisServer::start();
    let name = "timeout";
    let c = client(&server).await;
    let latch = c.count_down_latch(name);
    assert!(latch.try_set_count(2).await.expect("arm"));
    let armed_fields = latch_fields(&server, name);

    for timeout in [ms(300), ms(700)] {
        let started = Instant::now();
        let opened = latch.wait_for(timeout).await.expect("wait_for");
        let waited = started.elapsed();
        println!("wait_for({timeout:?}) gave up after {waited:?}");
        assert!(!opened, "wait_for({timeout:?}) says an armed latch opened");
        assert!(
            waited >= timeout - ms(10) && waited < timeout + Duration::from_secs(1),
            "wait_for({timeout:?}) took {waited:?}"
        );
        assert_eq!(c.local_state(), LocalState::default());
        subscribed(&server, name, 0).await;
    }

    // A zero timeout checks once, without subscribing.
    let started = Instant::now();
    assert!(!latch.wait_for(Duration::ZERO).await.expect("wait_for(0)"));
    assert!(started.elapsed() < ms(500), "{:?}", started.elapsed());
    assert_eq!(
        server.command_calls("subscribe"),
        2,
        "wait_for(0) subscribed"
    );

    // Waiting changes nothing.
    assert_eq!(latch.count().await.expect("count"), 2);
    assert_eq!(latch_fields(&server, name), armed_fields);

    // Once open, a zero timeout is enough.
    latch.count_down().await.expect("count_down");
    latch.count_down().await.expect("count_down");
    assert!(latch.wait_for(Duration::ZERO).await.expect("wait_for(0)"));
    assert!(latch.wait_for(ms(300)).await.expect("wait_for"));
    assert_settled(&[&c]).await;
}

// ---------------------------------------------------------------------------------------------
// 3. Waiters on several clients all return after the last count-down, and none before.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_waiters_on_three_clients_return_after_the_last_count_down_only() {
    let server = RedisServer::start();
    let name = "five";
    let clients = [
        client(&server).await,
        client(&server).await,
        client(&server).await,
    ];
    let counter_client = client(&server).await;
    let counter = counter_client.count_down_latch(name);
    assert!(counter.try_set_count(3).await.expect("arm"));

    let last_count_down_started = Arc::new(AtomicBool::new(false));
    let mut waiters = Vec::new();
    for i in 0..5 {
        let latch = clients[i % 3].count_down_latch(name);
        let flag = last_count_down_started.clone();
        waiters.push(tokio::spawn(async move {
            let outcome = latch.wait().await;
            (outcome, flag.load(Ordering::SeqCst))
        }));
    }
    // One subscription per client, however many of its tasks wait.
    subscribed(&server, name, 3).await;
    for (i, c) in clients.iter().enumerate() {
        assert_eq!(
            c.local_state(),
            LocalState {
                waiting_queues: 1,
                subscribed_channels: 1,
                renewed_holds: 0,
                pending_releases: 0,
            },
            "client {i}"
        );
    }

    for left in [2, 1] {
        counter.count_down().await.expect("count_down");
        assert_eq!(counter.count().await.expect("count"), left);
        tokio::time::sleep(ms(200)).await;
        for (i, waiter) in waiters.iter().enumerate() {
            assert!(!waiter.is_finished(), "waiter {i} returned at count {left}");
        }
    }
    last_count_down_started.store(true, Ordering::SeqCst);
    counter.count_down().await.expect("the last count_down");
    for (i, waiter) in waiters.into_iter().enumerate() {
        let (outcome, saw_last) = finish(&format!("waiter {i}"), SETTLE, waiter).await;
        outcome.unwrap_or_else(|e| panic!("waiter {i}: {e}"));
        assert!(saw_last, "waiter {i} returned before the last count_down");
    }
    assert_eq!(counter.count().await.expect("count"), 0);
    subscribed(&server, name, 0).await;
    assert_settled(&[&clients[0], &clients[1], &clients[2], &counter_client]).await;
}

// ---------------------------------------------------------------------------------------------
// 4. The count never goes below zero.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_count_never_goes_below_zero() {
    let server = RedisServer::start();
    let c = client(&server).await;

    // Counting down a latch that was never armed does nothing.
    let name = "never-armed";
    let latch = c.count_down_latch(name);
    for _ in 0..3 {
        latch.count_down().await.expect("count_down");
    }
    assert_eq!(latch.count().await.expect("count"), 0);
    assert!(!exists(&server, &latch_key(name)));
    assert!(latch.wait_for(Duration::ZERO).await.expect("wait_for(0)"));
    // Nothing was owed: arming sets exactly the count asked for.
    assert!(latch.try_set_count(2).await.expect("arm"));
    assert_eq!(latch.count().await.expect("count"), 2);

    // Counting down past zero.
    latch.count_down().await.expect("count_down");
    latch.count_down().await.expect("count_down");
    latch.count_down().await.expect("count_down past zero");
    assert_eq!(latch.count().await.expect("count"), 0);
    assert!(!exists(&server, &latch_key(name)));
    assert!(latch.try_set_count(1).await.expect("re-arm"));
    assert_eq!(latch.count().await.expect("count"), 1);

    // Many more concurrent count-downs than the count, from several clients.
    let name = "crowd";
    const CLIENTS: usize = 4;
    const EACH: usize = 6;
    const COUNT: u64 = 5;
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(client(&server).await);
    }
    let latch = clients[0].count_down_latch(name);
    assert!(latch.try_set_count(COUNT).await.expect("arm"));
    let mut tasks = Vec::new();
    for c in &clients {
        for _ in 0..EACH {
            let latch = c.count_down_latch(name);
            tasks.push(tokio::spawn(async move { latch.count_down().await }));
        }
    }
    for (i, task) in tasks.into_iter().enumerate() {
        finish(&format!("count_down {i}"), SETTLE, task)
            .await
            .unwrap_or_else(|e| panic!("count_down {i}: {e}"));
    }
    assert_eq!(latch.count().await.expect("count"), 0);
    assert!(!exists(&server, &latch_key(name)), "the latch key is left");
    // The arming remembers the count-downs applied to it, and only those: the others found
    // it open and changed nothing. Nothing else is left.
    assert_eq!(remembered(&server, &opened_key(name)).len(), COUNT as usize);
    assert_eq!(
        keys(&server, &common::keys::all(name)),
        vec![opened_key(name)]
    );
    assert!(latch.try_set_count(3).await.expect("re-arm"));
    assert_eq!(latch.count().await.expect("count"), 3);
    assert_eq!(
        latch_fields(&server, name).get("count").map(String::as_str),
        Some("3")
    );
    let mut all = vec![&c];
    all.extend(clients.iter());
    assert_settled(&all).await;
}

// ---------------------------------------------------------------------------------------------
// 5. A latch that was never armed is open.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_never_armed_latch_is_open() {
    let server = RedisServer::start();
    let name = "never";
    let c = client(&server).await;
    let latch = c.count_down_latch(name);
    assert_eq!(latch.name(), name);
    assert_eq!(latch.count().await.expect("count"), 0);
    let started = Instant::now();
    tokio::time::timeout(SETTLE, latch.wait())
        .await
        .expect("wait on an open latch returns")
        .expect("wait");
    assert!(latch.wait_for(Duration::ZERO).await.expect("wait_for(0)"));
    assert!(latch.wait_for(ms(100)).await.expect("wait_for"));
    let took = started.elapsed();
    assert!(took < ms(500), "three waits on an open latch took {took:?}");
    // Checked in one request each, without subscribing or writing anything.
    assert_eq!(server.command_calls("subscribe"), 0);
    assert_eq!(int(&server, &["DBSIZE"]), 0);
    assert!(!latch.delete().await.expect("delete"));
    assert_settled(&[&c]).await;
}

// ---------------------------------------------------------------------------------------------
// 6. delete opens the latch: its waiters return.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_opens_the_latch_and_wakes_every_waiter() {
    let server = RedisServer::start();
    let name = "deleted";
    let a = client(&server).await;
    let b = client(&server).await;
    let latch = a.count_down_latch(name);
    assert!(latch.try_set_count(4).await.expect("arm"));
    let waiters = vec![
        spawn_wait(&a.count_down_latch(name)),
        spawn_wait(&a.count_down_latch(name)),
        spawn_wait(&b.count_down_latch(name)),
    ];
    subscribed(&server, name, 2).await;
    tokio::time::sleep(ms(100)).await;
    assert!(waiters.iter().all(|w| !w.is_finished()), "returned early");

    let deleted_at = Instant::now();
    assert!(
        b.count_down_latch(name).delete().await.expect("delete"),
        "delete of an armed latch"
    );
    for (i, waiter) in waiters.into_iter().enumerate() {
        let (outcome, returned_at) = finish(&format!("waiter {i}"), SETTLE, waiter).await;
        outcome.unwrap_or_else(|e| panic!("waiter {i}: {e}"));
        let after = returned_at.duration_since(deleted_at);
        assert!(
            after < ms(3000),
            "waiter {i} returned {after:?} after delete"
        );
    }
    assert!(!latch.delete().await.expect("delete"), "a second delete");
    assert_eq!(latch.count().await.expect("count"), 0);
    assert!(!exists(&server, &latch_key(name)));
    // Deleted, it can be armed anew.
    assert!(latch.try_set_count(1).await.expect("re-arm"));
    assert_eq!(latch.count().await.expect("count"), 1);
    subscribed(&server, name, 0).await;
    assert_settled(&[&a, &b]).await;
}

// ---------------------------------------------------------------------------------------------
// 7. The subscriber connection is killed while waiting.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_return_after_their_subscriber_connection_is_killed() {
    let server = RedisServer::start();
    let name = "killed";
    let a = client(&server).await;
    let b = client(&server).await;
    let counter_client = client(&server).await;
    let counter = counter_client.count_down_latch(name);

    // Killed, resubscribed, then counted down in two steps, the last one right after
    // another kill.
    assert!(counter.try_set_count(2).await.expect("arm"));
    let waiters = vec![
        spawn_wait(&a.count_down_latch(name)),
        spawn_wait(&a.count_down_latch(name)),
        spawn_wait(&b.count_down_latch(name)),
        spawn_wait(&b.count_down_latch(name)),
    ];
    subscribed(&server, name, 2).await;
    let killed = int(&server, &["CLIENT", "KILL", "TYPE", "pubsub"]);
    assert!(killed >= 2, "CLIENT KILL TYPE pubsub killed {killed}");
    subscribed(&server, name, 2).await; // both hubs are back
    counter.count_down().await.expect("count_down");
    tokio::time::sleep(ms(200)).await;
    assert!(waiters.iter().all(|w| !w.is_finished()), "returned at 1");
    let killed = int(&server, &["CLIENT", "KILL", "TYPE", "pubsub"]);
    assert!(killed >= 2, "CLIENT KILL TYPE pubsub killed {killed}");
    let opened_at = Instant::now();
    counter.count_down().await.expect("the last count_down");
    for (i, waiter) in waiters.into_iter().enumerate() {
        let (outcome, returned_at) = finish(&format!("waiter {i}"), SETTLE, waiter).await;
        outcome.unwrap_or_else(|e| panic!("waiter {i}: {e}"));
        let after = returned_at.duration_since(opened_at);
        assert!(
            after < ms(3000),
            "waiter {i} returned {after:?} after opening"
        );
    }
    subscribed(&server, name, 0).await;
    assert_settled(&[&a, &b, &counter_client]).await;

    // The opening message is lost for sure: the connections die in the same transaction
    // that opens the latch.
    assert!(counter.try_set_count(1).await.expect("re-arm"));
    let waiters = vec![
        spawn_wait(&a.count_down_latch(name)),
        spawn_wait(&b.count_down_latch(name)),
    ];
    subscribed(&server, name, 2).await;
    let mut con = server.connection();
    let (killed, opened): (i64, i64) = redis::pipe()
        .atomic()
        .cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .add_command(raw_count_down(name, "test:lost-message"))
        .query(&mut con)
        .expect("kill and count down");
    let opened_at = Instant::now();
    assert!(killed >= 2, "CLIENT KILL TYPE pubsub killed {killed}");
    assert_eq!(opened, 1, "the raw count-down opened the latch");
    for (i, waiter) in waiters.into_iter().enumerate() {
        let (outcome, returned_at) = finish(&format!("waiter {i}"), SETTLE, waiter).await;
        outcome.unwrap_or_else(|e| panic!("waiter {i} after a lost message: {e}"));
        let after = returned_at.duration_since(opened_at);
        println!("waiter {i} returned {after:?} after a lost opening message");
        assert!(
            after < RECHECK + ms(2000),
            "waiter {i} returned {after:?} after opening"
        );
    }
    subscribed(&server, name, 0).await;
    assert_settled(&[&a, &b, &counter_client]).await;
}

// ---------------------------------------------------------------------------------------------
// 8. N waiters and N count-downs from N clients.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_waiters_and_eight_count_downs_from_eight_clients() {
    const N: usize = 8;
    let server = RedisServer::start();
    let name = "eight";
    let mut clients = Vec::new();
    for _ in 0..N {
        clients.push(client(&server).await);
    }
    assert!(clients[0]
        .count_down_latch(name)
        .try_set_count(N as u64)
        .await
        .expect("arm"));
    let waiters: Vec<_> = clients
        .iter()
        .map(|c| {
            let latch = c.count_down_latch(name);
            tokio::spawn(async move {
                latch.wait().await?;
                // Nothing re-arms the latch here, so the count a waiter sees after returning
                // is the count it returned on.
                latch.count().await
            })
        })
        .collect();
    subscribed(&server, name, N as u64).await;
    let counters: Vec<_> = clients
        .iter()
        .map(|c| {
            let latch = c.count_down_latch(name);
            tokio::spawn(async move { latch.count_down().await })
        })
        .collect();
    for (i, counter) in counters.into_iter().enumerate() {
        finish(&format!("count_down {i}"), SETTLE, counter)
            .await
            .unwrap_or_else(|e| panic!("count_down {i}: {e}"));
    }
    for (i, waiter) in waiters.into_iter().enumerate() {
        let seen = finish(&format!("waiter {i}"), SETTLE, waiter)
            .await
            .unwrap_or_else(|e| panic!("waiter {i}: {e}"));
        assert_eq!(seen, 0, "waiter {i} returned on a count of {seen}");
    }
    assert!(!exists(&server, &latch_key(name)));
    assert_eq!(remembered(&server, &opened_key(name)).len(), N);
    subscribed(&server, name, 0).await;
    let all: Vec<&Client> = clients.iter().collect();
    assert_settled(&all).await;
}

// ---------------------------------------------------------------------------------------------
// 9. Re-arming.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_latch_can_be_armed_again_and_an_armed_one_is_left_alone() {
    let server = RedisServer::start();
    let name = "rearm";
    let c = client(&server).await;
    let other = client(&server).await;
    let latch = c.count_down_latch(name);
    assert!(latch.try_set_count(2).await.expect("arm"));
    let first = arming(&server, name).expect("an armed latch has an arming");
    assert!(!latch.try_set_count(5).await.expect("arm again"));
    assert!(!other
        .count_down_latch(name)
        .try_set_count(1)
        .await
        .expect("arm from another client"));
    assert_eq!(latch.count().await.expect("count"), 2);
    assert_eq!(arming(&server, name).as_deref(), Some(first.as_str()));

    latch.count_down().await.expect("count_down");
    assert!(!latch.try_set_count(7).await.expect("arm at 1"));
    assert_eq!(latch.count().await.expect("count"), 1);
    latch.count_down().await.expect("count_down");
    assert_eq!(latch.count().await.expect("count"), 0);

    assert!(other
        .count_down_latch(name)
        .try_set_count(4)
        .await
        .expect("re-arm"));
    assert_eq!(latch.count().await.expect("count"), 4);
    let second = arming(&server, name).expect("re-armed");
    assert_ne!(first, second, "a new arming has a new id");
    assert!(!latch.try_set_count(1).await.expect("arm again"));
    assert_eq!(latch.count().await.expect("count"), 4);
    assert_eq!(arming(&server, name).as_deref(), Some(second.as_str()));
    // The re-armed latch works like a fresh one.
    assert!(!latch.wait_for(ms(100)).await.expect("wait_for"));
    for _ in 0..4 {
        latch.count_down().await.expect("count_down");
    }
    assert!(latch.wait_for(ms(100)).await.expect("wait_for"));
    assert_settled(&[&c, &other]).await;
}

// ---------------------------------------------------------------------------------------------
// 10. A waiter of an earlier arming returns even if the latch was re-armed meanwhile.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_returns_when_the_latch_is_opened_and_re_armed_at_once() {
    let server = RedisServer::start();
    let name = "replaced";
    let waiter_client = client(&server).await;
    let other_client = client(&server).await;
    let other = other_client.count_down_latch(name);
    let third_client = client(&server).await;
    let waiting = |c: &Client, timeout: Duration| {
        let latch = c.count_down_latch(name);
        tokio::spawn(async move {
            let opened = latch.wait_for(timeout).await;
            (opened, Instant::now())
        })
    };

    // Deterministic: the count-down and the re-arm run in one transaction, so no read of the
    // waiters can fall between them: they find the latch armed, by another arming. Two of them
    // share a client (and its subscription), one has its own.
    assert!(other.try_set_count(1).await.expect("arm"));
    let first = arming(&server, name).expect("armed");
    let scripts_before = waiter_client.stats().scripts_sent;
    let mut waiters = vec![
        waiting(&waiter_client, Duration::from_secs(5)),
        waiting(&third_client, Duration::from_secs(5)),
    ];
    subscribed(&server, name, 2).await;
    // The second waiter of a client arrives while the first one waits. It reads the latch
    // itself, before and after joining the subscription, rather than queueing behind the
    // first (it would then take the new arming for its own).
    waiters.push(waiting(&waiter_client, Duration::from_secs(5)));
    eventually(
        "both waiters of one client have read the latch",
        SETTLE,
        || waiter_client.stats().scripts_sent >= scripts_before + 4,
    )
    .await;
    let mut con = server.connection();
    let (opened, rearmed): (i64, i64) = redis::pipe()
        .atomic()
        .add_command(raw_count_down(name, "test:replaced"))
        .add_command(raw_try_set_count(name, 1, "test:second-arming"))
        .query(&mut con)
        .expect("count down and re-arm");
    let replaced_at = Instant::now();
    assert_eq!((opened, rearmed), (1, 1));
    for (i, waiter) in waiters.into_iter().enumerate() {
        let (outcome, returned_at) = finish(&format!("waiter {i}"), SETTLE, waiter).await;
        assert!(
            outcome.expect("wait_for"),
            "waiter {i} of arming {first} missed its opening: the latch was re-armed first"
        );
        let after = returned_at.duration_since(replaced_at);
        assert!(
            after < RECHECK + ms(1000),
            "waiter {i} returned {after:?} after opening"
        );
    }
    assert_eq!(other.count().await.expect("count"), 1);
    assert_eq!(arming(&server, name).as_deref(), Some("test:second-arming"));
    // A waiter of the new arming does wait for it.
    assert!(!waiter_client
        .count_down_latch(name)
        .wait_for(ms(300))
        .await
        .expect("wait_for"));
    other.count_down().await.expect("count_down");
    assert!(waiter_client
        .count_down_latch(name)
        .wait_for(ms(300))
        .await
        .expect("wait_for"));

    // Through the API, back to back from another client: the waiter returns, whether it saw
    // the zero or the new arming.
    for round in 0..5 {
        assert!(other.try_set_count(1).await.expect("arm"));
        let waiter = waiting(&waiter_client, Duration::from_secs(5));
        subscribed(&server, name, 1).await;
        let replaced_at = Instant::now();
        other.count_down().await.expect("count_down");
        assert!(other.try_set_count(1).await.expect("re-arm"));
        let (outcome, returned_at) = finish("the waiter", SETTLE, waiter).await;
        assert!(
            outcome.expect("wait_for"),
            "round {round}: the waiter missed its opening"
        );
        let after = returned_at.duration_since(replaced_at);
        assert!(
            after < RECHECK + ms(1000),
            "round {round}: returned {after:?} after opening"
        );
        assert_eq!(other.count().await.expect("count"), 1);
        other.count_down().await.expect("count_down");
        subscribed(&server, name, 0).await;
    }
    assert_settled(&[&waiter_client, &other_client, &third_client]).await;
}

// ---------------------------------------------------------------------------------------------
// 11. Bad input and foreign data.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_an_invalid_argument_and_touches_nothing() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let name = "bad";
    let latch = c.count_down_latch(name);
    for count in [0, u64::MAX, i64::MAX as u64 + 1] {
        assert_invalid(
            &format!("try_set_count({count})"),
            latch.try_set_count(count).await,
        );
    }
    assert_invalid(
        "wait_for(Duration::MAX) on an open latch",
        latch.wait_for(Duration::MAX).await,
    );
    assert_invalid(
        "wait_for(2^53 + 1 ms)",
        latch.wait_for(ms((1 << 53) + 1)).await,
    );
    // The longest wait Redis milliseconds can express is fine.
    assert!(latch
        .wait_for(ms(1 << 53))
        .await
        .expect("wait_for(2^53 ms)"));
    assert_eq!(int(&server, &["DBSIZE"]), 0, "a bad call wrote to Redis");

    // The largest count works, and counts down exactly.
    let max = i64::MAX as u64;
    assert!(latch
        .try_set_count(max)
        .await
        .expect("try_set_count(i64::MAX)"));
    assert_eq!(latch.count().await.expect("count"), max);
    latch.count_down().await.expect("count_down");
    assert_eq!(latch.count().await.expect("count"), max - 1);
    assert_eq!(
        latch_fields(&server, name).get("count").map(String::as_str),
        Some((max - 1).to_string().as_str())
    );
    // Checked before anything else, on an armed latch too.
    let started = Instant::now();
    assert_invalid(
        "wait_for(Duration::MAX) on an armed latch",
        latch.wait_for(Duration::MAX).await,
    );
    assert!(started.elapsed() < ms(500), "{:?}", started.elapsed());
    assert_invalid("try_set_count(0) armed", latch.try_set_count(0).await);
    assert_eq!(latch.count().await.expect("count"), max - 1);

    // Bad names: every call says so.
    let too_long = "n".repeat(1025);
    for bad in ["", "}starts-with-brace", too_long.as_str()] {
        let latch = c.count_down_latch(bad);
        let short: String = bad.chars().take(20).collect();
        assert_eq!(latch.name(), bad);
        assert_invalid(
            &format!("{short:?} try_set_count"),
            latch.try_set_count(1).await,
        );
        assert_invalid(&format!("{short:?} count_down"), latch.count_down().await);
        assert_invalid(&format!("{short:?} count"), latch.count().await);
        assert_invalid(&format!("{short:?} wait"), latch.wait().await);
        assert_invalid(&format!("{short:?} wait_for"), latch.wait_for(ms(10)).await);
        assert_invalid(
            &format!("{short:?} wait_for(0)"),
            latch.wait_for(Duration::ZERO).await,
        );
        assert_invalid(&format!("{short:?} delete"), latch.delete().await);
    }
    // The longest good name works.
    let longest = "n".repeat(1024);
    let latch = c.count_down_latch(longest.as_str());
    assert!(latch.try_set_count(1).await.expect("arm the longest name"));
    assert!(latch.delete().await.expect("delete"));
    assert!(remembered(&server, &opened_key(&longest)).is_empty());
    server.cmd(&["DEL", &opened_key(&longest)]);
    // Only the good calls on "bad" left keys: the latch, which remembers its count-down.
    assert_eq!(
        keys(&server, "*"),
        keys(&server, &common::keys::all("bad")),
        "a bad call wrote to Redis"
    );
    assert_eq!(keys(&server, "*"), vec![latch_key(name)]);
    assert_eq!(remembered(&server, &latch_key(name)).len(), 1);
    assert_settled(&[&c]).await;
}

/// What lies under a key, for comparing before and after.
fn snapshot(server: &RedisServer, key: &str) -> (String, Value) {
    let kind = text(&server.cmd(&["TYPE", key]));
    let content = match kind.as_str() {
        "string" => server.cmd(&["GET", key]),
        "hash" => server.cmd(&["HGETALL", key]),
        "list" => server.cmd(&["LRANGE", key, "0", "-1"]),
        other => panic!("unexpected type {other}"),
    };
    (kind, content)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_data_under_the_key_is_wrong_type_and_left_alone() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let plants: [(&str, &[&str]); 5] = [
        ("text", &["SET", "not a latch"]),
        ("number", &["SET", "3"]),
        ("hash", &["HSET", "field", "value"]),
        ("count-only", &["HSET", "count", "3"]),
        ("list", &["RPUSH", "x"]),
    ];
    for (name, plant) in plants {
        let key = latch_key(name);
        let mut args = vec![plant[0], key.as_str()];
        args.extend_from_slice(&plant[1..]);
        server.cmd(&args);
        let before = snapshot(&server, &key);
        let latch = c.count_down_latch(name);
        let what = |call: &str| format!("{name}: {call}");
        assert_wrong_type(&what("count"), latch.count().await);
        assert_wrong_type(&what("count_down"), latch.count_down().await);
        assert_wrong_type(&what("try_set_count"), latch.try_set_count(1).await);
        assert_wrong_type(
            &what("wait"),
            tokio::time::timeout(SETTLE, latch.wait())
                .await
                .expect("wait returns"),
        );
        assert_wrong_type(&what("wait_for"), latch.wait_for(ms(500)).await);
        assert_wrong_type(&what("wait_for(0)"), latch.wait_for(Duration::ZERO).await);
        assert_wrong_type(&what("delete"), latch.delete().await);
        assert_eq!(snapshot(&server, &key), before, "{name}: the data changed");
        assert_eq!(
            keys(&server, &common::keys::all(name)),
            vec![key.clone()],
            "{name}: a call wrote beside the foreign data"
        );
        assert_eq!(server.numsub(&latch_channel(name)), 0);
        assert_eq!(server.command_calls("publish"), 0);
    }
    assert_settled(&[&c]).await;
}

// ---------------------------------------------------------------------------------------------
// 12. An outage fails a waiter; it does not hang.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_fails_within_a_few_command_timeouts_when_redis_stops() {
    let mut server = RedisServer::start();
    let name = "outage";
    let command_timeout = ms(500);
    let c = connect_with_timeout(&server, command_timeout).await;
    let latch = c.count_down_latch(name);
    assert!(latch.try_set_count(1).await.expect("arm"));
    let waiter = spawn_wait(&latch);
    let timed_waiter = {
        let latch = latch.clone();
        tokio::spawn(async move {
            let outcome = latch.wait_for(Duration::from_secs(60)).await;
            (outcome, Instant::now())
        })
    };
    subscribed(&server, name, 1).await;

    server.stop();
    let stopped_at = Instant::now();
    let (outcome, failed_at) = finish("wait() with redis down", SETTLE, waiter).await;
    match &outcome {
        Err(e) if is_outage(e) => {}
        other => panic!("wait() with redis down: {other:?}"),
    }
    let (timed_outcome, timed_failed_at) =
        finish("wait_for() with redis down", SETTLE, timed_waiter).await;
    match &timed_outcome {
        Err(e) if is_outage(e) => {}
        other => panic!("wait_for() with redis down: {other:?}"),
    }
    for (call, at, outcome) in [
        ("wait()", failed_at, format!("{outcome:?}")),
        ("wait_for()", timed_failed_at, format!("{timed_outcome:?}")),
    ] {
        let after = at.duration_since(stopped_at);
        println!("{call} failed {after:?} after redis stopped: {outcome}");
        assert!(
            after < command_timeout * 6,
            "{call} failed only {after:?} after redis stopped"
        );
    }
    // A new wait fails too, within about a command timeout.
    let started = Instant::now();
    match latch.wait().await {
        Err(e) if is_outage(&e) => {}
        other => panic!("a new wait() with redis down: {other:?}"),
    }
    assert!(
        started.elapsed() < command_timeout * 4,
        "{:?}",
        started.elapsed()
    );
    assert_settled(&[&c]).await;

    // After a restart (without persistence the latch is open) the client works again.
    server.restart();
    let deadline = Instant::now() + SETTLE;
    loop {
        match latch.wait_for(Duration::from_secs(1)).await {
            Ok(opened) => {
                assert!(opened, "the latch is open after a restart");
                break;
            }
            Err(e) if is_outage(&e) && Instant::now() < deadline => {
                tokio::time::sleep(ms(50)).await;
            }
            Err(e) => panic!("the client did not recover after the restart: {e}"),
        }
    }
    // And waiters are woken again.
    assert!(latch.try_set_count(1).await.expect("arm after the restart"));
    let waiter = waiter_after_recovery(&server, &latch).await;
    let opened_at = Instant::now();
    latch.count_down().await.expect("count_down");
    let (outcome, returned_at) = finish("the waiter after the restart", SETTLE, waiter).await;
    outcome.expect("wait after the restart");
    let after = returned_at.duration_since(opened_at);
    assert!(after < BY_MESSAGE, "returned {after:?} after opening");
    assert_settled(&[&c]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_fails_with_a_timeout_when_redis_is_paused() {
    let server = RedisServer::start();
    let name = "paused";
    let command_timeout = ms(500);
    let c = connect_with_timeout(&server, command_timeout).await;
    let latch = c.count_down_latch(name);
    assert!(latch.try_set_count(1).await.expect("arm"));
    let waiter = spawn_wait(&latch);
    subscribed(&server, name, 1).await;

    server.pause();
    let paused_at = Instant::now();
    let finished = tokio::time::timeout(SETTLE, waiter).await;
    server.resume();
    let (outcome, failed_at) = finished
        .expect("a waiter must not hang while redis is paused")
        .expect("waiter task");
    let after = failed_at.duration_since(paused_at);
    println!("the waiter failed {after:?} after redis was paused: {outcome:?}");
    match &outcome {
        Err(e) if is_outage(e) => {}
        other => panic!("wait() on a paused server: {other:?}"),
    }
    assert!(
        after < command_timeout * 8,
        "the waiter failed only {after:?} after the pause"
    );
    assert_settled(&[&c]).await;

    // Resumed, everything works again.
    let deadline = Instant::now() + SETTLE;
    loop {
        match latch.count().await {
            Ok(count) => {
                assert_eq!(count, 1, "the count after a pause");
                break;
            }
            Err(e) if is_outage(&e) && Instant::now() < deadline => {
                tokio::time::sleep(ms(50)).await;
            }
            Err(e) => panic!("the client did not recover after the pause: {e}"),
        }
    }
    let waiter = waiter_after_recovery(&server, &latch).await;
    let opened_at = Instant::now();
    latch.count_down().await.expect("count_down");
    let (outcome, returned_at) = finish("the waiter after the pause", SETTLE, waiter).await;
    outcome.expect("wait after the pause");
    let after = returned_at.duration_since(opened_at);
    assert!(after < BY_MESSAGE, "returned {after:?} after opening");
    assert_settled(&[&c]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_fails_a_waiter_and_every_later_call() {
    let server = RedisServer::start();
    let name = "shutdown";
    let c = client(&server).await;
    let latch = c.count_down_latch(name);
    assert!(latch.try_set_count(1).await.expect("arm"));
    let waiter = spawn_wait(&latch);
    subscribed(&server, name, 1).await;
    c.shutdown().await;
    let (outcome, _) = finish("the waiter after shutdown", SETTLE, waiter).await;
    assert!(
        matches!(outcome, Err(Error::Shutdown)),
        "wait after shutdown: {outcome:?}"
    );
    assert!(matches!(latch.wait().await, Err(Error::Shutdown)));
    assert!(matches!(latch.count_down().await, Err(Error::Shutdown)));
    assert!(matches!(latch.count().await, Err(Error::Shutdown)));
    assert!(matches!(latch.try_set_count(1).await, Err(Error::Shutdown)));
    assert!(matches!(latch.delete().await, Err(Error::Shutdown)));
    // Nothing changed in Redis.
    assert_eq!(
        latch_fields(&server, name).get("count").map(String::as_str),
        Some("1")
    );
    subscribed(&server, name, 0).await;
}

// ---------------------------------------------------------------------------------------------
// 13. A cancelled wait leaves nothing behind.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_wait_leaves_no_subscription_or_queue() {
    let server = RedisServer::start();
    let name = "cancelled";
    let c = client(&server).await;
    let latch = c.count_down_latch(name);
    assert!(latch.try_set_count(1).await.expect("arm"));
    let channel = latch_channel(name);

    // Cut at every await point until the wait is asleep.
    let mut asleep = false;
    for pendings in 0..20 {
        let outcome = tokio::time::timeout(ms(300), cut_at_await(pendings, latch.wait())).await;
        match outcome {
            Ok(None) => {}
            Ok(Some(outcome)) => panic!("wait returned {outcome:?} on an armed latch"),
            Err(_) => asleep = true,
        }
        assert_eq!(
            c.local_state(),
            LocalState::default(),
            "cut at await {pendings}: local state left"
        );
        eventually(
            format!("cut at await {pendings}: the subscription is gone"),
            SETTLE,
            || server.numsub(&channel) == 0,
        )
        .await;
        if asleep {
            break;
        }
    }
    assert!(asleep, "the wait never went to sleep");

    // wait_for too.
    let cut = tokio::time::timeout(ms(300), latch.wait_for(Duration::from_secs(30))).await;
    assert!(cut.is_err(), "wait_for returned {cut:?} on an armed latch");
    assert_eq!(c.local_state(), LocalState::default());
    subscribed(&server, name, 0).await;

    // Cancelling one of two waiters of a client keeps the other one's subscription.
    let stays = spawn_wait(&latch);
    let goes = {
        let latch = latch.clone();
        tokio::spawn(async move { latch.wait().await })
    };
    subscribed(&server, name, 1).await;
    tokio::time::sleep(ms(100)).await; // both are asleep by now
    assert!(!stays.is_finished() && !goes.is_finished());
    goes.abort();
    assert!(goes.await.is_err_and(|e| e.is_cancelled()));
    tokio::time::sleep(ms(200)).await;
    assert_eq!(
        server.numsub(&channel),
        1,
        "the other waiter lost its subscription"
    );
    assert_eq!(c.local_state().subscribed_channels, 1);
    let opened_at = Instant::now();
    c.count_down_latch(name)
        .count_down()
        .await
        .expect("count_down");
    let (outcome, returned_at) = finish("the remaining waiter", SETTLE, stays).await;
    outcome.expect("wait");
    let after = returned_at.duration_since(opened_at);
    assert!(
        after < BY_MESSAGE,
        "the remaining waiter returned {after:?} after opening"
    );
    subscribed(&server, name, 0).await;
    assert_settled(&[&c]).await;
}

// ---------------------------------------------------------------------------------------------
// 14. A count-down is applied once; what Redis keeps for that is bounded.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_count_down_applies_once_and_is_remembered_by_its_arming() {
    let server = RedisServer::start();
    let name = "once";
    let command_timeout = ms(300);
    let c = connect_with_timeout(&server, command_timeout).await;
    let latch = c.count_down_latch(name);
    assert!(latch.try_set_count(3).await.expect("arm"));
    latch.count_down().await.expect("count_down");
    latch.count_down().await.expect("count_down");
    assert_eq!(
        latch.count().await.expect("count"),
        1,
        "two count-downs, one each"
    );

    // The armed latch remembers both in itself; no key per count-down.
    let requests = remembered(&server, &latch_key(name));
    assert_eq!(requests.len(), 2, "{requests:?}");
    assert!(
        requests.values().all(|outcome| outcome == "0"),
        "{requests:?}"
    );
    assert_eq!(keys(&server, "*"), vec![latch_key(name)]);

    // A retry of either (a request whose reply was lost is sent again under its id) changes
    // nothing and answers what the first run answered.
    let mut con = server.connection();
    for request in requests.keys() {
        let outcome: i64 = raw_count_down(name, request)
            .query(&mut con)
            .expect("retry");
        assert_eq!(outcome, 0, "a retry of {request}");
    }
    assert_eq!(
        latch.count().await.expect("count"),
        1,
        "a retry counted down again"
    );

    // The opening count-down: the arming's count-downs are remembered for COUNT_DOWN_MEMORY
    // after it opened, the opening one saying so.
    latch.count_down().await.expect("the last count_down");
    assert_eq!(latch.count().await.expect("count"), 0);
    let opened = remembered(&server, &opened_key(name));
    assert_eq!(opened.len(), 3, "{opened:?}");
    let opening: Vec<&String> = opened
        .iter()
        .filter(|(_, outcome)| *outcome == "1")
        .map(|(request, _)| request)
        .collect();
    assert_eq!(opening.len(), 1, "{opened:?}");
    let ttl = int(&server, &["PTTL", &opened_key(name)]);
    let keep = COUNT_DOWN_MEMORY.as_millis() as i64;
    assert!(
        ttl > keep - 60_000 && ttl <= keep,
        "PTTL {ttl}, want about {keep}"
    );
    // Re-armed: late retries of the opened arming's count-downs do not count the new arming
    // down, and answer what they answered first.
    assert!(latch.try_set_count(2).await.expect("re-arm"));
    for (request, first) in &opened {
        let outcome: i64 = raw_count_down(name, request)
            .query(&mut con)
            .expect("late retry");
        assert_eq!(outcome.to_string(), *first, "a late retry of {request}");
    }
    assert_eq!(
        latch.count().await.expect("count"),
        2,
        "a retry counted the new arming down"
    );

    // A count-down on an open latch changes nothing and leaves nothing.
    let open = c.count_down_latch("open");
    open.count_down().await.expect("count_down");
    assert!(keys(&server, &common::keys::all("open")).is_empty());

    // Bounded: however many armings open, Redis keeps the latch, the last opened arming's
    // count-downs, and nothing else.
    for _ in 0..20 {
        latch.count_down().await.expect("count_down");
        latch.count_down().await.expect("count_down");
        assert_eq!(latch.count().await.expect("count"), 0);
        assert!(latch.try_set_count(2).await.expect("re-arm"));
    }
    assert_eq!(keys(&server, "*"), vec![latch_key(name), opened_key(name)]);
    assert_eq!(remembered(&server, &opened_key(name)).len(), 2);
    // The last opened arming is forgotten after the memory (2 s for the raw count-down).
    latch.count_down().await.expect("count_down");
    let request = "test:opens-with-a-short-memory";
    let outcome: i64 = raw_count_down(name, request).query(&mut con).expect("open");
    assert_eq!(outcome, 1);
    eventually("the opened arming is forgotten", SETTLE, || {
        !exists(&server, &opened_key(name))
    })
    .await;
    assert_settled(&[&c]).await;
}

// ---------------------------------------------------------------------------------------------
// 15. Statistics.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_latch_wait_is_not_counted_as_an_acquire() {
    let server = RedisServer::start();
    let name = "stats";
    let c = client(&server).await;
    let other = client(&server).await;
    let latch = c.count_down_latch(name);
    let before = c.stats();
    assert_eq!(before.acquires, 0);

    latch.wait().await.expect("wait on an open latch");
    assert!(latch
        .wait_for(ms(50))
        .await
        .expect("wait_for on an open latch"));
    assert!(latch.try_set_count(1).await.expect("arm"));
    assert!(!latch
        .wait_for(ms(200))
        .await
        .expect("wait_for on an armed latch"));
    let waiter = spawn_wait(&latch);
    subscribed(&server, name, 1).await;
    other
        .count_down_latch(name)
        .count_down()
        .await
        .expect("count_down");
    let (outcome, _) = finish("the waiter", SETTLE, waiter).await;
    outcome.expect("wait");

    let after = c.stats();
    assert_eq!(
        after.acquires, before.acquires,
        "a latch wait counted as an acquire"
    );
    assert_eq!(
        after.contended_waits, before.contended_waits,
        "a latch wait counted as a contended acquire"
    );
    assert!(after.scripts_sent > before.scripts_sent, "{after:?}");
    assert_eq!(other.stats().acquires, 0);
    assert_settled(&[&c, &other]).await;
}

/// Once Redis was unreachable for a command timeout, the client's pub/sub hub counts the
/// outage until its next reconnect (up to a second of backoff later). A waiter that subscribes
/// after Redis came back must not be failed by that outage: it gets a whole command timeout
/// of its own, and its subscription cuts the backoff short.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_started_right_after_an_outage_waits() {
    let mut server = RedisServer::start();
    let name = "after-outage";
    let c = connect_with_timeout(&server, Duration::from_secs(2)).await;
    let latch = c.count_down_latch(name);
    assert!(latch.try_set_count(1).await.expect("arm"));
    let waiter = spawn_wait(&latch);
    subscribed(&server, name, 1).await;
    server.stop();
    let (outcome, _) = finish("the waiter while redis is down", SETTLE, waiter).await;
    assert!(matches!(&outcome, Err(e) if is_outage(e)), "{outcome:?}");
    // Down for a while: the hub's reconnect backoff grows to about a second.
    tokio::time::sleep(ms(3000)).await;
    server.restart();
    let deadline = Instant::now() + SETTLE;
    loop {
        match latch.try_set_count(1).await {
            Ok(armed) => {
                assert!(armed, "the latch is open after a restart");
                break;
            }
            Err(e) if is_outage(&e) && Instant::now() < deadline => {
                tokio::time::sleep(ms(10)).await;
            }
            Err(e) => panic!("the client did not recover after the restart: {e}"),
        }
    }
    // Redis answers. A wait on the armed latch must wait, not fail.
    let started = Instant::now();
    let outcome = tokio::time::timeout(ms(2500), latch.wait()).await;
    assert!(
        outcome.is_err(),
        "a wait started after redis came back returned {outcome:?} after {:?}",
        started.elapsed()
    );
}

/// Waiters of one client share their work: while the latch stays armed only one of them
/// re-reads it, and when it opens one read serves them all (after each asked once on arrival).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_of_one_client_cost_one_request_per_check_together() {
    const WAITERS: usize = 50;
    let server = RedisServer::start();
    let waiters_client = client(&server).await;
    let other = client(&server).await;
    let latch = other.count_down_latch("shared-checks");
    assert!(latch.try_set_count(1).await.expect("arm"));
    let tasks: Vec<_> = (0..WAITERS)
        .map(|_| {
            let latch = waiters_client.count_down_latch("shared-checks");
            tokio::spawn(async move { latch.wait().await })
        })
        .collect();
    subscribed(&server, "shared-checks", 1).await;
    eventually("every waiter asked once", SETTLE, || {
        waiters_client.stats().scripts_sent >= WAITERS as u64
    })
    .await;
    let arrived = waiters_client.stats().scripts_sent;
    // About three re-checks (one a second), for all fifty waiters together.
    tokio::time::sleep(ms(3100)).await;
    let idle = waiters_client.stats().scripts_sent - arrived;
    assert!(
        idle <= 6,
        "{idle} requests in 3 s from {WAITERS} idle waiters"
    );
    let before_opening = waiters_client.stats().scripts_sent;
    latch.count_down().await.expect("count down");
    for task in tasks {
        tokio::time::timeout(SETTLE, task)
            .await
            .expect("a waiter did not return")
            .expect("waiter task")
            .expect("wait");
    }
    let opening = waiters_client.stats().scripts_sent - before_opening;
    assert!(opening <= 3, "{opening} requests to see one opening");
}
