//! The transport layer: the configuration, the connections (one server, followed through
//! Sentinel, or a cluster) and sending one [`ScriptCall`], bounded by the command timeout and
//! followed by `WAIT` under replica sync. It knows nothing of the client's runtime (pub/sub
//! hub, watchdog, background retries, wait queues), which works through it.

pub(crate) mod cluster;
pub(crate) mod connection;
pub(crate) mod handshake;
pub(crate) mod sentinel;

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::FromRedisValue;
use tracing::Instrument;

use crate::error::{Error, Result};
use crate::script::ScriptCall;
use crate::signal::Flag;
use crate::stats::Counters;
use crate::transport::connection::Connection;

/// How many command timeouts a request abandoned by its caller may take to finish.
pub(crate) const ABANDONED_REQUEST_GRACE: u32 = 4;

/// A give-back's reply, and whether it may be the answer to a repeat.
///
/// A give-back is sent again when a try failed in a way that leaves its outcome unknown (the
/// connection broke after sending it). If that try did run, the one that answered finds its
/// work already done. Scripts that keep a record of each give-back answer a repeat as they
/// answered the first time; scripts that keep none, to spare Redis a key per release, answer
/// as if there were nothing to give back, and the caller judges with `repeated`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confirmed<T> {
    /// Redis's reply to the try that answered.
    pub reply: T,
    /// Whether an earlier try, whose outcome is unknown, may have run before it.
    pub repeated: bool,
}

/// The connections to Redis and what sending over them needs.
pub(crate) struct Transport {
    /// `host:port/db` of the server (or the cluster's or Sentinel's name), for ordering locks
    /// across servers.
    pub(crate) server: String,
    /// The server's name and version as it gave them when the client was built (a cluster's
    /// oldest primary); `None` if it would not say.
    pub(crate) server_version: Option<crate::ServerVersion>,
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
    pub(crate) sentinels: Option<crate::transport::sentinel::Sentinels>,
    next_connection: AtomicUsize,
    pub(crate) counters: Counters,
    pub(crate) shutdown: Flag,
}

#[derive(Clone)]
pub(crate) struct Config {
    pub(crate) url: String,
    pub(crate) key_prefix: String,
    pub(crate) watchdog_timeout: Duration,
    pub(crate) command_timeout: Duration,
    pub(crate) pool_size: u32,
    pub(crate) replica_sync: Option<ReplicaSync>,
    pub(crate) sentinel: Option<crate::transport::sentinel::SentinelConfig>,
    /// Seed nodes of a Redis Cluster, for a client made by
    /// [`Client::cluster_builder`](crate::Client::cluster_builder).
    pub(crate) cluster: Option<Vec<String>>,
    /// How the client reports metrics (feature `metrics`).
    pub(crate) metrics: crate::metrics::Metrics,
    /// How waiters learn of releases.
    pub(crate) wait_strategy: crate::strategy::WaitStrategy,
    /// How much faster Redis's clock may run than the client's, in parts per million: see
    /// [`ClientBuilder::clock_drift_ppm`](crate::ClientBuilder::clock_drift_ppm).
    pub(crate) clock_drift_ppm: u32,
    /// What names this client in its owner ids: see
    /// [`ClientBuilder::label`](crate::ClientBuilder::label).
    pub(crate) label: Option<String>,
    #[cfg(feature = "tls")]
    pub(crate) tls_root_certificate: Option<Vec<u8>>,
    /// A client certificate and its key, PEM.
    #[cfg(feature = "tls")]
    pub(crate) tls_client_certificate: Option<(Vec<u8>, Vec<u8>)>,
}

/// Waiting for replicas after each change: see
/// [`ClientBuilder::replica_sync`](crate::ClientBuilder::replica_sync).
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
            .field("wait_strategy", &self.wait_strategy)
            .field("clock_drift_ppm", &self.clock_drift_ppm)
            .finish()
    }
}

