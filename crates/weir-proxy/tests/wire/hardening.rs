//! The findings of the hardening review, one test each: CONNECT, tunnels that
//! must not take the slots requests need, slow uploads, nodes that stop
//! reading or answer early, and late bodies after bodiless responses.
//! (Single-exchange cases — TRACE, h2c, underscores, trailers, 417, 1xx
//! floods — are rows of the attack corpus in `tests/corpus/main.rs`.)

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use weir_testkit::client::{self, Connection};
use weir_testkit::{TestOrigin, TestProxy, config};

use crate::support::{PATIENCE, parse_response, read_head, read_until_close, send_until_close};

/// A node that answers the first request of its first connection with
/// `first`, then (if `echo`) echoes bytes; every other request gets `200 real`.
async fn scripted_node(
    first: &'static [u8],
    echo: bool,
) -> (SocketAddr, tokio::sync::mpsc::UnboundedReceiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (heads, received) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut first = Some(first);
        while let Ok((mut stream, _)) = listener.accept().await {
            let heads = heads.clone();
            // Echoing nodes (101, CONNECT) answer every connection the same way.
            let scripted = if echo { first } else { first.take() };
            tokio::spawn(async move {
                if let Some(first) = scripted {
                    let head = read_head(&mut stream).await;
                    // Echoing nodes switch only for CONNECT and Upgrade requests.
                    let switch = head.starts_with("CONNECT ") || head.contains("Upgrade:");
                    let _ = heads.send(head);
                    let reply: &[u8] = match (echo, switch) {
                        (true, false) => b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nreal",
                        (true, true) => first,
                        // Slow enough that the next request is queued for this connection.
                        (false, _) => {
                            tokio::time::sleep(Duration::from_millis(200)).await;
                            first
                        }
                    };
                    if stream.write_all(reply).await.is_err() {
                        return;
                    }
                    if echo && switch {
                        let (mut reader, mut writer) = stream.split();
                        let _ = tokio::io::copy(&mut reader, &mut writer).await;
                        return;
                    }
                }
                loop {
                    let mut byte = [0u8; 1];
                    let mut head = Vec::new();
                    while !head.ends_with(b"\r\n\r\n") {
                        if stream.read(&mut byte).await.unwrap_or(0) == 0 {
                            return;
                        }
                        head.push(byte[0]);
                    }
                    let _ = heads.send(String::from_utf8_lossy(&head).into_owned());
                    let reply = b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nreal";
                    if stream.write_all(reply).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, received)
}

/// Finding 1: CONNECT is refused with 405 unless the virtual server allows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_is_refused_by_default() {
    let (node, mut heads) =
        scripted_node(b"HTTP/1.1 200 Connection established\r\n\r\n", true).await;
    let proxy = TestProxy::start(&config(&[node], "", "")).await;
    let reply = send_until_close(
        proxy.addr,
        b"CONNECT probe.test:443 HTTP/1.1\r\nHost: probe.test:443\r\n\r\n",
    )
    .await;
    let response = parse_response(&reply.bytes);
    assert_eq!(response.status, 405, "{}", reply.text());
    assert!(response.header("allow").is_some());
    assert!(heads.try_recv().is_err(), "the node saw nothing");
    proxy.stop().await;
}

/// Finding 1: an allowed CONNECT is tunnelled, and its connection never goes
/// back to the pool: the next request gets a connection of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_connect_is_tunnelled_and_never_pooled() {
    let (node, mut heads) =
        scripted_node(b"HTTP/1.1 200 Connection established\r\n\r\n", true).await;
    let proxy = TestProxy::start(&config(
        &[node],
        "[pools.web.connections]\nmax_connections = 1",
        "[virtual_servers.web.http]\nconnect = true",
    ))
    .await;
    let mut tunnel = TcpStream::connect(proxy.addr).await.unwrap();
    tunnel
        .write_all(b"CONNECT probe.test:443 HTTP/1.1\r\nHost: probe.test:443\r\n\r\n")
        .await
        .unwrap();
    let head = read_head(&mut tunnel).await;
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    assert!(
        !head.to_ascii_lowercase().contains("content-length"),
        "{head}"
    );
    tunnel.write_all(b"opaque bytes").await.unwrap();
    let mut echoed = [0u8; 12];
    tokio::time::timeout(PATIENCE, tunnel.read_exact(&mut echoed))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&echoed, b"opaque bytes");
    let forwarded = heads.recv().await.unwrap();
    assert!(
        forwarded.starts_with("CONNECT probe.test:443 HTTP/1.1\r\n"),
        "{forwarded}"
    );

    // The tunnel left the request slots: with max_connections = 1 a GET is
    // still served, on a new connection the node reads as a fresh first request.
    let (node_answer, _) = tokio::join!(client::get(proxy.addr, "/after"), async {});
    let response = node_answer.unwrap();
    assert_eq!(response.status, 200, "{}", response.text());
    let second = heads.recv().await.unwrap();
    assert!(second.starts_with("GET /after HTTP/1.1\r\n"), "{second}");
    drop(tunnel);
    proxy.stop().await;
}

