//! Give-backs that must land: releases, returned permits and count-downs retried in the
//! background until Redis confirms them.
//!
//! A release whose reply never came, or that Redis refused for a while (`BUSY` behind another
//! client's slow script, `READONLY` from a demoted primary, `LOADING`, a dropped connection),
//! is not given up: a task of its own sends it again with a growing pause (up to
//! [`MAX_PAUSE`]) until one of these things happens:
//!
//! * Redis confirms it (any reply of the script counts: the scripts are idempotent, so a
//!   retry of a release that already ran answers like a repeat);
//! * the resource is known to be gone by itself: the hold's lease has ended, as far as Redis
//!   could still be counting it ([`Retry::UntilLeaseEnds`]);
//! * Redis may have forgotten the request's record, so that a repeat could be applied twice
//!   ([`Retry::WhileRemembered`]): then it is given up and counted, never sent again;
//! * a later request of the client made it pointless, for a give-back sent through a
//!   [`SendGate`] (a waiting client's withdrawal once the client waits again), which each
//!   send asks first;
//! * the client shuts down: then one last attempt, bounded by the command timeout, is made,
//!   and [`Client::shutdown`](crate::Client::shutdown) waits for it (and for every give-back
//!   handed to the background before it).
//!
//! Whatever could not be done is counted in
//! [`Stats::unconfirmed_releases`](crate::Stats::unconfirmed_releases) and logged at error
//! level with the script and the primitive's key.
//!
//! Cancelling the caller's future never cancels the retry: the first attempt itself runs
//! under [`Abandonable`](crate::Abandonable), so a dropped caller hands it to the background
//! rather than cutting it off.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::FromRedisValue;

use crate::error::{Error, Result};
use crate::in_flight::{InFlight, InFlightIn, ReleasesInFlight};
use crate::script::ScriptCall;
use crate::stats::Counters;
pub use crate::transport::Confirmed;
use crate::transport::{
    eval_background, eval_idempotent_background, eval_idempotent_background_confirmed, Transport,
};

/// The first pause between background attempts.
const FIRST_PAUSE: Duration = Duration::from_millis(50);

/// The longest pause between background attempts: once Redis is reachable again, a pending
/// give-back lands within about this long (plus the time to reconnect).
pub const MAX_PAUSE: Duration = Duration::from_secs(1);

/// How long a give-back is worth retrying.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// Nothing would ever make up for it and Redis remembers it for good (a permit without a
    /// lease, whose record never expires): retried until Redis confirms it or the client
    /// shuts down.
    UntilConfirmed,
    /// The hold frees itself in Redis by this instant at the latest (its lease, plus the time
    /// a late request may still take): retrying after it gains nothing.
    UntilLeaseEnds(Instant),
    /// Redis remembers the request (so that a repeat is not applied twice) until at least
    /// this instant, counted from the first send: a repeat sent later might be applied again,
    /// so retrying stops there and the give-back is counted as unconfirmed.
    WhileRemembered(Instant),
}

impl Retry {
    fn ended(self) -> bool {
        match self {
            Retry::UntilConfirmed => false,
            Retry::UntilLeaseEnds(at) | Retry::WhileRemembered(at) => Instant::now() >= at,
        }
    }
}

/// Whether a failed give-back may still succeed if sent again.
pub(crate) fn worth_retrying(err: &Error) -> bool {
    err.is_outcome_unknown() || err.is_retryable()
}

/// The give-backs not yet confirmed: `in_flight` from the moment one is handed to the
/// background (shutdown waits for these), `retrying` once its first attempt failed (what
/// [`LocalState::pending_releases`](crate::LocalState::pending_releases) shows).
#[derive(Debug, Default)]
pub(crate) struct Pending {
    in_flight: Arc<ReleasesInFlight>,
    retrying: AtomicUsize,
}

/// Counts one give-back as in flight for as long as it lives: in the client's count, and in
/// its owner's if the call names one (see [`ScriptCall::counted_in`]).
struct PendingGuard {
    pending: Arc<Pending>,
    retrying: bool,
    _client: InFlight,
    _owners: InFlightIn,
}

impl PendingGuard {
    fn new(pending: Arc<Pending>, call: &ScriptCall) -> Self {
        PendingGuard {
            _client: pending.in_flight.begin(),
            pending,
            retrying: false,
            _owners: call.in_flight.begin(),
        }
    }

    fn mark_retrying(&mut self) {
        if !self.retrying {
            self.retrying = true;
            self.pending.retrying.fetch_add(1, Ordering::AcqRel);
        }
    }
}

