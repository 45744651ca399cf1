//! The watchdog: one task per client that keeps watchdog leases alive.
//!
//! Every `watchdog_timeout / 3` it renews every registered hold, batched: one script call per
//! renewal script (and, on a cluster, per slot) carries many holds (up to [`BATCH`] each).
//! The renewal script is the
//! primitive's; core only knows its calling convention:
//!
//! * `ARGV[1]` is the lease in milliseconds, `ARGV[2]` the number `k` of keys per hold and
//!   `ARGV[3]` the number `n` of arguments per hold;
//! * `KEYS[(i-1)*k + 1 ..= i*k]` are the keys of hold `i`, and `ARGV[4 + (i-1)*n ..]` its `n`
//!   arguments (its identity: owner, token, attempt, ...);
//! * the reply is an array with one integer per hold: `1` renewed, `0` gone or not ours, and
//!   `-1 - ms` still ours but not renewed because its lease was fixed meanwhile (a renewal
//!   that raced the fixing request must not undo it), ending in `ms` milliseconds.
//!
//! A hold that comes back `1` gets a new deadline: the lease from when the call was *sent*,
//! less the lease's margin (the fixed [`CLOCK_MARGIN`](crate::CLOCK_MARGIN) plus the client's
//! clock drift bound's share of the lease, see
//! [`ClientBuilder::clock_drift_ppm`](crate::ClientBuilder::clock_drift_ppm)), so the client
//! never believes in a hold Redis, by its own clock, may already have ended. A hold that comes
//! back `0` is marked lost and dropped from the registry; one that comes back negative keeps
//! its deadline, brought forward to the fixed lease's end if that is earlier (the guard may not
//! have learnt of the fix, when the fixing request's reply was lost). A failed call keeps the
//! holds and retries sooner; a hold with no successful renewal sent within one lease is marked
//! lost (monotonic clock), and so is every hold when the client shuts down. Dropping the
//! [`Renewal`] removes the hold at once, and renewals only ever re-arm a hold whose identity
//! matches, so the watchdog never extends a hold that is not ours.
//!
//! **Short leases.** A hold granted with a lease shorter than the watchdog timeout on purpose
//! (a lock handed over in a wake-up, whose designee might not be able to act) is registered
//! with [`Toolkit::watch_short_lease`](crate::toolkit::Toolkit::watch_short_lease): the task
//! renews it once half of what was left of it at registration has passed, ahead of its
//! rounds, with an *early renewal*: a request of its own (batched with the other short holds
//! due at that moment), sent whether or not a round is on the wire, so that a round stuck on
//! a stalled connection, a slow server or a cluster's `TRYAGAIN` retries never holds it up.
//! An early renewal that does not answer is sent again on the next connection after a quarter
//! of the time the shortest of its holds has left (not the rounds' half period), so that all
//! [`HEDGES`] sends are out by half that time; one that fails is retried shortly, until the
//! hold is renewed or runs out. The task never waits for a round: rounds, early renewals,
//! lost notices and registrations are all watched at once. While short holds come, the task
//! wakes at least every eighth of their lease, so that registering one seldom has to wake it.
//!
//! Every registration is its own: two guards of one owner on one lock (a re-entry) each have
//! their own deadline and their own place in the registry, so fixing one's lease or dropping
//! it never changes the other, and a registration is removed only by its own [`Renewal`].
//!
//! **Lost notices.** A hold taken from its owner by someone else (a `force_unlock`, a
//! `delete`) would otherwise be noticed at the next renewal, up to a third of the lease later,
//! while the new holder already runs. So the script that takes it publishes on the owner's
//! client's notice channel ([`lost_notice_channel`]), and on that message the watchdog runs a
//! renewal round at once: the renewal script, which alone decides what is still ours, then
//! marks the taken holds lost. One subscription per client, made with its first watchdog hold
//! and kept, whatever the number of holds; a round for every notice, however many holds it
//! concerns (notices that arrive during a round make one more round). Not on a cluster, where
//! a script may only publish in its own slot and the notice channel is the client's, and not
//! for a client that polls ([`WaitStrategy::Poll`]): both learn at
//! the next renewal.
//!
//! A renewal call that hangs (one connection of the pool stalled) is not waited out: when it
//! has not answered within half a renewal period (or the command timeout, if shorter; for an
//! early renewal, see above), the same batch is sent again, on the next connection of the
//! pool, up to [`HEDGES`] times in all; the first answer counts. One that fails because its
//! connection broke is sent again at once on the next connection, within the same [`HEDGES`]
//! sends: when every connection of the pool broke at once (connections killed, a server
//! restarted), each fails its next request before it reconnects, and a pause before each try
//! could outlast a short lease. So one slow connection cannot
//! lose every hold even when the command timeout is longer than the lease. A round still on
//! the wire when the next is due delays that next round until it ends (rounds never overlap);
//! it delays nothing else.

