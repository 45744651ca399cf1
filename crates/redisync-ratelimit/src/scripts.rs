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

/// The reply of [`Acquire`]: `[code, value, remaining]`.
pub(crate) type AcquireReply = (i64, u64, u64);
