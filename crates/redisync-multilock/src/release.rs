//! Releasing a set of holds: every one is attempted, whatever happens to the others.

use futures_util::future::join_all;
use redisync_core::{Error, Result};
use redisync_lock::LockGuard;

/// Releases every guard concurrently and waits for all of them. `Ok` if all succeeded; the
/// error itself if one failed; [`Error::Several`] (each failed guard's `label` and error) if
/// more did.
pub(crate) async fn release_all(
    guards: Vec<LockGuard>,
    label: impl Fn(&LockGuard) -> String,
) -> Result<()> {
    let names: Vec<String> = guards.iter().map(label).collect();
    let outcomes = join_all(guards.into_iter().map(LockGuard::unlock)).await;
    let mut failures: Vec<(String, Error)> = names
        .into_iter()
        .zip(outcomes)
        .filter_map(|(name, outcome)| outcome.err().map(|err| (name, err)))
        .collect();
    match failures.len() {
        0 => Ok(()),
        1 => Err(failures.remove(0).1),
        _ => Err(Error::Several(failures)),
    }
}

/// Gives back what a failed or abandoned acquisition took, logging (not returning) failures:
/// the caller reports the reason it gave up instead, and leases bound what a failed release
/// leaves.
pub(crate) async fn give_back(guards: Vec<LockGuard>) {
    if guards.is_empty() {
        return;
    }
    if let Err(err) = release_all(guards, |guard| guard.name().to_owned()).await {
        tracing::warn!(error = %err, "giving back part of a multi-lock failed; leases will free it");
    }
}
