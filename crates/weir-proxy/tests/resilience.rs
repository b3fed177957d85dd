//! Failures end to end: retries, health, timeouts, drain.

use std::net::SocketAddr;
use std::time::Duration;

use weir_testkit::client::{self, Connection};
use weir_testkit::{ClosedPort, TestOrigin, TestProxy, config};

/// An idempotent request whose node refuses the connection is served by another node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_is_retried_on_another_node_after_connect_failure() {
    let closed = ClosedPort::new();
    let dead = closed.addr();
    let origin = TestOrigin::start("alive").await;
    let proxy = TestProxy::start(&config(
        &[dead, origin.addr],
        "algorithm = \"round_robin\"\nretries = 2\n[pools.web.passive_health]\nconsecutive_failures = 0",
        "",
    ))
    .await;
    for _ in 0..6 {
        let response = client::get(proxy.addr, "/").await.unwrap();
        assert_eq!(response.status, 200);
        assert_eq!(response.header("x-origin"), Some("alive"));
    }
    proxy.stop().await;
}

/// A connect failure is retry-safe for any method: the node saw nothing, so a
/// POST goes to another node and still reaches a node exactly once. (A POST
/// that may have reached a node is never sent again: see
/// `stale_connection_retries_get_but_never_post`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_is_retried_after_a_connect_failure_and_sent_once() {
    let closed = ClosedPort::new();
    let dead = closed.addr();
    let origin = TestOrigin::start("alive").await;
    let proxy = TestProxy::start(&config(
        &[dead, origin.addr],
        "algorithm = \"round_robin\"\nretries = 2\n[pools.web.passive_health]\nconsecutive_failures = 0",
        "",
    ))
    .await;
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let mut connection = Connection::open(proxy.addr).await.unwrap();
        connection
            .send(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nhi")
            .await
            .unwrap();
        statuses.push(connection.response().await.unwrap().status);
    }
    assert_eq!(statuses, vec![200; 4]);
    assert_eq!(origin.stats.requests(), 4);
    proxy.stop().await;
}

/// Passive health: a node that keeps failing is ejected, so requests stop going to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_node_is_ejected_passively() {
    let closed = ClosedPort::new();
    let dead = closed.addr();
    let origin = TestOrigin::start("alive").await;
    let proxy = TestProxy::start(&config(
        &[dead, origin.addr],
        "algorithm = \"round_robin\"\nretries = 0\n[pools.web.passive_health]\nconsecutive_failures = 2\nbase_ejection = \"30s\"",
        "",
    ))
    .await;
    let mut failures = 0;
    for _ in 0..20 {
        if client::get(proxy.addr, "/").await.unwrap().status == 502 {
            failures += 1;
        }
    }
    assert_eq!(failures, 2, "the dead node is ejected after two failures");
    assert!(proxy.metrics.encode().contains("weir_node_ejections_total"));
    proxy.stop().await;
}

/// Active health: a node whose monitor fails is taken out, and comes back when it recovers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_monitor_ejects_and_restores() {
    let a = TestOrigin::start("a").await;
    // Held closed until b starts on it: a port only freed could be given to a test
    // running beside this one, and the monitor would find it up.
    let b_port = ClosedPort::new();
    let b_addr = b_port.addr();
    let proxy = TestProxy::start(&config(
        &[a.addr, b_addr],
        "algorithm = \"round_robin\"\nretries = 0\n[pools.web.health]\ntype = \"tcp\"\ninterval = \"100ms\"\ntimeout = \"50ms\"\nrise = 1\nfall = 1\n[pools.web.passive_health]\nconsecutive_failures = 0",
        "",
    ))
    .await;
    // Wait for the monitor to mark b down.
    let pool = &proxy.pools[0];
    wait_until(|| !pool.nodes[1].is_active_up()).await;
    for _ in 0..10 {
        assert_eq!(
            client::get(proxy.addr, "/")
                .await
                .unwrap()
                .header("x-origin"),
            Some("a")
        );
    }
    // Bring b up on the same address.
    let b = TestOrigin::with_options(weir_origin::OriginOptions::new("b", b_port.release())).await;
    wait_until(|| pool.nodes[1].is_active_up()).await;
    let mut seen_b = false;
    for _ in 0..10 {
        seen_b |= client::get(proxy.addr, "/")
            .await
            .unwrap()
            .header("x-origin")
            == Some("b");
    }
    assert!(seen_b);
    proxy.stop().await;
    b.stop().await;
}

