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
    /// Read from a targeted field (RFC 9213, `CDN-Cache-Control`) rather than
    /// `Cache-Control`: `Expires` is then set aside too.
    pub targeted: bool,
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
                name => found.forbid_from_malformed(name),
            }
            // `max-age=0; private`: the element's value is read the same way (of a quoted
            // one, what follows its closing quote: `foo="x"; private`); `=private` names no
            // directive at all, so its value is all there is to read.
            if let Some(value) = value {
                let rest = match value.first() {
                    Some(b'"') => after_quoted(value),
                    _ => value,
                };
                let rest = rest.to_ascii_lowercase();
                match name.is_empty() {
                    true => found.forbid_words(&rest),
                    false => found.forbid_from_malformed(&rest),
                }
            }
        }
        found
    }

    /// An element whose name (or unquoted value) is not a token (`no-cache; no-store`,
    /// `private;`, `max-age=0; private`) is malformed, but one that spells `no-store`,
    /// `no-cache` or `private` among its words shows what the origin meant: a shared cache
    /// takes the stricter reading (as nginx and Varnish's built-in rules do), not the looser
    /// one of ignoring it. `name` is lower case.
    fn forbid_from_malformed(&mut self, name: &[u8]) {
        if name.iter().all(|&b| weir_http::is_token_char(b)) {
            return;
        }
        self.forbid_words(name);
    }

    /// Sets `no-store`, `no-cache` and `private` for each of them `text` (lower case) has
    /// as a word.
    fn forbid_words(&mut self, text: &[u8]) {
        for word in text.split(|&b| !weir_http::is_token_char(b)) {
            match word {
                b"no-store" => self.no_store = true,
                b"no-cache" => self.no_cache = true,
                b"private" => self.private = true,
                _ => {}
            }
        }
    }

    /// The directives a cache whose targeted fields are `targets` (RFC 9213, most
    /// specific first) acts on: those of the first of them the response carries as a
    /// valid Structured Fields dictionary, with `Cache-Control` and `Expires` set
    /// aside (§2.1); else those of `Cache-Control`. `no-transform` binds every
    /// intermediary, so `Cache-Control`'s still counts either way.
    pub fn for_cache(response: &impl ResponseView, targets: &[String]) -> ResponseDirectives {
        let general = ResponseDirectives::parse(response);
        for target in targets {
            if let Some(mut found) = targeted(response, target) {
                found.no_transform |= general.no_transform;
                return found;
            }
        }
        general
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

/// The directives of the targeted field `name` (RFC 9213 §2): its field lines
/// joined as one Structured Fields dictionary (RFC 9651 §3.2); `None` when the
/// response has none or it does not parse, so that the next target, or
/// `Cache-Control`, decides. Keys are lower case by the grammar, so `MaX-aGe`
/// makes the field invalid. A directive whose value has the wrong type (a string
/// for `max-age`, `?0` for `no-store`) is ignored, not the field; a field-name
/// list given to `no-cache` or `private` counts as the unqualified directive, as in
/// `Cache-Control`.
fn targeted(response: &impl ResponseView, name: &str) -> Option<ResponseDirectives> {
    let mut joined = Vec::new();
    for value in response.header_values(name) {
        if !joined.is_empty() {
            joined.extend_from_slice(b", ");
        }
        joined.extend_from_slice(value);
    }
    if joined.is_empty() && response.header(name).is_none() {
        return None;
    }
    let dictionary: sfv::Dictionary = sfv::Parser::new(&joined).parse().ok()?;
    let mut found = ResponseDirectives {
        targeted: true,
        ..ResponseDirectives::default()
    };
    for (key, entry) in &dictionary {
        let value = match entry {
            sfv::ListEntry::Item(item) => Some(&item.bare_item),
            sfv::ListEntry::InnerList(_) => None,
        };
        let flag = match value {
            Some(sfv::BareItem::Boolean(set)) => *set,
            None => matches!(key.as_str(), "no-cache" | "private"),
            Some(_) => false,
        };
        let seconds = match value {
            Some(sfv::BareItem::Integer(integer)) => u64::try_from(i64::from(*integer))
                .ok()
                .map(|seconds| seconds.min(DELTA_SECONDS_MAX)),
            _ => None,
        };
        match key.as_str() {
            "max-age" => found.max_age = seconds,
            "s-maxage" => found.s_maxage = seconds,
            "stale-while-revalidate" => found.stale_while_revalidate = seconds,
            "stale-if-error" => found.stale_if_error = seconds,
            "no-store" => found.no_store = flag,
            "no-cache" => found.no_cache = flag,
            "private" => found.private = flag,
            "public" => found.public = flag,
            "must-revalidate" => found.must_revalidate = flag,
            "proxy-revalidate" => found.proxy_revalidate = flag,
            "must-understand" => found.must_understand = flag,
            "no-transform" => found.no_transform = flag,
            "immutable" => found.immutable = flag,
            _ => {}
        }
    }
    Some(found)
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

/// What follows the closing quote of the quoted string `value` starts with (a backslash
/// escapes the next byte); empty when it ends there, or never closes.
fn after_quoted(value: &[u8]) -> &[u8] {
    let mut escaped = false;
    for (at, &byte) in value.iter().enumerate().skip(1) {
        match byte {
            _ if escaped => escaped = false,
            b'\\' => escaped = true,
            b'"' => return &value[at + 1..],
            _ => {}
        }
    }
    &[]
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

    /// Malformed elements that still say what the origin meant: the stricter reading.
    #[test]
    fn malformed_elements_that_forbid_are_read_strictly() {
        let cases: &[(&str, ResponseDirectives)] = &[
            (
                "public, max-age=60, no-cache; no-store",
                ResponseDirectives {
                    public: true,
                    max_age: Some(60),
                    no_cache: true,
                    no_store: true,
                    ..Default::default()
                },
            ),
            (
                "max-age=60, Private;",
                ResponseDirectives {
                    max_age: Some(60),
                    private: true,
                    ..Default::default()
                },
            ),
            (
                "s-maxage=60, max-age=0; Private",
                ResponseDirectives {
                    s_maxage: Some(60),
                    max_age: Some(0),
                    private: true,
                    ..Default::default()
                },
            ),
            (
                "max-age=60, x=1;no-cache, stale-if-error=60; no-store",
                ResponseDirectives {
                    max_age: Some(60),
                    stale_if_error: Some(0),
                    no_cache: true,
                    no_store: true,
                    ..Default::default()
                },
            ),
            (
                "max-age=60, community=\"no-cache; private\", ext=private",
                ResponseDirectives {
                    max_age: Some(60),
                    ..Default::default()
                },
            ),
            (
                "s-maxage=60, foo=\"x\"; private, max-age=\"0\"; no-store",
                ResponseDirectives {
                    s_maxage: Some(60),
                    max_age: Some(0),
                    private: true,
                    no_store: true,
                    ..Default::default()
                },
            ),
            (
                "max-age=60, =private",
                ResponseDirectives {
                    max_age: Some(60),
                    private: true,
                    ..Default::default()
                },
            ),
            (
                "max-age=60, a=\"b\\\"; private\", c=\"d\"",
                ResponseDirectives {
                    max_age: Some(60),
                    ..Default::default()
                },
            ),
            (
                "max-age=60, x-private-thing, not;private-ish",
                ResponseDirectives {
                    max_age: Some(60),
                    ..Default::default()
                },
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

    /// RFC 9213 through the cases of the http-tests/cache-tests suite's
    /// `cdn-cache-control` file and a few more: which field decides, and what it says.
    #[test]
    #[allow(clippy::too_many_lines, reason = "a table of cases, one per line")]
    fn targeted_fields_take_the_place_of_cache_control() {
        let cdn = ["cdn-cache-control".to_owned()];
        let read = |fields: &[(&str, &str)], targets: &[String]| {
            let mut response = Resp::new(200);
            for (name, value) in fields {
                response = response.header(name, value);
            }
            ResponseDirectives::for_cache(&response, targets)
        };
        let targeted = |max_age: Option<u64>| ResponseDirectives {
            max_age,
            targeted: true,
            ..Default::default()
        };
        let from_cc =
            |value: &str| ResponseDirectives::parse(&Resp::new(200).header("Cache-Control", value));
        let cases: &[(&[(&str, &str)], ResponseDirectives)] = &[
            (
                &[("CDN-Cache-Control", "max-age=3600")],
                targeted(Some(3600)),
            ),
            // capped as delta-seconds are; an extension directive is ignored
            (
                &[("CDN-Cache-Control", "max-age=99999999999")],
                targeted(Some(DELTA_SECONDS_MAX)),
            ),
            (
                &[("CDN-Cache-Control", "foobar, max-age=3600")],
                targeted(Some(3600)),
            ),
            // it beats Cache-Control both ways
            (
                &[
                    ("Cache-Control", "max-age=1"),
                    ("CDN-Cache-Control", "max-age=3600"),
                ],
                targeted(Some(3600)),
            ),
            (
                &[
                    ("Cache-Control", "no-store"),
                    ("CDN-Cache-Control", "max-age=10000"),
                ],
                targeted(Some(10000)),
            ),
            (
                &[
                    ("CDN-Cache-Control", "private"),
                    ("Cache-Control", "max-age=10000"),
                ],
                ResponseDirectives {
                    private: true,
                    targeted: true,
                    ..Default::default()
                },
            ),
            (
                &[("CDN-Cache-Control", "no-cache=(\"set-cookie\")")],
                ResponseDirectives {
                    no_cache: true,
                    targeted: true,
                    ..Default::default()
                },
            ),
            // a wrong type: the directive is ignored, the field still decides
            (
                &[
                    ("CDN-Cache-Control", "max-age=\"10000\""),
                    ("Cache-Control", "no-store"),
                ],
                targeted(None),
            ),
            (
                &[("CDN-Cache-Control", "no-store=?0, max-age=5")],
                targeted(Some(5)),
            ),
            (&[("CDN-Cache-Control", "max-age=-1")], targeted(None)),
            // not a dictionary: Cache-Control decides
            (
                &[
                    ("CDN-Cache-Control", "max-age=10000, &&&&&"),
                    ("Cache-Control", "no-store"),
                ],
                from_cc("no-store"),
            ),
            (
                &[
                    ("CDN-Cache-Control", "MaX-aGe=3600"),
                    ("Cache-Control", "max-age=1"),
                ],
                from_cc("max-age=1"),
            ),
            (
                &[
                    ("CDN-Cache-Control", "max-age =100"),
                    ("Cache-Control", "max-age=1"),
                ],
                from_cc("max-age=1"),
            ),
            (
                &[
                    ("CDN-Cache-Control", "max-age= 100"),
                    ("Cache-Control", "max-age=1"),
                ],
                from_cc("max-age=1"),
            ),
            // several field lines make one dictionary
            (
                &[
                    ("CDN-Cache-Control", "max-age=60"),
                    ("CDN-Cache-Control", "must-revalidate"),
                ],
                ResponseDirectives {
                    max_age: Some(60),
                    must_revalidate: true,
                    targeted: true,
                    ..Default::default()
                },
            ),
            // no-transform binds every intermediary: Cache-Control's still counts
            (
                &[
                    ("CDN-Cache-Control", "max-age=60"),
                    ("Cache-Control", "no-transform"),
                ],
                ResponseDirectives {
                    max_age: Some(60),
                    no_transform: true,
                    targeted: true,
                    ..Default::default()
                },
            ),
        ];
        for (fields, expected) in cases {
            assert_eq!(read(fields, &cdn), *expected, "{fields:?}");
        }
        // with no targets, or other ones, the field is only a header
        let fields: &[(&str, &str)] = &[
            ("CDN-Cache-Control", "max-age=3600"),
            ("Cache-Control", "max-age=1"),
        ];
        assert_eq!(read(fields, &[]), from_cc("max-age=1"));
        // the first target present and valid wins
        let own = [
            "weir-cache-control".to_owned(),
            "cdn-cache-control".to_owned(),
        ];
        assert_eq!(read(fields, &own), targeted(Some(3600)));
        let both: &[(&str, &str)] = &[
            ("CDN-Cache-Control", "max-age=3600"),
            ("Weir-Cache-Control", "max-age=7"),
        ];
        assert_eq!(read(both, &own), targeted(Some(7)));
        let broken: &[(&str, &str)] = &[
            ("CDN-Cache-Control", "max-age=3600"),
            ("Weir-Cache-Control", "&"),
        ];
        assert_eq!(read(broken, &own), targeted(Some(3600)));
    }
}
