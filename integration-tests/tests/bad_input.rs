//! Bad input to every public call of every primitive, against a real `redis-server`: invalid
//! names, zero, tiny and oversized leases and waits, permit and count limits, empty
//! multi-locks, bad client options, and foreign data under every key a primitive documents.
//!
//! Every case must return its typed error (`Error::InvalidArgument`, or `Error::WrongType` for
//! foreign data) promptly and without panicking, and leave Redis exactly as it was (every key,
//! its type and content, compared before and after) and the client without local state. The
//! cases are tables; a test collects every failing case and reports them all at once.

mod common;

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use common::{client, keys, ms, strings, text};
use redis::Value;
use redisync::prelude::*;
use redisync::LocalState;
use redisync_test_harness::RedisServer;

/// 2^53 ms + 1: one millisecond above what redisync sends to Redis.
const TOO_MANY_MS: Duration = Duration::from_millis((1 << 53) + 1);
/// One permit above the most a semaphore counts (2^53).
const TOO_MANY_PERMITS: u64 = (1 << 53) + 1;
/// A lease that does not end during a test.
const LONG_LEASE: Duration = Duration::from_secs(600);
/// How long a rejected call may take.
const PROMPTLY: Duration = Duration::from_secs(3);

type BoxFut<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// What a call returned when it succeeded: a description, and for an acquire the release of
/// what it got (a bad-input case that wrongly acquires must not keep it).
struct Returned {
    text: String,
    release: Option<BoxFut<Result<()>>>,
}

type Case = (String, BoxFut<Result<Returned>>);

/// Something an acquire hands out.
trait Held: std::fmt::Debug + Send + 'static {
    fn give_back(self) -> BoxFut<Result<()>>;
}

macro_rules! held {
    ($($kind:ty => $release:ident),* $(,)?) => {$(
        impl Held for $kind {
            fn give_back(self) -> BoxFut<Result<()>> {
                Box::pin(self.$release())
            }
        }
    )*};
}

held!(
    LockGuard => unlock,
    ReadGuard => unlock,
    WriteGuard => unlock,
    SemaphorePermit => release,
    ExpirablePermit => release,
    MultiLockGuard => unlock,
    RedlockGuard => unlock,
    Leadership => resign,
);

fn short(text: String) -> String {
    text.chars().take(120).collect()
}

fn value<T: std::fmt::Debug>(outcome: Result<T>) -> Result<Returned> {
    outcome.map(|v| Returned {
        text: short(format!("{v:?}")),
        release: None,
    })
}

fn guard<T: Held>(outcome: Result<T>) -> Result<Returned> {
    outcome.map(|g| Returned {
        text: short(format!("{g:?}")),
        release: Some(g.give_back()),
    })
}

fn maybe_guard<T: Held>(outcome: Result<Option<T>>) -> Result<Returned> {
    outcome.map(|g| Returned {
        text: short(format!("{g:?}")),
        release: g.map(Held::give_back),
    })
}

/// `case!(cases, "label", handle, convert, |h| h.call(args))`: adds a case calling `call` on
/// a clone of `handle`, its outcome passed through `convert` (`value`, `guard`,
/// `maybe_guard`).
macro_rules! case {
    ($cases:ident, $label:expr, $handle:expr, $convert:ident, |$h:ident| $call:expr) => {{
        let $h = $handle.clone();
        $cases.push((
            $label.to_string(),
            Box::pin(async move { $convert($call.await) }) as BoxFut<Result<Returned>>,
        ));
    }};
}

// ---------------------------------------------------------------------------------------------
// Every call of every primitive, with valid arguments (the handle may be bad).

fn lock_calls(prefix: &str, lock: &ReentrantLock) -> Vec<Case> {
    let mut cases = Vec::new();
    case!(cases, format!("{prefix} lock"), lock, guard, |l| l.lock());
    case!(
        cases,
        format!("{prefix} lock_with_lease"),
        lock,
        guard,
        |l| l.lock_with_lease(ms(1000))
    );
    case!(
        cases,
        format!("{prefix} try_lock"),
        lock,
        maybe_guard,
        |l| l.try_lock()
    );
    case!(
        cases,
        format!("{prefix} try_lock_for"),
        lock,
        maybe_guard,
        |l| l.try_lock_for(ms(100))
    );
    case!(
        cases,
        format!("{prefix} try_lock_with_lease"),
        lock,
        maybe_guard,
        |l| l.try_lock_with_lease(ms(100), ms(1000))
    );
    case!(cases, format!("{prefix} is_locked"), lock, value, |l| l
        .is_locked());
    case!(cases, format!("{prefix} is_held"), lock, value, |l| l
        .is_held());
    case!(cases, format!("{prefix} hold_count"), lock, value, |l| l
        .hold_count());
    case!(
        cases,
        format!("{prefix} remaining_lease"),
        lock,
        value,
        |l| l.remaining_lease()
    );
    case!(cases, format!("{prefix} force_unlock"), lock, value, |l| l
        .force_unlock());
    case!(cases, format!("{prefix} delete"), lock, value, |l| l
        .delete());
    cases
}

fn fair_calls(prefix: &str, lock: &FairLock) -> Vec<Case> {
    let mut cases = Vec::new();
    case!(cases, format!("{prefix} lock"), lock, guard, |l| l.lock());
    case!(
        cases,
        format!("{prefix} lock_with_lease"),
        lock,
        guard,
        |l| l.lock_with_lease(ms(1000))
    );
    case!(
        cases,
        format!("{prefix} try_lock"),
        lock,
        maybe_guard,
        |l| l.try_lock()
    );
    case!(
        cases,
        format!("{prefix} try_lock_for"),
        lock,
        maybe_guard,
        |l| l.try_lock_for(ms(100))
    );
    case!(
        cases,
        format!("{prefix} try_lock_with_lease"),
        lock,
        maybe_guard,
        |l| l.try_lock_with_lease(ms(100), ms(1000))
    );
    case!(cases, format!("{prefix} is_locked"), lock, value, |l| l
        .is_locked());
    case!(cases, format!("{prefix} is_held"), lock, value, |l| l
        .is_held());
    case!(cases, format!("{prefix} hold_count"), lock, value, |l| l
        .hold_count());
    case!(
        cases,
        format!("{prefix} remaining_lease"),
        lock,
        value,
        |l| l.remaining_lease()
    );
    case!(cases, format!("{prefix} force_unlock"), lock, value, |l| l
        .force_unlock());
    case!(cases, format!("{prefix} delete"), lock, value, |l| l
        .delete());
    cases
}

