//! Waiting for a busy primitive: local queues, pub/sub wake-ups and bounded sleeps.
//!
//! [`Toolkit::acquire`](crate::toolkit::Toolkit::acquire) is the one waiting loop every
//! primitive uses. A primitive supplies an attempt (one script call that either acquires or
//! says how long the current hold has left) and the channel its releases publish on; core does
//! the rest:
//!
//! 1. Try once. Uncontended, that is the whole cost: one round trip, no subscription. A call
//!    that finds local waiters already queued skips this try and queues behind them (unless it
//!    may be a re-entry): a task that just released would otherwise win every race against the
//!    waiters of its own client, which must first hear the release over pub/sub. A call whose
//!    primitive says it is most likely taken ([`WaitSpec::expect_busy`]) skips it too.
//! 2. Otherwise join the client's local queue for this primitive. Only the queue's head talks
//!    to Redis; the others wait in-process, so N local waiters cost O(1) requests
//!    per release instead of O(N).
//! 3. The head subscribes (shared, reference-counted), waits for the subscription to be
//!    confirmed, notes the channel's generation, then retries. Subscribing before retrying
//!    closes the race where a release is published between the failed try and the subscribe.
//! 4. While busy, it sleeps until a message arrives or the time the attempt reported runs out
//!    (the holder's remaining lease), whichever is first, so a lost message costs at most that.
//! 5. A head whose attempt is granted while more tasks queue behind it may answer
//!    [`Attempt::AcquiredStillWaiting`]: its grant kept the client registered for them in
//!    Redis (each attempt is told whether any queue, [`Turn`]). It leaves the channel's
//!    generation as of its send to the next head. If the generation has not moved when that
//!    head makes its first attempt, no wake-up has come since the grant (every one published
//!    after it moves the generation, whenever it arrives), and the attempt is told so
//!    ([`Turn::handed_over`]): a lock held by another owner then answers busy without asking
//!    Redis, and a hand-off costs the release and one acquire.
//!
//! 6. A wake-up may carry what the release did for the head: the head's attempt gets the
//!    message that woke it ([`Turn::message`]), and a primitive whose releases hand it over in
//!    the wake-up (the plain lock) can then answer without a request. Messages are advice:
//!    two that arrive close together leave only the second, so a primitive must also get
//!    what the first carried by asking.
//!
//! With [`WaitStrategy::Poll`](crate::WaitStrategy::Poll) nothing here changes: the hub then
//! reports every subscription confirmed at once and ticks each wanted channel once per poll
//! interval, which wakes the head as a message would (see [`pubsub`]).
//!
//! Shared waiters (readers) skip the queue of step 2: they wait side by side, and one release
//! message wakes every one of them, since they can all get in together.
//!
//! Everything is released on every exit path, including the caller dropping the future: the
//! queue place and subscription are RAII values, and an attempt that was on the wire finishes
//! in the background and undoes itself (see [`Abandonable`](crate::Abandonable)).

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::task::Poll;

use crate::locking::lock;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tracing::Instrument;

use crate::error::{Error, Result};
use crate::pubsub::{self, Subscription};
use crate::stats::Counters;
use crate::transport::Transport;

/// The outcome of one acquire attempt.
#[derive(Debug)]
pub enum Attempt<T> {
    /// The primitive was acquired.
    Acquired(T),
    /// The primitive was acquired, and the grant kept the client registered in Redis as
    /// waiting, for the tasks of this client queued behind the caller (see [`Turn`] and
    /// `lua/wake_prelude.lua`). A wake-up published after this attempt was sent then reaches
    /// the next head, whose first attempt is told so ([`Turn::handed_over`]) if none came
    /// before it took its turn.
    AcquiredStillWaiting(T),
    /// The primitive is busy; try again after at most `retry_in` (the holder's remaining lease,
    /// when known). `None` means no bound is known; core then re-checks periodically.
    Busy {
        /// The longest sensible wait before trying again.
        retry_in: Option<Duration>,
    },
}

impl<T> Attempt<T> {
    /// What was acquired, if anything.
    fn held(self) -> Option<T> {
        match self {
            Attempt::Acquired(held) | Attempt::AcquiredStillWaiting(held) => Some(held),
            Attempt::Busy { .. } => None,
        }
    }
}

