//! A read-mostly cache shared by two services: 64 reader tasks read it under read holds while
//! one refresher rewrites it under the write hold every 100 ms. The cache is two Redis keys
//! that must agree (a value and its checksum); readers check they never see a half-written
//! state. It runs twice: with writer preference (the default), the refresher's wait stays
//! short even though readers overlap without pause; without it, the readers starve it.
//!
//! `cargo run -p redisync --example cache` with `REDIS_URL` set, or `scripts/demo.sh cache`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use redisync::prelude::*;

const READERS_PER_SERVICE: usize = 32;
const RUN_FOR: Duration = Duration::from_secs(2);
const REFRESH_EVERY: Duration = Duration::from_millis(100);

type AnyError = Box<dyn std::error::Error + Send + Sync>;

fn checksum(value: u64) -> u64 {
    value.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17)
}

#[tokio::main]
async fn main() -> Result<(), AnyError> {
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
    let data = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    {
        let mut data = data.clone();
        let _: () = data.set("redisync-demo:cache:value", 0u64).await?;
        let _: () = data.set("redisync-demo:cache:check", checksum(0)).await?;
    }
    println!(
        "cache: {} readers in each of 2 services, one refresher every {REFRESH_EVERY:?}",
        READERS_PER_SERVICE
    );
    for prefer_writers in [true, false] {
        run(&services, &data, prefer_writers).await?;
    }
    for (i, client) in services.iter().enumerate() {
        println!("service {i} stats: {:?}", client.stats());
        client.shutdown().await;
    }
    Ok(())
}

/// One run of `RUN_FOR`: readers with the given writer preference, one refresher.
async fn run(
    services: &[Client],
    data: &redis::aio::MultiplexedConnection,
    prefer_writers: bool,
) -> Result<(), AnyError> {
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let mut readers = Vec::new();
    for client in services {
        for _ in 0..READERS_PER_SERVICE {
            let cache = client
                .read_write_lock("cache")
                .prefer_writers(prefer_writers);
            let (stop, reads, mut data) = (stop.clone(), reads.clone(), data.clone());
            readers.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let guard = cache.read().await?;
                    let (value, check): (u64, u64) = redis::pipe()
                        .get("redisync-demo:cache:value")
                        .get("redisync-demo:cache:check")
                        .query_async(&mut data)
                        .await?;
                    guard.unlock().await?;
                    if check != checksum(value) {
                        return Err::<(), AnyError>("a reader saw a half-written cache".into());
                    }
                    reads.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            }));
        }
    }

    let refresher = {
        let cache = services[0].read_write_lock("cache");
        let (stop, mut data) = (stop.clone(), data.clone());
        tokio::spawn(async move {
            let mut waits = Vec::new();
            let mut version: u64 = data.get("redisync-demo:cache:value").await?;
            while !stop.load(Ordering::Relaxed) {
                tokio::time::sleep(REFRESH_EVERY).await;
                let asked = Instant::now();
                let guard = cache.write().await?;
                waits.push(asked.elapsed());
                version += 1;
                // Two writes a reader must never see apart.
                let _: () = data.set("redisync-demo:cache:value", version).await?;
                tokio::time::sleep(Duration::from_millis(1)).await;
                let _: () = data
                    .set("redisync-demo:cache:check", checksum(version))
                    .await?;
                guard.unlock().await?;
            }
            Ok::<_, AnyError>(waits)
        })
    };

    tokio::time::sleep(RUN_FOR).await;
    stop.store(true, Ordering::Relaxed);
    let mut waits = refresher.await??;
    for reader in readers {
        reader.await??;
    }
    waits.sort();
    let total = reads.load(Ordering::Relaxed);
    let median = waits.get(waits.len() / 2).copied().unwrap_or_default();
    let worst = waits.last().copied().unwrap_or_default();
    println!(
        "writer preference {}: {total} consistent reads ({:.0}/s); {} refreshes, \
         writer waited median {median:.2?}, worst {worst:.2?}",
        if prefer_writers { "on " } else { "off" },
        total as f64 / RUN_FOR.as_secs_f64(),
        waits.len()
    );
    Ok(())
}
