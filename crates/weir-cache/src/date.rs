//! The cache's clock: whole seconds since the Unix epoch, and HTTP dates (RFC 9110
//! §5.6.7, read and written by `weir_http::date`) in it. Freshness is computed in
//! seconds, as the dates carry no more.

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

/// Parses an HTTP-date in any of its three forms; `None` when it is not one.
pub fn parse_http_date(text: &[u8]) -> Option<UnixTime> {
    weir_http::date::parse_http_date(text).map(UnixTime::from)
}

/// Formats `time` as an IMF-fixdate.
pub fn format_http_date(time: UnixTime) -> String {
    weir_http::date::http_date_string(UNIX_EPOCH + Duration::from_secs(time.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: UnixTime = UnixTime(784_111_777);

    #[test]
    fn dates_are_whole_seconds_since_the_epoch() {
        for text in [
            &b"Sun, 06 Nov 1994 08:49:37 GMT"[..],
            b"Sunday, 06-Nov-94 08:49:37 GMT",
            b"Sun Nov  6 08:49:37 1994",
        ] {
            assert_eq!(parse_http_date(text), Some(EXAMPLE));
        }
        for bad in [&b""[..], b"0", b"-1", b"Sun, 6 Nov 1994 08:49:37 GMT"] {
            assert_eq!(parse_http_date(bad), None);
        }
        assert_eq!(format_http_date(EXAMPLE), "Sun, 06 Nov 1994 08:49:37 GMT");
        for seconds in [0, 951_782_400, 1_700_000_000, 4_102_444_799] {
            let time = UnixTime(seconds);
            assert_eq!(
                parse_http_date(format_http_date(time).as_bytes()),
                Some(time)
            );
        }
    }
}
