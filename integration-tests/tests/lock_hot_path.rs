//! The plain lock's hot path, asserted as structure (counts), never as speed: what an
//! uncontended cycle runs inside Redis, that a release wakes one client (and nobody when
//! nobody waits), that a contended hand-off costs the same with 2 clients or 8, that no
//! client starves, that a client giving up passes on a wake-up meant for it, and that the next
//! local head waits without asking Redis only while no wake-up can have passed it by.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{client, eventually, keys, ms, wake_channel, wake_subscribers};
use redisync::prelude::*;
use redisync_test_harness::{ChaosProxy, RedisServer};

const SETTLE: Duration = Duration::from_secs(10);

/// Every command Redis ran since the last `CONFIG RESETSTAT`, with its count, scripts' inner
/// commands included; the bookkeeping of the test itself left out.
fn commands_run(server: &RedisServer) -> BTreeMap<String, u64> {
    common::operation_stats(server)
}

fn reset_stats(server: &RedisServer) {
    server.cmd(&["CONFIG", "RESETSTAT"]);
}

/// Whether `client` is registered as waiting for lock `name`.
fn is_registered(server: &RedisServer, name: &str, client: &Client) -> bool {
    let waiters = keys::lock(name).waiters;
    server.cmd(&["ZSCORE", &waiters, &wake_channel(name, client)]) != redis::Value::Nil
}

/// A Redis, a client holding lock `name` on it, the hold, and another client to wait for it.
async fn held_lock(name: &str) -> (RedisServer, Client, LockGuard, Client) {
    let server = RedisServer::start();
    let holder = client(&server).await;
    let guard = holder.lock(name).lock().await.unwrap();
    let waiting = client(&server).await;
    (server, holder, guard, waiting)
}

/// A task waiting for `lock`; it drops the guard as soon as it gets it.
fn spawn_waiting(lock: ReentrantLock) -> tokio::task::JoinHandle<Result<()>> {
    tokio::spawn(async move { lock.lock().await.map(|_| ()) })
}

/// The lock crate documents these for an uncontended `lock` + `unlock`: two scripts, six
/// commands inside them, no PUBLISH, no record left behind. The release does not look for
/// waiting clients: the lock's hash says nobody registered.
#[tokio::test]
async fn an_uncontended_cycle_runs_two_scripts_of_six_commands_and_publishes_nothing() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock = c.lock("lean");
    // Warm up: the scripts are loaded, and the lost-notice channel, which the watchdog
    // subscribes in the background once it has a hold, is subscribed before counting.
    let warm = lock.lock().await.unwrap();
    common::lost_notices_subscribed(&server, &c).await;
    warm.unlock().await.unwrap();
    reset_stats(&server);
    for _ in 0..10 {
        lock.lock().await.unwrap().unlock().await.unwrap();
    }
    let run = commands_run(&server);
    let expected = common::command_counts(&[
        ("evalsha", 20),
        ("exists", 10),
        ("incr", 10),
        ("hset", 10),
        ("pexpire", 10),
        ("hmget", 10),
        ("del", 10),
    ]);
    assert_eq!(run, expected, "commands run by 10 uncontended cycles");
    // Nothing is left but the fencing counter.
    let left = server.cmd(&["KEYS", &keys::all("lean")]);
    assert_eq!(common::strings(&left), vec![keys::lock("lean").fence]);
}

