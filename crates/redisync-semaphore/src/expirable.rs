//! [`ExpirableSemaphore`]: permits with ids and leases, which come back by themselves.

use redisync_core::toolkit::{KeyFamily, Toolkit};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redisync_core::toolkit::duration::{lease_millis, redis_millis};
use redisync_core::toolkit::{
    async_trait, granted, Acquire, Attempt, Client, DistributedPrimitive, Error, Hold, IntOrList,
    LateOutcome, Lease, Result, Retry, ScriptCall, Wait, WaitSpec,
};
use tracing::Instrument;

use crate::layout::ExpirableSemaphoreLayout;
use crate::scripts::{self, initial_count, permit_change, PermitReply};
use crate::semaphore::RECHECK;
use crate::waiters::{self, LocalWaiters, Turn, Waited};
use redisync_core::toolkit::{ClientRegistration, Waitlist};

/// The Redis names of one expirable semaphore.
#[derive(Debug)]
struct XKeys {
    permits: String,
    deadlines: String,
    /// The waiting clients (see [`waiters`]).
    waiters: String,
    /// This client's wake-up channel.
    channel: String,
    queue: String,
    permit_records: KeyFamily,
}

impl XKeys {
    fn record(&self, id: &str) -> String {
        self.permit_records.of(id)
    }
}

#[derive(Debug)]
struct XCore {
    client: Client,
    name: String,
    /// Made once per client and name, shared by every handle of it.
    keys: Result<Arc<XKeys>>,
    /// How many of this client's tasks wait on the semaphore, across its handles.
    local: Arc<LocalWaiters>,
    /// Whether this client may be registered among the semaphore's waiters.
    registration: Arc<ClientRegistration>,
}

impl XCore {
    fn keys(&self) -> Result<&XKeys> {
        self.keys.as_deref().map_err(Clone::clone)
    }

    /// The call that returns permit `id`. It keeps no record: a repeat answers as for a
    /// permit that is gone.
    fn release_call(&self, id: &str) -> Result<ScriptCall> {
        let keys = self.keys()?;
        Ok(scripts::XRelease {
            permits: &keys.permits,
            deadlines: &keys.deadlines,
            waiters: &keys.waiters,
            id,
        }
        .call())
    }

    /// Undoes an acquire attempt for permit `id` whose caller went away, given how it ended:
    /// returns the permit if it took it (or forbids it from taking one;
    /// retried as `retry` says), and withdraws the client from the waiters if the attempt may
    /// have registered it and no task of the client waits any more (the withdrawal its task
    /// made when it left may have come first).
    fn undo_attempt(
        &self,
        outcome: LateOutcome<IntOrList>,
        id: &str,
        registers: bool,
        retry: Retry,
    ) {
        let withdraws = registers && self.local.none_waiting();
        let reply = match outcome {
            LateOutcome::Replied(reply) => Some(PermitReply::decode(&reply)),
            LateOutcome::Unknown => None,
            // It took nothing and registered nothing.
            LateOutcome::Refused => return,
        };
        match reply {
            Some(Ok(PermitReply::Busy { .. })) if registers => {
                waiters::withdraw_late_registration(self)
            }
            Some(Ok(PermitReply::Busy { .. } | PermitReply::GivenBack) | Err(_)) => {}
            // Took the permit, or may have: return it (or forbid the grant).
            Some(Ok(PermitReply::Acquired)) | None => {
                let Ok(keys) = self.keys() else {
                    return;
                };
                tracing::debug!("giving back an abandoned expirable semaphore acquire");
                // A give-back record outlives any late run of the acquire, so it is refused.
                let keep = self
                    .client
                    .abandoned_request_grace()
                    .saturating_add(self.client.command_timeout());
                let give_back = scripts::XGiveBack {
                    permits: &keys.permits,
                    deadlines: &keys.deadlines,
                    attempt_record: &keys.record(id),
                    waiters: &keys.waiters,
                    id,
                    record_ms: redis_millis(keep),
                    withdraw_channel: if withdraws { &keys.channel } else { "" },
                }
                .call();
                self.client.spawn_release(give_back, retry);
            }
        }
    }
}

