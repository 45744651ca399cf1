//! Cancellation sweep over every acquire of every primitive, against a real `redis-server`.
//!
//! Each call is made again and again and dropped at a chosen point: after its N-th pending
//! poll for N = 0, 1, 2, ... until it completes (or goes to sleep waiting), then after a sweep
//! of delays from 0 to a few milliseconds. Every call is swept with the primitive free
//! (uncontended) and held by another client (contended). After every cut, eventually:
//!
//! * no hold is left in Redis: the primitive's keys are exactly as before the call (fencing
//!   counters and short-lived idempotency records aside), so a lock is free or still held only
//!   by the other client, and permits are back to what they were;
//! * no local state: `client.local_state() == LocalState::default()` for every client whose
//!   calls were cut;
//! * no subscription: nobody is subscribed to the primitive's wake-up channel, nor to any other
//!   channel.
//!
//! The rate limiter holds nothing: a decision it allowed spends its units for good. Its sweep
//! checks instead that a cut decision gives its units back, so that the units spent are exactly
//! those of the decisions that returned allowed (see [`sweep_decisions`]).
//!
//! Every test starts its own server, so the tests run in parallel.

mod common;

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::{client, cut_after, cut_at_await, keys, strings, text};
use redis::Value;
use redisync::prelude::*;
use redisync::LocalState;
use redisync_test_harness::{wait_until, RedisServer};

/// How long a cut call may take to leave nothing behind: its clean-up is at once (a
/// background request of a millisecond or so), so this is generous, yet shorter than the
/// 3 s a writer's mark or the 6 s a fair waiter's place lasts without renewal, so that a
/// leak which would expire by itself is still caught.
const SETTLE: Duration = Duration::from_secs(2);
/// A call still pending after this long is asleep, waiting for the holder.
const ASLEEP: Duration = Duration::from_millis(250);
/// The most pending polls swept before a call must have completed or gone to sleep.
const MAX_PENDINGS: usize = 16;
/// The delays after which calls are cut.
const CUTS_US: [u64; 21] = [
    0, 10, 20, 35, 50, 75, 100, 150, 200, 250, 300, 400, 500, 650, 800, 1000, 1300, 1700, 2200,
    3000, 5000,
];
/// The delays after the busy hold is released at which a sleeping call is cut: its wake-up
/// attempt is then on the wire.
const HANDOFF_CUTS_US: [u64; 10] = [0, 50, 100, 200, 300, 500, 800, 1200, 2000, 4000];
/// Leases and waits long enough never to end during a sweep.
const LONG: Duration = Duration::from_secs(60);

type BoxFut<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;
/// Gives back what an acquire got.
type Release = BoxFut<Result<()>>;
/// One acquire call, made afresh for every cut: `Some(release)` when it got something.
type Call = Box<dyn Fn() -> BoxFut<Result<Option<Release>>> + Send + Sync>;
/// Makes the primitive busy from another client; returns how to free it again.
type MakeBusy = Box<dyn Fn() -> BoxFut<Busy> + Send + Sync>;

/// How to free a primitive made busy.
struct Busy(Release);

/// What an acquire hands out, and how it is given back.
trait Held: Send + 'static {
    fn give_back(self) -> Release;
}

impl Held for LockGuard {
    fn give_back(self) -> Release {
        Box::pin(self.unlock())
    }
}

impl Held for ReadGuard {
    fn give_back(self) -> Release {
        Box::pin(self.unlock())
    }
}

impl Held for WriteGuard {
    fn give_back(self) -> Release {
        Box::pin(self.unlock())
    }
}

impl Held for SemaphorePermit {
    fn give_back(self) -> Release {
        Box::pin(self.release())
    }
}

impl Held for ExpirablePermit {
    fn give_back(self) -> Release {
        Box::pin(self.release())
    }
}

impl Held for Leadership {
    fn give_back(self) -> Release {
        Box::pin(self.resign())
    }
}

impl Held for MultiLockGuard {
    fn give_back(self) -> Release {
        Box::pin(self.unlock())
    }
}

fn got<T: Held>(outcome: Result<T>) -> Result<Option<Release>> {
    outcome.map(|held| Some(held.give_back()))
}

