//! Running a command while a hold lasts: the child gets the hold's details in its
//! environment, and is stopped if the hold is lost.

use std::future::Future;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

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

/// Signals the command may be sent when the hold is lost.
pub const SIGNALS: [&str; 7] = ["TERM", "INT", "HUP", "QUIT", "KILL", "USR1", "USR2"];

/// Checks a signal name (with or without `SIG`) or number.
pub fn parse_signal(text: &str) -> Result<String, String> {
    let upper = text.trim().to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper).to_owned();
    if SIGNALS.contains(&name.as_str()) || name.parse::<u8>().is_ok_and(|n| (1..=64).contains(&n)) {
        Ok(name)
    } else {
        Err(format!(
            "unknown signal {text:?}: use one of {} or a number",
            SIGNALS.join(", ")
        ))
    }
}

/// Runs `argv` with `env` added, until it exits or `lost` completes. On loss the command is
/// sent `signal`, and killed if it is still running `grace` later. Signals redisync itself
/// receives (interrupt, terminate) are passed on to the command.
pub async fn run_while_held(
    argv: &[String],
    env: &[(&str, String)],
    lost: impl Future<Output = ()>,
    signal: &str,
    grace: Duration,
) -> Ended {
    let Some((program, args)) = argv.split_first() else {
        return Ended::NotStarted(exit::CANNOT_EXECUTE, "no command given".to_owned());
    };
    let mut command = Command::new(program);
    command
        .args(args)
        .stdin(Stdio::inherit())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            return Ended::NotStarted(exit::NOT_FOUND, format!("{program}: command not found"));
        }
        Err(err) => {
            return Ended::NotStarted(exit::CANNOT_EXECUTE, format!("{program}: {err}"));
        }
    };
    let mut lost = std::pin::pin!(lost);
    loop {
        tokio::select! {
            status = child.wait() => return Ended::Exited(code_of(status)),
            () = &mut lost => {
                stop(&mut child, signal, grace).await;
                return Ended::HoldLost;
            }
            forwarded = forwarded_signal() => {
                if let Some(pid) = child.id() {
                    send_signal(pid, forwarded);
                }
            }
        }
    }
}

/// Tells the child to stop with `signal`; kills it if it is still running after `grace`.
async fn stop(child: &mut Child, signal: &str, grace: Duration) {
    if let Some(pid) = child.id() {
        send_signal(pid, signal);
    }
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        let _ = child.kill().await;
    }
}

/// Sends `signal` to process `pid` with the system's `kill` command (no extra dependency for
/// one system call; failures only mean the child is already gone).
fn send_signal(pid: u32, signal: &str) {
    let _ = std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .stderr(Stdio::null())
        .status();
}

/// Waits for an interrupt or terminate signal sent to redisync; returns which.
#[cfg(unix)]
async fn forwarded_signal() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut interrupt), Ok(mut terminate)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = interrupt.recv() => "INT",
        _ = terminate.recv() => "TERM",
    }
}

#[cfg(not(unix))]
async fn forwarded_signal() -> &'static str {
    std::future::pending().await
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
        assert_eq!(parse_signal("9").as_deref(), Ok("9"));
        assert!(parse_signal("STOPPIT").is_err());
        assert!(parse_signal("0").is_err());
    }
}
