//! Faults on a Redis Cluster: the promises of the "Redis Cluster" section of DEPLOYMENT.md
//! (its "Failover" paragraph and sharded pub/sub) under a killed primary, a graceful failover,
//! slot migrations and a paused primary.
//!
//! Each test starts its own cluster of three primaries with one replica each
//! ([`RedisCluster`]), so the tests run in parallel. Harness calls that wait for the cluster
//! (failovers, migrations) block their thread, so they run on `spawn_blocking` while the
//! clients' tasks keep running on the test's multi-threaded runtime.
//!
//! Every test prints what it saw (`cargo test --test cluster_faults -- --nocapture`).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{
    assert_idle, eventually, keys, lock_key, ms, shard_subscribers, wake_channel, Paused,
};
use redisync::prelude::*;
use redisync_test_harness::{wait_until, RedisCluster};

/// How long a condition that should hold "soon" may take before the test fails.
const SETTLE: Duration = Duration::from_secs(10);

/// Two clients with a 1 s command timeout and a 30 s watchdog lease: a waiter of one can only
/// be woken in time by a message, not by the other's hold running out.
async fn two_long_lease_clients(cluster: &RedisCluster) -> (Client, Client) {
    (
        cluster_client(cluster, ms(1000), ms(30_000)).await,
        cluster_client(cluster, ms(1000), ms(30_000)).await,
    )
}

/// A cluster client with the given command timeout and watchdog lease.
async fn cluster_client(
    cluster: &RedisCluster,
    command_timeout: Duration,
    watchdog: Duration,
) -> Client {
    Client::cluster_builder(cluster.seed_urls())
        .command_timeout(command_timeout)
        .watchdog_timeout(watchdog)
        .build()
        .await
        .expect("connect to the cluster")
}

/// Starts a cluster of 3 primaries with a replica each (off the runtime's workers).
async fn start_cluster(extra_args: &'static [&'static str]) -> RedisCluster {
    tokio::task::spawn_blocking(move || RedisCluster::start_with(3, 1, extra_args))
        .await
        .expect("start the cluster")
}

/// The primary owning `slot`, and another primary to move it to.
fn owner_and_another(cluster: &RedisCluster, slot: u16) -> (usize, usize) {
    let source = cluster.master_for_slot(slot);
    let target = cluster
        .masters()
        .into_iter()
        .find(|&m| m != source)
        .expect("another primary");
    (source, target)
}

/// Moves `slot` whole to primary `target` (off the runtime's workers, which keep the clients'
/// tasks running); returns the cluster and when the move was done.
async fn migrate(cluster: RedisCluster, slot: u16, target: usize) -> (RedisCluster, Instant) {
    let cluster = tokio::task::spawn_blocking(move || {
        cluster.migrate_slot(slot, target);
        cluster
    })
    .await
    .expect("migration");
    (cluster, Instant::now())
}

/// The lock's fencing counter.
fn fence_key(name: &str) -> String {
    keys::lock(name).fence
}

/// `PTTL` of `key` on node `node` (negative if it has none or does not exist).
fn pttl_on(cluster: &RedisCluster, node: usize, key: &str) -> i64 {
    let reply = cluster.cmd_on(node, &["PTTL", key]);
    redis::from_redis_value_ref::<i64>(&reply)
        .unwrap_or_else(|e| panic!("unexpected PTTL reply {reply:?}: {e}"))
}

/// `PTTL` of `key` on node `node` preceded by `ASKING` (for a slot it is importing).
fn pttl_asking(cluster: &RedisCluster, node: usize, key: &str) -> i64 {
    let mut con = cluster.node(node).connection();
    redis::cmd("ASKING").exec(&mut con).expect("ASKING");
    redis::cmd("PTTL").arg(key).query(&mut con).expect("PTTL")
}

/// Whether `key` exists anywhere in the cluster (routed like a client would).
fn exists_in_cluster(cluster: &RedisCluster, key: &str) -> bool {
    cluster.route_cmd(&["EXISTS", key]).expect("EXISTS") == redis::Value::Int(1)
}

/// `per_master` lock names for each of the cluster's primaries: `(name, primary)`, grouped
/// by primary.
fn names_spread(cluster: &RedisCluster, prefix: &str, per_master: usize) -> Vec<(String, usize)> {
    let map = cluster.slot_map();
    let masters: BTreeSet<usize> = map.iter().map(|(_, owner)| *owner).collect();
    let mut chosen: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for i in 0.. {
        if masters
            .iter()
            .all(|m| chosen.get(m).is_some_and(|names| names.len() == per_master))
        {
            break;
        }
        let name = format!("{prefix}-{i}");
        let slot = cluster.slot_of(&lock_key(&name));
        let owner = map
            .iter()
            .find(|(slots, _)| slots.contains(&slot))
            .map(|(_, owner)| *owner)
            .expect("every slot is served");
        let names = chosen.entry(owner).or_default();
        if names.len() < per_master {
            names.push(name);
        }
    }
    chosen
        .into_iter()
        .flat_map(|(owner, names)| names.into_iter().map(move |name| (name, owner)))
        .collect()
}

/// The kind of an error, for counting: the outage kinds are `timeout`, `connection` and
/// `cluster` (what DEPLOYMENT.md promises while a primary fails).
fn kind_of(err: &Error) -> &'static str {
    match err {
        Error::Timeout => "timeout",
        Error::Redis(e)
            if e.is_cluster_error()
                || e.kind() == redis::ErrorKind::ClusterConnectionNotFound
                || e.code() == Some("MASTERDOWN") =>
        {
            "cluster"
        }
        Error::Redis(e)
            if e.is_io_error()
                || e.is_connection_dropped()
                || e.is_connection_refusal()
                || e.is_timeout() =>
        {
            "connection"
        }
        Error::Redis(_) => "redis-other",
        Error::NotOwner => "not-owner",
        Error::Shutdown => "shutdown",
        _ => "other",
    }
}

fn is_outage_kind(kind: &str) -> bool {
    matches!(kind, "timeout" | "connection" | "cluster")
}

// ---------------------------------------------------------------------------------------------
// A contended locking workload, recorded per lock.
// ---------------------------------------------------------------------------------------------

/// Before the fault, while the harness waits for it to be over, the first 2 s after it
/// (recovery), and from then on (settled).
const PHASES: [&str; 4] = ["before", "during", "after", "settled"];
const BEFORE: usize = 0;
const DURING: usize = 1;
const AFTER: usize = 2;
const SETTLED: usize = 3;

/// What happened to one lock.
#[derive(Default)]
struct LockRecord {
    name: String,
    /// The primary that served the lock when the run started.
    master: usize,
    /// Tasks inside the critical section now (an in-process check of exclusion).
    holders: AtomicU32,
    /// Grants while another task was inside the critical section.
    overlaps: AtomicU64,
    /// Grants, by the phase they happened in.
    acquired: [AtomicU64; 4],
    /// Fencing tokens, in the order granted (recorded inside the critical section).
    tokens: Mutex<Vec<u64>>,
    /// `(phase, operation, kind)` → count.
    errors: Mutex<BTreeMap<(usize, &'static str, &'static str), u64>>,
    /// A few error messages, for the report.
    samples: Mutex<Vec<String>>,
    /// The longest single `lock()` call, ok or not, by the phase it started in.
    longest_lock_ms: [AtomicU64; 4],
    /// Guards whose `is_lost()` was true at the end of their critical section.
    lost_guards: AtomicU64,
}

