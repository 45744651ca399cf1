//! FairLock against a real redis-server: first come, first served across clients, dead and
//! cancelled waiters, `try_lock` that never queues or overtakes, exact mutual exclusion, the
//! per-waiter wake-up channels, and the queue's keys, which exist only while someone waits.
//!
//! Every test starts its own server, so the tests run in parallel. Waits are for events (the
//! queue's length, a waiter's deadline moving, a subscription count); the time bounds are
//! generous, for a small, loaded machine. Where a bound must tell a wake-up by
//! message from a waiter's heartbeat retry, the waiters use a heartbeat of 10 s, so that only
//! the message can explain a hand-off within [`BY_MESSAGE`].

mod common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{
    client, client_with_watchdog, command_stats, eventually, exists, int, keys, ms, strings, text,
    zcard,
};
use redisync::layout::FairLockLayout;
use redisync::prelude::*;
use redisync::LocalState;
use redisync_test_harness::{ChaosProxy, RedisServer};
use tokio::task::JoinHandle;

/// How long a condition that should hold "soon" may take before the test fails.
const SETTLE: Duration = Duration::from_secs(10);

/// A heartbeat so long that a waiter's own retry cannot explain a hand-off within
/// [`BY_MESSAGE`]: only a wake-up message (or the holder leaving) can.
const LONG_HEARTBEAT: Duration = Duration::from_secs(10);

/// A hand-off caused by a wake-up message must come well within this.
const BY_MESSAGE: Duration = Duration::from_secs(2);

/// A short heartbeat for the dead-waiter tests: a silent waiter is dropped after three.
const SHORT_HEARTBEAT: Duration = Duration::from_millis(200);

/// A command timeout short enough that a place lasts three short heartbeats: a place lasts at
/// least a heartbeat plus the command timeout.
const QUICK_TIMEOUT: Duration = Duration::from_millis(300);

/// A client whose waiters' places last three short heartbeats (see [`QUICK_TIMEOUT`]).
async fn quick_client(server: &RedisServer) -> Client {
    Client::builder(server.url())
        .command_timeout(QUICK_TIMEOUT)
        .build()
        .await
        .expect("connect")
}

/// Slack for comparing Redis's clock (whole milliseconds) with the test's monotonic clock.
const CLOCK_SLACK: Duration = Duration::from_millis(10);

// ---------------------------------------------------------------------------------------------
// Redis names under the default prefix, and server-side inspection.

/// The fair lock's Redis names for the default prefix.
fn fair_keys(name: &str) -> FairLockLayout {
    keys::fair_lock(name)
}

/// The waiter ids in the queue, head first.
fn queue_members(server: &RedisServer, name: &str) -> Vec<String> {
    strings(&server.cmd(&["ZRANGE", &fair_keys(name).queue, "0", "-1"]))
}

fn zscore(server: &RedisServer, key: &str, member: &str) -> Option<f64> {
    let value = server.cmd(&["ZSCORE", key, member]);
    redis::from_redis_value_ref::<Option<f64>>(&value)
        .unwrap_or_else(|e| panic!("ZSCORE {key} {member}: got {value:?}: {e}"))
}

/// Redis's clock in milliseconds, as the scripts read it.
fn server_ms(server: &RedisServer) -> i64 {
    let time = strings(&server.cmd(&["TIME"]));
    let secs: i64 = time[0].parse().unwrap();
    let micros: i64 = time[1].parse().unwrap();
    secs * 1000 + micros / 1000
}

/// The wake-up channels of the lock's waiters that someone is subscribed to.
fn wake_channels(server: &RedisServer, name: &str) -> Vec<String> {
    let pattern = fair_keys(name).wake_channels.of("*");
    let mut channels = strings(&server.cmd(&["PUBSUB", "CHANNELS", &pattern]));
    channels.sort();
    channels
}

/// Whether a waiter (a member of the queue) is in the queue, and whether it has a deadline.
fn queued(server: &RedisServer, name: &str, waiter: &str) -> (bool, bool) {
    let keys = fair_keys(name);
    (
        zscore(server, &keys.queue, waiter).is_some(),
        zscore(server, &keys.deadlines, waiter).is_some(),
    )
}

/// Puts a waiter into the queue directly, as the acquire script would, but with no process
/// behind it: nobody listens on its channel and nobody renews its deadline.
fn inject_waiter(server: &RedisServer, name: &str, waiter: &str, order: i64, deadline_ms: i64) {
    let keys = fair_keys(name);
    server.cmd(&["ZADD", &keys.queue, &order.to_string(), waiter]);
    server.cmd(&["ZADD", &keys.deadlines, &deadline_ms.to_string(), waiter]);
}

/// The ids of the connections the server has open, except the one asking.
fn connection_ids(server: &RedisServer) -> HashSet<u64> {
    text(&server.cmd(&["CLIENT", "LIST"]))
        .lines()
        .filter(|line| !line.contains("cmd=client|list"))
        .filter_map(|line| {
            line.split(' ')
                .find_map(|field| field.strip_prefix("id="))
                .and_then(|id| id.parse().ok())
        })
        .collect()
}

/// Waits until exactly `n` waiters are in the queue.
async fn await_queue_len(server: &RedisServer, name: &str, n: usize) {
    let queue = fair_keys(name).queue;
    eventually(format!("{n} waiters are queued"), SETTLE, || {
        zcard(server, &queue) == n as i64
    })
    .await;
}

