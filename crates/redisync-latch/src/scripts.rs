//! The latch's scripts. Each one that reads the latch starts with the shared prelude.

use redisync_core::LuaScript;

macro_rules! script {
    ($name:literal) => {
        LuaScript::new(
            $name,
            concat!(
                include_str!("../../../lua/latch_prelude.lua"),
                include_str!(concat!("../../../lua/", $name, ".lua"))
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
        include_str!("../../../lua/latch_prelude.lua"),
        include_str!("../../../lua/latch_status.lua")
    ),
);
pub(crate) static DELETE: LuaScript = script!("latch_delete");