impl LockRecord {
    fn error(&self, phase: usize, op: &'static str, kind: &'static str, message: String) {
        *self
            .errors
            .lock()
            .unwrap()
            .entry((phase, op, kind))
            .or_default() += 1;
        let mut samples = self.samples.lock().unwrap();
        if samples.len() < 3 {
            samples.push(format!("{} {op}: {message}", PHASES[phase]));
        }
    }

    fn error_count(&self) -> u64 {
        self.errors.lock().unwrap().values().sum()
    }

    fn error_kinds(&self) -> BTreeSet<&'static str> {
        self.errors
            .lock()
            .unwrap()
            .keys()
            .map(|&(_, _, kind)| kind)
            .collect()
    }

    fn not_owner_unlocks(&self) -> u64 {
        self.errors
            .lock()
            .unwrap()
            .iter()
            .filter(|((_, op, kind), _)| *op == "unlock" && *kind == "not-owner")
            .map(|(_, n)| n)
            .sum()
    }

    fn acquired(&self, phase: usize) -> u64 {
        self.acquired[phase].load(Ordering::SeqCst)
    }

    fn longest(&self, phase: usize) -> Duration {
        ms(self.longest_lock_ms[phase].load(Ordering::SeqCst))
    }
}

/// The workload of one run: tasks that lock, work 10 ms and unlock, on several locks at once.
struct Workload {
    locks: Vec<LockRecord>,
    phase: AtomicUsize,
    stop: AtomicBool,
    /// A `lock()` or `unlock()` call taking longer than this counts as hung (an error of kind
    /// `hang`): above the longest sleep of a waiter (10 s) plus a command timeout.
    hang_bound: Duration,
}

impl Workload {
    fn new(names: &[(String, usize)]) -> Arc<Workload> {
        Arc::new(Workload {
            locks: names
                .iter()
                .map(|(name, master)| LockRecord {
                    name: name.clone(),
                    master: *master,
                    ..LockRecord::default()
                })
                .collect(),
            phase: AtomicUsize::new(BEFORE),
            stop: AtomicBool::new(false),
            hang_bound: ms(12_000),
        })
    }

    /// Starts `tasks_per_lock` tasks per lock on each client.
    fn spawn(
        self: &Arc<Self>,
        clients: &[Client],
        tasks_per_lock: usize,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        let mut tasks = Vec::new();
        for i in 0..self.locks.len() {
            for client in clients {
                for _ in 0..tasks_per_lock {
                    tasks.push(tokio::spawn(self.clone().worker(client.clone(), i)));
                }
            }
        }
        tasks
    }

    /// Locks, works briefly, unlocks, until stopped. Every round is a new owner, so a hold
    /// whose release failed is never re-entered by the next round (its lease frees it), and
    /// every grant must carry a new fencing token.
    async fn worker(self: Arc<Self>, client: Client, i: usize) {
        let record = &self.locks[i];
        while !self.stop.load(Ordering::SeqCst) {
            let lock = client.lock(&record.name);
            let phase = self.phase.load(Ordering::SeqCst);
            let started = Instant::now();
            let outcome = tokio::time::timeout(self.hang_bound, lock.lock()).await;
            record.longest_lock_ms[phase]
                .fetch_max(started.elapsed().as_millis() as u64, Ordering::SeqCst);
            let phase = self.phase.load(Ordering::SeqCst);
            let guard = match outcome {
                Ok(Ok(guard)) => guard,
                Ok(Err(err)) => {
                    record.error(phase, "lock", kind_of(&err), err.to_string());
                    tokio::time::sleep(ms(50)).await;
                    continue;
                }
                Err(_) => {
                    record.error(phase, "lock", "hang", format!("{:?}", self.hang_bound));
                    continue;
                }
            };
            if record.holders.fetch_add(1, Ordering::SeqCst) > 0 {
                record.overlaps.fetch_add(1, Ordering::SeqCst);
                eprintln!(
                    "OVERLAP on {} (token {}, {})",
                    record.name,
                    guard.fencing_token(),
                    PHASES[phase]
                );
            }
            record.tokens.lock().unwrap().push(guard.fencing_token());
            record.acquired[phase].fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(ms(10)).await;
            if guard.is_lost() {
                record.lost_guards.fetch_add(1, Ordering::SeqCst);
            }
            // Out of the critical section before the release: once released, another owner
            // may rightly be granted the lock.
            record.holders.fetch_sub(1, Ordering::SeqCst);
            let outcome = tokio::time::timeout(self.hang_bound, guard.unlock()).await;
            let phase = self.phase.load(Ordering::SeqCst);
            match outcome {
                Ok(Ok(())) => {}
                Ok(Err(err)) => record.error(phase, "unlock", kind_of(&err), err.to_string()),
                Err(_) => record.error(phase, "unlock", "hang", format!("{:?}", self.hang_bound)),
            }
        }
    }

    /// Marks the fault over: `after` now, `settled` in 2 s.
    fn fault_over(self: &Arc<Self>) {
        self.phase.store(AFTER, Ordering::SeqCst);
        let work = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(ms(2000)).await;
            work.phase.store(SETTLED, Ordering::SeqCst);
        });
    }

    /// Stops the tasks and waits for them (each ends after its current call).
    async fn stop(&self, tasks: Vec<tokio::task::JoinHandle<()>>) {
        self.stop.store(true, Ordering::SeqCst);
        for task in tasks {
            tokio::time::timeout(self.hang_bound * 2, task)
                .await
                .expect("a worker did not stop: a call hangs")
                .expect("worker panicked");
        }
    }

    fn report(&self, title: &str) {
        eprintln!("--- {title}");
        for r in &self.locks {
            let acquired: Vec<u64> = (0..4).map(|p| r.acquired(p)).collect();
            let longest: Vec<u64> = (0..4).map(|p| r.longest(p).as_millis() as u64).collect();
            eprintln!(
                "{} (primary {}): acquired {acquired:?} and longest lock() in ms {longest:?} \
                 (before/during/after/settled), overlaps {}, lost guards {}, errors {:?} {:?}",
                r.name,
                r.master,
                r.overlaps.load(Ordering::SeqCst),
                r.lost_guards.load(Ordering::SeqCst),
                r.errors
                    .lock()
                    .unwrap()
                    .iter()
                    .map(|((phase, op, kind), n)| format!("{} {op} {kind}: {n}", PHASES[*phase]))
                    .collect::<Vec<_>>(),
                r.samples.lock().unwrap(),
            );
        }
    }

    /// Checks that every lock works normally again once the fault is over: acquired often,
    /// and no `lock()` call started in the settled phase waits long. With 4 tasks working
    /// 10 ms each, a call waits some tens of milliseconds; a waiter that missed a release
    /// waits until the holder's lease would have ended.
    fn assert_settled(&self, lease: Duration) {
        for r in &self.locks {
            assert!(
                r.acquired(BEFORE) >= 20,
                "{}: barely acquired before the fault ({})",
                r.name,
                r.acquired(BEFORE)
            );
            assert!(
                r.acquired(SETTLED) >= 20,
                "{}: acquired only {} times once the fault was over (clients did not recover, \
                 or waiters miss releases)",
                r.name,
                r.acquired(SETTLED)
            );
            assert!(
                r.longest(SETTLED) < lease / 2,
                "{}: a lock() call started once the fault was over took {:?}: a waiter missed \
                 the release and slept towards the holder's lease ({lease:?})",
                r.name,
                r.longest(SETTLED)
            );
        }
    }
}

