//! A server kept busy by a long Lua script, so that every other client's commands are refused
//! with `BUSY` errors (a slow script of another application, or a `SCRIPT`/`FUNCTION` that
//! spins: a slow Redis).
//!
//! [`RedisServer::busy_for`] lowers the server's `busy-reply-threshold` (`lua-time-limit`
//! before Redis 7) to a few milliseconds and runs, on a connection of its own on a background
//! thread, a script that spins until it is killed; a second thread ends it with `SCRIPT KILL`
//! once the given time has passed on the test's clock. Once a script has run longer than the
//! threshold, the server answers every other command, `EVALSHA` included, with `BUSY Redis is
//! busy running a script` (only `SCRIPT KILL`, `FUNCTION KILL` and `SHUTDOWN NOSAVE` are
//! served). The call returns once the server answers `BUSY`; the returned [`BusyScript`] waits
//! for the script's end ([`wait`](BusyScript::wait), or when dropped), or ends it early
//! ([`kill`](BusyScript::kill)). The threshold is set back to its previous value when the
//! script ends.
//!
//! The script reads no clock: `TIME` inside a script is frozen at the script's start on Redis
//! 7.2 and later (and on Valkey), and a [fake clock](crate::clock) may jump. So the same
//! script keeps every server busy for the same time.
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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::RedisServer;

/// The `busy-reply-threshold` set while a script spins, in milliseconds: small, so that
/// `BUSY` starts almost at once, but not 0 (which means "never").
const BUSY_THRESHOLD_MS: u64 = 5;

/// How long [`RedisServer::busy_for`] waits for the first `BUSY` reply.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Spins until `SCRIPT KILL` ends it. It writes nothing, so it may be killed at any time.
const SPIN_SCRIPT: &str = "while true do end";

/// A Lua script keeping one server busy, started by [`RedisServer::busy_for`]. Dropping it
/// waits until the script has ended (and the server serves other clients again).
#[must_use = "dropping a BusyScript waits until its script has ended"]
pub struct BusyScript {
    port: u16,
    /// Answers how long the script ran, or why it failed; `None` once joined.
    thread: Option<JoinHandle<Result<Duration, String>>>,
    /// Ends the script at once when sent to (or dropped); `None` once used.
    end_now: Option<mpsc::Sender<()>>,
    /// Sends `SCRIPT KILL` when the time is up or `end_now` says so.
    killer: Option<JoinHandle<Result<(), String>>>,
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
        let mut kill_connection = self.helper_connection();
        let ended = Arc::new(AtomicBool::new(false));
        let script_ended = ended.clone();
        let (script_started, started_at) = mpsc::channel::<Instant>();
        let thread = thread::Builder::new()
            .name(format!("busy-script-{}", self.port()))
            .spawn(move || {
                let started = Instant::now();
                let _ = script_started.send(started);
                let outcome = redis::cmd("EVAL")
                    .arg(SPIN_SCRIPT)
                    .arg(0)
                    .query::<redis::Value>(&mut script);
                let ran = started.elapsed();
                script_ended.store(true, Ordering::Release);
                let restored = redis::cmd("CONFIG")
                    .arg("SET")
                    .arg(parameter)
                    .arg(&previous)
                    .exec(&mut script);
                match outcome {
                    // Ended by the killer thread, as it should be.
                    Err(e) if e.to_string().contains("killed") => {}
                    Err(e) => return Err(format!("the busy script failed: {e}")),
                    Ok(reply) => return Err(format!("the busy script returned {reply:?}")),
                }
                restored
                    .map(|()| ran)
                    .map_err(|e| format!("setting {parameter} back to {previous} failed: {e}"))
            })
            .unwrap_or_else(|e| panic!("could not start the busy script's thread: {e}"));
        let (end_now, ended_early) = mpsc::channel::<()>();
        let killer = thread::Builder::new()
            .name(format!("busy-script-killer-{}", self.port()))
            .spawn(move || {
                // The time counts from when the script was sent. Either it is up, or the
                // script is to end now: kill it either way.
                let started = started_at.recv().unwrap_or_else(|_| Instant::now());
                let left = (started + duration).saturating_duration_since(Instant::now());
                let _ = ended_early.recv_timeout(left);
                kill_script(&mut kill_connection, &ended)
            })
            .unwrap_or_else(|e| panic!("could not start the busy script's killer: {e}"));
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
            thread: Some(thread),
            end_now: Some(end_now),
            killer: Some(killer),
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
    /// Panics if the script failed other than by being killed, for instance because the
    /// server was stopped meanwhile, or the threshold could not be set back.
    pub fn wait(mut self) -> Duration {
        match self.join() {
            Some(Ok(ran)) => ran,
            Some(Err(message)) => panic!("{message}"),
            None => panic!("the busy script's thread panicked"),
        }
    }

    /// Ends the script at once with `SCRIPT KILL` and waits until it has ended; returns how
    /// long it ran.
    ///
    /// # Panics
    ///
    /// As [`wait`](Self::wait).
    pub fn kill(mut self) -> Duration {
        if let Some(end_now) = self.end_now.take() {
            let _ = end_now.send(());
        }
        self.wait()
    }

    /// Joins both threads once; `None` if one panicked or they were joined already.
    fn join(&mut self) -> Option<Result<Duration, String>> {
        let ran = self.thread.take()?.join().ok()?;
        let killed = self.killer.take()?.join().ok()?;
        Some(killed.and(ran))
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

/// Sends `SCRIPT KILL` until the script's thread has its reply: a kill may come before the
/// script has started, and is then answered `NOTBUSY`.
fn kill_script(connection: &mut redis::Connection, ended: &AtomicBool) -> Result<(), String> {
    let deadline = Instant::now() + BUSY_TIMEOUT;
    while !ended.load(Ordering::Acquire) {
        match redis::cmd("SCRIPT").arg("KILL").exec(connection) {
            Ok(()) => {}
            Err(e) if e.code() == Some("NOTBUSY") => {}
            Err(e) => return Err(format!("SCRIPT KILL failed: {e}")),
        }
        if Instant::now() >= deadline {
            return Err("the busy script outlived SCRIPT KILL for 10 s".to_owned());
        }
        thread::sleep(Duration::from_millis(1));
    }
    Ok(())
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
