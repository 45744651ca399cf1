//! Leases at their edges: renewals that cannot reach Redis, shutdown racing an acquire,
//! foreign data in a renewal batch, and acquires abandoned while Redis is stalled.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{exists, lock_key};
use redisync::prelude::*;
use redisync::LocalState;
use redisync_test_harness::{wait_until, RedisServer};

#[tokio::test]
async fn renewals_that_cannot_reach_redis_report_the_lease_lost_when_it_ends() {
    let server = RedisServer::start();
    let watchdog = Duration::from_millis(600);
    // A renewal stuck for the whole (long) command timeout must not delay the verdict.
    let a = Client::builder(server.url())
        .watchdog_timeout(watchdog)
        .command_timeout(Duration::from_secs(4))
        .build()
        .await
        .unwrap();
    let guard = a.lock("stalled").lock().await.unwrap();
    let acquired_at = Instant::now();
    server.pause();
    tokio::time::timeout(Duration::from_secs(3), guard.lost())
        .await
        .expect("lost once no renewal succeeded within the lease");
    let after = acquired_at.elapsed();
    assert!(guard.is_lost());
    assert!(after >= watchdog / 2, "lost too early: {after:?}");
    assert!(
        after < watchdog + Duration::from_millis(700),
        "lost late: {after:?}"
    );
    server.resume();
    // Once lost, always lost, even if a late renewal went through.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(guard.is_lost());
    drop(guard);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_racing_shutdown_returns_a_guard_known_lost_or_an_error() {
    let server = Arc::new(RedisServer::start());
    let a = Client::builder(server.url())
        .watchdog_timeout(Duration::from_millis(800))
        .build()
        .await
        .unwrap();
    let lock = a.lock("racing");
    server.pause();
    let pending = tokio::spawn(async move { lock.lock().await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    a.shutdown().await;
    server.resume();
    match pending.await.unwrap() {
        Ok(guard) => {
            assert!(
                guard.is_lost(),
                "nothing renews a hold taken during shutdown"
            );
            tokio::time::timeout(Duration::from_secs(1), guard.lost())
                .await
                .expect("lost() completes");
        }
        Err(err) => assert!(matches!(err, Error::Shutdown), "{err:?}"),
    }
}

#[tokio::test]
async fn after_shutdown_unlock_and_drop_both_give_the_hold_back() {
    let server = RedisServer::start();
    let a = Client::connect(server.url()).await.unwrap();
    let unlocked = a.lock("by-unlock").lock().await.unwrap();
    let dropped = a.lock("by-drop").lock().await.unwrap();
    a.shutdown().await;
    assert!(matches!(unlocked.unlock().await, Err(Error::Shutdown)));
    drop(dropped);
    for name in ["by-unlock", "by-drop"] {
        assert!(
            wait_until(Duration::from_secs(3), || !exists(&server, &lock_key(name))).await,
            "{name} was not given back"
        );
    }
}

#[test]
fn a_guard_dropped_outside_the_runtime_is_still_released() {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (client, guard) = runtime.block_on(async {
        let client = Client::connect(server.url()).await.unwrap();
        let guard = client.lock("thread").lock().await.unwrap();
        (client, guard)
    });
    std::thread::spawn(move || drop(guard)).join().unwrap();
    let released = runtime.block_on(wait_until(Duration::from_secs(3), || {
        !exists(&server, &lock_key("thread"))
    }));
    assert!(released, "the release ran on the client's runtime");
    drop(client);
}

#[tokio::test]
async fn foreign_data_under_one_lock_does_not_stall_renewal_of_the_others() {
    let server = RedisServer::start();
    let watchdog = Duration::from_millis(600);
    let a = Client::builder(server.url())
        .watchdog_timeout(watchdog)
        .build()
        .await
        .unwrap();
    let spoiled = a.lock("spoiled").lock().await.unwrap();
    let healthy = a.lock("healthy").lock().await.unwrap();
    server.cmd(&["SET", &lock_key("spoiled"), "not a hash"]);
    tokio::time::timeout(Duration::from_secs(3), spoiled.lost())
        .await
        .expect("the spoiled hold is reported lost");
    tokio::time::sleep(watchdog * 3).await;
    assert!(!healthy.is_lost(), "the healthy hold kept being renewed");
    assert!(exists(&server, &lock_key("healthy")));
    healthy.unlock().await.unwrap();
    drop(spoiled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_stalled_past_its_grace_never_leaves_a_hold_behind() {
    // The acquire sits unanswered in a paused Redis for longer than the client waits for
    // abandoned requests (four command timeouts). However it ends (run late, or dropped with
    // its connection), no hold may survive it. The case where Redis runs it only after the
    // give-back is pinned down at the script level by the next test.
    let server = RedisServer::start();
    let command_timeout = Duration::from_millis(250);
    let a = Client::builder(server.url())
        .command_timeout(command_timeout)
        .build()
        .await
        .unwrap();
    let lock = a.lock("stalled-acquire");
    server.pause();
    assert!(matches!(lock.try_lock().await, Err(Error::Timeout)));
    tokio::time::sleep(command_timeout * 4 + Duration::from_millis(600)).await;
    server.resume();
    assert!(
        wait_until(Duration::from_secs(3), || !exists(
            &server,
            &lock_key("stalled-acquire")
        ))
        .await,
        "a hold outlived its abandoned acquire"
    );
    // And the handle works normally afterwards, without re-entering a phantom hold.
    let guard = lock.try_lock().await.unwrap().expect("free");
    assert_eq!(lock.hold_count().await.unwrap(), 1);
    guard.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
    assert!(
        wait_until(Duration::from_secs(3), || a.local_state()
            == LocalState::default())
        .await
    );
}

#[tokio::test]
async fn an_attempt_given_back_before_it_ran_can_no_longer_grant() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let layout = common::keys::lock("late");
    let (hash, fence, waiters) = (
        layout.hash.clone(),
        layout.fence.as_str(),
        layout.waiters.as_str(),
    );
    let record = &layout.attempt_records.of("client-1:7");
    // The scripts as the lock crate embeds them: each after the shared preludes.
    let prelude = concat!(
        include_str!("../../lua/publish_prelude.lua"),
        include_str!("../../lua/clock_prelude.lua"),
        include_str!("../../lua/lock_prelude.lua"),
        include_str!("../../lua/wake_prelude.lua"),
        include_str!("../../lua/lock_hand_over_prelude.lua")
    );
    let release = redis::Script::new(&format!(
        "{prelude}{}",
        include_str!("../../lua/lock_release.lua")
    ));
    let acquire = redis::Script::new(&format!(
        "{prelude}{}",
        include_str!("../../lua/lock_acquire.lua")
    ));
    // The give-back arrives first: the attempt holds nothing yet.
    let given_back: i64 = release
        .key(&hash)
        .key(waiters)
        .key(&layout.offers)
        .key(fence)
        .key(record)
        .arg("client-1:7")
        .arg(60_000)
        .invoke(&mut conn)
        .unwrap();
    assert_eq!(given_back, -1);
    // Then Redis runs the acquire itself, a first try: it must refuse to grant.
    let acquire_call =
        |attempt: &str, record: &str, conn: &mut redis::Connection| -> redis::Value {
            acquire
                .key(&hash)
                .key(fence)
                .key(record)
                .key(waiters)
                .arg("client-1:owner")
                .arg(30_000)
                .arg(attempt)
                .invoke(conn)
                .unwrap()
        };
    let late = acquire_call("client-1:7", record, &mut conn);
    assert_eq!(late, redis::Value::Array(vec![redis::Value::Int(-1)]));
    assert!(!exists(&server, &hash));
    // Any other attempt still works.
    let fresh = acquire_call(
        "client-1:8",
        &layout.attempt_records.of("client-1:8"),
        &mut conn,
    );
    // Granted: the reply is the fencing token alone.
    assert_eq!(fresh, redis::Value::Int(1));
    // With the lock now held by the same owner, the given-back attempt must not re-enter it
    // either: both its record and the lock exist.
    let late_again = acquire_call("client-1:7", record, &mut conn);
    assert_eq!(late_again, redis::Value::Array(vec![redis::Value::Int(-1)]));
    assert_eq!(
        server.cmd(&["HGET", &hash, "count"]),
        redis::Value::BulkString(b"1".to_vec())
    );
}

/// `fix_lease` turns a watchdog hold into a fixed lease from now on: Redis's expiry and the
/// guard's `lost()` both follow it (even though it is shorter than the watchdog lease), the
/// watchdog stops, and a hold that is no longer ours is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fix_lease_sets_a_fixed_lease_that_lost_follows() {
    let server = RedisServer::start();
    let c = common::client_with_watchdog(&server, Duration::from_secs(30)).await;
    let lock = c.lock("fixed");
    let mut guard = lock.lock().await.expect("lock");
    // Already waiting (on the watchdog's deadline) when the lease changes.
    let lost = tokio::spawn(guard.lost());
    tokio::time::sleep(Duration::from_millis(50)).await;
    let fixed_at = Instant::now();
    guard
        .fix_lease(Duration::from_millis(400))
        .await
        .expect("fix lease");
    let pttl = common::int(&server, &["PTTL", &lock_key("fixed")]);
    assert!(pttl > 0 && pttl <= 400, "pttl {pttl}");
    // A lost() taken before the change follows the new, shorter deadline.
    tokio::time::timeout(Duration::from_secs(3), lost)
        .await
        .expect("lost() follows the fixed lease")
        .expect("lost task");
    let took = fixed_at.elapsed();
    assert!(took < Duration::from_millis(1000), "lost after {took:?}");
    assert!(guard.is_lost());
    assert!(
        wait_until(Duration::from_secs(3), || !exists(
            &server,
            &lock_key("fixed")
        ))
        .await,
        "the watchdog stopped renewing: the lock expired"
    );
    assert!(matches!(guard.unlock().await, Err(Error::NotOwner)));

    // On a hold that is no longer ours: NotOwner, nothing changed.
    let mut stale = lock.lock().await.expect("lock again");
    assert!(lock.force_unlock().await.expect("force unlock"));
    let other = c.lock("fixed").lock().await.expect("another owner");
    assert!(matches!(
        stale.fix_lease(Duration::from_millis(100)).await,
        Err(Error::NotOwner)
    ));
    assert!(common::int(&server, &["PTTL", &lock_key("fixed")]) > 1000);
    assert!(matches!(
        stale.fix_lease(Duration::ZERO).await,
        Err(Error::InvalidArgument(_))
    ));
    other.unlock().await.expect("unlock");
}

/// Two guards of one owner on one lock (a re-entry) keep their leases apart: fixing one's
/// lease leaves the other watchdog-held, renewed, and not lost (with one lease state shared,
/// the watchdog guard would report lost once the other's fixed lease ended).
#[tokio::test]
async fn a_fixed_reentry_leaves_the_watchdog_guard_renewed() {
    let server = RedisServer::start();
    let watchdog = Duration::from_millis(600);
    let c = common::client_with_watchdog(&server, watchdog).await;
    let lock = c.lock("reentered");
    let kept = lock.lock().await.expect("lock");
    let mut fixed = lock.lock().await.expect("re-enter");
    assert_eq!(lock.hold_count().await.expect("hold count"), 2);
    assert_eq!(c.local_state().renewed_holds, 2, "each guard is registered");
    fixed
        .fix_lease(Duration::from_millis(200))
        .await
        .expect("fix lease");
    assert_eq!(c.local_state().renewed_holds, 1, "only the fixed one left");
    tokio::time::timeout(Duration::from_secs(3), fixed.lost())
        .await
        .expect("the fixed guard is lost when its lease ends");
    let renewals = c.stats().renewals;
    // Several watchdog periods later the watchdog guard is still alive and renewed.
    tokio::time::sleep(watchdog * 3).await;
    assert!(
        !kept.is_lost(),
        "the watchdog guard was lost with the fixed one"
    );
    assert!(
        c.stats().renewals >= renewals + 4,
        "renewals went on: {} -> {}",
        renewals,
        c.stats().renewals
    );
    assert!(common::int(&server, &["PTTL", &lock_key("reentered")]) > 0);
    // Dropping the lost guard does not take the other's registration with it.
    drop(fixed);
    assert_eq!(c.local_state().renewed_holds, 1);
    kept.unlock().await.expect("unlock");
    // The dropped guard's release runs in the background: the lock is free once both landed.
    assert!(
        wait_until(Duration::from_secs(3), || !exists(
            &server,
            &lock_key("reentered")
        ))
        .await,
        "both holds were given back"
    );
    assert_eq!(c.local_state(), LocalState::default());
}

/// A watchdog renewal sent before `fix_lease` but run by Redis after it (it was on the wire)
/// must not stretch the lock back to the watchdog lease. The late renewal is
/// replayed here exactly as the watchdog sends it.
#[tokio::test]
async fn a_renewal_that_lands_after_fix_lease_does_not_extend_the_lock() {
    const RENEW_LUA: &str = include_str!("../../lua/lock_renew.lua");
    let server = RedisServer::start();
    let c = common::client_with_watchdog(&server, Duration::from_secs(30)).await;
    let lock = c.lock("raced");
    let mut guard = lock.lock().await.expect("lock");
    let key = lock_key("raced");
    let attempt = hash_attempt(&server, &key);
    guard
        .fix_lease(Duration::from_millis(2_000))
        .await
        .expect("fix lease");
    let mut con = server.connection();
    let results: Vec<i64> = redis::cmd("EVAL")
        .arg(RENEW_LUA)
        .arg(1)
        .arg(&key)
        .arg(30_000)
        .arg(1)
        .arg(3)
        .arg(lock.owner_id())
        .arg(guard.fencing_token())
        .arg(&attempt)
        .query(&mut con)
        .expect("late renewal");
    assert_eq!(results.len(), 1);
    assert!(
        results[0] < 0 && -1 - results[0] <= 2_000,
        "ours, but fixed: not renewed, and its end reported: {results:?}"
    );
    let pttl = common::int(&server, &["PTTL", &key]);
    assert!(
        pttl > 0 && pttl <= 2_000,
        "the late renewal undid the fixed lease: PTTL {pttl}"
    );
    assert!(!guard.is_lost());
    guard.unlock().await.expect("unlock");
}

/// The attempt id of the lock's only hold, from its `a:<attempt>` field.
fn hash_attempt(server: &RedisServer, key: &str) -> String {
    let redis::Value::Array(fields) = server.cmd(&["HKEYS", key]) else {
        panic!("HKEYS {key}: not an array");
    };
    let attempts: Vec<String> = fields
        .iter()
        .map(common::text)
        .filter_map(|field| field.strip_prefix("a:").map(str::to_owned))
        .collect();
    assert_eq!(attempts.len(), 1, "{attempts:?}");
    attempts[0].clone()
}

/// One stalled connection of the pool must not lose every watchdog lease, even with a command
/// timeout far longer than the lease: a renewal call that does not answer is sent
/// again on the next connection.
#[tokio::test]
async fn one_stalled_connection_does_not_lose_the_watchdog_leases() {
    let server = RedisServer::start();
    let proxy = redisync_test_harness::ChaosProxy::start(&server);
    let watchdog = Duration::from_millis(600);
    let c = Client::builder(proxy.url())
        .watchdog_timeout(watchdog)
        .command_timeout(Duration::from_secs(3))
        .pool_size(2)
        .build()
        .await
        .unwrap();
    let guard = c.lock("stalled-pool").lock().await.unwrap();
    // The pool's connections were opened first, at build: this is one of them.
    assert!(proxy.stall_oldest(), "a connection to stall");
    let renewals = c.stats().renewals;
    let lost = tokio::time::timeout(watchdog * 6, guard.lost()).await;
    assert!(
        lost.is_err(),
        "a renewal stuck on the stalled connection lost the lease"
    );
    assert!(!guard.is_lost());
    assert!(
        c.stats().renewals >= renewals + 8,
        "renewals went on over the other connection: {} -> {}",
        renewals,
        c.stats().renewals
    );
    assert!(exists(&server, &lock_key("stalled-pool")));
    proxy.unstall();
    guard.unlock().await.expect("unlock");
}

/// A fix whose reply never reached the client (the request ran): the next renewal learns the
/// fixed lease's end and the guard goes by it, instead of believing in the watchdog lease
/// while Redis frees the lock.
#[tokio::test]
async fn a_fix_lease_whose_reply_was_lost_still_bounds_the_guard() {
    const SET_LEASE_LUA: &str = include_str!("../../lua/lock_set_lease.lua");
    let server = RedisServer::start();
    let watchdog = Duration::from_secs(3);
    let c = common::client_with_watchdog(&server, watchdog).await;
    let lock = c.lock("fixed-unknown");
    let guard = lock.lock().await.expect("lock");
    let key = lock_key("fixed-unknown");
    let attempt = hash_attempt(&server, &key);
    let mut con = server.connection();
    let fixed_at = Instant::now();
    let set: i64 = redis::cmd("EVAL")
        .arg(SET_LEASE_LUA)
        .arg(1)
        .arg(&key)
        .arg(lock.owner_id())
        .arg(guard.fencing_token())
        .arg(300)
        .arg(&attempt)
        .query(&mut con)
        .expect("fix the lease behind the client's back");
    assert_eq!(set, 1);
    // The next renewal round (within a third of the watchdog lease) caps the deadline.
    tokio::time::timeout(watchdog / 3 + Duration::from_millis(800), guard.lost())
        .await
        .expect("the guard went by the fixed lease Redis reported");
    let took = fixed_at.elapsed();
    println!("lost {took:?} after the lease was fixed to 300 ms behind the client's back");
    assert!(!exists(&server, &key), "Redis freed it at the fixed lease");
    drop(guard);
}

/// `fix_lease` that gets no answer may have fixed the lease in Redis: the guard goes by the
/// shorter of the two leases from then on.
#[tokio::test]
async fn a_fix_lease_without_an_answer_caps_the_guard() {
    let server = RedisServer::start();
    let proxy = redisync_test_harness::ChaosProxy::start(&server);
    let c = Client::builder(proxy.url())
        .command_timeout(Duration::from_millis(500))
        .build()
        .await
        .unwrap();
    let mut guard = c.lock("fix-unanswered").lock().await.unwrap();
    proxy.drop_replies(true);
    let outcome = guard.fix_lease(Duration::from_millis(200)).await;
    assert!(
        matches!(outcome, Err(Error::Timeout)),
        "no answer: {outcome:?}"
    );
    // The request ran: Redis frees the lock after 200 ms, and the guard knows it may have.
    assert!(
        guard.is_lost(),
        "the guard still believes in its 30 s watchdog lease"
    );
    proxy.drop_replies(false);
    drop(guard);
}