/// Finding 3: idle WebSocket tunnels neither hold request slots nor live
/// forever: with one slot, two open tunnels leave GETs served, and an idle
/// tunnel is closed after `tunnel_idle`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_tunnels_do_not_take_request_slots_and_time_out() {
    let (node, _heads) = scripted_node(
        b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
        true,
    )
    .await;
    let origin = TestOrigin::start("a").await;
    let text = format!(
        "[log]\naccess_log = false\nlevel = \"warn\"\n\
         [pools.ws]\nnodes = [{{ address = \"{node}\" }}]\n\
         [pools.ws.connections]\nmax_connections = 1\nmax_tunnels = 2\nqueue_timeout = \"300ms\"\n\
         [pools.web]\nnodes = [{{ address = \"{}\" }}]\n\
         [virtual_servers.web]\nlisten = [\"127.0.0.1:0\"]\npool = \"ws\"\n\
         [[virtual_servers.web.routes]]\npath_prefix = \"/plain\"\npool = \"web\"\n\
         [virtual_servers.web.timeouts]\ntunnel_idle = \"500ms\"\n",
        origin.addr
    );
    let proxy = TestProxy::start(&text).await;
    let upgrade =
        b"GET /chat HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n";
    let mut tunnels = Vec::new();
    for _ in 0..2 {
        let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
        stream.write_all(upgrade).await.unwrap();
        assert!(read_head(&mut stream).await.starts_with("HTTP/1.1 101 "));
        tunnels.push(stream);
    }
    // The node's one request slot is free for requests.
    assert_eq!(proxy.pools[0].connections[0].open(), 0);
    assert_eq!(proxy.pools[0].connections[0].tunnels(), 2);
    // A third tunnel is past max_tunnels: 503, not a wait for a slot.
    let reply = send_until_close(proxy.addr, upgrade).await;
    assert_eq!(parse_response(&reply.bytes).status, 503, "{}", reply.text());
    // Idle tunnels close after tunnel_idle.
    let started = tokio::time::Instant::now();
    let reply = read_until_close(&mut tunnels[0]).await;
    assert!(reply.closed, "an idle tunnel is closed");
    assert!(started.elapsed() < Duration::from_secs(3));
    proxy.stop().await;
    origin.stop().await;
}

