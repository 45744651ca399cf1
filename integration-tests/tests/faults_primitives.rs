//! Chaos tests of the primitives other than the plain lock, against a real `redis-server`:
//! many tasks on several clients acquire and release while connections are killed, scripts
//! are flushed, Redis pauses or restarts, and calls are cancelled at random points. Each test
//! checks its safety invariant at every step and "nothing lost" at quiescence:
//!
//! * semaphores: holders never exceed the permits; at the end every permit is back (classic
//!   and expirable), including the permits of holders that crashed or shut down;
//! * count-down latch: the count never goes below zero or back up, no waiter returns before
//!   the final count-down started, and every waiter returns, through pub/sub kills and a
//!   restart of Redis;
//! * multi-lock: exclusive with increasing fencing tokens, and no sub-lock is left held after
//!   cancellations and killed connections;
//! * fair lock: exclusive, every live waiter gets the lock exactly once, and the queue ends
//!   empty;
//! * rate limiter: no window of Redis's clock admits more than the rate and its burst, though
//!   decisions are cut off, time out and lose their connections (each then gives its units
//!   back only while no later decision was allowed), and nothing is left pending at the end.
//!
//! Each test prints a `REPORT` line: operations run, faults injected, violations found (the
//! test fails unless there are none). The schedules are random but seeded; the invariants do
//! not depend on the interleaving, so the outcome is the same on every run.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{
    cut_after, cut_at_await, eventually, int, most_in_one_window, ms, wake_subscribers, zcard,
    Admitted,
};
use futures_util::FutureExt;
use redis::Value;
use redisync::prelude::*;
use redisync::LocalState;
use redisync_test_harness::RedisServer;

/// How long a condition that should hold "soon" may take before the test fails.
const SETTLE: Duration = Duration::from_secs(15);

// ---------------------------------------------------------------------------------------------
// Helpers: a seeded random source, tallies, fault injection.

/// xorshift64*: small, seeded, good enough to pick operations and delays.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn micros(&mut self, max: u64) -> Duration {
        Duration::from_micros(self.below(max + 1))
    }

    fn millis(&mut self, min: u64, max: u64) -> Duration {
        ms(min + self.below(max - min + 1))
    }

    fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, self.below(i as u64 + 1) as usize);
        }
    }
}

/// Counters of one test, by label, and the violations found.
#[derive(Default)]
struct Tally {
    counts: Mutex<BTreeMap<&'static str, u64>>,
    violations: Mutex<Vec<String>>,
}

impl Tally {
    fn add(&self, what: &'static str, n: u64) {
        *self.counts.lock().unwrap().entry(what).or_default() += n;
    }

    fn get(&self, what: &'static str) -> u64 {
        self.counts.lock().unwrap().get(what).copied().unwrap_or(0)
    }

    fn violation(&self, what: String) {
        eprintln!("VIOLATION: {what}");
        self.violations.lock().unwrap().push(what);
    }

    /// Prints the report line and fails the test if any violation was found.
    fn report(&self, test: &str, faults: &BTreeMap<String, u64>, elapsed: Duration) {
        let counts = self.counts.lock().unwrap().clone();
        let violations = self.violations.lock().unwrap().clone();
        let injected: u64 = faults.values().sum();
        println!(
            "REPORT {test}: operations {}, faults injected {injected} {faults:?}, violations {} \
             (expected 0); details {counts:?}; {elapsed:.1?}",
            counts.get("operations").copied().unwrap_or(0),
            violations.len(),
        );
        assert!(
            violations.is_empty(),
            "{test}: {} violations: {violations:#?}",
            violations.len()
        );
    }
}

/// Redis unreachable or too slow: what a fault may legitimately cause.
fn is_fault(err: &Error) -> bool {
    matches!(err, Error::Redis(_) | Error::Timeout)
}

/// One fault, injected through a helper connection.
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// `CLIENT KILL TYPE normal`: every command connection (not the caller's).
    KillNormal,
    /// `CLIENT KILL TYPE pubsub`: every subscriber connection.
    KillPubsub,
    /// `SCRIPT FLUSH`: every cached script is gone.
    ScriptFlush,
    /// `CLIENT PAUSE <ms>`: Redis answers nobody for that long.
    Pause(u64),
}

impl Fault {
    fn label(self) -> String {
        match self {
            Fault::KillNormal => "CLIENT KILL TYPE normal".into(),
            Fault::KillPubsub => "CLIENT KILL TYPE pubsub".into(),
            Fault::ScriptFlush => "SCRIPT FLUSH".into(),
            Fault::Pause(ms) => format!("CLIENT PAUSE {ms}"),
        }
    }

    fn inject(self, server: &RedisServer) -> bool {
        let pause;
        let args: Vec<&str> = match self {
            Fault::KillNormal => vec!["CLIENT", "KILL", "TYPE", "normal"],
            Fault::KillPubsub => vec!["CLIENT", "KILL", "TYPE", "pubsub"],
            Fault::ScriptFlush => vec!["SCRIPT", "FLUSH"],
            Fault::Pause(ms) => {
                pause = ms.to_string();
                vec!["CLIENT", "PAUSE", pause.as_str()]
            }
        };
        server.try_cmd(&args).is_ok()
    }
}

/// A thread that injects `plan` round and round, one fault every `every`, until stopped.
struct Chaos {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<BTreeMap<String, u64>>,
}

impl Chaos {
    fn start(server: Arc<RedisServer>, plan: &'static [Fault], every: Duration) -> Chaos {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut injected = BTreeMap::new();
            for fault in plan.iter().cycle() {
                std::thread::sleep(every);
                if flag.load(Ordering::SeqCst) {
                    break;
                }
                if fault.inject(&server) {
                    *injected.entry(fault.label()).or_default() += 1;
                }
            }
            injected
        });
        Chaos { stop, thread }
    }

    /// Stops injecting and returns how many faults of each kind were injected.
    async fn stop(self) -> BTreeMap<String, u64> {
        self.stop.store(true, Ordering::SeqCst);
        let thread = self.thread;
        tokio::task::spawn_blocking(move || thread.join().expect("the chaos thread panicked"))
            .await
            .unwrap()
    }
}

async fn command_client(server: &RedisServer, command_timeout: Duration) -> Client {
    Client::builder(server.url())
        .command_timeout(command_timeout)
        .build()
        .await
        .expect("connect")
}

async fn join_all<T>(tasks: Vec<tokio::task::JoinHandle<T>>, within: Duration) -> Vec<T> {
    let mut out = Vec::with_capacity(tasks.len());
    for task in tasks {
        out.push(
            tokio::time::timeout(within, task)
                .await
                .expect("a task did not finish")
                .expect("a task panicked"),
        );
    }
    out
}

async fn assert_idle(clients: &[Client], what: &str) {
    for (i, client) in clients.iter().enumerate() {
        eventually(
            format_args!("{what}: client {i} has no local state"),
            SETTLE,
            || client.local_state() == LocalState::default(),
        )
        .await;
    }
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::Nil => None,
        value => Some(
            redis::from_redis_value_ref::<String>(value)
                .unwrap_or_else(|e| panic!("expected a string, got {value:?}: {e}")),
        ),
    }
}

fn keys(server: &RedisServer, pattern: &str) -> Vec<String> {
    redis::from_redis_value_ref::<Vec<String>>(&server.cmd(&["KEYS", pattern])).unwrap()
}

fn pubsub_channels(server: &RedisServer, pattern: &str) -> Vec<String> {
    redis::from_redis_value_ref::<Vec<String>>(&server.cmd(&["PUBSUB", "CHANNELS", pattern]))
        .unwrap()
}

/// Records a violation when a condition did not come true (instead of failing at once, so
/// that the report still prints).
trait OrViolation {
    fn or_violation(self, tally: &Tally, what: impl FnOnce() -> String);
}

impl OrViolation for bool {
    fn or_violation(self, tally: &Tally, what: impl FnOnce() -> String) {
        if !self {
            tally.violation(what());
        }
    }
}

/// Polls `cond` every 10 ms until it holds or `timeout` passes; returns whether it held.
async fn holds_within(timeout: Duration, cond: impl FnMut() -> bool) -> bool {
    redisync_test_harness::wait_until(timeout, cond).await
}

/// Counts `n` more holders of something that allows at most `limit` at once; records a
/// violation if that is exceeded. [`leave`] counts them out again.
fn enter(in_use: &AtomicI64, max_seen: &AtomicI64, n: i64, limit: i64, tally: &Tally) {
    let now = in_use.fetch_add(n, Ordering::SeqCst) + n;
    max_seen.fetch_max(now, Ordering::SeqCst);
    if now > limit {
        tally.violation(format!("{now} holders at once, at most {limit} allowed"));
    }
}

