//! The toolkit: everything a primitive crate uses, and nothing a user of the primitives needs.
//!
//! A primitive crate starts with `use redisync_core::toolkit::*;`. That brings the script
//! runner's types ([`ScriptCall`], [`LuaScript`], [`lua_script!`](crate::lua_script),
//! [`IntOrList`] for replies that are an integer on the common path), the
//! pieces of a guard ([`Hold`], [`HoldLease`]), the waiting loop's ([`WaitSpec`], [`Attempt`]),
//! cancel safety ([`Abandonable`], [`LateOutcome`]), background give-backs ([`Retry`],
//! [`Confirmed`]), key names ([`KeySpace`]) and the [`Toolkit`] trait, whose methods on
//! [`Client`] run scripts, wait, renew leases and give back in the background. They are kept
//! off `Client`'s own methods so that its documentation shows only what a user calls.

mod hold;
pub mod registry;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::FromRedisValue;

use crate::stats::Counters;
use std::sync::atomic::Ordering;

pub use crate::abandon::{Abandonable, Cleanup, LateOutcome};
pub use crate::client::Client;
pub use crate::duration;
pub use crate::duration::{CLOCK_MARGIN, MIN_LEASE};
pub use crate::error::{Error, Result};
pub use crate::in_flight::ReleasesInFlight;
pub use crate::keys::{self, KeyFamily, KeySpace};
pub use crate::primitive::{granted, Acquire, DistributedPrimitive, Held, Lease, Wait};
pub use crate::pubsub::{self, ChannelState, Subscription};
pub use crate::retry::{self, Confirmed, Retry};
pub use crate::script::{IntOrList, LuaScript, ScriptCall};
pub use crate::signal::Flag;
pub use crate::stats::Stats;
pub use crate::wait::{Attempt, Turn, WaitSpec, MAX_SLEEP, RECHECK};
pub use crate::watchdog::lease::{HoldLease, PendingFix};
pub use crate::{async_trait, impl_held, lua_script};
pub use hold::Hold;
pub use registry::{
    registration_for, ClientRegistration, OnGrant, Settle, Waitlist, Withdraw, Withdrawal,
};

mod sealed {
    /// Keeps [`Toolkit`](super::Toolkit) implemented by [`Client`](crate::Client) alone, so
    /// that methods can be added to it without breaking anyone.
    pub trait Sealed {
        /// The client the toolkit's methods work on.
        fn client(&self) -> &crate::Client;
    }

    impl Sealed for crate::Client {
        fn client(&self) -> &crate::Client {
            self
        }
    }
}

/// The methods a primitive uses on a [`Client`]: running its scripts, waiting, renewing its
/// leases and giving back in the background. Implemented by `Client` only.
pub trait Toolkit: sealed::Sealed {
    /// Which part of the deployment holds `keys`: their cluster slot on a cluster client, and
    /// `None` on a single server, where everything lives together. Scripts that touch several
    /// primitives at once (a renewal batch, a multi-lock) group them by this.
    fn shard_of(&self, keys: &KeySpace) -> Option<u16> {
        self.client().is_cluster().then(|| keys.slot())
    }

