//! Conditional requests both ways: the client's own preconditions answered
//! from a stored response (RFC 9110 §13.2.2 order), the conditional request
//! weir sends to validate a stored response (RFC 9111 §4.3.1), and the
//! merge of a 304's fields into the stored head (§4.3.4).

use crate::date::{UnixTime, parse_http_date};
use crate::object::{HeadBuilder, StoredHead};
use crate::view::{RequestView, ResponseView, list_elements};

/// What the client's preconditions make of a stored response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precondition {
    /// No precondition applies, or all passed: answer normally.
    Pass,
    /// `304 Not Modified`.
    NotModified,
    /// `412 Precondition Failed`.
    Failed,
}

/// Fields a client's request carries that weir removes before it fills or
/// validates an entry (it sends its own validators and needs a whole object).
pub const CLIENT_CONDITIONAL_FIELDS: &[&str] = &[
    "if-match",
    "if-none-match",
    "if-modified-since",
    "if-unmodified-since",
    "if-range",
    "range",
];

/// Fields a 304 from the cache carries (RFC 9110 §15.4.5), and `Via` (the
/// hops the stored response came through, weir's own entry included).
const NOT_MODIFIED_FIELDS: &[&str] = &[
    "cache-control",
    "content-location",
    "date",
    "etag",
    "expires",
    "vary",
    "last-modified",
    "via",
];

/// Fields a 304 from the node must not change in the stored head (§4.3.4 via §3.2),
/// among them every field a response never stores (`object::NOT_STORED`): a 304 must
/// not bring in what the 200 it refreshes could not.
const NOT_UPDATED: &[&str] = &[
    "content-length",
    "content-encoding",
    "content-range",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "upgrade",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authentication-info",
    "age",
];

/// Evaluates the client's preconditions for a GET or HEAD against a stored
/// response with `etag` and `last_modified` (or `date` in its absence, §4.3.2
/// of RFC 9111).
pub fn evaluate(
    request: &impl RequestView,
    etag: Option<&[u8]>,
    last_modified: Option<UnixTime>,
    date: UnixTime,
) -> Precondition {
    let mut if_match = request.header_values("if-match").peekable();
    if if_match.peek().is_some() {
        if !list_matches(if_match, etag, true) {
            return Precondition::Failed;
        }
    } else if let (Some(since), Some(modified)) = (
        request
            .header("if-unmodified-since")
            .and_then(parse_http_date),
        last_modified,
    ) && modified > since
    {
        return Precondition::Failed;
    }
    let mut if_none_match = request.header_values("if-none-match").peekable();
    if if_none_match.peek().is_some() {
        return if list_matches(if_none_match, etag, false) {
            Precondition::NotModified
        } else {
            Precondition::Pass
        };
    }
    if let Some(since) = request
        .header("if-modified-since")
        .and_then(parse_http_date)
        && last_modified.unwrap_or(date) <= since
    {
        return Precondition::NotModified;
    }
    Precondition::Pass
}

/// Whether any entity-tag in the lists matches `etag` (`*` matches any
/// representation); strong comparison for `If-Match`, weak otherwise.
fn list_matches<'a>(
    values: impl Iterator<Item = &'a [u8]>,
    etag: Option<&[u8]>,
    strong: bool,
) -> bool {
    for candidate in list_elements(values) {
        if candidate == b"*" {
            return true;
        }
        if let Some(etag) = etag
            && etags_match(candidate, etag, strong)
        {
            return true;
        }
    }
    false
}

/// RFC 9110 §8.8.3.2 comparison.
pub fn etags_match(a: &[u8], b: &[u8], strong: bool) -> bool {
    let weak_a = a.starts_with(b"W/");
    let weak_b = b.starts_with(b"W/");
    if strong && (weak_a || weak_b) {
        return false;
    }
    let opaque = |tag: &'_ [u8]| -> Vec<u8> { tag.strip_prefix(b"W/").unwrap_or(tag).to_vec() };
    opaque(a) == opaque(b)
}

