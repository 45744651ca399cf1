//! The read-write lock's hot path (issue 17): what an operation costs inside Redis, and how
//! local readers of one client share one Redis read hold.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::client;
use redisync::prelude::*;
use redisync_test_harness::RedisServer;

/// Every command's `calls` from `INFO commandstats`.
fn command_stats(server: &RedisServer) -> BTreeMap<String, u64> {
    let info = redis::from_redis_value_ref::<String>(&server.cmd(&["INFO", "commandstats"]))
        .expect("INFO commandstats");
    info.lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest.split(',').find_map(|kv| kv.strip_prefix("calls="))?;
            Some((name.to_owned(), calls.parse().ok()?))
        })
        .collect()
}

/// Runs `op` `n` times between two `INFO commandstats` samples (after `CONFIG RESETSTAT`) and
/// returns the calls per run of each command, leaving out the sampling commands themselves.
async fn commands_per_op<F, Fut>(server: &RedisServer, n: u64, mut op: F) -> BTreeMap<String, f64>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    server.cmd(&["CONFIG", "RESETSTAT"]);
    for _ in 0..n {
        op().await;
    }
    command_stats(server)
        .into_iter()
        .filter(|(name, _)| !matches!(name.as_str(), "info" | "config|resetstat"))
        .map(|(name, calls)| (name, calls as f64 / n as f64))
        .collect()
}

fn total(stats: &BTreeMap<String, f64>) -> f64 {
    stats.values().sum()
}

/// Ad-hoc measurement (run with `--ignored --nocapture`): commands per uncontended cycle, and
/// reads/s of 64 tasks of one client on one read-write lock against the raw floor's lock
/// cycles/s (64 tasks, each on its own key: `SET NX PX`, then a compare-and-delete script).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, not a test: run it with --ignored --nocapture"]
async fn measure_hot_path() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let rw = c.read_write_lock("measure");
    // Load the scripts first.
    rw.read().await.unwrap().unlock().await.unwrap();
    rw.write().await.unwrap().unlock().await.unwrap();
    let read = commands_per_op(&server, 200, || async {
        rw.read().await.unwrap().unlock().await.unwrap();
    })
    .await;
    println!("read + unlock: {:.2} commands {read:?}", total(&read));
    let write = commands_per_op(&server, 200, || async {
        rw.write().await.unwrap().unlock().await.unwrap();
    })
    .await;
    println!("write + unlock: {:.2} commands {write:?}", total(&write));

    let run = Duration::from_secs(3);
    let floor = floor_cycles_per_second(&server, 64, run).await;
    server.cmd(&["CONFIG", "RESETSTAT"]);
    let reads = reads_per_second(&c, 64, run).await;
    println!("commands during the reads: {:?}", command_stats(&server));
    println!(
        "64 tasks: floor {floor:.0} lock cycles/s; one read-write lock {reads:.0} reads/s \
         ({:.2}x the floor)",
        reads / floor
    );
}

/// Lock cycles/s of the raw floor: `tasks` tasks, each on its own key, `SET NX PX` then one
/// compare-and-delete script.
async fn floor_cycles_per_second(server: &RedisServer, tasks: usize, run: Duration) -> f64 {
    let connection = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let release = redis::Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end \
         return 0",
    );
    let stop = Arc::new(AtomicBool::new(false));
    let cycles = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..tasks)
        .map(|i| {
            let (mut con, release, stop, cycles) = (
                connection.clone(),
                release.clone(),
                stop.clone(),
                cycles.clone(),
            );
            tokio::spawn(async move {
                let key = format!("floor:{i}");
                while !stop.load(Ordering::Relaxed) {
                    let token = format!("t{i}");
                    let set: Option<String> = redis::cmd("SET")
                        .arg(&key)
                        .arg(&token)
                        .arg("NX")
                        .arg("PX")
                        .arg(30_000)
                        .query_async(&mut con)
                        .await
                        .unwrap();
                    if set.is_some() {
                        let _: i64 = release
                            .key(&key)
                            .arg(&token)
                            .invoke_async(&mut con)
                            .await
                            .unwrap();
                        cycles.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    let started = Instant::now();
    tokio::time::sleep(run).await;
    stop.store(true, Ordering::Relaxed);
    let elapsed = started.elapsed().as_secs_f64();
    let done = cycles.load(Ordering::Relaxed);
    for handle in handles {
        handle.await.unwrap();
    }
    done as f64 / elapsed
}

/// Reads/s of `tasks` tasks of one client, each with its own handle, doing `read().await` +
/// `unlock()` on one read-write lock.
async fn reads_per_second(client: &Client, tasks: usize, run: Duration) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..tasks)
        .map(|_| {
            let lock = client.read_write_lock("measure:reads");
            let (stop, reads) = (stop.clone(), reads.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    lock.read().await.unwrap().unlock().await.unwrap();
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let started = Instant::now();
    tokio::time::sleep(run).await;
    stop.store(true, Ordering::Relaxed);
    let elapsed = started.elapsed().as_secs_f64();
    let done = reads.load(Ordering::Relaxed);
    for handle in handles {
        handle.await.unwrap();
    }
    done as f64 / elapsed
}
