//! End-to-end tests of the admin listener over real sockets on port 0.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use weir_admin::{AdminState, Limits};
use weir_core::Shutdown;
use weir_observe::Metrics;

const WAIT: Duration = Duration::from_secs(5);

struct Admin {
    address: SocketAddr,
    metrics: Arc<Metrics>,
    healthy: Arc<AtomicBool>,
    shutdown: Shutdown,
    task: JoinHandle<std::io::Result<()>>,
}

struct Reply {
    status: u16,
    head: String,
    body: Vec<u8>,
}

async fn start(limits: Limits) -> Admin {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let metrics = Metrics::new();
    let healthy = Arc::new(AtomicBool::new(true));
    let view = healthy.clone();
    let state = AdminState {
        limits,
        ..AdminState::new(
            metrics.clone(),
            Arc::new(move || view.load(Ordering::SeqCst)),
        )
    };
    let (shutdown, signal) = Shutdown::new();
    let task = tokio::spawn(weir_admin::serve(listener, state, signal));
    Admin {
        address,
        metrics,
        healthy,
        shutdown,
        task,
    }
}

/// Reads one response; `head_only` for replies to HEAD.
async fn read_reply(stream: &mut TcpStream, pending: &mut Vec<u8>, head_only: bool) -> Reply {
    tokio::time::timeout(WAIT, async {
        let head_end = loop {
            if let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
                break end + 4;
            }
            let mut chunk = [0u8; 4096];
            let count = stream.read(&mut chunk).await.unwrap();
            assert!(count > 0, "connection closed before a full response head");
            pending.extend_from_slice(&chunk[..count]);
        };
        let head = String::from_utf8(pending.drain(..head_end).collect()).unwrap();
        let status = head[9..12].parse().unwrap();
        let length: usize = header(&head, "content-length").unwrap().parse().unwrap();
        let length = if head_only { 0 } else { length };
        while pending.len() < length {
            let mut chunk = [0u8; 4096];
            let count = stream.read(&mut chunk).await.unwrap();
            assert!(count > 0, "connection closed before the full body");
            pending.extend_from_slice(&chunk[..count]);
        }
        let body = pending.drain(..length).collect();
        Reply { status, head, body }
    })
    .await
    .expect("response in time")
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.eq_ignore_ascii_case(name).then(|| value.trim())
    })
}

async fn exchange(address: SocketAddr, request: &[u8]) -> Reply {
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream.write_all(request).await.unwrap();
    let head_only = request.starts_with(b"HEAD");
    read_reply(&mut stream, &mut Vec::new(), head_only).await
}

async fn expect_closed(stream: &mut TcpStream) {
    let mut rest = Vec::new();
    let read = tokio::time::timeout(WAIT, stream.read_to_end(&mut rest)).await;
    assert!(
        matches!(read, Ok(Ok(0))),
        "expected a close, got {read:?} {rest:?}"
    );
}

#[tokio::test]
async fn scrapes_metrics() {
    let admin = start(Limits::default()).await;
    admin.metrics.virtual_server("web").record_status(200);
    admin
        .metrics
        .node("app", "10.0.0.1:80")
        .connections_created
        .inc();

    // Prometheus asks for OpenMetrics; promtool, curl and older scrapers get the classic
    // text format. The samples are the same.
    let asks = b"GET /metrics HTTP/1.1\r\nHost: admin\r\n\
        Accept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5\r\n\r\n";
    let plain = b"GET /metrics HTTP/1.1\r\nHost: admin\r\nAccept: */*\r\n\r\n";
    for (request, content_type) in [
        (&asks[..], weir_observe::CONTENT_TYPE),
        (&plain[..], weir_observe::TEXT_CONTENT_TYPE),
    ] {
        let reply = exchange(admin.address, request).await;
        assert_eq!(reply.status, 200);
        assert_eq!(header(&reply.head, "content-type"), Some(content_type));
        assert!(header(&reply.head, "date").is_some());
        let body = String::from_utf8(reply.body).unwrap();
        assert!(body.contains("weir_requests_total{virtual_server=\"web\",class=\"2xx\"} 1\n"));
        assert!(body.contains(
            "weir_upstream_connections_created_total{pool=\"app\",node=\"10.0.0.1:80\"} 1\n"
        ));
        assert!(body.contains("weir_build_info{version="));
        let openmetrics = content_type == weir_observe::CONTENT_TYPE;
        assert_eq!(body.ends_with("# EOF\n"), openmetrics);
        assert_eq!(
            body.contains("# TYPE weir_requests_total counter"),
            !openmetrics,
            "{body}"
        );
    }
}

