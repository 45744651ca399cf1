//! The primitives' key layouts: the names deployed clients use, and the "Redis keys" tables
//! of the primitives' documentation.
//!
//! Every key and channel name is spelled once, in the primitive's layout type
//! (`redisync::layout`); the crates, `redisync inspect` and the other tests take names from
//! there. This file is the one place that spells them again, on purpose: renaming a key
//! strands the state that running clients keep under the old name, so a change to a layout
//! must be seen here. And the tables users read are checked against the layouts, row by row,
//! so they cannot drift apart.

use std::path::PathBuf;

use redisync::layout::*;

/// A name's kind, as the tables spell it.
type Entries = Vec<(String, &'static str)>;

/// Each primitive: the file whose type documents its keys, and its layout's entries for the
/// key space given.
fn primitives(space: &KeySpace) -> Vec<(&'static str, Entries)> {
    vec![
        (
            "redisync-lock/src/lock.rs",
            LockLayout::new(space).entries(),
        ),
        (
            "redisync-lock/src/fair.rs",
            FairLockLayout::new(space).entries(),
        ),
        (
            "redisync-rwlock/src/rwlock.rs",
            ReadWriteLockLayout::new(space).entries(),
        ),
        (
            "redisync-semaphore/src/semaphore.rs",
            SemaphoreLayout::new(space).entries(),
        ),
        (
            "redisync-semaphore/src/expirable.rs",
            ExpirableSemaphoreLayout::new(space).entries(),
        ),
        (
            "redisync-latch/src/latch.rs",
            CountDownLatchLayout::new(space).entries(),
        ),
        (
            "redisync-election/src/election.rs",
            ElectionLayout::new(space).entries(),
        ),
        (
            "redisync-ratelimit/src/limiter.rs",
            RateLimiterLayout::new(space).entries(),
        ),
    ]
}

fn entries(list: &[(&str, &'static str)]) -> Entries {
    list.iter()
        .map(|(name, kind)| ((*name).to_owned(), *kind))
        .collect()
}

#[test]
fn the_layouts_are_the_names_deployed_clients_use() {
    let space = KeySpace::of("redisync", "orders").expect("a valid name");
    let documented = primitives(&space);
    let pinned = [
        entries(&[
            ("redisync:{orders}:lock", "hash"),
            ("redisync:{orders}:fence", "string"),
            ("redisync:{orders}:waiters", "sorted set"),
            ("redisync:{orders}:offers", "hash"),
            ("redisync:{orders}:attempt:<attempt>", "string"),
            ("redisync:{orders}:wake:<client id>", "channel"),
        ]),
        entries(&[
            ("redisync:{orders}:fair:lock", "hash"),
            ("redisync:{orders}:fair:fence", "string"),
            ("redisync:{orders}:fair:attempt:<waiter>", "string"),
            ("redisync:{orders}:fair:queue", "sorted set"),
            ("redisync:{orders}:fair:deadlines", "sorted set"),
            ("redisync:{orders}:fair:wake:<waiter>", "channel"),
        ]),
        entries(&[
            ("redisync:{orders}:rw", "hash"),
            ("redisync:{orders}:rw:readers", "sorted set"),
            ("redisync:{orders}:rw:writers", "sorted set"),
            ("redisync:{orders}:rw:fence", "string"),
            ("redisync:{orders}:rw:waiter:<waiter>", "string"),
            ("redisync:{orders}:rw:attempt:<attempt>", "string"),
            ("redisync:{orders}:rw:wake", "channel"),
            ("redisync:{orders}:rw:drain", "channel"),
        ]),
        entries(&[
            ("redisync:{orders}:semaphore", "string"),
            ("redisync:{orders}:semaphore:generation", "string"),
            ("redisync:{orders}:semaphore:attempt:<attempt>", "string"),
            ("redisync:{orders}:semaphore:waiters", "sorted set"),
            ("redisync:{orders}:semaphore:wake:<client id>", "channel"),
        ]),
        entries(&[
            ("redisync:{orders}:expirable-semaphore", "string"),
            ("redisync:{orders}:expirable-semaphore:leases", "sorted set"),
            (
                "redisync:{orders}:expirable-semaphore:permit:<id>",
                "string",
            ),
            (
                "redisync:{orders}:expirable-semaphore:waiters",
                "sorted set",
            ),
            (
                "redisync:{orders}:expirable-semaphore:wake:<client id>",
                "channel",
            ),
        ]),
        entries(&[
            ("redisync:{orders}:latch", "hash"),
            ("redisync:{orders}:latch:count_down:opened", "hash"),
            ("redisync:{orders}:latch:waiters", "sorted set"),
            ("redisync:{orders}:latch:wake", "channel"),
        ]),
        entries(&[
            ("redisync:{orders}:election:leader", "hash"),
            ("redisync:{orders}:election:term", "string"),
            ("redisync:{orders}:election:waiters", "sorted set"),
            ("redisync:{orders}:election:attempt:<attempt>", "string"),
            ("redisync:{orders}:election:wake:<client id>", "channel"),
            ("redisync:{orders}:election:changes", "channel"),
        ]),
        entries(&[
            ("redisync:{orders}:rate", "hash"),
            ("redisync:{orders}:rate:state", "hash"),
            ("redisync:{orders}:rate:changed", "channel"),
        ]),
    ];
    assert_eq!(documented.len(), pinned.len());
    for ((file, layout), pinned) in documented.into_iter().zip(pinned) {
        assert_eq!(layout, pinned, "the layout documented in {file} changed");
    }
}

/// The rows of the one "Redis keys" table in `source`: each row's name (without its
/// backticks) and kind, in the table's order.
fn table(source: &str) -> Result<Entries, String> {
    let mut tables = source
        .match_indices("/// # Redis keys\n")
        .map(|(at, _)| &source[at..]);
    let Some(table) = tables.next() else {
        return Err("no \"# Redis keys\" table".to_owned());
    };
    if tables.next().is_some() {
        return Err("more than one \"# Redis keys\" table".to_owned());
    }
    let mut rows = Vec::new();
    let mut in_table = false;
    for line in table.lines().skip(1) {
        let Some(row) = line.trim_start().strip_prefix("/// |") else {
            if in_table {
                break;
            }
            continue;
        };
        in_table = true;
        if row.starts_with("---") {
            continue; // the rule under the header
        }
        let cells: Vec<&str> = row.split(" | ").map(str::trim).collect();
        let [name, kind, ..] = cells[..] else {
            return Err(format!("a row without a kind: {line}"));
        };
        if name == "key / channel" {
            continue; // the header
        }
        let Some(name) = name.strip_prefix('`').and_then(|n| n.strip_suffix('`')) else {
            return Err(format!("a row whose name is not in backticks: {line}"));
        };
        let kind = match kind {
            "hash" => "hash",
            "string" => "string",
            "sorted set" => "sorted set",
            "channel" => "channel",
            other => return Err(format!("a row of an unknown kind {other:?}: {line}")),
        };
        rows.push((name.to_owned(), kind));
    }
    Ok(rows)
}

fn sorted(mut entries: Entries) -> Entries {
    entries.sort();
    entries
}

#[test]
fn every_redis_keys_table_names_exactly_its_layout() {
    let placeholders = KeySpace::of("<prefix>", "<name>").expect("a valid name");
    let crates = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../crates");
    for (file, layout) in primitives(&placeholders) {
        let source = std::fs::read_to_string(crates.join(file)).expect("the primitive's source");
        let rows = table(&source).unwrap_or_else(|err| panic!("{file}: {err}"));
        assert_eq!(
            sorted(rows),
            sorted(layout),
            "{file}: its \"Redis keys\" table and its layout type name different keys \
             (left: the table, right: the layout)"
        );
    }
}

#[test]
fn the_table_reader_reads_rows_and_refuses_what_it_cannot_read() {
    let sample = "\
/// A thing.
///
/// # Redis keys
///
/// | key / channel | type | content |
/// |---|---|---|
/// | `<prefix>:{<name>}:thing` | hash | what it holds |
/// | `<prefix>:{<name>}:wake:<client id>` | channel | a | with a pipe |
///
/// | not | this | table |
pub struct Thing;
";
    assert_eq!(
        table(sample),
        Ok(entries(&[
            ("<prefix>:{<name>}:thing", "hash"),
            ("<prefix>:{<name>}:wake:<client id>", "channel"),
        ]))
    );
    assert!(table("/// no table").is_err());
    assert!(table(&sample.replace("| hash |", "| list |")).is_err());
    assert!(table(&sample.replace("`<prefix>:{<name>}:thing`", "thing")).is_err());
    assert!(table(&format!("{sample}{sample}")).is_err());
}