/// Finding 3: a body trickled below `min_body_rate` is refused (408) and its
/// connection to the node freed, however steady its bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickled_body_is_cut_off_by_the_minimum_rate() {
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&config(
        &[origin.addr],
        "[pools.web.connections]\nmax_connections = 1",
        "[virtual_servers.web.limits]\nrequest_buffer = \"1KiB\"\nmin_body_rate = \"1KiB\"\n\
         [virtual_servers.web.timeouts]\nbody_read = \"300ms\"",
    ))
    .await;
    let mut slow = TcpStream::connect(proxy.addr).await.unwrap();
    slow.write_all(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\n")
        .await
        .unwrap();
    slow.write_all(&[b'x'; 2048]).await.unwrap();
    let started = tokio::time::Instant::now();
    // One byte every 50 ms: never a pause past body_read, but far below 1 KiB/s.
    let outcome = loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if slow.write_all(b"x").await.is_err() || started.elapsed() > Duration::from_secs(5) {
            break read_until_close(&mut slow).await;
        }
        let mut probe = [0u8; 512];
        if let Ok(Ok(n)) =
            tokio::time::timeout(Duration::from_millis(1), slow.read(&mut probe)).await
        {
            let mut bytes = probe[..n].to_vec();
            let rest = read_until_close(&mut slow).await;
            bytes.extend(rest.bytes);
            break crate::support::Reply {
                bytes,
                closed: true,
                reset: rest.reset,
            };
        }
    };
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "cut off in time"
    );
    assert_eq!(
        parse_response(&outcome.bytes).status,
        408,
        "{}",
        outcome.text()
    );
    // The node's only slot is free again.
    let response = client::get(proxy.addr, "/").await.unwrap();
    assert_eq!(response.status, 200);
    proxy.stop().await;
    origin.stop().await;
}

/// Finding 4: a node that stops reading an upload is given up on after the
/// pool's `timeouts.write` (504), instead of holding the client and the slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_stops_reading_is_given_up_on() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let node = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream); // never read, never answer
        }
    });
    let proxy = TestProxy::start(&config(
        &[node],
        "[pools.web.timeouts]\nwrite = \"300ms\"\nresponse = \"30s\"",
        "[virtual_servers.web.limits]\nrequest_buffer = \"1KiB\"\nmin_body_rate = 0\n\
         max_body_bytes = \"1GiB\"",
    ))
    .await;
    let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
    let size = 64 * 1024 * 1024;
    stream
        .write_all(
            format!("PUT /big HTTP/1.1\r\nHost: t\r\nContent-Length: {size}\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    let (mut reader, mut writer) = stream.into_split();
    let upload = tokio::spawn(async move {
        let chunk = vec![b'x'; 64 * 1024];
        for _ in 0..size / chunk.len() {
            if writer.write_all(&chunk).await.is_err() {
                return;
            }
        }
    });
    let reply = crate::support::read_half_until_close(&mut reader).await;
    upload.abort();
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(parse_response(&reply.bytes).status, 504, "{}", reply.text());
    proxy.stop().await;
}

/// Finding 4: an answer the node sends before the upload is done (413) is
/// read and relayed, and the client connection closes after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_early_answer_during_an_upload_is_relayed() {
    let (node, mut heads) = scripted_node(
        b"HTTP/1.1 413 Content Too Large\r\nContent-Length: 9\r\nConnection: close\r\n\r\ntoo large",
        false,
    )
    .await;
    let proxy = TestProxy::start(&config(
        &[node],
        "",
        "[virtual_servers.web.limits]\nrequest_buffer = \"1KiB\"",
    ))
    .await;
    let mut connection = Connection::open(proxy.addr).await.unwrap();
    connection
        .send(b"POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 1000000\r\n\r\n")
        .await
        .unwrap();
    connection.send(&[b'x'; 4096]).await.unwrap();
    // The client keeps the rest of its body: the answer must come anyway.
    let response = connection.response().await.unwrap();
    assert_eq!(
        (response.status, response.text().as_str()),
        (413, "too large")
    );
    assert_eq!(response.header("connection"), Some("close"));
    assert!(
        heads
            .recv()
            .await
            .unwrap()
            .starts_with("POST /upload HTTP/1.1\r\n")
    );
    proxy.stop().await;
}

