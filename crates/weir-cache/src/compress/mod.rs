//! Compression: which responses are compressed, with what, and how their
//! heads change; the streaming encoders are in [`encoder`].
//!
//! A response is compressed when the route enables it, the client accepts a
//! coding (see [`AcceptEncoding::choose`]), and the response is eligible: a
//! 200, 203, 404 or 410 with a listed, not already compressed content type,
//! no `Content-Encoding`, no `Content-Range`, no `no-transform`, and a body of
//! at least `min_size` bytes when its length is declared. An eligible
//! response gets `Vary: Accept-Encoding` whether or not this client's copy is
//! compressed, so that caches downstream key it right. A HEAD and a relayed
//! 304 get the head of the 200 the same client's GET would get
//! ([`CompressionPolicy::passed_on`]).

pub mod encoder;
pub mod negotiate;

use std::borrow::Cow;

pub use encoder::{Compressor, Levels};
pub use negotiate::{AcceptEncoding, Coding};

use crate::directives::ResponseDirectives;
use crate::policy::storable::content_length;
use crate::view::{RequestView, ResponseView, list_elements, trim};

/// The compression settings of one route (from `[compression]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompressionPolicy {
    /// Codings offered, in order of preference; empty turns compression off.
    pub codings: Vec<Coding>,
    /// The level of each coding.
    pub levels: Levels,
    /// Bodies declared shorter than this are sent as they are.
    pub min_size: u64,
    /// Media types compressed, lower case: `text/html`, or `text/*` for a whole type.
    pub content_types: Vec<String>,
}

/// Media types that are compressed already and never compressed again,
/// whatever `content_types` says.
const COMPRESSED_TYPES: &[&str] = &[
    "image/jpeg",
    "image/png",
    "image/gif",
    "image/webp",
    "image/avif",
    "font/woff",
    "font/woff2",
    "application/zip",
    "application/gzip",
    "application/zstd",
    "application/x-brotli",
    "application/x-7z-compressed",
    "application/vnd.rar",
    "application/pdf",
];

/// How a response head changes when weir compresses (or could compress) it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadEdits {
    /// The coding applied; `Identity` when only `Vary` is added.
    pub coding: Coding,
}

/// What compression does to a response weir passes on rather than answers from a store
/// ([`CompressionPolicy::passed_on`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Passed {
    /// The head's edits: those of the 200 a GET gets, for a HEAD and a 304 too.
    pub edits: HeadEdits,
    /// Whether a body follows to go through the coding (not for HEAD or 304).
    pub body: bool,
}

impl Default for CompressionPolicy {
    fn default() -> CompressionPolicy {
        CompressionPolicy {
            codings: Coding::COMPRESSED.to_vec(),
            levels: Levels::default(),
            min_size: 1024,
            content_types: [
                "text/*",
                "application/json",
                "application/javascript",
                "application/xml",
                "application/xhtml+xml",
                "application/rss+xml",
                "application/atom+xml",
                "application/manifest+json",
                "application/ld+json",
                "application/wasm",
                "image/svg+xml",
                "image/x-icon",
                "font/ttf",
                "font/otf",
            ]
            .map(String::from)
            .to_vec(),
        }
    }
}

impl CompressionPolicy {
    /// Whether weir may compress `response` (independent of the client).
    pub fn eligible(&self, response: &impl ResponseView, directives: &ResponseDirectives) -> bool {
        if self.codings.is_empty()
            || !matches!(response.status(), 200 | 203 | 404 | 410)
            || directives.no_transform
            || response.header("content-range").is_some()
        {
            return false;
        }
        let encoded = list_elements(response.header_values("content-encoding"))
            .any(|coding| !coding.eq_ignore_ascii_case(b"identity"));
        if encoded {
            return false;
        }
        if content_length(response).is_some_and(|length| length < self.min_size) {
            return false;
        }
        response
            .header("content-type")
            .is_some_and(|value| self.compresses_type(value))
    }

    /// Whether the media type of a `Content-Type` value is listed and not
    /// one that is compressed already.
    pub fn compresses_type(&self, content_type: &[u8]) -> bool {
        let essence = trim(
            content_type
                .split(|b| *b == b';')
                .next()
                .unwrap_or_default(),
        );
        let essence = essence.to_ascii_lowercase();
        if COMPRESSED_TYPES
            .iter()
            .any(|known| known.as_bytes() == essence)
        {
            return false;
        }
        // gRPC compresses its messages itself (`grpc-encoding`), and its answer ends in
        // trailers (`grpc-status`) that a compressed body could not carry: never, whatever
        // `content_types` says (`*/*`, `application/*`).
        if essence == b"application/grpc" || essence.starts_with(b"application/grpc+") {
            return false;
        }
        let Some(slash) = memchr::memchr(b'/', &essence) else {
            return false;
        };
        self.content_types
            .iter()
            .any(|listed| match listed.strip_suffix("/*") {
                // `*/*`: every type (but those compressed already, above).
                Some("*") => true,
                Some(top) => top.as_bytes() == &essence[..slash],
                None => listed.as_bytes() == essence,
            })
    }

