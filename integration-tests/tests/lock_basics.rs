//! ReentrantLock behaviour against a real redis-server.

mod common;

use std::time::{Duration, Instant};

use common::{client, client_with_watchdog, exists, keys, lock_key, wake_channel};
use redisync::layout::{KeySpace, LockLayout};
use redisync::prelude::*;
use redisync::LocalState;
use redisync_test_harness::{wait_until, ChaosProxy, RedisServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_excludes_across_two_clients() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let guard = a.lock("orders:42").lock().await.unwrap();
    let other = b.lock("orders:42");
    assert!(other.try_lock().await.unwrap().is_none());
    assert!(other
        .try_lock_for(Duration::from_millis(200))
        .await
        .unwrap()
        .is_none());
    assert!(other.is_locked().await.unwrap());
    assert!(!other.is_held().await.unwrap());
    guard.unlock().await.unwrap();
    let second = other.try_lock().await.unwrap().expect("free after unlock");
    assert!(second.fencing_token() > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_wakes_within_100ms_of_unlock() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let holder = a.lock("wake");
    let waiter = b.lock("wake");
    for _ in 0..5 {
        let guard = holder.lock().await.unwrap();
        let waiter = waiter.clone();
        let task = tokio::spawn(async move {
            let g = waiter.lock().await.unwrap();
            let acquired_at = Instant::now();
            drop(g);
            acquired_at
        });
        // Wait until the waiter is really parked (subscribed) before releasing.
        let channel = wake_channel("wake", &b);
        assert!(wait_until(Duration::from_secs(5), || server.numsub(&channel) == 1).await);
        tokio::time::sleep(Duration::from_millis(20)).await;
        let released_at = Instant::now();
        guard.unlock().await.unwrap();
        let acquired_at = task.await.unwrap();
        let handoff = acquired_at.duration_since(released_at);
        assert!(
            handoff < Duration::from_millis(100),
            "handoff took {handoff:?}"
        );
    }
}

#[tokio::test]
async fn expired_lease_frees_the_lock_and_stale_unlock_is_not_owner() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let lock = a.lock("lease");
    let stale = lock
        .lock_with_lease(Duration::from_millis(200))
        .await
        .unwrap();
    assert!(!stale.is_lost());
    let lost = stale.lost();
    tokio::time::timeout(Duration::from_secs(2), lost)
        .await
        .expect("a fixed lease is known lost once it runs out");
    assert!(stale.is_lost());
    assert!(
        wait_until(Duration::from_secs(2), || !exists(
            &server,
            &lock_key("lease")
        ))
        .await
    );
    // Someone else takes it; the stale guard must not release their hold.
    let fresh = b.lock("lease").lock().await.unwrap();
    assert!(fresh.fencing_token() > stale.fencing_token());
    assert!(matches!(stale.unlock().await, Err(Error::NotOwner)));
    assert!(b.lock("lease").is_locked().await.unwrap());
    fresh.unlock().await.unwrap();
}

#[tokio::test]
async fn stale_guard_of_the_same_owner_does_not_release_a_newer_hold() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let lock = a.lock("same-owner");
    let stale = lock
        .lock_with_lease(Duration::from_millis(100))
        .await
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(2), || !exists(
            &server,
            &lock_key("same-owner")
        ))
        .await
    );
    let fresh = lock.lock().await.unwrap();
    assert!(matches!(stale.unlock().await, Err(Error::NotOwner)));
    assert_eq!(lock.hold_count().await.unwrap(), 1);
    fresh.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
}

#[tokio::test]
async fn watchdog_keeps_the_lock_past_three_timeouts() {
    let server = RedisServer::start();
    let watchdog = Duration::from_millis(600);
    let a = client_with_watchdog(&server, watchdog).await;
    let b = client(&server).await;
    let guard = a.lock("renewed").lock().await.unwrap();
    tokio::time::sleep(watchdog * 4).await;
    assert!(!guard.is_lost());
    assert!(b.lock("renewed").try_lock().await.unwrap().is_none());
    // Renewed every third of the lease, so well over half of it is always left.
    let remaining = a.lock("renewed").remaining_lease().await.unwrap().unwrap();
    assert!(remaining > watchdog / 3, "{remaining:?} left");
    assert!(a.stats().renewals >= 3, "{:?}", a.stats());
    guard.unlock().await.unwrap();
    assert_eq!(a.local_state(), LocalState::default());
}