/// Waits until the clients have nothing queued, subscribed or renewed.
async fn quiesce(clients: &[&Client]) {
    eventually("every client is idle", SETTLE, || {
        clients
            .iter()
            .all(|c| c.local_state() == redisync::LocalState::default())
    })
    .await;
    assert_idle(clients);
}

/// A task waiting for `name`'s lock on `client`; reports the outcome and when it came.
fn spawn_lock_waiter(
    client: &Client,
    name: &str,
) -> tokio::task::JoinHandle<(Result<LockGuard>, Instant)> {
    let lock = client.lock(name);
    tokio::spawn(async move {
        let outcome = lock.lock().await;
        (outcome, Instant::now())
    })
}

/// Releases `guard`, a hold taken before a fault (`survived` is what a failed release would
/// mean), and checks that `waiter`, waiting for the same lock, gets it within a second; then
/// releases that too.
async fn hand_over_within_a_second(
    guard: LockGuard,
    waiter: tokio::task::JoinHandle<(Result<LockGuard>, Instant)>,
    survived: &str,
) {
    let released = Instant::now();
    guard.unlock().await.expect(survived);
    let guard = woken_within(
        "the waiter, after a release on the new primary",
        waiter,
        released,
        ms(1000),
    )
    .await;
    guard.unlock().await.expect("unlock");
}

/// Awaits a waiter for at most `within` after `since`.
async fn woken_within<T>(
    what: &str,
    waiter: tokio::task::JoinHandle<(Result<T>, Instant)>,
    since: Instant,
    within: Duration,
) -> T {
    let left = within.saturating_sub(since.elapsed());
    let (outcome, at) = tokio::time::timeout(left, waiter)
        .await
        .unwrap_or_else(|_| panic!("{what}: not woken within {within:?}"))
        .expect("waiter task");
    let value = outcome.unwrap_or_else(|e| panic!("{what}: failed: {e}"));
    eprintln!("{what}: woken after {:?}", at - since);
    value
}

// ---------------------------------------------------------------------------------------------
// 1. Contended locking through a primary kill.
// ---------------------------------------------------------------------------------------------

/// DEPLOYMENT.md, "Failover, replicas and your holds": while a primary is down, requests to its slots fail within the
/// command timeout (timeouts, connection errors and the cluster's refusals) until a replica is
/// promoted, other slots carry on, and the clients recover by themselves.
///
/// The nodes run with `cluster-require-full-coverage no`: with `yes` (Redis' default) every
/// node answers `CLUSTERDOWN` for every slot from the moment the dead primary is flagged
/// `FAIL` until its replica is promoted, so calls on the surviving primaries fail too (about
/// a second here), which DEPLOYMENT.md does not say.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contended_locking_through_a_primary_kill() {
    let started = Instant::now();
    let cluster = start_cluster(&["--cluster-require-full-coverage", "no"]).await;
    let command_timeout = ms(1000);
    let lease = ms(3000);
    let names = names_spread(&cluster, "kill", 2);
    let masters: BTreeSet<usize> = names.iter().map(|(_, m)| *m).collect();
    assert_eq!(
        masters.len(),
        3,
        "the locks span all three primaries: {names:?}"
    );
    let victim = names[0].1;
    let clients = [
        cluster_client(&cluster, command_timeout, lease).await,
        cluster_client(&cluster, command_timeout, lease).await,
    ];
    let work = Workload::new(&names);
    let tasks = work.spawn(&clients, 2);

    tokio::time::sleep(ms(1500)).await;
    work.phase.store(DURING, Ordering::SeqCst);
    let (cluster, promoted, failover_took) = tokio::task::spawn_blocking(move || {
        let mut cluster = cluster;
        let t = Instant::now();
        let promoted = cluster.kill_master_and_wait_for_failover(victim);
        (cluster, promoted, t.elapsed())
    })
    .await
    .expect("failover");
    work.fault_over();
    eprintln!("killed primary {victim}; replica {promoted} took over after {failover_took:?}");
    tokio::time::sleep(ms(5000)).await;
    work.stop(tasks).await;
    work.report("contended locking through a primary kill");

    // A call on the dead primary ends once the hub's pings missed a whole command timeout
    // and the re-check timed out (about 3.4 command timeouts); one right after the failover
    // may have to sit out a hold whose release failed (a lease).
    let bound = command_timeout * 3 + failover_took + lease;
    let lost_leases: u64 = clients.iter().map(|c| c.stats().lost_leases).sum();
    let mut killed_overlaps = 0;
    let mut killed_lost_signals = lost_leases;
    for r in &work.locks {
        let longest = (0..4).map(|p| r.longest(p)).max().unwrap();
        assert!(
            longest < bound,
            "{}: a lock() call took {longest:?}, more than {bound:?} (3 command timeouts + the \
             failover + a lease)",
            r.name
        );
        if r.master == victim {
            for kind in r.error_kinds() {
                assert!(
                    is_outage_kind(kind) || kind == "not-owner",
                    "{}: unexpected error kind {kind}",
                    r.name
                );
            }
            killed_overlaps += r.overlaps.load(Ordering::SeqCst);
            killed_lost_signals += r.lost_guards.load(Ordering::SeqCst) + r.not_owner_unlocks();
        } else {
            assert_eq!(
                r.error_count(),
                0,
                "{} is served by a surviving primary, yet calls failed",
                r.name
            );
            assert_eq!(
                r.overlaps.load(Ordering::SeqCst),
                0,
                "{}: overlapping holds on a surviving primary",
                r.name
            );
        }
    }
    assert!(
        work.locks
            .iter()
            .any(|r| r.master == victim && r.error_count() > 0),
        "no call on the killed primary's locks failed: was it killed mid-run?"
    );
    eprintln!(
        "the killed primary's locks: {killed_overlaps} overlaps; lost leases reported by the \
         clients {lost_leases}; lost signals in all (lost leases, lost guards, NotOwner \
         releases) {killed_lost_signals}"
    );
    // Asynchronous replication may lose a grant, and then two owners overlap; the one whose
    // grant was lost must hear of it.
    assert!(
        killed_overlaps == 0 || killed_lost_signals > 0,
        "an overlap on the killed primary's locks without any lost lease reported"
    );
    work.assert_settled(lease);

    quiesce(&[&clients[0], &clients[1]]).await;
    for (name, _) in &names {
        let key = lock_key(name);
        eventually(format!("{key} is gone"), SETTLE, || {
            !exists_in_cluster(&cluster, &key)
        })
        .await;
    }
    eprintln!("test took {:?}", started.elapsed());
}

