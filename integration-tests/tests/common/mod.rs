//! Helpers shared by the integration tests: clients, the lock's Redis names under the default
//! prefix, waiting for a condition, and cutting futures at chosen points.
#![allow(dead_code)] // each test file uses its own subset

use std::fmt::Display;
use std::future::Future;
use std::task::Poll;
use std::time::{Duration, Instant};

use redisync::prelude::*;
use redisync_test_harness::{wait_until, RedisCluster, RedisServer};

/// The primitives' keys and channels under the default prefix, from their layouts: a test
/// names a primitive's key as `keys::lock(name).hash`, never by spelling it.
pub mod keys {
    use redisync::core::DEFAULT_KEY_PREFIX;
    use redisync::layout::*;

    /// The key space of the primitive called `name`.
    pub fn space(name: &str) -> KeySpace {
        KeySpace::of(DEFAULT_KEY_PREFIX, name).expect("a valid name")
    }

    /// `<prefix>:{<name>}:*`: every key (or channel) of every primitive called `name`, as a
    /// `KEYS` or `PUBSUB CHANNELS` pattern.
    pub fn all(name: &str) -> String {
        format!("{}:*", space(name).base())
    }

    /// The layout of the reentrant lock called `name`.
    pub fn lock(name: &str) -> LockLayout {
        LockLayout::new(&space(name))
    }

    /// The layout of the fair lock called `name`.
    pub fn fair_lock(name: &str) -> FairLockLayout {
        FairLockLayout::new(&space(name))
    }

    /// The layout of the read-write lock called `name`.
    pub fn rw(name: &str) -> ReadWriteLockLayout {
        ReadWriteLockLayout::new(&space(name))
    }

    /// The layout of the semaphore called `name`.
    pub fn semaphore(name: &str) -> SemaphoreLayout {
        SemaphoreLayout::new(&space(name))
    }

    /// The layout of the expirable semaphore called `name`.
    pub fn expirable(name: &str) -> ExpirableSemaphoreLayout {
        ExpirableSemaphoreLayout::new(&space(name))
    }

    /// The layout of the count-down latch called `name`.
    pub fn latch(name: &str) -> CountDownLatchLayout {
        CountDownLatchLayout::new(&space(name))
    }

    /// The layout of the election called `name`.
    pub fn election(name: &str) -> ElectionLayout {
        ElectionLayout::new(&space(name))
    }

    /// The layout of the rate limiter called `name`.
    pub fn rate(name: &str) -> RateLimiterLayout {
        RateLimiterLayout::new(&space(name))
    }
}

/// The lock's hash key for the default prefix.
pub fn lock_key(name: &str) -> String {
    keys::lock(name).hash
}

/// The read-write lock's hash key for the default prefix.
pub fn rw_hash_key(name: &str) -> String {
    keys::rw(name).hash
}

/// The read-write lock's sorted set of read holds for the default prefix.
pub fn rw_readers_key(name: &str) -> String {
    keys::rw(name).readers
}

/// The read-write lock's waiting writers for the default prefix.
pub fn rw_writers_key(name: &str) -> String {
    keys::rw(name).writers
}

/// The wake-up channel of `client` for the plain lock `name`, for the default prefix: each
/// waiting client listens on its own.
pub fn wake_channel(name: &str, client: &Client) -> String {
    keys::lock(name).wake_channels.of(client.id())
}

/// How many subscribers the wake-up channels of the plain lock `name` have, over every
/// client (for the default prefix).
pub fn wake_subscribers(server: &RedisServer, name: &str) -> u64 {
    let pattern = keys::lock(name).wake_channels.of("*");
    strings(&server.cmd(&["PUBSUB", "CHANNELS", &pattern]))
        .iter()
        .map(|channel| server.numsub(channel))
        .sum()
}

/// Waits until `client` has subscribed its lost-notice channel, which its watchdog does in the
/// background once it has a hold: a test counting commands must not count that SUBSCRIBE.
/// Call it while the client holds something.
pub async fn lost_notices_subscribed(server: &RedisServer, client: &Client) {
    let notices = format!("redisync:lost:{}", client.id());
    eventually(
        "the lost-notice channel is subscribed",
        Duration::from_secs(10),
        || server.numsub(&notices) == 1,
    )
    .await;
}

/// The channels subscribed on `server` that some call made: every channel but the clients'
/// lost-notice channels.
pub fn call_channels(server: &RedisServer) -> Vec<String> {
    without_lost_notices(strings(&server.cmd(&["PUBSUB", "CHANNELS", "*"])))
}

