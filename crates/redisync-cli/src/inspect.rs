//! `redisync inspect`: what Redis holds under a name, for every kind of primitive.
//!
//! It reads the keys each primitive documents in its "Redis keys" table (on the primitive's
//! type), read-only, and reports what it finds: a name can be used by several kinds at once.

use std::collections::BTreeMap;
use std::fmt::Write;

use redis::aio::ConnectionLike;
use redis::AsyncCommands;
use redisync::core::toolkit::KeySpace;

/// One field of a finding: label and value.
type Fields = Vec<(&'static str, String)>;

/// What one primitive holds under the name.
pub struct Finding {
    pub kind: &'static str,
    pub fields: Fields,
}

/// Reads every primitive's keys under `space`.
pub async fn inspect<C: ConnectionLike + Send + Sync>(
    conn: &mut C,
    space: &KeySpace,
) -> redis::RedisResult<Vec<Finding>> {
    let mut found = Vec::new();
    for (kind, suffix, queue) in [
        ("lock", "lock", None),
        ("fair lock", "fair:lock", Some("fair:queue")),
    ] {
        let hash: BTreeMap<String, String> = conn.hgetall(space.key(suffix)).await?;
        let waiting: usize = match queue {
            Some(queue) => conn.zcard(space.key(queue)).await?,
            None => 0,
        };
        if hash.is_empty() && waiting == 0 {
            continue;
        }
        let mut fields = Fields::new();
        if let Some(owner) = hash.get("owner") {
            fields.push(("holder", owner.clone()));
            fields.push(("holds", hash.get("count").cloned().unwrap_or_default()));
            fields.push((
                "fencing token",
                hash.get("token").cloned().unwrap_or_default(),
            ));
            fields.push(("lease left", lease_left(conn, &space.key(suffix)).await?));
        } else {
            fields.push(("holder", "none".to_owned()));
        }
        if queue.is_some() {
            fields.push(("waiters", waiting.to_string()));
        }
        found.push(Finding { kind, fields });
    }

    let rw: BTreeMap<String, String> = conn.hgetall(space.key("rw")).await?;
    let writers: usize = conn.zcard(space.key("rw:writers")).await?;
    if !rw.is_empty() || writers > 0 {
        let mut fields = Fields::new();
        fields.push((
            "mode",
            rw.get("mode").cloned().unwrap_or_else(|| "free".to_owned()),
        ));
        if let Some(writer) = rw.get("writer") {
            fields.push(("writer", writer.clone()));
            fields.push(("write holds", rw.get("wcount").cloned().unwrap_or_default()));
            fields.push((
                "fencing token",
                rw.get("wtoken").cloned().unwrap_or_default(),
            ));
        }
        let readers: Vec<String> = rw
            .iter()
            .filter_map(|(field, holds)| {
                field
                    .strip_prefix("r:")
                    .map(|owner| format!("{owner} ×{holds}"))
            })
            .collect();
        if !readers.is_empty() {
            fields.push(("readers", readers.join(", ")));
        }
        fields.push(("lease left", lease_left(conn, &space.key("rw")).await?));
        fields.push(("waiting writers", writers.to_string()));
        found.push(Finding {
            kind: "read-write lock",
            fields,
        });
    }

    let permits: Option<String> = conn.get(space.key("semaphore")).await?;
    if let Some(permits) = permits {
        found.push(Finding {
            kind: "semaphore",
            fields: vec![("available permits", permits)],
        });
    }

    let permits: Option<String> = conn.get(space.key("expirable-semaphore")).await?;
    let leases: Vec<(String, f64)> = conn
        .zrange_withscores(space.key("expirable-semaphore:leases"), 0, -1)
        .await?;
    if permits.is_some() || !leases.is_empty() {
        let now = server_ms(conn).await?;
        let mut fields = vec![(
            "available permits",
            permits.unwrap_or_else(|| "0".to_owned()),
        )];
        fields.push(("permits out", leases.len().to_string()));
        for (id, until) in leases.iter().take(10) {
            let left = (*until as i64 - now).max(0);
            fields.push(("permit", format!("{id} (lease left {left}ms)")));
        }
        found.push(Finding {
            kind: "expirable semaphore",
            fields,
        });
    }

    let latch: BTreeMap<String, String> = conn.hgetall(space.key("latch")).await?;
    if let Some(count) = latch.get("count") {
        found.push(Finding {
            kind: "count-down latch",
            fields: vec![("count", count.clone())],
        });
    }

    let leader: BTreeMap<String, String> = conn.hgetall(space.key("election:leader")).await?;
    let waiting: usize = conn.zcard(space.key("election:waiters")).await?;
    if !leader.is_empty() || waiting > 0 {
        let mut fields = Fields::new();
        match leader.get("value") {
            Some(value) => {
                fields.push(("leader", value.clone()));
                fields.push(("term", leader.get("term").cloned().unwrap_or_default()));
                fields.push((
                    "lease left",
                    lease_left(conn, &space.key("election:leader")).await?,
                ));
            }
            None => fields.push(("leader", "none".to_owned())),
        }
        fields.push(("campaigning clients", waiting.to_string()));
        found.push(Finding {
            kind: "election",
            fields,
        });
    }
    let rate: BTreeMap<String, String> = conn.hgetall(space.key("rate")).await?;
    if !rate.is_empty() {
        let number = |field: &str| rate.get(field).and_then(|v| v.parse::<u64>().ok());
        let shown = match (number("rate"), number("per"), number("burst")) {
            (Some(units), Some(per), Some(burst)) => {
                redisync::Rate::new(units, std::time::Duration::from_micros(per))
                    .burst(burst)
                    .to_string()
            }
            _ => "unreadable".to_owned(),
        };
        let state = space.key("rate:state");
        let pttl: i64 = conn.pttl(&state).await?;
        let full = match pttl {
            -2 => "now (idle)".to_owned(),
            ms => format!("in {ms}ms"),
        };
        found.push(Finding {
            kind: "rate limiter",
            fields: vec![("rate", shown), ("full again", full)],
        });
    }
    Ok(found)
}

async fn lease_left<C: ConnectionLike + Send + Sync>(
    conn: &mut C,
    key: &str,
) -> redis::RedisResult<String> {
    let pttl: i64 = conn.pttl(key).await?;
    Ok(match pttl {
        -2 => "gone".to_owned(),
        -1 => "no expiry".to_owned(),
        ms => format!("{ms}ms"),
    })
}

async fn server_ms<C: ConnectionLike + Send + Sync>(conn: &mut C) -> redis::RedisResult<i64> {
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query_async(conn).await?;
    Ok(secs * 1000 + micros / 1000)
}

/// A human-readable report.
pub fn table(name: &str, found: &[Finding]) -> String {
    if found.is_empty() {
        return format!("nothing under {name:?}\n");
    }
    let mut out = String::new();
    for finding in found {
        let _ = writeln!(out, "{} {name:?}", finding.kind);
        let width = finding
            .fields
            .iter()
            .map(|(l, _)| l.len())
            .max()
            .unwrap_or(0);
        for (label, value) in &finding.fields {
            let _ = writeln!(out, "  {label:<width$}  {value}");
        }
    }
    out
}

/// The same as JSON: `{"name": .., "primitives": [{"kind": .., "fields": {..}}]}` (repeated
/// labels, such as each permit, become arrays).
pub fn json(name: &str, found: &[Finding]) -> String {
    let primitives: Vec<String> = found
        .iter()
        .map(|finding| {
            let mut grouped: Vec<(&str, Vec<&str>)> = Vec::new();
            for (label, value) in &finding.fields {
                match grouped.iter_mut().find(|(l, _)| l == label) {
                    Some((_, values)) => values.push(value),
                    None => grouped.push((label, vec![value])),
                }
            }
            let fields: Vec<String> = grouped
                .iter()
                .map(|(label, values)| {
                    let value = if *label == "permit" || values.len() > 1 {
                        format!(
                            "[{}]",
                            values
                                .iter()
                                .map(|v| quote(v))
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    } else {
                        quote(values[0])
                    };
                    format!("{}: {value}", quote(label))
                })
                .collect();
            format!(
                "{{\"kind\": {}, \"fields\": {{{}}}}}",
                quote(finding.kind),
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
