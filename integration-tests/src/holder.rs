//! [`Holder`]: a separate process that holds a lock or a permit, so that tests can pause
//! (`SIGSTOP`) or crash (`SIGKILL`) a real holder.
//!
//! The process is the crate's `holder` binary; integration tests of this crate find it with
//! `env!("CARGO_BIN_EXE_holder")`. Its command line:
//!
//! ```text
//! holder lock   <url> <name> [--lease-ms N] [--watchdog-ms N] [--command-timeout-ms N]
//! holder permit <url> <name> [--lease-ms N] [--watchdog-ms N] [--command-timeout-ms N] [--permits N]
//! holder leader <url> <name> [--lease-ms N] [--watchdog-ms N] [--command-timeout-ms N]
//! ```
//!
//! `lock` takes the `ReentrantLock` `name` (a fixed lease with `--lease-ms`, otherwise a
//! watchdog lease of `--watchdog-ms`, default 30 s); `permit` first tries to initialise the
//! `ExpirableSemaphore` `name` with `--permits` (default 1), then takes one permit; `leader` campaigns in the `LeaderElection` `name` and, once it leads,
//! proclaims its process id as the leader's value. Once it holds, the process prints
//! `acquired <fencing token>` (lock), `acquired <permit id>` (permit) or `acquired <term>`
//! (leader), and `lost` as soon as the client learns the hold is gone. It answers these lines
//! on its standard input:
//!
//! * `write`: prints `write <fencing token or id> <lost: true|false>`, the write it would
//!   present to a fenced resource now;
//! * `release`: releases, prints `released` or `release-error <not-owner|timeout|redis|other>:
//!   <message>`, and exits.
//!
//! When its standard input closes it releases the same way and exits. A failure before the
//! hold is taken prints `error <message>` and exits with status 1.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// A running holder process; see the [module documentation](self).
///
/// It is killed (`SIGKILL`, after `SIGCONT` if stopped) and reaped when dropped. The threads
/// that read its output end with it.
pub struct Holder {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    transcript: Vec<String>,
    /// Index in `transcript` after the last line [`Holder::wait_line`] matched.
    cursor: usize,
    stderr: Arc<Mutex<String>>,
    stopped: bool,
}

impl Holder {
    /// Starts `bin` (the `holder` binary) with `args`, e.g.
    /// `Holder::spawn(env!("CARGO_BIN_EXE_holder"), &["lock", &url, "name"])`.
    ///
    /// # Panics
    ///
    /// Panics if the process cannot be started.
    pub fn spawn(bin: impl AsRef<OsStr>, args: &[&str]) -> Holder {
        let bin = bin.as_ref();
        let mut child = Command::new(bin)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("failed to start {}: {e}", bin.to_string_lossy()));
        let stdout = child.stdout.take().expect("stdout is piped");
        let (sender, lines) = mpsc::channel();
        thread::Builder::new()
            .name(format!("holder-{}-stdout", child.id()))
            .spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if sender.send(line).is_err() {
                        break;
                    }
                }
            })
            .expect("a thread can be started");
        let mut stderr_pipe = child.stderr.take().expect("stderr is piped");
        let stderr = Arc::new(Mutex::new(String::new()));
        let stderr_sink = stderr.clone();
        thread::Builder::new()
            .name(format!("holder-{}-stderr", child.id()))
            .spawn(move || {
                let mut buffer = [0u8; 4096];
                while let Ok(n) = stderr_pipe.read(&mut buffer) {
                    if n == 0 {
                        break;
                    }
                    let text = String::from_utf8_lossy(&buffer[..n]).into_owned();
                    stderr_sink
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push_str(&text);
                }
            })
            .expect("a thread can be started");
        let stdin = child.stdin.take();
        Holder {
            child,
            stdin,
            lines,
            transcript: Vec::new(),
            cursor: 0,
            stderr,
            stopped: false,
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Every line the process printed so far, in order.
    pub fn transcript(&mut self) -> &[String] {
        self.drain();
        &self.transcript
    }

    /// Moves the lines printed since the last call into the transcript.
    fn drain(&mut self) {
        while let Ok(line) = self.lines.try_recv() {
            self.transcript.push(line);
        }
    }

    /// What the process wrote to its standard error so far.
    pub fn stderr(&self) -> String {
        self.stderr
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Waits (polling every few milliseconds, without blocking the async runtime) until the
    /// process prints a line starting with `prefix`, at most `timeout`, and returns the rest of
    /// that line (trimmed). Lines read meanwhile go to the [transcript](Self::transcript); a
    /// line read earlier that no call matched yet counts too: each call finds the first match
    /// after the line the previous match returned.
    pub async fn wait_line(&mut self, prefix: &str, timeout: Duration) -> Option<String> {
        let deadline = Instant::now() + timeout;
        loop {
            self.drain();
            while self.cursor < self.transcript.len() {
                let line = &self.transcript[self.cursor];
                self.cursor += 1;
                if let Some(rest) = line.strip_prefix(prefix) {
                    return Some(rest.trim().to_owned());
                }
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Waits for the `acquired` line and returns its value (the fencing token or permit id).
    ///
    /// # Panics
    ///
    /// Panics with the transcript and standard error if it does not come within `timeout`.
    pub async fn acquired(&mut self, timeout: Duration) -> String {
        match self.wait_line("acquired ", timeout).await {
            Some(value) => value,
            None => panic!(
                "the holder did not acquire within {timeout:?}; stdout: {:?}; stderr: {}",
                self.transcript,
                self.stderr()
            ),
        }
    }

    /// Sends one line to the process' standard input.
    ///
    /// # Errors
    ///
    /// Fails if the process closed its standard input (it exited) or it was already closed.
    pub fn send(&mut self, line: &str) -> std::io::Result<()> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| std::io::Error::other("stdin was closed"))?;
        writeln!(stdin, "{line}")?;
        stdin.flush()
    }

    /// Closes the process' standard input: it releases and exits.
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Kills the process with `SIGKILL` and reaps it.
    pub fn sigkill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.stopped = false;
    }

    /// Suspends the process with `SIGSTOP`.
    ///
    /// # Panics
    ///
    /// Panics if the signal cannot be sent.
    pub fn sigstop(&mut self) {
        crate::send_signal(self.pid(), "STOP").unwrap_or_else(|e| panic!("{e}"));
        self.stopped = true;
    }

    /// Resumes the process with `SIGCONT`.
    ///
    /// # Panics
    ///
    /// Panics if the signal cannot be sent.
    pub fn sigcont(&mut self) {
        crate::send_signal(self.pid(), "CONT").unwrap_or_else(|e| panic!("{e}"));
        self.stopped = false;
    }

    /// Waits (without blocking the async runtime) until the process exits, at most `timeout`.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        if self.stopped {
            let _ = crate::send_signal(self.pid(), "CONT");
        }
        self.stdin = None;
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl std::fmt::Debug for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Holder")
            .field("pid", &self.pid())
            .field("transcript", &self.transcript)
            .finish()
    }
}