// ---------------------------------------------------------------------------------------------
// 2. Contended locking through a graceful failover.
// ---------------------------------------------------------------------------------------------

/// A graceful failover (`CLUSTER FAILOVER` on the replica) loses no write: every lock stays
/// exclusive, fencing tokens keep increasing across it, and a hold taken before it stays held
/// and keeps being renewed on the new primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contended_locking_through_a_graceful_failover() {
    let started = Instant::now();
    let cluster = start_cluster(&[]).await;
    let command_timeout = ms(1000);
    let lease = ms(3000);
    let names = names_spread(&cluster, "graceful", 2);
    let masters: BTreeSet<usize> = names.iter().map(|(_, m)| *m).collect();
    assert_eq!(
        masters.len(),
        3,
        "the locks span all three primaries: {names:?}"
    );
    let old_master = names[0].1;
    let replica = cluster.replica_of(old_master).expect("a replica");
    let clients = [
        cluster_client(&cluster, command_timeout, lease).await,
        cluster_client(&cluster, command_timeout, lease).await,
    ];
    // A hold with a short watchdog lease, on the primary that hands over.
    let short_lease = ms(1000);
    let holder = cluster_client(&cluster, command_timeout, short_lease).await;
    let held_name = names_spread(&cluster, "graceful-held", 1)
        .into_iter()
        .find(|(_, m)| *m == old_master)
        .expect("a name on the primary")
        .0;
    let held = holder.lock(&held_name).lock().await.expect("lock");
    let held_lost = held.lost();
    let work = Workload::new(&names);
    let tasks = work.spawn(&clients, 2);

    tokio::time::sleep(ms(1500)).await;
    work.phase.store(DURING, Ordering::SeqCst);
    let (cluster, failover_took) = tokio::task::spawn_blocking(move || {
        let t = Instant::now();
        cluster.failover(replica);
        (cluster, t.elapsed())
    })
    .await
    .expect("failover");
    work.fault_over();
    let failed_over_at = Instant::now();
    eprintln!("replica {replica} took over from {old_master} in {failover_took:?}");
    let key = lock_key(&held_name);
    assert_eq!(cluster.master_for_key(&key), replica);

    // The hold taken before the failover: still ours, and renewed on the new primary for
    // three leases (its key would expire within one), while the workload goes on.
    let mut samples = Vec::new();
    while failed_over_at.elapsed() < short_lease * 3 + ms(200) {
        let pttl = pttl_on(&cluster, replica, &key);
        samples.push(pttl);
        assert!(
            pttl > 0 && pttl <= short_lease.as_millis() as i64,
            "{key} has PTTL {pttl} on the new primary {:?} after the failover (samples \
             {samples:?})",
            failed_over_at.elapsed()
        );
        assert!(!held.is_lost(), "the hold was lost across the failover");
        tokio::time::sleep(ms(100)).await;
    }
    assert!(
        tokio::time::timeout(ms(10), held_lost).await.is_err(),
        "lost() fired"
    );
    eprintln!("PTTL of the held lock on the new primary after the failover: {samples:?}");
    held.unlock().await.expect("the hold survived the failover");
    tokio::time::sleep(ms(1500)).await;
    work.stop(tasks).await;
    work.report("contended locking through a graceful failover");

    for r in &work.locks {
        assert_eq!(r.overlaps.load(Ordering::SeqCst), 0, "{}: overlaps", r.name);
        assert_eq!(
            r.lost_guards.load(Ordering::SeqCst),
            0,
            "{}: lost holds",
            r.name
        );
        assert_eq!(r.not_owner_unlocks(), 0, "{}: a hold was lost", r.name);
        for kind in r.error_kinds() {
            assert!(
                is_outage_kind(kind),
                "{}: unexpected error kind {kind}",
                r.name
            );
        }
        if r.master != old_master {
            assert_eq!(
                r.error_count(),
                0,
                "{}: calls failed on another primary",
                r.name
            );
        }
        let tokens = r.tokens.lock().unwrap();
        for pair in tokens.windows(2) {
            assert!(
                pair[0] < pair[1],
                "{}: fencing token {} was granted after {} (tokens {tokens:?})",
                r.name,
                pair[1],
                pair[0]
            );
        }
    }
    work.assert_settled(lease);
    // A graceful failover pauses writes for milliseconds: no waiter should wait long at any
    // time, unless it missed a release and slept towards the holder's lease.
    for r in &work.locks {
        for phase in [BEFORE, DURING, AFTER] {
            assert!(
                r.longest(phase) < lease / 2,
                "{}: a lock() call started {} the failover took {:?} (a waiter missed a \
                 release and slept towards the holder's lease, {lease:?})",
                r.name,
                PHASES[phase],
                r.longest(phase)
            );
        }
    }
    let lost: Vec<u64> = [&clients[0], &clients[1], &holder]
        .iter()
        .map(|c| c.stats().lost_leases)
        .collect();
    assert_eq!(lost, vec![0, 0, 0], "lost leases");
    quiesce(&[&clients[0], &clients[1], &holder]).await;
    eprintln!("test took {:?}", started.elapsed());
}

/// DEPLOYMENT.md, "Sharded pub/sub": when its slot moves (here by a graceful failover),
/// redisync subscribes again on the new owner. Not on the demoted primary: it still accepts
/// `SSUBSCRIBE` (it is a replica of the slot's owner), but it only gets the new primary's
/// messages once that primary has learnt of its new replica over the cluster bus, and a
/// release published before then is lost (its waiter sleeps until the holder's lease would
/// end: 10 s here). The waiter must then be woken by the first release on the new primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_follows_a_graceful_failover_to_the_new_primary() {
    let cluster = start_cluster(&[]).await;
    let name = "handover";
    let old_master = cluster.master_for_key(&lock_key(name));
    let replica = cluster.replica_of(old_master).expect("a replica");
    let (a, b) = two_long_lease_clients(&cluster).await;
    let channel = wake_channel(name, &b);
    let guard = a.lock(name).lock().await.expect("lock");
    let waiter = spawn_lock_waiter(&b, name);
    eventually("the waiter subscribed", SETTLE, || {
        shard_subscribers(&cluster, old_master, &channel) >= 1
    })
    .await;

    let cluster = tokio::task::spawn_blocking(move || {
        cluster.failover(replica);
        cluster
    })
    .await
    .expect("failover");
    let failed_over_at = Instant::now();
    let moved = wait_until(ms(2000), || {
        shard_subscribers(&cluster, replica, &channel) >= 1
    })
    .await;
    eprintln!(
        "subscribers after the failover: {} on the demoted primary, {} on the new one",
        shard_subscribers(&cluster, old_master, &channel),
        shard_subscribers(&cluster, replica, &channel)
    );
    assert!(
        moved,
        "the waiter's subscription did not move to the new primary within 2 s"
    );
    eprintln!(
        "subscribed on the new primary {:?} after the failover",
        failed_over_at.elapsed()
    );
    assert!(!waiter.is_finished(), "the waiter got a lock that is held");
    hand_over_within_a_second(guard, waiter, "the hold survived the failover").await;
    quiesce(&[&a, &b]).await;
}

