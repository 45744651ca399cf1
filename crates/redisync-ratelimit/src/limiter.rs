//! [`RateLimiter`]: a rate shared by every client, decided in Redis on Redis's clock.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redisync_core::toolkit::duration::wait_deadline;
use redisync_core::toolkit::{
    async_trait, Attempt, Client, DistributedPrimitive, Error, LateOutcome, Result, Retry, Toolkit,
    WaitSpec,
};
use tracing::Instrument;

use crate::layout::RateLimiterLayout;
use crate::rate::{Rate, MAX_PRODUCT};
use crate::scripts::{self, AcquireReply};

/// What one [`try_acquire`](RateLimiter::try_acquire) decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "a refused decision took nothing: check `allowed`"]
pub struct Decision {
    /// Whether the units were taken.
    pub allowed: bool,
    /// When not allowed: how long until the same request would be allowed, on Redis's clock,
    /// if nobody takes units meanwhile (at least a microsecond). Zero when allowed.
    pub retry_after: Duration,
    /// How many units a request right after this one would get: the units left in the
    /// burst, at most the rate's [`max_request`](Rate::max_request).
    pub remaining: u64,
}

/// The Redis names of one limiter.
#[derive(Debug)]
struct Keys {
    config: String,
    state: String,
    channel: String,
    /// Local only: where this client's waiters of the limiter queue behind one head.
    queue: String,
}

#[derive(Debug)]
struct Core {
    client: Client,
    name: String,
    keys: Result<Keys>,
}

impl Core {
    fn keys(&self) -> Result<&Keys> {
        self.keys.as_ref().map_err(Clone::clone)
    }

    /// One decision on the wire. If its caller goes away while it is there, or its outcome
    /// is unknown, units it took are given back in the background, as long as no decision
    /// was allowed after it.
    fn decide(&self, n: u64) -> impl Future<Output = Result<Decision>> + Send + 'static {
        let request = self.request(n);
        let name = self.name.clone();
        async move { scripts::decision(request?.await?, n, &name) }
    }

    fn request(
        &self,
        n: u64,
    ) -> Result<impl Future<Output = Result<AcquireReply>> + Send + 'static> {
        if n == 0 || n >= MAX_PRODUCT {
            return Err(Error::invalid(format!(
                "a rate limiter request must be for 1 to 2^53 - 1 units, found {n}"
            )));
        }
        let keys = self.keys()?;
        let request = self.client.unique_id();
        let call = scripts::Acquire {
            config: &keys.config,
            state: &keys.state,
            n,
            request: &request,
        }
        .call();
        let give_back = scripts::GiveBack {
            state: &keys.state,
            request: &request,
        }
        .call();
        let client = self.client.clone();
        Ok(self
            .client
            .eval_undoable(call, move |outcome: LateOutcome<AcquireReply>| async move {
                if matches!(
                    outcome,
                    LateOutcome::Replied((1, _, _)) | LateOutcome::Unknown
                ) {
                    tracing::debug!("giving back an abandoned rate limiter decision");
                    // Idempotent: it acts only while the decision is the last one allowed.
                    client.spawn_release(give_back, Retry::UntilConfirmed);
                }
            }))
    }
}

