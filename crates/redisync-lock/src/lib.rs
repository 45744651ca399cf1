//! Distributed locks for [redisync](https://docs.rs/redisync): [`ReentrantLock`], its
//! first-come-first-served sibling [`FairLock`], and their [`LockGuard`].
//!
//! A lock is held by an *owner*: a handle and its clones. The same owner may acquire again
//! while it holds the lock (re-entry); each acquisition returns a guard that gives back one
//! hold. Locks are leased, never held for ever: without an explicit lease the client's
//! watchdog keeps renewing the lease while the guard lives, so a crashed process frees its
//! locks within one watchdog timeout.
//!
//! Every new hold carries a fencing token, strictly increasing per lock name. A lock on Redis
//! cannot by itself guarantee mutual exclusion across process pauses or failovers; the token
//! lets the resource you protect reject a stale holder.
//!
//! See [`ReentrantLock`] and [`FairLock`] for their key layouts and round trips.

#![deny(missing_docs)]

mod core;
mod fair;
mod guard;
mod handover;
#[doc(hidden)]
pub mod layout;
mod lock;
mod scripts;

pub use fair::{FairLock, DEFAULT_HEARTBEAT};
pub use guard::LockGuard;
pub use lock::ReentrantLock;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_and_guards_cross_tasks() {
        fn check<T: Send + Sync + 'static>() {}
        check::<ReentrantLock>();
        check::<FairLock>();
        check::<LockGuard>();
    }
}
