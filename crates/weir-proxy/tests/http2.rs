//! HTTP/2 clients through weir's one pipeline, checked with real clients
//! (curl, h2load and h2spec; `scripts/test` installs them): ALPN `h2` on an
//! HTTPS virtual server and h2c with prior knowledge (opt-in) reach an
//! HTTP/1.1 node through the same stages as HTTP/1.1 requests — routes,
//! bodies both ways, trailers' framing, weir's own answers, metrics.

use std::process::Command;

use weir_testkit::{TestOrigin, TestProxy};

/// One virtual server over `origin`: HTTPS offering `h2` first, or plain with h2c.
async fn proxy(origin: &TestOrigin, tls: bool) -> TestProxy {
    let vs = if tls {
        "protocol = \"https\"\n[virtual_servers.web.tls]\n\
         certificates = [{ self_signed = [\"localhost\"] }]\nalpn = [\"h2\", \"http/1.1\"]"
    } else {
        "[virtual_servers.web.http2]\ncleartext = true"
    };
    TestProxy::start(&weir_testkit::config(&[origin.addr], "", vs)).await
}

fn base(proxy: &TestProxy, tls: bool) -> String {
    match tls {
        true => format!("https://localhost:{}", proxy.addr.port()),
        false => format!("http://127.0.0.1:{}", proxy.addr.port()),
    }
}

async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(work).await.expect("ran")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_speaks_http2_through_the_pipeline_over_tls_and_h2c() {
    let origin = TestOrigin::start("a").await;
    for tls in [true, false] {
        let proxy = proxy(&origin, tls).await;
        let url = base(&proxy, tls);
        let h2 = if tls {
            "--http2"
        } else {
            "--http2-prior-knowledge"
        };
        let (out, echo, upload, chunked, missing, version1) = blocking({
            let proxy_addr = proxy.addr;
            let url = url.clone();
            move || {
                let proxy = ProxyRef(proxy_addr);
                let get = proxy.curl(&[
                    h2,
                    "-w",
                    "|%{http_version}|%{response_code}",
                    &format!("{url}/"),
                ]);
                let echo = proxy.curl(&[
                    h2,
                    "-H",
                    "X-Test: 1",
                    "-H",
                    "Cookie: a=1",
                    "-H",
                    "Cookie: b=2",
                    &format!("{url}/echo?x=1"),
                ]);
                // A body with its length, then one of unknown length (chunked to the node).
                let upload =
                    proxy.curl(&[h2, "--data-binary", "hello node", &format!("{url}/echo")]);
                let chunked = proxy.curl_stdin(
                    b"streamed body",
                    &[h2, "-X", "POST", "-T", "-", &format!("{url}/echo")],
                );
                let missing = proxy.curl(&[
                    h2,
                    "-o",
                    "/dev/null",
                    "-w",
                    "%{response_code}",
                    &format!("{url}/status/404"),
                ]);
                // The same listener still serves HTTP/1.1.
                let version1 = proxy.curl(&[
                    "--http1.1",
                    "-o",
                    "/dev/null",
                    "-w",
                    "%{http_version}",
                    &format!("{url}/"),
                ]);
                (get, echo, upload, chunked, missing, version1)
            }
        })
        .await;
        assert_eq!(out, "hello from weir origin a\n|2|200", "tls {tls}");
        let report = weir_origin::parse_echo_json(echo.as_bytes()).expect("an echo report");
        assert_eq!(report.version, "HTTP/1.1");
        assert_eq!(report.target, "/echo?x=1");
        let header = |name: &str| {
            report
                .headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.clone())
        };
        assert_eq!(header("x-test").as_deref(), Some("1"));
        assert_eq!(header("cookie").as_deref(), Some("a=1; b=2"));
        assert_eq!(
            header("host"),
            Some(url.split("//").nth(1).unwrap().to_owned())
        );
        assert_eq!(
            header("x-forwarded-proto").as_deref(),
            Some(if tls { "https" } else { "http" })
        );
        let upload = weir_origin::parse_echo_json(upload.as_bytes()).expect("an echo report");
        assert_eq!(
            (upload.method.as_str(), upload.body.as_str()),
            ("POST", "hello node")
        );
        let chunked = weir_origin::parse_echo_json(chunked.as_bytes()).expect("an echo report");
        assert_eq!(chunked.body, "streamed body");
        assert_eq!(missing, "404");
        assert_eq!(version1, "1.1");
        let http2 = &proxy.metrics;
        let text = http2.encode();
        let via = if tls { "alpn" } else { "h2c" };
        assert!(
            text.lines()
                .any(|line| line.starts_with("weir_http2_connections_total{")
                    && line.contains(&format!("via=\"{via}\""))
                    && !line.ends_with(" 0")),
            "{text}"
        );
        proxy.stop().await;
    }
    origin.stop().await;
}

/// The proxy's address, for curl inside a blocking task.
struct ProxyRef(std::net::SocketAddr);

