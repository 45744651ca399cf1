//! What a dropped guard, a timed-out `unlock()` or a cancelled acquire mean for the same
//! owner's next acquisition: it waits for the release still on its way to Redis, so it never
//! takes the hold being released for its own (no false upgrade, no stale re-entry with the old
//! fencing token).

mod common;

use std::time::Duration;

use common::client;
use redisync::prelude::*;
use redisync_test_harness::{ChaosProxy, RedisServer};

/// A read-mostly cache as users first write it, in a loop: a read guard dropped at the end
/// of its block, then a write on the same handle. On one thread the background release of the
/// dropped guard cannot even start before the write is sent.
#[tokio::test(flavor = "current_thread")]
async fn a_write_after_a_dropped_read_guard_is_never_an_upgrade() {
    read_then_write().await;
}

/// The same on two threads, where the release and the write race.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_after_a_dropped_read_guard_is_never_an_upgrade_on_two_threads() {
    read_then_write().await;
}

async fn read_then_write() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let cache = client.read_write_lock("cache:users");
    for round in 0..40 {
        {
            let _read = cache.read().await.unwrap();
        }
        let write = match cache.write().await {
            Ok(write) => write,
            Err(err) => panic!("round {round}: the write failed with {err}"),
        };
        write.unlock().await.unwrap();
    }
}

/// A dropped guard's release is in flight when the same handle asks again: the new
/// acquisition is a new hold, with a new fencing token, not a re-entry of the old one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_after_a_dropped_guard_is_a_new_hold_with_a_new_token() {
    let server = RedisServer::start();
    let client = client(&server).await;
    tokens_rise_after_each_drop(&client.lock("orders:42")).await;
    // The same for a write guard of a read-write lock.
    tokens_rise_after_each_drop(&client.read_write_lock("prices").writer()).await;
}

/// Acquires `handle` 40 times, dropping each guard at once: every token is above the last.
async fn tokens_rise_after_each_drop<A: Acquire>(handle: &A) {
    let mut last = 0;
    for round in 0..40 {
        let guard = handle.acquire().await.unwrap();
        let token = guard.fencing_token().unwrap_or(0);
        assert!(
            token > last,
            "{}, round {round}: token {token} after {last}: the old hold was re-entered",
            handle.name()
        );
        last = token;
        drop(guard);
    }
}

/// An `unlock()` that answers `Err(Timeout)` goes on in the background; the next `lock()` of
/// the same handle waits for it rather than re-entering the hold it gives back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_after_an_unlock_that_timed_out_is_a_new_hold() {
    let (_server, proxy, client) = through_a_proxy(Duration::from_millis(600)).await;
    let lock = client.lock("slow-unlock");
    let first = lock.lock().await.unwrap();
    let old = first.fencing_token();
    // A round trip now takes 800 ms: the unlock times out, and lands 200 ms later.
    proxy.set_latency(Duration::from_millis(400));
    let err = first.unlock().await.expect_err("the unlock times out");
    assert!(matches!(err, Error::Timeout), "{err}");
    proxy.set_latency(Duration::ZERO);
    let second = lock.lock().await.unwrap();
    assert!(
        second.fencing_token() > old,
        "token {} after {old}: the hold being released was re-entered",
        second.fencing_token()
    );
    assert_eq!(lock.hold_count().await.unwrap(), 1);
    second.unlock().await.unwrap();
}

/// A read acquire cancelled while on the wire is given back in the background; a write of the
/// same handle right after waits for that give-back instead of refusing as an upgrade.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_after_a_cancelled_read_is_never_an_upgrade() {
    let (_server, proxy, client) = through_a_proxy(Duration::from_secs(2)).await;
    let cache = client.read_write_lock("cache:cancelled");
    // Connect the pool before the latency, so the cut below falls on the request itself.
    drop(cache.read().await.unwrap());
    cache.write().await.unwrap().unlock().await.unwrap();
    for round in 0..5 {
        proxy.set_latency(Duration::from_millis(60));
        let cut = tokio::time::timeout(Duration::from_millis(20), cache.read()).await;
        assert!(
            cut.is_err(),
            "round {round}: the read was not cut on the wire"
        );
        proxy.set_latency(Duration::ZERO);
        match cache.write().await {
            Ok(write) => write.unlock().await.unwrap(),
            Err(err) => panic!("round {round}: the write failed with {err}"),
        }
    }
}

/// A multi-lock's acquire cut off after Redis granted it, before its reply came back, is
/// given back in the background; a `lock()` right after on one of its locks waits for that
/// give-back rather than re-entering the multi-lock's hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_after_a_cancelled_multi_lock_is_a_new_hold() {
    let (_server, proxy, client) = through_a_proxy(Duration::from_secs(2)).await;
    let (first, second) = (client.lock("acct:1"), client.lock("acct:2"));
    let both = client.multi_lock([first.clone(), second.clone()]);
    // Connect the pool and load the scripts before the latency.
    both.lock().await.unwrap().unlock().await.unwrap();
    first.lock().await.unwrap().unlock().await.unwrap();
    for round in 0..3 {
        // The acquire reaches Redis after 200 ms and its reply would come back 200 ms later:
        // the cut at 300 ms falls between the two.
        proxy.set_latency(Duration::from_millis(200));
        let cut = tokio::time::timeout(Duration::from_millis(300), both.try_lock()).await;
        assert!(cut.is_err(), "round {round}: the multi-lock was not cut");
        proxy.set_latency(Duration::ZERO);
        let guard = first.lock().await.unwrap();
        assert_eq!(
            first.hold_count().await.unwrap(),
            1,
            "round {round}: the multi-lock's hold was re-entered"
        );
        guard.unlock().await.unwrap();
    }
}

/// A Redis, a chaos proxy in front of it, and a client through the proxy with
/// `command_timeout`.
async fn through_a_proxy(command_timeout: Duration) -> (RedisServer, ChaosProxy, Client) {
    let server = RedisServer::start();
    let proxy = ChaosProxy::start(&server);
    let client = Client::builder(proxy.url())
        .command_timeout(command_timeout)
        .build()
        .await
        .unwrap();
    (server, proxy, client)
}
