//! Pools with `protocol = "h2c"`: requests from HTTP/1.1 clients and from
//! HTTP/2 clients (curl) reach an HTTP/2 node (an in-process server on the
//! `h2` crate) through the same pipeline, multiplexed on shared connections:
//! `:authority` from `Host`, bodies both ways, trailers where both sides
//! can carry them, weir's own answers when the node is gone.

use std::net::SocketAddr;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use weir_testkit::TestProxy;

/// An h2c node: answers every request with what it saw, in headers and body;
/// `/trailers` ends its response with `grpc-status: 0` in trailers, and
/// `/cached` is fresh for a minute.
struct H2Node {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
    /// Streams (requests) the node accepted.
    streams: Arc<AtomicUsize>,
}

async fn h2_node() -> H2Node {
    h2_node_over(None).await
}

/// An h2c node, or with `tls` an h2 node over TLS (ALPN `h2` only).
async fn h2_node_over(tls: Option<Arc<weir_tls::Acceptor>>) -> H2Node {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&connections);
    let streams = Arc::new(AtomicUsize::new(0));
    let accepted = Arc::clone(&streams);
    let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::Relaxed);
            let tls = tls.clone();
            let seen = (Arc::clone(&accepted), Arc::clone(&dropped));
            tokio::spawn(async move {
                match tls {
                    None => serve_h2(tcp, seen).await,
                    Some(acceptor) => {
                        if let Ok((stream, _)) =
                            acceptor.accept(tcp, weir_tls::FirstSpeaker::Client).await
                        {
                            serve_h2(stream, seen).await;
                        }
                    }
                }
            });
        }
    });
    H2Node {
        addr,
        connections,
        streams,
    }
}

/// Serves one connection; `accepted` counts its streams. The node's first request for
/// `/drop-once` (`dropped` says whether it came) ends the connection there, no answer and
/// no GOAWAY, as a node that restarts does.
async fn serve_h2<S>(
    io: S,
    (accepted, dropped): (Arc<AtomicUsize>, Arc<std::sync::atomic::AtomicBool>),
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let Ok(mut connection) = h2::server::handshake(io).await else {
        return;
    };
    while let Some(Ok((request, respond))) = connection.accept().await {
        accepted.fetch_add(1, Ordering::Relaxed);
        if request.uri().path() == "/drop-once" && !dropped.swap(true, Ordering::Relaxed) {
            return;
        }
        tokio::spawn(answer(request, respond));
    }
}

/// A TLS acceptor for `localhost` offering only `h2`, from `pki`'s CA.
fn h2_acceptor(pki: &weir_testkit::tls::Pki) -> Arc<weir_tls::Acceptor> {
    pki.acceptor(&["localhost"], &["h2"])
}

/// Answers `ok` after an empty DATA frame, as a server that flushes its head does.
fn flush_first(mut respond: h2::server::SendResponse<Bytes>) {
    let head = ok_head();
    if let Ok(mut send) = respond.send_response(head, false) {
        let _ = send.send_data(Bytes::new(), false);
        let _ = send.send_data(Bytes::from_static(b"ok"), true);
    }
}

async fn answer(
    request: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
) {
    if request.uri().path() == "/stream" {
        return echo_stream(request, respond).await;
    }
    if request.uri().path() == "/refuse-mid-body" {
        return refuse_mid_body(request, respond).await;
    }
    if request.uri().path() == "/slow" {
        tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    }
    if request.uri().path() == "/flush-first" {
        return flush_first(respond);
    }
    if request.uri().path() == "/head-first" {
        return head_first(request, respond).await;
    }
    if let Some((status, reset, length)) = match request.uri().path() {
        "/early413" => Some((413, false, true)),
        "/early413rst" => Some((413, true, true)),
        "/early200" => Some((200, false, true)),
        "/early413bare" => Some((413, false, false)),
        _ => None,
    } {
        return answer_early(request, respond, (status, reset, length)).await;
    }
    if request.uri().path() == "/early-big" {
        return early_big(request, respond).await;
    }
    if request.uri().path().starts_with("/reset-") {
        return reset_after_part(request.uri().path(), respond).await;
    }
    if request.uri().path() == "/big" {
        // 8 MiB, sent as the windows allow.
        let head = http::Response::builder()
            .status(200)
            .header("content-length", 8 << 20)
            .body(())
            .expect("response");
        if let Ok(mut send) = respond.send_response(head, false) {
            let _ = send.send_data(Bytes::from(vec![b'x'; 8 << 20]), true);
            // The codec sends what it holds while the connection lives.
            std::future::pending::<()>().await;
        }
        return;
    }
    if request.uri().path() == "/switch" {
        // A 101 HTTP/2 does not have (RFC 9113 §8.6), then an answer.
        let switch = http::Response::builder().status(101).body(()).expect("101");
        let _ = respond.send_informational(switch);
    }
    if request.uri().path() == "/hints" {
        let hints = http::Response::builder()
            .status(103)
            .header("link", "</style.css>; rel=preload")
            .body(())
            .expect("hints");
        let _ = respond.send_informational(hints);
    }
    let (parts, mut body) = request.into_parts();
    let mut received = Vec::new();
    while let Some(Ok(data)) = body.data().await {
        let _ = body.flow_control().release_capacity(data.len());
        received.extend_from_slice(&data);
    }
    let trailers_in = body.trailers().await.ok().flatten();
    let text = format!(
        "h2 node: {} {} authority={} body={}\n",
        parts.method,
        parts.uri.path(),
        parts.uri.authority().map_or("-", |a| a.as_str()),
        String::from_utf8_lossy(&received),
    );
    let mut response = http::Response::builder()
        .status(200)
        .header("x-node", "h2")
        .header(
            "x-forwarded-for-seen",
            header(&parts.headers, "x-forwarded-for"),
        )
        .header("x-te-seen", header(&parts.headers, "te"))
        .header(
            "x-trailer-seen",
            trailer(trailers_in.as_ref(), "x-checksum"),
        )
        .header(
            "x-trailer-range-seen",
            trailer(trailers_in.as_ref(), "range"),
        );
    if parts.uri.path() == "/cached" {
        response = response.header("cache-control", "max-age=60");
    }
    // Heads past a virtual server's default limits (100 fields, 16 KiB).
    if parts.uri.path() == "/many-fields" {
        for field in 0..150 {
            response = response.header(format!("x-field-{field}"), "v");
        }
    }
    if parts.uri.path() == "/wide-field" {
        response = response.header("x-wide", "w".repeat(20 * 1024));
    }
    send_answer(respond, response, parts.uri.path(), text).await;
}

/// A head and part of the body, then the node resets its stream: with CANCEL for
/// `/reset-cancel`, REFUSED_STREAM for `/reset-refused`.
async fn reset_after_part(path: &str, mut respond: h2::server::SendResponse<Bytes>) {
    let reason = match path {
        "/reset-refused" => h2::Reason::REFUSED_STREAM,
        _ => h2::Reason::CANCEL,
    };
    if let Ok(mut send) = respond.send_response(ok_head(), false) {
        let _ = send.send_data(Bytes::from_static(b"part"), false);
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        send.send_reset(reason);
    }
}

/// Sends `response` with `text` as its body, framed as `path` asks:
/// `/trailers`: no `content-length`, trailers after the body;
/// `/length-and-trailers`: a `content-length`, and trailers after the body all the same;
/// `/late-trailers`: so, with a 20,000-byte body and the trailers 1 s after it;
/// `/empty-end`: a `content-length`, the body, then an empty DATA frame ends the stream
/// (as Go's net/http does after a Flush); anything else: a `content-length` and the body.
async fn send_answer(
    mut respond: h2::server::SendResponse<Bytes>,
    mut response: http::response::Builder,
    path: &str,
    text: String,
) {
    let text = match path {
        "/late-trailers" => "t".repeat(20_000),
        _ => text,
    };
    let with_length = path != "/trailers";
    let with_trailers = matches!(
        path,
        "/trailers" | "/length-and-trailers" | "/late-trailers"
    );
    let empty_end = path == "/empty-end";
    if with_length {
        response = response.header("content-length", text.len());
    }
    let Ok(mut send) = respond.send_response(response.body(()).expect("response"), false) else {
        return;
    };
    send.reserve_capacity(text.len());
    let _ = send.send_data(Bytes::from(text), !with_trailers && !empty_end);
    if empty_end {
        let _ = send.send_data(Bytes::new(), true);
    }
    if path == "/late-trailers" {
        tokio::time::sleep(std::time::Duration::from_millis(1000)).await;
    }
    if with_trailers {
        let mut trailers = http::HeaderMap::new();
        trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
        let _ = send.send_trailers(trailers);
    }
}

/// A whole answer (413) before the request body, which the node never reads (RFC 9113
/// §8.1), then, with `reset`, RST_STREAM NO_ERROR to stop the upload.
async fn answer_early(
    request: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    (status, reset, length): (u16, bool, bool),
) {
    let mut head = http::Response::builder().status(status);
    if length {
        head = head.header("content-length", 6);
    }
    let head = head.body(()).expect("response");
    if let Ok(mut send) = respond.send_response(head, false) {
        let _ = send.send_data(Bytes::from_static(b"early\n"), true);
        if reset {
            // After the answer has gone out: the `h2` crate drops frames still queued on a
            // stream it resets.
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            send.send_reset(h2::Reason::NO_ERROR);
        }
    }
    // The request body stays unread as long as the test lasts.
    tokio::time::sleep(std::time::Duration::from_secs(10)).await;
    drop(request);
}

/// A `200` head, its body to follow.
fn ok_head() -> http::Response<()> {
    http::Response::builder()
        .status(200)
        .body(())
        .expect("response")
}

