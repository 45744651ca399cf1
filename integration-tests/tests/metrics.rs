//! The metrics example, scraped: with the `metrics` feature, every primitive reports through the
//! `metrics` facade, and the example's Prometheus exporter serves them over HTTP. One test per
//! process, since the exporter is the process's one recorder.

#![cfg(feature = "metrics")]

mod common;

#[path = "../../examples/metrics.rs"]
#[allow(dead_code)]
mod example;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use common::{client_with_watchdog, ms};
use redisync::prelude::*;
use redisync_test_harness::RedisServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `GET /metrics` from the exporter at `addr`: the body.
async fn scrape(addr: SocketAddr) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    assert!(
        head.starts_with("HTTP/1.") && head.contains(" 200 "),
        "{head}"
    );
    body.to_owned()
}

/// Every sample of the scrape, by its series (`name{labels}`, labels as the exporter wrote them).
fn samples(body: &str) -> BTreeMap<String, f64> {
    body.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            Some((series.to_owned(), value.parse().ok()?))
        })
        .collect()
}

/// The value of `name` with exactly these labels (in the exporter's order), or 0.
fn value(samples: &BTreeMap<String, f64>, name: &str, labels: &[(&str, &str)]) -> f64 {
    let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    let series = match labels.is_empty() {
        true => name.to_owned(),
        false => format!("{name}{{{}}}", labels.join(",")),
    };
    samples.get(&series).copied().unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_serves_what_every_primitive_reports() {
    let server = RedisServer::start();
    let addr = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    example::serve_metrics(addr).unwrap();
    // A short watchdog, so that a hold taken from its owner is found lost quickly.
    let client = client_with_watchdog(&server, ms(600)).await;

    let taken = example::work(&client, 4, ms(600)).await.unwrap();
    assert!(taken > 0);

    // A wait that runs out, and a hold taken away from its owner.
    let lock = client.lock("metrics-test");
    let guard = lock.lock().await.unwrap();
    let other = client.lock("metrics-test");
    assert!(other.try_lock_for(ms(50)).await.unwrap().is_none());
    assert!(lock.force_unlock().await.unwrap());
    tokio::time::timeout(Duration::from_secs(10), guard.lost())
        .await
        .expect("the watchdog finds the hold gone");
    drop(guard);

    // The watchdog counted the loss before `lost()` completed; the exporter renders what was
    // recorded when it is scraped.
    let scraped = samples(&scrape(addr).await);
    let s = &scraped;
    let lock_acquired = value(
        s,
        "redisync_acquires_total",
        &[("kind", "lock"), ("outcome", "acquired")],
    );
    assert!(
        lock_acquired >= taken as f64 + 1.0,
        "{lock_acquired} < {taken} + 1"
    );
    assert_eq!(
        value(
            s,
            "redisync_acquires_total",
            &[("kind", "lock"), ("outcome", "timed_out")]
        ),
        1.0
    );
    assert!(
        value(
            s,
            "redisync_acquires_total",
            &[("kind", "semaphore"), ("outcome", "acquired")]
        ) >= taken as f64
    );
    assert!(value(s, "redisync_contended_waits_total", &[("kind", "lock")]) >= 1.0);
    assert!(
        value(
            s,
            "redisync_acquire_wait_seconds_count",
            &[("kind", "lock"), ("outcome", "acquired")]
        ) >= lock_acquired
    );
    assert!(value(s, "redisync_hold_seconds_count", &[("kind", "lock")]) >= taken as f64);
    assert!(value(s, "redisync_hold_seconds_count", &[("kind", "semaphore")]) >= taken as f64);
    assert!(
        value(
            s,
            "redisync_renewals_total",
            &[("kind", "lock"), ("outcome", "lost")]
        ) >= 1.0
    );
    // Names are not labels unless the client asks for them.
    assert!(
        !s.keys().any(|series| series.contains("name=")),
        "a series is labelled with a name"
    );
    client.shutdown().await;
}
