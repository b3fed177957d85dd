use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket};
use weir_config::{HealthCheckKind, HealthMonitor, PassiveHealth};
use weir_core::Shutdown;
use weir_observe::Metrics;

use super::*;
use crate::node::NodeState;

fn count(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).expect("test counts are non-zero")
}

#[test]
fn rise_fall_starts_up_and_needs_fall_failures_in_a_row() {
    let mut verdict = RiseFall::new(count(2), count(3));
    assert_eq!(verdict.state(), Health::Up);
    assert_eq!(verdict.observe(false), None);
    assert_eq!(verdict.observe(false), None);
    // A success in between starts the count again.
    assert_eq!(verdict.observe(true), None);
    assert_eq!(verdict.observe(false), None);
    assert_eq!(verdict.observe(false), None);
    assert_eq!(verdict.observe(false), Some(Transition::WentDown));
    assert_eq!(verdict.state(), Health::Down);
    // Further failures report nothing more.
    assert_eq!(verdict.observe(false), None);
}

#[test]
fn rise_fall_needs_rise_successes_in_a_row_to_come_back() {
    let mut verdict = RiseFall::starting(count(3), count(1), Health::Down);
    assert_eq!(verdict.observe(true), None);
    assert_eq!(verdict.observe(true), None);
    assert_eq!(verdict.observe(false), None);
    assert_eq!(verdict.observe(true), None);
    assert_eq!(verdict.observe(true), None);
    assert_eq!(verdict.observe(true), Some(Transition::WentUp));
    assert_eq!(verdict.state(), Health::Up);
    assert_eq!(verdict.observe(true), None);
    // fall = 1: one failure takes it down.
    assert_eq!(verdict.observe(false), Some(Transition::WentDown));
}

#[test]
fn rise_fall_of_one_follows_every_result() {
    let mut verdict = RiseFall::new(count(1), count(1));
    assert_eq!(verdict.observe(false), Some(Transition::WentDown));
    assert_eq!(verdict.observe(true), Some(Transition::WentUp));
    assert_eq!(verdict.observe(true), None);
}

#[test]
fn http_request_bytes() {
    assert_eq!(
        http_request("HEAD", "/health", "app.example"),
        b"HEAD /health HTTP/1.1\r\nHost: app.example\r\nUser-Agent: weir-health\r\nConnection: close\r\n\r\n"
    );
}

