//! [`HoldLease`]: what a guard knows about its lease, whether it is still ours.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::Renewal;
use crate::duration::CLOCK_MARGIN;
use crate::locking::lock;
use crate::signal::Flag;

/// The client's view of one hold: when it ends at the latest, and whether it is known gone.
///
/// The deadline is counted on the monotonic clock from when the request that set the lease
/// was *sent*, less [`CLOCK_MARGIN`], so the client never believes it holds longer than Redis
/// does. Once the deadline passes, or the flag is set, the hold is lost for good: a late
/// confirmation does not revive it.
#[derive(Debug)]
pub(crate) struct LeaseState {
    lost: Flag,
    /// The deadline, and whether it was fixed after the fact (renewals no longer move it).
    expires_at: Mutex<(Instant, bool)>,
    /// Wakes [`wait_lost`](Self::wait_lost) when a fixed deadline replaces the old one,
    /// which may be earlier.
    refixed: tokio::sync::Notify,
    /// The loss was counted in the client's statistics (whoever notices it first counts it).
    counted: std::sync::atomic::AtomicBool,
}

/// The client-side deadline of a lease set by a request sent at `sent_at`. A lease too long
/// for the platform's clock saturates to a far-future instant instead of panicking.
pub(crate) fn deadline(sent_at: Instant, lease: Duration) -> Instant {
    const FAR_FUTURE: Duration = Duration::from_secs(86_400 * 365 * 30);
    let end = sent_at
        .checked_add(lease)
        .or_else(|| sent_at.checked_add(FAR_FUTURE))
        .unwrap_or(sent_at);
    end.checked_sub(CLOCK_MARGIN).unwrap_or(sent_at)
}

impl LeaseState {
    pub(crate) fn new(expires_at: Instant) -> Arc<Self> {
        Arc::new(LeaseState {
            lost: Flag::default(),
            expires_at: Mutex::new((expires_at, false)),
            refixed: tokio::sync::Notify::new(),
            counted: std::sync::atomic::AtomicBool::new(false),
        })
    }

    pub(crate) fn expires_at(&self) -> Instant {
        lock(&self.expires_at).0
    }

    /// Replaces the deadline with `until` for good: later renewals do not move it.
    pub(crate) fn fix(&self, until: Instant) {
        *lock(&self.expires_at) = (until, true);
        self.refixed.notify_waiters();
    }

    /// Whether the hold is gone; sets the flag when the deadline has passed, so the answer
    /// never flips back.
    pub(crate) fn is_lost(&self) -> bool {
        if self.lost.is_set() {
            return true;
        }
        if Instant::now() >= self.expires_at() {
            self.lost.set();
            return true;
        }
        false
    }

    /// Whether the hold is lost and this is the first call to say so: the loss is counted
    /// once, by whichever of the watchdog and the release notices it first.
    pub(crate) fn first_count_of_loss(&self) -> bool {
        self.is_lost() && !self.counted.swap(true, std::sync::atomic::Ordering::AcqRel)
    }

    /// Marks the hold lost. Returns whether this call did it.
    pub(crate) fn mark_lost(&self) -> bool {
        self.lost.set()
    }

    /// Brings the deadline forward to `until` if that is earlier, for good: later renewals
    /// do not move it.
    pub(crate) fn cap(&self, until: Instant) {
        let mut expires_at = lock(&self.expires_at);
        *expires_at = (expires_at.0.min(until), true);
        drop(expires_at);
        self.refixed.notify_waiters();
    }

    /// Moves the deadline to `until` after a confirmed renewal, unless the hold was already
    /// lost (then it stays lost). Returns whether the hold is still alive.
    pub(crate) fn extend(&self, until: Instant) -> bool {
        let mut expires_at = lock(&self.expires_at);
        let (current, fixed) = *expires_at;
        if self.lost.is_set() || Instant::now() >= current {
            drop(expires_at);
            self.lost.set();
            return false;
        }
        // A renewal already on the wire when the lease was fixed may still confirm; the
        // fixed deadline is the one the guard was promised.
        if !fixed {
            expires_at.0 = current.max(until);
        }
        true
    }

