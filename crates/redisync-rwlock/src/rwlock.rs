//! [`ReadWriteLock`]: shared reads, exclusive writes, writers never starved.

use redisync_core::toolkit::Toolkit;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redisync_core::toolkit::duration::{lease_millis, redis_millis, wait_deadline};
use redisync_core::toolkit::{
    async_trait, granted, Acquire, Attempt, Client, DistributedPrimitive, Error, Hold, IntOrList,
    Lease, ReleasesInFlight, Result, ScriptCall, Wait, WaitSpec,
};
use tracing::Instrument;

use crate::guard::{ReadGuard, WriteGuard};
use crate::layout::ReadWriteLockLayout;
use crate::scripts::{self, AcquireReply};
use crate::shared::{CheckKeys, Coalescer, DrainWatch, Join, Road, Share};

/// How often a waiting writer renews its mark.
const WRITER_MARK_REFRESH: Duration = Duration::from_secs(1);
/// How long a mark lasts unless renewed: the longest a writer that died while waiting keeps
/// new readers out.
const WRITER_MARK_LIFETIME: Duration = Duration::from_secs(3);

/// The Redis names of one read-write lock.
pub(crate) type RwKeys = ReadWriteLockLayout;

/// Everything a handle and its guards share.
#[derive(Debug)]
pub(crate) struct RwCore {
    pub(crate) client: Client,
    pub(crate) name: String,
    keys: Result<RwKeys>,
    owner: Arc<str>,
    /// Write guards of this owner alive in this process: a write while one lives may be a
    /// re-entry and must not queue behind local writers.
    pub(crate) live_write_guards: Arc<AtomicUsize>,
    /// Read guards of this owner alive in this process: a write while one lives may be an
    /// upgrade, which Redis must refuse at once; queued behind a local writer that waits for
    /// this very read hold, it would deadlock.
    pub(crate) live_read_guards: Arc<AtomicUsize>,
    /// Read guards of this owner alive in this process that read through a shared hold of
    /// the client (see [`crate::shared`]); not counted in `live_read_guards`.
    pub(crate) live_shared_reads: AtomicUsize,
    /// This owner's releases and give-backs still on their way to Redis: its next acquire
    /// waits for them, or it would find a read hold being released and refuse the write as
    /// an upgrade (or re-enter a write hold being released).
    releases: Arc<ReleasesInFlight>,
    /// The client's shared read holds on this lock (one per client and lock name); `None`
    /// for a bad name.
    coalescer: Option<Arc<Coalescer>>,
}

impl RwCore {
    pub(crate) fn keys(&self) -> Result<&RwKeys> {
        self.keys.as_ref().map_err(Clone::clone)
    }

    /// Identifies this handle (and its clones) among the client's readers of the lock: its
    /// address, which stays put while any of its guards lives (they keep it alive).
    pub(crate) fn handle_id(&self) -> usize {
        self as *const RwCore as usize
    }

    /// The call that gives back the hold of acquire attempt `attempt`; if the attempt holds
    /// nothing, a record of it is kept for `remember`, so that its acquire, should Redis run
    /// it later, is refused (`Duration::ZERO`: no record, for an unlock, whose acquire's reply
    /// was received).
    ///
    /// `waiter`: for the give-back of a busy read attempt of a waiting call, that call's
    /// waiter id, whose registration the attempt may have made; `""` otherwise.
    pub(crate) fn release_call(
        &self,
        attempt: &str,
        remember: Duration,
        waiter: &str,
    ) -> Result<ScriptCall> {
        let keys = self.keys()?;
        // Without a record to keep, the record's key is named only if a waiter is (see the
        // script's declaration).
        let (attempt_record, record_ms) = match remember.is_zero() {
            true if waiter.is_empty() => (String::new(), 0),
            true => (keys.attempt_records.of(attempt), 0),
            false => (keys.attempt_records.of(attempt), redis_millis(remember)),
        };
        Ok(scripts::Release {
            hash: &keys.hash,
            readers: &keys.readers,
            attempt_record: &attempt_record,
            attempt,
            channel: &keys.channel,
            record_ms,
            waiter,
        }
        .call()
        .counted_in(&self.releases))
    }

    /// Waits until none of this owner's releases is on its way to Redis, for at most a
    /// command timeout (see `releases`). Boxed, since it is seldom needed: the future of an
    /// acquire that does not wait stays small.
    async fn settle_releases(&self) -> Result<()> {
        self.client.check_running()?;
        if !self.releases.is_settled() {
            Box::pin(self.releases.settled(self.client.command_timeout())).await;
        }
        Ok(())
    }

    fn retry_window(&self) -> Duration {
        self.client.command_timeout().saturating_mul(2)
    }

    fn coalescer(&self) -> Result<&Arc<Coalescer>> {
        let keys = self.keys()?;
        self.coalescer
            .as_ref()
            .ok_or_else(|| Error::invalid(format!("no shared holds for {}", keys.hash)))
    }

