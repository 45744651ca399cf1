//! Converting caller-supplied durations into Redis milliseconds.

use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// Taken off every client-side deadline: Redis counts expiry in whole milliseconds from when
/// it ran the request, which may put the end of a hold up to a millisecond before `sent +
/// lease` on the client's clock. (It does not cover the two clocks running at different
/// rates; over the lease lengths locks use, that drift is far below a millisecond.) Leases
/// must be longer than this: see [`MIN_LEASE`].
pub const CLOCK_MARGIN: Duration = Duration::from_millis(2);

/// The shortest lease redisync accepts: a few times [`CLOCK_MARGIN`], so that a hold is
/// not known lost the moment it is granted.
pub const MIN_LEASE: Duration = Duration::from_millis(10);

/// The largest duration, in milliseconds, redisync sends to Redis: 2^53 ms (about 285,000
/// years). Scripts read numbers as Lua doubles, which are exact up to 2^53.
pub const MAX_MILLIS: u64 = 1 << 53;

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
    fn waits_are_checked() {
        assert!(wait_deadline(Duration::ZERO).is_ok());
        assert!(wait_deadline(Duration::MAX).is_err());
        assert!(wait_deadline(Duration::from_secs(3600)).is_ok());
    }
}
