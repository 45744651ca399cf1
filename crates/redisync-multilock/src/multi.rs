//! [`MultiLock`]: several locks taken as one.

use redisync_core::toolkit::Toolkit;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::{join_all, select_all};
use redisync_core::toolkit::duration::lease_millis;
use redisync_core::toolkit::{
    async_trait, granted, Acquire, DistributedPrimitive, Error, Lease, Result, Wait,
};
use redisync_lock::{LockGuard, ReentrantLock};
use tracing::Instrument;

use crate::release::{delete_all, give_back, release_all};

/// All of a set of locks, or none.
///
/// Create one with `client.multi_lock(locks)` (the `ClientExt` method of the `redisync`
/// crate) or [`MultiLock::new`], from any [`ReentrantLock`] handles: of one client or of
/// several, on one server or on several. Acquiring returns a [`MultiLockGuard`] holding every
/// lock; a failed, timed-out or cancelled acquisition holds none of them when it returns.
///
/// * **No deadlock, whatever the argument order.** Locks are taken in one canonical order (by
///   server, then cluster slot, then key prefix, then name), so two callers listing the same
///   locks in opposite
///   orders cannot each hold what the other waits for (Redisson's `RedissonMultiLock` takes
///   them in argument order and can deadlock). Servers are compared as their clients name them
///   ([`Client::server`](redisync_core::Client::server)): name each server the same way in
///   every process.
/// * **One round trip for locks on one client.** Consecutive locks (in canonical order) of
///   one client are first tried together in one script, all or none. Only if one of them is
///   busy does the multi-lock wait, taking them one by one in canonical order. Locks of two
///   clients of one server may interleave in that order, and then take a script per run. On a
///   Redis Cluster one script can only touch one slot: the locks are tried one script per
///   slot, so give related locks a common hash tag (`"order:{42}:items"`,
///   `"order:{42}:invoice"`) to take them in one round trip.
/// * **Leases.** While it is still acquiring, every lock it holds is renewed by the watchdog,
///   so none expires while it waits for the others. Once it holds all of them, a fixed lease
///   (`lock_with_lease`) is set on every one at once; otherwise the watchdog keeps all alive.
/// * **A lock lost while waiting.** If a lock taken early is lost while the multi-lock waits
///   for a later one (its lease ran out because renewals failed, or it was force-unlocked),
///   that lock and the ones after it are given back and taken again, in canonical order: the
///   guard returned holds no lock the client already knows it lost.
/// * **A lock listed twice** (two handles to one name on one server) is acquired once, through
///   the first handle.
///
/// An empty multi-lock is [`Error::InvalidArgument`] on every acquire.
///
/// A `MultiLock` is a primitive like the others ([`DistributedPrimitive`], [`Acquire`]): its
/// [`name`](DistributedPrimitive::name) is its locks' names in canonical order joined with
/// `+`, and [`delete`](DistributedPrimitive::delete) deletes every lock.
///
/// # Round trips and work in Redis
///
/// | operation | round trips | commands run inside Redis |
/// |---|---|---|
/// | uncontended acquire of *n* locks | 1 per client, or per run of one client's locks (one after another, in canonical order); on a cluster, 1 per slot | 4 per lock, as a lock's own acquire (`EXISTS`, `INCR`, `HSET`, `PEXPIRE`; one more `EXISTS` for a lock that is held or waited for) |
/// | with a fixed lease, locks on several clients, or after waiting | + 1 to set the leases (concurrently) | |
/// | contended acquire | as for each lock waited for | as for each lock |
/// | release | 1 per lock, concurrently | as a lock's release, per lock (2 with nobody waiting: `HMGET`, `DEL`) |
///
/// So an uncontended cycle of *n* locks of one client runs 1 + 7*n* commands, `EVALSHA`s
/// included (15 for 2 locks, 57 for 8), as asserted by `integration-tests/tests/multilock.rs`.
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
/// let transfer = client.multi_lock([
///     client.lock("account:7"),
///     client.lock("account:3"),
/// ]);
/// let guard = transfer.lock().await?;
/// for (name, token) in guard.fencing_tokens() {
///     println!("{name}: write with token {token}");
/// }
/// guard.unlock().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct MultiLock {
    /// Distinct locks in canonical order.
    locks: Vec<ReentrantLock>,
    /// Their names in that order, joined with `+`; shared with the guards.
    name: Arc<str>,
    /// Runs of consecutive `locks` on one client and, on a cluster, one slot: each is tried in
    /// one script.
    groups: Vec<std::ops::Range<usize>>,
}

