//! Converting caller-supplied durations into Redis milliseconds.

use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// The fixed part of the margin taken off every client-side lease deadline: Redis counts
/// expiry in whole milliseconds from when it ran the request, which may put the end of a hold
/// up to a millisecond before `sent + lease` on the client's clock.
///
/// The whole margin is this plus a part proportional to the lease, for Redis's clock running
/// faster than the client's (an NTP slew, a drifting oscillator): see [`lease_margin`] and
/// [`ClientBuilder::clock_drift_ppm`](crate::ClientBuilder::clock_drift_ppm). Leases must be
/// longer than the margin: see [`MIN_LEASE`].
pub const CLOCK_MARGIN: Duration = Duration::from_millis(2);

/// Default bound on how much faster Redis's clock may run than the client's: 1000 parts per
/// million (0.1 %), twice the fastest slew NTP (`ntpd`) applies, with room for the frequency
/// error a disciplined clock keeps. See
/// [`ClientBuilder::clock_drift_ppm`](crate::ClientBuilder::clock_drift_ppm).
pub const DEFAULT_CLOCK_DRIFT_PPM: u32 = 1_000;
/// The largest clock drift bound a client accepts: 100,000 parts per million (10 %).
pub const MAX_CLOCK_DRIFT_PPM: u32 = 100_000;

/// The shortest lease redisync accepts: a few times [`CLOCK_MARGIN`], so that a hold is
/// not known lost the moment it is granted (with the largest drift bound a client accepts,
/// [`MAX_CLOCK_DRIFT_PPM`], the margin of such a lease is 3 ms).
pub const MIN_LEASE: Duration = Duration::from_millis(10);

/// The largest duration, in milliseconds, redisync sends to Redis: 2^53 ms (about 285,000
/// years). Scripts read numbers as Lua doubles, which are exact up to 2^53.
pub const MAX_MILLIS: u64 = 1 << 53;

/// What the client takes off a lease of `lease` when it counts when the lease ends on its own
/// clock: [`CLOCK_MARGIN`] plus `lease × drift_ppm / 1,000,000`, rounded up to the nanosecond.
///
/// Redis ends a hold by its own wall clock; if that clock runs faster than the client's
/// monotonic clock by up to `drift_ppm` parts per million, the hold ends in Redis up to that
/// share of the lease early, as the client counts time. Never panics: the result saturates at
/// [`Duration::MAX`].
///
/// ```
/// use redisync_core::duration::{lease_margin, CLOCK_MARGIN};
/// use std::time::Duration;
///
/// // 1000 ppm (0.1 %) of a 30 s lease is 30 ms, on top of the fixed 2 ms.
/// assert_eq!(lease_margin(Duration::from_secs(30), 1_000), Duration::from_millis(32));
/// assert_eq!(lease_margin(Duration::from_secs(30), 0), CLOCK_MARGIN);
/// ```
pub fn lease_margin(lease: Duration, drift_ppm: u32) -> Duration {
    // At most about 1.8e28 ns times 2^32: far below u128::MAX.
    let drift_ns = (lease.as_nanos() * u128::from(drift_ppm)).div_ceil(1_000_000);
    let Ok(secs) = u64::try_from(drift_ns / 1_000_000_000) else {
        return Duration::MAX;
    };
    // Below 1e9: fits.
    let nanos = (drift_ns % 1_000_000_000) as u32;
    CLOCK_MARGIN.saturating_add(Duration::new(secs, nanos))
}

/// Converts a lease into whole milliseconds, rounding up.
///
/// A zero lease, one shorter than [`MIN_LEASE`] or one above [`MAX_MILLIS`]
/// is [`Error::InvalidArgument`].
pub fn lease_millis(lease: Duration) -> Result<u64> {
    if lease.is_zero() {
        return Err(Error::invalid("lease must be greater than zero"));
    }
    if lease < MIN_LEASE {
        return Err(Error::invalid(format!(
            "lease must be at least {:?}, found {lease:?}",
            MIN_LEASE
        )));
    }
    let ms = lease.as_nanos().div_ceil(1_000_000);
    if ms > u128::from(MAX_MILLIS) {
        return Err(Error::invalid(format!(
            "lease must be at most {MAX_MILLIS} ms, found {ms} ms"
        )));
    }
    Ok(ms as u64)
}