fn maybe<T: Held>(outcome: Result<Option<T>>) -> Result<Option<Release>> {
    outcome.map(|held| held.map(Held::give_back))
}

/// For waits that take nothing (a latch).
fn nothing<T>(outcome: Result<T>) -> Result<Option<Release>> {
    outcome.map(|_| None)
}

/// `call!(label, handle, convert, |h| h.acquire())`: a labelled [`Call`] on a clone of
/// `handle`, its outcome passed through `convert` (`got`, `maybe` or `nothing`).
macro_rules! call {
    ($label:expr, $handle:expr, $convert:ident, |$h:ident| $acquire:expr) => {{
        let handle = $handle.clone();
        let call: Call = Box::new(move || {
            let $h = handle.clone();
            Box::pin(async move { $convert($acquire.await) })
        });
        ($label, call)
    }};
}

/// `busy!(handle, |h| async { ... release future ... })`: a [`MakeBusy`].
macro_rules! busy {
    ($handle:expr, |$h:ident| $make:expr) => {{
        let handle = $handle.clone();
        let make: MakeBusy = Box::new(move || {
            let $h = handle.clone();
            Box::pin($make)
        });
        make
    }};
}

// ---------------------------------------------------------------------------------------------
// Server-side state.

/// Keys that are not holds: fencing counters (never go back, by design) and short-lived
/// records of single requests (idempotent releases, given-back attempts, withdrawn marks).
fn is_bookkeeping(key: &str) -> bool {
    key.ends_with(":fence")
        || key.ends_with(":election:term")
        || [":attempt:", ":permit:", ":count_down:", ":waiter:"]
            .iter()
            .any(|part| key.contains(part))
}

/// An inspection connection to the server.
struct Inspector {
    con: Mutex<redis::Connection>,
}

impl Inspector {
    fn new(server: &RedisServer) -> Self {
        Inspector {
            con: Mutex::new(server.connection()),
        }
    }

    fn query(&self, args: &[&str]) -> Value {
        let mut cmd = redis::cmd(args[0]);
        for arg in &args[1..] {
            cmd.arg(*arg);
        }
        cmd.query(&mut *self.con.lock().unwrap())
            .unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    /// The holds under `pattern`: every key but bookkeeping, with its content (sets as sorted
    /// members, without scores), plus semaphore attempt records that still say `granted`
    /// (permits out).
    fn holds(&self, pattern: &str) -> BTreeMap<String, String> {
        let mut keys = strings(&self.query(&["KEYS", pattern]));
        keys.sort();
        let mut holds = BTreeMap::new();
        let records: Vec<&str> = keys
            .iter()
            .map(String::as_str)
            .filter(|key| key.contains(":semaphore:attempt:"))
            .collect();
        if !records.is_empty() {
            let mut mget = vec!["MGET"];
            mget.extend(&records);
            let Value::Array(states) = self.query(&mget) else {
                panic!("MGET: not an array")
            };
            for (key, state) in records.iter().zip(states) {
                if state != Value::Nil && text(&state).starts_with("granted") {
                    holds.insert(key.to_string(), "granted".to_owned());
                }
            }
        }
        for key in keys {
            if is_bookkeeping(&key) {
                continue;
            }
            let kind = text(&self.query(&["TYPE", &key]));
            let content = match kind.as_str() {
                "none" => continue, // expired meanwhile
                "string" => text(&self.query(&["GET", &key])),
                "hash" => {
                    let mut fields: Vec<String> = strings(&self.query(&["HGETALL", &key]))
                        .chunks(2)
                        .map(|pair| pair.join("="))
                        .collect();
                    fields.sort();
                    fields.join(" ")
                }
                "zset" => {
                    let mut members = strings(&self.query(&["ZRANGE", &key, "0", "-1"]));
                    members.sort();
                    members.join(" ")
                }
                other => format!("unexpected type {other}"),
            };
            holds.insert(key, format!("{kind}: {content}"));
        }
        holds
    }

    fn subscribers(&self, channel: &str) -> u64 {
        let reply = strings(&self.query(&["PUBSUB", "NUMSUB", channel]));
        reply[1].parse().unwrap()
    }

    /// The channels some call subscribed (not the clients' lost-notice channels, which
    /// they keep).
    fn channels(&self) -> Vec<String> {
        common::without_lost_notices(strings(&self.query(&["PUBSUB", "CHANNELS", "*"])))
    }
}

// ---------------------------------------------------------------------------------------------
// The sweep.

/// One primitive under test: the calls to sweep, and how to make it busy.
struct Target {
    label: &'static str,
    inspector: Inspector,
    /// The clients whose calls are cut.
    clients: Vec<Client>,
    /// `KEYS` pattern of the primitive's keys.
    pattern: String,
    /// Its documented wake-up channels.
    channels: Vec<String>,
    calls: Vec<(&'static str, Call)>,
    busy: MakeBusy,
}

/// What a sweep saw, for its report.
#[derive(Debug, Default)]
struct Seen {
    cuts: u64,
    acquired: u64,
    none: u64,
    asleep: u64,
}

impl Target {
    async fn flush(&self) {
        flush(&self.clients).await;
    }

