//! The read-write lock's hot path: what an operation costs inside Redis, and how
//! local readers of one client share one Redis read hold: O(1) scripts for N readers, no
//! starving of writers, every reader lost with the shared hold, nothing left by a reader cut
//! while founding one.
//!
//! Every test starts its own server, so commands can be counted with `INFO commandstats`.
//! Waits are for events, with generous bounds (for a small, loaded machine).

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{
    assert_idle, client, client_with_watchdog, cut_after, cut_at_await, eventually, exists,
    join_all, ms, rw_hash_key, rw_readers_key, rw_writers_key, zcard,
};
use redisync::prelude::*;
use redisync::LocalState;
use redisync_test_harness::RedisServer;

/// How long a condition that should hold "soon" may take before the test fails.
const SETTLE: Duration = Duration::from_secs(10);

fn drain_channel(name: &str) -> String {
    common::keys::rw(name).drain
}

/// Neither holds nor waiting-writer marks exist any more (the fence may stay).
fn lock_is_gone(server: &RedisServer, name: &str) -> bool {
    !exists(server, &rw_hash_key(name))
        && !exists(server, &rw_readers_key(name))
        && !exists(server, &rw_writers_key(name))
}

/// Calls of `command` since the last `CONFIG RESETSTAT`.
fn calls(server: &RedisServer, command: &str) -> u64 {
    server.command_calls(command)
}

/// Runs `op` `n` times between two `INFO commandstats` samples (after `CONFIG RESETSTAT`) and
/// returns the calls per run of each command, leaving out the sampling commands themselves.
async fn commands_per_op<F, Fut>(server: &RedisServer, n: u64, mut op: F) -> BTreeMap<String, f64>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    server.cmd(&["CONFIG", "RESETSTAT"]);
    for _ in 0..n {
        op().await;
    }
    per_op(server, n)
}

/// The calls of each command since the last `CONFIG RESETSTAT`, per operation of `n`,
/// leaving out the sampling commands themselves.
fn per_op(server: &RedisServer, n: u64) -> BTreeMap<String, f64> {
    common::operation_stats(server)
        .into_iter()
        .map(|(name, calls)| (name, calls as f64 / n as f64))
        .collect()
}

fn total(stats: &BTreeMap<String, f64>) -> f64 {
    stats.values().sum()
}

// ---------------------------------------------------------------------------------------------
// Commands per uncontended cycle: the numbers the crate's key table states.

