//! `Cache-Control` (RFC 9111 §5.2) and `Pragma` (§5.4), parsed once per
//! message into plain values. Unknown directives are ignored, as required;
//! qualified `no-cache="..."` and `private="..."` are treated as unqualified,
//! which §5.2.2.4 and §5.2.2.7 allow and which is the safe reading for a
//! shared cache.

use crate::view::{RequestView, ResponseView, list_elements, trim};

/// The largest delta-seconds value kept (§1.2.2: 2^31, "infinity" in practice).
pub const DELTA_SECONDS_MAX: u64 = 1 << 31;

/// Response directives a shared cache acts on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResponseDirectives {
    /// `max-age`, seconds (capped at `DELTA_SECONDS_MAX`).
    pub max_age: Option<u64>,
    /// `s-maxage`, seconds: for a shared cache it takes the place of `max-age`.
    pub s_maxage: Option<u64>,
    /// `no-store`: the response is not stored.
    pub no_store: bool,
    /// `no-cache`: a stored response is revalidated before every use.
    pub no_cache: bool,
    /// `private`: a shared cache must not store the response.
    pub private: bool,
    /// `public`: storable even when it otherwise would not be (with `Authorization`, say).
    pub public: bool,
    /// `must-revalidate`: once stale, never served without revalidation.
    pub must_revalidate: bool,
    /// `proxy-revalidate`: `must-revalidate` for shared caches only.
    pub proxy_revalidate: bool,
    /// `must-understand`: stored only if the status code is understood (and then `no-store` is set
    /// aside).
    pub must_understand: bool,
    /// `no-transform`: the body must not be changed (so it is not compressed).
    pub no_transform: bool,
    /// RFC 8246: the body will not change while fresh.
    pub immutable: bool,
    /// RFC 5861 §3.
    pub stale_while_revalidate: Option<u64>,
    /// RFC 5861 §4.
    pub stale_if_error: Option<u64>,
}

/// How much staleness a request accepts (`max-stale`, §5.2.1.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxStale {
    /// `max-stale` without a value: any staleness.
    Any,
    /// `max-stale=N`: stale by at most this many seconds.
    Seconds(u64),
}

/// Request directives.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestDirectives {
    /// `max-age`, seconds: the client accepts nothing older.
    pub max_age: Option<u64>,
    /// `max-stale`: the client accepts a stale response, within a bound or not.
    pub max_stale: Option<MaxStale>,
    /// `min-fresh`, seconds: the response must stay fresh at least this much longer.
    pub min_fresh: Option<u64>,
    /// `no-cache`, or `Pragma: no-cache` without any `Cache-Control` (§5.4).
    pub no_cache: bool,
    /// `no-store`: the response to this request is not stored.
    pub no_store: bool,
    /// `only-if-cached`: answer from the cache or with 504, never from a node.
    pub only_if_cached: bool,
    /// `no-transform`: the body must not be changed (so it is not compressed).
    pub no_transform: bool,
    /// RFC 5861 §4, from the client.
    pub stale_if_error: Option<u64>,
}

impl ResponseDirectives {
    /// The directives of the response's `Cache-Control` fields, all of them combined.
    pub fn parse(response: &impl ResponseView) -> ResponseDirectives {
        let mut found = ResponseDirectives::default();
        for (name, value) in directives(response.header_values("cache-control")) {
            match name.to_ascii_lowercase().as_slice() {
                b"max-age" => set_first(&mut found.max_age, value),
                b"s-maxage" => set_first(&mut found.s_maxage, value),
                b"no-store" => found.no_store = true,
                b"no-cache" => found.no_cache = true,
                b"private" => found.private = true,
                b"public" => found.public = true,
                b"must-revalidate" => found.must_revalidate = true,
                b"proxy-revalidate" => found.proxy_revalidate = true,
                b"must-understand" => found.must_understand = true,
                b"no-transform" => found.no_transform = true,
                b"immutable" => found.immutable = true,
                b"stale-while-revalidate" => set_first(&mut found.stale_while_revalidate, value),
                b"stale-if-error" => set_first(&mut found.stale_if_error, value),
                _ => {}
            }
        }
        found
    }

