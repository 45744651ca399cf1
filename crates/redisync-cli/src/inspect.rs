//! `redisync inspect`: what Redis holds under a name, for every kind of primitive.
//!
//! It reads the keys each primitive documents in its "Redis keys" table (on the primitive's
//! type), read-only, and reports what it finds: a name can be used by several kinds at once.
//! A key that holds something else than its primitive keeps there is reported as foreign
//! data, with its name and type, instead of failing the whole report.
//!
//! `--json` prints one document (the schema is in the `json` function's docs).

use std::collections::BTreeMap;
use std::fmt::Write;

use redis::aio::ConnectionLike;
use redis::AsyncCommands;
use redisync::layout::{
    CountDownLatchLayout, ElectionLayout, ExpirableSemaphoreLayout, FairLockLayout, KeySpace,
    LockLayout, RateLimiterLayout, ReadWriteLockLayout, SemaphoreLayout,
};

/// A value of a finding.
pub enum Value {
    Text(String),
    Int(i64),
    /// Absent, for a field that can be (a key without expiry has no lease left).
    Null,
    /// Text items: each reader with its number of holds.
    List(Vec<String>),
    /// The permits of an expirable semaphore: id and lease left (ms).
    Permits(Vec<(String, i64)>),
}

/// One field of a finding: its key (snake_case; a key ending in `_ms` holds milliseconds) and
/// value.
type Fields = Vec<(&'static str, Value)>;

/// What one primitive holds under the name.
pub struct Finding {
    /// snake_case: `lock`, `fair_lock`, ... and `foreign_data`.
    pub kind: &'static str,
    /// The primitive's main key (for foreign data, the key in question).
    pub key: String,
    pub fields: Fields,
}

impl Finding {
    /// Whether this is foreign data rather than a primitive.
    pub fn is_foreign(&self) -> bool {
        self.kind == FOREIGN
    }
}

pub const FOREIGN: &str = "foreign_data";

/// One read of what Redis holds under a name, made on whichever connection the command has
/// (one server, a cluster, a primary found through Sentinel).
pub trait Reading {
    type Output;

    fn read<C: ConnectionLike + Send + Sync>(
        self,
        conn: &mut C,
        space: &KeySpace,
    ) -> impl std::future::Future<Output = redis::RedisResult<Self::Output>>;
}

/// Every primitive under the name: [`inspect`].
pub struct Everything;

impl Reading for Everything {
    type Output = Vec<Finding>;

    async fn read<C: ConnectionLike + Send + Sync>(
        self,
        conn: &mut C,
        space: &KeySpace,
    ) -> redis::RedisResult<Vec<Finding>> {
        inspect(conn, space).await
    }
}

/// Whether the latch of the name opened lately: Redis keeps the record of the arming that
/// opened last for a few minutes (`COUNT_DOWN_MEMORY` of the latch crate), so that a
/// count-down retried after the opening is not applied twice.
pub struct LatchOpenedLately;

impl Reading for LatchOpenedLately {
    type Output = bool;

    async fn read<C: ConnectionLike + Send + Sync>(
        self,
        conn: &mut C,
        space: &KeySpace,
    ) -> redis::RedisResult<bool> {
        conn.exists(CountDownLatchLayout::new(space).opened).await
    }
}

/// Reads every primitive's keys under `space`.
pub async fn inspect<C: ConnectionLike + Send + Sync>(
    conn: &mut C,
    space: &KeySpace,
) -> redis::RedisResult<Vec<Finding>> {
    let mut found = Vec::new();
    let (lock, fair) = (LockLayout::new(space), FairLockLayout::new(space));
    for (kind, hash, fence, waiting) in [
        ("lock", lock.hash, lock.fence, lock.waiters),
        ("fair_lock", fair.hash, fair.fence, fair.queue),
    ] {
        let expected = [(&hash, "hash"), (&fence, "string"), (&waiting, "zset")];
        if foreign(conn, kind, &expected, &mut found).await? {
            continue;
        }
        let held: BTreeMap<String, String> = conn.hgetall(&hash).await?;
        let waiting: i64 = conn.zcard(&waiting).await?;
        if held.is_empty() && waiting == 0 {
            continue;
        }
        let mut fields = Fields::new();
        if !held.is_empty() {
            let Some(owner) = held.get("owner") else {
                found.push(foreign_finding(&hash, "hash without an owner", kind));
                continue;
            };
            fields.push(("holder", Value::Text(owner.clone())));
            fields.push(("holds", int(held.get("count"))));
            fields.push(("fencing_token", int(held.get("token"))));
            fields.push(("lease_left_ms", lease_left(conn, &hash).await?));
        } else {
            fields.push(("holder", Value::Null));
        }
        // The plain lock registers waiting clients (one per client, however many of its tasks
        // wait); the fair lock queues every waiting call.
        let label = if kind == "lock" {
            "waiting_clients"
        } else {
            "waiters"
        };
        fields.push((label, Value::Int(waiting)));
        found.push(Finding {
            kind,
            key: hash,
            fields,
        });
    }

    let ReadWriteLockLayout {
        hash: rw,
        readers,
        writers,
        fence,
        ..
    } = ReadWriteLockLayout::new(space);
    let expected = [
        (&rw, "hash"),
        (&readers, "zset"),
        (&writers, "zset"),
        (&fence, "string"),
    ];
    if !foreign(conn, "read_write_lock", &expected, &mut found).await? {
        let hash: BTreeMap<String, String> = conn.hgetall(&rw).await?;
        let waiting_writers: i64 = conn.zcard(&writers).await?;
        if !hash.is_empty() || waiting_writers > 0 {
            let mut fields = Fields::new();
            let mode = hash
                .get("mode")
                .cloned()
                .unwrap_or_else(|| "free".to_owned());
            fields.push(("mode", Value::Text(mode)));
            if let Some(writer) = hash.get("writer") {
                fields.push(("writer", Value::Text(writer.clone())));
                fields.push(("write_holds", int(hash.get("wcount"))));
                fields.push(("fencing_token", int(hash.get("wtoken"))));
            }
            let reader_list: Vec<String> = hash
                .iter()
                .filter_map(|(field, holds)| {
                    field
                        .strip_prefix("r:")
                        .map(|owner| format!("{owner} ×{holds}"))
                })
                .collect();
            if !reader_list.is_empty() {
                fields.push(("readers", Value::List(reader_list)));
                let read_holds: i64 = conn.zcard(&readers).await?;
                fields.push(("read_holds", Value::Int(read_holds)));
            }
            fields.push(("lease_left_ms", lease_left(conn, &rw).await?));
            fields.push(("waiting_writers", Value::Int(waiting_writers)));
            // Calls that found the lock taken and wait (readers and writers), as Redis counts
            // them.
            fields.push((
                "waiters",
                hash.get("w").map_or(Value::Int(0), |w| int(Some(w))),
            ));
            found.push(Finding {
                kind: "read_write_lock",
                key: rw,
                fields,
            });
        }
    }

    let SemaphoreLayout {
        permits, waiters, ..
    } = SemaphoreLayout::new(space);
    let expected = [(&permits, "string"), (&waiters, "zset")];
    if !foreign(conn, "semaphore", &expected, &mut found).await? {
        let available: Option<String> = conn.get(&permits).await?;
        if let Some(available) = available {
            let waiting: i64 = conn.zcard(&waiters).await?;
            found.push(Finding {
                kind: "semaphore",
                key: permits,
                fields: vec![
                    ("available_permits", int(Some(&available))),
                    ("waiting_clients", Value::Int(waiting)),
                ],
            });
        }
    }

    let ExpirableSemaphoreLayout {
        permits,
        leases,
        waiters,
        ..
    } = ExpirableSemaphoreLayout::new(space);
    let expected = [(&permits, "string"), (&leases, "zset"), (&waiters, "zset")];
    if !foreign(conn, "expirable_semaphore", &expected, &mut found).await? {
        let available: Option<String> = conn.get(&permits).await?;
        let out: Vec<(String, f64)> = conn.zrange_withscores(&leases, 0, -1).await?;
        if available.is_some() || !out.is_empty() {
            let now = server_ms(conn).await?;
            let waiting: i64 = conn.zcard(&waiters).await?;
            let shown = out
                .iter()
                .take(MAX_PERMITS_SHOWN)
                .map(|(id, until)| (id.clone(), (*until as i64 - now).max(0)))
                .collect();
            found.push(Finding {
                kind: "expirable_semaphore",
                key: permits,
                fields: vec![
                    (
                        "available_permits",
                        available.as_ref().map_or(Value::Int(0), |a| int(Some(a))),
                    ),
                    ("permits_out", Value::Int(out.len() as i64)),
                    ("permits", Value::Permits(shown)),
                    ("waiting_clients", Value::Int(waiting)),
                ],
            });
        }
    }

    let CountDownLatchLayout { latch, waiters, .. } = CountDownLatchLayout::new(space);
    let expected = [(&latch, "hash"), (&waiters, "zset")];
    if !foreign(conn, "count_down_latch", &expected, &mut found).await? {
        let hash: BTreeMap<String, String> = conn.hgetall(&latch).await?;
        if let Some(count) = hash.get("count") {
            let waiting: i64 = conn.zcard(&waiters).await?;
            found.push(Finding {
                kind: "count_down_latch",
                key: latch,
                fields: vec![
                    ("count", int(Some(count))),
                    ("waiting_clients", Value::Int(waiting)),
                ],
            });
        } else if !hash.is_empty() {
            found.push(foreign_finding(
                &latch,
                "hash without a count",
                "count_down_latch",
            ));
        }
    }

    let ElectionLayout {
        leader,
        waiters,
        term,
        ..
    } = ElectionLayout::new(space);
    let expected = [(&leader, "hash"), (&waiters, "zset"), (&term, "string")];
    if !foreign(conn, "election", &expected, &mut found).await? {
        let hash: BTreeMap<String, String> = conn.hgetall(&leader).await?;
        let waiting: i64 = conn.zcard(&waiters).await?;
        if !hash.is_empty() || waiting > 0 {
            let mut fields = Fields::new();
            match hash.get("value") {
                Some(value) => {
                    fields.push(("leader", Value::Text(value.clone())));
                    fields.push(("term", int(hash.get("term"))));
                    fields.push(("lease_left_ms", lease_left(conn, &leader).await?));
                }
                None => fields.push(("leader", Value::Null)),
            }
            fields.push(("waiting_clients", Value::Int(waiting)));
            found.push(Finding {
                kind: "election",
                key: leader,
                fields,
            });
        }
    }

    let RateLimiterLayout { rate, state, .. } = RateLimiterLayout::new(space);
    let expected = [(&rate, "hash"), (&state, "hash")];
    if !foreign(conn, "rate_limiter", &expected, &mut found).await? {
        let hash: BTreeMap<String, String> = conn.hgetall(&rate).await?;
        if !hash.is_empty() {
            let number = |field: &str| hash.get(field).and_then(|v| v.parse::<u64>().ok());
            let shown = match (number("rate"), number("per"), number("burst")) {
                (Some(units), Some(per), Some(burst)) => {
                    redisync::Rate::new(units, std::time::Duration::from_micros(per))
                        .burst(burst)
                        .to_string()
                }
                _ => "unreadable".to_owned(),
            };
            // The state expires when the bucket is full again: at once when idle.
            let pttl: i64 = conn.pttl(&state).await?;
            found.push(Finding {
                kind: "rate_limiter",
                key: rate,
                fields: vec![
                    ("rate", Value::Text(shown)),
                    ("full_again_ms", Value::Int(pttl.max(0))),
                ],
            });
        }
    }
    Ok(found)
}

/// How many permits of an expirable semaphore the report lists one by one.
const MAX_PERMITS_SHOWN: usize = 10;

/// Reports every key of `expected` whose type is neither its primitive's nor absent; returns
/// whether there was one (the primitive is then not read: its reads would fail).
async fn foreign<C: ConnectionLike + Send + Sync>(
    conn: &mut C,
    kind: &'static str,
    expected: &[(&String, &'static str)],
    found: &mut Vec<Finding>,
) -> redis::RedisResult<bool> {
    let mut any = false;
    for (key, wanted) in expected {
        let actual: String = redis::cmd("TYPE")
            .arg(key.as_str())
            .query_async(conn)
            .await?;
        if actual != "none" && actual != *wanted {
            found.push(foreign_finding(key, &format!("a {actual}"), kind));
            any = true;
        }
    }
    Ok(any)
}

fn foreign_finding(key: &str, what: &str, kind: &'static str) -> Finding {
    Finding {
        kind: FOREIGN,
        key: key.to_owned(),
        fields: vec![
            ("found", Value::Text(what.to_owned())),
            ("used_by", Value::Text(kind.to_owned())),
        ],
    }
}

/// A number field as Redis keeps it (text); unreadable text stays text.
fn int(value: Option<&String>) -> Value {
    match value {
        Some(text) => text
            .parse::<i64>()
            .map_or_else(|_| Value::Text(text.clone()), Value::Int),
        None => Value::Null,
    }
}

/// The key's remaining time to live in ms; `Null` without expiry or when gone.
async fn lease_left<C: ConnectionLike + Send + Sync>(
    conn: &mut C,
    key: &str,
) -> redis::RedisResult<Value> {
    let pttl: i64 = conn.pttl(key).await?;
    Ok(if pttl >= 0 {
        Value::Int(pttl)
    } else {
        Value::Null
    })
}

async fn server_ms<C: ConnectionLike + Send + Sync>(conn: &mut C) -> redis::RedisResult<i64> {
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query_async(conn).await?;
    Ok(secs * 1000 + micros / 1000)
}

/// A kind's name in the table.
pub fn title(kind: &str) -> &str {
    match kind {
        "fair_lock" => "fair lock",
        "read_write_lock" => "read-write lock",
        "expirable_semaphore" => "expirable semaphore",
        "count_down_latch" => "count-down latch",
        "rate_limiter" => "rate limiter",
        other => other,
    }
}

/// A field's label in the table: its key in words, without the unit.
fn label(key: &str) -> String {
    key.strip_suffix("_ms").unwrap_or(key).replace('_', " ")
}

/// A human-readable report.
pub fn table(name: &str, found: &[Finding]) -> String {
    if found.is_empty() {
        return format!("nothing under {name:?}\n");
    }
    let mut out = String::new();
    for finding in found {
        if finding.is_foreign() {
            let _ = writeln!(out, "foreign data under {}", finding.key);
        } else {
            let _ = writeln!(out, "{} {name:?}", title(finding.kind));
        }
        let width = finding
            .fields
            .iter()
            .map(|(key, _)| label(key).len())
            .max()
            .unwrap_or(0);
        for (key, value) in &finding.fields {
            let label = label(key);
            let ms = if key.ends_with("_ms") { "ms" } else { "" };
            let mut line = |shown: &str| {
                let _ = writeln!(out, "  {label:<width$}  {shown}");
            };
            match value {
                Value::Text(text) => line(text),
                Value::Int(n) => line(&format!("{n}{ms}")),
                Value::Null => line("none"),
                Value::List(items) => line(&items.join(", ")),
                Value::Permits(permits) => {
                    for (id, left) in permits {
                        line(&format!("{id} (lease left {left}ms)"));
                    }
                }
            }
        }
    }
    out
}

/// The same as JSON, one document:
///
/// ```text
/// {"name": <name>, "primitives": [{"kind": <kind>, "key": <main key>, "fields": {..}}]}
/// ```
///
/// `kind` is `lock`, `fair_lock`, `read_write_lock`, `semaphore`, `expirable_semaphore`,
/// `count_down_latch`, `election`, `rate_limiter`, or `foreign_data` (a key holding something
/// else than its primitive keeps: `key` names it, `fields.found` says what it holds, as
/// `a string` or `hash without an owner`, and `fields.used_by` which primitive uses the key). Field names are snake_case; numbers
/// are JSON integers (fencing tokens, counts, terms), and every duration is an integer field
/// ending in `_ms`. A field that can be absent is `null` (`holder` of a free lock, a
/// `lease_left_ms` without expiry). `readers` is an array of strings, `permits` an array of
/// `{"id": .., "lease_left_ms": ..}`.
pub fn json(name: &str, found: &[Finding]) -> String {
    let primitives: Vec<String> = found
        .iter()
        .map(|finding| {
            let fields: Vec<String> = finding
                .fields
                .iter()
                .map(|(key, value)| {
                    let value = match value {
                        Value::Text(text) => quote(text),
                        Value::Int(n) => n.to_string(),
                        Value::Null => "null".to_owned(),
                        Value::List(items) => format!(
                            "[{}]",
                            items
                                .iter()
                                .map(|i| quote(i))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                        Value::Permits(permits) => format!(
                            "[{}]",
                            permits
                                .iter()
                                .map(|(id, left)| format!(
                                    "{{\"id\": {}, \"lease_left_ms\": {left}}}",
                                    quote(id)
                                ))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    };
                    format!("{}: {value}", quote(key))
                })
                .collect();
            format!(
                "{{\"kind\": {}, \"key\": {}, \"fields\": {{{}}}}}",
                quote(finding.kind),
                quote(&finding.key),
                fields.join(", ")
            )
        })
        .collect();
    format!(
        "{{\"name\": {}, \"primitives\": [{}]}}\n",
        quote(name),
        primitives.join(", ")
    )
}

/// `s` as a JSON string.
pub(crate) fn quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
