//! The builder: a client's options, their defaults and checks, and the constructors of
//! [`Client`] that start from them.

use std::fmt;
use std::time::Duration;

use crate::client::Client;
use crate::duration::{DEFAULT_CLOCK_DRIFT_PPM, MAX_CLOCK_DRIFT_PPM};
use crate::error::{Error, Result};
use crate::keys;
use crate::strategy::WaitStrategy;
use crate::transport::{Config, ReplicaSync, Transport};

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
/// The longest [label](ClientBuilder::label) a client accepts, in bytes.
pub const MAX_LABEL_LEN: usize = 128;
/// Default number of multiplexed connections.
pub const DEFAULT_POOL_SIZE: u32 = 4;

/// Builds a [`Client`]; start with [`Client::builder`] (one server),
/// [`Client::sentinel_builder`] or [`Client::cluster_builder`].
///
/// Every option has a default; [`build`](Self::build) checks them all, then connects.
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
/// let client = Client::builder(url.clone())
///     .key_prefix("billing")                       // keys start with "billing:"
///     .watchdog_timeout(Duration::from_secs(10))   // a crashed holder frees within 10 s
///     .command_timeout(Duration::from_secs(2))
///     .pool_size(2)
///     .build()
///     .await?;
/// assert_eq!(client.key_prefix(), "billing");
/// assert_eq!(client.watchdog_timeout(), Duration::from_secs(10));
///
/// // Options are checked when the client is built.
/// let zero_pool = Client::builder(url).pool_size(0).build().await;
/// assert!(matches!(zero_pool, Err(Error::InvalidArgument(_))));
/// # Ok(())
/// # }
/// ```
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

    /// How much faster Redis's clock may run than this client's, in parts per million
    /// (default [`DEFAULT_CLOCK_DRIFT_PPM`], 1000 ppm = 0.1 %; at most
    /// [`MAX_CLOCK_DRIFT_PPM`]).
    ///
    /// Redis ends a hold by its own wall clock, the client counts the lease on its own
    /// monotonic clock from when it sent the request. If Redis's clock runs fast (an NTP
    /// daemon slewing it forward, a drifting oscillator), the hold ends in Redis before the
    /// client's count of the lease is over. So the client believes in a hold (what
    /// `is_lost`, `lost` and the lease's end go by) until `lease − margin`, with a margin of
    /// [`CLOCK_MARGIN`](crate::CLOCK_MARGIN) (2 ms) plus `lease × ppm / 1,000,000`: 32 ms on
    /// the default 30 s watchdog lease, after every renewal. Fencing tokens protect writes
    /// after a hold ended either way; without them (or for an expirable permit, which has
    /// none), a bound below the real drift means two holders for that long.
    ///
    /// The default covers `ntpd`, which slews a clock by at most 500 ppm. `chronyd` may slew
    /// much faster while it corrects a large offset (its `maxslewrate`, 83,333 ppm by
    /// default): cap it on the Redis host (`maxslewrate 500`) or raise this bound. Clock
    /// *steps* are not drift, and no bound covers them (see DEPLOYMENT.md). `0` keeps only the
    /// fixed 2 ms. [`build`](Self::build) fails with [`Error::InvalidArgument`] above
    /// [`MAX_CLOCK_DRIFT_PPM`].
    ///
    /// ```
    /// use redisync::prelude::*;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redisync::Result<()> {
    /// # let server = redisync_test_harness::RedisServer::start();
    /// # let url = server.url();
    /// let client = Client::builder(url.clone())
    ///     .clock_drift_ppm(5_000) // Redis's clock may run up to 0.5 % fast
    ///     .build()
    ///     .await?;
    /// assert_eq!(client.clock_drift_ppm(), 5_000);
    ///
    /// let absurd = Client::builder(url).clock_drift_ppm(1_000_000).build().await;
    /// assert!(matches!(absurd, Err(Error::InvalidArgument(_))));
    /// # Ok(())
    /// # }
    /// ```
    pub fn clock_drift_ppm(mut self, ppm: u32) -> Self {
        self.config.clock_drift_ppm = ppm;
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

    /// How waiters learn that a busy primitive may be free: pub/sub wake-ups (the default) or,
    /// for servers and ACL users without pub/sub, [`WaitStrategy::Poll`], with which the
    /// client never subscribes. [`build`](Self::build) fails with [`Error::InvalidArgument`]
    /// for a poll interval out of range.
    ///
    /// ```
    /// use redisync::prelude::*;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redisync::Result<()> {
    /// # let server = redisync_test_harness::RedisServer::start();
    /// # let url = server.url();
    /// let client = Client::builder(url)
    ///     .wait_strategy(WaitStrategy::Poll { interval: Duration::from_millis(50) })
    ///     .build()
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn wait_strategy(mut self, strategy: WaitStrategy) -> Self {
        self.config.wait_strategy = strategy;
        self
    }

    /// Names this client in every owner id it hands out (`<label>@<uuid>:<n>` instead of
    /// `<uuid>:<n>`), so that whoever looks at Redis sees which process holds what:
    /// `host:pid`, a pod name, a service. Ids stay unique whatever the label: two clients may
    /// share one. [`build`](Self::build) fails with [`Error::InvalidArgument`] for a label
    /// that is empty, longer than [`MAX_LABEL_LEN`] bytes, or has an `@`, a `/`, a brace,
    /// white space or a control character.
    ///
    /// ```
    /// use redisync::prelude::*;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redisync::Result<()> {
    /// # let server = redisync_test_harness::RedisServer::start();
    /// # let url = server.url();
    /// let client = Client::builder(url).label("billing-7f9c:4242").build().await?;
    /// assert!(client.id().starts_with("billing-7f9c:4242@"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.config.label = Some(label.into());
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

    /// Presents this client certificate and its private key (both PEM) on `rediss://`
    /// connections: for servers that ask clients for one (`tls-auth-clients yes`, the Redis
    /// default when TLS is on). Needs the `tls` feature. An unusable certificate or key fails
    /// [`build`](Self::build) with [`Error::InvalidArgument`].
    #[cfg(feature = "tls")]
    pub fn tls_client_certificate(
        mut self,
        certificate_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.config.tls_client_certificate = Some((certificate_pem.into(), key_pem.into()));
        self
    }

    /// Checks the options, connects, and starts the client's background tasks.
    ///
    /// Fails with [`Error::InvalidArgument`] for a malformed URL, an unusable prefix, a zero
    /// watchdog timeout, pool size or command timeout, a poll interval out of range, or a
    /// clock drift bound above [`MAX_CLOCK_DRIFT_PPM`]; with [`Error::Redis`] or
    /// [`Error::Timeout`] when Redis cannot be reached; with [`Error::UnsupportedServer`] for
    /// a server older than Redis 7.0 (see [`Client::server_version`]).
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
        config.wait_strategy.check()?;
        if let Some(label) = &config.label {
            check_label(label)?;
        }
        if config.clock_drift_ppm > MAX_CLOCK_DRIFT_PPM {
            return Err(Error::invalid(format!(
                "clock drift bound must be at most {MAX_CLOCK_DRIFT_PPM} ppm, found {} ppm",
                config.clock_drift_ppm
            )));
        }
        if config.pool_size == 0 || config.pool_size > MAX_POOL_SIZE {
            return Err(Error::invalid(format!(
                "pool size must be between 1 and {MAX_POOL_SIZE}, found {}",
                config.pool_size
            )));
        }
        let transport = Transport::connect(config).await?;
        Ok(Client::start(transport))
    }
}