impl Waited for XCore {
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

impl Waitlist for XCore {
    fn client(&self) -> &Client {
        &self.client
    }

    fn withdraw_call(&self) -> Result<ScriptCall> {
        let keys = self.keys()?;
        Ok(scripts::XWithdraw {
            permits: &keys.permits,
            deadlines: &keys.deadlines,
            waiters: &keys.waiters,
            channel: &keys.channel,
        }
        .call())
    }
}

/// A distributed semaphore whose permits have ids and leases, like Redisson's
/// `RPermitExpirableSemaphore`, but whose lease-less permits cannot leak.
///
/// Create one with `client.expirable_semaphore(name)` (the `ClientExt` method of the
/// `redisync` crate) or [`ExpirableSemaphore::new`]. Each [`ExpirablePermit`] has an id and a
/// deadline kept by Redis's clock:
///
/// * [`acquire`](Self::acquire) (no lease) is renewed by the client's watchdog while the
///   permit lives, so a holder that crashes or shuts down gives its permit back within one
///   watchdog timeout; Redisson's lease-less permits leak for ever instead.
/// * [`acquire_with_lease`](Self::acquire_with_lease) permits go back to the pool by
///   themselves when the lease ends.
/// * Expired permits return to the pool lazily, when a script needs them, and a waiter wakes
///   by itself at the nearest permit deadline, even when nobody releases.
/// * [`release_by_id`](Self::release_by_id) returns `false` for an unknown or expired id; no
///   release ever returns a permit twice.
///
/// # Redis keys
///
/// | key / channel | type | content |
/// |---|---|---|
/// | `<prefix>:{<name>}:expirable-semaphore` | string | available permits (may be negative) |
/// | `<prefix>:{<name>}:expirable-semaphore:leases` | sorted set | permit id → end of its lease (server ms) |
/// | `<prefix>:{<name>}:expirable-semaphore:permit:<id>` | string | `given back`, for a few command timeouts, only where the caller of an acquire went away before its outcome was known and it had not taken the permit: the acquire can no longer take one if it runs late. Releases keep nothing |
/// | `<prefix>:{<name>}:expirable-semaphore:waiters` | sorted set | the waiting clients' channels, longest waiting first (see [wake-ups](crate#wake-ups)); expires 5 s plus two command timeouts (15 s by default) after the last one registered |
/// | `<prefix>:{<name>}:expirable-semaphore:wake:<client id>` | channel | one client's wake-up: permits were added, released or reclaimed |
///
/// Expired permits go back to the pool when an acquire finds it empty, when permits are
/// added, and when they are released or given back themselves. Nothing is kept per release:
/// what the semaphore keeps is bounded by its permits and the clients waiting.
///
/// # Round trips and commands
///
/// | operation | round trips | Redis commands run |
/// |---|---|---|
/// | uncontended acquire | 1 (4 keys, 2 arguments: a first try leaves off what only registering reads) | 5 (`EVALSHA`; `MGET`, `TIME`, `ZADD`, `DECR`) |
/// | release | 1 | 6 (`EVALSHA`; `ZSCORE`, `INCR`, `ZREM`, `ZRANGE`, `TIME`), + `ZREM` and `PUBLISH` for a client woken |
/// | acquire + release, uncontended | 2 | 11 |
/// | contended acquire | 1 + 1 after subscribing + 1 per wake-up of its client (at least one a second, and at the nearest lease end) | about 3 scripts per acquisition (the woken client's acquire, the release, the next local waiter asking), whatever the number of clients; unlike the plain semaphore's, the next local waiter asks at once, since an expired lease frees permits without a wake-up |
/// | every other call | 1 | |
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
/// let gpus = client.expirable_semaphore("gpu-slots");
/// gpus.try_set_permits(1).await?;
///
/// let slot = gpus.acquire_with_lease(Duration::from_millis(200)).await?;
/// assert!(gpus.try_acquire().await?.is_none());
/// tokio::time::sleep(Duration::from_millis(300)).await; // the lease runs out
/// assert!(slot.is_lost());
/// assert!(!gpus.release_by_id(slot.id()).await?); // it is back in the pool already
/// assert_eq!(gpus.available_permits().await?, 1);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct ExpirableSemaphore {
    core: Arc<XCore>,
}

