//! One worker process: a redisync client (through its own chaos proxy) that takes the
//! resources in turn, writes to the fenced register while it holds a lock, counts latches down,
//! and records every step in its event log (see [`events`](crate::events)).
//!
//! It runs until its standard input closes (the soak test's way of saying stop), then releases
//! what it holds, shuts its client down and exits. Every wait is bounded, so it stops within a
//! few seconds of being told.
//!
//! A **cheating** worker (`--cheat`, for the self-test) never touches the Redis under test: it
//! records holds it never took, with the register's highest token as its "fencing token", and
//! writes to the register with it. The checker must catch it.

use std::io::Read;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redisync::prelude::*;

use crate::events::{now_us, Event, EventLog, Resource};
use crate::options::WorkerOptions;
use crate::register::Register;
use crate::rng::Rng;

/// How many count-downs open a latch round.
pub const LATCH_COUNT: u64 = 3;

/// Key prefix of every primitive under test.
pub const KEY_PREFIX: &str = "soak";

/// The name of the latch of `round`.
pub fn latch_name(round: u64) -> String {
    format!("latch-{round}")
}

/// Longest wait of one acquire attempt.
const MAX_WAIT_MS: u64 = 1500;

/// Longest ordinary hold.
const MAX_HOLD_MS: u64 = 80;

/// Runs a worker until its standard input closes.
pub async fn run(options: WorkerOptions) -> ExitCode {
    let stop = stop_on_end_of_input();
    let mut log = match EventLog::open(&options.log) {
        Ok(log) => log,
        Err(e) => {
            eprintln!("soak worker {}: cannot open its log: {e}", options.id);
            return ExitCode::from(2);
        }
    };
    let register = match Register::connect(&options.register).await {
        Ok(register) => register,
        Err(e) => {
            eprintln!("soak worker {}: cannot reach the register: {e}", options.id);
            return ExitCode::from(2);
        }
    };
    let rng = Rng::new(options.seed);
    if options.cheat {
        cheat(&mut log, &register, rng, &stop).await;
        return ExitCode::SUCCESS;
    }
    let Some(client) = connect(&options, &stop).await else {
        return ExitCode::SUCCESS;
    };
    let mut worker = Worker {
        lease: options.lease,
        log,
        register,
        rng,
        seq: 0,
    };
    let lock = client.lock(Resource::Lock.name());
    let fair = client.fair_lock(Resource::FairLock.name());
    let rw = client.read_write_lock(Resource::RwWrite.name()).writer();
    let semaphore = client.semaphore(Resource::Semaphore.name());
    let expirable = client.expirable_semaphore(Resource::Expirable.name());
    while !stop.load(Ordering::Acquire) {
        match worker.rng.weighted(&[20, 15, 15, 20, 20, 10]) {
            0 => worker.attempt(&lock, Resource::Lock).await,
            1 => worker.attempt(&fair, Resource::FairLock).await,
            2 => worker.attempt(&rw, Resource::RwWrite).await,
            3 => worker.attempt(&semaphore, Resource::Semaphore).await,
            4 => worker.attempt(&expirable, Resource::Expirable).await,
            _ => worker.latch_step(&client).await,
        }
        let pause = worker.rng.millis(0, 30);
        tokio::time::sleep(pause).await;
    }
    // Pending give-backs get their last attempt here; bounded by the client's own timeouts.
    let _ = tokio::time::timeout(Duration::from_secs(15), client.shutdown()).await;
    ExitCode::SUCCESS
}

/// A flag set when standard input ends; read on a thread of its own so that a blocking read
/// never holds up the runtime that renews the leases.
fn stop_on_end_of_input() -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    std::thread::spawn(move || {
        let mut sink = [0u8; 64];
        while let Ok(n) = std::io::stdin().read(&mut sink) {
            if n == 0 {
                break;
            }
        }
        flag.store(true, Ordering::Release);
    });
    stop
}

