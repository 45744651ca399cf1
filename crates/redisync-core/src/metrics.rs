//! Metrics, through the [`metrics`](https://docs.rs/metrics) facade (feature `metrics`).
//!
//! Every primitive reports the same metrics, from the pieces of core they all go through (the
//! waiting loop, [`Hold`](crate::Hold), the watchdog, background give-backs and the pub/sub
//! hub), so a primitive gets them without a line of its own. They go to whatever recorder the
//! application installed (`metrics-exporter-prometheus`, an OpenTelemetry bridge, ...); with
//! none, or without the feature, they cost nothing.
//!
//! | metric | type | labels | what |
//! |---|---|---|---|
//! | `redisync_acquires_total` | counter | `kind`, `outcome` | acquire calls that ended: `acquired`, `timed_out` (the wait ran out), `failed` (an error) |
//! | `redisync_acquire_wait_seconds` | histogram | `kind`, `outcome` | how long those calls took, first try included |
//! | `redisync_contended_waits_total` | counter | `kind` | acquire calls that found the primitive taken and waited |
//! | `redisync_hold_seconds` | histogram | `kind` | how long holds (guards, permits) were held, until released or dropped |
//! | `redisync_renewals_total` | counter | `kind`, `outcome` | watchdog renewals per hold: `renewed`, `lost` (gone or not ours), `failed` (the call failed; retried) |
//! | `redisync_lost_leases_total` | counter | `kind` | holds the client found lost |
//! | `redisync_releases_total` | counter | `kind`, `outcome` | give-backs that needed more than one try: `retried` (each further try), `lapsed` (the lease ended first: nothing left to give back), `unconfirmed` (lost: see [`Stats::unconfirmed_releases`](crate::Stats::unconfirmed_releases)) |
//! | `redisync_pubsub_reconnects_total` | counter | | pub/sub connections lost and reconnected |
//!
//! `kind` is the primitive's kind (`lock`, `fair_lock`, `rwlock`, `semaphore`,
//! `expirable_semaphore`, `latch`, ...). Names are not labels by default, since they are
//! unbounded; [`ClientBuilder::metrics_with_names`](crate::ClientBuilder::metrics_with_names)
//! adds a `name` label for applications with a known, small set of names.

use std::time::Duration;

/// What one client reports metrics with: whether names are labels.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Metrics {
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) names: bool,
}

/// The name in a key of the primitive's key space (`<prefix>:{<name>}:...`), or the key.
#[cfg(feature = "metrics")]
fn name_of(key: &str) -> &str {
    key.find('{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.rfind("}:")
                .or_else(|| rest.strip_suffix('}').map(str::len))
                .map(|close| &rest[..close])
        })
        .unwrap_or(key)
}

#[cfg(feature = "metrics")]
impl Metrics {
    fn labels(
        self,
        kind: &'static str,
        key: &str,
        outcome: Option<&'static str>,
    ) -> Vec<metrics::Label> {
        let kind = if kind.is_empty() { "other" } else { kind };
        let mut labels = vec![metrics::Label::new("kind", kind)];
        if let Some(outcome) = outcome {
            labels.push(metrics::Label::new("outcome", outcome));
        }
        if self.names {
            labels.push(metrics::Label::new("name", name_of(key).to_owned()));
        }
        labels
    }

    /// An acquire call ended with `outcome` after `waited`.
    pub(crate) fn acquire_ended(
        self,
        kind: &'static str,
        key: &str,
        outcome: &'static str,
        waited: Duration,
    ) {
        let labels = self.labels(kind, key, Some(outcome));
        metrics::histogram!("redisync_acquire_wait_seconds", labels.clone())
            .record(waited.as_secs_f64());
        metrics::counter!("redisync_acquires_total", labels).increment(1);
    }

    /// `n` acquisitions made together, without waiting.
    pub(crate) fn acquired_together(self, kind: &'static str, key: &str, n: u64) {
        let labels = self.labels(kind, key, Some("acquired"));
        metrics::counter!("redisync_acquires_total", labels).increment(n);
    }

    /// `n` acquire calls found the primitive taken and wait.
    pub(crate) fn contended(self, kind: &'static str, key: &str, n: u64) {
        metrics::counter!(
            "redisync_contended_waits_total",
            self.labels(kind, key, None)
        )
        .increment(n);
    }

    /// A hold ended after `held`.
    pub(crate) fn held(self, kind: &'static str, key: &str, held: Duration) {
        metrics::histogram!("redisync_hold_seconds", self.labels(kind, key, None))
            .record(held.as_secs_f64());
    }

    /// A watchdog renewal of one hold ended with `outcome`.
    pub(crate) fn renewal(self, kind: &'static str, key: &str, outcome: &'static str) {
        metrics::counter!(
            "redisync_renewals_total",
            self.labels(kind, key, Some(outcome))
        )
        .increment(1);
    }

    /// `n` holds found lost.
    pub(crate) fn lost(self, kind: &'static str, key: &str, n: u64) {
        if n > 0 {
            metrics::counter!("redisync_lost_leases_total", self.labels(kind, key, None))
                .increment(n);
        }
    }

    /// A give-back that needed more than one try: another try, or how it ended.
    pub(crate) fn release(self, kind: &'static str, key: &str, outcome: &'static str) {
        metrics::counter!(
            "redisync_releases_total",
            self.labels(kind, key, Some(outcome))
        )
        .increment(1);
    }

    /// The pub/sub connection was lost and is being reconnected.
    pub(crate) fn pubsub_reconnect(self) {
        metrics::counter!("redisync_pubsub_reconnects_total").increment(1);
    }
}

/// Without the feature every report is a no-op the compiler removes.
#[cfg(not(feature = "metrics"))]
#[allow(clippy::unused_self)]
impl Metrics {
    pub(crate) fn acquire_ended(self, _: &'static str, _: &str, _: &'static str, _: Duration) {}
    pub(crate) fn acquired_together(self, _: &'static str, _: &str, _: u64) {}
    pub(crate) fn contended(self, _: &'static str, _: &str, _: u64) {}
    pub(crate) fn renewal(self, _: &'static str, _: &str, _: &'static str) {}
    pub(crate) fn lost(self, _: &'static str, _: &str, _: u64) {}
    pub(crate) fn release(self, _: &'static str, _: &str, _: &'static str) {}
    pub(crate) fn pubsub_reconnect(self) {}
}

#[cfg(all(test, feature = "metrics"))]
mod tests {
    use super::name_of;

    #[test]
    fn the_name_label_is_the_hash_tag_of_the_key() {
        assert_eq!(name_of("redisync:{orders:42}:lock"), "orders:42");
        assert_eq!(name_of("app:{a}b}:lock"), "a}b");
        assert_eq!(name_of("redisync:{x}"), "x");
        assert_eq!(name_of("plain"), "plain");
    }
}
