//! Fault F8, the server's clock jumps: Redis's wall clock jumps while a lease is held. The
//! server runs under libfaketime ([`RedisServer::start_with_fake_clock`]); the test moves its
//! clock an hour forward or ten seconds back, and watches the reentrant lock, the read-write
//! lock's write hold and the expirable semaphore's permits.
//!
//! Leases are judged by Redis's clock (key TTLs, and lease ends computed from `TIME`), so:
//!
//! * **forward** by far more than the lease, every hold ends in Redis at once. Another client
//!   gets in right away, while the old holder still believes it holds until its next renewal
//!   finds the hold gone (or, for a fixed lease, until its own deadline): two guards report
//!   not-lost at once. That cannot be prevented by a lease, only caught by **fencing**: the
//!   newcomer's token is strictly larger (the fence counter never expires), so a resource
//!   that checks tokens refuses the stale holder's write. Asserted: the larger token, the
//!   refused stale write, and that the stale guard reports lost (its release gets
//!   `NotOwner`). Measured: how long both guards reported not-lost.
//! * **backward**, a hold lives longer in Redis than its lease said (renewals only ever extend
//!   an expiry, never shorten it). That costs liveness, not safety: while the holder's guard
//!   reports not-lost nobody else gets in. Asserted: the remaining lease right after the jump
//!   exceeds the lease, no other client gets in while the holder's guard is not lost, and the
//!   hold ends eventually once its holder is cut off. Measured: how long it outlived its
//!   holder.
//!
//! The timings are printed as `REPORT F8` lines (`cargo test -p redisync-test-harness --test
//! clock_jumps -- --nocapture`); only generous bounds are asserted.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant, UNIX_EPOCH};

use common::{eventually, int, lock_key, ms};
use redisync::prelude::*;
use redisync_test_harness::{ChaosProxy, RedisServer};

/// How long a condition that should hold "soon" may take before the test fails.
const SETTLE: Duration = Duration::from_secs(10);
/// The forward jump: far longer than any lease here.
const FORWARD: i64 = 3600;
/// The backward jump: several times the lease of the backward tests.
const BACKWARD: i64 = 10;

async fn build_client(url: &str, watchdog: Duration, command_timeout: Duration) -> Client {
    Client::builder(url)
        .watchdog_timeout(watchdog)
        .command_timeout(command_timeout)
        .build()
        .await
        .unwrap_or_else(|e| panic!("connecting to {url}: {e}"))
}

// ---------------------------------------------------------------------------------------------
// A fenced resource on a Redis of its own (its clock never moves).
// ---------------------------------------------------------------------------------------------

/// Accepts a write only with a token at least the highest it has seen, checked in Lua as in
/// `examples/fenced.rs`.
struct FencedStore {
    server: RedisServer,
    connection: redis::aio::MultiplexedConnection,
    script: redis::Script,
}

impl FencedStore {
    /// KEYS[1] highest token seen, KEYS[2] the value; ARGV[1] token, ARGV[2] value.
    /// Returns 1 if the write was accepted, 0 if the token is stale.
    const SCRIPT: &'static str = r"
        local highest = tonumber(redis.call('GET', KEYS[1]) or '0')
        if tonumber(ARGV[1]) < highest then
            return 0
        end
        redis.call('SET', KEYS[1], ARGV[1])
        redis.call('SET', KEYS[2], ARGV[2])
        return 1
    ";

    async fn start() -> FencedStore {
        let server = RedisServer::start();
        let connection = redis::Client::open(server.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        FencedStore {
            server,
            connection,
            script: redis::Script::new(Self::SCRIPT),
        }
    }

    async fn write(&self, token: u64, value: &str) -> bool {
        let accepted: i64 = self
            .script
            .key("resource:highest-token")
            .key("resource:value")
            .arg(token)
            .arg(value)
            .invoke_async(&mut self.connection.clone())
            .await
            .unwrap();
        accepted == 1
    }

    fn value(&self) -> String {
        common::text(&self.server.cmd(&["GET", "resource:value"]))
    }
}

// ---------------------------------------------------------------------------------------------
// The primitives under test, behind one face.
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
enum Kind {
    /// A reentrant lock.
    Lock,
    /// The write hold of a read-write lock.
    Write,
    /// A permit of an expirable semaphore with one permit.
    Permit,
}

enum Held {
    Lock(LockGuard),
    Write(WriteGuard),
    Permit(ExpirablePermit),
}

impl Held {
    fn token(&self) -> Option<u64> {
        match self {
            Held::Lock(g) => Some(g.fencing_token()),
            Held::Write(g) => Some(g.fencing_token()),
            Held::Permit(_) => None,
        }
    }