/// An uncontended cycle sends only the keys and arguments its scripts read, since Redis
/// spends time on each one: the first try leaves off the optional part of the acquire's
/// (registration, offer and hand-over: 4 keys and 3 arguments, not 5 and 8), and the guard's
/// release the attempt record (4 keys and 1 argument, not 5 and 2), as does the fair lock's.
/// A try that registers its client still sends the whole of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncontended_cycle_sends_only_the_keys_and_arguments_its_scripts_read() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock = c.lock("short");
    // Warm up: Redis knows the scripts (a first EVALSHA of each would fail, and be logged).
    lock.lock().await.unwrap().unlock().await.unwrap();
    common::log_every_request(&server);
    lock.lock().await.unwrap().unlock().await.unwrap();
    assert_eq!(
        common::script_requests(&server),
        vec![(4, 3), (4, 1)],
        "an uncontended cycle: (keys, arguments) of each request"
    );
    // The fair lock's release leaves off the attempt record the same way (3 keys and 2
    // arguments, not 4 and 3); its acquire reads all of its own.
    let fair = c.fair_lock("short-fair");
    fair.lock().await.unwrap().unlock().await.unwrap();
    server.cmd(&["SLOWLOG", "RESET"]);
    fair.lock().await.unwrap().unlock().await.unwrap();
    assert_eq!(
        common::script_requests(&server),
        vec![(5, 5), (3, 2)],
        "an uncontended cycle of the fair lock"
    );
    // Contended: the waiter's first try is short, its registering try whole.
    let guard = lock.lock().await.unwrap();
    let other = client(&server).await;
    server.cmd(&["SLOWLOG", "RESET"]);
    let task = spawn_waiting(other.lock("short"));
    eventually("the client registered", SETTLE, || {
        is_registered(&server, "short", &other)
    })
    .await;
    let tries = common::script_requests(&server);
    assert_eq!(tries.first(), Some(&(4, 3)), "the first try: {tries:?}");
    assert!(tries[1..].contains(&(5, 8)), "a registering try: {tries:?}");
    guard.unlock().await.unwrap();
    task.await.unwrap().unwrap();
}

/// A release looks for a client to wake only when the lock's hash says clients may be
/// registered, and a hash is new with every holder. Here two clients wait; the holder's
/// release wakes the first, which takes the lock while the second is still registered, and
/// lets go at once. Its release must wake the second (the acquire that took the lock found
/// the registry and said so in the new hash), not leave it to its own re-check, a second
/// after it last asked. The same holds when a holder's lease runs out: the acquire that takes
/// the expired lock finds the registry the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_still_registered_after_a_hand_off_are_woken_by_the_next_release() {
    let name = "handed";
    let (server, _holder, guard, first) = held_lock(name).await;
    let second = client(&server).await;
    let first_task = spawn_waiting(first.lock(name));
    eventually("the first client is registered as waiting", SETTLE, || {
        is_registered(&server, name, &first)
    })
    .await;
    let second_task = tokio::spawn({
        let lock = second.lock(name);
        async move {
            let guard = lock.lock().await;
            (guard.map(|_| ()), Instant::now())
        }
    });
    eventually("the second client is registered as waiting", SETTLE, || {
        is_registered(&server, name, &second)
    })
    .await;
    // The release wakes the first client, which takes the lock and lets go at once.
    guard.unlock().await.unwrap();
    tokio::time::timeout(SETTLE, first_task)
        .await
        .expect("the first client gets the lock")
        .unwrap()
        .unwrap();
    let first_let_go = Instant::now();
    let (outcome, got) = tokio::time::timeout(SETTLE, second_task)
        .await
        .expect("the second client gets the lock")
        .unwrap();
    outcome.unwrap();
    let after = got.saturating_duration_since(first_let_go);
    println!("the second client got the lock {after:?} after the first let go");
    assert!(
        after < ms(600),
        "the second client was not woken by the release ({after:?} after it; its own \
         re-check comes a second after it last asked)"
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
        server.cmd(&["ZCARD", &keys::lock("one").waiters]) == redis::Value::Int(6)
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

impl ContendedRun {
    /// Scripts per acquisition, once it has checked that no release published more than
    /// once (one wake-up per release), printing both for the run of `clients` clients.
    fn scripts_per_acquisition_publishing_at_most_once(&self, clients: usize) -> f64 {
        let scripts = self.scripts as f64 / self.acquisitions as f64;
        println!(
            "{clients} clients: {} acquisitions, {scripts:.2} scripts and {:.2} PUBLISH each",
            self.acquisitions,
            self.publishes as f64 / self.acquisitions as f64
        );
        assert!(
            self.publishes <= self.acquisitions,
            "{} PUBLISH for {} releases",
            self.publishes,
            self.acquisitions
        );
        scripts
    }
}

/// Which lock a contended run takes turns on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Reentrant,
    Fair,
}

