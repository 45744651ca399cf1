//! Semaphore and ExpirableSemaphore against a real redis-server: the permit arithmetic,
//! wake-ups across clients, multi-permit waits gathered from single releases, timed waits,
//! eight clients of eight tasks on three permits, lease expiry, the watchdog, shutdown and
//! crashed holders, `release_by_id`, a cancellation sweep and bad input.
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
    assert_idle, assert_invalid, assert_wrong_type, client, client_with_watchdog, cut_after,
    cut_at_await, eventually, exists, int, join_all, keys, ms, strings, text, zcard,
};
use redis::Value;
use redisync::prelude::*;
use redisync::LocalState;
use redisync_test_harness::{wait_until, ChaosProxy, RedisServer};
use tokio::task::JoinHandle;

/// How long a condition that should hold "soon" may take before the test fails.
const SETTLE: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------------
// Redis names under the default prefix, and server-side inspection.

fn sem_key(name: &str) -> String {
    keys::semaphore(name).permits
}

/// The start of the classic semaphore's wake-up channels: each waiting client listens on
/// its own, this followed by its id.
fn sem_channel(name: &str) -> String {
    keys::semaphore(name).wake_channels.prefix().to_owned()
}

/// The classic semaphore's registry of waiting clients.
fn waiters_key(name: &str) -> String {
    keys::semaphore(name).waiters
}

fn generation_key(name: &str) -> String {
    keys::semaphore(name).generation
}

fn attempt_key(name: &str, attempt: &str) -> String {
    keys::semaphore(name).attempt_records.of(attempt)
}

/// The classic semaphore's attempt records of `name` that say their permits are out.
fn granted_records(server: &RedisServer, name: &str) -> Vec<String> {
    let keys = server.cmd(&["KEYS", &attempt_key(name, "*")]);
    redis::from_redis_value_ref::<Vec<String>>(&keys)
        .unwrap()
        .into_iter()
        .filter(|key| match server.cmd(&["GET", key]) {
            Value::Nil => false,
            state => redis::from_redis_value_ref::<String>(&state)
                .unwrap()
                .starts_with("granted"),
        })
        .collect()
}

/// A classic semaphore script, with the preludes the crate puts before it.
fn classic_script(source: &str) -> redis::Script {
    redis::Script::new(&format!(
        "{}{}{}{}{source}",
        include_str!("../../lua/publish_prelude.lua"),
        include_str!("../../lua/wake_prelude.lua"),
        include_str!("../../lua/semaphore_wake_prelude.lua"),
        include_str!("../../lua/semaphore_prelude.lua")
    ))
}

fn xsem_key(name: &str) -> String {
    keys::expirable(name).permits
}

fn leases_key(name: &str) -> String {
    keys::expirable(name).leases
}

/// The start of the expirable semaphore's wake-up channels (see [`sem_channel`]).
fn xsem_channel(name: &str) -> String {
    keys::expirable(name).wake_channels.prefix().to_owned()
}

/// Subscribers of the wake-up channels starting with `prefix`, whichever client's.
fn wake_subscribers(server: &RedisServer, prefix: &str) -> u64 {
    let channels = server.cmd(&["PUBSUB", "CHANNELS", &format!("{prefix}*")]);
    redis::from_redis_value_ref::<Vec<String>>(&channels)
        .unwrap()
        .iter()
        .map(|channel| server.numsub(channel))
        .sum()
}

/// The raw counter under `key`, `None` if the key does not exist.
fn raw_count(server: &RedisServer, key: &str) -> Option<i64> {
    match server.cmd(&["GET", key]) {
        Value::Nil => None,
        value => Some(
            redis::from_redis_value_ref::<String>(&value)
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| panic!("GET {key}: not a counter: {value:?}")),
        ),
    }
}

/// Redis's clock in milliseconds.
fn server_now_ms(server: &RedisServer) -> i64 {
    let value = server.cmd(&["TIME"]);
    let parts = redis::from_redis_value_ref::<Vec<String>>(&value)
        .unwrap_or_else(|e| panic!("TIME: unexpected reply {value:?}: {e}"));
    parts[0].parse::<i64>().unwrap() * 1000 + parts[1].parse::<i64>().unwrap() / 1000
}

fn zscore(server: &RedisServer, key: &str, member: &str) -> Option<i64> {
    match server.cmd(&["ZSCORE", key, member]) {
        Value::Nil => None,
        value => Some(
            redis::from_redis_value_ref::<String>(&value)
                .ok()
                .and_then(|s| s.parse::<f64>().ok())
                .unwrap_or_else(|| panic!("ZSCORE: unexpected reply {value:?}")) as i64,
        ),
    }
}

// ---------------------------------------------------------------------------------------------
// Both kinds behind one face, for the tests that run on each.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Classic,
    Expirable,
}

impl Kind {
    fn handle(self, client: &Client, name: &str) -> AnySem {
        match self {
            Kind::Classic => AnySem::Classic(client.semaphore(name)),
            Kind::Expirable => AnySem::Expirable(client.expirable_semaphore(name)),
        }
    }

    fn key(self, name: &str) -> String {
        match self {
            Kind::Classic => sem_key(name),
            Kind::Expirable => xsem_key(name),
        }
    }

    fn channel(self, name: &str) -> String {
        match self {
            Kind::Classic => sem_channel(name),
            Kind::Expirable => xsem_channel(name),
        }
    }

    /// The registry of waiting clients.
    fn waiters(self, name: &str) -> String {
        match self {
            Kind::Classic => waiters_key(name),
            Kind::Expirable => keys::expirable(name).waiters,
        }
    }

    /// Leased permits on the server (always 0 for the classic kind).
    fn leases(self, server: &RedisServer, name: &str) -> i64 {
        match self {
            Kind::Classic => 0,
            Kind::Expirable => zcard(server, &leases_key(name)),
        }
    }
}

#[derive(Clone)]
enum AnySem {
    Classic(Semaphore),
    Expirable(ExpirableSemaphore),
}

#[derive(Debug)]
enum AnyPermit {
    Classic(SemaphorePermit),
    Expirable(ExpirablePermit),
}

/// Which acquire call to make.
#[derive(Clone, Copy, Debug)]
enum Call {
    /// `acquire()`.
    One,
    /// `acquire_many(n)` (classic only).
    Many(u64),
    /// `acquire_with_lease(lease)` (expirable only).
    Leased(Duration),
}

impl Call {
    fn permits(self) -> usize {
        match self {
            Call::Many(n) => n as usize,
            Call::One | Call::Leased(_) => 1,
        }
    }
}

impl AnySem {
    fn name(&self) -> &str {
        match self {
            AnySem::Classic(s) => s.name(),
            AnySem::Expirable(s) => s.name(),
        }
    }

    async fn try_set_permits(&self, n: u64) -> Result<bool> {
        match self {
            AnySem::Classic(s) => s.try_set_permits(n).await,
            AnySem::Expirable(s) => s.try_set_permits(n).await,
        }
    }

    async fn available_permits(&self) -> Result<i64> {
        match self {
            AnySem::Classic(s) => s.available_permits().await,
            AnySem::Expirable(s) => s.available_permits().await,
        }
    }

    fn call(&self, call: Call) -> impl Future<Output = Result<AnyPermit>> + Send + 'static {
        let sem = self.clone();
        async move {
            match (sem, call) {
                (AnySem::Classic(s), Call::One) => s.acquire().await.map(AnyPermit::Classic),
                (AnySem::Classic(s), Call::Many(n)) => {
                    s.acquire_many(n).await.map(AnyPermit::Classic)
                }
                (AnySem::Expirable(s), Call::One) => s.acquire().await.map(AnyPermit::Expirable),
                (AnySem::Expirable(s), Call::Leased(lease)) => {
                    s.acquire_with_lease(lease).await.map(AnyPermit::Expirable)
                }
                (_, call) => panic!("{call:?} does not apply to this kind"),
            }
        }
    }

    async fn acquire(&self) -> Result<AnyPermit> {
        self.call(Call::One).await
    }

    async fn try_acquire(&self) -> Result<Option<AnyPermit>> {
        match self {
            AnySem::Classic(s) => Ok(s.try_acquire().await?.map(AnyPermit::Classic)),
            AnySem::Expirable(s) => Ok(s.try_acquire().await?.map(AnyPermit::Expirable)),
        }
    }
}

