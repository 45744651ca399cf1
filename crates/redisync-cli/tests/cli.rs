//! End-to-end tests of the `redisync` command: the built binary runs as a process of its own
//! against real `redis-server` processes (one per test, so tests run in parallel without
//! sharing anything), and commands under a hold are small `sh` scripts that leave traces in
//! files of the test's directory.
//!
//! Waits poll for what they wait for; every wait has a generous bound. Scripts that might
//! outlive a failed test loop a bounded number of times, so nothing lingers for long.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use redisync::prelude::*;
use redisync_test_harness::RedisServer;

/// The primitives' keys under the default prefix, from their layouts: a test names a key as
/// `keys::lock(name).hash`, never by spelling it.
mod keys {
    use redisync::core::DEFAULT_KEY_PREFIX;
    use redisync::layout::*;

    /// The key space of the primitive called `name`.
    pub fn space(name: &str) -> KeySpace {
        KeySpace::of(DEFAULT_KEY_PREFIX, name).expect("a valid name")
    }

    pub fn lock(name: &str) -> LockLayout {
        LockLayout::new(&space(name))
    }

    pub fn rw(name: &str) -> ReadWriteLockLayout {
        ReadWriteLockLayout::new(&space(name))
    }

    pub fn semaphore(name: &str) -> SemaphoreLayout {
        SemaphoreLayout::new(&space(name))
    }

    pub fn rate(name: &str) -> RateLimiterLayout {
        RateLimiterLayout::new(&space(name))
    }

    pub fn expirable(name: &str) -> ExpirableSemaphoreLayout {
        ExpirableSemaphoreLayout::new(&space(name))
    }

    pub fn latch(name: &str) -> CountDownLatchLayout {
        CountDownLatchLayout::new(&space(name))
    }

    pub fn election(name: &str) -> ElectionLayout {
        ElectionLayout::new(&space(name))
    }
}

/// The binary under test.
const BIN: &str = env!("CARGO_BIN_EXE_redisync");

/// The longest any single invocation may take before the test gives up on it.
const RUN_LIMIT: Duration = Duration::from_secs(15);

/// A script that writes its pid to `$1` and runs until the file `$2` exists (15 s at most).
const HOLD_UNTIL_GATE: &str = r#"echo $$ > "$1"; i=0; while [ ! -e "$2" ] && [ $i -lt 300 ]; do sleep 0.05; i=$((i+1)); done"#;

/// Waits about 15 s at most (300 × 50 ms): the body of scripts that must not run for ever.
const BOUNDED_WAIT: &str = r#"i=0; while [ $i -lt 300 ]; do sleep 0.05; i=$((i+1)); done"#;

// ---------------------------------------------------------------------------------------------
// Harness: a server and a directory per test, and the binary as a child process.
// ---------------------------------------------------------------------------------------------

/// One test's world: its own Redis and a directory for the scripts' traces (inside the
/// server's temporary directory, removed with it).
struct World {
    server: RedisServer,
    dir: PathBuf,
}

impl World {
    fn new() -> World {
        World::on(RedisServer::start())
    }

    /// A world on a server the test started itself.
    fn on(server: RedisServer) -> World {
        let dir = server.dir().join("work");
        fs::create_dir_all(&dir).expect("the work directory can be created");
        World { server, dir }
    }

    fn url(&self) -> String {
        self.server.url()
    }

    /// Waits until one client (the `redisync` run under test) listens on its lost-notice
    /// channel, which it subscribes once it holds something.
    fn wait_for_lost_notice_listener(&self) {
        eventually(RUN_LIMIT, "the run listens for lost notices", || {
            let channels = self.server.cmd(&["PUBSUB", "CHANNELS", "redisync:lost:*"]);
            matches!(channels, redis::Value::Array(ref c) if c.len() == 1)
        });
    }

    /// A path in the test's directory, as a string for command lines.
    fn path(&self, name: &str) -> String {
        self.dir.join(name).to_string_lossy().into_owned()
    }

    /// `redisync ARGS` against this world's Redis (given through `REDISYNC_URL`).
    fn command(&self, args: &[&str]) -> Command {
        redisync_command(&self.url(), args)
    }

    fn spawn(&self, args: &[&str]) -> Proc {
        Proc::spawn(self.command(args))
    }

    /// Runs `redisync ARGS` to its end.
    fn run(&self, args: &[&str]) -> Done {
        self.spawn(args).wait(RUN_LIMIT)
    }

    /// Runs `redisync LINE`, the arguments separated by white space.
    fn run_line(&self, line: &str) -> Done {
        self.run(&words(line))
    }

    /// Starts `redisync OPTIONS -- sh -c SCRIPT sh ARGS...` (`$1`... in the script are
    /// `ARGS`).
    fn sh(&self, options: &str, script: &str, args: &[&str]) -> Proc {
        self.spawn(&sh_args(options, script, args))
    }

    /// `redisync inspect NAME` (table), which must succeed.
    fn inspect(&self, name: &str) -> String {
        let done = self.run(&["inspect", name]);
        done.assert_code(0);
        done.stdout
    }

    /// `redisync inspect NAME --json`, which must succeed and parse.
    fn inspect_json(&self, name: &str) -> Json {
        let done = self.run(&["inspect", name, "--json"]);
        done.assert_code(0);
        Json::parse(&done.stdout)
            .unwrap_or_else(|e| panic!("inspect --json printed invalid JSON ({e}):\n{done}"))
    }

    /// Whether the Redis key exists.
    fn key_exists(&self, key: &str) -> bool {
        redis::from_redis_value::<i64>(self.server.cmd(&["EXISTS", key])).expect("EXISTS: integer")
            == 1
    }
}

/// `redisync ARGS` with `url` in `REDISYNC_URL`, no inherited prefix, and no terminal: stdin
/// is empty, stdout and stderr are captured.
fn redisync_command(url: &str, args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .env("REDISYNC_URL", url)
        .env_remove("REDISYNC_PREFIX")
        .env_remove("REDISYNC_PASSWORD")
        .env_remove("REDISYNC_TLS_CA")
        .env_remove("REDISYNC_TLS_CERT")
        .env_remove("REDISYNC_TLS_KEY")
        .env_remove("REDISYNC_SENTINEL")
        .env_remove("REDISYNC_MASTER")
        .env_remove("REDISYNC_FENCING_TOKEN")
        .env_remove("REDISYNC_PERMIT_ID")
        .env_remove("RUST_BACKTRACE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// The words of `line`.
fn words(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

/// `OPTIONS -- sh -c SCRIPT sh ARGS...`.
fn sh_args<'a>(options: &'a str, script: &'a str, args: &[&'a str]) -> Vec<&'a str> {
    let mut all = words(options);
    all.extend(["--", "sh", "-c", script, "sh"]);
    all.extend(args);
    all
}

/// A running `redisync` process; killed (and reaped) when dropped.
struct Proc {
    child: Child,
    what: String,
    started: Instant,
    stdout: Arc<Mutex<Vec<u8>>>,
    stderr: Arc<Mutex<Vec<u8>>>,
    readers: Vec<JoinHandle<()>>,
    status: Option<ExitStatus>,
}

impl Proc {
    fn spawn(mut command: Command) -> Proc {
        let what = format!("{command:?}");
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let readers = vec![
            collect(child.stdout.take().expect("piped stdout"), stdout.clone()),
            collect(child.stderr.take().expect("piped stderr"), stderr.clone()),
        ];
        Proc {
            child,
            what,
            started: Instant::now(),
            stdout,
            stderr,
            readers,
            status: None,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process has not exited yet.
    fn is_running(&mut self) -> bool {
        if self.status.is_none() {
            self.status = self.child.try_wait().expect("try_wait");
        }
        self.status.is_none()
    }

    /// Waits for the process to exit (at most `limit`, else the test fails) and returns how
    /// it ended.
    fn wait(&mut self, limit: Duration) -> Done {
        let deadline = Instant::now() + limit;
        while self.is_running() {
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "{} did not exit within {limit:?}; stdout: {:?}; stderr: {:?}",
                    self.what,
                    text(&self.stdout),
                    text(&self.stderr)
                );
            }
            thread::sleep(Duration::from_millis(5));
        }
        let elapsed = self.started.elapsed();
        // A command's orphaned children may keep the pipes open: do not wait for them long.
        let readers_deadline = Instant::now() + Duration::from_secs(2);
        while self.readers.iter().any(|r| !r.is_finished()) && Instant::now() < readers_deadline {
            thread::sleep(Duration::from_millis(5));
        }
        Done {
            what: self.what.clone(),
            status: self.status.expect("exited"),
            stdout: text(&self.stdout),
            stderr: text(&self.stderr),
            elapsed,
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Reads `pipe` to its end into `sink`, on a thread of its own.
fn collect(mut pipe: impl Read + Send + 'static, sink: Arc<Mutex<Vec<u8>>>) -> JoinHandle<()> {
    thread::spawn(move || {
        let mut buffer = [0u8; 4096];
        while let Ok(n) = pipe.read(&mut buffer) {
            if n == 0 {
                break;
            }
            sink.lock().unwrap().extend_from_slice(&buffer[..n]);
        }
    })
}

fn text(bytes: &Mutex<Vec<u8>>) -> String {
    String::from_utf8_lossy(&bytes.lock().unwrap()).into_owned()
}

/// How a `redisync` process ended.
struct Done {
    what: String,
    status: ExitStatus,
    stdout: String,
    stderr: String,
    elapsed: Duration,
}

impl Done {
    /// The exit code (the test fails if a signal ended the process).
    fn code(&self) -> i32 {
        self.status
            .code()
            .unwrap_or_else(|| panic!("killed by a signal, not exited:\n{self}"))
    }

    fn assert_code(&self, code: i32) {
        assert_eq!(self.code(), code, "unexpected exit code:\n{self}");
        assert!(
            !self.stderr.contains("panicked"),
            "redisync panicked:\n{self}"
        );
    }

    /// The exit code is `code` and stderr is one line `redisync: ...` containing `needle`.
    fn assert_error(&self, code: i32, needle: &str) {
        self.assert_code(code);
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "expected one line on stderr:\n{self}");
        assert!(
            lines[0].starts_with("redisync: ") && lines[0].contains(needle),
            "expected `redisync: ...{needle}...` on stderr:\n{self}"
        );
    }
}

impl std::fmt::Display for Done {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}\n  ended: {} after {:?}\n  stdout: {:?}\n  stderr: {:?}",
            self.what, self.status, self.elapsed, self.stdout, self.stderr
        )
    }
}

/// Polls `condition` every 10 ms for at most `limit`; fails the test with `what` otherwise.
fn eventually(limit: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !condition() {
        assert!(Instant::now() < deadline, "not within {limit:?}: {what}");
        thread::sleep(Duration::from_millis(10));
    }
}

/// The lines of a file (none if it does not exist yet).
fn lines_of(path: &str) -> Vec<String> {
    fs::read_to_string(path)
        .map(|s| s.lines().map(str::to_owned).collect())
        .unwrap_or_default()
}

/// Waits until a script wrote its pid (`echo $$ > FILE`) and returns it.
fn pid_in(path: &str) -> u32 {
    let mut pid = None;
    eventually(Duration::from_secs(10), &format!("a pid in {path}"), || {
        pid = fs::read_to_string(path)
            .ok()
            .filter(|s| s.ends_with('\n'))
            .and_then(|s| s.trim().parse().ok());
        pid.is_some()
    });
    pid.unwrap()
}

/// Whether process `pid` exists and is not a zombie.
fn process_runs(pid: u32) -> bool {
    let exists = Command::new("kill")
        .args(["-0", &pid.to_string()])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !exists {
        return false;
    }
    // A zombie is dead, only not reaped yet (perhaps by a container's init).
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => !Path::new("/proc/self").exists(),
    }
}

fn send_signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .expect("kill can be run");
    assert!(status.success(), "kill -{signal} {pid} failed");
}

/// The value of `label` in a `redisync inspect` table, in the section headed `header` (e.g.
/// `lock "name"`).
fn table_field(table: &str, header: &str, label: &str) -> Option<String> {
    let mut in_section = false;
    for line in table.lines() {
        if !line.starts_with(' ') {
            in_section = line == header;
            continue;
        }
        if in_section {
            if let Some(rest) = line.trim_start().strip_prefix(label) {
                if rest.starts_with("  ") {
                    return Some(rest.trim().to_owned());
                }
            }
        }
    }
    None
}

/// A runtime for the library's side of a test (holds the other processes do not take).
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

