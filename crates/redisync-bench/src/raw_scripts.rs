//! Contenders that are not lock libraries but measuring rods: scripts sent from raw redis-rs
//! with the keys and arguments redisync sends on an uncontended `lock()` and `unlock()`.
//!
//! * [`Rod::Library`]: redisync's own plain-lock scripts. Held against the library in the
//!   same round, it tells the scripts' cost (their work inside Redis, their larger requests
//!   and replies) from the library's client code (guards, the watchdog, the waiting
//!   machinery), which the floor alone cannot.
//! * [`Rod::BareCommands`]: the commands those scripts run on that cycle, and nothing else, in
//!   two bare scripts. Against [`Rod::Library`]: what the scripts' Lua around the commands
//!   costs (preludes, branches, the registry and hand-over logic).
//! * [`Rod::Empty`]: two scripts that run no command. Against the floor: what sending a
//!   script costs rather than `SET`, before it does anything; against
//!   [`Rod::BareCommands`]: what the commands cost.
//! * [`Rod::StringHold`]: the least a lock that keeps redisync's guarantees on an
//!   uncontended cycle could run, in another layout: a hold kept in a string key, not a hash,
//!   taken by a script that checks the attempt record and the registry of waiters with one
//!   `EXISTS`, draws a fencing token with `INCR` and writes the hold with one `SET ... PX`,
//!   and freed by a compare-and-delete. No re-entry and no hand-over: against
//!   [`Rod::BareCommands`], what a string layout would buy, were redisync to change its
//!   layout for the uncontended path.
//!
//! * [`Rod::Functions`]: redisync's plain-lock scripts, word for word, loaded as one Redis
//!   Functions library and called with `FCALL` instead of `EVALSHA`. Against
//!   [`Rod::Library`]: what the calling convention costs. A script sent with `EVALSHA` runs
//!   its whole text on every call, and makes each prelude function anew as a closure; a
//!   function library runs its text once, when it is loaded, so a call runs only the body.
//!   redisync sends `EVALSHA` (every state change is one script, loaded on `NOSCRIPT`);
//!   this rod prices the alternative.
//!
//! Every rod sends the keys and arguments the library sends on that cycle, whether its
//! scripts read them or not: Redis spends time on each one.
//!
//! The library's scripts are declared here from the same files and preludes as in the lock
//! crate, so they are the same text; [`RawScripts::connect`] checks that Redis knows them by
//! the SHA1 the library loaded, and stops the run otherwise.

use redisync::layout::{KeyFamily, KeySpace, LockLayout};
use redisync::prelude::*;

use crate::lockers::{Contender, Locker, Section};
use crate::report::Scenario;

redisync::core::lua_script! {
    static ACQUIRE = new "lock_acquire" for "lock"
        after ["publish_prelude", "clock_prelude", "lock_prelude", "wake_prelude",
            "lock_hand_over_prelude"];
}

redisync::core::lua_script! {
    static RELEASE = new "lock_release" for "lock"
        after ["publish_prelude", "clock_prelude", "lock_prelude", "wake_prelude",
            "lock_hand_over_prelude"];
}

/// The acquire of [`Rod::BareCommands`]: the commands `lua/lock_acquire.lua` runs on a free
/// lock (one `EXISTS` of the attempt record, the hash and the registry; the fencing `INCR`;
/// the hold's `HSET` and `PEXPIRE`), and the busy answer.
const BARE_ACQUIRE: &str = "if redis.call('EXISTS', KEYS[3], KEYS[1], KEYS[4]) ~= 0 then \
     return {0, 0} end \
     local token = redis.call('INCR', KEYS[2]) \
     redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'count', '1', \
     'token', string.format('%d', token), 'a:' .. ARGV[3], '1') \
     redis.call('PEXPIRE', KEYS[1], ARGV[2]) \
     return token";

/// The release of [`Rod::BareCommands`]: the commands `lua/lock_release.lua` runs to free a
/// lock nobody waits for (the hold's `HMGET`, the hash's `DEL`).
const BARE_RELEASE: &str =
    "local hold = redis.call('HMGET', KEYS[1], 'a:' .. ARGV[1], 'count', 'w') \
     if not hold[1] then return -1 end \
     redis.call('DEL', KEYS[1]) \
     return 1";

