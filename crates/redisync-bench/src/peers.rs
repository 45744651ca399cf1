//! The peers in other languages: redis-semaphore (Node.js) and python-redis-lock (Python).
//!
//! Each is measured by a driver process of its own language (`peers/node/driver.mjs`,
//! `peers/python/driver.py`, whose headers give the protocol): a scenario starts the driver
//! with the scenario's shape on its command line, the driver connects and says it is ready,
//! and then the scenario gives it turns, one line each, in the same order and at the same
//! places as the contenders in this process get theirs. The driver times what it does itself
//! and answers each turn with one JSON line of raw figures, which the scenario reports as it
//! reports its own contenders' (same percentiles, same ratios to the same floor of the same
//! round). What Redis ran and received (`INFO commandstats`, MONITOR) is counted on the server,
//! for drivers as for the others.
//!
//! The packages come from a cache outside the repository that `scripts/bench-peers.sh` fills
//! (`~/.cache/redisync/bench-peers`, or `$REDISYNC_BENCH_PEERS`). A peer whose runtime, packages
//! or driver fails is skipped for the rest of the run: one line on stderr says which and why,
//! and its rows show "–". A driver's answer is never trusted to be well-formed: anything else
//! than the JSON expected is a reason to skip it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::lockers::{Contender, LEASE};

/// Peers skipped so far, with the reason, in the order they were skipped.
static SKIPPED: Mutex<Vec<(Contender, String)>> = Mutex::new(Vec::new());

/// What each runtime's driver reported it runs: library, client and runtime versions.
static VERSIONS: Mutex<BTreeMap<&'static str, String>> = Mutex::new(BTreeMap::new());

/// How long a driver may take to connect and say it is ready, and a turn beyond what it is
/// asked to run: generous, since a driver that is only slow is still measured.
const PATIENCE: Duration = Duration::from_secs(60);

/// Bytes of a driver's stderr kept for the reason it is skipped.
const STDERR_TAIL: usize = 2000;

/// Marks `contender` as skipped for the rest of the run, saying so once.
pub fn skip(contender: Contender, reason: &str) {
    let mut skipped = SKIPPED.lock().unwrap_or_else(PoisonError::into_inner);
    if skipped.iter().all(|(c, _)| *c != contender) {
        eprintln!("skipped {}: {reason}", contender.name());
        skipped.push((contender, reason.to_owned()));
    }
}

/// Why `contender` was skipped, if it was.
fn skipped_because(contender: Contender) -> Option<String> {
    SKIPPED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .find(|(c, _)| *c == contender)
        .map(|(_, reason)| reason.clone())
}

/// Every peer skipped in this run, by contender name, with the reason.
pub fn skipped() -> Vec<(String, String)> {
    SKIPPED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .map(|(c, reason)| (c.name().to_owned(), reason.clone()))
        .collect()
}

/// What the drivers that ran said they run, by runtime ("node peer", "python peer").
pub fn versions() -> Vec<(String, String)> {
    VERSIONS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

/// The scenarios a driver runs, by the name its command line takes.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    Uncontended,
    Contended,
    Handoff,
    Many,
}

impl Kind {
    fn arg(self) -> &'static str {
        match self {
            Kind::Uncontended => "uncontended",
            Kind::Contended => "contended",
            Kind::Handoff => "handoff",
            Kind::Many => "many",
        }
    }
}

/// The shape of what a driver runs, as the scenarios of this process give it to
/// [`crate::lockers::lockers`]: `clients` clients of `tasks` tasks each.
pub struct Shape {
    pub kind: Kind,
    /// The lock's name; for [`Kind::Many`], the prefix of `tasks` names (`{key}:{i}`).
    pub key: String,
    pub clients: usize,
    pub tasks: usize,
    /// How long a holder holds the lock (scenarios 2 and 2b).
    pub hold: Duration,
}

/// A peer's runtime and the package whose version its contender names.
struct Runtime {
    label: &'static str,
    program: &'static str,
    /// What the driver's `library` must start with: the version in the contender's name.
    library: &'static str,
}

fn runtime(contender: Contender) -> Option<Runtime> {
    match contender {
        Contender::RedisSemaphoreDefault | Contender::RedisSemaphoreBest => Some(Runtime {
            label: "node peer",
            program: "node",
            library: "redis-semaphore 5.8.",
        }),
        Contender::PythonRedisLock => Some(Runtime {
            label: "python peer",
            program: "python3",
            library: "python-redis-lock 4.0.",
        }),
        _ => None,
    }
}

/// True for the contenders measured through a driver process.
pub fn is_external(contender: Contender) -> bool {
    runtime(contender).is_some()
}

/// Where `scripts/bench-peers.sh` installs the peers' packages.
fn cache() -> PathBuf {
    if let Some(dir) = std::env::var_os("REDISYNC_BENCH_PEERS") {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".cache/redisync/bench-peers")
}

