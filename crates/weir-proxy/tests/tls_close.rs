//! How weir ends TLS connections and which ALPN names it takes, checked with
//! rustls and with OpenSSL's and curl's command-line clients (installed by
//! `scripts/test`): every close weir starts sends a close_notify first, so no
//! client sees a truncation ("unexpected eof"), and a client that offers only
//! `http/1.0` is served.

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use weir_testkit::tls::{self, ClientOptions};
use weir_testkit::{TestOrigin, TestProxy};

/// An HTTPS virtual server with a generated certificate for `localhost`.
async fn https_proxy(origin: &TestOrigin, extra: &str) -> TestProxy {
    TestProxy::start(&weir_testkit::config(
        &[origin.addr],
        "",
        &format!(
            "protocol = \"https\"\n{extra}\n[virtual_servers.web.tls]\n\
             certificates = [{{ self_signed = [\"localhost\"] }}]"
        ),
    ))
    .await
}

/// Reads to the end; `Err` when the peer closed without a close_notify.
async fn read_to_clean_end<S: AsyncRead + Unpin>(stream: &mut S) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut bytes))
        .await
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
    Ok(bytes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closes_after_connection_close_http10_and_idle_send_close_notify() {
    let origin = TestOrigin::start("a").await;
    let proxy = https_proxy(&origin, "[virtual_servers.web.timeouts]\nidle = \"300ms\"").await;
    let config = tls::client_config(&ClientOptions::default());
    for request in [
        &b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"[..],
        b"GET / HTTP/1.0\r\nHost: localhost\r\n\r\n",
        // A malformed request: weir answers 400 and closes.
        b"GET /a b HTTP/1.1\r\nHost: localhost\r\n\r\n",
    ] {
        let mut stream = tls::connect(proxy.addr, "localhost", &config)
            .await
            .unwrap();
        stream.write_all(request).await.unwrap();
        let reply = read_to_clean_end(&mut stream)
            .await
            .unwrap_or_else(|error| panic!("{:?}: {error}", String::from_utf8_lossy(request)));
        assert!(
            reply.starts_with(b"HTTP/1."),
            "{}",
            String::from_utf8_lossy(&reply)
        );
    }
    // Kept alive, then closed by the idle timeout.
    let mut stream = tls::connect(proxy.addr, "localhost", &config)
        .await
        .unwrap();
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n")
        .await
        .unwrap();
    let reply = read_to_clean_end(&mut stream)
        .await
        .expect("idle close with close_notify");
    assert!(reply.starts_with(b"HTTP/1.1 200"));
    proxy.stop().await;
    origin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_offering_only_http10_is_served() {
    let origin = TestOrigin::start("a").await;
    let proxy = https_proxy(&origin, "").await;
    let mut config = (*tls::client_config(&ClientOptions::default())).clone();
    config.alpn_protocols = vec![b"http/1.0".to_vec()];
    let mut stream = tls::connect(proxy.addr, "localhost", &Arc::new(config))
        .await
        .expect("http/1.0 is accepted by ALPN");
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"http/1.0"[..]));
    stream
        .write_all(b"GET / HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let reply = read_to_clean_end(&mut stream).await.unwrap();
    assert!(
        reply.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&reply)
    );
    proxy.stop().await;
    origin.stop().await;
}