/// A whole answer of 2 MiB, the request body never read.
async fn early_big(
    request: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
) {
    let head = ok_head();
    if let Ok(mut send) = respond.send_response(head, false) {
        let _ = send.send_data(Bytes::from(vec![b'b'; 2 << 20]), true);
        tokio::time::sleep(std::time::Duration::from_secs(10)).await;
    }
    drop(request);
}

/// Sends its response head at once, then reads the whole request body, then answers
/// `read N`: a handler that flushes its head before it reads (a head is not a refusal).
async fn head_first(
    request: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
) {
    let head = ok_head();
    let Ok(mut send) = respond.send_response(head, false) else {
        return;
    };
    let mut body = request.into_body();
    let mut read = 0;
    while let Some(Ok(data)) = body.data().await {
        let _ = body.flow_control().release_capacity(data.len());
        read += data.len();
    }
    let _ = send.send_data(Bytes::from(format!("read {read}\n")), true);
}

/// Reads 256 KiB of the request body, then refuses the stream (REFUSED_STREAM), as a node
/// that sheds load in the middle of an upload does.
async fn refuse_mid_body(
    request: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
) {
    let mut body = request.into_body();
    let mut received = 0;
    while received < 256 * 1024 {
        let Some(Ok(data)) = body.data().await else {
            return;
        };
        let _ = body.flow_control().release_capacity(data.len());
        received += data.len();
    }
    respond.send_reset(h2::Reason::REFUSED_STREAM);
}

/// A gRPC-like bidirectional stream: the head at once, each DATA frame sent
/// back as it arrives, `grpc-status: 0` in trailers after the request ends.
async fn echo_stream(
    request: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
) {
    let mut body = request.into_body();
    let head = http::Response::builder()
        .status(200)
        .header("content-type", "application/grpc")
        .body(())
        .expect("response");
    let Ok(mut send) = respond.send_response(head, false) else {
        return;
    };
    while let Some(Ok(data)) = body.data().await {
        let _ = body.flow_control().release_capacity(data.len());
        if send.send_data(data, false).is_err() {
            return;
        }
    }
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
    let _ = send.send_trailers(trailers);
}

/// A field of the request's trailers, `-` without it.
fn trailer(trailers: Option<&http::HeaderMap>, name: &str) -> String {
    trailers.map_or("-".to_owned(), |t| header(t, name))
}

fn header(headers: &http::HeaderMap, name: &str) -> String {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-")
        .to_owned()
}

/// An h2c virtual server over an h2c pool of `node` that writes JSON access records to a
/// file of its own (`name` tells the tests' files apart): the proxy and the file.
async fn logged_proxy(
    node: SocketAddr,
    name: &str,
    vs_extra: &str,
) -> (TestProxy, std::path::PathBuf) {
    let log = std::env::temp_dir().join(format!("weir-h2-{name}-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let toml = format!(
        "[log]\naccess_log = true\naccess_log_format = \"json\"\naccess_log_file = \"{}\"\n\
         level = \"warn\"\n\n[pools.web]\nnodes = [{{ address = \"{node}\" }}]\nprotocol = \"h2c\"\n\n\
         [virtual_servers.web]\nlisten = [\"127.0.0.1:0\"]\npool = \"web\"\n\
         [virtual_servers.web.http2]\ncleartext = true\n{vs_extra}",
        log.display(),
    );
    (TestProxy::start(&toml).await, log)
}

async fn proxy(node: SocketAddr, vs_extra: &str) -> TestProxy {
    TestProxy::start(&weir_testkit::config(
        &[node],
        "protocol = \"h2c\"",
        vs_extra,
    ))
    .await
}

/// An HTTP/2 client connection to weir over h2c (prior knowledge), ready to send.
async fn h2c_client(proxy: &TestProxy) -> h2::client::SendRequest<Bytes> {
    let tcp = tokio::net::TcpStream::connect(proxy.addr)
        .await
        .expect("connect");
    let (sender, connection) = h2::client::handshake(tcp).await.expect("handshake");
    tokio::spawn(connection);
    sender.ready().await.expect("ready")
}

/// A proxy to an h2c `node`, with HTTP/2 clients in cleartext and the pool's `write` and
/// `response` timeouts in seconds.
async fn h2c_proxy_for_uploads(node: SocketAddr, write: u64, response: u64) -> TestProxy {
    TestProxy::start(&weir_testkit::config(
        &[node],
        &format!(
            "protocol = \"h2c\"\n[pools.web.timeouts]\nwrite = \"{write}s\"\nresponse = \"{response}s\""
        ),
        "[virtual_servers.web.http2]\ncleartext = true",
    ))
    .await
}

/// A file of `size` bytes to upload (named after `name` and this process), and curl's
/// `@FILE` argument for it.
fn upload_file(name: &str, size: usize) -> (std::path::PathBuf, String) {
    let body = std::env::temp_dir().join(format!("{name}-{}.bin", std::process::id()));
    std::fs::write(&body, vec![b'u'; size]).expect("body file");
    let upload = format!("@{}", body.display());
    (body, upload)
}

/// An HTTP/2 client's POST of `size` bytes to `url`, its body sent at once: the answer's
/// status and body, each awaited at most `within`.
async fn h2_post(
    proxy: &TestProxy,
    url: String,
    size: usize,
    within: std::time::Duration,
) -> (http::StatusCode, Vec<u8>) {
    let mut sender = h2c_client(proxy).await;
    let request = http::Request::post(url).body(()).expect("request");
    let (response, mut sending) = sender.send_request(request, false).expect("sent");
    sending.reserve_capacity(size);
    let _ = sending.send_data(Bytes::from(vec![b'u'; size]), true);
    let response = tokio::time::timeout(within, response)
        .await
        .expect("the head in time")
        .expect("an answer");
    let status = response.status();
    let mut answer = response.into_body();
    let mut received = Vec::new();
    while let Some(Ok(data)) = tokio::time::timeout(within, answer.data())
        .await
        .expect("the body in time")
    {
        let _ = answer.flow_control().release_capacity(data.len());
        received.extend_from_slice(&data);
    }
    (status, received)
}

/// curl with `args` (plus `-sS` and a 10 s limit), `input` on its standard
/// input; what it printed, after checking it succeeded.
async fn curl(args: Vec<String>, input: &'static [u8]) -> String {
    tokio::task::spawn_blocking(move || {
        use std::io::Write as _;
        let mut child = Command::new("curl")
            .args(["-sS", "--max-time", "10"])
            .args(&args)
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
    })
    .await
    .expect("ran")
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http1_clients_reach_an_h2c_node() {
    let node = h2_node().await;
    let proxy = proxy(node.addr, "").await;
    let url = format!("http://127.0.0.1:{}", proxy.addr.port());
    let get = curl(args(&["--http1.1", "-i", &format!("{url}/a?b=1")]), b"").await;
    assert!(get.starts_with("HTTP/1.1 200"), "{get}");
    assert!(get.contains("x-node: h2"), "{get}");
    assert!(get.contains("x-forwarded-for-seen: 127.0.0.1"), "{get}");
    let authority = format!("authority=127.0.0.1:{}", proxy.addr.port());
    assert!(
        get.contains(&format!("h2 node: GET /a {authority} body=\n")),
        "{get}"
    );
    // A body of known length, and one sent chunked.
    let post = curl(
        args(&["--http1.1", "--data-binary", "hello", &format!("{url}/p")]),
        b"",
    )
    .await;
    assert!(post.ends_with("body=hello\n"), "{post}");
    let chunked = curl(
        args(&[
            "--http1.1",
            "-H",
            "Transfer-Encoding: chunked",
            "-T",
            "-",
            &format!("{url}/c"),
        ]),
        b"streamed to h2",
    )
    .await;
    assert!(chunked.ends_with("body=streamed to h2\n"), "{chunked}");
    // Trailers reach an HTTP/1.1 client on a chunked response.
    let trailers = curl(
        args(&[
            "--http1.1",
            "-i",
            "-H",
            "TE: trailers",
            &format!("{url}/trailers"),
        ]),
        b"",
    )
    .await;
    assert!(
        trailers
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "{trailers}"
    );
    assert!(trailers.contains("grpc-status: 0"), "{trailers}");
    // Many requests, few connections: the node's connection is shared.
    for _ in 0..20 {
        curl(args(&["--http1.1", &format!("{url}/")]), b"").await;
    }
    assert_eq!(node.connections.load(Ordering::Relaxed), 1);
    proxy.stop().await;
}

/// Clients that stop reading long answers hold only their own streams' windows: the
/// node's connection keeps room for its other streams (its window covers every stream's),
/// so other clients of the node are still answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_stop_reading_do_not_stall_the_other_streams_of_a_node() {
    let node = h2_node().await;
    let proxy = TestProxy::start(&weir_testkit::config(
        &[node.addr],
        "protocol = \"h2c\"\n[pools.web.timeouts]\nresponse = \"3s\"",
        "",
    ))
    .await;
    let mut stalled = Vec::new();
    for _ in 0..8 {
        let mut stream = tokio::net::TcpStream::connect(proxy.addr)
            .await
            .expect("connect");
        stream
            .write_all(b"GET /big HTTP/1.1\r\nHost: t\r\n\r\n")
            .await
            .expect("write");
        stalled.push(stream);
    }
    // Long enough for the stalled streams to fill what weir lets the node send them.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let url = format!("http://127.0.0.1:{}/after", proxy.addr.port());
    let answer = curl(args(&["--http1.1", "-i", &url]), b"").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    drop(stalled);
    proxy.stop().await;
}

/// A node that sends its head before it reads the body (a handler that flushes first, or
/// one that echoes as it reads) has not refused the body: weir goes on sending it, to
/// clients of both versions, and relays the answer that follows (it waited for the body
/// and the client for the answer, until the node's response timeout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_before_the_body_does_not_stop_the_upload() {
    let node = h2_node().await;
    let proxy = h2c_proxy_for_uploads(node.addr, 3, 5).await;
    let size = 300_000;
    let (body, upload) = upload_file("weir-head-first", size);
    let url = |path: &str| format!("http://127.0.0.1:{}{path}", proxy.addr.port());
    let quick = std::time::Duration::from_secs(2);
    // HTTP/1.1 clients, with a length and chunked.
    for chunked in [false, true] {
        let started = std::time::Instant::now();
        let mut list = vec!["--http1.1", "-H", "Expect:", "--data-binary", &upload];
        if chunked {
            list.extend(["-H", "Transfer-Encoding: chunked"]);
        }
        let head_first = url("/head-first");
        list.push(&head_first);
        let answer = curl(args(&list), b"").await;
        assert_eq!(answer, format!("read {size}\n"), "chunked: {chunked}");
        assert!(started.elapsed() < quick, "after {:?}", started.elapsed());
    }
    // An echo, as it reads: more than the node's window, less than what weir reads ahead.
    let echo = url("/stream");
    let echoed = curl(
        args(&[
            "--http1.1",
            "-H",
            "Expect:",
            "--data-binary",
            &upload,
            &echo,
        ]),
        b"",
    )
    .await;
    assert_eq!(echoed.len(), size);
    // An HTTP/2 client.
    let started = std::time::Instant::now();
    let (_, text) = h2_post(&proxy, url("/head-first"), size, quick).await;
    assert_eq!(text, format!("read {size}\n").as_bytes());
    assert!(started.elapsed() < quick, "after {:?}", started.elapsed());
    let _ = std::fs::remove_file(&body);
    proxy.stop().await;
}

