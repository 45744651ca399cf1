//! The latch rounds: the soak test arms latch round after latch round, each with
//! [`LATCH_COUNT`], as soon as the workers have claimed every count-down of the current one.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redisync::prelude::*;

use crate::register::Register;
use crate::worker::{latch_name, LATCH_COUNT};

/// Arms rounds until `stop`; returns how many it armed.
pub async fn arm_rounds(client: Client, register: Register, stop: Arc<AtomicBool>) -> u64 {
    let mut round = 0;
    while !stop.load(Ordering::Acquire) {
        let full = round == 0 || register.claimed(round).await.unwrap_or(0) >= LATCH_COUNT;
        if full {
            let next = round + 1;
            let latch = client.count_down_latch(latch_name(next));
            // `false` means armed already: a first attempt whose reply was lost did it (each
            // round's latch is new).
            let armed =
                tokio::time::timeout(Duration::from_secs(3), latch.try_set_count(LATCH_COUNT))
                    .await;
            if matches!(armed, Ok(Ok(_))) && register.set_latch_round(next).await.is_ok() {
                round = next;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    round
}
