//! The floor's scripts, shared by the benchmark and its `cycles` example (which includes this
//! file by path: an example cannot use a binary's modules).

/// The floor's release: delete the key only if it still holds our token.
pub const COMPARE_AND_DELETE: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

/// The take of the floor with its `SET` in a script: the floor's `SET key token NX PX`,
/// inside a script; `OK` when taken, nil when the key exists, as the bare command answers.
pub const SCRIPTED_SET_NX: &str = "return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])";