    fn check_keys(&self) -> Result<CheckKeys> {
        let keys = self.keys()?;
        Ok(CheckKeys {
            readers: keys.readers.clone(),
            writers: keys.writers.clone(),
            drain: keys.drain.clone(),
        })
    }
}

/// What one acquire asks Redis for, besides the side.
#[derive(Debug, Clone)]
struct Request {
    side: Side,
    /// The owner id the hold is taken for: the handle's, or a shared hold's own.
    owner: Arc<str>,
    /// `None`: the watchdog's lease, renewed while held.
    lease: Option<Duration>,
    deadline: Option<Instant>,
    /// Give way to waiting writers (reads only).
    prefer_writers: bool,
    /// A read hold shared by the client's local readers.
    shared: bool,
}

/// What a granted attempt brings back.
struct Granted {
    attempt: String,
    token: u64,
    sent_at: Instant,
    /// The drain channel's generation when the request went out, if subscribed then.
    sent_generation: Option<u64>,
}

/// Which side of the lock an acquire is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Read,
    Write,
}

impl Side {
    fn decode(self, reply: &IntOrList) -> Result<AcquireReply> {
        match self {
            Side::Read => AcquireReply::decode_read(reply),
            Side::Write => AcquireReply::decode_write(reply),
        }
    }
}