    /// The coding for a client, among those offered.
    pub fn choose(&self, accept: &AcceptEncoding) -> Coding {
        accept.choose(&self.codings)
    }

    /// How a response passed on to the client changes, for a client given `coding` (the
    /// request's choice, `Identity` where it says `no-transform`); `None`: not at all.
    ///
    /// An eligible response gets the edits whatever the method, so a HEAD carries the
    /// head its GET would (the coding, `Vary`, the weakened tag, no identity length), with
    /// no body to compress. A 304 has no body or type to judge: it describes the copy the
    /// client holds, so it gets the compressed 200's tag and `Vary` when this client
    /// would get that copy, and the `Vary` alone (as every 200 of the kind carries it) when
    /// the client is given the identity copy or its `If-None-Match` names the node's strong
    /// tag as it is (it holds an identity copy); nothing when the 304 says it is of another
    /// kind (encoded already, an uncompressed type, `no-transform`). It gets no
    /// `Content-Encoding`, as a 304 answered from a store does not ([`HeadEdits::apply`]).
    pub fn passed_on(
        &self,
        request: &impl RequestView,
        response: &impl ResponseView,
        directives: &ResponseDirectives,
        coding: Coding,
    ) -> Option<Passed> {
        if response.status() == 304 {
            return self
                .describes(request, response, directives, coding)
                .map(|coding| Passed {
                    edits: HeadEdits { coding },
                    body: false,
                });
        }
        self.eligible(response, directives).then(|| Passed {
            edits: HeadEdits { coding },
            body: request.method() != b"HEAD",
        })
    }

    /// Which copy a 304 to this request is about: the one compressed with `coding`, the
    /// identity one (`Identity`), or `None` when it is of a kind weir does not compress.
    fn describes(
        &self,
        request: &impl RequestView,
        not_modified: &impl ResponseView,
        directives: &ResponseDirectives,
        coding: Coding,
    ) -> Option<Coding> {
        if self.codings.is_empty() || directives.no_transform {
            return None;
        }
        let encoded = list_elements(not_modified.header_values("content-encoding"))
            .any(|coding| !coding.eq_ignore_ascii_case(b"identity"));
        let other_type = not_modified
            .header("content-type")
            .is_some_and(|value| !self.compresses_type(value));
        if encoded || other_type {
            return None;
        }
        let held_as_is = not_modified
            .header("etag")
            .map(trim)
            .filter(|tag| !tag.starts_with(b"W/"))
            .is_some_and(|tag| {
                list_elements(request.header_values("if-none-match")).any(|named| named == tag)
            });
        Some(match held_as_is {
            true => Coding::Identity,
            false => coding,
        })
    }
}

/// Fields of a node's response that describe its bytes as they were, dropped when they are
/// compressed.
const NOT_OF_THE_CODED_BYTES: [&[u8]; 7] = [
    b"content-length",
    b"content-encoding",
    b"accept-ranges",
    b"content-md5",
    b"digest",
    b"content-digest",
    b"repr-digest",
];

