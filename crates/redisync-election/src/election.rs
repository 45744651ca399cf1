//! [`LeaderElection`]: candidates campaign, one at a time leads.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::Stream;
use redisync_core::toolkit::duration::{lease_millis, redis_millis, wait_deadline};
use redisync_core::toolkit::{
    async_trait, granted, registration_for, Acquire, Attempt, Client, ClientRegistration,
    DistributedPrimitive, Error, Hold, KeyFamily, LateOutcome, Lease, OnGrant, Result, ScriptCall,
    Toolkit, Wait, WaitSpec, Waitlist, Withdraw, MAX_SLEEP,
};
use tracing::Instrument;

use crate::layout::ElectionLayout;
use crate::leadership::Leadership;
use crate::scripts::{self, decode_leader, CampaignReply};

/// The longest value a candidate may advertise, in bytes. A value is read by every observer
/// on every change, so it is meant to be an address or an id, not a payload.
pub const MAX_VALUE_LEN: usize = 64 * 1024;

/// Who leads an election: the value it advertises and its term.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Leader {
    /// The value the leader campaigned with, or last proclaimed.
    pub value: String,
    /// The leader's term: the fencing token of its [`Leadership`].
    pub term: u64,
}

/// A leader election, like etcd's `Election` or Curator's `LeaderLatch`: any number of
/// candidates, on any number of machines, [`campaign`](Self::campaign); one at a time leads,
/// with a term that is strictly greater than every earlier leader's of the same election.
///
/// Create one with `client.leader_election(name)` (the `ClientExt` method of the `redisync`
/// crate) or [`LeaderElection::new`]. The handle is cheap to clone.
///
/// A won campaign returns a [`Leadership`]: while it lives, the client's watchdog keeps its
/// lease (or, with [`Lease::Fixed`] through [`Acquire::acquire_with`], the lease simply runs
/// out). Its [`term`](Leadership::term) is the fencing token to hand to whatever the leader
/// writes to, so that a leader that was paused past its lease (and replaced) is refused.
/// [`resign`](Leadership::resign) (or dropping the leadership) hands over at once: the
/// client that has campaigned longest is woken. A leader whose process dies is replaced when
/// its lease runs out, within the client's watchdog timeout.
///
/// Candidates wait without polling: only the first campaigning task of a client asks Redis,
/// and its client is registered once, like a lock's waiters (see `lua/wake_prelude.lua`).
///
/// # Redis keys
///
/// | key / channel | type | content |
/// |---|---|---|
/// | `<prefix>:{<name>}:election:leader` | hash | `owner` (the attempt id of the campaign that won), `value`, `term`; exists exactly while someone leads, and expires with the lease |
/// | `<prefix>:{<name>}:election:term` | string | the last term handed out; never expires, never deleted, so terms never repeat |
/// | `<prefix>:{<name>}:election:waiters` | sorted set | one entry per *client* with campaigning tasks: its wake-up channel → when it registered (server µs); it expires a few seconds after the last registration |
/// | `<prefix>:{<name>}:election:attempt:<attempt>` | string | only for a campaign whose outcome was unknown and that was given back: the give-back's outcome, kept for the lease plus two command timeouts, so that the campaign can no longer win if Redis runs it late |
/// | `<prefix>:{<name>}:election:wake:<client id>` | channel | one per campaigning client: a resignation wakes the client that has waited longest |
/// | `<prefix>:{<name>}:election:changes` | channel | every win, proclamation, resignation and deletion is announced here (the term as message); observers listen to it |
///
/// # Round trips and work in Redis
///
/// | operation | round trips | commands run inside Redis |
/// |---|---|---|
/// | uncontended campaign | 1 | `EXISTS` (attempt record), `HLEN`, `INCR` (term), `HSET`, `PEXPIRE`, one `PUBLISH` |
/// | contended campaign | 1 + 1 after subscribing + 1 per wake-up, and 1 per second of waiting (`RECHECK`) | a failed attempt also registers the client (`ZSCORE`, `TIME`, `ZRANGE`, `ZADD`, `PTTL`, `PEXPIRE`) |
/// | resign | 1 | `HLEN`, `HMGET`, `DEL`, `PUBLISH` (change), `ZRANGE`, and `ZREM` + `PUBLISH` to one client if one waits |
/// | proclaim | 1 | `HLEN`, `HMGET`, `HSET`, `PUBLISH` (only if the value changed) |
/// | `leader()` | 1 | `HLEN`, `HMGET`, `PTTL` |
/// | `observe()` | 1 `SUBSCRIBE` (shared per client) + 1 read per change, and 1 read when a leader's lease would end | |
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redisync::Result<()> {
/// # let server = redisync_test_harness::RedisServer::start();
/// # let url = server.url(); // e.g. "redis://127.0.0.1:6379/"
/// use redisync::prelude::*;
///
/// let client = Client::connect(url).await?;
/// let election = client.leader_election("scheduler");
///
/// let leadership = election.campaign("node-a:8080").await?;
/// let term = leadership.term();
/// assert_eq!(
///     election.leader().await?,
///     Some(Leader { value: "node-a:8080".into(), term })
/// );
/// // Another candidate does not get in while this one leads.
/// assert!(election.try_campaign("node-b:8080").await?.is_none());
///
/// leadership.proclaim("node-a:9090").await?;
/// leadership.resign().await?;
/// let next = election.campaign("node-b:8080").await?;
/// assert!(next.term() > term);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct LeaderElection {
    core: Arc<ElectionCore>,
}