async fn wait_until(condition: impl Fn() -> bool) {
    for _ in 0..100 {
        if condition() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("condition not met within 5 s");
}

/// Every node down: 503; with fail_open the request is sent anyway.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_nodes_down_is_503_unless_fail_open() {
    let origin = TestOrigin::start("a").await;
    let pool_settings = "[pools.web.health]\ntype = \"http\"\npath = \"/status/500\"\ninterval = \"100ms\"\ntimeout = \"50ms\"\nrise = 1\nfall = 1";
    let closed = TestProxy::start(&config(&[origin.addr], pool_settings, "")).await;
    wait_until(|| !closed.pools[0].nodes[0].is_active_up()).await;
    let response = client::get(closed.addr, "/").await.unwrap();
    assert_eq!(response.status, 503);
    closed.stop().await;

    let open = TestProxy::start(&config(
        &[origin.addr],
        &format!("fail_open = true\n{pool_settings}"),
        "",
    ))
    .await;
    wait_until(|| !open.pools[0].nodes[0].is_active_up()).await;
    assert_eq!(client::get(open.addr, "/").await.unwrap().status, 200);
    open.stop().await;

    // Fail-open spreads the requests over every node as the balancer would, not over
    // every other one (a failed pick used to take a turn before fail-open's).
    let b = TestOrigin::start("b").await;
    let c = TestOrigin::start("c").await;
    let d = TestOrigin::start("d").await;
    let open = TestProxy::start(&config(
        &[origin.addr, b.addr, c.addr, d.addr],
        &format!("fail_open = true\nalgorithm = \"round_robin\"\n{pool_settings}"),
        "",
    ))
    .await;
    wait_until(|| open.pools[0].nodes.iter().all(|n| !n.is_active_up())).await;
    let mut seen = std::collections::HashMap::new();
    for _ in 0..40 {
        let response = client::get(open.addr, "/").await.unwrap();
        assert_eq!(response.status, 200);
        let name = response.header("x-origin").unwrap_or("?").to_owned();
        *seen.entry(name).or_insert(0) += 1;
    }
    assert_eq!(seen.len(), 4, "{seen:?}");
    assert!(seen.values().all(|&n| n == 10), "{seen:?}");
    open.stop().await;
}

/// A node that does not answer within the response timeout → 504; one that refuses → 502.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_and_refusals_map_to_504_and_502() {
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&config(
        &[origin.addr],
        "[pools.web.timeouts]\nresponse = \"100ms\"",
        "",
    ))
    .await;
    assert_eq!(
        client::get(proxy.addr, "/delay/1000").await.unwrap().status,
        504
    );
    proxy.stop().await;

    let closed = ClosedPort::new();
    let dead = closed.addr();
    let proxy = TestProxy::start(&config(&[dead], "", "")).await;
    assert_eq!(client::get(proxy.addr, "/").await.unwrap().status, 502);
    proxy.stop().await;
}

/// Pipelined requests are answered in order on one connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_are_answered_in_order() {
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&config(&[origin.addr], "", "")).await;
    let mut connection = Connection::open(proxy.addr).await.unwrap();
    connection
        .send(
            b"GET /delay/30 HTTP/1.1\r\nHost: t\r\n\r\nGET /bytes/3 HTTP/1.1\r\nHost: t\r\n\r\nGET /status/404 HTTP/1.1\r\nHost: t\r\n\r\n",
        )
        .await
        .unwrap();
    let first = connection.response().await.unwrap();
    let second = connection.response().await.unwrap();
    let third = connection.response().await.unwrap();
    assert_eq!(first.status, 200);
    assert!(first.text().contains("30"));
    assert_eq!((second.status, second.body.len()), (200, 3));
    assert_eq!(third.status, 404);
    proxy.stop().await;
}