/// A whole answer larger than weir reads ahead, from a node that never reads the body (it
/// has all it needs): once the read-ahead is full and the body stalls, the answer is
/// relayed (it was a 504 at `timeouts.write`), to clients of both versions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_whole_answer_before_the_body_is_relayed() {
    let node = h2_node().await;
    let proxy = h2c_proxy_for_uploads(node.addr, 4, 8).await;
    let (body, upload) = upload_file("weir-early-big", 4 << 20);
    let url = format!("http://127.0.0.1:{}/early-big", proxy.addr.port());
    let quick = std::time::Duration::from_secs(3);
    let started = std::time::Instant::now();
    let answer = curl(
        args(&["--http1.1", "-H", "Expect:", "--data-binary", &upload, &url]),
        b"",
    )
    .await;
    assert_eq!(answer.len(), 2 << 20);
    assert!(started.elapsed() < quick, "after {:?}", started.elapsed());
    let _ = std::fs::remove_file(&body);
    // An HTTP/2 client, still sending.
    let started = std::time::Instant::now();
    let (status, received) = h2_post(&proxy, url, 4 << 20, quick).await;
    assert_eq!(status, 200);
    assert_eq!(received.len(), 2 << 20);
    assert!(started.elapsed() < quick, "after {:?}", started.elapsed());
    proxy.stop().await;
}

/// A node may answer before it has read the request body, and then stop reading it (a
/// 413 of its own; RFC 9113 §8.1, with or without RST_STREAM NO_ERROR): its answer reaches
/// clients of both versions, not a 502 or a 504 of weir's once the upload stalls. (An
/// HTTP/2 client then gets RST_STREAM NO_ERROR after the whole answer, to stop its upload:
/// the `h2` crate's client reads the answer, where curl 7.88 reports the reset as an error.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_answer_before_the_body_reaches_the_client() {
    let node = h2_node().await;
    let proxy = h2c_proxy_for_uploads(node.addr, 2, 5).await;
    let (body, upload) = upload_file("weir-early", 4 << 20);
    // A 2xx answered early is an answer too, not a protocol switch (it was a 502).
    for (path, status) in [
        ("/early413", 413),
        ("/early413rst", 413),
        ("/early200", 200),
        // No length: its body is read ahead to see it end, and must still be relayed.
        ("/early413bare", 413),
    ] {
        let url = format!("http://127.0.0.1:{}{path}", proxy.addr.port());
        let started = std::time::Instant::now();
        let answer = curl(
            args(&[
                "--http1.1",
                "-i",
                "-H",
                "Expect:",
                "--data-binary",
                &upload,
                &url,
            ]),
            b"",
        )
        .await;
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status}")),
            "{path}: {answer}"
        );
        assert!(answer.ends_with("early\n"), "{path}: {answer}");
        let quick = std::time::Duration::from_millis(1500);
        assert!(
            started.elapsed() < quick,
            "{path}: after {:?}",
            started.elapsed()
        );
        // An HTTP/2 client, still sending when the answer comes.
        let started = std::time::Instant::now();
        let (answered, text) = h2_post(&proxy, url, 4 << 20, quick).await;
        assert_eq!(answered, status, "{path}");
        assert_eq!(text, b"early\n", "{path}");
        assert!(
            started.elapsed() < quick,
            "{path}: after {:?}",
            started.elapsed()
        );
    }
    let _ = std::fs::remove_file(&body);
    proxy.stop().await;
}

/// A stream the node refuses once part of a streamed body has gone to it is not sent
/// again: what went is gone, so another stream would carry a shorter body than the
/// client's. The client gets a 502 and its connection closes (the rest of its body is not
/// read as requests). A refusal that comes before any of the rest of the body left would
/// be sent again whole; the buffered start alone is never a whole body here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_refused_in_the_middle_of_an_upload_is_not_sent_again() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let node = h2_node().await;
    let proxy = proxy(node.addr, "").await;
    for chunked in [false, true] {
        let before = node.streams.load(Ordering::Relaxed);
        let tcp = tokio::net::TcpStream::connect(proxy.addr)
            .await
            .expect("connect");
        let (mut reading, mut writing) = tcp.into_split();
        let body = vec![b'b'; 1 << 20];
        let framing = match chunked {
            true => "Transfer-Encoding: chunked".to_owned(),
            false => format!("Content-Length: {}", body.len()),
        };
        let upload = tokio::spawn(async move {
            let head = format!("POST /refuse-mid-body HTTP/1.1\r\nHost: h\r\n{framing}\r\n\r\n");
            writing.write_all(head.as_bytes()).await?;
            for piece in body.chunks(16 * 1024) {
                if chunked {
                    writing
                        .write_all(format!("{:x}\r\n", piece.len()).as_bytes())
                        .await?;
                }
                writing.write_all(piece).await?;
                if chunked {
                    writing.write_all(b"\r\n").await?;
                }
            }
            if chunked {
                writing.write_all(b"0\r\n\r\n").await?;
            }
            Ok::<_, std::io::Error>(writing)
        });
        let mut answer = Vec::new();
        tokio::time::timeout(
            std::time::Duration::from_secs(10),
            reading.read_to_end(&mut answer),
        )
        .await
        .expect("weir answers and closes in time")
        .expect("read");
        let answer = String::from_utf8_lossy(&answer);
        assert!(
            answer.starts_with("HTTP/1.1 502"),
            "chunked {chunked}: {answer}"
        );
        assert_eq!(
            answer.matches("HTTP/1.1 ").count(),
            1,
            "chunked {chunked}: the rest of the body read as requests: {answer}"
        );
        assert_eq!(
            node.streams.load(Ordering::Relaxed) - before,
            1,
            "chunked {chunked}: the request was sent again"
        );
        drop(upload.await);
    }
    proxy.stop().await;
}

/// A virtual server's `max_headers` and `max_header_bytes` bound its nodes' answers
/// whatever their protocol: past them an HTTP/2 node's answer is a 502, as an HTTP/1.1
/// node's is; so is one that begins with a 101.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h2_nodes_answer_past_the_head_limits_is_a_bad_gateway() {
    let node = h2_node().await;
    let proxy = proxy(node.addr, "").await;
    // And a 101, which HTTP/2 does not have: passed on, it told an HTTP/1.1 client its
    // connection had switched protocols.
    for path in ["/many-fields", "/wide-field", "/switch"] {
        let url = format!("http://127.0.0.1:{}{path}", proxy.addr.port());
        let answer = curl(args(&["--http1.1", "-i", &url]), b"").await;
        assert!(answer.starts_with("HTTP/1.1 502"), "{path}: {answer}");
    }
    let url = format!("http://127.0.0.1:{}/within", proxy.addr.port());
    let answer = curl(args(&["--http1.1", "-i", &url]), b"").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    proxy.stop().await;
}

/// A reused connection to an HTTP/2 node that ends under an idempotent request, without a
/// GOAWAY (the node restarted), sends the request again on a new connection, as a reused
/// HTTP/1.1 connection does; the client gets the answer, not a 502.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_on_a_lost_reused_h2_connection_is_sent_again() {
    let node = h2_node().await;
    let proxy = proxy(node.addr, "").await;
    let base = format!("http://127.0.0.1:{}", proxy.addr.port());
    let first = curl(args(&["--http1.1", "-i", &format!("{base}/first")]), b"").await;
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    let again = curl(
        args(&["--http1.1", "-i", &format!("{base}/drop-once")]),
        b"",
    )
    .await;
    assert!(again.starts_with("HTTP/1.1 200"), "{again}");
    assert!(again.contains("h2 node: GET /drop-once "), "{again}");
    // The first connection, then the one the request was sent again on.
    assert_eq!(node.connections.load(Ordering::Relaxed), 2);
    assert_eq!(node.streams.load(Ordering::Relaxed), 3);
    proxy.stop().await;
}