#[test]
fn answer_parsing() {
    assert_eq!(parse_answer(b"", "GET"), Ok(None));
    assert_eq!(parse_answer(b"HTTP/1.1 20", "GET"), Ok(None));
    assert_eq!(parse_answer(b"HTTP/1.1 200 OK\r\n", "GET"), Ok(None));
    assert_eq!(
        parse_answer(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n", "GET"),
        Ok(Some(200))
    );
    assert_eq!(
        parse_answer(b"HTTP/1.0 503 Busy\r\nServer: x\r\n\r\n", "HEAD"),
        Ok(Some(503))
    );
    assert_eq!(
        parse_answer(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
            "GET"
        ),
        Ok(Some(204))
    );
    for bad in [
        &b"SSH-2.0-OpenSSH\r\n\r\n"[..],
        b"HTTP/1.1 2000 OK\r\n\r\n",
        // What the proxy would refuse from the node: a bare LF, two lengths.
        b"HTTP/1.1 204\n\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
    ] {
        assert_eq!(
            parse_answer(bad, "GET"),
            Err(CheckFailure::Malformed),
            "{bad:?}"
        );
    }
    let endless = vec![b'a'; MAX_ANSWER_HEAD + 1];
    assert_eq!(parse_answer(&endless, "GET"), Err(CheckFailure::Malformed));
    // Interim answers without end: a few are skipped, more fail the check at once, and a
    // stream of them past one head's bound fails it before a final answer could be whole.
    let interim = |count: usize| b"HTTP/1.1 100 Continue\r\n\r\n".repeat(count);
    let final_after = |count: usize| [interim(count), b"HTTP/1.1 200 OK\r\n\r\n".to_vec()].concat();
    assert_eq!(parse_answer(&final_after(8), "GET"), Ok(Some(200)));
    assert_eq!(
        parse_answer(&final_after(9), "GET"),
        Err(CheckFailure::Malformed)
    );
    let mut flood = interim(8);
    flood.extend_from_slice(b"HTTP/1.1 200 OK\r\nX: ");
    flood.resize(MAX_ANSWER_HEAD + 1, b'x');
    assert_eq!(parse_answer(&flood, "GET"), Err(CheckFailure::Malformed));
    // A whole answer whose body came in the same read is not too long, however long.
    let mut large = b"HTTP/1.1 200 OK\r\nContent-Length: 70000\r\n\r\n".to_vec();
    large.resize(70_000, b'b');
    assert_eq!(parse_answer(&large, "GET"), Ok(Some(200)));
}

#[test]
fn expected_status_ranges_are_inclusive() {
    let ranges = [(200, 299), (302, 302)];
    assert!(status_expected(200, &ranges));
    assert!(status_expected(299, &ranges));
    assert!(status_expected(302, &ranges));
    assert!(!status_expected(301, &ranges));
    assert!(!status_expected(500, &ranges));
    assert!(!status_expected(200, &[]));
}

#[test]
fn failure_reasons_read_well() {
    assert_eq!(CheckFailure::ConnectRefused.to_string(), "connect refused");
    assert_eq!(CheckFailure::Status(500).to_string(), "status 500");
    assert_eq!(CheckFailure::Timeout.to_string(), "timeout");
}

fn node_at(address: SocketAddr, passive: PassiveHealth) -> Arc<NodeState> {
    let metrics = Metrics::new().node("test", &address.to_string());
    Arc::new(NodeState::new(address, 1, passive, metrics))
}

fn passive_off() -> PassiveHealth {
    PassiveHealth {
        consecutive_failures: 0,
        base_ejection: Duration::from_secs(1),
        max_ejection: Duration::from_secs(1),
        max_ejected_percent: 100,
    }
}

fn monitor(check: HealthCheckKind, timeout: Duration) -> HealthMonitor {
    HealthMonitor {
        check,
        interval: Duration::from_millis(20),
        timeout,
        rise: count(2),
        fall: count(2),
    }
}

fn http_check() -> HealthCheckKind {
    HealthCheckKind::Http {
        method: "GET".to_owned(),
        path: "/health".to_owned(),
        host: None,
        expect_status: vec![(200, 399)],
    }
}

/// The monitor of `node` alone, in a plain HTTP/1.1 pool named `web`, until `signal`.
fn monitor_one(
    node: &Arc<NodeState>,
    settings: &HealthMonitor,
    signal: weir_core::ShutdownSignal,
) -> Vec<tokio::task::JoinHandle<()>> {
    spawn_monitors(
        "web",
        &[Arc::clone(node)],
        settings,
        (&[], &[], None, UpstreamProtocol::Http1),
        signal,
    )
}

/// The connections of a node at `address` capped at one.
fn one_slot(address: SocketAddr) -> Arc<NodeConnections> {
    let metrics = Metrics::new();
    let settings = crate::connection::ConnectionSettings {
        max_connections: 1,
        queue_length: 0,
        queue_timeout: Duration::from_secs(1),
        fair_queue: true,
        idle_timeout: Duration::from_secs(30),
        connect_timeout: Duration::from_secs(1),
        max_requests: None,
        max_tunnels: 0,
        tls: None,
    };
    NodeConnections::new(
        address,
        settings,
        metrics.node("web", "n"),
        metrics.pool("web"),
    )
}

/// An HTTP check of `node` every 20 ms (100 ms timeout), its checks within `connections`.
fn monitor_capped(
    node: &Arc<NodeState>,
    connections: &Arc<NodeConnections>,
    signal: weir_core::ShutdownSignal,
) -> Vec<tokio::task::JoinHandle<()>> {
    spawn_monitors(
        "web",
        &[Arc::clone(node)],
        &monitor(http_check(), Duration::from_millis(100)),
        (
            &[],
            &[Arc::clone(connections)],
            None,
            UpstreamProtocol::Http1,
        ),
        signal,
    )
}

/// Polls until the node's active verdict is `up`; panics after 5 s.
async fn wait_for_active_up(node: &NodeState, up: bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while node.is_active_up() != up {
        assert!(
            Instant::now() < deadline,
            "node never became {}",
            if up { "up" } else { "down" }
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A listener that may be re-bound on the same port after being dropped.
/// Stops the monitors and waits (1 s at most each) for their tasks to end.
async fn stop_monitors(owner: Shutdown, tasks: Vec<tokio::task::JoinHandle<()>>) {
    owner.trigger();
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(1), task)
            .await
            .expect("monitor stops")
            .unwrap();
    }
}

fn listen(address: SocketAddr) -> TcpListener {
    let socket = TcpSocket::new_v4().expect("socket");
    socket.set_reuseaddr(true).expect("SO_REUSEADDR");
    socket.bind(address).expect("bind");
    socket.listen(128).expect("listen")
}

/// Accepts and closes connections until aborted.
fn accept_and_close(listener: TcpListener) -> tokio::task::JoinHandle<()> {
    counted_accepts(listener).0
}

/// [`accept_and_close`], counting the connections.
fn counted_accepts(listener: TcpListener) -> (tokio::task::JoinHandle<()>, Arc<AtomicU16>) {
    let accepted = Arc::new(AtomicU16::new(0));
    let counted = Arc::clone(&accepted);
    let server = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::Relaxed);
            drop(stream);
        }
    });
    (server, accepted)
}