/// The idle timeout counts from each answer, a node's or weir's own (a
/// rule's). The timer a connection armed after its first answer is not moved
/// by the second (that would cost a timer-wheel visit per request): it fires
/// early and moves on, and the connection stays open a whole idle time after
/// its latest answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_idle_timeout_counts_from_the_latest_answer() {
    let origin = TestOrigin::start("a").await;
    let vs = "[virtual_servers.web.timeouts]\nidle = \"1s\"\n\
              [[virtual_servers.web.rules]]\nname = \"ping\"\nmatch = { path = \"/ping\" }\n\
              respond = { status = 200, body = \"pong\" }";
    let proxy = TestProxy::start(&config(&[origin.addr], "", vs)).await;
    // One connection answered by the node, one by the rule.
    let mut connections = Vec::new();
    for path in ["/", "/ping"] {
        connections.push((path, Connection::open(proxy.addr).await.unwrap()));
    }
    for (path, connection) in &mut connections {
        let get = format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n");
        connection.send(get.as_bytes()).await.unwrap();
        assert_eq!(connection.response().await.unwrap().status, 200);
    }
    tokio::time::sleep(Duration::from_millis(600)).await;
    for (path, connection) in &mut connections {
        let get = format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n");
        connection.send(get.as_bytes()).await.unwrap();
        assert_eq!(connection.response().await.unwrap().status, 200);
    }
    let latest = std::time::Instant::now();
    // 1.2 s after the first answers, 0.6 s after the latest.
    tokio::time::sleep(Duration::from_millis(600)).await;
    for (path, connection) in &mut connections {
        assert!(
            !connection.is_closed(Duration::from_millis(20)).await,
            "{path}: closed an idle time after the first answer, not the latest"
        );
    }
    for (path, connection) in &mut connections {
        assert!(connection.is_closed(Duration::from_secs(3)).await, "{path}");
        let idle = latest.elapsed();
        assert!(
            idle >= Duration::from_millis(950),
            "{path}: closed after {idle:?}"
        );
    }
    proxy.stop().await;
    origin.stop().await;
}

/// Graceful drain: an in-flight request finishes (with Connection: close),
/// idle keep-alive connections are closed, new connections are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drains_in_flight_requests() {
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&config(&[origin.addr], "", "")).await;
    let addr = proxy.addr;
    let mut idle = Connection::open(addr).await.unwrap();
    idle.send(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(idle.response().await.unwrap().status, 200);
    let mut busy = Connection::open(addr).await.unwrap();
    busy.send(b"GET /delay/300 HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    proxy.trigger_shutdown();
    let response = busy.response().await.unwrap();
    assert_eq!(response.status, 200);
    assert_eq!(response.header("connection"), Some("close"));
    assert!(idle.is_closed(Duration::from_secs(2)).await);
    proxy.join().await;
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

/// One URL that answers 500 on every node (a client can ask for it as often as it likes)
/// ejects at most `max_ejected_percent` of the pool (half by default, at least one node):
/// the other nodes keep serving, instead of the whole pool answering 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_that_fails_on_every_node_does_not_eject_the_whole_pool() {
    let origins = [
        TestOrigin::start("a").await,
        TestOrigin::start("b").await,
        TestOrigin::start("c").await,
    ];
    let addrs: Vec<SocketAddr> = origins.iter().map(|origin| origin.addr).collect();
    let proxy = TestProxy::start(&config(&addrs, "algorithm = \"round_robin\"", "")).await;
    for _ in 0..30 {
        let response = client::get(proxy.addr, "/status/500").await.unwrap();
        assert_eq!(response.status, 500);
    }
    for _ in 0..6 {
        let response = client::get(proxy.addr, "/").await.unwrap();
        assert_eq!(response.status, 200);
    }
    let now = std::time::Instant::now();
    let ejected = proxy.pools[0]
        .nodes
        .iter()
        .filter(|node| node.is_ejected(now))
        .count();
    assert_eq!(ejected, 1, "one node of three (50 %, rounded down)");
    proxy.stop().await;
    for origin in origins {
        origin.stop().await;
    }
}

/// Nor the only node of a pool: below 100 % the last node is never ejected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_that_fails_does_not_eject_a_pools_only_node() {
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&config(&[origin.addr], "", "")).await;
    for _ in 0..10 {
        let response = client::get(proxy.addr, "/status/500").await.unwrap();
        assert_eq!(response.status, 500);
    }
    let response = client::get(proxy.addr, "/").await.unwrap();
    assert_eq!(response.status, 200);
    assert!(!proxy.pools[0].nodes[0].is_ejected(std::time::Instant::now()));
    proxy.stop().await;
    origin.stop().await;
}

/// The same when the other node goes down by its monitor, with or without `fail_open`: the
/// node that is up (only ejected) takes every request, never the one down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ejected_node_up_serves_before_fail_open_tries_one_down() {
    let origins = [TestOrigin::start("a").await, TestOrigin::start("b").await];
    let addrs: Vec<SocketAddr> = origins.iter().map(|origin| origin.addr).collect();
    for fail_open in [false, true] {
        let pool_extra = format!("fail_open = {fail_open}\nalgorithm = \"round_robin\"");
        let proxy = TestProxy::start(&config(&addrs, &pool_extra, "")).await;
        let pool = &proxy.pools[0];
        for _ in 0..10 {
            pool.record_failure(&pool.nodes[0], std::time::Instant::now());
        }
        assert!(pool.nodes[0].is_ejected(std::time::Instant::now()));
        pool.nodes[1].set_active_up(false);
        for _ in 0..4 {
            let response = client::get(proxy.addr, "/").await.unwrap();
            assert_eq!(response.status, 200, "fail_open = {fail_open}");
            assert_eq!(
                response.header("x-origin"),
                Some("a"),
                "fail_open = {fail_open}"
            );
        }
        proxy.stop().await;
    }
    for origin in origins {
        origin.stop().await;
    }
}

