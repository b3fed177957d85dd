//! Nodes given by DNS name, end to end: a running weir resolves them against a DNS server the
//! test controls (`weir_testkit::dns`) and follows its changes. Two origins share one port on
//! two loopback addresses (127.0.0.2 and 127.0.0.3), since A records carry no port.
//!
//! - requests move to the new address when the record changes, none failing; an address
//!   kept keeps its node (state and pooled connections); a failed resolution keeps the
//!   last good set
//! - a name that does not resolve refuses the start and a reload (file, line and key); a
//!   bad name is a config error
//! - a TCP (layer 4) pool follows its name the same way
//! - health checks probe the resolved nodes

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use weir_origin::OriginOptions;
use weir_testkit::client::{self, Connection};
use weir_testkit::dns::{Reply, TestDns};
use weir_testkit::{TestOrigin, TestProxy};

fn loopback(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))
}

/// Two origins named `a` and `b` on 127.0.0.2 and 127.0.0.3, on the same port.
async fn two_origins() -> (TestOrigin, TestOrigin, u16) {
    for _ in 0..20 {
        let a = TestOrigin::with_options(OriginOptions::new("a", SocketAddr::new(loopback(2), 0)))
            .await;
        let port = a.addr.port();
        let b =
            weir_origin::Origin::bind(OriginOptions::new("b", SocketAddr::new(loopback(3), port)))
                .await;
        if let Ok(b) = b {
            drop(b);
            let b = TestOrigin::with_options(OriginOptions::new(
                "b",
                SocketAddr::new(loopback(3), port),
            ))
            .await;
            return (a, b, port);
        }
        a.stop().await;
    }
    panic!("no port free on both 127.0.0.2 and 127.0.0.3");
}

/// Pool `web` with the node `web.test:port`, resolved by `dns`, re-resolved every 100 ms to
/// 1 s; `pool_extra` goes into `[pools.web]`.
fn config(dns: &TestDns, port: u16, pool_extra: &str) -> String {
    format!(
        "[log]\naccess_log = false\nlevel = \"warn\"\n\n\
         [pools.web]\nnodes = [{{ address = \"web.test:{port}\" }}]\n{pool_extra}\n\
         [pools.web.dns]\nservers = [\"{}\"]\nmin_ttl = \"100ms\"\nmax_ttl = \"1s\"\n\
         timeout = \"200ms\"\n\n\
         [virtual_servers.web]\nlisten = [\"127.0.0.1:0\"]\npool = \"web\"\n",
        dns.address
    )
}

fn node_addresses(proxy: &TestProxy) -> Vec<SocketAddr> {
    let model = proxy.live.current();
    let mut addresses: Vec<SocketAddr> = model
        .pool("web")
        .unwrap()
        .nodes
        .iter()
        .map(|n| n.address)
        .collect();
    addresses.sort();
    addresses
}

/// Which origin answers a GET / through `proxy` (its `X-Origin`).
async fn answered_by(proxy: &TestProxy) -> Option<String> {
    let response = client::get(proxy.addr, "/").await.unwrap();
    response.header("x-origin").map(str::to_owned)
}

