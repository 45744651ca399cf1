//! [`CountDownLatch`]: a count in Redis that waiters on any client wait to see reach zero.

use redisync_core::toolkit::Toolkit;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use redisync_core::toolkit::duration::{redis_millis, wait_deadline};
use redisync_core::toolkit::{
    async_trait, Abandonable, Attempt, Client, ClientRegistration, DistributedPrimitive, Error,
    Result, Retry, ScriptCall, WaitSpec, Waitlist,
};
use tracing::Instrument;

use crate::layout::CountDownLatchLayout;
use crate::scripts;

/// How long Redis remembers the count-downs applied to an arming after it opened, so that a
/// retry after a lost reply (or an outage) is not applied twice: the window in which a
/// count-down Redis has not confirmed is still sent again. (While the latch is armed, Redis
/// remembers them in the latch itself.)
pub const COUNT_DOWN_MEMORY: Duration = Duration::from_secs(5 * 60);

/// [`COUNT_DOWN_MEMORY`], or a few command timeouts of `client` if that is longer.
fn count_down_memory(client: &Client) -> Duration {
    COUNT_DOWN_MEMORY.max(
        client
            .abandoned_request_grace()
            .saturating_add(client.command_timeout()),
    )
}

/// The largest count a latch can be armed with: `i64::MAX`, the range of Redis integers.
pub const MAX_COUNT: u64 = i64::MAX as u64;

/// How often a waiter re-reads the latch even if no message arrives: a lost wake-up, or one
/// published while the client was reconnecting, costs a waiter at most this much.
pub const RECHECK: Duration = Duration::from_secs(1);

/// How long the latch's waiters registry lasts at least after a client last registered: a
/// waiter registers again with every re-check (at least every [`RECHECK`]), so only a
/// registry whose clients all vanished expires.
fn registry_ttl(client: &Client) -> u64 {
    redis_millis(
        RECHECK
            .saturating_mul(5)
            .saturating_add(client.command_timeout().saturating_mul(2)),
    )
}

/// The Redis names of one latch.
#[derive(Debug)]
struct LatchKeys {
    latch: String,
    /// The count-downs of the arming that opened last.
    opened: String,
    /// The clients with tasks waiting, so that an opening publishes only for somebody.
    registry: String,
    channel: String,
    /// Local only: where this client's waiters of the latch share one subscription.
    queue: String,
}

#[derive(Debug)]
struct LatchCore {
    client: Client,
    name: String,
    keys: Result<LatchKeys>,
    /// What this client's waiters of the latch share, across all its handles.
    openings: Arc<Openings>,
    /// Whether this client may be registered among the latch's waiters in Redis, and the
    /// order of its registering reads and withdrawals on the wire: a withdrawal landing after
    /// a newer registration would take it out, and the opening would then not wake the
    /// client (its waiters would see it only at their next re-check).
    registration: Arc<ClientRegistration>,
}

/// What this client's waiters of one latch share: the armings a waiter has seen open (most
/// recent last, a few kept), so that a local waiter of one of them returns without asking
/// Redis again; and how many wait, to withdraw the client from the latch's waiters when the
/// last gives up.
#[derive(Debug, Default)]
struct Openings {
    armings: Mutex<VecDeque<String>>,
    /// Tasks of this client waiting on the latch.
    waiting: AtomicUsize,
}

impl Openings {
    const KEPT: usize = 16;

    fn contains(&self, arming: &str) -> bool {
        self.armings
            .lock()
            .is_ok_and(|armings| armings.iter().any(|a| a == arming))
    }

    fn insert(&self, arming: &str) {
        if let Ok(mut armings) = self.armings.lock() {
            if !armings.iter().any(|a| a == arming) {
                if armings.len() == Self::KEPT {
                    armings.pop_front();
                }
                armings.push_back(arming.to_owned());
            }
        }
    }
}

impl LatchCore {
    fn keys(&self) -> Result<&LatchKeys> {
        self.keys.as_ref().map_err(Clone::clone)
    }

