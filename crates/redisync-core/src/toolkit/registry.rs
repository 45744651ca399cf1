//! The client's side of a registry of waiting clients (`lua/wake_prelude.lua`): whether this
//! client may be registered as waiting for a primitive, and its withdrawal when its last
//! waiting task leaves, so that a wake-up meant for it is passed on rather than lost.
//!
//! A primitive whose attempts register the client (the plain lock, the leader election)
//! waits like this:
//!
//! ```text
//! let withdrawal = Withdraw::start(core.clone(), registration_for(client, wait), registration);
//! let withdraw = withdrawal.withdraw();
//! client.acquire(spec, || {
//!     let earlier = withdraw.attempt_sent();
//!     let attempt = core.attempt(.., withdraw, earlier); // undo: withdraw.abandoned_attempt_ended
//!     let settle = withdraw.settle();
//!     async move { settle.outcome(attempt.await) }
//! })
//! ```
//!
//! The withdrawal outlives the wait, which borrows it: the wait (with the local queue place
//! it holds) is gone before the withdrawal asks whether other local tasks still wait, also
//! when the caller drops the future mid-wait.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::Toolkit;
use crate::client::Client;
use crate::error::Result;
use crate::locking::lock;
use crate::script::ScriptCall;
use crate::wait::{Attempt, RECHECK};

/// A primitive whose waiting clients register in Redis.
pub trait Waitlist: Send + Sync + 'static {
    /// The client of the primitive's handle.
    fn client(&self) -> &Client;
    /// The call that takes this client out of the primitive's registry of waiting clients
    /// (passing on a wake-up it may have swallowed).
    fn withdraw_call(&self) -> Result<ScriptCall>;
}

/// Whether this client may be registered in Redis as waiting for one primitive: set when an
/// attempt that registers is sent, cleared by a grant (which takes the registration out) and
/// by a withdrawal. Shared by every task of the client waiting for the primitive: keep one
/// per client and primitive (with the handle's keys, in the client's shared cells, held by
/// the [`Waitlist`]: a withdrawal being sent keeps it, so that a handle made meanwhile finds
/// the same one).
#[derive(Debug, Default)]
pub struct ClientRegistration {
    registered: AtomicBool,
    /// How many attempts that may register have been sent. A withdrawal decided before the
    /// latest of them is pointless (the newer wait owns the registration, and withdraws it
    /// when it ends), and would take that wait's registration out if it landed after it.
    registering_attempts: AtomicU64,
}

/// Where one wait stands.
#[derive(Debug, Default)]
struct WaitState {
    /// An attempt is on the wire (or its outcome is unknown).
    in_flight: bool,
    /// The wait is over (its local queue place given up).
    ended: bool,
}

/// One wait's part in the client's registration. If an attempt is on the wire when the wait
/// ends, the withdrawal waits for it to end (sent at once, it could overtake the attempt,
/// which would then register the client again).
pub struct Withdraw<L> {
    list: Arc<L>,
    /// How long a registration lasts by itself; zero for a wait that never registers.
    registration: Duration,
    state: Arc<Mutex<WaitState>>,
    client: Arc<ClientRegistration>,
}

impl<L> Clone for Withdraw<L> {
    fn clone(&self) -> Self {
        Withdraw {
            list: self.list.clone(),
            registration: self.registration,
            state: self.state.clone(),
            client: self.client.clone(),
        }
    }
}

/// How long a registration made by a wait lasts in Redis: a registered waiter asks again at
/// least every [`RECHECK`], and its registration outlasts a few of those. Zero for a try that
/// does not wait (`wait` of zero), whose attempts never register.
pub fn registration_for(client: &Client, wait: Option<Duration>) -> Duration {
    if wait == Some(Duration::ZERO) {
        return Duration::ZERO;
    }
    RECHECK
        .saturating_mul(5)
        .saturating_add(client.command_timeout().saturating_mul(2))
}

impl<L: Waitlist> Withdraw<L> {
    /// Starts one wait of `list`, whose attempts register the client for `registration`
    /// (see [`registration_for`]); `client` is the client's [`ClientRegistration`] for the
    /// primitive. Dropping the returned [`Withdrawal`] ends the wait.
    pub fn start(
        list: Arc<L>,
        registration: Duration,
        client: Arc<ClientRegistration>,
    ) -> Withdrawal<L> {
        Withdrawal(Withdraw {
            list,
            registration,
            state: Arc::default(),
            client,
        })
    }

    /// How long a registration made by this wait's attempts lasts; zero: they never
    /// register.
    pub fn registration(&self) -> Duration {
        self.registration
    }

