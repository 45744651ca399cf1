//! What both lock kinds share: their Redis names, their owner, and the acquire, status and
//! force-unlock operations. A [`ReentrantLock`](crate::ReentrantLock) and a
//! [`FairLock`](crate::FairLock) differ only in whether a waiting queue is passed to the
//! scripts.

use redisync_core::toolkit::{KeyFamily, Toolkit};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use redisync_core::toolkit::duration::{lease_millis, redis_millis, wait_deadline};
use redisync_core::toolkit::{
    registration_for, Attempt, Client, ClientRegistration, Error, Hold, IntOrList, LateOutcome,
    OnGrant, ReleasesInFlight, Result, ScriptCall, WaitSpec, Waitlist, Withdraw,
};
use tracing::Instrument;

use crate::guard::LockGuard;
use crate::handover::{hand_over_lease, Claimed, Offers, OFFER_STANDS};
use crate::layout::{FairLockLayout, LockLayout};
use crate::scripts::{self, decode_acquire_all, decode_status, AcquireReply};

/// A fair waiter that misses this many heartbeats in a row loses its place...
pub(crate) const HEARTBEATS_PER_PLACE: u32 = 3;

/// ...unless that is shorter than a heartbeat plus the command timeout: a waiter whose
/// heartbeat request Redis is slow to answer (but within the timeout) is not dead.
pub(crate) fn place_lifetime(heartbeat: Duration, command_timeout: Duration) -> Duration {
    heartbeat
        .saturating_mul(HEARTBEATS_PER_PLACE)
        .max(heartbeat.saturating_add(command_timeout))
}

/// The Redis names of one lock, made once per client, kind and name, and shared by every
/// handle of them (a waiting task's handle then costs a few words, not a copy of every key).
#[derive(Debug)]
pub(crate) struct LockKeys {
    pub(crate) hash: String,
    pub(crate) fence: String,
    attempt_records: KeyFamily,
    /// Where its waiters wait.
    pub(crate) waiting: Waiting,
}

/// How the waiters of a lock wait, by kind.
#[derive(Debug)]
pub(crate) enum Waiting {
    /// The plain lock: each client registers once, however many of its tasks wait (layout in
    /// `lua/wake_prelude.lua`), and a release wakes the client that has waited longest on its
    /// own channel.
    Clients {
        /// The registry of waiting clients.
        waiters: String,
        /// The hand-over offers of waiting clients (see `lua/lock_hand_over_prelude.lua`).
        offers: String,
        /// This client's wake-up channel for the lock.
        channel: String,
    },
    /// The fair lock: every waiting task has a place in Redis's queue (layout in
    /// `lua/fair_lock_prelude.lua`) and a channel of its own, by its waiter id.
    Queue {
        queue: String,
        deadlines: String,
        wake_channels: KeyFamily,
    },
}

impl LockKeys {
    /// The record of acquire attempt `attempt`: written when its hold is given back on a path
    /// where the acquire's outcome was unknown.
    pub(crate) fn attempt_record(&self, attempt: &str) -> String {
        self.attempt_records.of(attempt)
    }
}

/// Which kind of lock a core belongs to.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind {
    Reentrant,
    /// First come, first served; each waiter proves it is alive every `heartbeat`.
    Fair {
        heartbeat: Duration,
    },
}

/// Everything a handle and its guards share.
#[derive(Debug)]
pub(crate) struct LockCore {
    pub(crate) client: Client,
    names: Arc<LockNames>,
    pub(crate) owner: String,
    kind: Kind,
    /// Guards of this owner alive in this process: when non-zero, an acquire may be a
    /// re-entry and must not queue behind local waiters.
    pub(crate) live_guards: Arc<AtomicUsize>,
}

/// A lock's name and keys (or why the name is refused), and what the client knows of it.
#[derive(Debug)]
struct LockNames {
    name: String,
    keys: Result<LockKeys>,
    /// Whether this client may be registered as waiting (plain lock): the client's
    /// knowledge, shared by all its tasks waiting for the lock.
    registration: Arc<ClientRegistration>,
    /// When the latest hold granted while the client stayed registered for its other waiting
    /// tasks (`Attempt::AcquiredStillWaiting`) lapses unless renewed (`None`: beyond what an
    /// `Instant` holds): the task handed the turn asks Redis by then at the latest, since a
    /// hold that lapses publishes nothing.
    handed_over_hold_lapses: Mutex<Option<Instant>>,
    /// Whether the client's latest fair acquire found the lock taken (its latest attempt was
    /// refused, or granted only after the call waited): its next call then subscribes before
    /// it asks, sparing a request per acquisition under contention (see
    /// `WaitSpec::expect_busy`). A call granted at its first ask clears it. Known while any
    /// handle of the lock in this client lives (a new handle with none alive starts afresh,
    /// asking first).
    found_busy: AtomicBool,
    /// The hand-over offers of this client's waiting tasks that no task took yet.
    offers: Offers,
    /// The releases and give-backs of this client's handles of the lock still on their way
    /// to Redis (one count per client and lock, not per handle: a handle costs no more).
    releases: Arc<ReleasesInFlight>,
}

