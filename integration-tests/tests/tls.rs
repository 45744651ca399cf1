//! `rediss://` URLs against a redis-server serving TLS with throw-away certificates.
#![cfg(feature = "tls")]

use redisync::core::DEFAULT_KEY_PREFIX;
use redisync::layout::{KeySpace, LockLayout};
use redisync::prelude::*;
use redisync_test_harness::tls::{ClientAuth, TlsServer};

#[tokio::test]
async fn rediss_urls_connect_and_lock() {
    // Some server builds (the Valkey and Redis 8 ones CI also runs) have no TLS at all.
    let tls = match TlsServer::start(ClientAuth::None) {
        Ok(tls) => tls,
        Err(why) => {
            eprintln!("SKIPPED rediss_urls_connect_and_lock: {why}");
            return;
        }
    };
    let url = tls.url();
    let pem = std::fs::read(&tls.ca).unwrap();

    // Trusting the private CA verifies the server.
    let trusted = Client::builder(url.as_str())
        .tls_root_certificate(pem)
        .build()
        .await
        .unwrap();
    // `#insecure` skips verification altogether.
    let insecure = Client::connect(format!("{url}#insecure")).await.unwrap();
    for client in [trusted, insecure] {
        let lock = client.lock("tls");
        let guard = lock.lock().await.unwrap();
        assert!(lock.is_held().await.unwrap());
        guard.unlock().await.unwrap();
    }
    let space = KeySpace::of(DEFAULT_KEY_PREFIX, "tls").unwrap();
    assert_eq!(
        tls.server.cmd(&["GET", &LockLayout::new(&space).fence]),
        redis::Value::BulkString(b"2".to_vec())
    );
    // Without the CA, the self-signed certificate is refused.
    let untrusted = Client::builder(url.as_str())
        .command_timeout(std::time::Duration::from_secs(2))
        .build()
        .await;
    assert!(matches!(
        untrusted,
        Err(Error::Redis(_)) | Err(Error::Timeout)
    ));
}

/// A server that asks clients for a certificate accepts the one given to the builder, and
/// refuses a client without one.
#[tokio::test]
async fn a_client_certificate_is_presented_when_the_server_asks() {
    let tls = match TlsServer::start(ClientAuth::Required) {
        Ok(tls) => tls,
        Err(why) => {
            eprintln!("SKIPPED a_client_certificate_is_presented_when_the_server_asks: {why}");
            return;
        }
    };
    let ca = std::fs::read(&tls.ca).unwrap();
    let client = Client::builder(tls.url())
        .tls_root_certificate(ca.clone())
        .tls_client_certificate(
            std::fs::read(&tls.client_cert).unwrap(),
            std::fs::read(&tls.client_key).unwrap(),
        )
        .build()
        .await
        .expect("the client certificate is accepted");
    let guard = client.lock("mtls").lock().await.unwrap();
    guard.unlock().await.unwrap();

    let without = Client::builder(tls.url())
        .tls_root_certificate(ca)
        .command_timeout(std::time::Duration::from_secs(2))
        .build()
        .await;
    assert!(
        matches!(without, Err(Error::Redis(_)) | Err(Error::Timeout)),
        "{without:?}"
    );
}