fn rw_calls(prefix: &str, rw: &ReadWriteLock) -> Vec<Case> {
    let mut cases = Vec::new();
    case!(cases, format!("{prefix} read"), rw, guard, |l| l.read());
    case!(cases, format!("{prefix} write"), rw, guard, |l| l.write());
    case!(cases, format!("{prefix} try_read"), rw, maybe_guard, |l| l
        .try_read());
    case!(cases, format!("{prefix} try_write"), rw, maybe_guard, |l| l
        .try_write());
    case!(
        cases,
        format!("{prefix} try_read_for"),
        rw,
        maybe_guard,
        |l| l.try_read_for(ms(100))
    );
    case!(
        cases,
        format!("{prefix} try_write_for"),
        rw,
        maybe_guard,
        |l| l.try_write_for(ms(100))
    );
    case!(cases, format!("{prefix} read_with_lease"), rw, guard, |l| l
        .read_with_lease(ms(1000)));
    case!(
        cases,
        format!("{prefix} write_with_lease"),
        rw,
        guard,
        |l| l.write_with_lease(ms(1000))
    );
    case!(
        cases,
        format!("{prefix} try_read_with_lease"),
        rw,
        maybe_guard,
        |l| l.try_read_with_lease(ms(100), ms(1000))
    );
    case!(
        cases,
        format!("{prefix} try_write_with_lease"),
        rw,
        maybe_guard,
        |l| l.try_write_with_lease(ms(100), ms(1000))
    );
    case!(cases, format!("{prefix} is_locked"), rw, value, |l| l
        .is_locked());
    case!(cases, format!("{prefix} force_unlock"), rw, value, |l| l
        .force_unlock());
    case!(cases, format!("{prefix} delete"), rw, value, |l| l.delete());
    cases
}

fn semaphore_calls(prefix: &str, sem: &Semaphore) -> Vec<Case> {
    let mut cases = Vec::new();
    case!(
        cases,
        format!("{prefix} try_set_permits"),
        sem,
        value,
        |s| s.try_set_permits(1)
    );
    case!(cases, format!("{prefix} add_permits"), sem, value, |s| s
        .add_permits(1));
    case!(
        cases,
        format!("{prefix} available_permits"),
        sem,
        value,
        |s| s.available_permits()
    );
    case!(cases, format!("{prefix} drain_permits"), sem, value, |s| s
        .drain_permits());
    case!(cases, format!("{prefix} acquire"), sem, guard, |s| s
        .acquire());
    case!(cases, format!("{prefix} acquire_many"), sem, guard, |s| s
        .acquire_many(2));
    case!(
        cases,
        format!("{prefix} try_acquire"),
        sem,
        maybe_guard,
        |s| s.try_acquire()
    );
    case!(
        cases,
        format!("{prefix} try_acquire_many"),
        sem,
        maybe_guard,
        |s| s.try_acquire_many(2)
    );
    case!(
        cases,
        format!("{prefix} try_acquire_for"),
        sem,
        maybe_guard,
        |s| s.try_acquire_for(ms(100))
    );
    case!(
        cases,
        format!("{prefix} try_acquire_many_for"),
        sem,
        maybe_guard,
        |s| s.try_acquire_many_for(2, ms(100))
    );
    case!(cases, format!("{prefix} release"), sem, value, |s| s
        .release(1));
    case!(cases, format!("{prefix} delete"), sem, value, |s| s
        .delete());
    cases
}

fn expirable_calls(prefix: &str, sem: &ExpirableSemaphore) -> Vec<Case> {
    let mut cases = Vec::new();
    case!(
        cases,
        format!("{prefix} try_set_permits"),
        sem,
        value,
        |s| s.try_set_permits(1)
    );
    case!(cases, format!("{prefix} add_permits"), sem, value, |s| s
        .add_permits(1));
    case!(
        cases,
        format!("{prefix} available_permits"),
        sem,
        value,
        |s| s.available_permits()
    );
    case!(cases, format!("{prefix} acquire"), sem, guard, |s| s
        .acquire());
    case!(
        cases,
        format!("{prefix} acquire_with_lease"),
        sem,
        guard,
        |s| s.acquire_with_lease(ms(1000))
    );
    case!(
        cases,
        format!("{prefix} try_acquire"),
        sem,
        maybe_guard,
        |s| s.try_acquire()
    );
    case!(
        cases,
        format!("{prefix} try_acquire_for"),
        sem,
        maybe_guard,
        |s| s.try_acquire_for(ms(100))
    );
    case!(
        cases,
        format!("{prefix} try_acquire_with_lease"),
        sem,
        maybe_guard,
        |s| s.try_acquire_with_lease(ms(100), ms(1000))
    );
    case!(cases, format!("{prefix} release_by_id"), sem, value, |s| s
        .release_by_id("some-permit"));
    case!(cases, format!("{prefix} delete"), sem, value, |s| s
        .delete());
    cases
}

fn latch_calls(prefix: &str, latch: &CountDownLatch) -> Vec<Case> {
    let mut cases = Vec::new();
    case!(
        cases,
        format!("{prefix} try_set_count"),
        latch,
        value,
        |l| l.try_set_count(1)
    );
    case!(cases, format!("{prefix} count_down"), latch, value, |l| l
        .count_down());
    case!(cases, format!("{prefix} count"), latch, value, |l| l
        .count());
    case!(cases, format!("{prefix} wait"), latch, value, |l| l.wait());
    case!(cases, format!("{prefix} wait_for"), latch, value, |l| l
        .wait_for(ms(100)));
    case!(cases, format!("{prefix} delete"), latch, value, |l| l
        .delete());
    cases
}

fn election_calls(prefix: &str, election: &LeaderElection) -> Vec<Case> {
    let mut cases = Vec::new();
    case!(cases, format!("{prefix} campaign"), election, guard, |e| e
        .campaign("v"));
    case!(
        cases,
        format!("{prefix} try_campaign"),
        election,
        maybe_guard,
        |e| e.try_campaign("v")
    );
    case!(
        cases,
        format!("{prefix} campaign_for"),
        election,
        maybe_guard,
        |e| e.campaign_for("v", ms(100))
    );
    case!(
        cases,
        format!("{prefix} acquire_with"),
        election,
        maybe_guard,
        |e| e.acquire_with(Wait::No, Lease::Watchdog)
    );
    case!(cases, format!("{prefix} leader"), election, value, |e| e
        .leader());
    case!(
        cases,
        format!("{prefix} observe (first item)"),
        election,
        value,
        |e| async move {
            let mut changes = Box::pin(e.observe());
            futures_util::StreamExt::next(&mut changes)
                .await
                .unwrap_or(Ok(None))
        }
    );
    case!(cases, format!("{prefix} delete"), election, value, |e| e
        .delete());
    cases
}

