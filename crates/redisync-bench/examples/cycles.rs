//! A load for counting what Redis runs per operation: `tasks` tasks of one client, each on a
//! primitive of its own, each running `cycles` uncontended cycles (acquire, then release).
//!
//! Time per call moves too much between passes to resolve a change of a few percent on a
//! shared machine; instructions counted in `redis-server` under callgrind do not. The recipe
//! (BENCHMARKS.md, "What Redis runs per call, counted"): start `redis-server` under
//! `valgrind --tool=callgrind`, run this once with one cycle (which loads the scripts), zero
//! the counters with `callgrind_control -z`, run it again with `cycles` cycles, and stop the
//! server; with 10 and then 40 cycles, the difference of the two totals divided by
//! `30 × tasks` is what Redis runs per cycle, reading the requests and writing the replies
//! included.
//!
//! ```sh
//! cargo run --release -p redisync-bench --example cycles -- redis://127.0.0.1:6379 lock 40
//! ```
//!
//! Primitives: `lock`, `fair` (fair lock), `read` and `write` (read-write lock), `semaphore`,
//! `expirable` (expirable semaphore, 1,000 permits each). Optional fourth argument: the
//! number of tasks (32); fifth: a word that makes the names unique to this run.

use redisync::prelude::*;

const USAGE: &str =
    "usage: cycles URL lock|fair|read|write|semaphore|expirable CYCLES [TASKS] [TAG]";

#[tokio::main]
async fn main() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let (Some(url), Some(what), Some(cycles)) = (args.next(), args.next(), args.next()) else {
        return Err(USAGE.into());
    };
    let cycles: usize = cycles.parse().map_err(|_| USAGE.to_string())?;
    let tasks: usize = match args.next() {
        Some(tasks) => tasks.parse().map_err(|_| USAGE.to_string())?,
        None => 32,
    };
    let tag = args.next().unwrap_or_default();
    let client = Client::connect(url.as_str())
        .await
        .map_err(|e| e.to_string())?;
    let mut running = Vec::with_capacity(tasks);
    for task in 0..tasks {
        let name = format!("bench:cycles:{what}:{tag}:{task}");
        running.push(tokio::spawn(run(
            client.clone(),
            what.clone(),
            name,
            cycles,
        )));
    }
    for task in running {
        task.await.map_err(|e| e.to_string())??;
    }
    Ok(())
}

/// `cycles` uncontended cycles of primitive `what` named `name`.
async fn run(client: Client, what: String, name: String, cycles: usize) -> Result<(), String> {
    let failed = |e: Error| e.to_string();
    match what.as_str() {
        "lock" => {
            let lock = client.lock(name);
            for _ in 0..cycles {
                lock.lock()
                    .await
                    .map_err(failed)?
                    .unlock()
                    .await
                    .map_err(failed)?;
            }
        }
        "fair" => {
            let lock = client.fair_lock(name);
            for _ in 0..cycles {
                lock.lock()
                    .await
                    .map_err(failed)?
                    .unlock()
                    .await
                    .map_err(failed)?;
            }
        }
        "read" | "write" => {
            let lock = client.read_write_lock(name);
            for _ in 0..cycles {
                match what.as_str() {
                    "read" => lock.read().await.map_err(failed)?.unlock().await,
                    _ => lock.write().await.map_err(failed)?.unlock().await,
                }
                .map_err(failed)?;
            }
        }
        "semaphore" => {
            let semaphore = client.semaphore(name);
            semaphore.try_set_permits(1000).await.map_err(failed)?;
            for _ in 0..cycles {
                semaphore
                    .acquire()
                    .await
                    .map_err(failed)?
                    .release()
                    .await
                    .map_err(failed)?;
            }
        }
        "expirable" => {
            let semaphore = client.expirable_semaphore(name);
            semaphore.try_set_permits(1000).await.map_err(failed)?;
            for _ in 0..cycles {
                semaphore
                    .acquire()
                    .await
                    .map_err(failed)?
                    .release()
                    .await
                    .map_err(failed)?;
            }
        }
        _ => return Err(USAGE.into()),
    }
    Ok(())
}
