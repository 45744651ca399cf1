//! Where the locks keep their state in Redis: the one place their key and channel names are
//! spelled. The crate names its keys from these types only, as do `redisync inspect` and the
//! tests; a test checks the "Redis keys" tables of [`ReentrantLock`](crate::ReentrantLock) and
//! [`FairLock`](crate::FairLock) against [`LockLayout::entries`] and
//! [`FairLockLayout::entries`].

use redisync_core::toolkit::{KeyFamily, KeySpace};

/// The keys and channels of one [`ReentrantLock`](crate::ReentrantLock).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockLayout {
    /// Hash, the hold: `owner`, `count` (holds), `token` (fencing token), one `a:<attempt>`
    /// per live hold, and `w` while clients may be registered as waiting. Exists exactly while
    /// the lock is held, and expires with the lease.
    pub hash: String,
    /// String: the last fencing token handed out; never expires.
    pub fence: String,
    /// Sorted set, one entry per client with tasks waiting: its wake-up channel → when it
    /// registered (server µs). Expires a few seconds after the last registration.
    pub waiters: String,
    /// Hash, the hand-over offers of waiting clients: wake-up channel → the offering task's
    /// owner id, attempt id, hand-over lease and when it offered. Expires with the registry.
    pub offers: String,
    /// Strings, one per acquire attempt whose outcome was unknown and that was given back:
    /// the give-back's outcome, kept for the lease plus two command timeouts, so that the
    /// acquire can no longer grant if Redis runs it late.
    pub attempt_records: KeyFamily,
    /// Channels, one per waiting client (by client id): a release that frees the lock
    /// publishes on the channel of the client that has waited longest.
    pub wake_channels: KeyFamily,
}

impl LockLayout {
    /// The layout of the lock whose keys live in `space`.
    pub fn new(space: &KeySpace) -> Self {
        LockLayout {
            hash: space.key("lock"),
            fence: space.key("fence"),
            waiters: space.key("waiters"),
            offers: space.key("offers"),
            attempt_records: space.family("attempt:"),
            wake_channels: space.family("wake:"),
        }
    }

    /// Every key and channel with its kind, as the "Redis keys" table of
    /// [`ReentrantLock`](crate::ReentrantLock) names them (a family by the placeholder the
    /// table uses for its id).
    pub fn entries(&self) -> Vec<(String, &'static str)> {
        // Every field, by name: a field added to the layout does not compile here until listed.
        let LockLayout {
            hash,
            fence,
            waiters,
            offers,
            attempt_records,
            wake_channels,
        } = self;
        vec![
            (hash.clone(), "hash"),
            (fence.clone(), "string"),
            (waiters.clone(), "sorted set"),
            (offers.clone(), "hash"),
            (attempt_records.of("<attempt>"), "string"),
            (wake_channels.of("<client id>"), "channel"),
        ]
    }
}

/// The keys and channels of one [`FairLock`](crate::FairLock).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FairLockLayout {
    /// Hash, the hold: as [`LockLayout::hash`].
    pub hash: String,
    /// String: the last fencing token handed out; never expires.
    pub fence: String,
    /// Strings, one per acquire call (by waiter id) whose hold or place was given back: the
    /// give-back's outcome, kept briefly.
    pub attempt_records: KeyFamily,
    /// Sorted set, the waiting calls: waiter id → arrival order (server µs). Expires with the
    /// last live waiter's place; `delete` and `force_unlock` keep it, since it belongs to the
    /// live waiters.
    pub queue: String,
    /// Sorted set: waiter id → server time (ms) at which a silent waiter is dropped. Expires
    /// with the queue.
    pub deadlines: String,
    /// Channels, one per waiting call (by waiter id): the lock is free and it is that
    /// waiter's turn.
    pub wake_channels: KeyFamily,
}

impl FairLockLayout {
    /// The layout of the fair lock whose keys live in `space`.
    pub fn new(space: &KeySpace) -> Self {
        FairLockLayout {
            hash: space.key("fair:lock"),
            fence: space.key("fair:fence"),
            attempt_records: space.family("fair:attempt:"),
            queue: space.key("fair:queue"),
            deadlines: space.key("fair:deadlines"),
            wake_channels: space.family("fair:wake:"),
        }
    }

    /// Every key and channel with its kind, as the "Redis keys" table of
    /// [`FairLock`](crate::FairLock) names them (a family by the placeholder the table uses
    /// for its id).
    pub fn entries(&self) -> Vec<(String, &'static str)> {
        // Every field, by name: a field added to the layout does not compile here until listed.
        let FairLockLayout {
            hash,
            fence,
            attempt_records,
            queue,
            deadlines,
            wake_channels,
        } = self;
        vec![
            (hash.clone(), "hash"),
            (fence.clone(), "string"),
            (attempt_records.of("<waiter>"), "string"),
            (queue.clone(), "sorted set"),
            (deadlines.clone(), "sorted set"),
            (wake_channels.of("<waiter>"), "channel"),
        ]
    }
}