/// Waits until neither the queue nor the deadlines key exists: nobody waits.
async fn assert_nobody_waits(server: &RedisServer, name: &str) {
    let keys = fair_keys(name);
    eventually("the queue and deadline keys are gone", SETTLE, || {
        !exists(server, &keys.queue) && !exists(server, &keys.deadlines)
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// Waiters that take one turn each.

/// Who got the lock, in the order they got it (pushed while holding it).
type Log = Arc<Mutex<Vec<usize>>>;

/// One waiter's turn with the lock.
#[derive(Debug)]
struct Turn {
    who: usize,
    token: u64,
    acquired: Instant,
    /// Just before the unlock was sent.
    released: Instant,
}

/// Waits for the lock with `lock`, logs `who`, holds it for `hold`, then unlocks.
fn spawn_turn(lock: FairLock, who: usize, hold: Duration, log: Log) -> JoinHandle<Result<Turn>> {
    tokio::spawn(async move {
        let guard = lock.lock().await?;
        let acquired = Instant::now();
        log.lock().unwrap().push(who);
        if !hold.is_zero() {
            tokio::time::sleep(hold).await;
        }
        let token = guard.fencing_token();
        let released = Instant::now();
        guard.unlock().await?;
        Ok(Turn {
            who,
            token,
            acquired,
            released,
        })
    })
}

async fn finish(task: JoinHandle<Result<Turn>>, within: Duration) -> Turn {
    tokio::time::timeout(within, task)
        .await
        .unwrap_or_else(|_| panic!("a waiter did not get its turn within {within:?}"))
        .expect("waiter task panicked")
        .expect("waiter failed")
}

/// A runtime standing for another process: shut down abruptly when dropped (even during a
/// panic), without running its tasks to completion.
struct OtherProcess(Option<tokio::runtime::Runtime>);

impl OtherProcess {
    fn start() -> Self {
        OtherProcess(Some(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap(),
        ))
    }

    fn runtime(&self) -> &tokio::runtime::Runtime {
        self.0.as_ref().unwrap()
    }

    /// Dies: its threads stop, its tasks are dropped where they stand, its sockets close.
    fn kill(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

impl Drop for OtherProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

// ---------------------------------------------------------------------------------------------
// First come, first served.

/// Eight waiters on four clients (two per client) queue up 100 ms apart behind a holder, each
/// started only once the one before is seen in the queue, and must get the lock in that order.
async fn waiters_get_the_lock_in_arrival_order(name: &str, heartbeat: Option<Duration>) {
    let server = RedisServer::start();
    let holder = client(&server).await;
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(client(&server).await);
    }
    let guard = holder.fair_lock(name).lock().await.unwrap();
    let holder_token = guard.fencing_token();
    let log = Log::default();
    let mut waiters = Vec::new();
    for who in 0..8 {
        let started = Instant::now();
        let mut lock = clients[who % clients.len()].fair_lock(name);
        if let Some(heartbeat) = heartbeat {
            lock = lock.with_heartbeat(heartbeat);
        }
        waiters.push(spawn_turn(lock, who, ms(5), log.clone()));
        await_queue_len(&server, name, who + 1).await;
        tokio::time::sleep_until((started + ms(100)).into()).await;
    }
    assert!(log.lock().unwrap().is_empty(), "nobody gets a held lock");
    let members = queue_members(&server, name);
    assert_eq!(members.len(), 8);
    guard.unlock().await.unwrap();
    let mut turns = Vec::new();
    for waiter in waiters {
        turns.push(finish(waiter, SETTLE * 3).await);
    }
    assert_eq!(
        *log.lock().unwrap(),
        (0..8).collect::<Vec<_>>(),
        "the lock went to the waiters out of their arrival order"
    );
    let mut last_token = holder_token;
    for (who, turn) in turns.iter().enumerate() {
        assert_eq!(turn.who, who);
        assert!(
            turn.token > last_token,
            "fencing tokens must increase from holder to holder: {turns:?}"
        );
        last_token = turn.token;
    }
    assert_nobody_waits(&server, name).await;
    for client in clients.iter().chain([&holder]) {
        assert_eq!(client.local_state(), LocalState::default());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_across_clients_get_the_lock_in_arrival_order() {
    // The default heartbeat, one second.
    waiters_get_the_lock_in_arrival_order("fifo", None).await;
}

/// With a 50 ms heartbeat the waiters re-try all the time, also while the lock is free between
/// two holders: none of those retries may overtake the head. (Shorter heartbeats would make a
/// stall of the loaded test box cost a live waiter its place, which is the documented
/// behaviour but not what this test is about.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_heartbeats_never_overtake_the_head() {
    waiters_get_the_lock_in_arrival_order("fifo-busy", Some(ms(50))).await;
}

// ---------------------------------------------------------------------------------------------
// Dead waiters.

/// A waiter with no process behind it (injected straight into both sorted sets, between two
/// real waiters, with a deadline three heartbeats away) holds up the waiters behind it until
/// its deadline, and no longer than one more heartbeat after it; it is then removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_dead_waiter_mid_queue_delays_the_next_by_at_most_four_heartbeats() {
    let name = "ghost";
    let keys = fair_keys(name);
    let server = RedisServer::start();
    let holder = quick_client(&server).await;
    let clients = [
        quick_client(&server).await,
        quick_client(&server).await,
        quick_client(&server).await,
    ];
    let guard = holder.fair_lock(name).lock().await.unwrap();
    let log = Log::default();
    let mut waiters = Vec::new();
    for (who, client) in clients.iter().enumerate() {
        let lock = client.fair_lock(name).with_heartbeat(SHORT_HEARTBEAT);
        waiters.push(spawn_turn(lock, who, Duration::ZERO, log.clone()));
        await_queue_len(&server, name, who + 1).await;
    }
    let members = queue_members(&server, name);
    let first = zscore(&server, &keys.queue, &members[0]).unwrap();
    let second = zscore(&server, &keys.queue, &members[1]).unwrap();
    let order = ((first + second) / 2.0).floor();
    assert!(first < order && order < second, "{first} {order} {second}");

    let ghost = "ghost-of-a-crashed-process:1";
    let injected = Instant::now();
    let deadline = server_ms(&server) + 3 * SHORT_HEARTBEAT.as_millis() as i64;
    inject_waiter(&server, name, ghost, order as i64, deadline);
    // Its deadline is no earlier than this, on the test's clock.
    let ghost_dies = injected + 3 * SHORT_HEARTBEAT - CLOCK_SLACK;
    assert_eq!(
        queue_members(&server, name),
        [&members[0], ghost, &members[1], &members[2]]
    );

    guard.unlock().await.unwrap();
    let turns = [
        finish(waiters.remove(0), SETTLE).await,
        finish(waiters.remove(0), SETTLE).await,
        finish(waiters.remove(0), SETTLE).await,
    ];
    assert_eq!(*log.lock().unwrap(), [0, 1, 2]);
    assert!(
        turns[1].acquired >= ghost_dies,
        "the waiter behind the ghost went ahead {:?} before the ghost's deadline",
        ghost_dies - turns[1].acquired
    );
    let delay = turns[1].acquired - injected;
    let bound = 4 * SHORT_HEARTBEAT + Duration::from_secs(2);
    assert!(
        delay < bound,
        "the ghost held up the queue for {delay:?}, more than {bound:?}"
    );
    assert_eq!(queued(&server, name, ghost), (false, false));
    assert_nobody_waits(&server, name).await;
}

/// A waiter whose process dies in the middle of the queue: a runtime of its own (its own
/// threads and client) is shut down abruptly while the waiter waits. Its destructors cannot
/// reach Redis any more, so it stays queued (checked once all its connections are closed) and
/// the waiter behind it goes ahead when its deadline passes, within four heartbeats.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_whose_process_dies_mid_queue_delays_the_next_by_at_most_four_heartbeats() {
    let name = "crash";
    let keys = fair_keys(name);
    let server = RedisServer::start();
    let holder = quick_client(&server).await;
    let (a, b) = (quick_client(&server).await, quick_client(&server).await);
    let guard = holder.fair_lock(name).lock().await.unwrap();
    let log = Log::default();
    let first = spawn_turn(
        a.fair_lock(name).with_heartbeat(SHORT_HEARTBEAT),
        0,
        Duration::ZERO,
        log.clone(),
    );
    await_queue_len(&server, name, 1).await;
    // Subscribed already, so that its client opens no connection while the other process runs.
    eventually("the first waiter listens", SETTLE, || {
        wake_channels(&server, name).len() == 1
    })
    .await;

    let before = connection_ids(&server);
    let mut other = OtherProcess::start();
    let got_the_lock = Arc::new(AtomicBool::new(false));
    let (id_tx, id_rx) = tokio::sync::oneshot::channel();
    {
        let (url, got_the_lock) = (server.url(), got_the_lock.clone());
        other.runtime().spawn(async move {
            let c = Client::builder(url)
                .command_timeout(QUICK_TIMEOUT)
                .build()
                .await
                .expect("connect");
            id_tx.send(c.id().to_owned()).unwrap();
            let lock = c.fair_lock("crash").with_heartbeat(SHORT_HEARTBEAT);
            if let Ok(guard) = lock.lock().await {
                got_the_lock.store(true, Ordering::SeqCst);
                std::mem::forget(guard);
            }
            std::future::pending::<()>().await;
        });
    }
    let dying_client = id_rx.await.unwrap();
    await_queue_len(&server, name, 2).await;
    let dead = queue_members(&server, name)[1].clone();
    assert!(
        dead.starts_with(&dying_client),
        "{dead} is not the dying waiter"
    );
    let dead_channel = keys.wake_channels.of(&dead);
    eventually("the dying waiter listens", SETTLE, || {
        server.numsub(&dead_channel) == 1
    })
    .await;
    let its_connections: HashSet<u64> = connection_ids(&server)
        .difference(&before)
        .copied()
        .collect();
    assert!(!its_connections.is_empty());

    let second = spawn_turn(
        b.fair_lock(name).with_heartbeat(SHORT_HEARTBEAT),
        1,
        Duration::ZERO,
        log.clone(),
    );
    await_queue_len(&server, name, 3).await;
    assert_eq!(queue_members(&server, name)[1], dead);

    // Die just after a heartbeat, so that nothing of it is on the wire and the whole
    // allowance of three heartbeats lies ahead.
    let before_heartbeat = zscore(&server, &keys.deadlines, &dead);
    eventually("the dying waiter sends a heartbeat", SETTLE, || {
        zscore(&server, &keys.deadlines, &dead) != before_heartbeat
    })
    .await;
    let died = Instant::now();
    other.kill();
    eventually(
        "every connection of the dead process is closed",
        SETTLE,
        || connection_ids(&server).is_disjoint(&its_connections),
    )
    .await;
    // From here on the dead process can send nothing: it can neither leave nor renew its
    // place any more.
    let checked = Instant::now();
    let now = server_ms(&server);
    let deadline = zscore(&server, &keys.deadlines, &dead);
    let still_queued = zscore(&server, &keys.queue, &dead).is_some();
    let deadline = match deadline {
        Some(deadline) if still_queued => deadline as i64,
        _ => panic!(
            "the dying waiter is gone from the queue (queued {still_queued}, deadline \
             {deadline:?}, now {now}) although its deadline cannot have passed yet: the runtime's \
             shutdown let it leave, so this test would not show the heartbeat bound"
        ),
    };
    assert!(
        now < deadline,
        "the box took too long to kill the process: its deadline passed already"
    );
    let dead_is_due = checked + ms((deadline - now) as u64) - CLOCK_SLACK;

    let released = Instant::now();
    guard.unlock().await.unwrap();
    let first = finish(first, SETTLE).await;
    assert!(
        first.acquired - released < BY_MESSAGE,
        "the head ahead of the dead waiter was not woken at once"
    );
    let second = finish(second, SETTLE).await;
    assert_eq!(*log.lock().unwrap(), [0, 1]);
    assert!(
        second.acquired >= dead_is_due,
        "the waiter behind the dead one went ahead {:?} before its deadline",
        dead_is_due - second.acquired
    );
    let delay = second.acquired - died;
    let bound = 4 * SHORT_HEARTBEAT + Duration::from_secs(2);
    assert!(
        delay < bound,
        "the dead waiter held up the queue for {delay:?}, more than {bound:?}"
    );
    assert!(!got_the_lock.load(Ordering::SeqCst));
    assert_eq!(queued(&server, name, &dead), (false, false));
    assert_nobody_waits(&server, name).await;
}

// ---------------------------------------------------------------------------------------------
// Giving up.

/// The head's future is dropped (its task aborted) while the lock is held; the release right
/// after must reach the next waiter at once, although its heartbeat is 10 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborted_head_waiter_is_skipped_at_once() {
    let name = "aborted";
    let server = RedisServer::start();
    let (holder, a, b) = (
        client(&server).await,
        client(&server).await,
        client(&server).await,
    );
    let guard = holder.fair_lock(name).lock().await.unwrap();
    let log = Log::default();
    let head = spawn_turn(
        a.fair_lock(name).with_heartbeat(LONG_HEARTBEAT),
        0,
        Duration::ZERO,
        log.clone(),
    );
    await_queue_len(&server, name, 1).await;
    let next = spawn_turn(
        b.fair_lock(name).with_heartbeat(LONG_HEARTBEAT),
        1,
        Duration::ZERO,
        log.clone(),
    );
    await_queue_len(&server, name, 2).await;
    let head_id = queue_members(&server, name)[0].clone();

    head.abort();
    assert!(head.await.unwrap_err().is_cancelled());
    let released = Instant::now();
    guard.unlock().await.unwrap();
    let next = finish(next, SETTLE * 2).await;
    let handoff = next.acquired - released;
    assert!(
        handoff < BY_MESSAGE,
        "the next waiter got the lock {handoff:?} after the release"
    );
    assert_eq!(*log.lock().unwrap(), [1]);
    assert_eq!(queued(&server, name, &head_id), (false, false));
    assert_nobody_waits(&server, name).await;
    assert_eq!(a.local_state(), LocalState::default());
}

/// Same with the head's future dropped by `tokio::time::timeout`, and the holder waiting until
/// the dropped waiter's place is gone before it releases, so that the release itself wakes the
/// next waiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_waiter_dropped_by_a_timeout_is_skipped_at_once() {
    let name = "timed-out";
    let server = RedisServer::start();
    let (holder, a, b) = (
        client(&server).await,
        client(&server).await,
        client(&server).await,
    );
    let guard = holder.fair_lock(name).lock().await.unwrap();
    let head = {
        let lock = a.fair_lock(name).with_heartbeat(LONG_HEARTBEAT);
        tokio::spawn(async move { tokio::time::timeout(ms(1500), lock.lock()).await.is_err() })
    };
    await_queue_len(&server, name, 1).await;
    let head_id = queue_members(&server, name)[0].clone();
    let log = Log::default();
    let next = spawn_turn(
        b.fair_lock(name).with_heartbeat(LONG_HEARTBEAT),
        1,
        Duration::ZERO,
        log.clone(),
    );
    await_queue_len(&server, name, 2).await;
    assert!(
        head.await.unwrap(),
        "the lock is held: the head's wait runs out"
    );
    await_queue_len(&server, name, 1).await;
    assert_eq!(queued(&server, name, &head_id), (false, false));
    assert_eq!(
        zcard(&server, &fair_keys(name).deadlines),
        1,
        "one deadline per waiter"
    );

    let released = Instant::now();
    guard.unlock().await.unwrap();
    let next = finish(next, SETTLE * 2).await;
    let handoff = next.acquired - released;
    assert!(
        handoff < BY_MESSAGE,
        "the next waiter got the lock {handoff:?} after the release"
    );
    assert_eq!(*log.lock().unwrap(), [1]);
    assert_nobody_waits(&server, name).await;
    assert_eq!(a.local_state(), LocalState::default());
}

/// A dropped waiter is gone from the queue soon after the drop, with nothing to wake it: its
/// place does not linger for three heartbeats.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_waiter_leaves_without_waiting_for_its_deadline() {
    let name = "dropped";
    let server = RedisServer::start();
    let (holder, a) = (client(&server).await, client(&server).await);
    let guard = holder.fair_lock(name).lock().await.unwrap();
    let lock = a.fair_lock(name).with_heartbeat(LONG_HEARTBEAT);
    let task = tokio::spawn(async move { lock.lock().await.map(|g| g.fencing_token()) });
    await_queue_len(&server, name, 1).await;
    let waiter = queue_members(&server, name)[0].clone();
    let dropped = Instant::now();
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    assert_nobody_waits(&server, name).await;
    assert!(
        dropped.elapsed() < BY_MESSAGE,
        "the place lingered {:?}",
        dropped.elapsed()
    );
    assert_eq!(queued(&server, name, &waiter), (false, false));
    eventually("the dropped waiter stops listening", SETTLE, || {
        wake_channels(&server, name).is_empty()
    })
    .await;
    guard.unlock().await.unwrap();
}

