//! [`FairLock`]: a reentrant lock that goes to its waiters in the order they came.

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

/// How often a waiting [`FairLock`] caller proves it is alive, unless set with
/// [`FairLock::with_heartbeat`].
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(1);

/// A reentrant distributed lock that is handed to waiters first come, first served, across
/// every client: Redisson's `RFairLock`, without its stalls.
///
/// Create one with `client.fair_lock(name)` (the `ClientExt` method of the `redisync` crate)
/// or [`FairLock::new`]. It has the API of [`ReentrantLock`](crate::ReentrantLock) and returns
/// the same [`LockGuard`]: re-entry, leases, the watchdog, fencing tokens and `lost()` behave
/// exactly alike. What differs is waiting:
///
/// * **Order.** A caller that has to wait joins a queue in Redis with its first request, so
///   the lock goes to waiters in the order Redis saw them arrive, whichever client they are
///   on. Nobody overtakes a waiter: [`try_lock`](Self::try_lock) takes the lock only if it is
///   free *and* nobody waits, and never queues. A re-entry by the holder never waits.
/// * **No herd.** Each waiter listens on a channel of its own, and a release wakes only the
///   head of the queue.
/// * **Dead waiters do not stall the queue.** While it waits, a caller re-sends its request
///   every heartbeat ([`DEFAULT_HEARTBEAT`], one second, unless set with
///   [`with_heartbeat`](Self::with_heartbeat)), which keeps its place. A waiter silent for
///   its *place lifetime* (three heartbeats, or a heartbeat plus the client's command timeout
///   if that is longer: 6 s with the defaults) counts as dead and is removed wherever it
///   stands in the queue, so the next waiter goes ahead within about that plus a heartbeat.
///   Redisson keeps a dead waiter for five minutes, and only removes heads. A waiter's own
///   request always renews its place before anyone is judged, so a stall of Redis shorter
///   than the place lifetime costs nobody their place; after a longer stall (clients have
///   timed out by then) the waiters rejoin in the order their next requests arrive.
/// * **Giving up is immediate.** A waiter whose wait runs out, or whose future is dropped,
///   leaves the queue at once, waking the next one if the lock is free.
///
/// A `FairLock` and a [`ReentrantLock`](crate::ReentrantLock) of the same name are different
/// locks, with separate keys and fencing tokens.
///
/// # Redis keys
///
/// | key / channel | type | content |
/// |---|---|---|
/// | `<prefix>:{<name>}:fair:lock` | hash | as the reentrant lock's `lock` hash |
/// | `<prefix>:{<name>}:fair:fence` | string | last fencing token handed out; never expires |
/// | `<prefix>:{<name>}:fair:attempt:<waiter>` | string | outcome of giving back one acquire call's hold or place, kept briefly |
/// | `<prefix>:{<name>}:fair:queue` | sorted set | waiter id → arrival order (server µs); expires with the last live waiter's place; kept by `delete` and `force_unlock`, since it belongs to the live waiters |
/// | `<prefix>:{<name>}:fair:deadlines` | sorted set | waiter id → server time (ms) at which a silent waiter is dropped; expires with the queue |
/// | `<prefix>:{<name>}:fair:wake:<waiter>` | channel | one per waiter: the lock is free and it is that waiter's turn |
///
/// # Round trips
///
/// | operation | round trips |
/// |---|---|
/// | uncontended acquire, re-entry, release | 1 each (after contention, the first acquire also waits for a subscription first, as in the next row) |
/// | contended acquire | 1 + 1 after subscribing + 1 per wake-up or heartbeat; 1 fewer (it subscribes before its first request) when the client's previous acquire of the lock had to wait |
/// | a wait given up (timeout, dropped future) | + 1 to leave the queue |
/// | introspection, `force_unlock` | 1 |
///
/// An uncontended acquire and release run 7 commands inside their two scripts together (9
/// with the two `EVALSHA`s, as `INFO commandstats` counts them), one more than the plain lock:
/// while nobody queues, the scripts look for the queue's keys (the acquire in the one `EXISTS`
/// that also finds the lock free, the release in one of its own), find none and skip the
/// queue's tidying and bookkeeping. Once someone queues, each script also reads the clock,
/// tidies the queue and keeps its place in it. Measured by the benchmark program
/// (`redisync-bench`, scenario 1) and asserted by `integration-tests/tests/fair_lock.rs`. Under
/// contention an acquisition costs about three scripts (the waiter's request, made once it
/// listens, the release, and the woken head's request; 4 clients × 4 tasks in the benchmark's
/// scenario 2, about 47 commands in Redis): the release wakes the head waiter only, and once,
/// and each waiter asks again at least every heartbeat.
///
/// # Examples
///
/// ```
/// use redisync::prelude::*;
///
/// # /// Until the printer's queue holds `n` waiters, so that they arrive in a known order.
/// # async fn queued(server: &redisync_test_harness::RedisServer, n: i64) {
/// #     let key = "redisync:{printer}:fair:queue";
/// #     while !matches!(server.cmd(&["ZCARD", key]), redisync::redis::Value::Int(len) if len >= n) {
/// #         tokio::time::sleep(std::time::Duration::from_millis(5)).await;
/// #     }
/// # }
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redisync::Result<()> {
/// # let server = redisync_test_harness::RedisServer::start();
/// # let url = server.url(); // e.g. "redis://127.0.0.1:6379/"
/// let client = Client::connect(url).await?;
/// let printer = client.fair_lock("printer");
/// let guard = printer.lock().await?;
///
/// // Two more owners queue up, one after the other; they will get the lock in this order.
/// let first = client.fair_lock("printer");
/// let second = client.fair_lock("printer");
/// let first_waits = tokio::spawn(async move { first.lock().await.map(|g| g.fencing_token()) });
/// # queued(&server, 1).await;
/// let second_waits = tokio::spawn(async move { second.lock().await.map(|g| g.fencing_token()) });
/// # queued(&server, 2).await;
///
/// assert!(printer.clone().try_lock().await?.is_some()); // the holder re-enters at once
/// guard.unlock().await?;
/// let first_token = first_waits.await.expect("first waiter")?;
/// let second_token = second_waits.await.expect("second waiter")?;
/// assert!(first_token < second_token);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct FairLock {
    core: Arc<LockCore>,
    heartbeat: Duration,
}

