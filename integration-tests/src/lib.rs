//! Test harness for redisync: starts **real** `redis-server` processes.
//!
//! Every [`RedisServer`] runs in its own temporary directory on a free port of
//! `127.0.0.1`, without any persistence (`--save ''`, `--appendonly no`). The
//! process is killed with `SIGKILL` and its directory removed when the value is
//! dropped, so tests can run in parallel without interfering with each other.
//!
//! The harness never mocks Redis: if `redis-server` is missing, starting a
//! server panics with instructions on how to install it. The binary can be
//! overridden with the `REDIS_SERVER_BIN` environment variable.
//!
//! ```no_run
//! use redisync_test_harness::RedisServer;
//!
//! let server = RedisServer::start();
//! let _ = server.cmd(&["SET", "key", "value"]);
//! assert_eq!(server.command_calls("set"), 1);
//! ```
//!
//! Servers are only cleaned up by [`Drop`]; a server kept in a `static` or
//! leaked with `std::mem::forget` outlives the test process.
//!
//! For fault injection the crate also has a TCP chaos proxy ([`ChaosProxy`]: latency,
//! blackholes, dropped replies, a stalled connection, resets, cut pub/sub connections),
//! [`Holder`], a lock or permit holder in a process of its own that tests can pause or kill
//! (the crate's `holder` binary), servers kept busy by a long script
//! ([`RedisServer::busy_for`], see [`busy`]) and servers whose clock jumps
//! ([`RedisServer::start_with_fake_clock`], see [`clock`]).

#![deny(missing_docs)]

pub mod busy;
pub mod clock;
pub mod cluster;
pub mod heap;
pub mod holder;
pub mod proxy;
pub mod script_text;
pub mod sentinel;
pub mod server_binary;
pub mod tls;

pub use busy::BusyScript;
pub use cluster::RedisCluster;
pub use holder::Holder;
pub use proxy::ChaosProxy;
pub use sentinel::Sentinel;

use std::ffi::OsString;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisConnectionInfo};
use tempfile::TempDir;

/// Name of the environment variable that overrides the `redis-server` binary.
pub const REDIS_SERVER_BIN_ENV: &str = "REDIS_SERVER_BIN";

/// Message used when `redis-server` cannot be found.
const NOT_FOUND_MESSAGE: &str = "redis-server was not found on PATH. Install it with \
     `apt-get install -y redis-server redis-tools` (or run `scripts/setup.sh`), \
     then run the tests again.";

/// How long to wait for a freshly spawned server to answer `PING`.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How many fresh ports [`RedisServer::start_with`] tries when the chosen port is taken.
const START_ATTEMPTS: usize = 10;
/// How long [`RedisServer::restart`] keeps retrying while its port is still in use.
const RESTART_PORT_TIMEOUT: Duration = Duration::from_secs(5);
/// Connect timeout of the readiness probe.
const PROBE_CONNECT_TIMEOUT: Duration = Duration::from_millis(250);
/// Read/write timeout of the readiness probe.
const PROBE_IO_TIMEOUT: Duration = Duration::from_secs(1);
/// Connect timeout of inspection connections.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Read/write timeout used by the inspection helpers (`cmd`, `info_field`, ...).
const HELPER_IO_TIMEOUT: Duration = Duration::from_secs(10);
/// Number of log lines included in startup failure messages.
const LOG_TAIL_LINES: usize = 40;

/// A real `redis-server` process, listening on `127.0.0.1` on a free port.
///
/// The process is killed (`SIGKILL`) and its temporary directory removed when
/// the value is dropped. All methods take `&self` except [`stop`](Self::stop)
/// and [`restart`](Self::restart), so a server can be shared (e.g. in an
/// `Arc`) between tasks that only inspect or pause it.
pub struct RedisServer {
    /// The resolved `redis-server` binary.
    bin: PathBuf,
    /// The port; kept across [`RedisServer::restart`].
    port: u16,
    /// Extra arguments given to [`RedisServer::start_with`].
    extra_args: Vec<String>,
    /// Password taken from `--requirepass` in `extra_args`, if any.
    password: Option<String>,
    /// The running process, `None` after [`RedisServer::stop`].
    child: Mutex<Option<Child>>,
    /// Pid of the most recently started process.
    pid: AtomicU32,
    /// Whether the process was sent `SIGSTOP` and not yet `SIGCONT`.
    paused: AtomicBool,
    /// The fake clock of [`RedisServer::start_with_fake_clock`], kept across restarts.
    fake_clock: Option<clock::FakeClock>,
    /// Working directory and log files; declared last so it is removed after
    /// the process has been killed in [`Drop`].
    dir: TempDir,
}

