//! The lock's scripts and the decoding of their replies, side by side.

use std::time::Duration;

use redisync_core::{Error, LuaScript, Result};

/// A lock script, with the preludes it builds on (`lock` for lock_prelude, `wake` for the
/// registry of waiting clients, `fair` for the fair lock's queue), in that order.
macro_rules! script {
    ($name:literal) => {
        LuaScript::new($name, include_str!(concat!("../lua/", $name, ".lua")))
    };
    ($name:literal, $($prelude:literal),+) => {
        LuaScript::new(
            $name,
            concat!(
                $(include_str!(concat!("../lua/", $prelude, "_prelude.lua")),)+
                include_str!(concat!("../lua/", $name, ".lua"))
            ),
        )
    };
}

pub(crate) static ACQUIRE: LuaScript = script!("lock_acquire", "lock", "wake");
pub(crate) static RELEASE: LuaScript = script!("lock_release", "lock", "wake");
pub(crate) static WITHDRAW: LuaScript = script!("lock_withdraw", "lock", "wake");
pub(crate) static FORCE_UNLOCK: LuaScript = script!("lock_force_unlock", "lock", "wake");
pub(crate) static FAIR_ACQUIRE: LuaScript = script!("fair_lock_acquire", "lock", "fair_lock");
pub(crate) static FAIR_RELEASE: LuaScript = script!("fair_lock_release", "lock", "fair_lock");
pub(crate) static FAIR_FORCE_UNLOCK: LuaScript =
    script!("fair_lock_force_unlock", "lock", "fair_lock");
pub(crate) static ACQUIRE_ALL: LuaScript = script!("lock_acquire_all", "lock");
pub(crate) static SET_LEASE: LuaScript = script!("lock_set_lease");
pub(crate) static RENEW: LuaScript = script!("lock_renew");
pub(crate) static STATUS: LuaScript =
    LuaScript::read_only("lock_status", include_str!("../lua/lock_status.lua"));

/// Reply of `lock_acquire`.
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
    pub(crate) fn decode(reply: &[i64]) -> Result<Self> {
        match reply {
            [1, token, _count] if *token > 0 => Ok(AcquireReply::Acquired {
                token: *token as u64,
            }),
            [0, pttl] => Ok(AcquireReply::Busy {
                pttl: u64::try_from(*pttl).ok().map(Duration::from_millis),
            }),
            [-1] => Ok(AcquireReply::GivenBack),
            _ => Err(Error::WrongType),
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

    #[test]
    fn replies_decode() {
        assert_eq!(
            AcquireReply::decode(&[1, 7, 2]).ok(),
            Some(AcquireReply::Acquired { token: 7 })
        );
        assert_eq!(
            AcquireReply::decode(&[0, 1500]).ok(),
            Some(AcquireReply::Busy {
                pttl: Some(Duration::from_millis(1500))
            })
        );
        assert_eq!(
            AcquireReply::decode(&[0, -1]).ok(),
            Some(AcquireReply::Busy { pttl: None })
        );
        assert!(AcquireReply::decode(&[]).is_err());
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
            AcquireReply::decode(&[-1]).ok(),
            Some(AcquireReply::GivenBack)
        );
    }
}