/// Builds the client, trying again while a fault keeps it from connecting.
async fn connect(options: &WorkerOptions, stop: &AtomicBool) -> Option<Client> {
    while !stop.load(Ordering::Acquire) {
        let build = Client::builder(options.url.as_str())
            .key_prefix(KEY_PREFIX)
            .watchdog_timeout(options.lease)
            .command_timeout(options.command_timeout)
            .build();
        if let Ok(Ok(client)) = tokio::time::timeout(Duration::from_secs(5), build).await {
            return Some(client);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    None
}

/// The word an error is recorded as.
pub fn error_kind(err: &Error) -> &'static str {
    match err {
        Error::NotOwner => "not-owner",
        Error::Timeout => "timeout",
        Error::Redis(_) => "redis",
        Error::Shutdown => "shutdown",
        Error::InvalidArgument(_) => "invalid-argument",
        Error::WrongType => "wrong-type",
        _ => "other",
    }
}

/// An honest worker's state.
struct Worker {
    lease: Duration,
    log: EventLog,
    register: Register,
    rng: Rng,
    seq: u64,
}

impl Worker {
    /// One attempt at `res`: acquire, hold, release, each step recorded.
    async fn attempt<A: Acquire>(&mut self, primitive: &A, res: Resource) {
        self.seq += 1;
        let seq = self.seq;
        // A classic permit has no lease to fix; the others get a fixed lease now and then.
        let fixed = res.leased() && self.rng.chance(40);
        let lease = if fixed {
            Lease::Fixed(self.lease)
        } else {
            Lease::Watchdog
        };
        let wait = Wait::For(self.rng.millis(0, MAX_WAIT_MS));
        self.log.record(&Event::Try { res, seq });
        match primitive.acquire_with(wait, lease).await {
            Ok(Some(guard)) => self.hold(guard, res, seq, fixed).await,
            Ok(None) => self.log.record(&Event::Missed {
                res,
                seq,
                outcome: "timeout".into(),
            }),
            Err(err) => {
                self.log.record(&Event::Missed {
                    res,
                    seq,
                    outcome: error_kind(&err).into(),
                });
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }

    /// Holds `guard` for a while, writing to the fenced register at both ends.
    async fn hold<G: Held>(&mut self, guard: G, res: Resource, seq: u64, fixed: bool) {
        // Stamp first, then ask: a hold not lost after the stamp was valid at the stamp.
        let at = now_us();
        let lost = guard.is_lost();
        let token = guard.fencing_token();
        self.log.record_at(
            at,
            &Event::Enter {
                res,
                seq,
                token,
                lost,
            },
        );
        if let Some(token) = token {
            self.fenced_write(&guard, res, seq, token).await;
        }
        // Now and then a fixed lease is outlived on purpose: the hold is lost without any
        // fault, and its last write must be refused once someone else has written.
        let hold = if fixed && self.rng.chance(3) {
            self.lease + self.rng.millis(100, 400)
        } else {
            self.rng.millis(2, MAX_HOLD_MS)
        };
        tokio::time::sleep(hold).await;
        if let Some(token) = token {
            self.fenced_write(&guard, res, seq, token).await;
        }
        let at = now_us();
        let lost = guard.is_lost();
        self.log.record_at(at, &Event::Exit { res, seq, lost });
        let outcome = match guard.release().await {
            Ok(()) => "ok",
            Err(err) => error_kind(&err),
        };
        self.log.record(&Event::Released {
            res,
            seq,
            outcome: outcome.into(),
        });
    }

    /// Writes to the fenced register of `res` with `token` and records the outcome.
    async fn fenced_write<G: Held>(&mut self, guard: &G, res: Resource, seq: u64, token: u64) {
        let sent = now_us();
        match self.register.fenced_write(res, token).await {
            Ok(accepted) => {
                let at = now_us();
                let lost = guard.is_lost();
                self.log.record_at(
                    at,
                    &Event::Write {
                        res,
                        seq,
                        token,
                        sent,
                        accepted,
                        lost,
                    },
                );
            }
            Err(e) => eprintln!("soak worker: the register failed a write: {e}"),
        }
    }

    /// Counts the current latch round down (if it still needs count-downs), then waits on it
    /// for a moment.
    async fn latch_step(&mut self, client: &Client) {
        let round = match self.register.latch_round().await {
            Ok(Some(round)) => round,
            Ok(None) => return,
            Err(e) => {
                eprintln!("soak worker: the register failed: {e}");
                return;
            }
        };
        let latch = client.count_down_latch(latch_name(round));
        match self.register.claim_count_down(round).await {
            Ok(claimed) if claimed <= LATCH_COUNT => {
                self.log.record(&Event::CountDownBegin { round });
                let outcome = match latch.count_down().await {
                    Ok(()) => "ok",
                    Err(err) => error_kind(&err),
                };
                self.log.record(&Event::CountDownEnd {
                    round,
                    outcome: outcome.into(),
                });
            }
            Ok(_) => {}
            Err(e) => eprintln!("soak worker: the register failed: {e}"),
        }
        let wait = self.rng.millis(0, 300);
        if let Ok(true) = latch.wait_for(wait).await {
            self.log.record(&Event::LatchOpen { round });
        }
    }
}

/// The cheating worker's loop: records holds it never took.
async fn cheat(log: &mut EventLog, register: &Register, mut rng: Rng, stop: &AtomicBool) {
    let mut seq = 0;
    while !stop.load(Ordering::Acquire) {
        seq += 1;
        let res = Resource::ALL[rng.index(Resource::ALL.len())];
        log.record(&Event::Try { res, seq });
        // The token of the latest honest write: a token that was already handed out.
        let token = if res.fenced() {
            Some(register.highest_token(res).await.unwrap_or(0).max(1))
        } else {
            None
        };
        log.record(&Event::Enter {
            res,
            seq,
            token,
            lost: false,
        });
        for _ in 0..2 {
            if let Some(token) = token {
                let sent = now_us();
                if let Ok(accepted) = register.fenced_write(res, token).await {
                    log.record(&Event::Write {
                        res,
                        seq,
                        token,
                        sent,
                        accepted,
                        lost: false,
                    });
                }
            }
            tokio::time::sleep(rng.millis(50, 300)).await;
        }
        log.record(&Event::Exit {
            res,
            seq,
            lost: false,
        });
        log.record(&Event::Released {
            res,
            seq,
            outcome: "ok".into(),
        });
    }
}