/// Why a launch attempt failed.
enum LaunchError {
    /// The port was already in use (another server, or a lingering socket).
    PortInUse(String),
    /// Any other failure; the message is ready to be shown to the user.
    Fatal(String),
}

impl RedisServer {
    /// Starts a `redis-server` on a free port of `127.0.0.1` in a fresh
    /// temporary directory, without persistence, and waits (up to 10 s) until
    /// it answers `PING`.
    ///
    /// # Panics
    ///
    /// Panics if `redis-server` cannot be found (see the crate docs) or does
    /// not come up; the message includes the tail of the server log.
    pub fn start() -> RedisServer {
        Self::start_with(&[])
    }

    /// Like [`start`](Self::start), with extra `redis-server` arguments
    /// appended after the harness' own (so they can override them), e.g.
    /// `&["--requirepass", "s3cret"]`.
    ///
    /// If the arguments contain `--requirepass <password>`, the password is
    /// remembered and used by [`connection`](Self::connection) and the other
    /// inspection helpers.
    ///
    /// # Panics
    ///
    /// Panics if `redis-server` cannot be found, rejects the arguments or does
    /// not come up; the message includes the tail of the server log.
    pub fn start_with(extra_args: &[&str]) -> RedisServer {
        Self::start_inner(extra_args, false)
    }

    /// [`start_with`](Self::start_with), running the server binary `bin` (a `redis-server`,
    /// `valkey-server` or another) whatever `REDIS_SERVER_BIN` says: for a program that
    /// takes the binary as an option, such as the benchmark.
    ///
    /// # Panics
    ///
    /// As [`start_with`](Self::start_with).
    pub fn start_binary(bin: &Path, extra_args: &[&str]) -> RedisServer {
        Self::launch_binary(bin.to_path_buf(), extra_args, false)
    }

    /// [`start_with`](Self::start_with), with a fake clock if `fake_clock`.
    fn start_inner(extra_args: &[&str], fake_clock: bool) -> RedisServer {
        let bin = match resolve_binary(
            std::env::var_os(REDIS_SERVER_BIN_ENV),
            std::env::var_os("PATH"),
        ) {
            Ok(bin) => bin,
            Err(message) => panic!("{message}"),
        };
        Self::launch_binary(bin, extra_args, fake_clock)
    }

    fn launch_binary(bin: PathBuf, extra_args: &[&str], fake_clock: bool) -> RedisServer {
        if !bin.is_file() {
            panic!("the server binary {} does not exist", bin.display());
        }
        let dir = tempfile::Builder::new()
            .prefix("redisync-test-redis-")
            .tempdir()
            .unwrap_or_else(|e| {
                panic!("failed to create a temporary directory for redis-server: {e}")
            });
        let extra_args: Vec<String> = extra_args.iter().map(|s| s.to_string()).collect();
        let password = password_from_args(&extra_args);
        let fake_clock = fake_clock.then(|| {
            clock::FakeClock::new(dir.path()).unwrap_or_else(|message| panic!("{message}"))
        });

        let mut last_error = String::new();
        for _ in 0..START_ATTEMPTS {
            let port = free_port();
            match launch(
                &bin,
                port,
                dir.path(),
                &extra_args,
                password.as_deref(),
                fake_clock.as_ref(),
            ) {
                Ok(child) => {
                    let pid = child.id();
                    return RedisServer {
                        bin,
                        port,
                        extra_args,
                        password,
                        child: Mutex::new(Some(child)),
                        pid: AtomicU32::new(pid),
                        paused: AtomicBool::new(false),
                        fake_clock,
                        dir,
                    };
                }
                Err(LaunchError::PortInUse(message)) => last_error = message,
                Err(LaunchError::Fatal(message)) => panic!("{message}"),
            }
        }
        panic!(
            "redis-server could not find a free port after {START_ATTEMPTS} attempts; \
             last failure:\n{last_error}"
        );
    }

