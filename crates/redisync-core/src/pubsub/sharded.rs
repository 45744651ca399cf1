//! The hub's task for a Redis Cluster: sharded pub/sub over the cluster connection.
//!
//! Each channel is subscribed with `SSUBSCRIBE` on the primary owning its slot (one command
//! per channel: channels of different slots cannot share one). The cluster connection speaks
//! RESP3 and hands every push to this task: messages, and the confirmations of subscriptions,
//! both those this task asked for and those the connection re-sent by itself after
//! reconnecting to a node or learning a new slot map.
//!
//! What can interrupt a subscription, and what the task does:
//!
//! * a connection to a node drops: the connection reconnects and resubscribes that node's
//!   channels. Messages may have been lost meanwhile, so every waiter re-checks on the drop and
//!   again on each re-confirmation;
//! * the slot moves (migration, or a failover that promotes a replica): Redis itself ends the
//!   subscription with a `sunsubscribe` push. The task subscribes the channel again, which the
//!   connection sends to the slot's new owner, following `MOVED` if its map is stale;
//! * a node stops answering: the task pings, per slot with waiters, the slot's primary; once a
//!   slot has gone a whole command timeout without an answer its channels are marked
//!   unreachable, so their waiters fail instead of sleeping through the outage, while waiters
//!   on other shards carry on.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{PushInfo, PushKind};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{ping_interval, sleep_or_shutdown, Hub};
use crate::client::Shared;
use crate::keys;

/// A round of pings: each slot asked, and whether its primary answered in time.
type PingRound = Pin<Box<dyn Future<Output = Vec<(u16, bool)>> + Send>>;

/// Subscription bookkeeping of the task.
#[derive(Default)]
struct Subscriptions {
    /// Channels Redis has confirmed and not dropped since.
    on_server: HashSet<String>,
    /// Confirmations still due for `SSUBSCRIBE`/`SUNSUBSCRIBE` commands this task sent; any
    /// other confirmation is the connection's or the server's own doing.
    own_subscribes: HashMap<String, usize>,
    own_unsubscribes: HashMap<String, usize>,
    /// Channels whose subscription Redis ended while they were wanted: messages may have been
    /// missed until they are confirmed again.
    interrupted: HashSet<String>,
    /// Channels with a command on the way: the next one waits for its outcome, so that an
    /// unsubscribe never overtakes a later subscribe.
    in_flight: HashSet<String>,
    /// Channels to bring in line with the wanted set once `retry_at` comes.
    retry: HashSet<String>,
    retry_at: Option<Instant>,
}

/// How one `SSUBSCRIBE` or `SUNSUBSCRIBE` ended.
struct Outcome {
    channel: String,
    subscribe: bool,
    /// Confirmed within the command timeout.
    done: bool,
}