/// The same after a primary is killed: a waiter that keeps trying through the outage (its
/// calls fail with timeouts, connection errors and cluster refusals meanwhile) is woken by the
/// first release on the promoted replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_retrying_through_a_primary_kill_is_woken_on_the_new_primary() {
    let cluster = start_cluster(&["--cluster-require-full-coverage", "no"]).await;
    let name = "survivor";
    let victim = cluster.master_for_key(&lock_key(name));
    let command_timeout = ms(1000);
    let a = cluster_client(&cluster, command_timeout, ms(30_000)).await;
    let b = cluster_client(&cluster, command_timeout, ms(30_000)).await;
    let channel = wake_channel(name, &b);
    let guard = a.lock(name).lock().await.expect("lock");
    // The grant must survive the kill.
    cluster.cmd_on(victim, &["WAIT", "1", "5000"]);
    let errors = Arc::new(Mutex::new(BTreeMap::<&'static str, u64>::new()));
    let waiter = {
        let b = b.clone();
        let errors = errors.clone();
        tokio::spawn(async move {
            loop {
                match b.lock(name).lock().await {
                    Ok(guard) => break (Ok(guard), Instant::now()),
                    Err(err) => {
                        *errors.lock().unwrap().entry(kind_of(&err)).or_default() += 1;
                        tokio::time::sleep(ms(50)).await;
                    }
                }
            }
        })
    };
    eventually("the waiter subscribed", SETTLE, || {
        shard_subscribers(&cluster, victim, &channel) >= 1
    })
    .await;

    let (cluster, promoted, took) = tokio::task::spawn_blocking(move || {
        let mut cluster = cluster;
        let t = Instant::now();
        let promoted = cluster.kill_master_and_wait_for_failover(victim);
        (cluster, promoted, t.elapsed())
    })
    .await
    .expect("failover");
    eprintln!(
        "replica {promoted} took over after {took:?}; the waiter's errors meanwhile: {:?}",
        errors.lock().unwrap()
    );
    eventually("the waiter subscribed on the new primary", ms(3000), || {
        shard_subscribers(&cluster, promoted, &channel) >= 1
    })
    .await;
    // Registered there too, and no withdrawal of an earlier try takes that out: one sent
    // alongside the attempt could land after it (a withdrawal that met `MOVED` goes again to
    // the new primary over another connection).
    let waiters = keys::lock(name).waiters;
    let registered =
        || cluster.cmd_on(promoted, &["ZSCORE", &waiters, &channel]) != redis::Value::Nil;
    eventually("the waiter registered on the new primary", SETTLE, || {
        registered() && b.local_state().pending_releases == 0
    })
    .await;
    tokio::time::sleep(ms(100)).await; // what a late withdrawal would need to land
    assert!(
        registered(),
        "a withdrawal of an earlier try took the registration out"
    );
    assert!(!waiter.is_finished(), "the waiter got a lock that is held");
    for kind in errors.lock().unwrap().keys() {
        assert!(is_outage_kind(kind), "the waiter failed with {kind}");
    }
    hand_over_within_a_second(guard, waiter, "the replicated hold survived the kill").await;
    quiesce(&[&a, &b]).await;
}

/// DEPLOYMENT.md, "Sharded pub/sub": when the hub's connection to a node drops and comes back,
/// every waiter's channel is subscribed again. Here the connection is killed on a live
/// primary (`CLIENT KILL TYPE pubsub`) while two waiters wait on two locks of that primary, in
/// different slots (a node's channels of several slots cannot be subscribed in one command).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_subscribed_again_after_the_hub_connection_drops() {
    let cluster = start_cluster(&[]).await;
    let names: Vec<String> = names_spread(&cluster, "dropped", 2)
        .into_iter()
        .filter(|(_, m)| *m == 0)
        .map(|(name, _)| name)
        .collect();
    assert_eq!(names.len(), 2);
    assert_ne!(
        cluster.slot_of(&lock_key(&names[0])),
        cluster.slot_of(&lock_key(&names[1]))
    );
    // A command timeout well above what a loaded machine may take to answer: a ping or a
    // re-check unanswered that long counts as an outage and fails the waiter (by design, see
    // `a_paused_primary_fails_only_its_own_waiters`). 1 s is too close to that: a waiter here
    // could then fail with `Timeout` while the whole suite runs.
    let a = cluster_client(&cluster, ms(3000), ms(30_000)).await;
    let b = cluster_client(&cluster, ms(3000), ms(30_000)).await;
    let mut guards = Vec::new();
    let mut waiters = Vec::new();
    for name in &names {
        guards.push(a.lock(name).lock().await.expect("lock"));
        waiters.push(spawn_lock_waiter(&b, name));
    }
    let subscribed = |cluster: &RedisCluster| {
        names
            .iter()
            .all(|name| shard_subscribers(cluster, 0, &wake_channel(name, &b)) >= 1)
    };
    eventually("both waiters subscribed", SETTLE, || subscribed(&cluster)).await;

    let killed = cluster.cmd_on(0, &["CLIENT", "KILL", "TYPE", "pubsub"]);
    assert_eq!(killed, redis::Value::Int(1), "one hub connection killed");
    let killed_at = Instant::now();
    let again = wait_until(ms(5000), || subscribed(&cluster)).await;
    if !again {
        for waiter in waiters.iter_mut().filter(|w| w.is_finished()) {
            let (outcome, _) = waiter.await.expect("waiter task");
            eprintln!("a waiter ended: {:?}", outcome.map(|g| g.fencing_token()));
        }
    }
    assert!(
        again,
        "the waiters were not subscribed again within 5 s: subscribers {:?}, {:?}",
        names
            .iter()
            .map(|name| shard_subscribers(&cluster, 0, &wake_channel(name, &b)))
            .collect::<Vec<_>>(),
        b.local_state()
    );
    eprintln!("subscribed again {:?} after the kill", killed_at.elapsed());
    for (guard, waiter) in guards.into_iter().zip(waiters) {
        assert!(!waiter.is_finished(), "a waiter got a lock that is held");
        let released = Instant::now();
        guard.unlock().await.expect("unlock");
        woken_within("a waiter", waiter, released, ms(1000))
            .await
            .unlock()
            .await
            .expect("unlock");
    }
    quiesce(&[&a, &b]).await;
}