/// `clients` clients with `tasks` tasks each take turns on one lock (1 ms holds) until
/// `total` acquisitions are done; counts what Redis ran for them.
async fn contended(clients: usize, tasks: usize, total: u64) -> ContendedRun {
    contended_on(Kind::Reentrant, clients, tasks, total).await
}

/// [`contended`] on a lock of `kind`.
async fn contended_on(kind: Kind, clients: usize, tasks: usize, total: u64) -> ContendedRun {
    let server = RedisServer::start();
    let mut handles = Vec::new();
    for _ in 0..clients {
        handles.push(client(&server).await);
    }
    let lock = move |client: &Client| {
        let (plain, fair) = (client.lock("turns"), client.fair_lock("turns"));
        async move {
            match kind {
                Kind::Reentrant => plain.lock().await,
                Kind::Fair => fair.lock().await,
            }
        }
    };
    // Warm up: scripts loaded.
    lock(&handles[0]).await.unwrap().unlock().await.unwrap();
    reset_stats(&server);
    let done = Arc::new(AtomicUsize::new(0));
    let inside = Arc::new(AtomicUsize::new(0));
    let counts: Vec<Arc<AtomicUsize>> = (0..clients * tasks).map(|_| Arc::default()).collect();
    let mut running = Vec::new();
    for (i, count) in counts.iter().enumerate() {
        let client = handles[i / tasks].clone();
        let (done, inside, count) = (done.clone(), inside.clone(), count.clone());
        running.push(tokio::spawn(async move {
            while (done.load(Ordering::SeqCst) as u64) < total {
                let guard = lock(&client).await.unwrap();
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
        let scripts = run.scripts_per_acquisition_publishing_at_most_once(clients);
        // Release and the woken head's acquire: 2, plus the occasional extra try. The grant
        // keeps its client registered for the task behind, which then waits without asking
        // (with the grant taking the client out, that task's ask would make it 3).
        assert!(
            scripts <= 2.5,
            "{scripts:.2} scripts per acquisition with {clients} clients"
        );
        per_acquisition.push(scripts);
    }
    assert!(
        per_acquisition[1] <= per_acquisition[0] + 0.5,
        "scripts per acquisition grew with the clients: {per_acquisition:?}"
    );
}

/// The fair lock's release wakes its head waiter once, and nobody wakes it again: under
/// contention (4 clients × 2 tasks, each task queueing again as soon as it let go), no more
/// PUBLISH than releases. And a task coming back to a contended lock subscribes before it
/// asks: three scripts per acquisition (its ask, the release, the woken head's ask), not
/// four (a first try that only finds the lock taken).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_contended_fair_lock_publishes_once_per_release_and_runs_three_scripts() {
    let run = contended_on(Kind::Fair, 4, 2, 300).await;
    let scripts = run.scripts_per_acquisition_publishing_at_most_once(4);
    assert!(scripts <= 3.3, "{scripts:.2} scripts per acquisition");
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

/// A client whose last waiting task gives up withdraws from the lock's waiters at once
/// (rather than leaving its entry to lapse, which takes several seconds), so that no release
/// wakes a client that no longer waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_whose_last_waiter_gives_up_withdraws() {
    let (server, _holder, guard, waiting) = held_lock("leave").await;
    let registered = || is_registered(&server, "leave", &waiting);
    for gives_up in ["a dropped future", "a wait that ran out"] {
        let lock = waiting.lock("leave");
        let task = tokio::spawn(async move {
            match gives_up {
                "a dropped future" => lock.lock().await.map(|_| ()),
                _ => lock.try_lock_for(ms(1500)).await.map(|_| ()),
            }
        });
        eventually("the client registered", SETTLE, &registered).await;
        if gives_up == "a dropped future" {
            task.abort();
        }
        let gave_up = Instant::now();
        // The registration would last 5 s and more by itself.
        eventually(
            format!("the client withdrew after {gives_up}"),
            ms(4000),
            || !registered(),
        )
        .await;
        println!("withdrawn {:?} after {gives_up}", gave_up.elapsed());
        let _ = task.await;
    }
    guard.unlock().await.unwrap();
}

/// The withdrawal passes on a wake-up its client may have swallowed: when the lock is free,
/// it wakes the client that has waited longest after it.
#[tokio::test]
async fn a_withdrawal_from_a_free_lock_wakes_the_next_client() {
    let server = RedisServer::start();
    let pass = keys::lock("pass");
    let waiters = pass.waiters.as_str();
    let (gone, next) = (
        &pass.wake_channels.of("gone-client"),
        &pass.wake_channels.of("next-client"),
    );
    server.cmd(&["ZADD", waiters, "1", gone, "2", next]);
    let listener = redis::Client::open(server.url()).unwrap();
    let mut pubsub = listener.get_connection().unwrap();
    let mut pubsub = pubsub.as_pubsub();
    pubsub.subscribe(next).unwrap();
    pubsub.set_read_timeout(Some(ms(2000))).unwrap();
    let withdraw = redis::Script::new(concat!(
        include_str!("../../lua/publish_prelude.lua"),
        include_str!("../../lua/clock_prelude.lua"),
        include_str!("../../lua/lock_prelude.lua"),
        include_str!("../../lua/wake_prelude.lua"),
        include_str!("../../lua/lock_hand_over_prelude.lua"),
        include_str!("../../lua/lock_withdraw.lua")
    ));
    let mut conn = server.connection();
    let woke: i64 = withdraw
        .key(&pass.hash)
        .key(waiters)
        .key(&pass.offers)
        .key(&pass.fence)
        .arg(gone)
        .arg("")
        .invoke(&mut conn)
        .unwrap();
    assert_eq!(woke, 1);
    let message = pubsub.get_message().expect("the next client is woken");
    assert_eq!(message.get_channel_name(), next);
    assert_eq!(server.cmd(&["ZCARD", waiters]), redis::Value::Int(0));
    // While the lock is held, a withdrawal wakes nobody.
    server.cmd(&["ZADD", waiters, "3", next]);
    server.cmd(&["HSET", &pass.hash, "owner", "o", "count", "1", "token", "1"]);
    let woke: i64 = withdraw
        .key(&pass.hash)
        .key(waiters)
        .key(&pass.offers)
        .key(&pass.fence)
        .arg(gone)
        .arg("")
        .invoke(&mut conn)
        .unwrap();
    assert_eq!(woke, 0);
    assert_eq!(server.cmd(&["ZCARD", waiters]), redis::Value::Int(1));
}

/// Whether a client may be registered is the client's knowledge, not one task's: when the
/// task that registered gives up while another task of the client still waits, and that one
/// then leaves too without asking Redis, the client still withdraws. (Both tasks are dropped
/// together, in either order, many times over.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_of_several_local_waiters_to_leave_withdraws_the_client() {
    let (server, _holder, guard, waiting) = held_lock("several").await;
    let registered = || is_registered(&server, "several", &waiting);
    for round in 0..20 {
        let first = spawn_waiting(waiting.lock("several"));
        eventually("the client registered", SETTLE, &registered).await;
        let second = spawn_waiting(waiting.lock("several"));
        eventually("the second task queued", SETTLE, || {
            waiting.stats().contended_waits >= 2 * (round + 1)
        })
        .await;
        first.abort();
        second.abort();
        let _ = first.await;
        let _ = second.await;
        eventually(
            format!("round {round}: the client withdrew"),
            ms(4000),
            || !registered(),
        )
        .await;
    }
    guard.unlock().await.unwrap();
}

/// An attempt still on the wire when its wait ends holds the withdrawal back (sent first, the
/// withdrawal could be overtaken and the client registered again); when that attempt ends in
/// an error Redis answered (here `BUSY`), the withdrawal still follows: the client does not
/// stay registered until its entry lapses (15 s with these settings).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_attempt_still_on_the_wire_when_its_wait_ends_does_not_keep_the_client_registered(
) {
    let server = RedisServer::start();
    let proxy = ChaosProxy::start(&server);
    let holder = client(&server).await;
    let guard = holder.lock("refused").lock().await.unwrap();
    let waiting = Client::connect(proxy.url()).await.unwrap();
    let registered = || is_registered(&server, "refused", &waiting);
    let task = spawn_waiting(waiting.lock("refused"));
    eventually("the client registered", SETTLE, &registered).await;
    // The registered waiter asks again within `RECHECK`; that request takes 400 ms to reach
    // Redis, and the wait ends while it is on the wire.
    proxy.set_latency(ms(400));
    let sent = waiting.stats().scripts_sent;
    eventually("the waiter asked again", SETTLE, || {
        waiting.stats().scripts_sent > sent
    })
    .await;
    task.abort();
    let _ = task.await;
    // The attempt reaches a server busy with another script: refused with BUSY.
    let busy = server.busy_for(ms(1500));
    let ran = tokio::task::spawn_blocking(move || busy.wait())
        .await
        .unwrap();
    println!("busy for {ran:?}");
    eventually("the client withdrew", ms(6000), || !registered()).await;
    guard.unlock().await.unwrap();
}

/// A grant that kept the client registered for its other waiting tasks (`OnGrant::Keep`),
/// reaching Redis after every one of those tasks went away: the grant is given back, and the
/// client withdraws the registration the grant renewed. (Taken for a grant that took the
/// registration out, the client would owe no withdrawal, and its entry would wait behind
/// another client's for that client's release or its own lapse, 15 s here.) The head waits
/// with a fixed lease, so it does not take the lock from its wake-up: the release keeps the
/// lock for it, and its own grant (taking that hold over) is the one on the wire. (A head
/// that takes the lock from its wake-up asks nothing, and the path this test is about would
/// not run.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_registration_whose_tasks_all_left_while_its_grant_was_on_the_wire_is_withdrawn() {
    let name = "kept";
    let server = RedisServer::start();
    let proxy = ChaosProxy::start(&server);
    let holder = client(&server).await;
    let guard = holder.lock(name).lock().await.unwrap();
    let waiting = Client::connect(proxy.url()).await.unwrap();
    let registered = || is_registered(&server, name, &waiting);
    // Two tasks of one client: the head's grant keeps the client registered for the other.
    let head = {
        let lock = waiting.lock(name);
        tokio::spawn(async move { lock.lock_with_lease(ms(30_000)).await.map(|_| ()) })
    };
    eventually("the client registered", SETTLE, &registered).await;
    let behind = spawn_waiting(waiting.lock(name));
    // Another client, registered behind it: the abandoned grant's give-back wakes this one,
    // which then holds the lock, so no release comes to drop the first client's entry.
    let other = client(&server).await;
    let other_holds = Arc::new(tokio::sync::Notify::new());
    let let_go = Arc::new(tokio::sync::Notify::new());
    let other_task = {
        let (lock, holds, let_go) = (other.lock(name), other_holds.clone(), let_go.clone());
        tokio::spawn(async move {
            let guard = lock.lock().await?;
            holds.notify_one();
            let_go.notified().await;
            guard.unlock().await
        })
    };
    eventually("the other client registered", SETTLE, || {
        is_registered(&server, name, &other)
    })
    .await;
    // The release wakes the first client; its wake-up and the head's grant each take 400 ms
    // through the proxy, and both tasks leave while the grant is on the wire.
    proxy.set_latency(ms(400));
    let sent = waiting.stats().scripts_sent;
    guard.unlock().await.unwrap();
    eventually("the head asked for its grant", SETTLE, || {
        waiting.stats().scripts_sent > sent
    })
    .await;
    behind.abort();
    head.abort();
    let _ = (behind.await, head.await);
    tokio::time::timeout(SETTLE, other_holds.notified())
        .await
        .expect("the give-back wakes the other client");
    eventually("the first client withdrew", ms(6000), || !registered()).await;
    let_go.notify_one();
    other_task.await.unwrap().unwrap();
}