/// Answers every request with the status currently in `status`.
fn answer_with(listener: TcpListener, status: Arc<AtomicU16>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let status = status.load(Ordering::Relaxed);
            tokio::spawn(async move {
                let mut request = Vec::new();
                while !request.ends_with(b"\r\n\r\n") {
                    if stream.read_buf(&mut request).await.unwrap_or(0) == 0 {
                        return;
                    }
                }
                let answer = format!("HTTP/1.1 {status} Whatever\r\nContent-Length: 0\r\n\r\n");
                let _ = stream.write_all(answer.as_bytes()).await;
            });
        }
    })
}

#[tokio::test]
async fn tcp_monitor_follows_the_listener_going_and_coming_back() {
    let listener = listen(SocketAddr::from(([127, 0, 0, 1], 0)));
    let address = listener.local_addr().unwrap();
    let server = accept_and_close(listener);
    let node = node_at(address, passive_off());
    let (owner, signal) = Shutdown::new();
    let tasks = monitor_one(
        &node,
        &monitor(HealthCheckKind::Tcp, Duration::from_millis(500)),
        signal,
    );
    assert_eq!(tasks.len(), 1);

    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(node.is_active_up());

    server.abort();
    let _ = server.await;
    wait_for_active_up(&node, false).await;
    assert!(!node.is_available(Instant::now()));
    assert_eq!(node.metrics.healthy.get(), 0);

    let server = accept_and_close(listen(address));
    wait_for_active_up(&node, true).await;
    assert!(node.is_available(Instant::now()));
    assert_eq!(node.metrics.healthy.get(), 1);

    stop_monitors(owner, tasks).await;
    server.abort();
}

#[tokio::test]
async fn http_monitor_goes_down_on_500_and_up_on_200() {
    let listener = listen(SocketAddr::from(([127, 0, 0, 1], 0)));
    let address = listener.local_addr().unwrap();
    let status = Arc::new(AtomicU16::new(200));
    let server = answer_with(listener, Arc::clone(&status));
    assert_eq!(
        check(address, &http_check(), None, Duration::from_secs(1)).await,
        Ok(())
    );

    let node = node_at(address, passive_off());
    let (owner, signal) = Shutdown::new();
    let tasks = monitor_one(
        &node,
        &monitor(http_check(), Duration::from_millis(500)),
        signal,
    );

    status.store(500, Ordering::Relaxed);
    assert_eq!(
        check(address, &http_check(), None, Duration::from_secs(1)).await,
        Err(CheckFailure::Status(500))
    );
    wait_for_active_up(&node, false).await;
    status.store(200, Ordering::Relaxed);
    wait_for_active_up(&node, true).await;

    stop_monitors(owner, tasks).await;
    server.abort();
}