impl Drop for PendingGuard {
    fn drop(&mut self) {
        let pending = &self.pending;
        if self.retrying {
            pending.retrying.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Pending {
    /// Completes once no give-back is in flight, or after `bound`.
    pub(crate) async fn drained(&self, bound: Duration) {
        self.in_flight.settled(bound).await;
    }

    /// How many give-backs are being retried after a failed first attempt.
    pub(crate) fn len(&self) -> usize {
        self.retrying.load(Ordering::Acquire)
    }
}

/// Runs `call` once on behalf of a caller (retrying within the command timeout), and, if
/// Redis did not confirm it by then or the caller stopped waiting, goes on in the background
/// as [`spawn`] does. The caller gets the first attempt's outcome.
pub(crate) async fn until_done<T>(
    transport: Arc<Transport>,
    pending: Arc<Pending>,
    call: ScriptCall,
    retry: Retry,
) -> Result<T>
where
    T: FromRedisValue + Send + 'static,
{
    until_confirmed(transport, pending, call, retry)
        .await
        .map(|confirmed| confirmed.reply)
}

/// [`until_done`], saying whether the answer may be a repeat's.
pub(crate) async fn until_confirmed<T>(
    transport: Arc<Transport>,
    pending: Arc<Pending>,
    call: ScriptCall,
    retry: Retry,
) -> Result<Confirmed<T>>
where
    T: FromRedisValue + Send + 'static,
{
    // In flight from the start: a caller that drops this future and shuts down at once must
    // still find the give-back waited for.
    let abandoned_pending = PendingGuard::new(pending.clone(), &call);
    // These bridge the moment between the first attempt's counts ending and the retry's
    // beginning below: neither an acquire of the owner nor a shutdown may slip through it.
    let _owners = call.in_flight.begin();
    let _client = pending.in_flight.begin();
    let request = eval_idempotent_background_confirmed::<T>(transport.clone(), call.clone());
    let (abandoned_transport, abandoned_call) = (transport.clone(), call.clone());
    let reply = crate::Abandonable::new(request, move |reply: Result<Confirmed<T>>| async move {
        if let Err(err) = reply {
            retry_after(
                abandoned_transport,
                abandoned_call,
                retry,
                err,
                abandoned_pending,
                None,
            )
            .await;
        }
    })
    .await;
    if let Err(err) = &reply {
        // Counted before the caller returns, so that it already sees the give-back pending.
        let mut pending = PendingGuard::new(pending, &call);
        if worth_retrying(err) {
            pending.mark_retrying();
        }
        transport.runtime.clone().spawn(retry_after(
            transport,
            call,
            retry,
            err.clone(),
            pending,
            None,
        ));
    }
    reply
}

/// Orders the sends of a give-back that a later request of the client can make pointless,
/// and harmful if it landed after that request (a waiting client's withdrawal, once the
/// client waits again), against those requests: see
/// [`Toolkit::spawn_release_gated`](crate::toolkit::Toolkit::spawn_release_gated).
pub trait SendGate: Send + Sync + 'static {
    /// Asked before each send: `false` once the give-back is pointless, and then nothing more
    /// is sent. After `true` the send is on the wire until [`send_ended`](Self::send_ended).
    fn send_begins(&self) -> bool;
    /// The send [`send_begins`](Self::send_begins) let through is over, however it ended
    /// (answered, failed, timed out, or cut off by a shutdown or a dropped task).
    fn send_ended(&self);
}

/// One send let through by a [`SendGate`]; tells the gate when it is over.
struct GatedSend<'a>(&'a dyn SendGate);

impl<'a> GatedSend<'a> {
    /// `Some` if the send may go, `None` if the give-back is pointless now (and ends).
    fn begin(gate: &'a dyn SendGate, call: &ScriptCall) -> Option<Self> {
        if gate.send_begins() {
            return Some(GatedSend(gate));
        }
        tracing::debug!(
            script = call.script().name(),
            key = %call.first_key(),
            "a later request made the give-back pointless"
        );
        None
    }
}

impl Drop for GatedSend<'_> {
    fn drop(&mut self) {
        self.0.send_ended();
    }
}

/// Lets a send through `gate`, if there is one: `Err` if it may not go.
fn pass<'a>(
    gate: Option<&'a Arc<dyn SendGate>>,
    call: &ScriptCall,
) -> Result<Option<GatedSend<'a>>, ()> {
    match gate {
        None => Ok(None),
        Some(gate) => GatedSend::begin(gate.as_ref(), call).map(Some).ok_or(()),
    }
}

