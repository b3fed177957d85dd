//! Requests that end early are still requests: a client that leaves in the middle of its
//! body, or in the middle of the answer, gets an access record and is counted, with the
//! status its answer had (499 when it had none); so does a head refused whole, with what
//! its request line named. And the timings such a record gives.

use std::path::PathBuf;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use weir_testkit::{TestOrigin, TestProxy};

struct Setup {
    proxy: TestProxy,
    origin: TestOrigin,
    log: PathBuf,
}

async fn setup(name: &str) -> Setup {
    setup_with(name, "").await
}

async fn setup_with(name: &str, pool_extra: &str) -> Setup {
    let origin = TestOrigin::start("o").await;
    let node = origin.addr;
    setup_on(name, pool_extra, (origin, node)).await
}

/// A proxy whose pool's one node is `node` (`origin` is stopped with it).
async fn setup_on(
    name: &str,
    pool_extra: &str,
    (origin, node): (TestOrigin, std::net::SocketAddr),
) -> Setup {
    let log = std::env::temp_dir().join(format!("weir-cut-{name}-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    // A small response buffer, so a large answer streams while the client reads it.
    let toml = format!(
        "[log]\naccess_log = true\naccess_log_format = \"json\"\naccess_log_file = \"{}\"\n\
         level = \"warn\"\n\
         [pools.p]\nnodes = [{{ address = \"{}\" }}]\n{pool_extra}\n\
         [virtual_servers.web]\nlisten = [\"127.0.0.1:0\"]\npool = \"p\"\n\
         [virtual_servers.web.limits]\nresponse_buffer = \"16KiB\"\n",
        log.display(),
        node
    );
    let proxy = TestProxy::start(&toml).await;
    Setup { proxy, origin, log }
}

impl Setup {
    /// The access records once there are `expected` of them (within 5 s).
    async fn records(&self, expected: usize) -> Vec<String> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            self.proxy.live.flush_access_log();
            let text = std::fs::read_to_string(&self.log).unwrap_or_default();
            if text.lines().count() >= expected || tokio::time::Instant::now() > deadline {
                return text.lines().map(str::to_owned).collect();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn stop(self) {
        self.proxy.stop().await;
        self.origin.stop().await;
        let _ = std::fs::remove_file(&self.log);
    }
}

/// `key`'s number in a JSON access record.
fn field(record: &str, key: &str) -> u64 {
    record
        .split(&format!("\"{key}\":"))
        .nth(1)
        .and_then(|rest| rest.split([',', '}']).next())
        .and_then(|number| number.parse().ok())
        .unwrap_or_else(|| panic!("{key} in {record}"))
}

/// The bytes-sent counter and the latency histogram's count of the `web` virtual server.
fn sent_and_timed(proxy: &TestProxy) -> (u64, u64) {
    let text = proxy.metrics.encode();
    let sent = text
        .lines()
        .find_map(|line| line.strip_prefix("weir_client_bytes_sent_total{virtual_server=\"web\"} "))
        .and_then(|number| number.parse().ok())
        .unwrap_or(0);
    let timed = proxy.metrics.latency().snapshot().iter().sum();
    (sent, timed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_gone_mid_body_is_logged_as_499() {
    let setup = setup("body").await;
    let mut stream = TcpStream::connect(setup.proxy.addr).await.unwrap();
    stream
        .write_all(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\nabc")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop(stream);
    let records = setup.records(1).await;
    assert_eq!(records.len(), 1, "{records:?}");
    for field in [
        r#""status":499"#,
        r#""method":"POST""#,
        r#""error":"client_closed""#,
    ] {
        assert!(records[0].contains(field), "{field}: {records:?}");
    }
    let text = setup.proxy.metrics.encode();
    assert!(
        text.contains("weir_requests_total{virtual_server=\"web\",class=\"4xx\"} 1"),
        "{text}"
    );
    setup.stop().await;
}

/// The received-bytes counter of the `web` virtual server, and the forwarded-requests counter
/// of its one node.
fn received_and_forwarded(proxy: &TestProxy) -> (u64, u64) {
    let text = proxy.metrics.encode();
    let value = |prefix: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(prefix)?.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0)
    };
    (
        value("weir_client_bytes_received_total{virtual_server=\"web\"}"),
        value("weir_node_requests_forwarded_total{"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_request_counts_what_was_read_and_forwarded_of_it() {
    // More body than the request buffer (64 KiB by default): the head goes to the node
    // before the body is all in.
    let setup = setup("counted").await;
    let head = b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\n";
    let mut stream = TcpStream::connect(setup.proxy.addr).await.unwrap();
    stream.write_all(head).await.unwrap();
    stream.write_all(&[b'x'; 80_000]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(stream);
    let records = setup.records(1).await;
    assert!(records[0].contains(r#""status":499"#), "{records:?}");
    let (received, forwarded) = received_and_forwarded(&setup.proxy);
    assert_eq!(received, head.len() as u64 + 80_000, "head and body read");
    assert_eq!(forwarded, 1, "the node had the request");
    // A head refused whole counts the bytes read of it.
    let bad = b"GET /b HTTP/1.1\r\nHost: t\r\nBad Header Line\r\n\r\n";
    let answer = exchange(setup.proxy.addr, bad).await;
    assert!(answer.starts_with(b"HTTP/1.1 400"), "{answer:?}");
    setup.records(2).await;
    let (after, _) = received_and_forwarded(&setup.proxy);
    assert_eq!(after - received, bad.len() as u64);
    setup.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_refused_whole_is_logged_with_what_its_request_line_named() {
    let setup = setup("refused").await;
    for head in [
        &b"GET /two HTTP/2.0\r\nHost: t\r\n\r\n"[..],
        b"\x01\x02 junk\r\n\r\n",
    ] {
        let mut stream = TcpStream::connect(setup.proxy.addr).await.unwrap();
        stream.write_all(head).await.unwrap();
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer).await;
    }
    let records = setup.records(2).await;
    assert_eq!(records.len(), 2, "{records:?}");
    // Each line is written as its connection ends: the second may come first.
    let with_status = |status: &str| {
        records
            .iter()
            .find(|record| record.contains(&format!(r#""status":{status}"#)))
            .unwrap_or_else(|| panic!("{status}: {records:?}"))
    };
    // A version weir does not speak: 505, and the record says which version it was.
    let record = with_status("505");
    for field in [
        r#""method":"GET""#,
        r#""uri":"/two""#,
        r#""version":"HTTP/2.0""#,
    ] {
        assert!(record.contains(field), "{field}: {records:?}");
    }
    // No request line at all: nothing of one is reported, not even a version.
    let record = with_status("400");
    for field in [r#""method":"-""#, r#""version":"-""#] {
        assert!(record.contains(field), "{field}: {records:?}");
    }
    setup.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_cut_short_by_the_client_is_logged_with_its_status() {
    let setup = setup("answer").await;
    let mut stream = TcpStream::connect(setup.proxy.addr).await.unwrap();
    stream
        .write_all(b"GET /bytes/50000000 HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    let mut first = vec![0u8; 64 * 1024];
    stream.read_exact(&mut first).await.unwrap();
    drop(stream);
    let records = setup.records(1).await;
    assert_eq!(records.len(), 1, "{records:?}");
    assert!(records[0].contains(r#""status":200"#), "{records:?}");
    let sent = field(&records[0], "bytes_sent");
    assert!(
        sent > 0 && sent < 50_000_000,
        "bytes_sent {sent} should be what left before the cut"
    );
    // The metrics count what the record says (they left such answers out).
    assert_eq!(sent_and_timed(&setup.proxy), (sent, 1));
    let text = setup.proxy.metrics.encode();
    assert!(
        text.contains("weir_requests_total{virtual_server=\"web\",class=\"2xx\"} 1"),
        "{text}"
    );
    setup.stop().await;
}

/// A request that reached a node and failed there (a 504: no head in time) names the node
/// in its record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_at_a_node_names_it() {
    let setup = setup_with("node", "[pools.p.timeouts]\nresponse = \"300ms\"").await;
    let response = weir_testkit::client::get(setup.proxy.addr, "/delay/2000")
        .await
        .unwrap();
    assert_eq!(response.status, 504);
    let records = setup.records(1).await;
    assert!(records[0].contains(r#""status":504"#), "{records:?}");
    let node = format!(r#""node":"{}""#, setup.origin.addr);
    assert!(records[0].contains(&node), "{records:?}");
    // weir's own answer is counted in the bytes sent and timed, as the record says.
    let sent = field(&records[0], "bytes_sent");
    assert!(sent > 0, "{records:?}");
    assert_eq!(sent_and_timed(&setup.proxy), (sent, 1));
    setup.stop().await;
}

/// A request whose only node refused the connection (retries left, but no other node to
/// take them) names that node in its record and in its log line, as a failure at a node does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_failure_names_the_node() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let origin = TestOrigin::start("o").await;
    let setup = setup_on("connect", "retries = 2", (origin, closed)).await;
    let response = weir_testkit::client::get(setup.proxy.addr, "/")
        .await
        .unwrap();
    assert_eq!(response.status, 502);
    let records = setup.records(1).await;
    assert!(
        records[0].contains(r#""error":"connect_failed""#),
        "{records:?}"
    );
    let node = format!(r#""node":"{closed}""#);
    assert!(records[0].contains(&node), "{records:?}");
    setup.stop().await;
}

/// `upstream_duration_us` runs to the end of the node's answer, not to its head: a node
/// that sends its head at once and its body 300 ms later is logged with at least 300 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upstream_duration_runs_to_the_end_of_the_answer() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let node = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0_u8; 4096];
                let mut head = Vec::new();
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = stream
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n")
                    .await;
                tokio::time::sleep(Duration::from_millis(300)).await;
                let _ = stream.write_all(b"hello").await;
                let _ = stream.read(&mut buf).await;
            });
        }
    });
    let log = std::env::temp_dir().join(format!("weir-cut-slow-body-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let toml = format!(
        "[log]\naccess_log = true\naccess_log_format = \"json\"\naccess_log_file = \"{}\"\n\
         level = \"warn\"\n\
         [pools.p]\nnodes = [{{ address = \"{node}\" }}]\n\
         [virtual_servers.web]\nlisten = [\"127.0.0.1:0\"]\npool = \"p\"\n",
        log.display(),
    );
    let proxy = TestProxy::start(&toml).await;
    let response = weir_testkit::client::get(proxy.addr, "/").await.unwrap();
    assert_eq!((response.status, response.text().as_str()), (200, "hello"));
    let text = proxy.access_log(&log, 1).await;
    let record = text.lines().next().expect("a record");
    let number = |key: &str| -> u64 {
        let at = record.find(&format!("\"{key}\":")).expect(key) + key.len() + 3;
        let digits: String = record[at..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().expect(key)
    };
    let upstream = number("upstream_duration_us");
    assert!(upstream >= 300_000, "{record}");
    assert!(upstream <= number("duration_us"), "{record}");
    proxy.stop().await;
    let _ = std::fs::remove_file(&log);
}

/// A node that answers each request with `head`, then `body` bytes of `x`, and closes:
/// a head that promises more body than it sends.
async fn truncating_node(head: &'static [u8], body: usize) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut byte = [0u8; 1];
                while !request.ends_with(b"\r\n\r\n") {
                    if stream.read(&mut byte).await.unwrap_or(0) == 0 {
                        return;
                    }
                    request.push(byte[0]);
                }
                let mut answer = head.to_vec();
                answer.extend(std::iter::repeat_n(b'x', body));
                let _ = stream.write_all(&answer).await;
            });
        }
    });
    addr
}

/// A proxy in front of `node` alone (no retry), writing JSON records to its own log file,
/// with `vs_tables` under its virtual server; and the log's path.
async fn logged_proxy(
    name: &str,
    node: std::net::SocketAddr,
    vs_tables: &str,
) -> (TestProxy, PathBuf) {
    let log = std::env::temp_dir().join(format!("weir-cut-{name}-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let toml = format!(
        "[log]\naccess_log = true\naccess_log_format = \"json\"\naccess_log_file = \"{}\"\n\
         level = \"error\"\n\
         [pools.p]\nretries = 0\nnodes = [{{ address = \"{node}\" }}]\n\
         [virtual_servers.web]\nlisten = [\"127.0.0.1:0\"]\npool = \"p\"\n{vs_tables}",
        log.display()
    );
    (TestProxy::start(&toml).await, log)
}

/// What `request` on a new connection to `addr` gets until the close (10 s at most).
async fn exchange(addr: std::net::SocketAddr, request: &[u8]) -> Vec<u8> {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut received = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut received)).await;
    received
}

/// An answer the node broke off while the cache filled it: the record keeps what the cache
/// did (`MISS`, as the client's `X-Cache` said) and counts the body bytes that left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_the_node_broke_off_keeps_its_cache_status_and_bytes() {
    // A Content-Length of 100,000 (cacheable), closed after 50,000 body bytes.
    let node = truncating_node(
        b"HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\n\
          Content-Type: application/octet-stream\r\nContent-Length: 100000\r\n\r\n",
        50_000,
    )
    .await;
    let (proxy, log) = logged_proxy(
        "cache",
        node,
        "[virtual_servers.web.cache]\nstatus_header = \"X-Cache\"\n",
    )
    .await;
    let received = exchange(proxy.addr, b"GET /big HTTP/1.1\r\nHost: t\r\n\r\n").await;
    let head_end = received
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head")
        + 4;
    assert!(
        String::from_utf8_lossy(&received[..head_end]).contains("X-Cache: MISS"),
        "{}",
        String::from_utf8_lossy(&received[..head_end])
    );
    assert_eq!(received.len() - head_end, 50_000);
    let record = proxy.access_log(&log, 1).await;
    assert!(record.contains(r#""status":200"#), "{record}");
    assert!(record.contains(r#""cache":"MISS""#), "{record}");
    let sent = format!(r#""bytes_sent":{},"#, received.len());
    assert!(record.contains(&sent), "{sent} in {record}");
    proxy.stop().await;
    let _ = std::fs::remove_file(&log);
}

/// An HTTP/2 answer cut short while the client's flow-control window is closed: the record
/// counts the DATA that went out (the first window), not the head alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_answer_cut_at_a_closed_window_counts_what_went_out() {
    use weir_testkit::h2flood::{PREFACE, frame};
    let origin = TestOrigin::start("o").await;
    let log = std::env::temp_dir().join(format!("weir-cut-h2-window-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let toml = format!(
        "[log]\naccess_log = true\naccess_log_format = \"json\"\naccess_log_file = \"{}\"\n\
         level = \"warn\"\n\
         [pools.p]\nnodes = [{{ address = \"{}\" }}]\n\
         [virtual_servers.web]\nlisten = [\"127.0.0.1:0\"]\npool = \"p\"\n\
         [virtual_servers.web.http2]\ncleartext = true\n",
        log.display(),
        origin.addr
    );
    let proxy = TestProxy::start(&toml).await;
    let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
    // GET http://a/bytes/200000: static method and scheme, literal path and authority.
    let path = b"/bytes/200000";
    let mut block = vec![0x82, 0x86, 0x04, path.len() as u8];
    block.extend_from_slice(path);
    block.extend_from_slice(&[0x01, 0x01, b'a']);
    let mut out = PREFACE.to_vec();
    out.extend(frame(0x4, 0, 0, &[]));
    out.extend(frame(0x1, 0x5, 1, &block));
    stream.write_all(&out).await.unwrap();
    // Read until the first window (65,535 bytes of DATA) is in, acknowledging nothing.
    let mut buffer = Vec::new();
    let mut data = 0usize;
    let read = async {
        let mut chunk = [0u8; 16 * 1024];
        while data < 65_535 {
            let n = stream.read(&mut chunk).await.unwrap();
            assert!(n > 0, "closed early");
            buffer.extend_from_slice(&chunk[..n]);
            while buffer.len() >= 9 {
                let length = usize::from(buffer[0]) << 16
                    | usize::from(buffer[1]) << 8
                    | usize::from(buffer[2]);
                if buffer.len() < 9 + length {
                    break;
                }
                if buffer[3] == 0x0 {
                    data += length;
                }
                buffer.drain(..9 + length);
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .expect("the first window of DATA");
    // The client gives up on the answer.
    stream
        .write_all(&frame(0x3, 0, 1, &8u32.to_be_bytes()))
        .await
        .unwrap();
    let text = proxy.access_log(&log, 1).await;
    let record = text.lines().next().expect("a record");
    assert!(record.contains(r#""status":200"#), "{record}");
    let sent = field(record, "bytes_sent");
    assert!(
        sent >= 65_535,
        "{sent} bytes logged, {data} of DATA went out: {record}"
    );
    drop(stream);
    proxy.stop().await;
    origin.stop().await;
    let _ = std::fs::remove_file(&log);
}

/// A node that breaks off its answer before a brotli encoder gave anything (it holds its
/// input back): nothing of the answer went out, so the client gets a 502 and the record
/// says so, as for a node that failed before its head, not a close with no answer logged
/// as a 200.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_broken_off_before_any_compressed_byte_is_a_502() {
    let node = truncating_node(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 200000\r\n\r\n",
        4_000,
    )
    .await;
    let (proxy, log) = logged_proxy(
        "br",
        node,
        "[virtual_servers.web.compression]\nalgorithms = [\"br\"]\n",
    )
    .await;
    let received = exchange(
        proxy.addr,
        b"GET /text HTTP/1.1\r\nHost: t\r\nAccept-Encoding: br\r\n\r\n",
    )
    .await;
    let text = String::from_utf8_lossy(&received);
    assert!(text.starts_with("HTTP/1.1 502 "), "{text}");
    let record = proxy.access_log(&log, 1).await;
    assert!(record.contains(r#""status":502"#), "{record}");
    proxy.stop().await;
    let _ = std::fs::remove_file(&log);
}

/// A node's `Content-Length` past 2^63 − 1 (more than curl, nginx or a signed 64-bit length
/// can hold) is refused as the malformed answer it is, a 502, rather than passed on to a
/// client that could not read it; 2^63 − 1 itself is a length like any other (a HEAD's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_length_past_what_a_signed_64_bit_length_holds_is_a_502() {
    // Answers to a HEAD, so that no missing body makes the 502.
    let node = truncating_node(
        b"HTTP/1.1 200 OK\r\nContent-Length: 9223372036854775808\r\n\r\n",
        0,
    )
    .await;
    let (proxy, log) = logged_proxy("huge-length", node, "").await;
    let head = b"HEAD / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    let received = exchange(proxy.addr, head).await;
    let text = String::from_utf8_lossy(&received);
    assert!(text.starts_with("HTTP/1.1 502 "), "{text}");
    proxy.stop().await;
    let _ = std::fs::remove_file(&log);

    let node = truncating_node(
        b"HTTP/1.1 200 OK\r\nContent-Length: 9223372036854775807\r\n\r\n",
        0,
    )
    .await;
    let (proxy, log) = logged_proxy("largest-length", node, "").await;
    let received = exchange(proxy.addr, head).await;
    let text = String::from_utf8_lossy(&received);
    assert!(
        text.starts_with("HTTP/1.1 200 ") && text.contains("9223372036854775807"),
        "{text}"
    );
    proxy.stop().await;
    let _ = std::fs::remove_file(&log);
}

/// `duration_us` counts from the request's first byte (`docs/logging.md`), not from the
/// end of its head: a head sent in two parts 400 ms apart is logged with at least
/// 400 ms, on a new connection and on a kept-alive one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_duration_counts_from_the_first_byte_of_the_head() {
    let setup = setup("slow-head").await;
    let mut client = TcpStream::connect(setup.proxy.addr).await.unwrap();
    for request in 0..2 {
        client.write_all(b"GET / HTTP/1.1\r\nHo").await.unwrap();
        tokio::time::sleep(Duration::from_millis(400)).await;
        client.write_all(b"st: a\r\n\r\n").await.unwrap();
        // Read the answer to the end of its body (it has a Content-Length).
        let mut answer = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let text = String::from_utf8_lossy(&answer).to_ascii_lowercase();
            if let Some(end) = text.find("\r\n\r\n") {
                let length: usize = text
                    .split("content-length: ")
                    .nth(1)
                    .and_then(|rest| rest.split("\r\n").next())
                    .and_then(|digits| digits.parse().ok())
                    .expect("a Content-Length");
                if answer.len() >= end + 4 + length {
                    break;
                }
            }
            let n = tokio::time::timeout(Duration::from_secs(5), client.read(&mut buf))
                .await
                .expect("an answer within 5 s")
                .unwrap();
            assert!(n > 0, "closed after {request} answers");
            answer.extend_from_slice(&buf[..n]);
        }
    }
    let records = setup.records(2).await;
    assert_eq!(records.len(), 2, "{records:?}");
    for record in &records {
        assert_eq!(field(record, "status"), 200, "{record}");
        assert!(field(record, "duration_us") >= 400_000, "{record}");
    }
    setup.stop().await;
}
