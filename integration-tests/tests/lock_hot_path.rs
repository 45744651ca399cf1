//! The plain lock's hot path, asserted as structure (counts), never as speed: what an
//! uncontended cycle runs inside Redis, that a release wakes one client (and nobody when
//! nobody waits), that a contended hand-off costs the same with 2 clients or 8, that no
//! client starves, and that a client giving up passes on a wake-up meant for it.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{client, eventually, ms, wake_channel, wake_subscribers};
use redisync::prelude::*;
use redisync_test_harness::{ChaosProxy, RedisServer};

const SETTLE: Duration = Duration::from_secs(10);

/// Every command Redis ran since the last `CONFIG RESETSTAT`, with its count, scripts' inner
/// commands included; the bookkeeping of the test itself left out.
fn commands_run(server: &RedisServer) -> BTreeMap<String, u64> {
    let info = common::text(&server.cmd(&["INFO", "commandstats"]));
    info.lines()
        .filter_map(|line| {
            let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = stats
                .split(',')
                .find_map(|field| field.strip_prefix("calls="))?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .filter(|(name, _)| !matches!(name.as_str(), "config|resetstat" | "info" | "pubsub|numsub"))
        .collect()
}

fn reset_stats(server: &RedisServer) {
    server.cmd(&["CONFIG", "RESETSTAT"]);
}

/// The lock crate documents these for an uncontended `lock` + `unlock`: two scripts, eight
/// commands inside them, no PUBLISH, no record left behind.
#[tokio::test]
async fn an_uncontended_cycle_runs_two_scripts_of_eight_commands_and_publishes_nothing() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock = c.lock("lean");
    // Warm up: the scripts are loaded.
    lock.lock().await.unwrap().unlock().await.unwrap();
    reset_stats(&server);
    for _ in 0..10 {
        lock.lock().await.unwrap().unlock().await.unwrap();
    }
    let run = commands_run(&server);
    let expected: BTreeMap<String, u64> = [
        ("evalsha", 20),
        ("exists", 10),
        ("hlen", 10),
        ("incr", 10),
        ("hset", 10),
        ("pexpire", 10),
        ("hmget", 10),
        ("del", 10),
        ("zrange", 10),
    ]
    .into_iter()
    .map(|(name, calls)| (name.to_owned(), calls))
    .collect();
    assert_eq!(run, expected, "commands run by 10 uncontended cycles");
    // Nothing is left but the fencing counter.
    let keys = server.cmd(&["KEYS", "redisync:{lean}:*"]);
    assert_eq!(
        common::strings(&keys),
        vec!["redisync:{lean}:fence".to_owned()]
    );
}

/// With six clients waiting, one release wakes one client: one PUBLISH, one new holder; the
/// other five stay asleep until their turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_one_waiting_client() {
    let server = RedisServer::start();
    let holder = client(&server).await;
    let guard = holder.lock("one").lock().await.unwrap();
    let mut clients = Vec::new();
    for _ in 0..6 {
        clients.push(client(&server).await);
    }
    let acquired = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for c in &clients {
        let lock = c.lock("one");
        let acquired = acquired.clone();
        tasks.push(tokio::spawn(async move {
            let guard = lock.lock().await.unwrap();
            acquired.fetch_add(1, Ordering::SeqCst);
            guard
        }));
    }
    eventually("six clients registered as waiting", SETTLE, || {
        server.cmd(&["ZCARD", "redisync:{one}:waiters"]) == redis::Value::Int(6)
            && clients
                .iter()
                .all(|c| server.numsub(&wake_channel("one", c)) == 1)
    })
    .await;
    reset_stats(&server);
    guard.unlock().await.unwrap();
    eventually("one client got the lock", SETTLE, || {
        acquired.load(Ordering::SeqCst) == 1
    })
    .await;
    // Give a second wake-up, if there were one, time to show.
    tokio::time::sleep(ms(200)).await;
    assert_eq!(acquired.load(Ordering::SeqCst), 1);
    assert_eq!(
        server.command_calls("publish"),
        1,
        "one wake-up per release"
    );
    // The rest follow one by one, each woken by the previous holder's release.
    let mut pending: Vec<_> = tasks;
    while !pending.is_empty() {
        let mut still = Vec::new();
        for task in pending {
            if task.is_finished() {
                task.await.unwrap().unlock().await.unwrap();
            } else {
                still.push(task);
            }
        }
        pending = still;
        tokio::time::sleep(ms(5)).await;
    }
    assert_eq!(acquired.load(Ordering::SeqCst), 6);
    assert!(server.command_calls("publish") <= 6);
    eventually("nobody listens any more", SETTLE, || {
        wake_subscribers(&server, "one") == 0
    })
    .await;
}

struct ContendedRun {
    acquisitions: u64,
    scripts: u64,
    publishes: u64,
    per_client: Vec<u64>,
    per_task: Vec<u64>,
}