    /// The TCP port the server listens on (stable across [`restart`](Self::restart)).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The connection URL, `redis://127.0.0.1:{port}/`.
    ///
    /// It does not contain the password; see [`authenticated_url`](Self::authenticated_url).
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The connection URL including the `--requirepass` password, if one was
    /// given (`redis://:{password}@127.0.0.1:{port}/`, percent-encoded);
    /// otherwise the same as [`url`](Self::url).
    pub fn authenticated_url(&self) -> String {
        match &self.password {
            Some(password) => format!(
                "redis://:{}@127.0.0.1:{}/",
                percent_encode(password),
                self.port
            ),
            None => self.url(),
        }
    }

    /// The password given with `--requirepass` to [`start_with`](Self::start_with), if any.
    pub fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }

    /// The directory the server runs in (`--dir`); it also holds `redis.log`.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The pid of the most recently started process (after [`stop`](Self::stop),
    /// the pid of the process that was killed).
    pub fn pid(&self) -> u32 {
        self.pid.load(Ordering::SeqCst)
    }

    /// Kills the server with `SIGKILL` and waits for it to exit. The port and
    /// directory are kept for [`restart`](Self::restart). Does nothing if the
    /// server is not running.
    pub fn stop(&mut self) {
        let mut child = self.lock_child();
        if let Some(mut child) = child.take() {
            kill_child(&mut child, self.paused.swap(false, Ordering::SeqCst));
        }
    }

    /// Stops the server if it is running, then starts it again on the **same
    /// port and directory** with the same arguments, and waits until it answers
    /// `PING`. The data set is empty afterwards (no persistence).
    ///
    /// # Panics
    ///
    /// Panics if the server does not come up again, e.g. because another
    /// process took the port while it was stopped.
    pub fn restart(&mut self) {
        self.stop();
        let deadline = Instant::now() + RESTART_PORT_TIMEOUT;
        loop {
            match launch(
                &self.bin,
                self.port,
                self.dir.path(),
                &self.extra_args,
                self.password.as_deref(),
                self.fake_clock.as_ref(),
            ) {
                Ok(child) => {
                    self.pid.store(child.id(), Ordering::SeqCst);
                    *self.lock_child() = Some(child);
                    return;
                }
                Err(LaunchError::PortInUse(message)) => {
                    if Instant::now() >= deadline {
                        panic!(
                            "redis-server could not be restarted on port {} because the port \
                             stayed in use for {:?} (another process probably took it):\n{message}",
                            self.port, RESTART_PORT_TIMEOUT
                        );
                    }
                    thread::sleep(Duration::from_millis(50));
                }
                Err(LaunchError::Fatal(message)) => panic!("{message}"),
            }
        }
    }

    /// Suspends the server with `SIGSTOP`: connections are still accepted by
    /// the kernel but no command is answered until [`resume`](Self::resume).
    ///
    /// # Panics
    ///
    /// Panics if the server is not running or the signal cannot be sent.
    pub fn pause(&self) {
        let pid = self.running_pid("pause");
        self.paused.store(true, Ordering::SeqCst);
        send_signal(pid, "STOP").unwrap_or_else(|e| panic!("failed to pause redis-server: {e}"));
    }

    /// Resumes a server suspended by [`pause`](Self::pause) with `SIGCONT`.
    ///
    /// # Panics
    ///
    /// Panics if the server is not running or the signal cannot be sent.
    pub fn resume(&self) {
        let pid = self.running_pid("resume");
        send_signal(pid, "CONT").unwrap_or_else(|e| panic!("failed to resume redis-server: {e}"));
        self.paused.store(false, Ordering::SeqCst);
    }

    /// Whether the process is alive (a paused server counts as running).
    /// Returns `false` after [`stop`](Self::stop) or if the process died.
    pub fn is_running(&self) -> bool {
        match self.lock_child().as_mut() {
            Some(child) => is_alive(child),
            None => false,
        }
    }

    /// Opens a plain synchronous redis-rs connection for inspection,
    /// authenticated with the `--requirepass` password if one was given.
    /// The connection has no read timeout.
    ///
    /// # Panics
    ///
    /// Panics if the connection cannot be established within 5 s.
    pub fn connection(&self) -> redis::Connection {
        redis::Client::open(connection_info(self.port, self.password.as_deref()))
            .and_then(|client| client.get_connection_with_timeout(CONNECT_TIMEOUT))
            .unwrap_or_else(|e| {
                panic!(
                    "failed to connect to redis-server at {} (pid {}): {e}",
                    self.url(),
                    self.pid()
                )
            })
    }

    /// Runs one command on a fresh connection and returns the reply, or the
    /// error (including error replies such as `WRONGTYPE`). Helper connections
    /// use a 10 s read timeout.
    ///
    /// # Panics
    ///
    /// Panics if `args` is empty or the connection cannot be established.
    pub fn try_cmd(&self, args: &[&str]) -> redis::RedisResult<redis::Value> {
        let (name, rest) = args
            .split_first()
            .expect("RedisServer::cmd needs at least the command name");
        let mut con = self.helper_connection();
        let mut cmd = redis::cmd(name);
        for arg in rest {
            cmd.arg(*arg);
        }
        cmd.query(&mut con)
    }

    /// Runs one command on a fresh connection and returns the reply, e.g.
    /// `server.cmd(&["PUBSUB", "NUMSUB", "chan"])`.
    ///
    /// # Panics
    ///
    /// Panics if the connection fails or the server answers with an error
    /// reply; use [`try_cmd`](Self::try_cmd) to inspect errors.
    pub fn cmd(&self, args: &[&str]) -> redis::Value {
        self.try_cmd(args).unwrap_or_else(|e| {
            panic!(
                "command {args:?} failed on redis-server at {}: {e}",
                self.url()
            )
        })
    }

    /// The server's name and version from `INFO server`, as in `Redis 7.0.15` or
    /// `Valkey 8.1.8` (Valkey reports its own version in `valkey_version`).
    ///
    /// # Panics
    ///
    /// Panics if the command fails.
    pub fn version(&self) -> String {
        let info = self.info("server");
        match parse_info_field(&info, "server_name") {
            Some(name) if !name.is_empty() && name != "redis" => {
                let version = parse_info_field(&info, &format!("{name}_version"))
                    .or_else(|| parse_info_field(&info, "redis_version"))
                    .unwrap_or("unknown");
                let mut title = name.to_owned();
                title[..1].make_ascii_uppercase();
                format!("{title} {version}")
            }
            _ => format!(
                "Redis {}",
                parse_info_field(&info, "redis_version").unwrap_or("unknown")
            ),
        }
    }

    /// Runs `INFO <section>` and returns the value of `field`, e.g.
    /// `info_field("stats", "total_commands_processed")`, or `None` if the
    /// field is absent.
    ///
    /// # Panics
    ///
    /// Panics if the command fails.
    pub fn info_field(&self, section: &str, field: &str) -> Option<String> {
        let info = self.info(section);
        parse_info_field(&info, field).map(str::to_owned)
    }

    /// Number of calls of `command` according to `INFO commandstats`
    /// (`calls=N` of `cmdstat_<command>`, lower-cased; subcommands are written
    /// as e.g. `client|setinfo`), or 0 if the command was never called.
    ///
    /// # Panics
    ///
    /// Panics if the command fails.
    pub fn command_calls(&self, command: &str) -> u64 {
        let info = self.info("commandstats");
        let field = format!("cmdstat_{}", command.to_ascii_lowercase());
        parse_info_field(&info, &field)
            .and_then(parse_calls)
            .unwrap_or(0)
    }

    /// Number of subscribers of `channel` (`PUBSUB NUMSUB channel`).
    ///
    /// # Panics
    ///
    /// Panics if the command fails or the reply has an unexpected shape.
    pub fn numsub(&self, channel: &str) -> u64 {
        let reply = self.cmd(&["PUBSUB", "NUMSUB", channel]);
        let count: Option<u64> = match &reply {
            redis::Value::Array(items) if items.len() == 2 => {
                redis::from_redis_value_ref::<u64>(&items[1]).ok()
            }
            redis::Value::Map(pairs) if pairs.len() == 1 => {
                redis::from_redis_value_ref::<u64>(&pairs[0].1).ok()
            }
            _ => None,
        };
        count.unwrap_or_else(|| panic!("unexpected PUBSUB NUMSUB reply: {reply:?}"))
    }

    /// Runs `INFO <section>` and returns the raw text.
    fn info(&self, section: &str) -> String {
        let mut con = self.helper_connection();
        redis::cmd("INFO")
            .arg(section)
            .query::<String>(&mut con)
            .unwrap_or_else(|e| {
                panic!(
                    "INFO {section} failed on redis-server at {}: {e}",
                    self.url()
                )
            })
    }

    /// A connection with read/write timeouts so a paused server cannot hang a
    /// helper forever.
    fn helper_connection(&self) -> redis::Connection {
        let con = self.connection();
        let _ = con.set_read_timeout(Some(HELPER_IO_TIMEOUT));
        let _ = con.set_write_timeout(Some(HELPER_IO_TIMEOUT));
        con
    }

    /// The pid of the running process, or a panic naming `action`.
    fn running_pid(&self, action: &str) -> u32 {
        if let Some(child) = self.lock_child().as_mut() {
            if is_alive(child) {
                return child.id();
            }
        }
        panic!(
            "cannot {action} redis-server on port {}: it is not running",
            self.port
        );
    }

    /// Locks the child, ignoring poisoning (the data stays consistent).
    fn lock_child(&self) -> MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let paused = self.paused.swap(false, Ordering::SeqCst);
        let mut child = self.lock_child();
        if let Some(mut child) = child.take() {
            kill_child(&mut child, paused);
        }
        // The temporary directory is removed when `self.dir` is dropped,
        // after this function returns; errors are ignored by `TempDir`.
    }
}

