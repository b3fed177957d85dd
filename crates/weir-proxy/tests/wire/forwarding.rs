//! What the proxy changes in a forwarded message: hop-by-hop fields out,
//! forwarding fields in, everything else byte for byte (header-name case too).

use weir_origin::{EchoReport, parse_echo_json};
use weir_testkit::client::{Connection, Response};
use weir_testkit::{TestOrigin, TestProxy, config};

use crate::support::RecordingNode;

async fn exchange(proxy: &TestProxy, raw: &[u8]) -> Response {
    let mut connection = Connection::open(proxy.addr).await.unwrap();
    connection.send(raw).await.unwrap();
    connection.response().await.unwrap()
}

fn echo(response: &Response) -> EchoReport {
    assert_eq!(response.status, 200, "{}", response.text());
    parse_echo_json(&response.body).expect("an /echo report")
}

/// Connection, Keep-Alive, TE, Proxy-Connection, Upgrade (without an
/// upgrade) and every field the Connection header names stay on this hop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hop_by_hop_fields_are_not_forwarded() {
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&config(&[origin.addr], "", "")).await;
    let report = echo(
        &exchange(
            &proxy,
            b"GET /echo HTTP/1.1\r\nHost: t\r\n\
              Connection: keep-alive, X-Secret\r\n\
              Keep-Alive: timeout=5\r\n\
              TE: trailers\r\n\
              Proxy-Connection: keep-alive\r\n\
              Upgrade: h2c\r\n\
              X-Secret: s\r\n\
              X-Kept: k\r\n\
              connection: x-other\r\n\
              X-OTHER: o\r\n\r\n",
        )
        .await,
    );
    for name in [
        "connection",
        "keep-alive",
        "te",
        "proxy-connection",
        "upgrade",
        "x-secret",
        "x-other",
    ] {
        assert_eq!(report.header(name), None, "{name} was forwarded");
    }
    assert_eq!(report.header("x-kept"), Some("k"));
    assert_eq!(report.header("host"), Some("t"));
    proxy.stop().await;
    origin.stop().await;
}

/// `X-Forwarded-For` is appended to, `X-Forwarded-Proto` replaced, and `Via`
/// gets this hop, on the request and on the response.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarding_fields_are_added() {
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&config(&[origin.addr], "", "")).await;
    let response = exchange(
        &proxy,
        b"GET /echo HTTP/1.1\r\nHost: t\r\n\
          X-Forwarded-For: 10.0.0.1\r\n\
          X-Forwarded-For: 10.0.0.2, 10.0.0.3\r\n\
          X-Forwarded-Proto: https\r\n\
          Via: 1.0 edge\r\n\r\n",
    )
    .await;
    assert_eq!(response.header("via"), Some("1.1 weir"));
    let report = echo(&response);
    assert_eq!(
        report.header_values("x-forwarded-for").collect::<Vec<_>>(),
        ["10.0.0.1, 10.0.0.2, 10.0.0.3, 127.0.0.1"]
    );
    assert_eq!(
        report
            .header_values("x-forwarded-proto")
            .collect::<Vec<_>>(),
        ["http"]
    );
    assert_eq!(
        report.header_values("via").collect::<Vec<_>>(),
        ["1.0 edge, 1.1 weir"]
    );

    // Without any: each is added once.
    let report = echo(&exchange(&proxy, b"GET /echo HTTP/1.0\r\nHost: t\r\n\r\n").await);
    assert_eq!(report.header("x-forwarded-for"), Some("127.0.0.1"));
    assert_eq!(report.header("x-forwarded-proto"), Some("http"));
    assert_eq!(report.header("via"), Some("1.0 weir"));
    proxy.stop().await;
    origin.stop().await;
}

/// `forwarded_headers = false`: the request goes on as the client sent it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarding_fields_can_be_turned_off() {
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&config(&[origin.addr], "", "forwarded_headers = false")).await;
    let report = echo(&exchange(&proxy, b"GET /echo HTTP/1.1\r\nHost: t\r\n\r\n").await);
    assert_eq!(report.header("x-forwarded-for"), None);
    assert_eq!(report.header("x-forwarded-proto"), None);
    assert_eq!(report.header("via"), None);
    let report = echo(
        &exchange(
            &proxy,
            b"GET /echo HTTP/1.1\r\nHost: t\r\nX-Forwarded-For: 10.0.0.1\r\nVia: 1.0 edge\r\n\r\n",
        )
        .await,
    );
    assert_eq!(report.header("x-forwarded-for"), Some("10.0.0.1"));
    assert_eq!(report.header("via"), Some("1.0 edge"));
    proxy.stop().await;
    origin.stop().await;
}

