//! Fault tests of the reentrant lock, the read-write lock and the watchdog: network faults
//! through the [`ChaosProxy`], server-side faults (`CLIENT KILL`, `SCRIPT FLUSH`,
//! `CLIENT PAUSE`, a restart without persistence), and holders in processes of their own that
//! are paused (`SIGSTOP`) or killed (`SIGKILL`). Fault ids name the sections below and the
//! tests: F1 a holder paused past its lease, F2 a holder killed, F3 network faults, F4 a
//! restart without persistence, F5 one with AOF, F7 pub/sub connections cut.
//!
//! The safety checks do not depend on timing:
//!
//! * a **fenced resource** (in process) accepts a read or write only with a fencing token at
//!   least the highest it has seen; its counter must end equal to the writes it accepted (no
//!   lost update), and a token it rejects must belong to a guard that already knows it is lost
//!   (a newer grant implies the old lease ended on the server, and the client-side deadline is
//!   never later than that);
//! * a **registry of live guards** (in process): when a guard is granted, every conflicting
//!   guard still registered must already know it is lost;
//! * a **PTTL sampler**: no key of a lock is ever seen without a TTL.
//!
//! Every test starts its own server (and proxy), so the tests run in parallel; the time bounds
//! are generous, for a small, loaded machine. Each test prints what it ran and what it
//! found (`cargo test --test faults_locks -- --nocapture`).

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{eventually, exists, is_outage, lock_key, ms, wake_channel};
use redisync::prelude::*;
use redisync_test_harness::{ChaosProxy, Holder, RedisServer};

/// The holder binary of the harness crate.
const HOLDER: &str = env!("CARGO_BIN_EXE_holder");

/// How long a condition that should hold "soon" may take before the test fails.
const SETTLE: Duration = Duration::from_secs(10);

async fn build_client(url: &str, watchdog: Duration, command_timeout: Duration) -> Client {
    Client::builder(url)
        .watchdog_timeout(watchdog)
        .command_timeout(command_timeout)
        .build()
        .await
        .unwrap_or_else(|e| panic!("connecting to {url}: {e}"))
}

// ---------------------------------------------------------------------------------------------
// The fenced resource and the registry of live guards.
// ---------------------------------------------------------------------------------------------

/// A storage service that checks fencing tokens, with a read-modify-write counter behind it.
#[derive(Debug, Default)]
struct FencedState {
    /// The highest token presented so far.
    max_token: u64,
    value: u64,
    accepted_writes: u64,
    /// Reads and writes refused because their token was below `max_token`.
    stale_rejected: u64,
    /// Tokens of the accepted writes, in order (for the independent stale check).
    accepted_tokens: Vec<u64>,
}

impl FencedState {
    fn read(&mut self, token: u64) -> Option<u64> {
        if token < self.max_token {
            self.stale_rejected += 1;
            return None;
        }
        self.max_token = token;
        Some(self.value)
    }

    fn write(&mut self, token: u64, value: u64) -> bool {
        if token < self.max_token {
            self.stale_rejected += 1;
            return false;
        }
        self.max_token = token;
        self.value = value;
        self.accepted_writes += 1;
        self.accepted_tokens.push(token);
        true
    }

    /// Accepted writes whose token was below an earlier accepted write's: must be 0.
    fn stale_accepted(&self) -> u64 {
        let mut highest = 0;
        let mut stale = 0;
        for &token in &self.accepted_tokens {
            if token < highest {
                stale += 1;
            }
            highest = highest.max(token);
        }
        stale
    }
}

/// A lock handle of either kind.
#[derive(Clone)]
enum Handle {
    Lock(ReentrantLock),
    Rw(ReadWriteLock),
}

/// A guard of either kind.
enum Held {
    Lock(LockGuard),
    Read(ReadGuard),
    Write(WriteGuard),
}

impl Handle {
    async fn acquire(&self, write: bool, wait: Duration) -> Result<Option<Held>> {
        Ok(match self {
            Handle::Lock(lock) => lock.try_lock_for(wait).await?.map(Held::Lock),
            Handle::Rw(rw) if write => rw.try_write_for(wait).await?.map(Held::Write),
            Handle::Rw(rw) => rw.try_read_for(wait).await?.map(Held::Read),
        })
    }
}

impl Held {
    fn token(&self) -> Option<u64> {
        match self {
            Held::Lock(guard) => Some(guard.fencing_token()),
            Held::Write(guard) => Some(guard.fencing_token()),
            Held::Read(_) => None,
        }
    }

    fn is_exclusive(&self) -> bool {
        !matches!(self, Held::Read(_))
    }

    fn is_lost(&self) -> bool {
        match self {
            Held::Lock(guard) => guard.is_lost(),
            Held::Read(guard) => guard.is_lost(),
            Held::Write(guard) => guard.is_lost(),
        }
    }

    async fn unlock(self) -> Result<()> {
        match self {
            Held::Lock(guard) => guard.unlock().await,
            Held::Read(guard) => guard.unlock().await,
            Held::Write(guard) => guard.unlock().await,
        }
    }
}

/// A guard some worker holds right now.
struct Registered {
    worker: usize,
    proxied: bool,
    held: Arc<Held>,
}

/// Everything the workers of one run share, and what they count.
#[derive(Default)]
struct Workload {
    fenced: Mutex<FencedState>,
    /// A counter the holders increment without any protection but the lock (load, yield,
    /// store): exact only if the lock excludes.
    plain: AtomicU64,
    plain_increments: AtomicU64,
    stop: AtomicBool,
    /// While set, proxied exclusive holders keep writing instead of leaving (a holder that
    /// stalls in its critical section, like a long GC pause, and never checks its lease).
    slow: AtomicBool,
    live: Mutex<Vec<Registered>>,
    exclusive_acquired: AtomicU64,
    shared_acquired: AtomicU64,
    acquire_errors: AtomicU64,
    wait_timeouts: AtomicU64,
    unlock_ok: AtomicU64,
    unlock_not_owner: AtomicU64,
    unlock_errors: AtomicU64,
    /// Grants that overlapped a conflicting guard that already knew it was lost (allowed).
    overlaps_with_lost: AtomicU64,
    /// Stale tokens the fenced resource refused (each from a lost guard).
    stale_refusals_seen: AtomicU64,
    violations: Mutex<Vec<String>>,
}

