//! The hub's task for a Redis Cluster: sharded pub/sub over a cluster connection of its own.
//!
//! Each channel is subscribed with its own `SSUBSCRIBE`, which the connection routes to the
//! primary owning the channel's slot (channels of different slots cannot share a command).
//! The connection speaks RESP3 and hands every push to this task: messages, confirmations,
//! and `sunsubscribe`s Redis sends by itself.
//!
//! A subscription counts as live only once its confirmation push has arrived, never on the
//! command's reply alone: redis-rs hands a push Redis sends unasked (a `sunsubscribe` when a
//! slot moves) to whichever request is waiting on that node's connection, so a reply may
//! belong to another request. A subscribe whose confirmation does not come within the
//! command timeout is sent again. For the same reason the task sends nothing else on this
//! connection: its pings go over the client's pool.
//!
//! What can interrupt a subscription, and what the task does:
//!
//! * the connection to a node drops: which node is not said, and redis-rs's own
//!   resubscription sends a node's channels in one command, which Redis refuses when they span
//!   several slots. So the task takes every subscription as lost and subscribes every wanted
//!   channel again, one command each, and once more a second later (redis-rs may replace the
//!   node's connection again meanwhile); waiters re-check at once and again on each
//!   re-confirmation, since messages may have been missed;
//! * the slot moves (a migration, or a graceful failover that demotes the primary): Redis ends
//!   the subscription with a `sunsubscribe` push, and the task subscribes the channel again,
//!   at its new owner (see [`probe_primary`] for how it finds it);
//! * the primary is killed: its connection drops (above), and the new subscriptions reach the
//!   promoted replica once the connection has learnt the new slot map;
//! * redis-rs replaces a node's connection without reporting a drop (it does when it rebuilds
//!   its connections from the seed nodes, or when a check of a connection fails): the
//!   subscriptions go with it unnoticed. Every ten ping rounds the task therefore sends every
//!   live subscription again; until then waiters rely on their own timed re-checks (at most
//!   10 s apart);
//! * a primary stops answering: the task pings, per slot with waiters, the slot's primary;
//!   once a slot has gone a whole command timeout without an answer its channels are marked
//!   unreachable, so their waiters fail instead of sleeping through the outage, while waiters
//!   on other shards carry on.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{PushInfo, PushKind};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{ping_interval, sleep_or_shutdown, Hub};
use crate::transport::connection::{ClusterConnection, Connection};
use crate::transport::Transport;

/// A round of pings: when it was sent, and each slot asked with whether its primary answered
/// in time.
type PingRound = Pin<Box<dyn Future<Output = (Instant, Vec<(u16, bool)>)> + Send>>;

/// Pause before subscribing again a channel whose subscription Redis ended or refused.
const RESUBSCRIBE_AFTER: Duration = Duration::from_millis(20);
/// Every this many ping rounds, live subscriptions are sent again (see the module doc).
const REFRESH_EVERY: u64 = 10;
/// When, after a dropped connection, every channel is subscribed once more.
const SECOND_PASS_AFTER: Duration = Duration::from_secs(1);
/// Most probes for the primary before subscribing a channel again, and the pause between.
const MAX_PROBES: u32 = 10;
const PROBE_PAUSE: Duration = Duration::from_millis(20);
const RETRY_AFTER_FAILURE: Duration = Duration::from_millis(200);

/// Subscription bookkeeping of the task.
#[derive(Default)]
struct Subscriptions {
    /// Channels whose subscription Redis has confirmed and not ended since.
    on_server: HashSet<String>,
    /// Channels whose subscription ended while they were wanted: messages may have been
    /// missed until Redis confirms them again.
    interrupted: HashSet<String>,
    /// Channels with a command on the way: the next one waits for its outcome, so that an
    /// unsubscribe never overtakes a later subscribe.
    in_flight: HashSet<String>,
    /// Subscribes Redis answered but has not confirmed yet, with when they were answered.
    unconfirmed: HashMap<String, Instant>,
    /// Channels to bring in line with the wanted set once `retry_at` comes.
    retry: HashSet<String>,
    retry_at: Option<Instant>,
    /// When to subscribe everything once more after a dropped connection.
    second_pass_at: Option<Instant>,
}

/// How one `SSUBSCRIBE` or `SUNSUBSCRIBE` ended.
struct Outcome {
    channel: String,
    subscribe: bool,
    /// Answered without error within the command timeout.
    answered: bool,
}

