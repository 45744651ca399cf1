//! The semaphores and the latch on the hot path, against a real redis-server: the
//! Redis commands each operation runs, no `PUBLISH` when nobody waits, one wake-up per
//! released permit whatever the number of waiting clients, scripts per contended acquisition
//! that do not grow with the clients, no starving client, a waiter that gives up passing its
//! wake-up on, stopped and vanished clients, and give-backs that keep no record per release
//! yet are applied once when their reply is lost.
//!
//! Every test starts its own server (`CONFIG RESETSTAT` and `INFO commandstats` are its
//! own). Speed is never asserted; the few time bounds tell a wake-up by message from the
//! waiters' periodic re-check (once a second) with a wide margin.

mod common;

use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, Instant};

use common::{client, eventually, int, join_all, keys, ms, strings};
use redisync::layout::KeyFamily;
use redisync::prelude::*;
use redisync_test_harness::{ChaosProxy, RedisServer};

/// How long a condition that should hold "soon" may take before the test fails.
const SETTLE: Duration = Duration::from_secs(10);

/// The semaphores' and the latch's periodic re-check: a waiter asks Redis again at least this
/// often, even if no message comes.
const RECHECK: Duration = Duration::from_secs(1);

// ---------------------------------------------------------------------------------------------
// Command statistics.

/// Commands Redis ran (inside scripts included) while `run` did `ops` operations, per
/// operation. `run` runs once before, so that its scripts are loaded (a first `EVALSHA`
/// answers `NOSCRIPT`); the commands the test itself sends and the pub/sub hub's pings are
/// left out.
async fn commands_per_op<F, Fut>(
    server: &RedisServer,
    ops: u64,
    mut run: F,
) -> BTreeMap<String, f64>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    run().await;
    server.cmd(&["CONFIG", "RESETSTAT"]);
    run().await;
    common::operation_stats(server)
        .into_iter()
        .map(|(name, calls)| (name, calls as f64 / ops as f64))
        .collect()
}

fn total(per_op: &BTreeMap<String, f64>) -> f64 {
    per_op.values().sum()
}

fn show(what: &str, per_op: &BTreeMap<String, f64>) {
    let parts: Vec<String> = per_op
        .iter()
        .map(|(name, n)| format!("{name} {n:.2}"))
        .collect();
    println!(
        "{what}: {:.2} commands per operation ({})",
        total(per_op),
        parts.join(", ")
    );
}

fn publishes(server: &RedisServer) -> u64 {
    server.command_calls("publish")
}

// ---------------------------------------------------------------------------------------------
// Both semaphores behind one face.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Classic,
    Expirable,
}

impl Kind {
    /// The registry of waiting clients.
    fn waiters(self, name: &str) -> String {
        match self {
            Kind::Classic => keys::semaphore(name).waiters,
            Kind::Expirable => keys::expirable(name).waiters,
        }
    }

    /// The waiting clients' wake-up channels, by client id.
    fn wake_channels(self, name: &str) -> KeyFamily {
        match self {
            Kind::Classic => keys::semaphore(name).wake_channels,
            Kind::Expirable => keys::expirable(name).wake_channels,
        }
    }

    /// The records an acquire or a give-back may leave, by attempt or permit id.
    fn records(self, name: &str) -> KeyFamily {
        match self {
            Kind::Classic => keys::semaphore(name).attempt_records,
            Kind::Expirable => keys::expirable(name).permit_records,
        }
    }

    /// The wake-up channel of `client`.
    fn channel(self, name: &str, client: &Client) -> String {
        self.wake_channels(name).of(client.id())
    }

    async fn set(self, client: &Client, name: &str, permits: u64) {
        let set = match self {
            Kind::Classic => client.semaphore(name).try_set_permits(permits).await,
            Kind::Expirable => {
                client
                    .expirable_semaphore(name)
                    .try_set_permits(permits)
                    .await
            }
        };
        assert!(set.expect("try_set_permits"), "{name} existed");
    }

    /// Adds `n` permits (a raw release for the classic kind).
    async fn add(self, client: &Client, name: &str, n: u64) {
        match self {
            Kind::Classic => client.semaphore(name).release(n).await,
            Kind::Expirable => client.expirable_semaphore(name).add_permits(n as i64).await,
        }
        .expect("add permits");
    }

