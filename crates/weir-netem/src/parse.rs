//! Parsing of link parameters written the way `tc` writes them: `1544kbit`, `250ms`, `1%`.
//! Rates and probabilities are weir's units (`weir_config::units`), shared with the tunnel's
//! config; times, sizes and the Gilbert-Elliott parameters are the link's own.

use std::num::NonZeroU64;
use std::time::Duration;

use crate::loss::{GilbertElliott, Probability};
use crate::model::Rate;

/// A link parameter that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParseError(String);

impl ParseError {
    fn new(what: &'static str, input: &str, reason: &'static str) -> Self {
        ParseError(format!("invalid {what} {input:?}: {reason}"))
    }
}

/// A rate as `tc` writes it (see [`weir_config::units::parse_rate`]).
pub fn parse_rate(input: &str) -> Result<Rate, ParseError> {
    let bits_per_second = weir_config::units::parse_rate(input).map_err(ParseError)?;
    NonZeroU64::new(bits_per_second)
        .map(Rate::new)
        .ok_or_else(|| ParseError::new("rate", input, "must be at least 1 bit/s"))
}

/// A time as `tc` writes it: `250ms`, `1.5s`, `500us` (also `sec`, `msec`, `usec`, `ns`).
/// A bare number is allowed only for zero.
pub fn parse_duration(input: &str) -> Result<Duration, ParseError> {
    const WHAT: &str = "time";
    let (number, unit) = split_number(input)
        .ok_or_else(|| ParseError::new(WHAT, input, "expected a number and a unit such as 20ms"))?;
    let nanos_per_unit: f64 = match unit.to_ascii_lowercase().as_str() {
        "" if number == 0.0 => 0.0,
        "" => return Err(ParseError::new(WHAT, input, "needs a unit: s, ms or us")),
        "s" | "sec" | "secs" => 1e9,
        "ms" | "msec" | "msecs" => 1e6,
        "us" | "usec" | "usecs" | "µs" => 1e3,
        "ns" | "nsec" | "nsecs" => 1.0,
        _ => return Err(ParseError::new(WHAT, input, "unknown unit (use s, ms, us)")),
    };
    let nanos = (number * nanos_per_unit).round();
    if !(0.0..=1e13).contains(&nanos) {
        return Err(ParseError::new(
            WHAT,
            input,
            "must be between 0 and 10,000 seconds",
        ));
    }
    // In range: a non-negative integer below 1e13 fits a u64.
    Ok(Duration::from_nanos(nanos as u64))
}

/// A probability: a percentage (`1%`, `0.5%`) or a fraction between 0 and 1 (`0.01`).
pub fn parse_probability(input: &str) -> Result<Probability, ParseError> {
    let value = weir_config::units::parse_probability(input).map_err(ParseError)?;
    Probability::new(value).ok_or_else(|| ParseError::new("probability", input, "out of range"))
}

/// Gilbert-Elliott parameters `p,r[,h[,k]]`, each a probability (see [`GilbertElliott`]):
/// `h` defaults to 0 (the bad state loses every packet) and `k` to 1 (the good state loses
/// none), which is Gilbert's original two-parameter model.
pub fn parse_gilbert_elliott(input: &str) -> Result<GilbertElliott, ParseError> {
    const WHAT: &str = "Gilbert-Elliott parameters";
    let parts: Vec<&str> = input.split(',').map(str::trim).collect();
    if !(2..=4).contains(&parts.len()) {
        return Err(ParseError::new(WHAT, input, "expected p,r[,h[,k]]"));
    }
    let value = |index: usize, default: f64| -> Result<f64, ParseError> {
        match parts.get(index) {
            Some(part) => parse_probability(part)
                .map(Probability::value)
                .map_err(|_| ParseError::new(WHAT, input, "each of p,r,h,k is a probability")),
            None => Ok(default),
        }
    };
    Ok(GilbertElliott {
        p: value(0, 0.0)?,
        r: value(1, 0.0)?,
        h: value(2, 0.0)?,
        k: value(3, 1.0)?,
    })
}

/// A byte count: `64000`, `64kb` or `64k` (1024 bytes), `1mb` or `1m`.
pub fn parse_bytes(input: &str) -> Result<u64, ParseError> {
    const WHAT: &str = "size";
    let (number, unit) = split_number(input)
        .ok_or_else(|| ParseError::new(WHAT, input, "expected a number of bytes such as 64kb"))?;
    let multiplier: f64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1024.0,
        "m" | "mb" => 1024.0 * 1024.0,
        "g" | "gb" => 1024.0 * 1024.0 * 1024.0,
        _ => return Err(ParseError::new(WHAT, input, "unknown unit (use b, kb, mb)")),
    };
    let bytes = (number * multiplier).round();
    if bytes < 1.0 {
        return Err(ParseError::new(WHAT, input, "must be at least 1 byte"));
    }
    if bytes > 1e15 {
        return Err(ParseError::new(WHAT, input, "must be at most 1e15 bytes"));
    }
    // In range: a positive integer that fits a u64.
    Ok(bytes as u64)
}

/// Splits `"51.84mbit"` into `(51.84, "mbit")`; `None` when there is no leading number.
fn split_number(input: &str) -> Option<(f64, &str)> {
    let input = input.trim();
    let end = input
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(input.len());
    let number: f64 = input[..end].parse().ok()?;
    number.is_finite().then_some((number, input[end..].trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_and_probabilities_are_weirs_units() {
        assert_eq!(parse_rate("1544kbit").unwrap().bits_per_second(), 1_544_000);
        assert_eq!(parse_probability("1%").unwrap().value(), 0.01);
        let error = parse_rate("10 parsecs").unwrap_err().to_string();
        assert!(
            error.starts_with("invalid rate \"10 parsecs\": unknown unit"),
            "{error}"
        );
        assert!(parse_probability("101%").is_err());
    }

    #[test]
    fn durations_parse_like_tc() {
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("500us").unwrap(), Duration::from_micros(500));
        assert_eq!(parse_duration("20msec").unwrap(), Duration::from_millis(20));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        for bad in ["20", "ms", "20 fortnights", "-5ms"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} should not parse");
        }
    }

    #[test]
    fn gilbert_elliott_defaults_to_gilbert() {
        let model = parse_gilbert_elliott("1%,10%").unwrap();
        assert_eq!((model.p, model.r, model.h, model.k), (0.01, 0.1, 0.0, 1.0));
        let model = parse_gilbert_elliott("1%, 10%, 20%, 99%").unwrap();
        assert_eq!((model.p, model.r, model.h, model.k), (0.01, 0.1, 0.2, 0.99));
        for bad in ["1%", "1%,2%,3%,4%,5%", "1%,x"] {
            assert!(
                parse_gilbert_elliott(bad).is_err(),
                "{bad:?} should not parse"
            );
        }
    }

    #[test]
    fn sizes_take_binary_suffixes() {
        assert_eq!(parse_bytes("1500").unwrap(), 1500);
        assert_eq!(parse_bytes("64kb").unwrap(), 65536);
        assert_eq!(parse_bytes("1m").unwrap(), 1 << 20);
        assert!(parse_bytes("0").is_err());
    }
}
