//! Leader election against a real `redis-server`: one leader at a time (checked by a fenced
//! resource), strictly increasing terms, hand-over on resignation, leaders in processes of
//! their own that are killed (`SIGKILL`) or paused (`SIGSTOP`), `observe()` through changes and
//! a killed subscriber connection, waiters coalesced per client, and bad input.
//!
//! The cancellation sweep of `campaign` is in `cancellation.rs`, the cluster test in
//! `cluster.rs`. Every test starts its own server, so the tests run in parallel; time bounds
//! are generous (for a small, loaded machine) and far below the leases they are compared with.

mod common;

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{
    assert_idle, assert_invalid, assert_wrong_type, client, client_with_watchdog, eventually,
    join_all, ms, zcard,
};
use futures_util::{Stream, StreamExt};
use redisync::prelude::*;
use redisync_test_harness::{Holder, RedisServer};

/// The holder binary of the harness crate.
const HOLDER: &str = env!("CARGO_BIN_EXE_holder");

/// How long a condition that should hold "soon" may take before the test fails.
const SETTLE: Duration = Duration::from_secs(10);

fn leader_key(name: &str) -> String {
    common::keys::election(name).leader
}

fn waiters_key(name: &str) -> String {
    common::keys::election(name).waiters
}

fn wake_channel(name: &str, client: &Client) -> String {
    common::keys::election(name).wake_channels.of(client.id())
}

fn changes_channel(name: &str) -> String {
    common::keys::election(name).changes
}

/// A resource that accepts a write only with a term at least the highest it has seen.
#[derive(Debug, Default)]
struct Fenced {
    highest: u64,
    accepted: Vec<u64>,
    refused: Vec<u64>,
}

impl Fenced {
    fn write(&mut self, term: u64) -> bool {
        if term < self.highest {
            self.refused.push(term);
            return false;
        }
        self.highest = term;
        self.accepted.push(term);
        true
    }
}

type Observed = Pin<Box<dyn Stream<Item = Result<Option<Leader>>> + Send>>;

/// The next item of an observer, which must come within [`SETTLE`].
async fn next(observer: &mut Observed, what: &str) -> Option<Leader> {
    match tokio::time::timeout(SETTLE, observer.next()).await {
        Ok(Some(Ok(leader))) => leader,
        Ok(Some(Err(err))) => panic!("{what}: the observer failed: {err}"),
        Ok(None) => panic!("{what}: the observer ended"),
        Err(_) => panic!("{what}: the observer saw no change within {SETTLE:?}"),
    }
}

