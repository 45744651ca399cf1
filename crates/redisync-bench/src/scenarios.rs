//! The scenarios. Each measures one round for one contender and adds its figures.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redisync::prelude::*;
use redisync_test_harness::RedisServer;

use crate::commands::{Commands, Pass};
use crate::lockers::{lockers, Contender, Locker, Section};
use crate::monitor::CommandCounter;
use crate::peers::{self, Driver};
use crate::report::{percentile, Figures, Scenario};

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// The next number of a xorshift sequence: cheap pseudo-randomness that is the same in every
/// run.
pub(crate) fn xorshift(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

/// Puts `order` in a new pseudo-random order (Fisher–Yates on [`xorshift`]).
fn shuffle(order: &mut [usize], seed: &mut u64) {
    for j in (1..order.len()).rev() {
        order.swap(j, (xorshift(seed) % (j as u64 + 1)) as usize);
    }
}

/// Cycles a contender of scenario 1 runs in one go before the next takes its turn.
const UNCONTENDED_BLOCK: usize = 100;

/// One contender of scenario 1: a locker of this process, or a peer's driver, which times its
/// cycles itself.
enum Cycler {
    Local(Box<dyn Locker>),
    Peer(Box<Driver>),
}

impl Cycler {
    /// `contender`'s cycler on the free lock `key`, warmed up; `None` if it is a peer that
    /// could not start (it is skipped, and said so).
    async fn start(contender: Contender, url: &str, key: String) -> Option<Cycler> {
        if peers::is_external(contender) {
            let shape = peers::Shape {
                kind: peers::Kind::Uncontended,
                key,
                clients: 1,
                tasks: 1,
                hold: Duration::ZERO,
            };
            // The driver warms up as below before it says it is ready.
            return Driver::start(contender, url, &shape)
                .await
                .ok()
                .map(|driver| Cycler::Peer(Box::new(driver)));
        }
        let mut locker = lockers(contender, url, 1, 1, |_| key.clone())
            .await
            .remove(0);
        // Warm up: connections, script caches.
        for _ in 0..50 {
            locker
                .with_lock(Box::pin(async {}))
                .await
                .expect("warm-up cycle");
        }
        Some(Cycler::Local(locker))
    }

    /// Runs `n` lock + unlock cycles; the latency of each, in µs. A peer that fails is
    /// skipped for the rest of the run.
    async fn cycles(&mut self, contender: Contender, n: usize) -> Result<Vec<f64>, String> {
        match self {
            Cycler::Local(locker) => {
                let mut samples = Vec::with_capacity(n);
                for _ in 0..n {
                    let start = Instant::now();
                    locker.with_lock(Box::pin(async {})).await.expect("cycle");
                    samples.push(micros(start.elapsed()));
                }
                Ok(samples)
            }
            Cycler::Peer(driver) => {
                // Far more than a cycle takes: the bound is for a driver that hangs.
                let work = Duration::from_millis(100) * n as u32;
                let answer = driver.turn(&format!("cycles {n}"), work).await?;
                peers::check(
                    contender,
                    peers::numbers(&answer, "samples_us").and_then(|samples| {
                        if samples.len() == n {
                            Ok(samples)
                        } else {
                            Err(format!("driver: {} samples for {n} cycles", samples.len()))
                        }
                    }),
                )
            }
        }
    }

    async fn finish(self) {
        if let Cycler::Peer(driver) = self {
            driver.finish().await;
        }
    }
}

/// Scenario 1: for every contender of `contenders`, one task locks and unlocks one free lock
/// of its own, `cycles` times. The contenders take turns in blocks of [`UNCONTENDED_BLOCK`]
/// cycles, in a new order every pass, so that each samples the same seconds: a machine can
/// slip now and then into a state where every cycle takes about twice as long, and a ratio
/// between contenders run one after another would catch it for one and not the other. Each
/// contender's figures go to its row of `scenario`; a peer that cannot run keeps its row, and
/// its figures of this round are left out.
pub async fn uncontended(
    server: &RedisServer,
    contenders: &[Contender],
    cycles: usize,
    scenario: &mut Scenario,
) {
    // An empty server: keys an earlier pass left to expire must not expire during this one.
    let _ = server.try_cmd(&["FLUSHALL", "SYNC"]);
    let url = server.url();
    let mut cyclers = Vec::new();
    for (i, &contender) in contenders.iter().enumerate() {
        // Every contender has its row, in this order, even if it cannot run.
        scenario.figures(contender.name());
        let cycler = Cycler::start(contender, &url, format!("bench:uncontended:{i}")).await;
        cyclers.push(cycler);
    }
    let mut samples = vec![Vec::with_capacity(cycles); cyclers.len()];
    let mut order: Vec<usize> = (0..cyclers.len()).collect();
    let mut seed = 0x9E37_79B9_7F4A_7C15_u64;
    let mut done = 0;
    while done < cycles {
        let block = UNCONTENDED_BLOCK.min(cycles - done);
        shuffle(&mut order, &mut seed);
        for &r in &order {
            let Some(cycler) = &mut cyclers[r] else {
                continue;
            };
            match cycler.cycles(contenders[r], block).await {
                Ok(block_samples) => samples[r].extend(block_samples),
                // Skipped (and said so): its figures of this round are left out.
                Err(_) => cyclers[r] = None,
            }
        }
        done += block;
    }
    for ((&contender, cycler), samples) in contenders.iter().zip(cyclers).zip(samples) {
        let Some(mut cycler) = cycler else {
            continue;
        };
        let out = scenario.figures(contender.name());
        out.add("p50 µs", percentile(&samples, 50.0));
        out.add("p99 µs", percentile(&samples, 99.0));
        out.samples.extend(samples);
        // Requests, commands and keys left, counted apart from the timed cycles (MONITOR
        // slows Redis down), one contender at a time.
        let counted = 200;
        let (keys_before, _) = redis_footprint(server);
        let pass = Pass::start(server, true);
        let ran = cycler.cycles(contender, counted).await;
        let (keys_after, _) = redis_footprint(server);
        if ran.is_err() {
            let _ = pass.finish();
            cycler.finish().await;
            continue;
        }
        out.add(
            "Redis keys + per 1k cycles",
            (keys_after - keys_before) * 1000.0 / counted as f64,
        );
        add_counts(out, pass, counted as u64, "cycle");
        let pass = Pass::start(server, false);
        if cycler.cycles(contender, counted).await.is_ok() {
            add_script_time(out, pass, counted as u64, "cycle");
        } else {
            let _ = pass.finish();
        }
        cycler.finish().await;
    }
}

/// Adds what a counting pass over `ops` operations saw: requests (MONITOR), scripts and
/// commands (`INFO commandstats`), and the per-command breakdown, all per `unit`.
pub fn add_counts(out: &mut Figures, pass: Pass, ops: u64, unit: &str) {
    let (commands, requests) = pass.finish();
    let per = |n: u64| n as f64 / ops.max(1) as f64;
    if let Some(requests) = requests {
        out.add(&format!("requests/{unit}"), per(requests));
    }
    out.add(&format!("scripts/{unit}"), per(commands.scripts()));
    out.add(&format!("commands/{unit}"), per(commands.total()));
    out.text(
        &format!("commands in Redis per {unit}"),
        commands.breakdown(ops),
        &format!("commands/{unit}"),
    );
}

/// Adds the time Redis spent in scripts per `unit` over a pass of `ops` operations, which must
/// run without MONITOR: Redis feeds a monitor each command a script runs inside the script's
/// own time (a lock cycle's scripts take about 4× as long with one open).
pub fn add_script_time(out: &mut Figures, pass: Pass, ops: u64, unit: &str) {
    let (commands, _) = pass.finish();
    out.add_after(
        &format!("commands/{unit}"),
        &format!("script µs in Redis/{unit}"),
        commands.script_usec() as f64 / ops.max(1) as f64,
    );
}

/// Waits `d`, timed by the OS (microseconds) rather than by tokio's timer.
///
/// Tokio's timer rounds a sleep up to whole milliseconds and fires every sleep that ends in
/// one tick together: a 1 ms hold would last 1–2 ms, and a holder's release would land on the
/// very tick a polling waiter of the same process wakes up on, so polling would look instant
/// (between processes it waits half a poll interval on average). A thread of its own sleeps
/// instead and wakes the task through a channel.
pub(crate) async fn os_sleep(d: Duration) {
    let deadline = Instant::now() + d;
    let (over, wait) = tokio::sync::oneshot::channel::<()>();
    let spawned = std::thread::Builder::new()
        .name("bench-hold".to_owned())
        .spawn(move || {
            std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
            let _ = over.send(());
        });
    match spawned {
        Ok(_) => {
            let _ = wait.await;
        }
        // No thread to be had: tokio's timer is the next best.
        Err(_) => tokio::time::sleep_until(deadline.into()).await,
    }
}

/// What the tasks of a contended run record, shared.
#[derive(Default)]
struct Contention {
    held: AtomicBool,
    violations: AtomicU64,
    /// Nanoseconds since `origin` of the last release, 0 before the first.
    last_release: AtomicU64,
    handoffs: Mutex<Vec<f64>>,
}

/// The shape of a contended run.
pub struct Load {
    pub clients: usize,
    pub per_client: usize,
    /// How long each acquisition holds the lock.
    pub hold: Duration,
    pub duration: Duration,
}

/// What one task of a contended run gives back: its locker, its acquisitions, its failures.
type Contended = (Box<dyn Locker>, u64, u64);

/// Spawns one task per locker of a contended run: each takes the lock, holds it for `hold`
/// (recording hand-offs and overlaps in `shared`), lets go, and goes again until `stop`.
/// Each task gives back its locker with its acquisitions and failures.
fn spawn_contending(
    lockers: Vec<Box<dyn Locker>>,
    shared: &Arc<Contention>,
    stop: &Arc<AtomicBool>,
    hold: Duration,
    origin: Instant,
) -> Vec<tokio::task::JoinHandle<Contended>> {
    lockers
        .into_iter()
        .map(|mut locker| {
            let shared = shared.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut count = 0u64;
                let mut failures = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let shared = shared.clone();
                    let section: Section = Box::pin(async move {
                        let now = origin.elapsed().as_nanos() as u64;
                        if shared.held.swap(true, Ordering::SeqCst) {
                            shared.violations.fetch_add(1, Ordering::Relaxed);
                        }
                        let last = shared.last_release.load(Ordering::SeqCst);
                        if last > 0 && now > last {
                            shared
                                .handoffs
                                .lock()
                                .expect("handoffs")
                                .push((now - last) as f64 / 1e3);
                        }
                        os_sleep(hold).await;
                        shared.held.store(false, Ordering::SeqCst);
                        shared
                            .last_release
                            .store(origin.elapsed().as_nanos() as u64, Ordering::SeqCst);
                    });
                    match locker.with_lock(section).await {
                        Ok(()) => count += 1,
                        Err(_) => failures += 1,
                    }
                }
                (locker, count, failures)
            })
        })
        .collect()
}

