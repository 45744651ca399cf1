//! The trait every primitive implements.

use async_trait::async_trait;

use crate::error::Result;

/// What every redisync primitive can do, whatever it is.
#[async_trait]
pub trait DistributedPrimitive: Send + Sync {
    /// The name the primitive was created with.
    fn name(&self) -> &str;

    /// Removes all server state of this primitive and wakes its waiters. Returns whether there
    /// was anything to remove. Fencing counters survive, so tokens never repeat.
    async fn delete(&self) -> Result<bool>;
}