#[tokio::test]
async fn dropping_the_guard_stops_renewal_and_releases() {
    let server = RedisServer::start();
    let a = client_with_watchdog(&server, Duration::from_millis(600)).await;
    let lock = a.lock("dropped");
    let guard = lock.lock().await.unwrap();
    assert_eq!(a.local_state().renewed_holds, 1);
    drop(guard);
    assert_eq!(a.local_state().renewed_holds, 0, "renewal stops at once");
    assert!(
        wait_until(Duration::from_secs(2), || !exists(
            &server,
            &lock_key("dropped")
        ))
        .await
    );
}

#[tokio::test]
async fn client_shut_down_while_holding_frees_the_lock_within_its_lease() {
    let server = RedisServer::start();
    let watchdog = Duration::from_millis(800);
    let a = client_with_watchdog(&server, watchdog).await;
    let guard = a.lock("crash").lock().await.unwrap();
    a.shutdown().await;
    tokio::time::timeout(Duration::from_secs(1), guard.lost())
        .await
        .expect("nothing renews the hold after shutdown, so it is reported lost");
    let start = Instant::now();
    let b = client(&server).await;
    let taken = b
        .lock("crash")
        .try_lock_for(Duration::from_secs(5))
        .await
        .unwrap()
        .expect("the lease frees the lock");
    assert!(start.elapsed() < watchdog + Duration::from_millis(700));
    assert!(matches!(
        a.lock("crash").try_lock().await,
        Err(Error::Shutdown)
    ));
    assert!(matches!(guard.unlock().await, Err(Error::Shutdown)));
    taken.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_wakes_the_tasks_waiting_behind_the_head_with_an_error() {
    let server = RedisServer::start();
    let (holder, a) = (client(&server).await, client(&server).await);
    let guard = holder.lock("queue").lock().await.unwrap();
    // The first asks Redis; the others wait behind it in the client's local queue.
    let waiters: Vec<_> = (0..4)
        .map(|_| {
            let lock = a.lock("queue");
            tokio::spawn(async move { lock.lock().await.map(drop) })
        })
        .collect();
    assert!(
        wait_until(Duration::from_secs(10), || a.stats().contended_waits == 4).await,
        "every task waits"
    );
    a.shutdown().await;
    for waiter in waiters {
        let outcome = tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("a waiter returns once its client is shut down")
            .unwrap();
        assert!(matches!(outcome, Err(Error::Shutdown)), "{outcome:?}");
    }
    assert_eq!(a.local_state().waiting_queues, 0);
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn dropping_guard_and_client_together_releases_at_once() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let guard = a.lock("dropped-client").lock().await.unwrap();
    drop(guard);
    drop(a);
    assert!(
        wait_until(Duration::from_secs(2), || !exists(
            &server,
            &lock_key("dropped-client")
        ))
        .await
    );
}

#[test]
fn crashed_holder_frees_the_lock_within_its_lease() {
    // A process that dies runs no destructor and sends no release: model it with a runtime
    // that is torn down while a guard is leaked. Its watchdog stops with it.
    let server = RedisServer::start();
    let url = server.url();
    let watchdog = Duration::from_millis(800);
    let holder_runtime = tokio::runtime::Runtime::new().unwrap();
    holder_runtime.block_on(async {
        let a = Client::builder(url.clone())
            .watchdog_timeout(watchdog)
            .build()
            .await
            .unwrap();
        std::mem::forget(a.lock("vanish").lock().await.unwrap());
    });
    drop(holder_runtime);
    let crashed_at = Instant::now();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let b = Client::connect(url).await.unwrap();
        let lock = b.lock("vanish");
        assert!(lock.is_locked().await.unwrap(), "nothing released the hold");
        let taken = lock
            .try_lock_for(Duration::from_secs(5))
            .await
            .unwrap()
            .expect("the lease frees the lock");
        assert!(crashed_at.elapsed() < watchdog + Duration::from_millis(700));
        taken.unlock().await.unwrap();
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_wakes_waiters_and_marks_the_guard_lost() {
    let server = RedisServer::start();
    let a = client_with_watchdog(&server, Duration::from_millis(600)).await;
    let b = client(&server).await;
    let guard = a.lock("forced").lock().await.unwrap();
    let waiter = b.lock("forced");
    let task = tokio::spawn(async move { waiter.lock().await.map(|g| g.fencing_token()) });
    assert!(
        wait_until(Duration::from_secs(5), || server
            .numsub(&wake_channel("forced", &b))
            == 1)
        .await
    );
    let start = Instant::now();
    assert!(b.lock("forced").force_unlock().await.unwrap());
    let token = task.await.unwrap().unwrap();
    assert!(start.elapsed() < Duration::from_millis(500));
    assert!(token > guard.fencing_token());
    tokio::time::timeout(Duration::from_secs(3), guard.lost())
        .await
        .expect("the watchdog notices the hold is gone");
    assert!(guard.is_lost());
    assert!(matches!(guard.unlock().await, Err(Error::NotOwner)));
}

#[tokio::test]
async fn reentry_counts_holds_and_keeps_the_token() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let lock = a.lock("reentrant");
    let clone = lock.clone();
    let first = lock.lock().await.unwrap();
    let first_token = first.fencing_token();
    let second = clone.try_lock().await.unwrap().expect("a clone re-enters");
    assert_eq!(first.fencing_token(), second.fencing_token());
    assert_eq!(lock.hold_count().await.unwrap(), 2);
    assert!(lock.is_held().await.unwrap());
    // A separately created handle is another owner, even in the same task.
    let stranger = a.lock("reentrant");
    assert_ne!(stranger.owner_id(), lock.owner_id());
    assert!(stranger.try_lock().await.unwrap().is_none());
    assert_eq!(stranger.hold_count().await.unwrap(), 0);
    second.unlock().await.unwrap();
    assert_eq!(lock.hold_count().await.unwrap(), 1);
    assert!(stranger.try_lock().await.unwrap().is_none());
    first.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
    assert_eq!(lock.remaining_lease().await.unwrap(), None);
    let next = stranger.try_lock().await.unwrap().unwrap();
    assert!(next.fencing_token() > first_token);
}

#[tokio::test]
async fn fencing_tokens_survive_force_unlock_and_delete() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let lock = a.lock("fence");
    let t1 = lock.lock().await.unwrap();
    let token1 = t1.fencing_token();
    drop(t1);
    assert!(
        wait_until(Duration::from_secs(2), || !exists(
            &server,
            &lock_key("fence")
        ))
        .await
    );
    let t2 = lock.lock().await.unwrap();
    assert!(t2.fencing_token() > token1);
    assert!(lock.force_unlock().await.unwrap());
    let t3 = lock.lock().await.unwrap();
    assert!(t3.fencing_token() > t2.fencing_token());
    assert!(lock.delete().await.unwrap());
    assert!(!lock.delete().await.unwrap());
    let t4 = lock.lock().await.unwrap();
    assert!(t4.fencing_token() > t3.fencing_token());
    std::mem::drop((t2, t3));
    t4.unlock().await.unwrap();
    assert_eq!(lock.name(), "fence");
}

