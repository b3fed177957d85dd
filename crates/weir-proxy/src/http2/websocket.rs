//! WebSocket across protocol versions, as pure functions: an HTTP/2 client's
//! extended CONNECT (RFC 8441, `:protocol websocket`) as the HTTP/1.1 upgrade
//! request an HTTP/1.1 node expects (RFC 6455 §4.1) and the node's `101` as
//! the `200` the stream expects; an HTTP/1.1 client's upgrade as an extended
//! CONNECT to an HTTP/2 node and its `200` as the `101` the client expects.
//! After the switch, bytes are copied both ways (DATA frames on the HTTP/2
//! side). Design: `docs/design/http2.md` ("WebSocket").

use aws_lc_rs::digest;
use bytes::{BufMut, BytesMut};
use weir_http::{Limits, ParseError, ParseErrorKind, Parsed, RequestHead, ResponseHead};

/// RFC 6455 §1.3: appended to the key before hashing.
const ACCEPT_GUID: &[u8] = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
/// The node's choices that the client's switch carries.
const WEBSOCKET_CHOICES: [&str; 2] = ["sec-websocket-protocol", "sec-websocket-extensions"];
/// Fields that belong to one hop's upgrade and are rebuilt, not copied.
const HOP_FIELDS: [&str; 5] = [
    "connection",
    "upgrade",
    "sec-websocket-key",
    "sec-websocket-accept",
    "host",
];

/// `Sec-WebSocket-Accept` for `key` (RFC 6455 §4.2.2).
pub(crate) fn accept_key(key: &[u8]) -> String {
    let mut context = digest::Context::new(&digest::SHA1_FOR_LEGACY_USE_ONLY);
    context.update(key);
    context.update(ACCEPT_GUID);
    base64(context.finish().as_ref())
}

/// A fresh `Sec-WebSocket-Key`: 16 random bytes, base64.
pub(crate) fn new_key() -> String {
    let mut nonce = [0u8; 16];
    // The system generator does not fail on Linux; zeros would still be a valid key.
    let _ = aws_lc_rs::rand::fill(&mut nonce);
    base64(&nonce)
}

/// The HTTP/1.1 upgrade request a WebSocket extended CONNECT stands for, from
/// the head weir's own codec built of it (`GET` its `:path`, `Host` its
/// `:authority`): as [`upgrade_request`] does from the `h2` crate's parts.
pub(crate) fn upgrade_request_of_head(
    head: &RequestHead,
    key: &str,
    limits: &Limits,
) -> Result<RequestHead, ParseError> {
    let versioned = head.header("sec-websocket-version").is_some();
    let fields = head.headers();
    upgrade_head(
        head.target(),
        head.header("host"),
        (key, versioned),
        fields,
        limits,
    )
}

/// Whether an HTTP/2 request is a WebSocket extended CONNECT.
pub(crate) fn is_extended_connect(parts: &http::request::Parts) -> bool {
    parts.method == http::Method::CONNECT
        && parts
            .extensions
            .get::<h2::ext::Protocol>()
            .is_some_and(|protocol| protocol.as_str().eq_ignore_ascii_case("websocket"))
}

/// The HTTP/1.1 upgrade request for an HTTP/2 extended CONNECT, with `key`
/// as its `Sec-WebSocket-Key`; checked by weir-http's parser like any head.
pub(crate) fn upgrade_request(
    parts: &http::request::Parts,
    key: &str,
    limits: &Limits,
) -> Result<RequestHead, ParseError> {
    // The client's `Host` is rebuilt from `:authority`: one that differs is malformed,
    // as for any other request.
    weir_http::http2::host_agrees(parts)?;
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let host = parts.uri.authority().map(|a| a.as_str().as_bytes());
    let fields = parts
        .headers
        .iter()
        .map(|(name, value)| (name.as_str().as_bytes(), value.as_bytes()));
    let versioned = parts.headers.contains_key("sec-websocket-version");
    upgrade_head(path.as_bytes(), host, (key, versioned), fields, limits)
}

