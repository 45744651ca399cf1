//! # redisync
//!
//! Distributed synchronization primitives on Redis for async Rust (tokio): a reentrant lock, a
//! fair lock, a read-write lock, semaphores, a count-down latch, a multi-lock, a leader
//! election and a rate limiter, with watchdog lease renewal, fencing tokens and pub/sub
//! wake-ups.
//!
//! ```
//! use redisync::prelude::*;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> redisync::Result<()> {
//! # let server = redisync_test_harness::RedisServer::start();
//! # let url = server.url(); // e.g. "redis://127.0.0.1:6379/"
//! let client = Client::connect(url).await?;
//! let lock = client.lock("orders:42");
//! {
//!     let guard = lock.lock().await?;          // waits; the watchdog renews the lease
//!     println!("fencing token {}", guard.fencing_token());
//! }                                            // dropped: released in the background
//! if let Some(guard) = lock.try_lock().await? {
//!     guard.unlock().await?;                   // explicit release reports lost leases
//! }
//! client.shutdown().await;
//! # Ok(())
//! # }
//! ```
//!
//! ## One surface for every primitive
//!
//! Every primitive is a [`DistributedPrimitive`] (a name, and `delete`); everything that can be
//! held is [`Acquire`]: one [`acquire_with`](Acquire::acquire_with)`(`[`Wait`]`, `[`Lease`]`)`
//! that all its other acquire methods (`lock`, `try_read_for`, ...) are shorthands for; and
//! every guard and permit is [`Held`]. So one helper serves them all:
//!
//! ```
//! use redisync::prelude::*;
//! use std::time::Duration;
//!
//! /// Holds `primitive` while `work` runs, if it can be had within a second.
//! async fn with_held<A: Acquire, T>(
//!     primitive: &A,
//!     work: impl AsyncFnOnce(Option<u64>) -> T,
//! ) -> Result<Option<T>> {
//!     let wait = Wait::For(Duration::from_secs(1));
//!     let Some(held) = primitive.acquire_with(wait, Lease::Watchdog).await? else {
//!         return Ok(None); // busy
//!     };
//!     let output = work(held.fencing_token()).await;
//!     held.release().await?; // Err(NotOwner) if the hold was lost meanwhile
//!     Ok(Some(output))
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> redisync::Result<()> {
//! # let server = redisync_test_harness::RedisServer::start();
//! # let url = server.url(); // e.g. "redis://127.0.0.1:6379/"
//! let client = Client::connect(url).await?;
//! let token = with_held(&client.lock("orders:42"), async |token| token).await?;
//! assert!(matches!(token, Some(Some(_)))); // locks fence
//! let cache = client.read_write_lock("cache");
//! let token = with_held(&cache.reader(), async |token| token).await?;
//! assert_eq!(token, Some(None)); // readers do not
//! let encoders = client.semaphore("encoders");
//! encoders.try_set_permits(2).await?;
//! assert!(with_held(&encoders, async |_| ()).await?.is_some());
//! # Ok(())
//! # }
//! ```
//!
//! ## Feature flags
//!
//! One flag per primitive; a primitive whose flag is off is not compiled. `full` (the
//! default) enables all of them.
//!
//! | flag | brings |
//! |---|---|
//! | `lock` | [`ReentrantLock`], [`FairLock`], [`LockGuard`] |
//! | `rwlock` | [`ReadWriteLock`], [`ReadGuard`], [`WriteGuard`], [`ReadLock`], [`WriteLock`] |
//! | `semaphore` | [`Semaphore`], [`SemaphorePermit`], [`ExpirableSemaphore`], [`ExpirablePermit`] |
//! | `latch` | [`CountDownLatch`] |
//! | `multilock` | [`MultiLock`], [`MultiLockGuard`], [`Redlock`], [`RedlockGuard`] |
//! | `election` | [`LeaderElection`], [`Leadership`], [`Leader`] |
//! | `ratelimit` | [`RateLimiter`], [`Rate`], [`Decision`] |
//! | `tls` (not in `full`) | `rediss://` URLs |
//!
//! ## Guarantees
//!
//! * One Redis round trip per operation; an uncontended acquire and release is two.
//! * Every call returns within about the command timeout when Redis is unreachable.
//! * Dropping any future at any await point leaves no hold, waiter or subscription behind.
//! * A release retried after a lost reply neither releases twice nor reports `NotOwner`.
//! * Waiters are woken by pub/sub through one connection per client; only one task per client
//!   and primitive asks Redis, and every wait is bounded by the holder's remaining lease.
//!
//! Key layouts are documented on each primitive (for the lock: [`ReentrantLock`]).

#![deny(missing_docs)]

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

pub use redisync_core::{
    Acquire, Client, ClientBuilder, DistributedPrimitive, Error, Held, Lease, LocalState, Result,
    ServerVersion, Stats, Wait, WaitStrategy, MIN_REDIS_VERSION,
};

/// The lower layer: keys, scripts, waiting and leases, for writing new primitives.
pub use redisync_core as core;

/// The Redis driver (`redis-rs`) redisync uses: [`Error::Redis`] carries its
/// [`RedisError`](redis::RedisError), so its [`ErrorKind`](redis::ErrorKind) can be matched
/// without a dependency of your own (and without a second copy of the driver).
///
/// ```
/// use redisync::prelude::*;
///
/// fn is_auth_failure(err: &Error) -> bool {
///     matches!(err, Error::Redis(e) if e.kind() == redisync::redis::ErrorKind::AuthenticationFailed)
/// }
/// assert!(!is_auth_failure(&Error::Timeout));
/// ```
pub use redisync_core::redis;

#[cfg(feature = "election")]
pub use redisync_election::{Leader, LeaderElection, Leadership, MAX_VALUE_LEN};
#[cfg(feature = "latch")]
pub use redisync_latch::{CountDownLatch, COUNT_DOWN_MEMORY};
#[cfg(feature = "lock")]
pub use redisync_lock::{FairLock, LockGuard, ReentrantLock};
#[cfg(feature = "multilock")]
pub use redisync_multilock::{MultiLock, MultiLockGuard, Redlock, RedlockGuard};
#[cfg(feature = "ratelimit")]
pub use redisync_ratelimit::{Decision, ParseRateError, Rate, RateLimiter};
#[cfg(feature = "rwlock")]
pub use redisync_rwlock::{ReadGuard, ReadLock, ReadWriteLock, WriteGuard, WriteLock};
#[cfg(feature = "semaphore")]
pub use redisync_semaphore::{ExpirablePermit, ExpirableSemaphore, Semaphore, SemaphorePermit};

/// Where each enabled primitive keeps its state in Redis: one type per primitive naming its
/// keys and channels, for tools that read them (`redisync inspect`) and for tests. Not part
/// of the supported API: a primitive's documentation describes its keys.
#[doc(hidden)]
pub mod layout {
    pub use redisync_core::{KeyFamily, KeySpace};

    #[cfg(feature = "election")]
    pub use redisync_election::layout::ElectionLayout;
    #[cfg(feature = "latch")]
    pub use redisync_latch::layout::CountDownLatchLayout;
    #[cfg(feature = "lock")]
    pub use redisync_lock::layout::{FairLockLayout, LockLayout};
    #[cfg(feature = "ratelimit")]
    pub use redisync_ratelimit::layout::RateLimiterLayout;
    #[cfg(feature = "rwlock")]
    pub use redisync_rwlock::layout::ReadWriteLockLayout;
    #[cfg(feature = "semaphore")]
    pub use redisync_semaphore::layout::{ExpirableSemaphoreLayout, SemaphoreLayout};
}

/// Constructors of every enabled primitive, as methods on [`Client`].
pub trait ClientExt {
    /// A handle to the reentrant lock called `name` (see [`ReentrantLock`]). Each call returns
    /// a new owner; clone the handle to share one.
    #[cfg(feature = "lock")]
    fn lock(&self, name: impl Into<String>) -> ReentrantLock;

    /// A handle to the first-come-first-served lock called `name` (see [`FairLock`]). Each
    /// call returns a new owner; clone the handle to share one.
    #[cfg(feature = "lock")]
    fn fair_lock(&self, name: impl Into<String>) -> FairLock;

    /// A handle to the read-write lock called `name` (see [`ReadWriteLock`]). Each call
    /// returns a new owner; clone the handle to share one.
    #[cfg(feature = "rwlock")]
    fn read_write_lock(&self, name: impl Into<String>) -> ReadWriteLock;

    /// A handle to the counting semaphore called `name` (see [`Semaphore`]).
    #[cfg(feature = "semaphore")]
    fn semaphore(&self, name: impl Into<String>) -> Semaphore;

    /// A handle to the semaphore of leased permits called `name` (see
    /// [`ExpirableSemaphore`]).
    #[cfg(feature = "semaphore")]
    fn expirable_semaphore(&self, name: impl Into<String>) -> ExpirableSemaphore;

    /// A handle to the count-down latch called `name` (see [`CountDownLatch`]).
    #[cfg(feature = "latch")]
    fn count_down_latch(&self, name: impl Into<String>) -> CountDownLatch;

    /// A multi-lock over `locks` (see [`MultiLock`]): all or none, deadlock-free in any
    /// order. The locks may come from other clients too.
    #[cfg(feature = "multilock")]
    fn multi_lock(&self, locks: impl IntoIterator<Item = ReentrantLock>) -> MultiLock;

    /// A handle to the leader election called `name` (see [`LeaderElection`]).
    #[cfg(feature = "election")]
    fn leader_election(&self, name: impl Into<String>) -> LeaderElection;
    /// A handle to the rate limiter called `name` (see [`RateLimiter`]).
    #[cfg(feature = "ratelimit")]
    fn rate_limiter(&self, name: impl Into<String>) -> RateLimiter;
}

impl ClientExt for Client {
    #[cfg(feature = "lock")]
    fn lock(&self, name: impl Into<String>) -> ReentrantLock {
        ReentrantLock::new(self, name)
    }

    #[cfg(feature = "lock")]
    fn fair_lock(&self, name: impl Into<String>) -> FairLock {
        FairLock::new(self, name)
    }

    #[cfg(feature = "rwlock")]
    fn read_write_lock(&self, name: impl Into<String>) -> ReadWriteLock {
        ReadWriteLock::new(self, name)
    }

    #[cfg(feature = "semaphore")]
    fn semaphore(&self, name: impl Into<String>) -> Semaphore {
        Semaphore::new(self, name)
    }

    #[cfg(feature = "semaphore")]
    fn expirable_semaphore(&self, name: impl Into<String>) -> ExpirableSemaphore {
        ExpirableSemaphore::new(self, name)
    }

    #[cfg(feature = "latch")]
    fn count_down_latch(&self, name: impl Into<String>) -> CountDownLatch {
        CountDownLatch::new(self, name)
    }

    #[cfg(feature = "multilock")]
    fn multi_lock(&self, locks: impl IntoIterator<Item = ReentrantLock>) -> MultiLock {
        MultiLock::new(locks)
    }

    #[cfg(feature = "election")]
    fn leader_election(&self, name: impl Into<String>) -> LeaderElection {
        LeaderElection::new(self, name)
    }

    #[cfg(feature = "ratelimit")]
    fn rate_limiter(&self, name: impl Into<String>) -> RateLimiter {
        RateLimiter::new(self, name)
    }
}

/// Everything most programs need: `use redisync::prelude::*;`.
pub mod prelude {
    pub use crate::ClientExt;
    pub use redisync_core::{
        Acquire, Client, ClientBuilder, DistributedPrimitive, Error, Held, Lease, Result, Stats,
        Wait, WaitStrategy,
    };

    #[cfg(feature = "election")]
    pub use redisync_election::{Leader, LeaderElection, Leadership};
    #[cfg(feature = "latch")]
    pub use redisync_latch::CountDownLatch;
    #[cfg(feature = "lock")]
    pub use redisync_lock::{FairLock, LockGuard, ReentrantLock};
    #[cfg(feature = "multilock")]
    pub use redisync_multilock::{MultiLock, MultiLockGuard, Redlock, RedlockGuard};
    #[cfg(feature = "ratelimit")]
    pub use redisync_ratelimit::{Decision, Rate, RateLimiter};
    #[cfg(feature = "rwlock")]
    pub use redisync_rwlock::{ReadGuard, ReadLock, ReadWriteLock, WriteGuard, WriteLock};
    #[cfg(feature = "semaphore")]
    pub use redisync_semaphore::{ExpirablePermit, ExpirableSemaphore, Semaphore, SemaphorePermit};
}
