//! Borrowed views of a request and a response: what the cache reads, and no
//! more. weir-http's heads implement them (HTTP/2 streams are normalised into
//! the same heads at the codec boundary), and so do the owned test messages.

use weir_http::{RequestHead, ResponseHead};

/// The scheme a request arrived with; part of the cache key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// Plain HTTP.
    Http,
    /// HTTP over TLS.
    Https,
}

/// What the cache reads from a request.
pub trait RequestView {
    /// The method token as sent (`GET`, `HEAD`, ...).
    fn method(&self) -> &[u8];
    /// The scheme the request arrived with.
    fn scheme(&self) -> Scheme;
    /// `Host` or the `:authority`; `None` when the request has neither.
    fn authority(&self) -> Option<&[u8]>;
    /// The path and the query (`/a/b?c=d`), without the scheme and authority.
    fn path_and_query(&self) -> &[u8];
    /// Every header field in order, names in any case.
    fn headers(&self) -> impl Iterator<Item = (&[u8], &[u8])>;

    /// Every value of the fields called `name` (ASCII case-insensitive), in order.
    fn header_values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> {
        self.headers()
            .filter(move |(field, _)| field.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, value)| value)
    }

    /// The first value of the field called `name`.
    fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers()
            .find(|(field, _)| field.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, value)| value)
    }

    /// Whether the request may carry a precondition or a range (`If-Match`,
    /// `If-None-Match`, `If-Modified-Since`, `If-Unmodified-Since`, `Range`,
    /// `If-Range`): `false` only when it certainly carries none, so that a hit
    /// for a plain request skips their evaluation.
    fn may_be_conditional(&self) -> bool {
        true
    }
}

/// What the cache reads from a response head.
pub trait ResponseView {
    /// The status code.
    fn status(&self) -> u16;
    /// Every header field in order, names in any case.
    fn headers(&self) -> impl Iterator<Item = (&[u8], &[u8])>;

    /// Fields the hop that relays the response adds after the sender's (its `Via` entry):
    /// stored after them, and never taken for one the sender's `Connection` names.
    fn hop_fields(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        std::iter::empty()
    }

    /// Every value of the fields called `name` (ASCII case-insensitive), in order.
    fn header_values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> {
        self.headers()
            .filter(move |(field, _)| field.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, value)| value)
    }

    /// The first value of the field called `name` (ASCII case-insensitive).
    fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers()
            .find(|(field, _)| field.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, value)| value)
    }
}

/// An HTTP/1.1 request head with the scheme of the connection it came on
/// (the head alone cannot tell `http` from `https`).
#[derive(Debug, Clone, Copy)]
pub struct Http1Request<'a> {
    /// The parsed request head.
    pub head: &'a RequestHead,
    /// The scheme of the connection it came on.
    pub scheme: Scheme,
}

impl RequestView for Http1Request<'_> {
    fn method(&self) -> &[u8] {
        self.head.method_bytes()
    }

    fn scheme(&self) -> Scheme {
        self.scheme
    }

    fn authority(&self) -> Option<&[u8]> {
        self.head.host()
    }

    /// In absolute form, what follows the authority: `http://h?q` gives `?q`, which the
    /// key reads as `/?q` (RFC 9112 §3.2.2: an empty path is `/`, and the query stays).
    fn path_and_query(&self) -> &[u8] {
        self.head.path_and_query()
    }

    fn headers(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.head.headers()
    }
}

impl ResponseView for ResponseHead {
    fn status(&self) -> u16 {
        ResponseHead::status(self)
    }

    fn headers(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        ResponseHead::headers(self)
    }
}

/// The request fields the cache asks about, each looked up by name several
/// times per lookup.
const WATCHED: [&str; 10] = [
    "cache-control",
    "pragma",
    "accept-encoding",
    "if-match",
    "if-none-match",
    "if-modified-since",
    "if-unmodified-since",
    "range",
    "if-range",
    "authorization",
];

/// The [`WATCHED`] fields that make a request conditional or ranged.
const CONDITIONAL: u16 = 0b1_1111_1000;

