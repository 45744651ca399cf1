//! [`ReleasesInFlight`]: the releases and give-backs of one owner that Redis has not
//! confirmed yet.
//!
//! A guard dropped, an `unlock()` that timed out, or an acquire abandoned on the wire all
//! leave a request going on in the background. Until it lands, Redis still shows the hold it
//! gives back: the same owner's next acquire would read it as its own and re-enter it (with
//! the old fencing token), or, on a read-write lock, refuse a write as an upgrade. So the
//! owner's acquires wait, for a bounded time, until none is in flight.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

/// Counts releases and give-backs on their way to Redis: one owner's, or (for a shutdown,
/// which waits for them) all of a client's.
///
/// A primitive keeps one per owner, attaches it to the release and give-back calls of that
/// owner ([`ScriptCall::counted_in`](crate::ScriptCall::counted_in)) and to its acquire calls
/// (whose give-back, if their caller goes away, counts from that moment on), and has every
/// acquire of the owner wait for [`settled`](Self::settled) before it sends anything.
///
/// A release that goes on as another request (a give-back an abandoned acquire's undo
/// sends, a retry after the caller's attempt failed) begins its count before the one it
/// continues ends, so the count never passes through zero in between.
#[derive(Debug, Default)]
pub struct ReleasesInFlight {
    count: AtomicUsize,
    settled: Notify,
}

/// One release counted in a [`ReleasesInFlight`] until it is dropped.
#[derive(Debug)]
pub(crate) struct InFlight(Arc<ReleasesInFlight>);

impl ReleasesInFlight {
    /// A count of none, to share among an owner's handles.
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// Counts one more release until the returned value is dropped.
    pub(crate) fn begin(self: &Arc<Self>) -> InFlight {
        self.count.fetch_add(1, Ordering::AcqRel);
        InFlight(self.clone())
    }

    /// Whether no release of the owner is in flight.
    pub fn is_settled(&self) -> bool {
        self.count.load(Ordering::Acquire) == 0
    }

    /// Completes once no release of the owner is in flight, or after `bound`, whichever is
    /// first; returns whether they settled. Costs one atomic read when none is in flight.
    pub async fn settled(&self, bound: Duration) -> bool {
        if self.is_settled() {
            return true;
        }
        let wait = async {
            loop {
                let settled = self.settled.notified();
                tokio::pin!(settled);
                // Registered before the check, so that the last release ending in between
                // is not missed.
                settled.as_mut().enable();
                if self.is_settled() {
                    return;
                }
                settled.await;
            }
        };
        tokio::time::timeout(bound, wait).await.is_ok()
    }
}

/// The counts a call counts in: usually one owner's, several for a call that acquires for
/// several owners at once (a multi-lock's).
#[derive(Debug, Clone, Default)]
pub(crate) struct CountedIn {
    first: Option<Arc<ReleasesInFlight>>,
    more: Vec<Arc<ReleasesInFlight>>,
}

impl CountedIn {
    pub(crate) fn add(&mut self, releases: &Arc<ReleasesInFlight>) {
        match self.first {
            None => self.first = Some(releases.clone()),
            Some(_) => self.more.push(releases.clone()),
        }
    }

    /// Counts one release in each until the returned value is dropped.
    pub(crate) fn begin(&self) -> InFlightIn {
        InFlightIn {
            _first: self.first.as_ref().map(ReleasesInFlight::begin),
            _more: self.more.iter().map(ReleasesInFlight::begin).collect(),
        }
    }
}

/// One release counted in each count of a [`CountedIn`] until it is dropped.
#[derive(Debug)]
pub(crate) struct InFlightIn {
    _first: Option<InFlight>,
    _more: Vec<InFlight>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.settled.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn settles_when_the_last_release_ends() {
        let releases = ReleasesInFlight::new();
        assert!(releases.settled(Duration::ZERO).await);
        let first = releases.begin();
        let second = releases.begin();
        assert!(!releases.settled(Duration::from_millis(5)).await);
        let waiting = tokio::spawn({
            let releases = releases.clone();
            async move { releases.settled(Duration::from_secs(30)).await }
        });
        drop(first);
        tokio::task::yield_now().await;
        assert!(!releases.is_settled());
        drop(second);
        assert!(waiting.await.unwrap_or(false));
    }

    #[test]
    fn a_call_counts_in_every_count_it_names() {
        let (one, two) = (ReleasesInFlight::new(), ReleasesInFlight::new());
        let mut counted = CountedIn::default();
        counted.add(&one);
        counted.add(&two);
        let in_flight = counted.begin();
        assert!(!one.is_settled() && !two.is_settled());
        drop(in_flight);
        assert!(one.is_settled() && two.is_settled());
    }
}
