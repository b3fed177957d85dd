//! Reload in place: the running model is swapped, listeners are diffed, nodes that stay keep
//! their connections, requests in flight finish on the model they started with, and a bad
//! candidate is refused while the old model keeps serving.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use weir_proxy::ReloadError;
use weir_testkit::client::{self, Connection};
use weir_testkit::{TestOrigin, TestProxy, config};

fn parse(text: &str) -> weir_config::Config {
    weir_config::parse_str(text, "test.toml").unwrap_or_else(|error| panic!("{error}"))
}

/// A config with virtual server `web` on `listen` over pool `web` = `nodes`.
fn web(listen: &[&str], nodes: &[SocketAddr], extra: &str) -> String {
    let listen: Vec<String> = listen.iter().map(|l| format!("\"{l}\"")).collect();
    let nodes: Vec<String> = nodes
        .iter()
        .map(|n| format!("{{ address = \"{n}\" }}"))
        .collect();
    format!(
        "[log]\naccess_log = false\nlevel = \"warn\"\n\
         [pools.web]\nnodes = [{}]\n\
         [virtual_servers.web]\nlisten = [{}]\npool = \"web\"\n{extra}\n",
        nodes.join(", "),
        listen.join(", ")
    )
}

async fn origin_of(addr: SocketAddr) -> String {
    let response = client::get(addr, "/").await.expect("a response");
    assert_eq!(response.status, 200);
    response.header("x-origin").unwrap_or_default().to_owned()
}

