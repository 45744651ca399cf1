//! The semaphores' scripts, side by side with the decoding of their replies.

use std::time::Duration;

use redisync_core::{Error, LuaScript, Result};

macro_rules! script {
    ($name:literal) => {
        LuaScript::new($name, include_str!(concat!("../lua/", $name, ".lua")))
    };
    ($name:literal, after $($prelude:literal),+) => {
        LuaScript::new(
            $name,
            concat!(
                $(include_str!(concat!("../lua/", $prelude, ".lua")),)+
                include_str!(concat!("../lua/", $name, ".lua"))
            ),
        )
    };
}

/// A classic semaphore script that wakes or registers waiters and reads the semaphore.
macro_rules! classic {
    ($name:literal) => {
        script!($name, after "wake_prelude", "semaphore_wake_prelude", "semaphore_prelude")
    };
}

/// An expirable semaphore script that wakes or registers waiters.
macro_rules! expirable {
    ($name:literal) => {
        script!(
            $name,
            after "wake_prelude",
            "semaphore_wake_prelude",
            "expirable_semaphore_prelude"
        )
    };
}

pub(crate) static TRY_SET: LuaScript = script!(
    "semaphore_try_set_permits",
    after "wake_prelude",
    "semaphore_wake_prelude"
);
pub(crate) static ADD: LuaScript = script!(
    "semaphore_add_permits",
    after "wake_prelude",
    "semaphore_wake_prelude"
);
pub(crate) static DRAIN: LuaScript = script!("semaphore_drain_permits");
pub(crate) static AVAILABLE: LuaScript = LuaScript::read_only(
    "semaphore_available_permits",
    include_str!("../lua/semaphore_available_permits.lua"),
);
pub(crate) static ACQUIRE: LuaScript = classic!("semaphore_acquire");
pub(crate) static RELEASE: LuaScript = classic!("semaphore_release");
pub(crate) static GIVE_BACK: LuaScript = classic!("semaphore_give_back");
pub(crate) static WITHDRAW: LuaScript = classic!("semaphore_withdraw");
pub(crate) static FORGET: LuaScript = script!("semaphore_forget", after "semaphore_prelude");
pub(crate) static DELETE: LuaScript = script!("semaphore_delete", after "semaphore_prelude");

pub(crate) static X_TRY_SET: LuaScript = expirable!("expirable_semaphore_try_set_permits");
pub(crate) static X_ADD: LuaScript = expirable!("expirable_semaphore_add_permits");
pub(crate) static X_AVAILABLE: LuaScript = script!(
    "expirable_semaphore_available_permits",
    after "expirable_semaphore_prelude"
);
pub(crate) static X_ACQUIRE: LuaScript = expirable!("expirable_semaphore_acquire");
pub(crate) static X_RELEASE: LuaScript = expirable!("expirable_semaphore_release");
pub(crate) static X_GIVE_BACK: LuaScript = expirable!("expirable_semaphore_give_back");
pub(crate) static X_WITHDRAW: LuaScript = expirable!("expirable_semaphore_withdraw");
pub(crate) static X_RENEW: LuaScript = script!(
    "expirable_semaphore_renew",
    after "expirable_semaphore_prelude"
);
pub(crate) static X_DELETE: LuaScript = script!(
    "expirable_semaphore_delete",
    after "expirable_semaphore_prelude"
);

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
    pub(crate) fn decode(reply: &[i64]) -> Result<Self> {
        match reply {
            [1] => Ok(PermitReply::Acquired),
            [0, wait] => Ok(PermitReply::Busy {
                retry_in: u64::try_from(*wait).ok().map(Duration::from_millis),
            }),
            [-1] => Ok(PermitReply::GivenBack),
            _ => Err(Error::WrongType),
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

    #[test]
    fn replies_and_counts_decode() {
        assert_eq!(PermitReply::decode(&[1]).ok(), Some(PermitReply::Acquired));
        assert_eq!(
            PermitReply::decode(&[0, 40]).ok(),
            Some(PermitReply::Busy {
                retry_in: Some(Duration::from_millis(40))
            })
        );
        assert_eq!(
            PermitReply::decode(&[0, -1]).ok(),
            Some(PermitReply::Busy { retry_in: None })
        );
        assert_eq!(
            PermitReply::decode(&[-1]).ok(),
            Some(PermitReply::GivenBack)
        );
        assert!(PermitReply::decode(&[]).is_err());
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
