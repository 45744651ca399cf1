//! Durations as people type them: `500ms`, `30s`, `2m`, `1h`, `1m30s`; a bare number is
//! seconds.

use std::time::Duration;

/// Parses a duration; the error says what is accepted.
pub fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let invalid = || format!("invalid duration {text:?}: use e.g. 500ms, 30s, 2m, 1h or 1m30s");
    if text.is_empty() {
        return Err(invalid());
    }
    if let Ok(seconds) = text.parse::<u64>() {
        return Ok(Duration::from_secs(seconds));
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(invalid());
        }
        let value: u64 = rest[..digits].parse().map_err(|_| invalid())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let part = match &rest[..unit_len] {
            "ms" => Duration::from_millis(value),
            "s" => Duration::from_secs(value),
            "m" => Duration::from_secs(value.checked_mul(60).ok_or_else(invalid)?),
            "h" => Duration::from_secs(value.checked_mul(3600).ok_or_else(invalid)?),
            _ => return Err(invalid()),
        };
        total = total.checked_add(part).ok_or_else(invalid)?;
        rest = &rest[unit_len..];
    }
    Ok(total)
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
        assert_eq!(parse("7"), Ok(Duration::from_secs(7)));
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
        for bad in ["", "s", "5x", "-1s", "1.5s", "ms5", "99999999999999999999h"] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(show(Duration::from_millis(250)), "250ms");
        assert_eq!(show(Duration::from_millis(2500)), "2.5s");
        assert_eq!(show(Duration::from_secs(95)), "1m35s");
    }
}
