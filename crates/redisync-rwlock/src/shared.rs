//! Local readers of one client share one Redis read hold.
//!
//! A client whose tasks read one lock at the same time needs one read hold in Redis, not one
//! per task: readers can all get in together, so a second hold of the same client adds
//! nothing but a round trip, and a release, and a renewal. So [`Coalescer`] (one per client
//! and lock, shared by every handle of that client) lets them share:
//!
//! * A watchdog read of a handle that holds nothing of this lock goes down one of three roads.
//!   If a *shared hold* of this client is live and may be joined, the reader joins it: no
//!   request at all. Otherwise, if no other read of this client is under way (solo), it takes
//!   a hold of its own exactly as any reader does (one script). Otherwise it *founds* a shared
//!   hold: one reader at a time asks Redis for it (a read hold with an owner of its own,
//!   writer preference and all), and the readers queued behind it join what it got.
//! * The shared hold is released when its last local reader leaves (one script; after
//!   [`LINGER`], in case another comes, unless a writer waits or the hold is lost), renewed by
//!   the watchdog while it lives, and when it is lost, every local reader's guard is lost.
//! * **Writer preference.** A shared hold may be joined only while no writer waits. The client
//!   subscribes to the lock's *drain* channel for as long as it has a shared hold (or is
//!   founding one); a writer that starts waiting while shared holds exist publishes there
//!   (once per wait), and so do `force_unlock` and `delete`. On a message (or a reconnect of
//!   the subscriber, which may have lost messages) joining stops until one read-only check
//!   has told whether a writer waits and whether the holds are still there; once a writer
//!   waits, the hold admits no new reader (it *drains*): it is released when its readers
//!   have left, and new readers found the next shared hold, which Redis makes wait behind the
//!   writer. A hold founded while the subscription was confirmed needs no check: Redis's
//!   grant saw no waiting writer, and any writer after it publishes.
//! * **Re-entry** of a handle whose reads are in a shared hold joins that hold even while it
//!   drains (making it wait behind a writer that waits for this very hold would deadlock).
//!
//! Not coalesced, and why: fixed-lease reads (their hold must end by itself at its own lease,
//! whatever other readers do), reads of a handle without writer preference (they must not
//! give way when the shared hold drains), and reads of a handle that holds a hold of its own
//! on the lock (a re-entry or a downgrade, which Redis must see under the handle's owner id).

use redisync_core::toolkit::Toolkit;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use redisync_core::toolkit::pubsub::{ChannelState, Subscription};
use redisync_core::toolkit::{Client, Error, Flag, Hold, Result};
use tokio::sync::{watch, Notify};

use crate::scripts::{self, SharedCheck};

/// `checked_at` of a shared hold nobody has checked yet.
const UNCHECKED: u64 = u64::MAX;

/// Locks `mutex`; a panic elsewhere while it was held leaves counts that are still usable, so
/// poisoning is ignored rather than spread.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One client's shared read holds on one lock, and its readers on their way to one.
pub(crate) struct Coalescer {
    state: Mutex<State>,
    /// One founder at a time asks Redis for a shared hold; the others wait here, then join.
    founding: tokio::sync::Mutex<()>,
    /// The last error a founder met, with a count of errors so far: founders waiting behind
    /// it give up with it rather than each waiting a command timeout of its own in turn.
    failures: watch::Sender<(u64, Option<Error>)>,
    /// Moves after every check of the shared holds: readers waiting for one look again.
    checked: watch::Sender<u64>,
    /// Wakes the watch task when a shared hold needs checking.
    recheck: Arc<Notify>,
}

impl Default for Coalescer {
    fn default() -> Self {
        Coalescer {
            state: Mutex::default(),
            founding: tokio::sync::Mutex::new(()),
            failures: watch::Sender::new((0, None)),
            checked: watch::Sender::new(0),
            recheck: Arc::default(),
        }
    }
}

impl std::fmt::Debug for Coalescer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = lock(&self.state);
        f.debug_struct("Coalescer")
            .field("solo", &state.solo)
            .field("founders", &state.founders)
            .field("shared_holds", &state.holds.len())
            .finish()
    }
}

#[derive(Default)]
struct State {
    /// Reads of this client on the solo road: under way or holding.
    solo: usize,
    /// Readers on the founding road.
    founders: usize,
    /// The live shared holds, oldest first.
    holds: Vec<Entry>,
    /// The drain channel, subscribed while a shared hold lives or is being founded.
    session: Option<Session>,
}

struct Session {
    // Dropping it unsubscribes (the last reference) and ends the watch task.
    _subscription: Subscription,
    watcher: watch::Receiver<ChannelState>,
}