/// A peer's driver for scenario 2's `load`, on the lock `key`; `None` if it could not start
/// (it is skipped, and said so).
async fn contended_driver(
    contender: Contender,
    url: &str,
    load: &Load,
    key: String,
) -> Option<Driver> {
    let shape = peers::Shape {
        kind: peers::Kind::Contended,
        key,
        clients: load.clients,
        tasks: load.per_client,
        hold: load.hold,
    };
    Driver::start(contender, url, &shape).await.ok()
}

/// The turn that runs a peer's tasks for `duration`.
fn run_turn(duration: Duration) -> String {
    format!("run {}", duration.as_secs_f64())
}

/// Scenario 2, counting requests: `contender`'s `clients × per_client` tasks on one lock,
/// each holding it for `hold`, for `duration`, with MONITOR on (which slows Redis, so this
/// pass reports only requests per acquisition).
pub async fn contended_requests(
    server: &RedisServer,
    contender: Contender,
    load: &Load,
    out: &mut Figures,
) {
    let url = server.url();
    if peers::is_external(contender) {
        let key = "bench:contended".to_owned();
        let Some(mut driver) = contended_driver(contender, &url, load, key).await else {
            return;
        };
        let counter = CommandCounter::start(server);
        let answer = driver.turn(&run_turn(load.duration), load.duration).await;
        let requests = counter.stop(server);
        let counts = answer.and_then(|answer| peers::numbers(&answer, "counts"));
        if let Ok(counts) = peers::check(contender, counts) {
            let total: f64 = counts.iter().sum();
            out.add("requests/acquisition", requests as f64 / total.max(1.0));
        }
        driver.finish().await;
        return;
    }
    let lockers = lockers(contender, &url, load.clients, load.per_client, |_| {
        "bench:contended".to_owned()
    })
    .await;
    let stop = Arc::new(AtomicBool::new(false));
    let counter = CommandCounter::start(server);
    let tasks = spawn_contending(lockers, &Arc::default(), &stop, load.hold, Instant::now());
    tokio::time::sleep(load.duration).await;
    stop.store(true, Ordering::Relaxed);
    let mut total = 0;
    for task in tasks {
        total += task.await.expect("task").1;
    }
    let requests = counter.stop(server);
    out.add(
        "requests/acquisition",
        requests as f64 / (total.max(1)) as f64,
    );
}