/// The Redis names of one election, made once per client and name, and shared by every
/// handle of it.
#[derive(Debug)]
pub(crate) struct ElectionKeys {
    pub(crate) leader: String,
    term: String,
    attempt_records: KeyFamily,
    waiters: String,
    /// This client's wake-up channel for the election.
    channel: String,
    pub(crate) changes: String,
}

impl ElectionKeys {
    fn attempt_record(&self, attempt: &str) -> String {
        self.attempt_records.of(attempt)
    }
}

/// An election's name and keys (or why the name is refused), and what the client knows of it.
#[derive(Debug)]
struct ElectionNames {
    name: String,
    keys: Result<ElectionKeys>,
    /// Whether this client may be registered as waiting: the client's knowledge, shared by
    /// all its campaigning tasks.
    registration: Arc<ClientRegistration>,
}

/// Everything a handle and its leaderships share.
#[derive(Debug)]
pub(crate) struct ElectionCore {
    pub(crate) client: Client,
    names: Arc<ElectionNames>,
}

impl LeaderElection {
    /// A handle to the election called `name`. Nothing is sent to Redis until it is used; a
    /// bad name (empty, too long) is reported by every call as [`Error::InvalidArgument`].
    pub fn new(client: &Client, name: impl Into<String>) -> Self {
        let name = name.into();
        let names = match client.key_space(&name) {
            Ok(space) => {
                let layout = ElectionLayout::new(&space);
                let registration = ClientRegistration::of(client, &layout.leader);
                client.local_cell_with(&layout.leader.clone(), || ElectionNames {
                    name,
                    keys: Ok(ElectionKeys {
                        channel: layout.wake_channels.of(client.id()),
                        leader: layout.leader,
                        term: layout.term,
                        attempt_records: layout.attempt_records,
                        waiters: layout.waiters,
                        changes: layout.changes,
                    }),
                    registration,
                })
            }
            Err(err) => Arc::new(ElectionNames {
                name,
                keys: Err(err),
                registration: Arc::default(),
            }),
        };
        LeaderElection {
            core: Arc::new(ElectionCore {
                client: client.clone(),
                names,
            }),
        }
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        self.core.name()
    }

    /// Waits until this candidate leads, advertising `value`, and returns its leadership,
    /// kept by the watchdog while it lives.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name or a value over [`MAX_VALUE_LEN`] bytes;
    /// [`Error::Redis`] / [`Error::Timeout`] if Redis did not answer;
    /// [`Error::Shutdown`] once the client is shut down.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future gives back a leadership a campaign on the wire may have won (in
    /// the background), and takes the client out of the waiters if no other task of it
    /// campaigns.
    pub async fn campaign(&self, value: impl Into<String>) -> Result<Leadership> {
        granted(self.core.campaign(value.into(), None, None).await?)
    }