pub(super) async fn run(
    transport: Arc<Transport>,
    hub: Arc<Hub>,
    mut changes: mpsc::UnboundedReceiver<String>,
) {
    let timeout = transport.config.command_timeout;
    let (push_sender, mut pushes) = mpsc::unbounded_channel::<PushInfo>();
    let client = match crate::transport::open_cluster_client(&transport.config, Some(push_sender)) {
        Ok(client) => client,
        Err(err) => {
            // build() opened a client from the same configuration, so this cannot happen;
            // if it did, waiters would fail their subscription with a timeout.
            tracing::error!(error = %err, "cannot open the cluster for pub/sub");
            return;
        }
    };
    let mut backoff = Duration::from_millis(20);
    let mut down_since: Option<Instant> = None;
    let connection = loop {
        if let Some(since) = down_since {
            hub.mark_unreachable(timeout, |_| Some(since));
        }
        let connected = tokio::select! {
            _ = transport.shutdown.wait() => {
                hub.update_all(|s| s.bump());
                return;
            }
            c = tokio::time::timeout(timeout, client.get_async_generic_connection()) => c,
        };
        match connected {
            Ok(Ok(connection)) => break connection,
            Ok(Err(err)) => tracing::debug!(error = %err, "cluster pub/sub connection failed"),
            Err(_) => tracing::debug!("cluster pub/sub connection timed out"),
        }
        down_since.get_or_insert_with(Instant::now);
        if sleep_or_shutdown(&transport, &mut backoff, &mut changes).await {
            hub.update_all(|s| s.bump());
            return;
        }
    };

    // Commands run on tasks of their own, so that a shard that does not answer holds up
    // neither messages nor the subscriptions of other shards.
    let (outcome_sender, mut outcomes) = mpsc::unbounded_channel::<Outcome>();
    let mut subs = Subscriptions::default();
    let send = |subs: &mut Subscriptions, touched: HashSet<String>, resend_live: bool| {
        apply(
            &hub,
            &connection,
            subs,
            touched,
            resend_live,
            timeout,
            &outcome_sender,
        )
    };
    let apply = |subs: &mut Subscriptions, touched: HashSet<String>| send(subs, touched, false);
    let mut rounds: u64 = 0;
    apply(&mut subs, hub.wanted());
    let ping_every = ping_interval(timeout);
    let mut next_ping = Instant::now() + ping_every;
    let mut ping: Option<PingRound> = None;
    let mut slot_down_since: HashMap<u16, Instant> = HashMap::new();
    loop {
        let retry_at = subs.retry_at;
        let second_pass_at = subs.second_pass_at;
        tokio::select! {
            _ = transport.shutdown.wait() => break,
            Some(push) = pushes.recv() => {
                if let Some(resubscribe) = on_push(&hub, &mut subs, push) {
                    apply(&mut subs, resubscribe);
                }
            }
            Some(first) = changes.recv() => {
                let mut touched = HashSet::from([first]);
                while let Ok(more) = changes.try_recv() {
                    touched.insert(more);
                }
                apply(&mut subs, touched);
            }
            Some(outcome) = outcomes.recv() => {
                let channel = outcome.channel.clone();
                if on_outcome(&mut subs, outcome) {
                    // Wanted or not may have changed while the command was on its way.
                    apply(&mut subs, HashSet::from([channel]));
                }
            }
            _ = sleep_until_some(second_pass_at), if second_pass_at.is_some() => {
                subs.second_pass_at = None;
                let wanted = interrupt_all(&hub, &mut subs);
                apply(&mut subs, wanted);
            }
            _ = sleep_until_some(retry_at), if retry_at.is_some() => {
                let touched = std::mem::take(&mut subs.retry);
                subs.retry_at = None;
                apply(&mut subs, touched);
            }
            _ = tokio::time::sleep_until(next_ping), if ping.is_none() => {
                next_ping = Instant::now() + ping_every;
                retry_unconfirmed(&mut subs, timeout);
                rounds += 1;
                if rounds.is_multiple_of(REFRESH_EVERY) {
                    let live = subs.on_server.clone();
                    send(&mut subs, live, true);
                }
                let slots = hub.wanted_slots();
                if !slots.is_empty() {
                    ping = Some(ping_slots(transport.connection(), slots, timeout));
                }
            }
            (sent, answers) = finish(&mut ping), if ping.is_some() => {
                ping = None;
                let mut answered = HashSet::new();
                let mut asked = HashSet::new();
                for (slot, ok) in answers {
                    asked.insert(slot);
                    if ok {
                        answered.insert(slot);
                    } else {
                        // Silent since the round was sent, not since it gave up.
                        slot_down_since.entry(slot).or_insert(sent);
                    }
                }
                // A slot nobody waits on any more is not down as far as anyone cares.
                slot_down_since.retain(|slot, _| asked.contains(slot) && !answered.contains(slot));
                hub.update_where(
                    |channel, slot| answered.contains(&slot) && subs.on_server.contains(channel),
                    |s| s.unreachable = false,
                );
                if !slot_down_since.is_empty() {
                    hub.mark_unreachable(timeout, |slot| slot_down_since.get(&slot).copied());
                }
            }
        }
    }
    hub.update_all(|s| s.bump());
}