    fn is_lost(&self) -> bool {
        match self {
            Held::Lock(g) => g.is_lost(),
            Held::Write(g) => g.is_lost(),
            Held::Permit(p) => p.is_lost(),
        }
    }

    fn lost(&self) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>> {
        match self {
            Held::Lock(g) => Box::pin(g.lost()),
            Held::Write(g) => Box::pin(g.lost()),
            Held::Permit(p) => Box::pin(p.lost()),
        }
    }

    async fn release(self) -> Result<()> {
        match self {
            Held::Lock(g) => g.unlock().await,
            Held::Write(g) => g.unlock().await,
            Held::Permit(p) => p.release().await,
        }
    }
}

impl Kind {
    /// Creates the primitive where it needs it (the semaphore's single permit).
    async fn prepare(self, client: &Client, name: &str) {
        if let Kind::Permit = self {
            let semaphore = client.expirable_semaphore(name);
            assert!(semaphore.try_set_permits(1).await.unwrap());
        }
    }

    /// Takes a watchdog hold, waiting up to `wait` (`ZERO`: one try).
    async fn acquire(self, client: &Client, name: &str, wait: Duration) -> Option<Held> {
        match self {
            Kind::Lock => client
                .lock(name)
                .try_lock_for(wait)
                .await
                .unwrap()
                .map(Held::Lock),
            Kind::Write => client
                .read_write_lock(name)
                .try_write_for(wait)
                .await
                .unwrap()
                .map(Held::Write),
            Kind::Permit => client
                .expirable_semaphore(name)
                .try_acquire_for(wait)
                .await
                .unwrap()
                .map(Held::Permit),
        }
    }

    /// Milliseconds left of `held`'s lease by Redis's clock.
    fn remaining_ms(self, server: &RedisServer, name: &str, held: &Held) -> i64 {
        match (self, held) {
            (Kind::Lock, _) => int(server, &["PTTL", &lock_key(name)]),
            (Kind::Write, _) => int(server, &["PTTL", &common::rw_hash_key(name)]),
            (Kind::Permit, Held::Permit(permit)) => {
                let leases = common::keys::expirable(name).leases;
                let ends: f64 = common::text(&server.cmd(&["ZSCORE", &leases, permit.id()]))
                    .parse()
                    .unwrap();
                let now = server.server_time().duration_since(UNIX_EPOCH).unwrap();
                ends as i64 - now.as_millis() as i64
            }
            (Kind::Permit, _) => unreachable!("a permit kind holds permits"),
        }
    }

