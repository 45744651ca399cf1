//! What a guard knows about its lease: whether it is still ours.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use crate::signal::Flag;
use crate::watchdog::Renewal;

/// The lease behind one guard or permit.
///
/// A watchdog lease is renewed until the `Lease` is dropped; it is marked lost when a renewal
/// finds the hold gone or not ours, or when renewals kept failing until the lease would have
/// ended. A fixed lease is lost once its time has passed, counted from the moment the acquire
/// was sent (so the client never believes it holds longer than Redis does).
#[derive(Debug)]
pub struct Lease {
    lost: Arc<Flag>,
    expires_at: Option<Instant>,
    // Dropping this stops renewal at once.
    _renewal: Option<Renewal>,
}

impl Lease {
    pub(crate) fn renewed(renewal: Renewal, lost: Arc<Flag>) -> Self {
        Lease {
            lost,
            expires_at: None,
            _renewal: Some(renewal),
        }
    }

    /// A lease that ends at `expires_at` and is never renewed.
    pub fn fixed(expires_at: Instant) -> Self {
        Lease {
            lost: Arc::new(Flag::default()),
            expires_at: Some(expires_at),
            _renewal: None,
        }
    }

    /// Whether the client knows the hold is gone.
    pub fn is_lost(&self) -> bool {
        self.lost.is_set() || self.expires_at.is_some_and(|at| Instant::now() >= at)
    }

    /// Marks the lease lost (for example after a release found the hold gone).
    pub fn mark_lost(&self) {
        self.lost.set();
    }

    /// Completes once the hold is known to be gone. The future owns what it needs, so it
    /// outlives the guard.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let lost = self.lost.clone();
        let expires_at = self.expires_at;
        async move {
            match expires_at {
                Some(at) => {
                    tokio::select! {
                        _ = lost.wait() => {}
                        _ = tokio::time::sleep_until(at.into()) => {}
                    }
                }
                None => lost.wait().await,
            }
        }
    }
}
