//! A TCP virtual server's sessions.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use weir_testkit::TestProxy;

use crate::support::{Node, exchange, metric, read_all, tcp_config, tls_config};

const RELAYS: [&str; 2] = ["copy", "splice"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_half_close_reaches_the_node_which_still_answers() {
    let node = Node::start("n", Duration::ZERO).await;
    for relay in RELAYS {
        let proxy = TestProxy::start(&tcp_config(
            &[node.addr],
            "",
            &format!("[virtual_servers.l4.tcp]\nrelay = \"{relay}\""),
        ))
        .await;
        let answer = exchange(proxy.addr, &[7u8; 100_000]).await;
        assert_eq!(answer, "n 100000", "{relay}");
        assert_eq!(node.last_received(), vec![7u8; 100_000]);
        let text = proxy.metrics.encode();
        assert_eq!(
            metric(
                &text,
                "weir_tcp_sessions_total{virtual_server=\"l4\",result=\"closed\"}"
            ),
            1,
            "{relay}: {text}"
        );
        assert_eq!(
            metric(
                &text,
                "weir_client_bytes_received_total{virtual_server=\"l4\"}"
            ),
            100_000
        );
        assert_eq!(
            metric(&text, "weir_client_bytes_sent_total{virtual_server=\"l4\"}"),
            8
        );
        proxy.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_half_close_reaches_the_client_which_still_sends() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let node_addr = listener.local_addr().unwrap();
    let node = tokio::spawn(async move {
        let mut got = Vec::new();
        for _ in 0..RELAYS.len() {
            let (mut stream, _) = listener.accept().await.unwrap();
            stream.write_all(b"banner").await.unwrap();
            stream.shutdown().await.unwrap();
            let mut late = Vec::new();
            stream.read_to_end(&mut late).await.unwrap();
            got.push(late);
        }
        got
    });
    for relay in RELAYS {
        let proxy = TestProxy::start(&tcp_config(
            &[node_addr],
            "",
            &format!("[virtual_servers.l4.tcp]\nrelay = \"{relay}\""),
        ))
        .await;
        let mut client = TcpStream::connect(proxy.addr).await.unwrap();
        assert_eq!(read_all(&mut client).await, "banner", "{relay}");
        client
            .write_all(b"sent after the node's FIN")
            .await
            .unwrap();
        client.shutdown().await.unwrap();
        proxy.stop().await;
    }
    let got = node.await.unwrap();
    assert!(
        got.iter().all(|late| late == b"sent after the node's FIN"),
        "{got:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_is_closed_at_the_idle_timeout() {
    let node = Node::start("n", Duration::ZERO).await;
    let proxy = TestProxy::start(&tcp_config(
        &[node.addr],
        "",
        "[virtual_servers.l4.tcp]\nidle_timeout = \"300ms\"",
    ))
    .await;
    let mut client = TcpStream::connect(proxy.addr).await.unwrap();
    client.write_all(b"x").await.unwrap();
    let started = std::time::Instant::now();
    // Neither side sends more: weir closes both.
    assert_eq!(read_all(&mut client).await, "");
    assert!(started.elapsed() >= Duration::from_millis(250));
    let text = proxy.metrics.encode();
    assert_eq!(
        metric(
            &text,
            "weir_tcp_sessions_total{virtual_server=\"l4\",result=\"idle_timeout\"}"
        ),
        1
    );
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_failure_moves_to_the_next_node() {
    let dead = {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        listener.local_addr().unwrap()
    };
    let node = Node::start("live", Duration::ZERO).await;
    let proxy = TestProxy::start(&tcp_config(
        &[dead, node.addr],
        "retries = 1\n[pools.p.passive_health]\nconsecutive_failures = 1000",
        "",
    ))
    .await;
    for _ in 0..6 {
        assert_eq!(exchange(proxy.addr, b"hi").await, "live 2");
    }
    let text = proxy.metrics.encode();
    let failures = metric(
        &text,
        &format!("weir_node_connect_failures_total{{pool=\"p\",node=\"{dead}\"}}"),
    );
    assert!(failures >= 3, "{text}");
    assert_eq!(metric(&text, "weir_retries_total{pool=\"p\"}"), failures);
    // With no retry allowed and only the dead node, the session closes and counts.
    let only_dead = TestProxy::start(&tcp_config(&[dead], "retries = 0", "")).await;
    assert_eq!(exchange(only_dead.addr, b"hi").await, "");
    let text = only_dead.metrics.encode();
    assert_eq!(
        metric(
            &text,
            "weir_tcp_sessions_total{virtual_server=\"l4\",result=\"connect_failed\"}"
        ),
        1
    );
    only_dead.stop().await;
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_wait_in_the_queue_at_the_node_cap() {
    let node = Node::start("n", Duration::from_millis(50)).await;
    let proxy = TestProxy::start(&tcp_config(
        &[node.addr],
        "[pools.p.connections]\nmax_connections = 2\nqueue_length = 100\nqueue_timeout = \"10s\"",
        "",
    ))
    .await;
    let mut clients = Vec::new();
    for _ in 0..16 {
        let addr = proxy.addr;
        clients.push(tokio::spawn(async move { exchange(addr, b"abc").await }));
    }
    for client in clients {
        assert_eq!(client.await.unwrap(), "n 3");
    }
    assert_eq!(node.peak.load(std::sync::atomic::Ordering::SeqCst), 2);
    let text = proxy.metrics.encode();
    assert_eq!(
        metric(
            &text,
            "weir_tcp_sessions_total{virtual_server=\"l4\",result=\"closed\"}"
        ),
        16
    );
    assert_eq!(
        metric(
            &text,
            &format!(
                "weir_upstream_connections_open{{pool=\"p\",node=\"{}\"}}",
                node.addr
            )
        ),
        0
    );
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_a_full_queue_sessions_are_closed_and_counted() {
    let node = Node::start("n", Duration::from_millis(300)).await;
    let proxy = TestProxy::start(&tcp_config(
        &[node.addr],
        "[pools.p.connections]\nmax_connections = 1\nqueue_length = 1\nqueue_timeout = \"10s\"",
        "",
    ))
    .await;
    let mut clients = Vec::new();
    for _ in 0..4 {
        let addr = proxy.addr;
        clients.push(tokio::spawn(async move { exchange(addr, b"abc").await }));
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    let mut answers = Vec::new();
    for client in clients {
        answers.push(client.await.unwrap());
    }
    assert_eq!(
        answers.iter().filter(|a| *a == "n 3").count(),
        2,
        "{answers:?}"
    );
    let text = proxy.metrics.encode();
    assert_eq!(
        metric(
            &text,
            "weir_tcp_sessions_total{virtual_server=\"l4\",result=\"queue_full\"}"
        ),
        2
    );
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_virtual_server_terminates_tls_and_relays_plain_bytes() {
    let node = Node::start("plain", Duration::ZERO).await;
    let (config, log) =
        weir_testkit::with_access_log_file(&tls_config(node.addr, ""), "tls-vs", "text");
    let proxy = TestProxy::start(&config).await;
    let config = weir_testkit::tls::client_config(&weir_testkit::tls::ClientOptions::default());
    let mut stream = weir_testkit::tls::connect(proxy.addr, "localhost", &config)
        .await
        .unwrap();
    stream.write_all(b"over tls").await.unwrap();
    stream.shutdown().await.unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer).await;
    assert_eq!(answer, b"plain 8");
    assert_eq!(node.last_received(), b"over tls");
    // The session's record says what the handshake settled.
    let record = proxy.access_log(&log, 1).await;
    assert!(
        record.contains(" result=closed tls_version=TLSv1.3 tls_cipher=TLS_AES_128_GCM_SHA256 server_name=localhost\n"),
        "{record}"
    );
    proxy.stop().await;
    let _ = std::fs::remove_file(&log);
}

/// A tls virtual server offers the ALPN names its config lists, whatever protocol they name
/// (weir relays the bytes): a PostgreSQL 17 client with direct TLS needs `postgresql`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_virtual_server_negotiates_the_alpn_its_nodes_speak() {
    let node = Node::start("pg", Duration::ZERO).await;
    let proxy = TestProxy::start(&tls_config(node.addr, "alpn = [\"postgresql\"]\n")).await;
    let mut config =
        (*weir_testkit::tls::client_config(&weir_testkit::tls::ClientOptions::default())).clone();
    config.alpn_protocols = vec![b"postgresql".to_vec()];
    let mut stream =
        weir_testkit::tls::connect(proxy.addr, "localhost", &std::sync::Arc::new(config))
            .await
            .unwrap();
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"postgresql"[..]));
    stream.write_all(b"startup").await.unwrap();
    stream.shutdown().await.unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer).await;
    assert_eq!(answer, b"pg 7");
    proxy.stop().await;
}

/// A TLS client that ends its side with a bare FIN, without close_notify (as many do), has
/// half-closed, not failed: the node sees the end of the request and its answer reaches the
/// client, as over plain TCP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_client_fin_without_close_notify_is_a_half_close() {
    let node = Node::start("plain", Duration::ZERO).await;
    let proxy = TestProxy::start(&tls_config(node.addr, "")).await;
    let config = weir_testkit::tls::client_config(&weir_testkit::tls::ClientOptions::default());
    let mut stream = weir_testkit::tls::connect(proxy.addr, "localhost", &config)
        .await
        .unwrap();
    stream.write_all(b"no notify").await.unwrap();
    stream.flush().await.unwrap();
    // The TCP connection's write side only: no close_notify record goes before the FIN.
    stream.get_mut().0.shutdown().await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer)).await;
    assert_eq!(answer, b"plain 9");
    assert_eq!(node.last_received(), b"no notify");
    let text = proxy.metrics.encode();
    assert_eq!(
        metric(
            &text,
            "weir_tcp_sessions_total{virtual_server=\"s\",result=\"closed\"}"
        ),
        1,
        "{text}"
    );
    proxy.stop().await;
}