/// A distributed read-write lock: many readers or one writer, across every process that uses
/// the same Redis and name.
///
/// Create one with `client.read_write_lock(name)` (the `ClientExt` method of the `redisync`
/// crate) or [`ReadWriteLock::new`]. Clones share one owner identity; separately created
/// handles are different owners.
///
/// * **Readers share, a writer excludes everyone.** Reads and writes are reentrant per owner.
/// * **Downgrade:** the write holder may also take read holds; releasing the write hold while
///   still reading leaves the lock in read mode, held by that owner.
/// * **No upgrade:** an owner holding a read lock that asks for the write lock gets
///   [`Error::UpgradeNotSupported`] at once; waiting could never end.
/// * **Writer preference (default):** once a writer waits, new readers queue behind it, so a
///   stream of overlapping readers cannot starve writers. Owners that already read (and the
///   writer itself) still get read holds at once, since making them wait could deadlock. So
///   give each reading task its own handle ([`ReadWriteLock::new`] or
///   `client.read_write_lock(name)` per task): tasks sharing clones of one handle share one
///   owner, and as long as any of them reads, the others keep getting in past a waiting
///   writer. Opt out with [`prefer_writers(false)`](Self::prefer_writers). A writer that gives
///   up withdraws its mark before returning; one that fails or is cancelled withdraws it in the
///   background, and an attempt of it that Redis runs only afterwards cannot mark again; one
///   that dies while waiting stops blocking readers within three seconds.
/// * **Local readers share one Redis hold.** The watchdog reads of one client (every handle
///   made from it) share its read hold instead of taking one each: the first read of the
///   client takes a hold of its own as any reader does; a read that starts while another is
///   under way takes a hold that the client's further readers *join* without any request, and
///   that is released when its last reader leaves (10 ms later, in case another comes; at once
///   if a writer waits or the hold is lost). N concurrent readers of a client thus cost two
///   acquires and two releases, not N of each. A lost shared hold makes every guard sharing
///   it lost. Writer preference keeps its meaning: a writer that starts waiting while shared
///   holds exist tells their clients on the lock's drain channel, and from then on a shared
///   hold admits no new reader (new readers wait behind the writer like any reader); the
///   readers in it re-enter at once. The notice takes one pub/sub delivery from the writer's
///   first busy attempt (about a round trip); after a message, or a reconnect of the
///   subscriber (which may lose messages), joining pauses until one read-only check (a round
///   trip) has told whether a writer waits. With
///   [`WaitStrategy::Poll`](redisync_core::WaitStrategy::Poll) there is no message: the client
///   checks its shared holds once per poll interval, so the notice takes up to an interval
///   (and a client with shared holds sends that check every interval). Fixed-lease reads, reads of a handle without
///   writer preference and reads of a handle that holds a hold of its own on the lock (a
///   re-entry or a downgrade, which Redis must see under its owner id) are not shared: a fixed
///   lease must end by itself whatever other readers do, and the others must not give way when
///   the shared hold drains.
/// * **Leases:** every hold has its own lease (the watchdog's, renewed while the guard lives,
///   or a fixed one), and the lock lives as long as its longest live hold, so a crashed reader
///   blocks writers for at most its own lease.
/// * **Wake-ups:** a call that waits registers in the lock's hash; releasing the write hold
///   wakes every waiting reader with one message (they wait side by side, not in a queue); the
///   last reader leaving wakes a waiting writer; with nobody registered, nothing is published.
///   Writers of one client queue locally, and only the first asks Redis.
///
/// # Redis keys
///
/// | key / channel | type | content |
/// |---|---|---|
/// | `<prefix>:{<name>}:rw` | hash | `mode`; `writer`, `wcount`, `wtoken`, `wexp` (write hold: owner, holds, fencing token, lease end); `r:<owner>` (read holds per owner; a shared hold's owner id ends in `:shared`); `a:<attempt>` (one per hold); `rc` (read holds); `exp` (when the keys expire: the end of the longest hold); `w:<waiter>`, `w` (calls waiting, and how many); `wm` (a write hold granted over waiting writers' marks); `sh` (a shared read hold was taken) |
/// | `<prefix>:{<name>}:rw:readers` | sorted set | read hold (attempt id) → end of its lease, server ms |
/// | `<prefix>:{<name>}:rw:writers` | sorted set | waiting writer → when its mark lapses |
/// | `<prefix>:{<name>}:rw:fence` | string | last fencing token; never expires |
/// | `<prefix>:{<name>}:rw:waiter:<waiter>` | string | a waiting writer withdrew; kept as long as a mark lasts, so a late attempt of it cannot mark or register again |
/// | `<prefix>:{<name>}:rw:attempt:<attempt>` | string | written only by the give-back of an acquire whose caller went away, when it finds nothing to give back: a late acquire of that attempt is refused. Kept for the attempt's lease and two command timeouts. Unlocks keep no record, so Redis memory does not grow with throughput |
/// | `<prefix>:{<name>}:rw:wake` | channel | write hold ended, lock freed, or a writer stopped waiting (only when someone registered as waiting) |
/// | `<prefix>:{<name>}:rw:drain` | channel | a writer started waiting while shared read holds exist, or they were force-unlocked or deleted; subscribed by clients while they have a shared read hold |
///
/// The hash and the readers set expire when the longest live hold does. Lease ends are
/// judged by Redis's clock.
///
/// # Round trips
///
/// | operation | round trips |
/// |---|---|
/// | uncontended read or write acquire, release | 1 each |
/// | read while the client's shared read hold may be joined; release of a share that is not the last | 0 |
/// | N readers of one client at once | 2 acquires + 2 releases, whatever N |
/// | contended acquire | 1 + 1 after subscribing + 1 per wake-up; a waiting writer also re-checks every second (keeping its mark alive), and a call that gives up withdraws (+ 1) |
/// | blocked reader | re-checks on every release message of the lock, and at the latest when the hold or the writer mark in its way would end by itself |
/// | a client with shared read holds, per drain message | 1 (read-only check) |
/// | `is_locked`, `force_unlock`, `delete` | 1 |
///
/// # Commands per operation
///
/// Redis commands each script runs (as `INFO commandstats` counts them, `EVALSHA` included),
/// uncontended; `integration-tests/tests/rwlock_hot_path.rs` checks the totals.
///
/// | operation | commands |
/// |---|---|
/// | read acquire (lock free) | 7: `EVALSHA`, `EXISTS`, `TIME`, `ZADD`, `HSET`, `PEXPIREAT` ×2 |
/// | write acquire (lock free) | 6: `EVALSHA`, `EXISTS`, `TIME`, `INCR`, `HSET`, `PEXPIREAT` |
/// | release of the only hold (read or write) | 3: `EVALSHA`, `HMGET`, `DEL` (+ `PUBLISH` if someone waits); an unlock sends 2 keys and 2 arguments, leaving off the record's key and the arguments only a give-back reads |
/// | read + unlock, write + unlock | 10, 9 |
/// | joining or leaving a shared read hold | 0 |
/// | read acquire next to other holds | 6: `EVALSHA`, `EXISTS`, `HMGET`, `TIME`, `ZADD`, `HSET`; + `PEXPIREAT` ×2 when it ends last; + `EXISTS`, `ZREMRANGEBYSCORE`, `ZRANGE` when a writer's mark exists |
/// | release next to other holds | 8: `EVALSHA`, `HMGET`, `TIME`, `ZSCORE`, `ZREM`, `HINCRBY`, `HDEL`, `HSET`; 11 when it was the longest (+ `ZRANGE`, `PEXPIREAT` ×2) |
/// | watchdog renewal of a read hold | 7 per hold (`HMGET`, `TYPE`, `ZSCORE`, `ZADD`, `HSET`, `PEXPIREAT` ×2), + `EVALSHA` and `TIME` per batch |
///
/// # Examples
///
/// ```
/// use redisync::prelude::*;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redisync::Result<()> {
/// # let server = redisync_test_harness::RedisServer::start();
/// # let url = server.url(); // e.g. "redis://127.0.0.1:6379/"
/// let client = Client::connect(url).await?;
/// let users = client.read_write_lock("cache:users");
///
/// let r1 = users.read().await?;
/// let r2 = client.read_write_lock("cache:users").read().await?; // readers share
/// assert!(matches!(users.write().await, Err(Error::UpgradeNotSupported)));
/// r1.unlock().await?;
/// r2.unlock().await?;
///
/// let w = users.write().await?;
/// println!("refreshing under token {}", w.fencing_token());
/// let r = users.read().await?; // the writer may read (downgrade)
/// w.unlock().await?;           // now read-locked by this owner only
/// r.unlock().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct ReadWriteLock {
    core: Arc<RwCore>,
    prefer_writers: bool,
}

