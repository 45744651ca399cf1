//! A distributed count-down latch for [redisync](https://docs.rs/redisync):
//! [`CountDownLatch`], a barrier that any number of tasks on any number of machines wait on
//! until a count, set once, has been counted down to zero.

#![deny(missing_docs)]

mod latch;
#[doc(hidden)]
pub mod layout;
mod scripts;

pub use latch::{CountDownLatch, COUNT_DOWN_MEMORY, MAX_COUNT, RECHECK};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_cross_tasks() {
        fn check<T: Send + Sync + 'static>() {}
        check::<CountDownLatch>();
    }
}
