//! Scenario 1b (one uncontended operation of every primitive), scenario 5 (redisync's other
//! primitives under load) and scenario 6 (memory of waiters).

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redisync::layout::{CountDownLatchLayout, KeySpace};
use redisync::prelude::*;
use redisync_test_harness::RedisServer;

use crate::commands::Pass;
use crate::ratelimit::Verdict;
use crate::report::{percentile, Figures};
use crate::scenarios::{add_counts, add_script_time, redis_footprint};

async fn clients(server: &RedisServer, n: usize) -> Vec<Client> {
    let mut clients = Vec::with_capacity(n);
    for _ in 0..n {
        clients.push(Client::connect(server.url()).await.expect("connect"));
    }
    clients
}

/// Read-heavy: `readers` tasks reading (holding 1 ms) and one writer writing (holding 1 ms,
/// then pausing 10 ms) on one read-write lock across 4 clients, for `duration`.
pub async fn rwlock_read_heavy(
    server: &RedisServer,
    readers: usize,
    duration: Duration,
    out: &mut Figures,
) {
    let clients = clients(server, 4).await;
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for i in 0..readers {
        let lock = clients[i % clients.len()].read_write_lock("bench:rw");
        let (stop, reads) = (stop.clone(), reads.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                if let Ok(guard) = lock.read().await {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    let _ = guard.unlock().await;
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    let writer_lock = clients[0].read_write_lock("bench:rw");
    let writer_stop = stop.clone();
    let writer = tokio::spawn(async move {
        let mut waits = Vec::new();
        while !writer_stop.load(Ordering::Relaxed) {
            let asked = Instant::now();
            if let Ok(guard) = writer_lock.write().await {
                waits.push(asked.elapsed().as_secs_f64() * 1e3);
                tokio::time::sleep(Duration::from_millis(1)).await;
                let _ = guard.unlock().await;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        waits
    });
    let started = Instant::now();
    tokio::time::sleep(duration).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.expect("reader");
    }
    let waits = writer.await.expect("writer");
    let elapsed = started.elapsed().as_secs_f64();
    out.add("reads/s", reads.load(Ordering::Relaxed) as f64 / elapsed);
    out.add("writes/s", waits.len() as f64 / elapsed);
    out.add("writer wait p50 ms", percentile(&waits, 50.0));
    out.add("writer wait worst ms", percentile(&waits, 100.0));
}

/// `tasks` tasks over 4 clients sharing `permits` permits, each holding one for 1 ms.
pub async fn semaphore(
    server: &RedisServer,
    tasks: usize,
    permits: u64,
    duration: Duration,
    round: usize,
    out: &mut Figures,
) {
    let clients = clients(server, 4).await;
    let name = format!("bench:sem:{round}");
    assert!(clients[0]
        .semaphore(name.as_str())
        .try_set_permits(permits)
        .await
        .expect("set permits"));
    let stop = Arc::new(AtomicBool::new(false));
    let holders = Arc::new(AtomicI64::new(0));
    let most = Arc::new(AtomicI64::new(0));
    let acquired = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for i in 0..tasks {
        let sem = clients[i % clients.len()].semaphore(name.as_str());
        let (stop, holders, most, acquired) = (
            stop.clone(),
            holders.clone(),
            most.clone(),
            acquired.clone(),
        );
        handles.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                if let Ok(permit) = sem.acquire().await {
                    let now = holders.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    holders.fetch_sub(1, Ordering::SeqCst);
                    let _ = permit.release().await;
                    acquired.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    let started = Instant::now();
    tokio::time::sleep(duration).await;
    stop.store(true, Ordering::Relaxed);
    for handle in handles {
        handle.await.expect("task");
    }
    out.add(
        "acquisitions/s",
        acquired.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64(),
    );
    out.add("most holders at once", most.load(Ordering::SeqCst) as f64);
}

/// `waiters` tasks over 4 clients wait on an armed latch; then the last count-down. Time
/// from the count-down's return to every waiter having returned.
pub async fn latch(server: &RedisServer, waiters: usize, round: usize, out: &mut Figures) {
    let clients = clients(server, 4).await;
    let name = format!("bench:latch:{round}");
    let latch = clients[0].count_down_latch(name.as_str());
    assert!(latch.try_set_count(1).await.expect("arm"));
    let mut handles = Vec::new();
    for i in 0..waiters {
        let latch = clients[i % clients.len()].count_down_latch(name.as_str());
        handles.push(tokio::spawn(async move {
            latch.wait().await.expect("wait");
            Instant::now()
        }));
    }
    // Every client subscribed: then the waiters are all parked on the channel.
    let space = KeySpace::of(clients[0].key_prefix(), &name).expect("a valid latch name");
    let channel = CountDownLatchLayout::new(&space).channel;
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.numsub(&channel) < clients.len() as u64 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    latch.count_down().await.expect("count down");
    let opened = Instant::now();
    let mut after = Vec::new();
    for handle in handles {
        let returned = handle.await.expect("waiter");
        after.push(returned.saturating_duration_since(opened).as_secs_f64() * 1e3);
    }
    out.add("all returned after, ms", percentile(&after, 100.0));
    out.add("median waiter, ms", percentile(&after, 50.0));
}

/// Resident memory of this process, from /proc (Linux), in KiB.
fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// `waiters` tasks waiting on one held lock of one client: memory they take, counted two
/// ways (heap bytes the process added, and resident memory).
pub async fn memory(server: &RedisServer, waiters: usize, out: &mut Figures) {
    let client = Client::connect(server.url()).await.expect("connect");
    let holder = client.lock("bench:memory").lock().await.expect("lock");
    // One waiter first, so that what the first waiter sets up once per client and lock (the
    // local queue, the subscription) is not counted as every waiter's.
    let first = {
        let lock = client.lock("bench:memory");
        tokio::spawn(async move { lock.lock().await.map(drop) })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The join handles are the benchmark's, not the waiters': allocated before counting.
    let mut handles = Vec::with_capacity(waiters);
    let rss_before = rss_kib().unwrap_or(0);
    let window = redisync_test_harness::heap::Window::open();
    for _ in 0..waiters {
        let lock = client.lock("bench:memory");
        handles.push(tokio::spawn(async move { lock.lock().await.map(drop) }));
    }
    // Let every waiter reach its queue place.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let heap = window.net();
    drop(window);
    let rss_after = rss_kib().unwrap_or(0);
    let rss = rss_after.saturating_sub(rss_before) as f64 * 1024.0;
    out.add("waiting tasks", waiters as f64);
    out.add("heap bytes per waiter", heap as f64 / waiters as f64);
    out.add("heap KiB per waiter", heap as f64 / 1024.0 / waiters as f64);
    out.add("RSS growth MiB", rss / (1024.0 * 1024.0));
    out.add("RSS bytes per waiter", rss / waiters as f64);
    first.abort();
    for handle in &handles {
        handle.abort();
    }
    let _ = first.await;
    for handle in handles {
        let _ = handle.await;
    }
    drop(holder);
    client.shutdown().await;
}

/// One repeatable operation cycle of a primitive, for scenario 1b.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    RwRead,
    RwWrite,
    Semaphore,
    Expirable,
    Latch,
    Multi(usize),
    /// A campaign that wins at once, then its resignation.
    Election,
    /// One rate-limiter decision, with the given verdict (not a cycle: a decision leaves
    /// nothing to give back).
    Decision(Verdict),
}

impl Op {
    pub const ALL: [Op; 10] = [
        Op::RwRead,
        Op::RwWrite,
        Op::Semaphore,
        Op::Expirable,
        Op::Latch,
        Op::Multi(2),
        Op::Multi(8),
        Op::Election,
        Op::Decision(Verdict::Allowed),
        Op::Decision(Verdict::Refused),
    ];

    pub fn name(self) -> String {
        match self {
            Op::RwRead => "rwlock read + unlock".to_owned(),
            Op::RwWrite => "rwlock write + unlock".to_owned(),
            Op::Semaphore => "semaphore acquire + release".to_owned(),
            Op::Expirable => "expirable semaphore acquire + release".to_owned(),
            Op::Latch => "latch try_set_count(1) + count_down".to_owned(),
            Op::Multi(n) => format!("multi-lock of {n} locks, lock + unlock"),
            Op::Election => "leader election campaign + resign".to_owned(),
            Op::Decision(verdict) => format!("rate limiter {}", verdict.decision()),
        }
    }
}

/// The handle an [`Op`] works on.
enum Handle {
    Rw(ReadWriteLock),
    Semaphore(Semaphore),
    Expirable(ExpirableSemaphore),
    Latch(CountDownLatch),
    Multi(MultiLock),
    Election(LeaderElection),
    Limiter(RateLimiter),
}

impl Handle {
    async fn new(client: &Client, op: Op, round: usize) -> Result<Handle, String> {
        let e = |e: Error| e.to_string();
        Ok(match op {
            Op::RwRead | Op::RwWrite => Handle::Rw(client.read_write_lock("bench:op:rw")),
            Op::Semaphore => {
                // A fresh name per round: the permits are set once.
                let sem = client.semaphore(format!("bench:op:sem:{round}"));
                sem.try_set_permits(1_000).await.map_err(e)?;
                Handle::Semaphore(sem)
            }
            Op::Expirable => {
                let sem = client.expirable_semaphore(format!("bench:op:expirable:{round}"));
                sem.try_set_permits(1_000).await.map_err(e)?;
                Handle::Expirable(sem)
            }
            Op::Latch => Handle::Latch(client.count_down_latch(format!("bench:op:latch:{round}"))),
            Op::Multi(n) => Handle::Multi(
                client.multi_lock((0..n).map(|i| client.lock(format!("bench:op:multi:{n}:{i}")))),
            ),
            Op::Election => {
                Handle::Election(client.leader_election(format!("bench:op:election:{round}")))
            }
            Op::Decision(verdict) => {
                let name = format!("bench:op:rate:{}:{round}", verdict.decision());
                Handle::Limiter(crate::ratelimit::limiter(client, &name, verdict).await?)
            }
        })
    }

    /// One cycle: take and give back (the latch: arm and open), leaving the state as it was.
    async fn cycle(&self, op: Op) -> Result<(), String> {
        let e = |e: Error| e.to_string();
        match (self, op) {
            (Handle::Rw(rw), Op::RwWrite) => rw.write().await.map_err(e)?.unlock().await.map_err(e),
            (Handle::Rw(rw), _) => rw.read().await.map_err(e)?.unlock().await.map_err(e),
            (Handle::Semaphore(sem), _) => {
                sem.acquire().await.map_err(e)?.release().await.map_err(e)
            }
            (Handle::Expirable(sem), _) => {
                sem.acquire().await.map_err(e)?.release().await.map_err(e)
            }
            (Handle::Latch(latch), _) => {
                if !latch.try_set_count(1).await.map_err(e)? {
                    return Err("the latch was still armed".to_owned());
                }
                latch.count_down().await.map_err(e)
            }
            (Handle::Multi(multi), _) => multi.lock().await.map_err(e)?.unlock().await.map_err(e),
            (Handle::Election(election), _) => {
                let leadership = election.campaign("bench").await.map_err(e)?;
                leadership.resign().await.map_err(e)
            }
            (Handle::Limiter(limiter), Op::Decision(verdict)) => {
                let decision = limiter.try_acquire(1).await.map_err(e)?;
                match (verdict, decision.allowed) {
                    (Verdict::Allowed, true) | (Verdict::Refused, false) => Ok(()),
                    _ => Err(format!("the limiter answered {decision:?}")),
                }
            }
            (Handle::Limiter(_), op) => Err(format!("{op:?} is not a rate-limiter decision")),
        }
    }
}

/// Scenario 1b: one task, one free primitive, `cycles` timed cycles of `op`, then a counting
/// pass of its own (requests with MONITOR, commands with `INFO commandstats`), and one
/// without MONITOR for the time Redis spends in scripts.
pub async fn op_cycles(
    server: &RedisServer,
    op: Op,
    cycles: usize,
    round: usize,
    out: &mut Figures,
) {
    // An empty server: keys an earlier pass left to expire must not expire during this one.
    let _ = server.try_cmd(&["FLUSHALL", "SYNC"]);
    let client = Client::connect(server.url()).await.expect("connect");
    let handle = match Handle::new(&client, op, round).await {
        Ok(handle) => handle,
        Err(e) => {
            eprintln!("    {}: set-up failed: {e}", op.name());
            return;
        }
    };
    for _ in 0..50 {
        handle.cycle(op).await.expect("warm-up cycle");
    }
    let (keys_before, _) = redis_footprint(server);
    let mut samples = Vec::with_capacity(cycles);
    for _ in 0..cycles {
        let started = Instant::now();
        handle.cycle(op).await.expect("cycle");
        samples.push(started.elapsed().as_secs_f64() * 1e6);
    }
    let (keys_after, _) = redis_footprint(server);
    out.add("p50 µs", percentile(&samples, 50.0));
    out.add("p99 µs", percentile(&samples, 99.0));
    out.add(
        "Redis keys + per 1k cycles",
        (keys_after - keys_before) * 1000.0 / cycles.max(1) as f64,
    );
    let counted = 200;
    let pass = Pass::start(server, true);
    for _ in 0..counted {
        handle.cycle(op).await.expect("cycle");
    }
    add_counts(out, pass, counted, "cycle");
    let pass = Pass::start(server, false);
    for _ in 0..counted {
        handle.cycle(op).await.expect("cycle");
    }
    add_script_time(out, pass, counted, "cycle");
    drop(handle);
    client.shutdown().await;
}

/// Scenario 5d, the read-heavy cache: `tasks` tasks of one client read and unlock one
/// read-write lock (one handle, shared by the tasks as a cache would share it), for
/// `duration`, holding nothing in between.
pub async fn read_cache(server: &RedisServer, tasks: usize, duration: Duration, out: &mut Figures) {
    let client = Client::connect(server.url()).await.expect("connect");
    let rw = client.read_write_lock("bench:cache");
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::with_capacity(tasks);
    for _ in 0..tasks {
        let (rw, stop, reads, failures) =
            (rw.clone(), stop.clone(), reads.clone(), failures.clone());
        handles.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let read = async { rw.read().await?.unlock().await };
                match read.await {
                    Ok(()) => reads.fetch_add(1, Ordering::Relaxed),
                    Err(_) => failures.fetch_add(1, Ordering::Relaxed),
                };
            }
        }));
    }
    let started = Instant::now();
    tokio::time::sleep(duration).await;
    stop.store(true, Ordering::Relaxed);
    for handle in handles {
        handle.await.expect("reader");
    }
    out.add(
        "reads/s",
        reads.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64(),
    );
    out.add("failed reads", failures.load(Ordering::Relaxed) as f64);
    client.shutdown().await;
}