impl ProxyRef {
    /// Runs curl with `args` (plus `-sS`, `-k`, a 10 s limit and the address
    /// of `localhost`); returns what it printed, after checking it succeeded.
    fn curl(&self, args: &[&str]) -> String {
        self.curl_stdin(b"", args)
    }

    /// [`ProxyRef::curl`] with `input` on its standard input.
    fn curl_stdin(&self, input: &[u8], args: &[&str]) -> String {
        use std::io::Write as _;
        let resolve = format!("localhost:{}:127.0.0.1", self.0.port());
        let mut child = Command::new("curl")
            .args(["-sS", "-k", "--max-time", "10", "--resolve", &resolve])
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|error| panic!("curl (installed by scripts/test): {error}"));
        let mut stdin = child.stdin.take().expect("piped");
        stdin.write_all(input).expect("curl reads its input");
        drop(stdin);
        let output = child.wait_with_output().expect("curl ran");
        assert!(
            output.status.success(),
            "curl {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }
}

/// h2spec in strict mode against weir serving through the pipeline to an
/// HTTP/1.1 node, over TLS (ALPN `h2`) and over h2c: all 146 cases pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2spec_strict_passes_every_case_through_the_pipeline() {
    let origin = TestOrigin::start("a").await;
    for tls in [true, false] {
        let proxy = proxy(&origin, tls).await;
        let port = proxy.addr.port();
        blocking(move || weir_testkit::h2spec::run_strict(port, tls)).await;
        proxy.stop().await;
    }
    origin.stop().await;
}

/// h2load, many streams on few connections, every request answered 2xx.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2load_multiplexed_streams_all_succeed() {
    let origin = TestOrigin::start("a").await;
    for tls in [true, false] {
        let proxy = proxy(&origin, tls).await;
        let url = format!("{}/bytes/1000", base(&proxy, tls)).replace("localhost", "127.0.0.1");
        let output = blocking(move || {
            Command::new("h2load")
                .args(["-n", "2000", "-c", "4", "-m", "20", "-t", "1", &url])
                .output()
                .unwrap_or_else(|error| panic!("h2load (installed by scripts/test): {error}"))
        })
        .await;
        let text = String::from_utf8_lossy(&output.stdout);
        assert!(
            text.contains("2000 succeeded, 0 failed, 0 errored")
                && text.contains("status codes: 2000 2xx"),
            "tls {tls}:\n{text}"
        );
        proxy.stop().await;
    }
    origin.stop().await;
}

/// Traffic rules act on HTTP/2 streams as on HTTP/1.1 requests: weir's own
/// answers (redirect, deny) go out as HTTP/2 responses with the rules'
/// response edits, and a path rewrite and request header edit reach the node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traffic_rules_answer_and_edit_http2_streams() {
    let origin = TestOrigin::start("a").await;
    let vs = r#"[virtual_servers.web.http2]
cleartext = true

[[virtual_servers.web.rules]]
response_headers = { add = { X-Tag = "h2-rules" } }

[[virtual_servers.web.rules]]
match = { path = "/old" }
redirect = { status = 301, location = "/new${path}" }

[[virtual_servers.web.rules]]
match = { path_prefix = "/private/" }
deny = true

