//! Hand-overs in the wake-up: the client's side of `lua/lock_hand_over_prelude.lua`.
//!
//! When the head of this client's local queue finds the plain lock taken, its acquire offers
//! to take the lock in its wake-up: the release that frees the lock may then grant it to that
//! attempt (with a short lease, [`hand_over_lease`]) and say so in the message, and the
//! woken task holds the lock without a request of its own; the watchdog lengthens the lease
//! before half of it is over.
//!
//! A task that waits with a fixed lease offers too, but does not take the hold from the
//! message (its lease is not the watchdog's, which would lengthen the short one): the release
//! keeps the lock for it, and its next attempt, made on the wake-up, takes the hold over with
//! its own lease. Either way no first try of another client gets in between.
//!
//! [`Offers`] keeps the offers no task has taken yet. What a caller may rely on:
//!
//! * A hold is taken from a message ([`Offers::claim`]) only by the owner that offered, only
//!   once, only if the offering request's own reply said it found the lock taken (so its
//!   offer was written; an attempt whose outcome is unknown is given back, never claimed), only
//!   if no request has named the offer since, and only while the lease the hand-over gave it
//!   is sure to run for a while yet, counted from when the offering request was *sent* (a
//!   lower bound on when Redis granted it): the client never believes it holds longer than
//!   Redis does.
//! * An offer no task took is named ([`Offers::name`]) by the next acquire of the client's
//!   waiting head, which takes a hold handed over to it (if it is the lock's one hold; it is
//!   given back if its owner re-entered it meanwhile), and by the client's withdrawal, which
//!   gives it back. Only a hand-over's hold is ever taken or given back this way (its field
//!   in the lock's hash says so), never one an attempt got by its own request. Once named, an
//!   offer is never claimed: the hold may have been taken over or given back meanwhile.
//! * A hand-over belongs to the wait that offered: only the attempts of the waiting head name
//!   offers. A first try, a `try_lock` among them, names none, so it never takes a lock
//!   handed to a waiting task (it finds the lock taken, as tokio's `Mutex::try_lock` does
//!   while the mutex is handed to a waiter), and it leaves the offer claimable from the
//!   message.
//! * An acquire that was granted under an id it had offered with removes the offer
//!   ([`Offers::granted`]): that id is now a guard's hold.
//!
//! Offers are forgotten only when claimed, granted, or when more than [`KEPT`] are kept (the
//! oldest first). An offer is handed the lock only while it is its client's latest in Redis,
//! and each acquire of the head replaces it, so a forgotten one was almost surely replaced; if
//! not, its hold expires by itself after the hand-over lease.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use redisync_core::toolkit::{Client, RECHECK};

/// The lease a hand-over to a task of `client` grants, until the watchdog lengthens it: the
/// re-check period of a waiting client, so that a designee that cannot act stalls the lock
/// no longer than a swallowed wake-up stalls the others (see
/// `lua/lock_hand_over_prelude.lua`), or the client's watchdog lease if that is shorter.
pub(crate) fn hand_over_lease(client: &Client) -> Duration {
    RECHECK.min(client.watchdog_timeout())
}

/// How long after it was made an offer is still honoured: a waiting head asks again (and so
/// offers again) at least once per re-check period however long the hold it waits for lasts,
/// and this leaves a whole period more for a late ask on a loaded machine. A client that
/// crashed within this long of its last ask may be handed the lock, once, which then stalls
/// for one hand-over lease at most. (An offer older than a few quarters of the hand-over
/// lease is not claimed from the message, which counts the lease from the offer's send: its
/// task takes the hold over with one request instead.)
pub(crate) const OFFER_STANDS: Duration = RECHECK.saturating_mul(2);

/// A hold is taken from a message only if at least this share (one in so many) of its
/// hand-over lease is surely left: the watchdog lengthens it once half of what is left has
/// passed, which must leave it time for a request.
const LEAST_LEFT: u32 = 4;

