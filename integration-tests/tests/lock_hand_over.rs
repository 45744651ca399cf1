//! Hand-overs in the wake-up (`lua/lock_hand_over_prelude.lua`): the release that frees the
//! plain lock grants it to the task that waited for it, and says so in the wake-up, so that
//! the woken task holds the lock without asking Redis. Asserted as structure (requests run,
//! tokens given, who holds the lock), and for designees that cannot take what they were
//! handed (dead, stopped, cancelled, or reading their wake-up too late): the lock then goes on
//! within the hand-over's short lease at the most, never later.

mod common;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{client, eventually, int, keys, lock_key, ms, text, wake_channel};
use redisync::prelude::*;
use redisync_test_harness::RedisServer;

const SETTLE: Duration = Duration::from_secs(10);

/// One of the plain lock's scripts, `lua/<file>`, with the preludes it is sent with.
macro_rules! lock_script {
    ($file:literal) => {
        redis::Script::new(concat!(
            include_str!("../../lua/publish_prelude.lua"),
            include_str!("../../lua/clock_prelude.lua"),
            include_str!("../../lua/lock_prelude.lua"),
            include_str!("../../lua/wake_prelude.lua"),
            include_str!("../../lua/lock_hand_over_prelude.lua"),
            include_str!(concat!("../../lua/", $file))
        ))
    };
}

/// The lease a hand-over grants until the designee's watchdog lengthens it (the lock
/// crate's `HAND_OVER_LEASE`: a waiting client's re-check period).
const HAND_OVER_LEASE: Duration = Duration::from_secs(1);

fn offers_key(name: &str) -> String {
    keys::lock(name).offers
}

/// Whether `client` offered to take lock `name` in its wake-up.
fn offered(server: &RedisServer, name: &str, client: &Client) -> bool {
    int(
        server,
        &["HEXISTS", &offers_key(name), &wake_channel(name, client)],
    ) == 1
}

/// Loads the lock's scripts into `server` with an uncontended cycle, so that counted scripts
/// are not counted twice for a `NOSCRIPT` answer.
async fn load_scripts(server: &RedisServer) {
    common::lock_cycle(&client(server).await, "warm-up").await;
}

/// Scripts Redis ran since the last `CONFIG RESETSTAT`.
fn scripts_run(server: &RedisServer) -> u64 {
    common::operation_stats(server)
        .get("evalsha")
        .copied()
        .unwrap_or(0)
}

/// The waiting task got lock `name` (`handed`) by an acquire that took the hand-over over:
/// two scripts ran since the counts were reset (the release, then that acquire), the lock has
/// one hold, and one release frees it.
async fn assert_taken_over(server: &RedisServer, name: &str, handed: LockGuard) {
    assert_eq!(
        scripts_run(server),
        2,
        "the release, then the acquire that took the hand-over over"
    );
    assert_eq!(text(&server.cmd(&["HGET", &lock_key(name), "count"])), "1");
    handed.unlock().await.unwrap();
    assert!(
        !common::exists(server, &lock_key(name)),
        "one release frees the lock: no hold was left behind"
    );
}

/// A task waiting for a lock, with its owner id; the task ends with its guard and when it got
/// it.
type WaitingTask = (
    String,
    tokio::task::JoinHandle<(Result<LockGuard>, Instant)>,
);

/// Spawns a task of `client` waiting for lock `name`, and waits until it has offered to take
/// the lock in its wake-up.
async fn spawn_offering(server: &RedisServer, name: &str, client: &Client) -> WaitingTask {
    let lock = client.lock(name);
    let owner = lock.owner_id().to_owned();
    let task = tokio::spawn(async move { (lock.lock().await, Instant::now()) });
    eventually("the waiting task offered", SETTLE, || {
        offered(server, name, client)
    })
    .await;
    (owner, task)
}

/// The guard `task` ended with, once it ends (within `within`), and when it got it.
async fn guard_of(task: WaitingTask, within: Duration) -> (LockGuard, Instant) {
    let (guard, at) = tokio::time::timeout(within, task.1)
        .await
        .expect("the waiting task gets the lock")
        .unwrap();
    (guard.unwrap(), at)
}