/// `channels` without the clients' lost-notice channels (`<prefix>:lost:<client id>`), which
/// a client subscribes with its first watchdog hold and keeps: no call left them behind.
pub fn without_lost_notices(channels: Vec<String>) -> Vec<String> {
    channels
        .into_iter()
        .filter(|channel| !channel.contains(":lost:"))
        .collect()
}

/// Every command's call count since the last `CONFIG RESETSTAT`, from `INFO commandstats`:
/// the commands scripts ran inside Redis included.
pub fn command_stats(server: &RedisServer) -> std::collections::BTreeMap<String, u64> {
    text(&server.cmd(&["INFO", "commandstats"]))
        .lines()
        .filter_map(|line| {
            let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = stats.split(',').find_map(|kv| kv.strip_prefix("calls="))?;
            Some((name.to_owned(), calls.parse().ok()?))
        })
        .collect()
}

/// [`command_stats`] without what a test's own sampling runs (`INFO`, `CONFIG RESETSTAT`,
/// `PUBSUB NUMSUB`) and without the hub's liveness `PING`, which a client with a
/// subscription sends every third of a command timeout (at most a second; two in an idle
/// 2.5 s window), whatever its operations. What is left is what the operations cost.
pub fn operation_stats(server: &RedisServer) -> std::collections::BTreeMap<String, u64> {
    let mut run = command_stats(server);
    run.retain(|name, _| {
        !matches!(
            name.as_str(),
            "info" | "config|resetstat" | "pubsub|numsub" | "ping"
        )
    });
    run
}

/// Command counts as [`operation_stats`] reports them, from `(command, calls)` pairs.
pub fn command_counts(counts: &[(&str, u64)]) -> std::collections::BTreeMap<String, u64> {
    counts
        .iter()
        .map(|&(name, calls)| (name.to_owned(), calls))
        .collect()
}

/// Whether `key` exists on `server`.
pub fn exists(server: &RedisServer, key: &str) -> bool {
    server.cmd(&["EXISTS", key]) == redis::Value::Int(1)
}

/// A client with every option at its default.
pub async fn client(server: &RedisServer) -> Client {
    Client::connect(server.url()).await.expect("connect")
}

/// A client with a given watchdog timeout.
pub async fn client_with_watchdog(server: &RedisServer, watchdog: Duration) -> Client {
    Client::builder(server.url())
        .watchdog_timeout(watchdog)
        .build()
        .await
        .expect("connect")
}

/// Runs `future` until it completes or `after` has passed, whichever comes first, and drops
/// it in the second case. The clock is checked on every scheduler pass: tokio's timer rounds
/// deadlines up to whole milliseconds, too coarse to cut a request that takes a few hundred
/// microseconds at a chosen point.
pub async fn cut_after<F: Future>(after: Duration, future: F) -> Option<F::Output> {
    let deadline = Instant::now() + after;
    let clock = async {
        while Instant::now() < deadline {
            tokio::task::yield_now().await;
        }
    };
    tokio::select! {
        biased;
        output = future => Some(output),
        () = clock => None,
    }
}

/// Polls `future` until it completes or has returned `Pending` `pendings + 1` times, and drops
/// it in the second case: `pendings = 0` cuts it at its first await point that really waits,
/// `1` at the second, and so on.
pub async fn cut_at_await<F: Future>(pendings: usize, future: F) -> Option<F::Output> {
    let mut future = std::pin::pin!(future);
    let mut left = pendings;
    std::future::poll_fn(move |cx| match future.as_mut().poll(cx) {
        Poll::Ready(output) => Poll::Ready(Some(output)),
        Poll::Pending if left == 0 => Poll::Ready(None),
        Poll::Pending => {
            left -= 1;
            Poll::Pending
        }
    })
    .await
}

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Fails the test unless `cond` becomes true within `timeout`.
pub async fn eventually(what: impl Display, timeout: Duration, cond: impl FnMut() -> bool) {
    assert!(
        wait_until(timeout, cond).await,
        "timed out after {timeout:?} waiting until {what}"
    );
}

/// Runs a command that answers an integer.
pub fn int(server: &RedisServer, args: &[&str]) -> i64 {
    let value = server.cmd(args);
    redis::from_redis_value_ref::<i64>(&value)
        .unwrap_or_else(|e| panic!("{args:?}: expected an integer, got {value:?}: {e}"))
}

/// The number of members of a sorted set.
pub fn zcard(server: &RedisServer, key: &str) -> i64 {
    int(server, &["ZCARD", key])
}