/// Publishes a wake-up on `channel`.
async fn wake(publisher: &mut redis::aio::MultiplexedConnection, channel: &str) {
    let _: i64 = redis::cmd("PUBLISH")
        .arg(channel)
        .arg("w")
        .query_async(publisher)
        .await
        .unwrap();
}

/// The next head of a local queue, driven through core's waiting loop directly.
struct NextHead {
    /// [`Turn::handed_over`](redisync::core::toolkit::Turn) of each of its attempts so far.
    turns: tokio::sync::mpsc::UnboundedReceiver<bool>,
    waiting: tokio::task::JoinHandle<Result<Option<()>>>,
}

/// On `client`, a head acquires while keeping the client registered for the task queued
/// behind it (`Attempt::AcquiredStillWaiting`); with `wake_during_grant`, a wake-up published
/// after the grant was sent arrives before the grant's answer. Returns the task behind, the
/// next head once this returns: its attempts answer busy (next try in 10 s) when handed
/// over, and acquire otherwise.
async fn hand_over(
    server: &RedisServer,
    client: &Client,
    channel: &'static str,
    wake_during_grant: bool,
) -> NextHead {
    use redisync::core::toolkit::{Attempt, Toolkit, WaitSpec};
    let spec = WaitSpec {
        kind: "test",
        queue: channel,
        channel,
        deadline: None,
        may_reenter: false,
        shared: false,
        expect_busy: false,
    };
    let (head_waits, waits) = tokio::sync::oneshot::channel::<()>();
    let redis = redis::Client::open(server.url()).unwrap();
    let publisher = redis.get_multiplexed_async_connection().await.unwrap();
    let head = {
        let (client, publisher) = (client.clone(), publisher.clone());
        tokio::spawn(async move {
            let mut head_waits = Some(head_waits);
            let mut asks = 0;
            client
                .acquire_in_turn(spec, |turn| {
                    asks += 1;
                    // The first try, then the head's first ask: busy. Later asks (on
                    // wake-ups) grant once a task waits behind.
                    let grant = asks > 2 && turn.others_waiting;
                    let head_waits = if asks == 2 { head_waits.take() } else { None };
                    let (client, mut publisher) = (client.clone(), publisher.clone());
                    async move {
                        if let Some(head_waits) = head_waits {
                            let _ = head_waits.send(());
                        }
                        if !grant {
                            return Ok(Attempt::Busy {
                                retry_in: Some(ms(if asks > 2 { 20 } else { 10_000 })),
                            });
                        }
                        if wake_during_grant {
                            // The subscription is the waiting loop's (one per channel).
                            let mut watcher = client.subscribe(channel).watcher();
                            let before = watcher.borrow_and_update().generation;
                            wake(&mut publisher, channel).await;
                            while watcher.borrow_and_update().generation == before {
                                watcher.changed().await.unwrap();
                            }
                        }
                        Ok(Attempt::AcquiredStillWaiting(()))
                    }
                })
                .await
        })
    };
    waits.await.unwrap();
    let (turns_tx, turns) = tokio::sync::mpsc::unbounded_channel();
    let waiting = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .acquire_in_turn(spec, |turn| {
                    let _ = turns_tx.send(turn.handed_over);
                    async move {
                        Ok(match turn.handed_over {
                            true => Attempt::Busy {
                                retry_in: Some(Duration::from_secs(10)),
                            },
                            false => Attempt::Acquired(()),
                        })
                    }
                })
                .await
        })
    };
    // Wake the head until it finds the task behind queued and grants.
    let mut publisher = publisher;
    while !head.is_finished() {
        wake(&mut publisher, channel).await;
        tokio::time::sleep(ms(20)).await;
    }
    assert!(matches!(head.await.unwrap(), Ok(Some(()))));
    NextHead { turns, waiting }
}