// ---------------------------------------------------------------------------------------------
// A small JSON reader, to check that `inspect --json` prints JSON.
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq)]
enum Json {
    Null,
    Bool(bool),
    Number(f64),
    String(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl Json {
    /// Parses one JSON document (objects may not repeat a key).
    fn parse(text: &str) -> Result<Json, String> {
        let mut parser = JsonParser {
            chars: text.chars().collect(),
            at: 0,
        };
        let value = parser.value()?;
        parser.skip_space();
        if parser.at != parser.chars.len() {
            return Err(format!("trailing text at {}", parser.at));
        }
        Ok(value)
    }

    fn get(&self, key: &str) -> &Json {
        match self {
            Json::Object(fields) => fields
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v)
                .unwrap_or_else(|| panic!("no {key:?} in {self:?}")),
            other => panic!("not an object: {other:?}"),
        }
    }

    fn has(&self, key: &str) -> bool {
        matches!(self, Json::Object(fields) if fields.iter().any(|(k, _)| k == key))
    }

    fn str(&self) -> &str {
        match self {
            Json::String(s) => s,
            other => panic!("not a string: {other:?}"),
        }
    }

    /// A JSON integer (the schema has no fractions).
    fn int(&self) -> i64 {
        match self {
            Json::Number(n) if n.fract() == 0.0 => *n as i64,
            other => panic!("not an integer: {other:?}"),
        }
    }

    fn items(&self) -> &[Json] {
        match self {
            Json::Array(items) => items,
            other => panic!("not an array: {other:?}"),
        }
    }

    /// The `fields` of the primitive of `kind` in an `inspect --json` document.
    fn primitive(&self, kind: &str) -> &Json {
        self.get("primitives")
            .items()
            .iter()
            .find(|p| p.get("kind").str() == kind)
            .unwrap_or_else(|| panic!("no {kind:?} in {self:?}"))
            .get("fields")
    }
}

struct JsonParser {
    chars: Vec<char>,
    at: usize,
}

impl JsonParser {
    fn skip_space(&mut self) {
        while matches!(self.peek(), Some(' ' | '\n' | '\r' | '\t')) {
            self.at += 1;
        }
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.at).copied()
    }

    fn next(&mut self) -> Result<char, String> {
        let c = self.peek().ok_or("unexpected end")?;
        self.at += 1;
        Ok(c)
    }

    fn expect(&mut self, wanted: char) -> Result<(), String> {
        match self.next()? {
            c if c == wanted => Ok(()),
            c => Err(format!(
                "expected {wanted:?}, found {c:?} at {}",
                self.at - 1
            )),
        }
    }

    fn value(&mut self) -> Result<Json, String> {
        self.skip_space();
        match self.peek().ok_or("unexpected end")? {
            '{' => {
                self.at += 1;
                let mut fields: Vec<(String, Json)> = Vec::new();
                self.skip_space();
                if self.peek() == Some('}') {
                    self.at += 1;
                    return Ok(Json::Object(fields));
                }
                loop {
                    self.skip_space();
                    let key = self.string()?;
                    if fields.iter().any(|(k, _)| *k == key) {
                        return Err(format!("repeated key {key:?}"));
                    }
                    self.skip_space();
                    self.expect(':')?;
                    let value = self.value()?;
                    fields.push((key, value));
                    self.skip_space();
                    match self.next()? {
                        ',' => continue,
                        '}' => return Ok(Json::Object(fields)),
                        c => return Err(format!("unexpected {c:?} in an object")),
                    }
                }
            }
            '[' => {
                self.at += 1;
                let mut items = Vec::new();
                self.skip_space();
                if self.peek() == Some(']') {
                    self.at += 1;
                    return Ok(Json::Array(items));
                }
                loop {
                    items.push(self.value()?);
                    self.skip_space();
                    match self.next()? {
                        ',' => continue,
                        ']' => return Ok(Json::Array(items)),
                        c => return Err(format!("unexpected {c:?} in an array")),
                    }
                }
            }
            '"' => self.string().map(Json::String),
            't' => self.word("true", Json::Bool(true)),
            'f' => self.word("false", Json::Bool(false)),
            'n' => self.word("null", Json::Null),
            c if c == '-' || c.is_ascii_digit() => {
                let start = self.at;
                while matches!(self.peek(), Some(c) if c.is_ascii_digit() || "+-.eE".contains(c)) {
                    self.at += 1;
                }
                let number: String = self.chars[start..self.at].iter().collect();
                number
                    .parse()
                    .map(Json::Number)
                    .map_err(|_| format!("bad number {number:?}"))
            }
            c => Err(format!("unexpected {c:?} at {}", self.at)),
        }
    }

    fn word(&mut self, word: &str, value: Json) -> Result<Json, String> {
        for wanted in word.chars() {
            self.expect(wanted)?;
        }
        Ok(value)
    }

    fn string(&mut self) -> Result<String, String> {
        self.expect('"')?;
        let mut out = String::new();
        loop {
            match self.next()? {
                '"' => return Ok(out),
                '\\' => match self.next()? {
                    c @ ('"' | '\\' | '/') => out.push(c),
                    'n' => out.push('\n'),
                    't' => out.push('\t'),
                    'r' => out.push('\r'),
                    'b' => out.push('\u{8}'),
                    'f' => out.push('\u{c}'),
                    'u' => {
                        let hex: String = (0..4).map(|_| self.next()).collect::<Result<_, _>>()?;
                        let code =
                            u32::from_str_radix(&hex, 16).map_err(|_| format!("bad \\u{hex}"))?;
                        out.push(char::from_u32(code).unwrap_or('\u{fffd}'));
                    }
                    c => return Err(format!("bad escape \\{c}")),
                },
                c if (c as u32) < 0x20 => return Err(format!("raw control character {c:?}")),
                c => out.push(c),
            }
        }
    }
}