/// A Redis with the lock's scripts loaded, a client holding lock `name` on it, the hold, and
/// another client with a task waiting for the lock that has offered to take it in its
/// wake-up. The waiting client's watchdog has had a hold before, and sleeps until its next
/// round: a hand-over's hold must wake it earlier.
async fn a_task_offering(name: &str) -> (RedisServer, Client, LockGuard, Client, WaitingTask) {
    let server = RedisServer::start();
    load_scripts(&server).await;
    let holder = client(&server).await;
    let waiting = client(&server).await;
    let earlier = waiting.lock("earlier").lock().await.unwrap();
    common::lost_notices_subscribed(&server, &waiting).await;
    earlier.unlock().await.unwrap();
    let guard = holder.lock(name).lock().await.unwrap();
    common::lost_notices_subscribed(&server, &holder).await;
    let task = spawn_offering(&server, name, &waiting).await;
    (server, holder, guard, waiting, task)
}

fn holder_of(server: &RedisServer, name: &str) -> String {
    text(&server.cmd(&["HGET", &lock_key(name), "owner"]))
}

/// A holder of lock `name` in a runtime of its own, on its own thread, so that the test's
/// runtime can be held up while the holder releases. Returns the token of its hold, a sender
/// that makes it release, and a receiver told when the release is over.
fn holder_on_its_own_thread(
    url: String,
    name: &'static str,
) -> (u64, mpsc::Sender<()>, mpsc::Receiver<()>) {
    let (held_tx, held_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let (released_tx, released_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let holder = Client::connect(url).await.unwrap();
            let guard = holder.lock(name).lock().await.unwrap();
            held_tx.send(guard.fencing_token()).unwrap();
            let _ = tokio::task::spawn_blocking(move || release_rx.recv())
                .await
                .unwrap();
            guard.unlock().await.unwrap();
            released_tx.send(()).unwrap();
        });
    });
    let token = held_rx
        .recv_timeout(SETTLE)
        .expect("the holder takes the lock");
    (token, release_tx, released_rx)
}

/// The designee holds the lock as soon as its wake-up arrives: after the release, Redis runs
/// no script for it, its guard has the next fencing token, and its watchdog lengthens the
/// hand-over's short lease before it runs out.
#[tokio::test]
async fn a_release_hands_the_lock_to_the_waiting_task_in_its_wake_up() {
    let name = "handed";
    let (server, holder, guard, waiting, task) = a_task_offering(name).await;
    let owner = task.0.clone();
    let released_token = guard.fencing_token();
    server.cmd(&["CONFIG", "RESETSTAT"]);
    guard.unlock().await.unwrap();
    let (handed, _) = guard_of(task, SETTLE).await;
    assert_eq!(scripts_run(&server), 1, "only the release ran a script");
    assert_eq!(handed.fencing_token(), released_token + 1);
    assert!(!offered(&server, name, &waiting), "the offer was taken");

    // Past the hand-over's lease: the watchdog lengthened it to its own.
    tokio::time::sleep(HAND_OVER_LEASE + ms(500)).await;
    assert!(!handed.is_lost());
    assert_eq!(holder_of(&server, name), owner);
    let left = int(&server, &["PTTL", &lock_key(name)]);
    assert!(left > 5_000, "the lease is the watchdog's, {left} ms left");
    handed.unlock().await.unwrap();
    assert!(!common::exists(&server, &lock_key(name)));
    eventually("both clients are idle", SETTLE, || {
        holder.local_state() == redisync::LocalState::default()
            && waiting.local_state() == redisync::LocalState::default()
    })
    .await;
}