pub(crate) mod lease;

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::locking::lock;
use std::time::{Duration, Instant};

use tracing::Instrument;

use self::lease::{HoldLease, LeaseState};
use crate::pubsub::Hub;
use crate::script::{LuaScript, ScriptCall};
use crate::stats::Counters;
use crate::strategy::WaitStrategy;
use crate::transport::{eval, Transport};

/// Most holds renewed by one script call.
pub const BATCH: usize = 512;

/// Retry period after a failed renewal call.
const RETRY_AFTER_FAILURE: Duration = Duration::from_millis(100);

/// How many times one batch may be on the wire at once: the first call and its re-sends on
/// other connections while it does not answer.
pub const HEDGES: usize = 3;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct HoldId {
    script: &'static str,
    keys: Vec<String>,
    args: Vec<String>,
}

impl HoldId {
    fn key(&self) -> &str {
        self.keys.first().map_or("", String::as_str)
    }
}

struct Entry {
    id: HoldId,
    script: &'static LuaScript,
    /// Shared with the guard: the deadline moves with each confirmed renewal.
    state: Arc<LeaseState>,
    /// For a hold registered with a short lease: when to renew it, ahead of the next round
    /// (cleared by its first confirmed renewal).
    renew_by: Option<Instant>,
    /// An early renewal of this hold is on the wire: no other is sent until it ends.
    renewing_early: bool,
}

/// The registry of holds the watchdog renews, by registration serial.
#[derive(Default)]
pub(crate) struct Watchdog {
    entries: Mutex<HashMap<u64, Entry>>,
    serial: AtomicU64,
    /// Leases found lost when their guard let go, before a watchdog round noticed.
    pub(crate) lost_on_release: AtomicU64,
    metrics: crate::metrics::Metrics,
    /// Set by the first hold the client registers, and never cleared: the watchdog task of a
    /// client that listens for lost notices (not on a cluster, not polling) then subscribes,
    /// and keeps the subscription.
    had_hold: std::sync::atomic::AtomicBool,
    /// Signalled once, with `had_hold`, to wake the watchdog task for that subscription.
    first_hold: tokio::sync::Notify,
    /// Signalled when a hold with a short lease is registered that the task, as planned,
    /// would wake too late to renew: it looks again at when it must wake.
    renew_soon: tokio::sync::Notify,
    /// When the task plans to wake next, and the latest short lease registered.
    plan: Mutex<WakePlan>,
    /// The client's clock drift bound, in parts per million: every deadline is counted with it.
    drift_ppm: u32,
    /// Whether the watchdog holds the client's lost-notice subscription (it keeps it once
    /// made: one channel per client, not a leak of any call).
    pub(crate) listens_for_notices: std::sync::atomic::AtomicBool,
}

/// When the watchdog task wakes next, as it planned before it slept.
#[derive(Default)]
struct WakePlan {
    at: Option<Instant>,
    /// The latest hold registered with a short lease: when, and its lease. While such holds
    /// come, the task wakes at least every eighth of that lease, so that registering one
    /// seldom needs to wake it (a task wake-up on every acquire would add to hand-off times).
    short: Option<(Instant, Duration)>,
}

/// Keeps one hold registered with the watchdog; dropping it stops renewal at once.
pub struct Renewal {
    watchdog: Arc<Watchdog>,
    serial: u64,
}

impl std::fmt::Debug for Renewal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Renewal")
            .field("serial", &self.serial)
            .finish()
    }
}

