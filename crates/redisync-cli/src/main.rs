//! `redisync`: distributed locks, semaphores and latches on Redis for shell scripts, cron jobs
//! and operators, like `etcdctl lock` and `consul lock`.
//!
//! ```sh
//! redisync lock nightly-report --wait 30s -- ./make-report.sh
//! redisync semaphore encoders --permits 4 -- ffmpeg -i in.mov out.mp4
//! redisync semaphore encoders -n 4 -- ffmpeg -i in.mov out.mp4
//! redisync rate mailer --rate 100/m --burst 10 -- ./send-one.sh
//! redisync latch set deploy 3; redisync latch count-down deploy; redisync latch wait deploy
//! redisync elect scheduler --value "$(hostname)" -- ./run-scheduler.sh
//! redisync leader scheduler --watch --json
//! redisync inspect nightly-report --json
//! redisync force-unlock nightly-report --yes
//! ```

mod duration;
mod exit;
mod inspect;
mod run;

use redisync::core::toolkit::Toolkit;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use clap::{CommandFactory, Parser, Subcommand};
use redisync::prelude::*;

use crate::run::Ended;

#[derive(Parser)]
#[command(
    name = "redisync",
    version,
    about = "Distributed locks, semaphores and latches on Redis, for shell scripts and operators",
    after_help = exit::HELP
)]
struct Cli {
    /// Redis to use: `redis://[user:password@]host[:port][/db]` or `rediss://...`
    #[arg(
        long,
        env = "REDISYNC_URL",
        default_value = "redis://127.0.0.1:6379",
        global = true,
        help_heading = "Global options"
    )]
    url: String,
    /// A CA certificate (PEM) to trust for `rediss://`, instead of the system's roots.
    #[arg(
        long,
        env = "REDISYNC_TLS_CA",
        value_name = "FILE",
        global = true,
        help_heading = "Global options"
    )]
    tls_ca: Option<std::path::PathBuf>,
    /// A client certificate (PEM) to present on `rediss://`, with --tls-key.
    #[arg(
        long,
        env = "REDISYNC_TLS_CERT",
        value_name = "FILE",
        requires = "tls_key",
        global = true,
        help_heading = "Global options"
    )]
    tls_cert: Option<std::path::PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(
        long,
        env = "REDISYNC_TLS_KEY",
        value_name = "FILE",
        requires = "tls_cert",
        global = true,
        help_heading = "Global options"
    )]
    tls_key: Option<std::path::PathBuf>,
    /// Read the password from this file (its first line) rather than from the URL; or set
    /// REDISYNC_PASSWORD (command lines are visible to every user, files and the
    /// environment are not).
    #[arg(
        long,
        value_name = "FILE",
        global = true,
        help_heading = "Global options"
    )]
    password_file: Option<std::path::PathBuf>,
    /// `--url` names nodes of a Redis Cluster, separated by commas.
    #[arg(
        long,
        env = "REDISYNC_CLUSTER",
        global = true,
        help_heading = "Global options"
    )]
    cluster: bool,
    /// Use the primary these Redis Sentinels name (their URLs, separated by commas), with
    /// --master; after a failover, the new primary. --url is not used then, nor TLS. The
    /// primary's password is --password-file's or REDISYNC_PASSWORD; the Sentinels' own is in
    /// their URLs.
    #[arg(
        long,
        env = "REDISYNC_SENTINEL",
        value_name = "URL,...",
        requires = "master",
        conflicts_with_all = ["cluster", "tls_ca", "tls_cert"],
        global = true,
        help_heading = "Global options"
    )]
    sentinel: Option<String>,
    /// The name the Sentinels monitor the primary under (`sentinel monitor NAME ...`).
    #[arg(
        long,
        env = "REDISYNC_MASTER",
        value_name = "NAME",
        requires = "sentinel",
        global = true,
        help_heading = "Global options"
    )]
    master: Option<String>,
    /// Prefix of every key, as the applications sharing the primitives use it.
    #[arg(
        long,
        env = "REDISYNC_PREFIX",
        default_value = "redisync",
        global = true,
        help_heading = "Global options"
    )]
    prefix: String,
    /// Give up on a Redis call after this long.
    #[arg(long, default_value = "5s", value_parser = duration::parse, global = true,
        help_heading = "Global options")]
    command_timeout: Duration,
    /// Wait by re-checking at this interval instead of listening on pub/sub (for servers or
    /// ACL users without pub/sub); at most 10s.
    #[arg(long, env = "REDISYNC_POLL", value_parser = duration::parse, global = true,
        help_heading = "Global options")]
    poll: Option<Duration>,
    /// The lease of holds without --lease, renewed every third of it while the command runs
    /// (default 30s): a crashed holder's lock frees within this time.
    #[arg(long, env = "REDISYNC_WATCHDOG", value_parser = duration::parse, global = true,
        help_heading = "Global options")]
    watchdog: Option<Duration>,
    /// Report on stderr what happens: the wait, the hold and its fencing token, the lease's
    /// renewals, a loss.
    #[arg(long, short = 'v', global = true, help_heading = "Global options")]
    verbose: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a command while holding a lock. The command gets the hold's fencing token in
    /// REDISYNC_FENCING_TOKEN; if the lock is lost while it runs, it is stopped.
    Lock {
        /// The lock's name.
        name: String,
        /// Take a shared (read) hold of the read-write lock of this name instead: commands
        /// with --read run side by side, and exclude --write.
        #[arg(long, conflicts_with_all = ["fair", "write"])]
        read: bool,
        /// Take the exclusive (write) hold of the read-write lock of this name: excludes
        /// --read and other --write runs.
        #[arg(long, conflicts_with = "fair")]
        write: bool,
        /// Take the fair lock of this name instead: waiters get it in arrival order.
        #[arg(long)]
        fair: bool,
        /// Give up after waiting this long (exit 124); wait for ever if not given.
        #[arg(long, value_parser = duration::parse)]
        wait: Option<Duration>,
        /// Hold the lock for at most this long; without it the lease is renewed while the
        /// command runs.
        #[arg(long, value_parser = duration::parse)]
        lease: Option<Duration>,
        #[command(flatten)]
        stop: Stop,
        /// The command to run, after `--`. Without one, redisync holds until interrupted
        /// (Ctrl-C, SIGTERM, SIGHUP), after printing the hold's variables as NAME=value lines.
        #[arg(last = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// Run a command while holding a permit of an expirable semaphore (created with
    /// --permits, or -n, if it does not exist), or with --classic permits of a classic
    /// semaphore. The command gets the permit id in REDISYNC_PERMIT_ID (expirable) and the
    /// semaphore's name in REDISYNC_SEMAPHORE_NAME.
    Semaphore {
        /// The semaphore's name.
        name: String,
        /// How many permits the semaphore has (`-n N` as in `consul lock -n N`): creates it
        /// with N if it does not exist, and refuses (exit 78) if an expirable one exists
        /// with another number; may be left out when it exists. (A classic semaphore counts
        /// only the permits free now, so an existing one keeps its count.)
        #[arg(long, short = 'n', value_parser = clap::value_parser!(u64).range(1..))]
        permits: Option<u64>,
        /// Use the library's classic `Semaphore` (permits without a lease, several at a time
        /// with --units) instead of the expirable one. Its permits are never taken back: a
        /// redisync killed with -9 keeps its units out until someone gives them back
        /// (`semaphore-set --classic NAME --add N`).
        #[arg(long)]
        classic: bool,
        /// How many permits this command takes at once (--classic).
        #[arg(long, default_value_t = 1, requires = "classic",
            value_parser = clap::value_parser!(u64).range(1..))]
        units: u64,
        /// Give up after waiting this long (exit 124); wait for ever if not given.
        #[arg(long, value_parser = duration::parse)]
        wait: Option<Duration>,
        /// Hold the permit for at most this long; without it the lease is renewed.
        #[arg(long, value_parser = duration::parse, conflicts_with = "classic")]
        lease: Option<Duration>,
        #[command(flatten)]
        stop: Stop,
        /// The command to run, after `--`. Without one, redisync holds until interrupted
        /// (Ctrl-C, SIGTERM, SIGHUP), after printing the hold's variables as NAME=value lines.
        #[arg(last = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// Wait until a rate limiter gives this process its units, then run a command. The rate
    /// is set with --rate if the limiter has none; a limiter with another rate is refused
    /// (exit 78: `rate-set` changes it). The command gets the limiter's name in
    /// REDISYNC_RATE_NAME.
    Rate {
        /// The rate limiter's name.
        name: String,
        /// Units per period, if this sets the rate: `100/s`, `1000/m`, `5/h`, `1/d`,
        /// `100/250ms`, `3/2s` (us, ms, s, m, h, d).
        #[arg(long, value_parser = parse_rate, value_name = "UNITS/PERIOD")]
        rate: Option<Rate>,
        /// Units beyond the rate that a period may admit, if this sets the rate: the limiter
        /// admits burst + 1 units at once when idle.
        #[arg(long, default_value_t = 0, requires = "rate")]
        burst: u64,
        /// How many units this command takes (at most burst + 1).
        #[arg(long, default_value_t = 1)]
        units: u64,
        /// Give up after waiting this long (exit 124); wait for ever if not given.
        #[arg(long, value_parser = duration::parse)]
        wait: Option<Duration>,
        /// Run the command line through `sh -c` (its words joined with spaces).
        #[arg(long)]
        shell: bool,
        /// The command to run, after `--`.
        #[arg(last = true, required = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// Arm, count down, or wait on a count-down latch: `latch set NAME COUNT`, `latch
    /// count-down NAME`, `latch wait NAME` (`latch NAME set COUNT` and the like work too).
    Latch {
        #[command(subcommand)]
        action: LatchAction,
    },
    /// Run a command while this process leads an election. The command gets the term (a
    /// fencing token) in REDISYNC_TERM and REDISYNC_FENCING_TOKEN; if the leadership is lost
    /// while it runs, it is stopped. When the command ends, redisync resigns and the next
    /// candidate takes over at once.
    Elect {
        /// The election's name.
        name: String,
        /// The value to advertise while leading (shown by `redisync leader`); `host:pid` of
        /// this process if not given.
        #[arg(long)]
        value: Option<String>,
        /// Give up after waiting this long (exit 124); wait for ever if not given.
        #[arg(long, value_parser = duration::parse)]
        wait: Option<Duration>,
        /// Lead for at most this long; without it the lease is renewed while the command runs.
        #[arg(long, value_parser = duration::parse)]
        lease: Option<Duration>,
        #[command(flatten)]
        stop: Stop,
        /// The command to run, after `--`. Without one, redisync holds until interrupted
        /// (Ctrl-C, SIGTERM, SIGHUP), after printing the hold's variables as NAME=value lines.
        #[arg(last = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// Print who leads an election: `VALUE (term N)`, or `(none)`.
    Leader {
        /// The election's name.
        name: String,
        /// Keep printing: the current leader, then every change, until interrupted.
        #[arg(long)]
        watch: bool,
        /// Print JSON, one object per line: {"name":..,"leader":{"value":..,"term":N}} or
        /// "leader":null.
        #[arg(long)]
        json: bool,
    },
    /// Show what Redis holds under a name: kind, holders, holds, leases, waiters, permits,
    /// an election's leader, a rate limiter's rate.
    Inspect {
        /// The name to look at.
        name: String,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Set how many permits an expirable semaphore (the one `semaphore` uses) has in all,
    /// creating it if need be: permits leased out stay out, and fewer permits take effect as
    /// they come back. With --add, change the number by that much instead; with --classic,
    /// work on a classic semaphore (which can only be created, or changed with --add).
    SemaphoreSet {
        /// The semaphore's name.
        name: String,
        /// The number of permits, at least 1.
        #[arg(value_parser = clap::value_parser!(u64).range(1..),
            required_unless_present = "add", conflicts_with = "add")]
        permits: Option<u64>,
        /// Add this many permits (negative: remove them; permits out stay out).
        #[arg(long, allow_negative_numbers = true, value_name = "N")]
        add: Option<i64>,
        /// The classic semaphore of this name (`semaphore --classic`).
        #[arg(long)]
        classic: bool,
    },
    /// Set a rate limiter's rate, creating it if need be; the new rate applies from the next
    /// decision.
    RateSet {
        /// The rate limiter's name.
        name: String,
        /// Units per period: `100/s`, `1000/m`, `5/h`, `1/d`, `100/250ms`.
        #[arg(value_parser = parse_rate, value_name = "UNITS/PERIOD")]
        rate: Rate,
        /// Units beyond the rate that a period may admit.
        #[arg(long, default_value_t = 0)]
        burst: u64,
    },
    /// Delete a primitive's state, whoever holds it: its holders lose their holds (their
    /// commands are stopped), its waiters wait for it to exist again. Fencing counters stay.
    Delete {
        /// What to delete.
        kind: Kind,
        /// Its name.
        name: String,
        /// Do not ask for confirmation.
        #[arg(long)]
        yes: bool,
    },
    /// Free a lock (reentrant, fair or read-write) whoever holds it.
    ForceUnlock {
        /// The lock's name.
        name: String,
        /// Do not ask for confirmation.
        #[arg(long)]
        yes: bool,
    },
}

