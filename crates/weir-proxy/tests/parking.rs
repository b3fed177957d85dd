//! Idle plain HTTP/1.1 connections parked after `timeouts.park_idle`, and idle
//! HTTP/1.1 connections resting after `timeouts.rest_idle`
//! (`crates/weir-proxy/src/park.rs`): they serve their next request, close at their
//! timeouts, keep their places in the counts, and end with a drain.

use std::time::{Duration, Instant};

use weir_testkit::client::Connection;
use weir_testkit::{TestOrigin, TestProxy, config};

const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: h\r\n\r\n";

fn metric(proxy: &TestProxy, name: &str) -> f64 {
    proxy
        .metrics
        .encode()
        .lines()
        .filter(|line| line.starts_with(name))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn parked(proxy: &TestProxy) -> f64 {
    metric(proxy, "weir_client_connections_parked{")
}

fn resting(proxy: &TestProxy) -> f64 {
    metric(proxy, "weir_client_connections_resting{")
}

fn open(proxy: &TestProxy) -> f64 {
    metric(proxy, "weir_client_connections_open{")
}

/// Waits up to 3 s for `check` to hold.
async fn until(what: &str, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "timed out waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until the proxy holds no client connection and its `gauge` counts none.
async fn place_given_back(proxy: &TestProxy, gauge: fn(&TestProxy) -> f64) {
    until("its place is given back", || {
        open(proxy) == 0.0 && gauge(proxy) == 0.0
    })
    .await;
}

fn timeouts(lines: &str) -> String {
    format!("[virtual_servers.web.timeouts]\n{lines}\n")
}

async fn served(connection: &mut Connection) -> u16 {
    connection.send(REQUEST).await.unwrap();
    connection.response().await.unwrap().status
}

/// How the connections of a test wait out of their task.
#[derive(Clone, Copy)]
struct Way {
    /// The virtual server's timeouts that send them there after 100 ms.
    timeouts: &'static str,
    /// The gauge that counts them.
    gauge: fn(&TestProxy) -> f64,
    name: &'static str,
}

const PARKED: Way = Way {
    timeouts: "park_idle = \"100ms\"",
    gauge: parked,
    name: "parked",
};

/// Resting, and never parked.
const RESTING: Way = Way {
    timeouts: "rest_idle = \"100ms\"\npark_idle = \"0s\"",
    gauge: resting,
    name: "resting",
};

/// An origin and a proxy in front of it with `vs_extra` in its virtual server.
struct Setup {
    origin: TestOrigin,
    proxy: TestProxy,
}

impl Setup {
    async fn start(vs_extra: &str) -> Setup {
        let origin = TestOrigin::start("a").await;
        let proxy = TestProxy::start(&config(&[origin.addr], "", vs_extra)).await;
        Setup { origin, proxy }
    }

    /// A client connection served one request, once it waits `way` (at least one
    /// more is counted: others may go in meanwhile).
    async fn client_in(&self, way: Way) -> Connection {
        let before = (way.gauge)(&self.proxy);
        let mut client = Connection::open(self.proxy.addr).await.unwrap();
        assert_eq!(served(&mut client).await, 200);
        until(&format!("the connection is {}", way.name), || {
            (way.gauge)(&self.proxy) >= before + 1.0
        })
        .await;
        client
    }

    async fn stop(self) {
        self.proxy.stop().await;
        self.origin.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_is_parked_and_serves_its_next_requests() {
    let vs = timeouts(PARKED.timeouts);
    let setup = Setup::start(&vs).await;
    let proxy = &setup.proxy;
    let mut client = setup.client_in(PARKED).await;
    assert_eq!(open(proxy), 1.0, "a parked connection is still open");
    // Two pipelined requests wake it: both are answered, in order.
    client.send(&[REQUEST, REQUEST].concat()).await.unwrap();
    assert_eq!(client.response().await.unwrap().status, 200);
    assert_eq!(client.response().await.unwrap().status, 200);
    // And it parks again, and is woken again, as often as it goes idle.
    for _ in 0..3 {
        until("the connection is parked again", || parked(proxy) == 1.0).await;
        assert_eq!(served(&mut client).await, 200);
    }
    assert_eq!(open(proxy), 1.0);
    setup.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_connection_is_parked_and_closed_at_its_header_timeout() {
    let vs = timeouts("park_idle = \"100ms\"\nheader_read = \"1s\"");
    let setup = Setup::start(&vs).await;
    let proxy = &setup.proxy;
    let mut client = Connection::open(proxy.addr).await.unwrap();
    until("the connection is parked", || parked(proxy) == 1.0).await;
    assert!(client.is_closed(Duration::from_secs(3)).await);
    until("its place is given back", || open(proxy) == 0.0).await;
    // One that speaks after parking is served.
    let mut late = Connection::open(proxy.addr).await.unwrap();
    until("the connection is parked", || parked(proxy) == 1.0).await;
    assert_eq!(served(&mut late).await, 200);
    setup.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_connection_keeps_its_place_in_its_clients_connection_limit() {
    let vs = format!(
        "{}[virtual_servers.web.client_connections]\nmax = 1\n",
        timeouts(PARKED.timeouts)
    );
    let setup = Setup::start(&vs).await;
    let proxy = &setup.proxy;
    let mut first = setup.client_in(PARKED).await;
    let mut second = Connection::open(proxy.addr).await.unwrap();
    assert_eq!(
        served(&mut second).await,
        503,
        "the limit counts the parked one"
    );
    // Woken, the first goes on within the limit; closed, its place is free.
    assert_eq!(served(&mut first).await, 200);
    drop(first);
    until("its place is given back", || open(proxy) == 0.0).await;
    let mut third = Connection::open(proxy.addr).await.unwrap();
    assert_eq!(served(&mut third).await, 200);
    setup.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn park_idle_zero_never_parks() {
    let vs = timeouts("park_idle = \"0s\"");
    let setup = Setup::start(&vs).await;
    let proxy = &setup.proxy;
    let mut client = Connection::open(proxy.addr).await.unwrap();
    assert_eq!(served(&mut client).await, 200);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(parked(proxy), 0.0);
    assert_eq!(served(&mut client).await, 200);
    setup.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_rests_and_serves_its_next_requests() {
    let setup = Setup::start(&timeouts(RESTING.timeouts)).await;
    let proxy = &setup.proxy;
    let mut client = setup.client_in(RESTING).await;
    assert_eq!(open(proxy), 1.0, "a resting connection is still open");
    assert_eq!(parked(proxy), 0.0);
    client.send(&[REQUEST, REQUEST].concat()).await.unwrap();
    assert_eq!(client.response().await.unwrap().status, 200);
    assert_eq!(client.response().await.unwrap().status, 200);
    for _ in 0..3 {
        until("the connection rests again", || resting(proxy) == 1.0).await;
        assert_eq!(served(&mut client).await, 200);
    }
    // Many at once, woken together.
    let mut clients = Vec::new();
    for _ in 0..50 {
        clients.push(setup.client_in(RESTING).await);
    }
    for client in &mut clients {
        client.send(REQUEST).await.unwrap();
    }
    for client in &mut clients {
        assert_eq!(client.response().await.unwrap().status, 200);
    }
    assert_eq!(open(proxy), 51.0);
    // 1 + 2 + 3 on the first, and two on each of the 50.
    assert_eq!(
        setup.origin.stats.requests(),
        106,
        "each request reached the node once"
    );
    setup.stop().await;
}

/// A connection that rested before its request rests again as soon as it is answered,
/// not `rest_idle` later; one whose request came soon after it last rested waits in its
/// task as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_clients_connection_rests_again_right_after_its_answer() {
    let setup = Setup::start(&timeouts("rest_idle = \"2s\"\npark_idle = \"0s\"")).await;
    let proxy = &setup.proxy;
    let mut client = setup.client_in(RESTING).await;
    assert_eq!(served(&mut client).await, 200);
    let answered = Instant::now();
    until("the connection rests again", || resting(proxy) == 1.0).await;
    assert!(
        answered.elapsed() < Duration::from_secs(1),
        "rested {:?} after its answer (rest_idle 2 s)",
        answered.elapsed()
    );
    // Woken again at once: a client that is busy again is served from its task.
    assert_eq!(served(&mut client).await, 200);
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(resting(proxy), 0.0, "a busy connection waits in its task");
    until("the connection rests after rest_idle", || {
        resting(proxy) == 1.0
    })
    .await;
    setup.stop().await;
}

/// Resting connections roused together, more of them than the crew keeps waiting
/// (`crates/weir-proxy/src/crew.rs`), each with a request the node answers slowly: the
/// crew grows to serve them all at once, each is answered and rests again, and a second
/// round is served the same way by the members that stayed and new ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_resting_connections_roused_at_once_are_each_served() {
    const CLIENTS: usize = 40;
    let setup = Setup::start(&timeouts("rest_idle = \"100ms\"\npark_idle = \"0s\"")).await;
    let proxy = &setup.proxy;
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let mut client = Connection::open(proxy.addr).await.unwrap();
        assert_eq!(served(&mut client).await, 200);
        clients.push(client);
    }
    for round in 0..2 {
        until("every connection rests", || {
            resting(proxy) == CLIENTS as f64
        })
        .await;
        let started = Instant::now();
        let mut answers = tokio::task::JoinSet::new();
        for mut client in clients.drain(..) {
            answers.spawn(async move {
                client
                    .send(b"GET /delay/300 HTTP/1.1\r\nHost: h\r\n\r\n")
                    .await
                    .unwrap();
                let status = client.response().await.unwrap().status;
                (client, status)
            });
        }
        while let Some(answered) = answers.join_next().await {
            let (client, status) = answered.unwrap();
            assert_eq!(status, 200, "round {round}");
            clients.push(client);
        }
        // Served side by side, not one member after another.
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "round {round} took {:?}",
            started.elapsed()
        );
    }
    until("every connection rests again", || {
        resting(proxy) == CLIENTS as f64
    })
    .await;
    assert_eq!(open(proxy), CLIENTS as f64);
    drop(clients);
    place_given_back(proxy, resting).await;
    setup.stop().await;
}

/// A roused connection's request still waiting for its node when the drain timeout
/// passes is answered 503 with `Connection: close`, by the crew member serving it
/// (`crates/weir-proxy/src/crew.rs`), as a connection's own task answers it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_roused_request_waiting_at_the_drain_timeout_gets_503() {
    let vs = timeouts("rest_idle = \"100ms\"\npark_idle = \"0s\"");
    let setup = Setup::start(&format!("{vs}[runtime]\ndrain_timeout = \"300ms\"\n")).await;
    let proxy = &setup.proxy;
    let mut client = setup.client_in(RESTING).await;
    client
        .send(b"GET /delay/5000 HTTP/1.1\r\nHost: h\r\n\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(resting(proxy), 0.0, "roused");
    let asked = Instant::now();
    proxy.trigger_shutdown();
    let response = client.response().await.unwrap();
    assert_eq!(response.status, 503);
    assert_eq!(response.header("connection"), Some("close"));
    assert!(
        asked.elapsed() < Duration::from_secs(3),
        "{:?}",
        asked.elapsed()
    );
    setup.stop().await;
}

/// A connection to an h2c virtual server that rests before its first bytes, then opens
/// HTTP/2 with prior knowledge, is served over HTTP/2: the crew member that it wakes tells
/// the preface apart and hands the connection to a task of its own, where it stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h2c_connection_that_rested_before_its_preface_is_served() {
    let vs = format!(
        "{}[virtual_servers.web.http2]\ncleartext = true\n",
        timeouts("rest_idle = \"100ms\"\npark_idle = \"0s\"")
    );
    let setup = Setup::start(&vs).await;
    let proxy = &setup.proxy;
    let tcp = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    until("the silent connection rests", || resting(proxy) == 1.0).await;
    let (sender, connection) = h2::client::handshake(tcp).await.expect("handshake");
    tokio::spawn(connection);
    for _ in 0..3 {
        let mut ready = sender.clone().ready().await.expect("ready");
        let request = http::Request::get(format!("http://127.0.0.1:{}/", proxy.addr.port()))
            .body(())
            .unwrap();
        let (response, _) = ready.send_request(request, true).expect("sent");
        assert_eq!(response.await.expect("a response").status(), 200);
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    assert_eq!(resting(proxy), 0.0, "an HTTP/2 connection does not rest");
    assert_eq!(setup.origin.stats.requests(), 3);
    drop(sender);
    place_given_back(proxy, resting).await;
    setup.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resting_connection_is_parked_at_park_idle() {
    let vs = timeouts("rest_idle = \"100ms\"\npark_idle = \"600ms\"");
    let setup = Setup::start(&vs).await;
    let proxy = &setup.proxy;
    let mut client = setup.client_in(RESTING).await;
    assert_eq!(parked(proxy), 0.0, "resting first");
    until("the resting connection is parked", || {
        parked(proxy) == 1.0 && resting(proxy) == 0.0
    })
    .await;
    assert_eq!(served(&mut client).await, 200);
    // With `park_idle` no later than `rest_idle`, it is parked at once.
    setup.stop().await;
    let vs = timeouts("rest_idle = \"100ms\"\npark_idle = \"100ms\"");
    let setup = Setup::start(&vs).await;
    let _client = setup.client_in(PARKED).await;
    assert_eq!(resting(&setup.proxy), 0.0);
    setup.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_idle_zero_never_rests() {
    let setup = Setup::start(&timeouts("rest_idle = \"0s\"\npark_idle = \"0s\"")).await;
    let proxy = &setup.proxy;
    let mut client = Connection::open(proxy.addr).await.unwrap();
    assert_eq!(served(&mut client).await, 200);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(resting(proxy) + parked(proxy), 0.0);
    assert_eq!(served(&mut client).await, 200);
    setup.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_connection_rests_and_serves_its_next_requests() {
    use weir_testkit::tls::{self, ClientOptions, Pki};
    use weir_tls::KeyType;
    let pki = Pki::new();
    let (cert, key) = pki.server("site", &["site.test"], KeyType::EcdsaP256);
    let path = |p: &std::path::Path| p.display().to_string().replace('\\', "/");
    let vs = format!(
        "protocol = \"https\"\n[virtual_servers.web.tls]\n\
         certificates = [{{ cert = \"{}\", key = \"{}\" }}]\n{}",
        path(&cert),
        path(&key),
        timeouts("rest_idle = \"100ms\"\npark_idle = \"100ms\"\nidle = \"1s\"")
    );
    let setup = Setup::start(&vs).await;
    let proxy = &setup.proxy;
    let client = tls::client_config(&ClientOptions::default());
    let mut stream = tls::connect(proxy.addr, "site.test", &client)
        .await
        .unwrap();
    for _ in 0..3 {
        assert_eq!(tls::get(&mut stream, "/").await.unwrap().status, 200);
        // TLS connections rest; they are never parked.
        until("the TLS connection rests", || resting(proxy) == 1.0).await;
        assert_eq!(parked(proxy), 0.0);
    }
    // Its idle timeout closes it (with a close_notify) from the resting table.
    place_given_back(proxy, resting).await;
    setup.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_connection_closes_at_its_idle_timeout() {
    closes_at_its_idle_timeout(PARKED).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resting_connection_closes_at_its_idle_timeout() {
    closes_at_its_idle_timeout(RESTING).await;
}

async fn closes_at_its_idle_timeout(way: Way) {
    let setup = Setup::start(&timeouts(&format!("{}\nidle = \"1s\"", way.timeouts))).await;
    let proxy = &setup.proxy;
    let mut client = Connection::open(proxy.addr).await.unwrap();
    assert_eq!(served(&mut client).await, 200);
    let answered = Instant::now();
    until(&format!("the connection is {}", way.name), || {
        (way.gauge)(proxy) == 1.0
    })
    .await;
    assert!(client.is_closed(Duration::from_secs(3)).await);
    let waited = answered.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_millis(1800),
        "closed {waited:?} after its answer, idle timeout 1 s ({})",
        way.name
    );
    place_given_back(proxy, way.gauge).await;
    setup.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_closing_a_parked_connection_gives_its_place_back() {
    a_closing_client_gives_its_place_back(PARKED).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_closing_a_resting_connection_gives_its_place_back() {
    a_closing_client_gives_its_place_back(RESTING).await;
}

async fn a_closing_client_gives_its_place_back(way: Way) {
    let setup = Setup::start(&timeouts(way.timeouts)).await;
    let proxy = &setup.proxy;
    let client = setup.client_in(way).await;
    drop(client);
    place_given_back(proxy, way.gauge).await;
    setup.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_ends_parked_connections_without_waiting_for_their_timeout() {
    a_shutdown_ends_them_at_once(PARKED).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_ends_resting_connections_without_waiting_for_their_timeout() {
    a_shutdown_ends_them_at_once(RESTING).await;
}

async fn a_shutdown_ends_them_at_once(way: Way) {
    let setup = Setup::start(&timeouts(&format!("{}\nidle = \"60s\"", way.timeouts))).await;
    let mut clients = Vec::new();
    for _ in 0..20 {
        clients.push(setup.client_in(way).await);
    }
    let stopping = Instant::now();
    setup.proxy.stop().await;
    assert!(
        stopping.elapsed() < Duration::from_secs(5),
        "the drain waited {:?} for {} connections",
        stopping.elapsed(),
        way.name
    );
    for client in &mut clients {
        assert!(client.is_closed(Duration::from_secs(1)).await);
    }
    setup.origin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_removes_the_virtual_server_ends_its_parked_connections() {
    a_removing_reload_ends_them(PARKED).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_removes_the_virtual_server_ends_its_resting_connections() {
    a_removing_reload_ends_them(RESTING).await;
}

async fn a_removing_reload_ends_them(way: Way) {
    let setup = Setup::start(&timeouts(&format!("{}\nidle = \"60s\"", way.timeouts))).await;
    let proxy = &setup.proxy;
    let mut client = setup.client_in(way).await;
    let other = format!(
        "[log]\naccess_log = false\nlevel = \"warn\"\n\n\
         [pools.web]\nnodes = [{{ address = \"{}\" }}]\n\n\
         [virtual_servers.other]\nlisten = [\"127.0.0.1:0\"]\npool = \"web\"\n",
        setup.origin.addr
    );
    let candidate = weir_config::parse_str(&other, "test.toml").unwrap();
    proxy.live.apply(candidate).unwrap();
    assert!(
        client.is_closed(Duration::from_secs(4)).await,
        "a {} connection of a removed virtual server stayed open",
        way.name
    );
    setup.stop().await;
}
