//! What both lock kinds share: their Redis names, their owner, and the acquire, status and
//! force-unlock operations. A [`ReentrantLock`](crate::ReentrantLock) and a
//! [`FairLock`](crate::FairLock) differ only in whether a waiting queue is passed to the
//! scripts.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redisync_core::duration::{lease_millis, redis_millis, wait_deadline};
use redisync_core::{Attempt, Client, Error, Hold, Lease, Result, ScriptCall, WaitSpec};
use tracing::Instrument;

use crate::guard::LockGuard;
use crate::scripts::{self, decode_acquire_all, decode_status, AcquireReply};

/// A fair waiter that misses this many heartbeats in a row loses its place...
pub(crate) const HEARTBEATS_PER_PLACE: u32 = 3;

/// ...unless that is shorter than a heartbeat plus the command timeout: a waiter whose
/// heartbeat request Redis is slow to answer (but within the timeout) is not dead.
pub(crate) fn place_lifetime(heartbeat: Duration, command_timeout: Duration) -> Duration {
    heartbeat
        .saturating_mul(HEARTBEATS_PER_PLACE)
        .max(heartbeat.saturating_add(command_timeout))
}

/// The Redis names of one lock.
#[derive(Debug)]
pub(crate) struct LockKeys {
    pub(crate) hash: String,
    pub(crate) fence: String,
    /// The channel a release publishes on; for the fair lock, the prefix of each waiter's own
    /// channel.
    pub(crate) wake: String,
    attempt_prefix: String,
    /// The fair lock's waiting queue.
    pub(crate) queue: Option<QueueKeys>,
}

/// The fair lock's waiting queue (layout in `lua/lock_prelude.lua`).
#[derive(Debug)]
pub(crate) struct QueueKeys {
    pub(crate) queue: String,
    pub(crate) deadlines: String,
}

impl LockKeys {
    /// The record of acquire attempt `attempt`: written when its hold is given back.
    pub(crate) fn attempt_record(&self, attempt: &str) -> String {
        format!("{}{attempt}", self.attempt_prefix)
    }

    /// Appends the queue's keys to `call` for the fair lock.
    fn with_queue(&self, call: ScriptCall) -> ScriptCall {
        match &self.queue {
            Some(q) => call.key(q.queue.as_str()).key(q.deadlines.as_str()),
            None => call,
        }
    }
}

/// Which kind of lock a core belongs to.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind {
    Reentrant,
    /// First come, first served; each waiter proves it is alive every `heartbeat`.
    Fair {
        heartbeat: Duration,
    },
}

/// Everything a handle and its guards share.
#[derive(Debug)]
pub(crate) struct LockCore {
    pub(crate) client: Client,
    pub(crate) name: String,
    keys: Result<LockKeys>,
    pub(crate) owner: String,
    kind: Kind,
    /// Guards of this owner alive in this process: when non-zero, an acquire may be a
    /// re-entry and must not queue behind local waiters.
    pub(crate) live_guards: Arc<AtomicUsize>,
}

impl LockCore {
    pub(crate) fn new(client: &Client, name: String, kind: Kind) -> Self {
        let keys = client.key_space(&name).map(|space| match kind {
            Kind::Reentrant => LockKeys {
                hash: space.key("lock"),
                fence: space.key("fence"),
                wake: space.key("wake"),
                attempt_prefix: space.key("attempt:"),
                queue: None,
            },
            Kind::Fair { .. } => LockKeys {
                hash: space.key("fair:lock"),
                fence: space.key("fair:fence"),
                wake: space.key("fair:wake:"),
                attempt_prefix: space.key("fair:attempt:"),
                queue: Some(QueueKeys {
                    queue: space.key("fair:queue"),
                    deadlines: space.key("fair:deadlines"),
                }),
            },
        });
        LockCore {
            owner: client.unique_id(),
            client: client.clone(),
            name,
            keys,
            kind,
            live_guards: Arc::default(),
        }
    }

    /// The same lock and owner, as another kind (a fair lock with another heartbeat).
    pub(crate) fn with_kind(&self, kind: Kind) -> Self {
        let mut core = LockCore::new(&self.client, self.name.clone(), kind);
        core.owner = self.owner.clone();
        core.live_guards = self.live_guards.clone();
        core
    }

    pub(crate) fn keys(&self) -> Result<&LockKeys> {
        self.keys.as_ref().map_err(Clone::clone)
    }

