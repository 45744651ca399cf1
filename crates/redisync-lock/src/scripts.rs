//! The lock's scripts and the decoding of their replies, side by side.

use std::time::Duration;

use redisync_core::toolkit::{Error, IntOrList, Result, ScriptCall};

redisync_core::toolkit::lua_script! {
    /// Takes a lock, or re-enters it, or registers the client as waiting
    /// (`lua/lock_acquire.lua`).
    pub(crate) struct Acquire = new "lock_acquire" for "lock"
        after ["publish_prelude", "clock_prelude", "lock_prelude", "wake_prelude",
            "lock_hand_over_prelude"] {
        keys { hash, fence, attempt_record, waiters }
        args { owner: &'a str, lease_ms: u64, attempt: &'a str }
        // A first try's: no registration, no offer, nothing to take over.
        optional {
            left_off_when |call: &Self| {
                call.registration_ms == 0
                    && call.on_grant == "0"
                    && call.hand_over == "0"
                    && call.offered.is_empty()
            };
            keys { offers }
            args {
                channel: &'a str,
                registration_ms: u64,
                on_grant: &'a str,
                hand_over: &'a str,
                offered: &'a str,
            }
        }
    }
}

redisync_core::toolkit::lua_script! {
    /// Gives back one attempt's hold and wakes the next waiting client, or hands it the lock
    /// (`lua/lock_release.lua`).
    pub(crate) struct Release = new "lock_release" for "lock"
        after ["publish_prelude", "clock_prelude", "lock_prelude", "wake_prelude",
            "lock_hand_over_prelude"] {
        keys { hash, waiters, offers, fence }
        args { attempt: &'a str }
        // A guard's release keeps no record.
        optional {
            left_off_when |call: &Self| call.remember_ms == 0;
            keys { attempt_record }
            args { remember_ms: u64 }
        }
    }
}

redisync_core::toolkit::lua_script! {
    /// Takes a client out of the lock's waiters (`lua/lock_withdraw.lua`).
    pub(crate) struct Withdraw = new "lock_withdraw" for "lock"
        after ["publish_prelude", "clock_prelude", "lock_prelude", "wake_prelude",
            "lock_hand_over_prelude"] {
        keys { hash, waiters, offers, fence }
        args { channel: &'a str, offered: &'a str }
    }
}

redisync_core::toolkit::lua_script! {
    /// Frees the lock whoever holds it (`lua/lock_force_unlock.lua`).
    pub(crate) struct ForceUnlock = new "lock_force_unlock" for "lock"
        after ["publish_prelude", "lock_prelude", "wake_prelude"] {
        keys { hash, waiters }
        args { lost_notices: &'a str }
    }
}

redisync_core::toolkit::lua_script! {
    /// The fair lock's acquire: takes the lock in queue order, or keeps the waiter's place
    /// (`lua/fair_lock_acquire.lua`).
    pub(crate) struct FairAcquire = new "fair_lock_acquire" for "fair_lock"
        after ["publish_prelude", "lock_prelude", "fair_lock_prelude"] {
        keys { hash, fence, attempt_record, queue, deadlines }
        args {
            owner: &'a str,
            lease_ms: u64,
            waiter: &'a str,
            place_ms: u64,
            wake_prefix: &'a str,
        }
    }
}

redisync_core::toolkit::lua_script! {
    /// Gives back a fair waiter's hold and place (`lua/fair_lock_release.lua`).
    pub(crate) struct FairRelease = new "fair_lock_release" for "fair_lock"
        after ["publish_prelude", "clock_prelude", "lock_prelude", "fair_lock_prelude"] {
        keys { hash, queue, deadlines }
        args { waiter: &'a str, wake_prefix: &'a str }
        // A guard's release keeps no record.
        optional {
            left_off_when |call: &Self| call.remember_ms == 0;
            keys { attempt_record }
            args { remember_ms: u64 }
        }
    }
}

redisync_core::toolkit::lua_script! {
    /// Frees the fair lock whoever holds it (`lua/fair_lock_force_unlock.lua`).
    pub(crate) struct FairForceUnlock = new "fair_lock_force_unlock" for "fair_lock"
        after ["publish_prelude", "clock_prelude", "lock_prelude", "fair_lock_prelude"] {
        keys { hash, queue, deadlines }
        args { wake_prefix: &'a str, lost_notices: &'a str }
    }
}

redisync_core::toolkit::lua_script! {
    /// Fixes a hold's lease (`lua/lock_set_lease.lua`).
    pub(crate) struct SetLease = new "lock_set_lease" for "lock" {
        keys { hash }
        args { owner: &'a str, token: u64, lease_ms: u64, attempt: &'a str }
    }
}

redisync_core::toolkit::lua_script! {
    /// The lock's remaining lease and the asking owner's hold count; reads only
    /// (`lua/lock_status.lua`).
    pub(crate) struct Status = read_only "lock_status" for "lock" {
        keys { hash }
        args { owner: &'a str }
    }
}

redisync_core::toolkit::lua_script! {
    /// Acquires several locks or none (`lua/lock_acquire_all.lua`); its keys and owners repeat
    /// per lock, so its call is built by [`acquire_all`].
    pub(crate) static ACQUIRE_ALL = new "lock_acquire_all" for "lock" after ["lock_prelude"];
}

redisync_core::toolkit::lua_script! {
    /// The watchdog's batch renewal of lock holds (`lua/lock_renew.lua`); one hold's part is a
    /// [`RenewedHold`].
    pub(crate) static RENEW = new "lock_renew" for "lock";
}

/// One lock of an [`acquire_all`] request.
pub(crate) struct OneOfAll<'a> {
    pub(crate) hash: &'a str,
    pub(crate) fence: &'a str,
    pub(crate) attempt_record: String,
    pub(crate) waiters: &'a str,
    pub(crate) owner: &'a str,
}

/// The `lock_acquire_all` request for `locks` under attempt id `attempt`, each lock with its
/// hash, fence, attempt record, registry of waiting clients and owner, in the script's order.
pub(crate) fn acquire_all(locks: &[OneOfAll<'_>], lease_ms: u64, attempt: &str) -> ScriptCall {
    let mut call = ScriptCall::new(&ACQUIRE_ALL);
    for lock in locks {
        call = call
            .key(lock.hash)
            .key(lock.fence)
            .key(lock.attempt_record.as_str())
            .key(lock.waiters);
    }
    call = call.arg(lease_ms).arg(attempt);
    for lock in locks {
        call = call.arg(lock.owner);
    }
    call
}

/// One hold's part of a [`RENEW`] batch (the watchdog's convention: its keys, then its
/// arguments).
pub(crate) struct RenewedHold<'a> {
    pub(crate) hash: &'a str,
    pub(crate) owner: &'a str,
    pub(crate) token: u64,
    pub(crate) attempt: &'a str,
}

impl RenewedHold<'_> {
    /// The hold's keys: its lock hash.
    pub(crate) fn keys(&self) -> Vec<String> {
        vec![self.hash.to_owned()]
    }

    /// The hold's arguments: owner, fencing token and attempt id.
    pub(crate) fn args(&self) -> Vec<String> {
        vec![
            self.owner.to_owned(),
            self.token.to_string(),
            self.attempt.to_owned(),
        ]
    }
}

/// Reply of `lock_acquire` and `fair_lock_acquire`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AcquireReply {
    Acquired {
        token: u64,
    },
    Busy {
        pttl: Option<Duration>,
    },
    /// The attempt had been given back before Redis ran it.
    GivenBack,
}

