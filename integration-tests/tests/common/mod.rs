//! Helpers shared by the lock tests: the lock's Redis names under the default prefix.
#![allow(dead_code)] // each test file uses its own subset

use redisync_test_harness::RedisServer;

/// The lock's hash key for the default prefix.
pub fn lock_key(name: &str) -> String {
    format!("redisync:{{{name}}}:lock")
}

/// The lock's wake-up channel for the default prefix.
pub fn wake_channel(name: &str) -> String {
    format!("redisync:{{{name}}}:wake")
}

/// Whether `key` exists on `server`.
pub fn exists(server: &RedisServer, key: &str) -> bool {
    server.cmd(&["EXISTS", key]) == redis::Value::Int(1)
}
