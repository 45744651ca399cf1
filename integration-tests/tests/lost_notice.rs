//! A hold taken from its owner (force-unlocked, deleted) is reported lost at once, not at the
//! owner's next renewal: the taking script tells the owner's client on its one notice channel.

mod common;

use std::time::{Duration, Instant};

use redisync::prelude::*;
use redisync_test_harness::RedisServer;

/// The default watchdog renews every 10 s: a loss seen well before that was not found by a
/// renewal. The target is under 100 ms on one Redis; the bound is loose for a loaded machine.
const NOTICED_WITHIN: Duration = Duration::from_secs(3);

async fn lost_within(what: &str, lost: impl std::future::Future<Output = ()>) -> Duration {
    let taken = Instant::now();
    tokio::time::timeout(NOTICED_WITHIN, lost)
        .await
        .unwrap_or_else(|_| panic!("{what}: the owner did not hear of the takeover"));
    let after = taken.elapsed();
    println!("{what}: lost() after {after:?}");
    after
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_unlocked_lock_is_lost_at_once() {
    let server = RedisServer::start();
    let owner = common::client(&server).await;
    let operator = common::client(&server).await;

    let guard = owner.lock("taken").lock().await.expect("lock");
    let lost = guard.lost();
    // The notice subscription is made with the first hold; a takeover before Redis confirms it
    // would be heard only at the next renewal.
    common::lost_notices_subscribed(&server, &owner).await;
    assert!(operator.lock("taken").force_unlock().await.expect("force"));
    lost_within("lock", lost).await;
    assert!(guard.is_lost());
    assert!(matches!(guard.unlock().await, Err(Error::NotOwner)));

    let guard = owner
        .fair_lock("taken-fair")
        .lock()
        .await
        .expect("fair lock");
    assert!(operator
        .fair_lock("taken-fair")
        .force_unlock()
        .await
        .expect("force"));
    lost_within("fair lock", guard.lost()).await;
}

/// A label may hold ':' (`host:pid`), the character that ends a client id in an owner id:
/// the notice must still reach the labelled client's channel, and its holds are named by it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_labelled_clients_taken_hold_is_lost_at_once() {
    let server = RedisServer::start();
    let owner = Client::builder(server.url())
        .label("worker-3:4242")
        .build()
        .await
        .expect("connect");
    let operator = common::client(&server).await;
    assert!(owner.id().starts_with("worker-3:4242@"));

    let guard = owner.lock("labelled").lock().await.expect("lock");
    let holder = server.cmd(&["HGET", &common::lock_key("labelled"), "owner"]);
    assert!(
        format!("{holder:?}").contains("worker-3:4242@"),
        "the hold names its client's label: {holder:?}"
    );
    common::lost_notices_subscribed(&server, &owner).await;
    assert!(operator
        .lock("labelled")
        .force_unlock()
        .await
        .expect("force"));
    lost_within("labelled client's lock", guard.lost()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taken_read_write_holds_are_lost_at_once() {
    let server = RedisServer::start();
    let owner = common::client(&server).await;
    let operator = common::client(&server).await;
    let rw = owner.read_write_lock("taken-rw");

    let write = rw.write().await.expect("write");
    common::lost_notices_subscribed(&server, &owner).await;
    assert!(operator
        .read_write_lock("taken-rw")
        .force_unlock()
        .await
        .expect("force"));
    lost_within("write hold", write.lost()).await;

    // Readers sharing one hold of their client, deleted.
    let first = rw.read().await.expect("read");
    let second = rw.read().await.expect("read");
    assert!(operator
        .read_write_lock("taken-rw")
        .delete()
        .await
        .expect("delete"));
    lost_within("shared read hold", first.lost()).await;
    lost_within("second reader", second.lost()).await;
}

/// However many holds a client has, it listens on one channel, and a takeover costs it one
/// renewal round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_holds_share_one_notice_subscription() {
    let server = RedisServer::start();
    let owner = common::client(&server).await;
    let operator = common::client(&server).await;
    let mut guards = Vec::new();
    for i in 0..1000 {
        guards.push(owner.lock(format!("many-{i}")).lock().await.expect("lock"));
    }
    common::lost_notices_subscribed(&server, &owner).await;
    let channels = common::strings(&server.cmd(&["PUBSUB", "CHANNELS", "*"]));
    assert_eq!(channels.len(), 1, "{channels:?}");

    let renewals_before = owner.stats().renewals;
    assert!(operator
        .lock("many-500")
        .force_unlock()
        .await
        .expect("force"));
    lost_within("one of a thousand", guards[500].lost()).await;
    // The round renewed the others (its batches settle one by one): every other hold stays.
    common::eventually(
        "the round renewed the other holds",
        Duration::from_secs(5),
        || owner.stats().renewals >= renewals_before + 999,
    )
    .await;
    let lost: Vec<usize> = (0..1000).filter(|&i| guards[i].is_lost()).collect();
    assert_eq!(lost, vec![500]);
}

/// The first watchdog hold subscribes the client for good, also when it is released before
/// the watchdog task gets to run: on a single-threaded runtime the task runs only once the
/// caller waits for its release, and by then the hold is gone. (A task that subscribed only
/// if it found a hold would never subscribe for a client with short holds, and each of its
/// acquires would wake the task again.) A hold taken later is then lost at once on a takeover.
#[tokio::test(flavor = "current_thread")]
async fn a_first_hold_released_at_once_still_subscribes_the_client() {
    let server = RedisServer::start();
    let owner = common::client(&server).await;
    let operator = common::client(&server).await;
    let lock = owner.lock("brief");
    let first = lock.lock().await.expect("lock");
    first.unlock().await.expect("unlock");
    common::lost_notices_subscribed(&server, &owner).await;

    let guard = lock.lock().await.expect("lock again");
    assert!(operator.lock("brief").force_unlock().await.expect("force"));
    lost_within("a hold after a brief first one", guard.lost()).await;
}

/// A polling client has no subscription at all, and learns at its next renewal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_polling_client_learns_at_its_next_renewal() {
    let server = RedisServer::start();
    let owner = Client::builder(server.url())
        .wait_strategy(WaitStrategy::Poll {
            interval: Duration::from_millis(50),
        })
        .watchdog_timeout(Duration::from_millis(900))
        .build()
        .await
        .expect("connect");
    let operator = common::client(&server).await;
    let guard = owner.lock("polled").lock().await.expect("lock");
    assert!(operator.lock("polled").force_unlock().await.expect("force"));
    tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("found at the next renewal");
    let channels = common::strings(&server.cmd(&["PUBSUB", "CHANNELS", "*"]));
    assert!(channels.is_empty(), "{channels:?}");
}