struct Entry {
    hold: Arc<SharedHold>,
    readers: usize,
    /// Local readers per handle (its `RwCore` address), for re-entries and upgrades.
    handles: Vec<(usize, usize)>,
    /// Readers that joined so far: a lingering hold is released only after a whole
    /// [`LINGER`] without one.
    joins: u64,
    /// A task lingers over this hold, which has no reader right now.
    lingering: bool,
}

impl Entry {
    fn reads_of(&self, handle: usize) -> usize {
        self.handles
            .iter()
            .find(|(h, _)| *h == handle)
            .map_or(0, |(_, n)| *n)
    }

    fn add(&mut self, handle: usize) {
        self.readers += 1;
        self.joins += 1;
        match self.handles.iter_mut().find(|(h, _)| *h == handle) {
            Some((_, n)) => *n += 1,
            None => self.handles.push((handle, 1)),
        }
    }

    fn remove(&mut self, handle: usize) {
        self.readers -= 1;
        if let Some(i) = self.handles.iter().position(|(h, _)| *h == handle) {
            self.handles[i].1 -= 1;
            if self.handles[i].1 == 0 {
                self.handles.swap_remove(i);
            }
        }
    }
}

/// One Redis read hold shared by local readers.
#[derive(Debug)]
pub(crate) struct SharedHold {
    attempt: String,
    /// Taken by the last reader to leave, who gives it back.
    hold: Mutex<Option<Hold>>,
    /// The drain channel's generation at which this hold was last known to be there with no
    /// writer waiting; [`UNCHECKED`] until then.
    checked_at: AtomicU64,
    /// A writer waits (or the check failed): no new readers.
    draining: AtomicBool,
    /// A check found the hold gone (force-unlocked or deleted).
    gone: Flag,
}

impl SharedHold {
    pub(crate) fn is_lost(&self) -> bool {
        self.gone.is_set() || lock(&self.hold).as_ref().is_none_or(Hold::is_lost)
    }

    pub(crate) fn is_gone(&self) -> bool {
        self.gone.is_set()
    }

    /// Completes once the hold is known lost; owns what it needs.
    pub(crate) fn lost(self: &Arc<Self>) -> impl std::future::Future<Output = ()> + Send + 'static {
        let lease_lost = lock(&self.hold).as_ref().map(Hold::lost);
        let this = self.clone();
        async move {
            let lease_lost = async move {
                // None: the hold was given back already, so it is not ours any more.
                if let Some(lost) = lease_lost {
                    lost.await;
                }
            };
            tokio::select! {
                _ = lease_lost => {}
                _ = this.gone.wait() => {}
            }
        }
    }

    fn admits_newcomers(&self) -> bool {
        !self.draining.load(Ordering::Acquire) && !self.is_lost()
    }
}

/// What a reader found when it tried to join.
pub(crate) enum Join {
    Joined(Share),
    /// A shared hold is there but not checked since the last message: wait for the check
    /// after the one numbered here ([`Coalescer::wait_for_check`]).
    WaitForCheck(u64),
    NotJoinable,
}

/// Which road a reader that could not join takes.
pub(crate) enum Road {
    Solo(SoloTicket),
    Found(FounderTicket),
}

/// Counts a read on the solo road until dropped (kept in its guard while it holds).
#[derive(Debug)]
pub(crate) struct SoloTicket(Arc<Coalescer>);

impl Drop for SoloTicket {
    fn drop(&mut self) {
        lock(&self.0.state).solo -= 1;
    }
}

/// Counts a reader on the founding road until dropped.
pub(crate) struct FounderTicket(Arc<Coalescer>);

impl Drop for FounderTicket {
    fn drop(&mut self) {
        let session = {
            let mut state = lock(&self.0.state);
            state.founders -= 1;
            state.end_session_if_idle()
        };
        drop(session);
    }
}

impl State {
    fn end_session_if_idle(&mut self) -> Option<Session> {
        if self.founders == 0 && self.holds.is_empty() {
            self.session.take()
        } else {
            None
        }
    }

    fn channel(&self) -> Option<ChannelState> {
        self.session.as_ref().map(|s| s.watcher.borrow().clone())
    }
}

/// What a founder needs to know about the drain channel when it sends its request.
#[derive(Debug, Clone)]
pub(crate) struct DrainWatch(Option<watch::Receiver<ChannelState>>);

impl DrainWatch {
    /// The channel's generation now, if the subscription is confirmed.
    pub(crate) fn confirmed_generation(&self) -> Option<u64> {
        let state = self.0.as_ref()?.borrow().clone();
        state.subscribed.then_some(state.generation)
    }
}