impl ExpirableSemaphore {
    /// A handle to the expirable semaphore called `name`. Never fails; a bad name is reported
    /// as [`Error::InvalidArgument`] by every call.
    pub fn new(client: &Client, name: impl Into<String>) -> Self {
        let name = name.into();
        let keys = client.key_space(&name).map(|space| {
            let layout = ExpirableSemaphoreLayout::new(&space);
            client.local_cell_with(&layout.permits.clone(), || XKeys {
                channel: layout.wake_channels.of(client.id()),
                permits: layout.permits,
                deadlines: layout.leases,
                waiters: layout.waiters,
                queue: layout.local_queue,
                permit_records: layout.permit_records,
            })
        });
        let (local, registration) = match &keys {
            Ok(keys) => (
                client.local_cell::<LocalWaiters>(&keys.waiters),
                ClientRegistration::of(client, &keys.waiters),
            ),
            Err(_) => Default::default(),
        };
        ExpirableSemaphore {
            core: Arc::new(XCore {
                client: client.clone(),
                name,
                keys,
                local,
                registration,
            }),
        }
    }

    /// Sets the number of permits to `n`, only if the semaphore does not exist yet. Returns
    /// whether it did. `n` may be 0.
    pub async fn try_set_permits(&self, n: u64) -> Result<bool> {
        let n = initial_count(n, "a semaphore")?;
        let keys = self.core.keys()?;
        let call = scripts::XTrySetPermits {
            permits: &keys.permits,
            deadlines: &keys.deadlines,
            waiters: &keys.waiters,
            initial: n,
        }
        .call();
        Ok(self.core.client.eval::<i64>(call).await? == 1)
    }

    /// Adds `n` permits to the pool, or removes `-n` when negative (the count may go below
    /// zero). Wakes waiters when permits are added.
    pub async fn add_permits(&self, n: i64) -> Result<()> {
        let n = permit_change(n)?;
        let keys = self.core.keys()?;
        let call = scripts::XAddPermits {
            permits: &keys.permits,
            deadlines: &keys.deadlines,
            waiters: &keys.waiters,
            added: n,
        }
        .call();
        self.core.client.eval::<i64>(call).await?;
        Ok(())
    }

    /// The number of permits available now, counting permits whose lease ended (0 for a
    /// semaphore that does not exist).
    pub async fn available_permits(&self) -> Result<i64> {
        let keys = self.core.keys()?;
        let call = scripts::XAvailablePermits {
            permits: &keys.permits,
            deadlines: &keys.deadlines,
        }
        .call();
        self.core.client.eval(call).await
    }