/// Handles one push from the cluster connection; returns channels to subscribe again.
fn on_push(hub: &Hub, subs: &mut Subscriptions, push: PushInfo) -> Option<HashSet<String>> {
    let channel = push.data.first().and_then(|value| match value {
        redis::Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        _ => None,
    });
    match (push.kind, channel) {
        (PushKind::SMessage, Some(channel)) => {
            let payload: std::sync::Arc<str> = match push.data.get(1) {
                Some(redis::Value::BulkString(bytes)) => String::from_utf8_lossy(bytes).into(),
                _ => "".into(),
            };
            hub.update(&channel, |s| s.deliver(payload.clone()));
        }
        (PushKind::SSubscribe, Some(channel)) => {
            subs.unconfirmed.remove(&channel);
            if !hub.is_wanted(&channel) {
                // Left while on its way: unsubscribe, so that Redis keeps nothing for us.
                subs.on_server.insert(channel.clone());
                return Some(HashSet::from([channel]));
            }
            // A confirmation of a channel already live (redis-rs resubscribing after it
            // learnt a new slot map) changes nothing.
            if subs.on_server.contains(&channel) && !subs.interrupted.contains(&channel) {
                return None;
            }
            subs.on_server.insert(channel.clone());
            let missed = subs.interrupted.remove(&channel);
            hub.update(&channel, |s| {
                s.subscribed = true;
                s.unreachable = false;
                if missed {
                    s.bump();
                }
            });
        }
        (PushKind::SUnsubscribe, Some(channel)) => {
            subs.on_server.remove(&channel);
            if hub.is_wanted(&channel) {
                // Redis ended the subscription: the slot moved to another node.
                tracing::debug!(%channel, "redis ended a sharded subscription; subscribing again");
                subs.interrupted.insert(channel.clone());
                hub.update(&channel, |s| {
                    s.subscribed = false;
                    s.bump();
                });
                schedule_retry(subs, channel, RESUBSCRIBE_AFTER);
            }
        }
        (PushKind::Disconnection, _) => {
            tracing::debug!("a cluster pub/sub connection dropped; subscribing everything again");
            // redis-rs may still replace the node's connection after this first pass, taking
            // its subscriptions along: a second pass, once that has settled, catches it.
            subs.second_pass_at = Some(Instant::now() + SECOND_PASS_AFTER);
            return Some(interrupt_all(hub, subs));
        }
        _ => {}
    }
    None
}

/// Takes every subscription as lost: waiters re-check now, and again once their channel is
/// confirmed; returns the channels to subscribe again.
fn interrupt_all(hub: &Hub, subs: &mut Subscriptions) -> HashSet<String> {
    let lost = std::mem::take(&mut subs.on_server);
    subs.interrupted.extend(lost);
    subs.unconfirmed.clear();
    hub.update_all(|s| {
        s.subscribed = false;
        s.bump();
    });
    hub.wanted()
}

/// Brings Redis in line with the wanted set for `touched` channels: sends one command per
/// channel that needs one, each on a task of its own reporting to `outcomes`. With
/// `resend_live`, live channels are subscribed again too (Redis ignores a repeat).
fn apply(
    hub: &Hub,
    connection: &ClusterConnection,
    subs: &mut Subscriptions,
    touched: HashSet<String>,
    resend_live: bool,
    timeout: Duration,
    outcomes: &mpsc::UnboundedSender<Outcome>,
) {
    for channel in touched {
        if subs.in_flight.contains(&channel) {
            continue; // looked at again when its command ends
        }
        if subs.unconfirmed.contains_key(&channel) {
            continue; // answered: its confirmation decides what comes next
        }
        let subscribe = match (hub.is_wanted(&channel), subs.on_server.contains(&channel)) {
            (true, false) => true,
            (false, true) => false,
            (true, true) if resend_live => true,
            (true, true) => {
                // Liveness is the pings' business: only they clear an outage.
                hub.update(&channel, |s| s.subscribed = true);
                continue;
            }
            (false, false) => {
                // Nobody waits on it any more: there is nothing left to catch up on.
                subs.interrupted.remove(&channel);
                continue;
            }
        };
        subs.in_flight.insert(channel.clone());
        let mut connection = connection.clone();
        let outcomes = outcomes.clone();
        let find_primary = subscribe && subs.interrupted.contains(&channel);
        tokio::spawn(async move {
            let sent = async {
                if find_primary && !probe_primary(&mut connection, &channel).await {
                    // Not yet: the channel is tried again, and probed again, a bit later.
                    return Err(redis::RedisError::from((
                        redis::ErrorKind::Server(redis::ServerErrorKind::TryAgain),
                        "the slot's primary is not known yet",
                    )));
                }
                if subscribe {
                    connection.ssubscribe(&channel).await
                } else {
                    connection.sunsubscribe(&channel).await
                }
            };
            let answered = matches!(tokio::time::timeout(timeout, sent).await, Ok(Ok(())));
            // The hub may be gone (shut down): then nobody needs to know.
            let _ = outcomes.send(Outcome {
                channel,
                subscribe,
                answered,
            });
        });
    }
}