/// What the watch task needs to check the shared holds.
#[derive(Debug, Clone)]
pub(crate) struct CheckKeys {
    pub(crate) readers: String,
    pub(crate) writers: String,
    pub(crate) drain: String,
}

impl Coalescer {
    /// Joins a shared hold this client already has, if one may be joined: the hold `handle`
    /// reads in (a re-entry), or else the newest hold, if no writer waits.
    pub(crate) fn try_join(self: &Arc<Self>, core: &Arc<crate::rwlock::RwCore>) -> Join {
        let handle = core.handle_id();
        // Read before the holds' check marks: a check that lands after this is waited for.
        let checks_seen = *self.checked.borrow();
        let mut state = lock(&self.state);
        let channel = state.channel();
        if let Some(entry) = state
            .holds
            .iter_mut()
            .rev()
            .find(|e| e.reads_of(handle) > 0 && !e.hold.is_lost())
        {
            entry.add(handle);
            return Join::Joined(Share::new(self.clone(), entry.hold.clone(), core.clone()));
        }
        let Some(entry) = state
            .holds
            .iter_mut()
            .rev()
            .find(|e| e.hold.admits_newcomers())
        else {
            return Join::NotJoinable;
        };
        match channel {
            Some(c)
                if c.subscribed
                    && entry.hold.checked_at.load(Ordering::Acquire) == c.generation =>
            {
                entry.add(handle);
                Join::Joined(Share::new(self.clone(), entry.hold.clone(), core.clone()))
            }
            Some(c) if !c.unreachable => Join::WaitForCheck(checks_seen),
            _ => Join::NotJoinable,
        }
    }

    /// Waits (at most `within`) for a check of the shared holds after check number `seen`;
    /// returns whether one came.
    pub(crate) async fn wait_for_check(&self, seen: u64, within: Duration) -> bool {
        let mut checked = self.checked.subscribe();
        let came = tokio::time::timeout(within, checked.wait_for(|n| *n != seen))
            .await
            .is_ok_and(|came| came.is_ok());
        came
    }

    /// Whether `handle` reads through a shared hold that is not known lost: then it reads,
    /// as far as Redis is concerned, and must neither upgrade nor give way to writers.
    pub(crate) fn reads_shared(&self, handle: usize) -> bool {
        lock(&self.state)
            .holds
            .iter()
            .any(|e| e.reads_of(handle) > 0 && !e.hold.is_lost())
    }