impl LockCore {
    pub(crate) fn new(client: &Client, name: String, kind: Kind) -> Self {
        let names = match client.key_space(&name) {
            Ok(space) => {
                let keys = match kind {
                    Kind::Reentrant => {
                        let layout = LockLayout::new(&space);
                        LockKeys {
                            hash: layout.hash,
                            fence: layout.fence,
                            attempt_records: layout.attempt_records,
                            waiting: Waiting::Clients {
                                waiters: layout.waiters,
                                offers: layout.offers,
                                channel: layout.wake_channels.of(client.id()),
                            },
                        }
                    }
                    Kind::Fair { .. } => {
                        let layout = FairLockLayout::new(&space);
                        LockKeys {
                            hash: layout.hash,
                            fence: layout.fence,
                            attempt_records: layout.attempt_records,
                            waiting: Waiting::Queue {
                                queue: layout.queue,
                                deadlines: layout.deadlines,
                                wake_channels: layout.wake_channels,
                            },
                        }
                    }
                };
                let registration = match kind {
                    Kind::Reentrant => ClientRegistration::of(client, &keys.hash),
                    // Its waiters each have their place in Redis, never the client.
                    Kind::Fair { .. } => Arc::default(),
                };
                // Keyed by the lock's hash, which differs by kind and name.
                client.local_cell_with(&keys.hash.clone(), || LockNames {
                    name,
                    keys: Ok(keys),
                    registration,
                    handed_over_hold_lapses: Mutex::default(),
                    found_busy: AtomicBool::new(false),
                    offers: Offers::default(),
                    releases: ReleasesInFlight::new(),
                })
            }
            Err(err) => Arc::new(LockNames {
                name,
                keys: Err(err),
                registration: Arc::default(),
                handed_over_hold_lapses: Mutex::default(),
                found_busy: AtomicBool::new(false),
                offers: Offers::default(),
                releases: ReleasesInFlight::new(),
            }),
        };
        LockCore {
            owner: client.unique_id(),
            client: client.clone(),
            names,
            kind,
            live_guards: Arc::default(),
        }
    }

    /// The lock's name, as the user gave it.
    pub(crate) fn name(&self) -> &str {
        &self.names.name
    }

    /// The same lock and owner, as another kind (a fair lock with another heartbeat).
    pub(crate) fn with_kind(&self, kind: Kind) -> Self {
        let mut core = LockCore::new(&self.client, self.name().to_owned(), kind);
        core.owner = self.owner.clone();
        core.live_guards = self.live_guards.clone();
        core
    }

    pub(crate) fn keys(&self) -> Result<&LockKeys> {
        self.names.keys.as_ref().map_err(Clone::clone)
    }

    /// The script call that gives back the hold of acquire attempt `attempt` (and for the
    /// fair lock, its place in the queue), remembering the outcome for `remember`: only a
    /// give-back of an acquire whose outcome is unknown needs a record
    /// ([`Duration::ZERO`]: none; see `lua/lock_release.lua`).
    pub(crate) fn release_call(&self, attempt: &str, remember: Duration) -> Result<ScriptCall> {
        let keys = self.keys()?;
        // Without a record to keep, the call leaves the record's key off (see the scripts'
        // declarations): no need to name it.
        let (record, remember) = match remember.is_zero() {
            true => (String::new(), 0),
            false => (keys.attempt_record(attempt), redis_millis(remember)),
        };
        let call = match &keys.waiting {
            Waiting::Clients {
                waiters, offers, ..
            } => scripts::Release {
                hash: &keys.hash,
                attempt_record: &record,
                waiters,
                offers,
                fence: &keys.fence,
                attempt,
                remember_ms: remember,
            }
            .call(),
            Waiting::Queue {
                queue,
                deadlines,
                wake_channels,
            } => scripts::FairRelease {
                hash: &keys.hash,
                attempt_record: &record,
                queue,
                deadlines,
                waiter: attempt,
                wake_prefix: wake_channels.prefix(),
                remember_ms: remember,
            }
            .call(),
        };
        Ok(call.counted_in(&self.names.releases))
    }

    /// The releases of this client's handles of the lock still on their way to Redis, if
    /// any: an acquire waits for them (see [`ReleasesInFlight`]) before it sends anything,
    /// for at most a command timeout, or it would find the hold being released and re-enter
    /// it or queue behind it.
    pub(crate) fn unsettled_releases(&self) -> Option<&ReleasesInFlight> {
        (!self.names.releases.is_settled()).then_some(&*self.names.releases)
    }