/// A designee that reads its wake-up too late to be sure of the hand-over's lease (its
/// runtime was held up) does not take the hold from the message: it asks, and its acquire
/// takes over the hold handed to it (the same token, one hold, not a re-entry on top of it),
/// which frees the lock with one release.
#[tokio::test]
async fn a_hand_over_read_too_late_is_taken_over_by_an_acquire() {
    let name = "late";
    let server = RedisServer::start();
    load_scripts(&server).await;
    let (released_token, release, released) = holder_on_its_own_thread(server.url(), name);
    let waiting = client(&server).await;
    let task = spawn_offering(&server, name, &waiting).await;
    server.cmd(&["CONFIG", "RESETSTAT"]);
    release.send(()).unwrap();
    // This runtime, where the waiting client reads its wake-up, is held up until less of the
    // hand-over's lease is surely left than a claim from the message needs.
    std::thread::sleep(ms(900));
    released
        .recv_timeout(SETTLE)
        .expect("the holder released meanwhile");
    let (handed, _) = guard_of(task, SETTLE).await;
    assert_eq!(
        handed.fencing_token(),
        released_token + 1,
        "the hold handed over, not a new grant"
    );
    assert_taken_over(&server, name, handed).await;
}

/// A designee whose task is cancelled after the lock was handed to it, before it read its
/// wake-up, gives the hold back with its client's withdrawal: the next waiting client gets
/// the lock before the hand-over's lease would have run out by itself.
#[tokio::test]
async fn a_hand_over_to_a_cancelled_task_is_given_back_at_once() {
    let name = "cancelled";
    let server = RedisServer::start();
    let (_, release, released) = holder_on_its_own_thread(server.url(), name);
    let designee = client(&server).await;
    let next = client(&server).await;
    let (owner, designee_task) = spawn_offering(&server, name, &designee).await;
    let next_task = spawn_offering(&server, name, &next).await;
    release.send(()).unwrap();
    // Held up until the hand-over is in Redis, then cancelled before it runs again.
    released.recv_timeout(SETTLE).expect("the holder released");
    let handed_at = Instant::now();
    assert_eq!(holder_of(&server, name), owner);
    designee_task.abort();
    let (_guard, acquired_at) = guard_of(next_task, SETTLE).await;
    let waited = acquired_at.duration_since(handed_at);
    assert!(
        waited < HAND_OVER_LEASE - ms(100),
        "the next client waited {waited:?}, as if the hold had to run out"
    );
    eventually("the designee's client is idle", SETTLE, || {
        designee.local_state() == redisync::LocalState::default()
    })
    .await;
}

/// A client registered with an offer that nobody hears any more (its connections are gone)
/// is handed the lock all the same, and keeps it only for the hand-over's lease: a grant is
/// never undone because `PUBLISH` counted no listener (see
/// `a_hand_over_heard_only_on_a_replica_stands`). The next client gets the lock once that
/// lease runs out, no later than a re-check after, with the token after the ghost's, and the
/// ghost's hold leaves nothing behind.
#[tokio::test]
async fn a_hand_over_nobody_hears_holds_the_lock_no_longer_than_the_hand_over_lease() {
    let name = "deaf";
    let server = RedisServer::start();
    let (released_token, task, handed_at) =
        released_to_a_ghost(&server, name, &keys::lock(name).wake_channels.of("gone")).await;
    let owner = task.0.clone();
    assert_eq!(holder_of(&server, name), "ghost:1", "handed to the ghost");
    let (handed, acquired_at) = guard_of(task, SETTLE).await;
    assert_next_within_the_hand_over_lease(acquired_at.duration_since(handed_at));
    assert_eq!(handed.fencing_token(), released_token + 2);
    assert_eq!(holder_of(&server, name), owner);
    let fields = common::strings(&server.cmd(&["HKEYS", &lock_key(name)]));
    assert!(
        !fields.contains(&"a:ghost:2".to_owned()),
        "the ghost's hold is still there: {fields:?}"
    );
    handed.unlock().await.unwrap();
}