/// The validators weir sends when it revalidates a stored response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Validators {
    /// The stored `ETag`, sent as `If-None-Match`.
    pub if_none_match: Option<Vec<u8>>,
    /// The stored `Last-Modified`, sent as `If-Modified-Since`.
    pub if_modified_since: Option<Vec<u8>>,
}

impl Validators {
    /// From the stored head: its `ETag` and its `Last-Modified`.
    pub fn of(head: &StoredHead) -> Validators {
        Validators {
            if_none_match: head.header("etag").map(<[u8]>::to_vec),
            if_modified_since: head.header("last-modified").map(<[u8]>::to_vec),
        }
    }

    /// Whether the stored response has no validator (then it cannot be revalidated).
    pub fn is_empty(&self) -> bool {
        self.if_none_match.is_none() && self.if_modified_since.is_none()
    }

    /// The fields to add to the request sent to the node (after removing the
    /// client's [`CLIENT_CONDITIONAL_FIELDS`]).
    pub fn fields(&self) -> impl Iterator<Item = (&'static str, &[u8])> {
        let none_match = self
            .if_none_match
            .as_deref()
            .map(|value| ("If-None-Match", value));
        let modified = self
            .if_modified_since
            .as_deref()
            .map(|value| ("If-Modified-Since", value));
        none_match.into_iter().chain(modified)
    }
}

/// Whether a 304 from the node may update the stored response (§4.3.4): its
/// strong validator, if it has one, must be the stored one, or the one the stored tag was
/// weakened from (`weakened_from`).
pub fn may_update(stored: &StoredHead, not_modified: &impl ResponseView) -> bool {
    match (not_modified.header("etag"), stored.header("etag")) {
        (Some(new), Some(old)) if !new.starts_with(b"W/") => {
            etags_match(new, old, true) || weakened_from(old, new)
        }
        (Some(new), None) if !new.starts_with(b"W/") => false,
        _ => true,
    }
}

/// Whether the stored tag `old` is the node's strong tag `new` weakened: `W/"x"` for
/// `"x"`. A compressed variant carries its identity's tag weakened (weir's compression
/// does that, and so does a node that compresses, nginx's gzip for one), while the node's
/// 304 to the `If-None-Match: W/"x"` it was asked names the strong tag `"x"`. The variant
/// was made from that representation, so the 304 is about it; its own tag stays weak.
fn weakened_from(old: &[u8], new: &[u8]) -> bool {
    old.strip_prefix(b"W/") == Some(new)
}

/// The stored head with the 304's fields replacing those of the same names.
pub fn merge_not_modified(stored: &StoredHead, not_modified: &impl ResponseView) -> StoredHead {
    // A variant whose tag is the 304's weakened keeps its weak tag (see `weakened_from`).
    let keep_weak_tag = matches!(
        (stored.header("etag"), not_modified.header("etag")),
        (Some(old), Some(new)) if weakened_from(old, new)
    );
    // The 304's fields as the response is relayed: the node's, less those its
    // `Connection` names (hop-by-hop, never stored), then the relaying hop's own (its `Via`).
    let hop_by_hop = weir_http::FieldNames::listed(not_modified.header_values("connection"));
    let fields = || {
        not_modified
            .headers()
            .filter(|(name, _)| !hop_by_hop.contains(name))
            .chain(not_modified.hop_fields())
    };
    let kept = |name: &[u8]| {
        (keep_weak_tag && name.eq_ignore_ascii_case(b"etag"))
            || NOT_UPDATED
                .iter()
                .any(|skip| name.eq_ignore_ascii_case(skip.as_bytes()))
    };
    let updated =
        |name: &[u8]| !kept(name) && fields().any(|(new, _)| new.eq_ignore_ascii_case(name));
    let mut builder = HeadBuilder::default();
    for (name, value) in stored.headers() {
        if !updated(name) {
            builder.push(name, value);
        }
    }
    for (name, value) in fields() {
        if updated(name) {
            builder.push(name, value);
        }
    }
    builder.finish(stored.status())
}