fn leave(in_use: &AtomicI64, n: i64) {
    in_use.fetch_sub(n, Ordering::SeqCst);
}

// ---------------------------------------------------------------------------------------------
// Semaphores.

const PERMITS: i64 = 3;
/// Faults for the semaphore runs: connections killed, scripts flushed, Redis paused.
const SEMAPHORE_FAULTS: &[Fault] = &[
    Fault::KillNormal,
    Fault::ScriptFlush,
    Fault::Pause(300),
    Fault::KillNormal,
    Fault::KillPubsub,
];

struct SemRun {
    stop: AtomicBool,
    in_use: AtomicI64,
    max_seen: AtomicI64,
    tally: Tally,
    /// Per client: permits that a watchdog renewal found gone because the worker had just
    /// released them by id (see `expirable_worker`); the client counts those as lost leases.
    renewed_after_release_by_id: Mutex<HashMap<usize, u64>>,
}

impl SemRun {
    fn new() -> Arc<SemRun> {
        Arc::new(SemRun {
            stop: AtomicBool::new(false),
            in_use: AtomicI64::new(0),
            max_seen: AtomicI64::new(0),
            tally: Tally::default(),
            renewed_after_release_by_id: Mutex::default(),
        })
    }

    fn running(&self) -> bool {
        !self.stop.load(Ordering::SeqCst)
    }

    /// Tallies an acquire outcome; returns what was acquired.
    fn outcome<P>(&self, outcome: Option<Result<Option<P>>>, what: &str) -> Option<P> {
        match outcome {
            None => self.tally.add("cancelled", 1),
            Some(Ok(None)) => self.tally.add("none free", 1),
            Some(Ok(Some(permit))) => {
                self.tally.add("acquired", 1);
                return Some(permit);
            }
            Some(Err(err)) if is_fault(&err) => self.tally.add("fault errors", 1),
            Some(Err(err)) => self
                .tally
                .violation(format!("{what}: unexpected error {err}")),
        }
        None
    }

    fn released(&self, outcome: Option<Result<()>>, what: &str) {
        match outcome {
            None => self.tally.add("release cut", 1),
            Some(Ok(())) => {}
            Some(Err(err)) if is_fault(&err) => self.tally.add("release fault errors", 1),
            Some(Err(err)) => self
                .tally
                .violation(format!("{what}: release failed: {err}")),
        }
    }
}

/// One task of the classic semaphore run: random acquires (cut, timed out, waited for), holds
/// counted in-process, random releases (awaited, dropped, cut).
async fn classic_worker(sem: Semaphore, seed: u64, run: Arc<SemRun>) {
    let mut rng = Rng::new(seed);
    let long = Duration::from_secs(8);
    while run.running() {
        let n: u64 = if rng.below(4) == 0 { 2 } else { 1 };
        run.tally.add("operations", 1);
        let some = |r: Result<SemaphorePermit>| r.map(Some);
        let outcome = match rng.below(7) {
            0 => cut_after(rng.micros(3000), sem.acquire_many(n))
                .await
                .map(some),
            1 => cut_at_await(rng.below(6) as usize, sem.acquire_many(n))
                .await
                .map(some),
            2 => tokio::time::timeout(rng.millis(1, 60), sem.acquire_many(n))
                .await
                .ok()
                .map(some),
            3 => Some(sem.try_acquire_many_for(n, rng.millis(0, 80)).await),
            4 => Some(sem.try_acquire_many(n).await),
            5 => cut_after(rng.micros(2000), sem.try_acquire_many(n)).await,
            _ => tokio::time::timeout(long, sem.acquire_many(n))
                .await
                .ok()
                .map(some),
        };
        let Some(permit) = run.outcome(outcome, "classic acquire") else {
            continue;
        };
        assert_eq!(permit.count(), n);
        enter(&run.in_use, &run.max_seen, n as i64, PERMITS, &run.tally);
        tokio::time::sleep(rng.micros(4000)).await;
        leave(&run.in_use, n as i64);
        match rng.below(3) {
            0 => run.released(Some(permit.release().await), "classic"),
            1 => drop(permit),
            _ => run.released(
                cut_at_await(rng.below(3) as usize, permit.release()).await,
                "classic",
            ),
        }
    }
}

fn classic_key(name: &str) -> String {
    common::keys::semaphore(name).permits
}

fn expirable_key(name: &str) -> String {
    common::keys::expirable(name).permits
}

fn leases_key(name: &str) -> String {
    common::keys::expirable(name).leases
}

/// The classic semaphore's counter, `None` if absent.
fn raw_count(server: &RedisServer, key: &str) -> Option<i64> {
    text(&server.cmd(&["GET", key])).map(|s| s.parse().expect("a counter"))
}

/// Attempt records that still say `granted`: permits some caller believes it holds.
fn granted_records(server: &RedisServer, name: &str) -> usize {
    keys(
        server,
        &common::keys::semaphore(name).attempt_records.of("*"),
    )
    .iter()
    .filter(|key| {
        text(&server.cmd(&["GET", key])).is_some_and(|state| state.starts_with("granted"))
    })
    .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classic_semaphore_never_exceeds_and_never_loses_permits_through_faults() {
    let started = Instant::now();
    let server = Arc::new(RedisServer::start());
    let name = "chaos-semaphore";
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(command_client(&server, Duration::from_secs(2)).await);
    }
    assert!(clients[0]
        .semaphore(name)
        .try_set_permits(PERMITS as u64)
        .await
        .unwrap());
    let run = SemRun::new();
    let workers: Vec<_> = (0..12)
        .map(|i| {
            let sem = clients[i % clients.len()].semaphore(name);
            tokio::spawn(classic_worker(sem, 1000 + i as u64, run.clone()))
        })
        .collect();
    let chaos = Chaos::start(server.clone(), SEMAPHORE_FAULTS, ms(250));
    tokio::time::sleep(Duration::from_secs(6)).await;
    let faults = chaos.stop().await;
    run.stop.store(true, Ordering::SeqCst);
    join_all(workers, Duration::from_secs(30)).await;

    // Quiescence: every permit back, no caller believes it still holds one, nothing waits.
    let key = classic_key(name);
    holds_within(SETTLE, || {
        raw_count(&server, &key) == Some(PERMITS) && granted_records(&server, name) == 0
    })
    .await
    .or_violation(&run.tally, || {
        format!(
            "at quiescence: {:?} permits available (want {PERMITS}), {} permits still granted",
            raw_count(&server, &key),
            granted_records(&server, name)
        )
    });
    assert_eq!(
        clients[1]
            .semaphore(name)
            .available_permits()
            .await
            .unwrap(),
        PERMITS
    );
    assert_idle(&clients, "classic semaphore").await;
    assert_eq!(pubsub_channels(&server, "*"), Vec::<String>::new());
    run.tally
        .add("max holders", run.max_seen.load(Ordering::SeqCst) as u64);
    assert!(
        run.tally.get("acquired") >= 100,
        "too few acquires to judge"
    );
    assert!(run.tally.get("cancelled") >= 20, "too few cancellations");
    assert!(
        faults.values().sum::<u64>() >= 10,
        "too few faults: {faults:?}"
    );
    run.tally.report(
        "classic_semaphore_never_exceeds_and_never_loses_permits_through_faults \
         (invariant: holders <= 3 at every instant; 3 available at quiescence)",
        &faults,
        started.elapsed(),
    );
}

