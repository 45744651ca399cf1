//! [`ReentrantLock`]: a reentrant mutual-exclusion lock shared by every process that uses the
//! same Redis and name.

use std::sync::Arc;
use std::time::Duration;

use redisync_core::toolkit::{
    async_trait, granted, Acquire, Client, DistributedPrimitive, Lease, Result, Wait,
};

// Named in the documentation only.
#[cfg(doc)]
use redisync_core::toolkit::Error;

use crate::core::{Kind, LockCore};
use crate::guard::LockGuard;

/// A reentrant distributed lock, like Redisson's `RLock`.
///
/// Create one with `client.lock(name)` (the `ClientExt` method of the `redisync` crate) or
/// [`ReentrantLock::new`]. The handle is cheap to clone; clones share one owner identity, so a
/// clone acquiring while another clone holds the lock re-enters it. Two handles created
/// separately, even in the same task, are different owners and exclude each other.
///
/// Each acquisition returns a [`LockGuard`]. The guard releases one hold when dropped (in the
/// background) or explicitly with [`LockGuard::unlock`], which reports whether the hold was
/// still ours. Without an explicit lease the lease is the client's watchdog timeout and the
/// watchdog renews it while the guard lives; with one, the hold simply expires.
///
/// # Redis keys
///
/// | key / channel | type | content |
/// |---|---|---|
/// | `<prefix>:{<name>}:lock` | hash | `owner` (owner id), `count` (holds), `token` (fencing token), `a:<attempt>` (one per live hold: `1`, `h` for a hold handed over in a wake-up, or `fixed` once [`LockGuard::fix_lease`] fixed its lease, so that no watchdog renewal extends it), `w` (`1` while clients may be registered as waiting: only then does the release look for one to wake); exists exactly while the lock is held, and expires with the lease |
/// | `<prefix>:{<name>}:fence` | string | last fencing token handed out; never expires |
/// | `<prefix>:{<name>}:waiters` | sorted set | one entry per *client* with tasks waiting: its wake-up channel → when it registered (server µs); a waiting client registers again every second, and the set expires about 5 s (plus two command timeouts) after the last registration |
/// | `<prefix>:{<name>}:offers` | hash | one entry per waiting client whose head task offered to take the lock in its wake-up: its wake-up channel → the task's owner id, the id of the attempt that offered, the hand-over lease it asks for, and when (server ms); expires with the registry |
/// | `<prefix>:{<name>}:attempt:<attempt>` | string | only for an acquire whose outcome was unknown and that was given back (its caller went away, or the connection broke): the give-back's outcome, kept for the lease plus two command timeouts, so that the acquire can no longer grant if Redis runs it late |
/// | `<prefix>:{<name>}:wake:<client id>` | channel | one per waiting client: the release that frees the lock publishes on the channel of the client that has waited longest, and only when some client waits: `g <attempt> <token>` when it handed the lock over to that client's offer, else `w` |
///
/// A release keeps no record: a release that is sent again after a broken connection, and
/// finds the hold already gone, is judged by the client (see [`LockGuard::unlock`]). So the
/// keys a busy lock leaves in Redis do not grow with its rate of releases.
///
/// # Round trips and work in Redis
///
/// | operation | round trips | commands run inside Redis |
/// |---|---|---|
/// | uncontended acquire | 1 (4 keys, 3 arguments: a first try leaves off what only registering and offering read) | 4: `EXISTS` (attempt record, lock and registry of waiters, one call), `INCR` (fence), `HSET`, `PEXPIRE` |
/// | re-entry | 1 | 7: `EXISTS` ×2, `HLEN`, `HMGET`, `HINCRBY`, `HSET`, `PEXPIRE GT` |
/// | release, nobody waiting | 1 (4 keys, 1 argument: a guard's release keeps no record, and leaves off its key) | 2: `HMGET`, `DEL` (the hash says nobody registered: no look at the registry, no `PUBLISH`) |
/// | release with clients waiting | 1 | as above, then `ZRANGE`, `ZREM`, `HGET` (its offer) and one `PUBLISH` to one client; a hand-over adds `HDEL`, `TIME`, `INCR`, `HSET`, `PEXPIRE` (a grant) |
/// | contended acquire | 1 + 1 after subscribing, and 1 per second of waiting (`RECHECK`); 0 when a release hands the lock over in the wake-up and the waiting task claims it from the message (its offer was made less than three quarters of the hand-over lease before), else 1 per wake-up | one more `EXISTS` than uncontended when a key exists; a failed attempt after subscribing also registers the client (`ZSCORE`, `TIME`, `ZRANGE`, `ZADD`, `PTTL`, `PEXPIRE`), marks the hash (`HSET`) and offers to take the lock in its wake-up (`HSET`, `TIME`, `PEXPIRE`); the first try, made before, does none of it |
/// | a hold handed over in the wake-up | 0 to take it; + 1 in the background (the watchdog lengthening its short lease) if the guard lives past half of it | |
/// | contended acquire granted while more tasks of the client wait | as above | with a fixed lease, the grant sends the client to the back of the registry (`ZREM`, then as a registration); with the watchdog's, the next task asks at once instead, offering |
/// | the next of those tasks, with a fixed lease | 0 before its wake-up, then as a contended acquire | |
/// | a wait given up while its client is registered, by the client's last waiting task | + 1 in the background (`lock_withdraw`) | |
/// | introspection, `force_unlock` | 1 | |
///
/// A contended hand-off costs two scripts whatever the number of waiting clients. With the
/// watchdog's lease (`lock()`, `try_lock_for`) on a client that hears wake-ups by pub/sub and
/// does not wait for replicas, the first task of each waiting client offers
/// to take the lock in its wake-up when it finds it taken, and the release that frees the lock
/// grants it to the offer of the client that has waited longest, with a short lease (a
/// second, or the client's watchdog lease if shorter), and says so in the wake-up: the woken
/// task holds the lock as soon as the message arrives, without a request of its own, and its
/// watchdog lengthens the lease once half of it has passed. The two scripts are then the
/// release and the registering acquire of the client's next waiting task, made while the
/// lock is held, off the hand-off's path. A designee that cannot take what it was handed
/// delays the others no longer than a lost wake-up would: one that is gone or stopped
/// keeps the lock for the short lease at most; one whose task was cancelled gives the hold
/// back with its withdrawal, or its next waiting task takes it over with its next acquire. A
/// task that reads its wake-up too late to be sure of that lease asks instead, and its acquire
/// takes the hold over. Only the owner whose attempt offered takes the hold, and only while enough of the
/// short lease is surely left, counted from when its offering request was sent.
///
/// With a fixed lease, the release keeps the lock for the waiting client in the same way, and
/// its task takes that hold over with its own lease in one acquire: the two scripts are the
/// release and that acquire. Polling or with replica sync, the woken client asks: the two
/// scripts are again the release and that acquire, but the lock is free meanwhile. When more
/// tasks of that client wait, its grant keeps the client registered for them, at the back, so the next of them waits for its wake-up without asking Redis first;
/// it asks all the same if a wake-up came between the grant and its turn, and at the latest a
/// second after its turn came (`RECHECK`), or when the hold just granted would lapse
/// unrenewed, if sooner. Clients take turns in the order they registered, however long the
/// holds: the release hands the lock to (or keeps it for) the client that waited longest, so
/// a holder that asks again at once queues behind it. A client woken without a hand-over (it
/// polls, or waits for replicas, or its turn came while it stayed registered for further
/// fixed-lease tasks of its own) competes with a first try made while its wake-up is on its
/// way: it may lose that turn, and then registers again at the back. Within a client, tasks
/// take turns in the order they asked.
///
/// # Examples
///
/// ```
/// use redisync::prelude::*;
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redisync::Result<()> {
/// # let server = redisync_test_harness::RedisServer::start();
/// # let url = server.url(); // e.g. "redis://127.0.0.1:6379/"
/// let client = Client::connect(url).await?;
/// let lock = client.lock("orders:42");
///
/// let guard = lock.lock().await?;
/// // Work, passing guard.fencing_token() to the storage you write to.
/// let again = lock.clone().lock().await?;          // a clone re-enters
/// assert_eq!(again.fencing_token(), guard.fencing_token());
/// assert_eq!(lock.hold_count().await?, 2);
///
/// let other = client.lock("orders:42"); // another owner
/// assert!(other.try_lock_for(Duration::from_millis(50)).await?.is_none());
///
/// again.unlock().await?;
/// guard.unlock().await?;
/// assert!(other.try_lock().await?.is_some());
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct ReentrantLock {
    pub(crate) core: Arc<LockCore>,
}

impl ReentrantLock {
    /// A handle to the lock called `name`. Never fails; a bad name (empty, over
    /// [`MAX_NAME_LEN`](redisync_core::keys::MAX_NAME_LEN) bytes, or starting with `}`) is
    /// reported as [`Error::InvalidArgument`] by every call.
    pub fn new(client: &Client, name: impl Into<String>) -> Self {
        ReentrantLock {
            core: Arc::new(LockCore::new(client, name.into(), Kind::Reentrant)),
        }
    }

    /// This handle's owner id: the client id and a handle number.
    pub fn owner_id(&self) -> &str {
        &self.core.owner
    }

    /// The client this handle uses.
    pub fn client(&self) -> &Client {
        &self.core.client
    }

    /// Acquires the lock, waiting as long as it takes. The lease is the client's watchdog
    /// timeout, renewed by the watchdog while the guard lives.
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] or [`Error::Timeout`] if Redis fails or does not answer within the
    /// command timeout (waiting never turns an outage into a hang), [`Error::Shutdown`] after
    /// the client is shut down, [`Error::InvalidArgument`] for a bad name, [`Error::WrongType`]
    /// if the lock's key holds foreign data.
    ///
    /// # Examples
    ///
    /// ```
    /// # use redisync::prelude::*;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redisync::Result<()> {
    /// # let server = redisync_test_harness::RedisServer::start();
    /// # let client = Client::connect(server.url()).await?;
    /// # use std::time::Duration;
    /// let lock = client.lock("orders:42");
    /// let guard = lock.lock().await?;
    /// assert!(lock.is_held().await?);
    /// drop(guard); // released in the background
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Dropping the future at any point leaves nothing behind: the local queue place and the
    /// subscription are released at once, and if an acquire request was in flight it finishes
    /// in the background and, if it took the lock, gives that hold back (if its outcome cannot
    /// be learned, the give-back also forbids Redis from granting it later).
    pub async fn lock(&self) -> Result<LockGuard> {
        Acquire::acquire(self).await
    }

    /// Acquires the lock with a fixed lease: no watchdog, the hold expires `lease` after it
    /// was taken unless released first. A lease under
    /// [`MIN_LEASE`](redisync_core::MIN_LEASE) (10 ms) or too large for Redis is
    /// [`Error::InvalidArgument`].
    ///
    /// # Examples
    ///
    /// ```
    /// # use redisync::prelude::*;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redisync::Result<()> {
    /// # let server = redisync_test_harness::RedisServer::start();
    /// # let client = Client::connect(server.url()).await?;
    /// # use std::time::Duration;
    /// let lock = client.lock("nightly-report");
    /// let guard = lock.lock_with_lease(Duration::from_secs(60)).await?;
    /// assert!(lock.remaining_lease().await?.unwrap() <= Duration::from_secs(60));
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// As for [`lock`](Self::lock).
    pub async fn lock_with_lease(&self, lease: Duration) -> Result<LockGuard> {
        granted(
            self.acquire_with(Wait::Forever, Lease::Fixed(lease))
                .await?,
        )
    }

    /// Acquires the lock only if it is free (or already ours); never waits.
    ///
    /// # Examples
    ///
    /// ```
    /// # use redisync::prelude::*;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redisync::Result<()> {
    /// # let server = redisync_test_harness::RedisServer::start();
    /// # let client = Client::connect(server.url()).await?;
    /// # use std::time::Duration;
    /// let lock = client.lock("cron:cleanup");
    /// if let Some(guard) = lock.try_lock().await? {
    ///     // Only one instance runs the job.
    ///     guard.unlock().await?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// As for [`lock`](Self::lock).
    pub async fn try_lock(&self) -> Result<Option<LockGuard>> {
        self.try_acquire().await
    }

    /// Acquires the lock, waiting at most `wait`; `Ok(None)` if it is still busy then. A zero
    /// wait does not wait.
    ///
    /// # Examples
    ///
    /// ```
    /// # use redisync::prelude::*;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redisync::Result<()> {
    /// # let server = redisync_test_harness::RedisServer::start();
    /// # let client = Client::connect(server.url()).await?;
    /// # use std::time::Duration;
    /// let holder = client.lock("cache:refresh");
    /// let _held = holder.lock().await?;
    /// let other = client.lock("cache:refresh");
    /// assert!(other.try_lock_for(Duration::from_millis(50)).await?.is_none());
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// As for [`lock`](Self::lock).
    pub async fn try_lock_for(&self, wait: Duration) -> Result<Option<LockGuard>> {
        self.try_acquire_for(wait).await
    }

    /// Acquires the lock with a fixed `lease`, waiting at most `wait`.
    ///
    /// # Examples
    ///
    /// ```
    /// # use redisync::prelude::*;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redisync::Result<()> {
    /// # let server = redisync_test_harness::RedisServer::start();
    /// # let client = Client::connect(server.url()).await?;
    /// # use std::time::Duration;
    /// let lock = client.lock("payments:7");
    /// let guard = lock
    ///     .try_lock_with_lease(Duration::from_millis(500), Duration::from_secs(10))
    ///     .await?
    ///     .expect("free");
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// As for [`lock`](Self::lock).
    pub async fn try_lock_with_lease(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<LockGuard>> {
        self.acquire_with(Wait::For(wait), Lease::Fixed(lease))
            .await
    }

    /// Whether anyone holds the lock.
    ///
    /// # Examples
    ///
    /// ```
    /// # use redisync::prelude::*;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redisync::Result<()> {
    /// # let server = redisync_test_harness::RedisServer::start();
    /// # let client = Client::connect(server.url()).await?;
    /// # use std::time::Duration;
    /// let lock = client.lock("jobs:1");
    /// assert!(!lock.is_locked().await?);
    /// let _guard = lock.lock().await?;
    /// assert!(client.lock("jobs:1").is_locked().await?);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn is_locked(&self) -> Result<bool> {
        self.core.is_locked().await
    }

    /// Whether this handle's owner holds the lock.
    ///
    /// # Examples
    ///
    /// ```
    /// # use redisync::prelude::*;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redisync::Result<()> {
    /// # let server = redisync_test_harness::RedisServer::start();
    /// # let client = Client::connect(server.url()).await?;
    /// # use std::time::Duration;
    /// let lock = client.lock("jobs:2");
    /// let _guard = lock.lock().await?;
    /// assert!(lock.clone().is_held().await?); // clones share the owner
    /// assert!(!client.lock("jobs:2").is_held().await?);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn is_held(&self) -> Result<bool> {
        Ok(self.core.hold_count().await? > 0)
    }

    /// How many holds this handle's owner has (0 if it does not hold the lock).
    ///
    /// # Examples
    ///
    /// ```
    /// # use redisync::prelude::*;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redisync::Result<()> {
    /// # let server = redisync_test_harness::RedisServer::start();
    /// # let client = Client::connect(server.url()).await?;
    /// # use std::time::Duration;
    /// let lock = client.lock("jobs:3");
    /// let outer = lock.lock().await?;
    /// let inner = lock.lock().await?; // re-entry
    /// assert_eq!(lock.hold_count().await?, 2);
    /// inner.unlock().await?;
    /// outer.unlock().await?;
    /// assert_eq!(lock.hold_count().await?, 0);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn hold_count(&self) -> Result<u32> {
        self.core.hold_count().await
    }

    /// The time left on the current hold, whoever owns it; `None` when the lock is free.
    /// ([`Error::WrongType`] if the key has no expiry: redisync never writes such a lock.)
    ///
    /// # Examples
    ///
    /// ```
    /// # use redisync::prelude::*;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redisync::Result<()> {
    /// # let server = redisync_test_harness::RedisServer::start();
    /// # let client = Client::connect(server.url()).await?;
    /// # use std::time::Duration;
    /// let lock = client.lock("jobs:4");
    /// assert_eq!(lock.remaining_lease().await?, None);
    /// let _guard = lock.lock_with_lease(Duration::from_secs(5)).await?;
    /// assert!(lock.remaining_lease().await?.unwrap() > Duration::from_secs(4));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn remaining_lease(&self) -> Result<Option<Duration>> {
        self.core.remaining_lease().await
    }

    /// Frees the lock whoever holds it and wakes the waiters. Returns whether it was held.
    /// Guards of the removed hold find out: their `unlock` returns [`Error::NotOwner`], and
    /// watchdog-renewed ones are marked lost at once (within a round trip or two: the call
    /// tells the holder's client, whose watchdog checks its holds on the spot), or at their
    /// next renewal on a cluster and for a client that polls
    /// ([`WaitStrategy::Poll`](redisync_core::WaitStrategy::Poll)).
    ///
    /// # Examples
    ///
    /// ```
    /// # use redisync::prelude::*;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redisync::Result<()> {
    /// # let server = redisync_test_harness::RedisServer::start();
    /// # let client = Client::connect(server.url()).await?;
    /// # use std::time::Duration;
    /// let stuck = client.lock("jobs:5");
    /// let guard = stuck.lock().await?;
    /// assert!(client.lock("jobs:5").force_unlock().await?);
    /// assert!(matches!(guard.unlock().await, Err(Error::NotOwner)));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// One script call: if the future is dropped while it is on the wire, the lock may or may
    /// not have been freed. Calling it again is harmless.
    pub async fn force_unlock(&self) -> Result<bool> {
        self.core.force_unlock().await
    }

    /// Acquires every lock of `locks` or none, in one script call and without waiting: the
    /// building block of a multi-lock whose locks live on one server. Returns a guard per lock,
    /// in the order given, or `None` (nothing taken) if any of them is held by another owner.
    /// A lock this owner holds already is re-entered. With `lease`, each hold expires after it;
    /// without, the watchdog renews them.
    ///
    /// Every handle must use the same client, and no lock may appear twice (two handles to one
    /// name count as the same lock); otherwise, or for an empty slice, this is
    /// [`Error::InvalidArgument`]. The script touches every lock's keys, so on Redis Cluster
    /// the locks must share a slot.
    ///
    /// ```
    /// use redisync::prelude::*;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redisync::Result<()> {
    /// # let server = redisync_test_harness::RedisServer::start();
    /// # let client = Client::connect(server.url()).await?;
    /// let from = client.lock("account:1");
    /// let to = client.lock("account:2");
    /// let guards = ReentrantLock::try_lock_all(&[from.clone(), to.clone()], None).await?;
    /// assert_eq!(guards.map(|g| g.len()), Some(2));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped while the request is on the wire, whatever it took is given
    /// back in the background, or the request is forbidden from taking anything.
    pub async fn try_lock_all(
        locks: &[ReentrantLock],
        lease: Option<Duration>,
    ) -> Result<Option<Vec<LockGuard>>> {
        let cores: Vec<_> = locks.iter().map(|lock| lock.core.clone()).collect();
        LockCore::acquire_all(&cores, lease).await
    }
}

