//! `WaitStrategy::Poll`: every primitive works for a client that never subscribes, on a server
//! whose ACL user has no channel access and on one without `SUBSCRIBE`; the waiters of one
//! primitive in one client still ask Redis once per interval together.

mod common;

use std::time::{Duration, Instant};

use common::ms;
use futures_util::StreamExt;
use redisync::prelude::*;
use redisync_test_harness::RedisServer;

const POLL: WaitStrategy = WaitStrategy::Poll {
    interval: Duration::from_millis(50),
};

/// Long enough for any wait of these tests on a loaded machine, far below the 30 s leases a
/// waiter would otherwise sit out.
const WOKEN_WITHIN: Duration = Duration::from_secs(10);

/// DEPLOYMENT.md's rules without any channel access: no pattern, no SUBSCRIBE.
const RULES_WITHOUT_CHANNELS: &str = "on >s3cret resetkeys ~redisync:* resetchannels -@all \
    +evalsha +script|load +ping +hello +select \
    +decr +decrby +del +exists +get +hdel +hget +hgetall +hincrby +hlen +hmget +hset \
    +incr +incrby +mget +pexpire +pexpireat +pttl +publish +rename +set +time +type +zadd \
    +zcard +zcount +zrange +zrangebyscore +zrem +zremrangebyscore +zscore";

async fn polling_client(url: &str) -> Client {
    Client::builder(url)
        .wait_strategy(POLL)
        .command_timeout(Duration::from_secs(2))
        .build()
        .await
        .expect("connect")
}

/// Awaits `waiting` (a spawned wait), failing the test if it takes longer than
/// [`WOKEN_WITHIN`] or fails.
async fn woken<T: std::fmt::Debug>(what: &str, waiting: tokio::task::JoinHandle<Result<T>>) -> T {
    tokio::time::timeout(WOKEN_WITHIN, waiting)
        .await
        .unwrap_or_else(|_| panic!("{what}: not woken"))
        .expect("task")
        .unwrap_or_else(|err| panic!("{what}: {err}"))
}

/// Lets a spawned waiter get to its wait.
async fn settle() {
    tokio::time::sleep(ms(150)).await;
}