/// A distributed rate limiter, like Redisson's `RRateLimiter` or redis-cell: a [`Rate`]
/// stored in Redis and shared by every client, each decision made in Redis, on Redis's
/// clock, in one round trip.
///
/// Create one with `client.rate_limiter(name)` (the `ClientExt` method of the `redisync`
/// crate) or [`RateLimiter::new`].
///
/// * **The rate** is set once with [`try_set_rate`](Self::try_set_rate) (which leaves a set
///   rate alone, so every instance of a service can call it at start-up) or replaced with
///   [`set_rate`](Self::set_rate). It stays until [`delete`](DistributedPrimitive::delete):
///   it never expires.
/// * **The algorithm** is GCRA, computed exactly (integers in microseconds, plus a
///   remainder in `1/units` of a microsecond, so `per / units` never rounds). Across every
///   client together, no window `[t, t + per)` of Redis's clock admits more than
///   `units + burst` units; see [`Rate`] for what the burst means, and for the largest
///   request, `burst + 1` units.
/// * [`try_acquire`](Self::try_acquire) decides at once and says, when it refuses, how long
///   until it would allow. [`acquire`](Self::acquire) and [`acquire_for`](Self::acquire_for)
///   wait: they sleep for that long and then ask again, never polling. Waiters of one client
///   queue behind one head, which alone asks Redis; [`set_rate`](Self::set_rate) and
///   `delete` wake the waiters of every client, which then decide again under the new rate
///   (or fail, after `delete`).
/// * **No queue across clients.** Waiters of one client take turns; across clients, whoever
///   asks first once units are free gets them. Under steady contention a large request
///   (it needs more of the bucket refilled) can wait behind a stream of small ones; use
///   [`acquire_for`](Self::acquire_for) where that matters.
/// * **No rate set** (never set, or deleted): every acquire fails with
///   [`Error::InvalidArgument`], saying so. So does a request for 0 units, or for more than
///   the rate's [`max_request`](Rate::max_request).
/// * **Replacing the rate** keeps what was taken: the backlog (the units taken beyond what
///   the old rate had refilled) is carried over as the same number of units under the new
///   rate, rounded up to the microsecond. A burst spent under the old rate is not refilled
///   by the change. The bound holds within windows in which the rate did not change.
/// * **Idle state expires.** The limiter's state (its theoretical arrival time) is set to
///   expire when the bucket is full again, when it means what no state means. An idle
///   limiter keeps only its rate.
/// * **Cancel safety.** A decision whose caller went away (or whose outcome is unknown)
///   while it was on the wire gives its units back in the background, provided no decision
///   was allowed after it; otherwise they stay spent. A give-back never loosens the bound.
///
/// # Redis keys
///
/// | key / channel | type | content |
/// |---|---|---|
/// | `<prefix>:{<name>}:rate` | hash | the rate: `rate` (units), `per` (µs), `burst`, and the exact quotients and remainders the decisions use (`pq`, `pr`: `per / rate`; `tq`, `tr`: `(burst + 1) × per / rate`). No expiry |
/// | `<prefix>:{<name>}:rate:state` | hash | `tat`, `rem`: the theoretical arrival time (µs of Redis's clock, and `rem / rate` µs); `last`, `ptat`, `prem`: the last allowed decision's request id and the time before it, so that it can be given back. Expires when the bucket is full again |
/// | `<prefix>:{<name>}:rate:changed` | channel | the rate was replaced or deleted |
///
/// # Round trips and commands
///
/// | operation | round trips | Redis commands run |
/// |---|---|---|
/// | `try_acquire`, allowed | 1 | 6 (`EVALSHA`; `HMGET` ×2, `TIME`, `HSET`, `PEXPIRE`) |
/// | `try_acquire`, refused | 1 | 4 (`EVALSHA`; `HMGET` ×2, `TIME`) |
/// | `acquire`, allowed at once | 1 | as `try_acquire` |
/// | `acquire` that waits *w* | 2 + 1 per `retry_after` slept (about 1 when nobody else takes units meanwhile) + 1 per 10 s of *w* | |
/// | *n* waiters of one client | for all of them together, as one waiter per unit they get | |
/// | `set_rate` | 1 | up to 9 (`EVALSHA`; `HMGET` ×2, `HSET` ×2, `TIME`, `HDEL`, `PEXPIRE`, `PUBLISH`) |
/// | `try_set_rate`, `rate`, `delete` | 1 | |
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
/// let limiter = client.rate_limiter("api:tenant-7");
/// limiter.try_set_rate(Rate::per_second(10).burst(2)).await?;
///
/// // A full limiter allows burst + 1 units at once...
/// for _ in 0..3 {
///     assert!(limiter.try_acquire(1).await?.allowed);
/// }
/// // ...then one unit every 100 ms.
/// let refused = limiter.try_acquire(1).await?;
/// assert!(!refused.allowed);
/// assert!(refused.retry_after <= std::time::Duration::from_millis(100));
/// limiter.acquire(1).await?; // sleeps until then
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct RateLimiter {
    core: Arc<Core>,
}

