//! A `redis-server` whose wall clock the test moves at run time (the server's clock jumps),
//! with [libfaketime](https://github.com/wolfcw/libfaketime).
//!
//! [`RedisServer::start_with_fake_clock`] starts the server with `libfaketime.so.1` preloaded
//! and `FAKETIME_TIMESTAMP_FILE` pointing at a file in the server's directory that holds a
//! relative offset (`+0`, `+3600`, `-30`: seconds). [`RedisServer::set_clock_offset`] rewrites
//! that file (atomically, by renaming a new one over it) and, on a running server, checks with
//! `TIME` that the server's clock moved. `FAKETIME_NO_CACHE=1` makes libfaketime read the file
//! on every clock call, so a change applies to the very next one (at some cost: a loopback
//! `SET` or `GET` is served about 25% slower).
//!
//! What is faked, and why:
//!
//! * **The wall clock only** (`CLOCK_REALTIME`, `gettimeofday`, `time`): that is what Redis
//!   reads for key expiry (`PEXPIRE`, `PTTL`, `SET .. PX`) and for `TIME`, so a jump moves
//!   every deadline a script computed from `TIME` and every TTL at once.
//! * **Not the monotonic clock** (`FAKETIME_DONT_FAKE_MONOTONIC=1`): a real clock step (an NTP
//!   step, `date -s`, a VM restored from a snapshot) moves `CLOCK_REALTIME` only;
//!   `CLOCK_MONOTONIC` never jumps, least of all backwards. Redis runs its event loop timers
//!   (`serverCron`: active expiry, client timeouts) and measures script run time on the
//!   monotonic clock; faking it too would model something no machine does (a backward jump
//!   would stop `serverCron` for the whole jump).
//!
//! Debian's and Ubuntu's `redis-server` link the system's shared jemalloc, which clashes with
//! libfaketime (libfaketime issue #130: jemalloc reads the clock while libfaketime is still
//! setting itself up, and the server hangs before it listens). The harness therefore preloads
//! `libc.so.6` right after libfaketime: glibc's `malloc` then comes before jemalloc's in symbol
//! lookup and serves every allocation, while jemalloc only answers Redis's statistics calls
//! (so the `allocator_*` fields of `INFO memory` mean nothing on such a server). A
//! `redis-server` built with its bundled, prefixed jemalloc is unaffected.
//!
//! The offset is kept across [`RedisServer::restart`], like a host's clock would be.
//!
//! **A clock running at a rate.** [`RedisServer::set_clock_rate`] makes the server's wall
//! clock run faster (or slower) than the host's, as an NTP daemon slewing it or a drifting
//! oscillator would: `1.04` is 4 % fast, so a key set with `PX 2000` is gone after about
//! 1923 ms of host time. libfaketime counts the rate from when the process started, so
//! setting one moves the clock at once by `(rate − 1) ×` the server's age (a few tens of
//! milliseconds for a server a few seconds old) before it runs at the rate; only keys set
//! before that see the move (and so does a later change of rate, by the difference of the
//! rates). The rate is kept across restarts, counted from the new start.
//!
//! ```no_run
//! use redisync_test_harness::RedisServer;
//!
//! let server = RedisServer::start_with_fake_clock(&[]);
//! server.set_clock_offset(3600); // an hour ahead: every TTL shorter than that runs out
//! server.set_clock_offset(-30); // now 30 s behind the host: TTLs last 30 s longer
//! server.set_clock_offset(0);
//! ```

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::Ordering;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::RedisServer;

/// Name of the environment variable that gives the path of `libfaketime.so.1`.
pub const LIBFAKETIME_ENV: &str = "LIBFAKETIME";

/// Message used when libfaketime cannot be found.
const NOT_FOUND_MESSAGE: &str = "libfaketime was not found. Install it with \
     `apt-get install -y faketime libfaketime` (or run `scripts/setup.sh`), or set \
     LIBFAKETIME to the path of libfaketime.so.1, then run the tests again.";

/// Where distributions install the library, below a library directory.
const LIBRARY: &str = "faketime/libfaketime.so.1";

/// Library directories searched for [`LIBRARY`]; their subdirectories (the multiarch ones,
/// such as `x86_64-linux-gnu`) are searched too.
const LIBRARY_DIRS: [&str; 3] = ["/usr/lib", "/usr/lib64", "/usr/local/lib"];