/// Scenario 2, timed: for every contender of `contenders`, `clients × per_client` tasks on
/// one lock of its own, each holding it for `hold`, for `duration` in all. The contenders
/// take turns in `slices` slices of the duration, in a new order every pass, so that each
/// runs in the same seconds as the others (see [`uncontended`]). Scripts, commands and
/// PUBLISH come from `INFO commandstats` over each slice, which costs Redis nothing while it
/// runs. Each contender's figures go to its row of `scenario`; a peer that cannot run keeps
/// its row, and its figures of this round are left out.
pub async fn contended(
    server: &RedisServer,
    contenders: &[Contender],
    load: &Load,
    slices: u32,
    scenario: &mut Scenario,
) {
    let url = server.url();
    let mut rigs = Vec::new();
    for (i, &contender) in contenders.iter().enumerate() {
        // Every contender has its row, in this order, even if it cannot run.
        scenario.figures(contender.name());
        let key = format!("bench:contended:{i}");
        let tasks = if peers::is_external(contender) {
            match contended_driver(contender, &url, load, key).await {
                Some(driver) => Tasks::Peer(Box::new(driver)),
                None => continue,
            }
        } else {
            let lockers = lockers(contender, &url, load.clients, load.per_client, |_| {
                key.clone()
            })
            .await;
            Tasks::Local {
                lockers,
                shared: Arc::default(),
            }
        };
        rigs.push(ContendedRig {
            contender,
            tasks,
            counts: vec![0; load.clients * load.per_client],
            failures: 0,
            elapsed: 0.0,
            commands: Commands::default(),
            handoffs: Vec::new(),
            violations: 0,
        });
    }
    let slice = load.duration / slices.max(1);
    let origin = Instant::now();
    let mut order: Vec<usize> = (0..rigs.len()).collect();
    let mut seed = 0x2545_F491_4F6C_DD1D_u64;
    for _ in 0..slices.max(1) {
        shuffle(&mut order, &mut seed);
        for &r in &order {
            rigs[r].slice(server, load.hold, slice, origin).await;
        }
    }
    for rig in rigs {
        let name = rig.contender.name();
        rig.finish(scenario.figures(name)).await;
    }
}

