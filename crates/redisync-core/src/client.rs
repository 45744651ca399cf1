//! The client: the [`Client`] handle, its shared state assembling the transport and the
//! runtime, and the user API on it.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::cells::Cells;
use crate::pubsub::Hub;
use crate::retry::Pending;
use crate::stats::Stats;
use crate::transport::Transport;
use crate::wait::WaitQueues;
use crate::watchdog::Watchdog;

/// A handle to Redis and to the client-wide runtime: connections, the pub/sub hub, the
/// watchdog and the local waiter queues.
///
/// **The primitives are made from a client by the methods of the `redisync` crate's
/// [`ClientExt`](https://docs.rs/redisync/latest/redisync/trait.ClientExt.html) trait**
/// (`client.lock("x")`, `client.semaphore("s")`, `client.read_write_lock("r")`, ...): they are
/// not inherent methods, because each primitive lives in a crate of its own. `use
/// redisync::prelude::*;` brings `Client` and `ClientExt` in together:
///
/// ```
/// use redisync::prelude::*;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redisync::Result<()> {
/// # let server = redisync_test_harness::RedisServer::start();
/// # let url = server.url(); // e.g. "redis://127.0.0.1:6379/"
/// let client = Client::connect(url).await?;
/// let lock = client.lock("orders:42"); // ClientExt::lock
/// let guard = lock.lock().await?;
/// guard.unlock().await?;
/// let slots = client.semaphore("slots"); // ClientExt::semaphore
/// slots.try_set_permits(2).await?;
/// slots.acquire().await?.release().await?;
/// client.shutdown().await;
/// # Ok(())
/// # }
/// ```
///
/// `Client` is cheap to clone (an `Arc` inside); clones share everything. Dropping the last
/// clone, and every primitive handle and guard made from it, shuts the client down.
///
/// # Connections
///
/// Commands go over `pool_size` multiplexed connections
/// ([`ConnectionManager`](redis::aio::ConnectionManager)), picked round robin. A multiplexed
/// connection matches each reply to its request, so dropping a request future half-way can never
/// hand its reply to the next caller (the failure mode of plain pooled connections, redis-rs #325),
/// and it pipelines concurrent requests on one socket. It also reconnects by itself after Redis
/// restarts. A checkout pool (bb8) would add a checkout per call and buy nothing a multiplexed
/// connection lacks, so redisync does not use one. Pub/sub wake-ups use one more, dedicated
/// connection (see [`crate::pubsub`]).
///
/// # Examples
///
/// ```
/// use redisync::prelude::*;
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redisync::Result<()> {
/// # let server = redisync_test_harness::RedisServer::start();
/// # let url = server.url(); // e.g. "redis://127.0.0.1:6379/"
/// let client = Client::builder(url)
///     .key_prefix("myapp")
///     .watchdog_timeout(Duration::from_secs(10))
///     .build()
///     .await?;
/// println!("client {}", client.id());
/// client.shutdown().await;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Client {
    inner: Arc<ClientInner>,
}

/// The part whose drop means "the last user is gone". Background tasks hold [`Shared`], never
/// this, so they do not keep the client alive.
struct ClientInner {
    shared: Arc<Shared>,
}

impl Drop for ClientInner {
    fn drop(&mut self) {
        self.shared.shut_down();
    }
}

pub(crate) struct Shared {
    pub(crate) id: String,
    /// The connections and sending; [`Shared`] dereferences to it.
    pub(crate) transport: Arc<Transport>,
    pub(crate) next_id: AtomicU64,
    pub(crate) hub: Arc<Hub>,
    pub(crate) watchdog: Arc<Watchdog>,
    pub(crate) queues: Arc<WaitQueues>,
    /// Give-backs still being retried in the background.
    pub(crate) pending: Arc<Pending>,
    pub(crate) cells: Cells,
}

/// The client-level code reads the transport's fields (config, runtime, shutdown flag,
/// counters) as its own.
impl std::ops::Deref for Shared {
    type Target = Transport;

    fn deref(&self) -> &Transport {
        &self.transport
    }
}

impl crate::wait::Waits for Shared {
    fn transport(&self) -> &Transport {
        &self.transport
    }

    fn hub(&self) -> &Arc<Hub> {
        &self.hub
    }

    fn queues(&self) -> &Arc<WaitQueues> {
        &self.queues
    }
}

impl Shared {
    /// Sets the shutdown flag and wakes every task waiting in a local queue. Returns `true` if
    /// this call shut the client down.
    pub(crate) fn shut_down(&self) -> bool {
        let first = self.shutdown.set();
        // After the flag: see `WaitQueues::close`.
        self.queues.close();
        first
    }
}