/// One task of the expirable semaphore run.
async fn expirable_worker(sem: ExpirableSemaphore, client: usize, seed: u64, run: Arc<SemRun>) {
    let mut rng = Rng::new(seed);
    let long = Duration::from_secs(8);
    let lease = Duration::from_secs(5);
    while run.running() {
        run.tally.add("operations", 1);
        let some = |r: Result<ExpirablePermit>| r.map(Some);
        let outcome = match rng.below(8) {
            0 => cut_after(rng.micros(3000), sem.acquire()).await.map(some),
            1 => cut_at_await(rng.below(6) as usize, sem.acquire_with_lease(lease))
                .await
                .map(some),
            2 => tokio::time::timeout(rng.millis(1, 60), sem.acquire())
                .await
                .ok()
                .map(some),
            3 => Some(sem.try_acquire_for(rng.millis(0, 80)).await),
            4 => Some(sem.try_acquire().await),
            5 => {
                cut_after(
                    rng.micros(3000),
                    sem.try_acquire_with_lease(rng.millis(0, 50), lease),
                )
                .await
            }
            6 => tokio::time::timeout(long, sem.acquire_with_lease(lease))
                .await
                .ok()
                .map(some),
            _ => tokio::time::timeout(long, sem.acquire())
                .await
                .ok()
                .map(some),
        };
        let Some(permit) = run.outcome(outcome, "expirable acquire") else {
            continue;
        };
        enter(&run.in_use, &run.max_seen, 1, PERMITS, &run.tally);
        tokio::time::sleep(rng.micros(4000)).await;
        if permit.is_lost() {
            run.tally.violation(format!(
                "permit {} was lost while held (lease {lease:?})",
                permit.id()
            ));
        }
        leave(&run.in_use, 1);
        match rng.below(4) {
            0 => run.released(Some(permit.release().await), "expirable"),
            1 => drop(permit),
            2 => run.released(
                cut_at_await(rng.below(3) as usize, permit.release()).await,
                "expirable",
            ),
            _ => {
                // Released by id, then dropped: the drop must not give it back twice. Until
                // the drop, the guard's renewal goes on: a renewal round on the wire meanwhile
                // finds the permit gone and marks it lost, rightly, and the client counts a
                // lost lease (likely on a loaded machine). Once the guard is dropped no renewal
                // reply can mark it any more, so whether it was marked is known then.
                let (lost, id) = (permit.lost(), permit.id().to_owned());
                let released = sem.release_by_id(&id).await;
                drop(permit);
                // Only a permit still live when released (`true`): a lease that ran out
                // first is a loss this does not excuse.
                if matches!(released, Ok(true)) && lost.now_or_never().is_some() {
                    *run.renewed_after_release_by_id
                        .lock()
                        .unwrap()
                        .entry(client)
                        .or_default() += 1;
                }
                match released {
                    Ok(true) => {}
                    Ok(false) => run.tally.violation(format!(
                        "release_by_id({}) of a live permit returned false",
                        id
                    )),
                    Err(err) if is_fault(&err) => run.tally.add("release fault errors", 1),
                    Err(err) => run.tally.violation(format!("release_by_id failed: {err}")),
                }
            }
        }
    }
}

/// A holder that dies: its own runtime, a client whose watchdog lease is `lease`, permits
/// taken and leaked, then the runtime torn down (no destructor runs, nothing is released;
/// the watchdog dies with it). Returns how many permits it took and when it died.
async fn crash_holder(url: String, name: &'static str, lease: Duration) -> (usize, Instant) {
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let taken = runtime.block_on(async {
            let client = Client::builder(url)
                .watchdog_timeout(lease)
                .command_timeout(Duration::from_secs(2))
                .build()
                .await
                .expect("connect");
            let sem = client.expirable_semaphore(name);
            let mut taken = 0;
            // One permit renewed by the watchdog, one with a fixed lease.
            if let Ok(Some(permit)) = sem.try_acquire_for(Duration::from_secs(3)).await {
                std::mem::forget(permit);
                taken += 1;
            }
            if let Ok(Some(permit)) = sem
                .try_acquire_with_lease(Duration::from_secs(3), lease)
                .await
            {
                std::mem::forget(permit);
                taken += 1;
            }
            taken
        });
        drop(runtime);
        (taken, Instant::now())
    });
    tokio::task::spawn_blocking(move || thread.join().expect("the crashed holder panicked"))
        .await
        .unwrap()
}

/// A holder whose client shuts down while it holds a permit it leaked.
async fn shutdown_holder(url: String, name: &'static str, lease: Duration) -> (usize, Instant) {
    let client = Client::builder(url)
        .watchdog_timeout(lease)
        .command_timeout(Duration::from_secs(2))
        .build()
        .await
        .expect("connect");
    let sem = client.expirable_semaphore(name);
    let mut taken = 0;
    if let Ok(Some(permit)) = sem.try_acquire_for(Duration::from_secs(3)).await {
        std::mem::forget(permit);
        taken += 1;
    }
    client.shutdown().await;
    (taken, Instant::now())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expirable_semaphore_never_exceeds_and_never_loses_permits_through_faults_and_crashes() {
    let started = Instant::now();
    let server = Arc::new(RedisServer::start());
    let name = "chaos-expirable";
    let holder_lease = Duration::from_secs(1);
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(
            Client::builder(server.url())
                .command_timeout(Duration::from_secs(2))
                .watchdog_timeout(Duration::from_secs(6))
                .build()
                .await
                .expect("connect"),
        );
    }
    assert!(clients[0]
        .expirable_semaphore(name)
        .try_set_permits(PERMITS as u64)
        .await
        .unwrap());
    let run = SemRun::new();
    let workers: Vec<_> = (0..12)
        .map(|i| {
            let sem = clients[i % clients.len()].expirable_semaphore(name);
            tokio::spawn(expirable_worker(
                sem,
                i % clients.len(),
                2000 + i as u64,
                run.clone(),
            ))
        })
        .collect();
    let chaos = Chaos::start(server.clone(), SEMAPHORE_FAULTS, ms(250));
    // Holders that crash or shut down while the others run.
    let mut dead_holders = 0;
    let mut dead_permits = 0;
    let until = Instant::now() + Duration::from_secs(6);
    let mut round = 0;
    while Instant::now() < until {
        let (taken, _) = if round % 2 == 0 {
            crash_holder(server.url(), name, holder_lease).await
        } else {
            shutdown_holder(server.url(), name, holder_lease).await
        };
        dead_holders += 1;
        dead_permits += taken;
        round += 1;
        tokio::time::sleep(ms(400)).await;
    }
    let faults = chaos.stop().await;
    run.stop.store(true, Ordering::SeqCst);
    join_all(workers, Duration::from_secs(30)).await;
    run.tally.add("crashed or shut-down holders", dead_holders);
    run.tally
        .add("permits taken by holders that died", dead_permits as u64);

    // Quiescence, after one more crash and one more shutdown with nothing else running: the
    // dead holders' permits come back within their lease.
    let (crashed, crashed_at) = crash_holder(server.url(), name, holder_lease).await;
    let (shut, shut_at) = shutdown_holder(server.url(), name, holder_lease).await;
    assert_eq!(
        (crashed, shut),
        (2, 1),
        "the last dead holders got no permits"
    );
    let died_at = crashed_at.max(shut_at);
    let sem = clients[1].expirable_semaphore(name);
    let back = loop {
        if sem.available_permits().await.unwrap() == PERMITS {
            break Some(died_at.elapsed());
        }
        if died_at.elapsed() > SETTLE {
            break None;
        }
        tokio::time::sleep(ms(20)).await;
    };
    match back {
        Some(after) => {
            println!("the dead holders' permits were back {after:?} after they died");
            if after > holder_lease + Duration::from_millis(1500) {
                run.tally.violation(format!(
                    "dead holders' permits came back {after:?} after they died (lease \
                     {holder_lease:?})"
                ));
            }
        }
        None => run.tally.violation(format!(
            "at quiescence: {:?} permits available (want {PERMITS}), {} leases",
            sem.available_permits().await,
            zcard(&server, &leases_key(name))
        )),
    }
    // Expired leases go back to the pool lazily, in the next script that writes: after one
    // acquire and release, every permit is in the pool and no lease is left.
    let permits: Vec<_> = {
        let mut permits = Vec::new();
        for _ in 0..PERMITS {
            permits.push(sem.try_acquire().await.unwrap().expect("a free permit"));
        }
        permits
    };
    assert!(
        sem.try_acquire().await.unwrap().is_none(),
        "a permit too many"
    );
    for permit in permits {
        permit.release().await.unwrap();
    }
    let raw = text(&server.cmd(&["GET", &expirable_key(name)]));
    assert_eq!(raw, Some(PERMITS.to_string()), "the raw pool");
    assert_eq!(zcard(&server, &leases_key(name)), 0, "leases left");
    assert_idle(&clients, "expirable semaphore").await;
    let renewed_after_release_by_id = run.renewed_after_release_by_id.lock().unwrap().clone();
    run.tally.add(
        "permits renewed right after their release by id",
        renewed_after_release_by_id.values().sum(),
    );
    for (i, client) in clients.iter().enumerate() {
        let stats = client.stats();
        let expected = renewed_after_release_by_id.get(&i).copied().unwrap_or(0);
        assert_eq!(
            stats.lost_leases, expected,
            "a worker lost a permit (besides {expected} renewed right after their release by \
             id): {stats:?}"
        );
    }
    run.tally
        .add("max holders", run.max_seen.load(Ordering::SeqCst) as u64);
    assert!(
        run.tally.get("acquired") >= 100,
        "too few acquires to judge"
    );
    assert!(run.tally.get("cancelled") >= 20, "too few cancellations");
    assert!(dead_holders >= 4, "too few dead holders");
    run.tally.report(
        "expirable_semaphore_never_exceeds_and_never_loses_permits_through_faults_and_crashes \
         (invariant: holders <= 3 at every instant; dead holders' permits back within the \
         lease; 3 available at quiescence)",
        &faults,
        started.elapsed(),
    );
}

