//! Running a script on a Redis Cluster.
//!
//! The cluster connection is built with no retries of its own: redis-rs would otherwise resend
//! a request whose connection dropped after it was written, and a script that already ran
//! would run twice (an acquire granted twice over, permits added twice). Without them it
//! still routes by slot and learns the new slot map from every redirection; this module
//! follows the redirections itself, which is safe because a node that answers `MOVED`, `ASK`,
//! `TRYAGAIN` or `CLUSTERDOWN` ran nothing:
//!
//! * `MOVED host:port`: send again to that node (the slot changed owner; the connection also
//!   rebuilds its slot map);
//! * `ASK host:port`: send `ASKING` and the script to that node, once (the slot is migrating
//!   and the keys are already there);
//! * `TRYAGAIN`, `CLUSTERDOWN`, or no connection to the node a redirection named (the
//!   connection only reaches nodes it knows): wait a moment and send again by slot (a
//!   migration or failover is under way);
//! * `NOSCRIPT`: send the script's source with `EVAL` to the same node, which also caches it
//!   there. (`SCRIPT LOAD` would go to every node and fail while any one of them is down.)
//!
//! A broken connection or a timeout is returned as it is: the outcome is then unknown, and the
//! caller gives the acquire back as it does on a single server.

use std::time::Duration;

use redis::cluster_routing::{Route, SingleNodeRoutingInfo, SlotAddr};
use redis::{ErrorKind, RedisError, ServerErrorKind, Value};

use crate::error::Result;
use crate::keys;
use crate::script::ScriptCall;
use crate::transport::connection::ClusterConnection;

/// Most redirections followed for one call: a slot moves once per migration or failover.
const MAX_REDIRECTS: u32 = 5;
/// Most waits for a cluster that asks to try again, and the pause between them.
const MAX_BUSY_RETRIES: u32 = 20;
const BUSY_PAUSE: Duration = Duration::from_millis(25);

/// Runs `call` on the primary owning its keys, followed by `then` (a `WAIT`) in the same round
/// trip if given; returns the replies, the script's first.
pub(crate) async fn run_script(
    connection: &mut ClusterConnection,
    call: &ScriptCall,
    then: Option<redis::Cmd>,
) -> Result<Vec<Value>> {
    let slot = keys::slot(call.first_key());
    let mut target = SingleNodeRoutingInfo::SpecificNode(Route::new(slot, SlotAddr::Master));
    let mut asking = false;
    let mut with_source = false;
    let mut redirects = 0;
    let mut busy = 0;
    loop {
        let mut pipe = redis::pipe();
        if asking {
            pipe.cmd("ASKING");
        }
        pipe.add_command(if with_source {
            call.eval_cmd(true)
        } else {
            call.evalsha_cmd(true)
        });
        if let Some(then) = &then {
            pipe.add_command(then.clone());
        }
        let skip = usize::from(asking);
        let count = 1 + usize::from(then.is_some());
        let replies = connection
            .route_pipeline(pipe, skip, count, target.clone())
            .await
            .and_then(|replies| {
                replies
                    .into_iter()
                    .map(Value::extract_error)
                    .collect::<redis::RedisResult<Vec<Value>>>()
            });
        let err = match replies {
            Ok(replies) => return Ok(replies),
            Err(err) => err,
        };
        let by_slot = SingleNodeRoutingInfo::SpecificNode(Route::new(slot, SlotAddr::Master));
        match err.kind() {
            // Same node, same ASKING, now with the source.
            ErrorKind::Server(ServerErrorKind::NoScript) if !with_source => with_source = true,
            ErrorKind::Server(ServerErrorKind::Moved | ServerErrorKind::Ask)
                if redirects < MAX_REDIRECTS =>
            {
                let Some(node) = redirect_target(&err) else {
                    return Err(err.into());
                };
                redirects += 1;
                asking = err.kind() == ErrorKind::Server(ServerErrorKind::Ask);
                target = node;
            }
            ErrorKind::Server(ServerErrorKind::TryAgain | ServerErrorKind::ClusterDown)
            | ErrorKind::ClusterConnectionNotFound
                if busy < MAX_BUSY_RETRIES =>
            {
                busy += 1;
                asking = false;
                target = by_slot;
                tokio::time::sleep(BUSY_PAUSE).await;
            }
            _ => return Err(err.into()),
        }
    }
}

/// The node a `MOVED` or `ASK` error points to.
fn redirect_target(err: &RedisError) -> Option<SingleNodeRoutingInfo> {
    let (address, _slot) = err.redirect_node()?;
    let (host, port) = address.rsplit_once(':')?;
    Some(SingleNodeRoutingInfo::ByAddress {
        host: host.to_owned(),
        port: port.parse().ok()?,
    })
}
