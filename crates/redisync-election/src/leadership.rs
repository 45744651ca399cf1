//! [`Leadership`]: one won campaign.

use std::future::Future;
use std::sync::Arc;

use redisync_core::toolkit::{Error, Hold, Result, Toolkit};

use crate::election::{check_value, ElectionCore};
use crate::scripts;

/// The leadership of a won campaign of a [`LeaderElection`](crate::LeaderElection).
///
/// While it lives, the client's watchdog keeps its lease (unless it was won with a fixed
/// lease). Dropping it resigns in the background, without blocking;
/// [`resign`](Self::resign) does the same and says whether it still led. The leadership owns
/// a clone of its handle, so it is `'static` and can move across tasks.
///
/// A leadership can be lost without resigning: the process was paused past its lease, Redis
/// could not be reached to renew it, or the election was deleted. [`lost`](Self::lost)
/// completes then; work done as the leader should stop, and whatever it writes should carry
/// the [`term`](Self::term), so that the storage refuses a deposed leader's writes.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redisync::Result<()> {
/// # let server = redisync_test_harness::RedisServer::start();
/// # let client = Client::connect(server.url()).await?;
/// use redisync::prelude::*;
///
/// let election = client.leader_election("billing-cron");
/// let leadership = election.campaign("node-a").await?;
/// let term = leadership.term(); // carry it with every write made as the leader
/// leadership.proclaim("node-a (draining)").await?;
/// assert_eq!(election.leader().await?.map(|l| l.term), Some(term));
/// assert!(!leadership.is_lost());
/// leadership.resign().await?; // the next campaigner takes over at once
/// assert_eq!(election.leader().await?, None);
/// # Ok(())
/// # }
/// ```
#[must_use = "dropping the leadership resigns at once"]
#[derive(Debug)]
pub struct Leadership {
    core: Arc<ElectionCore>,
    /// The campaign attempt that won: the leader's owner id in Redis.
    attempt: String,
    term: u64,
    // Resigns on drop.
    hold: Hold,
}

impl Leadership {
    pub(crate) fn new(core: Arc<ElectionCore>, attempt: String, term: u64, hold: Hold) -> Self {
        Leadership {
            core,
            attempt,
            term,
            hold,
        }
    }

    /// This leadership's term: strictly greater than the term of every earlier leader of this
    /// election, across all clients, also of leaders whose lease ran out. It is the
    /// leadership's fencing token.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        self.core.name()
    }

    /// Whether the client knows the leadership is gone: a renewal found it missing or not
    /// ours, no renewal was confirmed before the lease would end, the client shut down, or a
    /// fixed lease ran out.
    pub fn is_lost(&self) -> bool {
        self.hold.is_lost()
    }

    /// Completes once the leadership is known to be gone (see [`is_lost`](Self::is_lost)).
    /// The future does not borrow the leadership.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        self.hold.lost()
    }

    /// Changes the value this leader advertises, keeping its term; observers see the change.
    ///
    /// # Errors
    ///
    /// [`Error::NotOwner`] if the leadership is gone (known lost, or found gone in Redis:
    /// nothing changed); [`Error::InvalidArgument`] for a value over
    /// [`MAX_VALUE_LEN`](crate::MAX_VALUE_LEN) bytes; [`Error::Redis`] / [`Error::Timeout`] if
    /// Redis did not answer (the value may or may not have changed).
    pub async fn proclaim(&self, value: impl AsRef<str>) -> Result<()> {
        let value = value.as_ref();
        check_value(value)?;
        if self.is_lost() {
            return Err(Error::NotOwner);
        }
        let keys = self.core.keys()?;
        let call = scripts::Proclaim {
            leader: &keys.leader,
            attempt: &self.attempt,
            term: self.term,
            value,
            changes: &keys.changes,
        }
        .call();
        match self.core.client.eval::<i64>(call).await? {
            1 => Ok(()),
            _ => Err(Error::NotOwner),
        }
    }

    /// Steps down and reports whether this was still the leader. The client that has
    /// campaigned longest is woken at once and takes over; observers see the change.
    ///
    /// Renewal stops before the request is sent. A resignation is idempotent: it gives up
    /// only this leadership, so one sent again after a broken connection never deposes a
    /// later leader. A repeat that finds the leadership gone is taken as the answer to the
    /// first try when the leadership was still ours, as far as the client knew, when that try
    /// was sent.
    ///
    /// # Errors
    ///
    /// [`Error::NotOwner`] if the leadership was already gone (lease ran out, election
    /// deleted); [`Error::Redis`] / [`Error::Timeout`] if Redis did not confirm within the
    /// command timeout (the resignation goes on in the background until the lease ends);
    /// [`Error::Shutdown`] if the client was shut down (it is still sent in the background).
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped before it completes, the resignation still runs in the
    /// background.
    pub async fn resign(self) -> Result<()> {
        let span = tracing::debug_span!(
            "redisync.election.resign",
            name = %self.core.name(),
            term = self.term,
        );
        let resigned = self.hold.release_confirmed(span).await?;
        match resigned.reply {
            1 => Ok(()),
            -1 if resigned.repeated => Ok(()),
            _ => Err(Error::NotOwner),
        }
    }
}

redisync_core::toolkit::impl_held!(Leadership {
    fencing_token: |leadership| Some(leadership.term()),
    release: resign,
});