/// Offers kept at most; older ones are forgotten (an offer is only ever granted while it is
/// its client's latest in Redis, so a forgotten one was almost surely replaced).
const KEPT: usize = 4;

/// One offer: the acquire attempt that made it, its owner, when it was sent, and the
/// hand-over lease it asked for.
#[derive(Debug)]
struct Offer {
    attempt: String,
    owner: String,
    sent_at: Instant,
    lease: Duration,
    /// The offering request's reply said the lock was taken: the offer is in Redis.
    confirmed: bool,
    /// A request named the offer (see [`Offers::name`]).
    named: bool,
    /// Its task takes the hold from the message (its lease is the watchdog's); a fixed-lease
    /// task's offer is only ever taken over by a request.
    from_message: bool,
}

/// A hold handed over in a wake-up, taken by its owner.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Claimed {
    /// The offering attempt: the hold's id.
    pub(crate) attempt: String,
    pub(crate) token: u64,
    /// When the offering request was sent: the hand-over lease runs at least from then.
    pub(crate) sent_at: Instant,
    /// The hand-over lease.
    pub(crate) lease: Duration,
}

/// The offers of this client's waiting tasks for one lock that no task has taken yet.
#[derive(Debug, Default)]
pub(crate) struct Offers(Mutex<Vec<Offer>>);

impl Offers {
    fn offers(&self) -> std::sync::MutexGuard<'_, Vec<Offer>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// An acquire of `owner` under `attempt`, about to be sent, offers to take the lock in
    /// its wake-up, with a hand-over lease of `lease`, if it finds it taken; `from_message`:
    /// its task may take the hold from the message (see [`Offers::claim`]).
    pub(crate) fn offering(
        &self,
        attempt: &str,
        owner: &str,
        sent_at: Instant,
        lease: Duration,
        from_message: bool,
    ) {
        let mut offers = self.offers();
        if offers.len() >= KEPT {
            offers.remove(0);
        }
        offers.push(Offer {
            attempt: attempt.to_owned(),
            owner: owner.to_owned(),
            sent_at,
            lease,
            confirmed: false,
            named: false,
            from_message,
        });
    }

    /// The offering request under `attempt` found the lock taken: its offer is in Redis.
    pub(crate) fn confirmed(&self, attempt: &str) {
        if let Some(offer) = self.offers().iter_mut().find(|o| o.attempt == attempt) {
            offer.confirmed = true;
        }
    }

    /// The acquire under `attempt` was granted (it found the lock free, or took a hand-over
    /// over): its id is a guard's hold from now on.
    pub(crate) fn granted(&self, attempt: &str) {
        self.offers().retain(|offer| offer.attempt != attempt);
    }

    /// Takes the hold that `message` hands over, if it is for an offer of `owner` that no task
    /// took and its lease is surely not nearly over.
    pub(crate) fn claim(&self, message: &str, owner: &str) -> Option<Claimed> {
        let (attempt, token) = parse(message)?;
        let mut offers = self.offers();
        let at = offers.iter().position(|offer| offer.attempt == attempt)?;
        let offer = &offers[at];
        let lapses = offer.sent_at.checked_add(offer.lease)?;
        let left = lapses.saturating_duration_since(Instant::now());
        let claimable = offer.confirmed && !offer.named && offer.from_message;
        if !claimable || offer.owner != owner || left < offer.lease / LEAST_LEFT {
            return None;
        }
        let offer = offers.remove(at);
        Some(Claimed {
            attempt: offer.attempt,
            token,
            sent_at: offer.sent_at,
            lease: offer.lease,
        })
    }

    /// The offers for a request to name (ids separated by spaces): an acquire of the waiting
    /// head takes over a hold handed over to one of them, a withdrawal gives it back. They are
    /// kept for later requests to name (a hand-over may still come to one, and a withdrawal
    /// may not be sent after all), but are never claimed from here on.
    pub(crate) fn name(&self) -> String {
        let mut offers = self.offers();
        for offer in offers.iter_mut() {
            offer.named = true;
        }
        join(&offers)
    }
}

