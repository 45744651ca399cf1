//! [`Semaphore`]: a classic counting semaphore whose permits live in Redis.

use redisync_core::toolkit::{KeyFamily, Toolkit};
use std::sync::Arc;
use std::time::Duration;

use redisync_core::toolkit::duration::redis_millis;
use redisync_core::toolkit::{
    async_trait, granted, Acquire, Attempt, Client, DistributedPrimitive, Error, Hold, LateOutcome,
    Lease, Result, Retry, ScriptCall, Wait, WaitSpec,
};
use tracing::Instrument;

use crate::layout::SemaphoreLayout;
use crate::scripts::{self, initial_count, permit_change, permit_count};
use crate::waiters::{self, LocalWaiters, Turn, Waited};
use redisync_core::toolkit::{ClientRegistration, Waitlist};

/// How often a blocked acquirer re-checks even if no release message arrives: a lost message
/// costs at most this much.
pub(crate) use redisync_core::RECHECK;

/// The Redis names of one semaphore.
#[derive(Debug)]
struct SemKeys {
    permits: String,
    generation: String,
    /// The waiting clients (see [`waiters`]).
    waiters: String,
    /// This client's wake-up channel.
    channel: String,
    queues: KeyFamily,
    attempt_records: KeyFamily,
}

#[derive(Debug)]
struct SemCore {
    client: Client,
    name: String,
    /// Made once per client and name, shared by every handle of it.
    keys: Result<Arc<SemKeys>>,
    /// How many of this client's tasks wait on the semaphore, across its handles.
    local: Arc<LocalWaiters>,
    /// Whether this client may be registered among the semaphore's waiters.
    registration: Arc<ClientRegistration>,
}

impl SemCore {
    fn keys(&self) -> Result<&SemKeys> {
        self.keys.as_deref().map_err(Clone::clone)
    }

    /// Undoes an acquire attempt whose caller went away, given how it ended: gives back what it took (or forbids it from taking anything), and withdraws the client
    /// from the waiters if the attempt may have registered it and no task of the client
    /// waits any more (the withdrawal its task made when it left may have come first).
    fn undo_attempt(&self, outcome: LateOutcome<i64>, record: String, n: i64, registers: bool) {
        let withdraws = registers && self.local.none_waiting();
        match outcome {
            LateOutcome::Replied(0) if registers => waiters::withdraw_late_registration(self),
            // Refused: it took nothing and registered nothing.
            LateOutcome::Replied(0 | -1) | LateOutcome::Refused => {}
            // Took permits, or may have: give them back (or forbid the grant).
            _ => {
                let Ok(keys) = self.keys() else {
                    return;
                };
                tracing::debug!("giving back an abandoned semaphore acquire");
                // A give-back record outlives any late run of the acquire.
                let keep = self
                    .client
                    .abandoned_request_grace()
                    .saturating_add(self.client.command_timeout());
                let give_back = scripts::GiveBack {
                    permits: &keys.permits,
                    attempt_record: &record,
                    generation: &keys.generation,
                    waiters: &keys.waiters,
                    n,
                    record_ms: redis_millis(keep),
                    withdraw_channel: if withdraws { &keys.channel } else { "" },
                }
                .call();
                self.client.spawn_release(give_back, Retry::UntilConfirmed);
            }
        }
    }

    fn add_call(&self, n: i64) -> Result<ScriptCall> {
        let keys = self.keys()?;
        Ok(scripts::AddPermits {
            permits: &keys.permits,
            generation: &keys.generation,
            waiters: &keys.waiters,
            added: n,
            new_generation: &self.client.unique_id(),
        }
        .call())
    }
}

impl Waited for SemCore {
    fn local(&self) -> &LocalWaiters {
        &self.local
    }

    fn registration(&self) -> &Arc<ClientRegistration> {
        &self.registration
    }

    fn channel(&self) -> Result<&str> {
        Ok(&self.keys()?.channel)
    }
}

