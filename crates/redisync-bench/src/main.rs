//! The redisync benchmark.
//!
//! Starts its own `redis-server`, runs every scenario for every contender in one run
//! (contenders interleaved, several rounds, medians reported), prints markdown tables and
//! writes the same figures as JSON.
//!
//! ```sh
//! cargo run --release -p redisync-bench                 # full run, about 6 minutes
//! cargo run --release -p redisync-bench -- --quick      # one short round, to try it out
//! cargo run --release -p redisync-bench -- --only 1 --rounds 21   # scenario 1, 21 rounds
//! cargo run --release -p redisync-bench -- --json out.json --charts docs/benchmarks
//! cargo run --release -p redisync-bench -- --compare before.json   # before/after table
//! cargo run --release -p redisync-bench -- --server-bin ~/.cache/redisync/servers/valkey-8.1/valkey-server
//! ```
//!
//! The server is `redis-server` from `PATH` (or `REDIS_SERVER_BIN`) unless `--server-bin`
//! names another binary; `scripts/servers.sh` installs Redis 8.2 and Valkey 8.1.
//!
//! The peers in other languages (redis-semaphore on Node.js, python-redis-lock on Python) run
//! as driver processes; `scripts/bench-peers.sh` installs them. A peer that is not installed
//! is skipped with one line saying why, and its rows show "–".

mod charts;
mod commands;
mod compare;
mod floor_scripts;
mod headline;
mod lockers;
mod monitor;
mod peers;
mod primitives;
mod ratelimit;
mod raw_scripts;
mod report;
mod scenarios;

use std::time::{Duration, Instant};

use lockers::Contender;
use primitives::Op;
use redisync_test_harness::RedisServer;
use report::Scenario;

/// Counts the heap while scenario 6 asks it to; otherwise the system allocator as it is.
#[global_allocator]
static ALLOCATOR: redisync_test_harness::heap::Counting = redisync_test_harness::heap::Counting;

const USAGE: &str = "usage: redisync-bench [--quick] [--rounds N] [--json PATH] \
                     [--charts DIR | --no-charts] [--compare OLD.json] [--only SCENARIO]... \
                     [--server-bin PATH]";

struct Settings {
    rounds: usize,
    cycles: usize,
    run: Duration,
    /// Hand-offs measured per contender and round in scenario 2b.
    handoffs: usize,
    json: String,
    /// Where the SVG charts go; `None` draws none.
    charts: Option<String>,
    /// An older run's JSON to compare the headline figures with.
    compare: Option<String>,
    /// Run only the scenarios whose numbers start with one of these ("1", "5c").
    only: Vec<String>,
    /// The server binary to run instead of `redis-server` from `PATH`.
    server_bin: Option<std::path::PathBuf>,
}

impl Settings {
    fn wants(&self, number: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|o| number.starts_with(o.as_str()))
    }
}

fn settings() -> Result<Settings, String> {
    let mut settings = Settings {
        rounds: 3,
        cycles: 2000,
        run: Duration::from_secs(3),
        handoffs: 40,
        json: "target/bench.json".to_owned(),
        charts: Some("docs/benchmarks".to_owned()),
        compare: None,
        only: Vec::new(),
        server_bin: None,
    };
    // Applied after the loop, so that it wins over `--quick` wherever it stands.
    let mut rounds = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => {
                settings.rounds = 1;
                settings.cycles = 300;
                settings.run = Duration::from_secs(1);
                settings.handoffs = 10;
            }
            "--rounds" => {
                rounds = Some(
                    args.next()
                        .and_then(|n| n.parse().ok())
                        .filter(|&n| n > 0)
                        .ok_or("--rounds needs a number of rounds, at least 1")?,
                );
            }
            "--json" => settings.json = args.next().ok_or("--json needs a path")?,
            "--charts" => {
                settings.charts = Some(args.next().ok_or("--charts needs a directory")?);
            }
            "--no-charts" => settings.charts = None,
            "--compare" => {
                settings.compare = Some(args.next().ok_or("--compare needs a JSON file")?);
            }
            "--only" => settings
                .only
                .push(args.next().ok_or("--only needs a scenario number")?),
            "--server-bin" => {
                let bin = std::path::PathBuf::from(
                    args.next()
                        .ok_or("--server-bin needs the path of a server binary")?,
                );
                if !bin.is_file() {
                    return Err(format!("--server-bin {}: no such file", bin.display()));
                }
                settings.server_bin = Some(bin);
            }
            "--help" | "-h" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown argument {other:?}; try --help")),
        }
    }
    if let Some(rounds) = rounds {
        settings.rounds = rounds;
    }
    Ok(settings)
}