[[virtual_servers.web.rules]]
match = { path_prefix = "/api/" }
rewrite_path = { replace_prefix = "/api/", with = "/echo/" }
request_headers = { set = { X-Rule = "yes" } }
"#;
    let proxy = TestProxy::start(&weir_testkit::config(&[origin.addr], "", vs)).await;
    let url = base(&proxy, false);
    let (redirect, denied, api) = blocking({
        let proxy = ProxyRef(proxy.addr);
        move || {
            let h2 = "--http2-prior-knowledge";
            let redirect = proxy.curl(&[h2, "-i", &format!("{url}/old")]);
            let denied = proxy.curl(&[h2, "-i", &format!("{url}/private/x")]);
            let api = proxy.curl(&[h2, "-i", &format!("{url}/api/thing")]);
            (redirect, denied, api)
        }
    })
    .await;
    let lower = |s: &str| s.to_ascii_lowercase();
    let redirect = lower(&redirect);
    assert!(redirect.starts_with("http/2 301"), "{redirect}");
    assert!(redirect.contains("location: /new/old"), "{redirect}");
    assert!(redirect.contains("x-tag: h2-rules"), "{redirect}");
    let denied = lower(&denied);
    assert!(denied.starts_with("http/2 403"), "{denied}");
    assert!(denied.contains("x-tag: h2-rules"), "{denied}");
    let api = lower(&api);
    assert!(api.starts_with("http/2 200"), "{api}");
    assert!(api.contains("x-tag: h2-rules"), "{api}");
    // The node saw the rewritten path and the added header (its echo of the request).
    assert!(api.contains("/echo/thing"), "{api}");
    assert!(api.contains(r#"["x-rule","yes"]"#), "{api}");
}

/// `limits.max_requests_per_connection` counts an HTTP/2 connection's
/// streams: after that many, GOAWAY, and the connection closes cleanly once
/// they are done. The node's view of a request from an HTTP/2 client says
/// `Via: 2 weir` (the protocol weir received it in).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_connections_serve_max_requests_then_go_away() {
    let origin = TestOrigin::start("a").await;
    let vs = "[virtual_servers.web.http2]\ncleartext = true\n\
              [virtual_servers.web.limits]\nmax_requests_per_connection = 2";
    let proxy = TestProxy::start(&weir_testkit::config(&[origin.addr], "", vs)).await;
    let tcp = tokio::net::TcpStream::connect(proxy.addr)
        .await
        .expect("connect");
    let (mut sender, connection) = h2::client::handshake(tcp).await.expect("handshake");
    let connection = tokio::spawn(connection);
    let wait = std::time::Duration::from_secs(10);
    for n in 0..2 {
        let request =
            http::Request::get(format!("http://127.0.0.1:{}/echo/{n}", proxy.addr.port()))
                .body(())
                .expect("request");
        sender = sender.ready().await.expect("ready");
        let (response, _) = sender.send_request(request, true).expect("sent");
        let response = tokio::time::timeout(wait, response)
            .await
            .expect("in time")
            .expect("a response");
        assert_eq!(response.status(), 200);
        let mut body = response.into_body();
        let mut text = Vec::new();
        while let Some(data) = body.data().await {
            let data = data.expect("data");
            let _ = body.flow_control().release_capacity(data.len());
            text.extend_from_slice(&data);
        }
        let text = String::from_utf8_lossy(&text).to_ascii_lowercase();
        assert!(text.contains(r#"["via","2 weir"]"#), "{text}");
    }
    // The second stream was the last: GOAWAY, then the connection ends without an error.
    let ended = tokio::time::timeout(wait, connection)
        .await
        .expect("closed in time")
        .expect("task");
    assert!(ended.is_ok(), "{ended:?}");
    proxy.stop().await;
    origin.stop().await;
}

/// An HTTP/2 client that resets a stream while its request waits for the node's only
/// connection takes the request out of the queue: the node never sees it, the
/// connection's other streams go on, and the pool counts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_reset_while_queued_is_never_sent() {
    let origin = TestOrigin::start("a").await;
    let pool =
        "[pools.web.connections]\nmax_connections = 1\nqueue_length = 10\nqueue_timeout = \"10s\"";
    let vs = "[virtual_servers.web.http2]\ncleartext = true";
    let proxy = TestProxy::start(&weir_testkit::config(&[origin.addr], pool, vs)).await;
    let tcp = tokio::net::TcpStream::connect(proxy.addr)
        .await
        .expect("connect");
    let (mut sender, connection) = h2::client::handshake(tcp).await.expect("handshake");
    tokio::spawn(connection);
    let get = |path: &str| {
        http::Request::get(format!("http://127.0.0.1:{}{path}", proxy.addr.port()))
            .body(())
            .expect("request")
    };
    sender = sender.ready().await.expect("ready");
    let (slow, _) = sender.send_request(get("/delay/600"), true).expect("sent");
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    sender = sender.ready().await.expect("ready");
    let (queued, mut stream) = sender.send_request(get("/"), true).expect("sent");
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    stream.send_reset(h2::Reason::CANCEL);
    drop(queued);
    let wait = std::time::Duration::from_secs(10);
    let slow = tokio::time::timeout(wait, slow).await.expect("in time");
    assert_eq!(slow.expect("a response").status(), 200);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(
        origin.stats.requests(),
        1,
        "the reset stream was never sent"
    );
    let metrics = proxy.metrics.encode();
    assert!(
        metrics.contains("weir_queue_abandoned_total{pool=\"web\"} 1\n"),
        "{metrics}"
    );
    proxy.stop().await;
    origin.stop().await;
}

/// An HTTP/2 client that resets its stream while weir waits to write its upload to a node
/// that has stopped reading frees that node's connection at once: a request queued behind
/// it is served by a new connection, not after the pool's write timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_reset_during_an_upload_frees_the_node_connection() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let node = listener.local_addr().unwrap();
    // The first connection is held and never read; later ones are answered.
    let origin = tokio::spawn(async move {
        let (stalled, _) = listener.accept().await.unwrap();
        let mut answered = 0u32;
        loop {
            let (mut next, _) = listener.accept().await.unwrap();
            let mut head = Vec::new();
            let mut buf = [0u8; 4096];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = next.read(&mut buf).await.unwrap();
                assert!(n > 0, "the head came");
                head.extend_from_slice(&buf[..n]);
            }
            next.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                .await
                .unwrap();
            answered += 1;
            if answered == 1 {
                drop(stalled);
                return answered;
            }
        }
    });
    let pool = "[pools.web.connections]\nmax_connections = 1\nqueue_length = 10\n\
                queue_timeout = \"20s\"\n[pools.web.timeouts]\nwrite = \"30s\"";
    let vs = "[virtual_servers.web.http2]\ncleartext = true";
    let proxy = TestProxy::start(&weir_testkit::config(&[node], pool, vs)).await;
    let tcp = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    let (mut sender, connection) = h2::client::handshake(tcp).await.expect("handshake");
    tokio::spawn(connection);
    let url = |path: &str| format!("http://127.0.0.1:{}{path}", proxy.addr.port());
    // Under the default max_body_bytes (10 MiB), over what the node's socket buffers take.
    let upload = http::Request::post(url("/upload"))
        .header("content-length", (8u64 << 20).to_string())
        .body(())
        .unwrap();
    sender = sender.ready().await.expect("ready");
    let (answer, mut body) = sender.send_request(upload, false).expect("sent");
    body.send_data(bytes::Bytes::from(vec![0u8; 8 << 20]), true)
        .expect("queued");
    // Long enough for the node's socket buffers to fill and weir's write to wait.
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    body.send_reset(h2::Reason::CANCEL);
    drop(answer);
    let started = std::time::Instant::now();
    sender = sender.ready().await.expect("ready");
    let get = http::Request::get(url("/after")).body(()).unwrap();
    let (answer, _) = sender.send_request(get, true).expect("sent");
    let wait = std::time::Duration::from_secs(15);
    let answer = tokio::time::timeout(wait, answer).await.expect("in time");
    assert_eq!(answer.expect("a response").status(), 200);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "the queued request waited {:?}",
        started.elapsed()
    );
    assert_eq!(origin.await.unwrap(), 1);
    proxy.stop().await;
}

