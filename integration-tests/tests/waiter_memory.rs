//! Client memory per waiting task (issue 17): a task waiting for a lock that other tasks of
//! its client already wait for costs at most 1 KiB of heap, its own handle and the tokio task
//! that waits included, and gives all of it back when it is dropped.
//!
//! The heap is counted by this test binary's global allocator (bytes asked for minus bytes
//! given back while a window is open), so the figures are the sizes the code asks for, not
//! timings. The runtime is single-threaded: the test's own task only runs between the
//! waiters' polls, so what it reads is never half-way through one.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use redisync::prelude::*;
use redisync_test_harness::{wait_until, RedisServer};

/// Counts the heap while [`Window`] is open; otherwise the system allocator as it is.
struct Counting;

static OPEN: AtomicBool = AtomicBool::new(false);
static NET: AtomicI64 = AtomicI64::new(0);

fn count(bytes: i64) {
    if OPEN.load(Ordering::Relaxed) {
        NET.fetch_add(bytes, Ordering::Relaxed);
    }
}

// SAFETY: every call is passed on to `System` unchanged; counting has no effect on memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is `System`'s.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            count(layout.size() as i64);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as above.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            count(layout.size() as i64);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) };
        count(-(layout.size() as i64));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as above.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            count(new_size as i64 - layout.size() as i64);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// While alive, heap bytes allocated minus freed are counted.
struct Window(());

impl Window {
    fn open() -> Window {
        NET.store(0, Ordering::SeqCst);
        OPEN.store(true, Ordering::SeqCst);
        Window(())
    }

    fn net(&self) -> i64 {
        NET.load(Ordering::SeqCst)
    }
}

impl Drop for Window {
    fn drop(&mut self) {
        OPEN.store(false, Ordering::SeqCst);
    }
}

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