/// Sends `call` on a background task until Redis confirms it; see the module docs. With a
/// `gate`, every send asks it first (see [`SendGate`]).
pub(crate) fn spawn(
    transport: Arc<Transport>,
    pending: Arc<Pending>,
    call: ScriptCall,
    retry: Retry,
    gate: Option<Arc<dyn SendGate>>,
) {
    // In flight from now, so that a shutdown right after this call waits for it.
    let pending = PendingGuard::new(pending, &call);
    transport.runtime.clone().spawn(async move {
        if transport.shutdown.is_set() {
            retry_loop(transport, call, retry, Error::Shutdown, pending, gate).await;
            return;
        }
        let first = {
            let Ok(sending) = pass(gate.as_ref(), &call) else {
                return;
            };
            match sending {
                None => {
                    eval_idempotent_background::<redis::Value>(transport.clone(), call.clone())
                        .await
                }
                // The transport's own quick repeats would not ask the gate: each send is
                // made here.
                Some(_) => eval_background::<redis::Value>(transport.clone(), call.clone()).await,
            }
        };
        if let Err(err) = first {
            retry_after(transport, call, retry, err, pending, gate).await;
        }
    });
}

/// Goes on after a first attempt failed with `first`.
async fn retry_after(
    transport: Arc<Transport>,
    call: ScriptCall,
    retry: Retry,
    first: Error,
    mut pending: PendingGuard,
    gate: Option<Arc<dyn SendGate>>,
) {
    if !worth_retrying(&first) {
        refused(&transport, &call, &first);
        return;
    }
    pending.mark_retrying();
    retry_loop(transport, call, retry, first, pending, gate).await;
}

/// The attempts after a first one failed with `last`.
async fn retry_loop(
    transport: Arc<Transport>,
    call: ScriptCall,
    retry: Retry,
    mut last: Error,
    _pending: PendingGuard,
    gate: Option<Arc<dyn SendGate>>,
) {
    let script = call.script().name();
    let key = call.first_key().to_owned();
    let mut pause = FIRST_PAUSE;
    loop {
        if retry.ended() {
            give_up(&transport, &call, retry, &last);
            return;
        }
        if transport.shutdown.is_set() {
            break;
        }
        tracing::warn!(script, %key, error = %last, ?pause, "give-back not confirmed; retrying");
        transport
            .config
            .metrics
            .release(call.script().kind(), &key, "retried");
        tokio::select! {
            _ = transport.shutdown.wait() => break,
            _ = tokio::time::sleep(pause) => {}
        }
        pause = (pause * 2).min(MAX_PAUSE);
        if retry.ended() {
            give_up(&transport, &call, retry, &last);
            return;
        }
        let Ok(sending) = pass(gate.as_ref(), &call) else {
            return;
        };
        // An attempt cut short by shutdown is followed at once by the last one below.
        let attempt = eval_background::<redis::Value>(transport.clone(), call.clone());
        let outcome = tokio::select! {
            outcome = attempt => outcome,
            _ = transport.shutdown.wait() => break,
        };
        drop(sending);
        match outcome {
            Ok(_) => return,
            Err(err) if worth_retrying(&err) => last = err,
            Err(err) => {
                refused(&transport, &call, &err);
                return;
            }
        }
    }
    // Shutting down: one last attempt, bounded by the command timeout.
    if retry.ended() {
        give_up(&transport, &call, retry, &last);
        return;
    }
    let Ok(sending) = pass(gate.as_ref(), &call) else {
        return;
    };
    let last_attempt = eval_background::<redis::Value>(transport.clone(), call.clone()).await;
    drop(sending);
    if let Err(err) = last_attempt {
        Counters::bump(&transport.counters.unconfirmed_releases, 1);
        transport
            .config
            .metrics
            .release(call.script().kind(), &key, "unconfirmed");
        tracing::error!(
            script,
            %key,
            error = %err,
            "client shut down before Redis confirmed a give-back; it is lost"
        );
    }
}

/// The retry window is over: nothing to do once a lease ended; a give-back Redis may have
/// forgotten by now is lost.
fn give_up(transport: &Transport, call: &ScriptCall, retry: Retry, last: &Error) {
    let script = call.script().name();
    let key = call.first_key();
    match retry {
        Retry::UntilLeaseEnds(_) => {
            transport
                .config
                .metrics
                .release(call.script().kind(), key, "lapsed");
            tracing::debug!(script, %key, "the hold's lease has ended; no need to give it back");
        }
        Retry::WhileRemembered(_) | Retry::UntilConfirmed => {
            transport
                .config
                .metrics
                .release(call.script().kind(), key, "unconfirmed");
            Counters::bump(&transport.counters.unconfirmed_releases, 1);
            tracing::error!(
                script,
                %key,
                error = %last,
                "Redis could not be reached while it remembers this give-back; it is lost \
                 (sending it later could apply it twice)"
            );
        }
    }
}

/// Redis answered a give-back with an error that retrying cannot cure.
fn refused(transport: &Transport, call: &ScriptCall, err: &Error) {
    Counters::bump(&transport.counters.unconfirmed_releases, 1);
    transport
        .config
        .metrics
        .release(call.script().kind(), call.first_key(), "unconfirmed");
    tracing::error!(
        script = call.script().name(),
        key = %call.first_key(),
        error = %err,
        "Redis refused a give-back; it is lost"
    );
}