impl Waitlist for SemCore {
    fn client(&self) -> &Client {
        &self.client
    }

    fn withdraw_call(&self) -> Result<ScriptCall> {
        let keys = self.keys()?;
        Ok(scripts::Withdraw {
            permits: &keys.permits,
            generation: &keys.generation,
            waiters: &keys.waiters,
            channel: &keys.channel,
        }
        .call())
    }
}

/// A distributed counting semaphore, like Redisson's `RSemaphore`: a number of permits in
/// Redis that any process may take and give back.
///
/// Create one with `client.semaphore(name)` (the `ClientExt` method of the `redisync` crate)
/// or [`Semaphore::new`]. Permits are not owned: whoever holds a [`SemaphorePermit`] gives it
/// back when it is dropped or released, and [`release`](Self::release) returns permits without
/// any permit object, so one process can signal another (a producer releases, a consumer
/// acquires). The count may go negative through [`add_permits`](Self::add_permits).
///
/// A permit taken by a process that then crashes is never given back: use
/// [`ExpirableSemaphore`](crate::ExpirableSemaphore) when holders may die.
///
/// A permit belongs to the semaphore it was taken from. [`delete`](DistributedPrimitive::delete)
/// ends the semaphore's *generation*, and whatever creates it again
/// ([`try_set_permits`](Self::try_set_permits), [`add_permits`](Self::add_permits) or
/// [`release`](Self::release) on a missing semaphore) starts a new one. Each acquire records
/// the generation it took its permits from, and releasing or giving them back returns them
/// only to that generation: permits taken before a delete go nowhere, rather than inflating
/// the new semaphore.
///
/// Waiting: a client with tasks waiting registers once in the semaphore's queue of waiting
/// clients, and each release wakes as many clients as it returns permits, those that have
/// waited longest, rather than every waiting client (see [wake-ups](crate#wake-ups)): a hand-off
/// costs the same requests with 2 waiting clients or 200, and clients take turns (one that
/// got in goes to the back of the queue if more of its tasks wait). Within one client,
/// waiters for the same number of permits queue and only the first asks Redis. A woken
/// acquire for `n` permits that finds fewer goes back to the end of the queue, so a waiter for
/// many permits can be overtaken by others taking fewer, and, until the next release, a
/// waiter for fewer behind it may wait for its re-check. Every waiter re-checks at least
/// once a second regardless, so a lost message never parks it.
///
/// Counts are limited to ±2^53 ([`MAX_PERMITS`](crate::MAX_PERMITS)); larger ones are
/// [`Error::InvalidArgument`].
///
/// # Redis keys
///
/// | key / channel | type | content |
/// |---|---|---|
/// | `<prefix>:{<name>}:semaphore` | string | available permits (may be negative) |
/// | `<prefix>:{<name>}:semaphore:generation` | string | a unique id of this incarnation of the semaphore, written by whichever call creates the permits count and deleted with it (a count found without one, written by hand say, has the empty generation); one without a count is foreign data, so remove both when removing a semaphore by hand |
/// | `<prefix>:{<name>}:semaphore:attempt:<attempt>` | string | one acquire's permits, `granted:<generation>` while they are out (no expiry: they are outstanding that long), deleted when they come back, so a release is applied once however often it is retried. Only the give-back of an acquire whose caller went away before its outcome was known leaves `given back` behind, for a few command timeouts, so that the acquire can no longer take permits if it runs late |
/// | `<prefix>:{<name>}:semaphore:waiters` | sorted set | the waiting clients' channels, longest waiting first; expires 5 s plus two command timeouts (15 s by default) after the last one registered |
/// | `<prefix>:{<name>}:semaphore:wake:<client id>` | channel | one client's wake-up: permits were added or released |
///
/// Nothing is kept per release: what the semaphore keeps is bounded by the permits out and
/// the clients waiting.
///
/// # Round trips and commands
///
/// | operation | round trips | Redis commands run |
/// |---|---|---|
/// | uncontended acquire | 1 (3 keys, 1 argument: a first try leaves off what only registering reads) | 4 (`EVALSHA`; `MGET`, `DECRBY`, `SET`) |
/// | release | 1 | 5 (`EVALSHA`; `MGET`, `DEL`, `INCRBY`, `ZRANGE`), + `ZREM` and `PUBLISH` per client woken |
/// | acquire + release, uncontended | 2 | 9 |
/// | contended acquire | 1 + 1 after subscribing + 1 per wake-up of its client (at least one a second) | about 2 scripts per acquisition (the woken client's acquire and the release), whatever the number of clients: a task that gets in while more tasks of its client wait keeps the client registered, at the back, and when fewer permits are left than the next of those tasks asks for, that task waits for its wake-up without asking first; it asks all the same if a wake-up came in between, and at least once a second |
/// | every other call | 1 | |
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
/// let jobs = client.semaphore("jobs");
/// assert!(jobs.try_set_permits(2).await?);
///
/// let first = jobs.acquire().await?;
/// let second = jobs.acquire().await?;
/// assert!(jobs.try_acquire().await?.is_none()); // both taken
/// first.release().await?;
/// second.forget();                              // keep this one taken
/// assert_eq!(jobs.available_permits().await?, 1);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Semaphore {
    core: Arc<SemCore>,
}

