//! How a client's waiters learn that a primitive may be free: [`WaitStrategy`].

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use crate::error::{Error, Result};

/// How waiters learn that a busy primitive may be free; a client option
/// ([`ClientBuilder::wait_strategy`](crate::ClientBuilder::wait_strategy)).
///
/// Whichever is chosen, a waiting task also re-checks when the holder's lease would end (so a
/// crashed holder costs at most its lease), tasks of one client waiting on one primitive
/// coalesce (one of them asks Redis, for all of them), and every primitive works the same.
///
/// # Examples
///
/// ```
/// use redisync::prelude::*;
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redisync::Result<()> {
/// # let server = redisync_test_harness::RedisServer::start();
/// # let url = server.url(); // e.g. "redis://127.0.0.1:6379/"
/// // For a server or an ACL user without pub/sub: re-check every 50 ms instead.
/// let polling = WaitStrategy::Poll { interval: Duration::from_millis(50) };
/// let client = Client::builder(url.clone()).wait_strategy(polling).build().await?;
/// let guard = client.lock("jobs").lock().await?;
/// let waiter = client.lock("jobs");
/// assert!(waiter.try_lock_for(Duration::from_millis(100)).await?.is_none());
/// guard.unlock().await?;
/// assert!(waiter.try_lock_for(Duration::from_secs(5)).await?.is_some());
///
/// // Out of range: refused when the client is built.
/// let too_fast = WaitStrategy::Poll { interval: Duration::ZERO };
/// let refused = Client::builder(url).wait_strategy(too_fast).build().await;
/// assert!(matches!(refused, Err(Error::InvalidArgument(_))));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WaitStrategy {
    /// Releases publish a wake-up, and the client listens on one subscriber connection
    /// (the default). A hand-off costs one message, and a waiter sends nothing while it waits.
    #[default]
    PubSub,
    /// The client never subscribes: the waiters of each primitive re-check every `interval`
    /// (each time spread by up to ±25 % of random jitter, so that clients started together do
    /// not ask together). For Redis-compatible servers without pub/sub, and for ACL users
    /// without channel access (`resetchannels`; releases then still try to publish, and
    /// Redis's refusal is ignored).
    ///
    /// A hand-off then takes up to about `interval` longer, and a client with waiters sends one
    /// request per primitive per interval, however many of its tasks wait (except where each
    /// waiter has a place of its own in Redis: a fair lock's waiters each re-check, as each
    /// would on a release message). `interval` must be between [`MIN_POLL_INTERVAL`] and
    /// [`MAX_POLL_INTERVAL`].
    Poll {
        /// How often the waiters of one primitive re-check.
        interval: Duration,
    },
}

/// The shortest poll interval a client accepts.
pub const MIN_POLL_INTERVAL: Duration = Duration::from_millis(1);

/// The longest poll interval a client accepts: a waiter re-checks at least this often anyway
/// ([`MAX_SLEEP`](crate::MAX_SLEEP)).
pub const MAX_POLL_INTERVAL: Duration = Duration::from_secs(10);

impl WaitStrategy {
    /// Fails with [`Error::InvalidArgument`] for a poll interval out of range.
    pub(crate) fn check(self) -> Result<()> {
        match self {
            WaitStrategy::PubSub => Ok(()),
            WaitStrategy::Poll { interval }
                if (MIN_POLL_INTERVAL..=MAX_POLL_INTERVAL).contains(&interval) =>
            {
                Ok(())
            }
            WaitStrategy::Poll { interval } => Err(Error::invalid(format!(
                "poll interval must be between {MIN_POLL_INTERVAL:?} and \
                 {MAX_POLL_INTERVAL:?}, found {interval:?}"
            ))),
        }
    }
}

/// `interval` spread by a random amount of up to ±25 %.
pub(crate) fn jittered(interval: Duration) -> Duration {
    // `RandomState` is seeded randomly (per process, then stepped per instance): random
    // enough to keep clients apart, without a dependency for it.
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    let quarter = interval / 4;
    let spread = u64::try_from(quarter.as_nanos())
        .unwrap_or(u64::MAX)
        .saturating_mul(2);
    let offset = random % spread.saturating_add(1);
    (interval - quarter) + Duration::from_nanos(offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_a_quarter_and_varies() {
        let interval = Duration::from_millis(100);
        let samples: Vec<Duration> = (0..200).map(|_| jittered(interval)).collect();
        for sample in &samples {
            assert!(
                (Duration::from_millis(75)..=Duration::from_millis(125)).contains(sample),
                "{sample:?}"
            );
        }
        let first = samples[0];
        assert!(samples.iter().any(|s| *s != first), "no jitter at all");
        assert_eq!(jittered(Duration::ZERO), Duration::ZERO);
        assert_eq!(jittered(Duration::from_nanos(3)), Duration::from_nanos(3));
    }

    #[test]
    fn poll_intervals_out_of_range_are_refused() {
        assert!(WaitStrategy::PubSub.check().is_ok());
        for ok in [
            MIN_POLL_INTERVAL,
            Duration::from_millis(50),
            MAX_POLL_INTERVAL,
        ] {
            assert!(WaitStrategy::Poll { interval: ok }.check().is_ok());
        }
        for bad in [
            Duration::ZERO,
            Duration::from_micros(999),
            MAX_POLL_INTERVAL + Duration::from_nanos(1),
            Duration::MAX,
        ] {
            assert!(matches!(
                WaitStrategy::Poll { interval: bad }.check(),
                Err(Error::InvalidArgument(_))
            ));
        }
    }
}