    async fn available(self, client: &Client, name: &str) -> i64 {
        match self {
            Kind::Classic => client.semaphore(name).available_permits().await,
            Kind::Expirable => client.expirable_semaphore(name).available_permits().await,
        }
        .expect("available_permits")
    }

    /// An acquire of one permit, waiting at most `wait` (`None`: for ever).
    fn acquire(
        self,
        client: &Client,
        name: &str,
        wait: Option<Duration>,
    ) -> impl Future<Output = Result<Option<Permit>>> + Send + 'static {
        let (client, name) = (client.clone(), name.to_owned());
        async move {
            Ok(match (self, wait) {
                (Kind::Classic, None) => {
                    Some(Permit::Classic(client.semaphore(&name).acquire().await?))
                }
                (Kind::Classic, Some(wait)) => client
                    .semaphore(&name)
                    .try_acquire_for(wait)
                    .await?
                    .map(Permit::Classic),
                (Kind::Expirable, None) => Some(Permit::Expirable(
                    client.expirable_semaphore(&name).acquire().await?,
                )),
                (Kind::Expirable, Some(wait)) => client
                    .expirable_semaphore(&name)
                    .try_acquire_for(wait)
                    .await?
                    .map(Permit::Expirable),
            })
        }
    }
}

#[derive(Debug)]
enum Permit {
    Classic(SemaphorePermit),
    Expirable(ExpirablePermit),
}

impl Permit {
    async fn release(self) -> Result<()> {
        match self {
            Permit::Classic(p) => p.release().await,
            Permit::Expirable(p) => p.release().await,
        }
    }
}

/// The channels registered as waiting, longest waiting first.
fn registered(server: &RedisServer, waiters: &str) -> Vec<String> {
    strings(&server.cmd(&["ZRANGE", waiters, "0", "-1"]))
}

/// Polls `future` for `for_at_least` (or until it completes), then leaves it where it is: a
/// task that stops being scheduled, like one in a stopped process.
async fn poll_for<F: Future + Unpin>(future: &mut F, for_at_least: Duration) -> Option<F::Output> {
    tokio::time::timeout(for_at_least, future).await.ok()
}

// ---------------------------------------------------------------------------------------------
// 1. Commands per operation.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_operation_runs_only_the_commands_its_guarantees_need() {
    let server = RedisServer::start();
    let c = client(&server).await;
    const OPS: u64 = 100;

    let sem = c.semaphore("hot-sem");
    assert!(sem.try_set_permits(4).await.unwrap());
    let classic = commands_per_op(&server, OPS, || async {
        for _ in 0..OPS {
            sem.acquire().await.unwrap().release().await.unwrap();
        }
    })
    .await;
    show("semaphore acquire + release", &classic);

    let xsem = c.expirable_semaphore("hot-xsem");
    assert!(xsem.try_set_permits(4).await.unwrap());
    // A permit is a watchdog hold: the client's lost-notice SUBSCRIBE, made in the background
    // with its first one, must not land in the counted run.
    let permit = xsem.acquire().await.unwrap();
    common::lost_notices_subscribed(&server, &c).await;
    permit.release().await.unwrap();
    let expirable = commands_per_op(&server, OPS, || async {
        for _ in 0..OPS {
            xsem.acquire().await.unwrap().release().await.unwrap();
        }
    })
    .await;
    show("expirable semaphore acquire + release", &expirable);

    let latch = c.count_down_latch("hot-latch");
    // Armed for the warm-up run and the measured one, and left armed.
    assert!(latch.try_set_count(3 * OPS).await.unwrap());
    let count_down = commands_per_op(&server, OPS, || async {
        for _ in 0..OPS {
            latch.count_down().await.unwrap();
        }
    })
    .await;
    show("latch count_down (it stays armed)", &count_down);

    assert!(latch.delete().await.unwrap());
    let cycle = commands_per_op(&server, OPS, || async {
        for _ in 0..OPS {
            assert!(latch.try_set_count(1).await.unwrap());
            latch.count_down().await.unwrap();
        }
    })
    .await;
    show("latch try_set_count(1) + count_down (opens it)", &cycle);

    let open_wait = commands_per_op(&server, OPS, || async {
        for _ in 0..OPS {
            latch.wait().await.unwrap();
        }
    })
    .await;
    show("latch wait on an open latch", &open_wait);

    // One script each, and no more commands inside than the guarantees need: a semaphore
    // read in one MGET, no record per release, no PUBLISH without waiters.
    let scripts = |per_op: &BTreeMap<String, f64>| per_op.get("evalsha").copied();
    for (what, per_op, ops, most) in [
        ("semaphore cycle", &classic, 2.0, 9.0),
        ("expirable cycle", &expirable, 2.0, 11.0),
        ("count_down", &count_down, 1.0, 4.0),
        ("arm + opening count_down", &cycle, 2.0, 12.0),
        ("wait on an open latch", &open_wait, 1.0, 2.0),
    ] {
        assert_eq!(scripts(per_op), Some(ops), "{what}: {per_op:?}");
        assert!(total(per_op) <= most + 0.001, "{what}: {per_op:?}");
        assert!(
            !per_op.contains_key("publish"),
            "{what} published: {per_op:?}"
        );
    }
    // Nothing per operation is left behind: the two semaphores' counts (and the classic
    // one's generation), the latch's last opened arming.
    assert_eq!(
        int(&server, &["DBSIZE"]),
        4,
        "{:?}",
        strings(&server.cmd(&["KEYS", "*"]))
    );
}