/// A server-first protocol over a tls virtual server (SMTP or IMAP over TLS): the client
/// finishes its handshake and waits for the node's greeting, so weir must not hold its
/// Finished back for more bytes (`crates/weir-tls/src/hold.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_speaks_first_greets_a_tls_client_at_once() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let node_addr = listener.local_addr().unwrap();
    let node = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        stream.write_all(b"* OK ready\r\n").await.unwrap();
        let mut rest = Vec::new();
        let _ = stream.read_to_end(&mut rest).await;
    });
    let proxy = TestProxy::start(&tls_config(
        node_addr,
        "versions = [\"1.3\"]\nhandshake_timeout = \"5s\"\n",
    ))
    .await;
    let config = weir_testkit::tls::client_config(&weir_testkit::tls::ClientOptions::default());
    let mut stream = weir_testkit::tls::connect(proxy.addr, "localhost", &config)
        .await
        .unwrap();
    let mut greeting = [0u8; 12];
    tokio::time::timeout(Duration::from_secs(2), stream.read_exact(&mut greeting))
        .await
        .expect("greeted before the handshake timeout")
        .unwrap();
    assert_eq!(&greeting, b"* OK ready\r\n");
    stream.shutdown().await.unwrap();
    proxy.stop().await;
    node.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_virtual_server_connection_limit_a_client_is_closed_at_once() {
    let node = Node::start("n", Duration::ZERO).await;
    let proxy = TestProxy::start(&tcp_config(
        &[node.addr],
        "",
        "[virtual_servers.l4.limits]\nmax_connections = 1",
    ))
    .await;
    // The first session stays open (no FIN from its client yet).
    let mut first = TcpStream::connect(proxy.addr).await.unwrap();
    first.write_all(b"held").await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut refused = TcpStream::connect(proxy.addr).await.unwrap();
    assert_eq!(
        read_all(&mut refused).await,
        "",
        "closed at once, nothing relayed"
    );
    first.shutdown().await.unwrap();
    assert_eq!(read_all(&mut first).await, "n 4");
    let text = proxy.metrics.encode();
    assert_eq!(
        metric(
            &text,
            "weir_client_connections_rejected_total{virtual_server=\"l4\"}"
        ),
        1
    );
    // Once the first is gone, a new client is served.
    assert_eq!(exchange(proxy.addr, b"later").await, "n 5");
    proxy.stop().await;
}

