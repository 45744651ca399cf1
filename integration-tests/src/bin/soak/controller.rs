//! The soak test itself: sets up the Redis under test, the register, one chaos proxy per
//! worker and the workers; lets the nemesis loose for the requested time; heals everything;
//! lets the workers run on healed for a moment, stops them; then checks liveness and the logs
//! and reports.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redisync::prelude::*;
use redisync_test_harness::{ChaosProxy, RedisServer};

use crate::checker::{self, Findings};
use crate::events::Resource;
use crate::fleet::{FaultRecord, Fleet, FleetConfig};
use crate::latches::arm_rounds;
use crate::liveness::{self, Liveness};
use crate::nemesis::{FaultCounts, Nemesis};
use crate::options::{CheckOptions, RunOptions};
use crate::register::Register;
use crate::rng::Rng;
use crate::worker::KEY_PREFIX;

/// The workers' command timeout.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(1);

/// How long the workers go on after the faults healed, before they are told to stop.
const CALM: Duration = Duration::from_secs(2);

/// How long workers may take to stop once told.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// Exit status of a run with violations or stuck resources.
const FAILED: u8 = 1;
/// Exit status of a set-up failure.
const SETUP: u8 = 2;
/// Exit status of a self-test in which the checker reported nothing.
const SELF_TEST_BLIND: u8 = 3;

/// Runs the soak test and reports; the exit status says how it went.
pub async fn run(options: RunOptions) -> ExitCode {
    match soak(&options).await {
        Ok(code) => code,
        Err(message) => {
            eprintln!("soak: {message}");
            ExitCode::from(SETUP)
        }
    }
}

async fn soak(options: &RunOptions) -> Result<ExitCode, String> {
    let seed = options.seed.unwrap_or_else(Rng::fresh_seed);
    println!(
        "soak: seed {seed} (replay with --seed {seed}); {} workers{}; faults for {:?}; \
         lease {:?}; {} permits per semaphore",
        options.workers,
        if options.self_test {
            " and a cheating one (self-test)"
        } else {
            ""
        },
        options.duration,
        options.lease,
        options.permits
    );
    let redis = RedisServer::start();
    let register_server = RedisServer::start();
    let dir = tempfile::Builder::new()
        .prefix("redisync-soak-")
        .tempdir()
        .map_err(|e| format!("cannot create the log directory: {e}"))?;
    let client = Client::builder(redis.url())
        .key_prefix(KEY_PREFIX)
        .watchdog_timeout(options.lease)
        .command_timeout(COMMAND_TIMEOUT)
        .build()
        .await
        .map_err(|e| format!("cannot connect to the Redis under test: {e}"))?;
    set_up_semaphores(&client, options.permits).await?;
    let register = Register::connect(&register_server.url())
        .await
        .map_err(|e| format!("cannot connect to the register: {e}"))?;

    let proxies: Vec<ChaosProxy> = (0..options.workers)
        .map(|_| ChaosProxy::start(&redis))
        .collect();
    let urls: Vec<String> = proxies.iter().map(ChaosProxy::url).collect();
    let bin = std::env::current_exe().map_err(|e| format!("cannot find the soak binary: {e}"))?;
    let config = FleetConfig {
        bin,
        dir: dir.path().to_owned(),
        register: register_server.url(),
        lease: options.lease,
        command_timeout: COMMAND_TIMEOUT,
        seed,
    };
    let mut fleet = Fleet::start(config, &urls, options.self_test)
        .map_err(|e| format!("cannot start the workers: {e}"))?;
    let cheat = options.self_test.then_some(options.workers);

    let stop_rounds = Arc::new(AtomicBool::new(false));
    let rounds = tokio::spawn(arm_rounds(
        client.clone(),
        register.clone(),
        stop_rounds.clone(),
    ));

    let started = Instant::now();
    let mut nemesis = Nemesis::new(seed, &mut fleet, &proxies, &redis, options.lease);
    let outcome = nemesis.run(started + options.duration).await;
    nemesis.heal();
    let faults = nemesis.counts.clone();
    outcome.map_err(|e| format!("cannot restart a worker: {e}"))?;
    tokio::time::sleep(CALM).await;
    fleet
        .restart_crashed()
        .map_err(|e| format!("cannot restart a worker: {e}"))?;
    stop_rounds.store(true, Ordering::Release);
    let rounds_armed = rounds.await.unwrap_or(0);
    let unstopped = fleet.stop(STOP_TIMEOUT).await;
    let ran_for = started.elapsed();

    let findings = checker::check(dir.path(), &fleet.record, options.permits, cheat)
        .map_err(|e| format!("cannot read the event logs: {e}"))?;
    let live = liveness::check(
        &client,
        options.lease,
        options.permits,
        rounds_armed,
        &findings.rounds,
    )
    .await;
    let mut violations = findings.violations.clone();
    violations.extend(live.violations.iter().cloned());
    for crash in &fleet.record.crashes {
        violations.push(format!(
            "worker w{}.{} exited by itself ({}): {}",
            crash.worker, crash.incarnation, crash.status, crash.stderr_tail
        ));
    }
    let mut stuck = live.stuck.clone();
    stuck.extend(
        unstopped
            .iter()
            .map(|w| format!("worker w{w} did not stop within {STOP_TIMEOUT:?}")),
    );
    let tally = fence_tally(&register).await;
    report(
        &findings,
        &live,
        &faults,
        rounds_armed,
        tally,
        ran_for,
        &violations,
        &stuck,
    );
    client.shutdown().await;

    let failed = !violations.is_empty() || !stuck.is_empty();
    // A self-test's violations are expected: its logs are not worth keeping unless asked.
    if (failed && !options.self_test) || options.keep_logs {
        let kept = dir.keep();
        println!("event logs kept in {}", kept.display());
    }
    println!(
        "SOAK RESULT seed={seed} acquisitions={} faults={} violations={} stuck={}",
        findings.acquisitions.values().sum::<u64>(),
        faults.total(),
        violations.len(),
        stuck.len()
    );
    if options.self_test {
        if violations.is_empty() {
            println!("SELF-TEST FAILED: the cheating worker went unnoticed");
            return Ok(ExitCode::from(SELF_TEST_BLIND));
        }
        println!(
            "SELF-TEST PASSED: the checker caught the cheating worker ({} violations, as it \
             should; the exit status is 1 as for any run with violations)",
            violations.len()
        );
    }
    Ok(if failed {
        ExitCode::from(FAILED)
    } else {
        ExitCode::SUCCESS
    })
}