/// With h2c on, a first line shaped like an HTTP/1 request with a version weir does not
/// speak (`HTTP/3.0`, `HTTP/2.0`) gets HTTP/1.1's 505, not the silent close of an invalid
/// HTTP/2 preface, a later HTTP/1 minor version (`HTTP/1.7`) is served as HTTP/1.1, and a
/// malformed request line gets a 400; bytes of neither kind are still an invalid preface
/// (no HTTP/1 answer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_answers_an_unsupported_http1_version_with_505() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let origin = TestOrigin::start("a").await;
    let proxy = proxy(&origin, false).await;
    let exchange = |sent: &'static [u8]| {
        let addr = proxy.addr;
        async move {
            let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
            stream.write_all(sent).await.unwrap();
            let mut received = Vec::new();
            let _ = tokio::time::timeout(
                std::time::Duration::from_secs(5),
                stream.read_to_end(&mut received),
            )
            .await;
            String::from_utf8_lossy(&received).into_owned()
        }
    };
    for version in [
        &b"GET / HTTP/3.0\r\nHost: a\r\n\r\n"[..],
        b"GET / HTTP/2.0\r\nHost: a\r\n\r\n",
    ] {
        let answer = exchange(version).await;
        assert!(answer.starts_with("HTTP/1.1 505 "), "{answer}");
    }
    let answer = exchange(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
    let answer = exchange(b"GET / HTTP/1.7\r\nHost: a\r\nConnection: close\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
    // A malformed request line is still HTTP/1's to answer (400), not a silent close.
    for malformed in [
        &b"GET /a b HTTP/1.1\r\nHost: a\r\n\r\n"[..],
        b"GET  / HTTP/1.1\r\nHost: a\r\n\r\n",
        b"GET / http/1.1\r\nHost: a\r\n\r\n",
    ] {
        let answer = exchange(malformed).await;
        assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    }
    let answer = exchange(b"NOT A PREFACE\r\n\r\n").await;
    assert!(!answer.starts_with("HTTP/1.1"), "{answer}");
    proxy.stop().await;
    origin.stop().await;
}

/// An idle HTTP/2 connection is sent a GOAWAY (with the PING that makes it graceful). A
/// client that never answers the PING, or anything else, is closed `ping_timeout` later:
/// it does not keep its place under `max_connections` for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_client_that_ignores_the_goaway_is_closed() {
    use tokio::io::AsyncWriteExt;
    use weir_testkit::h2flood::{PREFACE, frame};
    let origin = TestOrigin::start("a").await;
    let vs = "[virtual_servers.web.http2]\ncleartext = true\nping_timeout = \"1s\"\n\
              [virtual_servers.web.timeouts]\nidle = \"1s\"";
    let proxy = TestProxy::start(&weir_testkit::config(&[origin.addr], "", vs)).await;
    let mut stream = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    let mut out = PREFACE.to_vec();
    out.extend(frame(0x4, 0, 0, &[]));
    stream.write_all(&out).await.unwrap();
    let started = std::time::Instant::now();
    // Reads (and never answers) until weir closes the connection.
    let closed = read_until_closed(&mut stream, std::time::Duration::from_secs(8)).await;
    assert!(
        closed,
        "still open {:?} after connecting",
        started.elapsed()
    );
    assert!(
        started.elapsed() >= std::time::Duration::from_millis(1500),
        "closed after {:?}, before idle + ping_timeout",
        started.elapsed()
    );
    proxy.stop().await;
    origin.stop().await;
}