impl Drop for Renewal {
    fn drop(&mut self) {
        // Only this registration's own entry: serials are never reused.
        let removed = lock(&self.watchdog.entries).remove(&self.serial);
        if let Some(entry) = removed {
            if entry.state.first_count_of_loss() {
                self.watchdog
                    .lost_on_release
                    .fetch_add(1, Ordering::Relaxed);
                self.watchdog
                    .metrics
                    .lost(entry.script.kind(), entry.id.key(), 1);
            }
        }
    }
}

impl Watchdog {
    /// An empty registry, reporting with `metrics`, for a client whose clock drift bound is
    /// `drift_ppm`.
    pub(crate) fn new(metrics: crate::metrics::Metrics, drift_ppm: u32) -> Self {
        Watchdog {
            metrics,
            drift_ppm,
            ..Watchdog::default()
        }
    }

    /// Registers a hold acquired by a request sent at `sent_at` with a lease of `lease`;
    /// `short`: the lease was granted short on purpose, and the hold is renewed once half of
    /// what is left of it has passed, ahead of the next round. Every registration has
    /// its own state and renewal, even for a hold registered before (a re-entry): see the
    /// module docs.
    pub(crate) fn register(
        self: &Arc<Self>,
        script: &'static LuaScript,
        keys: Vec<String>,
        args: Vec<String>,
        sent_at: Instant,
        lease: Duration,
        short: bool,
    ) -> HoldLease {
        let id = HoldId {
            script: script.name(),
            keys,
            args,
        };
        let state = LeaseState::new(sent_at, lease, self.drift_ppm);
        let expires_at = state.expires_at();
        let renew_by = short.then(|| {
            let now = Instant::now();
            now + expires_at.saturating_duration_since(now) / 2
        });
        let serial = self.serial.fetch_add(1, Ordering::Relaxed);
        let mut entries = lock(&self.entries);
        entries.insert(
            serial,
            Entry {
                id,
                script,
                state: state.clone(),
                renew_by,
                renewing_early: false,
            },
        );
        drop(entries);
        if let Some(renew_by) = renew_by {
            let mut plan = lock(&self.plan);
            plan.short = Some((Instant::now(), lease));
            let too_late = plan.at.is_none_or(|at| at > renew_by);
            drop(plan);
            if too_late {
                self.renew_soon.notify_one();
            }
        }
        // Only the first hold wakes the task. Waking it whenever a hold finds the registry
        // empty would cost every such acquire a task wake-up (often another thread's), and a
        // task that woke after a short hold was already gone would not subscribe, so the next
        // acquire would wake it again.
        if !self.had_hold.swap(true, Ordering::AcqRel) {
            // Stores a permit if the task is not listening yet: the signal is not lost.
            self.first_hold.notify_one();
        }
        HoldLease::renewed(
            Renewal {
                watchdog: self.clone(),
                serial,
            },
            state,
        )
    }

    pub(crate) fn len(&self) -> usize {
        lock(&self.entries).len()
    }

    /// Marks every hold lost and forgets them all: the client is shutting down.
    fn abandon_all(&self) {
        for (_, entry) in lock(&self.entries).drain() {
            entry.state.mark_lost();
        }
    }

    /// Forgets every hold whose lease ran out without a confirmed renewal (its guards see that
    /// by themselves); returns how many, when the next one would run out, and when the first
    /// is due for a renewal ahead of the rounds (see [`register`](Self::register)) that is not
    /// on the wire already.
    fn expire(&self) -> (u64, Option<Instant>, Option<Instant>) {
        let metrics = self.metrics;
        let mut entries = lock(&self.entries);
        let mut expired = 0;
        entries.retain(|_, entry| {
            if entry.state.is_lost() {
                tracing::warn!(key = %entry.id.key(), "lease lost: no renewal succeeded within the lease");
                if entry.state.first_count_of_loss() {
                    expired += 1;
                    metrics.lost(entry.script.kind(), entry.id.key(), 1);
                }
                false
            } else {
                true
            }
        });
        let next = entries.values().map(|e| e.state.expires_at()).min();
        let renew_by = entries
            .values()
            .filter(|e| !e.renewing_early)
            .filter_map(|e| e.renew_by)
            .min();
        (expired, next, renew_by)
    }
}

