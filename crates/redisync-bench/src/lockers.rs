//! The contenders of the lock scenarios, behind one interface: run a critical section while
//! holding a named lock.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use redisync::prelude::*;

use crate::floor_scripts::{COMPARE_AND_DELETE, SCRIPTED_SET_NX};

/// A critical section: what a task does while it holds the lock.
pub type Section = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// One task's way of taking one lock.
#[async_trait::async_trait]
pub trait Locker: Send {
    /// Waits for the lock, runs `section` holding it, releases it.
    async fn with_lock(&mut self, section: Section) -> Result<(), String>;
}

/// Who competes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contender {
    /// Raw redis-rs: `SET key token NX PX` to take, one EVALSHA compare-and-delete to release,
    /// on the same connection type as redisync; no library logic. Retries at once when busy.
    Floor,
    /// The floor with its take inside a script: `SET key token NX PX` run by `EVALSHA`, then
    /// the floor's compare-and-delete, over as many connections as redisync's default pool
    /// (as the other rods). A measuring rod, scenarios 1 and 3 only: what the least acquire
    /// costs when every state change is a script (as every one of redisync's is), before any
    /// of redisync's guarantees.
    ScriptedFloor,
    /// The floor of waiting by polling: the floor's commands, sleeping 1 ms between tries.
    PollingFloor,
    /// The floor of waiting on pub/sub: a waiter subscribes to the lock's channel and tries
    /// `SET NX PX` again on every message; the release is one script that compare-and-deletes
    /// and PUBLISHes.
    PubSubFloor,
    /// The floor of a waiter that blocks in Redis instead of listening: it waits with `BLPOP`
    /// on a list of its own, and its next `SET NX PX` follows on the same connection, so
    /// Redis runs it as soon as the release's push unblocks the `BLPOP`, with no leg to the
    /// client and back in between. The release is one script that compare-and-deletes and
    /// pushes. Not a design redisync uses; it shows what a hand-off could cost.
    BlockingFloor,
    Redisync,
    /// redisync's plain-lock scripts alone, from raw redis-rs with the library's keys and
    /// arguments (see [`crate::raw_scripts`]): what of redisync's cost is its scripts', and
    /// what its client code's. Not a lock library: it never waits (scenarios 1 and 3 only).
    RedisyncScripts,
    /// The commands redisync's scripts run on an uncontended cycle, in two bare scripts, as
    /// [`Contender::RedisyncScripts`] sends them (see [`crate::raw_scripts`]): a measuring
    /// rod, scenarios 1 and 3 only.
    BareCommands,
    /// Two scripts that run no command, with the keys and arguments of
    /// [`Contender::RedisyncScripts`] (see [`crate::raw_scripts`]): a measuring rod,
    /// scenarios 1 and 3 only.
    EmptyScripts,
    /// A fenced, cancel-safe hold in a string key (see [`crate::raw_scripts`]): the least a
    /// lock with redisync's guarantees could run on an uncontended cycle in another layout; a
    /// measuring rod, scenarios 1 and 3 only.
    StringHold,
    /// redisync's plain-lock scripts as Redis Functions, called with `FCALL` (see
    /// [`crate::raw_scripts`]): what the calling convention costs; a measuring rod,
    /// scenarios 1 and 3 only.
    Functions,
    /// redisync's first-come-first-served lock.
    RedisyncFair,
    /// redisync's leader election, as a lock: `campaign()` takes it, `resign()` gives it
    /// back (scenario 7 only).
    RedisyncElection,
    /// rslock with its defaults: 3 tries per `lock()`, random pause up to 200 ms between them.
    RslockDefault,
    /// rslock tuned for speed: pauses of at most 1 ms.
    RslockBest,
    /// redis-lock with its defaults: 10 ms lease, 100 ms between tries.
    RedisLockDefault,
    /// redis-lock tuned for speed: 1 ms between tries, 10 s lease.
    RedisLockBest,
    /// distributed-lock-redis with its defaults (30 s lease, renewed every 10 s). Its
    /// `acquire` makes one try and fails at once if the lock is held, timeout or not, and it
    /// has no retry setting: the caller tries again every 1 ms, as the polling floor does.
    DistributedLockRedis,
    /// redis-semaphore's `Mutex` (Node.js, ioredis) with its defaults: 10 s lease, 10 ms
    /// between tries. Measured through a driver process (see [`crate::peers`]).
    RedisSemaphoreDefault,
    /// redis-semaphore's `Mutex` tuned for speed: 1 ms between tries.
    RedisSemaphoreBest,
    /// python-redis-lock's `Lock` (redis-py, one thread per task) with a 10 s lease; a waiter
    /// blocks on `BLPOP` until a release pushes to the lock's signal list. Measured through
    /// a driver process (see [`crate::peers`]).
    PythonRedisLock,
}

