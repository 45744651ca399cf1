//! Every primitive on a Redis Cluster (three primaries with a replica each), checked against
//! what DEPLOYMENT.md ("Redis Cluster") promises: the primitives work across clients, each
//! primitive's keys and channels sit in one slot on the primary serving it, wake-ups go over
//! sharded pub/sub to that shard only, the watchdog and the multi-lock batch per slot, replica
//! sync waits for the replicas of the primary that ran the change, and the documented ACL
//! rules suffice. Failover and slot migration are in `cluster_faults.rs`.
//!
//! Tests that leave the cluster as they found it share one cluster (see [`shared_cluster`]),
//! each with names of its own; tests that pause nodes or count commands per node start their
//! own.

mod common;

use redisync::core::toolkit::Toolkit;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use common::{
    classic_subscribers, eventually, is_outage, join_all, lock_key, ms, shard_subscribers, strings,
    wake_channel, Paused,
};
use redis::Value;
use redisync::core::toolkit::keys;
use redisync::prelude::*;
use redisync_test_harness::RedisCluster;
use tokio::task::JoinHandle;

/// How long a wake-up may take before the test fails: far below the default 30 s watchdog
/// lease of the holders. Most waiters also re-check on a timer (every second), so whether the
/// release really published is checked on its own, by a [`ShardListener`].
const WAKE: Duration = Duration::from_secs(5);
/// How long a condition that should hold "soon" may take.
const SETTLE: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------------
// The shared cluster
// ---------------------------------------------------------------------------------------------

/// The cluster the tests running right now share, if any.
///
/// A `static` is never dropped, and the harness only kills its `redis-server` processes on
/// drop, so the static holds a `Weak`: every test holds an `Arc` while it runs, and the last
/// one to finish drops the cluster. Tests that run side by side (libtest runs them on several
/// threads) share one cluster; a test that starts when no other holds it starts a new one.
/// No `redis-server` outlives the test binary, even when a test panics.
///
/// libtest starts tests in the order of their names. The tests that do not use this cluster
/// are named `with_...`, so that they come after all those that do: otherwise a thread
/// running one of them while the other finishes a shared test would leave the cluster
/// without holder, and the next shared test would start another.
static SHARED: Mutex<Weak<RedisCluster>> = Mutex::new(Weak::new());

fn shared_cluster() -> Arc<RedisCluster> {
    let mut shared = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(cluster) = shared.upgrade() {
        return cluster;
    }
    let started = Instant::now();
    let cluster = Arc::new(RedisCluster::start(3, 1));
    eprintln!("started the shared cluster in {:?}", started.elapsed());
    *shared = Arc::downgrade(&cluster);
    cluster
}

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// A cluster client with every option at its default (30 s watchdog lease).
async fn cluster_client(cluster: &RedisCluster) -> Client {
    Client::cluster_builder(cluster.seed_urls())
        .build()
        .await
        .expect("connect to the cluster")
}

/// The slot of every key and channel of the primitive `name` (default prefix), as redisync
/// computes it.
fn slot_of_name(name: &str) -> u16 {
    common::keys::space(name).slot()
}

/// The master serving `slot` in a slot map from [`RedisCluster::slot_map`].
fn owner_in(map: &[(RangeInclusive<u16>, usize)], slot: u16) -> usize {
    map.iter()
        .find(|(slots, _)| slots.contains(&slot))
        .map(|(_, owner)| *owner)
        .unwrap_or_else(|| panic!("slot {slot} is not served: {map:?}"))
}

/// `per_master` names `<stem>-<i>` served by each master, as `(master, name)` in master order.
fn names_on_each_master(
    cluster: &RedisCluster,
    stem: &str,
    per_master: usize,
) -> Vec<(usize, String)> {
    let map = cluster.slot_map();
    let masters = cluster.masters();
    assert_eq!(masters.len(), 3, "expected three masters: {map:?}");
    let mut found: BTreeMap<usize, Vec<String>> = masters.iter().map(|&m| (m, vec![])).collect();
    for i in 0.. {
        if found.values().all(|names| names.len() >= per_master) {
            break;
        }
        let name = format!("{stem}-{i}");
        let names = found
            .get_mut(&owner_in(&map, slot_of_name(&name)))
            .expect("slots are served by masters");
        if names.len() < per_master {
            names.push(name);
        }
    }
    found
        .into_iter()
        .flat_map(|(master, names)| names.into_iter().map(move |name| (master, name)))
        .collect()
}

/// An integer reply.
fn int(value: &Value) -> i64 {
    redis::from_redis_value_ref::<i64>(value)
        .unwrap_or_else(|e| panic!("expected an integer, got {value:?}: {e}"))
}

/// Waits until someone has `channel` subscribed (sharded) on `master`.
async fn await_shard_subscriber(cluster: &RedisCluster, master: usize, channel: &str) {
    eventually(
        format!("{channel} is subscribed on node {master}"),
        SETTLE,
        || shard_subscribers(cluster, master, channel) >= 1,
    )
    .await;
}

/// Whether `key` exists on node `node`.
fn exists_on(cluster: &RedisCluster, node: usize, key: &str) -> bool {
    int(&cluster.cmd_on(node, &["EXISTS", key])) == 1
}

/// `ZCARD key` on node `node`.
fn zcard_on(cluster: &RedisCluster, node: usize, key: &str) -> i64 {
    int(&cluster.cmd_on(node, &["ZCARD", key]))
}

/// Awaits `task`, failing the test if it takes longer than `limit`.
async fn finish<T>(what: &str, limit: Duration, task: JoinHandle<T>) -> T {
    tokio::time::timeout(limit, task)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {limit:?}"))
        .unwrap_or_else(|e| panic!("{what} panicked: {e}"))
}

/// Fails unless `task` is still running after `for_at_least`.
async fn assert_still_waiting<T>(what: &str, for_at_least: Duration, task: &JoinHandle<T>) {
    tokio::time::sleep(for_at_least).await;
    assert!(!task.is_finished(), "{what} should still be waiting");
}

/// A bulk string reply.
fn bulk(text: &str) -> Value {
    Value::BulkString(text.as_bytes().to_vec())
}

