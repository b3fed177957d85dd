//! TLS passthrough: the ClientHello routes, its bytes reach the node untouched.

use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use weir_testkit::{TestOrigin, TestProxy};

use crate::support::{Node, client_hello, exchange, metric, read_all};

fn passthrough_config(a: &Node, b: &Node) -> String {
    format!(
        "[log]\naccess_log = false\nlevel = \"warn\"\n\
         [pools.a]\nnodes = [{{ address = \"{}\" }}]\n[pools.b]\nnodes = [{{ address = \"{}\" }}]\n\
         [virtual_servers.l4]\nprotocol = \"tcp\"\nlisten = [\"127.0.0.1:0\"]\npool = \"b\"\n\
         [[virtual_servers.l4.passthrough]]\nserver_names = [\"a.example\", \"*.a.internal\"]\npool = \"a\"\n",
        a.addr, b.addr
    )
}

/// The ClientHello arrives in two segments split at every byte boundary; each connection is
/// routed by its SNI, and the node gets every byte as sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_hello_split_at_every_byte_boundary_routes_by_sni() {
    let (a, b) = (
        Node::start("A", Duration::ZERO).await,
        Node::start("B", Duration::ZERO).await,
    );
    let proxy = TestProxy::start(&passthrough_config(&a, &b)).await;
    let hello = client_hello("db.a.internal");
    for split in 1..hello.len() {
        let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        stream.write_all(&hello[..split]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(1)).await;
        stream.write_all(&hello[split..]).await.unwrap();
        stream.shutdown().await.unwrap();
        assert_eq!(
            read_all(&mut stream).await,
            format!("A {}", hello.len()),
            "split at {split}"
        );
        assert_eq!(a.last_received(), hello, "split at {split}");
    }
    let text = proxy.metrics.encode();
    assert_eq!(
        metric(
            &text,
            "weir_client_hellos_total{virtual_server=\"l4\",result=\"passthrough\"}"
        ),
        hello.len() as u64 - 1
    );
    // Another name, and plain TCP, go to the virtual server's own pool.
    let other = client_hello("b.example");
    assert_eq!(
        exchange(proxy.addr, &other).await,
        format!("B {}", other.len())
    );
    assert_eq!(exchange(proxy.addr, b"not TLS at all").await, "B 14");
    // A malformed handshake record closes the connection, and so does a handshake message
    // that is not a ClientHello (a ServerHello here).
    assert_eq!(exchange(proxy.addr, &[22, 3, 1, 0, 0]).await, "");
    assert_eq!(
        exchange(proxy.addr, &[22, 3, 1, 0, 4, 2, 0, 0, 0]).await,
        ""
    );
    let text = proxy.metrics.encode();
    assert_eq!(
        metric(
            &text,
            "weir_client_hellos_total{virtual_server=\"l4\",result=\"default_pool\"}"
        ),
        2
    );
    assert_eq!(
        metric(
            &text,
            "weir_client_hellos_total{virtual_server=\"l4\",result=\"malformed\"}"
        ),
        1
    );
    assert_eq!(
        metric(
            &text,
            "weir_client_hellos_total{virtual_server=\"l4\",result=\"not_client_hello\"}"
        ),
        1
    );
    proxy.stop().await;
}