impl Contender {
    /// Scenario 1 (uncontended) and, without the FairLock, scenario 3 (many locks).
    pub const LOCKS: [Contender; 17] = [
        Contender::Floor,
        Contender::ScriptedFloor,
        Contender::Redisync,
        Contender::RedisyncScripts,
        Contender::BareCommands,
        Contender::EmptyScripts,
        Contender::StringHold,
        Contender::Functions,
        Contender::RedisyncFair,
        Contender::RslockDefault,
        Contender::RslockBest,
        Contender::RedisLockDefault,
        Contender::RedisLockBest,
        Contender::DistributedLockRedis,
        Contender::RedisSemaphoreDefault,
        Contender::RedisSemaphoreBest,
        Contender::PythonRedisLock,
    ];

    /// Scenario 7 (leader election hand-over) and the floor it is held against.
    pub const ELECTION: [Contender; 2] = [Contender::PubSubFloor, Contender::RedisyncElection];

    /// Every contender, in the order the charts give out colours.
    pub const ALL: [Contender; 21] = [
        Contender::Floor,
        Contender::ScriptedFloor,
        Contender::Redisync,
        Contender::RedisyncScripts,
        Contender::BareCommands,
        Contender::EmptyScripts,
        Contender::StringHold,
        Contender::Functions,
        Contender::RedisyncFair,
        Contender::RslockDefault,
        Contender::RslockBest,
        Contender::RedisLockDefault,
        Contender::RedisLockBest,
        Contender::PollingFloor,
        Contender::PubSubFloor,
        Contender::BlockingFloor,
        Contender::RedisyncElection,
        // Last, so that the others keep their colours from earlier runs' charts.
        Contender::DistributedLockRedis,
        Contender::RedisSemaphoreDefault,
        Contender::RedisSemaphoreBest,
        Contender::PythonRedisLock,
    ];

    /// Scenario 2 (contended): waiting matters, so the floor that spins is left out.
    pub const CONTENDED: [Contender; 11] = [
        Contender::PollingFloor,
        Contender::Redisync,
        Contender::RedisyncFair,
        Contender::RslockDefault,
        Contender::RslockBest,
        Contender::RedisLockDefault,
        Contender::RedisLockBest,
        Contender::DistributedLockRedis,
        Contender::RedisSemaphoreDefault,
        Contender::RedisSemaphoreBest,
        Contender::PythonRedisLock,
    ];

    /// Scenario 2b (hand-off with one waiter).
    pub const HANDOFF: [Contender; 13] = [
        Contender::PubSubFloor,
        Contender::BlockingFloor,
        Contender::PollingFloor,
        Contender::Redisync,
        Contender::RedisyncFair,
        Contender::RslockDefault,
        Contender::RslockBest,
        Contender::RedisLockDefault,
        Contender::RedisLockBest,
        Contender::DistributedLockRedis,
        Contender::RedisSemaphoreDefault,
        Contender::RedisSemaphoreBest,
        Contender::PythonRedisLock,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Contender::Floor => "floor (raw redis-rs)",
            Contender::ScriptedFloor => "the floor with its SET in a script (raw redis-rs)",
            Contender::PollingFloor => "polling floor (1 ms sleep)",
            Contender::PubSubFloor => "pub/sub floor (raw redis-rs)",
            Contender::BlockingFloor => "blocking floor (BLPOP, then SET NX)",
            Contender::Redisync => "redisync",
            Contender::RedisyncScripts => "redisync's scripts alone (raw redis-rs)",
            Contender::BareCommands => "their commands in bare scripts (raw redis-rs)",
            Contender::EmptyScripts => "two empty scripts (raw redis-rs)",
            Contender::StringHold => "a fenced string hold (raw redis-rs)",
            Contender::Functions => "redisync's scripts as functions (FCALL, raw redis-rs)",
            Contender::RedisyncFair => "redisync FairLock",
            Contender::RedisyncElection => "redisync election",
            Contender::RslockDefault => "rslock 0.10 (defaults)",
            Contender::RslockBest => "rslock 0.10 (1 ms retry)",
            Contender::RedisLockDefault => "redis-lock 0.5 (defaults)",
            Contender::RedisLockBest => "redis-lock 0.5 (1 ms retry)",
            Contender::DistributedLockRedis => "distributed-lock-redis 0.2 (caller retries, 1 ms)",
            Contender::RedisSemaphoreDefault => "redis-semaphore 5.8 (defaults)",
            Contender::RedisSemaphoreBest => "redis-semaphore 5.8 (1 ms retry)",
            Contender::PythonRedisLock => "python-redis-lock 4.0 (10 s lease)",
        }
    }
}