fn machine(server: &RedisServer) -> Vec<(String, String)> {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|m| m.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .next()
                .map(|l| l.split_whitespace().nth(1).unwrap_or("0").to_owned())
        })
        .and_then(|kib| kib.parse::<u64>().ok())
        .map_or("unknown".to_owned(), |kib| {
            format!("{} GiB", kib / 1024 / 1024)
        });
    vec![
        ("cpu".to_owned(), cpu),
        ("cores".to_owned(), cores.to_string()),
        ("memory".to_owned(), memory),
        ("server".to_owned(), server.version()),
        ("os".to_owned(), std::env::consts::OS.to_owned()),
    ]
}

/// Reads and parses the `--compare` file before anything is measured, so that a wrong path
/// costs seconds, not a whole run.
fn read_compare(path: &str) -> Result<serde_json::Value, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("--compare {path}: {e}"))?;
    serde_json::from_str(&text).map_err(|e| format!("--compare {path}: not JSON: {e}"))
}

/// `order` rotated by `round`: contenders take turns going first, so that no one always runs
/// on a cold or a hot machine.
fn turn<T: Copy>(order: &[T], round: usize) -> Vec<T> {
    let mut order = order.to_vec();
    if !order.is_empty() {
        let by = round % order.len();
        order.rotate_left(by);
    }
    order
}

/// Slices of scenario 2's run per contender and round: the contenders take turns slice by
/// slice.
const CONTENDED_SLICES: u32 = 3;

