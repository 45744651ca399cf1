//! The surface every primitive shares: [`DistributedPrimitive`] (a name, and `delete`),
//! [`Acquire`] (something you can hold: one [`acquire_with`](Acquire::acquire_with) taking a
//! [`Wait`] and a [`Lease`]) and [`Held`] (what you hold: a guard or a permit).
//!
//! Code generic over these traits works with every primitive: a helper that runs a task while
//! something is held, a command-line tool, a metrics wrapper.
//!
//! ```
//! use redisync::prelude::*;
//! use std::future::Future;
//!
//! /// Runs `work` while holding `primitive`, gives it back, and returns what `work` returned.
//! /// Fails if the hold was lost before the release (`Error::NotOwner`).
//! async fn with_held<A, T, F>(primitive: &A, work: impl FnOnce(Option<u64>) -> F) -> Result<T>
//! where
//!     A: Acquire,
//!     F: Future<Output = T>,
//! {
//!     let held = primitive.acquire().await?;
//!     let output = work(held.fencing_token()).await;
//!     held.release().await?;
//!     Ok(output)
//! }
//! ```

use std::future::Future;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use crate::duration::wait_deadline;
use crate::error::{Error, Result};

/// What every redisync primitive can do, whatever it is.
#[async_trait]
pub trait DistributedPrimitive: Send + Sync {
    /// The name the primitive was created with.
    fn name(&self) -> &str;

    /// Removes all server state of this primitive and wakes its waiters. Returns whether there
    /// was anything to remove. Fencing counters survive, so tokens never repeat.
    async fn delete(&self) -> Result<bool>;
}

/// How long an acquire may wait for a busy primitive.
///
/// ```
/// use redisync::prelude::*;
/// use std::time::Duration;
///
/// assert_eq!(Wait::No.limit(), Some(Duration::ZERO));
/// assert_eq!(Wait::For(Duration::from_secs(5)).limit(), Some(Duration::from_secs(5)));
/// assert_eq!(Wait::Forever.limit(), None);
/// assert_eq!(Wait::default(), Wait::Forever);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Wait {
    /// Do not wait: acquire only if that is possible at once (`try_lock`).
    No,
    /// Wait at most this long (`try_lock_for`). A zero duration is [`Wait::No`]; one too
    /// large for Redis milliseconds (such as `Duration::MAX`) is
    /// [`Error::InvalidArgument`].
    For(Duration),
    /// Wait as long as it takes (`lock`). Waiting never turns an outage into a hang: a Redis
    /// that does not answer ends it with an error within about the command timeout.
    #[default]
    Forever,
}

impl Wait {
    /// The longest time to wait: `None` for ever, zero for [`Wait::No`].
    pub fn limit(self) -> Option<Duration> {
        match self {
            Wait::No => Some(Duration::ZERO),
            Wait::For(wait) => Some(wait),
            Wait::Forever => None,
        }
    }

    /// When the wait ends on the monotonic clock, counted from now: `None` for ever. A wait
    /// too large for Redis milliseconds is [`Error::InvalidArgument`].
    pub fn deadline(self) -> Result<Option<Instant>> {
        self.limit().map(wait_deadline).transpose()
    }
}

/// How long a hold lasts in Redis if its holder does not release it.
///
/// ```
/// use redisync::prelude::*;
/// use std::time::Duration;
///
/// assert_eq!(Lease::Watchdog.duration(), None);
/// assert_eq!(Lease::Fixed(Duration::from_secs(60)).duration(), Some(Duration::from_secs(60)));
/// assert_eq!(Lease::default(), Lease::Watchdog);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Lease {
    /// The client's watchdog timeout, renewed by the watchdog while the guard lives: a holder
    /// that dies frees the hold within one watchdog timeout. For a primitive whose holds have
    /// no lease (the classic semaphore's permits), this means "no lease".
    #[default]
    Watchdog,
    /// This long from when the hold was granted, never renewed: the hold ends by itself, and
    /// the guard learns it ([`Held::is_lost`], [`Held::lost`]). Under
    /// [`MIN_LEASE`](crate::MIN_LEASE) or too large for Redis milliseconds is
    /// [`Error::InvalidArgument`], as is a fixed lease on a primitive that has none.
    Fixed(Duration),
}

impl Lease {
    /// The fixed lease's length; `None` for [`Lease::Watchdog`].
    pub fn duration(self) -> Option<Duration> {
        match self {
            Lease::Watchdog => None,
            Lease::Fixed(lease) => Some(lease),
        }
    }
}

