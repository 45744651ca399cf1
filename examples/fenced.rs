//! Why fencing tokens matter. Writer A takes a lock with a short lease, then stalls (a GC
//! pause, a swapped-out VM) for longer than the lease. The lock expires, writer B takes it and
//! writes; then A wakes up, still believing it holds the lock, and writes too. A lock alone
//! cannot stop that late write: the storage has to. Here it accepts a write only with a token
//! at least as high as the highest it has seen, so A's stale write is refused, while an
//! unfenced storage would let it overwrite B's data. A's guard knew all along: `lost()`
//! completed when the lease ran out, and a careful writer races its work against it.
//!
//! `cargo run -p redisync --example fenced` with `REDIS_URL` set, or `scripts/demo.sh fenced`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redisync::prelude::*;

const LEASE: Duration = Duration::from_millis(300);
const PAUSE: Duration = Duration::from_millis(800);

type AnyError = Box<dyn std::error::Error + Send + Sync>;

/// The protected resource: keeps the highest token it has seen and refuses lower ones.
#[derive(Debug, Default)]
struct FencedStorage {
    highest_token: u64,
    value: String,
    /// What a storage without the check would hold: the last write wins, whoever sent it.
    unfenced_value: String,
}

impl FencedStorage {
    fn write(&mut self, token: u64, value: &str) -> Result<(), String> {
        self.unfenced_value = value.to_owned();
        if token < self.highest_token {
            return Err(format!(
                "refused: token {token} is older than {}",
                self.highest_token
            ));
        }
        self.highest_token = token;
        self.value = value.to_owned();
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), AnyError> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let (a, b) = (
        Client::builder(url.as_str())
            .key_prefix("redisync-demo")
            .build()
            .await?,
        Client::builder(url.as_str())
            .key_prefix("redisync-demo")
            .build()
            .await?,
    );
    let storage = Arc::new(Mutex::new(FencedStorage::default()));
    let start = Instant::now();
    let at = move || format!("+{:>4} ms", start.elapsed().as_millis());

    let guard_a = a.lock("report").lock_with_lease(LEASE).await?;
    let token_a = guard_a.fencing_token();
    println!(
        "{} A takes the lock with a {LEASE:?} lease: token {token_a}",
        at()
    );
    let lost = guard_a.lost();
    let told = tokio::spawn(async move {
        lost.await;
        println!("{} A's guard: lost() completed, the lease is gone", at());
    });
    println!("{} A stalls for {PAUSE:?}, past its lease", at());

    let writer_b = {
        let (lock_b, storage) = (b.lock("report"), storage.clone());
        tokio::spawn(async move {
            let guard_b = lock_b.lock().await?;
            let token_b = guard_b.fencing_token();
            println!("{} B takes the lock: token {token_b}", at());
            let written = storage
                .lock()
                .expect("no task panics holding it")
                .write(token_b, "B's report");
            println!("{} B writes \"B's report\": {written:?}", at());
            guard_b.unlock().await?;
            Ok::<_, AnyError>((token_b, written.is_ok()))
        })
    };
    tokio::time::sleep(PAUSE).await;
    let (token_b, b_written) = writer_b.await??;
    told.await?;

    println!(
        "{} A wakes up and writes \"A's report\" with token {token_a}; is_lost() = {}",
        at(),
        guard_a.is_lost()
    );
    let a_written = storage
        .lock()
        .expect("no task panics holding it")
        .write(token_a, "A's report");
    println!("{} the storage says: {a_written:?}", at());
    let a_unlocked = guard_a.unlock().await;
    println!("{} A unlocks: {a_unlocked:?}", at());

    // A careful writer races its slow work against `lost()` and gives up when the lease goes.
    let guard_c = a.lock("report").lock_with_lease(LEASE).await?;
    let token_c = guard_c.fencing_token();
    println!("{} careful A takes the lock again: token {token_c}", at());
    let careful_gave_up = tokio::select! {
        _ = tokio::time::sleep(PAUSE) => {
            let mut storage = storage.lock().expect("no task panics holding it");
            let written = storage.write(token_c, "careful A's report");
            println!("{} careful A finished and wrote: {written:?}", at());
            false
        }
        _ = guard_c.lost() => {
            println!("{} careful A: lease lost before the work was done, nothing written", at());
            true
        }
    };
    drop(guard_c); // nothing left to release: the lease is gone

    let (stored, unfenced) = {
        let storage = storage.lock().expect("no task panics holding it");
        (storage.value.clone(), storage.unfenced_value.clone())
    };
    println!(
        "fenced storage holds {stored:?} (token {token_b} beat stale token {token_a}); an \
         unfenced one would hold {unfenced:?}"
    );
    a.shutdown().await;
    b.shutdown().await;
    let a_told = matches!(a_unlocked, Err(Error::NotOwner));
    if !b_written || a_written.is_ok() || stored != "B's report" || !a_told || !careful_gave_up {
        return Err("a stale writer got through, or was never told it lost the lock".into());
    }
    Ok(())
}
