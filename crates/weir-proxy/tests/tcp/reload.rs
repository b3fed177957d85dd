//! TCP virtual servers in a reload: their pools, settings and listeners change like HTTP
//! ones; sessions in flight finish on the model they started with.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use weir_testkit::client::{self, Connection};
use weir_testkit::{TestOrigin, TestProxy};

use crate::support::{Node, exchange, metric, read_all};

fn parse(text: &str) -> weir_config::Config {
    weir_config::parse_str(text, "test.toml").unwrap_or_else(|error| panic!("{error}"))
}

/// Virtual server `l4` (`protocol`) on `listen` over pool `p` = `node`.
fn one(protocol: &str, listen: SocketAddr, node: SocketAddr, extra: &str) -> String {
    format!(
        "[log]\naccess_log = false\nlevel = \"warn\"\n\
         [pools.p]\nnodes = [{{ address = \"{node}\" }}]\n\
         [virtual_servers.l4]\nprotocol = \"{protocol}\"\nlisten = \"{listen}\"\npool = \"p\"\n\
         {extra}\n"
    )
}

fn address(port: u16) -> SocketAddr {
    format!("127.0.0.1:{port}").parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tcp_virtual_server_reloaded_with_a_changed_pool() {
    let a = Node::start("a", Duration::ZERO).await;
    let b = Node::start("b", Duration::ZERO).await;
    let [port] = weir_testkit::free_ports::<1>();
    let listen = address(port);
    let proxy = TestProxy::start(&one("tcp", listen, a.addr, "")).await;
    assert_eq!(exchange(listen, b"hello").await, "a 5");
    // A session in flight across the reload.
    let mut open = TcpStream::connect(listen).await.unwrap();
    open.write_all(b"before").await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;

    // The pool's node and the session settings change; the listener stays.
    let applied = proxy
        .live
        .apply(parse(&one(
            "tcp",
            listen,
            b.addr,
            "[virtual_servers.l4.tcp]\nrelay = \"copy\"\nidle_timeout = \"30s\"",
        )))
        .unwrap();
    assert_eq!(applied.generation, 2);
    assert_eq!(applied.diff.virtual_servers.changed[0].keys, vec!["tcp"]);
    assert!(applied.diff.listeners.added.is_empty());
    assert!(applied.diff.listeners.removed.is_empty());
    for _ in 0..3 {
        assert_eq!(exchange(listen, b"hello").await, "b 5");
    }
    // The session that started on the old model still reaches its node.
    open.write_all(b" after").await.unwrap();
    open.shutdown().await.unwrap();
    assert_eq!(read_all(&mut open).await, "a 12");
    assert_eq!(a.last_received(), b"before after");
    let text = proxy.metrics.encode();
    assert_eq!(
        metric(
            &text,
            "weir_tcp_sessions_total{virtual_server=\"l4\",result=\"closed\"}"
        ),
        5,
        "{text}"
    );
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloads_add_and_remove_tcp_listeners() {
    let node = Node::start("n", Duration::ZERO).await;
    let origin = TestOrigin::start("o").await;
    let [web_port, db_port] = weir_testkit::free_ports::<2>();
    let (web, db) = (address(web_port), address(db_port));
    let http = format!(
        "[log]\naccess_log = false\nlevel = \"warn\"\n\
         [pools.web]\nnodes = [{{ address = \"{}\" }}]\n\
         [pools.p]\nnodes = [{{ address = \"{}\" }}]\n\
         [virtual_servers.web]\nlisten = \"{web}\"\npool = \"web\"\n",
        origin.addr, node.addr
    );
    let proxy = TestProxy::start(&http).await;
    assert!(TcpStream::connect(db).await.is_err(), "not yet listening");

    // A TCP virtual server added by a reload serves at once, beside the HTTP one.
    let with_db = format!(
        "{http}[virtual_servers.db]\nprotocol = \"tcp\"\nlisten = \"{db}\"\npool = \"p\"\n"
    );
    let applied = proxy.live.apply(parse(&with_db)).unwrap();
    assert_eq!(applied.diff.virtual_servers.added, vec!["db"]);
    assert_eq!(applied.diff.listeners.added[0].address, db);
    assert_eq!(exchange(db, b"abc").await, "n 3");
    assert_eq!(client::get(web, "/").await.unwrap().status, 200);
    let db_sessions = "weir_tcp_sessions_total{virtual_server=\"db\",result=\"closed\"}";
    let text = proxy.metrics.encode();
    assert_eq!(metric(&text, db_sessions), 1, "{text}");
    assert!(
        !text.contains("weir_tcp_sessions_total{virtual_server=\"web\""),
        "no layer 4 series for a plain HTTP virtual server: {text}"
    );

    // Removed again: its listener closes, the HTTP one goes on.
    let applied = proxy.live.apply(parse(&http)).unwrap();
    assert_eq!(applied.diff.listeners.removed[0].address, db);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(TcpStream::connect(db).await.is_err(), "removed listener");
    assert_eq!(client::get(web, "/").await.unwrap().status, 200);
    let text = proxy.metrics.encode();
    assert!(
        !text.contains("virtual_server=\"db\""),
        "series dropped: {text}"
    );
    proxy.stop().await;
    origin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_virtual_server_changed_from_http_to_tcp_closes_its_http_connections() {
    let node = Node::start("n", Duration::ZERO).await;
    let origin = TestOrigin::start("o").await;
    let [port] = weir_testkit::free_ports::<1>();
    let listen = address(port);
    let proxy = TestProxy::start(&one("http", listen, origin.addr, "")).await;
    let mut kept = Connection::open(listen).await.unwrap();
    kept.send(b"GET / HTTP/1.1\r\nHost: weir\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(kept.response().await.unwrap().status, 200);

    // Same name, same listener, another protocol (and another pool's node).
    let applied = proxy
        .live
        .apply(parse(&one("tcp", listen, node.addr, "")))
        .unwrap();
    assert_eq!(
        applied.diff.virtual_servers.changed[0].keys[..1],
        ["protocol"]
    );
    // The socket stays; it is rebound in place because a tcp virtual server does not
    // defer the accept (its server may speak first).
    assert!(applied.diff.listeners.added.is_empty() && applied.diff.listeners.removed.is_empty());
    assert_eq!(applied.diff.listeners.rebound.len(), 1);
    // New connections are TCP sessions.
    assert_eq!(exchange(listen, b"raw bytes").await, "n 9");
    // The idle HTTP connection is closed after the drain's grace, not served as TCP.
    assert!(
        kept.is_closed(Duration::from_secs(5)).await,
        "closed within 5 s"
    );
    proxy.stop().await;
    origin.stop().await;
}