/// The guard of an acquire that waited with [`Wait::Forever`]: such an acquire ends with a
/// guard or an error, so `None` cannot happen; should a primitive's wait end without a grant
/// all the same, that is reported as an error rather than a panic.
///
/// Primitive crates write their waiting shorthands with it (`lock_with_lease(lease)` is
/// `granted(self.acquire_with(Wait::Forever, Lease::Fixed(lease)).await?)`).
pub fn granted<G>(acquired: Option<G>) -> Result<G> {
    acquired.ok_or_else(|| Error::invalid("an unbounded wait ended without being granted"))
}

/// A primitive that can be held: a lock, one side of a read-write lock, a semaphore (one
/// permit), a multi-lock.
///
/// Each primitive implements one method, [`acquire_with`](Self::acquire_with); every other
/// acquire method, here and on the primitive's own type (`lock`, `try_read_for`,
/// `acquire_with_lease`, ...), is a shorthand for it and behaves exactly like it.
///
/// | call | wait | lease |
/// |---|---|---|
/// | [`acquire`](Self::acquire) | [`Wait::Forever`] | [`Lease::Watchdog`] |
/// | [`try_acquire`](Self::try_acquire) | [`Wait::No`] | [`Lease::Watchdog`] |
/// | [`try_acquire_for(wait)`](Self::try_acquire_for) | [`Wait::For`]`(wait)` | [`Lease::Watchdog`] |
///
/// # Examples
///
/// A helper that works for every primitive:
///
/// ```
/// use redisync::prelude::*;
/// use std::time::Duration;
///
/// /// Holds `primitive` for at most `lease`, if it can be had within a second.
/// async fn briefly<A: Acquire>(primitive: &A, lease: Duration) -> Result<Option<A::Guard>> {
///     primitive
///         .acquire_with(Wait::For(Duration::from_secs(1)), Lease::Fixed(lease))
///         .await
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redisync::Result<()> {
/// # let server = redisync_test_harness::RedisServer::start();
/// # let client = Client::connect(server.url()).await?;
/// let report = briefly(&client.lock("report"), Duration::from_secs(30)).await?;
/// assert!(report.is_some());
/// let cache = client.read_write_lock("cache");
/// let refresh = briefly(&cache.writer(), Duration::from_secs(30)).await?;
/// assert!(refresh.is_some());
/// # Ok(())
/// # }
/// ```
///
/// # Cancel safety
///
/// Every implementation is cancel safe: dropping an acquire future at any await point leaves
/// nothing behind. What it had taken is given back (in the background), an attempt still on
/// the wire gives back whatever it gets, and its queue places and subscriptions are released.
/// Each primitive's `acquire_with` documents the details.
pub trait Acquire: DistributedPrimitive + Clone + 'static {
    /// What a successful acquire returns: a guard or permit that gives the hold back when
    /// released or dropped.
    type Guard: Held;

    /// Acquires, waiting as `wait` says, for the given `lease`: the one acquire every other
    /// acquire method of the primitive is a shorthand for. `Ok(None)` when the wait ran out
    /// (never with [`Wait::Forever`]).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name, wait or lease (see [`Wait`] and [`Lease`]),
    /// [`Error::Redis`] or [`Error::Timeout`] if Redis fails or does not answer within the
    /// command timeout, [`Error::Shutdown`] after the client is shut down, and whatever the
    /// primitive adds (such as [`Error::UpgradeNotSupported`] for a reader asking to write).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves no hold, queue place or subscription behind (see the trait's
    /// documentation and each primitive's).
    fn acquire_with(
        &self,
        wait: Wait,
        lease: Lease,
    ) -> impl Future<Output = Result<Option<Self::Guard>>> + Send;

    /// Acquires, waiting as long as it takes, with a watchdog-renewed lease.
    ///
    /// # Cancel safety
    ///
    /// As for [`acquire_with`](Self::acquire_with).
    fn acquire(&self) -> impl Future<Output = Result<Self::Guard>> + Send {
        async move { granted(self.acquire_with(Wait::Forever, Lease::Watchdog).await?) }
    }

    /// Acquires only if that is possible at once, with a watchdog-renewed lease.
    ///
    /// # Cancel safety
    ///
    /// As for [`acquire_with`](Self::acquire_with).
    fn try_acquire(&self) -> impl Future<Output = Result<Option<Self::Guard>>> + Send {
        self.acquire_with(Wait::No, Lease::Watchdog)
    }

    /// Acquires, waiting at most `wait`, with a watchdog-renewed lease. A zero `wait` does not
    /// wait.
    ///
    /// # Cancel safety
    ///
    /// As for [`acquire_with`](Self::acquire_with).
    fn try_acquire_for(
        &self,
        wait: Duration,
    ) -> impl Future<Output = Result<Option<Self::Guard>>> + Send {
        self.acquire_with(Wait::For(wait), Lease::Watchdog)
    }
}