    /// How many permits the semaphore has in all: available ones plus those leased out (a
    /// permit whose lease ended counts once, whether reclaimed yet or not). `None` for a
    /// semaphore that does not exist; 0 if permits removed with a negative
    /// [`add_permits`](Self::add_permits) outnumber the rest.
    ///
    /// ```
    /// use redisync::prelude::*;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redisync::Result<()> {
    /// # let server = redisync_test_harness::RedisServer::start();
    /// # let client = Client::connect(server.url()).await?;
    /// let semaphore = client.expirable_semaphore("encoders");
    /// assert_eq!(semaphore.total_permits().await?, None);
    /// semaphore.try_set_permits(4).await?;
    /// let permit = semaphore.acquire().await?;
    /// assert_eq!(semaphore.available_permits().await?, 3);
    /// assert_eq!(semaphore.total_permits().await?, Some(4));
    /// # permit.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn total_permits(&self) -> Result<Option<u64>> {
        let keys = self.core.keys()?;
        let call = scripts::XTotalPermits {
            permits: &keys.permits,
            deadlines: &keys.deadlines,
        }
        .call();
        let (exists, total): (i64, i64) = self.core.client.eval(call).await?;
        Ok((exists == 1).then(|| u64::try_from(total).unwrap_or(0)))
    }

    /// Takes a permit, waiting as long as it takes; its lease is renewed by the watchdog while
    /// the permit lives, so it comes back within one watchdog timeout if this process dies.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future never leaks or duplicates a permit: an acquire on the wire returns
    /// its permit when it completes, or is forbidden from taking one if Redis has not run it
    /// yet; the queue place and subscription are released at once.
    pub async fn acquire(&self) -> Result<ExpirablePermit> {
        Acquire::acquire(self).await
    }

    /// Takes a permit with a fixed lease, waiting as long as it takes; it returns to the pool
    /// by itself when the lease ends.
    ///
    /// # Cancel safety
    ///
    /// As for [`acquire`](Self::acquire).
    pub async fn acquire_with_lease(&self, lease: Duration) -> Result<ExpirablePermit> {
        granted(
            self.acquire_with(Wait::Forever, Lease::Fixed(lease))
                .await?,
        )
    }

    /// Takes a permit (renewed by the watchdog) if one is free now.
    ///
    /// # Cancel safety
    ///
    /// As for [`acquire`](Self::acquire).
    pub async fn try_acquire(&self) -> Result<Option<ExpirablePermit>> {
        Acquire::try_acquire(self).await
    }

    /// Takes a permit (renewed by the watchdog), waiting at most `wait`.
    ///
    /// # Cancel safety
    ///
    /// As for [`acquire`](Self::acquire).
    pub async fn try_acquire_for(&self, wait: Duration) -> Result<Option<ExpirablePermit>> {
        Acquire::try_acquire_for(self, wait).await
    }

    /// Takes a permit with a fixed lease, waiting at most `wait`.
    ///
    /// # Cancel safety
    ///
    /// As for [`acquire`](Self::acquire).
    pub async fn try_acquire_with_lease(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<ExpirablePermit>> {
        self.acquire_with(Wait::For(wait), Lease::Fixed(lease))
            .await
    }

    /// Returns the permit with this id to the pool. Returns `false` if the id is unknown, was
    /// already released, or its lease ended (it is back in the pool already): a permit is
    /// never returned twice.
    ///
    /// Redis keeps no record of the call. When a broken connection made the client send it
    /// again and the repeat finds the permit gone, the first send may have returned it: that
    /// is reported as `true`, as for [`ExpirablePermit::release`] (an id that was unknown
    /// anyway then reads `true` too).
    pub async fn release_by_id(&self, id: &str) -> Result<bool> {
        let call = self.core.release_call(id)?;
        let confirmed = self
            .core
            .client
            .eval_idempotent_confirmed::<i64>(call)
            .await?;
        Ok(confirmed.reply == 1 || confirmed.repeated)
    }

    /// One acquire request, doing `turn` with the client's place among the waiters; the
    /// attempt id is the permit id. If its caller goes away, the permit it may get is
    /// returned, and the client is withdrawn from the waiters if no task of it waits any more.
    fn attempt(
        &self,
        lease: Duration,
        turn: Turn,
    ) -> impl Future<Output = Result<Attempt<(String, Instant)>>> + Send + 'static {
        let core = self.core.clone();
        // Built when first polled, so that `sent_at` (which the lease is counted from) is
        // when it is sent: a registering attempt may first wait for a withdrawal on the wire.
        async move {
            let sent_at = Instant::now();
            let id = core.client.unique_id();
            let keys = core.keys()?;
            let call = scripts::XAcquire {
                permits: &keys.permits,
                deadlines: &keys.deadlines,
                attempt_record: &keys.record(&id),
                waiters: &keys.waiters,
                id: &id,
                lease_ms: redis_millis(lease),
                channel: &turn.channel,
                requeue: turn.requeue,
                registry_ms: waiters::registry_ttl(&core.client),
            }
            .call();
            let (undo_core, undo_id, registers) = (core.clone(), id.clone(), turn.registers());
            let retry = core.client.retry_for_lease(sent_at, Some(lease));
            let reply = core
                .client
                .eval_undoable(call, move |outcome: LateOutcome<IntOrList>| async move {
                    undo_core.undo_attempt(outcome, &undo_id, registers, retry);
                })
                .await?;
            Ok(match PermitReply::decode(&reply)? {
                PermitReply::Acquired => {
                    turn.acquired(&core.registration);
                    Attempt::Acquired((id, sent_at))
                }
                PermitReply::Busy { retry_in } => Attempt::Busy {
                    retry_in: Some(retry_in.map_or(RECHECK, |r| r.min(RECHECK))),
                },
                // Only an attempt given back before it ran says this, and nobody awaits those.
                PermitReply::GivenBack => Attempt::Busy { retry_in: None },
            })
        }
    }
}