/// A Redis URL fit for printing: user and password, and any query string (where a unix socket
/// URL carries its password), are replaced by `***`.
pub(crate) fn redact_url(url: &str) -> String {
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

impl Transport {
    /// Connects as `config` says (already checked by the builder).
    pub(crate) async fn connect(config: Config) -> Result<Transport> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            Error::invalid("a redisync client must be built inside a tokio runtime")
        })?;
        let sentinels = config
            .sentinel
            .as_ref()
            .map(crate::transport::sentinel::Sentinels::new)
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
                .map_err(|_| Error::Timeout)?
                .map_err(explain_connect_error)?;
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
                            "unusable redis url or TLS certificates ({e}); expected \
                             redis://[[user]:password@]host[:port][/db] or rediss://..."
                        ))
                    })?,
                };
                let connections = tokio::time::timeout(
                    config.command_timeout,
                    connect_pool(&redis_client, &manager_config, config.pool_size),
                )
                .await
                .map_err(|_| Error::Timeout)?
                .map_err(explain_connect_error)?;
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

        let server_version = tokio::time::timeout(
            config.command_timeout,
            handshake::check_server(&connections),
        )
        .await
        .map_err(|_| Error::Timeout)??;

        Ok(Transport {
            server,
            server_version,
            runtime,
            connections: std::sync::RwLock::new(connections),
            redis_client: std::sync::RwLock::new(redis_client),
            manager_config,
            sentinels,
            next_connection: AtomicUsize::new(0),
            counters: Counters::default(),
            shutdown: Flag::default(),
            config,
        })
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

#[cfg(not(feature = "tls"))]
fn open_redis_client(config: &Config) -> redis::RedisResult<redis::Client> {
    if config.url.starts_with("rediss://") {
        return Err(redis::RedisError::from((
            redis::ErrorKind::InvalidClientConfig,
            "rediss:// needs the `tls` feature of redisync",
        )));
    }
    redis::Client::open(connection_info(&config.url)?)
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
    match tls_certificates(config) {
        Some(certificates) => {
            redis::Client::build_with_tls(connection_info(&config.url)?, certificates)
        }
        None => redis::Client::open(connection_info(&config.url)?),
    }
}

/// The certificates the builder was given (a CA to trust, a client certificate to present),
/// if any.
#[cfg(feature = "tls")]
fn tls_certificates(config: &Config) -> Option<redis::TlsCertificates> {
    if config.tls_root_certificate.is_none() && config.tls_client_certificate.is_none() {
        return None;
    }
    Some(redis::TlsCertificates {
        client_tls: config
            .tls_client_certificate
            .clone()
            .map(|(client_cert, client_key)| redis::ClientTlsConfig {
                client_cert,
                client_key,
            }),
        root_cert: config.tls_root_certificate.clone(),
    })
}

/// The server `url` names, connected to without the driver's `CLIENT SETINFO` announcement:
/// Redis 7.0 has no such command, so an ACL rule granting it would be refused there, and on
/// 7.2 and later a user without it would see every connection's announcement in `ACL LOG`.
/// Without it, one set of ACL rules serves every server.
fn connection_info(url: &str) -> redis::RedisResult<redis::ConnectionInfo> {
    use redis::IntoConnectionInfo;
    let info = url.into_connection_info()?;
    let settings = info.redis_settings().clone().set_skip_set_lib_name();
    Ok(info.set_redis_settings(settings))
}

