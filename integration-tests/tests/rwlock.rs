//! ReadWriteLock behaviour against a real redis-server: shared reads across clients, writers
//! excluding everyone, writer preference, wake-ups, downgrade, refused upgrades, leases and the
//! watchdog, a mixed stress run with an exact counter, cancellation, and the admin calls.
//!
//! Every test starts its own server, so the tests run in parallel. Waits are for events
//! (`wait_until` on server or client state); the time bounds are generous, for a small, loaded
//! machine.

mod common;

use redisync::core::toolkit::Toolkit;
use std::collections::HashMap;
use std::fmt::Display;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{
    assert_idle, client, client_with_watchdog, cut_after, cut_at_await, eventually, exists, int,
    join_all, ms, rw_hash_key, rw_readers_key, rw_writers_key, text, zcard,
};
use redis::Value;
use redisync::prelude::*;
use redisync::LocalState;
use redisync_test_harness::RedisServer;
use tokio::task::JoinHandle;

/// How long a condition that should hold "soon" may take before the test fails.
const SETTLE: Duration = Duration::from_secs(10);

/// A waiting writer's mark lasts three seconds unless renewed (three periods of one second). A
/// mark that a cancelled or departed writer left behind would therefore be seen for about that
/// long; anything that must happen "at once" after a writer leaves is checked well within it.
const WELL_WITHIN_A_MARK: Duration = Duration::from_millis(1500);

// ---------------------------------------------------------------------------------------------
// The lock's Redis names under the default prefix, and server-side inspection.

fn fence_key(name: &str) -> String {
    common::keys::rw(name).fence
}

fn channel(name: &str) -> String {
    common::keys::rw(name).channel
}

fn pttl(server: &RedisServer, key: &str) -> i64 {
    int(server, &["PTTL", key])
}

fn fields(server: &RedisServer, name: &str) -> HashMap<String, String> {
    let value = server.cmd(&["HGETALL", &rw_hash_key(name)]);
    redis::from_redis_value_ref::<HashMap<String, String>>(&value)
        .unwrap_or_else(|e| panic!("HGETALL: unexpected reply {value:?}: {e}"))
}

fn field(server: &RedisServer, name: &str, field: &str) -> Option<String> {
    fields(server, name).remove(field)
}

fn read_count_field(owner: &ReadWriteLock) -> String {
    format!("r:{}", owner.owner_id())
}

/// Neither holds nor waiting-writer marks exist any more (the fence may stay).
fn lock_is_gone(server: &RedisServer, name: &str) -> bool {
    !exists(server, &rw_hash_key(name))
        && !exists(server, &rw_readers_key(name))
        && !exists(server, &rw_writers_key(name))
}

// ---------------------------------------------------------------------------------------------
// 1. Readers share.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_on_three_clients_hold_at_once() {
    let server = RedisServer::start();
    let name = "three-readers";
    let clients = [
        client(&server).await,
        client(&server).await,
        client(&server).await,
    ];
    let locks: Vec<ReadWriteLock> = clients.iter().map(|c| c.read_write_lock(name)).collect();
    let mut guards = Vec::new();
    for lock in &locks {
        // try_read never waits: it only succeeds because readers share.
        let guard = lock
            .try_read()
            .await
            .unwrap()
            .expect("a reader gets in while others read");
        assert!(!guard.is_lost());
        guards.push(guard);
    }
    assert_eq!(zcard(&server, &rw_readers_key(name)), 3);
    let held = fields(&server, name);
    assert_eq!(held.get("mode").map(String::as_str), Some("read"));
    assert!(!held.contains_key("writer"), "{held:?}");
    for lock in &locks {
        assert_eq!(
            held.get(&read_count_field(lock)).map(String::as_str),
            Some("1")
        );
        assert!(lock.is_locked().await.unwrap());
    }
    // A reader re-enters; the count is per owner.
    let again = locks[0].try_read().await.unwrap().expect("re-entry");
    assert_eq!(
        field(&server, name, &read_count_field(&locks[0])).as_deref(),
        Some("2")
    );
    again.unlock().await.unwrap();
    assert_eq!(
        field(&server, name, &read_count_field(&locks[0])).as_deref(),
        Some("1")
    );

    // A writer is kept out, and a writer that gives up leaves no mark behind: readers do not
    // give way to a writer that left.
    let outsider = client(&server).await;
    let writer = outsider.read_write_lock(name);
    assert!(writer.try_write().await.unwrap().is_none());
    assert!(writer.try_write_for(ms(200)).await.unwrap().is_none());
    assert_eq!(
        zcard(&server, &rw_writers_key(name)),
        0,
        "try_write_for gave up but its waiting-writer mark is still there"
    );
    let late_reader = outsider.read_write_lock(name);
    let late = late_reader
        .try_read()
        .await
        .unwrap()
        .expect("a new reader gets in once the writer gave up");
    late.unlock().await.unwrap();

    for guard in guards {
        guard.unlock().await.unwrap();
    }
    assert!(!locks[0].is_locked().await.unwrap());
    assert!(lock_is_gone(&server, name));
    let w = writer.try_write().await.unwrap().expect("free");
    w.unlock().await.unwrap();
    assert_idle(&[&clients[0], &clients[1], &clients[2], &outsider]);
}

// ---------------------------------------------------------------------------------------------
// 2. A writer waits for every reader.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writer_waits_for_every_reader_and_gets_in_promptly_after_the_last() {
    let server = RedisServer::start();
    let name = "drain";
    let clients = [
        client(&server).await,
        client(&server).await,
        client(&server).await,
    ];
    let locks: Vec<ReadWriteLock> = clients.iter().map(|c| c.read_write_lock(name)).collect();
    let mut guards = Vec::new();
    for lock in &locks {
        guards.push(lock.read().await.unwrap());
    }
    let writer_client = client(&server).await;
    let writer = writer_client.read_write_lock(name);
    let task = tokio::spawn(async move {
        let guard = writer.write().await.unwrap();
        (Instant::now(), guard)
    });
    eventually("the writer waits and is marked", SETTLE, || {
        server.numsub(&channel(name)) == 1 && zcard(&server, &rw_writers_key(name)) == 1
    })
    .await;

    // Holders still re-enter while a writer waits; new readers queue behind it.
    let again = tokio::time::timeout(ms(500), locks[0].read())
        .await
        .expect("a holder re-enters at once while a writer waits")
        .unwrap();
    again.unlock().await.unwrap();
    let newcomer = clients[1].read_write_lock(name);
    assert!(
        newcomer.try_read().await.unwrap().is_none(),
        "a new reader must give way to the waiting writer"
    );

    let mut guards = guards.into_iter();
    for left in [2, 1] {
        guards.next().unwrap().unlock().await.unwrap();
        // A negative check needs a window: long enough for a wrong wake-up to land.
        tokio::time::sleep(ms(150)).await;
        assert!(
            !task.is_finished(),
            "the writer got in while {left} readers still hold"
        );
        assert_eq!(zcard(&server, &rw_readers_key(name)), left);
        assert_eq!(field(&server, name, "writer"), None);
    }
    let released_at = Instant::now();
    guards.next().unwrap().unlock().await.unwrap();
    let (acquired_at, guard) = tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("the writer gets in after the last reader left")
        .unwrap();
    let handoff = acquired_at.duration_since(released_at);
    assert!(
        handoff < ms(300),
        "the writer got in {handoff:?} after the last reader left"
    );
    assert!(guard.fencing_token() > 0);
    let held = fields(&server, name);
    assert_eq!(held.get("mode").map(String::as_str), Some("write"));
    assert_eq!(
        zcard(&server, &rw_writers_key(name)),
        0,
        "the grant removes the mark"
    );
    for lock in &locks {
        assert!(lock.try_read().await.unwrap().is_none());
    }
    guard.unlock().await.unwrap();
    assert!(lock_is_gone(&server, name));
    eventually("nobody is subscribed", SETTLE, || {
        server.numsub(&channel(name)) == 0
    })
    .await;
    assert_idle(&[&clients[0], &clients[1], &clients[2], &writer_client]);
}