/// The channel on which scripts tell the client `client_id` that a hold of it was taken (see
/// the module docs): `<prefix>:lost:<client id>`. Scripts build it from the prefix
/// [`lost_notice_prefix`] gives and the client id that starts every owner and attempt id.
pub fn lost_notice_channel(key_prefix: &str, client_id: &str) -> String {
    format!("{}{client_id}", lost_notice_prefix(key_prefix))
}

/// The part of every lost-notice channel before the client id: `<prefix>:lost:`.
pub fn lost_notice_prefix(key_prefix: &str) -> String {
    format!("{key_prefix}:lost:")
}

pub(crate) fn spawn(
    transport: &Arc<Transport>,
    watchdog: &Arc<Watchdog>,
    hub: &Arc<Hub>,
    client_id: &str,
) {
    let listens = !transport.sharded() && transport.config.wait_strategy == WaitStrategy::PubSub;
    let notices = listens.then(|| Notices {
        hub: hub.clone(),
        channel: lost_notice_channel(&transport.config.key_prefix, client_id),
        subscribed: None,
        generation: 0,
        confirmed: false,
    });
    transport
        .runtime
        .spawn(run(transport.clone(), watchdog.clone(), notices));
}

/// The client's lost-notice subscription, made with its first watchdog hold.
struct Notices {
    hub: Arc<Hub>,
    channel: String,
    subscribed: Option<(
        crate::pubsub::Subscription,
        tokio::sync::watch::Receiver<crate::pubsub::ChannelState>,
    )>,
    /// The channel's generation when last looked at.
    generation: u64,
    /// Whether Redis ever confirmed the subscription: the hub's bump of the generation when it
    /// first subscribes is no notice, one after a lost connection may stand for lost ones.
    confirmed: bool,
}

impl Notices {
    /// Subscribes, if not yet subscribed and the client has had a watchdog hold.
    fn subscribe_if_needed(&mut self, watchdog: &Watchdog) {
        if self.subscribed.is_none() && watchdog.had_hold.load(Ordering::Acquire) {
            // Before subscribing: a snapshot of the local state in between then misses a
            // channel for a moment rather than counting this one as left behind.
            watchdog.listens_for_notices.store(true, Ordering::Relaxed);
            let subscription = self.hub.subscribe(&self.channel);
            let mut watcher = subscription.watcher();
            let state = watcher.borrow_and_update().clone();
            self.generation = state.generation;
            self.confirmed = state.subscribed;
            self.subscribed = Some((subscription, watcher));
        }
    }

    /// Resolves when a notice arrives (or the subscriber connection was lost and made again,
    /// when notices may have been missed); never without a subscription.
    async fn arrived(&mut self) {
        let Some((_, watcher)) = &mut self.subscribed else {
            return std::future::pending().await;
        };
        loop {
            if watcher.changed().await.is_err() {
                return std::future::pending().await;
            }
            let state = watcher.borrow_and_update().clone();
            let notice = is_notice(self.generation, self.confirmed, &state);
            self.generation = state.generation;
            self.confirmed |= state.subscribed;
            if notice {
                return;
            }
        }
    }
}

/// Whether a change of the notice channel's state, seen with `generation` as the last one
/// looked at, may stand for a notice. A message always does: it can arrive, and be seen in
/// one change with the subscription's confirmation, before the watchdog looked at the
/// confirmation alone. A bump without a message (a reconnect) does once the subscription was
/// confirmed: notices may have been missed while it was down.
fn is_notice(generation: u64, confirmed: bool, state: &crate::pubsub::ChannelState) -> bool {
    state.generation != generation && (confirmed || state.message.is_some())
}