/// A hand-over whose wake-up only a subscriber on a replica hears stands: `PUBLISH` on the
/// primary counts none of the replica's subscribers, yet the replica delivers the message
/// (as a cluster shard delivers it on every node of the shard, where a client's subscription
/// may sit on a demoted primary after a failover). Undoing such a grant would hand the lock
/// to the next client while the designee takes the hold from its wake-up: two holders (as
/// `contended_locking_through_a_graceful_failover` in cluster_faults would see).
#[tokio::test]
async fn a_hand_over_heard_only_on_a_replica_stands() {
    let name = "replica-heard";
    let (primary, replica) = common::primary_and_replica().await;
    // The designee's subscription sits on the replica.
    let designee = &keys::lock(name).wake_channels.of("on-replica");
    let mut listener = redis::Client::open(replica.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let mut listener = listener.as_pubsub();
    listener.subscribe(designee).unwrap();
    listener.set_read_timeout(Some(SETTLE)).unwrap();
    let (released_token, task, handed_at) = released_to_a_ghost(&primary, name, designee).await;
    let heard: String = listener
        .get_message()
        .expect("the replica delivers the wake-up")
        .get_payload()
        .unwrap();
    assert_eq!(heard, format!("g ghost:2 {}", released_token + 1));
    assert_eq!(
        holder_of(&primary, name),
        "ghost:1",
        "the hand-over the designee heard stands"
    );
    assert_eq!(
        text(&primary.cmd(&["HGET", &lock_key(name), "a:ghost:2"])),
        "h"
    );
    let (guard, acquired_at) = guard_of(task, SETTLE).await;
    assert_next_within_the_hand_over_lease(acquired_at.duration_since(handed_at));
    assert_eq!(guard.fencing_token(), released_token + 2);
    guard.unlock().await.unwrap();
}

/// A hand-over whose wake-up Redis refuses is taken back in the same script: a refused
/// `PUBLISH` ran nowhere (a replica never sees it), so nobody can hold what it granted. The
/// releasing client here waits by polling, as an ACL user without channel rights, next to a
/// client that subscribes (DEPLOYMENT.md allows the mix); the lock is then free at once, for
/// whichever waiter checks first, instead of standing reserved for a designee that cannot
/// have heard.
#[tokio::test]
async fn a_hand_over_whose_wake_up_redis_refuses_is_taken_back() {
    let name = "refused";
    let server = RedisServer::start();
    load_scripts(&server).await;
    server.cmd(&[
        "ACL",
        "SETUSER",
        "poller",
        "on",
        ">s3cret",
        "~*",
        "resetchannels",
        "+@all",
    ]);
    let url = format!("redis://poller:s3cret@127.0.0.1:{}/", server.port());
    let polling = Client::builder(url)
        .wait_strategy(WaitStrategy::Poll { interval: ms(50) })
        .build()
        .await
        .unwrap();
    let guard = polling.lock(name).lock().await.unwrap();
    let subscribing = client(&server).await;
    let task = spawn_offering(&server, name, &subscribing).await;
    guard.unlock().await.unwrap();
    assert_eq!(
        common::handed_over_holds(&server, name),
        0,
        "a hand-over stands whose wake-up Redis refused"
    );
    let log = format!("{:?}", server.cmd(&["ACL", "LOG"]));
    assert!(log.contains("lua"), "no publish was refused: {log}");
    let (handed, _) = guard_of(task, SETTLE).await;
    handed.unlock().await.unwrap();
}

/// The next client got the lock `waited` after it was handed to a designee that never took
/// it: once the hand-over's lease ran out, and no later than a re-check after, the bound a
/// swallowed wake-up has without hand-overs.
fn assert_next_within_the_hand_over_lease(waited: Duration) {
    assert!(
        waited < HAND_OVER_LEASE * 2 + ms(500),
        "the next client waited {waited:?}"
    );
}

/// A client that hears its wake-up but cannot act (stopped) is handed the lock all the same,
/// and keeps it only for the hand-over's lease: the next client gets it once that runs out,
/// no later than a re-check after, which is the bound a swallowed wake-up has without
/// hand-overs.
#[tokio::test]
async fn a_stopped_designee_holds_the_lock_no_longer_than_the_hand_over_lease() {
    let name = "stopped";
    let server = RedisServer::start();
    // A subscriber that reads nothing: a stopped client's connection.
    let ghost = &keys::lock(name).wake_channels.of("stopped");
    let listener = redis::Client::open(server.url()).unwrap();
    let mut stopped = listener.get_connection().unwrap();
    let mut stopped = stopped.as_pubsub();
    stopped.subscribe(ghost).unwrap();
    let (_, task, handed_at) = released_to_a_ghost(&server, name, ghost).await;
    assert_eq!(
        holder_of(&server, name),
        "ghost:1",
        "handed to the stopped client"
    );
    let (guard, acquired_at) = guard_of(task, SETTLE).await;
    guard.unlock().await.unwrap();
    assert_next_within_the_hand_over_lease(acquired_at.duration_since(handed_at));
}

/// Lock `name` on `server`, held by a client on its own thread, released once a task of
/// another client waits for it (and has offered) with a made-up client listening on `ghost`
/// registered ahead of it (see [`register_ghost`]). Returns the released hold's token, the
/// waiting task, and when the release was over.
async fn released_to_a_ghost(
    server: &RedisServer,
    name: &'static str,
    ghost: &str,
) -> (u64, WaitingTask, Instant) {
    let (released_token, release, released) = holder_on_its_own_thread(server.url(), name);
    let next = client(server).await;
    let task = spawn_offering(server, name, &next).await;
    register_ghost(server, name, ghost);
    release.send(()).unwrap();
    released.recv_timeout(SETTLE).expect("the holder released");
    (released_token, task, Instant::now())
}

/// Registers a made-up client at the head of lock `name`'s waiting clients, listening on
/// `channel`, with a fresh offer for its task `ghost:1` (attempt `ghost:2`, a hand-over lease
/// of 1 s, standing for 1.5 s).
fn register_ghost(server: &RedisServer, name: &str, channel: &str) {
    let time = common::strings(&server.cmd(&["TIME"]));
    let now_ms: u64 =
        time[0].parse::<u64>().unwrap() * 1000 + time[1].parse::<u64>().unwrap() / 1000;
    let waiters = keys::lock(name).waiters;
    server.cmd(&["ZADD", &waiters, "1", channel]);
    server.cmd(&[
        "HSET",
        &offers_key(name),
        channel,
        &format!("ghost:1 ghost:2 1000 1500 {now_ms}"),
    ]);
}

/// A `try_lock` of a client whose task waits for the lock, made while the lock is taken,
/// leaves the task's offer as it was: the release hands the lock to the task, which takes it
/// from its wake-up (no request of its own), and one release frees it.
#[tokio::test]
async fn a_try_lock_of_a_waiting_client_leaves_the_offer_to_its_task() {
    let name = "tried";
    let (server, _holder, guard, waiting, task) = a_task_offering(name).await;
    assert!(waiting.lock(name).try_lock().await.unwrap().is_none());
    server.cmd(&["CONFIG", "RESETSTAT"]);
    guard.unlock().await.unwrap();
    let (handed, _) = guard_of(task, SETTLE).await;
    assert_eq!(scripts_run(&server), 1, "only the release ran a script");
    assert_eq!(text(&server.cmd(&["HGET", &lock_key(name), "count"])), "1");
    handed.unlock().await.unwrap();
    assert!(!common::exists(&server, &lock_key(name)));
}

/// A hand-over belongs to the wait it was made for: another handle of the same client that
/// keeps calling `try_lock` while the lock is handed to a waiting task never gets it (as
/// tokio's `Mutex::try_lock` fails while the mutex is handed to a waiter). The waiting
/// client's connections are slow, so that `try_lock`s are on their way to Redis while the
/// wake-up is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_try_lock_never_takes_a_lock_handed_to_a_waiting_task() {
    let name = "handed-to-a-waiter";
    let server = RedisServer::start();
    let proxy = redisync_test_harness::ChaosProxy::start(&server);
    let holder = client(&server).await;
    let waiting = Client::connect(proxy.url()).await.unwrap();
    for round in 0..5 {
        let guard = holder.lock(name).lock().await.unwrap();
        proxy.set_latency(ms(0));
        let task = spawn_offering(&server, name, &waiting).await;
        proxy.set_latency(ms(50));
        let barging = waiting.lock(name);
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let tries = tokio::spawn({
            let stop = stop.clone();
            async move {
                let mut taken = Vec::new();
                while !stop.load(std::sync::atomic::Ordering::Acquire) {
                    if let Some(barged) = barging.try_lock().await.unwrap() {
                        taken.push(barged.fencing_token());
                    }
                }
                taken
            }
        });
        // A few try_locks are on their way when the release hands the lock over.
        tokio::time::sleep(ms(120)).await;
        guard.unlock().await.unwrap();
        let (handed, _) = guard_of(task, SETTLE).await;
        stop.store(true, std::sync::atomic::Ordering::Release);
        let taken = tries.await.unwrap();
        assert!(
            taken.is_empty(),
            "round {round}: try_lock took the lock handed to the waiting task \
             (tokens {taken:?}, the task's {})",
            handed.fencing_token()
        );
        proxy.set_latency(ms(0));
        handed.unlock().await.unwrap();
    }
}

