//! Reading a script's text as sent to Redis (`LuaScript::text`), for the crates' tests of how
//! their scripts are arranged.

/// The names of the functions `text` defines before its first line that starts with `own`
/// (the header line of the script's own file, such as `-- lock_acquire:`): the prelude
/// functions every call of the script makes, whichever way it goes. Those only the script's
/// uncommon paths call are defined after it (see `-- @uncommon` in `lua/lock_acquire.lua`).
///
/// ```
/// use redisync_test_harness::script_text::functions_in_front;
///
/// let text = "local function a()\nend\n-- my_script: does it\nlocal function b()\nend\n";
/// assert_eq!(functions_in_front(text, "-- my_script:"), ["a"]);
/// ```
pub fn functions_in_front<'a>(text: &'a str, own: &str) -> Vec<&'a str> {
    text.lines()
        .take_while(|line| !line.starts_with(own))
        .filter_map(|line| line.strip_prefix("local function "))
        .filter_map(|rest| rest.split_once('(').map(|(name, _)| name))
        .collect()
}
