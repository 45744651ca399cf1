//! The nemesis: one fault after another, picked and timed by a seeded generator, against the
//! workers (pause, kill), the Redis under test (pause) and the network between them (each
//! worker's chaos proxy: resets, pub/sub cuts, latency, a stalled connection, a blackhole,
//! lost replies). Every fault heals before the next one starts, and [`Nemesis::heal`] puts
//! everything back at the end.

use std::time::{Duration, Instant};

use redisync_test_harness::{ChaosProxy, RedisServer};

use crate::events::{read_log, Event, Resource};
use crate::fleet::Fleet;
use crate::rng::Rng;

/// A kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// A worker suspended (`SIGSTOP`) for less than a lease.
    PauseWorker,
    /// A worker suspended for longer than a lease: its holds expire under it.
    PauseWorkerPastLease,
    /// A worker killed (`SIGKILL`) and started again.
    KillWorker,
    /// The Redis under test suspended (`SIGSTOP`), sometimes for longer than a lease.
    PauseRedis,
    /// Every connection of one proxy, or of all, reset.
    ResetConnections,
    /// Every subscribed connection cut.
    CutPubsub,
    /// 20–300 ms more each way, on one proxy or all, for a few seconds.
    Latency,
    /// One connection of a proxy forwards nothing while the others work.
    Stall,
    /// Nothing forwarded by one proxy for a while.
    Blackhole,
    /// One proxy's requests run but their replies are lost.
    DropReplies,
}

impl Fault {
    /// Every kind, in report order.
    pub const ALL: [Fault; 10] = [
        Fault::PauseWorker,
        Fault::PauseWorkerPastLease,
        Fault::KillWorker,
        Fault::PauseRedis,
        Fault::ResetConnections,
        Fault::CutPubsub,
        Fault::Latency,
        Fault::Stall,
        Fault::Blackhole,
        Fault::DropReplies,
    ];

    /// Relative frequency.
    const WEIGHTS: [u64; 10] = [12, 8, 10, 8, 12, 8, 12, 10, 10, 10];

    /// The word in reports.
    pub fn name(self) -> &'static str {
        match self {
            Fault::PauseWorker => "pause-worker",
            Fault::PauseWorkerPastLease => "pause-worker-past-lease",
            Fault::KillWorker => "kill-worker",
            Fault::PauseRedis => "pause-redis",
            Fault::ResetConnections => "reset-connections",
            Fault::CutPubsub => "cut-pubsub",
            Fault::Latency => "latency",
            Fault::Stall => "stall-connection",
            Fault::Blackhole => "blackhole",
            Fault::DropReplies => "drop-replies",
        }
    }
}

/// How many faults of each kind were injected.
#[derive(Debug, Default, Clone)]
pub struct FaultCounts {
    counts: [u64; Fault::ALL.len()],
    /// Kills called off because the worker was using the classic semaphore.
    pub kills_called_off: u64,
}

impl FaultCounts {
    fn add(&mut self, fault: Fault) {
        if let Some(i) = Fault::ALL.iter().position(|f| *f == fault) {
            self.counts[i] += 1;
        }
    }

    /// The count of each kind, in report order.
    pub fn by_kind(&self) -> impl Iterator<Item = (Fault, u64)> + '_ {
        Fault::ALL.into_iter().zip(self.counts.iter().copied())
    }

    /// All faults injected.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }
}

/// The fault injector.
pub struct Nemesis<'a> {
    rng: Rng,
    fleet: &'a mut Fleet,
    proxies: &'a [ChaosProxy],
    redis: &'a RedisServer,
    lease: Duration,
    /// What was injected.
    pub counts: FaultCounts,
}