    /// Leads at once if nobody does; `None` if someone else leads. As
    /// [`campaign`](Self::campaign) otherwise.
    pub async fn try_campaign(&self, value: impl Into<String>) -> Result<Option<Leadership>> {
        self.core
            .campaign(value.into(), Some(Duration::ZERO), None)
            .await
    }

    /// Waits at most `wait` to lead; `None` if the wait ran out first. A wait too large for
    /// Redis milliseconds is [`Error::InvalidArgument`]. As [`campaign`](Self::campaign)
    /// otherwise.
    pub async fn campaign_for(
        &self,
        value: impl Into<String>,
        wait: Duration,
    ) -> Result<Option<Leadership>> {
        self.core.campaign(value.into(), Some(wait), None).await
    }

    /// Campaigns with `value`, waiting as `wait` says, with the lease `lease`: the one
    /// campaign the others are shorthands for ([`campaign`](Self::campaign) is
    /// `Wait::Forever` and `Lease::Watchdog`). With [`Lease::Fixed`] the leadership ends by
    /// itself when the lease runs out, and [`Leadership::lost`] completes then. `Ok(None)`
    /// when the wait ran out first.
    ///
    /// # Errors
    ///
    /// As for [`campaign`](Self::campaign); a fixed lease under `MIN_LEASE` or a lease or
    /// wait too large for Redis milliseconds is [`Error::InvalidArgument`].
    pub async fn campaign_with(
        &self,
        value: impl Into<String>,
        wait: Wait,
        lease: Lease,
    ) -> Result<Option<Leadership>> {
        self.core
            .campaign(value.into(), wait.limit(), lease.duration())
            .await
    }

    /// Who leads now, if anyone. Reads only.
    pub async fn leader(&self) -> Result<Option<Leader>> {
        Ok(self
            .core
            .read_leader()
            .await?
            .map(|(value, term, _)| Leader { value, term }))
    }

    /// A stream of who leads: the current leader first (`None`: nobody), then every change,
    /// in order.
    ///
    /// The stream listens to the election's change channel (one subscription per client,
    /// shared) and re-reads the leader whenever a change is announced, whenever the
    /// subscriber connection came back after a break (messages sent meanwhile are lost), and
    /// when the current leader's lease would end (an expiry announces nothing). So it never
    /// misses the final state; changes that follow each other faster than one read are seen
    /// as one (an item is yielded only when the leader or its value differs from the last
    /// one yielded). An error (Redis unreachable) is yielded as an item, and the stream goes
    /// on: it reads again after the next change or a second at most. It ends after yielding
    /// [`Error::Shutdown`] once the client is shut down.
    ///
    /// With `WaitStrategy::Poll` the stream re-reads at the poll interval instead.
    pub fn observe(&self) -> impl Stream<Item = Result<Option<Leader>>> + Send + 'static {
        crate::observe::observe(self.core.clone())
    }
}

impl ElectionCore {
    pub(crate) fn name(&self) -> &str {
        &self.names.name
    }

    pub(crate) fn keys(&self) -> Result<&ElectionKeys> {
        self.names.keys.as_ref().map_err(Clone::clone)
    }

    /// The leader's value, term and remaining lease.
    pub(crate) async fn read_leader(&self) -> Result<Option<(String, u64, Duration)>> {
        let keys = self.keys()?;
        let call = scripts::Leader {
            leader: &keys.leader,
        }
        .call();
        let reply: Vec<String> = self.client.eval(call).await?;
        decode_leader(&reply)
    }

    /// The call that gives up the leadership of campaign attempt `attempt`, remembering the
    /// outcome for `remember` (zero: keep no record; see `lua/election_resign.lua`).
    pub(crate) fn resign_call(&self, attempt: &str, remember: Duration) -> Result<ScriptCall> {
        let keys = self.keys()?;
        let remember_ms = match remember.is_zero() {
            true => 0,
            false => redis_millis(remember),
        };
        Ok(scripts::Resign {
            leader: &keys.leader,
            attempt_record: &keys.attempt_record(attempt),
            waiters: &keys.waiters,
            attempt,
            remember_ms,
            changes: &keys.changes,
        }
        .call())
    }

    /// How long a give-back is remembered: long enough for its retries.
    fn retry_window(&self) -> Duration {
        self.client.command_timeout().saturating_mul(2)
    }

