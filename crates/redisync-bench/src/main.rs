//! The redisync benchmark.
//!
//! Starts its own `redis-server`, runs every scenario for every contender in one run
//! (contenders interleaved, several rounds, medians reported), prints markdown tables and
//! writes the same figures as JSON.
//!
//! ```sh
//! cargo run --release -p redisync-bench                 # full run, a few minutes
//! cargo run --release -p redisync-bench -- --quick      # one short round, to try it out
//! cargo run --release -p redisync-bench -- --json out.json
//! ```

mod lockers;
mod monitor;
mod primitives;
mod report;
mod scenarios;

use std::time::{Duration, Instant};

use lockers::Contender;
use redisync_test_harness::RedisServer;
use report::Scenario;

struct Settings {
    rounds: usize,
    cycles: usize,
    run: Duration,
    json: String,
    /// Run only the scenarios whose numbers start with one of these ("1", "5c").
    only: Vec<String>,
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
        json: "target/bench.json".to_owned(),
        only: Vec::new(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => {
                settings.rounds = 1;
                settings.cycles = 300;
                settings.run = Duration::from_secs(1);
            }
            "--json" => settings.json = args.next().ok_or("--json needs a path")?,
            "--only" => settings
                .only
                .push(args.next().ok_or("--only needs a scenario number")?),
            "--help" | "-h" => {
                return Err(
                    "usage: redisync-bench [--quick] [--json PATH] [--only SCENARIO]...".to_owned(),
                );
            }
            other => return Err(format!("unknown argument {other:?}; try --help")),
        }
    }
    Ok(settings)
}

fn machine() -> Vec<(String, String)> {
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
    let redis = std::process::Command::new("redis-server")
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|v| {
            v.split_whitespace()
                .find_map(|w| w.strip_prefix("v="))
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "unknown".to_owned());
    vec![
        ("cpu".to_owned(), cpu),
        ("cores".to_owned(), cores.to_string()),
        ("memory".to_owned(), memory),
        ("redis-server".to_owned(), redis),
        ("os".to_owned(), std::env::consts::OS.to_owned()),
    ]
}

