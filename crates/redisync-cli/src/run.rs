//! Running a command while a hold lasts: the child gets the hold's details in its
//! environment, and is stopped if the hold is lost.

use std::future::Future;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use std::io::IsTerminal;

use tokio::process::{Child, Command};

use crate::exit;

/// How the command's run ended.
pub enum Ended {
    /// The command exited by itself; the code to exit with (128 + N if killed by signal N).
    Exited(i32),
    /// The hold was lost while the command ran; it was told to stop (and killed if it did not).
    HoldLost,
    /// The command could not be started; the code (126 or 127) and why.
    NotStarted(i32, String),
}

/// Signals the command may be sent when the hold is lost, with their numbers on Linux.
pub const SIGNALS: [(&str, u8); 7] = [
    ("HUP", 1),
    ("INT", 2),
    ("QUIT", 3),
    ("KILL", 9),
    ("USR1", 10),
    ("USR2", 12),
    ("TERM", 15),
];

/// Checks a signal name (any case, with or without `SIG`) or number, and returns its name.
pub fn parse_signal(text: &str) -> Result<String, String> {
    let upper = text.trim().to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    SIGNALS
        .iter()
        .find(|(known, number)| *known == name || name.parse::<u8>() == Ok(*number))
        .map(|(known, _)| (*known).to_owned())
        .ok_or_else(|| {
            let names: Vec<&str> = SIGNALS.iter().map(|(n, _)| *n).collect();
            format!(
                "unsupported signal {text:?}: use one of {} (or its number)",
                names.join(", ")
            )
        })
}

/// How the command is given: its words, and whether they are a shell line.
pub struct Program<'a> {
    /// The words after `--`; none means "hold until interrupted".
    pub argv: &'a [String],
    /// `--shell`: the words, joined with spaces, are one line for `sh -c`.
    pub shell: bool,
}

/// Runs the program with `env` added, until it exits or `lost` completes. Unless it is
/// interactive (stdin is a terminal, which only the foreground process group may read), the
/// command runs in a process group of its own and every signal goes to the whole group, so
/// that the programs it starts stop with it. On loss the command is sent `signal`, and killed
/// if it is still running `grace` later. Signals redisync itself receives (hangup, interrupt,
/// quit, terminate, user 1 and 2) are passed on to the group, so redisync outlives the command
/// and releases the hold after it. If redisync itself dies (even by `kill -9`), the command
/// is killed with it (Linux), and on every other way out of redisync its process group is.
///
/// Without a command, holds until redisync is interrupted (`SIGINT`, `SIGTERM`, `SIGHUP`) or
/// the hold is lost, after printing `env` on stdout as `NAME=value` lines.
pub async fn run_while_held(
    program: Program<'_>,
    env: &[(&str, String)],
    lost: impl Future<Output = ()>,
    signal: &str,
    grace: Duration,
) -> Ended {
    // Listening before the command starts: a signal in between is passed on, not fatal.
    let mut incoming = Incoming::shared().await;
    if program.argv.is_empty() {
        return hold_until_interrupted(env, lost, &mut incoming).await;
    }
    let line;
    let (name, args): (&str, &[String]) = if program.shell {
        line = ["-c".to_owned(), program.argv.join(" ")];
        ("sh", &line)
    } else {
        match program.argv.split_first() {
            Some((name, args)) => (name.as_str(), args),
            None => return Ended::NotStarted(exit::CANNOT_EXECUTE, "no command".to_owned()),
        }
    };
    let mut command = Command::new(name);
    command
        .args(args)
        .stdin(Stdio::inherit())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    let group = !std::io::stdin().is_terminal();
    #[cfg(unix)]
    if group {
        command.process_group(0);
    }
    #[cfg(target_os = "linux")]
    die_with_parent(&mut command);
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = match command.spawn() {
        Ok(child) => {
            let guard = if group {
                child.id().and_then(GroupGuard::spawn)
            } else {
                None
            };
            Target {
                child,
                group,
                guard,
            }
        }
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            return Ended::NotStarted(exit::NOT_FOUND, format!("{name}: command not found"));
        }
        Err(err) => {
            return Ended::NotStarted(exit::CANNOT_EXECUTE, format!("{name}: {err}"));
        }
    };
    let mut lost = std::pin::pin!(lost);
    loop {
        tokio::select! {
            status = child.child.wait() => return Ended::Exited(code_of(status)),
            () = &mut lost => {
                child.stop(signal, grace).await;
                return Ended::HoldLost;
            }
            forwarded = incoming.next() => child.send(forwarded),
        }
    }
}