/// Runs a command line client (off the runtime's threads, which serve the
/// proxy meanwhile); panics with its output when it fails.
async fn run(program: &'static str, args: &[&str], input: &'static [u8]) -> (String, String) {
    let args: Vec<String> = args.iter().map(|arg| (*arg).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        let mut child = Command::new(program)
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|error| panic!("{program} (installed by scripts/test): {error}"));
        let mut stdin = child.stdin.take().expect("piped");
        stdin.write_all(input).expect("input written");
        // Kept open: s_client must see the server's close, not the end of its input.
        let output = child.wait_with_output().expect("client ran");
        drop(stdin);
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(
            output.status.success(),
            "{program} {args:?}: {}\n{stdout}\n{stderr}",
            output.status
        );
        (stdout, stderr)
    })
    .await
    .expect("client task")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openssl_s_client_sees_a_clean_close() {
    let origin = TestOrigin::start("a").await;
    let proxy = https_proxy(&origin, "").await;
    let address = proxy.addr.to_string();
    for (alpn, request) in [
        (
            "http/1.1",
            "GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
        ),
        ("http/1.0", "GET / HTTP/1.0\r\nHost: localhost\r\n\r\n"),
    ] {
        let (stdout, stderr) = run(
            "openssl",
            &[
                "s_client",
                "-connect",
                &address,
                "-servername",
                "localhost",
                "-alpn",
                alpn,
                "-ign_eof",
            ],
            request.as_bytes(),
        )
        .await;
        assert!(
            stdout.contains(&format!("ALPN protocol: {alpn}")),
            "{stdout}"
        );
        assert!(stdout.contains(" 200 OK"), "{stdout}");
        assert!(
            !stderr.contains("unexpected eof") && !stdout.contains("unexpected eof"),
            "{stderr}"
        );
    }
    proxy.stop().await;
    origin.stop().await;
}

/// A TLS 1.2 client that asks to renegotiate (OpenSSL's `R`) is answered at once with the
/// no_renegotiation alert (RFC 5246 §7.2.2), not when weir next writes, which on a
/// connection waiting for its client is never: the client would hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renegotiation_is_refused_at_once() {
    use std::io::BufRead as _;
    let origin = TestOrigin::start("a").await;
    let proxy = https_proxy(&origin, "").await;
    let address = proxy.addr.to_string();
    let waited = tokio::task::spawn_blocking(move || {
        let mut child = Command::new("stdbuf")
            .args(["-oL", "openssl", "s_client", "-connect", &address])
            .args(["-servername", "localhost", "-tls1_2", "-msg"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("openssl (installed by scripts/test)");
        let mut stdin = child.stdin.take().expect("piped");
        let (lines, seen) = std::sync::mpsc::channel();
        let stdout = child.stdout.take().expect("piped");
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if lines.send((std::time::Instant::now(), line)).is_err() {
                    return;
                }
            }
        });
        let next = |what: &dyn Fn(&str) -> bool| loop {
            match seen.recv_timeout(Duration::from_secs(5)) {
                Ok((at, line)) if what(&line) => return Some(at),
                Ok(_) => {}
                Err(_) => return None,
            }
        };
        // The session's summary ends the handshake's output.
        next(&|line| line.contains("Verify return code")).expect("the handshake");
        stdin.write_all(b"R\n").expect("asked to renegotiate");
        let asked = next(&|line| line.starts_with(">>>") && line.ends_with("ClientHello"))
            .expect("a second ClientHello");
        let answered = next(&|line| line.starts_with("<<<"));
        let _ = child.kill();
        let _ = child.wait();
        answered.map(|at| at.saturating_duration_since(asked))
    })
    .await
    .unwrap();
    let waited = waited.expect("an answer to the renegotiation within 5 s");
    assert!(waited < Duration::from_secs(2), "answered after {waited:?}");
    proxy.stop().await;
    origin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_speaks_http10_and_http11_over_tls() {
    let origin = TestOrigin::start("a").await;
    let proxy = https_proxy(&origin, "").await;
    let url = format!("https://localhost:{}/", proxy.addr.port());
    let resolve = format!("localhost:{}:127.0.0.1", proxy.addr.port());
    for version in ["--http1.0", "--http1.1"] {
        let (stdout, stderr) = run(
            "curl",
            &[
                "-sS",
                "-k",
                "-v",
                version,
                "--resolve",
                &resolve,
                "-o",
                "/dev/null",
                "-w",
                "%{http_code} %{http_version}",
                &url,
            ],
            b"",
        )
        .await;
        let expected = if version == "--http1.0" {
            "200 1"
        } else {
            "200 1.1"
        };
        assert!(
            stdout.starts_with(expected),
            "{version}: {stdout}\n{stderr}"
        );
    }
    proxy.stop().await;
    origin.stop().await;
}