/// What an acquire that names earlier offers may take (`take_over` in
/// `lua/lock_hand_over_prelude.lua`), run on the script itself: only a hold handed over in a
/// wake-up (`h`), never one an attempt got by its own request; and only while it is the
/// lock's one hold (one its owner re-entered is given back, the other hold standing).
#[tokio::test]
async fn an_acquire_takes_over_only_a_hand_over_that_is_the_locks_one_hold() {
    let server = RedisServer::start();
    let acquire = lock_script!("lock_acquire.lua");
    let over = keys::lock("over");
    let hash = over.hash.as_str();
    let mut conn = server.connection();
    // A grant answers with its token alone (an integer); busy with a table (common::is_busy).
    let mut ask = |attempt: &str| -> redis::Value {
        acquire
            .key(hash)
            .key(&over.fence)
            .key(over.attempt_records.of(attempt))
            .key(&over.waiters)
            .key(&over.offers)
            .arg("other")
            .arg(30_000)
            .arg(attempt)
            .arg(over.wake_channels.of("other"))
            .arg(0)
            .arg("0")
            .arg("0")
            .arg("mine")
            .invoke(&mut conn)
            .unwrap()
    };
    let hold = |fields: &[&str]| {
        server.cmd(&["DEL", hash]);
        let mut args = vec!["HSET", hash, "owner", "holder", "token", "7"];
        args.extend(fields);
        server.cmd(&args);
        server.cmd(&["PEXPIRE", hash, "30000"]);
    };
    let field = |name: &str| match server.cmd(&["HGET", hash, name]) {
        redis::Value::Nil => String::new(),
        value => text(&value),
    };

    // Granted by its own request: not taken.
    hold(&["count", "1", "a:mine", "1"]);
    assert!(common::is_busy(&ask("z1")), "busy");
    assert_eq!(
        (field("owner"), field("a:mine")),
        ("holder".into(), "1".into())
    );

    // Handed over, the lock's one hold: taken over, with its token.
    hold(&["count", "1", "a:mine", "h"]);
    assert_eq!(ask("z2"), redis::Value::Int(7));
    assert_eq!(
        (field("owner"), field("count")),
        ("other".into(), "1".into())
    );
    assert_eq!(
        (field("a:z2"), field("a:mine")),
        ("1".into(), String::new())
    );

    // An acquire of its own owner that names the offer (the owner's next waiting head,
    // once the task that offered is gone) takes it over too, rather than re-entering it.
    hold(&["count", "1", "a:mine", "h"]);
    server.cmd(&["HSET", hash, "owner", "other"]);
    assert_eq!(ask("z4"), redis::Value::Int(7));
    assert_eq!(
        (field("count"), field("a:mine")),
        ("1".into(), String::new())
    );

    // Handed over and re-entered by its owner since: given back, the re-entry stands.
    hold(&["count", "2", "a:mine", "h", "a:again", "1"]);
    assert!(
        common::is_busy(&ask("z3")),
        "busy: the owner's other hold stands"
    );
    assert_eq!(
        (field("owner"), field("count")),
        ("holder".into(), "1".into())
    );
    assert_eq!(
        (field("a:again"), field("a:mine")),
        ("1".into(), String::new())
    );
}

