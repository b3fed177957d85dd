use std::time::Duration;

use super::*;

const LIMIT: usize = 8192;

fn parse(bytes: &[u8]) -> Result<Option<(Request, usize)>, RequestError> {
    parse_request(bytes, LIMIT)
}

fn request(bytes: &[u8]) -> Request {
    match parse(bytes) {
        Ok(Some((request, len))) => {
            assert_eq!(len, bytes.len());
            request
        }
        other => panic!("expected a request, got {other:?}"),
    }
}

#[test]
fn parses_a_simple_get() {
    let r = request(b"GET /metrics?name=x HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(r.method, Method::Get);
    assert_eq!(r.path, "/metrics");
    assert!(r.keep_alive);
    assert!(!r.http10);
    assert!(!r.has_body);
}

#[test]
fn partial_heads_need_more_bytes() {
    let full = b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n";
    for end in 0..full.len() {
        assert_eq!(parse(&full[..end]), Ok(None), "prefix of {end} bytes");
    }
}

#[test]
fn pipelined_requests_report_their_own_length() {
    let bytes = b"HEAD /a HTTP/1.1\r\nHost: a\r\n\r\nGET /b HTTP/1.1\r\nHost: a\r\n\r\n";
    let (first, len) = parse(bytes).unwrap().unwrap();
    assert_eq!(first.method, Method::Head);
    assert_eq!(request(&bytes[len..]).path, "/b");
}

#[test]
fn connection_header_controls_keep_alive() {
    assert!(!request(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: Close\r\n\r\n").keep_alive);
    assert!(!request(b"GET / HTTP/1.0\r\n\r\n").keep_alive);
    let kept = request(b"GET / HTTP/1.0\r\nConnection: TE, keep-alive\r\n\r\n");
    assert!(kept.keep_alive && kept.http10);
}

#[test]
fn targets_map_to_paths() {
    for (target, path) in [
        ("/metrics", "/metrics"),
        ("/metrics#x", "/metrics"),
        ("http://admin:9901/healthz?x", "/healthz"),
        ("HTTPS://admin", "/"),
        ("*", ""),
        ("admin:9901", ""),
        ("ftp://admin/metrics", ""),
    ] {
        assert_eq!(request_path(target), path, "{target}");
    }
}

#[test]
fn rejects_malformed_heads() {
    for bytes in [
        &b"GARBAGE\r\n\r\n"[..],
        b"GET /metrics HTTP/1.1\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
        b"GET /metrics HTTP/2.0\r\nHost: a\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nHost: a\r\nBad Header: x\r\n\r\n",
        b"\x00\xff\xfe\r\n\r\n",
    ] {
        assert_eq!(
            parse(bytes),
            Err(RequestError::Malformed),
            "{}",
            String::from_utf8_lossy(bytes)
        );
    }
}

#[test]
fn bodies_are_noticed() {
    assert!(request(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n").has_body);
    assert!(request(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n").has_body);
    assert!(!request(b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n").has_body);
    assert!(
        !request(b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n")
            .has_body
    );
}

#[test]
fn rejects_oversized_heads() {
    let mut long = b"GET / HTTP/1.1\r\nHost: a\r\nX: ".to_vec();
    long.resize(LIMIT + 10, b'a');
    assert_eq!(parse(&long), Err(RequestError::HeadTooLarge));
    let mut many = b"GET / HTTP/1.1\r\nHost: a\r\n".to_vec();
    for i in 0..MAX_HEADERS {
        many.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    assert_eq!(parse(&many), Err(RequestError::HeadTooLarge));
}

#[test]
fn never_panics_on_arbitrary_prefixes() {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let alphabet = b"GET /HTP1.\r\n: abcHostContent-Length0123,\x00\xff";
    for _ in 0..2000 {
        let len = (seed % 64) as usize;
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                alphabet[(seed % alphabet.len() as u64) as usize]
            })
            .collect();
        let _ = parse_request(&bytes, 32);
    }
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

    let bad = error_response(RequestError::Malformed);
    let text = String::from_utf8(encode_response(&bad, None, true, UNIX_EPOCH)).unwrap();
    assert!(text.starts_with("HTTP/1.1 400 Bad Request\r\n"));
    assert!(text.contains("Connection: close\r\n"));
    assert!(text.ends_with("\r\n\r\nbad request\n"));
}

#[test]
fn formats_http_dates() {
    let at = |seconds| http_date(UNIX_EPOCH + Duration::from_secs(seconds));
    assert_eq!(at(0), "Thu, 01 Jan 1970 00:00:00 GMT");
    assert_eq!(at(784_111_777), "Sun, 06 Nov 1994 08:49:37 GMT");
    assert_eq!(at(951_782_400), "Tue, 29 Feb 2000 00:00:00 GMT");
    assert_eq!(at(1_709_251_199), "Thu, 29 Feb 2024 23:59:59 GMT");
    assert_eq!(at(4_102_444_800), "Fri, 01 Jan 2100 00:00:00 GMT");
}
