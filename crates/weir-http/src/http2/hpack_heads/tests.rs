//! The direct paths give what the adapter's paths through the `http` crate
//! give, and refuse what the `h2` crate refused before the adapter saw it.

use super::*;
use crate::hpack::{Decoder, Encoder};
use crate::http2::{request_from_h2, response_head_to_h2};

const LIMITS: Limits = Limits {
    max_head_bytes: 64 * 1024,
    max_headers: 100,
};

fn field<'a>(name: &'a str, value: &'a str) -> Field<'a> {
    Field {
        name: name.as_bytes(),
        value: value.as_bytes(),
        never_indexed: false,
    }
}

fn direct(fields: &[(&str, &str)], end_of_stream: bool) -> Result<H2Request, ParseError> {
    let mut request = RequestFields::new(16 * 1024);
    for (name, value) in fields {
        request.field(field(name, value));
    }
    request.finish(end_of_stream, &LIMITS)
}

#[test]
fn requests_match_the_adapter() {
    // (method, scheme, authority, path, regular fields, end of stream)
    type Case<'a> = (
        &'a str,
        &'a str,
        &'a str,
        &'a str,
        &'a [(&'a str, &'a str)],
        bool,
    );
    let cases: &[Case<'_>] = &[
        (
            "GET",
            "https",
            "example.com",
            "/a?b=1",
            &[("accept", "*/*")],
            true,
        ),
        (
            "POST",
            "https",
            "example.com",
            "/up",
            &[("content-length", "5")],
            false,
        ),
        (
            "POST",
            "http",
            "example.com:8080",
            "/grpc",
            &[("content-type", "application/grpc"), ("te", "trailers")],
            false,
        ),
        (
            "GET",
            "https",
            "example.com",
            "/c",
            &[("cookie", "a=1"), ("x", "y"), ("cookie", "b=2")],
            true,
        ),
        (
            "GET",
            "https",
            "example.com",
            "/h",
            &[("host", "example.com:443"), ("user-agent", "curl/8")],
            true,
        ),
        ("OPTIONS", "https", "example.com", "*", &[], true),
    ];
    for (method, scheme, authority, path, fields, end) in cases {
        let uri = match *path {
            "*" => format!("{scheme}://{authority}"),
            _ => format!("{scheme}://{authority}{path}"),
        };
        let mut builder = http::Request::builder().method(*method).uri(uri);
        for (name, value) in *fields {
            builder = builder.header(*name, *value);
        }
        let (mut parts, ()) = builder.body(()).unwrap().into_parts();
        if *path == "*" {
            parts.uri = http::Uri::builder()
                .scheme(*scheme)
                .authority(*authority)
                .path_and_query("*")
                .build()
                .unwrap();
        }
        let old = request_from_h2(&parts, *end, &LIMITS).unwrap();
        let mut all = vec![
            (":method", *method),
            (":scheme", *scheme),
            (":authority", *authority),
            (":path", *path),
        ];
        all.extend_from_slice(fields);
        let new = direct(&all, *end).unwrap();
        assert_eq!(
            String::from_utf8_lossy(new.head.raw()),
            String::from_utf8_lossy(old.raw()),
            "{method} {path}"
        );
        assert_eq!(new.protocol, None);
    }
}

#[test]
fn connect_and_extended_connect() {
    let plain = direct(&[(":method", "CONNECT"), (":authority", "db:5432")], false).unwrap();
    assert_eq!(
        &plain.head.raw()[..],
        &b"CONNECT db:5432 HTTP/1.1\r\nhost: db:5432\r\n\r\n"[..]
    );
    let websocket = direct(
        &[
            (":method", "CONNECT"),
            (":protocol", "websocket"),
            (":scheme", "https"),
            (":authority", "example.com"),
            (":path", "/chat"),
            ("sec-websocket-version", "13"),
        ],
        false,
    )
    .unwrap();
    assert_eq!(websocket.protocol.as_deref(), Some(&b"websocket"[..]));
    assert!(
        websocket
            .head
            .raw()
            .starts_with(b"GET /chat HTTP/1.1\r\nhost: example.com\r\n")
    );
}