#[async_trait]
impl DistributedPrimitive for ExpirableSemaphore {
    fn name(&self) -> &str {
        &self.core.name
    }

    /// Removes the pool and every leased permit; waiters then find none until it is set again,
    /// and the permits' guards find theirs gone: at once for watchdog-kept permits (the call
    /// tells their clients), at their next renewal on a cluster or for a polling client.
    async fn delete(&self) -> Result<bool> {
        let keys = self.core.keys()?;
        let call = scripts::XDelete {
            permits: &keys.permits,
            deadlines: &keys.deadlines,
            lost_notices: &self.core.client.lost_notice_prefix(),
        }
        .call();
        Ok(self.core.client.eval::<i64>(call).await? == 1)
    }
}

impl Acquire for ExpirableSemaphore {
    type Guard = ExpirablePermit;

    /// Takes a permit, waiting as `wait` says; with [`Lease::Watchdog`] the watchdog renews
    /// its lease while the permit lives, with [`Lease::Fixed`] it returns to the pool by itself
    /// when the lease ends. The one acquire of the semaphore:
    /// [`acquire`](ExpirableSemaphore::acquire),
    /// [`try_acquire_with_lease`](ExpirableSemaphore::try_acquire_with_lease) and the others
    /// are shorthands for it.
    ///
    /// # Cancel safety
    ///
    /// As for [`ExpirableSemaphore::acquire`].
    async fn acquire_with(&self, wait: Wait, lease: Lease) -> Result<Option<ExpirablePermit>> {
        let core = &self.core;
        let keys = core.keys()?;
        let fixed = lease.duration();
        let lease_for = fixed.unwrap_or_else(|| core.client.watchdog_timeout());
        lease_millis(lease_for)?;
        let deadline = wait.deadline()?;
        // The client's own channel: a release wakes one client, not every client's head.
        let spec = WaitSpec {
            kind: "expirable_semaphore",
            queue: &keys.queue,
            channel: &keys.channel,
            deadline,
            may_reenter: false,
            shared: false,
            expect_busy: false,
        };
        let granted = waiters::acquire(core, spec, wait, |turn| self.attempt(lease_for, turn))
            .instrument(tracing::debug_span!("redisync.expirable_semaphore", name = %core.name))
            .await?;
        let Some((id, sent_at)) = granted else {
            return Ok(None);
        };
        let lease = match fixed {
            Some(lease) => core.client.fixed_lease(sent_at, lease),
            None => {
                let permit = scripts::XRenewedPermit {
                    deadlines: &keys.deadlines,
                    id: &id,
                };
                core.client
                    .watch_lease(&scripts::X_RENEW, permit.keys(), permit.args(), sent_at)
            }
        };
        let release = core.release_call(&id)?;
        Ok(Some(ExpirablePermit {
            name: core.name.clone(),
            hold: Hold::new(core.client.clone(), release, lease),
            id,
        }))
    }
}

