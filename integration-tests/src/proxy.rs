//! A TCP chaos proxy between clients and one [`RedisServer`](crate::RedisServer), for network
//! fault injection (and pub/sub loss, through [`ChaosProxy::cut_pubsub`]).
//!
//! Clients connect to [`ChaosProxy::url`] instead of the server's URL; every accepted connection
//! opens its own connection to the server and bytes are copied both ways. The controls act on
//! every connection at once:
//!
//! * [`set_latency`](ChaosProxy::set_latency): each chunk read is forwarded only `latency`
//!   after it was read, in both directions (so a request/reply round trip gains twice the
//!   latency); order is kept.
//! * [`blackhole`](ChaosProxy::blackhole): connections are still accepted and kept open, but
//!   nothing is forwarded: data read meanwhile (or due for delivery meanwhile) is **dropped, not
//!   buffered**. TCP never loses bytes in the middle of a live stream, so a connection that lost
//!   data cannot carry on as if nothing happened (its replies would no longer match its
//!   requests); such a connection is marked and, when the blackhole is lifted, closed abruptly,
//!   as TCP would eventually do after its retransmissions failed. Connections that were idle
//!   during the blackhole survive it.
//! * [`drop_replies`](ChaosProxy::drop_replies): half a blackhole. Requests still reach the
//!   server and **run**, but everything the server sends back (replies, pub/sub messages, the
//!   end of the stream) is dropped: the client cannot tell whether a request it sent ran. As
//!   with a blackhole, connections that lost replies are closed abruptly when the mode ends,
//!   idle ones survive, and new connections are accepted meanwhile.
//! * [`stall_oldest`](ChaosProxy::stall_oldest): one connection hangs while the others work:
//!   the oldest open connection that has not subscribed to anything (for a client that opens
//!   its connections in order, its first one) forwards nothing in either direction, data
//!   dropped and the connection kept open, until [`unstall`](ChaosProxy::unstall) closes it
//!   abruptly. [`stall_on`](ChaosProxy::stall_on) stalls, the same way, the next connection
//!   on which the client sends a given string (a key name), from that request on: for
//!   catching one particular request, whichever pool connection it goes out on.
//! * [`reset_all`](ChaosProxy::reset_all): closes every current connection abruptly (`RST`,
//!   both towards the client and towards the server).
//! * [`cut_pubsub`](ChaosProxy::cut_pubsub): the same, only for connections on which the
//!   client sent `SUBSCRIBE`, `SSUBSCRIBE` or `PSUBSCRIBE` (the proxy parses the client's RESP
//!   commands until it sees one).
//!
//! The proxy runs on its own thread with its own single-threaded tokio runtime, so it works
//! whatever runtime (or none) the test uses and keeps forwarding while a test blocks. Dropping
//! the [`ChaosProxy`] stops that thread and closes every connection and the listening socket;
//! nothing outlives it. The control methods take effect before they return (they may block
//! for a few milliseconds while connections close).
//!
//! ```no_run
//! use std::time::Duration;
//! use redisync_test_harness::{ChaosProxy, RedisServer};
//!
//! let server = RedisServer::start();
//! let proxy = ChaosProxy::start(&server);
//! // Point clients at proxy.url() instead of server.url(), then:
//! proxy.set_latency(Duration::from_millis(50));
//! proxy.blackhole(true);
//! proxy.blackhole(false);
//! proxy.drop_replies(true); // requests run, their replies are lost
//! proxy.drop_replies(false);
//! if proxy.stall_oldest() {
//!     proxy.unstall();
//! }
//! let closed = proxy.reset_all();
//! println!("{closed} connections reset, {} accepted so far", proxy.accepted());
//! ```

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};

/// How long the proxy waits for the server to accept a new upstream connection.
const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a control method waits for the connections it closes to be gone.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);
/// Size of the read buffer of each direction of a connection.
const CHUNK: usize = 16 * 1024;

/// A TCP proxy in front of one Redis server that injects network faults on command; see the
/// [module documentation](self).
pub struct ChaosProxy {
    port: u16,
    upstream_port: u16,
    password: Option<String>,
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<thread::JoinHandle<()>>,
}

/// State shared by the control handle and the proxy's tasks.
struct Shared {
    /// Added to the delivery time of every chunk read from now on, in microseconds.
    latency_us: AtomicU64,
    /// Which data is being dropped. Decisions to drop are taken under this lock, and mark
    /// their connection before it is released, so the end of a mode sees every connection
    /// that lost data.
    modes: Mutex<Modes>,
    /// Bumped on every change of the modes or of a connection's stall, for waiting until a
    /// held-back end of stream may be forwarded.
    changes: watch::Sender<u64>,
    /// Connections accepted since the start.
    accepted: AtomicU64,
    /// Connections closed by [`ChaosProxy::reset_all`], [`ChaosProxy::cut_pubsub`],
    /// [`ChaosProxy::unstall`] or the end of a blackhole or of dropped replies.
    closed_by_faults: AtomicU64,
    /// Live connections by id.
    connections: Mutex<HashMap<u64, Connection>>,
    /// The name of every command clients sent, lower-cased, in the order they were read.
    commands: Mutex<Vec<String>>,
}