/// Makes sure the connection knows the primary of `channel`'s slot before subscribing again.
///
/// A subscription Redis ended usually means the slot moved. A demoted primary (a graceful
/// failover) still accepts `SSUBSCRIBE` as a replica of the new one, but receives its
/// messages only once replication has caught up, and a release published meanwhile would be
/// missed. A keyed command, which a replica answers with `MOVED`, makes the connection learn
/// the new slot map first: it is repeated until the slot's primary answers it. Returns whether
/// one did.
async fn probe_primary(connection: &mut ClusterConnection, channel: &str) -> bool {
    for _ in 0..MAX_PROBES {
        let answer: redis::RedisResult<redis::Value> = redis::cmd("EXISTS")
            .arg(channel)
            .query_async(connection)
            .await;
        match answer {
            Ok(_) => return true,
            Err(_) => tokio::time::sleep(PROBE_PAUSE).await,
        }
    }
    false
}

/// Records how a command ended; returns whether the channel may need another one now.
fn on_outcome(subs: &mut Subscriptions, outcome: Outcome) -> bool {
    let Outcome {
        channel,
        subscribe,
        answered,
    } = outcome;
    subs.in_flight.remove(&channel);
    if !answered {
        tracing::debug!(%channel, subscribe, "sharded (un)subscribe failed; retrying");
        schedule_retry(subs, channel, RETRY_AFTER_FAILURE);
        return false;
    }
    if subscribe {
        // Live once confirmed (see the module doc); unless it already was.
        if !subs.on_server.contains(&channel) {
            subs.unconfirmed.insert(channel, Instant::now());
        }
    } else {
        subs.on_server.remove(&channel);
        subs.interrupted.remove(&channel);
    }
    true
}

/// Subscribes again every channel whose subscription was answered but not confirmed within
/// `timeout`.
fn retry_unconfirmed(subs: &mut Subscriptions, timeout: Duration) {
    let overdue: Vec<String> = subs
        .unconfirmed
        .iter()
        .filter(|(_, answered_at)| answered_at.elapsed() >= timeout)
        .map(|(channel, _)| channel.clone())
        .collect();
    for channel in overdue {
        subs.unconfirmed.remove(&channel);
        schedule_retry(subs, channel, Duration::ZERO);
    }
}

/// Pings, over the client's pool, the primary of each slot.
fn ping_slots(pool: Connection, slots: HashSet<u16>, timeout: Duration) -> PingRound {
    let sent = Instant::now();
    let pings = slots.into_iter().map(move |slot| {
        let mut pool = pool.clone();
        async move {
            let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::new(
                slot,
                SlotAddr::Master,
            )));
            let pong = match &mut pool {
                Connection::Cluster(cluster) => {
                    tokio::time::timeout(timeout, cluster.route_command(redis::cmd("PING"), route))
                        .await
                }
                // A cluster client's pool holds cluster connections only.
                Connection::Single(_) => return (slot, false),
            };
            (slot, matches!(pong, Ok(Ok(_))))
        }
    });
    let round = futures_util::future::join_all(pings);
    Box::pin(async move { (sent, round.await) })
}

fn schedule_retry(subs: &mut Subscriptions, channel: String, after: Duration) {
    subs.retry.insert(channel);
    let at = Instant::now() + after;
    subs.retry_at = Some(subs.retry_at.map_or(at, |current| current.min(at)));
}

async fn finish(round: &mut Option<PingRound>) -> (Instant, Vec<(u16, bool)>) {
    match round {
        Some(round) => round.await,
        None => std::future::pending().await,
    }
}

async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