/// The acquire of [`Rod::Empty`]: a grant's reply (a fencing token), and no command.
const EMPTY_ACQUIRE: &str = "return 1";

/// The release of [`Rod::Empty`]: a release's reply, and no command.
const EMPTY_RELEASE: &str = "return 1";

/// The acquire of [`Rod::StringHold`], with the library's keys and arguments (the hold's
/// string in place of the hash). Writes the attempt id (`ARGV[3]`) and the fencing token.
/// Returns the token, or {0} when the lock is held, the attempt was given back or clients
/// wait (the rod's scenarios never see that).
const STRING_HOLD_ACQUIRE: &str = "if redis.call('EXISTS', KEYS[1], KEYS[3], KEYS[4]) ~= 0 then \
     return {0} end \
     local token = redis.call('INCR', KEYS[2]) \
     redis.call('SET', KEYS[1], ARGV[3] .. ' ' .. string.format('%d', token), 'PX', ARGV[2]) \
     return token";

/// The release of [`Rod::StringHold`], with the library's keys and arguments: deletes the hold
/// if the attempt (`ARGV[1]`) holds it. Returns 1 when it did, -1 when the attempt holds
/// nothing.
const STRING_HOLD_RELEASE: &str = "local hold = redis.call('GET', KEYS[1]) \
     if hold and string.sub(hold, 1, #ARGV[1] + 1) == ARGV[1] .. ' ' then \
     redis.call('DEL', KEYS[1]) return 1 end \
     return -1";

/// The lock's preludes, as `lua_script!` puts them in front of the lock's scripts.
const LOCK_PRELUDES: [&str; 5] = [
    include_str!("../lua/publish_prelude.lua"),
    include_str!("../lua/clock_prelude.lua"),
    include_str!("../lua/lock_prelude.lua"),
    include_str!("../lua/wake_prelude.lua"),
    include_str!("../lua/lock_hand_over_prelude.lua"),
];

/// The function names of [`Rod::Functions`]'s acquire and release.
const FUNCTION_ACQUIRE: &str = "redisync_bench_lock_acquire";
const FUNCTION_RELEASE: &str = "redisync_bench_lock_release";

/// [`Rod::Functions`]'s library: the lock's preludes once, then `lua/lock_acquire.lua` and
/// `lua/lock_release.lua`, each the body of a function that takes `KEYS` and `ARGV` as its
/// parameters, as the scripts read them.
fn functions_library() -> String {
    let mut library = String::from("#!lua name=redisync_bench_lock\n");
    for prelude in LOCK_PRELUDES {
        library.push_str(prelude);
        library.push('\n');
    }
    for (name, body) in [
        (FUNCTION_ACQUIRE, include_str!("../lua/lock_acquire.lua")),
        (FUNCTION_RELEASE, include_str!("../lua/lock_release.lua")),
    ] {
        library.push_str(&format!(
            "redis.register_function('{name}', function(KEYS, ARGV)\n{body}\nend)\n"
        ));
    }
    library
}

/// Which scripts a [`RawScripts`] sends (see the module's docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rod {
    /// redisync's plain-lock scripts.
    Library,
    /// The commands of redisync's scripts on an uncontended cycle, in two bare scripts.
    BareCommands,
    /// Two scripts that run no command.
    Empty,
    /// A fenced, cancel-safe hold in a string key.
    StringHold,
    /// redisync's plain-lock scripts as Redis Functions, called with `FCALL`.
    Functions,
}

/// How one rod's acquire and release are called: `EVALSHA` with their SHA1s as Redis knows
/// them, or `FCALL` with their function names.
#[derive(Debug, Clone)]
pub struct RodScripts {
    verb: &'static str,
    acquire: String,
    release: String,
}

impl RodScripts {
    fn evalsha(acquire: String, release: String) -> Self {
        RodScripts {
            verb: "EVALSHA",
            acquire,
            release,
        }
    }
}

/// One task's lock, taken and released with one rod's scripts.
pub struct RawScripts {
    conn: redis::aio::ConnectionManager,
    scripts: RodScripts,
    /// The client whose ids the requests carry (`<client id>:<n>`, as the library's).
    client: Client,
    hash: String,
    fence: String,
    attempt_records: KeyFamily,
    waiters: String,
    offers: String,
    owner: String,
    lease_ms: u64,
}