fn leader(value: &str, term: u64) -> Option<Leader> {
    Some(Leader {
        value: value.to_owned(),
        term,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_clients_take_turns_one_leader_at_a_time_with_increasing_terms() {
    let server = RedisServer::start();
    let name = "turns";
    let fenced = Arc::new(Mutex::new(Fenced::default()));
    let leading = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::new();
    let mut tasks = Vec::new();
    for i in 0..3 {
        let c = client(&server).await;
        clients.push(c.clone());
        let (fenced, leading) = (fenced.clone(), leading.clone());
        tasks.push(tokio::spawn(async move {
            let election = c.leader_election(name);
            let value = format!("candidate-{i}");
            for _ in 0..6 {
                let leadership = election.campaign(value.as_str()).await.unwrap();
                assert_eq!(
                    leading.fetch_add(1, Ordering::SeqCst),
                    0,
                    "two leaders at once"
                );
                let term = leadership.term();
                assert!(fenced.lock().unwrap().write(term), "term {term} refused");
                assert_eq!(
                    election.leader().await.unwrap(),
                    leader(&value, term),
                    "leader() names the leader"
                );
                tokio::time::sleep(ms(2)).await;
                assert!(fenced.lock().unwrap().write(term), "a second write");
                leading.fetch_sub(1, Ordering::SeqCst);
                leadership.resign().await.unwrap();
            }
        }));
    }
    join_all(tasks).await;
    let (refused, accepted) = {
        let fenced = fenced.lock().unwrap();
        (fenced.refused.clone(), fenced.accepted.clone())
    };
    assert!(refused.is_empty(), "refused {refused:?}");
    let terms: Vec<u64> = accepted.chunks(2).map(|pair| pair[0]).collect();
    assert_eq!(terms.len(), 18);
    assert!(
        terms.windows(2).all(|w| w[0] < w[1]),
        "terms strictly increase: {terms:?}"
    );
    assert!(!common::exists(&server, &leader_key(name)));
    eventually("no waiter is left registered", SETTLE, || {
        zcard(&server, &waiters_key(name)) == 0
    })
    .await;
    let refs: Vec<&Client> = clients.iter().collect();
    eventually("the clients are idle", SETTLE, || {
        clients
            .iter()
            .all(|c| c.local_state() == Default::default())
    })
    .await;
    assert_idle(&refs);
    println!("3 clients x 6 campaigns: terms {terms:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resign_hands_over_at_once_not_after_the_lease() {
    let server = RedisServer::start();
    let name = "handover";
    let lease = Duration::from_secs(30);
    let a = client_with_watchdog(&server, lease).await;
    let b = client_with_watchdog(&server, lease).await;
    let first = a.leader_election(name).campaign("a").await.unwrap();
    let election_b = b.leader_election(name);
    let waiting = tokio::spawn(async move {
        let leadership = election_b.campaign("b").await;
        (leadership, Instant::now())
    });
    eventually("b waits, registered and subscribed", SETTLE, || {
        server.numsub(&wake_channel(name, &b)) == 1 && zcard(&server, &waiters_key(name)) == 1
    })
    .await;
    let resigned_at = Instant::now();
    let first_term = first.term();
    first.resign().await.unwrap();
    let (second, led_at) = tokio::time::timeout(SETTLE, waiting)
        .await
        .expect("b leads after a's resignation")
        .unwrap();
    let second = second.unwrap();
    let handover = led_at.duration_since(resigned_at);
    assert!(second.term() > first_term);
    assert!(
        handover < lease / 6,
        "the hand-over took {handover:?}, a lease is {lease:?}"
    );
    assert_eq!(zcard(&server, &waiters_key(name)), 0, "b left the registry");
    second.resign().await.unwrap();
    println!("resign -> next leader: {handover:?} (lease {lease:?})");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leader_process_is_replaced_within_its_lease() {
    let server = RedisServer::start();
    let url = server.url();
    let name = "killed";
    let watchdog = ms(600);
    let margin = ms(1400);
    let mut holder = Holder::spawn(HOLDER, &["leader", &url, name, "--watchdog-ms", "600"]);
    let term: u64 = holder.acquired(SETTLE).await.parse().unwrap();
    let c = client(&server).await;
    let election = c.leader_election(name);
    assert_eq!(
        election.leader().await.unwrap(),
        leader(&holder.pid().to_string(), term),
        "the holder leads and advertises its pid"
    );
    let candidate = election.clone();
    let waiting = tokio::spawn(async move {
        let leadership = candidate.campaign("successor").await;
        (leadership, Instant::now())
    });
    eventually("the candidate is subscribed", SETTLE, || {
        server.numsub(&wake_channel(name, &c)) == 1
    })
    .await;
    holder.sigkill();
    let killed_at = Instant::now();
    let (leadership, led_at) = tokio::time::timeout(SETTLE, waiting)
        .await
        .expect("the candidate replaces the killed leader")
        .unwrap();
    let leadership = leadership.unwrap();
    let replaced_after = led_at.duration_since(killed_at);
    assert!(leadership.term() > term);
    assert!(
        replaced_after <= watchdog + margin,
        "replaced only {replaced_after:?} after SIGKILL (lease {watchdog:?})"
    );
    leadership.resign().await.unwrap();
    println!("killed leader replaced {replaced_after:?} after SIGKILL (lease {watchdog:?})");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_leader_learns_it_lost_and_its_stale_term_is_refused() {
    let server = RedisServer::start();
    let url = server.url();
    let name = "paused";
    let mut holder = Holder::spawn(HOLDER, &["leader", &url, name, "--watchdog-ms", "600"]);
    let first: u64 = holder.acquired(SETTLE).await.parse().unwrap();
    let mut fenced = Fenced::default();
    holder.send("write").unwrap();
    let write = holder.wait_line("write ", SETTLE).await.expect("write");
    assert_eq!(write, format!("{first} false"));
    assert!(fenced.write(first));

    holder.sigstop();
    let c = client(&server).await;
    let election = c.leader_election(name);
    let second = election
        .campaign_for("successor", SETTLE)
        .await
        .unwrap()
        .expect("the paused leader's lease ends within its 600 ms watchdog timeout");
    assert!(second.term() > first);
    assert!(fenced.write(second.term()));
    tokio::time::sleep(ms(300)).await;

    holder.sigcont();
    assert!(
        holder.wait_line("lost", SETTLE).await.is_some(),
        "the resumed leader never learned it lost: {:?}",
        holder.transcript()
    );
    holder.send("write").unwrap();
    let write = holder.wait_line("write ", SETTLE).await.expect("write");
    assert_eq!(write, format!("{first} true"));
    assert!(!fenced.write(first), "the stale term must be refused");
    assert_eq!(fenced.refused, vec![first]);
    holder.send("release").unwrap();
    let release = holder.wait_line("release", SETTLE).await.expect("release");
    assert!(
        release.starts_with("-error not-owner"),
        "the deposed leader's resignation: release{release}"
    );
    assert!(holder.wait_exit(SETTLE).await.is_some());
    assert_eq!(
        election.leader().await.unwrap(),
        leader("successor", second.term()),
        "the deposed leader's resignation left the new leader in place"
    );
    second.resign().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observe_sees_every_change_in_order_also_after_its_connection_is_killed() {
    let server = RedisServer::start();
    let name = "observed";
    let watcher = client(&server).await;
    let a = client(&server).await;
    let b = client(&server).await;
    let mut observer: Observed = Box::pin(watcher.leader_election(name).observe());
    assert_eq!(
        next(&mut observer, "first item").await,
        None,
        "nobody leads"
    );
    eventually("the observer is subscribed", SETTLE, || {
        server.numsub(&changes_channel(name)) == 1
    })
    .await;

    let first = a.leader_election(name).campaign("a").await.unwrap();
    let t1 = first.term();
    assert_eq!(next(&mut observer, "win").await, leader("a", t1));
    first.proclaim("a:9090").await.unwrap();
    assert_eq!(next(&mut observer, "proclaim").await, leader("a:9090", t1));
    first.resign().await.unwrap();
    assert_eq!(next(&mut observer, "resign").await, None);
    let second = b.leader_election(name).campaign("b").await.unwrap();
    let t2 = second.term();
    assert!(t2 > t1);
    assert_eq!(next(&mut observer, "second win").await, leader("b", t2));

    // The subscriber connection is killed, and the change made at once, before the observer
    // can have subscribed again: the re-read after the reconnect catches it.
    let killed = common::int(&server, &["CLIENT", "KILL", "TYPE", "pubsub"]);
    assert!(killed >= 1, "killed {killed} pub/sub connections");
    second.proclaim("b:9090").await.unwrap();
    assert_eq!(
        next(&mut observer, "proclaim after the kill").await,
        leader("b:9090", t2)
    );
    eventually("the observer subscribed again", SETTLE, || {
        server.numsub(&changes_channel(name)) == 1
    })
    .await;
    assert!(b.leader_election(name).delete().await.unwrap());
    assert_eq!(next(&mut observer, "delete").await, None);
    eventually("the deleted leader learns it lost", SETTLE, || {
        second.is_lost()
    })
    .await;
    assert!(matches!(second.proclaim("b:1").await, Err(Error::NotOwner)));

    // An expiry announces nothing: the observer reads again when the lease ends.
    let fixed = a
        .leader_election(name)
        .acquire_with(Wait::No, Lease::Fixed(ms(300)))
        .await
        .unwrap()
        .expect("nobody leads");
    let t3 = fixed.term();
    assert_eq!(next(&mut observer, "fixed win").await, leader(a.id(), t3));
    fixed.lost().await;
    assert_eq!(next(&mut observer, "expiry").await, None);
    assert!(matches!(fixed.resign().await, Err(Error::NotOwner)));

    drop(observer);
    eventually("the dropped observer unsubscribed", SETTLE, || {
        server.numsub(&changes_channel(name)) == 0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observers_never_miss_the_final_state_of_a_burst() {
    let server = RedisServer::start();
    let name = "burst";
    let watcher = client(&server).await;
    let c = client(&server).await;
    let mut observer: Observed = Box::pin(watcher.leader_election(name).observe());
    assert_eq!(next(&mut observer, "first item").await, None);
    let election = c.leader_election(name);
    for i in 0..20 {
        let leadership = election.campaign(format!("v{i}")).await.unwrap();
        leadership.proclaim(format!("w{i}")).await.unwrap();
        leadership.resign().await.unwrap();
    }
    let last = election.campaign("final").await.unwrap();
    let last_term = last.term();
    let mut seen = Vec::new();
    loop {
        let item = next(&mut observer, "burst").await;
        seen.push(item.clone());
        if item == leader("final", last_term) {
            break;
        }
    }
    let terms: Vec<u64> = seen.iter().flatten().map(|l| l.term).collect();
    assert!(
        terms.windows(2).all(|w| w[0] <= w[1]),
        "changes in order: {seen:?}"
    );
    assert!(
        seen.windows(2).all(|w| w[0] != w[1]),
        "no item repeats the one before it: {seen:?}"
    );
    last.resign().await.unwrap();
    println!(
        "21 leaders in a burst: the observer saw {} items",
        seen.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn campaigners_of_one_client_register_once_and_take_turns() {
    let server = RedisServer::start();
    let name = "coalesced";
    let holder = client(&server).await;
    let c = client(&server).await;
    let first = holder
        .leader_election(name)
        .campaign("holder")
        .await
        .unwrap();
    let leading = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..5 {
        let election = c.leader_election(name);
        let leading = leading.clone();
        tasks.push(tokio::spawn(async move {
            let leadership = election.campaign(format!("task-{i}")).await.unwrap();
            assert_eq!(leading.fetch_add(1, Ordering::SeqCst), 0);
            tokio::time::sleep(ms(2)).await;
            leading.fetch_sub(1, Ordering::SeqCst);
            leadership.resign().await.unwrap();
        }));
    }
    eventually("the client is registered and subscribed", SETTLE, || {
        zcard(&server, &waiters_key(name)) == 1 && server.numsub(&wake_channel(name, &c)) == 1
    })
    .await;
    // Five tasks wait, but the client is registered once and only one of them asks Redis.
    tokio::time::sleep(ms(200)).await;
    assert_eq!(zcard(&server, &waiters_key(name)), 1);
    assert_eq!(server.numsub(&wake_channel(name, &c)), 1);
    first.resign().await.unwrap();
    tokio::time::timeout(SETTLE, join_all(tasks))
        .await
        .expect("every task led in turn");
    eventually("nothing is left", SETTLE, || {
        zcard(&server, &waiters_key(name)) == 0 && c.local_state() == Default::default()
    })
    .await;
}

/// The crate's table of round trips and commands: an uncontended campaign and its
/// resignation are one script each, and run exactly the commands listed there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncontended_campaign_and_resignation_run_the_commands_the_crate_lists() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let election = c.leader_election("counted");
    // Warm up: the scripts are loaded, and the lost-notice channel, which the watchdog
    // subscribes in the background once it keeps a lease, is subscribed before counting.
    let warm = election.campaign("warm").await.unwrap();
    common::lost_notices_subscribed(&server, &c).await;
    warm.resign().await.unwrap();
    server.cmd(&["CONFIG", "RESETSTAT"]);
    let scripts = c.stats().scripts_sent;
    let leadership = election.campaign("counted").await.unwrap();
    leadership.resign().await.unwrap();
    assert_eq!(c.stats().scripts_sent - scripts, 2, "one round trip each");
    let expected = common::command_counts(&[
        ("evalsha", 2),
        // The campaign: EXISTS (attempt record), HLEN, INCR (term), HSET, PEXPIRE, PUBLISH.
        ("exists", 1),
        ("incr", 1),
        ("hset", 1),
        ("pexpire", 1),
        // The resignation: HLEN, HMGET, DEL, PUBLISH (change), ZRANGE (nobody waits).
        ("hmget", 1),
        ("del", 1),
        ("zrange", 1),
        ("hlen", 2),
        ("publish", 2),
    ]);
    assert_eq!(common::operation_stats(&server), expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shared_surface_campaigns_with_the_client_id() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let election = c.leader_election("surface");
    let leadership = Acquire::acquire(&election).await.unwrap();
    assert_eq!(Held::fencing_token(&leadership), Some(leadership.term()));
    assert_eq!(Held::name(&leadership), "surface");
    assert_eq!(
        election.leader().await.unwrap(),
        leader(c.id(), leadership.term())
    );
    assert!(Acquire::try_acquire(&election).await.unwrap().is_none());
    Held::release(leadership).await.unwrap();
    assert_eq!(election.leader().await.unwrap(), None);
    assert!(!election.delete().await.unwrap(), "nobody leads");
    // Terms survive a deletion.
    let next_one = election.try_campaign("again").await.unwrap().unwrap();
    assert!(next_one.term() >= 2);
    assert!(election.delete().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_with_typed_errors() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let empty = c.leader_election("");
    assert_invalid("empty name: campaign", empty.try_campaign("v").await);
    assert_invalid("empty name: leader", empty.leader().await);
    assert_invalid("empty name: delete", empty.delete().await);
    let mut observer: Observed = Box::pin(empty.observe());
    assert_invalid(
        "empty name: observe",
        observer.next().await.expect("one item"),
    );
    assert!(observer.next().await.is_none(), "the stream ends");
    let long_name = "n".repeat(100_000);
    assert_invalid(
        "long name",
        c.leader_election(long_name).try_campaign("v").await,
    );

    let election = c.leader_election("bad-input");
    let huge = "x".repeat(redisync::MAX_VALUE_LEN + 1);
    assert_invalid("huge value", election.try_campaign(huge.as_str()).await);
    assert_invalid(
        "wait too long",
        election.campaign_for("v", Duration::MAX).await,
    );
    assert_invalid(
        "lease too short",
        election
            .acquire_with(Wait::No, Lease::Fixed(Duration::from_millis(1)))
            .await,
    );
    let leadership = election
        .try_campaign("x".repeat(redisync::MAX_VALUE_LEN))
        .await
        .unwrap()
        .expect("the longest value is fine");
    assert_invalid("huge proclaim", leadership.proclaim(huge.as_str()).await);
    leadership.resign().await.unwrap();

    // Foreign data under the leader key.
    let foreign = "foreign";
    server.cmd(&["SET", &leader_key(foreign), "x"]);
    let election = c.leader_election(foreign);
    assert_wrong_type("a string", election.try_campaign("v").await);
    assert_wrong_type("a string: leader", election.leader().await);
    server.cmd(&["DEL", &leader_key(foreign)]);
    server.cmd(&["HSET", &leader_key(foreign), "field", "x"]);
    assert_wrong_type("a foreign hash", election.try_campaign("v").await);
    assert_wrong_type("a foreign hash: leader", election.leader().await);
}

/// Three clients campaign in a loop for a few seconds while their connections are killed
/// (normal and pub/sub) and the script cache is flushed. Whenever a campaign wins, every other
/// leadership still alive must already know it is lost; the fenced resource refuses only terms
/// of leaderships that know they are lost, and accepts no stale one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaders_stay_fenced_through_connection_kills_and_script_flushes() {
    let server = RedisServer::start();
    let name = "chaos";
    let run = Duration::from_secs(6);
    let fenced = Arc::new(Mutex::new(Fenced::default()));
    // Each worker's current leadership, where the others can ask it whether it knows it lost.
    let slots: Arc<Vec<Mutex<Option<Leadership>>>> =
        Arc::new((0..3).map(|_| Mutex::new(None)).collect());
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..3 {
        let c = Client::builder(server.url())
            .watchdog_timeout(ms(600))
            .command_timeout(ms(500))
            .build()
            .await
            .unwrap();
        let (fenced, slots) = (fenced.clone(), slots.clone());
        tasks.push(tokio::spawn(async move {
            let election = c.leader_election(name);
            let (mut won, mut errors, mut stale_refused) = (0u64, 0u64, 0u64);
            while started.elapsed() < run {
                let leadership = match election.campaign_for(format!("w{i}"), ms(1000)).await {
                    Ok(Some(leadership)) => leadership,
                    Ok(None) => continue,
                    Err(_) => {
                        errors += 1;
                        tokio::time::sleep(ms(20)).await;
                        continue;
                    }
                };
                won += 1;
                let term = leadership.term();
                for (j, slot) in slots.iter().enumerate() {
                    if j != i {
                        if let Some(other) = &*slot.lock().unwrap() {
                            assert!(
                                other.is_lost(),
                                "w{i} won term {term} while w{j} (term {}) did not know it lost",
                                other.term()
                            );
                        }
                    }
                }
                *slots[i].lock().unwrap() = Some(leadership);
                for _ in 0..3 {
                    let lost = slots[i]
                        .lock()
                        .unwrap()
                        .as_ref()
                        .is_none_or(Leadership::is_lost);
                    let accepted = fenced.lock().unwrap().write(term);
                    if !accepted {
                        assert!(lost, "term {term} refused while w{i} did not know it lost");
                        stale_refused += 1;
                        break;
                    }
                    tokio::time::sleep(ms(5)).await;
                }
                let leadership = slots[i].lock().unwrap().take();
                if let Some(leadership) = leadership {
                    let _ = leadership.resign().await;
                }
            }
            c.shutdown().await;
            (won, errors, stale_refused)
        }));
    }
    let mut faults = 0;
    while started.elapsed() < run {
        tokio::time::sleep(ms(150)).await;
        let fault: &[&str] = match faults % 3 {
            0 => &["CLIENT", "KILL", "TYPE", "normal"],
            1 => &["CLIENT", "KILL", "TYPE", "pubsub"],
            _ => &["SCRIPT", "FLUSH"],
        };
        let _ = server.try_cmd(fault);
        faults += 1;
    }
    let results = join_all(tasks).await;
    let won: u64 = results.iter().map(|r| r.0).sum();
    let errors: u64 = results.iter().map(|r| r.1).sum();
    let refused: u64 = results.iter().map(|r| r.2).sum();
    let fenced = fenced.lock().unwrap();
    assert!(
        won >= 10,
        "only {won} leaderships in {run:?} ({errors} errors)"
    );
    assert_eq!(refused as usize, fenced.refused.len());
    println!(
        "chaos: {won} leaderships, {} writes accepted, {refused} stale refused, {errors} \
         campaign errors, {faults} faults",
        fenced.accepted.len()
    );
}

/// Clients take turns at leading: when a campaigner wins while more campaigners of its client
/// wait, the client ends up behind the clients that waited longer (after a wake-up, which
/// takes it out, its next campaigner registers it at the back; after a win without one, the
/// win sends it there), so a resignation wakes the next client, not the same one again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_win_with_sibling_campaigners_waiting_lets_the_next_client_lead_next() {
    let server = RedisServer::start();
    let (h, c1, c2) = (
        client(&server).await,
        client(&server).await,
        client(&server).await,
    );
    let name = "turns";
    let leading = h.leader_election(name).campaign("h").await.unwrap();
    let (won_tx, mut won) = tokio::sync::mpsc::unbounded_channel::<(&str, Leadership)>();
    let campaign = |client: &Client, who: &'static str| {
        let (election, won_tx) = (client.leader_election(name), won_tx.clone());
        tokio::spawn(async move {
            let leadership = election.campaign(who).await.unwrap();
            let _ = won_tx.send((who, leadership));
        })
    };
    let registered = || common::zcard(&server, &waiters_key(name));
    let _a = campaign(&c1, "c1");
    eventually("c1 registered", SETTLE, || registered() == 1).await;
    let _b = campaign(&c1, "c1");
    eventually("c1's second campaigner queued", SETTLE, || {
        c1.stats().contended_waits == 2
    })
    .await;
    let _x = campaign(&c2, "c2");
    eventually("c2 registered", SETTLE, || registered() == 2).await;
    // Each leader leads a while, then resigns, and the next one to win is the client that
    // waited longest. (A term of a few microseconds would let a sibling's campaign, sent at
    // once after the win, find nobody leading and win out of turn.)
    let mut leading = leading;
    for (next, why) in [
        ("c1", "c1 waited longest"),
        ("c2", "c1 led again before c2, which waited longer"),
        ("c1", "c1's second campaigner"),
    ] {
        tokio::time::sleep(ms(100)).await;
        leading.resign().await.unwrap();
        let (who, leadership) = tokio::time::timeout(SETTLE, won.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(who, next, "{why}");
        leading = leadership;
    }
}