    /// Reads the latch: its count (0 when open) and the id of the arming it belongs to.
    fn status(&self) -> impl std::future::Future<Output = Result<(u64, String)>> + Send + 'static {
        let request = self.keys().map(|keys| {
            self.client
                .eval::<(String, String)>(scripts::Status { latch: &keys.latch }.call())
        });
        async move { parse_status(request?.await?) }
    }

    /// [`status`](Self::status) for a subscribed waiter of `arming` (`""`: any): while the
    /// latch stays armed with it, the client is registered among the latch's waiters. If the
    /// caller goes away while the request is on the wire and no task of the client waits any
    /// more, the client is withdrawn once the request is done (it may register after the
    /// withdrawal its task made when it left).
    fn registering_status(
        self: &Arc<Self>,
        arming: &str,
    ) -> impl std::future::Future<Output = Result<(u64, String)>> + Send + 'static {
        let request = self.keys().map(|keys| {
            let call = scripts::Wait {
                latch: &keys.latch,
                waiters: &keys.registry,
                client: self.client.id(),
                registry_ms: registry_ttl(&self.client),
                arming,
            }
            .call();
            (call, self.clone())
        });
        async move {
            let (call, core) = request?;
            // Not alongside a withdrawal on the wire, which could land after it. Nothing is
            // sent if the caller goes away while this waits.
            core.registration.registering(&core.client).await;
            let send = core.client.eval::<(String, String)>(call);
            // Not `eval_undoable`: registering is no acquire, and needs no replica's
            // acknowledgement (with replica sync on, an unacknowledged one stands).
            let reply = Abandonable::new(send, move |_| async move {
                core.withdraw_late_registration();
            })
            .await?;
            parse_status(reply)
        }
    }

    /// Withdraws the client from the latch's waiters in the background if it may be
    /// registered and none of its tasks waits any more (see [`ClientRegistration::withdraw`]:
    /// a registering read sent later makes the withdrawal moot, and it is not sent after one).
    fn withdraw(&self) {
        self.registration
            .withdraw(self, |_| self.openings.waiting.load(Ordering::Acquire) > 0);
    }

    /// A registering read whose caller went away may have registered the client after its
    /// task withdrew it: withdraws it again, unless another task of the client waits.
    fn withdraw_late_registration(&self) {
        self.registration.registered_late();
        self.withdraw();
    }
}

impl Waitlist for LatchCore {
    fn client(&self) -> &Client {
        &self.client
    }

    /// The call that takes this client out of the latch's waiters.
    fn withdraw_call(&self) -> Result<ScriptCall> {
        let keys = self.keys()?;
        Ok(scripts::Withdraw {
            waiters: &keys.registry,
            client: self.client.id(),
        }
        .call())
    }
}

/// A status read on its way: the count (0 when open) and the arming.
type Status = std::pin::Pin<Box<dyn std::future::Future<Output = Result<(u64, String)>> + Send>>;

/// Decodes a status reply: the count (0 when open) and the arming.
fn parse_status((count, arming): (String, String)) -> Result<(u64, String)> {
    let count = count.parse::<u64>().map_err(|_| Error::WrongType)?;
    Ok((count, arming))
}

