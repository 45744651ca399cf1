//! [`LockGuard`]: one hold of a lock.

use redisync_core::toolkit::Toolkit;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redisync_core::toolkit::duration::{lease_millis, redis_millis};
use redisync_core::toolkit::{Error, Hold, Result};

use crate::core::LockCore;
use crate::scripts::{self, decode_release};

/// One hold of a [`ReentrantLock`](crate::ReentrantLock) or a [`FairLock`](crate::FairLock).
///
/// The guard owns a clone of its handle, so it is `'static` and can move across tasks. It
/// releases its hold when dropped, on a background task, without blocking; the watchdog stops
/// renewing it at once. Use [`unlock`](Self::unlock) to release and learn whether the hold was
/// still ours.
///
/// The client's next acquire of the lock waits for a release still on its way to Redis (a
/// dropped guard's, or an `unlock()` that returned
/// [`Error::Timeout`](redisync_core::toolkit::Error::Timeout) and goes on in the background),
/// for at most the command timeout: so it is a new hold with a new fencing token, not a
/// re-entry of the hold being released (unless that release is still unconfirmed by then).
/// An acquire re-enters, and keeps that hold's token, when its owner holds the lock: another
/// of its guards is alive.
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
/// let lock = client.lock("report");
/// let guard = lock.lock_with_lease(Duration::from_millis(100)).await?;
/// let token = guard.fencing_token();
///
/// // Too slow: the lease runs out and the guard learns it.
/// guard.lost().await;
/// assert!(guard.is_lost());
/// // Another owner gets the lock, with a newer token, and the stale guard cannot release it.
/// let next = client.lock("report").lock().await?;
/// assert!(next.fencing_token() > token);
/// assert!(matches!(guard.unlock().await, Err(Error::NotOwner)));
/// # Ok(())
/// # }
/// ```
#[must_use = "dropping the guard releases the lock at once"]
#[derive(Debug)]
pub struct LockGuard {
    core: Arc<LockCore>,
    token: u64,
    /// The acquire attempt this hold belongs to: each guard of a re-entered lock has its own.
    attempt: String,
    // Releases on drop; counted in the owner's live guards until then.
    hold: Hold,
}

impl LockGuard {
    pub(crate) fn new(core: Arc<LockCore>, token: u64, attempt: String, hold: Hold) -> Self {
        let hold = hold.counted_in(core.live_guards.clone());
        LockGuard {
            core,
            token,
            attempt,
            hold,
        }
    }

    /// The fencing token of this hold: strictly greater than the token of every earlier
    /// (non-reentrant) acquisition of this lock name, across all clients; a re-entry carries
    /// the token of the hold it entered. Pass it to the storage you protect and have it reject
    /// writes with a smaller token than it has seen.
    pub fn fencing_token(&self) -> u64 {
        self.token
    }

    /// The name of the lock.
    pub fn name(&self) -> &str {
        self.core.name()
    }

    /// The client that holds the lock.
    pub fn client(&self) -> &redisync_core::Client {
        &self.core.client
    }

    /// Whether the client knows the hold is gone: a renewal found it missing or not ours,
    /// no renewal was confirmed before the lease would end, the client shut down, or a fixed
    /// lease ran out. A watchdog-kept hold taken by `force_unlock` or `delete` is found at
    /// once (the caller tells this client; not on a cluster or for a polling client, which
    /// find it at the next renewal).
    pub fn is_lost(&self) -> bool {
        self.hold.is_lost()
    }

    /// Completes once the hold is known to be gone (see [`is_lost`](Self::is_lost)). The
    /// future does not borrow the guard.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        self.hold.lost()
    }

    /// Gives this hold a fixed lease of `lease` from now on: watchdog renewal stops, and the
    /// hold expires `lease` after this call unless released first (with re-entries of the same
    /// owner alive, the lock's expiry is only ever extended). [`lost`](Self::lost) follows the
    /// new lease. A lease below 10 ms or too large for Redis milliseconds is
    /// [`Error::InvalidArgument`].
    ///
    /// # Errors
    ///
    /// [`Error::NotOwner`] if the hold is no longer ours (nothing changed);
    /// [`Error::Redis`] / [`Error::Timeout`] if Redis did not answer. Renewal goes on, but
    /// since Redis may have fixed the lease, the guard's deadline (what
    /// [`is_lost`](Self::is_lost) and [`lost`](Self::lost) go by) is brought forward to the
    /// fixed lease's end if that is earlier, and renewals cannot extend it; the same happens
    /// when the future is dropped before Redis answered.
    pub async fn fix_lease(&mut self, lease: Duration) -> Result<()> {
        lease_millis(lease)?;
        let keys = self.core.keys()?;
        let call = scripts::SetLease {
            hash: &keys.hash,
            owner: &self.core.owner,
            token: self.token,
            lease_ms: redis_millis(lease),
            attempt: &self.attempt,
        }
        .call();
        let sent_at = Instant::now();
        let pending = self.hold.pending_fix(sent_at, lease);
        let reply = self.core.client.eval::<i64>(call).await;
        // Only an error that leaves the outcome unknown keeps the cap armed.
        if !reply.as_ref().is_err_and(Error::is_outcome_unknown) {
            if let Some(pending) = pending {
                pending.settled();
            }
        }
        match reply? {
            1 => {
                self.hold.fix_lease(sent_at, lease);
                Ok(())
            }
            _ => Err(Error::NotOwner),
        }
    }

    /// Releases this hold and reports whether it was still ours.
    ///
    /// Renewal stops before the request is sent. A release is idempotent: it gives back only
    /// the hold of this guard's attempt, so one sent again after a broken connection never
    /// releases twice. Redis keeps no record of it (a record per release would make Redis's
    /// memory grow with the release rate); a repeat that finds the hold gone is taken as the
    /// answer to the first try when the hold was still ours, as far as the client knew, when
    /// that try was sent, so it reports no false [`NotOwner`](redisync_core::Error::NotOwner).
    /// The one case that then goes unreported is a hold force-unlocked, within the same
    /// moment, before a first try whose reply was lost.
    ///
    /// # Errors
    ///
    /// [`Error::NotOwner`](redisync_core::Error::NotOwner) if the lease expired, the lock was
    /// force-unlocked or someone else holds it now (nothing is changed);
    /// [`Error::Redis`](redisync_core::Error::Redis) /
    /// [`Error::Timeout`](redisync_core::Error::Timeout) if Redis did not confirm the release
    /// within the command timeout (it goes on in the background: see below);
    /// [`Error::Shutdown`](redisync_core::Error::Shutdown) if the client was shut down (the
    /// hold is still given back in the background).
    ///
    /// # Release guarantee
    ///
    /// A release Redis cannot confirm within the command timeout (an outage, a `BUSY` or
    /// `READONLY` server, a dropped connection) returns that error, and is sent again in the
    /// background, with backoff, until Redis confirms it or the hold's lease has ended; a
    /// dropped future or guard does the same. At shutdown a pending release gets one last
    /// attempt (see [`Client::shutdown`](redisync_core::Client::shutdown)).
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped before it completes, the release still runs in the background.
    pub async fn unlock(self) -> Result<()> {
        let span = tracing::debug_span!(
            "redisync.lock.release",
            name = %self.core.name(),
            token = self.token,
        );
        let released = self.hold.release_confirmed(span).await?;
        match released.reply {
            -1 if released.repeated => Ok(()),
            reply => decode_release(reply),
        }
    }
}

redisync_core::toolkit::impl_held!(LockGuard {
    fencing_token: |guard| Some(guard.fencing_token()),
    release: unlock,
});