fn multi_calls(prefix: &str, multi: &MultiLock) -> Vec<Case> {
    let mut cases = Vec::new();
    case!(cases, format!("{prefix} lock"), multi, guard, |m| m.lock());
    case!(
        cases,
        format!("{prefix} lock_with_lease"),
        multi,
        guard,
        |m| m.lock_with_lease(ms(1000))
    );
    case!(
        cases,
        format!("{prefix} try_lock"),
        multi,
        maybe_guard,
        |m| m.try_lock()
    );
    case!(
        cases,
        format!("{prefix} try_lock_for"),
        multi,
        maybe_guard,
        |m| m.try_lock_for(ms(100))
    );
    case!(
        cases,
        format!("{prefix} try_lock_with_lease"),
        multi,
        maybe_guard,
        |m| m.try_lock_with_lease(ms(100), ms(1000))
    );
    cases
}

fn redlock_calls(prefix: &str, redlock: &Redlock) -> Vec<Case> {
    let mut cases = Vec::new();
    case!(
        cases,
        format!("{prefix} lock_with_lease"),
        redlock,
        guard,
        |r| r.lock_with_lease(ms(1000))
    );
    case!(
        cases,
        format!("{prefix} try_lock_with_lease"),
        redlock,
        maybe_guard,
        |r| r.try_lock_with_lease(ms(100), ms(1000))
    );
    cases
}

// ---------------------------------------------------------------------------------------------
// Checking cases.

/// The error a case must return.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    /// `Error::InvalidArgument`, and nothing in Redis changes.
    Invalid,
    /// `Error::WrongType`, and nothing in Redis changes.
    WrongType,
    /// For foreign data under a key the call may not need (a fencing counter under a read
    /// lock, say): `Error::WrongType`, or success without touching that key.
    WrongTypeOrUntouched,
    /// A release over foreign data: `Error::WrongType` or `Error::NotOwner` (for a multi-lock,
    /// `Error::Several` of those), without touching the foreign key.
    ReleaseRefused,
}

fn refused(err: &Error) -> bool {
    match err {
        Error::WrongType | Error::NotOwner => true,
        Error::Several(parts) => parts.iter().all(|(_, e)| refused(e)),
        _ => false,
    }
}

/// Short-lived records of single requests (idempotent releases, given-back attempts,
/// withdrawn writer marks): they expire by themselves and hold nothing.
fn is_record(key: &str) -> bool {
    [":attempt:", ":permit:", ":count_down:", ":waiter:"]
        .iter()
        .any(|part| key.contains(part))
}

/// Every key of the server with its type, content (sorted where Redis does not order) and
/// whether it expires; expiring records of single requests aside, since background
/// clean-ups may write them at any time.
fn snapshot(server: &RedisServer) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for key in strings(&server.cmd(&["KEYS", "*"])) {
        let described = describe_key(server, &key);
        if is_record(&key) && described.ends_with("(expires)") {
            continue;
        }
        out.insert(key.clone(), described);
    }
    out
}

fn describe_key(server: &RedisServer, key: &str) -> String {
    let kind = text(&server.cmd(&["TYPE", key]));
    let sorted = |mut items: Vec<String>| {
        items.sort();
        items.join(" ")
    };
    let content = match kind.as_str() {
        "none" => return "none".to_owned(),
        "string" => text(&server.cmd(&["GET", key])),
        "hash" => sorted(
            strings(&server.cmd(&["HGETALL", key]))
                .chunks(2)
                .map(|pair| pair.join("="))
                .collect(),
        ),
        "list" => strings(&server.cmd(&["LRANGE", key, "0", "-1"])).join(" "),
        "set" => sorted(strings(&server.cmd(&["SMEMBERS", key]))),
        "zset" => strings(&server.cmd(&["ZRANGE", key, "0", "-1", "WITHSCORES"])).join(" "),
        other => format!("<{other}>"),
    };
    let expires = server.cmd(&["PTTL", key]) != Value::Int(-1);
    format!(
        "{kind}: {content}{}",
        if expires { " (expires)" } else { "" }
    )
}

/// Runs cases and records every failure.
struct Checker<'a> {
    server: &'a RedisServer,
    clients: Vec<Client>,
    cases: usize,
    failures: Vec<String>,
    /// Rejected calls that still sent something to Redis.
    reached_redis: Vec<String>,
}

impl<'a> Checker<'a> {
    fn new(server: &'a RedisServer, clients: &[&Client]) -> Self {
        Checker {
            server,
            clients: clients.iter().map(|c| (*c).clone()).collect(),
            cases: 0,
            failures: Vec::new(),
            reached_redis: Vec::new(),
        }
    }

    fn scripts_sent(&self) -> u64 {
        ["evalsha", "eval", "script|load"]
            .iter()
            .map(|c| self.server.command_calls(c))
            .sum()
    }