/// Writes the HTTP/1.1 upgrade request for `target` (`GET`, `Host`, the upgrade's
/// fields with `key`, `Sec-WebSocket-Version: 13` unless the client sent one
/// (`versioned`), then the client's fields but the hop-by-hop ones) and parses it
/// like any head.
fn upgrade_head<'a>(
    target: &[u8],
    host: Option<&[u8]>,
    (key, versioned): (&str, bool),
    fields: impl Iterator<Item = (&'a [u8], &'a [u8])>,
    limits: &Limits,
) -> Result<RequestHead, ParseError> {
    let mut out = BytesMut::with_capacity(256);
    out.put_slice(b"GET ");
    out.put_slice(target);
    out.put_slice(b" HTTP/1.1\r\n");
    if let Some(host) = host {
        field(&mut out, "host", host);
    }
    field(&mut out, "connection", b"upgrade");
    field(&mut out, "upgrade", b"websocket");
    field(&mut out, "sec-websocket-key", key.as_bytes());
    if !versioned {
        field(&mut out, "sec-websocket-version", b"13");
    }
    for (name, value) in fields {
        if !HOP_FIELDS
            .iter()
            .any(|hop| name.eq_ignore_ascii_case(hop.as_bytes()))
        {
            field(&mut out, name, value);
        }
    }
    out.put_slice(b"\r\n");
    match weir_http::parse_request(&out, limits)? {
        Parsed::Complete(head, _) => Ok(head),
        Parsed::Partial => Err(ParseError {
            kind: ParseErrorKind::Invalid,
            reason: "incomplete upgrade head",
        }),
    }
}

/// The `200` for the HTTP/2 client when the HTTP/1.1 node switched with a
/// `101` whose `Sec-WebSocket-Accept` matches `key`; `None` when it did not
/// (the caller answers 502).
pub(crate) fn stream_accepted(node: &ResponseHead, key: &str) -> Option<http::Response<()>> {
    let upgraded = node.status() == 101
        && node
            .header("upgrade")
            .is_some_and(|value| value.eq_ignore_ascii_case(b"websocket"));
    let accept = node.header("sec-websocket-accept")?;
    if !upgraded || accept != accept_key(key.as_bytes()).as_bytes() {
        return None;
    }
    stream_opened(node)
}

/// Whether a request's `Upgrade` offers WebSocket (`websocket`, or
/// `websocket/13`, among others), the one protocol switch carried to an HTTP/2 node.
pub(crate) fn asks_for_websocket(head: &RequestHead) -> bool {
    head.header("upgrade").is_some_and(|offered| {
        weir_http::upgrade_protocols(offered)
            .any(|(_, name)| name.eq_ignore_ascii_case(b"websocket"))
    })
}

/// The extended CONNECT (RFC 8441 §4, `:protocol websocket`) for an HTTP/2
/// node, from the forwarded request that the WebSocket upgrade became
/// (`weir_http::http2::request_to_h2_edited`: forwarding headers, `Via`, the
/// rules' edits, the connection-specific fields already gone): the method
/// becomes CONNECT and the key goes, since HTTP/2 has none (RFC 8441 §5);
/// `Sec-WebSocket-Version`, `-Protocol`, `-Extensions` and `Origin` stay.
pub(crate) fn extended_connect(mut request: http::Request<()>) -> http::Request<()> {
    *request.method_mut() = http::Method::CONNECT;
    request
        .extensions_mut()
        .insert(h2::ext::Protocol::from_static("websocket"));
    let headers = request.headers_mut();
    for hop in HOP_FIELDS {
        headers.remove(hop);
    }
    if !headers.contains_key("sec-websocket-version") {
        headers.insert(
            "sec-websocket-version",
            http::HeaderValue::from_static("13"),
        );
    }
    request
}

/// [`extended_connect`] for weir's own client: the GET as written for an
/// HTTP/1.1 node, without its HTTP/1.1-only fields (the encoder drops the
/// connection-specific ones and takes `Host` for `:authority`), sent as a
/// CONNECT with `:protocol websocket`.
pub(crate) fn extended_connect_written(
    mut request: weir_upstream::http2::OwnRequest,
) -> weir_upstream::http2::OwnRequest {
    let mut out = bytes::BytesMut::with_capacity(request.written.len() + 32);
    let mut version = false;
    for line in request.written.split_inclusive(|&b| b == b'\n') {
        let name = line.split(|&b| b == b':').next().unwrap_or_default();
        if line.starts_with(b"\r\n") {
            break;
        }
        version |= name.eq_ignore_ascii_case(b"sec-websocket-version");
        let hop = HOP_FIELDS[..4]
            .iter()
            .any(|hop| name.eq_ignore_ascii_case(hop.as_bytes()));
        if !hop {
            out.extend_from_slice(line);
        }
    }
    if !version {
        out.extend_from_slice(b"sec-websocket-version: 13\r\n");
    }
    out.extend_from_slice(b"\r\n");
    request.written = out.freeze();
    request.protocol = Some(b"websocket");
    request
}

