//! # redisync
//!
//! Distributed synchronization primitives on Redis for async Rust (tokio): a reentrant lock, a
//! fair lock, a read-write lock, semaphores, a count-down latch and a multi-lock, with watchdog
//! lease renewal, fencing tokens and pub/sub wake-ups.
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
//! ## Feature flags
//!
//! One flag per primitive; a primitive whose flag is off is not compiled. `full` (the
//! default) enables all of them.
//!
//! | flag | brings |
//! |---|---|
//! | `lock` | [`ReentrantLock`], [`FairLock`], [`LockGuard`] |
//! | `rwlock` | [`ReadWriteLock`], [`ReadGuard`], [`WriteGuard`] |
//! | `semaphore` | [`Semaphore`], [`SemaphorePermit`], [`ExpirableSemaphore`], [`ExpirablePermit`] |
//! | `latch` | [`CountDownLatch`] |
//! | `multilock` | [`MultiLock`], [`MultiLockGuard`], [`Redlock`], [`RedlockGuard`] |
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
    Client, ClientBuilder, DistributedPrimitive, Error, LocalState, Result, Stats,
};

/// The lower layer: keys, scripts, waiting and leases, for writing new primitives.
pub use redisync_core as core;

#[cfg(feature = "latch")]
pub use redisync_latch::{CountDownLatch, COUNT_DOWN_MEMORY};
#[cfg(feature = "lock")]
pub use redisync_lock::{FairLock, LockGuard, ReentrantLock};
#[cfg(feature = "multilock")]
pub use redisync_multilock::{MultiLock, MultiLockGuard, Redlock, RedlockGuard};
#[cfg(feature = "rwlock")]
pub use redisync_rwlock::{ReadGuard, ReadWriteLock, WriteGuard};
#[cfg(feature = "semaphore")]
pub use redisync_semaphore::{ExpirablePermit, ExpirableSemaphore, Semaphore, SemaphorePermit};

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
}

/// Everything most programs need: `use redisync::prelude::*;`.
pub mod prelude {
    pub use crate::ClientExt;
    pub use redisync_core::{Client, ClientBuilder, DistributedPrimitive, Error, Result, Stats};

    #[cfg(feature = "latch")]
    pub use redisync_latch::CountDownLatch;
    #[cfg(feature = "lock")]
    pub use redisync_lock::{FairLock, LockGuard, ReentrantLock};
    #[cfg(feature = "multilock")]
    pub use redisync_multilock::{MultiLock, MultiLockGuard, Redlock, RedlockGuard};
    #[cfg(feature = "rwlock")]
    pub use redisync_rwlock::{ReadGuard, ReadWriteLock, WriteGuard};
    #[cfg(feature = "semaphore")]
    pub use redisync_semaphore::{ExpirablePermit, ExpirableSemaphore, Semaphore, SemaphorePermit};
}