/// An HTTP/1.0 request may come without `Host`: it has no authority to convey, so it
/// reaches an HTTP/2 node without `:authority` (RFC 9113 §8.3.1), not refused by weir.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http10_request_without_host_reaches_an_h2c_node() {
    let node = h2_node().await;
    let proxy = proxy(node.addr, "").await;
    let mut stream = tokio::net::TcpStream::connect(proxy.addr)
        .await
        .expect("connect");
    stream
        .write_all(b"GET /old HTTP/1.0\r\n\r\n")
        .await
        .expect("write");
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.expect("read");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        answer.ends_with("h2 node: GET /old authority=- body=\n"),
        "{answer}"
    );
    assert_eq!(node.streams.load(Ordering::Relaxed), 1);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_clients_reach_an_h2c_node_with_trailers() {
    let node = h2_node().await;
    let proxy = proxy(node.addr, "[virtual_servers.web.http2]\ncleartext = true").await;
    let url = format!("http://127.0.0.1:{}", proxy.addr.port());
    let h2 = "--http2-prior-knowledge";
    let get = curl(args(&[h2, "-i", &format!("{url}/x")]), b"").await;
    assert!(get.starts_with("HTTP/2 200"), "{get}");
    assert!(get.contains("h2 node: GET /x"), "{get}");
    let post = curl(
        args(&[h2, "-X", "POST", "-T", "-", &format!("{url}/up")]),
        b"unknown length",
    )
    .await;
    assert!(post.ends_with("body=unknown length\n"), "{post}");
    let trailers = curl(
        args(&[h2, "-i", "-H", "TE: trailers", &format!("{url}/trailers")]),
        b"",
    )
    .await;
    assert!(trailers.contains("grpc-status: 0"), "{trailers}");
    assert!(trailers.contains("x-te-seen: trailers"), "{trailers}");
    let mut sender = h2c_client(&proxy).await;
    // And the other way: an HTTP/2 client's trailers after a body with a length reach the
    // HTTP/2 node, without a field no trailer may carry (dropped as from an HTTP/1.1
    // client's chunked trailers).
    let seen = upload_with_trailers(&mut sender, &url, true, "abc").await;
    assert_eq!(seen, (Some(b"abc".to_vec()), Some(b"-".to_vec())));
    // So with no length, the body pumped to the node as it comes.
    let seen = upload_with_trailers(&mut sender, &url, false, "def").await;
    assert_eq!(seen, (Some(b"def".to_vec()), Some(b"-".to_vec())));
    // The kept-alive connections still answer.
    let again = curl(args(&[h2, "-i", &format!("{url}/x")]), b"").await;
    assert!(again.starts_with("HTTP/2 200"), "{again}");
    proxy.stop().await;
}

/// POSTs `hello` to `{url}/up` over `sender` with trailers `x-checksum: checksum` and
/// `range` (which no trailer may carry), with a `content-length` (`length`) or without it
/// (the body then pumped as it comes, its trailers a moment after the data). Returns what
/// the node says it saw of each: `x-trailer-seen` and `x-trailer-range-seen`.
async fn upload_with_trailers(
    sender: &mut h2::client::SendRequest<Bytes>,
    url: &str,
    length: bool,
    checksum: &'static str,
) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
    let mut request = http::Request::post(format!("{url}/up"));
    if length {
        request = request.header("content-length", "5");
    }
    let request = request.body(()).expect("request");
    let (response, mut upload) = sender.send_request(request, false).expect("sent");
    upload
        .send_data(Bytes::from_static(b"hello"), false)
        .expect("data");
    if !length {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let mut sent = http::HeaderMap::new();
    sent.insert("x-checksum", http::HeaderValue::from_static(checksum));
    sent.insert("range", http::HeaderValue::from_static("bytes=0-1"));
    upload.send_trailers(sent).expect("trailers");
    let response = tokio::time::timeout(std::time::Duration::from_secs(5), response)
        .await
        .expect("the head in time")
        .expect("a head");
    let seen = |name: &str| response.headers().get(name).map(|v| v.as_bytes().to_vec());
    (seen("x-trailer-seen"), seen("x-trailer-range-seen"))
}

/// GET `path` over `sender`: the head's fields, the body and the trailers, each in time.
async fn h2_get(
    sender: &mut h2::client::SendRequest<Bytes>,
    url: &str,
) -> (http::HeaderMap, Vec<u8>, Option<http::HeaderMap>) {
    let request = http::Request::get(url)
        .header("te", "trailers")
        .body(())
        .expect("request");
    let (response, _) = sender.send_request(request, true).expect("sent");
    let wait = std::time::Duration::from_secs(5);
    let response = tokio::time::timeout(wait, response)
        .await
        .expect("the head in time")
        .expect("a head");
    let (parts, mut answer) = response.into_parts();
    let mut text = Vec::new();
    while let Some(Ok(data)) = tokio::time::timeout(wait, answer.data())
        .await
        .expect("the body in time")
    {
        text.extend_from_slice(&data);
    }
    let trailers = tokio::time::timeout(wait, answer.trailers())
        .await
        .expect("the trailers in time")
        .expect("no error");
    (parts.headers, text, trailers)
}

/// An HTTP/2 node's stream may go on past a body with a `content-length`, to trailers (RFC
/// 9113 §8.1): an HTTP/2 client gets them, after its body, when they come; an HTTP/1.1
/// client gets the body by its length at once, without them. A stream that ends with an
/// empty DATA frame after its length (Go's net/http after a Flush) ends the answer too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trailers_after_a_length_reach_http2_clients_and_hold_no_one() {
    let node = h2_node().await;
    let proxy = proxy(node.addr, "[virtual_servers.web.http2]\ncleartext = true").await;
    let url = format!("http://127.0.0.1:{}", proxy.addr.port());
    let mut sender = h2c_client(&proxy).await;
    for (path, size) in [("/length-and-trailers", 0), ("/late-trailers", 20_000)] {
        let (head, text, trailers) = h2_get(&mut sender, &format!("{url}{path}")).await;
        assert!(head.contains_key("content-length"), "{path}");
        if size > 0 {
            assert_eq!(text.len(), size, "{path}");
        } else {
            assert!(text.starts_with(b"h2 node: GET /length-and-trailers"));
        }
        let trailers = trailers.unwrap_or_else(|| panic!("{path}: no trailers"));
        assert_eq!(
            trailers.get("grpc-status").map(|v| v.as_bytes()),
            Some(&b"0"[..]),
            "{path}"
        );
    }
    let (_, text, trailers) = h2_get(&mut sender, &format!("{url}/empty-end")).await;
    assert!(text.starts_with(b"h2 node: GET /empty-end"));
    assert!(trailers.is_none());
    // HTTP/1.1: the body by its length, no trailers; the late ones (1 s after the body)
    // hold nothing: curl is done well before the node's stream is.
    for path in ["/length-and-trailers", "/late-trailers", "/empty-end"] {
        let started = std::time::Instant::now();
        let h1 = curl(args(&["--http1.1", "-i", &format!("{url}{path}")]), b"").await;
        assert!(h1.starts_with("HTTP/1.1 200"), "{path}: {h1}");
        assert!(!h1.contains("grpc-status"), "{path}: {h1}");
        if path == "/late-trailers" {
            assert!(
                started.elapsed() < std::time::Duration::from_millis(900),
                "{path}: the body waited for the trailers ({:?})",
                started.elapsed()
            );
        }
    }
    // The node connection still serves.
    let (_, text, _) = h2_get(&mut sender, &format!("{url}/x")).await;
    assert!(text.starts_with(b"h2 node: GET /x"));
    proxy.stop().await;
}