/// A node ejected while another was active keeps serving when that other one is drained or
/// disabled afterwards: below `max_ejected_percent = 100` passive health never takes the
/// whole pool out, also when the last other node leaves after the ejection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ejected_node_serves_once_the_last_other_one_leaves() {
    let origins = [TestOrigin::start("a").await, TestOrigin::start("b").await];
    let addrs: Vec<SocketAddr> = origins.iter().map(|origin| origin.addr).collect();
    let proxy = TestProxy::start(&config(&addrs, "", "")).await;
    let pool = &proxy.pools[0];
    for _ in 0..10 {
        pool.record_failure(&pool.nodes[0], std::time::Instant::now());
    }
    assert!(pool.nodes[0].is_ejected(std::time::Instant::now()));
    for mode in [
        weir_config::NodeMode::Draining,
        weir_config::NodeMode::Disabled,
    ] {
        pool.nodes[1].set_mode(mode);
        let response = client::get(proxy.addr, "/").await.unwrap();
        assert_eq!(response.status, 200, "the other node {mode:?}");
        assert_eq!(response.header("x-origin"), Some("a"));
    }
    proxy.stop().await;
    for origin in origins {
        origin.stop().await;
    }
}

/// Nor the last node still serving when the others are out for other reasons: down by
/// their monitor, or disabled by the operator (the share counts the nodes that take
/// requests). A reload that drops the monitor brings back the nodes it had marked down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_that_fails_does_not_eject_the_last_node_serving() {
    let origins = [
        TestOrigin::start("a").await,
        TestOrigin::start("b").await,
        TestOrigin::start("c").await,
        TestOrigin::start("d").await,
    ];
    let addrs: Vec<SocketAddr> = origins.iter().map(|origin| origin.addr).collect();
    let text = config(&addrs, "algorithm = \"round_robin\"", "");
    let proxy = TestProxy::start(&text).await;
    let nodes = &proxy.pools[0].nodes;
    // Two of four disabled: half of the two left is one.
    nodes[2].set_mode(weir_config::NodeMode::Disabled);
    nodes[3].set_mode(weir_config::NodeMode::Disabled);
    let ejected = || {
        let now = std::time::Instant::now();
        nodes.iter().filter(|node| node.is_ejected(now)).count()
    };
    for _ in 0..20 {
        let response = client::get(proxy.addr, "/status/500").await.unwrap();
        assert_eq!(response.status, 500);
    }
    assert_eq!(ejected(), 1, "one of the two nodes that take requests");
    assert_eq!(client::get(proxy.addr, "/").await.unwrap().status, 200);
    proxy.stop().await;

    // A draining node still takes the requests persistence sticks to it: it fails, it is
    // ejected, the active one being up.
    let proxy = TestProxy::start(&config(&addrs[..2], "", "")).await;
    let pool = &proxy.pools[0];
    pool.nodes[1].set_mode(weir_config::NodeMode::Draining);
    for _ in 0..10 {
        pool.record_failure(&pool.nodes[1], std::time::Instant::now());
    }
    assert!(pool.nodes[1].is_ejected(std::time::Instant::now()));
    proxy.stop().await;

    // The active one failing, the other draining: it stays in, since the draining one
    // takes no new sessions.
    let proxy = TestProxy::start(&config(&addrs[..2], "", "")).await;
    let pool = &proxy.pools[0];
    pool.nodes[1].set_mode(weir_config::NodeMode::Draining);
    for _ in 0..10 {
        pool.record_failure(&pool.nodes[0], std::time::Instant::now());
    }
    assert!(!pool.nodes[0].is_ejected(std::time::Instant::now()));
    proxy.stop().await;

    // One down by its monitor: the other is the last one serving.
    let proxy = TestProxy::start(&text).await;
    let nodes = &proxy.pools[0].nodes;
    nodes[0].set_active_up(false);
    nodes[2].set_mode(weir_config::NodeMode::Disabled);
    nodes[3].set_mode(weir_config::NodeMode::Disabled);
    for _ in 0..20 {
        let response = client::get(proxy.addr, "/status/500").await.unwrap();
        assert_eq!(response.status, 500);
    }
    let now = std::time::Instant::now();
    assert!(!nodes[1].is_ejected(now));
    assert_eq!(client::get(proxy.addr, "/").await.unwrap().status, 200);
    proxy.stop().await;

    // A monitor that marks every node down, then a reload without it: they come back.
    let checked = config(
        &addrs,
        "[pools.web.health]\ntype = \"http\"\npath = \"/status/500\"\n\
         interval = \"100ms\"\ntimeout = \"90ms\"\nfall = 1\nrise = 1",
        "",
    );
    let proxy = TestProxy::start(&checked).await;
    let all_down = tokio::time::timeout(Duration::from_secs(5), async {
        while proxy.pools[0].nodes.iter().any(|node| node.is_active_up()) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(all_down.is_ok(), "the monitor marks the nodes down");
    proxy
        .live
        .apply(weir_config::parse_str(&text, "test.toml").unwrap())
        .unwrap();
    let model = proxy.live.current();
    assert!(
        model
            .pool("web")
            .unwrap()
            .nodes
            .iter()
            .all(|node| node.is_active_up())
    );
    assert_eq!(client::get(proxy.addr, "/").await.unwrap().status, 200);
    proxy.stop().await;
    for origin in origins {
        origin.stop().await;
    }
}

/// A proxy whose drain ends 300 ms after the shutdown begins, with a JSON access log.
async fn short_drain_proxy(origin: SocketAddr, name: &str) -> (TestProxy, std::path::PathBuf) {
    let log =
        std::env::temp_dir().join(format!("weir-cut-drain-{name}-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let toml = format!(
        "[runtime]\ndrain_timeout = \"300ms\"\n\
         [log]\naccess_log = true\naccess_log_format = \"json\"\naccess_log_file = \"{}\"\n\
         level = \"warn\"\n\
         [pools.web]\nnodes = [{{ address = \"{origin}\" }}]\n\
         [virtual_servers.web]\nlisten = [\"127.0.0.1:0\"]\npool = \"web\"\n\
         [virtual_servers.web.http2]\ncleartext = true\n",
        log.display(),
    );
    (TestProxy::start(&toml).await, log)
}

/// The `bytes_sent` of a JSON access record.
fn bytes_sent(record: &str) -> u64 {
    record
        .split("\"bytes_sent\":")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .and_then(|number| number.parse().ok())
        .expect("bytes_sent")
}

/// Reads `stream` up to and through the blank line that ends a head.
async fn read_head_bytes(stream: &mut tokio::net::TcpStream) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        stream.read_exact(&mut byte).await.unwrap();
        head.push(byte[0]);
    }
    head
}