/// Echo sessions that carry messages in mixed sizes, many at once, through each relay: every
/// byte comes back. A relay that lost a readiness event would leave a session stalled with
/// bytes waiting until its idle timeout (2 s here), and the echo would come back short.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_sessions_in_mixed_sizes_never_stall() {
    let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let echo_addr = echo.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = echo.accept().await {
            tokio::spawn(async move {
                let (mut reader, mut writer) = stream.into_split();
                let _ = tokio::io::copy(&mut reader, &mut writer).await;
                let _ = writer.shutdown().await;
            });
        }
    });
    for relay in ["copy", "auto", "splice"] {
        let proxy = TestProxy::start(&tcp_config(
            &[echo_addr],
            "",
            &format!("[virtual_servers.l4.tcp]\nrelay = \"{relay}\"\nidle_timeout = \"2s\""),
        ))
        .await;
        let mut sessions = tokio::task::JoinSet::new();
        for session in 0..24u32 {
            let addr = proxy.addr;
            sessions.spawn(async move {
                let total = 1_000_000;
                let stream = TcpStream::connect(addr).await.unwrap();
                let (mut reader, mut writer) = stream.into_split();
                let writing = tokio::spawn(async move {
                    let sizes = [1, 100, 1_500, 9_000, 16_383, 16_384, 40_000, 3];
                    let mut sent = 0;
                    let mut turn = session as usize;
                    while sent < total {
                        let size = sizes[turn % sizes.len()].min(total - sent);
                        let piece: Vec<u8> = (sent..sent + size).map(|i| i as u8).collect();
                        writer.write_all(&piece).await.unwrap();
                        sent += size;
                        turn += 1;
                    }
                    writer.shutdown().await.unwrap();
                });
                let mut back = Vec::with_capacity(total);
                reader.read_to_end(&mut back).await.unwrap();
                writing.await.unwrap();
                back.len() == total && back.iter().enumerate().all(|(i, &b)| b == i as u8)
            });
        }
        let mut whole = 0;
        let finished = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(result) = sessions.join_next().await {
                whole += usize::from(result.unwrap());
            }
        })
        .await;
        assert!(finished.is_ok(), "{relay}: sessions still open after 60 s");
        assert_eq!(whole, 24, "{relay}: sessions echoed whole");
        proxy.stop().await;
    }
}

