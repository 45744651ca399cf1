//! `soak`: redisync's soak test, Jepsen-style. Worker processes take locks, semaphores and
//! latches on a Redis under test while a nemesis pauses and kills them, pauses Redis, cuts and
//! slows their connections; a fenced register on a second, fault-free Redis and the workers'
//! event logs let a checker find what must never happen, and liveness checks after the faults
//! heal find what stays stuck.
//!
//! ```text
//! cargo run --release -p redisync-test-harness --bin soak -- --duration 90s
//! ```
//!
//! See `soak --help` and RELIABILITY.md ("The soak test").

mod checker;
mod controller;
mod events;
mod fleet;
mod latches;
mod liveness;
mod nemesis;
mod options;
mod register;
mod rng;
mod worker;

use std::process::ExitCode;

use options::Command;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let command = match options::parse(&args) {
        Ok(command) => command,
        Err(message) => {
            eprintln!("soak: {message}\n{}", options::USAGE);
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("soak: cannot start a runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match command {
        Command::Help => {
            println!("{}", options::USAGE);
            ExitCode::SUCCESS
        }
        Command::Run(options) => runtime.block_on(controller::run(options)),
        Command::Check(options) => controller::check_again(&options),
        Command::Worker(options) => runtime.block_on(worker::run(options)),
    }
}