#[tokio::main]
async fn main() {
    let settings = match settings() {
        Ok(settings) => settings,
        Err(message) => {
            eprintln!("{message}");
            std::process::exit(2);
        }
    };
    let started = Instant::now();
    let server = RedisServer::start();
    let machine = machine();
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
        "1. Uncontended lock + unlock",
        "One task, one free lock; per cycle. Requests: commands the client sent, counted with \
         MONITOR in a pass of their own (commands scripts run inside Redis are not requests).",
    );
    let mut contended = Scenario::new(
        "2. Contended: 4 clients × 8 tasks on one lock, 1 ms hold",
        "Handoff: from the holder starting its release to the next holder's acquire returning. \
         Requests include every retry and subscription command, counted with MONITOR in a \
         1 s pass of their own. Min/max: acquisitions of the least and most lucky task. \
         Violations: two holders at once (must be 0).",
    );
    let mut many = Scenario::new(
        "3. Many locks: 64 tasks, each on its own lock",
        "Lock + unlock cycles per second; the EVALSHA ceiling is a trivial script over 4 \
         multiplexed connections (redisync's default pool), measured in the same run.",
    );
    for round in 0..settings.rounds {
        eprintln!("round {}/{}", round + 1, settings.rounds);
        // Contenders take turns going first, so that no one always runs on a cold or a hot
        // machine.
        let mut order = Contender::LOCKS.to_vec();
        let turn = round % order.len();
        order.rotate_left(turn);
        for &contender in order.iter().filter(|_| settings.wants("1")) {
            eprintln!("  uncontended: {}", contender.name());
            scenarios::uncontended(
                &server,
                contender,
                settings.cycles,
                uncontended.figures(contender.name()),
            )
            .await;
        }
        for &contender in order.iter().filter(|_| settings.wants("2")) {
            if contender == Contender::Floor {
                continue; // the floor has no waiting strategy to compare
            }
            for count_requests in [false, true] {
                eprintln!(
                    "  contended{}: {}",
                    if count_requests {
                        " (counting requests)"
                    } else {
                        ""
                    },
                    contender.name()
                );
                let run = if count_requests {
                    settings.run.min(Duration::from_secs(1))
                } else {
                    settings.run
                };
                let load = scenarios::Load {
                    clients: 4,
                    per_client: 8,
                    hold: Duration::from_millis(1),
                    duration: run,
                };
                scenarios::contended(
                    &server,
                    contender,
                    &load,
                    count_requests,
                    contended.figures(contender.name()),
                )
                .await;
            }
        }
        for &contender in order.iter().filter(|_| settings.wants("3")) {
            if contender == Contender::RedisyncFair {
                continue; // one waiter per lock: nothing to be fair about
            }
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
    all.extend([uncontended, contended, many]);

    eprintln!("watchdog scale");
    let mut watchdog = Scenario::new(
        "4. Watchdog: 10,000 locks held",
        "Watchdog timeout 3 s, so one renewal period is 1 s; requests counted with MONITOR over 3 periods.",
    );
    if settings.wants("4") {
        scenarios::watchdog_scale(&server, 10_000, watchdog.figures("redisync")).await;
    }
    all.push(watchdog);

    let mut rw = Scenario::new(
        "5a. Read-write lock, read-heavy: 64 readers and 1 writer over 4 clients",
        "Readers hold 1 ms; the writer holds 1 ms and pauses 10 ms between writes (writer \
         preference on, the default).",
    );
    let mut sem = Scenario::new(
        "5b. Semaphore: 32 tasks over 4 clients, 4 permits, 1 ms hold",
        "",
    );
    let mut latch = Scenario::new(
        "5c. Count-down latch: 100 waiters over 4 clients",
        "From the last count_down returning to the waiters returning.",
    );
    let mut multi = Scenario::new(
        "5d. Multi-lock: lock + unlock of 2 and 8 free locks of one client",
        "",
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
        for locks in [2, 8].into_iter().filter(|_| settings.wants("5d")) {
            primitives::multilock(
                &server,
                locks,
                settings.cycles,
                multi.figures(&format!("redisync, {locks} locks")),
            )
            .await;
        }
    }
    all.extend([rw, sem, latch, multi]);

    eprintln!("memory");
    let mut memory = Scenario::new(
        "6. Memory: 10,000 tasks waiting on one lock of one client",
        "Growth of this process's resident memory while they wait (one Redis request in flight \
         at a time: only the head of the local queue asks).",
    );
    if settings.wants("6") {
        primitives::memory(&server, 10_000, memory.figures("redisync")).await;
    }
    all.push(memory);

    println!("## Machine\n");
    for (key, value) in &machine {
        println!("- {key}: {value}");
    }
    println!(
        "- rounds: {}, run per contender and round: {:?}, uncontended cycles: {}",
        settings.rounds, settings.run, settings.cycles
    );
    println!("- total time: {:.0} s\n", started.elapsed().as_secs_f64());
    all.retain(|scenario| !scenario.contenders.is_empty());
    for scenario in &all {
        println!("{}", scenario.markdown());
    }
    let machine_json: Vec<String> = machine
        .iter()
        .map(|(k, v)| format!("{}: {}", report::json_string(k), report::json_string(v)))
        .collect();
    let json = format!(
        "{{\"machine\": {{{}}}, \"rounds\": {}, \"scenarios\": [{}]}}\n",
        machine_json.join(", "),
        settings.rounds,
        all.iter()
            .map(Scenario::json)
            .collect::<Vec<_>>()
            .join(", ")
    );
    match std::fs::write(&settings.json, json) {
        Ok(()) => eprintln!("figures written to {}", settings.json),
        Err(e) => eprintln!("could not write {}: {e}", settings.json),
    }
}