/// The withdrawal gives back only a hold handed over in a wake-up (`h`), never one that an
/// offering attempt got by its own request: that attempt may have been granted while the
/// withdrawal was decided, and its guard holds the lock (a withdrawal freeing such a hold
/// would let another client in while the guard's owner still believes it holds).
#[tokio::test]
async fn a_withdrawal_gives_back_only_a_hand_over() {
    let server = RedisServer::start();
    let withdraw = lock_script!("lock_withdraw.lua");
    let gone = keys::lock("gone");
    let hash = gone.hash.as_str();
    let mut conn = server.connection();
    let mut withdraw = |offered: &str| -> i64 {
        withdraw
            .key(hash)
            .key(&gone.waiters)
            .key(&gone.offers)
            .key(&gone.fence)
            .arg(gone.wake_channels.of("me"))
            .arg(offered)
            .invoke(&mut conn)
            .unwrap()
    };
    for (value, given_back) in [("1", false), ("h", true)] {
        server.cmd(&["DEL", hash]);
        server.cmd(&[
            "HSET", hash, "owner", "me:1", "count", "1", "token", "3", "a:n1", value,
        ]);
        server.cmd(&["PEXPIRE", hash, "30000"]);
        assert_eq!(withdraw("a1 n1"), 0);
        assert_eq!(
            common::exists(&server, hash),
            !given_back,
            "a hold marked {value:?}"
        );
    }
}