/// How a command runs, and how it is stopped when its hold is lost.
#[derive(clap::Args)]
struct Stop {
    /// Run the command line through `sh -c` (its words joined with spaces), for `&&`, pipes
    /// and redirections.
    #[arg(long)]
    shell: bool,
    /// Signal sent to the command when the hold is lost.
    #[arg(long, default_value = "TERM", value_parser = run::parse_signal)]
    signal: String,
    /// Kill the command if it is still running this long after the signal.
    #[arg(long, default_value = "10s", value_parser = duration::parse)]
    kill_after: Duration,
}

impl Command {
    /// The kind of primitive the command uses its name as (as `inspect` names kinds), for the
    /// guard of one name to one kind; `None` for commands that only look or clean up.
    fn kind(&self) -> Option<&'static str> {
        match self {
            Command::Lock {
                read, write, fair, ..
            } => Some(if *read || *write {
                "read_write_lock"
            } else if *fair {
                "fair_lock"
            } else {
                "lock"
            }),
            Command::Semaphore { classic, .. } | Command::SemaphoreSet { classic, .. } => {
                Some(if *classic {
                    "semaphore"
                } else {
                    "expirable_semaphore"
                })
            }
            Command::Rate { .. } | Command::RateSet { .. } => Some("rate_limiter"),
            Command::Latch { .. } => Some("count_down_latch"),
            Command::Elect { .. } => Some("election"),
            Command::Leader { .. }
            | Command::Inspect { .. }
            | Command::Delete { .. }
            | Command::ForceUnlock { .. } => None,
        }
    }

    /// The name of the primitive the command works on.
    fn name(&self) -> &str {
        match self {
            Command::Lock { name, .. }
            | Command::Semaphore { name, .. }
            | Command::Rate { name, .. }
            | Command::Latch {
                action:
                    LatchAction::Set { name, .. }
                    | LatchAction::CountDown { name }
                    | LatchAction::Wait { name, .. },
            }
            | Command::Elect { name, .. }
            | Command::Leader { name, .. }
            | Command::Inspect { name, .. }
            | Command::SemaphoreSet { name, .. }
            | Command::RateSet { name, .. }
            | Command::Delete { name, .. }
            | Command::ForceUnlock { name, .. } => name,
        }
    }
}

/// The kinds of primitive `delete` knows.
#[derive(Clone, Copy, clap::ValueEnum)]
enum Kind {
    /// A lock (`lock`).
    Lock,
    /// A fair lock (`lock --fair`).
    FairLock,
    /// A read-write lock (`lock --read`, `lock --write`).
    Rwlock,
    /// An expirable semaphore (`semaphore`).
    Semaphore,
    /// A classic semaphore (`semaphore --classic`).
    ClassicSemaphore,
    /// A count-down latch (`latch`).
    Latch,
    /// A leader election (`elect`).
    Election,
    /// A rate limiter (`rate`).
    Rate,
}