    /// Runs one case; `watched` is the key whose content must stay as it is for
    /// [`Expect::WrongTypeOrUntouched`] (every key must stay as it is otherwise). `restore`
    /// puts the server back into the state the next case expects after a failure.
    async fn run(
        &mut self,
        (label, call): Case,
        expect: Expect,
        watched: Option<&str>,
        restore: &(dyn Fn(&RedisServer) + Sync),
    ) {
        self.cases += 1;
        let before = snapshot(self.server);
        let scripts_before = self.scripts_sent();
        let task = tokio::spawn(call);
        let outcome = tokio::time::timeout(PROMPTLY, task).await;
        let mut failure = None;
        let mut released = None;
        match outcome {
            Err(_) => failure = Some(format!("did not return within {PROMPTLY:?}")),
            Ok(Err(join)) => {
                let message = join
                    .try_into_panic()
                    .ok()
                    .and_then(|p| {
                        p.downcast_ref::<String>()
                            .cloned()
                            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    })
                    .unwrap_or_default();
                failure = Some(format!("PANICKED: {message}"));
            }
            Ok(Ok(outcome)) => match (expect, outcome) {
                (Expect::Invalid, Err(Error::InvalidArgument(message))) => {
                    assert!(!message.is_empty(), "{label}: an empty message");
                }
                (Expect::WrongType | Expect::WrongTypeOrUntouched, Err(Error::WrongType)) => {}
                (Expect::WrongTypeOrUntouched, Ok(returned)) => released = Some(returned),
                (Expect::ReleaseRefused, Err(err)) if refused(&err) => {}
                (_, Ok(returned)) => {
                    failure = Some(format!("expected {expect:?}, got Ok({})", returned.text));
                    released = Some(returned);
                }
                (_, Err(err)) => failure = Some(format!("expected {expect:?}, got Err({err:?})")),
            },
        }
        // A call that wrongly succeeded gives back what it got, so later cases start clean.
        if let Some(Returned {
            release: Some(release),
            ..
        }) = released
        {
            let _ = tokio::time::timeout(PROMPTLY, release).await;
        }
        if failure.is_none() {
            let after = snapshot(self.server);
            let changed = match (expect, watched) {
                (Expect::WrongTypeOrUntouched | Expect::ReleaseRefused, Some(key)) => {
                    (before.get(key) != after.get(key)).then(|| {
                        format!(
                            "changed {key}: {:?} -> {:?}",
                            before.get(key),
                            after.get(key)
                        )
                    })
                }
                _ => (before != after).then(|| describe_change(&before, &after)),
            };
            failure = changed;
        }
        if failure.is_none() {
            for (i, client) in self.clients.iter().enumerate() {
                if client.local_state() != LocalState::default() {
                    failure = Some(format!(
                        "client {i} kept local state {:?}",
                        client.local_state()
                    ));
                }
            }
        }
        if expect == Expect::Invalid && self.scripts_sent() != scripts_before {
            self.reached_redis.push(label.clone());
        }
        if let Some(failure) = failure {
            self.failures.push(format!("{label}: {failure}"));
            // Let background releases land; where the cases need planted data, plant it
            // again. (Elsewhere each case compares with the state just before it.)
            tokio::time::sleep(ms(100)).await;
            restore(self.server);
        }
    }

    async fn run_all(
        &mut self,
        cases: Vec<Case>,
        expect: Expect,
        watched: Option<&str>,
        restore: &(dyn Fn(&RedisServer) + Sync),
    ) {
        for case in cases {
            self.run(case, expect, watched, restore).await;
        }
    }

    /// Prints the tally and fails listing every failing case, except known bugs, which are
    /// only printed: failure lines that start with the first string of a pair and contain
    /// the second.
    fn finish(self, test: &str, known_bugs: &[(&str, &str)]) {
        let (known, failures): (Vec<_>, Vec<_>) = self.failures.into_iter().partition(|f| {
            known_bugs
                .iter()
                .any(|(start, part)| f.starts_with(start) && f.contains(part))
        });
        println!(
            "REPORT {test}: {} cases, {} failures, {} known bugs skipped; rejected calls that \
             still sent a script: {}",
            self.cases,
            failures.len(),
            known.len(),
            self.reached_redis.len()
        );
        for failure in &known {
            println!("  known bug: {failure}");
        }
        for label in &self.reached_redis {
            println!("  reached redis: {label}");
        }
        assert!(
            failures.is_empty(),
            "{test}: {} of {} cases failed:\n  {}",
            failures.len(),
            self.cases,
            failures.join("\n  ")
        );
    }
}

fn describe_change(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>) -> String {
    let mut changes = Vec::new();
    for (key, value) in before {
        match after.get(key) {
            None => changes.push(format!("deleted {key} ({value})")),
            Some(now) if now != value => changes.push(format!("changed {key}: {value} -> {now}")),
            _ => {}
        }
    }
    for (key, value) in after {
        if !before.contains_key(key) {
            changes.push(format!("created {key} ({value})"));
        }
    }
    format!("changed Redis: {}", changes.join("; "))
}

// ---------------------------------------------------------------------------------------------
// A server with some valid state that bad calls must leave alone.

/// Valid primitives the bad calls must not disturb: a held lock, an initialised semaphore of
/// each kind, an armed latch.
async fn populate(server: &RedisServer, owner: &Client) -> Vec<Box<dyn std::any::Any + Send>> {
    let mut kept: Vec<Box<dyn std::any::Any + Send>> = Vec::new();
    kept.push(Box::new(
        owner
            .lock("held")
            .lock_with_lease(Duration::from_secs(600))
            .await
            .unwrap(),
    ));
    assert!(owner.semaphore("sem").try_set_permits(3).await.unwrap());
    assert!(owner
        .expirable_semaphore("xsem")
        .try_set_permits(3)
        .await
        .unwrap());
    assert!(owner
        .count_down_latch("latch")
        .try_set_count(2)
        .await
        .unwrap());
    assert!(!snapshot(server).is_empty());
    kept
}

/// Restores nothing: after a failure, later cases still compare with the state just before
/// them.
fn no_restore(_: &RedisServer) {}