/// Clients take turns in the order they registered whatever the hold length: one client
/// holding 700 ms and asking again at once, two holding 50 ms, for about 10 s. A waiting
/// client re-asks only once per re-check period while the long hold lasts; its offer must
/// still stand when the release comes, and the long holder, asking again at once, must not
/// get in ahead of the clients that waited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_take_turns_whatever_the_hold_length() {
    take_turns("turns", None).await;
}

/// The same with fixed leases: the release keeps the lock for the client that waited
/// longest, whose task takes it over with its own lease, so the long holder's first try
/// finds it taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_with_fixed_leases_take_turns_whatever_the_hold_length() {
    take_turns("fixed-turns", Some(Duration::from_secs(30))).await;
}

/// Three clients on lock `name` (holding 700, 50 and 50 ms, with `lease` or the watchdog's)
/// for about 10 s: each gets the same number of turns, ±1.
async fn take_turns(name: &'static str, lease: Option<Duration>) {
    let server = RedisServer::start();
    load_scripts(&server).await;
    let stop_at = Instant::now() + Duration::from_secs(10);
    let mut tasks = Vec::new();
    for hold in [ms(700), ms(50), ms(50)] {
        let client = client(&server).await;
        tasks.push(tokio::spawn(async move {
            let lock = client.lock(name);
            let mut turns = 0u32;
            while Instant::now() < stop_at {
                let guard = match lease {
                    Some(lease) => lock.lock_with_lease(lease).await.unwrap(),
                    None => lock.lock().await.unwrap(),
                };
                turns += 1;
                tokio::time::sleep(hold).await;
                guard.unlock().await.unwrap();
            }
            client.shutdown().await;
            turns
        }));
    }
    let turns = common::join_all(tasks).await;
    let (least, most) = (turns.iter().min(), turns.iter().max());
    assert!(
        most.zip(least)
            .is_some_and(|(most, least)| most - least <= 1),
        "turns per client (700 ms, 50 ms, 50 ms holds): {turns:?}"
    );
}

/// How long the tests below keep a connection of the designee's client stalled: longer than
/// the hand-over lease, shorter than the command timeout.
const STALL: Duration = Duration::from_secs(3);