async fn run(transport: Arc<Transport>, watchdog: Arc<Watchdog>, mut notices: Option<Notices>) {
    use futures_util::future::{Fuse, FutureExt};
    use futures_util::stream::{FuturesUnordered, StreamExt};

    let lease = transport.config.watchdog_timeout;
    let period = lease / 3;
    let hedge_after = (period / 2).min(transport.config.command_timeout);
    let mut next_tick = Instant::now() + period;
    // The round on the wire (polled alongside everything else, so that nothing waits behind
    // it), when it started, and whether a notice asked for one more after it.
    let round = Fuse::terminated();
    tokio::pin!(round);
    let mut round_started: Option<Instant> = None;
    let mut round_wanted = false;
    // Early renewals on the wire, each its own request.
    let mut early = FuturesUnordered::new();
    loop {
        let (expired, next_expiry, renew_by) = watchdog.expire();
        Counters::bump(&transport.counters.lost_leases, expired);
        let now = Instant::now();
        if renew_by.is_some_and(|at| at <= now) {
            early.push(renew_early(&transport, &watchdog, lease, hedge_after));
            continue;
        }
        if round_started.is_none() && (round_wanted || now >= next_tick) {
            round_wanted = false;
            round_started = Some(now);
            round.set(renew_round(&transport, &watchdog, lease, hedge_after).fuse());
        }
        // While a round is on the wire, the next one is planned when it ends.
        let tick = if round_started.is_none() {
            next_tick
        } else {
            now + period
        };
        let mut wake = [next_expiry, renew_by]
            .into_iter()
            .flatten()
            .fold(tick, Instant::min);
        {
            let mut plan = lock(&watchdog.plan);
            if let Some((seen, short)) = plan.short {
                if now.saturating_duration_since(seen) < lease {
                    wake = wake.min(now + short / 8);
                }
            }
            plan.at = Some(wake);
        }
        if let Some(notices) = &mut notices {
            notices.subscribe_if_needed(&watchdog);
        }
        let waiting_for_first_hold = notices.as_ref().is_some_and(|n| n.subscribed.is_none());
        let notice = async {
            match notices.as_mut() {
                Some(notices) => notices.arrived().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = transport.shutdown.wait() => {
                // Nobody renews these holds any more: they will expire, so say so now.
                watchdog.abandon_all();
                return;
            }
            _ = tokio::time::sleep_until(wake.into()) => {}
            _ = watchdog.first_hold.notified(), if waiting_for_first_hold => {}
            _ = watchdog.renew_soon.notified() => {}
            // A notice: some hold of this client was taken, and a round finds which (one
            // more after the round on the wire, which may have been sent before the take).
            _ = notice => round_wanted = true,
            all_renewed = &mut round, if round_started.is_some() => {
                let started = round_started.take().unwrap_or(now);
                // Counted from the round's start, so that rounds keep their rhythm however
                // long the renewal calls take.
                next_tick = started
                    + if all_renewed {
                        period
                    } else {
                        RETRY_AFTER_FAILURE.min(period)
                    };
            }
            Some(()) = early.next(), if !early.is_empty() => {}
        }
    }
}

/// A hold as registered: its identity and its registration serial.
type Registered = (HoldId, u64);

/// Holds renewed together: their script and the holds (of one slot, on a cluster).
type Batch = (&'static LuaScript, Vec<Registered>);

/// The registered holds that `selected` picks (by serial), grouped by renewal script and, on
/// a cluster, where one call may only touch one slot, by slot as well.
fn batches(
    transport: &Transport,
    watchdog: &Watchdog,
    selected: impl Fn(u64) -> bool,
) -> Vec<Batch> {
    let sharded = transport.sharded();
    let mut groups: HashMap<(&'static str, Option<u16>), Batch> = HashMap::new();
    for (serial, entry) in lock(&watchdog.entries).iter() {
        if !selected(*serial) {
            continue;
        }
        let shard = sharded.then(|| crate::keys::slot(entry.id.key()));
        groups
            .entry((entry.id.script, shard))
            .or_insert_with(|| (entry.script, Vec::new()))
            .1
            .push((entry.id.clone(), *serial));
    }
    groups.into_values().collect()
}

/// One renewal round: every hold, batched. Resolves to false if any call failed.
fn renew_round<'a>(
    transport: &'a Arc<Transport>,
    watchdog: &'a Watchdog,
    lease: Duration,
    hedge_after: Duration,
) -> impl Future<Output = bool> + Send + 'a {
    let groups = batches(transport, watchdog, |_| true);
    renew(transport, watchdog, groups, lease, hedge_after)
}

/// Renews, as a request of its own, the holds registered with a short lease that are due for
/// their early renewal and have none on the wire (see [`Watchdog::register`]). It is sent again
/// on another connection after a quarter of the shortest time such a hold has left, so that
/// one stalled connection cannot keep it from landing before that hold runs out. A hold
/// whose renewal failed is tried again shortly.
fn renew_early<'a>(
    transport: &'a Arc<Transport>,
    watchdog: &'a Watchdog,
    lease: Duration,
    hedge_after: Duration,
) -> impl Future<Output = ()> + Send + 'a {
    let now = Instant::now();
    let mut due = std::collections::HashSet::new();
    let mut left = hedge_after;
    for (serial, entry) in lock(&watchdog.entries).iter_mut() {
        if !entry.renewing_early && entry.renew_by.is_some_and(|at| at <= now) {
            entry.renewing_early = true;
            left = left.min(entry.state.expires_at().saturating_duration_since(now));
            due.insert(*serial);
        }
    }
    // Up to HEDGES sends by half the time left, the last with the other half to answer.
    let hedge = (left / (HEDGES as u32 + 1))
        .min(hedge_after)
        .max(Duration::from_millis(1));
    let groups = batches(transport, watchdog, |serial| due.contains(&serial));
    async move {
        renew(transport, watchdog, groups, lease, hedge).await;
        // A confirmed renewal cleared `renew_by` (or the hold is gone); what is left failed.
        let retry_at = Instant::now() + RETRY_AFTER_FAILURE;
        let mut entries = lock(&watchdog.entries);
        for serial in &due {
            if let Some(entry) = entries.get_mut(serial) {
                entry.renewing_early = false;
                if entry.renew_by.is_some() {
                    entry.renew_by = Some(retry_at);
                }
            }
        }
    }
}

