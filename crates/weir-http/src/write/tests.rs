use std::net::{Ipv4Addr, Ipv6Addr};

use super::*;
use crate::head::{Limits, Parsed, parse_request, parse_response};
use crate::message::Method;

fn request(raw: &[u8]) -> RequestHead {
    match parse_request(raw, &Limits::default()) {
        Ok(Parsed::Complete(head, _)) => head,
        other => panic!("{other:?}"),
    }
}

fn response(raw: &[u8], method: Method) -> ResponseHead {
    match parse_response(raw, &Limits::default(), method) {
        Ok(Parsed::Complete(head, _)) => head,
        other => panic!("{other:?}"),
    }
}

const PLAIN: ForwardRequest<'static> = ForwardRequest {
    framing: BodyFraming::None,
    client_addr: None,
    proto: "http",
    via: None,
    via_version: None,
    upgrade: false,
    strip_expect: false,
    owned_header: None,
    drop_underscore_names: false,
};

fn forwarded(raw: &[u8], forward: &ForwardRequest<'_>) -> String {
    let mut out = BytesMut::new();
    write_request_head(&request(raw), forward, &mut out);
    String::from_utf8(out.to_vec()).unwrap()
}

/// The forwarded head; when the node's had no `Date`, the one weir added is checked
/// and left out, so the cases below compare what they are about.
fn written(raw: &[u8], method: Method, forward: &ForwardResponse<'_>) -> String {
    let head = response(raw, method);
    let mut out = BytesMut::new();
    write_response_head(&head, forward, &mut out);
    let undated = head.status >= 200 && head.header("date").is_none();
    let out = if undated { dated(&out) } else { out.to_vec() };
    String::from_utf8(out).unwrap()
}

#[test]
fn a_final_response_without_date_gets_one_and_never_two() {
    let forward = ForwardResponse::plain(BodyFraming::Length(0));
    let count = |out: &[u8]| String::from_utf8_lossy(out).matches("Date: ").count();
    let write = |raw: &[u8], forward: &ForwardResponse<'_>, edits: &dyn HeaderEdit| {
        let mut out = BytesMut::new();
        write_response_head_edited(&response(raw, Method::Get), forward, edits, &mut out);
        out.to_vec()
    };
    // none from the node: weir's, the time it forwards it (RFC 9110 §6.6.1)
    let out = write(
        b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
        &forward,
        &Unedited,
    );
    assert_eq!(dated(&out), b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
    // the node's own, in any spelling, kept as it is
    let out = write(
        b"HTTP/1.1 200 OK\r\ndate: Sun, 06 Nov 1994 08:49:37 GMT\r\nContent-Length: 0\r\n\r\n",
        &forward,
        &Unedited,
    );
    assert_eq!(count(&out), 0);
    assert!(String::from_utf8_lossy(&out).contains("date: Sun, 06 Nov 1994 08:49:37 GMT\r\n"));
    // two from the node: the first is kept, the second dropped
    let out = write(
        b"HTTP/1.1 200 OK\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\nX-A: 1\r\n\
          DATE: Mon, 07 Nov 1994 08:49:37 GMT\r\nContent-Length: 0\r\n\r\n",
        &forward,
        &Unedited,
    );
    let text = String::from_utf8_lossy(&out);
    assert!(
        text.contains("Date: Sun, 06 Nov 1994") && !text.contains("07 Nov"),
        "{text}"
    );
    assert_eq!(
        text.to_ascii_lowercase().matches("date:").count(),
        1,
        "{text}"
    );
    // an interim answer gets none
    let interim = ForwardResponse::plain(BodyFraming::None);
    let out = write(
        b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n",
        &interim,
        &Unedited,
    );
    assert_eq!(count(&out), 0);
    // one that set_headers or a rule writes is not doubled; one a rule removes stays away
    let set = [(
        "date".to_owned(),
        "Sun, 06 Nov 1994 08:49:37 GMT".to_owned(),
    )];
    let setting = ForwardResponse {
        set_headers: &set,
        ..forward
    };
    let out = write(
        b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
        &setting,
        &Unedited,
    );
    assert_eq!(count(&out), 0);
    assert!(String::from_utf8_lossy(&out).contains("date: Sun, 06 Nov 1994"));
    // a Date the node's Connection names is hop-by-hop: weir's takes its place
    let out = write(
        b"HTTP/1.1 200 OK\r\nConnection: date\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\n\r\n",
        &forward,
        &Unedited,
    );
    assert_eq!(count(&out), 1);
    assert!(!String::from_utf8_lossy(&out).contains("1994"));
    let removing = TestEdits(&["date"], &[]);
    for raw in [
        &b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"[..],
        b"HTTP/1.1 200 OK\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\nContent-Length: 0\r\n\r\n",
    ] {
        let out = write(raw, &forward, &removing);
        assert!(
            !String::from_utf8_lossy(&out)
                .to_ascii_lowercase()
                .contains("date:")
        );
    }
}