/// Waits for `proxy`'s drain to end, then returns its access log's text.
async fn logged_after_drain(proxy: TestProxy, log: &std::path::Path) -> String {
    let live = std::sync::Arc::clone(&proxy.live);
    proxy.join().await;
    live.flush_access_log();
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let _ = std::fs::remove_file(log);
    text
}

/// A request still waiting for its node when the drain timeout passes is answered 503 (its
/// client can tell it was not served) and logged, instead of ending unrecorded with the
/// process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_waiting_at_the_drain_timeout_gets_503_and_a_record() {
    let origin = TestOrigin::start("a").await;
    let (proxy, log) = short_drain_proxy(origin.addr, "waiting").await;
    let mut busy = Connection::open(proxy.addr).await.unwrap();
    busy.send(b"GET /delay/5000 HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    proxy.trigger_shutdown();
    let response = busy.response().await.unwrap();
    assert_eq!(response.status, 503);
    assert_eq!(response.header("connection"), Some("close"));
    let text = logged_after_drain(proxy, &log).await;
    let records: Vec<&str> = text.lines().collect();
    assert_eq!(records.len(), 1, "{text}");
    // The node had the request: the record names it (docs/logging.md).
    let node = format!(r#""node":"{}""#, origin.addr);
    for field in [
        r#""status":503"#,
        r#""uri":"/delay/5000""#,
        r#""error":"shutting_down""#,
        &node,
    ] {
        assert!(records[0].contains(field), "{field}: {text}");
    }
    origin.stop().await;
}

/// An answer still going out when the drain timeout passes (a client that does not read)
/// is cut, and logged with its status and what had gone out of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_under_way_at_the_drain_timeout_is_cut_and_logged() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let origin = TestOrigin::start("a").await;
    let (proxy, log) = short_drain_proxy(origin.addr, "answering").await;
    let mut stream = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    stream
        .write_all(b"GET /bytes/200000000 HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    // Read nothing until weir is stuck on the full socket.
    tokio::time::sleep(Duration::from_millis(300)).await;
    proxy.trigger_shutdown();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut received = 0u64;
    let mut buf = vec![0u8; 1 << 16];
    let read_all = async {
        while let Ok(n) = stream.read(&mut buf).await {
            if n == 0 {
                break;
            }
            received += n as u64;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read_all)
        .await
        .expect("the connection ends");
    assert!(received < 200_000_000, "the whole answer arrived");
    let text = logged_after_drain(proxy, &log).await;
    let records: Vec<&str> = text.lines().collect();
    assert_eq!(records.len(), 1, "{text}");
    for field in [r#""status":200"#, r#""error":"shutting_down""#] {
        assert!(records[0].contains(field), "{field}: {text}");
    }
    let sent = bytes_sent(records[0]);
    assert!(sent > 0 && sent < 200_000_000, "{text}");
    origin.stop().await;
}

/// A WebSocket cut at the drain timeout is logged with what its tunnel carried to the
/// client, not only the 101's head (the relay, dropped by the cut, kept the count).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tunnel_cut_at_the_drain_timeout_is_logged_with_its_bytes() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // A node that switches, then echoes.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let node = listener.local_addr().unwrap();
    let echo = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        read_head_bytes(&mut stream).await;
        stream
            .write_all(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
            .await
            .unwrap();
        let (mut reader, mut writer) = stream.split();
        let _ = tokio::io::copy(&mut reader, &mut writer).await;
    });
    let (proxy, log) = short_drain_proxy(node, "tunnel").await;
    let mut stream = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    stream
        .write_all(
            b"GET /chat HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
        )
        .await
        .unwrap();
    let head = read_head_bytes(&mut stream).await;
    stream.write_all(&[b'x'; 1000]).await.unwrap();
    let mut echoed = vec![0u8; 1000];
    stream.read_exact(&mut echoed).await.unwrap();
    proxy.trigger_shutdown();
    let text = logged_after_drain(proxy, &log).await;
    let records: Vec<&str> = text.lines().collect();
    assert_eq!(records.len(), 1, "{text}");
    for field in [r#""status":101"#, r#""error":"shutting_down""#] {
        assert!(records[0].contains(field), "{field}: {text}");
    }
    let sent = bytes_sent(records[0]);
    assert_eq!(sent, head.len() as u64 + 1000, "{text}");
    drop(stream);
    echo.abort();
}