/// `try_lock_for` that runs out gives up its place before it returns `None`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_lock_for_that_times_out_has_left_the_queue_when_it_returns() {
    let name = "patience";
    let server = RedisServer::start();
    let (holder, a) = (client(&server).await, client(&server).await);
    let guard = holder.fair_lock(name).lock().await.unwrap();
    for wait in [ms(1500), ms(300)] {
        let lock = a.fair_lock(name).with_heartbeat(LONG_HEARTBEAT);
        let task = tokio::spawn(async move { lock.try_lock_for(wait).await.map(|g| g.is_some()) });
        await_queue_len(&server, name, 1).await;
        let waiter = queue_members(&server, name)[0].clone();
        let got = task.await.unwrap().unwrap();
        assert!(!got, "the lock is held");
        // Checked once, at once: no `eventually`.
        assert_eq!(queued(&server, name, &waiter), (false, false));
        let keys = fair_keys(name);
        assert!(!exists(&server, &keys.queue) && !exists(&server, &keys.deadlines));
    }
    // The same with the waiter behind another one, which keeps its place.
    let log = Log::default();
    let first = spawn_turn(
        a.fair_lock(name).with_heartbeat(LONG_HEARTBEAT),
        0,
        Duration::ZERO,
        log.clone(),
    );
    await_queue_len(&server, name, 1).await;
    let patient = a.fair_lock(name).with_heartbeat(LONG_HEARTBEAT);
    assert!(patient.try_lock_for(ms(500)).await.unwrap().is_none());
    assert_eq!(zcard(&server, &fair_keys(name).queue), 1);
    let released = Instant::now();
    guard.unlock().await.unwrap();
    let first = finish(first, SETTLE).await;
    assert!(first.acquired - released < BY_MESSAGE);
    assert_nobody_waits(&server, name).await;
}