#[derive(Subcommand)]
enum LatchAction {
    /// Arm the latch with a count, if it is open (exit 75 if it is armed already).
    Set {
        /// The latch's name.
        name: String,
        /// How many count-downs open it.
        count: u64,
    },
    /// Count the latch down by one.
    CountDown {
        /// The latch's name.
        name: String,
    },
    /// Wait until the latch opens: at once if it opened in the last few minutes, exit 124 if
    /// --wait runs out first, exit 66 if it is not armed (never set, or opened longer ago).
    Wait {
        /// The latch's name.
        name: String,
        /// Give up after waiting this long (exit 124); wait for ever if not given.
        /// (`--timeout` is the older spelling.)
        #[arg(long, alias = "timeout", value_parser = duration::parse)]
        wait: Option<Duration>,
    },
}

/// `latch NAME VERB ...` as `latch VERB NAME ...`: the name goes after the verb as in the
/// rest of the tool, and the older order is still accepted. Only the two words after `latch`
/// may trade places, and only when the second is a verb and the first is not.
fn latch_verb_first(mut args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let cli = Cli::command();
    let Some(latch) = cli.find_subcommand("latch") else {
        return args;
    };
    // clap adds `help` when it builds the command, after this.
    let mut verbs: Vec<&str> = latch
        .get_subcommands()
        .map(|verb| verb.get_name())
        .collect();
    verbs.push("help");
    // The options that take a value, whose value is not a word of the command line.
    let valued: Vec<String> = cli
        .get_arguments()
        .filter(|arg| arg.get_action().takes_values() && !arg.is_positional())
        .flat_map(|arg| {
            let long = arg.get_long().map(|long| format!("--{long}"));
            let short = arg.get_short().map(|short| format!("-{short}"));
            long.into_iter().chain(short)
        })
        .collect();
    let mut words = Vec::new();
    let mut i = 1;
    while i < args.len() && words.len() < 3 {
        let Some(arg) = args[i].to_str() else {
            break;
        };
        if arg == "--" {
            break;
        }
        if arg.starts_with('-') {
            if valued.iter().any(|option| option == arg) {
                i += 1;
            }
        } else {
            words.push(i);
        }
        i += 1;
    }
    if let [subcommand, first, second] = words[..] {
        let word = |at: usize| args[at].to_str().unwrap_or_default();
        if word(subcommand) == "latch"
            && !verbs.contains(&word(first))
            && verbs.contains(&word(second))
        {
            args.swap(first, second);
        }
    }
    args
}

/// How the tool ends: a code, and a one-line message for stderr.
struct Exit {
    code: i32,
    message: Option<String>,
}

impl From<redisync::Error> for Exit {
    fn from(err: redisync::Error) -> Self {
        Exit {
            code: exit::of(&err),
            message: Some(err.to_string()),
        }
    }
}

impl Exit {
    fn code(code: i32) -> Self {
        Exit {
            code,
            message: None,
        }
    }

    fn with(code: i32, message: impl Into<String>) -> Self {
        Exit {
            code,
            message: Some(message.into()),
        }
    }
}

#[tokio::main]
async fn main() {
    let cli = Cli::parse_from(latch_verb_first(std::env::args_os().collect()));
    let outcome = run(cli).await;
    let exit = match outcome {
        Ok(exit) | Err(exit) => exit,
    };
    if let Some(message) = exit.message {
        eprintln!("redisync: {message}");
    }
    std::process::exit(exit.code);
}

async fn run(cli: Cli) -> Result<Exit, Exit> {
    let password = password(cli.password_file.as_deref())?;
    let url = match &password {
        Some(password) => with_password(&cli.url, password),
        None => cli.url.clone(),
    };
    let target = match (&cli.sentinel, &cli.master) {
        (Some(sentinels), Some(master)) => Target::Sentinel {
            sentinels: cluster_nodes(sentinels)
                .into_iter()
                .map(str::to_owned)
                .collect(),
            master: master.clone(),
            password: password.clone(),
        },
        _ if cli.cluster => Target::Cluster(url.clone()),
        _ => Target::Server(url.clone()),
    };
    let builder = match &target {
        Target::Server(url) => Client::builder(url.as_str()),
        Target::Cluster(urls) => Client::cluster_builder(cluster_nodes(urls)),
        Target::Sentinel {
            sentinels,
            master,
            password,
        } => Client::sentinel_builder(sentinels.clone(), master.clone())
            .sentinel_auth(password.clone(), 0),
    };
    let tls_files = TlsFiles::read(&cli)?;
    let builder = tls_files.apply(builder);
    let strategy = match cli.poll {
        Some(interval) => WaitStrategy::Poll { interval },
        None => WaitStrategy::PubSub,
    };
    // Holders, waiters and permits are named `host:pid@...` in Redis, so that `inspect`
    // shows which process holds what.
    let mut builder = builder
        .label(host_and_pid())
        .key_prefix(cli.prefix.as_str())
        .command_timeout(cli.command_timeout)
        .wait_strategy(strategy);
    if let Some(watchdog) = cli.watchdog {
        builder = builder.watchdog_timeout(watchdog);
    }
    let client = builder.build().await.map_err(|err| {
        // Either side of a TLS mismatch just waits: say what the likely cause is.
        let hint = match (&target, &err) {
            (Target::Server(url) | Target::Cluster(url), _) if url.starts_with("rediss://") => {
                Some(
                    " (the URL asks for TLS: is the port a TLS port? A plain port never \
                     answers a TLS handshake; use redis:// for it)",
                )
            }
            (Target::Server(_) | Target::Cluster(_), redisync::Error::Timeout) => Some(
                " (is the port a TLS port? It answers nothing but a TLS handshake; use \
                 rediss:// for it)",
            ),
            _ => None,
        };
        let mut exit = Exit::from(err);
        if let (Some(hint), Some(message), exit::UNAVAILABLE) = (hint, &mut exit.message, exit.code)
        {
            message.push_str(hint);
        }
        exit
    })?;
    // Foreign data is reported by the library without the key (the error type has no room
    // for it); the command knows the name, and `inspect` shows which key it is.
    let name = cli.command.name().to_owned();
    let inspector = Inspector {
        target,
        tls: tls_files.clone(),
        timeout: cli.command_timeout,
    };
    let one_kind = cli.command.kind().map(|kind| OneKind {
        inspector: inspector.clone(),
        name: name.clone(),
        kind,
    });
    if let Some(one_kind) = &one_kind {
        if let Err(exit) = one_kind.check(&client).await {
            client.shutdown().await;
            return Err(exit);
        }
    }
    let outcome = match cli.command {
        Command::Lock {
            name,
            read,
            write,
            fair,
            wait,
            lease,
            stop,
            command,
        } => {
            let kind = match (read, write, fair) {
                (true, _, _) => LockKind::Read,
                (_, true, _) => LockKind::Write,
                (_, _, true) => LockKind::Fair,
                _ => LockKind::Reentrant,
            };
            lock(
                &client,
                &name,
                kind,
                wait,
                lease,
                &stop,
                &command,
                cli.verbose,
                one_kind.clone(),
            )
            .await
        }
        Command::Semaphore {
            name,
            permits,
            classic,
            units,
            wait,
            lease,
            stop,
            command,
        } => {
            let held = Holding {
                what: "permit",
                waiting: format!("a permit of {name:?}"),
                timed_out: format!("no permit of {name:?} within the wait"),
                wait,
                lease,
                verbose: cli.verbose,
                one_kind: one_kind.clone(),
            };
            if classic {
                let semaphore = ClassicSemaphore {
                    inspector: &inspector,
                    name: &name,
                    permits,
                    units,
                };
                semaphore.run(&client, held, &stop, &command).await
            } else {
                semaphore(&client, &name, permits, held, &stop, &command).await
            }
        }
        Command::SemaphoreSet {
            name,
            permits,
            add,
            classic,
        } => {
            let change = match (permits, add) {
                (Some(permits), _) => PermitChange::To(permits),
                (None, Some(add)) => PermitChange::By(add),
                // clap requires one of them.
                (None, None) => return Err(Exit::with(exit::USAGE, "give PERMITS or --add N")),
            };
            semaphore_set(&client, &inspector, &name, change, classic).await
        }
        Command::RateSet { name, rate, burst } => rate_set(&client, &name, rate.burst(burst)).await,
        Command::Delete { kind, name, yes } => delete(&client, kind, &name, yes).await,
        Command::Rate {
            name,
            rate,
            burst,
            units,
            wait,
            shell,
            command,
        } => {
            let rate = rate.map(|rate| rate.burst(burst));
            let program = run::Program {
                argv: &command,
                shell,
            };
            let take = Take {
                units,
                wait,
                verbose: cli.verbose,
                one_kind: one_kind.clone(),
            };
            rate_limited(&client, &name, rate, take, program).await
        }
        Command::Latch { action } => latch(&client, &inspector, action, cli.verbose).await,
        Command::Elect {
            name,
            value,
            wait,
            lease,
            stop,
            command,
        } => {
            let campaign = Campaign {
                value,
                wait,
                lease,
                verbose: cli.verbose,
            };
            elect(&client, &name, campaign, &stop, &command, one_kind.clone()).await
        }
        Command::Leader { name, watch, json } => leader(&client, &name, watch, json).await,
        Command::Inspect { name, json } => show(&client, &inspector, &name, json).await,
        Command::ForceUnlock { name, yes } => force_unlock(&client, &name, yes).await,
    };
    client.shutdown().await;
    outcome.map_err(|exit| name_the_keys(exit, &client, &name))
}

