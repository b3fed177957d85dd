use bytes::BytesMut;

use super::*;

fn request(head: &str) -> Request {
    let mut buf = BytesMut::from(head.as_bytes());
    let head = weir_http::RequestHead::split_from(&mut buf, &weir_http::Limits::default())
        .unwrap()
        .unwrap();
    Request::new(&head, Vec::new(), None)
}

#[test]
fn without_a_token_only_addresses_and_localhost_are_served() {
    for host in [
        "127.0.0.1",
        "127.0.0.1:9090",
        "[::1]:9090",
        "[::1]",
        "localhost:9090",
        "LOCALHOST",
    ] {
        let get = request(&format!(
            "GET /api/v1/status HTTP/1.1\r\nHost: {host}\r\n\r\n"
        ));
        assert!(refuse(&get, true).is_none(), "{host}");
    }
    for host in [
        "attacker.example:9090",
        "attacker.example",
        "127.0.0.1.nip.io:9090",
        "localhost.attacker.example",
        "127.0.0.1:",
    ] {
        let get = request(&format!(
            "GET /api/v1/status HTTP/1.1\r\nHost: {host}\r\n\r\n"
        ));
        let refusal = refuse(&get, true).unwrap_or_else(|| panic!("{host} was served"));
        assert_eq!(refusal.status, 403);
        // With a token the name is the operator's business.
        assert!(refuse(&get, false).is_none(), "{host}");
    }
    // Hosts that are no host and port never reach the guard: the head is refused (400).
    for host in ["[::1", "::1", "127.0.0.1:90a", "[::1]evil.example"] {
        let mut buf = BytesMut::from(
            format!("GET /api/v1/status HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes(),
        );
        let parsed = weir_http::RequestHead::split_from(&mut buf, &weir_http::Limits::default());
        assert!(parsed.is_err(), "{host}");
    }
    // Clients that send no Host (HTTP/1.0 tools) are not browsers.
    assert!(refuse(&request("GET /metrics HTTP/1.0\r\n\r\n"), true).is_none());
}

#[test]
fn changes_from_another_origin_are_refused() {
    let post = |extra: &str| {
        request(&format!(
            "POST /api/v1/reload HTTP/1.1\r\nHost: 127.0.0.1:9090\r\n{extra}Content-Length: 0\r\n\r\n"
        ))
    };
    for extra in [
        "Origin: http://attacker.example\r\n",
        "Origin: null\r\n",
        "Origin: https://127.0.0.1:9090\r\n",
        "Origin: http://127.0.0.1:9091\r\n",
        "Sec-Fetch-Site: cross-site\r\n",
        "Sec-Fetch-Site: same-site\r\n",
    ] {
        for tokenless in [true, false] {
            let refusal = refuse(&post(extra), tokenless).unwrap_or_else(|| panic!("{extra}"));
            assert_eq!(refusal.status, 403, "{extra}");
        }
    }
    for extra in [
        "",
        "Origin: http://127.0.0.1:9090\r\nSec-Fetch-Site: same-origin\r\n",
        "Origin: HTTP://127.0.0.1:9090\r\n",
        "Sec-Fetch-Site: none\r\n",
    ] {
        assert!(refuse(&post(extra), true).is_none(), "{extra:?}");
    }
    // Reading is left to the browser's own same-origin rule.
    let get = request(
        "GET /api/v1/status HTTP/1.1\r\nHost: 127.0.0.1:9090\r\nOrigin: http://attacker.example\r\n\r\n",
    );
    assert!(refuse(&get, true).is_none());
}
