//! MultiLock and Redlock against real redis-server processes: all or nothing, mutual
//! exclusion, no deadlock whatever the argument order, locks spread over servers, round trips,
//! leases, failure reports, cancellation, and Redlock's majority over independent servers.

mod common;

use std::collections::BTreeSet;
use std::fmt::Display;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{
    client, client_with_watchdog, cut_after, cut_at_await, eventually, exists, int, lock_key, ms,
    text,
};
use redis::Value;
use redisync::prelude::*;
use redisync::LocalState;
use redisync_test_harness::RedisServer;

/// How long a condition that should hold "soon" may take before the test fails.
const SETTLE: Duration = Duration::from_secs(10);
/// How long a run that should finish may take before it counts as a deadlock.
const DEADLOCK: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// A field of the lock hash of `name`, if the hash and field exist.
fn lock_field(server: &RedisServer, name: &str, field: &str) -> Option<String> {
    match server.cmd(&["HGET", &lock_key(name), field]) {
        Value::Nil => None,
        value => Some(text(&value)),
    }
}

/// Whether the lock hash of `name` exists on `server`.
fn held(server: &RedisServer, name: &str) -> bool {
    exists(server, &lock_key(name))
}

/// The lock hash's remaining time to live in ms (-2: no hash, -1: no expiry).
fn pttl(server: &RedisServer, name: &str) -> i64 {
    int(server, &["PTTL", &lock_key(name)])
}

/// The names among `locks` (server, name) whose lock hash exists.
fn held_among(locks: &[(&RedisServer, &str)]) -> Vec<String> {
    locks
        .iter()
        .filter(|(server, name)| held(server, name))
        .map(|(_, name)| (*name).to_owned())
        .collect()
}

/// Fails unless none of `locks` is held right now.
fn assert_none_held(locks: &[(&RedisServer, &str)], what: impl Display) {
    let left = held_among(locks);
    assert!(left.is_empty(), "{what}: still held: {left:?}");
}

/// Fails unless every one of `locks` is free within [`SETTLE`].
async fn eventually_none_held(locks: &[(&RedisServer, &str)], what: impl Display) {
    eventually(format_args!("nothing is held after {what}"), SETTLE, || {
        held_among(locks).is_empty()
    })
    .await;
}

/// Fails unless the lock `name` is held exactly once, by `holder`.
fn assert_held_once_by(server: &RedisServer, name: &str, holder: &ReentrantLock) {
    assert_eq!(
        lock_field(server, name, "owner").as_deref(),
        Some(holder.owner_id()),
        "lock {name} is not held by its holder"
    );
    assert_eq!(
        lock_field(server, name, "count").as_deref(),
        Some("1"),
        "lock {name} is held more than once"
    );
}

/// Sends read-only requests through every pooled connection of `client` (twice round the
/// pool): requests it queued earlier, such as an abandoned acquire finishing in the
/// background, have then normally been executed by Redis.
async fn flush(client: &Client) {
    let probe = client.lock("flush-probe");
    for _ in 0..2 * redisync::core::DEFAULT_POOL_SIZE {
        probe.is_locked().await.expect("is_locked during a flush");
    }
}

/// Fails unless every client's local bookkeeping is empty.
fn assert_no_local_state(clients: &[&Client], what: impl Display) {
    for client in clients {
        assert_eq!(
            client.local_state(),
            LocalState::default(),
            "{what} left local state behind"
        );
    }
}

/// Awaits every task, propagating panics.
async fn join_tasks<T>(tasks: Vec<tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::with_capacity(tasks.len());
    for task in tasks {
        out.push(task.await.expect("task panicked"));
    }
    out
}

/// A client whose watchdog lease is long enough that no renewal runs during a test.
async fn quiet_client(server: &RedisServer) -> Client {
    client_with_watchdog(server, Duration::from_secs(120)).await
}

/// A client that gives up on Redis after 500 ms.
async fn impatient_client(server: &RedisServer) -> Client {
    Client::builder(server.url())
        .command_timeout(ms(500))
        .build()
        .await
        .expect("connect")
}

fn names(guard: &MultiLockGuard) -> Vec<String> {
    guard.fencing_tokens().into_iter().map(|(n, _)| n).collect()
}