#[test]
fn request_keeps_names_and_spacing() {
    let raw = b"GET /a?b HTTP/1.1\r\nhOsT: example.com\r\nX-CUSTOM:  spaced\tvalue \r\naccept: */*\r\n\r\n";
    assert_eq!(
        forwarded(raw, &PLAIN),
        "GET /a?b HTTP/1.1\r\nhOsT: example.com\r\nX-CUSTOM:  spaced\tvalue \r\naccept: */*\r\n\r\n"
    );
}

#[test]
fn request_line_is_always_http11() {
    assert_eq!(
        forwarded(b"GET / HTTP/1.0\r\nHost: a\r\n\r\n", &PLAIN),
        "GET / HTTP/1.1\r\nHost: a\r\n\r\n"
    );
}

#[test]
fn request_drops_hop_by_hop() {
    let raw = b"POST /up HTTP/1.1\r\n\
        Host: a\r\n\
        Connection: keep-alive, X-Secret\r\n\
        Keep-Alive: timeout=5\r\n\
        X-Secret: s\r\n\
        Proxy-Connection: keep-alive\r\n\
        TE: trailers\r\n\
        Transfer-Encoding: chunked\r\n\
        Upgrade: websocket\r\n\
        Trailer: X-Checksum\r\n\
        x-secret: again\r\n\
        Accept: */*\r\n\r\n";
    let forward = ForwardRequest {
        framing: BodyFraming::Chunked,
        ..PLAIN
    };
    assert_eq!(
        forwarded(raw, &forward),
        "POST /up HTTP/1.1\r\nHost: a\r\nTrailer: X-Checksum\r\nAccept: */*\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
}

/// Every field any of the `Connection` fields lists goes, whatever the case of either
/// spelling; the others stay in order.
#[test]
fn connection_lists_across_fields_and_cases() {
    let mut raw = String::from("GET / HTTP/1.1\r\nHost: a\r\n");
    let names: Vec<String> = (0..40).map(|i| format!("X-Hop-{i}")).collect();
    raw.push_str(&format!("Connection: {}\r\n", names[..20].join(", ")));
    raw.push_str(&format!("connection: {}\r\n", names[20..].join(",")).to_uppercase());
    for (i, name) in names.iter().enumerate() {
        let spelled = match i % 2 {
            0 => name.to_lowercase(),
            _ => name.clone(),
        };
        raw.push_str(&format!("{spelled}: {i}\r\nX-Kept-{i}: {i}\r\n"));
    }
    raw.push_str("\r\n");
    let out = forwarded(raw.as_bytes(), &PLAIN);
    assert!(!out.to_ascii_lowercase().contains("x-hop-"), "{out}");
    let kept: Vec<String> = (0..40).map(|i| format!("X-Kept-{i}: {i}\r\n")).collect();
    assert_eq!(
        out,
        format!("GET / HTTP/1.1\r\nHost: a\r\n{}\r\n", kept.concat())
    );
}

#[test]
fn connection_cannot_strip_host() {
    let raw = b"GET / HTTP/1.1\r\nConnection: Host, Cookie\r\nHost: a\r\nCookie: c=1\r\n\r\n";
    assert_eq!(forwarded(raw, &PLAIN), "GET / HTTP/1.1\r\nHost: a\r\n\r\n");
}

#[test]
fn http10_request_without_host_gets_one() {
    let raw = b"GET / HTTP/1.0\r\nAccept: */*\r\n\r\n";
    assert_eq!(
        forwarded(raw, &PLAIN),
        "GET / HTTP/1.1\r\nHost: \r\nAccept: */*\r\n\r\n"
    );
    let raw = b"GET http://a:8/x HTTP/1.0\r\n\r\n";
    assert_eq!(
        forwarded(raw, &PLAIN),
        "GET /x HTTP/1.1\r\nHost: a:8\r\n\r\n"
    );
}

#[test]
fn request_framing_header() {
    let raw = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nX: y\r\n\r\n";
    let length = ForwardRequest {
        framing: BodyFraming::Length(5),
        ..PLAIN
    };
    assert_eq!(
        forwarded(raw, &length),
        "POST / HTTP/1.1\r\nHost: a\r\nX: y\r\nContent-Length: 5\r\n\r\n"
    );
    let zero = ForwardRequest {
        framing: BodyFraming::Length(0),
        ..PLAIN
    };
    assert_eq!(
        forwarded(
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
            &zero
        ),
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n"
    );
}

#[test]
fn upgrade_and_expect() {
    let raw = b"GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nExpect: 100-continue\r\n\r\n";
    let upgrade = ForwardRequest {
        upgrade: true,
        strip_expect: true,
        owned_header: None,
        drop_underscore_names: false,
        ..PLAIN
    };
    assert_eq!(
        forwarded(raw, &upgrade),
        "GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n"
    );
    assert_eq!(
        forwarded(raw, &PLAIN),
        "GET /ws HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n\r\n"
    );
}

#[test]
fn forwarding_headers() {
    let forward = ForwardRequest {
        client_addr: Some(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7))),
        proto: "https",
        via: Some("weir"),
        via_version: None,
        ..PLAIN
    };
    assert_eq!(
        forwarded(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", &forward),
        "GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 192.0.2.7\r\nX-Forwarded-Proto: https\r\nVia: 1.1 weir\r\n\r\n"
    );
    let raw = b"GET / HTTP/1.1\r\nx-forwarded-for: 10.0.0.1\r\nHost: a\r\nX-Forwarded-Proto: http\r\n\
        Via: 1.0 edge\r\nX-Forwarded-For: 10.0.0.2, 10.0.0.3\r\nX-Forwarded-For:\r\nAccept: */*\r\n\r\n";
    assert_eq!(
        forwarded(raw, &forward),
        "GET / HTTP/1.1\r\nHost: a\r\nAccept: */*\r\n\
         X-Forwarded-For: 10.0.0.1, 10.0.0.2, 10.0.0.3, 192.0.2.7\r\nX-Forwarded-Proto: https\r\n\
         Via: 1.0 edge, 1.1 weir\r\n\r\n"
    );
    // Without a client address the X-Forwarded-* fields pass untouched.
    assert_eq!(forwarded(raw, &PLAIN), String::from_utf8_lossy(raw));
    // IPv6, and IPv4-mapped IPv6 written as IPv4.
    let v6 = ForwardRequest {
        client_addr: Some(IpAddr::V6(Ipv6Addr::LOCALHOST)),
        ..PLAIN
    };
    assert!(forwarded(b"GET / HTTP/1.0\r\n\r\n", &v6).contains("X-Forwarded-For: ::1\r\n"));
    let mapped = ForwardRequest {
        client_addr: Some(IpAddr::V6(Ipv4Addr::new(198, 51, 100, 1).to_ipv6_mapped())),
        ..PLAIN
    };
    assert!(
        forwarded(b"GET / HTTP/1.0\r\n\r\n", &mapped).contains("X-Forwarded-For: 198.51.100.1\r\n")
    );
    // Via names the version the message was received in.
    let via = ForwardRequest {
        via: Some("weir"),
        via_version: None,
        ..PLAIN
    };
    assert_eq!(
        forwarded(b"GET / HTTP/1.0\r\nHost: a\r\n\r\n", &via),
        "GET / HTTP/1.1\r\nHost: a\r\nVia: 1.0 weir\r\n\r\n"
    );
    // A request received over HTTP/2 (its head says HTTP/1.1) says so.
    let over_h2 = ForwardRequest {
        via_version: Some("2"),
        ..via
    };
    assert_eq!(
        forwarded(
            b"GET / HTTP/1.1\r\nHost: a\r\nVia: 2 edge\r\n\r\n",
            &over_h2
        ),
        "GET / HTTP/1.1\r\nHost: a\r\nVia: 2 edge, 2 weir\r\n\r\n"
    );
}