/// Waits (up to 10 s) until the pool's nodes are `expected`.
async fn wait_for_nodes(proxy: &TestProxy, expected: &[SocketAddr]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while node_addresses(proxy) != expected {
        assert!(
            Instant::now() < deadline,
            "nodes are {:?}, expected {expected:?}",
            node_addresses(proxy)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Clients sending requests until stopped, each on its own kept-alive connection (opened
/// again when weir closes it), counting the answers of each origin and the failures.
struct Load {
    stop: Arc<AtomicBool>,
    from_a: Arc<AtomicUsize>,
    from_b: Arc<AtomicUsize>,
    failures: Arc<AtomicUsize>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(proxy: SocketAddr, clients: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let from_a = Arc::new(AtomicUsize::new(0));
        let from_b = Arc::new(AtomicUsize::new(0));
        let failures = Arc::new(AtomicUsize::new(0));
        let tasks = (0..clients)
            .map(|_| {
                let (stop, a, b, failures) = (
                    Arc::clone(&stop),
                    Arc::clone(&from_a),
                    Arc::clone(&from_b),
                    Arc::clone(&failures),
                );
                tokio::spawn(async move {
                    let mut connection: Option<Connection> = None;
                    while !stop.load(Ordering::Relaxed) {
                        if connection.is_none() {
                            connection = Connection::open(proxy).await.ok();
                        }
                        let Some(open) = connection.as_mut() else {
                            failures.fetch_add(1, Ordering::SeqCst);
                            continue;
                        };
                        let sent = open.send(b"GET / HTTP/1.1\r\nhost: web.test\r\n\r\n").await;
                        let response = match sent {
                            Ok(()) => open.response().await.ok(),
                            Err(_) => None,
                        };
                        match response {
                            Some(response) if response.status == 200 => {
                                match response.header("x-origin") {
                                    Some("a") => a.fetch_add(1, Ordering::SeqCst),
                                    Some("b") => b.fetch_add(1, Ordering::SeqCst),
                                    _ => failures.fetch_add(1, Ordering::SeqCst),
                                };
                                if response.header("connection") == Some("close") {
                                    connection = None;
                                }
                            }
                            _ => {
                                failures.fetch_add(1, Ordering::SeqCst);
                                connection = None;
                            }
                        }
                    }
                })
            })
            .collect();
        Load {
            stop,
            from_a,
            from_b,
            failures,
            tasks,
        }
    }

    fn counts(&self) -> (usize, usize, usize) {
        (
            self.from_a.load(Ordering::SeqCst),
            self.from_b.load(Ordering::SeqCst),
            self.failures.load(Ordering::SeqCst),
        )
    }

    async fn stop(mut self) -> (usize, usize, usize) {
        self.stop.store(true, Ordering::Relaxed);
        for task in std::mem::take(&mut self.tasks) {
            task.await.unwrap();
        }
        self.counts()
    }
}

/// SERVFAIL, then NXDOMAIN: the pool keeps `nodes` and nothing is rebuilt.
async fn keeps_the_last_good_set_through_failures(
    proxy: &TestProxy,
    dns: &TestDns,
    nodes: &[SocketAddr],
) {
    let generation = proxy.live.generation();
    let queries = dns.queries();
    dns.set("web.test", Reply::ServerFailure);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    dns.set("web.test", Reply::NameError);
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert!(dns.queries() > queries, "the name was asked again");
    assert_eq!(node_addresses(proxy), nodes);
    assert_eq!(proxy.live.generation(), generation, "nothing was rebuilt");
    assert_eq!(client::get(proxy.addr, "/").await.unwrap().status, 200);
    // Counted: the failures, the changes before them, and the set kept.
    let labels = format!("pool=\"web\",name=\"web.test:{}\"", nodes[0].port());
    let value = |series: String| -> f64 {
        let text = proxy.metrics.encode();
        text.lines()
            .find_map(|line| line.strip_prefix(&series)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("{series} in {text}"))
    };
    let resolutions = |result: &str| {
        value(format!(
            "weir_dns_resolutions_total{{{labels},result=\"{result}\"}}"
        ))
    };
    assert!(resolutions("failed") >= 2.0, "failures counted");
    assert!(resolutions("changed") >= 2.0, "changes counted");
    assert_eq!(
        value(format!("weir_dns_addresses{{{labels}}}")),
        nodes.len() as f64
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_weir_follows_the_name_with_no_request_failing() {
    let (a, b, port) = two_origins().await;
    let dns = TestDns::start();
    dns.set("web.test", Reply::Records(vec![loopback(2)], 1));
    let proxy = TestProxy::start(&config(&dns, port, "")).await;
    let node_a = SocketAddr::new(loopback(2), port);
    let node_b = SocketAddr::new(loopback(3), port);
    assert_eq!(node_addresses(&proxy), [node_a]);
    // Counted from the start, before any re-resolution.
    let gauge = format!("weir_dns_addresses{{pool=\"web\",name=\"web.test:{port}\"}} ");
    let text = proxy.metrics.encode();
    assert_eq!(
        text.lines().find_map(|line| line.strip_prefix(&gauge)),
        Some("1"),
        "{text}"
    );
    let model = proxy.live.current();
    let pool = model.pool("web").unwrap();
    assert_eq!(
        pool.config.nodes[0].name.as_deref(),
        Some(format!("web.test:{port}").as_str()),
        "the node knows its name"
    );
    assert_eq!(answered_by(&proxy).await.as_deref(), Some("a"));
    let generation = proxy.live.generation();

    // The record changes: requests move to b, none failing on the way.
    let load = Load::start(proxy.addr, 4);
    tokio::time::sleep(Duration::from_millis(300)).await;
    dns.set("web.test", Reply::Records(vec![loopback(3)], 1));
    wait_for_nodes(&proxy, &[node_b]).await;
    assert!(
        proxy.live.generation() > generation,
        "a change makes a new generation"
    );
    let before = load.counts();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (from_a, from_b, failures) = load.stop().await;
    assert_eq!(failures, 0, "no request failed while the name changed");
    assert!(
        from_a > 0 && from_b > before.1,
        "a then b answered: {from_a} from a, {from_b} from b"
    );
    assert_eq!(answered_by(&proxy).await.as_deref(), Some("b"));
    let text = proxy.metrics.encode();
    assert!(
        text.contains(&format!("node=\"{node_b}\"")),
        "the resolved node has its series"
    );
    assert!(
        !text.contains(&format!("node=\"{node_a}\"")),
        "the node gone has none left"
    );

    // The name now resolves to both: a is added, b keeps its node and connections.
    let kept_b = {
        let model = proxy.live.current();
        let pool = model.pool("web").unwrap();
        (Arc::clone(&pool.nodes[0]), Arc::clone(&pool.connections[0]))
    };
    dns.set(
        "web.test",
        Reply::Records(vec![loopback(3), loopback(2)], 1),
    );
    wait_for_nodes(&proxy, &[node_a, node_b]).await;
    {
        let model = proxy.live.current();
        let pool = model.pool("web").unwrap();
        let index = pool.node_index(node_b).unwrap();
        assert!(
            Arc::ptr_eq(&pool.nodes[index], &kept_b.0),
            "b keeps its state"
        );
        assert!(
            Arc::ptr_eq(&pool.connections[index], &kept_b.1),
            "and its pooled connections"
        );
    }
    let mut seen = Vec::new();
    for _ in 0..4 {
        let response = client::get(proxy.addr, "/").await.unwrap();
        seen.push(response.header("x-origin").unwrap_or_default().to_owned());
    }
    assert!(
        seen.iter().any(|o| o == "a") && seen.iter().any(|o| o == "b"),
        "{seen:?}"
    );

    keeps_the_last_good_set_through_failures(&proxy, &dns, &[node_a, node_b]).await;

    // It resolves again: the new set applies.
    dns.set("web.test", Reply::Records(vec![loopback(2)], 1));
    wait_for_nodes(&proxy, &[node_a]).await;
    proxy.stop().await;
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_that_does_not_resolve_refuses_the_start_and_a_reload() {
    let (a, b, port) = two_origins().await;
    let dns = TestDns::start();
    let text = config(&dns, port, "");
    let file = std::env::temp_dir().join(format!("weir-dns-names-{}.toml", std::process::id()));
    std::fs::write(&file, &text).unwrap();
    let parsed = weir_config::load_file(&file).unwrap();
    let _ = std::fs::remove_file(&file);
    let Err(error) = weir_proxy::Proxy::build(&parsed, &weir_observe::Metrics::new()) else {
        panic!("the start is refused");
    };
    assert_eq!(
        error.to_string(),
        format!(
            "{}:6: pools.web.nodes[0].address: the node name \"web.test\" does not resolve: \
             no address records",
            file.display()
        )
    );

    // Started with the name resolving, a reload adding a name that does not is refused and
    // the running model keeps serving.
    dns.set("web.test", Reply::Records(vec![loopback(2)], 1));
    let proxy = TestProxy::start(&text).await;
    let with_api = text.replace(
        &format!("{{ address = \"web.test:{port}\" }}"),
        &format!("{{ address = \"web.test:{port}\" }}, {{ address = \"api.test:{port}\" }}"),
    );
    let candidate = weir_config::parse_str(&with_api, "test.toml").unwrap();
    let refused = proxy.live.apply(candidate).unwrap_err().to_string();
    assert!(
        refused.contains("pools.web.nodes[1].address: the node name \"api.test\" does not resolve"),
        "{refused}"
    );
    assert_eq!(answered_by(&proxy).await.as_deref(), Some("a"));

    // Once it resolves, the reload applies; web.test keeps its watcher and set.
    dns.set("api.test", Reply::Records(vec![loopback(3)], 1));
    let candidate = weir_config::parse_str(&with_api, "test.toml").unwrap();
    proxy.live.apply(candidate).unwrap();
    assert_eq!(
        node_addresses(&proxy),
        [
            SocketAddr::new(loopback(2), port),
            SocketAddr::new(loopback(3), port)
        ]
    );
    // A reload without the name drops its nodes, and its watcher with them.
    let candidate = weir_config::parse_str(&text, "test.toml").unwrap();
    proxy.live.apply(candidate).unwrap();
    assert_eq!(node_addresses(&proxy), [SocketAddr::new(loopback(2), port)]);
    dns.set("api.test", Reply::Records(vec![loopback(4)], 1));
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(node_addresses(&proxy), [SocketAddr::new(loopback(2), port)]);

    // A bad name is a config error, with file, line and key.
    let bad = text.replace("web.test:", "web..test:");
    let error = weir_config::parse_str(&bad, "test.toml")
        .unwrap_err()
        .to_string();
    assert!(
        error.starts_with("test.toml:6: pools.web.nodes[0].address: invalid host name"),
        "{error}"
    );
    proxy.stop().await;
    a.stop().await;
    b.stop().await;
}

/// A TCP node on `address` that answers `name` to each connection and closes.
async fn tcp_node(address: SocketAddr, name: &'static str) -> tokio::task::JoinHandle<()> {
    let listener = TcpListener::bind(address).await.unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let _ = stream.write_all(name.as_bytes()).await;
                let _ = stream.shutdown().await;
                let mut rest = Vec::new();
                let _ = stream.read_to_end(&mut rest).await;
            });
        }
    })
}

async fn tcp_exchange(address: SocketAddr) -> String {
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream.shutdown().await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    answer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tcp_pool_follows_its_name() {
    // The two TCP nodes: 127.0.0.2 and 127.0.0.3 on one port.
    let (a, b, port) = two_origins().await;
    a.stop().await;
    b.stop().await;
    let node_a = tcp_node(SocketAddr::new(loopback(2), port), "a").await;
    let node_b = tcp_node(SocketAddr::new(loopback(3), port), "b").await;
    let dns = TestDns::start();
    dns.set("db.test", Reply::Records(vec![loopback(2)], 1));
    let text = format!(
        "[log]\naccess_log = false\nlevel = \"warn\"\n\n\
         [pools.db]\nnodes = [{{ address = \"db.test:{port}\" }}]\n\
         [pools.db.dns]\nservers = [\"{}\"]\nmin_ttl = \"100ms\"\nmax_ttl = \"1s\"\n\n\
         [virtual_servers.db]\nprotocol = \"tcp\"\nlisten = [\"127.0.0.1:0\"]\npool = \"db\"\n",
        dns.address
    );
    let proxy = TestProxy::start(&text).await;
    assert_eq!(tcp_exchange(proxy.addr).await, "a");
    dns.set("db.test", Reply::Records(vec![loopback(3)], 1));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let answer = tcp_exchange(proxy.addr).await;
        if answer == "b" {
            break;
        }
        assert_eq!(answer, "a", "every session reaches a node");
        assert!(
            Instant::now() < deadline,
            "the TCP pool did not follow the name"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    proxy.stop().await;
    node_a.abort();
    node_b.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_checks_probe_the_resolved_nodes() {
    // The name resolves to two addresses; nothing listens on 127.0.0.3's port.
    let (a, b, port) = two_origins().await;
    b.stop().await;
    let dns = TestDns::start();
    dns.set(
        "web.test",
        Reply::Records(vec![loopback(2), loopback(3)], 1),
    );
    let health = "[pools.web.health]\ntype = \"tcp\"\ninterval = \"100ms\"\ntimeout = \"50ms\"\n\
                  fall = 1\nrise = 1\n";
    let proxy = TestProxy::start(
        &config(&dns, port, "").replace("[pools.web.dns]", &format!("{health}\n[pools.web.dns]")),
    )
    .await;
    let down = SocketAddr::new(loopback(3), port);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let model = proxy.live.current();
        let pool = model.pool("web").unwrap();
        let index = pool.node_index(down).unwrap();
        if !pool.nodes[index].is_active_up() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the monitor never marked {down} down"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for _ in 0..6 {
        let response = client::get(proxy.addr, "/").await.unwrap();
        assert_eq!(response.header("x-origin"), Some("a"));
    }
    proxy.stop().await;
    a.stop().await;
}

/// A node given as a service (`srv`): its SRV records name two targets on two ports (the
/// same address, which only SRV can tell apart), weir serves from both, and follows the
/// records when one target goes; the admin label says `srv:` and the name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_name_gives_nodes_on_the_ports_its_srv_records_say() {
    let a =
        TestOrigin::with_options(OriginOptions::new("a", SocketAddr::new(loopback(2), 0))).await;
    let b =
        TestOrigin::with_options(OriginOptions::new("b", SocketAddr::new(loopback(2), 0))).await;
    let dns = TestDns::start();
    let both = vec![
        (10, 1, a.addr.port(), "a.test".to_owned()),
        (10, 1, b.addr.port(), "b.test".to_owned()),
    ];
    dns.set("_web._tcp.test", Reply::Services(both, 1));
    dns.set("a.test", Reply::Records(vec![loopback(2)], 1));
    dns.set("b.test", Reply::Records(vec![loopback(2)], 1));
    let text = config(&dns, 0, "").replace(
        "nodes = [{ address = \"web.test:0\" }]",
        "nodes = [{ srv = \"_web._tcp.test\" }]",
    );
    let proxy = TestProxy::start(&text).await;
    let mut expected = vec![a.addr, b.addr];
    expected.sort();
    assert_eq!(node_addresses(&proxy), expected);
    let mut seen = std::collections::HashSet::new();
    for _ in 0..10 {
        seen.insert(answered_by(&proxy).await.expect("an origin answers"));
    }
    assert_eq!(seen.len(), 2, "{seen:?}");
    // b's record goes: within the TTL bounds only a is left, and serves every request.
    dns.set(
        "_web._tcp.test",
        Reply::Services(vec![(10, 1, a.addr.port(), "a.test".to_owned())], 1),
    );
    wait_for_nodes(&proxy, &[a.addr]).await;
    for _ in 0..5 {
        assert_eq!(answered_by(&proxy).await.as_deref(), Some("a"));
    }
    let named = &proxy.live.current().config.pools[0].names;
    assert_eq!(named[0].label(), "srv:_web._tcp.test");
    proxy.stop().await;
    a.stop().await;
    b.stop().await;
}

/// A reload waits on a name server that does not answer; meanwhile what the admin API and
/// the access log's flusher ask of the running weir (on the threads that serve traffic)
/// answers at once: they never wait for the reload's lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_waiting_on_a_name_server_holds_up_nothing_that_serves() {
    let (a, b, port) = two_origins().await;
    let dns = TestDns::start();
    dns.set("web.test", Reply::Records(vec![loopback(2)], 60));
    let text = config(&dns, port, "");
    let proxy = TestProxy::start(&text).await;
    // A name server that never answers.
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let with_slow = format!(
        "{text}\n[pools.slow]\nnodes = [{{ address = \"slow.test:{port}\" }}]\n\
         [pools.slow.dns]\nservers = [\"{}\"]\ntimeout = \"1s\"\n",
        silent.local_addr().unwrap()
    );
    let candidate = weir_config::parse_str(&with_slow, "test.toml").unwrap();
    let live = Arc::clone(&proxy.live);
    let reload = std::thread::spawn(move || live.apply(candidate));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !reload.is_finished(),
        "the name server was expected to hold the reload"
    );
    for (what, call) in [
        (
            "last_reload",
            Box::new(|| drop(proxy.live.last_reload())) as Box<dyn Fn()>,
        ),
        ("local_addrs", Box::new(|| drop(proxy.live.local_addrs()))),
        (
            "flush_access_log",
            Box::new(|| proxy.live.flush_access_log()),
        ),
    ] {
        let started = Instant::now();
        call();
        assert!(
            started.elapsed() < Duration::from_millis(100),
            "{what} waited {:?} for the reload",
            started.elapsed()
        );
    }
    assert_eq!(answered_by(&proxy).await.as_deref(), Some("a"));
    let refused = reload.join().unwrap().unwrap_err().to_string();
    assert!(refused.contains("slow.test"), "{refused}");
    proxy.stop().await;
    a.stop().await;
    b.stop().await;
}
