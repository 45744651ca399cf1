//! Where an election keeps its state in Redis: the one place its key and channel names are
//! spelled. The crate names its keys from this type only, as do `redisync inspect` and the
//! tests; a test checks the "Redis keys" table of [`LeaderElection`](crate::LeaderElection)
//! against [`ElectionLayout::entries`].

use redisync_core::toolkit::{KeyFamily, KeySpace};

/// The keys and channels of one [`LeaderElection`](crate::LeaderElection).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElectionLayout {
    /// Hash, the leadership: `owner` (the attempt id of the campaign that won), `value`,
    /// `term`. Exists exactly while someone leads, and expires with the lease.
    pub leader: String,
    /// String: the last term handed out; never expires, never deleted, so terms never repeat.
    pub term: String,
    /// Sorted set, one entry per client with campaigning tasks: its wake-up channel → when it
    /// registered (server µs). Expires a few seconds after the last registration.
    pub waiters: String,
    /// Strings, one per campaign (by attempt id) whose outcome was unknown and that was given
    /// back: the give-back's outcome, kept for the lease plus two command timeouts, so that
    /// the campaign can no longer win if Redis runs it late.
    pub attempt_records: KeyFamily,
    /// Channels, one per campaigning client (by client id): a resignation wakes the client
    /// that has waited longest.
    pub wake_channels: KeyFamily,
    /// Channel: every win, proclamation, resignation and deletion is announced here (the term
    /// as message); observers listen to it.
    pub changes: String,
}

impl ElectionLayout {
    /// The layout of the election whose keys live in `space`.
    pub fn new(space: &KeySpace) -> Self {
        ElectionLayout {
            leader: space.key("election:leader"),
            term: space.key("election:term"),
            waiters: space.key("election:waiters"),
            attempt_records: space.family("election:attempt:"),
            wake_channels: space.family("election:wake:"),
            changes: space.key("election:changes"),
        }
    }

    /// Every key and channel with its kind, as the "Redis keys" table of
    /// [`LeaderElection`](crate::LeaderElection) names them (a family by the placeholder the
    /// table uses for its id).
    pub fn entries(&self) -> Vec<(String, &'static str)> {
        // Every field, by name: a field added to the layout does not compile here until listed.
        let ElectionLayout {
            leader,
            term,
            waiters,
            attempt_records,
            wake_channels,
            changes,
        } = self;
        vec![
            (leader.clone(), "hash"),
            (term.clone(), "string"),
            (waiters.clone(), "sorted set"),
            (attempt_records.of("<attempt>"), "string"),
            (wake_channels.of("<client id>"), "channel"),
            (changes.clone(), "channel"),
        ]
    }
}