/// A directory removed when the test ends.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let path = std::env::temp_dir().join(format!("weir-reload-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_adds_and_removes_a_listener() {
    let origin = TestOrigin::start("a").await;
    let ports = weir_testkit::free_ports::<2>();
    let first = format!("127.0.0.1:{}", ports[0]);
    let second = format!("127.0.0.1:{}", ports[1]);
    let proxy = TestProxy::start(&web(&[&first], &[origin.addr], "")).await;
    let first: SocketAddr = first.parse().unwrap();
    let second: SocketAddr = second.parse().unwrap();
    assert_eq!(origin_of(first).await, "a");
    assert!(client::get(second, "/").await.is_err(), "not yet listening");

    // Add a listener: both serve.
    let applied = proxy
        .live
        .apply(parse(&web(
            &[&first.to_string(), &second.to_string()],
            &[origin.addr],
            "",
        )))
        .unwrap();
    assert_eq!(applied.generation, 2);
    assert_eq!(applied.diff.listeners.added.len(), 1);
    assert_eq!(origin_of(first).await, "a");
    assert_eq!(origin_of(second).await, "a");

    // Remove the first: it stops accepting, the second goes on.
    let applied = proxy
        .live
        .apply(parse(&web(&[&second.to_string()], &[origin.addr], "")))
        .unwrap();
    assert_eq!(applied.diff.listeners.removed[0].address, first);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        client::get(first, "/").await.is_err(),
        "removed listener closed"
    );
    assert_eq!(origin_of(second).await, "a");
    assert_eq!(proxy.live.generation(), 3);
    proxy.stop().await;
    origin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_changes_routes_and_pools() {
    let a = TestOrigin::start("a").await;
    let b = TestOrigin::start("b").await;
    let c = TestOrigin::start("c").await;
    let proxy = TestProxy::start(&config(&[a.addr], "", "")).await;
    let listen = proxy.addr.to_string();
    assert_eq!(origin_of(proxy.addr).await, "a");

    // The pool's node changes: requests reach the new node, through the same listener.
    proxy
        .live
        .apply(parse(&web(&[&listen], &[b.addr], "")))
        .unwrap();
    for _ in 0..3 {
        assert_eq!(origin_of(proxy.addr).await, "b");
    }
    // A new pool and a route to it.
    let routed = web(
        &[&listen],
        &[b.addr],
        "[[virtual_servers.web.routes]]\npath_prefix = \"/c/\"\npool = \"c\"\n",
    ) + &format!("[pools.c]\nnodes = [{{ address = \"{}\" }}]\n", c.addr);
    proxy.live.apply(parse(&routed)).unwrap();
    let response = client::get(proxy.addr, "/c/x").await.unwrap();
    assert_eq!(response.header("x-origin"), Some("c"));
    assert_eq!(origin_of(proxy.addr).await, "b");
    assert_eq!(a.stats.requests(), 1);
    // The listener's port never changed hands: the config said 127.0.0.1:0 at first,
    // then the bound port, which is a new listener; the old one is gone.
    assert_eq!(proxy.live.local_addrs().len(), 1);
    proxy.stop().await;
    for origin in [a, b, c] {
        origin.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_alive_connection_uses_the_new_model_from_its_next_request() {
    let a = TestOrigin::start("a").await;
    let b = TestOrigin::start("b").await;
    let proxy = TestProxy::start(&config(&[a.addr], "", "")).await;
    let mut connection = Connection::open(proxy.addr).await.unwrap();
    let request = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    connection.send(request).await.unwrap();
    assert_eq!(
        connection.response().await.unwrap().header("x-origin"),
        Some("a")
    );
    let candidate = config(&[b.addr], "", "");
    proxy.live.apply(parse(&candidate)).unwrap();
    connection.send(request).await.unwrap();
    assert_eq!(
        connection.response().await.unwrap().header("x-origin"),
        Some("b")
    );
    proxy.stop().await;
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_stays_keeps_its_connections_and_health() {
    let a = TestOrigin::start("a").await;
    let b = TestOrigin::start("b").await;
    let proxy = TestProxy::start(&config(&[a.addr], "", "")).await;
    let listen = proxy.addr.to_string();
    for _ in 0..3 {
        assert_eq!(origin_of(proxy.addr).await, "a");
    }
    let before = proxy.live.current().pools[0].nodes[0].clone();
    // Add a node and change a weight: node a stays, with the same state.
    let candidate = format!(
        "[log]\naccess_log = false\n[pools.web]\nalgorithm = \"weighted_round_robin\"\n\
         nodes = [{{ address = \"{}\", weight = 3 }}, {{ address = \"{}\" }}]\n\
         [virtual_servers.web]\nlisten = \"{listen}\"\npool = \"web\"\n",
        a.addr, b.addr
    );
    proxy.live.apply(parse(&candidate)).unwrap();
    let model = proxy.live.current();
    let kept = &model.pools[0].nodes[0];
    assert!(std::sync::Arc::ptr_eq(kept, &before), "node a carried over");
    assert_eq!(kept.weight(), 3);
    for _ in 0..8 {
        origin_of(proxy.addr).await;
    }
    // One upstream connection to a served every request: the pooled one carried over.
    assert_eq!(a.stats.connections_accepted(), 1);
    assert_eq!(a.stats.requests(), 3 + 6);
    assert_eq!(b.stats.requests(), 2);
    proxy.stop().await;
    a.stop().await;
    b.stop().await;
}

/// A reload that changes a pool's protocol (here to h2c) replaces its nodes, as the
/// LIFECYCLE of crates/weir-upstream says: their idle HTTP/1.1 connections close at once
/// (they stayed open, never used again, and counted in the open connections' gauge).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_to_another_protocol_closes_the_nodes_idle_connections() {
    let a = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&config(&[a.addr], "", "")).await;
    assert_eq!(origin_of(proxy.addr).await, "a");
    assert_eq!(a.stats.connections_open(), 1);
    let listen = proxy.addr.to_string();
    let candidate = format!(
        "[log]\naccess_log = false\n[pools.web]\nprotocol = \"h2c\"\n\
         nodes = [{{ address = \"{}\" }}]\n\
         [virtual_servers.web]\nlisten = \"{listen}\"\npool = \"web\"\n",
        a.addr
    );
    proxy.live.apply(parse(&candidate)).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while a.stats.connections_open() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the HTTP/1.1 connection stayed open"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    proxy.stop().await;
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_robin_carries_on_across_reloads() {
    let a = TestOrigin::start("a").await;
    let b = TestOrigin::start("b").await;
    let proxy = TestProxy::start(&config(&[a.addr, b.addr], "", "")).await;
    let listen = proxy.addr.to_string();
    // One request between reloads: had each reload started the turns over, node a would
    // take every one.
    let mut seen = Vec::new();
    for round in 1..=6 {
        seen.push(origin_of(proxy.addr).await);
        // A pool setting changed each time, so that each reload builds the pool anew.
        let candidate = format!(
            "[log]\naccess_log = false\n[pools.web]\nnodes = [{{ address = \"{}\" }}, \
             {{ address = \"{}\" }}]\n[pools.web.timeouts]\nconnect = \"{round}s\"\n\
             [virtual_servers.web]\nlisten = \"{listen}\"\npool = \"web\"\n",
            a.addr, b.addr
        );
        let before = proxy.live.current().pools[0].clone();
        proxy.live.apply(parse(&candidate)).unwrap();
        assert!(!std::sync::Arc::ptr_eq(
            &before,
            &proxy.live.current().pools[0]
        ));
    }
    assert_eq!(seen, ["a", "b", "a", "b", "a", "b"]);
    proxy.stop().await;
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_in_flight_survives_a_reload_that_removes_its_node() {
    let a = TestOrigin::start("a").await;
    let b = TestOrigin::start("b").await;
    let proxy = TestProxy::start(&config(&[a.addr], "", "")).await;
    let addr = proxy.addr;
    let slow = tokio::spawn(async move { client::get(addr, "/delay/400").await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(proxy.live.current().pools[0].nodes[0].in_flight(), 1);
    proxy
        .live
        .apply(parse(&web(&[&addr.to_string()], &[b.addr], "")))
        .unwrap();
    assert_eq!(origin_of(addr).await, "b");
    let response = slow.await.unwrap().expect("the slow request completes");
    assert_eq!(response.status, 200);
    assert_eq!(response.header("x-origin"), Some("a"));
    // The removed node's connection is closed once its request is done, not pooled.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(a.stats.connections_open(), 0);
    assert!(
        !proxy
            .metrics
            .encode()
            .contains(&format!("node=\"{}\"", a.addr)),
        "a removed node's series are dropped"
    );
    proxy.stop().await;
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_config_is_refused_and_the_old_one_keeps_serving() {
    let a = TestOrigin::start("a").await;
    let dir = TempDir::new("bad");
    let path = dir.0.join("weir.toml");
    let port = weir_testkit::free_ports::<1>()[0];
    let good = web(&[&format!("127.0.0.1:{port}")], &[a.addr], "");
    std::fs::write(&path, &good).unwrap();
    let proxy = TestProxy::start_file(&path).await;
    assert_eq!(origin_of(proxy.addr).await, "a");

    // Line 5 gets a retries value out of range.
    let bad = good.replace("[pools.web]\n", "[pools.web]\nretries = -1\n");
    std::fs::write(&path, &bad).unwrap();
    let error = proxy.live.reload_file().unwrap_err();
    let ReloadError::Config(error) = error else {
        panic!("a config error");
    };
    assert_eq!(
        error.to_string(),
        format!(
            "{}:5: pools.web.retries: must be between 0 and 100",
            path.display()
        )
    );
    // A certificate that does not exist: refused at stage, with its key.
    let missing = good.replace(
        "pool = \"web\"\n",
        "pool = \"web\"\nprotocol = \"https\"\n[virtual_servers.web.tls]\n\
         certificates = [{ cert = \"missing.pem\", key = \"missing.key\" }]\n",
    );
    std::fs::write(&path, &missing).unwrap();
    let error = proxy.live.reload_file().unwrap_err().to_string();
    assert!(
        error.starts_with(&format!(
            "{}:11: virtual_servers.web.tls.certificates[0].cert: cannot read ",
            path.display()
        )),
        "{error}"
    );
    // The old model serves on; the refusals are counted and recorded.
    assert_eq!(proxy.live.generation(), 1);
    assert_eq!(origin_of(proxy.addr).await, "a");
    let metrics = proxy.metrics.encode();
    assert!(
        metrics.contains("weir_config_reloads_total{result=\"refused\"} 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains("weir_config_last_reload_success 0"),
        "{metrics}"
    );
    let last = proxy.live.last_reload().unwrap();
    assert!(last.error.unwrap().contains("certificates[0].cert"));

    // Fixed: applied.
    std::fs::write(
        &path,
        good.replace("[pools.web]\n", "[pools.web]\nretries = 1\n"),
    )
    .unwrap();
    let applied = proxy.live.reload_file().unwrap();
    assert_eq!(applied.generation, 2);
    assert_eq!(applied.diff.pools.changed[0].keys, vec!["retries"]);
    assert!(proxy.metrics.encode().contains("weir_config_generation 2"));
    proxy.stop().await;
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_cannot_leave_a_public_admin_api_without_its_token() {
    let a = TestOrigin::start("a").await;
    let dir = TempDir::new("admin");
    let token = dir.0.join("admin.token");
    std::fs::write(&token, "s3cret\n").unwrap();
    let port = weir_testkit::free_ports::<1>()[0];
    let admin = |listen: &str, token: Option<&std::path::Path>| {
        let token = token.map_or(String::new(), |t| {
            format!("token_file = \"{}\"\n", t.display())
        });
        web(
            &[&format!("127.0.0.1:{port}")],
            &[a.addr],
            &format!("[admin]\nlisten = \"{listen}\"\n{token}"),
        )
    };
    let proxy = TestProxy::start(&admin("0.0.0.0:9", Some(&token))).await;
    // Where `weir serve` bound the admin listener; a reload does not move it.
    proxy.live.set_admin_listen("0.0.0.0:9".parse().unwrap());

    // Moving admin.listen to loopback and dropping the token in the same reload: the
    // listener would stay public without a token. Refused, dry run and reload alike.
    for candidate in [
        admin("127.0.0.1:9", None),
        web(&[&format!("127.0.0.1:{port}")], &[a.addr], ""),
    ] {
        let expected = "admin.token_file: the admin API stays on 0.0.0.0:9";
        let error = proxy
            .live
            .check(&parse(&candidate))
            .unwrap_err()
            .to_string();
        assert!(error.contains(expected), "{error}");
        let error = proxy.live.apply(parse(&candidate)).unwrap_err().to_string();
        assert!(error.contains(expected), "{error}");
    }
    // A token file that cannot be read is refused with its key, not left to fail later.
    let missing = dir.0.join("missing.token");
    let error = proxy
        .live
        .apply(parse(&admin("0.0.0.0:9", Some(&missing))))
        .unwrap_err()
        .to_string();
    assert!(
        error.contains(": admin.token_file: cannot read ") && error.contains("missing.token"),
        "{error}"
    );
    assert_eq!(proxy.live.generation(), 1);
    // Keeping the token is fine, whatever admin.listen says.
    let applied = proxy
        .live
        .apply(parse(&admin("127.0.0.1:9", Some(&token))))
        .unwrap();
    assert_eq!(applied.diff.needs_restart, vec!["admin.listen"]);
    proxy.stop().await;
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_already_in_use_refuses_the_whole_candidate() {
    let a = TestOrigin::start("a").await;
    let b = TestOrigin::start("b").await;
    let taken = TestOrigin::start("taken").await;
    let proxy = TestProxy::start(&config(&[a.addr], "", "")).await;
    let listen = proxy.addr.to_string();
    // The candidate adds a listener on a port in use, and changes the pool.
    let candidate = web(&[&listen, &taken.addr.to_string()], &[b.addr], "");
    let error = proxy.live.apply(parse(&candidate)).unwrap_err().to_string();
    assert!(
        error.contains(&format!(
            ": virtual_servers.web.listen[1]: cannot listen on {}: Address",
            taken.addr
        )),
        "{error}"
    );
    // Nothing changed: the pool still sends to a.
    assert_eq!(origin_of(proxy.addr).await, "a");
    assert_eq!(proxy.live.generation(), 1);
    proxy.stop().await;
    for origin in [a, b, taken] {
        origin.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_sessions_resume_across_reloads() {
    use weir_testkit::tls::{self, ClientOptions, Pki};
    let pki = Pki::new();
    let (cert, key) = pki.server("site", &["site.test"], weir_tls::KeyType::EcdsaP256);
    let a = TestOrigin::start("a").await;
    let b = TestOrigin::start("b").await;
    let https = |node: SocketAddr, listen: &str, extra: &str| {
        format!(
            "[log]\naccess_log = false\n[pools.web]\nnodes = [{{ address = \"{node}\" }}]\n\
             [virtual_servers.web]\nlisten = \"{listen}\"\npool = \"web\"\nprotocol = \"https\"\n\
             [virtual_servers.web.tls]\ncertificates = [{{ cert = \"{}\", key = \"{}\" }}]\n{extra}\n",
            cert.display(),
            key.display()
        )
    };
    let proxy = TestProxy::start(&https(a.addr, "127.0.0.1:0", "")).await;
    let listen = proxy.addr.to_string();
    for options in ClientOptions::each_version() {
        let client = tls::client_config(&options);
        let mut first = tls::connect(proxy.addr, "site.test", &client)
            .await
            .unwrap();
        assert_eq!(tls::get(&mut first, "/").await.unwrap().status, 200);
        // A reload of the pool (certificates re-read), then one of the TLS settings: the
        // ticket keys and the session cache carry over both times.
        proxy
            .live
            .apply(parse(&https(b.addr, &listen, "")))
            .unwrap();
        let mut second = tls::connect(proxy.addr, "site.test", &client)
            .await
            .unwrap();
        assert!(
            tls::was_resumed(&second),
            "{options:?}: after a pool change"
        );
        let response = tls::get(&mut second, "/").await.unwrap();
        assert_eq!(response.header("x-origin"), Some("b"));
        proxy
            .live
            .apply(parse(&https(a.addr, &listen, "handshake_timeout = \"5s\"")))
            .unwrap();
        let mut third = tls::connect(proxy.addr, "site.test", &client)
            .await
            .unwrap();
        assert!(tls::was_resumed(&third), "{options:?}: after a TLS change");
        assert_eq!(tls::get(&mut third, "/").await.unwrap().status, 200);
        // New client certificate checks: no session made without them resumes.
        let checks = format!(
            "client_certificates = \"optional\"\nclient_ca = \"{}\"",
            pki.ca_path().display()
        );
        proxy
            .live
            .apply(parse(&https(a.addr, &listen, &checks)))
            .unwrap();
        let mut fourth = tls::connect(proxy.addr, "site.test", &client)
            .await
            .unwrap();
        assert!(
            !tls::was_resumed(&fourth),
            "{options:?}: a session resumed past new client certificate checks"
        );
        assert_eq!(tls::get(&mut fourth, "/").await.unwrap().status, 200);
        // Back to the first settings for the next client.
        proxy
            .live
            .apply(parse(&https(a.addr, &listen, "")))
            .unwrap();
    }
    proxy.stop().await;
    a.stop().await;
    b.stop().await;
}

/// A reload that re-reads a client CA file whose content changed (same path, same settings)
/// must not let a session verified under the old CAs resume: the client would skip the
/// certificate check the new CAs would refuse. Both the tickets and the session cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_client_ca_file_ends_resumption_of_sessions_it_verified() {
    use weir_testkit::tls::{self, ClientOptions, Pki};
    let pki = Pki::new();
    let other = Pki::new();
    let (cert, key) = pki.server("site", &["site.test"], weir_tls::KeyType::EcdsaP256);
    let bob = pki.client("bob", "bob");
    // The file the config names; its content is what changes.
    let trusted = pki.path("trusted.pem");
    let origin = TestOrigin::start("a").await;
    let https = |listen: &str, extra: &str| {
        format!(
            "[log]\naccess_log = false\n[pools.web]\nnodes = [{{ address = \"{}\" }}]\n\
             [virtual_servers.web]\nlisten = \"{listen}\"\npool = \"web\"\nprotocol = \"https\"\n\
             [virtual_servers.web.tls]\ncertificates = [{{ cert = \"{}\", key = \"{}\" }}]\n\
             client_certificates = \"required\"\nclient_ca = \"{}\"\n{extra}\n",
            origin.addr,
            cert.display(),
            key.display(),
            trusted.display()
        )
    };
    std::fs::copy(pki.ca_path(), &trusted).unwrap();
    let proxy = TestProxy::start(&https("127.0.0.1:0", "")).await;
    let listen = proxy.addr.to_string();
    for (label, extra) in [
        ("tickets", "session_cache_size = 0"),
        ("session cache", "session_tickets = false"),
    ] {
        for tls12 in [false, true] {
            std::fs::copy(pki.ca_path(), &trusted).unwrap();
            proxy.live.apply(parse(&https(&listen, extra))).unwrap();
            let client = tls::client_config(&ClientOptions {
                tls12_only: tls12,
                tls13_only: !tls12,
                client_cert: Some(bob.clone()),
                ..ClientOptions::default()
            });
            let mut first = tls::connect(proxy.addr, "site.test", &client)
                .await
                .unwrap();
            assert_eq!(tls::get(&mut first, "/").await.unwrap().status, 200);
            let mut again = tls::connect(proxy.addr, "site.test", &client)
                .await
                .unwrap();
            assert!(
                tls::was_resumed(&again),
                "{label}, TLS 1.2: {tls12}: the session resumes while the CA is the same"
            );
            assert_eq!(tls::get(&mut again, "/").await.unwrap().status, 200);
            // A reload that reads the same CAs again keeps the sessions.
            proxy.live.apply(parse(&https(&listen, extra))).unwrap();
            let mut kept = tls::connect(proxy.addr, "site.test", &client)
                .await
                .unwrap();
            assert!(
                tls::was_resumed(&kept),
                "{label}, TLS 1.2: {tls12}: an unchanged CA file ended resumption"
            );
            assert_eq!(tls::get(&mut kept, "/").await.unwrap().status, 200);

            // Same path, same settings, another CA in the file: bob's certificate is no
            // longer trusted, and his session must not stand in for it.
            std::fs::copy(other.ca_path(), &trusted).unwrap();
            proxy.live.apply(parse(&https(&listen, extra))).unwrap();
            let served = match tls::connect(proxy.addr, "site.test", &client).await {
                Ok(mut stream) => {
                    assert!(
                        !tls::was_resumed(&stream),
                        "{label}, TLS 1.2: {tls12}: resumed past a changed client CA"
                    );
                    tls::get(&mut stream, "/").await.is_ok()
                }
                Err(_) => false,
            };
            assert!(
                !served,
                "{label}, TLS 1.2: {tls12}: served a certificate the CA file no longer trusts"
            );
        }
    }
    proxy.stop().await;
    origin.stop().await;
}

/// After a reload or a certificate reload changes the client certificate checks, each
/// connection's certificate is checked again under the new ones at its next request: one
/// they still let in goes on (a CA file that adds a CA), one they do not serves no more
/// requests: HTTP/1.1 answers 421 and closes, HTTP/2 refuses the stream (REFUSED_STREAM)
/// and goes away, so that the client comes back through the checks configured now.
/// Reloads that re-read the same CAs leave connections alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_verified_under_replaced_client_cas_serve_no_more_requests() {
    use weir_testkit::tls::{self, ClientOptions, Pki};
    let pki = Pki::new();
    let other = Pki::new();
    let (cert, key) = pki.server("site", &["site.test"], weir_tls::KeyType::EcdsaP256);
    let bob = pki.client("bob", "bob");
    let trusted = pki.path("trusted.pem");
    std::fs::copy(pki.ca_path(), &trusted).unwrap();
    let both = pki.path("both.pem");
    std::fs::write(
        &both,
        [
            std::fs::read(pki.ca_path()).unwrap(),
            std::fs::read(other.ca_path()).unwrap(),
        ]
        .concat(),
    )
    .unwrap();
    let origin = TestOrigin::start("a").await;
    let https = |listen: &str| {
        format!(
            "[log]\naccess_log = false\n[pools.web]\nnodes = [{{ address = \"{}\" }}]\n\
             [virtual_servers.web]\nlisten = \"{listen}\"\npool = \"web\"\nprotocol = \"https\"\n\
             [virtual_servers.web.tls]\ncertificates = [{{ cert = \"{}\", key = \"{}\" }}]\n\
             alpn = [\"h2\", \"http/1.1\"]\n\
             client_certificates = \"required\"\nclient_ca = \"{}\"\n",
            origin.addr,
            cert.display(),
            key.display(),
            trusted.display()
        )
    };
    let proxy = TestProxy::start(&https("127.0.0.1:0")).await;
    let listen = proxy.addr.to_string();
    let options = ClientOptions {
        client_cert: Some(bob),
        resumption: false,
        ..ClientOptions::default()
    };
    let http1 = tls::client_config(&options);
    let mut h2_config = (*tls::client_config(&options)).clone();
    h2_config.alpn_protocols = vec![b"h2".to_vec()];
    let h2_config = std::sync::Arc::new(h2_config);

    // How each way of changing the checks is made, with the CA file given as content.
    type Change<'a> = Box<dyn Fn(&std::path::Path) + 'a>;
    let by_reload: Change = Box::new(|ca| {
        std::fs::copy(ca, &trusted).unwrap();
        proxy.live.apply(parse(&https(&listen))).unwrap();
    });
    let by_certificate_reload: Change = Box::new(|ca| {
        std::fs::copy(ca, &trusted).unwrap();
        proxy.live.reload_certificates().unwrap();
    });
    for (label, change) in [
        ("reload", &by_reload),
        ("certificate reload", &by_certificate_reload),
    ] {
        change(&pki.ca_path());
        let mut kept = tls::connect(proxy.addr, "site.test", &http1).await.unwrap();
        let tcp = tls::connect(proxy.addr, "site.test", &h2_config)
            .await
            .unwrap();
        let (mut sender, connection) = h2::client::handshake(tcp).await.expect("handshake");
        let connection = tokio::spawn(connection);
        let request = || http::Request::get("https://site.test/").body(()).unwrap();
        both_answer(&mut kept, &mut sender, label).await;

        // The same CAs read again: both connections go on.
        change(&pki.ca_path());
        both_answer(&mut kept, &mut sender, label).await;

        // Both CAs in the file: bob's certificate still passes, checked again once per
        // connection: both go on.
        change(&both);
        both_answer(&mut kept, &mut sender, label).await;

        // Another CA only: bob's certificate no longer passes. The HTTP/1.1 connection
        // answers 421 and closes; the HTTP/2 one refuses the stream and goes away.
        change(&other.ca_path());
        let refused = tls::get(&mut kept, "/").await.unwrap();
        assert_eq!(refused.status, 421, "{label}");
        assert_eq!(refused.header("connection"), Some("close"), "{label}");
        let mut rest = Vec::new();
        let read = tokio::time::timeout(
            Duration::from_secs(5),
            tokio::io::AsyncReadExt::read_to_end(&mut kept, &mut rest),
        )
        .await
        .unwrap_or_else(|_| panic!("{label}: the connection stayed open"));
        assert!(read.is_ok_and(|n| n == 0) || rest.is_empty(), "{label}");
        let error = h2_refusal(sender, request()).await;
        assert!(
            error.reason() == Some(h2::Reason::REFUSED_STREAM) || error.is_go_away(),
            "{label}: {error:?}"
        );
        tokio::time::timeout(Duration::from_secs(10), connection)
            .await
            .unwrap_or_else(|_| panic!("{label}: the HTTP/2 connection stayed open"))
            .expect("task")
            .ok();

        change(&pki.ca_path());
        pipelined_across_a_change(proxy.addr, &http1, || change(&other.ca_path()), label).await;
        change(&pki.ca_path());
    }
    drop((by_reload, by_certificate_reload));
    proxy.stop().await;
    origin.stop().await;
}

/// A request on each of a kept HTTP/1.1 and HTTP/2 connection is answered 200.
async fn both_answer(
    kept: &mut weir_testkit::tls::TlsStream<tokio::net::TcpStream>,
    sender: &mut h2::client::SendRequest<bytes::Bytes>,
    label: &str,
) {
    use weir_testkit::tls;
    assert_eq!(tls::get(kept, "/").await.unwrap().status, 200, "{label}");
    let ready = sender.clone().ready().await.expect("ready");
    *sender = ready;
    let request = http::Request::get("https://site.test/").body(()).unwrap();
    let (response, _) = sender.send_request(request, true).expect("sent");
    assert_eq!(response.await.expect("a response").status(), 200, "{label}");
}

/// A request busy at a change of client certificate checks is answered; one pipelined
/// behind it, which reaches weir after the change, is not served (421, or the connection
/// closes first).
async fn pipelined_across_a_change(
    address: SocketAddr,
    http1: &std::sync::Arc<weir_tls::rustls::ClientConfig>,
    change: impl Fn(),
    label: &str,
) {
    let mut busy = weir_testkit::tls::connect(address, "site.test", http1)
        .await
        .unwrap();
    tokio::io::AsyncWriteExt::write_all(
        &mut busy,
        b"GET /delay/600 HTTP/1.1\r\nHost: test\r\n\r\nGET / HTTP/1.1\r\nHost: test\r\n\r\n",
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    change();
    let mut answers = Vec::new();
    let _ = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::io::AsyncReadExt::read_to_end(&mut busy, &mut answers),
    )
    .await
    .unwrap_or_else(|_| panic!("{label}: the busy connection stayed open"));
    let answers = String::from_utf8_lossy(&answers);
    let statuses: Vec<&str> = answers
        .match_indices("HTTP/1.1 ")
        .map(|(at, _)| &answers[at + 9..at + 12])
        .collect();
    assert_eq!(statuses.first(), Some(&"200"), "{label}: {answers}");
    assert!(
        statuses.len() == 1 || statuses[1] == "421",
        "{label}: {answers}"
    );
}

/// The error a request on an HTTP/2 connection ends with (it must not be answered).
async fn h2_refusal(
    sender: h2::client::SendRequest<bytes::Bytes>,
    request: http::Request<()>,
) -> h2::Error {
    let refused = match sender.ready().await {
        Ok(mut ready) => match ready.send_request(request, true) {
            Ok((response, _)) => response.await,
            Err(error) => Err(error),
        },
        Err(error) => Err(error),
    };
    refused.expect_err("the stream is refused")
}

/// A revocation list re-issued on schedule (new times, the same revoked certificates)
/// changes nothing a connection was let in by: a client it does not revoke keeps its
/// connection. A list that revokes that client ends it (421).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reissued_revocation_list_keeps_connections_one_that_revokes_retires_them() {
    use weir_testkit::tls::{self, ClientOptions, Pki};
    let pki = Pki::new();
    let (cert, key) = pki.server("site", &["site.test"], weir_tls::KeyType::EcdsaP256);
    let (bob, carol) = (pki.client("bob", "bob"), pki.client("carol", "carol"));
    let list = pki.path("clients.crl");
    let issue = |revoked: &[&std::path::Path]| {
        let fresh = pki.crl("fresh", revoked);
        std::fs::rename(fresh, &list).unwrap();
    };
    issue(&[&bob.0]);
    let origin = TestOrigin::start("a").await;
    let text = format!(
        "[log]\naccess_log = false\n[pools.web]\nnodes = [{{ address = \"{}\" }}]\n\
         [virtual_servers.web]\nlisten = \"127.0.0.1:0\"\npool = \"web\"\nprotocol = \"https\"\n\
         [virtual_servers.web.tls]\ncertificates = [{{ cert = \"{}\", key = \"{}\" }}]\n\
         client_certificates = \"required\"\nclient_ca = \"{}\"\nclient_crl = \"{}\"\n",
        origin.addr,
        cert.display(),
        key.display(),
        pki.ca_path().display(),
        list.display()
    );
    let proxy = TestProxy::start(&text).await;
    let client = tls::client_config(&ClientOptions {
        client_cert: Some(carol.clone()),
        resumption: false,
        ..ClientOptions::default()
    });
    let mut kept = tls::connect(proxy.addr, "site.test", &client)
        .await
        .unwrap();
    assert_eq!(tls::get(&mut kept, "/").await.unwrap().status, 200);
    // The same list issued again a moment later: other bytes, the same decisions.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let before = std::fs::read(&list).unwrap();
    issue(&[&bob.0]);
    assert_ne!(
        std::fs::read(&list).unwrap(),
        before,
        "a new issue of the list"
    );
    proxy.live.reload_certificates().unwrap();
    assert_eq!(tls::get(&mut kept, "/").await.unwrap().status, 200);
    // Carol revoked: her connection serves no more requests.
    issue(&[&bob.0, &carol.0]);
    proxy.live.reload_certificates().unwrap();
    assert_eq!(tls::get(&mut kept, "/").await.unwrap().status, 421);
    proxy.stop().await;
    origin.stop().await;
}

/// Waits (at most a second) until one request waits in the queue of the first node of the
/// first pool, and checks that it does.
async fn one_waits_for_the_first_node(proxy: &TestProxy) {
    let queued = || proxy.live.current().pools[0].connections[0].queued();
    for _ in 0..100 {
        if queued() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(queued(), 1);
}

/// A config whose pool `web` caps each node at one connection, with `a` in `a_state`.
fn capped(listen: &str, a: SocketAddr, a_state: &str, b: SocketAddr) -> String {
    format!(
        "[log]\naccess_log = false\nlevel = \"warn\"\n\
         [pools.web]\nalgorithm = \"round_robin\"\nretries = 0\n\
         nodes = [{{ address = \"{a}\", state = \"{a_state}\" }}, {{ address = \"{b}\" }}]\n\
         [pools.web.connections]\nmax_connections = 1\n\
         [virtual_servers.web]\nlisten = [\"{listen}\"]\npool = \"web\"\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_waiting_for_a_node_that_is_disabled_go_to_another() {
    let a = TestOrigin::start("a").await;
    let b = TestOrigin::start("b").await;
    let port = weir_testkit::free_ports::<1>()[0];
    let listen: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let proxy = TestProxy::start(&capped(&listen.to_string(), a.addr, "active", b.addr)).await;
    // Round robin with one connection per node: one request at each node, one waiting
    // in each node's queue.
    let requests: Vec<_> = (0..4)
        .map(|_| tokio::spawn(async move { client::get(listen, "/delay/600").await }))
        .collect();
    one_waits_for_the_first_node(&proxy).await;
    // "disabled": no requests (docs/admin-api.md), the one waiting for `a` included.
    proxy
        .live
        .apply(parse(&capped(
            &listen.to_string(),
            a.addr,
            "disabled",
            b.addr,
        )))
        .unwrap();
    let mut origins = Vec::new();
    for request in requests {
        let response = request.await.unwrap().expect("a response");
        assert_eq!(response.status, 200, "no retry was needed (retries = 0)");
        origins.push(response.header("x-origin").unwrap_or_default().to_owned());
    }
    origins.sort();
    assert_eq!(origins, ["a", "b", "b", "b"]);
    assert_eq!(a.stats.requests(), 1);
    proxy.stop().await;
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn needs_restart_lists_what_differs_from_the_running_process() {
    let a = TestOrigin::start("a").await;
    let port = weir_testkit::free_ports::<1>()[0];
    let listen = format!("127.0.0.1:{port}");
    let start = web(&[&listen], &[a.addr], "");
    let proxy = TestProxy::start(&start).await;
    let debug = start.replace("level = \"warn\"", "level = \"debug\"");
    let applied = proxy.live.apply(parse(&debug)).unwrap();
    assert_eq!(applied.diff.needs_restart, ["log.level"]);
    // Still pending after a change of something else.
    let other = format!("{debug}[virtual_servers.web.timeouts]\nidle = \"7s\"\n");
    let applied = proxy.live.apply(parse(&other)).unwrap();
    assert_eq!(applied.diff.needs_restart, ["log.level"]);
    // Back to what the process runs with: nothing pending.
    let applied = proxy.live.apply(parse(&start)).unwrap();
    assert!(applied.diff.needs_restart.is_empty(), "{:?}", applied.diff);
    proxy.stop().await;
    a.stop().await;
}

/// With no other node, a request waiting for a node that is disabled gets 503 at once (not
/// at its queue timeout), counted as finding no node; the one in flight finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_waiting_for_the_only_node_when_it_is_disabled_gets_503() {
    let a = TestOrigin::start("a").await;
    let port = weir_testkit::free_ports::<1>()[0];
    let listen = format!("127.0.0.1:{port}");
    let only = |state: &str| {
        format!(
            "[log]\naccess_log = false\nlevel = \"warn\"\n\
             [pools.web]\nnodes = [{{ address = \"{}\", state = \"{state}\" }}]\n\
             [pools.web.connections]\nmax_connections = 1\nqueue_timeout = \"30s\"\n\
             [virtual_servers.web]\nlisten = [\"{listen}\"]\npool = \"web\"\n",
            a.addr
        )
    };
    let proxy = TestProxy::start(&only("active")).await;
    let addr: SocketAddr = listen.parse().unwrap();
    let in_flight = tokio::spawn(async move { client::get(addr, "/delay/800").await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let waiting = tokio::spawn(async move { client::get(addr, "/").await });
    for _ in 0..100 {
        if proxy.live.current().pools[0].connections[0].queued() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let started = std::time::Instant::now();
    proxy.live.apply(parse(&only("disabled"))).unwrap();
    let refused = waiting.await.unwrap().expect("an answer");
    assert_eq!(refused.status, 503);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(in_flight.await.unwrap().expect("an answer").status, 200);
    let metrics = proxy.metrics.encode();
    assert!(
        metrics.contains("weir_no_node_available_total{pool=\"web\"} 1"),
        "{metrics}"
    );
    proxy.stop().await;
    a.stop().await;
}

/// A config whose pool `web` has the one node `node`, capped at one connection.
fn one_capped_node(listen: &str, node: SocketAddr) -> String {
    format!(
        "[log]\naccess_log = false\nlevel = \"warn\"\n\
         [pools.web]\nretries = 0\nnodes = [{{ address = \"{node}\" }}]\n\
         [pools.web.connections]\nmax_connections = 1\n\
         [virtual_servers.web]\nlisten = [\"{listen}\"]\npool = \"web\"\n"
    )
}

/// A reload that replaces a pool's only node (here by another address; a change of its TLS
/// settings does the same) while a request waits in its queue: the waiting request has no
/// other node of its model to go to, so it finishes on that model, served by the retired
/// node once its busy connection comes back, not answered 503. Requests after the reload go
/// to the new node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_waiting_for_a_replaced_only_node_is_still_served() {
    let a = TestOrigin::start("a").await;
    let b = TestOrigin::start("b").await;
    let port = weir_testkit::free_ports::<1>()[0];
    let listen: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let proxy = TestProxy::start(&one_capped_node(&listen.to_string(), a.addr)).await;
    let requests: Vec<_> = (0..2)
        .map(|_| tokio::spawn(async move { client::get(listen, "/delay/600").await }))
        .collect();
    one_waits_for_the_first_node(&proxy).await;
    proxy
        .live
        .apply(parse(&one_capped_node(&listen.to_string(), b.addr)))
        .unwrap();
    for request in requests {
        let response = request.await.unwrap().expect("a response");
        assert_eq!(response.status, 200);
        assert_eq!(response.header("x-origin"), Some("a"));
    }
    let after = client::get(listen, "/").await.unwrap();
    assert_eq!(after.header("x-origin"), Some("b"));
    proxy.stop().await;
    a.stop().await;
    b.stop().await;
}
