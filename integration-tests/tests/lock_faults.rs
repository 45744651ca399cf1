//! Fault and cost tests of the reentrant lock against a real `redis-server`: cancelled calls,
//! a killed, paused or flushed server, a killed pub/sub connection, exact command counts and
//! many concurrent waiters.
//!
//! Every test starts its own server, so the tests run in parallel. Waits are for events
//! (`wait_until` on server or client state); the time bounds are generous, for a small, loaded
//! machine.

mod common;

use std::fmt::Display;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{
    cut_after, cut_at_await, eventually, exists, is_outage, lock_key, ms, text, wake_channel,
    wake_subscribers,
};
use redis::Value;
use redisync::prelude::*;
use redisync::LocalState;
use redisync_test_harness::{ChaosProxy, RedisServer};

/// How long a condition that should hold "soon" may take before the test fails.
const SETTLE: Duration = Duration::from_secs(10);

fn hash_field(server: &RedisServer, key: &str, field: &str) -> Option<String> {
    match server.cmd(&["HGET", key, field]) {
        Value::Nil => None,
        value => Some(text(&value)),
    }
}

/// Awaits `call`, returning its outcome (the success value only as text) and how long it took.
async fn timed<T: std::fmt::Debug>(
    call: impl Future<Output = Result<T>>,
) -> (Result<String>, Duration) {
    let started = Instant::now();
    let outcome = call.await.map(|value| format!("{value:?}"));
    (outcome, started.elapsed())
}

/// Sends read-only requests through the probe's client, twice as many as it has pooled
/// connections (picked round robin). Each connection answers in order, so once these return,
/// requests the client queued earlier, such as an abandoned acquire finishing in the
/// background, have normally been executed by Redis. This only makes the checks after it
/// sharper: a request that slips past it is still caught by the next check.
async fn flush_client_connections(probe: &ReentrantLock) {
    for _ in 0..2 * redisync::core::DEFAULT_POOL_SIZE {
        probe.is_locked().await.expect("is_locked during a flush");
    }
}

/// The next delay of a sweep: `step` apart up to `fine_until`, then 10 % apart (a slow machine
/// may need longer cuts before it sees the outcome the sweep waits for).
fn next_cut(cut: Duration, step: Duration, fine_until: Duration) -> Duration {
    if cut < fine_until {
        cut + step
    } else {
        cut + cut / 10
    }
}

/// A hold left behind by a cancelled attempt would show up here: the lock must be held by
/// `holder` exactly once.
fn assert_held_once_by(server: &RedisServer, name: &str, holder: &ReentrantLock) {
    let key = lock_key(name);
    assert_eq!(
        hash_field(server, &key, "owner").as_deref(),
        Some(holder.owner_id())
    );
    assert_eq!(hash_field(server, &key, "count").as_deref(), Some("1"));
}