impl AcquireReply {
    /// A grant is the token alone, an integer; the other answers are tables.
    pub(crate) fn decode(reply: &IntOrList) -> Result<Self> {
        match reply {
            IntOrList::Int(token) if *token > 0 => Ok(AcquireReply::Acquired {
                token: *token as u64,
            }),
            IntOrList::List(answer) => match answer[..] {
                [0, pttl] => Ok(AcquireReply::Busy {
                    pttl: u64::try_from(pttl).ok().map(Duration::from_millis),
                }),
                [-1] => Ok(AcquireReply::GivenBack),
                _ => Err(Error::WrongType),
            },
            IntOrList::Int(_) => Err(Error::WrongType),
        }
    }
}

/// Reply of `lock_acquire_all`: the tokens of every lock, or `None` when one was busy.
pub(crate) fn decode_acquire_all(reply: &[i64], locks: usize) -> Result<Option<Vec<u64>>> {
    match reply {
        [1, tokens @ ..] if tokens.len() == locks && tokens.iter().all(|t| *t > 0) => {
            Ok(Some(tokens.iter().map(|t| *t as u64).collect()))
        }
        [0, _, _] | [-1] => Ok(None),
        _ => Err(Error::WrongType),
    }
}

/// Reply of `lock_release`.
pub(crate) fn decode_release(reply: i64) -> Result<()> {
    match reply {
        0 | 1 => Ok(()),
        _ => Err(Error::NotOwner),
    }
}

