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
//! client.acquire_in_turn(spec, |turn| {
//!     let core = core.clone();
//!     // undo of each attempt: withdraw.abandoned_attempt_ended
//!     withdraw.attempt(turn, move |withdraw, on_grant| core.attempt(.., withdraw, on_grant))
//! })
//! ```
//!
//! A grant takes the client out of the registry, unless other tasks of it wait behind the
//! caller ([`OnGrant::Keep`]): it then keeps the client registered for them, and the next of
//! them is told so ([`Turn::handed_over`](crate::wait::Turn::handed_over)); a lock held by
//! another owner then waits for its wake-up without asking Redis first, so that a hand-off
//! between clients costs two scripts (the release and the woken client's acquire), not three.
//!
//! The withdrawal outlives the wait, which borrows it: the wait (with the local queue place
//! it holds) is gone before the withdrawal asks whether other local tasks still wait, also
//! when the caller drops the future mid-wait.
//!
//! A primitive whose local waiters are not one queue (the semaphores keep one per permit
//! count, and count their waiting tasks themselves) uses [`ClientRegistration`] directly:
//! [`registering`](ClientRegistration::registering) before each attempt that may register,
//! [`unregistered`](ClientRegistration::unregistered) on a grant that took the client out,
//! and [`withdraw`](ClientRegistration::withdraw) when its last waiting task leaves.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::Toolkit;
use crate::client::Client;
use crate::error::Result;
use crate::locking::lock;
use crate::retry::SendGate;
use crate::script::ScriptCall;
use crate::wait::{Attempt, Turn, RECHECK};

/// A primitive whose waiting clients register in Redis.
pub trait Waitlist: Send + Sync + 'static {
    /// The client of the primitive's handle.
    fn client(&self) -> &Client;
    /// The call that takes this client out of the primitive's registry of waiting clients
    /// (passing on a wake-up it may have swallowed). [`ClientRegistration::withdraw`] builds
    /// it only once the client is to withdraw; a primitive whose call notes what it names
    /// overrides [`waiting_queue`](Self::waiting_queue), whose default builds it too.
    fn withdraw_call(&self) -> Result<ScriptCall>;

    /// The local queue of the primitive's waiting tasks ([`WaitSpec::queue`]), if it has
    /// one: a withdrawal is moot while tasks wait in it. By default, the first key of the
    /// withdrawal's call.
    ///
    /// [`WaitSpec::queue`]: crate::wait::WaitSpec::queue
    fn waiting_queue(&self) -> Option<String> {
        self.withdraw_call()
            .ok()
            .map(|call| call.first_key().to_owned())
    }
}

/// What an attempt's grant does with the client's registration as waiting, decided when the
/// attempt is sent (see [`Withdraw::attempt`]). Passed to the primitive's script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnGrant {
    /// Nothing: the client is not registered, and no other task of it waits.
    Leave,
    /// Take the client out: it may be registered (by an earlier attempt), and no other task of
    /// it waits.
    TakeOut,
    /// Keep the client registered, at the back of the registry (clients take turns), if the
    /// attempt may register: other tasks of it wait behind the caller, and the next of them
    /// waits for the wake-up this registration brings (see [`Attempt::AcquiredStillWaiting`]).
    Keep,
}

impl OnGrant {
    /// The script argument: `'0'`, `'1'` or `'2'`, in the order above.
    pub fn as_arg(self) -> &'static str {
        match self {
            OnGrant::Leave => "0",
            OnGrant::TakeOut => "1",
            OnGrant::Keep => "2",
        }
    }
}

/// Whether this client may be registered in Redis as waiting for one primitive: set when an
/// attempt that registers is sent, cleared by a grant (which takes the registration out,
/// unless it keeps it for the client's other waiting tasks) and by a withdrawal. Shared by every task of the client waiting for the primitive, and by the
/// withdrawals still being sent: get it with [`ClientRegistration::of`].
#[derive(Debug, Default)]
pub struct ClientRegistration {
    registered: AtomicBool,
    /// The order of this client's withdrawals and registering attempts on the wire.
    wire: Mutex<Wire>,
    /// Told when no withdrawal send is on the wire any more.
    wire_clear: tokio::sync::Notify,
}