/// The cache stores an h2c node's answer with the `Via` entry the relay
/// writes for it (`2 weir`): the miss and the hits that follow, to clients
/// of either protocol, say so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_answers_of_an_h2c_node_name_its_version_in_via() {
    let node = h2_node().await;
    let vs = "[virtual_servers.web.cache]\nstatus_header = \"X-Cache\"\n\
              [virtual_servers.web.http2]\ncleartext = true";
    let proxy = proxy(node.addr, vs).await;
    let url = format!("http://127.0.0.1:{}/cached", proxy.addr.port());
    for (protocol, status) in [
        ("--http1.1", "miss"),
        ("--http1.1", "hit"),
        ("--http2-prior-knowledge", "hit"),
    ] {
        let head = curl(args(&[protocol, "-D", "-", "-o", "/dev/null", &url]), b"").await;
        let head = head.to_ascii_lowercase();
        assert!(head.contains(&format!("x-cache: {status}")), "{head}");
        assert_eq!(head.matches("via: ").count(), 1, "{head}");
        assert!(head.contains("via: 2 weir"), "{head}");
    }
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_h2c_node_gets_weirs_own_answer() {
    let free = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let gone = free.local_addr().expect("address");
    drop(free);
    let proxy = proxy(gone, "[virtual_servers.web.http2]\ncleartext = true").await;
    let url = format!("http://127.0.0.1:{}/", proxy.addr.port());
    for version in ["--http1.1", "--http2-prior-knowledge"] {
        let code = curl(
            args(&[version, "-o", "/dev/null", "-w", "%{response_code}", &url]),
            b"",
        )
        .await;
        assert_eq!(code, "502", "{version}");
    }
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_of_both_versions_reach_an_h2_node_over_tls() {
    let pki = weir_testkit::tls::Pki::new();
    let node = h2_node_over(Some(h2_acceptor(&pki))).await;
    let pool = format!(
        "protocol = \"h2\"\n[pools.web.tls]\nca = \"{}\"\nserver_name = \"localhost\"",
        pki.ca_path().display()
    );
    let proxy = TestProxy::start(&weir_testkit::config(
        &[node.addr],
        &pool,
        "[virtual_servers.web.http2]\ncleartext = true",
    ))
    .await;
    let url = format!("http://127.0.0.1:{}/tls", proxy.addr.port());
    for version in ["--http1.1", "--http2-prior-knowledge"] {
        let body = curl(args(&[version, "--data-binary", "over tls", &url]), b"").await;
        assert!(body.starts_with("h2 node: POST /tls"), "{version}: {body}");
        assert!(body.ends_with("body=over tls\n"), "{version}: {body}");
    }
    assert_eq!(node.connections.load(Ordering::Relaxed), 1);
    proxy.stop().await;
}

/// A node of an `h2` pool that ends TLS without ALPN and speaks HTTP/2 behind it (here a
/// `tls` virtual server in front of an h2c node) gets no request: weir requires `h2` in
/// ALPN. Its health checks require it too, and mark it down (they answered 200 over
/// HTTP/2 and kept it up while every request got a 502).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checks_of_an_h2_pool_require_h2_in_alpn_as_requests_do() {
    let node = h2_node().await;
    let no_alpn = TestProxy::start(&format!(
        "[log]\naccess_log = false\nlevel = \"warn\"\n\
         [pools.p]\nnodes = [{{ address = \"{}\" }}]\nprotocol = \"h2c\"\n\
         [virtual_servers.s]\nprotocol = \"tls\"\nlisten = [\"127.0.0.1:0\"]\npool = \"p\"\n\
         [virtual_servers.s.tls]\ncertificates = [{{ self_signed = [\"localhost\"] }}]",
        node.addr
    ))
    .await;
    let proxy = TestProxy::start(&weir_testkit::config(
        &[no_alpn.addr],
        "protocol = \"h2\"\nretries = 0\n[pools.web.tls]\nverify = false\n\
         [pools.web.health]\ntype = \"http\"\ninterval = \"300ms\"\ntimeout = \"250ms\"\n\
         fall = 1\nrise = 1",
        "",
    ))
    .await;
    let model = proxy.live.current();
    let checked = &model.pool("web").expect("pool").nodes[0];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while checked.is_active_up() {
        assert!(
            std::time::Instant::now() < deadline,
            "the monitor keeps the node up"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // Nothing reached the node: neither a check nor a request.
    assert_eq!(node.streams.load(Ordering::Relaxed), 0);
    proxy.stop().await;
    no_alpn.stop().await;
}

/// A TLS node that takes no part in ALPN (it chooses no protocol): counts the sessions made
/// with it, and those that ended with a close_notify (as every close weir starts must, RFC
/// 8446 §6.1).
async fn alpn_less_tls_node() -> (SocketAddr, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let pki = weir_testkit::tls::Pki::new();
    let (cert, key) = pki.server("alpn-less", &["localhost"], weir_tls::KeyType::EcdsaP256);
    // A `tls` virtual server's acceptor offers no ALPN unless told to.
    let toml = format!(
        "[virtual_servers.s]\nlisten = \"127.0.0.1:1\"\nprotocol = \"tls\"\npool = \"p\"\n\
         [virtual_servers.s.tls]\ncertificates = [{{ cert = \"{}\", key = \"{}\" }}]\n\
         [pools.p]\nnodes = [{{ address = \"127.0.0.1:2\" }}]\n",
        cert.display(),
        key.display(),
    );
    let config = weir_config::parse_str(&toml, "node.toml").expect("valid config");
    let tls = config.virtual_servers[0].tls.as_ref().expect("tls");
    let acceptor = Arc::new(weir_tls::Acceptor::new("s", tls, "node.toml").expect("keys load"));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    let (sessions, clean) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let counts = (Arc::clone(&sessions), Arc::clone(&clean));
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, (sessions, clean)) = (
                Arc::clone(&acceptor),
                (Arc::clone(&counts.0), Arc::clone(&counts.1)),
            );
            tokio::spawn(async move {
                let Ok((mut stream, _)) =
                    acceptor.accept(tcp, weir_tls::FirstSpeaker::Client).await
                else {
                    return;
                };
                sessions.fetch_add(1, Ordering::SeqCst);
                let mut rest = Vec::new();
                // A cut without close_notify is an `UnexpectedEof` error here.
                if stream.read_to_end(&mut rest).await.is_ok() {
                    clean.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
    });
    (addr, sessions, clean)
}

/// A node of an `h2` pool that does not choose h2 in ALPN is refused, by requests and by
/// checks alike, with a close_notify: the TLS session was made, and ends cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_refused_for_its_alpn_gets_a_close_notify() {
    let (node, sessions, clean) = alpn_less_tls_node().await;
    let proxy = TestProxy::start(&weir_testkit::config(
        &[node],
        "protocol = \"h2\"\nretries = 0\n\
         [pools.web.tls]\nverify = false\nserver_name = \"localhost\"\n\
         [pools.web.health]\ntype = \"http\"\ninterval = \"200ms\"\ntimeout = \"150ms\"",
        "",
    ))
    .await;
    let response = weir_testkit::client::get(proxy.addr, "/").await.unwrap();
    assert_eq!(response.status, 502);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while sessions.load(Ordering::SeqCst) < 3 || clean.load(Ordering::SeqCst) < 3 {
        assert!(std::time::Instant::now() < deadline, "sessions and checks");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    proxy.stop().await;
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(
        clean.load(Ordering::SeqCst),
        sessions.load(Ordering::SeqCst),
        "every session ended with a close_notify"
    );
}

/// A bidirectional stream (gRPC's shape) through weir: each message comes back
/// before the client sends the next, so neither the request nor the response
/// may be held back by buffering; the trailers end it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bidirectional_stream_flows_both_ways_at_once() {
    let node = h2_node().await;
    let proxy = proxy(node.addr, "[virtual_servers.web.http2]\ncleartext = true").await;
    let mut sender = h2c_client(&proxy).await;
    let request = http::Request::builder()
        .method("POST")
        .uri(format!("http://127.0.0.1:{}/stream", proxy.addr.port()))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .expect("request");
    let (response, mut upload) = sender.send_request(request, false).expect("sent");
    let wait = std::time::Duration::from_secs(5);
    let response = tokio::time::timeout(wait, response)
        .await
        .expect("the response head in time")
        .expect("a response");
    assert_eq!(response.status(), 200);
    let mut download = response.into_body();
    for message in ["ping 1", "ping 2", "ping 3"] {
        upload.send_data(Bytes::from(message), false).expect("sent");
        let echoed = tokio::time::timeout(wait, download.data())
            .await
            .expect("the echo in time")
            .expect("data")
            .expect("no error");
        let _ = download.flow_control().release_capacity(echoed.len());
        assert_eq!(&echoed[..], message.as_bytes());
    }
    upload.send_data(Bytes::new(), true).expect("ended");
    assert!(
        tokio::time::timeout(wait, download.data())
            .await
            .expect("the end in time")
            .is_none()
    );
    let trailers = tokio::time::timeout(wait, download.trailers())
        .await
        .expect("the trailers in time")
        .expect("trailers")
        .expect("some trailers");
    assert_eq!(trailers.get("grpc-status").expect("grpc-status"), "0");
    proxy.stop().await;
}

/// The access record of an HTTP/2 request says so, and carries the gRPC
/// status the node's trailers gave.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_access_log_records_http2_and_the_grpc_status() {
    let node = h2_node().await;
    let (proxy, log) = logged_proxy(node.addr, "access", "").await;
    let url = format!("http://127.0.0.1:{}/trailers", proxy.addr.port());
    curl(
        args(&["--http2-prior-knowledge", "-H", "TE: trailers", &url]),
        b"",
    )
    .await;
    let text = proxy.access_log(&log, 1).await;
    let line = text.lines().last().expect("one record");
    assert!(line.contains("\"version\":\"HTTP/2.0\""), "{line}");
    assert!(line.contains("\"status\":200"), "{line}");
    assert!(line.contains("\"grpc_status\":0"), "{line}");
    proxy.stop().await;
    let _ = std::fs::remove_file(&log);
}

/// A client that closes its connection while its request waits for a stream to an
/// HTTP/2 node (one connection, one stream, both taken) takes the request out of the
/// queue: the node never sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_whose_client_left_the_queue_never_reaches_the_h2_node() {
    let node = h2_node().await;
    let proxy = TestProxy::start(&weir_testkit::config(
        &[node.addr],
        "protocol = \"h2c\"\n\
         [pools.web.connections]\nmax_connections = 1\nqueue_length = 10\nqueue_timeout = \"10s\"\n\
         [pools.web.http2]\nmax_concurrent_streams = 1",
        "",
    ))
    .await;
    let addr = proxy.addr;
    let slow = tokio::spawn(async move { weir_testkit::client::get(addr, "/slow").await });
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let mut leaving = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    leaving
        .write_all(b"GET /left HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    drop(leaving);
    assert_eq!(slow.await.unwrap().unwrap().status, 200);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(node.streams.load(Ordering::Relaxed), 1);
    let metrics = proxy.metrics.encode();
    assert!(
        metrics.contains("weir_queue_abandoned_total{pool=\"web\"} 1\n"),
        "{metrics}"
    );
    proxy.stop().await;
}

