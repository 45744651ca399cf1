//! The read-write lock's scripts and the decoding of their replies, side by side.
//!
//! Scripts that work on holds are prefixed with `rwlock_prelude.lua`, which holds the layout
//! logic (pruning expired holds, the keys' expiry, waiter registrations) once for all of them.

use std::time::Duration;

use redisync_core::{Confirmed, Error, LuaScript, Result};

macro_rules! with_prelude {
    ($file:literal) => {
        concat!(
            include_str!("../lua/rwlock_prelude.lua"),
            include_str!(concat!("../lua/", $file))
        )
    };
}

pub(crate) static ACQUIRE_READ: LuaScript = LuaScript::new(
    "rwlock_acquire_read",
    with_prelude!("rwlock_acquire_read.lua"),
);
pub(crate) static ACQUIRE_WRITE: LuaScript = LuaScript::new(
    "rwlock_acquire_write",
    with_prelude!("rwlock_acquire_write.lua"),
);
pub(crate) static RELEASE: LuaScript =
    LuaScript::new("rwlock_release", with_prelude!("rwlock_release.lua"));
pub(crate) static RENEW: LuaScript =
    LuaScript::new("rwlock_renew", with_prelude!("rwlock_renew.lua"));
pub(crate) static STATUS: LuaScript =
    LuaScript::read_only("rwlock_status", with_prelude!("rwlock_status.lua"));
pub(crate) static WITHDRAW: LuaScript = LuaScript::new(
    "rwlock_withdraw",
    include_str!("../lua/rwlock_withdraw.lua"),
);
pub(crate) static FORCE_UNLOCK: LuaScript = LuaScript::new(
    "rwlock_force_unlock",
    with_prelude!("rwlock_force_unlock.lua"),
);
pub(crate) static DELETE: LuaScript =
    LuaScript::new("rwlock_delete", with_prelude!("rwlock_delete.lua"));
pub(crate) static CHECK_SHARED: LuaScript = LuaScript::read_only(
    "rwlock_check_shared",
    with_prelude!("rwlock_check_shared.lua"),
);

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
    pub(crate) fn decode_read(reply: &[i64]) -> Result<Self> {
        match reply {
            [1, _holds] => Ok(AcquireReply::Acquired { token: 0 }),
            _ => Self::decode_common(reply),
        }
    }

    pub(crate) fn decode_write(reply: &[i64]) -> Result<Self> {
        match reply {
            [1, token, _holds] if *token > 0 => Ok(AcquireReply::Acquired {
                token: *token as u64,
            }),
            _ => Self::decode_common(reply),
        }
    }

    fn decode_common(reply: &[i64]) -> Result<Self> {
        match reply {
            [0, wait] => Ok(AcquireReply::Busy {
                retry_in: u64::try_from(*wait).ok().map(Duration::from_millis),
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

    #[test]
    fn replies_decode() {
        assert_eq!(
            AcquireReply::decode_read(&[1, 3]).ok(),
            Some(AcquireReply::Acquired { token: 0 })
        );
        assert_eq!(
            AcquireReply::decode_write(&[1, 9, 1]).ok(),
            Some(AcquireReply::Acquired { token: 9 })
        );
        assert_eq!(
            AcquireReply::decode_write(&[0, 250]).ok(),
            Some(AcquireReply::Busy {
                retry_in: Some(Duration::from_millis(250))
            })
        );
        assert_eq!(
            AcquireReply::decode_write(&[-2]).ok(),
            Some(AcquireReply::Upgrade)
        );
        assert_eq!(
            AcquireReply::decode_read(&[-1]).ok(),
            Some(AcquireReply::GivenBack)
        );
        assert!(AcquireReply::decode_read(&[7]).is_err());
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