    /// Whether the primitive is back to its initial state once every hold is released.
    async fn assert_free(self, client: &Client, name: &str) {
        match self {
            Kind::Lock => assert!(!client.lock(name).is_locked().await.unwrap()),
            Kind::Write => assert!(!client.read_write_lock(name).is_locked().await.unwrap()),
            Kind::Permit => assert_eq!(
                client
                    .expirable_semaphore(name)
                    .available_permits()
                    .await
                    .unwrap(),
                1,
                "every permit came back"
            ),
        }
    }
}

/// Waits until `client` has confirmed one more renewal, so the hold is in its steady state.
async fn one_more_renewal(client: &Client) {
    let renewals = client.stats().renewals;
    eventually("a renewal", SETTLE, || client.stats().renewals > renewals).await;
}

/// Completes with the instant `held` learned it was lost.
fn lost_at(held: &Held) -> tokio::task::JoinHandle<Instant> {
    let lost = held.lost();
    tokio::spawn(async move {
        lost.await;
        Instant::now()
    })
}

/// `later - earlier`, or zero.
fn since(later: Instant, earlier: Instant) -> Duration {
    later.saturating_duration_since(earlier)
}

// ---------------------------------------------------------------------------------------------
// Forward: the hold ends at once in Redis; fencing catches the stale holder.
// ---------------------------------------------------------------------------------------------

async fn forward_jump(kind: Kind) {
    let server = RedisServer::start_with_fake_clock(&[]);
    let store = FencedStore::start().await;
    let name = "forward";
    let watchdog = Duration::from_secs(3);
    let a = build_client(&server.url(), watchdog, Duration::from_secs(2)).await;
    let b = build_client(&server.url(), watchdog, Duration::from_secs(2)).await;
    kind.prepare(&a, name).await;
    let stale = kind.acquire(&a, name, SETTLE).await.expect("a first hold");
    let token_a = stale.token();
    if let Some(token) = token_a {
        assert!(store.write(token, "a").await);
    }
    one_more_renewal(&a).await;
    let remaining_before = kind.remaining_ms(&server, name, &stale);
    let lost = lost_at(&stale);

    let jumped_at = Instant::now();
    server.set_clock_offset(FORWARD);
    let applied_after = jumped_at.elapsed();
    // Another client gets in: the hold ended in Redis with the jump.
    let mut attempts = 0u32;
    let (fresh, granted_at, stale_knew) = loop {
        attempts += 1;
        if let Some(fresh) = kind.acquire(&b, name, Duration::ZERO).await {
            break (fresh, Instant::now(), stale.is_lost());
        }
        assert!(
            jumped_at.elapsed() < SETTLE,
            "{kind:?}: the hold outlived a jump of {FORWARD} s"
        );
        tokio::time::sleep(ms(5)).await;
    };
    let token_b = fresh.token();
    let mut stale_refused = None;
    if let (Some(old), Some(new)) = (token_a, token_b) {
        assert!(new > old, "{kind:?}: token {new} after {old}");
        assert!(store.write(new, "b").await, "the new holder writes");
        let refused = !store.write(old, "a, late").await;
        assert!(refused, "{kind:?}: the stale token {old} was accepted");
        assert_eq!(store.value(), "b");
        stale_refused = Some(refused);
    }

    // The stale holder learns it lost, at its next renewal.
    let lost_at = tokio::time::timeout(SETTLE, lost)
        .await
        .unwrap_or_else(|_| panic!("{kind:?}: the stale holder never learned it lost"))
        .unwrap();
    assert!(stale.is_lost());
    eventually("the loss is counted", SETTLE, || a.stats().lost_leases >= 1).await;
    let release = stale.release().await;
    assert!(
        matches!(release, Err(Error::NotOwner)),
        "{kind:?}: the stale holder's release: {release:?}"
    );
    assert!(!fresh.is_lost(), "{kind:?}: the new hold is unaffected");
    fresh.release().await.unwrap();
    kind.assert_free(&b, name).await;
    let fence = match (token_a, token_b, stale_refused) {
        (Some(old), Some(new), Some(true)) => {
            format!("with token {new} > {old}; the stale holder's fenced write was refused")
        }
        _ => "(permits carry no fencing token)".to_owned(),
    };
    println!(
        "REPORT F8 forward {kind:?}: +{FORWARD} s under a {watchdog:?} watchdog lease \
         ({remaining_before} ms left); TIME showed the jump {applied_after:?} after the offset \
         was written; another client got in {taken:?} after the jump ({attempts} tries) \
         {fence}; the stale guard knew it was lost at that moment: {stale_knew}; its lost() \
         completed {lost_after:?} after the jump, so both guards reported not-lost for \
         {overlap:?}; its release: NotOwner",
        taken = since(granted_at, jumped_at),
        lost_after = since(lost_at, jumped_at),
        overlap = since(lost_at, granted_at),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_jump_ends_a_lock_hold_at_once_and_the_fence_refuses_the_stale_holder() {
    forward_jump(Kind::Lock).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_jump_ends_a_write_hold_at_once_and_the_fence_refuses_the_stale_holder() {
    forward_jump(Kind::Write).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_jump_ends_an_expirable_permit_at_once_and_its_holder_learns_it() {
    forward_jump(Kind::Permit).await;
}

// ---------------------------------------------------------------------------------------------
// Backward: the hold outlives its lease in Redis; nobody gets in while its guard is valid.
// ---------------------------------------------------------------------------------------------

async fn backward_jump(kind: Kind) {
    let server = RedisServer::start_with_fake_clock(&[]);
    let proxy = ChaosProxy::start(&server);
    let name = "backward";
    // Long enough that renewals through a busy machine keep it.
    let lease = Duration::from_secs(2);
    // The holder goes through the proxy, so that it can be cut off (a crash, as far as
    // Redis can tell); the other client talks to Redis directly.
    let a = build_client(&proxy.url(), lease, Duration::from_secs(1)).await;
    let b = build_client(&server.url(), lease, Duration::from_secs(2)).await;
    kind.prepare(&b, name).await;
    let held = kind.acquire(&a, name, SETTLE).await.expect("a first hold");
    one_more_renewal(&a).await;
    let remaining_before = kind.remaining_ms(&server, name, &held);

    let jumped_at = Instant::now();
    server.set_clock_offset(-BACKWARD);
    let remaining_after = kind.remaining_ms(&server, name, &held);
    assert!(
        remaining_after > lease.as_millis() as i64,
        "{kind:?}: after a jump back by {BACKWARD} s the hold has {remaining_after} ms left"
    );

    // For two leases the holder keeps renewing (its renewals find more than a lease left and
    // leave it): its guard stays valid, and nobody else gets in.
    let lost_before = a.stats().lost_leases;
    let watch_until = Instant::now() + 2 * lease;
    let mut refused = 0u32;
    while Instant::now() < watch_until {
        if let Some(intruder) = kind.acquire(&b, name, Duration::ZERO).await {
            panic!(
                "{kind:?}: another client got in while the holder's guard reported lost = {}",
                held.is_lost() || intruder.is_lost()
            );
        }
        refused += 1;
        tokio::time::sleep(ms(50)).await;
    }
    assert!(!held.is_lost(), "{kind:?}: the renewed hold was lost");
    assert_eq!(a.stats().lost_leases, lost_before);
    let remaining_later = kind.remaining_ms(&server, name, &held);

    // Cut off, the holder learns it lost within its lease; Redis keeps the hold until the
    // jump has been made up for.
    let lost = lost_at(&held);
    proxy.blackhole(true);
    let cut_at = Instant::now();
    let mut tries = 0u32;
    let (taken, taken_at) = loop {
        tries += 1;
        if let Some(taken) = kind.acquire(&b, name, Duration::ZERO).await {
            let at = Instant::now();
            assert!(
                held.is_lost(),
                "{kind:?}: another client got in {:?} after the cut while the holder's guard \
                 still reported not-lost",
                since(at, cut_at)
            );
            break (taken, at);
        }
        assert!(
            cut_at.elapsed() < lease + Duration::from_secs(BACKWARD as u64) + SETTLE,
            "{kind:?}: the hold never ended"
        );
        tokio::time::sleep(ms(50)).await;
    };
    let lost_at = tokio::time::timeout(SETTLE, lost).await.unwrap().unwrap();
    proxy.blackhole(false);
    let release = held.release().await;
    assert!(
        matches!(
            release,
            Err(Error::NotOwner | Error::Redis(_) | Error::Timeout)
        ),
        "{kind:?}: the cut-off holder's release: {release:?}"
    );
    taken.release().await.unwrap();
    kind.assert_free(&b, name).await;
    println!(
        "REPORT F8 backward {kind:?}: -{BACKWARD} s under a {lease:?} watchdog lease; \
         remaining lease {remaining_before} ms before the jump, {remaining_after} ms after, \
         {remaining_later} ms two leases later (renewals leave a longer expiry alone); \
         {refused} tries of another client refused while the holder was valid; holder cut \
         off: its guard reported lost {lost_after:?} later, the other client got in \
         {taken_after:?} after the cut ({tries} tries) and {since_jump:?} after the jump, i.e. \
         the hold outlived its holder's guard by {outlived:?}",
        lost_after = since(lost_at, cut_at),
        taken_after = since(taken_at, cut_at),
        since_jump = since(taken_at, jumped_at),
        outlived = since(taken_at, lost_at),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backward_jump_makes_a_lock_hold_outlive_its_lease_without_overlap() {
    backward_jump(Kind::Lock).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backward_jump_makes_a_write_hold_outlive_its_lease_without_overlap() {
    backward_jump(Kind::Write).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backward_jump_makes_an_expirable_permit_outlive_its_lease_without_overlap() {
    backward_jump(Kind::Permit).await;
}

// ---------------------------------------------------------------------------------------------
// Fixed leases: no renewal to notice a jump, only the guard's own deadline.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_lease_relies_on_the_fence_after_a_forward_jump_and_outlives_itself_after_a_backward_one(
) {
    let server = RedisServer::start_with_fake_clock(&[]);
    let store = FencedStore::start().await;
    let url = server.url();
    let a = build_client(&url, Duration::from_secs(30), Duration::from_secs(2)).await;
    let b = build_client(&url, Duration::from_secs(30), Duration::from_secs(2)).await;

    // Forward: the hold ends in Redis at once, its guard only knows at its own deadline.
    let lease = Duration::from_secs(3);
    let stale = a
        .lock("fixed-forward")
        .lock_with_lease(lease)
        .await
        .unwrap();
    let acquired_at = Instant::now();
    assert!(store.write(stale.fencing_token(), "a").await);
    let jumped_at = Instant::now();
    server.set_clock_offset(FORWARD);
    let fresh = b
        .lock("fixed-forward")
        .try_lock_for(SETTLE)
        .await
        .unwrap()
        .expect("the hold ended with the jump");
    let granted_at = Instant::now();
    let stale_knew = stale.is_lost();
    assert!(fresh.fencing_token() > stale.fencing_token());
    assert!(store.write(fresh.fencing_token(), "b").await);
    assert!(
        !store.write(stale.fencing_token(), "a, late").await,
        "the stale token was accepted"
    );
    assert_eq!(store.value(), "b");
    tokio::time::timeout(lease + SETTLE, stale.lost())
        .await
        .expect("a fixed lease is lost at its deadline");
    let lost_at = Instant::now();
    let release = stale.unlock().await;
    assert!(matches!(release, Err(Error::NotOwner)), "{release:?}");
    fresh.unlock().await.unwrap();

    // Backward: the guard's deadline passes, Redis keeps the hold for the jump's length;
    // nobody gets in meanwhile. A release would still free it: the owner matches.
    let lease = Duration::from_secs(1);
    let held = a
        .lock("fixed-backward")
        .lock_with_lease(lease)
        .await
        .unwrap();
    let held_at = Instant::now();
    let held_lost = held.lost();
    let guard_lost = tokio::spawn(async move {
        held_lost.await;
        Instant::now()
    });
    server.set_clock_offset(FORWARD - BACKWARD);
    let remaining_after = int(&server, &["PTTL", &lock_key("fixed-backward")]);
    assert!(
        remaining_after > lease.as_millis() as i64,
        "{remaining_after} ms left"
    );
    let jumped_back_at = Instant::now();
    let probe = b.lock("fixed-backward");
    let (taken, taken_at) = loop {
        if let Some(taken) = probe.try_lock().await.unwrap() {
            assert!(
                held.is_lost(),
                "another client got in while the guard was valid"
            );
            break (taken, Instant::now());
        }
        assert!(
            jumped_back_at.elapsed() < lease + Duration::from_secs(BACKWARD as u64) + SETTLE,
            "the hold never ended"
        );
        tokio::time::sleep(ms(50)).await;
    };
    let guard_lost_after = since(guard_lost.await.unwrap(), held_at);
    assert!(matches!(held.unlock().await, Err(Error::NotOwner)));
    taken.unlock().await.unwrap();
    println!(
        "REPORT F8 fixed lease: forward +{FORWARD} s under a {forward_lease:?} lease: another \
         client got in {taken:?} after the jump, stale guard lost at that moment: \
         {stale_knew}; its lost() completed {lost_after:?} after the jump ({held_for:?} \
         after the acquire), so both guards reported not-lost for {overlap:?}; stale write \
         refused. Backward -{BACKWARD} s under a {lease:?} lease: {remaining_after} ms left \
         after the jump; the guard reported lost {guard_lost_after:?} after the acquire, the \
         other client got in {taken_after:?} after the jump",
        forward_lease = Duration::from_secs(3),
        taken = since(granted_at, jumped_at),
        lost_after = since(lost_at, jumped_at),
        held_for = since(lost_at, acquired_at),
        overlap = since(lost_at, granted_at),
        taken_after = since(taken_at, jumped_back_at),
    );
}