/// What the waiting loop tells an attempt about its caller's place.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Turn {
    /// The caller's first try, made before it queues or subscribes: unless other tasks of
    /// the client wait (whose head listens), a wake-up published meanwhile would reach
    /// nobody, so it should not register the client as waiting (if it finds the primitive
    /// taken, its head subscribes and asks again, and that attempt registers it).
    pub first_try: bool,
    /// Other tasks of this client wait for the primitive in its local queue, behind the
    /// caller. An attempt that may register the client as waiting can then ask Redis to keep
    /// it registered if it is granted, and say so with [`Attempt::AcquiredStillWaiting`].
    /// Always false for [`shared`](WaitSpec::shared) waits, which have no queue.
    pub others_waiting: bool,
    /// The caller just became the head of its local queue after a task ahead of it was
    /// granted with [`Attempt::AcquiredStillWaiting`], and no wake-up has come since that
    /// grant was sent: the client is still registered, and every wake-up published from then
    /// on will wake the caller. A primitive that only a release can open to the caller (a
    /// lock held by another owner) may answer busy without asking Redis, sparing a request
    /// per hand-off; one that may have room for it (a semaphore with permits left, a lock
    /// its owner holds) asks as usual.
    pub handed_over: bool,
    /// The message on the primitive's channel that woke the caller, if a message did (the
    /// latest one since the caller's previous attempt; see [`ChannelState::message`]). A
    /// primitive whose releases hand it over in the wake-up itself may take what the message
    /// grants without asking Redis, if it can tell that the grant is its own and still live.
    ///
    /// [`ChannelState::message`]: crate::pubsub::ChannelState::message
    pub message: Option<std::sync::Arc<str>>,
}

/// How long to wait when an attempt reports no bound, and the longest single sleep: a waiter
/// re-checks at least this often even if every message is lost.
pub const MAX_SLEEP: Duration = Duration::from_secs(10);

/// How often a waiter whose client is registered for an addressed wake-up re-checks (and so
/// registers again) even if no wake-up comes: a wake-up lost with a stopped client, or a
/// registration lost with a failed-over primary, costs the others at most this much.
pub const RECHECK: Duration = Duration::from_secs(1);

/// Where waiters of one primitive meet.
#[derive(Debug, Clone, Copy)]
pub struct WaitSpec<'a> {
    /// The kind of primitive (`"lock"`, `"semaphore"`...), for metrics: the same as its
    /// scripts' ([`LuaScript::kind`](crate::LuaScript::kind)).
    pub kind: &'static str,
    /// Identifies the primitive within the client (its main key); waiters with the same queue
    /// key share one local queue.
    pub queue: &'a str,
    /// The channel releases of this primitive publish on.
    pub channel: &'a str,
    /// Give up (returning `Ok(None)`) at this instant; `None` waits for ever.
    pub deadline: Option<Instant>,
    /// Try Redis at once even when local waiters are queued, instead of queueing behind them
    /// first: for a caller that may already hold the primitive (a re-entry; queueing it behind
    /// waiters that wait for it would deadlock), or that needs an answer of its own before it
    /// waits (a latch waiter learning which arming it waits on).
    pub may_reenter: bool,
    /// Waiters wait side by side, each on the channel by itself, instead of queueing behind a
    /// head: for shared holds (a read lock, whose waiters can all get in together, so one
    /// message wakes them all), for conditions (a latch opening), and where Redis orders the
    /// waiters itself (a fair lock, each waiter with a channel of its own). Exclusive and
    /// shared waiters of one primitive should use different `queue` names.
    pub shared: bool,
    /// The primitive is most likely taken (the client's last attempt on it found it so): skip
    /// the first try and wait at once (subscribe, then ask), which saves the request that try
    /// would cost under contention, and costs an acquire that finds the primitive free after
    /// all the wait for its subscription. Such a call still asks Redis at least once: if the
    /// subscription is not confirmed before its deadline or the command timeout, it asks
    /// before it gives up. It counts as a contended wait only once an ask finds the primitive
    /// taken. Ignored with [`may_reenter`](WaitSpec::may_reenter) and by a call whose deadline
    /// has passed, which try at once.
    pub expect_busy: bool,
}