/// The command that starts `contender`'s driver for `shape`, or why there is none.
fn command(contender: Contender, url: &str, shape: &Shape) -> Result<Command, String> {
    let drivers = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("peers");
    let cache = cache();
    let mut command = match contender {
        Contender::RedisSemaphoreDefault | Contender::RedisSemaphoreBest => {
            let modules = cache.join("node");
            if !modules.join("node_modules/redis-semaphore").is_dir() {
                return Err(format!(
                    "redis-semaphore is not installed in {} (run scripts/bench-peers.sh)",
                    modules.display()
                ));
            }
            let mut command = Command::new("node");
            command.arg(drivers.join("node/driver.mjs"));
            command.arg(shape.kind.arg());
            command.arg("--modules").arg(modules);
            if contender == Contender::RedisSemaphoreBest {
                // The Mutex waits `retryInterval` ms between tries (10 by default); Node's
                // timers cannot wait less than 1 ms.
                command.args(["--retry-ms", "1"]);
            }
            command
        }
        Contender::PythonRedisLock => {
            let packages = cache.join("python");
            if !packages.join("redis_lock").is_dir() {
                return Err(format!(
                    "python-redis-lock is not installed in {} (run scripts/bench-peers.sh)",
                    packages.display()
                ));
            }
            let mut command = Command::new("python3");
            command.arg(drivers.join("python/driver.py"));
            command.arg(shape.kind.arg());
            command.env("PYTHONPATH", packages);
            // The lease the contenders of this process get; the library's is in whole seconds,
            // and none by default.
            command.args(["--expire", &LEASE.as_secs().to_string()]);
            command
        }
        _ => return Err("not a peer in another language".to_owned()),
    };
    command
        .args(["--url", url, "--key", &shape.key])
        .args(["--clients", &shape.clients.to_string()])
        .args(["--tasks", &shape.tasks.to_string()])
        .args(["--hold-us", &shape.hold.as_micros().to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    Ok(command)
}

/// A running driver of one peer, ready for turns.
pub struct Driver {
    contender: Contender,
    child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
    /// The end of the driver's stderr, once it closes: a failing driver says why there.
    /// Taken when read.
    stderr: Option<tokio::task::JoinHandle<String>>,
}

impl Driver {
    /// Starts `contender`'s driver for `shape` on the server at `url`, and waits until it is
    /// connected. On failure the peer is skipped for the rest of the run, and the reason
    /// returned.
    pub async fn start(contender: Contender, url: &str, shape: &Shape) -> Result<Driver, String> {
        if let Some(reason) = skipped_because(contender) {
            return Err(reason);
        }
        let result = Self::spawn(contender, url, shape).await;
        if let Err(reason) = &result {
            skip(contender, reason);
        }
        result
    }

    async fn spawn(contender: Contender, url: &str, shape: &Shape) -> Result<Driver, String> {
        let runtime = runtime(contender).ok_or("not a peer in another language")?;
        let mut child = command(contender, url, shape)?.spawn().map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                format!("{} not found on PATH", runtime.program)
            } else {
                format!("could not start {}: {e}", runtime.program)
            }
        })?;
        let (Some(stdin), Some(stdout), Some(mut stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err("the driver's pipes could not be opened".to_owned());
        };
        let stderr = tokio::spawn(async move {
            let mut text = Vec::new();
            let _ = stderr.read_to_end(&mut text).await;
            let text = String::from_utf8_lossy(&text);
            let start = text.len().saturating_sub(STDERR_TAIL);
            let start = (start..text.len())
                .find(|&i| text.is_char_boundary(i))
                .unwrap_or(text.len());
            text[start..].to_owned()
        });
        let mut driver = Driver {
            contender,
            child,
            stdin,
            stdout: BufReader::new(stdout).lines(),
            stderr: Some(stderr),
        };
        let ready = match driver.answer(PATIENCE).await {
            Ok(ready) => ready,
            Err(e) => return Err(driver.failed(&e).await),
        };
        if ready.get("ready").and_then(Value::as_bool) != Some(true) {
            return Err(driver
                .failed("its first line is not {\"ready\": true}")
                .await);
        }
        let text = |field: &str| ready.get(field).and_then(Value::as_str).unwrap_or("?");
        let library = text("library");
        if !library.starts_with(runtime.library) {
            let expected = runtime.library;
            return Err(driver
                .failed(&format!(
                    "{library} is installed, {expected}x expected (run scripts/bench-peers.sh)"
                ))
                .await);
        }
        let described = format!("{library}, {}, {}", text("client"), text("runtime"));
        VERSIONS
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(runtime.label, described);
        Ok(driver)
    }

    /// Gives the driver one turn (`line`, see the drivers' protocol) and returns its answer,
    /// waiting at most `work` and [`PATIENCE`] more. On failure the peer is skipped for the
    /// rest of the run (the driver is ended) and the reason returned.
    pub async fn turn(&mut self, line: &str, work: Duration) -> Result<Value, String> {
        let sent = async {
            self.stdin.write_all(format!("{line}\n").as_bytes()).await?;
            self.stdin.flush().await
        };
        if let Err(e) = sent.await {
            let reason = self.failed(&format!("could not send a turn: {e}")).await;
            skip(self.contender, &reason);
            return Err(reason);
        }
        match self.answer(work + PATIENCE).await {
            Ok(answer) => Ok(answer),
            Err(e) => {
                let reason = self.failed(&e).await;
                skip(self.contender, &reason);
                Err(reason)
            }
        }
    }

    /// The driver's next line, as a JSON object that is not an error.
    async fn answer(&mut self, within: Duration) -> Result<Value, String> {
        let line = match tokio::time::timeout(within, self.stdout.next_line()).await {
            Err(_) => return Err(format!("no answer within {} s", within.as_secs())),
            Ok(Err(e)) => return Err(format!("could not read its answer: {e}")),
            Ok(Ok(None)) => return Err("it exited without answering".to_owned()),
            Ok(Ok(Some(line))) => line,
        };
        let value: Value = serde_json::from_str(&line)
            .map_err(|e| format!("it answered {:?}, not JSON ({e})", clip(&line)))?;
        if let Some(error) = value.get("error") {
            let error = error
                .as_str()
                .map_or_else(|| error.to_string(), str::to_owned);
            return Err(format!("it failed: {}", clip(&error)));
        }
        if !value.is_object() {
            return Err(format!("it answered {:?}, not a JSON object", clip(&line)));
        }
        Ok(value)
    }

    /// Ends a driver that failed; returns `what` went wrong with the end of its stderr.
    async fn failed(&mut self, what: &str) -> String {
        let _ = self.child.start_kill();
        let stderr = match self.stderr.take() {
            Some(handle) => match tokio::time::timeout(Duration::from_secs(5), handle).await {
                Ok(Ok(text)) => text,
                _ => String::new(),
            },
            None => String::new(),
        };
        match stderr.lines().rev().find(|l| !l.trim().is_empty()) {
            Some(last) => format!("driver: {what} (stderr: {})", clip(last.trim())),
            None => format!("driver: {what}"),
        }
    }

    /// Lets the driver disconnect and exit (the end of its stdin), or ends it if it does not
    /// within a few seconds.
    pub async fn finish(self) {
        let Driver {
            mut child,
            stdin,
            stderr,
            ..
        } = self;
        drop(stdin);
        if tokio::time::timeout(Duration::from_secs(10), child.wait())
            .await
            .is_err()
        {
            let _ = child.kill().await;
        }
        if let Some(stderr) = stderr {
            stderr.abort();
        }
    }
}