    /// Waits for [`unsettled_releases`](Self::unsettled_releases), for at most a command
    /// timeout. Called inside the boxed part of an acquire, and boxed itself, since it is
    /// seldom needed: a waiting task stays as small as it was.
    async fn settle_releases(&self) {
        if let Some(releases) = self.unsettled_releases() {
            Box::pin(releases.settled(self.client.command_timeout())).await;
        }
    }

    /// How long a give-back is remembered: long enough for its retries.
    pub(crate) fn retry_window(&self) -> Duration {
        self.client.command_timeout().saturating_mul(2)
    }

    /// The lock's remaining lease (None when free) and this owner's hold count.
    pub(crate) async fn status(&self) -> Result<(Option<Duration>, u32)> {
        let keys = self.keys()?;
        let call = scripts::Status {
            hash: &keys.hash,
            owner: &self.owner,
        }
        .call();
        let reply: Vec<i64> = self.client.eval(call).await?;
        decode_status(&reply)
    }

    pub(crate) async fn is_locked(&self) -> Result<bool> {
        Ok(self.status().await?.0.is_some())
    }

    pub(crate) async fn hold_count(&self) -> Result<u32> {
        Ok(self.status().await?.1)
    }

    pub(crate) async fn remaining_lease(&self) -> Result<Option<Duration>> {
        Ok(self.status().await?.0)
    }

    pub(crate) async fn force_unlock(&self) -> Result<bool> {
        let keys = self.keys()?;
        let lost_notices = &self.client.lost_notice_prefix();
        let call = match &keys.waiting {
            Waiting::Clients { waiters, .. } => scripts::ForceUnlock {
                hash: &keys.hash,
                waiters,
                lost_notices,
            }
            .call(),
            Waiting::Queue {
                queue,
                deadlines,
                wake_channels,
            } => scripts::FairForceUnlock {
                hash: &keys.hash,
                queue,
                deadlines,
                wake_prefix: wake_channels.prefix(),
                lost_notices,
            }
            .call(),
        };
        let freed: i64 = self.client.eval(call).await?;
        Ok(freed == 1)
    }