    /// The script call that gives back the hold of acquire attempt `attempt` (and for the
    /// fair lock, its place in the queue), remembering the outcome for `remember`.
    pub(crate) fn release_call(&self, attempt: &str, remember: Duration) -> Result<ScriptCall> {
        let keys = self.keys()?;
        let call = ScriptCall::new(&scripts::RELEASE)
            .key(keys.hash.as_str())
            .key(keys.attempt_record(attempt));
        Ok(keys
            .with_queue(call)
            .arg(attempt)
            .arg(keys.wake.as_str())
            .arg(redis_millis(remember)))
    }

    /// How long a release is remembered: long enough for its retries.
    pub(crate) fn retry_window(&self) -> Duration {
        self.client.command_timeout().saturating_mul(2)
    }

    /// The lock's remaining lease (None when free) and this owner's hold count.
    pub(crate) async fn status(&self) -> Result<(Option<Duration>, u32)> {
        let keys = self.keys()?;
        let call = ScriptCall::new(&scripts::STATUS)
            .key(keys.hash.as_str())
            .arg(self.owner.as_str());
        let reply: Vec<i64> = self.client.eval(call).await?;
        decode_status(&reply)
    }

    /// Acquires, waiting as long as it takes (the public `lock` and `lock_with_lease`).
    pub(crate) async fn acquire_waiting(
        self: &Arc<Self>,
        lease: Option<Duration>,
    ) -> Result<LockGuard> {
        self.acquire(lease, None)
            .await?
            .ok_or_else(|| Error::invalid("an unbounded wait ended without the lock"))
    }

    pub(crate) async fn is_locked(&self) -> Result<bool> {
        Ok(self.status().await?.0.is_some())
    }

    pub(crate) async fn hold_count(&self) -> Result<u32> {
        Ok(self.status().await?.1)
    }

    pub(crate) async fn remaining_lease(&self) -> Result<Option<Duration>> {
        Ok(self.status().await?.0)
    }

    pub(crate) async fn force_unlock(&self) -> Result<bool> {
        let keys = self.keys()?;
        let call = keys
            .with_queue(ScriptCall::new(&scripts::FORCE_UNLOCK).key(keys.hash.as_str()))
            .arg(keys.wake.as_str());
        let freed: i64 = self.client.eval(call).await?;
        Ok(freed == 1)
    }

    /// Acquires with a fixed `lease` (or the watchdog's), waiting at most `wait` (for ever
    /// when `None`).
    pub(crate) async fn acquire(
        self: &Arc<Self>,
        lease: Option<Duration>,
        wait: Option<Duration>,
    ) -> Result<Option<LockGuard>> {
        let keys = self.keys()?;
        let lease_for = lease.unwrap_or_else(|| self.client.watchdog_timeout());
        lease_millis(lease_for)?;
        let deadline = wait.map(wait_deadline).transpose()?;
        let granted = match self.kind {
            Kind::Reentrant => {
                let spec = WaitSpec {
                    queue: &keys.hash,
                    channel: &keys.wake,
                    deadline,
                    may_reenter: self.live_guards.load(Ordering::Acquire) > 0,
                    shared: false,
                };
                self.client
                    .acquire(spec, || {
                        self.attempt(lease_for, self.client.unique_id(), None)
                    })
                    .instrument(tracing::debug_span!("redisync.lock", name = %self.name))
                    .await?
            }
            Kind::Fair { heartbeat } => {
                self.acquire_in_turn(lease_for, wait, deadline, heartbeat)
                    .instrument(tracing::debug_span!("redisync.fair_lock", name = %self.name))
                    .await?
            }
        };
        let Some((attempt, token, sent_at)) = granted else {
            return Ok(None);
        };
        self.guard(&attempt, token, sent_at, lease).map(Some)
    }

    /// The guard of a hold granted to `attempt` by a request sent at `sent_at`: with a fixed
    /// `lease`, or the watchdog's.
    fn guard(
        self: &Arc<Self>,
        attempt: &str,
        token: u64,
        sent_at: Instant,
        lease: Option<Duration>,
    ) -> Result<LockGuard> {
        let keys = self.keys()?;
        let lease = match lease {
            Some(lease) => Lease::fixed(sent_at, lease),
            None => self.client.watch_lease(
                &scripts::RENEW,
                vec![keys.hash.clone()],
                vec![self.owner.clone(), token.to_string(), attempt.to_owned()],
                sent_at,
            ),
        };
        let release = self.release_call(attempt, self.retry_window())?;
        let hold = Hold::new(self.client.clone(), release, lease);
        Ok(LockGuard::new(
            self.clone(),
            token,
            attempt.to_owned(),
            hold,
        ))
    }