/// Whose tasks a contended rig runs.
enum Tasks {
    /// Tasks of this process: their lockers between slices, and what they record together.
    Local {
        lockers: Vec<Box<dyn Locker>>,
        shared: Arc<Contention>,
    },
    /// A peer's driver, which runs its tasks itself.
    Peer(Box<Driver>),
    /// A peer that failed in this round: skipped, its figures left out.
    Gone,
}

/// What a peer's driver reports of one slice.
struct PeerSlice {
    counts: Vec<f64>,
    handoffs: Vec<f64>,
    violations: f64,
    failures: f64,
    elapsed: f64,
}

impl PeerSlice {
    /// Reads a driver's answer to a slice of `tasks` tasks.
    fn read(answer: &serde_json::Value, tasks: usize) -> Result<PeerSlice, String> {
        let counts = peers::numbers(answer, "counts")?;
        if counts.len() != tasks {
            return Err(format!("driver: {} counts for {tasks} tasks", counts.len()));
        }
        Ok(PeerSlice {
            counts,
            handoffs: peers::numbers(answer, "handoffs_us")?,
            violations: peers::number(answer, "violations")?,
            failures: peers::number(answer, "failures")?,
            elapsed: peers::number(answer, "elapsed_s")?,
        })
    }
}

/// One contender's tasks of a contended run taken in slices, and what they added up to.
struct ContendedRig {
    contender: Contender,
    tasks: Tasks,
    /// Acquisitions per task, over every slice.
    counts: Vec<u64>,
    failures: u64,
    /// Seconds, over every slice.
    elapsed: f64,
    commands: Commands,
    /// Hand-offs (µs) and exclusion violations, over every slice.
    handoffs: Vec<f64>,
    violations: u64,
}

impl ContendedRig {
    /// Runs the tasks for `duration`, then until each has let go.
    async fn slice(
        &mut self,
        server: &RedisServer,
        hold: Duration,
        duration: Duration,
        origin: Instant,
    ) {
        if matches!(self.tasks, Tasks::Gone) {
            return;
        }
        let pass = Pass::start(server, false);
        match &mut self.tasks {
            Tasks::Local { lockers, shared } => {
                // A hand-off from the last release of the previous slice would span the other
                // contenders' turns.
                shared.last_release.store(0, Ordering::SeqCst);
                let stop = Arc::new(AtomicBool::new(false));
                let tasks = spawn_contending(std::mem::take(lockers), shared, &stop, hold, origin);
                let started = Instant::now();
                tokio::time::sleep(duration).await;
                stop.store(true, Ordering::Relaxed);
                for (i, task) in tasks.into_iter().enumerate() {
                    let (locker, count, failures) = task.await.expect("task");
                    lockers.push(locker);
                    self.counts[i] += count;
                    self.failures += failures;
                }
                self.elapsed += started.elapsed().as_secs_f64();
                self.handoffs
                    .append(&mut shared.handoffs.lock().expect("handoffs"));
                self.violations += shared.violations.swap(0, Ordering::Relaxed);
            }
            Tasks::Peer(driver) => {
                // The driver starts each slice afresh, as above: no hand-off spans two slices.
                let answer = driver.turn(&run_turn(duration), duration).await;
                let tasks = self.counts.len();
                let read = answer.and_then(|answer| PeerSlice::read(&answer, tasks));
                match peers::check(self.contender, read) {
                    Ok(slice) => {
                        for (total, count) in self.counts.iter_mut().zip(&slice.counts) {
                            *total += *count as u64;
                        }
                        self.failures += slice.failures as u64;
                        self.elapsed += slice.elapsed;
                        self.handoffs.extend(slice.handoffs);
                        self.violations += slice.violations as u64;
                    }
                    Err(_) => self.tasks = Tasks::Gone,
                }
            }
            Tasks::Gone => {}
        }
        let (commands, _) = pass.finish();
        self.commands.merge(commands);
    }

