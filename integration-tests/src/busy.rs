//! A server kept busy by a long Lua script, so that every other client's commands are refused
//! with `BUSY` errors (a slow script of another application, or a `SCRIPT`/`FUNCTION` that
//! spins; fault F10 of the reliability plan, slow Redis).
//!
//! [`RedisServer::busy_for`] lowers the server's `busy-reply-threshold` (`lua-time-limit`
//! before Redis 7) to a few milliseconds and runs, on a connection of its own on a background
//! thread, a script that spins on `redis.call('TIME')` for the given time. Once a script has
//! run longer than the threshold, Redis answers every other command, `EVALSHA` included, with
//! `BUSY Redis is busy running a script` (only `SCRIPT KILL`, `FUNCTION KILL` and `SHUTDOWN
//! NOSAVE` are served). The call returns once the server answers `BUSY`; the returned
//! [`BusyScript`] waits for the script's end ([`wait`](BusyScript::wait), or when dropped), or
//! ends it early with `SCRIPT KILL` ([`kill`](BusyScript::kill)). The threshold is set back to
//! its previous value when the script ends.
//!
//! The script only reads the clock, and counts only small forward steps of it, so a jump of a
//! [fake clock](crate::clock) neither ends it early nor makes it run for ever.
//!
//! ```no_run
//! use std::time::Duration;
//! use redisync_test_harness::RedisServer;
//!
//! let server = RedisServer::start();
//! let busy = server.busy_for(Duration::from_secs(2));
//! assert!(server.try_cmd(&["GET", "k"]).is_err()); // BUSY
//! let ran = busy.wait();
//! println!("the script ran {ran:?}");
//! ```

use std::fmt;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::RedisServer;

/// The `busy-reply-threshold` set while a script spins, in milliseconds: small, so that
/// `BUSY` starts almost at once, but not 0 (which means "never").
const BUSY_THRESHOLD_MS: u64 = 5;

/// How long [`RedisServer::busy_for`] waits for the first `BUSY` reply.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Spins for `ARGV[1]` milliseconds of server time. Steps of `TIME` that go backwards or
/// forwards by more than 100 ms (a clock jump, not time spent spinning) are not counted.
/// Returns the number of `TIME` calls it made.
const SPIN_SCRIPT: &str = r"
local function now_us()
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local left = tonumber(ARGV[1]) * 1000
local last = now_us()
local calls = 0
while left > 0 do
    local now = now_us()
    local step = now - last
    if step > 0 and step < 100000 then
        left = left - step
    end
    last = now
    calls = calls + 1
end
return calls
";

/// A Lua script keeping one server busy, started by [`RedisServer::busy_for`]. Dropping it
/// waits until the script has ended (and the server serves other clients again).
#[must_use = "dropping a BusyScript waits until its script has ended"]
pub struct BusyScript {
    port: u16,
    password: Option<String>,
    /// Answers how long the script ran, or why it failed; `None` once joined.
    thread: Option<JoinHandle<Result<Duration, String>>>,
}

impl RedisServer {
    /// Keeps the server busy for `duration`: every other client's commands get `BUSY` errors
    /// meanwhile. Returns once the server answers `BUSY` (a few milliseconds after the
    /// script starts), or once the script has already ended if `duration` was shorter than
    /// that. See the [module documentation](crate::busy).
    ///
    /// While the script runs, the server's `busy-reply-threshold` is a few milliseconds, and
    /// the harness' own helpers (such as [`cmd`](Self::cmd)) fail or panic with `BUSY` like
    /// any other client. Do not start a second one before the first has ended: each sets the
    /// threshold back to what it found.
    ///
    /// # Panics
    ///
    /// Panics if the server cannot be configured, the thread cannot be started, or no `BUSY`
    /// reply comes within 10 s.
    pub fn busy_for(&self, duration: Duration) -> BusyScript {
        let mut control = self.helper_connection();
        let (parameter, previous) = busy_threshold(&mut control).unwrap_or_else(|e| {
            panic!(
                "redis-server at {} has neither busy-reply-threshold nor lua-time-limit: {e}",
                self.url()
            )
        });
        redis::cmd("CONFIG")
            .arg("SET")
            .arg(parameter)
            .arg(BUSY_THRESHOLD_MS)
            .exec(&mut control)
            .unwrap_or_else(|e| panic!("CONFIG SET {parameter} failed: {e}"));
        // No read timeout: the reply comes when the script ends.
        let mut script = self.connection();
        let millis = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
        let thread = thread::Builder::new()
            .name(format!("busy-script-{}", self.port()))
            .spawn(move || {
                let started = Instant::now();
                let outcome = redis::cmd("EVAL")
                    .arg(SPIN_SCRIPT)
                    .arg(0)
                    .arg(millis)
                    .query::<i64>(&mut script);
                let ran = started.elapsed();
                let restored = redis::cmd("CONFIG")
                    .arg("SET")
                    .arg(parameter)
                    .arg(&previous)
                    .exec(&mut script);
                match outcome {
                    Ok(_) => {}
                    // Ended by `BusyScript::kill`.
                    Err(e) if e.to_string().contains("killed") => {}
                    Err(e) => return Err(format!("the busy script failed: {e}")),
                }
                restored
                    .map(|()| ran)
                    .map_err(|e| format!("setting {parameter} back to {previous} failed: {e}"))
            })
            .unwrap_or_else(|e| panic!("could not start the busy script's thread: {e}"));
        let deadline = Instant::now() + BUSY_TIMEOUT;
        loop {
            if let Err(e) = redis::cmd("PING").query::<String>(&mut control) {
                if e.code() == Some("BUSY") {
                    break;
                }
            }
            if thread.is_finished() {
                break;
            }
            if Instant::now() >= deadline {
                panic!(
                    "redis-server at {} never answered BUSY while the busy script ran",
                    self.url()
                );
            }
            thread::sleep(Duration::from_millis(1));
        }
        BusyScript {
            port: self.port(),
            password: self.password().map(str::to_owned),
            thread: Some(thread),
        }
    }
}