/// One primitive's local queue. Its key lives here, once, rather than in every ticket.
pub(crate) struct QueueSlot {
    key: Box<str>,
    /// The head's place: one permit, held by the task that talks to Redis. Closed when the
    /// client shuts down, which is how a task waiting behind the head learns of it (one
    /// future per queued task, not two).
    head: tokio::sync::Semaphore,
    subscription: Mutex<Option<Arc<Subscription>>>,
    /// The last error a head met, with a count of errors so far. Waiters behind the head give
    /// up with it rather than each waiting a command timeout of its own in turn when Redis is
    /// unreachable.
    failures: watch::Sender<(u64, Option<Error>)>,
    /// Left by a head whose grant kept the client registered for the tasks behind it
    /// ([`Attempt::AcquiredStillWaiting`]), for the next head: the channel's generation when
    /// the granting attempt was sent. A wake-up published after the grant (which ran after
    /// the send) moves it on, whenever it arrives, so a next head that still finds it has
    /// missed none ([`Turn::handed_over`]).
    handover: Mutex<Option<u64>>,
}

impl QueueSlot {
    fn new(key: &str) -> Self {
        QueueSlot {
            key: key.into(),
            head: tokio::sync::Semaphore::new(1),
            subscription: Mutex::default(),
            failures: watch::Sender::default(),
            handover: Mutex::default(),
        }
    }

    fn fail(&self, err: &Error) {
        self.failures.send_modify(|(count, last)| {
            *count += 1;
            *last = Some(err.clone());
        });
    }
}

/// The client's local wait queues, one per primitive with waiters.
#[derive(Default)]
pub(crate) struct WaitQueues {
    slots: Mutex<HashMap<String, Queue>>,
}

/// One primitive's queue and how many tickets it has out. The count is kept under the map's
/// lock, where tickets are made and given back, so "last one out" is exact even when tickets
/// are dropped at once on different threads (a count of `Arc` references is not: a ticket's
/// reference goes only after its drop has released the lock).
struct Queue {
    slot: Arc<QueueSlot>,
    tickets: usize,
}

/// A place in a local queue; dropping it leaves the queue (and removes an empty queue).
struct Ticket {
    queues: Arc<WaitQueues>,
    slot: Arc<QueueSlot>,
}

impl Ticket {
    fn slot(&self) -> &QueueSlot {
        &self.slot
    }
}

impl WaitQueues {
    fn join(self: &Arc<Self>, key: &str) -> Ticket {
        let mut slots = lock(&self.slots);
        let queue = slots.entry(key.to_owned()).or_insert_with(|| Queue {
            slot: Arc::new(QueueSlot::new(key)),
            tickets: 0,
        });
        queue.tickets += 1;
        let slot = queue.slot.clone();
        drop(slots);
        Ticket {
            queues: self.clone(),
            slot,
        }
    }

    pub(crate) fn len(&self) -> usize {
        lock(&self.slots).len()
    }

    pub(crate) fn has_waiters(&self, key: &str) -> bool {
        lock(&self.slots).contains_key(key)
    }

    /// How many tasks are in the queue `key` (the head included).
    fn queued(&self, key: &str) -> usize {
        lock(&self.slots).get(key).map_or(0, |queue| queue.tickets)
    }

    /// Wakes every task waiting behind a head, for a client that shut down. Called after the
    /// shutdown flag is set: a queue made after this sweep is made by a task that then sees
    /// the flag (both happen under the map's lock).
    pub(crate) fn close(&self) {
        for queue in lock(&self.slots).values() {
            queue.slot.head.close();
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut slots = lock(&self.queues.slots);
        if let Some(queue) = slots.get_mut(&*self.slot.key) {
            if Arc::ptr_eq(&queue.slot, &self.slot) {
                queue.tickets -= 1;
                if queue.tickets == 0 {
                    slots.remove(&*self.slot.key);
                }
            }
        }
    }
}

/// What the waiting loop needs of a client: its transport, pub/sub hub and local queues.
pub(crate) trait Waits {
    fn transport(&self) -> &Transport;
    fn hub(&self) -> &Arc<pubsub::Hub>;
    fn queues(&self) -> &Arc<WaitQueues>;

