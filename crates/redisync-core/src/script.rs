//! Scripts: every state change in redisync is one Lua script, sent with EVALSHA.
//!
//! [`LuaScript`] holds a script's source and its SHA1 (through [`redis::Script`]). A call
//! is sent as `EVALSHA`; when Redis answers `NOSCRIPT` (after `SCRIPT FLUSH` or a restart),
//! the client loads the script (`SCRIPT LOAD`; on a cluster, `EVAL` with the source) and
//! sends the call again. A
//! [`ScriptCall`] is one invocation with its keys and arguments, owned so that the call can
//! outlive the caller's future (see [`Toolkit::eval`](crate::toolkit::Toolkit::eval)).
//!
//! On a Redis Cluster, wake-ups use sharded pub/sub, so that a message goes only to the nodes
//! of the channel's shard rather than to every node. Scripts publish only through
//! `lua/publish_prelude.lua`, whose one `redis.pcall('PUBLISH', ...)` a cluster client runs as
//! `SPUBLISH` (the channel always shares the slot of the script's keys).

use std::sync::OnceLock;

mod arrange;

use redis::ToRedisArgs;

/// A Lua script embedded in the binary, compiled into a [`redis::Script`] on first use.
///
/// Declare one as a `static` next to the code that decodes its reply:
///
/// ```
/// use redisync_core::LuaScript;
/// static PING: LuaScript = LuaScript::new("ping", "return redis.call('PING')");
/// assert_eq!(PING.name(), "ping");
/// ```
#[derive(Debug)]
pub struct LuaScript {
    name: &'static str,
    /// The kind of primitive the script belongs to (`"lock"`, `"semaphore"`...), for metrics
    /// and traces; empty when not declared.
    kind: &'static str,
    source: &'static str,
    read_only: bool,
    /// The text as sent (see [`text`](Self::text) and `script::arrange`).
    sent: OnceLock<String>,
    compiled: OnceLock<redis::Script>,
    sharded: OnceLock<redis::Script>,
}

/// How scripts publish; the sharded form is the one a cluster client runs.
const PUBLISH: &str = "redis.pcall('PUBLISH',";
const SHARDED_PUBLISH: &str = "redis.pcall('SPUBLISH',";

impl LuaScript {
    /// Declares a script. `name` appears in traces; `source` is usually an `include_str!` of a
    /// file in `lua/`.
    pub const fn new(name: &'static str, source: &'static str) -> Self {
        LuaScript {
            name,
            kind: "",
            source,
            read_only: false,
            sent: OnceLock::new(),
            compiled: OnceLock::new(),
            sharded: OnceLock::new(),
        }
    }

    /// A script that only reads: it never waits for replicas
    /// ([`ClientBuilder::replica_sync`](crate::ClientBuilder::replica_sync)).
    pub const fn read_only(name: &'static str, source: &'static str) -> Self {
        LuaScript {
            name,
            kind: "",
            source,
            read_only: true,
            sent: OnceLock::new(),
            compiled: OnceLock::new(),
            sharded: OnceLock::new(),
        }
    }

    /// The same script, declared as belonging to primitives of `kind` (`"lock"`,
    /// `"semaphore"`...): metrics and traces of its calls carry it.
    pub const fn of_kind(mut self, kind: &'static str) -> Self {
        self.kind = kind;
        self
    }