/// A connection of the test's own, subscribed with `SSUBSCRIBE` to one channel on one node:
/// it sees what a release publishes there, whatever the waiters make of it (they also
/// re-check on timers, which would hide a missing message).
struct ShardListener {
    con: redis::Connection,
    channel: String,
}

impl ShardListener {
    /// Subscribes; fails if `node` does not serve the channel's slot (`MOVED`).
    fn new(cluster: &RedisCluster, node: usize, channel: &str) -> Self {
        let mut con = cluster.node(node).connection();
        con.set_read_timeout(Some(SETTLE)).expect("read timeout");
        con.send_packed_command(&redis::cmd("SSUBSCRIBE").arg(channel).get_packed_command())
            .expect("send SSUBSCRIBE");
        let reply = con.recv_response();
        assert!(
            matches!(&reply, Ok(Value::Array(items))
                if items.first() == Some(&bulk("ssubscribe"))
                    && items.get(1) == Some(&bulk(channel))),
            "SSUBSCRIBE {channel} on node {node}: {reply:?}"
        );
        ShardListener {
            con,
            channel: channel.to_owned(),
        }
    }

    /// Waits (blocking the thread) at most `within` for the next message on the channel, and
    /// returns it.
    fn expect_message(&mut self, within: Duration) -> String {
        self.con
            .set_read_timeout(Some(within))
            .expect("read timeout");
        let reply = self.con.recv_response();
        match &reply {
            Ok(Value::Array(items))
                if items.first() == Some(&bulk("smessage"))
                    && items.get(1) == Some(&bulk(&self.channel)) =>
            {
                common::text(&items[2])
            }
            _ => panic!(
                "expected a message on {} within {within:?}, got {reply:?}",
                self.channel
            ),
        }
    }
}

/// The attempt id a hand-over message (`g <attempt> <token>`) names.
fn message_attempt(message: &str) -> &str {
    message.split(' ').nth(1).unwrap_or_default()
}