/// A connection error, with a message a user can act on where the driver's would not help: a
/// reply that does not parse means the address is not a Redis server (an HTTP port, a TLS
/// port reached with `redis://`...), which the driver reports as a parse error at some byte.
pub(crate) fn explain_connect_error(err: redis::RedisError) -> Error {
    if err.kind() == redis::ErrorKind::Parse {
        // The driver's detail (the bytes it choked on) would only add noise.
        return Error::Redis(redis::RedisError::from((
            redis::ErrorKind::Parse,
            "the server did not answer as Redis does: is the address a Redis port, and does the \
             URL's scheme match its TLS (redis:// without, rediss:// with)?",
        )));
    }
    Error::from(err)
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
        let connection = cluster.get_async_generic_connection().await?;
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
    if let Some(certificates) = tls_certificates(config) {
        builder = builder.certs(certificates);
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

/// Who is waiting for a script call.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// A caller of the public API: refused once the client is shut down.
    Caller,
    /// Background clean-up decided while the client ran: carried out regardless.
    Background,
}

pub(crate) async fn eval<T: FromRedisValue>(
    transport: Arc<Transport>,
    call: ScriptCall,
) -> Result<T> {
    eval_in(transport, call, Mode::Caller).await
}

async fn eval_in<T: FromRedisValue>(
    transport: Arc<Transport>,
    call: ScriptCall,
    mode: Mode,
) -> Result<T> {
    if mode == Mode::Caller && transport.shutdown.is_set() {
        return Err(Error::Shutdown);
    }
    let timeout = transport.config.command_timeout;
    match tokio::time::timeout(timeout, send(transport.clone(), call)).await {
        Ok(reply) => reply,
        Err(_) => {
            crate::transport::sentinel::recheck_primary(&transport, &Error::Timeout);
            Err(Error::Timeout)
        }
    }
}

/// Sends one script call. Only the connection's response timeout bounds it; callers add the
/// command timeout.
pub(crate) async fn send<T: FromRedisValue>(
    transport: Arc<Transport>,
    call: ScriptCall,
) -> Result<T> {
    let mut connection = transport.connection();
    Counters::bump(&transport.counters.scripts_sent, 1);
    let span = tracing::trace_span!("redisync.script", script = call.script().name());
    let sync = transport
        .config
        .replica_sync
        .filter(|_| !call.script().is_read_only());
    async move {
        match (&mut connection, sync) {
            (connection, Some(sync)) => send_replicated(connection, &call, sync).await,
            (Connection::Cluster(cluster), None) => {
                let reply = crate::transport::cluster::run_script(cluster, &call, None)
                    .await?
                    .into_iter()
                    .next()
                    .unwrap_or(redis::Value::Nil);
                Ok(T::from_redis_value(reply).map_err(redis::RedisError::from)?)
            }
            (connection @ Connection::Single(_), None) => {
                // Built straight from the call: one copy of its keys and arguments. A server
                // that does not know the script loads it with `SCRIPT LOAD`, as redis-rs
                // would, not `EVAL`: DEPLOYMENT.md's ACL grants only `EVALSHA` and that.
                let evalsha = call.evalsha_cmd(false);
                match evalsha.query_async(connection).await {
                    Err(err)
                        if err.kind()
                            == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
                    {
                        call.script().compiled(false).load_async(connection).await?;
                        Ok(evalsha.query_async(connection).await?)
                    }
                    other => Ok(other?),
                }
            }
        }
    }
    .instrument(span)
    .await
    .inspect_err(|err| crate::transport::sentinel::recheck_primary(&transport, err))
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
            let replies = crate::transport::cluster::run_script(cluster, call, Some(wait)).await?;
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
    transport: Arc<Transport>,
    call: ScriptCall,
) -> Result<T> {
    eval_in(transport, call, Mode::Background).await
}

/// [`eval_idempotent`] for a give-back: carried out even after shutdown.
pub(crate) async fn eval_idempotent_background<T: FromRedisValue>(
    transport: Arc<Transport>,
    call: ScriptCall,
) -> Result<T> {
    eval_idempotent(transport, call, Mode::Background).await
}

pub(crate) async fn eval_idempotent_background_confirmed<T: FromRedisValue>(
    transport: Arc<Transport>,
    call: ScriptCall,
) -> Result<Confirmed<T>> {
    eval_idempotent_confirmed(transport, call, Mode::Background).await
}

pub(crate) async fn eval_idempotent<T: FromRedisValue>(
    transport: Arc<Transport>,
    call: ScriptCall,
    mode: Mode,
) -> Result<T> {
    eval_idempotent_confirmed(transport, call, mode)
        .await
        .map(|confirmed| confirmed.reply)
}

/// [`eval_idempotent`], saying whether a try before the one that answered may have run.
pub(crate) async fn eval_idempotent_confirmed<T: FromRedisValue>(
    transport: Arc<Transport>,
    call: ScriptCall,
    mode: Mode,
) -> Result<Confirmed<T>> {
    let started = Instant::now();
    let budget = transport.config.command_timeout;
    let mut pause = Duration::from_millis(10);
    let mut repeated = false;
    loop {
        match eval_in(transport.clone(), call.clone(), mode).await {
            Err(err) if err.is_retryable() && started.elapsed() + pause < budget => {
                tracing::debug!(script = call.script().name(), error = %err, "retrying");
                repeated |= err.is_outcome_unknown();
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(200));
            }
            other => {
                return other.map(|reply| Confirmed { reply, repeated });
            }
        }
    }
}