/// A ClientHello cut short by the client's FIN closes the connection at once (nothing more
/// can come), and a client that sends nothing at all (a protocol where the server speaks
/// first) goes to the virtual server's own pool once its `tcp.hello_timeout` passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_hello_closes_and_a_silent_client_reaches_the_own_pool() {
    let (a, b) = (
        Node::start("A", Duration::ZERO).await,
        Node::start("B", Duration::ZERO).await,
    );
    // B greets first, as an SMTP or MySQL server does.
    let greeter = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let greeter_addr = greeter.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = greeter.accept().await {
            tokio::spawn(async move {
                let _ = stream.write_all(b"220 ready\r\n").await;
                let _ = stream.shutdown().await;
            });
        }
    });
    let config = passthrough_config(&a, &b).replace(&b.addr.to_string(), &greeter_addr.to_string())
        + "[virtual_servers.l4.tcp]\nhello_timeout = \"600ms\"\n";
    let proxy = TestProxy::start(&config).await;
    let hello = client_hello("db.a.internal");
    for cut in [1, 5, 11, hello.len() - 1] {
        let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
        stream.write_all(&hello[..cut]).await.unwrap();
        stream.shutdown().await.unwrap();
        let read = tokio::time::timeout(Duration::from_secs(2), read_all(&mut stream));
        assert_eq!(read.await.expect("closed at once"), "", "cut at {cut}");
    }
    let text = proxy.metrics.encode();
    assert_eq!(
        metric(
            &text,
            "weir_client_hellos_total{virtual_server=\"l4\",result=\"closed\"}"
        ),
        4
    );
    // Silent: after the hello timeout (600 ms here; 10 s by default), the own pool's node
    // says its greeting.
    let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
    let started = std::time::Instant::now();
    let mut greeting = [0u8; 11];
    let read = tokio::io::AsyncReadExt::read_exact(&mut stream, &mut greeting);
    tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .expect("the greeting within 5 s")
        .unwrap();
    assert_eq!(&greeting, b"220 ready\r\n");
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "greeted after {:?}, before the hello timeout",
        started.elapsed()
    );
    drop(stream);
    proxy.stop().await;
}

/// On one HTTPS port: a name passed through to a pool, every other name terminated by weir.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_port_passes_some_names_through_and_terminates_the_rest() {
    let pass = Node::start("P", Duration::ZERO).await;
    let origin = TestOrigin::start("web").await;
    let proxy = TestProxy::start(&format!(
        "[log]\naccess_log = false\nlevel = \"warn\"\n\
         [pools.web]\nnodes = [{{ address = \"{}\" }}]\n[pools.pass]\nnodes = [{{ address = \"{}\" }}]\n\
         [virtual_servers.s]\nprotocol = \"https\"\nlisten = [\"127.0.0.1:0\"]\npool = \"web\"\n\
         [virtual_servers.s.tls]\ncertificates = [{{ self_signed = [\"localhost\"] }}]\n\
         [[virtual_servers.s.passthrough]]\nserver_names = [\"pass.example\"]\npool = \"pass\"\n",
        origin.addr, pass.addr
    ))
    .await;
    let hello = client_hello("pass.example");
    assert_eq!(
        exchange(proxy.addr, &hello).await,
        format!("P {}", hello.len())
    );
    assert_eq!(pass.last_received(), hello);
    let config = weir_testkit::tls::client_config(&weir_testkit::tls::ClientOptions::default());
    let mut stream = weir_testkit::tls::connect(proxy.addr, "localhost", &config)
        .await
        .unwrap();
    let response = weir_testkit::tls::get(&mut stream, "/").await.unwrap();
    assert_eq!(response.status, 200);
    // A name with an empty label is refused by weir's TLS with an alert, not a reset.
    let mut malformed = client_hello("aa.example");
    let at = malformed
        .windows(10)
        .position(|window| window == b"aa.example")
        .expect("the name in the hello");
    malformed[at..at + 10].copy_from_slice(b"a..example");
    let mut stream = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut stream, &malformed)
        .await
        .unwrap();
    let mut answer = [0u8; 1];
    let read = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::io::AsyncReadExt::read(&mut stream, &mut answer),
    )
    .await
    .expect("answered in time");
    assert!(matches!(read, Ok(1)), "{read:?}");
    assert_eq!(answer[0], 0x15, "a TLS alert record");
    let text = proxy.metrics.encode();
    assert_eq!(
        metric(
            &text,
            "weir_client_hellos_total{virtual_server=\"s\",result=\"terminated\"}"
        ),
        1
    );
    assert_eq!(
        metric(
            &text,
            "weir_client_hellos_total{virtual_server=\"s\",result=\"malformed\"}"
        ),
        1
    );
    proxy.stop().await;
    origin.stop().await;
}

