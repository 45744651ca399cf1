//! The client: configuration, connections, and the shared runtime every primitive uses.

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::FromRedisValue;
use tracing::Instrument;

use crate::connection::Connection;
use crate::error::{Error, Result};
use crate::keys;
use crate::pubsub::Hub;
use crate::script::ScriptCall;
use crate::signal::Flag;
use crate::stats::{Counters, Stats};
use crate::wait::WaitQueues;
use crate::watchdog::Watchdog;

/// Default key prefix.
pub const DEFAULT_KEY_PREFIX: &str = "redisync";
/// Default watchdog lease.
pub const DEFAULT_WATCHDOG_TIMEOUT: Duration = Duration::from_secs(30);
/// Default Redis command timeout.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest command timeout a client accepts.
pub const MAX_COMMAND_TIMEOUT: Duration = Duration::from_secs(24 * 60 * 60);
/// The largest pool a client accepts.
pub const MAX_POOL_SIZE: u32 = 1024;
/// How many command timeouts a request abandoned by its caller may take to finish.
pub(crate) const ABANDONED_REQUEST_GRACE: u32 = 4;
/// Default number of multiplexed connections.
pub const DEFAULT_POOL_SIZE: u32 = 4;

/// A handle to Redis and to the client-wide runtime: connections, the pub/sub hub, the
/// watchdog and the local waiter queues.
///
/// `Client` is cheap to clone (an `Arc` inside); clones share everything. Dropping the last
/// clone, and every primitive handle and guard made from it, shuts the client down.
///
/// # Connections
///
/// Commands go over `pool_size` multiplexed connections ([`ConnectionManager`]), picked round
/// robin. A multiplexed connection matches each reply to its request, so dropping a request
/// future half-way can never hand its reply to the next caller (the failure mode of plain
/// pooled connections, redis-rs #325), and it pipelines concurrent requests on one socket. It
/// also reconnects by itself after Redis restarts. A checkout pool (bb8) would add a checkout
/// per call and buy nothing a multiplexed connection lacks, so redisync does not use one.
/// Pub/sub wake-ups use one more, dedicated connection (see [`crate::pubsub`]).
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redisync_core::Result<()> {
/// # let server = redisync_test_harness::RedisServer::start();
/// # let url = server.url(); // e.g. "redis://127.0.0.1:6379/"
/// use redisync_core::Client;
/// use std::time::Duration;
///
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
    /// `host:port/db` of the server (or the cluster's or Sentinel's name), for ordering locks
    /// across servers.
    pub(crate) server: String,
    /// The runtime the client was built on: background work goes there even when it is
    /// started from outside any runtime (a guard dropped on a plain thread).
    pub(crate) runtime: tokio::runtime::Handle,
    pub(crate) config: Config,
    /// Replaced as a whole when the client follows a new primary.
    connections: std::sync::RwLock<Vec<Connection>>,
    /// The server the pool and the pub/sub hub connect to; `None` for a cluster.
    redis_client: std::sync::RwLock<Option<redis::Client>>,
    manager_config: ConnectionManagerConfig,
    /// Set when the client follows the primary Redis Sentinel names.
    pub(crate) sentinels: Option<crate::sentinel::Sentinels>,
    next_connection: AtomicUsize,
    pub(crate) next_id: AtomicU64,
    pub(crate) counters: Counters,
    pub(crate) shutdown: Flag,
    pub(crate) hub: Arc<Hub>,
    pub(crate) watchdog: Arc<Watchdog>,
    pub(crate) queues: Arc<WaitQueues>,
    /// Give-backs still being retried in the background.
    pub(crate) pending: crate::retry::Pending,
    pub(crate) cells: crate::cells::Cells,
}

#[derive(Clone)]
pub(crate) struct Config {
    pub(crate) url: String,
    pub(crate) key_prefix: String,
    pub(crate) watchdog_timeout: Duration,
    pub(crate) command_timeout: Duration,
    pub(crate) pool_size: u32,
    pub(crate) replica_sync: Option<ReplicaSync>,
    pub(crate) sentinel: Option<crate::sentinel::SentinelConfig>,
    /// Seed nodes of a Redis Cluster, for a client made by [`Client::cluster_builder`].
    pub(crate) cluster: Option<Vec<String>>,
    /// How the client reports metrics (feature `metrics`).
    pub(crate) metrics: crate::metrics::Metrics,
    #[cfg(feature = "tls")]
    pub(crate) tls_root_certificate: Option<Vec<u8>>,
}

