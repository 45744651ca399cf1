//! Addressed wake-ups, shared by both semaphores.
//!
//! A client with tasks waiting on a semaphore is registered once in the semaphore's
//! `waiters` sorted set (`lua/wake_prelude.lua`), under a channel of its own
//! (`…:wake:<client id>`), and only its head waiters (one per permit count asked for) listen
//! there. Permits freed wake that many clients, those that have waited longest, instead of
//! every client's head: the requests per hand-off do not grow with the number of clients,
//! and clients take turns.
//!
//! The client's part, kept here:
//!
//! * an attempt that is not a first try registers the client when it finds no permits (its
//!   head is subscribed by then, so a wake-up cannot slip between the two), and takes it out
//!   when it gets in, or sends it to the back when more of its tasks wait: clients take
//!   turns;
//! * when the client's last waiting task leaves without permits (its wait ran out, its future
//!   was dropped, it failed), the client is withdrawn in the background, and a wake-up it may
//!   have been sent meanwhile is passed on if permits are free: a task that gives up never
//!   swallows a wake-up meant for the next client. An attempt still on the wire at that
//!   moment withdraws the client itself when it completes (it may register after the
//!   withdrawal).
//!
//! Whether the client may be registered, and the order of its registering attempts and
//! withdrawals on the wire, is the [`ClientRegistration`] the lock and the leader election
//! use too: a withdrawal is retried for a few command timeouts, but never once the client
//! has sent a registering attempt again, and such an attempt waits until no withdrawal send
//! is on the wire, so a late withdrawal never takes out the registration of a newer wait.
//!
//! A crashed client's connections are gone, so a wake-up sent to it reaches nobody (`PUBLISH`
//! answers 0) and goes to the next client at once. A client that is alive but cannot act
//! (stopped, or starved of CPU) swallows the wake-up it is sent: the permit then waits for
//! the next client's periodic re-check, at most [`RECHECK`](crate::semaphore::RECHECK) (for
//! the expirable semaphore, the nearest lease end if sooner). Entries of vanished clients are
//! dropped when a wake-up reaches them, or with the whole registry [`registry_ttl`] after the
//! last waiter registered.

use redisync_core::toolkit::duration::redis_millis;
use redisync_core::toolkit::{registration_for, Toolkit};
use redisync_core::toolkit::{
    Attempt, Client, ClientRegistration, Result, Wait, WaitSpec, Waitlist,
};
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long a semaphore's waiters registry lasts at least after a client last registered: a
/// waiting head registers again with every re-check (at least every
/// [`RECHECK`](crate::semaphore::RECHECK)), so only a registry whose clients all vanished
/// expires.
pub(crate) fn registry_ttl(client: &Client) -> u64 {
    redis_millis(registration_for(client, None))
}

/// How many of this client's tasks wait on one semaphore, whatever they ask for (one per
/// client and semaphore, see [`Toolkit::local_cell`](redisync_core::toolkit::Toolkit::local_cell)).
/// The local queues cannot tell: there is one per permit count.
#[derive(Debug, Default)]
pub(crate) struct LocalWaiters {
    waiting: AtomicUsize,
}

impl LocalWaiters {
    /// Whether no task of this client waits on the semaphore any more.
    pub(crate) fn none_waiting(&self) -> bool {
        self.waiting.load(Ordering::Acquire) == 0
    }
}

/// What one attempt does with its client's place among the waiters (the scripts'
/// `after_attempt`).
#[derive(Debug, Clone)]
pub(crate) struct Turn {
    /// The client's channel, or empty for a first try, which leaves the registry alone.
    pub(crate) channel: String,
    /// Whether more tasks of the client wait, so that one that gets in goes to the back.
    pub(crate) requeue: bool,
}

impl Turn {
    /// A try that never waits (or the first try of a wait): the registry is left alone.
    pub(crate) fn first_try() -> Self {
        Turn {
            channel: String::new(),
            requeue: false,
        }
    }

    /// Whether the attempt may register its client.
    pub(crate) fn registers(&self) -> bool {
        !self.channel.is_empty()
    }

    /// Notes the outcome of the attempt it was used for: one that got in and left the
    /// registry unregistered the client.
    pub(crate) fn acquired(&self, registration: &ClientRegistration) {
        if self.registers() && !self.requeue {
            registration.unregistered();
        }
    }
}

/// What a semaphore's shared core offers the waits on it, besides its withdrawal
/// ([`Waitlist`]).
pub(crate) trait Waited: Waitlist {
    /// How many of this client's tasks wait on the semaphore.
    fn local(&self) -> &LocalWaiters;
    /// Whether this client may be registered as waiting, and the order of its registering
    /// attempts and withdrawals on the wire.
    fn registration(&self) -> &Arc<ClientRegistration>;
    /// This client's wake-up channel for the semaphore.
    fn channel(&self) -> Result<&str>;
}

