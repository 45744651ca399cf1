//! Distributed semaphores for [redisync](https://docs.rs/redisync): the classic
//! [`Semaphore`] (permits are a counter anyone may take and give back) and the
//! [`ExpirableSemaphore`] (each permit has an id and a lease, and comes back by itself when
//! its holder dies).
//!
//! Use [`Semaphore`] to bound concurrency across processes that are trusted to give permits
//! back, or to signal between processes (one releases, another acquires). Use
//! [`ExpirableSemaphore`] when a holder may crash: its permits return within their lease.
//!
//! # Wake-ups
//!
//! Both semaphores wake waiters the same way. A client with tasks waiting on a semaphore is
//! registered once in the semaphore's `waiters` sorted set, under a channel of its own
//! (`…:wake:<client id>`), on which its head waiters listen (one per permit count asked for;
//! the client's other tasks wait behind them in-process). Permits freed wake that many
//! clients, those that have waited longest, and never more than there are permits free: the
//! others sleep on, so the scripts a hand-off costs do not grow with the number of clients,
//! and nothing is published when nobody waits. A client that got in goes to the back of the
//! queue if more of its tasks wait, so clients take turns and none starves.
//!
//! When a client's last waiting task gives up (its wait ran out, its future was dropped, or
//! it failed), the client withdraws, and a wake-up it may have been sent meanwhile is passed
//! on to the next client if permits are free: giving up never swallows a wake-up meant for
//! someone else.
//!
//! Clients that cannot act:
//!
//! * A crashed client's connections are gone, so a wake-up sent to it reaches nobody
//!   (`PUBLISH` answers 0) and goes to the next client at once; its entry is dropped then.
//! * A client that is alive but stopped (`SIGSTOP`, a stalled runtime) takes the wake-up and
//!   does nothing with it: the freed permit then waits for the next client's periodic
//!   re-check, at most a second later (for the expirable semaphore, the nearest lease end if
//!   that is sooner). The stopped client is out of the queue by then, and joins its end when
//!   it runs again.
//! * Entries nobody wakes (their clients vanished while nothing was released) go with the
//!   whole registry, about five seconds plus two command timeouts after the last client
//!   registered; a live waiter registers again with every re-check.

#![deny(missing_docs)]

mod expirable;
#[doc(hidden)]
pub mod layout;
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