    /// The kind of primitive the script belongs to; empty when not declared.
    pub fn kind(&self) -> &'static str {
        self.kind
    }

    /// Whether the script only reads.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// The script's name, for traces and errors.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The SHA1 Redis knows the script by (its form for a single server).
    pub fn sha1(&self) -> &str {
        self.compiled(false).get_hash()
    }

    /// The text Redis runs (its form for a single server): the preludes and the script's own
    /// file, without the prelude functions it never calls, and with those only its uncommon
    /// paths call defined where those paths begin (see the `-- @uncommon` line in
    /// `lua/lock_acquire.lua`).
    ///
    /// ```
    /// use redisync_core::LuaScript;
    /// static TWICE: LuaScript = LuaScript::new(
    ///     "twice",
    ///     "local function unused()\nend\nlocal function twice(x)\n  return 2 * x\nend\n\
    ///      return twice(ARGV[1])\n",
    /// );
    /// assert_eq!(TWICE.text(), "local function twice(x)\n  return 2 * x\nend\nreturn twice(ARGV[1])\n");
    /// ```
    pub fn text(&self) -> &str {
        self.sent.get_or_init(|| arrange::as_sent(self.source))
    }

    /// The script's text as sent (see [`text`](Self::text)); with `sharded`, publishing with
    /// `SPUBLISH`.
    pub(crate) fn source(&self, sharded: bool) -> std::borrow::Cow<'_, str> {
        let sent = self.text();
        if sharded {
            sent.replace(PUBLISH, SHARDED_PUBLISH).into()
        } else {
            sent.into()
        }
    }

    /// The script as sent: with `sharded`, publishing with `SPUBLISH`.
    pub(crate) fn compiled(&self, sharded: bool) -> &redis::Script {
        if sharded {
            self.sharded
                .get_or_init(|| redis::Script::new(&self.source(true)))
        } else {
            self.compiled
                .get_or_init(|| redis::Script::new(&self.source(false)))
        }
    }
}

/// One invocation of a [`LuaScript`]: the script, its `KEYS` and its `ARGV`.
#[derive(Debug, Clone)]
pub struct ScriptCall {
    pub(crate) script: &'static LuaScript,
    // Shared, so that the copies a call needs on its way (a retry loop, a give-back handed to
    // the background) cost a reference count, not a copy of every key and argument.
    payload: std::sync::Arc<Payload>,
    /// An acquire: with replica sync, one that no replica acknowledged fails (and is then
    /// given back) instead of succeeding.
    pub(crate) rollback_unreplicated: bool,
    /// The owner's releases in flight that this call, as a release or give-back on its way
    /// to Redis (or as an acquire whose caller went away), counts in.
    pub(crate) in_flight: crate::in_flight::CountedIn,
}

/// A call's keys and arguments, end to end in one buffer: a call costs a few allocations
/// however many keys and arguments it has (a lock's registering acquire has 13), not one per
/// item.
#[derive(Debug, Clone, Default)]
struct Payload {
    /// Every key and argument, back to back, in the order they were added.
    bytes: Vec<u8>,
    /// Where each of them ends in `bytes`, and whether it is a key.
    items: Vec<Item>,
    /// How many of `items` are keys.
    keys: usize,
}

/// One key or argument of a [`Payload`].
#[derive(Debug, Clone, Copy)]
struct Item {
    end: usize,
    key: bool,
}

impl Payload {
    /// The keys (`key`) or the arguments (`!key`), in the order they were added. Keys and
    /// arguments may be added in any order (a watchdog batch adds each hold's keys, then its
    /// arguments); Redis takes every key first.
    fn items(&self, key: bool) -> impl Iterator<Item = &[u8]> {
        let starts = std::iter::once(0).chain(self.items.iter().map(|item| item.end));
        starts
            .zip(self.items.iter())
            .filter(move |(_, item)| item.key == key)
            .map(|(start, item)| self.bytes.get(start..item.end).unwrap_or_default())
    }

    fn push(&mut self, item: &[u8], key: bool) {
        self.bytes.extend_from_slice(item);
        self.end_item(key);
    }

    fn end_item(&mut self, key: bool) {
        self.items.push(Item {
            end: self.bytes.len(),
            key,
        });
        self.keys += usize::from(key);
    }
}

impl redis::RedisWrite for Payload {
    fn write_arg(&mut self, arg: &[u8]) {
        self.push(arg, false);
    }

    fn write_arg_fmt(&mut self, arg: impl std::fmt::Display) {
        use std::io::Write;
        // Writing into a Vec fails only if `arg`'s own Display does; the argument is then
        // what it wrote, as with redis-rs's own commands.
        let _ = write!(self.bytes, "{arg}");
        self.end_item(false);
    }