impl AnyPermit {
    async fn release(self) -> Result<()> {
        match self {
            AnyPermit::Classic(p) => p.release().await,
            AnyPermit::Expirable(p) => p.release().await,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 1. The arithmetic.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permit_arithmetic_follows_the_contract() {
    let server = RedisServer::start();
    let c = client(&server).await;

    // set 10 → acquire 10 → add 4 → release the 10 → acquire 5 = 9 left.
    let name = "arith";
    let sem = c.semaphore(name);
    assert!(sem.try_set_permits(10).await.unwrap());
    assert_eq!(sem.available_permits().await.unwrap(), 10);
    // Only initialises: a second call changes nothing.
    assert!(!sem.try_set_permits(3).await.unwrap());
    assert!(!sem.try_set_permits(0).await.unwrap());
    assert_eq!(sem.available_permits().await.unwrap(), 10);
    let ten = sem.acquire_many(10).await.unwrap();
    assert_eq!(ten.count(), 10);
    assert_eq!(sem.available_permits().await.unwrap(), 0);
    assert!(sem.try_acquire().await.unwrap().is_none());
    sem.add_permits(4).await.unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), 4);
    assert!(sem.try_acquire_many(5).await.unwrap().is_none());
    ten.release().await.unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), 14);
    let five = sem.acquire_many(5).await.unwrap();
    assert_eq!(five.count(), 5);
    assert_eq!(sem.available_permits().await.unwrap(), 9);
    assert_eq!(raw_count(&server, &sem_key(name)), Some(9));
    assert!(!sem.try_set_permits(100).await.unwrap());
    assert_eq!(sem.available_permits().await.unwrap(), 9);
    five.release().await.unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), 14);

    // Negatives: below zero, and an acquire waits until additions bring it back up.
    let name = "negative";
    let sem = c.semaphore(name);
    assert!(sem.try_set_permits(3).await.unwrap());
    sem.add_permits(-5).await.unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), -2);
    assert!(sem.try_acquire().await.unwrap().is_none());
    let waiter = {
        let other = client(&server).await;
        let sem = other.semaphore(name);
        tokio::spawn(async move {
            let permit = sem.acquire().await.unwrap();
            (other, permit)
        })
    };
    eventually("the acquire waits", SETTLE, || {
        wake_subscribers(&server, &sem_channel(name)) == 1
    })
    .await;
    sem.add_permits(2).await.unwrap(); // back to 0: still nothing to take
    assert_eq!(sem.available_permits().await.unwrap(), 0);
    tokio::time::sleep(ms(300)).await;
    assert!(!waiter.is_finished(), "acquired from a count of 0");
    assert_eq!(sem.available_permits().await.unwrap(), 0);
    sem.add_permits(1).await.unwrap();
    let (other, permit) = tokio::time::timeout(SETTLE, waiter)
        .await
        .expect("the waiter gets the permit added")
        .unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), 0);
    permit.release().await.unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), 1);
    eventually("the waiter unsubscribed", SETTLE, || {
        wake_subscribers(&server, &sem_channel(name)) == 0
    })
    .await;
    assert_idle(&[&other]);

    // Drain returns what was available and leaves 0.
    let name = "drain";
    let sem = c.semaphore(name);
    assert_eq!(sem.drain_permits().await.unwrap(), 0); // missing
    assert!(!exists(&server, &sem_key(name)));
    assert!(sem.try_set_permits(7).await.unwrap());
    let two = sem.acquire_many(2).await.unwrap();
    assert_eq!(sem.drain_permits().await.unwrap(), 5);
    assert_eq!(sem.available_permits().await.unwrap(), 0);
    assert_eq!(sem.drain_permits().await.unwrap(), 0);
    two.release().await.unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), 2);
    // A negative count is left alone.
    sem.add_permits(-5).await.unwrap();
    assert_eq!(sem.drain_permits().await.unwrap(), 0);
    assert_eq!(sem.available_permits().await.unwrap(), -3);
    assert_eq!(raw_count(&server, &sem_key(name)), Some(-3));

    // release(n) on an uninitialised semaphore creates the permits (a producer signals).
    let name = "signal";
    let sem = c.semaphore(name);
    sem.release(3).await.unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), 3);
    assert!(!sem.try_set_permits(10).await.unwrap());
    assert_eq!(sem.available_permits().await.unwrap(), 3);
    let consumer = c.semaphore(name).acquire_many(3).await.unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), 0);
    consumer.forget();
    sem.release(1).await.unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), 1);

    // A missing semaphore reports 0 and gives nothing, and no call creates it.
    let name = "missing";
    let sem = c.semaphore(name);
    assert_eq!(sem.available_permits().await.unwrap(), 0);
    assert!(sem.try_acquire().await.unwrap().is_none());
    assert!(sem.try_acquire_many(2).await.unwrap().is_none());
    assert!(sem.try_acquire_for(ms(50)).await.unwrap().is_none());
    assert!(!exists(&server, &sem_key(name)));
    let xsem = c.expirable_semaphore(name);
    assert_eq!(xsem.available_permits().await.unwrap(), 0);
    assert!(xsem.try_acquire().await.unwrap().is_none());
    assert!(xsem
        .try_acquire_with_lease(Duration::ZERO, ms(500))
        .await
        .unwrap()
        .is_none());
    assert!(!xsem.release_by_id("no-such-permit").await.unwrap());
    assert_eq!(xsem.available_permits().await.unwrap(), 0);
    assert!(!exists(&server, &xsem_key(name)));
    assert!(!exists(&server, &leases_key(name)));

    // forget() keeps the permits taken, for good.
    let name = "forget";
    let sem = c.semaphore(name);
    assert!(sem.try_set_permits(3).await.unwrap());
    let kept = sem.acquire_many(2).await.unwrap();
    kept.forget();
    // A permit dropped after the forgotten one is given back: once that release has run, a
    // release of the forgotten permits would have run too, had one been sent.
    drop(sem.acquire().await.unwrap());
    eventually("the dropped permit is back", SETTLE, || {
        raw_count(&server, &sem_key(name)) == Some(1)
    })
    .await;
    tokio::time::sleep(ms(200)).await;
    assert_eq!(sem.available_permits().await.unwrap(), 1);
    sem.release(2).await.unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), 3);

    // delete removes the count; the semaphore is then uninitialised again.
    assert!(sem.delete().await.unwrap());
    assert!(!sem.delete().await.unwrap());
    assert_eq!(sem.available_permits().await.unwrap(), 0);
    assert!(sem.try_set_permits(1).await.unwrap());
    assert_eq!(sem.available_permits().await.unwrap(), 1);

    assert_idle(&[&c]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expirable_permit_arithmetic_follows_the_contract() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let name = "x-arith";
    let sem = c.expirable_semaphore(name);
    assert!(sem.try_set_permits(3).await.unwrap());
    assert!(!sem.try_set_permits(9).await.unwrap());
    assert_eq!(sem.available_permits().await.unwrap(), 3);
    let a = sem.acquire().await.unwrap();
    let b = sem
        .acquire_with_lease(Duration::from_secs(60))
        .await
        .unwrap();
    assert_ne!(a.id(), b.id());
    assert_eq!(sem.available_permits().await.unwrap(), 1);
    assert_eq!(zcard(&server, &leases_key(name)), 2);
    // The count goes below zero, and comes back.
    sem.add_permits(-3).await.unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), -2);
    assert!(sem.try_acquire().await.unwrap().is_none());
    a.release().await.unwrap();
    b.release().await.unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), 0);
    assert!(sem.try_acquire().await.unwrap().is_none());
    sem.add_permits(3).await.unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), 3);
    assert_eq!(raw_count(&server, &xsem_key(name)), Some(3));
    assert_eq!(zcard(&server, &leases_key(name)), 0);
    // delete removes the pool and the leases.
    let held = sem.acquire().await.unwrap();
    assert!(sem.delete().await.unwrap());
    assert!(!exists(&server, &xsem_key(name)) && !exists(&server, &leases_key(name)));
    assert_eq!(sem.available_permits().await.unwrap(), 0);
    assert!(matches!(held.release().await, Err(Error::NotOwner)));
    assert_eq!(sem.available_permits().await.unwrap(), 0);
    assert!(sem.try_set_permits(1).await.unwrap());
    assert_eq!(sem.available_permits().await.unwrap(), 1);
    assert_idle(&[&c]);
}

// ---------------------------------------------------------------------------------------------
// 2. A blocked acquire is woken by a release from another client.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_from_another_client_wakes_a_blocked_acquire_within_100ms() {
    let server = RedisServer::start();
    let name = "wake";
    let waiter_client = client(&server).await;
    let releaser_client = client(&server).await;
    let releaser = releaser_client.semaphore(name);
    assert!(releaser.try_set_permits(0).await.unwrap());
    let mut latencies = Vec::new();
    for round in 0..6 {
        // Even rounds release raw permits, odd rounds give back a permit object.
        let held = if round % 2 == 1 {
            releaser.release(1).await.unwrap();
            Some(releaser.acquire().await.unwrap())
        } else {
            None
        };
        assert_eq!(releaser.available_permits().await.unwrap(), 0);
        let sem = waiter_client.semaphore(name);
        let task = tokio::spawn(async move {
            let permit = sem.acquire().await.unwrap();
            (Instant::now(), permit)
        });
        eventually("the waiter is subscribed", SETTLE, || {
            wake_subscribers(&server, &sem_channel(name)) == 1
        })
        .await;
        let released_at = Instant::now();
        match held {
            Some(permit) => permit.release().await.unwrap(),
            None => releaser.release(1).await.unwrap(),
        }
        let (acquired_at, permit) = tokio::time::timeout(SETTLE, task)
            .await
            .expect("the release wakes the waiter")
            .unwrap();
        let latency = acquired_at.duration_since(released_at);
        latencies.push(latency);
        assert!(
            latency < ms(100),
            "round {round}: the waiter got in {latency:?} after the release"
        );
        assert_eq!(releaser.available_permits().await.unwrap(), 0);
        permit.forget();
        eventually("the waiter unsubscribed", SETTLE, || {
            wake_subscribers(&server, &sem_channel(name)) == 0
        })
        .await;
        assert_idle(&[&waiter_client, &releaser_client]);
    }
    println!("wake-up latencies: {latencies:?}");
}

// ---------------------------------------------------------------------------------------------
// 3. acquire_many gathers permits released one at a time.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_many_gathers_single_releases_from_another_client() {
    let server = RedisServer::start();
    let name = "gather";
    let waiter_client = client(&server).await;
    let releaser_client = client(&server).await;
    let releaser = releaser_client.semaphore(name);
    assert!(releaser.try_set_permits(0).await.unwrap());
    for variant in ["raw release(1)", "permit.release()"] {
        // The permits objects to give back, taken before the waiter starts.
        let mut held = Vec::new();
        if variant == "permit.release()" {
            releaser.release(4).await.unwrap();
            for _ in 0..4 {
                held.push(releaser.acquire().await.unwrap());
            }
        }
        assert_eq!(releaser.available_permits().await.unwrap(), 0);
        let sem = waiter_client.semaphore(name);
        let task = tokio::spawn(async move {
            let permit = sem.acquire_many(4).await.unwrap();
            (Instant::now(), permit)
        });
        eventually("the waiter is subscribed", SETTLE, || {
            wake_subscribers(&server, &sem_channel(name)) == 1
        })
        .await;
        let mut last_release = Instant::now();
        for i in 1..=4 {
            tokio::time::sleep(ms(50)).await;
            assert!(
                !task.is_finished(),
                "{variant}: acquire_many(4) returned after {} releases",
                i - 1
            );
            last_release = Instant::now();
            match held.pop() {
                Some(permit) => permit.release().await.unwrap(),
                None => releaser.release(1).await.unwrap(),
            }
            if i < 4 {
                // Nothing is taken piecemeal.
                assert_eq!(releaser.available_permits().await.unwrap(), i);
            }
        }
        let (acquired_at, permit) = tokio::time::timeout(SETTLE, task)
            .await
            .expect("acquire_many(4) completes after the 4th release")
            .unwrap();
        assert!(acquired_at >= last_release);
        let after = acquired_at.duration_since(last_release);
        println!("{variant}: acquire_many(4) returned {after:?} after the 4th release");
        // Woken by the message, not by the periodic re-check (once a second).
        assert!(after < ms(500), "{variant}: took {after:?}");
        assert_eq!(permit.count(), 4);
        assert_eq!(releaser.available_permits().await.unwrap(), 0);
        permit.release().await.unwrap();
        assert_eq!(releaser.available_permits().await.unwrap(), 4);
        assert!(releaser.drain_permits().await.unwrap() == 4);
        eventually("the waiter unsubscribed", SETTLE, || {
            wake_subscribers(&server, &sem_channel(name)) == 0
        })
        .await;
    }
    assert_idle(&[&waiter_client, &releaser_client]);
}