/// A first try, which registers nothing, leaves off what only registering reads, since Redis
/// spends time on every key and argument sent: the semaphore's acquire sends 3 keys and 1
/// argument (not 4 and 4), the expirable semaphore's 4 keys and 2 arguments (not 4 and 5).
/// A try that registers its client still sends the whole of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_try_sends_only_the_keys_and_arguments_its_script_reads() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let sem = c.semaphore("short-sem");
    assert!(sem.try_set_permits(1).await.unwrap());
    let xsem = c.expirable_semaphore("short-xsem");
    assert!(xsem.try_set_permits(1).await.unwrap());
    // Warm up: Redis knows the scripts (a first EVALSHA of each would fail, and be logged).
    sem.acquire().await.unwrap().release().await.unwrap();
    xsem.acquire().await.unwrap().release().await.unwrap();
    common::log_every_request(&server);
    sem.acquire().await.unwrap().release().await.unwrap();
    xsem.acquire().await.unwrap().release().await.unwrap();
    assert_eq!(
        common::script_requests(&server),
        vec![(3, 1), (4, 1), (4, 2), (3, 1)],
        "(keys, arguments) of each request: semaphore acquire and release, then expirable"
    );
    // Contended: the waiter's first try is short, its registering try whole.
    let held = sem.acquire().await.unwrap();
    let other = client(&server).await;
    server.cmd(&["SLOWLOG", "RESET"]);
    let waiting = other.semaphore("short-sem");
    let task = tokio::spawn(async move { waiting.acquire().await.map(|_| ()) });
    eventually("a registering try", SETTLE, || {
        common::script_requests(&server).contains(&(4, 4))
    })
    .await;
    assert_eq!(
        common::script_requests(&server).first(),
        Some(&(3, 1)),
        "the first try"
    );
    held.release().await.unwrap();
    task.await.unwrap().unwrap();
}