pub(super) async fn run(shared: Arc<Shared>, mut changes: mpsc::UnboundedReceiver<String>) {
    let hub = shared.hub.clone();
    let timeout = shared.config.command_timeout;
    let (push_sender, mut pushes) = mpsc::unbounded_channel::<PushInfo>();
    let client = match crate::client::open_cluster_client(&shared.config, Some(push_sender)) {
        Ok(client) => client,
        Err(err) => {
            // build() opened a client from the same configuration, so this cannot happen.
            tracing::error!(error = %err, "cannot open the cluster for pub/sub; waiters will poll");
            return;
        }
    };
    let mut backoff = Duration::from_millis(20);
    let mut down_since: Option<Instant> = None;
    let connection = loop {
        if let Some(since) = down_since {
            hub.mark_unreachable(since, timeout, |_| true);
        }
        let connected = tokio::select! {
            _ = shared.shutdown.wait() => {
                hub.update_all(|s| s.generation += 1);
                return;
            }
            c = tokio::time::timeout(timeout, client.get_async_connection()) => c,
        };
        match connected {
            Ok(Ok(connection)) => break connection,
            Ok(Err(err)) => tracing::debug!(error = %err, "cluster pub/sub connection failed"),
            Err(_) => tracing::debug!("cluster pub/sub connection timed out"),
        }
        down_since.get_or_insert_with(Instant::now);
        if sleep_or_shutdown(&shared, &mut backoff, &mut changes).await {
            hub.update_all(|s| s.generation += 1);
            return;
        }
    };

    // Commands run on tasks of their own, so that a shard that does not answer holds up
    // neither messages nor the subscriptions of other shards.
    let (outcome_sender, mut outcomes) = mpsc::unbounded_channel::<Outcome>();
    let mut subs = Subscriptions::default();
    let apply = |subs: &mut Subscriptions, touched: HashSet<String>| {
        apply(&hub, &connection, subs, touched, timeout, &outcome_sender)
    };
    apply(&mut subs, hub.wanted());
    let ping_every = ping_interval(timeout);
    let mut next_ping = Instant::now() + ping_every;
    let mut ping: Option<PingRound> = None;
    let mut slot_down_since: HashMap<u16, Instant> = HashMap::new();
    loop {
        let retry_at = subs.retry_at;
        tokio::select! {
            _ = shared.shutdown.wait() => break,
            Some(push) = pushes.recv() => on_push(&hub, &mut subs, push),
            Some(first) = changes.recv() => {
                let mut touched = HashSet::from([first]);
                while let Ok(more) = changes.try_recv() {
                    touched.insert(more);
                }
                apply(&mut subs, touched);
            }
            Some(outcome) = outcomes.recv() => {
                let channel = outcome.channel.clone();
                if on_outcome(&hub, &mut subs, outcome) {
                    // Wanted or not may have changed while the command was on its way.
                    apply(&mut subs, HashSet::from([channel]));
                }
            }
            _ = sleep_until_some(retry_at), if retry_at.is_some() => {
                let touched = std::mem::take(&mut subs.retry);
                subs.retry_at = None;
                apply(&mut subs, touched);
            }
            _ = tokio::time::sleep_until(next_ping), if ping.is_none() => {
                next_ping = Instant::now() + ping_every;
                let slots: HashSet<u16> = hub.wanted().iter().map(|c| keys::slot(c)).collect();
                if !slots.is_empty() {
                    ping = Some(ping_slots(&connection, slots, timeout));
                }
            }
            answers = finish(&mut ping), if ping.is_some() => {
                ping = None;
                let asked: HashSet<u16> = answers.iter().map(|(slot, _)| *slot).collect();
                // A slot nobody waits on any more is not down as far as anyone cares.
                slot_down_since.retain(|slot, _| asked.contains(slot));
                for (slot, answered) in answers {
                    if answered {
                        slot_down_since.remove(&slot);
                        hub.update_where(
                            |channel| keys::slot(channel) == slot && subs.on_server.contains(channel),
                            |s| s.unreachable = false,
                        );
                    } else {
                        slot_down_since.entry(slot).or_insert_with(Instant::now);
                    }
                }
                for (&slot, &since) in &slot_down_since {
                    hub.mark_unreachable(since, timeout, |channel| keys::slot(channel) == slot);
                }
            }
        }
    }
    hub.update_all(|s| s.generation += 1);
}

/// Handles one push from the cluster connection.
fn on_push(hub: &Hub, subs: &mut Subscriptions, push: PushInfo) {
    let channel = push.data.first().and_then(|value| match value {
        redis::Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        _ => None,
    });
    match (push.kind, channel) {
        (PushKind::SMessage, Some(channel)) => hub.update(&channel, |s| s.generation += 1),
        (PushKind::SSubscribe, Some(channel)) => {
            if take_one(&mut subs.own_subscribes, &channel) {
                return; // the confirmation of our own command; handled where it was sent
            }
            // The connection resubscribed by itself (a reconnect or a new slot map): what was
            // published before is lost, so waiters re-check.
            subs.on_server.insert(channel.clone());
            hub.update(&channel, |s| {
                s.subscribed = true;
                s.unreachable = false;
                s.generation += 1;
            });
        }
        (PushKind::SUnsubscribe, Some(channel)) => {
            if take_one(&mut subs.own_unsubscribes, &channel) {
                return;
            }
            // Redis ended the subscription: the slot moved to another node.
            subs.on_server.remove(&channel);
            if hub.is_wanted(&channel) {
                tracing::debug!(%channel, "redis ended a sharded subscription; subscribing again");
                subs.interrupted.insert(channel.clone());
                hub.update(&channel, |s| {
                    s.subscribed = false;
                    s.generation += 1;
                });
                schedule_retry(subs, channel, Duration::from_millis(20));
            }
        }
        (PushKind::Disconnection, _) => {
            // A node's connection dropped (which node is not said): messages may be lost.
            hub.update_all(|s| s.generation += 1);
        }
        _ => {}
    }
}

