//! A `redis-server` serving TLS with throw-away certificates: a private CA, a server
//! certificate for `127.0.0.1`/`localhost`, and a client certificate for servers that ask
//! clients for one. Made with the `openssl` command (which `scripts/setup.sh` installs).
//!
//! ```no_run
//! use redisync_test_harness::tls::{ClientAuth, TlsServer};
//!
//! let tls = TlsServer::start(ClientAuth::Required).expect("this redis-server has TLS");
//! println!("{} trusts {}", tls.url(), tls.ca.display());
//! ```

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::RedisServer;

/// Whether the server asks clients for a certificate (`tls-auth-clients`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// Clients need no certificate.
    None,
    /// Clients must present one signed by the CA.
    Required,
}

/// A server with a TLS port, and the certificates for it (PEM files in a temporary
/// directory, removed with it).
pub struct TlsServer {
    /// The server; its plain port still serves, for the test's own commands.
    pub server: RedisServer,
    /// The TLS port.
    pub tls_port: u16,
    /// The CA that signed the server's and the client's certificates.
    pub ca: PathBuf,
    /// A client certificate signed by the CA.
    pub client_cert: PathBuf,
    /// Its private key.
    pub client_key: PathBuf,
    /// Where the certificates are.
    _certs: tempfile::TempDir,
}

impl TlsServer {
    /// Makes the certificates and starts the server; `Err` with the reason if the server
    /// binary has no TLS ([`crate::server_binary::tls_support`]).
    ///
    /// # Panics
    ///
    /// Panics if `openssl` fails or the server does not start.
    pub fn start(auth: ClientAuth) -> Result<TlsServer, String> {
        crate::server_binary::tls_support()?;
        let certs = tempfile::Builder::new()
            .prefix("redisync-test-tls-")
            .tempdir()
            .unwrap_or_else(|e| panic!("a directory for certificates: {e}"));
        let dir = certs.path().to_path_buf();
        let path = |name: &str| dir.join(name);
        let text = |p: &Path| p.to_string_lossy().into_owned();
        let (ca, ca_key) = (path("ca.pem"), path("ca.key"));
        std::fs::write(
            path("server.cnf"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
        )
        .unwrap_or_else(|e| panic!("writing server.cnf: {e}"));
        std::fs::write(path("client.cnf"), "extendedKeyUsage=clientAuth\n")
            .unwrap_or_else(|e| panic!("writing client.cnf: {e}"));
        #[rustfmt::skip]
        openssl(&["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-subj", "/CN=redisync test CA", "-keyout", &text(&ca_key), "-out", &text(&ca)]);
        for (name, subject) in [
            ("server", "/CN=localhost"),
            ("client", "/CN=redisync test client"),
        ] {
            let (key, csr, cert, ext) = (
                path(&format!("{name}.key")),
                path(&format!("{name}.csr")),
                path(&format!("{name}.pem")),
                path(&format!("{name}.cnf")),
            );
            #[rustfmt::skip]
            openssl(&["req", "-newkey", "rsa:2048", "-nodes", "-subj", subject,
                "-keyout", &text(&key), "-out", &text(&csr)]);
            #[rustfmt::skip]
            openssl(&["x509", "-req", "-days", "1", "-CAcreateserial", "-in", &text(&csr),
                "-CA", &text(&ca), "-CAkey", &text(&ca_key), "-extfile", &text(&ext),
                "-out", &text(&cert)]);
        }
        let tls_port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or_else(|e| panic!("a free port: {e}"));
        let auth = match auth {
            ClientAuth::None => "no",
            ClientAuth::Required => "yes",
        };
        let server = RedisServer::start_with(&[
            "--tls-port",
            &tls_port.to_string(),
            "--tls-cert-file",
            &text(&path("server.pem")),
            "--tls-key-file",
            &text(&path("server.key")),
            "--tls-ca-cert-file",
            &text(&ca),
            "--tls-auth-clients",
            auth,
        ]);
        Ok(TlsServer {
            server,
            tls_port,
            ca,
            client_cert: path("client.pem"),
            client_key: path("client.key"),
            _certs: certs,
        })
    }

    /// The port that speaks TLS (the server's `port` is plain).
    pub fn tls_port(&self) -> u16 {
        self.tls_port
    }

    /// `rediss://127.0.0.1:<tls port>/`.
    pub fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}/", self.tls_port)
    }
}

fn openssl(args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("openssl is installed (scripts/setup.sh installs it): {e}"));
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
