//! A Redis Cluster of **real** `redis-server` processes, for tests.
//!
//! [`RedisCluster::start`] starts `masters * (1 + replicas_per_master)` nodes
//! (each a [`RedisServer`] in its own temporary directory, with its
//! `nodes.conf` there) and builds the cluster without `redis-cli`: every node
//! meets the first one, the 16384 slots are split evenly over the masters, the
//! replicas are attached with `CLUSTER REPLICATE`, and the call returns once
//! every node reports `cluster_state:ok`, agrees on the slot map and every
//! replication link is up.
//!
//! Roles are never cached: [`masters`](RedisCluster::masters),
//! [`replica_of`](RedisCluster::replica_of),
//! [`master_for_slot`](RedisCluster::master_for_slot) and friends ask the
//! running nodes, so they stay right after a
//! [`failover`](RedisCluster::failover) or
//! [`kill_master_and_wait_for_failover`](RedisCluster::kill_master_and_wait_for_failover).
//!
//! The nodes run with `cluster-node-timeout` [`NODE_TIMEOUT_MS`] (a killed
//! master is replaced within a few seconds), `cluster-replica-validity-factor 0`
//! (a replica is always allowed to take over, however long its link has been
//! down), `cluster-allow-replica-migration no` (replicas stay where they were
//! put) and `repl-diskless-sync-delay 0` (replicas sync at once). Full
//! coverage is required (the default), so `cluster_state:ok` means that every
//! slot is served.
//!
//! Every method blocks the calling thread (waits poll every 50 ms and give up
//! after [`CONVERGENCE_TIMEOUT`] with a panic describing every node's view).
//! In a `#[tokio::test]` on the default current-thread runtime, the client's
//! background tasks do not run while a wait is in progress; use
//! `flavor = "multi_thread"` or `spawn_blocking` if that matters.
//!
//! ```no_run
//! use redisync_test_harness::RedisCluster;
//!
//! let mut cluster = RedisCluster::start(3, 1);
//! let master = cluster.master_for_key("my-lock");
//! cluster.route_cmd(&["SET", "my-lock", "1"]).unwrap();
//! assert_eq!(cluster.keys_on_node(master), vec!["my-lock".to_owned()]);
//! let new_master = cluster.kill_master_and_wait_for_failover(master);
//! assert_eq!(cluster.master_for_key("my-lock"), new_master);
//! ```

use std::net::TcpListener;
use std::ops::RangeInclusive;
use std::thread;
use std::time::{Duration, Instant};

use redis::{ErrorKind, ServerErrorKind, Value};

use crate::{
    connection_info, free_port, launch, parse_info_field, password_from_args, resolve_binary,
    LaunchError, RedisServer, REDIS_SERVER_BIN_ENV, START_ATTEMPTS,
};

/// Number of hash slots of a Redis Cluster (slots are `0..=16383`).
pub const SLOT_COUNT: u16 = 16384;

/// `cluster-node-timeout` of every node, in milliseconds.
pub const NODE_TIMEOUT_MS: u64 = 1000;

/// How long the harness waits for the cluster to converge (startup, failover,
/// [`RedisCluster::wait_for_ok`]) before it panics.
pub const CONVERGENCE_TIMEOUT: Duration = Duration::from_secs(30);

/// The cluster bus listens on the client port plus this offset.
const BUS_PORT_OFFSET: u16 = 10000;
/// Interval between two polls of a wait.
const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// Connect timeout of the harness' polling connections.
const QUERY_CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// Read/write timeout of the harness' polling connections (a paused node
/// counts as unreachable after this long).
const QUERY_IO_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a graceful failover may take before `CLUSTER FAILOVER` is sent
/// again (Redis gives up a manual failover after 5 s).
const FAILOVER_RETRY: Duration = Duration::from_secs(6);
/// Read/write timeout of [`RedisCluster::route_cmd`].
const ROUTE_IO_TIMEOUT: Duration = Duration::from_secs(10);
/// How many MOVED/ASK redirections [`RedisCluster::route_cmd`] follows.
const MAX_REDIRECTS: usize = 5;
/// How many port pairs are tried before giving up.
const PORT_PAIR_ATTEMPTS: usize = 1000;

/// The role of a node, as its `ROLE` command reports it now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeRole {
    /// A master (with or without slots).
    Master,
    /// A replica.
    Replica {
        /// Index of the node it replicates, or `None` if that port is not a
        /// node of this cluster (not expected).
        master: Option<usize>,
        /// Whether the replication link is up (`master_link_status:up`).
        link_up: bool,
    },
}

/// What one node reports about itself and the cluster.
struct NodeView {
    /// Its `ROLE`.
    role: NodeRole,
    /// Its `CLUSTER INFO` text.
    info: String,
    /// Its slot map: `(first, last, owner)` sorted by `first`; `owner` is
    /// `Err(port)` for a port that is not a node of this cluster.
    slots: Vec<(u16, u16, Result<usize, u16>)>,
}

/// A Redis Cluster of real `redis-server` processes on `127.0.0.1`; see the
/// [module documentation](self).
///
/// Nodes are numbered in start order: `0..masters` are the initial masters,
/// master `k` owns the `k`-th of `masters` equal slot ranges and its initial
/// replicas are `masters + k * replicas_per_master ..` (the next
/// `replicas_per_master` indices). Indices never change; roles do.
///
/// Dropping the cluster kills every node (`SIGKILL`) and removes their
/// directories.
#[derive(Debug)]
pub struct RedisCluster {
    /// The nodes, in index order.
    nodes: Vec<RedisServer>,
    /// Node ids (`CLUSTER MYID`), in index order; stable across restarts
    /// because `nodes.conf` is kept.
    ids: Vec<String>,
}

impl RedisCluster {
    /// Starts a cluster of `masters` masters with `replicas_per_master`
    /// replicas each and waits until it is fully up (see the
    /// [module documentation](self)). Several clusters can run in parallel:
    /// every node gets a free port whose cluster bus port (`port + 10000`) is
    /// free too, and a port taken in between is retried.
    ///
    /// Failing over a killed master needs a majority of the masters that own
    /// slots to be alive, so use at least 3 masters for
    /// [`kill_master_and_wait_for_failover`](Self::kill_master_and_wait_for_failover).
    ///
    /// # Panics
    ///
    /// Panics if `masters` is 0, a node does not start, or the cluster does
    /// not converge within [`CONVERGENCE_TIMEOUT`].
    pub fn start(masters: usize, replicas_per_master: usize) -> RedisCluster {
        Self::start_with(masters, replicas_per_master, &[])
    }

