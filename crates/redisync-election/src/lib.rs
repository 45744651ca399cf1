//! Leader election for [redisync](https://docs.rs/redisync): [`LeaderElection`], where
//! candidates on any number of machines campaign and one at a time leads, with a term that
//! fences its writes ([`Leadership::term`]), a watchdog-kept lease, hand-over at once on
//! [`Leadership::resign`], and a stream of every change of leader
//! ([`LeaderElection::observe`]).

#![deny(missing_docs)]

mod election;
#[doc(hidden)]
pub mod layout;
mod leadership;
mod observe;
mod scripts;

pub use election::{Leader, LeaderElection, MAX_VALUE_LEN};
pub use leadership::Leadership;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_cross_tasks() {
        fn check<T: Send + Sync + 'static>() {}
        check::<LeaderElection>();
        check::<Leadership>();
    }
}