// ---------------------------------------------------------------------------------------------
// try_lock.

/// `try_lock` neither queues nor overtakes: on a held lock it returns `None` and the queue
/// does not appear; on a free lock with a waiter queued it returns `None` too, and a new
/// `lock()` queues behind the waiter, however often it re-tries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_lock_never_queues_and_nobody_overtakes_a_waiter() {
    let name = "no-overtaking";
    let keys = fair_keys(name);
    let server = RedisServer::start();
    let (holder, a, b) = (
        client(&server).await,
        client(&server).await,
        client(&server).await,
    );
    let guard = holder.fair_lock(name).lock().await.unwrap();
    let other = a.fair_lock(name).with_heartbeat(ms(50));
    assert!(other.try_lock().await.unwrap().is_none());
    assert!(other.try_lock_for(Duration::ZERO).await.unwrap().is_none());
    assert!(!exists(&server, &keys.queue) && !exists(&server, &keys.deadlines));
    guard.unlock().await.unwrap();

    // A waiter that is alive for another minute waits for a free lock (as a head does between
    // its wake-up and its request).
    let ghost = "slow-head:1";
    let order = server_ms(&server) * 1000;
    inject_waiter(&server, name, ghost, order, server_ms(&server) + 60_000);
    assert!(!other.is_locked().await.unwrap());
    assert!(
        other.try_lock().await.unwrap().is_none(),
        "try_lock overtook a queued waiter"
    );
    assert!(other.try_lock_for(Duration::ZERO).await.unwrap().is_none());
    assert_eq!(
        queue_members(&server, name),
        [ghost],
        "try_lock joined the queue"
    );
    assert!(!other.is_locked().await.unwrap());

    let log = Log::default();
    let newcomer = spawn_turn(
        b.fair_lock(name).with_heartbeat(ms(50)),
        1,
        Duration::ZERO,
        log.clone(),
    );
    await_queue_len(&server, name, 2).await;
    let newcomer_id = queue_members(&server, name)[1].clone();
    // Let it re-try a few times (each heartbeat moves its deadline) on the free lock.
    let mut seen = Vec::new();
    eventually("the newcomer re-tries three times", SETTLE, || {
        let deadline = zscore(&server, &keys.deadlines, &newcomer_id);
        if seen.last() != Some(&deadline) {
            seen.push(deadline);
        }
        seen.len() > 3
    })
    .await;
    assert!(log.lock().unwrap().is_empty(), "lock() overtook a waiter");
    assert!(!other.is_locked().await.unwrap());
    assert_eq!(queue_members(&server, name), [ghost, newcomer_id.as_str()]);

    // The ghost leaves (as its own leave would, but without a wake-up): the newcomer's next
    // heartbeat takes the lock.
    server.cmd(&["ZREM", &keys.queue, ghost]);
    server.cmd(&["ZREM", &keys.deadlines, ghost]);
    let left = Instant::now();
    let turn = finish(newcomer, SETTLE).await;
    assert!(turn.acquired - left < BY_MESSAGE);
    assert!(turn.token > 1);
    assert_nobody_waits(&server, name).await;
    let taken = other.try_lock().await.unwrap().expect("free, nobody waits");
    taken.unlock().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// Mutual exclusion and re-entry.

/// 3 clients x 4 tasks x 25 increments of a counter in Redis, read and written in two requests
/// with a yield in between: only mutual exclusion makes the count exact. The fencing tokens,
/// logged under the lock, strictly increase.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_lock_excludes_and_the_count_is_exact() {
    const CLIENTS: usize = 3;
    const TASKS: usize = 4;
    const ROUNDS: usize = 25;
    let name = "counter";
    let counter = "fair-counter";
    let server = RedisServer::start();
    let redis_client = redis::Client::open(server.url()).unwrap();
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(client(&server).await);
    }
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let inside = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for client in &clients {
        for _ in 0..TASKS {
            let lock = client.fair_lock(name);
            let (tokens, inside) = (tokens.clone(), inside.clone());
            let mut conn = redis_client
                .get_multiplexed_async_connection()
                .await
                .unwrap();
            tasks.push(tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let guard = lock.lock().await?;
                    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                    let value: Option<i64> = redis::cmd("GET")
                        .arg(counter)
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                    tokio::task::yield_now().await;
                    tokio::time::sleep(ms(1)).await;
                    redis::cmd("SET")
                        .arg(counter)
                        .arg(value.unwrap_or(0) + 1)
                        .query_async::<()>(&mut conn)
                        .await
                        .unwrap();
                    tokens.lock().unwrap().push(guard.fencing_token());
                    inside.fetch_sub(1, Ordering::SeqCst);
                    guard.unlock().await?;
                }
                Ok::<_, Error>(())
            }));
        }
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(120), task)
            .await
            .expect("the workload finishes")
            .expect("task panicked")
            .expect("lock failed");
    }
    let total = CLIENTS * TASKS * ROUNDS;
    assert_eq!(
        text(&server.cmd(&["GET", counter])),
        total.to_string(),
        "lost updates: two holders at once"
    );
    let tokens = std::mem::take(&mut *tokens.lock().unwrap());
    assert_eq!(tokens.len(), total);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "fencing tokens must strictly increase from holder to holder"
    );
    assert_eq!(
        text(&server.cmd(&["GET", &fair_keys(name).fence])),
        tokens.last().unwrap().to_string()
    );
    assert_nobody_waits(&server, name).await;
    assert!(!exists(&server, &fair_keys(name).hash));
    for client in &clients {
        assert_eq!(client.local_state(), LocalState::default());
    }
}