    /// Like [`start`](Self::start), with extra `redis-server` arguments for
    /// every node, appended after the harness' own (so they can override
    /// them). If they contain `--requirepass <password>`, `--masterauth` is
    /// added with the same password so replicas can sync, and the harness
    /// authenticates its own connections.
    ///
    /// # Panics
    ///
    /// Same as [`start`](Self::start).
    pub fn start_with(
        masters: usize,
        replicas_per_master: usize,
        extra_args: &[&str],
    ) -> RedisCluster {
        assert!(masters > 0, "a Redis Cluster needs at least one master");
        assert!(
            masters <= usize::from(SLOT_COUNT),
            "a Redis Cluster has at most {SLOT_COUNT} masters"
        );
        let total = masters * (1 + replicas_per_master);
        let args = node_args(extra_args);

        // Start every node in parallel; a panic in one thread is re-raised
        // here and the nodes already started are killed on unwinding.
        let nodes: Vec<RedisServer> = thread::scope(|scope| {
            let handles: Vec<_> = (0..total)
                .map(|_| scope.spawn(|| start_node(&args)))
                .collect();
            handles
                .into_iter()
                .map(|handle| {
                    handle
                        .join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                })
                .collect()
        });
        let ids: Vec<String> = nodes
            .iter()
            .map(|node| {
                let reply = node.cmd(&["CLUSTER", "MYID"]);
                text(&reply).unwrap_or_else(|| panic!("unexpected CLUSTER MYID reply {reply:?}"))
            })
            .collect();
        let cluster = RedisCluster { nodes, ids };

        // Distinct config epochs, as redis-cli does, so that no epoch
        // collision has to be resolved before the cluster is stable.
        for (i, node) in cluster.nodes.iter().enumerate() {
            node.cmd(&["CLUSTER", "SET-CONFIG-EPOCH", &(i + 1).to_string()]);
        }
        for k in 0..masters {
            let slots = slot_range(k, masters);
            cluster.nodes[k].cmd(&[
                "CLUSTER",
                "ADDSLOTSRANGE",
                &slots.start().to_string(),
                &slots.end().to_string(),
            ]);
        }
        let first_port = cluster.nodes[0].port().to_string();
        for node in &cluster.nodes[1..] {
            node.cmd(&["CLUSTER", "MEET", "127.0.0.1", &first_port]);
        }
        cluster.poll("every node to know every other node", || {
            cluster.all_nodes_known()
        });

        for k in 0..masters {
            for replica in cluster.initial_replicas(k, masters, replicas_per_master) {
                cluster.nodes[replica].cmd(&["CLUSTER", "REPLICATE", &cluster.ids[k]]);
            }
        }
        cluster.poll("the cluster to come up", || {
            cluster.converged()?;
            for k in 0..masters {
                for replica in cluster.initial_replicas(k, masters, replicas_per_master) {
                    match cluster.role(replica) {
                        Some(NodeRole::Replica {
                            master: Some(m),
                            link_up: true,
                        }) if m == k => {}
                        role => {
                            return Err(format!(
                                "node {replica} should be a replica of node {k} with its link \
                                 up, but its role is {role:?}"
                            ))
                        }
                    }
                }
            }
            Ok(())
        });
        cluster
    }

    /// Number of nodes (running or not).
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// All nodes, in index order.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// Node `i`, e.g. to [`pause`](RedisServer::pause) it or read its
    /// [`port`](RedisServer::port).
    ///
    /// # Panics
    ///
    /// Panics if `i` is out of range.
    pub fn node(&self, i: usize) -> &RedisServer {
        &self.nodes[i]
    }

    /// The cluster node id of node `i` (stable across
    /// [`restart_node`](Self::restart_node)).
    ///
    /// # Panics
    ///
    /// Panics if `i` is out of range.
    pub fn node_id(&self, i: usize) -> &str {
        &self.ids[i]
    }

    /// The index of the node listening on `port`, if it belongs to this
    /// cluster (handy to follow a `MOVED` error).
    pub fn index_of_port(&self, port: u16) -> Option<usize> {
        self.nodes.iter().position(|node| node.port() == port)
    }