/// What is on the wire between this client and the primitive's registry.
#[derive(Debug, Default)]
struct Wire {
    /// Registering attempts sent so far. A withdrawal decided before the latest of them is
    /// pointless (the newer wait owns the registration, and withdraws it when it ends), and
    /// would take that wait's registration out if it landed after it.
    attempts: u64,
    /// Withdrawal sends on the wire now: a registering attempt is not sent alongside one, as
    /// the two could land in either order (a withdrawal that met `MOVED` is sent again to
    /// the new node, over a connection the attempt does not share).
    sending: usize,
    /// Withdrawals not over yet (on the wire, retrying, or about to be sent): while one is,
    /// the client may still be registered, as it may never land.
    withdrawals: usize,
}

impl ClientRegistration {
    /// The registration of `client` for the primitive one of whose keys is `key` (cells are
    /// per type, so the key of the handle's own cell will do). It has a cell of its own
    /// among the client's shared cells, apart from the handle's: a withdrawal still being
    /// sent holds it, and a handle made meanwhile, after every other handle is gone, must
    /// find the same one.
    pub fn of(client: &Client, key: &str) -> Arc<Self> {
        client.local_cell(key)
    }

    /// Call right before sending an attempt that may register `client`: waits until no
    /// withdrawal send of the client is on the wire (at most a command timeout: a send takes
    /// no longer), then counts the attempt as registering from then on, since one cut off on
    /// the wire may still register the client. Returns whether the client may be registered
    /// already: an earlier attempt (of this wait or another task's) may have registered it,
    /// and no withdrawal is known to have undone that. Nothing changes if the future is
    /// dropped before it is ready.
    pub async fn registering(&self, client: &Client) -> bool {
        let give_up_at = Instant::now() + client.command_timeout();
        let withdrawing = self.registering_attempt(give_up_at).await;
        self.registered.swap(true, Ordering::AcqRel) || withdrawing
    }

    /// Whether the client may be registered: set by [`registering`](Self::registering) and
    /// [`registered_late`](Self::registered_late), cleared by a grant and by a withdrawal.
    pub fn may_be_registered(&self) -> bool {
        self.registered.load(Ordering::Acquire) || lock(&self.wire).withdrawals > 0
    }

    /// An attempt that got what it waited for took the client's registration out.
    pub fn unregistered(&self) {
        self.registered.store(false, Ordering::Release);
    }

    /// An attempt whose caller went away registered the client after all (its late reply
    /// says so), so a withdrawal is owed unless another task waits.
    pub fn registered_late(&self) {
        self.registered.store(true, Ordering::Release);
    }

    /// Withdraws the client from `list`'s registry of waiting clients in the background, if it
    /// may be registered and `others_wait` (asked of `list`) says no other task of the client
    /// waits: those keep the registration, and the last of them to leave withdraws. The withdrawal is retried for a few command timeouts at most, and only until
    /// the client sends a registering attempt again (see [`registering`](Self::registering)),
    /// which makes it pointless and, landing after that attempt, harmful. If it fails, the
    /// entry lapses by itself, or is skipped by the next wake-up once nobody listens on it.
    pub fn withdraw<L: Waitlist + ?Sized>(
        self: &Arc<Self>,
        list: &L,
        others_wait: impl FnOnce(&L) -> bool,
    ) {
        // Most waits end with the client not registered (every uncontended acquire): they
        // need no call, so none is built.
        if !self.registered.load(Ordering::Acquire) {
            return;
        }
        let client = list.client();
        // Read first: a registering attempt sent from here on makes this withdrawal moot.
        let attempts = lock(&self.wire).attempts;
        if others_wait(list) || !self.registered.swap(false, Ordering::AcqRel) {
            return;
        }
        let Ok(call) = list.withdraw_call() else {
            return;
        };
        let retry = client.retry_for_lease(Instant::now(), Some(client.command_timeout()));
        let gate = WithdrawalGate::new(self.clone(), attempts);
        client.spawn_release_gated(call, retry, Arc::new(gate));
    }