impl Client {
    /// Starts the runtime (pub/sub hub, Sentinel listener, watchdog) on `transport`.
    pub(crate) fn start(transport: Transport) -> Client {
        let transport = Arc::new(transport);
        let shared = Arc::new(Shared {
            id: match &transport.config.label {
                Some(label) => format!("{label}@{}", uuid::Uuid::new_v4()),
                None => uuid::Uuid::new_v4().to_string(),
            },
            hub: Arc::new(Hub::new(transport.config.wait_strategy)),
            watchdog: Arc::new(Watchdog::new(
                transport.config.metrics,
                transport.config.clock_drift_ppm,
            )),
            queues: Arc::new(WaitQueues::default()),
            pending: Arc::new(Pending::default()),
            cells: Cells::default(),
            next_id: AtomicU64::new(1),
            transport,
        });
        crate::pubsub::spawn(&shared.transport, &shared.hub);
        crate::transport::sentinel::spawn_switch_listener(&shared.transport);
        crate::watchdog::spawn(&shared.transport, &shared.watchdog, &shared.hub, &shared.id);
        tracing::debug!(client = %shared.id, config = ?shared.config, "redisync client started");
        Client {
            inner: Arc::new(ClientInner { shared }),
        }
    }

    /// This client's unique id, part of every owner id it hands out: a UUID, after the
    /// client's [label](crate::ClientBuilder::label) and an `@` if it has one.
    pub fn id(&self) -> &str {
        &self.shared().id
    }

    /// The server this client talks to, as `host:port/db` (a Unix socket: `path/db`), exactly
    /// as the URL named it: no lookup is made, so two spellings of one server differ. A client
    /// following Sentinel gives `sentinel:<master>/<db>`, a cluster client
    /// `cluster:<host:port>,...` (its seed nodes, sorted).
    /// [`MultiLock`](https://docs.rs/redisync-multilock) orders locks on different servers
    /// by it.
    pub fn server(&self) -> &str {
        &self.shared().server
    }

    /// The server's name and version as it gave them when the client was built (for a
    /// cluster, its oldest primary); `None` if it would not say (an ACL that grants neither
    /// `HELLO` nor `INFO`). [`ClientBuilder::build`](crate::ClientBuilder::build) refuses a
    /// server older than Redis 7.0 with [`Error::UnsupportedServer`](crate::Error). A
    /// client following Sentinel checks the primary it first finds, not later ones.
    pub fn server_version(&self) -> Option<&crate::ServerVersion> {
        self.shared().server_version.as_ref()
    }

    /// Whether this client talks to a Redis Cluster ([`Client::cluster_builder`]).
    pub fn is_cluster(&self) -> bool {
        self.shared().sharded()
    }

    /// The counters since the client was built.
    pub fn stats(&self) -> Stats {
        let shared = self.shared();
        let mut stats = shared.counters.snapshot();
        stats.lost_leases += shared
            .watchdog
            .lost_on_release
            .load(std::sync::atomic::Ordering::Relaxed);
        stats
    }

    /// Stops the watchdog and the pub/sub hub and wakes every waiter, which returns
    /// [`Error::Shutdown`](crate::Error::Shutdown); every later call on this client's handles
    /// returns it too.
    ///
    /// Holds are not released by shutdown: with the watchdog stopped they expire within their
    /// lease. Shutdown releases nothing it does not own and is idempotent.
    ///
    /// Give-backs still being retried in the background (releases and count-downs Redis has
    /// not confirmed yet, see [`spawn_release`](crate::toolkit::Toolkit::spawn_release)) get one
    /// last attempt, and this call waits for them, at most about two command timeouts. Those that
    /// still fail are counted in [`Stats::unconfirmed_releases`] and logged.
    pub async fn shutdown(&self) {
        if self.shared().shut_down() {
            tracing::debug!(client = %self.id(), "redisync client shut down");
        }
        // Let the background tasks observe the signal before returning.
        tokio::task::yield_now().await;
        // A first attempt already on the wire, then the last one.
        let bound = self
            .shared()
            .config
            .command_timeout
            .saturating_mul(2)
            .saturating_add(Duration::from_millis(100));
        self.shared().pending.drained(bound).await;
    }

    /// Whether [`shutdown`](Self::shutdown) was called.
    pub fn is_shut_down(&self) -> bool {
        self.shared().shutdown.is_set()
    }

    /// The key prefix every key and channel starts with.
    pub fn key_prefix(&self) -> &str {
        &self.shared().config.key_prefix
    }

    /// The lease used when no explicit lease is given.
    pub fn watchdog_timeout(&self) -> Duration {
        self.shared().config.watchdog_timeout
    }

