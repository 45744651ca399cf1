//! Locking several resources at once for [redisync](https://docs.rs/redisync).
//!
//! * [`MultiLock`]: all of a set of [`ReentrantLock`](redisync_lock::ReentrantLock)s or none,
//!   possibly on different clients and servers, deadlock-free whatever order callers list them
//!   in. Use it to protect several resources together (both accounts of a transfer).
//! * [`Redlock`]: one resource locked on a majority of independent Redis servers, so that it
//!   stays lockable while a minority of them is down. Read its documentation before using it:
//!   it is not a correctness mechanism.

#![deny(missing_docs)]

mod multi;
mod redlock;
mod release;

pub use multi::{MultiLock, MultiLockGuard};
pub use redlock::{Redlock, RedlockGuard};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_and_guards_cross_tasks() {
        fn check<T: Send + Sync + 'static>() {}
        check::<MultiLock>();
        check::<MultiLockGuard>();
        check::<Redlock>();
        check::<RedlockGuard>();
    }
}
