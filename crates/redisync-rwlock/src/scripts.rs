//! The read-write lock's scripts, each with its typed call ([`redisync_core::lua_script!`]),
//! and the decoding of their replies, side by side.
//!
//! Scripts that work on holds are prefixed with `rwlock_prelude.lua`, which holds the layout
//! logic (pruning expired holds, the keys' expiry, waiter registrations) once for all of them.

use std::time::Duration;

use redisync_core::toolkit::{Confirmed, Error, IntOrList, Result, ScriptCall};

redisync_core::toolkit::lua_script! {
    /// Takes a read hold, re-enters one, or downgrades from the write hold
    /// (`lua/rwlock_acquire_read.lua`).
    pub(crate) struct AcquireRead = new "rwlock_acquire_read" for "rwlock"
        after ["clock_prelude", "rwlock_prelude"] {
        keys { hash, readers, waiting_writers, attempt_record }
        args {
            owner: &'a str,
            lease_ms: u64,
            attempt: &'a str,
            prefer_writers: bool,
            waiter: &'a str,
            shared: bool,
        }
    }
}

redisync_core::toolkit::lua_script! {
    /// Takes the write hold or re-enters it (`lua/rwlock_acquire_write.lua`).
    pub(crate) struct AcquireWrite = new "rwlock_acquire_write" for "rwlock"
        after ["publish_prelude", "clock_prelude", "rwlock_prelude"] {
        keys { hash, readers, waiting_writers, fence, attempt_record, waiter_record }
        args {
            owner: &'a str,
            lease_ms: u64,
            attempt: &'a str,
            waiter: &'a str,
            mark_ms: u64,
            drain_channel: &'a str,
        }
    }
}

redisync_core::toolkit::lua_script! {
    /// Gives back the hold one acquire attempt got, if it got one
    /// (`lua/rwlock_release.lua`).
    pub(crate) struct Release = new "rwlock_release" for "rwlock"
        after ["publish_prelude", "clock_prelude", "rwlock_prelude"] {
        keys { hash, readers }
        args { attempt: &'a str, channel: &'a str }
        // An unlock's: it keeps no record and names no waiter.
        optional {
            left_off_when |call: &Self| call.record_ms == 0 && call.waiter.is_empty();
            keys { attempt_record }
            args { record_ms: u64, waiter: &'a str }
        }
    }
}

redisync_core::toolkit::lua_script! {
    /// How the lock is held; reads only, so it never waits for replicas
    /// (`lua/rwlock_status.lua`).
    pub(crate) struct Status = read_only "rwlock_status" for "rwlock"
        after ["clock_prelude", "rwlock_prelude"] {
        keys { hash, readers }
        args {}
    }
}

redisync_core::toolkit::lua_script! {
    /// An acquire call stops waiting: its writer's mark and its registration go
    /// (`lua/rwlock_withdraw.lua`).
    pub(crate) struct Withdraw = new "rwlock_withdraw" for "rwlock" after ["publish_prelude"] {
        keys { waiting_writers, waiter_record, hash }
        args { waiter: &'a str, channel: &'a str, record_ms: u64 }
    }
}

redisync_core::toolkit::lua_script! {
    /// Frees the lock whatever holds it (`lua/rwlock_force_unlock.lua`).
    pub(crate) struct ForceUnlock = new "rwlock_force_unlock" for "rwlock"
        after ["publish_prelude", "rwlock_prelude"] {
        keys { hash, readers }
        args { channel: &'a str, drain_channel: &'a str, lost_notices: &'a str }
    }
}

redisync_core::toolkit::lua_script! {
    /// Removes the lock's holds and waiting-writer marks (`lua/rwlock_delete.lua`).
    pub(crate) struct Delete = new "rwlock_delete" for "rwlock" after ["publish_prelude", "rwlock_prelude"] {
        keys { hash, readers, waiting_writers }
        args { channel: &'a str, drain_channel: &'a str, lost_notices: &'a str }
    }
}

redisync_core::toolkit::lua_script! {
    /// Renews many watchdog-held read and write holds at once, in the watchdog's batch
    /// convention (`lua/rwlock_renew.lua`); each hold's part is a [`RenewedHold`].
    pub(crate) static RENEW = new "rwlock_renew" for "rwlock"
        after ["clock_prelude", "rwlock_prelude"];
}

/// One hold's part of a [`RENEW`] batch, as the watchdog registers it
/// ([`Toolkit::watch_lease`](redisync_core::toolkit::Toolkit::watch_lease)).
#[derive(Debug)]
pub(crate) struct RenewedHold<'a> {
    /// The lock hash (`KEYS[2i-1]`).
    pub(crate) hash: &'a str,
    /// The readers (`KEYS[2i]`).
    pub(crate) readers: &'a str,
    /// The id of the attempt that got the hold (`ARGV[3 + i]`).
    pub(crate) attempt: &'a str,
}

impl RenewedHold<'_> {
    /// The hold's keys, in the script's order.
    pub(crate) fn keys(&self) -> Vec<String> {
        vec![self.hash.to_owned(), self.readers.to_owned()]
    }

    /// The hold's arguments, in the script's order.
    pub(crate) fn args(&self) -> Vec<String> {
        vec![self.attempt.to_owned()]
    }
}

redisync_core::toolkit::lua_script! {
    /// Whether a writer waits and which of a client's shared read holds are live; reads only
    /// (`lua/rwlock_check_shared.lua`). One argument per hold: built by [`check_shared`].
    pub(crate) static CHECK_SHARED = read_only "rwlock_check_shared" for "rwlock"
        after ["clock_prelude", "rwlock_prelude"];
}

/// The [`CHECK_SHARED`] request for the shared read holds of `attempts` (one `ARGV[i]` each,
/// in the order [`SharedCheck::decode`] answers for them), given the lock's `readers` and
/// `waiting_writers`.
pub(crate) fn check_shared<'h>(
    readers: &str,
    waiting_writers: &str,
    attempts: impl IntoIterator<Item = &'h str>,
) -> ScriptCall {
    let mut call = ScriptCall::new(&CHECK_SHARED)
        .key(readers)
        .key(waiting_writers);
    for attempt in attempts {
        call = call.arg(attempt);
    }
    call
}

