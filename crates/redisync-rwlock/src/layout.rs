//! Where a read-write lock keeps its state in Redis: the one place its key and channel names
//! are spelled. The crate names its keys from this type only, as do `redisync inspect` and the
//! tests; a test checks the "Redis keys" table of [`ReadWriteLock`](crate::ReadWriteLock)
//! against [`ReadWriteLockLayout::entries`].

use redisync_core::toolkit::{KeyFamily, KeySpace};

/// The keys and channels of one [`ReadWriteLock`](crate::ReadWriteLock).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadWriteLockLayout {
    /// Hash, the holds and waiters: `mode`; the write hold (`writer`, `wcount`, `wtoken`,
    /// `wexp`); `r:<owner>` (read holds per owner); `a:<attempt>` (one per hold); `rc` (read
    /// holds); `exp` (when the keys expire); `w:<waiter>`, `w` (calls waiting, and how many);
    /// `wm` (a write hold granted over waiting writers' marks); `sh` (a shared read hold was
    /// taken). Expires with the longest live hold.
    pub hash: String,
    /// Sorted set: read hold (attempt id) → end of its lease, server ms. Expires with the
    /// hash.
    pub readers: String,
    /// Sorted set: waiting writer → when its mark lapses.
    pub writers: String,
    /// String: the last fencing token; never expires.
    pub fence: String,
    /// Channel, the wake-up: a write hold ended, the lock was freed, or a writer stopped
    /// waiting (only when someone registered as waiting).
    pub channel: String,
    /// Channel: a writer started waiting while shared read holds exist, or they were
    /// force-unlocked or deleted; clients subscribe while they have a shared read hold.
    pub drain: String,
    /// Not in Redis: the name of this client's local queue of waiting readers.
    pub read_queue: String,
    /// Not in Redis: the name of this client's local queue of waiting writers.
    pub write_queue: String,
    /// Strings, one per attempt (by attempt id) whose caller went away and whose give-back
    /// found nothing to give back: a late acquire of that attempt is refused. Kept for the
    /// attempt's lease and two command timeouts.
    pub attempt_records: KeyFamily,
    /// Strings, one per waiting writer (by waiter id) that withdrew: kept as long as a mark
    /// lasts, so a late attempt of it cannot mark or register again.
    pub waiter_records: KeyFamily,
}

impl ReadWriteLockLayout {
    /// The layout of the read-write lock whose keys live in `space`.
    pub fn new(space: &KeySpace) -> Self {
        ReadWriteLockLayout {
            hash: space.key("rw"),
            readers: space.key("rw:readers"),
            writers: space.key("rw:writers"),
            fence: space.key("rw:fence"),
            channel: space.key("rw:wake"),
            drain: space.key("rw:drain"),
            read_queue: space.key("rw:read-queue"),
            write_queue: space.key("rw:write-queue"),
            attempt_records: space.family("rw:attempt:"),
            waiter_records: space.family("rw:waiter:"),
        }
    }

    /// Every key and channel in Redis with its kind, as the "Redis keys" table of
    /// [`ReadWriteLock`](crate::ReadWriteLock) names them (a family by the placeholder the
    /// table uses for its id).
    pub fn entries(&self) -> Vec<(String, &'static str)> {
        // Every field, by name: a field added to the layout does not compile here until listed.
        let ReadWriteLockLayout {
            hash,
            readers,
            writers,
            fence,
            channel,
            drain,
            read_queue: _,
            write_queue: _,
            attempt_records,
            waiter_records,
        } = self;
        vec![
            (hash.clone(), "hash"),
            (readers.clone(), "sorted set"),
            (writers.clone(), "sorted set"),
            (fence.clone(), "string"),
            (waiter_records.of("<waiter>"), "string"),
            (attempt_records.of("<attempt>"), "string"),
            (channel.clone(), "channel"),
            (drain.clone(), "channel"),
        ]
    }
}
