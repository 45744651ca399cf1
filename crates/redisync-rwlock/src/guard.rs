//! [`ReadGuard`] and [`WriteGuard`]: one read hold and one write hold.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use redisync_core::toolkit::{Confirmed, Error, Hold, Result};

use crate::rwlock::RwCore;
use crate::scripts::decode_release;
use crate::shared::{Share, SoloTicket};

/// One read hold of a [`ReadWriteLock`](crate::ReadWriteLock).
///
/// `'static` and `Send`: it can move across tasks. Dropping it releases the hold in the
/// background without blocking; [`unlock`](Self::unlock) releases and reports whether the
/// hold was still ours. Readers carry no fencing token: they do not write.
///
/// A drop releases in the background; the handle's next acquire waits for that release (for
/// at most the command timeout), so a write right after the last read guard of the handle was
/// dropped is a write, not a refused upgrade.
///
/// A watchdog read may share its client's read hold with the client's other readers of the
/// lock (see [`ReadWriteLock`](crate::ReadWriteLock)): its guard is then one share of that
/// hold, lost when the hold is lost, and the hold is released when the last share goes.
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
/// let prices = client.read_write_lock("prices");
/// let first: ReadGuard = prices.read().await?;
/// let second = client.read_write_lock("prices").read().await?; // readers share
/// assert_eq!(first.name(), "prices");
/// assert!(!first.is_lost());
///
/// let writer = client.read_write_lock("prices");
/// assert!(writer.try_write().await?.is_none()); // busy while anyone reads
/// first.unlock().await?;
/// second.unlock().await?;
/// // The readers' shared hold goes at once for a waiting writer (10 ms after its last
/// // reader otherwise, in case another reader comes).
/// assert!(writer.try_write_for(Duration::from_secs(5)).await?.is_some());
/// # Ok(())
/// # }
/// ```
#[must_use = "dropping the guard releases the read hold at once"]
#[derive(Debug)]
pub struct ReadGuard {
    core: Arc<RwCore>,
    hold: ReadHold,
}

/// What a read guard holds.
#[derive(Debug)]
enum ReadHold {
    /// A Redis hold of its own: releases on drop; counted in the owner's live read guards
    /// until then. A solo read (the only one of its client on the shared road) keeps its
    /// ticket, so that readers arriving meanwhile found a shared hold.
    Own {
        hold: Hold,
        _solo: Option<SoloTicket>,
    },
    /// One share of the client's shared hold: leaves it on drop.
    Shared(Share),
}

impl ReadGuard {
    pub(crate) fn own(core: Arc<RwCore>, hold: Hold, solo: Option<SoloTicket>) -> Self {
        let hold = hold.counted_in(core.live_read_guards.clone());
        ReadGuard {
            core,
            hold: ReadHold::Own { hold, _solo: solo },
        }
    }

    pub(crate) fn shared(core: Arc<RwCore>, share: Share) -> Self {
        ReadGuard {
            core,
            hold: ReadHold::Shared(share),
        }
    }

    /// The name of the lock.
    pub fn name(&self) -> &str {
        &self.core.name
    }

    /// Whether the client knows the hold is gone (renewal found it missing, no renewal was
    /// confirmed before the lease would end, the client shut down, or a fixed lease ran out).
    /// For a share of the client's shared hold: that hold's, and also once the client heard
    /// that it was force-unlocked or deleted (within a round trip or so).
    pub fn is_lost(&self) -> bool {
        match &self.hold {
            ReadHold::Own { hold, .. } => hold.is_lost(),
            ReadHold::Shared(share) => share.hold().is_lost(),
        }
    }

    /// Completes once the hold is known to be gone. The future does not borrow the guard.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let lost: Pin<Box<dyn Future<Output = ()> + Send>> = match &self.hold {
            ReadHold::Own { hold, .. } => Box::pin(hold.lost()),
            ReadHold::Shared(share) => Box::pin(share.hold().lost()),
        };
        lost
    }

    /// Releases this read hold; the last reader leaving wakes a waiting writer.
    ///
    /// A share of the client's shared hold is given back locally, without a request, unless
    /// it is the last: that one releases the Redis hold and reports what Redis says. So a share
    /// that is not the last reports [`Error::NotOwner`] when the *client knows* the shared hold
    /// is gone (its lease ran out unrenewed, a renewal found it gone, or the client heard of a
    /// `force_unlock`/`delete`, which it checks within a round trip); in the moment between a
    /// force-unlock and the client hearing of it, such a share still reports `Ok`. Either way,
    /// nothing in Redis is changed by a stale share.
    ///
    /// # Errors
    ///
    /// [`Error::NotOwner`] if the hold's lease ended or it was
    /// force-unlocked (nothing is changed); [`Error::Redis`] /
    /// [`Error::Timeout`] if Redis did not confirm the release
    /// within the command timeout (it goes on in the background: see below);
    /// [`Error::Shutdown`] after shutdown (released in the
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
        match self.hold {
            ReadHold::Own { hold, _solo } => {
                hold.release_confirmed(span).await.and_then(decode_release)
            }
            ReadHold::Shared(share) => {
                let shared = share.hold().clone();
                let lost = shared.is_lost();
                match share.leave() {
                    Some(hold) => match hold.release_confirmed(span).await? {
                        // This release found the hold live and took it out. A check of the
                        // client's shared holds running meanwhile may have seen it gone, by
                        // this very release: that says nothing against it.
                        Confirmed { reply: 0 | 1, .. } => Ok(()),
                        // A repeat that finds nothing cannot tell whether it ran before; a
                        // check that found the hold gone can.
                        _ if shared.is_gone() => Err(Error::NotOwner),
                        confirmed => decode_release(confirmed),
                    },
                    None if self.core.client.is_shut_down() => Err(Error::Shutdown),
                    None if lost => Err(Error::NotOwner),
                    None => Ok(()),
                }
            }
        }
    }
}

/// The write hold of a [`ReadWriteLock`](crate::ReadWriteLock).
///
/// `'static` and `Send`. Dropping it releases the hold in the background; releasing wakes
/// every waiting reader with one message.
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
/// let cache = client.read_write_lock("cache");
/// let guard: WriteGuard = cache.write().await?;
/// let token = guard.fencing_token(); // pass it to the storage you write to
/// assert!(client.read_write_lock("cache").try_read().await?.is_none()); // readers wait
///
/// // An operator frees the lock: the guard learns it, and cannot release what is not its own.
/// assert!(client.read_write_lock("cache").force_unlock().await?);
/// guard.lost().await;
/// let next = client.read_write_lock("cache").write().await?;
/// assert!(next.fencing_token() > token);
/// assert!(matches!(guard.unlock().await, Err(Error::NotOwner)));
/// # Ok(())
/// # }
/// ```
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
        self.hold
            .release_confirmed(span)
            .await
            .and_then(decode_release)
    }
}

redisync_core::toolkit::impl_held!(ReadGuard {
    fencing_token: |_guard| None,
    release: unlock,
});

redisync_core::toolkit::impl_held!(WriteGuard {
    fencing_token: |guard| Some(guard.fencing_token()),
    release: unlock,
});