#[tokio::test]
async fn introspection_reports_lease_and_owner() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let lock = a.lock("inspect");
    assert!(!lock.is_locked().await.unwrap());
    assert!(!lock.is_held().await.unwrap());
    assert_eq!(lock.hold_count().await.unwrap(), 0);
    let guard = lock.lock_with_lease(Duration::from_secs(20)).await.unwrap();
    let remaining = lock.remaining_lease().await.unwrap().unwrap();
    assert!(remaining > Duration::from_secs(15) && remaining <= Duration::from_secs(20));
    assert!(lock.owner_id().starts_with(a.id()));
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn a_repeated_release_never_releases_twice_and_only_a_give_back_keeps_a_record() {
    // Runs the release script exactly as the client does, twice with one attempt id, with a
    // new holder taking the lock in between.
    let server = RedisServer::start();
    let a = client(&server).await;
    let b = client(&server).await;
    let _guard = a.lock("retry").lock().await.unwrap();
    let mut conn = server.connection();
    let fields: Vec<String> = redis::cmd("HKEYS")
        .arg(lock_key("retry"))
        .query(&mut conn)
        .unwrap();
    let attempt = fields
        .iter()
        .find_map(|f| f.strip_prefix("a:"))
        .expect("the hold records its acquire attempt")
        .to_owned();
    let retry = keys::lock("retry");
    let record = retry.attempt_records.of(&attempt);
    let script = redis::Script::new(concat!(
        include_str!("../../lua/publish_prelude.lua"),
        include_str!("../../lua/clock_prelude.lua"),
        include_str!("../../lua/lock_prelude.lua"),
        include_str!("../../lua/wake_prelude.lua"),
        include_str!("../../lua/lock_hand_over_prelude.lua"),
        include_str!("../../lua/lock_release.lua")
    ));
    let release = |conn: &mut redis::Connection, remember_ms: u64| -> i64 {
        script
            .key(&retry.hash)
            .key(&retry.waiters)
            .key(&retry.offers)
            .key(&retry.fence)
            .key(&record)
            .arg(&attempt)
            .arg(remember_ms)
            .invoke(conn)
            .unwrap()
    };
    // A guard's release keeps no record: a repeat finds nothing to give back, says so, and
    // leaves the newer holder alone.
    assert_eq!(release(&mut conn, 0), 1);
    assert!(
        !exists(&server, &record),
        "a guard's release keeps no record"
    );
    let newer = b.lock("retry").lock().await.unwrap();
    assert_eq!(release(&mut conn, 0), -1);
    assert!(b.lock("retry").is_locked().await.unwrap());
    // The give-back of an acquire whose outcome is unknown keeps one, and a repeat gets the
    // first answer.
    newer.unlock().await.unwrap();
    let again = a.lock("retry").lock().await.unwrap();
    let mut conn = server.connection();
    let fields: Vec<String> = redis::cmd("HKEYS")
        .arg(lock_key("retry"))
        .query(&mut conn)
        .unwrap();
    let second = fields
        .iter()
        .find_map(|f| f.strip_prefix("a:"))
        .expect("the hold records its acquire attempt")
        .to_owned();
    let second_record = retry.attempt_records.of(&second);
    let give_back = |conn: &mut redis::Connection| -> i64 {
        script
            .key(&retry.hash)
            .key(&retry.waiters)
            .key(&retry.offers)
            .key(&retry.fence)
            .key(&second_record)
            .arg(&second)
            .arg(10_000)
            .invoke(conn)
            .unwrap()
    };
    assert_eq!(give_back(&mut conn), 1);
    let newest = b.lock("retry").lock().await.unwrap();
    assert_eq!(
        give_back(&mut conn),
        1,
        "the repeat reports the first outcome"
    );
    assert!(b.lock("retry").is_locked().await.unwrap());
    drop(again);
    newest.unlock().await.unwrap();
}