// ---------------------------------------------------------------------------------------------
// Count-down latch.

fn latch_key(name: &str) -> String {
    common::keys::latch(name).latch
}

fn latch_channel(name: &str) -> String {
    common::keys::latch(name).channel
}

/// What the latch sampler saw.
#[derive(Debug, Default)]
struct Samples {
    samples: u64,
    /// The lowest count read while armed.
    min: Option<i64>,
    /// When the latch was seen open after being seen armed, each time.
    opens: Vec<Instant>,
    violations: Vec<String>,
}

/// Reads the latch's hash every 2 ms on a connection of its own (reconnecting through faults)
/// and checks: the count is at least 1 while armed, and never goes up within one arming.
struct Sampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Samples>,
}

impl Sampler {
    fn start(url: String, key: String) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut seen = Samples::default();
            let mut con: Option<redis::Connection> = None;
            let mut last: Option<(String, i64)> = None;
            while !flag.load(Ordering::SeqCst) {
                std::thread::sleep(ms(2));
                if con.is_none() {
                    con = redis::Client::open(url.as_str())
                        .and_then(|c| c.get_connection_with_timeout(ms(200)))
                        .ok();
                    if let Some(c) = &con {
                        let _ = c.set_read_timeout(Some(Duration::from_secs(2)));
                    }
                }
                let Some(c) = con.as_mut() else { continue };
                let read: redis::RedisResult<(Option<String>, Option<String>)> =
                    redis::cmd("HMGET")
                        .arg(&key)
                        .arg("count")
                        .arg("arming")
                        .query(c);
                let (count, arming) = match read {
                    Ok(fields) => fields,
                    Err(_) => {
                        con = None;
                        continue;
                    }
                };
                seen.samples += 1;
                match (count, arming) {
                    (Some(count), Some(arming)) => {
                        let Ok(count) = count.parse::<i64>() else {
                            seen.violations
                                .push(format!("count {count:?} is not a number"));
                            continue;
                        };
                        seen.min = Some(seen.min.map_or(count, |m| m.min(count)));
                        if count < 1 {
                            seen.violations
                                .push(format!("count {count} while armed (below 1)"));
                        }
                        if let Some((last_arming, last_count)) = &last {
                            if *last_arming == arming && count > *last_count {
                                seen.violations
                                    .push(format!("count went up from {last_count} to {count}"));
                            }
                            // Armed again between two samples: it opened in between (a loaded
                            // machine can starve this thread past a brief open). Dated late,
                            // which can only hide, never invent, an early open.
                            if *last_arming != arming {
                                seen.opens.push(Instant::now());
                            }
                        }
                        last = Some((arming, count));
                    }
                    (None, None) => {
                        if last.take().is_some() {
                            seen.opens.push(Instant::now());
                        }
                    }
                    other => seen.violations.push(format!("half a latch: {other:?}")),
                }
            }
            seen
        });
        Sampler { stop, thread }
    }

    async fn stop(self) -> Samples {
        self.stop.store(true, Ordering::SeqCst);
        let thread = self.thread;
        tokio::task::spawn_blocking(move || thread.join().expect("the sampler panicked"))
            .await
            .unwrap()
    }
}

/// A waiter that waits until the latch opens, retrying after errors caused by faults; returns
/// when it returned and how many errors it met. `timed` waiters use `wait_for` with short
/// timeouts in a loop instead of `wait`.
fn spawn_waiter(
    latch: CountDownLatch,
    timed: Option<u64>,
    tally: Arc<Tally>,
) -> tokio::task::JoinHandle<Instant> {
    tokio::spawn(async move {
        let mut rng = Rng::new(timed.unwrap_or(7));
        loop {
            tally.add("operations", 1);
            let outcome = match timed {
                None => latch.wait().await.map(|()| true),
                Some(_) => latch.wait_for(rng.millis(50, 300)).await,
            };
            match outcome {
                Ok(true) => return Instant::now(),
                Ok(false) => tally.add("wait_for timeouts", 1),
                Err(err) if is_fault(&err) => {
                    tally.add("waiter fault errors", 1);
                    tokio::time::sleep(ms(50)).await;
                }
                Err(err) => {
                    tally.violation(format!("a waiter failed: {err}"));
                    return Instant::now();
                }
            }
        }
    })
}

/// Checks the waiters' return times: none before `last_start` (when the last count-down
/// started), all within `bound` after `opened` (when it returned).
fn check_returns(
    tally: &Tally,
    returns: &[Instant],
    last_start: Instant,
    opened: Instant,
    bound: Duration,
) {
    for (i, returned) in returns.iter().enumerate() {
        if *returned < last_start {
            tally.violation(format!(
                "waiter {i} returned {:?} before the last count-down started",
                last_start - *returned
            ));
        } else if returned.saturating_duration_since(opened) > bound {
            tally.violation(format!(
                "waiter {i} returned {:?} after the latch opened",
                returned.saturating_duration_since(opened)
            ));
        }
    }
}