/// A tls virtual server `s` (a self-signed certificate for `localhost`, then `tls_extra`
/// keys of its `[tls]` table) whose own pool's node answers `O`, passing `pass.example`
/// through to a node that answers `P`: the proxy and the nodes (`[own, pass]`).
async fn tls_server_passing_through(tls_extra: &str) -> (TestProxy, [Node; 2]) {
    let pass = Node::start("P", Duration::ZERO).await;
    let own = Node::start("O", Duration::ZERO).await;
    let proxy = TestProxy::start(&format!(
        "[log]\naccess_log = false\nlevel = \"warn\"\n\
         [pools.own]\nnodes = [{{ address = \"{}\" }}]\n[pools.pass]\nnodes = [{{ address = \"{}\" }}]\n\
         [virtual_servers.s]\nprotocol = \"tls\"\nlisten = [\"127.0.0.1:0\"]\npool = \"own\"\n\
         [virtual_servers.s.tls]\ncertificates = [{{ self_signed = [\"localhost\"] }}]\n{tls_extra}\
         [[virtual_servers.s.passthrough]]\nserver_names = [\"pass.example\"]\npool = \"pass\"\n",
        own.addr, pass.addr
    ))
    .await;
    (proxy, [own, pass])
}

/// On a tls virtual server with passthrough rules, reading the ClientHello is the start of
/// weir's handshake: clients stalled in it hold places under `max_handshakes` (a client past
/// the limit is closed at once, counted as an overload), and `handshake_timeout` counts from
/// it, not again once weir's own handshake starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_the_hello_counts_against_the_handshake_limit_and_timeout() {
    let (proxy, _nodes) =
        tls_server_passing_through("handshake_timeout = \"1s\"\nmax_handshakes = 2\n").await;
    let hello = client_hello("pass.example");
    // Two clients stall in their hellos: the third is turned away at once.
    let mut stalled = Vec::new();
    for _ in 0..2 {
        let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
        stream.write_all(&hello[..10]).await.unwrap();
        stalled.push(stream);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let turned_away =
        tokio::time::timeout(Duration::from_millis(500), exchange(proxy.addr, &hello));
    assert_eq!(turned_away.await.expect("closed at once"), "");
    let text = proxy.metrics.encode();
    assert_eq!(
        metric(
            &text,
            "weir_tls_handshake_failures_total{virtual_server=\"s\",reason=\"overload\"}"
        ),
        1
    );
    // Their time runs out: both are closed, and the places are free again.
    for mut stream in stalled {
        assert_eq!(read_all(&mut stream).await, "");
    }
    assert_eq!(
        exchange(proxy.addr, &hello).await,
        format!("P {}", hello.len())
    );
    // A hello for a name weir terminates, finished late, leaves weir's handshake only the
    // rest of the second.
    let other = client_hello("localhost");
    let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
    let started = std::time::Instant::now();
    stream.write_all(&other[..10]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    stream.write_all(&other[10..]).await.unwrap();
    let mut answer = Vec::new();
    let read = tokio::io::AsyncReadExt::read_to_end(&mut stream, &mut answer);
    let _ = tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .expect("closed");
    let closed = started.elapsed();
    assert!(!answer.is_empty(), "weir's TLS answered the hello");
    assert!(
        closed < Duration::from_millis(1450),
        "closed {closed:?} after connecting: the timeout began again after the hello"
    );
    proxy.stop().await;
}

/// On an https or tls virtual server with passthrough rules, a first flight that is not a
/// ClientHello (plain HTTP to the TLS port) is refused by weir's own TLS as without the
/// rules: an alert and a close, counted as a failed handshake (it was a reset, uncounted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_tls_on_a_tls_port_with_passthrough_rules_gets_an_alert() {
    use tokio::io::AsyncReadExt;
    let (proxy, _nodes) = tls_server_passing_through("").await;
    let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: pass.example\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let read = stream.read_to_end(&mut answer);
    let ended = tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .expect("closed");
    assert!(ended.is_ok(), "a clean close, not a reset: {ended:?}");
    assert_eq!(answer.first(), Some(&0x15), "an alert record: {answer:?}");
    // Counted once the handshake's future has returned its failure, which can be after the
    // client read the close (the alert and the close are sent inside it).
    let sample = "weir_tls_handshake_failures_total{virtual_server=\"s\",reason=\"protocol\"}";
    let counted = |proxy: &TestProxy| metric(&proxy.metrics.encode(), sample);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while counted(&proxy) == 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(counted(&proxy), 1);
    proxy.stop().await;
}
