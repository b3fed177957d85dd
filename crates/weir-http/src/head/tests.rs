use super::*;

fn request(raw: &[u8]) -> Result<RequestHead, ParseError> {
    match parse_request(raw, &Limits::default())? {
        Parsed::Complete(head, used) => {
            assert_eq!(used, raw.len(), "whole input is the head");
            Ok(head)
        }
        Parsed::Partial => panic!("partial: {:?}", String::from_utf8_lossy(raw)),
    }
}

fn rejected(raw: &[u8]) -> ParseError {
    match parse_request(raw, &Limits::default()) {
        Err(error) => error,
        Ok(parsed) => panic!("accepted {:?}: {parsed:?}", String::from_utf8_lossy(raw)),
    }
}

fn response(raw: &[u8], method: Method) -> Result<ResponseHead, ParseError> {
    match parse_response(raw, &Limits::default(), method)? {
        Parsed::Complete(head, used) => {
            assert_eq!(used, raw.len(), "whole input is the head");
            Ok(head)
        }
        Parsed::Partial => panic!("partial: {:?}", String::from_utf8_lossy(raw)),
    }
}

#[test]
fn typical_request() {
    let head = request(
        b"GET /index.html?q=1 HTTP/1.1\r\nHost: example.com\r\nUser-Agent: test\r\nAccept: */*\r\n\r\n",
    )
    .unwrap();
    assert_eq!(head.method(), Method::Get);
    assert_eq!(head.method_bytes(), b"GET");
    assert_eq!(head.target(), b"/index.html?q=1");
    assert_eq!(head.path(), b"/index.html");
    assert_eq!(head.version(), Version::Http11);
    assert_eq!(head.host(), Some(&b"example.com"[..]));
    assert_eq!(head.header("user-agent"), Some(&b"test"[..]));
    assert_eq!(head.header("missing"), None);
    assert_eq!(head.framing(), BodyFraming::None);
    assert!(head.keep_alive());
    assert!(!head.expects_continue());
    let names: Vec<&[u8]> = head.headers().map(|(name, _)| name).collect();
    assert_eq!(names, vec![&b"Host"[..], b"User-Agent", b"Accept"]);
}