#[test]
fn response_head() {
    let raw = b"HTTP/1.1 200 Fine\r\nServer: origin\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\n\
        Content-Length: 5\r\nCache-Control: no-cache\r\n\r\n";
    let forward = ForwardResponse::plain(BodyFraming::Length(5));
    assert_eq!(
        written(raw, Method::Get, &forward),
        "HTTP/1.1 200 Fine\r\nServer: origin\r\nCache-Control: no-cache\r\nContent-Length: 5\r\n\r\n"
    );
    let to_old_client = ForwardResponse {
        version: Version::Http10,
        via: Some("weir"),
        via_version: None,
        ..forward
    };
    assert_eq!(
        written(raw, Method::Get, &to_old_client),
        "HTTP/1.1 200 Fine\r\nServer: origin\r\nCache-Control: no-cache\r\nContent-Length: 5\r\n\
         Connection: keep-alive\r\nVia: 1.1 weir\r\n\r\n"
    );
    let closing = ForwardResponse {
        keep_alive: false,
        framing: BodyFraming::Chunked,
        ..forward
    };
    assert_eq!(
        written(
            b"HTTP/1.1 404\r\nTransfer-Encoding: chunked\r\n\r\n",
            Method::Get,
            &closing
        ),
        "HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    );
}

#[test]
fn response_content_length_on_head_and_304() {
    let forward = ForwardResponse::plain(BodyFraming::None);
    let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\nETag: \"e\"\r\n\r\n";
    assert_eq!(
        written(raw, Method::Head, &forward),
        "HTTP/1.1 200 OK\r\nContent-Length: 1234\r\nETag: \"e\"\r\n\r\n"
    );
    let raw = b"HTTP/1.1 304 Not Modified\r\nContent-Length: 1234\r\nETag: \"e\"\r\n\r\n";
    assert_eq!(
        written(raw, Method::Get, &forward),
        "HTTP/1.1 304 Not Modified\r\nContent-Length: 1234\r\nETag: \"e\"\r\n\r\n"
    );
    let raw = b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n";
    assert_eq!(
        written(raw, Method::Get, &forward),
        "HTTP/1.1 204 No Content\r\n\r\n"
    );
    let raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    assert_eq!(
        written(raw, Method::Head, &forward),
        "HTTP/1.1 200 OK\r\n\r\n"
    );
}

#[test]
fn response_upgrade() {
    let raw = b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Accept: x\r\n\r\n";
    let forward = ForwardResponse {
        upgrade: true,
        ..ForwardResponse::plain(BodyFraming::None)
    };
    assert_eq!(
        written(raw, Method::Get, &forward),
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nSec-WebSocket-Accept: x\r\nConnection: upgrade\r\n\r\n"
    );
}

/// `out` without its one `Date` line, whose value must be an IMF-fixdate: weir's own
/// answers carry one (RFC 9110 §6.6.1).
fn dated(out: &[u8]) -> Vec<u8> {
    let text = std::str::from_utf8(out).unwrap();
    let start = text.find("Date: ").expect("a Date field");
    let end = start + text[start..].find("\r\n").unwrap() + 2;
    let value = &text[start + 6..end - 2];
    assert!(
        value.len() == 29 && value.ends_with(" GMT") && value.as_bytes()[3] == b',',
        "{value}"
    );
    assert!(!text[end..].contains("Date: "), "one Date field");
    [&out[..start], &out[end..]].concat()
}

#[test]
fn simple_responses() {
    let mut out = BytesMut::new();
    write_simple_response(
        503,
        Version::Http11,
        false,
        &[("Retry-After", "5")],
        b"busy\n",
        &mut out,
    );
    assert_eq!(
        dated(&out),
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 5\r\nContent-Type: text/plain; charset=utf-8\r\n\
          Connection: close\r\nRetry-After: 5\r\n\r\nbusy\n"
    );
    out.clear();
    write_simple_response(404, Version::Http10, true, &[], b"", &mut out);
    assert_eq!(
        dated(&out),
        b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: keep-alive\r\n\r\n"
    );
    out.clear();
    write_simple_response(
        400,
        Version::Http11,
        true,
        &[("Bad", "a\r\nInjected: 1")],
        b"",
        &mut out,
    );
    assert_eq!(
        dated(&out),
        b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"
    );
    out.clear();
    write_simple_response(100, Version::Http11, true, &[], b"", &mut out);
    assert_eq!(
        &out[..],
        b"HTTP/1.1 100 Continue\r\n\r\n",
        "no Date on an interim answer"
    );
    out.clear();
    write_simple_response(204, Version::Http11, true, &[], b"ignored", &mut out);
    assert_eq!(dated(&out), b"HTTP/1.1 204 No Content\r\n\r\n");
    // A 205 says it has no content, and has none (RFC 9110 §15.3.6).
    out.clear();
    write_simple_response(205, Version::Http11, true, &[], b"ignored", &mut out);
    assert_eq!(
        dated(&out),
        b"HTTP/1.1 205 Reset Content\r\nContent-Length: 0\r\n\r\n"
    );
}

#[test]
fn reason_phrases() {
    for status in [
        100, 101, 102, 103, 200, 204, 301, 302, 303, 304, 307, 308, 400, 403, 404, 405, 408, 411,
        413, 414, 417, 429, 431, 500, 501, 502, 503, 504, 505,
    ] {
        assert!(!reason_phrase(status).is_empty(), "{status}");
    }
    assert_eq!(reason_phrase(299), "");
}

#[test]
fn absolute_form_targets_are_forwarded_in_origin_form() {
    let cases: &[(&[u8], &str)] = &[
        (
            b"GET http://a.example/x/y?q=1 HTTP/1.1\r\nHost: a.example\r\n\r\n",
            "GET /x/y?q=1 HTTP/1.1\r\n",
        ),
        (
            b"GET http://a.example?q=1 HTTP/1.1\r\nHost: a.example\r\n\r\n",
            "GET /?q=1 HTTP/1.1\r\n",
        ),
        (
            b"GET http://a.example HTTP/1.0\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a.example\r\n",
        ),
        (
            b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
            "OPTIONS * HTTP/1.1\r\n",
        ),
        // RFC 9112 §3.2.4: an OPTIONS with no path asks about the server: `*` at the last hop.
        (
            b"OPTIONS http://a.example HTTP/1.1\r\nHost: a.example\r\n\r\n",
            "OPTIONS * HTTP/1.1\r\n",
        ),
        (
            b"OPTIONS http://a.example?q HTTP/1.1\r\nHost: a.example\r\n\r\n",
            "OPTIONS /?q HTTP/1.1\r\n",
        ),
        (
            b"OPTIONS http://a.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n",
            "OPTIONS / HTTP/1.1\r\n",
        ),
    ];
    for (request, start) in cases {
        let out = forwarded(request, &PLAIN);
        assert!(out.starts_with(start), "{out}");
    }
}

#[test]
fn an_owned_header_replaces_what_the_client_sent() {
    let raw = b"GET / HTTP/1.1\r\nHost: a\r\nx-client-subject: forged\r\nAccept: */*\r\nX-Client-Subject: again\r\n\r\n";
    let forward = ForwardRequest {
        owned_header: Some(("X-Client-Subject", Some("CN=alice\r\nInjected: 1"))),
        drop_underscore_names: false,
        ..PLAIN
    };
    assert_eq!(
        forwarded(raw, &forward),
        "GET / HTTP/1.1\r\nHost: a\r\nAccept: */*\r\nX-Client-Subject: CN=alice  Injected: 1\r\n\r\n"
    );
    let forward = ForwardRequest {
        owned_header: Some(("X-Client-Subject", None)),
        drop_underscore_names: false,
        ..PLAIN
    };
    assert!(
        !forwarded(raw, &forward)
            .to_ascii_lowercase()
            .contains("subject")
    );
}

#[test]
fn the_owned_header_is_removed_in_every_spelling() {
    let raw =
        b"GET / HTTP/1.1\r\nHost: a\r\nX_Client_Subject: forged\r\nx-client_SUBJECT: again\r\n\r\n";
    let forward = ForwardRequest {
        owned_header: Some(("X-Client-Subject", Some("CN=alice"))),
        ..PLAIN
    };
    assert_eq!(
        forwarded(raw, &forward),
        "GET / HTTP/1.1\r\nHost: a\r\nX-Client-Subject: CN=alice\r\n\r\n"
    );
}

#[test]
fn underscore_names_are_dropped_when_asked() {
    let raw = b"GET / HTTP/1.1\r\nHost: a\r\nX_Forwarded_For: 1.2.3.4\r\nContent_Length: 5\r\nAccept: */*\r\n\r\n";
    let kept = forwarded(raw, &PLAIN);
    assert!(kept.contains("X_Forwarded_For: 1.2.3.4\r\n"), "{kept}");
    let forward = ForwardRequest {
        drop_underscore_names: true,
        ..PLAIN
    };
    assert_eq!(
        forwarded(raw, &forward),
        "GET / HTTP/1.1\r\nHost: a\r\nAccept: */*\r\n\r\n"
    );
}

#[test]
fn set_headers_replace_the_nodes_fields_of_those_names() {
    let set = [
        (
            "Strict-Transport-Security".to_owned(),
            "max-age=60".to_owned(),
        ),
        ("X-Content-Type-Options".to_owned(), "nosniff".to_owned()),
    ];
    let forward = ForwardResponse {
        set_headers: &set,
        ..ForwardResponse::plain(BodyFraming::Length(2))
    };
    assert_eq!(
        written(
            b"HTTP/1.1 200 OK\r\nstrict-transport-security: max-age=1\r\nServer: o\r\nContent-Length: 2\r\n\r\n",
            Method::Get,
            &forward
        ),
        "HTTP/1.1 200 OK\r\nServer: o\r\nContent-Length: 2\r\n\
         Strict-Transport-Security: max-age=60\r\nX-Content-Type-Options: nosniff\r\n\r\n"
    );
}

/// Edits as the traffic rules give them: a list of names to drop, fields to add.
struct TestEdits(
    &'static [&'static str],
    &'static [(&'static str, &'static str)],
);