/// A request with one pass over its fields done up front: which of the
/// [`WATCHED`] fields it has. Looking up one it lacks then costs nothing,
/// which is most of them on a typical request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scanned<'a, R> {
    request: &'a R,
    present: u16,
}

impl<'a, R: RequestView> Scanned<'a, R> {
    pub(crate) fn new(request: &'a R) -> Self {
        let mut present = 0u16;
        for (name, _) in request.headers() {
            if let Some(index) = WATCHED.iter().position(|watched| {
                watched.len() == name.len() && name.eq_ignore_ascii_case(watched.as_bytes())
            }) {
                present |= 1 << index;
            }
        }
        Scanned { request, present }
    }

    /// Whether `name` (lower case) may be present: `false` only for a
    /// watched field the scan did not see.
    fn may_have(&self, name: &str) -> bool {
        WATCHED
            .iter()
            .position(|watched| *watched == name)
            .is_none_or(|index| self.present & (1 << index) != 0)
    }
}

impl<R: RequestView> RequestView for Scanned<'_, R> {
    fn method(&self) -> &[u8] {
        self.request.method()
    }

    fn scheme(&self) -> Scheme {
        self.request.scheme()
    }

    fn authority(&self) -> Option<&[u8]> {
        self.request.authority()
    }

    fn path_and_query(&self) -> &[u8] {
        self.request.path_and_query()
    }

    fn headers(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.request.headers()
    }

    fn header_values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> {
        let limit = if self.may_have(name) { usize::MAX } else { 0 };
        // `take(0)` never polls the inner iterator: no scan at all.
        self.request.header_values(name).take(limit)
    }

    fn header(&self, name: &str) -> Option<&[u8]> {
        if self.may_have(name) {
            self.request.header(name)
        } else {
            None
        }
    }

    fn may_be_conditional(&self) -> bool {
        self.present & CONDITIONAL != 0
    }
}

/// Comma-separated list elements across every field of a name, trimmed,
/// empty elements skipped (RFC 9110 §5.6.1). Quoted commas are respected.
pub(crate) fn list_elements<'a>(
    values: impl Iterator<Item = &'a [u8]>,
) -> impl Iterator<Item = &'a [u8]> {
    values
        .flat_map(weir_http::split_list)
        .filter(|element| !element.is_empty())
}