    fn writer_for_next_arg(&mut self) -> impl std::io::Write + '_ {
        /// Appends to the buffer; the argument ends where the writer is dropped.
        struct NextArg<'a>(&'a mut Payload);
        impl Drop for NextArg<'_> {
            fn drop(&mut self) {
                self.0.end_item(false);
            }
        }
        impl std::io::Write for NextArg<'_> {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.bytes.extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        NextArg(self)
    }
}

impl ScriptCall {
    /// Starts an invocation of `script` with no keys and no arguments.
    pub fn new(script: &'static LuaScript) -> Self {
        Self::with_capacity(script, 0, 0)
    }

    /// Starts an invocation of `script` with room for `keys` keys and `args` arguments (a typed
    /// call knows both counts): adding that many does not reallocate the list of items, nor
    /// the buffer while they average at most 40 bytes (a lock's keys and ids do).
    pub fn with_capacity(script: &'static LuaScript, keys: usize, args: usize) -> Self {
        // Keys and arguments run to a few dozen bytes each.
        const BYTES_PER_ITEM: usize = 40;
        ScriptCall {
            script,
            payload: std::sync::Arc::new(Payload {
                bytes: Vec::with_capacity((keys + args) * BYTES_PER_ITEM),
                items: Vec::with_capacity(keys + args),
                keys: 0,
            }),
            rollback_unreplicated: false,
            in_flight: crate::in_flight::CountedIn::default(),
        }
    }

    /// Counts this call in `releases` while it is on its way to Redis as a release or
    /// give-back, until Redis confirms it or retrying it ends; for an acquire, from when its
    /// caller goes away until its give-back is under way (see [`ReleasesInFlight`]).
    ///
    /// [`ReleasesInFlight`]: crate::toolkit::ReleasesInFlight
    pub fn counted_in(
        mut self,
        releases: &std::sync::Arc<crate::in_flight::ReleasesInFlight>,
    ) -> Self {
        self.in_flight.add(releases);
        self
    }

    /// Appends a key (`KEYS[i]`).
    pub fn key(mut self, key: impl AsRef<str>) -> Self {
        std::sync::Arc::make_mut(&mut self.payload).push(key.as_ref().as_bytes(), true);
        self
    }

    /// Appends an argument (`ARGV[i]`). Values that encode as several Redis arguments (such as
    /// vectors) append each of them.
    pub fn arg(mut self, arg: impl ToRedisArgs) -> Self {
        arg.write_redis_args(std::sync::Arc::make_mut(&mut self.payload));
        self
    }

    /// The script this call runs.
    pub fn script(&self) -> &'static LuaScript {
        self.script
    }

    /// The first key of the call (the primitive's main key, which names it), or `""`.
    pub fn first_key(&self) -> &str {
        // Keys are only ever added as `str`s.
        self.payload
            .items(true)
            .next()
            .and_then(|key| std::str::from_utf8(key).ok())
            .unwrap_or("")
    }

    pub(crate) fn rolls_back_unreplicated(&self) -> bool {
        self.rollback_unreplicated
    }

    /// The `EVALSHA` command of this call.
    pub(crate) fn evalsha_cmd(&self, sharded: bool) -> redis::Cmd {
        self.command("EVALSHA", self.script.compiled(sharded).get_hash())
    }

    /// The `EVAL` command of this call, carrying the script's source: for a node that does
    /// not know the script yet.
    pub(crate) fn eval_cmd(&self, sharded: bool) -> redis::Cmd {
        self.command("EVAL", &self.script.source(sharded))
    }

    /// `<verb> <script> <number of keys> <keys> <args>`, built in buffers sized up front: a
    /// command grown argument by argument reallocates several times, on every request.
    fn command(&self, verb: &str, script: &str) -> redis::Cmd {
        let payload = &*self.payload;
        // The key count is at most 20 digits.
        let bytes = verb.len() + script.len() + 20 + payload.bytes.len();
        let mut cmd = redis::Cmd::with_capacity(3 + payload.items.len(), bytes);
        cmd.arg(verb).arg(script).arg(payload.keys);
        for item in payload.items(true).chain(payload.items(false)) {
            cmd.arg(item);
        }
        cmd
    }
}