/// The next head of a local queue is told it was handed over (and a lock held by another
/// owner then answers busy without asking Redis) only while no wake-up came since its
/// predecessor's grant was sent; one that came before it took its turn is not slept
/// through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_head_is_handed_over_only_while_no_wake_up_passed_it_by() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let prompt = Duration::from_secs(5);

    let mut passed_by = hand_over(&server, &a, "redisync:{passed}:wake", true).await;
    assert_eq!(
        passed_by.turns.recv().await,
        Some(false),
        "handed over though a wake-up came after the grant"
    );
    let acquired = tokio::time::timeout(prompt, passed_by.waiting).await;
    assert!(matches!(acquired, Ok(Ok(Ok(Some(()))))), "{acquired:?}");

    let mut quiet = hand_over(&server, &a, "redisync:{quiet}:wake", false).await;
    assert_eq!(
        quiet.turns.recv().await,
        Some(true),
        "not handed over though no wake-up came"
    );
    server.cmd(&["PUBLISH", "redisync:{quiet}:wake", "w"]);
    let woken = tokio::time::timeout(prompt, quiet.turns.recv()).await;
    assert_eq!(
        woken,
        Ok(Some(false)),
        "the wake-up did not reach the next head"
    );
    let acquired = tokio::time::timeout(prompt, quiet.waiting).await;
    assert!(matches!(acquired, Ok(Ok(Ok(Some(()))))), "{acquired:?}");
}

