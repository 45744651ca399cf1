//! A client built with `Client::sentinel_builder` follows the primary through a failover.

mod common;

use std::time::{Duration, Instant};

use common::{eventually, exists, lock_key, ms};
use redisync::prelude::*;
use redisync_test_harness::{RedisServer, Sentinel};

const SETTLE: Duration = redisync_test_harness::sentinel::SETTLE;

fn role(server: &RedisServer) -> Option<String> {
    server.info_field("replication", "role")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_follows_the_primary_through_a_failover() {
    let (primary, replica) = common::primary_and_replica().await;
    let sentinel = Sentinel::start(&primary);
    eventually("the sentinel knows the replica", SETTLE, || {
        sentinel.connection().is_some_and(|mut conn| {
            redis::cmd("SENTINEL")
                .arg("replicas")
                .arg("mymaster")
                .query::<Vec<redis::Value>>(&mut conn)
                .is_ok_and(|replicas| !replicas.is_empty())
        })
    })
    .await;

    let client = Client::sentinel_builder([sentinel.url()], "mymaster")
        .command_timeout(ms(1000))
        .build()
        .await
        .expect("connect through the sentinel");
    assert_eq!(client.server(), "sentinel:mymaster/0");
    let before = client.lock("before").lock().await.expect("lock");
    assert!(exists(&primary, &lock_key("before")));

    sentinel.failover();
    eventually("the sentinel names the replica", SETTLE, || {
        sentinel.primary_port() == Some(replica.port())
    })
    .await;
    eventually("the replica is the primary", SETTLE, || {
        role(&replica).as_deref() == Some("master")
    })
    .await;
    // The client heard the switch: it moved without a failed request.
    eventually("the client follows the new primary", SETTLE, || {
        replica
            .try_cmd(&["CLIENT", "LIST"])
            .ok()
            .and_then(|list| redis::from_redis_value_ref::<String>(&list).ok())
            .is_some_and(|list| list.lines().count() > 4)
    })
    .await;

    // Calls may fail while the client moves; then they go to the new primary.
    let deadline = Instant::now() + SETTLE;
    let after = loop {
        match client.lock("after").try_lock().await {
            Ok(Some(guard)) => break guard,
            Ok(None) => panic!("nobody else holds the lock"),
            Err(err) => {
                assert!(Instant::now() < deadline, "still failing: {err}");
                tokio::time::sleep(ms(100)).await;
            }
        }
    };
    assert!(
        exists(&replica, &lock_key("after")),
        "held on the new primary"
    );
    // Waiters are woken there too.
    let waiter = {
        let lock = client.lock("after");
        tokio::spawn(async move { lock.lock().await.map(|g| g.fencing_token()) })
    };
    tokio::time::sleep(ms(200)).await;
    after.unlock().await.expect("unlock on the new primary");
    let token = tokio::time::timeout(SETTLE, waiter)
        .await
        .expect("the waiter was woken")
        .expect("waiter task")
        .expect("lock");
    assert!(token >= 2);
    // The hold taken before the failover was replicated, so it is still ours.
    before
        .unlock()
        .await
        .expect("the old hold survived the failover");
}