/// One contended hand-off of every primitive, between two polling clients.
async fn every_primitive_hands_over(a: &Client, b: &Client) {
    // Locks: a waiter learns of the release by polling, long before the 30 s lease.
    let held = a.lock("poll-lock").lock().await.expect("lock");
    let waiter = {
        let lock = b.lock("poll-lock");
        tokio::spawn(async move { lock.lock().await.map(|g| g.fencing_token()) })
    };
    settle().await;
    let released = Instant::now();
    held.unlock().await.expect("unlock");
    let token = woken("lock", waiter).await;
    assert!(token > 1, "fencing still counts: {token}");
    assert!(released.elapsed() < WOKEN_WITHIN);

    let held = a.fair_lock("poll-fair").lock().await.expect("fair lock");
    let waiter = {
        let lock = b.fair_lock("poll-fair");
        tokio::spawn(async move { lock.lock().await.map(|g| g.fencing_token()) })
    };
    settle().await;
    held.unlock().await.expect("fair unlock");
    woken("fair lock", waiter).await;

    // Read-write lock: readers (coalesced in b) wait for a writer, then a writer for them.
    let rw = a.read_write_lock("poll-rw");
    let write = rw.write().await.expect("write");
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let rw = b.read_write_lock("poll-rw");
            tokio::spawn(async move {
                let guard = rw.read().await?;
                guard.unlock().await
            })
        })
        .collect();
    settle().await;
    write.unlock().await.expect("write unlock");
    for reader in readers {
        woken("reader", reader).await;
    }
    let read = b.read_write_lock("poll-rw").read().await.expect("read");
    let writer = {
        let rw = a.read_write_lock("poll-rw");
        tokio::spawn(async move { rw.write().await?.unlock().await })
    };
    settle().await;
    read.unlock().await.expect("read unlock");
    woken("writer", writer).await;

    // Semaphores.
    let sem = a.semaphore("poll-sem");
    sem.try_set_permits(1).await.expect("permits");
    let permit = sem.acquire().await.expect("permit");
    let waiter = {
        let sem = b.semaphore("poll-sem");
        tokio::spawn(async move { sem.acquire().await?.release().await })
    };
    settle().await;
    permit.release().await.expect("release");
    woken("semaphore", waiter).await;

    let xsem = a.expirable_semaphore("poll-xsem");
    xsem.try_set_permits(1).await.expect("permits");
    let permit = xsem.acquire().await.expect("permit");
    let waiter = {
        let xsem = b.expirable_semaphore("poll-xsem");
        tokio::spawn(async move { xsem.acquire().await?.release().await })
    };
    settle().await;
    permit.release().await.expect("release");
    woken("expirable semaphore", waiter).await;

    // Latch.
    let latch = a.count_down_latch("poll-latch");
    latch.try_set_count(1).await.expect("arm");
    let waiter = {
        let latch = b.count_down_latch("poll-latch");
        tokio::spawn(async move { latch.wait().await })
    };
    settle().await;
    latch.count_down().await.expect("count down");
    woken("latch", waiter).await;

    // Election: a campaigner waits for a resignation, and an observer sees it.
    let lead = a
        .leader_election("poll-election")
        .campaign("a")
        .await
        .expect("campaign");
    let mut changes = Box::pin(b.leader_election("poll-election").observe());
    let first = tokio::time::timeout(WOKEN_WITHIN, changes.next())
        .await
        .expect("the current leader")
        .expect("a stream item")
        .expect("observe");
    assert_eq!(first.map(|l| l.value), Some("a".to_owned()));
    let campaigner = {
        let election = b.leader_election("poll-election");
        tokio::spawn(async move { election.campaign("b").await })
    };
    settle().await;
    lead.resign().await.expect("resign");
    let second = woken("campaign", campaigner).await;
    assert!(second.term() > 1, "terms grow: {}", second.term());
    let mut seen = Vec::new();
    while seen.last().map(|l: &Option<String>| l.as_deref()) != Some(Some("b")) {
        let next = tokio::time::timeout(WOKEN_WITHIN, changes.next())
            .await
            .expect("the observer sees the change")
            .expect("a stream item")
            .expect("observe");
        seen.push(next.map(|l| l.value));
    }
    second.resign().await.expect("resign");

    // Rate limiter: a waiter sleeps its retry time (no wake-up needed), and a rate change
    // re-evaluates it.
    let limiter = a.rate_limiter("poll-rate");
    limiter
        .set_rate(redisync::Rate::new(1, Duration::from_secs(3600)))
        .await
        .expect("rate");
    assert!(limiter.try_acquire(1).await.expect("decision").allowed);
    let waiter = {
        let limiter = b.rate_limiter("poll-rate");
        tokio::spawn(async move { limiter.acquire(1).await })
    };
    settle().await;
    limiter
        .set_rate(redisync::Rate::per_second(1000))
        .await
        .expect("faster rate");
    woken("rate limiter", waiter).await;

    // Multi-lock: waits for one of its locks.
    let held = a.lock("poll-a").lock().await.expect("lock a");
    let waiter = {
        let multi = b.multi_lock([b.lock("poll-a"), b.lock("poll-b")]);
        tokio::spawn(async move { multi.lock().await?.unlock().await })
    };
    settle().await;
    held.unlock().await.expect("unlock a");
    woken("multi-lock", waiter).await;
}