/// Two tasks of one owner (clones of one handle) queued behind another client's hold: once
/// one of them is granted, the other re-enters at once, as a clone does, rather than waiting
/// for its sibling's release (or the one-second re-check): being handed over does not make a
/// lock its owner holds look busy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_handed_the_turn_by_its_own_owner_re_enters_at_once() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let held = a.lock("shared").lock().await.unwrap();
    let handle = b.lock("shared");
    let (both_in, mut holding) = tokio::sync::mpsc::unbounded_channel();
    let mut siblings = Vec::new();
    for _ in 0..2 {
        let (handle, both_in) = (handle.clone(), both_in.clone());
        siblings.push(tokio::spawn(async move {
            let guard = handle.lock().await.unwrap();
            let _ = both_in.send(guard.fencing_token());
            // Held until the test has seen both in.
            tokio::time::sleep(Duration::from_secs(5)).await;
            guard.unlock().await.unwrap();
        }));
    }
    eventually("both siblings wait", SETTLE, || {
        b.stats().contended_waits == 2 && common::zcard(&server, &keys::lock("shared").waiters) == 1
    })
    .await;
    held.unlock().await.unwrap();
    let first = tokio::time::timeout(SETTLE, holding.recv()).await.unwrap();
    // Well under the one-second re-check a handed-over wait would sit out.
    let second = tokio::time::timeout(ms(700), holding.recv())
        .await
        .expect("the sibling waited for a release instead of re-entering");
    assert_eq!(first, second, "a re-entry keeps the hold's token");
    assert_eq!(handle.hold_count().await.unwrap(), 2);
    for sibling in siblings {
        sibling.await.unwrap();
    }
}