/// The name of the offset file in the server's directory.
const OFFSET_FILE: &str = "faketime-offset";

/// How far the server's `TIME` may be from the host's clock plus the offset, beyond the time
/// the `TIME` round trip took, for [`RedisServer::set_clock_offset`] to accept the change.
const TIME_TOLERANCE: Duration = Duration::from_millis(250);

/// How long [`RedisServer::set_clock_offset`] waits for the server to report the new time.
const APPLY_TIMEOUT: Duration = Duration::from_secs(5);

/// How long apart [`RedisServer::set_clock_rate`] reads `TIME` to see the rate.
const RATE_WINDOW: Duration = Duration::from_millis(300);

/// How far the rate [`RedisServer::set_clock_rate`] sees may be from the one it set, beyond
/// what the round trips of `TIME` blur.
const RATE_TOLERANCE: f64 = 0.01;

/// The fake clock of one server: the library and the offset file.
pub(crate) struct FakeClock {
    library: PathBuf,
    file: PathBuf,
    /// The offset in seconds and the rate last written to `file`.
    offset: Mutex<(i64, f64)>,
}

impl FakeClock {
    /// Finds libfaketime and writes the initial offset (0) into `dir`.
    pub(crate) fn new(dir: &Path) -> Result<FakeClock, String> {
        let library = resolve_library(std::env::var_os(LIBFAKETIME_ENV))?;
        let clock = FakeClock {
            library,
            file: dir.join(OFFSET_FILE),
            offset: Mutex::new((0, 1.0)),
        };
        clock.write(0, 1.0)?;
        Ok(clock)
    }

    /// Sets up `command` to run with the fake clock.
    pub(crate) fn apply(&self, command: &mut Command) {
        let mut preload = OsString::from(&self.library);
        // See the module docs: glibc's malloc ahead of a shared jemalloc.
        preload.push(":libc.so.6");
        command
            .env("LD_PRELOAD", preload)
            .env("FAKETIME_TIMESTAMP_FILE", &self.file)
            .env("FAKETIME_NO_CACHE", "1")
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
            // Only the offset file decides; a stray variable of the test's environment must not.
            .env_remove("FAKETIME");
    }

    /// Whether the process `pid` has libfaketime mapped (so the preload took effect).
    pub(crate) fn is_loaded_in(&self, pid: u32) -> bool {
        let name = self
            .library
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        fs::read_to_string(format!("/proc/{pid}/maps"))
            .map(|maps| maps.lines().any(|line| line.ends_with(&name)))
            // Without /proc there is nothing to check; `set_clock_offset` still verifies.
            .unwrap_or(true)
    }

    /// Replaces the offset file atomically (a reader never sees half a file).
    fn write(&self, seconds: i64, rate: f64) -> Result<(), String> {
        let staged = self.file.with_extension("new");
        // libfaketime keeps a rate it read until it reads another: back at 1.0, say so.
        let had_rate = self.lock_offset().1 != 1.0;
        let spec = if rate == 1.0 && !had_rate {
            format!("{seconds:+}\n")
        } else {
            format!("{seconds:+} x{rate}\n")
        };
        fs::write(&staged, spec)
            .and_then(|()| fs::rename(&staged, &self.file))
            .map_err(|e| {
                format!(
                    "failed to write the fake clock's offset to {}: {e}",
                    self.file.display()
                )
            })?;
        *self.lock_offset() = (seconds, rate);
        Ok(())
    }