/// The same for a request on an HTTP/2 connection (h2c): its stream gets the 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_stream_waiting_at_the_drain_timeout_gets_503_and_a_record() {
    let origin = TestOrigin::start("a").await;
    let (proxy, log) = short_drain_proxy(origin.addr, "h2").await;
    let tcp = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    let (mut sender, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    let request = http::Request::get(format!("http://{}/delay/5000", proxy.addr))
        .body(())
        .unwrap();
    let (response, _) = sender.send_request(request, true).unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    proxy.trigger_shutdown();
    let response = tokio::time::timeout(Duration::from_secs(5), response)
        .await
        .expect("answered in time")
        .expect("an answer, not a reset");
    assert_eq!(response.status(), 503);
    let text = logged_after_drain(proxy, &log).await;
    let records: Vec<&str> = text.lines().collect();
    assert_eq!(records.len(), 1, "{text}");
    for field in [
        r#""status":503"#,
        r#""version":"HTTP/2.0""#,
        r#""error":"shutting_down""#,
    ] {
        assert!(records[0].contains(field), "{field}: {text}");
    }
    origin.stop().await;
}

/// A pooled connection that the node closed while idle is not used: the
/// next request goes out on a fresh connection and succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_closed_by_the_node_while_idle_is_replaced() {
    let origin = TestOrigin::with_options(weir_origin::OriginOptions {
        idle_timeout: Duration::from_millis(100),
        ..weir_origin::OriginOptions::new("a", "127.0.0.1:0".parse().unwrap())
    })
    .await;
    let proxy = TestProxy::start(&config(&[origin.addr], "retries = 0", "")).await;
    for _ in 0..3 {
        assert_eq!(client::get(proxy.addr, "/").await.unwrap().status, 200);
        // Longer than the origin's idle timeout: it closes the pooled connection.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // POST too: it must not be sent on the dead connection (it would not be retried).
    let mut connection = Connection::open(proxy.addr).await.unwrap();
    connection
        .send(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nhi")
        .await
        .unwrap();
    assert_eq!(connection.response().await.unwrap().status, 200);
    assert_eq!(origin.stats.connections_accepted(), 4);
    assert_eq!(origin.stats.requests(), 4);
    proxy.stop().await;
}

/// Reads the next request from a test node's connection: `false` once the client closed.
/// Each test request is a head plus at most a tiny body, sent in one write.
async fn next_request(stream: &mut tokio::net::TcpStream) -> bool {
    use tokio::io::AsyncReadExt;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    true
}

/// A node that answers every request with `Keep-Alive: <keep_alive>` and never closes a
/// connection itself. Returns its address and the number of connections it accepted.
async fn keep_alive_node(
    keep_alive: &'static str,
) -> (SocketAddr, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::Ordering;
    use tokio::io::AsyncWriteExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = std::sync::Arc::clone(&accepted);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                while next_request(&mut stream).await {
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\nKeep-Alive: {keep_alive}\r\nContent-Length: 2\r\n\r\nok"
                    );
                    if stream.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (address, accepted)
}

/// A node that says it keeps idle connections for a second (`Keep-Alive: timeout=1`, as
/// Apache httpd says with its own figure) gets no request on one idle for longer than
/// half of that: the request would cross the node's close and be lost, and a POST cannot
/// be sent again. Within that time the connection is reused; `timeout=0` is never reused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_keep_alive_timeout_bounds_how_long_its_connections_are_reused() {
    use std::sync::atomic::Ordering;
    let post = b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nhi";
    let (node, accepted) = keep_alive_node("timeout=1, max=100").await;
    let proxy = TestProxy::start(&config(&[node], "retries = 0", "")).await;
    let mut connection = Connection::open(proxy.addr).await.unwrap();
    for _ in 0..3 {
        connection.send(post).await.unwrap();
        assert_eq!(connection.response().await.unwrap().status, 200);
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 1, "reused at once");
    tokio::time::sleep(Duration::from_millis(700)).await;
    connection.send(post).await.unwrap();
    assert_eq!(connection.response().await.unwrap().status, 200);
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        2,
        "idle past the node's limit less its margin: a new connection"
    );
    proxy.stop().await;

    let (node, accepted) = keep_alive_node("timeout=0").await;
    let proxy = TestProxy::start(&config(&[node], "retries = 0", "")).await;
    let mut connection = Connection::open(proxy.addr).await.unwrap();
    for _ in 0..3 {
        connection.send(post).await.unwrap();
        assert_eq!(connection.response().await.unwrap().status, 200);
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        3,
        "timeout=0: one request each"
    );
    proxy.stop().await;
}