    /// Picks the road of a reader that could not join. A reader that may not wait, or the
    /// only read of this client under way, goes solo; the others found (or wait for the
    /// founder and join).
    pub(crate) fn enter(
        self: &Arc<Self>,
        no_wait: bool,
        client: &Client,
        keys: &CheckKeys,
    ) -> Road {
        let mut state = lock(&self.state);
        if no_wait || (state.solo == 0 && state.founders == 0 && state.holds.is_empty()) {
            state.solo += 1;
            return Road::Solo(SoloTicket(self.clone()));
        }
        state.founders += 1;
        if state.session.is_none() {
            let subscription = client.subscribe(&keys.drain);
            let watcher = subscription.watcher();
            // Outside a runtime nothing can watch: the holds then stay unchecked, and nobody
            // joins them (each reader founds its own).
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(watch_holds(
                    Arc::downgrade(self),
                    self.recheck.clone(),
                    client.clone(),
                    keys.clone(),
                    watcher.clone(),
                ));
            }
            state.session = Some(Session {
                _subscription: subscription,
                watcher,
            });
        }
        Road::Found(FounderTicket(self.clone()))
    }

    /// Waits for this reader's turn to found; `Ok(None)` if `deadline` passes first. A reader
    /// that has to wait for another founder counts as a contended wait.
    pub(crate) async fn founding_turn(
        &self,
        client: &Client,
        key: &str,
        deadline: Option<Instant>,
    ) -> Result<Option<tokio::sync::MutexGuard<'_, ()>>> {
        let mut failures = self.failures.subscribe();
        failures.borrow_and_update();
        if let Ok(turn) = self.founding.try_lock() {
            return Ok(Some(turn));
        }
        client.record_contended_waits("rwlock", key, 1);
        // Biased: a founder that failed signals it before it lets the next one in, and that
        // one must take the failure (it would only meet the same outage).
        tokio::select! {
            biased;
            Ok(()) = failures.changed() => {
                let failure = failures.borrow().1.clone();
                Err(failure.unwrap_or(Error::Shutdown))
            }
            turn = self.founding.lock() => Ok(Some(turn)),
            _ = sleep_until(deadline) => Ok(None),
        }
    }

    /// Tells the founders waiting behind this one that Redis cannot be reached.
    pub(crate) fn fail(&self, err: &Error) {
        if matches!(err, Error::Redis(_) | Error::Timeout | Error::Shutdown) {
            self.failures.send_modify(|(count, last)| {
                *count += 1;
                *last = Some(err.clone());
            });
        }
    }

    /// The drain channel as a founder sees it; waits (at most `within`) for the subscription
    /// to be confirmed, so that the grant's own check of waiting writers is enough.
    pub(crate) async fn drain_watch(&self, within: Duration) -> DrainWatch {
        let watcher = lock(&self.state)
            .session
            .as_ref()
            .map(|s| s.watcher.clone());
        if let Some(mut watcher) = watcher.clone() {
            let settled = watcher.wait_for(|s| s.subscribed || s.unreachable);
            let _ = tokio::time::timeout(within, settled).await;
        }
        DrainWatch(watcher)
    }

    /// Makes the hold a founder got the one new readers join, and joins it.
    pub(crate) fn install(
        self: &Arc<Self>,
        hold: Hold,
        attempt: String,
        sent_generation: Option<u64>,
        core: &Arc<crate::rwlock::RwCore>,
    ) -> Share {
        let mut state = lock(&self.state);
        // Checked by the grant itself if the subscription was confirmed when the request went
        // out and nothing was published since.
        let checked_at = match (state.channel(), sent_generation) {
            (Some(c), Some(sent)) if c.subscribed && c.generation == sent => sent,
            _ => UNCHECKED,
        };
        let shared = Arc::new(SharedHold {
            attempt,
            hold: Mutex::new(Some(hold)),
            checked_at: AtomicU64::new(checked_at),
            draining: AtomicBool::new(false),
            gone: Flag::default(),
        });
        state.holds.push(Entry {
            hold: shared.clone(),
            readers: 1,
            handles: vec![(core.handle_id(), 1)],
            joins: 1,
            lingering: false,
        });
        drop(state);
        if checked_at == UNCHECKED {
            self.recheck.notify_one();
        }
        Share::new(self.clone(), shared, core.clone())
    }

    /// A reader leaves `hold`. Returns the Redis hold if it was the last and the hold must go
    /// at once (a writer waits, or it is lost), for it to give back; a hold that may still be
    /// joined lingers instead (see [`LINGER`]).
    fn leave(self: &Arc<Self>, hold: &Arc<SharedHold>, handle: usize) -> Option<Hold> {
        let (released, session) = {
            let mut state = lock(&self.state);
            let i = state
                .holds
                .iter()
                .position(|e| Arc::ptr_eq(&e.hold, hold))?;
            let entry = &mut state.holds[i];
            entry.remove(handle);
            if entry.readers > 0 {
                return None;
            }
            if hold.admits_newcomers() {
                if entry.lingering {
                    return None; // the task lingering over it already decides
                }
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    entry.lingering = true;
                    runtime.spawn(linger(Arc::downgrade(self), hold.clone(), entry.joins));
                    return None;
                }
            }
            self.remove(&mut state, i)
        };
        drop(session);
        released
    }

    /// Takes the idle hold at `i` out, with the session if nothing else needs it.
    fn remove(&self, state: &mut State, i: usize) -> (Option<Hold>, Option<Session>) {
        let entry = state.holds.remove(i);
        let released = lock(&entry.hold.hold).take();
        (released, state.end_session_if_idle())
    }

    /// Releases (in the background) the holds that no reader holds and no reader may join:
    /// once a writer waits, nothing lingers.
    fn release_idle_unjoinable(&self) {
        let mut released = Vec::new();
        {
            let mut state = lock(&self.state);
            while let Some(i) = state
                .holds
                .iter()
                .position(|e| e.readers == 0 && !e.hold.admits_newcomers())
            {
                released.push(self.remove(&mut state, i));
            }
        }
        drop(released);
    }

    /// The shared holds not checked since the channel's generation `generation`.
    fn unchecked(&self, generation: u64) -> Vec<Arc<SharedHold>> {
        lock(&self.state)
            .holds
            .iter()
            .filter(|e| {
                e.hold.checked_at.load(Ordering::Acquire) != generation && !e.hold.gone.is_set()
            })
            .map(|e| e.hold.clone())
            .collect()
    }
}

/// How long a shared hold outlives its last reader while no writer waits: a reader of the
/// same client arriving within it joins the hold instead of taking a new one (two scripts
/// saved, and the hold's renewal). A waiting writer ends it at once (it is told on the drain
/// channel); a try_write in the meantime finds the lock read-locked.
pub(crate) const LINGER: Duration = Duration::from_millis(10);

