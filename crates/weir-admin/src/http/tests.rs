use std::time::UNIX_EPOCH;

use bytes::BytesMut;

use super::*;

fn request(bytes: &[u8]) -> Request {
    let mut buf = BytesMut::from(bytes);
    let head = RequestHead::split_from(&mut buf, &weir_http::Limits::default())
        .unwrap()
        .unwrap();
    Request::new(&head, Vec::new(), None)
}

#[test]
fn requests_from_weir_http_heads() {
    let get =
        request(b"GET /api/v1/status?x=1 HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer t\r\n\r\n");
    assert_eq!(get.method, Method::Get);
    assert_eq!(get.path, "/api/v1/status");
    assert!(get.keep_alive);
    assert_eq!(get.authorization.as_deref(), Some(&b"Bearer t"[..]));
    let absolute = request(b"PUT http://a/api/v1/config HTTP/1.0\r\n\r\n");
    assert_eq!(absolute.method, Method::Put);
    assert_eq!(absolute.path, "/api/v1/config");
    assert!(absolute.http10 && !absolute.keep_alive);
}

#[test]
fn encodes_responses() {
    let ok = Response::text(200, "ok\n");
    let get = request(b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n");
    let text = String::from_utf8(encode_response(&ok, Some(&get), false, UNIX_EPOCH)).unwrap();
    assert_eq!(
        text,
        "HTTP/1.1 200 OK\r\nDate: Thu, 01 Jan 1970 00:00:00 GMT\r\n\
         Content-Type: text/plain; charset=utf-8\r\nContent-Length: 3\r\n\
         Cache-Control: no-store\r\n\r\nok\n"
    );

    let head = request(b"HEAD /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    let text = String::from_utf8(encode_response(&ok, Some(&head), false, UNIX_EPOCH)).unwrap();
    assert!(text.contains("Content-Length: 3\r\n"));
    assert!(text.ends_with("Connection: keep-alive\r\n\r\n"), "{text}");

    let bad = Response::text(400, "bad request\n");
    let text = String::from_utf8(encode_response(&bad, None, true, UNIX_EPOCH)).unwrap();
    assert!(text.starts_with("HTTP/1.1 400 Bad Request\r\n"));
    assert!(text.contains("Connection: close\r\n"));
    assert!(text.ends_with("\r\n\r\nbad request\n"));

    let json = Response::error(401, "no");
    assert_eq!(json.body, b"{\n  \"error\": \"no\"\n}\n");
}

#[test]
fn metrics_format_follows_the_accept_qualities() {
    let prefers = |accept: &[&str]| prefers_openmetrics(accept.iter().map(|v| v.as_bytes()));
    // Prometheus 2 and 3 as they ask.
    assert!(prefers(&[
        "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
    ]));
    assert!(prefers(&[
        "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1"
    ]));
    assert!(prefers(&["Application/OpenMetrics-Text"]));
    assert!(prefers(&[
        "text/plain;q=0.5",
        "application/openmetrics-text"
    ]));
    // Refused, ranked below the text format, or a version weir does not write.
    for accept in [
        "application/openmetrics-text;q=0, text/plain;version=0.0.4",
        "text/plain;version=0.0.4;q=1, application/openmetrics-text;q=0.1",
        "application/openmetrics-text;version=2.0.0",
        "application/openmetrics-text;q=bad",
        "*/*",
        "text/html, application/json",
    ] {
        assert!(!prefers(&[accept]), "{accept}");
    }
    assert!(!prefers(&[]));
    // The most specific range decides (RFC 9110 §12.5.1); a quoted version is the same.
    assert!(prefers(&["*/*;q=1, text/plain;q=0"]));
    assert!(!prefers(&[
        "application/openmetrics-text;q=0.5, application/openmetrics-text;version=1.0.0;q=0"
    ]));
    assert!(prefers(&["application/openmetrics-text;version=\"1.0.0\""]));
    assert!(!prefers(&[
        "text/*;q=0.9, application/openmetrics-text;q=0.5"
    ]));
}