impl ReadWriteLock {
    /// A handle to the read-write lock called `name`. Never fails; a bad name is reported as
    /// [`Error::InvalidArgument`] by every call.
    pub fn new(client: &Client, name: impl Into<String>) -> Self {
        let name = name.into();
        let keys = client
            .key_space(&name)
            .map(|space| ReadWriteLockLayout::new(&space));
        let coalescer = keys
            .as_ref()
            .ok()
            .map(|keys| client.local_cell::<Coalescer>(&keys.hash));
        ReadWriteLock {
            core: Arc::new(RwCore {
                owner: client.unique_id().into(),
                client: client.clone(),
                name,
                keys,
                live_write_guards: Arc::default(),
                live_read_guards: Arc::default(),
                live_shared_reads: AtomicUsize::new(0),
                releases: ReleasesInFlight::new(),
                coalescer,
            }),
            prefer_writers: true,
        }
    }

    /// Whether new readers give way to waiting writers (the default, `true`). With `false`,
    /// readers get in whenever no writer holds the lock, which maximises read throughput but
    /// lets a steady stream of readers starve writers. The setting belongs to this handle (and
    /// its later clones): it decides how *its* reads behave.
    pub fn prefer_writers(mut self, prefer: bool) -> Self {
        self.prefer_writers = prefer;
        self
    }

    /// This handle's owner id: the client id and a handle number.
    pub fn owner_id(&self) -> &str {
        &self.core.owner
    }