/// A session still open when the drain timeout passes ends then, counted and logged as
/// `shutting_down` with the bytes it carried; one that finishes within the drain is logged
/// as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_open_past_the_drain_timeout_ends_as_shutting_down() {
    let node = Node::start("n", Duration::ZERO).await;
    let config = tcp_config(&[node.addr], "", "")
        .replace("[log]\n", "[runtime]\ndrain_timeout = \"300ms\"\n[log]\n");
    let proxy = TestProxy::start(&config).await;
    let mut client = TcpStream::connect(proxy.addr).await.unwrap();
    client.write_all(b"still talking").await.unwrap();
    // The session is relaying (the node waits for the client's EOF, which never comes).
    tokio::time::sleep(Duration::from_millis(100)).await;
    let metrics = std::sync::Arc::clone(&proxy.metrics);
    let stopped = tokio::time::timeout(Duration::from_secs(5), proxy.stop()).await;
    assert!(stopped.is_ok(), "the drain ends within its timeout");
    let text = metrics.encode();
    assert_eq!(
        metric(
            &text,
            "weir_tcp_sessions_total{virtual_server=\"l4\",result=\"shutting_down\"}"
        ),
        1,
        "{text}"
    );
    assert_eq!(
        metric(
            &text,
            "weir_client_bytes_received_total{virtual_server=\"l4\"}"
        ),
        b"still talking".len() as u64,
        "{text}"
    );
    assert_eq!(read_all(&mut client).await, "", "the session was closed");
}

