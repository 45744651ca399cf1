//! Cheap counters a client keeps since it was built.

use std::sync::atomic::{AtomicU64, Ordering};

/// A snapshot of a client's counters, taken by [`Client::stats`](crate::Client::stats).
///
/// Every field counts events since the client was built; the counters only grow.
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
/// let lock = client.lock("stats");
/// lock.lock().await?.unlock().await?;
/// let stats: Stats = client.stats();
/// assert_eq!(stats.acquires, 1);
/// assert_eq!(stats.contended_waits, 0);
/// assert_eq!(stats.unconfirmed_releases, 0); // zero in a healthy run
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Successful acquisitions of any primitive (re-entries included).
    pub acquires: u64,
    /// Acquire calls that found the primitive busy and had to wait.
    pub contended_waits: u64,
    /// Leases extended by the watchdog (one per hold per renewal).
    pub renewals: u64,
    /// Holds the client found lost: renewal saw them gone, or renewals failed past the lease.
    pub lost_leases: u64,
    /// Script calls sent to Redis (EVALSHA), including background releases and renewals.
    pub scripts_sent: u64,
    /// Give-backs (releases, returned permits, count-downs, given-back acquires) that Redis
    /// never confirmed although they mattered: refused with an error retrying cannot cure, or
    /// still unconfirmed when the client shut down before the hold's lease ended. Each is also
    /// logged at error level with the primitive's key. Zero in a healthy run.
    pub unconfirmed_releases: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) acquires: AtomicU64,
    pub(crate) contended_waits: AtomicU64,
    pub(crate) renewals: AtomicU64,
    pub(crate) lost_leases: AtomicU64,
    pub(crate) scripts_sent: AtomicU64,
    pub(crate) unconfirmed_releases: AtomicU64,
}

impl Counters {
    pub(crate) fn bump(counter: &AtomicU64, by: u64) {
        counter.fetch_add(by, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> Stats {
        Stats {
            acquires: self.acquires.load(Ordering::Relaxed),
            contended_waits: self.contended_waits.load(Ordering::Relaxed),
            renewals: self.renewals.load(Ordering::Relaxed),
            lost_leases: self.lost_leases.load(Ordering::Relaxed),
            scripts_sent: self.scripts_sent.load(Ordering::Relaxed),
            unconfirmed_releases: self.unconfirmed_releases.load(Ordering::Relaxed),
        }
    }
}