impl Semaphore {
    /// A handle to the semaphore called `name`. Never fails; a bad name is reported as
    /// [`Error::InvalidArgument`] by every call.
    pub fn new(client: &Client, name: impl Into<String>) -> Self {
        let name = name.into();
        let keys = client.key_space(&name).map(|space| {
            let layout = SemaphoreLayout::new(&space);
            client.local_cell_with(&layout.permits.clone(), || SemKeys {
                channel: layout.wake_channels.of(client.id()),
                permits: layout.permits,
                generation: layout.generation,
                waiters: layout.waiters,
                queues: layout.local_queues,
                attempt_records: layout.attempt_records,
            })
        });
        let (local, registration) = match &keys {
            Ok(keys) => (
                client.local_cell::<LocalWaiters>(&keys.waiters),
                ClientRegistration::of(client, &keys.waiters),
            ),
            Err(_) => Default::default(),
        };
        Semaphore {
            core: Arc::new(SemCore {
                client: client.clone(),
                name,
                keys,
                local,
                registration,
            }),
        }
    }

    /// Sets the number of permits to `n`, only if the semaphore has never been initialised (or
    /// was deleted), starting a new generation. Returns whether it did. `n` may be 0.
    pub async fn try_set_permits(&self, n: u64) -> Result<bool> {
        let n = initial_count(n, "a semaphore")?;
        let keys = self.core.keys()?;
        let call = scripts::TrySetPermits {
            permits: &keys.permits,
            generation: &keys.generation,
            waiters: &keys.waiters,
            initial: n,
            new_generation: &self.core.client.unique_id(),
        }
        .call();
        Ok(self.core.client.eval::<i64>(call).await? == 1)
    }

    /// Adds `n` permits, or removes `-n` when negative (the count may go below zero; acquires
    /// then wait until it is back up). Creates the semaphore if needed; wakes waiters when
    /// permits are added.
    pub async fn add_permits(&self, n: i64) -> Result<()> {
        let n = permit_change(n)?;
        self.core.client.eval::<i64>(self.core.add_call(n)?).await?;
        Ok(())
    }

    /// The number of permits available now (0 for a semaphore that does not exist; negative
    /// after removing more than there were).
    pub async fn available_permits(&self) -> Result<i64> {
        let keys = self.core.keys()?;
        let call = scripts::AvailablePermits {
            permits: &keys.permits,
        }
        .call();
        self.core.client.eval(call).await
    }