    /// Acquires with a fixed `lease` (or the watchdog's), waiting at most `wait` (for ever
    /// when `None`).
    #[allow(clippy::manual_async_fn)]
    pub(crate) fn acquire(
        self: &Arc<Self>,
        lease: Option<Duration>,
        wait: Option<Duration>,
    ) -> impl std::future::Future<Output = Result<Option<LockGuard>>> + '_ {
        async move {
            self.keys()?;
            let lease_for = lease.unwrap_or_else(|| self.client.watchdog_timeout());
            lease_millis(lease_for)?;
            let deadline = wait.map(wait_deadline).transpose()?;
            self.client.check_running()?;
            // Boxed, span included: a waiting task's state is then one allocation of the size
            // it needs, and the future of `lock()` stays small (a task's memory grows in steps
            // of 128 bytes).
            let granted = match self.kind {
                Kind::Reentrant => {
                    Box::pin(
                        self.acquire_registered(lease_for, lease.is_none(), wait, deadline)
                            .instrument(tracing::debug_span!("redisync.lock", name = %self.name())),
                    )
                    .await?
                }
                Kind::Fair { heartbeat } => {
                    Box::pin(
                        self.acquire_in_turn(lease_for, wait, deadline, heartbeat)
                            .instrument(
                                tracing::debug_span!("redisync.fair_lock", name = %self.name()),
                            ),
                    )
                    .await?
                }
            };
            let Some(granted) = granted else {
                return Ok(None);
            };
            // The guard counts the hold among the owner's live guards before the grant stops.
            let lease = match granted.handed_over {
                Some(short) => GuardLease::HandedOver(short),
                None => lease.map_or(GuardLease::Watchdog, GuardLease::Fixed),
            };
            self.guard(&granted.attempt, granted.token, granted.sent_at, lease)
                .map(Some)
        }
    }

    /// The guard of a hold granted to `attempt` by a request sent at `sent_at`, with `lease`.
    fn guard(
        self: &Arc<Self>,
        attempt: &str,
        token: u64,
        sent_at: Instant,
        lease: GuardLease,
    ) -> Result<LockGuard> {
        let keys = self.keys()?;
        let hold = scripts::RenewedHold {
            hash: &keys.hash,
            owner: &self.owner,
            token,
            attempt,
        };
        let lease = match lease {
            GuardLease::Fixed(lease) => self.client.fixed_lease(sent_at, lease),
            GuardLease::Watchdog => {
                self.client
                    .watch_lease(&scripts::RENEW, hold.keys(), hold.args(), sent_at)
            }
            GuardLease::HandedOver(short) => self.client.watch_short_lease(
                &scripts::RENEW,
                hold.keys(),
                hold.args(),
                sent_at,
                short,
            ),
        };
        // The acquire was answered, so no late acquire of this attempt exists to refuse, and
        // the guard judges a repeat itself (see `LockGuard::unlock`): no record is needed.
        let release = self.release_call(attempt, Duration::ZERO)?;
        let hold = Hold::new(self.client.clone(), release, lease);
        Ok(LockGuard::new(
            self.clone(),
            token,
            attempt.to_owned(),
            hold,
        ))
    }

    /// Acquires every lock of `cores` or none, without waiting, in one request: they must be
    /// distinct reentrant locks of one client. With a fixed `lease`, or the watchdog's.
    pub(crate) async fn acquire_all(
        cores: &[Arc<LockCore>],
        lease: Option<Duration>,
    ) -> Result<Option<Vec<LockGuard>>> {
        let Some(first) = cores.first() else {
            return Err(Error::invalid("acquiring all of no locks"));
        };
        let client = &first.client;
        let lease_for = lease.unwrap_or_else(|| client.watchdog_timeout());
        lease_millis(lease_for)?;
        // One command timeout for them all.
        let settling = Instant::now();
        for core in cores {
            if let Some(releases) = core.unsettled_releases() {
                let left = client.command_timeout().saturating_sub(settling.elapsed());
                releases.settled(left).await;
            }
        }
        let attempt = client.unique_id();
        let mut hashes = std::collections::HashSet::new();
        let mut locks = Vec::with_capacity(cores.len());
        for core in cores {
            let keys = core.keys()?;
            if core.client.id() != client.id() {
                return Err(Error::invalid(
                    "locks acquired together must all use the same client",
                ));
            }
            let Waiting::Clients { waiters, .. } = &keys.waiting else {
                return Err(Error::invalid("fair locks cannot be acquired together"));
            };
            if !hashes.insert(keys.hash.as_str()) {
                return Err(Error::invalid(format!(
                    "lock {:?} appears twice among locks acquired together",
                    core.name()
                )));
            }
            locks.push(scripts::OneOfAll {
                hash: &keys.hash,
                fence: &keys.fence,
                attempt_record: keys.attempt_record(&attempt),
                waiters,
                owner: &core.owner,
            });
        }
        let call = cores.iter().fold(
            scripts::acquire_all(&locks, redis_millis(lease_for), &attempt),
            |call, core| call.counted_in(&core.names.releases),
        );
        // Remembered past the lease, so a grant that could still run is refused.
        let give_back = cores
            .iter()
            .map(|core| core.release_call(&attempt, lease_for.saturating_add(core.retry_window())))
            .collect::<Result<Vec<_>>>()?;
        let undo_client = client.clone();
        let count = cores.len();
        let sent_at = Instant::now();
        let retry = client.retry_for_lease(sent_at, Some(lease_for));
        let reply: Vec<i64> = client
            .eval_undoable(call, move |outcome: LateOutcome<Vec<i64>>| async move {
                let granted = match &outcome {
                    LateOutcome::Replied(reply) => {
                        matches!(decode_acquire_all(reply, count), Ok(Some(_)))
                    }
                    LateOutcome::Unknown => true,
                    LateOutcome::Refused => false,
                };
                if granted {
                    for release in give_back {
                        undo_client.spawn_release(release, retry);
                    }
                }
            })
            .instrument(tracing::debug_span!("redisync.lock.all", locks = count))
            .await?;
        let Some(tokens) = decode_acquire_all(&reply, count)? else {
            return Ok(None);
        };
        client.record_acquires("lock", first.keys()?.hash.as_str(), count as u64);
        let mut guards = Vec::with_capacity(count);
        for (core, token) in cores.iter().zip(tokens) {
            let lease = lease.map_or(GuardLease::Watchdog, GuardLease::Fixed);
            guards.push(core.guard(&attempt, token, sent_at, lease)?);
        }
        Ok(Some(guards))
    }

    /// The fair lock's wait: every waiter is in the queue in Redis from its first attempt on,
    /// listens on its own channel, and re-attempts at least every `heartbeat`, which keeps its
    /// place. Waiters do not queue locally: the order is Redis's.
    async fn acquire_in_turn(
        self: &Arc<Self>,
        lease: Duration,
        wait: Option<Duration>,
        deadline: Option<Instant>,
        heartbeat: Duration,
    ) -> Result<Option<Granted>> {
        self.settle_releases().await;
        let Waiting::Queue { wake_channels, .. } = &self.keys()?.waiting else {
            return Err(Error::invalid("a plain lock has no waiting queue"));
        };
        lease_millis(heartbeat).map_err(|_| {
            Error::invalid(format!(
                "a fair lock's heartbeat must be within 10 ms and 2^53 ms, found {heartbeat:?}"
            ))
        })?;
        // One id for every attempt of this call: it is the waiter's place in the queue.
        let waiter = self.client.unique_id();
        let channel = wake_channels.of(&waiter);
        let queues = wait != Some(Duration::ZERO);
        let place = queues.then(|| place_lifetime(heartbeat, self.client.command_timeout()));
        let give_back = self.release_call(&waiter, lease.saturating_add(self.retry_window()))?;
        // Leaves the queue on every way out but success, including a dropped future; armed by
        // the first attempt that may queue, so a call that never reached Redis sends nothing.
        let mut leave = QueuePlace {
            client: self.client.clone(),
            give_back: None,
            outlives: lease.saturating_add(place.unwrap_or_default()),
        };
        // Each waiter waits by itself on its own channel: the queue that orders them is Redis's.
        let spec = WaitSpec {
            kind: "fair_lock",
            queue: &channel,
            channel: &channel,
            deadline,
            may_reenter: false,
            shared: true,
            // An owner that holds the lock re-enters at once: no wait first.
            expect_busy: self.live_guards.load(Ordering::Acquire) == 0
                && self.names.found_busy.load(Ordering::Relaxed),
        };
        let mut attempts = 0u32;
        let granted = self
            .client
            .acquire(spec, || {
                if queues && leave.give_back.is_none() {
                    leave.give_back = Some(give_back.clone());
                }
                let attempt = self.fair_attempt(lease, waiter.clone(), place);
                let names = self.names.clone();
                attempts += 1;
                let first = attempts == 1;
                async move {
                    let outcome = attempt.await?;
                    // Contended: this call found the lock taken, or got it only after
                    // waiting (and the next call of a task that lets go and comes back will
                    // most likely find the queue it left). Free: got it at the first ask.
                    match outcome {
                        Attempt::Busy { .. } => names.found_busy.store(true, Ordering::Relaxed),
                        _ if first => names.found_busy.store(false, Ordering::Relaxed),
                        _ => {}
                    }
                    Ok(match outcome {
                        Attempt::Busy { retry_in } => Attempt::Busy {
                            retry_in: Some(retry_in.map_or(heartbeat, |r| r.min(heartbeat))),
                        },
                        acquired => acquired,
                    })
                }
            })
            .await;
        match granted {
            Ok(Some(held)) => {
                leave.give_back = None;
                Ok(Some(held))
            }
            Ok(None) => {
                leave.now().await;
                Ok(None)
            }
            Err(err) => Err(err),
        }
    }

    /// The plain lock's wait: only the head of this client's local queue asks Redis; when it
    /// finds the lock taken, Redis registers the client as waiting, and the release that frees
    /// the lock wakes the client that has waited longest (see `lua/wake_prelude.lua`).
    // Not an `async fn`, which would keep a second copy of its arguments for the whole wait.
    fn acquire_registered(
        self: &Arc<Self>,
        lease: Duration,
        lease_is_watchdogs: bool,
        wait: Option<Duration>,
        deadline: Option<Instant>,
    ) -> impl std::future::Future<Output = Result<Option<Granted>>> + '_ {
        let registration = registration_for(&self.client, wait);
        async move {
            self.settle_releases().await;
            let keys = self.keys()?;
            let Waiting::Clients { channel, .. } = &keys.waiting else {
                return Err(Error::invalid("a fair lock waits in its queue"));
            };
            // Whether the client may be registered is the client's, not this wait's: another
            // task of it may have registered it, and this one may be the one to withdraw it.
            let withdrawal =
                Withdraw::start(self.clone(), registration, self.names.registration.clone());
            // The release that frees the lock may hand it to this wait's head (see
            // `crate::handover`), for clients that hear wake-ups. Not with replica sync: a
            // hold handed over was acknowledged by no replica, and nothing would roll it back.
            let offer = match (
                !registration.is_zero()
                    && self.client.wait_strategy() == redisync_core::WaitStrategy::PubSub
                    && !self.client.syncs_replicas(),
                lease_is_watchdogs,
            ) {
                (false, _) => Offer::Nothing,
                (true, true) => Offer::InWakeUp,
                (true, false) => Offer::KeptForIt,
            };
            let withdraw = withdrawal.withdraw();
            let spec = WaitSpec {
                kind: "lock",
                queue: &keys.hash,
                channel,
                deadline,
                may_reenter: self.live_guards.load(Ordering::Acquire) > 0,
                shared: false,
                expect_busy: false,
            };
            // The attempt closure reaches everything through `withdraw` (it is kept in every
            // waiting task: the fewer captures, the smaller).
            let waiting = self.client.acquire_in_turn(spec, |turn| {
                let core = self.clone();
                // Handed over by a grant to another task of this client, with no wake-up
                // since: only the release of that hold can let this caller in, and it will
                // wake the client when its turn comes. Unless this owner holds the lock (or
                // is being granted it): then this caller may re-enter, and asks.
                // It asks by the time that hold lapses unrenewed, which publishes nothing.
                let busy = (turn.handed_over && self.live_guards.load(Ordering::Acquire) == 0)
                    .then(|| self.names.handed_over_hold_lapses_in());
                let message = turn.message.clone().filter(|_| offer == Offer::InWakeUp);
                // A hand-over belongs to the wait whose head offered: only its head's
                // attempts take one over, never a first try (a `try_lock`, another
                // handle's barging acquire).
                let takes_over = !turn.first_try;
                withdraw.attempt(turn, move |withdraw, on_grant| {
                    // Woken by a release that handed this caller the lock: it holds it
                    // already. Taken here, where nothing is awaited before the caller has it.
                    let claimed =
                        message.and_then(|message| core.names.offers.claim(&message, &core.owner));
                    let request = match (busy, claimed) {
                        (_, Some(claimed)) => Err(core.handed_over(claimed)),
                        (Some(busy), None) => Err(Attempt::Busy {
                            retry_in: Some(busy),
                        }),
                        (None, None) => Ok(core.attempt(
                            lease,
                            core.client.unique_id(),
                            withdraw,
                            on_grant,
                            offer,
                            takes_over,
                        )),
                    };
                    async move {
                        match request {
                            Ok(request) => request.await,
                            Err(answered) => Ok(answered),
                        }
                    }
                })
            });
            waiting.await
        }
    }

    /// One acquire request of the plain lock under attempt id `attempt`, for the wait whose
    /// registration `withdraw` takes back (its `registration` is how long the client's
    /// registration as a waiter lasts if the lock is taken; zero: never register);
    /// `on_grant` says what a grant does with the client's registration; `offer`: what the
    /// attempt offers, if the lock is taken, for its wake-up (see `crate::handover`);
    /// `takes_over`: the attempt is the waiting head's, and takes over a hold handed over to
    /// an offer of its wait that no task took. If its caller goes away, whatever it got is
    /// given back.
    fn attempt(
        self: &Arc<Self>,
        lease: Duration,
        attempt: String,
        withdraw: &Withdraw<LockCore>,
        on_grant: OnGrant,
        offer: Offer,
        takes_over: bool,
    ) -> impl std::future::Future<Output = Result<Attempt<Granted>>> + Send + 'static {
        let offer = match withdraw.registration().is_zero() {
            true => Offer::Nothing,
            false => offer,
        };
        let request = self.keys().and_then(|keys| {
            let Waiting::Clients {
                waiters,
                offers: offer_key,
                channel,
            } = &keys.waiting
            else {
                return Err(Error::invalid("a fair lock waits in its queue"));
            };
            let registration = match withdraw.registration().is_zero() {
                true => 0,
                false => redis_millis(withdraw.registration()),
            };
            // A hold handed over to an earlier offer of this client's wait that no task took
            // is the waiting head's to take over (see `crate::handover`).
            let offered = match takes_over {
                true => self.names.offers.name(),
                false => String::new(),
            };
            // A lock kept for a fixed-lease task is kept no longer than that lease: a
            // designee that cannot act then stalls the others no longer than its hold would.
            let hand_over = match offer {
                Offer::Nothing => None,
                Offer::InWakeUp => Some(hand_over_lease(&self.client)),
                Offer::KeptForIt => Some(hand_over_lease(&self.client).min(lease)),
            };
            if let Some(lease) = hand_over {
                self.names.offers.offering(
                    &attempt,
                    &self.owner,
                    Instant::now(),
                    lease,
                    offer == Offer::InWakeUp,
                );
            }
            let hand_over: std::borrow::Cow<'static, str> = match hand_over {
                Some(lease) => {
                    format!("{} {}", redis_millis(lease), redis_millis(OFFER_STANDS)).into()
                }
                None => "0".into(),
            };
            let call = scripts::Acquire {
                hash: &keys.hash,
                fence: &keys.fence,
                attempt_record: &keys.attempt_record(&attempt),
                waiters,
                owner: &self.owner,
                lease_ms: redis_millis(lease),
                attempt: &attempt,
                channel,
                registration_ms: registration,
                on_grant: on_grant.as_arg(),
                offers: offer_key,
                hand_over: &hand_over,
                offered: &offered,
            }
            .call()
            .counted_in(&self.names.releases);
            Ok((call, Some((withdraw.clone(), on_grant))))
        });
        self.send_attempt(request, attempt, lease, offer)
    }

    /// The hold a release handed over in the wake-up, as granted to the task that offered.
    /// The push took the client out of the registry (its next waiting task asks at once).
    fn handed_over(&self, claimed: Claimed) -> Attempt<Granted> {
        self.names.registration.unregistered();
        Attempt::Acquired(Granted {
            attempt: claimed.attempt,
            token: claimed.token,
            sent_at: claimed.sent_at,
            handed_over: Some(claimed.lease),
            _counted: LiveCount::new(&self.live_guards),
        })
    }
}