/// One permit of an [`ExpirableSemaphore`], with its id and lease.
///
/// Dropping it returns the permit in the background, without blocking; the watchdog stops at
/// once. `'static` and `Send`.
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
/// let gpus = client.expirable_semaphore("gpus");
/// gpus.try_set_permits(1).await?;
///
/// let permit: ExpirablePermit = gpus.acquire().await?; // renewed by the watchdog
/// assert_eq!(permit.name(), "gpus");
/// assert!(gpus.try_acquire().await?.is_none());
///
/// // Any process that knows the id can return the permit (an operator reclaiming it, say);
/// // its holder then cannot return it a second time.
/// let id = permit.id().to_owned();
/// assert!(gpus.release_by_id(&id).await?);
/// assert!(matches!(permit.release().await, Err(Error::NotOwner)));
/// assert_eq!(gpus.available_permits().await?, 1);
/// # Ok(())
/// # }
/// ```
#[must_use = "dropping the permit returns it at once"]
#[derive(Debug)]
pub struct ExpirablePermit {
    name: String,
    id: String,
    hold: Hold,
}

impl ExpirablePermit {
    /// The permit's id, for [`ExpirableSemaphore::release_by_id`] (from any process).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The name of the semaphore.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the client knows the permit is gone: its lease ended (fixed, or no renewal was
    /// confirmed in time), renewal found it released or reclaimed, or the client shut down.
    pub fn is_lost(&self) -> bool {
        self.hold.is_lost()
    }

    /// Completes once the permit is known to be gone. The future does not borrow the permit.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        self.hold.lost()
    }

    /// Returns the permit to the pool.
    ///
    /// # Errors
    ///
    /// [`Error::NotOwner`] if the permit was no longer held (its lease ended, or it was
    /// released by id): nothing is changed. Redis keeps no record of the release: when a
    /// broken connection made the client send it again and the repeat finds the permit gone,
    /// the first send returned it (the permit was not known lost when it left), so that is
    /// `Ok`.
    /// [`Error::Redis`] / [`Error::Timeout`] if Redis did not confirm the release within the
    /// command timeout (it goes on in the background: see below).
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
    pub async fn release(self) -> Result<()> {
        let span = tracing::debug_span!("redisync.expirable_semaphore.release", name = %self.name, id = %self.id);
        // The release keeps no record: a repeat after a lost reply finds the permit gone. The
        // permit was ours when the first try left, so that try returned it.
        let confirmed = self.hold.release_confirmed(span).await?;
        if confirmed.reply == 1 || confirmed.repeated {
            Ok(())
        } else {
            Err(Error::NotOwner)
        }
    }
}

redisync_core::toolkit::impl_held!(ExpirablePermit {
    fencing_token: |_permit| None,
    release: release,
});

#[cfg(test)]
mod tests {
    use super::*;

    /// A permit's lease is counted from when its attempt is sent, not from when the attempt
    /// was made: a registering attempt may wait for a withdrawal on the wire (up to a command
    /// timeout) between the two, and a lease counted from before would end early on the
    /// client's side.
    #[tokio::test]
    async fn an_attempt_counts_its_lease_from_when_it_is_sent() {
        let server = redisync_test_harness::RedisServer::start();
        let client = Client::connect(server.url()).await.expect("connect");
        let semaphore = ExpirableSemaphore::new(&client, "sent-at");
        assert!(semaphore.try_set_permits(1).await.expect("set permits"));
        let attempt = semaphore.attempt(Duration::from_secs(10), Turn::first_try());
        // As long as a registering attempt may wait before it is sent.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let sent_no_earlier_than = Instant::now();
        let Attempt::Acquired((id, sent_at)) = attempt.await.expect("attempt") else {
            panic!("a free permit is granted");
        };
        assert!(
            sent_at >= sent_no_earlier_than,
            "the lease was counted from {:?} before the attempt was sent",
            sent_no_earlier_than - sent_at
        );
        assert!(semaphore.release_by_id(&id).await.expect("release"));
    }
}