/// The control side of one live connection.
struct Connection {
    flags: Arc<Flags>,
    /// Sending (or dropping) this closes the connection abruptly.
    kill: Option<oneshot::Sender<()>>,
}

/// The proxy-wide modes that drop data.
#[derive(Clone, Debug, Default)]
struct Modes {
    /// Nothing is forwarded, in either direction.
    blackhole: bool,
    /// Nothing is forwarded from the server to the client.
    drop_replies: bool,
    /// Armed by [`ChaosProxy::stall_on`]: the next connection (not subscribed, not stalled)
    /// on which the client sends a chunk with these bytes is stalled from that chunk on.
    stall_on: Option<Vec<u8>>,
}

/// What the connection's tasks report about it, and its own fault.
#[derive(Default)]
struct Flags {
    /// The client sent a SUBSCRIBE-family command on it.
    subscriber: AtomicBool,
    /// Data was dropped on it by a blackhole, dropped replies or a stall.
    tainted: AtomicBool,
    /// Stalled by [`ChaosProxy::stall_oldest`]: nothing is forwarded either way until
    /// [`ChaosProxy::unstall`] closes it. Only changed under [`Shared::modes`].
    stalled: AtomicBool,
}

impl ChaosProxy {
    /// Starts a proxy on a free port of `127.0.0.1` that forwards to `server`. The proxy keeps
    /// forwarding to the same port across [`RedisServer::restart`](crate::RedisServer::restart);
    /// while the server is down, new connections are accepted and closed at once.
    ///
    /// # Panics
    ///
    /// Panics if no port can be bound or the proxy thread cannot be started.
    pub fn start(server: &crate::RedisServer) -> ChaosProxy {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap_or_else(|e| panic!("the chaos proxy could not bind 127.0.0.1:0: {e}"));
        listener
            .set_nonblocking(true)
            .expect("a listening socket can be made non-blocking");
        let port = listener
            .local_addr()
            .expect("a bound socket has an address")
            .port();
        let upstream_port = server.port();
        let (changes, _) = watch::channel(0);
        let shared = Arc::new(Shared {
            latency_us: AtomicU64::new(0),
            modes: Mutex::new(Modes::default()),
            changes,
            accepted: AtomicU64::new(0),
            closed_by_faults: AtomicU64::new(0),
            connections: Mutex::new(HashMap::new()),
            commands: Mutex::new(Vec::new()),
        });
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("the chaos proxy could not build its runtime: {e}"));
        let (stop, stopped) = oneshot::channel::<()>();
        let task_shared = shared.clone();
        let thread = thread::Builder::new()
            .name(format!("chaos-proxy-{port}"))
            .spawn(move || {
                runtime.block_on(async move {
                    let listener = TcpListener::from_std(listener)
                        .expect("a std listener converts inside the runtime");
                    tokio::select! {
                        _ = stopped => {}
                        () = accept_loop(listener, task_shared, upstream_port) => {}
                    }
                });
                // Dropping the runtime here drops every connection task, which closes its
                // sockets; the listener is closed with the accept loop.
                drop(runtime);
            })
            .unwrap_or_else(|e| panic!("the chaos proxy could not start its thread: {e}"));
        ChaosProxy {
            port,
            upstream_port,
            password: server.password().map(str::to_owned),
            shared,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// The port the proxy listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The port of the server it forwards to.
    pub fn upstream_port(&self) -> u16 {
        self.upstream_port
    }

    /// The URL clients use to go through the proxy, `redis://127.0.0.1:{port}/`, with the
    /// server's `--requirepass` password if it has one.
    pub fn url(&self) -> String {
        match &self.password {
            Some(password) => format!(
                "redis://:{}@127.0.0.1:{}/",
                crate::percent_encode(password),
                self.port
            ),
            None => format!("redis://127.0.0.1:{}/", self.port),
        }
    }

    /// Delays every chunk read from now on by `latency` before it is forwarded, in both
    /// directions. `Duration::ZERO` turns the delay off (chunks already queued keep theirs).
    pub fn set_latency(&self, latency: Duration) {
        let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.shared.latency_us.store(micros, Ordering::SeqCst);
    }

    /// The current latency.
    pub fn latency(&self) -> Duration {
        Duration::from_micros(self.shared.latency_us.load(Ordering::SeqCst))
    }

    /// Starts (`true`) or ends (`false`) a blackhole: while it lasts nothing is forwarded and
    /// the data is dropped. Ending it closes abruptly every connection that lost data (except
    /// stalled ones, which wait for [`unstall`](Self::unstall)), and returns how many (0 when
    /// starting one).
    pub fn blackhole(&self, on: bool) -> usize {
        self.set_mode(|modes| modes.blackhole = on);
        if on {
            0
        } else {
            self.close_tainted()
        }
    }

    /// Whether a blackhole is on.
    pub fn is_blackholed(&self) -> bool {
        self.shared.lock_modes().blackhole
    }

    /// Starts (`true`) or ends (`false`) dropping replies: while it lasts, what clients send
    /// is forwarded (their commands run in Redis) but nothing the server sends back is: the
    /// data is dropped, and so is the end of the stream if the server closes a connection.
    /// Ending it closes abruptly every connection that lost data (except stalled ones), since
    /// its replies would no longer match its requests, and returns how many (0 when
    /// starting). A connection that received nothing meanwhile survives.
    pub fn drop_replies(&self, on: bool) -> usize {
        self.set_mode(|modes| modes.drop_replies = on);
        if on {
            0
        } else {
            self.close_tainted()
        }
    }

    /// Whether replies are being dropped.
    pub fn is_dropping_replies(&self) -> bool {
        self.shared.lock_modes().drop_replies
    }

    /// Stalls the oldest open connection (the first accepted) that is not stalled yet and on
    /// which the client has not subscribed to anything: from now on it forwards nothing in
    /// either direction (what arrives is read and dropped) but stays open, like a connection
    /// whose route died without an error, until [`unstall`](Self::unstall) closes it. The
    /// other connections keep working. Returns `false` if there was no such connection.
    ///
    /// A client that opens its connections one after the other, before any other connection
    /// through this proxy, gets its first one stalled; calling this again stalls the next.
    pub fn stall_oldest(&self) -> bool {
        let connections = self.shared.lock_connections();
        let oldest = connections
            .iter()
            .filter(|(_, c)| {
                c.kill.is_some()
                    && !c.flags.subscriber.load(Ordering::SeqCst)
                    && !c.flags.stalled.load(Ordering::SeqCst)
            })
            .min_by_key(|(id, _)| **id);
        match oldest {
            Some((_, connection)) => {
                let flags = connection.flags.clone();
                drop(connections);
                // Under the modes lock, like every decision to drop (see `Shared::modes`).
                self.set_mode(|_| flags.stalled.store(true, Ordering::SeqCst));
                true
            }
            None => false,
        }
    }

    /// Stalls, as [`stall_oldest`](Self::stall_oldest) does, the next connection on which the
    /// client sends `needle` (in one chunk read; requests of a few kilobytes arrive whole):
    /// the chunk that carries it is dropped, so that request never reaches the server, and so
    /// is everything after it, until [`unstall`](Self::unstall). Connections on which the
    /// client subscribed and stalled ones are skipped. Arms one stall, replacing one armed
    /// before that has not fired; [`stalled`](Self::stalled) counts it once it fired.
    ///
    /// For stalling the connection one particular request goes out on (a renewal naming a
    /// key), whichever of a pool's connections that is.
    pub fn stall_on(&self, needle: &str) {
        let needle = needle.as_bytes().to_vec();
        self.set_mode(|modes| modes.stall_on = Some(needle));
    }

    /// Whether a stall armed by [`stall_on`](Self::stall_on) has not fired yet.
    pub fn stall_armed(&self) -> bool {
        self.shared.lock_modes().stall_on.is_some()
    }

    /// Closes abruptly (`RST` to both ends) every connection stalled by
    /// [`stall_oldest`](Self::stall_oldest) or [`stall_on`](Self::stall_on), and returns how
    /// many.
    pub fn unstall(&self) -> usize {
        self.close_where(|flags| flags.stalled.load(Ordering::SeqCst))
    }

    /// Open connections stalled by [`stall_oldest`](Self::stall_oldest) or
    /// [`stall_on`](Self::stall_on).
    pub fn stalled(&self) -> usize {
        self.shared
            .lock_connections()
            .values()
            .filter(|c| c.flags.stalled.load(Ordering::SeqCst))
            .count()
    }

    /// Closes every current connection abruptly (`RST` to both ends) and returns how many.
    pub fn reset_all(&self) -> usize {
        self.close_where(|_| true)
    }

    /// Closes abruptly every connection on which the client sent `SUBSCRIBE`, `SSUBSCRIBE` or
    /// `PSUBSCRIBE`, and returns how many.
    pub fn cut_pubsub(&self) -> usize {
        self.close_where(|flags| flags.subscriber.load(Ordering::SeqCst))
    }

    /// Connections accepted since the proxy started.
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// The name of every command clients have sent through the proxy (lower-cased, in the
    /// order the proxy read them, across connections): what a client itself sends, which a
    /// server's own statistics mix with the commands its scripts run.
    pub fn commands(&self) -> Vec<String> {
        self.shared
            .commands
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Connections open right now.
    pub fn active(&self) -> usize {
        self.shared.lock_connections().len()
    }

    /// Open connections on which the client subscribed to something.
    pub fn active_subscribers(&self) -> usize {
        self.shared
            .lock_connections()
            .values()
            .filter(|c| c.flags.subscriber.load(Ordering::SeqCst))
            .count()
    }

    /// Connections closed by [`reset_all`](Self::reset_all), [`cut_pubsub`](Self::cut_pubsub),
    /// [`unstall`](Self::unstall) and the end of blackholes and of dropped replies, since the
    /// start.
    pub fn closed_by_faults(&self) -> u64 {
        self.shared.closed_by_faults.load(Ordering::SeqCst)
    }

    /// Changes the modes under their lock and tells the connections waiting for a change.
    fn set_mode(&self, change: impl FnOnce(&mut Modes)) {
        change(&mut self.shared.lock_modes());
        self.shared
            .changes
            .send_modify(|generation| *generation += 1);
    }

    /// Closes the connections that lost data, except stalled ones.
    fn close_tainted(&self) -> usize {
        self.close_where(|flags| {
            flags.tainted.load(Ordering::SeqCst) && !flags.stalled.load(Ordering::SeqCst)
        })
    }

    /// Closes the connections whose flags match and waits (briefly) until they are gone.
    fn close_where(&self, matches: impl Fn(&Flags) -> bool) -> usize {
        let mut closing = Vec::new();
        for (id, connection) in self.shared.lock_connections().iter_mut() {
            if matches(&connection.flags) {
                if let Some(kill) = connection.kill.take() {
                    let _ = kill.send(());
                    closing.push(*id);
                }
            }
        }
        let deadline = Instant::now() + CLOSE_TIMEOUT;
        while Instant::now() < deadline {
            let connections = self.shared.lock_connections();
            if closing.iter().all(|id| !connections.contains_key(id)) {
                break;
            }
            drop(connections);
            thread::sleep(Duration::from_millis(1));
        }
        self.shared
            .closed_by_faults
            .fetch_add(closing.len() as u64, Ordering::SeqCst);
        closing.len()
    }
}

impl Drop for ChaosProxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            // The thread only drops its runtime after the stop signal: this returns promptly.
            let _ = thread.join();
        }
    }
}

