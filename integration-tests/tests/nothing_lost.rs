//! Nothing lost for good: every release, give-back and count-down that meets an
//! outage ten times longer than the command timeout, a `BUSY` server, or a caller that drops
//! its future half-way, lands once the fault ends.
//!
//! One test per fault. Each holds every primitive's resources through one client, starts the
//! fault, runs every give-back path at once while it lasts, ends it, and then requires — within
//! [`RECOVERY`] — every permit back, every lock free, the latch counted down exactly once, the
//! client's local state empty and no give-back counted as unconfirmed. The figures printed
//! (`recovered after …`) are the ones quoted in RELIABILITY.md.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use common::{cut_after, exists, lock_key};
use redisync::prelude::*;
use redisync::LocalState;
use redisync_test_harness::{ChaosProxy, RedisServer};

/// The client's command timeout.
const COMMAND_TIMEOUT: Duration = Duration::from_millis(250);
/// How long each fault lasts: ten command timeouts.
const OUTAGE: Duration = Duration::from_millis(2_500);
/// How long after the fault ends everything must be back. The retry pause tops out at one
/// second; the rest is reconnecting and slack for a loaded machine.
const RECOVERY: Duration = Duration::from_secs(10);
/// How long a caller may wait for an answer while the fault lasts: about one command
/// timeout (its retries within it, and scheduling slack). Never a hang.
const CALLER_BOUND: Duration = Duration::from_millis(1_500);
/// Permits every semaphore starts with.
const PERMITS: u64 = 3;
/// The latch's count before the count-down under the fault.
const LATCH_COUNT: u64 = 3;

#[derive(Debug, Clone, Copy)]
enum Fault {
    /// Requests are dropped on the way to Redis (a blackhole both ways).
    DropRequests,
    /// Requests reach Redis and run; their replies are dropped.
    DropReplies,
    /// Redis is stopped with SIGSTOP.
    Stop,
    /// Redis answers `BUSY`: another client's script runs past the busy threshold.
    Busy,
}

struct Rig {
    server: RedisServer,
    proxy: ChaosProxy,
    client: Client,
}

impl Rig {
    async fn start() -> Rig {
        let server = RedisServer::start();
        let proxy = ChaosProxy::start(&server);
        let client = Client::builder(proxy.url())
            .command_timeout(COMMAND_TIMEOUT)
            .build()
            .await
            .expect("connect");
        Rig {
            server,
            proxy,
            client,
        }
    }

    /// Starts `fault`; the returned value ends it when passed to [`end`](Self::end).
    fn begin(&self, fault: Fault) -> Option<redisync_test_harness::BusyScript> {
        match fault {
            Fault::DropRequests => {
                self.proxy.blackhole(true);
                None
            }
            Fault::DropReplies => {
                self.proxy.drop_replies(true);
                None
            }
            Fault::Stop => {
                self.server.pause();
                None
            }
            Fault::Busy => Some(self.server.busy_for(OUTAGE)),
        }
    }

    fn end(&self, fault: Fault, busy: Option<redisync_test_harness::BusyScript>) {
        match fault {
            Fault::DropRequests => {
                self.proxy.blackhole(false);
            }
            Fault::DropReplies => {
                self.proxy.drop_replies(false);
            }
            Fault::Stop => self.server.resume(),
            // Waits for the script to end.
            Fault::Busy => drop(busy),
        }
    }
}

