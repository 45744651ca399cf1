//! The semaphores' scripts, each with its typed call ([`redisync_core::lua_script!`]), side
//! by side with the decoding of their replies.
//!
//! A script that frees permits or registers waiters starts with the waiters registry's
//! preludes (`wake_prelude.lua`, `semaphore_wake_prelude.lua`); one that reads the semaphore,
//! with its own (`semaphore_prelude.lua` or `expirable_semaphore_prelude.lua`).

use std::time::Duration;

use redisync_core::toolkit::{Error, IntOrList, Result};

redisync_core::toolkit::lua_script! {
    /// Initialises a classic semaphore that has no permits yet, starting a generation
    /// (`lua/semaphore_try_set_permits.lua`).
    pub(crate) struct TrySetPermits = new "semaphore_try_set_permits" for "semaphore"
        after ["publish_prelude", "wake_prelude", "semaphore_wake_prelude"] {
        keys { permits, generation, waiters }
        args { initial: i64, new_generation: &'a str }
    }
}

redisync_core::toolkit::lua_script! {
    /// Adds (or removes) permits, creating the semaphore if needed; also the release of permits
    /// taken without a permit object (`lua/semaphore_add_permits.lua`).
    pub(crate) struct AddPermits = new "semaphore_add_permits" for "semaphore"
        after ["publish_prelude", "wake_prelude", "semaphore_wake_prelude"] {
        keys { permits, generation, waiters }
        args { added: i64, new_generation: &'a str }
    }
}

redisync_core::toolkit::lua_script! {
    /// Takes every available permit (`lua/semaphore_drain_permits.lua`).
    pub(crate) struct DrainPermits = new "semaphore_drain_permits" for "semaphore" {
        keys { permits }
        args {}
    }
}

redisync_core::toolkit::lua_script! {
    /// The available permits; reads only, so it never waits for replicas
    /// (`lua/semaphore_available_permits.lua`).
    pub(crate) struct AvailablePermits = read_only "semaphore_available_permits"
        for "semaphore" {
        keys { permits }
        args {}
    }
}

redisync_core::toolkit::lua_script! {
    /// Takes `n` permits at once, or none (`lua/semaphore_acquire.lua`).
    pub(crate) struct Acquire = new "semaphore_acquire" for "semaphore"
        after ["publish_prelude", "wake_prelude", "semaphore_wake_prelude", "semaphore_prelude"] {
        keys { permits, attempt_record, generation }
        args { n: i64 }
        // A first try's: it does not register.
        optional {
            left_off_when |call: &Self| call.channel.is_empty();
            keys { waiters }
            args { channel: &'a str, requeue: bool, registry_ms: u64 }
        }
    }
}

redisync_core::toolkit::lua_script! {
    /// Gives back the permits a permit object holds (`lua/semaphore_release.lua`).
    pub(crate) struct Release = new "semaphore_release" for "semaphore"
        after ["publish_prelude", "wake_prelude", "semaphore_wake_prelude", "semaphore_prelude"] {
        keys { permits, attempt_record, generation, waiters }
        args { n: i64 }
    }
}

redisync_core::toolkit::lua_script! {
    /// Undoes an acquire attempt whose caller went away (`lua/semaphore_give_back.lua`).
    pub(crate) struct GiveBack = new "semaphore_give_back" for "semaphore"
        after ["publish_prelude", "wake_prelude", "semaphore_wake_prelude", "semaphore_prelude"] {
        keys { permits, attempt_record, generation, waiters }
        args { n: i64, record_ms: u64, withdraw_channel: &'a str }
    }
}

redisync_core::toolkit::lua_script! {
    /// Takes a client out of the waiters, passing on a wake-up it may have been sent
    /// (`lua/semaphore_withdraw.lua`).
    pub(crate) struct Withdraw = new "semaphore_withdraw" for "semaphore"
        after ["publish_prelude", "wake_prelude", "semaphore_wake_prelude", "semaphore_prelude"] {
        keys { permits, generation, waiters }
        args { channel: &'a str }
    }
}

redisync_core::toolkit::lua_script! {
    /// Drops the record of permits a permit object keeps taken (`lua/semaphore_forget.lua`).
    pub(crate) struct Forget = new "semaphore_forget" for "semaphore"
        after ["semaphore_prelude"] {
        keys { attempt_record }
        args {}
    }
}

redisync_core::toolkit::lua_script! {
    /// Removes a classic semaphore, ending its generation (`lua/semaphore_delete.lua`).
    pub(crate) struct Delete = new "semaphore_delete" for "semaphore"
        after ["semaphore_prelude"] {
        keys { permits, generation }
        args {}
    }
}

redisync_core::toolkit::lua_script! {
    /// Initialises the pool of an expirable semaphore that does not exist yet
    /// (`lua/expirable_semaphore_try_set_permits.lua`).
    pub(crate) struct XTrySetPermits = new "expirable_semaphore_try_set_permits"
        for "expirable_semaphore"
        after ["publish_prelude", "wake_prelude", "semaphore_wake_prelude", "expirable_semaphore_prelude"] {
        keys { permits, deadlines, waiters }
        args { initial: i64 }
    }
}

redisync_core::toolkit::lua_script! {
    /// Adds (or removes) permits to the pool (`lua/expirable_semaphore_add_permits.lua`).
    pub(crate) struct XAddPermits = new "expirable_semaphore_add_permits"
        for "expirable_semaphore"
        after ["publish_prelude", "clock_prelude", "wake_prelude", "semaphore_wake_prelude",
            "expirable_semaphore_prelude"] {
        keys { permits, deadlines, waiters }
        args { added: i64 }
    }
}

redisync_core::toolkit::lua_script! {
    /// The available permits, expired ones included
    /// (`lua/expirable_semaphore_available_permits.lua`).
    pub(crate) struct XAvailablePermits = new "expirable_semaphore_available_permits"
        for "expirable_semaphore" after ["clock_prelude", "expirable_semaphore_prelude"] {
        keys { permits, deadlines }
        args {}
    }
}

redisync_core::toolkit::lua_script! {
    /// The permits in all, available or leased (`lua/expirable_semaphore_total_permits.lua`).
    pub(crate) struct XTotalPermits = read_only "expirable_semaphore_total_permits"
        for "expirable_semaphore" after ["expirable_semaphore_prelude"] {
        keys { permits, deadlines }
        args {}
    }
}

redisync_core::toolkit::lua_script! {
    /// Takes one permit with an id and a lease (`lua/expirable_semaphore_acquire.lua`).
    pub(crate) struct XAcquire = new "expirable_semaphore_acquire" for "expirable_semaphore"
        after ["publish_prelude", "clock_prelude", "wake_prelude", "semaphore_wake_prelude",
            "expirable_semaphore_prelude"] {
        keys { permits, deadlines, attempt_record, waiters }
        args { id: &'a str, lease_ms: u64 }
        // A first try's: it does not register.
        optional {
            left_off_when |call: &Self| call.channel.is_empty();
            keys {}
            args { channel: &'a str, requeue: bool, registry_ms: u64 }
        }
    }
}

redisync_core::toolkit::lua_script! {
    /// Returns a permit by id (`lua/expirable_semaphore_release.lua`).
    pub(crate) struct XRelease = new "expirable_semaphore_release" for "expirable_semaphore"
        after ["publish_prelude", "clock_prelude", "wake_prelude", "semaphore_wake_prelude",
            "expirable_semaphore_prelude"] {
        keys { permits, deadlines, waiters }
        args { id: &'a str }
    }
}

redisync_core::toolkit::lua_script! {
    /// Undoes an acquire attempt whose caller went away
    /// (`lua/expirable_semaphore_give_back.lua`).
    pub(crate) struct XGiveBack = new "expirable_semaphore_give_back" for "expirable_semaphore"
        after ["publish_prelude", "wake_prelude", "semaphore_wake_prelude", "expirable_semaphore_prelude"] {
        keys { permits, deadlines, attempt_record, waiters }
        args { id: &'a str, record_ms: u64, withdraw_channel: &'a str }
    }
}

redisync_core::toolkit::lua_script! {
    /// Takes a client out of the waiters, passing on a wake-up it may have been sent
    /// (`lua/expirable_semaphore_withdraw.lua`).
    pub(crate) struct XWithdraw = new "expirable_semaphore_withdraw" for "expirable_semaphore"
        after ["publish_prelude", "clock_prelude", "wake_prelude", "semaphore_wake_prelude",
            "expirable_semaphore_prelude"] {
        keys { permits, deadlines, waiters }
        args { channel: &'a str }
    }
}

redisync_core::toolkit::lua_script! {
    /// Removes the pool and every leased permit (`lua/expirable_semaphore_delete.lua`).
    pub(crate) struct XDelete = new "expirable_semaphore_delete" for "expirable_semaphore"
        after ["publish_prelude", "expirable_semaphore_prelude"] {
        keys { permits, deadlines }
        args { lost_notices: &'a str }
    }
}

redisync_core::toolkit::lua_script! {
    /// Renews many watchdog-held permits at once, in the watchdog's batch convention
    /// (`lua/expirable_semaphore_renew.lua`); each permit's part is an [`XRenewedPermit`].
    pub(crate) static X_RENEW = new "expirable_semaphore_renew" for "expirable_semaphore"
        after ["clock_prelude", "expirable_semaphore_prelude"];
}

/// One permit's part of an [`X_RENEW`] batch, as the watchdog registers it
/// ([`Toolkit::watch_lease`](redisync_core::toolkit::Toolkit::watch_lease)).
#[derive(Debug)]
pub(crate) struct XRenewedPermit<'a> {
    /// The semaphore's deadlines (`KEYS[i]`).
    pub(crate) deadlines: &'a str,
    /// The permit's id (`ARGV[3 + i]`).
    pub(crate) id: &'a str,
}

impl XRenewedPermit<'_> {
    /// The permit's keys, in the script's order.
    pub(crate) fn keys(&self) -> Vec<String> {
        vec![self.deadlines.to_owned()]
    }

    /// The permit's arguments, in the script's order.
    pub(crate) fn args(&self) -> Vec<String> {
        vec![self.id.to_owned()]
    }
}

/// Reply of `expirable_semaphore_acquire`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PermitReply {
    Acquired,
    /// None free; the wait until the nearest lease ends, if any permit is leased.
    Busy {
        retry_in: Option<Duration>,
    },
    /// The attempt had been given back before Redis ran it.
    GivenBack,
}

impl PermitReply {
    /// A grant is 1, an integer; the other answers are tables.
    pub(crate) fn decode(reply: &IntOrList) -> Result<Self> {
        match reply {
            IntOrList::Int(1) => Ok(PermitReply::Acquired),
            IntOrList::List(answer) => match answer[..] {
                [0, wait] => Ok(PermitReply::Busy {
                    retry_in: u64::try_from(wait).ok().map(Duration::from_millis),
                }),
                [-1] => Ok(PermitReply::GivenBack),
                _ => Err(Error::WrongType),
            },
            IntOrList::Int(_) => Err(Error::WrongType),
        }
    }
}

/// The largest permit count redisync sends to Redis: 2^53. Scripts read counts as Lua
/// doubles, which are exact up to there.
pub const MAX_PERMITS: u64 = 1 << 53;

/// Checks a permit count for `what`: at least 1 and at most [`MAX_PERMITS`].
pub(crate) fn permit_count(n: u64, what: &str) -> Result<i64> {
    if n == 0 {
        return Err(Error::invalid(format!("{what} must be at least 1 permit")));
    }
    initial_count(n, what)
}

/// Checks a count that may be 0 (an initial number of permits).
pub(crate) fn initial_count(n: u64, what: &str) -> Result<i64> {
    if n > MAX_PERMITS {
        return Err(Error::invalid(format!(
            "{what} must be at most {MAX_PERMITS} permits, found {n}"
        )));
    }
    Ok(n as i64)
}

/// Checks a change of permits (either sign), at most [`MAX_PERMITS`] either way.
pub(crate) fn permit_change(n: i64) -> Result<i64> {
    if n.unsigned_abs() > MAX_PERMITS {
        return Err(Error::invalid(format!(
            "permits added must be within ±{MAX_PERMITS}, found {n}"
        )));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use redisync_test_harness::script_text::functions_in_front;

    /// An uncontended first try makes only the prelude functions it runs: those of the
    /// paths that wait, reclaim expired permits or wake are made after it returned.
    #[test]
    fn the_common_paths_make_only_the_functions_they_call() {
        assert_eq!(
            functions_in_front(Acquire::script().text(), "-- semaphore_acquire:"),
            ["read_semaphore"]
        );
        assert_eq!(
            functions_in_front(XAcquire::script().text(), "-- expirable_semaphore_acquire:"),
            ["now_ms"]
        );
    }

    #[test]
    fn a_renewed_permit_is_its_deadlines_and_its_id() {
        let permit = XRenewedPermit {
            deadlines: "deadlines",
            id: "permit",
        };
        assert_eq!(permit.keys(), ["deadlines"]);
        assert_eq!(permit.args(), ["permit"]);
        let script = include_str!("../lua/expirable_semaphore_renew.lua");
        assert!(script.contains("keys per hold (1)"));
        assert!(script.contains("arguments per hold (1)"));
    }

    #[test]
    fn replies_and_counts_decode() {
        let table = |items: &[i64]| IntOrList::List(items.to_vec());
        assert_eq!(
            PermitReply::decode(&IntOrList::Int(1)).ok(),
            Some(PermitReply::Acquired)
        );
        assert_eq!(
            PermitReply::decode(&table(&[0, 40])).ok(),
            Some(PermitReply::Busy {
                retry_in: Some(Duration::from_millis(40))
            })
        );
        assert_eq!(
            PermitReply::decode(&table(&[0, -1])).ok(),
            Some(PermitReply::Busy { retry_in: None })
        );
        assert_eq!(
            PermitReply::decode(&table(&[-1])).ok(),
            Some(PermitReply::GivenBack)
        );
        assert!(PermitReply::decode(&table(&[])).is_err());
        // A grant is the integer 1, never a table or another integer.
        assert!(PermitReply::decode(&table(&[1])).is_err());
        assert!(PermitReply::decode(&IntOrList::Int(2)).is_err());
        assert!(permit_count(0, "n").is_err());
        assert!(permit_count(u64::MAX, "n").is_err());
        assert!(permit_count(MAX_PERMITS + 1, "n").is_err());
        assert_eq!(initial_count(0, "n").ok(), Some(0));
        assert!(permit_change(i64::MIN).is_err());
        assert_eq!(permit_change(-5).ok(), Some(-5));
        assert!(permit_count(MAX_PERMITS + 1, "n").is_err());
        assert_eq!(permit_count(3, "n").ok(), Some(3));
        assert_eq!(initial_count(0, "n").ok(), Some(0));
        assert!(permit_change(i64::MIN).is_err());
        assert_eq!(permit_change(-5).ok(), Some(-5));
    }
}