    /// Fails with [`Error::Shutdown`] once the client is shut down.
    fn check_running(&self) -> Result<()> {
        if self.is_shut_down() {
            Err(Error::Shutdown)
        } else {
            Ok(())
        }
    }

    fn is_shut_down(&self) -> bool {
        self.transport().shutdown.is_set()
    }
}

/// Runs the waiting loop in a span, recording the wait and its outcome; `acquisition`
/// says whether it is an acquire (a `redisync.acquire` span, counted in the acquire
/// statistics) or a wait (a `redisync.wait` span).
// A waiting task's memory is mostly this future, so it is laid out with care: not an
// `async fn` (those keep a second copy of every argument), the arguments are kept once
// and lent to the loop, and the span is made where it is moved into its instrumented
// future (at the first poll, inside the caller's span, as an `async fn` would make it).
#[allow(clippy::manual_async_fn)]
pub(crate) fn wait_traced<'a, W, T, F, Fut>(
    waits: &'a W,
    spec: WaitSpec<'a>,
    mut attempt: F,
    acquisition: bool,
) -> impl Future<Output = Result<Option<T>>> + 'a
where
    W: Waits + ?Sized,
    F: FnMut(Turn) -> Fut + 'a,
    Fut: Future<Output = Result<Attempt<T>>> + 'a,
    T: 'a,
{
    async move {
        let started = Instant::now();
        let span = if acquisition {
            tracing::debug_span!(
                "redisync.acquire",
                queue = spec.queue,
                shared = spec.shared,
                waited_ms = tracing::field::Empty,
                outcome = tracing::field::Empty,
            )
        } else {
            tracing::debug_span!(
                "redisync.wait",
                queue = spec.queue,
                waited_ms = tracing::field::Empty,
                outcome = tracing::field::Empty,
            )
        };
        let mut waiting =
            std::pin::pin!(wait_for_turn(waits, &spec, &mut attempt, acquisition).instrument(span));
        let result = waiting.as_mut().await;
        let span = waiting.span();
        let waited = started.elapsed();
        span.record("waited_ms", waited.as_millis() as u64);
        if acquisition {
            let outcome = match &result {
                Ok(Some(_)) => "acquired",
                Ok(None) => "timed_out",
                Err(_) => "failed",
            };
            let metrics = waits.transport().config.metrics;
            metrics.acquire_ended(spec.kind, spec.queue, outcome, waited);
        }
        match &result {
            Ok(Some(_)) => {
                span.record("outcome", "acquired");
                if acquisition {
                    Counters::bump(&waits.transport().counters.acquires, 1);
                }
            }
            Ok(None) => {
                span.record("outcome", "busy");
            }
            Err(err) => {
                span.record("outcome", tracing::field::display(err));
            }
        }
        result
    }
}