impl fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisServer")
            .field("port", &self.port)
            .field("pid", &self.pid())
            .field("dir", &self.dir.path())
            .field("extra_args", &self.extra_args.len())
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("clock_offset", &self.clock_offset())
            .finish()
    }
}

/// Polls `cond` every 10 ms until it returns `true` or `timeout` has passed;
/// returns whether it became `true`. `cond` is always evaluated at least once
/// and once more after the deadline.
pub async fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Finds the `redis-server` binary: `env_override` (the value of
/// `REDIS_SERVER_BIN`) if set and non-empty, otherwise the first
/// `redis-server` in `path`.
fn resolve_binary(
    env_override: Option<OsString>,
    path: Option<OsString>,
) -> Result<PathBuf, String> {
    if let Some(bin) = env_override.filter(|b| !b.is_empty()) {
        let bin = PathBuf::from(bin);
        return if bin.is_file() {
            Ok(bin)
        } else {
            Err(format!(
                "{REDIS_SERVER_BIN_ENV} is set to {} but that file does not exist. \
                 Unset it to use redis-server from PATH, or {}",
                bin.display(),
                NOT_FOUND_MESSAGE.replacen("redis-server was not found on PATH. ", "", 1)
            ))
        };
    }
    path.iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join("redis-server"))
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| NOT_FOUND_MESSAGE.to_owned())
}

