//! A distributed rate limiter for [redisync](https://docs.rs/redisync): [`RateLimiter`],
//! an exact GCRA shared by every client, decided in Redis on Redis's clock in one round trip,
//! with a [`Rate`] of `units` per period plus a burst.

#![deny(missing_docs)]

#[doc(hidden)]
pub mod layout;
mod limiter;
mod rate;
mod scripts;

pub use limiter::{Decision, RateLimiter};
pub use rate::{ParseRateError, Rate, MAX_PERIOD, MAX_PRODUCT};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_cross_tasks() {
        fn check<T: Send + Sync + 'static>() {}
        check::<RateLimiter>();
        check::<Rate>();
        check::<Decision>();
    }

    #[test]
    fn futures_can_be_spawned() {
        fn send<T: Send>(_: &T) {}
        fn futures(limiter: &RateLimiter) {
            send(&limiter.try_acquire(1));
            send(&limiter.acquire(1));
            send(&limiter.acquire_for(1, std::time::Duration::ZERO));
            send(&limiter.try_set_rate(Rate::per_second(1)));
            send(&limiter.set_rate(Rate::per_second(1)));
            send(&limiter.rate());
        }
        let _ = futures;
    }
}
