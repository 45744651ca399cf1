//! Durations as people type them: `500ms`, `30s`, `1.5s`, `2m`, `1h`, `1m30s`, `250us`; a
//! unit is required (`us` or `µs`, `ms`, `s`, `m`, `h`), fractions are allowed.

use std::time::Duration;

/// Parses a duration; the error says what is accepted.
pub fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let invalid = || {
        format!("invalid duration {text:?}: use a number and a unit, e.g. 250us, 500ms, 1.5s, 2m, 1h or 1m30s")
    };
    if text.is_empty() {
        return Err(invalid());
    }
    if text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "invalid duration {text:?}: give a unit, e.g. {text}s or {text}ms"
        ));
    }
    let mut nanos: u128 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_len);
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        let unit_nanos: u128 = match unit {
            "us" | "µs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return Err(invalid()),
        };
        nanos = nanos
            .checked_add(decimal_times(number, unit_nanos).ok_or_else(invalid)?)
            .ok_or_else(invalid)?;
        rest = after;
    }
    let secs = u64::try_from(nanos / 1_000_000_000).map_err(|_| invalid())?;
    // The remainder is below a second, so it fits.
    let sub = u32::try_from(nanos % 1_000_000_000).unwrap_or(0);
    Ok(Duration::new(secs, sub))
}

/// `number` (digits, with at most one `.` and a digit on at least one side) times `unit`
/// nanoseconds, rounded down to a nanosecond; `None` if it is not such a number or
/// overflows.
fn decimal_times(number: &str, unit: u128) -> Option<u128> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') || fraction.len() > 9 {
        return None;
    }
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let scale = 10u128.pow(u32::try_from(fraction.len()).ok()?);
    let fraction: u128 = if fraction.is_empty() {
        0
    } else {
        fraction.parse().ok()?
    };
    whole
        .checked_mul(unit)?
        .checked_add(fraction.checked_mul(unit)? / scale)
}

/// A duration as this tool prints it.
pub fn show(duration: Duration) -> String {
    let ms = duration.as_millis();
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.1}s", duration.as_secs_f64())
    } else {
        let secs = duration.as_secs();
        format!("{}m{:02}s", secs / 60, secs % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_people_type() {
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("0.25h"), Ok(Duration::from_secs(900)));
        assert_eq!(parse(".5s"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("100us"), Ok(Duration::from_micros(100)));
        assert_eq!(parse("100µs"), Ok(Duration::from_micros(100)));
        assert_eq!(parse("1m0.5s"), Ok(Duration::from_millis(60_500)));
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
        assert!(parse("7").unwrap_err().contains("give a unit, e.g. 7s"));
        for bad in [
            "",
            "s",
            "5x",
            "-1s",
            "1..5s",
            "1.2.3s",
            ".s",
            "ms5",
            "1.0000000001s",
            "99999999999999999999999999999h",
            "1e3s",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(show(Duration::from_millis(250)), "250ms");
        assert_eq!(show(Duration::from_millis(2500)), "2.5s");
        assert_eq!(show(Duration::from_secs(95)), "1m35s");
    }
}