impl BusyScript {
    /// Whether the script has ended (and the threshold was set back).
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Waits until the script has ended and returns how long its `EVAL` took, as seen by
    /// the thread that sent it.
    ///
    /// # Panics
    ///
    /// Panics if the script failed (other than by [`kill`](Self::kill)), for instance
    /// because the server was stopped meanwhile, or the threshold could not be set back.
    pub fn wait(mut self) -> Duration {
        match self.join() {
            Some(Ok(ran)) => ran,
            Some(Err(message)) => panic!("{message}"),
            None => panic!("the busy script's thread panicked"),
        }
    }

    /// Ends the script early with `SCRIPT KILL` and waits until it has ended; returns how
    /// long it ran.
    ///
    /// # Panics
    ///
    /// Panics if the server cannot be reached, or as [`wait`](Self::wait).
    pub fn kill(self) -> Duration {
        let mut connection =
            redis::Client::open(crate::connection_info(self.port, self.password.as_deref()))
                .and_then(|client| client.get_connection_with_timeout(crate::CONNECT_TIMEOUT))
                .unwrap_or_else(|e| panic!("could not connect to send SCRIPT KILL: {e}"));
        match redis::cmd("SCRIPT").arg("KILL").exec(&mut connection) {
            Ok(()) => {}
            // The script ended by itself in the meantime.
            Err(e) if e.code() == Some("NOTBUSY") => {}
            Err(e) => panic!("SCRIPT KILL failed: {e}"),
        }
        self.wait()
    }

    /// Joins the thread once; `None` if it panicked or was joined already.
    fn join(&mut self) -> Option<Result<Duration, String>> {
        self.thread.take().and_then(|thread| thread.join().ok())
    }
}

impl Drop for BusyScript {
    fn drop(&mut self) {
        let _ = self.join();
    }
}

impl fmt::Debug for BusyScript {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BusyScript")
            .field("port", &self.port)
            .field("finished", &self.is_finished())
            .finish()
    }
}

/// The name of the server's busy threshold parameter and its value: `busy-reply-threshold`
/// (Redis 7), or `lua-time-limit` (older servers).
fn busy_threshold(
    connection: &mut redis::Connection,
) -> redis::RedisResult<(&'static str, String)> {
    let mut last = None;
    for parameter in ["busy-reply-threshold", "lua-time-limit"] {
        let reply: redis::RedisResult<Vec<String>> = redis::cmd("CONFIG")
            .arg("GET")
            .arg(parameter)
            .query(connection);
        match reply {
            Ok(pair) if pair.len() == 2 => return Ok((parameter, pair[1].clone())),
            Ok(_) => {}
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        redis::RedisError::from((redis::ErrorKind::Client, "no such parameter"))
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCRIPT: &str = "return 1";

    fn evalsha(connection: &mut redis::Connection, sha: &str) -> redis::RedisResult<i64> {
        redis::cmd("EVALSHA").arg(sha).arg(0).query(connection)
    }

    #[test]
    fn a_busy_server_answers_evalsha_with_busy_until_the_script_ends() {
        let server = RedisServer::start();
        let sha: String =
            redis::from_redis_value_ref(&server.cmd(&["SCRIPT", "LOAD", SCRIPT])).unwrap();
        let mut other = server.connection();
        assert_eq!(evalsha(&mut other, &sha).unwrap(), 1);

        let started = Instant::now();
        let busy = server.busy_for(Duration::from_millis(800));
        let mut refused = 0;
        while !busy.is_finished() {
            match evalsha(&mut other, &sha) {
                Err(e) => {
                    assert_eq!(e.code(), Some("BUSY"), "{e}");
                    refused += 1;
                }
                // Only once the script has ended.
                Ok(_) => assert!(started.elapsed() >= Duration::from_millis(700)),
            }
            thread::sleep(Duration::from_millis(20));
        }
        let ran = busy.wait();
        assert!(refused >= 10, "only {refused} EVALSHA refused with BUSY");
        assert!(
            ran >= Duration::from_millis(800),
            "the script ran {ran:?} instead of 800 ms"
        );
        assert_eq!(evalsha(&mut other, &sha).unwrap(), 1, "served again");
        let threshold: Vec<String> =
            redis::from_redis_value_ref(&server.cmd(&["CONFIG", "GET", "busy-reply-threshold"]))
                .unwrap();
        assert_eq!(threshold[1], "5000", "the threshold is set back");
    }

    #[test]
    fn a_busy_script_can_be_killed_early_and_dropping_waits() {
        let server = RedisServer::start();
        let busy = server.busy_for(Duration::from_secs(60));
        assert!(server.try_cmd(&["PING"]).is_err());
        let ran = busy.kill();
        assert!(ran < Duration::from_secs(30), "killed after {ran:?}");
        assert_eq!(
            server.cmd(&["PING"]),
            redis::Value::SimpleString("PONG".into())
        );

        let started = Instant::now();
        drop(server.busy_for(Duration::from_millis(300)));
        assert!(started.elapsed() >= Duration::from_millis(300));
        assert_eq!(
            server.cmd(&["PING"]),
            redis::Value::SimpleString("PONG".into())
        );
    }
}
