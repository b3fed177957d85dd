//! Parsing of link parameters written the way `tc` writes them: `1544kbit`, `250ms`, `1%`.

use std::num::NonZeroU64;
use std::time::Duration;

use crate::loss::{GilbertElliott, Probability};
use crate::model::Rate;

/// A link parameter that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} {input:?}: {reason}")]
pub struct ParseError {
    what: &'static str,
    input: String,
    reason: &'static str,
}

impl ParseError {
    fn new(what: &'static str, input: &str, reason: &'static str) -> Self {
        ParseError {
            what,
            input: input.to_owned(),
            reason,
        }
    }
}

/// A rate as `tc` writes it: `bit` units (`10mbit`, `1544kbit`, `51.84mbit`, `1gbit`; a bare
/// number is bit/s), binary `kibit`/`mibit`/`gibit`, and byte units `bps`, `kbps`, `mbps`,
/// `gbps` (bytes per second, as in `tc`). Case does not matter.
pub fn parse_rate(input: &str) -> Result<Rate, ParseError> {
    const WHAT: &str = "rate";
    let (number, unit) = split_number(input).ok_or_else(|| {
        ParseError::new(WHAT, input, "expected a number and a unit such as 10mbit")
    })?;
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
            return Err(ParseError::new(
                WHAT,
                input,
                "unknown unit (use bit, kbit, mbit, gbit, or bps, kbps, mbps for bytes/s)",
            ));
        }
    };
    let bits_per_second = (number * multiplier).round();
    if !(1.0..=1e15).contains(&bits_per_second) {
        return Err(ParseError::new(
            WHAT,
            input,
            "must be between 1 bit/s and 1 Pbit/s",
        ));
    }
    // The range check above makes the value a positive integer that fits a u64.
    let bits_per_second = NonZeroU64::new(bits_per_second as u64)
        .ok_or_else(|| ParseError::new(WHAT, input, "must be at least 1 bit/s"))?;
    Ok(Rate::new(bits_per_second))
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
    const WHAT: &str = "probability";
    let (number, unit) = split_number(input)
        .ok_or_else(|| ParseError::new(WHAT, input, "expected a percentage such as 1%"))?;
    let value = match unit {
        "%" => number / 100.0,
        "" => number,
        _ => {
            return Err(ParseError::new(
                WHAT,
                input,
                "expected 1% or a fraction like 0.01",
            ));
        }
    };
    Probability::new(value).ok_or_else(|| ParseError::new(WHAT, input, "must be within 0..=100%"))
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
    if !(1.0..=1e15).contains(&bytes) {
        return Err(ParseError::new(WHAT, input, "must be at least 1 byte"));
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

    fn bits(input: &str) -> u64 {
        parse_rate(input).unwrap().bits_per_second()
    }

    #[test]
    fn rates_parse_like_tc() {
        assert_eq!(bits("1544kbit"), 1_544_000);
        assert_eq!(bits("51.84mbit"), 51_840_000);
        assert_eq!(bits("10mbit"), 10_000_000);
        assert_eq!(bits("10Mbit"), 10_000_000);
        assert_eq!(bits("1gbit"), 1_000_000_000);
        assert_eq!(bits("9600"), 9600);
        assert_eq!(bits("1kibit"), 1024);
        assert_eq!(bits("1kbps"), 8000);
        assert_eq!(bits("2mbps"), 16_000_000);
        for bad in ["", "mbit", "10 parsecs", "0bit", "-1mbit", "1..2mbit"] {
            assert!(parse_rate(bad).is_err(), "{bad:?} should not parse");
        }
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
    fn probabilities_take_percent_or_fraction() {
        assert_eq!(parse_probability("1%").unwrap().value(), 0.01);
        assert_eq!(parse_probability("0.5%").unwrap().value(), 0.005);
        assert_eq!(parse_probability("0.05").unwrap().value(), 0.05);
        assert_eq!(parse_probability("100%").unwrap().value(), 1.0);
        for bad in ["101%", "1.5", "1x", "", "-1%"] {
            assert!(parse_probability(bad).is_err(), "{bad:?} should not parse");
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
