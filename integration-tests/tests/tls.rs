//! `rediss://` URLs against a redis-server serving TLS with a throw-away certificate.
#![cfg(feature = "tls")]

use std::process::Command;

use redisync::prelude::*;
use redisync_test_harness::RedisServer;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn openssl(args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .output()
        .expect("openssl is installed (scripts/setup.sh installs it)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn rediss_urls_connect_and_lock() {
    // Some server builds (the Valkey and Redis 8 ones CI also runs) have no TLS at all.
    if let Err(why) = redisync_test_harness::server_binary::tls_support() {
        eprintln!("SKIPPED rediss_urls_connect_and_lock: {why}");
        return;
    }
    let certs = tempfile::tempdir().unwrap();
    let path = |name: &str| certs.path().join(name).to_str().unwrap().to_owned();
    let (ca, ca_key, cert, key, csr, ext) = (
        path("ca.pem"),
        path("ca.key"),
        path("cert.pem"),
        path("key.pem"),
        path("server.csr"),
        path("ext.cnf"),
    );
    std::fs::write(&ext, "subjectAltName=IP:127.0.0.1,DNS:localhost\n").unwrap();
    #[rustfmt::skip]
    let steps: [&[&str]; 3] = [
        &["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
          "-subj", "/CN=redisync test CA", "-keyout", &ca_key, "-out", &ca],
        &["req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
          "-keyout", &key, "-out", &csr],
        &["x509", "-req", "-days", "1", "-CAcreateserial", "-in", &csr,
          "-CA", &ca, "-CAkey", &ca_key, "-extfile", &ext, "-out", &cert],
    ];
    for step in steps {
        openssl(step);
    }
    let tls_port = free_port().to_string();
    let server = RedisServer::start_with(&[
        "--tls-port",
        &tls_port,
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
        "--tls-ca-cert-file",
        &ca,
        "--tls-auth-clients",
        "no",
    ]);
    let url = format!("rediss://127.0.0.1:{tls_port}/");
    let pem = std::fs::read(&ca).unwrap();

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
    assert_eq!(
        server.cmd(&["GET", "redisync:{tls}:fence"]),
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