    /// Campaigns with `value`, waiting at most `wait` (for ever when `None`), with a fixed
    /// `lease` (or the watchdog's).
    pub(crate) async fn campaign(
        self: &Arc<Self>,
        value: String,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<Option<Leadership>> {
        self.keys()?;
        check_value(&value)?;
        let lease_for = lease.unwrap_or_else(|| self.client.watchdog_timeout());
        lease_millis(lease_for)?;
        let deadline = wait.map(wait_deadline).transpose()?;
        let won = Box::pin(
            self.campaign_registered(Arc::from(value.as_str()), lease_for, wait, deadline)
                .instrument(tracing::debug_span!("redisync.election", name = %self.name())),
        )
        .await?;
        let Some((attempt, term, sent_at)) = won else {
            return Ok(None);
        };
        let keys = self.keys()?;
        let hold_lease = match lease {
            Some(lease) => self.client.fixed_lease(sent_at, lease),
            None => {
                let hold = scripts::RenewedHold {
                    leader: &keys.leader,
                    attempt: &attempt,
                    term,
                };
                self.client
                    .watch_lease(&scripts::RENEW, hold.keys(), hold.args(), sent_at)
            }
        };
        // The campaign was answered, so no late campaign of this attempt exists to refuse,
        // and the leadership judges a repeat itself: no record is needed.
        let release = self.resign_call(&attempt, Duration::ZERO)?;
        let hold = Hold::new(self.client.clone(), release, hold_lease);
        Ok(Some(Leadership::new(self.clone(), attempt, term, hold)))
    }

    /// The wait: only the head of this client's local queue asks Redis; when someone else
    /// leads, Redis registers the client as waiting, and the resignation wakes the client
    /// that has waited longest (see `lua/wake_prelude.lua`).
    async fn campaign_registered(
        self: &Arc<Self>,
        value: Arc<str>,
        lease: Duration,
        wait: Option<Duration>,
        deadline: Option<Instant>,
    ) -> Result<Option<(String, u64, Instant)>> {
        let registration = registration_for(&self.client, wait);
        let keys = self.keys()?;
        let withdrawal =
            Withdraw::start(self.clone(), registration, self.names.registration.clone());
        let withdraw = withdrawal.withdraw();
        let spec = WaitSpec {
            kind: "election",
            queue: &keys.leader,
            channel: &keys.channel,
            deadline,
            may_reenter: false,
            shared: false,
            expect_busy: false,
        };
        // A crashed leader is replaced when its lease runs out: the remaining lease bounds
        // each sleep (the attempt reports it).
        // The turn says whether this is the first try (made before subscribing: alone, it
        // must not register the client) and whether other campaigners of the client wait (a
        // win then sends the client to the back of the waiters for them).
        let waiting = self.client.acquire_in_turn(spec, |turn| {
            let (core, value) = (self.clone(), value.clone());
            withdraw.attempt(turn, move |withdraw, on_grant| {
                core.attempt(&value, lease, withdraw, on_grant)
            })
        });
        waiting.await
    }

    /// One campaign request under a new attempt id, for the wait whose registration
    /// `withdraw` takes back; `on_grant` says what a win does with the client's registration
    /// as waiting. If its caller goes away, a leadership it won is given back.
    fn attempt(
        self: &Arc<Self>,
        value: &str,
        lease: Duration,
        withdraw: &Withdraw<ElectionCore>,
        on_grant: OnGrant,
    ) -> impl std::future::Future<Output = Result<Attempt<(String, u64, Instant)>>> + Send + 'static
    {
        let attempt = self.client.unique_id();
        let sent_at = Instant::now();
        let request = self.keys().map(|keys| {
            let call = scripts::Campaign {
                leader: &keys.leader,
                term: &keys.term,
                attempt_record: &keys.attempt_record(&attempt),
                waiters: &keys.waiters,
                attempt: &attempt,
                value,
                lease_ms: redis_millis(lease),
                channel: &keys.channel,
                registration_ms: redis_millis(withdraw.registration()),
                on_grant: on_grant.as_arg(),
                changes: &keys.changes,
            }
            .call();
            let core = self.clone();
            let abandoned = attempt.clone();
            let withdraw = withdraw.clone();
            self.client
                .eval_undoable(call, move |outcome: LateOutcome<Vec<i64>>| async move {
                    let won = matches!(
                        &outcome,
                        LateOutcome::Replied(reply)
                            if matches!(CampaignReply::decode(reply), Ok(CampaignReply::Won { .. }))
                    );
                    // Won, or unknown: give back whatever it got, or forbid the win.
                    // Remembered past the lease, so a win that could still happen is refused.
                    let may_lead = won || outcome == LateOutcome::Unknown;
                    let remember = lease.saturating_add(core.retry_window());
                    if let (true, Ok(give_back)) =
                        (may_lead, core.resign_call(&abandoned, remember))
                    {
                        tracing::debug!("giving back an abandoned campaign");
                        let retry = core.client.retry_for_lease(sent_at, Some(lease));
                        core.client.spawn_release(give_back, retry);
                    }
                    // However it ended: a wait that ended meanwhile waits for this before it
                    // withdraws its client.
                    withdraw.abandoned_attempt_ended(won, on_grant);
                })
        });
        async move {
            let reply = request?.await?;
            Ok(match CampaignReply::decode(&reply)? {
                CampaignReply::Won { term } => Attempt::Acquired((attempt, term, sent_at)),
                CampaignReply::Busy { pttl } => Attempt::Busy { retry_in: pttl },
                // Only an attempt given back before it ran says this, and nobody awaits those.
                CampaignReply::GivenBack => Attempt::Busy { retry_in: None },
            })
        }
    }
}

impl Waitlist for ElectionCore {
    fn client(&self) -> &Client {
        &self.client
    }