/// Releases `hold` once it has had no reader for a whole [`LINGER`] (or at once when it can
/// no longer be joined), unless a reader holds it again.
async fn linger(coalescer: Weak<Coalescer>, hold: Arc<SharedHold>, mut joins: u64) {
    loop {
        tokio::time::sleep(LINGER).await;
        let Some(coalescer) = coalescer.upgrade() else {
            return;
        };
        let released = {
            let mut state = lock(&coalescer.state);
            let Some(i) = state.holds.iter().position(|e| Arc::ptr_eq(&e.hold, &hold)) else {
                return;
            };
            let entry = &mut state.holds[i];
            if entry.readers > 0 {
                entry.lingering = false;
                return;
            }
            if entry.joins != joins && hold.admits_newcomers() {
                // Readers came and went meanwhile: linger on.
                joins = entry.joins;
                continue;
            }
            coalescer.remove(&mut state, i)
        };
        drop(released);
        return;
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// Keeps the shared holds checked while the drain channel is subscribed: after the
/// subscription is confirmed, after every message and reconnect, and when a hold installed
/// without the grant's guarantee asks for it. Ends when the subscription goes.
async fn watch_holds(
    coalescer: Weak<Coalescer>,
    recheck: Arc<Notify>,
    client: Client,
    keys: CheckKeys,
    mut watcher: watch::Receiver<ChannelState>,
) {
    loop {
        let channel = watcher.borrow_and_update().clone();
        if channel.subscribed || channel.unreachable {
            let Some(coalescer) = coalescer.upgrade() else {
                return;
            };
            let pending = coalescer.unchecked(channel.generation);
            if !pending.is_empty() {
                let outcome = if channel.unreachable {
                    Err(Error::Timeout)
                } else {
                    check(&client, &keys, &pending).await
                };
                for (hold, live) in pending.iter().zip(0..) {
                    match &outcome {
                        Ok(check) => {
                            if check.writer_waits {
                                hold.draining.store(true, Ordering::Release);
                            }
                            if !check.live.get(live).copied().unwrap_or(false) {
                                hold.draining.store(true, Ordering::Release);
                                hold.gone.set();
                            }
                        }
                        // Nothing can be said about it: it admits no one new.
                        Err(_) => hold.draining.store(true, Ordering::Release),
                    }
                    hold.checked_at.store(channel.generation, Ordering::Release);
                }
                coalescer.checked.send_modify(|n| *n += 1);
                coalescer.release_idle_unjoinable();
            }
        }
        tokio::select! {
            changed = watcher.changed() => if changed.is_err() {
                return;
            },
            _ = recheck.notified() => {}
        }
    }
}

async fn check(
    client: &Client,
    keys: &CheckKeys,
    holds: &[Arc<SharedHold>],
) -> Result<SharedCheck> {
    let call = scripts::check_shared(
        &keys.readers,
        &keys.writers,
        holds.iter().map(|hold| hold.attempt.as_str()),
    );
    let reply: Vec<i64> = client.eval(call).await?;
    SharedCheck::decode(&reply, holds.len())
}

/// One local reader's part in a shared hold; leaving it (dropped or unlocked) gives the Redis
/// hold back when it was the last.
#[derive(Debug)]
pub(crate) struct Share {
    coalescer: Arc<Coalescer>,
    hold: Arc<SharedHold>,
    core: Arc<crate::rwlock::RwCore>,
    left: bool,
}

impl Share {
    fn new(
        coalescer: Arc<Coalescer>,
        hold: Arc<SharedHold>,
        core: Arc<crate::rwlock::RwCore>,
    ) -> Self {
        core.live_shared_reads.fetch_add(1, Ordering::AcqRel);
        Share {
            coalescer,
            hold,
            core,
            left: false,
        }
    }

    pub(crate) fn hold(&self) -> &Arc<SharedHold> {
        &self.hold
    }

    /// Leaves the shared hold; returns the Redis hold if this was its last reader.
    pub(crate) fn leave(mut self) -> Option<Hold> {
        self.leave_once()
    }

    fn leave_once(&mut self) -> Option<Hold> {
        if std::mem::replace(&mut self.left, true) {
            return None;
        }
        self.core.live_shared_reads.fetch_sub(1, Ordering::AcqRel);
        self.coalescer.leave(&self.hold, self.core.handle_id())
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        // The last reader's drop gives the hold back in the background (the Hold's drop).
        drop(self.leave_once());
    }
}