/// A client that closes its connection while an HTTP/2 node works on its request takes its
/// stream at the node with it (reset), and the request counts as the client's 499.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_while_the_h2_node_works_takes_its_stream_with_it() {
    let node = h2_node().await;
    let proxy = TestProxy::start(&weir_testkit::config(
        &[node.addr],
        "protocol = \"h2c\"",
        "",
    ))
    .await;
    let mut leaving = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    leaving
        .write_all(b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    drop(leaving);
    // The node's answer would come 600 ms after the request.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let metrics = proxy.metrics.encode();
    let open = format!(
        "weir_upstream_http2_streams_open{{pool=\"web\",node=\"{}\"}} 0\n",
        node.addr
    );
    assert!(metrics.contains(&open), "{metrics}");
    assert!(
        metrics.contains("weir_requests_total{virtual_server=\"web\",class=\"4xx\"} 1\n"),
        "{metrics}"
    );
    proxy.stop().await;
}

/// A 103 Early Hints from an HTTP/2 node reaches an HTTP/1.1 client before the final
/// answer, as one from an HTTP/1.1 node does (RFC 9110 §15.2: a proxy forwards 1xx), with
/// `Via: 2 weir` (RFC 9110 §7.6.3: the protocol it was received in).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_hints_from_an_h2_node_reach_the_client() {
    let node = h2_node().await;
    let proxy = proxy(node.addr, "").await;
    let mut stream = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    stream
        .write_all(b"GET /hints HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut received = Vec::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(5),
        stream.read_to_end(&mut received),
    )
    .await
    .expect("the answer within 5 s")
    .expect("read");
    let text = String::from_utf8_lossy(&received);
    assert!(text.starts_with("HTTP/1.1 103 "), "{text}");
    let hints_end = text.find("\r\n\r\n").expect("the 103's end");
    assert!(
        text[..hints_end]
            .to_ascii_lowercase()
            .contains("link: </style.css>; rel=preload"),
        "{text}"
    );
    // Its `Via` names the protocol weir received it in, as the final answer's does.
    assert!(text[..hints_end].contains("\r\nVia: 2 weir"), "{text}");
    assert!(text[hints_end + 4..].starts_with("HTTP/1.1 200 "), "{text}");
    proxy.stop().await;
}

/// A body an HTTP/2 client streams past `max_body_bytes` towards an HTTP/2 node (its rest
/// moves on its own, full duplex) is answered 413 before the node has answered, as it is on
/// the way to an HTTP/1.1 node, and counted as the client's 4xx rather than a node's 502.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_body_past_the_limit_to_an_h2_node_gets_413() {
    let node = h2_node().await;
    let proxy = proxy(
        node.addr,
        "[virtual_servers.web.http2]\ncleartext = true\n\
         [virtual_servers.web.limits]\nrequest_buffer = \"1KiB\"\nmax_body_bytes = \"4KiB\"",
    )
    .await;
    let mut sender = h2c_client(&proxy).await;
    // No length: weir learns the size as the DATA frames come.
    let request = http::Request::builder()
        .method("POST")
        .uri(format!("http://127.0.0.1:{}/upload", proxy.addr.port()))
        .body(())
        .expect("request");
    let (response, mut upload) = sender.send_request(request, false).expect("sent");
    // Past the request buffer, so the node's stream is opened and the rest streams...
    upload
        .send_data(Bytes::from(vec![b'a'; 2048]), false)
        .expect("sent");
    // ...then past the limit, while the node still waits for the end of the body.
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let _ = upload.send_data(Bytes::from(vec![b'b'; 4096]), false);
    let wait = std::time::Duration::from_secs(5);
    let response = tokio::time::timeout(wait, response)
        .await
        .expect("the response head in time")
        .expect("a response");
    assert_eq!(response.status(), 413);
    // The request is counted once its stream is done with, just after the answer left.
    let counted = "weir_requests_total{virtual_server=\"web\",class=\"4xx\"} 1";
    let mut metrics = proxy.metrics.encode();
    for _ in 0..50 {
        if metrics.contains(counted) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        metrics = proxy.metrics.encode();
    }
    assert!(metrics.contains(counted), "{metrics}");
    assert!(
        metrics.contains("weir_requests_total{virtual_server=\"web\",class=\"5xx\"} 0"),
        "{metrics}"
    );
    assert!(
        metrics.contains("weir_bad_requests_total{virtual_server=\"web\"} 1"),
        "{metrics}"
    );
    proxy.stop().await;
}

/// The same past the node's answer (a gRPC stream answers at once): the answer already
/// began, so the client's stream is reset, and the record blames the client's body, not the
/// node whose stream weir reset for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_body_past_the_limit_after_the_node_answered_is_the_clients_fault() {
    let node = h2_node().await;
    let limits =
        "[virtual_servers.web.limits]\nrequest_buffer = \"1KiB\"\nmax_body_bytes = \"4KiB\"\n";
    let (proxy, log) = logged_proxy(node.addr, "limit", limits).await;
    let mut sender = h2c_client(&proxy).await;
    let request = http::Request::builder()
        .method("POST")
        .uri(format!("http://127.0.0.1:{}/stream", proxy.addr.port()))
        .header("content-type", "application/grpc")
        .body(())
        .expect("request");
    let (response, mut upload) = sender.send_request(request, false).expect("sent");
    upload
        .send_data(Bytes::from(vec![b'a'; 2048]), false)
        .expect("sent");
    let wait = std::time::Duration::from_secs(5);
    let response = tokio::time::timeout(wait, response)
        .await
        .expect("the response head in time")
        .expect("a response");
    assert_eq!(response.status(), 200);
    let mut download = response.into_body();
    let _ = upload.send_data(Bytes::from(vec![b'b'; 4096]), false);
    // The echo of the first piece, then the reset, never the end of a whole answer.
    let ended_well = loop {
        match tokio::time::timeout(wait, download.data())
            .await
            .expect("the stream ends in time")
        {
            Some(Ok(data)) => {
                let _ = download.flow_control().release_capacity(data.len());
            }
            Some(Err(_)) => break false,
            None => break download.trailers().await.is_ok(),
        }
    };
    assert!(
        !ended_well,
        "the answer ended as if the body had been whole"
    );
    let mut line = String::new();
    for _ in 0..50 {
        proxy.live.flush_access_log();
        line = std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .last()
            .unwrap_or_default()
            .to_owned();
        if !line.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(line.contains("\"error\":\"body_too_large\""), "{line}");
    proxy.stop().await;
    let _ = std::fs::remove_file(&log);
}

/// A reload that drains an h2c node closes its idle multiplexed connection (as the HTTP/1.1
/// side closes its idle ones): a draining node keeps no connection nobody uses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drained_h2c_node_keeps_no_idle_connection() {
    let node = h2_node().await;
    let text = |state: &str| {
        format!(
            "[log]\naccess_log = false\nlevel = \"warn\"\n\
             [pools.web]\nprotocol = \"h2c\"\n\
             nodes = [{{ address = \"{}\", state = \"{state}\" }}]\n\
             [virtual_servers.web]\nlisten = [\"127.0.0.1:0\"]\npool = \"web\"\n",
            node.addr
        )
    };
    let proxy = TestProxy::start(&text("active")).await;
    let response = weir_testkit::client::get(proxy.addr, "/").await.unwrap();
    assert_eq!(response.status, 200);
    let gauge = format!(
        "weir_upstream_connections_open{{pool=\"web\",node=\"{}\"}} ",
        node.addr
    );
    let open = |proxy: &TestProxy| -> Option<i64> {
        let text = proxy.metrics.encode();
        let line = text.lines().find(|line| line.starts_with(&gauge))?;
        line.rsplit(' ').next()?.parse().ok()
    };
    assert_eq!(open(&proxy), Some(1));
    proxy
        .live
        .apply(weir_config::parse_str(&text("draining"), "test.toml").unwrap())
        .unwrap();
    assert_eq!(open(&proxy), Some(0));
    proxy.stop().await;
}

/// Only an HTTP/2 client's request is a gRPC call whose body the upload clocks leave alone:
/// over HTTP/1.1 (which no gRPC stack speaks) a gRPC content type is a label anyone may
/// send, and a body trickled below `min_body_rate` is cut off (408) as any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_label_over_http1_does_not_lift_the_upload_clocks() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let node = h2_node().await;
    let proxy = proxy(
        node.addr,
        "[virtual_servers.web.limits]\nmin_body_rate = \"1KiB\"\n\
         [virtual_servers.web.timeouts]\nbody_read = \"300ms\"",
    )
    .await;
    let mut slow = tokio::net::TcpStream::connect(proxy.addr)
        .await
        .expect("connect");
    slow.write_all(
        b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Type: application/grpc\r\n\
          Transfer-Encoding: chunked\r\n\r\n",
    )
    .await
    .expect("write");
    let started = tokio::time::Instant::now();
    // A one-byte chunk every 100 ms: never a pause past body_read, far below 1 KiB/s.
    let mut answer = Vec::new();
    while started.elapsed() < std::time::Duration::from_secs(5) {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        if slow.write_all(b"1\r\nx\r\n").await.is_err() {
            break;
        }
        let mut buf = [0u8; 1024];
        let read = tokio::time::timeout(std::time::Duration::from_millis(1), slow.read(&mut buf));
        if let Ok(Ok(n)) = read.await {
            answer.extend_from_slice(&buf[..n]);
            if n == 0 || answer.windows(4).any(|w| w == b"\r\n\r\n") {
                break;
            }
        }
    }
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "still open: {answer}"
    );
    assert!(answer.starts_with("HTTP/1.1 408 "), "{answer}");
    proxy.stop().await;
}