fn join(offers: &[Offer]) -> String {
    let mut ids = String::new();
    for offer in offers {
        if !ids.is_empty() {
            ids.push(' ');
        }
        ids.push_str(&offer.attempt);
    }
    ids
}

/// Reads a hand-over message, `g <attempt> <token>`.
fn parse(message: &str) -> Option<(&str, u64)> {
    let mut parts = message.strip_prefix("g ")?.split(' ');
    let attempt = parts.next().filter(|a| !a.is_empty())?;
    let token = parts.next()?.parse().ok().filter(|t| *t > 0)?;
    parts.next().is_none().then_some((attempt, token))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Duration = Duration::from_secs(1);

    #[test]
    fn messages_parse_strictly() {
        assert_eq!(parse("g c:7 42"), Some(("c:7", 42)));
        for bad in [
            "w",
            "g",
            "g c:7",
            "g c:7 0",
            "g c:7 -1",
            "g c:7 42 1",
            "g  42",
            "x c:7 4",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn only_the_offering_owner_claims_only_once() {
        let offers = Offers::default();
        let sent = Instant::now();
        offers.offering("c:7", "c:1", sent, LEASE, true);
        assert_eq!(offers.claim("g c:7 42", "c:1"), None, "not confirmed yet");
        offers.confirmed("c:7");
        assert_eq!(offers.claim("g c:7 42", "c:2"), None, "another owner");
        assert_eq!(offers.claim("g c:8 42", "c:1"), None, "another attempt");
        let claimed = offers.claim("g c:7 42", "c:1").expect("its own offer");
        assert_eq!((claimed.attempt.as_str(), claimed.token), ("c:7", 42));
        assert_eq!((claimed.sent_at, claimed.lease), (sent, LEASE));
        assert_eq!(offers.claim("g c:7 42", "c:1"), None, "twice");
        assert_eq!(offers.name(), "");
    }

    #[test]
    fn a_hand_over_whose_lease_may_be_nearly_over_is_not_claimed() {
        let offers = Offers::default();
        let Some(long_ago) = Instant::now().checked_sub(LEASE - LEASE / LEAST_LEFT / 2) else {
            return; // a clock this young cannot say
        };
        offers.offering("c:7", "c:1", long_ago, LEASE, true);
        offers.confirmed("c:7");
        assert_eq!(offers.claim("g c:7 42", "c:1"), None);
        assert_eq!(
            offers.name(),
            "c:7",
            "left for the next acquire to take over"
        );
    }

    #[test]
    fn named_offers_are_never_claimed_and_granted_ones_never_named() {
        let offers = Offers::default();
        offers.offering("c:7", "c:1", Instant::now(), LEASE, true);
        offers.offering("c:8", "c:1", Instant::now(), LEASE, true);
        offers.confirmed("c:8");
        assert_eq!(offers.name(), "c:7 c:8");
        offers.confirmed("c:8");
        assert_eq!(
            offers.claim("g c:8 42", "c:1"),
            None,
            "after a request named it"
        );
        assert_eq!(offers.name(), "c:7 c:8", "still named by later requests");
        offers.offering("c:9", "c:1", Instant::now(), LEASE, true);
        offers.granted("c:9");
        assert_eq!(offers.name(), "c:7 c:8", "granted: a guard's hold");
    }

    #[test]
    fn a_fixed_lease_tasks_offer_is_never_claimed_from_the_message() {
        let offers = Offers::default();
        offers.offering("c:7", "c:1", Instant::now(), LEASE, false);
        offers.confirmed("c:7");
        assert_eq!(offers.claim("g c:7 42", "c:1"), None);
        assert_eq!(offers.name(), "c:7", "left for the head's next acquire");
    }

    #[test]
    fn only_the_latest_offers_are_kept() {
        let offers = Offers::default();
        for n in 0..6 {
            offers.offering(&format!("c:{n}"), "c:1", Instant::now(), LEASE, true);
        }
        assert_eq!(offers.name(), "c:2 c:3 c:4 c:5");
    }
}