/// The virtual server's byte counters follow a session while it is open, in each relay,
/// rather than jumping when it ends: a long-lived session shows in a rate graph.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_is_counted_while_it_is_open() {
    let node = Node::start("n", Duration::ZERO).await;
    for relay in ["copy", "splice", "auto"] {
        let vs_extra = format!("[virtual_servers.l4.tcp]\nrelay = \"{relay}\"\n");
        let proxy = TestProxy::start(&tcp_config(&[node.addr], "", &vs_extra)).await;
        let mut client = TcpStream::connect(proxy.addr).await.unwrap();
        client.write_all(b"still talking").await.unwrap();
        // The node waits for the client's FIN, which has not come: the session is open.
        let sample = "weir_client_bytes_received_total{virtual_server=\"l4\"}";
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while metric(&proxy.metrics.encode(), sample) < 13 {
            assert!(
                std::time::Instant::now() < deadline,
                "{relay}: not counted while open"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        client.shutdown().await.unwrap();
        assert_eq!(read_all(&mut client).await, "n 13");
        let text = proxy.metrics.encode();
        // Counted once: as the bytes moved, not again at the end.
        assert_eq!(metric(&text, sample), 13, "{relay}");
        assert_eq!(
            metric(&text, "weir_client_bytes_sent_total{virtual_server=\"l4\"}"),
            4,
            "{relay}"
        );
        proxy.stop().await;
    }
}

/// A client that closes its connection, having sent nothing, while its session waits for
/// the node's only connection leaves the queue: the node never sees it; so does one that
/// sent bytes and then reset the connection (aborted both ways: nothing could go back to
/// it). A client that sent bytes before its FIN still waits (see
/// `sessions_wait_in_the_queue_at_the_node_cap`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_the_queue_never_reaches_the_node() {
    let node = Node::start("n", Duration::from_millis(400)).await;
    let proxy = TestProxy::start(&tcp_config(
        &[node.addr],
        "[pools.p.connections]\nmax_connections = 1\nqueue_length = 10\nqueue_timeout = \"10s\"",
        "",
    ))
    .await;
    let addr = proxy.addr;
    let first = tokio::spawn(async move { exchange(addr, b"abc").await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let leaving = TcpStream::connect(proxy.addr).await.unwrap();
    let mut resetting = TcpStream::connect(proxy.addr).await.unwrap();
    resetting.write_all(b"for nobody").await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop(leaving);
    // Closed with unread bytes and no linger: a reset.
    socket2::SockRef::from(&resetting)
        .set_linger(Some(Duration::ZERO))
        .unwrap();
    drop(resetting);
    assert_eq!(first.await.unwrap(), "n 3");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(node.received.lock().unwrap().len(), 1);
    let text = proxy.metrics.encode();
    assert_eq!(
        metric(
            &text,
            "weir_tcp_sessions_total{virtual_server=\"l4\",result=\"client_left\"}"
        ),
        2
    );
    assert_eq!(metric(&text, "weir_queue_abandoned_total{pool=\"p\"}"), 2);
    proxy.stop().await;
}

/// A layer 4 session to a pool with TLS carries whatever the client sends, so weir offers
/// its node no ALPN (RFC 7301 §3.1: the list names what the client will speak); before, it
/// offered `http/1.1`, which a strict node (PostgreSQL with direct TLS) refuses. HTTP
/// requests to the same pool still offer `http/1.1`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_layer4_session_over_tls_to_its_node_offers_no_alpn() {
    // A node that records the ClientHello it gets, then closes.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let node_addr = listener.local_addr().unwrap();
    let (hellos, mut seen) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let hellos = hellos.clone();
            tokio::spawn(async move {
                let mut bytes = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let Ok(Ok(n)) =
                        tokio::time::timeout(Duration::from_secs(5), stream.read(&mut chunk)).await
                    else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    bytes.extend_from_slice(&chunk[..n]);
                    match weir_tls::client_hello::read_client_hello(&bytes, 16 * 1024) {
                        Ok(weir_tls::client_hello::Peek::Partial) => {}
                        Ok(weir_tls::client_hello::Peek::Complete(hello)) => {
                            let _ = hellos.send(hello.alpn);
                            return;
                        }
                        Err(error) => panic!("not a ClientHello: {error:?}"),
                    }
                }
            });
        }
    });
    let config = format!(
        "[log]\naccess_log = false\nlevel = \"warn\"\n\n\
         [pools.p]\nnodes = [{{ address = \"{node_addr}\" }}]\n\
         [pools.p.tls]\nverify = false\n\n\
         [virtual_servers.l4]\nprotocol = \"tcp\"\nlisten = [\"127.0.0.1:0\"]\npool = \"p\"\n\n\
         [virtual_servers.web]\nlisten = [\"127.0.0.1:0\"]\npool = \"p\"\n"
    );
    let proxy = TestProxy::start(&config).await;
    let addr_of = |name: &str| {
        proxy
            .addrs
            .iter()
            .find(|(listener, _)| listener.as_str() == name)
            .map(|&(_, addr)| addr)
            .unwrap_or_else(|| panic!("no listener {name} in {:?}", proxy.addrs))
    };
    let mut client = TcpStream::connect(addr_of("l4")).await.unwrap();
    client.write_all(b"\x00\x00\x00\x08startup").await.unwrap();
    let alpn = tokio::time::timeout(Duration::from_secs(5), seen.recv())
        .await
        .expect("weir's ClientHello within 5 s")
        .unwrap();
    assert!(alpn.is_empty(), "a layer 4 session offered ALPN {alpn:?}");
    drop(client);
    // An HTTP request to the same pool: its connection offers http/1.1.
    let mut http = TcpStream::connect(addr_of("web")).await.unwrap();
    http.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    let alpn = tokio::time::timeout(Duration::from_secs(5), seen.recv())
        .await
        .expect("weir's ClientHello within 5 s")
        .unwrap();
    assert_eq!(alpn, vec![b"http/1.1".to_vec()]);
    proxy.stop().await;
}
