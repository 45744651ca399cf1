//! Following the primary that Redis Sentinel names.
//!
//! A client built with [`Client::sentinel_builder`](crate::Client::sentinel_builder) asks the
//! Sentinels for the primary of a named master when it is built, again as soon as a Sentinel
//! announces a switch (`+switch-master`, which the client listens for), and whenever a request
//! to the current one fails in a way a failover explains: the connection broke or timed out,
//! or the server answers `READONLY` (it was demoted to a replica). If the Sentinels now name
//! another server, the client's connections move there; requests in flight fail with their
//! own error, and the next ones go to the new primary. Pub/sub reconnects to it on its next
//! reconnect, and meanwhile still hears releases (a demoted primary replicates them).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};

use crate::error::{Error, Result};
use crate::transport::Transport;

/// Where the Sentinels are, and which master to follow.
#[derive(Clone)]
pub(crate) struct SentinelConfig {
    pub(crate) sentinels: Vec<String>,
    pub(crate) master: String,
    pub(crate) password: Option<String>,
    pub(crate) db: i64,
}

impl std::fmt::Debug for SentinelConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentinelConfig")
            .field("sentinels", &self.sentinels.len())
            .field("master", &self.master)
            .field("db", &self.db)
            .finish_non_exhaustive()
    }
}

/// The client's link to the Sentinels.
pub(crate) struct Sentinels {
    client: tokio::sync::Mutex<SentinelClient>,
    /// A lookup is under way: failures meanwhile need not start another.
    resolving: AtomicBool,
}

impl Sentinels {
    pub(crate) fn new(config: &SentinelConfig) -> Result<Self> {
        // No `CLIENT SETINFO` to the primary, as for one server (see `connection_info`).
        let mut redis_info = redis::RedisConnectionInfo::default()
            .set_db(config.db)
            .set_skip_set_lib_name();
        if let Some(password) = &config.password {
            redis_info = redis_info.set_password(password.clone());
        }
        let node = SentinelNodeConnectionInfo::default().set_redis_connection_info(redis_info);
        let client = SentinelClient::build(
            config.sentinels.clone(),
            config.master.clone(),
            Some(node),
            SentinelServerType::Master,
        )
        .map_err(|e| Error::invalid(format!("unusable sentinel addresses ({e})")))?;
        Ok(Sentinels {
            client: tokio::sync::Mutex::new(client),
            resolving: AtomicBool::new(false),
        })
    }

    /// A connection to one of the Sentinels themselves.
    async fn sentinel(&self) -> Result<redis::Client> {
        self.client
            .lock()
            .await
            .async_get_sentinel_client()
            .await
            .map_err(Error::from)
    }

    /// Asks the Sentinels for the current primary.
    pub(crate) async fn primary(&self) -> Result<redis::Client> {
        self.client
            .lock()
            .await
            .async_get_client()
            .await
            .map_err(Error::from)
    }
}

/// Whether `err` is what a failover looks like from the old primary's side.
pub(crate) fn suggests_failover(err: &Error) -> bool {
    match err {
        Error::Timeout => true,
        Error::Redis(e) => {
            e.is_io_error()
                || e.is_connection_dropped()
                || e.is_connection_refusal()
                || e.is_timeout()
                || e.code() == Some("READONLY")
        }
        _ => false,
    }
}

/// After a failure that a failover explains, looks the primary up again (one lookup at a
/// time, in the background) and moves the client's connections if it changed.
pub(crate) fn recheck_primary(transport: &Arc<Transport>, err: &Error) {
    let Some(sentinels) = transport.sentinels.as_ref() else {
        return;
    };
    if !suggests_failover(err) || sentinels.resolving.swap(true, Ordering::AcqRel) {
        return;
    }
    let transport = transport.clone();
    transport.runtime.clone().spawn(async move {
        let timeout = transport.config.command_timeout;
        let moved = tokio::time::timeout(timeout, async {
            let sentinels = transport.sentinels.as_ref()?;
            let primary = sentinels.primary().await.ok()?;
            transport.move_to(primary).await
        })
        .await;
        if let Ok(Some(address)) = moved {
            tracing::info!(primary = %address, "following the primary the sentinels name");
        }
        if let Some(sentinels) = transport.sentinels.as_ref() {
            sentinels.resolving.store(false, Ordering::Release);
        }
    });
}

/// Listens for the Sentinels' `+switch-master` announcements and follows the primary at once,
/// reconnecting (to any Sentinel) until the client shuts down.
pub(crate) fn spawn_switch_listener(transport: &Arc<Transport>) {
    if transport.sentinels.is_none() {
        return;
    }
    let transport = transport.clone();
    transport.runtime.clone().spawn(async move {
        use futures_util::StreamExt;
        let mut pause = std::time::Duration::from_millis(100);
        loop {
            let listened = async {
                let sentinels = transport.sentinels.as_ref()?;
                let mut pubsub = sentinels
                    .sentinel()
                    .await
                    .ok()?
                    .get_async_pubsub()
                    .await
                    .ok()?;
                pubsub.subscribe("+switch-master").await.ok()?;
                let mut messages = pubsub.on_message();
                while let Some(message) = messages.next().await {
                    let payload: String = message.get_payload().unwrap_or_default();
                    // "<master name> <old ip> <old port> <new ip> <new port>"
                    let named = payload.split_whitespace().next();
                    if named == Some(transport.config.sentinel.as_ref()?.master.as_str()) {
                        recheck_primary(&transport, &Error::Timeout);
                    }
                }
                Some(())
            };
            tokio::select! {
                _ = transport.shutdown.wait() => return,
                _ = listened => {}
            }
            tokio::select! {
                _ = transport.shutdown.wait() => return,
                _ = tokio::time::sleep(pause) => {}
            }
            pause = (pause * 2).min(std::time::Duration::from_secs(5));
        }
    });
}