    fn lock_offset(&self) -> MutexGuard<'_, (i64, f64)> {
        self.offset.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl RedisServer {
    /// Like [`start_with`](Self::start_with), but the server's wall clock can be moved at run
    /// time with [`set_clock_offset`](Self::set_clock_offset); it starts at the host's time
    /// (offset 0). See the [module documentation](crate::clock) for how and what is faked.
    ///
    /// # Panics
    ///
    /// Panics if libfaketime cannot be found (the message says how to install it; the
    /// `LIBFAKETIME` environment variable may point at `libfaketime.so.1`), if it is not
    /// loaded into the server, or for the reasons of [`start_with`](Self::start_with).
    pub fn start_with_fake_clock(extra_args: &[&str]) -> RedisServer {
        Self::start_inner(extra_args, true)
    }

    /// Whether the server was started with [`start_with_fake_clock`](Self::start_with_fake_clock).
    pub fn has_fake_clock(&self) -> bool {
        self.fake_clock.is_some()
    }

    /// The offset of the server's wall clock from the host's, in seconds, as last set with
    /// [`set_clock_offset`](Self::set_clock_offset); `None` for a server without a fake
    /// clock.
    pub fn clock_offset(&self) -> Option<i64> {
        self.fake_clock.as_ref().map(|clock| clock.lock_offset().0)
    }

    /// The rate of the server's wall clock against the host's, as last set with
    /// [`set_clock_rate`](Self::set_clock_rate) (`1.0` unless set); `None` for a server
    /// without a fake clock.
    pub fn clock_rate(&self) -> Option<f64> {
        self.fake_clock.as_ref().map(|clock| clock.lock_offset().1)
    }

    /// Makes the server's wall clock run at `rate` times the host's (`1.04`: 4 % fast;
    /// `1.0`: at the host's pace again), keeping its offset. See the
    /// [module documentation](crate::clock) for the move this makes at once. Key expiry and
    /// `TIME` follow the new pace; the server's monotonic clock does not change.
    ///
    /// On a running server that is not [paused](Self::pause), this returns once `TIME`, read
    /// twice some 300 ms apart, shows the server's clock running at `rate` (within 1 %,
    /// beyond what the round trips blur).
    ///
    /// # Panics
    ///
    /// Panics if the server was not started with
    /// [`start_with_fake_clock`](Self::start_with_fake_clock), if `rate` is not a positive
    /// finite number, if the offset file cannot be written, or if `TIME` does not show the
    /// rate within 5 s.
    pub fn set_clock_rate(&self, rate: f64) {
        let Some(clock) = &self.fake_clock else {
            panic!(
                "redis-server on port {} has no fake clock: start it with \
                 RedisServer::start_with_fake_clock to change its clock's rate",
                self.port
            );
        };
        assert!(
            rate.is_finite() && rate > 0.0,
            "a clock rate must be a positive finite number, found {rate}"
        );
        let seconds = clock.lock_offset().0;
        clock
            .write(seconds, rate)
            .unwrap_or_else(|message| panic!("{message}"));
        if self.paused.load(Ordering::SeqCst) || !self.is_running() {
            return;
        }
        let deadline = Instant::now() + APPLY_TIMEOUT;
        loop {
            let first = self.timed_server_time();
            std::thread::sleep(RATE_WINDOW);
            let second = self.timed_server_time();
            let (low, high) = rate_bounds(first, second);
            if low - RATE_TOLERANCE <= rate && rate <= high + RATE_TOLERANCE {
                return;
            }
            if Instant::now() >= deadline {
                panic!(
                    "redis-server on port {} did not run its clock at {rate}x within \
                     {APPLY_TIMEOUT:?}: measured between {low} and {high} \
                     (is libfaketime working?)",
                    self.port
                );
            }
        }
    }

    /// The server's `TIME` with the host's clock read just before and just after.
    fn timed_server_time(&self) -> (SystemTime, SystemTime, SystemTime) {
        let before = SystemTime::now();
        let server = self.server_time();
        let after = SystemTime::now();
        (before, server, after)
    }

    /// Moves the server's wall clock to `seconds` ahead of the host's (behind if negative),
    /// at once: a jump from the current offset, forward or backward. Keys with a TTL expire
    /// by the new clock (a jump forward by more than a TTL ends it; a jump back lengthens it),
    /// and `TIME` reports the new time.
    ///
    /// On a running server that is not [paused](Self::pause), this returns once `TIME` shows
    /// the new offset (within 250 ms of the host's clock plus `seconds`, beyond the time the
    /// round trip took). A paused or stopped server picks the offset up when it runs again. A
    /// clock running at a rate other than 1 ([`set_clock_rate`](Self::set_clock_rate)) keeps
    /// its rate, and is not checked.
    ///
    /// # Panics
    ///
    /// Panics if the server was not started with
    /// [`start_with_fake_clock`](Self::start_with_fake_clock), if the offset file cannot be
    /// written, or if `TIME` does not show the new offset within 5 s.
    pub fn set_clock_offset(&self, seconds: i64) {
        let Some(clock) = &self.fake_clock else {
            panic!(
                "redis-server on port {} has no fake clock: start it with \
                 RedisServer::start_with_fake_clock to move its clock",
                self.port
            );
        };
        let rate = clock.lock_offset().1;
        clock
            .write(seconds, rate)
            .unwrap_or_else(|message| panic!("{message}"));
        // The check below assumes the host's pace.
        if rate != 1.0 || self.paused.load(Ordering::SeqCst) || !self.is_running() {
            return;
        }
        let deadline = Instant::now() + APPLY_TIMEOUT;
        loop {
            let before = SystemTime::now();
            let server = self.server_time();
            let after = SystemTime::now();
            let error = offset_error(seconds, before, server, after);
            if error <= TIME_TOLERANCE {
                return;
            }
            if Instant::now() >= deadline {
                panic!(
                    "redis-server on port {} did not apply the clock offset {seconds:+} s \
                     within {APPLY_TIMEOUT:?}: its TIME is {error:?} away from the host's \
                     clock plus the offset (is libfaketime working?)",
                    self.port
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The server's wall clock, from `TIME`.
    ///
    /// # Panics
    ///
    /// Panics if the command fails or its reply is not two integers.
    pub fn server_time(&self) -> SystemTime {
        let reply = self.cmd(&["TIME"]);
        let parts = redis::from_redis_value_ref::<(u64, u64)>(&reply)
            .unwrap_or_else(|e| panic!("unexpected TIME reply {reply:?}: {e}"));
        UNIX_EPOCH + Duration::from_secs(parts.0) + Duration::from_micros(parts.1)
    }
}

/// The slowest and fastest rate of the server's clock against the host's that two `TIME`
/// readings (each bracketed by the host's clock) allow.
fn rate_bounds(
    (before1, server1, after1): (SystemTime, SystemTime, SystemTime),
    (before2, server2, after2): (SystemTime, SystemTime, SystemTime),
) -> (f64, f64) {
    let secs = |from: SystemTime, to: SystemTime| {
        to.duration_since(from)
            .map_or(0.0, |elapsed| elapsed.as_secs_f64())
    };
    let server = secs(server1, server2);
    let longest = secs(before1, after2);
    let shortest = secs(after1, before2);
    let low = if longest > 0.0 { server / longest } else { 0.0 };
    let high = if shortest > 0.0 {
        server / shortest
    } else {
        f64::INFINITY
    };
    (low, high)
}

/// How far `server` lies outside `[before, after]` shifted by `seconds`.
fn offset_error(
    seconds: i64,
    before: SystemTime,
    server: SystemTime,
    after: SystemTime,
) -> Duration {
    let shift = Duration::from_secs(seconds.unsigned_abs());
    let shifted = |t: SystemTime| {
        if seconds >= 0 {
            t + shift
        } else {
            t - shift
        }
    };
    let (low, high) = (shifted(before), shifted(after));
    if server < low {
        low.duration_since(server).unwrap_or_default()
    } else {
        server.duration_since(high).unwrap_or_default()
    }
}

/// Finds `libfaketime.so.1`: `env_override` (the value of `LIBFAKETIME`) if set and
/// non-empty, otherwise the first `faketime/libfaketime.so.1` below a library directory or
/// one of its subdirectories.
fn resolve_library(env_override: Option<OsString>) -> Result<PathBuf, String> {
    if let Some(library) = env_override.filter(|l| !l.is_empty()) {
        let library = PathBuf::from(library);
        return if library.is_file() {
            Ok(library)
        } else {
            Err(format!(
                "{LIBFAKETIME_ENV} is set to {} but that file does not exist. {NOT_FOUND_MESSAGE}",
                library.display()
            ))
        };
    }
    for dir in LIBRARY_DIRS {
        let dir = Path::new(dir);
        let mut candidates = vec![dir.join(LIBRARY)];
        if let Ok(entries) = fs::read_dir(dir) {
            let mut subdirs: Vec<PathBuf> = entries
                .filter_map(|entry| entry.ok().map(|e| e.path().join(LIBRARY)))
                .collect();
            subdirs.sort();
            candidates.extend(subdirs);
        }
        if let Some(found) = candidates.into_iter().find(|c| c.is_file()) {
            return Ok(found);
        }
    }
    Err(NOT_FOUND_MESSAGE.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn time_of(server: &RedisServer) -> i64 {
        let time = server.server_time();
        time.duration_since(UNIX_EPOCH).unwrap().as_secs() as i64
    }

    fn host_now() -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64
    }

    #[test]
    fn the_fake_clock_jumps_forward_and_back_and_moves_ttls() {
        let mut server = RedisServer::start_with_fake_clock(&[]);
        assert!(server.has_fake_clock());
        assert_eq!(server.clock_offset(), Some(0));
        assert!((time_of(&server) - host_now()).abs() <= 1);

        server.cmd(&["SET", "short", "1", "PX", "60000"]);
        server.set_clock_offset(3600);
        assert_eq!(server.clock_offset(), Some(3600));
        assert!((time_of(&server) - host_now() - 3600).abs() <= 1);
        assert_eq!(
            server.cmd(&["EXISTS", "short"]),
            redis::Value::Int(0),
            "a jump past its TTL ends the key"
        );

        server.set_clock_offset(-30);
        assert!((time_of(&server) - host_now() + 30).abs() <= 1);
        server.cmd(&["SET", "long", "1", "PX", "1000"]);
        server.set_clock_offset(-60);
        let pttl = redis::from_redis_value_ref::<i64>(&server.cmd(&["PTTL", "long"])).unwrap();
        assert!(
            pttl > 30_000,
            "a jump back by 30 s lengthens a 1 s TTL: PTTL {pttl}"
        );

        // The offset survives a restart, and applies to the new process at once.
        server.restart();
        assert_eq!(server.clock_offset(), Some(-60));
        assert!((time_of(&server) - host_now() + 60).abs() <= 1);
        // Set while paused: applies when resumed.
        server.pause();
        server.set_clock_offset(120);
        server.resume();
        assert!((time_of(&server) - host_now() - 120).abs() <= 1);
    }

    #[test]
    fn the_fake_clock_runs_at_a_rate() {
        let server = RedisServer::start_with_fake_clock(&[]);
        assert_eq!(server.clock_rate(), Some(1.0));
        server.set_clock_rate(1.05);
        assert_eq!(server.clock_rate(), Some(1.05));
        let set_at = Instant::now();
        server.cmd(&["SET", "fast", "1", "PX", "1000"]);
        while server.cmd(&["EXISTS", "fast"]) == redis::Value::Int(1) {
            std::thread::sleep(Duration::from_millis(2));
        }
        let gone = set_at.elapsed();
        assert!(
            gone < Duration::from_millis(990),
            "a 1 s TTL on a clock 5 % fast ends after about 952 ms, took {gone:?}"
        );
        // The offset keeps the rate.
        server.set_clock_offset(0);
        assert_eq!(server.clock_rate(), Some(1.05));
        server.set_clock_rate(1.0);
    }

    #[test]
    fn rate_bounds_bracket_the_rate() {
        let t = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let ms = Duration::from_millis;
        let (low, high) = rate_bounds(
            (t, t + ms(1), t + ms(2)),
            (t + ms(1000), t + ms(1051), t + ms(1002)),
        );
        assert!(low < 1.05 && 1.05 < high, "{low} {high}");
        assert!(high - low < 0.01, "{low} {high}");
    }

    #[test]
    #[should_panic(expected = "has no fake clock")]
    fn a_plain_server_has_no_clock_to_move() {
        let server = RedisServer::start();
        assert_eq!(server.clock_offset(), None);
        server.set_clock_offset(1);
    }

    #[test]
    fn library_resolution() {
        let bad_env = resolve_library(Some("/nonexistent/libfaketime.so.1".into())).unwrap_err();
        assert!(bad_env.contains(LIBFAKETIME_ENV), "{bad_env}");
        assert!(bad_env.contains("apt-get install -y faketime libfaketime"));
        let found = resolve_library(Some("".into())).unwrap();
        assert!(found.ends_with(LIBRARY), "{}", found.display());
    }

    #[test]
    fn offset_error_measures_outside_the_window() {
        let t = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let ms = Duration::from_millis;
        assert_eq!(offset_error(0, t, t + ms(5), t + ms(10)), Duration::ZERO);
        assert_eq!(offset_error(60, t, t + ms(60_020), t + ms(10)), ms(10));
        assert_eq!(offset_error(-60, t, t - ms(60_100), t + ms(10)), ms(100));
    }
}