/// A waiter of `kind` on `name` (from its own client), with the time it got in.
async fn spawn_waiter(
    server: &RedisServer,
    kind: Kind,
    name: &str,
) -> JoinHandle<(Instant, AnyPermit, Client)> {
    let c = client(server).await;
    let sem = kind.handle(&c, name);
    let task = tokio::spawn(async move {
        let permit = sem.acquire().await.unwrap();
        (Instant::now(), permit, c)
    });
    eventually("the waiter is subscribed", SETTLE, || {
        wake_subscribers(server, &kind.channel(name)) == 1
    })
    .await;
    task
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_recheck_without_messages_and_wake_on_initialisation() {
    let server = RedisServer::start();
    let c = client(&server).await;
    for kind in [Kind::Classic, Kind::Expirable] {
        // A permit added behind the scripts' back publishes nothing: the periodic re-check
        // (once a second) still finds it.
        let name = format!("silent-{kind:?}");
        let sem = kind.handle(&c, &name);
        assert!(sem.try_set_permits(1).await.unwrap());
        let held = sem.acquire().await.unwrap();
        let waiter = spawn_waiter(&server, kind, &name).await;
        let added_at = Instant::now();
        server.cmd(&["INCRBY", &kind.key(&name), "1"]);
        let (acquired_at, permit, waiter_client) = tokio::time::timeout(SETTLE, waiter)
            .await
            .expect("the waiter re-checks by itself")
            .unwrap();
        let after = acquired_at.duration_since(added_at);
        println!("{kind:?}: a silently added permit was found after {after:?}");
        assert!(
            after < Duration::from_secs(2),
            "{kind:?}: only after {after:?}"
        );
        permit.release().await.unwrap();
        held.release().await.unwrap();
        assert_eq!(sem.available_permits().await.unwrap(), 2);
        assert_idle(&[&waiter_client]);

        // A waiter on a semaphore that does not exist yet gets in once it is initialised.
        let name = format!("late-{kind:?}");
        let sem = kind.handle(&c, &name);
        let waiter = spawn_waiter(&server, kind, &name).await;
        let set_at = Instant::now();
        assert!(sem.try_set_permits(2).await.unwrap());
        let (acquired_at, permit, waiter_client) = tokio::time::timeout(SETTLE, waiter)
            .await
            .expect("initialising wakes the waiter")
            .unwrap();
        let after = acquired_at.duration_since(set_at);
        assert!(after < ms(500), "{kind:?}: woken only after {after:?}");
        assert_eq!(sem.available_permits().await.unwrap(), 1);
        permit.release().await.unwrap();
        assert_eq!(sem.available_permits().await.unwrap(), 2);
        assert_idle(&[&waiter_client]);
    }
    assert_idle(&[&c]);
}

// ---------------------------------------------------------------------------------------------
// 4. Timed waits.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timed_acquires_give_up_after_the_wait_or_get_permits_in_time() {
    let server = RedisServer::start();
    let name = "timed";
    let c = client(&server).await;
    let other = client(&server).await;
    let sem = c.semaphore(name);
    assert!(sem.try_set_permits(2).await.unwrap());

    // Too few permits for the whole wait: None after about the wait, nothing taken.
    let started = Instant::now();
    assert!(sem
        .try_acquire_many_for(3, ms(300))
        .await
        .unwrap()
        .is_none());
    let waited = started.elapsed();
    println!("try_acquire_many_for(3, 300ms) gave up after {waited:?}");
    assert!(
        waited >= ms(250) && waited < Duration::from_secs(2),
        "{waited:?}"
    );
    assert_eq!(sem.available_permits().await.unwrap(), 2);
    assert_idle(&[&c]);
    eventually("no subscriber is left", SETTLE, || {
        wake_subscribers(&server, &sem_channel(name)) == 0
    })
    .await;

    // A zero wait does not wait.
    let started = Instant::now();
    assert!(sem
        .try_acquire_many_for(3, Duration::ZERO)
        .await
        .unwrap()
        .is_none());
    assert!(started.elapsed() < ms(250), "{:?}", started.elapsed());
    let two = sem.try_acquire_many_for(2, Duration::ZERO).await.unwrap();
    let two = two.expect("two permits are free");
    let started = Instant::now();
    assert!(sem.try_acquire_for(ms(300)).await.unwrap().is_none());
    let waited = started.elapsed();
    assert!(
        waited >= ms(250) && waited < Duration::from_secs(2),
        "{waited:?}"
    );
    two.release().await.unwrap();

    // Permits that arrive before the deadline are taken.
    let waiting = {
        let sem = sem.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let permit = sem.try_acquire_many_for(3, Duration::from_secs(5)).await;
            (started.elapsed(), Instant::now(), permit.unwrap())
        })
    };
    eventually("the timed acquire waits", SETTLE, || {
        wake_subscribers(&server, &sem_channel(name)) == 1
    })
    .await;
    let released_at = Instant::now();
    other.semaphore(name).release(1).await.unwrap();
    let (waited, acquired_at, permit) = tokio::time::timeout(SETTLE, waiting)
        .await
        .expect("the timed acquire returns")
        .unwrap();
    let permit = permit.expect("the permits arrived before the deadline");
    assert_eq!(permit.count(), 3);
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    let after = acquired_at.duration_since(released_at);
    assert!(
        after < ms(500),
        "got the permits {after:?} after they arrived"
    );
    assert_eq!(sem.available_permits().await.unwrap(), 0);
    permit.release().await.unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), 3);

    // The expirable kind too.
    let xsem = c.expirable_semaphore(name);
    assert!(xsem.try_set_permits(1).await.unwrap());
    let held = other.expirable_semaphore(name).acquire().await.unwrap();
    let started = Instant::now();
    assert!(xsem.try_acquire_for(ms(300)).await.unwrap().is_none());
    let waited = started.elapsed();
    assert!(
        waited >= ms(250) && waited < Duration::from_secs(2),
        "{waited:?}"
    );
    let started = Instant::now();
    assert!(xsem
        .try_acquire_with_lease(ms(300), ms(500))
        .await
        .unwrap()
        .is_none());
    let waited = started.elapsed();
    assert!(
        waited >= ms(250) && waited < Duration::from_secs(2),
        "{waited:?}"
    );
    let waiting = {
        let xsem = xsem.clone();
        tokio::spawn(async move { xsem.try_acquire_for(Duration::from_secs(5)).await })
    };
    eventually("the timed acquire waits", SETTLE, || {
        wake_subscribers(&server, &xsem_channel(name)) == 1
    })
    .await;
    held.release().await.unwrap();
    let permit = tokio::time::timeout(SETTLE, waiting)
        .await
        .expect("the timed acquire returns")
        .unwrap()
        .unwrap()
        .expect("the permit came back before the deadline");
    assert_eq!(xsem.available_permits().await.unwrap(), 0);
    permit.release().await.unwrap();
    assert_eq!(xsem.available_permits().await.unwrap(), 1);
    eventually("no subscriber is left", SETTLE, || {
        wake_subscribers(&server, &sem_channel(name)) == 0
            && wake_subscribers(&server, &xsem_channel(name)) == 0
    })
    .await;
    assert_idle(&[&c, &other]);
}

