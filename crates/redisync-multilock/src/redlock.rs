//! [`Redlock`]: one lock on a majority of independent Redis servers.

use std::collections::hash_map::RandomState;
use std::collections::HashSet;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use futures_util::stream::{FuturesUnordered, StreamExt};
use redisync_core::toolkit::duration::{lease_margin, lease_millis, wait_deadline};
use redisync_core::toolkit::{async_trait, DistributedPrimitive, Error, Result};
use redisync_lock::{LockGuard, ReentrantLock};

use crate::release::{delete_all, give_back, release_all};

/// The longest pause between two rounds of a waiting Redlock acquire; each pause is random
/// up to this, so that contenders do not keep splitting the servers between them.
const MAX_RETRY_PAUSE: Duration = Duration::from_millis(200);

/// One lock held on a majority of independent Redis servers: the Redlock algorithm.
///
/// Create one from one [`ReentrantLock`] handle per server, each from a client of its own
/// (usually all with the same name). A round asks every server at once, without waiting on
/// any; it succeeds when a majority ([`quorum`](Self::quorum)) granted the lock and time is
/// left of the lease: the *validity*, `lease − time the round took − drift` (drift: 1% of the
/// lease plus 2 ms, or the lease margin of a server's client if that is larger: see
/// [`ClientBuilder::clock_drift_ppm`](redisync_core::ClientBuilder::clock_drift_ppm)).
/// Otherwise every grant of the round is given back and, until the wait runs out, another
/// round follows after a random pause. The lock therefore survives a minority of
/// the servers being down. Leases are fixed (no watchdog): the guard is valid until
/// [`RedlockGuard::validity`] runs out.
///
/// Each server counts once. A server is known by its client's
/// [`Client::server`](redisync_core::Client::server) (`host:port/db`, as the URL spelled it),
/// and a Redlock whose locks name one server more than once (one handle or its clones listed
/// twice, two clients of one URL, two lock names on one server) would count that server's
/// grant twice, taking a minority for a majority. Every acquire of such a Redlock fails with
/// [`Error::InvalidArgument`] naming the server. Two spellings of one server (`localhost` and
/// `127.0.0.1`) cannot be told apart, so spell each server one way.
///
/// # Redlock is not a correctness mechanism
///
/// Use it where two holders at once cost efficiency (a job done twice), never where they
/// corrupt data. Martin Kleppmann's analysis ("How to do distributed locking", 2016) shows why
/// no lease-based lock is safe by itself, and Redlock has no way to make it safe:
///
/// * **Process pauses.** A holder can stop for longer than the lease (a long GC or allocator
///   stall, page faults, CPU starvation, a container freeze, SIGSTOP) right after it checked
///   that the lock is still valid. The lease ends, another client takes the lock, and the
///   first one wakes and writes as if it still held it. Checking validity before each write
///   only narrows the window.
/// * **Clock jumps.** Expiry is judged by each server's clock. If a server's clock jumps
///   forward (an NTP step, an operator), its key expires early; a second client can then gather
///   a majority while the first still believes it holds one. A server that restarts without
///   persistence forgets its key the same way.
/// * **Network delays.** A grant that arrives late has spent part of the lease on the wire;
///   the validity computation covers that only if clocks advance at the same rate everywhere.
///
/// The remedy for all three is a *fencing token* checked by the protected resource, rejecting
/// writes older than the newest it has seen. Redlock cannot provide one: each server hands out
/// its own counter ([`RedlockGuard::fencing_tokens`] lists them), and counters of independent
/// servers are not comparable. For correctness, use one [`ReentrantLock`] on one Redis (with
/// replicas) and its fencing token instead.
///
/// # Shared surface
///
/// A `Redlock` is a [`DistributedPrimitive`] (its name is its locks' name, and `delete` deletes
/// the lock on every server) and its guard is [`Held`](redisync_core::Held), but it is not
/// [`Acquire`](redisync_core::Acquire): its leases are fixed by design (its safety argument is
/// the validity computed from a known lease), so the watchdog lease that `Acquire`'s
/// `acquire`, `try_acquire` and `try_acquire_for` ask for is one it cannot give. Code generic
/// over `Acquire` would only ever get errors from it.
///
/// # Examples
///
/// ```
/// use redisync::prelude::*;
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redisync::Result<()> {
/// # let servers: Vec<_> = (0..3).map(|_| redisync_test_harness::RedisServer::start()).collect();
/// let mut locks = Vec::new();
/// for server in &servers {
///     let client = Client::connect(server.url()).await?;
///     locks.push(client.lock("nightly-report"));
/// }
/// let redlock = Redlock::new(locks);
/// assert_eq!(redlock.quorum(), 2);
/// if let Some(guard) = redlock.try_lock_with_lease(Duration::ZERO, Duration::from_secs(10)).await? {
///     assert!(guard.validity() > Duration::from_secs(9));
///     guard.unlock().await?;
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Redlock {
    locks: Vec<ReentrantLock>,
    /// The locks' distinct names, joined with `+` (usually one name); shared with the guards.
    name: Arc<str>,
    /// How many different servers the locks name.
    servers: usize,
    /// The first server named by more than one lock, if any.
    duplicate: Option<String>,
}

impl Redlock {
    /// A Redlock over `locks`, one per independent server. Never fails: an empty set, or a
    /// server named by more than one lock, is reported by every acquire.
    pub fn new(locks: impl IntoIterator<Item = ReentrantLock>) -> Self {
        let locks: Vec<ReentrantLock> = locks.into_iter().collect();
        let mut seen = HashSet::new();
        let mut duplicate = None;
        for lock in &locks {
            // Databases of one server fail together: the server is what counts.
            let server = without_database(lock.client().server());
            if !seen.insert(server) && duplicate.is_none() {
                duplicate = Some(server.to_owned());
            }
        }
        let servers = seen.len();
        let mut names: Vec<&str> = Vec::new();
        for lock in &locks {
            if !names.contains(&lock.name()) {
                names.push(lock.name());
            }
        }
        Redlock {
            name: names.join("+").into(),
            locks,
            servers,
            duplicate,
        }
    }

    /// How many servers must grant the lock: a strict majority of the distinct servers.
    pub fn quorum(&self) -> usize {
        self.servers / 2 + 1
    }

    /// Acquires the lock on a majority with a fixed `lease`, trying round after round as long
    /// as it takes.
    ///
    /// # Errors
    ///
    /// When so many servers fail (rather than being held by someone else) that no majority is
    /// possible, the servers' errors: [`Error::Several`], or the error itself if only one
    /// server was asked. [`Error::InvalidArgument`] for an empty Redlock, one that names a
    /// server more than once, or a bad lease.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future gives back every grant of the current round (in the background).
    pub async fn lock_with_lease(&self, lease: Duration) -> Result<RedlockGuard> {
        self.acquire(None, lease)
            .await?
            .ok_or_else(|| Error::invalid("an unbounded wait ended without the lock"))
    }

    /// Acquires the lock on a majority with a fixed `lease`, trying rounds for at most `wait`
    /// (a zero `wait` tries one round). `None` if no round succeeded in time.
    ///
    /// # Errors
    ///
    /// As for [`lock_with_lease`](Self::lock_with_lease).
    ///
    /// # Cancel safety
    ///
    /// As for [`lock_with_lease`](Self::lock_with_lease).
    pub async fn try_lock_with_lease(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<RedlockGuard>> {
        self.acquire(Some(wait), lease).await
    }

    async fn acquire(
        &self,
        wait: Option<Duration>,
        lease: Duration,
    ) -> Result<Option<RedlockGuard>> {
        if self.locks.is_empty() {
            return Err(Error::invalid("a redlock needs at least one server"));
        }
        if let Some(server) = &self.duplicate {
            return Err(Error::invalid(format!(
                "a redlock needs one lock per server, found {server} more than once"
            )));
        }
        lease_millis(lease)?;
        let deadline = wait.map(wait_deadline).transpose()?;
        let drift = self
            .locks
            .iter()
            .map(|lock| lease_margin(lease, lock.client().clock_drift_ppm()))
            .fold(lease / 100 + Duration::from_millis(2), Duration::max);
        let random = RandomState::new();
        for round in 0u64.. {
            if let Some(guard) = self.round(lease, drift).await? {
                return Ok(Some(guard));
            }
            let pause = random_up_to(&random, round, MAX_RETRY_PAUSE);
            match deadline {
                Some(deadline) if Instant::now() + pause >= deadline => return Ok(None),
                _ => tokio::time::sleep(pause).await,
            }
        }
        Ok(None)
    }

    /// One round: ask every server at once; keep the grants if a majority granted in time.
    async fn round(&self, lease: Duration, drift: Duration) -> Result<Option<RedlockGuard>> {
        let started = Instant::now();
        let asks = self
            .locks
            .iter()
            .map(|lock| lock.try_lock_with_lease(Duration::ZERO, lease));
        let mut granted = Vec::new();
        let mut failures = Vec::new();
        for (lock, outcome) in self.locks.iter().zip(join_all(asks).await) {
            match outcome {
                Ok(Some(guard)) => granted.push(guard),
                Ok(None) => {}
                Err(err) => failures.push((lock.client().server().to_owned(), err)),
            }
        }
        let valid_until = (started + lease).checked_sub(drift);
        let in_time = valid_until.is_some_and(|until| Instant::now() < until);
        if let (true, true, Some(valid_until)) =
            (granted.len() >= self.quorum(), in_time, valid_until)
        {
            return Ok(Some(RedlockGuard {
                name: self.name.clone(),
                guards: granted,
                quorum: self.quorum(),
                valid_until,
            }));
        }
        give_back(granted).await;
        if failures.len() > self.locks.len() - self.quorum() {
            return Err(match failures.len() {
                1 => failures.remove(0).1,
                _ => Error::Several(failures),
            });
        }
        Ok(None)
    }
}

#[async_trait]
impl DistributedPrimitive for Redlock {
    /// Its locks' name; if they have different names, the distinct names in the order given,
    /// joined with `+`.
    fn name(&self) -> &str {
        &self.name
    }

    /// Deletes the lock on every server (force-unlocks it, keeping each server's fencing
    /// counter), all of them even when some fail. Whether any server had it held.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty Redlock; otherwise the one failure, or
    /// [`Error::Several`].
    async fn delete(&self) -> Result<bool> {
        if self.locks.is_empty() {
            return Err(Error::invalid("a redlock needs at least one server"));
        }
        delete_all(&self.locks).await
    }
}

/// A random duration in `[0, max)` for round `round`, from the standard library's randomly
/// keyed hasher (no random-number crate needed for a retry jitter).
fn random_up_to(random: &RandomState, round: u64, max: Duration) -> Duration {
    let mut hasher = random.build_hasher();
    hasher.write_u64(round);
    let nanos = max.as_nanos().max(1) as u64;
    Duration::from_nanos(hasher.finish() % nanos)
}

/// `host:port` of a `host:port/db` server name (see `Client::server`).
fn without_database(server: &str) -> &str {
    server
        .rsplit_once('/')
        .map_or(server, |(address, _)| address)
}

/// A [`Redlock`] held on a majority of servers.
///
/// It is valid until [`validity`](Self::validity) runs out; do nothing that needs the lock
/// after that. Dropping it gives back every grant in the background; [`unlock`](Self::unlock)
/// does so and reports failures.
///
/// As a [`Held`](redisync_core::Held), its fencing token is `None`: the servers' tokens are
/// not comparable (see [`Redlock`]).
///
/// # Examples
///
/// ```
/// use redisync::prelude::*;
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redisync::Result<()> {
/// # let servers: Vec<_> = (0..3).map(|_| redisync_test_harness::RedisServer::start()).collect();
/// let mut locks = Vec::new();
/// for server in &servers {
///     let client = Client::connect(server.url()).await?;
///     locks.push(client.lock("nightly-report"));
/// }
/// let redlock = Redlock::new(locks);
/// let guard: RedlockGuard = redlock.lock_with_lease(Duration::from_secs(30)).await?;
/// assert!(guard.servers_held() >= redlock.quorum());
/// assert_eq!(guard.fencing_tokens().len(), guard.servers_held()); // one per server
/// assert_eq!(Held::fencing_token(&guard), None); // and none of them fences (see Redlock)
///
/// // Do only what fits in the validity left, and check it before each step.
/// assert!(guard.validity() > Duration::ZERO && guard.validity() <= Duration::from_secs(30));
/// guard.unlock().await?;
/// # Ok(())
/// # }
/// ```
#[must_use = "dropping the guard releases the lock at once"]
#[derive(Debug)]
pub struct RedlockGuard {
    /// The Redlock's name (see [`DistributedPrimitive::name`]).
    name: Arc<str>,
    guards: Vec<LockGuard>,
    quorum: usize,
    valid_until: Instant,
}

impl RedlockGuard {
    /// The Redlock's name: its locks' name (their distinct names joined with `+`, if they
    /// differ).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How long the lock remains valid: the lease less the time the winning round took and
    /// the drift allowance. Zero once it has run out.
    pub fn validity(&self) -> Duration {
        self.valid_until.saturating_duration_since(Instant::now())
    }

    /// How many servers granted the lock.
    pub fn servers_held(&self) -> usize {
        self.guards.len()
    }

    /// Each granting server (as its client names it) with the fencing token it handed out.
    /// Tokens of different servers are unrelated: see [`Redlock`] on why Redlock cannot fence.
    pub fn fencing_tokens(&self) -> Vec<(String, u64)> {
        self.guards
            .iter()
            .map(|guard| (guard.client().server().to_owned(), guard.fencing_token()))
            .collect()
    }

    /// Whether the lock is no longer valid: the validity ran out, or fewer than a majority of
    /// the grants are still known to be held.
    pub fn is_lost(&self) -> bool {
        self.validity().is_zero()
            || self.guards.iter().filter(|g| !g.is_lost()).count() < self.quorum
    }

    /// Completes once the lock is no longer valid (see [`is_lost`](Self::is_lost)). The future
    /// does not borrow the guard.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let valid_until = self.valid_until;
        // The lock is lost once more grants are lost than the majority can spare.
        let spare = self.guards.len().saturating_sub(self.quorum);
        let mut losses: FuturesUnordered<_> = self.guards.iter().map(|g| g.lost()).collect();
        async move {
            let majority_lost = async {
                let mut lost = 0;
                while losses.next().await.is_some() {
                    lost += 1;
                    if lost > spare {
                        return;
                    }
                }
                std::future::pending::<()>().await;
            };
            tokio::select! {
                _ = tokio::time::sleep_until(valid_until.into()) => {}
                _ = majority_lost => {}
            }
        }
    }

    /// Gives back every grant, even when some releases fail, and waits for all of them.
    ///
    /// # Errors
    ///
    /// As for [`MultiLockGuard::unlock`](crate::MultiLockGuard::unlock), with failures named
    /// by server; after the validity ran out, expect [`Error::NotOwner`] from servers whose
    /// lease ended.
    pub async fn unlock(self) -> Result<()> {
        release_all(self.guards, |guard| guard.client().server().to_owned()).await
    }
}

// Redlock cannot fence: see `Redlock` on why the servers' tokens are not comparable.
redisync_core::toolkit::impl_held!(RedlockGuard {
    fencing_token: |_guard| None,
    release: unlock,
});
