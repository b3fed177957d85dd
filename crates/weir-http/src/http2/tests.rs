//! Table-driven tests of each translation rule between HTTP/2 parts and heads.

use bytes::BytesMut;
use http::header::HeaderMap;

use super::*;
use crate::head::{Parsed, parse_request, parse_response};
use crate::{BodyFraming, Version};

fn request(method: &str, uri: &str, fields: &[(&str, &str)]) -> http::request::Parts {
    let mut builder = http::Request::builder().method(method).uri(uri);
    for (name, value) in fields {
        builder = builder.header(*name, *value);
    }
    builder.body(()).expect("valid test request").into_parts().0
}

fn response(status: u16, fields: &[(&str, &str)]) -> http::response::Parts {
    let mut builder = http::Response::builder().status(status);
    for (name, value) in fields {
        builder = builder.header(*name, *value);
    }
    builder
        .body(())
        .expect("valid test response")
        .into_parts()
        .0
}

fn head_text(head: &RequestHead) -> String {
    String::from_utf8_lossy(head.raw()).into_owned()
}

type Fields<'a> = &'a [(&'a str, &'a str)];

type RequestCase<'a> = (
    &'a str,
    &'a str,
    &'a [(&'a str, &'a str)],
    bool,
    &'a str,
    BodyFraming,
);

#[test]
fn requests_become_heads() {
    // (method, uri, fields, end_of_stream, expected head text, expected framing)
    let cases: &[RequestCase<'_>] = &[
        (
            "GET",
            "https://example.com/a?b=1",
            &[("accept", "*/*")],
            true,
            "GET /a?b=1 HTTP/1.1\r\nhost: example.com\r\naccept: */*\r\n\r\n",
            BodyFraming::None,
        ),
        (
            "POST",
            "https://example.com/up",
            &[("content-length", "5")],
            false,
            "POST /up HTTP/1.1\r\nhost: example.com\r\ncontent-length: 5\r\n\r\n",
            BodyFraming::Length(5),
        ),
        (
            "POST",
            "https://example.com/stream",
            &[("content-type", "application/grpc"), ("te", "trailers")],
            false,
            "POST /stream HTTP/1.1\r\nhost: example.com\r\ncontent-type: application/grpc\r\n\
             te: trailers\r\ntransfer-encoding: chunked\r\n\r\n",
            BodyFraming::Chunked,
        ),
        (
            "GET",
            "https://example.com/c",
            &[("cookie", "a=1"), ("x", "y"), ("cookie", "b=2")],
            true,
            "GET /c HTTP/1.1\r\nhost: example.com\r\nx: y\r\ncookie: a=1; b=2\r\n\r\n",
            BodyFraming::None,
        ),
        (
            "GET",
            "https://example.com:8443/",
            &[("host", "EXAMPLE.com:8443")],
            true,
            "GET / HTTP/1.1\r\nhost: example.com:8443\r\n\r\n",
            BodyFraming::None,
        ),
        (
            "OPTIONS",
            "*",
            &[("host", "example.com")],
            true,
            "OPTIONS * HTTP/1.1\r\nhost: example.com\r\n\r\n",
            BodyFraming::None,
        ),
        (
            "CONNECT",
            "example.com:443",
            &[],
            false,
            "CONNECT example.com:443 HTTP/1.1\r\nhost: example.com:443\r\n\r\n",
            BodyFraming::None,
        ),
    ];
    for (method, uri, fields, end, text, framing) in cases {
        let parts = request(method, uri, fields);
        let head = request_from_h2(&parts, *end, &Limits::default())
            .unwrap_or_else(|error| panic!("{method} {uri}: {error}"));
        assert_eq!(head_text(&head), *text, "{method} {uri}");
        assert_eq!(head.framing(), *framing, "{method} {uri}");
        assert_eq!(head.version(), Version::Http11);
    }
}