    async fn finish(self, out: &mut Figures) {
        match self.tasks {
            Tasks::Gone => return,
            Tasks::Peer(driver) => driver.finish().await,
            Tasks::Local { .. } => {}
        }
        let total: u64 = self.counts.iter().sum();
        let handoffs = self.handoffs;
        let min = *self.counts.iter().min().unwrap_or(&0) as f64;
        let max = *self.counts.iter().max().unwrap_or(&0) as f64;
        out.add(
            "acquisitions/s",
            total as f64 / self.elapsed.max(f64::EPSILON),
        );
        out.add("handoff p50 µs", percentile(&handoffs, 50.0));
        out.add("handoff p99 µs", percentile(&handoffs, 99.0));
        out.add("min/task", min);
        out.add("max/task", max);
        out.add("min/max", if max > 0.0 { min / max } else { 0.0 });
        out.add("failed acquires", self.failures as f64);
        out.add("exclusion violations", self.violations as f64);
        let mut sorted: Vec<f64> = self.counts.iter().map(|&c| c as f64).collect();
        sorted.sort_by(f64::total_cmp);
        out.series.push(sorted);
        let per = |n: u64| n as f64 / total.max(1) as f64;
        out.add("scripts/acquisition", per(self.commands.scripts()));
        out.add("commands/acquisition", per(self.commands.total()));
        // Every acquisition is released once, so this is also PUBLISH per release.
        out.add("PUBLISH/release", per(self.commands.get("publish")));
        out.text(
            "commands in Redis per acquisition",
            self.commands.breakdown(total),
            "commands/acquisition",
        );
    }
}

/// Scenario 2b: hand-off with one waiter, for every contender of `contenders` in one round.
/// Per contender two clients, one task each; `a` takes the free lock and holds it 50 ms, `b`
/// starts waiting as soon as `a` holds it. Measured: from `a` starting its release to `b`'s
/// acquire returning, `handoffs` times. The contenders take turns hand-off by hand-off, so
/// that a ratio between two of them compares samples taken in the same seconds, not in runs
/// tens of seconds apart on a machine whose speed drifts. Each contender's figures go to
/// its row of `scenario`.
pub async fn handoff(
    server: &RedisServer,
    contenders: &[Contender],
    handoffs: usize,
    scenario: &mut Scenario,
) {
    let mut rigs = Vec::new();
    for (i, &contender) in contenders.iter().enumerate() {
        // Every contender has its row, in this order, even if it cannot run.
        scenario.figures(contender.name());
        // A lock of its own: no contender finds another's key.
        if let Some(rig) = HandoffRig::start(server, contender, format!("bench:handoff:{i}")).await
        {
            rigs.push(rig);
        }
    }
    let warm_up = 2;
    let mut order: Vec<usize> = (0..rigs.len()).collect();
    let mut seed = 0x2545_F491_4F6C_DD1D_u64;
    for i in 0..warm_up + handoffs {
        // A new order every pass: no contender always follows the same one, so whatever a rig
        // leaves behind after its turn falls on everyone alike.
        shuffle(&mut order, &mut seed);
        for &r in &order {
            rigs[r].one(i >= warm_up).await;
        }
    }
    for rig in rigs {
        let name = rig.contender.name();
        rig.finish(scenario.figures(name)).await;
    }
}

/// How long the holder of scenario 2b holds the lock, before a pseudo-random 0–1000 µs more.
const HANDOFF_HOLD: Duration = Duration::from_millis(50);

/// One contender's two clients of scenario 2b, ready to hand the lock over on demand.
struct HandoffRig {
    contender: Contender,
    side: Side,
    samples: Vec<f64>,
    failures: u64,
    early: u64,
}

/// Who hands the lock over in a rig of scenario 2b.
enum Side {
    Local(LocalHandoff),
    /// A peer's driver, which runs both clients and times the hand-off itself; `None` once
    /// it failed (it is skipped, and its figures of this round left out).
    Peer(Option<Box<Driver>>),
}

/// What one hand-off came to.
enum Outcome {
    /// Microseconds from the release's start to the waiter holding the lock.
    Handoff(f64),
    /// The waiter held the lock before the holder let go.
    Early,
    /// The waiter gave up.
    Failed,
    /// The rig cannot go on.
    Gone,
}

