//! A client built with `Client::sentinel_builder` follows the primary through a failover.

mod common;

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{eventually, exists, lock_key, ms};
use redisync::prelude::*;
use redisync_test_harness::RedisServer;

const SETTLE: Duration = Duration::from_secs(20);

/// A Sentinel process watching `master`, killed on drop.
struct Sentinel {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Sentinel {
    fn start(master: &RedisServer) -> Sentinel {
        let dir = tempfile::tempdir().expect("temp dir");
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let conf = dir.path().join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {}\n\
                 sentinel monitor mymaster 127.0.0.1 {} 1\n\
                 sentinel down-after-milliseconds mymaster 1000\n\
                 sentinel failover-timeout mymaster 4000\n",
                dir.path().display(),
                master.port()
            ),
        )
        .expect("write sentinel.conf");
        let child = Command::new("redis-server")
            .arg(&conf)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server --sentinel");
        let sentinel = Sentinel {
            child,
            port,
            _dir: dir,
        };
        let deadline = Instant::now() + SETTLE;
        while sentinel.primary_port().is_none() {
            assert!(Instant::now() < deadline, "the sentinel did not come up");
            std::thread::sleep(ms(50));
        }
        sentinel
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    fn connection(&self) -> Option<redis::Connection> {
        redis::Client::open(self.url()).ok()?.get_connection().ok()
    }

    /// The port of the primary the sentinel names now.
    fn primary_port(&self) -> Option<u16> {
        let mut conn = self.connection()?;
        let addr: Vec<String> = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg("mymaster")
            .query(&mut conn)
            .ok()?;
        addr.get(1)?.parse().ok()
    }

    /// Asks for a failover, again while the sentinel does not yet find the replica fit.
    fn failover(&self) {
        let deadline = Instant::now() + SETTLE;
        loop {
            let mut conn = self.connection().expect("sentinel connection");
            let asked: redis::RedisResult<()> = redis::cmd("SENTINEL")
                .arg("failover")
                .arg("mymaster")
                .query(&mut conn);
            match asked {
                Ok(()) => return,
                Err(err) if Instant::now() < deadline && err.code() == Some("NOGOODSLAVE") => {
                    std::thread::sleep(ms(200));
                }
                Err(err) => panic!("SENTINEL FAILOVER: {err}"),
            }
        }
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn role(server: &RedisServer) -> Option<String> {
    server.info_field("replication", "role")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_follows_the_primary_through_a_failover() {
    let (primary, replica) = common::primary_and_replica().await;
    let sentinel = Sentinel::start(&primary);
    eventually("the sentinel knows the replica", SETTLE, || {
        sentinel.connection().is_some_and(|mut conn| {
            redis::cmd("SENTINEL")
                .arg("replicas")
                .arg("mymaster")
                .query::<Vec<redis::Value>>(&mut conn)
                .is_ok_and(|replicas| !replicas.is_empty())
        })
    })
    .await;

    let client = Client::sentinel_builder([sentinel.url()], "mymaster")
        .command_timeout(ms(1000))
        .build()
        .await
        .expect("connect through the sentinel");
    assert_eq!(client.server(), "sentinel:mymaster/0");
    let before = client.lock("before").lock().await.expect("lock");
    assert!(exists(&primary, &lock_key("before")));

    sentinel.failover();
    eventually("the sentinel names the replica", SETTLE, || {
        sentinel.primary_port() == Some(replica.port())
    })
    .await;
    eventually("the replica is the primary", SETTLE, || {
        role(&replica).as_deref() == Some("master")
    })
    .await;
    // The client heard the switch: it moved without a failed request.
    eventually("the client follows the new primary", SETTLE, || {
        replica
            .try_cmd(&["CLIENT", "LIST"])
            .ok()
            .and_then(|list| redis::from_redis_value_ref::<String>(&list).ok())
            .is_some_and(|list| list.lines().count() > 4)
    })
    .await;

    // Calls may fail while the client moves; then they go to the new primary.
    let deadline = Instant::now() + SETTLE;
    let after = loop {
        match client.lock("after").try_lock().await {
            Ok(Some(guard)) => break guard,
            Ok(None) => panic!("nobody else holds the lock"),
            Err(err) => {
                assert!(Instant::now() < deadline, "still failing: {err}");
                tokio::time::sleep(ms(100)).await;
            }
        }
    };
    assert!(
        exists(&replica, &lock_key("after")),
        "held on the new primary"
    );
    // Waiters are woken there too.
    let waiter = {
        let lock = client.lock("after");
        tokio::spawn(async move { lock.lock().await.map(|g| g.fencing_token()) })
    };
    tokio::time::sleep(ms(200)).await;
    after.unlock().await.expect("unlock on the new primary");
    let token = tokio::time::timeout(SETTLE, waiter)
        .await
        .expect("the waiter was woken")
        .expect("waiter task")
        .expect("lock");
    assert!(token >= 2);
    // The hold taken before the failover was replicated, so it is still ours.
    before
        .unlock()
        .await
        .expect("the old hold survived the failover");
}
