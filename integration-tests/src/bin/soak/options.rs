//! The command line: `soak [options]` runs the soak test, `soak worker ...` is one worker
//! process (started by the soak test itself, not by hand).

use std::path::PathBuf;
use std::time::Duration;

/// The usage text.
pub const USAGE: &str = "\
usage: soak [--duration D] [--workers N] [--seed S] [--self-test] [--lease-ms N]
            [--permits N] [--keep-logs]

  --duration D   how long faults are injected: 90s, 2m, 1500ms, or seconds (default 60s)
  --workers N    worker processes (default 6)
  --seed S       seed of the fault schedule, to replay a run (default: from the clock)
  --self-test    add a cheating worker: the checker must report violations
  --lease-ms N   lease of every hold (default 1500)
  --permits N    permits of each semaphore (default 2)
  --keep-logs    keep the workers' event logs even when the run is clean

       soak check <log directory> [--permits N] [--cheat ID]

  runs the checker again on the logs a run kept (the cheating worker's id is the number of
  honest workers)

Exit status: 0 clean, 1 violations or stuck resources, 2 bad usage or set-up failure,
3 a self-test in which the checker reported nothing.";

/// Options of the soak test.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// How long the nemesis injects faults.
    pub duration: Duration,
    /// Honest worker processes.
    pub workers: u32,
    /// Seed of the nemesis's schedule.
    pub seed: Option<u64>,
    /// Adds a cheating worker.
    pub self_test: bool,
    /// Lease of every hold, and the client's watchdog timeout.
    pub lease: Duration,
    /// Permits of each semaphore.
    pub permits: u64,
    /// Keep the event logs of a clean run.
    pub keep_logs: bool,
}

/// Options of one worker process.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// The worker's number.
    pub id: u32,
    /// How many times the worker was started before (a restart after a kill is a new one).
    pub incarnation: u32,
    /// URL of the Redis under test (through the worker's chaos proxy).
    pub url: String,
    /// URL of the register.
    pub register: String,
    /// The event log to append to.
    pub log: PathBuf,
    /// Lease of every hold.
    pub lease: Duration,
    /// The client's command timeout.
    pub command_timeout: Duration,
    /// Seed of the worker's own choices.
    pub seed: u64,
    /// Cheats: records holds it never took.
    pub cheat: bool,
}

/// Options of `soak check`: the checker alone, on the logs a run kept.
#[derive(Debug, Clone)]
pub struct CheckOptions {
    /// The log directory.
    pub dir: PathBuf,
    /// Permits of each semaphore in that run.
    pub permits: u64,
    /// The cheating worker's id, if the run was a self-test.
    pub cheat: Option<u32>,
}

/// What the command line asks for.
#[derive(Debug)]
pub enum Command {
    /// Run the soak test.
    Run(RunOptions),
    /// Check the logs of an earlier run again.
    Check(CheckOptions),
    /// Be a worker.
    Worker(WorkerOptions),
    /// Print the usage.
    Help,
}

/// Parses the arguments after the program's name.
pub fn parse(args: &[String]) -> Result<Command, String> {
    match args.first().map(String::as_str) {
        Some("worker") => parse_worker(&args[1..]).map(Command::Worker),
        Some("check") => parse_check(&args[1..]).map(Command::Check),
        Some("-h" | "--help" | "help") => Ok(Command::Help),
        _ => parse_run(args).map(Command::Run),
    }
}

fn parse_run(args: &[String]) -> Result<RunOptions, String> {
    let mut options = RunOptions {
        duration: Duration::from_secs(60),
        workers: 6,
        seed: None,
        self_test: false,
        lease: Duration::from_millis(1500),
        permits: 2,
        keep_logs: false,
    };
    let mut args = args.iter();
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--self-test" => options.self_test = true,
            "--keep-logs" => options.keep_logs = true,
            _ => {
                let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
                match flag.as_str() {
                    "--duration" => options.duration = parse_duration(value)?,
                    "--workers" => options.workers = number(flag, value)?,
                    "--seed" => options.seed = Some(number(flag, value)?),
                    "--lease-ms" => options.lease = Duration::from_millis(number(flag, value)?),
                    "--permits" => options.permits = number(flag, value)?,
                    _ => return Err(format!("unknown option {flag}")),
                }
            }
        }
    }
    if options.workers == 0 {
        return Err("--workers must be at least 1".into());
    }
    if options.permits == 0 {
        return Err("--permits must be at least 1".into());
    }
    if options.lease < Duration::from_millis(300) {
        return Err("--lease-ms must be at least 300".into());
    }
    Ok(options)
}

fn parse_check(args: &[String]) -> Result<CheckOptions, String> {
    let [dir, rest @ ..] = args else {
        return Err("usage: soak check <log directory> [--permits N] [--cheat ID]".into());
    };
    let mut options = CheckOptions {
        dir: PathBuf::from(dir),
        permits: 2,
        cheat: None,
    };
    let mut rest = rest.iter();
    while let Some(flag) = rest.next() {
        let value = rest.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--permits" => options.permits = number(flag, value)?,
            "--cheat" => options.cheat = Some(number(flag, value)?),
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    Ok(options)
}

fn parse_worker(args: &[String]) -> Result<WorkerOptions, String> {
    let mut options = WorkerOptions {
        id: 0,
        incarnation: 0,
        url: String::new(),
        register: String::new(),
        log: PathBuf::new(),
        lease: Duration::from_millis(1500),
        command_timeout: Duration::from_secs(1),
        seed: 0,
        cheat: false,
    };
    let mut args = args.iter();
    while let Some(flag) = args.next() {
        if flag == "--cheat" {
            options.cheat = true;
            continue;
        }
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--id" => options.id = number(flag, value)?,
            "--incarnation" => options.incarnation = number(flag, value)?,
            "--url" => options.url = value.clone(),
            "--register" => options.register = value.clone(),
            "--log" => options.log = PathBuf::from(value),
            "--lease-ms" => options.lease = Duration::from_millis(number(flag, value)?),
            "--command-timeout-ms" => {
                options.command_timeout = Duration::from_millis(number(flag, value)?)
            }
            "--seed" => options.seed = number(flag, value)?,
            _ => return Err(format!("unknown worker option {flag}")),
        }
    }
    if options.url.is_empty() || options.register.is_empty() || options.log.as_os_str().is_empty() {
        return Err("a worker needs --url, --register and --log".into());
    }
    Ok(options)
}

fn number<T: std::str::FromStr>(flag: &str, value: &str) -> Result<T, String>
where
    T::Err: std::fmt::Display,
{
    value.parse().map_err(|e| format!("{flag} {value}: {e}"))
}

/// Parses `90s`, `2m`, `1500ms` or a plain number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("bad duration {text:?}: expected e.g. 90s, 2m, 1500ms or 90");
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, "s"),
    };
    let value: u64 = digits.parse().map_err(|_| bad())?;
    match unit {
        "ms" => Ok(Duration::from_millis(value)),
        "s" => Ok(Duration::from_secs(value)),
        "m" => Ok(Duration::from_secs(value.saturating_mul(60))),
        "h" => Ok(Duration::from_secs(value.saturating_mul(3600))),
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_and_without_units() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1500ms"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("15"), Ok(Duration::from_secs(15)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("5x").is_err());
    }
}
