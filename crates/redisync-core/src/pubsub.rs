//! The pub/sub hub: one subscriber connection per client, shared by every waiter.
//!
//! Waiters hold a [`Subscription`] to a channel; subscriptions are reference-counted per
//! channel, so the client sends `SUBSCRIBE` when the first local waiter of a channel arrives
//! and `UNSUBSCRIBE` after the last one leaves. Each channel has a [`watch`] of
//! [`ChannelState`]: a message bumps its generation, and a waiter that noted the generation
//! before asking Redis sees any message that arrived since (no lost wake-up between "busy" and
//! "waiting").
//!
//! One background task owns the connection. It applies subscription changes in order (so an
//! unsubscribe never overtakes a later subscribe), delivers messages, and after a lost
//! connection reconnects, resubscribes every channel still wanted and bumps every generation
//! so that all waiters re-check: messages published while it was away are gone for good.
//!
//! While any channel is subscribed the task pings Redis every [`ping_interval`], so that a
//! server that stops answering (paused, or cut off without a reset) is noticed even though no
//! waiter has a request in flight: waiters then fail with [`Error::Timeout`] instead of
//! sleeping until the holder's lease would end.
//!
//! With [`WaitStrategy::Poll`] the hub never connects. Every
//! subscription reports itself subscribed at once, and one background task bumps the
//! generation of every wanted channel once per (jittered) interval: a waiter cannot tell a
//! tick from a message, so the waiting code is the same for both strategies, and the waiters
//! of one primitive still share one channel, so they still ask Redis once per tick together.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use crate::locking::lock;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::{mpsc, watch};

use crate::error::{Error, Result};
use crate::strategy::{jittered, WaitStrategy};
use crate::transport::Transport;

mod sharded;

/// What a waiter can observe about its channel.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChannelState {
    /// Whether Redis has confirmed the subscription on the current connection.
    pub subscribed: bool,
    /// Bumped on every message, and after every reconnect.
    pub generation: u64,
    /// The message that last bumped the generation, if a message did (not a reconnect, a
    /// poll tick or a shutdown). Messages that arrive close together replace each other: a
    /// waiter may see only the last, so a message can only ever be advice.
    pub message: Option<Arc<str>>,
    /// The hub could not reach Redis for a whole command timeout: reconnecting kept failing,
    /// or the connection stopped answering pings. Cleared once the subscription is confirmed
    /// again. Waiters give up on seeing it instead of sleeping through an outage.
    pub unreachable: bool,
}

impl ChannelState {
    /// Something other than a message happened that waiters must re-check for.
    pub(crate) fn bump(&mut self) {
        self.generation += 1;
        self.message = None;
    }

    /// A message arrived.
    pub(crate) fn deliver(&mut self, message: Arc<str>) {
        self.generation += 1;
        self.message = Some(message);
    }
}

struct ChannelSlot {
    refs: usize,
    /// The channel's Redis Cluster slot, for the sharded hub's per-shard bookkeeping.
    slot: u16,
    state: Arc<watch::Sender<ChannelState>>,
    /// When the first local waiter asked for the channel: an outage counts against a waiter
    /// only from then on.
    wanted_since: tokio::time::Instant,
}

/// The client-wide registry of wanted channels.
pub(crate) struct Hub {
    channels: Mutex<HashMap<String, ChannelSlot>>,
    /// The poll interval, for a client that polls instead of subscribing.
    poll: Option<Duration>,
    changes_tx: mpsc::UnboundedSender<String>,
    changes_rx: Mutex<Option<mpsc::UnboundedReceiver<String>>>,
}

impl Hub {
    pub(crate) fn new(strategy: WaitStrategy) -> Self {
        let (changes_tx, changes_rx) = mpsc::unbounded_channel();
        Hub {
            channels: Mutex::default(),
            poll: match strategy {
                WaitStrategy::PubSub => None,
                WaitStrategy::Poll { interval } => Some(interval),
            },
            changes_tx,
            changes_rx: Mutex::new(Some(changes_rx)),
        }
    }