/// Reply of `rwlock_acquire_read` / `rwlock_acquire_write`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AcquireReply {
    /// Granted; the write token (0 for a read hold).
    Acquired { token: u64 },
    /// Busy; the wait until the holds could change by themselves.
    Busy { retry_in: Option<Duration> },
    /// The attempt had been given back before Redis ran it.
    GivenBack,
    /// The owner reads and asked to write.
    Upgrade,
}

impl AcquireReply {
    /// A read grant is the owner's read holds, an integer; the other answers are tables.
    pub(crate) fn decode_read(reply: &IntOrList) -> Result<Self> {
        match reply {
            IntOrList::Int(holds) if *holds > 0 => Ok(AcquireReply::Acquired { token: 0 }),
            _ => Self::decode_common(reply),
        }
    }

    /// A write grant is the fencing token, an integer; the other answers are tables.
    pub(crate) fn decode_write(reply: &IntOrList) -> Result<Self> {
        match reply {
            IntOrList::Int(token) if *token > 0 => Ok(AcquireReply::Acquired {
                token: *token as u64,
            }),
            _ => Self::decode_common(reply),
        }
    }

    fn decode_common(reply: &IntOrList) -> Result<Self> {
        let IntOrList::List(answer) = reply else {
            return Err(Error::WrongType);
        };
        match answer[..] {
            [0, wait] => Ok(AcquireReply::Busy {
                retry_in: u64::try_from(wait).ok().map(Duration::from_millis),
            }),
            [-1] => Ok(AcquireReply::GivenBack),
            [-2] => Ok(AcquireReply::Upgrade),
            _ => Err(Error::WrongType),
        }
    }
}

/// Reply of `rwlock_release` to an unlock. The script keeps no record of a release, so a
/// repeat of one whose first try ran finds nothing: `-1` then means "released", unless the
/// client already knew the hold lost (core leaves `repeated` unset in that case).
pub(crate) fn decode_release(confirmed: Confirmed<i64>) -> Result<()> {
    match confirmed {
        Confirmed { reply: 0 | 1, .. } | Confirmed { repeated: true, .. } => Ok(()),
        _ => Err(Error::NotOwner),
    }
}