// Not an `async fn` either, for the same reason.
#[allow(clippy::manual_async_fn)]
fn wait_for_turn<'s, W, T, F, Fut>(
    waits: &'s W,
    spec: &'s WaitSpec<'_>,
    attempt: &'s mut F,
    acquisition: bool,
) -> impl Future<Output = Result<Option<T>>> + 's
where
    W: Waits + ?Sized,
    F: FnMut(Turn) -> Fut,
    Fut: Future<Output = Result<Attempt<T>>>,
{
    async move {
        // `waits.queues()` and `ticket.slot()` are not kept in locals: every local that
        // lives across an await is kept in every waiting task.
        waits.check_running()?;
        let queued = !spec.shared && waits.queues().has_waiters(spec.queue);
        let no_wait = spec.deadline.is_some_and(|d| Instant::now() >= d);
        let tries_first = (!queued && !spec.expect_busy) || spec.may_reenter || no_wait;
        // Not asked yet only because the primitive expects to find itself taken: the head's
        // part asks once even if it cannot listen, and counts the wait as contended only
        // once an ask finds the primitive taken.
        let unasked = !tries_first && !queued;
        let first_ask = unasked.then_some(acquisition);
        if tries_first {
            // Boxed, as is the head's part below: a task waiting behind the head then
            // keeps only this function's small state, not an attempt's or the head's (a
            // waiting task's memory is this future's size).
            let turn = Turn {
                first_try: true,
                others_waiting: queued,
                ..Turn::default()
            };
            if let Some(held) = Box::pin(attempt(turn)).await?.held() {
                return Ok(Some(held));
            }
            if no_wait {
                return Ok(None);
            }
        }
        if acquisition && !unasked {
            count_contended(waits, spec);
        }

        let ticket = waits.queues().join(spec.queue);
        if waits.is_shut_down() {
            // Shut down before this queue place was made: the shutdown's sweep of the
            // queues may not have seen it (see `WaitQueues::close`).
            return Err(Error::Shutdown);
        }
        if spec.shared {
            return Box::pin(wait_as_head(waits, spec, ticket.slot(), attempt, first_ask)).await;
        }
        // A task waiting behind the head keeps only this: the head's permit, and a timer
        // when it has a deadline. A head that fails records the failure before it lets
        // the next task in, which then returns it at once, and so on down the queue:
        // waiters behind a head that met an outage do not each wait a command timeout of
        // their own.
        let seen_failures = ticket.slot().failures.borrow().0;
        let head = {
            let mut turn = std::pin::pin!(ticket.slot().head.acquire());
            let mut deadline = spec
                .deadline
                .map(|at| Box::pin(tokio::time::sleep_until(at.into())));
            // The head's place first: a task that gets it as its deadline passes goes on.
            std::future::poll_fn(|cx| {
                if let Poll::Ready(head) = turn.as_mut().poll(cx) {
                    return Poll::Ready(Some(head));
                }
                match deadline.as_mut().map(|sleep| sleep.as_mut().poll(cx)) {
                    Some(Poll::Ready(())) => Poll::Ready(None),
                    _ => Poll::Pending,
                }
            })
            .await
        };
        let _head = match head {
            Some(Ok(permit)) => permit,
            // Closed: the client shut down.
            Some(Err(_)) => return Err(Error::Shutdown),
            None => return Ok(None),
        };
        let failures = ticket.slot().failures.borrow().clone();
        if failures.0 > seen_failures {
            return Err(failures.1.unwrap_or(Error::Shutdown));
        }
        if waits.is_shut_down() {
            return Err(Error::Shutdown);
        }
        let result = Box::pin(wait_as_head(waits, spec, ticket.slot(), attempt, first_ask)).await;
        if let Err(err) = &result {
            // Only an unreachable Redis (or a shutdown) concerns the waiters behind; an
            // error about this caller's own request (an upgrade refused, a bad argument)
            // does not.
            if matches!(err, Error::Redis(_) | Error::Timeout | Error::Shutdown) {
                ticket.slot().fail(err);
            }
        }
        result
    }
}

/// Counts a wait for the primitive of `spec` as contended, in the stats and the metrics.
fn count_contended<W: Waits + ?Sized>(waits: &W, spec: &WaitSpec<'_>) {
    Counters::bump(&waits.transport().counters.contended_waits, 1);
    waits
        .transport()
        .config
        .metrics
        .contended(spec.kind, spec.queue, 1);
}