impl Waitlist for LockCore {
    fn client(&self) -> &Client {
        &self.client
    }

    fn waiting_queue(&self) -> Option<String> {
        self.keys().ok().map(|keys| keys.hash.clone())
    }

    /// The call that takes this client out of the lock's registry of waiters.
    fn withdraw_call(&self) -> Result<ScriptCall> {
        let keys = self.keys()?;
        let Waiting::Clients {
            waiters,
            offers,
            channel,
        } = &keys.waiting
        else {
            return Err(Error::invalid("a fair lock waits in its queue"));
        };
        Ok(scripts::Withdraw {
            hash: &keys.hash,
            waiters,
            offers,
            fence: &keys.fence,
            channel,
            offered: &self.names.offers.name(),
        }
        .call())
    }
}

impl LockCore {
    /// One acquire request of the fair lock for waiter `waiter`; `place` is how long the
    /// caller's place in the queue lasts (None: never queue). If its caller goes away,
    /// whatever it got is given back.
    fn fair_attempt(
        self: &Arc<Self>,
        lease: Duration,
        waiter: String,
        place: Option<Duration>,
    ) -> impl std::future::Future<Output = Result<Attempt<Granted>>> + Send + 'static {
        let request = self.keys().and_then(|keys| {
            let Waiting::Queue {
                queue,
                deadlines,
                wake_channels,
            } = &keys.waiting
            else {
                return Err(Error::invalid("a plain lock has no waiting queue"));
            };
            let call = scripts::FairAcquire {
                hash: &keys.hash,
                fence: &keys.fence,
                attempt_record: &keys.attempt_record(&waiter),
                queue,
                deadlines,
                owner: &self.owner,
                lease_ms: redis_millis(lease),
                waiter: &waiter,
                place_ms: place.map_or(0, redis_millis),
                wake_prefix: wake_channels.prefix(),
            }
            .call()
            .counted_in(&self.names.releases);
            Ok((call, None))
        });
        self.send_attempt(request, waiter, lease, Offer::Nothing)
    }

    /// Sends an acquire `request` of attempt `attempt`, with the wait's withdrawal and what a
    /// grant does with the client's registration if it registers the client; if its caller
    /// goes away, whatever it got is given back, and a client it may have registered as
    /// waiting withdraws. `offer`: what the attempt offered a release that frees the lock.
    /// After one that offered to take the lock in its wake-up, the next task of the client to
    /// wait asks at once, making an offer of its own, rather than waiting for a wake-up that
    /// the registration kept for it (see [`Attempt::AcquiredStillWaiting`]) would bring
    /// without one.
    fn send_attempt(
        self: &Arc<Self>,
        request: Result<(ScriptCall, Option<Registering>)>,
        attempt: String,
        lease: Duration,
        offer: Offer,
    ) -> impl std::future::Future<Output = Result<Attempt<Granted>>> + Send + 'static {
        let sent_at = Instant::now();
        let offers = offer != Offer::Nothing;
        let kept =
            offer != Offer::InWakeUp && matches!(&request, Ok((_, Some((_, OnGrant::Keep)))));
        let request = request.map(|(call, withdraw)| {
            let core = self.clone();
            let abandoned = attempt.clone();
            self.client
                .eval_undoable(call, move |outcome: LateOutcome<IntOrList>| async move {
                    let acquired = matches!(
                        &outcome,
                        LateOutcome::Replied(reply)
                            if matches!(AcquireReply::decode(reply), Ok(AcquireReply::Acquired { .. }))
                    );
                    // Acquired, or unknown: give back whatever it got, or forbid the grant.
                    // Remembered past the lease, so a grant that could still run is refused.
                    // (Built only here: most attempts never need it.)
                    let may_hold = acquired || outcome == LateOutcome::Unknown;
                    let remember = lease.saturating_add(core.retry_window());
                    if let (true, Ok(give_back)) =
                        (may_hold, core.release_call(&abandoned, remember))
                    {
                        tracing::debug!("giving back an abandoned acquire");
                        let retry = core.client.retry_for_lease(sent_at, Some(lease));
                        core.client.spawn_release(give_back, retry);
                    }
                    // However it ended, refused included: a wait that ended meanwhile waits
                    // for this before it withdraws its client.
                    if let Some((withdraw, on_grant)) = withdraw {
                        withdraw.abandoned_attempt_ended(acquired, on_grant);
                    }
                })
        });
        let core = self.clone();
        async move {
            let reply = request?.await?;
            Ok(match AcquireReply::decode(&reply)? {
                // With `kept`, the client stays registered for its tasks waiting behind this
                // one: the next of them waits for the wake-up, and asks by itself at the
                // latest when this hold would lapse unrenewed.
                AcquireReply::Acquired { token } => {
                    if kept {
                        core.names.hold_handed_over(sent_at.checked_add(lease));
                    }
                    if offers {
                        core.names.offers.granted(&attempt);
                    }
                    let granted = Granted {
                        attempt,
                        token,
                        sent_at,
                        handed_over: None,
                        _counted: LiveCount::new(&core.live_guards),
                    };
                    match kept {
                        true => Attempt::AcquiredStillWaiting(granted),
                        false => Attempt::Acquired(granted),
                    }
                }
                AcquireReply::Busy { pttl } => {
                    if offers {
                        // Its offer is in Redis: a hand-over to it may come.
                        core.names.offers.confirmed(&attempt);
                    }
                    Attempt::Busy { retry_in: pttl }
                }
                // Only an attempt given back before it ran says this, and nobody awaits those.
                AcquireReply::GivenBack => Attempt::Busy { retry_in: None },
            })
        }
    }
}