/// A grant that kept its client registered for the task behind it leaves the client's
/// registration to that task: when it gives up (handed over, before it asked Redis itself),
/// the client withdraws at once, and the holder's release then publishes to nobody. (The
/// entry would otherwise stay for its 5 s lifetime, and the release would wake the client.)
/// The first task waits with a fixed lease, so it does not take the lock from its wake-up:
/// its own grant (taking over the hold kept for it) keeps the client registered. (A hand-over
/// taken from the message takes the client out of the registry, and the task behind registers
/// it again with a request of its own, a moment after the grant: asserting the registration at
/// the grant would race with that request.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_over_waiter_that_gives_up_withdraws_the_client_its_sibling_kept_registered() {
    let (server, _holder, guard, waiting) = held_lock("kept").await;
    let registered = || is_registered(&server, "kept", &waiting);
    let (granted_tx, granted) = tokio::sync::oneshot::channel();
    let (release_tx, release) = tokio::sync::oneshot::channel::<()>();
    let first = {
        let lock = waiting.lock("kept");
        tokio::spawn(async move {
            let guard = lock.lock_with_lease(ms(30_000)).await.unwrap();
            let _ = granted_tx.send(());
            release.await.unwrap();
            guard.unlock().await.unwrap();
        })
    };
    eventually("the client registered", SETTLE, &registered).await;
    let second = spawn_waiting(waiting.lock("kept"));
    eventually("the second task queued", SETTLE, || {
        waiting.stats().contended_waits >= 2
    })
    .await;
    guard.unlock().await.unwrap();
    granted.await.unwrap();
    assert!(
        registered(),
        "the grant kept the client registered for the task behind"
    );
    // Given up before its one-second re-check: it never asked Redis itself.
    second.abort();
    assert!(second.await.unwrap_err().is_cancelled());
    eventually("the client withdrew", ms(2000), || !registered()).await;
    reset_stats(&server);
    release_tx.send(()).unwrap();
    first.await.unwrap();
    assert_eq!(
        server.command_calls("publish"),
        0,
        "the release woke someone"
    );
}