/// Renews the holds of `groups`, every batch at once: a round costs about one round trip
/// however many holds there are. Returns false if any call failed.
async fn renew(
    transport: &Arc<Transport>,
    watchdog: &Watchdog,
    groups: Vec<Batch>,
    lease: Duration,
    hedge_after: Duration,
) -> bool {
    let lease_ms = crate::duration::redis_millis(lease);
    let mut renewals = Vec::new();
    for (script, holds) in &groups {
        let script = *script;
        for batch in holds.chunks(BATCH) {
            let (keys_per_hold, args_per_hold) = batch
                .first()
                .map_or((0, 0), |(id, _)| (id.keys.len(), id.args.len()));
            let mut call = ScriptCall::new(script)
                .arg(lease_ms)
                .arg(keys_per_hold)
                .arg(args_per_hold);
            for (id, _) in batch {
                for key in &id.keys {
                    call = call.key(key.as_str());
                }
                call = call.arg(&id.args);
            }
            let span = tracing::debug_span!(
                "redisync.renew",
                script = script.name(),
                holds = batch.len()
            );
            renewals.push(async move {
                match hedged(transport, call, hedge_after).instrument(span).await {
                    Ok((results, sent_at)) => {
                        settle(transport, watchdog, batch, &results, sent_at, lease);
                        true
                    }
                    Err(err) => {
                        tracing::warn!(script = script.name(), error = %err, "lease renewal failed; retrying");
                        for (id, _) in batch {
                            transport
                                .config
                                .metrics
                                .renewal(script.kind(), id.key(), "failed");
                        }
                        false
                    }
                }
            });
        }
    }
    futures_util::future::join_all(renewals)
        .await
        .into_iter()
        .all(|renewed| renewed)
}