/// Lease the contenders that need one use: far longer than any critical section here.
pub(crate) const LEASE: Duration = Duration::from_secs(10);

/// Builds `clients × per_client` lockers of `contender`; task `t` of client `c` locks
/// `name(c * per_client + t)`. Tasks of one client share its connections, as an application
/// would share one client.
pub async fn lockers(
    contender: Contender,
    url: &str,
    clients: usize,
    per_client: usize,
    name: impl Fn(usize) -> String,
) -> Vec<Box<dyn Locker>> {
    let mut lockers: Vec<Box<dyn Locker>> = Vec::new();
    for c in 0..clients {
        match contender {
            Contender::Floor | Contender::ScriptedFloor | Contender::PollingFloor => {
                // The floor is the plainest client there is: one connection. The scripted
                // floor gets as many as a redisync client's default pool, as the other rods
                // do: the most it could reach as the least a scripted lock could run.
                let server = redis::Client::open(url).expect("url");
                let connections = match contender {
                    Contender::ScriptedFloor => redisync::core::DEFAULT_POOL_SIZE as usize,
                    _ => 1,
                };
                let mut pool = Vec::new();
                for _ in 0..connections {
                    pool.push(server.get_connection_manager().await.expect("connect"));
                }
                for t in 0..per_client {
                    lockers.push(Box::new(FloorLocker {
                        conn: pool[t % pool.len()].clone(),
                        key: name(c * per_client + t),
                        token: format!("{c}:{t}"),
                        pause: (contender == Contender::PollingFloor)
                            .then_some(Duration::from_millis(1)),
                        scripted_take: (contender == Contender::ScriptedFloor)
                            .then(|| redis::Script::new(SCRIPTED_SET_NX)),
                    }));
                }
            }
            Contender::PubSubFloor => {
                let client = redis::Client::open(url).expect("url");
                let conn = client.get_connection_manager().await.expect("connect");
                for t in 0..per_client {
                    let key = name(c * per_client + t);
                    let channel = format!("{key}:released");
                    // A subscription per task, kept for the locker's life: the simplest
                    // correct waiter (subscribe first, then try, then wait).
                    let mut pubsub = client.get_async_pubsub().await.expect("connect");
                    pubsub.subscribe(&channel).await.expect("subscribe");
                    lockers.push(Box::new(PubSubFloorLocker {
                        conn: conn.clone(),
                        pubsub,
                        key,
                        channel,
                        token: format!("{c}:{t}"),
                    }));
                }
            }
            Contender::BlockingFloor => {
                let client = redis::Client::open(url).expect("url");
                let conn = client.get_connection_manager().await.expect("connect");
                for t in 0..per_client {
                    let key = name(c * per_client + t);
                    let wake = format!("{key}:wake:{c}:{t}");
                    // A connection of the task's own: a blocked BLPOP holds it up.
                    let blocking = client
                        .get_multiplexed_async_connection()
                        .await
                        .expect("connect");
                    lockers.push(Box::new(BlockingFloorLocker {
                        conn: conn.clone(),
                        blocking,
                        key,
                        wake,
                        token: format!("{c}:{t}"),
                    }));
                }
            }
            Contender::Redisync => {
                let client = Client::connect(url).await.expect("connect");
                for t in 0..per_client {
                    lockers.push(Box::new(client.lock(name(c * per_client + t))));
                }
            }
            Contender::RedisyncScripts
            | Contender::BareCommands
            | Contender::EmptyScripts
            | Contender::StringHold
            | Contender::Functions => {
                use crate::raw_scripts::{RawScripts, Rod};
                let rod = match contender {
                    Contender::BareCommands => Rod::BareCommands,
                    Contender::EmptyScripts => Rod::Empty,
                    Contender::StringHold => Rod::StringHold,
                    Contender::Functions => Rod::Functions,
                    _ => Rod::Library,
                };
                let (pool, client, scripts) = RawScripts::connect(url, rod).await;
                for t in 0..per_client {
                    lockers.push(Box::new(RawScripts::new(
                        pool[t % pool.len()].clone(),
                        &client,
                        scripts.clone(),
                        &name(c * per_client + t),
                    )));
                }
            }
            Contender::RedisyncFair => {
                let client = Client::connect(url).await.expect("connect");
                for t in 0..per_client {
                    lockers.push(Box::new(client.fair_lock(name(c * per_client + t))));
                }
            }
            Contender::RedisyncElection => {
                let client = Client::connect(url).await.expect("connect");
                for t in 0..per_client {
                    lockers.push(Box::new(ElectionLocker {
                        election: client.leader_election(name(c * per_client + t)),
                        value: format!("{c}:{t}"),
                    }));
                }
            }
            Contender::RslockDefault | Contender::RslockBest => {
                let mut manager = rslock::LockManager::new(vec![url.to_owned()]);
                if contender == Contender::RslockBest {
                    // rslock pauses a random 0..delay ms between tries: 2 ms gives 0 or 1.
                    manager.set_retry(u32::MAX, Duration::from_millis(2));
                }
                for t in 0..per_client {
                    lockers.push(Box::new(RslockLocker {
                        manager: manager.clone(),
                        key: name(c * per_client + t),
                    }));
                }
            }
            Contender::RedisLockDefault | Contender::RedisLockBest => {
                let conn = redis_for_redis_lock::Client::open(url)
                    .expect("url")
                    .get_multiplexed_async_connection()
                    .await
                    .expect("connect");
                let conn = Arc::new(tokio::sync::Mutex::new(conn));
                for t in 0..per_client {
                    lockers.push(Box::new(RedisLockLocker {
                        conn: conn.clone(),
                        key: name(c * per_client + t),
                        best: contender == Contender::RedisLockBest,
                    }));
                }
            }
            Contender::DistributedLockRedis => {
                use distributed_lock_core::traits::LockProvider;
                // One provider per client: it holds one fred connection, which the tasks of
                // the client share.
                let provider = distributed_lock_redis::RedisLockProvider::new(url)
                    .await
                    .expect("connect");
                for t in 0..per_client {
                    lockers.push(Box::new(DistributedLockRedisLocker {
                        lock: provider.create_lock(&name(c * per_client + t)),
                    }));
                }
            }
            // These run in driver processes of their own (see `crate::peers`); the scenarios
            // never ask for their lockers.
            Contender::RedisSemaphoreDefault
            | Contender::RedisSemaphoreBest
            | Contender::PythonRedisLock => {}
        }
    }
    lockers
}

