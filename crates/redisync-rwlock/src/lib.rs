//! The distributed read-write lock of [redisync](https://docs.rs/redisync):
//! [`ReadWriteLock`], [`ReadGuard`] and [`WriteGuard`], and the lock's two sides as primitives
//! of their own, [`ReadLock`] and [`WriteLock`] (`rw.reader()`, `rw.writer()`).
//!
//! Use it for read-mostly data shared by many processes, such as a cache that many tasks
//! read and one refresher rewrites: readers proceed together, a writer gets the data to
//! itself, and by default waiting writers are never starved by a stream of readers. See
//! [`ReadWriteLock`] for the semantics, the key layout and the round trips.

#![deny(missing_docs)]

mod guard;
#[doc(hidden)]
pub mod layout;
mod rwlock;
mod scripts;
mod shared;
mod sides;

pub use guard::{ReadGuard, WriteGuard};
pub use rwlock::ReadWriteLock;
pub use sides::{ReadLock, WriteLock};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_and_guards_cross_tasks() {
        fn check<T: Send + Sync + 'static>() {}
        check::<ReadWriteLock>();
        check::<ReadGuard>();
        check::<WriteGuard>();
        check::<ReadLock>();
        check::<WriteLock>();
    }
}