// ---------------------------------------------------------------------------------------------
// Order, all or nothing
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn locks_are_ordered_canonically_whatever_the_argument_order() {
    let (s1, s2) = (RedisServer::start(), RedisServer::start());
    let (c1, c2) = (client(&s1).await, client(&s2).await);
    let one = c1.multi_lock([c1.lock("c"), c1.lock("a"), c1.lock("b")]);
    let order: Vec<&str> = one.locks().iter().map(|l| l.name()).collect();
    assert_eq!(order, ["a", "b", "c"]);

    // Across servers: by server first, then by name.
    let forward = c1.multi_lock([c1.lock("z"), c2.lock("a"), c1.lock("b")]);
    let backward = c1.multi_lock([c1.lock("b"), c2.lock("a"), c1.lock("z")]);
    let key = |l: &ReentrantLock| (l.client().server().to_owned(), l.name().to_owned());
    let mut expected: Vec<_> = forward.locks().iter().map(key).collect();
    expected.sort();
    assert_eq!(
        forward.locks().iter().map(key).collect::<Vec<_>>(),
        expected
    );
    assert_eq!(
        backward.locks().iter().map(key).collect::<Vec<_>>(),
        expected
    );
    assert_ne!(c1.server(), c2.server());

    // The guard lists its locks in that order too.
    let guard = backward.lock().await.unwrap();
    let expected_names: Vec<String> = expected.into_iter().map(|(_, n)| n).collect();
    assert_eq!(names(&guard), expected_names);
    guard.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_lock_takes_nothing_while_one_lock_is_held_elsewhere() {
    let server = RedisServer::start();
    let (c, other) = (client(&server).await, client(&server).await);
    let all = ["a", "b", "c"];
    let locks: Vec<(&RedisServer, &str)> = all.iter().map(|n| (&server, *n)).collect();
    // Listed out of order on purpose; each lock in turn is the busy one.
    let multi = c.multi_lock([c.lock("c"), c.lock("a"), c.lock("b")]);
    for busy in all {
        let holder = other.lock(busy);
        let held_elsewhere = holder.lock().await.unwrap();
        let free: Vec<(&RedisServer, &str)> =
            locks.iter().copied().filter(|(_, n)| *n != busy).collect();
        // Given back before try_lock returned: checked at once, not eventually.
        assert!(multi.try_lock().await.unwrap().is_none());
        assert_none_held(&free, format_args!("a failed try_lock with {busy} busy"));
        assert!(multi.try_lock_for(Duration::ZERO).await.unwrap().is_none());
        assert_none_held(
            &free,
            format_args!("a failed try_lock_for with {busy} busy"),
        );
        assert!(multi
            .try_lock_with_lease(Duration::ZERO, Duration::from_secs(10))
            .await
            .unwrap()
            .is_none());
        assert_none_held(
            &free,
            format_args!("a failed try_lock_with_lease with {busy} busy"),
        );
        for lock in multi.locks() {
            if lock.name() != busy {
                assert!(
                    !lock.is_locked().await.unwrap(),
                    "{} is locked",
                    lock.name()
                );
            }
        }
        assert_held_once_by(&server, busy, &holder);
        held_elsewhere.unlock().await.unwrap();
    }
    assert_no_local_state(&[&c], "failed try_locks");
    let guard = multi.try_lock().await.unwrap().expect("all free now");
    assert_eq!(names(&guard), ["a", "b", "c"]);
    guard.unlock().await.unwrap();
    assert_none_held(&locks, "unlock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_lock_across_two_servers_takes_nothing_while_one_lock_is_held_elsewhere() {
    let (s1, s2) = (RedisServer::start(), RedisServer::start());
    let (c1, c2) = (client(&s1).await, client(&s2).await);
    let (o1, o2) = (client(&s1).await, client(&s2).await);
    let locks = [(&s1, "a"), (&s1, "b"), (&s2, "c"), (&s2, "d")];
    let multi = c1.multi_lock([c2.lock("d"), c1.lock("b"), c2.lock("c"), c1.lock("a")]);
    for (server, busy) in locks {
        let other = if std::ptr::eq(server, &s1) { &o1 } else { &o2 };
        let holder = other.lock(busy);
        let held_elsewhere = holder.lock().await.unwrap();
        let free: Vec<_> = locks.iter().copied().filter(|(_, n)| *n != busy).collect();
        assert!(multi.try_lock().await.unwrap().is_none());
        assert_none_held(&free, format_args!("a failed try_lock with {busy} busy"));
        assert!(multi
            .try_lock_with_lease(Duration::ZERO, Duration::from_secs(10))
            .await
            .unwrap()
            .is_none());
        assert_none_held(
            &free,
            format_args!("a failed try_lock_with_lease with {busy} busy"),
        );
        assert_held_once_by(server, busy, &holder);
        held_elsewhere.unlock().await.unwrap();
    }
    assert_no_local_state(&[&c1, &c2], "failed try_locks");
    let guard = multi.try_lock().await.unwrap().expect("all free now");
    assert_eq!(guard.guards().len(), 4);
    guard.unlock().await.unwrap();
    assert_none_held(&locks, "unlock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_lock_for_gives_up_after_its_wait_and_releases_what_it_took() {
    let server = RedisServer::start();
    let (c, other) = (client(&server).await, client(&server).await);
    let multi = c.multi_lock([c.lock("a"), c.lock("b"), c.lock("c")]);
    // "b" is busy: "a" is taken while the multi-lock waits for "b".
    let holder = other.lock("b");
    let held_elsewhere = holder.lock().await.unwrap();
    let started = Instant::now();
    let outcome = multi.try_lock_for(ms(300)).await.unwrap();
    let took = started.elapsed();
    assert!(outcome.is_none());
    assert!(took >= ms(290), "gave up after {took:?}");
    assert!(took < ms(3000), "gave up after {took:?}");
    assert_none_held(
        &[(&server, "a"), (&server, "c")],
        "a timed-out try_lock_for",
    );
    assert!(!c.lock("a").is_locked().await.unwrap());
    assert_held_once_by(&server, "b", &holder);
    assert_no_local_state(&[&c], "a timed-out try_lock_for");
    // It really waited for "b" (not a single attempt) and would have got everything.
    assert!(c.stats().contended_waits >= 1, "{:?}", c.stats());
    held_elsewhere.unlock().await.unwrap();
    let guard = multi
        .try_lock_for(ms(300))
        .await
        .unwrap()
        .expect("free now");
    guard.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_lock_for_across_two_servers_releases_what_it_took() {
    let (s1, s2) = (RedisServer::start(), RedisServer::start());
    let (c1, c2) = (client(&s1).await, client(&s2).await);
    let multi = c1.multi_lock([c1.lock("a"), c2.lock("b")]);
    // Make the lock that sorts last the busy one, so the other is taken first.
    let last = multi.locks().last().unwrap().clone();
    let first = multi.locks().first().unwrap().clone();
    let (last_server, first_server) = if last.client().server() == c1.server() {
        (&s1, &s2)
    } else {
        (&s2, &s1)
    };
    let holder_client = client(last_server).await;
    let holder = holder_client.lock(last.name());
    let held_elsewhere = holder.lock().await.unwrap();
    let started = Instant::now();
    assert!(multi.try_lock_for(ms(300)).await.unwrap().is_none());
    let took = started.elapsed();
    assert!(took >= ms(290) && took < ms(3000), "gave up after {took:?}");
    assert!(
        !held(first_server, first.name()),
        "the lock taken first was not given back"
    );
    assert_held_once_by(last_server, last.name(), &holder);
    held_elsewhere.unlock().await.unwrap();
    multi.lock().await.unwrap().unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_down_fails_the_acquire_and_releases_what_it_took() {
    let (mut s1, mut s2) = (RedisServer::start(), RedisServer::start());
    let (c1, c2) = (impatient_client(&s1).await, impatient_client(&s2).await);
    let multi = c1.multi_lock([c1.lock("a"), c2.lock("b")]);
    // Stop the server of the lock taken last, so that the other is taken first.
    let last_on_s2 = multi.locks()[1].client().server() == c2.server();
    let (first, last) = if last_on_s2 {
        (("a", &s1), &mut s2)
    } else {
        (("b", &s2), &mut s1)
    };
    last.stop();
    for lease in [None, Some(Duration::from_secs(30))] {
        let started = Instant::now();
        let outcome = tokio::time::timeout(Duration::from_secs(30), async {
            match lease {
                None => multi.lock().await,
                Some(lease) => multi.lock_with_lease(lease).await,
            }
        })
        .await
        .expect("an acquire with a server down hangs");
        assert!(
            matches!(outcome, Err(Error::Redis(_) | Error::Timeout)),
            "{:?}",
            outcome.map(|g| names(&g))
        );
        assert!(started.elapsed() < Duration::from_secs(5));
        // Released before the error was returned: checked at once.
        assert!(
            !held(first.1, first.0),
            "{} was kept after the failure",
            first.0
        );
        let outcome = multi.try_lock_for(Duration::from_secs(1)).await;
        assert!(outcome.is_err(), "{:?}", outcome.map(|g| g.is_some()));
        assert!(
            !held(first.1, first.0),
            "{} was kept after the failure",
            first.0
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Mutual exclusion, deadlock freedom
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_contenders_with_try_lock_one_winner_per_round() {
    const TASKS: usize = 10;
    const ROUNDS: usize = 20;
    let server = RedisServer::start();
    let clients = [
        client(&server).await,
        client(&server).await,
        client(&server).await,
    ];
    let start = Arc::new(tokio::sync::Barrier::new(TASKS));
    let tried = Arc::new(tokio::sync::Barrier::new(TASKS));
    let inside = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..TASKS)
        .map(|i| {
            // Handles of its own (another owner), on one or two clients, listed in either order.
            let (ca, cb) = (&clients[i % 3], &clients[(i / 3 + i) % 3]);
            let multi = if i % 2 == 0 {
                ca.multi_lock([ca.lock("x"), cb.lock("y")])
            } else {
                ca.multi_lock([cb.lock("y"), ca.lock("x")])
            };
            let (start, tried, inside) = (start.clone(), tried.clone(), inside.clone());
            tokio::spawn(async move {
                let mut wins = Vec::with_capacity(ROUNDS);
                for _ in 0..ROUNDS {
                    start.wait().await;
                    let guard = multi.try_lock().await.unwrap();
                    if guard.is_some() {
                        assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                    }
                    // The winner holds on until every contender has tried.
                    tried.wait().await;
                    wins.push(guard.is_some());
                    if let Some(guard) = guard {
                        inside.fetch_sub(1, Ordering::SeqCst);
                        guard.unlock().await.unwrap();
                    }
                }
                wins
            })
        })
        .collect();
    let wins = tokio::time::timeout(DEADLOCK, join_tasks(tasks))
        .await
        .expect("rounds of try_lock never finished");
    for round in 0..ROUNDS {
        let winners = wins.iter().filter(|w| w[round]).count();
        assert_eq!(winners, 1, "round {round} had {winners} winners");
    }
    assert_none_held(&[(&server, "x"), (&server, "y")], "all rounds");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_contenders_with_lock_count_exactly() {
    const TASKS: usize = 10;
    const ROUNDS: u64 = 10;
    let server = RedisServer::start();
    let clients = [
        client(&server).await,
        client(&server).await,
        client(&server).await,
    ];
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..TASKS)
        .map(|i| {
            let (ca, cb, cc) = (&clients[i % 3], &clients[(i + 1) % 3], &clients[i / 4]);
            let locks = [ca.lock("p"), cb.lock("q"), cc.lock("r")];
            let multi = match i % 3 {
                0 => ca.multi_lock(locks),
                1 => ca.multi_lock(locks.into_iter().rev()),
                _ => {
                    let [p, q, r] = locks;
                    ca.multi_lock([q, r, p])
                }
            };
            let (counter, inside) = (counter.clone(), inside.clone());
            tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let guard = multi.lock().await.unwrap();
                    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                    // Not atomic: a second holder would lose an update.
                    let seen = counter.load(Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    tokio::time::sleep(ms(1)).await;
                    counter.store(seen + 1, Ordering::SeqCst);
                    inside.fetch_sub(1, Ordering::SeqCst);
                    guard.unlock().await.unwrap();
                }
            })
        })
        .collect();
    tokio::time::timeout(DEADLOCK, join_tasks(tasks))
        .await
        .expect("contenders deadlocked");
    assert_eq!(counter.load(Ordering::SeqCst), TASKS as u64 * ROUNDS);
    assert_none_held(
        &[(&server, "p"), (&server, "q"), (&server, "r")],
        "all rounds",
    );
    for c in &clients {
        assert_eq!(c.local_state(), LocalState::default());
    }
}

/// Two tasks, one locking [a, b] and the other [b, a], 50 times each.
async fn opposite_orders(first: [ReentrantLock; 2], second: [ReentrantLock; 2]) {
    let run = |multi: MultiLock, inside: Arc<AtomicUsize>| {
        tokio::spawn(async move {
            for _ in 0..50 {
                let guard = multi.lock().await.unwrap();
                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                tokio::task::yield_now().await;
                inside.fetch_sub(1, Ordering::SeqCst);
                guard.unlock().await.unwrap();
            }
        })
    };
    let inside = Arc::new(AtomicUsize::new(0));
    let tasks = vec![
        run(MultiLock::new(first), inside.clone()),
        run(MultiLock::new(second), inside),
    ];
    tokio::time::timeout(DEADLOCK, join_tasks(tasks))
        .await
        .expect("opposite argument orders deadlocked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opposite_orders_do_not_deadlock() {
    let server = RedisServer::start();
    let (c1, c2) = (client(&server).await, client(&server).await);
    opposite_orders([c1.lock("a"), c1.lock("b")], [c2.lock("b"), c2.lock("a")]).await;
    assert_none_held(&[(&server, "a"), (&server, "b")], "both runs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opposite_orders_across_two_servers_do_not_deadlock() {
    let (s1, s2) = (RedisServer::start(), RedisServer::start());
    let (c1, c2) = (client(&s1).await, client(&s2).await);
    opposite_orders([c1.lock("a"), c2.lock("b")], [c2.lock("b"), c1.lock("a")]).await;
    assert_none_held(&[(&s1, "a"), (&s2, "b")], "both runs");
}

// ---------------------------------------------------------------------------------------------
// Several servers
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_on_two_servers_are_taken_and_released_together() {
    let (s1, s2) = (RedisServer::start(), RedisServer::start());
    let (c1, c2) = (client(&s1).await, client(&s2).await);
    let multi = c1.multi_lock([c1.lock("left"), c2.lock("right")]);
    let guard = multi.lock().await.unwrap();
    assert!(held(&s1, "left") && held(&s2, "right"));
    // Nothing leaks onto the wrong server.
    assert!(!held(&s1, "right") && !held(&s2, "left"));
    let tokens = guard.fencing_tokens();
    let listed: BTreeSet<&str> = tokens.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(listed, BTreeSet::from(["left", "right"]));
    for (name, token) in &tokens {
        let server = if name == "left" { &s1 } else { &s2 };
        assert_eq!(
            lock_field(server, name, "token"),
            Some(token.to_string()),
            "token of {name}"
        );
        assert!(*token > 0);
    }
    assert_eq!(
        lock_field(&s1, "left", "owner").as_deref(),
        Some(
            multi
                .locks()
                .iter()
                .find(|l| l.name() == "left")
                .unwrap()
                .owner_id()
        )
    );
    // Other owners are shut out of both.
    assert!(client(&s1)
        .await
        .lock("left")
        .try_lock()
        .await
        .unwrap()
        .is_none());
    assert!(client(&s2)
        .await
        .lock("right")
        .try_lock()
        .await
        .unwrap()
        .is_none());
    guard.unlock().await.unwrap();
    assert_none_held(&[(&s1, "left"), (&s2, "right")], "unlock");
    assert_no_local_state(&[&c1, &c2], "unlock");
    // And again: the next tokens are newer.
    let again = multi.lock().await.unwrap();
    for ((_, old), (_, new)) in tokens.iter().zip(again.fencing_tokens()) {
        assert!(new > *old);
    }
    again.unlock().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// Round trips
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncontended_acquire_is_one_script_per_client() {
    let server = RedisServer::start();
    let c = quiet_client(&server).await;
    let multi = c.multi_lock([c.lock("a"), c.lock("b"), c.lock("c")]);
    // Load the scripts first.
    multi.lock().await.unwrap().unlock().await.unwrap();

    let measure = |before: (u64, u64)| {
        (
            server.command_calls("evalsha") - before.0,
            c.stats().scripts_sent - before.1,
        )
    };
    let now = || (server.command_calls("evalsha"), c.stats().scripts_sent);

    let before = now();
    let guard = multi.lock().await.unwrap();
    assert_eq!(measure(before), (1, 1), "lock(): (evalsha, scripts sent)");
    let before = now();
    guard.unlock().await.unwrap();
    assert_eq!(measure(before), (3, 3), "unlock(): one release per lock");

    let before = now();
    let guard = multi
        .lock_with_lease(Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(measure(before), (1, 1), "lock_with_lease()");
    assert!(pttl(&server, "b") <= 30_000);
    let before = now();
    guard.unlock().await.unwrap();
    assert_eq!(measure(before), (3, 3), "unlock() after lock_with_lease()");

    let before = now();
    let guard = multi.try_lock().await.unwrap().unwrap();
    assert_eq!(measure(before), (1, 1), "try_lock()");
    guard.unlock().await.unwrap();
    assert_eq!(c.stats().renewals, 0, "a renewal would spoil the counts");

    // Two clients of one server: one script each.
    let d = quiet_client(&server).await;
    let multi = c.multi_lock([c.lock("a"), d.lock("b"), c.lock("c")]);
    multi.lock().await.unwrap().unlock().await.unwrap();
    let before = (
        server.command_calls("evalsha"),
        c.stats().scripts_sent,
        d.stats().scripts_sent,
    );
    let guard = multi.lock().await.unwrap();
    let after = (
        server.command_calls("evalsha"),
        c.stats().scripts_sent,
        d.stats().scripts_sent,
    );
    // a and c (client c) are not consecutive in canonical order (a, b, c), so c's locks form
    // two runs: three scripts.
    assert_eq!(
        (after.0 - before.0, after.1 - before.1, after.2 - before.2),
        (3, 2, 1)
    );
    guard.unlock().await.unwrap();
}

/// What Redis runs for an uncontended cycle of a multi-lock of three free locks of one client
/// (the crate documents it per operation): the acquire is one script of four commands per lock
/// (as a lock's own acquire, which finds nobody waiting in each lock's registry and says so in
/// its hash), the release one lock release per lock (two commands each: no look for waiting
/// clients, no `PUBLISH`): 1 + 7n commands with the `EVALSHA`s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncontended_cycle_runs_one_plus_seven_commands_per_lock() {
    let server = RedisServer::start();
    let c = quiet_client(&server).await;
    let multi = c.multi_lock([c.lock("a"), c.lock("b"), c.lock("c")]);
    // Warm up: the scripts are loaded, and the lost-notice channel, which the watchdog
    // subscribes in the background once it has a hold, is subscribed before counting.
    let warm = multi.lock().await.unwrap();
    common::lost_notices_subscribed(&server, &c).await;
    warm.unlock().await.unwrap();
    server.cmd(&["CONFIG", "RESETSTAT"]);
    multi.lock().await.unwrap().unlock().await.unwrap();
    let expected = common::command_counts(&[
        ("evalsha", 4),
        ("exists", 3),
        ("incr", 3),
        ("hset", 3),
        ("pexpire", 3),
        ("hmget", 3),
        ("del", 3),
    ]);
    assert_eq!(common::operation_stats(&server), expected);
}

/// A multi-lock's acquire looks in each lock's registry of waiting clients, as a lock's own
/// acquire does, and marks the hash only of a lock that clients may be waiting for: that
/// release then wakes one of them, and a release of a lock nobody waits for does not look.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_lock_marks_only_the_locks_clients_wait_for() {
    let server = RedisServer::start();
    let c = quiet_client(&server).await;
    let waiting = quiet_client(&server).await;
    // A client registered as waiting for "a" (its wake-up came, and it has not asked yet).
    let now_us = redis_now_us(&server);
    server.cmd(&[
        "ZADD",
        &common::keys::lock("a").waiters,
        &now_us.to_string(),
        &common::wake_channel("a", &waiting),
    ]);
    let multi = c.multi_lock([c.lock("a"), c.lock("b")]);
    let guard = multi.lock().await.unwrap();
    let mark = |name: &str| server.cmd(&["HGET", &common::lock_key(name), "w"]);
    assert_eq!(
        mark("a"),
        Value::BulkString(b"1".to_vec()),
        "a is waited for"
    );
    assert_eq!(mark("b"), Value::Nil, "nobody waits for b");
    server.cmd(&["CONFIG", "RESETSTAT"]);
    guard.unlock().await.unwrap();
    let run = common::operation_stats(&server);
    assert_eq!(
        run.get("publish"),
        Some(&1),
        "the waiting client is woken: {run:?}"
    );
}

/// Redis's clock in µs, as the registry of waiting clients keeps it.
fn redis_now_us(server: &RedisServer) -> u64 {
    let Value::Array(time) = server.cmd(&["TIME"]) else {
        panic!("TIME answered otherwise");
    };
    let part = |v: &Value| common::text(v).parse::<u64>().expect("a number");
    part(&time[0]) * 1_000_000 + part(&time[1])
}

// ---------------------------------------------------------------------------------------------
// Leases
// ---------------------------------------------------------------------------------------------

/// `lock_with_lease(500 ms)` on `multi`: every lock's PTTL is within the lease, and once it
/// runs out the guard knows and the locks are free.
async fn check_fixed_lease(multi: &MultiLock, locks: &[(&RedisServer, &str)], clients: &[&Client]) {
    let lease = ms(500);
    let started = Instant::now();
    let guard = multi.lock_with_lease(lease).await.unwrap();
    for (server, name) in locks {
        let left = pttl(server, name);
        assert!(left > 0 && left <= 500, "PTTL of {name} is {left}");
    }
    assert!(!guard.is_lost());
    for client in clients {
        assert_eq!(
            client.local_state().renewed_holds,
            0,
            "a fixed lease is renewed"
        );
    }
    tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("the guard learns its lease ran out");
    let after = started.elapsed();
    assert!(after >= ms(450), "lost after {after:?}");
    assert!(guard.is_lost());
    eventually_none_held(locks, "the lease ran out").await;
    assert!(matches!(
        guard.unlock().await,
        Err(Error::NotOwner | Error::Several(_))
    ));
}

#[tokio::test]
async fn fixed_lease_applies_to_every_lock_and_runs_out() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let multi = c.multi_lock([c.lock("a"), c.lock("b"), c.lock("c")]);
    check_fixed_lease(
        &multi,
        &[(&server, "a"), (&server, "b"), (&server, "c")],
        &[&c],
    )
    .await;
}

#[tokio::test]
async fn fixed_lease_on_two_servers_applies_to_every_lock_and_runs_out() {
    let (s1, s2) = (RedisServer::start(), RedisServer::start());
    let (c1, c2) = (client(&s1).await, client(&s2).await);
    let multi = c1.multi_lock([c1.lock("a"), c2.lock("b"), c1.lock("c")]);
    check_fixed_lease(&multi, &[(&s1, "a"), (&s2, "b"), (&s1, "c")], &[&c1, &c2]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_lease_after_waiting_is_set_once_all_are_held() {
    let server = RedisServer::start();
    // Default watchdog (30 s): a lock taken while waiting would keep that lease if it were not
    // fixed afterwards.
    let (c, other) = (client(&server).await, client(&server).await);
    let held_elsewhere = other.lock("b").lock().await.unwrap();
    let multi = c.multi_lock([c.lock("a"), c.lock("b"), c.lock("c")]);
    // "b" sorts in the middle, so the first lock is taken while the multi-lock waits for it.
    let first = multi.locks()[0].clone();
    assert_ne!(first.name(), "b");
    let waiter = tokio::spawn(async move {
        let guard = multi.lock_with_lease(Duration::from_secs(2)).await;
        (guard, Instant::now())
    });
    eventually("the multi-lock waits for b", SETTLE, || {
        c.stats().contended_waits >= 1
    })
    .await;
    tokio::time::sleep(ms(200)).await;
    // Taken while waiting, with the watchdog's lease.
    assert_held_once_by(&server, first.name(), &first);
    assert!(pttl(&server, first.name()) > 2000);
    held_elsewhere.unlock().await.unwrap();
    let (guard, acquired_at) = waiter.await.unwrap();
    let guard = guard.unwrap();
    for name in ["a", "b", "c"] {
        let left = pttl(&server, name);
        assert!(left > 0 && left <= 2000, "PTTL of {name} is {left}");
    }
    assert_eq!(
        c.local_state().renewed_holds,
        0,
        "fixed leases are not renewed"
    );
    tokio::time::timeout(Duration::from_secs(10), guard.lost())
        .await
        .expect("the guard learns its lease ran out");
    assert!(acquired_at.elapsed() >= ms(1500));
    eventually_none_held(
        &[(&server, "a"), (&server, "b"), (&server, "c")],
        "the fixed lease ran out",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_taken_while_waiting_outlive_a_short_fixed_lease() {
    // The lease is fixed only once everything is held: a lock taken early must not expire
    // while the multi-lock waits (longer than the lease) for another.
    let (s1, s2) = (RedisServer::start(), RedisServer::start());
    let (c1, c2) = (client(&s1).await, client(&s2).await);
    let multi = c1.multi_lock([c1.lock("a"), c2.lock("b")]);
    let (first, last) = (multi.locks()[0].clone(), multi.locks()[1].clone());
    let (first_server, last_server) = if first.client().server() == c1.server() {
        (&s1, &s2)
    } else {
        (&s2, &s1)
    };
    let holder_client = client(last_server).await;
    let holder = holder_client.lock(last.name());
    let held_elsewhere = holder.lock().await.unwrap();
    let lease = ms(300);
    let waiter = {
        let multi = multi.clone();
        tokio::spawn(async move { multi.lock_with_lease(lease).await })
    };
    eventually("the multi-lock waits for the busy lock", SETTLE, || {
        last.client().stats().contended_waits >= 1
    })
    .await;
    // Wait well past the lease while the first lock is held.
    tokio::time::sleep(ms(900)).await;
    assert_eq!(
        lock_field(first_server, first.name(), "owner").as_deref(),
        Some(first.owner_id()),
        "the lock taken first expired while waiting"
    );
    held_elsewhere.unlock().await.unwrap();
    let guard = waiter.await.unwrap().unwrap();
    for (server, lock) in [(first_server, &first), (last_server, &last)] {
        assert_eq!(
            lock_field(server, lock.name(), "owner").as_deref(),
            Some(lock.owner_id())
        );
        let left = pttl(server, lock.name());
        assert!(left > 0 && left <= 300, "PTTL of {} is {left}", lock.name());
    }
    guard.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_keeps_every_lock_without_a_lease() {
    let (s1, s2) = (RedisServer::start(), RedisServer::start());
    let watchdog = ms(300);
    let c1 = client_with_watchdog(&s1, watchdog).await;
    let c2 = client_with_watchdog(&s2, watchdog).await;
    let one = c1.multi_lock([c1.lock("a"), c1.lock("b")]);
    let two = c1.multi_lock([c1.lock("x"), c2.lock("y")]);
    let (g1, g2) = (one.lock().await.unwrap(), two.lock().await.unwrap());
    let locks = [(&s1, "a"), (&s1, "b"), (&s1, "x"), (&s2, "y")];
    tokio::time::sleep(Duration::from_secs(1)).await;
    for (server, name) in locks {
        let left = pttl(server, name);
        assert!(left > 0 && left <= 300, "PTTL of {name} is {left}");
    }
    assert!(!g1.is_lost() && !g2.is_lost());
    assert!(client(&s1)
        .await
        .multi_lock([c1.lock("a")])
        .try_lock()
        .await
        .unwrap()
        .is_none());
    assert!(c1.stats().renewals >= 2 && c2.stats().renewals >= 1);
    g1.unlock().await.unwrap();
    g2.unlock().await.unwrap();
    assert_none_held(&locks, "unlock");
    assert_no_local_state(&[&c1, &c2], "unlock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_lost_while_waiting_for_another_is_taken_again() {
    // The multi-lock takes "a", then waits for "b". Meanwhile "a" is taken from it, and
    // another holder takes and releases it: the guard it returns must not hold that old hold.
    let server = RedisServer::start();
    let (c, other) = (quiet_client(&server).await, client(&server).await);
    let held_elsewhere = other.lock("b").lock().await.unwrap();
    let multi = c.multi_lock([c.lock("b"), c.lock("a")]);
    let first = multi.locks()[0].clone();
    assert_eq!(first.name(), "a");
    let waiter = {
        let multi = multi.clone();
        tokio::spawn(async move { multi.lock().await })
    };
    eventually("the multi-lock waits for b", SETTLE, || {
        c.stats().contended_waits >= 1
    })
    .await;
    assert_held_once_by(&server, "a", &first);
    assert!(other.lock("a").force_unlock().await.unwrap());
    eventually(
        "the multi-lock's client learns that a is lost",
        SETTLE,
        || c.stats().lost_leases >= 1,
    )
    .await;
    let between = other.lock("a").lock().await.unwrap();
    let between_token = between.fencing_token();
    between.unlock().await.unwrap();
    held_elsewhere.unlock().await.unwrap();

    let guard = tokio::time::timeout(DEADLOCK, waiter)
        .await
        .expect("the multi-lock returns once both are free")
        .unwrap()
        .unwrap();
    let tokens = guard.fencing_tokens();
    assert!(
        !guard.is_lost(),
        "the multi-lock returned a lock it knew it had lost: {tokens:?}"
    );
    assert_eq!(tokens[0].0, "a");
    assert!(
        tokens[0].1 > between_token,
        "a's token {} is older than the hold taken in between ({between_token})",
        tokens[0].1
    );
    assert_held_once_by(&server, "a", &first);
    assert_held_once_by(&server, "b", &multi.locks()[1]);
    guard.unlock().await.unwrap();
    assert_none_held(&[(&server, "a"), (&server, "b")], "unlock");
    assert_no_local_state(&[&c, &other], "unlock");
}

// ---------------------------------------------------------------------------------------------
// Failure reports
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn unlock_reports_a_lost_lock_and_releases_the_others() {
    let server = RedisServer::start();
    let (c, other) = (quiet_client(&server).await, client(&server).await);
    let multi = c.multi_lock([c.lock("a"), c.lock("b")]);
    // Each lock in turn is the lost one: the other must be released either way.
    for (lost, kept) in [("a", "b"), ("b", "a")] {
        let guard = multi.lock().await.unwrap();
        assert!(other.lock(lost).force_unlock().await.unwrap());
        let outcome = guard.unlock().await;
        assert!(matches!(outcome, Err(Error::NotOwner)), "{outcome:?}");
        assert!(
            !held(&server, kept),
            "{kept} was not released after {lost} was lost"
        );
    }
    assert_no_local_state(&[&c], "unlocks");
}

#[tokio::test]
async fn unlock_reports_several_lost_locks_and_releases_the_others() {
    let (s1, s2) = (RedisServer::start(), RedisServer::start());
    let (c1, c2) = (quiet_client(&s1).await, quiet_client(&s2).await);
    let multi = c1.multi_lock([c1.lock("a"), c1.lock("b"), c1.lock("c"), c2.lock("d")]);
    let guard = multi.lock().await.unwrap();
    assert!(c1.lock("a").force_unlock().await.unwrap());
    assert!(c2.lock("d").force_unlock().await.unwrap());
    match guard.unlock().await {
        Err(Error::Several(failures)) => {
            assert_eq!(failures.len(), 2, "{failures:?}");
            let failed: BTreeSet<&str> = failures.iter().map(|(n, _)| n.as_str()).collect();
            assert_eq!(failed, BTreeSet::from(["a", "d"]));
            for (name, err) in &failures {
                assert!(matches!(err, Error::NotOwner), "{name}: {err:?}");
            }
        }
        other => panic!("expected Several, got {other:?}"),
    }
    assert_none_held(&[(&s1, "b"), (&s1, "c")], "an unlock with two lost locks");
}

// ---------------------------------------------------------------------------------------------
// Arguments
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_lock_listed_twice_is_acquired_once() {
    let server = RedisServer::start();
    let (c, d) = (client(&server).await, client(&server).await);
    // Two handles (two owners) to one name: the first listed is used.
    let first = c.lock("dup");
    let second = c.lock("dup");
    let multi = c.multi_lock([first.clone(), second.clone()]);
    assert_eq!(multi.locks().len(), 1);
    assert_eq!(multi.locks()[0].owner_id(), first.owner_id());
    let guard = multi.lock().await.unwrap();
    assert_eq!(guard.guards().len(), 1);
    assert_held_once_by(&server, "dup", &first);
    guard.unlock().await.unwrap();
    assert!(!held(&server, "dup"));

    // Clones, and handles of another client of the same server, count as the same lock.
    let multi = c.multi_lock([first.clone(), c.lock("other"), d.lock("dup"), first.clone()]);
    assert_eq!(multi.locks().len(), 2);
    let guard = multi.try_lock().await.unwrap().unwrap();
    assert_eq!(names(&guard), ["dup", "other"]);
    assert_held_once_by(&server, "dup", &first);
    guard.unlock().await.unwrap();
    assert_none_held(&[(&server, "dup"), (&server, "other")], "unlock");

    // The same name with a fixed lease: still one hold.
    let multi = c.multi_lock([second.clone(), second.clone()]);
    let guard = multi.lock_with_lease(Duration::from_secs(5)).await.unwrap();
    assert_held_once_by(&server, "dup", &second);
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn empty_multi_lock_and_bad_durations_are_invalid_arguments() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let invalid = |outcome: Result<Option<MultiLockGuard>>| {
        assert!(
            matches!(outcome, Err(Error::InvalidArgument(_))),
            "{outcome:?}"
        );
    };
    for empty in [
        c.multi_lock(Vec::<ReentrantLock>::new()),
        MultiLock::new(std::iter::empty()),
    ] {
        assert!(empty.locks().is_empty());
        invalid(empty.lock().await.map(Some));
        invalid(
            empty
                .lock_with_lease(Duration::from_secs(1))
                .await
                .map(Some),
        );
        invalid(empty.try_lock().await);
        invalid(empty.try_lock_for(Duration::from_secs(1)).await);
        invalid(
            empty
                .try_lock_with_lease(Duration::ZERO, Duration::from_secs(1))
                .await,
        );
    }

    let s2 = RedisServer::start();
    let c2 = client(&s2).await;
    for multi in [
        c.multi_lock([c.lock("a"), c.lock("b")]),
        c.multi_lock([c.lock("a"), c2.lock("b")]),
    ] {
        for lease in [Duration::ZERO, ms(5), Duration::MAX] {
            invalid(multi.lock_with_lease(lease).await.map(Some));
            invalid(multi.try_lock_with_lease(Duration::ZERO, lease).await);
            invalid(
                multi
                    .try_lock_with_lease(Duration::from_secs(1), lease)
                    .await,
            );
        }
        invalid(multi.try_lock_for(Duration::MAX).await);
        invalid(
            multi
                .try_lock_with_lease(Duration::MAX, Duration::from_secs(1))
                .await,
        );
        assert_none_held(
            &[(&server, "a"), (&server, "b"), (&s2, "b")],
            "refused acquires",
        );
        // A zero wait is valid: "do not wait".
        let guard = multi.try_lock_for(Duration::ZERO).await.unwrap().unwrap();
        guard.unlock().await.unwrap();
    }
}

// ---------------------------------------------------------------------------------------------
// Cancellation
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_lock_while_contended_leaves_nothing_held() {
    let (s1, s2) = (RedisServer::start(), RedisServer::start());
    let (c1, c2) = (client(&s1).await, client(&s2).await);
    let holder_client = client(&s1).await;
    let multi = c1.multi_lock([c1.lock("a"), c1.lock("b"), c2.lock("c")]);
    let locks = [(&s1, "a"), (&s1, "b"), (&s2, "c")];
    // "b" is busy: "a" (and maybe "c", depending on the servers' order) is taken first.
    let holder = holder_client.lock("b");
    let mut asleep_at = None;
    for pendings in 0..40 {
        let held_elsewhere = holder.lock().await.unwrap();
        let outcome = tokio::time::timeout(ms(300), cut_at_await(pendings, multi.lock())).await;
        let what = format!("a multi-lock cut at await point {pendings}");
        match outcome {
            Ok(None) => {}
            Ok(Some(outcome)) => panic!("lock() returned {outcome:?} while b was held"),
            // Asleep, waiting for b: the timeout dropped it there.
            Err(_) => asleep_at = Some(pendings),
        }
        assert_no_local_state(&[&c1, &c2], &what);
        flush(&c1).await;
        flush(&c2).await;
        assert_held_once_by(&s1, "b", &holder);
        held_elsewhere.unlock().await.unwrap();
        flush(&c1).await;
        flush(&c2).await;
        eventually_none_held(&locks, &what).await;
        if asleep_at.is_some() {
            break;
        }
    }
    assert!(asleep_at.is_some(), "lock() never went to sleep");
    // Cut after a while, too.
    for cut in [0, 1, 2, 5, 10, 50] {
        let held_elsewhere = holder.lock().await.unwrap();
        let outcome = tokio::time::timeout(ms(cut), multi.lock()).await;
        assert!(
            outcome.is_err(),
            "lock() returned {outcome:?} while b was held"
        );
        let what = format!("a multi-lock timed out after {cut} ms");
        assert_no_local_state(&[&c1, &c2], &what);
        assert_held_once_by(&s1, "b", &holder);
        held_elsewhere.unlock().await.unwrap();
        flush(&c1).await;
        flush(&c2).await;
        eventually_none_held(&locks, &what).await;
    }
    // Nothing is stuck.
    let guard = multi.try_lock().await.unwrap().expect("all free");
    guard.unlock().await.unwrap();
    println!("asleep at await point {asleep_at:?}");
}

/// Cuts `acquire()` at each of its await points in turn until one completes; after each cut,
/// nothing may stay held.
async fn sweep_uncontended<F, Fut>(acquire: F, locks: &[(&RedisServer, &str)], clients: &[&Client])
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<MultiLockGuard>>,
{
    for pendings in 0..60 {
        let outcome = cut_at_await(pendings, acquire()).await;
        let what = format!("an uncontended multi-lock cut at await point {pendings}");
        if let Some(outcome) = outcome {
            let guard = outcome.unwrap();
            assert!(held_among(locks).len() == locks.len());
            guard.unlock().await.unwrap();
            assert_none_held(locks, "unlock");
            println!("completed after {pendings} pending polls");
            return;
        }
        assert_no_local_state(clients, &what);
        for client in clients {
            flush(client).await;
        }
        eventually_none_held(locks, &what).await;
    }
    panic!("the acquire never completed");
}

/// Cuts `acquire()` after 0, 25, 50, ... µs until it completed several times in a row (or
/// 20 ms passed); after each cut, nothing may stay held. A request is often on the wire then.
async fn sweep_uncontended_timed<F, Fut>(
    acquire: F,
    locks: &[(&RedisServer, &str)],
    clients: &[&Client],
) where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<MultiLockGuard>>,
{
    let (mut cut, mut cuts, mut completed_in_a_row) = (Duration::ZERO, 0, 0);
    while completed_in_a_row < 5 && cut < ms(20) {
        match cut_after(cut, acquire()).await {
            Some(outcome) => {
                completed_in_a_row += 1;
                outcome.unwrap().unlock().await.unwrap();
            }
            None => {
                completed_in_a_row = 0;
                cuts += 1;
            }
        }
        let what = format!("an uncontended multi-lock cut after {cut:?}");
        assert_no_local_state(clients, &what);
        for client in clients {
            flush(client).await;
        }
        eventually_none_held(locks, &what).await;
        cut += Duration::from_micros(25);
    }
    assert!(cuts > 0, "no acquire was cut");
    println!("{cuts} timed cuts, up to {cut:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_lock_while_free_leaves_nothing_held() {
    let (s1, s2) = (RedisServer::start(), RedisServer::start());
    let (c1, c2) = (client(&s1).await, client(&s2).await);
    let one = c1.multi_lock([c1.lock("a"), c1.lock("b")]);
    sweep_uncontended(|| one.lock(), &[(&s1, "a"), (&s1, "b")], &[&c1]).await;
    sweep_uncontended(
        || one.lock_with_lease(Duration::from_secs(30)),
        &[(&s1, "a"), (&s1, "b")],
        &[&c1],
    )
    .await;
    let two = c1.multi_lock([c1.lock("a"), c2.lock("c"), c1.lock("b")]);
    let locks = [(&s1, "a"), (&s1, "b"), (&s2, "c")];
    sweep_uncontended(|| two.lock(), &locks, &[&c1, &c2]).await;
    // With a fixed lease, also cut while the leases are being fixed.
    sweep_uncontended(
        || two.lock_with_lease(Duration::from_secs(30)),
        &locks,
        &[&c1, &c2],
    )
    .await;
    sweep_uncontended_timed(|| one.lock(), &[(&s1, "a"), (&s1, "b")], &[&c1]).await;
    sweep_uncontended_timed(|| two.lock(), &locks, &[&c1, &c2]).await;
    sweep_uncontended_timed(
        || two.lock_with_lease(Duration::from_secs(30)),
        &locks,
        &[&c1, &c2],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_guard_releases_everything_in_the_background() {
    let (s1, s2) = (RedisServer::start(), RedisServer::start());
    let (c1, c2) = (client(&s1).await, client(&s2).await);
    let multi = c1.multi_lock([c1.lock("a"), c1.lock("b"), c2.lock("c")]);
    let locks = [(&s1, "a"), (&s1, "b"), (&s2, "c")];
    let guard = multi.lock().await.unwrap();
    assert_eq!(held_among(&locks).len(), 3);
    drop(guard);
    assert_no_local_state(&[&c1, &c2], "a dropped guard");
    eventually_none_held(&locks, "a dropped guard").await;
    let guard = multi.try_lock().await.unwrap().expect("free again");
    guard.unlock().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// Redlock
// ---------------------------------------------------------------------------------------------

/// `n` servers, a client with a 500 ms command timeout on each, and a Redlock over one lock
/// `name` per client.
async fn redlock_setup(n: usize, name: &str) -> (Vec<RedisServer>, Vec<Client>, Redlock) {
    let servers: Vec<RedisServer> = (0..n).map(|_| RedisServer::start()).collect();
    let mut clients = Vec::new();
    for server in &servers {
        clients.push(impatient_client(server).await);
    }
    let redlock = Redlock::new(clients.iter().map(|c| c.lock(name)));
    (servers, clients, redlock)
}

fn check_validity(guard: &RedlockGuard, lease: Duration) {
    let validity = guard.validity();
    assert!(
        validity > Duration::ZERO && validity <= lease,
        "validity {validity:?} for a lease of {lease:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_succeeds_with_one_of_three_servers_down() {
    let (mut servers, clients, redlock) = redlock_setup(3, "r").await;
    assert_eq!(redlock.quorum(), 2);
    let lease = Duration::from_secs(10);
    // All up first.
    let guard = redlock.lock_with_lease(lease).await.unwrap();
    assert_eq!(guard.servers_held(), 3);
    check_validity(&guard, lease);
    for server in &servers {
        let left = pttl(server, "r");
        assert!(left > 0 && left <= 10_000, "PTTL {left}");
    }
    guard.unlock().await.unwrap();
    assert!(servers.iter().all(|s| !held(s, "r")));

    servers[1].stop();
    let guard = redlock
        .try_lock_with_lease(Duration::ZERO, lease)
        .await
        .unwrap()
        .expect("a majority is up");
    assert_eq!(guard.servers_held(), 2);
    check_validity(&guard, lease);
    assert!(!guard.is_lost());
    let granted: BTreeSet<String> = guard.fencing_tokens().into_iter().map(|(s, _)| s).collect();
    let expected: BTreeSet<String> = [&clients[0], &clients[2]]
        .iter()
        .map(|c| c.server().to_owned())
        .collect();
    assert_eq!(granted, expected);
    assert!(held(&servers[0], "r") && held(&servers[2], "r"));
    // Another owner cannot get a majority meanwhile.
    let rival = Redlock::new(clients.iter().map(|c| c.lock("r")));
    assert!(rival
        .try_lock_with_lease(Duration::ZERO, lease)
        .await
        .unwrap()
        .is_none());
    guard.unlock().await.unwrap();
    assert!(!held(&servers[0], "r") && !held(&servers[2], "r"));

    // The unbounded acquire succeeds as well.
    let guard = redlock.lock_with_lease(lease).await.unwrap();
    assert_eq!(guard.servers_held(), 2);
    check_validity(&guard, lease);
    guard.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_succeeds_with_one_of_five_servers_down() {
    let (mut servers, _clients, redlock) = redlock_setup(5, "r5").await;
    assert_eq!(redlock.quorum(), 3);
    servers[3].stop();
    let lease = Duration::from_secs(10);
    let guard = redlock
        .try_lock_with_lease(Duration::ZERO, lease)
        .await
        .unwrap()
        .expect("four of five are up");
    assert_eq!(guard.servers_held(), 4);
    assert_eq!(guard.fencing_tokens().len(), 4);
    check_validity(&guard, lease);
    guard.unlock().await.unwrap();
    for (i, server) in servers.iter().enumerate() {
        if i != 3 {
            assert!(!held(server, "r5"));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_fails_when_a_majority_is_held_elsewhere_and_gives_its_grant_back() {
    let (servers, clients, redlock) = redlock_setup(3, "taken").await;
    let lease = Duration::from_secs(10);
    // Other owners hold the lock on servers 0 and 1.
    let holders: Vec<ReentrantLock> = clients[..2].iter().map(|c| c.lock("taken")).collect();
    let mut held_elsewhere = Vec::new();
    for holder in &holders {
        held_elsewhere.push(holder.lock().await.unwrap());
    }
    assert!(redlock
        .try_lock_with_lease(Duration::ZERO, lease)
        .await
        .unwrap()
        .is_none());
    // Given back before it returned: checked at once.
    assert!(
        !held(&servers[2], "taken"),
        "the grant of the free server was kept"
    );
    let started = Instant::now();
    assert!(redlock
        .try_lock_with_lease(ms(300), lease)
        .await
        .unwrap()
        .is_none());
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(
        !held(&servers[2], "taken"),
        "the grant of the free server was kept"
    );
    for (i, holder) in holders.iter().enumerate() {
        assert_held_once_by(&servers[i], "taken", holder);
    }
    // One holder gives up: now a majority is possible.
    held_elsewhere.pop().unwrap().unlock().await.unwrap();
    let guard = redlock
        .try_lock_with_lease(Duration::ZERO, lease)
        .await
        .unwrap()
        .expect("servers 1 and 2 are free");
    assert_eq!(guard.servers_held(), 2);
    check_validity(&guard, lease);
    guard.unlock().await.unwrap();
    assert!(!held(&servers[1], "taken") && !held(&servers[2], "taken"));
    assert_held_once_by(&servers[0], "taken", &holders[0]);
}

#[tokio::test]
async fn redlock_unlock_reports_lost_grants_and_releases_the_rest() {
    let (servers, clients, redlock) = redlock_setup(3, "forced").await;
    let guard = redlock
        .lock_with_lease(Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(guard.servers_held(), 3);
    assert!(clients[0].lock("forced").force_unlock().await.unwrap());
    assert!(clients[2].lock("forced").force_unlock().await.unwrap());
    match guard.unlock().await {
        Err(Error::Several(failures)) => {
            assert_eq!(failures.len(), 2, "{failures:?}");
            for (part, err) in &failures {
                assert!(matches!(err, Error::NotOwner), "{part}: {err:?}");
            }
            // Failures are named by server: the lock's name is the same on every one.
            let mut named: Vec<&str> = failures.iter().map(|(part, _)| part.as_str()).collect();
            named.sort_unstable();
            let mut expected = vec![clients[0].server(), clients[2].server()];
            expected.sort_unstable();
            assert_eq!(named, expected);
        }
        other => panic!("expected Several, got {other:?}"),
    }
    assert!(
        !held(&servers[1], "forced"),
        "the grant still ours was not released"
    );

    let guard = redlock
        .lock_with_lease(Duration::from_secs(10))
        .await
        .unwrap();
    assert!(clients[1].lock("forced").force_unlock().await.unwrap());
    let outcome = guard.unlock().await;
    assert!(matches!(outcome, Err(Error::NotOwner)), "{outcome:?}");
    assert!(!held(&servers[0], "forced") && !held(&servers[2], "forced"));
}

/// A Redlock over `n` servers of which `down` are stopped (or paused): even the unbounded
/// acquire fails, within a few command timeouts, with each failed server's error.
async fn redlock_without_a_majority(n: usize, down: usize, pause: bool) {
    let (mut servers, _clients, redlock) = redlock_setup(n, "gone").await;
    for server in &mut servers[..down] {
        if pause {
            server.pause();
        } else {
            server.stop();
        }
    }
    let started = Instant::now();
    let outcome = tokio::time::timeout(
        Duration::from_secs(30),
        redlock.lock_with_lease(Duration::from_secs(10)),
    )
    .await
    .expect("a Redlock without a majority hangs");
    let took = started.elapsed();
    match outcome {
        Err(Error::Several(failures)) => {
            assert_eq!(failures.len(), down, "{failures:?}");
            for (server, err) in &failures {
                assert!(
                    matches!(err, Error::Redis(_) | Error::Timeout),
                    "{server}: {err:?}"
                );
            }
        }
        other => panic!(
            "expected Several, got {:?}",
            other.map(|g| g.servers_held())
        ),
    }
    // 500 ms command timeout.
    assert!(took < ms(2500), "failed after {took:?}");
    for server in &servers[down..] {
        assert!(!held(server, "gone"), "a grant of a live server was kept");
    }
    // The bounded acquire fails the same way.
    let outcome = redlock
        .try_lock_with_lease(Duration::from_secs(5), Duration::from_secs(10))
        .await;
    assert!(
        matches!(outcome, Err(Error::Several(_))),
        "{:?}",
        outcome.map(|g| g.is_some())
    );
    if pause {
        for server in &servers[..down] {
            server.resume();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_with_a_majority_of_servers_down_fails_promptly() {
    redlock_without_a_majority(3, 2, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_with_three_of_five_servers_down_fails_promptly() {
    redlock_without_a_majority(5, 3, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_with_a_majority_of_servers_paused_fails_promptly() {
    redlock_without_a_majority(3, 2, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_validity_runs_out_with_the_lease() {
    let (servers, _clients, redlock) = redlock_setup(3, "short").await;
    let lease = ms(400);
    let guard = redlock.lock_with_lease(lease).await.unwrap();
    check_validity(&guard, lease);
    for server in &servers {
        let left = pttl(server, "short");
        assert!(left > 0 && left <= 400, "PTTL {left}");
    }
    tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("lost once the validity runs out");
    assert!(guard.is_lost());
    assert_eq!(guard.validity(), Duration::ZERO);
    eventually("every server frees the lock", SETTLE, || {
        servers.iter().all(|s| !held(s, "short"))
    })
    .await;
}

#[tokio::test]
async fn redlock_bad_arguments_are_invalid() {
    let empty = Redlock::new(Vec::new());
    assert!(matches!(
        empty.lock_with_lease(Duration::from_secs(1)).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        empty
            .try_lock_with_lease(Duration::ZERO, Duration::from_secs(1))
            .await,
        Err(Error::InvalidArgument(_))
    ));
    let (servers, _clients, redlock) = redlock_setup(1, "bad").await;
    assert_eq!(redlock.quorum(), 1);
    for lease in [Duration::ZERO, ms(5), Duration::MAX] {
        assert!(matches!(
            redlock.lock_with_lease(lease).await,
            Err(Error::InvalidArgument(_))
        ));
    }
    assert!(matches!(
        redlock
            .try_lock_with_lease(Duration::MAX, Duration::from_secs(1))
            .await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(!held(&servers[0], "bad"));
}

/// Fails unless both acquires of `redlock` are `InvalidArgument` naming `server`.
async fn assert_refused_as_duplicate(redlock: &Redlock, server: &str) {
    // Named without its database: databases of one server are one server.
    let server = server
        .rsplit_once('/')
        .map_or(server, |(address, _)| address);
    let lease = Duration::from_secs(10);
    let outcomes = [
        redlock
            .lock_with_lease(lease)
            .await
            .map(|g| g.servers_held()),
        redlock
            .try_lock_with_lease(Duration::ZERO, lease)
            .await
            .map(|g| g.map_or(0, |g| g.servers_held())),
    ];
    for outcome in outcomes {
        match outcome {
            Err(Error::InvalidArgument(message)) => {
                assert!(message.contains(server), "{message:?} names not {server}")
            }
            other => panic!("expected InvalidArgument naming {server}, got {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_counts_a_server_listed_twice_once_and_refuses_it() {
    let (s0, mut s1) = (RedisServer::start(), RedisServer::start());
    let (c0, c1) = (impatient_client(&s0).await, impatient_client(&s1).await);
    let twice = c0.lock("dup");
    let redlock = Redlock::new([twice.clone(), twice, c1.lock("dup")]);
    assert_eq!(redlock.quorum(), 2, "two servers");
    assert_refused_as_duplicate(&redlock, c0.server()).await;
    // With the other server down, server 0 alone is no majority, however often it is listed.
    s1.stop();
    assert_refused_as_duplicate(&redlock, c0.server()).await;
    assert!(!held(&s0, "dup"), "server 0 was asked");
    assert_no_local_state(&[&c0, &c1], "a refused redlock");
}

#[tokio::test]
async fn redlock_takes_clones_and_clients_of_one_server_for_one_server() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    // Another database of the same server fails with it: one server too.
    let other_db = Client::connect(format!("redis://127.0.0.1:{}/1", server.port()))
        .await
        .expect("connect to db 1");
    let lock = a.lock("one");
    let cases = [
        (
            "clones of one handle",
            Redlock::new([lock.clone(), lock.clone()]),
        ),
        (
            "two clients of one url",
            Redlock::new([lock, b.lock("one")]),
        ),
        (
            "two names on one server",
            Redlock::new([a.lock("x"), a.lock("y")]),
        ),
        (
            "two databases of one server",
            Redlock::new([a.lock("x"), other_db.lock("x")]),
        ),
    ];
    for (what, redlock) in &cases {
        assert_eq!(redlock.quorum(), 1, "{what}: one server");
        assert_refused_as_duplicate(redlock, a.server()).await;
    }
    assert!(!held(&server, "one") && !held(&server, "x") && !held(&server, "y"));
    // Each server once is fine.
    let single = Redlock::new([b.lock("one")]);
    single
        .try_lock_with_lease(Duration::ZERO, Duration::from_secs(10))
        .await
        .unwrap()
        .expect("free")
        .unlock()
        .await
        .unwrap();
}

/// A try-lock that finds one lock busy gives up after its one script: it does not take the
/// free locks one by one only to give them back (which would refuse other callers meanwhile).
#[tokio::test]
async fn a_failed_try_lock_sends_one_script_and_takes_nothing() {
    let server = RedisServer::start();
    let c = quiet_client(&server).await;
    let holder = c.lock("c").lock().await.expect("hold c");
    let multi = c.multi_lock([c.lock("a"), c.lock("b"), c.lock("c")]);
    let before = c.stats().scripts_sent;
    let acquires_before = c.stats().acquires;
    assert!(multi.try_lock().await.expect("try_lock").is_none());
    assert!(multi
        .try_lock_for(Duration::ZERO)
        .await
        .expect("try_lock_for(0)")
        .is_none());
    assert_eq!(c.stats().scripts_sent - before, 2, "one script per try");
    assert_eq!(c.stats().acquires, acquires_before, "nothing was taken");
    assert!(!held(&server, "a") && !held(&server, "b"));
    holder.unlock().await.expect("unlock");
}