    /// The call that takes this client out of the election's registry of waiters.
    fn withdraw_call(&self) -> Result<ScriptCall> {
        let keys = self.keys()?;
        Ok(scripts::Withdraw {
            leader: &keys.leader,
            waiters: &keys.waiters,
            channel: &keys.channel,
        }
        .call())
    }

    /// The election's local queue is named by its leader key (the withdrawal's first key),
    /// known without building the call.
    fn waiting_queue(&self) -> Option<String> {
        self.keys().ok().map(|keys| keys.leader.clone())
    }
}

/// Refuses a value too long to advertise.
pub(crate) fn check_value(value: &str) -> Result<()> {
    if value.len() > MAX_VALUE_LEN {
        return Err(Error::invalid(format!(
            "an election value must be at most {MAX_VALUE_LEN} bytes, found {} bytes",
            value.len()
        )));
    }
    Ok(())
}

#[async_trait]
impl DistributedPrimitive for LeaderElection {
    fn name(&self) -> &str {
        self.core.name()
    }

    /// Removes the leader, whoever it is (its [`Leadership`] learns it is lost at its next
    /// renewal), announces the change and wakes the next campaigner. The term counter is
    /// kept on purpose, so terms never repeat. Returns whether someone led.
    async fn delete(&self) -> Result<bool> {
        let keys = self.core.keys()?;
        let call = scripts::Delete {
            leader: &keys.leader,
            waiters: &keys.waiters,
            changes: &keys.changes,
            lost_notices: &self.core.client.lost_notice_prefix(),
        }
        .call();
        let deleted: i64 = self.core.client.eval(call).await?;
        Ok(deleted == 1)
    }
}

impl Acquire for LeaderElection {
    type Guard = Leadership;

    /// Campaigns with the client's id ([`Client::id`]) as the value, waiting as `wait` says.
    /// With [`Lease::Watchdog`] the watchdog keeps the leadership while it lives; a
    /// [`Lease::Fixed`] is honoured: the leadership ends by itself when it runs out (a lease
    /// under `MIN_LEASE` or too large for Redis is [`Error::InvalidArgument`]). As
    /// [`LeaderElection::campaign`] otherwise.
    async fn acquire_with(&self, wait: Wait, lease: Lease) -> Result<Option<Leadership>> {
        self.core
            .campaign(
                self.core.client.id().to_owned(),
                wait.limit(),
                lease.duration(),
            )
            .await
    }
}

/// How long an observer sleeps at most between reads when it learns nothing.
pub(crate) const OBSERVE_IDLE: Duration = MAX_SLEEP;