/// Waiting for replicas after each change: see [`ClientBuilder::replica_sync`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReplicaSync {
    pub(crate) replicas: u32,
    pub(crate) timeout: Duration,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("url", &redact_url(&self.url))
            .field(
                "cluster",
                &self
                    .cluster
                    .as_ref()
                    .map(|nodes| nodes.iter().map(|n| redact_url(n)).collect::<Vec<_>>()),
            )
            .field("key_prefix", &self.key_prefix)
            .field("watchdog_timeout", &self.watchdog_timeout)
            .field("command_timeout", &self.command_timeout)
            .field("pool_size", &self.pool_size)
            .finish()
    }
}

/// A Redis URL fit for printing: user and password, and any query string (where a unix socket
/// URL carries its password), are replaced by `***`.
fn redact_url(url: &str) -> String {
    let (address, query) = match url.split_once('?') {
        Some((address, _)) => (address, "?***"),
        None => (url, ""),
    };
    match (address.find("://"), address.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            format!(
                "{}://***@{}{query}",
                &address[..scheme_end],
                &address[at + 1..]
            )
        }
        _ => format!("{address}{query}"),
    }
}

/// Builds a [`Client`]; start with [`Client::builder`].
#[must_use = "a builder does nothing until build() is awaited"]
pub struct ClientBuilder {
    config: Config,
}

impl fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("config", &self.config)
            .finish()
    }
}