/// A distributed count-down latch, like Redisson's `RCountDownLatch` or Java's
/// `CountDownLatch`: armed with a count, counted down by anyone, and open (every waiter
/// returns) once the count reaches zero.
///
/// Create one with `client.count_down_latch(name)` (the `ClientExt` method of the `redisync`
/// crate) or [`CountDownLatch::new`]. A latch that was never armed, or was deleted, is open.
///
/// * [`try_set_count`](Self::try_set_count) arms an open latch; an armed one is left alone.
/// * [`count_down`](Self::count_down) never takes the count below zero, and is applied once
///   even when it is retried after a lost reply. The count-down that reaches zero opens the
///   latch with one message that wakes every waiter on every client; it publishes nothing
///   when nobody waits (waiting clients register in the latch's `waiters`).
/// * [`wait`](Self::wait) and [`wait_for`](Self::wait_for) return once the latch is open.
///   A waiter also re-reads the latch at least every [`RECHECK`], so a lost message, a
///   reconnect or a Redis restart never parks it for longer. Waiters of one client share
///   that work: only the first of them re-reads the latch, and once it has seen the opening
///   the others return without asking Redis.
/// * [`delete`](DistributedPrimitive::delete) opens the latch too: its waiters return
///   (Redisson's would stay blocked).
/// * A latch can be reused: once open, `try_set_count` arms it again. Waiters of the earlier
///   arming still return, even if the latch was re-armed before they looked again: each
///   arming has an id, and a waiter returns when the arming it saw is gone.
///
/// An armed latch has no expiry: one whose counters died stays armed until it is deleted.
/// Use [`wait_for`](Self::wait_for) where that matters.
///
/// # Redis keys
///
/// | key / channel | type | content |
/// |---|---|---|
/// | `<prefix>:{<name>}:latch` | hash | present only while armed: `count` (count-downs still needed), `arming` (id of the `try_set_count` that armed it), `prior` (`1` if it was armed while the count-downs of the arming before were still remembered), and one field per count-down applied to this arming (its request id → its outcome), so that a retry is not applied twice |
/// | `<prefix>:{<name>}:latch:count_down:opened` | hash | the latch hash of the arming that opened (or was deleted) last, kept for [`COUNT_DOWN_MEMORY`] after that, so that a count-down retried after the opening, even once the latch is armed again, is not applied twice |
/// | `<prefix>:{<name>}:latch:waiters` | sorted set | the clients with tasks waiting, so that an opening publishes only when somebody waits; deleted by the opening, and expires 5 s plus two command timeouts after the last one registered |
/// | `<prefix>:{<name>}:latch:wake` | channel | the latch opened |
///
/// What a latch keeps is bounded by its count (the count-downs of the current arming and of
/// the one before), never by how many count-downs it has seen over time.
///
/// # Round trips and commands
///
/// | operation | round trips | Redis commands run |
/// |---|---|---|
/// | `count_down` on an armed latch | 1 | 4 (`EVALSHA`; `HMGET`, `HINCRBY`, `HSET`), + `HGET` after a `prior` arming |
/// | `count_down` that opens the latch | 1 | + `RENAME`, `PEXPIRE`, `DEL`, and `PUBLISH` if somebody waits |
/// | `try_set_count` on an open latch | 1 | 4 (`EVALSHA`; `EXISTS` ×2, `HSET`) |
/// | a wait on an open latch, `count` on one | 1 | 2 (`EVALSHA`; `EXISTS`) |
/// | a wait on an armed latch | 1 + 1 after subscribing + 1 when woken (and at least one per [`RECHECK`]) | |
/// | *n* waiters of one client on an armed latch | *n* on arrival; then, for all of them together, 1 per wake-up or [`RECHECK`] | |
/// | every other call | 1 | |
///
/// # Examples
///
/// ```
/// use redisync::prelude::*;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redisync::Result<()> {
/// # let server = redisync_test_harness::RedisServer::start();
/// # let url = server.url(); // e.g. "redis://127.0.0.1:6379/"
/// let client = Client::connect(url).await?;
/// let ready = client.count_down_latch("batch:7");
/// assert!(ready.try_set_count(3).await?);
///
/// let waiter = tokio::spawn({
///     let ready = ready.clone();
///     async move { ready.wait().await }
/// });
/// for _ in 0..3 {
///     ready.count_down().await?; // three workers report in
/// }
/// waiter.await.expect("waiter task")?;
/// assert_eq!(ready.count().await?, 0);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct CountDownLatch {
    core: Arc<LatchCore>,
}

impl CountDownLatch {
    /// A handle to the latch called `name`. Never fails; a bad name is reported as
    /// [`Error::InvalidArgument`] by every call.
    pub fn new(client: &Client, name: impl Into<String>) -> Self {
        let name = name.into();
        let keys = client.key_space(&name).map(|space| {
            let layout = CountDownLatchLayout::new(&space);
            LatchKeys {
                latch: layout.latch,
                opened: layout.opened,
                registry: layout.waiters,
                channel: layout.channel,
                queue: layout.local_queue,
            }
        });
        let (openings, registration) = match &keys {
            Ok(keys) => (
                client.local_cell::<Openings>(&keys.latch),
                ClientRegistration::of(client, &keys.registry),
            ),
            Err(_) => (Arc::default(), Arc::default()),
        };
        CountDownLatch {
            core: Arc::new(LatchCore {
                client: client.clone(),
                name,
                keys,
                openings,
                registration,
            }),
        }
    }