/// The client socket's `segs_in` and whether all it sent is acknowledged, by
/// `ss` (iproute2, installed by scripts/test), found by its local port.
fn segments_in(local_port: u16) -> (u64, bool) {
    let output = Command::new("ss")
        .args(["-tinH", "state", "all", &format!("sport = :{local_port}")])
        .output()
        .expect("ss (iproute2, installed by scripts/test)");
    let text = String::from_utf8_lossy(&output.stdout);
    let segs = text
        .split_whitespace()
        .find_map(|field| field.strip_prefix("segs_in:"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no segs_in in ss's output: {text}"));
    (segs, !text.contains("unacked:"))
}

/// Sends `request` (whose answer the origin delays by 300 ms), waits until
/// weir acknowledged it, then reads the answer to its clean end: returns the
/// answer and the segments it came in.
async fn segments_of_answer<S>(stream: &mut S, local_port: u16, request: &[u8]) -> (Vec<u8>, u64)
where
    S: AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    stream.write_all(request).await.unwrap();
    stream.flush().await.unwrap();
    let before = loop {
        let (segs, acked) = segments_in(local_port);
        if acked {
            break segs;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let reply = read_to_clean_end(stream).await.expect("a clean end");
    (reply, segments_in(local_port).0 - before)
}

/// A closing answer weir has whole (a node's after `Connection: close` or to
/// HTTP/1.0, and weir's own error answers, here a 504 to a request that asked
/// for the close: one it may keep stays open) leaves in one segment
/// with its close_notify and the FIN, not in two or three: each segment costs
/// the proxy a trip through the TCP stack.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closing_answer_its_close_notify_and_the_fin_share_one_segment() {
    let origin = TestOrigin::start("a").await;
    // (request, how the answer ends): the node answers after 300 ms; the last
    // request outlasts the pool's response timeout, and weir answers 504.
    let requests: [(&[u8], &[u8]); 3] = [
        (
            b"GET /delay/300 HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
            b"delayed 300 ms\n",
        ),
        (
            b"GET /delay/300 HTTP/1.0\r\nHost: localhost\r\n\r\n",
            b"delayed 300 ms\n",
        ),
        (
            b"GET /delay/1500 HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
            b"gateway timeout\n",
        ),
    ];
    let pool = "retries = 0\n[pools.web.timeouts]\nresponse = \"1s\"\n";
    // No session tickets: weir sends them when it reads the client's Finished, which it
    // reads with the request (`crates/weir-tls/src/hold.rs`), so they could land after the
    // count below begins and be taken for part of the answer.
    let https = TestProxy::start(&weir_testkit::config(
        &[origin.addr],
        pool,
        "protocol = \"https\"\n[virtual_servers.web.tls]\n\
         certificates = [{ self_signed = [\"localhost\"] }]\n\
         session_tickets = false\nsession_cache_size = 0",
    ))
    .await;
    let plain = TestProxy::start(&weir_testkit::config(&[origin.addr], pool, "")).await;
    let config = tls::client_config(&ClientOptions::default());
    for (request, ending) in requests {
        let shown = String::from_utf8_lossy(request);
        let mut stream = tls::connect(https.addr, "localhost", &config)
            .await
            .unwrap();
        let port = stream.get_ref().0.local_addr().unwrap().port();
        let (reply, segments) = segments_of_answer(&mut stream, port, request).await;
        let text = String::from_utf8_lossy(&reply);
        assert!(reply.ends_with(ending), "TLS: {shown}: {text}");
        assert_eq!(segments, 1, "TLS: {shown}");
        let mut stream = tokio::net::TcpStream::connect(plain.addr).await.unwrap();
        let port = stream.local_addr().unwrap().port();
        let (reply, segments) = segments_of_answer(&mut stream, port, request).await;
        let text = String::from_utf8_lossy(&reply);
        assert!(reply.ends_with(ending), "plain: {shown}: {text}");
        assert_eq!(segments, 1, "plain: {shown}");
    }
    https.stop().await;
    plain.stop().await;
    origin.stop().await;
}