    /// `redis://127.0.0.1:{port}/` of every running node, in index order:
    /// seeds for a cluster client.
    pub fn seed_urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .filter(|node| node.is_running())
            .map(RedisServer::url)
            .collect()
    }

    /// The role of node `i` according to its `ROLE` command now, or `None` if
    /// it is stopped or does not answer (e.g. paused).
    ///
    /// # Panics
    ///
    /// Panics if `i` is out of range.
    pub fn role(&self, i: usize) -> Option<NodeRole> {
        let mut con = self.query_connection(i).ok()?;
        self.role_on(&mut con).ok()
    }

    /// Indices of the nodes that are masters now (`ROLE`), in index order.
    /// Stopped and unreachable nodes are left out.
    pub fn masters(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.role(i) == Some(NodeRole::Master))
            .collect()
    }

    /// Indices of the nodes that are replicas now (`ROLE`), in index order.
    /// Stopped and unreachable nodes are left out.
    pub fn replicas(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| matches!(self.role(i), Some(NodeRole::Replica { .. })))
            .collect()
    }

    /// Indices of the nodes that replicate node `master` now (`ROLE`), in
    /// index order.
    pub fn replicas_of(&self, master: usize) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| {
                matches!(self.role(i), Some(NodeRole::Replica { master: Some(m), .. }) if m == master)
            })
            .collect()
    }

    /// The first node (lowest index) that replicates node `master` now, if any.
    pub fn replica_of(&self, master: usize) -> Option<usize> {
        self.replicas_of(master).into_iter().next()
    }

    /// The hash slot of `key` according to Redis (`CLUSTER KEYSLOT`).
    ///
    /// # Panics
    ///
    /// Panics if no node answers.
    pub fn slot_of(&self, key: &str) -> u16 {
        let reply = self.ask_any(&["CLUSTER", "KEYSLOT", key]);
        int(&reply)
            .and_then(|slot| u16::try_from(slot).ok())
            .unwrap_or_else(|| panic!("unexpected CLUSTER KEYSLOT reply {reply:?}"))
    }

    /// The slot map (`CLUSTER SLOTS`) as the first reachable node sees it:
    /// `(slots, index of the master)`, ordered by slot. Right after a
    /// topology change nodes may disagree; [`wait_for_ok`](Self::wait_for_ok)
    /// first if that matters.
    ///
    /// # Panics
    ///
    /// Panics if no node answers or a range is owned by a port that is not a
    /// node of this cluster.
    pub fn slot_map(&self) -> Vec<(RangeInclusive<u16>, usize)> {
        let reply = self.ask_any(&["CLUSTER", "SLOTS"]);
        let ranges = self
            .parse_slots(&reply)
            .unwrap_or_else(|e| panic!("unexpected CLUSTER SLOTS reply: {e}"));
        ranges
            .into_iter()
            .map(|(first, last, owner)| {
                let owner = owner.unwrap_or_else(|port| {
                    panic!("slots {first}..={last} are owned by port {port}, not a cluster node")
                });
                (first..=last, owner)
            })
            .collect()
    }

    /// The index of the master serving `slot`, according to the first
    /// reachable node's `CLUSTER SLOTS`.
    ///
    /// # Panics
    ///
    /// Panics if no node answers or the slot is not assigned.
    pub fn master_for_slot(&self, slot: u16) -> usize {
        self.slot_map()
            .into_iter()
            .find(|(slots, _)| slots.contains(&slot))
            .map(|(_, owner)| owner)
            .unwrap_or_else(|| panic!("slot {slot} is not assigned to any node"))
    }

    /// The index of the master serving `key` (its [`slot_of`](Self::slot_of)).
    ///
    /// # Panics
    ///
    /// Same as [`master_for_slot`](Self::master_for_slot).
    pub fn master_for_key(&self, key: &str) -> usize {
        self.master_for_slot(self.slot_of(key))
    }

    /// The slot ranges node `master` owns now (from [`slot_map`](Self::slot_map)).
    pub fn slots_of(&self, master: usize) -> Vec<RangeInclusive<u16>> {
        self.slot_map()
            .into_iter()
            .filter(|(_, owner)| *owner == master)
            .map(|(slots, _)| slots)
            .collect()
    }

    /// Runs one command on node `i` (see [`RedisServer::try_cmd`]).
    ///
    /// # Panics
    ///
    /// Panics if `i` is out of range, `args` is empty or the node cannot be
    /// reached.
    pub fn try_cmd_on(&self, i: usize, args: &[&str]) -> redis::RedisResult<Value> {
        self.nodes[i].try_cmd(args)
    }

    /// Runs one command on node `i` and returns the reply (see
    /// [`RedisServer::cmd`]); error replies such as `MOVED` panic.
    ///
    /// # Panics
    ///
    /// Panics if `i` is out of range, `args` is empty, the node cannot be
    /// reached or it answers with an error.
    pub fn cmd_on(&self, i: usize, args: &[&str]) -> Value {
        self.nodes[i].cmd(args)
    }

    /// Runs one command like a cluster client would: on the first running
    /// node, following up to 5 `MOVED`/`ASK` redirections. Returns the final
    /// reply or error (`CLUSTERDOWN` during a failover, for instance, or an
    /// I/O error if a node does not answer within 10 s).
    ///
    /// # Panics
    ///
    /// Panics if `args` is empty, no node is running, or a redirection points
    /// outside the cluster.
    pub fn route_cmd(&self, args: &[&str]) -> redis::RedisResult<Value> {
        let (name, rest) = args
            .split_first()
            .expect("RedisCluster::route_cmd needs at least the command name");
        let mut target = self
            .nodes
            .iter()
            .position(RedisServer::is_running)
            .expect("RedisCluster::route_cmd: no node is running");
        let mut asking = false;
        for _ in 0..=MAX_REDIRECTS {
            let mut con = self.connect(target, ROUTE_IO_TIMEOUT)?;
            if asking {
                redis::cmd("ASKING").exec(&mut con)?;
            }
            let mut cmd = redis::cmd(name);
            for arg in rest {
                cmd.arg(*arg);
            }
            let error = match cmd.query::<Value>(&mut con) {
                Ok(reply) => return Ok(reply),
                Err(error) => error,
            };
            let Some((addr, _slot)) = error.redirect_node() else {
                return Err(error);
            };
            asking = error.kind() == ErrorKind::Server(ServerErrorKind::Ask);
            target = addr
                .rsplit_once(':')
                .and_then(|(_, port)| port.parse().ok())
                .and_then(|port| self.index_of_port(port))
                .unwrap_or_else(|| {
                    panic!("{args:?} was redirected to {addr}, which is not a node of this cluster")
                });
        }
        panic!("{args:?} was redirected more than {MAX_REDIRECTS} times");
    }

    /// The keys stored on node `i` (`KEYS *`), sorted.
    ///
    /// # Panics
    ///
    /// Panics if `i` is out of range or the node cannot be reached.
    pub fn keys_on_node(&self, i: usize) -> Vec<String> {
        let reply = self.cmd_on(i, &["KEYS", "*"]);
        let mut keys: Vec<String> = redis::from_redis_value_ref(&reply)
            .unwrap_or_else(|e| panic!("unexpected KEYS reply {reply:?}: {e}"));
        keys.sort();
        keys
    }

    /// Number of keys stored on node `i` (`DBSIZE`).
    ///
    /// # Panics
    ///
    /// Panics if `i` is out of range or the node cannot be reached.
    pub fn count_keys_on_node(&self, i: usize) -> u64 {
        let reply = self.cmd_on(i, &["DBSIZE"]);
        redis::from_redis_value_ref(&reply)
            .unwrap_or_else(|e| panic!("unexpected DBSIZE reply {reply:?}: {e}"))
    }

    /// Number of keys in `slot` on the master serving it
    /// (`CLUSTER COUNTKEYSINSLOT`).
    ///
    /// # Panics
    ///
    /// Panics if the master cannot be found or reached.
    pub fn keys_in_slot_count(&self, slot: u16) -> u64 {
        let master = self.master_for_slot(slot);
        let reply = self.cmd_on(master, &["CLUSTER", "COUNTKEYSINSLOT", &slot.to_string()]);
        redis::from_redis_value_ref(&reply)
            .unwrap_or_else(|e| panic!("unexpected CLUSTER COUNTKEYSINSLOT reply {reply:?}: {e}"))
    }

    /// Whether the cluster has converged: every reachable node reports
    /// `cluster_state:ok` with all 16384 slots served, all of them see the
    /// same slot map, every slot owner is a reachable master, and every
    /// reachable replica replicates a reachable master with its link up.
    /// Stopped nodes and nodes that do not answer (e.g. paused) are left out.
    /// The error says what is not converged yet.
    pub fn check_ok(&self) -> Result<(), String> {
        self.converged().map(|_| ())
    }

    /// Waits until [`check_ok`](Self::check_ok) succeeds.
    ///
    /// # Panics
    ///
    /// Panics with every node's view if that takes longer than
    /// [`CONVERGENCE_TIMEOUT`].
    pub fn wait_for_ok(&self) {
        self.poll("the cluster to be ok", || self.check_ok());
    }

    /// Waits until the cluster has converged and returns the agreed slot map.
    fn wait_converged(&self, what: &str) -> Vec<(u16, u16, usize)> {
        self.poll(&format!("the cluster to be ok {what}"), || self.converged())
    }

    /// The slot ranges `node` owns in `map`.
    fn ranges_of(map: &[(u16, u16, usize)], node: usize) -> Vec<RangeInclusive<u16>> {
        map.iter()
            .filter(|(_, _, owner)| *owner == node)
            .map(|&(first, last, _)| first..=last)
            .collect()
    }

    /// Graceful failover: waits until [`check_ok`](Self::check_ok)
    /// succeeds, sends `CLUSTER FAILOVER` to `replica` (again if it was not
    /// promoted after 6 s) and waits until it is a master, owns the slots of
    /// its former master and [`check_ok`](Self::check_ok) succeeds again (the
    /// former master, if running, is then its replica).
    ///
    /// # Panics
    ///
    /// Panics if `replica` is not a replica of a master owning slots, or the
    /// failover does not complete within [`CONVERGENCE_TIMEOUT`].
    pub fn failover(&self, replica: usize) {
        let map = self.wait_converged(&format!("before failing over to node {replica}"));
        let master = match self.role(replica) {
            Some(NodeRole::Replica {
                master: Some(master),
                ..
            }) => master,
            role => panic!("failover: node {replica} is not a replica (role {role:?})"),
        };
        let slots = Self::ranges_of(&map, master);
        assert!(
            !slots.is_empty(),
            "failover: node {replica} replicates node {master}, which owns no slots"
        );
        self.cmd_on(replica, &["CLUSTER", "FAILOVER"]);
        let mut requested = Instant::now();
        self.poll(
            &format!("node {replica} to take over from node {master}"),
            || {
                if requested.elapsed() >= FAILOVER_RETRY
                    && matches!(self.role(replica), Some(NodeRole::Replica { .. }))
                {
                    let _ = self.try_cmd_on(replica, &["CLUSTER", "FAILOVER"]);
                    requested = Instant::now();
                }
                self.took_over(replica, &slots)
            },
        );
    }

    /// Waits until [`check_ok`](Self::check_ok) succeeds, kills master
    /// `master` (`SIGKILL`) and waits until one of its replicas has been
    /// promoted by the cluster, owns its slots and
    /// [`check_ok`](Self::check_ok) succeeds on the remaining nodes. Returns
    /// the index of the new master. The killed node stays stopped (see
    /// [`restart_node`](Self::restart_node)).
    ///
    /// # Panics
    ///
    /// Panics if `master` is not a master owning slots, has no replica, fewer
    /// than 3 masters own slots (the others could not reach a majority), or
    /// the failover does not complete within [`CONVERGENCE_TIMEOUT`].
    pub fn kill_master_and_wait_for_failover(&mut self, master: usize) -> usize {
        let map = self.wait_converged(&format!("before killing node {master}"));
        let role = self.role(master);
        assert_eq!(
            role,
            Some(NodeRole::Master),
            "kill_master_and_wait_for_failover: node {master} is not a reachable master"
        );
        let slots = Self::ranges_of(&map, master);
        assert!(
            !slots.is_empty(),
            "kill_master_and_wait_for_failover: node {master} owns no slots"
        );
        let mut owners: Vec<usize> = map.iter().map(|&(_, _, owner)| owner).collect();
        owners.sort_unstable();
        owners.dedup();
        assert!(
            owners.len() >= 3,
            "kill_master_and_wait_for_failover needs at least 3 masters owning slots (it has {}): \
             the surviving masters must be a majority to mark the killed one as failed",
            owners.len()
        );
        let candidates = self.replicas_of(master);
        assert!(
            !candidates.is_empty(),
            "kill_master_and_wait_for_failover: node {master} has no replica"
        );

        self.nodes[master].stop();
        self.poll(
            &format!("a replica of killed node {master} ({candidates:?}) to take over"),
            || {
                for &candidate in &candidates {
                    if self.role(candidate) == Some(NodeRole::Master) {
                        self.took_over(candidate, &slots)?;
                        return Ok(candidate);
                    }
                }
                Err(format!("none of {candidates:?} is a master yet"))
            },
        )
    }

    /// Moves hash slot `slot`, with its keys, to master `to_master`, the way
    /// `redis-cli --cluster reshard` does, and waits until every node agrees.
    ///
    /// The steps (see the `CLUSTER SETSLOT` documentation):
    ///
    /// 1. `CLUSTER SETSLOT <slot> IMPORTING <source-id>` on the target, then
    ///    `CLUSTER SETSLOT <slot> MIGRATING <target-id>` on the source (the
    ///    slot's current owner). From then on the source serves the keys it
    ///    still has and answers `ASK` for the others (`TRYAGAIN` for a
    ///    multi-key command whose keys are split), and the target serves
    ///    commands preceded by `ASKING`;
    /// 2. on the source, `CLUSTER GETKEYSINSLOT <slot> 100` and
    ///    `MIGRATE 127.0.0.1 <target-port> "" 0 5000 [AUTH <password>] KEYS ...`
    ///    until no key is left (keys are not replaced: a key that already
    ///    exists on the target makes this panic);
    /// 3. `CLUSTER SETSLOT <slot> NODE <target-id>` on the target (which ends
    ///    its importing state and bumps its config epoch), then on the source
    ///    (which ends its migrating state and ends the slot's sharded pub/sub
    ///    subscriptions with a `sunsubscribe` push to each subscriber), then
    ///    on every other master;
    /// 4. waits until [`check_ok`](Self::check_ok) succeeds with every node
    ///    naming `to_master` as the slot's owner, and no master reports an
    ///    importing or migrating state for the slot.
    ///
    /// Clients that keep using the slot meanwhile see `ASK`, `TRYAGAIN`, and
    /// then `MOVED`. Use
    /// [`begin_slot_migration`](Self::begin_slot_migration) and
    /// [`finish_slot_migration`](Self::finish_slot_migration) to stop half-way.
    ///
    /// # Panics
    ///
    /// Panics if the cluster does not converge first, `to_master` is not a
    /// master or already owns the slot, a command fails, or the nodes do not
    /// agree within [`CONVERGENCE_TIMEOUT`].
    pub fn migrate_slot(&self, slot: u16, to_master: usize) {
        self.begin_slot_migration(slot, to_master, 0);
        self.finish_slot_migration(slot, to_master);
    }

    /// Steps 1 and 2 of [`migrate_slot`](Self::migrate_slot), stopping
    /// half-way: marks `slot` importing on `to_master` and migrating on its
    /// current owner, moves at most `keys_to_move` of its keys (in
    /// `CLUSTER GETKEYSINSLOT` order) and returns them. The slot stays
    /// owned by the source until
    /// [`finish_slot_migration`](Self::finish_slot_migration): commands on
    /// the moved keys (and on new keys) are answered with `ASK`, multi-key
    /// commands whose keys are split with `TRYAGAIN`.
    ///
    /// # Panics
    ///
    /// Same as [`migrate_slot`](Self::migrate_slot).
    pub fn begin_slot_migration(
        &self,
        slot: u16,
        to_master: usize,
        keys_to_move: usize,
    ) -> Vec<String> {
        let map = self.wait_converged(&format!("before migrating slot {slot}"));
        let source = map
            .iter()
            .find(|&&(first, last, _)| first <= slot && slot <= last)
            .map(|&(_, _, owner)| owner)
            .unwrap_or_else(|| panic!("migrate slot {slot}: the slot is not assigned"));
        assert_ne!(
            source, to_master,
            "migrate slot {slot}: node {to_master} already owns it"
        );
        assert_eq!(
            self.role(to_master),
            Some(NodeRole::Master),
            "migrate slot {slot}: node {to_master} is not a reachable master"
        );
        let slot_arg = slot.to_string();
        self.cmd_on(
            to_master,
            &[
                "CLUSTER",
                "SETSLOT",
                &slot_arg,
                "IMPORTING",
                &self.ids[source],
            ],
        );
        self.cmd_on(
            source,
            &[
                "CLUSTER",
                "SETSLOT",
                &slot_arg,
                "MIGRATING",
                &self.ids[to_master],
            ],
        );
        self.move_keys(slot, source, to_master, keys_to_move)
    }

    /// Steps 2 to 4 of [`migrate_slot`](Self::migrate_slot) for a slot that
    /// [`begin_slot_migration`](Self::begin_slot_migration) left half-way:
    /// moves the slot's remaining keys to `to_master`, hands it the slot and
    /// waits until every node agrees.
    ///
    /// # Panics
    ///
    /// Panics if the slot is not being migrated to `to_master`, a command
    /// fails, or the nodes do not agree within [`CONVERGENCE_TIMEOUT`].
    pub fn finish_slot_migration(&self, slot: u16, to_master: usize) {
        let source = self.master_for_slot(slot);
        let slot_arg = slot.to_string();
        let target_id = self.ids[to_master].clone();
        let migrating = format!("[{slot}->-{target_id}]");
        let importing = format!("[{slot}-<-{}]", self.ids[source]);
        assert!(
            self.own_nodes_line(source).contains(&migrating),
            "finish slot {slot}: node {source} is not migrating it to node {to_master}"
        );
        assert!(
            self.own_nodes_line(to_master).contains(&importing),
            "finish slot {slot}: node {to_master} is not importing it from node {source}"
        );
        let set_owner = ["CLUSTER", "SETSLOT", &slot_arg, "NODE", &target_id];
        self.move_keys(slot, source, to_master, usize::MAX);
        self.cmd_on(to_master, &set_owner);
        // The source refuses while it still has keys of the slot (one written after the last
        // batch was listed): move those too and ask again.
        let deadline = Instant::now() + CONVERGENCE_TIMEOUT;
        while let Err(e) = self.try_cmd_on(source, &set_owner) {
            assert!(
                Instant::now() < deadline && e.to_string().contains("still hold keys"),
                "CLUSTER SETSLOT {slot} NODE on node {source} failed: {e}"
            );
            self.move_keys(slot, source, to_master, usize::MAX);
        }
        for master in self.masters() {
            if master != source && master != to_master {
                self.cmd_on(master, &set_owner);
            }
        }
        let marker = format!("[{slot}-");
        self.poll(
            &format!("every node to agree that node {to_master} owns slot {slot}"),
            || {
                let map = self.converged()?;
                let owner = map
                    .iter()
                    .find(|&&(first, last, _)| first <= slot && slot <= last)
                    .map(|&(_, _, owner)| owner);
                if owner != Some(to_master) {
                    return Err(format!("slot {slot} is owned by node {owner:?}"));
                }
                for master in [source, to_master] {
                    if self.own_nodes_line(master).contains(&marker) {
                        return Err(format!(
                            "node {master} still reports a migration of slot {slot}"
                        ));
                    }
                }
                Ok(())
            },
        );
    }

    /// Moves up to `limit` keys of `slot` from `source` to `target` with
    /// `MIGRATE`, in batches of 100; returns them.
    fn move_keys(&self, slot: u16, source: usize, target: usize, limit: usize) -> Vec<String> {
        let slot_arg = slot.to_string();
        let port = self.nodes[target].port().to_string();
        let password = self.nodes[target].password().map(str::to_owned);
        let deadline = Instant::now() + CONVERGENCE_TIMEOUT;
        let mut moved = Vec::new();
        while moved.len() < limit {
            let batch = (limit - moved.len()).min(100).to_string();
            let reply = self.cmd_on(source, &["CLUSTER", "GETKEYSINSLOT", &slot_arg, &batch]);
            let keys: Vec<String> = redis::from_redis_value_ref(&reply).unwrap_or_else(|e| {
                panic!("unexpected CLUSTER GETKEYSINSLOT reply {reply:?}: {e}")
            });
            if keys.is_empty() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "slot {slot} of node {source} still has keys after {CONVERGENCE_TIMEOUT:?}"
            );
            let mut args = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000"];
            if let Some(password) = &password {
                args.extend(["AUTH", password.as_str()]);
            }
            args.push("KEYS");
            args.extend(keys.iter().map(String::as_str));
            if let Err(e) = self.try_cmd_on(source, &args) {
                panic!("MIGRATE of {keys:?} from node {source} to node {target} failed: {e}");
            }
            moved.extend(keys);
        }
        moved
    }

    /// Node `i`'s own line of `CLUSTER NODES` (the one flagged `myself`),
    /// where its importing and migrating slots are listed.
    fn own_nodes_line(&self, i: usize) -> String {
        let reply = self.cmd_on(i, &["CLUSTER", "NODES"]);
        let nodes =
            text(&reply).unwrap_or_else(|| panic!("unexpected CLUSTER NODES reply {reply:?}"));
        nodes
            .lines()
            .find(|line| {
                line.split_whitespace()
                    .nth(2)
                    .is_some_and(|f| f.contains("myself"))
            })
            .unwrap_or_else(|| panic!("node {i}'s CLUSTER NODES has no `myself` line: {nodes}"))
            .to_owned()
    }

    /// Stops node `i` (`SIGKILL`) without waiting for the cluster to react.
    ///
    /// # Panics
    ///
    /// Panics if `i` is out of range.
    pub fn stop_node(&mut self, i: usize) {
        self.nodes[i].stop();
    }

    /// Restarts node `i` on the same port with its `nodes.conf` (so the same
    /// node id; its data set is empty) and waits until
    /// [`check_ok`](Self::check_ok) succeeds. A master that was replaced
    /// while it was down comes back as a replica of its successor.
    ///
    /// # Panics
    ///
    /// Panics if `i` is out of range, the node does not start or the cluster
    /// does not converge within [`CONVERGENCE_TIMEOUT`].
    pub fn restart_node(&mut self, i: usize) {
        self.nodes[i].restart();
        self.poll(&format!("restarted node {i} to rejoin"), || {
            self.converged()?;
            if self.role(i).is_none() {
                return Err(format!("node {i} does not answer"));
            }
            Ok(())
        });
    }

    /// The initial replicas of master `k`.
    fn initial_replicas(
        &self,
        k: usize,
        masters: usize,
        replicas_per_master: usize,
    ) -> std::ops::Range<usize> {
        let first = masters + k * replicas_per_master;
        first..first + replicas_per_master
    }

    /// Ok once `node` is a master owning every range of `slots` in a
    /// converged cluster.
    fn took_over(&self, node: usize, slots: &[RangeInclusive<u16>]) -> Result<(), String> {
        let map = self.converged()?;
        // The map covers every slot (`cluster_slots_ok` is 16384), so it is
        // enough that no overlapping entry has another owner.
        for range in slots {
            if let Some((first, last, owner)) = map.iter().find(|&&(first, last, owner)| {
                owner != node && first <= *range.end() && last >= *range.start()
            }) {
                return Err(format!(
                    "slots {first}..={last} are served by node {owner}, not node {node}"
                ));
            }
        }
        Ok(())
    }

    /// Checks convergence (see [`check_ok`](Self::check_ok)) and returns the
    /// agreed slot map `(first, last, owner)`.
    fn converged(&self) -> Result<Vec<(u16, u16, usize)>, String> {
        let views: Vec<(usize, NodeView)> = (0..self.nodes.len())
            .filter_map(|i| self.view(i).map(|view| (i, view)))
            .collect();
        let Some((first, first_view)) = views.first() else {
            return Err("no node is reachable".to_owned());
        };
        for (i, view) in &views {
            let state = parse_info_field(&view.info, "cluster_state");
            if state != Some("ok") {
                return Err(format!("node {i} reports cluster_state:{state:?}"));
            }
            let slots_ok = parse_info_field(&view.info, "cluster_slots_ok");
            if slots_ok != Some(&SLOT_COUNT.to_string()) {
                return Err(format!("node {i} reports cluster_slots_ok:{slots_ok:?}"));
            }
            if view.slots != first_view.slots {
                return Err(format!(
                    "node {i} sees the slot map {:?} but node {first} sees {:?}",
                    view.slots, first_view.slots
                ));
            }
        }
        let role_of = |node: usize| {
            views
                .iter()
                .find(|(i, _)| *i == node)
                .map(|(_, view)| view.role)
        };
        let mut map = Vec::with_capacity(first_view.slots.len());
        for &(first, last, owner) in &first_view.slots {
            let owner = owner.map_err(|port| {
                format!("slots {first}..={last} are owned by port {port}, not a cluster node")
            })?;
            let role = role_of(owner);
            if role != Some(NodeRole::Master) {
                return Err(format!(
                    "slots {first}..={last} are owned by node {owner}, whose role is {role:?}"
                ));
            }
            map.push((first, last, owner));
        }
        for (i, view) in &views {
            if let NodeRole::Replica { master, link_up } = view.role {
                let master_role = master.and_then(role_of);
                if master_role != Some(NodeRole::Master) {
                    return Err(format!(
                        "node {i} replicates node {master:?}, which is not a reachable master"
                    ));
                }
                if !link_up {
                    return Err(format!(
                        "node {i}'s replication link to node {master:?} is down"
                    ));
                }
            }
        }
        Ok(map)
    }

    /// Whether every node knows every other node, with no handshake or
    /// failure flag and a connected link.
    fn all_nodes_known(&self) -> Result<(), String> {
        for i in 0..self.nodes.len() {
            let reply = self
                .query_connection(i)
                .and_then(|mut con| redis::cmd("CLUSTER").arg("NODES").query::<String>(&mut con))
                .map_err(|e| format!("CLUSTER NODES failed on node {i}: {e}"))?;
            let mut known = 0;
            for line in reply.lines().filter(|line| !line.trim().is_empty()) {
                let fields: Vec<&str> = line.split_whitespace().collect();
                let (Some(id), Some(flags), Some(link)) =
                    (fields.first(), fields.get(2), fields.get(7))
                else {
                    return Err(format!("node {i}: unexpected CLUSTER NODES line {line:?}"));
                };
                if !self.ids.iter().any(|known| known == id) {
                    return Err(format!("node {i} knows an unexpected node: {line:?}"));
                }
                if flags
                    .split(',')
                    .any(|flag| matches!(flag, "handshake" | "noaddr" | "fail" | "fail?"))
                    || *link != "connected"
                {
                    return Err(format!("node {i} does not fully know a node yet: {line:?}"));
                }
                known += 1;
            }
            if known != self.nodes.len() {
                return Err(format!(
                    "node {i} knows {known} of {} nodes",
                    self.nodes.len()
                ));
            }
        }
        Ok(())
    }

    /// Node `i`'s view, or `None` if it is stopped or does not answer.
    fn view(&self, i: usize) -> Option<NodeView> {
        let mut con = self.query_connection(i).ok()?;
        let role = self.role_on(&mut con).ok()?;
        let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut con).ok()?;
        let slots: Value = redis::cmd("CLUSTER").arg("SLOTS").query(&mut con).ok()?;
        let slots = self.parse_slots(&slots).ok()?;
        Some(NodeView { role, info, slots })
    }

    /// Runs `ROLE` on `con`.
    fn role_on(&self, con: &mut redis::Connection) -> Result<NodeRole, String> {
        let reply: Value = redis::cmd("ROLE").query(con).map_err(|e| e.to_string())?;
        let items = match &reply {
            Value::Array(items) => items,
            _ => return Err(format!("unexpected ROLE reply {reply:?}")),
        };
        match items.first().and_then(text).as_deref() {
            Some("master") => Ok(NodeRole::Master),
            Some("slave") => {
                let port = items
                    .get(2)
                    .and_then(int)
                    .and_then(|port| u16::try_from(port).ok())
                    .ok_or_else(|| format!("unexpected ROLE reply {reply:?}"))?;
                let state = items.get(3).and_then(text);
                Ok(NodeRole::Replica {
                    master: self.index_of_port(port),
                    link_up: state.as_deref() == Some("connected"),
                })
            }
            _ => Err(format!("unexpected ROLE reply {reply:?}")),
        }
    }

    /// Parses a `CLUSTER SLOTS` reply into `(first, last, owner)` sorted by
    /// `first`.
    #[allow(clippy::type_complexity)]
    fn parse_slots(&self, reply: &Value) -> Result<Vec<(u16, u16, Result<usize, u16>)>, String> {
        let Value::Array(ranges) = reply else {
            return Err(format!("{reply:?}"));
        };
        let mut map = Vec::with_capacity(ranges.len());
        for range in ranges {
            let parsed = match range {
                Value::Array(items) if items.len() >= 3 => {
                    let slot = |v: &Value| int(v).and_then(|n| u16::try_from(n).ok());
                    let port = match &items[2] {
                        Value::Array(node) => node.get(1).and_then(int),
                        _ => None,
                    };
                    match (
                        slot(&items[0]),
                        slot(&items[1]),
                        port.and_then(|p| u16::try_from(p).ok()),
                    ) {
                        (Some(first), Some(last), Some(port)) => {
                            Some((first, last, self.index_of_port(port).ok_or(port)))
                        }
                        _ => None,
                    }
                }
                _ => None,
            };
            map.push(parsed.ok_or_else(|| format!("{range:?} in {reply:?}"))?);
        }
        map.sort_unstable_by_key(|&(first, _, _)| first);
        Ok(map)
    }

    /// Runs a command on the first node that answers.
    fn ask_any(&self, args: &[&str]) -> Value {
        let mut errors = Vec::new();
        for i in 0..self.nodes.len() {
            let result = self.query_connection(i).and_then(|mut con| {
                let mut cmd = redis::cmd(args[0]);
                for arg in &args[1..] {
                    cmd.arg(*arg);
                }
                cmd.query::<Value>(&mut con)
            });
            match result {
                Ok(reply) => return reply,
                Err(e) => errors.push(format!("node {i}: {e}")),
            }
        }
        panic!("no cluster node answered {args:?}:\n{}", errors.join("\n"));
    }

    /// A short-timeout connection to node `i` for polling, or an error if it
    /// is stopped or does not accept connections.
    fn query_connection(&self, i: usize) -> redis::RedisResult<redis::Connection> {
        self.connect(i, QUERY_IO_TIMEOUT)
    }

    /// A connection to node `i` with the given read/write timeout, or an
    /// error if it is stopped or does not accept connections.
    fn connect(&self, i: usize, io_timeout: Duration) -> redis::RedisResult<redis::Connection> {
        let node = &self.nodes[i];
        if !node.is_running() {
            return Err(redis::RedisError::from((
                ErrorKind::Io,
                "node is not running",
            )));
        }
        let con = redis::Client::open(connection_info(node.port(), node.password()))?
            .get_connection_with_timeout(QUERY_CONNECT_TIMEOUT)?;
        con.set_read_timeout(Some(io_timeout))?;
        con.set_write_timeout(Some(io_timeout))?;
        Ok(con)
    }

    /// Polls `check` until it succeeds; panics after [`CONVERGENCE_TIMEOUT`]
    /// with its last error and every node's view.
    fn poll<T>(&self, what: &str, mut check: impl FnMut() -> Result<T, String>) -> T {
        let deadline = Instant::now() + CONVERGENCE_TIMEOUT;
        loop {
            let error = match check() {
                Ok(value) => return value,
                Err(error) => error,
            };
            if Instant::now() >= deadline {
                panic!(
                    "timed out after {CONVERGENCE_TIMEOUT:?} waiting for {what}: {error}\n{}",
                    self.describe()
                );
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    /// Every node's port, state and `CLUSTER NODES`, for panic messages.
    fn describe(&self) -> String {
        let mut out = String::new();
        for (i, node) in self.nodes.iter().enumerate() {
            let state = if !node.is_running() {
                "stopped".to_owned()
            } else {
                match self.query_connection(i).and_then(|mut con| {
                    redis::cmd("CLUSTER").arg("NODES").query::<String>(&mut con)
                }) {
                    Ok(nodes) => format!("CLUSTER NODES:\n{}", nodes.trim_end()),
                    Err(e) => format!("unreachable: {e}"),
                }
            };
            out.push_str(&format!(
                "--- node {i} (port {}, id {}, dir {}) {state}\n",
                node.port(),
                self.ids[i],
                node.dir().display()
            ));
        }
        out
    }
}

impl Drop for RedisCluster {
    /// Kills every node before any directory is removed.
    fn drop(&mut self) {
        for node in &mut self.nodes {
            node.stop();
        }
    }
}

/// The `redis-server` arguments of a cluster node.
fn node_args(extra_args: &[&str]) -> Vec<String> {
    let node_timeout = NODE_TIMEOUT_MS.to_string();
    let mut args: Vec<String> = [
        "--cluster-enabled",
        "yes",
        // Relative to `--dir`, the node's own temporary directory.
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-node-timeout",
        &node_timeout,
        "--cluster-replica-validity-factor",
        "0",
        "--cluster-allow-replica-migration",
        "no",
        "--cluster-require-full-coverage",
        "yes",
        "--repl-diskless-sync",
        "yes",
        "--repl-diskless-sync-delay",
        "0",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let extra: Vec<String> = extra_args.iter().map(|s| s.to_string()).collect();
    if let Some(password) = password_from_args(&extra) {
        args.push("--masterauth".to_owned());
        args.push(password);
    }
    args.extend(extra);
    args
}

/// Starts one cluster node on a port whose bus port is free too.
fn start_node(args: &[String]) -> RedisServer {
    let bin = resolve_binary(
        std::env::var_os(REDIS_SERVER_BIN_ENV),
        std::env::var_os("PATH"),
    )
    .unwrap_or_else(|message| panic!("{message}"));
    let dir = tempfile::Builder::new()
        .prefix("redisync-test-cluster-")
        .tempdir()
        .unwrap_or_else(|e| panic!("failed to create a temporary directory for redis-server: {e}"));
    let password = password_from_args(args);
    let mut last_error = String::new();
    for _ in 0..START_ATTEMPTS {
        let port = port_with_free_bus_port();
        match launch(&bin, port, dir.path(), args, password.as_deref(), None) {
            Ok(child) => {
                let pid = child.id();
                return RedisServer {
                    bin,
                    port,
                    extra_args: args.to_vec(),
                    password,
                    child: std::sync::Mutex::new(Some(child)),
                    pid: std::sync::atomic::AtomicU32::new(pid),
                    paused: std::sync::atomic::AtomicBool::new(false),
                    fake_clock: None,
                    dir,
                };
            }
            // Either port may have been taken since it was checked.
            Err(LaunchError::PortInUse(message)) => last_error = message,
            Err(LaunchError::Fatal(message)) => panic!("{message}"),
        }
    }
    panic!(
        "a cluster node could not find a free port pair after {START_ATTEMPTS} attempts; \
         last failure:\n{last_error}"
    );
}

/// A free port of 127.0.0.1 whose cluster bus port (`port + 10000`) is free
/// too. Both are released before returning; callers retry if one is taken.
fn port_with_free_bus_port() -> u16 {
    for _ in 0..PORT_PAIR_ATTEMPTS {
        let port = free_port();
        let Some(bus_port) = port.checked_add(BUS_PORT_OFFSET) else {
            continue;
        };
        if TcpListener::bind(("127.0.0.1", bus_port)).is_ok() {
            return port;
        }
    }
    panic!("found no free port pair (port, port + {BUS_PORT_OFFSET}) on 127.0.0.1");
}

/// The slots of master `k` out of `masters`: an even split of `0..=16383`.
fn slot_range(k: usize, masters: usize) -> RangeInclusive<u16> {
    let count = usize::from(SLOT_COUNT);
    let first = k * count / masters;
    let last = (k + 1) * count / masters - 1;
    // Both are below 16384.
    (first as u16)..=(last as u16)
}

/// A textual reply as a `String`.
fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        Value::Okay => Some("OK".to_owned()),
        _ => None,
    }
}

/// An integer reply, or a textual one holding an integer.
fn int(value: &Value) -> Option<i64> {
    match value {
        Value::Int(n) => Some(*n),
        other => text(other)?.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_ranges_cover_every_slot_once() {
        for masters in 1..=7 {
            let ranges: Vec<_> = (0..masters).map(|k| slot_range(k, masters)).collect();
            assert_eq!(*ranges[0].start(), 0);
            assert_eq!(*ranges[masters - 1].end(), SLOT_COUNT - 1);
            for pair in ranges.windows(2) {
                assert_eq!(*pair[0].end() + 1, *pair[1].start());
            }
        }
    }

    #[test]
    fn bus_port_is_free() {
        let port = port_with_free_bus_port();
        assert!(port <= u16::MAX - BUS_PORT_OFFSET);
    }

    #[test]
    fn node_args_add_masterauth() {
        let args = node_args(&["--requirepass", "pw"]);
        let masterauth = args.iter().position(|a| a == "--masterauth").unwrap();
        assert_eq!(args[masterauth + 1], "pw");
        assert!(!node_args(&[]).iter().any(|a| a == "--masterauth"));
    }
}