    /// Takes every available permit at once and returns how many that was (0 if none; a
    /// negative count is left alone).
    pub async fn drain_permits(&self) -> Result<i64> {
        let keys = self.core.keys()?;
        let call = scripts::DrainPermits {
            permits: &keys.permits,
        }
        .call();
        self.core.client.eval(call).await
    }

    /// Returns `n` permits without a permit object (for permits taken with
    /// [`SemaphorePermit::forget`], or by another process). On a semaphore that does not exist
    /// yet this creates `n` permits. `n = 0` is [`Error::InvalidArgument`].
    pub async fn release(&self, n: u64) -> Result<()> {
        let n = permit_count(n, "a release")?;
        self.core.client.eval::<i64>(self.core.add_call(n)?).await?;
        Ok(())
    }

    /// Takes one permit, waiting as long as it takes.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future never leaks or duplicates a permit: an acquire on the wire gives
    /// its permits back when it completes, or is forbidden from taking any if Redis has not
    /// run it yet (that give-back is retried until Redis confirms it, as a release is); the
    /// queue place and subscription are released at once.
    pub async fn acquire(&self) -> Result<SemaphorePermit> {
        Acquire::acquire(self).await
    }

    /// Takes `n` permits at once, waiting as long as it takes; they may be returned in several
    /// releases. `n = 0` or above `i64::MAX` is [`Error::InvalidArgument`].
    ///
    /// # Cancel safety
    ///
    /// As for [`acquire`](Self::acquire).
    pub async fn acquire_many(&self, n: u64) -> Result<SemaphorePermit> {
        granted(
            self.acquire_many_with(n, Wait::Forever, Lease::Watchdog)
                .await?,
        )
    }

    /// Takes one permit if one is available now.
    ///
    /// # Cancel safety
    ///
    /// As for [`acquire`](Self::acquire).
    pub async fn try_acquire(&self) -> Result<Option<SemaphorePermit>> {
        Acquire::try_acquire(self).await
    }

    /// Takes `n` permits if they are available now.
    ///
    /// # Cancel safety
    ///
    /// As for [`acquire`](Self::acquire).
    pub async fn try_acquire_many(&self, n: u64) -> Result<Option<SemaphorePermit>> {
        self.acquire_many_with(n, Wait::No, Lease::Watchdog).await
    }

    /// Takes one permit, waiting at most `wait`.
    ///
    /// # Cancel safety
    ///
    /// As for [`acquire`](Self::acquire).
    pub async fn try_acquire_for(&self, wait: Duration) -> Result<Option<SemaphorePermit>> {
        Acquire::try_acquire_for(self, wait).await
    }

    /// Takes `n` permits at once, waiting at most `wait`.
    ///
    /// # Cancel safety
    ///
    /// As for [`acquire`](Self::acquire).
    pub async fn try_acquire_many_for(
        &self,
        n: u64,
        wait: Duration,
    ) -> Result<Option<SemaphorePermit>> {
        self.acquire_many_with(n, Wait::For(wait), Lease::Watchdog)
            .await
    }