/// The password from `--password-file` (its first line) or `REDISYNC_PASSWORD`, if either
/// is given.
fn password(file: Option<&std::path::Path>) -> Result<Option<String>, Exit> {
    if let Some(file) = file {
        let text = std::fs::read_to_string(file).map_err(|err| {
            Exit::with(
                exit::USAGE,
                format!("--password-file {}: {err}", file.display()),
            )
        })?;
        let line = text.lines().next().unwrap_or_default();
        if line.is_empty() {
            return Err(Exit::with(
                exit::USAGE,
                format!(
                    "--password-file {}: the first line is empty",
                    file.display()
                ),
            ));
        }
        return Ok(Some(line.to_owned()));
    }
    Ok(std::env::var("REDISYNC_PASSWORD")
        .ok()
        .filter(|password| !password.is_empty()))
}

/// Each of `urls` (comma-separated for a cluster) with `password` in place of any the URL
/// has, percent-encoded as a URL needs.
fn with_password(urls: &str, password: &str) -> String {
    let encoded: String = password
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect();
    urls.split(',')
        .map(|url| {
            let Some((scheme, rest)) = url.trim().split_once("://") else {
                return url.to_owned();
            };
            // A socket's URL has no room for credentials before its path: they go in the
            // query, as `pass=`.
            if matches!(scheme, "unix" | "redis+unix") {
                let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
                let mut params: Vec<String> = query
                    .split('&')
                    .filter(|param| !param.is_empty() && !param.starts_with("pass="))
                    .map(str::to_owned)
                    .collect();
                params.push(format!("pass={encoded}"));
                return format!("{scheme}://{path}?{}", params.join("&"));
            }
            let (user, address) = match rest.split_once('@') {
                Some((credentials, address)) => {
                    let user = credentials.split_once(':').map_or(credentials, |(u, _)| u);
                    (user, address)
                }
                None => ("", rest),
            };
            format!("{scheme}://{user}:{encoded}@{address}")
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// What `--tls-ca`, `--tls-cert` and `--tls-key` name, read.
#[derive(Clone, Default)]
struct TlsFiles {
    ca: Option<Vec<u8>>,
    client: Option<(Vec<u8>, Vec<u8>)>,
}

impl TlsFiles {
    fn read(cli: &Cli) -> Result<TlsFiles, Exit> {
        let read = |flag: &str, path: &std::path::Path| {
            std::fs::read(path)
                .map_err(|err| Exit::with(exit::USAGE, format!("{flag} {}: {err}", path.display())))
        };
        let ca = cli
            .tls_ca
            .as_deref()
            .map(|ca| read("--tls-ca", ca))
            .transpose()?;
        let client = match (&cli.tls_cert, &cli.tls_key) {
            (Some(cert), Some(key)) => Some((read("--tls-cert", cert)?, read("--tls-key", key)?)),
            _ => None,
        };
        Ok(TlsFiles { ca, client })
    }

    fn apply(&self, mut builder: ClientBuilder) -> ClientBuilder {
        if let Some(ca) = &self.ca {
            builder = builder.tls_root_certificate(ca.clone());
        }
        if let Some((cert, key)) = &self.client {
            builder = builder.tls_client_certificate(cert.clone(), key.clone());
        }
        builder
    }

    /// The same certificates for a connection of the driver's own (`inspect`'s), if any
    /// were given (the driver would make any connection given certificates a TLS one).
    fn certificates(&self) -> Option<redis::TlsCertificates> {
        if self.ca.is_none() && self.client.is_none() {
            return None;
        }
        Some(redis::TlsCertificates {
            client_tls: self.client.clone().map(|(client_cert, client_key)| {
                redis::ClientTlsConfig {
                    client_cert,
                    client_key,
                }
            }),
            root_cert: self.ca.clone(),
        })
    }
}

/// For foreign data: which keys, and how to see the one at fault.
fn name_the_keys(exit: Exit, client: &Client, name: &str) -> Exit {
    if exit.code != exit::WRONG_TYPE
        || exit
            .message
            .as_deref()
            .is_some_and(|m| m.contains("foreign data under"))
    {
        return exit;
    }
    let keys = client
        .key_space(name)
        .map_or_else(|_| name.to_owned(), |space| format!("{}:*", space.base()));
    let message = exit.message.unwrap_or_default();
    Exit::with(
        exit.code,
        format!("{message} (a key under {keys}; `redisync inspect {name:?}` shows which)"),
    )
}

/// Which lock `lock` takes.
#[derive(Clone, Copy)]
enum LockKind {
    Reentrant,
    Fair,
    Read,
    Write,
}

#[allow(clippy::too_many_arguments)]
async fn lock(
    client: &Client,
    name: &str,
    kind: LockKind,
    wait: Option<Duration>,
    lease: Option<Duration>,
    stop: &Stop,
    command: &[String],
    verbose: bool,
    one_kind: Option<OneKind>,
) -> Result<Exit, Exit> {
    let what = match kind {
        LockKind::Reentrant => "lock",
        LockKind::Fair => "fair lock",
        LockKind::Read => "read hold",
        LockKind::Write => "write hold",
    };
    let held = Holding {
        what,
        waiting: format!("{what} {name:?}"),
        timed_out: format!("{what} {name:?} not acquired within the wait"),
        wait,
        lease,
        verbose,
        one_kind,
    };
    match kind {
        LockKind::Reentrant => held.run_on(client, &client.lock(name), stop, command).await,
        LockKind::Fair => {
            held.run_on(client, &client.fair_lock(name), stop, command)
                .await
        }
        LockKind::Read => {
            let reader = client.read_write_lock(name).reader();
            held.run_on(client, &reader, stop, command).await
        }
        LockKind::Write => {
            let writer = client.read_write_lock(name).writer();
            held.run_on(client, &writer, stop, command).await
        }
    }
}

impl Holding {
    /// [`run`](Self::run) under one of the locks, with the environment of a lock: its name,
    /// and the fencing token where the hold has one (a read hold has none, and the variable
    /// is then not set).
    async fn run_on<A: Acquire>(
        self,
        client: &Client,
        lock: &A,
        stop: &Stop,
        command: &[String],
    ) -> Result<Exit, Exit> {
        let env = |guard: &A::Guard| {
            let mut env = vec![("REDISYNC_LOCK_NAME", lock.name().to_owned())];
            if let Some(token) = guard.fencing_token() {
                env.push(("REDISYNC_FENCING_TOKEN", token.to_string()));
            }
            env
        };
        let acquire = |wait, lease| lock.acquire_with(wait, lease);
        self.run(client, acquire, env, stop, command).await
    }
}

async fn semaphore(
    client: &Client,
    name: &str,
    permits: Option<u64>,
    held: Holding,
    stop: &Stop,
    command: &[String],
) -> Result<Exit, Exit> {
    let semaphore = client.expirable_semaphore(name);
    let mut created = false;
    match permits {
        Some(permits) => {
            created = semaphore.try_set_permits(permits).await?;
            if !created {
                // It exists: it must be the semaphore the caller means.
                let total = semaphore.total_permits().await?;
                if total.is_some_and(|total| total != permits) {
                    return Err(Exit::with(
                        exit::CONFLICT,
                        format!(
                            "semaphore {name:?} has {} permits, not {permits} (use \
                             `redisync semaphore-set {name} {permits}` to change it)",
                            total.unwrap_or(0)
                        ),
                    ));
                }
            }
        }
        None => {
            if semaphore.total_permits().await?.is_none() {
                return Err(Exit::with(
                    exit::NO_SUCH,
                    format!(
                        "semaphore {name:?} does not exist; give --permits N (or -n N) to \
                         create it"
                    ),
                ));
            }
        }
    }
    let env = |permit: &ExpirablePermit| {
        vec![
            ("REDISYNC_PERMIT_ID", permit.id().to_owned()),
            ("REDISYNC_SEMAPHORE_NAME", name.to_owned()),
        ]
    };
    let acquire = |wait, lease| semaphore.acquire_with(wait, lease);
    let outcome = held.run(client, acquire, env, stop, command).await;
    if created && refused_before_running(&outcome) {
        // Unless someone else took a permit of it meanwhile.
        let all_back = semaphore.available_permits().await.ok();
        if all_back.is_some() && all_back == permits.and_then(|p| i64::try_from(p).ok()) {
            let _ = semaphore.delete().await;
        }
    }
    outcome
}

/// Whether a run was refused before its command ran, for a bad argument or because the name
/// turned out to be another kind's: a primitive the run created for it is then taken back,
/// or the name would stay that kind's for good.
fn refused_before_running(outcome: &Result<Exit, Exit>) -> bool {
    matches!(outcome, Err(exit) if matches!(exit.code, exit::KIND_CONFLICT | exit::USAGE))
}

/// `semaphore --classic`: `units` permits of the classic semaphore `name`, created with
/// `permits` if it does not exist.
struct ClassicSemaphore<'a> {
    inspector: &'a Inspector,
    name: &'a str,
    permits: Option<u64>,
    units: u64,
}

impl ClassicSemaphore<'_> {
    async fn run(
        self,
        client: &Client,
        held: Holding,
        stop: &Stop,
        command: &[String],
    ) -> Result<Exit, Exit> {
        let (name, units) = (self.name, self.units);
        let semaphore = client.semaphore(name);
        let created = match self.permits {
            Some(permits) => semaphore.try_set_permits(permits).await?,
            None => false,
        };
        // No permits free and no semaphore look the same to the semaphore itself.
        if !created && !self.exists(client).await? {
            return Err(Exit::with(
                exit::NO_SUCH,
                format!(
                    "semaphore {name:?} does not exist; give --permits N (or -n N) to create it"
                ),
            ));
        }
        let env = |_: &SemaphorePermit| vec![("REDISYNC_SEMAPHORE_NAME", name.to_owned())];
        let acquire = |wait, _lease| {
            let semaphore = semaphore.clone();
            async move {
                match wait {
                    Wait::For(wait) => semaphore.try_acquire_many_for(units, wait).await,
                    _ => semaphore.acquire_many(units).await.map(Some),
                }
            }
        };
        let outcome = held.run(client, acquire, env, stop, command).await;
        if created && refused_before_running(&outcome) {
            // Unless someone else took permits of it meanwhile.
            let all_back = semaphore.available_permits().await.ok();
            if all_back.is_some() && all_back == self.permits.and_then(|p| i64::try_from(p).ok()) {
                let _ = semaphore.delete().await;
            }
        }
        outcome
    }

    async fn exists(&self, client: &Client) -> Result<bool, Exit> {
        self.inspector.has(client, self.name, "semaphore").await
    }
}

/// `elect`'s options for the campaign.
struct Campaign {
    value: Option<String>,
    wait: Option<Duration>,
    lease: Option<Duration>,
    verbose: bool,
}

async fn elect(
    client: &Client,
    name: &str,
    Campaign {
        value,
        wait,
        lease,
        verbose,
    }: Campaign,
    stop: &Stop,
    command: &[String],
    one_kind: Option<OneKind>,
) -> Result<Exit, Exit> {
    let election = client.leader_election(name);
    let value = value.unwrap_or_else(host_and_pid);
    let wait = wait.map_or(Wait::Forever, Wait::For);
    let lease = lease.map_or(Lease::Watchdog, Lease::Fixed);
    let started = Instant::now();
    if verbose {
        eprintln!("redisync: campaigning for {name:?} as {value:?}");
    }
    let campaign = election.campaign_with(value, wait, lease);
    let Some(leadership) = waiting(&format!("leadership of {name:?}"), campaign).await? else {
        return Err(Exit::with(
            exit::TIMED_OUT,
            format!("not leading {name:?} within the wait"),
        ));
    };
    if let Some(one_kind) = &one_kind {
        if let Err(exit) = one_kind.check(client).await {
            let _ = leadership.resign().await;
            return Err(exit);
        }
    }
    let term = leadership.term().to_string();
    let _report = verbose.then(|| {
        eprintln!(
            "redisync: leading {name:?} after {} (term {term})",
            duration::show(started.elapsed())
        );
        report_renewals(client.clone(), leadership.lost(), "leadership")
    });
    let env = [
        ("REDISYNC_TERM", term.clone()),
        ("REDISYNC_FENCING_TOKEN", term),
        ("REDISYNC_ELECTION_NAME", name.to_owned()),
    ];
    let program = run::Program {
        argv: command,
        shell: stop.shell,
    };
    let ended = run::run_while_held(
        program,
        &env,
        leadership.lost(),
        &stop.signal,
        stop.kill_after,
    )
    .await;
    let resigned = leadership.resign().await;
    if verbose && resigned.is_ok() {
        eprintln!("redisync: resigned the leadership");
    }
    finish(ended, resigned.err(), "leadership")
}

/// `host:pid` of this process: the label of the client's holds, and what `elect` advertises
/// without `--value`, so that `leader` and `inspect` show who holds and who leads.
fn host_and_pid() -> String {
    let host: String = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|host| host.trim().to_owned())
        .filter(|host| !host.is_empty())
        .unwrap_or_else(|| "localhost".to_owned());
    // A label may not hold these; no host name does, but the variable could.
    let host: String = host
        .chars()
        .filter(|c| !matches!(c, '@' | '/' | '{' | '}') && !c.is_whitespace() && !c.is_control())
        .take(100)
        .collect();
    format!("{host}:{}", std::process::id())
}