impl<'a> Nemesis<'a> {
    /// A nemesis with the schedule of `seed`.
    pub fn new(
        seed: u64,
        fleet: &'a mut Fleet,
        proxies: &'a [ChaosProxy],
        redis: &'a RedisServer,
        lease: Duration,
    ) -> Nemesis<'a> {
        Nemesis {
            rng: Rng::new(seed),
            fleet,
            proxies,
            redis,
            lease,
            counts: FaultCounts::default(),
        }
    }

    /// Injects faults until `until` (the fault under way then still runs its course).
    pub async fn run(&mut self, until: Instant) -> std::io::Result<()> {
        while Instant::now() < until {
            let calm = self.rng.millis(200, 1000);
            tokio::time::sleep(calm).await;
            self.fleet.restart_crashed()?;
            let fault = Fault::ALL[self.rng.weighted(&Fault::WEIGHTS)];
            self.inject(fault).await?;
        }
        Ok(())
    }

    async fn inject(&mut self, fault: Fault) -> std::io::Result<()> {
        let lease_ms = self.lease.as_millis() as u64;
        let honest = self.fleet.honest();
        let worker = honest[self.rng.index(honest.len())];
        let proxy = &self.proxies[self.rng.index(self.proxies.len())];
        match fault {
            Fault::PauseWorker | Fault::PauseWorkerPastLease => {
                let pause = if fault == Fault::PauseWorker {
                    self.rng.millis(100, lease_ms * 2 / 3)
                } else {
                    self.rng.millis(lease_ms + 200, lease_ms * 2 + 500)
                };
                self.fleet.pause(worker);
                tokio::time::sleep(pause).await;
                self.fleet.resume(worker);
            }
            Fault::KillWorker => {
                // Suspended first, so that its log cannot change while it is read.
                self.fleet.pause(worker);
                if self.using_classic_permit(worker) {
                    // A classic permit has no lease: killed with it, it is gone for good, as
                    // designed, and the semaphore would end the run short of a permit.
                    self.fleet.resume(worker);
                    self.counts.kills_called_off += 1;
                    return Ok(());
                }
                self.fleet.kill_and_restart(worker)?;
            }
            Fault::PauseRedis => {
                let pause = self.rng.millis(200, lease_ms + 1000);
                self.redis.pause();
                tokio::time::sleep(pause).await;
                self.redis.resume();
            }
            Fault::ResetConnections => {
                if self.rng.chance(50) {
                    self.proxies.iter().for_each(|p| {
                        p.reset_all();
                    });
                } else {
                    proxy.reset_all();
                }
            }
            Fault::CutPubsub => self.proxies.iter().for_each(|p| {
                p.cut_pubsub();
            }),
            Fault::Latency => {
                let latency = self.rng.millis(20, 300);
                let span = self.rng.millis(1000, 3000);
                let all = self.rng.chance(50);
                for p in self.proxies {
                    if all || std::ptr::eq(p, proxy) {
                        p.set_latency(latency);
                    }
                }
                tokio::time::sleep(span).await;
                self.proxies
                    .iter()
                    .for_each(|p| p.set_latency(Duration::ZERO));
            }
            Fault::Stall => {
                let span = self.rng.millis(500, 2500);
                if proxy.stall_oldest() {
                    tokio::time::sleep(span).await;
                    proxy.unstall();
                }
            }
            Fault::Blackhole => {
                let span = self.rng.millis(300, 2500);
                proxy.blackhole(true);
                tokio::time::sleep(span).await;
                proxy.blackhole(false);
            }
            Fault::DropReplies => {
                let span = self.rng.millis(200, 1500);
                proxy.drop_replies(true);
                tokio::time::sleep(span).await;
                proxy.drop_replies(false);
            }
        }
        self.counts.add(fault);
        Ok(())
    }

    /// Whether `worker` (suspended) is between trying the classic semaphore and a release (or
    /// give-back) that certainly landed.
    fn using_classic_permit(&self, worker: u32) -> bool {
        let Some(path) = self.fleet.current_log(worker) else {
            return false;
        };
        let events = read_log(&path).unwrap_or_default();
        for (_, event) in events.iter().rev() {
            match event {
                Event::Try { res, .. } | Event::Enter { res, .. } | Event::Exit { res, .. }
                    if *res == Resource::Semaphore =>
                {
                    return true
                }
                Event::Released { res, outcome, .. } if *res == Resource::Semaphore => {
                    return outcome != "ok"
                }
                Event::Missed { res, outcome, .. } if *res == Resource::Semaphore => {
                    return outcome != "timeout"
                }
                _ => {}
            }
        }
        false
    }

    /// Ends every fault: no latency, blackhole, lost replies or stall on any proxy, Redis and
    /// every worker running.
    pub fn heal(&mut self) {
        for p in self.proxies {
            p.set_latency(Duration::ZERO);
            p.blackhole(false);
            p.drop_replies(false);
            p.unstall();
        }
        self.fleet.resume_all();
    }
}