impl ClientBuilder {
    /// Namespace for every key and channel (default `"redisync"`). It may not be empty, contain
    /// braces, or exceed [`keys::MAX_PREFIX_LEN`] bytes.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.config.key_prefix = prefix.into();
        self
    }

    /// Lease used when no explicit lease is given (default 30 s); the watchdog renews it every
    /// third of this. A crashed holder's lock frees within this time.
    pub fn watchdog_timeout(mut self, timeout: Duration) -> Self {
        self.config.watchdog_timeout = timeout;
        self
    }

    /// Number of multiplexed connections commands are spread over (default 4, at most
    /// [`MAX_POOL_SIZE`]).
    pub fn pool_size(mut self, size: u32) -> Self {
        self.config.pool_size = size;
        self
    }

    /// A Redis call slower than this fails with [`Error::Timeout`] (default 5 s, at most
    /// [`MAX_COMMAND_TIMEOUT`]). Connection attempts are bounded by it too.
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.config.command_timeout = timeout;
        self
    }

    /// After every script that changes state, waits (with `WAIT`, in the same round trip) until
    /// `replicas` replicas have acknowledged the change, or `timeout` has passed. An acquire
    /// that *no* replica acknowledged fails with [`Error::NotReplicated`] and is rolled back
    /// (given back, as if its caller had gone away), so a failover right after it cannot hand
    /// the same lock to someone else; fewer acknowledgements than asked for are accepted.
    /// Other changes (releases, count-downs, permits added) are not rolled back: a change no
    /// replica acknowledged is logged as a warning. Read-only calls never wait.
    ///
    /// Off by default; use it with replicas, and only on servers that have `WAIT` (some
    /// managed services do not). `replicas` must be at least 1 and `timeout` shorter than the
    /// command timeout; otherwise [`build`](Self::build) fails with
    /// [`Error::InvalidArgument`]. Each change then takes up to `timeout` longer.
    pub fn replica_sync(mut self, replicas: u32, timeout: Duration) -> Self {
        self.config.replica_sync = Some(ReplicaSync { replicas, timeout });
        self
    }

    /// Labels every metric with the primitive's name too (off by default). Names are
    /// unbounded, and each one makes a time series of every metric: turn this on only when
    /// the application uses a known, small set of names. Without the `metrics` feature this
    /// has no effect. The metrics are listed in [`crate::metrics`].
    pub fn metrics_with_names(mut self, on: bool) -> Self {
        self.config.metrics.names = on;
        self
    }

    /// For a client following Redis Sentinel ([`Client::sentinel_builder`]): the password of
    /// the primary (and of its replicas) and the database to use. Ignored otherwise.
    pub fn sentinel_auth(mut self, password: Option<String>, db: i64) -> Self {
        if let Some(sentinel) = &mut self.config.sentinel {
            sentinel.password = password;
            sentinel.db = db;
        }
        self
    }

    /// Trusts this CA (PEM) for `rediss://` connections instead of the system's roots: for
    /// servers with a private certificate authority. Needs the `tls` feature.
    #[cfg(feature = "tls")]
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.config.tls_root_certificate = Some(pem.into());
        self
    }

    /// Checks the options, connects, and starts the client's background tasks.
    ///
    /// Fails with [`Error::InvalidArgument`] for a malformed URL, an unusable prefix, or a zero
    /// watchdog timeout, pool size or command timeout; with [`Error::Redis`] or
    /// [`Error::Timeout`] when Redis cannot be reached.
    pub async fn build(self) -> Result<Client> {
        let config = self.config;
        keys::validate_prefix(&config.key_prefix)?;
        if config.watchdog_timeout.is_zero() {
            return Err(Error::invalid("watchdog timeout must be greater than zero"));
        }
        crate::duration::lease_millis(config.watchdog_timeout)?;
        if config.command_timeout.is_zero() || config.command_timeout > MAX_COMMAND_TIMEOUT {
            return Err(Error::invalid(format!(
                "command timeout must be greater than zero and at most {MAX_COMMAND_TIMEOUT:?}, \
                 found {:?}",
                config.command_timeout
            )));
        }
        if let Some(sync) = config.replica_sync {
            if sync.replicas == 0
                || sync.timeout.is_zero()
                || sync.timeout >= config.command_timeout
            {
                return Err(Error::invalid(format!(
                    "replica sync needs at least 1 replica and a timeout between zero and the \
                     command timeout ({:?}), found {} replicas and {:?}",
                    config.command_timeout, sync.replicas, sync.timeout
                )));
            }
        }
        if config.pool_size == 0 || config.pool_size > MAX_POOL_SIZE {
            return Err(Error::invalid(format!(
                "pool size must be between 1 and {MAX_POOL_SIZE}, found {}",
                config.pool_size
            )));
        }
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            Error::invalid("a redisync client must be built inside a tokio runtime")
        })?;
        let sentinels = config
            .sentinel
            .as_ref()
            .map(crate::sentinel::Sentinels::new)
            .transpose()?;
        let manager_config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(config.command_timeout))
            // Callers give up after the command timeout; a request they abandoned gets longer
            // to finish, so that an acquire granted late can still be given back.
            .set_response_timeout(Some(
                config
                    .command_timeout
                    .saturating_mul(ABANDONED_REQUEST_GRACE),
            ))
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(20))
            .set_max_delay(Duration::from_millis(200));
        let (redis_client, connections, server) = match &config.cluster {
            Some(nodes) => {
                let cluster = open_cluster_client(&config, None).map_err(|e| {
                    Error::invalid(format!(
                        "unusable cluster node urls ({e}); expected at least one \
                         redis://[[user]:password@]host[:port] or rediss://..."
                    ))
                })?;
                let connections = tokio::time::timeout(
                    config.command_timeout,
                    connect_cluster_pool(&cluster, config.pool_size),
                )
                .await
                .map_err(|_| Error::Timeout)??;
                (None, connections, cluster_name(nodes))
            }
            None => {
                let redis_client = match &sentinels {
                    Some(sentinels) => {
                        tokio::time::timeout(config.command_timeout, sentinels.primary())
                            .await
                            .map_err(|_| Error::Timeout)??
                    }
                    None => open_redis_client(&config).map_err(|e| {
                        // The URL itself is not echoed: it may carry a password.
                        Error::invalid(format!(
                            "unusable redis url ({e}); expected \
                             redis://[[user]:password@]host[:port][/db] or rediss://..."
                        ))
                    })?,
                };
                let connections = tokio::time::timeout(
                    config.command_timeout,
                    connect_pool(&redis_client, &manager_config, config.pool_size),
                )
                .await
                .map_err(|_| Error::Timeout)??;
                // Under Sentinel the primary moves; the master's name identifies the server.
                let server = match &config.sentinel {
                    Some(sentinel) => format!("sentinel:{}/{}", sentinel.master, sentinel.db),
                    None => {
                        let info = redis_client.get_connection_info();
                        format!("{}/{}", info.addr(), info.redis_settings().db())
                    }
                };
                (Some(redis_client), connections, server)
            }
        };

        let id = uuid::Uuid::new_v4().to_string();
        let shared = Arc::new(Shared {
            id,
            server,
            runtime,
            connections: std::sync::RwLock::new(connections),
            redis_client: std::sync::RwLock::new(redis_client),
            manager_config,
            sentinels,
            next_connection: AtomicUsize::new(0),
            next_id: AtomicU64::new(1),
            counters: Counters::default(),
            shutdown: Flag::default(),
            hub: Arc::new(Hub::default()),
            watchdog: Arc::new(Watchdog::new(config.metrics)),
            queues: Arc::new(WaitQueues::default()),
            pending: crate::retry::Pending::default(),
            cells: crate::cells::Cells::default(),
            config,
        });
        crate::pubsub::spawn(&shared);
        crate::sentinel::spawn_switch_listener(&shared);
        crate::watchdog::spawn(&shared);
        tracing::debug!(client = %shared.id, config = ?shared.config, "redisync client started");
        Ok(Client {
            inner: Arc::new(ClientInner { shared }),
        })
    }
}