/// A subscription that is slow to come back while Redis answers does not fail the wait: here
/// the node's ACL takes the channels away (Redis then drops the hub's connection and refuses
/// its `SSUBSCRIBE`s) for twice the command timeout, while the waiter's re-checks still run.
/// The waiter waits on, and the release after the channels are back wakes it. (The same
/// holds when confirmations are merely slow, on a loaded box.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_outlasts_a_subscription_refused_for_a_while() {
    let cluster = start_cluster(&[]).await;
    let name = "refused";
    let node = cluster.master_for_key(&lock_key(name));
    let command_timeout = ms(1000);
    let a = cluster_client(&cluster, command_timeout, ms(30_000)).await;
    let b = cluster_client(&cluster, command_timeout, ms(30_000)).await;
    let channel = wake_channel(name, &b);
    let guard = a.lock(name).lock().await.expect("lock");
    let waiter = spawn_lock_waiter(&b, name);
    eventually("the waiter subscribed", SETTLE, || {
        shard_subscribers(&cluster, node, &channel) >= 1
    })
    .await;

    let set_channels = |rule: &str| {
        let reply = cluster.cmd_on(node, &["ACL", "SETUSER", "default", rule]);
        assert_eq!(reply, redis::Value::Okay, "ACL SETUSER default {rule}");
    };
    set_channels("resetchannels");
    eventually("Redis dropped the hub's subscription", SETTLE, || {
        shard_subscribers(&cluster, node, &channel) == 0
    })
    .await;
    let refused = Instant::now();
    // Sleeps on purpose: what is tested is that nothing happens for this long.
    tokio::time::sleep(command_timeout * 2).await;
    assert!(
        !waiter.is_finished(),
        "the wait ended while its subscription was refused: {:?}",
        waiter
            .await
            .expect("waiter task")
            .0
            .map(|guard| guard.fencing_token())
    );
    set_channels("allchannels");
    eventually("the waiter subscribed again", SETTLE, || {
        shard_subscribers(&cluster, node, &channel) >= 1
    })
    .await;
    eprintln!(
        "subscribed again {:?} after the refusal began",
        refused.elapsed()
    );
    hand_over_within_a_second(guard, waiter, "the hold survived").await;
    quiesce(&[&a, &b]).await;
}

// ---------------------------------------------------------------------------------------------
// 3. A waiter and a hold follow a slot migration.
// ---------------------------------------------------------------------------------------------

/// When a slot moves, Redis ends its sharded subscriptions (`sunsubscribe`); the hub
/// subscribes again on the new owner, so a waiter is still woken by a release there. A hold
/// in the slot keeps being renewed on the new owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_and_a_hold_follow_a_slot_migration() {
    let started = Instant::now();
    let cluster = start_cluster(&[]).await;
    let name = "migrating";
    // Shares the lock's hash tag ("migrating"), hence its slot.
    let held_name = "migrating}held";
    let slot = cluster.slot_of(&lock_key(name));
    assert_eq!(cluster.slot_of(&lock_key(held_name)), slot);
    let (source, target) = owner_and_another(&cluster, slot);

    let (a, b) = two_long_lease_clients(&cluster).await;
    let channel = wake_channel(name, &b);
    let short_lease = ms(1000);
    let c = cluster_client(&cluster, ms(1000), short_lease).await;
    let a_guard = a.lock(name).lock().await.expect("lock");
    let held = c.lock(held_name).lock().await.expect("lock");
    let held_lost = held.lost();
    let waiter = spawn_lock_waiter(&b, name);
    eventually("the waiter subscribed on the source", SETTLE, || {
        shard_subscribers(&cluster, source, &channel) >= 1
    })
    .await;
    assert_eq!(b.stats().contended_waits, 1);

    let (cluster, migrated_at) = migrate(cluster, slot, target).await;
    assert_eq!(cluster.master_for_slot(slot), target);
    eventually(
        "the waiter's hub subscribed again on the new owner",
        ms(5000),
        || shard_subscribers(&cluster, target, &channel) >= 1,
    )
    .await;
    eprintln!(
        "resubscribed on the new owner {:?} after the migration",
        migrated_at.elapsed()
    );
    assert_eq!(shard_subscribers(&cluster, source, &channel), 0);
    assert!(!waiter.is_finished(), "the waiter got a lock that is held");

    let released = Instant::now();
    a_guard
        .unlock()
        .await
        .expect("the holder's release follows MOVED");
    let guard = woken_within(
        "the waiter, after a release on the new owner",
        waiter,
        released,
        ms(1000),
    )
    .await;
    let on_target = cluster.keys_on_node(target);
    for key in [lock_key(name), fence_key(name), lock_key(held_name)] {
        assert!(
            on_target.contains(&key),
            "{key} is not on the new owner: {on_target:?}"
        );
    }
    let on_source = cluster.keys_on_node(source);
    assert!(
        !on_source.iter().any(|k| k.contains("{migrating")),
        "keys left on the old owner: {on_source:?}"
    );

    // The hold kept across the migration is renewed on the new owner for three leases.
    while migrated_at.elapsed() < short_lease * 3 + ms(200) {
        let pttl = pttl_on(&cluster, target, &lock_key(held_name));
        assert!(
            pttl > 0,
            "the held lock has PTTL {pttl} on the new owner {:?} after the migration",
            migrated_at.elapsed()
        );
        assert!(!held.is_lost(), "the hold was lost across the migration");
        tokio::time::sleep(ms(100)).await;
    }
    assert!(
        tokio::time::timeout(ms(10), held_lost).await.is_err(),
        "lost() fired"
    );
    held.unlock()
        .await
        .expect("the hold survived the migration");
    guard.unlock().await.expect("unlock");
    assert_eq!(c.stats().lost_leases, 0);
    quiesce(&[&a, &b, &c]).await;
    eprintln!("test took {:?}", started.elapsed());
}

/// While a slot is half-migrated (`MIGRATING` on the source, `IMPORTING` on the target, the
/// lock's keys already moved), calls on one key of the lock follow `ASK` to the target: the
/// watchdog keeps renewing a hold there, and its status can be read. A call on several keys
/// some of which do not exist (a release also names its attempt record) cannot run on either
/// node until the migration ends (Redis answers `ASK` on the source, `TRYAGAIN` on the
/// target): it must fail within about the command timeout, with a cluster error, and leave
/// the hold to its lease. Once the slot has moved, the lock works on the new owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_is_renewed_through_a_half_migrated_slot() {
    let cluster = start_cluster(&[]).await;
    let name = "halfway";
    let key = lock_key(name);
    let slot = cluster.slot_of(&key);
    let (source, target) = owner_and_another(&cluster, slot);
    let command_timeout = ms(1000);
    let short_lease = ms(1000);
    let a = cluster_client(&cluster, command_timeout, short_lease).await;
    let guard = a.lock(name).lock().await.expect("lock");
    let lost = guard.lost();

    let (cluster, moved) = tokio::task::spawn_blocking(move || {
        let moved = cluster.begin_slot_migration(slot, target, usize::MAX);
        (cluster, moved)
    })
    .await
    .expect("migration");
    let begun = Instant::now();
    assert!(moved.contains(&key), "moved {moved:?}");
    assert_eq!(
        cluster.master_for_slot(slot),
        source,
        "the slot has not moved yet"
    );
    while begun.elapsed() < short_lease * 3 + ms(200) {
        let pttl = pttl_asking(&cluster, target, &key);
        assert!(
            pttl > 0,
            "the hold has PTTL {pttl} on the target {:?} into the migration",
            begun.elapsed()
        );
        assert!(!guard.is_lost(), "the hold was lost during the migration");
        tokio::time::sleep(ms(100)).await;
    }
    let renewals = a.stats().renewals;
    assert!(renewals >= 3, "renewals: {renewals}");
    let remaining = a
        .lock(name)
        .remaining_lease()
        .await
        .expect("the status follows ASK");
    assert!(remaining.is_some(), "the lock reads as free");

    let t = Instant::now();
    let released = guard.unlock().await;
    let took = t.elapsed();
    eprintln!("a release during the migration: {released:?} after {took:?}");
    // Its attempt record does not exist yet, so its keys are not all on one side: TRYAGAIN.
    let err = released
        .as_ref()
        .expect_err("a release cannot run while its keys are split");
    assert_eq!(kind_of(err), "cluster", "{err:?}");
    assert!(
        took < command_timeout * 2 + ms(500),
        "the release failed only after {took:?}"
    );
    assert!(
        tokio::time::timeout(ms(10), lost).await.is_ok() || released.is_ok(),
        "the guard was given up"
    );

    let cluster = tokio::task::spawn_blocking(move || {
        cluster.finish_slot_migration(slot, target);
        cluster
    })
    .await
    .expect("migration");
    assert_eq!(cluster.master_for_slot(slot), target);
    // The lock is free on the new owner at once, or once the unreleased hold's lease ends.
    let b = cluster_client(&cluster, command_timeout, ms(30_000)).await;
    let guard = b
        .lock(name)
        .try_lock_for(short_lease * 2)
        .await
        .expect("lock on the new owner")
        .expect("the lock was freed");
    assert!(cluster.keys_on_node(target).contains(&key));
    guard.unlock().await.expect("unlock");
    quiesce(&[&a, &b]).await;
}