    /// The value of type `T` that every handle of this client asking with `key` shares:
    /// created (with `T::default()`) by the first, dropped after the last reference goes.
    /// Primitives keep per-client, per-name knowledge here, such as what their local waiters
    /// have already learnt from Redis.
    fn local_cell<T: Default + Send + Sync + 'static>(&self, key: &str) -> Arc<T> {
        self.client().shared().cells.get_or_init(key, T::default)
    }

    /// Like [`local_cell`](Self::local_cell), for a value made by `init` rather than by
    /// `Default`: the first handle makes it, the others share it. Primitives keep a name's key
    /// strings here, so that a thousand handles of one name hold them once. `init` runs while
    /// the client's cells are locked: it must not ask for a cell itself.
    fn local_cell_with<T: Send + Sync + 'static>(
        &self,
        key: &str,
        init: impl FnOnce() -> T,
    ) -> Arc<T> {
        self.client().shared().cells.get_or_init(key, init)
    }

    /// Counts `n` successful acquisitions in [`Stats::acquires`] (and in the metrics, for
    /// primitives of `kind` keyed `key`), for a primitive that acquires without
    /// [`acquire`](Self::acquire) (several locks in one script).
    fn record_acquires(&self, kind: &'static str, key: &str, n: u64) {
        Counters::bump(&self.client().shared().counters.acquires, n);
        self.client()
            .shared()
            .config
            .metrics
            .acquired_together(kind, key, n);
    }

    /// Counts `n` acquires that had to wait in [`Stats::contended_waits`], for a primitive
    /// whose callers wait for one another in-process before (or instead of) waiting in
    /// [`acquire`](Self::acquire) (readers queued behind the one that asks Redis for the
    /// hold they will share).
    fn record_contended_waits(&self, kind: &'static str, key: &str, n: u64) {
        Counters::bump(&self.client().shared().counters.contended_waits, n);
        self.client()
            .shared()
            .config
            .metrics
            .contended(kind, key, n);
    }

    /// How long after being sent a request abandoned by its caller may still run in Redis as
    /// far as this client waits for it (a few command timeouts). Records that must outlive
    /// such a late request (a give-back, a withdrawn mark) are kept at least this long.
    fn abandoned_request_grace(&self) -> Duration {
        self.client()
            .shared()
            .config
            .command_timeout
            .saturating_mul(crate::transport::ABANDONED_REQUEST_GRACE)
    }

    /// The key space of the primitive called `name`, or [`Error::InvalidArgument`] for a bad
    /// name. Primitive handles call this once and report the error on every call.
    fn key_space(&self, name: &str) -> Result<KeySpace> {
        keys::validate_name(name)?;
        Ok(KeySpace::new(
            &self.client().shared().config.key_prefix,
            name,
        ))
    }

    /// A new identifier unique within this client: `<client id>:<n>`. Used for owner ids and
    /// request ids.
    fn unique_id(&self) -> String {
        use std::fmt::Write as _;
        let n = self
            .client()
            .shared()
            .next_id
            .fetch_add(1, Ordering::Relaxed);
        let id = &self.client().shared().id;
        // Sized exactly: an owner id lives as long as its handle, and `format!` would leave
        // it almost twice as large.
        let digits = n.checked_ilog10().map_or(1, |d| d as usize + 1);
        let mut unique = String::with_capacity(id.len() + 1 + digits);
        let _ = write!(unique, "{id}:{n}");
        unique
    }

    /// Fails with [`Error::Shutdown`] once the client is shut down.
    fn check_running(&self) -> Result<()> {
        if self.client().is_shut_down() {
            Err(Error::Shutdown)
        } else {
            Ok(())
        }
    }

    /// Runs one script, bounded by the command timeout. The returned future owns everything it
    /// needs, so it can be moved to a background task.
    fn eval<T>(
        &self,
        call: ScriptCall,
    ) -> impl Future<Output = Result<T>> + Send + 'static + use<Self, T>
    where
        T: FromRedisValue + Send + 'static,
    {
        crate::transport::eval(self.client().shared().transport.clone(), call)
    }

    /// Runs a script whose effect must be undone if nobody is left to use it: an acquire.
    ///
    /// The caller gets the reply, or [`Error::Timeout`] after the command timeout. `undo` runs
    /// in the background whenever the caller may have lost something:
    ///
    /// * the caller stopped waiting (dropped the future, or the timeout fired) while the
    ///   request was on the wire: the request still runs to its end (bounded by the
    ///   connection's own response timeout, a few command timeouts), then `undo` learns how it
    ///   ended: [`LateOutcome::Replied`] with the reply, [`LateOutcome::Unknown`] if its outcome
    ///   stayed unknown, [`LateOutcome::Refused`] if Redis answered with an error;
    /// * the caller got an error that leaves the outcome unknown (a broken connection):
    ///   `undo(LateOutcome::Unknown)`.
    ///
    /// `undo(LateOutcome::Unknown)` must make sure the request can no longer take effect,
    /// whether or not Redis has run it yet (for an acquire: give back the hold if it was
    /// granted, forbid the grant otherwise).
    fn eval_undoable<T, U, UF>(
        &self,
        call: ScriptCall,
        undo: U,
    ) -> impl Future<Output = Result<T>> + Send + 'static + use<Self, T, U, UF>
    where
        T: FromRedisValue + Send + 'static,
        U: FnOnce(LateOutcome<T>) -> UF + Send + 'static,
        UF: Future<Output = ()> + Send + 'static,
    {
        let shared = self.client().shared().clone();
        async move {
            if shared.shutdown.is_set() {
                return Err(Error::Shutdown);
            }
            let timeout = shared.config.command_timeout;
            let mut call = call;
            call.rollback_unreplicated = true;
            // From when the caller goes away until the undo has handed its give-back on, the
            // owner counts a release in flight (see `ReleasesInFlight`).
            let in_flight = call.in_flight.clone();
            let request = crate::transport::send::<T>(shared.transport.clone(), call);
            // The undo goes to whichever path needs it: the abandoned request's cleanup, or
            // the caller's error below, which takes it back once the request has ended.
            let mut guarded = crate::Abandonable::new(
                request,
                CountedUndo {
                    undo: move |reply: Result<T>| {
                        let outcome = match reply {
                            Ok(reply) => LateOutcome::Replied(reply),
                            Err(err) if err.is_outcome_unknown() => LateOutcome::Unknown,
                            Err(_) => LateOutcome::Refused,
                        };
                        undo(outcome)
                    },
                    in_flight,
                },
            );
            let reply = match tokio::time::timeout(timeout, &mut guarded).await {
                Ok(reply) => reply,
                // Dropping `guarded` on the way out hands the request to the background.
                Err(_) => Err(Error::Timeout),
            };
            if let Err(err) = &reply {
                if err.is_outcome_unknown() && !matches!(err, Error::Timeout) {
                    if let Some(undo) = guarded.take_cleanup() {
                        let counted = undo.in_flight.begin();
                        let undone = (undo.undo)(Err(err.clone()));
                        shared.runtime.spawn(async move {
                            undone.await;
                            drop(counted);
                        });
                    }
                }
            }
            reply
        }
    }

    /// Runs an idempotent give-back on a background task, retrying as `retry` says (see
    /// [`crate::retry`]). Never blocks. It runs even if the client shuts down meanwhile, since
    /// it only gives back what this client holds.
    fn spawn_release(&self, call: ScriptCall, retry: Retry) {
        crate::retry::spawn(
            self.client().shared().transport.clone(),
            self.client().shared().pending.clone(),
            call,
            retry,
            None,
        );
    }

    /// [`spawn_release`](Self::spawn_release) for a give-back that a later request of this
    /// client can make pointless, and harmful if it landed after that request (a waiting
    /// client's withdrawal, once the client waits again): every send asks `gate` first, and
    /// tells it when the send is over, so that the later request can wait until no send is
    /// on the wire (see [`retry::SendGate`]).
    fn spawn_release_gated(&self, call: ScriptCall, retry: Retry, gate: Arc<dyn retry::SendGate>) {
        crate::retry::spawn(
            self.client().shared().transport.clone(),
            self.client().shared().pending.clone(),
            call,
            retry,
            Some(gate),
        );
    }

    /// Runs an idempotent give-back for a caller who waits for it: the caller gets Redis's
    /// reply, or the error that kept Redis from confirming it within the command timeout. In
    /// that case, and if the caller drops the future first, the give-back goes on in the
    /// background as [`spawn_release`](Self::spawn_release) does. Errors that retrying cannot
    /// cure are returned and counted in [`Stats::unconfirmed_releases`].
    fn eval_until_done<T>(
        &self,
        call: ScriptCall,
        retry: Retry,
    ) -> impl Future<Output = Result<T>> + Send + 'static + use<Self, T>
    where
        T: FromRedisValue + Send + 'static,
    {
        crate::retry::until_done(
            self.client().shared().transport.clone(),
            self.client().shared().pending.clone(),
            call,
            retry,
        )
    }

    /// [`eval_until_done`](Self::eval_until_done), also saying whether a try before the one
    /// that answered may have run (see [`Confirmed`]): a give-back that
    /// keeps no record of itself answers a repeat as if it held nothing.
    fn eval_until_confirmed<T>(
        &self,
        call: ScriptCall,
        retry: Retry,
    ) -> impl Future<Output = Result<crate::Confirmed<T>>> + Send + 'static + use<Self, T>
    where
        T: FromRedisValue + Send + 'static,
    {
        crate::retry::until_confirmed(
            self.client().shared().transport.clone(),
            self.client().shared().pending.clone(),
            call,
            retry,
        )
    }

    /// Sends one acquire attempt. If its caller goes away while it is on the wire, or its
    /// outcome is unknown, `give_back` (an idempotent release of exactly this attempt, which
    /// must also forbid a grant Redis has not made yet) runs in the background, unless the
    /// reply shows nothing was granted (`granted` says which replies grant).
    ///
    /// This is [`eval_undoable`](Self::eval_undoable) with the undo every acquire needs.
    fn eval_acquire<T>(
        &self,
        call: ScriptCall,
        give_back: ScriptCall,
        granted: fn(&T) -> bool,
    ) -> impl Future<Output = Result<T>> + Send + 'static + use<Self, T>
    where
        T: FromRedisValue + Send + 'static,
    {
        self.eval_acquire_leased(call, give_back, granted, None)
    }

    /// [`eval_acquire`](Self::eval_acquire) for an acquire whose hold has a `lease` (`None`:
    /// no lease, like a classic permit). The give-back is retried until Redis confirms it,
    /// or, with a lease, until that lease (counted from when the acquire was sent) and the
    /// time a late request may take have passed: the hold is gone by itself then.
    fn eval_acquire_leased<T>(
        &self,
        call: ScriptCall,
        give_back: ScriptCall,
        granted: fn(&T) -> bool,
        lease: Option<Duration>,
    ) -> impl Future<Output = Result<T>> + Send + 'static + use<Self, T>
    where
        T: FromRedisValue + Send + 'static,
    {
        let client = self.client().clone();
        let retry = self.retry_for_lease(Instant::now(), lease);
        self.eval_undoable(call, move |outcome: LateOutcome<T>| async move {
            // Unknown: give back whatever it got, or forbid the grant.
            let give = match &outcome {
                LateOutcome::Replied(reply) => granted(reply),
                LateOutcome::Unknown => true,
                LateOutcome::Refused => false,
            };
            if give {
                tracing::debug!(
                    script = give_back.script().name(),
                    "giving back an abandoned acquire"
                );
                client.spawn_release(give_back, retry);
            }
        })
    }

    /// How long a give-back of a hold set at `sent_at` with `lease` (`None`: no lease) is
    /// worth retrying: until the lease and the time a late request may still take have
    /// passed.
    fn retry_for_lease(&self, sent_at: Instant, lease: Option<Duration>) -> Retry {
        match lease {
            None => Retry::UntilConfirmed,
            Some(lease) => {
                let ends = self.lease_deadline(sent_at, lease);
                Retry::UntilLeaseEnds(
                    ends.checked_add(self.abandoned_request_grace())
                        .unwrap_or(ends),
                )
            }
        }
    }

    /// When a lease of `lease` set by a request sent at `sent_at` ends at the latest as far as
    /// this client may believe (monotonic clock): its end less its margin, the fixed
    /// [`CLOCK_MARGIN`] and the client's clock drift bound's share of the lease (see
    /// [`duration::lease_margin`] and
    /// [`ClientBuilder::clock_drift_ppm`](crate::ClientBuilder::clock_drift_ppm)). For a
    /// primitive that counts the end of something Redis expires by itself. Never panics: a
    /// lease too long for the platform's clock saturates far in the future.
    fn lease_deadline(&self, sent_at: Instant, lease: Duration) -> Instant {
        crate::watchdog::lease::deadline(
            sent_at,
            lease,
            self.client().shared().config.clock_drift_ppm,
        )
    }

    /// A fixed lease of `lease`, set by a request sent at `sent_at`, never renewed: a
    /// [`HoldLease::fixed`] whose deadline (and that of any later fix) is counted with this
    /// client's clock drift bound (see [`lease_deadline`](Self::lease_deadline)).
    fn fixed_lease(&self, sent_at: Instant, lease: Duration) -> crate::HoldLease {
        crate::HoldLease::fixed_with_drift(
            sent_at,
            lease,
            self.client().shared().config.clock_drift_ppm,
        )
    }

    /// Runs a script that is safe to repeat (it remembers its request id), retrying on a broken
    /// connection or a refusal until the command timeout is spent.
    fn eval_idempotent<T>(
        &self,
        call: ScriptCall,
    ) -> impl Future<Output = Result<T>> + Send + 'static + use<Self, T>
    where
        T: FromRedisValue + Send + 'static,
    {
        crate::transport::eval_idempotent(
            self.client().shared().transport.clone(),
            call,
            crate::transport::Mode::Caller,
        )
    }

    /// [`eval_idempotent`](Self::eval_idempotent) for a call that keeps no record of itself
    /// in Redis, which answers a repeat as if it found nothing to do: the reply comes with
    /// whether a try before the one that answered may have run (see
    /// [`Confirmed`]). Nothing goes on in the background.
    fn eval_idempotent_confirmed<T>(
        &self,
        call: ScriptCall,
    ) -> impl Future<Output = Result<crate::Confirmed<T>>> + Send + 'static + use<Self, T>
    where
        T: FromRedisValue + Send + 'static,
    {
        crate::transport::eval_idempotent_confirmed(
            self.client().shared().transport.clone(),
            call,
            crate::transport::Mode::Caller,
        )
    }

    /// Runs an idempotent give-back on a background task and forgets it: the release path of
    /// a dropped guard or of a cancelled acquire that got its hold. Never blocks. Retried until
    /// Redis confirms it (see [`spawn_release`](Self::spawn_release) with
    /// [`Retry::UntilConfirmed`]); use `spawn_release` when the hold's lease bounds how long
    /// retrying is worth it.
    fn spawn_idempotent(&self, call: ScriptCall) {
        self.spawn_release(call, Retry::UntilConfirmed);
    }

    /// Registers a hold with the watchdog. `renew` follows the watchdog's calling convention
    /// (see [`crate::watchdog`]); `keys` are the hold's keys (the same number for every hold of
    /// one script) and `args` identify it; `sent_at` is when the acquiring request was sent,
    /// with the watchdog timeout as its lease. Renewal stops when the
    /// returned [`HoldLease`] is dropped. A hold registered while the client shuts
    /// down is lost at once: nothing will renew it.
    fn watch_lease(
        &self,
        renew: &'static crate::LuaScript,
        keys: Vec<String>,
        args: Vec<String>,
        sent_at: Instant,
    ) -> crate::HoldLease {
        let lease = self.client().shared().config.watchdog_timeout;
        register_hold(self.client(), (renew, keys, args), sent_at, lease, false)
    }

    /// Registers a hold with the watchdog, as [`watch_lease`](Self::watch_lease) does, whose
    /// lease in Redis was granted short on purpose: `lease` from `sent_at` at the least (at
    /// most the watchdog timeout is believed). The watchdog renews the hold (to the watchdog
    /// timeout) once half of what is left of it has passed, without waiting for its next
    /// round: for a hold that a holder that cannot act (stopped, cut off) should keep only
    /// briefly.
    fn watch_short_lease(
        &self,
        renew: &'static crate::LuaScript,
        keys: Vec<String>,
        args: Vec<String>,
        sent_at: Instant,
        lease: Duration,
    ) -> crate::HoldLease {
        let full = self.client().shared().config.watchdog_timeout;
        register_hold(
            self.client(),
            (renew, keys, args),
            sent_at,
            lease.min(full),
            true,
        )
    }

    /// For a script that takes holds from their owners (`force_unlock`, `delete`): the prefix
    /// of the owners' lost-notice channels, to which the script appends each owner's client
    /// id (the part of an owner or attempt id before its first `:`) and publishes, so that the
    /// owners learn at once (see [`watchdog`](crate::watchdog), "Lost notices"). Empty on a
    /// cluster, where a script may only publish in its own slot: the script then sends none.
    fn lost_notice_prefix(&self) -> String {
        let shared = self.client().shared();
        if shared.sharded() {
            String::new()
        } else {
            crate::watchdog::lost_notice_prefix(&shared.config.key_prefix)
        }
    }

    /// Whether tasks of this client wait in the local queue `queue` (see
    /// [`WaitSpec::queue`]). A primitive whose client is registered in Redis as waiting asks
    /// this when a waiter gives up: if it was the last, the client must withdraw, so that a
    /// wake-up meant for it is passed on rather than lost.
    fn has_local_waiters(&self, queue: &str) -> bool {
        self.client().shared().queues.has_waiters(queue)
    }

    /// Acquires a primitive: tries once, then waits as described in the [module docs](self).
    /// Runs in a `redisync.acquire` tracing span (queue, wait time, outcome) and counts a
    /// successful acquisition in [`Stats::acquires`](crate::Stats::acquires).
    ///
    /// `attempt` is called for every try; it must be one request. Returns `Ok(Some(_))` once an
    /// attempt acquires, `Ok(None)` when the deadline passes first, and the attempt's error if
    /// one fails (calls are never retried for ever).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the local queue and releases the subscription reference at
    /// once. An attempt in flight at that moment is the attempt's own business: primitives
    /// wrap it in [`Abandonable`] so that it undoes itself.
    fn acquire<'a, T, F, Fut>(
        &'a self,
        spec: WaitSpec<'a>,
        mut attempt: F,
    ) -> impl Future<Output = Result<Option<T>>> + 'a
    where
        F: FnMut() -> Fut + 'a,
        Fut: Future<Output = Result<Attempt<T>>> + 'a,
        T: 'a,
    {
        crate::wait::wait_traced(&**self.client().shared(), spec, move |_| attempt(), true)
    }

    /// [`acquire`](Self::acquire) for a primitive whose grant can keep the client registered
    /// as waiting for the tasks queued behind the caller: each call of `attempt` is told
    /// whether any are ([`Turn::others_waiting`]), and may answer
    /// [`Attempt::AcquiredStillWaiting`]; the next head's first attempt is then told whether
    /// a wake-up came since ([`Turn::handed_over`]), and may wait for one without a request.
    fn acquire_in_turn<'a, T, F, Fut>(
        &'a self,
        spec: WaitSpec<'a>,
        attempt: F,
    ) -> impl Future<Output = Result<Option<T>>> + 'a
    where
        F: FnMut(Turn) -> Fut + 'a,
        Fut: Future<Output = Result<Attempt<T>>> + 'a,
        T: 'a,
    {
        crate::wait::wait_traced(&**self.client().shared(), spec, attempt, true)
    }

    /// Waits for a condition that takes nothing (a latch to open) exactly as
    /// [`acquire`](Self::acquire) waits for a primitive, in a `redisync.wait` span; `check`
    /// plays the attempt's part, and nothing is counted in [`Stats`]. Use a
    /// `shared` spec, so that every waiter returns on the same message.
    fn wait<'a, T, F, Fut>(
        &'a self,
        spec: WaitSpec<'a>,
        mut check: F,
    ) -> impl Future<Output = Result<Option<T>>> + 'a
    where
        F: FnMut() -> Fut + 'a,
        Fut: Future<Output = Result<Attempt<T>>> + 'a,
        T: 'a,
    {
        crate::wait::wait_traced(&**self.client().shared(), spec, move |_| check(), false)
    }

    /// Takes a reference on `channel` of the client's one subscriber connection, for a
    /// primitive that must hear a channel while it *holds* something (waiting is
    /// [`Toolkit::acquire`]'s business, which subscribes by itself).
    ///
    /// The subscription is shared and reference-counted like a waiter's: `SUBSCRIBE` goes out
    /// with the first reference and `UNSUBSCRIBE` after the last is dropped. Watch
    /// [`Subscription::watcher`]: `subscribed` turns true once Redis confirms it, and
    /// `generation` moves on every message and after every reconnect (messages published
    /// while the hub was away are lost, so a holder that sees it move must re-check).
    fn subscribe(&self, channel: &str) -> Subscription {
        self.client().shared().hub.subscribe(channel)
    }
}