/// Brings Redis in line with the wanted set for `touched` channels: sends one command per
/// channel that needs one, each on a task of its own reporting to `outcomes`.
fn apply(
    hub: &Hub,
    connection: &ClusterConnection,
    subs: &mut Subscriptions,
    touched: HashSet<String>,
    timeout: Duration,
    outcomes: &mpsc::UnboundedSender<Outcome>,
) {
    for channel in touched {
        if subs.in_flight.contains(&channel) {
            continue; // looked at again when its command ends
        }
        let subscribe = match (hub.is_wanted(&channel), subs.on_server.contains(&channel)) {
            (true, false) => true,
            (false, true) => false,
            (true, true) => {
                hub.update(&channel, |s| {
                    s.subscribed = true;
                    s.unreachable = false;
                });
                continue;
            }
            (false, false) => continue,
        };
        let own = if subscribe {
            &mut subs.own_subscribes
        } else {
            &mut subs.own_unsubscribes
        };
        *own.entry(channel.clone()).or_default() += 1;
        subs.in_flight.insert(channel.clone());
        let mut connection = connection.clone();
        let outcomes = outcomes.clone();
        tokio::spawn(async move {
            let sent = async {
                if subscribe {
                    connection.ssubscribe(&channel).await
                } else {
                    connection.sunsubscribe(&channel).await
                }
            };
            let done = matches!(tokio::time::timeout(timeout, sent).await, Ok(Ok(())));
            // The hub may be gone (shut down): then nobody needs to know.
            let _ = outcomes.send(Outcome {
                channel,
                subscribe,
                done,
            });
        });
    }
}

/// Records how a command ended; returns whether the channel may need another one now.
fn on_outcome(hub: &Hub, subs: &mut Subscriptions, outcome: Outcome) -> bool {
    let Outcome {
        channel,
        subscribe,
        done,
    } = outcome;
    subs.in_flight.remove(&channel);
    if !done {
        let own = if subscribe {
            &mut subs.own_subscribes
        } else {
            &mut subs.own_unsubscribes
        };
        take_one(own, &channel);
        tracing::debug!(%channel, subscribe, "sharded (un)subscribe failed; retrying");
        schedule_retry(subs, channel, Duration::from_millis(200));
        return false;
    }
    if subscribe {
        subs.on_server.insert(channel.clone());
        let missed = subs.interrupted.remove(&channel);
        hub.update(&channel, |s| {
            s.subscribed = true;
            s.unreachable = false;
            if missed {
                s.generation += 1;
            }
        });
    } else {
        subs.on_server.remove(&channel);
        subs.interrupted.remove(&channel);
    }
    true
}

/// Pings the primary of each slot; each answer says whether it came within `timeout`.
fn ping_slots(connection: &ClusterConnection, slots: HashSet<u16>, timeout: Duration) -> PingRound {
    let pings = slots.into_iter().map(|slot| {
        let mut connection = connection.clone();
        async move {
            let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::new(
                slot,
                SlotAddr::Master,
            )));
            let pong =
                tokio::time::timeout(timeout, connection.route_command(redis::cmd("PING"), route))
                    .await;
            (slot, matches!(pong, Ok(Ok(_))))
        }
    });
    Box::pin(futures_util::future::join_all(pings))
}

fn schedule_retry(subs: &mut Subscriptions, channel: String, after: Duration) {
    subs.retry.insert(channel);
    let at = Instant::now() + after;
    subs.retry_at = Some(subs.retry_at.map_or(at, |current| current.min(at)));
}

/// Decrements `channel`'s count in `counts`; false if there was none.
fn take_one(counts: &mut HashMap<String, usize>, channel: &str) -> bool {
    match counts.get_mut(channel) {
        Some(count) if *count > 1 => {
            *count -= 1;
            true
        }
        Some(_) => {
            counts.remove(channel);
            true
        }
        None => false,
    }
}

async fn finish(round: &mut Option<PingRound>) -> Vec<(u16, bool)> {
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