/// Whole milliseconds for a Redis argument (`PX`, a lease): rounded up, so Redis never holds
/// for less than the client assumes, at least 1 (Redis refuses 0), saturating rather than
/// overflowing. For durations already checked by [`lease_millis`] or bounded by the client's
/// limits.
pub fn redis_millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos().div_ceil(1_000_000))
        .unwrap_or(u64::MAX)
        .max(1)
}

/// Turns a wait into a deadline on the monotonic clock. A zero wait is valid and means "do not
/// wait"; a wait too large for Redis milliseconds is [`Error::InvalidArgument`].
pub fn wait_deadline(wait: Duration) -> Result<Instant> {
    if wait.as_millis() > u128::from(MAX_MILLIS) {
        return Err(Error::invalid(format!(
            "wait must be at most {MAX_MILLIS} ms, found {} ms",
            wait.as_millis()
        )));
    }
    Instant::now()
        .checked_add(wait)
        .ok_or_else(|| Error::invalid("wait is too large for this platform's clock"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_are_checked_and_rounded_up() {
        assert!(lease_millis(Duration::ZERO).is_err());
        assert!(lease_millis(Duration::MAX).is_err());
        assert!(lease_millis(Duration::from_micros(1)).is_err());
        assert!(lease_millis(Duration::from_millis(9)).is_err());
        assert_eq!(lease_millis(Duration::from_micros(10_001)).ok(), Some(11));
        assert_eq!(lease_millis(Duration::from_millis(1500)).ok(), Some(1500));
        assert_eq!(
            lease_millis(Duration::from_millis(MAX_MILLIS)).ok(),
            Some(MAX_MILLIS)
        );
        assert!(lease_millis(Duration::from_millis(MAX_MILLIS + 1)).is_err());
    }

    #[test]
    fn redis_millis_round_up_and_never_reach_zero() {
        assert_eq!(redis_millis(Duration::ZERO), 1);
        assert_eq!(redis_millis(Duration::from_micros(1500)), 2);
        assert_eq!(redis_millis(Duration::from_millis(7)), 7);
        assert_eq!(redis_millis(Duration::MAX), u64::MAX);
    }

    #[test]
    fn lease_margins_add_the_drift_share_to_the_fixed_part() {
        let ms = Duration::from_millis;
        assert_eq!(lease_margin(Duration::ZERO, 1_000), CLOCK_MARGIN);
        assert_eq!(lease_margin(ms(30_000), 0), CLOCK_MARGIN);
        assert_eq!(lease_margin(ms(30_000), 1_000), ms(32));
        assert_eq!(lease_margin(ms(2_000), 100_000), ms(202));
        // Rounded up: 1 ns of drift on a 1 ms lease at 1 ppm.
        assert_eq!(
            lease_margin(ms(1), 1),
            CLOCK_MARGIN + Duration::from_nanos(1)
        );
        // The shortest lease keeps most of itself under the largest bound.
        assert!(lease_margin(MIN_LEASE, MAX_CLOCK_DRIFT_PPM) <= ms(3));
        // Huge leases and bounds: no overflow, no panic.
        assert_eq!(lease_margin(Duration::MAX, u32::MAX), Duration::MAX);
        assert_eq!(
            lease_margin(ms(MAX_MILLIS), 1_000_000),
            CLOCK_MARGIN + ms(MAX_MILLIS)
        );
        assert_eq!(
            lease_margin(ms(MAX_MILLIS), 1_000),
            CLOCK_MARGIN + Duration::from_nanos(MAX_MILLIS * 1_000)
        );
    }

    #[test]
    fn waits_are_checked() {
        assert!(wait_deadline(Duration::ZERO).is_ok());
        assert!(wait_deadline(Duration::MAX).is_err());
        assert!(wait_deadline(Duration::from_secs(3600)).is_ok());
    }
}