/// A release whose reply is lost with its connection is sent again; the repeat finds the
/// hold already given back by the first try, and the caller is told the truth: released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unlock_repeated_after_a_broken_connection_reports_released() {
    let server = RedisServer::start();
    let proxy = ChaosProxy::start(&server);
    let c = Client::builder(proxy.url())
        .command_timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap();
    // Redis knows the release script from then on: a NOSCRIPT answer would be dropped too.
    common::lock_cycle(&c, "repeat").await;
    let guard = c.lock("repeat").lock().await.unwrap();
    proxy.drop_replies(true);
    let unlock = tokio::spawn(guard.unlock());
    assert!(
        wait_until(Duration::from_secs(4), || !exists(
            &server,
            &lock_key("repeat")
        ))
        .await,
        "the release ran in Redis"
    );
    assert!(proxy.drop_replies(false) >= 1, "its connection broke");
    unlock
        .await
        .unwrap()
        .expect("the repeat of a release that ran is no NotOwner");
    let records = server.cmd(&["KEYS", &keys::lock("repeat").attempt_records.of("*")]);
    assert_eq!(records, redis::Value::Array(vec![]), "no record is kept");
}

#[tokio::test]
async fn bad_inputs_are_typed_errors() {
    let server = RedisServer::start();
    let a = client(&server).await;
    for name in [
        String::new(),
        "x".repeat(1025),
        "}starts-with-brace".to_owned(),
    ] {
        let lock = a.lock(name);
        assert!(matches!(lock.lock().await, Err(Error::InvalidArgument(_))));
        assert!(matches!(
            lock.try_lock().await,
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            lock.is_locked().await,
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            lock.force_unlock().await,
            Err(Error::InvalidArgument(_))
        ));
    }
    let lock = a.lock("inputs");
    assert!(matches!(
        lock.lock_with_lease(Duration::ZERO).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        lock.lock_with_lease(Duration::MAX).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        lock.try_lock_for(Duration::MAX).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        lock.try_lock_with_lease(Duration::from_secs(1), Duration::ZERO)
            .await,
        Err(Error::InvalidArgument(_))
    ));
    // A zero wait is valid and means "do not wait".
    let g = lock.try_lock_for(Duration::ZERO).await.unwrap().unwrap();
    g.unlock().await.unwrap();

    let url = server.url();
    for builder in [
        Client::builder(url.clone()).watchdog_timeout(Duration::ZERO),
        Client::builder(url.clone()).command_timeout(Duration::ZERO),
        Client::builder(url.clone()).pool_size(0),
        Client::builder(url.clone()).pool_size(u32::MAX),
        Client::builder(url.clone()).command_timeout(Duration::MAX),
        Client::builder(url.clone()).watchdog_timeout(Duration::MAX),
        Client::builder(url.clone()).key_prefix(""),
        Client::builder(url.clone()).key_prefix("a{b}"),
        Client::builder("not a url"),
        Client::builder("http://127.0.0.1/"),
    ] {
        assert!(matches!(
            builder.build().await,
            Err(Error::InvalidArgument(_))
        ));
    }
}