    /// Whether a stale copy must never be served without validation
    /// (`must-revalidate`, and for a shared cache `proxy-revalidate` and
    /// `s-maxage`, §5.2.2.2, §5.2.2.8, §5.2.2.10).
    pub fn forbids_stale(&self) -> bool {
        self.must_revalidate || self.proxy_revalidate || self.s_maxage.is_some()
    }
}

impl RequestDirectives {
    /// The directives of the request's `Cache-Control` fields, or its `Pragma: no-cache` when it
    /// has none.
    pub fn parse(request: &impl RequestView) -> RequestDirectives {
        let mut found = RequestDirectives::default();
        let mut any_cache_control = false;
        for (name, value) in directives(request.header_values("cache-control")) {
            any_cache_control = true;
            match name.to_ascii_lowercase().as_slice() {
                b"max-age" => set_first(&mut found.max_age, value),
                b"max-stale" if found.max_stale.is_none() => {
                    found.max_stale = Some(match value {
                        None => MaxStale::Any,
                        Some(value) => MaxStale::Seconds(delta_seconds(value).unwrap_or(0)),
                    });
                }
                b"min-fresh" => set_first(&mut found.min_fresh, value),
                b"no-cache" => found.no_cache = true,
                b"no-store" => found.no_store = true,
                b"only-if-cached" => found.only_if_cached = true,
                b"no-transform" => found.no_transform = true,
                b"stale-if-error" => set_first(&mut found.stale_if_error, value),
                _ => {}
            }
        }
        if !any_cache_control {
            found.no_cache = list_elements(request.header_values("pragma"))
                .any(|element| element.eq_ignore_ascii_case(b"no-cache"));
        }
        found
    }
}

/// Keeps the first occurrence of a directive (§4.2.1 allows this for
/// duplicates). A value that is missing or not delta-seconds counts as 0, so
/// a malformed `max-age` makes the response stale rather than fresh forever.
fn set_first(slot: &mut Option<u64>, value: Option<&[u8]>) {
    if slot.is_none() {
        *slot = Some(value.and_then(delta_seconds).unwrap_or(0));
    }
}

/// `1*DIGIT`, saturating at [`DELTA_SECONDS_MAX`]; the quoted form is accepted too.
pub fn delta_seconds(value: &[u8]) -> Option<u64> {
    let value = value
        .strip_prefix(b"\"")
        .and_then(|inner| inner.strip_suffix(b"\""))
        .unwrap_or(value);
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(value.iter().fold(0u64, |total, digit| {
        (total * 10 + u64::from(digit - b'0')).min(DELTA_SECONDS_MAX)
    }))
}