    /// Acquires every lock of `cores` or none, without waiting, in one request: they must be
    /// distinct reentrant locks of one client. With a fixed `lease`, or the watchdog's.
    pub(crate) async fn acquire_all(
        cores: &[Arc<LockCore>],
        lease: Option<Duration>,
    ) -> Result<Option<Vec<LockGuard>>> {
        let Some(first) = cores.first() else {
            return Err(Error::invalid("acquiring all of no locks"));
        };
        let client = &first.client;
        let lease_for = lease.unwrap_or_else(|| client.watchdog_timeout());
        lease_millis(lease_for)?;
        let mut hashes = std::collections::HashSet::new();
        for core in cores {
            let keys = core.keys()?;
            if core.client.id() != client.id() {
                return Err(Error::invalid(
                    "locks acquired together must all use the same client",
                ));
            }
            if keys.queue.is_some() {
                return Err(Error::invalid("fair locks cannot be acquired together"));
            }
            if !hashes.insert(keys.hash.as_str()) {
                return Err(Error::invalid(format!(
                    "lock {:?} appears twice among locks acquired together",
                    core.name
                )));
            }
        }
        let attempt = client.unique_id();
        let mut call = ScriptCall::new(&scripts::ACQUIRE_ALL);
        for core in cores {
            let keys = core.keys()?;
            call = call
                .key(keys.hash.as_str())
                .key(keys.fence.as_str())
                .key(keys.attempt_record(&attempt));
        }
        call = call.arg(redis_millis(lease_for)).arg(attempt.as_str());
        for core in cores {
            call = call.arg(core.owner.as_str());
        }
        // Remembered past the lease, so a grant that could still run is refused.
        let give_back = cores
            .iter()
            .map(|core| core.release_call(&attempt, lease_for.saturating_add(core.retry_window())))
            .collect::<Result<Vec<_>>>()?;
        let undo_client = client.clone();
        let count = cores.len();
        let sent_at = Instant::now();
        let retry = client.retry_for_lease(sent_at, Some(lease_for));
        let reply: Vec<i64> = client
            .eval_undoable(call, move |reply: Option<Vec<i64>>| async move {
                let granted = match &reply {
                    Some(reply) => matches!(decode_acquire_all(reply, count), Ok(Some(_))),
                    None => true,
                };
                if granted {
                    for release in give_back {
                        undo_client.spawn_release(release, retry);
                    }
                }
            })
            .instrument(tracing::debug_span!("redisync.lock.all", locks = count))
            .await?;
        let Some(tokens) = decode_acquire_all(&reply, count)? else {
            return Ok(None);
        };
        client.record_acquires(count as u64);
        let mut guards = Vec::with_capacity(count);
        for (core, token) in cores.iter().zip(tokens) {
            guards.push(core.guard(&attempt, token, sent_at, lease)?);
        }
        Ok(Some(guards))
    }