impl Client {
    /// Connects with every option at its default.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redisync_core::Result<()> {
    /// # let server = redisync_test_harness::RedisServer::start();
    /// # let url = server.url(); // e.g. "redis://127.0.0.1:6379/"
    /// let client = redisync_core::Client::connect(url).await?;
    /// assert_eq!(client.stats().acquires, 0);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect(url: impl Into<String>) -> Result<Client> {
        Client::builder(url).build().await
    }

    /// Starts configuring a client that follows the primary Redis Sentinel names for `master`:
    /// `sentinels` are the Sentinels' URLs (`redis://host:26379`, with a password if they need
    /// one). The client asks them for the primary when it is built and again whenever a
    /// request fails the way a failover would make it fail, and moves its connections to the
    /// new primary (see [`sentinel_auth`](ClientBuilder::sentinel_auth) for the primary's own
    /// password and database).
    ///
    /// ```no_run
    /// # async fn demo() -> redisync_core::Result<()> {
    /// let client = redisync_core::Client::sentinel_builder(
    ///     ["redis://10.0.0.1:26379", "redis://10.0.0.2:26379", "redis://10.0.0.3:26379"],
    ///     "mymaster",
    /// )
    /// .build()
    /// .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn sentinel_builder(
        sentinels: impl IntoIterator<Item = impl Into<String>>,
        master: impl Into<String>,
    ) -> ClientBuilder {
        let mut builder = Client::builder("");
        builder.config.sentinel = Some(crate::sentinel::SentinelConfig {
            sentinels: sentinels.into_iter().map(Into::into).collect(),
            master: master.into(),
            password: None,
            db: 0,
        });
        builder
    }

    /// Starts configuring a client for a Redis Cluster: `nodes` are the URLs of some of its
    /// nodes (`redis://host:port` or `rediss://`, all with the same credentials); the client
    /// learns the rest from them.
    ///
    /// Every primitive works unchanged: all keys of one primitive hash to one slot, so each
    /// operation is still one script on one node. Commands follow `MOVED`/`ASK` redirections
    /// and the slot map as it changes; wake-ups use sharded pub/sub (`SSUBSCRIBE`/`SPUBLISH`,
    /// Redis 7 or later), so a release reaches only the nodes of its own shard. Leases are
    /// renewed in one batch per slot, and a [`MultiLock`](https://docs.rs/redisync-multilock)
    /// takes the locks of each slot in one script.
    ///
    /// [`replica_sync`](ClientBuilder::replica_sync) waits for the replicas of the node that
    /// ran each change.
    ///
    /// ```no_run
    /// # async fn demo() -> redisync_core::Result<()> {
    /// let client = redisync_core::Client::cluster_builder([
    ///     "redis://10.0.0.1:7000",
    ///     "redis://10.0.0.2:7000",
    ///     "redis://10.0.0.3:7000",
    /// ])
    /// .build()
    /// .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn cluster_builder(nodes: impl IntoIterator<Item = impl Into<String>>) -> ClientBuilder {
        let mut builder = Client::builder("");
        builder.config.cluster = Some(nodes.into_iter().map(Into::into).collect());
        builder
    }

    /// Starts configuring a client for `url` (`redis://` or `rediss://`, with optional
    /// `user:password@` and `/db`).
    pub fn builder(url: impl Into<String>) -> ClientBuilder {
        ClientBuilder {
            config: Config {
                url: url.into(),
                key_prefix: DEFAULT_KEY_PREFIX.to_owned(),
                watchdog_timeout: DEFAULT_WATCHDOG_TIMEOUT,
                command_timeout: DEFAULT_COMMAND_TIMEOUT,
                pool_size: DEFAULT_POOL_SIZE,
                replica_sync: None,
                sentinel: None,
                cluster: None,
                metrics: crate::metrics::Metrics::default(),
                #[cfg(feature = "tls")]
                tls_root_certificate: None,
            },
        }
    }

    /// This client's unique id (a UUID), part of every owner id it hands out.
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
    /// [`Error::Shutdown`]; every later call on this client's handles returns it too.
    ///
    /// Holds are not released by shutdown: with the watchdog stopped they expire within their
    /// lease. Shutdown releases nothing it does not own and is idempotent.
    ///
    /// Give-backs still being retried in the background (releases and count-downs Redis has
    /// not confirmed yet, see [`spawn_release`](crate::toolkit::Toolkit::spawn_release)) get one last attempt,
    /// and this call waits for them, at most about two command timeouts. Those that still
    /// fail are counted in [`Stats::unconfirmed_releases`] and logged.
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

