//! Replica sync (`ClientBuilder::replica_sync`): acquires wait for a replica in the same round
//! trip, and one that no replica acknowledged is rolled back.

mod common;

use std::time::{Duration, Instant};

use common::{eventually, exists, lock_key, ms};
use redisync::prelude::*;
use redisync_test_harness::RedisServer;

const SETTLE: Duration = Duration::from_secs(10);

async fn synced_client(primary: &RedisServer) -> Client {
    Client::builder(primary.url())
        .replica_sync(1, ms(200))
        .command_timeout(ms(2000))
        .build()
        .await
        .expect("connect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_no_replica_acknowledged_is_rolled_back() {
    let (primary, replica) = common::primary_and_replica().await;
    let client = synced_client(&primary).await;
    // Replicated: works as usual, and the hold is on the replica too.
    let held = client.lock("synced").lock().await.expect("lock");
    assert!(exists(&replica, &lock_key("synced")));

    replica.pause();
    let started = Instant::now();
    let outcome = client.lock("unsynced").try_lock().await;
    assert!(matches!(outcome, Err(Error::NotReplicated)), "{outcome:?}");
    assert!(started.elapsed() < ms(1500), "took {:?}", started.elapsed());
    // Rolled back on the primary: nobody holds it.
    eventually("the unreplicated hold is given back", SETTLE, || {
        !exists(&primary, &lock_key("unsynced"))
    })
    .await;
    // Reads never wait for replicas.
    let started = Instant::now();
    assert!(client.lock("synced").is_locked().await.expect("is_locked"));
    assert!(
        started.elapsed() < ms(150),
        "a read waited {:?}",
        started.elapsed()
    );
    // A release is not rolled back: it happened, and is reported as such.
    held.unlock()
        .await
        .expect("unlock while the replica is paused");
    assert!(!exists(&primary, &lock_key("synced")));

    replica.resume();
    let again = client.lock("unsynced").try_lock().await.expect("try_lock");
    assert!(
        again.is_some(),
        "acquires work again once a replica answers"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_primitive_rolls_back_an_unreplicated_acquire() {
    let (primary, replica) = common::primary_and_replica().await;
    let client = synced_client(&primary).await;
    let semaphore = client.semaphore("sem");
    assert!(semaphore.try_set_permits(1).await.expect("set permits"));
    let expirable = client.expirable_semaphore("xsem");
    assert!(expirable.try_set_permits(1).await.expect("set permits"));
    replica.pause();
    assert!(matches!(
        client.read_write_lock("rw").try_write().await,
        Err(Error::NotReplicated)
    ));
    assert!(matches!(
        client.fair_lock("fair").try_lock().await,
        Err(Error::NotReplicated)
    ));
    assert!(matches!(
        semaphore.try_acquire().await,
        Err(Error::NotReplicated)
    ));
    assert!(matches!(
        expirable.try_acquire().await,
        Err(Error::NotReplicated)
    ));
    let multi = client.multi_lock([client.lock("m1"), client.lock("m2")]);
    assert!(matches!(multi.try_lock().await, Err(Error::NotReplicated)));
    assert!(matches!(
        client.leader_election("elect").try_campaign("v").await,
        Err(Error::NotReplicated)
    ));
    replica.resume();
    // Everything was given back.
    assert_eq!(semaphore.available_permits().await.expect("permits"), 1);
    eventually("the expirable permit is back", SETTLE, || {
        primary
            .try_cmd(&["GET", &common::keys::expirable("xsem").permits])
            .ok()
            == Some(redis::Value::BulkString(b"1".to_vec()))
    })
    .await;
    for key in [
        common::keys::rw("rw").hash,
        common::keys::fair_lock("fair").hash,
        lock_key("m1"),
        lock_key("m2"),
        common::keys::election("elect").leader,
    ] {
        eventually(format!("{key} is free"), SETTLE, || !exists(&primary, &key)).await;
    }
    assert!(client
        .read_write_lock("rw")
        .try_write()
        .await
        .expect("write")
        .is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_replicas_every_acquire_is_refused_and_bad_options_are_invalid() {
    let server = RedisServer::start();
    let client = synced_client(&server).await;
    assert!(matches!(
        client.lock("lonely").try_lock().await,
        Err(Error::NotReplicated)
    ));
    for (replicas, timeout) in [
        (0, ms(100)),
        (1, Duration::ZERO),
        (1, ms(2000)),
        (1, ms(5000)),
    ] {
        let built = Client::builder(server.url())
            .replica_sync(replicas, timeout)
            .command_timeout(ms(2000))
            .build()
            .await;
        assert!(
            matches!(built, Err(Error::InvalidArgument(_))),
            "{replicas} replicas, {timeout:?}"
        );
    }
}