/// A node that expects a PROXY header (as HAProxy's `accept-proxy` does): a connection that
/// starts without one is closed; one that starts with a header made on the proxy's own
/// behalf (no client addresses) gets its answer. Each connection's first bytes are counted
/// as headed or not.
fn answer_behind_proxy_protocol(
    listener: TcpListener,
    headed: Arc<AtomicU16>,
    bare: Arc<AtomicU16>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let (headed, bare) = (Arc::clone(&headed), Arc::clone(&bare));
            tokio::spawn(async move {
                let mut received = Vec::new();
                let used = loop {
                    if stream.read_buf(&mut received).await.unwrap_or(0) == 0 {
                        return;
                    }
                    match weir_proxy_protocol::parse(&received) {
                        Ok(weir_proxy_protocol::Parsed::Complete { header, consumed }) => {
                            assert_eq!(header.source(), None, "a check names no client");
                            break consumed;
                        }
                        Ok(weir_proxy_protocol::Parsed::Partial) => {}
                        Err(_) => {
                            bare.fetch_add(1, Ordering::Relaxed);
                            return;
                        }
                    }
                };
                headed.fetch_add(1, Ordering::Relaxed);
                let mut request = received.split_off(used);
                while !request.ends_with(b"\r\n\r\n") {
                    if stream.read_buf(&mut request).await.unwrap_or(0) == 0 {
                        return;
                    }
                }
                let _ = stream
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                    .await;
            });
        }
    })
}