impl RateLimiter {
    /// A handle to the rate limiter called `name`. Never fails; a bad name is reported as
    /// [`Error::InvalidArgument`] by every call.
    pub fn new(client: &Client, name: impl Into<String>) -> Self {
        let name = name.into();
        let keys = client.key_space(&name).map(|space| {
            let layout = RateLimiterLayout::new(&space);
            Keys {
                config: layout.rate,
                state: layout.state,
                channel: layout.changed,
                queue: layout.local_queue,
            }
        });
        RateLimiter {
            core: Arc::new(Core {
                client: client.clone(),
                name,
                keys,
            }),
        }
    }

    /// Sets the rate, only if none is set. Returns whether it did; a set rate is left as it
    /// is. A rate out of range (see [`Rate`]) is [`Error::InvalidArgument`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redisync::Result<()> {
    /// # let server = redisync_test_harness::RedisServer::start();
    /// # let client = Client::connect(server.url()).await?;
    /// use redisync::prelude::*;
    ///
    /// let limiter = client.rate_limiter("emails");
    /// assert!(limiter.try_set_rate(Rate::per_minute(60)).await?);
    /// assert!(!limiter.try_set_rate(Rate::per_second(5)).await?); // unchanged
    /// assert_eq!(limiter.rate().await?, Some(Rate::per_minute(60)));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_set_rate(&self, rate: Rate) -> Result<bool> {
        let p = rate.params()?;
        let keys = self.core.keys()?;
        let call = scripts::TrySetRate {
            config: &keys.config,
            rate: p.units,
            per: p.per_us,
            burst: p.burst,
            pq: p.pq,
            pr: p.pr,
            tq: p.tq,
            tr: p.tr,
        }
        .call();
        Ok(self.core.client.eval::<i64>(call).await? == 1)
    }

    /// Sets the rate, replacing any, and wakes the waiters of every client so that they
    /// decide again under it. Units already taken stay taken (see [`RateLimiter`]). A rate
    /// out of range (see [`Rate`]) is [`Error::InvalidArgument`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redisync::Result<()> {
    /// # let server = redisync_test_harness::RedisServer::start();
    /// # let client = Client::connect(server.url()).await?;
    /// use redisync::prelude::*;
    ///
    /// let limiter = client.rate_limiter("exports");
    /// limiter.set_rate(Rate::per_minute(10)).await?;
    /// limiter.set_rate(Rate::per_minute(20).burst(5)).await?; // replaces it
    /// assert_eq!(limiter.rate().await?, Some(Rate::per_minute(20).burst(5)));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn set_rate(&self, rate: Rate) -> Result<()> {
        let p = rate.params()?;
        let keys = self.core.keys()?;
        let call = scripts::SetRate {
            config: &keys.config,
            state: &keys.state,
            rate: p.units,
            per: p.per_us,
            burst: p.burst,
            pq: p.pq,
            pr: p.pr,
            tq: p.tq,
            tr: p.tr,
            channel: &keys.channel,
        }
        .call();
        self.core.client.eval::<i64>(call).await?;
        Ok(())
    }

    /// The rate, or `None` if none is set.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redisync::Result<()> {
    /// # let server = redisync_test_harness::RedisServer::start();
    /// # let client = Client::connect(server.url()).await?;
    /// use redisync::prelude::*;
    ///
    /// let limiter = client.rate_limiter("reports");
    /// assert_eq!(limiter.rate().await?, None);
    /// limiter.try_set_rate("5/h".parse()?).await?;
    /// assert_eq!(limiter.rate().await?, Some(Rate::per_hour(5)));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn rate(&self) -> Result<Option<Rate>> {
        let keys = self.core.keys()?;
        let call = scripts::ReadRate {
            config: &keys.config,
        }
        .call();
        let fields: Vec<String> = self.core.client.eval(call).await?;
        scripts::rate(&fields)
    }

    /// Takes `n` units if the rate allows it now; never waits. The [`Decision`] says whether
    /// it did, and if not, how long until it would.
    ///
    /// `n = 0`, `n` above the rate's [`max_request`](Rate::max_request), and a limiter with
    /// no rate are [`Error::InvalidArgument`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redisync::Result<()> {
    /// # let server = redisync_test_harness::RedisServer::start();
    /// # let client = Client::connect(server.url()).await?;
    /// use redisync::prelude::*;
    ///
    /// let limiter = client.rate_limiter("uploads");
    /// limiter.try_set_rate(Rate::per_second(2).burst(1)).await?;
    /// let first = limiter.try_acquire(2).await?; // burst + 1 units at once
    /// assert!(first.allowed);
    /// assert_eq!(first.remaining, 0);
    /// let second = limiter.try_acquire(1).await?;
    /// assert!(!second.allowed); // answer "429, Retry-After: second.retry_after"
    /// assert!(second.retry_after <= std::time::Duration::from_millis(500));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Dropping the future gives the units back if it took them (see [`RateLimiter`]).
    pub async fn try_acquire(&self, n: u64) -> Result<Decision> {
        self.core
            .decide(n)
            .instrument(tracing::debug_span!("redisync.rate_limiter.try_acquire", name = %self.core.name, n))
            .await
    }

    /// Takes `n` units, waiting as long as it takes: it sleeps until the rate would allow
    /// them (or until the rate is replaced), then asks again. Errors as for
    /// [`try_acquire`](Self::try_acquire).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redisync::Result<()> {
    /// # let server = redisync_test_harness::RedisServer::start();
    /// # let client = Client::connect(server.url()).await?;
    /// use redisync::prelude::*;
    ///
    /// let limiter = client.rate_limiter("crawler");
    /// limiter.try_set_rate(Rate::per_second(20)).await?;
    /// for _ in 0..3 {
    ///     limiter.acquire(1).await?; // one every 50 ms
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// As for [`try_acquire`](Self::try_acquire); a dropped waiter leaves its client's queue
    /// at once.
    pub async fn acquire(&self, n: u64) -> Result<()> {
        self.acquire_until(n, None).await.map(|_| ())
    }

    /// Takes `n` units, waiting at most `wait`. Returns `true` once they are taken, `false`
    /// if the time ran out first. A zero `wait` asks once; one too large for Redis
    /// milliseconds (such as `Duration::MAX`) is [`Error::InvalidArgument`]. Errors as for
    /// [`try_acquire`](Self::try_acquire).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redisync::Result<()> {
    /// # let server = redisync_test_harness::RedisServer::start();
    /// # let client = Client::connect(server.url()).await?;
    /// use std::time::Duration;
    /// use redisync::prelude::*;
    ///
    /// let limiter = client.rate_limiter("sms");
    /// limiter.try_set_rate(Rate::per_hour(1)).await?;
    /// assert!(limiter.acquire_for(1, Duration::from_millis(10)).await?);
    /// assert!(!limiter.acquire_for(1, Duration::from_millis(10)).await?); // an hour to go
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// As for [`acquire`](Self::acquire).
    pub async fn acquire_for(&self, n: u64, wait: Duration) -> Result<bool> {
        let deadline = wait_deadline(wait)?;
        self.acquire_until(n, Some(deadline)).await
    }

    async fn acquire_until(&self, n: u64, deadline: Option<Instant>) -> Result<bool> {
        let core = &self.core;
        let keys = core.keys()?;
        let spec = WaitSpec {
            kind: "rate_limiter",
            queue: &keys.queue,
            channel: &keys.channel,
            deadline,
            may_reenter: false,
            shared: false,
            expect_busy: false,
        };
        let taken = core
            .client
            .acquire(spec, || {
                let decision = core.decide(n);
                async move {
                    let decision = decision.await?;
                    Ok(if decision.allowed {
                        Attempt::Acquired(())
                    } else {
                        Attempt::Busy {
                            retry_in: Some(decision.retry_after),
                        }
                    })
                }
            })
            .instrument(tracing::debug_span!("redisync.rate_limiter.acquire", name = %core.name, n))
            .await?;
        Ok(taken.is_some())
    }
}

#[async_trait]
impl DistributedPrimitive for RateLimiter {
    fn name(&self) -> &str {
        &self.core.name
    }

    /// Removes the rate and the state; waiters on every client wake and fail (no rate).
    /// Returns whether a rate was set.
    async fn delete(&self) -> Result<bool> {
        let keys = self.core.keys()?;
        let call = scripts::Delete {
            config: &keys.config,
            state: &keys.state,
            channel: &keys.channel,
        }
        .call();
        Ok(self.core.client.eval::<i64>(call).await? == 1)
    }
}
