//! Key naming: every key and channel of a primitive lives under the client's prefix and carries
//! the user's name as a Redis Cluster hash tag, so one primitive always lives in one slot.
//!
//! A key is `<prefix>:{<name>}:<suffix>`. Redis hashes the text between the first `{` and the
//! first `}` after it. The prefix may not contain braces, so the first `{` is always ours; the
//! first `}` after it lies inside `{<name>}` (it is either a brace of the name or our closing
//! brace). Every key of one primitive shares that text, so they share a slot even when the name
//! itself contains braces. The one name that would defeat this is one starting with `}`: the tag
//! would be empty and Redis would hash whole keys. Such names are rejected.

use crate::error::{Error, Result};

/// The longest name, in bytes, a primitive accepts.
pub const MAX_NAME_LEN: usize = 1024;

/// The longest key prefix, in bytes, a client accepts.
pub const MAX_PREFIX_LEN: usize = 128;

/// Checks a user-supplied primitive name.
pub fn validate_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::invalid("name must not be empty"));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(Error::invalid(format!(
            "name must be at most {MAX_NAME_LEN} bytes, found {} bytes",
            name.len()
        )));
    }
    if name.starts_with('}') {
        return Err(Error::invalid(
            "name must not start with '}': redis cluster would ignore its hash tag",
        ));
    }
    Ok(())
}

/// Checks the client's key prefix.
pub(crate) fn validate_prefix(prefix: &str) -> Result<()> {
    if prefix.is_empty() {
        return Err(Error::invalid("key prefix must not be empty"));
    }
    if prefix.len() > MAX_PREFIX_LEN {
        return Err(Error::invalid(format!(
            "key prefix must be at most {MAX_PREFIX_LEN} bytes, found {} bytes",
            prefix.len()
        )));
    }
    if prefix.contains(['{', '}']) {
        return Err(Error::invalid(
            "key prefix must not contain '{' or '}': the hash tag belongs to the name",
        ));
    }
    Ok(())
}

/// The key space of one named primitive: `<prefix>:{<name>}:...`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct KeySpace {
    base: String,
}

impl KeySpace {
    pub(crate) fn new(prefix: &str, name: &str) -> Self {
        KeySpace {
            base: format!("{prefix}:{{{name}}}"),
        }
    }

    /// The key space of the primitive called `name` under the key prefix `prefix`, checked as
    /// a client checks them ([`Error::InvalidArgument`] for a name or prefix it would refuse).
    /// A client's own primitives get theirs from its `key_space`; this is for reading a
    /// primitive's keys without a client (tools, tests).
    pub fn of(prefix: &str, name: &str) -> Result<Self> {
        validate_prefix(prefix)?;
        validate_name(name)?;
        Ok(KeySpace::new(prefix, name))
    }

    /// The key or channel `<prefix>:{<name>}:<suffix>`.
    pub fn key(&self, suffix: &str) -> String {
        let mut key = String::with_capacity(self.base.len() + 1 + suffix.len());
        key.push_str(&self.base);
        key.push(':');
        key.push_str(suffix);
        key
    }

    /// The keys or channels `<prefix>:{<name>}:<suffix><id>`, one per id.
    pub fn family(&self, suffix: &str) -> KeyFamily {
        KeyFamily {
            prefix: self.key(suffix),
        }
    }

    /// `<prefix>:{<name>}`, the part every key of the primitive starts with.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The Redis Cluster slot every key and channel of the primitive hashes to.
    pub fn slot(&self) -> u16 {
        slot(&self.base)
    }
}

/// Keys or channels of one primitive that differ only by a trailing id (one record per
/// attempt, one wake-up channel per client...): `<prefix>:{<name>}:<suffix><id>`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct KeyFamily {
    prefix: String,
}

impl KeyFamily {
    /// The member for `id`.
    pub fn of(&self, id: &str) -> String {
        // Not `format!`: some of these are named on every acquire, and a concatenation costs
        // a tenth.
        [self.prefix.as_str(), id].concat()
    }

    /// What every member starts with, for a script that names members itself.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }
}

/// Number of Redis Cluster hash slots.
pub const SLOTS: u16 = 16384;

/// The Redis Cluster slot of `key`: CRC16 (XMODEM) of its hash tag, modulo [`SLOTS`].
pub fn slot(key: &str) -> u16 {
    crc16_xmodem(hash_tag(key).as_bytes()) % SLOTS
}

/// The part of `key` Redis Cluster hashes: the text between the first `{` and the first `}`
/// after it, if not empty; otherwise the whole key.
fn hash_tag(key: &str) -> &str {
    if let Some(open) = key.find('{') {
        if let Some(len) = key[open + 1..].find('}') {
            if len > 0 {
                return &key[open + 1..open + 1 + len];
            }
        }
    }
    key
}

fn crc16_xmodem(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_the_cluster_specification() {
        // The specification's check value for CRC16/XMODEM, and keys whose slots Redis reports.
        assert_eq!(crc16_xmodem(b"123456789"), 0x31C3);
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("{user1000}.following"), slot("{user1000}.followers"));
        assert_eq!(slot("foo{}{bar}"), crc16_xmodem(b"foo{}{bar}") % SLOTS);
        assert_eq!(slot("foo{{bar}}zap"), slot("{bar"));
        let ks = KeySpace::new("redisync", "orders");
        assert_eq!(ks.slot(), slot("orders"));
        assert_eq!(slot(&ks.key("lock")), ks.slot());
    }

    #[test]
    fn keys_of_one_name_share_a_hash_tag_even_with_braces_in_the_name() {
        for name in [
            "orders:42",
            "a{b}c",
            "{x}",
            "a}b",
            "{",
            "x{",
            "{{}}",
            "a{}b",
        ] {
            let ks = KeySpace::new("redisync", name);
            let tags: Vec<String> = ["lock", "fence", "unlock:abc"]
                .iter()
                .map(|s| hash_tag(&ks.key(s)).to_owned())
                .collect();
            assert!(tags.windows(2).all(|w| w[0] == w[1]), "{name}: {tags:?}");
            assert!(ks.key("lock").contains(&format!("{{{name}}}")));
            assert!(
                ks.base().contains(&format!("{{{}", tags[0])),
                "{name}: tag {} is not inside the shared base",
                tags[0]
            );
        }
    }

    #[test]
    fn bad_names_are_rejected() {
        assert!(validate_name("").is_err());
        assert!(validate_name("}x").is_err());
        assert!(validate_name(&"x".repeat(MAX_NAME_LEN + 1)).is_err());
        assert!(validate_name(&"x".repeat(MAX_NAME_LEN)).is_ok());
        assert!(validate_prefix("a{b").is_err());
        assert!(validate_prefix("").is_err());
        assert!(validate_prefix("myapp").is_ok());
        assert!(KeySpace::of("a{b", "x").is_err());
        assert!(KeySpace::of("myapp", "").is_err());
        assert_eq!(
            KeySpace::of("myapp", "x").ok(),
            Some(KeySpace::new("myapp", "x"))
        );
    }

    #[test]
    fn a_family_names_its_members_after_its_prefix() {
        let family = KeySpace::new("redisync", "orders").family("attempt:");
        assert_eq!(family.prefix(), "redisync:{orders}:attempt:");
        assert_eq!(family.of("c:1"), "redisync:{orders}:attempt:c:1");
    }
}