    fn quiet(&self, baseline: &BTreeMap<String, String>) -> bool {
        self.clients
            .iter()
            .all(|c| c.local_state() == LocalState::default())
            && self.inspector.holds(&self.pattern) == *baseline
            && self
                .channels
                .iter()
                .all(|channel| self.inspector.subscribers(channel) == 0)
            && self.inspector.channels().is_empty()
    }

    /// Fails unless, soon, nothing is left of the cut call: see the module docs.
    async fn settle(&self, baseline: &BTreeMap<String, String>, what: &str) {
        self.flush().await;
        if wait_until(SETTLE, || self.quiet(baseline)).await {
            return;
        }
        let local: Vec<_> = self.clients.iter().map(Client::local_state).collect();
        panic!(
            "{what} left something behind:\n  local state {local:?}\n  holds {:#?}\n  expected \
             {baseline:#?}\n  subscribers {:?}\n  channels {:?}",
            self.inspector.holds(&self.pattern),
            self.channels
                .iter()
                .map(|c| (c, self.inspector.subscribers(c)))
                .collect::<Vec<_>>(),
            self.inspector.channels()
        );
    }

    /// Tallies one outcome: `true` once the call completed.
    async fn tally(
        &self,
        outcome: Option<Result<Option<Release>>>,
        seen: &mut Seen,
        what: &str,
    ) -> bool {
        match outcome {
            None => {
                seen.cuts += 1;
                false
            }
            Some(Ok(Some(release))) => {
                seen.acquired += 1;
                release
                    .await
                    .unwrap_or_else(|e| panic!("{what}: releasing what it got: {e}"));
                true
            }
            Some(Ok(None)) => {
                seen.none += 1;
                true
            }
            Some(Err(err)) => panic!("{what}: {err}"),
        }
    }

    async fn sweep_call(
        &self,
        label: &str,
        call: &Call,
        busy: bool,
        baseline: &BTreeMap<String, String>,
        seen: &mut Seen,
    ) {
        let mode = if busy { "busy" } else { "free" };
        // 1. After the N-th pending poll, until the call completes or sleeps.
        let mut end = None;
        for pendings in 0..=MAX_PENDINGS {
            let what = format!("{} {label} ({mode}), cut at await {pendings}", self.label);
            match tokio::time::timeout(ASLEEP, cut_at_await(pendings, call())).await {
                Err(_) => {
                    assert!(
                        busy,
                        "{what}: still pending after {ASLEEP:?} with nothing held"
                    );
                    seen.asleep += 1;
                    end = Some("asleep");
                }
                Ok(outcome) => {
                    if self.tally(outcome, seen, &what).await {
                        end = Some("completed");
                    }
                }
            }
            self.settle(baseline, &what).await;
            if end.is_some() {
                break;
            }
        }
        assert!(
            end.is_some(),
            "{} {label} ({mode}): neither completed nor went to sleep within {MAX_PENDINGS} \
             pending polls",
            self.label
        );
        // 2. After a delay.
        for us in CUTS_US {
            let cut = Duration::from_micros(us);
            let what = format!("{} {label} ({mode}), cut after {cut:?}", self.label);
            let outcome = cut_after(cut, call()).await;
            self.tally(outcome, seen, &what).await;
            self.settle(baseline, &what).await;
        }
    }