/// Counts the latch down `n` times from one task, with random pauses; returns when each
/// count-down started and when the last returned.
fn spawn_counter(
    latch: CountDownLatch,
    n: usize,
    seed: u64,
    tally: Arc<Tally>,
) -> tokio::task::JoinHandle<(Vec<Instant>, Instant)> {
    tokio::spawn(async move {
        let mut rng = Rng::new(seed);
        let mut starts = Vec::new();
        for _ in 0..n {
            tokio::time::sleep(rng.millis(40, 200)).await;
            tally.add("operations", 1);
            starts.push(Instant::now());
            if let Err(err) = latch.count_down().await {
                tally.violation(format!("count_down failed: {err}"));
            }
        }
        (starts, Instant::now())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latch_waiters_return_only_after_the_last_count_down_through_pubsub_kills() {
    const ROUNDS: usize = 3;
    const COUNT: usize = 24;
    let started = Instant::now();
    let server = Arc::new(RedisServer::start());
    let name = "chaos-latch";
    let tally = Arc::new(Tally::default());
    let mut waiter_clients = Vec::new();
    let mut counter_clients = Vec::new();
    for _ in 0..3 {
        waiter_clients.push(command_client(&server, Duration::from_secs(2)).await);
        counter_clients.push(command_client(&server, Duration::from_secs(2)).await);
    }
    let latch = counter_clients[0].count_down_latch(name);
    let sampler = Sampler::start(server.url(), latch_key(name));
    static LATCH_FAULTS: &[Fault] = &[Fault::KillPubsub, Fault::KillPubsub, Fault::ScriptFlush];
    let chaos = Chaos::start(server.clone(), LATCH_FAULTS, ms(120));

    // Each round arms the latch again: four waiters per client (one of them with wait_for
    // in a loop), three counters counting down together, pub/sub connections killed.
    let mut last_starts = Vec::new();
    for round in 0..ROUNDS {
        assert!(latch.try_set_count(COUNT as u64).await.unwrap());
        let mut waiters = Vec::new();
        for (c, client) in waiter_clients.iter().enumerate() {
            for _ in 0..3 {
                waiters.push(spawn_waiter(
                    client.count_down_latch(name),
                    None,
                    tally.clone(),
                ));
            }
            let seed = 100 * round as u64 + c as u64;
            waiters.push(spawn_waiter(
                client.count_down_latch(name),
                Some(seed),
                tally.clone(),
            ));
        }
        eventually("every waiter client is subscribed", SETTLE, || {
            server.numsub(&latch_channel(name)) == waiter_clients.len() as u64
        })
        .await;
        let counters: Vec<_> = counter_clients
            .iter()
            .enumerate()
            .map(|(i, c)| {
                spawn_counter(
                    c.count_down_latch(name),
                    COUNT / counter_clients.len(),
                    300 + 10 * round as u64 + i as u64,
                    tally.clone(),
                )
            })
            .collect();
        let counted = join_all(counters, SETTLE).await;
        let last_start = counted.iter().flat_map(|(s, _)| s).max().copied().unwrap();
        let opened = counted.iter().map(|(_, done)| *done).max().unwrap();
        let returns = join_all(waiters, SETTLE).await;
        check_returns(&tally, &returns, last_start, opened, Duration::from_secs(5));
        last_starts.push(last_start);
        // Counting down an open latch leaves it at zero.
        for _ in 0..3 {
            latch.count_down().await.unwrap();
        }
        assert_eq!(latch.count().await.unwrap(), 0);
        tally.add("rounds", 1);
    }
    let faults = chaos.stop().await;
    let samples = sampler.stop().await;
    for violation in &samples.violations {
        tally.violation(format!("sampler: {violation}"));
    }
    if samples.opens.len() != ROUNDS {
        tally.violation(format!(
            "the sampler saw the latch open {} times in {ROUNDS} rounds",
            samples.opens.len()
        ));
    }
    for (round, (opened, last_start)) in samples.opens.iter().zip(&last_starts).enumerate() {
        if opened < last_start {
            tally.violation(format!(
                "round {round}: the latch was seen open {:?} before the last count-down started",
                *last_start - *opened
            ));
        }
    }
    assert_eq!(int(&server, &["EXISTS", &latch_key(name)]), 0);
    eventually("nobody is subscribed", SETTLE, || {
        server.numsub(&latch_channel(name)) == 0
    })
    .await;
    assert_idle(&waiter_clients, "latch waiters").await;
    assert_idle(&counter_clients, "latch counters").await;
    tally.add("count samples", samples.samples);
    tally.add(
        "lowest count sampled while armed",
        samples.min.unwrap_or(0) as u64,
    );
    assert!(
        samples.samples >= 300,
        "too few samples: {}",
        samples.samples
    );
    assert!(
        faults.get("CLIENT KILL TYPE pubsub").copied().unwrap_or(0) >= 10,
        "too few pub/sub kills: {faults:?}"
    );
    tally.report(
        "latch_waiters_return_only_after_the_last_count_down_through_pubsub_kills (invariant: \
         count >= 1 while armed and never up; no waiter returns before the last count-down \
         started; all return within 5 s after it)",
        &faults,
        started.elapsed(),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latch_waiters_return_through_a_redis_restart() {
    let started = Instant::now();
    let mut server = RedisServer::start();
    let name = "restart-latch";
    let tally = Arc::new(Tally::default());
    let a = command_client(&server, Duration::from_secs(1)).await;
    let b = command_client(&server, Duration::from_secs(1)).await;
    let counter_client = command_client(&server, Duration::from_secs(1)).await;
    let counter = counter_client.count_down_latch(name);
    let mut faults = BTreeMap::<String, u64>::new();
    let fault = |server: &RedisServer, fault: Fault, faults: &mut BTreeMap<String, u64>| {
        assert!(fault.inject(server), "{fault:?}");
        *faults.entry(fault.label()).or_default() += 1;
    };

    // 1. Waiters wait through a pub/sub kill and part of the count; then Redis restarts
    //    (without persistence: the latch is gone, so it is open).
    assert!(counter.try_set_count(5).await.unwrap());
    let sampler = Sampler::start(server.url(), latch_key(name));
    let waiters: Vec<_> = (0..6)
        .map(|i| {
            let client = if i % 2 == 0 { &a } else { &b };
            let timed = (i >= 4).then_some(500 + i as u64);
            spawn_waiter(client.count_down_latch(name), timed, tally.clone())
        })
        .collect();
    eventually("both waiter clients are subscribed", SETTLE, || {
        server.numsub(&latch_channel(name)) == 2
    })
    .await;
    fault(&server, Fault::KillPubsub, &mut faults);
    counter.count_down().await.unwrap();
    counter.count_down().await.unwrap();
    tokio::time::sleep(ms(300)).await;
    assert_eq!(counter.count().await.unwrap(), 3);
    let stopped_at = Instant::now();
    if let Some(i) = waiters.iter().position(|w| w.is_finished()) {
        tally.violation(format!("waiter {i} returned while the count was 3"));
    }
    server.stop();
    *faults
        .entry("redis stopped for 1.5 s, restarted".into())
        .or_default() += 1;
    tokio::time::sleep(ms(1500)).await;
    tokio::task::block_in_place(|| server.restart());
    let restarted_at = Instant::now();
    let returns = join_all(waiters, SETTLE).await;
    for (i, returned) in returns.iter().enumerate() {
        if *returned < stopped_at {
            tally.violation(format!("waiter {i} returned before the restart"));
        }
        let after = returned.saturating_duration_since(restarted_at);
        if after > Duration::from_secs(5) {
            tally.violation(format!("waiter {i} returned {after:?} after the restart"));
        }
    }
    let outage_errors = tally.get("waiter fault errors");

    // 2. The restarted server: arm again, new waiters, a pub/sub kill, count down to zero.
    let armed = loop {
        match counter.try_set_count(3).await {
            Ok(armed) => break armed,
            Err(err) if is_fault(&err) && restarted_at.elapsed() < SETTLE => {
                tally.add("counter fault errors after the restart", 1);
                tokio::time::sleep(ms(50)).await;
            }
            Err(err) => panic!("arming after the restart: {err}"),
        }
    };
    assert!(
        armed,
        "the latch was lost with the restart, so it can be armed"
    );
    let waiters: Vec<_> = (0..4)
        .map(|i| {
            let client = if i % 2 == 0 { &a } else { &b };
            spawn_waiter(client.count_down_latch(name), None, tally.clone())
        })
        .collect();
    eventually("both waiter clients are subscribed again", SETTLE, || {
        server.numsub(&latch_channel(name)) == 2
    })
    .await;
    fault(&server, Fault::KillPubsub, &mut faults);
    counter.count_down().await.unwrap();
    counter.count_down().await.unwrap();
    fault(&server, Fault::KillPubsub, &mut faults);
    let last_start = Instant::now();
    counter.count_down().await.unwrap();
    let opened = Instant::now();
    let returns = join_all(waiters, SETTLE).await;
    check_returns(&tally, &returns, last_start, opened, Duration::from_secs(5));
    for _ in 0..2 {
        counter.count_down().await.unwrap();
    }
    assert_eq!(counter.count().await.unwrap(), 0);
    let samples = sampler.stop().await;
    for violation in &samples.violations {
        tally.violation(format!("sampler: {violation}"));
    }
    eventually("nobody is subscribed", SETTLE, || {
        server.numsub(&latch_channel(name)) == 0
    })
    .await;
    assert_idle(&[a, b, counter_client], "latch after a restart").await;
    tally.add("waiter fault errors during the outage", outage_errors);
    tally.add("count samples", samples.samples);
    tally.report(
        "latch_waiters_return_through_a_redis_restart (invariant: no waiter returns while \
         armed; every waiter returns Ok after the restart, retrying its errors; count never \
         below 1 while armed)",
        &faults,
        started.elapsed(),
    );
}

// ---------------------------------------------------------------------------------------------
// Multi-lock.

const MULTI_NAMES: [&str; 4] = ["ml-a", "ml-b", "ml-c", "ml-d"];

fn lock_key(name: &str) -> String {
    common::lock_key(name)
}

/// Exclusion and token order per lock name, as the holders saw them.
struct LockBook {
    holders: HashMap<String, AtomicI64>,
    max_seen: AtomicI64,
    last_token: Mutex<HashMap<String, u64>>,
}

impl LockBook {
    fn new(names: &[&str]) -> Self {
        LockBook {
            holders: names
                .iter()
                .map(|n| (n.to_string(), AtomicI64::new(0)))
                .collect(),
            max_seen: AtomicI64::new(0),
            last_token: Mutex::new(HashMap::new()),
        }
    }

    /// Records that `tokens` (lock name, fencing token) are held now.
    fn enter(&self, tokens: &[(String, u64)], tally: &Tally) {
        for (name, token) in tokens {
            let holders = &self.holders[name];
            enter(holders, &self.max_seen, 1, 1, tally);
            let mut last = self.last_token.lock().unwrap();
            let previous = last.insert(name.clone(), *token).unwrap_or(0);
            if *token <= previous {
                tally.violation(format!(
                    "{name}: fencing token {token} after {previous} (not increasing)"
                ));
            }
        }
    }

    fn leave(&self, tokens: &[(String, u64)]) {
        for (name, _) in tokens {
            leave(&self.holders[name], 1);
        }
    }
}

struct MultiRun {
    stop: AtomicBool,
    book: LockBook,
    tally: Tally,
}

/// One task of the multi-lock run: multi-locks over 3 or 4 of the names, in random argument
/// order, each lock from a random client; acquires cut at random points or timed out; holds
/// checked for exclusion; releases awaited or dropped.
async fn multi_worker(clients: Vec<Client>, seed: u64, run: Arc<MultiRun>) {
    let mut rng = Rng::new(seed);
    let long = Duration::from_secs(8);
    while !run.stop.load(Ordering::SeqCst) {
        let mut names = MULTI_NAMES.to_vec();
        rng.shuffle(&mut names);
        names.truncate(3 + rng.below(2) as usize);
        let locks: Vec<ReentrantLock> = names
            .iter()
            .map(|name| clients[rng.below(clients.len() as u64) as usize].lock(*name))
            .collect();
        let multi = clients[0].multi_lock(locks);
        run.tally.add("operations", 1);
        let some = |r: Result<MultiLockGuard>| r.map(Some);
        let outcome = match rng.below(7) {
            0 => cut_after(rng.micros(4000), multi.lock()).await.map(some),
            1 => cut_at_await(rng.below(8) as usize, multi.lock())
                .await
                .map(some),
            2 => tokio::time::timeout(rng.millis(1, 40), multi.lock())
                .await
                .ok()
                .map(some),
            3 => cut_after(rng.micros(4000), multi.try_lock_for(rng.millis(0, 50))).await,
            4 => Some(multi.try_lock_for(rng.millis(0, 50)).await),
            5 => Some(multi.try_lock().await),
            _ => tokio::time::timeout(long, multi.lock())
                .await
                .ok()
                .map(some),
        };
        let guard = match outcome {
            None => {
                run.tally.add("cancelled", 1);
                continue;
            }
            Some(Ok(None)) => {
                run.tally.add("busy", 1);
                continue;
            }
            Some(Err(err)) if is_fault(&err) => {
                run.tally.add("fault errors", 1);
                continue;
            }
            Some(Err(err)) => {
                run.tally.violation(format!("multi-lock failed: {err}"));
                continue;
            }
            Some(Ok(Some(guard))) => guard,
        };
        run.tally.add("acquired", 1);
        // A hold lost while the multi-lock waited for a later lock (a hand-over's short lease
        // whose renewals met killed connections) must be taken again, not handed out.
        if guard.is_lost() {
            run.tally.violation(format!(
                "a multi-lock returned a lock it had lost: {:?}",
                guard.fencing_tokens()
            ));
        }
        let tokens = guard.fencing_tokens();
        if tokens.len() != names.len() {
            run.tally
                .violation(format!("a multi-lock over {names:?} holds {tokens:?}"));
        }
        run.book.enter(&tokens, &run.tally);
        tokio::time::sleep(rng.micros(3000)).await;
        run.book.leave(&tokens);
        if rng.below(2) == 0 {
            drop(guard);
        } else {
            match guard.unlock().await {
                Ok(()) => {}
                Err(err) if is_fault(&err) => run.tally.add("unlock fault errors", 1),
                Err(Error::Several(parts)) if parts.iter().all(|(_, e)| is_fault(e)) => {
                    run.tally.add("unlock fault errors", 1)
                }
                Err(err) => run.tally.violation(format!("unlock failed: {err}")),
            }
        }
    }
}

/// Runs the multi-lock workers for `duration`, with `faults` injected if any.
async fn multi_lock_run(
    server: &Arc<RedisServer>,
    clients: &[Client],
    faults: Option<&'static [Fault]>,
    duration: Duration,
    seed: u64,
) -> (Arc<MultiRun>, BTreeMap<String, u64>) {
    let run = Arc::new(MultiRun {
        stop: AtomicBool::new(false),
        book: LockBook::new(&MULTI_NAMES),
        tally: Tally::default(),
    });
    let workers: Vec<_> = (0..8)
        .map(|i| tokio::spawn(multi_worker(clients.to_vec(), seed + i, run.clone())))
        .collect();
    let chaos = faults.map(|plan| Chaos::start(server.clone(), plan, ms(300)));
    tokio::time::sleep(duration).await;
    let injected = match chaos {
        Some(chaos) => chaos.stop().await,
        None => BTreeMap::new(),
    };
    run.stop.store(true, Ordering::SeqCst);
    join_all(workers, Duration::from_secs(30)).await;

    // Quiescence: no lock is held, nothing waits, nothing is subscribed.
    let gone = holds_within(SETTLE, || {
        MULTI_NAMES
            .iter()
            .all(|name| int(server, &["EXISTS", &lock_key(name)]) == 0)
    })
    .await;
    if !gone {
        let held: Vec<_> = MULTI_NAMES
            .iter()
            .filter(|name| int(server, &["EXISTS", &lock_key(name)]) == 1)
            .collect();
        run.tally
            .violation(format!("locks still held at quiescence: {held:?}"));
    }
    for name in MULTI_NAMES {
        eventually(
            format_args!("nobody is subscribed to the wake-ups of {name}"),
            SETTLE,
            || wake_subscribers(server, name) == 0,
        )
        .await;
    }
    assert_idle(clients, "multi-lock").await;
    run.tally.add(
        "max holders of one lock",
        run.book.max_seen.load(Ordering::SeqCst) as u64,
    );
    (run, injected)
}

async fn multi_lock_clients(server: &RedisServer) -> Vec<Client> {
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(
            Client::builder(server.url())
                .command_timeout(Duration::from_secs(2))
                .watchdog_timeout(Duration::from_secs(30))
                .build()
                .await
                .expect("connect"),
        );
    }
    clients
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_lock_cancellations_leave_no_sub_lock_held() {
    let started = Instant::now();
    let server = Arc::new(RedisServer::start());
    let clients = multi_lock_clients(&server).await;
    let (run, faults) = multi_lock_run(&server, &clients, None, Duration::from_secs(5), 3000).await;
    assert!(
        run.tally.get("acquired") >= 100,
        "too few acquires to judge"
    );
    assert!(run.tally.get("cancelled") >= 50, "too few cancellations");
    run.tally.report(
        "multi_lock_cancellations_leave_no_sub_lock_held (invariant: each lock held by at most \
         one multi-lock, tokens increasing; no lock key left at quiescence)",
        &faults,
        started.elapsed(),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_lock_killed_connections_leave_no_sub_lock_held() {
    static MULTI_FAULTS: &[Fault] = &[Fault::KillNormal, Fault::KillNormal, Fault::ScriptFlush];
    let started = Instant::now();
    let server = Arc::new(RedisServer::start());
    let clients = multi_lock_clients(&server).await;
    let (run, faults) = multi_lock_run(
        &server,
        &clients,
        Some(MULTI_FAULTS),
        Duration::from_secs(5),
        4000,
    )
    .await;
    assert!(run.tally.get("acquired") >= 50, "too few acquires to judge");
    assert!(
        faults.get("CLIENT KILL TYPE normal").copied().unwrap_or(0) >= 5,
        "too few kills: {faults:?}"
    );
    run.tally.report(
        "multi_lock_killed_connections_leave_no_sub_lock_held (invariant: each lock held by at \
         most one multi-lock, tokens increasing; no lock key left at quiescence)",
        &faults,
        started.elapsed(),
    );
}

// ---------------------------------------------------------------------------------------------
// Fair lock.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_lock_queue_ends_empty_and_every_live_waiter_gets_the_lock_once_through_faults() {
    // Waves of live waiters, each wave arriving together, so that a queue forms again and
    // again while connections are killed.
    const WAVES: usize = 4;
    const PER_WAVE: usize = 12;
    const LIVE: usize = WAVES * PER_WAVE;
    static FAIR_FAULTS: &[Fault] = &[Fault::KillNormal, Fault::ScriptFlush, Fault::KillNormal];
    let started = Instant::now();
    let server = Arc::new(RedisServer::start());
    let name = "chaos-fair";
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(command_client(&server, Duration::from_secs(2)).await);
    }
    let tally = Arc::new(Tally::default());
    let book = Arc::new(LockBook::new(&[name]));
    let live_done = Arc::new(AtomicU64::new(0));

    // Live waiters: each wants the lock once, and retries after errors caused by faults.
    let live: Vec<_> = (0..LIVE)
        .map(|i| {
            let lock = clients[i % clients.len()].fair_lock(name);
            let (tally, book, done) = (tally.clone(), book.clone(), live_done.clone());
            tokio::spawn(async move {
                let mut rng = Rng::new(5000 + i as u64);
                let (wave, place) = (i / PER_WAVE, i % PER_WAVE);
                tokio::time::sleep(ms(1200 * wave as u64 + 4 * place as u64)).await;
                let mut grants = 0;
                loop {
                    tally.add("operations", 1);
                    match lock.lock().await {
                        Ok(guard) => {
                            grants += 1;
                            let tokens = [(lock.name().to_owned(), guard.fencing_token())];
                            book.enter(&tokens, &tally);
                            tokio::time::sleep(rng.millis(5, 20)).await;
                            book.leave(&tokens);
                            match guard.unlock().await {
                                Ok(()) => {}
                                Err(err) if is_fault(&err) => tally.add("unlock fault errors", 1),
                                Err(err) => tally.violation(format!("unlock failed: {err}")),
                            }
                            break;
                        }
                        Err(err) if is_fault(&err) => tally.add("live waiter fault errors", 1),
                        Err(err) => {
                            tally.violation(format!("live waiter {i}: {err}"));
                            break;
                        }
                    }
                }
                done.fetch_add(1, Ordering::SeqCst);
                grants
            })
        })
        .collect();

    // Cancelled callers meanwhile, on fresh handles.
    let cancellers: Vec<_> = (0..4)
        .map(|i| {
            let clients = clients.clone();
            let (tally, book, done) = (tally.clone(), book.clone(), live_done.clone());
            tokio::spawn(async move {
                let mut rng = Rng::new(6000 + i);
                while done.load(Ordering::SeqCst) < LIVE as u64 {
                    let lock = clients[rng.below(3) as usize].fair_lock(name);
                    tally.add("operations", 1);
                    let some = |r: Result<LockGuard>| r.map(Some);
                    let outcome = match rng.below(5) {
                        0 => cut_after(rng.micros(4000), lock.lock()).await.map(some),
                        1 => cut_at_await(rng.below(8) as usize, lock.lock())
                            .await
                            .map(some),
                        2 => tokio::time::timeout(rng.millis(5, 150), lock.lock())
                            .await
                            .ok()
                            .map(some),
                        3 => {
                            cut_after(rng.micros(4000), lock.try_lock_for(rng.millis(0, 100))).await
                        }
                        _ => Some(lock.try_lock().await),
                    };
                    match outcome {
                        None => tally.add("cancelled", 1),
                        Some(Ok(None)) => tally.add("busy", 1),
                        Some(Err(err)) if is_fault(&err) => tally.add("fault errors", 1),
                        Some(Err(err)) => tally.violation(format!("canceller: {err}")),
                        Some(Ok(Some(guard))) => {
                            tally.add("cancellers acquired", 1);
                            let tokens = [(name.to_owned(), guard.fencing_token())];
                            book.enter(&tokens, &tally);
                            tokio::time::sleep(rng.millis(1, 5)).await;
                            book.leave(&tokens);
                            drop(guard);
                        }
                    }
                    tokio::time::sleep(rng.millis(0, 20)).await;
                }
            })
        })
        .collect();

    let chaos = Chaos::start(server.clone(), FAIR_FAULTS, ms(250));
    let grants = join_all(live, Duration::from_secs(60)).await;
    let faults = chaos.stop().await;
    join_all(cancellers, SETTLE).await;
    for (i, grants) in grants.iter().enumerate() {
        if *grants != 1 {
            tally.violation(format!("live waiter {i} got the lock {grants} times"));
        }
    }

    // Quiescence: the lock is free, the queue empty, no waiter's channel subscribed.
    let fair = common::keys::fair_lock(name);
    let (lock, queue, deadlines) = (fair.hash, fair.queue, fair.deadlines);
    let wake_pattern = fair.wake_channels.of("*");
    let quiet = holds_within(SETTLE, || {
        int(&server, &["EXISTS", &lock, &queue, &deadlines]) == 0
            && pubsub_channels(&server, &wake_pattern).is_empty()
    })
    .await;
    if !quiet {
        tally.violation(format!(
            "at quiescence: lock {}, {} queued, {} deadlines, channels {:?}",
            int(&server, &["EXISTS", &lock]),
            zcard(&server, &queue),
            zcard(&server, &deadlines),
            pubsub_channels(&server, &wake_pattern)
        ));
    }
    assert_idle(&clients, "fair lock").await;
    tally.add("live waiters", LIVE as u64);
    tally.add("max holders", book.max_seen.load(Ordering::SeqCst) as u64);
    assert!(tally.get("cancelled") >= 20, "too few cancellations");
    assert!(
        faults.get("CLIENT KILL TYPE normal").copied().unwrap_or(0) >= 5,
        "too few kills: {faults:?}"
    );
    tally.report(
        "fair_lock_queue_ends_empty_and_every_live_waiter_gets_the_lock_once_through_faults \
         (invariant: one holder at a time, tokens increasing; each live waiter granted exactly \
         once; lock, queue and deadlines gone and no waiter channel at quiescence)",
        &faults,
        started.elapsed(),
    );
}

// ---------------------------------------------------------------------------------------------
// Rate limiter.

/// Faults for the rate limiter: decisions lose their connection on the wire, their script
/// (reloaded on `NOSCRIPT`), or time out while Redis is paused longer than the command
/// timeout.
const RATE_LIMITER_FAULTS: &[Fault] = &[
    Fault::KillNormal,
    Fault::ScriptFlush,
    Fault::KillNormal,
    Fault::Pause(400),
];

/// Redis's clock in microseconds, read through `con` until a read succeeds (the chaos kills
/// this connection too; the manager reconnects). Read before a decision, a later success only
/// widens its bracket; read after, it is still after the decision.
async fn redis_clock(con: &mut redis::aio::ConnectionManager) -> u64 {
    loop {
        match redis::cmd("TIME").query_async::<(u64, u64)>(con).await {
            Ok((secs, micros)) => return secs * 1_000_000 + micros,
            Err(_) => tokio::time::sleep(ms(5)).await,
        }
    }
}

/// One task of the rate limiter run: decides as fast as it can, one decision in five cut off
/// at a random point, and keeps the admissions it was told of with their `TIME` brackets.
async fn rate_limiter_worker(
    limiter: RateLimiter,
    mut clock: redis::aio::ConnectionManager,
    seed: u64,
    stop: Arc<AtomicBool>,
    tally: Arc<Tally>,
) -> Vec<Admitted> {
    let mut rng = Rng::new(seed);
    let mut admitted = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        let units = 1 + rng.below(3);
        tally.add("operations", 1);
        let before = redis_clock(&mut clock).await;
        let outcome = if rng.below(5) == 0 {
            match cut_after(rng.micros(2_000), limiter.try_acquire(units)).await {
                Some(outcome) => outcome,
                None => {
                    tally.add("cancelled", 1);
                    continue;
                }
            }
        } else {
            limiter.try_acquire(units).await
        };
        match outcome {
            Ok(decision) if decision.allowed => {
                let after = redis_clock(&mut clock).await;
                tally.add("allowed", 1);
                admitted.push(Admitted {
                    before,
                    after,
                    units,
                });
            }
            Ok(decision) => {
                tally.add("refused", 1);
                if decision.retry_after.is_zero() {
                    tally.violation(format!("a refusal without a retry_after: {decision:?}"));
                }
                tokio::task::yield_now().await;
            }
            Err(err) if is_fault(&err) => {
                tally.add("errors", 1);
                tokio::time::sleep(ms(10)).await;
            }
            Err(err) => tally.violation(format!("try_acquire({units}): {err}")),
        }
    }
    admitted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limiter_never_exceeds_its_bound_through_faults_and_cancellations() {
    let started = Instant::now();
    let server = Arc::new(RedisServer::start());
    let name = "chaos-rate";
    let rate = Rate::new(20, ms(500)).burst(4);
    let per_us = 500_000;
    // A command timeout shorter than the pauses, so that some decisions time out.
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(command_client(&server, ms(300)).await);
    }
    assert!(clients[0]
        .rate_limiter(name)
        .try_set_rate(rate)
        .await
        .unwrap());
    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for i in 0..6 {
        let clock = redis::Client::open(server.url())
            .unwrap()
            .get_connection_manager()
            .await
            .unwrap();
        workers.push(tokio::spawn(rate_limiter_worker(
            clients[i % clients.len()].rate_limiter(name),
            clock,
            3000 + i as u64,
            stop.clone(),
            tally.clone(),
        )));
    }
    let chaos = Chaos::start(server.clone(), RATE_LIMITER_FAULTS, ms(150));
    tokio::time::sleep(Duration::from_secs(5)).await;
    let faults = chaos.stop().await;
    stop.store(true, Ordering::SeqCst);
    let admitted: Vec<Admitted> = join_all(workers, Duration::from_secs(30))
        .await
        .into_iter()
        .flatten()
        .collect();

    // Quiescence: every give-back sent and answered.
    assert_idle(&clients, "rate limiter").await;
    let total: u64 = admitted.iter().map(|a| a.units).sum();
    // Ten windows of 20 units (and a burst of 4): enough admissions to judge the bound.
    assert!(
        total > 2 * rate.window_limit(),
        "only {total} units admitted in ten windows"
    );
    let (most, anchor) = most_in_one_window(&admitted, per_us);
    if most > rate.window_limit() {
        tally.violation(format!(
            "{most} units in the window starting at {anchor:?}, more than {}",
            rate.window_limit()
        ));
    }
    tally.add("units allowed", total);
    tally.add("most units in one window", most);
    assert!(tally.get("cancelled") >= 20, "too few cancellations");
    assert!(
        tally.get("errors") >= 5,
        "too few decisions failed by faults"
    );
    assert!(
        faults.get("CLIENT KILL TYPE normal").copied().unwrap_or(0) >= 5,
        "too few kills: {faults:?}"
    );
    tally.report(
        "rate_limiter_never_exceeds_its_bound_through_faults_and_cancellations (invariant: no \
         500 ms window of Redis's clock certainly holds more than 24 admitted units; nothing \
         pending at quiescence)",
        &faults,
        started.elapsed(),
    );
}

/// The rate limiter's change channel, on which a waiter listens.
fn rate_channel(name: &str) -> String {
    common::keys::rate(name).changed
}

/// A waiter on `limiter` for one unit, for up to 10 minutes, retrying the errors an outage may
/// cause (as a caller would); returns its last outcome and when it got it.
fn spawn_rate_waiter(
    limiter: RateLimiter,
    tally: Arc<Tally>,
) -> tokio::task::JoinHandle<(Result<bool>, Instant)> {
    tokio::spawn(async move {
        loop {
            match limiter.acquire_for(1, Duration::from_secs(600)).await {
                Err(err) if is_fault(&err) => {
                    tally.add("waiter fault errors", 1);
                    tokio::time::sleep(ms(50)).await;
                }
                outcome => return (outcome, Instant::now()),
            }
        }
    })
}

/// `try_acquire(1)` once Redis answers again after a restart: the first outcome that is not
/// an outage error.
async fn first_decision_after(limiter: &RateLimiter, tally: &Tally) -> Result<Decision> {
    let deadline = Instant::now() + SETTLE;
    loop {
        match limiter.try_acquire(1).await {
            Err(err) if is_fault(&err) && Instant::now() < deadline => {
                tally.add("decision fault errors after the restart", 1);
                tokio::time::sleep(ms(50)).await;
            }
            outcome => return outcome,
        }
    }
}

/// Redis restarts, persisting every write (AOF, `appendfsync always`), while a rate limiter's
/// budget is spent and a waiter of another client waits for it. The budget comes back spent:
/// no decision after the restart is allowed, the waiter (retrying outage errors, as a caller
/// would) gets nothing until the rate changes, and the change wakes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limiter_budget_and_waiters_come_through_a_restart_with_aof() {
    let started = Instant::now();
    let mut server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let name = "restart-rate-aof";
    let tally = Arc::new(Tally::default());
    let a = command_client(&server, Duration::from_secs(1)).await;
    let b = command_client(&server, Duration::from_secs(1)).await;
    let limiter = a.rate_limiter(name);
    assert!(limiter.try_set_rate(Rate::per_hour(1)).await.unwrap());
    assert!(limiter.try_acquire(1).await.unwrap().allowed);
    assert!(!limiter.try_acquire(1).await.unwrap().allowed);
    let waiter = spawn_rate_waiter(b.rate_limiter(name), tally.clone());
    eventually("the waiter is subscribed", SETTLE, || {
        server.numsub(&rate_channel(name)) == 1
    })
    .await;
    // The waiter asks twice (its first try, and again once subscribed), then by itself only
    // after 10 s: whatever it sends after those two is sent because of the restart.
    eventually("the waiter asked twice", SETTLE, || {
        b.stats().scripts_sent >= 2
    })
    .await;
    let asked = b.stats().scripts_sent;

    tokio::task::block_in_place(|| server.restart());
    let restarted_at = Instant::now();
    let decision = first_decision_after(&limiter, &tally)
        .await
        .expect("a decision after the restart");
    let decided_at = Instant::now();
    assert!(
        !decision.allowed,
        "the restart gave the spent budget back: {decision:?}"
    );
    // An hour until the next unit: the state came back, not a full bucket.
    assert!(
        decision.retry_after > Duration::from_secs(60),
        "{decision:?}"
    );
    eventually("the waiter is subscribed again", SETTLE, || {
        server.numsub(&rate_channel(name)) == 1
    })
    .await;
    // The restart made it ask again (messages published while it was away are lost, so a
    // reconnect makes every waiter look). That ask may have met the outage (sends are counted
    // before they go); the waiter then retries every 50 ms, as a caller would, and the server
    // has answered a decision already, so within the 300 ms below an ask reaches it, and is
    // refused: the waiter still waits. (Its next ask of its own is 10 s away; the rate change
    // below wakes it well before.)
    eventually("the waiter asked the restarted server", SETTLE, || {
        b.stats().scripts_sent > asked
    })
    .await;
    tokio::time::sleep(ms(300)).await;
    assert!(
        !waiter.is_finished(),
        "the waiter returned before the rate changed: {:?}",
        waiter.await
    );

    let changed = Instant::now();
    limiter.set_rate(Rate::per_second(100)).await.unwrap();
    let (outcome, at) = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("woken by the rate change")
        .expect("waiter task");
    assert!(outcome.expect("acquire_for"), "the waiter got its unit");
    assert!(at >= changed);
    assert!(limiter.delete().await.unwrap());
    assert_idle(&[a, b], "rate limiter after a restart with AOF").await;
    let mut faults = BTreeMap::new();
    faults.insert("redis restarted with AOF".to_owned(), 1);
    tally.add(
        "ms from the restart to the first decision",
        (decided_at - restarted_at).as_millis() as u64,
    );
    tally.report(
        "rate_limiter_budget_and_waiters_come_through_a_restart_with_aof (invariant: the spent \
         budget survives; no unit is granted before the rate changes; the change wakes the \
         waiter)",
        &faults,
        started.elapsed(),
    );
}

/// Without persistence a restart loses the rate itself. A waiter that needed an hour does not
/// sleep through that: retrying outage errors as a caller would, it returns `InvalidArgument`
/// (no rate) within seconds of the restart, as after a `delete`, and the limiter works again
/// once a rate is set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limiter_waiters_learn_within_seconds_that_a_restart_lost_the_rate() {
    let started = Instant::now();
    let mut server = RedisServer::start();
    let name = "restart-rate";
    let tally = Arc::new(Tally::default());
    let a = command_client(&server, Duration::from_secs(1)).await;
    let b = command_client(&server, Duration::from_secs(1)).await;
    let limiter = a.rate_limiter(name);
    assert!(limiter.try_set_rate(Rate::per_hour(1)).await.unwrap());
    assert!(limiter.try_acquire(1).await.unwrap().allowed);
    let waiters: Vec<_> = [&a, &b, &b]
        .into_iter()
        .map(|client| spawn_rate_waiter(client.rate_limiter(name), tally.clone()))
        .collect();
    eventually("both waiter clients are subscribed", SETTLE, || {
        server.numsub(&rate_channel(name)) == 2
    })
    .await;

    tokio::task::block_in_place(|| server.restart());
    let restarted_at = Instant::now();
    let mut slowest = Duration::ZERO;
    for (i, waiter) in waiters.into_iter().enumerate() {
        let (outcome, at) = tokio::time::timeout(SETTLE, waiter)
            .await
            .unwrap_or_else(|_| panic!("waiter {i} still waits after the restart"))
            .expect("waiter task");
        match outcome {
            Err(Error::InvalidArgument(_)) => {}
            other => panic!("waiter {i}: {other:?}, not the missing rate"),
        }
        let after = at.saturating_duration_since(restarted_at);
        slowest = slowest.max(after);
        // A waiter fails on its dropped connection (its loop asks again) or re-checks when
        // its hub reconnects; one that slept until its next look (up to MAX_SLEEP, 10 s)
        // would fail this.
        assert!(
            after < Duration::from_secs(5),
            "waiter {i} learned it {after:?} after the restart"
        );
    }
    tally.add(
        "ms from the restart to the last waiter's return",
        slowest.as_millis() as u64,
    );
    match first_decision_after(&limiter, &tally).await {
        Err(Error::InvalidArgument(_)) => {}
        other => panic!("a decision after the restart: {other:?}, not the missing rate"),
    }
    assert!(
        limiter.try_set_rate(Rate::per_hour(1)).await.unwrap(),
        "the rate was lost with the restart, so it can be set"
    );
    assert!(limiter.try_acquire(1).await.unwrap().allowed);
    assert!(!limiter.try_acquire(1).await.unwrap().allowed);
    assert!(limiter.delete().await.unwrap());
    eventually("nobody is subscribed", SETTLE, || {
        server.numsub(&rate_channel(name)) == 0
    })
    .await;
    assert_idle(&[a, b], "rate limiter after a restart").await;
    let mut faults = BTreeMap::new();
    faults.insert("redis restarted without persistence".to_owned(), 1);
    tally.report(
        "rate_limiter_waiters_learn_within_seconds_that_a_restart_lost_the_rate (invariant: \
         every waiter returns the missing rate within 5 s of the restart; the limiter works \
         once its rate is set again)",
        &faults,
        started.elapsed(),
    );
}