/// Header names keep their case in both directions, and the rest of the
/// request head arrives byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_name_case_is_kept_both_ways() {
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&config(&[origin.addr], "", "")).await;
    let response = exchange(
        &proxy,
        b"GET /echo?q=1 HTTP/1.1\r\nhOsT: t\r\nx-MiXeD-Case: v\r\nX-UPPER: U\r\nx-lower: l\r\n\r\n",
    )
    .await;
    assert!(
        response
            .headers
            .iter()
            .any(|(name, value)| name == "X-Origin" && value == "a"),
        "{:?}",
        response.headers
    );
    let report = echo(&response);
    assert_eq!(report.target, "/echo?q=1");
    let sent: Vec<(&str, &str)> = report
        .headers
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_str()))
        .take(4)
        .collect();
    assert_eq!(
        sent,
        [
            ("hOsT", "t"),
            ("x-MiXeD-Case", "v"),
            ("X-UPPER", "U"),
            ("x-lower", "l")
        ]
    );
    proxy.stop().await;
    origin.stop().await;
}

/// The exact head a node receives, and the exact response head a client
/// receives, from a node that uses odd header-name case.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_heads_byte_for_byte() {
    let mut node = RecordingNode::start(
        b"HTTP/1.1 200 OK\r\nx-lower: 1\r\nX-UPPER: 2\r\nContent-Length: 2\r\nKeep-Alive: timeout=9\r\n\
          date: Sun, 06 Nov 1994 08:49:37 GMT\r\n\r\nok",
    )
    .await;
    let proxy = TestProxy::start(&config(&[node.addr], "", "")).await;
    let mut connection = Connection::open(proxy.addr).await.unwrap();
    connection
        .send(b"GET /a?b HTTP/1.1\r\nHost: t\r\nx-MiXeD-Case: v\r\nConnection: keep-alive\r\nAccept:  */*  \r\n\r\n")
        .await
        .unwrap();
    let head = crate::support::read_head(&mut connection.stream).await;
    assert_eq!(
        head,
        "HTTP/1.1 200 OK\r\nx-lower: 1\r\nX-UPPER: 2\r\ndate: Sun, 06 Nov 1994 08:49:37 GMT\r\n\
         Content-Length: 2\r\nVia: 1.1 weir\r\n\r\n"
    );
    let request = node.next().await;
    // The request id (on by default) is a fresh 32-digit hex value, written last.
    let head = request.head();
    let (kept, id) = head.split_once("X-Request-Id: ").expect("a request id");
    assert_eq!(
        kept,
        "GET /a?b HTTP/1.1\r\nHost: t\r\nx-MiXeD-Case: v\r\nAccept:  */*  \r\n\
         X-Forwarded-For: 127.0.0.1\r\nX-Forwarded-Proto: http\r\nVia: 1.1 weir\r\n"
    );
    let id = id.strip_suffix("\r\n\r\n").expect("the id ends the head");
    assert!(
        id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()),
        "{id}"
    );
    proxy.stop().await;
}

/// RFC 9110 §7.6.2: an OPTIONS or TRACE whose Max-Forwards is 0 is answered by weir (its
/// final recipient: the node never sees it); a higher one goes on with one hop fewer;
/// other methods' Max-Forwards is left as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_forwards_is_counted_down_and_zero_answered_here() {
    let mut node =
        RecordingNode::start(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nDate: x\r\n\r\nok").await;
    let proxy = TestProxy::start(&config(
        &[node.addr],
        "",
        "[virtual_servers.web.http]\ntrace = true",
    ))
    .await;
    let options = exchange(
        &proxy,
        b"OPTIONS /a HTTP/1.1\r\nHost: t\r\nMax-Forwards: 0\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(options.status, 200);
    assert_eq!(
        options.header("allow"),
        Some("GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH, TRACE")
    );
    let trace = exchange(
        &proxy,
        b"TRACE /b?c HTTP/1.1\r\nHost: t\r\nMax-Forwards: 0\r\nCookie: secret=1\r\nX-A: v\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(trace.status, 200);
    assert_eq!(trace.header("content-type"), Some("message/http"));
    assert_eq!(
        trace.text(),
        "TRACE /b?c HTTP/1.1\r\nHost: t\r\nMax-Forwards: 0\r\nX-A: v\r\nConnection: close\r\n\r\n"
    );
    // Forwarded: one hop fewer for OPTIONS, untouched for GET.
    exchange(
        &proxy,
        b"OPTIONS * HTTP/1.1\r\nHost: t\r\nmax-forwards: 3\r\nConnection: close\r\n\r\n",
    )
    .await;
    let forwarded = node.next().await.head();
    assert!(forwarded.contains("\r\nMax-Forwards: 2\r\n"), "{forwarded}");
    assert!(!forwarded.contains("max-forwards: 3"), "{forwarded}");
    exchange(
        &proxy,
        b"GET / HTTP/1.1\r\nHost: t\r\nMax-Forwards: 0\r\nConnection: close\r\n\r\n",
    )
    .await;
    let forwarded = node.next().await.head();
    assert!(forwarded.contains("\r\nMax-Forwards: 0\r\n"), "{forwarded}");
    proxy.stop().await;
}
