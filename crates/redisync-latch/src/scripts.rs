//! The latch's scripts, each with its typed call ([`redisync_core::lua_script!`]). Each one
//! that reads the latch starts with the shared prelude, after the waiters registry's
//! (`wake_prelude.lua`) where it registers waiters.

redisync_core::toolkit::lua_script! {
    /// Arms the latch with a count if it is open (`lua/latch_try_set_count.lua`).
    pub(crate) struct TrySetCount = new "latch_try_set_count" for "latch" after ["publish_prelude", "latch_prelude"] {
        keys { latch, opened }
        args { count: u64, arming: &'a str }
    }
}

redisync_core::toolkit::lua_script! {
    /// One count-down, remembered so that a repeat is not applied twice
    /// (`lua/latch_count_down.lua`).
    pub(crate) struct CountDown = new "latch_count_down" for "latch" after ["publish_prelude", "latch_prelude"] {
        keys { latch, opened, waiters }
        args { request: &'a str, remember_ms: u64, channel: &'a str }
    }
}

redisync_core::toolkit::lua_script! {
    /// The count and arming; reads only, so it never waits for replicas
    /// (`lua/latch_status.lua`).
    pub(crate) struct Status = read_only "latch_status" for "latch" after ["publish_prelude", "latch_prelude"] {
        keys { latch }
        args {}
    }
}

redisync_core::toolkit::lua_script! {
    /// The status for a subscribed waiter, registering its client while the latch stays armed
    /// (`lua/latch_wait.lua`).
    pub(crate) struct Wait = new "latch_wait" for "latch" after ["publish_prelude", "wake_prelude", "latch_prelude"] {
        keys { latch, waiters }
        args { client: &'a str, registry_ms: u64, arming: &'a str }
    }
}

redisync_core::toolkit::lua_script! {
    /// Takes a client out of the latch's waiters (`lua/latch_withdraw.lua`).
    pub(crate) struct Withdraw = new "latch_withdraw" for "latch" after ["publish_prelude", "wake_prelude"] {
        keys { waiters }
        args { client: &'a str }
    }
}

redisync_core::toolkit::lua_script! {
    /// Opens the latch and wakes its waiters (`lua/latch_delete.lua`).
    pub(crate) struct Delete = new "latch_delete" for "latch" after ["publish_prelude", "latch_prelude"] {
        keys { latch, opened, waiters }
        args { remember_ms: u64, channel: &'a str }
    }
}