/// A string reply.
pub fn text(value: &redis::Value) -> String {
    redis::from_redis_value_ref::<String>(value)
        .unwrap_or_else(|e| panic!("expected a string reply, got {value:?}: {e}"))
}

/// An array reply of strings.
pub fn strings(value: &redis::Value) -> Vec<String> {
    redis::from_redis_value_ref::<Vec<String>>(value)
        .unwrap_or_else(|e| panic!("expected an array of strings, got {value:?}: {e}"))
}

/// Whether an acquire script's reply is a busy answer, the table `{0, wait}` (a grant is an
/// integer alone: see `lua/lock_acquire.lua`).
pub fn is_busy(reply: &redis::Value) -> bool {
    matches!(reply, redis::Value::Array(items) if items.first() == Some(&redis::Value::Int(0)))
}

/// Whether an error is what an unreachable or silent Redis gives.
pub fn is_outage(err: &Error) -> bool {
    matches!(err, Error::Redis(_) | Error::Timeout)
}

/// Fails unless every client's local bookkeeping (queues, subscriptions, renewals) is empty.
pub fn assert_idle(clients: &[&Client]) {
    for (i, client) in clients.iter().enumerate() {
        assert_eq!(
            client.local_state(),
            redisync::LocalState::default(),
            "client {i} kept local state"
        );
    }
}

#[track_caller]
pub fn assert_invalid<T: std::fmt::Debug>(what: &str, outcome: Result<T>) {
    match outcome {
        Err(Error::InvalidArgument(message)) => assert!(!message.is_empty(), "{what}"),
        other => panic!("{what}: expected InvalidArgument, got {other:?}"),
    }
}

#[track_caller]
pub fn assert_wrong_type<T: std::fmt::Debug>(what: &str, outcome: Result<T>) {
    match outcome {
        Err(Error::WrongType) => {}
        other => panic!("{what}: expected WrongType, got {other:?}"),
    }
}

/// Awaits every task, propagating panics.
pub async fn join_all<T>(tasks: Vec<tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut results = Vec::with_capacity(tasks.len());
    for task in tasks {
        results.push(task.await.expect("task panicked"));
    }
    results
}

/// Subscribers of sharded channel `channel` on cluster node `node` (`PUBSUB SHARDNUMSUB`); 0
/// if the node does not answer.
pub fn shard_subscribers(cluster: &RedisCluster, node: usize, channel: &str) -> u64 {
    subscribers(cluster, node, "SHARDNUMSUB", channel)
}

/// Subscribers of classic channel `channel` on cluster node `node` (`PUBSUB NUMSUB`); 0 if
/// the node does not answer.
pub fn classic_subscribers(cluster: &RedisCluster, node: usize, channel: &str) -> u64 {
    subscribers(cluster, node, "NUMSUB", channel)
}

fn subscribers(cluster: &RedisCluster, node: usize, count: &str, channel: &str) -> u64 {
    let Ok(reply) = cluster.try_cmd_on(node, &["PUBSUB", count, channel]) else {
        return 0;
    };
    match &reply {
        redis::Value::Array(items) if items.len() == 2 => {
            redis::from_redis_value_ref::<u64>(&items[1]).ok()
        }
        redis::Value::Map(pairs) if pairs.len() == 1 => {
            redis::from_redis_value_ref::<u64>(&pairs[0].1).ok()
        }
        _ => None,
    }
    .unwrap_or_else(|| panic!("unexpected PUBSUB {count} reply {reply:?}"))
}

/// A Redis process stopped with SIGSTOP until [`resume`](Paused::resume) or drop, so that a
/// failed assertion never leaves it stopped.
pub struct Paused<'a> {
    node: &'a RedisServer,
    resumed: bool,
}

impl<'a> Paused<'a> {
    pub fn pause(node: &'a RedisServer) -> Self {
        node.pause();
        Paused {
            node,
            resumed: false,
        }
    }

    pub fn resume(mut self) {
        self.node.resume();
        self.resumed = true;
    }
}

impl Drop for Paused<'_> {
    fn drop(&mut self) {
        if !self.resumed && self.node.is_running() {
            self.node.resume();
        }
    }
}

// Rate limiter windows, checked on Redis's clock (rate_limiter.rs, faults_primitives.rs).

/// One admitted request: `units`, decided somewhere in `[before, after]` (Redis µs).
#[derive(Debug, Clone, Copy)]
pub struct Admitted {
    /// Redis's clock (`TIME`) before the request was sent.
    pub before: u64,
    /// Redis's clock after its answer came.
    pub after: u64,
    /// The units it took.
    pub units: u64,
}

