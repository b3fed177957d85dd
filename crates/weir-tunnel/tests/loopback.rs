//! End-to-end tests of a tunnel pair in one process on loopback: integrity of many concurrent
//! flows, deduplication after edits, clean closes both ways, refusals, authentication, and
//! the near side reconnecting when the far side restarts.

mod support;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use support::*;

const LINK: &str = "[link]\nbandwidth = \"1gbit\"\nrtt = \"1ms\"\n";

/// The same over the TCP fallback transport (QUIC packets framed on TCP with BBR).
const LINK_TCP: &str = "[link]\nbandwidth = \"1gbit\"\nrtt = \"1ms\"\ntransport = \"tcp\"\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_flows_arrive_intact_both_ways() {
    concurrent_flows(LINK).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_flows_arrive_intact_both_ways_over_tcp() {
    concurrent_flows(LINK_TCP).await;
}

/// 48 flows at once through an echo server, each checked byte for byte, and the counters
/// of both sides agree.
async fn concurrent_flows(link: &'static str) {
    let certs = Certificates::new();
    let echo = echo_server().await;
    let (server, client, listen) = start_pair(&certs, &[("echo", echo)], link).await;
    let address = listen[0];

    // 48 flows at once; a third send the same content, so references and literals of the
    // same chunks race across streams.
    let mut tasks = Vec::new();
    for flow in 0..48u64 {
        tasks.push(tokio::spawn(async move {
            let size = 64 * 1024 + (flow as usize * 7919) % 300_000;
            let data = if flow % 3 == 0 {
                random(400_000, 999)
            } else if flow % 3 == 1 {
                format!("flow {flow} says hello; ")
                    .repeat(size / 24)
                    .into_bytes()
            } else {
                random(size, flow)
            };
            // Staggered, so that later copies of the shared content meet chunks the far end
            // has reported and earlier copies still in flight.
            tokio::time::sleep(Duration::from_millis(flow * 5)).await;
            let stream = TcpStream::connect(address).await.unwrap();
            let (mut read, mut write) = stream.into_split();
            let sent = data.clone();
            let writer = tokio::spawn(async move {
                write.write_all(&sent).await.unwrap();
                write.shutdown().await.unwrap();
            });
            let mut echoed = Vec::new();
            read.read_to_end(&mut echoed).await.unwrap();
            writer.await.unwrap();
            assert!(
                echoed == data,
                "flow {flow}: {} bytes back of {}",
                echoed.len(),
                data.len()
            );
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert!(
        eventually(Duration::from_secs(5), || client
            .metrics
            .handles()
            .flows_active
            .get()
            == 0
            && server.metrics.handles().flows_active.get() == 0)
        .await
    );
    assert_eq!(client.metrics.handles().flows.get(), 48);
    assert_eq!(server.metrics.handles().flows.get(), 48);
    assert_eq!(client.metrics.handles().flows_failed.get(), 0);
    assert_eq!(
        client.metrics.handles().stream_read_bytes.get(),
        server.metrics.handles().stream_written_bytes.get()
    );
    assert_eq!(
        server.metrics.handles().stream_read_bytes.get(),
        client.metrics.handles().stream_written_bytes.get()
    );
    // The encoded bytes one end sends are those the other receives, counted alike.
    assert_eq!(
        client.metrics.handles().encoded_sent_bytes.get(),
        server.metrics.handles().encoded_received_bytes.get()
    );
    assert_eq!(
        server.metrics.handles().encoded_sent_bytes.get(),
        client.metrics.handles().encoded_received_bytes.get()
    );
    assert!(client.metrics.handles().compression_saved_bytes.get() > 0);
    assert!(client.metrics.handles().dedup_saved_bytes.get() > 0);
    client.stop().await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_file_costs_only_its_edits() {
    let certs = Certificates::new();
    let original = random(8 << 20, 42);
    let file = Arc::new(Mutex::new(original.clone()));
    let origin = file_server(Arc::clone(&file)).await;
    let (server, client, listen) = start_pair(&certs, &[("files", origin)], LINK).await;

    assert!(fetch(listen[0]).await.unwrap() == original);
    let first = server.metrics.handles().encoded_sent_bytes.get();
    assert!(
        first > original.len() as u64,
        "random data is sent whole the first time"
    );

    // 20 scattered edits: overwrites, insertions and deletions.
    let mut edited = original.clone();
    let mut seed = 7u64;
    for edit in 0..20 {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        let at = (seed >> 16) as usize % (edited.len() - 100);
        match edit % 3 {
            0 => edited[at..at + 32].copy_from_slice(&random(32, seed)),
            1 => {
                edited.splice(at..at, random(17, seed));
            }
            _ => {
                edited.drain(at..at + 23);
            }
        }
    }
    *file.lock().unwrap() = edited.clone();
    assert!(fetch(listen[0]).await.unwrap() == edited);
    let second = server.metrics.handles().encoded_sent_bytes.get() - first;
    let saved = 1.0 - second as f64 / edited.len() as f64;
    eprintln!(
        "edited transfer: {second} encoded bytes for {} ({:.2} % saved)",
        edited.len(),
        saved * 100.0
    );
    assert!(saved >= 0.97, "saved only {:.4}", saved);

    // And the identical file again: references only.
    let before = server.metrics.handles().encoded_sent_bytes.get();
    assert!(fetch(listen[0]).await.unwrap() == edited);
    let third = server.metrics.handles().encoded_sent_bytes.get() - before;
    assert!(
        (third as f64) < edited.len() as f64 * 0.01,
        "{third} bytes for a repeat"
    );
    client.stop().await;
    server.stop().await;
}

/// A server that records what it read and lets the test drive its side of the close.
async fn scripted_server() -> (SocketAddr, tokio::sync::mpsc::Receiver<TcpStream>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (sender, receiver) = tokio::sync::mpsc::channel(4);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = sender.send(stream).await;
        }
    });
    (address, receiver)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_at_either_end_reaches_the_other_cleanly() {
    let certs = Certificates::new();
    let (origin, mut accepted) = scripted_server().await;
    let (server, client, listen) = start_pair(&certs, &[("app", origin)], LINK).await;

    // The near client half-closes: the real server sees the request then end-of-file, can
    // still answer, and its close reaches the client as end-of-file.
    let mut near = TcpStream::connect(listen[0]).await.unwrap();
    near.write_all(b"request").await.unwrap();
    near.shutdown().await.unwrap();
    let mut far = accepted.recv().await.unwrap();
    let mut request = Vec::new();
    far.read_to_end(&mut request).await.unwrap();
    assert_eq!(request, b"request");
    far.write_all(b"answer").await.unwrap();
    drop(far);
    let mut answer = Vec::new();
    near.read_to_end(&mut answer).await.unwrap();
    assert_eq!(answer, b"answer");
    drop(near);

    // The real server closes first: the client reads end-of-file, and its own close
    // reaches the server as end-of-file.
    let mut near = TcpStream::connect(listen[0]).await.unwrap();
    near.write_all(b"x").await.unwrap();
    let mut far = accepted.recv().await.unwrap();
    let mut byte = [0u8; 1];
    far.read_exact(&mut byte).await.unwrap();
    far.write_all(b"bye").await.unwrap();
    far.shutdown().await.unwrap();
    let mut got = Vec::new();
    near.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, b"bye");
    drop(near);
    let mut rest = Vec::new();
    assert_eq!(far.read_to_end(&mut rest).await.unwrap(), 0);

    assert!(
        eventually(Duration::from_secs(5), || client
            .metrics
            .handles()
            .flows_active
            .get()
            == 0
            && server.metrics.handles().flows_active.get() == 0)
        .await,
        "flows still open"
    );
    assert_eq!(client.metrics.handles().flows_failed.get(), 0);
    assert_eq!(server.metrics.handles().flows_failed.get(), 0);
    client.stop().await;
    server.stop().await;
}

/// IMAP, SMTP, SSH: the server speaks first. The far side connects as soon as the flow
/// opens, and the greeting reaches a client that has sent nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_speaks_first_is_heard_before_the_client_speaks() {
    let certs = Certificates::new();
    let (origin, mut accepted) = scripted_server().await;
    let (server, client, listen) = start_pair(&certs, &[("imap", origin)], LINK).await;
    let mut near = TcpStream::connect(listen[0]).await.unwrap();
    let mut far = tokio::time::timeout(Duration::from_secs(5), accepted.recv())
        .await
        .expect("the far side connects before the client speaks")
        .unwrap();
    far.write_all(b"* OK IMAP ready\r\n").await.unwrap();
    let mut greeting = [0u8; 17];
    tokio::time::timeout(Duration::from_secs(5), near.read_exact(&mut greeting))
        .await
        .expect("the greeting within 5 s")
        .unwrap();
    assert_eq!(&greeting, b"* OK IMAP ready\r\n");
    // And the conversation goes on both ways.
    near.write_all(b"a1 LOGOUT\r\n").await.unwrap();
    let mut command = [0u8; 11];
    far.read_exact(&mut command).await.unwrap();
    assert_eq!(&command, b"a1 LOGOUT\r\n");
    drop(near);
    drop(far);
    client.stop().await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_at_the_far_end_resets_the_near_client() {
    let certs = Certificates::new();
    let (origin, mut accepted) = scripted_server().await;
    let (server, client, listen) = start_pair(&certs, &[("app", origin)], LINK).await;
    let mut near = TcpStream::connect(listen[0]).await.unwrap();
    near.write_all(b"x").await.unwrap();
    let far = accepted.recv().await.unwrap();
    socket2::SockRef::from(&far)
        .set_linger(Some(Duration::ZERO))
        .unwrap();
    drop(far);
    let mut got = Vec::new();
    let result = near.read_to_end(&mut got).await;
    assert!(
        result.is_err(),
        "a reset must not look like a clean end: {result:?}"
    );
    assert!(
        eventually(Duration::from_secs(5), || client
            .metrics
            .handles()
            .flows_failed
            .get()
            == 1)
        .await
    );
    client.stop().await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_and_unknown_services_are_refused() {
    let certs = Certificates::new();
    // A port nothing listens on.
    let closed = {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        listener.local_addr().unwrap()
    };
    let (server, udp) = start_server(&server_toml(
        &certs,
        "127.0.0.1:0".parse().unwrap(),
        &[("gone", closed)],
        LINK,
    ))
    .await;
    let (client, listen) = start_client(&client_toml(
        &certs,
        udp,
        "client",
        &["gone", "unknown"],
        LINK,
    ))
    .await;
    for address in listen {
        let mut near = match TcpStream::connect(address).await {
            Ok(near) => near,
            // The refusal is a reset; on a busy machine it can arrive before this task sees its
            // connect complete, and then the connect reports it.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => continue,
            Err(e) => panic!("{address}: {e}"),
        };
        let _ = near.write_all(b"hello").await;
        let mut got = Vec::new();
        let result = near.read_to_end(&mut got).await;
        assert!(result.is_err() && got.is_empty(), "{address}: {result:?}");
    }
    assert!(
        eventually(Duration::from_secs(5), || server
            .metrics
            .handles()
            .flows_failed
            .get()
            == 2)
        .await
    );
    client.stop().await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_near_side_without_a_trusted_certificate_is_refused() {
    let certs = Certificates::new();
    let echo = echo_server().await;
    let (server, udp) = start_server(&server_toml(
        &certs,
        "127.0.0.1:0".parse().unwrap(),
        &[("echo", echo)],
        LINK,
    ))
    .await;
    let (client, listen) =
        start_client(&client_toml(&certs, udp, "stranger", &["echo"], LINK)).await;
    // The near side resets the flow; when that is quick, the reset can reach the client
    // before its own connect has finished, and the connect is what fails.
    let mut got = Vec::new();
    let flow = async {
        let mut near = TcpStream::connect(listen[0]).await?;
        let _ = near.write_all(b"let me in").await;
        near.read_to_end(&mut got).await
    };
    let result = tokio::time::timeout(Duration::from_secs(10), flow)
        .await
        .expect("the flow must be closed within the connect timeout");
    assert!(result.is_err() && got.is_empty(), "{result:?}");
    // TLS 1.3: the near side finishes its handshake before the far side has checked its
    // certificate, so only the far side's count shows the refusal.
    assert_eq!(server.metrics.handles().connections.get(), 0);
    assert_eq!(client.metrics.handles().flows_failed.get(), 1);
    // Each refused connection counts as a failure for the backoff (100 ms doubling): a few
    // tries in two seconds, where the near side had retried at once, 160 times a second.
    let before = client.metrics.handles().connections.get();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let tries = client.metrics.handles().connections.get() - before;
    assert!(tries <= 6, "{tries} connections in 2 s");
    client.stop().await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tunnel_survives_the_far_side_restarting() {
    far_side_restart("").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tcp_transport_survives_the_far_side_restarting() {
    far_side_restart("transport = \"tcp\"\n").await;
}

/// A flow works, the far side restarts on the same port, a flow open across it is reset and
/// new flows work again; `transport` goes into both sides' `[link]`.
async fn far_side_restart(transport: &'static str) {
    let certs = Certificates::new();
    let server_link = format!("{LINK}{transport}");
    let echo = echo_server().await;
    let (server, udp) = start_server(&server_toml(
        &certs,
        "127.0.0.1:0".parse().unwrap(),
        &[("echo", echo)],
        &server_link,
    ))
    .await;
    // A long idle timeout: only the far side's stateless reset can end the old connection
    // quickly, and new flows wait for the new one.
    let link = format!(
        "[link]\nbandwidth = \"1gbit\"\nrtt = \"1ms\"\nidle_timeout = \"60s\"\n{transport}"
    );
    let (client, listen) =
        start_client(&client_toml(&certs, udp, "client", &["echo"], &link)).await;

    assert_eq!(echo_once(listen[0], b"before").await, b"before");

    // An idle flow open across the restart must end (with an error), not hang.
    let mut idle = TcpStream::connect(listen[0]).await.unwrap();
    idle.write_all(b"x").await.unwrap();
    let mut byte = [0u8; 1];
    idle.read_exact(&mut byte).await.unwrap();

    server.stop().await;
    let (server, _) =
        start_server(&server_toml(&certs, udp, &[("echo", echo)], &server_link)).await;
    // The near side learns of the restart from the first packet it sends (a keep-alive
    // within 2 s), reconnects, and new flows work again.
    assert_eq!(echo_once(listen[0], b"after").await, b"after");
    let mut rest = Vec::new();
    let idle_end = tokio::time::timeout(Duration::from_secs(10), idle.read_to_end(&mut rest)).await;
    assert!(
        matches!(idle_end, Ok(Err(_))),
        "the idle flow must be reset: {idle_end:?}"
    );
    // The new connection carries flows as soon as it is up, and is counted once the far
    // side's hello arrives (`driver/client.rs`): the count may trail the echo a moment.
    let counted = client.metrics.handles().connections.clone();
    let settled = tokio::time::timeout(Duration::from_secs(5), async {
        while counted.get() < 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(settled.is_ok(), "the reconnection was never counted");
    assert_eq!(counted.get(), 2);
    client.stop().await;
    server.stop().await;
}

/// A stranger on the TCP transport's port that sends QUIC packets of an unknown version
/// (each answered with a version negotiation) and never reads the answers: its queue fills,
/// and after a short grace what is sent to it is dropped, so the near side's flows go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_never_reads_does_not_stall_the_tcp_transport() {
    let certs = Certificates::new();
    let echo = echo_server().await;
    let (server, far) = start_server(&server_toml(
        &certs,
        "127.0.0.1:0".parse().unwrap(),
        &[("echo", echo)],
        LINK_TCP,
    ))
    .await;
    let (client, listen) =
        start_client(&client_toml(&certs, far, "client", &["echo"], LINK_TCP)).await;
    assert_eq!(echo_once(listen[0], b"before").await, b"before");

    let attacker =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    attacker.set_recv_buffer_size(4096).unwrap();
    attacker.connect(&far.into()).unwrap();
    attacker.set_nonblocking(true).unwrap();
    let mut attacker = TcpStream::from_std(attacker.into()).unwrap();
    // A long-header packet of a version no one speaks, padded to 1,200 bytes, framed.
    let mut packet = vec![0xc0, 0x0a, 0x1a, 0x2a, 0x3a, 8, 1, 2, 3, 4, 5, 6, 7, 8, 0];
    packet.resize(1200, 0);
    let mut frame = (packet.len() as u16).to_be_bytes().to_vec();
    frame.extend_from_slice(&packet);
    let frames = frame.repeat(32);
    let flood = tokio::spawn(async move {
        let until = tokio::time::Instant::now() + Duration::from_secs(20);
        while tokio::time::Instant::now() < until {
            if attacker.write_all(&frames).await.is_err() {
                break;
            }
        }
        attacker
    });
    // Long enough for the stranger's queue to fill and stall.
    tokio::time::sleep(Duration::from_secs(4)).await;
    for round in 0..3 {
        let answer = tokio::time::timeout(Duration::from_secs(5), echo_once(listen[0], b"during"))
            .await
            .unwrap_or_else(|_| panic!("round {round}: no echo within 5 s during the flood"));
        assert_eq!(answer, b"during");
    }
    flood.abort();
    client.stop().await;
    server.stop().await;
}

/// One flow: `message` sent, the write side closed, everything read back.
async fn echo_once(address: SocketAddr, message: &[u8]) -> Vec<u8> {
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream.write_all(message).await.unwrap();
    stream.shutdown().await.unwrap();
    let mut back = Vec::new();
    stream.read_to_end(&mut back).await.unwrap();
    back
}

/// Several flows bring the same content at once to a near side whose store is small:
/// references miss and are fetched. A flow waiting for its chunk goes on reading its
/// stream, so the flows' unread data cannot take the whole connection window from the
/// control stream that carries the chunk (the connection froze for good).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetched_chunks_arrive_while_many_flows_wait_for_them() {
    let certs = Certificates::new();
    let content = Arc::new(random(10 << 20, 7));
    let origin = {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let content = Arc::clone(&content);
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let content = Arc::clone(&content);
                tokio::spawn(async move {
                    let _ = stream.write_all(&content).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        address
    };
    let (server, far) = start_server(&server_toml(
        &certs,
        "127.0.0.1:0".parse().unwrap(),
        &[("files", origin)],
        LINK,
    ))
    .await;
    let small_store = format!("{LINK}[dedup]\nstore = \"1MiB\"\n");
    let (client, listen) = start_client(&client_toml(
        &certs,
        far,
        "client",
        &["files"],
        &small_store,
    ))
    .await;
    let mut gets = Vec::new();
    for _ in 0..8 {
        let content = Arc::clone(&content);
        let address = listen[0];
        gets.push(tokio::spawn(async move {
            let mut stream = TcpStream::connect(address).await.unwrap();
            stream.shutdown().await.unwrap();
            let mut got = Vec::new();
            stream.read_to_end(&mut got).await.unwrap();
            assert!(got == *content, "{} bytes of {}", got.len(), content.len());
        }));
    }
    let all = async {
        for get in gets {
            get.await.unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(60), all)
        .await
        .expect("every transfer within 60 s");
    // The small store did miss: the fetch path was taken.
    assert!(client.metrics.handles().dedup_misses.get() > 0);
    client.stop().await;
    server.stop().await;
}

/// The far side serves at most `max_connections` authenticated connections (each may hold
/// a dedup store): a second near side is turned away while the first is served, and gets
/// in once the first has gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_far_side_serves_at_most_max_connections() {
    let certs = Certificates::new();
    let echo = echo_server().await;
    let (server, udp) = start_server(&server_toml(
        &certs,
        "127.0.0.1:0".parse().unwrap(),
        &[("echo", echo)],
        "max_connections = 1",
    ))
    .await;
    let (first, first_listen) =
        start_client(&client_toml(&certs, udp, "client", &["echo"], "")).await;
    assert_eq!(echo_once(first_listen[0], b"one").await, b"one");
    let (second, second_listen) =
        start_client(&client_toml(&certs, udp, "client", &["echo"], "")).await;
    // Its flow waits for a connection it cannot have, and is closed at its connect timeout.
    let refused = tokio::time::timeout(Duration::from_secs(10), async {
        let mut near = TcpStream::connect(second_listen[0]).await?;
        let _ = near.write_all(b"two").await;
        let mut got = Vec::new();
        near.read_to_end(&mut got).await.map(|_| got)
    })
    .await
    .expect("closed within the connect timeout");
    assert!(refused.as_ref().map_or(true, Vec::is_empty), "{refused:?}");
    assert_eq!(server.metrics.handles().connections.get(), 1);
    assert_eq!(echo_once(first_listen[0], b"still").await, b"still");
    first.stop().await;
    assert!(
        eventually(Duration::from_secs(15), || {
            server.metrics.handles().connections.get() == 2
        })
        .await,
        "the second near side gets in once the first has gone"
    );
    assert_eq!(echo_once(second_listen[0], b"two").await, b"two");
    second.stop().await;
    server.stop().await;
}

/// A server that accepts connections and never reads from them.
async fn sink_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    address
}

/// A server that writes `data` to each connection, again and again, reading nothing.
async fn source_server(data: Vec<u8>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let data = Arc::new(data);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let data = Arc::clone(&data);
            tokio::spawn(async move { while stream.write_all(&data).await.is_ok() {} });
        }
    });
    address
}

/// A link whose windows were small against a few stuck flows (100 Mbit/s, 20 ms: a
/// stream window of 2 MB).
const LINK_100M: &str = "[link]\nbandwidth = \"100mbit\"\nrtt = \"20ms\"\n";

/// Flows whose local end never reads (a server that takes no upload, clients that take no
/// download) fill their own windows and stop there: the other flows of the tunnel go on.
/// With a connection window of two stream windows, three such flows stopped them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flows_whose_end_never_reads_do_not_stop_the_others() {
    let certs = Certificates::new();
    let (sink, source, echo) = (
        sink_server().await,
        source_server(random(1 << 20, 7)).await,
        echo_server().await,
    );
    let services = [("sink", sink), ("source", source), ("echo", echo)];
    let (server, client, listen) = start_pair(&certs, &services, LINK_100M).await;
    let mut stuck = Vec::new();
    for n in 0..4u64 {
        // Uploads nobody reads.
        let data = random(25 << 20, n);
        let address = listen[0];
        stuck.push(tokio::spawn(async move {
            let mut stream = TcpStream::connect(address).await.unwrap();
            let _ = stream.write_all(&data).await;
            stream
        }));
        // Downloads nobody reads.
        let address = listen[1];
        stuck.push(tokio::spawn(async move {
            let stream = TcpStream::connect(address).await.unwrap();
            tokio::time::sleep(Duration::from_secs(60)).await;
            stream
        }));
    }
    // Long enough for every stuck flow to fill its windows.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for round in 0..3 {
        let answer = tokio::time::timeout(Duration::from_secs(5), echo_once(listen[2], b"beside"))
            .await
            .unwrap_or_else(|_| panic!("round {round}: no echo within 5 s beside stuck flows"));
        assert_eq!(answer, b"beside");
    }
    for task in stuck {
        task.abort();
    }
    client.stop().await;
    server.stop().await;
}

/// Flows of data that deduplicates, to a server that never reads: each keeps the chunks
/// of the references it sent (its pins) until it ends, and all of them together at most
/// 128 MiB (past it, chunks go as literals), where 16 such flows held 32 MiB each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pins_of_flows_that_never_drain_stay_within_the_connection_budget() {
    let certs = Certificates::new();
    let sink = sink_server().await;
    let (server, client, listen) = start_pair(&certs, &[("sink", sink)], LINK_100M).await;
    let block = random(64 << 10, 3);
    let mut stuck = Vec::new();
    for _ in 0..16 {
        let data = block.repeat(512);
        let address = listen[0];
        stuck.push(tokio::spawn(async move {
            let mut stream = TcpStream::connect(address).await.unwrap();
            let _ = stream.write_all(&data).await;
            stream
        }));
    }
    let pinned = || client.metrics.handles().dedup_pinned_bytes.get() as f64;
    let mut most = 0.0f64;
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        most = most.max(pinned());
    }
    // The budget, and a block of references past it for each flow that checked in time.
    let bound = (128u64 << 20) + 16 * (4 << 20);
    assert!(most > 0.0, "references were sent and pinned");
    assert!(most <= bound as f64, "{most} bytes pinned");
    // The far side goes away: the connection ends, and the pins it held with it, while the
    // near side runs on (its gauges are the sums over the connections it has).
    server.stop().await;
    let start = std::time::Instant::now();
    while pinned() != 0.0 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{} bytes still counted as pinned",
            pinned()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(client.metrics.handles().dedup_store_bytes.get(), 0);
    for task in stuck {
        task.abort();
    }
    client.stop().await;
}
