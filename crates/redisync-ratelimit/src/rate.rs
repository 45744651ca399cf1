//! [`Rate`]: how many units per period, plus a burst; and its text form (`100/s`).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use redisync_core::toolkit::{Error, Result};

/// The longest period a rate may have, and the longest a bucket may take to refill
/// completely (`(burst + 1) × per / units`): ten years of 365 days. Redis keeps time in
/// microseconds in doubles, exact below 2^53 µs (285 years); this keeps every instant the
/// limiter computes far from that.
pub const MAX_PERIOD: Duration = Duration::from_secs(10 * 365 * 24 * 60 * 60);

/// The bound on `units × (burst + 1)`: 2^53, below which Lua's doubles count exactly. (A
/// request's cost `n × per / units` is computed exactly, as a whole part and a remainder in
/// `1/units` microseconds, with `n ≤ burst + 1`.)
pub const MAX_PRODUCT: u64 = 1 << 53;

/// A rate: at most `units` per `per`, plus a `burst`.
///
/// The limiter is GCRA (the generic cell rate algorithm): units are spaced
/// `per / units` apart on average, and up to `burst` units may come early. Precisely:
///
/// * **The bound.** Across every client together, no window of length `per` (half-open,
///   `[t, t + per)` on Redis's clock) admits more than `units + burst` units.
/// * **Burst.** `burst` is how many units beyond the steady `units` a window may admit. A
///   full (idle) limiter admits `burst + 1` units at once; after that one unit every
///   `per / units`. With `burst = 0` (the default) units are spaced evenly, at least
///   `per / units` apart.
/// * **The largest request** is `burst + 1` units ([`max_request`](Self::max_request)): a
///   request for more could never be allowed without breaking the bound, and is
///   [`Error::InvalidArgument`]. Raise the burst to take bigger requests. (Why: after `n`
///   units at `t`, the steady rate adds `units - 1` more before `t + per`, so `n` units at
///   once fit the bound only if `n + units - 1 <= units + burst`.)
///
/// A rate is checked when it is set ([`RateLimiter::set_rate`](crate::RateLimiter::set_rate)):
/// `units` and `per` must not be zero, `per` must be a whole number of microseconds and at
/// most [`MAX_PERIOD`], the time to refill completely, `(burst + 1) × per / units`, at most
/// [`MAX_PERIOD`] too, and `units × (burst + 1)` below [`MAX_PRODUCT`]. Otherwise it is
/// [`Error::InvalidArgument`].
///
/// It parses from and prints as text: `100/s`, `1000/m`, `5/h`, `1/d`, `100/250ms`, `3/2s`
/// (see [`FromStr`](#impl-FromStr-for-Rate)); the burst is not part of the text.
///
/// ```
/// use std::time::Duration;
/// use redisync::prelude::*;
///
/// let rate = Rate::per_second(100).burst(20);
/// assert_eq!(rate.window_limit(), 120);
/// assert_eq!(rate.max_request(), 21);
/// assert_eq!(rate.emission_interval(), Duration::from_millis(10));
/// assert_eq!("100/s".parse::<Rate>().unwrap(), Rate::per_second(100));
/// assert_eq!("5/250ms".parse::<Rate>().unwrap(), Rate::new(5, Duration::from_millis(250)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rate {
    units: u64,
    per: Duration,
    burst: u64,
}

/// A checked rate, as the scripts take it: times in microseconds, divisions kept exact as a
/// quotient and a remainder in `1/units` microseconds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Params {
    pub(crate) units: u64,
    pub(crate) per_us: u64,
    pub(crate) burst: u64,
    /// `per = pq × units + pr`
    pub(crate) pq: u64,
    pub(crate) pr: u64,
    /// `(burst + 1) × per = tq × units + tr`: the tolerance.
    pub(crate) tq: u64,
    pub(crate) tr: u64,
}

impl Rate {
    /// At most `units` per `per`, with no burst.
    pub const fn new(units: u64, per: Duration) -> Self {
        Rate {
            units,
            per,
            burst: 0,
        }
    }

    /// At most `units` per second.
    pub const fn per_second(units: u64) -> Self {
        Rate::new(units, Duration::from_secs(1))
    }

    /// At most `units` per minute.
    pub const fn per_minute(units: u64) -> Self {
        Rate::new(units, Duration::from_secs(60))
    }

    /// At most `units` per hour.
    pub const fn per_hour(units: u64) -> Self {
        Rate::new(units, Duration::from_secs(60 * 60))
    }

    /// At most `units` per day (24 hours).
    pub const fn per_day(units: u64) -> Self {
        Rate::new(units, Duration::from_secs(24 * 60 * 60))
    }

    /// This rate with `burst` units that may come early (see [`Rate`]); replaces any burst.
    pub const fn burst(self, burst: u64) -> Self {
        Rate { burst, ..self }
    }

    /// The units per period.
    pub const fn units(&self) -> u64 {
        self.units
    }

    /// The period.
    pub const fn period(&self) -> Duration {
        self.per
    }