/// Where a lock sorts: by server, then cluster slot (none on a single server), then key
/// prefix, then name. Equal keys are the same lock.
fn canonical_key(lock: &ReentrantLock) -> (String, Option<u16>, String, String) {
    let client = lock.client();
    let shard = client
        .key_space(lock.name())
        .ok()
        .and_then(|keys| client.shard_of(&keys));
    (
        client.server().to_owned(),
        shard,
        client.key_prefix().to_owned(),
        lock.name().to_owned(),
    )
}

impl MultiLock {
    /// A multi-lock over `locks`, in any order. Never fails: an empty set is reported by every
    /// acquire.
    pub fn new(locks: impl IntoIterator<Item = ReentrantLock>) -> Self {
        let mut keyed: Vec<_> = locks
            .into_iter()
            .map(|lock| (canonical_key(&lock), lock))
            .collect();
        // Stable: of two handles to one lock, the first listed is kept.
        keyed.sort_by(|a, b| a.0.cmp(&b.0));
        keyed.dedup_by(|later, earlier| later.0 == earlier.0);
        let mut groups: Vec<std::ops::Range<usize>> = Vec::new();
        for (i, (key, lock)) in keyed.iter().enumerate() {
            match groups.last_mut() {
                Some(group)
                    if keyed[group.start].1.client().id() == lock.client().id()
                        && keyed[group.start].0 .1 == key.1 =>
                {
                    group.end = i + 1;
                }
                _ => groups.push(i..i + 1),
            }
        }
        let locks: Vec<ReentrantLock> = keyed.into_iter().map(|(_, lock)| lock).collect();
        let names: Vec<&str> = locks.iter().map(|lock| lock.name()).collect();
        MultiLock {
            name: names.join("+").into(),
            locks,
            groups,
        }
    }

    /// The distinct locks, in the order they are acquired.
    pub fn locks(&self) -> &[ReentrantLock] {
        &self.locks
    }

    /// Acquires every lock, waiting as long as it takes; the watchdog renews them all.
    ///
    /// # Errors
    ///
    /// As for [`ReentrantLock::lock`]; when one lock fails, those already taken are released
    /// before the error is returned.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future releases every lock taken so far (in the background), and a lock
    /// request on the wire gives back whatever it gets.
    pub async fn lock(&self) -> Result<MultiLockGuard> {
        self.acquire().await
    }

    /// Acquires every lock, waiting as long as it takes; once all are held, each gets the
    /// fixed `lease` (no watchdog).
    ///
    /// # Cancel safety
    ///
    /// As for [`lock`](Self::lock).
    pub async fn lock_with_lease(&self, lease: Duration) -> Result<MultiLockGuard> {
        granted(
            self.acquire_with(Wait::Forever, Lease::Fixed(lease))
                .await?,
        )
    }

    /// Acquires every lock if all are free now (or held by their handles' owners), without
    /// waiting.
    ///
    /// # Cancel safety
    ///
    /// As for [`lock`](Self::lock).
    pub async fn try_lock(&self) -> Result<Option<MultiLockGuard>> {
        self.try_acquire().await
    }

    /// Acquires every lock, waiting at most `wait` in all; `None` (and nothing held) if the
    /// time runs out.
    ///
    /// # Cancel safety
    ///
    /// As for [`lock`](Self::lock).
    pub async fn try_lock_for(&self, wait: Duration) -> Result<Option<MultiLockGuard>> {
        self.try_acquire_for(wait).await
    }