    /// Completes once the hold is lost: flagged, or its deadline passed.
    pub(crate) async fn wait_lost(self: Arc<Self>) {
        loop {
            if self.is_lost() {
                return;
            }
            // Created before reading the deadline, so a fix in between is not missed.
            let refixed = self.refixed.notified();
            let at = self.expires_at();
            tokio::select! {
                _ = self.lost.wait() => return,
                // The deadline may have moved meanwhile; the loop re-reads it.
                _ = tokio::time::sleep_until(at.into()) => {}
                _ = refixed => {}
            }
        }
    }
}

/// The lease behind one guard or permit.
///
/// A watchdog lease is renewed until the `HoldLease` is dropped. It is lost when a renewal finds
/// the hold gone or not ours, when no renewal was confirmed before the lease would have ended
/// (even while a renewal is still waiting for Redis), or when the client shuts down. A fixed
/// lease is lost once its time has passed.
#[derive(Debug)]
pub struct HoldLease {
    state: Arc<LeaseState>,
    // Dropping this stops renewal at once.
    _renewal: Option<Renewal>,
}

impl HoldLease {
    pub(crate) fn renewed(renewal: Renewal, state: Arc<LeaseState>) -> Self {
        HoldLease {
            state,
            _renewal: Some(renewal),
        }
    }

    /// A fixed lease of `lease`, set by a request sent at `sent_at`, never renewed.
    pub fn fixed(sent_at: Instant, lease: Duration) -> Self {
        HoldLease {
            state: LeaseState::new(deadline(sent_at, lease)),
            _renewal: None,
        }
    }

    /// Whether the client knows the hold is gone.
    pub fn is_lost(&self) -> bool {
        self.state.is_lost()
    }

    /// Turns the lease into a fixed one of `lease`, set by a request sent at `sent_at`:
    /// renewal stops, and the deadline becomes that lease's, even if it is earlier.
    pub fn fix(&mut self, sent_at: Instant, lease: Duration) {
        self._renewal = None;
        self.state.fix(deadline(sent_at, lease));
    }

    /// When the hold ends at the latest as far as the client knows (monotonic clock): its
    /// fixed lease, or for a watchdog lease the last confirmed renewal's.
    pub fn ends_at(&self) -> Instant {
        self.state.expires_at()
    }

    /// A fixed lease of `lease` requested at `sent_at` whose outcome may stay unknown: unless
    /// [`PendingFix::settled`] is called, dropping the returned value brings the client's
    /// deadline forward to that lease's end, since Redis may have applied it.
    pub fn pending_fix(&self, sent_at: Instant, lease: Duration) -> PendingFix {
        PendingFix {
            state: Some(self.state.clone()),
            until: deadline(sent_at, lease),
        }
    }

    /// Marks the lease lost (for example after a release found the hold gone).
    pub fn mark_lost(&self) {
        self.state.mark_lost();
    }

    /// Completes once the hold is known to be gone. The future owns what it needs, so it
    /// outlives the guard.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        self.state.clone().wait_lost()
    }
}

/// A request to fix a lease, on the wire: see [`HoldLease::pending_fix`].
#[derive(Debug)]
#[must_use = "dropping it at once caps the lease"]
pub struct PendingFix {
    state: Option<Arc<LeaseState>>,
    until: Instant,
}

impl PendingFix {
    /// Redis's answer is known (applied, or certainly not): nothing to do on drop.
    pub fn settled(mut self) {
        self.state = None;
    }
}

impl Drop for PendingFix {
    fn drop(&mut self) {
        // The outcome stayed unknown (an error, or the caller went away): the client must not
        // believe in a later end than the fixed lease Redis may have set.
        if let Some(state) = self.state.take() {
            state.cap(self.until);
        }
    }
}