/// One line about who leads `name`.
fn leader_line(name: &str, leader: Option<&Leader>, json: bool) -> String {
    match (leader, json) {
        (Some(leader), false) => format!("{} (term {})", leader.value, leader.term),
        (None, false) => "(none)".to_owned(),
        (Some(leader), true) => format!(
            "{{\"name\":{},\"leader\":{{\"value\":{},\"term\":{}}}}}",
            inspect::quote(name),
            inspect::quote(&leader.value),
            leader.term
        ),
        (None, true) => format!("{{\"name\":{},\"leader\":null}}", inspect::quote(name)),
    }
}

async fn leader(client: &Client, name: &str, watch: bool, json: bool) -> Result<Exit, Exit> {
    let election = client.leader_election(name);
    if !watch {
        let leader = election.leader().await?;
        println!("{}", leader_line(name, leader.as_ref(), json));
        return Ok(Exit::code(0));
    }
    let mut changes = std::pin::pin!(election.observe());
    while let Some(item) = futures_util::StreamExt::next(&mut changes).await {
        match item {
            Ok(leader) => {
                println!("{}", leader_line(name, leader.as_ref(), json));
                let _ = std::io::stdout().flush();
            }
            // The stream goes on after an outage; a bad name or a shutdown ends it.
            Err(err @ (redisync::Error::Redis(_) | redisync::Error::Timeout)) => {
                eprintln!("redisync: {err}; still watching");
            }
            Err(err) => return Err(err.into()),
        }
    }
    Ok(Exit::code(0))
}

/// Whether two rates admit the same: the same units per time (`100/s` is `6000/m`) and the
/// same burst.
fn same_rate(a: &Rate, b: &Rate) -> bool {
    a.burst_size() == b.burst_size()
        && u128::from(a.units()) * b.period().as_nanos()
            == u128::from(b.units()) * a.period().as_nanos()
}