/// A node that answers the first request on each connection, then closes the
/// connection without answering the next (the race a liveness probe cannot
/// catch). Returns its address and the number of requests it has received.
async fn one_answer_per_connection_node()
-> (SocketAddr, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    one_answer_per_connection_node_after(Duration::ZERO).await
}

/// [`one_answer_per_connection_node`], with each answer sent `delay` after its request.
async fn one_answer_per_connection_node_after(
    delay: Duration,
) -> (SocketAddr, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::Ordering;
    use tokio::io::AsyncWriteExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let received = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = std::sync::Arc::clone(&received);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let counter = std::sync::Arc::clone(&counter);
            tokio::spawn(async move {
                let mut answered = false;
                while next_request(&mut stream).await {
                    counter.fetch_add(1, Ordering::SeqCst);
                    if answered {
                        return; // close without an answer
                    }
                    answered = true;
                    tokio::time::sleep(delay).await;
                    let _ = stream
                        .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                        .await;
                }
            });
        }
    });
    (address, received)
}

/// GET on a reused connection that dies before any response byte is retried
/// once on a fresh connection; POST is never sent twice (502).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_connection_retries_get_but_never_post() {
    use std::sync::atomic::Ordering;
    let (node, received) = one_answer_per_connection_node().await;
    let proxy = TestProxy::start(&config(
        &[node],
        "retries = 0\n[pools.web.passive_health]\nconsecutive_failures = 0",
        "",
    ))
    .await;
    assert_eq!(client::get(proxy.addr, "/").await.unwrap().status, 200);
    // Reuses the pooled connection; the node drops it; weir retries on a new one.
    assert_eq!(client::get(proxy.addr, "/").await.unwrap().status, 200);
    assert_eq!(received.load(Ordering::SeqCst), 3);

    let post = |addr| async move {
        let mut connection = Connection::open(addr).await.unwrap();
        connection
            .send(b"POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nhi")
            .await
            .unwrap();
        connection.response().await.unwrap().status
    };
    // The pooled connection (fresh from the retry) has answered once: the POST on it is dropped.
    assert_eq!(post(proxy.addr).await, 502);
    assert_eq!(
        received.load(Ordering::SeqCst),
        4,
        "the POST reached the node exactly once"
    );
    proxy.stop().await;
}