/// Extracts the value following the last `--requirepass` argument.
fn password_from_args(args: &[String]) -> Option<String> {
    args.windows(2)
        .rev()
        .find(|pair| pair[0].eq_ignore_ascii_case("--requirepass"))
        .map(|pair| pair[1].clone())
        .filter(|password| !password.is_empty())
}

/// Asks the kernel for a free port on 127.0.0.1. The port is released before
/// returning, so it may be taken by someone else; callers retry.
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0")
        .unwrap_or_else(|e| panic!("failed to bind 127.0.0.1:0 to find a free port: {e}"));
    listener
        .local_addr()
        .unwrap_or_else(|e| panic!("failed to read the address of a bound socket: {e}"))
        .port()
}

/// Connection settings for the harness' own connections (no `CLIENT SETINFO`
/// on connect, so it does not show up in command statistics).
fn connection_info(port: u16, password: Option<&str>) -> ConnectionInfo {
    let mut settings = RedisConnectionInfo::default().set_skip_set_lib_name();
    if let Some(password) = password {
        settings = settings.set_password(password);
    }
    ConnectionAddr::Tcp("127.0.0.1".to_owned(), port)
        .into_connection_info()
        .expect("a TCP address is always a valid connection info")
        .set_redis_settings(settings)
}

/// Spawns `redis-server` on `port` (with the fake clock if one is given) and waits until it
/// answers `PING`. On failure the process is killed and the error describes what happened.
fn launch(
    bin: &Path,
    port: u16,
    dir: &Path,
    extra_args: &[String],
    password: Option<&str>,
    fake_clock: Option<&clock::FakeClock>,
) -> Result<Child, LaunchError> {
    let log_path = dir.join("redis.log");
    let stderr_path = dir.join("stderr.log");
    // Logs are appended across restarts: only look at what this launch wrote.
    let log_offset = file_len(&log_path);
    let stderr_offset = file_len(&stderr_path);
    let stderr = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&stderr_path)
        .map_err(|e| {
            LaunchError::Fatal(format!("failed to create {}: {e}", stderr_path.display()))
        })?;

    let port_arg = port.to_string();
    let mut command = Command::new(bin);
    command
        .args(["--port", &port_arg, "--bind", "127.0.0.1"])
        .arg("--dir")
        .arg(dir)
        .args(["--save", "", "--appendonly", "no"])
        .args(["--daemonize", "no", "--protected-mode", "no"])
        .arg("--logfile")
        .arg(&log_path)
        .args(extra_args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr);
    if let Some(fake_clock) = fake_clock {
        fake_clock.apply(&mut command);
    }
    let mut child = command.spawn().map_err(|e| {
        LaunchError::Fatal(format!(
            "failed to spawn {}: {e}. {NOT_FOUND_MESSAGE}",
            bin.display()
        ))
    })?;

    let describe = |what: &str| {
        format!(
            "redis-server ({}) on port {port} {what}.\n\
             --- redis.log (tail) ---\n{}\n--- stderr (tail) ---\n{}",
            bin.display(),
            log_tail(&log_path, log_offset),
            log_tail(&stderr_path, stderr_offset),
        )
    };

    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                let message = describe(&format!("exited during startup with {status}"));
                return Err(if message.contains("Address already in use") {
                    LaunchError::PortInUse(message)
                } else {
                    LaunchError::Fatal(message)
                });
            }
            Ok(None) => {}
            Err(e) => {
                kill_child(&mut child, false);
                return Err(LaunchError::Fatal(describe(&format!(
                    "could not be waited on: {e}"
                ))));
            }
        }
        if probe(port, password, child.id()) {
            if fake_clock.is_some_and(|clock| !clock.is_loaded_in(child.id())) {
                kill_child(&mut child, false);
                return Err(LaunchError::Fatal(describe(
                    "runs without libfaketime although it was preloaded (LD_PRELOAD ignored?)",
                )));
            }
            return Ok(child);
        }
        if started.elapsed() >= READY_TIMEOUT {
            kill_child(&mut child, false);
            return Err(LaunchError::Fatal(describe(&format!(
                "did not answer PING within {READY_TIMEOUT:?}"
            ))));
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// Whether the server on `port` answers `PING` and is the process `pid`
/// (another test's server may briefly own the same port).
fn probe(port: u16, password: Option<&str>, pid: u32) -> bool {
    let Ok(client) = redis::Client::open(connection_info(port, password)) else {
        return false;
    };
    let Ok(mut con) = client.get_connection_with_timeout(PROBE_CONNECT_TIMEOUT) else {
        return false;
    };
    if con.set_read_timeout(Some(PROBE_IO_TIMEOUT)).is_err()
        || con.set_write_timeout(Some(PROBE_IO_TIMEOUT)).is_err()
    {
        return false;
    }
    if redis::cmd("PING").query::<String>(&mut con).is_err() {
        return false;
    }
    match redis::cmd("INFO").arg("server").query::<String>(&mut con) {
        Ok(info) => parse_info_field(&info, "process_id") == Some(pid.to_string().as_str()),
        Err(_) => false,
    }
}

/// Resumes (if `paused`), kills with `SIGKILL` and reaps `child`, ignoring errors.
fn kill_child(child: &mut Child, paused: bool) {
    if paused {
        let _ = send_signal(child.id(), "CONT");
    }
    // `Child::kill` sends SIGKILL, which also works on stopped processes.
    let _ = child.kill();
    let _ = child.wait();
}

/// Whether `child` has not exited yet.
fn is_alive(child: &mut Child) -> bool {
    matches!(child.try_wait(), Ok(None))
}

/// Sends `SIG<signal>` to `pid` with the `kill` utility.
fn send_signal(pid: u32, signal: &str) -> Result<(), String> {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(|e| format!("could not run `kill -{signal} {pid}`: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`kill -{signal} {pid}` failed with {status}"))
    }
}