/// A rate as `4/2s (burst 0)`.
fn with_burst(rate: &Rate) -> String {
    format!(
        "{} (burst {})",
        Rate::new(rate.units(), rate.period()),
        rate.burst_size()
    )
}

async fn rate_set(client: &Client, name: &str, rate: Rate) -> Result<Exit, Exit> {
    client.rate_limiter(name).set_rate(rate).await?;
    println!("rate limiter {name:?}: {}", with_burst(&rate));
    Ok(Exit::code(0))
}

/// `--rate`: the library's parser, whose errors say what is accepted.
fn parse_rate(text: &str) -> Result<Rate, String> {
    text.parse::<Rate>().map_err(|err| err.to_string())
}

/// What `rate` takes from its limiter, and how.
struct Take {
    units: u64,
    wait: Option<Duration>,
    verbose: bool,
    /// Checked again once the units are granted.
    one_kind: Option<OneKind>,
}

async fn rate_limited(
    client: &Client,
    name: &str,
    rate: Option<Rate>,
    Take {
        units,
        wait,
        verbose,
        one_kind,
    }: Take,
    program: run::Program<'_>,
) -> Result<Exit, Exit> {
    let limiter = client.rate_limiter(name);
    let mut created = false;
    match rate {
        Some(rate) => {
            created = limiter.try_set_rate(rate).await?;
            if !created {
                // It has a rate: it must be the one the caller means.
                let current = limiter.rate().await?;
                if let Some(current) = current.filter(|current| !same_rate(current, &rate)) {
                    let burst = match rate.burst_size() {
                        0 => String::new(),
                        burst => format!(" --burst {burst}"),
                    };
                    return Err(Exit::with(
                        exit::CONFLICT,
                        format!(
                            "rate limiter {name:?} has rate {}, not {}; use `redisync \
                             rate-set {name} {}{burst}` to change it",
                            with_burst(&current),
                            with_burst(&rate),
                            Rate::new(rate.units(), rate.period())
                        ),
                    ));
                }
            }
        }
        None => {
            if limiter.rate().await?.is_none() {
                return Err(Exit::with(
                    exit::NO_SUCH,
                    format!(
                        "rate limiter {name:?} has no rate: give --rate (or set one with \
                         `redisync rate-set {name} RATE`)"
                    ),
                ));
            }
        }
    }
    let granted = take_units(
        client,
        &limiter,
        name,
        units,
        wait,
        verbose,
        one_kind.as_ref(),
    )
    .await;
    if created && refused_before_running(&granted) {
        let _ = limiter.delete().await;
    }
    granted?;
    // Units are spent, not held: nothing can be lost while the command runs, so the signal
    // for a lost hold is never sent (signals redisync gets are still passed on).
    let env = [("REDISYNC_RATE_NAME", name.to_owned())];
    let never_lost = std::future::pending::<()>();
    match run::run_while_held(program, &env, never_lost, "TERM", Duration::ZERO).await {
        Ended::Exited(code) => Ok(Exit::code(code)),
        Ended::NotStarted(code, message) => Err(Exit::with(code, message)),
        Ended::HoldLost => Err(Exit::with(exit::FAILURE, "the command was stopped")),
    }
}

/// Waits for `units` of `limiter`, then checks again that the name is a rate limiter's.
async fn take_units(
    client: &Client,
    limiter: &RateLimiter,
    name: &str,
    units: u64,
    wait: Option<Duration>,
    verbose: bool,
    one_kind: Option<&OneKind>,
) -> Result<Exit, Exit> {
    let what = format!("{units} unit(s) of rate limiter {name:?}");
    let started = Instant::now();
    if verbose {
        eprintln!("redisync: waiting for {what}");
    }
    let granted = match wait {
        Some(wait) => waiting(&what, limiter.acquire_for(units, wait)).await?,
        None => waiting(&what, limiter.acquire(units))
            .await
            .map(|()| true)?,
    };
    if !granted {
        return Err(Exit::with(
            exit::TIMED_OUT,
            format!("rate limiter {name:?} gave no units within the wait"),
        ));
    }
    if verbose {
        eprintln!(
            "redisync: got {what} after {}",
            duration::show(started.elapsed())
        );
    }
    if let Some(one_kind) = one_kind {
        one_kind.check(client).await?;
    }
    Ok(Exit::code(0))
}

/// Running a command under something held: a lock's guard or a permit.
struct Holding {
    /// What is held, for messages.
    what: &'static str,
    /// What is waited for, for the status line.
    waiting: String,
    /// The message when the wait runs out.
    timed_out: String,
    /// `--wait`: at most this long, or for ever.
    wait: Option<Duration>,
    /// `--lease`: fixed, or renewed by the watchdog.
    lease: Option<Duration>,
    /// `--verbose`: report the wait, the hold and its renewals on stderr.
    verbose: bool,
    /// Checked again once the hold is taken.
    one_kind: Option<OneKind>,
}

