//! Where a latch keeps its state in Redis: the one place its key and channel names are
//! spelled. The crate names its keys from this type only, as do `redisync inspect` and the
//! tests; a test checks the "Redis keys" table of [`CountDownLatch`](crate::CountDownLatch)
//! against [`CountDownLatchLayout::entries`].

use redisync_core::toolkit::KeySpace;

/// The keys and channels of one [`CountDownLatch`](crate::CountDownLatch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CountDownLatchLayout {
    /// Hash, present only while armed: `count` (count-downs still needed), `arming` (id of
    /// the `try_set_count` that armed it), `prior`, and one field per count-down applied to
    /// this arming (its request id → its outcome), so that a retry is not applied twice.
    pub latch: String,
    /// Hash: the latch hash of the arming that opened (or was deleted) last, kept for
    /// [`COUNT_DOWN_MEMORY`](crate::COUNT_DOWN_MEMORY) after that, so that a count-down
    /// retried after the opening is not applied twice.
    pub opened: String,
    /// Sorted set: the clients with tasks waiting, so that an opening publishes only when
    /// somebody waits. Deleted by the opening; expires 5 s plus two command timeouts after the
    /// last one registered.
    pub waiters: String,
    /// Channel: the latch opened.
    pub channel: String,
    /// Not in Redis: where this client's waiters of the latch share one subscription.
    pub local_queue: String,
}

impl CountDownLatchLayout {
    /// The layout of the latch whose keys live in `space`.
    pub fn new(space: &KeySpace) -> Self {
        CountDownLatchLayout {
            latch: space.key("latch"),
            opened: space.key("latch:count_down:opened"),
            waiters: space.key("latch:waiters"),
            channel: space.key("latch:wake"),
            local_queue: space.key("latch:queue"),
        }
    }

    /// Every key and channel in Redis with its kind, as the "Redis keys" table of
    /// [`CountDownLatch`](crate::CountDownLatch) names them.
    pub fn entries(&self) -> Vec<(String, &'static str)> {
        // Every field, by name: a field added to the layout does not compile here until listed.
        let CountDownLatchLayout {
            latch,
            opened,
            waiters,
            channel,
            local_queue: _,
        } = self;
        vec![
            (latch.clone(), "hash"),
            (opened.clone(), "hash"),
            (waiters.clone(), "sorted set"),
            (channel.clone(), "channel"),
        ]
    }
}
