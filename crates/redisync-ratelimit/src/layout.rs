//! Where a rate limiter keeps its state in Redis: the one place its key and channel names are
//! spelled. The crate names its keys from this type only, as do `redisync inspect` and the
//! tests; a test checks the "Redis keys" table of [`RateLimiter`](crate::RateLimiter) against
//! [`RateLimiterLayout::entries`].

use redisync_core::toolkit::KeySpace;

/// The keys and channels of one [`RateLimiter`](crate::RateLimiter).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimiterLayout {
    /// Hash, the rate: `rate` (units), `per` (µs), `burst`, and the exact quotients and
    /// remainders the decisions use (`pq`, `pr`, `tq`, `tr`). No expiry.
    pub rate: String,
    /// Hash, the bucket: `tat`, `rem` (the theoretical arrival time); `last`, `ptat`, `prem`
    /// (the last allowed decision's request id and the time before it, so that it can be
    /// given back). Expires when the bucket is full again.
    pub state: String,
    /// Channel: the rate was replaced or deleted.
    pub changed: String,
    /// Not in Redis: where this client's waiters of the limiter queue behind one head.
    pub local_queue: String,
}

impl RateLimiterLayout {
    /// The layout of the rate limiter whose keys live in `space`.
    pub fn new(space: &KeySpace) -> Self {
        RateLimiterLayout {
            rate: space.key("rate"),
            state: space.key("rate:state"),
            changed: space.key("rate:changed"),
            local_queue: space.key("rate:queue"),
        }
    }

    /// Every key and channel in Redis with its kind, as the "Redis keys" table of
    /// [`RateLimiter`](crate::RateLimiter) names them.
    pub fn entries(&self) -> Vec<(String, &'static str)> {
        // Every field, by name: a field added to the layout does not compile here until listed.
        let RateLimiterLayout {
            rate,
            state,
            changed,
            local_queue: _,
        } = self;
        vec![
            (rate.clone(), "hash"),
            (state.clone(), "hash"),
            (changed.clone(), "channel"),
        ]
    }
}