    /// The burst (0 unless set with [`burst`](Self::burst)).
    pub const fn burst_size(&self) -> u64 {
        self.burst
    }

    /// The most units a window of one period admits: `units + burst` (saturating).
    pub const fn window_limit(&self) -> u64 {
        self.units.saturating_add(self.burst)
    }

    /// The largest request that can ever be allowed: `burst + 1` units (saturating).
    pub const fn max_request(&self) -> u64 {
        self.burst.saturating_add(1)
    }

    /// The steady spacing of units, `per / units`, rounded down to a nanosecond (zero for a
    /// zero rate). The limiter itself counts it exactly.
    pub fn emission_interval(&self) -> Duration {
        match self.per.as_nanos().checked_div(u128::from(self.units)) {
            Some(nanos) => Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX)),
            None => Duration::ZERO,
        }
    }

    /// Checks the rate and computes what the scripts take.
    pub(crate) fn params(&self) -> Result<Params> {
        if self.units == 0 {
            return Err(Error::invalid(format!(
                "rate {self}: units must be at least 1, found 0"
            )));
        }
        if self.per.is_zero() {
            return Err(Error::invalid(format!(
                "rate {self}: the period must be at least 1 µs, found 0"
            )));
        }
        if !self.per.subsec_nanos().is_multiple_of(1_000) {
            return Err(Error::invalid(format!(
                "rate {self}: the period must be a whole number of microseconds, found {:?}",
                self.per
            )));
        }
        if self.per > MAX_PERIOD {
            return Err(Error::invalid(format!(
                "rate {self}: the period must be at most {MAX_PERIOD:?}, found {:?}",
                self.per
            )));
        }
        let capacity = u128::from(self.burst) + 1;
        let units = u128::from(self.units);
        if units * capacity >= u128::from(MAX_PRODUCT) {
            return Err(Error::invalid(format!(
                "rate {self}: units × (burst + 1) must be below 2^53, found {}",
                units * capacity
            )));
        }
        let per_us = self.per.as_micros();
        let tolerance = capacity * per_us;
        if tolerance / units > MAX_PERIOD.as_micros() {
            return Err(Error::invalid(format!(
                "rate {self}: refilling the burst, (burst + 1) × per / units, must take at \
                 most {MAX_PERIOD:?}, found {:?}",
                Duration::from_micros(u64::try_from(tolerance / units).unwrap_or(u64::MAX))
            )));
        }
        // Every value below is at most `tolerance / units` or below `units`, both checked.
        let narrow = |v: u128| u64::try_from(v).map_err(|_| Error::invalid("rate out of range"));
        Ok(Params {
            units: self.units,
            per_us: narrow(per_us)?,
            burst: self.burst,
            pq: narrow(per_us / units)?,
            pr: narrow(per_us % units)?,
            tq: narrow(tolerance / units)?,
            tr: narrow(tolerance % units)?,
        })
    }
}

impl fmt::Display for Rate {
    /// `units/period`, with the period in the largest unit that divides it (`100/s`,
    /// `5/250ms`, `1000/m`), then ` burst N` if there is one.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/", self.units)?;
        let nanos = self.per.as_nanos();
        let (count, unit) = UNITS
            .iter()
            .rev()
            .find(|(_, size)| nanos.is_multiple_of(*size) && nanos >= *size)
            .map_or((nanos, "ns"), |(name, size)| (nanos / size, *name));
        if count != 1 {
            write!(f, "{count}")?;
        }
        f.write_str(unit)?;
        if self.burst > 0 {
            write!(f, " burst {}", self.burst)?;
        }
        Ok(())
    }
}

/// The period units of the text form, smallest first, with their size in nanoseconds.
const UNITS: [(&str, u128); 6] = [
    ("us", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
    ("d", 86_400_000_000_000),
];

/// Why text is not a [`Rate`] (see [`Rate`'s `FromStr`](Rate#impl-FromStr-for-Rate)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ParseRateError {
    /// No `/` between the units and the period.
    MissingSlash,
    /// The units are not a whole number (or are too large).
    BadUnits(String),
    /// The period's count is not a whole number (or is too large).
    BadCount(String),
    /// The period's unit is none of `us`, `ms`, `s`, `m`, `h`, `d`.
    UnknownUnit(String),
    /// The period is too long to represent.
    Overflow,
}

impl fmt::Display for ParseRateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseRateError::MissingSlash => {
                f.write_str("a rate is UNITS/PERIOD, such as 100/s or 5/250ms")
            }
            ParseRateError::BadUnits(units) => {
                write!(
                    f,
                    "the units of a rate must be a whole number, found {units:?}"
                )
            }
            ParseRateError::BadCount(count) => {
                write!(
                    f,
                    "a period's count must be a whole number, found {count:?}"
                )
            }
            ParseRateError::UnknownUnit(unit) => write!(
                f,
                "a period's unit must be one of us, ms, s, m, h, d, found {unit:?}"
            ),
            ParseRateError::Overflow => f.write_str("the period is too long"),
        }
    }
}

impl std::error::Error for ParseRateError {}

impl From<ParseRateError> for Error {
    fn from(err: ParseRateError) -> Self {
        Error::invalid(err)
    }
}