/// A client that stops answering PINGs while a stream is open has its connection closed
/// `ping_timeout` after the unanswered PING, and the stream's record says it went silent
/// (499, `client_timeout`), not that it left (`client_closed`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cut_for_an_unanswered_ping_is_logged_as_a_client_timeout() {
    let origin = TestOrigin::start("a").await;
    let (config, log) = h2c_logged(
        &origin,
        "silent",
        "ping_interval = \"1s\"\nping_timeout = \"1s\"",
    );
    let proxy = TestProxy::start(&config).await;
    // The body never comes, so the stream stays open while weir PINGs.
    let mut stream = post_with_length_10(&proxy, None).await;
    let started = std::time::Instant::now();
    // Reads (and never answers a PING) until weir closes the connection.
    let closed = read_until_closed(&mut stream, std::time::Duration::from_secs(8)).await;
    assert!(
        closed,
        "still open {:?} after the request",
        started.elapsed()
    );
    let mut record = String::new();
    for _ in 0..50 {
        proxy.live.flush_access_log();
        record = std::fs::read_to_string(&log).unwrap_or_default();
        if !record.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(record.contains(r#""status":499"#), "{record}");
    assert!(record.contains(r#""error":"client_timeout""#), "{record}");
    proxy.stop().await;
    origin.stop().await;
    let _ = std::fs::remove_file(&log);
}

/// A connection to `proxy` that has sent the preface, an empty SETTINGS and, on stream 1,
/// HEADERS (END_HEADERS, no END_STREAM) for `POST http://a/` with `content-length: 10`
/// (static-table entries and one literal), then `data` as one DATA frame that ends the
/// stream, if given: all in one write.
async fn post_with_length_10(proxy: &TestProxy, data: Option<&[u8]>) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    use weir_testkit::h2flood::{PREFACE, frame};
    let mut stream = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    let mut out = PREFACE.to_vec();
    out.extend(frame(0x4, 0, 0, &[]));
    out.extend(frame(
        0x1,
        0x4,
        1,
        &[
            0x83, 0x86, 0x84, 0x01, 0x01, b'a', 0x0f, 0x0d, 0x02, b'1', b'0',
        ],
    ));
    if let Some(data) = data {
        out.extend(frame(0x0, 0x1, 1, data));
    }
    stream.write_all(&out).await.unwrap();
    stream
}

/// Reads what weir sends, answering nothing, until it closes `stream`; false when it is
/// still open after `limit`.
async fn read_until_closed(stream: &mut tokio::net::TcpStream, limit: std::time::Duration) -> bool {
    use tokio::io::AsyncReadExt;
    tokio::time::timeout(limit, async {
        let mut chunk = [0u8; 4096];
        while let Ok(n) = stream.read(&mut chunk).await {
            if n == 0 {
                break;
            }
        }
    })
    .await
    .is_ok()
}

/// A virtual server over `origin` with h2c on, `extra` tables after its own, and its access
/// log in JSON in a fresh temporary file (named for `name`); the config and the log's path.
fn h2c_logged(origin: &TestOrigin, name: &str, extra: &str) -> (String, std::path::PathBuf) {
    let config = weir_testkit::config(
        &[origin.addr],
        "",
        &format!("[virtual_servers.web.http2]\ncleartext = true\n{extra}"),
    );
    weir_testkit::with_access_log_file(&config, &format!("h2-{name}"), "json")
}

/// A HEAD, or a gRPC call, whose head weir refuses whole (here its `Host` names another
/// authority than its `:authority`: 400) still gets its answer in the form it asks: no
/// body for the HEAD (RFC 9110 §9.3.2; DATA there is a protocol error to the client), and
/// a trailers-only answer with `grpc-status` for the gRPC call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_heads_of_head_requests_and_grpc_calls_keep_their_form() {
    let origin = TestOrigin::start("a").await;
    let (config, log) = h2c_logged(&origin, "refused-forms", "");
    let proxy = TestProxy::start(&config).await;
    let tcp = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    let (sender, connection) = h2::client::handshake(tcp).await.expect("handshake");
    tokio::spawn(connection);
    let mut sender = sender.ready().await.expect("ready");
    let mismatched = |method: http::Method| {
        http::Request::builder()
            .method(method)
            .uri("http://a/")
            .header("host", "b")
    };
    let (response, _) = sender
        .send_request(mismatched(http::Method::HEAD).body(()).unwrap(), true)
        .expect("sent");
    let response = response.await.expect("an answer, not a reset");
    assert_eq!(response.status(), 400);
    assert!(response.body().is_end_stream(), "a body to a HEAD");
    let mut sender = sender.ready().await.expect("ready");
    let call = mismatched(http::Method::POST)
        .header("content-type", "application/grpc")
        .body(())
        .unwrap();
    let (response, _) = sender.send_request(call, true).expect("sent");
    let response = response.await.expect("an answer");
    assert!(
        response.headers().contains_key("grpc-status"),
        "{response:?}"
    );
    assert!(
        response.body().is_end_stream(),
        "trailers-only: {response:?}"
    );
    assert_eq!(origin.stats.snapshot().requests, 0);
    proxy.stop().await;
    origin.stop().await;
    let _ = std::fs::remove_file(&log);
}

/// A request whose DATA ends short of its `content-length` is malformed (RFC 9113 §8.1.1):
/// the codec resets the stream, and weir counts and logs it as the client's bad request
/// (4xx, a bad request), not as a client that left (499).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_short_of_its_content_length_is_a_bad_request() {
    let origin = TestOrigin::start("a").await;
    let (config, log) = h2c_logged(&origin, "short", "");
    let proxy = TestProxy::start(&config).await;
    // Then 5 bytes and END_STREAM.
    let mut stream = post_with_length_10(&proxy, Some(b"hello")).await;
    read_until_closed(&mut stream, std::time::Duration::from_secs(2)).await;
    proxy.live.flush_access_log();
    let record = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(record.contains(r#""status":400"#), "{record}");
    assert!(record.contains(r#""error":"bad_request""#), "{record}");
    assert_eq!(origin.stats.snapshot().requests, 0);
    drop(stream);
    proxy.stop().await;
    origin.stop().await;
    let _ = std::fs::remove_file(&log);
}

/// An HTTP/2 request whose DATA goes past its `content-length` is malformed (RFC 9113
/// §8.1.1) and is not forwarded: the length-framed body is forwarded only once the stream
/// has ended. Raw frames: HEADERS for a POST with `content-length: 0` and no END_STREAM,
/// then DATA holding a whole request; and a well-formed POST on the same connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_past_its_content_length_never_reaches_the_node() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use weir_testkit::h2flood::{PREFACE, frame};
    // POST http://a/ (static table), then `content-length` (static name 28) as a literal.
    let block = |length: &[u8]| {
        let mut block = vec![0x83, 0x86, 0x84, 0x01, 0x01, b'a', 0x0f, 0x0d];
        block.push(length.len() as u8);
        block.extend_from_slice(length);
        block
    };
    let origin = TestOrigin::start("a").await;
    let proxy = proxy(&origin, false).await;
    let mut stream = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    let mut out = PREFACE.to_vec();
    out.extend(frame(0x4, 0, 0, &[]));
    // END_HEADERS only: the body is to follow, though its length is 0.
    out.extend(frame(0x1, 0x4, 1, &block(b"0")));
    out.extend(frame(
        0x0,
        0x1,
        1,
        b"GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n",
    ));
    // A well-formed one: 5 bytes and END_STREAM on the last DATA.
    out.extend(frame(0x1, 0x4, 3, &block(b"5")));
    out.extend(frame(0x0, 0x1, 3, b"hello"));
    stream.write_all(&out).await.unwrap();
    let mut received = Vec::new();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), async {
        let mut chunk = [0u8; 4096];
        while let Ok(n) = stream.read(&mut chunk).await {
            if n == 0 {
                break;
            }
            received.extend_from_slice(&chunk[..n]);
        }
    })
    .await;
    assert_eq!(
        origin.stats.snapshot().requests,
        1,
        "only the well-formed POST"
    );
    drop(stream);
    proxy.stop().await;
    origin.stop().await;
}

/// The access log's `bytes_sent` counts a node's answer the same for an HTTP/2 client as
/// for an HTTP/1.1 one (docs/logging.md: the head weir sends, in its HTTP/1.1 form, and
/// the body): with weir's `Via` and `set_headers` fields, not the head the node sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_sent_counts_the_head_weir_sends_for_both_protocols() {
    let origin = TestOrigin::start("a").await;
    let (config, log) = h2c_logged(
        &origin,
        "bytes",
        "[virtual_servers.web.response_headers]\nX-Served-By = \"a fairly long value from weir\"",
    );
    let proxy = TestProxy::start(&config).await;
    let url = format!("http://127.0.0.1:{}/bytes/100", proxy.addr.port());
    let versions = blocking({
        let proxy_addr = proxy.addr;
        move || {
            let proxy = ProxyRef(proxy_addr);
            ["--http1.1", "--http2-prior-knowledge"]
                .map(|flag| proxy.curl(&[flag, "-o", "/dev/null", "-w", "%{http_version}", &url]))
        }
    })
    .await;
    assert_eq!(versions, ["1.1".to_owned(), "2".to_owned()]);
    proxy.live.flush_access_log();
    let records = std::fs::read_to_string(&log).unwrap_or_default();
    let sent: Vec<u64> = records
        .lines()
        .filter_map(|line| {
            let after = line.split("\"bytes_sent\":").nth(1)?;
            after.split([',', '}']).next()?.parse().ok()
        })
        .collect();
    assert_eq!(sent.len(), 2, "{records}");
    assert_eq!(sent[0], sent[1], "{records}");
    // The head weir wrote is longer than the node's by at least its own fields.
    assert!(sent[0] > 100 + 40, "{records}");
    proxy.stop().await;
    origin.stop().await;
    let _ = std::fs::remove_file(&log);
}

/// A request the `h2` codec refuses before weir sees it (a control byte in `:path`: RST_STREAM
/// PROTOCOL_ERROR, RFC 9113 §8.1.1) is still counted and logged as a bad request, as the
/// same request over HTTP/1.1 is; a well-formed stream after it is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_the_codec_refuses_is_counted_and_logged() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use weir_testkit::h2flood::{PREFACE, frame};
    let origin = TestOrigin::start("a").await;
    let (config, log) = h2c_logged(&origin, "codec-refused", "");
    let proxy = TestProxy::start(&config).await;
    let mut stream = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    // GET, http, `:authority: a`, then `:path` as a literal (static name 4).
    let get = |path: &[u8]| {
        let mut block = vec![0x82, 0x86, 0x01, 0x01, b'a', 0x04, path.len() as u8];
        block.extend_from_slice(path);
        block
    };
    let mut out = PREFACE.to_vec();
    out.extend(frame(0x4, 0, 0, &[]));
    out.extend(frame(0x1, 0x5, 1, &get(b"/p\x01x")));
    out.extend(frame(0x1, 0x5, 3, &get(b"/fine")));
    stream.write_all(&out).await.unwrap();
    // Read until stream 3's HEADERS arrive (a 200 from the origin).
    let mut seen = Vec::new();
    let answered = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        let mut chunk = [0u8; 4096];
        loop {
            let n = stream.read(&mut chunk).await.unwrap_or(0);
            if n == 0 {
                return false;
            }
            seen.extend_from_slice(&chunk[..n]);
            // A HEADERS frame (type 1) on stream 3.
            let mut at = 0;
            while at + 9 <= seen.len() {
                let length = usize::from(seen[at]) << 16
                    | usize::from(seen[at + 1]) << 8
                    | usize::from(seen[at + 2]);
                if seen[at + 3] == 0x1 && seen[at + 5..at + 9] == [0, 0, 0, 3] {
                    return true;
                }
                at += 9 + length;
            }
        }
    })
    .await
    .unwrap_or(false);
    assert!(answered, "the well-formed stream was served");
    proxy.live.flush_access_log();
    let records = std::fs::read_to_string(&log).unwrap_or_default();
    let refused: Vec<&str> = records
        .lines()
        .filter(|line| line.contains(r#""status":400"#))
        .collect();
    assert_eq!(refused.len(), 1, "{records}");
    assert!(refused[0].contains(r#""error":"bad_request""#), "{records}");
    assert!(refused[0].contains(r#""method":"-""#), "{records}");
    let metrics = proxy.metrics.encode();
    assert!(
        metrics.contains("weir_bad_requests_total{virtual_server=\"web\"} 1"),
        "{metrics}"
    );
    assert_eq!(origin.stats.snapshot().requests, 1);
    drop(stream);
    proxy.stop().await;
    origin.stop().await;
    let _ = std::fs::remove_file(&log);
}

/// A request whose DATA overruns its `content-length` in the same write as its HEADERS is
/// both reset by the codec and handed to weir: one bad request, counted and logged once (the
/// pipeline's record), not also as one the codec refused before weir saw it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_reset_and_handed_over_in_one_read_is_counted_once() {
    let origin = TestOrigin::start("a").await;
    let (config, log) = h2c_logged(&origin, "overrun-once", "");
    let proxy = TestProxy::start(&config).await;
    // Then 20 bytes and END_STREAM, in the same write.
    let mut stream = post_with_length_10(&proxy, Some(b"twenty bytes of body")).await;
    read_until_closed(&mut stream, std::time::Duration::from_millis(500)).await;
    // The connection's end reports what is left to report.
    drop(stream);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    proxy.live.flush_access_log();
    let records = std::fs::read_to_string(&log).unwrap_or_default();
    let refused: Vec<&str> = records
        .lines()
        .filter(|line| line.contains(r#""status":400"#))
        .collect();
    assert_eq!(refused.len(), 1, "{records}");
    let metrics = proxy.metrics.encode();
    assert!(
        metrics.contains("weir_bad_requests_total{virtual_server=\"web\"} 1"),
        "{metrics}"
    );
    assert_eq!(origin.stats.snapshot().requests, 0);
    proxy.stop().await;
    origin.stop().await;
    let _ = std::fs::remove_file(&log);
}

/// A body an HTTP/2 client sends in small DATA frames reaches an HTTP/1.1 node in few
/// chunks: the frames the codec holds are written together, not one write per frame.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_data_frames_reach_an_http1_node_in_few_chunks() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const FRAMES: usize = 2000;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let node = listener.local_addr().unwrap();
    // Reads one chunked request; returns its body and how many chunks carried it.
    let origin = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut raw = Vec::new();
        let mut buf = [0u8; 65536];
        while !raw.ends_with(b"\r\n0\r\n\r\n") {
            let n = stream.read(&mut buf).await.unwrap();
            assert!(n > 0, "the whole body came");
            raw.extend_from_slice(&buf[..n]);
        }
        stream
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            .await
            .unwrap();
        let mut at = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let (mut body, mut chunks) = (Vec::new(), 0);
        loop {
            let end = at + raw[at..].windows(2).position(|w| w == b"\r\n").unwrap();
            let size = usize::from_str_radix(std::str::from_utf8(&raw[at..end]).unwrap(), 16)
                .expect("a chunk size");
            if size == 0 {
                return (body, chunks);
            }
            body.extend_from_slice(&raw[end + 2..end + 2 + size]);
            chunks += 1;
            at = end + 2 + size + 2;
        }
    });
    // A body past the request buffer streams to the node in chunked coding.
    let vs = "[virtual_servers.web.http2]\ncleartext = true\n\
              [virtual_servers.web.limits]\nrequest_buffer = \"1KiB\"";
    let proxy = TestProxy::start(&weir_testkit::config(&[node], "", vs)).await;
    let tcp = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    let (sender, connection) = h2::client::handshake(tcp).await.expect("handshake");
    tokio::spawn(connection);
    let url = format!("http://127.0.0.1:{}/upload", proxy.addr.port());
    let upload = http::Request::post(url).body(()).unwrap();
    let mut sender = sender.ready().await.expect("ready");
    let (answer, mut body) = sender.send_request(upload, false).expect("sent");
    // Frames of 256 bytes: the h2 codec's own bound on smaller ones leaves them alone.
    let data: Vec<u8> = (0..FRAMES * 256).map(|i| b'a' + (i % 26) as u8).collect();
    for (i, piece) in data.chunks(256).enumerate() {
        let piece = bytes::Bytes::copy_from_slice(piece);
        body.send_data(piece, i + 1 == FRAMES).expect("queued");
    }
    let wait = std::time::Duration::from_secs(10);
    let answer = tokio::time::timeout(wait, answer).await.expect("in time");
    assert_eq!(answer.expect("a response").status(), 200);
    let (received, chunks) = origin.await.unwrap();
    assert_eq!(received, data);
    assert!(
        chunks <= FRAMES / 10,
        "{chunks} chunks for {FRAMES} DATA frames"
    );
    proxy.stop().await;
}

/// A socket read at most `rate` bytes a second (in 16 KiB steps): a client on a slow link.
struct SlowReader {
    inner: tokio::net::TcpStream,
    rate: usize,
    next: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl tokio::io::AsyncRead for SlowReader {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        use std::future::Future;
        const STEP: usize = 16 * 1024;
        if let Some(sleep) = self.next.as_mut() {
            std::task::ready!(sleep.as_mut().poll(cx));
            self.next = None;
        }
        let mut scratch = [0u8; STEP];
        let room = STEP.min(buf.remaining());
        let mut step = tokio::io::ReadBuf::new(&mut scratch[..room]);
        std::task::ready!(std::pin::Pin::new(&mut self.inner).poll_read(cx, &mut step))?;
        let n = step.filled().len();
        buf.put_slice(step.filled());
        let pause = std::time::Duration::from_secs_f64(n as f64 / self.rate as f64);
        self.next = Some(Box::pin(tokio::time::sleep(pause)));
        std::task::Poll::Ready(Ok(()))
    }
}

impl tokio::io::AsyncWrite for SlowReader {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        data: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, data)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A connection's last answer, still queued in the sockets' buffers when weir ends the
/// connection gracefully (`max_requests_per_connection`), reaches a client that reads it
/// slowly whole: weir reads what the client sends meanwhile (WINDOW_UPDATEs, as it reads)
/// for as long as it keeps sending, instead of closing after a fixed 2 s and resetting the
/// connection under the unread end of the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_gets_the_whole_last_answer_of_a_connection() {
    const SIZE: usize = 8 << 20;
    let origin = TestOrigin::start("a").await;
    let vs = "[virtual_servers.web.http2]\ncleartext = true\n\
              [virtual_servers.web.limits]\nmax_requests_per_connection = 1";
    let proxy = TestProxy::start(&weir_testkit::config(&[origin.addr], "", vs)).await;
    let tcp = tokio::net::TcpStream::connect(proxy.addr)
        .await
        .expect("connect");
    let slow = SlowReader {
        inner: tcp,
        rate: 1 << 20,
        next: None,
    };
    // A large window: most of the answer can be on its way before the client reads it.
    let (sender, connection) = h2::client::Builder::new()
        .initial_window_size(4 << 20)
        .initial_connection_window_size(4 << 20)
        .handshake::<_, bytes::Bytes>(slow)
        .await
        .expect("handshake");
    let connection = tokio::spawn(connection);
    let request = http::Request::get(format!(
        "http://127.0.0.1:{}/bytes/{SIZE}",
        proxy.addr.port()
    ))
    .body(())
    .expect("request");
    let mut sender = sender.ready().await.expect("ready");
    let (response, _) = sender.send_request(request, true).expect("sent");
    let response = response.await.expect("a response");
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let mut received = 0;
    while let Some(data) = body.data().await {
        let Ok(data) = data else { break };
        let _ = body.flow_control().release_capacity(data.len());
        received += data.len();
    }
    assert_eq!(received, SIZE, "the whole answer");
    let wait = std::time::Duration::from_secs(20);
    let ended = tokio::time::timeout(wait, connection).await;
    assert!(matches!(ended, Ok(Ok(Ok(())))), "{ended:?}");
    proxy.stop().await;
    origin.stop().await;
}