/// Sends one renewal batch, and sends it again (on the next connection of the pool) each
/// time `hedge_after` passes without an answer, up to [`HEDGES`] calls. Returns the first
/// answer with the moment its call was sent, or the last error once every call failed.
async fn hedged(
    transport: &Arc<Transport>,
    call: ScriptCall,
    hedge_after: Duration,
) -> crate::Result<(Vec<i64>, Instant)> {
    use futures_util::stream::{FuturesUnordered, StreamExt};
    let send = |call: ScriptCall| {
        let sent_at = Instant::now();
        let request = eval::<Vec<i64>>(transport.clone(), call);
        async move { request.await.map(|results| (results, sent_at)) }
    };
    let mut in_flight = FuturesUnordered::new();
    in_flight.push(send(call.clone()));
    let mut sent = 1;
    loop {
        let hedge = tokio::time::sleep(hedge_after);
        tokio::select! {
            Some(answer) = in_flight.next() => match answer {
                Ok(answer) => return Ok(answer),
                // A connection of the pool that broke (a killed connection, a restarted
                // server) fails only its next request, and then reconnects; when every one
                // broke at once, retrying after a pause would meet them one by one, a pause
                // each. Sent again at once on the next connection instead.
                Err(err) if sent < HEDGES && connection_broke(&err) => {
                    tracing::debug!(error = %err, "renewal call met a broken connection; sending it again");
                    in_flight.push(send(call.clone()));
                    sent += 1;
                }
                Err(err) if in_flight.is_empty() => return Err(err),
                Err(err) => {
                    tracing::debug!(error = %err, "one renewal call failed; waiting for the others");
                }
            },
            _ = hedge, if sent < HEDGES => {
                tracing::debug!(?hedge_after, "renewal call not answered; sending it again");
                in_flight.push(send(call.clone()));
                sent += 1;
            }
        }
    }
}

/// Whether a request failed because its connection broke (it reconnects for the next one).
fn connection_broke(err: &crate::Error) -> bool {
    matches!(err, crate::Error::Redis(e) if e.is_connection_dropped() || e.is_io_error())
}

fn settle(
    transport: &Transport,
    watchdog: &Watchdog,
    batch: &[Registered],
    results: &[i64],
    sent_at: Instant,
    lease: Duration,
) {
    let mut entries = lock(&watchdog.entries);
    for ((id, serial), result) in batch
        .iter()
        .zip(results.iter().copied().chain(std::iter::repeat(0)))
    {
        let Some(entry) = entries.get_mut(serial) else {
            continue; // released while the renewal was in flight
        };
        if result < 0 {
            // Its lease was fixed meanwhile: the fixed deadline stands, and the guard must not
            // believe in a later one. Nothing is left for an early renewal to do.
            entry.renew_by = None;
            let left = Duration::from_millis(result.saturating_add(1).unsigned_abs());
            entry.state.cap(entry.state.deadline(sent_at, left));
            continue;
        }
        let metrics = transport.config.metrics;
        if result == 1 && entry.state.extend(entry.state.deadline(sent_at, lease)) {
            entry.renew_by = None;
            Counters::bump(&transport.counters.renewals, 1);
            metrics.renewal(entry.script.kind(), id.key(), "renewed");
        } else {
            tracing::warn!(key = %id.key(), "lease lost: the hold is gone, no longer ours, or renewed too late");
            metrics.renewal(entry.script.kind(), id.key(), "lost");
            entry.state.mark_lost();
            if entry.state.first_count_of_loss() {
                Counters::bump(&transport.counters.lost_leases, 1);
                metrics.lost(entry.script.kind(), id.key(), 1);
            }
            entries.remove(serial);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::is_notice;
    use crate::pubsub::ChannelState;

    fn state(subscribed: bool, generation: u64, message: Option<&str>) -> ChannelState {
        ChannelState {
            subscribed,
            generation,
            message: message.map(Into::into),
            unreachable: false,
        }
    }

    #[test]
    fn a_message_seen_with_the_confirmation_is_a_notice() {
        // The confirmation and a notice, seen in one change before the first look.
        assert!(is_notice(0, false, &state(true, 1, Some("lost"))));
        // The message delivered before the confirmation was.
        assert!(is_notice(0, false, &state(false, 1, Some("lost"))));
    }

    #[test]
    fn a_bump_without_a_message_counts_only_once_confirmed() {
        assert!(
            !is_notice(0, false, &state(true, 0, None)),
            "the confirmation alone"
        );
        assert!(
            !is_notice(0, false, &state(false, 1, None)),
            "a reconnect before it"
        );
        assert!(
            is_notice(3, true, &state(true, 4, None)),
            "a reconnect after it"
        );
        assert!(
            !is_notice(4, true, &state(true, 4, Some("lost"))),
            "nothing new"
        );
    }
}
