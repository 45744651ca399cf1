//! Locking std mutexes that guard plain bookkeeping.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex`, ignoring poisoning: the maps it guards are updated in single statements and
/// stay consistent even if a panic elsewhere poisoned the lock, so carrying on is right.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