/// A client whose last waiting task leaves withdraws itself from the waiters, so that a
/// wake-up is not spent on it. A withdrawal lost on a connection that went silent is sent
/// again once the client is back (within a few command timeouts), as the lock's is: the
/// semaphores share the lock's registration and its retried withdrawal. Nothing else takes
/// the entry out here (no permit is freed) before the
/// registry expires on its own, seconds later.
async fn a_withdrawal_lost_on_the_wire_is_sent_again(kind: Kind) {
    let server = RedisServer::start();
    let proxy = ChaosProxy::start(&server);
    let name = "withdraw-again";
    let command_timeout = ms(1000);
    let holder = client(&server).await;
    let waiting = Client::builder(proxy.url())
        .command_timeout(command_timeout)
        .build()
        .await
        .unwrap();
    let sem = kind.handle(&holder, name);
    assert!(sem.try_set_permits(1).await.unwrap());
    let permit = sem.acquire().await.unwrap();

    let channel = format!("{}{}", kind.channel(name), waiting.id());
    let waiters = kind.waiters(name);
    let registered = || zscore(&server, &waiters, &channel).is_some();
    let task = tokio::spawn({
        let sem = kind.handle(&waiting, name);
        async move { sem.acquire().await }
    });
    eventually("the waiting client registered", SETTLE, registered).await;

    let scripts_before = waiting.stats().scripts_sent;
    proxy.blackhole(true);
    task.abort();
    eventually("the withdrawal is sent", SETTLE, || {
        waiting.stats().scripts_sent > scripts_before
    })
    .await;
    // Well within the withdrawal's first send: it is lost with the connection.
    tokio::time::sleep(command_timeout / 4).await;
    proxy.blackhole(false);
    let back = Instant::now();
    let ttl = int(&server, &["PTTL", &waiters]);
    let within = command_timeout * 3;
    assert!(
        ttl > i64::try_from(within.as_millis()).unwrap() + 1000,
        "the registry would expire first ({ttl} ms left)"
    );
    eventually("the withdrawal is sent again and lands", within, || {
        !registered()
    })
    .await;
    println!(
        "{kind:?}: withdrawn {:?} after the connection came back",
        back.elapsed()
    );
    permit.release().await.unwrap();
    eventually("the withdrawal is settled", SETTLE, || {
        waiting.local_state().pending_releases == 0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_withdrawal_lost_on_the_wire_is_sent_again() {
    a_withdrawal_lost_on_the_wire_is_sent_again(Kind::Classic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expirable_semaphore_withdrawal_lost_on_the_wire_is_sent_again() {
    a_withdrawal_lost_on_the_wire_is_sent_again(Kind::Expirable).await;
}

// ---------------------------------------------------------------------------------------------
// 5. Eight clients of eight tasks on three permits.

async fn eight_by_eight_on_three_permits(kind: Kind) {
    const CLIENTS: usize = 8;
    const TASKS: usize = 8;
    const TURNS: usize = 5;
    const PERMITS: usize = 3;
    let server = RedisServer::start();
    let name = "stress";
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(client(&server).await);
    }
    assert!(kind
        .handle(&clients[0], name)
        .try_set_permits(PERMITS as u64)
        .await
        .unwrap());
    let holders = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let turns = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for c in &clients {
        for _ in 0..TASKS {
            let sem = kind.handle(c, name);
            let (holders, most, turns) = (holders.clone(), most.clone(), turns.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..TURNS {
                    let permit = sem.acquire().await.unwrap();
                    let now = holders.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    assert!(now <= PERMITS, "{now} holders of {PERMITS} permits");
                    tokio::time::sleep(ms(2)).await;
                    holders.fetch_sub(1, Ordering::SeqCst);
                    turns.fetch_add(1, Ordering::SeqCst);
                    permit.release().await.unwrap();
                }
                TURNS
            }));
        }
    }
    let started = Instant::now();
    let done: usize = tokio::time::timeout(Duration::from_secs(30), join_all(tasks))
        .await
        .expect("every task gets its turns")
        .into_iter()
        .sum();
    println!(
        "{kind:?}: {done} turns in {:?}, at most {} holders at once",
        started.elapsed(),
        most.load(Ordering::SeqCst)
    );
    assert_eq!(done, CLIENTS * TASKS * TURNS);
    assert_eq!(turns.load(Ordering::SeqCst), CLIENTS * TASKS * TURNS);
    let most = most.load(Ordering::SeqCst);
    assert!(most <= PERMITS, "{most} holders at once");
    assert_eq!(most, PERMITS, "the three permits were never used together");
    // Conserved: every permit is back, none was added.
    let probe = kind.handle(&clients[0], name);
    assert_eq!(probe.available_permits().await.unwrap(), PERMITS as i64);
    assert_eq!(raw_count(&server, &kind.key(name)), Some(PERMITS as i64));
    assert_eq!(kind.leases(&server, name), 0);
    eventually("every waiter unsubscribed", SETTLE, || {
        wake_subscribers(&server, &kind.channel(name)) == 0
    })
    .await;
    for c in &clients {
        assert_eq!(c.local_state(), LocalState::default());
        assert_eq!(c.stats().lost_leases, 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_clients_of_eight_tasks_never_exceed_three_permits() {
    eight_by_eight_on_three_permits(Kind::Classic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_clients_of_eight_tasks_never_exceed_three_expirable_permits() {
    eight_by_eight_on_three_permits(Kind::Expirable).await;
}

// ---------------------------------------------------------------------------------------------
// 6. Leases end by themselves.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_lease_returns_its_permit_and_wakes_a_waiter_without_any_release() {
    let server = RedisServer::start();
    let name = "expiry";
    let holder_client = client(&server).await;
    let waiter_client = client(&server).await;
    let holder = holder_client.expirable_semaphore(name);
    assert!(holder.try_set_permits(1).await.unwrap());
    let lease = ms(300);
    let sent_at = Instant::now();
    let held = holder.acquire_with_lease(lease).await.unwrap();
    let scripts_before = holder_client.stats().scripts_sent;
    assert!(!held.is_lost());
    let sem = waiter_client.expirable_semaphore(name);
    let task = tokio::spawn(async move {
        let permit = sem.acquire().await.unwrap();
        (Instant::now(), permit)
    });
    let (acquired_at, permit) = tokio::time::timeout(SETTLE, task)
        .await
        .expect("the waiter gets the expired permit")
        .unwrap();
    let after = acquired_at.duration_since(sent_at);
    println!("the waiter got in {after:?} after a {lease:?} lease was granted");
    assert!(after >= lease - ms(20), "the lease ended early: {after:?}");
    // Woken at the lease's end, not by the periodic re-check (once a second).
    assert!(
        after < lease + ms(600),
        "the waiter got in only {after:?} after the lease began"
    );
    // Nobody released: the holder's client sent nothing since.
    assert_eq!(holder_client.stats().scripts_sent, scripts_before);
    assert!(held.is_lost());
    tokio::time::timeout(ms(100), held.lost())
        .await
        .expect("lost() completes once the lease ended");
    assert_eq!(zscore(&server, &leases_key(name), held.id()), None);
    assert!(zscore(&server, &leases_key(name), permit.id()).is_some());
    assert_eq!(zcard(&server, &leases_key(name)), 1);
    assert_eq!(holder.available_permits().await.unwrap(), 0);
    // The stale permit cannot give back what the waiter now holds.
    assert!(matches!(held.release().await, Err(Error::NotOwner)));
    assert_eq!(holder.available_permits().await.unwrap(), 0);
    permit.release().await.unwrap();
    assert_eq!(holder.available_permits().await.unwrap(), 1);

    // Several expired permits count as available at once, and are taken back by any script.
    holder.add_permits(1).await.unwrap();
    let a = holder.acquire_with_lease(ms(150)).await.unwrap();
    let b = holder.acquire_with_lease(ms(150)).await.unwrap();
    assert_eq!(holder.available_permits().await.unwrap(), 0);
    tokio::time::timeout(SETTLE, async {
        a.lost().await;
        b.lost().await;
    })
    .await
    .unwrap();
    eventually("the expired permits count as available", SETTLE, || {
        let now = server_now_ms(&server);
        zscore(&server, &leases_key(name), a.id()).is_some_and(|end| end < now)
            && zscore(&server, &leases_key(name), b.id()).is_some_and(|end| end < now)
    })
    .await;
    assert_eq!(holder.available_permits().await.unwrap(), 2);
    let c1 = waiter_client
        .expirable_semaphore(name)
        .try_acquire()
        .await
        .unwrap()
        .expect("an expired permit is free");
    let c2 = waiter_client
        .expirable_semaphore(name)
        .try_acquire()
        .await
        .unwrap()
        .expect("an expired permit is free");
    assert_eq!(zcard(&server, &leases_key(name)), 2);
    assert!(!holder.release_by_id(a.id()).await.unwrap());
    assert!(!holder.release_by_id(b.id()).await.unwrap());
    assert_eq!(holder.available_permits().await.unwrap(), 0);
    c1.release().await.unwrap();
    c2.release().await.unwrap();
    assert_eq!(holder.available_permits().await.unwrap(), 2);
    assert_eq!(raw_count(&server, &xsem_key(name)), Some(2));
    drop((a, b));
    eventually("stale drops change nothing", SETTLE, || {
        raw_count(&server, &xsem_key(name)) == Some(2)
    })
    .await;
    tokio::time::sleep(ms(100)).await;
    assert_eq!(holder.available_permits().await.unwrap(), 2);
    assert_idle(&[&holder_client, &waiter_client]);
}

// ---------------------------------------------------------------------------------------------
// 7. The watchdog keeps lease-less permits.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_keeps_a_leaseless_permit_past_three_timeouts() {
    let server = RedisServer::start();
    let name = "watchdog";
    let watchdog = ms(600);
    let holder_client = client_with_watchdog(&server, watchdog).await;
    let other_client = client(&server).await;
    let sem = holder_client.expirable_semaphore(name);
    assert!(sem.try_set_permits(1).await.unwrap());
    let permit = sem.acquire().await.unwrap();
    assert_eq!(holder_client.local_state().renewed_holds, 1);
    let other = other_client.expirable_semaphore(name);
    let until = Instant::now() + watchdog * 3 + ms(300);
    while Instant::now() < until {
        assert!(!permit.is_lost(), "the watchdog let the permit go");
        assert!(
            other.try_acquire().await.unwrap().is_none(),
            "another client took a held permit"
        );
        assert_eq!(other.available_permits().await.unwrap(), 0);
        let end = zscore(&server, &leases_key(name), permit.id()).expect("the lease is there");
        assert!(end > server_now_ms(&server), "the lease lapsed in Redis");
        tokio::time::sleep(ms(100)).await;
    }
    assert!(!permit.is_lost());
    let stats = holder_client.stats();
    assert!(stats.renewals >= 5, "only {} renewals", stats.renewals);
    assert_eq!(stats.lost_leases, 0);
    permit.release().await.unwrap();
    assert_eq!(other.available_permits().await.unwrap(), 1);
    assert_eq!(zcard(&server, &leases_key(name)), 0);
    assert_idle(&[&holder_client, &other_client]);
}

// ---------------------------------------------------------------------------------------------
// 8. Shut-down and crashed holders give their permits back within the lease.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shut_down_clients_permit_returns_within_its_lease() {
    let server = RedisServer::start();
    let name = "shutdown";
    let lease = ms(800);
    let holder_client = client_with_watchdog(&server, lease).await;
    let waiter_client = client(&server).await;
    let holder = holder_client.expirable_semaphore(name);
    assert!(holder.try_set_permits(1).await.unwrap());
    let held = holder.acquire().await.unwrap();
    // Renewed at least once before the shutdown.
    eventually("a renewal", SETTLE, || holder_client.stats().renewals >= 1).await;
    let sem = waiter_client.expirable_semaphore(name);
    let task = tokio::spawn(async move {
        let permit = sem.acquire().await.unwrap();
        (Instant::now(), permit)
    });
    // A waiter of the shut-down client itself.
    let own_waiter = {
        let holder = holder.clone();
        tokio::spawn(async move { holder.acquire().await })
    };
    eventually("both waiters wait", SETTLE, || {
        wake_subscribers(&server, &xsem_channel(name)) == 2
    })
    .await;
    holder_client.shutdown().await;
    let shut_at = Instant::now();
    let own = tokio::time::timeout(Duration::from_secs(1), own_waiter)
        .await
        .expect("the shut-down client's waiter returns promptly")
        .unwrap();
    assert!(matches!(own, Err(Error::Shutdown)), "{:?}", own.map(drop));
    tokio::time::timeout(Duration::from_secs(1), held.lost())
        .await
        .expect("nothing renews the permit after shutdown, so it is reported lost");
    assert!(matches!(
        holder.available_permits().await,
        Err(Error::Shutdown)
    ));
    assert!(matches!(holder.try_acquire().await, Err(Error::Shutdown)));
    let (acquired_at, permit) = tokio::time::timeout(SETTLE, task)
        .await
        .expect("the permit comes back")
        .unwrap();
    let after = acquired_at.duration_since(shut_at);
    println!("the waiter got in {after:?} after the shutdown (lease {lease:?})");
    assert!(
        after < lease + ms(700),
        "the waiter got in only {after:?} after the shutdown"
    );
    assert_eq!(zscore(&server, &leases_key(name), held.id()), None);
    // Releasing the lost permit now cannot give back the waiter's.
    let released = held.release().await;
    assert!(matches!(released, Err(Error::Shutdown)), "{released:?}");
    let other = waiter_client.expirable_semaphore(name);
    tokio::time::sleep(ms(200)).await;
    assert_eq!(other.available_permits().await.unwrap(), 0);
    permit.release().await.unwrap();
    assert_eq!(other.available_permits().await.unwrap(), 1);
    assert_eq!(zcard(&server, &leases_key(name)), 0);
    assert_idle(&[&waiter_client]);
}

#[test]
fn a_crashed_holders_permit_returns_within_its_lease() {
    // A process that dies runs no destructor and sends no release: model it with a runtime
    // that is torn down while a permit is leaked. Its watchdog stops with it.
    let server = RedisServer::start();
    let url = server.url();
    let name = "crashed";
    let lease = ms(800);
    let holder_runtime = tokio::runtime::Runtime::new().unwrap();
    let crashed_id = holder_runtime.block_on(async {
        let crashed = Client::builder(url.clone())
            .watchdog_timeout(lease)
            .build()
            .await
            .unwrap();
        let sem = crashed.expirable_semaphore(name);
        assert!(sem.try_set_permits(1).await.unwrap());
        let permit = sem.acquire().await.unwrap();
        // Let the watchdog renew once, so the crash comes mid-lease.
        let renewed = wait_until(SETTLE, || crashed.stats().renewals >= 1).await;
        assert!(renewed);
        let id = permit.id().to_owned();
        std::mem::forget(permit);
        id
    });
    drop(holder_runtime);
    let crashed_at = Instant::now();

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let c = client(&server).await;
        let sem = c.expirable_semaphore(name);
        assert!(zscore(&server, &leases_key(name), &crashed_id).is_some());
        let permit = tokio::time::timeout(SETTLE, sem.acquire())
            .await
            .expect("the crashed holder's permit comes back")
            .unwrap();
        let after = crashed_at.elapsed();
        println!("the waiter got in {after:?} after a holder with a {lease:?} lease crashed");
        // The last renewal was sent at most a third of the lease before the crash.
        assert!(
            after >= lease / 2,
            "the crashed holder's permit came back early"
        );
        assert!(
            after < lease + ms(700),
            "the waiter got in only {after:?} after the crash"
        );
        assert!(!sem.release_by_id(&crashed_id).await.unwrap());
        assert_eq!(sem.available_permits().await.unwrap(), 0);
        permit.release().await.unwrap();
        assert_eq!(sem.available_permits().await.unwrap(), 1);
        assert_eq!(zcard(&server, &leases_key(name)), 0);
        assert_idle(&[&c]);
    });
}

// ---------------------------------------------------------------------------------------------
// 9. release_by_id, and releasing twice.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_by_id_frees_live_permits_once_and_never_inflates_the_pool() {
    let server = RedisServer::start();
    let name = "by-id";
    let c = client(&server).await;
    let other_client = client(&server).await;
    let sem = c.expirable_semaphore(name);
    let other = other_client.expirable_semaphore(name);
    const INITIAL: i64 = 2;
    assert!(sem.try_set_permits(INITIAL as u64).await.unwrap());

    // An expired id: false, and its permit's own release is NotOwner.
    let short = sem.acquire_with_lease(ms(150)).await.unwrap();
    tokio::time::timeout(SETTLE, short.lost()).await.unwrap();
    eventually("the lease ended in Redis", SETTLE, || {
        zscore(&server, &leases_key(name), short.id())
            .is_some_and(|end| end < server_now_ms(&server))
    })
    .await;
    assert!(!other.release_by_id(short.id()).await.unwrap());
    assert_eq!(sem.available_permits().await.unwrap(), INITIAL);
    assert!(matches!(short.release().await, Err(Error::NotOwner)));
    assert_eq!(sem.available_permits().await.unwrap(), INITIAL);

    // A live id: true once (from another client), then false. The permit's watchdog (a short
    // one) then finds it gone.
    let watched_client = client_with_watchdog(&server, ms(300)).await;
    let live = watched_client
        .expirable_semaphore(name)
        .acquire()
        .await
        .unwrap();
    let leased = sem
        .acquire_with_lease(Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), 0);
    assert!(other.release_by_id(live.id()).await.unwrap());
    assert_eq!(sem.available_permits().await.unwrap(), 1);
    assert!(!other.release_by_id(live.id()).await.unwrap());
    assert!(!sem.release_by_id(live.id()).await.unwrap());
    assert_eq!(sem.available_permits().await.unwrap(), 1);
    tokio::time::timeout(SETTLE, live.lost())
        .await
        .expect("the watchdog finds a permit released by id gone");
    assert_eq!(watched_client.local_state(), LocalState::default());
    // The permit object's own release is now stale.
    assert!(matches!(live.release().await, Err(Error::NotOwner)));
    assert_eq!(sem.available_permits().await.unwrap(), 1);
    // Released by id, then dropped: the background release changes nothing.
    assert!(sem.release_by_id(leased.id()).await.unwrap());
    assert_eq!(sem.available_permits().await.unwrap(), INITIAL);
    // Nothing else sends scripts now (no hold is renewed): the next one Redis runs is the
    // dropped permit's release, which keeps no record.
    let scripts = server.command_calls("evalsha");
    drop(leased);
    eventually("the dropped permit's release ran", SETTLE, || {
        server.command_calls("evalsha") > scripts
    })
    .await;
    assert_eq!(
        strings(&server.cmd(&["KEYS", "*:permit:*"])),
        Vec::<String>::new(),
        "no release leaves a record"
    );
    assert_eq!(sem.available_permits().await.unwrap(), INITIAL);
    // Released, then released by id: false.
    let p = sem.acquire().await.unwrap();
    let id = p.id().to_owned();
    p.release().await.unwrap();
    assert!(!other.release_by_id(&id).await.unwrap());
    assert!(!other.release_by_id("never-issued").await.unwrap());
    assert!(!other.release_by_id("").await.unwrap());
    assert_eq!(sem.available_permits().await.unwrap(), INITIAL);
    assert_eq!(raw_count(&server, &xsem_key(name)), Some(INITIAL));
    assert_eq!(zcard(&server, &leases_key(name)), 0);
    // The pool still works as a pool of exactly two.
    let a = other.try_acquire().await.unwrap().expect("first");
    let b = other.try_acquire().await.unwrap().expect("second");
    assert!(other.try_acquire().await.unwrap().is_none());
    a.release().await.unwrap();
    b.release().await.unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), INITIAL);
    assert_idle(&[&c, &other_client, &watched_client]);
}