/// The two tasks of a rig of this process.
struct LocalHandoff {
    /// Nanoseconds since `origin`: when `a` started releasing, when `b` held the lock.
    released: Arc<AtomicU64>,
    acquired: Arc<AtomicU64>,
    go_a: tokio::sync::mpsc::Sender<()>,
    /// The holder let go (its hold's release returned).
    a_done: tokio::sync::mpsc::Receiver<()>,
    /// The waiter got the lock (or gave up: `false`) and let go.
    done: tokio::sync::mpsc::Receiver<bool>,
    holder: tokio::task::JoinHandle<()>,
    waiter: tokio::task::JoinHandle<()>,
}

impl HandoffRig {
    async fn start(server: &RedisServer, contender: Contender, key: String) -> Option<Self> {
        let url = server.url();
        let side = if peers::is_external(contender) {
            let shape = peers::Shape {
                kind: peers::Kind::Handoff,
                key,
                clients: 2,
                tasks: 1,
                hold: HANDOFF_HOLD,
            };
            Side::Peer(Some(Box::new(
                Driver::start(contender, &url, &shape).await.ok()?,
            )))
        } else {
            Side::Local(LocalHandoff::start(&url, contender, key).await?)
        };
        Some(HandoffRig {
            contender,
            side,
            samples: Vec::new(),
            failures: 0,
            early: 0,
        })
    }

    /// One hand-off; its time is a sample if `counted`.
    async fn one(&mut self, counted: bool) {
        let outcome = match &mut self.side {
            Side::Local(local) => local.one().await,
            Side::Peer(slot) => match slot {
                Some(driver) => {
                    let outcome = peer_handoff(self.contender, driver).await;
                    if matches!(outcome, Outcome::Gone) {
                        *slot = None;
                    }
                    outcome
                }
                None => Outcome::Gone,
            },
        };
        match outcome {
            Outcome::Gone => {}
            Outcome::Failed => self.failures += 1,
            Outcome::Early if counted => self.early += 1,
            Outcome::Handoff(us) if counted => self.samples.push(us),
            Outcome::Early | Outcome::Handoff(_) => {}
        }
    }

    async fn finish(self, out: &mut Figures) {
        match self.side {
            Side::Local(local) => local.finish().await,
            Side::Peer(Some(driver)) => driver.finish().await,
            // Skipped in this round: no figures.
            Side::Peer(None) => return,
        }
        out.add("handoff p50 µs", percentile(&self.samples, 50.0));
        out.add("handoff p99 µs", percentile(&self.samples, 99.0));
        out.add("hand-offs", self.samples.len() as f64);
        out.add("taken before the release", self.early as f64);
        out.add("failed acquires", self.failures as f64);
        out.samples.extend(self.samples);
    }
}

/// One hand-off of a peer's driver.
async fn peer_handoff(contender: Contender, driver: &mut Driver) -> Outcome {
    // The hold, and as long again for the waiter: the bound is for a driver that hangs.
    let Ok(answer) = driver.turn("handoff", HANDOFF_HOLD * 2).await else {
        return Outcome::Gone;
    };
    if peers::flag(&answer, "failed") {
        return Outcome::Failed;
    }
    if peers::flag(&answer, "early") {
        return Outcome::Early;
    }
    match peers::check(contender, peers::number(&answer, "handoff_us")) {
        Ok(us) => Outcome::Handoff(us),
        Err(_) => Outcome::Gone,
    }
}

impl LocalHandoff {
    async fn start(url: &str, contender: Contender, key: String) -> Option<Self> {
        let mut both = lockers(contender, url, 2, 1, |_| key.clone()).await;
        let (Some(mut b), Some(mut a)) = (both.pop(), both.pop()) else {
            return None;
        };
        let origin = Instant::now();
        let released = Arc::new(AtomicU64::new(0));
        let acquired = Arc::new(AtomicU64::new(0));
        let (go_a, mut a_go) = tokio::sync::mpsc::channel::<()>(1);
        let (a_holds, mut b_go) = tokio::sync::mpsc::channel::<()>(1);
        let (b_done, done) = tokio::sync::mpsc::channel::<bool>(1);
        let (holder_done, a_done) = tokio::sync::mpsc::channel::<()>(1);
        let holder = {
            let released = released.clone();
            tokio::spawn(async move {
                let mut seed = 0x9E37_79B9_7F4A_7C15_u64;
                while a_go.recv().await.is_some() {
                    let held = Arc::new(AtomicBool::new(false));
                    // The hold is timed by the OS (see `os_sleep`) and lasts a pseudo-random
                    // 0–1000 µs more (xorshift), so that the release falls anywhere between a
                    // polling waiter's ticks, as it does between processes.
                    let hold = HANDOFF_HOLD + Duration::from_micros(xorshift(&mut seed) % 1000);
                    // A take that failed before holding (a peer giving up after its tries) is
                    // tried again: the waiter waits for this hold.
                    while !held.load(Ordering::SeqCst) {
                        let (released, a_holds, held) =
                            (released.clone(), a_holds.clone(), held.clone());
                        let section: Section = Box::pin(async move {
                            held.store(true, Ordering::SeqCst);
                            let _ = a_holds.send(()).await;
                            os_sleep(hold).await;
                            released.store(origin.elapsed().as_nanos() as u64, Ordering::SeqCst);
                        });
                        let _ = a.with_lock(section).await;
                    }
                    if holder_done.send(()).await.is_err() {
                        return;
                    }
                }
            })
        };
        let waiter = {
            let acquired = acquired.clone();
            tokio::spawn(async move {
                while b_go.recv().await.is_some() {
                    let mut ok = false;
                    for _ in 0..100 {
                        let acquired = acquired.clone();
                        let section: Section = Box::pin(async move {
                            acquired.store(origin.elapsed().as_nanos() as u64, Ordering::SeqCst);
                        });
                        if b.with_lock(section).await.is_ok() {
                            ok = true;
                            break;
                        }
                    }
                    if b_done.send(ok).await.is_err() {
                        return;
                    }
                }
            })
        };
        Some(LocalHandoff {
            released,
            acquired,
            go_a,
            a_done,
            done,
            holder,
            waiter,
        })
    }