/// Removes optional whitespace (spaces and tabs) at both ends.
pub(crate) fn trim(bytes: &[u8]) -> &[u8] {
    let start = bytes
        .iter()
        .position(|b| *b != b' ' && *b != b'\t')
        .unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| *b != b' ' && *b != b'\t')
        .map_or(start, |at| at + 1);
    &bytes[start..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_http::{Limits, Method, Parsed, parse_request, parse_response};

    fn request(raw: &[u8]) -> RequestHead {
        match parse_request(raw, &Limits::default()) {
            Ok(Parsed::Complete(head, _)) => head,
            other => panic!("not a complete request: {other:?}"),
        }
    }

    #[test]
    fn http1_request_view() {
        let head = request(
            b"GET /a/b?c=1 HTTP/1.1\r\nHost: Example.com\r\nAccept: x\r\naccept: y\r\n\r\n",
        );
        let view = Http1Request {
            head: &head,
            scheme: Scheme::Https,
        };
        assert_eq!(view.method(), b"GET");
        assert_eq!(view.authority(), Some(&b"Example.com"[..]));
        assert_eq!(view.path_and_query(), b"/a/b?c=1");
        let values: Vec<&[u8]> = view.header_values("ACCEPT").collect();
        assert_eq!(values, [&b"x"[..], b"y"]);
    }

    /// The key of an absolute-form request is its origin-form twin's, query and all: an
    /// empty path is `/`, and `http://h?q` is `/?q`, never `/` (whose entry it would
    /// fill for every client asking for `/`).
    #[test]
    fn absolute_form_targets_key_like_their_origin_form() {
        let key = |raw: &[u8]| {
            let head = request(raw);
            let view = Http1Request {
                head: &head,
                scheme: Scheme::Http,
            };
            let mut key = Vec::new();
            assert!(crate::key::primary_key(&view, &mut key));
            String::from_utf8(key).unwrap()
        };
        for (absolute, origin) in [
            ("http://h.example/p?q", "/p?q"),
            ("http://h.example", "/"),
            ("http://h.example?evil=1", "/?evil=1"),
            ("http://h.example:80?evil=1", "/?evil=1"),
        ] {
            assert_eq!(
                key(format!("GET {absolute} HTTP/1.1\r\nHost: h.example\r\n\r\n").as_bytes()),
                key(format!("GET {origin} HTTP/1.1\r\nHost: h.example\r\n\r\n").as_bytes()),
                "{absolute}"
            );
        }
        assert_eq!(
            key(b"GET http://h.example?evil=1 HTTP/1.0\r\n\r\n"),
            "http://h.example/?evil=1"
        );
    }

    #[test]
    fn response_head_view() {
        let raw = b"HTTP/1.1 200 OK\r\nCache-Control: max-age=5\r\nContent-Length: 0\r\n\r\n";
        let head = match parse_response(raw, &Limits::default(), Method::Get) {
            Ok(Parsed::Complete(head, _)) => head,
            other => panic!("{other:?}"),
        };
        assert_eq!(ResponseView::status(&head), 200);
        assert_eq!(
            ResponseView::header(&head, "cache-control"),
            Some(&b"max-age=5"[..])
        );
    }

    #[test]
    fn scanned_requests_answer_like_the_request() {
        let head = request(b"GET / HTTP/1.1\r\nHost: h\r\nRange: bytes=0-1\r\nX-Other: 1\r\nrange: bytes=2-3\r\n\r\n");
        let view = Http1Request {
            head: &head,
            scheme: Scheme::Http,
        };
        let scanned = Scanned::new(&view);
        for name in WATCHED.iter().copied().chain(["x-other", "host"]) {
            assert_eq!(
                scanned.header_values(name).collect::<Vec<_>>(),
                view.header_values(name).collect::<Vec<_>>(),
                "{name}"
            );
            assert_eq!(scanned.header(name), view.header(name), "{name}");
        }
        assert!(scanned.may_be_conditional());
    }

    #[test]
    fn scanned_requests_know_whether_they_are_conditional() {
        let conditional = [
            "If-Match: \"a\"",
            "if-none-match: *",
            "If-Modified-Since: Sun, 06 Nov 1994 08:49:37 GMT",
            "If-Unmodified-Since: Sun, 06 Nov 1994 08:49:37 GMT",
            "Range: bytes=0-1",
            "If-Range: \"a\"",
        ];
        for field in conditional {
            let raw = format!("GET / HTTP/1.1\r\nHost: h\r\n{field}\r\n\r\n");
            let head = request(raw.as_bytes());
            let view = Http1Request {
                head: &head,
                scheme: Scheme::Http,
            };
            assert!(Scanned::new(&view).may_be_conditional(), "{field}");
        }
        let head = request(
            b"GET / HTTP/1.1\r\nHost: h\r\nCache-Control: no-cache\r\nAccept-Encoding: gzip\r\nAuthorization: x\r\nPragma: no-cache\r\n\r\n",
        );
        let view = Http1Request {
            head: &head,
            scheme: Scheme::Http,
        };
        assert!(!Scanned::new(&view).may_be_conditional());
        let named = WATCHED
            .iter()
            .enumerate()
            .filter(|(_, name)| name.starts_with("if-") || **name == "range")
            .fold(0u16, |mask, (index, _)| mask | 1 << index);
        assert_eq!(CONDITIONAL, named);
    }

    #[test]
    fn list_elements_respect_quotes() {
        let values = [&b"a, \"b,c\" ,, d"[..], b"e"];
        let elements: Vec<&[u8]> = list_elements(values.into_iter()).collect();
        assert_eq!(elements, [&b"a"[..], b"\"b,c\"", b"d", b"e"]);
    }
}
