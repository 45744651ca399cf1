//! The scenarios. Each measures one round for one contender and adds its figures.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redisync::prelude::*;
use redisync_test_harness::RedisServer;

use crate::lockers::{lockers, Contender, Section};
use crate::monitor::CommandCounter;
use crate::report::{percentile, Figures};

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Scenario 1: one task locks and unlocks one free lock, `cycles` times.
pub async fn uncontended(
    server: &RedisServer,
    contender: Contender,
    cycles: usize,
    out: &mut Figures,
) {
    let url = server.url();
    let mut locker = lockers(contender, &url, 1, 1, |_| "bench:uncontended".to_owned())
        .await
        .remove(0);
    // Warm up: connections, script caches.
    for _ in 0..50 {
        locker
            .with_lock(Box::pin(async {}))
            .await
            .expect("warm-up cycle");
    }
    let mut samples = Vec::with_capacity(cycles);
    for _ in 0..cycles {
        let start = Instant::now();
        locker.with_lock(Box::pin(async {})).await.expect("cycle");
        samples.push(micros(start.elapsed()));
    }
    out.add("p50 µs", percentile(&samples, 50.0));
    out.add("p99 µs", percentile(&samples, 99.0));
    // Requests, counted apart from the timed cycles (MONITOR slows Redis down).
    let counted = 200;
    let counter = CommandCounter::start(server);
    for _ in 0..counted {
        locker.with_lock(Box::pin(async {})).await.expect("cycle");
    }
    let requests = counter.stop(server);
    out.add("requests/cycle", requests as f64 / counted as f64);
}

/// What the tasks of a contended run record, shared.
#[derive(Default)]
struct Contention {
    held: AtomicBool,
    violations: AtomicU64,
    /// Nanoseconds since `origin` of the last release, 0 before the first.
    last_release: AtomicU64,
    handoffs: Mutex<Vec<f64>>,
}

/// The shape of a contended run.
pub struct Load {
    pub clients: usize,
    pub per_client: usize,
    /// How long each acquisition holds the lock.
    pub hold: Duration,
    pub duration: Duration,
}

/// Scenario 2: `clients × per_client` tasks on one lock, each holding it for `hold`, for
/// `duration`. With `count_requests`, a pass of its own that only counts requests.
pub async fn contended(
    server: &RedisServer,
    contender: Contender,
    load: &Load,
    count_requests: bool,
    out: &mut Figures,
) {
    let Load {
        clients,
        per_client,
        hold,
        duration,
    } = *load;
    let url = server.url();
    let lockers = lockers(contender, &url, clients, per_client, |_| {
        "bench:contended".to_owned()
    })
    .await;
    let shared = Arc::new(Contention::default());
    let stop = Arc::new(AtomicBool::new(false));
    let origin = Instant::now();
    let counter = count_requests.then(|| CommandCounter::start(server));
    let tasks: Vec<_> = lockers
        .into_iter()
        .map(|mut locker| {
            let shared = shared.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut count = 0u64;
                let mut failures = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let shared = shared.clone();
                    let section: Section = Box::pin(async move {
                        let now = origin.elapsed().as_nanos() as u64;
                        if shared.held.swap(true, Ordering::SeqCst) {
                            shared.violations.fetch_add(1, Ordering::Relaxed);
                        }
                        let last = shared.last_release.load(Ordering::SeqCst);
                        if last > 0 && now > last {
                            shared
                                .handoffs
                                .lock()
                                .expect("handoffs")
                                .push((now - last) as f64 / 1e3);
                        }
                        tokio::time::sleep(hold).await;
                        shared.held.store(false, Ordering::SeqCst);
                        shared
                            .last_release
                            .store(origin.elapsed().as_nanos() as u64, Ordering::SeqCst);
                    });
                    match locker.with_lock(section).await {
                        Ok(()) => count += 1,
                        Err(_) => failures += 1,
                    }
                }
                (count, failures)
            })
        })
        .collect();
    let started = Instant::now();
    tokio::time::sleep(duration).await;
    stop.store(true, Ordering::Relaxed);
    let mut counts = Vec::new();
    let mut failures = 0;
    for task in tasks {
        let (count, failed) = task.await.expect("task");
        counts.push(count);
        failures += failed;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let total: u64 = counts.iter().sum();
    if let Some(counter) = counter {
        // A pass of its own: MONITOR slows Redis, so it reports only this figure.
        let requests = counter.stop(server);
        out.add(
            "requests/acquisition",
            requests as f64 / (total.max(1)) as f64,
        );
        return;
    }
    let handoffs = shared.handoffs.lock().expect("handoffs").clone();
    out.add("acquisitions/s", total as f64 / elapsed);
    out.add("handoff p50 µs", percentile(&handoffs, 50.0));
    out.add("handoff p99 µs", percentile(&handoffs, 99.0));
    out.add("min/task", *counts.iter().min().unwrap_or(&0) as f64);
    out.add("max/task", *counts.iter().max().unwrap_or(&0) as f64);
    out.add("failed acquires", failures as f64);
    out.add(
        "exclusion violations",
        shared.violations.load(Ordering::Relaxed) as f64,
    );
}