#[test]
fn malformed_requests_are_rejected() {
    let connection_specific = "connection-specific field in HTTP/2";
    let cases: &[(&str, &str, Fields<'_>, &str)] = &[
        (
            "GET",
            "https://a.example/",
            &[("host", "b.example")],
            "Host differs from :authority",
        ),
        (
            "GET",
            "https://a.example/",
            &[("connection", "close")],
            connection_specific,
        ),
        (
            "GET",
            "https://a.example/",
            &[("x-a", " lead")],
            "field value with leading or trailing whitespace in HTTP/2",
        ),
        (
            "GET",
            "https://a.example/",
            &[("x-a", "trail\t")],
            "field value with leading or trailing whitespace in HTTP/2",
        ),
        (
            "GET",
            "https://a.example:443/",
            &[("host", "a.example:8443")],
            "Host differs from :authority",
        ),
        (
            "GET",
            "https://a.example/",
            &[("keep-alive", "5")],
            connection_specific,
        ),
        (
            "GET",
            "https://a.example/",
            &[("proxy-connection", "x")],
            connection_specific,
        ),
        (
            "GET",
            "https://a.example/",
            &[("transfer-encoding", "chunked")],
            connection_specific,
        ),
        (
            "GET",
            "https://a.example/",
            &[("upgrade", "websocket")],
            connection_specific,
        ),
        (
            "GET",
            "https://a.example/",
            &[("te", "gzip")],
            "TE other than trailers in HTTP/2",
        ),
        (
            "CONNECT",
            "https://a.example/x",
            &[],
            "CONNECT with a :path",
        ),
    ];
    for (method, uri, fields, reason) in cases {
        let parts = request(method, uri, fields);
        let error = request_from_h2(&parts, true, &Limits::default())
            .expect_err(&format!("{method} {uri} {fields:?} must be rejected"));
        assert_eq!(error.reason, *reason, "{fields:?}");
        assert_eq!(error.status(), 400);
    }
    // No :authority and no Host: HTTP/1.1 needs a Host.
    let parts = request("GET", "/", &[]);
    let error = request_from_h2(&parts, true, &Limits::default()).unwrap_err();
    assert_eq!(error.status(), 400);
    // The same limits as HTTP/1.1 heads: too many fields is a 431.
    let many: Vec<(String, String)> = (0..20).map(|i| (format!("x-{i}"), "v".into())).collect();
    let many: Vec<(&str, &str)> = many.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
    let parts = request("GET", "https://a.example/", &many);
    let limits = Limits {
        max_head_bytes: 16 * 1024,
        max_headers: 10,
    };
    assert_eq!(
        request_from_h2(&parts, true, &limits).unwrap_err().status(),
        431
    );
    // A Content-Length that is not a number fails as it would in HTTP/1.1.
    let parts = request("POST", "https://a.example/", &[("content-length", "x")]);
    let error = request_from_h2(&parts, false, &Limits::default()).unwrap_err();
    assert_eq!(error.status(), 400);
}

#[test]
fn empty_hosts_and_invalid_schemes_are_malformed() {
    // RFC 9113 §8.3.1: an authority given only in Host must not be empty.
    let parts = request("GET", "/", &[("host", "")]);
    let error = request_from_h2(&parts, true, &Limits::default()).unwrap_err();
    assert_eq!(
        (error.reason, error.status()),
        ("empty Host in HTTP/2", 400)
    );
    // A :scheme must be a URI scheme (RFC 3986 §3.1), which the h2 crate does not check.
    let mut checked: Vec<&str> = Vec::new();
    for scheme in ["1http", "h_ttp", ""] {
        let mut parts = request("GET", "https://a.example/", &[]);
        let mut uri = http::uri::Parts::default();
        uri.scheme = Some(match http::uri::Scheme::try_from(scheme) {
            Ok(scheme) => scheme,
            // One the http crate itself refuses never reaches weir.
            Err(_) => continue,
        });
        uri.authority = Some(http::uri::Authority::from_static("a.example"));
        uri.path_and_query = Some(http::uri::PathAndQuery::from_static("/"));
        parts.uri = http::Uri::from_parts(uri).unwrap();
        let error = request_from_h2(&parts, true, &Limits::default()).unwrap_err();
        assert_eq!(
            (error.reason, error.status()),
            ("invalid :scheme", 400),
            "{scheme:?}"
        );
        checked.push(scheme);
    }
    assert!(checked.contains(&"1http"), "{checked:?}");
    assert!(is_uri_scheme(b"coap+tcp") && is_uri_scheme(b"h.2-x"));
}

#[test]
fn node_responses_become_heads() {
    let cases: &[(u16, Fields<'_>, bool, Method, BodyFraming)] = &[
        (
            200,
            &[("content-length", "3")],
            false,
            Method::Get,
            BodyFraming::Length(3),
        ),
        (
            200,
            &[("content-type", "text/plain")],
            false,
            Method::Get,
            BodyFraming::Chunked,
        ),
        (200, &[], true, Method::Get, BodyFraming::Length(0)),
        (204, &[], false, Method::Get, BodyFraming::None),
        (304, &[], false, Method::Get, BodyFraming::None),
        (
            200,
            &[("content-length", "10")],
            true,
            Method::Head,
            BodyFraming::None,
        ),
        (
            200,
            &[("grpc-status", "0")],
            false,
            Method::Post,
            BodyFraming::Chunked,
        ),
    ];
    for (status, fields, end, method, framing) in cases {
        let head = response_from_h2(&response(*status, fields), *end, *method)
            .unwrap_or_else(|error| panic!("{status} {fields:?}: {error}"));
        assert_eq!(head.status(), *status);
        assert_eq!(head.framing(), *framing, "{status} {fields:?}");
    }
    let bad = response(200, &[("connection", "close")]);
    assert!(response_from_h2(&bad, true, Method::Get).is_err());
    let bad = response(200, &[("transfer-encoding", "chunked")]);
    assert!(response_from_h2(&bad, false, Method::Get).is_err());
    // A value with whitespace at either end is malformed (RFC 9113 §8.2.1): not forwarded.
    for value in [" v", "v ", "\tv", " v "] {
        let bad = response(200, &[("x-padded", value)]);
        let error = response_from_h2(&bad, true, Method::Get).unwrap_err();
        assert!(
            error.to_string().contains("whitespace"),
            "{value:?}: {error}"
        );
    }
    assert!(response_from_h2(&response(200, &[("x-inner", "a b")]), true, Method::Get).is_ok());
}

pub(super) fn forward_request(framing: BodyFraming) -> ForwardRequest<'static> {
    ForwardRequest {
        framing,
        client_addr: Some("192.0.2.7".parse().expect("address")),
        proto: "https",
        via: Some("weir"),
        via_version: None,
        upgrade: false,
        strip_expect: true,
        owned_header: None,
        drop_underscore_names: false,
    }
}

fn parse(raw: &str) -> RequestHead {
    match parse_request(raw.as_bytes(), &Limits::default()).expect("valid head") {
        Parsed::Complete(head, _) => head,
        Parsed::Partial => panic!("incomplete"),
    }
}

fn parse_node_response(raw: &str) -> ResponseHead {
    match parse_response(raw.as_bytes(), &Limits::default(), Method::Get).expect("valid") {
        Parsed::Complete(head, _) => head,
        Parsed::Partial => panic!("incomplete"),
    }
}

#[test]
fn requests_for_h2_nodes_drop_connection_fields() {
    let head = parse(
        "POST /p?q HTTP/1.1\r\nHost: Node.example\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\n\
         Keep-Alive: timeout=5\r\nTE: trailers\r\nTransfer-Encoding: chunked\r\nCookie: a=1\r\n\r\n",
    );
    let request = request_to_h2(&head, &forward_request(BodyFraming::Chunked), "http")
        .expect("representable");
    assert_eq!(request.method(), http::Method::POST);
    assert_eq!(request.uri().to_string(), "http://Node.example/p?q");
    let headers = request.headers();
    for gone in [
        "host",
        "connection",
        "x-hop",
        "keep-alive",
        "transfer-encoding",
    ] {
        assert!(!headers.contains_key(gone), "{gone} must be dropped");
    }
    assert_eq!(headers["te"], "trailers");
    assert_eq!(headers["cookie"], "a=1");
    assert_eq!(headers["x-forwarded-for"], "192.0.2.7");
    assert_eq!(headers["x-forwarded-proto"], "https");
    assert_eq!(headers["via"], "1.1 weir");
    // A buffered body: a length.
    let head = parse("PUT /x HTTP/1.1\r\nHost: n\r\nContent-Length: 3\r\nTE: gzip\r\n\r\n");
    let request = request_to_h2(&head, &forward_request(BodyFraming::Length(3)), "https").unwrap();
    assert_eq!(request.headers()["content-length"], "3");
    assert!(
        !request.headers().contains_key("te"),
        "TE other than trailers is dropped"
    );
}

#[test]
fn responses_for_h2_clients_drop_connection_fields() {
    let head = parse_node_response(
        "HTTP/1.1 200 OK\r\nConnection: X-Hop\r\nX-Hop: 1\r\nKeep-Alive: timeout=5\r\n\
         Transfer-Encoding: chunked\r\nUpgrade: h2c\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\n\r\n",
    );
    let set = [("strict-transport-security".into(), "max-age=60".into())];
    let forward = ForwardResponse {
        keep_alive: false,
        via: Some("weir"),
        set_headers: &set,
        ..ForwardResponse::plain(BodyFraming::Chunked)
    };
    let response = response_to_h2(&head, &forward).expect("representable");
    assert_eq!(response.status(), 200);
    let headers = response.headers();
    for gone in [
        "connection",
        "x-hop",
        "keep-alive",
        "transfer-encoding",
        "upgrade",
    ] {
        assert!(!headers.contains_key(gone), "{gone} must be dropped");
    }
    let cookies: Vec<_> = headers.get_all("set-cookie").iter().collect();
    assert_eq!(cookies, ["a=1", "b=2"], "set-cookie is never joined");
    assert_eq!(headers["via"], "1.1 weir");
    assert_eq!(headers["strict-transport-security"], "max-age=60");
    // A length is kept.
    let head = parse_node_response("HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\n");
    let forward = ForwardResponse {
        framing: BodyFraming::Length(9),
        via: None,
        via_version: None,
        set_headers: &[],
        ..forward
    };
    let response = response_to_h2(&head, &forward).unwrap();
    assert_eq!(response.headers()["content-length"], "9");
}

/// A head's fields as (name, value) pairs, in order.
fn fields_of(headers: &http::HeaderMap) -> Vec<(&str, &str)> {
    headers
        .iter()
        .map(|(name, value)| (name.as_str(), value.to_str().unwrap()))
        .collect()
}

/// The written lines become fields as written: values without their
/// optional whitespace, names lower-cased, in order.
#[test]
fn written_lines_become_fields_as_written() {
    let head =
        parse_node_response("HTTP/1.1 203 \r\nX-A:  v 1\t \r\nX-B:w\r\nContent-Length: 0\r\n\r\n");
    let forward = ForwardResponse::plain(BodyFraming::Length(0));
    let response = response_to_h2(&head, &forward).expect("representable");
    assert_eq!(response.status(), 203);
    let fields = fields_of(response.headers());
    // the node sent no Date: weir's comes after the node's fields
    assert_eq!(
        fields[..3],
        [("x-a", "v 1"), ("x-b", "w"), ("content-length", "0")]
    );
    assert_eq!(fields.len(), 4);
    assert_eq!(fields[3].0, "date");
}

/// A head weir wrote whole (a cache hit's): its status line read, its fields taken as
/// written without the connection-specific ones; a head without weir's status line or
/// cut short is refused.
#[test]
fn a_written_head_becomes_an_h2_head() {
    let written = b"HTTP/1.1 206 Partial Content\r\nX-A: v\r\nConnection: close\r\n\
                    Transfer-Encoding: chunked\r\nAge: 3\r\n\r\n";
    let response = response_head_to_h2(written).expect("representable");
    assert_eq!(response.status(), 206);
    let fields = fields_of(response.headers());
    assert_eq!(fields, [("x-a", "v"), ("age", "3")]);
    assert_eq!(
        response_head_to_h2(b"HTTP/1.0 304 \r\n\r\n")
            .expect("no fields")
            .status(),
        304
    );
    for bad in [
        &b"HTTP/1.1 200 OK\r\nX-A: v\r\n"[..],
        b"HTTP/2 200 OK\r\n\r\n",
        b"HTTP/1.1 2x0 OK\r\n\r\n",
        b"HTTP/1.1 200\r\n\r\n",
        b"",
    ] {
        assert!(
            response_head_to_h2(bad).is_err(),
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
}

#[test]
fn trailers_travel_both_ways() {
    let map = trailers_to_h2(
        b"grpc-status: 0\r\ngrpc-message: ok\r\nContent-Length: 5\r\nX-Sum:  abc \r\n",
    )
    .expect("valid trailers");
    assert_eq!(map["grpc-status"], "0");
    assert_eq!(map["grpc-message"], "ok");
    assert_eq!(map["x-sum"], "abc");
    assert!(
        !map.contains_key("content-length"),
        "framing fields are never trailers"
    );
    let mut lines = BytesMut::new();
    let mut h2 = HeaderMap::new();
    h2.insert("grpc-status", "13".parse().unwrap());
    h2.insert("authorization", "secret".parse().unwrap());
    h2.insert("x-edge", " v\t".parse().unwrap());
    trailers_from_h2(&h2, &mut lines);
    assert_eq!(&lines[..], b"grpc-status: 13\r\nx-edge: v\r\n");
    assert!(trailers_to_h2(b"no colon\r\n").is_err());
}

/// `Host` and `:authority` name one origin when they differ only by the scheme's default
/// port (RFC 9110 §4.2.3).
#[test]
fn host_may_spell_out_the_default_port() {
    for (uri, host) in [
        ("https://a.example/", "a.example:443"),
        ("http://a.example:80/", "A.example"),
    ] {
        let parts = request("GET", uri, &[("host", host)]);
        assert!(
            request_from_h2(&parts, true, &Limits::default()).is_ok(),
            "{uri} {host}"
        );
    }
}
