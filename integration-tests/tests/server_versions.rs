//! A client names the server it was built against, and refuses one older than Redis 7.0 when
//! it is built, before any script could meet a command that server lacks.
//!
//! The tests run on whichever `redis-server` the harness starts (`REDIS_SERVER_BIN`):
//! `scripts/test.sh` runs them on Redis 7.0, `scripts/test-servers.sh` on Redis 8.2, Valkey 8.1
//! and Redis 6.2. What they expect follows from the server's own `INFO`, read here apart from
//! the client's code.

mod common;

use std::time::Duration;

use common::eventually;
use redisync::prelude::*;
use redisync::ServerVersion;
use redisync_test_harness::RedisServer;

/// The server's name and version, read from `INFO server` by the test itself.
fn announced(server: &RedisServer) -> (String, (u32, u32, u32)) {
    let name = server
        .info_field("server", "server_name")
        .unwrap_or_else(|| "redis".to_owned());
    let version = server
        .info_field("server", &format!("{name}_version"))
        .or_else(|| server.info_field("server", "redis_version"))
        .expect("INFO server has a version");
    let numbers: Vec<u32> = version
        .split('.')
        .map(|part| part.parse().expect("a numeric version"))
        .collect();
    (name, (numbers[0], numbers[1], numbers[2]))
}

fn below_the_floor(name: &str, version: (u32, u32, u32)) -> bool {
    name == "redis" && version < (7, 0, 0)
}

/// Connections of clients other than the harness's own `INFO`/`CLIENT LIST` connection.
fn other_connections(server: &RedisServer) -> usize {
    let list = server.cmd(&["CLIENT", "LIST"]);
    let text: String = redis::from_redis_value_ref(&list).expect("CLIENT LIST is text");
    text.lines().count().saturating_sub(1)
}

#[tokio::test]
async fn a_client_names_its_server_or_refuses_one_below_the_floor() {
    let server = RedisServer::start();
    let (name, version) = announced(&server);
    let built = Client::connect(server.url()).await;
    if below_the_floor(&name, version) {
        let (major, minor, patch) = version;
        match built {
            Err(Error::UnsupportedServer { found, needed }) => {
                assert_eq!(found, format!("Redis {major}.{minor}.{patch}"));
                assert_eq!(needed, "Redis 7.0 or later, or Valkey");
            }
            other => panic!("Redis {major}.{minor}.{patch} was not refused: {other:?}"),
        }
        // Nothing was written, and the refused client's connections are closed.
        assert_eq!(server.cmd(&["DBSIZE"]), redis::Value::Int(0));
        eventually(
            "the refused client's connections are closed",
            Duration::from_secs(5),
            || other_connections(&server) == 0,
        )
        .await;
        eprintln!("REPORT refused {name} {version:?}");
    } else {
        let client = built.expect("a supported server");
        let found = client.server_version().expect("the server named itself");
        assert_eq!(found, &ServerVersion::new(name.as_str(), version));
        assert!(found.is_supported());
        // And the client works: a lock, renewed with `PEXPIRE ... GT` on re-entry.
        let lock = client.lock("versions");
        let outer = lock.lock().await.expect("lock");
        let inner = lock.lock().await.expect("re-enter");
        inner.unlock().await.expect("unlock inner");
        outer.unlock().await.expect("unlock outer");
        eprintln!("REPORT accepted {found}");
    }
}

/// A server without `HELLO` (a proxy that lacks it; here it is renamed away, since no ACL can
/// refuse it) still gets the check, from `INFO server`; one that answers neither is let
/// through unchecked (with a warning).
#[tokio::test]
async fn without_hello_the_version_comes_from_info_and_without_both_it_is_unchecked() {
    let server = RedisServer::start_with(&["--rename-command", "HELLO", ""]);
    let (name, version) = announced(&server);
    server.cmd(&[
        "ACL", "SETUSER", "no-info", "on", ">s3cret", "~*", "&*", "+@all", "-info",
    ]);

    let from_info = Client::connect(server.url()).await;
    if below_the_floor(&name, version) {
        assert!(
            matches!(from_info, Err(Error::UnsupportedServer { .. })),
            "{from_info:?}"
        );
    } else {
        let client = from_info.expect("a supported server");
        assert_eq!(
            client.server_version(),
            Some(&ServerVersion::new(name.as_str(), version))
        );
    }

    let url = format!("redis://no-info:s3cret@127.0.0.1:{}/", server.port());
    let unchecked = Client::connect(url)
        .await
        .expect("a server that will not say its version is used as it is");
    assert_eq!(unchecked.server_version(), None);
}

/// The question is asked again on another connection when the connection breaks under it: a
/// connection reset right after it was made does not fail the client's build.
#[tokio::test]
async fn a_connection_broken_during_the_check_does_not_fail_the_build() {
    let server = RedisServer::start();
    let proxy = redisync_test_harness::ChaosProxy::start(&server);
    proxy.stall_on("HELLO");
    let url = proxy.url();
    let build = tokio::spawn(async move {
        Client::builder(url)
            .command_timeout(Duration::from_secs(5))
            .build()
            .await
    });
    eventually("the first HELLO is stalled", Duration::from_secs(5), || {
        proxy.stalled() == 1
    })
    .await;
    assert_eq!(proxy.unstall(), 1);
    let built = build.await.expect("the build task");
    let (name, version) = announced(&server);
    if below_the_floor(&name, version) {
        // The check was answered on another connection, and refused the server.
        assert!(
            matches!(built, Err(Error::UnsupportedServer { .. })),
            "{built:?}"
        );
        return;
    }
    let client = built.expect("built on another connection");
    assert!(client.server_version().is_some());
    let guard = client.lock("after-reset").lock().await.expect("lock");
    guard.unlock().await.expect("unlock");
}
