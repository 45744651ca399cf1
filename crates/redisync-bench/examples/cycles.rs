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
    match what.as_str() {
        "lock" => cycle(&client.lock(name), cycles).await,
        "fair" => cycle(&client.fair_lock(name), cycles).await,
        "read" => cycle(&client.read_write_lock(name).reader(), cycles).await,
        "write" => cycle(&client.read_write_lock(name).writer(), cycles).await,
        "semaphore" => {
            let semaphore = client.semaphore(name);
            semaphore
                .try_set_permits(1000)
                .await
                .map_err(|e| e.to_string())?;
            cycle(&semaphore, cycles).await
        }
        "expirable" => {
            let semaphore = client.expirable_semaphore(name);
            semaphore
                .try_set_permits(1000)
                .await
                .map_err(|e| e.to_string())?;
            cycle(&semaphore, cycles).await
        }
        _ => Err(USAGE.into()),
    }
}

/// `cycles` acquires of `primitive`, each released at once.
async fn cycle<A: Acquire>(primitive: &A, cycles: usize) -> Result<(), String> {
    for _ in 0..cycles {
        let held = primitive.acquire().await.map_err(|e| e.to_string())?;
        held.release().await.map_err(|e| e.to_string())?;
    }
    Ok(())
}