struct FloorLocker {
    conn: redis::aio::ConnectionManager,
    key: String,
    token: String,
    /// Sleep between tries; `None` retries at once.
    pause: Option<Duration>,
    /// The take as a script ([`Contender::ScriptedFloor`]); `None`: the bare `SET`.
    scripted_take: Option<redis::Script>,
}

/// The floor's take: `SET key token NX PX lease`; true if taken.
async fn set_nx(
    conn: &mut redis::aio::ConnectionManager,
    key: &str,
    token: &str,
) -> Result<bool, String> {
    let taken: Option<String> = redis::cmd("SET")
        .arg(key)
        .arg(token)
        .arg("NX")
        .arg("PX")
        .arg(LEASE.as_millis() as u64)
        .query_async(conn)
        .await
        .map_err(|e| e.to_string())?;
    Ok(taken.is_some())
}

impl FloorLocker {
    /// One try to take the lock: the bare `SET`, or the same inside a script.
    async fn take(&mut self) -> Result<bool, String> {
        let Some(take) = &self.scripted_take else {
            return set_nx(&mut self.conn, &self.key, &self.token).await;
        };
        let taken: Option<String> = take
            .key(&self.key)
            .arg(&self.token)
            .arg(LEASE.as_millis() as u64)
            .invoke_async(&mut self.conn)
            .await
            .map_err(|e| e.to_string())?;
        Ok(taken.is_some())
    }
}