/// Returns the value of `field` in `INFO` output (`field:value` lines).
fn parse_info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines()
        .filter_map(|line| line.trim_end_matches('\r').split_once(':'))
        .find(|(name, _)| *name == field)
        .map(|(_, value)| value)
}

/// Extracts `N` from a commandstats value such as `calls=N,usec=...`.
fn parse_calls(value: &str) -> Option<u64> {
    value
        .split(',')
        .find_map(|part| part.strip_prefix("calls="))
        .and_then(|calls| calls.parse().ok())
}

/// Percent-encodes everything except RFC 3986 unreserved characters.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for byte in s.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Length of the file at `path`, or 0 if it does not exist.
fn file_len(path: &Path) -> u64 {
    fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// The last lines written to `path` after byte `offset`.
fn log_tail(path: &Path, offset: u64) -> String {
    let mut bytes = Vec::new();
    let read = File::open(path).and_then(|mut file| {
        file.seek(SeekFrom::Start(offset))?;
        file.read_to_end(&mut bytes)
    });
    match read {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return "<empty>".to_owned(),
        Err(e) => return format!("<could not read {}: {e}>", path.display()),
        Ok(_) => {}
    }
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().collect();
    if lines.is_empty() {
        return "<empty>".to_owned();
    }
    lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn get(server: &RedisServer, key: &str) -> redis::Value {
        server.cmd(&["GET", key])
    }

    #[test]
    fn start_stop_restart_cycle() {
        let mut server = RedisServer::start();
        assert!(server.is_running());
        assert_eq!(
            server.url(),
            format!("redis://127.0.0.1:{}/", server.port())
        );
        assert_eq!(
            server.cmd(&["PING"]),
            redis::Value::SimpleString("PONG".into())
        );
        server.cmd(&["SET", "k", "v"]);
        assert_eq!(get(&server, "k"), redis::Value::BulkString(b"v".to_vec()));
        assert_eq!(
            server.info_field("server", "process_id"),
            Some(server.pid().to_string())
        );
        assert_eq!(server.info_field("server", "no_such_field"), None);

        let port = server.port();
        let first_pid = server.pid();
        server.stop();
        assert!(!server.is_running());
        assert!(
            redis::Client::open(server.url())
                .unwrap()
                .get_connection_with_timeout(Duration::from_secs(1))
                .is_err(),
            "a stopped server must refuse connections"
        );
        server.stop(); // idempotent

        server.restart();
        assert!(server.is_running());
        assert_eq!(server.port(), port);
        assert_ne!(server.pid(), first_pid);
        assert_eq!(get(&server, "k"), redis::Value::Nil, "no persistence");

        // restart() of a running server also works.
        let mut con = server.connection();
        let second_pid = server.pid();
        server.restart();
        assert_ne!(server.pid(), second_pid);
        assert!(redis::cmd("PING").query::<String>(&mut con).is_err());
        assert_eq!(
            server.cmd(&["PING"]),
            redis::Value::SimpleString("PONG".into())
        );
    }

    #[test]
    fn pause_and_resume() {
        let server = RedisServer::start();
        server.pause();
        assert!(server.is_running(), "a paused server is still running");
        let mut con = server.connection();
        con.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        assert!(
            redis::cmd("PING").query::<String>(&mut con).is_err(),
            "a paused server must not answer"
        );
        server.resume();
        assert_eq!(
            server.cmd(&["PING"]),
            redis::Value::SimpleString("PONG".into())
        );
        // Dropping a paused server must not hang or panic.
        server.pause();
    }

    #[test]
    fn drop_kills_process_and_removes_dir() {
        let server = RedisServer::start();
        let dir = server.dir().to_path_buf();
        let url = server.url();
        assert!(dir.join("redis.log").is_file());
        drop(server);
        assert!(!dir.exists());
        assert!(redis::Client::open(url)
            .unwrap()
            .get_connection_with_timeout(Duration::from_secs(1))
            .is_err());
    }

    #[test]
    fn many_servers_at_once() {
        let servers: Vec<RedisServer> = thread::scope(|s| {
            let handles: Vec<_> = (0..8).map(|_| s.spawn(RedisServer::start)).collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut ports: Vec<u16> = servers.iter().map(RedisServer::port).collect();
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), servers.len());
        for (i, server) in servers.iter().enumerate() {
            server.cmd(&["SET", "id", &i.to_string()]);
        }
        for (i, server) in servers.iter().enumerate() {
            assert_eq!(
                get(server, "id"),
                redis::Value::BulkString(i.to_string().into_bytes())
            );
        }
    }

    #[test]
    fn password_server() {
        let server = RedisServer::start_with(&["--requirepass", "s3cret/:@"]);
        assert_eq!(server.password(), Some("s3cret/:@"));
        assert_eq!(
            server.cmd(&["PING"]),
            redis::Value::SimpleString("PONG".into())
        );
        let anonymous = redis::Client::open(server.url())
            .unwrap()
            .get_connection_with_timeout(Duration::from_secs(1));
        if let Ok(mut con) = anonymous {
            assert!(redis::cmd("GET")
                .arg("k")
                .query::<redis::Value>(&mut con)
                .is_err());
        }
        let mut con = redis::Client::open(server.authenticated_url())
            .unwrap()
            .get_connection()
            .unwrap();
        assert_eq!(
            redis::cmd("PING").query::<String>(&mut con).unwrap(),
            "PONG"
        );
    }

    #[test]
    fn command_stats_and_numsub() {
        let server = RedisServer::start();
        assert_eq!(server.command_calls("set"), 0);
        server.cmd(&["SET", "a", "1"]);
        server.cmd(&["SET", "b", "2"]);
        assert_eq!(server.command_calls("set"), 2);
        assert_eq!(server.command_calls("SET"), 2);
        assert!(server.try_cmd(&["INCR", "nope", "extra"]).is_err());

        assert_eq!(server.numsub("chan"), 0);
        let mut sub = server.connection();
        redis::cmd("SUBSCRIBE").arg("chan").exec(&mut sub).unwrap();
        assert_eq!(server.numsub("chan"), 1);
    }

    #[test]
    fn taken_port_is_detected() {
        let server = RedisServer::start();
        let dir = tempfile::tempdir().unwrap();
        // Another server already answers PING on this port: the launch must
        // not mistake it for its own process.
        match launch(&server.bin, server.port(), dir.path(), &[], None, None) {
            Err(LaunchError::PortInUse(message)) => {
                assert!(message.contains("Address already in use"), "{message}")
            }
            Err(LaunchError::Fatal(message)) => panic!("expected PortInUse, got: {message}"),
            Ok(mut child) => {
                kill_child(&mut child, false);
                panic!("launch on a taken port succeeded");
            }
        }
        assert_eq!(
            server.cmd(&["PING"]),
            redis::Value::SimpleString("PONG".into())
        );
    }

    #[test]
    #[should_panic(expected = "no-such-option")]
    fn bad_arguments_panic_with_log() {
        let _ = RedisServer::start_with(&["--no-such-option", "1"]);
    }

    #[tokio::test]
    async fn wait_until_polls() {
        let server = Arc::new(RedisServer::start());
        let setter = Arc::clone(&server);
        let handle = thread::spawn(move || {
            thread::sleep(Duration::from_millis(50));
            setter.cmd(&["SET", "flag", "1"]);
        });
        assert!(
            wait_until(Duration::from_secs(5), || get(&server, "flag")
                != redis::Value::Nil)
            .await
        );
        handle.join().unwrap();
        assert!(!wait_until(Duration::from_millis(30), || false).await);
    }

    #[test]
    fn binary_resolution() {
        let not_found = resolve_binary(None, Some("/nonexistent-dir".into())).unwrap_err();
        assert_eq!(not_found, NOT_FOUND_MESSAGE);
        assert!(not_found.contains("apt-get install -y redis-server redis-tools"));
        let bad_env = resolve_binary(Some("/nonexistent/redis-server".into()), None).unwrap_err();
        assert!(bad_env.contains(REDIS_SERVER_BIN_ENV));
        let found = resolve_binary(Some("".into()), std::env::var_os("PATH")).unwrap();
        assert!(found.ends_with("redis-server"));
    }

    #[test]
    fn parsing_helpers() {
        let info = "# Stats\r\ntotal_commands_processed:42\r\ncmdstat_set:calls=3,usec=10\r\n";
        assert_eq!(
            parse_info_field(info, "total_commands_processed"),
            Some("42")
        );
        assert_eq!(
            parse_info_field(info, "cmdstat_set").and_then(parse_calls),
            Some(3)
        );
        assert_eq!(parse_info_field(info, "missing"), None);
        let args: Vec<String> = ["--requirepass", "a", "--requirepass", "b"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(password_from_args(&args), Some("b".to_owned()));
        assert_eq!(percent_encode("a/b:c@d"), "a%2Fb%3Ac%40d");
    }
}