/// The holder re-enters at once, with `try_lock` or `lock`, while others wait; re-entries
/// neither queue nor change the queue, and the waiters go after the last hold is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_reenters_at_once_while_others_wait() {
    let name = "reentry";
    let server = RedisServer::start();
    let (a, b, c) = (
        client(&server).await,
        client(&server).await,
        client(&server).await,
    );
    let holder = a.fair_lock(name).with_heartbeat(LONG_HEARTBEAT);
    let guard = holder.lock().await.unwrap();
    let holder_token = guard.fencing_token();
    let log = Log::default();
    let first = spawn_turn(
        b.fair_lock(name).with_heartbeat(LONG_HEARTBEAT),
        0,
        Duration::ZERO,
        log.clone(),
    );
    await_queue_len(&server, name, 1).await;
    let second = spawn_turn(
        c.fair_lock(name).with_heartbeat(LONG_HEARTBEAT),
        1,
        Duration::ZERO,
        log.clone(),
    );
    await_queue_len(&server, name, 2).await;
    let waiting = queue_members(&server, name);

    let again = holder
        .clone()
        .try_lock()
        .await
        .unwrap()
        .expect("the holder re-enters with waiters queued");
    assert_eq!(again.fencing_token(), guard.fencing_token());
    let third = tokio::time::timeout(BY_MESSAGE, holder.clone().lock())
        .await
        .expect("a re-entry never waits")
        .unwrap();
    // A handle with another heartbeat is the same owner.
    let same_owner = holder.clone().with_heartbeat(ms(50));
    assert_eq!(same_owner.owner_id(), holder.owner_id());
    assert_eq!(same_owner.heartbeat(), ms(50));
    let fourth = same_owner
        .try_lock_for(ms(100))
        .await
        .unwrap()
        .expect("re-entry through a handle with another heartbeat");
    assert_eq!(holder.hold_count().await.unwrap(), 4);
    assert_eq!(queue_members(&server, name), waiting, "re-entries queued");
    // A stranger on the holder's own client waits like anyone else.
    assert!(a
        .fair_lock(name)
        .try_lock_for(ms(200))
        .await
        .unwrap()
        .is_none());

    for hold in [again, third, fourth] {
        hold.unlock().await.unwrap();
        assert!(holder.is_held().await.unwrap());
        assert_eq!(queue_members(&server, name), waiting);
    }
    assert!(log.lock().unwrap().is_empty());
    let released = Instant::now();
    guard.unlock().await.unwrap();
    let first = finish(first, SETTLE).await;
    let second = finish(second, SETTLE).await;
    assert_eq!(*log.lock().unwrap(), [0, 1]);
    assert!(first.acquired - released < BY_MESSAGE);
    assert!(second.acquired - first.released < BY_MESSAGE);
    assert!(first.token > holder_token && second.token > first.token);
    assert_nobody_waits(&server, name).await;
}

// ---------------------------------------------------------------------------------------------
// Leases, force_unlock, and the other lock of the same name.

/// A fixed lease that runs out is reported by `lost()`, and the head waiter takes the lock
/// when it expires (nothing is published then: the wait is bounded by the lease).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_lease_runs_out_lost_fires_and_the_head_goes_next() {
    let name = "fair-lease";
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let lock = a.fair_lock(name);
    let stale = lock.lock_with_lease(ms(400)).await.unwrap();
    let granted = Instant::now();
    let log = Log::default();
    let waiter = spawn_turn(
        b.fair_lock(name).with_heartbeat(LONG_HEARTBEAT),
        0,
        Duration::ZERO,
        log.clone(),
    );
    await_queue_len(&server, name, 1).await;
    assert!(!stale.is_lost());
    tokio::time::timeout(Duration::from_secs(3), stale.lost())
        .await
        .expect("a fixed lease is known lost once it runs out");
    assert!(stale.is_lost());
    assert!(granted.elapsed() >= ms(400) - CLOCK_SLACK);
    let turn = finish(waiter, SETTLE).await;
    assert!(
        turn.acquired - granted < ms(400) + BY_MESSAGE,
        "the head waited {:?} for a 400 ms lease",
        turn.acquired - granted
    );
    assert!(turn.token > stale.fencing_token());
    assert!(matches!(stale.unlock().await, Err(Error::NotOwner)));
    assert_nobody_waits(&server, name).await;
}

/// `force_unlock` frees the lock and wakes the head at once (heartbeat 10 s); the queue keeps
/// its order, and the forced holder's guard learns it lost the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_wakes_the_head_at_once() {
    let name = "forced";
    let server = RedisServer::start();
    let holder = client_with_watchdog(&server, ms(600)).await;
    let (a, b) = (client(&server).await, client(&server).await);
    let guard = holder.fair_lock(name).lock().await.unwrap();
    let log = Log::default();
    let first = spawn_turn(
        a.fair_lock(name).with_heartbeat(LONG_HEARTBEAT),
        0,
        ms(50),
        log.clone(),
    );
    await_queue_len(&server, name, 1).await;
    let second = spawn_turn(
        b.fair_lock(name).with_heartbeat(LONG_HEARTBEAT),
        1,
        Duration::ZERO,
        log.clone(),
    );
    await_queue_len(&server, name, 2).await;

    let forced = Instant::now();
    assert!(b.fair_lock(name).force_unlock().await.unwrap());
    let first = finish(first, SETTLE).await;
    let second = finish(second, SETTLE).await;
    assert_eq!(*log.lock().unwrap(), [0, 1], "the queue keeps its order");
    assert!(
        first.acquired - forced < BY_MESSAGE,
        "the head got the lock {:?} after force_unlock",
        first.acquired - forced
    );
    assert!(second.acquired - first.released < BY_MESSAGE);
    assert!(first.token > guard.fencing_token());
    tokio::time::timeout(Duration::from_secs(3), guard.lost())
        .await
        .expect("the watchdog notices the hold is gone");
    assert!(matches!(guard.unlock().await, Err(Error::NotOwner)));
    assert!(!a.fair_lock(name).force_unlock().await.unwrap());
    assert!(!a.fair_lock(name).delete().await.unwrap());
    assert_nobody_waits(&server, name).await;
}

/// `force_unlock` of a free lock whose head has died wakes the waiter it brings forward at
/// once (heartbeat 10 s): nobody else would tell it, since the release that freed the lock
/// woke the dead head.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_of_a_free_lock_wakes_the_head_it_brings_forward() {
    let name = "forced-free";
    let server = RedisServer::start();
    let (holder, waiting) = (client(&server).await, client(&server).await);
    let guard = holder.fair_lock(name).lock().await.unwrap();
    inject_live_ghost(&server, name);
    let behind = spawn_behind_the_ghost(&server, name, &waiting).await;
    // The release wakes the ghost, which never comes.
    guard.unlock().await.unwrap();
    let tidying = async {
        assert!(
            !holder.fair_lock(name).force_unlock().await.unwrap(),
            "free"
        );
    };
    the_ghost_dies_and_the_waiter_behind_is_woken_by(&server, name, behind, tidying).await;
}

/// A `FairLock` and a `ReentrantLock` of the same name are different locks: each is taken
/// while the other is held, with separate keys and fencing counters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_and_reentrant_locks_of_one_name_do_not_exclude_each_other() {
    let name = "two-kinds";
    let keys = fair_keys(name);
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let fair = a.fair_lock(name).lock().await.unwrap();
    let plain = b
        .lock(name)
        .try_lock()
        .await
        .unwrap()
        .expect("the reentrant lock is another lock");
    assert_eq!((fair.fencing_token(), plain.fencing_token()), (1, 1));
    assert!(exists(&server, &keys.hash));
    assert!(exists(&server, &keys::lock(name).hash));
    assert!(b.fair_lock(name).try_lock().await.unwrap().is_none());
    assert!(a.lock(name).try_lock().await.unwrap().is_none());
    fair.unlock().await.unwrap();
    assert!(b.lock(name).is_locked().await.unwrap());
    let fair = b
        .fair_lock(name)
        .try_lock()
        .await
        .unwrap()
        .expect("the reentrant hold does not block the fair lock");
    assert_eq!(fair.fencing_token(), 2);
    assert!(b.lock(name).force_unlock().await.unwrap());
    assert!(a.fair_lock(name).is_locked().await.unwrap());
    fair.unlock().await.unwrap();
    assert!(matches!(plain.unlock().await, Err(Error::NotOwner)));
}