impl Toolkit for Client {}

/// Registers a hold (its renewal script, keys and arguments) with the client's watchdog; see
/// [`Toolkit::watch_short_lease`] for `short`. A hold registered while the client shuts down
/// is lost at once: nothing will renew it.
fn register_hold(
    client: &Client,
    (renew, keys, args): (&'static crate::LuaScript, Vec<String>, Vec<String>),
    sent_at: Instant,
    lease: Duration,
    short: bool,
) -> crate::HoldLease {
    let shared = client.shared();
    let hold = shared
        .watchdog
        .register(renew, keys, args, sent_at, lease, short);
    // Checked after registering: either the watchdog's shutdown sweep saw this hold, or this
    // check sees the shutdown.
    if shared.shutdown.is_set() {
        hold.mark_lost();
    }
    hold
}

/// An acquire's undo, counting a release of the owner in flight (if the call named the
/// owner's count) from the moment the request is abandoned until the undo is done: the undo
/// hands its give-back on, which counts by itself from then.
struct CountedUndo<U> {
    undo: U,
    in_flight: crate::in_flight::CountedIn,
}

impl<T, U, UF> crate::abandon::Cleanup<T> for CountedUndo<U>
where
    T: Send + 'static,
    U: FnOnce(T) -> UF + Send + 'static,
    UF: Future<Output = ()> + Send + 'static,
{
    fn after(
        self,
        request: futures_util::future::BoxFuture<'static, T>,
    ) -> futures_util::future::BoxFuture<'static, ()> {
        // Counted now, while the caller's drop runs, not when the background task starts.
        let counted = self.in_flight.begin();
        Box::pin(async move {
            let out = request.await;
            (self.undo)(out).await;
            drop(counted);
        })
    }
}