/// Reply of `rwlock_check_shared`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SharedCheck {
    /// A writer's mark is live: new readers must give way.
    pub(crate) writer_waits: bool,
    /// For each hold asked about, in order: whether it is still a live read hold.
    pub(crate) live: Vec<bool>,
}

impl SharedCheck {
    pub(crate) fn decode(reply: &[i64], holds: usize) -> Result<Self> {
        match reply.split_first() {
            Some((writer_waits, live)) if live.len() == holds => Ok(SharedCheck {
                writer_waits: *writer_waits == 1,
                live: live.iter().map(|l| *l == 1).collect(),
            }),
            _ => Err(Error::WrongType),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redisync_test_harness::script_text::functions_in_front;

    /// An acquire of a free lock, and the release of its only hold, make only the prelude
    /// functions they run: those of the paths that find holds, marks or waiters are made after
    /// they returned.
    #[test]
    fn the_common_paths_make_only_the_functions_they_call() {
        assert_eq!(
            functions_in_front(AcquireRead::script().text(), "-- rwlock_acquire_read:"),
            ["now_ms", "expire_keys"]
        );
        assert_eq!(
            functions_in_front(AcquireWrite::script().text(), "-- rwlock_acquire_write:"),
            ["now_ms"]
        );
        // The release of the only hold, with nobody waiting, makes none.
        assert!(functions_in_front(Release::script().text(), "-- rwlock_release:").is_empty());
    }

    #[test]
    fn per_hold_calls_list_each_holds_keys_and_arguments_in_the_scripts_order() {
        let hold = RenewedHold {
            hash: "hash",
            readers: "readers",
            attempt: "attempt",
        };
        assert_eq!(hold.keys(), ["hash", "readers"]);
        assert_eq!(hold.args(), ["attempt"]);
        let script = include_str!("../lua/rwlock_renew.lua");
        assert!(script.contains("keys per hold (2)"));
        assert!(script.contains("arguments per hold (1)"));
        let check = check_shared("readers", "writers", ["a1", "a2"]);
        assert_eq!(check.first_key(), "readers");
        assert_eq!(check.script().name(), "rwlock_check_shared");
        assert!(check.script().is_read_only());
    }

    #[test]
    fn replies_decode() {
        let table = |items: &[i64]| IntOrList::List(items.to_vec());
        assert_eq!(
            AcquireReply::decode_read(&IntOrList::Int(3)).ok(),
            Some(AcquireReply::Acquired { token: 0 })
        );
        assert_eq!(
            AcquireReply::decode_write(&IntOrList::Int(9)).ok(),
            Some(AcquireReply::Acquired { token: 9 })
        );
        assert_eq!(
            AcquireReply::decode_write(&table(&[0, 250])).ok(),
            Some(AcquireReply::Busy {
                retry_in: Some(Duration::from_millis(250))
            })
        );
        assert_eq!(
            AcquireReply::decode_write(&table(&[-2])).ok(),
            Some(AcquireReply::Upgrade)
        );
        assert_eq!(
            AcquireReply::decode_read(&table(&[-1])).ok(),
            Some(AcquireReply::GivenBack)
        );
        // A grant is never 0 or negative, and never a table.
        assert!(AcquireReply::decode_read(&table(&[7])).is_err());
        assert!(AcquireReply::decode_read(&IntOrList::Int(0)).is_err());
        assert!(AcquireReply::decode_write(&IntOrList::Int(-1)).is_err());
        assert!(AcquireReply::decode_read(&table(&[1, 3])).is_err());
        assert!(AcquireReply::decode_write(&table(&[1, 9, 1])).is_err());
        let release = |reply, repeated| decode_release(Confirmed { reply, repeated });
        assert!(release(-1, false).is_err());
        assert!(
            release(-1, true).is_ok(),
            "a repeat finds its own release done"
        );
        assert!(release(1, false).is_ok());
        assert!(release(0, true).is_ok());
        assert_eq!(
            SharedCheck::decode(&[1, 0, 1], 2).ok(),
            Some(SharedCheck {
                writer_waits: true,
                live: vec![false, true]
            })
        );
        assert!(SharedCheck::decode(&[0, 1], 2).is_err());
    }
}