/// The reply of a script that answers its common case (a grant) with one integer and every
/// other case with a list of integers, such as the locks' acquires: Redis spends measurably
/// more time sending a table than an integer, so the path every caller takes gets the integer.
///
/// ```
/// use redisync_core::toolkit::IntOrList;
/// use redisync_core::redis::{FromRedisValue, Value};
/// let grant = IntOrList::from_redis_value(Value::Int(7)).unwrap();
/// assert_eq!(grant, IntOrList::Int(7));
/// let busy = IntOrList::from_redis_value(Value::Array(vec![Value::Int(0), Value::Int(250)]));
/// assert_eq!(busy.unwrap(), IntOrList::List(vec![0, 250]));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IntOrList {
    /// The script answered with one integer.
    Int(i64),
    /// The script answered with a table of integers.
    List(Vec<i64>),
}

impl redis::FromRedisValue for IntOrList {
    fn from_redis_value(value: redis::Value) -> std::result::Result<Self, redis::ParsingError> {
        match value {
            redis::Value::Int(n) => Ok(IntOrList::Int(n)),
            list => Vec::<i64>::from_redis_value(list).map(IntOrList::List),
        }
    }
}

/// Declares a script of the calling crate's `lua/` directory, with the preludes it builds on,
/// and its typed call: a struct with one named field per `KEYS` entry and per `ARGV` entry,
/// in order, whose [`call`](ScriptCall) is the only way the crate builds a request for it.
///
/// The script's source is `lua/<file>.lua` of the calling crate (its `lua` directory is a link
/// to the repository's `lua/`, the one home of every script), after the listed preludes. The
/// declaration is checked when the crate compiles: the script must use exactly as many
/// `KEYS[n]` and `ARGV[n]` as the struct names (the highest literal index of each in its own
/// file, header included), so a key added on one side only does not build.
///
/// ```text
/// redisync_core::lua_script! {
///     /// Takes a lock or re-enters it (`lua/lock_acquire.lua`).
///     pub(crate) struct Acquire = new "lock_acquire" for "lock"
///         after ["lock_prelude", "wake_prelude"] {
///         keys { hash, fence, attempt_record, waiters }
///         args { owner: &'a str, lease_ms: u64, attempt: &'a str }
///     }
/// }
/// let call = Acquire { hash: "k", fence: "f", attempt_record: "r", waiters: "w",
///                      owner: "o", lease_ms: 30_000, attempt: "a" }.call();
/// ```
///
/// A script whose last keys and arguments matter only on some calls may name them in an
/// `optional` group after the others, with the condition under which `call` leaves them off
/// (the script takes their absence as the values that do nothing, and its header says
/// which). Redis spends time on every key and argument a call sends, whether the script reads
/// it or not, so a hot path that does not need them sends the shorter request.
///
/// ```text
/// redisync_core::lua_script! {
///     pub(crate) struct Release = new "lock_release" for "lock" {
///         keys { hash }
///         args { attempt: &'a str }
///         optional {
///             left_off_when |call: &Self| call.remember_ms == 0;
///             keys { attempt_record }
///             args { remember_ms: u64 }
///         }
///     }
/// }
/// ```
///
/// `new` declares a script that may write, `read_only` one that only reads
/// ([`LuaScript::read_only`]); `for` names the kind of primitive it belongs to
/// ([`LuaScript::kind`]: metrics and traces are labelled with it). Scripts whose keys or
/// arguments repeat per item (the watchdog's batches) declare only the script, with
/// `static NAME = new "file" for "kind" after [..];`, and build their calls next to it.
#[macro_export]
macro_rules! lua_script {
    (
        $(#[$meta:meta])*
        $vis:vis struct $call:ident = $ctor:ident $file:literal for $kind:literal
            $(after [$($prelude:literal),* $(,)?])? {
            keys { $($key:ident),* $(,)? }
            args { $($arg:ident : $ty:ty),* $(,)? }
            $(optional {
                left_off_when $left_off:expr;
                keys { $($optional_key:ident),* $(,)? }
                args { $($optional_arg:ident : $optional_ty:ty),* $(,)? }
            })?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug)]
        $vis struct $call<'a> {
            $(
                #[doc = concat!("`KEYS`: ", stringify!($key), " (see the script's header).")]
                pub $key: &'a str,
            )*
            $($(
                #[doc = concat!("`KEYS`: ", stringify!($optional_key),
                    " (optional: see the script's header).")]
                pub $optional_key: &'a str,
            )*)?
            $(
                #[doc = concat!("`ARGV`: ", stringify!($arg), " (see the script's header).")]
                pub $arg: $ty,
            )*
            $($(
                #[doc = concat!("`ARGV`: ", stringify!($optional_arg),
                    " (optional: see the script's header).")]
                pub $optional_arg: $optional_ty,
            )*)?
        }

        impl $call<'_> {
            /// The script this call runs.
            #[allow(dead_code)]
            $vis fn script() -> &'static $crate::LuaScript {
                static SCRIPT: $crate::LuaScript =
                    $crate::lua_script!(@script $ctor $file $(after [$($prelude),*])?)
                        .of_kind($kind);
                &SCRIPT
            }

            /// The request: the script with these keys and arguments, in the script's order
            /// (without the optional ones where the declaration says they are left off).
            $vis fn call(&self) -> $crate::ScriptCall {
                $(
                    let left_off: fn(&Self) -> bool = $left_off;
                    if left_off(self) {
                        return self.call_without_optional();
                    }
                )?
                $crate::ScriptCall::with_capacity(
                    Self::script(),
                    <[&str]>::len(&[$(stringify!($key),)* $($(stringify!($optional_key),)*)?]),
                    <[&str]>::len(&[$(stringify!($arg),)* $($(stringify!($optional_arg),)*)?]),
                )
                    $(.key(self.$key))*
                    $($(.key(self.$optional_key))*)?
                    $(.arg(&self.$arg))*
                    $($(.arg(&self.$optional_arg))*)?
            }

            $crate::lua_script!(@without_optional [$(group $($optional_key)* $($optional_arg)*)?]
                ($($key),*) ($($arg),*));
        }

        const _: () = $crate::check_script_contract(
            $file,
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/lua/", $file, ".lua")),
            <[&str]>::len(&[$(stringify!($key),)* $($(stringify!($optional_key),)*)?]),
            <[&str]>::len(&[$(stringify!($arg),)* $($(stringify!($optional_arg),)*)?]),
        );
        const _: () = $crate::check_publishing(
            $crate::lua_script!(@source $file $(after [$($prelude),*])?),
        );
    };
    (
        $(#[$meta:meta])*
        $vis:vis static $name:ident = $ctor:ident $file:literal for $kind:literal
            $(after [$($prelude:literal),* $(,)?])?;
    ) => {
        $(#[$meta])*
        $vis static $name: $crate::LuaScript =
            $crate::lua_script!(@script $ctor $file $(after [$($prelude),*])?).of_kind($kind);
        const _: () = $crate::check_publishing(
            $crate::lua_script!(@source $file $(after [$($prelude),*])?),
        );
    };
    // A typed call's `call_without_optional`, only for a script with an optional group, which
    // must name something to leave off.
    (@without_optional [] ($($key:ident),*) ($($arg:ident),*)) => {};
    (@without_optional [group] ($($key:ident),*) ($($arg:ident),*)) => {
        compile_error!("an optional group names at least one key or argument");
    };
    (@without_optional [group $($optional:ident)+] ($($key:ident),*) ($($arg:ident),*)) => {
        /// The request without the optional keys and arguments, which the script then takes
        /// as the values that do nothing (see its header).
        fn call_without_optional(&self) -> $crate::ScriptCall {
            $crate::ScriptCall::with_capacity(
                Self::script(),
                <[&str]>::len(&[$(stringify!($key),)*]),
                <[&str]>::len(&[$(stringify!($arg),)*]),
            )
                $(.key(self.$key))*
                $(.arg(&self.$arg))*
        }
    };
    (@script $ctor:ident $file:literal $(after [$($prelude:literal),*])?) => {
        $crate::LuaScript::$ctor(
            $file,
            $crate::lua_script!(@source $file $(after [$($prelude),*])?),
        )
    };
    (@source $file:literal $(after [$($prelude:literal),*])?) => {
        concat!(
            $($(include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/lua/", $prelude, ".lua")),)*)?
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/lua/", $file, ".lua"))
        )
    };
}

/// The compile-time check behind [`lua_script!`]: `source` (one script's own file) uses exactly
/// `keys` `KEYS[n]` and `args` `ARGV[n]` (by the highest literal index of each). Panics
/// otherwise, which fails the build when evaluated in a constant; the compiler's report
/// points at the declaration (constant evaluation cannot format `file` into the message).
#[doc(hidden)]
pub const fn check_script_contract(_file: &str, source: &str, keys: usize, args: usize) {
    if highest_index(source, b"KEYS[") != keys {
        panic!("a script uses another number of KEYS than its typed call names");
    }
    if highest_index(source, b"ARGV[") != args {
        panic!("a script uses another number of ARGV than its typed call names");
    }
}

/// The compile-time check that a script which publishes (itself or through a prelude) comes
/// after `lua/publish_prelude.lua`, which defines `publish`: without it the call would look up
/// an undefined global and fail only when the script first publishes, half way through its
/// writes.
#[doc(hidden)]
pub const fn check_publishing(source: &str) {
    if count(source, b"publish(") > 0 && count(source, b"local function publish(") == 0 {
        panic!("a script publishes but does not come after publish_prelude");
    }
}

/// How often `marker` occurs in `source`.
const fn count(source: &str, marker: &[u8]) -> usize {
    let bytes = source.as_bytes();
    let mut found = 0;
    let mut at = 0;
    while at + marker.len() <= bytes.len() {
        let mut matched = 0;
        while matched < marker.len() && bytes[at + matched] == marker[matched] {
            matched += 1;
        }
        if matched == marker.len() {
            found += 1;
        }
        at += 1;
    }
    found
}

/// The highest `n` in `<marker>n]` anywhere in `source` (0 if none).
const fn highest_index(source: &str, marker: &[u8]) -> usize {
    let bytes = source.as_bytes();
    let mut highest = 0;
    let mut at = 0;
    while at + marker.len() < bytes.len() {
        let mut matched = 0;
        while matched < marker.len() && bytes[at + matched] == marker[matched] {
            matched += 1;
        }
        if matched == marker.len() {
            let mut end = at + matched;
            let mut index = 0;
            while end < bytes.len() && bytes[end].is_ascii_digit() {
                index = index * 10 + (bytes[end] - b'0') as usize;
                end += 1;
            }
            if end > at + matched && end < bytes.len() && bytes[end] == b']' && index > highest {
                highest = index;
            }
        }
        at += 1;
    }
    highest
}

/// Every script file of the repository's `lua/` directory: its path and its source. For the
/// tests that check every file against a rule the client relies on.
#[cfg(test)]
fn lua_files() -> Vec<(std::path::PathBuf, String)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../lua");
    std::fs::read_dir(dir)
        .expect("lua directory")
        .map(|entry| entry.expect("lua file").path())
        .filter(|path| path.extension().is_some_and(|e| e == "lua"))
        .map(|path| {
            let source = std::fs::read_to_string(&path).expect("lua source");
            (path, source)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sharded variant is made by rewriting one exact spelling of the publish call; a
    /// script that published any other way would keep broadcasting on a cluster, and one that
    /// published with `redis.call` would fail half way for a user without channel access.
    /// So the one spelling is in `publish_prelude`, and no other file publishes by itself.
    #[test]
    fn every_script_publishes_in_the_one_spelling_the_cluster_variant_rewrites() {
        let mut publishing = 0;
        for (path, source) in lua_files() {
            let code: String = source
                .lines()
                .map(|line| line.split("--").next().unwrap_or(""))
                .collect::<Vec<_>>()
                .join("\n");
            // Commands are named in quotes ('PUBLISH', "spublish"); `publish(` is the prelude's
            // function.
            let upper = code.to_ascii_uppercase();
            let mentions = upper.matches("PUBLISH'").count() + upper.matches("PUBLISH\"").count();
            let rewritable = code.matches(PUBLISH).count();
            assert_eq!(mentions, rewritable, "{}", path.display());
            if path
                .file_name()
                .is_some_and(|name| name != "publish_prelude.lua")
            {
                assert_eq!(rewritable, 0, "{} publishes by itself", path.display());
            }
            publishing += rewritable;
        }
        assert_eq!(publishing, 1, "the prelude's one publish call");
        static SCRIPT: LuaScript = LuaScript::new("t", "redis.pcall('PUBLISH', KEYS[1], 1)");
        assert_ne!(SCRIPT.compiled(true).get_hash(), SCRIPT.sha1());
        static PROTECTED: LuaScript =
            LuaScript::new("p", "return redis.pcall('PUBLISH', KEYS[1], 1)");
        assert_eq!(
            PROTECTED.source(true),
            "return redis.pcall('SPUBLISH', KEYS[1], 1)"
        );
    }

    #[test]
    fn the_contract_check_finds_the_highest_literal_index() {
        let source =
            "-- KEYS[1] a\n-- KEYS[i] per item\nredis.call('GET', KEYS[12])\nlocal x = ARGV[3]";
        assert_eq!(highest_index(source, b"KEYS["), 12);
        assert_eq!(highest_index(source, b"ARGV["), 3);
        assert_eq!(highest_index("no keys", b"KEYS["), 0);
        assert_eq!(highest_index("KEYS[", b"KEYS["), 0);
        check_script_contract("t", source, 12, 3);
        assert!(std::panic::catch_unwind(|| check_script_contract("t", source, 11, 3)).is_err());
    }

    #[test]
    fn a_script_that_publishes_needs_the_publish_prelude() {
        let prelude = include_str!("../../../lua/publish_prelude.lua");
        let script = "if x then publish(KEYS[1], 'w') end";
        check_publishing("return redis.call('GET', KEYS[1])");
        check_publishing(&format!("{prelude}{script}"));
        assert!(std::panic::catch_unwind(|| check_publishing(script)).is_err());
    }

    /// Keys and arguments share one buffer, yet the command sends every key first, in the
    /// order added, whatever order they were added in (a watchdog batch alternates each
    /// hold's keys and arguments); a value that encodes as several arguments adds each.
    #[test]
    fn a_call_sends_its_keys_first_and_each_item_whole() {
        static SCRIPT: LuaScript = LuaScript::new("t", "return 1");
        let call = ScriptCall::new(&SCRIPT)
            .arg(30_000u64)
            .key("k1")
            .arg(vec!["a", "bb"])
            .key(String::from("k2"))
            .arg("")
            .arg(-7i64);
        assert_eq!(call.first_key(), "k1");
        let cmd = call.evalsha_cmd(false);
        let args: Vec<&[u8]> = cmd
            .args_iter()
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => bytes,
                _ => b"(not a plain argument)",
            })
            .collect();
        let expected: Vec<&[u8]> = vec![
            b"EVALSHA",
            SCRIPT.sha1().as_bytes(),
            b"2",
            b"k1",
            b"k2",
            b"30000",
            b"a",
            b"bb",
            b"",
            b"-7",
        ];
        assert_eq!(args, expected);
        assert_eq!(ScriptCall::new(&SCRIPT).arg(1).first_key(), "");
    }
}