/// An unlock sends only the keys and arguments its script reads, since Redis spends time on
/// each one sent: it keeps no record and names no waiter, so it leaves off the record's key
/// and those two arguments (2 keys and 2 arguments, not 3 and 4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unlock_sends_only_the_keys_and_arguments_its_script_reads() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let rw = c.read_write_lock("short");
    // Warm up: Redis knows the scripts (a first EVALSHA of each would fail, and be logged).
    rw.read().await.unwrap().unlock().await.unwrap();
    rw.write().await.unwrap().unlock().await.unwrap();
    common::log_every_request(&server);
    rw.read().await.unwrap().unlock().await.unwrap();
    rw.write().await.unwrap().unlock().await.unwrap();
    // Each acquire as it was (a first try reads all of its own), each unlock short.
    assert_eq!(
        common::script_requests(&server),
        vec![(4, 6), (2, 2), (6, 6), (2, 2)],
        "(keys, arguments) of read, unlock, write, unlock"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncontended_cycles_cost_what_the_docs_state() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let rw = c.read_write_lock("cycle");
    // Load the scripts first (a NOSCRIPT round would count).
    rw.read().await.unwrap().unlock().await.unwrap();
    let write = rw.write().await.unwrap();
    // The watchdog subscribes the client's lost-notice channel after its first hold, in the
    // background: under load that SUBSCRIBE could land in a measured window.
    common::lost_notices_subscribed(&server, &c).await;
    write.unlock().await.unwrap();

    let read = commands_per_op(&server, 50, || async {
        rw.read().await.unwrap().unlock().await.unwrap();
    })
    .await;
    let write = commands_per_op(&server, 50, || async {
        rw.write().await.unwrap().unlock().await.unwrap();
    })
    .await;
    println!("read + unlock: {read:?}\nwrite + unlock: {write:?}");
    // The "Commands per operation" table of `ReadWriteLock`: read 7 + 3, write 6 + 3.
    assert_eq!(total(&read), 10.0, "read + unlock: {read:?}");
    assert_eq!(total(&write), 9.0, "write + unlock: {write:?}");
    for stats in [&read, &write] {
        assert_eq!(
            stats.get("evalsha"),
            Some(&2.0),
            "one script each way: {stats:?}"
        );
        // Nobody waits: nothing is published; the acquire's reply came: no release record.
        for absent in ["publish", "set", "subscribe"] {
            assert!(!stats.contains_key(absent), "{absent} in {stats:?}");
        }
    }
    assert!(lock_is_gone(&server, "cycle"));
    // Nothing but the fencing counter is left: the releases kept no record.
    let keys = common::strings(&server.cmd(&["KEYS", "*"]));
    assert_eq!(keys, vec![common::keys::rw("cycle").fence]);
    assert_idle(&[&c]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_publish_only_while_someone_waits() {
    let server = RedisServer::start();
    let name = "publish";
    let (a, b) = (client(&server).await, client(&server).await);
    let writer = a.read_write_lock(name);

    // A reader waits behind the write hold: the write release wakes it with one message.
    let write = writer.write().await.unwrap();
    let reader = b.read_write_lock(name);
    let waiting = tokio::spawn(async move { reader.read().await.unwrap() });
    eventually("the reader waits", SETTLE, || {
        b.stats().contended_waits == 1
    })
    .await;
    server.cmd(&["CONFIG", "RESETSTAT"]);
    write.unlock().await.unwrap();
    let read = tokio::time::timeout(SETTLE, waiting)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        calls(&server, "publish"),
        1,
        "one wake-up for the waiting reader"
    );
    read.unlock().await.unwrap();

    // A reader that gave up leaves no registration: the next release publishes nothing.
    let write = writer.write().await.unwrap();
    let gave_up = b.read_write_lock(name).try_read_for(ms(100)).await.unwrap();
    assert!(gave_up.is_none());
    server.cmd(&["CONFIG", "RESETSTAT"]);
    write.unlock().await.unwrap();
    assert!(lock_is_gone(&server, name));
    assert_eq!(
        calls(&server, "publish"),
        0,
        "a message for a reader that left"
    );
    // ... and one that was cut while waiting neither.
    let write = writer.write().await.unwrap();
    let lock = b.read_write_lock(name);
    let cut = tokio::spawn(async move { lock.read().await.map(drop) });
    let registered = || {
        let fields = server.cmd(&["HKEYS", &rw_hash_key(name)]);
        let fields = redis::from_redis_value_ref::<Vec<String>>(&fields).unwrap_or_default();
        fields.iter().any(|f| f == "w" || f.starts_with("w:"))
    };
    eventually("the reader waits, registered", SETTLE, registered).await;
    cut.abort();
    // Its withdrawal runs in the background.
    eventually("the cut reader's registration is gone", SETTLE, || {
        !registered()
    })
    .await;
    server.cmd(&["CONFIG", "RESETSTAT"]);
    write.unlock().await.unwrap();
    assert_eq!(
        calls(&server, "publish"),
        0,
        "a message for a reader that was cut"
    );
    assert_idle(&[&a, &b]);
}

// ---------------------------------------------------------------------------------------------
// Many local readers, one Redis hold.

/// `n` readers of one client (each with its own handle) all holding at once, then all
/// leaving: returns the scripts Redis ran for them, and the read holds it had while they all
/// held.
async fn scripts_for_readers(server: &RedisServer, c: &Client, name: &str, n: usize) -> (u64, i64) {
    server.cmd(&["CONFIG", "RESETSTAT"]);
    let holding = Arc::new(AtomicUsize::new(0));
    let (leave_tx, leave_rx) = tokio::sync::watch::channel(false);
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let lock = c.read_write_lock(name);
            let (holding, mut leave) = (holding.clone(), leave_rx.clone());
            tokio::spawn(async move {
                let guard = lock.read().await.unwrap();
                holding.fetch_add(1, Ordering::SeqCst);
                leave.wait_for(|go| *go).await.unwrap();
                guard.unlock().await.unwrap();
            })
        })
        .collect();
    eventually(format_args!("{n} readers hold"), SETTLE, || {
        holding.load(Ordering::SeqCst) == n
    })
    .await;
    let holds = zcard(server, &rw_readers_key(name));
    leave_tx.send(true).unwrap();
    join_all(tasks).await;
    eventually("the lock is gone", SETTLE, || lock_is_gone(server, name)).await;
    eventually("the client is idle", SETTLE, || {
        c.local_state() == LocalState::default()
    })
    .await;
    (calls(server, "evalsha"), holds)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_local_readers_share_one_redis_hold() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let name = "shared";
    // Load the scripts first.
    c.read_write_lock(name)
        .read()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    let mut seen = Vec::new();
    for n in [2, 8, 64] {
        let (scripts, holds) = scripts_for_readers(&server, &c, name, n).await;
        println!("{n} readers: {scripts} scripts, {holds} Redis read holds");
        seen.push((n, scripts, holds));
    }
    for (n, scripts, holds) in seen {
        // The first reader takes a hold of its own; the second founds the shared hold the
        // others join. Two acquires and two releases, however many readers.
        assert_eq!(holds, 2, "{n} readers");
        assert_eq!(scripts, 4, "{n} readers cost {scripts} scripts");
    }
    assert!(c.stats().acquires >= 2 + 8 + 64);
    assert_eq!(server.numsub(&drain_channel(name)), 0);
}