/// Whether a stored field goes into a 304 answered from the cache.
pub fn in_not_modified(name: &[u8]) -> bool {
    NOT_MODIFIED_FIELDS
        .iter()
        .any(|kept| name.eq_ignore_ascii_case(kept.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{Req, Resp};

    const MODIFIED: &str = "Sun, 06 Nov 1994 08:49:37 GMT";
    const EARLIER: &str = "Sat, 05 Nov 1994 08:49:37 GMT";
    const LATER: &str = "Mon, 07 Nov 1994 08:49:37 GMT";

    fn eval(headers: &[(&str, &str)], etag: Option<&str>, last_modified: bool) -> Precondition {
        let mut request = Req::get("/");
        for (name, value) in headers {
            request = request.header(name, value);
        }
        let modified = last_modified.then(|| parse_http_date(MODIFIED.as_bytes()).unwrap());
        evaluate(
            &request,
            etag.map(str::as_bytes),
            modified,
            parse_http_date(LATER.as_bytes()).unwrap(),
        )
    }

    #[test]
    #[allow(clippy::too_many_lines, reason = "a table of cases, one per line")]
    fn precondition_table() {
        use Precondition::*;
        type Case<'a> = (
            &'a str,
            &'a [(&'a str, &'a str)],
            Option<&'a str>,
            bool,
            Precondition,
        );
        let cases: &[Case] = &[
            ("none", &[], Some("\"a\""), true, Pass),
            (
                "INM match",
                &[("If-None-Match", "\"a\"")],
                Some("\"a\""),
                true,
                NotModified,
            ),
            (
                "INM weak match",
                &[("If-None-Match", "W/\"a\"")],
                Some("\"a\""),
                true,
                NotModified,
            ),
            (
                "INM list",
                &[("If-None-Match", "\"x\", \"a\"")],
                Some("\"a\""),
                true,
                NotModified,
            ),
            (
                "INM star",
                &[("If-None-Match", "*")],
                Some("\"a\""),
                true,
                NotModified,
            ),
            (
                "INM miss",
                &[("If-None-Match", "\"b\"")],
                Some("\"a\""),
                true,
                Pass,
            ),
            (
                "INM beats IMS",
                &[("If-None-Match", "\"b\""), ("If-Modified-Since", LATER)],
                Some("\"a\""),
                true,
                Pass,
            ),
            (
                "IMS not modified",
                &[("If-Modified-Since", MODIFIED)],
                None,
                true,
                NotModified,
            ),
            (
                "IMS modified",
                &[("If-Modified-Since", EARLIER)],
                None,
                true,
                Pass,
            ),
            (
                "IMS without Last-Modified uses Date",
                &[("If-Modified-Since", LATER)],
                None,
                false,
                NotModified,
            ),
            (
                "IMS invalid",
                &[("If-Modified-Since", "yesterday")],
                None,
                true,
                Pass,
            ),
            (
                "If-Match match",
                &[("If-Match", "\"a\"")],
                Some("\"a\""),
                true,
                Pass,
            ),
            (
                "If-Match weak never",
                &[("If-Match", "W/\"a\"")],
                Some("W/\"a\""),
                true,
                Failed,
            ),
            (
                "If-Match miss",
                &[("If-Match", "\"b\"")],
                Some("\"a\""),
                true,
                Failed,
            ),
            ("If-Match star", &[("If-Match", "*")], None, true, Pass),
            (
                "IUS passed",
                &[("If-Unmodified-Since", LATER)],
                None,
                true,
                Pass,
            ),
            (
                "IUS failed",
                &[("If-Unmodified-Since", EARLIER)],
                None,
                true,
                Failed,
            ),
            (
                "If-Match then INM",
                &[("If-Match", "\"a\""), ("If-None-Match", "\"a\"")],
                Some("\"a\""),
                true,
                NotModified,
            ),
        ];
        for (name, headers, etag, last_modified, expected) in cases {
            assert_eq!(eval(headers, *etag, *last_modified), *expected, "{name}");
        }
    }

    #[test]
    fn validators_from_the_stored_head() {
        let head = StoredHead::from_response(
            &Resp::new(200)
                .header("ETag", "\"v\"")
                .header("Last-Modified", MODIFIED),
            |_| false,
        );
        let validators = Validators::of(&head);
        let fields: Vec<(&str, &[u8])> = validators.fields().collect();
        assert_eq!(
            fields,
            [
                ("If-None-Match", &b"\"v\""[..]),
                ("If-Modified-Since", MODIFIED.as_bytes())
            ]
        );
        let bare = StoredHead::from_response(&Resp::new(200), |_| false);
        assert!(Validators::of(&bare).is_empty());
    }

    #[test]
    fn not_modified_merges_fields() {
        let stored = StoredHead::from_response(
            &Resp::new(200)
                .header("ETag", "\"v\"")
                .header("Cache-Control", "max-age=1")
                .header("Content-Type", "text/plain")
                .header("X-Old", "1"),
            |_| false,
        );
        let not_modified = Resp::new(304)
            .header("Cache-Control", "max-age=60")
            .header("ETag", "\"v\"")
            .header("Content-Length", "0")
            .header("X-New", "2");
        assert!(may_update(&stored, &not_modified));
        let merged = merge_not_modified(&stored, &not_modified);
        let fields: Vec<(String, String)> = merged
            .headers()
            .map(|(n, v)| {
                (
                    String::from_utf8_lossy(n).into(),
                    String::from_utf8_lossy(v).into(),
                )
            })
            .collect();
        let expected = [
            ("Content-Type", "text/plain"),
            ("X-Old", "1"),
            ("Cache-Control", "max-age=60"),
            ("ETag", "\"v\""),
            ("X-New", "2"),
        ];
        assert_eq!(fields, expected.map(|(n, v)| (n.to_owned(), v.to_owned())));
        assert_eq!(merged.status(), 200);
    }

    /// A field never stored from a 200 is not stored from the 304 that refreshes it
    /// either: the proxy-authentication fields were for the hop that got them.
    #[test]
    fn not_modified_brings_in_no_field_a_response_never_stores() {
        let stored = StoredHead::from_response(
            &Resp::new(200)
                .header("ETag", "\"v\"")
                .header("Proxy-Authenticate", "Basic"),
            |_| false,
        );
        assert_eq!(stored.header("proxy-authenticate"), None);
        let not_modified = Resp::new(304)
            .header("ETag", "\"v\"")
            .header("Proxy-Authenticate", "Basic")
            .header("Proxy-Authentication-Info", "nextnonce=\"x\"")
            .header("Keep-Alive", "timeout=5")
            .header("Age", "3");
        let merged = merge_not_modified(&stored, &not_modified);
        let names: Vec<String> = merged
            .headers()
            .map(|(name, _)| String::from_utf8_lossy(name).into())
            .collect();
        assert_eq!(names, ["ETag"]);
    }

    #[test]
    fn a_304_for_another_representation_does_not_update() {
        let stored = StoredHead::from_response(&Resp::new(200).header("ETag", "\"v1\""), |_| false);
        assert!(!may_update(
            &stored,
            &Resp::new(304).header("ETag", "\"v2\"")
        ));
        assert!(may_update(
            &stored,
            &Resp::new(304).header("ETag", "W/\"v2\"")
        ));
        assert!(may_update(&stored, &Resp::new(304)));
    }

    /// A compressed variant stores its identity's tag weakened; the node's 304 names the
    /// strong tag. The variant is updated and keeps its weak tag.
    #[test]
    fn a_304_updates_a_variant_whose_tag_was_weakened() {
        let stored = StoredHead::from_response(
            &Resp::new(200)
                .header("ETag", "W/\"abc\"")
                .header("Content-Encoding", "gzip")
                .header("Cache-Control", "max-age=2"),
            |_| false,
        );
        let not_modified = Resp::new(304)
            .header("ETag", "\"abc\"")
            .header("Cache-Control", "max-age=100000");
        assert!(may_update(&stored, &not_modified));
        let merged = merge_not_modified(&stored, &not_modified);
        assert_eq!(merged.header("etag"), Some(&b"W/\"abc\""[..]));
        assert_eq!(merged.header("cache-control"), Some(&b"max-age=100000"[..]));
        assert_eq!(merged.header("content-encoding"), Some(&b"gzip"[..]));
        // Another strong tag is another representation.
        assert!(!may_update(
            &stored,
            &Resp::new(304).header("ETag", "\"abd\"")
        ));
    }
}