impl FromStr for Rate {
    type Err = ParseRateError;

    /// `UNITS/PERIOD`, where `PERIOD` is an optional whole count and a unit: `us`, `ms`, `s`,
    /// `m` (minutes), `h`, `d` (24 hours); `sec`, `min`, `hour` and `day` are accepted too.
    /// So `100/s`, `1000/m`, `100/250ms`, `3/2s`. Spaces around the parts are ignored. The
    /// burst is not part of the text: add it with [`Rate::burst`]. Whether the rate can be
    /// set is checked when it is set.
    fn from_str(text: &str) -> std::result::Result<Self, Self::Err> {
        let (units, period) = text.split_once('/').ok_or(ParseRateError::MissingSlash)?;
        let units = units.trim();
        let units: u64 = units
            .parse()
            .map_err(|_| ParseRateError::BadUnits(units.to_owned()))?;
        let period = period.trim();
        let split = period
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(period.len());
        let (count, unit) = period.split_at(split);
        let count: u64 = if count.is_empty() {
            1
        } else {
            count
                .parse()
                .map_err(|_| ParseRateError::BadCount(count.to_owned()))?
        };
        let unit = unit.trim();
        let canonical = match unit {
            "sec" => "s",
            "min" => "m",
            "hour" => "h",
            "day" => "d",
            other => other,
        };
        let size = UNITS
            .iter()
            .find(|(name, _)| *name == canonical)
            .map(|(_, size)| *size)
            .ok_or_else(|| ParseRateError::UnknownUnit(unit.to_owned()))?;
        let nanos = u128::from(count) * size;
        let per = Duration::new(
            u64::try_from(nanos / 1_000_000_000).map_err(|_| ParseRateError::Overflow)?,
            // Below 10^9: fits.
            u32::try_from(nanos % 1_000_000_000).map_err(|_| ParseRateError::Overflow)?,
        );
        Ok(Rate::new(units, per))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_unit() {
        let cases = [
            ("100/s", Rate::per_second(100)),
            ("100/1s", Rate::per_second(100)),
            ("1000/m", Rate::per_minute(1000)),
            ("5/h", Rate::per_hour(5)),
            ("1/d", Rate::per_day(1)),
            ("100/250ms", Rate::new(100, Duration::from_millis(250))),
            ("3/2s", Rate::new(3, Duration::from_secs(2))),
            ("7/500us", Rate::new(7, Duration::from_micros(500))),
            (" 10 / 5 min ", Rate::new(10, Duration::from_secs(300))),
        ];
        for (text, rate) in cases {
            assert_eq!(text.parse::<Rate>(), Ok(rate), "{text}");
        }
    }

    #[test]
    fn refuses_bad_text_with_its_reason() {
        let cases = [
            ("100", ParseRateError::MissingSlash),
            ("x/s", ParseRateError::BadUnits("x".into())),
            ("-1/s", ParseRateError::BadUnits("-1".into())),
            ("10/5", ParseRateError::UnknownUnit("".into())),
            ("10/5y", ParseRateError::UnknownUnit("y".into())),
            (
                "10/99999999999999999999s",
                ParseRateError::BadCount("99999999999999999999".into()),
            ),
            ("10/18446744073709551615d", ParseRateError::Overflow),
        ];
        for (text, err) in cases {
            assert_eq!(text.parse::<Rate>(), Err(err), "{text}");
        }
    }

    #[test]
    fn prints_what_it_parses() {
        for text in ["100/s", "5/250ms", "1000/m", "3/2s", "1/d", "7/500us"] {
            let rate: Rate = text.parse().expect("parses");
            assert_eq!(rate.to_string(), text);
        }
        assert_eq!(Rate::per_second(1).burst(4).to_string(), "1/s burst 4");
    }

    #[test]
    fn checks_ranges() {
        let bad = [
            Rate::per_second(0),
            Rate::new(1, Duration::ZERO),
            Rate::new(1, Duration::from_nanos(1500)),
            Rate::new(1, MAX_PERIOD + Duration::from_secs(1)),
            Rate::per_second(1 << 52).burst(1),
            Rate::per_second(u64::MAX),
            Rate::per_day(1).burst(10 * 365),
            Rate::per_second(1).burst(u64::MAX),
        ];
        for rate in bad {
            assert!(
                matches!(rate.params(), Err(Error::InvalidArgument(_))),
                "{rate:?}"
            );
        }
        let good = [
            Rate::per_second(1),
            Rate::new(1, MAX_PERIOD),
            Rate::per_second((1 << 52) - 1).burst(0),
            Rate::per_day(1).burst(10 * 365 - 1),
        ];
        for rate in good {
            assert!(rate.params().is_ok(), "{rate:?}");
        }
    }

    #[test]
    fn splits_divisions_exactly() {
        let p = Rate::new(3, Duration::from_secs(1))
            .burst(1)
            .params()
            .expect("valid");
        assert_eq!((p.pq, p.pr), (333_333, 1));
        assert_eq!((p.tq, p.tr), (666_666, 2));
    }
}