// ---------------------------------------------------------------------------------------------
// 2. No PUBLISH when nobody waits.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_published_when_nobody_waits() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let other = client(&server).await;
    for kind in [Kind::Classic, Kind::Expirable] {
        let name = format!("quiet-{kind:?}");
        server.cmd(&["CONFIG", "RESETSTAT"]);
        kind.set(&c, &name, 2).await;
        kind.add(&c, &name, 3).await;
        for _ in 0..5 {
            let permit = kind.acquire(&c, &name, None).await.unwrap().unwrap();
            permit.release().await.unwrap();
        }
        // A waiter that gave up (its wait ran out) is withdrawn: the release after it
        // publishes nothing either.
        let all: Vec<Permit> = {
            let mut all = Vec::new();
            while let Some(p) = kind.acquire(&c, &name, Some(Duration::ZERO)).await.unwrap() {
                all.push(p);
            }
            all
        };
        assert!(kind
            .acquire(&other, &name, Some(ms(300)))
            .await
            .unwrap()
            .is_none());
        eventually("the waiter that gave up is withdrawn", SETTLE, || {
            registered(&server, &kind.waiters(&name)).is_empty()
        })
        .await;
        for permit in all {
            permit.release().await.unwrap();
        }
        assert_eq!(publishes(&server), 0, "{kind:?}");
        match kind {
            Kind::Classic => assert!(c.semaphore(&name).delete().await.unwrap()),
            Kind::Expirable => assert!(c.expirable_semaphore(&name).delete().await.unwrap()),
        }
        assert_eq!(publishes(&server), 0, "{kind:?} delete");
    }

    // The latch: armed, counted down to open, deleted; and after a waiter that gave up.
    server.cmd(&["CONFIG", "RESETSTAT"]);
    let latch = c.count_down_latch("quiet-latch");
    assert!(latch.try_set_count(2).await.unwrap());
    latch.count_down().await.unwrap();
    latch.count_down().await.unwrap();
    assert!(latch.try_set_count(1).await.unwrap());
    assert!(latch.delete().await.unwrap());
    assert!(latch.try_set_count(1).await.unwrap());
    assert!(!other
        .count_down_latch("quiet-latch")
        .wait_for(ms(300))
        .await
        .unwrap());
    eventually("the latch waiter that gave up is withdrawn", SETTLE, || {
        !common::exists(&server, &keys::latch("quiet-latch").waiters)
    })
    .await;
    latch.count_down().await.unwrap();
    assert_eq!(publishes(&server), 0, "latch");

    // With a waiter, an opening publishes once.
    assert!(latch.try_set_count(1).await.unwrap());
    let waiter = {
        let latch = other.count_down_latch("quiet-latch");
        tokio::spawn(async move { latch.wait().await })
    };
    eventually("the latch waiter is registered", SETTLE, || {
        common::exists(&server, &keys::latch("quiet-latch").waiters)
    })
    .await;
    latch.count_down().await.unwrap();
    tokio::time::timeout(SETTLE, waiter)
        .await
        .expect("the waiter returns")
        .unwrap()
        .unwrap();
    assert_eq!(publishes(&server), 1, "one opening with a waiter");
}

