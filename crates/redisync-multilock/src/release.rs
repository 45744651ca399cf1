//! Releasing or deleting a set of locks: every one is attempted, whatever happens to the
//! others.

use futures_util::future::join_all;
use redisync_core::toolkit::{DistributedPrimitive, Error, Result};
use redisync_lock::{LockGuard, ReentrantLock};

/// Releases every guard concurrently and waits for all of them. `Ok` if all succeeded; the
/// error itself if one failed; [`Error::Several`] (each failed guard's `label` and error) if
/// more did.
pub(crate) async fn release_all(
    guards: Vec<LockGuard>,
    label: impl Fn(&LockGuard) -> String,
) -> Result<()> {
    let names: Vec<String> = guards.iter().map(label).collect();
    let outcomes = join_all(guards.into_iter().map(LockGuard::unlock)).await;
    all_of(names, outcomes).map(|_| ())
}

/// Deletes every lock concurrently and waits for all of them: whether any was held, or the
/// failures as for [`release_all`] (labelled by lock name).
pub(crate) async fn delete_all(locks: &[ReentrantLock]) -> Result<bool> {
    let names = locks.iter().map(|lock| lock.name().to_owned()).collect();
    let outcomes = join_all(locks.iter().map(|lock| lock.delete())).await;
    all_of(names, outcomes).map(|held| held.into_iter().any(|was| was))
}

/// The outcomes of one operation on several locks, each labelled by its name: every value if
/// all succeeded; the error itself if one failed; [`Error::Several`] if more did.
fn all_of<T>(names: Vec<String>, outcomes: Vec<Result<T>>) -> Result<Vec<T>> {
    let mut values = Vec::with_capacity(outcomes.len());
    let mut failures: Vec<(String, Error)> = Vec::new();
    for (name, outcome) in names.into_iter().zip(outcomes) {
        match outcome {
            Ok(value) => values.push(value),
            Err(err) => failures.push((name, err)),
        }
    }
    match failures.len() {
        0 => Ok(values),
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