    /// Notes that an attempt is being sent. Returns whether an earlier attempt (of this wait
    /// or another task's) may have registered the client: the attempt then keeps its place.
    /// An attempt that may register counts as registering from now on, since one cut off on
    /// the wire may still register the client.
    pub fn attempt_sent(&self) -> bool {
        lock(&self.state).in_flight = true;
        if self.registration.is_zero() {
            self.client.registered.load(Ordering::Acquire)
        } else {
            self.client
                .registering_attempts
                .fetch_add(1, Ordering::AcqRel);
            self.client.registered.swap(true, Ordering::AcqRel)
        }
    }

    /// What an attempt's outcome must settle (see [`Settle::outcome`]): made before the
    /// attempt's future, which it outlives no more than the wait.
    pub fn settle(&self) -> Settle {
        Settle {
            state: self.state.clone(),
            client: self.client.clone(),
        }
    }

    /// An attempt whose caller went away got its reply (or will never get one): `acquired`
    /// when it got the primitive (its grant took the registration out). For the attempt's
    /// undo.
    pub fn abandoned_attempt_ended(&self, acquired: bool) {
        let mut state = lock(&self.state);
        state.in_flight = false;
        if acquired {
            self.client.registered.store(false, Ordering::Release);
        }
        if state.ended {
            drop(state);
            self.send();
        }
    }

    /// The wait ended (its local queue place is already given up).
    fn wait_ended(&self) {
        let mut state = lock(&self.state);
        state.ended = true;
        if !state.in_flight {
            drop(state);
            self.send();
        }
    }

    /// Withdraws the client in the background if it may be registered and no other task of
    /// it waits any more (those keep the registration: the next of them asks Redis at once,
    /// and the last to leave withdraws).
    fn send(&self) {
        let client = self.list.client();
        let Ok(call) = self.list.withdraw_call() else {
            return;
        };
        // Read first: an attempt sent from here on makes this withdrawal moot.
        let attempts_before = self.client.registering_attempts.load(Ordering::Acquire);
        if client.has_local_waiters(call.first_key())
            || !self.client.registered.swap(false, Ordering::AcqRel)
        {
            return;
        }
        // Retried for one command timeout at most, and only until the client waits again: a
        // withdrawal landing after another wait's attempt registered the client would take
        // that registration out, and the release would wake nobody. (Sent right when the
        // other wait starts, it may still land after its attempt; the re-check bounds the
        // harm: see `RECHECK`.) If it fails, the entry lapses by itself, or is skipped by the
        // next wake-up once nobody listens on it.
        let retry = client.retry_for_lease(Instant::now(), Some(client.command_timeout()));
        let registration = self.client.clone();
        // The primitive's core too: it holds the registration in the client's shared cells,
        // where a handle made while this is being sent must find the same one.
        let list = self.list.clone();
        client.spawn_release_unless(call, retry, move || {
            let _shared = &list;
            registration.registering_attempts.load(Ordering::Acquire) != attempts_before
        });
    }
}

/// What one attempt's outcome settles in its wait and the client's registration.
#[derive(Debug)]
pub struct Settle {
    state: Arc<Mutex<WaitState>>,
    client: Arc<ClientRegistration>,
}

impl Settle {
    /// Takes an attempt's `outcome`: a grant took the registration out; a busy primitive
    /// registered the client, which is then woken when its turn comes, and asks again at
    /// least every [`RECHECK`] all the same (which registers it again), so that a wake-up lost
    /// with a stopped client, or a registration lost with a failed-over primary, costs at most
    /// that long; an outcome that is unknown leaves the attempt on the wire for all the wait
    /// knows, until [`Withdraw::abandoned_attempt_ended`].
    pub fn outcome<T>(self, outcome: Result<Attempt<T>>) -> Result<Attempt<T>> {
        let unknown = matches!(&outcome, Err(err) if err.is_outcome_unknown());
        lock(&self.state).in_flight = unknown;
        match outcome {
            Ok(Attempt::Acquired(held)) => {
                self.client.registered.store(false, Ordering::Release);
                Ok(Attempt::Acquired(held))
            }
            Ok(Attempt::Busy { retry_in }) => Ok(Attempt::Busy {
                retry_in: Some(retry_in.map_or(RECHECK, |r| r.min(RECHECK))),
            }),
            Err(err) => Err(err),
        }
    }
}

/// Ends its wait when dropped, however the wait ended: the client withdraws if it may be
/// registered and no other task of it waits.
pub struct Withdrawal<L: Waitlist>(Withdraw<L>);

impl<L: Waitlist> Withdrawal<L> {
    /// The wait's part, for its attempts.
    pub fn withdraw(&self) -> &Withdraw<L> {
        &self.0
    }
}

impl<L: Waitlist> Drop for Withdrawal<L> {
    fn drop(&mut self) {
        self.0.wait_ended();
    }
}