// ---------------------------------------------------------------------------------------------
// 10. Cancellation leaves no trace.

/// The next delay of a sweep: `step` apart up to `fine_until`, then 20 % apart.
fn next_cut(cut: Duration, step: Duration, fine_until: Duration) -> Duration {
    if cut < fine_until {
        cut + step
    } else {
        cut + cut / 5
    }
}

/// One sweep's semaphore, the client whose calls are cut, and the other client that holds
/// permits meanwhile.
struct Sweep<'a> {
    server: &'a RedisServer,
    kind: Kind,
    call: Call,
    label: String,
    client: &'a Client,
    sem: AnySem,
    holder: AnySem,
    initial: i64,
}

impl Sweep<'_> {
    fn name(&self) -> &str {
        self.sem.name()
    }

    /// Read-only requests through every pooled connection of the client (round robin), so
    /// that requests it queued earlier have normally run by the time they return.
    async fn flush(&self) {
        for _ in 0..2 * redisync::core::DEFAULT_POOL_SIZE {
            self.sem.available_permits().await.expect("flush");
        }
    }

    /// What a cut call may leave: nothing locally at once; on the server, once every request
    /// the client queued has run, exactly `available` permits, `leases` leases (the holder's)
    /// and no subscriber.
    async fn assert_quiet(&self, available: i64, leases: i64, what: impl Display) {
        assert_eq!(
            self.client.local_state(),
            LocalState::default(),
            "{what} left local state behind"
        );
        self.flush().await;
        let (key, channel, name) = (
            self.kind.key(self.name()),
            self.kind.channel(self.name()),
            self.name().to_owned(),
        );
        let waiters = self.kind.waiters(&name);
        let settled = wait_until(SETTLE, || {
            raw_count(self.server, &key) == Some(available)
                && self.kind.leases(self.server, &name) == leases
                && wake_subscribers(self.server, &channel) == 0
                && !exists(self.server, &waiters)
        })
        .await;
        assert!(
            settled,
            "after {what}: {:?} permits (want {available}), {} leases (want {leases}), {} \
             subscribers, registered waiters: {}",
            raw_count(self.server, &key),
            self.kind.leases(self.server, &name),
            wake_subscribers(self.server, &channel),
            exists(self.server, &waiters)
        );
    }

    /// Takes every permit with the holder's client, one permit object each.
    async fn hold_all(&self) -> Vec<AnyPermit> {
        let mut held = Vec::new();
        for _ in 0..self.initial {
            held.push(
                self.holder
                    .try_acquire()
                    .await
                    .unwrap()
                    .expect("a free permit"),
            );
        }
        assert_eq!(raw_count(self.server, &self.kind.key(self.name())), Some(0));
        held
    }

    async fn give_back(held: Vec<AnyPermit>) {
        for permit in held {
            permit.release().await.unwrap();
        }
    }

    /// Permits free: cut the acquire from "not sent yet" to "reply received". An attempt cut
    /// on the wire finishes in the background and must give back exactly what it got.
    async fn while_free(&self) -> (usize, usize) {
        let (mut cut_count, mut acquired) = (0, 0);
        let mut check = |outcome: Option<Result<AnyPermit>>| match outcome {
            Some(Ok(permit)) => {
                acquired += 1;
                Some(permit)
            }
            Some(Err(err)) => panic!("{}: {err}", self.label),
            None => {
                cut_count += 1;
                None
            }
        };
        for pendings in 0..4 {
            if let Some(permit) = check(cut_at_await(pendings, self.sem.call(self.call)).await) {
                permit.release().await.unwrap();
            }
            let what = format_args!("{} with permits free, cut at await {pendings}", self.label);
            self.assert_quiet(self.initial, 0, what).await;
        }
        // The first await points again, many times: the request is cut before or while the
        // connection writes it, and its give-back travels on another connection.
        for round in 0..24 {
            let pendings = round % 3;
            if let Some(permit) = check(cut_at_await(pendings, self.sem.call(self.call)).await) {
                permit.release().await.unwrap();
            }
            let what = format_args!(
                "{} with permits free, cut at await {pendings} (round {round})",
                self.label
            );
            self.assert_quiet(self.initial, 0, what).await;
        }
        let mut acquired_in_a_row = 0;
        let mut cut = Duration::ZERO;
        while (acquired_in_a_row < 4 || cut < ms(2)) && cut < ms(100) {
            match check(cut_after(cut, self.sem.call(self.call)).await) {
                Some(permit) => {
                    acquired_in_a_row += 1;
                    permit.release().await.unwrap();
                }
                None => acquired_in_a_row = 0,
            }
            let what = format_args!("{} with permits free, cut after {cut:?}", self.label);
            self.assert_quiet(self.initial, 0, what).await;
            cut = next_cut(cut, Duration::from_micros(40), ms(2));
        }
        for cut in [0, 1, 2].map(ms) {
            if let Some(permit) = check(
                tokio::time::timeout(cut, self.sem.call(self.call))
                    .await
                    .ok(),
            ) {
                permit.release().await.unwrap();
            }
            let what = format_args!("{} with permits free, timed out after {cut:?}", self.label);
            self.assert_quiet(self.initial, 0, what).await;
        }
        (cut_count, acquired)
    }

    /// No permit free: cut the acquire at each await point, then while it waits.
    async fn while_none_free(&self) -> usize {
        let held = self.hold_all().await;
        let leases = self.kind.leases(self.server, self.name());
        let mut reached_waiting = 0;
        let mut asleep = false;
        for pendings in 0..20 {
            let outcome =
                tokio::time::timeout(ms(200), cut_at_await(pendings, self.sem.call(self.call)))
                    .await;
            match outcome {
                Ok(None) => {}
                Ok(Some(outcome)) => {
                    panic!(
                        "{} returned {:?} with none free",
                        self.label,
                        outcome.map(drop)
                    )
                }
                Err(_) => asleep = true,
            }
            let what = format_args!("{} with none free, cut at await {pendings}", self.label);
            self.assert_quiet(0, leases, what).await;
            if asleep {
                break;
            }
        }
        assert!(asleep, "{} never went to sleep", self.label);
        let mut cut = Duration::ZERO;
        while cut < ms(60) {
            let waits_before = self.client.stats().contended_waits;
            let outcome = cut_after(cut, self.sem.call(self.call)).await;
            if let Some(outcome) = outcome {
                panic!(
                    "{} returned {:?} with none free",
                    self.label,
                    outcome.map(drop)
                );
            }
            if self.client.stats().contended_waits > waits_before {
                reached_waiting += 1;
            }
            let what = format_args!("{} with none free, cut after {cut:?}", self.label);
            self.assert_quiet(0, leases, what).await;
            cut = next_cut(cut, Duration::from_micros(100), ms(3));
        }
        Self::give_back(held).await;
        self.assert_quiet(
            self.initial,
            0,
            format_args!("{}: the holder left", self.label),
        )
        .await;
        reached_waiting
    }

    /// No permit free until the holder gives some back while the call waits; the call is cut
    /// at a sweep of delays after that release, so that its wake-up attempt is on the wire at
    /// the cut. It either returns the permits (which are then released) or must leave them.
    async fn while_released(&self) -> (usize, usize) {
        let (mut cut_count, mut acquired) = (0, 0);
        let mut cut = Duration::ZERO;
        let channel = self.kind.channel(self.name());
        while cut < ms(20) {
            let mut held = self.hold_all().await;
            let leases = self.kind.leases(self.server, self.name());
            let mut call = Box::pin(self.sem.call(self.call));
            let waiting = async {
                eventually("the call waits", SETTLE, || {
                    wake_subscribers(self.server, &channel) == 1
                })
                .await
            };
            tokio::select! {
                biased;
                outcome = &mut call => {
                    panic!("{} returned {:?} with none free", self.label, outcome.map(drop))
                }
                () = waiting => {}
            }
            let to_release = held.split_off(held.len() - self.call.permits());
            let released = Self::give_back(to_release);
            let mut released = std::pin::pin!(released);
            // Redis may run the call's wake-up attempt before the release's reply is back.
            let early = tokio::select! {
                biased;
                outcome = &mut call => Some(outcome),
                () = &mut released => None,
            };
            let outcome = match early {
                Some(outcome) => {
                    released.await;
                    Some(outcome)
                }
                None => cut_after(cut, &mut call).await,
            };
            match outcome {
                Some(Ok(permit)) => {
                    acquired += 1;
                    permit.release().await.unwrap();
                }
                Some(Err(err)) => panic!("{}: {err}", self.label),
                None => cut_count += 1,
            }
            drop(call);
            let gave_back = self.call.permits() as i64;
            let what = format_args!("{} cut {cut:?} after a release", self.label);
            self.assert_quiet(gave_back, leases - gave_back.min(leases), what)
                .await;
            Self::give_back(held).await;
            self.assert_quiet(
                self.initial,
                0,
                format_args!("{}: the holder left", self.label),
            )
            .await;
            cut = next_cut(cut, Duration::from_micros(100), ms(2));
        }
        (cut_count, acquired)
    }
}