/// Scenario 3: `tasks` tasks, each on a lock of its own, for `duration`.
pub async fn many_locks(
    server: &RedisServer,
    contender: Contender,
    tasks: usize,
    duration: Duration,
    out: &mut Figures,
) {
    let url = server.url();
    let lockers = lockers(contender, &url, 1, tasks, |i| format!("bench:many:{i}")).await;
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = lockers
        .into_iter()
        .map(|mut locker| {
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut count = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    if locker.with_lock(Box::pin(async {})).await.is_ok() {
                        count += 1;
                    }
                }
                count
            })
        })
        .collect();
    let started = Instant::now();
    tokio::time::sleep(duration).await;
    stop.store(true, Ordering::Relaxed);
    let mut total = 0;
    for handle in handles {
        total += handle.await.expect("task");
    }
    out.add(
        "acquisitions/s",
        total as f64 / started.elapsed().as_secs_f64(),
    );
}

/// The EVALSHA ceiling: `tasks` tasks sending a trivial script over `connections`
/// multiplexed connections (as many as a redisync client's pool) for `duration`.
pub async fn evalsha_ceiling(
    server: &RedisServer,
    tasks: usize,
    connections: usize,
    duration: Duration,
    out: &mut Figures,
) {
    let client = redis::Client::open(server.url()).expect("url");
    let mut pool = Vec::new();
    for _ in 0..connections {
        pool.push(client.get_connection_manager().await.expect("connect"));
    }
    let script = redis::Script::new("return 1");
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..tasks)
        .map(|i| {
            let mut conn = pool[i % pool.len()].clone();
            let script = script.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut count = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    if script.invoke_async::<_, i64>(&mut conn).await.is_ok() {
                        count += 1;
                    }
                }
                count
            })
        })
        .collect();
    let started = Instant::now();
    tokio::time::sleep(duration).await;
    stop.store(true, Ordering::Relaxed);
    let mut total = 0;
    for handle in handles {
        total += handle.await.expect("task");
    }
    out.add("EVALSHA/s", total as f64 / started.elapsed().as_secs_f64());
}

/// Scenario 4: `locks` locks held under the watchdog; Redis commands per renewal period.
pub async fn watchdog_scale(server: &RedisServer, locks: usize, out: &mut Figures) {
    let watchdog = Duration::from_secs(3);
    let client = Client::builder(server.url())
        .watchdog_timeout(watchdog)
        .build()
        .await
        .expect("connect");
    let started = Instant::now();
    let mut guards = Vec::with_capacity(locks);
    for chunk in (0..locks).collect::<Vec<_>>().chunks(500) {
        let acquired = futures_util::future::join_all(
            chunk
                .iter()
                .map(|i| client.lock(format!("bench:watchdog:{i}")))
                .map(|lock| async move { lock.lock().await }),
        )
        .await;
        for guard in acquired {
            guards.push(guard.expect("lock"));
        }
    }
    out.add("time to acquire all, s", started.elapsed().as_secs_f64());
    // Let renewal settle into its rhythm, then count over whole periods.
    let period = watchdog / 3;
    tokio::time::sleep(period).await;
    let periods = 3u32;
    let counter = CommandCounter::start(server);
    let renewals_before = client.stats().renewals;
    tokio::time::sleep(period * periods).await;
    let commands = counter.stop(server) as f64 / f64::from(periods);
    let renewed = (client.stats().renewals - renewals_before) as f64 / f64::from(periods);
    out.add("held locks", locks as f64);
    out.add("renewals/period", renewed);
    out.add("requests/period", commands);
    out.add(
        "requests per 100 locks per period",
        commands * 100.0 / locks as f64,
    );
    let lost = guards.iter().filter(|g| g.is_lost()).count();
    out.add("lost", lost as f64);
    drop(guards);
    client.shutdown().await;
}