#[async_trait::async_trait]
impl Locker for FloorLocker {
    async fn with_lock(&mut self, section: Section) -> Result<(), String> {
        while !self.take().await? {
            match self.pause {
                Some(pause) => tokio::time::sleep(pause).await,
                None => tokio::task::yield_now().await,
            }
        }
        section.await;
        redis::Script::new(COMPARE_AND_DELETE)
            .key(&self.key)
            .arg(&self.token)
            .invoke_async::<i64>(&mut self.conn)
            .await
            .map_err(|e| e.to_string())?;
        Ok(())
    }
}

/// The pub/sub floor's release: compare-and-delete, and tell the waiters.
const COMPARE_DELETE_PUBLISH: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
     redis.call('DEL', KEYS[1]) redis.call('PUBLISH', ARGV[2], '1') return 1 end return 0";

/// How long a pub/sub floor waiter waits for a message before trying again anyway: only a
/// lost message would make it matter, and none is lost on the benchmark's loopback.
const PUBSUB_FLOOR_RECHECK: Duration = Duration::from_millis(100);

struct PubSubFloorLocker {
    conn: redis::aio::ConnectionManager,
    pubsub: redis::aio::PubSub,
    key: String,
    channel: String,
    token: String,
}

#[async_trait::async_trait]
impl Locker for PubSubFloorLocker {
    async fn with_lock(&mut self, section: Section) -> Result<(), String> {
        use futures_util::{FutureExt, StreamExt};
        loop {
            // Messages of releases before this try say nothing the try does not see (our own
            // releases publish too): drop them, so that the wait below waits for a new one.
            {
                let mut messages = self.pubsub.on_message();
                while let Some(Some(_)) = messages.next().now_or_never() {}
            }
            if set_nx(&mut self.conn, &self.key, &self.token).await? {
                break;
            }
            let mut messages = self.pubsub.on_message();
            let _ = tokio::time::timeout(PUBSUB_FLOOR_RECHECK, messages.next()).await;
        }
        section.await;
        redis::Script::new(COMPARE_DELETE_PUBLISH)
            .key(&self.key)
            .arg(&self.token)
            .arg(&self.channel)
            .invoke_async::<i64>(&mut self.conn)
            .await
            .map_err(|e| e.to_string())?;
        Ok(())
    }
}

/// The blocking floor's release: compare-and-delete, and wake the waiter named in `KEYS[2]` by
/// pushing to its list. The push expires, so that one nobody popped does not outlive the run.
const COMPARE_DELETE_PUSH: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
     redis.call('DEL', KEYS[1]) local w = redis.call('GET', KEYS[2]) if w then \
     redis.call('DEL', KEYS[2]) redis.call('RPUSH', w, '1') redis.call('PEXPIRE', w, 1000) end \
     return 1 end return 0";

/// The longest a blocking floor waiter blocks before trying again anyway, in seconds.
const BLOCKING_FLOOR_RECHECK_SECS: f64 = 0.1;

/// A blocking floor task. The scenario has one waiter, so a waiter names its list in one key
/// (`<lock>:waiting`), which the release reads and clears; a real design would keep a
/// registry, as redisync does.
struct BlockingFloorLocker {
    conn: redis::aio::ConnectionManager,
    blocking: redis::aio::MultiplexedConnection,
    key: String,
    wake: String,
    token: String,
}

#[async_trait::async_trait]
impl Locker for BlockingFloorLocker {
    async fn with_lock(&mut self, section: Section) -> Result<(), String> {
        // Who waits: the holder wakes the list named here when it lets go.
        let waiting = format!("{}:waiting", self.key);
        if !set_nx(&mut self.conn, &self.key, &self.token).await? {
            let _: () = redis::cmd("SET")
                .arg(&waiting)
                .arg(&self.wake)
                .arg("PX")
                .arg(LEASE.as_millis() as u64)
                .query_async(&mut self.conn)
                .await
                .map_err(|e| e.to_string())?;
            loop {
                // A push left over from an earlier release says nothing: drop it first.
                let _: Option<String> = redis::cmd("LPOP")
                    .arg(&self.wake)
                    .query_async(&mut self.blocking)
                    .await
                    .map_err(|e| e.to_string())?;
                if set_nx(&mut self.conn, &self.key, &self.token).await? {
                    break;
                }
                let (_, taken): (Option<(String, String)>, Option<String>) = redis::pipe()
                    .cmd("BLPOP")
                    .arg(&self.wake)
                    .arg(BLOCKING_FLOOR_RECHECK_SECS)
                    .cmd("SET")
                    .arg(&self.key)
                    .arg(&self.token)
                    .arg("NX")
                    .arg("PX")
                    .arg(LEASE.as_millis() as u64)
                    .query_async(&mut self.blocking)
                    .await
                    .map_err(|e| e.to_string())?;
                if taken.is_some() {
                    break;
                }
            }
        }
        section.await;
        redis::Script::new(COMPARE_DELETE_PUSH)
            .key(&self.key)
            .key(&waiting)
            .arg(&self.token)
            .invoke_async::<i64>(&mut self.conn)
            .await
            .map_err(|e| e.to_string())?;
        Ok(())
    }
}

