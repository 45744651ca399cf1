//! The rate limiter's scripts, each with its typed call ([`redisync_core::lua_script!`]). Each
//! one that reads the rate starts with the shared prelude; those that wake waiters publish
//! through `publish_prelude.lua`.

redisync_core::toolkit::lua_script! {
    /// Sets the rate if none is set (`lua/rate_limiter_try_set_rate.lua`).
    pub(crate) struct TrySetRate = new "rate_limiter_try_set_rate" for "rate_limiter"
        after ["rate_limiter_prelude"] {
        keys { config }
        args { rate: u64, per: u64, burst: u64, pq: u64, pr: u64, tq: u64, tr: u64 }
    }
}

redisync_core::toolkit::lua_script! {
    /// Sets the rate, replacing any, and wakes the waiters (`lua/rate_limiter_set_rate.lua`).
    pub(crate) struct SetRate = new "rate_limiter_set_rate" for "rate_limiter"
        after ["publish_prelude", "rate_limiter_prelude"] {
        keys { config, state }
        args {
            rate: u64, per: u64, burst: u64, pq: u64, pr: u64, tq: u64, tr: u64,
            channel: &'a str,
        }
    }
}

redisync_core::toolkit::lua_script! {
    /// One decision (`lua/rate_limiter_acquire.lua`).
    pub(crate) struct Acquire = new "rate_limiter_acquire" for "rate_limiter"
        after ["rate_limiter_prelude"] {
        keys { config, state }
        args { n: u64, request: &'a str }
    }
}

redisync_core::toolkit::lua_script! {
    /// Gives back an allowed decision nobody is left to use
    /// (`lua/rate_limiter_give_back.lua`).
    pub(crate) struct GiveBack = new "rate_limiter_give_back" for "rate_limiter" {
        keys { state }
        args { request: &'a str }
    }
}

redisync_core::toolkit::lua_script! {
    /// The rate; reads only (`lua/rate_limiter_rate.lua`).
    pub(crate) struct ReadRate = read_only "rate_limiter_rate" for "rate_limiter" {
        keys { config }
        args {}
    }
}

redisync_core::toolkit::lua_script! {
    /// Removes the rate and the state, and wakes the waiters (`lua/rate_limiter_delete.lua`).
    pub(crate) struct Delete = new "rate_limiter_delete" for "rate_limiter"
        after ["publish_prelude"] {
        keys { config, state }
        args { channel: &'a str }
    }
}

use std::time::Duration;

use redisync_core::toolkit::{Error, Result};

use crate::limiter::Decision;
use crate::rate::Rate;

/// The reply of [`Acquire`]: `[code, value, remaining]`.
pub(crate) type AcquireReply = (i64, u64, u64);

/// Decodes an [`Acquire`] reply for a request of `n` units of the limiter `name`.
pub(crate) fn decision(
    (code, value, remaining): AcquireReply,
    n: u64,
    name: &str,
) -> Result<Decision> {
    match code {
        1 => Ok(Decision {
            allowed: true,
            retry_after: Duration::ZERO,
            remaining,
        }),
        0 => Ok(Decision {
            allowed: false,
            retry_after: Duration::from_micros(value),
            remaining,
        }),
        -1 => Err(Error::invalid(format!(
            "rate limiter {name:?} has no rate: set one with set_rate or try_set_rate"
        ))),
        -2 => Err(Error::invalid(format!(
            "rate limiter {name:?} allows at most {value} units at once (burst + 1), found a \
             request for {n}"
        ))),
        _ => Err(Error::WrongType),
    }
}

/// Decodes a [`ReadRate`] reply: `[]` when no rate is set, else `[units, per µs, burst]`.
pub(crate) fn rate(fields: &[String]) -> Result<Option<Rate>> {
    let [units, per, burst] = fields else {
        return if fields.is_empty() {
            Ok(None)
        } else {
            Err(Error::WrongType)
        };
    };
    let number = |s: &String| s.parse::<u64>().map_err(|_| Error::WrongType);
    Ok(Some(
        Rate::new(number(units)?, Duration::from_micros(number(per)?)).burst(number(burst)?),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_every_acquire_reply() {
        assert_eq!(
            decision((1, 0, 4), 1, "x").ok(),
            Some(Decision {
                allowed: true,
                retry_after: Duration::ZERO,
                remaining: 4
            })
        );
        assert_eq!(
            decision((0, 1_500, 0), 2, "x").ok(),
            Some(Decision {
                allowed: false,
                retry_after: Duration::from_micros(1_500),
                remaining: 0
            })
        );
        match decision((-1, 0, 0), 1, "x") {
            Err(Error::InvalidArgument(m)) => assert!(m.contains("no rate"), "{m}"),
            other => panic!("{other:?}"),
        }
        match decision((-2, 3, 0), 7, "x") {
            Err(Error::InvalidArgument(m)) => {
                assert!(m.contains("at most 3") && m.contains("for 7"), "{m}")
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(decision((5, 0, 0), 1, "x"), Err(Error::WrongType)));
    }

    #[test]
    fn decodes_rate_replies() {
        let fields = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(rate(&[]).ok(), Some(None));
        assert_eq!(
            rate(&fields(&["7", "250000", "2"])).ok(),
            Some(Some(Rate::new(7, Duration::from_millis(250)).burst(2)))
        );
        assert!(matches!(
            rate(&fields(&["7", "x", "2"])),
            Err(Error::WrongType)
        ));
        assert!(matches!(rate(&fields(&["7"])), Err(Error::WrongType)));
    }
}
