//! An ACL user restricted to the rules DEPLOYMENT.md documents can use every primitive, and
//! nothing else.

mod common;

use std::time::Duration;

use common::ms;
use redisync::prelude::*;
use redisync_test_harness::RedisServer;

/// The rule set from DEPLOYMENT.md ("ACL"), for the default prefix.
const RULES: &str = "on >s3cret resetkeys ~redisync:* resetchannels &redisync:* -@all \
    +evalsha +script|load +ping +subscribe +unsubscribe +hello +select \
    +decr +decrby +del +exists +get +hdel +hget +hgetall +hincrby +hlen +hmget +hset \
    +incr +incrby +mget +pexpire +pexpireat +pttl +publish +rename +set +time +type +zadd \
    +zcard +zcount +zrange +zrangebyscore +zrem +zremrangebyscore +zscore";

fn restricted_url(server: &RedisServer) -> String {
    let mut args = vec!["ACL", "SETUSER", "app"];
    args.extend(RULES.split_whitespace());
    server.cmd(&args);
    server.cmd(&["ACL", "LOG", "RESET"]);
    format!("redis://app:s3cret@127.0.0.1:{}/", server.port())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_with_the_documented_rules_can_use_every_primitive() {
    let server = RedisServer::start();
    let url = restricted_url(&server);
    let c = Client::builder(url.as_str())
        .watchdog_timeout(ms(600))
        .build()
        .await
        .expect("connect as the restricted user");
    let other = Client::connect(url.as_str()).await.expect("second client");

    // Locks, with a waiter woken over pub/sub and a watchdog renewal.
    let guard = c.lock("acl").lock().await.expect("lock");
    let waiter = {
        let lock = other.lock("acl");
        tokio::spawn(async move { lock.lock().await.map(|g| g.fencing_token()) })
    };
    tokio::time::sleep(ms(700)).await;
    assert!(!guard.is_lost(), "renewal works for the restricted user");
    guard.unlock().await.expect("unlock");
    let token = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter was woken")
        .expect("waiter task")
        .expect("lock");
    assert!(token > 1);

    let fair = c.fair_lock("acl-fair").lock().await.expect("fair lock");
    fair.unlock().await.expect("fair unlock");
    let rw = c.read_write_lock("acl-rw");
    rw.read()
        .await
        .expect("read")
        .unlock()
        .await
        .expect("read unlock");
    rw.write()
        .await
        .expect("write")
        .unlock()
        .await
        .expect("write unlock");
    // A write lease that ends while its owner still reads (a downgrade): the next call
    // prunes the write hold.
    let write = rw.write_with_lease(ms(200)).await.expect("short write");
    let read = rw.read().await.expect("read under the write hold");
    let other_read = other
        .read_write_lock("acl-rw")
        .try_read_for(Duration::from_secs(5))
        .await
        .expect("read once the write lease ends")
        .expect("the write lease ended");
    other_read.unlock().await.expect("other read unlock");
    read.unlock().await.expect("read unlock");
    drop(write);
    let sem = c.semaphore("acl-sem");
    sem.try_set_permits(1).await.expect("set permits");
    sem.acquire()
        .await
        .expect("acquire")
        .release()
        .await
        .expect("release");
    let xsem = c.expirable_semaphore("acl-xsem");
    xsem.try_set_permits(1).await.expect("set permits");
    xsem.acquire()
        .await
        .expect("acquire")
        .release()
        .await
        .expect("release");
    let latch = c.count_down_latch("acl-latch");
    latch.try_set_count(1).await.expect("arm");
    latch.count_down().await.expect("count down");
    latch.wait().await.expect("wait");
    let election = c.leader_election("acl-election");
    let leadership = election.campaign("a").await.expect("campaign");
    leadership.proclaim("b").await.expect("proclaim");
    assert_eq!(
        election.leader().await.expect("leader").map(|l| l.value),
        Some("b".to_owned())
    );
    leadership.resign().await.expect("resign");
    assert!(!election.delete().await.expect("delete"));
    let multi = c.multi_lock([c.lock("acl-a"), c.lock("acl-b")]);
    multi
        .lock()
        .await
        .expect("multi")
        .unlock()
        .await
        .expect("multi unlock");
    // The rate limiter's scripts: TIME, HMGET, HSET, HDEL, PEXPIRE, DEL, PUBLISH; a waiter
    // woken by a rate change.
    let limiter = c.rate_limiter("acl-rate");
    limiter
        .try_set_rate(redisync::Rate::per_hour(1))
        .await
        .expect("try_set_rate");
    assert!(limiter.try_acquire(1).await.expect("decide").allowed);
    let rate_waiter = {
        let limiter = other.rate_limiter("acl-rate");
        tokio::spawn(async move { limiter.acquire(1).await })
    };
    tokio::time::sleep(ms(300)).await;
    limiter
        .set_rate(redisync::Rate::per_second(100))
        .await
        .expect("set_rate");
    tokio::time::timeout(Duration::from_secs(5), rate_waiter)
        .await
        .expect("the rate waiter was woken")
        .expect("task")
        .expect("acquire");
    assert!(limiter.delete().await.expect("delete"));

    // Nothing the clients (or their driver) sent was refused on the way, whatever the server:
    // the same rules serve Redis 7.0 (which has no `CLIENT SETINFO`) and later servers.
    assert_eq!(
        server.cmd(&["ACL", "LOG"]),
        redis::Value::Array(vec![]),
        "ACL LOG of {}",
        redisync_test_harness::server_binary::version_line()
    );
    let found = c
        .server_version()
        .expect("HELLO is granted, so the server is named");
    assert!(found.is_supported(), "{found}");

    // And nothing outside its prefix.
    server.cmd(&["SET", "someone-else", "data"]);
    let mut conn = redis::Client::open(url.as_str())
        .expect("url")
        .get_connection()
        .expect("connect");
    let read: redis::RedisResult<Option<String>> =
        redis::cmd("GET").arg("someone-else").query(&mut conn);
    assert!(read.is_err(), "read a key outside the prefix: {read:?}");
    let wrote: redis::RedisResult<()> = redis::cmd("SET")
        .arg(common::keys::lock("x").hash)
        .arg("1")
        .query(&mut conn);
    assert!(
        wrote.is_ok(),
        "in the prefix, plain SET is allowed: {wrote:?}"
    );
    let flushed: redis::RedisResult<()> = redis::cmd("FLUSHALL").query(&mut conn);
    assert!(flushed.is_err(), "FLUSHALL allowed: {flushed:?}");
}

/// A prefix other than the default needs its own key and channel patterns: with the default
/// ones, every call fails with a Redis error, not a hang or a panic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefix_outside_the_rules_is_refused() {
    let server = RedisServer::start();
    let url = restricted_url(&server);
    let c = Client::builder(url.as_str())
        .key_prefix("elsewhere")
        .build()
        .await
        .expect("connect");
    let outcome = c.lock("x").try_lock().await;
    assert!(matches!(outcome, Err(Error::Redis(_))), "{outcome:?}");
}