// ---------------------------------------------------------------------------------------------
// Heartbeat, wake-up channels, outage.

/// A heartbeat below 10 ms or too large for Redis milliseconds is refused by an acquire that
/// waits, which then leaves nothing behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_heartbeat_is_an_invalid_argument() {
    let name = "heartbeat";
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let guard = a.fair_lock(name).lock().await.unwrap();
    for heartbeat in [ms(1), ms(9), Duration::MAX] {
        let lock = b.fair_lock(name).with_heartbeat(heartbeat);
        assert_eq!(lock.heartbeat(), heartbeat);
        let outcome = tokio::time::timeout(SETTLE, lock.lock()).await.unwrap();
        assert!(
            matches!(outcome, Err(Error::InvalidArgument(_))),
            "{heartbeat:?}: {outcome:?}"
        );
        let outcome = tokio::time::timeout(SETTLE, lock.try_lock_for(ms(200)))
            .await
            .unwrap();
        assert!(
            matches!(outcome, Err(Error::InvalidArgument(_))),
            "{heartbeat:?}: {outcome:?}"
        );
        let outcome = tokio::time::timeout(SETTLE, lock.lock_with_lease(ms(500)))
            .await
            .unwrap();
        assert!(
            matches!(outcome, Err(Error::InvalidArgument(_))),
            "{heartbeat:?}: {outcome:?}"
        );
        assert!(!exists(&server, &fair_keys(name).queue));
        assert!(wake_channels(&server, name).is_empty());
    }
    // The smallest valid heartbeat waits as usual.
    let lock = b.fair_lock(name).with_heartbeat(ms(10));
    assert!(lock.try_lock_for(ms(200)).await.unwrap().is_none());
    guard.unlock().await.unwrap();
    let taken = lock.try_lock_for(ms(200)).await.unwrap().expect("free");
    taken.unlock().await.unwrap();
    assert_nobody_waits(&server, name).await;
    assert_eq!(b.local_state(), LocalState::default());
}

/// Each waiter listens on a channel of its own, a release publishes to the head's only (no
/// herd), and a waiter's subscription is gone once it has the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_waiter_has_its_own_channel_and_a_release_wakes_only_the_head() {
    let name = "channels";
    let keys = fair_keys(name);
    let server = RedisServer::start();
    let (holder, a, b) = (
        client(&server).await,
        client(&server).await,
        client(&server).await,
    );
    let guard = holder.fair_lock(name).lock().await.unwrap();
    let head_has_it = Arc::new(tokio::sync::Notify::new());
    let let_go = Arc::new(tokio::sync::Notify::new());
    let head = {
        let lock = a.fair_lock(name).with_heartbeat(LONG_HEARTBEAT);
        let (head_has_it, let_go) = (head_has_it.clone(), let_go.clone());
        tokio::spawn(async move {
            let guard = lock.lock().await?;
            head_has_it.notify_one();
            let_go.notified().await;
            guard.unlock().await
        })
    };
    await_queue_len(&server, name, 1).await;
    let log = Log::default();
    let mut others = Vec::new();
    for (who, client) in [&a, &b].into_iter().enumerate() {
        let lock = client.fair_lock(name).with_heartbeat(LONG_HEARTBEAT);
        others.push(spawn_turn(lock, who, Duration::ZERO, log.clone()));
        await_queue_len(&server, name, who + 2).await;
    }
    let members = queue_members(&server, name);
    let mut expected: Vec<String> = members.iter().map(|w| keys.wake_channels.of(w)).collect();
    expected.sort();
    eventually("every waiter listens on its own channel", SETTLE, || {
        wake_channels(&server, name) == expected
    })
    .await;
    for channel in &expected {
        assert_eq!(server.numsub(channel), 1, "{channel}");
    }
    let head_channel = keys.wake_channels.of(&members[0]);

    // Listen to every wake-up channel of the lock while the holder releases.
    let mut conn = server.connection();
    conn.set_read_timeout(Some(ms(50))).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (subscribed_tx, subscribed_rx) = std::sync::mpsc::channel();
    let listener = {
        let (stop, pattern) = (stop.clone(), keys.wake_channels.of("*"));
        std::thread::spawn(move || {
            let mut pubsub = conn.as_pubsub();
            pubsub.psubscribe(&pattern).unwrap();
            subscribed_tx.send(()).unwrap();
            let mut heard = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                match pubsub.get_message() {
                    Ok(message) => heard.push(message.get_channel_name().to_owned()),
                    Err(err) if err.is_timeout() => {}
                    Err(err) => panic!("listener: {err}"),
                }
            }
            heard
        })
    };
    subscribed_rx.recv().unwrap();
    let released = Instant::now();
    guard.unlock().await.unwrap();
    tokio::time::timeout(SETTLE, head_has_it.notified())
        .await
        .expect("the head gets the lock");
    assert!(released.elapsed() < BY_MESSAGE);
    eventually("the head's subscription is gone", SETTLE, || {
        server.numsub(&head_channel) == 0
    })
    .await;
    tokio::time::sleep(ms(200)).await;
    stop.store(true, Ordering::SeqCst);
    let heard = listener.join().unwrap();
    assert_eq!(
        heard,
        std::slice::from_ref(&head_channel),
        "a release wakes the head only"
    );
    for channel in &expected[..] {
        if *channel != head_channel {
            assert_eq!(server.numsub(channel), 1, "{channel} stopped listening");
        }
    }

    let_go.notify_one();
    head.await.unwrap().unwrap();
    for other in others {
        finish(other, SETTLE).await;
    }
    assert_eq!(*log.lock().unwrap(), [0, 1]);
    eventually("nobody listens any more", SETTLE, || {
        wake_channels(&server, name).is_empty()
    })
    .await;
    assert_nobody_waits(&server, name).await;
    for client in [&holder, &a, &b] {
        assert_eq!(client.local_state(), LocalState::default());
    }
}

/// A head injected at the front of the queue with no process behind it, alive until
/// [`the_ghost_dies_and_the_waiter_behind_is_woken_by`] says otherwise: nobody takes the lock
/// in its turn, and nobody listens on its channel.
const GHOST: &str = "a-ghost-at-the-head:1";

fn inject_live_ghost(server: &RedisServer, name: &str) {
    inject_waiter(server, name, GHOST, 1, server_ms(server) + 600_000);
}

/// A waiter of `client` (heartbeat 10 s) queued behind the ghost, returned once it has asked
/// twice (its first try and its ask once subscribed), so that from then on only a wake-up
/// brings it in sooner than its heartbeat. Resets the server's command counts to count those.
async fn spawn_behind_the_ghost(
    server: &RedisServer,
    name: &str,
    client: &Client,
) -> JoinHandle<Result<Turn>> {
    server.cmd(&["CONFIG", "RESETSTAT"]);
    let behind = spawn_turn(
        client.fair_lock(name).with_heartbeat(LONG_HEARTBEAT),
        0,
        Duration::ZERO,
        Log::default(),
    );
    eventually("the waiter behind the ghost asked twice", SETTLE, || {
        command_stats(server).get("evalsha").copied().unwrap_or(0) >= 2
    })
    .await;
    behind
}