// ---------------------------------------------------------------------------------------------
// Writer preference: a client full of readers does not starve a writer.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_is_never_starved_by_a_client_full_of_readers() {
    const READERS: usize = 32;
    const ROUNDS: usize = 10;
    let server = RedisServer::start();
    let name = "starve";
    let readers_client = client(&server).await;
    let writer_client = client(&server).await;
    let stop = Arc::new(AtomicBool::new(false));
    let inside = Arc::new(AtomicUsize::new(0));
    let writer_in = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..READERS)
        .map(|i| {
            let lock = readers_client.read_write_lock(name);
            let (stop, inside, writer_in, reads) = (
                stop.clone(),
                inside.clone(),
                writer_in.clone(),
                reads.clone(),
            );
            tokio::spawn(async move {
                let mut k = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    let guard = lock.read().await.unwrap();
                    inside.fetch_add(1, Ordering::SeqCst);
                    assert!(
                        !writer_in.load(Ordering::SeqCst),
                        "a reader with the writer"
                    );
                    // Overlapping holds: some yield, some sleep a little.
                    if (i as u64 + k).is_multiple_of(3) {
                        tokio::time::sleep(ms(1)).await;
                    } else {
                        tokio::task::yield_now().await;
                    }
                    assert!(
                        !writer_in.load(Ordering::SeqCst),
                        "the writer with a reader"
                    );
                    inside.fetch_sub(1, Ordering::SeqCst);
                    guard.unlock().await.unwrap();
                    reads.fetch_add(1, Ordering::SeqCst);
                    k += 1;
                }
            })
        })
        .collect();
    eventually("the readers read", SETTLE, || {
        reads.load(Ordering::SeqCst) >= 1000
    })
    .await;

    let writer = writer_client.read_write_lock(name);
    let mut waits = Vec::new();
    for _ in 0..ROUNDS {
        let started = Instant::now();
        let guard = tokio::time::timeout(SETTLE, writer.write())
            .await
            .expect("a client full of readers starves the writer")
            .unwrap();
        waits.push(started.elapsed());
        writer_in.store(true, Ordering::SeqCst);
        assert_eq!(
            inside.load(Ordering::SeqCst),
            0,
            "readers hold with the writer"
        );
        tokio::time::sleep(ms(5)).await;
        assert_eq!(
            inside.load(Ordering::SeqCst),
            0,
            "readers hold with the writer"
        );
        writer_in.store(false, Ordering::SeqCst);
        guard.unlock().await.unwrap();
        // The readers get back in between the writes.
        let before = reads.load(Ordering::SeqCst);
        eventually("the readers read again", SETTLE, || {
            reads.load(Ordering::SeqCst) > before + 100
        })
        .await;
    }
    println!(
        "the writer waited {waits:?}; {} reads",
        reads.load(Ordering::SeqCst)
    );
    stop.store(true, Ordering::SeqCst);
    tokio::time::timeout(SETTLE, join_all(tasks))
        .await
        .expect("the readers stop");
    eventually("everything is gone", SETTLE, || {
        lock_is_gone(&server, name)
            && readers_client.local_state() == LocalState::default()
            && writer_client.local_state() == LocalState::default()
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// A lost shared hold: every local reader's guard is lost.

/// `n` readers of one client holding at once, each with its own handle.
async fn hold_readers(c: &Client, name: &str, n: usize) -> Vec<ReadGuard> {
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let lock = c.read_write_lock(name);
            tokio::spawn(async move { lock.read().await.unwrap() })
        })
        .collect();
    join_all(tasks).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_shared_hold_makes_every_local_readers_guard_lost() {
    let server = RedisServer::start();
    let name = "lost";
    let other = client(&server).await;

    // Force-unlocked: the client hears it on the drain channel and checks at once, well
    // before its next renewal (the watchdog's 30 s lease is renewed every 10 s).
    let c = client(&server).await;
    let guards = hold_readers(&c, name, 8).await;
    assert_eq!(
        zcard(&server, &rw_readers_key(name)),
        2,
        "a solo hold and a shared one"
    );
    assert!(guards.iter().all(|g| !g.is_lost()));
    assert!(other.read_write_lock(name).force_unlock().await.unwrap());
    // The readers' roles (solo or shared) are not known here: the seven shared ones are lost
    // within a round trip or so; 3 s is far within the first renewal (10 s).
    let started = Instant::now();
    eventually(
        "the shared readers are lost",
        Duration::from_secs(3),
        || guards.iter().filter(|g| g.is_lost()).count() >= 7,
    )
    .await;
    println!(
        "seven shared readers lost {:?} after the force-unlock",
        started.elapsed()
    );
    let mut not_owner = 0;
    for guard in guards {
        match guard.unlock().await {
            Err(Error::NotOwner) => not_owner += 1,
            other => assert!(other.is_ok(), "{other:?}"),
        }
    }
    // The solo reader's hold was freed too; its unlock asks Redis, which says so.
    assert_eq!(not_owner, 8);
    c.shutdown().await;

    // The keys deleted behind the client's back: the next renewal finds the holds gone.
    let c = client_with_watchdog(&server, ms(600)).await;
    let guards = hold_readers(&c, name, 8).await;
    assert_eq!(zcard(&server, &rw_readers_key(name)), 2);
    server.cmd(&["DEL", &rw_hash_key(name), &rw_readers_key(name)]);
    for guard in &guards {
        tokio::time::timeout(SETTLE, guard.lost())
            .await
            .expect("a reader of a deleted hold is told it is lost");
        assert!(guard.is_lost());
    }
    for guard in guards {
        assert!(matches!(guard.unlock().await, Err(Error::NotOwner)));
    }
    eventually("the client is idle", SETTLE, || {
        c.local_state() == LocalState::default()
    })
    .await;
    assert!(c.stats().lost_leases >= 2, "{:?}", c.stats());
}

// ---------------------------------------------------------------------------------------------
// Re-entry and upgrade of a reader in a shared hold.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_in_a_shared_hold_re_enters_past_a_waiting_writer_and_cannot_upgrade() {
    let server = RedisServer::start();
    let name = "reenter";
    let c = client(&server).await;
    let writer_client = client(&server).await;
    let solo = c.read_write_lock(name);
    let shared = c.read_write_lock(name);
    let first = solo.read().await.unwrap();
    let second = shared.read().await.unwrap(); // founds the shared hold
    let third = c.read_write_lock(name).read().await.unwrap(); // joins it
    assert_eq!(zcard(&server, &rw_readers_key(name)), 2);

    // An upgrade is refused at once, without a request.
    server.cmd(&["CONFIG", "RESETSTAT"]);
    assert!(matches!(
        shared.try_write().await,
        Err(Error::UpgradeNotSupported)
    ));
    assert!(matches!(
        shared.write().await,
        Err(Error::UpgradeNotSupported)
    ));
    assert_eq!(calls(&server, "evalsha"), 0);

    // A writer waits; the client hears it and stops admitting newcomers.
    let writer = writer_client.read_write_lock(name);
    let task = tokio::spawn(async move {
        let guard = writer.write().await.unwrap();
        let token = guard.fencing_token();
        guard.unlock().await.unwrap();
        token
    });
    eventually("the writer waits", SETTLE, || {
        zcard(&server, &rw_writers_key(name)) == 1
    })
    .await;
    eventually("a newcomer gives way to the writer", SETTLE, || {
        futures_now(c.read_write_lock(name).try_read()).is_none_or(|r| r.unwrap().is_none())
    })
    .await;
    // The handle that reads re-enters at once, past the writer.
    let again = tokio::time::timeout(ms(500), shared.read())
        .await
        .expect("a reader in the shared hold re-enters at once")
        .unwrap();
    assert!(!task.is_finished());
    for guard in [again, third, second, first] {
        guard.unlock().await.unwrap();
    }
    tokio::time::timeout(SETTLE, task)
        .await
        .expect("the writer gets in once the readers left")
        .unwrap();
    eventually("the lock is gone", SETTLE, || lock_is_gone(&server, name)).await;
    eventually("the clients are idle", SETTLE, || {
        c.local_state() == LocalState::default()
            && writer_client.local_state() == LocalState::default()
    })
    .await;
}