/// Holds until redisync is told to stop (`SIGINT`, `SIGTERM`, `SIGHUP`; `SIGQUIT` and the
/// user signals are ignored), or the hold is lost. Prints `env` first, for scripts that read
/// the token.
async fn hold_until_interrupted(
    env: &[(&str, String)],
    lost: impl Future<Output = ()>,
    incoming: &mut Incoming,
) -> Ended {
    {
        use std::io::Write;
        let mut stdout = std::io::stdout().lock();
        for (key, value) in env {
            let _ = writeln!(stdout, "{key}={value}");
        }
        let _ = stdout.flush();
    }
    tokio::select! {
        () = lost => Ended::HoldLost,
        _ = incoming.interrupted() => Ended::Exited(0),
    }
}

/// Makes the command die when redisync does, however redisync ends (`kill -9` included):
/// the kernel sends it `SIGKILL` when the thread that started it exits. redisync starts
/// commands from its main thread, which lives as long as the process.
#[cfg(target_os = "linux")]
fn die_with_parent(command: &mut Command) {
    let parent = std::process::id();
    // SAFETY: between fork and exec the closure only makes async-signal-safe system calls
    // (prctl, getppid, _exit) and allocates nothing.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // redisync died between the fork and the prctl: the child was re-parented
            // already, and no signal would come.
            if u32::try_from(libc::getppid()).ok() != Some(parent) {
                libc::_exit(exit::CANNOT_EXECUTE);
            }
            Ok(())
        });
    }
}

/// The command, and whether signals go to its whole process group.
struct Target {
    child: Child,
    group: bool,
    /// Kills the group if redisync dies without running its destructors.
    guard: Option<GroupGuard>,
}

impl Target {
    /// Tells the command to stop with `signal`; kills it if it is still running after
    /// `grace`.
    async fn stop(&mut self, signal: &str, grace: Duration) {
        self.send(signal);
        if tokio::time::timeout(grace, self.child.wait())
            .await
            .is_err()
        {
            self.send("KILL");
            let _ = self.child.kill().await;
        }
    }

    /// Sends `signal` with the system's `kill` command (no extra dependency for one system
    /// call; a failure only means the command is already gone).
    fn send(&self, signal: &str) {
        let Some(pid) = self.child.id() else {
            return;
        };
        let target = if self.group {
            format!("-{pid}")
        } else {
            pid.to_string()
        };
        let _ = std::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .arg("--")
            .arg(target)
            .stderr(Stdio::null())
            .status();
    }
}

impl Drop for Target {
    /// On every way out of redisync that runs destructors (an error, a panic, the end of
    /// `main`), a command still running is killed with its process group; the kill on drop
    /// of the child itself reaches only the command, not the programs it started.
    fn drop(&mut self) {
        if self.group && matches!(self.child.try_wait(), Ok(None)) {
            self.send("KILL");
        }
        if let Some(guard) = self.guard.take() {
            guard.dismiss();
        }
    }
}

/// A watcher of redisync's life, for the programs the command starts: the parent-death
/// signal reaches only the command itself, and a shell line's programs would run on after a
/// `kill -9` of redisync while the hold frees for someone else. The watcher is a shell
/// process, in a process group of its own (so a Ctrl-C meant for redisync does not end it),
/// that reads one line from a pipe only redisync writes to: a line means redisync ended
/// normally and dealt with the group itself; the end of the pipe without one means redisync
/// died, and the watcher kills the command's process group.
struct GroupGuard {
    watcher: std::process::Child,
}

