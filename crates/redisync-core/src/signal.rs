//! A one-way flag that tasks can wait on: set once, observed by everyone.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

/// A flag that starts clear, can be set once, and wakes everyone waiting when it is set.
#[derive(Debug, Default)]
pub struct Flag {
    set: AtomicBool,
    notify: Notify,
}

impl Flag {
    /// Sets the flag and wakes every waiter. Returns `true` if this call set it.
    pub fn set(&self) -> bool {
        let first = !self.set.swap(true, Ordering::AcqRel);
        if first {
            self.notify.notify_waiters();
        }
        first
    }

    /// Whether the flag is set.
    pub fn is_set(&self) -> bool {
        self.set.load(Ordering::Acquire)
    }

    /// Completes once the flag is set (at once if it already is).
    pub async fn wait(&self) {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            // Registering before the check closes the gap between "not set yet" and "waiting".
            notified.as_mut().enable();
            if self.is_set() {
                return;
            }
            notified.await;
        }
    }
}