// ---------------------------------------------------------------------------------------------
// 3. One wake-up per released permit, however many clients wait.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_wake_up_per_released_permit_whatever_the_number_of_waiting_clients() {
    let server = RedisServer::start();
    let releaser = client(&server).await;
    for kind in [Kind::Classic, Kind::Expirable] {
        for clients in [4usize, 8] {
            let name = format!("one-each-{kind:?}-{clients}");
            kind.set(&releaser, &name, 0).await;
            let mut waiting = Vec::new();
            let mut tasks = Vec::new();
            for _ in 0..clients {
                let c = client(&server).await;
                tasks.push(tokio::spawn(kind.acquire(&c, &name, None)));
                waiting.push(c);
            }
            eventually("every client is registered", SETTLE, || {
                registered(&server, &kind.waiters(&name)).len() == clients
            })
            .await;
            server.cmd(&["CONFIG", "RESETSTAT"]);
            kind.add(&releaser, &name, 1).await;
            eventually("one waiter gets the permit", SETTLE, || {
                tasks.iter().filter(|t| t.is_finished()).count() == 1
            })
            .await;
            assert_eq!(
                publishes(&server),
                1,
                "{kind:?}, {clients} clients, 1 permit"
            );
            kind.add(&releaser, &name, 2).await;
            eventually("two more get a permit", SETTLE, || {
                tasks.iter().filter(|t| t.is_finished()).count() == 3
            })
            .await;
            assert_eq!(
                publishes(&server),
                3,
                "{kind:?}, {clients} clients, then 2 permits"
            );
            // Whoever is left gets the rest; nothing more is published than permits freed.
            kind.add(&releaser, &name, clients as u64).await;
            let permits = join_all(tasks).await;
            assert!(publishes(&server) <= 3 + clients as u64);
            for permit in permits {
                permit.unwrap().unwrap().release().await.unwrap();
            }
            assert_eq!(
                kind.available(&releaser, &name).await,
                3 + clients as i64,
                "{kind:?}"
            );
            assert!(registered(&server, &kind.waiters(&name)).is_empty());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 4. Contended runs: scripts per acquisition and fairness.

/// `clients` clients of `tasks` tasks each take one permit of `name` (1 permit), hold it
/// `hold` and give it back, for `run_for`. Returns each client's tasks' acquisitions and
/// the scripts Redis ran.
async fn contended_run(
    server: &RedisServer,
    kind: Kind,
    clients: usize,
    tasks: usize,
    run_for: Duration,
) -> (Vec<Vec<u64>>, u64) {
    let name = format!("contended-{kind:?}-{clients}");
    let mut all = Vec::new();
    for _ in 0..clients {
        all.push(client(server).await);
    }
    kind.set(&all[0], &name, 1).await;
    server.cmd(&["CONFIG", "RESETSTAT"]);
    let stop = Instant::now() + run_for;
    let mut handles = Vec::new();
    for c in &all {
        let mut mine = Vec::new();
        for _ in 0..tasks {
            let (c, name) = (c.clone(), name.clone());
            mine.push(tokio::spawn(async move {
                let mut n = 0u64;
                while Instant::now() < stop {
                    let permit = kind.acquire(&c, &name, None).await.unwrap().unwrap();
                    tokio::time::sleep(ms(1)).await;
                    permit.release().await.unwrap();
                    n += 1;
                }
                n
            }));
        }
        handles.push(mine);
    }
    let mut counts = Vec::new();
    for mine in handles {
        counts.push(join_all(mine).await);
    }
    (counts, server.command_calls("evalsha"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contended_acquisitions_cost_the_same_scripts_with_two_or_eight_clients_and_starve_none() {
    let server = RedisServer::start();
    for kind in [Kind::Classic, Kind::Expirable] {
        for clients in [2usize, 8] {
            let (counts, scripts) =
                contended_run(&server, kind, clients, 4, Duration::from_millis(2500)).await;
            let per_client: Vec<u64> = counts.iter().map(|c| c.iter().sum()).collect();
            let acquisitions: u64 = per_client.iter().sum();
            let per_acquisition = scripts as f64 / acquisitions as f64;
            let (least, most) = (
                *per_client.iter().min().unwrap(),
                *per_client.iter().max().unwrap(),
            );
            println!(
                "{kind:?}, {clients} clients x 4 tasks on 1 permit: {acquisitions} \
                 acquisitions, {per_acquisition:.2} scripts each; per client {per_client:?}, \
                 per task {counts:?}"
            );
            // An acquisition: the woken client's acquire and the release; for the expirable
            // semaphore also the next local head asking (an expired lease frees permits
            // without a wake-up). The plain semaphore's next local head, handed over with
            // no permit left, waits for its wake-up without asking (asking would make it
            // about 3). A release that woke every client's head would cost about 4 scripts
            // with 2 clients and 10 with 8.
            let bound = match kind {
                Kind::Classic => 2.5,
                Kind::Expirable => 4.0,
            };
            assert!(
                per_acquisition <= bound,
                "{kind:?}, {clients} clients: {per_acquisition:.2} scripts per acquisition"
            );
            // Clients take turns: without turns, the least served of 8 clients may get a
            // fiftieth of what the most served gets.
            assert!(
                least as f64 >= 0.5 * most as f64,
                "{kind:?}, {clients} clients: a client starved: {per_client:?}"
            );
            assert!(
                counts.iter().flatten().all(|&n| n >= 1),
                "{kind:?}, {clients} clients: a task never got in: {counts:?}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 5. A waiter that gives up passes its wake-up on; stopped and vanished clients.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_gives_up_after_its_wake_up_passes_it_on() {
    let server = RedisServer::start();
    let releaser = client(&server).await;
    for kind in [Kind::Classic, Kind::Expirable] {
        let name = format!("pass-on-{kind:?}");
        kind.set(&releaser, &name, 0).await;
        let a = client(&server).await;
        let b = client(&server).await;
        // A waits first, polled only until it is registered: then it is left alone, like a
        // task that is not scheduled. B waits behind it, on another client.
        let mut first = Box::pin(kind.acquire(&a, &name, None));
        let deadline = Instant::now() + SETTLE;
        while registered(&server, &kind.waiters(&name)) != [kind.channel(&name, &a)] {
            assert!(Instant::now() < deadline, "A never registered");
            assert!(poll_for(&mut first, ms(10)).await.is_none());
        }
        let second = tokio::spawn(kind.acquire(&b, &name, None));
        eventually("B is registered behind A", SETTLE, || {
            registered(&server, &kind.waiters(&name))
                == [kind.channel(&name, &a), kind.channel(&name, &b)]
        })
        .await;
        // The permit's wake-up goes to A, which does not act on it.
        server.cmd(&["CONFIG", "RESETSTAT"]);
        kind.add(&releaser, &name, 1).await;
        assert_eq!(publishes(&server), 1);
        assert_eq!(
            registered(&server, &kind.waiters(&name)),
            [kind.channel(&name, &b)]
        );
        // A gives up: its client withdraws and passes the wake-up on, so B gets in by
        // message, well before its own re-check (at most a second after it registered).
        let gave_up = Instant::now();
        drop(first);
        let permit = tokio::time::timeout(SETTLE, second)
            .await
            .expect("B gets the permit")
            .unwrap()
            .unwrap()
            .unwrap();
        let after = gave_up.elapsed();
        println!("{kind:?}: B got in {after:?} after A gave up");
        assert!(
            after < RECHECK / 2,
            "{kind:?}: B got in {after:?} after A gave up"
        );
        assert_eq!(
            publishes(&server),
            2,
            "the release's and the passed-on wake-up"
        );
        permit.release().await.unwrap();
        assert!(registered(&server, &kind.waiters(&name)).is_empty());
        assert_eq!(kind.available(&releaser, &name).await, 1);
        common::assert_idle(&[&a, &b]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_client_costs_the_next_one_at_most_the_recheck_and_a_vanished_one_nothing() {
    let server = RedisServer::start();
    let releaser = client(&server).await;
    for kind in [Kind::Classic, Kind::Expirable] {
        // A client that is alive but cannot act: registered first, its channel subscribed
        // by a connection that never answers the message.
        let name = format!("stopped-{kind:?}");
        kind.set(&releaser, &name, 0).await;
        let stopped_channel = kind.wake_channels(&name).of("stopped");
        let mut stopped = server.connection();
        let mut pubsub = stopped.as_pubsub();
        pubsub.subscribe(&stopped_channel).unwrap();
        server.cmd(&["ZADD", &kind.waiters(&name), "1", &stopped_channel]);
        let b = client(&server).await;
        let waiter = tokio::spawn(kind.acquire(&b, &name, None));
        eventually("B is registered behind the stopped client", SETTLE, || {
            registered(&server, &kind.waiters(&name)).len() == 2
        })
        .await;
        let released = Instant::now();
        kind.add(&releaser, &name, 1).await;
        let permit = tokio::time::timeout(SETTLE, waiter)
            .await
            .expect("B gets the permit")
            .unwrap()
            .unwrap()
            .unwrap();
        let after = released.elapsed();
        println!("{kind:?}: behind a stopped client, B got in {after:?} after the release");
        assert!(after < RECHECK + ms(1000), "{kind:?}: {after:?}");
        permit.release().await.unwrap();
        drop(pubsub);

        // A vanished client (nobody listens on its channel): skipped at once.
        let name = format!("vanished-{kind:?}");
        kind.set(&releaser, &name, 0).await;
        let vanished = kind.wake_channels(&name).of("vanished");
        server.cmd(&["ZADD", &kind.waiters(&name), "1", &vanished]);
        let waiter = tokio::spawn(kind.acquire(&b, &name, None));
        eventually("B is registered behind the vanished client", SETTLE, || {
            registered(&server, &kind.waiters(&name)).len() == 2
        })
        .await;
        // B's last look was when it registered: its re-check is about a second away.
        let released = Instant::now();
        kind.add(&releaser, &name, 1).await;
        let permit = tokio::time::timeout(SETTLE, waiter)
            .await
            .expect("B gets the permit")
            .unwrap()
            .unwrap()
            .unwrap();
        let after = released.elapsed();
        println!("{kind:?}: behind a vanished client, B got in {after:?} after the release");
        assert!(after < RECHECK / 2, "{kind:?}: {after:?}");
        assert!(registered(&server, &kind.waiters(&name)).is_empty());
        permit.release().await.unwrap();
    }
}

// ---------------------------------------------------------------------------------------------
// 6. Give-backs without records: applied once when their reply is lost.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_whose_reply_was_lost_is_applied_once_and_reported_released() {
    let server = RedisServer::start();
    let proxy = ChaosProxy::start(&server);
    let c = Client::builder(proxy.url())
        .command_timeout(Duration::from_secs(3))
        .build()
        .await
        .expect("connect through the proxy");
    let direct = client(&server).await;
    for kind in [Kind::Classic, Kind::Expirable] {
        let name = format!("lost-reply-{kind:?}");
        kind.set(&direct, &name, 3).await;
        // A cycle first, so that Redis has the scripts (a first EVALSHA answers NOSCRIPT).
        let permit = kind.acquire(&direct, &name, None).await.unwrap().unwrap();
        permit.release().await.unwrap();
        let permit = kind.acquire(&c, &name, None).await.unwrap().unwrap();
        assert_eq!(kind.available(&direct, &name).await, 2);
        // The release runs in Redis, its reply is lost; then the connection breaks, and the
        // client sends it again on another: the repeat finds the permit gone.
        proxy.drop_replies(true);
        let scripts = server.command_calls("evalsha");
        let release = tokio::spawn(permit.release());
        eventually("the release ran", SETTLE, || {
            server.command_calls("evalsha") > scripts
        })
        .await;
        // It did return the permit.
        assert_eq!(kind.available(&direct, &name).await, 3, "{kind:?}");
        assert!(
            proxy.drop_replies(false) >= 1,
            "the connection that lost the reply"
        );
        let outcome = tokio::time::timeout(SETTLE, release)
            .await
            .expect("the release returns")
            .unwrap();
        assert!(
            outcome.is_ok(),
            "{kind:?}: the repeat's answer: {outcome:?}"
        );
        assert!(
            server.command_calls("evalsha") >= scripts + 3,
            "{kind:?}: the release was sent again"
        );
        // Once, and nothing kept for it.
        assert_eq!(kind.available(&direct, &name).await, 3, "{kind:?}");
        assert_eq!(
            strings(&server.cmd(&["KEYS", &kind.records(&name).of("*")])),
            Vec::<String>::new(),
            "{kind:?}: a record was left"
        );
    }

    // release_by_id likewise: its repeat finds the permit gone, and says it was returned.
    let name = "lost-reply-by-id";
    Kind::Expirable.set(&direct, name, 1).await;
    let held = direct
        .expirable_semaphore(name)
        .acquire_with_lease(Duration::from_secs(60))
        .await
        .unwrap();
    let id = held.id().to_owned();
    proxy.drop_replies(true);
    let scripts = server.command_calls("evalsha");
    let by_id = {
        let sem = c.expirable_semaphore(name);
        tokio::spawn(async move { sem.release_by_id(&id).await })
    };
    eventually("release_by_id ran", SETTLE, || {
        server.command_calls("evalsha") > scripts
    })
    .await;
    assert_eq!(Kind::Expirable.available(&direct, name).await, 1);
    assert!(proxy.drop_replies(false) >= 1);
    let returned = tokio::time::timeout(SETTLE, by_id)
        .await
        .expect("release_by_id returns")
        .unwrap();
    assert!(matches!(returned, Ok(true)), "release_by_id: {returned:?}");
    assert!(server.command_calls("evalsha") >= scripts + 3, "sent again");
    assert_eq!(Kind::Expirable.available(&direct, name).await, 1, "once");
    assert!(matches!(held.release().await, Err(Error::NotOwner)));
    common::assert_idle(&[&c, &direct]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_count_down_retried_after_its_latch_opened_and_was_re_armed_is_not_applied_again() {
    let server = RedisServer::start();
    let proxy = ChaosProxy::start(&server);
    let c = Client::builder(proxy.url())
        .command_timeout(Duration::from_secs(3))
        .build()
        .await
        .expect("connect through the proxy");
    let direct = client(&server).await;
    let latch = c.count_down_latch("retried");
    let other = direct.count_down_latch("retried");
    assert!(other.try_set_count(2).await.unwrap());
    other.count_down().await.unwrap();
    // The last count-down opens the latch in Redis; its reply is lost.
    proxy.drop_replies(true);
    let scripts = server.command_calls("evalsha");
    let count_down = tokio::spawn(async move { latch.count_down().await });
    eventually("the count-down ran", SETTLE, || {
        server.command_calls("evalsha") > scripts
    })
    .await;
    assert_eq!(other.count().await.unwrap(), 0, "it opened the latch");
    // Re-armed before the retry lands.
    assert!(other.try_set_count(3).await.unwrap());
    assert!(proxy.drop_replies(false) >= 1);
    tokio::time::timeout(SETTLE, count_down)
        .await
        .expect("the count-down returns")
        .unwrap()
        .expect("count_down");
    assert!(
        server.command_calls("evalsha") >= scripts + 4,
        "the count-down was sent again"
    );
    assert_eq!(
        other.count().await.unwrap(),
        3,
        "the retry counted the new arming down"
    );
    common::assert_idle(&[&c, &direct]);
}

/// A task of a client that gets a permit while more of its tasks wait hands the turn to the
/// next of them without a request only when fewer permits are left than that one asks for:
/// with two permits freed at once, the client's second waiting task takes the permit left
/// at once, instead of sitting out the one-second re-check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_handed_the_turn_only_when_no_permit_is_left_for_it() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    Kind::Classic.set(&a, "left", 2).await;
    let held = a.semaphore("left").acquire_many(2).await.unwrap();
    let (got_tx, mut got) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let (sem, got_tx) = (b.semaphore("left"), got_tx.clone());
        tasks.push(tokio::spawn(async move {
            let permit = sem.acquire().await.unwrap();
            let _ = got_tx.send(());
            tokio::time::sleep(Duration::from_secs(5)).await;
            permit.release().await.unwrap();
        }));
    }
    let channel = Kind::Classic.channel("left", &b);
    eventually("the three wait", Duration::from_secs(10), || {
        b.stats().contended_waits == 3
            && registered(&server, &Kind::Classic.waiters("left")) == [channel.clone()]
    })
    .await;
    held.release().await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), got.recv())
        .await
        .unwrap();
    // Well under the one-second re-check a handed-over wait would sit out.
    tokio::time::timeout(ms(700), got.recv())
        .await
        .expect("the second waiter waited though a permit was left");
    assert_eq!(Kind::Classic.available(&b, "left").await, 0);
    for task in tasks {
        task.abort();
    }
}

/// A waiter handed the turn (its sibling took the last permit) still re-checks within
/// `RECHECK` when the wake-up it waits for never comes: here its client's registration is
/// lost (as in a failover), so the permit given back wakes nobody.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_over_waiter_re_checks_within_a_second_when_no_wake_up_comes() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    Kind::Classic.set(&a, "lost", 1).await;
    let held = a.semaphore("lost").acquire().await.unwrap();
    let (got_tx, mut got) = tokio::sync::mpsc::unbounded_channel();
    let (release_tx, release) = tokio::sync::oneshot::channel::<()>();
    let first = {
        let (sem, got_tx) = (b.semaphore("lost"), got_tx.clone());
        tokio::spawn(async move {
            let permit = sem.acquire().await.unwrap();
            let _ = got_tx.send(Instant::now());
            release.await.unwrap();
            permit.release().await.unwrap();
        })
    };
    let waiters = Kind::Classic.waiters("lost");
    eventually(
        "the first waiter registered",
        Duration::from_secs(10),
        || registered(&server, &waiters).len() == 1,
    )
    .await;
    let second = {
        let sem = b.semaphore("lost");
        tokio::spawn(async move {
            let permit = sem.acquire().await.unwrap();
            let _ = got_tx.send(Instant::now());
            permit.release().await.unwrap();
        })
    };
    eventually("the second waiter queued", Duration::from_secs(10), || {
        b.stats().contended_waits == 2
    })
    .await;
    held.release().await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), got.recv())
        .await
        .unwrap();
    // The grant kept the client registered for the second waiter; lose that registration.
    assert_eq!(registered(&server, &waiters).len(), 1);
    server.cmd(&["DEL", &waiters]);
    release_tx.send(()).unwrap();
    first.await.unwrap();
    let released = Instant::now();
    let taken = tokio::time::timeout(Duration::from_secs(5), got.recv())
        .await
        .expect("the handed-over waiter slept past its re-check")
        .unwrap();
    println!("taken {:?} after the release", taken - released);
    second.await.unwrap();
}