#[async_trait]
impl DistributedPrimitive for ReentrantLock {
    fn name(&self) -> &str {
        self.core.name()
    }

    /// Same as [`ReentrantLock::force_unlock`]: the lock has no other state (the fencing
    /// counter is kept on purpose).
    async fn delete(&self) -> Result<bool> {
        self.force_unlock().await
    }
}

impl Acquire for ReentrantLock {
    type Guard = LockGuard;

    /// Acquires the lock, waiting as `wait` says; with [`Lease::Watchdog`] the watchdog renews
    /// the lease while the guard lives, with [`Lease::Fixed`] the hold expires by itself. The
    /// one acquire of the lock: [`lock`](ReentrantLock::lock),
    /// [`try_lock_for`](ReentrantLock::try_lock_for) and the others are shorthands for it.
    ///
    /// # Errors
    ///
    /// As for [`lock`](ReentrantLock::lock); a fixed lease under
    /// [`MIN_LEASE`](redisync_core::MIN_LEASE) or a lease or wait too large for Redis is
    /// [`Error::InvalidArgument`].
    ///
    /// # Examples
    ///
    /// ```
    /// use redisync::prelude::*;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redisync::Result<()> {
    /// # let server = redisync_test_harness::RedisServer::start();
    /// # let client = Client::connect(server.url()).await?;
    /// let lock = client.lock("invoices");
    /// let guard = lock
    ///     .acquire_with(Wait::For(Duration::from_secs(1)), Lease::Fixed(Duration::from_secs(30)))
    ///     .await?
    ///     .expect("free");
    /// assert_eq!(Held::fencing_token(&guard), Some(guard.fencing_token()));
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// As for [`lock`](ReentrantLock::lock).
    async fn acquire_with(&self, wait: Wait, lease: Lease) -> Result<Option<LockGuard>> {
        self.core.acquire(lease.duration(), wait.limit()).await
    }
}