/// The `200` for an HTTP/2 client whose extended CONNECT an HTTP/2 node
/// accepted, with the node's `Sec-WebSocket-Protocol`/`-Extensions`.
pub(crate) fn stream_opened(node: &ResponseHead) -> Option<http::Response<()>> {
    let mut response = http::Response::builder().status(200);
    for name in WEBSOCKET_CHOICES {
        if let Some(value) = node.header(name) {
            response = response.header(name, value);
        }
    }
    response.body(()).ok()
}

/// The `101` head (HTTP/1.1 bytes) for the client whose upgrade an HTTP/2
/// node accepted with a 2xx (`node`), answering the client's `key`; the
/// node's own fields go with it, but not those of one hop or of a body.
pub(crate) fn switching_protocols(node: &ResponseHead, key: &[u8], out: &mut BytesMut) {
    out.put_slice(b"HTTP/1.1 101 Switching Protocols\r\n");
    field(out, "Upgrade", b"websocket");
    field(out, "Connection", b"Upgrade");
    field(out, "Sec-WebSocket-Accept", accept_key(key).as_bytes());
    for (name, value) in node.headers() {
        let lower = String::from_utf8_lossy(name).to_ascii_lowercase();
        let skip = HOP_FIELDS.contains(&lower.as_str())
            || matches!(
                lower.as_str(),
                "content-length" | "transfer-encoding" | "keep-alive" | "proxy-connection"
            );
        if !skip {
            field(out, &lower, value);
        }
    }
    out.put_slice(b"\r\n");
}

fn field(out: &mut BytesMut, name: impl AsRef<[u8]>, value: &[u8]) {
    out.put_slice(name.as_ref());
    out.put_slice(b": ");
    out.put_slice(value);
    out.put_slice(b"\r\n");
}