/// `(name, value)` of every directive in these field values.
fn directives<'a>(
    values: impl Iterator<Item = &'a [u8]>,
) -> impl Iterator<Item = (&'a [u8], Option<&'a [u8]>)> {
    list_elements(values).map(|element| match memchr::memchr(b'=', element) {
        Some(at) => (trim(&element[..at]), Some(trim(&element[at + 1..]))),
        None => (element, None),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{Req, Resp};

    #[test]
    fn response_directives_table() {
        let cases: &[(&str, ResponseDirectives)] = &[
            (
                "max-age=60",
                ResponseDirectives {
                    max_age: Some(60),
                    ..Default::default()
                },
            ),
            (
                "S-MaxAge=10, public",
                ResponseDirectives {
                    s_maxage: Some(10),
                    public: true,
                    ..Default::default()
                },
            ),
            (
                "no-store, no-cache, private",
                ResponseDirectives {
                    no_store: true,
                    no_cache: true,
                    private: true,
                    ..Default::default()
                },
            ),
            (
                "no-cache=\"Set-Cookie, X-A\", must-revalidate",
                ResponseDirectives {
                    no_cache: true,
                    must_revalidate: true,
                    ..Default::default()
                },
            ),
            (
                "max-age=\"30\", proxy-revalidate, immutable",
                ResponseDirectives {
                    max_age: Some(30),
                    proxy_revalidate: true,
                    immutable: true,
                    ..Default::default()
                },
            ),
            (
                "max-age=abc",
                ResponseDirectives {
                    max_age: Some(0),
                    ..Default::default()
                },
            ),
            (
                "max-age=99999999999999999999",
                ResponseDirectives {
                    max_age: Some(DELTA_SECONDS_MAX),
                    ..Default::default()
                },
            ),
            (
                "max-age=5, max-age=10",
                ResponseDirectives {
                    max_age: Some(5),
                    ..Default::default()
                },
            ),
            (
                "stale-while-revalidate=30, stale-if-error=600, no-transform, must-understand",
                ResponseDirectives {
                    stale_while_revalidate: Some(30),
                    stale_if_error: Some(600),
                    no_transform: true,
                    must_understand: true,
                    ..Default::default()
                },
            ),
            (
                "unknown-extension=1, community=\"UCI\"",
                ResponseDirectives::default(),
            ),
        ];
        for (value, expected) in cases {
            let response = Resp::new(200).header("Cache-Control", value);
            assert_eq!(ResponseDirectives::parse(&response), *expected, "{value}");
        }
    }

    #[test]
    fn directives_span_several_fields() {
        let response = Resp::new(200)
            .header("Cache-Control", "public")
            .header("cache-control", "max-age=7");
        let found = ResponseDirectives::parse(&response);
        assert!(found.public);
        assert_eq!(found.max_age, Some(7));
    }

    #[test]
    fn request_directives_table() {
        let cases: &[(&[(&str, &str)], RequestDirectives)] = &[
            (
                &[("Cache-Control", "max-age=0")],
                RequestDirectives {
                    max_age: Some(0),
                    ..Default::default()
                },
            ),
            (
                &[("Cache-Control", "max-stale")],
                RequestDirectives {
                    max_stale: Some(MaxStale::Any),
                    ..Default::default()
                },
            ),
            (
                &[("Cache-Control", "max-stale=20, min-fresh=5")],
                RequestDirectives {
                    max_stale: Some(MaxStale::Seconds(20)),
                    min_fresh: Some(5),
                    ..Default::default()
                },
            ),
            (
                &[("Cache-Control", "no-cache, no-store, only-if-cached")],
                RequestDirectives {
                    no_cache: true,
                    no_store: true,
                    only_if_cached: true,
                    ..Default::default()
                },
            ),
            (
                &[("Pragma", "no-cache")],
                RequestDirectives {
                    no_cache: true,
                    ..Default::default()
                },
            ),
            // §5.4: Pragma is ignored when Cache-Control is present.
            (
                &[("Pragma", "no-cache"), ("Cache-Control", "max-stale=1")],
                RequestDirectives {
                    max_stale: Some(MaxStale::Seconds(1)),
                    ..Default::default()
                },
            ),
            (
                &[("Cache-Control", "stale-if-error=9, no-transform")],
                RequestDirectives {
                    stale_if_error: Some(9),
                    no_transform: true,
                    ..Default::default()
                },
            ),
        ];
        for (headers, expected) in cases {
            let mut request = Req::get("/");
            for (name, value) in *headers {
                request = request.header(name, value);
            }
            assert_eq!(RequestDirectives::parse(&request), *expected, "{headers:?}");
        }
    }

    #[test]
    fn forbids_stale() {
        let parse =
            |value| ResponseDirectives::parse(&Resp::new(200).header("cache-control", value));
        assert!(parse("must-revalidate").forbids_stale());
        assert!(parse("proxy-revalidate").forbids_stale());
        assert!(parse("s-maxage=5").forbids_stale());
        assert!(!parse("max-age=5").forbids_stale());
    }
}