impl LockNames {
    /// A hold lapsing at `lapses` unless renewed (`None`: beyond what an `Instant` holds) was
    /// granted while the client stayed registered for its other waiting tasks.
    fn hold_handed_over(&self, lapses: Option<Instant>) {
        let mut at = self
            .handed_over_hold_lapses
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *at = lapses;
    }

    /// How long until the hold of the latest hand-over lapses unless renewed (zero if it
    /// has).
    fn handed_over_hold_lapses_in(&self) -> Duration {
        let at = *self
            .handed_over_hold_lapses
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        at.map_or(Duration::ZERO, |at| {
            at.saturating_duration_since(Instant::now())
        })
    }
}

/// What a waiting head's attempt offers the release that frees the lock (see
/// `crate::handover`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Offer {
    /// Nothing: the release wakes the client, and its task asks.
    Nothing,
    /// To take the lock in its wake-up: the release grants it with a short lease and says so
    /// in the message, and the task holds it from the message; for holds the watchdog keeps,
    /// which lengthens that lease.
    InWakeUp,
    /// To have the lock kept for it: the release grants it as above, and the task's next
    /// attempt takes it over with the fixed lease it asks for, so that no first try of
    /// another client gets in on the way.
    KeptForIt,
}

/// The lease of a guard's hold.
enum GuardLease {
    /// Fixed by the caller.
    Fixed(Duration),
    /// The watchdog's.
    Watchdog,
    /// The watchdog's, after a hand-over's short lease (see `crate::handover`).
    HandedOver(Duration),
}