    /// The command timeout.
    pub fn command_timeout(&self) -> Duration {
        self.shared().config.command_timeout
    }

    /// How much faster Redis's clock may run than this client's, in parts per million: a
    /// share of every lease the client counts as over before Redis does (see
    /// [`ClientBuilder::clock_drift_ppm`](crate::ClientBuilder::clock_drift_ppm)).
    pub fn clock_drift_ppm(&self) -> u32 {
        self.shared().config.clock_drift_ppm
    }

    /// How waiters learn that a primitive was released: by pub/sub wake-ups, or by polling.
    pub fn wait_strategy(&self) -> crate::WaitStrategy {
        self.shared().config.wait_strategy
    }

    /// Whether changes wait for replicas to acknowledge them
    /// ([`ClientBuilder::replica_sync`](crate::ClientBuilder::replica_sync)).
    pub fn syncs_replicas(&self) -> bool {
        self.shared().config.replica_sync.is_some()
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.inner.shared
    }
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("id", &self.id())
            .field("config", &self.shared().config)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::transport::redact_url;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact_url("redis://:s3cret@host:6379/0"),
            "redis://***@host:6379/0"
        );
        assert_eq!(redact_url("rediss://user:p@ss@host/"), "rediss://***@host/");
        assert_eq!(redact_url("redis://host:6379/"), "redis://host:6379/");
        assert_eq!(
            redact_url("unix:///tmp/redis.sock?db=1&pass=hunter2"),
            "unix:///tmp/redis.sock?***"
        );
        let builder = Client::builder("redis://:hunter2@localhost/");
        assert!(!format!("{builder:?}").contains("hunter2"));
    }

    #[tokio::test]
    async fn bad_urls_are_invalid_arguments_without_the_password() {
        for url in [
            "redis://:hunter2@host:notaport/",
            "nope://:hunter2@host/",
            "hunter2",
        ] {
            match Client::connect(url).await {
                Err(Error::InvalidArgument(message)) => {
                    assert!(!message.contains("hunter2"), "{message}")
                }
                other => panic!("{url}: expected InvalidArgument, got {other:?}"),
            }
        }
    }

    #[test]
    fn client_is_send_sync() {
        fn check<T: Send + Sync + Clone + 'static>() {}
        check::<Client>();
    }
}

/// What a client is doing locally right now; see [`Client::local_state`].
///
/// # Examples
///
/// ```
/// use redisync::prelude::*;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redisync::Result<()> {
/// # let server = redisync_test_harness::RedisServer::start();
/// # let url = server.url(); // e.g. "redis://127.0.0.1:6379/"
/// let client = Client::connect(url).await?;
/// let guard = client.lock("jobs").lock().await?;
/// assert_eq!(client.local_state().renewed_holds, 1); // the watchdog renews it
/// guard.unlock().await?;
/// assert_eq!(client.local_state(), redisync::LocalState::default()); // nothing left behind
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LocalState {
    /// Primitives with at least one local waiter queued.
    pub waiting_queues: usize,
    /// Channels with at least one local subscriber (with
    /// [`WaitStrategy::Poll`](crate::WaitStrategy::Poll): channels being polled), besides
    /// the client's own lost-notice channel (see [`watchdog`](crate::watchdog)), which it
    /// subscribes with its first watchdog hold and keeps.
    pub subscribed_channels: usize,
    /// Holds the watchdog is renewing (each guard of a re-entered lock counts once).
    pub renewed_holds: usize,
    /// Give-backs (releases, count-downs, given-back acquires) Redis has not confirmed yet,
    /// still being retried in the background.
    pub pending_releases: usize,
}

impl Client {
    /// A snapshot of the client's local bookkeeping. When nothing is held or awaited, every
    /// field is zero; tests use this to prove that cancelled calls leave nothing behind.
    pub fn local_state(&self) -> LocalState {
        let shared = self.shared();
        // The lost-notice channel is the client's, made with its first watchdog hold and
        // kept: not something a call left behind.
        let notices = usize::from(shared.watchdog.listens_for_notices.load(Ordering::Relaxed));
        LocalState {
            waiting_queues: shared.queues.len(),
            subscribed_channels: shared.hub.channel_count().saturating_sub(notices),
            renewed_holds: shared.watchdog.len(),
            pending_releases: shared.pending.len(),
        }
    }
}

#[cfg(all(test, not(feature = "tls")))]
mod without_tls {
    use super::*;
    use crate::error::Error;

    #[tokio::test]
    async fn rediss_urls_ask_for_the_tls_feature() {
        match Client::connect("rediss://127.0.0.1:1/").await {
            Err(Error::InvalidArgument(message)) => assert!(message.contains("tls")),
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }
}
