//! Counting the commands clients send, with Redis's MONITOR.
//!
//! INFO commandstats also counts the commands scripts run inside Redis, so it cannot say how
//! many requests a library sends (see [`crate::commands`] for what it does say). MONITOR
//! shows both, and marks the ones a script ran with `lua`; counting the others gives the
//! requests. MONITOR slows Redis down, so figures that need it are measured in passes of
//! their own, apart from the timed ones.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use redisync_test_harness::RedisServer;

pub struct CommandCounter {
    count: Arc<AtomicU64>,
    marker: String,
    thread: JoinHandle<()>,
}

impl CommandCounter {
    /// Starts counting: every request sent to `server` from now on, until [`stop`](Self::stop).
    pub fn start(server: &RedisServer) -> Self {
        let mut stream = TcpStream::connect(("127.0.0.1", server.port())).expect("monitor connect");
        stream.write_all(b"MONITOR\r\n").expect("monitor");
        let mut reader = BufReader::new(stream);
        let mut ok = String::new();
        reader.read_line(&mut ok).expect("monitor reply");
        assert!(ok.starts_with("+OK"), "MONITOR answered {ok:?}");
        let count = Arc::new(AtomicU64::new(0));
        let marker = format!("redisync-bench-marker-{}", std::process::id());
        let thread = {
            let count = count.clone();
            let marker = marker.clone();
            std::thread::spawn(move || {
                let mut line = String::new();
                loop {
                    line.clear();
                    match reader.read_line(&mut line) {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {}
                    }
                    if line.contains(&marker) {
                        return;
                    }
                    // `+<time> [<db> <client address>] "<command>" ...`; a script's own
                    // commands show `lua` as the client.
                    if !line.contains(" lua] ") {
                        count.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        };
        CommandCounter {
            count,
            marker,
            thread,
        }
    }

    /// Stops counting once every request sent before this call has been seen, and returns how
    /// many there were.
    pub fn stop(self, server: &RedisServer) -> u64 {
        self.stop_on(&mut server.connection())
    }

    /// [`stop`](Self::stop), sending the marker (one `ECHO`) on `conn`: a connection opened
    /// before the counted stretch, so that its set-up commands are not counted by `INFO
    /// commandstats`.
    pub fn stop_on(self, conn: &mut redis::Connection) -> u64 {
        // Requests are monitored in the order Redis runs them: once the marker shows, all
        // earlier ones have been counted.
        let _: redis::RedisResult<String> = redis::cmd("ECHO").arg(&self.marker).query(conn);
        let _ = self.thread.join();
        self.count.load(Ordering::Relaxed)
    }
}
