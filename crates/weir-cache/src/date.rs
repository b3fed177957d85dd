//! HTTP dates (RFC 9110 §5.6.7): the preferred IMF-fixdate and the two
//! obsolete forms a recipient must still accept, as whole seconds since the
//! Unix epoch. Freshness is computed in seconds, as the dates carry no more.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Seconds since the Unix epoch: the clock every policy function takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct UnixTime(pub u64);

impl UnixTime {
    /// The wall clock now (what the pipeline passes as `now`). On Linux it is
    /// the coarse clock (the time of the kernel's latest tick, a few
    /// milliseconds behind at most): whole seconds need no more, and every
    /// cache lookup reads it, where the precise clock costs several times as
    /// much per read.
    pub fn now() -> UnixTime {
        #[cfg(target_os = "linux")]
        {
            let now = rustix::time::clock_gettime(rustix::time::ClockId::RealtimeCoarse);
            UnixTime(u64::try_from(now.tv_sec).unwrap_or(0))
        }
        #[cfg(not(target_os = "linux"))]
        UnixTime::from(SystemTime::now())
    }

    /// Seconds from `earlier` to `self`, 0 when `earlier` is later.
    pub fn since(self, earlier: UnixTime) -> u64 {
        self.0.saturating_sub(earlier.0)
    }

    /// This time plus `seconds`, saturating.
    pub fn plus(self, seconds: u64) -> UnixTime {
        UnixTime(self.0.saturating_add(seconds))
    }
}

impl From<SystemTime> for UnixTime {
    fn from(time: SystemTime) -> UnixTime {
        UnixTime(
            time.duration_since(UNIX_EPOCH)
                .unwrap_or(Duration::ZERO)
                .as_secs(),
        )
    }
}

const MONTHS: [&[u8; 3]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];
const WEEKDAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];

/// Parses an HTTP-date in any of its three forms; `None` when it is not one.
pub fn parse_http_date(text: &[u8]) -> Option<UnixTime> {
    let text = crate::view::trim(text);
    let comma = memchr::memchr(b',', text);
    match comma {
        // IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT"
        Some(3) => parse_fixdate(text.get(5..)?),
        // RFC 850: "Sunday, 06-Nov-94 08:49:37 GMT"
        Some(_) => parse_rfc850(text.get(comma? + 2..)?),
        // asctime: "Sun Nov  6 08:49:37 1994"
        None => parse_asctime(text),
    }
}

/// Formats `time` as an IMF-fixdate.
pub fn format_http_date(time: UnixTime) -> String {
    let days = time.0 / 86_400;
    let seconds = time.0 % 86_400;
    let (year, month, day) = civil_from_days(days as i64);
    format!(
        "{}, {:02} {} {} {:02}:{:02}:{:02} GMT",
        WEEKDAYS[(days % 7) as usize],
        day,
        std::str::from_utf8(MONTHS[month as usize - 1]).unwrap_or("Jan"),
        year,
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60
    )
}

fn parse_fixdate(text: &[u8]) -> Option<UnixTime> {
    // "06 Nov 1994 08:49:37 GMT"
    if text.len() != 24 || &text[20..] != b" GMT" {
        return None;
    }
    let day = digits(&text[0..2])?;
    let month = month(&text[3..6])?;
    let year = digits(&text[7..11])?;
    let time = clock(&text[12..20])?;
    assemble(year, month, day, time)
}

fn parse_rfc850(text: &[u8]) -> Option<UnixTime> {
    // "06-Nov-94 08:49:37 GMT"
    if text.len() != 22 || &text[18..] != b" GMT" || text[2] != b'-' || text[6] != b'-' {
        return None;
    }
    let day = digits(&text[0..2])?;
    let month = month(&text[3..6])?;
    let short = digits(&text[7..9])?;
    // RFC 9110 §5.6.7: a two-digit year more than 50 years ahead is in the past century.
    let year = if short < 70 {
        2000 + short
    } else {
        1900 + short
    };
    let time = clock(&text[10..18])?;
    assemble(year, month, day, time)
}

fn parse_asctime(text: &[u8]) -> Option<UnixTime> {
    // "Sun Nov  6 08:49:37 1994"
    if text.len() != 24 {
        return None;
    }
    let month = month(&text[4..7])?;
    let day_text = if text[8] == b' ' {
        &text[9..10]
    } else {
        &text[8..10]
    };
    let day = digits(day_text)?;
    let time = clock(&text[11..19])?;
    let year = digits(&text[20..24])?;
    assemble(year, month, day, time)
}

fn digits(text: &[u8]) -> Option<u64> {
    if text.is_empty() || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(
        text.iter()
            .fold(0u64, |value, digit| value * 10 + u64::from(digit - b'0')),
    )
}

fn month(text: &[u8]) -> Option<u64> {
    MONTHS
        .iter()
        .position(|name| name[..] == *text)
        .map(|index| index as u64 + 1)
}

/// "08:49:37" as seconds into the day.
fn clock(text: &[u8]) -> Option<u64> {
    if text.len() != 8 || text[2] != b':' || text[5] != b':' {
        return None;
    }
    let (hours, minutes, seconds) = (
        digits(&text[0..2])?,
        digits(&text[3..5])?,
        digits(&text[6..8])?,
    );
    // 60 allows a leap second.
    if hours > 23 || minutes > 59 || seconds > 60 {
        return None;
    }
    Some(hours * 3600 + minutes * 60 + seconds)
}

fn assemble(year: u64, month: u64, day: u64, seconds: u64) -> Option<UnixTime> {
    if !(1970..=9999).contains(&year) || !(1..=31).contains(&day) {
        return None;
    }
    let days = days_from_civil(year as i64, month as i64, day as i64);
    u64::try_from(days)
        .ok()
        .map(|days| UnixTime(days * 86_400 + seconds))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_index = (month + 9) % 12;
    let day_of_year = (153 * month_index + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The inverse of [`days_from_civil`]: (year, month 1–12, day 1–31).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: UnixTime = UnixTime(784_111_777);

    #[test]
    fn parses_all_three_forms() {
        assert_eq!(
            parse_http_date(b"Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(EXAMPLE)
        );
        assert_eq!(
            parse_http_date(b"Sunday, 06-Nov-94 08:49:37 GMT"),
            Some(EXAMPLE)
        );
        assert_eq!(parse_http_date(b"Sun Nov  6 08:49:37 1994"), Some(EXAMPLE));
    }

    #[test]
    fn rejects_malformed_dates() {
        for bad in [
            &b""[..],
            b"0",
            b"-1",
            b"Sun, 06 Nov 1994 08:49:37 UTC",
            b"Sun, 06 Foo 1994 08:49:37 GMT",
            b"Sun, 06 Nov 1994 25:49:37 GMT",
            b"Sun, 6 Nov 1994 08:49:37 GMT",
            b"Sun, 06 Nov 1960 08:49:37 GMT",
        ] {
            assert_eq!(
                parse_http_date(bad),
                None,
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn formats_and_round_trips() {
        assert_eq!(format_http_date(EXAMPLE), "Sun, 06 Nov 1994 08:49:37 GMT");
        for seconds in [0, 951_782_400, 1_700_000_000, 4_102_444_799] {
            let time = UnixTime(seconds);
            let text = format_http_date(time);
            assert_eq!(parse_http_date(text.as_bytes()), Some(time), "{text}");
        }
    }
}
