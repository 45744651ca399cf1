//! redisync's metrics for Prometheus. The `metrics` feature makes every primitive report through
//! the [`metrics`](https://docs.rs/metrics) facade; this example installs the Prometheus
//! exporter, which serves them at `http://127.0.0.1:9000/metrics` (`METRICS_ADDR` to change it),
//! while a few workers take turns on a lock and a semaphore for `METRICS_SECONDS` (30 by
//! default). Scrape it meanwhile:
//!
//! ```text
//! curl -s http://127.0.0.1:9000/metrics | grep redisync_
//! ```
//!
//! `cargo run -p redisync --features metrics --example metrics` with `REDIS_URL` set, or
//! `scripts/demo.sh metrics`. The metrics and their labels are listed in the docs of
//! `redisync::core::metrics`.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use metrics_exporter_prometheus::PrometheusBuilder;
use redisync::prelude::*;

type AnyError = Box<dyn std::error::Error + Send + Sync>;

/// Installs the Prometheus exporter as the process's metrics recorder, serving `/metrics` on
/// `addr`. Once per process.
pub fn serve_metrics(addr: SocketAddr) -> Result<(), AnyError> {
    PrometheusBuilder::new()
        .with_http_listener(addr)
        .install()?;
    Ok(())
}

/// `workers` tasks of `client` take turns on one lock, and on one permit of a semaphore, for
/// `run_for`; returns how many times the lock was taken.
pub async fn work(client: &Client, workers: usize, run_for: Duration) -> Result<u64, AnyError> {
    let semaphore = client.semaphore("metrics-example:slots");
    semaphore.try_set_permits(2).await?;
    let until = Instant::now() + run_for;
    let mut tasks = Vec::new();
    for _ in 0..workers {
        let lock = client.lock("metrics-example:job");
        let semaphore = semaphore.clone();
        tasks.push(tokio::spawn(async move {
            let mut taken = 0;
            while Instant::now() < until {
                let guard = lock.lock().await?;
                tokio::time::sleep(Duration::from_millis(2)).await;
                guard.unlock().await?;
                taken += 1;
                let permit = semaphore.acquire().await?;
                tokio::time::sleep(Duration::from_millis(1)).await;
                permit.release().await?;
            }
            Ok::<u64, redisync::Error>(taken)
        }));
    }
    let mut taken = 0;
    for task in tasks {
        taken += task.await??;
    }
    Ok(taken)
}

#[tokio::main]
async fn main() -> Result<(), AnyError> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".to_owned());
    let addr: SocketAddr = std::env::var("METRICS_ADDR")
        .unwrap_or_else(|_| "127.0.0.1:9000".to_owned())
        .parse()?;
    let seconds: u64 = std::env::var("METRICS_SECONDS")
        .unwrap_or_else(|_| "30".to_owned())
        .parse()?;
    serve_metrics(addr)?;
    println!("serving metrics at http://{addr}/metrics for {seconds} s");
    let client = Client::builder(url)
        .key_prefix("redisync-demo")
        .build()
        .await?;
    let taken = work(&client, 8, Duration::from_secs(seconds)).await?;
    println!("the lock was taken {taken} times; the last scrape shows the totals");
    client.semaphore("metrics-example:slots").delete().await?;
    client.shutdown().await;
    Ok(())
}