impl Client {
    /// Connects with every option at its default.
    ///
    /// ```
    /// use redisync::prelude::*;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redisync::Result<()> {
    /// # let server = redisync_test_harness::RedisServer::start();
    /// # let url = server.url(); // e.g. "redis://127.0.0.1:6379/"
    /// let client = Client::connect(url).await?;
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
    /// use redisync::prelude::*;
    ///
    /// # async fn demo() -> redisync::Result<()> {
    /// let client = Client::sentinel_builder(
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
        builder.config.sentinel = Some(crate::transport::sentinel::SentinelConfig {
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
    /// use redisync::prelude::*;
    ///
    /// # async fn demo() -> redisync::Result<()> {
    /// let client = Client::cluster_builder([
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
                wait_strategy: WaitStrategy::default(),
                clock_drift_ppm: DEFAULT_CLOCK_DRIFT_PPM,
                label: None,
                #[cfg(feature = "tls")]
                tls_root_certificate: None,
                #[cfg(feature = "tls")]
                tls_client_certificate: None,
            },
        }
    }
}

/// Refuses a label that would make owner ids ambiguous or unusable: an `@` ends the label in
/// an id, a `/` would make ids (and permit ids) unfit for file names, a brace could become a
/// key's hash tag, white space separates ids in some records.
fn check_label(label: &str) -> Result<()> {
    let bad = label.chars().find(|c| {
        *c == '@' || *c == '/' || *c == '{' || *c == '}' || c.is_whitespace() || c.is_control()
    });
    if label.is_empty() || label.len() > MAX_LABEL_LEN || bad.is_some() {
        return Err(Error::invalid(format!(
            "a client label must have 1 to {MAX_LABEL_LEN} bytes and no '@', '/', braces, white \
             space or control characters, found {label:?}"
        )));
    }
    Ok(())
}