/// Reads from `stream` into `buf` until it holds a whole head; where the head ends.
async fn head_in<R: AsyncReadExt + Unpin>(stream: &mut R, buf: &mut Vec<u8>) -> Option<usize> {
    let mut chunk = [0_u8; 16 * 1024];
    loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            return Some(at + 4);
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// The `Content-Length` of a head, 0 without one.
fn length_of(head: &[u8]) -> usize {
    String::from_utf8_lossy(head)
        .to_ascii_lowercase()
        .lines()
        .find_map(|line| {
            line.strip_prefix("content-length:")
                .map(str::trim)
                .map(str::to_owned)
        })
        .map_or(0, |value| value.parse().unwrap())
}

/// A node that, for each request, answers `answer` as soon as it has the head, then reads
/// the `Content-Length` body to its end (or, with `close`, closes the connection that long
/// after the answer without reading the body) and reports how many body bytes it got.
async fn answering_node(
    answer: &'static [u8],
    close: Option<Duration>,
) -> (SocketAddr, tokio::sync::mpsc::UnboundedReceiver<usize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (got, received) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let got = got.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                while let Some(end) = head_in(&mut stream, &mut buf).await {
                    let length = length_of(&buf[..end]);
                    buf.drain(..end);
                    if stream.write_all(answer).await.is_err() {
                        return;
                    }
                    if let Some(after) = close {
                        tokio::time::sleep(after).await;
                        // Unread bytes make the close a reset.
                        drop(stream);
                        return;
                    }
                    let mut chunk = vec![0_u8; 64 * 1024];
                    while buf.len() < length {
                        match stream.read(&mut chunk).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let have = buf.len().min(length);
                    buf.drain(..have);
                    let _ = got.send(have);
                    if have < length {
                        return;
                    }
                }
            });
        }
    });
    (addr, received)
}

/// Sends a `size`-byte POST on `stream` in 64 KiB writes while reading its answer, which
/// is returned as status and body (read up to its `Content-Length`).
async fn upload(stream: &mut TcpStream, size: usize) -> (u16, String) {
    let head = format!("POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: {size}\r\n\r\n");
    let (mut reader, mut writer) = stream.split();
    let sending = async {
        writer.write_all(head.as_bytes()).await.unwrap();
        let chunk = vec![b'x'; 64 * 1024];
        let mut left = size;
        while left > 0 {
            let n = left.min(chunk.len());
            if writer.write_all(&chunk[..n]).await.is_err() {
                return;
            }
            left -= n;
        }
    };
    let reading = async {
        let mut buf = Vec::new();
        let end = head_in(&mut reader, &mut buf).await.expect("an answer");
        let length = length_of(&buf[..end]);
        let mut chunk = [0_u8; 4096];
        while buf.len() < end + length {
            match reader.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let status = parse_response(&buf[..end]).status;
        (status, String::from_utf8_lossy(&buf[end..]).into_owned())
    };
    let both = async { tokio::join!(sending, reading).1 };
    tokio::time::timeout(PATIENCE, both)
        .await
        .expect("the upload and its answer within the test's patience")
}

/// RFC 9112 §9.5: only a node that answers and closes (or answers an error) is spared the
/// rest of the body. One that answers 200 at once and goes on reading gets all of it, the
/// client gets the 200, and both connections are kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_early_success_still_gets_the_whole_body() {
    let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nearly";
    let (node, mut got) = answering_node(answer, None).await;
    let proxy = TestProxy::start(&config(
        &[node],
        "",
        "[virtual_servers.web.limits]\nrequest_buffer = \"1KiB\"",
    ))
    .await;
    let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
    let size = 2_000_000;
    assert_eq!(upload(&mut stream, size).await, (200, "early".to_owned()));
    assert_eq!(got.recv().await, Some(size), "the node got the whole body");
    // The client's connection carries the next request, and the node's is reused.
    assert_eq!(upload(&mut stream, 10).await, (200, "early".to_owned()));
    assert_eq!(got.recv().await, Some(10));
    let node_metrics = proxy.metrics.node("web", &node.to_string());
    assert_eq!(node_metrics.connections_created.get(), 1);
    proxy.stop().await;
}

/// A node that answers 200 at once and then reads nothing more: its answer reaches the
/// client once the body's writes have waited a couple of seconds, not after the pool's
/// write timeout (30 s here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_early_success_from_a_node_that_stops_reading_is_relayed() {
    let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nearly";
    let (node, _got) = answering_node(answer, Some(Duration::from_secs(60))).await;
    let proxy = TestProxy::start(&config(
        &[node],
        "[pools.web.timeouts]\nwrite = \"30s\"",
        "[virtual_servers.web.limits]\nrequest_buffer = \"1KiB\"\nmax_body_bytes = \"256MiB\"\n\
         [runtime]\ndrain_timeout = \"500ms\"",
    ))
    .await;
    let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
    // More than loopback's socket buffers on both hops can take in.
    let started = tokio::time::Instant::now();
    assert_eq!(
        upload(&mut stream, 64 * 1024 * 1024).await,
        (200, "early".to_owned())
    );
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_secs(5),
        "the answer waited {waited:?}"
    );
    drop(stream);
    proxy.stop().await;
}