impl fmt::Debug for ChaosProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChaosProxy")
            .field("port", &self.port)
            .field("upstream_port", &self.upstream_port)
            .field("latency", &self.latency())
            .field("blackhole", &self.is_blackholed())
            .field("drop_replies", &self.is_dropping_replies())
            .field("stalled", &self.stalled())
            .field("stall_armed", &self.stall_armed())
            .field("accepted", &self.accepted())
            .field("active", &self.active())
            .finish()
    }
}

impl Shared {
    fn lock_connections(&self) -> MutexGuard<'_, HashMap<u64, Connection>> {
        self.connections.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn latency(&self) -> Duration {
        Duration::from_micros(self.latency_us.load(Ordering::SeqCst))
    }

    fn lock_modes(&self) -> MutexGuard<'_, Modes> {
        self.modes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether data of this direction (`up`: client to server) of this connection is dropped
    /// under `modes` (read under their lock by the caller).
    fn drops(modes: &Modes, flags: &Flags, up: bool) -> bool {
        modes.blackhole || (modes.drop_replies && !up) || flags.stalled.load(Ordering::SeqCst)
    }

    /// Whether data of this direction of the connection is dropped right now; if so, marks
    /// the connection as having lost data (under the same lock, see [`Shared::modes`]).
    fn swallowed(&self, flags: &Flags, up: bool) -> bool {
        let modes = self.lock_modes();
        let dropped = Self::drops(&modes, flags, up);
        if dropped {
            flags.tainted.store(true, Ordering::SeqCst);
        }
        dropped
    }