    /// Waits until no withdrawal send is on the wire (at most until `give_up_at`), then
    /// counts a registering attempt as sent. Returns whether a withdrawal is not over yet.
    async fn registering_attempt(&self, give_up_at: Instant) -> bool {
        loop {
            let clear = self.wire_clear.notified();
            tokio::pin!(clear);
            clear.as_mut().enable();
            {
                let mut wire = lock(&self.wire);
                if wire.sending == 0 || Instant::now() >= give_up_at {
                    wire.attempts = wire.attempts.wrapping_add(1);
                    return wire.withdrawals > 0;
                }
            }
            let _ = tokio::time::timeout_at(give_up_at.into(), clear).await;
        }
    }
}

/// One withdrawal's sends (see [`SendGate`]): each goes only while no registering attempt
/// was sent after the wait's last one, and is counted on the wire until it ends.
struct WithdrawalGate {
    registration: Arc<ClientRegistration>,
    /// The count of registering attempts the withdrawal was decided at.
    attempts: u64,
}

impl WithdrawalGate {
    fn new(registration: Arc<ClientRegistration>, attempts: u64) -> Self {
        lock(&registration.wire).withdrawals += 1;
        WithdrawalGate {
            registration,
            attempts,
        }
    }
}

impl SendGate for WithdrawalGate {
    fn send_begins(&self) -> bool {
        let mut wire = lock(&self.registration.wire);
        if wire.attempts != self.attempts {
            return false;
        }
        wire.sending += 1;
        true
    }

    fn send_ended(&self) {
        let mut wire = lock(&self.registration.wire);
        wire.sending = wire.sending.saturating_sub(1);
        if wire.sending == 0 {
            drop(wire);
            self.registration.wire_clear.notify_waiters();
        }
    }
}

impl Drop for WithdrawalGate {
    fn drop(&mut self) {
        let mut wire = lock(&self.registration.wire);
        wire.withdrawals = wire.withdrawals.saturating_sub(1);
    }
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

    /// Sends one attempt of this wait, `attempt(withdraw, on_grant)`, and settles its outcome
    /// (see [`Settle::outcome`]); `turn` is the waiting loop's, and `on_grant` says what a
    /// grant does with the client's registration. The `withdraw` passed on is this one, with
    /// a [`registration`](Self::registration) of zero for a first try made while no other
    /// task of the client waits, which must not register the client ([`Turn::first_try`]).
    /// An earlier attempt (of this wait or another task's) may have registered the client,
    /// which a withdrawal not over yet may not have undone: the attempt then keeps the
    /// client's place, and takes it out if granted, unless other tasks of the client wait
    /// behind the caller ([`OnGrant::Keep`]). An attempt that may register waits until no
    /// withdrawal of the client is on the wire (at most a command timeout: a send takes no
    /// longer), and counts as registering from then on, since one cut off on the wire may
    /// still register the client. Nothing is sent, and nothing changes, if the future is
    /// dropped before that.
    pub fn attempt<T, F, Fut>(
        &self,
        turn: Turn,
        attempt: F,
    ) -> impl Future<Output = Result<Attempt<T>>> + Send + use<L, T, F, Fut>
    where
        T: Send,
        F: FnOnce(&Withdraw<L>, OnGrant) -> Fut + Send,
        Fut: Future<Output = Result<Attempt<T>>> + Send,
    {
        let mut withdraw = self.clone();
        if turn.first_try && !turn.others_waiting {
            // Nobody of the client subscribed yet: it must not register the client (see
            // `Turn::first_try`). With other tasks queued, their head listens.
            withdraw.registration = Duration::ZERO;
        }
        async move {
            let earlier = if withdraw.registration.is_zero() {
                withdraw.client.may_be_registered()
            } else {
                withdraw.client.registering(withdraw.list.client()).await
            };
            let on_grant = match (turn.others_waiting, earlier) {
                (true, _) => OnGrant::Keep,
                (false, true) => OnGrant::TakeOut,
                (false, false) => OnGrant::Leave,
            };
            lock(&withdraw.state).in_flight = true;
            let settle = withdraw.settle(on_grant);
            settle.outcome(attempt(&withdraw, on_grant).await)
        }
    }

    /// What an attempt's outcome must settle (see [`Settle::outcome`]): made before the
    /// attempt's future, which it outlives no more than the wait.
    fn settle(&self, on_grant: OnGrant) -> Settle {
        Settle {
            state: self.state.clone(),
            client: self.client.clone(),
            on_grant,
        }
    }

