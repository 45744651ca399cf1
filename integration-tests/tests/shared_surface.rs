//! The surface every primitive shares (`Acquire`, `Held`, `Wait`, `Lease`): one test body,
//! generic over `Acquire`, run against every implementor; `Held` on every guard and permit; a
//! helper written the way a user would write one; and the API contract of the additions.

mod common;

use std::future::Future;
use std::time::{Duration, Instant};

use common::{assert_invalid, ms};
use redisync::prelude::*;
use redisync_test_harness::RedisServer;

/// The watchdog timeout of the clients under test: short, so that "renewed" is seen within a
/// few leases, and long enough for a loaded machine to renew within a third of it.
const WATCHDOG: Duration = Duration::from_secs(1);

/// A wait long enough for anything that should succeed on a loaded machine.
const AMPLE: Duration = Duration::from_secs(10);

/// What the holds of an implementor carry.
#[derive(Clone, Copy)]
struct Holds {
    /// A fencing token (locks and writers).
    fences: bool,
    /// A lease: `Lease::Fixed` is honoured and a stale release is `NotOwner`. A classic
    /// semaphore's permits have none.
    leased: bool,
}

/// Locks and write sides.
const FENCED: Holds = Holds {
    fences: true,
    leased: true,
};
/// Read sides, expirable permits and multi-locks.
const LEASED: Holds = Holds {
    fences: false,
    leased: true,
};
/// A classic semaphore's permits.
const UNLEASED: Holds = Holds {
    fences: false,
    leased: false,
};

/// Runs [`shared_surface`] on a server of its own, with the subject and the other owner
/// `make` builds from their two clients (see [`clients`]).
async fn check<A: Acquire, B: Acquire>(
    holds: Holds,
    make: impl AsyncFnOnce(&Client, &Client) -> (A, B),
) {
    let server = RedisServer::start();
    let (a, b) = clients(&server).await;
    let (subject, other) = make(&a, &b).await;
    shared_surface(subject, other, holds, &a).await;
}

/// Two clients of `server`: the subject's, with a short watchdog, and the other owner's.
async fn clients(server: &RedisServer) -> (Client, Client) {
    let subject = common::client_with_watchdog(server, WATCHDOG).await;
    (subject, common::client(server).await)
}

/// Whether a release failed only because the hold was no longer ours: `NotOwner`, or (for a
/// multi-lock whose every lock was lost) `Several` of them.
fn is_not_owner(err: &Error) -> bool {
    match err {
        Error::NotOwner => true,
        Error::Several(failures) => failures
            .iter()
            .all(|(_, err)| matches!(err, Error::NotOwner)),
        _ => false,
    }
}