/// A Redis with the lock's scripts loaded, a chaos proxy in front of it, a client holding
/// lock `name` (straight to Redis), and a client with every option at its default (the
/// watchdog's 30 s lease, the 5 s command timeout) connected through the proxy, with a task
/// waiting for the lock that has offered to take it in its wake-up.
async fn offering_through_a_proxy(
    name: &str,
) -> (
    RedisServer,
    redisync_test_harness::ChaosProxy,
    LockGuard,
    Client,
    WaitingTask,
) {
    let server = RedisServer::start();
    load_scripts(&server).await;
    let proxy = redisync_test_harness::ChaosProxy::start(&server);
    let holder = client(&server).await;
    let waiting = Client::connect(proxy.url()).await.unwrap();
    let guard = holder.lock(name).lock().await.unwrap();
    let task = spawn_offering(&server, name, &waiting).await;
    (server, proxy, guard, waiting, task)
}

/// The designee's hold after a stall of `STALL`: still its own, and its lease lengthened to
/// the watchdog's, which the stall did not hold up.
async fn assert_kept_through_the_stall(
    server: &RedisServer,
    proxy: &redisync_test_harness::ChaosProxy,
    name: &str,
    owner: &str,
    handed: LockGuard,
) {
    let lost = tokio::time::timeout(STALL, handed.lost()).await;
    assert!(
        lost.is_err(),
        "the hand-over was lost while a connection stalled"
    );
    assert_eq!(proxy.stalled(), 1, "the request was caught by the stall");
    assert!(!handed.is_lost());
    assert_eq!(holder_of(server, name), owner);
    let left = int(server, &["PTTL", &lock_key(name)]);
    assert!(left > 20_000, "the lease is the watchdog's, {left} ms left");
    proxy.unstall();
    handed.unlock().await.unwrap();
    assert!(!common::exists(server, &lock_key(name)));
}

/// The early renewal that lengthens a hand-over's short lease goes out on a connection that
/// stalls (no error, no answer): it is sent again on another connection soon enough for the
/// short lease, not after the half renewal period (5 s with the defaults) that an ordinary
/// round waits before it sends again, and the designee keeps the lock as an acquire's hold
/// would be kept.
#[tokio::test]
async fn a_hand_over_survives_a_stalled_connection_under_its_early_renewal() {
    let name = "stalled-early";
    let (server, proxy, guard, _waiting, task) = offering_through_a_proxy(name).await;
    let owner = task.0.clone();
    server.cmd(&["CONFIG", "RESETSTAT"]);
    guard.unlock().await.unwrap();
    let (handed, _) = guard_of(task, SETTLE).await;
    assert_eq!(scripts_run(&server), 1, "handed over: only the release ran");
    // The designee's client sends nothing naming the lock until its early renewal.
    proxy.stall_on(&format!("{{{name}}}"));
    assert_kept_through_the_stall(&server, &proxy, name, &owner, handed).await;
}

/// A renewal round is stuck on a stalled connection when a hand-over arrives: the early
/// renewal of the hand-over's short lease does not wait behind that round.
#[tokio::test]
async fn a_hand_over_survives_a_renewal_round_stuck_on_a_stalled_connection() {
    let name = "stalled-round";
    let (server, proxy, guard, waiting, task) = offering_through_a_proxy(name).await;
    let owner = task.0.clone();
    let other = waiting.lock("stalled-round-other").lock().await.unwrap();
    common::lost_notices_subscribed(&server, &waiting).await;
    // Taking the other hold from the designee's client tells it at once: its watchdog runs a
    // round, which goes out on the connection the stall catches.
    proxy.stall_on("{stalled-round-other}");
    assert!(client(&server)
        .await
        .lock("stalled-round-other")
        .force_unlock()
        .await
        .unwrap());
    eventually("the round is stuck", SETTLE, || proxy.stalled() == 1).await;
    server.cmd(&["CONFIG", "RESETSTAT"]);
    guard.unlock().await.unwrap();
    let (handed, _) = guard_of(task, SETTLE).await;
    assert_eq!(scripts_run(&server), 1, "handed over: only the release ran");
    assert_kept_through_the_stall(&server, &proxy, name, &owner, handed).await;
    drop(other);
}