// ---------------------------------------------------------------------------------------------
// 3. Writer preference against a stream of overlapping readers.

struct CyclingReaders {
    stop: Arc<AtomicBool>,
    /// Reader holds right now (counted inside the holds).
    holding: Arc<AtomicUsize>,
    /// Set by the test while it holds the write lock.
    writer_in: Arc<AtomicBool>,
    /// Completed read holds.
    cycles: Arc<AtomicU64>,
    tasks: Vec<JoinHandle<()>>,
}

/// Eight readers, each its own owner, spread over `clients`: each loops read(), hold 20-50 ms,
/// unlock, read() again at once. They start staggered, so their holds overlap and at least
/// one of them holds at almost any time.
fn cycling_readers(clients: &[Client], name: &str, prefer_writers: bool) -> CyclingReaders {
    let readers = CyclingReaders {
        stop: Arc::default(),
        holding: Arc::default(),
        writer_in: Arc::default(),
        cycles: Arc::default(),
        tasks: Vec::new(),
    };
    let tasks = (0..8u64)
        .map(|i| {
            let lock = clients[i as usize % clients.len()]
                .read_write_lock(name)
                .prefer_writers(prefer_writers);
            let (stop, holding, writer_in, cycles) = (
                readers.stop.clone(),
                readers.holding.clone(),
                readers.writer_in.clone(),
                readers.cycles.clone(),
            );
            tokio::spawn(async move {
                tokio::time::sleep(ms(i * 6)).await;
                let mut k = 0;
                while !stop.load(Ordering::SeqCst) {
                    let guard = lock.read().await.unwrap();
                    holding.fetch_add(1, Ordering::SeqCst);
                    assert!(!writer_in.load(Ordering::SeqCst), "reader with the writer");
                    tokio::time::sleep(ms(20 + (i * 7 + k * 13) % 31)).await;
                    assert!(!writer_in.load(Ordering::SeqCst), "writer with a reader");
                    holding.fetch_sub(1, Ordering::SeqCst);
                    guard.unlock().await.unwrap();
                    cycles.fetch_add(1, Ordering::SeqCst);
                    k += 1;
                }
            })
        })
        .collect();
    CyclingReaders { tasks, ..readers }
}

impl CyclingReaders {
    async fn warm_up(&self) {
        eventually("every reader cycled a couple of times", SETTLE, || {
            self.cycles.load(Ordering::SeqCst) >= 16
        })
        .await;
    }

    async fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        tokio::time::timeout(SETTLE, join_all(self.tasks))
            .await
            .expect("the readers stop");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writer_gets_in_while_eight_readers_keep_overlapping() {
    let server = RedisServer::start();
    let name = "preferred";
    let clients = [client(&server).await, client(&server).await];
    let readers = cycling_readers(&clients, name, true);
    readers.warm_up().await;

    let writer_client = client(&server).await;
    let writer = writer_client.read_write_lock(name);
    let started = Instant::now();
    let guard = tokio::time::timeout(SETTLE, writer.write())
        .await
        .expect("the writer is starved by overlapping readers")
        .unwrap();
    let waited = started.elapsed();
    readers.writer_in.store(true, Ordering::SeqCst);
    assert_eq!(readers.holding.load(Ordering::SeqCst), 0, "readers hold");
    tokio::time::sleep(ms(30)).await;
    assert_eq!(readers.holding.load(Ordering::SeqCst), 0, "readers hold");
    readers.writer_in.store(false, Ordering::SeqCst);
    guard.unlock().await.unwrap();
    println!("the writer waited {waited:?} for 8 overlapping readers");
    assert!(
        waited < Duration::from_secs(2),
        "the writer waited {waited:?} for overlapping readers"
    );

    // The readers carry on after the writer.
    let cycles = readers.cycles.load(Ordering::SeqCst);
    eventually("the readers resume after the writer", SETTLE, || {
        readers.cycles.load(Ordering::SeqCst) >= cycles + 8
    })
    .await;
    readers.stop().await;
    eventually("the lock is gone", SETTLE, || lock_is_gone(&server, name)).await;
    assert_idle(&[&clients[0], &clients[1], &writer_client]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_writer_preference_the_same_readers_keep_the_writer_out() {
    let server = RedisServer::start();
    let name = "not-preferred";
    let clients = [client(&server).await, client(&server).await];
    let readers = cycling_readers(&clients, name, false);
    readers.warm_up().await;

    let writer_client = client(&server).await;
    let writer = writer_client.read_write_lock(name);
    let cycles = readers.cycles.load(Ordering::SeqCst);
    let outcome = writer.try_write_for(Duration::from_secs(1)).await.unwrap();
    let cycled = readers.cycles.load(Ordering::SeqCst) - cycles;
    assert!(
        outcome.is_none(),
        "readers that do not give way let the writer in anyway: the stream was not continuous"
    );
    assert!(
        cycled >= 16,
        "the readers were held up ({cycled} holds in a second)"
    );
    readers.stop().await;
    // Once the stream stops, the writer gets in at once.
    let guard = writer.try_write().await.unwrap().expect("free");
    guard.unlock().await.unwrap();
    eventually("the lock is gone", SETTLE, || lock_is_gone(&server, name)).await;
    assert_idle(&[&clients[0], &clients[1], &writer_client]);
}

// ---------------------------------------------------------------------------------------------
// 4. One write release wakes every waiting reader.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_unlock_wakes_twenty_blocked_readers_within_a_second() {
    let server = RedisServer::start();
    let name = "wake-all";
    let writer_client = client(&server).await;
    let reader_clients = [client(&server).await, client(&server).await];
    let guard = writer_client.read_write_lock(name).write().await.unwrap();
    let (release_tx, release_rx) = tokio::sync::watch::channel(false);
    let inside = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let lock = reader_clients[i % 2].read_write_lock(name);
            let mut release = release_rx.clone();
            let inside = inside.clone();
            tokio::spawn(async move {
                let guard = lock.read().await.unwrap();
                let acquired_at = Instant::now();
                inside.fetch_add(1, Ordering::SeqCst);
                release.wait_for(|go| *go).await.unwrap();
                guard.unlock().await.unwrap();
                acquired_at
            })
        })
        .collect();
    eventually("twenty readers wait, subscribed", SETTLE, || {
        reader_clients[0].stats().contended_waits == 10
            && reader_clients[1].stats().contended_waits == 10
            && server.numsub(&channel(name)) == 2
    })
    .await;
    assert_eq!(inside.load(Ordering::SeqCst), 0);

    let released_at = Instant::now();
    guard.unlock().await.unwrap();
    eventually("all twenty readers are in", SETTLE, || {
        inside.load(Ordering::SeqCst) == 20
    })
    .await;
    // All twenty hold at once, through four Redis holds: on each client, the first reader's
    // own, and one that its other nine share.
    assert_eq!(zcard(&server, &rw_readers_key(name)), 4);
    release_tx.send(true).unwrap();
    let slowest = join_all(tasks)
        .await
        .into_iter()
        .map(|at| at.duration_since(released_at))
        .max()
        .unwrap();
    println!("the last of 20 readers got in {slowest:?} after the write unlock");
    assert!(
        slowest < Duration::from_secs(1),
        "the last reader got in {slowest:?} after the write unlock"
    );
    eventually("the lock is gone, nobody subscribed", SETTLE, || {
        lock_is_gone(&server, name) && server.numsub(&channel(name)) == 0
    })
    .await;
    assert_idle(&[&writer_client, &reader_clients[0], &reader_clients[1]]);
}

