//! Which server a client talks to, and the oldest one redisync runs on.
//!
//! A client reads the server's name and version when it is built (`HELLO`, or `INFO server`
//! where `HELLO` is refused) and refuses a server older than the floor with
//! [`Error::UnsupportedServer`](crate::Error::UnsupportedServer), before any script could
//! meet a command that server lacks. Redis 7.0 is the floor: the scripts extend leases with
//! `PEXPIRE ... GT`, and a cluster client wakes waiters with sharded pub/sub, both new in 7.0.
//! Every Valkey release (7.2 onwards) is a Redis 7.2 as far as redisync is concerned.

use std::collections::HashMap;
use std::fmt;

/// The oldest Redis version redisync runs on (`major`, `minor`).
pub const MIN_REDIS_VERSION: (u32, u32) = (7, 0);

/// A server's name and version, as it announced them to the client.
///
/// ```
/// use redisync::prelude::*;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redisync::Result<()> {
/// # let server = redisync_test_harness::RedisServer::start();
/// let client = Client::connect(server.url()).await?;
/// if let Some(found) = client.server_version() {
///     println!("connected to {found}"); // e.g. "Redis 7.0.15" or "Valkey 8.1.8"
///     assert!(found.is_supported());
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerVersion {
    name: String,
    version: (u32, u32, u32),
}

impl ServerVersion {
    /// A server named `name` (`"redis"`, `"valkey"`, ...) at `version`.
    pub fn new(name: impl Into<String>, version: (u32, u32, u32)) -> Self {
        ServerVersion {
            name: name.into().to_ascii_lowercase(),
            version,
        }
    }

    /// The server's name in lower case: `"redis"`, `"valkey"`, or what another
    /// Redis-compatible server calls itself.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The server's own version (`major`, `minor`, `patch`): Valkey's numbering for Valkey.
    pub fn version(&self) -> (u32, u32, u32) {
        self.version
    }

    /// Whether redisync runs on this server: Redis 7.0 or later, any Valkey, or another server
    /// that announces a Redis version of 7.0 or later.
    pub fn is_supported(&self) -> bool {
        // Valkey started at 7.2, forked from Redis 7.2.4.
        self.name == "valkey" || (self.version.0, self.version.1) >= MIN_REDIS_VERSION
    }

    /// Reads the reply of `HELLO` (a map in RESP3, a flat list of pairs in RESP2), whose
    /// `server` and `version` fields name the server.
    pub(crate) fn from_hello(reply: &redis::Value) -> Option<Self> {
        let fields: HashMap<String, redis::Value> = redis::from_redis_value_ref(reply).ok()?;
        let field =
            |name: &str| -> Option<String> { redis::from_redis_value_ref(fields.get(name)?).ok() };
        let version = parse_version(&field("version")?)?;
        Some(ServerVersion::new(field("server")?, version))
    }

    /// Reads the text of `INFO server`: Valkey names itself in `server_name` and gives its own
    /// version in `valkey_version` (its `redis_version` is the Redis it is compatible with).
    pub(crate) fn from_info(info: &str) -> Option<Self> {
        let field = |wanted: &str| {
            info.lines().find_map(|line| {
                let (key, value) = line.trim_end().split_once(':')?;
                (key == wanted).then_some(value)
            })
        };
        match field("server_name") {
            Some(name) if !name.eq_ignore_ascii_case("redis") => {
                let version = field(&format!("{}_version", name.to_ascii_lowercase()))
                    .or_else(|| field("redis_version"))?;
                Some(ServerVersion::new(name, parse_version(version)?))
            }
            _ => Some(ServerVersion::new(
                "redis",
                parse_version(field("redis_version")?)?,
            )),
        }
    }
}

impl fmt::Display for ServerVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (major, minor, patch) = self.version;
        let name = match self.name.as_str() {
            "redis" => "Redis",
            "valkey" => "Valkey",
            other => other,
        };
        write!(f, "{name} {major}.{minor}.{patch}")
    }
}

/// What a refused server would need to be, for [`Error::UnsupportedServer`](crate::Error).
pub(crate) fn floor_description() -> String {
    let (major, minor) = MIN_REDIS_VERSION;
    format!("Redis {major}.{minor} or later, or Valkey")
}

/// `"7.0.15"` (or `"7.2"`, or `"8.1.8-rc1"`) as numbers; missing parts count as 0.
fn parse_version(text: &str) -> Option<(u32, u32, u32)> {
    let mut parts = text.trim().split('.').map(|part| {
        let digits: String = part.chars().take_while(char::is_ascii_digit).collect();
        digits.parse::<u32>().ok()
    });
    let major = parts.next()??;
    let minor = parts.next().flatten().unwrap_or(0);
    let patch = parts.next().flatten().unwrap_or(0);
    Some((major, minor, patch))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> redis::Value {
        redis::Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn hello_in_either_protocol() {
        let resp2 = redis::Value::Array(vec![
            bulk("server"),
            bulk("redis"),
            bulk("version"),
            bulk("6.2.14"),
            bulk("proto"),
            redis::Value::Int(2),
        ]);
        let found = ServerVersion::from_hello(&resp2).unwrap();
        assert_eq!(found, ServerVersion::new("redis", (6, 2, 14)));
        assert!(!found.is_supported());
        assert_eq!(found.to_string(), "Redis 6.2.14");

        let resp3 = redis::Value::Map(vec![
            (bulk("server"), bulk("valkey")),
            (bulk("version"), bulk("8.1.8")),
        ]);
        let found = ServerVersion::from_hello(&resp3).unwrap();
        assert_eq!(found.to_string(), "Valkey 8.1.8");
        assert!(found.is_supported());
    }

    #[test]
    fn info_names_valkey_by_its_own_version() {
        let valkey = "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\n\
                      valkey_version:8.1.8\r\nredis_mode:standalone\r\n";
        assert_eq!(
            ServerVersion::from_info(valkey),
            Some(ServerVersion::new("valkey", (8, 1, 8)))
        );
        let redis = "# Server\r\nredis_version:7.0.15\r\nredis_git_sha1:00000000\r\n";
        let found = ServerVersion::from_info(redis).unwrap();
        assert_eq!(found.version(), (7, 0, 15));
        assert!(found.is_supported());
        assert_eq!(ServerVersion::from_info("# Server\r\n"), None);
    }

    #[test]
    fn odd_versions_parse_or_are_refused_without_panicking() {
        assert_eq!(parse_version("8"), Some((8, 0, 0)));
        assert_eq!(parse_version("7.2.0-rc1"), Some((7, 2, 0)));
        assert_eq!(parse_version("255.255.255"), Some((255, 255, 255)));
        assert_eq!(parse_version(""), None);
        assert_eq!(parse_version("x.1"), None);
        assert_eq!(parse_version("99999999999"), None);
        assert!(!ServerVersion::new("keydb", (6, 3, 4)).is_supported());
        assert!(ServerVersion::new("Redis", (7, 0, 0)).is_supported());
        assert!(!ServerVersion::new("redis", (6, 2, 99)).is_supported());
    }
}