impl Holding {
    /// Acquires with `acquire` (given `--wait` and `--lease`), runs `command` with `env` of
    /// the hold added to its environment, then releases it.
    async fn run<G: Held, F>(
        self,
        client: &Client,
        acquire: impl FnOnce(Wait, Lease) -> F,
        env: impl FnOnce(&G) -> Vec<(&'static str, String)>,
        stop: &Stop,
        command: &[String],
    ) -> Result<Exit, Exit>
    where
        F: std::future::Future<Output = redisync::Result<Option<G>>>,
    {
        let wait = self.wait.map_or(Wait::Forever, Wait::For);
        let lease = self.lease.map_or(Lease::Watchdog, Lease::Fixed);
        let started = Instant::now();
        if self.verbose {
            eprintln!("redisync: waiting for {}", self.waiting);
        }
        let acquired = waiting(&self.waiting, acquire(wait, lease)).await?;
        let Some(held) = acquired else {
            return Err(Exit::with(exit::TIMED_OUT, self.timed_out));
        };
        if let Some(one_kind) = &self.one_kind {
            if let Err(exit) = one_kind.check(client).await {
                let _ = held.release().await;
                return Err(exit);
            }
        }
        let _report = self.verbose.then(|| {
            let token = held
                .fencing_token()
                .map_or_else(|| "none".to_owned(), |t| t.to_string());
            eprintln!(
                "redisync: got the {} after {} (fencing token {token})",
                self.what,
                duration::show(started.elapsed())
            );
            report_renewals(client.clone(), held.lost(), self.what)
        });
        let env = env(&held);
        let program = run::Program {
            argv: command,
            shell: stop.shell,
        };
        let ended =
            run::run_while_held(program, &env, held.lost(), &stop.signal, stop.kill_after).await;
        let released = held.release().await;
        if self.verbose && released.is_ok() {
            eprintln!("redisync: released the {}", self.what);
        }
        finish(ended, released.err(), self.what)
    }
}

/// Reports on stderr, until dropped, each renewal of the client's leases and the loss of
/// the hold whose `lost` future this is. The command's client holds nothing else, so the
/// client's renewal count is this hold's.
fn report_renewals(
    client: Client,
    lost: impl std::future::Future<Output = ()> + Send + 'static,
    what: &'static str,
) -> AbortOnDrop {
    let task = tokio::spawn(async move {
        let mut lost = std::pin::pin!(lost);
        let mut renewals = client.stats().renewals;
        let mut check = tokio::time::interval(Duration::from_millis(100));
        loop {
            tokio::select! {
                () = &mut lost => {
                    eprintln!("redisync: the {what} was lost");
                    return;
                }
                _ = check.tick() => {
                    let now = client.stats().renewals;
                    if now > renewals {
                        eprintln!("redisync: lease renewed");
                        renewals = now;
                    }
                }
            }
        }
    });
    AbortOnDrop(task)
}

/// Stops a background task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The exit of a command run under a hold, given how the hold's release went.
fn finish(ended: Ended, release_error: Option<redisync::Error>, what: &str) -> Result<Exit, Exit> {
    match ended {
        Ended::HoldLost => Err(Exit::with(
            exit::HOLD_LOST,
            format!("the {what} was lost while the command ran; the command was stopped"),
        )),
        Ended::NotStarted(code, message) => Err(Exit::with(code, message)),
        Ended::Exited(code) => match release_error {
            Some(redisync::Error::NotOwner) => Err(Exit::with(
                exit::HOLD_LOST,
                format!("the {what} was lost before the command finished"),
            )),
            Some(err) => {
                eprintln!("redisync: releasing the {what} failed ({err}); its lease will free it");
                Ok(Exit::code(code))
            }
            None => Ok(Exit::code(code)),
        },
    }
}

async fn latch(
    client: &Client,
    inspector: &Inspector,
    action: LatchAction,
    verbose: bool,
) -> Result<Exit, Exit> {
    match action {
        LatchAction::Set { name, count } => {
            let latch = client.count_down_latch(&name);
            if latch.try_set_count(count).await? {
                if verbose {
                    eprintln!("redisync: armed latch {name:?} with count {count}");
                }
                Ok(Exit::code(0))
            } else {
                Err(Exit::with(
                    exit::ALREADY_ARMED,
                    format!(
                        "latch {name:?} is armed already (count {})",
                        latch.count().await?
                    ),
                ))
            }
        }
        LatchAction::CountDown { name } => {
            let latch = client.count_down_latch(&name);
            latch.count_down().await?;
            if verbose {
                let left = latch.count().await?;
                eprintln!("redisync: counted latch {name:?} down; count now {left}");
            }
            Ok(Exit::code(0))
        }
        LatchAction::Wait { name, wait } => {
            let latch = client.count_down_latch(&name);
            // An unarmed latch is open, but a waiter on one that was never armed (a typo, or
            // a waiter that started before the arming) would go on at once believing it
            // waited: only an opening Redis still remembers counts as one.
            if latch.count().await? == 0 {
                if inspector
                    .read(client, &name, inspect::LatchOpenedLately)
                    .await?
                {
                    if verbose {
                        eprintln!("redisync: latch {name:?} opened lately");
                    }
                    return Ok(Exit::code(0));
                }
                return Err(Exit::with(
                    exit::NO_SUCH,
                    format!(
                        "latch {name:?} is not armed: it was never set (`redisync latch set \
                         {name} COUNT` arms it), or it opened more than {} ago",
                        duration::show(redisync::COUNT_DOWN_MEMORY)
                    ),
                ));
            }
            let started = Instant::now();
            if verbose {
                eprintln!("redisync: waiting for latch {name:?} to open");
            }
            let opened = match wait {
                Some(timeout) => {
                    waiting(&format!("latch {name:?}"), latch.wait_for(timeout)).await?
                }
                None => waiting(&format!("latch {name:?}"), latch.wait())
                    .await
                    .map(|()| true)?,
            };
            if opened {
                if verbose {
                    eprintln!(
                        "redisync: latch {name:?} open after {}",
                        duration::show(started.elapsed())
                    );
                }
                Ok(Exit::code(0))
            } else {
                Err(Exit::with(
                    exit::TIMED_OUT,
                    format!(
                        "latch {name:?} still armed (count {})",
                        latch.count().await?
                    ),
                ))
            }
        }
    }
}

/// The nodes of a cluster `--url`: comma-separated URLs.
fn cluster_nodes(urls: &str) -> Vec<&str> {
    urls.split(',')
        .map(str::trim)
        .filter(|url| !url.is_empty())
        .collect()
}

/// Where the primitives live, as the global options name it.
#[derive(Clone)]
enum Target {
    /// One server: `--url`.
    Server(String),
    /// A cluster: `--cluster`, its nodes in `--url`.
    Cluster(String),
    /// The primary Sentinels name: `--sentinel`, `--master`.
    Sentinel {
        sentinels: Vec<String>,
        master: String,
        password: Option<String>,
    },
}

/// Reads what Redis holds under a name, with a connection of the driver's own: for
/// `inspect`, and for the guard that keeps one name to one kind.
#[derive(Clone)]
struct Inspector {
    target: Target,
    tls: TlsFiles,
    timeout: Duration,
}

impl Inspector {
    /// Every primitive found under `name`.
    async fn findings(&self, client: &Client, name: &str) -> Result<Vec<inspect::Finding>, Exit> {
        self.read(client, name, inspect::Everything).await
    }

    /// Whether a primitive of `kind` exists under `name`: for a classic semaphore, whose
    /// count alone cannot tell "none free" from "none at all".
    async fn has(&self, client: &Client, name: &str, kind: &str) -> Result<bool, Exit> {
        let found = self.findings(client, name).await?;
        Ok(found.iter().any(|finding| finding.kind == kind))
    }

    /// Reads what `reading` asks under `name`, within the command timeout.
    async fn read<R: inspect::Reading>(
        &self,
        client: &Client,
        name: &str,
        reading: R,
    ) -> Result<R::Output, Exit> {
        let space = client.key_space(name)?;
        // The library's own reading of Redis errors: foreign data, unreachable, or other.
        let failed = |err: redis::RedisError| Exit::from(redisync::Error::from(err));
        let read = async {
            match &self.target {
                Target::Cluster(urls) => {
                    let mut builder =
                        redis::cluster::ClusterClientBuilder::new(cluster_nodes(urls));
                    if let Some(certificates) = self.tls.certificates() {
                        builder = builder.certs(certificates);
                    }
                    let mut conn = builder.build()?.get_async_connection().await?;
                    reading.read(&mut conn, &space).await
                }
                Target::Server(url) => {
                    let client = match self.tls.certificates() {
                        Some(certificates) => {
                            redis::Client::build_with_tls(url.as_str(), certificates)?
                        }
                        None => redis::Client::open(url.as_str())?,
                    };
                    let mut conn = client.get_multiplexed_async_connection().await?;
                    reading.read(&mut conn, &space).await
                }
                Target::Sentinel {
                    sentinels,
                    master,
                    password,
                } => {
                    use redis::sentinel::{
                        SentinelClient, SentinelNodeConnectionInfo, SentinelServerType,
                    };
                    let mut primary = redis::RedisConnectionInfo::default();
                    if let Some(password) = password {
                        primary = primary.set_password(password.clone());
                    }
                    let node =
                        SentinelNodeConnectionInfo::default().set_redis_connection_info(primary);
                    let mut sentinel = SentinelClient::build(
                        sentinels.clone(),
                        master.clone(),
                        Some(node),
                        SentinelServerType::Master,
                    )?;
                    let mut conn = sentinel.get_async_connection().await?;
                    reading.read(&mut conn, &space).await
                }
            }
        };
        tokio::time::timeout(self.timeout, read)
            .await
            .map_err(|_| Exit::with(exit::UNAVAILABLE, "Redis did not answer in time"))?
            .map_err(failed)
    }

    /// Refuses (exit 73) if `name` is in use as a primitive of another kind than `mine`: one
    /// name is one primitive, so that `lock x` and `semaphore x` cannot both run their
    /// commands believing they own "x".
    async fn one_kind(&self, client: &Client, name: &str, mine: &str) -> Result<(), Exit> {
        let findings = self.findings(client, name).await?;
        let others: Vec<&str> = findings
            .iter()
            .map(|finding| finding.kind)
            .filter(|kind| *kind != mine && *kind != inspect::FOREIGN)
            .collect();
        if others.is_empty() {
            return Ok(());
        }
        let found: Vec<String> = others
            .iter()
            .map(|kind| with_article(inspect::title(kind)))
            .collect();
        // The two semaphores are one flag apart.
        let hint = match (mine, others.as_slice()) {
            ("expirable_semaphore", ["semaphore"]) => "; `semaphore --classic` uses it",
            ("semaphore", ["expirable_semaphore"]) => "; `semaphore` without --classic uses it",
            _ => "",
        };
        Err(Exit::with(
            exit::KIND_CONFLICT,
            format!(
                "{name:?} is in use as {}, not as {}: one name is one primitive (`redisync \
                 inspect {name:?}` shows it){hint}",
                found.join(" and "),
                with_article(inspect::title(mine))
            ),
        ))
    }
}

/// "a lock", "an expirable semaphore".
fn with_article(noun: &str) -> String {
    let article = if noun.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    };
    format!("{article} {noun}")
}

/// The guard of one name to one kind, checked again once a hold is taken: two processes
/// that checked at the same time both see each other's hold then, and neither runs.
#[derive(Clone)]
struct OneKind {
    inspector: Inspector,
    name: String,
    kind: &'static str,
}