// ---------------------------------------------------------------------------------------------
// 5. Downgrade; 6. refused upgrade.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn downgrade_leaves_the_lock_read_locked_by_its_owner() {
    let server = RedisServer::start();
    let name = "downgrade";
    let (a, b) = (client(&server).await, client(&server).await);
    let lock = a.read_write_lock(name);
    let other = b.read_write_lock(name);

    let write = lock.write().await.unwrap();
    let token = write.fencing_token();
    assert!(other.try_read().await.unwrap().is_none());
    let read = tokio::time::timeout(ms(500), lock.read())
        .await
        .expect("the writer reads at once")
        .unwrap();
    let held = fields(&server, name);
    assert_eq!(
        held.get("writer").map(String::as_str),
        Some(lock.owner_id())
    );
    assert_eq!(
        held.get(&read_count_field(&lock)).map(String::as_str),
        Some("1")
    );
    assert_eq!(held.get("mode").map(String::as_str), Some("write"));
    assert!(
        other.try_read().await.unwrap().is_none(),
        "still write-locked"
    );

    write.unlock().await.unwrap();
    let held = fields(&server, name);
    assert!(!held.contains_key("writer"), "{held:?}");
    assert_eq!(held.get("mode").map(String::as_str), Some("read"));
    assert_eq!(
        held.get(&read_count_field(&lock)).map(String::as_str),
        Some("1")
    );
    assert_eq!(zcard(&server, &rw_readers_key(name)), 1);
    assert!(lock.is_locked().await.unwrap());
    assert!(other.try_write().await.unwrap().is_none());
    // The downgraded owner reads now: it cannot take the write lock back.
    assert!(matches!(
        lock.try_write().await,
        Err(Error::UpgradeNotSupported)
    ));
    let other_read = other
        .try_read()
        .await
        .unwrap()
        .expect("another owner reads alongside the downgraded owner");
    assert_eq!(zcard(&server, &rw_readers_key(name)), 2);
    other_read.unlock().await.unwrap();
    read.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
    assert!(lock_is_gone(&server, name));
    let next = other.try_write().await.unwrap().expect("free");
    assert!(next.fencing_token() > token);
    next.unlock().await.unwrap();
    assert_idle(&[&a, &b]);
}

/// Runs `call` and checks that it is refused as an upgrade within 100 ms.
async fn assert_refused_upgrade<T: std::fmt::Debug>(
    what: &str,
    call: impl Future<Output = Result<T>>,
) {
    let started = Instant::now();
    let outcome = tokio::time::timeout(Duration::from_secs(3), call)
        .await
        .unwrap_or_else(|_| panic!("{what} by a reader hangs instead of being refused"));
    let took = started.elapsed();
    assert!(
        matches!(outcome, Err(Error::UpgradeNotSupported)),
        "{what} by a reader: {outcome:?}"
    );
    assert!(took < ms(100), "{what} was refused only after {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_attempts_are_refused_at_once() {
    let server = RedisServer::start();
    let name = "upgrade";
    let (a, b) = (client(&server).await, client(&server).await);
    let lock = a.read_write_lock(name);
    // Load the scripts, so that the timings below measure the calls only.
    lock.write().await.unwrap().unlock().await.unwrap();
    let read = lock.read().await.unwrap();

    let wait = Duration::from_secs(5);
    let check_all = |lock: ReadWriteLock| async move {
        assert_refused_upgrade("write()", lock.write()).await;
        assert_refused_upgrade("try_write()", lock.try_write()).await;
        assert_refused_upgrade("try_write_for()", lock.try_write_for(wait)).await;
        assert_refused_upgrade("write_with_lease()", lock.write_with_lease(wait)).await;
        assert_refused_upgrade(
            "try_write_with_lease()",
            lock.try_write_with_lease(wait, wait),
        )
        .await;
        // A clone is the same owner.
        assert_refused_upgrade("write() on a clone", lock.clone().write()).await;
    };
    check_all(lock.clone()).await;

    // The same while a writer of another client waits (its mark is up) ...
    let remote = b.read_write_lock(name);
    let remote_task = tokio::spawn(async move {
        let guard = remote.write().await.unwrap();
        guard.unlock().await.unwrap();
    });
    eventually("the remote writer waits", SETTLE, || {
        zcard(&server, &rw_writers_key(name)) == 1
    })
    .await;
    check_all(lock.clone()).await;

    // ... and while a writer of this very client waits: the reader must not queue behind a
    // local writer that waits for the reader.
    let local = a.read_write_lock(name);
    let local_task = tokio::spawn(async move {
        let guard = local.write().await.unwrap();
        guard.unlock().await.unwrap();
    });
    eventually("the local writer waits", SETTLE, || {
        a.local_state().waiting_queues == 1 && zcard(&server, &rw_writers_key(name)) == 2
    })
    .await;
    check_all(lock.clone()).await;
    assert_eq!(
        zcard(&server, &rw_writers_key(name)),
        2,
        "a refused upgrade left a mark"
    );
    assert_eq!(zcard(&server, &rw_readers_key(name)), 1);

    // Both writers get in once the reader leaves.
    read.unlock().await.unwrap();
    tokio::time::timeout(SETTLE, join_all(vec![remote_task, local_task]))
        .await
        .expect("the writers get in after the reader left");
    eventually("the lock is gone", SETTLE, || lock_is_gone(&server, name)).await;
    assert_idle(&[&a, &b]);
}

// ---------------------------------------------------------------------------------------------
// 7. A crashed reader blocks writers for its own lease only; 8. leases and the watchdog.

#[test]
fn crashed_reader_lets_a_writer_in_after_its_lease_even_after_a_live_reader_came_and_went() {
    // A process that dies runs no destructor and sends no release: model it with a runtime
    // that is torn down while a read guard is leaked. Its watchdog stops with it.
    let server = RedisServer::start();
    let url = server.url();
    let name = "crashed-reader";
    let lease = ms(900);
    let holder_runtime = tokio::runtime::Runtime::new().unwrap();
    holder_runtime.block_on(async {
        let crashed = Client::builder(url.clone())
            .watchdog_timeout(lease)
            .build()
            .await
            .unwrap();
        std::mem::forget(crashed.read_write_lock(name).read().await.unwrap());
    });
    drop(holder_runtime);
    let crashed_at = Instant::now();

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        // A live reader with a long watchdog lease (30 s) comes ...
        let (live_client, writer_client) = (client(&server).await, client(&server).await);
        let live = live_client.read_write_lock(name).read().await.unwrap();
        assert_eq!(zcard(&server, &rw_readers_key(name)), 2);
        let writer = writer_client.read_write_lock(name);
        let task = tokio::spawn(async move {
            let guard = writer.write().await.unwrap();
            (Instant::now(), guard)
        });
        eventually("the writer waits", SETTLE, || {
            zcard(&server, &rw_writers_key(name)) == 1
        })
        .await;
        // ... and goes. Its 30 s lease must not keep the lock; the crashed reader's may.
        live.unlock().await.unwrap();
        let (acquired_at, guard) = tokio::time::timeout(SETTLE, task)
            .await
            .expect("the crashed reader's lease frees the lock")
            .unwrap();
        let after = acquired_at.duration_since(crashed_at);
        println!("the writer got in {after:?} after the reader with a {lease:?} lease crashed");
        // The last renewal was sent at most a third of the lease before the crash.
        assert!(
            after >= lease / 2,
            "the crashed reader's hold vanished early"
        );
        // A waiting writer re-checks at least once a second.
        assert!(
            after < lease + Duration::from_secs(1) + ms(700),
            "the writer got in only {after:?} after the crash"
        );
        assert_eq!(zcard(&server, &rw_readers_key(name)), 0);
        guard.unlock().await.unwrap();
        assert!(lock_is_gone(&server, name));
        assert_idle(&[&live_client, &writer_client]);
    });
}