/// A permit without a lease, released while its slot is half moved: Redis refuses the release
/// (its keys are split between the two nodes), so it must keep being retried in the
/// background and give the permit back once the move is done: nothing else ever would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_released_while_its_slot_is_half_moved_comes_back_after_the_move() {
    let cluster = start_cluster(&[]).await;
    let name = "halfpermit";
    let permits_key = keys::semaphore(name).permits;
    let slot = cluster.slot_of(&permits_key);
    let (_, target) = owner_and_another(&cluster, slot);
    let a = cluster_client(&cluster, ms(1000), ms(30_000)).await;
    let semaphore = a.semaphore(name);
    assert!(semaphore.try_set_permits(1).await.expect("set permits"));
    let permit = semaphore.acquire().await.expect("acquire");
    assert_eq!(semaphore.available_permits().await.expect("permits"), 0);

    // One of the two keys (the permits and the acquire's record) moves, the other stays.
    let (cluster, moved) = tokio::task::spawn_blocking(move || {
        let moved = cluster.begin_slot_migration(slot, target, 1);
        (cluster, moved)
    })
    .await
    .expect("migration");
    assert_eq!(moved.len(), 1, "moved {moved:?}");
    let released = permit.release().await;
    let err = released.expect_err("a release cannot run while its keys are split");
    assert_eq!(kind_of(&err), "cluster", "{err:?}");

    let cluster = tokio::task::spawn_blocking(move || {
        cluster.finish_slot_migration(slot, target);
        cluster
    })
    .await
    .expect("migration");
    assert_eq!(cluster.master_for_slot(slot), target);
    let moved_at = Instant::now();
    while semaphore.available_permits().await.ok() != Some(1) {
        assert!(
            moved_at.elapsed() < ms(15_000),
            "the permit was not given back within 15 s of the move"
        );
        tokio::time::sleep(ms(100)).await;
    }
    eprintln!(
        "the permit came back {:?} after the move",
        moved_at.elapsed()
    );
    quiesce(&[&a]).await;
}

// ---------------------------------------------------------------------------------------------
// 4. Semaphore and latch waiters follow a slot migration.
// ---------------------------------------------------------------------------------------------

/// The same for a semaphore waiter and a latch waiter (one slot: both are named "sl").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_and_latch_waiters_follow_a_slot_migration() {
    let started = Instant::now();
    let cluster = start_cluster(&[]).await;
    let name = "sl";
    let latch_channel = keys::latch(name).channel;
    let slot = cluster.slot_of(&latch_channel);
    let (source, target) = owner_and_another(&cluster, slot);

    let (a, b) = two_long_lease_clients(&cluster).await;
    // A semaphore waiter listens on its client's own channel.
    let sem_channel = keys::semaphore(name).wake_channels.of(b.id());
    assert_eq!(cluster.slot_of(&sem_channel), slot);
    let sem = a.semaphore(name);
    assert!(sem.try_set_permits(1).await.expect("set permits"));
    let permit = sem.acquire().await.expect("acquire");
    let latch = a.count_down_latch(name);
    assert!(latch.try_set_count(1).await.expect("arm"));
    let sem_waiter = {
        let sem = b.semaphore(name);
        tokio::spawn(async move {
            let permit = sem.acquire().await;
            (permit, Instant::now())
        })
    };
    let latch_waiter = {
        let latch = b.count_down_latch(name);
        tokio::spawn(async move {
            let opened = latch.wait().await;
            (opened, Instant::now())
        })
    };
    eventually("both waiters subscribed on the source", SETTLE, || {
        shard_subscribers(&cluster, source, &sem_channel) >= 1
            && shard_subscribers(&cluster, source, &latch_channel) >= 1
    })
    .await;

    let (cluster, migrated_at) = migrate(cluster, slot, target).await;
    eventually(
        "both waiters' subscriptions moved to the new owner",
        ms(5000),
        || {
            shard_subscribers(&cluster, target, &sem_channel) >= 1
                && shard_subscribers(&cluster, target, &latch_channel) >= 1
        },
    )
    .await;
    eprintln!(
        "resubscribed on the new owner {:?} after the migration",
        migrated_at.elapsed()
    );
    assert!(!sem_waiter.is_finished() && !latch_waiter.is_finished());

    // Both re-check at least every second anyway; woken at once, they take far less.
    let released = Instant::now();
    permit.release().await.expect("release follows MOVED");
    let permit = woken_within("the semaphore waiter", sem_waiter, released, ms(1000)).await;
    let counted = Instant::now();
    latch.count_down().await.expect("count down follows MOVED");
    woken_within("the latch waiter", latch_waiter, counted, ms(1000)).await;
    assert!(cluster
        .keys_on_node(target)
        .contains(&keys::semaphore(name).permits));
    permit.release().await.expect("release");
    quiesce(&[&a, &b]).await;
    eprintln!("test took {:?}", started.elapsed());
}

