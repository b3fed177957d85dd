//! HTTP dates (RFC 9110 §5.6.7), formatted and parsed by the `httpdate` crate: the one
//! place weir turns a clock into an IMF-fixdate or reads one of the three forms a
//! recipient must accept. The crate panics on times outside 1970–9999; the functions
//! here clamp into that range first, so a clock set far off cannot bring a worker down.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The length of an IMF-fixdate: `Sun, 06 Nov 1994 08:49:37 GMT`.
pub const HTTP_DATE_LEN: usize = 29;

/// The last second the format can carry: 9999-12-31T23:59:59Z.
const LAST_SECOND: u64 = 253_402_300_799;

/// `time` as an IMF-fixdate, e.g. `Sun, 06 Nov 1994 08:49:37 GMT`; a time before 1970
/// is written as the epoch and one after 9999 as the format's last second.
pub fn http_date(time: SystemTime) -> [u8; HTTP_DATE_LEN] {
    let seconds = time
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
        .min(LAST_SECOND);
    let text = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(seconds));
    let mut date = [b' '; HTTP_DATE_LEN];
    let len = text.len().min(HTTP_DATE_LEN);
    date[..len].copy_from_slice(&text.as_bytes()[..len]);
    date
}

/// [`http_date`] as a `String`.
pub fn http_date_string(time: SystemTime) -> String {
    String::from_utf8_lossy(&http_date(time)).into_owned()
}

/// Parses an HTTP-date in any of its three forms (IMF-fixdate, RFC 850, asctime), with
/// optional whitespace around it; `None` when it is not one.
pub fn parse_http_date(text: &[u8]) -> Option<SystemTime> {
    let text = std::str::from_utf8(text).ok()?.trim_matches([' ', '\t']);
    httpdate::parse_http_date(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(seconds)
    }

    #[test]
    fn formats_imf_fixdates() {
        for (seconds, text) in [
            (0, "Thu, 01 Jan 1970 00:00:00 GMT"),
            (784_111_777, "Sun, 06 Nov 1994 08:49:37 GMT"),
            (951_782_400, "Tue, 29 Feb 2000 00:00:00 GMT"),
            (1_709_251_199, "Thu, 29 Feb 2024 23:59:59 GMT"),
            (4_102_444_800, "Fri, 01 Jan 2100 00:00:00 GMT"),
        ] {
            assert_eq!(&http_date(at(seconds)), text.as_bytes(), "{seconds}");
            assert_eq!(http_date_string(at(seconds)), text);
        }
    }

    #[test]
    fn a_clock_outside_the_format_is_clamped_not_a_panic() {
        assert_eq!(
            &http_date(UNIX_EPOCH - Duration::from_secs(86_400)),
            b"Thu, 01 Jan 1970 00:00:00 GMT"
        );
        assert_eq!(
            &http_date(at(LAST_SECOND + 86_400 * 400)),
            b"Fri, 31 Dec 9999 23:59:59 GMT"
        );
    }

    #[test]
    fn parses_the_three_forms() {
        let example = Some(at(784_111_777));
        assert_eq!(parse_http_date(b"Sun, 06 Nov 1994 08:49:37 GMT"), example);
        assert_eq!(
            parse_http_date(b" Sun, 06 Nov 1994 08:49:37 GMT\t"),
            example
        );
        assert_eq!(parse_http_date(b"Sunday, 06-Nov-94 08:49:37 GMT"), example);
        assert_eq!(parse_http_date(b"Sun Nov  6 08:49:37 1994"), example);
        for bad in [
            &b""[..],
            b"yesterday",
            b"Sun, 06 Nov 1994 08:49:37 UTC",
            b"Sun, 32 Nov 1994 08:49:37 GMT",
            b"Sun, 06 Nov 1994 25:49:37 GMT",
            b"Sun, 06 Nov 1969 08:49:37 GMT",
            b"Sun, 06 Nov 1994 08:49:37 GMT\xff",
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
    fn what_is_formatted_parses_back() {
        for seconds in [
            0,
            1,
            86_399,
            86_400,
            951_782_399,
            1_764_000_000,
            LAST_SECOND,
        ] {
            assert_eq!(parse_http_date(&http_date(at(seconds))), Some(at(seconds)));
        }
    }
}