/// A wait's first try is made before its client subscribes, so it does not register the
/// client (a wake-up sent to it would reach nobody, and cost the release a second PUBLISH):
/// of the waiter's attempts, all but the first look the client up in the registry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_try_does_not_register_its_client() {
    let (server, _holder, guard, waiting) = held_lock("first").await;
    reset_stats(&server);
    let task = spawn_waiting(waiting.lock("first"));
    let mut polls = 0;
    eventually("the client registered", SETTLE, || {
        polls += 1;
        is_registered(&server, "first", &waiting)
    })
    .await;
    let run = commands_run(&server);
    task.abort();
    let _ = task.await;
    let attempts = run.get("evalsha").copied().unwrap_or(0);
    assert!(attempts >= 2, "{run:?}");
    // Each registering attempt looks the client up first; the first try does not.
    assert_eq!(
        run.get("zscore").copied().unwrap_or(0) - polls,
        attempts - 1,
        "{run:?}, {polls} polls"
    );
    guard.unlock().await.unwrap();
}

/// A task handed the turn by a sibling whose hold has a fixed lease asks Redis by the time
/// that lease runs out, as its own busy answer would have told it: a hold that lapses
/// publishes nothing, and waiting for the one-second re-check would leave the lock idle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_over_task_asks_when_its_siblings_fixed_lease_runs_out() {
    let (server, _holder, guard, waiting) = held_lock("lapse").await;
    let lease = ms(200);
    let (got_tx, mut got) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let (lock, got_tx) = (waiting.lock("lapse"), got_tx.clone());
        tasks.push(tokio::spawn(async move {
            let guard = lock.lock_with_lease(lease).await.unwrap();
            let _ = got_tx.send(Instant::now());
            // Never released: the hold lapses with its lease.
            std::mem::forget(guard);
        }));
    }
    let registered = || is_registered(&server, "lapse", &waiting);
    eventually("both wait", SETTLE, || {
        waiting.stats().contended_waits == 2 && registered()
    })
    .await;
    guard.unlock().await.unwrap();
    let first = tokio::time::timeout(SETTLE, got.recv())
        .await
        .unwrap()
        .unwrap();
    let second = tokio::time::timeout(SETTLE, got.recv())
        .await
        .unwrap()
        .unwrap();
    // The lease, plus generous room; well under the re-check (1 s) after the grant.
    assert!(
        second - first < ms(750),
        "the handed-over task took {:?} after its sibling's 200 ms hold",
        second - first
    );
    for task in tasks {
        task.await.unwrap();
    }
}