/// A rate limiter's slot moves while its budget is spent and a waiter of another client
/// waits: the rate and the spent budget move with the slot (a decision on the new owner is
/// still refused, an hour from the next unit), the waiter's subscription follows, and a rate
/// change wakes it at once. The change is the first call of its client since the move, so it
/// meets `MOVED`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limiter_and_its_waiter_follow_a_slot_migration() {
    let started = Instant::now();
    let cluster = start_cluster(&[]).await;
    let name = "rl";
    let channel = keys::rate(name).changed;
    let slot = cluster.slot_of(&channel);
    let (source, target) = owner_and_another(&cluster, slot);

    let (a, b) = two_long_lease_clients(&cluster).await;
    let limiter = a.rate_limiter(name);
    assert!(limiter.try_set_rate(Rate::per_hour(1)).await.expect("set"));
    assert!(limiter.try_acquire(1).await.expect("take").allowed);
    let waiter = {
        let limiter = b.rate_limiter(name);
        tokio::spawn(async move {
            let got = limiter.acquire_for(1, Duration::from_secs(600)).await;
            (got, Instant::now())
        })
    };
    eventually("the waiter subscribed on the source", SETTLE, || {
        shard_subscribers(&cluster, source, &channel) >= 1
    })
    .await;

    let (cluster, migrated_at) = migrate(cluster, slot, target).await;
    eventually(
        "the waiter's subscription moved to the new owner",
        ms(5000),
        || shard_subscribers(&cluster, target, &channel) >= 1,
    )
    .await;
    eprintln!(
        "resubscribed on the new owner {:?} after the migration",
        migrated_at.elapsed()
    );
    // Asked through the waiter's client, so that `a` still has the old slot map.
    let refused = b
        .rate_limiter(name)
        .try_acquire(1)
        .await
        .expect("a decision on the new owner");
    assert!(
        !refused.allowed,
        "the spent budget did not move: {refused:?}"
    );
    assert!(refused.retry_after > Duration::from_secs(60), "{refused:?}");
    let found = cluster.keys_on_node(target);
    assert!(found.contains(&keys::rate(name).rate), "{found:?}");
    assert!(
        !waiter.is_finished(),
        "the waiter returned before the rate changed"
    );

    // Without the wake-up it would look again only after MAX_SLEEP (10 s).
    let changed = Instant::now();
    limiter
        .set_rate(Rate::per_second(100))
        .await
        .expect("set_rate follows MOVED");
    let got = woken_within("the rate limiter waiter", waiter, changed, ms(1000)).await;
    assert!(got, "the waiter got its unit");
    assert!(limiter.delete().await.expect("delete"));
    quiesce(&[&a, &b]).await;
    eprintln!("test took {:?}", started.elapsed());
}

// ---------------------------------------------------------------------------------------------
// 5. A paused primary fails only its own waiters.
// ---------------------------------------------------------------------------------------------

/// While a primary does not answer, the hub's pings per slot fail the waiters of its slots
/// with `Error::Timeout` within a bounded time, and only those: a waiter on another primary
/// is still woken by a release there.
///
/// The nodes run with `cluster-node-timeout` 5 s and the pause ends as soon as the waiter
/// failed (at most 2.5 s), so the paused primary is never failed over. Every script is used
/// once before the pause (see the next test for a script's first use during one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_primary_fails_only_its_own_waiters() {
    let started = Instant::now();
    let cluster = start_cluster(&["--cluster-node-timeout", "5000"]).await;
    let command_timeout = ms(500);
    let names = names_spread(&cluster, "paused", 1);
    let (x, x_master) = names[0].clone();
    let (y, y_master) = names[1].clone();
    assert_ne!(x_master, y_master);

    let a = cluster_client(&cluster, command_timeout, ms(30_000)).await;
    let b = cluster_client(&cluster, command_timeout, ms(30_000)).await;
    for client in [&a, &b] {
        for name in [&x, &y] {
            client
                .lock(name)
                .lock()
                .await
                .expect("lock")
                .unlock()
                .await
                .expect("unlock");
        }
    }
    let a_x = a.lock(&x).lock().await.expect("lock x");
    let a_y = a.lock(&y).lock().await.expect("lock y");
    let x_waiter = spawn_lock_waiter(&b, &x);
    let y_waiter = spawn_lock_waiter(&b, &y);
    eventually("both waiters subscribed", SETTLE, || {
        shard_subscribers(&cluster, x_master, &wake_channel(&x, &b)) >= 1
            && shard_subscribers(&cluster, y_master, &wake_channel(&y, &b)) >= 1
    })
    .await;
    tokio::time::sleep(ms(100)).await;

    let paused = Paused::pause(cluster.node(x_master));
    let paused_at = Instant::now();
    tokio::time::sleep(ms(300)).await;
    let released = Instant::now();
    a_y.unlock().await.expect("y's primary answers");
    let y_guard = woken_within(
        "the waiter on the live primary, during the pause",
        y_waiter,
        released,
        ms(1000),
    )
    .await;

    // The hub needs two ping rounds (each up to a command timeout) to find the slot silent
    // for a whole command timeout, then the waiter's own request times out: at most about
    // 3.4 command timeouts.
    let x_bound = command_timeout * 4 + ms(500);
    let outcome = tokio::time::timeout(x_bound.saturating_sub(paused_at.elapsed()), x_waiter).await;
    let failed_after = paused_at.elapsed();
    paused.resume();
    let (x_outcome, _) = outcome
        .unwrap_or_else(|_| {
            panic!("the wait on the paused primary did not fail within {x_bound:?}")
        })
        .expect("waiter task");
    match x_outcome {
        Err(Error::Timeout) => {}
        other => panic!(
            "the wait on the paused primary: expected Error::Timeout, got {:?}",
            other.map(|g| g.fencing_token())
        ),
    }
    eprintln!("the wait on the paused primary failed after {failed_after:?}");
    assert!(
        failed_after >= command_timeout,
        "failed before a whole command timeout of silence ({failed_after:?})"
    );

    // Not failed over, and waiting works again once it answers.
    let cluster = tokio::task::spawn_blocking(move || {
        cluster.wait_for_ok();
        cluster
    })
    .await
    .expect("cluster ok");
    assert_eq!(cluster.master_for_key(&lock_key(&x)), x_master);
    let x_waiter = spawn_lock_waiter(&b, &x);
    eventually("the waiter subscribed again", SETTLE, || {
        shard_subscribers(&cluster, x_master, &wake_channel(&x, &b)) >= 1
    })
    .await;
    let released = Instant::now();
    a_x.unlock().await.expect("the hold survived the pause");
    let x_guard = woken_within(
        "the waiter on the resumed primary",
        x_waiter,
        released,
        ms(1000),
    )
    .await;
    x_guard.unlock().await.expect("unlock");
    y_guard.unlock().await.expect("unlock");
    quiesce(&[&a, &b]).await;
    eprintln!("test took {:?}", started.elapsed());
}

/// DEPLOYMENT.md, "Failover, replicas and your holds": other slots carry on while a primary does not answer; that
/// includes the first call of a script on a live primary (Redis answers `NOSCRIPT` and the
/// script must be loaded there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_first_used_while_a_primary_is_paused_runs_on_the_live_primaries() {
    let cluster = start_cluster(&["--cluster-node-timeout", "5000"]).await;
    let command_timeout = ms(500);
    let names = names_spread(&cluster, "first-use", 1);
    let (_, paused_master) = names[0].clone();
    let (y, _) = names[1].clone();
    let a = cluster_client(&cluster, command_timeout, ms(30_000)).await;
    let paused = Paused::pause(cluster.node(paused_master));
    let t = Instant::now();
    let locked = a.lock(&y).try_lock().await;
    let took = t.elapsed();
    paused.resume();
    let guard = match locked {
        Ok(Some(guard)) => guard,
        other => panic!(
            "try_lock on a live primary while another primary was paused: {:?} after {took:?}",
            other.map(|g| g.map(|g| g.fencing_token()))
        ),
    };
    guard.unlock().await.expect("unlock");
}