    /// Arms the latch with `count`, only if it is open (never armed, counted down to zero, or
    /// deleted). Returns whether it did; an armed latch is left as it is.
    ///
    /// `count = 0` or above [`MAX_COUNT`] is [`Error::InvalidArgument`].
    ///
    /// ```
    /// # use redisync::prelude::*;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redisync::Result<()> {
    /// # let server = redisync_test_harness::RedisServer::start();
    /// # let client = Client::connect(server.url()).await?;
    /// let latch = client.count_down_latch("deploy");
    /// assert!(latch.try_set_count(2).await?);
    /// assert!(!latch.try_set_count(5).await?); // already armed: unchanged
    /// assert_eq!(latch.count().await?, 2);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_set_count(&self, count: u64) -> Result<bool> {
        if count == 0 || count > MAX_COUNT {
            return Err(Error::invalid(format!(
                "a latch count must be within 1..={MAX_COUNT}, found {count}"
            )));
        }
        let core = &self.core;
        let keys = core.keys()?;
        let call = scripts::TrySetCount {
            latch: &keys.latch,
            opened: &keys.opened,
            count,
            arming: &core.client.unique_id(),
        }
        .call();
        Ok(core.client.eval::<i64>(call).await? == 1)
    }

    /// Counts the latch down by one; the count-down that reaches zero opens it and wakes
    /// every waiter. On an open latch this does nothing: the count never goes below zero.
    ///
    /// A count-down is applied once and is not given up lightly: when a reply is lost, or
    /// Redis refuses it for a while (`BUSY`, `READONLY`, `LOADING`), it is sent again under
    /// the same request id, and Redis applies only the first that arrives. If Redis has not
    /// confirmed it within the command timeout the call returns [`Error::Redis`] or
    /// [`Error::Timeout`], and the count-down goes on in the background until Redis confirms
    /// it or the client shuts down (then it gets one last attempt; see [`Client::shutdown`]):
    /// do not count down again. Redis remembers a count-down in the latch while its arming is
    /// armed, and for [`COUNT_DOWN_MEMORY`] (or a few command timeouts, if longer) after the
    /// arming opened; a count-down still unconfirmed when that is nearly over is given up
    /// rather than risk applying it twice, and counted in
    /// [`Stats::unconfirmed_releases`](redisync_core::Stats::unconfirmed_releases). Only
    /// the last opened arming is remembered: a count-down whose reply was lost, retried only
    /// after its arming opened *and* the latch was armed and opened once more, would count
    /// the arming after that down too. (Redis would otherwise keep something per count-down
    /// for minutes, however many there are.)
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not cancel the count-down: it completes in the background.
    ///
    /// ```
    /// # use redisync::prelude::*;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redisync::Result<()> {
    /// # let server = redisync_test_harness::RedisServer::start();
    /// # let client = Client::connect(server.url()).await?;
    /// let latch = client.count_down_latch("shards");
    /// latch.try_set_count(1).await?;
    /// latch.count_down().await?; // opens it
    /// latch.count_down().await?; // no effect on an open latch
    /// assert_eq!(latch.count().await?, 0);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn count_down(&self) -> Result<()> {
        let core = &self.core;
        core.client.check_running()?;
        let keys = core.keys()?;
        let request = core.client.unique_id();
        let sent_at = Instant::now();
        // Redis remembers the count-down while its arming is armed, and this long after the
        // arming opened (so at least this long after the first send); retries go on only
        // while one sent now would still be recognised.
        let keep = count_down_memory(&core.client);
        let retry = Retry::WhileRemembered(core.client.lease_deadline(
            sent_at,
            keep.saturating_sub(core.client.abandoned_request_grace()),
        ));
        let call = scripts::CountDown {
            latch: &keys.latch,
            opened: &keys.opened,
            waiters: &keys.registry,
            request: &request,
            remember_ms: redis_millis(keep),
            channel: &keys.channel,
        }
        .call();
        let outcome = core
            .client
            .eval_until_done::<i64>(call, retry)
            .instrument(tracing::debug_span!("redisync.latch.count_down", name = %core.name))
            .await?;
        tracing::trace!(name = %core.name, opened = outcome == 1, "counted down");
        Ok(())
    }

    /// The number of count-downs still needed to open the latch; 0 when it is open.
    pub async fn count(&self) -> Result<u64> {
        Ok(self.core.status().await?.0)
    }

    /// Waits until the latch is open; returns at once if it is open already (or was never
    /// armed). Fails only if Redis cannot be reached for about a command timeout, or the
    /// client shuts down.
    ///
    /// # Cancel safety
    ///
    /// Waiting changes nothing in Redis; dropping the future releases its subscription at once.
    pub async fn wait(&self) -> Result<()> {
        self.wait_until(None).await.map(|_| ())
    }

    /// Waits until the latch is open, at most `timeout`. Returns `true` once it is open,
    /// `false` if the time ran out first. A zero `timeout` checks once; one too large for
    /// Redis milliseconds (such as `Duration::MAX`) is [`Error::InvalidArgument`].
    ///
    /// ```
    /// # use redisync::prelude::*;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redisync::Result<()> {
    /// # let server = redisync_test_harness::RedisServer::start();
    /// # let client = Client::connect(server.url()).await?;
    /// use std::time::Duration;
    ///
    /// let latch = client.count_down_latch("warmup");
    /// latch.try_set_count(1).await?;
    /// assert!(!latch.wait_for(Duration::from_millis(50)).await?); // still armed
    /// latch.count_down().await?;
    /// assert!(latch.wait_for(Duration::from_millis(50)).await?);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// As for [`wait`](Self::wait).
    pub async fn wait_for(&self, timeout: Duration) -> Result<bool> {
        let deadline = wait_deadline(timeout)?;
        self.wait_until(Some(deadline)).await
    }

    async fn wait_until(&self, deadline: Option<Instant>) -> Result<bool> {
        let core = &self.core;
        let keys = core.keys()?;
        // The arming this waiter waits on: the first one it finds. Once it is gone (counted
        // down, deleted, or replaced by a newer arming) the latch opened for this waiter.
        let waiting_on: Arc<OnceLock<String>> = Arc::default();
        // Waiters of this client queue locally: only the first asks Redis while the latch is
        // armed, and once it has seen the opening the others return without asking. Each
        // still asks once on arrival (`may_reenter`), to learn which arming it waits on.
        let spec = WaitSpec {
            kind: "latch",
            queue: &keys.queue,
            channel: &keys.channel,
            deadline,
            may_reenter: true,
            shared: false,
            expect_busy: false,
        };
        let waiter = LatchWaiter::new(core);
        // The first look is a plain read, made before subscribing; the later ones, made
        // subscribed, register the client among the waiters while the latch stays armed.
        let mut first_look = true;
        let opened = core
            .client
            .wait(spec, || {
                let known = waiting_on
                    .get()
                    .is_some_and(|arming| core.openings.contains(arming));
                let look = std::mem::take(&mut first_look);
                let status = (!known).then(|| -> Status {
                    if look {
                        Box::pin(core.status())
                    } else {
                        Box::pin(
                            core.registering_status(waiting_on.get().map_or("", String::as_str)),
                        )
                    }
                });
                let waiting_on = waiting_on.clone();
                let openings = core.openings.clone();
                let registration = core.registration.clone();
                async move {
                    let Some(status) = status else {
                        return Ok(Attempt::Acquired(()));
                    };
                    let (count, arming) = status.await?;
                    let first = waiting_on.get_or_init(|| arming.clone());
                    if count == 0 || *first != arming {
                        // An arming this waiter saw armed is gone: tell the others. Its
                        // opening took every client out of the waiters.
                        if !first.is_empty() {
                            openings.insert(first);
                        }
                        registration.unregistered();
                        Ok(Attempt::Acquired(()))
                    } else {
                        Ok(Attempt::Busy {
                            retry_in: Some(RECHECK),
                        })
                    }
                }
            })
            .instrument(tracing::debug_span!("redisync.latch.wait", name = %core.name))
            .await?;
        drop(waiter);
        Ok(opened.is_some())
    }
}