/// `soak check`: the checker alone, on the logs an earlier run kept.
pub fn check_again(options: &CheckOptions) -> ExitCode {
    let checked = FaultRecord::read(&options.dir)
        .and_then(|record| checker::check(&options.dir, &record, options.permits, options.cheat));
    let findings = match checked {
        Ok(findings) => findings,
        Err(e) => {
            eprintln!(
                "soak: cannot read the logs in {}: {e}",
                options.dir.display()
            );
            return ExitCode::from(SETUP);
        }
    };
    println!(
        "acquisitions {}, violations {}",
        findings.acquisitions.values().sum::<u64>(),
        findings.violations.len()
    );
    for v in &findings.violations {
        println!("  VIOLATION {v}");
    }
    if findings.violations.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(FAILED)
    }
}

/// Gives both semaphores their permits.
async fn set_up_semaphores(client: &Client, permits: u64) -> Result<(), String> {
    let fail = |e: Error| format!("cannot set the semaphores' permits: {e}");
    client
        .semaphore(Resource::Semaphore.name())
        .try_set_permits(permits)
        .await
        .map_err(fail)?;
    client
        .expirable_semaphore(Resource::Expirable.name())
        .try_set_permits(permits)
        .await
        .map_err(fail)?;
    Ok(())
}

/// What the register's fences accepted and refused, over every lock.
async fn fence_tally(register: &Register) -> (u64, u64) {
    let mut total = (0, 0);
    for res in Resource::ALL.into_iter().filter(|r| r.fenced()) {
        if let Ok(t) = register.tally(res).await {
            total.0 += t.accepted;
            total.1 += t.rejected;
        }
    }
    total
}

/// Shows at most this many lines of each list.
const SHOWN: usize = 20;

#[allow(clippy::too_many_arguments)]
fn report(
    findings: &Findings,
    live: &Liveness,
    faults: &FaultCounts,
    rounds_armed: u64,
    register: (u64, u64),
    ran_for: Duration,
    violations: &[String],
    stuck: &[String],
) {
    let acquisitions: Vec<String> = Resource::ALL
        .iter()
        .map(|r| format!("{r} {}", findings.acquisitions.get(r).copied().unwrap_or(0)))
        .collect();
    println!("ran for {:.1} s", ran_for.as_secs_f64());
    println!(
        "acquisitions: {} (total {})",
        acquisitions.join(", "),
        findings.acquisitions.values().sum::<u64>()
    );
    let begun: u64 = findings.rounds.values().map(|r| r.begun).sum();
    let confirmed: u64 = findings.rounds.values().map(|r| r.confirmed).sum();
    println!(
        "latch: {rounds_armed} rounds armed, {} ended open; {begun} count-downs begun, \
         {confirmed} confirmed; {} waits saw a round open",
        live.rounds_open, findings.latch_opens
    );
    println!(
        "attempts without a hold: {} waits ran out, {} errors; {} holds lost, {} releases failed",
        findings.timeouts, findings.errors, findings.lost_holds, findings.failed_releases
    );
    println!(
        "fenced writes: {} accepted, {} refused (register's count: {} accepted, {} refused)",
        findings.writes_accepted, findings.writes_refused, register.0, register.1
    );
    let kinds: Vec<String> = faults
        .by_kind()
        .map(|(f, n)| format!("{} {n}", f.name()))
        .collect();
    println!(
        "faults: {} (total {}; {} kills called off: classic permit in use)",
        kinds.join(", "),
        faults.total(),
        faults.kills_called_off
    );
    println!(
        "overlaps explained by a lost lease or a suspended holder: {} ({} holds lost or suspended)",
        findings.explained_overlaps, findings.explained_holds
    );
    let recovered: Vec<String> = live
        .recovered
        .iter()
        .map(|(what, took)| format!("{what} {} ms", took.as_millis()))
        .collect();
    println!("after healing, free again: {}", recovered.join(", "));
    println!("violations: {}", violations.len());
    for v in violations.iter().take(SHOWN) {
        println!("  VIOLATION {v}");
    }
    if violations.len() > SHOWN {
        println!("  ... and {} more", violations.len() - SHOWN);
    }
    println!("stuck: {}", stuck.len());
    for s in stuck.iter().take(SHOWN) {
        println!("  STUCK {s}");
    }
}
