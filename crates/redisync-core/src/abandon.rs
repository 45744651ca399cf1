//! Requests that finish even when their caller stops waiting.
//!
//! Dropping an acquire future while its script is on the wire leaves the outcome unknown: Redis
//! may still run the script and grant the hold. Instead of guessing, [`Abandonable`] keeps the
//! request alive: when it is dropped before completing, the rest of the request runs on a
//! background task and its result goes to a cleanup (for an acquire: release exactly what that
//! attempt got). The common path, where the caller awaits to the end, spawns nothing.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::future::BoxFuture;

/// How a request ended that its caller no longer waited for: what the undo of an abandoned
/// acquire learns (see [`Toolkit::eval_undoable`](crate::toolkit::Toolkit::eval_undoable)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LateOutcome<T> {
    /// Redis ran the request and answered this.
    Replied(T),
    /// Nobody can tell whether Redis ran it: the connection broke or the reply never came.
    Unknown,
    /// Redis answered with an error. A script of this project fails before its first write,
    /// so nothing was granted; but the attempt is over, which a waiter may have to act on
    /// (a lock withdraws its client once no attempt of a finished wait is on the wire).
    Refused,
}

/// What runs on the output of a request its caller abandoned (see [`Abandonable`]): any
/// `FnOnce(T) -> impl Future<Output = ()>` that can move to a background task.
pub trait Cleanup<T>: Send + 'static {
    /// The rest of `request`, then this cleanup on its output, as one background task.
    fn after(self, request: BoxFuture<'static, T>) -> BoxFuture<'static, ()>;
}

impl<T, C, CF> Cleanup<T> for C
where
    T: Send + 'static,
    C: FnOnce(T) -> CF + Send + 'static,
    CF: Future<Output = ()> + Send + 'static,
{
    fn after(self, request: BoxFuture<'static, T>) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let out = request.await;
            self(out).await;
        })
    }
}

/// A future that, if dropped before completing, finishes in the background and hands its
/// output to a cleanup.
///
/// The cleanup is kept as it is, not boxed: the common path, where the caller awaits the
/// request to its end, allocates only the box the request needs to be movable to the
/// background. After completion the cleanup can be taken back
/// ([`take_cleanup`](Self::take_cleanup)), for a caller whose own error path needs it.
#[must_use = "futures do nothing unless polled"]
pub struct Abandonable<T: Send + 'static, C: Cleanup<T>> {
    request: Option<BoxFuture<'static, T>>,
    cleanup: Option<C>,
    // Taken when the request starts, so a drop outside the runtime (another thread, a
    // destructor after the runtime's context is gone) can still hand the rest to it.
    runtime: Option<tokio::runtime::Handle>,
}

// The request is boxed and the cleanup is never polled: nothing here is pinned.
impl<T: Send + 'static, C: Cleanup<T>> Unpin for Abandonable<T, C> {}

impl<T: Send + 'static, C: Cleanup<T>> Abandonable<T, C> {
    /// Wraps `request`; `cleanup` runs on its output only if the wrapper is dropped first.
    pub fn new<F>(request: F, cleanup: C) -> Self
    where
        F: Future<Output = T> + Send + 'static,
    {
        Abandonable {
            request: Some(Box::pin(request)),
            cleanup: Some(cleanup),
            runtime: tokio::runtime::Handle::try_current().ok(),
        }
    }

    /// The cleanup, once the request has completed (it then never runs by itself); `None`
    /// before, and after it was taken.
    pub fn take_cleanup(&mut self) -> Option<C> {
        match self.request {
            Some(_) => None,
            None => self.cleanup.take(),
        }
    }
}

impl<T: Send + 'static, C: Cleanup<T>> Future for Abandonable<T, C> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let Some(request) = self.request.as_mut() else {
            // Polled after completion: stay pending rather than panic.
            return Poll::Pending;
        };
        match request.as_mut().poll(cx) {
            Poll::Ready(out) => {
                self.request = None;
                Poll::Ready(out)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: Send + 'static, C: Cleanup<T>> Drop for Abandonable<T, C> {
    fn drop(&mut self) {
        // Only a request that has not completed is abandoned.
        let (Some(request), Some(cleanup)) = (self.request.take(), self.cleanup.take()) else {
            return;
        };
        // Without a runtime nothing can run; the lease bounds whatever the request got.
        let runtime = self
            .runtime
            .take()
            .or_else(|| tokio::runtime::Handle::try_current().ok());
        match runtime {
            Some(runtime) => {
                runtime.spawn(cleanup.after(request));
            }
            None => tracing::warn!("request abandoned with no runtime to finish it"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    #[tokio::test]
    async fn completed_request_skips_cleanup() {
        let cleaned = Arc::new(AtomicU32::new(0));
        let c = cleaned.clone();
        let out = Abandonable::new(async { 7 }, move |_| async move {
            c.fetch_add(1, Ordering::SeqCst);
        })
        .await;
        assert_eq!(out, 7);
        tokio::task::yield_now().await;
        assert_eq!(cleaned.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn dropped_request_finishes_and_cleans_up() {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let request = Abandonable::new(
            async {
                tokio::time::sleep(Duration::from_millis(20)).await;
                5
            },
            move |out| async move {
                let _ = tx.send(out);
            },
        );
        assert!(tokio::time::timeout(Duration::from_millis(1), request)
            .await
            .is_err());
        assert_eq!(rx.await.ok(), Some(5));
    }
}