    /// The one acquire of the semaphore (one permit: [`Acquire::acquire_with`]): `n` permits,
    /// waiting as `wait` says. Permits have no lease: [`Lease::Watchdog`] means none, and a
    /// fixed lease is [`Error::InvalidArgument`].
    async fn acquire_many_with(
        &self,
        n: u64,
        wait: Wait,
        lease: Lease,
    ) -> Result<Option<SemaphorePermit>> {
        let count = permit_count(n, "an acquire")?;
        if let Lease::Fixed(lease) = lease {
            return Err(Error::invalid(format!(
                "a semaphore's permits have no lease, found a fixed lease of {lease:?} \
                 (an expirable semaphore's permits have one)"
            )));
        }
        let core = &self.core;
        let keys = core.keys()?;
        let deadline = wait.deadline()?;
        // One local queue per size: a waiter for many permits must not hold back waiters for
        // fewer while enough for them are free.
        let queue = keys.queues.of(&n.to_string());
        // The client's own channel: a release wakes one client, not every client's head.
        let spec = WaitSpec {
            kind: "semaphore",
            queue: &queue,
            channel: &keys.channel,
            deadline,
            may_reenter: false,
            shared: false,
            expect_busy: false,
        };
        let granted = waiters::acquire(core, spec, wait, |turn| self.attempt(count, turn))
            .instrument(tracing::debug_span!("redisync.semaphore", name = %core.name, permits = n))
            .await?;
        let Some(attempt) = granted else {
            return Ok(None);
        };
        let record = keys.attempt_records.of(&attempt);
        let release = scripts::Release {
            permits: &keys.permits,
            attempt_record: &record,
            generation: &keys.generation,
            waiters: &keys.waiters,
            n: count,
        }
        .call();
        let forget = scripts::Forget {
            attempt_record: &record,
        }
        .call();
        Ok(Some(SemaphorePermit {
            name: core.name.clone(),
            count: n,
            hold: Hold::unleased(core.client.clone(), release),
            forget,
            client: core.client.clone(),
        }))
    }

    /// One acquire request for `n` permits, doing `turn` with the client's place among the
    /// waiters. If its caller goes away, whatever it took is given back, and the client is
    /// withdrawn from the waiters if no task of it waits any more.
    fn attempt(
        &self,
        n: i64,
        turn: Turn,
    ) -> impl std::future::Future<Output = Result<Attempt<String>>> + Send + 'static {
        let core = self.core.clone();
        let attempt = core.client.unique_id();
        let request = core.keys().map(|keys| {
            let record = keys.attempt_records.of(&attempt);
            let call = scripts::Acquire {
                permits: &keys.permits,
                attempt_record: &record,
                generation: &keys.generation,
                waiters: &keys.waiters,
                n,
                channel: &turn.channel,
                requeue: turn.requeue,
                registry_ms: waiters::registry_ttl(&core.client),
            }
            .call();
            let (undo_core, registers) = (core.clone(), turn.registers());
            core.client
                .eval_undoable(call, move |outcome: LateOutcome<i64>| async move {
                    undo_core.undo_attempt(outcome, record, n, registers);
                })
        });
        let registration = self.core.registration.clone();
        async move {
            Ok(match request?.await? {
                1 => {
                    turn.acquired(&registration);
                    Attempt::Acquired(attempt)
                }
                // The client stays registered, and the next of its tasks asking for as many
                // permits cannot get in before permits come back, which wakes a client.
                2 => {
                    turn.acquired(&registration);
                    Attempt::AcquiredStillWaiting(attempt)
                }
                0 | -1 => Attempt::Busy {
                    retry_in: Some(RECHECK),
                },
                _ => return Err(Error::WrongType),
            })
        }
    }
}

#[async_trait]
impl DistributedPrimitive for Semaphore {
    fn name(&self) -> &str {
        &self.core.name
    }

    /// Removes the semaphore's permits count and ends its generation; waiters then find none
    /// until it is set again, and permits still out are given back neither to it nor to a
    /// semaphore later created under the same name.
    async fn delete(&self) -> Result<bool> {
        let keys = self.core.keys()?;
        let call = scripts::Delete {
            permits: &keys.permits,
            generation: &keys.generation,
        }
        .call();
        Ok(self.core.client.eval::<i64>(call).await? == 1)
    }
}