/// `calls` of a command on every node (`INFO commandstats`), in node order.
fn calls_per_node(cluster: &RedisCluster, command: &str) -> Vec<u64> {
    cluster
        .nodes()
        .iter()
        .map(|node| node.command_calls(command))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// 1. Every primitive, across two clients
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentrant_lock_reenters_and_hands_over_between_clients_on_every_master() {
    let cluster = shared_cluster();
    let (a, b) = (
        cluster_client(&cluster).await,
        cluster_client(&cluster).await,
    );
    assert!(a.is_cluster());

    // `server()` is `cluster:` and the seed nodes, sorted (MultiLock orders by it).
    let mut seeds: Vec<String> = cluster
        .nodes()
        .iter()
        .map(|node| format!("127.0.0.1:{}", node.port()))
        .collect();
    seeds.sort();
    assert_eq!(a.server(), format!("cluster:{}", seeds.join(",")));
    assert_eq!(a.server(), b.server());

    for (master, name) in names_on_each_master(&cluster, "reentrant", 1) {
        let space = a.key_space(&name).expect("name");
        assert_eq!(a.shard_of(&space), Some(slot_of_name(&name)));

        let lock = a.lock(&name);
        let first = lock.lock().await.expect("lock");
        let again = lock.clone().lock().await.expect("re-enter");
        assert_eq!(again.fencing_token(), first.fencing_token());
        assert_eq!(lock.hold_count().await.expect("hold count"), 2);
        // The hold lives on the master serving the name's slot.
        let count = cluster.cmd_on(master, &["HGET", &lock_key(&name), "count"]);
        assert_eq!(count, Value::BulkString(b"2".to_vec()), "{name}");

        let other = b.lock(&name);
        assert!(other.try_lock().await.expect("try_lock").is_none());
        assert!(other.is_locked().await.expect("is_locked"));
        let waiter = tokio::spawn(async move { other.lock().await });
        await_shard_subscriber(&cluster, master, &wake_channel(&name, &b)).await;
        let mut listener = ShardListener::new(&cluster, master, &wake_channel(&name, &b));
        again.unlock().await.expect("unlock the re-entry");
        assert_still_waiting("the other client's waiter", ms(200), &waiter).await;
        let first_token = first.fencing_token();
        let released = Instant::now();
        first.unlock().await.expect("unlock");
        // The waiting task offered to take the lock in its wake-up (over sharded pub/sub),
        // and the release handed it over.
        let message = listener.expect_message(WAKE);
        let taken = finish("the other client's waiter", WAKE, waiter)
            .await
            .expect("the waiter's lock");
        eprintln!("{name}: handed over in {:?}", released.elapsed());
        assert_eq!(
            message,
            format!("g {} {}", message_attempt(&message), first_token + 1),
            "a hand-over, with the next fencing token"
        );
        assert_eq!(taken.fencing_token(), first_token + 1);
        taken.unlock().await.expect("unlock");
        assert!(!a.lock(&name).is_locked().await.expect("is_locked"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_lock_serves_three_waiters_in_arrival_order() {
    let cluster = shared_cluster();
    let (a, b) = (
        cluster_client(&cluster).await,
        cluster_client(&cluster).await,
    );
    let (master, name) = names_on_each_master(&cluster, "fair", 1).remove(1);
    let queue = common::keys::fair_lock(&name).queue;

    let holder = a.fair_lock(&name).lock().await.expect("fair lock");
    let log: Arc<Mutex<Vec<usize>>> = Arc::default();
    let mut waiters = Vec::new();
    let mut listener = None;
    // Waiters on both clients, each started once the one before is queued.
    for who in 0..3 {
        let lock = if who == 1 {
            a.fair_lock(&name)
        } else {
            b.fair_lock(&name)
        };
        let log = log.clone();
        waiters.push(tokio::spawn(async move {
            let guard = lock.lock().await?;
            log.lock().unwrap().push(who);
            tokio::time::sleep(ms(5)).await;
            let token = guard.fencing_token();
            guard.unlock().await?;
            Ok::<u64, Error>(token)
        }));
        eventually(format!("{} waiters are queued", who + 1), SETTLE, || {
            zcard_on(&cluster, master, &queue) == who as i64 + 1
        })
        .await;
        if who == 0 {
            // The first waiter's own channel, which the release must publish on.
            let pattern = common::keys::fair_lock(&name).wake_channels.of("*");
            let channels =
                || strings(&cluster.cmd_on(master, &["PUBSUB", "SHARDCHANNELS", &pattern]));
            eventually("the first waiter subscribed", SETTLE, || {
                channels().len() == 1
            })
            .await;
            listener = Some(ShardListener::new(&cluster, master, &channels()[0]));
        }
    }
    assert!(log.lock().unwrap().is_empty(), "nobody gets a held lock");
    let mut last = holder.fencing_token();
    holder.unlock().await.expect("unlock");
    listener.expect("listening").expect_message(WAKE);
    for waiter in waiters {
        let token = finish("a fair waiter", SETTLE, waiter)
            .await
            .expect("waiter");
        assert!(token > last, "fencing tokens increase: {last} then {token}");
        last = token;
    }
    assert_eq!(*log.lock().unwrap(), vec![0, 1, 2], "not in arrival order");
    eventually("the queue is gone", SETTLE, || {
        !exists_on(&cluster, master, &queue)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_write_lock_readers_share_and_a_writer_waits_for_them() {
    let cluster = shared_cluster();
    let (a, b) = (
        cluster_client(&cluster).await,
        cluster_client(&cluster).await,
    );
    let (master, name) = names_on_each_master(&cluster, "rw", 1).remove(2);
    let rw = common::keys::rw(&name);
    let (readers_key, writers_key) = (rw.readers, rw.writers);

    let read_a = a
        .read_write_lock(&name)
        .try_read()
        .await
        .expect("read")
        .expect("free");
    let read_b = b
        .read_write_lock(&name)
        .try_read()
        .await
        .expect("read")
        .expect("readers share");
    assert_eq!(zcard_on(&cluster, master, &readers_key), 2);
    assert!(b
        .read_write_lock(&name)
        .try_write()
        .await
        .expect("try_write")
        .is_none());

    let writer_lock = b.read_write_lock(&name);
    let writer = tokio::spawn(async move { writer_lock.write().await });
    eventually("the writer waits", SETTLE, || {
        zcard_on(&cluster, master, &writers_key) == 1
    })
    .await;
    // Writers are preferred: a new reader does not get past the waiting writer.
    assert!(a
        .read_write_lock(&name)
        .try_read()
        .await
        .expect("try_read")
        .is_none());
    read_a.unlock().await.expect("read unlock");
    assert_still_waiting("the writer", ms(200), &writer).await;
    let mut listener = ShardListener::new(&cluster, master, &rw.channel);
    read_b.unlock().await.expect("read unlock");
    listener.expect_message(WAKE);
    let write = finish("the writer", WAKE, writer).await.expect("write");
    assert!(a
        .read_write_lock(&name)
        .try_read()
        .await
        .expect("try_read")
        .is_none());
    write.unlock().await.expect("write unlock");
    assert!(a
        .read_write_lock(&name)
        .try_read()
        .await
        .expect("try_read")
        .is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphores_wake_a_waiter_of_the_other_client_on_release() {
    let cluster = shared_cluster();
    let (a, b) = (
        cluster_client(&cluster).await,
        cluster_client(&cluster).await,
    );
    let names = names_on_each_master(&cluster, "sem", 1);

    let (master, name) = &names[0];
    let semaphore = a.semaphore(name);
    assert!(semaphore.try_set_permits(1).await.expect("set permits"));
    let permit = semaphore.acquire().await.expect("acquire");
    let other = b.semaphore(name);
    assert!(other.try_acquire().await.expect("try_acquire").is_none());
    let waiter = tokio::spawn(async move { other.acquire().await });
    let channel = common::keys::semaphore(name).wake_channels.of(b.id());
    await_shard_subscriber(&cluster, *master, &channel).await;
    let mut listener = ShardListener::new(&cluster, *master, &channel);
    assert_still_waiting("the semaphore waiter", ms(100), &waiter).await;
    permit.release().await.expect("release");
    listener.expect_message(WAKE);
    let permit = finish("the semaphore waiter", WAKE, waiter)
        .await
        .expect("acquire");
    assert_eq!(semaphore.available_permits().await.expect("permits"), 0);
    permit.release().await.expect("release");
    assert_eq!(semaphore.available_permits().await.expect("permits"), 1);

    let (master, name) = &names[1];
    let expirable = a.expirable_semaphore(name);
    assert!(expirable.try_set_permits(1).await.expect("set permits"));
    let permit = expirable.acquire().await.expect("acquire");
    let other = b.expirable_semaphore(name);
    assert!(other.try_acquire().await.expect("try_acquire").is_none());
    let waiter = tokio::spawn(async move { other.acquire().await });
    let channel = common::keys::expirable(name).wake_channels.of(b.id());
    await_shard_subscriber(&cluster, *master, &channel).await;
    let mut listener = ShardListener::new(&cluster, *master, &channel);
    assert_still_waiting("the expirable semaphore waiter", ms(100), &waiter).await;
    permit.release().await.expect("release");
    listener.expect_message(WAKE);
    let permit = finish("the expirable semaphore waiter", WAKE, waiter)
        .await
        .expect("acquire");
    assert_eq!(expirable.available_permits().await.expect("permits"), 0);
    permit.release().await.expect("release");
    assert_eq!(expirable.available_permits().await.expect("permits"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latch_waiter_of_the_other_client_returns_when_the_count_reaches_zero() {
    let cluster = shared_cluster();
    let (a, b) = (
        cluster_client(&cluster).await,
        cluster_client(&cluster).await,
    );
    let (master, name) = names_on_each_master(&cluster, "latch", 1).remove(2);

    let latch = a.count_down_latch(&name);
    assert!(latch.try_set_count(2).await.expect("arm"));
    let other = b.count_down_latch(&name);
    let waiter = tokio::spawn(async move { other.wait().await });
    let channel = common::keys::latch(&name).channel;
    await_shard_subscriber(&cluster, master, &channel).await;
    latch.count_down().await.expect("count down");
    assert_eq!(latch.count().await.expect("count"), 1);
    assert_still_waiting("the latch waiter", ms(300), &waiter).await;
    let mut listener = ShardListener::new(&cluster, master, &channel);
    latch.count_down().await.expect("count down");
    listener.expect_message(WAKE);
    finish("the latch waiter", WAKE, waiter)
        .await
        .expect("wait");
    assert!(b
        .count_down_latch(&name)
        .wait_for(Duration::ZERO)
        .await
        .expect("wait_for"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_lock_over_three_slots_is_all_or_none() {
    let cluster = shared_cluster();
    let (a, b) = (
        cluster_client(&cluster).await,
        cluster_client(&cluster).await,
    );
    let names = names_on_each_master(&cluster, "all-or-none", 1);
    let multi = a.multi_lock(names.iter().map(|(_, name)| a.lock(name)));

    // One lock busy (held by the other client): nothing is taken.
    let (busy_master, busy) = &names[1];
    let busy_guard = b.lock(busy).lock().await.expect("lock");
    assert!(multi.try_lock().await.expect("try_lock").is_none());
    for (master, name) in &names {
        let held = exists_on(&cluster, *master, &lock_key(name));
        assert_eq!(held, name == busy, "{name} after the failed try_lock");
    }
    assert!(exists_on(&cluster, *busy_master, &lock_key(busy)));
    // Nor when waiting a little.
    assert!(multi
        .try_lock_for(ms(300))
        .await
        .expect("try_lock_for")
        .is_none());
    for (master, name) in names.iter().filter(|(_, name)| name != busy) {
        assert!(!exists_on(&cluster, *master, &lock_key(name)), "{name}");
        assert!(!b.lock(name).is_locked().await.expect("is_locked"));
    }

    busy_guard.unlock().await.expect("unlock");
    let guard = multi.try_lock().await.expect("try_lock").expect("all free");
    assert_eq!(guard.fencing_tokens().len(), 3);
    for (master, name) in &names {
        assert!(exists_on(&cluster, *master, &lock_key(name)), "{name}");
        assert!(b.lock(name).try_lock().await.expect("try_lock").is_none());
    }
    guard.unlock().await.expect("unlock");
    for (master, name) in &names {
        assert!(!exists_on(&cluster, *master, &lock_key(name)), "{name}");
    }
}

// ---------------------------------------------------------------------------------------------
// 2. One slot per primitive
// ---------------------------------------------------------------------------------------------

/// The keys (a trailing `*` matches any rest) and the channel (a prefix) of a primitive named
/// by the argument.
type KeysOf = fn(&str) -> (Vec<String>, String);

/// The kinds of primitive, with the keys and channel a primitive of that kind has in the
/// state `every_key_of_a_primitive_shares_one_slot_on_its_master` puts it in.
const KINDS: &[(&str, KeysOf)] = &[
    ("lock", |name| {
        let lock = common::keys::lock(name);
        let wake = lock.wake_channels.prefix().to_owned();
        (vec![lock.hash, lock.fence], wake)
    }),
    ("fair", |name| {
        let fair = common::keys::fair_lock(name);
        let wake = fair.wake_channels.prefix().to_owned();
        (
            vec![fair.hash, fair.fence, fair.queue, fair.deadlines],
            wake,
        )
    }),
    ("rw", |name| {
        let rw = common::keys::rw(name);
        (vec![rw.hash, rw.readers, rw.writers], rw.channel)
    }),
    ("sem", |name| {
        let sem = common::keys::semaphore(name);
        // Each waiting client listens on a channel of its own.
        let wake = sem.wake_channels.prefix().to_owned();
        let attempts = sem.attempt_records.of("*");
        (vec![sem.permits, sem.generation, attempts], wake)
    }),
    ("xsem", |name| {
        let xsem = common::keys::expirable(name);
        let wake = xsem.wake_channels.prefix().to_owned();
        (vec![xsem.permits, xsem.leases], wake)
    }),
    ("latch", |name| {
        let latch = common::keys::latch(name);
        (vec![latch.latch], latch.channel)
    }),
];

/// The name inside the hash tag of a key or channel `<prefix>:{<name>}:<suffix>`.
fn name_of(key: &str) -> String {
    let (_, rest) = key.split_once('{').expect("tagged key");
    let (name, _) = rest.split_once("}:").expect("tagged key");
    name.to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_key_of_a_primitive_shares_one_slot_on_its_master() {
    let cluster = shared_cluster();
    let (a, b) = (
        cluster_client(&cluster).await,
        cluster_client(&cluster).await,
    );
    let mut held: Vec<Box<dyn std::any::Any + Send>> = Vec::new();
    let mut waiters: Vec<JoinHandle<()>> = Vec::new();
    // Every kind on every master: (kind, name, master).
    let mut primitives: Vec<(&str, String, usize)> = Vec::new();
    for &(kind, _) in KINDS {
        for (master, name) in names_on_each_master(&cluster, &format!("slots-{kind}"), 1) {
            primitives.push((kind, name, master));
        }
    }

    // Put each in a state where all its keys exist, with a waiter of the other client.
    for (kind, name, master) in &primitives {
        let (master, name) = (*master, name.clone());
        match *kind {
            "lock" => {
                held.push(Box::new(a.lock(&name).lock().await.expect("lock")));
                let lock = b.lock(&name);
                waiters.push(tokio::spawn(async move {
                    let _ = lock.lock().await;
                }));
            }
            "fair" => {
                held.push(Box::new(a.fair_lock(&name).lock().await.expect("fair")));
                let lock = b.fair_lock(&name);
                waiters.push(tokio::spawn(async move {
                    let _ = lock.lock().await;
                }));
                let queue = common::keys::fair_lock(&name).queue;
                eventually("the fair waiter is queued", SETTLE, || {
                    zcard_on(&cluster, master, &queue) == 1
                })
                .await;
            }
            "rw" => {
                held.push(Box::new(
                    a.read_write_lock(&name).read().await.expect("read"),
                ));
                let lock = b.read_write_lock(&name);
                waiters.push(tokio::spawn(async move {
                    let _ = lock.write().await;
                }));
                let writers = common::keys::rw(&name).writers;
                eventually("the writer waits", SETTLE, || {
                    zcard_on(&cluster, master, &writers) == 1
                })
                .await;
            }
            "sem" => {
                let semaphore = a.semaphore(&name);
                assert!(semaphore.try_set_permits(2).await.expect("set permits"));
                held.push(Box::new(semaphore.acquire_many(2).await.expect("acquire")));
                let other = b.semaphore(&name);
                waiters.push(tokio::spawn(async move {
                    let _ = other.acquire().await;
                }));
            }
            "xsem" => {
                let semaphore = a.expirable_semaphore(&name);
                assert!(semaphore.try_set_permits(2).await.expect("set permits"));
                for _ in 0..2 {
                    held.push(Box::new(semaphore.acquire().await.expect("acquire")));
                }
                let other = b.expirable_semaphore(&name);
                waiters.push(tokio::spawn(async move {
                    let _ = other.acquire().await;
                }));
            }
            "latch" => {
                assert!(a
                    .count_down_latch(&name)
                    .try_set_count(3)
                    .await
                    .expect("arm"));
                let latch = b.count_down_latch(&name);
                waiters.push(tokio::spawn(async move {
                    let _ = latch.wait().await;
                }));
            }
            other => unreachable!("{other}"),
        }
    }

    // Every waiter has subscribed its channel by now.
    let masters = cluster.masters();
    let channels_of = |master: usize| -> Vec<String> {
        strings(&cluster.cmd_on(master, &["PUBSUB", "SHARDCHANNELS", "redisync:{slots-*"]))
    };
    eventually("every waiter has subscribed", SETTLE, || {
        masters.iter().map(|&m| channels_of(m).len()).sum::<usize>() == primitives.len()
    })
    .await;

    // Where each key and channel is: name -> (key, node, is channel).
    let mut found: BTreeMap<String, Vec<(String, usize, bool)>> = BTreeMap::new();
    for &master in &masters {
        for key in cluster.keys_on_node(master) {
            if key.starts_with("redisync:{slots-") {
                let name = name_of(&key);
                found.entry(name).or_default().push((key, master, false));
            }
        }
        for channel in channels_of(master) {
            let name = name_of(&channel);
            found.entry(name).or_default().push((channel, master, true));
        }
    }

    let mut covered = BTreeSet::new();
    for (kind, name, master) in &primitives {
        let (_, keys_of) = KINDS.iter().find(|(k, _)| k == kind).unwrap();
        let (expected_keys, channel) = keys_of(name);
        let entries = found
            .remove(name)
            .unwrap_or_else(|| panic!("no key of {kind} {name} found"));
        for expected in &expected_keys {
            let present = entries.iter().any(|(key, _, is_channel)| {
                !is_channel
                    && match expected.strip_suffix('*') {
                        Some(prefix) => key.starts_with(prefix),
                        None => key == expected,
                    }
            });
            assert!(
                present,
                "{kind} {name}: key {expected} missing: {entries:?}"
            );
        }
        assert!(
            entries
                .iter()
                .any(|(key, _, is_channel)| *is_channel && key.starts_with(&channel)),
            "{kind} {name}: channel {channel} not subscribed on its shard: {entries:?}"
        );
        let slot = slot_of_name(name);
        assert_eq!(cluster.master_for_slot(slot), *master);
        for (key, node, is_channel) in &entries {
            assert_eq!(cluster.slot_of(key), slot, "CLUSTER KEYSLOT {key}");
            assert_eq!(keys::slot(key), slot, "keys::slot({key})");
            assert_eq!(
                node, master,
                "{key} (channel: {is_channel}) is on node {node}, not on the master of slot {slot}"
            );
        }
        covered.insert(*master);
        eprintln!("{kind} {name}: slot {slot}, node {master}: {entries:?}");
    }
    assert_eq!(covered.len(), 3, "the primitives cover every master");
    assert!(found.is_empty(), "keys of unknown primitives: {found:?}");

    for waiter in waiters {
        waiter.abort();
    }
    drop(held);
}

// ---------------------------------------------------------------------------------------------
// 3. Sharded pub/sub
// ---------------------------------------------------------------------------------------------

/// Counts commands per node, so it has a cluster of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_cluster_of_its_own_a_wake_up_goes_over_sharded_pub_sub_to_one_shard() {
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start(3, 1))
        .await
        .expect("start the cluster");
    let (a, b) = (
        cluster_client(&cluster).await,
        cluster_client(&cluster).await,
    );
    let (master, name) = names_on_each_master(&cluster, "sharded", 1).remove(0);
    let channel = wake_channel(&name, &b);
    let shard: Vec<usize> = std::iter::once(master)
        .chain(cluster.replicas_of(master))
        .collect();
    assert_eq!(shard.len(), 2);

    let guard = a.lock(&name).lock().await.expect("lock");
    let lock = b.lock(&name);
    let waiter = tokio::spawn(async move {
        let guard = lock.lock().await;
        (Instant::now(), guard)
    });
    await_shard_subscriber(&cluster, master, &channel).await;
    for node in 0..cluster.node_count() {
        assert_eq!(
            classic_subscribers(&cluster, node, &channel),
            0,
            "classic SUBSCRIBE on node {node}"
        );
        if node != master && cluster.masters().contains(&node) {
            assert_eq!(
                shard_subscribers(&cluster, node, &channel),
                0,
                "node {node}"
            );
        }
    }
    assert_still_waiting("the waiter", ms(100), &waiter).await;

    let spublish_before = calls_per_node(&cluster, "spublish");
    let released = Instant::now();
    guard.unlock().await.expect("unlock");
    let (acquired, taken) = finish("the waiter", WAKE, waiter).await;
    let taken = taken.expect("the waiter's lock");
    let handoff = acquired.duration_since(released);
    assert!(
        handoff < Duration::from_secs(1),
        "the waiter got the lock {handoff:?} after the release (its lease is 30 s)"
    );
    let spublish_after = calls_per_node(&cluster, "spublish");
    let publish = calls_per_node(&cluster, "publish");
    eprintln!(
        "handoff {handoff:?}; spublish per node {spublish_before:?} -> {spublish_after:?}; \
         publish {publish:?}; shard {shard:?}"
    );
    assert!(
        spublish_after[master] > spublish_before[master],
        "the release did not SPUBLISH on the owning master {master}"
    );
    for node in (0..cluster.node_count()).filter(|node| !shard.contains(node)) {
        assert_eq!(
            spublish_after[node], spublish_before[node],
            "node {node} (another shard) saw SPUBLISH"
        );
    }
    assert_eq!(
        publish,
        vec![0; cluster.node_count()],
        "classic PUBLISH used"
    );
    taken.unlock().await.expect("unlock");
    assert_eq!(
        calls_per_node(&cluster, "publish"),
        vec![0; cluster.node_count()]
    );
}

// ---------------------------------------------------------------------------------------------
// 4. Watchdog batches per slot
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_renews_thirty_locks_in_one_batch_per_slot() {
    const TAGS: usize = 10;
    const PER_TAG: usize = 3;
    let watchdog = Duration::from_millis(1500);
    let cluster = shared_cluster();
    let a = Client::cluster_builder(cluster.seed_urls())
        .watchdog_timeout(watchdog)
        .build()
        .await
        .expect("connect");
    let b = cluster_client(&cluster).await;

    // Ten hash tags in ten slots over every master, three locks each: `wd:{k}:j`.
    let map = cluster.slot_map();
    let mut tags: Vec<(u16, usize, String)> = Vec::new();
    let mut k = 0;
    while tags.len() < TAGS {
        let name = format!("wd:{{{k}}}:0");
        let slot = slot_of_name(&name);
        let master = owner_in(&map, slot);
        let per_master = tags.iter().filter(|(_, m, _)| *m == master).count();
        if per_master < TAGS.div_ceil(3) && !tags.iter().any(|(s, _, _)| *s == slot) {
            tags.push((slot, master, k.to_string()));
        }
        k += 1;
    }
    let mut locks: Vec<(usize, String)> = Vec::new();
    for (slot, master, tag) in &tags {
        for j in 0..PER_TAG {
            let name = format!("wd:{{{tag}}}:{j}");
            assert_eq!(cluster.slot_of(&lock_key(&name)), *slot, "{name}");
            locks.push((*master, name));
        }
    }
    let masters: BTreeSet<usize> = locks.iter().map(|(m, _)| *m).collect();
    assert_eq!(masters.len(), 3, "the locks cover every master");

    let mut guards = Vec::new();
    for (_, name) in &locks {
        guards.push(a.lock(name).lock().await.expect("lock"));
    }
    let before = a.stats();
    tokio::time::sleep(watchdog * 3).await;
    let after = a.stats();
    let renewals = after.renewals - before.renewals;
    let scripts = after.scripts_sent - before.scripts_sent;
    eprintln!("{renewals} renewals in {scripts} scripts: {after:?}");
    // A round every 500 ms: about nine in the window; at least five.
    assert!(
        renewals >= (5 * locks.len()) as u64,
        "only {renewals} renewals"
    );
    // A script renews the three holds of its slot; one per hold would be as many as renewals.
    assert!(
        scripts * 2 < renewals,
        "{scripts} renewal scripts for {renewals} renewals: not batched per slot"
    );
    assert_eq!(after.lost_leases, 0, "{after:?}");
    for ((master, name), guard) in locks.iter().zip(&guards) {
        assert!(!guard.is_lost(), "{name}");
        let pttl = int(&cluster.cmd_on(*master, &["PTTL", &lock_key(name)]));
        assert!(pttl > 0, "{name}: PTTL {pttl} on node {master}");
        assert!(
            b.lock(name).try_lock().await.expect("try_lock").is_none(),
            "{name} was free for another client"
        );
    }

    let unlocks = guards
        .into_iter()
        .map(|guard| tokio::spawn(guard.unlock()))
        .collect();
    let unlocked = join_all(unlocks).await;
    for (outcome, (_, name)) in unlocked.into_iter().zip(&locks) {
        outcome.unwrap_or_else(|e| panic!("unlock {name}: {e}"));
    }
    for (master, name) in &locks {
        assert!(!exists_on(&cluster, *master, &lock_key(name)), "{name}");
    }
    assert_eq!(a.local_state().renewed_holds, 0);
    assert_eq!(a.stats().lost_leases, 0);
}

// ---------------------------------------------------------------------------------------------
// 5. Multi-lock: one script per slot, no deadlock
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_lock_takes_one_script_per_slot_and_opposite_orders_do_not_deadlock() {
    let cluster = shared_cluster();
    let a = cluster_client(&cluster).await;
    // The same seeds in another order: the same `server()`, so the same canonical order.
    let mut seeds = cluster.seed_urls();
    seeds.reverse();
    let b = Client::cluster_builder(seeds)
        .build()
        .await
        .expect("connect");
    assert_eq!(a.server(), b.server());

    // Locks with a common hash tag share a slot: one script.
    let tagged = [
        "order:{42}:items",
        "order:{42}:invoice",
        "order:{42}:shipping",
    ];
    let slot = cluster.slot_of(&lock_key(tagged[0]));
    let tag_master = cluster.master_for_slot(slot);
    for name in tagged {
        assert_eq!(cluster.slot_of(&lock_key(name)), slot, "{name}");
        assert_eq!(slot_of_name(name), slot, "{name}");
    }
    let multi = a.multi_lock(tagged.iter().map(|name| a.lock(*name)));
    let before = a.stats();
    let guard = multi.try_lock().await.expect("try_lock").expect("free");
    let after = a.stats();
    assert_eq!(
        after.scripts_sent - before.scripts_sent,
        1,
        "one slot, one script"
    );
    assert_eq!(after.acquires - before.acquires, 3);
    for name in tagged {
        assert!(exists_on(&cluster, tag_master, &lock_key(name)), "{name}");
    }
    guard.unlock().await.expect("unlock");

    // Three slots (on three masters): three scripts.
    let spread = names_on_each_master(&cluster, "per-slot", 1);
    let multi = a.multi_lock(spread.iter().map(|(_, name)| a.lock(name)));
    let before = a.stats();
    let guard = multi.try_lock().await.expect("try_lock").expect("free");
    let after = a.stats();
    assert_eq!(
        after.scripts_sent - before.scripts_sent,
        3,
        "three slots, three scripts"
    );
    assert_eq!(after.acquires - before.acquires, 3);
    for (master, name) in &spread {
        assert!(exists_on(&cluster, *master, &lock_key(name)), "{name}");
    }
    guard.unlock().await.expect("unlock");

    // Two clients, the same five locks in opposite orders, contending.
    let mut names: Vec<String> = names_on_each_master(&cluster, "deadlock", 1)
        .into_iter()
        .map(|(_, name)| name)
        .collect();
    names.extend(["deadlock:{7}:a".to_owned(), "deadlock:{7}:b".to_owned()]);
    let inside = Arc::new(AtomicBool::new(false));
    let mut runs = Vec::new();
    for (client, reversed) in [(a.clone(), false), (b.clone(), true)] {
        let mut order = names.clone();
        if reversed {
            order.reverse();
        }
        let inside = inside.clone();
        runs.push(tokio::spawn(async move {
            let multi = client.multi_lock(order.iter().map(|name| client.lock(name)));
            for _ in 0..20 {
                let guard = multi.lock().await?;
                assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                tokio::task::yield_now().await;
                inside.store(false, Ordering::SeqCst);
                guard.unlock().await?;
            }
            Ok::<(), Error>(())
        }));
    }
    for run in runs {
        finish("a multi-lock run (deadlock?)", Duration::from_secs(30), run)
            .await
            .expect("multi-lock run");
    }
}

// ---------------------------------------------------------------------------------------------
// 6. Replica sync
// ---------------------------------------------------------------------------------------------

/// Pauses a replica, so it has a cluster of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_cluster_of_its_own_replica_sync_waits_for_the_replica_of_the_owning_master() {
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start(3, 1))
        .await
        .expect("start the cluster");
    let synced = Client::cluster_builder(cluster.seed_urls())
        .replica_sync(1, ms(300))
        .command_timeout(ms(2000))
        .build()
        .await
        .expect("connect");
    let plain = cluster_client(&cluster).await;
    let names = names_on_each_master(&cluster, "synced", 1);

    // With every replica answering, everything works as usual.
    for (master, name) in &names {
        let guard = synced.lock(name).lock().await.expect("lock");
        let replica = cluster.replica_of(*master).expect("a replica");
        assert!(
            cluster.keys_on_node(replica).contains(&lock_key(name)),
            "{name} is on the replica of node {master}"
        );
        guard.unlock().await.expect("unlock");
    }
    let semaphore = synced.semaphore(&names[0].1);
    assert!(semaphore.try_set_permits(1).await.expect("set permits"));
    semaphore
        .acquire()
        .await
        .expect("acquire")
        .release()
        .await
        .expect("release");

    let (master, x) = &names[0];
    let (other_master, y) = &names[1];
    let replica = cluster.replica_of(*master).expect("a replica");
    let paused = Paused::pause(cluster.node(replica));
    let started = Instant::now();
    let outcome = synced.lock(x).try_lock().await;
    assert!(
        matches!(outcome, Err(Error::NotReplicated)),
        "acquire of {x} while the replica of node {master} is paused: {:?}",
        outcome.as_ref().map(Option::is_some)
    );
    eprintln!("NotReplicated after {:?}", started.elapsed());
    // Another shard's replica answers: its locks work.
    let guard = synced
        .lock(y)
        .try_lock()
        .await
        .expect("try_lock on another shard")
        .expect("free");
    assert!(exists_on(&cluster, *other_master, &lock_key(y)));
    guard.unlock().await.expect("unlock");
    // The unreplicated hold was given back (in the background).
    let free = plain
        .lock(x)
        .try_lock_for(Duration::from_secs(3))
        .await
        .expect("try_lock_for")
        .expect("the unreplicated hold is given back");
    eprintln!("paused for {:?}", started.elapsed());
    drop(paused);
    free.unlock().await.expect("unlock");

    // Once the replica answers again, acquires succeed again.
    let deadline = Instant::now() + SETTLE;
    loop {
        match synced.lock(x).try_lock().await {
            Ok(Some(guard)) => {
                guard.unlock().await.expect("unlock");
                break;
            }
            Err(Error::NotReplicated) if Instant::now() < deadline => {
                tokio::time::sleep(ms(100)).await
            }
            other => panic!("acquire after the replica resumed: {other:?}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 7. ACL
// ---------------------------------------------------------------------------------------------

/// The rule set from DEPLOYMENT.md ("ACL") for the default prefix, with the additions its
/// "Redis Cluster" section lists.
const CLUSTER_RULES: &str = "on >s3cret resetkeys ~redisync:* resetchannels &redisync:* -@all \
    +evalsha +script|load +ping +subscribe +unsubscribe +hello +select \
    +decr +decrby +del +exists +get +hdel +hget +hgetall +hincrby +hlen +hmget +hset \
    +incr +incrby +mget +pexpire +pexpireat +pttl +publish +rename +set +time +type +zadd \
    +zcard +zcount +zrange +zrangebyscore +zrem +zremrangebyscore +zscore \
    +eval +cluster|slots +asking +spublish +ssubscribe +sunsubscribe";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_with_the_documented_cluster_rules_can_lock_and_wait() {
    let cluster = shared_cluster();
    // ACL SETUSER is per node: on every one, replicas included (they may be promoted).
    for node in 0..cluster.node_count() {
        let mut args = vec!["ACL", "SETUSER", "app"];
        args.extend(CLUSTER_RULES.split_whitespace());
        cluster.cmd_on(node, &args);
        cluster.cmd_on(node, &["ACL", "LOG", "RESET"]);
    }
    let seeds: Vec<String> = cluster
        .nodes()
        .iter()
        .map(|node| format!("redis://app:s3cret@127.0.0.1:{}/", node.port()))
        .collect();
    let a = Client::cluster_builder(seeds.clone())
        .build()
        .await
        .expect("connect as the restricted user");
    let b = Client::cluster_builder(seeds.clone())
        .build()
        .await
        .expect("connect as the restricted user");
    let renewer = Client::cluster_builder(seeds)
        .watchdog_timeout(ms(900))
        .build()
        .await
        .expect("connect as the restricted user");
    // Every primary was asked who it is (HELLO is open to every user).
    let found = a.server_version().expect("the primaries named themselves");
    assert!(found.is_supported(), "{found}");
    let (master, name) = names_on_each_master(&cluster, "acl", 1).remove(1);
    let channel = wake_channel(&name, &b);

    // A contended lock (30 s lease), handed over by a sharded wake-up.
    let guard = a.lock(&name).lock().await.expect("lock");
    let lock = b.lock(&name);
    let waiter = tokio::spawn(async move { lock.lock().await });
    await_shard_subscriber(&cluster, master, &channel).await;
    let mut listener = ShardListener::new(&cluster, master, &channel);
    guard.unlock().await.expect("unlock");
    listener.expect_message(WAKE);
    let taken = finish("the restricted user's waiter", WAKE, waiter)
        .await
        .expect("lock");
    taken.unlock().await.expect("unlock");

    // Renewal by the watchdog.
    let renewed = renewer.lock(&name).lock().await.expect("lock");
    tokio::time::sleep(ms(1000)).await;
    assert!(!renewed.is_lost(), "renewal works for the restricted user");
    assert!(renewer.stats().renewals >= 1, "{:?}", renewer.stats());
    renewed.unlock().await.expect("unlock");

    // A semaphore, with a waiter.
    let semaphore = a.semaphore(&name);
    assert!(semaphore.try_set_permits(1).await.expect("set permits"));
    let permit = semaphore.acquire().await.expect("acquire");
    let other = b.semaphore(&name);
    let waiter = tokio::spawn(async move { other.acquire().await });
    let channel = common::keys::semaphore(&name).wake_channels.of(b.id());
    await_shard_subscriber(&cluster, master, &channel).await;
    let mut listener = ShardListener::new(&cluster, master, &channel);
    permit.release().await.expect("release");
    listener.expect_message(WAKE);
    finish("the semaphore waiter", WAKE, waiter)
        .await
        .expect("acquire")
        .release()
        .await
        .expect("release");

    // No command was refused along the way, not even one whose failure redisync or the
    // driver would have shrugged off.
    for node in 0..cluster.node_count() {
        let log = cluster.cmd_on(node, &["ACL", "LOG"]);
        assert_eq!(log, Value::Array(vec![]), "ACL LOG of node {node}");
    }

    // Nothing outside the prefix, on the node that serves the key (no MOVED in the way).
    let outside = "someone-else";
    let owner = cluster.master_for_key(outside);
    let mut conn = redis::Client::open(format!(
        "redis://app:s3cret@127.0.0.1:{}/",
        cluster.node(owner).port()
    ))
    .expect("url")
    .get_connection()
    .expect("connect as the restricted user");
    let wrote: redis::RedisResult<()> = redis::cmd("SET").arg(outside).arg("1").query(&mut conn);
    let error = wrote.expect_err("SET outside the prefix was allowed");
    assert_eq!(error.code(), Some("NOPERM"), "{error}");
}

// ---------------------------------------------------------------------------------------------
// 8. Bad configuration
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_bad_seeds_building_a_cluster_client_fails_fast() {
    let empty = Client::cluster_builder(Vec::<String>::new()).build().await;
    assert!(matches!(empty, Err(Error::InvalidArgument(_))), "{empty:?}");
    let malformed = Client::cluster_builder(["nope://127.0.0.1:1/"])
        .build()
        .await;
    assert!(
        matches!(malformed, Err(Error::InvalidArgument(_))),
        "{malformed:?}"
    );

    // A port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    let started = Instant::now();
    let closed = Client::cluster_builder([format!("redis://127.0.0.1:{port}/")])
        .command_timeout(Duration::from_secs(1))
        .build()
        .await;
    let took = started.elapsed();
    eprintln!("closed port: {:?} after {took:?}", closed.as_ref().err());
    match &closed {
        Err(err) => assert!(is_outage(err), "{err:?}"),
        Ok(_) => panic!("a cluster client was built on a closed port"),
    }
    assert!(took < Duration::from_secs(5), "took {took:?}");

    // A seed that accepts connections (the kernel does, into the backlog) but never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("a listener");
    let port = silent.local_addr().expect("its address").port();
    let started = Instant::now();
    let outcome = Client::cluster_builder([format!("redis://127.0.0.1:{port}/")])
        .command_timeout(Duration::from_secs(1))
        .build()
        .await;
    let took = started.elapsed();
    eprintln!("silent seed: {:?} after {took:?}", outcome.as_ref().err());
    match &outcome {
        Err(err) => assert!(is_outage(err), "{err:?}"),
        Ok(_) => panic!("a cluster client was built on a silent seed"),
    }
    assert!(took < Duration::from_secs(5), "took {took:?}");
    drop(silent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_election_hands_over_and_announces_changes_on_every_master() {
    use futures_util::StreamExt;
    let cluster = shared_cluster();
    let (a, b) = (
        cluster_client(&cluster).await,
        cluster_client(&cluster).await,
    );
    for (master, name) in names_on_each_master(&cluster, "election", 1) {
        let mut observer = Box::pin(b.leader_election(&name).observe());
        let first_item = tokio::time::timeout(SETTLE, observer.next()).await;
        assert!(
            matches!(first_item, Ok(Some(Ok(None)))),
            "{name}: {first_item:?}"
        );
        let election = common::keys::election(&name);
        let changes = election.changes.clone();
        await_shard_subscriber(&cluster, master, &changes).await;
        // The change notice is published on the channel's shard.
        let mut listener = ShardListener::new(&cluster, master, &changes);

        let first = a
            .leader_election(&name)
            .campaign("a")
            .await
            .expect("campaign");
        listener.expect_message(WAKE);
        let seen = tokio::time::timeout(SETTLE, observer.next()).await;
        assert!(
            matches!(&seen, Ok(Some(Ok(Some(leader)))) if leader.value == "a"
                && leader.term == first.term()),
            "{name}: {seen:?}"
        );
        // Every key lives on the master serving the name's slot.
        let (leader_key, term_key) = (election.leader.clone(), election.term.clone());
        assert!(exists_on(&cluster, master, &leader_key), "{name}");
        assert!(exists_on(&cluster, master, &term_key), "{name}");

        let other = b.leader_election(&name);
        assert!(other.try_campaign("b").await.expect("try").is_none());
        let waiter = tokio::spawn(async move { other.campaign("b").await });
        let wake = election.wake_channels.of(b.id());
        await_shard_subscriber(&cluster, master, &wake).await;
        assert_eq!(zcard_on(&cluster, master, &election.waiters), 1);
        let first_term = first.term();
        first.resign().await.expect("resign");
        let second = finish("the waiting candidate", WAKE, waiter)
            .await
            .expect("leads");
        assert!(second.term() > first_term);
        second.resign().await.expect("resign");
        assert!(!exists_on(&cluster, master, &leader_key), "{name}");
    }
}