#[tokio::test]
async fn checks_of_a_proxy_protocol_pool_start_with_a_local_header() {
    for version in [ProxyVersion::V1, ProxyVersion::V2] {
        let listener = listen(SocketAddr::from(([127, 0, 0, 1], 0)));
        let address = listener.local_addr().unwrap();
        let (headed, bare) = (Arc::new(AtomicU16::new(0)), Arc::new(AtomicU16::new(0)));
        let server = answer_behind_proxy_protocol(listener, Arc::clone(&headed), Arc::clone(&bare));
        // Without the header, the node closes the check's connection.
        let bare_check = check(address, &http_check(), None, Duration::from_secs(1)).await;
        assert!(
            matches!(bare_check, Err(CheckFailure::Closed | CheckFailure::Io(_))),
            "{bare_check:?}"
        );
        let node = node_at(address, passive_off());
        node.set_active_up(false);
        let (owner, signal) = Shutdown::new();
        let settings = monitor(http_check(), Duration::from_millis(500));
        let tasks = spawn_monitors(
            "db",
            &[Arc::clone(&node)],
            &settings,
            (&[], &[], Some(version), UpstreamProtocol::Http1),
            signal,
        );
        wait_for_active_up(&node, true).await;
        stop_monitors(owner, tasks).await;
        // A TCP check's connection starts with the header too.
        let (owner, signal) = Shutdown::new();
        let before = headed.load(Ordering::Relaxed);
        let tcp = monitor(HealthCheckKind::Tcp, Duration::from_millis(500));
        let tasks = spawn_monitors(
            "db",
            &[Arc::clone(&node)],
            &tcp,
            (&[], &[], Some(version), UpstreamProtocol::Http1),
            signal,
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while headed.load(Ordering::Relaxed) == before {
            assert!(
                Instant::now() < deadline,
                "{version:?}: no TCP check came with a header"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        stop_monitors(owner, tasks).await;
        assert_eq!(
            bare.load(Ordering::Relaxed),
            1,
            "{version:?}: only the bare check"
        );
        server.abort();
    }
}

#[tokio::test]
async fn a_check_that_times_out_counts_as_failed() {
    let listener = listen(SocketAddr::from(([127, 0, 0, 1], 0)));
    let address = listener.local_addr().unwrap();
    // Accepts, reads, never answers.
    let server = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    let timeout = Duration::from_millis(50);
    assert_eq!(
        check(address, &http_check(), None, timeout).await,
        Err(CheckFailure::Timeout)
    );

    let node = node_at(address, passive_off());
    let (owner, signal) = Shutdown::new();
    let tasks = monitor_one(&node, &monitor(http_check(), timeout), signal);
    wait_for_active_up(&node, false).await;
    stop_monitors(owner, tasks).await;
    server.abort();
}

#[tokio::test]
async fn a_refused_connect_and_an_early_close_are_failures() {
    let listener = listen(SocketAddr::from(([127, 0, 0, 1], 0)));
    let address = listener.local_addr().unwrap();
    let server = accept_and_close(listener);
    let timeout = Duration::from_secs(1);
    assert_eq!(
        check(address, &HealthCheckKind::Tcp, None, timeout).await,
        Ok(())
    );
    let closed = check(address, &http_check(), None, timeout).await;
    assert!(
        matches!(closed, Err(CheckFailure::Closed | CheckFailure::Io(_))),
        "{closed:?}"
    );
    server.abort();
    let _ = server.await;
    assert_eq!(
        check(address, &HealthCheckKind::Tcp, None, timeout).await,
        Err(CheckFailure::ConnectRefused)
    );
}

// Passive health lives in node.rs; its behaviour is checked here beside the active side.

fn passive(consecutive_failures: u32) -> PassiveHealth {
    PassiveHealth {
        consecutive_failures,
        base_ejection: Duration::from_secs(1),
        max_ejection: Duration::from_secs(5),
        max_ejected_percent: 100,
    }
}

/// Fails `node` `times` times at `now`; whether the last failure ejected it.
fn fail(node: &NodeState, times: u32, now: Instant) -> bool {
    (0..times)
        .map(|_| node.record_failure(now))
        .last()
        .unwrap_or(false)
}

#[test]
fn passive_health_ejects_after_consecutive_failures() {
    let node = node_at(SocketAddr::from(([127, 0, 0, 1], 9)), passive(3));
    let now = Instant::now();
    assert!(!node.record_failure(now));
    assert!(!node.record_failure(now));
    assert!(node.is_available(now));
    assert!(node.record_failure(now));
    assert!(!node.is_available(now));
    assert!(node.is_ejected(now + Duration::from_millis(999)));
    assert!(node.is_available(now + Duration::from_secs(1)));
    assert_eq!(node.metrics.ejections.get(), 1);
}

/// One outage is one ejection in the metric: the monitor marking down a node that passive
/// health ejected already does not count it again; marking down a serving node does.
#[test]
fn an_outage_seen_by_both_checks_is_one_ejection() {
    let node = node_at(SocketAddr::from(([127, 0, 0, 1], 9)), passive(1));
    assert!(node.record_failure(Instant::now()));
    node.set_active_up(false);
    assert_eq!(node.metrics.ejections.get(), 1);
    node.set_active_up(true);
    let other = node_at(SocketAddr::from(([127, 0, 0, 1], 10)), passive(1));
    other.set_active_up(false);
    assert_eq!(other.metrics.ejections.get(), 1);
}

#[test]
fn passive_health_success_resets_the_failure_count() {
    let node = node_at(SocketAddr::from(([127, 0, 0, 1], 9)), passive(3));
    let now = Instant::now();
    assert!(!fail(&node, 2, now));
    // Not the end of an ejection: nothing to log.
    assert!(!node.record_success(Instant::now()));
    assert!(!fail(&node, 2, now));
    assert!(node.is_available(now));
    assert!(node.record_failure(now));
}

#[test]
fn passive_health_doubles_ejections_up_to_the_maximum_until_a_success() {
    let node = node_at(SocketAddr::from(([127, 0, 0, 1], 9)), passive(2));
    let mut now = Instant::now();
    for expected in [1, 2, 4, 5, 5] {
        assert!(fail(&node, 2, now), "ejected");
        let ejection = Duration::from_secs(expected);
        assert!(
            node.is_ejected(now + ejection - Duration::from_millis(1)),
            "{expected} s"
        );
        assert!(!node.is_ejected(now + ejection), "{expected} s");
        now += ejection;
    }
    // The first success after the ejections ends them (the caller logs the return); the
    // next is an ordinary success.
    assert!(node.record_success(now));
    assert!(!node.record_success(now));
    assert!(fail(&node, 2, now));
    assert!(
        !node.is_ejected(now + Duration::from_secs(1)),
        "back to the base ejection"
    );
}

#[test]
fn passive_health_off_never_ejects() {
    let node = node_at(SocketAddr::from(([127, 0, 0, 1], 9)), passive_off());
    let now = Instant::now();
    assert!(!fail(&node, 100, now));
    assert!(node.is_available(now));
}

#[test]
fn failures_during_an_ejection_do_not_count_after_it() {
    let metrics = weir_observe::Metrics::new();
    let config = weir_config::PassiveHealth {
        consecutive_failures: 3,
        base_ejection: std::time::Duration::from_secs(1),
        max_ejection: std::time::Duration::from_secs(10),
        max_ejected_percent: 100,
    };
    let node = NodeState::new(
        "127.0.0.1:1".parse().unwrap(),
        1,
        config,
        metrics.node("p", "n"),
    );
    let start = std::time::Instant::now();
    for _ in 0..3 {
        node.record_failure(start);
    }
    assert!(node.is_ejected(start));
    // Late failures of requests in flight during the ejection.
    for _ in 0..3 {
        assert!(!node.record_failure(start + std::time::Duration::from_millis(500)));
    }
    let after = start + std::time::Duration::from_secs(2);
    assert!(!node.is_ejected(after));
    assert!(
        !node.record_failure(after),
        "one failure after the ejection does not re-eject"
    );
    assert!(!node.is_ejected(after));
}

/// While every connection slot of the node is held by requests it answers, the monitor does
/// not check (the check would be one connection past the cap): a node that answers no extra
/// connection stays up. Once it has answered nothing for an interval, it is checked past the
/// cap: a check that times out (a stopped process: the kernel still takes the connection,
/// nobody answers) counts, and the node goes down; one the node refuses (its own cap, a
/// node at work) counts for nothing.
#[tokio::test]
async fn no_check_while_the_node_at_its_cap_answers() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let node = node_at(address, passive_off());
    let connections = one_slot(address);
    // The one slot is a request's; the node refuses every connection past it (nothing
    // listens there any more).
    let busy = connections.checkout().await.unwrap();
    drop(listener);
    let (owner, signal) = Shutdown::new();
    let tasks = monitor_capped(&node, &connections, signal);
    // Many intervals (20 ms) pass while the node answers its requests: no check.
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(300) {
        node.record_response_time(Duration::from_millis(1));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(node.is_active_up(), "checked past the cap");
    // No answer for a while, and the checks past the cap are refused: at work, still up.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(node.is_active_up(), "a refused check past the cap counted");
    drop(busy);
    stop_monitors(owner, tasks).await;
}

/// A stopped node (its listener takes connections, nobody answers) whose requests hold its
/// every slot is checked past the cap and seen down: the checks time out.
#[tokio::test]
async fn a_stopped_node_at_its_cap_is_checked_past_it() {
    // Bound and never accepting: the kernel completes the handshakes, nothing answers.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let node = node_at(address, passive_off());
    let connections = one_slot(address);
    let busy = connections.checkout().await.unwrap();
    let (owner, signal) = Shutdown::new();
    let tasks = monitor_capped(&node, &connections, signal);
    wait_for_active_up(&node, false).await;
    assert_eq!(connections.open(), 1, "the check took no slot");
    drop(busy);
    stop_monitors(owner, tasks).await;
    drop(listener);
}

/// A monitor restarted (as a reload of its pool restarts it) counts on from the checks
/// its predecessor made: three monitors that each saw one failed check of a `fall = 3`
/// monitor mark the node down, where each starting from nothing never would.
#[tokio::test]
async fn a_restarted_monitor_counts_on_from_the_last_ones_checks() {
    let listener = listen(SocketAddr::from(([127, 0, 0, 1], 0)));
    let address = listener.local_addr().unwrap();
    let (server, checks) = counted_500s(listener);
    let node = node_at(address, passive_off());
    let settings = HealthMonitor {
        // Long enough that each monitor makes only one check: its predecessor's check
        // was an interval ago when it makes it, the next is an interval after.
        interval: Duration::from_secs(1),
        fall: count(3),
        ..monitor(http_check(), Duration::from_millis(500))
    };
    for seen in 1..=3 {
        assert!(node.is_active_up(), "down after {} checks", seen - 1);
        let (owner, signal) = Shutdown::new();
        let tasks = monitor_one(&node, &settings, signal);
        let deadline = Instant::now() + Duration::from_secs(10);
        while checks.load(Ordering::Relaxed) < seen {
            assert!(Instant::now() < deadline, "check {seen} never came");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // The answer is read and counted within a moment; the next check is 0.8 s away.
        tokio::time::sleep(Duration::from_millis(200)).await;
        stop_monitors(owner, tasks).await;
    }
    assert!(
        !node.is_active_up(),
        "three failed checks in a row, over three monitors"
    );
    server.abort();
}

/// Answers every request 500 and counts them.
fn counted_500s(
    listener: TcpListener,
) -> (
    tokio::task::JoinHandle<()>,
    Arc<std::sync::atomic::AtomicUsize>,
) {
    let checks = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = Arc::clone(&checks);
    let server = tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let counted = Arc::clone(&counted);
            tokio::spawn(async move {
                let mut request = Vec::new();
                while !request.ends_with(b"\r\n\r\n") {
                    if stream.read_buf(&mut request).await.unwrap_or(0) == 0 {
                        return;
                    }
                }
                counted.fetch_add(1, Ordering::Relaxed);
                let _ = stream
                    .write_all(b"HTTP/1.1 500 Broken\r\nContent-Length: 0\r\n\r\n")
                    .await;
            });
        }
    });
    (server, checks)
}

/// An h2c node (HTTP/2 with prior knowledge, nothing else) that answers each request's
/// path with `status` and counts the requests; an HTTP/1.1 request is a protocol error.
async fn h2c_node(status: u16) -> (SocketAddr, Arc<AtomicU16>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let seen = Arc::new(AtomicU16::new(0));
    let counted = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let counted = Arc::clone(&counted);
            tokio::spawn(async move {
                let Ok(mut connection) = h2::server::handshake(tcp).await else {
                    return;
                };
                while let Some(Ok((request, mut respond))) = connection.accept().await {
                    assert_eq!(request.uri().path(), "/health");
                    counted.fetch_add(1, Ordering::Relaxed);
                    let response = http::Response::builder().status(status).body(()).unwrap();
                    let _ = respond.send_response(response, true);
                }
            });
        }
    });
    (address, seen)
}

