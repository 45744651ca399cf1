//! The core runtime of [redisync](https://docs.rs/redisync): the [`Client`], its connections,
//! the script runner, the pub/sub hub, the watchdog and the local waiter queues.
//!
//! Users normally depend on the `redisync` facade crate, and see only the user API here: the
//! [`Client`] (connect, build, [`id`](Client::id), [`stats`](Client::stats),
//! [`shutdown`](Client::shutdown)), [`ClientBuilder`], [`Error`], [`Stats`] and the shared
//! surface of every primitive: [`DistributedPrimitive`], [`Acquire`] (one
//! `acquire_with(`[`Wait`]`, `[`Lease`]`)` that every other acquire method is a shorthand for)
//! and, for guards and permits, [`Held`].
//!
//! A primitive crate knows the [`toolkit`] too: it is the whole surface a primitive author
//! uses (`use redisync_core::toolkit::*;`). A primitive brings its Lua scripts and guard types
//! and uses, through the [`Toolkit`](toolkit::Toolkit) methods of the client:
//!
//! * `eval` / `eval_idempotent` to run one [`ScriptCall`] per operation;
//! * `acquire` to wait for a busy primitive ([`wait`] explains how);
//! * `watch_lease` and [`HoldLease`] for watchdog renewal and lost-lease notification;
//! * [`Hold`], the part of a guard that releases on drop (in the background) or on demand;
//! * [`Abandonable`] to make an acquire attempt undo itself when its caller goes away;
//! * `key_space` for cluster-safe key names ([`keys`]).
//!
//! # Modules, by layer
//!
//! Each module uses only modules of its own layer or of the layers listed before it, and
//! no two modules use each other (`tests/layers.rs` checks both):
//!
//! 1. Leaves, using nothing but each other: `error` ([`Error`]), `locking` (poison-free
//!    mutex locking), `signal` ([`Flag`]), [`duration`] (Redis milliseconds, [`MIN_LEASE`]),
//!    [`keys`] ([`KeySpace`], slots), `script` ([`LuaScript`], [`ScriptCall`],
//!    [`lua_script!`]), `stats` ([`Stats`] and its counters), [`metrics`], `abandon`
//!    ([`Abandonable`]), `primitive` (the shared surface: [`Acquire`], [`Held`], ...),
//!    `cells` (per-client shared values) and `strategy` ([`WaitStrategy`]).
//! 2. `transport`: the configuration, the connections (one server, followed through Sentinel,
//!    or a cluster) and sending one [`ScriptCall`] bounded by the command timeout, with
//!    replica sync. It knows nothing of the runtime.
//! 3. The runtime, working through the transport: [`pubsub`] (the hub), [`watchdog`] (lease
//!    renewal, and [`HoldLease`]), [`retry`] (background give-backs) and [`wait`] (the local
//!    queues and the waiting loop).
//! 4. `client`: the [`Client`] handle, the shared state assembling transport and runtime,
//!    and the user API ([`id`](Client::id), [`stats`](Client::stats),
//!    [`shutdown`](Client::shutdown), ...).
//! 5. `builder`: [`ClientBuilder`], the defaults and their checks, and the constructors
//!    ([`Client::connect`], [`Client::builder`], [`Client::cluster_builder`],
//!    [`Client::sentinel_builder`]).
//! 6. [`toolkit`]: the whole surface of a primitive crate, with [`Hold`] and the
//!    [`Toolkit`](toolkit::Toolkit) methods.
//!
//! # Guarantees every primitive inherits
//!
//! * One round trip per operation: each state change is one EVALSHA, reloaded transparently on
//!   `NOSCRIPT`.
//! * Every Redis call is bounded by the command timeout; nothing a caller waits for retries
//!   for ever. Give-backs that nothing else would make up for are retried in the background
//!   until Redis confirms them ([`retry`]).
//! * One subscriber connection per client, shared and reference-counted per channel.
//! * Waits are bounded by the holder's remaining lease, so a lost message never parks a task.
//! * Cancelling any call at any await point leaves no hold, queue place or subscription behind.

#![deny(missing_docs)]

mod abandon;
mod builder;
mod cells;
mod client;
pub mod duration;
mod error;
mod in_flight;
pub mod keys;
mod locking;
pub mod metrics;
mod primitive;
pub mod pubsub;
pub mod retry;
mod script;
mod server_version;
mod signal;
mod stats;
mod strategy;
pub mod toolkit;
mod transport;
pub mod wait;
pub mod watchdog;

pub use abandon::{Abandonable, Cleanup, LateOutcome};
pub use builder::{
    ClientBuilder, DEFAULT_COMMAND_TIMEOUT, DEFAULT_KEY_PREFIX, DEFAULT_POOL_SIZE,
    DEFAULT_WATCHDOG_TIMEOUT, MAX_COMMAND_TIMEOUT, MAX_LABEL_LEN, MAX_POOL_SIZE,
};
pub use client::{Client, LocalState};
pub use duration::{CLOCK_MARGIN, DEFAULT_CLOCK_DRIFT_PPM, MAX_CLOCK_DRIFT_PPM, MIN_LEASE};
pub use error::{Error, Result};
pub use in_flight::ReleasesInFlight;
pub use keys::{KeyFamily, KeySpace};
pub use primitive::{granted, Acquire, DistributedPrimitive, Held, Lease, Wait};
pub use retry::{Confirmed, Retry};
#[doc(hidden)]
pub use script::{check_publishing, check_script_contract};
pub use script::{LuaScript, ScriptCall};
pub use server_version::{ServerVersion, MIN_REDIS_VERSION};
pub use signal::Flag;
pub use stats::Stats;
pub use strategy::{WaitStrategy, MAX_POLL_INTERVAL, MIN_POLL_INTERVAL};
pub use toolkit::Hold;
pub use wait::{Attempt, WaitSpec, MAX_SLEEP, RECHECK};
pub use watchdog::lease::{HoldLease, PendingFix};

/// Re-exported so primitive crates use the same `async_trait` as core.
pub use async_trait::async_trait;

/// The Redis driver (`redis-rs`) this crate uses: [`Error::Redis`] carries its
/// [`RedisError`](redis::RedisError), whose [`kind`](redis::RedisError::kind) and
/// [`code`](redis::RedisError::code) a caller can match on without a dependency of its own.
pub use redis;