/// Notices keep working after the subscriber connection is killed: the client subscribes
/// again and checks its holds, since a notice sent meanwhile would be lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notices_survive_a_killed_subscriber_connection() {
    let server = RedisServer::start();
    let owner = common::client(&server).await;
    let operator = common::client(&server).await;
    let channel = format!("redisync:lost:{}", owner.id());
    let first = owner.lock("killed-1").lock().await.expect("lock");
    common::eventually(
        "the notice channel is subscribed",
        Duration::from_secs(5),
        || server.numsub(&channel) == 1,
    )
    .await;
    server.cmd(&["CLIENT", "KILL", "TYPE", "pubsub"]);
    // Taken while the client may still be reconnecting.
    assert!(operator
        .lock("killed-1")
        .force_unlock()
        .await
        .expect("force"));
    lost_within("taken during the reconnect", first.lost()).await;

    let second = owner.lock("killed-2").lock().await.expect("lock");
    common::eventually("subscribed again", Duration::from_secs(5), || {
        server.numsub(&channel) == 1
    })
    .await;
    assert!(operator
        .lock("killed-2")
        .force_unlock()
        .await
        .expect("force"));
    lost_within("taken after the reconnect", second.lost()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_expirable_permits_are_lost_at_once() {
    let server = RedisServer::start();
    let owner = common::client(&server).await;
    let operator = common::client(&server).await;
    let semaphore = owner.expirable_semaphore("taken-permits");
    semaphore.try_set_permits(2).await.expect("permits");
    let first = semaphore.acquire().await.expect("permit");
    let second = semaphore.acquire().await.expect("permit");
    common::lost_notices_subscribed(&server, &owner).await;
    assert!(operator
        .expirable_semaphore("taken-permits")
        .delete()
        .await
        .expect("delete"));
    lost_within("first permit", first.lost()).await;
    lost_within("second permit", second.lost()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_leadership_is_lost_at_once() {
    let server = RedisServer::start();
    let owner = common::client(&server).await;
    let operator = common::client(&server).await;
    let leadership = owner
        .leader_election("taken-lead")
        .campaign("node-a")
        .await
        .expect("campaign");
    common::lost_notices_subscribed(&server, &owner).await;
    assert!(operator
        .leader_election("taken-lead")
        .delete()
        .await
        .expect("delete"));
    lost_within("leadership", leadership.lost()).await;
}
