//! The latch's scripts. Each one that reads the latch starts with the shared prelude, after
//! the waiters registry's (`wake_prelude.lua`) where it registers waiters.

use redisync_core::LuaScript;

macro_rules! script {
    ($name:literal) => {
        LuaScript::new(
            $name,
            concat!(
                include_str!("../lua/latch_prelude.lua"),
                include_str!(concat!("../lua/", $name, ".lua"))
            ),
        )
    };
}

pub(crate) static TRY_SET_COUNT: LuaScript = script!("latch_try_set_count");
pub(crate) static COUNT_DOWN: LuaScript = script!("latch_count_down");
/// Reads only: never waits for replicas.
pub(crate) static STATUS: LuaScript = LuaScript::read_only(
    "latch_status",
    concat!(
        include_str!("../lua/latch_prelude.lua"),
        include_str!("../lua/latch_status.lua")
    ),
);
pub(crate) static WAIT: LuaScript = LuaScript::new(
    "latch_wait",
    concat!(
        include_str!("../lua/wake_prelude.lua"),
        include_str!("../lua/latch_prelude.lua"),
        include_str!("../lua/latch_wait.lua")
    ),
);
pub(crate) static WITHDRAW: LuaScript = LuaScript::new(
    "latch_withdraw",
    concat!(
        include_str!("../lua/wake_prelude.lua"),
        include_str!("../lua/latch_withdraw.lua")
    ),
);
pub(crate) static DELETE: LuaScript = script!("latch_delete");