    /// Stalls the connection if a stall armed by [`ChaosProxy::stall_on`] waits for a chunk
    /// like `data` the client sent on it (under the modes lock, like every decision to drop).
    fn stall_if_armed(&self, flags: &Flags, data: &[u8]) {
        let mut modes = self.lock_modes();
        let Some(needle) = &modes.stall_on else {
            return;
        };
        let found = !needle.is_empty() && data.windows(needle.len()).any(|w| w == &needle[..]);
        if found
            && !flags.subscriber.load(Ordering::SeqCst)
            && !flags.stalled.load(Ordering::SeqCst)
        {
            modes.stall_on = None;
            flags.stalled.store(true, Ordering::SeqCst);
        }
    }

    /// Whether this direction of the connection is dropping data (without marking it).
    fn holds_back(&self, flags: &Flags, up: bool) -> bool {
        Self::drops(&self.lock_modes(), flags, up)
    }
}

/// Removes a connection from the registry when its task ends, however it ends.
struct Registration {
    shared: Arc<Shared>,
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.shared.lock_connections().remove(&self.id);
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>, upstream_port: u16) {
    let mut next_id = 0u64;
    loop {
        let client = match listener.accept().await {
            Ok((client, _)) => client,
            Err(_) => {
                // Out of file descriptors or similar: try again shortly.
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        shared.accepted.fetch_add(1, Ordering::SeqCst);
        next_id += 1;
        let flags = Arc::new(Flags::default());
        let (kill, killed) = oneshot::channel();
        shared.lock_connections().insert(
            next_id,
            Connection {
                flags: flags.clone(),
                kill: Some(kill),
            },
        );
        let registration = Registration {
            shared: shared.clone(),
            id: next_id,
        };
        tokio::spawn(serve(client, upstream_port, flags, killed, registration));
    }
}

/// How a connection ended.
enum Ended {
    /// Both directions finished, or one failed.
    Closed,
    /// A control method closed it.
    Killed,
}

async fn serve(
    mut client: TcpStream,
    upstream_port: u16,
    flags: Arc<Flags>,
    killed: oneshot::Receiver<()>,
    registration: Registration,
) {
    let shared = registration.shared.clone();
    let connect = TcpStream::connect(SocketAddr::from(([127, 0, 0, 1], upstream_port)));
    let mut server = match tokio::time::timeout(UPSTREAM_CONNECT_TIMEOUT, connect).await {
        Ok(Ok(server)) => server,
        _ => {
            // The server is down: refuse the client the way a dead server would.
            let _ = client.set_zero_linger();
            return;
        }
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let ended = {
        let (client_read, client_write) = client.split();
        let (server_read, server_write) = server.split();
        let up = pump(client_read, server_write, &shared, &flags, true);
        let down = pump(server_read, client_write, &shared, &flags, false);
        tokio::select! {
            // Also when the sender is dropped: the connection is not wanted any more.
            _ = killed => Ended::Killed,
            _ = async { tokio::try_join!(up, down) } => Ended::Closed,
        }
    };
    if let Ended::Killed = ended {
        // SO_LINGER 0: closing sends RST instead of FIN, so both peers see an abrupt reset
        // (ECONNRESET) rather than an orderly end of stream. tokio exposes this directly, so
        // no extra socket crate is needed.
        let _ = client.set_zero_linger();
        let _ = server.set_zero_linger();
    }
    drop(client);
    drop(server);
    drop(registration);
}

/// Copies one direction of a connection, applying latency and the modes that drop data. `up`
/// is the client to server direction, whose commands are inspected for subscriptions.
async fn pump<R, W>(
    mut reader: R,
    mut writer: W,
    shared: &Shared,
    flags: &Flags,
    up: bool,
) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    // `None` is the end of the stream.
    let (queue, mut queued) = mpsc::unbounded_channel::<Option<(Instant, Vec<u8>)>>();
    let read = async move {
        let mut buffer = vec![0u8; CHUNK];
        let mut scanner = CommandScanner::default();
        loop {
            let n = reader.read(&mut buffer).await?;
            if n == 0 {
                // Dropping holds back the end of the stream too (see the writer).
                shared.swallowed(flags, up);
                let _ = queue.send(None);
                return Ok::<(), std::io::Error>(());
            }
            let data = &buffer[..n];
            if up {
                let names = scanner.feed(data);
                if names.iter().any(|name| is_subscribe(name.as_bytes())) {
                    flags.subscriber.store(true, Ordering::SeqCst);
                }
                shared
                    .commands
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .extend(names);
                shared.stall_if_armed(flags, data);
            }
            if shared.swallowed(flags, up) {
                continue;
            }
            let due = Instant::now() + shared.latency();
            if queue.send(Some((due, data.to_vec()))).is_err() {
                return Ok(());
            }
        }
    };
    let write = async move {
        while let Some(item) = queued.recv().await {
            match item {
                Some((due, data)) => {
                    tokio::time::sleep_until(due.into()).await;
                    if shared.swallowed(flags, up) {
                        continue;
                    }
                    writer.write_all(&data).await?;
                }
                None => {
                    // Dropping forwards nothing, not even the end of the stream. (A stalled
                    // connection is only ever closed, by `unstall`.)
                    let mut changes = shared.changes.subscribe();
                    let _ = changes.wait_for(|_| !shared.holds_back(flags, up)).await;
                    writer.shutdown().await?;
                    return Ok(());
                }
            }
        }
        Ok(())
    };
    tokio::try_join!(read, write).map(|_| ())
}

/// Finds the commands in a client's byte stream (RESP arrays of bulk strings, or inline
/// commands), across chunk boundaries.
#[derive(Default)]
struct CommandScanner {
    pending: Vec<u8>,
}

/// One step of parsing the pending bytes.
enum Parsed {
    /// More bytes are needed.
    Incomplete,
    /// Not RESP the scanner understands; the bytes are skipped.
    Invalid,
    /// A whole command of `len` bytes whose name is at `name`.
    Command {
        len: usize,
        name: std::ops::Range<usize>,
    },
}

impl CommandScanner {
    /// Adds `data`; returns the names (lower-cased) of the commands it completed.
    fn feed(&mut self, data: &[u8]) -> Vec<String> {
        self.pending.extend_from_slice(data);
        let mut names = Vec::new();
        loop {
            match parse_command(&self.pending) {
                Parsed::Incomplete => return names,
                Parsed::Invalid => {
                    self.pending.clear();
                    return names;
                }
                Parsed::Command { len, name } => {
                    names.push(String::from_utf8_lossy(&self.pending[name]).to_ascii_lowercase());
                    self.pending.drain(..len);
                }
            }
        }
    }
}

fn is_subscribe(name: &[u8]) -> bool {
    [&b"subscribe"[..], b"ssubscribe", b"psubscribe"]
        .iter()
        .any(|candidate| name.eq_ignore_ascii_case(candidate))
}

/// The line starting at `at` (without `\r\n`) and the index after it.
fn line(buffer: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let end = buffer.get(at..)?.windows(2).position(|w| w == b"\r\n")?;
    Some((&buffer[at..at + end], at + end + 2))
}

fn number(digits: &[u8]) -> Option<usize> {
    std::str::from_utf8(digits).ok()?.parse().ok()
}

fn parse_command(buffer: &[u8]) -> Parsed {
    let Some(&first) = buffer.first() else {
        return Parsed::Incomplete;
    };
    if first != b'*' {
        // Inline command: the first word of the line.
        let Some(end) = buffer.iter().position(|&b| b == b'\n') else {
            return Parsed::Incomplete;
        };
        let text = &buffer[..end];
        let start = text
            .iter()
            .position(|b| !b.is_ascii_whitespace())
            .unwrap_or(0);
        let stop = text[start..]
            .iter()
            .position(|b| b.is_ascii_whitespace())
            .map_or(text.len(), |p| start + p);
        return Parsed::Command {
            len: end + 1,
            name: start..stop,
        };
    }
    let Some((count, mut at)) = line(buffer, 1) else {
        return Parsed::Incomplete;
    };
    let Some(count) = number(count) else {
        return Parsed::Invalid;
    };
    let mut name = 0..0;
    for i in 0..count {
        match buffer.get(at) {
            None => return Parsed::Incomplete,
            Some(b'$') => {}
            Some(_) => return Parsed::Invalid,
        }
        let Some((len, start)) = line(buffer, at + 1) else {
            return Parsed::Incomplete;
        };
        let Some(len) = number(len) else {
            return Parsed::Invalid;
        };
        if buffer.len() < start + len + 2 {
            return Parsed::Incomplete;
        }
        if i == 0 {
            name = start..start + len;
        }
        at = start + len + 2;
    }
    Parsed::Command { len: at, name }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RedisServer;
    use std::io::{BufRead, BufReader, Read, Write};

    fn scan(chunks: &[&[u8]]) -> bool {
        let mut scanner = CommandScanner::default();
        chunks.iter().any(|chunk| {
            scanner
                .feed(chunk)
                .iter()
                .any(|name| is_subscribe(name.as_bytes()))
        })
    }

    #[test]
    fn scanner_finds_subscribe_commands_across_chunks() {
        assert!(scan(&[b"*2\r\n$9\r\nSUBSCRIBE\r\n$1\r\nc\r\n"]));
        assert!(scan(&[b"*2\r\n$10\r\nssubscribe\r\n$1\r\nc\r\n"]));
        assert!(scan(&[b"*2\r\n$10\r\nPSUBSCRIBE\r\n$2\r\nc*\r\n"]));
        assert!(scan(&[b"PING\r\nsubscribe chan\r\n"]));
        // Split anywhere, after other commands.
        let stream = b"*1\r\n$4\r\nPING\r\n*2\r\n$9\r\nsubscribe\r\n$1\r\nc\r\n";
        for cut in 0..stream.len() {
            assert!(scan(&[&stream[..cut], &stream[cut..]]), "cut at {cut}");
        }
        // An argument called "subscribe" is not a subscription, nor is an incomplete one.
        assert!(!scan(&[
            b"*3\r\n$3\r\nSET\r\n$9\r\nsubscribe\r\n$1\r\nx\r\n"
        ]));
        assert!(!scan(&[b"*2\r\n$9\r\nSUBSCRIBE\r\n$1\r\n"]));
        assert!(!scan(&[b"*1\r\n$11\r\nUNSUBSCRIBE\r\n"]));
    }

    fn ping(stream: &mut std::net::TcpStream) -> std::io::Result<String> {
        stream.write_all(b"PING\r\n")?;
        let mut reader = BufReader::new(stream.try_clone()?);
        let mut reply = String::new();
        reader.read_line(&mut reply)?;
        Ok(reply)
    }

    fn connect(proxy: &ChaosProxy) -> std::net::TcpStream {
        let stream = std::net::TcpStream::connect(("127.0.0.1", proxy.port())).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        stream
    }

    fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !cond() {
            assert!(Instant::now() < deadline, "timed out waiting until {what}");
            thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn forwards_counts_and_delays() {
        let server = RedisServer::start();
        let proxy = ChaosProxy::start(&server);
        assert_eq!(proxy.upstream_port(), server.port());
        let mut stream = connect(&proxy);
        assert_eq!(ping(&mut stream).unwrap(), "+PONG\r\n");
        assert_eq!(proxy.accepted(), 1);
        assert_eq!(proxy.active(), 1);

        proxy.set_latency(Duration::from_millis(100));
        let started = Instant::now();
        assert_eq!(ping(&mut stream).unwrap(), "+PONG\r\n");
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(200),
            "round trip took {took:?}"
        );
        proxy.set_latency(Duration::ZERO);
        assert_eq!(ping(&mut stream).unwrap(), "+PONG\r\n");

        drop(stream);
        wait_for("the closed connection is gone", || proxy.active() == 0);
        // A redis-rs client works through it.
        let mut con = redis::Client::open(proxy.url())
            .unwrap()
            .get_connection()
            .unwrap();
        let () = redis::cmd("SET").arg("k").arg("v").query(&mut con).unwrap();
        assert_eq!(
            server.cmd(&["GET", "k"]),
            redis::Value::BulkString(b"v".to_vec())
        );
    }

    #[test]
    fn blackhole_drops_data_and_closes_the_connections_that_lost_some() {
        let server = RedisServer::start();
        let proxy = ChaosProxy::start(&server);
        let mut busy = connect(&proxy);
        let mut idle = connect(&proxy);
        assert_eq!(ping(&mut busy).unwrap(), "+PONG\r\n");
        assert_eq!(ping(&mut idle).unwrap(), "+PONG\r\n");

        proxy.blackhole(true);
        assert!(proxy.is_blackholed());
        busy.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        assert!(
            ping(&mut busy).is_err(),
            "a blackholed PING must not be answered"
        );
        // New connections are accepted but get nothing either.
        let mut fresh = connect(&proxy);
        fresh
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        assert!(ping(&mut fresh).is_err());
        assert_eq!(proxy.accepted(), 3);

        assert_eq!(proxy.blackhole(false), 2, "busy and fresh lost data");
        let mut rest = Vec::new();
        let outcome = busy.read_to_end(&mut rest);
        assert!(
            outcome.is_err() || rest.is_empty(),
            "a connection that lost data is closed, not resumed: {outcome:?} {rest:?}"
        );
        assert_eq!(ping(&mut idle).unwrap(), "+PONG\r\n", "idle survives");
        assert_eq!(proxy.active(), 1);
        assert_eq!(proxy.closed_by_faults(), 2);
    }

    /// Sends `SET key value` as RESP and returns the reply line.
    fn set(stream: &mut std::net::TcpStream, key: &str, value: &str) -> std::io::Result<String> {
        let command = format!(
            "*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n${}\r\n{value}\r\n",
            key.len(),
            value.len()
        );
        stream.write_all(command.as_bytes())?;
        let mut reader = BufReader::new(stream.try_clone()?);
        let mut reply = String::new();
        reader.read_line(&mut reply)?;
        Ok(reply)
    }

    fn assert_closed(stream: &mut std::net::TcpStream, what: &str) {
        let mut rest = Vec::new();
        let outcome = stream.read_to_end(&mut rest);
        assert!(
            outcome.is_err() || rest.is_empty(),
            "{what}: a connection that lost data is closed, not resumed: {outcome:?} {rest:?}"
        );
    }

    #[test]
    fn dropped_replies_run_their_commands_and_close_the_connections_that_lost_some() {
        let server = RedisServer::start();
        let proxy = ChaosProxy::start(&server);
        let mut busy = connect(&proxy);
        let mut idle = connect(&proxy);
        assert_eq!(ping(&mut busy).unwrap(), "+PONG\r\n");
        assert_eq!(ping(&mut idle).unwrap(), "+PONG\r\n");

        assert_eq!(proxy.drop_replies(true), 0);
        assert!(proxy.is_dropping_replies());
        assert!(!proxy.is_blackholed());
        busy.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        assert!(
            set(&mut busy, "ran", "1").is_err(),
            "a reply must be dropped"
        );
        // The request itself reached the server and ran.
        wait_for("the SET ran", || {
            server.cmd(&["GET", "ran"]) == redis::Value::BulkString(b"1".to_vec())
        });
        // New connections are accepted, their commands run, their replies are dropped too.
        let mut fresh = connect(&proxy);
        fresh
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        assert!(set(&mut fresh, "fresh", "2").is_err());
        wait_for("the fresh SET ran", || {
            server.cmd(&["GET", "fresh"]) == redis::Value::BulkString(b"2".to_vec())
        });

        assert_eq!(proxy.drop_replies(false), 2, "busy and fresh lost replies");
        assert!(!proxy.is_dropping_replies());
        assert_closed(&mut busy, "busy");
        assert_closed(&mut fresh, "fresh");
        assert_eq!(ping(&mut idle).unwrap(), "+PONG\r\n", "idle survives");
        assert_eq!(proxy.active(), 1);
        assert_eq!(proxy.closed_by_faults(), 2);
        // Afterwards the proxy forwards both ways again.
        let mut after = connect(&proxy);
        assert_eq!(set(&mut after, "after", "3").unwrap(), "+OK\r\n");
    }

    #[test]
    fn a_stalled_connection_forwards_nothing_while_the_others_work() {
        let server = RedisServer::start();
        let proxy = ChaosProxy::start(&server);
        assert!(!proxy.stall_oldest(), "no connection to stall yet");
        // The oldest connection subscribes: it is skipped.
        let mut subscriber = redis::Client::open(proxy.url())
            .unwrap()
            .get_connection()
            .unwrap();
        redis::cmd("SUBSCRIBE")
            .arg("chan")
            .exec(&mut subscriber)
            .unwrap();
        let mut first = connect(&proxy);
        let mut second = connect(&proxy);
        assert_eq!(ping(&mut first).unwrap(), "+PONG\r\n");
        assert_eq!(ping(&mut second).unwrap(), "+PONG\r\n");
        wait_for("the subscription is seen", || {
            proxy.active_subscribers() == 1
        });

        assert!(proxy.stall_oldest());
        assert_eq!(proxy.stalled(), 1);
        first
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        assert!(set(&mut first, "stalled", "1").is_err(), "no reply");
        // Nothing was forwarded: the command did not run.
        assert_eq!(server.cmd(&["GET", "stalled"]), redis::Value::Nil);
        // The others work, the subscriber still gets messages.
        assert_eq!(set(&mut second, "other", "2").unwrap(), "+OK\r\n");
        server.cmd(&["PUBLISH", "chan", "hello"]);
        subscriber
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let message = subscriber.recv_response().unwrap();
        assert!(format!("{message:?}").contains("hello"), "{message:?}");
        // Ending another fault leaves the stalled connection stalled.
        proxy.blackhole(true);
        assert_eq!(proxy.blackhole(false), 0);
        assert_eq!(proxy.stalled(), 1);

        // The next call stalls the next connection.
        assert!(proxy.stall_oldest());
        assert_eq!(proxy.stalled(), 2);
        assert!(!proxy.stall_oldest(), "only the subscriber is left");

        assert_eq!(proxy.unstall(), 2);
        assert_eq!(proxy.stalled(), 0);
        let mut rest = Vec::new();
        match first.read_to_end(&mut rest) {
            Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset),
            Ok(_) => panic!("expected a reset, got an orderly close after {rest:?}"),
        }
        assert_eq!(proxy.active(), 1, "the subscriber is left");
        assert_eq!(proxy.closed_by_faults(), 2);
        assert_eq!(server.cmd(&["GET", "stalled"]), redis::Value::Nil);
    }

    #[test]
    fn stall_on_stalls_the_connection_that_sends_the_string() {
        let server = RedisServer::start();
        let proxy = ChaosProxy::start(&server);
        let mut first = connect(&proxy);
        let mut second = connect(&proxy);
        proxy.stall_on("{wanted}");
        assert!(proxy.stall_armed());
        assert_eq!(set(&mut first, "plain", "1").unwrap(), "+OK\r\n");
        assert_eq!(
            proxy.stalled(),
            0,
            "a request without the string goes through"
        );
        second
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        assert!(set(&mut second, "{wanted}", "2").is_err(), "no reply");
        assert_eq!(server.cmd(&["GET", "{wanted}"]), redis::Value::Nil);
        assert_eq!(proxy.stalled(), 1);
        assert!(!proxy.stall_armed(), "one stall per call");
        // The other connection works, the string included.
        assert_eq!(set(&mut first, "{wanted}", "3").unwrap(), "+OK\r\n");
        assert_eq!(proxy.unstall(), 1);
    }

    #[test]
    fn reset_all_and_cut_pubsub() {
        let server = RedisServer::start();
        let proxy = ChaosProxy::start(&server);
        let mut plain = connect(&proxy);
        assert_eq!(ping(&mut plain).unwrap(), "+PONG\r\n");
        let mut subscriber = redis::Client::open(proxy.url())
            .unwrap()
            .get_connection()
            .unwrap();
        redis::cmd("SUBSCRIBE")
            .arg("chan")
            .exec(&mut subscriber)
            .unwrap();
        assert_eq!(server.numsub("chan"), 1);
        assert_eq!(proxy.active_subscribers(), 1);

        assert_eq!(proxy.cut_pubsub(), 1);
        wait_for("redis notices", || server.numsub("chan") == 0);
        assert_eq!(ping(&mut plain).unwrap(), "+PONG\r\n", "plain survives");
        assert_eq!(proxy.active(), 1);

        assert_eq!(proxy.reset_all(), 1);
        let mut rest = Vec::new();
        match plain.read_to_end(&mut rest) {
            Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset),
            Ok(_) => panic!("expected a reset, got an orderly close after {rest:?}"),
        }
        assert_eq!(proxy.active(), 0);
        assert_eq!(proxy.closed_by_faults(), 2);
    }

    #[test]
    fn dropping_the_proxy_closes_everything() {
        let server = RedisServer::start();
        let proxy = ChaosProxy::start(&server);
        let mut stream = connect(&proxy);
        assert_eq!(ping(&mut stream).unwrap(), "+PONG\r\n");
        let clients_before = server.info_field("clients", "connected_clients");
        drop(proxy);
        let mut rest = Vec::new();
        let _ = stream.read_to_end(&mut rest);
        assert!(
            rest.is_empty(),
            "the connection is closed once the proxy is dropped"
        );
        // The upstream side is closed too: only the harness' own connection is left.
        let deadline = Instant::now() + Duration::from_secs(5);
        while server.info_field("clients", "connected_clients").as_deref() != Some("1") {
            assert!(
                Instant::now() < deadline,
                "upstream connections outlived the proxy (before: {clients_before:?})"
            );
            thread::sleep(Duration::from_millis(5));
        }
    }
}