#[tokio::test]
async fn health_follows_the_check() {
    let admin = start(Limits::default()).await;
    let reply = exchange(
        admin.address,
        b"GET /healthz HTTP/1.1\r\nHost: admin\r\n\r\n",
    )
    .await;
    assert_eq!((reply.status, reply.body.as_slice()), (200, &b"ok\n"[..]));

    admin.healthy.store(false, Ordering::SeqCst);
    let reply = exchange(
        admin.address,
        b"GET /healthz HTTP/1.1\r\nHost: admin\r\n\r\n",
    )
    .await;
    assert_eq!(
        (reply.status, reply.body.as_slice()),
        (503, &b"draining\n"[..])
    );
}

#[tokio::test]
async fn unknown_paths_and_methods() {
    let admin = start(Limits::default()).await;
    let reply = exchange(admin.address, b"GET /nope HTTP/1.1\r\nHost: admin\r\n\r\n").await;
    assert_eq!(reply.status, 404);
    let reply = exchange(
        admin.address,
        b"DELETE /metrics HTTP/1.1\r\nHost: admin\r\n\r\n",
    )
    .await;
    assert_eq!(reply.status, 405);
    assert_eq!(header(&reply.head, "allow"), Some("GET, HEAD"));
}

#[tokio::test]
async fn keep_alive_head_and_pipelining() {
    let admin = start(Limits::default()).await;
    let mut stream = TcpStream::connect(admin.address).await.unwrap();
    let mut pending = Vec::new();

    stream
        .write_all(b"HEAD /metrics HTTP/1.1\r\nHost: admin\r\n\r\n")
        .await
        .unwrap();
    let head = read_reply(&mut stream, &mut pending, true).await;
    assert_eq!(head.status, 200);
    let length: usize = header(&head.head, "content-length")
        .unwrap()
        .parse()
        .unwrap();
    assert!(length > 0);

    // Two pipelined requests in one write; the second asks to close.
    stream
        .write_all(
            b"GET /healthz HTTP/1.1\r\nHost: admin\r\n\r\n\
              GET /metrics HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n",
        )
        .await
        .unwrap();
    let first = read_reply(&mut stream, &mut pending, false).await;
    assert_eq!((first.status, first.body.as_slice()), (200, &b"ok\n"[..]));
    let second = read_reply(&mut stream, &mut pending, false).await;
    assert_eq!(second.status, 200);
    assert_eq!(second.body.len(), length, "HEAD announced the GET's length");
    assert_eq!(header(&second.head, "connection"), Some("close"));
    assert!(pending.is_empty());
    expect_closed(&mut stream).await;
}

#[tokio::test]
async fn malformed_requests_get_400_and_a_close() {
    let admin = start(Limits::default()).await;
    for request in [
        &b"GARBAGE\r\n\r\n"[..],
        b"GET /metrics HTTP/1.1\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
    ] {
        let mut stream = TcpStream::connect(admin.address).await.unwrap();
        stream.write_all(request).await.unwrap();
        let reply = read_reply(&mut stream, &mut Vec::new(), false).await;
        assert_eq!(reply.status, 400, "{}", String::from_utf8_lossy(request));
        assert_eq!(header(&reply.head, "connection"), Some("close"));
        expect_closed(&mut stream).await;
    }
}

#[tokio::test]
async fn oversized_heads_get_431() {
    let admin = start(Limits::default()).await;
    let mut request = b"GET /metrics HTTP/1.1\r\nHost: admin\r\nX-Padding: ".to_vec();
    request.resize(64 * 1024, b'a');
    let mut stream = TcpStream::connect(admin.address).await.unwrap();
    // The server may answer and close before reading it all.
    let _ = stream.write_all(&request).await;
    let reply = read_reply(&mut stream, &mut Vec::new(), false).await;
    assert_eq!(reply.status, 431);
}