impl FairLock {
    /// A handle to the fair lock called `name`, with the [`DEFAULT_HEARTBEAT`]. Never fails;
    /// a bad name is reported as [`Error::InvalidArgument`] by every call.
    pub fn new(client: &Client, name: impl Into<String>) -> Self {
        let kind = Kind::Fair {
            heartbeat: DEFAULT_HEARTBEAT,
        };
        FairLock {
            core: Arc::new(LockCore::new(client, name.into(), kind)),
            heartbeat: DEFAULT_HEARTBEAT,
        }
    }

    /// The same handle (same owner) with waiters re-sending their request every `interval`;
    /// a waiter silent for three intervals (or an interval plus the command timeout, if
    /// longer) is dropped from the queue. Shorter intervals free the queue
    /// of dead waiters sooner and cost one request per waiter per interval. An interval below
    /// 10 ms or too large for Redis milliseconds makes every acquire (`try_lock` included)
    /// fail with [`Error::InvalidArgument`].
    pub fn with_heartbeat(self, interval: Duration) -> Self {
        FairLock {
            core: Arc::new(self.core.with_kind(Kind::Fair {
                heartbeat: interval,
            })),
            heartbeat: interval,
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

    /// Acquires the lock in turn, waiting as long as it takes; the watchdog renews the lease
    /// while the guard lives. Errors as for
    /// [`ReentrantLock::lock`](crate::ReentrantLock::lock).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future gives up the place in the queue at once (in the background) and
    /// never leaves a hold behind, as for [`ReentrantLock::lock`](crate::ReentrantLock::lock).
    pub async fn lock(&self) -> Result<LockGuard> {
        Acquire::acquire(self).await
    }

    /// Acquires the lock in turn with a fixed `lease` (no watchdog), waiting as long as it
    /// takes.
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

    /// Acquires the lock only if it is free and nobody waits for it (or this owner holds it);
    /// never queues.
    ///
    /// # Cancel safety
    ///
    /// As for [`lock`](Self::lock).
    pub async fn try_lock(&self) -> Result<Option<LockGuard>> {
        self.try_acquire().await
    }

    /// Acquires the lock in turn, waiting at most `wait`; on timeout the place in the queue is
    /// given up before this returns `None`.
    ///
    /// # Cancel safety
    ///
    /// As for [`lock`](Self::lock).
    pub async fn try_lock_for(&self, wait: Duration) -> Result<Option<LockGuard>> {
        self.try_acquire_for(wait).await
    }

    /// Acquires the lock in turn with a fixed `lease`, waiting at most `wait`.
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
    pub async fn is_locked(&self) -> Result<bool> {
        self.core.is_locked().await
    }

    /// Whether this handle's owner holds the lock.
    pub async fn is_held(&self) -> Result<bool> {
        Ok(self.core.hold_count().await? > 0)
    }

    /// How many holds this owner has (0 if it does not hold the lock).
    pub async fn hold_count(&self) -> Result<u32> {
        self.core.hold_count().await
    }

    /// The holder's remaining lease, `None` when the lock is free.
    pub async fn remaining_lease(&self) -> Result<Option<Duration>> {
        self.core.remaining_lease().await
    }

    /// Frees the lock whoever holds it and wakes the head waiter; the queue keeps its order.
    /// Returns whether the lock was held.
    pub async fn force_unlock(&self) -> Result<bool> {
        self.core.force_unlock().await
    }

    /// How often a waiting caller re-sends its request (see [`with_heartbeat`](Self::with_heartbeat)).
    pub fn heartbeat(&self) -> Duration {
        self.heartbeat
    }
}

#[async_trait]
impl DistributedPrimitive for FairLock {
    fn name(&self) -> &str {
        self.core.name()
    }

    /// Same as [`FairLock::force_unlock`]: live waiters keep their places, and the fencing
    /// counter is kept on purpose.
    async fn delete(&self) -> Result<bool> {
        self.force_unlock().await
    }
}

impl Acquire for FairLock {
    type Guard = LockGuard;

    /// Acquires the lock in turn, waiting as `wait` says (a wait that runs out gives up the
    /// place in the queue before it returns `None`), with a watchdog-renewed or fixed `lease`.
    /// The one acquire of the fair lock: [`lock`](FairLock::lock) and the others are
    /// shorthands for it. Errors as for [`ReentrantLock::lock`](crate::ReentrantLock::lock).
    ///
    /// # Cancel safety
    ///
    /// As for [`lock`](FairLock::lock).
    async fn acquire_with(&self, wait: Wait, lease: Lease) -> Result<Option<LockGuard>> {
        self.core.acquire(lease.duration(), wait.limit()).await
    }
}
