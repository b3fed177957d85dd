//! Range requests answered from a whole stored object (RFC 9110 §14). One
//! range gets a 206 with `Content-Range`; several ranges get the whole object
//! with 200, which §14.2 allows (a server may ignore `Range`), and which avoids
//! building multipart bodies on the hit path.

use crate::date::{UnixTime, parse_http_date};
use crate::policy::conditional::etags_match;
use crate::view::{RequestView, trim};

/// How to answer a request's `Range` from an object of a known length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeAnswer {
    /// The whole object, 200.
    Full,
    /// Bytes `start..end` (end exclusive), 206.
    Partial {
        /// First byte of the range.
        start: u64,
        /// End of the range, exclusive.
        end: u64,
    },
    /// 416 with `Content-Range: bytes */length`.
    NotSatisfiable,
}

/// Decides the answer to `request`'s `Range` for a stored 200 of `length`
/// bytes with `etag` and `last_modified` (raw field values, for `If-Range`), made at
/// `date`. Only a GET's `Range` counts (§14.2: range handling is defined for GET alone; a
/// HEAD gets the whole object's head).
pub fn answer(
    request: &impl RequestView,
    length: u64,
    (etag, last_modified): (Option<&[u8]>, Option<&[u8]>),
    date: UnixTime,
) -> RangeAnswer {
    let Some(range) = request.header("range") else {
        return RangeAnswer::Full;
    };
    if request.method() != b"GET" {
        return RangeAnswer::Full;
    }
    if let Some(condition) = request.header("if-range")
        && !if_range_holds(trim(condition), etag, last_modified, date)
    {
        return RangeAnswer::Full;
    }
    parse_single(trim(range), length)
}

/// `If-Range` (§13.1.5): a strong entity-tag match, or exactly the stored
/// `Last-Modified` date when that is a strong validator: at least a second before the
/// response's `date` (§8.8.2.2), so that it cannot stand for two versions made within
/// one second.
fn if_range_holds(
    condition: &[u8],
    etag: Option<&[u8]>,
    last_modified: Option<&[u8]>,
    date: UnixTime,
) -> bool {
    if condition.starts_with(b"\"") || condition.starts_with(b"W/") {
        return etag.is_some_and(|etag| etags_match(condition, etag, true));
    }
    match (
        parse_http_date(condition),
        last_modified.and_then(parse_http_date),
    ) {
        (Some(asked), Some(modified)) => asked == modified && modified.0 < date.0,
        _ => false,
    }
}

fn parse_single(range: &[u8], length: u64) -> RangeAnswer {
    let Some(spec) = range
        .get(..6)
        .filter(|unit| unit.eq_ignore_ascii_case(b"bytes="))
        .map(|_| trim(&range[6..]))
    else {
        // Another unit: ignore the header (§14.2).
        return RangeAnswer::Full;
    };
    if spec.contains(&b',') {
        return RangeAnswer::Full;
    }
    let Some(dash) = memchr::memchr(b'-', spec) else {
        return RangeAnswer::Full;
    };
    let (first, last) = (trim(&spec[..dash]), trim(&spec[dash + 1..]));
    match (number(first), number(last)) {
        // bytes=-N: the last N bytes. Of an empty object, the one satisfiable form
        // (§14.1.1), with no bytes to send: the whole (empty) object, 200.
        (None, Some(suffix)) if first.is_empty() => {
            if suffix == 0 {
                RangeAnswer::NotSatisfiable
            } else if length == 0 {
                RangeAnswer::Full
            } else {
                RangeAnswer::Partial {
                    start: length.saturating_sub(suffix),
                    end: length,
                }
            }
        }
        (Some(start), None) if last.is_empty() => partial(start, length, length),
        (Some(start), Some(end)) if end >= start => partial(start, end.saturating_add(1), length),
        // Syntactically invalid: ignore the header.
        _ => RangeAnswer::Full,
    }
}

fn partial(start: u64, end: u64, length: u64) -> RangeAnswer {
    if start >= length {
        RangeAnswer::NotSatisfiable
    } else {
        RangeAnswer::Partial {
            start,
            end: end.min(length),
        }
    }
}

