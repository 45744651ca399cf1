//! Where the semaphores keep their state in Redis: the one place their key and channel names
//! are spelled. The crate names its keys from these types only, as do `redisync inspect` and
//! the tests; a test checks the "Redis keys" tables of [`Semaphore`](crate::Semaphore) and
//! [`ExpirableSemaphore`](crate::ExpirableSemaphore) against [`SemaphoreLayout::entries`] and
//! [`ExpirableSemaphoreLayout::entries`].

use redisync_core::toolkit::{KeyFamily, KeySpace};

/// The keys and channels of one [`Semaphore`](crate::Semaphore).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SemaphoreLayout {
    /// String: the available permits (may be negative).
    pub permits: String,
    /// String: a unique id of this incarnation of the semaphore, written by whichever call
    /// creates the permits count and deleted with it.
    pub generation: String,
    /// Sorted set: the waiting clients' wake-up channels, longest waiting first. Expires 5 s
    /// plus two command timeouts after the last one registered.
    pub waiters: String,
    /// Strings, one per acquire (by attempt id): `granted:<generation>` while its permits
    /// are out, deleted when they come back; `given back`, for a few command timeouts, after
    /// the give-back of an acquire whose caller went away before its outcome was known.
    pub attempt_records: KeyFamily,
    /// Channels, one per waiting client (by client id): permits were added or released.
    pub wake_channels: KeyFamily,
    /// Not in Redis: the names of this client's local queues of waiting tasks, one per
    /// number of permits asked for.
    pub local_queues: KeyFamily,
}

impl SemaphoreLayout {
    /// The layout of the semaphore whose keys live in `space`.
    pub fn new(space: &KeySpace) -> Self {
        SemaphoreLayout {
            permits: space.key("semaphore"),
            generation: space.key("semaphore:generation"),
            waiters: space.key("semaphore:waiters"),
            attempt_records: space.family("semaphore:attempt:"),
            wake_channels: space.family("semaphore:wake:"),
            local_queues: space.family("semaphore:queue:"),
        }
    }

    /// Every key and channel in Redis with its kind, as the "Redis keys" table of
    /// [`Semaphore`](crate::Semaphore) names them (a family by the placeholder the table uses
    /// for its id).
    pub fn entries(&self) -> Vec<(String, &'static str)> {
        // Every field, by name: a field added to the layout does not compile here until listed.
        let SemaphoreLayout {
            permits,
            generation,
            waiters,
            attempt_records,
            wake_channels,
            local_queues: _,
        } = self;
        vec![
            (permits.clone(), "string"),
            (generation.clone(), "string"),
            (attempt_records.of("<attempt>"), "string"),
            (waiters.clone(), "sorted set"),
            (wake_channels.of("<client id>"), "channel"),
        ]
    }
}

/// The keys and channels of one [`ExpirableSemaphore`](crate::ExpirableSemaphore).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpirableSemaphoreLayout {
    /// String: the available permits (may be negative).
    pub permits: String,
    /// Sorted set, the permits out: permit id → end of its lease (server ms).
    pub leases: String,
    /// Strings, one per permit id: `given back`, for a few command timeouts, only where the
    /// caller of an acquire went away before its outcome was known and it had not taken the
    /// permit, so that the acquire can no longer take one if it runs late.
    pub permit_records: KeyFamily,
    /// Sorted set: the waiting clients' wake-up channels, longest waiting first. Expires 5 s
    /// plus two command timeouts after the last one registered.
    pub waiters: String,
    /// Channels, one per waiting client (by client id): permits were added, released or
    /// reclaimed.
    pub wake_channels: KeyFamily,
    /// Not in Redis: the name of this client's local queue of waiting tasks.
    pub local_queue: String,
}

impl ExpirableSemaphoreLayout {
    /// The layout of the expirable semaphore whose keys live in `space`.
    pub fn new(space: &KeySpace) -> Self {
        ExpirableSemaphoreLayout {
            permits: space.key("expirable-semaphore"),
            leases: space.key("expirable-semaphore:leases"),
            permit_records: space.family("expirable-semaphore:permit:"),
            waiters: space.key("expirable-semaphore:waiters"),
            wake_channels: space.family("expirable-semaphore:wake:"),
            local_queue: space.key("expirable-semaphore:queue"),
        }
    }

    /// Every key and channel in Redis with its kind, as the "Redis keys" table of
    /// [`ExpirableSemaphore`](crate::ExpirableSemaphore) names them (a family by the
    /// placeholder the table uses for its id).
    pub fn entries(&self) -> Vec<(String, &'static str)> {
        // Every field, by name: a field added to the layout does not compile here until listed.
        let ExpirableSemaphoreLayout {
            permits,
            leases,
            permit_records,
            waiters,
            wake_channels,
            local_queue: _,
        } = self;
        vec![
            (permits.clone(), "string"),
            (leases.clone(), "sorted set"),
            (permit_records.of("<id>"), "string"),
            (waiters.clone(), "sorted set"),
            (wake_channels.of("<client id>"), "channel"),
        ]
    }
}