    async fn one(&mut self) -> Outcome {
        if self.go_a.send(()).await.is_err() {
            return Outcome::Gone;
        }
        let taken = self.done.recv().await;
        // Both have let go before the next rig's turn, and `released` is this hold's.
        if self.a_done.recv().await.is_none() {
            return Outcome::Gone;
        }
        match taken {
            Some(true) => {}
            Some(false) => return Outcome::Failed,
            None => return Outcome::Gone,
        }
        let (r, q) = (
            self.released.load(Ordering::SeqCst),
            self.acquired.load(Ordering::SeqCst),
        );
        if q < r {
            // The waiter held the lock before the holder let go: a lease shorter than the
            // hold (redis-lock's default 10 ms lease) ran out.
            Outcome::Early
        } else {
            Outcome::Handoff((q - r) as f64 / 1e3)
        }
    }

    async fn finish(self) {
        drop(self.go_a);
        drop(self.a_done);
        let _ = self.holder.await;
        drop(self.done);
        let _ = self.waiter.await;
    }
}

/// Redis's key count and memory, for what a run leaves in Redis.
pub fn redis_footprint(server: &RedisServer) -> (f64, f64) {
    let keys = match server.try_cmd(&["DBSIZE"]) {
        Ok(redis::Value::Int(n)) => n as f64,
        _ => f64::NAN,
    };
    let memory = server
        .info_field("memory", "used_memory")
        .and_then(|m| m.parse::<f64>().ok())
        .unwrap_or(f64::NAN);
    (keys, memory)
}

/// Scenario 3: `tasks` tasks, each on a lock of its own, for `duration`; with what the run
/// leaves in Redis (keys and memory at the end of the run, minus before it).
pub async fn many_locks(
    server: &RedisServer,
    contender: Contender,
    tasks: usize,
    duration: Duration,
    out: &mut Figures,
) {
    // Start from an empty server, so that keys an earlier contender left to expire do not
    // expire during this run and hide what this one adds.
    let _ = server.try_cmd(&["FLUSHALL", "SYNC"]);
    let url = server.url();
    if peers::is_external(contender) {
        many_locks_peer(server, contender, tasks, duration, out).await;
        return;
    }
    let lockers = lockers(contender, &url, 1, tasks, |i| format!("bench:many:{i}")).await;
    let (keys_before, memory_before) = redis_footprint(server);
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = lockers
        .into_iter()
        .map(|mut locker| {
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut count = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    if locker.with_lock(Box::pin(async {})).await.is_ok() {
                        count += 1;
                    }
                }
                count
            })
        })
        .collect();
    let started = Instant::now();
    tokio::time::sleep(duration).await;
    stop.store(true, Ordering::Relaxed);
    let mut total = 0;
    for handle in handles {
        total += handle.await.expect("task");
    }
    let elapsed = started.elapsed().as_secs_f64();
    let (keys_after, memory_after) = redis_footprint(server);
    add_many_locks(
        out,
        total as f64,
        elapsed,
        (keys_after - keys_before, memory_after - memory_before),
    );
}

/// Scenario 3's figures: `total` cycles over `elapsed` seconds, which left `footprint` (keys
/// and bytes) in Redis.
fn add_many_locks(out: &mut Figures, total: f64, elapsed: f64, footprint: (f64, f64)) {
    let (keys, memory) = footprint;
    out.add("acquisitions/s", total / elapsed.max(f64::EPSILON));
    out.add("Redis keys +", keys);
    out.add("Redis keys + per 1k cycles", keys * 1000.0 / total.max(1.0));
    out.add("Redis used_memory + MiB", memory / (1024.0 * 1024.0));
}

