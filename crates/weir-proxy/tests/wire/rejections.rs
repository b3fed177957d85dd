//! Every way a request can fail to parse: the exact status, a close, one
//! `weir_bad_requests_total`, and nothing at all sent to the node.

use weir_testkit::{TestOrigin, TestProxy, config};

use crate::support::{bad_requests, parse_response, read_half_until_close, send_until_close};

/// Small limits so that each one is cheap to cross.
const LIMITS: &str = "[virtual_servers.web.limits]\n\
    max_header_bytes = \"1KiB\"\n\
    max_headers = 8\n\
    max_body_bytes = \"1KiB\"\n\
    request_buffer = \"1KiB\"";

/// Sends `raw` on a fresh connection and checks the whole reply: one answer
/// with `status` and `Connection: close`, then the close.
async fn assert_rejected(raw: impl AsRef<[u8]>, status: u16) {
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&config(&[origin.addr], "", LIMITS)).await;
    let reply = send_until_close(proxy.addr, raw.as_ref()).await;
    assert!(reply.closed, "not closed after {:?}", reply.text());
    let response = parse_response(&reply.bytes);
    assert_eq!(response.status, status, "{:?}", reply.text());
    assert_eq!(response.header("connection"), Some("close"));
    let length: usize = response
        .header("content-length")
        .and_then(|value| value.parse().ok())
        .expect("a Content-Length");
    assert_eq!(response.rest.len(), length, "exactly one answer");
    assert_eq!(origin.stats.requests(), 0, "the node saw a request");
    assert_eq!(origin.stats.connections_accepted(), 0);
    assert_eq!(bad_requests(&proxy), 1);
    proxy.stop().await;
    origin.stop().await;
}