/// Polls `future` once: its output if it completed at once.
fn futures_now<F: std::future::Future>(future: F) -> Option<F::Output> {
    let mut future = std::pin::pin!(future);
    let waker = std::task::Waker::noop();
    match future
        .as_mut()
        .poll(&mut std::task::Context::from_waker(waker))
    {
        std::task::Poll::Ready(out) => Some(out),
        std::task::Poll::Pending => None,
    }
}

// ---------------------------------------------------------------------------------------------
// Cancellation of a reader founding a shared hold.

/// What is left after a founder was cut: only `solo_holds` Redis read holds (the solo
/// reader's), no shared hold renewed, no drain subscription.
async fn assert_founder_left_nothing(
    server: &RedisServer,
    c: &Client,
    name: &str,
    solo_holds: i64,
    what: &str,
) {
    eventually(format_args!("{what} left nothing behind"), SETTLE, || {
        let local = c.local_state();
        zcard(server, &rw_readers_key(name)) == solo_holds
            && local.renewed_holds as i64 == solo_holds
            && local.pending_releases == 0
            && server.numsub(&drain_channel(name)) == 0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_cut_while_founding_a_shared_hold_leaves_nothing() {
    let server = RedisServer::start();
    let name = "cut";
    let c = client(&server).await;
    let other = client(&server).await;
    // A solo reader holds, so the next reader of this client founds a shared hold.
    let solo = c.read_write_lock(name).read().await.unwrap();
    let read = || {
        let lock = c.read_write_lock(name);
        async move { lock.read().await }
    };
    let mut completed = 0;
    for pendings in 0..8 {
        if let Some(guard) = cut_at_await(pendings, read()).await {
            completed += 1;
            drop(guard.unwrap());
        }
        assert_founder_left_nothing(
            &server,
            &c,
            name,
            1,
            &format!("a founder cut at await {pendings}"),
        )
        .await;
    }
    let mut cut = Duration::ZERO;
    while cut < ms(3) {
        if let Some(guard) = cut_after(cut, read()).await {
            completed += 1;
            drop(guard.unwrap());
        }
        assert_founder_left_nothing(
            &server,
            &c,
            name,
            1,
            &format!("a founder cut after {cut:?}"),
        )
        .await;
        cut += Duration::from_micros(100);
    }
    assert!(completed >= 1, "no founder ever completed");

    // The same while a writer of another client holds: the founder waits in Redis, and is
    // cut there too.
    solo.unlock().await.unwrap();
    let write = other.read_write_lock(name).write().await.unwrap();
    let blocked_solo = tokio::spawn({
        let lock = c.read_write_lock(name);
        async move { lock.read().await.unwrap() }
    });
    eventually("the solo reader waits", SETTLE, || {
        c.stats().contended_waits >= 1
    })
    .await;
    for cut in [0, 1, 2, 5, 10, 50].map(ms) {
        assert!(tokio::time::timeout(cut, read()).await.is_err());
        assert_founder_left_nothing(
            &server,
            &c,
            name,
            0,
            &format!("a waiting founder cut after {cut:?}"),
        )
        .await;
    }
    write.unlock().await.unwrap();
    let solo = tokio::time::timeout(SETTLE, blocked_solo)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(zcard(&server, &rw_readers_key(name)), 1);
    solo.unlock().await.unwrap();
    eventually("the lock is gone", SETTLE, || lock_is_gone(&server, name)).await;
    eventually("the clients are idle", SETTLE, || {
        c.local_state() == LocalState::default() && other.local_state() == LocalState::default()
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// The documented ACL rules cover the shared-read machinery.

/// The rules of DEPLOYMENT.md's ACL block (after `ACL SETUSER app`), with a password.
fn documented_acl_rules() -> Vec<String> {
    let doc = include_str!("../../DEPLOYMENT.md");
    let block = doc
        .split("ACL SETUSER app ")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("DEPLOYMENT.md has an ACL SETUSER block");
    block
        .split_whitespace()
        .map(|rule| match rule {
            ">PASSWORD" => ">s3cret".to_owned(),
            other => other.to_owned(),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_reads_work_under_the_documented_acl_rules() {
    let server = RedisServer::start();
    let rules = documented_acl_rules();
    let mut args = vec!["ACL", "SETUSER", "app"];
    args.extend(rules.iter().map(String::as_str));
    server.cmd(&args);
    let url = format!("redis://app:s3cret@127.0.0.1:{}/", server.port());
    let c = Client::connect(url.as_str()).await.unwrap();
    let w = Client::connect(url.as_str()).await.unwrap();
    let name = "acl-shared";
    // A solo reader, a founder, a joiner; a writer waits (drain message, check script).
    let guards = hold_readers(&c, name, 3).await;
    assert_eq!(zcard(&server, &rw_readers_key(name)), 2);
    let writer = w.read_write_lock(name);
    let task = tokio::spawn(async move {
        let guard = writer.write().await.unwrap();
        guard.unlock().await.unwrap();
    });
    eventually("the writer waits", SETTLE, || {
        zcard(&server, &rw_writers_key(name)) == 1
    })
    .await;
    eventually("the shared hold drains", SETTLE, || {
        futures_now(c.read_write_lock(name).try_read()).is_none_or(|r| r.unwrap().is_none())
    })
    .await;
    for guard in guards {
        guard.unlock().await.unwrap();
    }
    tokio::time::timeout(SETTLE, task).await.unwrap().unwrap();
    // force_unlock tells the shared holders (drain message) and they check: well before the
    // first renewal (10 s), which would tell them too.
    let guards = hold_readers(&c, name, 3).await;
    assert!(w.read_write_lock(name).force_unlock().await.unwrap());
    eventually(
        "the shared readers are lost",
        Duration::from_secs(3),
        || guards.iter().filter(|g| g.is_lost()).count() >= 2,
    )
    .await;
    drop(guards);
    eventually("the clients are idle", SETTLE, || {
        c.local_state() == LocalState::default() && w.local_state() == LocalState::default()
    })
    .await;
    assert_eq!(c.stats().unconfirmed_releases, 0);
}

/// Commands per operation next to other holds, as the crate's key table documents them: a
/// read acquire 6 (plus `PEXPIREAT` ×2 only when its lease ends last), a release that is not
/// the longest hold 8, the release of the longest 11. (The uncontended cycles are checked
/// above; reads/s of one client's 64 readers is the benchmark's scenario 5d.)
#[tokio::test]
async fn commands_next_to_other_holds_are_as_documented() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let other = client(&server).await;
    let held = other.read_write_lock("beside").read().await.unwrap();
    // The watchdog of `other` subscribes its lost-notice channel in the background once it
    // has a hold: that SUBSCRIBE must not land in a measured window. (`c`'s fixed-lease holds
    // have no watchdog.)
    common::lost_notices_subscribed(&server, &other).await;
    // Load the scripts first.
    c.read_write_lock("beside")
        .read_with_lease(Duration::from_secs(60))
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    // Fixed-lease reads (never shared) of new handles, each ending later than the last.
    // Redis keeps lease ends in milliseconds, and on an idle box several acquires fit in one:
    // with equal leases, an early hold could end in the same millisecond as the last one and
    // count as the longest (its release then adds a ZRANGE and two PEXPIREAT to the counts).
    // Each lease is a few milliseconds longer.
    server.cmd(&["CONFIG", "RESETSTAT"]);
    let mut guards = Vec::new();
    for i in 0..20 {
        let lock = c.read_write_lock("beside");
        let lease = Duration::from_secs(60) + ms(5 * i);
        guards.push(lock.read_with_lease(lease).await.unwrap());
    }
    let mut acquire = per_op(&server, 20);
    let extended = acquire.remove("pexpireat").unwrap_or(0.0);
    assert_eq!(total(&acquire), 6.0, "read acquire: {acquire:?}");
    assert!(extended <= 2.0, "read acquire: {extended} PEXPIREAT each");
    let newest_first = guards.split_off(10);
    server.cmd(&["CONFIG", "RESETSTAT"]);
    for guard in guards {
        guard.unlock().await.unwrap();
    }
    let release = per_op(&server, 10);
    assert_eq!(
        total(&release),
        8.0,
        "release, not the longest: {release:?}"
    );
    server.cmd(&["CONFIG", "RESETSTAT"]);
    for guard in newest_first.into_iter().rev() {
        guard.unlock().await.unwrap();
    }
    let release = per_op(&server, 10);
    assert_eq!(total(&release), 11.0, "release of the longest: {release:?}");
    held.unlock().await.unwrap();
}

/// A read granted while only a lapsed waiting writer's mark exists (no hash yet) creates the
/// hash with its expiry: an expiry set before the hash is written would leave the hash
/// without one (which the chaos test's PTTL sampler looks for).
#[tokio::test]
async fn a_read_granted_past_a_lapsed_writer_mark_leaves_the_hash_expiring() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let name = "lapsed-mark";
    // A mark that lapsed a second ago, in a set that has not expired yet.
    server.cmd(&["ZADD", &rw_writers_key(name), "1", "gone-writer"]);
    server.cmd(&["PEXPIRE", &rw_writers_key(name), "60000"]);
    let guard = c
        .read_write_lock(name)
        .read_with_lease(Duration::from_secs(30))
        .await
        .expect("read");
    let pttl = common::int(&server, &["PTTL", &rw_hash_key(name)]);
    assert!(pttl > 0, "the hash has no expiry: PTTL {pttl}");
    guard.unlock().await.expect("unlock");
}
