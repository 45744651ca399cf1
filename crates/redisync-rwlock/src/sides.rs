//! [`ReadLock`] and [`WriteLock`]: the two sides of a [`ReadWriteLock`], each a primitive that
//! can be held ([`Acquire`]), so that code generic over `Acquire` can read- or write-lock.

use redisync_core::toolkit::{async_trait, Acquire, DistributedPrimitive, Lease, Result, Wait};

use crate::guard::{ReadGuard, WriteGuard};
use crate::rwlock::ReadWriteLock;

impl ReadWriteLock {
    /// The read side of this lock, as a primitive of its own: [`ReadLock::acquire_with`] is
    /// this lock's read acquire, and [`read`](Self::read), [`try_read_for`](Self::try_read_for)
    /// and the other read methods are shorthands for it. A view of this handle (same owner,
    /// same writer preference); cheap to make and to clone.
    ///
    /// # Examples
    ///
    /// ```
    /// use redisync::prelude::*;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redisync::Result<()> {
    /// # let server = redisync_test_harness::RedisServer::start();
    /// # let client = Client::connect(server.url()).await?;
    /// let cache = client.read_write_lock("cache:users");
    /// let guard = cache.reader().acquire().await?;
    /// assert_eq!(guard.fencing_token(), None); // readers do not write
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn reader(&self) -> ReadLock {
        ReadLock { rw: self.clone() }
    }

    /// The write side of this lock, as a primitive of its own: [`WriteLock::acquire_with`] is
    /// this lock's write acquire, and [`write`](Self::write),
    /// [`try_write_for`](Self::try_write_for) and the other write methods are shorthands for
    /// it. A view of this handle (same owner); cheap to make and to clone.
    ///
    /// # Examples
    ///
    /// ```
    /// use redisync::prelude::*;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redisync::Result<()> {
    /// # let server = redisync_test_harness::RedisServer::start();
    /// # let client = Client::connect(server.url()).await?;
    /// let cache = client.read_write_lock("cache:users");
    /// let guard = cache.writer().acquire().await?;
    /// assert_eq!(Held::fencing_token(&guard), Some(guard.fencing_token()));
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn writer(&self) -> WriteLock {
        WriteLock { rw: self.clone() }
    }
}

/// The read side of a [`ReadWriteLock`] (from [`ReadWriteLock::reader`]): acquiring it takes a
/// read hold, exactly as the lock's read methods do. Its name is the lock's, and
/// [`delete`](DistributedPrimitive::delete) deletes the whole lock.
///
/// # Examples
///
/// Code generic over [`Acquire`] reads or writes, as it is given one side or the other:
///
/// ```
/// use redisync::prelude::*;
/// use std::time::Duration;
///
/// /// Takes `side`, waiting at most `wait`, and gives it back at once.
/// async fn try_briefly<A: Acquire>(side: &A, wait: Duration) -> Result<bool> {
///     match side.try_acquire_for(wait).await? {
///         Some(held) => {
///             held.release().await?;
///             Ok(true)
///         }
///         None => Ok(false),
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redisync::Result<()> {
/// # let server = redisync_test_harness::RedisServer::start();
/// # let url = server.url(); // e.g. "redis://127.0.0.1:6379/"
/// let client = Client::connect(url).await?;
/// let config = client.read_write_lock("config");
/// let reader: ReadLock = config.reader();
/// assert_eq!(reader.name(), "config"); // the lock's name
/// let read = reader.acquire().await?;
/// let other = client.read_write_lock("config");
/// assert!(try_briefly(&other.reader(), Duration::ZERO).await?); // readers share
/// assert!(!try_briefly(&other.writer(), Duration::ZERO).await?); // a writer must wait
/// read.release().await?;
/// assert!(try_briefly(&other.writer(), Duration::from_secs(5)).await?);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct ReadLock {
    rw: ReadWriteLock,
}

/// The write side of a [`ReadWriteLock`] (from [`ReadWriteLock::writer`]): acquiring it takes
/// the write hold, exactly as the lock's write methods do. Its name is the lock's, and
/// [`delete`](DistributedPrimitive::delete) deletes the whole lock.
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
/// let jobs = client.read_write_lock("jobs");
/// let writer: WriteLock = jobs.writer();
/// let guard = writer.acquire().await?;
/// assert_eq!(Held::fencing_token(&guard), Some(guard.fencing_token()));
/// assert!(writer.delete().await?); // deletes the whole lock, this hold with it
/// assert!(matches!(guard.release().await, Err(Error::NotOwner)));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct WriteLock {
    rw: ReadWriteLock,
}

impl ReadLock {
    /// The read-write lock this is the read side of.
    pub fn read_write_lock(&self) -> &ReadWriteLock {
        &self.rw
    }
}

impl WriteLock {
    /// The read-write lock this is the write side of.
    pub fn read_write_lock(&self) -> &ReadWriteLock {
        &self.rw
    }
}

impl Acquire for ReadLock {
    type Guard = ReadGuard;

    /// Takes a read hold, waiting as `wait` says, with a watchdog-renewed or fixed `lease`:
    /// the one read acquire of the lock. Errors as for [`ReadWriteLock::read`].
    ///
    /// # Cancel safety
    ///
    /// As for [`ReadWriteLock::read`].
    async fn acquire_with(&self, wait: Wait, lease: Lease) -> Result<Option<ReadGuard>> {
        self.rw.acquire_read(lease.duration(), wait.limit()).await
    }
}

impl Acquire for WriteLock {
    type Guard = WriteGuard;

    /// Takes the write hold, waiting as `wait` says, with a watchdog-renewed or fixed `lease`:
    /// the one write acquire of the lock. Errors as for [`ReadWriteLock::write`] (among them
    /// [`Error::UpgradeNotSupported`](redisync_core::Error::UpgradeNotSupported) at once for
    /// an owner that reads).
    ///
    /// # Cancel safety
    ///
    /// As for [`ReadWriteLock::write`].
    async fn acquire_with(&self, wait: Wait, lease: Lease) -> Result<Option<WriteGuard>> {
        self.rw.acquire_write(lease.duration(), wait.limit()).await
    }
}

/// The lock's: a side has no state of its own.
#[async_trait]
impl DistributedPrimitive for ReadLock {
    fn name(&self) -> &str {
        self.rw.name()
    }

    /// Deletes the whole read-write lock ([`ReadWriteLock`]'s `delete`).
    async fn delete(&self) -> Result<bool> {
        self.rw.delete().await
    }
}

/// The lock's: a side has no state of its own.
#[async_trait]
impl DistributedPrimitive for WriteLock {
    fn name(&self) -> &str {
        self.rw.name()
    }

    /// Deletes the whole read-write lock ([`ReadWriteLock`]'s `delete`).
    async fn delete(&self) -> Result<bool> {
        self.rw.delete().await
    }
}
