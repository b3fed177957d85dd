//! Parsers for the value formats weir's files and commands use: durations, byte sizes,
//! HTTP status ranges, link rates and probabilities. Each returns a message fit to follow the
//! key path (or the flag) in an error.

use std::time::Duration;

/// No timeout in weir (nor in `weir tunnel`) needs to be longer than a day; a longer one is
/// a typo (`"5M"` is five months), and far longer ones overflow the timers' arithmetic.
pub const MAX_DURATION: Duration = Duration::from_secs(24 * 60 * 60);

/// Units a size string may end with, and how many bytes each is.
const SIZE_UNITS: &[(&str, u64)] = &[
    ("B", 1),
    ("KB", 1_000),
    ("KiB", 1 << 10),
    ("MB", 1_000_000),
    ("MiB", 1 << 20),
    ("GB", 1_000_000_000),
    ("GiB", 1 << 30),
    ("TB", 1_000_000_000_000),
    ("TiB", 1 << 40),
];

/// Parses a humantime duration such as `"250ms"`, `"5s"`, `"2m"` or `"1h 30m"`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim()).map_err(|error| {
        let error = error.to_string();
        if error.contains("for example") {
            format!("invalid duration \"{text}\": {error}")
        } else {
            format!(
                "invalid duration \"{text}\": {error}; write it like \"250ms\", \"5s\" or \"2m\""
            )
        }
    })
}

/// Parses a byte size written as digits with an optional unit: `"512"`, `"16KiB"`,
/// `"10 MB"`. `KB`, `MB`, `GB`, `TB` are powers of 1000; `KiB`, `MiB`, `GiB`, `TiB` of 1024.
/// Units are matched without regard to case.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let digits_end = trimmed
        .find(|c: char| !c.is_ascii_digit() && c != '_')
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(digits_end);
    let number: String = number.chars().filter(|&c| c != '_').collect();
    let unit = unit.trim();
    let invalid = || {
        format!(
            "invalid size \"{text}\" (write whole bytes like 1024, or a number with a unit: {})",
            SIZE_UNITS
                .iter()
                .map(|(name, _)| *name)
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    if number.is_empty() {
        return Err(invalid());
    }
    let multiplier = if unit.is_empty() {
        1
    } else {
        SIZE_UNITS
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(unit))
            .map(|(_, bytes)| *bytes)
            .ok_or_else(invalid)?
    };
    number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(multiplier))
        .ok_or_else(|| format!("size \"{text}\" is too large"))
}

/// Parses one entry of `expect_status`: `"200"`, `"200-399"` or `"2xx"`.
/// Range checks (100–599, low ≤ high) are the caller's job so that integers and
/// strings share them.
pub fn parse_status_range(text: &str) -> Result<(u16, u16), String> {
    let trimmed = text.trim();
    let invalid = || {
        format!(
            "invalid status \"{text}\" (write a code like \"200\", a range like \"200-399\" or a class like \"2xx\")"
        )
    };
    if let Some(class) = trimmed
        .strip_suffix("xx")
        .or_else(|| trimmed.strip_suffix("XX"))
    {
        let digit: u16 = match class.as_bytes() {
            [d @ b'1'..=b'5'] => u16::from(d - b'0'),
            _ => return Err(invalid()),
        };
        return Ok((digit * 100, digit * 100 + 99));
    }
    let parse_code = |s: &str| s.trim().parse::<u16>().map_err(|_| invalid());
    match trimmed.split_once('-') {
        Some((low, high)) => Ok((parse_code(low)?, parse_code(high)?)),
        None => {
            let code = parse_code(trimmed)?;
            Ok((code, code))
        }
    }
}

/// Parses a link rate as `tc` writes it, into bits per second: `bit` units (`10mbit`,
/// `1544kbit`, `51.84mbit`, `1gbit`; a bare number is bit/s), binary `kibit`/`mibit`/`gibit`,
/// and byte units `bps`, `kbps`, `mbps`, `gbps` (bytes per second, as in `tc`). Case does not
/// matter; the result is between 1 bit/s and 1 Pbit/s.
pub fn parse_rate(text: &str) -> Result<u64, String> {
    let invalid = |reason: &str| format!("invalid rate \"{text}\": {reason}");
    let (number, unit) =
        split_number(text).ok_or_else(|| invalid("expected a number and a unit such as 10mbit"))?;
    let multiplier: f64 = match unit.to_ascii_lowercase().as_str() {
        "" | "bit" => 1.0,
        "kbit" => 1e3,
        "mbit" => 1e6,
        "gbit" => 1e9,
        "tbit" => 1e12,
        "kibit" => 1024.0,
        "mibit" => 1024.0 * 1024.0,
        "gibit" => 1024.0 * 1024.0 * 1024.0,
        "bps" => 8.0,
        "kbps" => 8e3,
        "mbps" => 8e6,
        "gbps" => 8e9,
        _ => {
            return Err(invalid(
                "unknown unit (use bit, kbit, mbit, gbit, or bps, kbps, mbps for bytes/s)",
            ));
        }
    };
    let bits_per_second = (number * multiplier).round();
    if !(1.0..=1e15).contains(&bits_per_second) {
        return Err(invalid("must be between 1 bit/s and 1 Pbit/s"));
    }
    // The range check makes it a positive integer that fits a u64.
    Ok(bits_per_second as u64)
}