impl HeadEdits {
    /// `response`'s fields as sent after the edits: no `Content-Length` when
    /// compressed (the length is no longer known), a strong `ETag` weakened
    /// (the bytes differ from the node's), `Accept-Encoding` added to `Vary`,
    /// and `Content-Encoding` set — except on a 304, which carries only the
    /// fields RFC 9110 §15.4.5 names of the representation (as one answered
    /// from a store does). A compressed answer also loses what described the
    /// node's bytes: `Accept-Ranges` (the node's ranges are offsets in those, not in
    /// the compressed ones a client would resume) and the digests of that content
    /// (`Content-MD5`, `Digest`, `Content-Digest`, `Repr-Digest`: RFC 9530).
    pub fn apply<'a>(
        self,
        response: &'a impl ResponseView,
    ) -> impl Iterator<Item = (&'a [u8], Cow<'a, [u8]>)> + 'a {
        let compressed = self.coding != Coding::Identity;
        let not_modified = response.status() == 304;
        let has_vary = response.header("vary").is_some();
        let varies = list_elements(response.header_values("vary"))
            .any(|name| name.eq_ignore_ascii_case(b"accept-encoding") || name == b"*");
        let mut vary_done = varies;
        let edited = response.headers().filter_map(move |(name, value)| {
            if compressed
                && NOT_OF_THE_CODED_BYTES
                    .iter()
                    .any(|field| name.eq_ignore_ascii_case(field))
            {
                return None;
            }
            if compressed && name.eq_ignore_ascii_case(b"etag") && !value.starts_with(b"W/") {
                let mut weak = b"W/".to_vec();
                weak.extend_from_slice(value);
                return Some((name, Cow::Owned(weak)));
            }
            if name.eq_ignore_ascii_case(b"vary") && !vary_done {
                vary_done = true;
                let mut extended = trim(value).to_vec();
                if !extended.is_empty() {
                    extended.extend_from_slice(b", ");
                }
                extended.extend_from_slice(b"Accept-Encoding");
                return Some((name, Cow::Owned(extended)));
            }
            Some((name, Cow::Borrowed(value)))
        });
        let vary = (!has_vary).then_some((&b"Vary"[..], Cow::Borrowed(&b"Accept-Encoding"[..])));
        let encoding = (compressed && !not_modified).then(|| {
            (
                &b"Content-Encoding"[..],
                Cow::Borrowed(self.coding.token().as_bytes()),
            )
        });
        edited.chain(vary).chain(encoding)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Resp;

    fn eligible(response: &Resp) -> bool {
        CompressionPolicy::default().eligible(response, &ResponseDirectives::parse(response))
    }

    #[test]
    fn eligibility_table() {
        let html = || Resp::new(200).header("Content-Type", "text/html; charset=utf-8");
        let cases: Vec<(&str, Resp, bool)> = vec![
            ("html", html(), true),
            (
                "json",
                Resp::new(200).header("Content-Type", "Application/JSON"),
                true,
            ),
            (
                "svg",
                Resp::new(200).header("Content-Type", "image/svg+xml"),
                true,
            ),
            ("no type", Resp::new(200), false),
            (
                "png",
                Resp::new(200).header("Content-Type", "image/png"),
                false,
            ),
            (
                "octet-stream",
                Resp::new(200).header("Content-Type", "application/octet-stream"),
                false,
            ),
            (
                "already gzip",
                html().header("Content-Encoding", "gzip"),
                false,
            ),
            (
                "identity coding",
                html().header("Content-Encoding", "identity"),
                true,
            ),
            (
                "no-transform",
                html().header("Cache-Control", "no-transform"),
                false,
            ),
            ("small", html().header("Content-Length", "1023"), false),
            ("min size", html().header("Content-Length", "1024"), true),
            (
                "range",
                html().header("Content-Range", "bytes 0-1/5"),
                false,
            ),
            (
                "206",
                Resp::new(206).header("Content-Type", "text/html"),
                false,
            ),
            (
                "304",
                Resp::new(304).header("Content-Type", "text/html"),
                false,
            ),
            (
                "404",
                Resp::new(404).header("Content-Type", "text/html"),
                true,
            ),
        ];
        for (name, response, expected) in cases {
            assert_eq!(eligible(&response), expected, "{name}");
        }
        let off = CompressionPolicy {
            codings: Vec::new(),
            ..CompressionPolicy::default()
        };
        assert!(!off.eligible(&html(), &ResponseDirectives::default()));
        // Listed by the operator, but compressed already: still left alone.
        let everything = CompressionPolicy {
            content_types: vec!["image/*".into()],
            ..CompressionPolicy::default()
        };
        assert!(!everything.compresses_type(b"image/jpeg"));
        assert!(everything.compresses_type(b"image/bmp"));
    }

    #[test]
    fn head_and_304_are_passed_on_with_the_edits_of_the_compressed_200() {
        use crate::testing::Req;
        let policy = CompressionPolicy::default();
        let passed = |request: &Req, response: &Resp, coding: Coding| {
            policy.passed_on(
                request,
                response,
                &ResponseDirectives::parse(response),
                coding,
            )
        };
        let html = Resp::new(200)
            .header("Content-Type", "text/html")
            .header("ETag", "\"x\"");
        let gzip = Some(Passed {
            edits: HeadEdits {
                coding: Coding::Gzip,
            },
            body: true,
        });
        assert_eq!(passed(&Req::get("/"), &html, Coding::Gzip), gzip);
        assert_eq!(
            passed(&Req::new("HEAD", "/"), &html, Coding::Gzip),
            gzip.map(|p| Passed { body: false, ..p })
        );
        let png = Resp::new(200).header("Content-Type", "image/png");
        assert_eq!(passed(&Req::new("HEAD", "/"), &png, Coding::Gzip), None);

        let revalidated = Some(Passed {
            edits: HeadEdits {
                coding: Coding::Gzip,
            },
            body: false,
        });
        // An identity copy's 304 keeps the tag and gets the `Vary` every 200 carries.
        let vary_only = Some(Passed {
            edits: HeadEdits {
                coding: Coding::Identity,
            },
            body: false,
        });
        let not_modified = Resp::new(304).header("ETag", "\"x\"");
        let holds_compressed = Req::get("/").header("If-None-Match", "W/\"x\"");
        let cases = [
            (
                "compressed copy",
                &holds_compressed,
                not_modified.clone(),
                Coding::Gzip,
                revalidated,
            ),
            (
                "identity client",
                &holds_compressed,
                not_modified.clone(),
                Coding::Identity,
                vary_only,
            ),
            (
                "another type",
                &holds_compressed,
                not_modified.clone().header("Content-Type", "image/png"),
                Coding::Gzip,
                None,
            ),
            (
                "encoded already",
                &holds_compressed,
                not_modified.clone().header("Content-Encoding", "br"),
                Coding::Gzip,
                None,
            ),
            (
                "no-transform",
                &holds_compressed,
                not_modified.clone().header("Cache-Control", "no-transform"),
                Coding::Gzip,
                None,
            ),
        ];
        for (name, request, response, coding, expected) in cases {
            assert_eq!(passed(request, &response, coding), expected, "{name}");
        }
        let holds_identity = Req::get("/").header("If-None-Match", "\"y\", \"x\"");
        assert_eq!(
            passed(&holds_identity, &not_modified, Coding::Gzip),
            vary_only
        );
        assert_eq!(
            edited(&not_modified, Coding::Identity),
            vec![
                ("ETag".to_owned(), "\"x\"".to_owned()),
                ("Vary".to_owned(), "Accept-Encoding".to_owned()),
            ]
        );
        // A 304 edited keeps its fields: the tag weakened and `Vary`, no coding.
        assert_eq!(
            edited(&not_modified, Coding::Gzip),
            vec![
                ("ETag".to_owned(), "W/\"x\"".to_owned()),
                ("Vary".to_owned(), "Accept-Encoding".to_owned()),
            ]
        );
    }

    #[test]
    fn every_type_is_star_slash_star() {
        let policy = CompressionPolicy {
            content_types: vec!["*/*".to_owned()],
            ..CompressionPolicy::default()
        };
        assert!(policy.compresses_type(b"text/html"));
        assert!(policy.compresses_type(b"application/x-anything; charset=utf-8"));
        // Compressed already: never again.
        assert!(!policy.compresses_type(b"image/png"));
        assert!(!policy.compresses_type(b"no-slash"));
        // gRPC: its own message compression, and trailers a compressed body would lose.
        for grpc in [
            "application/grpc",
            "Application/gRPC+proto",
            "application/grpc; x=1",
        ] {
            assert!(!policy.compresses_type(grpc.as_bytes()), "{grpc}");
        }
        assert!(policy.compresses_type(b"application/grpc-web-text"));
    }

    fn edited(response: &Resp, coding: Coding) -> Vec<(String, String)> {
        HeadEdits { coding }
            .apply(response)
            .map(|(n, v)| {
                (
                    String::from_utf8_lossy(n).into(),
                    String::from_utf8_lossy(&v).into(),
                )
            })
            .collect()
    }

    #[test]
    fn head_edits() {
        let response = Resp::new(200)
            .header("Content-Type", "text/plain")
            .header("Content-Length", "5000")
            .header("Accept-Ranges", "bytes")
            .header("Content-Digest", "sha-256=:AAAA:")
            .header("Content-MD5", "Q2hlY2sgSW50ZWdyaXR5IQ==")
            .header("ETag", "\"abc\"");
        let pairs = |list: &[(&str, &str)]| -> Vec<(String, String)> {
            list.iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect()
        };
        assert_eq!(
            edited(&response, Coding::Brotli),
            pairs(&[
                ("Content-Type", "text/plain"),
                ("ETag", "W/\"abc\""),
                ("Vary", "Accept-Encoding"),
                ("Content-Encoding", "br"),
            ])
        );
        assert_eq!(
            edited(&response, Coding::Identity),
            pairs(&[
                ("Content-Type", "text/plain"),
                ("Content-Length", "5000"),
                ("Accept-Ranges", "bytes"),
                ("Content-Digest", "sha-256=:AAAA:"),
                ("Content-MD5", "Q2hlY2sgSW50ZWdyaXR5IQ=="),
                ("ETag", "\"abc\""),
                ("Vary", "Accept-Encoding"),
            ])
        );
        let varied = Resp::new(200)
            .header("Vary", "Accept-Language")
            .header("ETag", "W/\"w\"");
        assert_eq!(
            edited(&varied, Coding::Gzip),
            pairs(&[
                ("Vary", "Accept-Language, Accept-Encoding"),
                ("ETag", "W/\"w\""),
                ("Content-Encoding", "gzip"),
            ])
        );
        let already = Resp::new(200).header("Vary", "accept-encoding");
        assert_eq!(
            edited(&already, Coding::Zstd),
            pairs(&[("Vary", "accept-encoding"), ("Content-Encoding", "zstd")])
        );
    }
}