#[tokio::test]
async fn foreign_data_under_the_lock_key_is_wrong_type() {
    let server = RedisServer::start();
    let a = client(&server).await;
    server.cmd(&["SET", &lock_key("foreign"), "not a hash"]);
    let lock = a.lock("foreign");
    assert!(matches!(lock.try_lock().await, Err(Error::WrongType)));
    assert!(matches!(lock.is_held().await, Err(Error::WrongType)));
    server.cmd(&["DEL", &lock_key("foreign")]);
    server.cmd(&["SET", &keys::lock("foreign").fence, "not a number"]);
    assert!(matches!(lock.try_lock().await, Err(Error::WrongType)));
}

#[tokio::test]
async fn names_with_braces_work() {
    let server = RedisServer::start();
    let a = client(&server).await;
    for name in ["a{b}c", "{x}", "x{", "a}b"] {
        let lock = a.lock(name);
        let guard = lock.lock().await.unwrap();
        assert!(exists(&server, &lock_key(name)));
        assert!(lock.is_held().await.unwrap());
        guard.unlock().await.unwrap();
    }
}

#[tokio::test]
async fn password_db_and_prefix_from_the_url_are_used() {
    let server = RedisServer::start_with(&["--requirepass", "s3cret"]);
    let url = format!("redis://:s3cret@127.0.0.1:{}/3", server.port());
    let a = Client::builder(url.clone())
        .key_prefix("myapp")
        .build()
        .await
        .unwrap();
    assert!(!format!("{a:?}").contains("s3cret"));
    let guard = a.lock("db").lock().await.unwrap();
    let mut conn = server.connection();
    let in_db3: i64 = redis::cmd("SELECT")
        .arg(3)
        .query::<()>(&mut conn)
        .and_then(|_| {
            let space = KeySpace::of("myapp", "db").unwrap();
            redis::cmd("EXISTS")
                .arg(LockLayout::new(&space).hash)
                .query(&mut conn)
        })
        .unwrap();
    assert_eq!(in_db3, 1);
    guard.unlock().await.unwrap();
    let wrong = format!("redis://:nope@127.0.0.1:{}/", server.port());
    assert!(matches!(Client::connect(wrong).await, Err(Error::Redis(_))));
}