macro_rules! rejected {
    ($($(#[$doc:meta])* $name:ident: $raw:expr => $status:expr;)*) => {$(
        $(#[$doc])*
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            assert_rejected($raw, $status).await;
        }
    )*};
}

fn head_with(headers: &str) -> Vec<u8> {
    format!("POST /echo HTTP/1.1\r\nHost: t\r\n{headers}\r\n").into_bytes()
}

rejected! {
    /// Request smuggling's classic: two framings.
    length_and_chunked:
        head_with("Content-Length: 5\r\nTransfer-Encoding: chunked\r\n") => 400;
    chunked_and_length:
        head_with("Transfer-Encoding: chunked\r\nContent-Length: 5\r\n") => 400;
    length_not_a_number: head_with("Content-Length: abc\r\n") => 400;
    length_negative: head_with("Content-Length: -1\r\n") => 400;
    length_with_inner_space: head_with("Content-Length: 1 2\r\n") => 400;
    length_list: head_with("Content-Length: 1, 1\r\n") => 400;
    length_plus_sign: head_with("Content-Length: +1\r\n") => 400;
    length_overflows: head_with("Content-Length: 18446744073709551616\r\n") => 400;
    length_empty: head_with("Content-Length: \r\n") => 400;
    duplicate_equal_lengths: head_with("Content-Length: 5\r\nContent-Length: 5\r\n") => 400;
    duplicate_different_lengths: head_with("Content-Length: 5\r\nContent-Length: 6\r\n") => 400;
    obs_fold: b"GET / HTTP/1.1\r\nHost: t\r\nX-A: a\r\n b\r\n\r\n" => 400;
    obs_fold_with_tab: b"GET / HTTP/1.1\r\nHost: t\r\nX-A: a\r\n\tb\r\n\r\n" => 400;
    bare_lf_between_headers: b"GET / HTTP/1.1\r\nHost: t\nX-A: a\r\n\r\n" => 400;
    bare_lf_after_request_line: b"GET / HTTP/1.1\nHost: t\r\n\r\n" => 400;
    lf_only_head: b"GET / HTTP/1.1\nHost: t\n\n" => 400;
    space_in_header_name: b"GET / HTTP/1.1\r\nHost: t\r\nBad Header: x\r\n\r\n" => 400;
    control_in_header_name: b"GET / HTTP/1.1\r\nHost: t\r\nX\x01: y\r\n\r\n" => 400;
    space_before_colon: b"GET / HTTP/1.1\r\nHost: t\r\nX-A : y\r\n\r\n" => 400;
    nul_in_header_value: b"GET / HTTP/1.1\r\nHost: t\r\nX-A: a\0b\r\n\r\n" => 400;
    bare_cr_in_header_value: b"GET / HTTP/1.1\r\nHost: t\r\nX-A: a\rb\r\n\r\n" => 400;
    missing_host: b"GET / HTTP/1.1\r\nX-A: a\r\n\r\n" => 400;
    two_hosts: b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n" => 400;
    two_hosts_in_http10: b"GET / HTTP/1.0\r\nHost: a\r\nHost: a\r\n\r\n" => 400;
    host_with_userinfo: b"GET / HTTP/1.1\r\nHost: u@a\r\n\r\n" => 400;
    absolute_target_and_other_host: b"GET http://a/ HTTP/1.1\r\nHost: b\r\n\r\n" => 400;
    // RFC 9112 §6.3: without chunked last the length is unknown (400); §6.1: a coding
    // weir does not implement before a final chunked is 501.
    unknown_transfer_coding: head_with("Transfer-Encoding: gzip\r\n") => 400;
    chunked_not_last: head_with("Transfer-Encoding: chunked, gzip\r\n") => 400;
    coding_before_chunked: head_with("Transfer-Encoding: gzip, chunked\r\n") => 501;
    chunked_twice: head_with("Transfer-Encoding: chunked, chunked\r\n") => 400;
    chunked_in_http10:
        b"POST /echo HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" => 400;
    http2_version: b"GET / HTTP/2.0\r\nHost: t\r\n\r\n" => 505;
    http3_version: b"GET / HTTP/3.0\r\nHost: t\r\n\r\n" => 505;
    malformed_version: b"GET / HTPT/1.1\r\nHost: t\r\n\r\n" => 400;
    lower_case_version: b"GET / http/1.1\r\nHost: t\r\n\r\n" => 400;
    two_spaces_in_request_line: b"GET  / HTTP/1.1\r\nHost: t\r\n\r\n" => 400;
    fragment_in_target: b"GET /a#b HTTP/1.1\r\nHost: t\r\n\r\n" => 400;
    non_ascii_target: b"GET /\xc3\xa9 HTTP/1.1\r\nHost: t\r\n\r\n" => 400;
    /// The head passes `max_header_bytes` (1 KiB) before it ends.
    head_too_large: format!(
        "GET / HTTP/1.1\r\nHost: t\r\nX-Big: {}\r\n\r\n",
        "a".repeat(2048)
    ) => 431;
    /// One field more than `max_headers` (8).
    too_many_headers: format!(
        "GET / HTTP/1.1\r\nHost: t\r\n{}\r\n",
        (0..8).map(|i| format!("X-{i}: v\r\n")).collect::<String>()
    ) => 431;
    /// Answered from the head alone, before any body byte.
    length_past_max_body: head_with("Content-Length: 1025\r\n") => 413;
    chunked_body_past_max_body: {
        let mut raw = head_with("Transfer-Encoding: chunked\r\n");
        raw.extend_from_slice(&crate::support::chunked(&[b'x'; 1100], 500));
        raw
    } => 413;
    malformed_chunk_size: {
        let mut raw = head_with("Transfer-Encoding: chunked\r\n");
        raw.extend_from_slice(b"zz\r\nhello\r\n0\r\n\r\n");
        raw
    } => 400;
    chunk_size_overflows: {
        let mut raw = head_with("Transfer-Encoding: chunked\r\n");
        raw.extend_from_slice(b"fffffffffffffffff\r\n");
        raw
    } => 400;
    chunk_without_crlf_after_data: {
        let mut raw = head_with("Transfer-Encoding: chunked\r\n");
        raw.extend_from_slice(b"5\r\nhelloXX0\r\n\r\n");
        raw
    } => 400;
    bare_lf_in_chunk_size: {
        let mut raw = head_with("Transfer-Encoding: chunked\r\n");
        raw.extend_from_slice(b"5\nhello\r\n0\r\n\r\n");
        raw
    } => 400;
}

/// The limits are inclusive: a head of exactly `max_headers` fields and a
/// body of exactly `max_body_bytes` pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_are_inclusive() {
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&config(&[origin.addr], "", LIMITS)).await;
    let mut raw = format!(
        "POST /echo HTTP/1.1\r\nHost: t\r\n{}Content-Length: 1024\r\nConnection: close\r\n\r\n",
        (0..5).map(|i| format!("X-{i}: v\r\n")).collect::<String>()
    )
    .into_bytes();
    raw.extend_from_slice(&[b'x'; 1024]);
    let reply = send_until_close(proxy.addr, &raw).await;
    let response = parse_response(&reply.bytes);
    assert_eq!(response.status, 200, "{}", reply.text());
    let echo = weir_origin::parse_echo_json(&response.rest).expect("echo JSON");
    assert_eq!(echo.body_length, 1024);
    assert_eq!(bad_requests(&proxy), 0);
    proxy.stop().await;
    origin.stop().await;
}

/// A client that sends its whole (too large) body without waiting still
/// reads the 413 (on loopback, where the answer leaves before the close).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejection_reaches_a_client_still_sending_its_body() {
    use tokio::io::AsyncWriteExt;
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&config(&[origin.addr], "", LIMITS)).await;
    let mut raw = head_with("Content-Length: 200000\r\n");
    raw.extend_from_slice(&[b'x'; 200_000]);
    for _ in 0..10 {
        let stream = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
        let (mut reader, mut writer) = stream.into_split();
        let raw = raw.clone();
        let sending = tokio::spawn(async move { writer.write_all(&raw).await });
        let reply = read_half_until_close(&mut reader).await;
        assert!(reply.closed);
        assert!(
            reply.bytes.starts_with(b"HTTP/1.1 413 "),
            "{:?}",
            reply.text()
        );
        let _ = sending.await;
    }
    assert_eq!(origin.stats.requests(), 0);
    assert_eq!(bad_requests(&proxy), 10);
    proxy.stop().await;
    origin.stop().await;
}