    /// Takes a read hold, waiting as long as it takes; renewed by the watchdog.
    ///
    /// # Examples
    ///
    /// ```
    /// # use redisync::prelude::*;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redisync::Result<()> {
    /// # let server = redisync_test_harness::RedisServer::start();
    /// # let client = Client::connect(server.url()).await?;
    /// let cache = client.read_write_lock("cache");
    /// let guard = cache.read().await?;
    /// assert!(cache.is_locked().await?);
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves nothing behind: no hold (an attempt on the wire is given
    /// back when it completes, or forbidden from granting), no registration as a waiter, no
    /// place among the client's readers waiting for a shared hold, and no subscription.
    pub async fn read(&self) -> Result<ReadGuard> {
        self.reader().acquire().await
    }

    /// Takes the write hold, waiting as long as it takes; renewed by the watchdog.
    ///
    /// Fails at once with [`Error::UpgradeNotSupported`] if this owner holds a read lock but
    /// not the write lock (the write holder's own reads are a downgrade, and it re-enters).
    ///
    /// # Examples
    ///
    /// ```
    /// # use redisync::prelude::*;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redisync::Result<()> {
    /// # let server = redisync_test_harness::RedisServer::start();
    /// # let client = Client::connect(server.url()).await?;
    /// let cache = client.read_write_lock("cache");
    /// let guard = cache.write().await?;
    /// assert!(guard.fencing_token() > 0);
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves nothing behind: no hold, no queue place, no subscription, no
    /// registration as a waiter, and no waiting-writer mark (readers stop giving way at once).
    pub async fn write(&self) -> Result<WriteGuard> {
        self.writer().acquire().await
    }

    /// Takes a read hold only if that needs no waiting.
    ///
    /// # Cancel safety
    ///
    /// As for [`read`](Self::read).
    pub async fn try_read(&self) -> Result<Option<ReadGuard>> {
        self.reader().try_acquire().await
    }

    /// Takes the write hold only if that needs no waiting. A failed try does not mark the
    /// caller as a waiting writer.
    ///
    /// # Cancel safety
    ///
    /// As for [`write`](Self::write).
    pub async fn try_write(&self) -> Result<Option<WriteGuard>> {
        self.writer().try_acquire().await
    }

    /// Takes a read hold, waiting at most `wait`.
    ///
    /// # Cancel safety
    ///
    /// As for [`read`](Self::read).
    pub async fn try_read_for(&self, wait: Duration) -> Result<Option<ReadGuard>> {
        self.reader().try_acquire_for(wait).await
    }

    /// Takes the write hold, waiting at most `wait`; on giving up, the waiting-writer mark is
    /// withdrawn.
    ///
    /// # Cancel safety
    ///
    /// As for [`write`](Self::write).
    pub async fn try_write_for(&self, wait: Duration) -> Result<Option<WriteGuard>> {
        self.writer().try_acquire_for(wait).await
    }

    /// Takes a read hold with a fixed lease (no watchdog), waiting as long as it takes.
    ///
    /// # Cancel safety
    ///
    /// As for [`read`](Self::read).
    pub async fn read_with_lease(&self, lease: Duration) -> Result<ReadGuard> {
        granted(
            self.reader()
                .acquire_with(Wait::Forever, Lease::Fixed(lease))
                .await?,
        )
    }

    /// Takes the write hold with a fixed lease (no watchdog), waiting as long as it takes.
    ///
    /// # Cancel safety
    ///
    /// As for [`write`](Self::write).
    pub async fn write_with_lease(&self, lease: Duration) -> Result<WriteGuard> {
        granted(
            self.writer()
                .acquire_with(Wait::Forever, Lease::Fixed(lease))
                .await?,
        )
    }

    /// Takes a read hold with a fixed lease, waiting at most `wait`.
    ///
    /// # Cancel safety
    ///
    /// As for [`read`](Self::read).
    pub async fn try_read_with_lease(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<ReadGuard>> {
        let (wait, lease) = (Wait::For(wait), Lease::Fixed(lease));
        self.reader().acquire_with(wait, lease).await
    }

    /// Takes the write hold with a fixed lease, waiting at most `wait`.
    ///
    /// # Cancel safety
    ///
    /// As for [`write`](Self::write).
    pub async fn try_write_with_lease(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<WriteGuard>> {
        let (wait, lease) = (Wait::For(wait), Lease::Fixed(lease));
        self.writer().acquire_with(wait, lease).await
    }

    /// Whether anyone holds the lock, in either mode. Holds whose lease ended do not count.
    ///
    /// # Examples
    ///
    /// ```
    /// # use redisync::prelude::*;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redisync::Result<()> {
    /// # let server = redisync_test_harness::RedisServer::start();
    /// # let client = Client::connect(server.url()).await?;
    /// let lock = client.read_write_lock("inspect");
    /// assert!(!lock.is_locked().await?);
    /// let _r = lock.read().await?;
    /// assert!(lock.is_locked().await?);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn is_locked(&self) -> Result<bool> {
        let keys = self.core.keys()?;
        let call = scripts::Status {
            hash: &keys.hash,
            readers: &keys.readers,
        }
        .call();
        let reply: Vec<i64> = self.core.client.eval(call).await?;
        match reply.as_slice() {
            [writer, readers] => Ok(*writer > 0 || *readers > 0),
            _ => Err(Error::WrongType),
        }
    }

    /// Frees the lock whatever holds it, readers and writer, and wakes the waiters. Returns
    /// whether it was held. The holders' guards then get [`Error::NotOwner`] from `unlock`,
    /// and watchdog-renewed ones are marked lost at once (the call tells the holders'
    /// clients), or at their next renewal on a cluster and for a client that polls.
    ///
    /// # Examples
    ///
    /// ```
    /// # use redisync::prelude::*;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redisync::Result<()> {
    /// # let server = redisync_test_harness::RedisServer::start();
    /// # let client = Client::connect(server.url()).await?;
    /// let lock = client.read_write_lock("stuck");
    /// let _w = lock.write().await?;
    /// assert!(client.read_write_lock("stuck").force_unlock().await?);
    /// assert!(!lock.is_locked().await?);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// One script call: if the future is dropped while it is on the wire, the lock may or may
    /// not have been freed. Calling it again is harmless.
    pub async fn force_unlock(&self) -> Result<bool> {
        let keys = self.core.keys()?;
        let call = scripts::ForceUnlock {
            hash: &keys.hash,
            readers: &keys.readers,
            channel: &keys.channel,
            drain_channel: &keys.drain,
            lost_notices: &self.core.client.lost_notice_prefix(),
        }
        .call();
        let freed: i64 = self.core.client.eval(call).await?;
        Ok(freed == 1)
    }

    /// Checks the arguments of an acquire; returns its deadline.
    fn validate(&self, lease: Option<Duration>, wait: Option<Duration>) -> Result<Option<Instant>> {
        let core = &self.core;
        core.keys()?;
        lease_millis(lease.unwrap_or_else(|| core.client.watchdog_timeout()))?;
        wait.map(wait_deadline).transpose()
    }

    /// A request for a hold of this handle's owner.
    fn request(
        &self,
        side: Side,
        lease: Option<Duration>,
        deadline: Option<Instant>,
        prefer_writers: bool,
    ) -> Request {
        Request {
            side,
            owner: self.core.owner.clone(),
            lease,
            deadline,
            prefer_writers,
            shared: false,
        }
    }

    /// The one read acquire (see [`ReadLock`](crate::ReadLock)): with a fixed `lease` or the
    /// watchdog's, waiting at most `wait` (for ever when `None`).
    pub(crate) async fn acquire_read(
        &self,
        lease: Option<Duration>,
        wait: Option<Duration>,
    ) -> Result<Option<ReadGuard>> {
        let deadline = self.validate(lease, wait)?;
        let core = &self.core;
        core.client.check_running()?;
        let coalescer = core.coalescer()?;
        // A read does not wait for the owner's releases in flight: re-entering a read hold
        // being released, or downgrading a write hold being released, leaves it exactly the
        // read hold it asked for once the release lands.
        let reads_shared = core.live_shared_reads.load(Ordering::Acquire) > 0
            && coalescer.reads_shared(core.handle_id());
        let holds_own = core.live_write_guards.load(Ordering::Acquire) > 0
            || core.live_read_guards.load(Ordering::Acquire) > 0;
        if lease.is_none() && (reads_shared || (self.prefer_writers && !holds_own)) {
            return self.read_coalesced(coalescer, deadline).await;
        }
        // A handle that reads through a shared hold reads as far as Redis is concerned: it
        // must not give way to a writer that waits for that very hold.
        let request = self.request(
            Side::Read,
            lease,
            deadline,
            self.prefer_writers && !reads_shared,
        );
        let granted = self.acquire(request, None).await?;
        Ok(granted.map(|(hold, _)| ReadGuard::own(core.clone(), hold, None)))
    }

    /// A watchdog read that may share the client's read hold: see [`crate::shared`].
    async fn read_coalesced(
        &self,
        coalescer: &Arc<Coalescer>,
        deadline: Option<Instant>,
    ) -> Result<Option<ReadGuard>> {
        let core = &self.core;
        if let Some(share) = join(coalescer, core).await {
            core.client.record_acquires("rwlock", &core.keys()?.hash, 1);
            // This read waited for nothing: let the runtime run other tasks now and then, as
            // tokio's own primitives do, or a task reading in a loop would never yield.
            tokio::task::coop::consume_budget().await;
            return Ok(Some(ReadGuard::shared(core.clone(), share)));
        }
        let no_wait = deadline.is_some_and(|d| Instant::now() >= d);
        match coalescer.enter(no_wait, &core.client, &core.check_keys()?) {
            Road::Solo(ticket) => {
                let request = self.request(Side::Read, None, deadline, true);
                let granted = self.acquire(request, None).await?;
                Ok(granted.map(|(hold, _)| ReadGuard::own(core.clone(), hold, Some(ticket))))
            }
            Road::Found(ticket) => {
                let founded = self.found(coalescer, deadline).await;
                drop(ticket);
                Ok(founded?.map(|share| ReadGuard::shared(core.clone(), share)))
            }
        }
    }

    /// Founds a shared read hold (one founder at a time), or joins the one the founder before
    /// this one got.
    async fn found(
        &self,
        coalescer: &Arc<Coalescer>,
        deadline: Option<Instant>,
    ) -> Result<Option<Share>> {
        let core = &self.core;
        let Some(_turn) = coalescer
            .founding_turn(&core.client, &core.keys()?.hash, deadline)
            .await?
        else {
            return Ok(None);
        };
        if let Some(share) = join(coalescer, core).await {
            core.client.record_acquires("rwlock", &core.keys()?.hash, 1);
            return Ok(Some(share));
        }
        let mut within = core.client.command_timeout();
        if let Some(deadline) = deadline {
            within = within.min(deadline.saturating_duration_since(Instant::now()));
        }
        let drain = coalescer.drain_watch(within).await;
        let request = Request {
            side: Side::Read,
            // Recognisable in `redisync inspect`: the readers of one client, not one handle.
            owner: format!("{}:shared", core.client.unique_id()).into(),
            lease: None,
            deadline,
            prefer_writers: true,
            shared: true,
        };
        match self.acquire(request, Some(&drain)).await {
            Ok(Some((hold, granted))) => Ok(Some(coalescer.install(
                hold,
                granted.attempt,
                granted.sent_generation,
                core,
            ))),
            Ok(None) => Ok(None),
            Err(err) => {
                coalescer.fail(&err);
                Err(err)
            }
        }
    }

    /// The one write acquire (see [`WriteLock`](crate::WriteLock)): with a fixed `lease` or
    /// the watchdog's, waiting at most `wait` (for ever when `None`).
    pub(crate) async fn acquire_write(
        &self,
        lease: Option<Duration>,
        wait: Option<Duration>,
    ) -> Result<Option<WriteGuard>> {
        let deadline = self.validate(lease, wait)?;
        let core = &self.core;
        core.settle_releases().await?;
        if core.live_shared_reads.load(Ordering::Acquire) > 0
            && core.coalescer()?.reads_shared(core.handle_id())
        {
            // This owner reads through the client's shared hold, which Redis knows under
            // another owner id: it cannot refuse the upgrade, and the write would wait for
            // this very reader.
            return Err(Error::UpgradeNotSupported);
        }
        let request = self.request(Side::Write, lease, deadline, false);
        let granted = self.acquire(request, None).await?;
        Ok(granted.map(|(hold, granted)| WriteGuard::new(core.clone(), granted.token, hold)))
    }

    /// Acquires what `request` asks for, waiting as it says. While it waits, the call is
    /// registered in Redis as a waiter (and a writer marked); ending without the lock withdraws
    /// that before returning (a failure or cancellation leaves it to the background).
    async fn acquire(
        &self,
        request: Request,
        drain: Option<&DrainWatch>,
    ) -> Result<Option<(Hold, Granted)>> {
        let core = &self.core;
        let mark = WaiterMark::new(core.clone(), request.side);
        let keys = core.keys()?;
        let side = request.side;
        let lease_for = request
            .lease
            .unwrap_or_else(|| core.client.watchdog_timeout());
        let spec = WaitSpec {
            kind: "rwlock",
            queue: match side {
                Side::Read => &keys.read_queue,
                Side::Write => &keys.write_queue,
            },
            channel: &keys.channel,
            deadline: request.deadline,
            may_reenter: side == Side::Write
                && (core.live_write_guards.load(Ordering::Acquire) > 0
                    || core.live_read_guards.load(Ordering::Acquire) > 0),
            shared: side == Side::Read,
            expect_busy: false,
        };
        let granted = core
            .client
            .acquire(spec, || self.attempt(&request, lease_for, &mark, drain))
            .instrument(tracing::debug_span!("redisync.rwlock", name = %core.name, side = ?side))
            .await?;
        let Some(granted) = granted else {
            // Gave up: withdraw before returning, so that readers stop giving way to this
            // writer by the time the caller learns it has no lock.
            mark.withdraw().await;
            return Ok(None);
        };
        // The grant removed the mark and the registration in the same script.
        mark.disarm();
        let lease = match request.lease {
            Some(lease) => core.client.fixed_lease(granted.sent_at, lease),
            None => {
                let hold = scripts::RenewedHold {
                    hash: &keys.hash,
                    readers: &keys.readers,
                    attempt: &granted.attempt,
                };
                core.client
                    .watch_lease(&scripts::RENEW, hold.keys(), hold.args(), granted.sent_at)
            }
        };
        // The acquire's reply came: a release of this hold needs no record.
        let release = core.release_call(&granted.attempt, Duration::ZERO, "")?;
        Ok(Some((
            Hold::new(core.client.clone(), release, lease),
            granted,
        )))
    }

    /// One acquire request. If the caller stops waiting while it is on the wire, or its
    /// outcome is unknown, whatever it may get is given back in the background.
    fn attempt(
        &self,
        request: &Request,
        lease: Duration,
        mark: &WaiterMark,
        drain: Option<&DrainWatch>,
    ) -> impl Future<Output = Result<Attempt<Granted>>> + Send + 'static {
        let core = self.core.clone();
        let side = request.side;
        let sent_at = Instant::now();
        let sent_generation = drain.and_then(DrainWatch::confirmed_generation);
        let attempt = core.client.unique_id();
        let will_wait = request.deadline.is_none_or(|d| sent_at < d);
        // A call that is going to wait registers (and a writer marks): then its mark must be
        // withdrawn if it ends without the lock.
        if will_wait {
            mark.armed.store(true, Ordering::Release);
        }
        let waiter = if will_wait { mark.waiter.as_str() } else { "" };
        let request_call = core.keys().and_then(|keys| {
            let call = match side {
                Side::Read => scripts::AcquireRead {
                    hash: &keys.hash,
                    readers: &keys.readers,
                    waiting_writers: &keys.writers,
                    attempt_record: &keys.attempt_records.of(&attempt),
                    owner: &request.owner,
                    lease_ms: redis_millis(lease),
                    attempt: &attempt,
                    prefer_writers: request.prefer_writers,
                    waiter,
                    shared: request.shared,
                }
                .call(),
                Side::Write => {
                    // Mark only a writer that is going to wait; a failed try stays unnoticed.
                    let mark_ms = if will_wait {
                        redis_millis(WRITER_MARK_LIFETIME)
                    } else {
                        0
                    };
                    scripts::AcquireWrite {
                        hash: &keys.hash,
                        readers: &keys.readers,
                        waiting_writers: &keys.writers,
                        fence: &keys.fence,
                        attempt_record: &keys.attempt_records.of(&attempt),
                        waiter_record: &keys.waiter_records.of(&mark.waiter),
                        owner: &request.owner,
                        lease_ms: redis_millis(lease),
                        attempt: &attempt,
                        waiter: &mark.waiter,
                        mark_ms,
                        drain_channel: &keys.drain,
                    }
                    .call()
                }
            }
            .counted_in(&core.releases);
            // Should Redis run the acquire after its give-back, the record refuses it: kept
            // past the lease, so a grant that could still run is refused. A busy read attempt
            // of a waiting call registered it: its give-back takes that out too (the call's
            // withdrawal may have run before it). A writer's needs no such thing: its
            // withdrawal's record keeps a late attempt from marking or registering.
            let (give_back, undo): (_, fn(&IntOrList) -> bool) = match side {
                Side::Read if will_wait => (
                    core.release_call(&attempt, lease.saturating_add(core.retry_window()), waiter)?,
                    |reply| {
                        matches!(
                            AcquireReply::decode_read(reply),
                            Ok(AcquireReply::Acquired { .. } | AcquireReply::Busy { .. })
                        )
                    },
                ),
                Side::Read => (
                    core.release_call(&attempt, lease.saturating_add(core.retry_window()), "")?,
                    |reply| {
                        matches!(
                            AcquireReply::decode_read(reply),
                            Ok(AcquireReply::Acquired { .. })
                        )
                    },
                ),
                Side::Write => (
                    core.release_call(&attempt, lease.saturating_add(core.retry_window()), "")?,
                    |reply| {
                        matches!(
                            AcquireReply::decode_write(reply),
                            Ok(AcquireReply::Acquired { .. })
                        )
                    },
                ),
            };
            Ok(core
                .client
                .eval_acquire_leased(call, give_back, undo, Some(lease)))
        });
        async move {
            let reply = request_call?.await?;
            Ok(match side.decode(&reply)? {
                AcquireReply::Acquired { token } => Attempt::Acquired(Granted {
                    attempt,
                    token,
                    sent_at,
                    sent_generation,
                }),
                AcquireReply::Busy { retry_in } => Attempt::Busy {
                    retry_in: match side {
                        // A waiting writer comes back in time to keep its mark alive.
                        Side::Write if will_wait => Some(
                            retry_in.map_or(WRITER_MARK_REFRESH, |r| r.min(WRITER_MARK_REFRESH)),
                        ),
                        _ => retry_in,
                    },
                },
                AcquireReply::Upgrade => return Err(Error::UpgradeNotSupported),
                // Only an attempt given back before it ran says this, and nobody awaits those.
                AcquireReply::GivenBack => Attempt::Busy { retry_in: None },
            })
        }
    }
}

/// Joins a shared hold of the client if one may be joined, waiting (at most a command
/// timeout) for the check of one that a message put in doubt.
async fn join(coalescer: &Arc<Coalescer>, core: &Arc<RwCore>) -> Option<Share> {
    let started = Instant::now();
    loop {
        match coalescer.try_join(core) {
            Join::Joined(share) => return Some(share),
            Join::NotJoinable => return None,
            Join::WaitForCheck(seen) => {
                let left = core
                    .client
                    .command_timeout()
                    .checked_sub(started.elapsed())?;
                if !coalescer.wait_for_check(seen, left).await {
                    return None;
                }
            }
        }
    }
}

/// An acquire call's "I am waiting" traces in Redis: its registration as a waiter (so that
/// releases publish for it) and, for a writer, its mark (so that new readers give way).
/// Withdrawn when the call ends without the lock (gave up, failed, or was dropped), so that
/// readers stop giving way to a writer that left and releases stop publishing for nobody.
struct WaiterMark {
    core: Arc<RwCore>,
    side: Side,
    waiter: String,
    /// Set once an attempt that may mark or register was sent.
    armed: AtomicBool,
}

impl WaiterMark {
    fn new(core: Arc<RwCore>, side: Side) -> Self {
        let waiter = core.client.unique_id();
        WaiterMark {
            core,
            side,
            waiter,
            armed: AtomicBool::new(false),
        }
    }