    /// Takes a reference on `channel`, subscribing if it is the first.
    pub(crate) fn subscribe(self: &Arc<Self>, channel: &str) -> Subscription {
        let mut channels = lock(&self.channels);
        let slot = channels
            .entry(channel.to_owned())
            .or_insert_with(|| ChannelSlot {
                refs: 0,
                slot: crate::keys::slot(channel),
                state: Arc::new(watch::Sender::new(ChannelState {
                    // Polled channels are never subscribed on the server: there is nothing
                    // to wait for.
                    subscribed: self.poll.is_some(),
                    ..ChannelState::default()
                })),
                wanted_since: tokio::time::Instant::now(),
            });
        slot.refs += 1;
        // A first waiter needs the subscription; a waiter joining a channel that is down
        // should not wait out the hub's reconnect backoff.
        if slot.refs == 1 || slot.state.borrow().unreachable {
            let _ = self.changes_tx.send(channel.to_owned());
        }
        Subscription {
            hub: self.clone(),
            channel: channel.to_owned(),
            state: slot.state.clone(),
        }
    }

    fn release(&self, channel: &str) {
        let mut channels = lock(&self.channels);
        if let Some(slot) = channels.get_mut(channel) {
            slot.refs -= 1;
            if slot.refs == 0 {
                channels.remove(channel);
                let _ = self.changes_tx.send(channel.to_owned());
            }
        }
    }

    fn wanted(&self) -> HashSet<String> {
        lock(&self.channels).keys().cloned().collect()
    }

    fn is_wanted(&self, channel: &str) -> bool {
        lock(&self.channels).contains_key(channel)
    }

    fn update(&self, channel: &str, change: impl Fn(&mut ChannelState)) {
        if let Some(slot) = lock(&self.channels).get(channel) {
            notify_if_changed(&slot.state, &change);
        }
    }

    fn update_all(&self, change: impl Fn(&mut ChannelState)) {
        self.update_where(|_, _| true, change);
    }

    /// Applies `change` to every channel `which` picks by name and cluster slot.
    fn update_where(&self, which: impl Fn(&str, u16) -> bool, change: impl Fn(&mut ChannelState)) {
        for (channel, entry) in lock(&self.channels).iter() {
            if which(channel, entry.slot) {
                notify_if_changed(&entry.state, &change);
            }
        }
    }

    /// The cluster slots of the wanted channels.
    fn wanted_slots(&self) -> HashSet<u16> {
        lock(&self.channels)
            .values()
            .map(|entry| entry.slot)
            .collect()
    }

    /// Marks unreachable every channel that has gone a whole `timeout` without a confirmed
    /// subscription since Redis became unreachable for it (`down_since` of its cluster slot;
    /// `None`: reachable), or since it was wanted, if later: a waiter that arrived during the
    /// outage gets a full timeout of its own.
    fn mark_unreachable(
        &self,
        timeout: Duration,
        down_since: impl Fn(u16) -> Option<tokio::time::Instant>,
    ) {
        let now = tokio::time::Instant::now();
        for entry in lock(&self.channels).values() {
            let Some(since) = down_since(entry.slot) else {
                continue;
            };
            if now.duration_since(entry.wanted_since.max(since)) >= timeout {
                notify_if_changed(&entry.state, &|s: &mut ChannelState| s.unreachable = true);
            }
        }
    }

    /// Number of channels with at least one local subscriber.
    pub(crate) fn channel_count(&self) -> usize {
        lock(&self.channels).len()
    }
}

/// Applies `change`, waking watchers only if the state really changed: a waiter woken for
/// nothing would send a useless request.
fn notify_if_changed(state: &watch::Sender<ChannelState>, change: &impl Fn(&mut ChannelState)) {
    state.send_if_modified(|s| {
        let before = s.clone();
        change(s);
        *s != before
    });
}

/// A reference on one channel. Dropping the last reference of a channel unsubscribes it.
pub struct Subscription {
    hub: Arc<Hub>,
    channel: String,
    state: Arc<watch::Sender<ChannelState>>,
}

impl Subscription {
    /// The channel this subscription listens to.
    pub fn channel(&self) -> &str {
        &self.channel
    }

    /// A receiver of the channel's state; each waiter takes its own.
    pub fn watcher(&self) -> watch::Receiver<ChannelState> {
        self.state.subscribe()
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.hub.release(&self.channel);
    }
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("channel", &self.channel)
            .finish()
    }
}

/// Waits until the channel's subscription is confirmed, at most `timeout`. Fails at once with
/// [`Error::Timeout`] when the hub finds Redis unreachable; an outage the hub had already
/// reported before this call does not count against it (Redis may be back, and the hub about
/// to reconnect), so such a waiter gets its whole `timeout`.
pub(crate) async fn ready(
    watcher: &mut watch::Receiver<ChannelState>,
    timeout: Duration,
) -> Result<()> {
    let stale_outage = watcher.borrow_and_update().unreachable;
    let settled = watcher.wait_for(|s| s.subscribed || (s.unreachable && !stale_outage));
    match tokio::time::timeout(timeout, settled).await {
        Ok(Ok(state)) if state.subscribed => Ok(()),
        Ok(Ok(_)) => Err(Error::Timeout),
        Ok(Err(_)) => Err(Error::Shutdown),
        Err(_) => Err(Error::Timeout),
    }
}