/// What every implementor must do, whatever it is. `subject` is the handle acquired through
/// (on `client`, whose watchdog is [`WATCHDOG`]); `other` another owner of the same primitive
/// (on another client): while it holds, `subject` must wait, and the other way round.
async fn shared_surface<A: Acquire, B: Acquire>(
    subject: A,
    other: B,
    holds: Holds,
    client: &Client,
) {
    let Holds { fences, leased } = holds;
    let name = subject.name().to_owned();

    // Held: its name is the primitive's, its token is there exactly where the primitive fences.
    let first = subject.acquire().await.expect("free at first");
    assert_eq!(first.name(), name);
    assert_eq!(
        first.fencing_token().is_some(),
        fences,
        "{name}: fencing token"
    );
    assert!(!first.is_lost());
    // The tokens of the subject's new holds, in order.
    let mut tokens = vec![first.fencing_token()];
    first.release().await.expect("release");

    // Wait::No on a held primitive: None, without waiting.
    let blocker = other.acquire().await.expect("the other owner takes it");
    let contended = client.stats().contended_waits;
    let started = Instant::now();
    let none = tokio::time::timeout(AMPLE, subject.acquire_with(Wait::No, Lease::Watchdog))
        .await
        .expect("Wait::No never waits for the holder");
    assert!(
        none.expect("try").is_none(),
        "{name}: held by the other owner"
    );
    assert!(subject.try_acquire().await.expect("try").is_none());
    assert_eq!(
        client.stats().contended_waits,
        contended,
        "{name}: Wait::No waited"
    );
    assert!(started.elapsed() < AMPLE / 2, "{name}: Wait::No took long");

    // Wait::For(d): gives up after about d.
    let wait = ms(300);
    let started = Instant::now();
    let gave_up = subject.acquire_with(Wait::For(wait), Lease::Watchdog).await;
    let took = started.elapsed();
    assert!(gave_up.expect("wait").is_none(), "{name}: still held");
    assert!(
        took >= wait,
        "{name}: gave up after {took:?}, before {wait:?}"
    );
    assert!(took < wait + AMPLE / 2, "{name}: gave up after {took:?}");
    assert!(client.stats().contended_waits > contended, "{name}: waited");
    assert!(subject.try_acquire_for(wait).await.expect("wait").is_none());

    // Wait::For(d) and Wait::Forever: succeed when freed in time, and only then.
    let mut blocker = Some(blocker);
    for wait in [Wait::For(AMPLE * 3), Wait::Forever] {
        let contended = client.stats().contended_waits;
        let waiter = subject.clone();
        let waiting = tokio::spawn(async move { waiter.acquire_with(wait, Lease::Watchdog).await });
        common::eventually(format!("{name}: {wait:?} waits"), AMPLE, || {
            client.stats().contended_waits > contended
        })
        .await;
        assert!(!waiting.is_finished(), "{name}: {wait:?} got it while held");
        let held = blocker.take().expect("held by the other owner");
        held.release().await.expect("the other owner releases");
        let got = tokio::time::timeout(AMPLE, waiting)
            .await
            .expect("freed, so granted")
            .expect("task")
            .expect("acquire")
            .expect("granted within the wait");
        // Hand it back to the other owner for the next round.
        got.release().await.expect("release");
        blocker = Some(other.acquire().await.expect("the other owner again"));
    }
    drop(blocker);

    // Lease::Watchdog: renewed while held, so nobody else gets it meanwhile.
    let held = tokio::time::timeout(AMPLE, subject.acquire())
        .await
        .expect("freed by the drop")
        .expect("acquire");
    tokio::time::sleep(WATCHDOG * 5 / 2).await;
    assert!(!held.is_lost(), "{name}: renewed, not lost");
    assert!(other.try_acquire().await.expect("try").is_none(), "{name}");
    tokens.push(held.fencing_token());
    held.release().await.expect("a renewed hold is still ours");

    // A helper written once for every primitive.
    let (token, output) = with_held(&subject, async |token| (token, 42))
        .await
        .expect("with_held")
        .expect("free");
    assert_eq!((token.is_some(), output), (fences, 42));
    tokens.push(token);
    let blocker = other.acquire().await.expect("the other owner");
    assert!(with_held(&subject, async |_| ())
        .await
        .expect("busy")
        .is_none());
    blocker.release().await.expect("release");

    if leased {
        // Lease::Fixed: the hold ends by itself; the guard learns it, and its release is stale.
        let lease = ms(300);
        let held = subject
            .acquire_with(Wait::No, Lease::Fixed(lease))
            .await
            .expect("acquire")
            .expect("free");
        tokens.push(held.fencing_token());
        tokio::time::timeout(AMPLE, held.lost())
            .await
            .expect("lost once the fixed lease ended");
        assert!(held.is_lost());
        let next = other
            .acquire_with(Wait::For(AMPLE), Lease::Watchdog)
            .await
            .expect("acquire")
            .expect("the hold ended in Redis too");
        let stale = held.release().await.expect_err("the lease ended");
        assert!(is_not_owner(&stale), "{name}: {stale:?}");
        next.release().await.expect("release");

        // A hold deleted under it: its release changes nothing and says NotOwner. (Last: an
        // expirable semaphore's delete removes its permits too.)
        let held = subject.acquire().await.expect("acquire");
        assert!(subject.delete().await.expect("delete"), "{name}: held");
        let stale = held.release().await.expect_err("deleted");
        assert!(is_not_owner(&stale), "{name}: {stale:?}");
    } else {
        assert_invalid(
            "a fixed lease where holds have none",
            subject
                .acquire_with(Wait::No, Lease::Fixed(Duration::from_secs(5)))
                .await
                .map(|held| held.is_some()),
        );
        // Nothing ends a hold without a lease: `lost()` never completes.
        let held = subject.acquire().await.expect("acquire");
        assert!(
            tokio::time::timeout(ms(300), held.lost()).await.is_err(),
            "{name}: a hold without a lease is never lost"
        );
        assert!(!held.is_lost());
        held.release().await.expect("release");
    }
    if fences {
        assert!(
            tokens.windows(2).all(|pair| pair[0] < pair[1]),
            "{name}: every new hold has a greater token: {tokens:?}"
        );
    } else {
        assert!(tokens.iter().all(Option::is_none), "{name}: no tokens");
    }
}

/// Checks that a future is `Send`, with output `T`, without running it.
fn sends<T>(future: impl Future<Output = T> + Send) {
    drop(future);
}

/// Checks that a future is `Send` and `'static`, with output `T`, without running it.
fn sends_static<T>(future: impl Future<Output = T> + Send + 'static) {
    drop(future);
}