    /// An attempt whose caller went away got its reply (or will never get one): `acquired`
    /// when it got the primitive, whose grant then did what `on_grant` said with the
    /// registration (the one the attempt was sent with). For the attempt's undo.
    pub fn abandoned_attempt_ended(&self, acquired: bool, on_grant: OnGrant) {
        let mut state = lock(&self.state);
        state.in_flight = false;
        if acquired && on_grant != OnGrant::Keep {
            self.client.unregistered();
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
        self.client.withdraw(&*self.list, |list| {
            list.waiting_queue()
                .is_some_and(|queue| list.client().has_local_waiters(&queue))
        });
    }
}

/// What one attempt's outcome settles in its wait and the client's registration.
#[derive(Debug)]
pub struct Settle {
    state: Arc<Mutex<WaitState>>,
    client: Arc<ClientRegistration>,
    /// What a grant does with the registration.
    on_grant: OnGrant,
}

impl Settle {
    /// Takes an attempt's `outcome`: a grant took the registration out, unless it kept it for
    /// the client's other waiting tasks ([`OnGrant::Keep`]); a busy primitive
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
                if self.on_grant != OnGrant::Keep {
                    self.client.unregistered();
                }
                Ok(Attempt::Acquired(held))
            }
            Ok(Attempt::AcquiredStillWaiting(held)) => {
                if self.on_grant != OnGrant::Keep {
                    self.client.unregistered();
                }
                Ok(Attempt::AcquiredStillWaiting(held))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A registering attempt is not sent while a withdrawal's send is on the wire: the two
    /// could land in either order, and a withdrawal landing last would take out the new
    /// registration. It goes once the send is over (or at its give-up time), and then makes
    /// the withdrawal's later sends pointless.
    #[tokio::test]
    async fn a_registering_attempt_waits_for_a_withdrawal_send_on_the_wire() {
        let registration = Arc::new(ClientRegistration::default());
        let gate = WithdrawalGate::new(registration.clone(), 0);
        assert!(gate.send_begins());
        let far = Instant::now() + Duration::from_secs(60);
        let mut attempt = Box::pin(registration.registering_attempt(far));
        tokio::select! {
            biased;
            _ = &mut attempt => panic!("a registering attempt went out alongside a withdrawal"),
            _ = tokio::time::sleep(Duration::from_millis(50)) => {}
        }
        gate.send_ended();
        let withdrawing = tokio::time::timeout(Duration::from_secs(10), attempt)
            .await
            .expect("the attempt goes once the send is over");
        assert!(withdrawing, "the withdrawal is not over: it may still land");
        assert!(
            !gate.send_begins(),
            "the withdrawal is sent again after a registering attempt"
        );
        drop(gate);
        let at_once = Instant::now() + Duration::from_secs(60);
        assert!(!registration.registering_attempt(at_once).await);
    }

    /// A grant leaves the client's registration to its other waiting tasks when it kept it
    /// for them (`OnGrant::Keep`); otherwise it took the registration out. The flag decides
    /// whether the last task to leave withdraws the client.
    #[test]
    fn a_grant_that_kept_the_registration_leaves_the_client_registered() {
        for on_grant in [OnGrant::Leave, OnGrant::TakeOut, OnGrant::Keep] {
            let kept = on_grant == OnGrant::Keep;
            let registration = Arc::new(ClientRegistration::default());
            registration.registered_late();
            let settle = Settle {
                state: Arc::default(),
                client: registration.clone(),
                on_grant,
            };
            assert!(settle.outcome(Ok(Attempt::Acquired(()))).is_ok());
            assert_eq!(
                registration.may_be_registered(),
                kept,
                "answered, {on_grant:?}"
            );

            registration.registered_late();
            let settle = Settle {
                state: Arc::default(),
                client: registration.clone(),
                on_grant,
            };
            let outcome = settle.outcome(Ok(Attempt::AcquiredStillWaiting(())));
            assert!(matches!(outcome, Ok(Attempt::AcquiredStillWaiting(()))));
            assert_eq!(
                registration.may_be_registered(),
                kept,
                "handed on, {on_grant:?}"
            );
        }
    }
}