/// The wait whose registration an acquire request may change, and what its grant does with
/// that registration.
type Registering = (Withdraw<LockCore>, OnGrant);

/// A hold an acquire request was granted, on its way to its guard.
pub(crate) struct Granted {
    attempt: String,
    token: u64,
    sent_at: Instant,
    /// Handed over in a wake-up, with this short lease from `sent_at` (the watchdog
    /// lengthens it).
    handed_over: Option<Duration>,
    /// Counts the hold among its owner's live guards from the reply on, before its guard
    /// does: the next head of the local queue may start its turn in between, and must see
    /// that this owner holds the lock (see `LockCore::acquire_registered`).
    _counted: LiveCount,
}

/// One count in an owner's live guards, taken back on drop.
struct LiveCount(Arc<AtomicUsize>);

impl LiveCount {
    fn new(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::AcqRel);
        LiveCount(count.clone())
    }
}

impl Drop for LiveCount {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A fair waiter's place in the queue: given up on drop (in the background) unless the wait
/// succeeded.
struct QueuePlace {
    client: Client,
    /// How long after the latest attempt what it left (a hold, a place) can last by itself.
    outlives: Duration,
    /// Gives back the waiter's attempt: leaves the queue, and forbids any of its attempts
    /// still on the wire from granting or queueing again.
    give_back: Option<ScriptCall>,
}

impl QueuePlace {
    /// Leaves the queue now, so that the caller returns with its place already given up. If
    /// this is cut short or fails, the drop leaves in the background instead.
    async fn now(&mut self) {
        if let Some(call) = self.give_back.clone() {
            if self.client.eval_idempotent::<i64>(call).await.is_ok() {
                self.give_back = None;
            }
        }
    }
}

impl Drop for QueuePlace {
    fn drop(&mut self) {
        if let Some(call) = self.give_back.take() {
            // Both the hold and the place lapse by themselves: no need to retry past that.
            let retry = self
                .client
                .retry_for_lease(Instant::now(), Some(self.outlives));
            self.client.spawn_release(call, retry);
        }
    }
}
