//! Counting what Redis runs, with `INFO commandstats`.
//!
//! A pass resets the server's counters (`CONFIG RESETSTAT`), runs the work, and reads `INFO
//! commandstats`: every command Redis ran in between, **including the commands scripts ran
//! inside Redis**, per command name. That is the server-side cost of an operation (what a
//! script does is work for Redis's single core, even if it is one request). The scripts
//! themselves show up as `EVALSHA` (or `EVAL`), which is also how many scripts were sent.
//!
//! Requests (commands clients sent) cannot be told apart from a script's own commands here;
//! they come from MONITOR ([`crate::monitor`]), which a pass can run alongside, since neither
//! is timed. The benchmark's server is its own, so nothing else runs on it during a pass.

use std::collections::BTreeMap;

use redisync_test_harness::RedisServer;

use crate::monitor::CommandCounter;

/// Commands that run scripts. A script cannot call another, so these are all sent by
/// clients.
const SCRIPT_COMMANDS: [&str; 6] = [
    "evalsha",
    "eval",
    "evalsha_ro",
    "eval_ro",
    "fcall",
    "fcall_ro",
];

/// What Redis ran during a pass: calls per command name (lower case, subcommands written
/// `client|setinfo` as Redis does).
#[derive(Debug, Default, Clone)]
pub struct Commands {
    calls: BTreeMap<String, u64>,
    /// Microseconds Redis spent running each command (`usec`), per command name.
    usec: BTreeMap<String, u64>,
}

impl Commands {
    /// Adds the calls of `other`: one count over several passes.
    pub fn merge(&mut self, other: Commands) {
        for (command, calls) in other.calls {
            *self.calls.entry(command).or_default() += calls;
        }
        for (command, usec) in other.usec {
            *self.usec.entry(command).or_default() += usec;
        }
    }

    /// Every command Redis ran, those run by scripts included.
    pub fn total(&self) -> u64 {
        self.calls.values().sum()
    }

    /// Scripts run (`EVALSHA`, `EVAL`, and their read-only and function twins).
    pub fn scripts(&self) -> u64 {
        SCRIPT_COMMANDS.iter().map(|c| self.get(c)).sum()
    }

    /// Microseconds Redis spent running scripts, the commands they ran included: their whole
    /// cost to Redis's core but for reading requests and writing replies. (Commands clients
    /// send directly are not in it: a script's own commands cannot be told apart from those.)
    pub fn script_usec(&self) -> u64 {
        SCRIPT_COMMANDS
            .iter()
            .filter_map(|c| self.usec.get(*c))
            .sum()
    }

    /// Calls of one command (lower case).
    pub fn get(&self, command: &str) -> u64 {
        self.calls.get(command).copied().unwrap_or(0)
    }

    /// A compact breakdown per operation: `EVALSHA 2, HSET 1, INCR 0.5`, most frequent first,
    /// counts divided by `ops`.
    pub fn breakdown(&self, ops: u64) -> String {
        let mut calls: Vec<(&String, &u64)> = self.calls.iter().filter(|(_, n)| **n > 0).collect();
        calls.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        calls
            .iter()
            .map(|(name, n)| format!("{} {}", name.to_ascii_uppercase(), per_op(**n, ops.max(1))))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Parses `INFO commandstats` (`cmdstat_<name>:calls=N,usec=...` lines).
    fn parse(info: &str) -> Self {
        let mut calls = BTreeMap::new();
        let mut usec = BTreeMap::new();
        for line in info.lines() {
            let Some((name, value)) = line.trim_end_matches('\r').split_once(':') else {
                continue;
            };
            let Some(name) = name.strip_prefix("cmdstat_") else {
                continue;
            };
            let field = |prefix: &str| {
                value
                    .split(',')
                    .find_map(|part| part.strip_prefix(prefix))
                    .and_then(|n| n.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            calls.insert(name.to_owned(), field("calls="));
            usec.insert(name.to_owned(), field("usec="));
        }
        Commands { calls, usec }
    }

    /// Takes away the commands the measurement itself sent.
    fn without(mut self, own: &[&str]) -> Self {
        for name in own {
            if let Some(n) = self.calls.get_mut(*name) {
                *n = n.saturating_sub(1);
            }
        }
        self.calls.retain(|_, n| *n > 0);
        self
    }
}

/// `n / ops` written short: `2`, `0.5`, `1.33`; `<0.01` for rare ones, which are not none.
fn per_op(n: u64, ops: u64) -> String {
    let v = n as f64 / ops as f64;
    if n > 0 && v < 0.005 {
        return "<0.01".to_owned();
    }
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// A counted stretch of work. Start it when the clients are connected and warmed up (their
/// connection set-up is not part of an operation), finish it when the work is done.
pub struct Pass {
    /// Opened before the reset, so its own set-up (`HELLO`, `CLIENT SETINFO`) is not counted;
    /// the reset, the MONITOR marker and the final `INFO` go through it.
    conn: redis::Connection,
    monitor: Option<CommandCounter>,
}

impl Pass {
    /// Resets the server's command statistics and, with `requests`, starts MONITOR too.
    pub fn start(server: &RedisServer, requests: bool) -> Self {
        let mut conn = server.connection();
        let reset: redis::RedisResult<()> = redis::cmd("CONFIG").arg("RESETSTAT").query(&mut conn);
        if let Err(e) = reset {
            // Not a measurement problem worth stopping a run for: the figures will show it.
            eprintln!("CONFIG RESETSTAT failed: {e}");
        }
        let monitor = requests.then(|| CommandCounter::start(server));
        Pass { conn, monitor }
    }

    /// What Redis ran since [`start`](Self::start), without the pass's own commands, and
    /// the requests clients sent if MONITOR was on.
    pub fn finish(mut self) -> (Commands, Option<u64>) {
        let mut own = vec!["config|resetstat"];
        let requests = self.monitor.take().map(|m| {
            own.extend(["monitor", "echo"]);
            m.stop_on(&mut self.conn)
        });
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut self.conn)
            .unwrap_or_default();
        (Commands::parse(&info).without(&own), requests)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "# Commandstats\r\n\
        cmdstat_evalsha:calls=200,usec=900,usec_per_call=4.50,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_hset:calls=100,usec=90,usec_per_call=0.90,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_publish:calls=50,usec=90,usec_per_call=1.80,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_config|resetstat:calls=1,usec=9,usec_per_call=9.00,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_echo:calls=1,usec=1,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\n";

    #[test]
    fn parses_commandstats_and_leaves_out_the_pass_itself() {
        let c = Commands::parse(INFO).without(&["config|resetstat", "echo"]);
        assert_eq!(c.total(), 350);
        assert_eq!(c.scripts(), 200);
        assert_eq!(c.get("publish"), 50);
        assert_eq!(c.get("echo"), 0);
        assert_eq!(c.breakdown(100), "EVALSHA 2, HSET 1, PUBLISH 0.5");
        // The scripts' time, their own commands' included; not the commands' again.
        assert_eq!(c.script_usec(), 900);
    }

    #[test]
    fn per_op_is_short() {
        assert_eq!(per_op(4, 2), "2");
        assert_eq!(per_op(1, 3), "0.33");
        assert_eq!(per_op(3, 2), "1.5");
        assert_eq!(per_op(0, 2), "0");
        assert_eq!(per_op(1, 1000), "<0.01");
    }
}