/// A request refused from its head (here a method `/healthz` does not take) is answered
/// and the connection closed without its body being read: the body, which looks like
/// requests, is never taken for them, and a client that is refused cannot make weir hold
/// a large body (one past the limit is refused the same way, before 413 could apply).
#[tokio::test]
async fn request_bodies_are_read_never_taken_for_requests() {
    let admin = start(Limits::default()).await;
    let mut stream = TcpStream::connect(admin.address).await.unwrap();
    stream
        .write_all(b"POST /healthz HTTP/1.1\r\nHost: admin\r\nContent-Length: 22\r\n\r\nGET /nope HTTP/1.1\r\n\r\nGET /healthz HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut pending = Vec::new();
    let reply = read_reply(&mut stream, &mut pending, false).await;
    assert_eq!(reply.status, 405);
    expect_closed(&mut stream).await;
    let reply = exchange(
        admin.address,
        b"POST /healthz HTTP/1.1\r\nHost: admin\r\nContent-Length: 99999999999\r\n\r\n",
    )
    .await;
    assert_eq!(reply.status, 405);
}

#[tokio::test]
async fn slow_heads_time_out() {
    let limits = Limits {
        header_read_timeout: Duration::from_millis(100),
        keep_alive_timeout: Duration::from_millis(200),
        ..Limits::default()
    };
    let admin = start(limits).await;

    let mut slow = TcpStream::connect(admin.address).await.unwrap();
    slow.write_all(b"GET /metrics HTTP/1.1\r\nHost")
        .await
        .unwrap();
    let reply = read_reply(&mut slow, &mut Vec::new(), false).await;
    assert_eq!(reply.status, 408);
    expect_closed(&mut slow).await;

    let mut idle = TcpStream::connect(admin.address).await.unwrap();
    expect_closed(&mut idle).await;
}

/// A new connection that sends nothing holds its slot for the head timeout, not the
/// keep-alive one: idle connections opened by anyone cannot keep the API from answering.
#[tokio::test]
async fn a_silent_new_connection_is_closed_at_the_head_timeout() {
    let limits = Limits {
        header_read_timeout: Duration::from_millis(100),
        keep_alive_timeout: Duration::from_secs(30),
        max_connections: 2,
        ..Limits::default()
    };
    let admin = start(limits).await;
    let mut silent = Vec::new();
    for _ in 0..2 {
        silent.push(TcpStream::connect(admin.address).await.unwrap());
    }
    for stream in &mut silent {
        expect_closed(stream).await;
    }
    let reply = exchange(
        admin.address,
        b"GET /healthz HTTP/1.1\r\nHost: admin\r\n\r\n",
    )
    .await;
    assert_eq!(reply.status, 200);
}

/// Connections waiting for a request give their slots back when every slot is taken:
/// holding them all (kept alive with one `/healthz` a minute each, or new and silent,
/// reopened as they close) must not lock out a new client, a load balancer's health check
/// first of all. The oldest go first, once they have waited a while: a connection just
/// opened whose request is on its way is answered, and one in the middle of a request
/// keeps its slot.
#[tokio::test]
async fn idle_connections_make_room_for_a_new_client() {
    let limits = Limits {
        keep_alive_timeout: Duration::from_secs(60),
        header_read_timeout: Duration::from_secs(30),
        max_connections: 6,
        ..Limits::default()
    };
    let admin = start(limits).await;
    let mut idle = vec![TcpStream::connect(admin.address).await.unwrap()];
    for _ in 0..2 {
        let mut stream = TcpStream::connect(admin.address).await.unwrap();
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: admin\r\n\r\n")
            .await
            .unwrap();
        assert_eq!(
            read_reply(&mut stream, &mut Vec::new(), false).await.status,
            200
        );
        idle.push(stream);
    }
    let mut busy = TcpStream::connect(admin.address).await.unwrap();
    busy.write_all(b"GET /healthz HTTP/1.1\r\nHost")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    // A client whose request comes a moment after it connects, then one more connection,
    // which takes the last slot: the listener, full, asks the oldest to close.
    let mut late = TcpStream::connect(admin.address).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let _last = TcpStream::connect(admin.address).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let reply = tokio::time::timeout(
        Duration::from_secs(3),
        exchange(
            admin.address,
            b"GET /healthz HTTP/1.1\r\nHost: admin\r\n\r\n",
        ),
    )
    .await
    .expect("a new client is answered while idle connections fill the listener");
    assert_eq!(reply.status, 200);
    for stream in &mut idle {
        expect_closed(stream).await;
    }
    late.write_all(b"GET /healthz HTTP/1.1\r\nHost: admin\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(
        read_reply(&mut late, &mut Vec::new(), false).await.status,
        200,
        "the client that had just connected was closed"
    );
    // The one in the middle of its head was not closed: it is answered.
    busy.write_all(b": admin\r\n\r\n").await.unwrap();
    assert_eq!(
        read_reply(&mut busy, &mut Vec::new(), false).await.status,
        200
    );
}

#[tokio::test]
async fn stops_on_shutdown() {
    let admin = start(Limits::default()).await;
    // An idle kept-alive connection must not hold the server up.
    let mut idle = TcpStream::connect(admin.address).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: admin\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(
        read_reply(&mut idle, &mut Vec::new(), false).await.status,
        200
    );

    admin.shutdown.trigger();
    let result = tokio::time::timeout(WAIT, admin.task)
        .await
        .expect("serve returns");
    result.unwrap().unwrap();
    expect_closed(&mut idle).await;
    assert!(
        TcpStream::connect(admin.address).await.is_err(),
        "still accepting"
    );
}
