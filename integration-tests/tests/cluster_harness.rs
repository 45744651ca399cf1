//! Tests of the Redis Cluster harness itself (`RedisCluster`).

use std::time::Instant;

use redis::Value;
use redisync_test_harness::cluster::{NodeRole, SLOT_COUNT};
use redisync_test_harness::RedisCluster;

/// Runs `args` on node `start` with a plain connection, following a `MOVED`
/// redirection by hand; returns the reply and the index of the node that gave it.
fn set_following_moved(cluster: &RedisCluster, start: usize, key: &str) -> usize {
    let mut node = start;
    for _ in 0..3 {
        let mut con = cluster.node(node).connection();
        match redis::cmd("SET").arg(key).arg("v").query::<Value>(&mut con) {
            Ok(_) => return node,
            Err(e) => {
                let (addr, slot) = e
                    .redirect_node()
                    .unwrap_or_else(|| panic!("SET {key} on node {node} failed: {e}"));
                assert_eq!(slot, cluster.slot_of(key), "MOVED names the key's slot");
                let port: u16 = addr.rsplit_once(':').unwrap().1.parse().unwrap();
                node = cluster
                    .index_of_port(port)
                    .expect("MOVED to a cluster node");
            }
        }
    }
    panic!("SET {key} was redirected too often");
}

#[test]
fn cluster_comes_up() {
    let started = Instant::now();
    let cluster = RedisCluster::start(3, 1);
    eprintln!("3 masters + 3 replicas up in {:?}", started.elapsed());

    assert_eq!(cluster.node_count(), 6);
    assert_eq!(cluster.masters(), vec![0, 1, 2]);
    assert_eq!(cluster.replicas(), vec![3, 4, 5]);
    for k in 0..3 {
        assert_eq!(cluster.replica_of(k), Some(3 + k));
        assert_eq!(
            cluster.role(3 + k),
            Some(NodeRole::Replica {
                master: Some(k),
                link_up: true
            })
        );
    }
    let map = cluster.slot_map();
    assert_eq!(
        map,
        vec![
            (0..=5460, 0),
            (5461..=10921, 1),
            (10922..=SLOT_COUNT - 1, 2)
        ]
    );
    assert_eq!(cluster.master_for_slot(0), 0);
    assert_eq!(cluster.master_for_slot(16383), 2);
    cluster.check_ok().unwrap();

    // Every node has its own nodes.conf in its own directory, and knows all six nodes.
    for (i, node) in cluster.nodes().iter().enumerate() {
        assert!(node.dir().join("nodes.conf").is_file(), "node {i}");
        assert_eq!(
            node.info_field("replication", "role").as_deref(),
            Some(if i < 3 { "master" } else { "slave" })
        );
        let Value::BulkString(info) = cluster.cmd_on(i, &["CLUSTER", "INFO"]) else {
            panic!("CLUSTER INFO");
        };
        let info = String::from_utf8(info).unwrap();
        assert!(info.contains("cluster_state:ok"), "{info}");
        assert!(info.contains("cluster_known_nodes:6"), "{info}");
    }
    assert_eq!(cluster.seed_urls().len(), 6);
    assert_eq!(
        cluster.seed_urls()[0],
        format!("redis://127.0.0.1:{}/", cluster.node(0).port())
    );
    // Known slots of Redis' own CRC16.
    assert_eq!(cluster.slot_of("foo"), 12182);
    assert_eq!(cluster.slot_of("{user1}.a"), cluster.slot_of("{user1}.b"));
}

#[test]
fn keys_land_on_the_master_for_their_slot() {
    let cluster = RedisCluster::start(3, 1);
    let keys = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"];
    for key in keys {
        let expected = cluster.master_for_key(key);
        // Sent to a node that does not own the slot, SET is redirected with MOVED.
        let wrong = (expected + 1) % 3;
        assert_eq!(set_following_moved(&cluster, wrong, key), expected, "{key}");
        assert!(cluster.keys_on_node(expected).contains(&key.to_owned()));
        assert!(cluster.keys_in_slot_count(cluster.slot_of(key)) >= 1);
    }
    // Hash tags put several keys in one slot, hence on one node.
    let tagged = ["redisync:{job}:lock", "redisync:{job}:wake", "{job}"];
    let slot = cluster.slot_of(tagged[0]);
    for key in tagged {
        assert_eq!(cluster.slot_of(key), slot);
        cluster.route_cmd(&["SET", key, "1"]).unwrap();
    }
    let owner = cluster.master_for_slot(slot);
    assert_eq!(cluster.keys_in_slot_count(slot), 3);
    for key in tagged {
        assert!(cluster.keys_on_node(owner).contains(&key.to_owned()));
    }
    let total: u64 = (0..3).map(|i| cluster.count_keys_on_node(i)).sum();
    assert_eq!(total, (keys.len() + tagged.len()) as u64);
    // A replica has its master's keys (once replicated) and refuses writes with MOVED.
    let replica = cluster.replica_of(owner).unwrap();
    cluster.cmd_on(owner, &["WAIT", "1", "5000"]);
    assert_eq!(cluster.keys_on_node(replica), cluster.keys_on_node(owner));
    let error = cluster
        .try_cmd_on(replica, &["SET", tagged[0], "2"])
        .unwrap_err();
    assert_eq!(
        error.redirect_node().map(|(_, slot)| slot),
        Some(slot),
        "{error}"
    );
}

#[test]
fn failovers_promote_the_replica() {
    let mut cluster = RedisCluster::start(3, 1);
    cluster.route_cmd(&["SET", "foo", "bar"]).unwrap();
    let master = cluster.master_for_key("foo");
    let replica = cluster.replica_of(master).unwrap();
    cluster.cmd_on(master, &["WAIT", "1", "5000"]);

    // Graceful failover: the roles swap and the key is still there.
    let started = Instant::now();
    cluster.failover(replica);
    eprintln!("graceful failover took {:?}", started.elapsed());
    assert_eq!(cluster.master_for_key("foo"), replica);
    assert_eq!(cluster.role(replica), Some(NodeRole::Master));
    assert_eq!(cluster.replica_of(replica), Some(master));
    assert!(cluster.masters().contains(&replica));
    assert!(!cluster.masters().contains(&master));
    assert_eq!(
        cluster.route_cmd(&["GET", "foo"]).unwrap(),
        Value::BulkString(b"bar".to_vec())
    );

    // Killing the new master hands the slots back to the old one.
    cluster.cmd_on(replica, &["WAIT", "1", "5000"]);
    let started = Instant::now();
    let promoted = cluster.kill_master_and_wait_for_failover(replica);
    eprintln!("failover after SIGKILL took {:?}", started.elapsed());
    assert_eq!(promoted, master);
    assert!(!cluster.node(replica).is_running());
    assert_eq!(cluster.master_for_key("foo"), master);
    assert_eq!(cluster.replica_of(master), None);
    assert_eq!(cluster.seed_urls().len(), 5);
    assert_eq!(
        cluster.route_cmd(&["GET", "foo"]).unwrap(),
        Value::BulkString(b"bar".to_vec())
    );
    cluster.check_ok().unwrap();

    // The killed node comes back as a replica of its successor.
    let started = Instant::now();
    cluster.restart_node(replica);
    eprintln!("rejoin after restart took {:?}", started.elapsed());
    assert_eq!(
        cluster.role(replica),
        Some(NodeRole::Replica {
            master: Some(master),
            link_up: true
        })
    );
    assert_eq!(cluster.master_for_key("foo"), master);
}