/// Reply of `lock_status`: remaining lease (None when free) and the asking owner's hold count.
pub(crate) fn decode_status(reply: &[i64]) -> Result<(Option<Duration>, u32)> {
    match reply {
        [-2, _] => Ok((None, 0)),
        [pttl, count] => {
            // Every lock redisync writes expires; -1 (no expiry) means foreign data.
            let remaining =
                Duration::from_millis(u64::try_from(*pttl).map_err(|_| Error::WrongType)?);
            let count = u32::try_from(*count).map_err(|_| Error::WrongType)?;
            Ok((Some(remaining), count))
        }
        _ => Err(Error::WrongType),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redisync_test_harness::script_text::functions_in_front;

    /// An uncontended cycle's calls make only the prelude functions they run: those of the
    /// paths that wait, queue, re-enter, take over or wake are made after the common path
    /// returned.
    #[test]
    fn the_common_paths_make_only_the_functions_they_call() {
        assert_eq!(
            functions_in_front(Acquire::script().text(), "-- lock_acquire:"),
            ["lock_holder", "holder_and_waiting", "grant"]
        );
        assert_eq!(
            functions_in_front(Release::script().text(), "-- lock_release:"),
            ["release_hold", "recorded_outcome", "record_outcome"]
        );
        assert_eq!(
            functions_in_front(FairAcquire::script().text(), "-- fair_lock_acquire:"),
            ["lock_holder", "holder_and_waiting", "grant"]
        );
        assert_eq!(
            functions_in_front(FairRelease::script().text(), "-- fair_lock_release:"),
            ["release_hold", "recorded_outcome", "record_outcome"]
        );
    }

    #[test]
    fn replies_decode() {
        let table = |items: &[i64]| IntOrList::List(items.to_vec());
        assert_eq!(
            AcquireReply::decode(&IntOrList::Int(7)).ok(),
            Some(AcquireReply::Acquired { token: 7 })
        );
        assert_eq!(
            AcquireReply::decode(&table(&[0, 1500])).ok(),
            Some(AcquireReply::Busy {
                pttl: Some(Duration::from_millis(1500))
            })
        );
        assert_eq!(
            AcquireReply::decode(&table(&[0, -1])).ok(),
            Some(AcquireReply::Busy { pttl: None })
        );
        // A token is never 0 or negative, and a grant is never a table.
        assert!(AcquireReply::decode(&IntOrList::Int(0)).is_err());
        assert!(AcquireReply::decode(&table(&[1, 7, 1])).is_err());
        assert!(AcquireReply::decode(&table(&[])).is_err());
        assert!(decode_release(-1).is_err());
        assert_eq!(
            decode_acquire_all(&[1, 4, 9], 2).ok(),
            Some(Some(vec![4, 9]))
        );
        assert_eq!(decode_acquire_all(&[0, 2, 1500], 2).ok(), Some(None));
        assert!(decode_acquire_all(&[1, 4], 2).is_err());
        assert!(decode_acquire_all(&[1, 4, 0], 2).is_err());
        assert!(decode_release(0).is_ok());
        assert_eq!(decode_status(&[-2, 0]).ok(), Some((None, 0)));
        assert!(decode_status(&[10, -3]).is_err());
        assert!(decode_status(&[-1, 1]).is_err());
        assert_eq!(
            AcquireReply::decode(&table(&[-1])).ok(),
            Some(AcquireReply::GivenBack)
        );
    }
}