/// A GET whose reused connection the node had closed is sent again on a new connection,
/// not on another idle one, which may be as dead: the node sees it twice, not once per
/// idle connection the pool held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_sent_again_goes_on_a_new_connection() {
    use std::sync::atomic::Ordering;
    let (node, received) = one_answer_per_connection_node_after(Duration::from_millis(100)).await;
    let proxy = TestProxy::start(&config(
        &[node],
        "retries = 0\n[pools.web.passive_health]\nconsecutive_failures = 0",
        "",
    ))
    .await;
    // Three at once: three connections, each answered once and then idle in the pool.
    let addr = proxy.addr;
    let (a, b, c) = tokio::join!(
        client::get(addr, "/"),
        client::get(addr, "/"),
        client::get(addr, "/")
    );
    for response in [a, b, c] {
        assert_eq!(response.unwrap().status, 200);
    }
    assert_eq!(received.load(Ordering::SeqCst), 3);
    // Reuses one idle connection, which the node drops; sent again on a new one.
    assert_eq!(client::get(addr, "/").await.unwrap().status, 200);
    assert_eq!(
        received.load(Ordering::SeqCst),
        5,
        "sent twice, not four times"
    );
    proxy.stop().await;
}

/// A round-robin pool of `a` and `b`, one connection each (its reaper every 100 ms), with
/// four requests for `path` sent: one at each node, one waiting in each node's queue.
async fn two_nodes_each_with_a_waiter(
    a: &TestOrigin,
    b: &TestOrigin,
    path: &'static str,
) -> (TestProxy, Vec<tokio::task::JoinHandle<client::Response>>) {
    let proxy = TestProxy::start(&config(
        &[a.addr, b.addr],
        "algorithm = \"round_robin\"\nretries = 0\n\
         [pools.web.connections]\nmax_connections = 1\nidle_timeout = \"400ms\"",
        "",
    ))
    .await;
    let addr = proxy.addr;
    let requests: Vec<_> = (0..4)
        .map(|_| tokio::spawn(async move { client::get(addr, path).await.expect("a response") }))
        .collect();
    let queued = |index: usize| proxy.live.current().pools[0].connections[index].queued();
    for _ in 0..100 {
        if queued(0) == 1 && queued(1) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!((queued(0), queued(1)), (1, 1));
    (proxy, requests)
}

/// Requests waiting in the queue of a node that is marked down move to a node that is up
/// (the pool's reaper, within one of its periods), as HAProxy redistributes a down server's
/// queue; they spend no retry (`retries = 0`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_waiting_for_a_node_marked_down_move_to_one_that_is_up() {
    let (a, b) = (TestOrigin::start("a").await, TestOrigin::start("b").await);
    let (proxy, requests) = two_nodes_each_with_a_waiter(&a, &b, "/delay/1500").await;
    let queued = |index: usize| proxy.live.current().pools[0].connections[index].queued();
    proxy.live.current().pools[0].nodes[0].set_active_up(false);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!((queued(0), queued(1)), (0, 2), "a's waiter moved to b");
    let mut origins = Vec::new();
    for request in requests {
        let response = request.await.unwrap();
        assert_eq!(response.status, 200);
        origins.push(response.header("x-origin").unwrap_or_default().to_owned());
    }
    origins.sort();
    assert_eq!(origins, ["a", "b", "b", "b"]);
    proxy.stop().await;
    a.stop().await;
    b.stop().await;
}

/// With every node down there is nowhere better to go: the waiters stay in their queues and
/// are served when their nodes' connections come back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_waiting_stay_when_no_node_is_up() {
    let (a, b) = (TestOrigin::start("a").await, TestOrigin::start("b").await);
    let (proxy, requests) = two_nodes_each_with_a_waiter(&a, &b, "/delay/800").await;
    let queued = |index: usize| proxy.live.current().pools[0].connections[index].queued();
    for node in &proxy.live.current().pools[0].nodes {
        node.set_active_up(false);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        (queued(0), queued(1)),
        (1, 1),
        "no node is up: the waiters stay"
    );
    let mut origins = Vec::new();
    for request in requests {
        let response = request.await.unwrap();
        assert_eq!(response.status, 200);
        origins.push(response.header("x-origin").unwrap_or_default().to_owned());
    }
    origins.sort();
    assert_eq!(origins, ["a", "a", "b", "b"]);
    proxy.stop().await;
    a.stop().await;
    b.stop().await;
}