/// The units of a set of admitted requests that certainly fell within one window of
/// `per_us`: for each request taken as the earliest, the requests that certainly came no
/// earlier and certainly ended before the window did. Returns the largest such count, with
/// its anchor. Counting only what is certain, this never blames the limiter for the width of
/// the `TIME` brackets; a limiter that admitted even one unit too many per window would show
/// as soon as the brackets are narrower than the spacing of units.
pub fn most_in_one_window(admitted: &[Admitted], per_us: u64) -> (u64, Admitted) {
    let mut worst = (0, admitted[0]);
    for anchor in admitted {
        let end = anchor.before + per_us;
        let units: u64 = admitted
            .iter()
            .filter(|a| a.before >= anchor.before && a.after < end)
            .map(|a| a.units)
            .sum();
        if units > worst.0 {
            worst = (units, *anchor);
        }
    }
    worst
}

/// A primary and a replica of it, once the replica's link to it is up.
pub async fn primary_and_replica() -> (RedisServer, RedisServer) {
    let primary = RedisServer::start();
    let port = primary.port().to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    eventually("the replica is in sync", Duration::from_secs(10), || {
        replica
            .info_field("replication", "master_link_status")
            .as_deref()
            == Some("up")
    })
    .await;
    (primary, replica)
}

/// One uncontended cycle of lock `name` of `client`: takes it and releases it (it loads the
/// lock's scripts into Redis, among other things).
pub async fn lock_cycle(client: &Client, name: &str) {
    let guard = client.lock(name).lock().await.unwrap();
    guard.unlock().await.unwrap();
}

/// How many holds of plain lock `name` were handed over in a wake-up and not yet taken by
/// their task (fields of the lock's hash whose value is `h`).
pub fn handed_over_holds(server: &RedisServer, name: &str) -> usize {
    strings(&server.cmd(&["HVALS", &lock_key(name)]))
        .into_iter()
        .filter(|value| value == "h")
        .count()
}

/// One `SLOWLOG GET` entry: the command with its arguments and the client address (for a
/// command a script ran, Redis 7.0 logs `?:0`, Redis 7.2 and later none, and Valkey the
/// address of the script's caller: tell a client's own commands with a
/// [`ChaosProxy`](redisync_test_harness::ChaosProxy) instead).
#[derive(Debug)]
pub struct LoggedCommand {
    pub args: Vec<String>,
    pub addr: String,
}

impl LoggedCommand {
    /// The command with its arguments, separated by spaces.
    pub fn line(&self) -> String {
        self.args.join(" ")
    }
}

/// Redis's slow log, oldest first: with [`log_every_request`], every command since.
pub fn slowlog(server: &RedisServer) -> Vec<LoggedCommand> {
    let redis::Value::Array(entries) = server.cmd(&["SLOWLOG", "GET", "-1"]) else {
        panic!("unexpected SLOWLOG GET reply");
    };
    let mut logged: Vec<LoggedCommand> = entries
        .iter()
        .map(|entry| {
            let redis::Value::Array(parts) = entry else {
                panic!("unexpected slowlog entry {entry:?}");
            };
            let redis::Value::Array(args) = &parts[3] else {
                panic!("unexpected slowlog arguments {:?}", parts[3]);
            };
            LoggedCommand {
                args: args.iter().map(text).collect(),
                addr: text(&parts[4]),
            }
        })
        .collect();
    logged.reverse(); // SLOWLOG GET lists the newest first
    logged
}

/// The script requests (`EVALSHA`) Redis ran since [`log_every_request`], oldest first, as
/// (keys, arguments). The commands the scripts ran are in the log too, under their own
/// names, and left out.
pub fn script_requests(server: &RedisServer) -> Vec<(usize, usize)> {
    slowlog(server)
        .into_iter()
        .filter(|logged| {
            logged
                .args
                .first()
                .is_some_and(|verb| verb.eq_ignore_ascii_case("evalsha"))
        })
        .map(|logged| {
            let keys: usize = logged.args[2].parse().expect("a key count");
            (keys, logged.args.len() - 3 - keys)
        })
        .collect()
}

/// Starts logging every command in Redis's slow log, from an empty log.
pub fn log_every_request(server: &RedisServer) {
    server.cmd(&["CONFIG", "SET", "slowlog-max-len", "10000"]);
    server.cmd(&["CONFIG", "SET", "slowlog-log-slower-than", "0"]);
    server.cmd(&["SLOWLOG", "RESET"]);
}