impl RawScripts {
    /// Connections, a redisync client and `rod`'s scripts for lockers of lock names given
    /// later. The library's own cycle on a lock of its own loads its scripts, which are then
    /// checked to be the ones declared here; the other rods' are loaded here. As many
    /// connections as a redisync client's default pool: the rods send the library's
    /// requests as the library would, and many tasks' requests over one connection run
    /// slower than over four (scenario 3).
    pub async fn connect(
        url: &str,
        rod: Rod,
    ) -> (Vec<redis::aio::ConnectionManager>, Client, RodScripts) {
        let client = Client::connect(url).await.expect("connect");
        let warm_up = client.lock("bench:raw-scripts:warm-up");
        let guard = warm_up.lock().await.expect("lock");
        guard.unlock().await.expect("unlock");
        let server = redis::Client::open(url).expect("url");
        let mut pool = Vec::new();
        for _ in 0..redisync::core::DEFAULT_POOL_SIZE {
            pool.push(server.get_connection_manager().await.expect("connect"));
        }
        let mut conn = pool[0].clone();
        let known: Vec<bool> = redis::cmd("SCRIPT")
            .arg("EXISTS")
            .arg(ACQUIRE.sha1())
            .arg(RELEASE.sha1())
            .query_async(&mut conn)
            .await
            .expect("SCRIPT EXISTS");
        assert_eq!(
            known,
            [true, true],
            "the bench's copy of the lock's scripts is not what the library sends"
        );
        let scripts = match rod {
            Rod::Library => {
                RodScripts::evalsha(ACQUIRE.sha1().to_owned(), RELEASE.sha1().to_owned())
            }
            Rod::BareCommands => RodScripts::evalsha(
                load(&mut conn, BARE_ACQUIRE).await,
                load(&mut conn, BARE_RELEASE).await,
            ),
            Rod::Empty => RodScripts::evalsha(
                load(&mut conn, EMPTY_ACQUIRE).await,
                load(&mut conn, EMPTY_RELEASE).await,
            ),
            Rod::StringHold => RodScripts::evalsha(
                load(&mut conn, STRING_HOLD_ACQUIRE).await,
                load(&mut conn, STRING_HOLD_RELEASE).await,
            ),
            Rod::Functions => {
                let _: String = redis::cmd("FUNCTION")
                    .arg("LOAD")
                    .arg("REPLACE")
                    .arg(functions_library())
                    .query_async(&mut conn)
                    .await
                    .expect("FUNCTION LOAD");
                RodScripts {
                    verb: "FCALL",
                    acquire: FUNCTION_ACQUIRE.to_owned(),
                    release: FUNCTION_RELEASE.to_owned(),
                }
            }
        };
        (pool, client, scripts)
    }

    /// The locker of lock `name`, with one of the connections and the client
    /// [`connect`](Self::connect) made (a task of that client).
    pub fn new(
        conn: redis::aio::ConnectionManager,
        client: &Client,
        scripts: RodScripts,
        name: &str,
    ) -> Self {
        // The lock crate's key layout, under the client's prefix.
        let space = KeySpace::of(client.key_prefix(), name).expect("a valid lock name");
        let layout = LockLayout::new(&space);
        RawScripts {
            conn,
            scripts,
            client: client.clone(),
            hash: layout.hash,
            fence: layout.fence,
            attempt_records: layout.attempt_records,
            waiters: layout.waiters,
            offers: layout.offers,
            owner: format!("{}:{}", client.id(), serial()),
            lease_ms: client.watchdog_timeout().as_millis() as u64,
        }
    }

    /// The library's first try of `lock()`: not registered, no offer, nothing to take over,
    /// so its call leaves off the optional keys and arguments (see `lua/lock_acquire.lua`).
    /// Every rod's acquire takes the same keys and arguments.
    async fn acquire(&mut self, attempt: &str) -> Result<bool, String> {
        let reply: redis::Value = redis::cmd(self.scripts.verb)
            .arg(&self.scripts.acquire)
            .arg(4)
            .arg(&self.hash)
            .arg(&self.fence)
            .arg(self.attempt_records.of(attempt))
            .arg(&self.waiters)
            .arg(&self.owner)
            .arg(self.lease_ms)
            .arg(attempt)
            .query_async(&mut self.conn)
            .await
            .map_err(|e| e.to_string())?;
        // A grant is its fencing token, an integer; the other answers are tables.
        Ok(matches!(reply, redis::Value::Int(token) if token > 0))
    }