/// How often the hub pings Redis while it has subscriptions.
pub fn ping_interval(command_timeout: Duration) -> Duration {
    (command_timeout / 3).clamp(Duration::from_millis(50), Duration::from_secs(1))
}

pub(crate) fn spawn(transport: &Arc<Transport>, hub: &Arc<Hub>) {
    let Some(changes) = lock(&hub.changes_rx).take() else {
        return;
    };
    let (transport, hub) = (transport.clone(), hub.clone());
    if let Some(interval) = hub.poll {
        transport
            .runtime
            .clone()
            .spawn(poll(transport, hub, interval, changes));
    } else if transport.sharded() {
        transport
            .runtime
            .clone()
            .spawn(sharded::run(transport, hub, changes));
    } else {
        transport
            .runtime
            .clone()
            .spawn(run(transport, hub, changes));
    }
}

async fn run(
    transport: Arc<Transport>,
    hub: Arc<Hub>,
    mut changes: mpsc::UnboundedReceiver<String>,
) {
    let timeout = transport.config.command_timeout;
    let mut backoff = Duration::from_millis(20);
    // Since when reconnecting has been failing; a brief blip (a killed connection, a restart)
    // must not fail the waiters, an outage of a whole command timeout must.
    let mut down_since: Option<tokio::time::Instant> = None;
    loop {
        if let Some(since) = down_since {
            hub.mark_unreachable(timeout, |_| Some(since));
        }
        // Asked each time: under Sentinel the primary may have moved.
        let Some(client) = transport.redis_client() else {
            return; // a cluster client runs the sharded hub instead
        };
        let connected = tokio::select! {
            _ = transport.shutdown.wait() => break,
            c = tokio::time::timeout(timeout, client.get_async_pubsub()) => c,
        };
        let (mut sink, mut stream) = match connected {
            Ok(Ok(pubsub)) => pubsub.split(),
            Ok(Err(err)) => {
                tracing::debug!(error = %err, "pub/sub connection failed; retrying");
                crate::transport::sentinel::recheck_primary(&transport, &Error::from(err));
                down_since.get_or_insert_with(tokio::time::Instant::now);
                if sleep_or_shutdown(&transport, &mut backoff, &mut changes).await {
                    break;
                }
                continue;
            }
            Err(_) => {
                tracing::debug!("pub/sub connection timed out; retrying");
                crate::transport::sentinel::recheck_primary(&transport, &Error::Timeout);
                down_since.get_or_insert_with(tokio::time::Instant::now);
                if sleep_or_shutdown(&transport, &mut backoff, &mut changes).await {
                    break;
                }
                continue;
            }
        };
        let mut on_server: HashSet<String> = HashSet::new();
        let wanted: Vec<String> = hub.wanted().into_iter().collect();
        if !wanted.is_empty() {
            match tokio::time::timeout(timeout, sink.subscribe(&wanted)).await {
                Ok(Ok(())) => on_server.extend(wanted),
                _ => {
                    down_since.get_or_insert_with(tokio::time::Instant::now);
                    if sleep_or_shutdown(&transport, &mut backoff, &mut changes).await {
                        break;
                    }
                    continue;
                }
            }
        }
        backoff = Duration::from_millis(20);
        down_since = None;
        // Everything published while we were away is lost: wake every waiter to re-check.
        for channel in &on_server {
            hub.update(channel, |s| {
                s.subscribed = true;
                s.unreachable = false;
                s.bump();
            });
        }
        let ping_every = ping_interval(timeout);
        let mut next_ping = tokio::time::Instant::now() + ping_every;
        loop {
            let ping_due = !on_server.is_empty();
            tokio::select! {
                _ = transport.shutdown.wait() => {
                    hub.update_all(|s| s.bump());
                    return;
                }
                message = stream.next() => match message {
                    Some(message) => {
                        let payload: Arc<str> = message
                            .get_payload::<String>()
                            .unwrap_or_default()
                            .into();
                        hub.update(message.get_channel_name(), |s| s.deliver(payload.clone()));
                    }
                    None => break,
                },
                Some(first) = changes.recv() => {
                    let mut touched = HashSet::from([first]);
                    while let Ok(more) = changes.try_recv() {
                        touched.insert(more);
                    }
                    if apply(&hub, &mut sink, &mut on_server, touched, timeout).await.is_err() {
                        break;
                    }
                }
                _ = tokio::time::sleep_until(next_ping), if ping_due => {
                    let sent = tokio::time::Instant::now();
                    next_ping = sent + ping_every;
                    let pong = tokio::time::timeout(timeout, sink.ping::<redis::Value>()).await;
                    if !matches!(pong, Ok(Ok(_))) {
                        // A whole command timeout without an answer: that is an outage.
                        tracing::warn!("redis did not answer a ping on the pub/sub connection");
                        down_since = Some(sent);
                        hub.mark_unreachable(timeout, |_| Some(sent));
                        break;
                    }
                }
            }
            if !ping_due && !on_server.is_empty() {
                next_ping = tokio::time::Instant::now() + ping_every;
            }
        }
        tracing::debug!("pub/sub connection lost; reconnecting");
        transport.config.metrics.pubsub_reconnect();
        down_since.get_or_insert_with(tokio::time::Instant::now);
        hub.update_all(|s| {
            s.subscribed = false;
            s.bump();
        });
    }
    hub.update_all(|s| s.bump());
}