/// A node that echoes an upload as it reads it, and soon has sent more than weir holds:
/// the answer goes to the client at once and ends soon after (the rest of the body stays
/// with the client, and the node is told so), where holding it for the body's end stalled
/// both ways until the pool's write timeout, and relaying it without telling the node until
/// the response timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_echo_past_the_response_buffer_is_relayed_at_once() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let node = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let Some(end) = head_in(&mut stream, &mut buf).await else {
                    return;
                };
                buf.drain(..end);
                let head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
                if stream.write_all(head).await.is_err() {
                    return;
                }
                let mut chunk = vec![0_u8; 64 * 1024];
                loop {
                    let n = if buf.is_empty() {
                        match stream.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        }
                    } else {
                        let n = buf.len().min(chunk.len());
                        chunk[..n].copy_from_slice(&buf[..n]);
                        buf.drain(..n);
                        n
                    };
                    let mut framed = format!("{n:x}\r\n").into_bytes();
                    framed.extend_from_slice(&chunk[..n]);
                    framed.extend_from_slice(b"\r\n");
                    if stream.write_all(&framed).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    let proxy = TestProxy::start(&config(
        &[node],
        "[pools.web.timeouts]\nwrite = \"20s\"",
        "[virtual_servers.web.limits]\nrequest_buffer = \"1KiB\"\nresponse_buffer = \"64KiB\"\n\
         [runtime]\ndrain_timeout = \"500ms\"",
    ))
    .await;
    let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
    let size = 8 * 1024 * 1024;
    let head = format!("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: {size}\r\n\r\n");
    let (mut reader, mut writer) = stream.split();
    let started = tokio::time::Instant::now();
    let sending = async {
        writer.write_all(head.as_bytes()).await.unwrap();
        let chunk = vec![b'e'; 64 * 1024];
        for _ in 0..size / chunk.len() {
            if writer.write_all(&chunk).await.is_err() {
                return;
            }
        }
    };
    let answered = async {
        let mut buf = Vec::new();
        head_in(&mut reader, &mut buf).await.expect("an answer");
        let head = started.elapsed();
        // The node is told the body ends there, so its answer ends too.
        let mut chunk = vec![0_u8; 64 * 1024];
        while let Ok(n) = reader.read(&mut chunk).await {
            if n == 0 {
                break;
            }
        }
        (head, started.elapsed())
    };
    let waited = tokio::select! {
        waited = answered => waited,
        () = async { sending.await; std::future::pending::<()>().await } => unreachable!(),
        () = tokio::time::sleep(PATIENCE) => panic!("no answer within the test's patience"),
    };
    let (head, end) = waited;
    assert!(
        head < Duration::from_secs(3),
        "the answer's head waited {head:?}"
    );
    assert!(
        end < Duration::from_secs(3),
        "the answer ended after {end:?}"
    );
    drop(stream);
    proxy.stop().await;
}