/// `clients` clients with `tasks` tasks each take turns on one lock (1 ms holds) until
/// `total` acquisitions are done; counts what Redis ran for them.
async fn contended(clients: usize, tasks: usize, total: u64) -> ContendedRun {
    let server = RedisServer::start();
    let mut handles = Vec::new();
    for _ in 0..clients {
        handles.push(client(&server).await);
    }
    // Warm up: scripts loaded.
    handles[0]
        .lock("turns")
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    reset_stats(&server);
    let done = Arc::new(AtomicUsize::new(0));
    let inside = Arc::new(AtomicUsize::new(0));
    let counts: Vec<Arc<AtomicUsize>> = (0..clients * tasks).map(|_| Arc::default()).collect();
    let mut running = Vec::new();
    for (i, count) in counts.iter().enumerate() {
        let lock = handles[i / tasks].lock("turns");
        let (done, inside, count) = (done.clone(), inside.clone(), count.clone());
        running.push(tokio::spawn(async move {
            while (done.load(Ordering::SeqCst) as u64) < total {
                let guard = lock.lock().await.unwrap();
                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                tokio::time::sleep(ms(1)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                count.fetch_add(1, Ordering::SeqCst);
                done.fetch_add(1, Ordering::SeqCst);
                guard.unlock().await.unwrap();
            }
        }));
    }
    for task in running {
        tokio::time::timeout(Duration::from_secs(60), task)
            .await
            .expect("the contended run finishes")
            .unwrap();
    }
    let per_task: Vec<u64> = counts
        .iter()
        .map(|c| c.load(Ordering::SeqCst) as u64)
        .collect();
    let per_client = per_task.chunks(tasks).map(|c| c.iter().sum()).collect();
    ContendedRun {
        acquisitions: per_task.iter().sum(),
        scripts: server.command_calls("evalsha"),
        publishes: server.command_calls("publish"),
        per_client,
        per_task,
    }
}

/// The scripts a contended acquisition costs do not grow with the number of waiting clients
/// (a release wakes one client, not the head of every one), and a release publishes at most
/// once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_contended_hand_off_costs_the_same_with_two_clients_or_eight() {
    let mut per_acquisition = Vec::new();
    for clients in [2, 8] {
        let run = contended(clients, 2, 300).await;
        let scripts = run.scripts as f64 / run.acquisitions as f64;
        println!(
            "{clients} clients: {} acquisitions, {scripts:.2} scripts and {:.2} PUBLISH each",
            run.acquisitions,
            run.publishes as f64 / run.acquisitions as f64
        );
        assert!(
            run.publishes <= run.acquisitions,
            "{} PUBLISH for {} releases",
            run.publishes,
            run.acquisitions
        );
        // Release, the woken head's acquire, and its client's next head registering: 3,
        // plus the occasional extra try.
        assert!(
            scripts <= 4.0,
            "{scripts:.2} scripts per acquisition with {clients} clients"
        );
        per_acquisition.push(scripts);
    }
    assert!(
        per_acquisition[1] <= per_acquisition[0] + 0.5,
        "scripts per acquisition grew with the clients: {per_acquisition:?}"
    );
}

/// Clients take turns: over a long contended run (4 clients × 4 tasks, as in the benchmark)
/// every client and every task gets a fair share; none starves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_client_or_task_starves_in_a_long_contended_run() {
    let run = contended(4, 4, 640).await;
    println!(
        "per client {:?}, per task {:?}",
        run.per_client, run.per_task
    );
    let fair_client = run.acquisitions / 4;
    let fair_task = run.acquisitions / 16;
    for (i, &got) in run.per_client.iter().enumerate() {
        assert!(
            got * 2 >= fair_client,
            "client {i} got {got} of {} acquisitions: {:?}",
            run.acquisitions,
            run.per_client
        );
    }
    for (i, &got) in run.per_task.iter().enumerate() {
        assert!(
            got * 4 >= fair_task,
            "task {i} got {got} of {} acquisitions: {:?}",
            run.acquisitions,
            run.per_task
        );
    }
}

/// A client woken for its turn whose waiter gives up before acting passes the turn on: the
/// next client gets the lock at once, not when its own timed re-check comes (10 s here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_gives_up_passes_its_wake_up_on() {
    let server = RedisServer::start();
    let proxy = ChaosProxy::start(&server);
    let holder = client(&server).await;
    let guard = holder.lock("pass").lock().await.unwrap();
    // The first waiting client talks to Redis through a slow link.
    let slow = Client::connect(proxy.url()).await.unwrap();
    let quick = client(&server).await;
    let slow_lock = slow.lock("pass");
    let first = tokio::spawn(async move { slow_lock.lock().await });
    eventually("the slow client registered", SETTLE, || {
        server.numsub(&wake_channel("pass", &slow)) == 1
            && server.cmd(&["ZCARD", "redisync:{pass}:waiters"]) == redis::Value::Int(1)
    })
    .await;
    let quick_lock = quick.lock("pass");
    let second = tokio::spawn(async move {
        let guard = quick_lock.lock().await;
        (guard, Instant::now())
    });
    eventually("the quick client registered behind it", SETTLE, || {
        server.cmd(&["ZCARD", "redisync:{pass}:waiters"]) == redis::Value::Int(2)
    })
    .await;
    proxy.set_latency(ms(300));
    // The release wakes the slow client (it has waited longest); the message is on its way
    // when its waiter gives up.
    let released_at = Instant::now();
    guard.unlock().await.unwrap();
    first.abort();
    let (taken, acquired_at) = tokio::time::timeout(SETTLE, second)
        .await
        .expect("the quick client gets the lock")
        .unwrap();
    let waited = acquired_at.duration_since(released_at);
    assert!(
        waited < Duration::from_secs(3),
        "the quick client got the lock {waited:?} after the release"
    );
    taken.unwrap().unlock().await.unwrap();
    proxy.set_latency(Duration::ZERO);
}