/// Parses a probability: a percentage (`1%`, `0.5%`) or a fraction between 0 and 1 (`0.01`).
pub fn parse_probability(text: &str) -> Result<f64, String> {
    let invalid = |reason: &str| format!("invalid probability \"{text}\": {reason}");
    let (number, unit) =
        split_number(text).ok_or_else(|| invalid("expected a percentage such as 1%"))?;
    let value = match unit {
        "%" => number / 100.0,
        "" => number,
        _ => return Err(invalid("expected 1% or a fraction like 0.01")),
    };
    if (0.0..=1.0).contains(&value) {
        Ok(value)
    } else {
        Err(invalid("must be within 0..=100%"))
    }
}

/// Splits `"51.84mbit"` into `(51.84, "mbit")`; `None` when there is no leading number.
fn split_number(text: &str) -> Option<(f64, &str)> {
    let text = text.trim();
    let end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let number: f64 = text[..end].parse().ok()?;
    number.is_finite().then_some((number, text[end..].trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512"), Ok(512));
        assert_eq!(parse_size("16KiB"), Ok(16 * 1024));
        assert_eq!(parse_size("16 KiB"), Ok(16 * 1024));
        assert_eq!(parse_size("10MB"), Ok(10_000_000));
        assert_eq!(parse_size("10mb"), Ok(10_000_000));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("1TiB"), Ok(1 << 40));
        assert_eq!(parse_size("2 TB"), Ok(2_000_000_000_000));
        assert_eq!(parse_size("1_000B"), Ok(1000));
        assert!(parse_size("16K").is_err());
        assert!(parse_size("KiB").is_err());
        assert!(parse_size("1.5MiB").is_err());
        assert_eq!(parse_size("16kib"), Ok(16 * 1024));
        assert!(parse_size("-1").is_err());
        assert!(
            parse_size("99999999999999GiB")
                .unwrap_err()
                .contains("too large")
        );
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h 30m"), Ok(Duration::from_secs(5400)));
        let message = parse_duration("5").unwrap_err();
        assert!(message.starts_with("invalid duration \"5\""), "{message}");
    }

    #[test]
    fn status_ranges() {
        assert_eq!(parse_status_range("200"), Ok((200, 200)));
        assert_eq!(parse_status_range("200-399"), Ok((200, 399)));
        assert_eq!(parse_status_range("2xx"), Ok((200, 299)));
        assert_eq!(parse_status_range("5XX"), Ok((500, 599)));
        assert!(parse_status_range("6xx").is_err());
        assert!(parse_status_range("ok").is_err());
        assert!(parse_status_range("200-").is_err());
    }

    #[test]
    fn rates_parse_like_tc() {
        let bits = |text: &str| parse_rate(text).unwrap();
        assert_eq!(bits("1544kbit"), 1_544_000);
        assert_eq!(bits("51.84mbit"), 51_840_000);
        assert_eq!(bits("10Mbit"), 10_000_000);
        assert_eq!(bits("1gbit"), 1_000_000_000);
        assert_eq!(bits("9600"), 9600);
        assert_eq!(bits("1kibit"), 1024);
        assert_eq!(bits("2mbps"), 16_000_000);
        for bad in ["", "mbit", "10 parsecs", "0bit", "-1mbit", "1..2mbit"] {
            assert!(parse_rate(bad).is_err(), "{bad:?} should not parse");
        }
        assert!(
            parse_rate("10 parsecs")
                .unwrap_err()
                .starts_with("invalid rate \"10 parsecs\"")
        );
    }

    #[test]
    fn probabilities_take_percent_or_fraction() {
        assert_eq!(parse_probability("1%"), Ok(0.01));
        assert_eq!(parse_probability("0.5%"), Ok(0.005));
        assert_eq!(parse_probability("0.05"), Ok(0.05));
        assert_eq!(parse_probability("100%"), Ok(1.0));
        for bad in ["101%", "1.5", "1x", "", "-1%"] {
            assert!(parse_probability(bad).is_err(), "{bad:?} should not parse");
        }
    }
}