#[cfg(not(feature = "tls"))]
fn open_redis_client(config: &Config) -> redis::RedisResult<redis::Client> {
    if config.url.starts_with("rediss://") {
        return Err(redis::RedisError::from((
            redis::ErrorKind::InvalidClientConfig,
            "rediss:// needs the `tls` feature of redisync",
        )));
    }
    redis::Client::open(config.url.as_str())
}

/// redis' rustls picks the process-wide crypto provider, and panics if another crate's
/// features left two of them compiled in without choosing. Chooses ring, unless the
/// application already chose one (then this does nothing).
#[cfg(feature = "tls")]
fn choose_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

#[cfg(feature = "tls")]
fn open_redis_client(config: &Config) -> redis::RedisResult<redis::Client> {
    choose_crypto_provider();
    match &config.tls_root_certificate {
        Some(pem) => redis::Client::build_with_tls(
            config.url.as_str(),
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(pem.clone()),
            },
        ),
        None => redis::Client::open(config.url.as_str()),
    }
}

/// `size` connections to the server of `client`.
async fn connect_pool(
    client: &redis::Client,
    config: &ConnectionManagerConfig,
    size: u32,
) -> redis::RedisResult<Vec<Connection>> {
    let mut connections = Vec::with_capacity(size as usize);
    for _ in 0..size {
        connections.push(Connection::Single(
            ConnectionManager::new_with_config(client.clone(), config.clone()).await?,
        ));
    }
    Ok(connections)
}

/// `size` connections to the cluster, each with its own connection to every node.
async fn connect_cluster_pool(
    cluster: &redis::cluster::ClusterClient,
    size: u32,
) -> redis::RedisResult<Vec<Connection>> {
    let mut connections = Vec::with_capacity(size as usize);
    for _ in 0..size {
        let connection: ClusterConnection = cluster.get_async_connection().await?;
        connections.push(Connection::Cluster(connection));
    }
    Ok(connections)
}

/// A client for the cluster named by `config.cluster`; with `pushes`, one speaking RESP3 that
/// delivers pub/sub messages there (the pub/sub hub's).
pub(crate) fn open_cluster_client(
    config: &Config,
    pushes: Option<tokio::sync::mpsc::UnboundedSender<redis::PushInfo>>,
) -> redis::RedisResult<redis::cluster::ClusterClient> {
    let nodes = config.cluster.clone().unwrap_or_default();
    if nodes.is_empty() {
        return Err(redis::RedisError::from((
            redis::ErrorKind::InvalidClientConfig,
            "no cluster nodes given",
        )));
    }
    #[cfg(not(feature = "tls"))]
    if nodes.iter().any(|node| node.starts_with("rediss://")) {
        return Err(redis::RedisError::from((
            redis::ErrorKind::InvalidClientConfig,
            "rediss:// needs the `tls` feature of redisync",
        )));
    }
    #[cfg(feature = "tls")]
    choose_crypto_provider();
    let mut builder = redis::cluster::ClusterClientBuilder::new(nodes)
        // No resending by redis-rs: it would resend a script whose connection broke after it
        // was sent, and the script may have run. Redirections are followed by
        // crate::cluster, which knows when a resend is safe.
        .retries(0)
        .connection_timeout(config.command_timeout)
        // As for a single server: an abandoned request gets a few command timeouts to finish.
        .response_timeout(
            config
                .command_timeout
                .saturating_mul(ABANDONED_REQUEST_GRACE),
        );
    #[cfg(feature = "tls")]
    if let Some(pem) = &config.tls_root_certificate {
        builder = builder.certs(redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(pem.clone()),
        });
    }
    if let Some(pushes) = pushes {
        builder = builder
            .use_protocol(redis::ProtocolVersion::RESP3)
            .push_sender(pushes);
    }
    builder.build()
}