#[test]
fn the_json_reader_reads_json() {
    let doc =
        Json::parse(r#" {"a": [1, -2.5e3, "x\"\u00e9\n"], "b": {"c": true, "d": null}} "#).unwrap();
    assert_eq!(doc.get("a").items()[2].str(), "x\"é\n");
    assert_eq!(doc.get("b").get("c"), &Json::Bool(true));
    for bad in [
        r#"{"a": 1, "a": 2}"#,
        "{",
        r#"{"a" 1}"#,
        "[1,]",
        "\"\u{1}\"",
        "1 2",
    ] {
        assert!(Json::parse(bad).is_err(), "{bad:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// 1. Mutual exclusion.
// ---------------------------------------------------------------------------------------------

/// Two processes run `redisync lock` five times each on one name; each command writes a
/// start line, sleeps 200 ms and writes an end line. No two sections overlap, and the
/// fencing tokens grow with every section.
#[test]
fn lock_runs_one_command_at_a_time() {
    let world = World::new();
    let log = world.path("log");
    let script = r#"echo "start $2 $REDISYNC_FENCING_TOKEN" >> "$1"; sleep 0.2; echo "end $2 $REDISYNC_FENCING_TOKEN" >> "$1""#;
    let workers: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|who| {
            let url = world.url();
            let log = log.clone();
            thread::spawn(move || {
                for run in 0..5 {
                    let tag = format!("{who}{run}");
                    let args = sh_args("lock shared", script, &[&log, &tag]);
                    Proc::spawn(redisync_command(&url, &args))
                        .wait(RUN_LIMIT)
                        .assert_code(0);
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().expect("a worker failed");
    }

    let lines = lines_of(&log);
    assert_eq!(lines.len(), 20, "{lines:#?}");
    let mut last_token = 0;
    let mut tags = Vec::new();
    for section in lines.chunks(2) {
        let start = words(&section[0]);
        let end = words(&section[1]);
        assert_eq!(start[0], "start", "sections overlap: {lines:#?}");
        assert_eq!(end[0], "end", "sections overlap: {lines:#?}");
        assert_eq!(start[1..], end[1..], "sections overlap: {lines:#?}");
        let token: u64 = start[2].parse().expect("a fencing token");
        assert!(token > last_token, "fencing tokens must grow: {lines:#?}");
        last_token = token;
        tags.push(start[1].to_owned());
    }
    tags.sort();
    let expected: Vec<String> = ["a", "b"]
        .iter()
        .flat_map(|who| (0..5).map(move |run| format!("{who}{run}")))
        .collect();
    assert_eq!(tags, expected, "every run ran once");
    assert!(!world.key_exists(&keys::lock("shared").hash), "released");
}

/// `--poll`: the command waits without pub/sub, on a server that has no `SUBSCRIBE`.
#[test]
fn poll_waits_without_pub_sub() {
    let world = World::on(RedisServer::start_with(&[
        "--rename-command",
        "SUBSCRIBE",
        "",
    ]));
    let mut holder = world.spawn(&["lock", "polled", "--", "sleep", "1"]);
    eventually(RUN_LIMIT, "the holder holds", || {
        world.key_exists(&keys::lock("polled").hash)
    });
    world
        .run_line("--poll 20ms lock polled --wait 20s -- true")
        .assert_code(0);
    holder.wait(RUN_LIMIT).assert_code(0);

    // The control: waiting on pub/sub fails here, within the command timeout.
    let mut holder = world.spawn(&["lock", "polled", "--", "sleep", "5"]);
    eventually(RUN_LIMIT, "the holder holds", || {
        world.key_exists(&keys::lock("polled").hash)
    });
    let waited = world.run_line("--command-timeout 1s lock polled --wait 20s -- true");
    assert_ne!(waited.code(), 0, "{waited}");
    holder.wait(RUN_LIMIT).assert_code(0);
    world
        .run_line("--poll 0s lock polled -- true")
        .assert_error(2, "poll interval");
}

// ---------------------------------------------------------------------------------------------
// 2. Exit codes.
// ---------------------------------------------------------------------------------------------

#[test]
fn the_commands_exit_code_passes_through() {
    let world = World::new();
    let done = world.run(&["lock", "codes", "--", "sh", "-c", "echo out; exit 7"]);
    done.assert_code(7);
    assert_eq!(done.stdout, "out\n", "the command's output passes through");
    assert_eq!(done.stderr, "", "no message of redisync's own");

    world
        .run(&sh_args("semaphore codes-pool --permits 1", "exit 3", &[]))
        .assert_code(3);
    // Killed by signal 9: 128 + 9, as the shell reports it.
    world
        .run(&sh_args("lock codes", "kill -9 $$", &[]))
        .assert_code(137);
    world.run_line("lock codes -- true").assert_code(0);
    assert!(!world.key_exists(&keys::lock("codes").hash), "released");
    let json = world.inspect_json("codes-pool");
    let semaphore = json.primitive("expirable_semaphore");
    assert_eq!(semaphore.get("available_permits").int(), 1);
    assert_eq!(semaphore.get("permits_out").int(), 0);
}

/// A wait that runs out is 124 and the command does not run, for the lock and the semaphore.
#[test]
fn a_wait_that_runs_out_is_124_and_runs_nothing() {
    let world = World::new();
    let gate = world.path("gate");
    let hold = HOLD_UNTIL_GATE;
    let (lock_held, semaphore_held) = (world.path("lock-held"), world.path("semaphore-held"));
    let mut lock_holder = world.sh("lock busy", hold, &[&lock_held, &gate]);
    let mut semaphore_holder = world.sh(
        "semaphore busy-pool --permits 1",
        hold,
        &[&semaphore_held, &gate],
    );
    pid_in(&lock_held);
    pid_in(&semaphore_held);

    let marker = world.path("marker");
    let done = world.run(&["lock", "busy", "--wait", "300ms", "--", "touch", &marker]);
    done.assert_error(124, "lock \"busy\" not acquired within the wait");
    assert!(done.elapsed >= Duration::from_millis(300), "{done}");
    assert!(done.elapsed < Duration::from_secs(5), "{done}");
    let done = world.run(&[
        "semaphore",
        "busy-pool",
        "--permits",
        "1",
        "--wait",
        "300ms",
        "--",
        "touch",
        &marker,
    ]);
    done.assert_error(124, "no permit of \"busy-pool\" within the wait");
    assert!(done.elapsed >= Duration::from_millis(300), "{done}");
    assert!(!Path::new(&marker).exists(), "the command must not run");

    fs::write(&gate, "").unwrap();
    lock_holder.wait(RUN_LIMIT).assert_code(0);
    semaphore_holder.wait(RUN_LIMIT).assert_code(0);
    world
        .run(&["lock", "busy", "--wait", "5s", "--", "touch", &marker])
        .assert_code(0);
    assert!(Path::new(&marker).exists());
}

#[test]
fn a_command_that_cannot_run_is_127_or_126_and_the_hold_is_released() {
    let world = World::new();
    world
        .run_line("lock nocmd -- no-such-command-redisync-test")
        .assert_error(127, "no-such-command-redisync-test: command not found");
    world
        .run_line("semaphore nocmd-pool --permits 1 -- ./no/such/file")
        .assert_error(127, "command not found");
    // A directory is found but cannot be run.
    world
        .run(&["lock", "nocmd", "--", &world.path("")])
        .assert_error(126, "");
    assert!(
        !world.key_exists(&keys::lock("nocmd").hash),
        "lock released"
    );
    let json = world.inspect_json("nocmd-pool");
    let semaphore = json.primitive("expirable_semaphore");
    assert_eq!(semaphore.get("available_permits").int(), 1, "released");
}

#[test]
fn unreachable_or_silent_redis_is_69() {
    let world = World::new();
    let marker = world.path("marker");
    // --url wins over REDISYNC_URL (which names a working server).
    let done = world.run(&[
        "--url",
        "redis://127.0.0.1:1",
        "--command-timeout",
        "500ms",
        "lock",
        "x",
        "--",
        "touch",
        &marker,
    ]);
    done.assert_error(69, "");
    assert!(done.elapsed < Duration::from_secs(5), "{done}");

    // A server that accepts connections but does not answer: the command timeout applies.
    world.server.pause();
    let touch = format!("-- touch {marker}");
    for args in [
        format!("lock x {touch}"),
        format!("semaphore x --permits 1 {touch}"),
        "latch x wait".to_owned(),
        "latch x count-down".to_owned(),
        "inspect x".to_owned(),
        "force-unlock x --yes".to_owned(),
    ] {
        let done = world.run_line(&format!("--command-timeout 500ms {args}"));
        done.assert_error(69, "");
        assert!(done.elapsed < Duration::from_secs(5), "{done}");
    }
    world.server.resume();
    assert!(!Path::new(&marker).exists(), "the command must not run");
}

#[test]
fn unusable_names_and_durations_are_2() {
    let world = World::new();
    let marker = world.path("marker");
    for args in [
        &["lock", "", "--", "touch", &marker][..],
        &["semaphore", "", "--permits", "1", "--", "touch", &marker],
        &["latch", "", "set", "1"],
        &["inspect", ""],
        &["force-unlock", "", "--yes"],
    ] {
        world
            .run(args)
            .assert_error(2, "invalid argument: name must not be empty");
    }
    let touch = format!("-- touch {marker}");
    world
        .run_line(&format!("lock }}x {touch}"))
        .assert_error(2, "invalid argument");
    world
        .run_line(&format!("lock x --lease 5ms {touch}"))
        .assert_error(2, "lease must be at least");
    world
        .run_line("latch x set 0")
        .assert_error(2, "latch count");
    for line in [
        format!("lock x --wait 5x {touch}"),
        format!("lock x --lease 1.5.2s {touch}"),
        format!("lock x --wait 1 {touch}"),
        format!("lock x --kill-after soon {touch}"),
        format!("semaphore x --permits 1 --wait 1d {touch}"),
        "--command-timeout 2w inspect x".to_owned(),
        "latch x wait --timeout ms".to_owned(),
    ] {
        assert_usage_error(&world.run_line(&line), "invalid duration");
    }
    assert!(!Path::new(&marker).exists(), "the command must not run");
}

#[test]
fn foreign_data_under_a_key_is_65() {
    let world = World::new();
    let marker = world.path("marker");
    let touch = format!("-- touch {marker}");
    let lock = keys::lock("foreign").hash;
    world.server.cmd(&["SET", &lock, "not a hash"]);
    // Every message names the keys; inspect shows the one at fault, with its type.
    world
        .run_line(&format!("lock foreign {touch}"))
        .assert_error(65, "wrong type");
    world
        .run_line(&format!("lock foreign {touch}"))
        .assert_error(
            65,
            &format!("a key under {}:*", keys::space("foreign").base()),
        );
    let shown = world.run_line("inspect foreign");
    assert_eq!(
        shown.stdout,
        format!("foreign data under {lock}\n  found    a string\n  used by  lock\n")
    );
    let lines: Vec<&str> = shown.stderr.lines().collect();
    assert_eq!(
        lines,
        [format!("redisync: foreign data under {lock}")],
        "{shown}"
    );
    assert_eq!(shown.code(), 65);
    let json = Json::parse(&world.run_line("inspect foreign --json").stdout).expect("json");
    let foreign = &json.get("primitives").items()[0];
    assert_eq!(foreign.get("kind").str(), "foreign_data");
    assert_eq!(foreign.get("key").str(), lock);
    assert_eq!(foreign.get("fields").get("found").str(), "a string");
    assert_eq!(foreign.get("fields").get("used_by").str(), "lock");
    world
        .server
        .cmd(&["SET", &keys::latch("foreign").latch, "not a hash"]);
    world
        .run_line("latch foreign set 1")
        .assert_error(65, "wrong type");
    world
        .server
        .cmd(&["RPUSH", &keys::expirable("foreign").permits, "x"]);
    world
        .run_line(&format!("semaphore foreign --permits 1 {touch}"))
        .assert_error(65, "wrong type");
    assert!(!Path::new(&marker).exists(), "the command must not run");
    let value: String = redis::from_redis_value(world.server.cmd(&["GET", &lock])).unwrap();
    assert_eq!(value, "not a hash", "nothing overwritten");
}

// ---------------------------------------------------------------------------------------------
// 3. What the command gets in its environment.
// ---------------------------------------------------------------------------------------------

#[test]
fn fencing_tokens_grow_and_permits_have_ids() {
    let world = World::new();
    let show = r#"printf '%s|%s|%s' "$REDISYNC_FENCING_TOKEN" "$REDISYNC_LOCK_NAME" "${REDISYNC_PERMIT_ID-unset}""#;
    let mut last = 0u64;
    for options in [
        "lock tokens",
        "lock tokens",
        "lock tokens --wait 1s --lease 5s",
    ] {
        let done = world.run(&sh_args(options, show, &[]));
        done.assert_code(0);
        let parts: Vec<&str> = done.stdout.split('|').collect();
        let token: u64 = parts[0].parse().unwrap_or_else(|_| panic!("{done}"));
        assert!(token > last, "tokens must grow: {last} then {token}");
        assert_eq!(parts[1..], ["tokens", "unset"], "{done}");
        last = token;
    }

    let show = r#"printf '%s|%s|%s' "$REDISYNC_PERMIT_ID" "$REDISYNC_SEMAPHORE_NAME" "${REDISYNC_FENCING_TOKEN-unset}""#;
    let mut ids = Vec::new();
    for _ in 0..2 {
        let done = world.run(&sh_args("semaphore ids --permits 2", show, &[]));
        done.assert_code(0);
        let parts: Vec<&str> = done.stdout.split('|').collect();
        assert!(!parts[0].is_empty(), "a permit id: {done}");
        assert_eq!(parts[1..], ["ids", "unset"], "{done}");
        ids.push(parts[0].to_owned());
    }
    assert_ne!(ids[0], ids[1], "each permit has its own id");
}

// ---------------------------------------------------------------------------------------------
// 4. Losing the hold stops the command.
// ---------------------------------------------------------------------------------------------

#[test]
fn an_expired_lease_stops_the_command() {
    let world = World::new();
    let script = r#"echo $$ > "$1"; exec sleep 30"#;
    for (options, what) in [
        ("lock short --lease 500ms", "lock"),
        ("semaphore short-pool --permits 1 --lease 500ms", "permit"),
    ] {
        let pidfile = world.path(&format!("pid-{what}"));
        let mut run = world.sh(options, script, &[&pidfile]);
        let child = pid_in(&pidfile);
        let done = run.wait(Duration::from_secs(5));
        done.assert_error(
            120,
            &format!("the {what} was lost while the command ran; the command was stopped"),
        );
        assert!(done.elapsed >= Duration::from_millis(450), "{done}");
        eventually(Duration::from_secs(2), "the command is gone", || {
            !process_runs(child)
        });
    }
    // Both are free again.
    world
        .run_line("lock short --wait 2s -- true")
        .assert_code(0);
    world
        .run_line("semaphore short-pool --permits 1 --wait 2s -- true")
        .assert_code(0);
}

/// A command that ignores the signal is killed once `--kill-after` has passed.
#[test]
fn a_command_ignoring_the_signal_is_killed_after_the_grace() {
    let world = World::new();
    let pidfile = world.path("pid");
    // `exec` keeps the ignored TERM, so the one process to stop is the one redisync started.
    let mut run = world.sh(
        "lock stubborn --lease 500ms --kill-after 1s",
        r#"trap "" TERM; echo $$ > "$1"; exec sleep 30"#,
        &[&pidfile],
    );
    let child = pid_in(&pidfile);
    let done = run.wait(Duration::from_secs(6));
    done.assert_error(120, "the lock was lost while the command ran");
    assert!(
        done.elapsed >= Duration::from_millis(1400),
        "killed before the grace ran out: {done}"
    );
    assert!(done.elapsed < Duration::from_secs(4), "{done}");
    eventually(Duration::from_secs(2), "the command is gone", || {
        !process_runs(child)
    });
}

/// `--signal` chooses the signal: the command sees it (not TERM) and ends long before the
/// grace runs out.
#[test]
fn the_chosen_signal_is_sent() {
    let world = World::new();
    let script = format!(
        r#"for s in INT TERM USR1 HUP; do trap "echo $s > \"\$2\"; exit 0" $s; done; echo $$ > "$1"; {BOUNDED_WAIT}"#
    );
    for (flag, expected) in [("INT", "INT"), ("sigusr1", "USR1"), ("1", "HUP")] {
        let pidfile = world.path(&format!("pid-{expected}"));
        let seen = world.path(&format!("seen-{expected}"));
        let options = format!("lock signals --lease 500ms --signal {flag} --kill-after 10s");
        let mut run = world.sh(&options, &script, &[&pidfile, &seen]);
        let child = pid_in(&pidfile);
        let done = run.wait(Duration::from_secs(5));
        // The whole process group gets the signal, so the shell may report its `sleep`.
        done.assert_code(120);
        assert!(
            done.stderr
                .contains("redisync: the lock was lost while the command ran"),
            "{done}"
        );
        assert_eq!(lines_of(&seen), [expected], "--signal {flag}: {done}");
        eventually(Duration::from_secs(2), "the command is gone", || {
            !process_runs(child)
        });
    }
}

/// Interrupt and terminate sent to redisync are passed on to the command, whose exit code
/// then passes through; the lock is released.
#[test]
fn signals_to_redisync_are_passed_on() {
    let world = World::new();
    let script = format!(
        r#"for s in INT TERM; do trap "echo $s > \"\$2\"; exit 3" $s; done; echo $$ > "$1"; {BOUNDED_WAIT}"#
    );
    for signal in ["TERM", "INT"] {
        let pidfile = world.path(&format!("pid-{signal}"));
        let seen = world.path(&format!("seen-{signal}"));
        let mut run = world.sh("lock fwd", &script, &[&pidfile, &seen]);
        pid_in(&pidfile);
        // The command runs, so redisync is in its loop that listens for signals (it starts
        // listening right after the spawn; the pause only makes sure).
        thread::sleep(Duration::from_millis(100));
        send_signal(run.pid(), signal);
        let done = run.wait(Duration::from_secs(5));
        done.assert_code(3);
        assert_eq!(lines_of(&seen), [signal], "{done}");
        assert!(!world.key_exists(&keys::lock("fwd").hash), "released");
    }
}

/// `kill -9` of redisync takes its command with it (Linux's parent-death signal): the
/// command does not run on while the lock frees for someone else.
#[cfg(target_os = "linux")]
#[test]
fn a_killed_redisync_takes_its_command_with_it() {
    let world = World::new();
    let pidfile = world.path("pid");
    let mut run = world.sh(
        "lock orphan",
        &format!(r#"echo $$ > "$1"; {BOUNDED_WAIT}"#),
        &[&pidfile],
    );
    let child = pid_in(&pidfile);
    assert!(process_runs(child));
    send_signal(run.pid(), "KILL");
    let _ = run.wait(Duration::from_secs(5));
    eventually(
        Duration::from_secs(1),
        "the command died with redisync",
        || !process_runs(child),
    );

    // And so do the programs the command started (the parent-death signal reaches only the
    // command itself).
    let (shell, started) = (world.path("shell"), world.path("started"));
    let mut run = world.sh(
        "lock orphan-programs",
        r#"echo $$ > "$1"; sleep 20 & echo $! > "$2"; wait"#,
        &[&shell, &started],
    );
    let (shell, started) = (pid_in(&shell), pid_in(&started));
    assert!(process_runs(started));
    send_signal(run.pid(), "KILL");
    let _ = run.wait(Duration::from_secs(5));
    eventually(
        Duration::from_secs(1),
        "the command's programs died with redisync",
        || !process_runs(shell) && !process_runs(started),
    );
}

/// A signal that comes while the hold is being checked, after the acquire and before the
/// command starts, is passed on to the command, not lost: the check is slowed by a proxy
/// that delays every reply.
#[test]
fn a_signal_right_after_the_acquire_is_not_lost() {
    use redisync_test_harness::ChaosProxy;
    let world = World::new();
    let proxy = ChaosProxy::start(&world.server);
    proxy.set_latency(Duration::from_millis(40));
    let mut run = Proc::spawn(redisync_command(
        &proxy.url(),
        &[
            "--command-timeout",
            "20s",
            "lock",
            "signalled",
            "--",
            "sleep",
            "10",
        ],
    ));
    // The hold exists in Redis before its reply reaches redisync, which then checks (slowly)
    // that the name is not another kind's before it starts the command.
    eventually(RUN_LIMIT, "the lock is taken", || {
        world.key_exists(&keys::lock("signalled").hash) || !run.is_running()
    });
    assert!(run.is_running(), "{}", run.wait(RUN_LIMIT));
    // The reply is on its way for one delay; the check makes dozens of round trips.
    thread::sleep(Duration::from_millis(300));
    send_signal(run.pid(), "TERM");
    let done = run.wait(Duration::from_secs(8));
    done.assert_code(143);
    assert!(
        !done.stderr.contains("interrupted while waiting"),
        "the signal came after the acquire: {done}"
    );
    assert!(
        done.elapsed < Duration::from_secs(8),
        "the command ran on: {done}"
    );
}

/// `--shell` runs the command line through `sh -c`: `&&`, redirections and variables work,
/// and the line's exit code is passed through.
#[test]
fn shell_runs_the_command_line_through_sh() {
    let world = World::new();
    let out = world.path("out");
    let line = format!("echo \"$REDISYNC_LOCK_NAME\" > {out} && test -s {out} && exit 7");
    world
        .run(&["lock", "shelled", "--shell", "--", &line])
        .assert_code(7);
    assert_eq!(lines_of(&out), ["shelled"]);
    // Several words are joined into one line.
    let marker = world.path("marker");
    world
        .run(&[
            "lock", "shelled", "--shell", "--", "touch", &marker, "&&", "true",
        ])
        .assert_code(0);
    assert!(Path::new(&marker).exists());
    // Without --shell the same line is one program's name, which does not exist.
    world
        .run(&["lock", "shelled", "--", "true && true"])
        .assert_error(127, "command not found");
}

/// `lock NAME` without a command holds the lock until redisync is interrupted, after
/// printing the hold's variables; interrupted, it releases the lock and exits 0.
#[test]
fn a_lock_without_a_command_is_held_until_interrupted() {
    let world = World::new();
    for signal in ["INT", "TERM"] {
        let mut run = world.spawn(&["lock", "held"]);
        eventually(RUN_LIMIT, "the lock is held", || {
            world.key_exists(&keys::lock("held").hash)
        });
        // Someone else cannot take it meanwhile.
        world
            .run(&["lock", "held", "--wait", "200ms", "--", "true"])
            .assert_code(124);
        // `inspect` names the holder by host and pid, text and JSON.
        let holder = format!(":{}@", run.pid());
        let table = world.inspect("held");
        let shown = table_field(&table, "lock \"held\"", "holder").unwrap_or_default();
        assert!(shown.contains(&holder), "holder {holder}...: {table}");
        let json = world.inspect_json("held");
        let shown = json.primitive("lock").get("holder").str().to_owned();
        assert!(shown.contains(&holder), "holder {holder}...: {json:?}");
        thread::sleep(Duration::from_millis(100));
        send_signal(run.pid(), signal);
        let done = run.wait(Duration::from_secs(5));
        done.assert_code(0);
        assert!(
            done.stdout.contains("REDISYNC_LOCK_NAME=held\n")
                && done.stdout.contains("REDISYNC_FENCING_TOKEN="),
            "{done}"
        );
        assert!(!world.key_exists(&keys::lock("held").hash), "released");
    }
}

// ---------------------------------------------------------------------------------------------
// 8. force-unlock (with 4.: the run whose lock was taken away is stopped).
// ---------------------------------------------------------------------------------------------

/// `force-unlock` from another process while a command runs under a fixed lease: refused
/// without `--yes`; with it, a waiter gets the lock at once, and the first run is stopped
/// when its lease runs out.
#[test]
fn force_unlock_needs_yes_and_frees_the_lock() {
    let world = World::new();
    let pidfile = world.path("pid");
    let mut holder = world.sh(
        "lock stuck --lease 4s",
        &format!(r#"echo $$ > "$1"; {BOUNDED_WAIT}"#),
        &[&pidfile],
    );
    let child = pid_in(&pidfile);
    let owner = || -> Option<String> {
        redis::from_redis_value(
            world
                .server
                .cmd(&["HGET", &keys::lock("stuck").hash, "owner"]),
        )
        .unwrap()
    };
    let held_by = owner().expect("held");

    // Without --yes and without a terminal: refused, nothing changes.
    let done = world.run_line("force-unlock stuck");
    done.assert_error(
        2,
        "refusing to force-unlock without --yes (stdin is not a terminal)",
    );
    assert_eq!(done.stdout, "");
    assert_eq!(
        owner().as_deref(),
        Some(held_by.as_str()),
        "nothing changed"
    );

    let got = world.path("got");
    let mut waiter = world.spawn(&["lock", "stuck", "--wait", "5s", "--", "touch", &got]);
    thread::sleep(Duration::from_millis(300));
    assert!(waiter.is_running(), "the waiter waits");
    assert!(!Path::new(&got).exists());

    let done = world.run_line("force-unlock stuck --yes");
    done.assert_code(0);
    assert_eq!(done.stdout, "freed \"stuck\": lock\n");
    waiter.wait(Duration::from_secs(5)).assert_code(0);
    assert!(Path::new(&got).exists());
    assert!(
        holder.is_running(),
        "the waiter got the lock through force-unlock, not through the end of the lease"
    );

    // The first run learns of the loss when its lease ends: its command is stopped.
    let done = holder.wait(Duration::from_secs(8));
    done.assert_error(120, "the lock was lost while the command ran");
    eventually(Duration::from_secs(2), "the command is gone", || {
        !process_runs(child)
    });

    let done = world.run_line("force-unlock stuck --yes");
    done.assert_code(0);
    assert_eq!(done.stdout, "\"stuck\" was not locked\n");
}

/// A command that ends after its lock was taken away (before the lease would have told) is
/// reported as a lost hold, not with its own exit code.
#[test]
fn a_lock_taken_away_under_a_finishing_command_is_120() {
    let world = World::new();
    let (started, gate) = (world.path("started"), world.path("gate"));
    let script = r#"echo $$ > "$1"; i=0; while [ ! -e "$2" ] && [ $i -lt 300 ]; do sleep 0.05; i=$((i+1)); done"#;
    let mut holder = world.sh("lock taken --lease 20s", script, &[&started, &gate]);
    pid_in(&started);
    world.run_line("force-unlock taken --yes").assert_code(0);
    fs::write(&gate, "").unwrap();
    let done = holder.wait(Duration::from_secs(5));
    done.assert_error(120, "the lock was lost before the command finished");
}

/// Under the watchdog (the default lease), a run whose lock is force-unlocked is stopped at
/// once: the force-unlock tells the run's client, rather than the run finding out at its next
/// renewal (10 s with the defaults).
#[test]
fn a_force_unlocked_run_is_stopped_at_once() {
    let world = World::new();
    let pidfile = world.path("pid");
    let mut holder = world.sh(
        "lock watched",
        &format!(r#"echo $$ > "$1"; {BOUNDED_WAIT}"#),
        &[&pidfile],
    );
    let child = pid_in(&pidfile);
    // The run's client listens for lost notices once it holds the lock.
    world.wait_for_lost_notice_listener();
    let taken = Instant::now();
    world.run_line("force-unlock watched --yes").assert_code(0);
    let done = holder.wait(Duration::from_secs(8));
    let stopped_after = taken.elapsed();
    done.assert_error(120, "the lock was lost while the command ran");
    assert!(
        stopped_after < Duration::from_secs(3),
        "stopped {stopped_after:?} after the force-unlock: at a renewal, not at once"
    );
    assert!(!process_runs(child), "the command is gone");
}

/// `force-unlock` frees every kind of lock under the name.
#[test]
fn force_unlock_frees_every_kind_of_lock() {
    let world = World::new();
    let rt = runtime();
    let client = rt
        .block_on(Client::connect(world.url()))
        .expect("the library connects");
    let (lock, fair, rw) = (
        client.lock("all"),
        client.fair_lock("all"),
        client.read_write_lock("all"),
    );
    let guards = rt.block_on(async {
        (
            lock.lock().await.unwrap(),
            fair.lock().await.unwrap(),
            rw.write().await.unwrap(),
        )
    });
    let before = world.inspect_json("all");
    assert_eq!(before.get("primitives").items().len(), 3, "{before:?}");

    let done = world.run_line("force-unlock all --yes");
    done.assert_code(0);
    assert_eq!(
        done.stdout,
        "freed \"all\": lock, fair lock, read-write lock\n"
    );
    rt.block_on(async {
        assert!(!lock.is_locked().await.unwrap());
        assert!(!fair.is_locked().await.unwrap());
        assert!(!rw.is_locked().await.unwrap());
    });
    // Nothing is left under the name (but its fencing counters): exit 66.
    let done = world.run(&["inspect", "all"]);
    done.assert_code(66);
    assert!(!done.stdout.contains("holder  "), "{done}");
    drop(guards);
}

// ---------------------------------------------------------------------------------------------
// 5. Semaphore.
// ---------------------------------------------------------------------------------------------

/// Four commands at once on two permits: never more than two run together, and two do (each
/// command waits, bounded, until two have started, so the overlap is certain when allowed).
#[test]
fn semaphore_runs_at_most_permits_commands_at_once() {
    let world = World::new();
    let log = world.path("log");
    let script = r#"echo "start $REDISYNC_PERMIT_ID" >> "$1"
i=0; while [ "$(grep -c start "$1")" -lt 2 ] && [ $i -lt 40 ]; do sleep 0.05; i=$((i+1)); done
sleep 0.1; echo "end $REDISYNC_PERMIT_ID" >> "$1""#;
    let mut runs: Vec<Proc> = (0..4)
        .map(|_| world.sh("semaphore pool --permits 2", script, &[&log]))
        .collect();
    for run in &mut runs {
        run.wait(RUN_LIMIT).assert_code(0);
    }

    let lines = lines_of(&log);
    assert_eq!(lines.len(), 8, "{lines:#?}");
    let mut running: Vec<&str> = Vec::new();
    let mut most = 0;
    for line in &lines {
        match line.split_once(' ') {
            Some(("start", id)) => {
                assert!(!running.contains(&id), "permit ids are unique: {lines:#?}");
                running.push(id);
            }
            Some(("end", id)) => {
                let at = running.iter().position(|r| *r == id);
                running.remove(at.unwrap_or_else(|| panic!("end without start: {lines:#?}")));
            }
            _ => panic!("unexpected line {line:?}"),
        }
        most = most.max(running.len());
    }
    assert_eq!(
        most, 2,
        "at most 2 at once, and 2 did run together: {lines:#?}"
    );

    // The permits are back.
    let table = world.inspect("pool");
    let header = "expirable semaphore \"pool\"";
    let field = |label| table_field(&table, header, label);
    assert_eq!(field("available permits").as_deref(), Some("2"), "{table}");
    assert_eq!(field("permits out").as_deref(), Some("0"), "{table}");
    // --permits must agree with an existing semaphore, and then changes nothing.
    world
        .run_line("semaphore pool --permits 5 -- true")
        .assert_error(78, "has 2 permits, not 5");
    world
        .run_line("semaphore pool --permits 2 -- true")
        .assert_code(0);
    let json = world.inspect_json("pool");
    let fields = json.primitive("expirable_semaphore");
    assert_eq!(fields.get("available_permits").int(), 2);
}

/// `semaphore --classic` works on the library's `Semaphore`: units taken several at a time,
/// waiting while the library holds them; `semaphore-set --classic` creates one or changes it
/// by a number, never to one (it has no total); the two kinds do not share a name.
#[test]
fn classic_semaphore_runs_on_the_librarys_semaphore() {
    let world = World::new();
    let rt = runtime();
    let client = rt
        .block_on(Client::connect(world.url()))
        .expect("the library connects");
    let jobs = client.semaphore("jobs");
    assert!(rt.block_on(jobs.try_set_permits(2)).unwrap());
    let taken = rt.block_on(jobs.acquire()).unwrap();

    // One unit is free: a run of one goes, a run of two waits.
    world
        .run_line("semaphore --classic jobs -- true")
        .assert_code(0);
    let done = world.run_line("semaphore --classic jobs --units 2 --wait 300ms -- true");
    done.assert_code(124);
    assert_eq!(rt.block_on(jobs.available_permits()).unwrap(), 1, "{done}");
    rt.block_on(taken.release()).unwrap();
    let done = world.run(&[
        "semaphore",
        "--classic",
        "jobs",
        "--units",
        "2",
        "--",
        "sh",
        "-c",
        "echo \"$REDISYNC_SEMAPHORE_NAME\"",
    ]);
    done.assert_code(0);
    assert_eq!(done.stdout, "jobs\n");
    assert_eq!(rt.block_on(jobs.available_permits()).unwrap(), 2);

    // Creating: only with a number; --permits on an existing one changes nothing.
    world
        .run_line("semaphore --classic fresh -- true")
        .assert_error(66, "does not exist; give --permits N");
    world
        .run_line("semaphore --classic fresh -n 3 -- true")
        .assert_code(0);
    assert_eq!(
        rt.block_on(client.semaphore("fresh").available_permits())
            .unwrap(),
        3
    );

    // semaphore-set --classic: create, or --add; setting an existing one is refused.
    world
        .run_line("semaphore-set --classic made 4")
        .assert_code(0);
    assert_eq!(
        rt.block_on(client.semaphore("made").available_permits())
            .unwrap(),
        4
    );
    world
        .run_line("semaphore-set --classic jobs 5")
        .assert_error(78, "--add N");
    world
        .run_line("semaphore-set --classic jobs --add -1")
        .assert_code(0);
    assert_eq!(rt.block_on(jobs.available_permits()).unwrap(), 1);
    // The expirable semaphore takes --add too.
    world.run_line("semaphore-set pool 2").assert_code(0);
    world.run_line("semaphore-set pool --add 3").assert_code(0);
    let json = world.inspect_json("pool");
    let fields = json.primitive("expirable_semaphore");
    assert_eq!(fields.get("available_permits").int(), 5, "{json:?}");

    // --add changes only what exists.
    world
        .run_line("semaphore-set --classic nothing --add 2")
        .assert_error(66, "does not exist");
    world
        .run_line("semaphore-set nothing --add -2")
        .assert_error(66, "does not exist");
    assert!(!world.key_exists(&keys::semaphore("nothing").permits));
    assert!(!world.key_exists(&keys::expirable("nothing").permits));

    // One name, one kind; the message names the flag that reaches the other semaphore.
    world.run_line("semaphore jobs -- true").assert_error(
        73,
        "in use as a semaphore, not as an expirable semaphore: one name is one primitive \
             (`redisync inspect \"jobs\"` shows it); `semaphore --classic` uses it",
    );
    world
        .run_line("semaphore --classic pool -- true")
        .assert_error(73, "in use as an expirable semaphore");
    // Options of the other kind are refused.
    assert_usage_error(
        &world.run_line("semaphore jobs --units 2 -- true"),
        "--classic",
    );
    assert_usage_error(
        &world.run_line("semaphore --classic jobs --lease 1s -- true"),
        "--lease",
    );

    // `delete classic-semaphore` frees the name.
    world
        .run_line("delete classic-semaphore jobs --yes")
        .assert_code(0);
    assert!(!world.key_exists(&keys::semaphore("jobs").permits));
    world.run_line("lock jobs -- true").assert_code(0);
}

/// Two kinds racing for one new name: with Redis's writes paused, both pass the first check
/// before either takes its hold, then the second check finds the other. At most one command
/// runs, and a refused semaphore run takes back the semaphore it created, so the name is not
/// left another kind's for good.
#[test]
fn racing_kinds_never_both_run_and_leave_nothing_behind() {
    let world = World::new();
    let ran = world.path("ran");
    world.server.cmd(&["CLIENT", "PAUSE", "1500", "WRITE"]);
    let line = |kind: &str| format!("echo {kind} >> {ran}");
    let mut lock = world.spawn(&["lock", "race", "--shell", "--", &line("lock")]);
    let mut semaphore = world.spawn(&[
        "semaphore",
        "race",
        "-n",
        "1",
        "--shell",
        "--",
        &line("semaphore"),
    ]);
    let (lock, semaphore) = (lock.wait(RUN_LIMIT), semaphore.wait(RUN_LIMIT));
    let ran = lines_of(&ran);
    assert!(ran.len() <= 1, "both ran: {ran:?}\n{lock}\n{semaphore}");
    for done in [&lock, &semaphore] {
        assert!(
            [0, 73].contains(&done.code()),
            "ran, or refused for the other kind: {done}"
        );
    }
    if semaphore.code() != 0 {
        assert!(
            !world.key_exists(&keys::expirable("race").permits),
            "the refused run's semaphore is left: {semaphore}"
        );
        world.run_line("lock race -- true").assert_code(0);
    }
}

/// `latch help VERB` is clap's help, not a latch called "help".
#[test]
fn latch_help_is_help() {
    let world = World::new();
    let done = world.run_line("latch help set");
    done.assert_code(0);
    assert!(done.stdout.contains("Arm the latch with a count"), "{done}");
}

// ---------------------------------------------------------------------------------------------
// 6. Latch.
// ---------------------------------------------------------------------------------------------

#[test]
fn latch_waiters_go_after_the_last_count_down() {
    let world = World::new();
    // The older order, `latch NAME VERB`, is still accepted.
    world.run_line("latch gate set 2").assert_code(0);
    world
        .run_line("latch set gate 5")
        .assert_error(75, "latch \"gate\" is armed already (count 2)");
    let done = world.run_line("latch wait gate --timeout 300ms");
    done.assert_error(124, "latch \"gate\" still armed (count 2)");
    assert!(done.elapsed >= Duration::from_millis(300), "{done}");

    let mut waiter = world.spawn(&words("latch wait gate"));
    let mut timed_waiter = world.spawn(&words("latch wait gate --timeout 10s"));
    world.run_line("latch count-down gate").assert_code(0);
    let table = world.inspect("gate");
    assert_eq!(
        table_field(&table, "count-down latch \"gate\"", "count").as_deref(),
        Some("1"),
        "{table}"
    );
    thread::sleep(Duration::from_millis(300));
    assert!(waiter.is_running(), "still armed after one count-down");
    assert!(
        timed_waiter.is_running(),
        "still armed after one count-down"
    );

    world.run_line("latch gate count-down").assert_code(0);
    let done = waiter.wait(Duration::from_secs(5));
    done.assert_code(0);
    assert_eq!(done.stderr, "");
    timed_waiter.wait(Duration::from_secs(5)).assert_code(0);

    // Open: waiting returns at once, and it can be armed again.
    world.run_line("latch wait gate").assert_code(0);
    world
        .run_line("latch wait gate --timeout 1s")
        .assert_code(0);
    world.run_line("latch set gate 1").assert_code(0);

    // Never armed: not a latch that opened, and said so (a typo must not pass as a wait).
    let done = world.run_line("latch wait never-armed");
    done.assert_error(66, "latch \"never-armed\" is not armed: it was never set");
    let done = world.run_line("latch never-armed wait --wait 1s");
    done.assert_error(66, "is not armed");
    // A latch whose name is a verb, in either order.
    world.run_line("latch set wait 1").assert_code(0);
    world.run_line("latch count-down wait").assert_code(0);
    world.run_line("latch wait wait").assert_code(0);
}

// ---------------------------------------------------------------------------------------------
// 7. inspect.
// ---------------------------------------------------------------------------------------------

#[test]
fn inspect_shows_locks() {
    let world = World::new();
    let rt = runtime();
    let client = rt
        .block_on(Client::connect(world.url()))
        .expect("the library connects");

    // A reentrant lock, held twice by one owner.
    let lock = client.lock("held");
    let holds = rt.block_on(async { (lock.lock().await.unwrap(), lock.lock().await.unwrap()) });
    let token = holds.0.fencing_token().to_string();
    let table = world.inspect("held");
    let header = "lock \"held\"";
    let field = |label| table_field(&table, header, label);
    assert!(table.starts_with(&format!("{header}\n")), "{table}");
    assert_eq!(field("holder").as_deref(), Some(lock.owner_id()), "{table}");
    assert_eq!(field("holds").as_deref(), Some("2"), "{table}");
    assert_eq!(field("fencing token"), Some(token.clone()), "{table}");
    let lease = field("lease left").unwrap();
    let ms: u64 = lease
        .strip_suffix("ms")
        .and_then(|ms| ms.parse().ok())
        .unwrap_or_else(|| panic!("{table}"));
    assert!(ms > 0 && ms <= 30_000, "{table}");
    let json = world.inspect_json("held");
    assert_eq!(json.get("name").str(), "held");
    assert_eq!(json.get("primitives").items().len(), 1, "{json:?}");
    let fields = json.primitive("lock");
    assert_eq!(fields.get("holder").str(), lock.owner_id());
    assert_eq!(fields.get("holds").int(), 2);
    assert_eq!(fields.get("fencing_token").int().to_string(), token);
    let lease = fields.get("lease_left_ms").int();
    assert!(lease > 0 && lease <= 30_000, "{json:?}");

    // A fair lock with one waiter.
    let fair = client.fair_lock("queue");
    let fair_hold = rt.block_on(fair.lock()).unwrap();
    let other = client.fair_lock("queue");
    let waiting = rt.spawn(async move { other.lock().await.map(|g| g.fencing_token()) });
    let header = "fair lock \"queue\"";
    eventually(Duration::from_secs(5), "the waiter is queued", || {
        table_field(&world.inspect("queue"), header, "waiters").as_deref() == Some("1")
    });
    let table = world.inspect("queue");
    let field = |label| table_field(&table, header, label);
    assert_eq!(field("holder").as_deref(), Some(fair.owner_id()), "{table}");
    assert_eq!(field("holds").as_deref(), Some("1"), "{table}");
    let token = fair_hold.fencing_token().to_string();
    assert_eq!(field("fencing token"), Some(token), "{table}");
    let json = world.inspect_json("queue");
    let fields = json.primitive("fair_lock");
    assert_eq!(fields.get("waiters").int(), 1);
    assert_eq!(fields.get("holder").str(), fair.owner_id());
    waiting.abort();

    // A read-write lock held for writing.
    let rw = client.read_write_lock("rw");
    let write = rt.block_on(rw.write()).unwrap();
    let table = world.inspect("rw");
    let header = "read-write lock \"rw\"";
    let field = |label| table_field(&table, header, label);
    assert_eq!(field("mode").as_deref(), Some("write"), "{table}");
    assert_eq!(field("writer").as_deref(), Some(rw.owner_id()), "{table}");
    assert_eq!(field("write holds").as_deref(), Some("1"), "{table}");
    let token = write.fencing_token().to_string();
    assert_eq!(field("fencing token"), Some(token), "{table}");
    assert_eq!(field("waiting writers").as_deref(), Some("0"), "{table}");
    let json = world.inspect_json("rw");
    let fields = json.primitive("read_write_lock");
    assert_eq!(fields.get("mode").str(), "write");
    assert_eq!(fields.get("writer").str(), rw.owner_id());
    assert!(!fields.has("readers"));

    // ... and one held for reading by two owners. The second reader of one client takes a
    // read hold that the client's further readers share, under an owner id of its own.
    let (r1, r2) = (client.read_write_lock("ro"), client.read_write_lock("ro"));
    let reads = rt.block_on(async { (r1.read().await.unwrap(), r2.read().await.unwrap()) });
    let table = world.inspect("ro");
    let header = "read-write lock \"ro\"";
    let field = |label| table_field(&table, header, label);
    assert_eq!(field("mode").as_deref(), Some("read"), "{table}");
    let readers = field("readers").unwrap();
    assert!(
        readers.contains(&format!("{} ×1", r1.owner_id())),
        "{table}"
    );
    assert!(
        readers.contains(&format!("{}:", client.id())) && readers.contains(":shared ×1"),
        "{table}"
    );
    assert!(field("writer").is_none(), "{table}");
    let json = world.inspect_json("ro");
    assert_eq!(json.primitive("read_write_lock").get("mode").str(), "read");
    drop((holds, fair_hold, write, reads));
}

#[test]
fn inspect_shows_semaphores_and_latches() {
    let world = World::new();
    let rt = runtime();
    let client = rt
        .block_on(Client::connect(world.url()))
        .expect("the library connects");

    // A counting semaphore with one of three permits out.
    let semaphore = client.semaphore("counted");
    let permit = rt.block_on(async {
        assert!(semaphore.try_set_permits(3).await.unwrap());
        semaphore.acquire().await.unwrap()
    });
    let table = world.inspect("counted");
    let available = table_field(&table, "semaphore \"counted\"", "available permits");
    assert_eq!(available.as_deref(), Some("2"), "{table}");
    let json = world.inspect_json("counted");
    let fields = json.primitive("semaphore");
    assert_eq!(fields.get("available_permits").int(), 2);

    // An expirable semaphore with one of two permits out.
    let expirable = client.expirable_semaphore("leased");
    let leased = rt.block_on(async {
        assert!(expirable.try_set_permits(2).await.unwrap());
        let lease = Duration::from_secs(30);
        expirable.acquire_with_lease(lease).await.unwrap()
    });
    let table = world.inspect("leased");
    let header = "expirable semaphore \"leased\"";
    let field = |label| table_field(&table, header, label);
    assert_eq!(field("available permits").as_deref(), Some("1"), "{table}");
    assert_eq!(field("permits out").as_deref(), Some("1"), "{table}");
    let out = field("permits").unwrap();
    assert!(
        out.starts_with(&format!("{} (lease left ", leased.id())),
        "{table}"
    );
    let json = world.inspect_json("leased");
    let fields = json.primitive("expirable_semaphore");
    assert_eq!(fields.get("available_permits").int(), 1);
    assert_eq!(fields.get("permits_out").int(), 1);
    let permits = fields.get("permits").items();
    assert_eq!(permits.len(), 1, "{json:?}");
    assert_eq!(permits[0].get("id").str(), leased.id(), "{json:?}");
    let left = permits[0].get("lease_left_ms").int();
    assert!(left > 0 && left <= 30_000, "{json:?}");

    // An armed latch, and a name several kinds use at once.
    world.run_line("latch many set 3").assert_code(0);
    let table = world.inspect("many");
    let count = table_field(&table, "count-down latch \"many\"", "count");
    assert_eq!(count.as_deref(), Some("3"), "{table}");
    let json = world.inspect_json("many");
    assert_eq!(json.primitive("count_down_latch").get("count").int(), 3);
    let lock_hold = rt.block_on(client.lock("many").lock()).unwrap();
    let json = world.inspect_json("many");
    let kinds: Vec<&str> = json
        .get("primitives")
        .items()
        .iter()
        .map(|p| p.get("kind").str())
        .collect();
    assert_eq!(kinds, ["lock", "count_down_latch"]);

    // Nothing at all (shown, and exit 66); and a name that needs escaping in JSON.
    let done = world.run(&["inspect", "unused"]);
    done.assert_error(66, "nothing exists under \"unused\"");
    assert_eq!(done.stdout, "nothing under \"unused\"\n");
    let done = world.run(&["inspect", "unused", "--json"]);
    done.assert_code(66);
    let json = Json::parse(&done.stdout).expect("JSON even for nothing");
    assert_eq!(json.get("name").str(), "unused");
    assert!(json.get("primitives").items().is_empty());
    let odd = "quote\" back\\slash\ttab";
    world.run(&["latch", odd, "set", "1"]).assert_code(0);
    let json = world.inspect_json(odd);
    assert_eq!(json.get("name").str(), odd);
    assert_eq!(json.primitive("count_down_latch").get("count").int(), 1);
    drop((permit, leased, lock_hold));
}

// ---------------------------------------------------------------------------------------------
// 9. Bad arguments.
// ---------------------------------------------------------------------------------------------

/// clap's errors: code 2, one `error: ...` first on stderr (then usage), no panic.
fn assert_usage_error(done: &Done, needle: &str) {
    done.assert_code(2);
    let first = done.stderr.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("error: ") && done.stderr.contains(needle),
        "expected `error: ...` first on stderr, and {needle:?}:\n{done}"
    );
    let errors = done.stderr.lines().filter(|l| l.starts_with("error"));
    assert_eq!(errors.count(), 1, "one error:\n{done}");
    assert_eq!(done.stdout, "", "{done}");
}

#[test]
fn bad_arguments_are_2_with_one_error() {
    let world = World::new();
    let marker = world.path("marker");
    let touch = format!("-- touch {marker}");
    // Not bad arguments: a semaphore that does not exist, without --permits to create it,
    // is no such primitive (66).
    world
        .run_line(&format!("semaphore x {touch}"))
        .assert_error(66, "does not exist; give --permits N");
    for (line, needle) in [
        // (`lock x` without a command holds until interrupted: see its own test.)
        (
            "rate x --rate 1/s".to_owned(),
            "required arguments were not provided",
        ),
        (format!("lock x touch {marker}"), "unexpected argument"),
        ("unlock x".to_owned(), "unrecognized subcommand 'unlock'"),
        (
            format!("semaphore x --permits 0 {touch}"),
            "0 is not in 1..",
        ),
        (
            format!("semaphore x --permits -1 {touch}"),
            "unexpected argument",
        ),
        (
            format!("semaphore x --permits many {touch}"),
            "invalid digit",
        ),
        (
            format!("lock x --signal BOGUS {touch}"),
            "unsupported signal \"BOGUS\"",
        ),
        (format!("lock x --signal 0 {touch}"), "unsupported signal"),
        (format!("lock x --signal 65 {touch}"), "unsupported signal"),
        (
            format!("lock x --signal STOP {touch}"),
            "unsupported signal",
        ),
        (format!("lock x --signal 19 {touch}"), "unsupported signal"),
        ("latch x open".to_owned(), "unrecognized subcommand 'x'"),
        ("latch x set".to_owned(), "<COUNT>"),
        (format!("inspect x --yes {touch}"), "unexpected argument"),
    ] {
        assert_usage_error(&world.run_line(&line), needle);
    }
    // Bare `redisync` shows its help, on stderr.
    let done = world.run(&[]);
    done.assert_code(2);
    assert!(done.stderr.contains("Usage: redisync"), "{done}");

    assert!(!Path::new(&marker).exists(), "the command must not run");
    world.run(&["inspect", "x"]).assert_code(66);
    // Fractions and microseconds are durations too.
    world
        .run_line("lock frac --wait 0.5s --lease 2.5s --kill-after 250us -- true")
        .assert_code(0);
}

#[test]
fn help_lists_the_exit_codes() {
    let world = World::new();
    let done = world.run_line("--help");
    done.assert_code(0);
    for line in ["Exit codes:", "120", "124", "127"] {
        assert!(done.stdout.contains(line), "{done}");
    }
    let done = world.run_line("--version");
    done.assert_code(0);
    assert!(done.stdout.starts_with("redisync "), "{done}");
}

// ---------------------------------------------------------------------------------------------
// Known problems.
// ---------------------------------------------------------------------------------------------

/// When the hold is lost, only the process redisync started is signalled, not its process
/// group: the children of a `sh -c '...'` wrapper go on running, unprotected.
#[test]
fn lock_loss_stops_the_commands_children_too() {
    let world = World::new();
    let pidfile = world.path("pid");
    let script = r#"sleep 5 & echo $! > "$1"; wait"#;
    let done = world
        .sh("lock tree --lease 500ms", script, &[&pidfile])
        .wait(RUN_LIMIT);
    done.assert_code(120);
    let grandchild = pid_in(&pidfile);
    eventually(
        Duration::from_secs(2),
        "the command's child is gone",
        || !process_runs(grandchild),
    );
}

/// Every signal redisync catches (here hangup) is passed on; redisync outlives the command and
/// releases the lock, instead of dying and leaving the lock to its lease.
#[test]
fn a_hangup_to_redisync_reaches_the_command_and_the_lock_is_released() {
    let world = World::new();
    let pidfile = world.path("pid-hup");
    let seen = world.path("seen-hup");
    let script =
        format!(r#"trap "echo HUP > \"\$2\"; exit 4" HUP; echo $$ > "$1"; {BOUNDED_WAIT}"#);
    let mut run = world.sh("lock hup", &script, &[&pidfile, &seen]);
    pid_in(&pidfile);
    send_signal(run.pid(), "HUP");
    let done = run.wait(Duration::from_secs(5));
    done.assert_code(4);
    assert_eq!(lines_of(&seen), ["HUP"], "{done}");
    assert!(!world.key_exists(&keys::lock("hup").hash), "released");
}

// ---------------------------------------------------------------------------------------------
// 8. Redis Cluster.
// ---------------------------------------------------------------------------------------------

#[test]
fn the_command_works_on_a_redis_cluster() {
    let cluster = redisync_test_harness::RedisCluster::start(3, 0);
    let url = cluster.seed_urls().join(",");
    let dir = cluster.node(0).dir().join("work");
    fs::create_dir_all(&dir).expect("the work directory can be created");
    let log = dir.join("log").to_string_lossy().into_owned();

    // Two callers take turns under one lock: sections never overlap, tokens grow.
    let script = r#"echo "start $REDISYNC_FENCING_TOKEN" >> "$1"; sleep 0.1; echo "end $REDISYNC_FENCING_TOKEN" >> "$1""#;
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let url = url.clone();
            let log = log.clone();
            thread::spawn(move || {
                for _ in 0..3 {
                    let args = sh_args("--cluster lock shared", script, &[&log]);
                    Proc::spawn(redisync_command(&url, &args))
                        .wait(RUN_LIMIT)
                        .assert_code(0);
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().expect("a worker failed");
    }
    let lines = lines_of(&log);
    assert_eq!(lines.len(), 12, "{lines:#?}");
    let mut last_token = 0;
    for section in lines.chunks(2) {
        let (start, end) = (words(&section[0]), words(&section[1]));
        assert_eq!((start[0], end[0]), ("start", "end"), "overlap: {lines:#?}");
        let token: u64 = start[1].parse().expect("a fencing token");
        assert!(token > last_token, "fencing tokens must grow: {lines:#?}");
        last_token = token;
    }

    // inspect reads the keys from the node that owns them.
    let rt = runtime();
    let client = rt
        .block_on(Client::cluster_builder(cluster.seed_urls()).build())
        .expect("the library connects to the cluster");
    let lock = client.lock("inspected");
    let guard = rt.block_on(lock.lock()).expect("the lock is free");
    let done = Proc::spawn(redisync_command(
        &url,
        &words("--cluster inspect inspected"),
    ))
    .wait(RUN_LIMIT);
    done.assert_code(0);
    assert_eq!(
        table_field(&done.stdout, "lock \"inspected\"", "holder").as_deref(),
        Some(lock.owner_id()),
        "{done}"
    );
    rt.block_on(guard.unlock()).expect("released");

    // A latch waiter is woken over sharded pub/sub.
    let run = |line: &str| Proc::spawn(redisync_command(&url, &words(line))).wait(RUN_LIMIT);
    run("--cluster latch gate set 1").assert_code(0);
    let mut waiter = Proc::spawn(redisync_command(&url, &words("--cluster latch gate wait")));
    thread::sleep(Duration::from_millis(300));
    assert!(waiter.is_running(), "the latch is still armed");
    run("--cluster latch gate count-down").assert_code(0);
    waiter.wait(Duration::from_secs(5)).assert_code(0);
}

// ---------------------------------------------------------------------------------------------
// Leader election: `elect` and `leader`.
// ---------------------------------------------------------------------------------------------

/// Candidates take turns leading: one command at a time, each with a greater term, and each
/// resignation hands over to the next.
#[test]
fn elect_runs_one_leader_at_a_time_with_growing_terms() {
    let world = World::new();
    let log = world.path("log");
    let script = r#"echo "start $2 $REDISYNC_TERM $REDISYNC_FENCING_TOKEN $REDISYNC_ELECTION_NAME" >> "$1"; sleep 0.2; echo "end $2 $REDISYNC_TERM" >> "$1""#;
    let workers: Vec<_> = ["a", "b", "c"]
        .into_iter()
        .map(|who| {
            let url = world.url();
            let log = log.clone();
            thread::spawn(move || {
                for run in 0..3 {
                    let tag = format!("{who}{run}");
                    let options = format!("elect sched --value {tag}");
                    let args = sh_args(&options, script, &[&log, &tag]);
                    Proc::spawn(redisync_command(&url, &args))
                        .wait(RUN_LIMIT)
                        .assert_code(0);
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().expect("a worker failed");
    }
    let lines = lines_of(&log);
    assert_eq!(lines.len(), 18, "{lines:#?}");
    let mut last_term = 0;
    for section in lines.chunks(2) {
        let start = words(&section[0]);
        let end = words(&section[1]);
        assert_eq!(start[0], "start", "leaders overlap: {lines:#?}");
        assert_eq!(end[0], "end", "leaders overlap: {lines:#?}");
        assert_eq!(start[1..3], end[1..3], "leaders overlap: {lines:#?}");
        let term: u64 = start[2].parse().expect("a term");
        assert_eq!(start[3], start[2], "the fencing token is the term");
        assert_eq!(start[4], "sched");
        assert!(term > last_term, "terms must grow: {lines:#?}");
        last_term = term;
    }
    assert!(
        !world.key_exists(&keys::election("sched").leader),
        "resigned"
    );
}

/// `leader` prints the leader (plain and JSON), `--watch` prints every change, and a wait that
/// runs out is 124.
#[test]
fn leader_prints_and_watches_the_leader() {
    let world = World::new();
    let done = world.run_line("leader web");
    done.assert_code(0);
    assert_eq!(done.stdout, "(none)\n");
    let json = Json::parse(&world.run_line("leader web --json").stdout).expect("JSON");
    assert_eq!(json.get("name").str(), "web");
    assert!(matches!(json.get("leader"), Json::Null), "{json:?}");

    let mut watch = world.spawn(&["leader", "web", "--watch", "--json"]);
    eventually(RUN_LIMIT, "the watcher prints the first state", || {
        text(&watch.stdout).lines().count() == 1
    });

    let gate = world.path("gate");
    let held = world.path("held");
    let hold = HOLD_UNTIL_GATE;
    let mut leader = world.sh("elect web --value node-a:8080", hold, &[&held, &gate]);
    pid_in(&held);
    let done = world.run_line("leader web");
    done.assert_code(0);
    assert_eq!(done.stdout, "node-a:8080 (term 1)\n");
    let inspected = world.inspect("web");
    assert_eq!(
        table_field(&inspected, "election \"web\"", "leader").as_deref(),
        Some("node-a:8080"),
        "{inspected}"
    );
    assert_eq!(
        table_field(&inspected, "election \"web\"", "term").as_deref(),
        Some("1"),
        "{inspected}"
    );
    let json = Json::parse(&world.run_line("leader web --json").stdout).expect("JSON");
    assert_eq!(json.get("leader").get("value").str(), "node-a:8080");
    assert!(
        matches!(json.get("leader").get("term"), Json::Number(term) if *term == 1.0),
        "{json:?}"
    );

    let marker = world.path("marker");
    let done = world.run(&["elect", "web", "--wait", "300ms", "--", "touch", &marker]);
    done.assert_error(124, "not leading \"web\" within the wait");
    assert!(!Path::new(&marker).exists(), "the command must not run");

    fs::write(&gate, "").unwrap();
    leader.wait(RUN_LIMIT).assert_code(0);
    eventually(RUN_LIMIT, "the watcher prints every change", || {
        text(&watch.stdout).lines().count() == 3
    });
    let lines: Vec<Json> = text(&watch.stdout)
        .lines()
        .map(|line| Json::parse(line).expect("one JSON object per line"))
        .collect();
    assert!(matches!(lines[0].get("leader"), Json::Null));
    assert_eq!(lines[1].get("leader").get("value").str(), "node-a:8080");
    assert!(matches!(lines[2].get("leader"), Json::Null));
    assert!(watch.is_running(), "--watch goes on");
}

/// A leadership that ends under the command stops it: exit 120, as for a lock.
#[test]
fn a_lost_leadership_stops_the_command_with_120() {
    let world = World::new();
    let pidfile = world.path("pid");
    let mut run = world.sh(
        "elect short --lease 500ms",
        r#"echo $$ > "$1"; exec sleep 30"#,
        &[&pidfile],
    );
    let child = pid_in(&pidfile);
    let done = run.wait(Duration::from_secs(5));
    done.assert_error(
        120,
        "the leadership was lost while the command ran; the command was stopped",
    );
    eventually(Duration::from_secs(2), "the command is gone", || {
        !process_runs(child)
    });
    world.run(&["elect", "", "--", "true"]).assert_code(2);
    world
        .run_line("elect short --wait 2s -- true")
        .assert_code(0);
}

// ---------------------------------------------------------------------------------------------
// `rate` and `semaphore -n`
// ---------------------------------------------------------------------------------------------

/// `rate` runs the command once the limiter gives its units: sequential runs are spaced by the
/// rate (a lower bound, which no scheduling delay can break), the command's exit code passes
/// through, and a set rate is kept.
#[test]
fn rate_runs_the_command_once_the_limiter_allows_it() {
    let world = World::new();
    let runs = world.path("runs");
    let started = Instant::now();
    for _ in 0..4 {
        world
            .run(&sh_args(
                "rate mailer --rate 4/2s",
                r#"echo "$REDISYNC_RATE_NAME" >> "$1""#,
                &[&runs],
            ))
            .assert_code(0);
    }
    // Four units at one per 500 ms: the fourth at least 1.5 s after the first.
    assert!(started.elapsed() >= Duration::from_millis(1_500));
    assert_eq!(lines_of(&runs), vec!["mailer"; 4]);

    // The rate set by the first run stays: a later, other --rate is refused with 78 and
    // runs nothing; the same rate spelt otherwise is accepted.
    world
        .run(&sh_args("rate mailer --rate 1000/s", "exit 3", &[]))
        .assert_error(78, "has rate 4/2s (burst 0), not 1000/s");
    world
        .run(&sh_args("rate mailer --rate 2/s --burst 1", "exit 3", &[]))
        .assert_error(
            78,
            "use `redisync rate-set mailer 2/s --burst 1` to change it",
        );
    world
        .run(&sh_args("rate mailer --rate 120/m", "exit 3", &[]))
        .assert_code(3);
    let rate = runtime().block_on(async {
        let client = Client::connect(world.url()).await.expect("connect");
        client.rate_limiter("mailer").rate().await.expect("rate")
    });
    assert_eq!(rate, Some(Rate::new(4, Duration::from_secs(2))));
    let json = world.inspect_json("mailer");
    assert_eq!(json.primitive("rate_limiter").get("rate").str(), "4/2s");

    // Without --rate, the one set is used; --burst and --units as documented.
    world.run_line("rate mailer -- true").assert_code(0);
    // `rate-set` changes it.
    world
        .run_line("rate-set mailer 1000/s --burst 5")
        .assert_code(0);
    let json = world.inspect_json("mailer");
    assert_eq!(
        json.primitive("rate_limiter").get("rate").str(),
        "1000/s burst 5"
    );
    world
        .run_line("rate batch --rate 1/h --burst 2 --units 3 -- true")
        .assert_code(0);
}

/// A wait that runs out is 124 and runs nothing; bad rates and unit counts are 2.
#[test]
fn rate_exit_codes() {
    let world = World::new();
    world
        .run_line("rate slow --rate 1/h -- true")
        .assert_code(0);
    let marker = world.path("marker");
    let done = world.run(&["rate", "slow", "--wait", "300ms", "--", "touch", &marker]);
    done.assert_error(124, "rate limiter \"slow\" gave no units within the wait");
    assert!(done.elapsed >= Duration::from_millis(300), "{done}");
    assert!(!Path::new(&marker).exists(), "the command must not run");

    world
        .run_line("rate unset -- true")
        .assert_error(66, "has no rate: give --rate");
    for (line, needle) in [
        ("rate zero --rate 0/s -- true", "units must be at least 1"),
        (
            "rate big --rate 1/s --units 2 -- true",
            "at most 1 units at once",
        ),
        ("rate none --rate 1/s --units 0 -- true", "1 to 2^53"),
    ] {
        world.run_line(line).assert_error(2, needle);
    }
    // A run refused for its arguments takes back the limiter it created for them.
    assert!(!world.key_exists(&keys::rate("big").rate), "left behind");
    // Text that is no rate: clap's own usage error (2), naming what is accepted.
    for bad in ["10", "x/s", "10/5y"] {
        let done = world.run(&["rate", "text", "--rate", bad, "--", "true"]);
        done.assert_code(2);
        assert!(done.stderr.contains("--rate"), "{done}");
    }
    world
        .run_line("rate missing --rate 1/s -- no-such-command-here")
        .assert_code(127);
}

/// `semaphore -n N` is `--permits N`: it creates the semaphore with N permits.
#[test]
fn semaphore_n_is_permits() {
    let world = World::new();
    world
        .run(&sh_args("semaphore pool -n 3", "exit 0", &[]))
        .assert_code(0);
    let json = world.inspect_json("pool");
    let semaphore = json.primitive("expirable_semaphore");
    assert_eq!(semaphore.get("available_permits").int(), 3);
    // An existing semaphore keeps its permits; --permits that agrees is fine.
    world
        .run(&sh_args("semaphore pool --permits 3", "exit 4", &[]))
        .assert_code(4);
    let json = world.inspect_json("pool");
    assert_eq!(
        json.primitive("expirable_semaphore")
            .get("available_permits")
            .int(),
        3
    );
}

// ---------------------------------------------------------------------------------------------
// Repairing state: `semaphore --permits` checks, `semaphore-set`, `delete`.
// ---------------------------------------------------------------------------------------------

/// `--permits` creates, is optional once the semaphore exists, and refuses to run against a
/// semaphore with another number of permits; zero permits are refused outright, and
/// `semaphore-set` changes the number.
#[test]
fn semaphore_permits_are_checked_and_can_be_set() {
    let world = World::new();
    world
        .run_line("semaphore zero --permits 0 -- true")
        .assert_code(2);
    assert!(!world.key_exists(&keys::expirable("zero").permits));
    world
        .run_line("semaphore missing -- true")
        .assert_error(66, "does not exist; give --permits N");

    world.run_line("semaphore s -n 2 -- true").assert_code(0);
    world.run_line("semaphore s -- true").assert_code(0);
    world
        .run_line("semaphore s --permits 2 -- true")
        .assert_code(0);
    world
        .run_line("semaphore s --permits 3 -- true")
        .assert_error(78, "has 2 permits, not 3");

    // Set while a permit is out: the permit stays out, and counts.
    let mut holder = world.spawn(&["semaphore", "s", "--", "sleep", "1"]);
    eventually(RUN_LIMIT, "the permit is out", || {
        world.inspect("s").contains("permits out")
    });
    let done = world.run_line("semaphore-set s 3");
    done.assert_code(0);
    assert_eq!(done.stdout, "semaphore \"s\": 2 -> 3 permits\n");
    world
        .run_line("semaphore s --permits 3 -- true")
        .assert_code(0);
    holder.wait(RUN_LIMIT).assert_code(0);
    world
        .run_line("semaphore s --permits 2 -- true")
        .assert_error(78, "has 3 permits, not 2");
    let done = world.run_line("semaphore-set fresh 4");
    done.assert_code(0);
    assert_eq!(done.stdout, "created semaphore \"fresh\" with 4 permits\n");
    world.run_line("semaphore-set fresh 0").assert_code(2);
}

/// `delete KIND NAME` removes a primitive whoever holds it; the holder's command is stopped at
/// once. Without --yes and without a terminal it refuses.
#[test]
fn delete_removes_state_and_stops_the_holder() {
    let world = World::new();
    let pidfile = world.path("pid");
    let mut holder = world.sh(
        "semaphore held -n 1",
        &format!(r#"echo $$ > "$1"; {BOUNDED_WAIT}"#),
        &[&pidfile],
    );
    pid_in(&pidfile);
    world.wait_for_lost_notice_listener();
    world
        .run_line("delete semaphore held")
        .assert_error(2, "refusing to delete without --yes");
    let done = world.run_line("delete semaphore held --yes");
    done.assert_code(0);
    assert_eq!(done.stdout, "deleted semaphore \"held\"\n");
    let stopped = holder.wait(Duration::from_secs(3));
    stopped.assert_error(120, "the permit was lost while the command ran");
    assert!(!world.key_exists(&keys::expirable("held").permits));

    let done = world.run_line("delete latch nothing --yes");
    done.assert_code(0);
    assert_eq!(done.stdout, "there was no latch \"nothing\"\n");
    world.run_line("delete gadget x --yes").assert_code(2);
}

/// `lock --read` holds the read-write lock shared: two commands run side by side; `lock
/// --fair` takes the fair lock. `--verbose` reports the wait, the hold with its token, the
/// renewals (here every 200 ms: `--watchdog 600ms`) and the release.
#[test]
fn lock_read_fair_and_verbose() {
    let world = World::new();
    let (first, second) = (world.path("first"), world.path("second"));
    let script = r#"touch "$1"; i=0; while [ ! -e "$2" ] && [ $i -lt 200 ]; do sleep 0.02; i=$((i+1)); done"#;
    let mut a = world.sh("lock shared --read", script, &[&first, &second]);
    let mut b = world.sh("lock shared --read", script, &[&second, &first]);
    // Each command waits (4 s at most) for the other to have started: they must overlap.
    let (done_a, done_b) = (a.wait(RUN_LIMIT), b.wait(RUN_LIMIT));
    done_a.assert_code(0);
    done_b.assert_code(0);
    assert!(
        done_a.elapsed < Duration::from_secs(4) && done_b.elapsed < Duration::from_secs(4),
        "the readers did not run side by side:\n{done_a}\n{done_b}"
    );
    assert!(!world.key_exists(&keys::rw("shared").hash), "released");
    world
        .run_line("lock shared --read --fair -- true")
        .assert_code(2);

    let done = world.run_line("--verbose --watchdog 600ms lock --fair fair -- sleep 0.7");
    done.assert_code(0);
    assert!(
        done.stderr
            .contains("redisync: waiting for fair lock \"fair\""),
        "{done}"
    );
    assert!(
        done.stderr.contains("redisync: got the fair lock after")
            && done.stderr.contains("(fencing token 1)"),
        "{done}"
    );
    assert!(done.stderr.contains("redisync: lease renewed"), "{done}");
    assert!(
        done.stderr.contains("redisync: released the fair lock"),
        "{done}"
    );
    world
        .run_line("--watchdog 0s lock x -- true")
        .assert_code(2);
}

/// `-v` reports on every command that waits or changes something: elect, rate, latch.
#[test]
fn verbose_on_every_command() {
    let world = World::new();
    let reports = |line: &str, expected: &[&str]| {
        let done = world.run_line(line);
        done.assert_code(0);
        for report in expected {
            assert!(done.stderr.contains(report), "{report:?} in:\n{done}");
        }
    };
    reports(
        "-v elect boss --value me -- true",
        &[
            "redisync: campaigning for \"boss\" as \"me\"",
            "redisync: leading \"boss\" after",
            "(term 1)",
            "redisync: resigned the leadership",
        ],
    );
    reports(
        "-v rate mail --rate 10/s -- true",
        &[
            "redisync: waiting for 1 unit(s) of rate limiter \"mail\"",
            "redisync: got 1 unit(s) of rate limiter \"mail\" after",
        ],
    );
    reports(
        "-v latch set go 1",
        &["redisync: armed latch \"go\" with count 1"],
    );
    reports(
        "-v latch count-down go",
        &["redisync: counted latch \"go\" down; count now 0"],
    );
    reports(
        "-v latch wait go",
        &["redisync: latch \"go\" opened lately"],
    );
    reports("latch set go 1", &[]);
    let mut waiter = world.spawn(&words("-v latch wait go"));
    eventually(RUN_LIMIT, "the waiter is registered", || {
        let table = world.inspect("go");
        table_field(&table, "count-down latch \"go\"", "waiting clients").as_deref() == Some("1")
    });
    reports("latch count-down go", &[]);
    let done = waiter.wait(RUN_LIMIT);
    done.assert_code(0);
    for report in [
        "redisync: waiting for latch \"go\" to open",
        "redisync: latch \"go\" open after",
    ] {
        assert!(done.stderr.contains(report), "{report:?} in:\n{done}");
    }
}

/// `inspect` shows who waits, for every primitive with waiters, as Redis knows them: the
/// clients registered for a wake-up (one per client, however many of its tasks wait), a fair
/// lock's queue, a read-write lock's waiting writers.
#[test]
fn inspect_shows_the_waiters_of_every_primitive() {
    let world = World::new();
    let rt = runtime();
    let (holder, waiter) = rt.block_on(async {
        (
            Client::connect(world.url()).await.expect("connect"),
            Client::connect(world.url()).await.expect("connect"),
        )
    });
    let waits = |name: &str, kind: &str, field: &str| -> i64 {
        let json = world.inspect_json(name);
        json.get("primitives")
            .items()
            .iter()
            .find(|p| p.get("kind").str() == kind)
            .map_or(-1, |p| p.get("fields").get(field).int())
    };
    let mut held = Vec::new();
    let mut tasks = Vec::new();
    rt.block_on(async {
        held.push(Box::new(holder.lock("w-lock").lock().await.unwrap()) as Box<dyn Send>);
        let lock = waiter.lock("w-lock");
        tasks.push(tokio::spawn(async move { drop(lock.lock().await) }));

        let sem = holder.semaphore("w-sem");
        sem.try_set_permits(1).await.unwrap();
        held.push(Box::new(sem.acquire().await.unwrap()));
        let sem = waiter.semaphore("w-sem");
        tasks.push(tokio::spawn(async move { drop(sem.acquire().await) }));

        let xsem = holder.expirable_semaphore("w-xsem");
        xsem.try_set_permits(1).await.unwrap();
        held.push(Box::new(xsem.acquire().await.unwrap()));
        let xsem = waiter.expirable_semaphore("w-xsem");
        tasks.push(tokio::spawn(async move { drop(xsem.acquire().await) }));

        let latch = holder.count_down_latch("w-latch");
        latch.try_set_count(1).await.unwrap();
        let latch = waiter.count_down_latch("w-latch");
        tasks.push(tokio::spawn(async move { drop(latch.wait().await) }));

        held.push(Box::new(
            holder
                .leader_election("w-elect")
                .campaign("a")
                .await
                .unwrap(),
        ));
        let election = waiter.leader_election("w-elect");
        tasks.push(tokio::spawn(
            async move { drop(election.campaign("b").await) },
        ));

        held.push(Box::new(
            holder.read_write_lock("w-rw").read().await.unwrap(),
        ));
        let rw = waiter.read_write_lock("w-rw");
        tasks.push(tokio::spawn(async move { drop(rw.write().await) }));
    });
    for (name, kind, field) in [
        ("w-lock", "lock", "waiting_clients"),
        ("w-sem", "semaphore", "waiting_clients"),
        ("w-xsem", "expirable_semaphore", "waiting_clients"),
        ("w-latch", "count_down_latch", "waiting_clients"),
        ("w-elect", "election", "waiting_clients"),
        ("w-rw", "read_write_lock", "waiting_writers"),
    ] {
        eventually(
            Duration::from_secs(5),
            &format!("{kind} shows its waiter"),
            || waits(name, kind, field) == 1,
        );
    }
    for task in tasks {
        task.abort();
    }
    drop(held);
}

// ---------------------------------------------------------------------------------------------
// Connecting: TLS (in the default build), passwords outside the URL.
// ---------------------------------------------------------------------------------------------

/// `rediss://` with `--tls-ca` (and a client certificate where the server asks for one)
/// works in the default build, `inspect` included; without the CA the server is not trusted;
/// a TLS URL to a plain port says what is wrong.
#[test]
fn tls_with_a_ca_file_and_a_client_certificate() {
    use redisync_test_harness::tls::{ClientAuth, TlsServer};
    let tls = match TlsServer::start(ClientAuth::Required) {
        Ok(tls) => tls,
        Err(why) => {
            eprintln!("SKIPPED tls_with_a_ca_file_and_a_client_certificate: {why}");
            return;
        }
    };
    let (ca, cert, key) = (
        tls.ca.to_string_lossy().into_owned(),
        tls.client_cert.to_string_lossy().into_owned(),
        tls.client_key.to_string_lossy().into_owned(),
    );
    let url = tls.url();
    let with_tls = |extra: &[&str]| {
        let mut args = vec!["--tls-ca", &ca, "--tls-cert", &cert, "--tls-key", &key];
        args.extend_from_slice(extra);
        Proc::spawn(redisync_command(&url, &args)).wait(RUN_LIMIT)
    };
    with_tls(&["latch", "secure-latch", "set", "2"]).assert_code(0);
    with_tls(&["lock", "secure", "--", "sh", "-c", "exit 0"]).assert_code(0);
    let done = with_tls(&["inspect", "secure-latch", "--json"]);
    done.assert_code(0);
    assert!(done.stdout.contains("count_down_latch"), "{done}");
    let fence = tls.server.cmd(&["GET", &keys::lock("secure").fence]);
    assert_eq!(
        fence,
        redis::Value::BulkString(b"1".to_vec()),
        "it ran on this server"
    );

    // No CA: the server's certificate is not trusted.
    let done = Proc::spawn(redisync_command(
        &url,
        &["--command-timeout", "2s", "lock", "secure", "--", "true"],
    ))
    .wait(RUN_LIMIT);
    done.assert_error(69, "");

    // A TLS URL to the plain port.
    let plain = format!("rediss://127.0.0.1:{}/", tls.server.port());
    let done = Proc::spawn(redisync_command(
        &plain,
        &[
            "--tls-ca",
            &ca,
            "--command-timeout",
            "1s",
            "lock",
            "x",
            "--",
            "true",
        ],
    ))
    .wait(RUN_LIMIT);
    done.assert_error(69, "is the port a TLS port?");

    // And the reverse: a plain URL to the TLS port.
    let plain_to_tls = format!("redis://127.0.0.1:{}/", tls.tls_port());
    let done = Proc::spawn(redisync_command(
        &plain_to_tls,
        &["--command-timeout", "1s", "lock", "x", "--", "true"],
    ))
    .wait(RUN_LIMIT);
    done.assert_error(69, "is the port a TLS port?");
}

/// `--sentinel URL,... --master NAME` works on the primary the Sentinels name, `inspect`
/// included; a name they do not monitor is an unavailable Redis, said so.
#[test]
fn sentinel_finds_the_primary() {
    use redisync_test_harness::sentinel::{Sentinel, MASTER};
    let primary = RedisServer::start_with(&["--requirepass", "pr1mary"]);
    let sentinel = Sentinel::start_with_password(&primary, "pr1mary");
    // A dead sentinel first: the next one in the list answers.
    let sentinels = format!("redis://127.0.0.1:1/,{}", sentinel.url());
    let via_sentinel = |args: &[&str]| {
        let mut all = vec!["--sentinel", &sentinels, "--master", MASTER];
        all.extend_from_slice(args);
        let mut command = redisync_command("redis://127.0.0.1:1/", &all);
        command.env("REDISYNC_PASSWORD", "pr1mary");
        Proc::spawn(command).wait(RUN_LIMIT)
    };
    via_sentinel(&["latch", "sentinel-latch", "set", "2"]).assert_code(0);
    via_sentinel(&["lock", "sentinel-lock", "--", "true"]).assert_code(0);
    assert_eq!(
        primary.cmd(&["GET", &keys::lock("sentinel-lock").fence]),
        redis::Value::BulkString(b"1".to_vec()),
        "it ran on the primary"
    );
    let done = via_sentinel(&["inspect", "sentinel-latch", "--json"]);
    done.assert_code(0);
    assert!(done.stdout.contains("count_down_latch"), "{done}");

    let mut all = vec![
        "--sentinel",
        &sentinels,
        "--master",
        "nobody",
        "--command-timeout",
    ];
    all.extend(["1s", "lock", "x", "--", "true"]);
    Proc::spawn(redisync_command("redis://127.0.0.1:1/", &all))
        .wait(RUN_LIMIT)
        .assert_code(69);
    // --master goes with --sentinel.
    let done = Proc::spawn(redisync_command(
        "redis://127.0.0.1:1/",
        &["--master", MASTER, "lock", "x", "--", "true"],
    ))
    .wait(RUN_LIMIT);
    assert_usage_error(&done, "--sentinel");
}

/// The password may come from `--password-file` or `REDISYNC_PASSWORD` instead of the URL.
#[test]
fn a_password_from_a_file_or_the_environment() {
    let world = World::on(RedisServer::start_with(&["--requirepass", "s3cr:t@/x"]));
    let url = format!("redis://127.0.0.1:{}/", world.server.port());
    let file = world.path("password");
    fs::write(&file, "s3cr:t@/x\n").unwrap();
    Proc::spawn(redisync_command(
        &url,
        &["--password-file", &file, "lock", "pw", "--", "true"],
    ))
    .wait(RUN_LIMIT)
    .assert_code(0);
    let mut command = redisync_command(&url, &["lock", "pw", "--", "true"]);
    command.env("REDISYNC_PASSWORD", "s3cr:t@/x");
    Proc::spawn(command).wait(RUN_LIMIT).assert_code(0);
    // A Unix socket's URL takes it too.
    let socket = world.path("redis.sock");
    let _on_socket =
        RedisServer::start_with(&["--requirepass", "s3cr:t@/x", "--unixsocket", &socket]);
    let url = format!("unix://{socket}");
    let mut command = redisync_command(&url, &["lock", "pw", "--", "true"]);
    command.env("REDISYNC_PASSWORD", "s3cr:t@/x");
    Proc::spawn(command).wait(RUN_LIMIT).assert_code(0);
    // Without it, the server refuses.
    let done = Proc::spawn(redisync_command(&url, &["lock", "pw", "--", "true"])).wait(RUN_LIMIT);
    assert_ne!(done.code(), 0, "{done}");
    // A file that is not there is a usage error.
    Proc::spawn(redisync_command(
        &url,
        &[
            "--password-file",
            "/no/such/file",
            "lock",
            "pw",
            "--",
            "true",
        ],
    ))
    .wait(RUN_LIMIT)
    .assert_error(2, "--password-file /no/such/file");
}

// ---------------------------------------------------------------------------------------------
// One name, one kind.
// ---------------------------------------------------------------------------------------------

/// `lock --read` and `lock --write` are the two sides of one read-write lock; a name in use
/// as one kind of primitive is refused (73, naming the kind) to every other kind, and the
/// refused command does not run.
#[test]
fn one_name_is_one_kind() {
    let world = World::new();
    let gate = world.path("gate");
    let hold = HOLD_UNTIL_GATE;

    // Two readers side by side; a writer waits for them.
    let (r1, r2) = (world.path("r1"), world.path("r2"));
    let mut reader1 = world.sh("lock --read rw", hold, &[&r1, &gate]);
    let mut reader2 = world.sh("lock --read rw", hold, &[&r2, &gate]);
    pid_in(&r1);
    pid_in(&r2);
    let marker = world.path("marker");
    world
        .run(&[
            "lock", "--write", "rw", "--wait", "300ms", "--", "touch", &marker,
        ])
        .assert_error(124, "write hold \"rw\" not acquired within the wait");

    // Every other kind is refused while the readers hold it, and runs nothing.
    for line in [
        format!("lock rw -- touch {marker}"),
        format!("lock --fair rw -- touch {marker}"),
        format!("semaphore rw --permits 2 -- touch {marker}"),
        format!("elect rw -- touch {marker}"),
        format!("rate rw --rate 1/s -- touch {marker}"),
        "latch rw set 1".to_owned(),
    ] {
        world
            .run_line(&line)
            .assert_error(73, "\"rw\" is in use as a read-write lock");
    }
    assert!(
        !Path::new(&marker).exists(),
        "a refused command must not run"
    );

    fs::write(&gate, "").unwrap();
    reader1.wait(RUN_LIMIT).assert_code(0);
    reader2.wait(RUN_LIMIT).assert_code(0);
    // Free again: the writer gets it, and a plain lock is still refused while a semaphore
    // of the same name exists.
    world
        .run(&["lock", "--write", "rw", "--", "touch", &marker])
        .assert_code(0);
    assert!(Path::new(&marker).exists());
    world
        .run_line("semaphore pool --permits 2 -- true")
        .assert_code(0);
    world.run_line("lock pool -- true").assert_error(
        73,
        "\"pool\" is in use as an expirable semaphore, not as a lock",
    );
}

/// A waiter interrupted with Ctrl-C (or SIGTERM) takes its registration back before it exits
/// (128 + the signal), rather than leaving it until it expires.
#[test]
fn an_interrupted_waiter_withdraws_before_it_exits() {
    let world = World::new();
    let (gate, held) = (world.path("gate"), world.path("held"));
    let hold = HOLD_UNTIL_GATE;
    let mut holder = world.sh("lock queue", hold, &[&held, &gate]);
    pid_in(&held);
    let waiting_clients = || {
        world
            .inspect_json("queue")
            .primitive("lock")
            .get("waiting_clients")
            .int()
    };
    for (signal, code) in [("INT", 130), ("TERM", 143)] {
        let mut waiter = world.spawn(&["lock", "queue", "--", "true"]);
        eventually(RUN_LIMIT, "the waiter is registered", || {
            waiting_clients() == 1
        });
        send_signal(waiter.pid(), signal);
        let done = waiter.wait(Duration::from_secs(5));
        done.assert_error(code, "interrupted while waiting for lock \"queue\"");
        assert_eq!(waiting_clients(), 0, "the registration was taken back");
    }
    fs::write(&gate, "").unwrap();
    holder.wait(RUN_LIMIT).assert_code(0);
}

/// Without `--value`, `elect` advertises `host:pid`, so that `leader` says who leads.
#[test]
fn an_election_without_a_value_advertises_host_and_pid() {
    let world = World::new();
    let (gate, held) = (world.path("gate"), world.path("held"));
    let hold = HOLD_UNTIL_GATE;
    let mut leader = world.sh("elect who", hold, &[&held, &gate]);
    pid_in(&held);
    let host = fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "localhost".to_owned());
    let done = world.run_line("leader who");
    done.assert_code(0);
    assert!(
        done.stdout
            .starts_with(&format!("{host}:{} (term ", leader.pid())),
        "{done}"
    );
    fs::write(&gate, "").unwrap();
    leader.wait(RUN_LIMIT).assert_code(0);
}

/// A server older than redisync supports is refused with 69, naming what was found; the
/// command does not run. (On a supported server, the same command just runs: the test runs
/// on whichever server `REDIS_SERVER_BIN` names, Redis 6.2 among them in CI.)
#[test]
fn a_server_below_the_floor_is_69() {
    let world = World::new();
    let version = world
        .server
        .info_field("server", "redis_version")
        .expect("INFO server has redis_version");
    let name = world.server.info_field("server", "server_name");
    let old = name.is_none_or(|name| name == "redis")
        && version
            .split('.')
            .next()
            .and_then(|m| m.parse::<u32>().ok())
            < Some(7);
    let marker = world.path("marker");
    let done = world.run(&["lock", "floor", "--", "touch", &marker]);
    if old {
        done.assert_error(
            69,
            &format!("found Redis {version}, redisync needs Redis 7.0"),
        );
        assert!(!Path::new(&marker).exists(), "the command must not run");
    } else {
        done.assert_code(0);
        assert!(Path::new(&marker).exists());
    }
}