    /// Acquires every lock, waiting at most `wait`; once all are held, each gets the fixed
    /// `lease`.
    ///
    /// # Cancel safety
    ///
    /// As for [`lock`](Self::lock).
    pub async fn try_lock_with_lease(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<MultiLockGuard>> {
        self.acquire_with(Wait::For(wait), Lease::Fixed(lease))
            .await
    }

    /// Checks that there is a lock, and every lock's name, before anything is taken: a bad one
    /// must not leave others taken and given back meanwhile.
    fn check(&self) -> Result<()> {
        if self.locks.is_empty() {
            return Err(Error::invalid("a multi-lock needs at least one lock"));
        }
        for lock in &self.locks {
            lock.client().key_space(lock.name())?;
        }
        Ok(())
    }

    /// Takes every lock into `held`; `false` if the deadline passed first.
    ///
    /// A lock taken before a later one may be lost while that one is acquired (its lease ran
    /// out because renewals failed, as a hand-over's short lease can, or it was
    /// force-unlocked): the locks from the first lost one on are then given back and taken
    /// again, in canonical order, so that no guard is returned with an earlier hold the client
    /// knows is gone, and the multi-lock only ever holds locks that sort before the one it
    /// waits for. The holds of the last step are as fresh as a lock's own acquire returns them
    /// (a very short fixed lease may be over by then, as it may for a lock's), and are not
    /// looked at: retaking them would only get the same.
    async fn take_all(
        &self,
        held: &mut Vec<LockGuard>,
        lease: Option<Duration>,
        deadline: Option<Instant>,
    ) -> Result<bool> {
        // A fixed lease can be set by the acquiring script itself only when nothing else is
        // acquired after it; otherwise leases are fixed once everything is held.
        let lease_now = if self.groups.len() == 1 { lease } else { None };
        let mut lease_is_set = lease_now.is_some();
        loop {
            // How many of `held` were taken before the latest step.
            let mut earlier = held.len();
            for group in &self.groups {
                // `held` has the first locks in canonical order: the group's part not held.
                let start = group.start.max(held.len());
                if start >= group.end {
                    continue;
                }
                let locks = &self.locks[start..group.end];
                earlier = held.len();
                if let Some(guards) = ReentrantLock::try_lock_all(locks, lease_now).await? {
                    held.extend(guards);
                    continue;
                }
                // Busy. Without time to wait, that is the answer: taking the free ones one by
                // one only to give them back would just get in other callers' way.
                if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                    return Ok(false);
                }
                // Wait for each lock in turn (so with a watchdog lease), in canonical order.
                lease_is_set = false;
                for lock in locks {
                    earlier = held.len();
                    let guard = match deadline {
                        None => lock.lock().await?,
                        Some(deadline) => {
                            let left = deadline.saturating_duration_since(Instant::now());
                            match lock.try_lock_for(left).await? {
                                Some(guard) => guard,
                                None => return Ok(false),
                            }
                        }
                    };
                    held.push(guard);
                }
            }
            let Some(first_lost) = held[..earlier].iter().position(LockGuard::is_lost) else {
                break;
            };
            tracing::debug!(
                lock = held[first_lost].name(),
                "a lock was lost while the multi-lock waited for another: taking it again"
            );
            // The lost ones hold nothing to give back (dropping them sends their release
            // anyway, which finds nothing); the others are given back before the lost one is
            // asked for again, keeping the canonical order.
            let (_lost, live): (Vec<LockGuard>, Vec<LockGuard>) = held
                .split_off(first_lost)
                .into_iter()
                .partition(LockGuard::is_lost);
            give_back(live).await;
        }
        if let (Some(lease), false) = (lease, lease_is_set) {
            let fixed = join_all(held.iter_mut().map(|guard| guard.fix_lease(lease))).await;
            fixed.into_iter().collect::<Result<Vec<()>>>()?;
        }
        Ok(true)
    }
}

#[async_trait]
impl DistributedPrimitive for MultiLock {
    /// Its locks' names in canonical order, joined with `+` (empty for no locks).
    fn name(&self) -> &str {
        &self.name
    }

    /// Deletes every lock ([`ReentrantLock`]'s `delete`: force-unlocks it, keeping its fencing
    /// counter), all of them even when some fail. Whether any of them was held.
    ///
    /// # Errors
    ///
    /// As for [`MultiLockGuard::unlock`]: the one failure, or [`Error::Several`].
    async fn delete(&self) -> Result<bool> {
        self.check()?;
        delete_all(&self.locks).await
    }
}

impl Acquire for MultiLock {
    type Guard = MultiLockGuard;