impl OneKind {
    async fn check(&self, client: &Client) -> Result<(), Exit> {
        self.inspector.one_kind(client, &self.name, self.kind).await
    }
}

async fn show(
    client: &Client,
    inspector: &Inspector,
    name: &str,
    json: bool,
) -> Result<Exit, Exit> {
    let found = inspector.findings(client, name).await?;
    let report = if json {
        inspect::json(name, &found)
    } else {
        inspect::table(name, &found)
    };
    print!("{report}");
    // Shown, and still an error for scripts: the primitive cannot be used as it is.
    if found.is_empty() {
        return Err(Exit::with(
            exit::NO_SUCH,
            format!("nothing exists under {name:?}"),
        ));
    }
    match found.iter().find(|finding| finding.is_foreign()) {
        Some(foreign) => Err(Exit::with(
            exit::WRONG_TYPE,
            format!("foreign data under {}", foreign.key),
        )),
        None => Ok(Exit::code(0)),
    }
}

async fn force_unlock(client: &Client, name: &str, yes: bool) -> Result<Exit, Exit> {
    if !yes
        && !confirm(
            "force-unlock",
            &format!("force-unlock {name:?}, whoever holds it?"),
        )?
    {
        return Err(Exit::with(exit::FAILURE, "not confirmed; nothing changed"));
    }
    let mut freed = Vec::new();
    if client.lock(name).force_unlock().await? {
        freed.push("lock");
    }
    if client.fair_lock(name).force_unlock().await? {
        freed.push("fair lock");
    }
    if client.read_write_lock(name).force_unlock().await? {
        freed.push("read-write lock");
    }
    if freed.is_empty() {
        println!("{name:?} was not locked");
    } else {
        println!("freed {name:?}: {}", freed.join(", "));
    }
    Ok(Exit::code(0))
}

/// What `semaphore-set` does to the number of permits.
enum PermitChange {
    /// Makes it this many.
    To(u64),
    /// Adds this many (or removes).
    By(i64),
}

async fn semaphore_set(
    client: &Client,
    inspector: &Inspector,
    name: &str,
    change: PermitChange,
    classic: bool,
) -> Result<Exit, Exit> {
    if classic {
        return classic_semaphore_set(client, inspector, name, change).await;
    }
    let semaphore = client.expirable_semaphore(name);
    let permits = match change {
        PermitChange::To(permits) => permits,
        PermitChange::By(add) => {
            if semaphore.total_permits().await?.is_none() {
                return Err(no_semaphore_to_change(name, ""));
            }
            semaphore.add_permits(add).await?;
            let total = semaphore.total_permits().await?.unwrap_or(0);
            println!("semaphore {name:?}: {total} permits");
            return Ok(Exit::code(0));
        }
    };
    if semaphore.try_set_permits(permits).await? {
        println!("created semaphore {name:?} with {permits} permits");
        return Ok(Exit::code(0));
    }
    let total = semaphore.total_permits().await?.unwrap_or(0);
    let change = i128::from(permits) - i128::from(total);
    let change = i64::try_from(change)
        .map_err(|_| Exit::with(exit::USAGE, format!("cannot change by {change} permits")))?;
    if change != 0 {
        semaphore.add_permits(change).await?;
    }
    println!("semaphore {name:?}: {total} -> {permits} permits");
    Ok(Exit::code(0))
}

/// `--add` on a semaphore that does not exist: it would be created with a count no one
/// chose.
fn no_semaphore_to_change(name: &str, flag: &str) -> Exit {
    Exit::with(
        exit::NO_SUCH,
        format!(
            "semaphore {name:?} does not exist; create it with `redisync semaphore-set{flag} \
             {name} N`"
        ),
    )
}

/// `semaphore-set --classic`: a classic semaphore counts only the permits free now, so it
/// can be created with a number, or changed by one, but not set to one.
async fn classic_semaphore_set(
    client: &Client,
    inspector: &Inspector,
    name: &str,
    change: PermitChange,
) -> Result<Exit, Exit> {
    let semaphore = client.semaphore(name);
    match change {
        PermitChange::To(permits) => {
            if semaphore.try_set_permits(permits).await? {
                println!("created semaphore {name:?} with {permits} permits");
                return Ok(Exit::code(0));
            }
            let free = semaphore.available_permits().await?;
            Err(Exit::with(
                exit::CONFLICT,
                format!(
                    "semaphore {name:?} exists ({free} permits free now, not counting those \
                     taken); a classic semaphore has no total to set: change it with \
                     `redisync semaphore-set --classic {name} --add N` (N may be negative)"
                ),
            ))
        }
        PermitChange::By(add) => {
            if !inspector.has(client, name, "semaphore").await? {
                return Err(no_semaphore_to_change(name, " --classic"));
            }
            semaphore.add_permits(add).await?;
            let free = semaphore.available_permits().await?;
            println!("semaphore {name:?}: {free} permits free");
            Ok(Exit::code(0))
        }
    }
}

async fn delete(client: &Client, kind: Kind, name: &str, yes: bool) -> Result<Exit, Exit> {
    let label = match kind {
        Kind::Lock => "lock",
        Kind::FairLock => "fair lock",
        Kind::Rwlock => "read-write lock",
        Kind::Semaphore => "semaphore",
        Kind::ClassicSemaphore => "classic semaphore",
        Kind::Latch => "latch",
        Kind::Election => "election",
        Kind::Rate => "rate limiter",
    };
    if !yes
        && !confirm(
            "delete",
            &format!("delete {label} {name:?}, whoever holds it?"),
        )?
    {
        return Err(Exit::with(exit::FAILURE, "not confirmed; nothing changed"));
    }
    let deleted = match kind {
        Kind::Lock => client.lock(name).delete().await?,
        Kind::FairLock => client.fair_lock(name).delete().await?,
        Kind::Rwlock => client.read_write_lock(name).delete().await?,
        Kind::Semaphore => client.expirable_semaphore(name).delete().await?,
        Kind::ClassicSemaphore => client.semaphore(name).delete().await?,
        Kind::Latch => client.count_down_latch(name).delete().await?,
        Kind::Election => client.leader_election(name).delete().await?,
        Kind::Rate => client.rate_limiter(name).delete().await?,
    };
    if deleted {
        println!("deleted {label} {name:?}");
    } else {
        println!("there was no {label} {name:?}");
    }
    Ok(Exit::code(0))
}

/// Asks on the terminal; refuses when there is no terminal to ask on.
fn confirm(action: &str, question: &str) -> Result<bool, Exit> {
    if !std::io::stdin().is_terminal() {
        return Err(Exit::with(
            exit::USAGE,
            format!("refusing to {action} without --yes (stdin is not a terminal)"),
        ));
    }
    eprint!("{question} [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin()
        .read_line(&mut answer)
        .map_err(|e| Exit::with(exit::FAILURE, format!("reading the answer: {e}")))?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
}

/// Awaits `future`, showing a status line on stderr while it takes, if stderr is a terminal.
async fn waiting<T>(
    what: &str,
    future: impl std::future::Future<Output = redisync::Result<T>>,
) -> Result<T, Exit> {
    let started = Instant::now();
    let mut future = std::pin::pin!(future);
    // Interrupted while waiting: the wait is dropped, which takes back its registration (and
    // gives back anything granted on the way) before redisync exits, instead of leaving a
    // waiter registered until it expires.
    let mut incoming = run::Incoming::shared().await;
    let mut interrupted = std::pin::pin!(incoming.interrupted());
    let status = std::io::stderr().is_terminal();
    let mut ticks = tokio::time::interval_at(
        tokio::time::Instant::now() + Duration::from_millis(500),
        Duration::from_millis(500),
    );
    let mut shown = false;
    let output = loop {
        tokio::select! {
            output = &mut future => break output.map_err(Exit::from),
            signal = &mut interrupted => {
                break Err(Exit::with(
                    128 + signal,
                    format!("interrupted while waiting for {what}; nothing is held"),
                ));
            }
            _ = ticks.tick(), if status => {
                shown = true;
                eprint!("\rredisync: waiting for {what} ({})\x1b[K", duration::show(started.elapsed()));
                let _ = std::io::stderr().flush();
            }
        }
    };
    if shown {
        eprint!("\r\x1b[K");
    }
    output
}