/// The client sockets of `server` with a subscription, from `CLIENT LIST`.
fn subscribed_connections(server: &RedisServer) -> usize {
    let list = common::text(&server.cmd(&["CLIENT", "LIST"]));
    list.lines()
        .filter(|line| {
            line.split(' ').any(|field| {
                ["sub=", "psub=", "ssub="]
                    .iter()
                    .any(|prefix| field.strip_prefix(prefix).is_some_and(|count| count != "0"))
            })
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_primitive_works_for_an_acl_user_without_channel_access() {
    let server = RedisServer::start();
    let mut args = vec!["ACL", "SETUSER", "app"];
    args.extend(RULES_WITHOUT_CHANNELS.split_whitespace());
    server.cmd(&args);
    server.cmd(&["ACL", "LOG", "RESET"]);
    let url = format!("redis://app:s3cret@127.0.0.1:{}/", server.port());
    let a = polling_client(&url).await;
    let b = polling_client(&url).await;

    every_primitive_hands_over(&a, &b).await;

    assert_eq!(subscribed_connections(&server), 0);
    // Redis logs every refusal. The scripts' publishes are refused (inside Lua, and ignored
    // there); a refusal outside a script would be the client trying to subscribe.
    let log = format!("{:?}", server.cmd(&["ACL", "LOG"]));
    assert!(
        !log.contains("toplevel"),
        "the client tried a channel command: {log}"
    );
    assert!(
        log.contains("lua"),
        "no refused publish, so the user has channel access after all: {log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_primitive_works_on_a_server_without_subscribe() {
    let server = RedisServer::start_with(&[
        "--rename-command",
        "SUBSCRIBE",
        "",
        "--rename-command",
        "SSUBSCRIBE",
        "",
        "--rename-command",
        "PSUBSCRIBE",
        "",
    ]);
    assert!(
        server.try_cmd(&["SUBSCRIBE", "x"]).is_err(),
        "SUBSCRIBE is still there"
    );
    let a = polling_client(&server.url()).await;
    let b = polling_client(&server.url()).await;

    every_primitive_hands_over(&a, &b).await;
    assert_eq!(subscribed_connections(&server), 0);

    // The control: a client waiting on pub/sub cannot wait here, and says so within its
    // command timeout rather than hanging.
    let subscriber = Client::builder(server.url())
        .command_timeout(Duration::from_secs(1))
        .build()
        .await
        .expect("connect");
    let held = a.lock("poll-control").lock().await.expect("lock");
    let outcome = tokio::time::timeout(WOKEN_WITHIN, subscriber.lock("poll-control").lock())
        .await
        .expect("an error, not a hang");
    assert!(outcome.is_err(), "{outcome:?}");
    held.unlock().await.expect("unlock");
}

/// Sixteen tasks of one client wait on one lock: together they ask Redis about once per
/// interval, not sixteen times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_waiters_poll_once_per_interval_together() {
    let server = RedisServer::start();
    let holder = common::client(&server).await;
    let waiters = polling_client(&server.url()).await;
    let held = holder.lock("poll-coalesced").lock().await.expect("lock");

    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let lock = waiters.lock("poll-coalesced");
            tokio::spawn(async move { lock.lock().await?.unlock().await })
        })
        .collect();
    // Counted once every task has made its arrival try and queued.
    settle().await;
    server.cmd(&["CONFIG", "RESETSTAT"]);
    let started = Instant::now();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let polled = server.command_calls("evalsha");
    let waited = started.elapsed();
    held.unlock().await.expect("unlock");
    for task in tasks {
        woken("local waiter", task).await;
    }

    // One request per tick (every 37.5 ms at the least, 62.5 ms at the most) for all of
    // them; polling one by one would be sixteen times as many.
    let most = waited.as_millis() as u64 / 37 + 2;
    assert!(
        polled <= most,
        "{polled} requests in {waited:?}: the waiters poll one by one"
    );
    // And they did poll: a waiter that only woke at the end of the holder's 30 s lease
    // would have sent none.
    let fewest = waited.as_millis() as u64 / 63 / 3;
    assert!(
        polled >= fewest,
        "{polled} requests in {waited:?}: the waiters do not poll"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_interval_out_of_range_is_refused() {
    let server = RedisServer::start();
    for interval in [Duration::ZERO, Duration::from_secs(11)] {
        let outcome = Client::builder(server.url())
            .wait_strategy(WaitStrategy::Poll { interval })
            .build()
            .await;
        assert!(
            matches!(outcome, Err(Error::InvalidArgument(_))),
            "{interval:?}: {outcome:?}"
        );
    }
}
