//! [`Hold`]: the part every guard shares — a lease, and a release that always happens.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tracing::Instrument;

use crate::abandon::Abandonable;
use crate::client::Client;
use crate::error::{Error, Result};
use crate::lease::Lease;
use crate::script::ScriptCall;

/// One hold on a primitive, as a guard owns it: its [`Lease`] and the idempotent script call
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
    lease: Option<Lease>,
    // Counts this hold among its owner's live local holds until it is released.
    local: Option<Arc<AtomicUsize>>,
    // Set for holds without a lease: their release must eventually happen.
    release_unleased: bool,
}

impl Hold {
    /// A hold released by `release`, with `lease` telling whether it is still ours.
    pub fn new(client: Client, release: ScriptCall, lease: Lease) -> Self {
        Hold {
            client,
            release: Some(release),
            lease: Some(lease),
            local: None,
            release_unleased: false,
        }
    }

    /// A hold without a lease (a classic semaphore's permits are not leased): it is never
    /// lost, and since no lease would ever make up for a release that did not happen, its
    /// release is retried in the background until Redis confirms it (see
    /// [`Client::spawn_until_done`]); the release script must allow that.
    pub fn unleased(client: Client, release: ScriptCall) -> Self {
        Hold {
            client,
            release: Some(release),
            lease: None,
            local: None,
            release_unleased: true,
        }
    }

    /// Gives the hold a fixed lease of `lease`, set by a request sent at `sent_at` (after a
    /// primitive's script set it in Redis); watchdog renewal stops. See [`Lease::fix`].
    pub fn fix_lease(&mut self, sent_at: std::time::Instant, lease: std::time::Duration) {
        if let Some(current) = &mut self.lease {
            current.fix(sent_at, lease);
        }
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

    fn leave_local_count(&mut self) {
        if let Some(counter) = self.local.take() {
            counter.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Whether the client knows the hold is gone (see [`Lease`]); never for an unleased hold
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
        let lost = self.lease.as_ref().map(Lease::lost);
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
    /// # Cancel safety
    ///
    /// If the future is dropped before it completes, the release still runs in the background.
    pub async fn release(mut self, span: tracing::Span) -> Result<i64> {
        drop(self.lease.take());
        self.leave_local_count();
        let Some(call) = self.release.take() else {
            return Err(Error::Shutdown);
        };
        let unleased = self.release_unleased;
        if self.client.is_shut_down() {
            self.finish_in_background(call, unleased);
            return Err(Error::Shutdown);
        }
        let request = self.client.eval_idempotent::<i64>(call.clone());
        let reply = Abandonable::new(request, |_| async {})
            .instrument(span)
            .await;
        if unleased
            && reply
                .as_ref()
                .is_err_and(|err| err.is_outcome_unknown() || err.is_retryable())
        {
            // Nothing else would ever give these back: keep trying (an outage, or a cluster
            // refusing requests while it reconfigures, outlasted this call).
            self.client.spawn_until_done(call);
        }
        reply
    }

    fn finish_in_background(&self, call: ScriptCall, unleased: bool) {
        if unleased {
            self.client.spawn_until_done(call);
        } else {
            self.client.spawn_idempotent(call);
        }
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        drop(self.lease.take());
        self.leave_local_count();
        if let Some(call) = self.release.take() {
            self.finish_in_background(call, self.release_unleased);
        }
    }
}
