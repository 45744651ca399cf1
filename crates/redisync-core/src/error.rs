//! The one error type of redisync.

use std::fmt;

/// The result type of every fallible redisync call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in a redisync call.
///
/// The enum is `#[non_exhaustive]`: match the variants you handle and keep a catch-all arm.
/// [`Error::Redis`] carries the driver's error; its kind is a `redisync::redis::ErrorKind`
/// (the facade re-exports the driver as `redisync::redis`, so no dependency of your own is
/// needed to name it).
///
/// # Examples
///
/// ```
/// use redisync::prelude::*;
///
/// /// What the caller should do about a failed call.
/// fn advice(err: &Error) -> &'static str {
///     match err {
///         Error::NotOwner => "the hold was lost: redo the work under a new hold",
///         Error::InvalidArgument(_) => "fix the call",
///         Error::WrongType => "the key holds someone else's data: use another name",
///         Error::Timeout => "redis is slow or unreachable: retry later",
///         Error::Redis(e) if e.kind() == redisync::redis::ErrorKind::AuthenticationFailed => {
///             "check the password"
///         }
///         Error::Redis(e) if e.is_io_error() => "redis is unreachable: retry later",
///         _ => "give up",
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redisync::Result<()> {
/// # let server = redisync_test_harness::RedisServer::start();
/// # let url = server.url(); // e.g. "redis://127.0.0.1:6379/"
/// let client = Client::connect(url).await?;
///
/// let guard = client.lock("report").lock().await?;
/// assert!(client.lock("report").force_unlock().await?); // taken from its holder
/// let err = guard.unlock().await.unwrap_err();
/// assert!(matches!(err, Error::NotOwner));
///
/// let err = client.lock("").try_lock().await.unwrap_err(); // an empty name
/// assert_eq!(advice(&err), "fix the call");
///
/// // The lock's key holds a string someone else wrote.
/// # server.cmd(&["SET", "redisync:{cache}:lock", "not a lock"]);
/// let err = client.lock("cache").try_lock().await.unwrap_err();
/// assert!(matches!(err, Error::WrongType));
///
/// // A server that wants another password.
/// # let secured = redisync_test_harness::RedisServer::start_with(&["--requirepass", "s3cret"]);
/// # let wrong_password = format!("redis://:guess@127.0.0.1:{}/", secured.port());
/// let err = Client::connect(wrong_password).await.unwrap_err();
/// assert_eq!(advice(&err), "check the password");
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Redis could not be reached or answered with an error that is not one of the variants
    /// below. The source carries the driver's error.
    #[error("redis error: {0}")]
    Redis(#[source] redis::RedisError),
    /// A release or extension was attempted on a hold that is no longer ours: its lease expired,
    /// it was force-unlocked, or someone else holds the primitive now. Nothing was changed.
    #[error("not the owner: the hold was lost (lease expired, force-unlocked or taken over)")]
    NotOwner,
    /// A reader asked for the write lock while holding a read lock. This would deadlock, so it
    /// is refused at once.
    #[error("upgrading a read hold to a write hold is not supported")]
    UpgradeNotSupported,
    /// An argument was out of range: an empty or overlong name, a zero lease, a duration too
    /// large for Redis milliseconds, a count above `i64::MAX`, and the like.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The primitive's key exists in Redis but holds data this primitive did not write.
    #[error("wrong type: a key of this primitive holds data of another kind")]
    WrongType,
    /// A Redis call took longer than the client's command timeout.
    #[error("timed out: redis did not answer within the command timeout")]
    Timeout,
    /// The client was shut down (explicitly, or because its last clone was dropped).
    #[error("the client was shut down")]
    Shutdown,
    /// With replica sync on, no replica acknowledged an acquire in time: it was rolled back.
    /// Retrying is safe.
    #[error("not replicated: no replica acknowledged the acquire in time; it was rolled back")]
    NotReplicated,
    /// Several parts of one operation failed (releasing a multi-lock whose sub-locks failed
    /// in different ways): each part's name with its error. Every part was attempted.
    #[error("{} parts failed: {}", .0.len(), describe_parts(.0))]
    Several(Vec<(String, Error)>),
    /// The server is older than redisync supports: [`ClientBuilder::build`] refuses it, naming
    /// the server it found and what it needs (Redis 7.0 or later, or Valkey).
    ///
    /// [`ClientBuilder::build`]: crate::ClientBuilder::build
    #[error("unsupported server: found {found}, redisync needs {needed}")]
    UnsupportedServer {
        /// The server and version found, as in `"Redis 6.2.14"`.
        found: String,
        /// What redisync needs, as in `"Redis 7.0 or later, or Valkey"`.
        needed: String,
    },
}

fn describe_parts(parts: &[(String, Error)]) -> String {
    parts
        .iter()
        .map(|(name, err)| format!("{name}: {err}"))
        .collect::<Vec<_>>()
        .join("; ")
}

impl Error {
    /// Builds an [`Error::InvalidArgument`] from anything printable.
    pub fn invalid(message: impl fmt::Display) -> Self {
        Error::InvalidArgument(message.to_string())
    }

    /// Whether the error says nothing about the outcome of the request: the connection broke
    /// or the reply did not arrive in time. Such a request may or may not have run, and an
    /// acquire must be given back. [`Error::NotReplicated`] counts too: its acquire ran, but
    /// must be given back all the same.
    pub fn is_outcome_unknown(&self) -> bool {
        match self {
            // The acquire ran on the primary: it must be given back like one whose reply was
            // lost.
            Error::Timeout | Error::NotReplicated => true,
            Error::Redis(e) => e.is_io_error() || e.is_connection_dropped() || e.is_timeout(),
            _ => false,
        }
    }

    /// Whether retrying the same request on a fresh connection, or a little later, may
    /// succeed: the request did not run, or its outcome is unknown and it is safe to repeat.
    pub(crate) fn is_retryable(&self) -> bool {
        match self {
            // A cluster that is failing over or moving the slot refused the request before
            // running it (CLUSTERDOWN, TRYAGAIN, redirections beyond the budget, or no
            // connection to the node yet), a server still loading or without its primary, a
            // demoted primary (READONLY), a server busy with another client's slow script
            // (BUSY), out of memory (OOM) or short of replicas (NOREPLICAS) for a write. None
            // of these ran the request.
            Error::Redis(e) => {
                e.is_io_error()
                    || e.is_connection_dropped()
                    || e.is_connection_refusal()
                    || e.is_cluster_error()
                    || matches!(e.code(), Some("BUSY" | "READONLY" | "OOM" | "NOREPLICAS"))
                    || matches!(
                        e.kind(),
                        redis::ErrorKind::ClusterConnectionNotFound
                            | redis::ErrorKind::Server(
                                redis::ServerErrorKind::MasterDown
                                    | redis::ServerErrorKind::BusyLoading
                                    | redis::ServerErrorKind::ReadOnly
                            )
                    )
            }
            _ => false,
        }
    }
}

impl From<redis::RedisError> for Error {
    fn from(err: redis::RedisError) -> Self {
        if err.is_timeout() {
            return Error::Timeout;
        }
        // Scripts surface the server's own error code, so foreign data shows up as WRONGTYPE,
        // or as a "not an integer" complaint when a counter holds something else.
        let foreign_data = err.code() == Some("WRONGTYPE")
            || err
                .detail()
                .is_some_and(|d| d.contains("not an integer") || d.contains("not a valid"));
        if foreign_data {
            return Error::WrongType;
        }
        Error::Redis(err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_is_send_sync_static() {
        fn check<T: Send + Sync + 'static + std::error::Error>() {}
        check::<Error>();
    }

    #[test]
    fn messages_are_lower_case() {
        for e in [
            Error::NotOwner,
            Error::UpgradeNotSupported,
            Error::WrongType,
            Error::Timeout,
            Error::Shutdown,
            Error::invalid("x"),
            Error::UnsupportedServer {
                found: "Redis 6.2.14".into(),
                needed: "Redis 7.0 or later, or Valkey".into(),
            },
        ] {
            let text = e.to_string();
            assert!(text.starts_with(|c: char| c.is_lowercase()), "{text}");
        }
    }
}