/// Samples the PTTL of `keys` every 50 ms for `window` and checks that each always lies in
/// `(0, at_most]` ms.
async fn sample_ttls(server: &RedisServer, keys: &[String], window: Duration, at_most: Duration) {
    let at_most = at_most.as_millis() as i64;
    let until = Instant::now() + window;
    while Instant::now() < until {
        for key in keys {
            let ttl = pttl(server, key);
            assert!(
                ttl > 0 && ttl <= at_most,
                "PTTL {key} = {ttl} ms, expected within (0, {at_most}]"
            );
        }
        tokio::time::sleep(ms(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_renews_holds_and_the_keys_live_as_long_as_the_longest_lease() {
    let server = RedisServer::start();
    let name = "ttl";
    let watchdog = ms(600);
    let a = client_with_watchdog(&server, watchdog).await;
    let b = client(&server).await;
    let lock = a.read_write_lock(name);
    let renewed = lock.read().await.unwrap();
    // Past three watchdog timeouts, and the keys never outlive the one live lease.
    let read_keys = [rw_hash_key(name), rw_readers_key(name)];
    sample_ttls(&server, &read_keys, watchdog * 4, watchdog).await;
    assert!(!renewed.is_lost());
    assert!(a.stats().renewals >= 3, "{:?}", a.stats());
    assert!(b.read_write_lock(name).try_write().await.unwrap().is_none());

    // A longer fixed lease is now the longest: the keys follow it ...
    let fixed_lease = ms(1500);
    let fixed_handle = b.read_write_lock(name);
    let fixed = fixed_handle.read_with_lease(fixed_lease).await.unwrap();
    let taken_at = Instant::now();
    // Redis's own end of the fixed hold: the latest end among the readers.
    let redis::Value::Array(last) =
        server.cmd(&["ZRANGE", &rw_readers_key(name), "-1", "-1", "WITHSCORES"])
    else {
        panic!("ZRANGE: not an array");
    };
    let fixed_end: i64 = last
        .get(1)
        .map(|score| text(score).parse().expect("a score"))
        .expect("the fixed hold's end");
    let ttl = pttl(&server, &rw_hash_key(name));
    assert!(
        ttl > watchdog.as_millis() as i64,
        "PTTL {ttl} ms does not follow the longer lease"
    );
    sample_ttls(&server, &read_keys, ms(600), fixed_lease).await;
    // ... its guard is lost once it ends ...
    tokio::time::timeout(Duration::from_secs(5), fixed.lost())
        .await
        .expect("a fixed lease is known lost once it runs out");
    let lost_after = taken_at.elapsed();
    assert!(fixed.is_lost());
    assert!(
        lost_after >= fixed_lease - ms(100),
        "lost after {lost_after:?}"
    );
    // ... and the keys shrink back to the renewed lease.
    eventually("the keys follow the renewed lease again", SETTLE, || {
        let ttl = pttl(&server, &rw_hash_key(name));
        ttl > 0 && ttl <= watchdog.as_millis() as i64
    })
    .await;
    // The client gives a hold up a little before Redis does (it counts from the request's
    // sending): wait until Redis's own end of the fixed hold has passed too.
    eventually("Redis's clock passes the fixed hold's end", SETTLE, || {
        let redis::Value::Array(time) = server.cmd(&["TIME"]) else {
            return false;
        };
        let seconds: i64 = text(&time[0]).parse().unwrap_or(0);
        let micros: i64 = text(&time[1]).parse().unwrap_or(0);
        seconds * 1000 + micros / 1000 > fixed_end
    })
    .await;
    assert!(matches!(fixed.unlock().await, Err(Error::NotOwner)));
    assert!(!renewed.is_lost());
    assert_eq!(zcard(&server, &rw_readers_key(name)), 1);
    renewed.unlock().await.unwrap();
    assert!(lock_is_gone(&server, name));

    // Write holds are renewed the same way.
    let write = lock.write().await.unwrap();
    assert!(!exists(&server, &rw_readers_key(name)));
    sample_ttls(&server, &[rw_hash_key(name)], watchdog * 3, watchdog).await;
    assert!(!write.is_lost());
    assert!(b.read_write_lock(name).try_read().await.unwrap().is_none());
    write.unlock().await.unwrap();
    assert!(lock_is_gone(&server, name));
    assert_eq!(a.stats().lost_leases, 0);
    assert_idle(&[&a, &b]);
}

// ---------------------------------------------------------------------------------------------
// 9. Mixed readers and writers.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_readers_and_writers_on_three_clients_exclude_and_count_exactly() {
    const CLIENTS: usize = 3;
    const READERS: usize = 6;
    const WRITERS: usize = 2;
    const COUNTER: &str = "rw-counter";
    let run = ms(1500);
    let server = RedisServer::start();
    let name = "mixed";
    let data = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let readers_in = Arc::new(AtomicUsize::new(0));
    let writers_in = Arc::new(AtomicUsize::new(0));
    let most_readers = Arc::new(AtomicUsize::new(0));
    let stop_at = Instant::now() + run;
    let mut clients = Vec::new();
    let mut reader_tasks = Vec::new();
    let mut writer_tasks = Vec::new();
    for c in 0..CLIENTS {
        let client = client(&server).await;
        for r in 0..READERS {
            let lock = client.read_write_lock(name);
            let (readers_in, writers_in, most_readers) =
                (readers_in.clone(), writers_in.clone(), most_readers.clone());
            reader_tasks.push(tokio::spawn(async move {
                let mut reads = 0usize;
                while Instant::now() < stop_at {
                    let guard = lock.read().await.unwrap();
                    let now_in = readers_in.fetch_add(1, Ordering::SeqCst) + 1;
                    most_readers.fetch_max(now_in, Ordering::SeqCst);
                    assert_eq!(writers_in.load(Ordering::SeqCst), 0, "reader with a writer");
                    tokio::time::sleep(ms(1 + ((c + r + reads) % 4) as u64)).await;
                    assert_eq!(writers_in.load(Ordering::SeqCst), 0, "writer with a reader");
                    readers_in.fetch_sub(1, Ordering::SeqCst);
                    guard.unlock().await.unwrap();
                    reads += 1;
                    if reads.is_multiple_of(2) {
                        tokio::task::yield_now().await;
                    } else {
                        tokio::time::sleep(ms(1)).await;
                    }
                }
                reads
            }));
        }
        for w in 0..WRITERS {
            let lock = client.read_write_lock(name);
            let mut con = data.clone();
            let (readers_in, writers_in) = (readers_in.clone(), writers_in.clone());
            writer_tasks.push(tokio::spawn(async move {
                let mut records = Vec::new();
                while Instant::now() < stop_at {
                    let guard = lock.write().await.unwrap();
                    assert_eq!(writers_in.fetch_add(1, Ordering::SeqCst), 0, "two writers");
                    assert_eq!(readers_in.load(Ordering::SeqCst), 0, "writer with readers");
                    let value: Option<u64> = redis::cmd("GET")
                        .arg(COUNTER)
                        .query_async(&mut con)
                        .await
                        .unwrap();
                    let value = value.unwrap_or(0);
                    // Give others a chance to interleave.
                    if records.len().is_multiple_of(2) {
                        tokio::task::yield_now().await;
                    } else {
                        tokio::time::sleep(ms(1)).await;
                    }
                    let () = redis::cmd("SET")
                        .arg(COUNTER)
                        .arg(value + 1)
                        .query_async(&mut con)
                        .await
                        .unwrap();
                    records.push((value, guard.fencing_token()));
                    assert_eq!(readers_in.load(Ordering::SeqCst), 0, "writer with readers");
                    writers_in.fetch_sub(1, Ordering::SeqCst);
                    guard.unlock().await.unwrap();
                    tokio::time::sleep(ms(15 + ((c * 7 + w * 3 + records.len()) % 20) as u64))
                        .await;
                }
                records
            }));
        }
        clients.push(client);
    }
    let reads: usize = tokio::time::timeout(Duration::from_secs(30), join_all(reader_tasks))
        .await
        .expect("the readers finish")
        .into_iter()
        .sum();
    let mut records: Vec<(u64, u64)> =
        tokio::time::timeout(Duration::from_secs(30), join_all(writer_tasks))
            .await
            .expect("the writers finish")
            .into_iter()
            .flatten()
            .collect();
    let writes = records.len();
    let most_readers = most_readers.load(Ordering::SeqCst);
    println!("{reads} reads (up to {most_readers} at once) and {writes} writes");
    let counter = server.cmd(&["GET", COUNTER]);
    assert_eq!(
        redis::from_redis_value_ref::<String>(&counter).unwrap(),
        writes.to_string(),
        "lost updates: the counter does not match the writes"
    );
    records.sort_unstable();
    let values: Vec<u64> = records.iter().map(|r| r.0).collect();
    assert_eq!(values, (0..writes as u64).collect::<Vec<_>>());
    for pair in records.windows(2) {
        assert!(
            pair[0].1 < pair[1].1,
            "fencing token {} for counter {} is not above token {} for counter {}",
            pair[1].1,
            pair[1].0,
            pair[0].1,
            pair[0].0
        );
    }
    assert!(writes >= 20, "only {writes} writes");
    // Writers are preferred, so under load readers get fewer turns; they must get some.
    assert!(reads >= CLIENTS * READERS, "only {reads} reads");
    assert!(most_readers >= 2, "readers never overlapped");
    eventually("the lock is gone, nobody subscribed", SETTLE, || {
        lock_is_gone(&server, name) && server.numsub(&channel(name)) == 0
    })
    .await;
    for client in &clients {
        assert_eq!(client.local_state(), LocalState::default());
        assert_eq!(client.stats().lost_leases, 0);
    }
}

// ---------------------------------------------------------------------------------------------
// 10. Cancellation leaves no trace.

/// The next delay of a sweep: `step` apart up to `fine_until`, then 10 % apart.
fn next_cut(cut: Duration, step: Duration, fine_until: Duration) -> Duration {
    if cut < fine_until {
        cut + step
    } else {
        cut + cut / 10
    }
}

/// Sends read-only requests through every pooled connection of the probe's client (round
/// robin), so that requests it queued earlier have normally run by the time they return.
async fn flush_client_connections(probe: &ReadWriteLock) {
    for _ in 0..2 * redisync::core::DEFAULT_POOL_SIZE {
        probe.is_locked().await.expect("is_locked during a flush");
    }
}

/// What the lock must look like once a cancelled call has left.
#[derive(Clone, Copy)]
enum Expect<'a> {
    Free,
    WriteHeldBy(&'a ReadWriteLock),
    ReadHeldBy(&'a ReadWriteLock),
}

fn holds_are_exactly(server: &RedisServer, name: &str, expect: Expect<'_>) -> bool {
    let held = fields(server, name);
    let attempts = held.keys().filter(|f| f.starts_with("a:")).count();
    let readers: Vec<&String> = held.keys().filter(|f| f.starts_with("r:")).collect();
    let read_holds = zcard(server, &rw_readers_key(name));
    match expect {
        Expect::Free => {
            !exists(server, &rw_hash_key(name)) && !exists(server, &rw_readers_key(name))
        }
        Expect::WriteHeldBy(holder) => {
            held.get("writer").map(String::as_str) == Some(holder.owner_id())
                && held.get("wcount").map(String::as_str) == Some("1")
                && readers.is_empty()
                && attempts == 1
                && read_holds == 0
        }
        Expect::ReadHeldBy(holder) => {
            !held.contains_key("writer")
                && readers == [&read_count_field(holder)]
                && held.get(&read_count_field(holder)).map(String::as_str) == Some("1")
                && attempts == 1
                && read_holds == 1
        }
    }
}

/// What a cancelled call may leave behind, checked after every cut: local state at once; on
/// the server, once every request the client had queued has run: no waiting-writer mark (well
/// within a mark's own lifetime), no subscriber, and no hold beyond `expect`.
async fn assert_nothing_left(
    server: &RedisServer,
    client: &Client,
    probe: &ReadWriteLock,
    expect: Expect<'_>,
    what: impl Display,
) {
    assert_eq!(
        client.local_state(),
        LocalState::default(),
        "{what} left local state behind"
    );
    flush_client_connections(probe).await;
    let name = probe.name();
    eventually(
        format_args!("no waiting-writer mark is left after {what}"),
        WELL_WITHIN_A_MARK,
        || zcard(server, &rw_writers_key(name)) == 0,
    )
    .await;
    eventually(
        format_args!("no hold and no subscriber are left after {what}"),
        SETTLE,
        || server.numsub(&channel(name)) == 0 && holds_are_exactly(server, name, expect),
    )
    .await;
}

/// Cuts `call()` at each await point in turn while the lock is held in the other mode, then
/// after finely spaced delays until it has reached its waiting phase several times in a row,
/// then after longer timeouts. After each cut: `after_cut`, then [`assert_nothing_left`].
async fn sweep_while_held<T, F, Fut, A, AF>(
    server: &RedisServer,
    client: &Client,
    probe: &ReadWriteLock,
    expect: Expect<'_>,
    label: &str,
    call: F,
    mut after_cut: A,
) where
    T: std::fmt::Debug,
    F: Fn() -> Fut,
    Fut: Future<Output = Result<T>>,
    A: FnMut() -> AF,
    AF: Future<Output = ()>,
{
    let mut asleep_at = None;
    for pendings in 0..20 {
        // Past the last await point woken by its own progress, the call sleeps until the
        // holder's lease would end (or a writer's mark refresh); the timeout cuts it there.
        let outcome = tokio::time::timeout(ms(200), cut_at_await(pendings, call())).await;
        match outcome {
            Ok(None) => {}
            Ok(Some(outcome)) => panic!("{label} returned {outcome:?} while held"),
            Err(_) => asleep_at = Some(pendings),
        }
        after_cut().await;
        let what = format_args!("{label} cut at await point {pendings}");
        assert_nothing_left(server, client, probe, expect, what).await;
        if asleep_at.is_some() {
            break;
        }
    }
    let asleep_at = asleep_at.unwrap_or_else(|| panic!("{label} never went to sleep"));
    // A cut right at an await point, before the connection task has even written the request,
    // is where an abandoned attempt most often reaches Redis after the clean-up of its call
    // (they travel on different connections): repeat those cuts, the first above all.
    for round in 0..100 {
        let pendings = if round % 5 == 4 {
            round / 5 % asleep_at
        } else {
            0
        };
        // The number of await points before the sleep varies a little (the hub may still
        // have the channel subscribed); the timeout cuts a call that went to sleep early.
        let outcome = tokio::time::timeout(ms(200), cut_at_await(pendings, call())).await;
        if let Ok(Some(outcome)) = outcome {
            panic!("{label} returned {outcome:?} while held");
        }
        after_cut().await;
        let what = format_args!("{label} cut at await point {pendings} (round {round})");
        assert_nothing_left(server, client, probe, expect, what).await;
    }
    let (mut cuts, mut reached_waiting, mut waiting_in_a_row) = (0, 0, 0);
    let mut cut = Duration::ZERO;
    while (waiting_in_a_row < 5 || cut < ms(3)) && cut < ms(200) {
        let waits_before = client.stats().contended_waits;
        let outcome = cut_after(cut, call()).await;
        assert!(outcome.is_none(), "{label} returned {outcome:?} while held");
        if client.stats().contended_waits > waits_before {
            reached_waiting += 1;
            waiting_in_a_row += 1;
        } else {
            waiting_in_a_row = 0;
        }
        cuts += 1;
        after_cut().await;
        let what = format_args!("{label} cut after {cut:?}");
        assert_nothing_left(server, client, probe, expect, what).await;
        cut = next_cut(cut, Duration::from_micros(50), ms(3));
    }
    assert!(
        reached_waiting >= 5,
        "only {reached_waiting} of {cuts} cuts of {label} reached the waiting phase"
    );
    for cut in [0, 1, 2, 10, 25, 50, 100, 250].map(ms) {
        let outcome = tokio::time::timeout(cut, call()).await;
        assert!(outcome.is_err(), "{label} returned {outcome:?} while held");
        after_cut().await;
        let what = format_args!("{label} timed out after {cut:?}");
        assert_nothing_left(server, client, probe, expect, what).await;
    }
    println!("{label}: asleep at await point {asleep_at:?}, {reached_waiting} of {cuts} timed cuts while waiting");
}

/// Cuts `call()` on a free lock from "not sent yet" to "reply received"; an attempt cut on the
/// wire finishes in the background and must give back what it got. Returns (cut, acquired).
async fn sweep_while_free<G, F, Fut>(
    server: &RedisServer,
    client: &Client,
    probe: &ReadWriteLock,
    label: &str,
    call: F,
) -> (usize, usize)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<G>>,
{
    let (mut acquired, mut cancelled) = (0, 0);
    let mut tally = |outcome: Option<Result<G>>| match outcome {
        Some(Ok(guard)) => {
            acquired += 1;
            drop(guard); // released in the background
            true
        }
        Some(Err(err)) => panic!("{label} of a free lock failed: {err}"),
        None => {
            cancelled += 1;
            false
        }
    };
    for pendings in 0..4 {
        tally(cut_at_await(pendings, call()).await);
        let what = format_args!("{label} of a free lock cut at await point {pendings}");
        assert_nothing_left(server, client, probe, Expect::Free, what).await;
    }
    let mut acquired_in_a_row = 0;
    let mut cut = Duration::ZERO;
    while (acquired_in_a_row < 5 || cut < ms(2)) && cut < ms(100) {
        if tally(cut_after(cut, call()).await) {
            acquired_in_a_row += 1;
        } else {
            acquired_in_a_row = 0;
        }
        let what = format_args!("{label} of a free lock cut after {cut:?}");
        assert_nothing_left(server, client, probe, Expect::Free, what).await;
        cut = next_cut(cut, Duration::from_micros(25), ms(2));
    }
    for cut in [0, 1, 2].map(ms) {
        tally(tokio::time::timeout(cut, call()).await.ok());
        let what = format_args!("{label} of a free lock timed out after {cut:?}");
        assert_nothing_left(server, client, probe, Expect::Free, what).await;
    }
    (cancelled, acquired)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_read_and_write_calls_leave_no_trace() {
    let server = RedisServer::start();
    let name = "cancelled";
    let holder_client = client(&server).await;
    let newcomer_client = client(&server).await;
    let client = Client::builder(server.url())
        .command_timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    let holder = holder_client.read_write_lock(name);
    let probe = client.read_write_lock(name);
    let newcomer = newcomer_client.read_write_lock(name);

    // 1. read() while another client holds the write lock.
    let held = holder.write().await.unwrap();
    sweep_while_held(
        &server,
        &client,
        &probe,
        Expect::WriteHeldBy(&holder),
        "read()",
        || {
            let lock = client.read_write_lock(name);
            async move { lock.read().await }
        },
        || async {},
    )
    .await;
    held.unlock().await.unwrap();

    // 2. write() while another client holds a read lock. A cancelled writer must not keep
    //    new readers out: right after each cut a new reader of a third client gets in (it may
    //    have to wait for the withdrawal of the mark, but not for the mark to lapse).
    let held = holder.read().await.unwrap();
    sweep_while_held(
        &server,
        &client,
        &probe,
        Expect::ReadHeldBy(&holder),
        "write()",
        || {
            let lock = client.read_write_lock(name);
            async move { lock.write().await }
        },
        || async {
            let guard = tokio::time::timeout(WELL_WITHIN_A_MARK, newcomer.read())
                .await
                .expect("a cancelled writer keeps blocking new readers")
                .unwrap();
            guard.unlock().await.unwrap();
        },
    )
    .await;
    held.unlock().await.unwrap();
    let guard = probe.try_write().await.unwrap().expect("free");
    guard.unlock().await.unwrap();

    // 3. The lock is free: cut the acquire request itself.
    let (read_cut, read_acquired) = sweep_while_free(&server, &client, &probe, "read()", || {
        let lock = client.read_write_lock(name);
        async move { lock.read().await }
    })
    .await;
    let (write_cut, write_acquired) = sweep_while_free(&server, &client, &probe, "write()", || {
        let lock = client.read_write_lock(name);
        async move { lock.write().await }
    })
    .await;
    println!(
        "free: read() {read_cut} cut, {read_acquired} acquired; \
         write() {write_cut} cut, {write_acquired} acquired"
    );
    for (cut, acquired) in [(read_cut, read_acquired), (write_cut, write_acquired)] {
        assert!(cut >= 2, "only {cut} attempts were cut");
        assert!(acquired >= 5, "only {acquired} attempts completed");
    }

    // Nothing is stuck.
    let guard = tokio::time::timeout(Duration::from_secs(5), holder.write())
        .await
        .expect("the lock is not stuck")
        .unwrap();
    guard.unlock().await.unwrap();
    let guard = probe.try_read().await.unwrap().expect("free at the end");
    guard.unlock().await.unwrap();
    eventually("everything is gone", SETTLE, || {
        lock_is_gone(&server, name) && server.numsub(&channel(name)) == 0
    })
    .await;
    assert_idle(&[&client, &holder_client, &newcomer_client]);
}

// ---------------------------------------------------------------------------------------------
// 11. force_unlock, delete, stale guards, bad inputs.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_frees_both_modes_and_wakes_the_waiters() {
    let server = RedisServer::start();
    let name = "forced";
    let a = client_with_watchdog(&server, ms(600)).await;
    let (b, c) = (client(&server).await, client(&server).await);
    let lock = a.read_write_lock(name);
    assert!(!lock.force_unlock().await.unwrap(), "nothing to free");

    // Write mode, with five readers waiting.
    let write = lock.write().await.unwrap();
    let token = write.fencing_token();
    let readers: Vec<_> = (0..5)
        .map(|_| {
            let reader = b.read_write_lock(name);
            tokio::spawn(async move {
                let guard = reader.read().await.unwrap();
                (Instant::now(), guard)
            })
        })
        .collect();
    eventually("the readers wait", SETTLE, || {
        b.stats().contended_waits == 5 && server.numsub(&channel(name)) == 1
    })
    .await;
    let forced_at = Instant::now();
    assert!(c.read_write_lock(name).force_unlock().await.unwrap());
    let mut read_guards = Vec::new();
    for (acquired_at, guard) in tokio::time::timeout(SETTLE, join_all(readers))
        .await
        .expect("force_unlock wakes the readers")
    {
        let woke = acquired_at.duration_since(forced_at);
        assert!(
            woke < Duration::from_secs(1),
            "a reader woke after {woke:?}"
        );
        read_guards.push(guard);
    }
    // Two Redis holds: the first reader's own, and one that the other four share.
    assert_eq!(zcard(&server, &rw_readers_key(name)), 2);
    tokio::time::timeout(Duration::from_secs(3), write.lost())
        .await
        .expect("the watchdog notices the write hold is gone");
    assert!(matches!(write.unlock().await, Err(Error::NotOwner)));

    // Read mode (six holds), with a writer waiting.
    let own_read = lock.read().await.unwrap();
    let writer = c.read_write_lock(name);
    let writer_owner = writer.owner_id().to_owned();
    let task = tokio::spawn(async move {
        let guard = writer.write().await.unwrap();
        (Instant::now(), guard)
    });
    eventually("the writer waits", SETTLE, || {
        zcard(&server, &rw_writers_key(name)) == 1
    })
    .await;
    let forced_at = Instant::now();
    assert!(b.read_write_lock(name).force_unlock().await.unwrap());
    let (acquired_at, write) = tokio::time::timeout(SETTLE, task)
        .await
        .expect("force_unlock wakes the writer")
        .unwrap();
    let woke = acquired_at.duration_since(forced_at);
    assert!(
        woke < Duration::from_secs(1),
        "the writer woke after {woke:?}"
    );
    assert!(write.fencing_token() > token);
    tokio::time::timeout(Duration::from_secs(3), own_read.lost())
        .await
        .expect("the watchdog notices the read hold is gone");
    assert!(matches!(own_read.unlock().await, Err(Error::NotOwner)));
    // Client b learns it from the lost notice force_unlock sends it; until then a reader
    // sharing b's hold with others leaves it without asking Redis, so each guard waits for
    // the notice first (under load it can come after the unlocks below).
    for guard in &read_guards {
        tokio::time::timeout(Duration::from_secs(3), guard.lost())
            .await
            .expect("client b learns that its read holds are gone");
    }
    for guard in read_guards {
        // Stale: the release changes nothing, the writer keeps its hold.
        assert!(matches!(guard.unlock().await, Err(Error::NotOwner)));
    }
    assert_eq!(field(&server, name, "writer"), Some(writer_owner));
    assert!(lock.is_locked().await.unwrap());
    write.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
    assert!(lock_is_gone(&server, name));
    assert_idle(&[&a, &b, &c]);
}

/// Puts a waiting-writer mark for `waiter` straight into Redis, as a writer that died while
/// waiting would leave it, lasting `for_ms`.
fn plant_mark(server: &RedisServer, name: &str, waiter: &str, for_ms: i64) {
    let Value::Array(time) = server.cmd(&["TIME"]) else {
        panic!("unexpected TIME reply");
    };
    let part = |v: &Value| redis::from_redis_value_ref::<i64>(v).unwrap();
    let now = part(&time[0]) * 1000 + part(&time[1]) / 1000;
    server.cmd(&[
        "ZADD",
        &rw_writers_key(name),
        &(now + for_ms).to_string(),
        waiter,
    ]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_removes_holds_and_marks_but_keeps_the_fence() {
    let server = RedisServer::start();
    let name = "deleted";
    let (a, b) = (client(&server).await, client(&server).await);
    let lock = a.read_write_lock(name);
    assert!(!lock.delete().await.unwrap(), "nothing to delete");
    let write = lock.write().await.unwrap();
    let token = write.fencing_token();
    write.unlock().await.unwrap();

    // A read hold, and the mark of a writer that died while waiting.
    let read = lock.read().await.unwrap();
    plant_mark(&server, name, "ghost-writer", 60_000);
    let reader = b.read_write_lock(name);
    assert!(
        reader.try_read().await.unwrap().is_none(),
        "new readers give way to a waiting writer"
    );
    // force_unlock frees holds but leaves marks; delete removes both.
    let waiting = tokio::spawn({
        let reader = reader.clone();
        async move {
            let guard = reader.read().await.unwrap();
            (Instant::now(), guard)
        }
    });
    eventually("the new reader waits", SETTLE, || {
        server.numsub(&channel(name)) == 1
    })
    .await;
    let deleted_at = Instant::now();
    assert!(lock.delete().await.unwrap());
    let (acquired_at, guard) = tokio::time::timeout(SETTLE, waiting)
        .await
        .expect("delete wakes the waiting reader")
        .unwrap();
    let woke = acquired_at.duration_since(deleted_at);
    assert!(
        woke < Duration::from_secs(1),
        "the reader woke after {woke:?}"
    );
    assert_eq!(zcard(&server, &rw_writers_key(name)), 0);
    assert!(matches!(read.unlock().await, Err(Error::NotOwner)));
    guard.unlock().await.unwrap();
    assert!(lock_is_gone(&server, name));
    assert!(
        exists(&server, &fence_key(name)),
        "the fence survives delete"
    );
    assert!(!lock.delete().await.unwrap());
    let write = lock.write().await.unwrap();
    assert!(write.fencing_token() > token, "tokens never go back");
    write.unlock().await.unwrap();
    assert_idle(&[&a, &b]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_leaves_waiting_writer_marks_and_keeps_the_fence() {
    let server = RedisServer::start();
    let name = "forced-marks";
    let (a, b) = (client(&server).await, client(&server).await);
    let lock = a.read_write_lock(name);
    let write = lock.write().await.unwrap();
    let token = write.fencing_token();
    assert!(b.read_write_lock(name).force_unlock().await.unwrap());
    assert!(matches!(write.unlock().await, Err(Error::NotOwner)));
    let write = lock.write().await.unwrap();
    assert!(write.fencing_token() > token);
    write.unlock().await.unwrap();
    plant_mark(&server, name, "ghost-writer", 60_000);
    assert!(!lock.force_unlock().await.unwrap(), "nothing is held");
    assert!(b.read_write_lock(name).try_read().await.unwrap().is_none());
    assert_eq!(zcard(&server, &rw_writers_key(name)), 1);
    assert!(lock.delete().await.unwrap());
    let guard = b
        .read_write_lock(name)
        .try_read()
        .await
        .unwrap()
        .expect("free");
    guard.unlock().await.unwrap();
    assert_idle(&[&a, &b]);
}

#[tokio::test]
async fn bad_inputs_are_invalid_arguments() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let second = Duration::from_secs(1);
    fn invalid<T: std::fmt::Debug>(what: &str, outcome: Result<T>) {
        assert!(
            matches!(outcome, Err(Error::InvalidArgument(_))),
            "{what}: {outcome:?}"
        );
    }
    for name in [
        String::new(),
        "x".repeat(1025),
        "}starts-with-brace".to_owned(),
    ] {
        let lock = a.read_write_lock(name);
        invalid("read", lock.read().await);
        invalid("write", lock.write().await);
        invalid("try_read", lock.try_read().await);
        invalid("try_write", lock.try_write().await);
        invalid("try_read_for", lock.try_read_for(second).await);
        invalid("try_write_for", lock.try_write_for(second).await);
        invalid("read_with_lease", lock.read_with_lease(second).await);
        invalid("write_with_lease", lock.write_with_lease(second).await);
        invalid("is_locked", lock.is_locked().await);
        invalid("force_unlock", lock.force_unlock().await);
        invalid("delete", lock.delete().await);
    }
    let lock = a.read_write_lock("inputs");
    for lease in [Duration::ZERO, Duration::MAX] {
        invalid("read_with_lease", lock.read_with_lease(lease).await);
        invalid("write_with_lease", lock.write_with_lease(lease).await);
        invalid(
            "try_read_with_lease",
            lock.try_read_with_lease(second, lease).await,
        );
        invalid(
            "try_write_with_lease",
            lock.try_write_with_lease(second, lease).await,
        );
    }
    invalid("try_read_for", lock.try_read_for(Duration::MAX).await);
    invalid("try_write_for", lock.try_write_for(Duration::MAX).await);
    invalid(
        "try_read_with_lease",
        lock.try_read_with_lease(Duration::MAX, second).await,
    );
    invalid(
        "try_write_with_lease",
        lock.try_write_with_lease(Duration::MAX, second).await,
    );
    assert!(!exists(&server, &rw_hash_key("inputs")));
    assert!(!exists(&server, &rw_writers_key("inputs")));
    // A zero wait is valid and means "do not wait".
    let read = lock.try_read_for(Duration::ZERO).await.unwrap().unwrap();
    read.unlock().await.unwrap();
    let write = lock.try_write_for(Duration::ZERO).await.unwrap().unwrap();
    write.unlock().await.unwrap();
    assert_eq!(a.local_state(), LocalState::default());

    // Handles, guards and futures cross tasks.
    fn send<T: Send>(_: &T) {}
    fn send_sync_static<T: Send + Sync + Clone + 'static>() {}
    send_sync_static::<ReadWriteLock>();
    send(&lock.read());
    send(&lock.write());
    send(&lock.try_write_for(Duration::ZERO));
    let guard = lock.read().await.unwrap();
    send(&guard.lost());
    let guard = tokio::spawn(async move { guard }).await.unwrap();
    guard.unlock().await.unwrap();
    assert_eq!(lock.name(), "inputs");
}

#[tokio::test]
async fn a_reentrant_write_grant_removes_its_waiting_mark() {
    // One write() call (waiter w1) marks itself while a reader holds; meanwhile its owner gets
    // the write hold through another call (w2). When w1's next attempt is granted as a
    // re-entry, its mark must go with it, or readers would keep giving way to nobody.
    let server = RedisServer::start();
    let mut conn = server.connection();
    let name = "reentry-mark";
    let acquire = redis::Script::new(&format!(
        "{}{}{}{}",
        include_str!("../../lua/publish_prelude.lua"),
        include_str!("../../lua/clock_prelude.lua"),
        include_str!("../../lua/rwlock_prelude.lua"),
        include_str!("../../lua/rwlock_acquire_write.lua")
    ));
    // A grant answers with its token alone, an integer; busy with the table {0, wait}.
    let write = |conn: &mut redis::Connection, attempt: &str, waiter: &str| -> redis::Value {
        acquire
            .key(rw_hash_key(name))
            .key(rw_readers_key(name))
            .key(rw_writers_key(name))
            .key(fence_key(name))
            .key(common::keys::rw(name).attempt_records.of(attempt))
            .key(common::keys::rw(name).waiter_records.of(waiter))
            .arg("owner-1")
            .arg(30_000)
            .arg(attempt)
            .arg(waiter)
            .arg(3000)
            .invoke(conn)
            .unwrap()
    };
    server.cmd(&[
        "HSET",
        &rw_hash_key(name),
        "mode",
        "read",
        "r:someone",
        "1",
        "a:x",
        "rsomeone",
        "rc",
        "1",
        "exp",
        "99999999999999",
    ]);
    server.cmd(&["ZADD", &rw_readers_key(name), "99999999999999", "x"]);
    assert!(common::is_busy(&write(&mut conn, "a1", "w1")));
    assert_eq!(zcard(&server, &rw_writers_key(name)), 1, "w1 waits, marked");
    server.cmd(&["DEL", &rw_hash_key(name), &rw_readers_key(name)]);
    let granted = |reply: redis::Value| matches!(reply, redis::Value::Int(token) if token > 0);
    assert!(granted(write(&mut conn, "a2", "w2")), "w2 is granted");
    assert!(granted(write(&mut conn, "a3", "w1")), "w1 re-enters");
    assert_eq!(
        zcard(&server, &rw_writers_key(name)),
        0,
        "w1's mark outlived its grant"
    );
}

#[tokio::test]
async fn a_withdrawn_waiter_cannot_mark_again_when_a_late_attempt_runs() {
    // The withdrawal and a late attempt of the same write() call travel on different
    // connections; whichever Redis runs first, no mark may survive.
    let server = RedisServer::start();
    let mut conn = server.connection();
    let name = "late-mark";
    let prelude = concat!(
        include_str!("../../lua/publish_prelude.lua"),
        include_str!("../../lua/clock_prelude.lua"),
        include_str!("../../lua/rwlock_prelude.lua")
    );
    let acquire = redis::Script::new(&format!(
        "{prelude}{}",
        include_str!("../../lua/rwlock_acquire_write.lua")
    ));
    let withdraw = redis::Script::new(concat!(
        include_str!("../../lua/publish_prelude.lua"),
        include_str!("../../lua/rwlock_withdraw.lua")
    ));
    let waiter_record = common::keys::rw(name).waiter_records.of("w1");
    // A reader holds, so the write attempt is busy and would mark.
    server.cmd(&[
        "HSET",
        &rw_hash_key(name),
        "mode",
        "read",
        "r:someone",
        "1",
        "a:x",
        "rsomeone",
        "rc",
        "1",
        "exp",
        "99999999999999",
    ]);
    server.cmd(&["ZADD", &rw_readers_key(name), "99999999999999", "x"]);
    let withdrawn: i64 = withdraw
        .key(rw_writers_key(name))
        .key(&waiter_record)
        .key(rw_hash_key(name))
        .arg("w1")
        .arg(channel(name))
        .arg(3000)
        .invoke(&mut conn)
        .unwrap();
    assert_eq!(withdrawn, 0, "nothing was marked yet");
    let late: Vec<i64> = acquire
        .key(rw_hash_key(name))
        .key(rw_readers_key(name))
        .key(rw_writers_key(name))
        .key(fence_key(name))
        .key(common::keys::rw(name).attempt_records.of("a1"))
        .key(&waiter_record)
        .arg("owner-1")
        .arg(30_000)
        .arg("a1")
        .arg("w1")
        .arg(3000)
        .invoke(&mut conn)
        .unwrap();
    assert_eq!(late.first(), Some(&0), "busy: a reader holds");
    assert_eq!(
        zcard(&server, &rw_writers_key(name)),
        0,
        "the late attempt left a mark"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_upgrade_does_not_fail_other_waiting_writers() {
    use redisync::core::toolkit::{Attempt, WaitSpec};
    // Core's waiting loop, driven directly: the head's own error (an upgrade refused) must
    // not be handed to the writer queued behind it, only outages are.
    let server = RedisServer::start();
    let a = client(&server).await;
    let (head_busy_tx, head_busy_rx) = tokio::sync::oneshot::channel::<()>();
    let spec = |deadline| WaitSpec {
        kind: "test",
        queue: "q",
        channel: "redisync:{fanout}:wake",
        deadline,
        may_reenter: false,
        shared: false,
        expect_busy: false,
    };
    let head = {
        let a = a.clone();
        tokio::spawn(async move {
            let mut tries = 0;
            let mut tx = Some(head_busy_tx);
            a.acquire(spec(None), || {
                tries += 1;
                let first = tries == 1;
                let busy = tries == 2;
                let tx = if busy { tx.take() } else { None };
                async move {
                    if first || busy {
                        if let Some(tx) = tx {
                            let _ = tx.send(());
                            tokio::time::sleep(ms(200)).await;
                            return Err::<Attempt<()>, _>(Error::UpgradeNotSupported);
                        }
                        return Ok(Attempt::Busy {
                            retry_in: Some(ms(50)),
                        });
                    }
                    Ok(Attempt::Busy {
                        retry_in: Some(ms(50)),
                    })
                }
            })
            .await
        })
    };
    head_busy_rx.await.unwrap();
    let behind = a
        .acquire(spec(Some(Instant::now() + ms(1500))), || async {
            Ok(Attempt::Acquired(()))
        })
        .await;
    assert!(matches!(
        head.await.unwrap(),
        Err(Error::UpgradeNotSupported)
    ));
    assert!(
        matches!(behind, Ok(Some(()))),
        "the queued writer got {behind:?} instead of trying itself"
    );
}

#[tokio::test]
async fn foreign_data_in_one_locks_readers_set_does_not_cost_other_holds_their_renewal() {
    let server = RedisServer::start();
    let watchdog = ms(600);
    let a = client_with_watchdog(&server, watchdog).await;
    let victim = a.read_write_lock("victim").write().await.unwrap();
    let bystander = a.read_write_lock("bystander").read().await.unwrap();
    server.cmd(&["SET", &rw_readers_key("victim"), "foreign"]);
    tokio::time::timeout(Duration::from_secs(3), victim.lost())
        .await
        .expect("the spoiled hold is reported lost");
    tokio::time::sleep(watchdog * 3).await;
    assert!(!bystander.is_lost(), "the other hold kept being renewed");
    bystander.unlock().await.unwrap();
    drop(victim);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_write_hold_takes_its_attempt_fields_with_it() {
    // The owner's read hold keeps the hash alive after its write hold (entered twice) ends,
    // as it does when a writer that downgraded crashes; the next operation prunes the write
    // hold, and must leave none of its attempts' fields behind.
    let server = RedisServer::start();
    let name = "expired-writer";
    let (a, b) = (client(&server).await, client(&server).await);
    let lock = a.read_write_lock(name);
    let write_attempts = || -> Vec<String> {
        fields(&server, name)
            .into_iter()
            .filter(|(field, kind)| field.starts_with("a:") && kind.starts_with('w'))
            .map(|(field, _)| field)
            .collect()
    };
    let write = lock.write_with_lease(ms(300)).await.unwrap();
    let again = lock.write_with_lease(ms(300)).await.unwrap();
    let read = lock.read_with_lease(Duration::from_secs(30)).await.unwrap();
    assert_eq!(write_attempts().len(), 2);

    // Another owner's read waits for the write lease to end, then prunes the write hold.
    let other = b
        .read_write_lock(name)
        .try_read_for(SETTLE)
        .await
        .unwrap()
        .expect("a reader gets in once the write lease ends");
    let held = fields(&server, name);
    assert!(!held.contains_key("writer"), "{held:?}");
    assert_eq!(write_attempts(), Vec::<String>::new(), "{held:?}");

    for expired in [write, again] {
        assert!(matches!(expired.unlock().await, Err(Error::NotOwner)));
    }
    other.unlock().await.unwrap();
    read.unlock().await.unwrap();
    eventually("the lock is gone", SETTLE, || lock_is_gone(&server, name)).await;
    assert_idle(&[&a, &b]);
}