impl Workload {
    fn violation(&self, what: String) {
        eprintln!("VIOLATION: {what}");
        self.violations.lock().unwrap().push(what);
    }

    /// Registers a granted guard, checking it against every conflicting guard still live.
    fn admit(&self, worker: usize, proxied: bool, held: &Arc<Held>) {
        let mut live = self.live.lock().unwrap();
        for other in live.iter() {
            if !(held.is_exclusive() || other.held.is_exclusive()) {
                continue; // two readers
            }
            if other.held.is_lost() {
                self.overlaps_with_lost.fetch_add(1, Ordering::SeqCst);
            } else {
                self.violation(format!(
                    "worker {worker} was granted {:?} (exclusive: {}) while worker {} still held \
                     {:?} (exclusive: {}) and did not know it was lost",
                    held.token(),
                    held.is_exclusive(),
                    other.worker,
                    other.held.token(),
                    other.held.is_exclusive()
                ));
            }
        }
        live.push(Registered {
            worker,
            proxied,
            held: held.clone(),
        });
        if held.is_exclusive() {
            self.exclusive_acquired.fetch_add(1, Ordering::SeqCst);
        } else {
            self.shared_acquired.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn leave(&self, worker: usize) {
        self.live.lock().unwrap().retain(|r| r.worker != worker);
    }

    fn proxied_exclusive_holder(&self) -> bool {
        self.live
            .lock()
            .unwrap()
            .iter()
            .any(|r| r.proxied && r.held.is_exclusive())
    }

    /// A refused token must come from a guard that knows it is lost.
    fn refused(&self, worker: usize, held: &Held, what: &str) {
        self.stale_refusals_seen.fetch_add(1, Ordering::SeqCst);
        if !held.is_lost() {
            self.violation(format!(
                "worker {worker}: the fenced resource refused the {what} of token {:?}, but the \
                 guard did not know it was lost (someone was granted the lock before this \
                 guard's lease ended on the client)",
                held.token()
            ));
        }
    }

    /// The critical section of an exclusive holder. Returns whether the resource refused it.
    async fn exclusive_section(&self, worker: usize, proxied: bool, held: &Held) -> bool {
        let token = held.token().expect("exclusive guards have tokens");
        loop {
            let read = self.fenced.lock().unwrap().read(token);
            let Some(value) = read else {
                self.refused(worker, held, "read");
                return true;
            };
            let plain = self.plain.load(Ordering::SeqCst);
            tokio::task::yield_now().await;
            self.plain.store(plain + 1, Ordering::SeqCst);
            self.plain_increments.fetch_add(1, Ordering::SeqCst);
            if !self.fenced.lock().unwrap().write(token, value + 1) {
                self.refused(worker, held, "write");
                return true;
            }
            if !(proxied && self.slow.load(Ordering::SeqCst)) {
                return false;
            }
            tokio::time::sleep(ms(50)).await;
        }
    }

    /// One worker: acquire, critical section, release, until stopped. `write_every` = 1 takes
    /// every hold exclusively (the lock); n > 1 makes every n-th hold a write.
    async fn worker(
        self: Arc<Self>,
        worker: usize,
        handle: Handle,
        proxied: bool,
        write_every: u64,
    ) {
        let mut round = 0u64;
        while !self.stop.load(Ordering::SeqCst) {
            round += 1;
            let write = write_every == 1 || (round + worker as u64).is_multiple_of(write_every);
            let held = match handle.acquire(write, ms(1500)).await {
                Ok(Some(held)) => Arc::new(held),
                Ok(None) => {
                    self.wait_timeouts.fetch_add(1, Ordering::SeqCst);
                    continue;
                }
                Err(err) => {
                    // A read hold whose release failed in an outage stays this owner's until
                    // its lease ends, and a write by the same owner is then an upgrade.
                    assert!(
                        is_outage(&err) || matches!(err, Error::UpgradeNotSupported),
                        "worker {worker}: unexpected error {err:?}"
                    );
                    self.acquire_errors.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(ms(20)).await;
                    continue;
                }
            };
            self.admit(worker, proxied, &held);
            let refused = if held.is_exclusive() {
                self.exclusive_section(worker, proxied, &held).await
            } else {
                tokio::time::sleep(ms(1)).await;
                false
            };
            self.leave(worker);
            let held = Arc::into_inner(held).expect("only its worker keeps a guard once it left");
            match held.unlock().await {
                Ok(()) => {
                    if refused {
                        self.violation(format!(
                            "worker {worker}: a release succeeded after the lock had been \
                             granted to a newer token"
                        ));
                    }
                    self.unlock_ok.fetch_add(1, Ordering::SeqCst);
                }
                Err(Error::NotOwner) => {
                    self.unlock_not_owner.fetch_add(1, Ordering::SeqCst);
                }
                Err(err) => {
                    assert!(is_outage(&err), "worker {worker}: unexpected error {err:?}");
                    self.unlock_errors.fetch_add(1, Ordering::SeqCst);
                }
            }
        }
    }
}

/// Samples `PTTL` of `keys` directly on the server (never through the proxy) until `stop`.
/// Returns (samples, samples at -1, reconnects).
fn spawn_pttl_sampler(
    url: String,
    keys: Vec<String>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<(u64, u64, u64)> {
    std::thread::spawn(move || {
        let (mut samples, mut without_ttl, mut reconnects) = (0u64, 0u64, 0u64);
        let client = redis::Client::open(url).unwrap();
        let mut connection: Option<redis::Connection> = None;
        while !stop.load(Ordering::SeqCst) {
            let Some(con) = connection.as_mut() else {
                match client.get_connection_with_timeout(Duration::from_secs(1)) {
                    Ok(con) => {
                        let _ = con.set_read_timeout(Some(Duration::from_secs(1)));
                        connection = Some(con);
                    }
                    Err(_) => std::thread::sleep(ms(10)),
                }
                continue;
            };
            let mut pipe = redis::pipe();
            for key in &keys {
                pipe.cmd("PTTL").arg(key);
            }
            match pipe.query::<Vec<i64>>(con) {
                Ok(ttls) => {
                    samples += ttls.len() as u64;
                    for (key, ttl) in keys.iter().zip(&ttls) {
                        if *ttl == -1 {
                            without_ttl += 1;
                            eprintln!("VIOLATION: {key} has no TTL");
                        }
                    }
                }
                Err(_) => {
                    // CLIENT KILL TYPE normal kills this connection too.
                    reconnects += 1;
                    connection = None;
                }
            }
            std::thread::sleep(ms(2));
        }
        (samples, without_ttl, reconnects)
    })
}

// ---------------------------------------------------------------------------------------------
// The chaos workload (F3 plus server-side faults) for the lock and the read-write lock.
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Lock,
    RwLock,
}

/// The workers' clients: three through the proxy (two workers each) and one direct (two
/// workers), which keeps working while the proxy cuts the others off and so takes over their
/// expired leases.
const PROXIED_CLIENTS: usize = 3;
const WORKERS_PER_CLIENT: usize = 2;
/// Leases and timeouts of every client: a blackhole shorter than the command timeout costs no
/// lease; a longer one (longer than the lease too) loses the proxied holders' leases.
const LEASE: Duration = Duration::from_millis(1000);
const COMMAND_TIMEOUT: Duration = Duration::from_millis(800);
const SHORT_BLACKHOLE: Duration = Duration::from_millis(300);
const LONG_BLACKHOLE: Duration = Duration::from_millis(2000);
/// The long blackhole lasts until the fence refused the stalled holder, at most this long.
const MAX_LONG_BLACKHOLE: Duration = Duration::from_secs(8);

/// Runs the workload on `kind`, with the fault schedule if `faults`, and checks every
/// invariant. Returns the report line.
async fn chaos_run(kind: Kind, faults: bool) -> String {
    let server = RedisServer::start();
    let proxy = ChaosProxy::start(&server);
    let name = "chaos";
    let keys = match kind {
        Kind::Lock => vec![lock_key(name)],
        Kind::RwLock => {
            let rw = common::keys::rw(name);
            vec![rw.hash, rw.readers]
        }
    };
    let write_every = match kind {
        Kind::Lock => 1,
        Kind::RwLock => 3,
    };
    let mut clients = Vec::new();
    for c in 0..=PROXIED_CLIENTS {
        let proxied = c < PROXIED_CLIENTS;
        let url = if proxied { proxy.url() } else { server.url() };
        clients.push((build_client(&url, LEASE, COMMAND_TIMEOUT).await, proxied));
    }
    let handle_for = |client: &Client| match kind {
        Kind::Lock => Handle::Lock(client.lock(name)),
        Kind::RwLock => Handle::Rw(client.read_write_lock(name)),
    };

    let load = Arc::new(Workload::default());
    let sampler_stop = Arc::new(AtomicBool::new(false));
    let sampler = spawn_pttl_sampler(server.url(), keys.clone(), sampler_stop.clone());
    let started = Instant::now();
    let mut workers = Vec::new();
    for (c, (client, proxied)) in clients.iter().enumerate() {
        for t in 0..WORKERS_PER_CLIENT {
            let worker = c * WORKERS_PER_CLIENT + t;
            workers.push(tokio::spawn(load.clone().worker(
                worker,
                handle_for(client),
                *proxied,
                write_every,
            )));
        }
    }

    let mut injected: Vec<String> = Vec::new();
    if faults {
        run_fault_schedule(&server, &proxy, &load, &mut injected).await;
    } else {
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    load.stop.store(true, Ordering::SeqCst);
    for worker in workers {
        tokio::time::timeout(Duration::from_secs(20), worker)
            .await
            .expect("workers stop within 20 s")
            .expect("worker panicked");
    }
    let elapsed = started.elapsed();

    // Liveness: every client works again once the faults are over.
    for (c, (client, _)) in clients.iter().enumerate() {
        let handle = handle_for(client);
        let deadline = Instant::now() + SETTLE;
        loop {
            match handle.acquire(true, Duration::from_secs(5)).await {
                Ok(Some(held)) => {
                    held.unlock().await.unwrap_or_else(|e| {
                        panic!("client {c}: release after the faults failed: {e}")
                    });
                    break;
                }
                Ok(None) => panic!("client {c}: the lock stayed busy after the faults"),
                Err(err) if is_outage(&err) && Instant::now() < deadline => {
                    tokio::time::sleep(ms(50)).await;
                }
                Err(err) => panic!("client {c} did not recover after the faults: {err}"),
            }
        }
    }
    // Nothing is left behind: every hold was released or expires with its lease.
    eventually("the lock's keys are gone", SETTLE, || {
        keys.iter().all(|key| !exists(&server, key))
    })
    .await;
    sampler_stop.store(true, Ordering::SeqCst);
    let (samples, without_ttl, sampler_reconnects) = sampler.join().unwrap();

    let fenced = std::mem::take(&mut *load.fenced.lock().unwrap());
    let violations = load.violations.lock().unwrap().clone();
    let lost_leases: u64 = clients.iter().map(|(c, _)| c.stats().lost_leases).sum();
    let acquires: u64 = clients.iter().map(|(c, _)| c.stats().acquires).sum();
    let count = |counter: &AtomicU64| counter.load(Ordering::SeqCst);
    let plain = count(&load.plain);
    let plain_increments = count(&load.plain_increments);
    let report = format!(
        "{kind:?} {}: {:.1} s, {} workers on {} clients ({} via the proxy); {} acquires \
         ({} exclusive, {} shared), {} wait timeouts, {} acquire errors; releases: {} ok, {} \
         not-owner, {} errors; fenced resource: {} writes accepted, value {}, {} stale refused, \
         {} stale accepted; plain counter {} of {} increments ({} lost); {} grants overlapped \
         a lost guard; {} leases lost; PTTL: {} samples, {} without TTL ({} sampler \
         reconnects); proxy: {} connections accepted, {} closed by faults; faults: [{}]; \
         violations: {}",
        if faults { "chaos" } else { "control" },
        elapsed.as_secs_f64(),
        clients.len() * WORKERS_PER_CLIENT,
        clients.len(),
        PROXIED_CLIENTS,
        acquires,
        count(&load.exclusive_acquired),
        count(&load.shared_acquired),
        count(&load.wait_timeouts),
        count(&load.acquire_errors),
        count(&load.unlock_ok),
        count(&load.unlock_not_owner),
        count(&load.unlock_errors),
        fenced.accepted_writes,
        fenced.value,
        fenced.stale_rejected,
        fenced.stale_accepted(),
        plain,
        plain_increments,
        plain_increments - plain,
        count(&load.overlaps_with_lost),
        lost_leases,
        samples,
        without_ttl,
        sampler_reconnects,
        proxy.accepted(),
        proxy.closed_by_faults(),
        injected.join("; "),
        violations.len(),
    );
    println!("{report}");

    assert!(violations.is_empty(), "{violations:#?}\n{report}");
    assert_eq!(
        fenced.value, fenced.accepted_writes,
        "lost update behind the fence: {report}"
    );
    assert_eq!(fenced.stale_accepted(), 0, "{report}");
    assert_eq!(without_ttl, 0, "a lock key had no TTL: {report}");
    assert!(samples > 100, "the PTTL sampler barely ran: {report}");
    assert!(
        count(&load.exclusive_acquired) >= 20,
        "too little work was done: {report}"
    );
    if faults {
        // The long blackhole made a stalled proxied holder lose its lease while the direct
        // client took over: the fence must have had something to refuse.
        assert!(
            fenced.stale_rejected >= 1,
            "the fencing path was never exercised: {report}"
        );
    } else {
        // Control run: nothing may go wrong at all.
        assert_eq!(
            plain, plain_increments,
            "lost update without faults: {report}"
        );
        assert_eq!(fenced.stale_rejected, 0, "{report}");
        assert_eq!(lost_leases, 0, "{report}");
        assert_eq!(count(&load.acquire_errors), 0, "{report}");
        assert_eq!(count(&load.unlock_not_owner), 0, "{report}");
        assert_eq!(count(&load.unlock_errors), 0, "{report}");
        assert_eq!(count(&load.overlaps_with_lost), 0, "{report}");
    }
    for (client, _) in &clients {
        client.shutdown().await;
    }
    report
}

/// Latency spikes, a short and a long blackhole, resets, `CLIENT KILL TYPE normal`,
/// `SCRIPT FLUSH`, `CLIENT PAUSE 300 WRITE` and a cut of the pub/sub connections, with normal
/// operation in between. Appends what it did to `injected`.
async fn run_fault_schedule(
    server: &RedisServer,
    proxy: &ChaosProxy,
    load: &Workload,
    injected: &mut Vec<String>,
) {
    let gap = ms(400);
    tokio::time::sleep(gap).await;

    for latency in [ms(30), ms(250)] {
        proxy.set_latency(latency);
        tokio::time::sleep(ms(600)).await;
        proxy.set_latency(Duration::ZERO);
        injected.push(format!("latency {latency:?} for 600 ms"));
        tokio::time::sleep(gap).await;
    }

    proxy.blackhole(true);
    tokio::time::sleep(SHORT_BLACKHOLE).await;
    let closed = proxy.blackhole(false);
    injected.push(format!(
        "blackhole {SHORT_BLACKHOLE:?} (< command timeout), {closed} connections closed after"
    ));
    tokio::time::sleep(gap).await;

    let reset = proxy.reset_all();
    injected.push(format!("reset_all: {reset} connections"));
    tokio::time::sleep(gap).await;

    let killed = server.cmd(&["CLIENT", "KILL", "TYPE", "normal"]);
    injected.push(format!("CLIENT KILL TYPE normal: {killed:?}"));
    tokio::time::sleep(gap).await;

    server.cmd(&["SCRIPT", "FLUSH"]);
    injected.push("SCRIPT FLUSH".to_owned());
    tokio::time::sleep(gap).await;

    server.cmd(&["CLIENT", "PAUSE", "300", "WRITE"]);
    injected.push("CLIENT PAUSE 300 WRITE".to_owned());
    tokio::time::sleep(ms(300) + gap).await;

    let cut = proxy.cut_pubsub();
    injected.push(format!("cut_pubsub: {cut} connections"));
    tokio::time::sleep(gap).await;

    // A proxied exclusive holder stalls in its critical section (slow mode) and the proxy
    // blackholes it past its lease: the direct client takes over with a newer token, and the
    // stalled holder's next access must be refused by the fence.
    load.slow.store(true, Ordering::SeqCst);
    let deadline = Instant::now() + SETTLE;
    while !load.proxied_exclusive_holder() {
        assert!(
            Instant::now() < deadline,
            "no proxied client got the lock within {SETTLE:?}"
        );
        tokio::time::sleep(ms(2)).await;
    }
    proxy.blackhole(true);
    let blackholed_at = Instant::now();
    // Until the fence has refused the stalled holder (the takeover may wait for the marks
    // of blackholed waiting writers to lapse), but at least LONG_BLACKHOLE.
    let refusals = load.stale_refusals_seen.load(Ordering::SeqCst);
    let deadline = blackholed_at + MAX_LONG_BLACKHOLE;
    while blackholed_at.elapsed() < LONG_BLACKHOLE
        || (load.stale_refusals_seen.load(Ordering::SeqCst) == refusals
            && Instant::now() < deadline)
    {
        tokio::time::sleep(ms(10)).await;
    }
    let lasted = blackholed_at.elapsed();
    load.slow.store(false, Ordering::SeqCst);
    let closed = proxy.blackhole(false);
    injected.push(format!(
        "blackhole {lasted:.1?} (> command timeout and lease) with a stalled holder, \
         {closed} connections closed after"
    ));
    // Recovery: the proxied clients reconnect and work again.
    tokio::time::sleep(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_under_chaos_fences_every_stale_holder() {
    chaos_run(Kind::Lock, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rwlock_under_chaos_never_overlaps_a_writer() {
    chaos_run(Kind::RwLock, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_runs_without_faults_are_exact() {
    chaos_run(Kind::Lock, false).await;
    chaos_run(Kind::RwLock, false).await;
}

// ---------------------------------------------------------------------------------------------
// F1 and F2: a holder process paused or killed.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f1_paused_holder_is_fenced_off_and_learns_it_lost() {
    let server = RedisServer::start();
    let name = "f1";
    let url = server.url();
    let mut holder = Holder::spawn(HOLDER, &["lock", &url, name, "--watchdog-ms", "600"]);
    let first: u64 = holder.acquired(SETTLE).await.parse().unwrap();
    let mut fenced = FencedState::default();

    // The holder writes once while it holds.
    holder.send("write").unwrap();
    let write = holder
        .wait_line("write ", SETTLE)
        .await
        .expect("write line");
    assert_eq!(write, format!("{first} false"));
    assert!(fenced.write(first, 1));

    // Paused well past its lease: another client takes over with a newer token.
    holder.sigstop();
    let stopped_at = Instant::now();
    let client = build_client(&url, Duration::from_secs(30), Duration::from_secs(5)).await;
    let lock = client.lock(name);
    let guard = lock
        .try_lock_for(Duration::from_secs(5))
        .await
        .unwrap()
        .expect("the paused holder's lease ends within its 600 ms watchdog timeout");
    let takeover = stopped_at.elapsed();
    let second = guard.fencing_token();
    assert!(second > first, "token {second} after {first}");
    assert!(
        takeover < Duration::from_secs(3),
        "took over {takeover:?} after the pause"
    );
    assert!(fenced.write(second, 2));
    // Stay paused a little longer (the holder's lease is long gone by now).
    tokio::time::sleep(ms(300)).await;

    // Resumed: the holder learns it lost, and its stale write is refused.
    let resumed_at = Instant::now();
    holder.sigcont();
    assert!(
        holder.wait_line("lost", SETTLE).await.is_some(),
        "the resumed holder never learned it lost the lock: {:?}",
        holder.transcript()
    );
    let learned = resumed_at.elapsed();
    holder.send("write").unwrap();
    let write = holder
        .wait_line("write ", SETTLE)
        .await
        .expect("write line");
    assert_eq!(write, format!("{first} true"), "the write it would make");
    assert!(!fenced.write(first, 3), "the stale token must be refused");
    assert_eq!(fenced.stale_rejected, 1);
    assert_eq!(fenced.stale_accepted(), 0);
    assert_eq!(fenced.value, 2);

    holder.send("release").unwrap();
    let release = holder.wait_line("release", SETTLE).await.expect("release");
    assert!(
        release.starts_with("-error not-owner"),
        "the stale holder's release: release{release}"
    );
    assert!(holder.wait_exit(SETTLE).await.is_some());
    assert!(
        lock.is_held().await.unwrap(),
        "the new holder keeps the lock"
    );
    guard.unlock().await.unwrap();
    println!(
        "F1 pause: holder token {first} paused; takeover after {takeover:?} with token {second}; \
         the resumed holder printed `lost` {learned:?} after SIGCONT; stale write refused \
         (1 refused, 0 stale accepted)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f2_killed_holder_frees_lock_and_permit_within_lease() {
    let server = RedisServer::start();
    let url = server.url();
    let watchdog = ms(600);
    let margin = ms(1400);
    let client = build_client(&url, Duration::from_secs(30), Duration::from_secs(5)).await;

    // A lock held by a process that is killed while another client waits for it.
    let name = "f2";
    let mut holder = Holder::spawn(HOLDER, &["lock", &url, name, "--watchdog-ms", "600"]);
    let token: u64 = holder.acquired(SETTLE).await.parse().unwrap();
    let waiter = client.lock(name);
    let waiting = tokio::spawn(async move {
        let guard = waiter.lock().await;
        (guard, Instant::now())
    });
    eventually("the waiter is subscribed", SETTLE, || {
        server.numsub(&wake_channel(name, &client)) == 1
    })
    .await;
    holder.sigkill();
    let killed_at = Instant::now();
    let (guard, acquired_at) = tokio::time::timeout(SETTLE, waiting)
        .await
        .expect("the waiter gets the lock of a killed holder")
        .unwrap();
    let guard = guard.unwrap();
    let lock_free_after = acquired_at.duration_since(killed_at);
    assert!(guard.fencing_token() > token);
    assert!(
        lock_free_after <= watchdog + margin,
        "the lock of a killed holder was free only {lock_free_after:?} later (watchdog \
         timeout {watchdog:?})"
    );
    guard.unlock().await.unwrap();

    // An expirable permit held by a process that is killed.
    let name = "f2-permit";
    let mut holder = Holder::spawn(HOLDER, &["permit", &url, name, "--watchdog-ms", "600"]);
    let id = holder.acquired(SETTLE).await;
    let semaphore = client.expirable_semaphore(name);
    assert!(semaphore.try_acquire().await.unwrap().is_none(), "1 permit");
    holder.sigkill();
    let killed_at = Instant::now();
    let permit = semaphore
        .try_acquire_for(SETTLE)
        .await
        .unwrap()
        .expect("the killed holder's permit comes back");
    let permit_free_after = killed_at.elapsed();
    assert_ne!(permit.id(), id);
    assert!(
        permit_free_after <= watchdog + margin,
        "the permit of a killed holder came back only {permit_free_after:?} later"
    );
    permit.release().await.unwrap();
    assert_eq!(semaphore.available_permits().await.unwrap(), 1);
    println!(
        "F2 crash: lock free {lock_free_after:?} and permit back {permit_free_after:?} after \
         SIGKILL (watchdog timeout {watchdog:?})"
    );
}

// ---------------------------------------------------------------------------------------------
// F4: Redis restarts without persistence.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f4_restart_without_persistence_holders_learn_waiters_recover() {
    let mut server = RedisServer::start();
    let url = server.url();
    let name = "f4";
    let lease = ms(1000);
    let timeout = ms(1000);
    let holder_client = build_client(&url, lease, timeout).await;
    let waiter_client = build_client(&url, lease, timeout).await;
    let other_client = build_client(&url, lease, timeout).await;

    let guard = holder_client.lock(name).lock().await.unwrap();
    let token_before = guard.fencing_token();
    let lost = guard.lost();
    // Two waiters: one blocking lock(), one bounded try_lock_for(); each holds 100 ms.
    let hold = |handle: ReentrantLock, bounded: bool| async move {
        let outcome = if bounded {
            match handle.try_lock_for(Duration::from_secs(8)).await {
                Ok(Some(guard)) => Ok(guard),
                Ok(None) => return Err("wait timed out".to_owned()),
                Err(err) => Err(err),
            }
        } else {
            handle.lock().await
        };
        match outcome {
            Ok(guard) => {
                let acquired_at = Instant::now();
                let token = guard.fencing_token();
                tokio::time::sleep(ms(100)).await;
                let released_at = Instant::now();
                guard.unlock().await.map_err(|e| e.to_string())?;
                Ok(Some((token, acquired_at, released_at)))
            }
            Err(err) if is_outage(&err) => {
                println!("F4: a waiter's outage error: {err}");
                Ok(None)
            }
            Err(err) => Err(err.to_string()),
        }
    };
    let timed = |future| async move {
        let outcome = future.await;
        (outcome, Instant::now())
    };
    let blocking = tokio::spawn(timed(hold(waiter_client.lock(name), false)));
    let bounded = tokio::spawn(timed(hold(other_client.lock(name), true)));
    eventually("both waiters are subscribed", SETTLE, || {
        server.numsub(&wake_channel(name, &waiter_client)) == 1
            && server.numsub(&wake_channel(name, &other_client)) == 1
    })
    .await;

    let restart_began = Instant::now();
    server.restart();
    let restarted_at = Instant::now();
    println!("F4: the restart took {:?}", restarted_at - restart_began);

    // The holder learns its hold is gone (renewal finds nothing), within about a lease.
    tokio::time::timeout(SETTLE, lost)
        .await
        .expect("the holder learns that the restart took its lock");
    let learned = restarted_at.elapsed();
    // Each waiter either gets the lock or an outage error, within a bounded time.
    let mut grants = Vec::new();
    for (what, task) in [("lock()", blocking), ("try_lock_for()", bounded)] {
        let (outcome, finished_at) = tokio::time::timeout(Duration::from_secs(20), task)
            .await
            .unwrap_or_else(|_| panic!("{what} hangs after the restart"))
            .expect("waiter panicked");
        let after = finished_at.saturating_duration_since(restart_began);
        match outcome {
            Ok(Some(grant)) => {
                println!("F4: {what} got the lock {after:?} after the restart began");
                grants.push(grant)
            }
            Ok(None) => {
                println!("F4: {what} failed with an outage error {after:?} after the restart began")
            }
            Err(err) => panic!("{what} after the restart: {err}"),
        }
    }
    // The waiters' holds never overlapped.
    grants.sort_by_key(|g| g.1);
    for pair in grants.windows(2) {
        assert!(
            pair[0].2 <= pair[1].1,
            "two holders at once after the restart: {grants:?}"
        );
    }
    // The stale holder's release is refused.
    let release = guard.unlock().await;
    assert!(
        matches!(release, Err(Error::NotOwner)),
        "the release of a hold the restart erased: {release:?}"
    );

    // Every client works again; fencing tokens after the restart are measured, not asserted:
    // the fence counter was not persisted, so it starts over.
    let mut tokens_after = Vec::new();
    for client in [&holder_client, &waiter_client, &other_client] {
        let guard = tokio::time::timeout(SETTLE, client.lock(name).lock())
            .await
            .expect("lock() after the restart")
            .unwrap();
        tokens_after.push(guard.fencing_token());
        guard.unlock().await.unwrap();
    }
    let waiter_tokens: Vec<u64> = grants.iter().map(|g| g.0).collect();
    let regressed = waiter_tokens
        .iter()
        .chain(&tokens_after)
        .any(|&t| t <= token_before);
    println!(
        "F4 restart: holder token {token_before} before; holder learned it lost {learned:?} \
         after the restart; {} of 2 waiters got the lock (tokens {waiter_tokens:?}), the rest \
         an outage error; tokens after recovery {tokens_after:?}; fencing token regressed: \
         {regressed} (the fence counter is not persisted without AOF/RDB)",
        grants.len()
    );
    for client in [&holder_client, &waiter_client, &other_client] {
        client.shutdown().await;
    }
}

// ---------------------------------------------------------------------------------------------
// The watchdog.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_stops_renewing_once_the_guard_is_gone() {
    let server = RedisServer::start();
    let name = "renewals";
    let client = build_client(&server.url(), ms(300), Duration::from_secs(5)).await;
    let lock = client.lock(name);
    let quiet_for = Duration::from_secs(1);

    // Nothing renews after `cond` holds: EVALSHA calls on this otherwise idle server and the
    // client's renewal counter stay put for a second (about three renewal periods).
    async fn assert_quiet(server: &RedisServer, client: &Client, quiet_for: Duration, what: &str) {
        let calls = server.command_calls("evalsha");
        let renewals = client.stats().renewals;
        tokio::time::sleep(quiet_for).await;
        assert_eq!(
            (server.command_calls("evalsha"), client.stats().renewals),
            (calls, renewals),
            "renewals went on after {what}"
        );
    }
    async fn renewing(client: &Client, what: &str) {
        let renewals = client.stats().renewals;
        eventually(format_args!("two renewals {what}"), SETTLE, || {
            client.stats().renewals >= renewals + 2
        })
        .await;
    }

    // Dropped guard.
    let guard = lock.lock().await.unwrap();
    renewing(&client, "while held").await;
    drop(guard);
    eventually("the dropped guard's release", SETTLE, || {
        !exists(&server, &lock_key(name))
    })
    .await;
    tokio::time::sleep(ms(300)).await; // a renewal already on the wire may still land
    assert_quiet(&server, &client, quiet_for, "the guard was dropped").await;

    // Reentrant holds: renewal goes on while one is left, and stops with the last.
    let outer = lock.lock().await.unwrap();
    let inner = lock.lock().await.unwrap();
    drop(inner);
    renewing(&client, "after dropping one of two holds").await;
    assert!(!outer.is_lost());
    outer.unlock().await.unwrap();
    assert!(!exists(&server, &lock_key(name)));
    tokio::time::sleep(ms(300)).await; // likewise
    assert_quiet(&server, &client, quiet_for, "the last hold was released").await;

    // A fixed lease is never renewed.
    let fixed = lock.lock_with_lease(Duration::from_secs(5)).await.unwrap();
    assert_quiet(&server, &client, quiet_for, "a fixed-lease acquire").await;
    fixed.unlock().await.unwrap();
    let stats = client.stats();
    println!(
        "watchdog: {} renewals while held, none after drop/unlock (quiet for {quiet_for:?} \
         each), {} EVALSHA in all",
        stats.renewals,
        server.command_calls("evalsha")
    );
    // A renewal sent for a hold after its guard was gone finds it released and counts it as a
    // lost lease; one merely in flight when the guard went is ignored by the watchdog.
    assert_eq!(
        stats.lost_leases, 0,
        "the watchdog renewed a hold after its guard was dropped or released"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_keeps_a_hold_when_every_connection_is_killed_at_once() {
    // Every pooled connection breaks at once, and each fails its next request before it
    // reconnects: renewals that tried one connection per pause would meet the broken ones one
    // by one, and a short lease (such as a hand-over's) would run out meanwhile.
    let server = RedisServer::start();
    let watchdog = ms(450);
    let client = build_client(&server.url(), watchdog, Duration::from_secs(2)).await;
    let guard = client.lock("killed-connections").lock().await.unwrap();
    for round in 0..3 {
        tokio::time::sleep(watchdog / 2).await;
        let killed = common::int(&server, &["CLIENT", "KILL", "TYPE", "normal"]);
        assert!(killed >= 1, "nothing to kill");
        tokio::time::sleep(watchdog * 2).await;
        assert!(
            !guard.is_lost(),
            "the hold was lost after its connections were killed (round {round})"
        );
    }
    assert_eq!(client.stats().lost_leases, 0);
    guard.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_lost_fires_before_anyone_else_is_let_in() {
    let server = RedisServer::start();
    let proxy = ChaosProxy::start(&server);
    let name = "blackholed";
    let lease = ms(600);
    let holder_client = build_client(&proxy.url(), lease, ms(1000)).await;
    let other = build_client(
        &server.url(),
        Duration::from_secs(30),
        Duration::from_secs(5),
    )
    .await;
    let guard = holder_client.lock(name).lock().await.unwrap();
    let renewals = holder_client.stats().renewals;
    eventually("a renewal through the proxy", SETTLE, || {
        holder_client.stats().renewals > renewals
    })
    .await;

    proxy.blackhole(true);
    let blackholed_at = Instant::now();
    let lost = guard.lost();
    let lost_task = tokio::spawn(async move {
        lost.await;
        Instant::now()
    });
    let probe = other.lock(name);
    let mut attempts = 0u32;
    let (taken, acquired_at) = loop {
        attempts += 1;
        if let Some(taken) = probe.try_lock().await.unwrap() {
            // Right after the grant: the old holder must already know.
            let known_lost = guard.is_lost();
            let acquired_at = Instant::now();
            assert!(
                known_lost,
                "another client got the lock {:?} after the blackhole began, before the \
                 holder knew its lease was lost",
                acquired_at.duration_since(blackholed_at)
            );
            break (taken, acquired_at);
        }
        assert!(
            blackholed_at.elapsed() < lease + Duration::from_secs(3),
            "the blackholed holder's lock never expired"
        );
        tokio::time::sleep(ms(2)).await;
    };
    let lost_at = tokio::time::timeout(SETTLE, lost_task)
        .await
        .expect("lost() completes")
        .unwrap();
    let (lead, lag) = if lost_at <= acquired_at {
        (acquired_at - lost_at, Duration::ZERO)
    } else {
        (Duration::ZERO, lost_at - acquired_at)
    };
    // lost() wakes on a timer, so its task may be scheduled a little late on a busy machine;
    // is_lost() above is the exact check.
    assert!(
        lag < ms(100),
        "lost() completed {lag:?} after another client got the lock"
    );
    // The counter is bumped by the watchdog's own sweep, which runs once the renewal call it
    // is waiting for times out: it may lag behind lost() by up to a command timeout.
    eventually("the client counts the lost lease", SETTLE, || {
        holder_client.stats().lost_leases >= 1
    })
    .await;

    proxy.blackhole(false);
    let release = guard.unlock().await;
    assert!(
        matches!(release, Err(Error::NotOwner)),
        "the lost guard's release: {release:?}"
    );
    assert!(probe.is_held().await.unwrap());
    taken.unlock().await.unwrap();
    println!(
        "watchdog blackhole: lease {lease:?}; lost() {lost_after:?} after the blackhole began; \
         the other client got the lock {taken_after:?} after it ({attempts} try_lock attempts), \
         {lead:?} after lost() (lost() late by {lag:?})",
        lost_after = lost_at.duration_since(blackholed_at),
        taken_after = acquired_at.duration_since(blackholed_at),
    );
}

// ---------------------------------------------------------------------------------------------
// F7: pub/sub connections cut while waiters wait.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f7_cut_pubsub_waiters_still_acquire_after_release() {
    let server = RedisServer::start();
    let proxy = ChaosProxy::start(&server);
    let name = "f7";
    // The holder's lease is long: only a wake-up, never an expiry, can get the waiters going.
    let holder_client = build_client(&server.url(), Duration::from_secs(30), ms(2000)).await;
    let mut waiter_clients = Vec::new();
    for _ in 0..3 {
        waiter_clients.push(build_client(&proxy.url(), Duration::from_secs(30), ms(2000)).await);
    }
    let holder = holder_client.lock(name);
    // Each waiting client listens on a channel of its own.
    let subscribed = || -> u64 {
        waiter_clients
            .iter()
            .map(|client| server.numsub(&wake_channel(name, client)))
            .sum()
    };

    let mut report = Vec::new();
    for resubscribed_first in [true, false] {
        let held = holder.lock().await.unwrap();
        let tasks: Vec<_> = waiter_clients
            .iter()
            .map(|client| {
                let lock = client.lock(name);
                tokio::spawn(async move {
                    let guard = lock.lock().await?;
                    let acquired_at = Instant::now();
                    tokio::time::sleep(ms(20)).await;
                    guard.unlock().await?;
                    Ok::<_, Error>(acquired_at)
                })
            })
            .collect();
        eventually("the three waiters are subscribed", SETTLE, || {
            subscribed() == 3
        })
        .await;

        let cut = proxy.cut_pubsub();
        assert_eq!(cut, 3, "one pub/sub connection per waiting client");
        if resubscribed_first {
            eventually("the hubs resubscribe", SETTLE, || subscribed() == 3).await;
        }
        let released_at = Instant::now();
        held.unlock().await.unwrap();
        let mut last = released_at;
        for task in tasks {
            let acquired_at = tokio::time::timeout(SETTLE, task)
                .await
                .expect("a waiter is stuck after its pub/sub connection was cut")
                .unwrap()
                .expect("waiter failed");
            last = last.max(acquired_at);
        }
        let all_in = last.duration_since(released_at);
        assert!(
            all_in < Duration::from_secs(5),
            "the three waiters took {all_in:?} after the release (lease 30 s)"
        );
        report.push(format!(
            "resubscribed before release: {resubscribed_first}: {cut} cut, all 3 waiters \
             acquired within {all_in:?}"
        ));
    }
    println!("F7 cut pub/sub (lock): {}", report.join("; "));
    eventually("nothing is subscribed any more", SETTLE, || {
        subscribed() == 0
    })
    .await;
}

/// F5: a restart of a Redis that persists every write (AOF, `appendfsync always`) keeps the
/// hold and the fencing counter: the holder keeps its lock through the restart, and tokens
/// keep increasing (contrast with `f4_restart_without_persistence_holders_learn_waiters_recover`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f5_restart_with_aof_keeps_holds_and_fencing_tokens() {
    let mut server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let client = Client::builder(server.url())
        .watchdog_timeout(Duration::from_secs(3))
        .command_timeout(Duration::from_secs(1))
        .build()
        .await
        .expect("connect");
    let guard = client.lock("aof").lock().await.expect("lock");
    let token = guard.fencing_token();
    let restarted = Instant::now();
    server.restart();
    // The client reconnects by itself; a rival sees the lock still held.
    let rival = client.lock("aof");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match rival.try_lock().await {
            Ok(None) => break,
            Ok(Some(_)) => panic!("the hold did not survive a restart with AOF"),
            Err(err) => {
                assert!(Instant::now() < deadline, "no recovery: {err}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    println!(
        "REPORT f5: recovered {:?} after the restart; hold kept",
        restarted.elapsed()
    );
    // Renewal resumed before the lease ran out: the guard still holds.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !guard.is_lost(),
        "the watchdog kept the hold through the restart"
    );
    guard.unlock().await.expect("unlock after the restart");
    let next = rival.lock().await.expect("lock again");
    assert!(next.fencing_token() > token, "the fencing counter survived");
}

/// A lease lost while Redis was unreachable is counted in `Stats::lost_leases` exactly once,
/// even when its guard is dropped before a watchdog round notices (the round waits for its
/// renewal call, which hangs in the blackhole for the command timeout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_lost_in_a_blackhole_is_counted_once() {
    let server = RedisServer::start();
    let proxy = ChaosProxy::start(&server);
    let client = Client::builder(proxy.url())
        .watchdog_timeout(ms(600))
        .command_timeout(Duration::from_secs(2))
        .build()
        .await
        .expect("connect");
    let guard = client.lock("counted").lock().await.expect("lock");
    tokio::time::sleep(ms(300)).await;
    proxy.blackhole(true);
    tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("lost() fires in the blackhole");
    drop(guard);
    tokio::time::sleep(Duration::from_secs(3)).await;
    proxy.blackhole(false);
    tokio::time::sleep(ms(500)).await;
    assert_eq!(client.stats().lost_leases, 1);
}