/// The ghost's deadline passes, then `tidying` (a script that tidies the queue) must wake the
/// waiter `behind` it at once: it gets the free lock well within its heartbeat. The ghost is
/// gone and nobody waits afterwards.
async fn the_ghost_dies_and_the_waiter_behind_is_woken_by(
    server: &RedisServer,
    name: &str,
    behind: JoinHandle<Result<Turn>>,
    tidying: impl std::future::Future<Output = ()>,
) {
    server.cmd(&["ZADD", &fair_keys(name).deadlines, "1", GHOST]);
    let tidied = Instant::now();
    tidying.await;
    let turn = finish(behind, SETTLE).await;
    assert!(
        turn.acquired - tidied < BY_MESSAGE,
        "the head brought forward waited {:?}",
        turn.acquired - tidied
    );
    assert_eq!(queued(server, name, GHOST), (false, false));
    assert_nobody_waits(server, name).await;
}

/// A release that frees the lock wakes the head, and nobody else wakes it again: attempts
/// that find the lock free but not their turn (a `try_lock`, a waiter queueing behind the
/// head) publish nothing, unless tidying has just brought a new head forward, which is then
/// woken at once (heartbeat 10 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_freed_lock_wakes_its_head_once_and_a_head_brought_forward_at_once() {
    let name = "one-wake";
    let server = RedisServer::start();
    let (holder, other, waiting) = (
        client(&server).await,
        client(&server).await,
        client(&server).await,
    );
    let guard = holder.fair_lock(name).lock().await.unwrap();
    // The lock stays free once released, and every attempt meanwhile finds it is the ghost's
    // turn.
    inject_live_ghost(&server, name);
    let published = || command_stats(&server).get("publish").copied().unwrap_or(0);
    server.cmd(&["CONFIG", "RESETSTAT"]);
    guard.unlock().await.unwrap();
    assert_eq!(published(), 1, "the release wakes the head");
    let lock = other.fair_lock(name);
    for _ in 0..2 {
        assert!(lock.try_lock().await.unwrap().is_none(), "the ghost's turn");
    }
    assert_eq!(
        published(),
        1,
        "a try_lock that is not the head's publishes nothing"
    );
    let behind = spawn_behind_the_ghost(&server, name, &waiting).await;
    assert_eq!(queue_members(&server, name)[0], GHOST);
    assert_eq!(zcard(&server, &fair_keys(name).queue), 2);
    assert_eq!(
        published(),
        0,
        "attempts that are not the head's publish nothing"
    );
    // The next attempt to tidy the queue drops the dead ghost and wakes the waiter behind it.
    let tidying = async {
        assert!(
            lock.try_lock().await.unwrap().is_none(),
            "the waiter's turn"
        );
    };
    the_ghost_dies_and_the_waiter_behind_is_woken_by(&server, name, behind, tidying).await;
}

/// A waiting fair lock whose client has a 500 ms command timeout returns an error within a
/// few seconds once the server is gone, killed or paused.
async fn waiter_fails_promptly_in_an_outage(kill: bool) {
    let name = "outage";
    let mut server = RedisServer::start();
    let holder = client(&server).await;
    let waiting = Client::builder(server.url())
        .command_timeout(ms(500))
        .build()
        .await
        .unwrap();
    let guard = holder.fair_lock(name).lock().await.unwrap();
    let lock = waiting.fair_lock(name);
    let task = tokio::spawn(async move { lock.lock().await.map(|g| g.fencing_token()) });
    await_queue_len(&server, name, 1).await;
    eventually("the waiter listens", SETTLE, || {
        wake_channels(&server, name).len() == 1
    })
    .await;
    let down = Instant::now();
    if kill {
        server.stop();
    } else {
        server.pause();
    }
    let outcome = tokio::time::timeout(SETTLE, task)
        .await
        .expect("the waiter gave up within 10 s")
        .unwrap();
    let took = down.elapsed();
    assert!(
        matches!(outcome, Err(Error::Redis(_)) | Err(Error::Timeout)),
        "{outcome:?}"
    );
    assert!(took < Duration::from_secs(4), "the waiter needed {took:?}");
    if kill {
        drop(guard);
    } else {
        server.resume();
        // Its place is given up in the background once Redis answers again.
        assert_nobody_waits(&server, name).await;
        guard.unlock().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_fails_promptly_when_the_server_is_killed() {
    waiter_fails_promptly_in_an_outage(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_fails_promptly_when_the_server_stops_answering() {
    waiter_fails_promptly_in_an_outage(false).await;
}

/// After a stall of Redis the deadlines of thousands of waiters can pass at once: more than a
/// Lua script can unpack in one call. The lock must stay usable and its keys consistent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_dead_waiters_are_dropped_at_once() {
    let server = RedisServer::start();
    let name = "many-dead";
    let keys = fair_keys(name);
    let mut conn = server.connection();
    let mut queue = redis::pipe();
    for i in 0..9000 {
        queue
            .cmd("ZADD")
            .arg(&keys.queue)
            .arg(i)
            .arg(format!("dead-{i}"))
            .ignore();
        queue
            .cmd("ZADD")
            .arg(&keys.deadlines)
            .arg(1)
            .arg(format!("dead-{i}"))
            .ignore();
    }
    queue.exec(&mut conn).expect("inject dead waiters");
    let c = client(&server).await;
    let lock = c.fair_lock(name);
    let guard = lock
        .try_lock()
        .await
        .expect("try_lock drops the dead waiters")
        .expect("nobody alive waits");
    assert_eq!(zcard(&server, &keys.queue), 0);
    assert_eq!(zcard(&server, &keys.deadlines), 0);
    guard.unlock().await.expect("unlock");
    assert!(!exists(&server, &keys.hash));
}

/// Waiters whose processes died leave no keys behind, even if nobody touches the lock again:
/// the queue keys expire with the last live waiter's place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_of_dead_waiters_expires_by_itself() {
    let server = RedisServer::start();
    let name = "expiring-queue";
    let keys = fair_keys(name);
    let c = client(&server).await;
    let holder = c.fair_lock(name).lock().await.expect("lock");
    // A waiter on a runtime that is then shut down: it never leaves and never heartbeats again.
    let url = server.url();
    let name_owned = name.to_owned();
    let waiter_thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let c = Client::builder(url)
                .command_timeout(QUICK_TIMEOUT)
                .build()
                .await
                .expect("connect");
            let lock = c.fair_lock(name_owned).with_heartbeat(SHORT_HEARTBEAT);
            let _ = tokio::time::timeout(ms(300), lock.lock()).await;
            // Timed out: its place is given back. Join again and die while queued.
            let waiting = tokio::spawn(async move { lock.lock().await.map(|_| ()) });
            tokio::time::sleep(ms(100)).await;
            drop(waiting);
        });
        runtime.shutdown_background();
    });
    waiter_thread.join().expect("waiter thread");
    let pttl = int(&server, &["PTTL", &keys.queue]);
    assert!(
        pttl > 0 && pttl <= 3 * SHORT_HEARTBEAT.as_millis() as i64,
        "the queue expires with the waiter's place, pttl {pttl}"
    );
    eventually("the dead waiter's queue keys expire", SETTLE, || {
        !exists(&server, &keys.queue) && !exists(&server, &keys.deadlines)
    })
    .await;
    holder.unlock().await.expect("unlock");
}

