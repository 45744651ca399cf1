//! A contender that is not a lock library: redisync's own plain-lock scripts, sent from raw
//! redis-rs with the keys and arguments the library sends on an uncontended `lock()` and
//! `unlock()`. Held against the library in the same round, it tells the scripts' cost (their
//! work inside Redis, their larger requests and replies) from the library's client code
//! (guards, the watchdog, the waiting machinery), which the floor alone cannot.
//!
//! The scripts are declared here from the same files and preludes as in the lock crate, so
//! they are the same text; [`RawScripts::connect`] checks that Redis knows them by the SHA1
//! the library loaded, and stops the run otherwise.

use redisync::prelude::*;

use crate::lockers::{Locker, Section};

redisync::core::lua_script! {
    static ACQUIRE = new "lock_acquire" for "lock"
        after ["publish_prelude", "lock_prelude", "wake_prelude", "lock_hand_over_prelude"];
}

redisync::core::lua_script! {
    static RELEASE = new "lock_release" for "lock"
        after ["publish_prelude", "lock_prelude", "wake_prelude", "lock_hand_over_prelude"];
}

/// One task's lock, taken and released with the lock's scripts alone.
pub struct RawScripts {
    conn: redis::aio::ConnectionManager,
    /// The client whose ids the requests carry (`<client id>:<n>`, as the library's).
    client: Client,
    hash: String,
    fence: String,
    attempt_prefix: String,
    waiters: String,
    offers: String,
    channel: String,
    owner: String,
    lease_ms: u64,
}

impl RawScripts {
    /// A connection and a redisync client for lockers of lock names given later; the
    /// library's own cycle on a lock of its own loads the scripts, which are then checked to
    /// be the ones declared here.
    pub async fn connect(url: &str) -> (redis::aio::ConnectionManager, Client) {
        let client = Client::connect(url).await.expect("connect");
        let warm_up = client.lock("bench:raw-scripts:warm-up");
        let guard = warm_up.lock().await.expect("lock");
        guard.unlock().await.expect("unlock");
        let mut conn = redis::Client::open(url)
            .expect("url")
            .get_connection_manager()
            .await
            .expect("connect");
        let known: Vec<bool> = redis::cmd("SCRIPT")
            .arg("EXISTS")
            .arg(ACQUIRE.sha1())
            .arg(RELEASE.sha1())
            .query_async(&mut conn)
            .await
            .expect("SCRIPT EXISTS");
        assert_eq!(
            known,
            [true, true],
            "the bench's copy of the lock's scripts is not what the library sends"
        );
        (conn, client)
    }

    /// The locker of lock `name`, with the connection and client [`connect`](Self::connect)
    /// made (a task of that client).
    pub fn new(conn: redis::aio::ConnectionManager, client: &Client, name: &str) -> Self {
        // The lock crate's key layout, with the default prefix.
        let key = |suffix: &str| format!("redisync:{{{name}}}:{suffix}");
        RawScripts {
            conn,
            client: client.clone(),
            hash: key("lock"),
            fence: key("fence"),
            attempt_prefix: key("attempt:"),
            waiters: key("waiters"),
            offers: key("offers"),
            channel: key(&format!("wake:{}", client.id())),
            owner: format!("{}:{}", client.id(), serial()),
            lease_ms: client.watchdog_timeout().as_millis() as u64,
        }
    }

    /// The library's first try of `lock()`: not registered, no offer, nothing to take over.
    async fn acquire(&mut self, attempt: &str) -> Result<bool, String> {
        let reply: Vec<i64> = redis::cmd("EVALSHA")
            .arg(ACQUIRE.sha1())
            .arg(5)
            .arg(&self.hash)
            .arg(&self.fence)
            .arg([self.attempt_prefix.as_str(), attempt].concat())
            .arg(&self.waiters)
            .arg(&self.offers)
            .arg(&self.owner)
            .arg(self.lease_ms)
            .arg(attempt)
            .arg(&self.channel)
            .arg(0)
            .arg("0")
            .arg(0)
            .arg("")
            .query_async(&mut self.conn)
            .await
            .map_err(|e| e.to_string())?;
        Ok(reply.first() == Some(&1))
    }

    /// A guard's release: no attempt record kept.
    async fn release(&mut self, attempt: &str) -> Result<(), String> {
        let _: i64 = redis::cmd("EVALSHA")
            .arg(RELEASE.sha1())
            .arg(5)
            .arg(&self.hash)
            .arg([self.attempt_prefix.as_str(), attempt].concat())
            .arg(&self.waiters)
            .arg(&self.offers)
            .arg(&self.fence)
            .arg(attempt)
            .arg(0)
            .query_async(&mut self.conn)
            .await
            .map_err(|e| e.to_string())?;
        Ok(())
    }
}

/// Serials for owner and attempt ids, `<client id>:<serial>` as the library's: unique in the
/// run, however many clients share an id's first part.
fn serial() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

#[async_trait::async_trait]
impl Locker for RawScripts {
    async fn with_lock(&mut self, section: Section) -> Result<(), String> {
        // Busy only if another task held the same name: try again at once, as the floor does
        // (the scenarios this contender runs in never contend). Every try is an attempt of
        // its own, as the library's.
        let attempt = loop {
            let attempt = format!("{}:{}", self.client.id(), serial());
            if self.acquire(&attempt).await? {
                break attempt;
            }
            tokio::task::yield_now().await;
        };
        section.await;
        self.release(&attempt).await
    }
}