    /// Acquires every lock, or none, waiting at most `wait` in all. With [`Lease::Fixed`],
    /// once all are held each gets that lease (no watchdog); with [`Lease::Watchdog`] the
    /// watchdog renews them all. The one acquire of the multi-lock: [`lock`](MultiLock::lock)
    /// and the others are shorthands for it.
    ///
    /// # Errors
    ///
    /// As for [`ReentrantLock::lock`]; when one lock fails, those already taken are released
    /// before the error is returned.
    ///
    /// # Cancel safety
    ///
    /// As for [`MultiLock::lock`].
    async fn acquire_with(&self, wait: Wait, lease: Lease) -> Result<Option<MultiLockGuard>> {
        self.check()?;
        let fixed = lease.duration();
        if let Some(lease) = fixed {
            lease_millis(lease)?;
        }
        let deadline = wait.deadline()?;
        let span = tracing::debug_span!("redisync.multi_lock", locks = self.locks.len());
        // Dropping this future drops `held`, which releases every guard in the background.
        let mut held: Vec<LockGuard> = Vec::with_capacity(self.locks.len());
        let outcome = self
            .take_all(&mut held, fixed, deadline)
            .instrument(span)
            .await;
        match outcome {
            Ok(true) => Ok(Some(MultiLockGuard {
                name: self.name.clone(),
                guards: held,
            })),
            Ok(false) => {
                give_back(held).await;
                Ok(None)
            }
            Err(err) => {
                give_back(held).await;
                Err(err)
            }
        }
    }
}

/// Every lock of a [`MultiLock`], held.
///
/// Dropping it releases every lock in the background; [`unlock`](Self::unlock) does so and
/// reports failures. `'static` and `Send`.
///
/// As a [`Held`](redisync_core::Held), its fencing token is `None`: each lock's token fences
/// only the resource that lock protects, and no one number fences them all. Pass each of
/// [`fencing_tokens`](Self::fencing_tokens) to its own resource.
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
/// let transfer = client.multi_lock([client.lock("account:2"), client.lock("account:1")]);
/// let guard: MultiLockGuard = transfer.lock().await?;
/// assert_eq!(guard.name(), "account:1+account:2"); // canonical order
/// assert_eq!(guard.guards().len(), 2);
/// for (name, token) in guard.fencing_tokens() {
///     println!("write {name} with token {token}"); // each token fences its own resource
/// }
/// assert_eq!(Held::fencing_token(&guard), None); // no one token fences both
///
/// assert!(client.lock("account:2").try_lock().await?.is_none());
/// guard.unlock().await?; // every lock
/// assert!(client.lock("account:2").try_lock().await?.is_some());
/// # Ok(())
/// # }
/// ```
#[must_use = "dropping the guard releases every lock at once"]
#[derive(Debug)]
pub struct MultiLockGuard {
    /// The multi-lock's name (see [`DistributedPrimitive::name`]).
    name: Arc<str>,
    guards: Vec<LockGuard>,
}

impl MultiLockGuard {
    /// The multi-lock's name: its locks' names in canonical order, joined with `+`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Each lock's name with the fencing token of its hold, in canonical order. Pass each
    /// token to the resource its lock protects.
    pub fn fencing_tokens(&self) -> Vec<(String, u64)> {
        self.guards
            .iter()
            .map(|guard| (guard.name().to_owned(), guard.fencing_token()))
            .collect()
    }

    /// The guard of each lock, in canonical order.
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// Whether the client knows any of the holds is gone.
    pub fn is_lost(&self) -> bool {
        self.guards.iter().any(LockGuard::is_lost)
    }

    /// Completes once any of the holds is known to be gone. The future does not borrow the
    /// guard.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let lost: Vec<_> = self
            .guards
            .iter()
            .map(|guard| Box::pin(guard.lost()))
            .collect();
        async move {
            if !lost.is_empty() {
                select_all(lost).await;
            }
        }
    }

    /// Releases every lock, even when some releases fail, and waits for all of them.
    ///
    /// # Errors
    ///
    /// The error of the one release that failed (for example [`Error::NotOwner`] for a lock
    /// whose lease was lost), or [`Error::Several`] with each failed lock's name and error.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped, every release still runs in the background.
    ///
    /// # Release guarantee
    ///
    /// Each lock's release follows [`LockGuard::unlock`]'s: one Redis cannot confirm is sent
    /// again in the background until Redis confirms it or that lock's lease has ended.
    pub async fn unlock(self) -> Result<()> {
        release_all(self.guards, |guard| guard.name().to_owned()).await
    }
}

// A multi-lock has no one fencing token: each lock's token fences only what that lock
// protects, so `Held::fencing_token` is `None` (documented on the guard).
redisync_core::toolkit::impl_held!(MultiLockGuard {
    fencing_token: |_guard| None,
    release: unlock,
});
