//! Distributed semaphores for [redisync](https://docs.rs/redisync): the classic
//! [`Semaphore`] (permits are a counter anyone may take and give back) and the
//! [`ExpirableSemaphore`] (each permit has an id and a lease, and comes back by itself when
//! its holder dies).
//!
//! Use [`Semaphore`] to bound concurrency across processes that are trusted to give permits
//! back, or to signal between processes (one releases, another acquires). Use
//! [`ExpirableSemaphore`] when a holder may crash: its permits return within their lease.

#![deny(missing_docs)]

mod expirable;
mod scripts;
mod semaphore;
mod waiters;

pub use expirable::{ExpirablePermit, ExpirableSemaphore};
pub use scripts::MAX_PERMITS;
pub use semaphore::{Semaphore, SemaphorePermit};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_and_permits_cross_tasks() {
        fn check<T: Send + Sync + 'static>() {}
        check::<Semaphore>();
        check::<SemaphorePermit>();
        check::<ExpirableSemaphore>();
        check::<ExpirablePermit>();
    }
}