/// A node that sends an empty DATA frame before each body (legal: a flush) is served on and
/// on: the empty frames are taken out before the codec, whose lifetime bound of 100 such
/// frames closed the connection under its streams (every 101st request failed with a 502,
/// and many more with many clients at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_data_frames_from_a_node_never_fail_a_request() {
    let node = h2_node().await;
    let proxy = proxy(node.addr, "").await;
    for round in 0..260 {
        let response = weir_testkit::client::get(proxy.addr, "/flush-first")
            .await
            .unwrap_or_else(|error| panic!("request {round}: {error}"));
        assert_eq!(response.status, 200, "request {round}");
        assert_eq!(&response.body[..], b"ok", "request {round}");
    }
    assert_eq!(
        node.connections.load(Ordering::Relaxed),
        1,
        "one connection carries them all"
    );
    // Many at once.
    let clients: Vec<_> = (0..60)
        .map(|client| {
            let addr = proxy.addr;
            tokio::spawn(async move {
                for round in 0..8 {
                    let response = weir_testkit::client::get(addr, "/flush-first")
                        .await
                        .unwrap_or_else(|error| panic!("client {client}, {round}: {error}"));
                    assert_eq!(response.status, 200, "client {client}, request {round}");
                }
            })
        })
        .collect();
    for client in clients {
        client.await.unwrap();
    }
    proxy.stop().await;
}

/// A client that sends an empty DATA frame before each request body (legal, if odd) is
/// asked to move to a new connection (a graceful GOAWAY) before the codec's lifetime bound
/// of 100 such frames closes its connection under its streams: every request is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_data_frames_from_a_client_end_its_connection_gracefully() {
    let node = h2_node().await;
    let proxy = proxy(node.addr, "[virtual_servers.web.http2]\ncleartext = true").await;
    let mut sender = h2c_client(&proxy).await;
    let mut connections = 1;
    for round in 0..160 {
        let request = http::Request::builder()
            .method("POST")
            .uri(format!("http://a/echo-{round}"))
            .body(())
            .expect("request");
        let (response, mut body) = match sender.send_request(request.clone(), false) {
            Ok(sent) => sent,
            Err(_) => {
                // The connection said GOAWAY: the next one takes the request.
                sender = h2c_client(&proxy).await;
                connections += 1;
                sender
                    .send_request(request, false)
                    .expect("a new connection takes it")
            }
        };
        body.send_data(Bytes::new(), false).expect("empty frame");
        body.send_data(Bytes::from_static(b"x"), true)
            .expect("body");
        let response = response
            .await
            .unwrap_or_else(|error| panic!("request {round}: {error}"));
        assert_eq!(response.status(), 200, "request {round}");
        // Wait for the GOAWAY (if any) to be read before the next request.
        let mut answer = response.into_body();
        while let Some(chunk) = answer.data().await {
            chunk.expect("answer body");
        }
        sender = match sender.ready().await {
            Ok(ready) => ready,
            Err(_) => {
                connections += 1;
                h2c_client(&proxy).await
            }
        };
    }
    assert!(
        (3..=5).contains(&connections),
        "{connections} connections for 160 requests, retired every 50"
    );
    proxy.stop().await;
}

/// An interim answer an h2c node sends while the request body still streams to it (103
/// Early Hints as soon as the request starts) reaches the client before the final answer,
/// as it does from an HTTP/1.1 node: the codec's response future drops any interim answer
/// it finds queued, so weir takes them first (RFC 9110 §15.2: a proxy forwards 1xx).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_hints_sent_during_a_streamed_upload_reach_the_client() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let node = h2_node().await;
    let proxy = TestProxy::start(&weir_testkit::config(
        &[node.addr],
        "protocol = \"h2c\"",
        "[virtual_servers.web.limits]\nrequest_buffer = \"1KiB\"",
    ))
    .await;
    let mut stream = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    let size = 1 << 20;
    let head = format!(
        "POST /hints HTTP/1.1\r\nHost: t\r\nContent-Length: {size}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let piece = vec![b'u'; 64 * 1024];
    for _ in 0..size / piece.len() {
        stream.write_all(&piece).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let mut reply = Vec::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        stream.read_to_end(&mut reply),
    )
    .await
    .expect("answered in time")
    .unwrap();
    let reply = String::from_utf8_lossy(&reply);
    let hints = reply.find("HTTP/1.1 103 ").expect(&reply);
    let last = reply.find("HTTP/1.1 200 ").expect(&reply);
    assert!(hints < last, "{reply}");
    assert!(reply.contains("</style.css>; rel=preload"), "{reply}");
    assert!(
        reply.contains(&format!("body={}", "u".repeat(size))),
        "the whole body reached the node"
    );
    proxy.stop().await;
}

/// A node whose first connection goes dead after its first answer, socket still open
/// (a node frozen, or a middlebox that dropped the flow): it neither reads nor answers
/// there, PINGs included, while new connections are served. `/hang` is never answered, on
/// a connection that stays alive. Counts connections.
async fn wedging_node() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&connections);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let first = counted.fetch_add(1, Ordering::Relaxed) == 0;
            tokio::spawn(async move {
                let Ok(mut connection) = h2::server::handshake(tcp).await else {
                    return;
                };
                let mut held = Vec::new();
                while let Some(Ok((request, mut respond))) = connection.accept().await {
                    if request.uri().path() == "/hang" {
                        held.push(respond);
                        continue;
                    }
                    if let Ok(mut send) = respond.send_response(ok_head(), false) {
                        let _ = send.send_data(Bytes::from_static(b"ok"), true);
                    }
                    if first {
                        // Long enough to send the answer; then nothing more is read or sent.
                        let _ = tokio::time::timeout(
                            std::time::Duration::from_millis(200),
                            connection.accept(),
                        )
                        .await;
                        std::future::pending::<()>().await;
                    }
                }
            });
        }
    });
    (addr, connections)
}

/// A proxy to `node` (h2c) whose node may take 1 s to answer, and 1 s to answer a PING.
async fn impatient_proxy(node: SocketAddr) -> TestProxy {
    TestProxy::start(&weir_testkit::config(
        &[node],
        "protocol = \"h2c\"\n[pools.web.timeouts]\nresponse = \"1s\"\n\
         [pools.web.http2]\nping_timeout = \"1s\"\n\
         [pools.web.passive_health]\nconsecutive_failures = 0",
        "",
    ))
    .await
}

/// The status of `GET path` through `proxy`, on a connection of its own.
async fn status_of(proxy: &TestProxy, path: &str) -> u16 {
    weir_testkit::client::get(proxy.addr, path)
        .await
        .expect("an answer")
        .status
}

/// One PING to `node` went unanswered, as the metrics count it.
fn assert_one_ping_timeout(proxy: &TestProxy, node: SocketAddr) {
    let metrics = proxy.metrics.encode();
    let counted =
        format!("weir_upstream_http2_ping_timeouts_total{{pool=\"web\",node=\"{node}\"}} 1\n");
    assert!(metrics.contains(&counted), "{metrics}");
}

/// A node connection that went dead while busy is found by the request that times out on
/// it: weir PINGs it, and closes it when no answer comes, so the requests after go on a new
/// connection. (It was kept for ever: every request after timed out on it, since a busy
/// connection is never idle and no PING went without `ping_interval`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_connection_that_went_dead_is_replaced_after_a_timeout_on_it() {
    let (node, connections) = wedging_node().await;
    let proxy = impatient_proxy(node).await;
    let get = |path: &'static str| status_of(&proxy, path);
    assert_eq!(get("/").await, 200);
    assert_eq!(get("/").await, 504, "the dead connection times out");
    // The PING it was sent goes unanswered for `ping_timeout`.
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    assert_eq!(get("/").await, 200, "a new connection carries it");
    assert_eq!(get("/").await, 200);
    assert_eq!(connections.load(Ordering::Relaxed), 2);
    assert_one_ping_timeout(&proxy, node);
    proxy.stop().await;
}

/// A node that is alive but leaves requests unanswered keeps its connection while it
/// answers the PING a timeout sends; a second timeout soon after does not PING again (a
/// gRPC server in Go would count it against weir), it drains the connection instead: the
/// next request opens a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_on_a_live_connection_ping_once_then_drain_it() {
    let (node, connections) = wedging_node().await;
    let proxy = impatient_proxy(node).await;
    let get = |path: &'static str| status_of(&proxy, path);
    // The first connection wedges after its first answer: spend it on a first request
    // whose connection the PING then closes.
    assert_eq!(get("/").await, 200);
    assert_eq!(get("/").await, 504);
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    // The second connection is alive: a hung request PINGs it, and the answer keeps it.
    assert_eq!(get("/hang").await, 504);
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    assert_eq!(get("/").await, 200);
    assert_eq!(
        connections.load(Ordering::Relaxed),
        2,
        "a live connection is kept"
    );
    // Another hung request so soon drains it: the request after opens a third. The drain
    // is the connection's driver's, woken by the timeout that answered the client: a
    // request sent at that very moment may still take the connection (alive, it answers),
    // so the next one waits for the driver a little (a loaded CI was slower than the
    // client).
    assert_eq!(get("/hang").await, 504);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(get("/").await, 200);
    assert_eq!(connections.load(Ordering::Relaxed), 3);
    assert_one_ping_timeout(&proxy, node);
    proxy.stop().await;
}