/// `cluster:` and the seed nodes' addresses, sorted, without credentials.
fn cluster_name(nodes: &[String]) -> String {
    let mut addresses: Vec<String> = nodes
        .iter()
        .map(|node| match redis::Client::open(node.as_str()) {
            Ok(client) => client.get_connection_info().addr().to_string(),
            Err(_) => redact_url(node),
        })
        .collect();
    addresses.sort();
    addresses.dedup();
    format!("cluster:{}", addresses.join(","))
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

    pub(crate) fn connection(&self) -> Connection {
        let connections = self
            .connections
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let i = self.next_connection.fetch_add(1, Ordering::Relaxed) % connections.len();
        connections[i].clone()
    }

    /// The server to connect to now (it changes when the client follows a new primary);
    /// `None` for a cluster client.
    pub(crate) fn redis_client(&self) -> Option<redis::Client> {
        self.redis_client
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Whether scripts run in their cluster form (publishing with `SPUBLISH`).
    pub(crate) fn sharded(&self) -> bool {
        self.config.cluster.is_some()
    }

    /// Moves the connections to `primary` if it is another server; returns its address then.
    pub(crate) async fn move_to(&self, primary: redis::Client) -> Option<String> {
        let address = primary.get_connection_info().addr().to_string();
        // A cluster client has no single server: its connection follows the primaries itself.
        let current = self
            .redis_client()?
            .get_connection_info()
            .addr()
            .to_string();
        if address == current {
            return None;
        }
        let pool = connect_pool(&primary, &self.manager_config, self.config.pool_size)
            .await
            .ok()?;
        *self
            .connections
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = pool;
        *self
            .redis_client
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(primary);
        Some(address)
    }
}

/// Who is waiting for a script call.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// A caller of the public API: refused once the client is shut down.
    Caller,
    /// Background clean-up decided while the client ran: carried out regardless.
    Background,
}

pub(crate) async fn eval<T: FromRedisValue>(shared: Arc<Shared>, call: ScriptCall) -> Result<T> {
    eval_in(shared, call, Mode::Caller).await
}

async fn eval_in<T: FromRedisValue>(
    shared: Arc<Shared>,
    call: ScriptCall,
    mode: Mode,
) -> Result<T> {
    if mode == Mode::Caller && shared.shutdown.is_set() {
        return Err(Error::Shutdown);
    }
    let timeout = shared.config.command_timeout;
    match tokio::time::timeout(timeout, send(shared.clone(), call)).await {
        Ok(reply) => reply,
        Err(_) => {
            crate::sentinel::recheck_primary(&shared, &Error::Timeout);
            Err(Error::Timeout)
        }
    }
}

/// Sends one script call. Only the connection's response timeout bounds it; callers add the
/// command timeout.
pub(crate) async fn send<T: FromRedisValue>(shared: Arc<Shared>, call: ScriptCall) -> Result<T> {
    let mut connection = shared.connection();
    Counters::bump(&shared.counters.scripts_sent, 1);
    let span = tracing::trace_span!("redisync.script", script = call.script().name());
    let sync = shared
        .config
        .replica_sync
        .filter(|_| !call.script().is_read_only());
    async move {
        match (&mut connection, sync) {
            (connection, Some(sync)) => send_replicated(connection, &call, sync).await,
            (Connection::Cluster(cluster), None) => {
                let reply = crate::cluster::run_script(cluster, &call, None)
                    .await?
                    .into_iter()
                    .next()
                    .unwrap_or(redis::Value::Nil);
                Ok(T::from_redis_value(reply).map_err(redis::RedisError::from)?)
            }
            (connection @ Connection::Single(_), None) => call
                .invocation()
                .invoke_async::<T>(connection)
                .await
                .map_err(Error::from),
        }
    }
    .instrument(span)
    .await
    .inspect_err(|err| crate::sentinel::recheck_primary(&shared, err))
}