    /// A guard's release: no attempt record kept, so the call leaves it off (see
    /// `lua/lock_release.lua`). Every rod's release takes the same keys and arguments.
    async fn release(&mut self, attempt: &str) -> Result<(), String> {
        let _: i64 = redis::cmd(self.scripts.verb)
            .arg(&self.scripts.release)
            .arg(4)
            .arg(&self.hash)
            .arg(&self.waiters)
            .arg(&self.offers)
            .arg(&self.fence)
            .arg(attempt)
            .query_async(&mut self.conn)
            .await
            .map_err(|e| e.to_string())?;
        Ok(())
    }
}

/// Warns when scenario 1 saw [`Rod::BareCommands`] run other commands than the library's
/// scripts on an uncontended cycle: the lock's scripts changed what they run, and
/// `BARE_ACQUIRE` and `BARE_RELEASE` must follow, or their row measures something else.
pub fn check_bare_commands(uncontended: &Scenario) {
    let commands = |contender: Contender| {
        uncontended
            .get(contender.name())
            .and_then(|figures| figures.get_text("commands in Redis per cycle"))
            .map(per_cycle)
    };
    if let (Some(library), Some(bare)) = (
        commands(Contender::RedisyncScripts),
        commands(Contender::BareCommands),
    ) {
        if library != bare {
            eprintln!(
                "WARNING: the bare-commands rod runs {bare:?} per cycle, the library's scripts \
                 {library:?}: update BARE_ACQUIRE and BARE_RELEASE in raw_scripts.rs"
            );
        }
    }
}

/// The commands of a per-cycle breakdown (`EVALSHA 2, DEL 1, ..., INFO 0.01`) that run on
/// every cycle, with their counts: the measurement's own occasional commands are left out.
fn per_cycle(breakdown: &str) -> Vec<(String, String)> {
    let mut commands: Vec<(String, String)> = breakdown
        .split(", ")
        .filter_map(|entry| entry.rsplit_once(' '))
        .filter(|(_, count)| count.parse::<f64>().is_ok_and(|n| n >= 0.5))
        .map(|(name, count)| (name.to_owned(), count.to_owned()))
        .collect();
    commands.sort();
    commands
}

/// Loads `script` into Redis's script cache; returns its SHA1.
async fn load(conn: &mut redis::aio::ConnectionManager, script: &str) -> String {
    redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(script)
        .query_async(conn)
        .await
        .expect("SCRIPT LOAD")
}

/// Serials for owner and attempt ids, `<client id>:<serial>` as the library's: unique in the
/// run, however many clients share an id's first part.
fn serial() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

#[async_trait::async_trait]
impl Locker for RawScripts {
    async fn with_lock(&mut self, section: Section) -> Result<(), String> {
        // Busy only if another task held the same name: try again at once, as the floor does
        // (the scenarios this contender runs in never contend). Every try is an attempt of
        // its own, as the library's.
        let attempt = loop {
            let attempt = format!("{}:{}", self.client.id(), serial());
            if self.acquire(&attempt).await? {
                break attempt;
            }
            tokio::task::yield_now().await;
        };
        section.await;
        self.release(&attempt).await
    }
}

#[cfg(test)]
mod tests {
    use super::per_cycle;

    #[test]
    fn a_breakdown_keeps_the_commands_of_every_cycle() {
        let with_noise = per_cycle("EVALSHA 2, DEL 1, EXISTS 1, DBSIZE 0.01, INFO 0.01, PING 0.01");
        let without = per_cycle("EXISTS 1, EVALSHA 2, DEL 1");
        assert_eq!(with_noise, without);
        assert_ne!(
            per_cycle("EVALSHA 2, EXISTS 2"),
            per_cycle("EVALSHA 2, EXISTS 1")
        );
    }
}
