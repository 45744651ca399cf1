//! The register: a separate Redis that no fault touches, holding what the workers do with the
//! resources they hold.
//!
//! * A **fenced register** per lock ([`fenced_write.lua`](./fenced_write.lua)): it accepts a
//!   write only with a token at least the highest it accepted, like a storage service that
//!   checks fencing tokens.
//! * The **latch rounds**: which round is current and how many count-downs of it were
//!   claimed, so that no round is counted down more often than it was armed for.

use redis::aio::MultiplexedConnection;
use redis::AsyncCommands;

use crate::events::Resource;

/// The fenced write's script.
const FENCED_WRITE: &str = include_str!("fenced_write.lua");

/// Key of the current latch round.
const LATCH_ROUND: &str = "soak:latch:round";

/// Key of the fenced register of `res`.
fn fence_key(res: Resource) -> String {
    format!("soak:fence:{res}")
}

/// Key counting the count-downs claimed in latch `round`.
fn claimed_key(round: u64) -> String {
    format!("soak:latch:{round}:claimed")
}

/// What the register's fence of one resource saw.
#[derive(Debug, Default, Clone, Copy)]
pub struct FenceTally {
    /// Writes accepted.
    pub accepted: u64,
    /// Writes refused for a stale token.
    pub rejected: u64,
}

/// A connection to the register server.
#[derive(Clone)]
pub struct Register {
    con: MultiplexedConnection,
    script: redis::Script,
}

impl Register {
    /// Connects to the register at `url`.
    pub async fn connect(url: &str) -> redis::RedisResult<Register> {
        let con = redis::Client::open(url)?
            .get_multiplexed_async_connection()
            .await?;
        Ok(Register {
            con,
            script: redis::Script::new(FENCED_WRITE),
        })
    }

    /// Writes to the fenced register of `res` with `token`; whether it was accepted.
    pub async fn fenced_write(&self, res: Resource, token: u64) -> redis::RedisResult<bool> {
        let mut con = self.con.clone();
        let accepted: i64 = self
            .script
            .key(fence_key(res))
            .arg(token)
            .invoke_async(&mut con)
            .await?;
        Ok(accepted == 1)
    }

    /// The highest token the fenced register of `res` accepted (0 before any write).
    pub async fn highest_token(&self, res: Resource) -> redis::RedisResult<u64> {
        let mut con = self.con.clone();
        let max: Option<u64> = con.hget(fence_key(res), "max").await?;
        Ok(max.unwrap_or(0))
    }

    /// What the fenced register of `res` accepted and refused.
    pub async fn tally(&self, res: Resource) -> redis::RedisResult<FenceTally> {
        let mut con = self.con.clone();
        let (accepted, rejected): (Option<u64>, Option<u64>) = redis::cmd("HMGET")
            .arg(fence_key(res))
            .arg("accepted")
            .arg("rejected")
            .query_async(&mut con)
            .await?;
        Ok(FenceTally {
            accepted: accepted.unwrap_or(0),
            rejected: rejected.unwrap_or(0),
        })
    }

    /// The current latch round, if one was armed.
    pub async fn latch_round(&self) -> redis::RedisResult<Option<u64>> {
        let mut con = self.con.clone();
        con.get(LATCH_ROUND).await
    }

    /// Makes `round` the current latch round.
    pub async fn set_latch_round(&self, round: u64) -> redis::RedisResult<()> {
        let mut con = self.con.clone();
        con.set(LATCH_ROUND, round).await
    }

    /// Claims one count-down of `round`; returns how many were claimed, this one included.
    pub async fn claim_count_down(&self, round: u64) -> redis::RedisResult<u64> {
        let mut con = self.con.clone();
        con.incr(claimed_key(round), 1).await
    }

    /// How many count-downs of `round` were claimed.
    pub async fn claimed(&self, round: u64) -> redis::RedisResult<u64> {
        let mut con = self.con.clone();
        let claimed: Option<u64> = con.get(claimed_key(round)).await?;
        Ok(claimed.unwrap_or(0))
    }
}
