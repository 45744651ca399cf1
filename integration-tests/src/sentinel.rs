//! A Redis Sentinel process, for tests of clients that follow a primary through Sentinel.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::RedisServer;

/// How long a sentinel may take to come up, to learn a replica, or to find one fit for a
/// failover.
pub const SETTLE: Duration = Duration::from_secs(20);

/// The name the sentinel monitors its primary under.
pub const MASTER: &str = "mymaster";

/// A Sentinel process watching `master` as [`MASTER`], killed on drop.
pub struct Sentinel {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Sentinel {
    /// Starts a sentinel for `master` and waits until it names it.
    pub fn start(master: &RedisServer) -> Sentinel {
        Sentinel::start_configured(master, "")
    }

    /// [`start`](Self::start) for a primary that needs `password`.
    pub fn start_with_password(master: &RedisServer, password: &str) -> Sentinel {
        Sentinel::start_configured(master, &format!("sentinel auth-pass {MASTER} {password}\n"))
    }

    fn start_configured(master: &RedisServer, extra: &str) -> Sentinel {
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
                 sentinel monitor {MASTER} 127.0.0.1 {} 1\n\
                 sentinel down-after-milliseconds {MASTER} 1000\n\
                 sentinel failover-timeout {MASTER} 4000\n{extra}",
                dir.path().display(),
                master.port()
            ),
        )
        .expect("write sentinel.conf");
        let child = Command::new(crate::server_binary::path())
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
            std::thread::sleep(Duration::from_millis(50));
        }
        sentinel
    }

    /// The sentinel's URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// A connection to the sentinel, if it answers.
    pub fn connection(&self) -> Option<redis::Connection> {
        redis::Client::open(self.url()).ok()?.get_connection().ok()
    }

    /// The port of the primary the sentinel names now.
    pub fn primary_port(&self) -> Option<u16> {
        let mut conn = self.connection()?;
        let addr: Vec<String> = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(MASTER)
            .query(&mut conn)
            .ok()?;
        addr.get(1)?.parse().ok()
    }

    /// Asks for a failover, again while the sentinel does not yet find the replica fit.
    pub fn failover(&self) {
        let deadline = Instant::now() + SETTLE;
        loop {
            let mut conn = self.connection().expect("sentinel connection");
            let asked: redis::RedisResult<()> = redis::cmd("SENTINEL")
                .arg("failover")
                .arg(MASTER)
                .query(&mut conn);
            match asked {
                Ok(()) => return,
                Err(err) if Instant::now() < deadline && err.code() == Some("NOGOODSLAVE") => {
                    std::thread::sleep(Duration::from_millis(200));
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