/// Something held: a lock guard, a read or write guard, a permit, a multi-lock guard.
///
/// Dropping it gives the hold back in the background, without blocking;
/// [`release`](Self::release) does so and reports whether the hold was still ours.
///
/// # Examples
///
/// Stopping work when the hold is lost:
///
/// ```
/// use redisync::prelude::*;
///
/// async fn guarded<H: Held>(held: H, work: impl std::future::Future<Output = ()>) -> Result<bool> {
///     tokio::select! {
///         () = work => {}
///         () = held.lost() => return Ok(false), // its lease ended, or someone took it over
///     }
///     held.release().await?;
///     Ok(true)
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redisync::Result<()> {
/// # let server = redisync_test_harness::RedisServer::start();
/// # let client = Client::connect(server.url()).await?;
/// let guard = client.lock("nightly").lock().await?;
/// assert!(guarded(guard, async { /* the work */ }).await?);
/// # Ok(())
/// # }
/// ```
pub trait Held: Send + 'static {
    /// The name of the primitive this holds.
    fn name(&self) -> &str;

    /// The fencing token of this hold, strictly increasing per name for every new hold (see
    /// the lock guards); `None` where the primitive hands out none (read guards, permits) or
    /// no single token fences what is held (a multi-lock: see its guard).
    fn fencing_token(&self) -> Option<u64>;

    /// Whether the client knows the hold is gone: its lease ended or a renewal found it
    /// missing or not ours. Never for a hold without a lease (a classic semaphore's permit).
    fn is_lost(&self) -> bool;

    /// Completes once the hold is known to be gone (see [`is_lost`](Self::is_lost)); never,
    /// for a hold without a lease. The future does not borrow the guard.
    fn lost(&self) -> impl Future<Output = ()> + Send + 'static;

    /// Gives the hold back and waits for Redis to confirm it.
    ///
    /// # Errors
    ///
    /// [`Error::NotOwner`] if the hold is no longer ours (its lease expired, it was
    /// force-unlocked or taken over): nothing is changed. [`Error::Redis`] /
    /// [`Error::Timeout`] if Redis did not confirm the release in time: it goes on in the
    /// background. [`Error::Shutdown`] after the client was shut down.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped before it completes, the release still runs in the background.
    fn release(self) -> impl Future<Output = Result<()>> + Send;
}

/// Implements [`Held`] for a guard type from the guard's own (inherent) methods of the same
/// names, `name`, `is_lost` and `lost`, with the given fencing token and release method: every
/// guard already has them, and this way each is written once.
///
/// ```
/// use std::future::Future;
/// use redisync_core::{Held, Result};
///
/// /// A guard of some primitive, with the methods every guard has.
/// struct TicketGuard {
///     name: String,
///     number: u64,
/// }
///
/// impl TicketGuard {
///     fn name(&self) -> &str {
///         &self.name
///     }
///     fn is_lost(&self) -> bool {
///         false
///     }
///     fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
///         std::future::pending()
///     }
///     async fn give_back(self) -> Result<()> {
///         Ok(())
///     }
/// }
///
/// redisync_core::impl_held!(TicketGuard {
///     fencing_token: |guard| Some(guard.number),
///     release: give_back,
/// });
///
/// let guard = TicketGuard { name: "tickets".into(), number: 7 };
/// assert_eq!(Held::name(&guard), "tickets");
/// assert_eq!(Held::fencing_token(&guard), Some(7));
/// assert!(!Held::is_lost(&guard));
/// ```
#[macro_export]
macro_rules! impl_held {
    ($guard:ty { fencing_token: |$held:ident| $token:expr, release: $release:ident $(,)? }) => {
        impl $crate::Held for $guard {
            fn name(&self) -> &str {
                <$guard>::name(self)
            }

            fn fencing_token(&self) -> Option<u64> {
                let $held = self;
                $token
            }

            fn is_lost(&self) -> bool {
                <$guard>::is_lost(self)
            }

            fn lost(&self) -> impl ::std::future::Future<Output = ()> + Send + 'static {
                <$guard>::lost(self)
            }

            fn release(self) -> impl ::std::future::Future<Output = $crate::Result<()>> + Send {
                <$guard>::$release(self)
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zero_wait_is_no_wait() {
        assert_eq!(Wait::For(Duration::ZERO).limit(), Wait::No.limit());
    }

    #[test]
    fn waits_too_long_for_redis_are_refused() {
        assert!(Wait::For(Duration::MAX).deadline().is_err());
        assert!(matches!(Wait::Forever.deadline(), Ok(None)));
        assert!(matches!(Wait::No.deadline(), Ok(Some(_))));
    }

    #[test]
    fn a_forever_wait_without_a_grant_is_an_error_not_a_panic() {
        assert!(matches!(
            granted::<()>(None),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(granted(Some(7)), Ok(7)));
    }
}
