//! Client memory per waiting task: a task waiting for a lock that other tasks of
//! its client already wait for costs at most 1 KiB of heap, its own handle and the tokio task
//! that waits included, and gives all of it back when it is dropped.
//!
//! The heap is counted by this test binary's global allocator (bytes asked for minus bytes
//! given back while a window is open), so the figures are the sizes the code asks for, not
//! timings. The runtime is single-threaded: the test's own task only runs between the
//! waiters' polls, so what it reads is never half-way through one.

mod common;

use std::time::Duration;

use redisync::prelude::*;
use redisync_test_harness::heap::{self, Window};
use redisync_test_harness::{wait_until, RedisServer};

#[global_allocator]
static ALLOCATOR: heap::Counting = heap::Counting;

const NAME: &str = "memory";
/// Enough waiters that what the client does in the background meanwhile (the head's
/// re-check once a second) is a fraction of a byte per waiter.
const WAITERS: usize = 4000;

#[tokio::test(flavor = "current_thread")]
async fn a_waiting_task_costs_at_most_1_kib_and_leaves_nothing_when_dropped() {
    let server = RedisServer::start();
    let client = common::client(&server).await;
    let holder = client.lock(NAME).lock().await.expect("lock");
    // The first waiter sets up what a client keeps once per lock (the local queue, the
    // subscription, the registration in Redis): not counted as every waiter's.
    let first = {
        let lock = client.lock(NAME);
        tokio::spawn(async move { lock.lock().await.map(drop) })
    };
    let sent = client.stats().scripts_sent;
    assert!(
        wait_until(Duration::from_secs(30), || {
            common::wake_subscribers(&server, NAME) == 1 && client.stats().scripts_sent >= sent + 2
        })
        .await,
        "the first waiter subscribed and asked again"
    );
    // Let the runtime's run queue grow to hold every waiter before counting: it keeps that
    // room, and it is the runtime's, not the waiters'.
    let warm: Vec<_> = (0..WAITERS).map(|_| tokio::spawn(async {})).collect();
    for task in warm {
        task.await.expect("no-op task");
    }
    // The join handles are the test's, not the waiters': allocated before counting.
    let mut waiters = Vec::with_capacity(WAITERS);

    let window = Window::open();
    for _ in 0..WAITERS {
        // Each task makes its own handle, as users do.
        let lock = client.lock(NAME);
        waiters.push(tokio::spawn(async move { lock.lock().await.map(drop) }));
    }
    // A waiter is counted as contended, joins the local queue and parks in one poll: once
    // all are counted, all are queued.
    let contended = (WAITERS + 1) as u64;
    assert!(
        wait_until(Duration::from_secs(60), || {
            client.stats().contended_waits == contended
        })
        .await,
        "every waiter queued: {:?}",
        client.stats()
    );
    let per_waiter = window.net() / WAITERS as i64;
    println!("REPORT a waiting task costs {per_waiter} bytes of heap");
    assert!(
        per_waiter <= 1024,
        "a waiting task costs {per_waiter} bytes of heap (at most 1024)"
    );

    for waiter in &waiters {
        waiter.abort();
    }
    // Drained, not consumed: the vector's own memory is freed only after counting.
    for waiter in waiters.drain(..) {
        assert!(waiter.await.expect_err("aborted").is_cancelled());
    }
    // Less than a byte per waiter: any allocation a dropped waiter left behind is more.
    let left = window.net();
    assert!(
        left < WAITERS as i64,
        "{left} bytes of heap were left by {WAITERS} dropped waiters"
    );
    drop(window);
    drop(waiters);
    first.abort();
    let _ = first.await;
    drop(holder);
}