/// What a user would write: runs `work` while holding `primitive` (if it can be had within
/// 200 ms), passing it the fencing token, and gives the hold back.
async fn with_held<A: Acquire, T>(
    primitive: &A,
    work: impl AsyncFnOnce(Option<u64>) -> T,
) -> Result<Option<T>> {
    let Some(held) = primitive
        .acquire_with(Wait::For(ms(200)), Lease::Watchdog)
        .await?
    else {
        return Ok(None);
    };
    let output = work(held.fencing_token()).await;
    held.release().await?;
    Ok(Some(output))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentrant_lock_is_acquire() {
    check(FENCED, async |a, b| (a.lock("shared"), b.lock("shared"))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_election_is_acquire() {
    check(FENCED, async |a, b| {
        (a.leader_election("shared"), b.leader_election("shared"))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_lock_is_acquire() {
    check(FENCED, async |a, b| {
        (a.fair_lock("shared"), b.fair_lock("shared"))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_side_is_acquire() {
    let sides = async |a: &Client, b: &Client| {
        let (mine, theirs) = (a.read_write_lock("shared"), b.read_write_lock("shared"));
        (mine.reader(), theirs.writer())
    };
    check(LEASED, sides).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_side_is_acquire() {
    let sides = async |a: &Client, b: &Client| {
        let (mine, theirs) = (a.read_write_lock("shared"), b.read_write_lock("shared"));
        (mine.writer(), theirs.reader())
    };
    check(FENCED, sides).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_is_acquire_of_one_permit_without_a_lease() {
    let one_permit = async |a: &Client, b: &Client| {
        let subject = a.semaphore("shared");
        assert!(subject.try_set_permits(1).await.unwrap());
        (subject, b.semaphore("shared"))
    };
    check(UNLEASED, one_permit).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expirable_semaphore_is_acquire() {
    let one_permit = async |a: &Client, b: &Client| {
        let subject = a.expirable_semaphore("shared");
        assert!(subject.try_set_permits(1).await.unwrap());
        (subject, b.expirable_semaphore("shared"))
    };
    check(LEASED, one_permit).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_lock_is_acquire_and_a_primitive() {
    let in_either_order = async |a: &Client, b: &Client| {
        let subject = a.multi_lock([a.lock("shared:b"), a.lock("shared:a")]);
        let other = b.multi_lock([b.lock("shared:a"), b.lock("shared:b")]);
        assert_eq!(subject.name(), "shared:a+shared:b", "canonical order");
        assert_eq!(other.name(), subject.name());
        (subject, other)
    };
    check(LEASED, in_either_order).await;
}

#[tokio::test]
async fn multi_lock_delete_deletes_every_lock() {
    let server = RedisServer::start();
    let (a, b) = clients(&server).await;
    let multi = a.multi_lock([a.lock("del:1"), a.lock("del:2")]);
    assert!(!multi.delete().await.unwrap(), "nothing held yet");
    let one = b.lock("del:1").lock().await.unwrap();
    let two = b.lock("del:2").lock().await.unwrap();
    assert!(multi.delete().await.unwrap());
    assert!(!b.lock("del:1").is_locked().await.unwrap());
    assert!(!b.lock("del:2").is_locked().await.unwrap());
    assert!(matches!(one.unlock().await, Err(Error::NotOwner)));
    assert!(matches!(two.unlock().await, Err(Error::NotOwner)));
    assert_invalid("an empty multi-lock", a.multi_lock([]).delete().await);
}

#[tokio::test]
async fn redlock_guard_is_held_and_redlock_a_primitive() {
    let servers = [RedisServer::start(), RedisServer::start()];
    let mut locks = Vec::new();
    for server in &servers {
        locks.push(common::client(server).await.lock("report"));
    }
    let redlock = Redlock::new(locks);
    assert_eq!(redlock.name(), "report");
    let guard = redlock
        .try_lock_with_lease(Duration::ZERO, Duration::from_secs(10))
        .await
        .unwrap()
        .expect("free");
    assert_eq!(Held::name(&guard), "report");
    assert_eq!(Held::fencing_token(&guard), None, "Redlock cannot fence");
    assert!(!Held::is_lost(&guard));
    assert!(redlock.delete().await.unwrap(), "held on both servers");
    let stale = Held::release(guard).await.expect_err("deleted");
    assert!(is_not_owner(&stale), "{stale:?}");
}

/// `Lease::Watchdog` on a semaphore means "no lease"; every permit, guard and view type is
/// `Held`/`Acquire` with the guard the public API names.
#[tokio::test]
async fn the_api_contract_of_the_additions_holds() {
    let server = RedisServer::start();
    let client = common::client(&server).await;
    let rw = client.read_write_lock("contract:rw");
    let semaphore = client.semaphore("contract:semaphore");
    semaphore.try_set_permits(1).await.unwrap();
    let expirable = client.expirable_semaphore("contract:expirable");
    expirable.try_set_permits(1).await.unwrap();
    let multi = client.multi_lock([client.lock("contract:1"), client.lock("contract:2")]);

    let lock: LockGuard = client.lock("contract:lock").acquire().await.unwrap();
    let fair: LockGuard = client.fair_lock("contract:fair").acquire().await.unwrap();
    let read: ReadGuard = rw.reader().acquire().await.unwrap();
    assert!(
        matches!(
            rw.writer().try_acquire().await,
            Err(Error::UpgradeNotSupported)
        ),
        "the writer of an owner that reads asks for an upgrade"
    );
    let write: Option<WriteGuard> = client
        .read_write_lock("contract:rw")
        .writer()
        .try_acquire()
        .await
        .unwrap();
    assert!(write.is_none(), "another owner reads");
    let permit: SemaphorePermit = Acquire::acquire(&semaphore).await.unwrap();
    let expirable_permit: ExpirablePermit = Acquire::acquire(&expirable).await.unwrap();
    let multi_guard: MultiLockGuard = multi.acquire().await.unwrap();

    assert_eq!(lock.fencing_token(), Held::fencing_token(&lock).unwrap());
    assert_eq!(Held::fencing_token(&read), None);
    assert_eq!(Held::fencing_token(&permit), None);
    assert_eq!(Held::fencing_token(&expirable_permit), None);
    assert_eq!(Held::fencing_token(&multi_guard), None);
    assert_eq!(Held::name(&multi_guard), "contract:1+contract:2");
    assert!(!permit.is_lost(), "permits have no lease to lose");

    for released in [
        Held::release(lock).await,
        Held::release(fair).await,
        Held::release(read).await,
        Held::release(permit).await,
        Held::release(expirable_permit).await,
        Held::release(multi_guard).await,
    ] {
        released.unwrap();
    }

    // The enums and the signatures, as the public API fixes them.
    let waits = [Wait::No, Wait::For(ms(1)), Wait::Forever];
    let leases = [Lease::Watchdog, Lease::Fixed(Duration::from_secs(1))];
    assert_eq!((waits.len(), leases.len()), (3, 2));
    fn acquire_shapes<A: Acquire>(primitive: &A) {
        sends::<Result<Option<A::Guard>>>(primitive.acquire_with(Wait::No, Lease::Watchdog));
        sends::<Result<A::Guard>>(primitive.acquire());
        sends::<Result<Option<A::Guard>>>(primitive.try_acquire());
        sends::<Result<Option<A::Guard>>>(primitive.try_acquire_for(Duration::ZERO));
    }
    fn held_shapes<H: Held>(held: H) {
        let _: &str = held.name();
        let _: Option<u64> = held.fencing_token();
        let _: bool = held.is_lost();
        sends_static::<()>(held.lost());
        sends::<Result<()>>(held.release());
    }
    fn guard_is<A: Acquire<Guard = G>, G: Held>(_: &A) {}
    let _ = held_shapes::<LockGuard>;
    let _ = held_shapes::<RedlockGuard>;
    let (lock, fair) = (client.lock("c"), client.fair_lock("c"));
    acquire_shapes(&lock);
    guard_is::<_, LockGuard>(&lock);
    guard_is::<_, LockGuard>(&fair);
    guard_is::<_, ReadGuard>(&rw.reader());
    guard_is::<_, WriteGuard>(&rw.writer());
    guard_is::<_, SemaphorePermit>(&semaphore);
    guard_is::<_, ExpirablePermit>(&expirable);
    guard_is::<_, MultiLockGuard>(&multi);
    let _: ReadLock = rw.reader();
    let _: WriteLock = rw.writer();
    let _ = held_shapes::<Leadership>;

    // LeaderElection, as the public API fixes it.
    let election: LeaderElection = client.leader_election("contract:election");
    guard_is::<_, Leadership>(&election);
    let leadership: Leadership = election.campaign("node-a:8080").await.unwrap();
    let _: Option<Leadership> = election.try_campaign("node-b").await.unwrap();
    let _: Option<Leadership> = election.campaign_for("node-b", ms(1)).await.unwrap();
    let term: u64 = leadership.term();
    let current: Option<Leader> = election.leader().await.unwrap();
    assert_eq!(
        current,
        Some(Leader {
            value: "node-a:8080".to_owned(),
            term
        })
    );
    fn stream_shape<S>(_: &S)
    where
        S: futures_util::Stream<Item = Result<Option<Leader>>> + Send + 'static,
    {
    }
    stream_shape(&election.observe());
    let () = leadership.proclaim("node-a:9090").await.unwrap();
    let _: bool = leadership.is_lost();
    sends_static::<()>(leadership.lost());
    let () = leadership.resign().await.unwrap();

    // Acquires can cross tasks from generic code.
    async fn in_a_task<A: Acquire>(primitive: A) -> Result<Option<A::Guard>> {
        tokio::spawn(async move { primitive.try_acquire().await })
            .await
            .expect("task")
    }
    assert!(in_a_task(client.lock("spawned")).await.unwrap().is_some());
}