async fn cancellation_sweep(kind: Kind, call: Call) {
    let server = RedisServer::start();
    let name = format!("cancel-{kind:?}-{call:?}");
    let holder_client = client(&server).await;
    let c = Client::builder(server.url())
        .command_timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    let sweep = Sweep {
        server: &server,
        kind,
        call,
        label: format!("{kind:?} {call:?}"),
        client: &c,
        sem: kind.handle(&c, &name),
        holder: kind.handle(&holder_client, &name),
        initial: 3,
    };
    assert!(sweep.sem.try_set_permits(3).await.unwrap());
    let started = Instant::now();
    let (free_cut, free_acquired) = sweep.while_free().await;
    let reached_waiting = sweep.while_none_free().await;
    let (released_cut, released_acquired) = sweep.while_released().await;
    println!(
        "{}: free {free_cut} cut / {free_acquired} acquired; none free: {reached_waiting} cut \
         while waiting; released: {released_cut} cut / {released_acquired} acquired; {:?}",
        sweep.label,
        started.elapsed()
    );
    assert!(free_cut >= 2, "only {free_cut} requests were cut");
    assert!(
        free_acquired >= 4,
        "only {free_acquired} acquires completed"
    );
    assert!(
        reached_waiting >= 5,
        "only {reached_waiting} cuts while waiting"
    );
    assert!(
        released_cut >= 1,
        "no cut came before the wake-up completed"
    );
    assert!(
        released_acquired >= 1,
        "no wake-up completed before its cut"
    );

    // Nothing is stuck, nothing was lost or added.
    let mut all = Vec::new();
    for _ in 0..3 {
        all.push(
            tokio::time::timeout(SETTLE, sweep.holder.acquire())
                .await
                .expect("every permit is there")
                .unwrap(),
        );
    }
    assert!(sweep.sem.try_acquire().await.unwrap().is_none());
    Sweep::give_back(all).await;
    sweep
        .assert_quiet(3, 0, format_args!("{}: the end", sweep.label))
        .await;
    assert_eq!(sweep.sem.available_permits().await.unwrap(), 3);
    assert_idle(&[&c, &holder_client]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_acquire_never_leaks_or_duplicates_a_permit() {
    cancellation_sweep(Kind::Classic, Call::One).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_acquire_many_never_leaks_or_duplicates_a_permit() {
    cancellation_sweep(Kind::Classic, Call::Many(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_expirable_acquire_never_leaks_or_duplicates_a_permit() {
    cancellation_sweep(Kind::Expirable, Call::One).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_expirable_acquire_with_lease_never_leaks_or_duplicates_a_permit() {
    cancellation_sweep(Kind::Expirable, Call::Leased(Duration::from_secs(20))).await;
}

// ---------------------------------------------------------------------------------------------
// 11. Bad input and foreign data.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_an_invalid_argument_and_touches_nothing() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let sem = c.semaphore("bad");
    let huge = i64::MAX as u64 + 1;
    assert_invalid("acquire_many(0)", sem.acquire_many(0).await);
    assert_invalid("try_acquire_many(0)", sem.try_acquire_many(0).await);
    assert_invalid(
        "try_acquire_many_for(0, 1s)",
        sem.try_acquire_many_for(0, Duration::from_secs(1)).await,
    );
    assert_invalid("release(0)", sem.release(0).await);
    assert_invalid("acquire_many(u64::MAX)", sem.acquire_many(u64::MAX).await);
    assert_invalid("acquire_many(i64::MAX + 1)", sem.acquire_many(huge).await);
    assert_invalid(
        "try_acquire_many(u64::MAX)",
        sem.try_acquire_many(u64::MAX).await,
    );
    assert_invalid("release(u64::MAX)", sem.release(u64::MAX).await);
    assert_invalid("release(i64::MAX + 1)", sem.release(huge).await);
    assert_invalid(
        "try_set_permits(u64::MAX)",
        sem.try_set_permits(u64::MAX).await,
    );
    assert_invalid(
        "try_set_permits(i64::MAX + 1)",
        sem.try_set_permits(huge).await,
    );
    assert_invalid(
        "try_acquire_for(Duration::MAX)",
        sem.try_acquire_for(Duration::MAX).await,
    );
    assert_invalid(
        "try_acquire_many_for(1, Duration::MAX)",
        sem.try_acquire_many_for(1, Duration::MAX).await,
    );
    assert_eq!(int(&server, &["DBSIZE"]), 0, "a bad call wrote to Redis");
    // try_set_permits(0) is valid: it initialises to no permits.
    assert!(sem.try_set_permits(0).await.unwrap());
    assert_eq!(raw_count(&server, &sem_key("bad")), Some(0));
    assert_eq!(sem.available_permits().await.unwrap(), 0);
    assert!(!sem.try_set_permits(5).await.unwrap());
    assert!(sem.try_acquire().await.unwrap().is_none());

    let xsem = c.expirable_semaphore("x-bad");
    for lease in [
        Duration::ZERO,
        Duration::from_nanos(1),
        ms(5),
        Duration::MAX,
    ] {
        assert_invalid(
            &format!("acquire_with_lease({lease:?})"),
            xsem.acquire_with_lease(lease).await,
        );
        assert_invalid(
            &format!("try_acquire_with_lease(1s, {lease:?})"),
            xsem.try_acquire_with_lease(Duration::from_secs(1), lease)
                .await,
        );
    }
    assert_invalid(
        "try_acquire_with_lease(Duration::MAX, 1s)",
        xsem.try_acquire_with_lease(Duration::MAX, Duration::from_secs(1))
            .await,
    );
    assert_invalid(
        "try_acquire_for(Duration::MAX)",
        xsem.try_acquire_for(Duration::MAX).await,
    );
    assert_invalid(
        "x try_set_permits(u64::MAX)",
        xsem.try_set_permits(u64::MAX).await,
    );
    assert_invalid(
        "x try_set_permits(i64::MAX + 1)",
        xsem.try_set_permits(huge).await,
    );
    assert!(!exists(&server, &xsem_key("x-bad")) && !exists(&server, &leases_key("x-bad")));
    assert!(xsem.try_set_permits(0).await.unwrap());
    assert_eq!(xsem.available_permits().await.unwrap(), 0);
    assert!(xsem.try_acquire().await.unwrap().is_none());

    // Bad names: every call says so.
    let too_long = "n".repeat(100_000);
    for name in ["", "}starts-with-brace", too_long.as_str()] {
        let sem = c.semaphore(name);
        let short: String = name.chars().take(20).collect();
        assert_eq!(sem.name(), name);
        assert_invalid(
            &format!("{short:?} try_set_permits"),
            sem.try_set_permits(1).await,
        );
        assert_invalid(&format!("{short:?} add_permits"), sem.add_permits(1).await);
        assert_invalid(
            &format!("{short:?} available"),
            sem.available_permits().await,
        );
        assert_invalid(&format!("{short:?} drain"), sem.drain_permits().await);
        assert_invalid(&format!("{short:?} acquire"), sem.acquire().await);
        assert_invalid(&format!("{short:?} try_acquire"), sem.try_acquire().await);
        assert_invalid(
            &format!("{short:?} try_acquire_for"),
            sem.try_acquire_for(ms(10)).await,
        );
        assert_invalid(&format!("{short:?} release"), sem.release(1).await);
        assert_invalid(&format!("{short:?} delete"), sem.delete().await);
        let xsem = c.expirable_semaphore(name);
        assert_eq!(xsem.name(), name);
        assert_invalid(
            &format!("{short:?} x try_set_permits"),
            xsem.try_set_permits(1).await,
        );
        assert_invalid(
            &format!("{short:?} x add_permits"),
            xsem.add_permits(1).await,
        );
        assert_invalid(
            &format!("{short:?} x available"),
            xsem.available_permits().await,
        );
        assert_invalid(&format!("{short:?} x acquire"), xsem.acquire().await);
        assert_invalid(
            &format!("{short:?} x acquire_with_lease"),
            xsem.acquire_with_lease(ms(500)).await,
        );
        assert_invalid(
            &format!("{short:?} x try_acquire"),
            xsem.try_acquire().await,
        );
        assert_invalid(
            &format!("{short:?} x release_by_id"),
            xsem.release_by_id("x").await,
        );
        assert_invalid(&format!("{short:?} x delete"), xsem.delete().await);
    }
    // "bad": its count and generation; "x-bad": its pool.
    assert_eq!(int(&server, &["DBSIZE"]), 3, "a bad call wrote to Redis");
    assert_idle(&[&c]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_data_under_the_keys_is_wrong_type() {
    let server = RedisServer::start();
    let c = client(&server).await;

    // A classic semaphore's counter holding a hash, a list, or a string that is not a number.
    for (name, plant, kind) in [
        ("hash", ["HSET", "field", "value"], "hash"),
        ("text", ["SET", "not a number", ""], "string"),
        ("list", ["RPUSH", "x", ""], "list"),
    ] {
        let key = sem_key(name);
        let mut args = vec![plant[0], key.as_str(), plant[1]];
        if !plant[2].is_empty() {
            args.push(plant[2]);
        }
        server.cmd(&args);
        let sem = c.semaphore(name);
        let what = |call: &str| format!("{name}: {call}");
        assert_wrong_type(&what("available"), sem.available_permits().await);
        assert_wrong_type(&what("try_acquire"), sem.try_acquire().await);
        assert_wrong_type(&what("try_acquire_many"), sem.try_acquire_many(2).await);
        assert_wrong_type(
            &what("acquire"),
            tokio::time::timeout(SETTLE, sem.acquire())
                .await
                .expect("acquire returns"),
        );
        assert_wrong_type(&what("add_permits"), sem.add_permits(1).await);
        assert_wrong_type(&what("release"), sem.release(1).await);
        assert_wrong_type(&what("drain"), sem.drain_permits().await);
        // Never overwritten.
        assert!(!matches!(sem.try_set_permits(1).await, Ok(true)));
        let found = server.cmd(&["TYPE", &key]);
        assert_eq!(redis::from_redis_value_ref::<String>(&found).unwrap(), kind);
        assert_eq!(wake_subscribers(&server, &sem_channel(name)), 0);
    }

    // An expirable semaphore's pool or leases holding foreign data.
    for (name, key, plant) in [
        ("x-pool-hash", xsem_key("x-pool-hash"), "HSET"),
        ("x-pool-text", xsem_key("x-pool-text"), "SET"),
        ("x-leases-text", leases_key("x-leases-text"), "SET"),
        ("x-leases-hash", leases_key("x-leases-hash"), "HSET"),
    ] {
        match plant {
            "HSET" => server.cmd(&["HSET", &key, "field", "value"]),
            _ => server.cmd(&["SET", &key, "not a number"]),
        };
        let sem = c.expirable_semaphore(name);
        let what = |call: &str| format!("{name}: {call}");
        assert_wrong_type(&what("available"), sem.available_permits().await);
        assert_wrong_type(&what("try_acquire"), sem.try_acquire().await);
        assert_wrong_type(
            &what("acquire"),
            tokio::time::timeout(SETTLE, sem.acquire())
                .await
                .expect("acquire returns"),
        );
        assert_wrong_type(&what("add_permits"), sem.add_permits(1).await);
        assert_wrong_type(&what("release_by_id"), sem.release_by_id("some-id").await);
        assert!(!matches!(sem.try_set_permits(1).await, Ok(true)));
        assert_eq!(wake_subscribers(&server, &xsem_channel(name)), 0);
    }
    assert_idle(&[&c]);
}

/// A count Lua reads as a number that is no count (`nan`, `inf`: foreign data) fails the
/// acquire. With `nan`, a first try that tested `available >= n` would find no permits free
/// and wait for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_count_that_is_not_a_number_fails_the_acquire_rather_than_waiting() {
    let server = RedisServer::start();
    let c = client(&server).await;
    for text in ["nan", "inf"] {
        let name = format!("not-a-number-{text}");
        server.cmd(&["SET", &sem_key(&name), text]);
        let sem = c.semaphore(&name);
        let acquired = tokio::time::timeout(SETTLE, sem.acquire())
            .await
            .expect("the acquire returns");
        assert!(acquired.is_err(), "{text}: {acquired:?}");
        assert!(sem.try_acquire().await.is_err(), "{text}: try_acquire");
        assert_eq!(
            server.cmd(&["GET", &sem_key(&name)]),
            redis::Value::BulkString(text.into())
        );
    }
    assert_idle(&[&c]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_for_many_permits_does_not_hold_back_a_local_waiter_for_one() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let sem = a.semaphore("sizes");
    assert!(sem.try_set_permits(0).await.unwrap());
    let big = {
        let sem = sem.clone();
        tokio::spawn(async move { sem.try_acquire_many_for(5, Duration::from_secs(5)).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let small = {
        let sem = sem.clone();
        tokio::spawn(async move { sem.try_acquire_for(Duration::from_secs(3)).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    a.semaphore("sizes").release(3).await.unwrap();
    let small = small
        .await
        .unwrap()
        .unwrap()
        .expect("one of the three free permits");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    small.release().await.unwrap();
    a.semaphore("sizes").release(2).await.unwrap();
    let big = big
        .await
        .unwrap()
        .unwrap()
        .expect("five once two more came back");
    assert_eq!(big.count(), 5);
    big.release().await.unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), 5);
}

#[tokio::test]
async fn a_deleted_semaphore_stays_deleted_when_old_permits_come_back() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let sem = a.semaphore("deleted");
    assert!(sem.try_set_permits(2).await.unwrap());
    let permit = sem.acquire().await.unwrap();
    assert!(sem.delete().await.unwrap());
    permit.release().await.unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), 0);
    assert!(
        sem.try_set_permits(10).await.unwrap(),
        "the semaphore can be set anew"
    );
    assert_eq!(sem.available_permits().await.unwrap(), 10);
}

#[tokio::test]
async fn a_permit_release_is_applied_once_however_often_or_late_it_is_retried() {
    // The release of a classic permit is retried until Redis confirms it; a retry must never
    // return the permits again, however late it comes, although Redis keeps no record of the
    // release.
    let server = RedisServer::start();
    let a = client(&server).await;
    let sem = a.semaphore("once");
    assert!(sem.try_set_permits(3).await.unwrap());
    let permit = sem.acquire_many(2).await.unwrap();
    let record = {
        let mut conn = server.connection();
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(attempt_key("once", "*"))
            .query(&mut conn)
            .unwrap();
        assert_eq!(keys.len(), 1, "one outstanding permit record");
        keys[0].clone()
    };
    permit.release().await.unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), 3);
    assert!(!exists(&server, &record), "the release leaves no record");
    let release = classic_script(include_str!("../../lua/semaphore_release.lua"));
    let mut conn = server.connection();
    let retry = |conn: &mut redis::Connection| -> i64 {
        release
            .key(sem_key("once"))
            .key(&record)
            .key(generation_key("once"))
            .key(waiters_key("once"))
            .arg(2)
            .invoke(conn)
            .unwrap()
    };
    assert_eq!(retry(&mut conn), 0, "a retry returns nothing");
    tokio::time::sleep(ms(100)).await;
    assert_eq!(retry(&mut conn), 0, "a late retry returns nothing either");
    assert_eq!(sem.available_permits().await.unwrap(), 3);
    assert_eq!(
        int(&server, &["DBSIZE"]),
        2,
        "only the count and the generation are left"
    );
}

#[tokio::test]
async fn counts_beyond_two_to_the_53_are_invalid() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let sem = a.semaphore("huge");
    let over = (1u64 << 53) + 1;
    assert!(matches!(
        sem.try_set_permits(over).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        sem.add_permits(i64::MAX).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        sem.add_permits(i64::MIN).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        sem.release(over).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        sem.try_acquire_many(over).await,
        Err(Error::InvalidArgument(_))
    ));
    let x = a.expirable_semaphore("huge");
    assert!(matches!(
        x.try_set_permits(over).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        x.add_permits(i64::MAX).await,
        Err(Error::InvalidArgument(_))
    ));
    // At the limit the arithmetic is exact.
    assert!(sem.try_set_permits(1 << 53).await.unwrap());
    let all = sem
        .try_acquire_many(1 << 53)
        .await
        .unwrap()
        .expect("all of them");
    assert_eq!(sem.available_permits().await.unwrap(), 0);
    all.release().await.unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), 1 << 53);
}

#[tokio::test]
async fn permits_taken_before_a_delete_do_not_inflate_the_semaphore_created_again() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let name = "reborn";
    let sem = a.semaphore(name);
    assert!(sem.try_set_permits(2).await.unwrap());
    // An ordinary release returns its permits.
    sem.acquire().await.unwrap().release().await.unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), 2);

    // Released, and dropped (released in the background), after the semaphore was deleted
    // and set anew.
    let released = sem.acquire().await.unwrap();
    let dropped = sem.acquire().await.unwrap();
    assert!(sem.delete().await.unwrap());
    assert!(sem.try_set_permits(5).await.unwrap());
    released.release().await.unwrap();
    drop(dropped);
    eventually("the dropped permit's release ran", SETTLE, || {
        granted_records(&server, name).is_empty()
    })
    .await;
    assert_eq!(sem.available_permits().await.unwrap(), 5);
    // The new generation's permits come back as usual.
    let fresh = sem.acquire_many(2).await.unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), 3);
    fresh.release().await.unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), 5);

    // Created again by add_permits, or by a raw release, instead.
    for by_add in [true, false] {
        let old = sem.acquire().await.unwrap();
        assert!(sem.delete().await.unwrap());
        if by_add {
            sem.add_permits(3).await.unwrap();
        } else {
            sem.release(3).await.unwrap();
        }
        old.release().await.unwrap();
        assert_eq!(
            sem.available_permits().await.unwrap(),
            3,
            "by_add: {by_add}"
        );
        let fresh = sem.acquire().await.unwrap();
        fresh.release().await.unwrap();
        assert_eq!(
            sem.available_permits().await.unwrap(),
            3,
            "by_add: {by_add}"
        );
    }

    // forget() drops a record of the current form.
    let kept = sem.acquire().await.unwrap();
    assert_eq!(granted_records(&server, name).len(), 1);
    kept.forget();
    eventually("the forgotten permit's record is gone", SETTLE, || {
        granted_records(&server, name).is_empty()
    })
    .await;
    assert_eq!(sem.available_permits().await.unwrap(), 2);

    // Each creation writes a new generation; delete removes it with the count.
    let generation = || text(&server.cmd(&["GET", &generation_key(name)]));
    let before = generation();
    assert!(sem.delete().await.unwrap());
    assert!(
        !exists(&server, &generation_key(name)),
        "delete ends the generation"
    );
    assert!(sem.try_set_permits(1).await.unwrap());
    assert_ne!(generation(), before, "a new generation");
    assert_idle(&[&a]);
}

