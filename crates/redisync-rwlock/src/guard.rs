//! [`ReadGuard`] and [`WriteGuard`]: one read hold and one write hold.

use std::future::Future;
use std::sync::Arc;

use redisync_core::{Hold, Result};

use crate::rwlock::RwCore;
use crate::scripts::decode_release;

/// One read hold of a [`ReadWriteLock`](crate::ReadWriteLock).
///
/// `'static` and `Send`: it can move across tasks. Dropping it releases the hold in the
/// background without blocking; [`unlock`](Self::unlock) releases and reports whether the
/// hold was still ours. Readers carry no fencing token: they do not write.
///
/// Because a drop releases in the background, an owner that reads and then wants to write
/// should `unlock().await` its read guards first: right after a drop the read hold may still
/// be there, and the write is then refused as an upgrade.
#[must_use = "dropping the guard releases the read hold at once"]
#[derive(Debug)]
pub struct ReadGuard {
    core: Arc<RwCore>,
    // Releases on drop; counted in the owner's live read guards until then.
    hold: Hold,
}

impl ReadGuard {
    pub(crate) fn new(core: Arc<RwCore>, hold: Hold) -> Self {
        let hold = hold.counted_in(core.live_read_guards.clone());
        ReadGuard { core, hold }
    }

    /// The name of the lock.
    pub fn name(&self) -> &str {
        &self.core.name
    }

    /// Whether the client knows the hold is gone (renewal found it missing, no renewal was
    /// confirmed before the lease would end, the client shut down, or a fixed lease ran out).
    pub fn is_lost(&self) -> bool {
        self.hold.is_lost()
    }

    /// Completes once the hold is known to be gone. The future does not borrow the guard.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        self.hold.lost()
    }

    /// Releases this read hold; the last reader leaving wakes a waiting writer.
    ///
    /// # Errors
    ///
    /// [`Error::NotOwner`](redisync_core::Error::NotOwner) if the hold's lease ended or it was
    /// force-unlocked (nothing is changed); [`Error::Redis`](redisync_core::Error::Redis) /
    /// [`Error::Timeout`](redisync_core::Error::Timeout) if Redis did not confirm the release
    /// within the command timeout (it goes on in the background: see below);
    /// [`Error::Shutdown`](redisync_core::Error::Shutdown) after shutdown (released in the
    /// background anyway).
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
        let span =
            tracing::debug_span!("redisync.rwlock.release", name = %self.core.name, side = "read");
        self.hold.release(span).await.and_then(decode_release)
    }
}

/// The write hold of a [`ReadWriteLock`](crate::ReadWriteLock).
///
/// `'static` and `Send`. Dropping it releases the hold in the background; releasing wakes
/// every waiting reader with one message.
#[must_use = "dropping the guard releases the write hold at once"]
#[derive(Debug)]
pub struct WriteGuard {
    core: Arc<RwCore>,
    token: u64,
    // Releases on drop; counted in the owner's live write guards until then.
    hold: Hold,
}

impl WriteGuard {
    pub(crate) fn new(core: Arc<RwCore>, token: u64, hold: Hold) -> Self {
        let hold = hold.counted_in(core.live_write_guards.clone());
        WriteGuard { core, token, hold }
    }

    /// The fencing token of this write hold: strictly greater than every earlier write hold's
    /// token for this lock name; a re-entry carries the token of the hold it entered.
    pub fn fencing_token(&self) -> u64 {
        self.token
    }

    /// The name of the lock.
    pub fn name(&self) -> &str {
        &self.core.name
    }

    /// Whether the client knows the hold is gone.
    pub fn is_lost(&self) -> bool {
        self.hold.is_lost()
    }

    /// Completes once the hold is known to be gone. The future does not borrow the guard.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        self.hold.lost()
    }

    /// Releases the write hold. Read holds this owner took meanwhile (a downgrade) stay, and
    /// the lock is then read-locked by this owner.
    ///
    /// # Errors
    ///
    /// As for [`ReadGuard::unlock`].
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped before it completes, the release still runs in the background.
    pub async fn unlock(self) -> Result<()> {
        let span = tracing::debug_span!(
            "redisync.rwlock.release",
            name = %self.core.name,
            side = "write",
            token = self.token,
        );
        self.hold.release(span).await.and_then(decode_release)
    }
}