impl GroupGuard {
    fn spawn(group: u32) -> Option<GroupGuard> {
        let mut watcher = std::process::Command::new("sh");
        watcher
            .args([
                "-c",
                r#"read -r line || kill -KILL "-$1" 2>/dev/null"#,
                "redisync-watch",
            ])
            .arg(group.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        #[cfg(unix)]
        {
            use std::os::unix::process::CommandExt;
            watcher.process_group(0);
        }
        // Only redisync holds the pipe's writing end: std opens it close-on-exec, so neither
        // the command nor its programs inherit it.
        watcher.spawn().ok().map(|watcher| GroupGuard { watcher })
    }

    /// Tells the watcher redisync is ending normally, and waits for it to go.
    fn dismiss(mut self) {
        if let Some(mut pipe) = self.watcher.stdin.take() {
            use std::io::Write;
            let _ = pipe.write_all(b"\n");
        }
        let _ = self.watcher.wait();
    }
}

/// The signals redisync listens for: passed on to a running command, or, while it waits or
/// holds without one, the ones that stop it ([`Incoming::interrupted`]).
pub struct Incoming {
    #[cfg(unix)]
    streams: Vec<(&'static str, tokio::signal::unix::Signal)>,
}

/// The process's one listener, once started: see [`Incoming::shared`].
static SHARED: std::sync::OnceLock<tokio::sync::Mutex<Incoming>> = std::sync::OnceLock::new();

impl Incoming {
    /// The process's listener, started at the first call and kept for the rest of the run:
    /// a signal that arrives between two listeners (after an acquire, while the hold is
    /// checked, before the command starts) is kept for the next one, not lost. Waiting and
    /// running take turns with it.
    pub async fn shared() -> tokio::sync::MutexGuard<'static, Incoming> {
        SHARED
            .get_or_init(|| tokio::sync::Mutex::new(Incoming::listen()))
            .lock()
            .await
    }

    /// Starts listening (from then on these signals no longer end redisync by themselves).
    fn listen() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let kinds = [
                ("HUP", SignalKind::hangup()),
                ("INT", SignalKind::interrupt()),
                ("QUIT", SignalKind::quit()),
                ("TERM", SignalKind::terminate()),
                ("USR1", SignalKind::user_defined1()),
                ("USR2", SignalKind::user_defined2()),
            ];
            let streams = kinds
                .into_iter()
                .filter_map(|(name, kind)| signal(kind).ok().map(|s| (name, s)))
                .collect();
            Incoming { streams }
        }
        #[cfg(not(unix))]
        Incoming {}
    }

    /// The number of the next signal that tells redisync to stop (`SIGINT`, `SIGTERM`,
    /// `SIGHUP`); the others (`SIGQUIT`, the user signals) are ignored meanwhile.
    pub async fn interrupted(&mut self) -> i32 {
        loop {
            let name = self.next().await;
            if let Some((_, number)) = SIGNALS
                .iter()
                .find(|(known, _)| *known == name && matches!(name, "INT" | "TERM" | "HUP"))
            {
                return i32::from(*number);
            }
        }
    }

    /// The next signal received.
    async fn next(&mut self) -> &'static str {
        #[cfg(unix)]
        {
            if self.streams.is_empty() {
                return std::future::pending().await;
            }
            let receiving = self
                .streams
                .iter_mut()
                .map(|(name, stream)| Box::pin(async move { stream.recv().await.map(|_| *name) }));
            match futures_select_all(receiving).await {
                Some(name) => name,
                None => std::future::pending().await,
            }
        }
        #[cfg(not(unix))]
        std::future::pending().await
    }
}

/// The first of several futures to complete.
async fn futures_select_all<F: Future + Unpin>(futures: impl IntoIterator<Item = F>) -> F::Output {
    let mut futures: Vec<F> = futures.into_iter().collect();
    std::future::poll_fn(move |cx| {
        for future in &mut futures {
            if let std::task::Poll::Ready(output) = std::pin::Pin::new(future).poll(cx) {
                return std::task::Poll::Ready(output);
            }
        }
        std::task::Poll::Pending
    })
    .await
}

fn code_of(status: std::io::Result<ExitStatus>) -> i32 {
    let Ok(status) = status else {
        return exit::FAILURE;
    };
    if let Some(code) = status.code() {
        return code;
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return 128 + signal;
        }
    }
    exit::FAILURE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_are_checked() {
        assert_eq!(parse_signal("TERM").as_deref(), Ok("TERM"));
        assert_eq!(parse_signal("sigkill").as_deref(), Ok("KILL"));
        assert_eq!(parse_signal("9").as_deref(), Ok("KILL"));
        assert_eq!(parse_signal("15").as_deref(), Ok("TERM"));
        assert!(parse_signal("STOP").is_err());
        assert!(parse_signal("19").is_err());
        assert!(parse_signal("0").is_err());
    }
}