/// A stall of Redis shorter than a waiter's place lifetime (here 3.6 s, with the default 1 s
/// heartbeat and 5 s command timeout: places last 6 s) costs nobody their place: the lock
/// still goes to the waiters in arrival order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stall_of_redis_keeps_the_queue_in_order() {
    let server = RedisServer::start();
    let name = "stalled";
    let holder = client(&server).await;
    let guard = holder.fair_lock(name).lock().await.expect("lock");
    let log: Log = Arc::default();
    let mut waiters = Vec::new();
    for who in 0..5 {
        let c = client(&server).await;
        waiters.push(spawn_turn(c.fair_lock(name), who, ms(1), log.clone()));
        await_queue_len(&server, name, who + 1).await;
    }
    server.pause();
    tokio::time::sleep(ms(3600)).await;
    server.resume();
    guard.unlock().await.expect("unlock after the stall");
    for waiter in waiters {
        finish(waiter, SETTLE).await;
    }
    assert_eq!(*log.lock().unwrap(), [0, 1, 2, 3, 4]);
    assert_nobody_waits(&server, name).await;
}

/// Foreign data under a queue key is reported before anything is changed: no script writes
/// and then fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_queue_keys_fail_before_anything_changes() {
    let server = RedisServer::start();
    let keys = fair_keys("foreign-queue");
    let c = client(&server).await;
    let lock = c.fair_lock("foreign-queue");
    let guard = lock.lock().await.expect("lock");
    server.cmd(&["SET", &keys.queue, "not a queue"]);
    // A re-entry must not count a hold it then reports as failed.
    assert!(matches!(lock.try_lock().await, Err(Error::WrongType)));
    assert_eq!(lock.hold_count().await.expect("hold count"), 1);
    // A release must not free the lock and then report failure.
    server.cmd(&["DEL", &keys.queue]);
    server.cmd(&["SET", &keys.deadlines, "not deadlines"]);
    let token_before = lock.remaining_lease().await.expect("lease");
    assert!(token_before.is_some());
    assert!(matches!(lock.force_unlock().await, Err(Error::WrongType)));
    assert!(
        lock.is_locked().await.expect("is_locked"),
        "force_unlock changed nothing"
    );
    assert!(matches!(guard.unlock().await, Err(Error::WrongType)));
    assert!(
        exists(&server, &keys.hash),
        "a failed release changed nothing"
    );
    server.cmd(&["DEL", &keys.deadlines]);
    assert!(lock.force_unlock().await.expect("force_unlock"));
}

/// A fair acquire that never reaches Redis (the client is shut down) writes nothing there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_acquire_after_shutdown_writes_nothing() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock = c.fair_lock("after-shutdown");
    c.shutdown().await;
    let calls = server.command_calls("evalsha") + server.command_calls("eval");
    for _ in 0..5 {
        assert!(matches!(lock.lock().await, Err(Error::Shutdown)));
        assert!(matches!(
            lock.try_lock_for(ms(100)).await,
            Err(Error::Shutdown)
        ));
    }
    tokio::time::sleep(ms(200)).await;
    assert_eq!(
        server.command_calls("evalsha") + server.command_calls("eval"),
        calls
    );
    let keys = strings(&server.cmd(&["KEYS", "*"]));
    assert!(keys.is_empty(), "{keys:?}");
}

/// A client whose last fair acquire had to wait subscribes before it asks next time (under
/// contention that first ask would only find the lock taken), and goes back to asking first
/// once an ask finds the lock free: after contention ends, one acquire pays a subscription,
/// the next ones none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_contention_one_acquire_subscribes_first_and_the_next_ask_first() {
    let name = "was-contended";
    let server = RedisServer::start();
    let (holder, c) = (client(&server).await, client(&server).await);
    let guard = holder.fair_lock(name).lock().await.unwrap();
    // What the client learnt of the lock lives as long as one of its handles of it does.
    let lock = c.fair_lock(name);
    let log = Log::default();
    let waiter = spawn_turn(lock.clone(), 0, Duration::ZERO, log.clone());
    await_queue_len(&server, name, 1).await;
    guard.unlock().await.unwrap();
    finish(waiter, SETTLE).await;
    common::lost_notices_subscribed(&server, &c).await;
    eventually("the waiter's channel is gone", SETTLE, || {
        wake_channels(&server, name).is_empty()
    })
    .await;

    let contended = c.stats().contended_waits;
    server.cmd(&["CONFIG", "RESETSTAT"]);
    for _ in 0..4 {
        lock.lock()
            .await
            .expect("lock")
            .unlock()
            .await
            .expect("unlock");
    }
    let run = common::operation_stats(&server);
    assert_eq!(run.get("subscribe"), Some(&1), "{run:?}");
    assert_eq!(run.get("evalsha"), Some(&8), "two scripts a cycle: {run:?}");
    // Subscribing first is not waiting: none of these found the lock taken.
    assert_eq!(c.stats().contended_waits, contended);
}

/// A call that subscribes before it asks (its client's last acquire had to wait) still asks
/// Redis at least once: a `try_lock_for` shorter than its subscription takes a free lock,
/// where it would otherwise give up without asking (300 ms each way through a proxy, a
/// 100 ms wait).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_shorter_than_its_subscription_still_asks_once() {
    let name = "asks-once";
    let server = RedisServer::start();
    let proxy = ChaosProxy::start(&server);
    let holder = client(&server).await;
    let c = Client::connect(proxy.url()).await.unwrap();
    let lock = c.fair_lock(name);
    let guard = holder.fair_lock(name).lock().await.unwrap();
    let waiter = spawn_turn(lock.clone(), 0, Duration::ZERO, Log::default());
    await_queue_len(&server, name, 1).await;
    guard.unlock().await.unwrap();
    finish(waiter, SETTLE).await;

    proxy.set_latency(ms(300));
    let taken = lock
        .try_lock_for(ms(100))
        .await
        .unwrap()
        .expect("a free lock is taken even when the wait ends before the subscription");
    proxy.set_latency(Duration::ZERO);
    taken.unlock().await.unwrap();
    assert_nobody_waits(&server, name).await;
}

/// With nobody queued, a fair `lock` + `unlock` leaves the queue alone: no clock read, no
/// tidying, no place to leave and nobody to wake, so the cycle runs what the plain lock's does
/// (`lock_hot_path`): the acquire's one `EXISTS` covers the queue's keys with the attempt
/// record and the lock, and the release adds one `EXISTS` of the queue's keys, where the
/// plain lock's hash says whether anyone waits. The crate documents these counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncontended_cycle_leaves_the_queue_alone() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock = c.fair_lock("lean-fair");
    // Warm up: the scripts are loaded, and the lost-notice channel, which the watchdog
    // subscribes in the background once it has a hold, is subscribed before counting.
    let warm = lock.lock().await.expect("lock");
    common::lost_notices_subscribed(&server, &c).await;
    warm.unlock().await.expect("unlock");
    server.cmd(&["CONFIG", "RESETSTAT"]);
    for _ in 0..10 {
        lock.lock()
            .await
            .expect("lock")
            .unlock()
            .await
            .expect("unlock");
    }
    let run = common::operation_stats(&server);
    let expected = common::command_counts(&[
        ("evalsha", 20),
        ("exists", 20),
        ("incr", 10),
        ("hset", 10),
        ("pexpire", 10),
        ("hmget", 10),
        ("del", 10),
    ]);
    assert_eq!(run, expected, "commands run by 10 uncontended fair cycles");
    let keys = fair_keys("lean-fair");
    assert!(!exists(&server, &keys.queue) && !exists(&server, &keys.deadlines));
    assert_eq!(
        strings(&server.cmd(&["KEYS", &keys::all("lean-fair")])),
        vec![keys.fence]
    );
}