/// One task's wait on a semaphore. Counts the task among its client's waiting tasks while it
/// lives, gives each attempt its [`Turn`], and, when the client's last waiting task leaves
/// while the client may be registered, withdraws the client in the background. It keeps
/// only a reference to the semaphore's core: a task waiting behind its client's head costs
/// little memory, and the withdrawal is built only when it is sent.
pub(crate) struct Waiter<C: Waited> {
    core: Arc<C>,
}

impl<C: Waited> Waiter<C> {
    /// Starts a wait on `core`'s semaphore.
    pub(crate) fn new(core: &Arc<C>) -> Self {
        core.local().waiting.fetch_add(1, Ordering::AcqRel);
        Waiter { core: core.clone() }
    }

    /// The turn of an attempt that is not the wait's first try (made before subscribing,
    /// which leaves the registry alone).
    pub(crate) fn next_turn(&self) -> Turn {
        Turn {
            channel: self.core.channel().unwrap_or_default().to_owned(),
            requeue: self.core.local().waiting.load(Ordering::Acquire) > 1,
        }
    }
}

impl<C: Waited> Drop for Waiter<C> {
    fn drop(&mut self) {
        if self.core.local().waiting.fetch_sub(1, Ordering::AcqRel) == 1 {
            withdraw(&*self.core);
        }
    }
}

/// Acquires from `core`'s semaphore as `spec` says, sending `attempt` with each [`Turn`]: a
/// call that may wait counts among the client's waiting tasks until it ends (see [`Waiter`]);
/// one that may not ([`Wait::No`]) makes one first try and never registers. An attempt that
/// may register the client is not sent while a withdrawal of the client is on the wire (see
/// [`ClientRegistration::registering`]). A head handed over by a task of its client that got
/// in ([`Attempt::AcquiredStillWaiting`]) sends nothing before its wake-up, at most
/// [`RECHECK`](crate::semaphore::RECHECK).
pub(crate) async fn acquire<C, T, Fut>(
    core: &Arc<C>,
    spec: WaitSpec<'_>,
    wait: Wait,
    mut attempt: impl FnMut(Turn) -> Fut,
) -> Result<Option<T>>
where
    C: Waited,
    T: Send,
    Fut: Future<Output = Result<Attempt<T>>> + Send,
{
    let waiter = (wait.limit() != Some(Duration::ZERO)).then(|| Waiter::new(core));
    core.client()
        .acquire_in_turn(spec, |place| {
            // Handed over by a task of this client that took permits and left fewer than
            // this one asks for (see `Attempt::AcquiredStillWaiting`), with no wake-up since:
            // permits come back only with a wake-up, so there is nothing to ask yet.
            let send = (!place.handed_over).then(|| {
                // A first try registers nothing, unless other tasks of the client wait (their
                // head listens, so the client may go to the back if this one gets in).
                let turn = match &waiter {
                    Some(waiter) if !place.first_try || place.others_waiting => waiter.next_turn(),
                    _ => Turn::first_try(),
                };
                let registers = turn.registers();
                (attempt(turn), registers)
            });
            let core = core.clone();
            async move {
                let Some((send, registers)) = send else {
                    return Ok(Attempt::Busy {
                        retry_in: Some(crate::semaphore::RECHECK),
                    });
                };
                if registers {
                    core.registration().registering(core.client()).await;
                }
                send.await
            }
        })
        .await
}

/// Withdraws the client from `core`'s waiters in the background if it may be registered and
/// none of its tasks waits any more (see [`ClientRegistration::withdraw`]).
pub(crate) fn withdraw(core: &impl Waited) {
    core.registration()
        .withdraw(core, |_| !core.local().none_waiting());
}

/// An attempt whose caller went away registered the client after all: withdraws it unless
/// another of its tasks waits (which then owns the registration).
pub(crate) fn withdraw_late_registration(core: &impl Waited) {
    core.registration().registered_late();
    withdraw(core);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_first_try_leaves_the_registry_alone() {
        let turn = Turn::first_try();
        assert!(!turn.registers());
        assert!(!turn.requeue);
        let registration = ClientRegistration::default();
        registration.registered_late();
        turn.acquired(&registration);
        assert!(registration.may_be_registered(), "untouched");
        Turn {
            channel: "c".into(),
            requeue: true,
        }
        .acquired(&registration);
        assert!(registration.may_be_registered(), "requeued");
        Turn {
            channel: "c".into(),
            requeue: false,
        }
        .acquired(&registration);
        assert!(!registration.may_be_registered(), "left");
    }
}