/// Permits taken from a [`Semaphore`].
///
/// Dropping it gives the permits back in the background, without blocking;
/// [`release`](Self::release) does so and waits for Redis; [`forget`](Self::forget) keeps them
/// taken. `'static` and `Send`, so it can move across tasks.
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
/// let pool = client.semaphore("db-connections");
/// pool.try_set_permits(3).await?;
///
/// let permit: SemaphorePermit = pool.acquire_many(2).await?;
/// assert_eq!(permit.count(), 2);
/// assert_eq!(pool.available_permits().await?, 1);
/// assert!(!permit.is_lost()); // permits have no lease: nothing takes them away
/// permit.release().await?;
/// assert_eq!(pool.available_permits().await?, 3);
///
/// let kept = pool.acquire().await?;
/// kept.forget(); // stays taken after the permit is gone
/// assert_eq!(pool.available_permits().await?, 2);
/// pool.release(1).await?; // given back by hand
/// assert_eq!(pool.available_permits().await?, 3);
/// # Ok(())
/// # }
/// ```
#[must_use = "dropping the permit gives it back at once"]
#[derive(Debug)]
pub struct SemaphorePermit {
    name: String,
    count: u64,
    hold: Hold,
    forget: ScriptCall,
    client: Client,
}

impl SemaphorePermit {
    /// How many permits this holds.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The name of the semaphore.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Always `false`: permits have no lease, so nothing takes them away from their holder
    /// (they go back only by a release, or with a `delete` of the semaphore, which the permit
    /// does not hear of). For [`Held`](redisync_core::Held) code that watches for losses.
    pub fn is_lost(&self) -> bool {
        false
    }

    /// Never completes: permits have no lease to lose (see [`is_lost`](Self::is_lost)). For
    /// [`Held`](redisync_core::Held) code that stops its work when a hold is lost.
    pub fn lost(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        std::future::pending()
    }

    /// Gives the permits back.
    ///
    /// # Release guarantee
    ///
    /// Permits have no lease, so nothing else would ever return them; their release is
    /// never given up. When Redis cannot confirm it within the command timeout (an outage
    /// of any length, a `BUSY` server behind another client's slow script, a `READONLY`
    /// primary during a failover, a dropped connection), the call returns that error
    /// ([`Error::Redis`] or [`Error::Timeout`]) and the release is sent again in the
    /// background, with backoff up to one second, until Redis confirms it; it is applied once
    /// however often it is sent. Dropping the permit, or this future, does the same. At
    /// [`Client::shutdown`] a pending release gets one last attempt; one that fails then is
    /// counted in [`Stats::unconfirmed_releases`](redisync_core::Stats::unconfirmed_releases)
    /// and logged. So permits are lost only if the process dies (or shuts down) before Redis
    /// is reachable again.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped before it completes, the release still runs in the background
    /// with the same guarantee.
    pub async fn release(self) -> Result<()> {
        let span = tracing::debug_span!("redisync.semaphore.release", name = %self.name, permits = self.count);
        self.hold.release(span).await.map(|_| ())
    }

    /// Keeps the permits taken: nothing is given back. Return them later with
    /// [`Semaphore::release`].
    pub fn forget(self) {
        self.hold.forget();
        // Drops the permit's record in the background; the permits stay taken.
        self.client.spawn_idempotent(self.forget);
    }
}

impl Acquire for Semaphore {
    type Guard = SemaphorePermit;

    /// Takes one permit, waiting as `wait` says: the one acquire of the semaphore, which
    /// [`acquire`](Semaphore::acquire), [`try_acquire_many_for`](Semaphore::try_acquire_many_for)
    /// and the others are shorthands for. Permits have no lease, so [`Lease::Watchdog`] means
    /// "no lease" and [`Lease::Fixed`] is [`Error::InvalidArgument`] (use an
    /// [`ExpirableSemaphore`](crate::ExpirableSemaphore) for leased permits).
    ///
    /// # Cancel safety
    ///
    /// As for [`Semaphore::acquire`].
    async fn acquire_with(&self, wait: Wait, lease: Lease) -> Result<Option<SemaphorePermit>> {
        self.acquire_many_with(1, wait, lease).await
    }
}

redisync_core::toolkit::impl_held!(SemaphorePermit {
    fencing_token: |_permit| None,
    release: release,
});
