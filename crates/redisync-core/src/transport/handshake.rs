//! What a client asks a server before using it: who it is, so that a server older than
//! redisync supports is refused when the client is built, not by a script's Lua error later.
//!
//! `HELLO` with no arguments changes nothing and names the server and its version; every user
//! may send it, whatever its ACL rules. Where a server lacks it (Redis before 6.0, a proxy),
//! `INFO server`. A cluster client asks every primary. A server that answers neither (a proxy
//! that hides both, an ACL without `INFO` on a server without `HELLO`) is used as it is, with
//! a warning.

use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
use redis::Value;

use crate::error::{Error, Result};
use crate::server_version::{floor_description, ServerVersion};
use crate::transport::connection::Connection;

/// The server behind `connections` (for a cluster, its oldest primary), or `None` if it would
/// not say; fails with [`Error::UnsupportedServer`] if any is older than the floor.
///
/// `HELLO` and `INFO` change nothing, so a question whose connection broke under it is asked
/// again on the next connection (each reconnects by itself), until the caller's command
/// timeout ends the check: connections broken right after they were made (a flaky network,
/// a `CLIENT KILL`) do not fail the client's build when the next ones work.
pub(crate) async fn check_server(connections: &[Connection]) -> Result<Option<ServerVersion>> {
    for connection in connections.iter().cycle() {
        match identify(&mut connection.clone()).await {
            Err(e) if e.is_outcome_unknown() => tokio::time::sleep(RETRY_PAUSE).await,
            outcome => return outcome,
        }
    }
    Err(Error::invalid("pool size must be at least 1"))
}

/// The pause before asking again on the next connection.
const RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(20);

async fn identify(connection: &mut Connection) -> Result<Option<ServerVersion>> {
    let found = match ask(connection, redis::cmd("HELLO")).await? {
        Some(replies) => replies
            .iter()
            .map(ServerVersion::from_hello)
            .collect::<Option<Vec<_>>>(),
        None => None,
    };
    let found = match found {
        Some(found) => Some(found),
        None => match ask(connection, info_server()).await? {
            Some(replies) => replies
                .iter()
                .map(|reply| {
                    redis::from_redis_value_ref::<String>(reply)
                        .ok()
                        .and_then(|text| ServerVersion::from_info(&text))
                })
                .collect::<Option<Vec<_>>>(),
            None => None,
        },
    };
    let Some(found) = found else {
        tracing::warn!(
            "the server answered neither HELLO nor INFO server with its version: redisync \
             cannot check that it is {}",
            floor_description()
        );
        return Ok(None);
    };
    if let Some(old) = found.iter().find(|server| !server.is_supported()) {
        return Err(Error::UnsupportedServer {
            found: old.to_string(),
            needed: floor_description(),
        });
    }
    Ok(found.into_iter().min_by_key(ServerVersion::version))
}

fn info_server() -> redis::Cmd {
    let mut cmd = redis::cmd("INFO");
    cmd.arg("server");
    cmd
}

/// Each server's reply to `cmd` (every primary's, on a cluster); `None` if a server refused
/// it (no right to it, or no such command); an error if the servers could not be reached.
async fn ask(connection: &mut Connection, cmd: redis::Cmd) -> Result<Option<Vec<Value>>> {
    let reply = match connection {
        Connection::Single(single) => cmd.query_async::<Value>(single).await,
        Connection::Cluster(cluster) => {
            cluster
                .route_command(
                    cmd,
                    RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None)),
                )
                .await
        }
    };
    let replies = match (reply, &*connection) {
        // The cluster connection answers with each node's reply (or error) by its address.
        (Ok(Value::Map(by_node)), Connection::Cluster(_)) => {
            by_node.into_iter().map(|(_, reply)| reply).collect()
        }
        (Ok(reply), _) => vec![reply],
        (Err(e), _) if refused(&e) => return Ok(None),
        // The first reply the client reads from the server: a server that is not Redis shows
        // here.
        (Err(e), _) => return Err(crate::transport::explain_connect_error(e)),
    };
    if replies
        .iter()
        .any(|reply| matches!(reply, Value::ServerError(_)))
    {
        return Ok(None);
    }
    Ok(Some(replies))
}

/// Whether the server refused the command itself, rather than failing to answer.
fn refused(err: &redis::RedisError) -> bool {
    matches!(err.code(), Some("NOPERM" | "ERR"))
}
