//! Three services (three clients, as if on three machines) move money between five accounts
//! kept in Redis. A transfer reads two balances, thinks, and writes both back: it takes both
//! accounts' locks at once with a `MultiLock`. Transfers go both ways between the same pairs,
//! so two of them often ask for the same locks in opposite orders; the multi-lock takes them in
//! one canonical order, so that never deadlocks. Every write carries the fencing token of its
//! account's lock, and the store refuses a token lower than the last one it accepted.
//!
//! `cargo run -p redisync --example bank` with `REDIS_URL` set, or `scripts/demo.sh bank`.

use std::time::{Duration, Instant};

use redis::AsyncCommands;
use redisync::prelude::*;

const SERVICES: usize = 3;
const WORKERS_PER_SERVICE: usize = 4;
const TRANSFERS_PER_WORKER: u32 = 25;
const ACCOUNTS: usize = 5;
const OPENING_BALANCE: i64 = 1_000;

type AnyError = Box<dyn std::error::Error + Send + Sync>;

/// The store's side of fencing: writes both balances only if neither token is lower than the
/// last one accepted for its account (then records the tokens). Returns 1, or 0 if refused.
const FENCED_WRITE: &str = r"
for i = 0, 1 do
    local last = tonumber(redis.call('GET', KEYS[2 * i + 2]) or '0')
    if tonumber(ARGV[2 * i + 1]) < last then return 0 end
end
for i = 0, 1 do
    redis.call('SET', KEYS[2 * i + 1], ARGV[2 * i + 2])
    redis.call('SET', KEYS[2 * i + 2], ARGV[2 * i + 1])
end
return 1
";

/// What one worker (or service) did.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    transfers: u32,
    /// Transfers that listed the higher-numbered account first.
    reversed: u32,
    short_of_funds: u32,
    /// Writes the store refused as stale: two holders at once, which must never happen.
    stale: u32,
}

impl Tally {
    fn add(&mut self, other: Tally) {
        self.transfers += other.transfers;
        self.reversed += other.reversed;
        self.short_of_funds += other.short_of_funds;
        self.stale += other.stale;
    }
}

fn balance_key(account: usize) -> String {
    format!("redisync-demo:bank:{account}:balance")
}

fn token_key(account: usize) -> String {
    format!("redisync-demo:bank:{account}:token")
}

/// SplitMix64: enough randomness for a demo, without a dependency.
fn next_random(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[tokio::main]
async fn main() -> Result<(), AnyError> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let mut services = Vec::new();
    for _ in 0..SERVICES {
        services.push(
            Client::builder(url.as_str())
                .key_prefix("redisync-demo")
                .build()
                .await?,
        );
    }
    let mut data = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    for account in 0..ACCOUNTS {
        let _: () = data.set(balance_key(account), OPENING_BALANCE).await?;
        let _: () = data.set(token_key(account), 0).await?;
    }
    let total_before = OPENING_BALANCE * ACCOUNTS as i64;
    println!(
        "bank: {ACCOUNTS} accounts of {OPENING_BALANCE} (total {total_before}); \
         {WORKERS_PER_SERVICE} workers in each of {SERVICES} services, \
         {TRANSFERS_PER_WORKER} transfers each"
    );

    let started = Instant::now();
    let mut workers = Vec::new();
    for (s, client) in services.iter().enumerate() {
        for w in 0..WORKERS_PER_SERVICE {
            let client = client.clone();
            let mut data = data.clone();
            let mut seed = (s * WORKERS_PER_SERVICE + w) as u64;
            workers.push(tokio::spawn(async move {
                let script = redis::Script::new(FENCED_WRITE);
                let mut tally = Tally::default();
                for _ in 0..TRANSFERS_PER_WORKER {
                    let from = next_random(&mut seed) as usize % ACCOUNTS;
                    let to =
                        (from + 1 + next_random(&mut seed) as usize % (ACCOUNTS - 1)) % ACCOUNTS;
                    let amount = 1 + (next_random(&mut seed) % 200) as i64;
                    // Listed as (from, to): opposite transfers list the locks in opposite orders.
                    let accounts = client.multi_lock([
                        client.lock(format!("bank:{from}")),
                        client.lock(format!("bank:{to}")),
                    ]);
                    let guard = accounts.lock().await?;
                    let token = |account: usize| {
                        let name = format!("bank:{account}");
                        guard
                            .fencing_tokens()
                            .into_iter()
                            .find_map(|(lock, token)| (lock == name).then_some(token))
                            .expect("the multi-lock holds both accounts")
                    };
                    let (from_balance, to_balance): (i64, i64) =
                        data.mget(&[balance_key(from), balance_key(to)]).await?;
                    if from_balance < amount {
                        tally.short_of_funds += 1;
                        guard.unlock().await?;
                        continue;
                    }
                    // Work done while holding both locks: another transfer now would lose money.
                    tokio::time::sleep(Duration::from_micros(300)).await;
                    let accepted: i64 = script
                        .key(balance_key(from))
                        .key(token_key(from))
                        .key(balance_key(to))
                        .key(token_key(to))
                        .arg(token(from))
                        .arg(from_balance - amount)
                        .arg(token(to))
                        .arg(to_balance + amount)
                        .invoke_async(&mut data)
                        .await?;
                    if accepted == 1 {
                        tally.transfers += 1;
                        tally.reversed += u32::from(from > to);
                    } else {
                        tally.stale += 1;
                    }
                    guard.unlock().await?;
                }
                Ok::<_, AnyError>((s, tally))
            }));
        }
    }
    let mut per_service = [Tally::default(); SERVICES];
    let mut total = Tally::default();
    for worker in workers {
        let (service, tally) = worker.await??;
        per_service[service].add(tally);
        total.add(tally);
    }
    let elapsed = started.elapsed();

    for (s, tally) in per_service.iter().enumerate() {
        println!(
            "service {s}: {} transfers ({} listing the locks high-to-low), {} refused for lack \
             of funds, {} stale writes",
            tally.transfers, tally.reversed, tally.short_of_funds, tally.stale
        );
    }
    let mut balances = Vec::new();
    for account in 0..ACCOUNTS {
        let balance: i64 = data.get(balance_key(account)).await?;
        balances.push(balance);
    }
    let total_after: i64 = balances.iter().sum();
    println!(
        "{} transfers in {elapsed:.2?}; balances {balances:?}, total {total_after} \
         (was {total_before}); stale writes refused by the store: {}",
        total.transfers, total.stale
    );
    for (i, client) in services.iter().enumerate() {
        println!("service {i} stats: {:?}", client.stats());
        client.shutdown().await;
    }
    if total_after != total_before || total.stale != 0 || balances.iter().any(|b| *b < 0) {
        return Err("money was created or lost, or a write ran under a stale lock".into());
    }
    Ok(())
}
