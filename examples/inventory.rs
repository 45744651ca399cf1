//! Two services (two clients, as if on two machines) sell from one inventory kept in Redis.
//! Every sale is a read-modify-write of the stock; the distributed lock makes it safe, and the
//! fencing token shows every sale ran under a newer hold than the one before.
//!
//! Run it with `scripts/demo.sh` (starts its own redis-server), or against your own Redis with
//! `REDIS_URL=redis://127.0.0.1:6379/ cargo run -p redisync --example inventory`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use redisync::prelude::*;
use tokio::sync::Mutex;

const WORKERS_PER_SERVICE: usize = 8;
const STOCK: i64 = 200;

#[tokio::main]
async fn main() -> std::result::Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let services = [
        Client::builder(url.as_str())
            .key_prefix("redisync-demo")
            .build()
            .await?,
        Client::builder(url.as_str())
            .key_prefix("redisync-demo")
            .build()
            .await?,
    ];
    let mut data = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let _: () = data.set("redisync-demo:stock", STOCK).await?;
    println!("inventory: {STOCK} items, {WORKERS_PER_SERVICE} workers in each of 2 services");

    // (fencing token, stock seen) of every sale, to check the order afterwards.
    let ledger = Arc::new(Mutex::new(Vec::new()));
    let started = Instant::now();
    let mut workers = Vec::new();
    for (s, client) in services.iter().enumerate() {
        for w in 0..WORKERS_PER_SERVICE {
            let lock = client.lock("inventory");
            let mut data = data.clone();
            let ledger = ledger.clone();
            workers.push(tokio::spawn(async move {
                let mut sold = 0u32;
                loop {
                    let guard = lock.lock().await?;
                    let stock: i64 = data.get("redisync-demo:stock").await?;
                    if stock == 0 {
                        guard.unlock().await?;
                        return Ok::<_, Box<dyn std::error::Error + Send + Sync>>((s, w, sold));
                    }
                    // Work done while holding the lock: another sale now would oversell.
                    tokio::time::sleep(Duration::from_micros(200)).await;
                    let _: () = data.set("redisync-demo:stock", stock - 1).await?;
                    ledger.lock().await.push((guard.fencing_token(), stock));
                    sold += 1;
                    guard.unlock().await?;
                    // Taking the next order, outside the lock.
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }));
        }
    }
    for worker in workers {
        let (service, worker, sold) = worker.await??;
        println!("service {service} worker {worker}: sold {sold}");
    }
    let elapsed = started.elapsed();

    let final_stock: i64 = data.get("redisync-demo:stock").await?;
    let mut ledger = ledger.lock().await.clone();
    ledger.sort_by_key(|(_, stock)| std::cmp::Reverse(*stock));
    let tokens_increase = ledger.windows(2).all(|w| w[0].0 < w[1].0);
    println!(
        "sold {} of {STOCK} in {elapsed:.2?}; final stock {final_stock}; \
         fencing tokens strictly increasing in sale order: {tokens_increase}",
        ledger.len()
    );
    for (i, client) in services.iter().enumerate() {
        println!("service {i} stats: {:?}", client.stats());
        client.shutdown().await;
    }
    if final_stock != 0 || ledger.len() as i64 != STOCK || !tokens_increase {
        return Err("the inventory was oversold or sales ran out of order".into());
    }
    Ok(())
}
