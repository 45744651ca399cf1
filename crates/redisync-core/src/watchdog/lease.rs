//! [`HoldLease`]: what a guard knows about its lease, whether it is still ours.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::Renewal;
use crate::duration::{lease_margin, DEFAULT_CLOCK_DRIFT_PPM};
use crate::locking::lock;
use crate::signal::Flag;

/// The client's view of one hold: when it ends at the latest, and whether it is known gone.
///
/// The deadline is counted on the monotonic clock from when the request that set the lease
/// was *sent*, less the lease's margin ([`lease_margin`], with the client's clock drift
/// bound), so the client never believes it holds longer than Redis does. Once the deadline
/// passes, or the flag is set, the hold is lost for good: a late confirmation does not revive
/// it.
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
    /// The client's clock drift bound, in parts per million: every later deadline of this
    /// hold (a fixed lease, a pending fix) is counted with it.
    drift_ppm: u32,
}

/// The client-side deadline of a lease set by a request sent at `sent_at`: its end less its
/// margin ([`lease_margin`] with a drift bound of `drift_ppm`), never before `sent_at`. A
/// lease too long for the platform's clock is taken as a far-future one (and so is its
/// margin) instead of panicking.
pub(crate) fn deadline(sent_at: Instant, lease: Duration, drift_ppm: u32) -> Instant {
    const FAR_FUTURE: Duration = Duration::from_secs(86_400 * 365 * 30);
    let (end, lease) = match sent_at.checked_add(lease) {
        Some(end) => (end, lease),
        None => match sent_at.checked_add(FAR_FUTURE) {
            Some(end) => (end, FAR_FUTURE),
            None => return sent_at,
        },
    };
    end.checked_sub(lease_margin(lease, drift_ppm))
        .map_or(sent_at, |at| at.max(sent_at))
}

impl LeaseState {
    /// A hold with a lease of `lease` set by a request sent at `sent_at`, for a client whose
    /// clock drift bound is `drift_ppm`.
    pub(crate) fn new(sent_at: Instant, lease: Duration, drift_ppm: u32) -> Arc<Self> {
        Arc::new(LeaseState {
            lost: Flag::default(),
            expires_at: Mutex::new((deadline(sent_at, lease, drift_ppm), false)),
            refixed: tokio::sync::Notify::new(),
            counted: std::sync::atomic::AtomicBool::new(false),
            drift_ppm,
        })
    }

    /// The deadline of a lease of `lease` set by a request sent at `sent_at`, counted with
    /// this hold's drift bound.
    pub(crate) fn deadline(&self, sent_at: Instant, lease: Duration) -> Instant {
        deadline(sent_at, lease, self.drift_ppm)
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

    /// A fixed lease of `lease`, set by a request sent at `sent_at`, never renewed, counted
    /// with the default clock drift bound ([`DEFAULT_CLOCK_DRIFT_PPM`]). Primitives use
    /// [`Toolkit::fixed_lease`](crate::toolkit::Toolkit::fixed_lease), which counts it with
    /// their client's bound.
    pub fn fixed(sent_at: Instant, lease: Duration) -> Self {
        Self::fixed_with_drift(sent_at, lease, DEFAULT_CLOCK_DRIFT_PPM)
    }

    /// [`fixed`](Self::fixed), counted with a drift bound of `drift_ppm`.
    pub(crate) fn fixed_with_drift(sent_at: Instant, lease: Duration, drift_ppm: u32) -> Self {
        HoldLease {
            state: LeaseState::new(sent_at, lease, drift_ppm),
            _renewal: None,
        }
    }

    /// Whether the client knows the hold is gone.
    pub fn is_lost(&self) -> bool {
        self.state.is_lost()
    }

    /// Turns the lease into a fixed one of `lease`, set by a request sent at `sent_at`:
    /// renewal stops, and the deadline becomes that lease's, even if it is earlier. Counted
    /// with the drift bound the lease was made with.
    pub fn fix(&mut self, sent_at: Instant, lease: Duration) {
        self._renewal = None;
        self.state.fix(self.state.deadline(sent_at, lease));
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
            until: self.state.deadline(sent_at, lease),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::duration::CLOCK_MARGIN;

    #[test]
    fn deadlines_take_the_margin_off_the_lease() {
        let now = Instant::now();
        let ms = Duration::from_millis;
        assert_eq!(
            deadline(now, ms(30_000), 0),
            now + ms(30_000) - CLOCK_MARGIN
        );
        assert_eq!(deadline(now, ms(30_000), 1_000), now + ms(29_968));
        assert_eq!(deadline(now, ms(2_000), 100_000), now + ms(1_798));
        // A lease shorter than its margin ends at once, never before it was sent.
        assert_eq!(deadline(now, ms(1), 0), now);
    }

    #[test]
    fn huge_leases_saturate_far_in_the_future() {
        let now = Instant::now();
        let year = Duration::from_secs(86_400 * 365);
        for drift in [0, 1_000, crate::duration::MAX_CLOCK_DRIFT_PPM, u32::MAX] {
            let end = deadline(now, Duration::MAX, drift);
            assert!(end >= now, "drift {drift}");
            if drift <= crate::duration::MAX_CLOCK_DRIFT_PPM {
                assert!(end > now + year * 25, "drift {drift}: {:?}", end - now);
            }
        }
        let longest = Duration::from_millis(crate::duration::MAX_MILLIS);
        if let Some(end) = now.checked_add(longest) {
            assert!(deadline(now, longest, 1_000) < end);
            assert!(deadline(now, longest, 1_000) > now + year * 1_000);
        }
    }

    #[test]
    fn fixed_leases_use_the_default_bound_and_fixes_keep_theirs() {
        let now = Instant::now();
        let ms = Duration::from_millis;
        let lease = HoldLease::fixed(now, ms(10_000));
        assert_eq!(lease.ends_at(), now + ms(10_000 - 12));
        let mut lease = HoldLease::fixed_with_drift(now, ms(10_000), 50_000);
        assert_eq!(lease.ends_at(), now + ms(10_000 - 502));
        lease.fix(now, ms(1_000));
        assert_eq!(lease.ends_at(), now + ms(1_000 - 52));
        drop(lease.pending_fix(now, ms(100)));
        assert_eq!(lease.ends_at(), now + ms(100 - 7));
    }
}