    /// A call asleep behind the busy hold is woken by its release and cut at a sweep of
    /// delays after it: it gets in (and gives back) or must leave nothing.
    async fn sweep_handoff(
        &self,
        label: &str,
        call: &Call,
        free: &BTreeMap<String, String>,
        seen: &mut Seen,
    ) {
        for us in HANDOFF_CUTS_US {
            let cut = Duration::from_micros(us);
            let what = format!("{} {label}, cut {cut:?} after the holder left", self.label);
            let Busy(release) = (self.busy)().await;
            let mut pending = call();
            let early = tokio::time::timeout(Duration::from_millis(30), &mut pending).await;
            assert!(early.is_err(), "{what}: returned while busy");
            release
                .await
                .unwrap_or_else(|e| panic!("{what}: releasing the busy hold: {e}"));
            let outcome = cut_after(cut, pending).await;
            self.tally(outcome, seen, &what).await;
            self.settle(free, &what).await;
        }
    }

    /// Sweeps every call, free then busy, and prints what it saw.
    async fn sweep(&self) {
        let started = Instant::now();
        let free = self.inspector.holds(&self.pattern);
        self.settle(&free, &format!("{}: before the sweep", self.label))
            .await;
        let mut report = Vec::new();
        for (label, call) in &self.calls {
            let mut seen = Seen::default();
            self.sweep_call(label, call, false, &free, &mut seen).await;
            let free_seen = format!("{seen:?}");
            assert!(seen.acquired + seen.none >= 1, "{label} never completed");

            let mut seen = Seen::default();
            let Busy(release) = (self.busy)().await;
            let held = self.inspector.holds(&self.pattern);
            assert_ne!(held, free, "{}: the busy hold is not visible", self.label);
            self.sweep_call(label, call, true, &held, &mut seen).await;
            release
                .await
                .unwrap_or_else(|e| panic!("{}: releasing the busy hold: {e}", self.label));
            self.settle(
                &free,
                &format!("{} {label}: after the busy hold", self.label),
            )
            .await;
            assert_eq!(seen.acquired, 0, "{label} acquired while busy");
            let busy_seen = format!("{seen:?}");

            let mut handoff = String::new();
            if seen.asleep > 0 {
                let mut seen = Seen::default();
                self.sweep_handoff(label, call, &free, &mut seen).await;
                handoff = format!(", handoff {seen:?}");
            }
            report.push(format!(
                "{label}: free {free_seen}, busy {busy_seen}{handoff}"
            ));
        }
        println!(
            "{}: {} calls swept in {:.1?}\n  {}",
            self.label,
            self.calls.len(),
            started.elapsed(),
            report.join("\n  ")
        );
        for client in &self.clients {
            assert_eq!(
                client.stats().lost_leases,
                0,
                "{}: a lease was lost",
                self.label
            );
        }
    }
}

/// Read-only requests through every pooled connection of each of `clients`, so that requests
/// they queued earlier (an abandoned acquire finishing in the background) have run when the
/// checks start. For holds the checks wait anyway, and this only makes them sharper; the rate
/// limiter's check needs it (see [`sweep_decisions`]).
async fn flush(clients: &[Client]) {
    for client in clients {
        let probe = client.lock("flush-probe");
        for _ in 0..2 * redisync::core::DEFAULT_POOL_SIZE {
            probe.is_locked().await.expect("flush");
        }
    }
}

/// A client whose calls are cut (default options: a fair waiter's place lasts 6 s).
async fn cut_client(server: &RedisServer) -> Client {
    client(server).await
}

fn key_pattern(name: &str) -> String {
    keys::all(name)
}

// ---------------------------------------------------------------------------------------------
// One test per primitive.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_lock_acquire_leaves_nothing_when_cut() {
    let server = RedisServer::start();
    let name = "cut-lock";
    let c = cut_client(&server).await;
    let holder = client(&server).await.lock(name);
    let lock = c.lock(name);
    Target {
        label: "ReentrantLock",
        inspector: Inspector::new(&server),
        clients: vec![c.clone()],
        pattern: key_pattern(name),
        channels: vec![keys::lock(name).wake_channels.of(c.id())],
        calls: vec![
            call!("lock", lock, got, |l| l.lock()),
            call!("lock_with_lease", lock, got, |l| l.lock_with_lease(LONG)),
            call!("try_lock", lock, maybe, |l| l.try_lock()),
            call!("try_lock_for", lock, maybe, |l| l.try_lock_for(LONG)),
            call!("try_lock_with_lease", lock, maybe, |l| l
                .try_lock_with_lease(LONG, LONG)),
        ],
        busy: busy!(holder, |h| async move {
            let guard = h.lock_with_lease(LONG).await.unwrap();
            Busy(Box::pin(guard.unlock()))
        }),
    }
    .sweep()
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fair_lock_acquire_leaves_nothing_when_cut() {
    let server = RedisServer::start();
    let name = "cut-fair";
    let c = cut_client(&server).await;
    let holder = client(&server).await.fair_lock(name);
    let lock = c.fair_lock(name);
    Target {
        label: "FairLock",
        inspector: Inspector::new(&server),
        clients: vec![c.clone()],
        pattern: key_pattern(name),
        channels: vec![],
        calls: vec![
            call!("lock", lock, got, |l| l.lock()),
            call!("lock_with_lease", lock, got, |l| l.lock_with_lease(LONG)),
            call!("try_lock", lock, maybe, |l| l.try_lock()),
            call!("try_lock_for", lock, maybe, |l| l.try_lock_for(LONG)),
            call!("try_lock_with_lease", lock, maybe, |l| l
                .try_lock_with_lease(LONG, LONG)),
        ],
        busy: busy!(holder, |h| async move {
            let guard = h.lock_with_lease(LONG).await.unwrap();
            Busy(Box::pin(guard.unlock()))
        }),
    }
    .sweep()
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_read_acquire_leaves_nothing_when_cut() {
    let server = RedisServer::start();
    let name = "cut-read";
    let c = cut_client(&server).await;
    let holder = client(&server).await.read_write_lock(name);
    let rw = c.read_write_lock(name);
    Target {
        label: "ReadWriteLock read (busy: a writer)",
        inspector: Inspector::new(&server),
        clients: vec![c.clone()],
        pattern: key_pattern(name),
        channels: vec![keys::rw(name).channel],
        calls: vec![
            call!("read", rw, got, |l| l.read()),
            call!("read_with_lease", rw, got, |l| l.read_with_lease(LONG)),
            call!("try_read", rw, maybe, |l| l.try_read()),
            call!("try_read_for", rw, maybe, |l| l.try_read_for(LONG)),
            call!("try_read_with_lease", rw, maybe, |l| l
                .try_read_with_lease(LONG, LONG)),
        ],
        busy: busy!(holder, |h| async move {
            let guard = h.write_with_lease(LONG).await.unwrap();
            Busy(Box::pin(guard.unlock()))
        }),
    }
    .sweep()
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_write_acquire_leaves_nothing_when_cut() {
    let server = RedisServer::start();
    let name = "cut-write";
    let c = cut_client(&server).await;
    let holder = client(&server).await.read_write_lock(name);
    let rw = c.read_write_lock(name);
    Target {
        label: "ReadWriteLock write (busy: a reader)",
        inspector: Inspector::new(&server),
        clients: vec![c.clone()],
        pattern: key_pattern(name),
        channels: vec![keys::rw(name).channel],
        calls: vec![
            call!("write", rw, got, |l| l.write()),
            call!("write_with_lease", rw, got, |l| l.write_with_lease(LONG)),
            call!("try_write", rw, maybe, |l| l.try_write()),
            call!("try_write_for", rw, maybe, |l| l.try_write_for(LONG)),
            call!("try_write_with_lease", rw, maybe, |l| l
                .try_write_with_lease(LONG, LONG)),
        ],
        busy: busy!(holder, |h| async move {
            let guard = h.read_with_lease(LONG).await.unwrap();
            Busy(Box::pin(guard.unlock()))
        }),
    }
    .sweep()
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_semaphore_acquire_leaves_nothing_when_cut() {
    let server = RedisServer::start();
    let name = "cut-semaphore";
    let c = cut_client(&server).await;
    let holder = client(&server).await.semaphore(name);
    assert!(holder.try_set_permits(3).await.unwrap());
    let sem = c.semaphore(name);
    Target {
        label: "Semaphore",
        inspector: Inspector::new(&server),
        clients: vec![c.clone()],
        pattern: key_pattern(name),
        channels: vec![keys::semaphore(name).wake_channels.of(c.id())],
        calls: vec![
            call!("acquire", sem, got, |s| s.acquire()),
            call!("acquire_many(2)", sem, got, |s| s.acquire_many(2)),
            call!("try_acquire", sem, maybe, |s| s.try_acquire()),
            call!("try_acquire_many(2)", sem, maybe, |s| s.try_acquire_many(2)),
            call!("try_acquire_for", sem, maybe, |s| s.try_acquire_for(LONG)),
            call!("try_acquire_many_for(2)", sem, maybe, |s| s
                .try_acquire_many_for(2, LONG)),
        ],
        busy: busy!(holder, |h| async move {
            let permits = h.acquire_many(3).await.unwrap();
            Busy(Box::pin(permits.release()))
        }),
    }
    .sweep()
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_expirable_semaphore_acquire_leaves_nothing_when_cut() {
    let server = RedisServer::start();
    let name = "cut-expirable";
    let c = cut_client(&server).await;
    let holder = client(&server).await.expirable_semaphore(name);
    assert!(holder.try_set_permits(2).await.unwrap());
    let sem = c.expirable_semaphore(name);
    Target {
        label: "ExpirableSemaphore",
        inspector: Inspector::new(&server),
        clients: vec![c.clone()],
        pattern: key_pattern(name),
        channels: vec![keys::expirable(name).wake_channels.of(c.id())],
        calls: vec![
            call!("acquire", sem, got, |s| s.acquire()),
            call!("acquire_with_lease", sem, got, |s| s
                .acquire_with_lease(LONG)),
            call!("try_acquire", sem, maybe, |s| s.try_acquire()),
            call!("try_acquire_for", sem, maybe, |s| s.try_acquire_for(LONG)),
            call!("try_acquire_with_lease", sem, maybe, |s| s
                .try_acquire_with_lease(LONG, LONG)),
        ],
        busy: busy!(holder, |h| async move {
            let first = h.acquire_with_lease(LONG).await.unwrap();
            let second = h.acquire_with_lease(LONG).await.unwrap();
            Busy(Box::pin(async move {
                first.release().await?;
                second.release().await
            }))
        }),
    }
    .sweep()
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_latch_wait_leaves_nothing_when_cut() {
    let server = RedisServer::start();
    let name = "cut-latch";
    let c = cut_client(&server).await;
    let counter = client(&server).await.count_down_latch(name);
    let latch = c.count_down_latch(name);
    Target {
        label: "CountDownLatch (busy: armed)",
        inspector: Inspector::new(&server),
        clients: vec![c.clone()],
        pattern: key_pattern(name),
        channels: vec![keys::latch(name).channel],
        calls: vec![
            call!("wait", latch, nothing, |l| l.wait()),
            call!("wait_for", latch, nothing, |l| l.wait_for(LONG)),
        ],
        busy: busy!(counter, |h| async move {
            assert!(h.try_set_count(1).await.unwrap());
            Busy(Box::pin(async move { h.count_down().await }))
        }),
    }
    .sweep()
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_multi_lock_acquire_leaves_nothing_when_cut() {
    let server = RedisServer::start();
    let c = cut_client(&server).await;
    let d = cut_client(&server).await;
    let holder = client(&server).await.lock("ml-b");
    // Locks from two clients, listed out of order: three groups of one script each.
    let multi = c.multi_lock([c.lock("ml-c"), d.lock("ml-b"), c.lock("ml-a")]);
    let single = c.multi_lock([c.lock("ml-b"), c.lock("ml-a"), c.lock("ml-c")]);
    Target {
        label: "MultiLock over ml-a, ml-b, ml-c (busy: ml-b held)",
        inspector: Inspector::new(&server),
        clients: vec![c.clone(), d.clone()],
        pattern: "redisync:{ml-*".to_owned(),
        channels: ["ml-a", "ml-b", "ml-c"]
            .iter()
            .flat_map(|n| [&c, &d].map(|x| keys::lock(n).wake_channels.of(x.id())))
            .collect(),
        calls: vec![
            call!("lock (two clients)", multi, got, |m| m.lock()),
            call!("lock (one client)", single, got, |m| m.lock()),
            call!("lock_with_lease", multi, got, |m| m.lock_with_lease(LONG)),
            call!("try_lock", multi, maybe, |m| m.try_lock()),
            call!("try_lock_for", multi, maybe, |m| m.try_lock_for(LONG)),
            call!("try_lock_with_lease", multi, maybe, |m| m
                .try_lock_with_lease(LONG, LONG)),
        ],
        busy: busy!(holder, |h| async move {
            let guard = h.lock_with_lease(LONG).await.unwrap();
            Busy(Box::pin(guard.unlock()))
        }),
    }
    .sweep()
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_campaign_leaves_nothing_when_cut() {
    let server = RedisServer::start();
    let name = "cut-election";
    let c = cut_client(&server).await;
    let holder = client(&server).await.leader_election(name);
    let election = c.leader_election(name);
    Target {
        label: "LeaderElection",
        inspector: Inspector::new(&server),
        clients: vec![c.clone()],
        pattern: key_pattern(name),
        channels: vec![keys::election(name).wake_channels.of(c.id())],
        calls: vec![
            call!("campaign", election, got, |e| e.campaign("cut")),
            call!("try_campaign", election, maybe, |e| e.try_campaign("cut")),
            call!("campaign_for", election, maybe, |e| e
                .campaign_for("cut", LONG)),
            call!("acquire_with fixed lease", election, maybe, |e| e
                .acquire_with(Wait::Forever, Lease::Fixed(LONG))),
        ],
        busy: busy!(holder, |h| async move {
            let leadership = h.campaign("holder").await.unwrap();
            Busy(Box::pin(leadership.resign()))
        }),
    }
    .sweep()
    .await;
}

// ---------------------------------------------------------------------------------------------
// The rate limiter: no hold, but units.

/// One decision of the rate limiter, made afresh for every cut: `Ok(true)` when it was
/// allowed (its units are then spent for good).
type Decide = Box<dyn Fn() -> BoxFut<Result<bool>> + Send + Sync>;

/// A limiter's theoretical arrival time (`tat`, server µs), the whole of what its decisions
/// spend; `None` before the first allowed decision.
fn arrival_time(inspector: &Inspector, state: &str) -> Option<i64> {
    match inspector.query(&["HGET", state, "tat"]) {
        Value::Nil => None,
        tat => text(&tat).parse().ok(),
    }
}

/// Cuts every decision of `decide` as [`Target::sweep_call`] cuts an acquire, and after every
/// cut checks the limiter's promise: a decision whose caller went away gives its units back
/// provided no decision was allowed after it, so the arrival time moves by exactly `unit_us`
/// per decision that returned allowed, and nothing is left locally or subscribed. Each check
/// first flushes the client's connections: a cut decision still on its way to Redis must have
/// run before the next decision is made, or the next one, allowed after it, would rightly keep
/// its units spent. `busy`: the limiter allows nothing, so a waiting call sleeps.
async fn sweep_decisions(
    label: &str,
    client: &Client,
    inspector: &Inspector,
    state: &str,
    unit_us: i64,
    decide: &Decide,
    busy: bool,
) -> (u64, u64, u64, u64) {
    let (mut cuts, mut allowed, mut refused, mut asleep) = (0u64, 0u64, 0u64, 0u64);
    let mut expected = arrival_time(inspector, state).expect("a spent unit before the sweep");
    let settle = |what: String, expected: i64| async move {
        flush(std::slice::from_ref(client)).await;
        let quiet = || {
            client.local_state() == LocalState::default()
                && arrival_time(inspector, state) == Some(expected)
                && inspector.channels().is_empty()
        };
        if !wait_until(SETTLE, quiet).await {
            panic!(
                "{what}: arrival time {:?}, expected {expected} ({} units off), local state \
                 {:?}, channels {:?}",
                arrival_time(inspector, state),
                arrival_time(inspector, state).map_or(0, |tat| (tat - expected) / unit_us),
                client.local_state(),
                inspector.channels()
            );
        }
    };
    let mut tally = |outcome: Option<Result<bool>>, what: &str, expected: &mut i64| match outcome {
        None => cuts += 1,
        Some(Ok(true)) => {
            allowed += 1;
            *expected += unit_us;
        }
        Some(Ok(false)) => refused += 1,
        Some(Err(err)) => panic!("{what}: {err}"),
    };
    let mode = if busy { "busy" } else { "free" };
    for pendings in 0..=MAX_PENDINGS {
        let what = format!("RateLimiter {label} ({mode}), cut at await {pendings}");
        let completed = match tokio::time::timeout(ASLEEP, cut_at_await(pendings, decide())).await {
            Err(_) => {
                assert!(
                    busy,
                    "{what}: still pending after {ASLEEP:?} with units free"
                );
                asleep += 1;
                true
            }
            Ok(outcome) => {
                let completed = outcome.is_some();
                tally(outcome, &what, &mut expected);
                completed
            }
        };
        settle(what, expected).await;
        if completed {
            break;
        }
    }
    for us in CUTS_US {
        let cut = Duration::from_micros(us);
        let what = format!("RateLimiter {label} ({mode}), cut after {cut:?}");
        let outcome = cut_after(cut, decide()).await;
        tally(outcome, &what, &mut expected);
        settle(what, expected).await;
    }
    (cuts, allowed, refused, asleep)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rate_limiter_decision_gives_its_units_back_when_cut() {
    let server = RedisServer::start();
    let inspector = Inspector::new(&server);
    let c = cut_client(&server).await;
    // One unit per 1,000 s: nothing refills during the test, so the arrival time counts the
    // units spent exactly. The free limiter's burst outlasts the sweep; the busy one has none,
    // so after one unit it allows nothing for 1,000 s.
    let unit = Duration::from_secs(1000);
    let unit_us = unit.as_micros() as i64;
    let free = c.rate_limiter("cut-rate-free");
    free.set_rate(Rate::new(1, unit).burst(10_000))
        .await
        .unwrap();
    let busy = c.rate_limiter("cut-rate-busy");
    busy.set_rate(Rate::new(1, unit)).await.unwrap();
    let mut report = Vec::new();
    for (limiter, name, is_busy) in [
        (&free, "cut-rate-free", false),
        (&busy, "cut-rate-busy", true),
    ] {
        assert!(limiter.try_acquire(1).await.unwrap().allowed);
        let state = keys::rate(name).state;
        let decisions: Vec<(&str, Decide)> = vec![
            ("try_acquire", {
                let l = limiter.clone();
                Box::new(move || {
                    let l = l.clone();
                    Box::pin(async move { l.try_acquire(1).await.map(|d| d.allowed) })
                })
            }),
            ("acquire", {
                let l = limiter.clone();
                Box::new(move || {
                    let l = l.clone();
                    Box::pin(async move { l.acquire(1).await.map(|()| true) })
                })
            }),
            ("acquire_for", {
                let l = limiter.clone();
                Box::new(move || {
                    let l = l.clone();
                    Box::pin(async move { l.acquire_for(1, LONG).await })
                })
            }),
        ];
        for (label, decide) in &decisions {
            let seen =
                sweep_decisions(label, &c, &inspector, &state, unit_us, decide, is_busy).await;
            if is_busy {
                assert_eq!(seen.1, 0, "{label} allowed on a limiter with nothing left");
            } else {
                assert!(seen.1 >= 1, "{label} was never allowed");
            }
            report.push(format!(
                "{label} ({}): cuts {}, allowed {}, refused {}, asleep {}",
                if is_busy { "busy" } else { "free" },
                seen.0,
                seen.1,
                seen.2,
                seen.3
            ));
        }
    }
    println!("RateLimiter:\n  {}", report.join("\n  "));
    assert_eq!(c.stats().lost_leases, 0);
}