/// Scenario 3 for a peer's driver, as [`many_locks`] does it in this process: the footprint is
/// taken once the driver has connected, as it is once the lockers here have.
async fn many_locks_peer(
    server: &RedisServer,
    contender: Contender,
    tasks: usize,
    duration: Duration,
    out: &mut Figures,
) {
    let shape = peers::Shape {
        kind: peers::Kind::Many,
        key: "bench:many".to_owned(),
        clients: 1,
        tasks,
        hold: Duration::ZERO,
    };
    let Ok(mut driver) = Driver::start(contender, &server.url(), &shape).await else {
        return;
    };
    let (keys_before, memory_before) = redis_footprint(server);
    let answer = driver.turn(&run_turn(duration), duration).await;
    let (keys_after, memory_after) = redis_footprint(server);
    let read = answer.and_then(|answer| {
        let counts = peers::numbers(&answer, "counts")?;
        if counts.len() != tasks {
            return Err(format!("driver: {} counts for {tasks} tasks", counts.len()));
        }
        Ok((
            counts.iter().sum::<f64>(),
            peers::number(&answer, "elapsed_s")?,
        ))
    });
    if let Ok((total, elapsed)) = peers::check(contender, read) {
        add_many_locks(
            out,
            total,
            elapsed,
            (keys_after - keys_before, memory_after - memory_before),
        );
    }
    driver.finish().await;
}

/// `n` multiplexed redis-rs connections to `server`, for the floors and ceilings that talk to
/// Redis without redisync (as many as a redisync client's pool, to compare like with like).
pub async fn raw_connections(server: &RedisServer, n: usize) -> Vec<redis::aio::ConnectionManager> {
    let client = redis::Client::open(server.url()).expect("url");
    let mut pool = Vec::with_capacity(n);
    for _ in 0..n {
        pool.push(client.get_connection_manager().await.expect("connect"));
    }
    pool
}

/// The EVALSHA ceiling: `tasks` tasks sending a trivial script over `connections`
/// multiplexed connections (as many as a redisync client's pool) for `duration`.
pub async fn evalsha_ceiling(
    server: &RedisServer,
    tasks: usize,
    connections: usize,
    duration: Duration,
    out: &mut Figures,
) {
    let pool = raw_connections(server, connections).await;
    let script = redis::Script::new("return 1");
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..tasks)
        .map(|i| {
            let mut conn = pool[i % pool.len()].clone();
            let script = script.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut count = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    if script.invoke_async::<_, i64>(&mut conn).await.is_ok() {
                        count += 1;
                    }
                }
                count
            })
        })
        .collect();
    let started = Instant::now();
    tokio::time::sleep(duration).await;
    stop.store(true, Ordering::Relaxed);
    let mut total = 0;
    for handle in handles {
        total += handle.await.expect("task");
    }
    out.add("EVALSHA/s", total as f64 / started.elapsed().as_secs_f64());
}

/// Scenario 4: `locks` locks held under the watchdog; Redis commands per renewal period.
pub async fn watchdog_scale(server: &RedisServer, locks: usize, out: &mut Figures) {
    let watchdog = Duration::from_secs(3);
    let client = Client::builder(server.url())
        .watchdog_timeout(watchdog)
        .build()
        .await
        .expect("connect");
    let started = Instant::now();
    let mut guards = Vec::with_capacity(locks);
    for chunk in (0..locks).collect::<Vec<_>>().chunks(500) {
        let acquired = futures_util::future::join_all(
            chunk
                .iter()
                .map(|i| client.lock(format!("bench:watchdog:{i}")))
                .map(|lock| async move { lock.lock().await }),
        )
        .await;
        for guard in acquired {
            guards.push(guard.expect("lock"));
        }
    }
    out.add("time to acquire all, s", started.elapsed().as_secs_f64());
    // Let renewal settle into its rhythm, then count over whole periods.
    let period = watchdog / 3;
    tokio::time::sleep(period).await;
    let periods = 3u32;
    let counter = CommandCounter::start(server);
    let renewals_before = client.stats().renewals;
    tokio::time::sleep(period * periods).await;
    let commands = counter.stop(server) as f64 / f64::from(periods);
    let renewed = (client.stats().renewals - renewals_before) as f64 / f64::from(periods);
    out.add("held locks", locks as f64);
    out.add("renewals/period", renewed);
    out.add("requests/period", commands);
    out.add(
        "requests per 100 locks per period",
        commands * 100.0 / locks as f64,
    );
    let lost = guards.iter().filter(|g| g.is_lost()).count();
    out.add("lost", lost as f64);
    drop(guards);
    client.shutdown().await;
}