impl HeaderEdit for TestEdits {
    fn drops(&self, name: &[u8]) -> bool {
        self.0
            .iter()
            .any(|n| n.as_bytes().eq_ignore_ascii_case(name))
    }

    fn write_added(&self, out: &mut BytesMut) {
        for (name, value) in self.1 {
            out.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
        }
    }
}

#[test]
fn edited_request_heads_take_a_new_path_and_header_edits() {
    let head = request(b"GET /old/x?q=1 HTTP/1.1\r\nHost: a\r\nX-Drop: 1\r\nX-Keep: 2\r\n\r\n");
    let edits = TestEdits(&["x-drop", "host"], &[("Host", "b"), ("X-Add", "3")]);
    let mut out = BytesMut::new();
    write_request_head_edited(&head, &PLAIN, Some(b"/new/x"), &edits, &mut out);
    assert_eq!(
        String::from_utf8(out.to_vec()).unwrap(),
        "GET /new/x?q=1 HTTP/1.1\r\nX-Keep: 2\r\nHost: b\r\nX-Add: 3\r\n\r\n"
    );
    // framing fields are weir's: an edit cannot drop them
    let head = request(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n");
    let edits = TestEdits(&["content-length"], &[]);
    let framed = ForwardRequest {
        framing: BodyFraming::Length(2),
        ..PLAIN
    };
    let mut out = BytesMut::new();
    write_request_head_edited(&head, &framed, None, &edits, &mut out);
    assert!(
        String::from_utf8(out.to_vec())
            .unwrap()
            .contains("Content-Length: 2\r\n")
    );
}

/// A rule that sets (or removes) a field weir writes itself replaces weir's: the node
/// gets one X-Forwarded-For, X-Forwarded-Proto, Via and request id, never two.
#[test]
fn edits_replace_the_fields_weir_writes_itself() {
    let head = request(
        b"GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 10.0.0.1\r\nX-Forwarded-Proto: ftp\r\n\
          Via: 1.0 c\r\nX-Request-Id: client\r\n\r\n",
    );
    let forward = ForwardRequest {
        client_addr: Some("192.0.2.7".parse().unwrap()),
        via: Some("weir"),
        owned_header: Some(("X-Request-Id", Some("weir-1"))),
        ..PLAIN
    };
    let edited = |edits: &TestEdits| {
        let mut out = BytesMut::new();
        write_request_head_edited(&head, &forward, None, edits, &mut out);
        String::from_utf8(out.to_vec()).unwrap()
    };
    assert_eq!(
        edited(&TestEdits(&[], &[])),
        "GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 10.0.0.1, 192.0.2.7\r\n\
         X-Forwarded-Proto: http\r\nVia: 1.0 c, 1.1 weir\r\nX-Request-Id: weir-1\r\n\r\n"
    );
    let set = TestEdits(
        &[
            "x-forwarded-proto",
            "x-forwarded-for",
            "via",
            "x-request-id",
        ],
        &[
            ("X-Forwarded-Proto", "https"),
            ("X-Forwarded-For", "192.0.2.7"),
            ("Via", "1.1 edge"),
            ("X-Request-Id", "edge-1"),
        ],
    );
    assert_eq!(
        edited(&set),
        "GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-Proto: https\r\n\
         X-Forwarded-For: 192.0.2.7\r\nVia: 1.1 edge\r\nX-Request-Id: edge-1\r\n\r\n"
    );
    assert_eq!(
        edited(&TestEdits(&["via", "x-forwarded-for"], &[])),
        "GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-Proto: http\r\nX-Request-Id: weir-1\r\n\r\n"
    );
    // With weir's forwarding fields off, the client's are the ones a rule replaces.
    let mut out = BytesMut::new();
    write_request_head_edited(&head, &PLAIN, None, &set, &mut out);
    assert_eq!(
        String::from_utf8(out.to_vec()).unwrap(),
        "GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-Proto: https\r\n\
         X-Forwarded-For: 192.0.2.7\r\nVia: 1.1 edge\r\nX-Request-Id: edge-1\r\n\r\n"
    );
}

#[test]
fn edited_responses_and_answers() {
    let head = response(
        b"HTTP/1.1 200 OK\r\nServer: x\r\nX-A: 1\r\n\r\n",
        Method::Get,
    );
    let forward = ForwardResponse::plain(BodyFraming::Length(0));
    let edits = TestEdits(&["server"], &[("Set-Cookie", "S=1; Path=/")]);
    let mut out = BytesMut::new();
    write_response_head_edited(&head, &forward, &edits, &mut out);
    assert_eq!(
        String::from_utf8(dated(&out)).unwrap(),
        "HTTP/1.1 200 OK\r\nX-A: 1\r\nContent-Length: 0\r\nSet-Cookie: S=1; Path=/\r\n\r\n"
    );
    // weir's own answer to a HEAD: the length of the body, not the body; an answer
    // that brings its own Content-Type gets none from weir
    let answer = SimpleResponse {
        status: 200,
        version: Version::Http11,
        keep_alive: true,
        head_request: true,
    };
    let edits = TestEdits(&["content-type"], &[("Content-Type", "application/json")]);
    let mut out = BytesMut::new();
    write_simple_response_edited(&answer, &[], &edits, b"{}", &mut out);
    assert_eq!(
        String::from_utf8(dated(&out)).unwrap(),
        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: application/json\r\n\r\n"
    );
}

#[test]
fn status_lines() {
    let line = |status, reason: &[u8]| {
        let mut out = BytesMut::new();
        write_status_line(status, reason, &mut out);
        String::from_utf8(out.to_vec()).unwrap()
    };
    assert_eq!(line(200, b"OK"), "HTTP/1.1 200 OK\r\n");
    // A node's own reason phrase is kept, on 200 too.
    assert_eq!(line(200, b"Fine"), "HTTP/1.1 200 Fine\r\n");
    assert_eq!(
        line(206, b"Partial Content"),
        "HTTP/1.1 206 Partial Content\r\n"
    );
}