    /// The fair lock's wait: every waiter is in the queue in Redis from its first attempt on,
    /// listens on its own channel, and re-attempts at least every `heartbeat`, which keeps its
    /// place. Waiters do not queue locally: the order is Redis's.
    async fn acquire_in_turn(
        self: &Arc<Self>,
        lease: Duration,
        wait: Option<Duration>,
        deadline: Option<Instant>,
        heartbeat: Duration,
    ) -> Result<Option<(String, u64, Instant)>> {
        let keys = self.keys()?;
        lease_millis(heartbeat).map_err(|_| {
            Error::invalid(format!(
                "a fair lock's heartbeat must be within 10 ms and 2^53 ms, found {heartbeat:?}"
            ))
        })?;
        // One id for every attempt of this call: it is the waiter's place in the queue.
        let waiter = self.client.unique_id();
        let channel = format!("{}{waiter}", keys.wake);
        let queues = wait != Some(Duration::ZERO);
        let place = queues.then(|| place_lifetime(heartbeat, self.client.command_timeout()));
        let give_back = self.release_call(&waiter, lease.saturating_add(self.retry_window()))?;
        // Leaves the queue on every way out but success, including a dropped future; armed by
        // the first attempt that may queue, so a call that never reached Redis sends nothing.
        let mut leave = QueuePlace {
            client: self.client.clone(),
            give_back: None,
            outlives: lease.saturating_add(place.unwrap_or_default()),
        };
        // Each waiter waits by itself on its own channel: the queue that orders them is Redis's.
        let spec = WaitSpec {
            queue: &channel,
            channel: &channel,
            deadline,
            may_reenter: false,
            shared: true,
        };
        let granted = self
            .client
            .acquire(spec, || {
                if queues && leave.give_back.is_none() {
                    leave.give_back = Some(give_back.clone());
                }
                let attempt = self.attempt(lease, waiter.clone(), place);
                async move {
                    Ok(match attempt.await? {
                        Attempt::Busy { retry_in } => Attempt::Busy {
                            retry_in: Some(retry_in.map_or(heartbeat, |r| r.min(heartbeat))),
                        },
                        acquired => acquired,
                    })
                }
            })
            .await;
        match granted {
            Ok(Some(held)) => {
                leave.give_back = None;
                Ok(Some(held))
            }
            Ok(None) => {
                leave.now().await;
                Ok(None)
            }
            Err(err) => Err(err),
        }
    }

    /// One acquire request under attempt id `attempt`; for the fair lock, `place` is how long
    /// the caller's place in the queue lasts (None: never queue). If its caller goes away,
    /// whatever it got is given back.
    fn attempt(
        &self,
        lease: Duration,
        attempt: String,
        place: Option<Duration>,
    ) -> impl std::future::Future<Output = Result<Attempt<(String, u64, Instant)>>> + Send + 'static
    {
        let sent_at = Instant::now();
        let request = self.keys().and_then(|keys| {
            let call = ScriptCall::new(&scripts::ACQUIRE)
                .key(keys.hash.as_str())
                .key(keys.fence.as_str())
                .key(keys.attempt_record(&attempt));
            let mut call = keys
                .with_queue(call)
                .arg(self.owner.as_str())
                .arg(redis_millis(lease))
                .arg(attempt.as_str());
            if keys.queue.is_some() {
                call = call
                    .arg(place.map_or(0, redis_millis))
                    .arg(keys.wake.as_str());
            }
            // Remembered past the lease, so a grant that could still run is refused.
            let give_back =
                self.release_call(&attempt, lease.saturating_add(self.retry_window()))?;
            Ok(self.client.eval_acquire_leased(
                call,
                give_back,
                |reply: &Vec<i64>| {
                    matches!(
                        AcquireReply::decode(reply),
                        Ok(AcquireReply::Acquired { .. })
                    )
                },
                Some(lease),
            ))
        });
        async move {
            let reply = request?.await?;
            Ok(match AcquireReply::decode(&reply)? {
                AcquireReply::Acquired { token } => Attempt::Acquired((attempt, token, sent_at)),
                AcquireReply::Busy { pttl } => Attempt::Busy { retry_in: pttl },
                // Only an attempt given back before it ran says this, and nobody awaits those.
                AcquireReply::GivenBack => Attempt::Busy { retry_in: None },
            })
        }
    }
}

/// A fair waiter's place in the queue: given up on drop (in the background) unless the wait
/// succeeded.
struct QueuePlace {
    client: Client,
    /// How long after the latest attempt what it left (a hold, a place) can last by itself.
    outlives: Duration,
    /// Gives back the waiter's attempt: leaves the queue, and forbids any of its attempts
    /// still on the wire from granting or queueing again.
    give_back: Option<ScriptCall>,
}

impl QueuePlace {
    /// Leaves the queue now, so that the caller returns with its place already given up. If
    /// this is cut short or fails, the drop leaves in the background instead.
    async fn now(&mut self) {
        if let Some(call) = self.give_back.clone() {
            if self.client.eval_idempotent::<i64>(call).await.is_ok() {
                self.give_back = None;
            }
        }
    }
}

impl Drop for QueuePlace {
    fn drop(&mut self) {
        if let Some(call) = self.give_back.take() {
            // Both the hold and the place lapse by themselves: no need to retry past that.
            let retry = self
                .client
                .retry_for_lease(Instant::now(), Some(self.outlives));
            self.client.spawn_release(call, retry);
        }
    }
}