#[tokio::test]
async fn checks_of_an_h2c_pool_speak_http2() {
    let (up, seen) = h2c_node(200).await;
    let (failing, _) = h2c_node(503).await;
    let timeout = Duration::from_secs(2);
    let kind = http_check();
    let http2 = |address| check_on(address, &kind, (None, &[], true), timeout, None);
    assert_eq!(http2(up).await, Ok(()));
    assert_eq!(seen.load(Ordering::Relaxed), 1);
    assert_eq!(http2(failing).await, Err(CheckFailure::Status(503)));
    // Spoken to in HTTP/1.1, as every check was, the node looks broken.
    assert!(check(up, &http_check(), None, timeout).await.is_err());

    // A monitor of an h2c pool keeps the working node up and marks the failing one down.
    let nodes = [node_at(up, passive_off()), node_at(failing, passive_off())];
    let (owner, signal) = Shutdown::new();
    let tasks = spawn_monitors(
        "grpc",
        &nodes,
        // A generous timeout: a busy machine must not fail the working node's checks.
        &monitor(http_check(), Duration::from_secs(2)),
        (&[], &[], None, UpstreamProtocol::H2c),
        signal,
    );
    wait_for_active_up(&nodes[1], false).await;
    // The working node's checks go on (past `fall` of them) and keep it up.
    let deadline = Instant::now() + Duration::from_secs(5);
    while seen.load(Ordering::Relaxed) < 4 {
        assert!(Instant::now() < deadline, "the monitor stopped checking");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(nodes[0].is_active_up());
    stop_monitors(owner, tasks).await;
}

/// A monitor restarted by a reload of the pool (a node operation, a name that moved) waits
/// out the interval since the node's last check instead of checking again at once.
#[tokio::test]
async fn a_restarted_monitor_waits_out_the_interval_since_the_last_check() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (_server, accepted) = counted_accepts(listener);
    let node = node_at(address, passive_off());
    let settings = HealthMonitor {
        interval: Duration::from_secs(2),
        ..monitor(HealthCheckKind::Tcp, Duration::from_millis(500))
    };
    let restart = || {
        let (owner, signal) = Shutdown::new();
        let tasks = monitor_one(&node, &settings, signal);
        (owner, tasks)
    };
    let (owner, tasks) = restart();
    // The first check comes at once.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(accepted.load(Ordering::Relaxed), 1);
    stop_monitors(owner, tasks).await;
    for _ in 0..5 {
        let (owner, tasks) = restart();
        tokio::time::sleep(Duration::from_millis(100)).await;
        stop_monitors(owner, tasks).await;
    }
    assert_eq!(
        accepted.load(Ordering::Relaxed),
        1,
        "restarts checked again"
    );
    // The interval over, the next monitor checks.
    let (owner, tasks) = restart();
    tokio::time::sleep(Duration::from_millis(2_200)).await;
    assert_eq!(accepted.load(Ordering::Relaxed), 2);
    stop_monitors(owner, tasks).await;
}