/// The hub of a polling client: wakes the waiters of every wanted channel once per jittered
/// `interval`, as a message would, until the client shuts down. With no channel wanted it
/// sleeps until one is (`changes` tells it, as it tells the subscribing hub).
async fn poll(
    transport: Arc<Transport>,
    hub: Arc<Hub>,
    interval: Duration,
    mut changes: mpsc::UnboundedReceiver<String>,
) {
    // Kept across channel changes: waiters coming and going must not put the tick off.
    let mut next_tick = None;
    loop {
        if hub.channel_count() == 0 {
            next_tick = None;
        } else if next_tick.is_none() {
            next_tick = Some(tokio::time::Instant::now() + jittered(interval));
        }
        tokio::select! {
            _ = transport.shutdown.wait() => break,
            // Only wakes the loop: whether a channel is wanted is the hub's to say.
            Some(_) = changes.recv() => {}
            _ = sleep_until_some(next_tick) => {
                hub.update_all(|s| s.bump());
                next_tick = None;
            }
        }
    }
    hub.update_all(|s| s.bump());
}

/// Sleeps until `at`; for ever when `None`.
async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Brings the server's subscriptions in line with the wanted set for `touched` channels.
async fn apply(
    hub: &Hub,
    sink: &mut redis::aio::PubSubSink,
    on_server: &mut HashSet<String>,
    touched: HashSet<String>,
    timeout: Duration,
) -> std::result::Result<(), ()> {
    let mut subscribe = Vec::new();
    let mut unsubscribe = Vec::new();
    for channel in touched {
        match (hub.is_wanted(&channel), on_server.contains(&channel)) {
            (true, false) => subscribe.push(channel),
            (false, true) => unsubscribe.push(channel),
            (true, true) => hub.update(&channel, |s| {
                s.subscribed = true;
                s.unreachable = false;
            }),
            (false, false) => {}
        }
    }
    if !unsubscribe.is_empty() {
        match tokio::time::timeout(timeout, sink.unsubscribe(&unsubscribe)).await {
            Ok(Ok(())) => {
                for channel in &unsubscribe {
                    on_server.remove(channel);
                }
            }
            _ => return Err(()),
        }
    }
    if !subscribe.is_empty() {
        match tokio::time::timeout(timeout, sink.subscribe(&subscribe)).await {
            Ok(Ok(())) => {
                for channel in subscribe {
                    hub.update(&channel, |s| {
                        s.subscribed = true;
                        s.unreachable = false;
                    });
                    on_server.insert(channel);
                }
            }
            _ => return Err(()),
        }
    }
    Ok(())
}

/// Sleeps for the backoff (doubling it, up to 1 s) before the next reconnect; returns true if
/// shutdown came first. A change of the wanted channels ends the sleep early: a new waiter
/// should not wait out the backoff of an outage that may be over. (The change itself needs
/// no handling: a reconnect subscribes every wanted channel.)
async fn sleep_or_shutdown(
    transport: &Transport,
    backoff: &mut Duration,
    changes: &mut mpsc::UnboundedReceiver<String>,
) -> bool {
    let pause = *backoff;
    *backoff = (*backoff * 2).min(Duration::from_secs(1));
    tokio::select! {
        _ = transport.shutdown.wait() => true,
        _ = tokio::time::sleep(pause) => false,
        Some(_) = changes.recv() => false,
    }
}