#[tokio::test]
async fn a_give_back_returns_permits_only_to_the_generation_they_were_taken_from() {
    // The give-back of an acquire whose caller went away, run by hand so that the semaphore
    // can be deleted and set anew between the acquire and its give-back.
    let server = RedisServer::start();
    let a = client(&server).await;
    let name = "give-back";
    let sem = a.semaphore(name);
    let acquire = classic_script(include_str!("../../lua/semaphore_acquire.lua"));
    let give_back = classic_script(include_str!("../../lua/semaphore_give_back.lua"));
    let mut conn = server.connection();
    let mut take = |attempt: &str| -> i64 {
        acquire
            .key(sem_key(name))
            .key(attempt_key(name, attempt))
            .key(generation_key(name))
            .key(waiters_key(name))
            .arg(1)
            .arg("")
            .arg("0")
            .arg(10_000)
            .invoke(&mut conn)
            .unwrap()
    };
    let mut conn = server.connection();
    let mut undo = |attempt: &str| -> i64 {
        give_back
            .key(sem_key(name))
            .key(attempt_key(name, attempt))
            .key(generation_key(name))
            .key(waiters_key(name))
            .arg(1)
            .arg(10_000)
            .arg("")
            .invoke(&mut conn)
            .unwrap()
    };

    assert!(sem.try_set_permits(2).await.unwrap());
    assert_eq!(take("same"), 1);
    assert_eq!(sem.available_permits().await.unwrap(), 1);
    assert_eq!(undo("same"), 1, "given back to its own generation");
    assert_eq!(sem.available_permits().await.unwrap(), 2);
    assert_eq!(undo("same"), 0, "once");
    assert_eq!(sem.available_permits().await.unwrap(), 2);

    assert_eq!(take("old"), 1);
    assert!(sem.delete().await.unwrap());
    assert!(sem.try_set_permits(5).await.unwrap());
    assert_eq!(undo("old"), 1, "the permit was out");
    assert_eq!(
        sem.available_permits().await.unwrap(),
        5,
        "the new semaphore inflated"
    );
    assert!(granted_records(&server, name).is_empty());
    assert_eq!(undo("old"), 0);
    assert_eq!(sem.available_permits().await.unwrap(), 5);
}