#[tokio::main]
async fn main() {
    let (settings, old) = match settings().and_then(|s| {
        let old = s.compare.as_deref().map(read_compare).transpose()?;
        Ok((s, old))
    }) {
        Ok(parsed) => parsed,
        Err(message) => {
            eprintln!("{message}");
            std::process::exit(2);
        }
    };
    let started = Instant::now();
    let server = match &settings.server_bin {
        Some(bin) => RedisServer::start_binary(bin, &[]),
        None => RedisServer::start(),
    };
    let machine = machine(&server);
    // Warm up the machine and the server before anything is measured: the first seconds of
    // a run are slower (CPU frequency, allocator, Redis's own caches).
    eprintln!("warming up");
    let mut warm_up = report::Figures::default();
    scenarios::many_locks(
        &server,
        Contender::Floor,
        64,
        Duration::from_secs(2),
        &mut warm_up,
    )
    .await;
    let mut all: Vec<Scenario> = Vec::new();

    let mut uncontended = Scenario::new(
        "uncontended",
        "1. Uncontended lock + unlock",
        "One task, one free lock; per cycle. p50 vs floor: this p50 ÷ the floor's, in the same \
         round. Requests: commands the client sent (MONITOR). Scripts and commands: `INFO \
         commandstats` over the same 200 counted cycles, after `CONFIG RESETSTAT`; commands \
         include the ones scripts ran inside Redis, and the last column lists them per cycle. \
         The counted cycles are a pass of their own, apart from the timed ones, and Redis \
         keys + is `DBSIZE` after them minus before. Script µs in Redis: the time Redis spent \
         running scripts (`usec` of `EVALSHA` and its kin, their commands included; a command \
         a client sends directly, such as the floor's `SET`, is not in it), over 200 more \
         cycles without MONITOR, one contender after another rather than in turns. The timed \
         cycles: the contenders take turns in blocks of 100 cycles, each on a lock of its own. \
         redis-semaphore (Node.js) and python-redis-lock (Python) run in a driver process of \
         their own, which times each cycle itself and takes its turns with the others.",
    );
    let mut ops = Scenario::new(
        "primitive-ops",
        "1b. Every primitive: one uncontended operation cycle",
        "One task, one client, a free primitive; columns as in 1. The latch cycle arms the \
         latch and opens it again (count 1, one count-down); the semaphores have 1,000 \
         permits; the watchdog keeps the read, write and expirable holds. The election's \
         cycle is a campaign that wins at once and its resignation; a rate limiter's \
         \"cycle\" is one `try_acquire(1)`, on a limiter that allows every decision or on \
         one that refuses every one (a decision leaves nothing to give back).",
    );
    let mut contended = Scenario::new(
        "contended",
        "2. Contended: 4 clients × 4 tasks on one lock, 1 ms hold",
        "The 1 ms hold is timed by the OS, not by tokio's millisecond timer (see \
         BENCHMARKS.md). Handoff: from the holder starting its release to the next holder's \
         acquire returning. Min/max: acquisitions of the least and the most lucky task, and their \
         ratio (1 is perfectly fair). Violations: two holders at once (must be 0). Scripts, \
         commands and PUBLISH: `INFO commandstats` over the timed run (every acquisition is \
         released once, so PUBLISH/release = PUBLISH per acquisition). Requests include every \
         retry and subscription command, counted with MONITOR in a 1 s pass of their own. \
         The contenders take turns in three slices of the run, each on a lock of its own. \
         redis-semaphore's tasks are async functions of one Node.js process, with one ioredis \
         connection per client; python-redis-lock's are threads of one Python process, with \
         one redis-py client per client, since the library is synchronous; their drivers time \
         the holds and hand-offs themselves. distributed-lock-redis does not wait for a held \
         lock: its tasks try again every 1 ms.",
    );
    let mut handoff = Scenario::new(
        "handoff",
        "2b. Hand-off with one waiter: 2 clients, 50 ms hold",
        "One task per client: one takes the free lock and holds it 50–51 ms (see \
         BENCHMARKS.md), the other starts \
         waiting as soon as it is held. Hand-off: from the holder starting its release to \
         the waiter's acquire returning. The contenders take turns hand-off by hand-off, \
         each on a lock of its own. p50 vs pub/sub floor: this p50 ÷ the pub/sub \
         floor's, in the same round. Taken before the release: the waiter got the lock \
         while the holder still ran its 50 ms (a lease shorter than the hold ran out). \
         redis-semaphore and python-redis-lock run both clients in their driver process and \
         time the hand-off there.",
    );
    let mut many = Scenario::new(
        "many-locks",
        "3. Many locks: 64 tasks, each on its own lock",
        "Lock + unlock cycles per second of one client; vs floor: ÷ the floor's, in the same \
         round. The EVALSHA ceiling is a trivial script over 4 multiplexed connections \
         (redisync's default pool), measured in the same run. Redis keys + and used_memory +: \
         `DBSIZE` and `INFO memory` at the end of the run minus before it (the server is \
         flushed before each run): what the library leaves in Redis at that throughput. \
         redis-semaphore runs 64 async functions over one ioredis connection; \
         python-redis-lock 64 threads over one redis-py client, whose pool holds a connection \
         per thread.",
    );
    for round in 0..settings.rounds {
        eprintln!("round {}/{}", round + 1, settings.rounds);
        if settings.wants("1") {
            eprintln!("  uncontended: every contender, taking turns");
            scenarios::uncontended(
                &server,
                &turn(&Contender::LOCKS, round),
                settings.cycles,
                &mut uncontended,
            )
            .await;
        }
        for op in turn(&Op::ALL, round)
            .into_iter()
            .filter(|_| settings.wants("1b"))
        {
            let name = op.name();
            eprintln!("  operation: {name}");
            primitives::op_cycles(&server, op, settings.cycles / 2, round, ops.figures(&name))
                .await;
        }
        if settings.wants("2") {
            let load = |duration| scenarios::Load {
                clients: 4,
                per_client: 4,
                hold: Duration::from_millis(1),
                duration,
            };
            eprintln!("  contended: every contender, taking turns");
            scenarios::contended(
                &server,
                &turn(&Contender::CONTENDED, round),
                &load(settings.run),
                CONTENDED_SLICES,
                &mut contended,
            )
            .await;
            for contender in turn(&Contender::CONTENDED, round) {
                eprintln!("  contended (counting requests): {}", contender.name());
                scenarios::contended_requests(
                    &server,
                    contender,
                    &load(settings.run.min(Duration::from_secs(1))),
                    contended.figures(contender.name()),
                )
                .await;
            }
        }
        if settings.wants("2b") {
            eprintln!("  hand-off: every contender, taking turns");
            scenarios::handoff(
                &server,
                &turn(&Contender::HANDOFF, round),
                settings.handoffs,
                &mut handoff,
            )
            .await;
        }
        let many_contenders: Vec<Contender> = Contender::LOCKS
            .into_iter()
            // One waiter per lock: nothing to be fair about.
            .filter(|&c| c != Contender::RedisyncFair)
            .collect();
        for contender in turn(&many_contenders, round)
            .into_iter()
            .filter(|_| settings.wants("3"))
        {
            eprintln!("  many locks: {}", contender.name());
            scenarios::many_locks(
                &server,
                contender,
                64,
                settings.run,
                many.figures(contender.name()),
            )
            .await;
        }
        if settings.wants("3") {
            scenarios::evalsha_ceiling(
                &server,
                64,
                4,
                settings.run,
                many.figures("EVALSHA ceiling"),
            )
            .await;
        }
    }
    uncontended.ratio_to_own("p50 µs", Contender::Floor.name(), "p50 vs floor");
    raw_scripts::check_bare_commands(&uncontended);
    contended.ratio_to_own(
        "acquisitions/s",
        Contender::PollingFloor.name(),
        "vs polling floor",
    );
    handoff.ratio_to_own(
        "handoff p50 µs",
        Contender::PubSubFloor.name(),
        "p50 vs pub/sub floor",
    );
    many.ratio_to_own("acquisitions/s", Contender::Floor.name(), "vs floor");
    all.extend([uncontended, ops, contended, handoff, many]);

    eprintln!("watchdog scale");
    let mut watchdog = Scenario::new(
        "watchdog",
        "4. Watchdog: 10,000 locks held",
        "Watchdog timeout 3 s, so one renewal period is 1 s; requests counted with MONITOR over 3 periods.",
    );
    if settings.wants("4") {
        scenarios::watchdog_scale(&server, 10_000, watchdog.figures("redisync")).await;
    }

    let mut rw = Scenario::new(
        "rwlock-read-heavy",
        "5a. Read-write lock, read-heavy: 64 readers and 1 writer over 4 clients",
        "Readers hold 1 ms; the writer holds 1 ms and pauses 10 ms between writes (writer \
         preference on, the default).",
    );
    let mut sem = Scenario::new(
        "semaphore",
        "5b. Semaphore: 32 tasks over 4 clients, 4 permits, 1 ms hold",
        "",
    );
    let mut latch = Scenario::new(
        "latch",
        "5c. Count-down latch: 100 waiters over 4 clients",
        "From the last count_down returning to the waiters returning.",
    );
    let mut cache = Scenario::new(
        "read-cache",
        "5d. Read-heavy cache: 64 tasks of one client on one read-write lock",
        "Each task loops `read().await` + `unlock()` on one `ReadWriteLock` handle of one \
         client, holding nothing in between. vs floor many-locks cycles/s: reads/s ÷ the \
         floor's lock cycles/s of scenario 3 in the same round (both are the most a client can \
         do with the lock it needs).",
    );
    for round in 0..settings.rounds {
        eprintln!("primitives round {}/{}", round + 1, settings.rounds);
        if settings.wants("5a") {
            primitives::rwlock_read_heavy(&server, 64, settings.run, rw.figures("redisync")).await;
        }
        if settings.wants("5b") {
            primitives::semaphore(&server, 32, 4, settings.run, round, sem.figures("redisync"))
                .await;
        }
        if settings.wants("5c") {
            primitives::latch(&server, 100, round, latch.figures("redisync")).await;
        }
        if settings.wants("5d") {
            primitives::read_cache(&server, 64, settings.run, cache.figures("redisync")).await;
        }
    }
    let floor_many = all
        .iter()
        .find(|s| s.id == "many-locks")
        .and_then(|s| s.get(Contender::Floor.name()));
    cache.ratio_to(
        "reads/s",
        floor_many,
        "acquisitions/s",
        "vs floor many-locks cycles/s",
    );
    all.extend([watchdog, rw, sem, latch, cache]);

    let mut election = Scenario::new(
        "election-handover",
        "7. Leader election hand-over: 2 clients, 50 ms terms",
        "One client leads for 50–51 ms (timed by the OS, as in 2b), the other campaigns from \
         the moment it won. Hand-off: from the leader starting `resign()` to the next \
         `campaign()` returning. The election and the pub/sub floor of 2b take turns hand-off \
         by hand-off, as in 2b. p50 vs pub/sub floor: this p50 ÷ the floor's, in the same \
         round.",
    );
    for round in 0..settings.rounds {
        if !settings.wants("7") {
            break;
        }
        eprintln!("election round {}/{}", round + 1, settings.rounds);
        // As in 2b: the floor and the election take turns hand-off by hand-off.
        scenarios::handoff(
            &server,
            &turn(&Contender::ELECTION, round),
            settings.handoffs,
            &mut election,
        )
        .await;
    }
    election.ratio_to_own(
        "handoff p50 µs",
        Contender::PubSubFloor.name(),
        "p50 vs pub/sub floor",
    );
    all.push(election);
    let mut rate = Scenario::new(
        "ratelimit",
        "8. Rate limiter: decisions per second, 64 tasks of one client",
        "Each task loops `try_acquire(1)` on one `RateLimiter` for the run: one limiter so \
         generous that every decision allows, one exhausted so that every decision refuses \
         (with a retry time). The floor is a raw fixed-window counter over 4 multiplexed \
         connections (redisync's default pool), one pipelined `INCR` + `PEXPIRE` per \
         decision, measured in the same round: the cheapest one-round-trip limiter, though not \
         exact across window edges and unable to say when to retry. vs floor: decisions/s ÷ \
         the floor's, in the same round. Round trips/decision: scripts the client sent \
         (`Stats::scripts_sent`) per decision.",
    );
    for round in 0..settings.rounds {
        if !settings.wants("8") {
            break;
        }
        eprintln!("rate limiter round {}/{}", round + 1, settings.rounds);
        // The floor takes its turn first, in the middle or last, as contenders do elsewhere.
        let floor_at = round % (ratelimit::Verdict::ALL.len() + 1);
        for (i, verdict) in turn(&ratelimit::Verdict::ALL, round)
            .into_iter()
            .enumerate()
        {
            if i == floor_at {
                ratelimit::floor(&server, 64, 4, settings.run, rate.figures(ratelimit::FLOOR))
                    .await;
            }
            ratelimit::decisions(
                &server,
                verdict,
                64,
                settings.run,
                round,
                rate.figures(verdict.name()),
            )
            .await;
        }
        if floor_at == ratelimit::Verdict::ALL.len() {
            ratelimit::floor(&server, 64, 4, settings.run, rate.figures(ratelimit::FLOOR)).await;
        }
    }
    rate.ratio_to_own("decisions/s", ratelimit::FLOOR, "vs floor");
    all.push(rate);

    eprintln!("memory");
    let mut memory = Scenario::new(
        "waiter-memory",
        "6. Memory: 10,000 tasks waiting on one lock of one client",
        "Client memory per waiting task. Heap: bytes this process allocated minus freed while \
         the waiters were spawned and queued (a counting allocator; the first waiter, which \
         sets up the client's queue and subscription, is not counted). RSS: growth of the \
         resident memory over the same time (coarser: the allocator reuses memory freed \
         earlier in the run). One Redis request is in flight at a time: only the head of \
         the local queue asks.",
    );
    if settings.wants("6") {
        primitives::memory(&server, 10_000, memory.figures("redisync")).await;
    }
    all.push(memory);

    // What the peers' drivers ran on: their library, client and runtime versions.
    let mut machine = machine;
    machine.extend(peers::versions());
    let skipped = peers::skipped();
    println!("## Machine\n");
    for (key, value) in &machine {
        println!("- {key}: {value}");
    }
    for (contender, reason) in &skipped {
        println!("- skipped {contender}: {reason}");
    }
    println!(
        "- rounds: {}, run per contender and round: {:?}, uncontended cycles: {}, hand-offs per round: {}",
        settings.rounds, settings.run, settings.cycles, settings.handoffs
    );
    println!("- total time: {:.0} s\n", started.elapsed().as_secs_f64());
    all.retain(|scenario| !scenario.contenders.is_empty());
    if let Some(table) = headline::markdown(&all) {
        println!("{table}");
    }
    for scenario in &all {
        println!("{}", scenario.markdown());
    }
    let comparison = match (&old, &settings.compare) {
        (Some(old), Some(path)) => {
            let (markdown, json) = compare::compare(old, path, &all);
            println!("{markdown}");
            Some(json)
        }
        _ => None,
    };
    let charts = settings.charts.as_deref().map(|dir| {
        match charts::write_all(std::path::Path::new(dir), &all) {
            Ok(files) => {
                for file in &files {
                    eprintln!("chart written to {file}");
                }
                files
            }
            Err(e) => {
                eprintln!("could not draw the charts: {e}");
                Vec::new()
            }
        }
    });
    let json = serde_json::json!({
        "format": 2,
        "machine": machine.iter().map(|(k, v)| (k.clone(), serde_json::Value::from(v.as_str()))).collect::<serde_json::Map<_, _>>(),
        "rounds": settings.rounds,
        "settings": {
            "run_s": settings.run.as_secs_f64(),
            "cycles": settings.cycles,
            "handoffs": settings.handoffs,
            "only": settings.only,
        },
        "total_s": started.elapsed().as_secs_f64(),
        "scenarios": all.iter().map(Scenario::json).collect::<Vec<_>>(),
        "skipped": skipped.iter().map(|(c, r)| (c.clone(), serde_json::Value::from(r.as_str()))).collect::<serde_json::Map<_, _>>(),
        "compare": comparison,
        "charts": charts,
    });
    let text = serde_json::to_string_pretty(&json).unwrap_or_default() + "\n";
    match std::fs::write(&settings.json, text) {
        Ok(()) => eprintln!("figures written to {}", settings.json),
        Err(e) => eprintln!("could not write {}: {e}", settings.json),
    }
}