/// Standard base64 with padding (RFC 4648 §4).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_keys_follow_rfc_6455() {
        // RFC 6455 §1.3's example.
        assert_eq!(
            accept_key(b"dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        let key = new_key();
        assert_eq!(key.len(), 24);
        assert_ne!(key, new_key());
    }

    #[test]
    fn an_extended_connect_becomes_an_upgrade_and_back() {
        let request = http::Request::builder()
            .method("CONNECT")
            .uri("https://chat.example/room?x=1")
            .extension(h2::ext::Protocol::from_static("websocket"))
            .header("sec-websocket-version", "13")
            .header("sec-websocket-protocol", "chat")
            .header("origin", "https://chat.example")
            .body(())
            .expect("request");
        let (parts, ()) = request.into_parts();
        assert!(is_extended_connect(&parts));
        let key = "dGhlIHNhbXBsZSBub25jZQ==";
        let head = upgrade_request(&parts, key, &Limits::default()).expect("a valid head");
        assert_eq!(head.method_bytes(), b"GET");
        assert_eq!(head.target(), b"/room?x=1");
        assert_eq!(head.host(), Some(&b"chat.example"[..]));
        assert!(head.connection().upgrade);
        assert_eq!(head.header("upgrade"), Some(&b"websocket"[..]));
        assert_eq!(head.header("sec-websocket-key"), Some(key.as_bytes()));
        assert_eq!(head.header("sec-websocket-protocol"), Some(&b"chat"[..]));
        let switched = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
            Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\nSec-WebSocket-Protocol: chat\r\n\r\n";
        let node =
            match weir_http::parse_response(switched, &Limits::default(), weir_http::Method::Get)
                .expect("valid")
            {
                Parsed::Complete(head, _) => head,
                Parsed::Partial => panic!("incomplete"),
            };
        let response = stream_accepted(&node, key).expect("accepted");
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["sec-websocket-protocol"], "chat");
        assert!(
            stream_accepted(&node, "another key").is_none(),
            "a wrong accept is refused"
        );
    }

    /// RFC 9113 §8.3.1: a `Host` other than `:authority` makes an extended CONNECT
    /// malformed, as any request; the same authority written with its default port passes.
    #[test]
    fn an_extended_connect_whose_host_differs_is_malformed() {
        let connect = |host: &str| {
            let request = http::Request::builder()
                .method("CONNECT")
                .uri("https://chat.example/room")
                .extension(h2::ext::Protocol::from_static("websocket"))
                .header("host", host)
                .body(())
                .expect("request");
            let (parts, ()) = request.into_parts();
            upgrade_request(&parts, "dGhlIHNhbXBsZSBub25jZQ==", &Limits::default())
        };
        assert!(connect("internal.test").is_err());
        assert!(connect("chat.example:8443").is_err());
        let head = connect("Chat.Example:443").expect("the same authority");
        assert_eq!(head.host(), Some(&b"chat.example"[..]));
    }

    #[test]
    fn an_upgrade_becomes_an_extended_connect_and_back() {
        let raw = "GET /live HTTP/1.1\r\nHost: ws.example\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
                   Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\
                   Sec-WebSocket-Protocol: chat\r\n\r\n";
        let head =
            match weir_http::parse_request(raw.as_bytes(), &Limits::default()).expect("valid") {
                Parsed::Complete(head, _) => head,
                Parsed::Partial => panic!("incomplete"),
            };
        assert!(asks_for_websocket(&head));
        let forward = weir_http::ForwardRequest {
            framing: weir_http::BodyFraming::None,
            client_addr: None,
            proto: "https",
            via: Some("weir"),
            via_version: None,
            upgrade: true,
            strip_expect: true,
            owned_header: None,
            drop_underscore_names: false,
        };
        let forwarded = weir_http::http2::request_to_h2(&head, &forward, "https").expect("h2 form");
        let request = extended_connect(forwarded);
        assert_eq!(request.method(), http::Method::CONNECT);
        assert_eq!(request.uri().to_string(), "https://ws.example/live");
        let protocol = request
            .extensions()
            .get::<h2::ext::Protocol>()
            .expect(":protocol");
        assert_eq!(protocol.as_str(), "websocket");
        for gone in ["connection", "upgrade", "sec-websocket-key", "host"] {
            assert!(!request.headers().contains_key(gone), "{gone}");
        }
        assert_eq!(request.headers()["sec-websocket-version"], "13");
        assert_eq!(request.headers()["sec-websocket-protocol"], "chat");
        assert_eq!(request.headers()["via"], "1.1 weir");
        // The node's 200, as `response_from_h2` makes it (no length: chunked).
        let parts = http::Response::builder()
            .status(200)
            .header("sec-websocket-protocol", "chat")
            .header("x-node", "n1")
            .body(())
            .expect("response")
            .into_parts()
            .0;
        let node = weir_http::http2::response_from_h2(&parts, false, weir_http::Method::Get)
            .expect("converted");
        let mut out = BytesMut::new();
        switching_protocols(&node, b"dGhlIHNhbXBsZSBub25jZQ==", &mut out);
        let text = String::from_utf8_lossy(&out);
        assert!(
            text.starts_with("HTTP/1.1 101 Switching Protocols\r\n"),
            "{text}"
        );
        for expected in [
            "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n",
            "sec-websocket-protocol: chat\r\n",
            "x-node: n1\r\n",
        ] {
            assert!(text.contains(expected), "{expected:?} in {text}");
        }
        assert!(!text.contains("chunked"), "{text}");
        assert_eq!(
            stream_opened(&node).expect("200").headers()["sec-websocket-protocol"],
            "chat"
        );
        let (_, h2c) = weir_http::parse_request(
            b"GET / HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\nUpgrade: h2c\r\n\r\n",
            &Limits::default(),
        )
        .map(|parsed| match parsed {
            Parsed::Complete(head, used) => (used, head),
            Parsed::Partial => panic!("incomplete"),
        })
        .expect("valid");
        assert!(!asks_for_websocket(&h2c));
    }
}
