//! A load for counting what Redis runs per operation: `tasks` tasks of one client, each on a
//! primitive of its own, each running `cycles` uncontended cycles (acquire, then release).
//!
//! Time per call moves too much between passes to resolve a change of a few percent on a
//! shared machine; instructions counted in `redis-server` under callgrind do not. The recipe
//! (`scripts/redis-instructions.sh` runs it): start `redis-server` under
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
//! `expirable` (expirable semaphore, 1,000 permits each). Two loads that are not redisync's,
//! for scale, sent from raw redis-rs over one connection per task: `floor`, the benchmark's
//! floor (`SET key token NX PX`, then a compare-and-delete script), and `scripted-floor`,
//! the same with its `SET` inside a script: the least an acquire can cost Redis when every
//! state change is a script, as every one of redisync's is. Optional fourth argument: the
//! number of tasks (32); fifth: a word that makes the names unique to this run.

use redisync::prelude::*;

const USAGE: &str =
    "usage: cycles URL lock|fair|read|write|semaphore|expirable|floor|scripted-floor \
     CYCLES [TASKS] [TAG]";

#[path = "../src/floor_scripts.rs"]
mod floor_scripts;

use floor_scripts::{COMPARE_AND_DELETE, SCRIPTED_SET_NX};

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
    if what == "floor" || what == "scripted-floor" {
        return floors(&url, what == "scripted-floor", &tag, cycles, tasks).await;
    }
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

/// `tasks` tasks, each running `cycles` floor cycles on a key of its own over a connection of
/// its own; with `scripted`, the take is a script too.
async fn floors(
    url: &str,
    scripted: bool,
    tag: &str,
    cycles: usize,
    tasks: usize,
) -> Result<(), String> {
    let server = redis::Client::open(url).map_err(|e| e.to_string())?;
    let mut running = Vec::with_capacity(tasks);
    for task in 0..tasks {
        let conn = server
            .get_multiplexed_async_connection()
            .await
            .map_err(|e| e.to_string())?;
        let load = if scripted { "scripted-floor" } else { "floor" };
        let key = format!("bench:cycles:{load}:{tag}:{task}");
        running.push(tokio::spawn(floor_cycles(conn, key, scripted, cycles)));
    }
    for task in running {
        task.await.map_err(|e| e.to_string())??;
    }
    Ok(())
}

/// `cycles` floor cycles on `key`: take, then compare-and-delete.
async fn floor_cycles(
    mut conn: redis::aio::MultiplexedConnection,
    key: String,
    scripted: bool,
    cycles: usize,
) -> Result<(), String> {
    let take = redis::Script::new(SCRIPTED_SET_NX);
    let release = redis::Script::new(COMPARE_AND_DELETE);
    let token = "token";
    let lease_ms = 10_000u64;
    for _ in 0..cycles {
        let taken: Option<String> = if scripted {
            take.key(&key)
                .arg(token)
                .arg(lease_ms)
                .invoke_async(&mut conn)
                .await
        } else {
            redis::cmd("SET")
                .arg(&key)
                .arg(token)
                .arg("NX")
                .arg("PX")
                .arg(lease_ms)
                .query_async(&mut conn)
                .await
        }
        .map_err(|e| e.to_string())?;
        if taken.is_none() {
            return Err(format!("{key} was taken by someone else"));
        }
        let _: i64 = release
            .key(&key)
            .arg(token)
            .invoke_async(&mut conn)
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}