#[tokio::test]
async fn a_semaphore_created_before_generations_keeps_working() {
    // A count and a record without a generation (record 'granted'), as written by hand or by
    // an earlier redisync.
    let server = RedisServer::start();
    let a = client(&server).await;
    let name = "older";
    server.cmd(&["SET", &sem_key(name), "3"]);
    server.cmd(&["SET", &attempt_key(name, "before"), "granted"]);
    let sem = a.semaphore(name);
    let permit = sem.acquire().await.unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), 2);
    permit.release().await.unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), 3);
    assert!(!exists(&server, &generation_key(name)));

    let release = classic_script(include_str!("../../lua/semaphore_release.lua"));
    let mut conn = server.connection();
    let mut retry = || -> i64 {
        release
            .key(sem_key(name))
            .key(attempt_key(name, "before"))
            .key(generation_key(name))
            .key(waiters_key(name))
            .arg(1)
            .invoke(&mut conn)
            .unwrap()
    };
    assert_eq!(retry(), 1, "the older record's permit comes back");
    assert_eq!(sem.available_permits().await.unwrap(), 4);
    assert_eq!(retry(), 0, "once");
    assert_eq!(sem.available_permits().await.unwrap(), 4);
    assert!(sem.delete().await.unwrap());
    assert!(!exists(&server, &sem_key(name)));
    assert!(granted_records(&server, name).is_empty());
}