#[tokio::test]
async fn handles_guards_and_futures_are_send() {
    fn send<T: Send>(_: &T) {}
    fn send_sync_static<T: Send + Sync + Clone + 'static>() {}
    send_sync_static::<ReentrantLock>();
    send_sync_static::<Client>();
    let server = RedisServer::start();
    let a = client(&server).await;
    let lock = a.lock("send");
    send(&lock.lock());
    send(&lock.try_lock_for(Duration::ZERO));
    let guard = lock.lock().await.unwrap();
    send(&guard.lost());
    let guard = tokio::spawn(async move { guard }).await.unwrap();
    guard.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocked_waiters_fail_promptly_when_redis_stops_answering() {
    let mut server = RedisServer::start();
    let command_timeout = Duration::from_millis(600);
    let a = client(&server).await;
    let b = Client::builder(server.url())
        .command_timeout(command_timeout)
        .build()
        .await
        .unwrap();
    let guard = a.lock("outage").lock().await.unwrap();
    let waiters: Vec<_> = (0..8)
        .map(|_| {
            let lock = b.lock("outage");
            tokio::spawn(async move { lock.lock().await.map(|_| ()) })
        })
        .collect();
    assert!(
        wait_until(Duration::from_secs(5), || server
            .numsub(&wake_channel("outage", &b))
            == 1)
        .await
    );
    assert!(wait_until(Duration::from_secs(5), || b.stats().contended_waits == 8).await);
    server.pause();
    let paused_at = Instant::now();
    for waiter in waiters {
        let outcome = waiter.await.unwrap();
        assert!(
            matches!(outcome, Err(Error::Timeout) | Err(Error::Redis(_))),
            "{outcome:?}"
        );
    }
    let took = paused_at.elapsed();
    // A ping every third of the timeout notices the silence within one more timeout; the
    // waiters queued behind the first give up with its error instead of waiting in turn.
    assert!(took < command_timeout * 3, "waiters needed {took:?}");
    server.resume();
    drop(guard);
    let lock = b.lock("outage");
    let mut acquired = None;
    for _ in 0..50 {
        if let Ok(Some(g)) = lock.try_lock_for(Duration::from_millis(200)).await {
            acquired = Some(g);
            break;
        }
    }
    let g = acquired.expect("works again once redis answers");
    g.unlock().await.unwrap();
    assert_eq!(b.local_state(), LocalState::default());
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_that_times_out_but_is_granted_later_is_given_back() {
    let server = RedisServer::start();
    let a = Client::builder(server.url())
        .command_timeout(Duration::from_millis(300))
        .build()
        .await
        .unwrap();
    let lock = a.lock("late");
    // Stop Redis for 800 ms, so our acquire waits in its socket past the 300 ms command
    // timeout (an abandoned request gets four command timeouts to finish) and runs after.
    server.pause();
    let started = Instant::now();
    assert!(matches!(lock.try_lock().await, Err(Error::Timeout)));
    assert!(started.elapsed() < Duration::from_millis(900));
    tokio::time::sleep(Duration::from_millis(800).saturating_sub(started.elapsed())).await;
    server.resume();
    // The acquire ran once Redis was free again, and was granted to nobody: it is given back.
    assert!(
        wait_until(Duration::from_secs(3), || {
            server.cmd(&["GET", &keys::lock("late").fence])
                == redis::Value::BulkString(b"1".to_vec())
                && !exists(&server, &lock_key("late"))
        })
        .await,
        "the late grant was not given back"
    );
    let guard = lock.try_lock().await.unwrap().expect("free again");
    guard.unlock().await.unwrap();
}

#[test]
fn building_outside_a_tokio_runtime_is_an_error_not_a_panic() {
    use std::future::Future;
    use std::task::{Context, Poll, Waker};
    let mut build = std::pin::pin!(Client::builder("redis://127.0.0.1:1/").build());
    match build.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(Err(Error::InvalidArgument(message))) => assert!(message.contains("tokio")),
        other => panic!(
            "expected InvalidArgument at once, got {:?}",
            other.map(|r| r.is_ok())
        ),
    }
}