#[test]
fn other_methods_keep_their_bytes() {
    let head = request(b"PROPFIND /x HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
    assert_eq!(head.method(), Method::Other);
    assert_eq!(head.method_bytes(), b"PROPFIND");
    assert_eq!(head.target(), b"/x");
    // Methods are case-sensitive.
    assert_eq!(
        request(b"get / HTTP/1.1\r\nHost: a\r\n\r\n")
            .unwrap()
            .method(),
        Method::Other
    );
}

#[test]
fn odd_but_legal_requests() {
    // Tabs and obs-text in values, an empty value, trailing whitespace.
    let head = request(b"GET / HTTP/1.1\r\nHost: a\r\nX-Tab:\tone\ttwo\t\r\nX-Obs: caf\xc3\xa9 \xff\r\nX-Empty:\r\nX-Blank:   \r\n\r\n")
        .unwrap();
    assert_eq!(head.header("x-tab"), Some(&b"one\ttwo"[..]));
    assert_eq!(head.header("x-obs"), Some(&b"caf\xc3\xa9 \xff"[..]));
    assert_eq!(head.header("x-empty"), Some(&b""[..]));
    assert_eq!(head.header("x-blank"), Some(&b""[..]));

    // HTTP/1.0 needs no Host.
    let head = request(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    assert_eq!(head.version(), Version::Http10);
    assert_eq!(head.host(), None);
    assert!(!head.keep_alive());

    // Leading empty lines are skipped and counted as used.
    let raw = b"\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n";
    let Parsed::Complete(head, used) = parse_request(raw, &Limits::default()).unwrap() else {
        panic!("partial");
    };
    assert_eq!(used, raw.len());
    assert_eq!(head.raw().as_ref(), &raw[4..]);
    assert_eq!(head.target(), b"/");
}

#[test]
fn absolute_form() {
    let head =
        request(b"GET http://Example.com/a/b?c HTTP/1.1\r\nHost: example.com\r\n\r\n").unwrap();
    assert_eq!(head.target(), b"http://Example.com/a/b?c");
    assert_eq!(head.path(), b"/a/b");
    assert_eq!(head.host(), Some(&b"example.com"[..]));

    let head = request(b"GET http://example.com HTTP/1.0\r\n\r\n").unwrap();
    assert_eq!(head.path(), b"/");
    assert_eq!(head.host(), Some(&b"example.com"[..]));

    let error = rejected(b"GET http://a.example/ HTTP/1.1\r\nHost: b.example\r\n\r\n");
    assert_eq!(error.kind, ParseErrorKind::Invalid);
    assert_eq!(
        error.reason,
        "Host differs from the absolute-form authority"
    );
    // The same origin, written with and without the scheme's default port (RFC 9110
    // §4.2.3), is no difference; another port, or the other scheme's default, is.
    for raw in [
        &b"GET http://a.example:80/p HTTP/1.1\r\nHost: a.example\r\n\r\n"[..],
        b"GET http://a.example/p HTTP/1.1\r\nHost: A.example:80\r\n\r\n",
        b"GET http://a.example:/p HTTP/1.1\r\nHost: a.example\r\n\r\n",
        b"GET https://a.example/p HTTP/1.1\r\nHost: a.example:443\r\n\r\n",
        b"GET http://[::1]:80/p HTTP/1.1\r\nHost: [::1]\r\n\r\n",
    ] {
        assert!(request(raw).is_ok(), "{}", String::from_utf8_lossy(raw));
    }
    for raw in [
        &b"GET http://a.example:8080/p HTTP/1.1\r\nHost: a.example\r\n\r\n"[..],
        b"GET https://a.example/p HTTP/1.1\r\nHost: a.example:80\r\n\r\n",
        b"GET http://a.example/p HTTP/1.1\r\nHost: a.example.evil:80\r\n\r\n",
        b"GET http://[::1]/p HTTP/1.1\r\nHost: [::2]\r\n\r\n",
    ] {
        assert_eq!(
            rejected(raw).reason,
            "Host differs from the absolute-form authority",
            "{}",
            String::from_utf8_lossy(raw)
        );
    }
}

/// `Upgrade` in an HTTP/1.0 request is ignored (RFC 9110 §7.8): no 101 can answer it.
#[test]
fn upgrade_is_an_http_1_1_request() {
    let upgrade = b"Upgrade: websocket\r\nConnection: Upgrade\r\nHost: a\r\n\r\n";
    let ask = |version: &str| {
        let mut raw = format!("GET /ws {version}\r\n").into_bytes();
        raw.extend_from_slice(upgrade);
        request(&raw).unwrap().asks_to_upgrade()
    };
    assert!(ask("HTTP/1.1"));
    assert!(!ask("HTTP/1.0"));
}

#[test]
fn asterisk_and_authority_forms() {
    let head = request(b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
    assert_eq!(head.path(), b"*");
    let head =
        request(b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n").unwrap();
    assert_eq!(head.method(), Method::Connect);
    assert_eq!(head.target(), b"example.com:443");
    assert_eq!(head.path(), b"");
    assert_eq!(head.host(), Some(&b"example.com:443"[..]));

    for raw in [
        &b"GET * HTTP/1.1\r\nHost: a\r\n\r\n"[..],
        b"GET example.com:443 HTTP/1.1\r\nHost: a\r\n\r\n",
        b"CONNECT / HTTP/1.1\r\nHost: a\r\n\r\n",
        b"GET index.html HTTP/1.1\r\nHost: a\r\n\r\n",
        b"GET ftp://a/ HTTP/1.1\r\nHost: a\r\n\r\n",
        b"GET /a#frag HTTP/1.1\r\nHost: a\r\n\r\n",
        b"GET /caf\xc3\xa9 HTTP/1.1\r\nHost: a\r\n\r\n",
    ] {
        assert_eq!(
            rejected(raw).kind,
            ParseErrorKind::Invalid,
            "{:?}",
            String::from_utf8_lossy(raw)
        );
    }
}

/// A CONNECT's Host is its target (RFC 9112 §3.2): rules and routes match the host the
/// node will tunnel to, not another one written in Host.
#[test]
fn connect_host_is_its_target() {
    for raw in [
        &b"CONNECT a.example:443 HTTP/1.1\r\nHost: A.example:443\r\n\r\n"[..],
        b"CONNECT a.example:443 HTTP/1.1\r\nHost: a.example\r\n\r\n",
        b"CONNECT [::1]:8443 HTTP/1.1\r\nHost: [::1]:8443\r\n\r\n",
    ] {
        assert!(request(raw).is_ok(), "{}", String::from_utf8_lossy(raw));
    }
    for raw in [
        &b"CONNECT internal.example:443 HTTP/1.1\r\nHost: allowed.example\r\n\r\n"[..],
        b"CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:8443\r\n\r\n",
        b"CONNECT a.example:99999 HTTP/1.1\r\nHost: a.example\r\n\r\n",
    ] {
        assert_eq!(
            rejected(raw).reason,
            "Host differs from the CONNECT target",
            "{}",
            String::from_utf8_lossy(raw)
        );
    }
    // HTTP/1.0 needs no Host: the target is the host rules match and the node is sent.
    let head = request(b"CONNECT internal.example:443 HTTP/1.0\r\n\r\n").unwrap();
    assert_eq!(head.host(), Some(&b"internal.example:443"[..]));
}

/// A CONNECT has no content (RFC 9110 §9.3.6): bytes framed as its body would reach a node
/// that reads them as a request of their own.
#[test]
fn a_connect_with_content_is_refused() {
    let head = request(b"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(head.unwrap().framing(), BodyFraming::Length(0));
    for raw in [
        &b"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\nContent-Length: 48\r\n\r\n"[..],
        b"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\nTransfer-Encoding: chunked\r\n\r\n",
    ] {
        let error = rejected(raw);
        assert_eq!(
            (error.status(), error.reason),
            (400, "CONNECT request with content")
        );
    }
}

#[test]
fn framing_and_connection() {
    let head = request(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 12\r\n\r\n").unwrap();
    assert_eq!(head.framing(), BodyFraming::Length(12));
    let head = request(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n").unwrap();
    assert_eq!(head.framing(), BodyFraming::Length(0));
    let head =
        request(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: CHUNKED\r\n\r\n").unwrap();
    assert_eq!(head.framing(), BodyFraming::Chunked);
    let head =
        request(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: ,chunked , \r\n\r\n").unwrap();
    assert_eq!(head.framing(), BodyFraming::Chunked);

    let head = request(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: Keep-Alive, X-Foo\r\nconnection: UPGRADE\r\n\r\n").unwrap();
    assert_eq!(
        head.connection(),
        &ConnectionInfo {
            close: false,
            keep_alive: true,
            upgrade: true
        }
    );
    let head = request(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").unwrap();
    assert!(head.connection().close);
    assert!(!head.keep_alive());
    let head = request(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").unwrap();
    assert!(head.keep_alive());
}

#[test]
fn expect_continue() {
    let head =
        request(b"PUT / HTTP/1.1\r\nHost: a\r\nExpect: 100-Continue\r\nContent-Length: 1\r\n\r\n")
            .unwrap();
    assert!(head.expects_continue());
    let head = request(b"PUT / HTTP/1.0\r\nExpect: 100-continue\r\n\r\n").unwrap();
    assert!(!head.expects_continue(), "ignored from HTTP/1.0 clients");
}

#[test]
fn framing_rejections() {
    let invalid: &[(&[u8], &str)] = &[
        (
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
            "both Content-Length and Transfer-Encoding",
        ),
        (
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
            "both Content-Length and Transfer-Encoding",
        ),
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", "duplicate Content-Length"),
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\n", "invalid Content-Length value"),
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n", "invalid Content-Length value"),
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", "invalid Content-Length value"),
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1 2\r\n\r\n", "invalid Content-Length value"),
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length:\r\n\r\n", "invalid Content-Length value"),
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0x10\r\n\r\n", "invalid Content-Length value"),
        (
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n",
            "invalid Content-Length value",
        ),
        (b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", "Transfer-Encoding in an HTTP/1.0 message"),
        (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: \r\n\r\n", "empty Transfer-Encoding"),
        // A malformed HTTP/1 version is the client's syntax error (400), not one weir lacks.
        (b"GET / HTTP/01.1\r\nHost: a\r\n\r\n", "malformed HTTP version"),
        (b"GET / HTTP/1.\r\nHost: a\r\n\r\n", "malformed HTTP version"),
        (b"GET / HTTP/1.20\r\nHost: a\r\n\r\n", "malformed HTTP version"),
    ];
    for (raw, reason) in invalid {
        let error = rejected(raw);
        assert_eq!(
            error.kind,
            ParseErrorKind::Invalid,
            "{:?}",
            String::from_utf8_lossy(raw)
        );
        assert_eq!(error.reason, *reason, "{:?}", String::from_utf8_lossy(raw));
        assert_eq!(error.status(), 400);
    }

    // RFC 9112 §6.3: no chunked last, or chunked twice: the length is unknown, 400. §6.1:
    // a coding weir does not implement, before a final chunked: 501.
    use ParseErrorKind::{Invalid, UnsupportedTransferEncoding as Unsupported};
    let codings: &[(&[u8], ParseErrorKind, u16)] = &[
        (b"Transfer-Encoding: gzip", Invalid, 400),
        (b"Transfer-Encoding: chunked, gzip", Invalid, 400),
        (b"Transfer-Encoding: chunked, chunked", Invalid, 400),
        (
            b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked",
            Invalid,
            400,
        ),
        (b"Transfer-Encoding: xchunked", Invalid, 400),
        (b"Transfer-Encoding: chunked;q=1", Invalid, 400),
        (b"Transfer-Encoding: gzip, chunked", Unsupported, 501),
        (
            b"Transfer-Encoding: identity\r\nTransfer-Encoding: chunked",
            Unsupported,
            501,
        ),
    ];
    for (fields, kind, status) in codings {
        let raw = [&b"POST / HTTP/1.1\r\nHost: a\r\n"[..], fields, b"\r\n\r\n"].concat();
        let error = rejected(&raw);
        let shown = String::from_utf8_lossy(fields);
        assert_eq!((error.kind, error.status()), (*kind, *status), "{shown}");
    }
}

#[test]
fn host_rules() {
    assert_eq!(
        rejected(b"GET / HTTP/1.1\r\n\r\n").reason,
        "HTTP/1.1 request without Host"
    );
    assert_eq!(
        rejected(b"GET / HTTP/1.1\r\nHost: a\r\nhost: a\r\n\r\n").reason,
        "more than one Host"
    );
    assert_eq!(
        rejected(b"GET / HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n").reason,
        "more than one Host"
    );
    assert_eq!(
        rejected(b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n").reason,
        "invalid Host value"
    );
    assert_eq!(
        rejected(b"GET / HTTP/1.1\r\nHost: u@a\r\n\r\n").reason,
        "invalid Host value"
    );
}

#[test]
fn syntax_rejections() {
    let invalid: &[(&[u8], &str)] = &[
        (b"GET / HTTP/1.1\nHost: a\r\n\r\n", "bare LF in head"),
        (b"GET / HTTP/1.1\r\nHost: a\n\r\n", "bare LF in head"),
        (b"GET / HTTP/1.1\r\nHost: a\r\n\n", "bare LF in head"),
        (b"GET / HTTP/1.1\nHost: a\n\n", "bare LF in head"),
        (b"\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", "bare LF in head"),
        (
            b"GET / HTTP/1.1\r\nHost: a\rX: b\r\n\r\n",
            "bare CR in head",
        ),
        (
            b"GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n",
            "bare CR in head",
        ),
        (
            b"GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n",
            "obs-fold line folding in header section",
        ),
        (
            b"GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n\tb\r\n\r\n",
            "obs-fold line folding in header section",
        ),
        (
            b"GET / HTTP/1.1\r\nHost : a\r\n\r\n",
            "whitespace between field name and colon",
        ),
        (
            b"GET / HTTP/1.1\r\nHost: a\r\nX(Y): a\r\n\r\n",
            "invalid header field name",
        ),
        (
            b"GET / HTTP/1.1\r\nHost: a\r\n: a\r\n\r\n",
            "invalid header field name",
        ),
        (
            b"GET / HTTP/1.1\r\nHost: a\r\nX: a\x00b\r\n\r\n",
            "invalid character in header field value",
        ),
        (
            b"GET / HTTP/1.1\r\nHost: a\r\nX: a\x01b\r\n\r\n",
            "invalid character in header field value",
        ),
        (
            b"GET / HTTP/1.1\r\nHost: a\r\nX: a\x7fb\r\n\r\n",
            "invalid character in header field value",
        ),
        (
            b"GET / HTTP/1.1\r\nHost: a\r\nX: a\x1bb\r\n\r\n",
            "invalid character in header field value",
        ),
        (
            b"GET  / HTTP/1.1\r\nHost: a\r\n\r\n",
            "invalid method or request target",
        ),
        (
            b"G(T / HTTP/1.1\r\nHost: a\r\n\r\n",
            "invalid method or request target",
        ),
        (
            b"GET / http/1.1\r\nHost: a\r\n\r\n",
            "malformed HTTP version",
        ),
        (
            b"GET / HTTP/1.1 \r\nHost: a\r\n\r\n",
            "malformed line ending",
        ),
    ];
    for (raw, reason) in invalid {
        let error = rejected(raw);
        assert_eq!(
            error.kind,
            ParseErrorKind::Invalid,
            "{:?}",
            String::from_utf8_lossy(raw)
        );
        assert_eq!(error.reason, *reason, "{:?}", String::from_utf8_lossy(raw));
    }
}

#[test]
fn value_ctl_rejected_wherever_it_sits() {
    // httparse scans values with SIMD in blocks; put a CTL at every offset.
    for ctl in (0u8..0x20)
        .filter(|&b| b != b'\t' && b != b'\r' && b != b'\n')
        .chain([0x7f])
    {
        for at in 0..40 {
            let mut value = vec![b'v'; 40];
            value[at] = ctl;
            let mut raw = b"GET / HTTP/1.1\r\nHost: a\r\nX: ".to_vec();
            raw.extend_from_slice(&value);
            raw.extend_from_slice(b"\r\n\r\n");
            assert_eq!(
                rejected(&raw).kind,
                ParseErrorKind::Invalid,
                "ctl {ctl:#x} at {at}"
            );
        }
    }
}

#[test]
fn version_rejections() {
    for raw in [
        &b"GET / HTTP/2.0\r\nHost: a\r\n\r\n"[..],
        b"GET / HTTP/3\r\nHost: a\r\n\r\n",
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        b"PRI * HTTP/2",
    ] {
        let error = rejected(raw);
        assert_eq!(
            error.kind,
            ParseErrorKind::UnsupportedVersion,
            "{:?}",
            String::from_utf8_lossy(raw)
        );
        assert_eq!(error.status(), 505);
    }
    assert_eq!(
        rejected(b"GET / HTTP/1.1x\r\nHost: a\r\n\r\n").kind,
        ParseErrorKind::Invalid
    );
    assert_eq!(
        rejected(b"GET /\r\n\r\n").kind,
        ParseErrorKind::Invalid,
        "HTTP/0.9"
    );
}

#[test]
fn limits() {
    let raw = b"GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n";
    let two = Limits {
        max_headers: 3,
        ..Limits::default()
    };
    let error = parse_request(raw, &two).unwrap_err();
    assert_eq!(error.kind, ParseErrorKind::TooManyHeaders);
    assert_eq!(error.status(), 431);
    let four = Limits {
        max_headers: 4,
        ..Limits::default()
    };
    assert!(matches!(
        parse_request(raw, &four),
        Ok(Parsed::Complete(..))
    ));

    // Complete but larger than the limit.
    let small = Limits {
        max_head_bytes: raw.len() - 1,
        ..Limits::default()
    };
    assert_eq!(
        parse_request(raw, &small).unwrap_err().kind,
        ParseErrorKind::HeadTooLarge
    );
    let exact = Limits {
        max_head_bytes: raw.len(),
        ..Limits::default()
    };
    assert!(matches!(
        parse_request(raw, &exact),
        Ok(Parsed::Complete(..))
    ));

    // Partial, shorter than the limit, then at it.
    let partial = &raw[..20];
    assert!(matches!(
        parse_request(partial, &Limits::default()),
        Ok(Parsed::Partial)
    ));
    let at_limit = Limits {
        max_head_bytes: 20,
        ..Limits::default()
    };
    assert_eq!(
        parse_request(partial, &at_limit).unwrap_err().kind,
        ParseErrorKind::HeadTooLarge
    );
    assert!(matches!(parse_request(b"", &at_limit), Ok(Parsed::Partial)));

    // A request line that does not end within the limit: its target is too long (414).
    let mut long = b"GET /".to_vec();
    long.extend(std::iter::repeat_n(b'a', 64));
    let error = parse_request(&long, &at_limit).unwrap_err();
    assert_eq!(error.kind, ParseErrorKind::TargetTooLong);
    assert_eq!(error.status(), 414);
    // A status line that long is the node's fault, as any head too large.
    let long_status = b"HTTP/1.1 200 OKOKOKOKOKOKOKOKOKOKOKOKOKOKOKOKOK";
    assert_eq!(
        parse_response(long_status, &at_limit, Method::Get)
            .unwrap_err()
            .kind,
        ParseErrorKind::HeadTooLarge
    );
}

#[test]
fn many_headers_past_the_stack_slots() {
    let mut raw = b"GET / HTTP/1.1\r\nHost: a\r\n".to_vec();
    for index in 0..199 {
        raw.extend_from_slice(format!("X-{index}: {index}\r\n").as_bytes());
    }
    raw.extend_from_slice(b"\r\n");
    let limits = Limits {
        max_head_bytes: 64 * 1024,
        max_headers: 200,
    };
    let Parsed::Complete(head, _) = parse_request(&raw, &limits).unwrap() else {
        panic!("partial");
    };
    assert_eq!(head.headers().count(), 200);
    assert_eq!(head.header("x-198"), Some(&b"198"[..]));
    let limits = Limits {
        max_headers: 199,
        ..limits
    };
    assert_eq!(
        parse_request(&raw, &limits).unwrap_err().kind,
        ParseErrorKind::TooManyHeaders
    );
}

#[test]
fn many_response_fields_past_the_stack_slots() {
    // A response parse tries the stack's slots first and the limit's on the
    // heap only when they run out: both outcomes stay those of the limit.
    let mut raw = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n".to_vec();
    for index in 0..199 {
        raw.extend_from_slice(format!("X-{index}: {index}\r\n").as_bytes());
    }
    raw.extend_from_slice(b"\r\n");
    let limits = Limits {
        max_head_bytes: 64 * 1024,
        max_headers: 200,
    };
    let Parsed::Complete(head, used) = parse_response(&raw, &limits, Method::Get).unwrap() else {
        panic!("partial");
    };
    assert_eq!(used, raw.len());
    assert_eq!(head.headers().count(), 200);
    assert_eq!(head.header("x-198"), Some(&b"198"[..]));
    // Cut short past the stack's slots: more is needed, not too many fields.
    assert!(matches!(
        parse_response(&raw[..raw.len() - 2], &limits, Method::Get),
        Ok(Parsed::Partial)
    ));
    let limits = Limits {
        max_headers: 199,
        ..limits
    };
    assert_eq!(
        parse_response(&raw, &limits, Method::Get).unwrap_err().kind,
        ParseErrorKind::TooManyHeaders
    );
}

#[test]
fn every_prefix_is_partial() {
    let raw = b"\r\nPOST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\n";
    for end in 0..raw.len() {
        assert!(
            matches!(
                parse_request(&raw[..end], &Limits::default()),
                Ok(Parsed::Partial)
            ),
            "prefix {end}"
        );
    }
}

#[test]
fn split_from_is_zero_copy_and_leaves_the_body() {
    let mut buf =
        BytesMut::from(&b"\r\nPOST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabcGET"[..]);
    let before = buf.as_ptr() as usize;
    let head = RequestHead::split_from(&mut buf, &Limits::default())
        .unwrap()
        .unwrap();
    assert_eq!(
        head.raw().as_ptr() as usize,
        before + 2,
        "the head points into the read buffer"
    );
    assert_eq!(head.framing(), BodyFraming::Length(3));
    assert_eq!(&buf[..], b"abcGET");

    let mut partial = BytesMut::from(&b"GET / HTTP/1.1\r\nHo"[..]);
    assert!(
        RequestHead::split_from(&mut partial, &Limits::default())
            .unwrap()
            .is_none()
    );
    assert_eq!(partial.len(), 18, "a partial head is left in place");
}

#[test]
fn response_framing() {
    let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n";
    let head = response(ok, Method::Get).unwrap();
    assert_eq!(head.status(), 200);
    assert_eq!(head.reason(), b"OK");
    assert_eq!(head.framing(), BodyFraming::Length(5));
    assert!(head.keep_alive());
    assert_eq!(
        response(ok, Method::Head).unwrap().framing(),
        BodyFraming::None
    );

    let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    assert_eq!(
        response(chunked, Method::Get).unwrap().framing(),
        BodyFraming::Chunked
    );
    assert_eq!(
        response(chunked, Method::Head).unwrap().framing(),
        BodyFraming::None
    );

    let close = response(b"HTTP/1.1 200 OK\r\nServer: x\r\n\r\n", Method::Get).unwrap();
    assert_eq!(close.framing(), BodyFraming::CloseDelimited);
    assert!(!close.keep_alive());

    for status in [
        &b"100 Continue"[..],
        b"101 Switching",
        b"204 No Content",
        b"304 Not Modified",
    ] {
        let mut raw = b"HTTP/1.1 ".to_vec();
        raw.extend_from_slice(status);
        raw.extend_from_slice(b"\r\nContent-Length: 10\r\n\r\n");
        let head = response(&raw, Method::Get).unwrap();
        assert_eq!(
            head.framing(),
            BodyFraming::None,
            "{}",
            String::from_utf8_lossy(status)
        );
        assert_eq!(head.is_interim(), status[0] == b'1');
    }
    let tunnel = response(
        b"HTTP/1.1 200 Connection established\r\n\r\n",
        Method::Connect,
    )
    .unwrap();
    assert_eq!(tunnel.framing(), BodyFraming::None);
}

#[test]
fn response_versions_and_reasons() {
    let head = response(b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n", Method::Get).unwrap();
    assert_eq!(head.version(), Version::Http10);
    assert!(!head.keep_alive());
    let head = response(
        b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\n",
        Method::Get,
    )
    .unwrap();
    assert!(head.keep_alive());
    let head = response(
        b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\n",
        Method::Get,
    )
    .unwrap();
    assert!(!head.keep_alive());

    let head = response(b"HTTP/1.1 404\r\nContent-Length: 0\r\n\r\n", Method::Get).unwrap();
    assert_eq!(head.reason(), b"");
    let head = response(b"HTTP/1.1 404 \r\nContent-Length: 0\r\n\r\n", Method::Get).unwrap();
    assert_eq!(head.reason(), b"");
    let head = response(
        b"HTTP/1.1 200 Tr\xe8s bien\r\nContent-Length: 0\r\n\r\n",
        Method::Get,
    )
    .unwrap();
    assert_eq!(head.reason(), b"Tr\xe8s bien");
}

#[test]
fn response_rejections() {
    let cases: &[(&[u8], ParseErrorKind)] = &[
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
            ParseErrorKind::Invalid,
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
            ParseErrorKind::Invalid,
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n",
            ParseErrorKind::Invalid,
        ),
        (
            b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            ParseErrorKind::Invalid,
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
            ParseErrorKind::Invalid,
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            ParseErrorKind::UnsupportedTransferEncoding,
        ),
        (
            b"HTTP/1.1 200 OK\nContent-Length: 1\r\n\r\n",
            ParseErrorKind::Invalid,
        ),
        (
            b"HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n",
            ParseErrorKind::Invalid,
        ),
        (b"HTTP/1.1 099 Low\r\n\r\n", ParseErrorKind::Invalid),
        (b"HTTP/1.1 600 High\r\n\r\n", ParseErrorKind::Invalid),
        (b"HTTP/1.1 20 OK\r\n\r\n", ParseErrorKind::Invalid),
        (b"HTTP/1.1 2000 OK\r\n\r\n", ParseErrorKind::Invalid),
        (
            b"HTTP/2.0 200 OK\r\n\r\n",
            ParseErrorKind::UnsupportedVersion,
        ),
        (b"HTTP/1.1 200 OK\r\nX : a\r\n\r\n", ParseErrorKind::Invalid),
    ];
    for (raw, kind) in cases {
        let error = parse_response(raw, &Limits::default(), Method::Get).unwrap_err();
        assert_eq!(error.kind, *kind, "{:?}", String::from_utf8_lossy(raw));
    }
}

/// RFC 9112 §6.1: a response to HEAD or a 304 may name the codings its body would have
/// had; it has no body whatever they are (§6.3 rule 1), so no coding is refused there.
/// The framing rules that concern every message still hold.
#[test]
fn a_bodiless_response_may_name_any_transfer_coding() {
    for (raw, method) in [
        (
            &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"[..],
            Method::Head,
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
            Method::Head,
        ),
        (
            b"HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            Method::Get,
        ),
    ] {
        let head = response(raw, method)
            .unwrap_or_else(|error| panic!("{:?}: {error:?}", String::from_utf8_lossy(raw)));
        assert_eq!(head.framing(), BodyFraming::None);
    }
    for raw in [
        &b"HTTP/1.0 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n"[..],
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: gzip\r\n\r\n",
    ] {
        let error = parse_response(raw, &Limits::default(), Method::Head).unwrap_err();
        assert_eq!(error.kind, ParseErrorKind::Invalid);
    }
}

#[test]
fn response_split_from() {
    let mut buf = BytesMut::from(&b"HTTP/1.1 204 No Content\r\nServer: s\r\n\r\nHTTP/1.1"[..]);
    let head = ResponseHead::split_from(&mut buf, &Limits::default(), Method::Get)
        .unwrap()
        .unwrap();
    assert_eq!(head.status(), 204);
    assert_eq!(head.header("SERVER"), Some(&b"s"[..]));
    assert_eq!(head.headers().count(), 1);
    assert_eq!(&buf[..], b"HTTP/1.1");
}

#[test]
fn a_later_http1_minor_version_is_read_as_http11() {
    // RFC 9112 §2.3: processed as the highest minor version weir implements.
    for version in ["1.2", "1.9"] {
        let raw = format!("\r\nGET /a HTTP/{version}\r\nHost: a\r\n\r\nGET");
        let Parsed::Complete(head, used) =
            parse_request(raw.as_bytes(), &Limits::default()).unwrap()
        else {
            panic!("partial");
        };
        assert_eq!((head.version(), used), (Version::Http11, raw.len() - 3));
        assert!(head.raw().ends_with(b"GET /a HTTP/1.1\r\nHost: a\r\n\r\n"));
        let mut buf = BytesMut::from(raw.as_bytes());
        let head = RequestHead::split_from(&mut buf, &Limits::default())
            .unwrap()
            .unwrap();
        assert_eq!(
            (head.version(), head.target()),
            (Version::Http11, &b"/a"[..])
        );
        assert_eq!(&buf[..], b"GET");

        let raw = format!("HTTP/{version} 200 OK\r\nContent-Length: 2\r\n\r\nok");
        let Parsed::Complete(head, used) =
            parse_response(raw.as_bytes(), &Limits::default(), Method::Get).unwrap()
        else {
            panic!("partial");
        };
        assert_eq!(
            (head.status(), head.version(), used),
            (200, Version::Http11, raw.len() - 2)
        );
        let mut buf = BytesMut::from(raw.as_bytes());
        let head = ResponseHead::split_from(&mut buf, &Limits::default(), Method::Get)
            .unwrap()
            .unwrap();
        assert_eq!((head.status(), head.version()), (200, Version::Http11));
        assert_eq!(&buf[..], b"ok");
    }
    // Only a single-digit minor version of HTTP/1, and only in the version's place.
    for raw in [
        &b"GET / HTTP/1.10\r\nHost: a\r\n\r\n"[..],
        b"GET / HTTP/2.2\r\nHost: a\r\n\r\n",
    ] {
        let mut buf = BytesMut::from(raw);
        assert!(RequestHead::split_from(&mut buf, &Limits::default()).is_err());
        assert_eq!(&buf[..], raw, "left as it was");
    }
    let partial = b"GET / HTTP/1.2\r\nHost: a\r\n";
    let mut buf = BytesMut::from(&partial[..]);
    assert!(matches!(
        RequestHead::split_from(&mut buf, &Limits::default()),
        Ok(None)
    ));
    assert_eq!(&buf[..], partial, "a partial head is left as it was");
    buf.extend_from_slice(b"\r\n");
    let head = RequestHead::split_from(&mut buf, &Limits::default());
    assert_eq!(head.unwrap().unwrap().version(), Version::Http11);
}

#[test]
fn whitespace_inside_the_target_is_a_bad_request_not_a_version_problem() {
    let error = rejected(b"GET /a b HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(
        (error.status(), error.reason),
        (400, "whitespace in request target")
    );
    assert_eq!(rejected(b"GET / HTTP/2.0\r\nHost: a\r\n\r\n").status(), 505);
}

#[test]
fn expectations_other_than_100_continue_are_refused() {
    for raw in [
        &b"PUT / HTTP/1.1\r\nHost: a\r\nExpect: 200-ok\r\n\r\n"[..],
        b"PUT / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue, x\r\n\r\n",
        b"PUT / HTTP/1.0\r\nExpect: nonsense\r\n\r\n",
    ] {
        let error = rejected(raw);
        assert_eq!(error.kind, ParseErrorKind::UnsupportedExpectation);
        assert_eq!(error.status(), 417);
    }
    let head = request(b"PUT / HTTP/1.1\r\nHost: a\r\nExpect: 100-Continue\r\n\r\n").unwrap();
    assert!(head.expects_continue());
}

#[test]
fn underscore_names_are_noticed() {
    let head = request(b"GET / HTTP/1.1\r\nHost: a\r\nX_Forwarded_For: b\r\n\r\n").unwrap();
    assert!(head.has_underscore_names());
    assert!(
        !request(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
            .unwrap()
            .has_underscore_names()
    );
}

#[test]
fn request_lines_of_refused_heads() {
    assert_eq!(
        request_line(b"PUT /a?b=1 HTTP/1.1\r\nExpect: x\r\n\r\n"),
        Some(RequestLine {
            method: b"PUT",
            target: b"/a?b=1",
            version: Some(b"HTTP/1.1"),
        })
    );
    assert_eq!(
        request_line(b"GET / HTTP/1.0\n"),
        Some(RequestLine {
            method: b"GET",
            target: b"/",
            version: Some(b"HTTP/1.0"),
        })
    );
    // A version weir does not speak is reported as sent; one that is no version is not.
    assert_eq!(
        request_line(b"GET / HTTP/2.0\r\n"),
        Some(RequestLine {
            method: b"GET",
            target: b"/",
            version: Some(b"HTTP/2.0"),
        })
    );
    assert_eq!(
        request_line(b"GET / HTTP/1.10\r\n"),
        Some(RequestLine {
            method: b"GET",
            target: b"/",
            version: None,
        })
    );
    for bad in [
        &b"GET /a b HTTP/1.1\r\n"[..],
        b"G(T / HTTP/1.1\r\n",
        b"GET / FTP/1.0\r\n",
        b"GET /\x01 HTTP/1.1\r\n",
        b"GET / HTTP/1.1",
        b" / HTTP/1.1\r\n",
    ] {
        assert_eq!(
            request_line(bad),
            None,
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
}