/// At most 200 characters of `text`, for a message.
fn clip(text: &str) -> String {
    let mut clipped: String = text.chars().take(200).collect();
    if clipped.len() < text.len() {
        clipped.push('…');
    }
    clipped
}

/// A number array of a driver's answer; every element a finite number, at least zero.
pub fn numbers(answer: &Value, field: &str) -> Result<Vec<f64>, String> {
    let list = answer
        .get(field)
        .and_then(Value::as_array)
        .ok_or_else(|| format!("driver: its answer has no list {field:?}"))?;
    list.iter()
        .map(|v| {
            v.as_f64()
                .filter(|n| n.is_finite() && *n >= 0.0)
                .ok_or_else(|| format!("driver: {field:?} holds {v}, not a number ≥ 0"))
        })
        .collect()
}

/// A number of a driver's answer: finite, at least zero.
pub fn number(answer: &Value, field: &str) -> Result<f64, String> {
    answer
        .get(field)
        .and_then(Value::as_f64)
        .filter(|n| n.is_finite() && *n >= 0.0)
        .ok_or_else(|| format!("driver: its answer has no number {field:?} ≥ 0"))
}

/// A true/false mark of a driver's answer; absent is false.
pub fn flag(answer: &Value, field: &str) -> bool {
    answer.get(field).and_then(Value::as_bool) == Some(true)
}

/// Checks what a driver's answer to a turn says against what the turn asked for; on a
/// mismatch the peer is skipped for the rest of the run.
pub fn check<T>(contender: Contender, parsed: Result<T, String>) -> Result<T, String> {
    if let Err(reason) = &parsed {
        skip(contender, reason);
    }
    parsed
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn malformed_answers_are_errors_not_panics() {
        let answer = json!({"samples_us": [1.5, 2], "counts": [1, -1], "elapsed_s": "x"});
        assert_eq!(numbers(&answer, "samples_us"), Ok(vec![1.5, 2.0]));
        assert!(numbers(&answer, "counts").is_err());
        assert!(numbers(&answer, "missing").is_err());
        assert!(number(&answer, "elapsed_s").is_err());
        assert!(numbers(&json!([1, 2]), "samples_us").is_err());
        assert!(!flag(&answer, "early"));
        assert!(flag(&json!({"early": true}), "early"));
    }

    #[test]
    fn a_clipped_message_ends_on_a_character() {
        let long = "é".repeat(300);
        let clipped = clip(&long);
        assert_eq!(clipped.chars().count(), 201);
        assert!(clipped.ends_with('…'));
        assert_eq!(clip("short"), "short");
    }
}