type Step = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Everything `rig`'s client holds before the fault, and the give-back each path makes.
async fn prepare(rig: &Rig) -> Vec<(&'static str, Step)> {
    let c = &rig.client;
    let mut steps: Vec<(&'static str, Step)> = Vec::new();

    for name in ["sem-release", "sem-drop", "sem-cut", "sem-acquire"] {
        assert!(c.semaphore(name).try_set_permits(PERMITS).await.unwrap());
    }
    let permit = c.semaphore("sem-release").acquire().await.unwrap();
    steps.push((
        "semaphore: release()",
        Box::pin(async move {
            let _ = permit.release().await;
        }),
    ));
    let permit = c.semaphore("sem-drop").acquire().await.unwrap();
    steps.push(("semaphore: drop", Box::pin(async move { drop(permit) })));
    let permit = c.semaphore("sem-cut").acquire().await.unwrap();
    steps.push((
        "semaphore: release() cut half-way",
        Box::pin(async move {
            let _ = cut_after(COMMAND_TIMEOUT / 2, permit.release()).await;
        }),
    ));
    let semaphore = c.semaphore("sem-acquire");
    steps.push((
        "semaphore: acquire() with its outcome unknown",
        Box::pin(async move {
            // Under the fault this fails or is cut; what it may have taken goes back.
            let _ = cut_after(COMMAND_TIMEOUT * 2, semaphore.acquire()).await;
        }),
    ));

    let expirable = c.expirable_semaphore("xsem");
    assert!(expirable.try_set_permits(PERMITS).await.unwrap());
    let permit = expirable.acquire().await.unwrap();
    steps.push((
        "expirable semaphore: release()",
        Box::pin(async move {
            let _ = permit.release().await;
        }),
    ));

    let guard = c.lock("lock-unlock").lock().await.unwrap();
    steps.push((
        "lock: unlock()",
        Box::pin(async move {
            let _ = guard.unlock().await;
        }),
    ));
    let guard = c.lock("lock-drop").lock().await.unwrap();
    steps.push(("lock: drop", Box::pin(async move { drop(guard) })));
    let guard = c
        .lock("lock-fixed")
        .lock_with_lease(Duration::from_secs(60))
        .await
        .unwrap();
    steps.push((
        "lock with a fixed lease: unlock() cut half-way",
        Box::pin(async move {
            let _ = cut_after(COMMAND_TIMEOUT / 2, guard.unlock()).await;
        }),
    ));
    let lock = c.lock("lock-acquire");
    steps.push((
        "lock: lock() with its outcome unknown",
        Box::pin(async move {
            let _ = cut_after(COMMAND_TIMEOUT * 2, lock.lock()).await;
        }),
    ));
    let guard = c.fair_lock("fair").lock().await.unwrap();
    steps.push((
        "fair lock: unlock()",
        Box::pin(async move {
            let _ = guard.unlock().await;
        }),
    ));
    let rw = c.read_write_lock("rw-write");
    let guard = rw.write().await.unwrap();
    steps.push((
        "read-write lock: write unlock()",
        Box::pin(async move {
            let _ = guard.unlock().await;
        }),
    ));
    let rw = c.read_write_lock("rw-read");
    let guard = rw.read().await.unwrap();
    steps.push((
        "read-write lock: read drop",
        Box::pin(async move { drop(guard) }),
    ));
    let multi = MultiLock::new([c.lock("multi-a"), c.lock("multi-b")]);
    let guard = multi.lock().await.unwrap();
    steps.push((
        "multi-lock: unlock()",
        Box::pin(async move {
            let _ = guard.unlock().await;
        }),
    ));

    let latch = c.count_down_latch("latch");
    assert!(latch.try_set_count(LATCH_COUNT).await.unwrap());
    steps.push((
        "latch: count_down()",
        Box::pin(async move {
            let _ = latch.count_down().await;
        }),
    ));
    steps
}

/// What must hold once the fault is over; `Err` says what does not yet.
async fn recovered(rig: &Rig) -> Result<(), String> {
    let c = &rig.client;
    for name in ["sem-release", "sem-drop", "sem-cut", "sem-acquire"] {
        let available = c.semaphore(name).available_permits().await;
        if available.as_ref().ok() != Some(&(PERMITS as i64)) {
            return Err(format!("{name}: {available:?} permits available"));
        }
    }
    let available = c.expirable_semaphore("xsem").available_permits().await;
    if available.as_ref().ok() != Some(&(PERMITS as i64)) {
        return Err(format!("xsem: {available:?} permits available"));
    }
    for name in [
        "lock-unlock",
        "lock-drop",
        "lock-fixed",
        "lock-acquire",
        "multi-a",
        "multi-b",
    ] {
        if exists(&rig.server, &lock_key(name)) {
            return Err(format!("{name} is still held"));
        }
    }
    if !matches!(c.fair_lock("fair").is_locked().await, Ok(false)) {
        return Err("the fair lock is still held".into());
    }
    for name in ["rw-write", "rw-read"] {
        if !matches!(c.read_write_lock(name).is_locked().await, Ok(false)) {
            return Err(format!("{name} is still held"));
        }
    }
    let count = c.count_down_latch("latch").count().await;
    if count.as_ref().ok() != Some(&(LATCH_COUNT - 1)) {
        return Err(format!("latch count {count:?}"));
    }
    let state = c.local_state();
    if state != LocalState::default() {
        return Err(format!("local state {state:?}"));
    }
    Ok(())
}

async fn nothing_is_lost_through(fault: Fault) {
    let rig = Rig::start().await;
    let steps = prepare(&rig).await;
    let busy = rig.begin(fault);
    let began = Instant::now();
    let callers: Vec<_> = steps
        .into_iter()
        .map(|(what, step)| {
            tokio::spawn(async move {
                let started = Instant::now();
                step.await;
                (what, started.elapsed())
            })
        })
        .collect();
    for caller in callers {
        let (what, took) = caller.await.expect("caller task");
        assert!(
            took < CALLER_BOUND,
            "{fault:?}: {what} kept its caller waiting {took:?}"
        );
    }
    tokio::time::sleep(OUTAGE.saturating_sub(began.elapsed())).await;
    rig.end(fault, busy);
    let ended = Instant::now();

    let mut last = Err(String::new());
    while ended.elapsed() < RECOVERY {
        last = recovered(&rig).await;
        if last.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if let Err(missing) = last {
        panic!(
            "{fault:?}: not recovered {RECOVERY:?} after a {OUTAGE:?} fault: {missing}; \
             stats {:?}",
            rig.client.stats()
        );
    }
    println!(
        "{fault:?}: recovered after {:?} (fault of {OUTAGE:?}, command timeout \
         {COMMAND_TIMEOUT:?}); stats {:?}",
        ended.elapsed(),
        rig.client.stats()
    );
    assert_eq!(rig.client.stats().unconfirmed_releases, 0);
    rig.client.shutdown().await;
}

#[tokio::test]
async fn nothing_is_lost_when_requests_are_dropped() {
    nothing_is_lost_through(Fault::DropRequests).await;
}

#[tokio::test]
async fn nothing_is_lost_when_replies_are_dropped() {
    nothing_is_lost_through(Fault::DropReplies).await;
}

#[tokio::test]
async fn nothing_is_lost_when_redis_is_stopped() {
    nothing_is_lost_through(Fault::Stop).await;
}

#[tokio::test]
async fn nothing_is_lost_when_redis_is_busy() {
    nothing_is_lost_through(Fault::Busy).await;
}

/// A give-back still unconfirmed at shutdown gets one last attempt; when that fails too, it
/// is counted, and shutdown returns within about a command timeout.
#[tokio::test]
async fn shutdown_counts_a_give_back_it_could_not_make() {
    let rig = Rig::start().await;
    let semaphore = rig.client.semaphore("lost-at-shutdown");
    assert!(semaphore.try_set_permits(1).await.unwrap());
    let permit = semaphore.acquire().await.unwrap();
    rig.proxy.blackhole(true);
    assert!(permit.release().await.is_err(), "Redis cannot confirm it");
    assert_eq!(rig.client.local_state().pending_releases, 1);
    let started = Instant::now();
    rig.client.shutdown().await;
    let took = started.elapsed();
    assert!(
        took < COMMAND_TIMEOUT * 4,
        "shutdown waited {took:?} for the last attempt"
    );
    assert_eq!(rig.client.stats().unconfirmed_releases, 1);
    assert_eq!(rig.client.local_state().pending_releases, 0);
    rig.proxy.blackhole(false);
}

/// A permit dropped right before shutdown is waited for too: its release is in flight from
/// the drop on, not only once its first attempt failed.
#[tokio::test]
async fn a_permit_dropped_right_before_shutdown_is_given_back() {
    let rig = Rig::start().await;
    let semaphore = rig.client.semaphore("dropped-before-shutdown");
    assert!(semaphore.try_set_permits(1).await.unwrap());
    let permit = semaphore.acquire().await.unwrap();
    drop(permit);
    rig.client.shutdown().await;
    assert_eq!(rig.client.stats().unconfirmed_releases, 0);
    let check = Client::connect(rig.server.url()).await.unwrap();
    assert_eq!(
        check
            .semaphore("dropped-before-shutdown")
            .available_permits()
            .await
            .unwrap(),
        1
    );
    // The same with Redis unreachable: counted, not silently dropped.
    let rig = Rig::start().await;
    let semaphore = rig.client.semaphore("dropped-in-an-outage");
    assert!(semaphore.try_set_permits(1).await.unwrap());
    let permit = semaphore.acquire().await.unwrap();
    rig.proxy.blackhole(true);
    drop(permit);
    rig.client.shutdown().await;
    assert_eq!(rig.client.stats().unconfirmed_releases, 1);
    rig.proxy.blackhole(false);
}