/// What a cancelled `lock()` may leave behind, checked after every cut: local state at once;
/// on the server, once every request the client had queued has run, no subscriber and no hold
/// other than `holder`'s.
async fn assert_nothing_left(
    server: &RedisServer,
    client: &Client,
    probe: &ReentrantLock,
    holder: Option<&ReentrantLock>,
    what: impl Display,
) {
    assert_eq!(
        client.local_state(),
        LocalState::default(),
        "{what} left local state behind"
    );
    flush_client_connections(probe).await;
    let name = probe.name();
    match holder {
        Some(holder) => {
            eventually(
                format_args!("no subscriber is left after {what}"),
                SETTLE,
                || wake_subscribers(server, name) == 0,
            )
            .await;
            assert_held_once_by(server, name, holder);
        }
        None => {
            let key = lock_key(name);
            eventually(
                format_args!("no hold and no subscriber are left after {what}"),
                SETTLE,
                || !exists(server, &key) && wake_subscribers(server, name) == 0,
            )
            .await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_lock_calls_leave_no_hold_waiter_or_subscription() {
    let server = RedisServer::start();
    let name = "cancelled";
    let holder_client = Client::connect(server.url()).await.unwrap();
    let client = Client::builder(server.url())
        .command_timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    let holder = holder_client.lock(name);
    let probe = client.lock(name);

    // 1. The lock is busy. Cut lock() at each of its await points in turn (first request,
    //    subscription, second request, sleep), then after 0, 50, 100, ... µs until several cuts
    //    in a row came after it had started waiting, then after long waits.
    let held = holder.lock().await.unwrap();
    let mut asleep_at = None;
    for pendings in 0..20 {
        // Past the last await point that is woken by its own progress, lock() sleeps until
        // the holder's lease would end; the timeout cuts it there.
        let waiter = client.lock(name);
        let outcome = tokio::time::timeout(ms(200), cut_at_await(pendings, waiter.lock())).await;
        let what = format_args!("a lock() cut at await point {pendings}");
        match outcome {
            Ok(None) => {}
            Ok(Some(outcome)) => panic!("lock() returned {outcome:?} while held"),
            Err(_) => asleep_at = Some(pendings),
        }
        assert_nothing_left(&server, &client, &probe, Some(&holder), what).await;
        if asleep_at.is_some() {
            break;
        }
    }
    assert!(asleep_at.is_some(), "lock() never went to sleep");
    let mut cuts = 0;
    let mut reached_waiting = 0;
    let mut waiting_in_a_row = 0;
    let mut cut = Duration::ZERO;
    while (waiting_in_a_row < 5 || cut < ms(3)) && cut < ms(200) {
        let waits_before = client.stats().contended_waits;
        let outcome = cut_after(cut, client.lock(name).lock()).await;
        assert!(outcome.is_none(), "lock() returned {outcome:?} while held");
        if client.stats().contended_waits > waits_before {
            reached_waiting += 1;
            waiting_in_a_row += 1;
        } else {
            waiting_in_a_row = 0;
        }
        cuts += 1;
        let what = format_args!("a lock() cut after {cut:?}");
        assert_nothing_left(&server, &client, &probe, Some(&holder), what).await;
        cut = next_cut(cut, Duration::from_micros(50), ms(3));
    }
    assert!(
        reached_waiting >= 5,
        "only {reached_waiting} of {cuts} cuts reached the waiting phase"
    );
    for cut in [0, 1, 2, 10, 25, 50, 100, 250].map(ms) {
        let outcome = tokio::time::timeout(cut, client.lock(name).lock()).await;
        assert!(outcome.is_err(), "lock() returned {outcome:?} while held");
        let what = format_args!("a lock() timed out after {cut:?}");
        assert_nothing_left(&server, &client, &probe, Some(&holder), what).await;
    }

    // Nothing is stuck: once the holder releases, the other client gets the lock at once.
    held.unlock().await.unwrap();
    let guard = client
        .lock(name)
        .try_lock()
        .await
        .unwrap()
        .expect("the lock is free right after its holder released it");
    guard.unlock().await.unwrap();

    // 2. The lock is free: cut the acquire request itself, from "not sent yet" to "reply
    //    received", with a fresh handle each time. An attempt cut while its request is on the
    //    wire finishes in the background and must give back the hold it got.
    let mut acquired = 0;
    let mut cancelled = 0;
    let mut tally = |outcome: Option<Result<LockGuard>>| match outcome {
        Some(Ok(guard)) => {
            acquired += 1;
            drop(guard); // released in the background
            true
        }
        Some(Err(err)) => panic!("lock() of a free lock failed: {err}"),
        None => {
            cancelled += 1;
            false
        }
    };
    for pendings in 0..4 {
        tally(cut_at_await(pendings, client.lock(name).lock()).await);
        let what = format_args!("a lock() of a free lock cut at await point {pendings}");
        assert_nothing_left(&server, &client, &probe, None, what).await;
    }
    let mut acquired_in_a_row = 0;
    let mut cut = Duration::ZERO;
    while (acquired_in_a_row < 5 || cut < ms(2)) && cut < ms(100) {
        if tally(cut_after(cut, client.lock(name).lock()).await) {
            acquired_in_a_row += 1;
        } else {
            acquired_in_a_row = 0;
        }
        let what = format_args!("a lock() of a free lock cut after {cut:?}");
        assert_nothing_left(&server, &client, &probe, None, what).await;
        cut = next_cut(cut, Duration::from_micros(20), ms(2));
    }
    for cut in [0, 1, 2].map(ms) {
        tally(
            tokio::time::timeout(cut, client.lock(name).lock())
                .await
                .ok(),
        );
        let what = format_args!("a lock() of a free lock timed out after {cut:?}");
        assert_nothing_left(&server, &client, &probe, None, what).await;
    }
    println!(
        "busy: asleep at await point {asleep_at:?}, {reached_waiting} of {cuts} timed cuts \
         while waiting; free: {cancelled} cut, {acquired} acquired"
    );
    assert!(cancelled >= 2, "only {cancelled} attempts were cut");
    assert!(acquired >= 5, "only {acquired} attempts completed");

    // Nothing is stuck at the end either.
    let guard = tokio::time::timeout(Duration::from_secs(5), holder.lock())
        .await
        .expect("the lock is not stuck")
        .unwrap();
    guard.unlock().await.unwrap();
    let guard = client
        .lock(name)
        .try_lock()
        .await
        .unwrap()
        .expect("the lock is free at the end");
    guard.unlock().await.unwrap();
    assert_eq!(client.local_state(), LocalState::default());
    assert_eq!(holder_client.local_state(), LocalState::default());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_calls_fail_within_command_timeout_and_recover_after_restart() {
    let mut server = RedisServer::start();
    let command_timeout = Duration::from_secs(1);
    let connect = |url: String| async move {
        Client::builder(url)
            .command_timeout(command_timeout)
            .build()
            .await
            .unwrap()
    };
    let client = connect(server.url()).await;
    let other = connect(server.url()).await;
    let lock = client.lock("outage");
    lock.lock().await.unwrap().unlock().await.unwrap();

    // A task blocked in lock() on a lock another client holds.
    let busy = "outage-busy";
    let held = other.lock(busy).lock().await.unwrap();
    let blocked = client.lock(busy);
    let blocked_task = tokio::spawn(async move {
        let outcome = blocked.lock().await;
        (outcome, Instant::now())
    });
    eventually("the blocked waiter is subscribed", SETTLE, || {
        client.stats().contended_waits == 1 && server.numsub(&wake_channel(busy, &client)) == 1
    })
    .await;

    server.stop();
    let stopped_at = Instant::now();

    for (call, (outcome, took)) in [
        ("lock()", timed(lock.lock()).await),
        ("try_lock()", timed(lock.try_lock()).await),
        ("is_locked()", timed(lock.is_locked()).await),
    ] {
        assert!(
            matches!(&outcome, Err(e) if is_outage(e)),
            "{call} with redis down: {outcome:?}"
        );
        assert!(took < Duration::from_secs(3), "{call} took {took:?}");
    }

    let (outcome, finished_at) = tokio::time::timeout(Duration::from_secs(20), blocked_task)
        .await
        .expect("a blocked lock() must not hang while redis is down")
        .unwrap();
    assert!(
        matches!(&outcome, Err(e) if is_outage(e)),
        "blocked lock() with redis down: {outcome:?}"
    );
    let blocked_for = finished_at.duration_since(stopped_at);
    assert!(
        blocked_for < Duration::from_secs(5),
        "the blocked lock() failed only {blocked_for:?} after redis went down"
    );
    drop(held);

    server.restart();

    // The same client works again once its connections are re-established.
    let deadline = Instant::now() + Duration::from_secs(10);
    let guard = loop {
        match lock.try_lock().await {
            Ok(Some(guard)) => break guard,
            Ok(None) => panic!("the lock is held after a restart without persistence"),
            Err(err) if Instant::now() < deadline => {
                assert!(is_outage(&err), "unexpected error {err}");
                tokio::time::sleep(ms(50)).await;
            }
            Err(err) => panic!("the client did not recover after the restart: {err}"),
        }
    };
    guard.unlock().await.unwrap();
    let guard = tokio::time::timeout(Duration::from_secs(5), lock.lock())
        .await
        .expect("lock() after the restart")
        .unwrap();
    assert!(lock.is_held().await.unwrap());
    guard.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());

    // Waking works again too: the pub/sub hubs reconnected and resubscribe.
    let other_lock = other.lock(busy);
    let deadline = Instant::now() + Duration::from_secs(10);
    let held = loop {
        match other_lock.lock().await {
            Ok(guard) => break guard,
            Err(err) if Instant::now() < deadline && is_outage(&err) => {
                tokio::time::sleep(ms(50)).await;
            }
            Err(err) => panic!("the other client did not recover after the restart: {err}"),
        }
    };
    let waiter = client.lock(busy);
    let waiter_task = tokio::spawn(async move { waiter.lock().await });
    eventually("the waiter subscribes after the restart", SETTLE, || {
        server.numsub(&wake_channel(busy, &client)) == 1
    })
    .await;
    let released_at = Instant::now();
    held.unlock().await.unwrap();
    let guard = tokio::time::timeout(Duration::from_secs(10), waiter_task)
        .await
        .expect("the waiter is woken after the restart")
        .unwrap()
        .unwrap();
    assert!(
        released_at.elapsed() < Duration::from_secs(5),
        "the waiter got the lock only {:?} after the release",
        released_at.elapsed()
    );
    guard.unlock().await.unwrap();
    client.shutdown().await;
    other.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_redis_gives_timeout_not_hang() {
    let server = RedisServer::start();
    let name = "paused";
    let client = Client::builder(server.url())
        .command_timeout(ms(500))
        .build()
        .await
        .unwrap();
    let other = Client::builder(server.url())
        .command_timeout(ms(500))
        .build()
        .await
        .unwrap();
    let lock = client.lock(name);
    lock.lock().await.unwrap().unlock().await.unwrap();

    server.pause();
    let paused_at = Instant::now();
    // The three calls run side by side, so the server stays paused for about one command
    // timeout.
    let (try_lock, lock_call, is_locked) = tokio::join!(
        timed(lock.try_lock()),
        timed(lock.lock()),
        timed(lock.is_locked())
    );
    server.resume();
    let paused_for = paused_at.elapsed();
    for (call, (outcome, took)) in [
        ("try_lock()", try_lock),
        ("lock()", lock_call),
        ("is_locked()", is_locked),
    ] {
        assert!(
            matches!(&outcome, Err(e) if is_outage(e)),
            "{call} on a paused server: {outcome:?}"
        );
        assert!(took < Duration::from_secs(2), "{call} took {took:?}");
    }
    println!("redis was paused for {paused_for:?}");

    // The acquires that timed out were still queued on the paused server and run once it
    // resumes. Their caller got an error and holds no guard, so whatever they took must be
    // given back: another owner gets the lock well within the 30 s lease.
    let started = Instant::now();
    let deadline = started + Duration::from_secs(10);
    let guard = loop {
        match tokio::time::timeout(Duration::from_secs(5), other.lock(name).lock()).await {
            Ok(Ok(guard)) => break guard,
            Ok(Err(err)) if Instant::now() < deadline && is_outage(&err) => {
                tokio::time::sleep(ms(50)).await;
            }
            Ok(Err(err)) => panic!("the other client failed after the resume: {err}"),
            Err(_) => panic!(
                "the lock stayed held after the resume (owner {:?}); the timed-out acquires \
                 left a hold behind",
                hash_field(&server, &lock_key(name), "owner")
            ),
        }
    };
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "the lock was free only {:?} after the resume",
        started.elapsed()
    );
    guard.unlock().await.unwrap();

    // The client itself works again.
    let guard = lock
        .try_lock()
        .await
        .unwrap()
        .expect("the lock is free after the resume");
    assert_eq!(lock.hold_count().await.unwrap(), 1);
    guard.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_flush_is_transparent() {
    let server = RedisServer::start();
    // A short watchdog lease, so that renewals run while the scripts are flushed.
    let client = Client::builder(server.url())
        .watchdog_timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    let other = Client::connect(server.url()).await.unwrap();
    let lock = client.lock("flushed");
    let guard = lock.lock().await.unwrap();
    assert!(lock.is_held().await.unwrap());
    guard.unlock().await.unwrap();

    server.cmd(&["SCRIPT", "FLUSH"]);
    let loads_before = server.command_calls("script|load");
    let guard = lock.lock().await.unwrap();
    assert!(other.lock("flushed").try_lock().await.unwrap().is_none());
    guard.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
    assert!(
        server.command_calls("script|load") > loads_before,
        "the scripts were not reloaded after SCRIPT FLUSH"
    );

    // The watchdog's renewal script and the release are reloaded too.
    let guard = lock.lock().await.unwrap();
    server.cmd(&["SCRIPT", "FLUSH"]);
    let renewals = client.stats().renewals;
    eventually("two renewals after SCRIPT FLUSH", SETTLE, || {
        client.stats().renewals >= renewals + 2
    })
    .await;
    assert!(!guard.is_lost());
    assert_eq!(client.stats().lost_leases, 0);
    server.cmd(&["SCRIPT", "FLUSH"]);
    guard.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncontended_lock_and_unlock_send_exactly_two_commands() {
    let server = RedisServer::start();
    // The client talks through a proxy that lists the commands it sends: the server's own
    // statistics (and its slow log, on Valkey) count the commands scripts run alongside.
    let proxy = ChaosProxy::start(&server);
    let name = "two-commands";
    let client = Client::connect(proxy.url()).await.unwrap();
    let lock = client.lock(name);
    // Warm up: both scripts are loaded.
    lock.lock().await.unwrap().unlock().await.unwrap();
    // Bring up the pub/sub hub (it connects in the background) with one contended wait, so
    // that its connection handshake and subscriptions are over before counting starts.
    let held = lock.lock().await.unwrap();
    let waiter = client.lock(name);
    let waiter = tokio::spawn(async move { waiter.lock().await });
    eventually("the waiter is subscribed", SETTLE, || {
        server.numsub(&wake_channel(name, &client)) == 1
    })
    .await;
    common::lost_notices_subscribed(&server, &client).await;
    held.unlock().await.unwrap();
    waiter.await.unwrap().unwrap().unlock().await.unwrap();
    eventually("the waiter has unsubscribed", SETTLE, || {
        wake_subscribers(&server, name) == 0
    })
    .await;

    server.cmd(&["CONFIG", "RESETSTAT"]);
    let before = client.stats();
    let sent_before = proxy.commands().len();

    let guard = lock.lock().await.unwrap();
    guard.unlock().await.unwrap();

    let after = client.stats();
    let sent = proxy.commands().split_off(sent_before);
    assert_eq!(sent, ["evalsha", "evalsha"], "commands the client sent");
    assert_eq!(server.command_calls("evalsha"), 2);
    assert_eq!(server.command_calls("eval"), 0);
    assert_eq!(server.command_calls("script|load"), 0);
    assert_eq!(after.scripts_sent - before.scripts_sent, 2);
    assert_eq!(after.acquires - before.acquires, 1);
    assert_eq!(after.contended_waits, before.contended_waits);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_waiters_cost_a_bounded_number_of_requests_per_handoff() {
    // The cost per handoff must not grow with the number of local waiters: four times the
    // waiters may not cost more than one extra request per handoff.
    let few = requests_per_handoff(4).await;
    let many = requests_per_handoff(16).await;
    assert!(
        many <= few + 1.0,
        "{many:.2} requests per handoff with 16 waiters vs {few:.2} with 4: cost grows with N"
    );
}

/// Runs `TASKS` local waiters (one handle each) through three turns each on one lock and
/// returns the scripts the client sent per handoff, after checking the absolute bound.
async fn requests_per_handoff(tasks: usize) -> f64 {
    let (tasks_n, rounds) = (tasks, 3usize);
    const HOLD: Duration = Duration::from_millis(20);
    const MAX_REQUESTS_PER_HANDOFF: u64 = 6;
    let server = RedisServer::start();
    let name = "handoff";
    let client = Client::connect(server.url()).await.unwrap();
    common::lock_cycle(&client, name).await;

    let before = client.stats();
    let evalsha_before = server.command_calls("evalsha");
    let inside = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..tasks_n)
        .map(|_| {
            let lock = client.lock(name); // a handle each: different owners
            let inside = inside.clone();
            tokio::spawn(async move {
                for _ in 0..rounds {
                    let guard = lock.lock().await.unwrap();
                    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                    tokio::time::sleep(HOLD).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    guard.unlock().await.unwrap();
                }
            })
        })
        .collect();
    let all = futures_join(tasks);
    tokio::time::timeout(Duration::from_secs(30), all)
        .await
        .expect("at most 48 handoffs of 20 ms finish well within 30 s");

    let after = client.stats();
    let handoffs = (tasks_n * rounds) as u64;
    assert_eq!(after.acquires - before.acquires, handoffs);
    let sent = after.scripts_sent - before.scripts_sent;
    let executed = server.command_calls("evalsha") - evalsha_before;
    println!(
        "{handoffs} handoffs: {sent} scripts sent ({:.2} per handoff), {executed} EVALSHA executed",
        sent as f64 / handoffs as f64
    );
    assert!(
        sent <= MAX_REQUESTS_PER_HANDOFF * handoffs,
        "{sent} requests for {handoffs} handoffs: local waiters poll redis"
    );
    assert!(
        executed <= MAX_REQUESTS_PER_HANDOFF * handoffs,
        "redis executed {executed} scripts for {handoffs} handoffs"
    );
    assert_eq!(client.local_state(), LocalState::default());
    eventually("nothing is subscribed any more", SETTLE, || {
        wake_subscribers(&server, name) == 0
    })
    .await;
    assert!(!exists(&server, &lock_key(name)));
    sent as f64 / handoffs as f64
}

/// Awaits every task, propagating panics.
async fn futures_join<T>(tasks: Vec<tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut results = Vec::with_capacity(tasks.len());
    for task in tasks {
        results.push(task.await.expect("task panicked"));
    }
    results
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_clients_sixteen_tasks_count_exactly_with_increasing_fencing_tokens() {
    const CLIENTS: usize = 3;
    const TASKS: usize = 16;
    const ITERATIONS: usize = 10;
    const COUNTER: &str = "fenced-counter";
    let server = RedisServer::start();
    let name = "counter-lock";
    let data = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let mut clients = Vec::new();
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let client = Client::connect(server.url()).await.unwrap();
        for t in 0..TASKS {
            let lock = client.lock(name);
            let mut con = data.clone();
            tasks.push(tokio::spawn(async move {
                let mut records = Vec::with_capacity(ITERATIONS);
                for i in 0..ITERATIONS {
                    let guard = lock.lock().await.unwrap();
                    let value: Option<u64> = redis::cmd("GET")
                        .arg(COUNTER)
                        .query_async(&mut con)
                        .await
                        .unwrap();
                    let value = value.unwrap_or(0);
                    // Give others a chance to interleave: yield or sleep up to 1 ms.
                    match (c + t + i) % 3 {
                        0 => tokio::task::yield_now().await,
                        1 => tokio::time::sleep(Duration::from_micros(500)).await,
                        _ => tokio::time::sleep(ms(1)).await,
                    }
                    let () = redis::cmd("SET")
                        .arg(COUNTER)
                        .arg(value + 1)
                        .query_async(&mut con)
                        .await
                        .unwrap();
                    records.push((value, guard.fencing_token()));
                    guard.unlock().await.unwrap();
                }
                records
            }));
        }
        clients.push(client);
    }
    let results = tokio::time::timeout(Duration::from_secs(60), futures_join(tasks))
        .await
        .expect("480 short critical sections finish within 60 s");

    let total = CLIENTS * TASKS * ITERATIONS;
    assert_eq!(text(&server.cmd(&["GET", COUNTER])), total.to_string());
    let mut records: Vec<(u64, u64)> = results.into_iter().flatten().collect();
    records.sort_unstable();
    let values: Vec<u64> = records.iter().map(|r| r.0).collect();
    assert_eq!(values, (0..total as u64).collect::<Vec<_>>());
    for pair in records.windows(2) {
        assert!(
            pair[0].1 < pair[1].1,
            "fencing token {} for counter {} is not above token {} for counter {}",
            pair[1].1,
            pair[1].0,
            pair[0].1,
            pair[0].0
        );
    }
    for client in &clients {
        assert_eq!(client.local_state(), LocalState::default());
        assert_eq!(client.stats().lost_leases, 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pubsub_connection_killed_waiters_still_wake() {
    let server = RedisServer::start();
    let name = "resubscribe";
    let lease = Duration::from_secs(30);
    let holder_client = Client::builder(server.url())
        .watchdog_timeout(lease)
        .build()
        .await
        .unwrap();
    let waiter_client = Client::builder(server.url())
        .watchdog_timeout(lease)
        .build()
        .await
        .unwrap();
    let holder = holder_client.lock(name);

    // In the first round the holder releases after the hub has resubscribed: the message
    // must reach the new subscription. In the second, one transaction kills the connection
    // and frees the lock as force_unlock does (DEL, then PUBLISH to nobody): the message is
    // lost for sure, so only the hub's wake-up after reconnecting can get the waiter going.
    for lose_the_message in [false, true] {
        let held = holder.lock().await.unwrap();
        let waits = waiter_client.stats().contended_waits;
        let waiter = waiter_client.lock(name);
        let task = tokio::spawn(async move {
            let guard = waiter.lock().await;
            (guard, Instant::now())
        });
        eventually("the waiter is subscribed", SETTLE, || {
            waiter_client.stats().contended_waits > waits
                && server.numsub(&wake_channel(name, &waiter_client)) == 1
        })
        .await;

        let released_at;
        if lose_the_message {
            let mut con = server.connection();
            let (killed, deleted, receivers): (u64, u64, u64) = redis::pipe()
                .atomic()
                .cmd("CLIENT")
                .arg("KILL")
                .arg("TYPE")
                .arg("pubsub")
                .cmd("DEL")
                .arg(lock_key(name))
                .cmd("PUBLISH")
                .arg(wake_channel(name, &waiter_client))
                .arg("released")
                .query(&mut con)
                .unwrap();
            released_at = Instant::now();
            assert!(killed >= 1, "no pub/sub connection was killed");
            assert_eq!((deleted, receivers), (1, 0));
            assert!(matches!(held.unlock().await, Err(Error::NotOwner)));
        } else {
            let killed = server.cmd(&["CLIENT", "KILL", "TYPE", "pubsub"]);
            assert!(
                matches!(killed, Value::Int(n) if n >= 1),
                "CLIENT KILL TYPE pubsub: {killed:?}"
            );
            eventually("the hub resubscribes", SETTLE, || {
                server.numsub(&wake_channel(name, &waiter_client)) == 1
            })
            .await;
            released_at = Instant::now();
            held.unlock().await.unwrap();
        }
        let (guard, acquired_at) = tokio::time::timeout(Duration::from_secs(20), task)
            .await
            .expect("the waiter is woken")
            .unwrap();
        let guard = guard.unwrap();
        let waited = acquired_at.duration_since(released_at);
        assert!(
            waited < Duration::from_secs(5),
            "the waiter got the lock {waited:?} after the release (message lost: \
             {lose_the_message}); the lease is {lease:?}"
        );
        guard.unlock().await.unwrap();
    }
    assert_eq!(waiter_client.local_state(), LocalState::default());
    eventually("nothing is subscribed any more", SETTLE, || {
        wake_subscribers(&server, name) == 0
    })
    .await;
}

/// A waiting client whose last waiting task gives up while Redis does not answer withdraws
/// itself in the background, and keeps sending the withdrawal until it lands. If the client
/// waits again meanwhile, the registration in Redis belongs to the new wait: a withdrawal
/// landing after the new wait's attempt would take it out, and the release would then wake
/// nobody, leaving the waiter to its once-a-second re-check (as can happen to a waiter that
/// retries through a cluster failover). So a registering attempt waits until the withdrawal's
/// send on the wire is over, and the withdrawal is not sent again. The new wait's first try,
/// made before it subscribes, registers nothing and goes out at once; it is then stuck
/// behind the withdrawal on the client's one connection, so the wait of its registering
/// attempt does not show here (core's unit test
/// `a_registering_attempt_waits_for_a_withdrawal_send_on_the_wire` pins it). What shows: the
/// first try is the only request sent meanwhile, and the new wait ends up registered and
/// woken by the release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_withdrawal_still_retrying_leaves_a_newer_wait_registered() {
    let server = RedisServer::start();
    let name = "rewait";
    let command_timeout = ms(2000);
    let holder = Client::builder(server.url())
        .command_timeout(command_timeout)
        .build()
        .await
        .unwrap();
    // One connection: what is sent lands in the order sent, so a withdrawal sent after the
    // attempt surely lands after it.
    let waiter = Client::builder(server.url())
        .command_timeout(command_timeout)
        .pool_size(1)
        .build()
        .await
        .unwrap();
    let guard = holder.lock(name).lock().await.unwrap();
    let waiters = common::keys::lock(name).waiters;
    let channel = wake_channel(name, &waiter);
    let registered = || server.cmd(&["ZSCORE", &waiters, &channel]) != Value::Nil;

    let first = tokio::spawn({
        let lock = waiter.lock(name);
        async move { lock.lock().await }
    });
    eventually("the first wait registered its client", SETTLE, || {
        registered() && server.numsub(&channel) == 1
    })
    .await;

    // The wait re-checks once a second. A re-check still on the wire when the wait ends holds
    // the withdrawal back until it is over, so the script seen sent below would be that
    // re-check, and the new wait's attempt could rightly go out first. So the wait ends
    // right after a re-check has run (the registry's expiry, renewed by every registering
    // attempt, went up), the next one most of a second away.
    let expiry = || common::int(&server, &["PTTL", &waiters]);
    let mut last_expiry = expiry();
    eventually("the first wait re-checked", SETTLE, || {
        let now = expiry();
        let renewed = now > last_expiry;
        last_expiry = now;
        renewed
    })
    .await;
    tokio::time::sleep(ms(200)).await;
    let scripts_before = waiter.stats().scripts_sent;
    let paused = common::Paused::pause(&server);
    // The wait ends: its withdrawal goes out and gets no answer.
    first.abort();
    eventually("the withdrawal is sent", SETTLE, || {
        waiter.stats().scripts_sent > scripts_before
    })
    .await;
    let withdrawal_sent = Instant::now();
    // Late enough that the new wait's first try, stuck behind the withdrawal, is answered
    // within its command timeout once Redis is back.
    tokio::time::sleep(command_timeout / 2).await;
    // The new wait's registering attempt will register the client again. Sent alongside the
    // withdrawal it could land first (over another connection, or after a redirection), so
    // it waits until the withdrawal's send is over; its first try registers nothing.
    let scripts_sent = waiter.stats().scripts_sent;
    let second = tokio::spawn({
        let lock = waiter.lock(name);
        async move { (lock.lock().await, Instant::now()) }
    });
    tokio::time::sleep(command_timeout / 4).await;
    assert_eq!(
        waiter.stats().scripts_sent,
        scripts_sent + 1,
        "not just the first try went out while the withdrawal was on the wire ({:?} after it \
         was seen sent)",
        withdrawal_sent.elapsed()
    );
    // Resumed once the withdrawal's send has timed out (the attempt went out then; the
    // withdrawal's next send, 50 ms later, would follow it), and well within the attempt's
    // own command timeout. Timed, not awaited: nothing lasting shows that the send timed
    // out.
    tokio::time::sleep_until((withdrawal_sent + command_timeout + command_timeout / 5).into())
        .await;
    paused.resume();

    eventually("the withdrawal is settled", SETTLE, || {
        waiter.local_state().pending_releases == 0
    })
    .await;
    assert!(!second.is_finished(), "the lock is held: {second:?}");
    assert!(
        registered(),
        "a late withdrawal took out the registration of the wait that came after it"
    );
    let released = Instant::now();
    guard.unlock().await.unwrap();
    let (outcome, acquired) = tokio::time::timeout(SETTLE, second)
        .await
        .expect("the waiter gets the lock")
        .unwrap();
    println!("woken {:?} after the release", acquired - released);
    outcome.unwrap().unlock().await.unwrap();
}