/// A node that answers early with a large body while the client is still sending a larger
/// upload: weir relays the answer, then reads away the rest of the upload before it closes,
/// so the client, reading only once it has sent everything, gets the whole answer rather than
/// a reset that takes its unread end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_early_answer_survives_the_rest_of_a_large_upload() {
    const ANSWER: usize = 1_000_000;
    let mut answer = format!("HTTP/1.1 200 OK\r\nContent-Length: {ANSWER}\r\n\r\n").into_bytes();
    answer.resize(answer.len() + ANSWER, b'a');
    let (node, _got) = answering_node(Box::leak(answer.into_boxed_slice()), None).await;
    let proxy = TestProxy::start(&config(
        &[node],
        "",
        "[virtual_servers.web.limits]\nrequest_buffer = \"1KiB\"",
    ))
    .await;
    let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
    let size = 3_000_000;
    let head = format!("POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: {size}\r\n\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    let chunk = vec![b'u'; 64 * 1024];
    let mut left = size;
    while left > 0 {
        let n = left.min(chunk.len());
        let sent = tokio::time::timeout(PATIENCE, stream.write_all(&chunk[..n])).await;
        if !matches!(sent, Ok(Ok(()))) {
            break;
        }
        left -= n;
    }
    let reply = read_until_close(&mut stream).await;
    assert!(reply.closed, "no end within the test's patience");
    let (received, reset) = (reply.bytes, reply.reset);
    let head_end = received
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head")
        + 4;
    assert!(received.starts_with(b"HTTP/1.1 200"));
    assert_eq!(
        received.len() - head_end,
        ANSWER,
        "the whole answer (reset: {reset})"
    );
    proxy.stop().await;
}

/// A node that answers 413 and closes without reading the upload: its answer reaches the
/// client even when weir's next write of the body meets the closed connection first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_before_the_node_closes_on_the_upload_is_relayed() {
    let answer = b"HTTP/1.1 413 Content Too Large\r\nContent-Length: 9\r\nConnection: close\r\n\r\ntoo large";
    let (node, _got) = answering_node(answer, Some(Duration::ZERO)).await;
    let proxy = TestProxy::start(&config(
        &[node],
        "",
        "[virtual_servers.web.limits]\nrequest_buffer = \"1KiB\"",
    ))
    .await;
    for _ in 0..10 {
        let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
        let answered = upload(&mut stream, 2_000_000).await;
        assert_eq!(answered, (413, "too large".to_owned()));
    }
    proxy.stop().await;
}

/// An answer whose end is the connection's (an HTTP/1.0 client, a chunked answer it cannot
/// be given chunked) and which the node cuts short ends with a reset, not a FIN: a FIN
/// would make the cut body look complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_answer_to_an_http10_client_ends_with_a_reset() {
    let answer = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n";
    // The pause sends the head and the first chunk on before the cut.
    let (node, _got) = answering_node(answer, Some(Duration::from_millis(300))).await;
    let proxy = TestProxy::start(&config(&[node], "", "")).await;
    let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
    stream
        .write_all(b"GET /cut HTTP/1.0\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    let reply = read_until_close(&mut stream).await;
    assert!(reply.closed, "no end within the test's patience");
    let text = reply.text();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(
        !text.to_ascii_lowercase().contains("content-length"),
        "{text}"
    );
    assert!(reply.reset, "{text}");
    proxy.stop().await;
}

/// What a client that pipelined a large request and one whose answer the node cuts short
/// receives of the first answer, reading only once both are well under way; `requests` are
/// the two heads, the second for `/cut` (a chunked answer) or `/cutlen` (one with a length);
/// and whether the connection then ended with a reset.
async fn first_answer_before_a_cut(requests: &'static [u8]) -> (usize, bool) {
    const BIG: usize = 2_000_000;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let node = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                while let Some(end) = head_in(&mut stream, &mut buf).await {
                    let (big, length) = (
                        buf.starts_with(b"GET /big "),
                        buf.starts_with(b"GET /cutlen "),
                    );
                    buf.drain(..end);
                    if big {
                        let mut answer =
                            format!("HTTP/1.1 200 OK\r\nContent-Length: {BIG}\r\n\r\n")
                                .into_bytes();
                        answer.resize(answer.len() + BIG, b'b');
                        if stream.write_all(&answer).await.is_err() {
                            return;
                        }
                        continue;
                    }
                    let cut: &[u8] = match length {
                        true => b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nhello",
                        false => {
                            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"
                        }
                    };
                    let _ = stream.write_all(cut).await;
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    return;
                }
            });
        }
    });
    let proxy = TestProxy::start(&config(&[node], "", "")).await;
    let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
    stream.write_all(requests).await.unwrap();
    // Nothing is read until both answers are well under way.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let reply = read_until_close(&mut stream).await;
    assert!(reply.closed, "no end within the test's patience");
    let (received, reset) = (reply.bytes, reply.reset);
    proxy.stop().await;
    let head_end = received
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head")
        + 4;
    assert!(
        received.starts_with(b"HTTP/1."),
        "{:?}",
        &received[..head_end]
    );
    let body = received[head_end..]
        .iter()
        .take(BIG)
        .take_while(|&&b| b == b'b')
        .count();
    (body, reset)
}