/// A bad name: what is wrong with it, and how to make it.
type BadName = (&'static str, fn() -> String);

const BAD_NAMES: [BadName; 3] = [
    ("empty name", String::new),
    ("1025-byte name", || "n".repeat(1025)),
    ("name starting with '}'", || "}starts-with-brace".to_owned()),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_names_are_invalid_arguments_for_every_call() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let d = client(&server).await;
    let owner = client(&server).await;
    let _kept = populate(&server, &owner).await;
    let mut checker = Checker::new(&server, &[&c, &d]);
    for (what, name) in BAD_NAMES {
        let name = name();
        let mut cases = Vec::new();
        cases.extend(lock_calls(&format!("lock, {what}:"), &c.lock(&name)));
        cases.extend(fair_calls(
            &format!("fair lock, {what}:"),
            &c.fair_lock(&name),
        ));
        cases.extend(rw_calls(
            &format!("rwlock, {what}:"),
            &c.read_write_lock(&name),
        ));
        cases.extend(semaphore_calls(
            &format!("semaphore, {what}:"),
            &c.semaphore(&name),
        ));
        cases.extend(expirable_calls(
            &format!("expirable, {what}:"),
            &c.expirable_semaphore(&name),
        ));
        cases.extend(latch_calls(
            &format!("latch, {what}:"),
            &c.count_down_latch(&name),
        ));
        cases.extend(election_calls(
            &format!("election, {what}:"),
            &c.leader_election(&name),
        ));
        // One bad lock among good ones, on one client and across two.
        cases.extend(multi_calls(
            &format!("multi-lock (one client), {what}:"),
            &c.multi_lock([c.lock("good-a"), c.lock(&name), c.lock("good-z")]),
        ));
        cases.extend(multi_calls(
            &format!("multi-lock (two clients), {what}:"),
            &c.multi_lock([c.lock("good-a"), d.lock(&name), c.lock("good-z")]),
        ));
        cases.extend(redlock_calls(
            &format!("redlock, {what}:"),
            &Redlock::new([c.lock(&name)]),
        ));
        checker
            .run_all(cases, Expect::Invalid, None, &no_restore)
            .await;
        // The constructors never fail, and keep the name as given.
        assert_eq!(c.lock(&name).name(), name);
        assert_eq!(c.semaphore(&name).name(), name);
    }
    checker.finish(
        "bad_names_are_invalid_arguments_for_every_call",
        KNOWN_BAD_NAME_BUGS,
    );
}

/// Bug: a multi-lock whose locks span clients, one of them with an invalid name, takes (and
/// then gives back) the other clients' locks before reporting `InvalidArgument`: the other
/// locks are held for a moment, their fencing counters move, records are written.
const KNOWN_BAD_NAME_BUGS: &[(&str, &str)] = &[];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_lock_with_a_bad_name_touches_nothing() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let d = client(&server).await;
    let mut checker = Checker::new(&server, &[&c, &d]);
    for (what, name) in BAD_NAMES {
        let name = name();
        let multi = c.multi_lock([c.lock("good-a"), d.lock(&name), c.lock("good-z")]);
        checker
            .run_all(
                multi_calls(&format!("multi-lock (two clients), {what}:"), &multi),
                Expect::Invalid,
                None,
                &no_restore,
            )
            .await;
    }
    checker.finish("bug_multi_lock_with_a_bad_name_touches_nothing", &[]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_durations_counts_and_empty_sets_are_invalid_arguments() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let owner = client(&server).await;
    let _kept = populate(&server, &owner).await;
    let mut checker = Checker::new(&server, &[&c]);
    let mut cases: Vec<Case> = Vec::new();
    let bad_leases = [
        ("zero lease", Duration::ZERO),
        ("1 ns lease", Duration::from_nanos(1)),
        ("9 ms lease (below MIN_LEASE)", ms(9)),
        ("Duration::MAX lease", Duration::MAX),
        ("2^53+1 ms lease", TOO_MANY_MS),
    ];
    let bad_waits = [
        ("Duration::MAX wait", Duration::MAX),
        ("2^53+1 ms wait", TOO_MANY_MS),
    ];
    let ok = ms(1000);

    let lock = c.lock("held"); // held by another client
    let fair = c.fair_lock("fair");
    let rw = c.read_write_lock("rw");
    let xsem = c.expirable_semaphore("xsem");
    let multi = c.multi_lock([c.lock("m-1"), c.lock("m-2")]);
    let redlock = Redlock::new([c.lock("r-1")]);
    let election = c.leader_election("election");
    for (what, lease) in bad_leases {
        case!(
            cases,
            format!("election campaign_with(Forever, Fixed({what}))"),
            election,
            maybe_guard,
            |e| e.campaign_with("v", Wait::Forever, Lease::Fixed(lease))
        );
        case!(
            cases,
            format!("lock lock_with_lease({what})"),
            lock,
            guard,
            |l| l.lock_with_lease(lease)
        );
        case!(
            cases,
            format!("lock try_lock_with_lease(1s, {what})"),
            lock,
            maybe_guard,
            |l| l.try_lock_with_lease(ok, lease)
        );
        case!(
            cases,
            format!("fair lock_with_lease({what})"),
            fair,
            guard,
            |l| l.lock_with_lease(lease)
        );
        case!(
            cases,
            format!("fair try_lock_with_lease(1s, {what})"),
            fair,
            maybe_guard,
            |l| l.try_lock_with_lease(ok, lease)
        );
        case!(
            cases,
            format!("rw read_with_lease({what})"),
            rw,
            guard,
            |l| l.read_with_lease(lease)
        );
        case!(
            cases,
            format!("rw write_with_lease({what})"),
            rw,
            guard,
            |l| l.write_with_lease(lease)
        );
        case!(
            cases,
            format!("rw try_read_with_lease(1s, {what})"),
            rw,
            maybe_guard,
            |l| l.try_read_with_lease(ok, lease)
        );
        case!(
            cases,
            format!("rw try_write_with_lease(1s, {what})"),
            rw,
            maybe_guard,
            |l| l.try_write_with_lease(ok, lease)
        );
        case!(
            cases,
            format!("expirable acquire_with_lease({what})"),
            xsem,
            guard,
            |s| s.acquire_with_lease(lease)
        );
        case!(
            cases,
            format!("expirable try_acquire_with_lease(1s, {what})"),
            xsem,
            maybe_guard,
            |s| s.try_acquire_with_lease(ok, lease)
        );
        case!(
            cases,
            format!("multi-lock lock_with_lease({what})"),
            multi,
            guard,
            |m| m.lock_with_lease(lease)
        );
        case!(
            cases,
            format!("multi-lock try_lock_with_lease(1s, {what})"),
            multi,
            maybe_guard,
            |m| m.try_lock_with_lease(ok, lease)
        );
        case!(
            cases,
            format!("redlock lock_with_lease({what})"),
            redlock,
            guard,
            |r| r.lock_with_lease(lease)
        );
        case!(
            cases,
            format!("redlock try_lock_with_lease(1s, {what})"),
            redlock,
            maybe_guard,
            |r| r.try_lock_with_lease(ok, lease)
        );
        // A bad heartbeat makes every fair acquire invalid.
        let beat = c.fair_lock("beat").with_heartbeat(lease);
        cases.extend(
            fair_calls(&format!("fair with_heartbeat({what}):"), &beat)
                .into_iter()
                .take(5),
        );
    }
    let sem = c.semaphore("sem");
    let latch = c.count_down_latch("latch");
    let huge = "x".repeat(redisync::MAX_VALUE_LEN + 1);
    case!(
        cases,
        "election try_campaign(value over MAX_VALUE_LEN)",
        election,
        maybe_guard,
        |e| e.try_campaign(huge)
    );
    for (what, wait) in bad_waits {
        case!(
            cases,
            format!("election campaign_for({what})"),
            election,
            maybe_guard,
            |e| e.campaign_for("v", wait)
        );
        case!(
            cases,
            format!("lock try_lock_for({what})"),
            lock,
            maybe_guard,
            |l| l.try_lock_for(wait)
        );
        case!(
            cases,
            format!("lock try_lock_with_lease({what}, 1s)"),
            lock,
            maybe_guard,
            |l| l.try_lock_with_lease(wait, ok)
        );
        case!(
            cases,
            format!("fair try_lock_for({what})"),
            fair,
            maybe_guard,
            |l| l.try_lock_for(wait)
        );
        case!(
            cases,
            format!("fair try_lock_with_lease({what}, 1s)"),
            fair,
            maybe_guard,
            |l| l.try_lock_with_lease(wait, ok)
        );
        case!(
            cases,
            format!("rw try_read_for({what})"),
            rw,
            maybe_guard,
            |l| l.try_read_for(wait)
        );
        case!(
            cases,
            format!("rw try_write_for({what})"),
            rw,
            maybe_guard,
            |l| l.try_write_for(wait)
        );
        case!(
            cases,
            format!("rw try_read_with_lease({what}, 1s)"),
            rw,
            maybe_guard,
            |l| l.try_read_with_lease(wait, ok)
        );
        case!(
            cases,
            format!("rw try_write_with_lease({what}, 1s)"),
            rw,
            maybe_guard,
            |l| l.try_write_with_lease(wait, ok)
        );
        case!(
            cases,
            format!("semaphore try_acquire_for({what})"),
            sem,
            maybe_guard,
            |s| s.try_acquire_for(wait)
        );
        case!(
            cases,
            format!("semaphore try_acquire_many_for(1, {what})"),
            sem,
            maybe_guard,
            |s| s.try_acquire_many_for(1, wait)
        );
        case!(
            cases,
            format!("expirable try_acquire_for({what})"),
            xsem,
            maybe_guard,
            |s| s.try_acquire_for(wait)
        );
        case!(
            cases,
            format!("expirable try_acquire_with_lease({what}, 1s)"),
            xsem,
            maybe_guard,
            |s| s.try_acquire_with_lease(wait, ok)
        );
        case!(
            cases,
            format!("latch wait_for({what})"),
            latch,
            value,
            |l| l.wait_for(wait)
        );
        case!(
            cases,
            format!("multi-lock try_lock_for({what})"),
            multi,
            maybe_guard,
            |m| m.try_lock_for(wait)
        );
        case!(
            cases,
            format!("multi-lock try_lock_with_lease({what}, 1s)"),
            multi,
            maybe_guard,
            |m| m.try_lock_with_lease(wait, ok)
        );
        case!(
            cases,
            format!("redlock try_lock_with_lease({what}, 1s)"),
            redlock,
            maybe_guard,
            |r| r.try_lock_with_lease(wait, ok)
        );
    }

    // Permit counts: zero where at least one is needed, above 2^53, above i64::MAX.
    for (what, n) in [
        ("0", 0),
        ("2^53+1", TOO_MANY_PERMITS),
        ("i64::MAX+1", i64::MAX as u64 + 1),
        ("u64::MAX", u64::MAX),
    ] {
        case!(
            cases,
            format!("semaphore acquire_many({what})"),
            sem,
            guard,
            |s| s.acquire_many(n)
        );
        case!(
            cases,
            format!("semaphore try_acquire_many({what})"),
            sem,
            maybe_guard,
            |s| s.try_acquire_many(n)
        );
        case!(
            cases,
            format!("semaphore try_acquire_many_for({what}, 1s)"),
            sem,
            maybe_guard,
            |s| s.try_acquire_many_for(n, ok)
        );
        case!(
            cases,
            format!("semaphore release({what})"),
            sem,
            value,
            |s| s.release(n)
        );
        if n != 0 {
            let fresh = c.semaphore("fresh");
            case!(
                cases,
                format!("semaphore try_set_permits({what})"),
                fresh,
                value,
                |s| s.try_set_permits(n)
            );
            let fresh = c.expirable_semaphore("x-fresh");
            case!(
                cases,
                format!("expirable try_set_permits({what})"),
                fresh,
                value,
                |s| s.try_set_permits(n)
            );
        }
    }
    for (what, n) in [
        ("2^53+1", TOO_MANY_PERMITS as i64),
        ("-(2^53+1)", -(TOO_MANY_PERMITS as i64)),
        ("i64::MAX", i64::MAX),
        ("i64::MIN", i64::MIN),
    ] {
        case!(
            cases,
            format!("semaphore add_permits({what})"),
            sem,
            value,
            |s| s.add_permits(n)
        );
        case!(
            cases,
            format!("expirable add_permits({what})"),
            xsem,
            value,
            |s| s.add_permits(n)
        );
    }

    // Latch counts: zero, above i64::MAX.
    let fresh = c.count_down_latch("fresh-latch");
    for (what, n) in [
        ("0", 0),
        ("i64::MAX+1", i64::MAX as u64 + 1),
        ("u64::MAX", u64::MAX),
    ] {
        case!(
            cases,
            format!("latch try_set_count({what})"),
            fresh,
            value,
            |l| l.try_set_count(n)
        );
    }

    // Empty sets.
    cases.extend(multi_calls(
        "empty multi-lock:",
        &c.multi_lock(Vec::<ReentrantLock>::new()),
    ));
    cases.extend(redlock_calls(
        "empty redlock:",
        &Redlock::new(Vec::<ReentrantLock>::new()),
    ));
    checker
        .run_all(cases, Expect::Invalid, None, &no_restore)
        .await;
    checker.finish(
        "bad_durations_counts_and_empty_sets_are_invalid_arguments",
        &[],
    );

    // The boundaries are valid: a zero wait means "do not wait", try_set_permits(0) and 2^53
    // permits are allowed, and a lease of 2^53 ms.
    assert!(lock.try_lock_for(Duration::ZERO).await.unwrap().is_none());
    let top = c.semaphore("top");
    assert!(top.try_set_permits(1 << 53).await.unwrap());
    assert_eq!(top.available_permits().await.unwrap(), 1 << 53);
    assert!(c.semaphore("zero").try_set_permits(0).await.unwrap());
    let g = c
        .lock("longest")
        .lock_with_lease(Duration::from_millis(1 << 53))
        .await
        .unwrap();
    g.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_client_options_are_invalid_arguments() {
    let server = RedisServer::start();
    let url = server.url();
    let connected = || server.info_field("clients", "connected_clients").unwrap();
    let before = connected();
    let builders: Vec<(String, ClientBuilder)> = vec![
        (
            "zero watchdog".into(),
            Client::builder(&url).watchdog_timeout(Duration::ZERO),
        ),
        (
            "9 ms watchdog".into(),
            Client::builder(&url).watchdog_timeout(ms(9)),
        ),
        (
            "Duration::MAX watchdog".into(),
            Client::builder(&url).watchdog_timeout(Duration::MAX),
        ),
        (
            "2^53+1 ms watchdog".into(),
            Client::builder(&url).watchdog_timeout(TOO_MANY_MS),
        ),
        ("zero pool".into(), Client::builder(&url).pool_size(0)),
        ("pool of 1025".into(), Client::builder(&url).pool_size(1025)),
        (
            "pool of u32::MAX".into(),
            Client::builder(&url).pool_size(u32::MAX),
        ),
        (
            "zero command timeout".into(),
            Client::builder(&url).command_timeout(Duration::ZERO),
        ),
        (
            "command timeout of a day and 1 ns".into(),
            Client::builder(&url)
                .command_timeout(Duration::from_secs(24 * 60 * 60) + Duration::from_nanos(1)),
        ),
        (
            "Duration::MAX command timeout".into(),
            Client::builder(&url).command_timeout(Duration::MAX),
        ),
        ("empty label".into(), Client::builder(&url).label("")),
        ("label with '/'".into(), Client::builder(&url).label("a/b")),
        ("label with '@'".into(), Client::builder(&url).label("a@b")),
        ("label with '{'".into(), Client::builder(&url).label("a{b")),
        (
            "label with a space".into(),
            Client::builder(&url).label("a b"),
        ),
        (
            "label with a newline".into(),
            Client::builder(&url).label("a\nb"),
        ),
        (
            "129-byte label".into(),
            Client::builder(&url).label("l".repeat(129)),
        ),
        ("empty prefix".into(), Client::builder(&url).key_prefix("")),
        (
            "prefix with '{'".into(),
            Client::builder(&url).key_prefix("a{b"),
        ),
        (
            "prefix with '}'".into(),
            Client::builder(&url).key_prefix("a}b"),
        ),
        (
            "prefix with a hash tag".into(),
            Client::builder(&url).key_prefix("{app}"),
        ),
        (
            "129-byte prefix".into(),
            Client::builder(&url).key_prefix("p".repeat(129)),
        ),
        ("URL 'not a url'".into(), Client::builder("not a url")),
        ("empty URL".into(), Client::builder("")),
        ("http URL".into(), Client::builder("http://127.0.0.1/")),
        (
            "URL with a bad port".into(),
            Client::builder("redis://127.0.0.1:notaport/"),
        ),
        (
            "URL with a bad db".into(),
            Client::builder(format!("{url}notadb")),
        ),
    ];
    let mut failures = Vec::new();
    let total = builders.len();
    for (what, builder) in builders {
        let task = tokio::spawn(builder.build());
        match tokio::time::timeout(PROMPTLY, task).await {
            Err(_) => failures.push(format!("{what}: did not return within {PROMPTLY:?}")),
            Ok(Err(join)) => failures.push(format!("{what}: PANICKED ({join})")),
            Ok(Ok(Err(Error::InvalidArgument(message)))) => {
                assert!(!message.is_empty(), "{what}: an empty message");
                assert!(
                    !message.contains("127.0.0.1:notaport") || what.contains("port"),
                    "{what}: {message}"
                );
            }
            Ok(Ok(other)) => failures.push(format!(
                "{what}: expected InvalidArgument, got {:?}",
                other.map(|c| c.id().to_owned())
            )),
        }
    }
    // No client was left connected, and nothing was written.
    let settled =
        redisync_test_harness::wait_until(Duration::from_secs(5), || connected() == before).await;
    if !settled {
        failures.push(format!(
            "connections: {before} before, {} after",
            connected()
        ));
    }
    assert!(
        snapshot(&server).is_empty(),
        "a rejected client wrote to Redis"
    );
    println!(
        "REPORT bad_client_options_are_invalid_arguments: {total} cases, {} failures",
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// Foreign data.

/// The three foreign shapes planted under each key.
const SHAPES: [(&str, &[&str]); 3] = [
    ("a string", &["SET", "<key>", "foreign"]),
    ("a list", &["RPUSH", "<key>", "foreign"]),
    (
        "a hash of foreign shape",
        &["HSET", "<key>", "foreign", "shape"],
    ),
];

fn plant(server: &RedisServer, key: &str, shape: &[&str]) {
    let args: Vec<&str> = shape
        .iter()
        .map(|a| if *a == "<key>" { key } else { a })
        .collect();
    server.cmd(&args);
}

/// A key of the primitive named by the argument.
type KeyOf = fn(&str) -> String;

/// One primitive's keys (from its layout) and its calls.
struct Foreign {
    primitive: &'static str,
    /// (the key, whether every call reads it)
    keys: &'static [(KeyOf, bool)],
    calls: fn(&str, &Client, &str) -> Vec<Case>,
}

const FOREIGN: &[Foreign] = &[
    Foreign {
        primitive: "lock",
        keys: &[
            (|n| keys::lock(n).hash, true),
            (|n| keys::lock(n).fence, false),
        ],
        calls: |prefix, c, name| lock_calls(prefix, &c.lock(name)),
    },
    Foreign {
        primitive: "fair lock",
        keys: &[
            (|n| keys::fair_lock(n).hash, true),
            (|n| keys::fair_lock(n).fence, false),
            (|n| keys::fair_lock(n).queue, false),
            (|n| keys::fair_lock(n).deadlines, false),
        ],
        calls: |prefix, c, name| fair_calls(prefix, &c.fair_lock(name)),
    },
    Foreign {
        primitive: "rwlock",
        keys: &[
            (|n| keys::rw(n).hash, true),
            (|n| keys::rw(n).readers, false),
            (|n| keys::rw(n).writers, false),
            (|n| keys::rw(n).fence, false),
        ],
        calls: |prefix, c, name| rw_calls(prefix, &c.read_write_lock(name)),
    },
    Foreign {
        primitive: "semaphore",
        keys: &[
            (|n| keys::semaphore(n).permits, true),
            (|n| keys::semaphore(n).generation, false),
        ],
        calls: |prefix, c, name| semaphore_calls(prefix, &c.semaphore(name)),
    },
    Foreign {
        primitive: "expirable semaphore",
        keys: &[
            (|n| keys::expirable(n).permits, true),
            (|n| keys::expirable(n).leases, false),
        ],
        calls: |prefix, c, name| expirable_calls(prefix, &c.expirable_semaphore(name)),
    },
    Foreign {
        primitive: "latch",
        keys: &[(|n| keys::latch(n).latch, true)],
        calls: |prefix, c, name| latch_calls(prefix, &c.count_down_latch(name)),
    },
];

/// Foreign data under every documented key of every primitive: every call is `WrongType` and
/// changes nothing (for a key a call may not need, such as a read lock's fencing counter, it
/// may also succeed without touching that key). `only` selects cases by label substring, and
/// `known_bugs` lists failures to report but not fail on.
async fn foreign_data(only: &[&str], known_bugs: &[(&str, &str)]) {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut checker = Checker::new(&server, &[&c]);
    for foreign in FOREIGN {
        for (i, (key_of, main)) in foreign.keys.iter().enumerate() {
            for (shape, plant_args) in SHAPES {
                let name = format!("f-{}-{i}", foreign.primitive.replace(' ', "-"));
                let key = key_of(&name);
                // What follows the name in the key: `:lock`, `:fair:queue`...
                let suffix = key.strip_prefix(keys::space(&name).base()).unwrap_or(&key);
                let restore = |server: &RedisServer| {
                    server.cmd(&["FLUSHALL"]);
                    plant(server, &key, plant_args)
                };
                restore(&server);
                let prefix = format!("{}, {shape} under {suffix}:", foreign.primitive);
                let cases: Vec<Case> = (foreign.calls)(&prefix, &c, &name)
                    .into_iter()
                    .filter(|(label, _)| only.is_empty() || only.iter().any(|o| label.contains(o)))
                    .collect();
                let expect = if *main {
                    Expect::WrongType
                } else {
                    Expect::WrongTypeOrUntouched
                };
                checker.run_all(cases, expect, Some(&key), &restore).await;
                // Whatever happened, nothing may be left subscribed.
                let channels = common::call_channels(&server);
                assert!(channels.is_empty(), "{prefix} left channels {channels:?}");
            }
        }
    }
    checker.finish(
        if only.is_empty() {
            "foreign_data_under_every_key_is_wrong_type_and_left_alone"
        } else {
            "foreign data (selected cases)"
        },
        known_bugs,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_data_under_every_key_is_wrong_type_and_left_alone() {
    foreign_data(&[], KNOWN_FOREIGN_DATA_BUGS).await;
}

/// Failures of the foreign-data table that are library bugs, each with an ignored test below
/// that fails until it is fixed; substrings of the failure lines.
const KNOWN_FOREIGN_DATA_BUGS: &[(&str, &str)] = &[];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_and_force_unlock_leave_foreign_data_alone() {
    foreign_data(&[": delete", ": force_unlock"], &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_hash_under_a_lock_key_is_wrong_type() {
    foreign_data(
        &[
            "a hash of foreign shape under :lock: ",
            "a hash of foreign shape under :fair:lock: ",
            "a hash of foreign shape under :rw: ",
        ],
        &[],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_set_permits_over_foreign_data_is_wrong_type() {
    foreign_data(&[": try_set_permits"], &[]).await;
}

/// Releases whose primitive's key was overwritten with foreign data while held: each is
/// refused (`WrongType`, or `NotOwner`: the hold is not ours any more) and the foreign data is
/// left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_over_foreign_data_are_refused_and_leave_it_alone() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut checker = Checker::new(&server, &[&c]);
    macro_rules! release_case {
        ($label:expr, $key:expr, $held:expr, |$g:ident| $release:expr) => {{
            let $g = $held;
            let key = $key;
            plant(&server, &key, &["SET", "<key>", "foreign"]);
            let case: Case = (
                $label.to_string(),
                Box::pin(async move { value($release.await) }),
            );
            checker
                .run(case, Expect::ReleaseRefused, Some(&key), &no_restore)
                .await;
        }};
    }
    release_case!(
        "lock guard unlock",
        keys::lock("r-lock").hash,
        c.lock("r-lock").lock().await.unwrap(),
        |g| g.unlock()
    );
    release_case!(
        "fair lock guard unlock",
        keys::fair_lock("r-fair").hash,
        c.fair_lock("r-fair").lock().await.unwrap(),
        |g| g.unlock()
    );
    release_case!(
        "read guard unlock",
        keys::rw("r-read").hash,
        c.read_write_lock("r-read").read().await.unwrap(),
        |g| g.unlock()
    );
    release_case!(
        "write guard unlock",
        keys::rw("r-write").hash,
        c.read_write_lock("r-write").write().await.unwrap(),
        |g| g.unlock()
    );
    let sem = c.semaphore("r-sem");
    assert!(sem.try_set_permits(2).await.unwrap());
    release_case!(
        "semaphore permit release",
        keys::semaphore("r-sem").permits,
        sem.acquire().await.unwrap(),
        |g| g.release()
    );
    let xsem = c.expirable_semaphore("r-xsem");
    assert!(xsem.try_set_permits(2).await.unwrap());
    release_case!(
        "expirable permit release",
        keys::expirable("r-xsem").permits,
        xsem.acquire().await.unwrap(),
        |g| g.release()
    );
    let xsem2 = c.expirable_semaphore("r-xsem-id");
    assert!(xsem2.try_set_permits(2).await.unwrap());
    // A fixed lease, so that nothing renews the permit leaked here.
    let permit = xsem2.acquire_with_lease(LONG_LEASE).await.unwrap();
    let id = permit.id().to_owned();
    std::mem::forget(permit);
    release_case!(
        "expirable release_by_id",
        keys::expirable("r-xsem-id").permits,
        xsem2.clone(),
        |s| async move { s.release_by_id(&id).await }
    );
    release_case!(
        "multi-lock guard unlock (one sub-lock overwritten)",
        keys::lock("r-m-2").hash,
        c.multi_lock([c.lock("r-m-1"), c.lock("r-m-2")])
            .lock()
            .await
            .unwrap(),
        |g| g.unlock()
    );
    checker.finish(
        "releases_over_foreign_data_are_refused_and_leave_it_alone",
        &[],
    );
}

/// An address that is not a Redis server (here, something that answers like an HTTP server)
/// is named as such, with a hint, and reported promptly; the driver alone would report a
/// parse error at some byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_is_not_redis_is_named_as_such() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(16) {
            let Ok(mut stream) = stream else { continue };
            let mut request = [0u8; 256];
            let _ = stream.read(&mut request);
            let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
        }
    });
    let started = std::time::Instant::now();
    let outcome = Client::builder(format!("redis://127.0.0.1:{port}/"))
        .command_timeout(PROMPTLY)
        .build()
        .await;
    let message = match outcome {
        Err(err @ Error::Redis(_)) => err.to_string(),
        other => panic!("expected a Redis error, got {other:?}"),
    };
    assert!(
        message.contains("did not answer as Redis does") && message.contains("rediss://"),
        "{message}"
    );
    assert!(!message.contains('\n'), "one line: {message}");
    assert!(started.elapsed() < PROMPTLY * 2);
}