#[async_trait::async_trait]
impl Locker for ReentrantLock {
    async fn with_lock(&mut self, section: Section) -> Result<(), String> {
        let guard = self.lock().await.map_err(|e| e.to_string())?;
        section.await;
        guard.unlock().await.map_err(|e| e.to_string())
    }
}

#[async_trait::async_trait]
impl Locker for FairLock {
    async fn with_lock(&mut self, section: Section) -> Result<(), String> {
        let guard = self.lock().await.map_err(|e| e.to_string())?;
        section.await;
        guard.unlock().await.map_err(|e| e.to_string())
    }
}

/// A campaigner of a leader election: it leads while it runs the section, then resigns.
struct ElectionLocker {
    election: LeaderElection,
    /// What it proclaims while it leads.
    value: String,
}

#[async_trait::async_trait]
impl Locker for ElectionLocker {
    async fn with_lock(&mut self, section: Section) -> Result<(), String> {
        let leadership = self
            .election
            .campaign(self.value.as_str())
            .await
            .map_err(|e| e.to_string())?;
        section.await;
        leadership.resign().await.map_err(|e| e.to_string())
    }
}

struct RslockLocker {
    manager: rslock::LockManager,
    key: String,
}

#[async_trait::async_trait]
impl Locker for RslockLocker {
    async fn with_lock(&mut self, section: Section) -> Result<(), String> {
        let lock = self
            .manager
            .acquire_no_guard(self.key.as_bytes(), LEASE)
            .await
            .map_err(|e| format!("{e:?}"))?;
        section.await;
        self.manager.unlock(&lock).await;
        Ok(())
    }
}

struct RedisLockLocker {
    conn: Arc<tokio::sync::Mutex<redis_for_redis_lock::aio::MultiplexedConnection>>,
    key: String,
    best: bool,
}

#[async_trait::async_trait]
impl Locker for RedisLockLocker {
    async fn with_lock(&mut self, section: Section) -> Result<(), String> {
        let options = if self.best {
            redis_lock::LockAcrossOptions {
                ttl: LEASE,
                retry: Duration::from_millis(1),
                duration: Duration::from_secs(60),
            }
        } else {
            redis_lock::LockAcrossOptions::default()
        };
        redis_lock::lock_across(
            std::slice::from_ref(&self.conn),
            &self.key,
            section,
            options,
        )
        .await
        .map_err(|e| format!("{e:?}"))
    }
}

/// How long a distributed-lock-redis task waits between tries: the library's `acquire` does
/// not wait, so a caller must, and 1 ms is the polling floor's pause.
const DISTRIBUTED_LOCK_REDIS_RETRY: Duration = Duration::from_millis(1);

struct DistributedLockRedisLocker {
    lock: distributed_lock_redis::RedisDistributedLock,
}

#[async_trait::async_trait]
impl Locker for DistributedLockRedisLocker {
    async fn with_lock(&mut self, section: Section) -> Result<(), String> {
        use distributed_lock_core::traits::{DistributedLock, LockHandle};
        // `try_acquire` sends what `acquire` sends (one `SET NX PX`) and tells a held lock
        // (`None`) from a failure (`Err`), which `acquire` reports alike as a timeout.
        let handle = loop {
            match self.lock.try_acquire().await {
                Ok(Some(handle)) => break handle,
                Ok(None) => tokio::time::sleep(DISTRIBUTED_LOCK_REDIS_RETRY).await,
                Err(e) => return Err(e.to_string()),
            }
        };
        section.await;
        handle.release().await.map_err(|e| e.to_string())
    }
}