/// The cut answer's connection ends without a reset, which would have thrown away what was
/// still queued of the answer before it: its length or chunks tell the client of the cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_answer_keeps_what_was_queued_of_the_one_before() {
    let http11 = b"GET /big HTTP/1.1\r\nHost: t\r\n\r\nGET /cut HTTP/1.1\r\nHost: t\r\n\r\n";
    let (body, reset) = first_answer_before_a_cut(http11).await;
    assert_eq!(
        body, 2_000_000,
        "the first answer arrived whole (reset: {reset})"
    );
    // An HTTP/1.0 client whose cut answer has a length: no reset either.
    let http10 = b"GET /big HTTP/1.0\r\nHost: t\r\nConnection: keep-alive\r\n\r\n\
                   GET /cutlen HTTP/1.0\r\nHost: t\r\n\r\n";
    let (body, reset) = first_answer_before_a_cut(http10).await;
    assert_eq!(
        body, 2_000_000,
        "the first answer arrived whole (reset: {reset})"
    );
}

/// Finding 2 end to end: a node that sends a body after a HEAD response
/// (in the same write) never gets those bytes to the next client, even one
/// waiting for the node's only connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_body_after_head_never_reaches_a_waiting_client() {
    let (node, mut heads) = scripted_node(
        b"HTTP/1.1 200 OK\r\nContent-Length: 38\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nforged",
        false,
    )
    .await;
    let proxy = TestProxy::start(&config(
        &[node],
        "[pools.web.connections]\nmax_connections = 1",
        "",
    ))
    .await;
    let mut head_client = Connection::open(proxy.addr).await.unwrap();
    let mut waiting = Connection::open(proxy.addr).await.unwrap();
    head_client
        .send(b"HEAD / HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    // The HEAD holds the only connection; the GET waits in the queue for it.
    assert!(heads.recv().await.unwrap().starts_with("HEAD / "));
    waiting
        .send(b"GET /next HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    let head_response = head_client.response_to(true).await.unwrap();
    assert_eq!(head_response.status, 200);
    let next = waiting.response().await.unwrap();
    assert_eq!((next.status, next.text().as_str()), (200, "real"));
    proxy.stop().await;
}

/// Finding 2, the harder timing: the late body arrives a moment after the
/// HEAD response head, when a waiting request could already have been handed
/// the connection. It must still never reach that client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_body_sent_a_moment_after_head_never_reaches_a_waiting_client() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let node = listener.local_addr().unwrap();
    let (heads, mut received) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut first = true;
        while let Ok((mut stream, _)) = listener.accept().await {
            let heads = heads.clone();
            let late_body = std::mem::take(&mut first);
            tokio::spawn(async move {
                loop {
                    let head = read_head(&mut stream).await;
                    let is_head = head.starts_with("HEAD ");
                    let _ = heads.send(head);
                    if is_head && late_body {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        let _ = stream
                            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 44\r\n\r\n")
                            .await;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        let _ = stream
                            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nforged")
                            .await;
                    } else if stream
                        .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nreal")
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    let proxy = TestProxy::start(&config(
        &[node],
        "[pools.web.connections]\nmax_connections = 1",
        "",
    ))
    .await;
    let mut head_client = Connection::open(proxy.addr).await.unwrap();
    let mut waiting = Connection::open(proxy.addr).await.unwrap();
    head_client
        .send(b"HEAD / HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    assert!(received.recv().await.unwrap().starts_with("HEAD / "));
    waiting
        .send(b"GET /next HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(head_client.response_to(true).await.unwrap().status, 200);
    let next = waiting.response().await.unwrap();
    assert_eq!((next.status, next.text().as_str()), (200, "real"));
    proxy.stop().await;
}
