//! [`Hold`]: the part every guard shares — a lease, and a release that always happens.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tracing::Instrument;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::retry::{Confirmed, Retry};
use crate::script::ScriptCall;
use crate::toolkit::Toolkit;
use crate::watchdog::lease::HoldLease;

/// One hold on a primitive, as a guard owns it: its [`HoldLease`] and the idempotent script call
/// that gives it back.
///
/// Dropping a `Hold` stops renewal at once and releases in the background without blocking.
/// [`release`](Self::release) does the same but waits for Redis's answer. The release script
/// must be idempotent (remember its outcome), since it is retried on a broken connection.
#[derive(Debug)]
pub struct Hold {
    client: Client,
    // Both are taken when the hold is released; `None` afterwards.
    release: Option<ScriptCall>,
    lease: Option<HoldLease>,
    // Counts this hold among its owner's live local holds until it is released.
    local: Option<Arc<AtomicUsize>>,
    // Set for holds without a lease: their release must eventually happen.
    release_unleased: bool,
    // When the hold began, for the hold-time metric.
    #[cfg(feature = "metrics")]
    since: std::time::Instant,
}

impl Hold {
    /// A hold released by `release`, with `lease` telling whether it is still ours.
    pub fn new(client: Client, release: ScriptCall, lease: HoldLease) -> Self {
        Hold {
            client,
            release: Some(release),
            lease: Some(lease),
            local: None,
            release_unleased: false,
            #[cfg(feature = "metrics")]
            since: std::time::Instant::now(),
        }
    }

    /// A hold without a lease (a classic semaphore's permits are not leased): it is never
    /// lost, and since no lease would ever make up for a release that did not happen, its
    /// release is retried in the background until Redis confirms it (see [`crate::retry`]);
    /// the release script must allow that.
    pub fn unleased(client: Client, release: ScriptCall) -> Self {
        Hold {
            client,
            release: Some(release),
            lease: None,
            local: None,
            release_unleased: true,
            #[cfg(feature = "metrics")]
            since: std::time::Instant::now(),
        }
    }

    /// Gives the hold a fixed lease of `lease`, set by a request sent at `sent_at` (after a
    /// primitive's script set it in Redis); watchdog renewal stops. See [`HoldLease::fix`].
    pub fn fix_lease(&mut self, sent_at: std::time::Instant, lease: std::time::Duration) {
        if let Some(current) = &mut self.lease {
            current.fix(sent_at, lease);
        }
    }

    /// See [`HoldLease::pending_fix`]; `None` for a hold without a lease.
    pub fn pending_fix(
        &self,
        sent_at: std::time::Instant,
        lease: std::time::Duration,
    ) -> Option<crate::watchdog::lease::PendingFix> {
        self.lease
            .as_ref()
            .map(|current| current.pending_fix(sent_at, lease))
    }

    /// Lets go of the hold without releasing it: whatever it holds stays taken.
    pub fn forget(mut self) {
        self.release = None;
        drop(self.lease.take());
        self.leave_local_count();
    }

    /// Counts this hold in `counter` until it is released or dropped. Primitives use this to
    /// know whether an owner may be re-entering (and must not queue behind local waiters).
    pub fn counted_in(mut self, counter: Arc<AtomicUsize>) -> Self {
        // Counting twice would leave one count behind for ever.
        self.leave_local_count();
        counter.fetch_add(1, Ordering::AcqRel);
        self.local = Some(counter);
        self
    }

    /// Reports how long the hold was held (feature `metrics`); called as it is given back.
    fn report_held(&self) {
        #[cfg(feature = "metrics")]
        if let Some(call) = &self.release {
            self.client.shared().config.metrics.held(
                call.script().kind(),
                call.first_key(),
                self.since.elapsed(),
            );
        }
    }

    fn leave_local_count(&mut self) {
        if let Some(counter) = self.local.take() {
            counter.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Whether the client knows the hold is gone (see [`HoldLease`]); never for an unleased hold
    /// that was not released.
    pub fn is_lost(&self) -> bool {
        match &self.lease {
            Some(lease) => lease.is_lost(),
            None => self.release.is_none(),
        }
    }

    /// Completes once the hold is known to be gone (never, for an unleased hold). The future
    /// does not borrow the hold.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let lost = self.lease.as_ref().map(HoldLease::lost);
        async move {
            match lost {
                Some(lost) => lost.await,
                None => std::future::pending().await,
            }
        }
    }

    /// Gives the hold back and returns the release script's reply.
    ///
    /// Renewal stops before the request is sent. After the client was shut down the hold is
    /// still given back, in the background, and the call returns [`Error::Shutdown`].
    ///
    /// A release Redis does not confirm within the command timeout (an outage, a `BUSY` or
    /// `READONLY` server) returns that error and goes on in the background until Redis
    /// confirms it: for a hold without a lease, for as long as it takes; for a leased hold,
    /// until its lease has ended (see [`crate::retry`]).
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped before it completes, the release still runs in the background
    /// with the same retries.
    pub async fn release(self, span: tracing::Span) -> Result<i64> {
        self.release_confirmed(span)
            .await
            .map(|confirmed| confirmed.reply)
    }

    /// [`release`](Self::release) for a release script that keeps no record of itself, which
    /// answers a repeat as if the hold were gone: the reply comes with whether it may be a
    /// repeat's. `repeated` is only set when the hold was still ours as far as the client knew
    /// (its lease had not run out and no renewal had found it gone) when the first try was
    /// sent; a hold the client already knew lost is reported as the script says.
    pub async fn release_confirmed(mut self, span: tracing::Span) -> Result<Confirmed<i64>> {
        let retry = self.retry();
        let was_ours = !self.is_lost();
        self.report_held();
        drop(self.lease.take());
        self.leave_local_count();
        let Some(call) = self.release.take() else {
            return Err(Error::Shutdown);
        };
        if self.client.is_shut_down() {
            self.client.spawn_release(call, retry);
            return Err(Error::Shutdown);
        }
        let mut confirmed = self
            .client
            .eval_until_confirmed::<i64>(call, retry)
            .instrument(span)
            .await?;
        confirmed.repeated &= was_ours;
        Ok(confirmed)
    }

    /// How long giving this hold back is worth retrying: until its lease has ended in Redis
    /// too (for as long as it takes, without a lease).
    fn retry(&self) -> Retry {
        match (&self.lease, self.release_unleased) {
            (Some(lease), false) => Retry::UntilLeaseEnds(
                lease
                    .ends_at()
                    .checked_add(self.client.abandoned_request_grace())
                    .unwrap_or_else(|| lease.ends_at()),
            ),
            _ => Retry::UntilConfirmed,
        }
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        let retry = self.retry();
        self.report_held();
        drop(self.lease.take());
        self.leave_local_count();
        if let Some(call) = self.release.take() {
            self.client.spawn_release(call, retry);
        }
    }
}