/// The head's part: subscribe, retry, sleep until woken or the holder's lease runs out.
/// `unasked` is set for a caller that skipped its first try ([`WaitSpec::expect_busy`]):
/// it asks once before it gives up on a subscription that does not come, as that try would
/// have, and its wait counts as contended (if `unasked` holds `true`: an acquisition) once
/// an ask finds the primitive taken.
async fn wait_as_head<W, T, F, Fut>(
    waits: &W,
    spec: &WaitSpec<'_>,
    slot: &QueueSlot,
    attempt: &mut F,
    mut unasked: Option<bool>,
) -> Result<Option<T>>
where
    W: Waits + ?Sized,
    F: FnMut(Turn) -> Fut,
    Fut: Future<Output = Result<Attempt<T>>>,
{
    let subscription = lock(&slot.subscription)
        .get_or_insert_with(|| Arc::new(waits.hub().subscribe(spec.channel)))
        .clone();
    let mut watcher = subscription.watcher();
    let command_timeout = waits.transport().config.command_timeout;
    // The caller's own try just failed; after that, every wake-up retries.
    let mut retry_before_subscribed = false;
    let mut handover = lock(&slot.handover).take();
    // The generation the latest attempt saw: a message is news to the next attempt only if
    // it came after.
    let mut asked_at = None;
    loop {
        if !watcher.borrow().subscribed {
            // Not subscribed: the first time round, or the hub lost its connection. After
            // a loss, try at once (a dead Redis then fails this call with its own error,
            // and a live one may have been released meanwhile), then resubscribe and try
            // again, since a release published before the subscription is lost.
            if retry_before_subscribed {
                if let Some(held) = attempt(turn_of_head(waits, spec)).await?.held() {
                    return Ok(Some(held));
                }
            }
            let ready_within = match spec.deadline {
                Some(d) => command_timeout.min(d.saturating_duration_since(Instant::now())),
                None => command_timeout,
            };
            tokio::select! {
                _ = waits.transport().shutdown.wait() => return Err(Error::Shutdown),
                ready = pubsub::ready(&mut watcher, ready_within) => match ready {
                    Ok(()) => {}
                    // Never asked, and it cannot listen (yet): ask once all the same, then
                    // give up as below.
                    Err(err) if unasked.is_some() => {
                        let turn = Turn {
                            first_try: true,
                            ..turn_of_head(waits, spec)
                        };
                        if let Some(held) = attempt(turn).await?.held() {
                            return Ok(Some(held));
                        }
                        if unasked == Some(true) {
                            count_contended(waits, spec);
                        }
                        return match err {
                            Error::Timeout
                                if spec.deadline.is_some_and(|d| Instant::now() >= d) =>
                            {
                                Ok(None)
                            }
                            err => Err(err),
                        };
                    }
                    Err(Error::Timeout) if spec.deadline.is_some_and(|d| Instant::now() >= d) => {
                        return Ok(None);
                    }
                    // Subscribed before, and Redis answered the re-check just made: the hub
                    // is slow to subscribe again (a cluster under load, a refused
                    // `SSUBSCRIBE`), not cut off. The wait goes on, re-checking at least
                    // once per command timeout until the subscription is back (the sleep
                    // below is capped); an outage the hub finds still fails it.
                    Err(Error::Timeout)
                        if retry_before_subscribed && !watcher.borrow().unreachable => {}
                    Err(err) => return Err(err),
                },
            }
        }
        retry_before_subscribed = true;
        let (generation, subscribed, message) = {
            let state = watcher.borrow_and_update();
            (state.generation, state.subscribed, state.message.clone())
        };
        // Only the first attempt after becoming head can be handed over.
        let unmoved = handover.take() == Some(generation);
        let news = asked_at.replace(generation) != Some(generation);
        let turn = Turn {
            handed_over: subscribed && unmoved,
            message: message.filter(|_| news),
            ..turn_of_head(waits, spec)
        };
        let retry_in = match attempt(turn).await? {
            Attempt::Acquired(held) => return Ok(Some(held)),
            Attempt::AcquiredStillWaiting(held) => {
                if subscribed {
                    *lock(&slot.handover) = Some(generation);
                }
                return Ok(Some(held));
            }
            Attempt::Busy { retry_in } => {
                if unasked.take() == Some(true) {
                    count_contended(waits, spec);
                }
                retry_in.unwrap_or(MAX_SLEEP).min(MAX_SLEEP)
            }
        };
        let now = Instant::now();
        let mut wake = now + retry_in;
        if !watcher.borrow().subscribed {
            // Going on without a subscription (see above): a release is not heard meanwhile.
            wake = wake.min(now + command_timeout);
        }
        if let Some(deadline) = spec.deadline {
            if now >= deadline {
                return Ok(None);
            }
            wake = wake.min(deadline);
        }
        tokio::select! {
            _ = waits.transport().shutdown.wait() => return Err(Error::Shutdown),
            _ = watcher.changed() => {}
            _ = tokio::time::sleep_until(wake.into()) => {}
        }
    }
}

/// The head's turn: whether tasks of its client wait behind it.
fn turn_of_head<W: Waits + ?Sized>(waits: &W, spec: &WaitSpec<'_>) -> Turn {
    Turn {
        others_waiting: !spec.shared && waits.queues().queued(spec.queue) > 1,
        ..Turn::default()
    }
}