    fn disarm(&self) {
        self.armed.store(false, Ordering::Release);
    }

    /// The call that removes the mark and the registration.
    fn call(&self, keys: &RwKeys) -> ScriptCall {
        scripts::Withdraw {
            waiting_writers: &keys.writers,
            waiter_record: &keys.waiter_records.of(&self.waiter),
            hash: &keys.hash,
            waiter: &self.waiter,
            channel: &keys.channel,
            record_ms: match self.side {
                // Outlives any late attempt of this waiter, so none can mark again.
                Side::Write => redis_millis(
                    WRITER_MARK_LIFETIME.saturating_add(self.core.client.abandoned_request_grace()),
                ),
                // A reader needs no record: a late attempt of it, should it register, is
                // given back with its registration (see `attempt`).
                Side::Read => 0,
            },
        }
        .call()
    }

    fn withdraw_call(&self) -> Option<ScriptCall> {
        if !self.armed.load(Ordering::Acquire) {
            return None;
        }
        Some(self.call(self.core.keys().ok()?))
    }

    /// Withdraws the mark now. If that fails (or the future is dropped first), the mark stays
    /// armed and its drop withdraws it in the background.
    async fn withdraw(&self) {
        if let Some(call) = self.withdraw_call() {
            if self.core.client.eval_idempotent::<i64>(call).await.is_ok() {
                self.disarm();
            }
        }
    }
}

impl Drop for WaiterMark {
    fn drop(&mut self) {
        if let Some(call) = self.withdraw_call() {
            // The mark lapses by itself: no need to retry past that. (A registration left
            // behind costs a needless message per release, until the lock is next free.)
            let retry = self
                .core
                .client
                .retry_for_lease(Instant::now(), Some(WRITER_MARK_LIFETIME));
            self.core.client.spawn_release(call, retry);
        }
    }
}

#[async_trait]
impl DistributedPrimitive for ReadWriteLock {
    fn name(&self) -> &str {
        &self.core.name
    }

    /// Removes the holds and the waiting-writer marks and wakes every waiter. The fencing
    /// counter is kept, so write tokens never repeat.
    async fn delete(&self) -> Result<bool> {
        let keys = self.core.keys()?;
        let call = scripts::Delete {
            hash: &keys.hash,
            readers: &keys.readers,
            waiting_writers: &keys.writers,
            channel: &keys.channel,
            drain_channel: &keys.drain,
            lost_notices: &self.core.client.lost_notice_prefix(),
        }
        .call();
        let deleted: i64 = self.core.client.eval(call).await?;
        Ok(deleted == 1)
    }
}
