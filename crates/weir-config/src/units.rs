//! Parsers for the value formats the file uses: durations, byte sizes and HTTP
//! status ranges. Each returns a message fit to follow the key path in an error.

use std::time::Duration;

/// Units a size string may end with, and how many bytes each is.
const SIZE_UNITS: &[(&str, u64)] = &[
    ("B", 1),
    ("KB", 1_000),
    ("KiB", 1 << 10),
    ("MB", 1_000_000),
    ("MiB", 1 << 20),
    ("GB", 1_000_000_000),
    ("GiB", 1 << 30),
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
/// `"10 MB"`. `KB`, `MB`, `GB` are powers of 1000; `KiB`, `MiB`, `GiB` of 1024.
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
}
