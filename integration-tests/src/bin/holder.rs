//! `holder`: holds a redisync lock or expirable permit in a process of its own, so that tests
//! can pause or kill a real holder. The protocol is documented on
//! `redisync_test_harness::holder`:
//!
//! ```text
//! holder lock   <url> <name> [--lease-ms N] [--watchdog-ms N] [--command-timeout-ms N]
//! holder permit <url> <name> [--lease-ms N] [--watchdog-ms N] [--command-timeout-ms N] [--permits N]
//! holder leader <url> <name> [--lease-ms N] [--watchdog-ms N] [--command-timeout-ms N]
//! ```
//!
//! Prints `acquired <token|id|term>`, then `lost` when the hold is known gone; reads `write` and
//! `release` lines (or the end of its input, which releases too).

use std::io::BufRead;
use std::process::ExitCode;
use std::time::Duration;

use redisync::prelude::*;

/// The parsed command line.
struct Options {
    kind: String,
    url: String,
    name: String,
    lease: Option<Duration>,
    watchdog: Option<Duration>,
    command_timeout: Option<Duration>,
    permits: u64,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let [kind, url, name, rest @ ..] = args else {
        return Err(
            "usage: holder lock|permit <url> <name> [--lease-ms N] [--watchdog-ms N] \
                    [--command-timeout-ms N] [--permits N]"
                .to_owned(),
        );
    };
    if kind != "lock" && kind != "permit" && kind != "leader" {
        return Err(format!(
            "unknown kind {kind:?}: expected lock, permit or leader"
        ));
    }
    let mut options = Options {
        kind: kind.clone(),
        url: url.clone(),
        name: name.clone(),
        lease: None,
        watchdog: None,
        command_timeout: None,
        permits: 1,
    };
    let mut rest = rest.iter();
    while let Some(flag) = rest.next() {
        let value: u64 = rest
            .next()
            .ok_or_else(|| format!("{flag} needs a value"))?
            .parse()
            .map_err(|e| format!("{flag}: {e}"))?;
        match flag.as_str() {
            "--lease-ms" => options.lease = Some(Duration::from_millis(value)),
            "--watchdog-ms" => options.watchdog = Some(Duration::from_millis(value)),
            "--command-timeout-ms" => options.command_timeout = Some(Duration::from_millis(value)),
            "--permits" => options.permits = value,
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(options)
}

/// What the process holds.
enum Held {
    Lock(LockGuard),
    Permit(ExpirablePermit),
    Leader(Leadership),
}

impl Held {
    fn label(&self) -> String {
        match self {
            Held::Lock(guard) => guard.fencing_token().to_string(),
            Held::Permit(permit) => permit.id().to_owned(),
            Held::Leader(leadership) => leadership.term().to_string(),
        }
    }

    fn is_lost(&self) -> bool {
        match self {
            Held::Lock(guard) => guard.is_lost(),
            Held::Permit(permit) => permit.is_lost(),
            Held::Leader(leadership) => leadership.is_lost(),
        }
    }

    async fn release(self) -> Result<()> {
        match self {
            Held::Lock(guard) => guard.unlock().await,
            Held::Permit(permit) => permit.release().await,
            Held::Leader(leadership) => leadership.resign().await,
        }
    }
}

async fn acquire(client: &Client, options: &Options) -> Result<Held> {
    if options.kind == "lock" {
        let lock = client.lock(options.name.as_str());
        let guard = match options.lease {
            Some(lease) => lock.lock_with_lease(lease).await?,
            None => lock.lock().await?,
        };
        Ok(Held::Lock(guard))
    } else if options.kind == "leader" {
        // The campaign's value is the process id, so that a test can tell who leads.
        let election = client.leader_election(options.name.as_str());
        let lease = options.lease.map_or(Lease::Watchdog, Lease::Fixed);
        let leadership = election
            .acquire_with(Wait::Forever, lease)
            .await
            .and_then(granted_or_error)?;
        leadership.proclaim(std::process::id().to_string()).await?;
        Ok(Held::Leader(leadership))
    } else {
        let semaphore = client.expirable_semaphore(options.name.as_str());
        semaphore.try_set_permits(options.permits).await?;
        let permit = match options.lease {
            Some(lease) => semaphore.acquire_with_lease(lease).await?,
            None => semaphore.acquire().await?,
        };
        Ok(Held::Permit(permit))
    }
}

/// A wait for ever ends with a grant or an error.
fn granted_or_error<G>(held: Option<G>) -> Result<G> {
    held.ok_or_else(|| Error::InvalidArgument("an unbounded wait ended".into()))
}

fn error_kind(err: &Error) -> &'static str {
    match err {
        Error::NotOwner => "not-owner",
        Error::Timeout => "timeout",
        Error::Redis(_) => "redis",
        _ => "other",
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let options = match parse(&args) {
        Ok(options) => options,
        Err(message) => {
            println!("error {message}");
            return ExitCode::FAILURE;
        }
    };
    let mut builder = Client::builder(options.url.as_str());
    if let Some(watchdog) = options.watchdog {
        builder = builder.watchdog_timeout(watchdog);
    }
    if let Some(timeout) = options.command_timeout {
        builder = builder.command_timeout(timeout);
    }
    let client = match builder.build().await {
        Ok(client) => client,
        Err(err) => {
            println!("error connect: {err}");
            return ExitCode::FAILURE;
        }
    };
    let held = match acquire(&client, &options).await {
        Ok(held) => held,
        Err(err) => {
            println!("error acquire: {err}");
            return ExitCode::FAILURE;
        }
    };
    println!("acquired {}", held.label());
    let lost = match &held {
        Held::Lock(guard) => tokio::spawn(guard.lost()),
        Held::Permit(permit) => tokio::spawn(permit.lost()),
        Held::Leader(leadership) => tokio::spawn(leadership.lost()),
    };
    tokio::spawn(async move {
        if lost.await.is_ok() {
            println!("lost");
        }
    });

    // Standard input is read on a thread of its own: a blocking read there never holds up the
    // runtime that renews the lease.
    let (lines_tx, mut lines) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    while let Some(line) = lines.recv().await {
        match line.trim() {
            "write" => println!("write {} {}", held.label(), held.is_lost()),
            "release" => break,
            other => println!("error unknown command {other:?}"),
        }
    }
    match held.release().await {
        Ok(()) => println!("released"),
        Err(err) => println!("release-error {}: {err}", error_kind(&err)),
    }
    client.shutdown().await;
    ExitCode::SUCCESS
}
