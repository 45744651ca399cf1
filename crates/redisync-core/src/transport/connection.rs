//! One connection type for the two deployments a client can talk to: a single server (plain or
//! followed through Sentinel) and a Redis Cluster.
//!
//! Both are multiplexed and reconnect by themselves. The cluster connection also routes every
//! command to the primary owning its first key's slot and follows `MOVED`/`ASK` redirections;
//! since all keys of one primitive share a hash tag, each script lands on one node whole.

use redis::aio::{ConnectionLike, ConnectionManager, MultiplexedConnection};
use redis::{Cmd, IntoConnectionInfo, Pipeline, RedisFuture, Value};

/// A connection to a Redis Cluster, with [`NodeConnection`]s to its nodes.
pub(crate) type ClusterConnection = redis::cluster_async::ClusterConnection<NodeConnection>;

/// The connection a [`ClusterConnection`] keeps to each node: the driver's own, made without
/// its `CLIENT SETINFO` announcement, as every connection of a client is (see
/// `transport::connection_info`). The driver's cluster client has no setting for that, so
/// the cluster connection is built with this node type instead
/// (`ClusterClient::get_async_generic_connection`).
#[derive(Clone)]
pub(crate) struct NodeConnection(MultiplexedConnection);

impl redis::cluster_async::Connect for NodeConnection {
    fn connect_with_config<'a, T>(
        info: T,
        config: redis::AsyncConnectionConfig,
    ) -> RedisFuture<'a, Self>
    where
        T: IntoConnectionInfo + Send + 'a,
    {
        Box::pin(async move {
            let info = info.into_connection_info()?;
            let settings = info.redis_settings().clone().set_skip_set_lib_name();
            let info = info.set_redis_settings(settings);
            let connection =
                <MultiplexedConnection as redis::cluster_async::Connect>::connect_with_config(
                    info, config,
                )
                .await?;
            Ok(NodeConnection(connection))
        })
    }
}

impl ConnectionLike for NodeConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        self.0.req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.0.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.0.get_db()
    }
}

/// A connection to a single server or to a cluster.
#[derive(Clone)]
pub(crate) enum Connection {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::Single(connection) => connection.req_packed_command(cmd),
            Connection::Cluster(connection) => connection.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Connection::Single(connection) => {
                connection.req_packed_commands(pipeline, offset, count)
            }
            Connection::Cluster(connection) => {
                connection.req_packed_commands(pipeline, offset, count)
            }
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Single(connection) => connection.get_db(),
            Connection::Cluster(connection) => connection.get_db(),
        }
    }
}