/// A node that resets its stream after its answer began: the client's stream is reset with
/// the node's reason, so a gRPC client reads what it would from the node (CANCEL as
/// CANCELLED; weir's own INTERNAL_ERROR read as INTERNAL, and 14 UNAVAILABLE, which
/// clients retry, would both misreport a call the node chose to end). REFUSED_STREAM,
/// which says the node processed nothing and invites a retry, is passed as INTERNAL_ERROR:
/// this node did answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_reset_after_its_answer_began_reaches_the_client_with_its_reason() {
    let node = h2_node().await;
    let proxy = proxy(node.addr, "[virtual_servers.web.http2]\ncleartext = true").await;
    let mut sender = h2c_client(&proxy).await;
    for (path, grpc, expected) in [
        ("/reset-cancel", false, h2::Reason::CANCEL),
        ("/reset-cancel", true, h2::Reason::CANCEL),
        ("/reset-refused", true, h2::Reason::INTERNAL_ERROR),
    ] {
        let mut request = http::Request::builder()
            .method("POST")
            .uri(format!("http://127.0.0.1:{}{path}", proxy.addr.port()));
        if grpc {
            request = request.header("content-type", "application/grpc");
        }
        let request = request.body(()).expect("request");
        sender = sender.ready().await.expect("ready");
        let (response, _) = sender.send_request(request, true).expect("sent");
        let wait = std::time::Duration::from_secs(5);
        let response = tokio::time::timeout(wait, response)
            .await
            .expect("in time")
            .expect("a head");
        let mut body = response.into_body();
        let mut got = Vec::new();
        let error = loop {
            match tokio::time::timeout(wait, body.data())
                .await
                .expect("in time")
            {
                Some(Ok(data)) => got.extend_from_slice(&data),
                Some(Err(error)) => break error,
                None => panic!("{path}: the stream ended as if whole"),
            }
        };
        assert_eq!(got, b"part", "{path}");
        assert_eq!(
            error.reason(),
            Some(expected),
            "{path} (gRPC: {grpc}): {error}"
        );
    }
    proxy.stop().await;
}

/// A reload that changes an h2c pool's connection settings keeps its node, its
/// connection and the requests waiting in its queue: they are served, not sent to choose
/// again in a pool whose only node was withdrawn (503), and no second connection opens
/// past the cap while the first still carries streams.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_queued_for_an_h2c_node_are_served_across_a_reload_of_its_settings() {
    let node = h2_node().await;
    let text = |queue: u32| {
        format!(
            "[log]\naccess_log = false\nlevel = \"warn\"\n\
             [pools.web]\nprotocol = \"h2c\"\nnodes = [{{ address = \"{}\" }}]\n\
             [pools.web.connections]\nmax_connections = 1\nqueue_length = {queue}\n\
             queue_timeout = \"10s\"\n\
             [pools.web.http2]\nmax_concurrent_streams = 2\n\
             [virtual_servers.web]\nlisten = [\"127.0.0.1:0\"]\npool = \"web\"\n",
            node.addr
        )
    };
    let proxy = TestProxy::start(&text(50)).await;
    let addr = proxy.addr;
    let requests: Vec<_> = (0..4)
        .map(|_| tokio::spawn(async move { weir_testkit::client::get(addr, "/slow").await }))
        .collect();
    let queued = |proxy: &TestProxy| {
        proxy
            .metrics
            .encode()
            .contains("weir_queue_length{pool=\"web\"} 2\n")
    };
    for _ in 0..100 {
        if queued(&proxy) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert!(queued(&proxy), "{}", proxy.metrics.encode());
    proxy
        .live
        .apply(weir_config::parse_str(&text(60), "test.toml").unwrap())
        .unwrap();
    for request in requests {
        assert_eq!(request.await.unwrap().unwrap().status, 200);
    }
    assert_eq!(node.connections.load(Ordering::Relaxed), 1);
    proxy.stop().await;
}

/// An h2c node whose streams open with a `window` it never widens (it reads no request
/// body; its connection's window is 1 MiB) and that answers nothing: it counts the streams its client (weir) reset.
async fn unread_window_node(window: u32) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    let resets = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&resets);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let counted = Arc::clone(&counted);
            tokio::spawn(async move {
                let Ok(mut connection) = h2::server::Builder::new()
                    .initial_window_size(window)
                    .initial_connection_window_size(1 << 20)
                    .handshake::<_, Bytes>(tcp)
                    .await
                else {
                    return;
                };
                while let Some(Ok((request, mut respond))) = connection.accept().await {
                    let counted = Arc::clone(&counted);
                    tokio::spawn(async move {
                        // Held, never read: its window stays shut.
                        let _body = request;
                        if std::future::poll_fn(|cx| respond.poll_reset(cx))
                            .await
                            .is_ok()
                        {
                            counted.fetch_add(1, Ordering::SeqCst);
                        }
                    });
                }
            });
        }
    });
    (addr, resets)
}

/// An HTTP/2 client that resets its stream while weir waits for the node's window to send
/// its body has the node's stream reset too, at once, not when the window has stayed shut
/// for the pool's write timeout (30 s): the node would hold a stream (of the few it allows)
/// for a request nobody waits for. Both where the body was buffered whole (40 KB, within
/// `request_buffer`, past a 16 KiB window) and where the rest of a larger one streams on
/// its own (the pump, once a 128 KiB window took the buffered 64 KiB).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_reset_while_its_body_waits_for_the_h2_nodes_window_resets_the_nodes_stream() {
    for (window, size) in [(16 * 1024, 40_000_usize), (128 * 1024, 1_000_000)] {
        let (node, resets) = unread_window_node(window).await;
        let proxy = h2c_proxy_for_uploads(node, 30, 30).await;
        let mut sender = h2c_client(&proxy).await;
        let request = http::Request::post(format!("http://{}/upload", proxy.addr))
            .header("content-length", size.to_string())
            .body(())
            .expect("request");
        let (_response, mut sending) = sender.send_request(request, false).expect("sent");
        // The whole of the small body; of the large one, as much as weir's window takes
        // (the rest never goes).
        let sent = size.min(300_000);
        sending.reserve_capacity(sent);
        let _ = sending.send_data(Bytes::from(vec![b'u'; sent]), sent == size);
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        sending.send_reset(h2::Reason::CANCEL);
        let reset = tokio::time::timeout(std::time::Duration::from_secs(3), async {
            while resets.load(Ordering::SeqCst) == 0 {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        })
        .await;
        assert!(
            reset.is_ok(),
            "{size} bytes: the node's stream was not reset"
        );
        proxy.stop().await;
    }
}

/// A node connection that keeps what weir sent, to tell afterwards whether it ended with a
/// GOAWAY: on drop (the node's side of the connection over), it records that in `ends`.
struct Recorded {
    tcp: tokio::net::TcpStream,
    seen: Vec<u8>,
    ends: Arc<std::sync::Mutex<Vec<bool>>>,
}

impl tokio::io::AsyncRead for Recorded {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let read = std::pin::Pin::new(&mut self.tcp).poll_read(cx, buf);
        if let std::task::Poll::Ready(Ok(())) = &read {
            let new = buf.filled()[before..].to_vec();
            self.seen.extend_from_slice(&new);
        }
        read
    }
}

impl tokio::io::AsyncWrite for Recorded {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.tcp).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}

impl Drop for Recorded {
    fn drop(&mut self) {
        // After the client preface, frame by frame: type 0x7 is GOAWAY (RFC 9113 §6.8).
        let mut at = 24;
        let mut goaway = false;
        while at + 9 <= self.seen.len() {
            let length = usize::from(self.seen[at]) << 16
                | usize::from(self.seen[at + 1]) << 8
                | usize::from(self.seen[at + 2]);
            goaway |= self.seen[at + 3] == 0x7;
            at += 9 + length;
        }
        self.ends.lock().expect("ends").push(goaway);
    }
}

/// An h2c node that answers every request 300 ms later and records, for each connection
/// that ends, whether weir sent a GOAWAY first.
async fn goaway_recording_node() -> (SocketAddr, Arc<std::sync::Mutex<Vec<bool>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    let ends = Arc::new(std::sync::Mutex::new(Vec::new()));
    let recorded = Arc::clone(&ends);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let io = Recorded {
                tcp,
                seen: Vec::new(),
                ends: Arc::clone(&recorded),
            };
            tokio::spawn(async move {
                let Ok(mut connection) = h2::server::handshake(io).await else {
                    return;
                };
                while let Some(Ok((_, mut respond))) = connection.accept().await {
                    tokio::spawn(async move {
                        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
                        let _ = respond.send_response(ok_head(), true);
                    });
                }
            });
        }
    });
    (addr, ends)
}

/// Idle connections to an HTTP/2 node that weir closes end with a GOAWAY (RFC 9113 §6.8),
/// not a cut: those past a cap a reload lowered, and those idle past `idle_timeout` (the
/// same path closes those of a node drained or removed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_node_connections_weir_closes_end_with_a_goaway() {
    let (node, ends) = goaway_recording_node().await;
    let pool = "protocol = \"h2c\"\n[pools.web.http2]\nmax_concurrent_streams = 1\n\
                [pools.web.connections]\nidle_timeout = \"2s\"";
    let proxy = TestProxy::start(&weir_testkit::config(&[node], pool, "")).await;
    let addr = proxy.addr;
    // One stream per connection: six requests at once open six connections.
    let requests: Vec<_> = (0..6)
        .map(|_| tokio::spawn(async move { weir_testkit::client::get(addr, "/").await }))
        .collect();
    for request in requests {
        assert_eq!(request.await.unwrap().unwrap().status, 200);
    }
    let lowered = weir_testkit::config(&[node], &format!("{pool}\nmax_connections = 1"), "");
    let candidate = weir_config::parse_str(&lowered, "test.toml").unwrap();
    proxy.live.apply(candidate).unwrap();
    let ended = |count: usize| {
        let ends = Arc::clone(&ends);
        async move {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            while ends.lock().unwrap().len() < count {
                assert!(std::time::Instant::now() < deadline, "{count} closed");
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
    };
    ended(5).await;
    assert_eq!(*ends.lock().unwrap(), vec![true; 5], "past the lowered cap");
    ended(6).await;
    assert_eq!(*ends.lock().unwrap(), vec![true; 6], "idle");
    proxy.stop().await;
}
