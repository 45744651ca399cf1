//! What the `redis-server` binary the tests run can do: its name and version, and whether it
//! was built with TLS. Tests that need something a binary lacks say so and return early,
//! naming the binary, rather than fail (or pass without having run).
//!
//! ```no_run
//! use redisync_test_harness::server_binary;
//!
//! if let Err(why) = server_binary::tls_support() {
//!     eprintln!("skipped: {why}");
//!     return;
//! }
//! ```

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::{free_port, resolve_binary, REDIS_SERVER_BIN_ENV};

/// The binary the harness starts: `REDIS_SERVER_BIN`, or `redis-server` on `PATH`.
///
/// # Panics
///
/// Panics with the harness' explanation if there is none.
pub fn path() -> PathBuf {
    resolve_binary(
        std::env::var_os(REDIS_SERVER_BIN_ENV),
        std::env::var_os("PATH"),
    )
    .unwrap_or_else(|message| panic!("{message}"))
}

/// What the binary prints for `--version`, as in `Redis server v=8.2.3 sha=...`.
///
/// # Panics
///
/// Panics if the binary cannot be run.
pub fn version_line() -> String {
    let bin = path();
    let out = Command::new(&bin)
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("could not run {} --version: {e}", bin.display()));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// `Ok` if the binary serves TLS; otherwise why not, naming the binary.
///
/// A build without TLS starts a TLS port only to stop with "Failed finding TLS support"; a
/// build with it stops because the certificate given here does not exist.
///
/// # Panics
///
/// Panics if the binary cannot be run or does not stop within 10 s.
pub fn tls_support() -> Result<(), String> {
    let bin = path();
    let missing = std::env::temp_dir().join("redisync-no-such-certificate.pem");
    let missing = missing.to_string_lossy();
    let mut child = Command::new(&bin)
        .args(["--port", "0", "--save", "", "--appendonly", "no"])
        .args(["--tls-port", &free_port().to_string()])
        .args(["--tls-cert-file", &missing, "--tls-key-file", &missing])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("could not run {}: {e}", bin.display()));
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().ok().flatten().is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            panic!("{} --tls-port did not stop within 10 s", bin.display());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut log = String::new();
    if let Some(mut stdout) = child.stdout.take() {
        let _ = stdout.read_to_string(&mut log);
    }
    if log.contains("Failed finding TLS support") {
        Err(format!(
            "{} ({}) was built without TLS",
            bin.display(),
            version_line()
        ))
    } else {
        Ok(())
    }
}