#[test]
fn malformed_requests_are_refused() {
    let base = [
        (":method", "GET"),
        (":scheme", "https"),
        (":authority", "example.com"),
        (":path", "/"),
    ];
    let with = |extra: &[(&'static str, &'static str)]| {
        let mut all = base.to_vec();
        all.extend_from_slice(extra);
        all
    };
    let cases: Vec<(&str, Vec<(&str, &str)>)> = vec![
        ("upper-case name", with(&[("Accept", "*/*")])),
        (
            "pseudo after regular",
            with(&[("accept", "*/*"), (":path", "/x")]),
        ),
        ("repeated pseudo", with(&[(":path", "/x")])),
        ("unknown pseudo", with(&[(":foo", "x")])),
        ("response pseudo", with(&[(":status", "200")])),
        ("connection-specific", with(&[("connection", "keep-alive")])),
        (
            "transfer-encoding",
            with(&[("transfer-encoding", "chunked")]),
        ),
        ("TE gzip", with(&[("te", "gzip")])),
        ("padded value", with(&[("x", " y")])),
        ("NUL in value", with(&[("x", "a\0b")])),
        ("CR in value", with(&[("x", "a\rb")])),
        ("empty name", with(&[("", "x")])),
        ("Host differs", with(&[("host", "other.example")])),
        ("missing :method", base[1..].to_vec()),
        ("missing :scheme", vec![base[0], base[2], base[3]]),
        ("missing :path", base[..3].to_vec()),
        (
            "empty :path",
            vec![base[0], base[1], base[2], (":path", "")],
        ),
        (
            "bad :scheme",
            vec![base[0], (":scheme", "1x"), base[2], base[3]],
        ),
        (
            "protocol without CONNECT",
            with(&[(":protocol", "websocket")]),
        ),
        (
            "CONNECT with :path",
            vec![
                (":method", "CONNECT"),
                (":authority", "db:5432"),
                (":path", "/"),
            ],
        ),
        ("CONNECT without authority", vec![(":method", "CONNECT")]),
        (
            "fragment in :path",
            vec![base[0], base[1], base[2], (":path", "/a#b")],
        ),
    ];
    for (name, fields) in cases {
        let error = direct(&fields, true).expect_err(name);
        assert_eq!(error.status(), 400, "{name}: {error}");
    }
}

/// A `Host` that differs from `:authority` is HTTP/1.1's fault too: answered (400), not a
/// reset; fields after it are still read, so a gRPC call or a HEAD keeps its answer's form,
/// and an HTTP/2 fault after it still makes the request malformed (a reset).
#[test]
fn a_refused_head_keeps_its_form_and_later_faults_still_reset() {
    let collect = |fields: &[(&str, &str)]| {
        let mut request = RequestFields::new(64 * 1024);
        for (name, value) in fields {
            request.field(field(name, value));
        }
        request
    };
    let mut call = collect(&[
        (":method", "POST"),
        (":scheme", "https"),
        (":authority", "a.example"),
        (":path", "/pkg.Service/Call"),
        ("host", "b.example"),
        ("content-type", "application/grpc+proto"),
    ]);
    assert!(call.malformed().is_none(), "answered, not reset");
    assert_eq!(call.answer_form(), (false, true));
    let error = call.finish(false, &LIMITS).unwrap_err();
    assert_eq!(error.status(), 400);
    let head = collect(&[
        (":method", "HEAD"),
        (":scheme", "https"),
        (":authority", "a.example"),
        (":path", "/"),
        ("content-type", "application/grpc-web"),
    ]);
    assert_eq!(head.answer_form(), (true, false), "grpc-web is not gRPC");
    let mut reset = collect(&[
        (":method", "GET"),
        (":scheme", "https"),
        (":authority", "a.example"),
        (":path", "/"),
        ("host", "b.example"),
        ("connection", "close"),
    ]);
    assert!(
        reset.malformed().is_some(),
        "a connection-specific field after it"
    );
}

#[test]
fn a_header_list_over_the_setting_is_431() {
    let mut request = RequestFields::new(200);
    for (name, value) in [
        (":method", "GET"),
        (":scheme", "https"),
        (":authority", "example.com"),
        (":path", "/"),
        (
            "x-long",
            "0123456789012345678901234567890123456789012345678901234567890123456789",
        ),
    ] {
        request.field(field(name, value));
    }
    let error = request.finish(true, &LIMITS).unwrap_err();
    assert_eq!(error.status(), 431);
}

#[test]
fn responses_match_the_adapter() {
    let written = b"HTTP/1.1 200 OK\r\nServer: nginx\r\nDate: Fri, 04 Dec 2026 17:00:00 GMT\r\n\
        Content-Type: text/plain\r\nContent-Length: 5\r\nConnection: keep-alive\r\n\
        Keep-Alive: timeout=5\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nVia: 1.1 weir\r\n\r\n";
    let old = response_head_to_h2(written).unwrap();
    let mut out = Vec::new();
    let mut encoder = Encoder::new();
    let mut block = encoder.block(&mut out);
    encode_response_head(200, written, &mut block).unwrap();
    let mut decoded = Vec::new();
    Decoder::new()
        .decode(&out, |f| decoded.push((f.name.to_vec(), f.value.to_vec())))
        .unwrap();
    let mut expected = vec![(b":status".to_vec(), b"200".to_vec())];
    expected.extend(
        old.headers()
            .iter()
            .map(|(n, v)| (n.as_str().as_bytes().to_vec(), v.as_bytes().to_vec())),
    );
    assert_eq!(decoded, expected);
    assert_eq!(old.status(), 200);
    // Status codes outside three digits are refused.
    let mut out = Vec::new();
    let mut block = encoder.block(&mut out);
    assert!(encode_response_head(99, b"HTTP/1.1 099 X\r\n\r\n", &mut block).is_err());
}