/// One task's wait on a latch: counts it among its client's waiting tasks, and when the
/// client's last waiting task leaves while the client may be registered among the latch's
/// waiters, withdraws it in the background, so that an opening does not publish for nobody.
struct LatchWaiter {
    core: Arc<LatchCore>,
}

impl LatchWaiter {
    fn new(core: &Arc<LatchCore>) -> Self {
        core.openings.waiting.fetch_add(1, Ordering::AcqRel);
        LatchWaiter { core: core.clone() }
    }
}

impl Drop for LatchWaiter {
    fn drop(&mut self) {
        let last = self.core.openings.waiting.fetch_sub(1, Ordering::AcqRel) == 1;
        if last {
            self.core.withdraw();
        }
    }
}

#[async_trait]
impl DistributedPrimitive for CountDownLatch {
    fn name(&self) -> &str {
        &self.core.name
    }

    /// Removes the latch, which opens it: every waiter returns. Returns whether it was armed.
    async fn delete(&self) -> Result<bool> {
        let keys = self.core.keys()?;
        let call = scripts::Delete {
            latch: &keys.latch,
            opened: &keys.opened,
            waiters: &keys.registry,
            remember_ms: redis_millis(count_down_memory(&self.core.client)),
            channel: &keys.channel,
        }
        .call();
        Ok(self.core.client.eval::<i64>(call).await? == 1)
    }
}