/// Sends a script and `WAIT` together; see [`ClientBuilder::replica_sync`]. On a cluster the
/// pair goes to the node owning the script's keys (`WAIT` has no key of its own), so it waits
/// for that node's replicas.
async fn send_replicated<T: FromRedisValue>(
    connection: &mut Connection,
    call: &ScriptCall,
    sync: ReplicaSync,
) -> Result<T> {
    let mut wait = redis::cmd("WAIT");
    wait.arg(sync.replicas)
        .arg(crate::duration::redis_millis(sync.timeout));
    let (reply, acknowledged): (T, i64) = match connection {
        Connection::Cluster(cluster) => {
            let replies = crate::cluster::run_script(cluster, call, Some(wait)).await?;
            <(T, i64)>::from_redis_value(redis::Value::Array(replies))
                .map_err(redis::RedisError::from)?
        }
        Connection::Single(_) => {
            let mut pipe = redis::pipe();
            pipe.add_command(call.evalsha_cmd(false)).add_command(wait);
            match pipe.query_async(connection).await {
                Err(err)
                    if err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
                {
                    call.script().compiled(false).load_async(connection).await?;
                    pipe.query_async(connection).await?
                }
                other => other?,
            }
        }
    };
    if acknowledged > 0 {
        return Ok(reply);
    }
    if call.rolls_back_unreplicated() {
        return Err(Error::NotReplicated);
    }
    tracing::warn!(
        script = call.script().name(),
        "no replica acknowledged a change within the replica-sync timeout"
    );
    Ok(reply)
}

/// One attempt of a background give-back, bounded by the command timeout; carried out even
/// after shutdown.
pub(crate) async fn eval_background<T: FromRedisValue>(
    shared: Arc<Shared>,
    call: ScriptCall,
) -> Result<T> {
    eval_in(shared, call, Mode::Background).await
}

/// [`eval_idempotent`] for a give-back: carried out even after shutdown.
pub(crate) async fn eval_idempotent_background<T: FromRedisValue>(
    shared: Arc<Shared>,
    call: ScriptCall,
) -> Result<T> {
    eval_idempotent(shared, call, Mode::Background).await
}

pub(crate) async fn eval_idempotent_background_confirmed<T: FromRedisValue>(
    shared: Arc<Shared>,
    call: ScriptCall,
) -> Result<crate::retry::Confirmed<T>> {
    eval_idempotent_confirmed(shared, call, Mode::Background).await
}

pub(crate) async fn eval_idempotent<T: FromRedisValue>(
    shared: Arc<Shared>,
    call: ScriptCall,
    mode: Mode,
) -> Result<T> {
    eval_idempotent_confirmed(shared, call, mode)
        .await
        .map(|confirmed| confirmed.reply)
}

/// [`eval_idempotent`], saying whether a try before the one that answered may have run.
pub(crate) async fn eval_idempotent_confirmed<T: FromRedisValue>(
    shared: Arc<Shared>,
    call: ScriptCall,
    mode: Mode,
) -> Result<crate::retry::Confirmed<T>> {
    let started = Instant::now();
    let budget = shared.config.command_timeout;
    let mut pause = Duration::from_millis(10);
    let mut repeated = false;
    loop {
        match eval_in(shared.clone(), call.clone(), mode).await {
            Err(err) if err.is_retryable() && started.elapsed() + pause < budget => {
                tracing::debug!(script = call.script().name(), error = %err, "retrying");
                repeated |= err.is_outcome_unknown();
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(200));
            }
            other => {
                return other.map(|reply| crate::retry::Confirmed { reply, repeated });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LocalState {
    /// Primitives with at least one local waiter queued.
    pub waiting_queues: usize,
    /// Channels with at least one local subscriber.
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
        LocalState {
            waiting_queues: shared.queues.len(),
            subscribed_channels: shared.hub.channel_count(),
            renewed_holds: shared.watchdog.len(),
            pending_releases: shared.pending.len(),
        }
    }
}

#[cfg(all(test, not(feature = "tls")))]
mod without_tls {
    use super::*;

    #[tokio::test]
    async fn rediss_urls_ask_for_the_tls_feature() {
        match Client::connect("rediss://127.0.0.1:1/").await {
            Err(Error::InvalidArgument(message)) => assert!(message.contains("tls")),
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }
}