fn number(text: &[u8]) -> Option<u64> {
    if text.is_empty() || text.len() > 19 || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(
        text.iter()
            .fold(0u64, |total, digit| total * 10 + u64::from(digit - b'0')),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Req;

    const MODIFIED: &str = "Sun, 06 Nov 1994 08:49:37 GMT";

    fn range(headers: &[(&str, &str)]) -> RangeAnswer {
        let mut request = Req::get("/");
        for (name, value) in headers {
            request = request.header(name, value);
        }
        // Stored a day after it was last modified.
        answer(
            &request,
            100,
            (Some(b"\"e\""), Some(MODIFIED.as_bytes())),
            UnixTime(784_198_177),
        )
    }

    /// RFC 9110 §14: a zero-length object has no bytes to range over, `bytes=-N` of it is
    /// satisfiable (whole, empty, 200); only a GET's Range counts; an `If-Range` date
    /// holds only when `Last-Modified` is strong (a second or more before `Date`).
    #[test]
    fn empty_objects_heads_and_weak_dates() {
        let ranged = Req::get("/").header("Range", "bytes=-5");
        let empty = (Some(&b"\"e\""[..]), Some(MODIFIED.as_bytes()));
        let modified = UnixTime(784_111_777);
        assert_eq!(answer(&ranged, 0, empty, modified), RangeAnswer::Full);
        let from_zero = Req::get("/").header("Range", "bytes=0-");
        assert_eq!(
            answer(&from_zero, 0, empty, modified),
            RangeAnswer::NotSatisfiable
        );
        let head = Req::new("HEAD", "/").header("Range", "bytes=0-9");
        assert_eq!(answer(&head, 100, empty, modified), RangeAnswer::Full);
        let dated = Req::get("/")
            .header("Range", "bytes=0-9")
            .header("If-Range", MODIFIED);
        // Date equal to Last-Modified: a weak validator, the whole object.
        assert_eq!(answer(&dated, 100, empty, modified), RangeAnswer::Full);
        assert_eq!(
            answer(&dated, 100, empty, UnixTime(modified.0 + 1)),
            RangeAnswer::Partial { start: 0, end: 10 }
        );
    }

    #[test]
    fn range_table() {
        use RangeAnswer::*;
        let cases: &[(&[(&str, &str)], RangeAnswer)] = &[
            (&[], Full),
            (&[("Range", "bytes=0-9")], Partial { start: 0, end: 10 }),
            (
                &[("Range", "bytes=90-")],
                Partial {
                    start: 90,
                    end: 100,
                },
            ),
            (
                &[("Range", "bytes=-10")],
                Partial {
                    start: 90,
                    end: 100,
                },
            ),
            (&[("Range", "bytes=-1000")], Partial { start: 0, end: 100 }),
            (
                &[("Range", "bytes=50-1000")],
                Partial {
                    start: 50,
                    end: 100,
                },
            ),
            (&[("Range", "BYTES=1-1")], Partial { start: 1, end: 2 }),
            (&[("Range", "bytes=100-")], NotSatisfiable),
            (&[("Range", "bytes=-0")], NotSatisfiable),
            (&[("Range", "bytes=5-1")], Full),
            (&[("Range", "bytes=0-1,5-6")], Full),
            (&[("Range", "items=0-1")], Full),
            (&[("Range", "bytes=x-1")], Full),
            (
                &[("Range", "bytes=0-9"), ("If-Range", "\"e\"")],
                Partial { start: 0, end: 10 },
            ),
            (&[("Range", "bytes=0-9"), ("If-Range", "\"other\"")], Full),
            (&[("Range", "bytes=0-9"), ("If-Range", "W/\"e\"")], Full),
            (
                &[("Range", "bytes=0-9"), ("If-Range", MODIFIED)],
                Partial { start: 0, end: 10 },
            ),
            (
                &[
                    ("Range", "bytes=0-9"),
                    ("If-Range", "Mon, 07 Nov 1994 08:49:37 GMT"),
                ],
                Full,
            ),
        ];
        for (headers, expected) in cases {
            assert_eq!(range(headers), *expected, "{headers:?}");
        }
    }
}
