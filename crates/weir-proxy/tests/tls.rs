//! TLS termination and TLS to nodes, end to end, asserted from the client's
//! side: which certificate was served, whether a session resumed, what the
//! node received.

use std::path::Path;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use weir_testkit::tls::{self, ClientOptions, Pki};
use weir_testkit::{TestOrigin, TestProxy};
use weir_tls::KeyType;

fn toml_path(path: &Path) -> String {
    path.display().to_string().replace('\\', "\\\\")
}

/// An HTTPS virtual server `web` in front of `origin` with `tls` as its
/// `[tls]` table body.
fn https_config(origin: &TestOrigin, tls: &str) -> String {
    weir_testkit::config(
        &[origin.addr],
        "",
        &format!("protocol = \"https\"\n[virtual_servers.web.tls]\n{tls}"),
    )
}

fn certificates(list: &[&(std::path::PathBuf, std::path::PathBuf)]) -> String {
    let entries: Vec<String> = list
        .iter()
        .map(|(cert, key)| {
            format!(
                "{{ cert = \"{}\", key = \"{}\" }}",
                toml_path(cert),
                toml_path(key)
            )
        })
        .collect();
    format!("certificates = [{}]", entries.join(", "))
}

fn metric(proxy: &TestProxy, needle: &str) -> f64 {
    proxy
        .metrics
        .encode()
        .lines()
        .filter(|line| line.contains(needle) && !line.starts_with('#'))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test]
async fn ecdsa_and_rsa_certificates_are_chosen_by_what_the_client_supports() {
    let pki = Pki::new();
    let ecdsa = pki.server("ecdsa", &["site.test"], KeyType::EcdsaP256);
    let rsa = pki.server("rsa", &["site.test"], KeyType::Rsa2048);
    let origin = TestOrigin::start("a").await;
    // RSA listed first: the ECDSA one must still win for a client that can use it.
    let proxy = TestProxy::start(&https_config(&origin, &certificates(&[&rsa, &ecdsa]))).await;

    for tls13 in [true, false] {
        let any = tls::client_config(&ClientOptions {
            ca: Some(pki.ca_path()),
            tls13_only: tls13,
            tls12_only: !tls13,
            ..ClientOptions::default()
        });
        let mut stream = tls::connect(proxy.addr, "site.test", &any).await.unwrap();
        assert_eq!(tls::peer_leaf(&stream), tls::leaf(&ecdsa.0));
        assert_eq!(tls::get(&mut stream, "/").await.unwrap().status, 200);

        let rsa_only = tls::client_config(&ClientOptions {
            ca: Some(pki.ca_path()),
            rsa_only: true,
            tls13_only: tls13,
            tls12_only: !tls13,
            ..ClientOptions::default()
        });
        let mut stream = tls::connect(proxy.addr, "site.test", &rsa_only)
            .await
            .unwrap();
        assert_eq!(tls::peer_leaf(&stream), tls::leaf(&rsa.0));
        assert_eq!(tls::get(&mut stream, "/").await.unwrap().status, 200);
    }
    assert_eq!(metric(&proxy, "weir_tls_handshakes_total{"), 4.0);
    assert_eq!(metric(&proxy, "version=\"TLSv1_2\""), 2.0);
    // Each certificate's notAfter as Unix time (a date in the future), not a count of days
    // that goes stale between reloads.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let expiries: Vec<f64> = proxy
        .metrics
        .encode()
        .lines()
        .filter(|line| line.starts_with("weir_tls_certificate_expiry_timestamp_seconds{"))
        .filter_map(|line| line.rsplit(' ').next()?.parse().ok())
        .collect();
    assert_eq!(expiries.len(), 2, "one series per certificate");
    for expiry in expiries {
        assert!(
            now < expiry && expiry < now + 20.0 * 365.0 * 86_400.0,
            "{expiry}"
        );
    }
    proxy.stop().await;
    origin.stop().await;
}

#[tokio::test]
async fn sni_selects_the_certificate_and_the_first_is_the_default() {
    let pki = Pki::new();
    let a = pki.server("a", &["a.test"], KeyType::EcdsaP256);
    let b = pki.server("b", &["b.test"], KeyType::EcdsaP256);
    let wild = pki.server("wild", &["*.w.test"], KeyType::EcdsaP256);
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&https_config(&origin, &certificates(&[&a, &b, &wild]))).await;
    let client = tls::client_config(&ClientOptions::default());
    for (sni, expected) in [
        ("a.test", &a.0),
        ("B.TEST", &b.0),
        ("x.w.test", &wild.0),
        ("unknown.test", &a.0),
        ("127.0.0.1", &a.0),
    ] {
        let mut stream = tls::connect(proxy.addr, sni, &client).await.unwrap();
        assert_eq!(tls::peer_leaf(&stream), tls::leaf(expected), "SNI {sni}");
        assert_eq!(tls::get(&mut stream, "/").await.unwrap().status, 200);
    }
    // A verifying client accepts each named certificate.
    let verifying = tls::client_config(&ClientOptions {
        ca: Some(pki.ca_path()),
        ..ClientOptions::default()
    });
    for sni in ["a.test", "b.test", "deep.w.test"] {
        tls::connect(proxy.addr, sni, &verifying).await.unwrap();
    }
    proxy.stop().await;
    origin.stop().await;
}

/// Two connections with one client config: did the second resume?
async fn second_resumes(addr: std::net::SocketAddr, options: &ClientOptions) -> bool {
    let client = tls::client_config(options);
    let mut first = tls::connect(addr, "site.test", &client).await.unwrap();
    assert!(!tls::was_resumed(&first));
    // Reading the response also reads TLS 1.3 tickets sent after the handshake.
    assert_eq!(tls::get(&mut first, "/").await.unwrap().status, 200);
    let mut second = tls::connect(addr, "site.test", &client).await.unwrap();
    assert_eq!(tls::get(&mut second, "/").await.unwrap().status, 200);
    tls::was_resumed(&second)
}

#[tokio::test]
async fn sessions_resume_when_on_and_not_when_off() {
    let pki = Pki::new();
    let cert = pki.server("site", &["site.test"], KeyType::EcdsaP256);
    let origin = TestOrigin::start("a").await;
    let base = certificates(&[&cert]);
    let tls13 = ClientOptions {
        tls13_only: true,
        ..ClientOptions::default()
    };
    let tls12 = ClientOptions {
        tls12_only: true,
        ..ClientOptions::default()
    };
    let cases = [
        ("tickets and cache (default)", "", true),
        ("tickets only", "session_cache_size = 0", true),
        ("cache only", "session_tickets = false", true),
        (
            "both off",
            "session_tickets = false\nsession_cache_size = 0",
            false,
        ),
    ];
    for (label, extra, resumes) in cases {
        let proxy = TestProxy::start(&https_config(&origin, &format!("{base}\n{extra}"))).await;
        assert_eq!(
            second_resumes(proxy.addr, &tls13).await,
            resumes,
            "TLS 1.3, {label}"
        );
        assert_eq!(
            second_resumes(proxy.addr, &tls12).await,
            resumes,
            "TLS 1.2, {label}"
        );
        let resumed = metric(&proxy, "kind=\"resumed\"");
        assert_eq!(resumed, if resumes { 2.0 } else { 0.0 }, "{label}");
        proxy.stop().await;
    }
    // A client that does not offer resumption never resumes.
    let proxy = TestProxy::start(&https_config(&origin, &base)).await;
    let off = ClientOptions {
        resumption: false,
        ..ClientOptions::default()
    };
    assert!(!second_resumes(proxy.addr, &off).await);
    proxy.stop().await;
    origin.stop().await;
}

#[tokio::test]
async fn reload_swaps_certificates_and_keeps_open_connections_and_a_broken_one_is_refused() {
    let pki = Pki::new();
    let first = pki.server("first", &["site.test"], KeyType::EcdsaP256);
    let origin = TestOrigin::start("a").await;
    let (cert_path, key_path) = (pki.path("live.pem"), pki.path("live.key"));
    std::fs::copy(&first.0, &cert_path).unwrap();
    std::fs::copy(&first.1, &key_path).unwrap();
    let live = (cert_path.clone(), key_path.clone());
    let at_start = std::time::SystemTime::now();
    let proxy = TestProxy::start(&https_config(&origin, &certificates(&[&live]))).await;
    let client = tls::client_config(&ClientOptions {
        resumption: false,
        ..ClientOptions::default()
    });
    let mut open = tls::connect(proxy.addr, "site.test", &client)
        .await
        .unwrap();
    assert_eq!(tls::get(&mut open, "/").await.unwrap().status, 200);
    assert_eq!(tls::peer_leaf(&open), tls::leaf(&first.0));

    let second = pki.server("second", &["site.test"], KeyType::Rsa2048);
    std::fs::copy(&second.0, &cert_path).unwrap();
    std::fs::copy(&second.1, &key_path).unwrap();
    proxy.tls[0].reload().unwrap();
    let fresh = tls::connect(proxy.addr, "site.test", &client)
        .await
        .unwrap();
    assert_eq!(tls::peer_leaf(&fresh), tls::leaf(&second.0));
    // The connection opened before the reload still works.
    assert_eq!(tls::get(&mut open, "/").await.unwrap().status, 200);
    // A reload of the unchanged file re-reads them too, and says so.
    let same = https_config(&origin, &certificates(&[&live]));
    let applied = proxy
        .live
        .apply(weir_config::parse_str(&same, "test.toml").unwrap())
        .unwrap();
    assert_eq!(
        applied.summary(),
        "no changes; TLS certificates and keys re-read for 1 virtual servers and pools"
    );

    // A key that does not belong to the certificate: refused, old one kept.
    std::fs::copy(&first.1, &key_path).unwrap();
    let error = proxy.tls[0].reload().unwrap_err().to_string();
    assert!(
        error.contains("virtual_servers.web.tls.certificates[0].key")
            && error.contains("does not belong"),
        "{error}"
    );
    // Garbage instead of a certificate: refused too.
    std::fs::write(&cert_path, "not a certificate").unwrap();
    let error = proxy.tls[0].reload().unwrap_err().to_string();
    assert!(error.contains("certificates[0].cert"), "{error}");
    let after = tls::connect(proxy.addr, "site.test", &client)
        .await
        .unwrap();
    assert_eq!(tls::peer_leaf(&after), tls::leaf(&second.0));
    // The admin API's certificate reload (`Live::reload_certificates`) counts as a reload:
    // a refused one is seen in the metrics an operator alerts on, and a good one clears it.
    let reloads = |proxy: &TestProxy| {
        let text = proxy.metrics.encode();
        let value = |sample: &str| {
            text.lines()
                .find_map(|line| line.strip_prefix(sample)?.trim().parse::<f64>().ok())
                .unwrap_or(-1.0)
        };
        (
            value("weir_config_reloads_total{result=\"refused\"}"),
            value("weir_config_last_reload_success"),
            value("weir_config_last_reload_timestamp_seconds"),
        )
    };
    let (refused, _, before) = reloads(&proxy);
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(proxy.live.reload_certificates().is_err());
    // When it was tried is kept too, for an alert on how long ago the last reload was.
    let (refused_now, success, tried) = reloads(&proxy);
    assert_eq!((refused_now, success), (refused + 1.0, 0.0));
    assert!(tried > before, "{tried} {before}");
    let last = proxy
        .live
        .last_reload()
        .expect("the refused reload is kept");
    assert!(last.error.unwrap().contains("certificates[0].cert"));
    std::fs::copy(&second.0, &cert_path).unwrap();
    std::fs::copy(&second.1, &key_path).unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(proxy.live.reload_certificates().unwrap(), 1);
    let (refused_now, success, applied) = reloads(&proxy);
    assert_eq!((refused_now, success), (refused + 1.0, 1.0));
    assert!(applied > tried, "{applied} {tried}");
    let last = proxy
        .live
        .last_reload()
        .expect("the applied reload is kept");
    assert!(last.error.is_none() && last.at >= at_start, "{last:?}");
    drop((open, fresh, after));
    proxy.stop().await;
    origin.stop().await;
}

#[tokio::test]
async fn required_client_certificates_refuse_clients_without_one_and_forward_the_subject() {
    let pki = Pki::new();
    let cert = pki.server("site", &["site.test"], KeyType::EcdsaP256);
    let alice = pki.client("alice", "alice");
    let origin = TestOrigin::start("a").await;
    let tls_table = format!(
        "{}\nclient_certificates = \"required\"\nclient_ca = \"{}\"\nclient_subject_header = \"X-Client-Subject\"",
        certificates(&[&cert]),
        toml_path(&pki.ca_path())
    );
    let proxy = TestProxy::start(&https_config(&origin, &tls_table)).await;

    let anonymous = tls::client_config(&ClientOptions::default());
    let refused = match tls::connect(proxy.addr, "site.test", &anonymous).await {
        // TLS 1.3: the client finishes first; the refusal arrives as an alert.
        Ok(mut stream) => tls::get(&mut stream, "/").await.is_err(),
        Err(_) => true,
    };
    assert!(refused, "a client without a certificate was served");

    let with_cert = tls::client_config(&ClientOptions {
        client_cert: Some(alice.clone()),
        ..ClientOptions::default()
    });
    let mut stream = tls::connect(proxy.addr, "site.test", &with_cert)
        .await
        .unwrap();
    // A client that sends its own subject header cannot forge one.
    stream
        .write_all(b"GET /echo HTTP/1.1\r\nHost: test\r\nX-Client-Subject: CN=mallory\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 16 * 1024];
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains('}') {
        let n = stream.read(&mut buf).await.unwrap();
        assert!(n > 0);
        seen.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&seen);
    assert!(text.contains("CN=alice"), "{text}");
    assert!(!text.contains("mallory"), "{text}");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(metric(&proxy, "reason=\"client_certificate\"") >= 1.0);
    proxy.stop().await;
    origin.stop().await;
}

/// `client_crl`: a client certificate the CA's revocation list names is refused, one it
/// does not name is served; a reload that re-reads a list revoking a certificate refuses it
/// from then on, a resumed session included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoked_client_certificates_are_refused() {
    let pki = Pki::new();
    let cert = pki.server("site", &["site.test"], KeyType::EcdsaP256);
    let alice = pki.client("alice", "alice");
    let mallory = pki.client("mallory", "mallory");
    let crl = pki.crl("revoked", &[&mallory.0]);
    let origin = TestOrigin::start("a").await;
    let tls_table = format!(
        "{}\nclient_certificates = \"required\"\nclient_ca = \"{}\"\nclient_crl = \"{}\"",
        certificates(&[&cert]),
        toml_path(&pki.ca_path()),
        toml_path(&crl)
    );
    let proxy = TestProxy::start(&https_config(&origin, &tls_table)).await;
    let served = |client: &std::sync::Arc<weir_tls::rustls::ClientConfig>| {
        let client = std::sync::Arc::clone(client);
        let addr = proxy.addr;
        async move {
            match tls::connect(addr, "site.test", &client).await {
                Ok(mut stream) => tls::get(&mut stream, "/")
                    .await
                    .is_ok_and(|r| r.status == 200),
                Err(_) => false,
            }
        }
    };
    let as_alice = tls::client_config(&ClientOptions {
        client_cert: Some(alice.clone()),
        ..ClientOptions::default()
    });
    let as_mallory = tls::client_config(&ClientOptions {
        client_cert: Some(mallory.clone()),
        ..ClientOptions::default()
    });
    assert!(served(&as_alice).await, "alice is not revoked");
    assert!(!served(&as_mallory).await, "mallory is revoked");

    // Alice revoked too, and the list re-read: her next handshake (a resumption, by
    // this client's session store) is refused.
    let both = pki.crl("both", &[&mallory.0, &alice.0]);
    std::fs::copy(&both, &crl).unwrap();
    proxy.tls[0].reload().unwrap();
    assert!(!served(&as_alice).await, "alice is revoked now");
    proxy.stop().await;
    origin.stop().await;
}

#[tokio::test]
async fn optional_client_certificates_serve_both_and_forward_only_a_verified_subject() {
    let pki = Pki::new();
    let stranger_ca = Pki::new();
    let cert = pki.server("site", &["site.test"], KeyType::EcdsaP256);
    let bob = pki.client("bob", "bob");
    let mallory = stranger_ca.client("mallory", "mallory");
    let origin = TestOrigin::start("a").await;
    let tls_table = format!(
        "{}\nclient_certificates = \"optional\"\nclient_ca = \"{}\"\nclient_subject_header = \"X-Client-Subject\"",
        certificates(&[&cert]),
        toml_path(&pki.ca_path())
    );
    let proxy = TestProxy::start(&https_config(&origin, &tls_table)).await;

    let anonymous = tls::client_config(&ClientOptions::default());
    let mut stream = tls::connect(proxy.addr, "site.test", &anonymous)
        .await
        .unwrap();
    let response = tls::get(&mut stream, "/echo").await.unwrap();
    assert_eq!(response.status, 200);
    assert!(
        !response.text().contains("X-Client-Subject"),
        "{}",
        response.text()
    );

    let with_cert = tls::client_config(&ClientOptions {
        client_cert: Some(bob),
        ..ClientOptions::default()
    });
    let mut stream = tls::connect(proxy.addr, "site.test", &with_cert)
        .await
        .unwrap();
    let response = tls::get(&mut stream, "/echo").await.unwrap();
    assert!(response.text().contains("CN=bob"), "{}", response.text());

    // A certificate from another CA is refused, not ignored.
    let forged = tls::client_config(&ClientOptions {
        client_cert: Some(mallory),
        ..ClientOptions::default()
    });
    let refused = match tls::connect(proxy.addr, "site.test", &forged).await {
        Ok(mut stream) => tls::get(&mut stream, "/echo").await.is_err(),
        Err(_) => true,
    };
    assert!(refused, "a certificate from an unknown CA was accepted");
    proxy.stop().await;
    origin.stop().await;
}

/// The CVE-2025-23419 class: a session made where no client certificate is
/// asked for must not let a client into a virtual server that requires one.
#[tokio::test]
async fn a_session_never_resumes_into_a_stricter_client_certificate_policy() {
    let pki = Pki::new();
    let cert = pki.server("site", &["site.test"], KeyType::EcdsaP256);
    let origin = TestOrigin::start("a").await;
    let open = TestProxy::start(&https_config(&origin, &certificates(&[&cert]))).await;
    let locked = TestProxy::start(&https_config(
        &origin,
        &format!(
            "{}\nclient_certificates = \"required\"\nclient_ca = \"{}\"",
            certificates(&[&cert]),
            toml_path(&pki.ca_path())
        ),
    ))
    .await;
    for tls12 in [false, true] {
        // One client config: its session store is keyed by name, so the
        // session from `open` is offered to `locked`.
        let client = tls::client_config(&ClientOptions {
            tls12_only: tls12,
            tls13_only: !tls12,
            ..ClientOptions::default()
        });
        let mut first = tls::connect(open.addr, "site.test", &client).await.unwrap();
        assert_eq!(tls::get(&mut first, "/").await.unwrap().status, 200);
        let mut again = tls::connect(open.addr, "site.test", &client).await.unwrap();
        assert_eq!(tls::get(&mut again, "/").await.unwrap().status, 200);
        assert!(
            tls::was_resumed(&again),
            "the session is resumable where it was made"
        );

        let served = match tls::connect(locked.addr, "site.test", &client).await {
            Ok(mut stream) => {
                assert!(!tls::was_resumed(&stream), "resumed into the locked server");
                tls::get(&mut stream, "/").await.is_ok()
            }
            Err(_) => false,
        };
        assert!(
            !served,
            "served without a client certificate (TLS 1.2: {tls12})"
        );
    }
    assert_eq!(metric(&locked, "kind=\"resumed\""), 0.0);
    open.stop().await;
    locked.stop().await;
    origin.stop().await;
}

/// An HTTPS virtual server for `site.test` that allows one handshake at a time, for 300 ms.
/// The PKI is returned because its files must outlive the proxy.
async fn strict_handshakes() -> (Pki, TestOrigin, TestProxy) {
    let pki = Pki::new();
    let cert = pki.server("site", &["site.test"], KeyType::EcdsaP256);
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&https_config(
        &origin,
        &format!(
            "{}\nhandshake_timeout = \"300ms\"\nmax_handshakes = 1",
            certificates(&[&cert])
        ),
    ))
    .await;
    (pki, origin, proxy)
}

#[tokio::test]
async fn handshake_timeout_overload_and_plain_http_close_the_connection() {
    let (_pki, origin, proxy) = strict_handshakes().await;
    // A connection that starts a hello and never finishes it holds the one handshake
    // slot (one that sends nothing is not even accepted: the listener defers)...
    let mut silent = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    silent.write_all(&[0x16, 0x03, 0x01]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    // ...so the next one is closed at once.
    let mut second = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    second.write_all(&[0x16, 0x03, 0x01]).await.unwrap();
    let mut byte = [0u8; 1];
    let closed = tokio::time::timeout(Duration::from_millis(250), second.read(&mut byte)).await;
    assert!(matches!(closed, Ok(Ok(0)) | Ok(Err(_))), "{closed:?}");
    // The silent one is closed after the handshake timeout.
    let closed = tokio::time::timeout(Duration::from_secs(3), silent.read(&mut byte)).await;
    assert!(matches!(closed, Ok(Ok(0)) | Ok(Err(_))), "{closed:?}");
    // Plain HTTP to the TLS port: no answer in clear, the connection is closed.
    let reply =
        weir_testkit::client::raw_exchange(proxy.addr, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
            .await
            .unwrap_or_default();
    assert!(!String::from_utf8_lossy(&reply).contains("200 OK"));
    // And a real client is still served.
    let client = tls::client_config(&ClientOptions::default());
    let mut stream = tls::connect(proxy.addr, "site.test", &client)
        .await
        .unwrap();
    assert_eq!(tls::get(&mut stream, "/").await.unwrap().status, 200);
    assert_eq!(metric(&proxy, "reason=\"overload\""), 1.0);
    assert_eq!(metric(&proxy, "reason=\"timeout\""), 1.0);
    assert_eq!(metric(&proxy, "reason=\"protocol\""), 1.0);
    proxy.stop().await;
    origin.stop().await;
}

/// A request (a `tls::get`, not yet awaited) answered 200 well within the 300 ms handshake
/// timeout of [`strict_handshakes`]: nothing held it back.
async fn answered_quickly<E: std::fmt::Debug>(
    get: impl std::future::Future<Output = Result<weir_testkit::client::Response, E>>,
) {
    let started = std::time::Instant::now();
    assert_eq!(get.await.unwrap().status, 200);
    assert!(
        started.elapsed() < Duration::from_millis(250),
        "{:?}",
        started.elapsed()
    );
}

/// weir reads a client's Finished together with its request (the Finished alone does not
/// wake it: `crates/weir-tls/src/hold.rs`). A client that finishes and stays silent past
/// the handshake timeout still has a finished handshake and keeps no other client out
/// (`max_handshakes = 1`), and a request smaller than the Finished, sent later on the
/// same connection, is answered at once.
#[tokio::test]
async fn a_finished_held_back_for_the_request_never_stalls_a_connection() {
    let (_pki, origin, proxy) = strict_handshakes().await;
    let client = tls::client_config(&ClientOptions {
        tls13_only: true,
        ..ClientOptions::default()
    });
    // Silent for twice the handshake timeout after the client's Finished...
    let mut late = tls::connect(proxy.addr, "site.test", &client)
        .await
        .unwrap();
    // ...while another client takes the one handshake slot and is served.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut other = tls::connect(proxy.addr, "site.test", &client)
        .await
        .unwrap();
    assert_eq!(tls::get(&mut other, "/").await.unwrap().status, 200);
    tokio::time::sleep(Duration::from_millis(550)).await;
    answered_quickly(tls::get(&mut late, "/")).await;
    // The smallest request there is, in a record below the held mark, on a kept-alive
    // connection: answered well within the handshake timeout.
    let mut kept = tls::connect(proxy.addr, "site.test", &client)
        .await
        .unwrap();
    assert_eq!(tls::get(&mut kept, "/").await.unwrap().status, 200);
    tokio::time::sleep(Duration::from_millis(50)).await;
    // `get` sends `GET / HTTP/1.1` and one header: 34 bytes, a 56-byte record.
    assert!(34 + 22 < weir_tls::hold::HELD_BYTES as usize);
    answered_quickly(tls::get(&mut kept, "/")).await;
    assert_eq!(metric(&proxy, "weir_tls_handshake_failures_total"), 0.0);
    proxy.stop().await;
    origin.stop().await;
}

/// A TLS node given by DNS name, with no `server_name`: weir sends that name as SNI and
/// verifies the node's certificate against it (nginx's `proxy_ssl_name` defaults to the
/// host of `proxy_pass` the same way), for requests and for HTTP health checks alike. A
/// `server_name` still wins over it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_node_given_by_name_is_verified_against_that_name() {
    use weir_testkit::dns::{Reply, TestDns};
    let pki = Pki::new();
    let node_cert = pki.server("node", &["node.test"], KeyType::EcdsaP256);
    let origin = TestOrigin::start("a").await;
    let tls_node = TestProxy::start(&https_config(&origin, &certificates(&[&node_cert]))).await;
    let dns = TestDns::start();
    dns.set("node.test", Reply::Records(vec![tls_node.addr.ip()], 60));
    let front = |server_name: &str| {
        format!(
            "[log]\naccess_log = false\nlevel = \"warn\"\n\
             [pools.web]\nnodes = [{{ address = \"node.test:{}\" }}]\nretries = 0\n\
             [pools.web.tls]\nca = \"{}\"\n{server_name}\n\
             [pools.web.health]\ntype = \"http\"\ninterval = \"200ms\"\ntimeout = \"150ms\"\n\
             fall = 1\nrise = 1\n\
             [pools.web.dns]\nservers = [\"{}\"]\n\
             [virtual_servers.web]\nlisten = [\"127.0.0.1:0\"]\npool = \"web\"\n",
            tls_node.addr.port(),
            toml_path(&pki.ca_path()),
            dns.address
        )
    };
    let named = TestProxy::start(&front("")).await;
    for _ in 0..3 {
        let response = weir_testkit::client::get(named.addr, "/").await.unwrap();
        assert_eq!(response.status, 200, "{}", response.text());
    }
    // The health checks verify the same name: after several of them the node is up.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let model = named.live.current();
    let pool = model.pool("web").unwrap();
    assert!(pool.nodes[0].is_active_up(), "the monitor marked it down");
    assert_eq!(metric(&named, "kind=\"failed\""), 0.0);
    // An explicit server_name is what is verified: the request's handshake fails (502),
    // or the monitor's first check, made at once, failed it first and marked the node down
    // (503); either way a handshake failed.
    let other = TestProxy::start(&front("server_name = \"other.test\"")).await;
    let response = weir_testkit::client::get(other.addr, "/").await.unwrap();
    assert!(matches!(response.status, 502 | 503), "{}", response.status);
    assert!(metric(&other, "kind=\"failed\"") >= 1.0);
    for proxy in [named, other, tls_node] {
        proxy.stop().await;
    }
    origin.stop().await;
}

/// Health checks over TLS count their handshakes as the traffic's do: with no request at
/// all, a node whose certificate weir refuses is marked down and the refusals show as
/// failed handshakes (they showed nothing), and a good node's checks show as full and
/// resumed ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_checks_count_their_tls_handshakes() {
    let pki = Pki::new();
    let other = Pki::new();
    let node_cert = pki.server("node", &["node.internal"], KeyType::EcdsaP256);
    let origin = TestOrigin::start("a").await;
    let tls_node = TestProxy::start(&https_config(&origin, &certificates(&[&node_cert]))).await;
    let checked = |ca: &Path| {
        weir_testkit::config(
            &[tls_node.addr],
            &format!(
                "[pools.web.tls]\nca = \"{}\"\nserver_name = \"node.internal\"\n\
                 [pools.web.health]\ntype = \"http\"\ninterval = \"100ms\"\ntimeout = \"90ms\"\n\
                 fall = 1\nrise = 1",
                toml_path(ca)
            ),
            "",
        )
    };
    let good = TestProxy::start(&checked(&pki.ca_path())).await;
    let refused = TestProxy::start(&checked(&other.ca_path())).await;
    // A node that takes connections and never answers a ClientHello: each check's
    // handshake ends at the check's timeout, and counts as failed too.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_addr = silent.local_addr().unwrap();
    let held = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((tcp, _)) = silent.accept().await {
            held.push(tcp);
        }
    });
    let mute = TestProxy::start(
        &checked(&pki.ca_path()).replace(&tls_node.addr.to_string(), &silent_addr.to_string()),
    )
    .await;
    // Each check of the mute node takes its 90 ms timeout, then waits its 100 ms interval:
    // about six checks in this time, half of which the test needs under a loaded CI.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let (full, resumed) = (
        metric(&good, "kind=\"full\"}"),
        metric(&good, "kind=\"resumed\"}"),
    );
    assert!(
        full >= 1.0 && full + resumed >= 3.0,
        "{full} full, {resumed} resumed"
    );
    assert_eq!(metric(&good, "kind=\"failed\"}"), 0.0);
    assert!(metric(&refused, "kind=\"failed\"}") >= 3.0);
    assert!(metric(&mute, "kind=\"failed\"}") >= 3.0);
    let model = refused.live.current();
    assert!(!model.pool("web").unwrap().nodes[0].is_active_up());
    for proxy in [good, refused, mute, tls_node] {
        proxy.stop().await;
    }
    held.abort();
    origin.stop().await;
}

/// A TLS node that answers each request `ok` with keep-alive (`/slow` after 300 ms) and
/// reports how each of its connections ended: `true` for a close_notify before the end, `false` for an end
/// without one (or a reset).
async fn tls_node_reporting_ends(
    pki: &Pki,
) -> (
    std::net::SocketAddr,
    tokio::sync::mpsc::UnboundedReceiver<bool>,
) {
    let acceptor = pki.acceptor(&["node.internal"], &[]);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (ends, ended) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, ends) = (std::sync::Arc::clone(&acceptor), ends.clone());
            tokio::spawn(async move {
                let Ok((mut stream, _)) =
                    acceptor.accept(tcp, weir_tls::FirstSpeaker::Client).await
                else {
                    return;
                };
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    match stream.read(&mut buf).await {
                        Ok(0) => {
                            let _ = ends.send(true);
                            return;
                        }
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                        Err(_) => {
                            let _ = ends.send(false);
                            return;
                        }
                    }
                    if head.windows(4).any(|w| w == b"\r\n\r\n") {
                        if head.starts_with(b"GET /slow ") {
                            tokio::time::sleep(Duration::from_millis(300)).await;
                        }
                        head.clear();
                        let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
                        if stream.write_all(answer).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    (addr, ended)
}

/// weir ends a TLS connection to a node that it closes between requests (idle past the
/// pool's `idle_timeout`, retired at `max_requests_per_connection`) with a close_notify
/// (RFC 8446 §6.1), not a bare FIN: the node sees a clean end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_tls_connections_to_nodes_close_with_a_close_notify() {
    let pki = Pki::new();
    let (node, mut ends) = tls_node_reporting_ends(&pki).await;
    for connections in [
        "idle_timeout = \"200ms\"",
        "max_requests_per_connection = 1",
    ] {
        let proxy = TestProxy::start(&weir_testkit::config(
            &[node],
            &format!(
                "[pools.web.connections]\n{connections}\n[pools.web.tls]\nca = \"{}\"\n\
                 server_name = \"node.internal\"",
                toml_path(&pki.ca_path())
            ),
            "",
        ))
        .await;
        let response = weir_testkit::client::get(proxy.addr, "/").await.unwrap();
        assert_eq!(response.status, 200, "{connections}");
        let end = tokio::time::timeout(Duration::from_secs(3), ends.recv()).await;
        assert_eq!(
            end,
            Ok(Some(true)),
            "{connections}: the node saw no close_notify"
        );
        proxy.stop().await;
    }
}

/// A connection busy when its node was set draining closes when its answer is in, and
/// with a close_notify too (it was dropped bare).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_connection_busy_when_its_node_drains_closes_with_a_close_notify() {
    let pki = Pki::new();
    let (node, mut ends) = tls_node_reporting_ends(&pki).await;
    let config = |state: &str| {
        weir_testkit::config(
            &[node],
            &format!(
                "[pools.web.tls]\nca = \"{}\"\nserver_name = \"node.internal\"",
                toml_path(&pki.ca_path())
            ),
            "",
        )
        .replace(
            &format!("{{ address = \"{node}\" }}"),
            &format!("{{ address = \"{node}\", state = \"{state}\" }}"),
        )
    };
    let proxy = TestProxy::start(&config("active")).await;
    let addr = proxy.addr;
    let slow = tokio::spawn(async move { weir_testkit::client::get(addr, "/slow").await });
    // Drained once the request is at the node.
    let node_state = proxy.live.current().pools[0].nodes[0].clone();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while node_state.in_flight() == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the request never left"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let draining = weir_config::parse_str(&config("draining"), "test.toml").unwrap();
    proxy.live.apply(draining).unwrap();
    assert_eq!(slow.await.unwrap().unwrap().status, 200);
    let end = tokio::time::timeout(Duration::from_secs(3), ends.recv()).await;
    assert_eq!(end, Ok(Some(true)), "the node saw no close_notify");
    proxy.stop().await;
}

/// A pool of `node` over TLS (verified by `pki`'s CA) with HTTP checks every second.
/// A check past its timeout is dropped without a close_notify, as it should be: the
/// timeout is long enough that a check on a loaded test machine finishes within it.
fn health_checked_over_tls(node: std::net::SocketAddr, pki: &Pki) -> String {
    weir_testkit::config(
        &[node],
        &format!(
            "[pools.web.tls]\nca = \"{}\"\nserver_name = \"node.internal\"\n\
             [pools.web.health]\ntype = \"http\"\ninterval = \"1s\"\ntimeout = \"900ms\"",
            toml_path(&pki.ca_path())
        ),
        "",
    )
}

/// The next three connection ends a node reports were each after a close_notify.
async fn three_checks_end_with_a_close_notify(
    ends: &mut tokio::sync::mpsc::UnboundedReceiver<bool>,
) {
    for check in 0..3 {
        let end = tokio::time::timeout(Duration::from_secs(3), ends.recv()).await;
        assert_eq!(end, Ok(Some(true)), "check {check}: no close_notify");
    }
}

/// A health check's own TLS connection ends with a close_notify too, once the check has
/// its answer: a node that logs a bare end of every connection (OpenSSL's
/// UNEXPECTED_EOF) logged one per check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_check_connections_over_tls_close_with_a_close_notify() {
    let pki = Pki::new();
    let (node, mut ends) = tls_node_reporting_ends(&pki).await;
    let proxy = TestProxy::start(&health_checked_over_tls(node, &pki)).await;
    three_checks_end_with_a_close_notify(&mut ends).await;
    proxy.stop().await;
}

/// A check that fails (here the node ends its side with a close_notify before any
/// answer) closes with a close_notify too, not only one that got its answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_health_check_over_tls_still_closes_with_a_close_notify() {
    let pki = Pki::new();
    let acceptor = pki.acceptor(&["node.internal"], &[]);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let node = listener.local_addr().unwrap();
    let (ends, mut ended) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, ends) = (std::sync::Arc::clone(&acceptor), ends.clone());
            tokio::spawn(async move {
                let Ok((mut stream, _)) =
                    acceptor.accept(tcp, weir_tls::FirstSpeaker::Client).await
                else {
                    return;
                };
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf).await;
                // No answer: the node's own close_notify, then how weir ends its side.
                stream.get_mut().1.send_close_notify();
                let _ = stream.flush().await;
                let clean = loop {
                    match stream.read(&mut buf).await {
                        Ok(0) => break true,
                        Ok(_) => {}
                        Err(_) => break false,
                    }
                };
                let _ = ends.send(clean);
            });
        }
    });
    let proxy = TestProxy::start(&health_checked_over_tls(node, &pki)).await;
    three_checks_end_with_a_close_notify(&mut ended).await;
    proxy.stop().await;
}

/// A node that completes the handshake and then answers with bytes that are not TLS:
/// its checks fail (the node goes down) but its handshakes did not, as a request's
/// counts show for the same node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_error_after_a_checks_handshake_is_no_failed_handshake() {
    let pki = Pki::new();
    let acceptor = pki.acceptor(&["node.internal"], &[]);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let node = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = std::sync::Arc::clone(&acceptor);
            tokio::spawn(async move {
                let Ok((mut stream, _)) =
                    acceptor.accept(tcp, weir_tls::FirstSpeaker::Client).await
                else {
                    return;
                };
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf).await;
                // Plain text where a TLS record belongs.
                let _ = stream
                    .get_mut()
                    .0
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                    .await;
            });
        }
    });
    let proxy = TestProxy::start(&weir_testkit::config(
        &[node],
        &format!(
            "[pools.web.tls]\nca = \"{}\"\nserver_name = \"node.internal\"\n\
             [pools.web.health]\ntype = \"http\"\ninterval = \"100ms\"\ntimeout = \"90ms\"\n\
             fall = 1\nrise = 1",
            toml_path(&pki.ca_path())
        ),
        "",
    ))
    .await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let model = proxy.live.current();
    assert!(!model.pool("web").unwrap().nodes[0].is_active_up());
    assert!(metric(&proxy, "kind=\"full\"}") + metric(&proxy, "kind=\"resumed\"}") >= 2.0);
    assert_eq!(metric(&proxy, "kind=\"failed\"}"), 0.0);
    proxy.stop().await;
}

/// weir to nodes over TLS: a second weir terminates TLS in front of the
/// origin and plays the TLS node.
#[tokio::test]
async fn upstream_tls_verifies_nodes_and_a_failure_is_a_502() {
    let pki = Pki::new();
    let other = Pki::new();
    let node_cert = pki.server("node", &["node.internal"], KeyType::EcdsaP256);
    let origin = TestOrigin::start("a").await;
    let tls_node = TestProxy::start(&https_config(&origin, &certificates(&[&node_cert]))).await;

    let front = |pool_tls: &str| {
        weir_testkit::config(
            &[tls_node.addr],
            &format!("retries = 0\n[pools.web.tls]\n{pool_tls}"),
            "",
        )
    };
    // Verified against the right CA, with the right name: served, and the
    // pooled TLS connection is reused.
    let good = TestProxy::start(&front(&format!(
        "ca = \"{}\"\nserver_name = \"node.internal\"",
        toml_path(&pki.ca_path())
    )))
    .await;
    for _ in 0..3 {
        let response = weir_testkit::client::get(good.addr, "/").await.unwrap();
        assert_eq!(response.status, 200);
    }
    assert_eq!(
        metric(
            &good,
            "weir_upstream_tls_handshakes_total{pool=\"web\",kind=\"full\"}"
        ),
        1.0
    );
    assert_eq!(metric(&good, "weir_upstream_connections_reused_total"), 2.0);

    // One request per upstream connection: later connections resume the session.
    let fresh = TestProxy::start(&weir_testkit::config(
        &[tls_node.addr],
        &format!(
            "retries = 0\n[pools.web.connections]\nmax_requests_per_connection = 1\n\
             [pools.web.tls]\nca = \"{}\"\nserver_name = \"node.internal\"",
            toml_path(&pki.ca_path())
        ),
        "",
    ))
    .await;
    for _ in 0..3 {
        let response = weir_testkit::client::get(fresh.addr, "/").await.unwrap();
        assert_eq!(response.status, 200);
    }
    assert_eq!(metric(&fresh, "kind=\"full\"}"), 1.0);
    assert_eq!(metric(&fresh, "kind=\"resumed\"}"), 2.0);
    fresh.stop().await;

    // A CA that did not issue the node's certificate: 502.
    let wrong_ca = TestProxy::start(&front(&format!(
        "ca = \"{}\"\nserver_name = \"node.internal\"",
        toml_path(&other.ca_path())
    )))
    .await;
    let response = weir_testkit::client::get(wrong_ca.addr, "/").await.unwrap();
    assert_eq!(response.status, 502);
    assert_eq!(metric(&wrong_ca, "kind=\"failed\""), 1.0);

    // The right CA but the wrong name: 502 too.
    let wrong_name = TestProxy::start(&front(&format!(
        "ca = \"{}\"\nserver_name = \"other.internal\"",
        toml_path(&pki.ca_path())
    )))
    .await;
    let response = weir_testkit::client::get(wrong_name.addr, "/")
        .await
        .unwrap();
    assert_eq!(response.status, 502);

    // Verification off: served.
    let unverified = TestProxy::start(&front("verify = false")).await;
    let response = weir_testkit::client::get(unverified.addr, "/")
        .await
        .unwrap();
    assert_eq!(response.status, 200);

    for proxy in [good, wrong_ca, wrong_name, unverified, tls_node] {
        proxy.stop().await;
    }
    origin.stop().await;
}

#[tokio::test]
async fn mtls_to_nodes_presents_the_client_certificate() {
    let pki = Pki::new();
    let node_cert = pki.server("node", &["node.internal"], KeyType::EcdsaP256);
    let weir_client = pki.client("weir", "weir-front");
    let origin = TestOrigin::start("a").await;
    let tls_node = TestProxy::start(&https_config(
        &origin,
        &format!(
            "{}\nclient_certificates = \"required\"\nclient_ca = \"{}\"\nclient_subject_header = \"X-Client-Subject\"",
            certificates(&[&node_cert]),
            toml_path(&pki.ca_path())
        ),
    ))
    .await;
    let pool_tls = |with_cert: bool| {
        let mut table = format!(
            "ca = \"{}\"\nserver_name = \"node.internal\"",
            toml_path(&pki.ca_path())
        );
        if with_cert {
            table.push_str(&format!(
                "\ncertificate = \"{}\"\nkey = \"{}\"",
                toml_path(&weir_client.0),
                toml_path(&weir_client.1)
            ));
        }
        weir_testkit::config(
            &[tls_node.addr],
            &format!("retries = 0\n[pools.web.tls]\n{table}"),
            "",
        )
    };
    let with_cert = TestProxy::start(&pool_tls(true)).await;
    let response = weir_testkit::client::get(with_cert.addr, "/echo")
        .await
        .unwrap();
    assert_eq!(response.status, 200);
    assert!(
        response.text().contains("CN=weir-front"),
        "{}",
        response.text()
    );

    let without = TestProxy::start(&pool_tls(false)).await;
    let response = weir_testkit::client::get(without.addr, "/").await.unwrap();
    assert_eq!(response.status, 502);
    for proxy in [with_cert, without, tls_node] {
        proxy.stop().await;
    }
    origin.stop().await;
}

/// Two TLS 1.3 nodes in front of one origin that require client certificates: `refusing`
/// trusts another CA than the one that issued weir's, `accepting` trusts it; `pool_tls`
/// is the `[pools.web.tls]` table that gives weir that certificate.
struct CertificateNodes {
    origin: TestOrigin,
    refusing: TestProxy,
    accepting: TestProxy,
    pool_tls: String,
    _cas: (Pki, Pki),
}

impl CertificateNodes {
    async fn start() -> CertificateNodes {
        let pki = Pki::new();
        let other = Pki::new();
        let node_cert = pki.server("node", &["node.internal"], KeyType::EcdsaP256);
        let weir_client = pki.client("weir", "weir-front");
        let origin = TestOrigin::start("a").await;
        let node = |ca: &Path| {
            https_config(
                &origin,
                &format!(
                    "{}\nclient_certificates = \"required\"\nclient_ca = \"{}\"",
                    certificates(&[&node_cert]),
                    toml_path(ca)
                ),
            )
        };
        let refusing = TestProxy::start(&node(&other.ca_path())).await;
        let accepting = TestProxy::start(&node(&pki.ca_path())).await;
        let pool_tls = format!(
            "[pools.web.tls]\nca = \"{}\"\nserver_name = \"node.internal\"\n\
             certificate = \"{}\"\nkey = \"{}\"",
            toml_path(&pki.ca_path()),
            toml_path(&weir_client.0),
            toml_path(&weir_client.1)
        );
        CertificateNodes {
            origin,
            refusing,
            accepting,
            pool_tls,
            _cas: (pki, other),
        }
    }

    /// The pool settings of the tests that pass over `refusing`: round robin, one retry,
    /// passive health off, and [`CertificateNodes::pool_tls`].
    fn passing_over(&self) -> String {
        format!(
            "algorithm = \"round_robin\"\nretries = 1\n\
             [pools.web.passive_health]\nconsecutive_failures = 0\n{}",
            self.pool_tls
        )
    }

    async fn stop(self) {
        self.refusing.stop().await;
        self.accepting.stop().await;
        self.origin.stop().await;
    }
}

/// A TLS 1.3 node that refuses weir's client certificate says so after weir's handshake
/// has ended (its alert follows weir's Finished, the request already written): the request
/// goes to another node, as for a handshake that failed outright, and the refusal counts
/// as a connect failure of the node, instead of a 502 for every request sent to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_refuses_the_client_certificate_after_the_handshake_is_passed_over() {
    let nodes = CertificateNodes::start().await;
    let front = TestProxy::start(&weir_testkit::config(
        &[nodes.refusing.addr, nodes.accepting.addr],
        &nodes.passing_over(),
        "",
    ))
    .await;
    for _ in 0..6 {
        let response = weir_testkit::client::get(front.addr, "/").await.unwrap();
        assert_eq!(response.status, 200);
    }
    assert!(metric(&front, "weir_node_connect_failures_total") >= 1.0);
    // Each refusal is a failed handshake too, though weir's side of it had ended.
    assert_eq!(
        metric(&front, "kind=\"failed\""),
        metric(&front, "weir_node_connect_failures_total")
    );
    // So is a health check's, with no request at all: the node is marked down.
    let checked = TestProxy::start(&weir_testkit::config(
        &[nodes.refusing.addr],
        &format!(
            "[pools.web.health]\ntype = \"http\"\ninterval = \"100ms\"\ntimeout = \"90ms\"\n\
             fall = 1\nrise = 1\n{}",
            nodes.pool_tls
        ),
        "",
    ))
    .await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(metric(&checked, "kind=\"failed\"") >= 3.0);
    assert!(!checked.live.current().pool("web").unwrap().nodes[0].is_active_up());
    checked.stop().await;
    front.stop().await;
    nodes.stop().await;
}

/// A relay in front of `node` that holds back what the node sends once weir has written
/// its second flight (its certificate, after the node's hello), until weir has written
/// `hold_until` bytes: a node that refuses weir's certificate only once the request's body
/// has gone by.
async fn late_refusal_relay(node: std::net::SocketAddr, hold_until: u64) -> std::net::SocketAddr {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((weir, _)) = listener.accept().await {
            let Ok(upstream) = tokio::net::TcpStream::connect(node).await else {
                continue;
            };
            let (mut weir_in, mut weir_out) = weir.into_split();
            let (mut node_in, mut node_out) = upstream.into_split();
            let written = Arc::new(AtomicU64::new(0));
            let (node_spoke, hold) = (
                Arc::new(AtomicBool::new(false)),
                Arc::new(AtomicBool::new(false)),
            );
            let (w, spoke, held) = (
                Arc::clone(&written),
                Arc::clone(&node_spoke),
                Arc::clone(&hold),
            );
            tokio::spawn(async move {
                let mut buffer = vec![0u8; 16 * 1024];
                let mut node_open = true;
                while let Ok(n @ 1..) = weir_in.read(&mut buffer).await {
                    if spoke.load(Ordering::SeqCst) {
                        held.store(true, Ordering::SeqCst);
                    }
                    w.fetch_add(n as u64, Ordering::SeqCst);
                    // Once the node has closed (after its alert), weir's bytes are still
                    // taken and counted, so that the alert is let through at last.
                    node_open = node_open && node_out.write_all(&buffer[..n]).await.is_ok();
                }
            });
            tokio::spawn(async move {
                let mut buffer = vec![0u8; 16 * 1024];
                while let Ok(n @ 1..) = node_in.read(&mut buffer).await {
                    node_spoke.store(true, Ordering::SeqCst);
                    while hold.load(Ordering::SeqCst) && written.load(Ordering::SeqCst) < hold_until
                    {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    if weir_out.write_all(&buffer[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

/// The same refusal when it comes only after weir streamed the request's body (past
/// `request_buffer`): the body's start is all weir holds, so the request is not sent to
/// another node (where that start would go as the whole body), and the client gets 502.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_refusal_after_a_streamed_body_is_not_sent_again() {
    let nodes = CertificateNodes::start().await;
    const BODY: usize = 20_000;
    let relay = late_refusal_relay(nodes.refusing.addr, BODY as u64).await;
    let front = TestProxy::start(&weir_testkit::config(
        &[relay, nodes.accepting.addr],
        &nodes.passing_over(),
        "[virtual_servers.web.limits]\nrequest_buffer = \"1KiB\"",
    ))
    .await;
    let mut statuses = Vec::new();
    for _ in 0..2 {
        let mut client = tokio::net::TcpStream::connect(front.addr).await.unwrap();
        let head = format!(
            "POST /echo HTTP/1.1\r\nHost: a\r\nConnection: close\r\nContent-Length: {BODY}\r\n\r\n"
        );
        client.write_all(head.as_bytes()).await.unwrap();
        client.write_all(&[b'x'; 1000]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        client.write_all(&[b'x'; BODY - 1000]).await.unwrap();
        let mut answer = Vec::new();
        let _ =
            tokio::time::timeout(Duration::from_secs(10), client.read_to_end(&mut answer)).await;
        let answer = String::from_utf8_lossy(&answer).into_owned();
        let status: u16 = answer.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
        if status == 200 {
            // Whoever answers got the whole body.
            assert!(
                answer.contains(&format!("\"body_length\":{BODY}")),
                "{answer}"
            );
        }
        statuses.push(status);
    }
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 502]);
    front.stop().await;
    nodes.stop().await;
}

/// The same late refusal to an HTTP/2 pool: the connection ends with the alert, and that
/// counts as a failed handshake and a connect failure of the node. OpenSSL (installed by
/// scripts/test) is the node: it checks weir's certificate only once weir has sent its
/// Finished, so weir meets the alert after its side of the handshake, as with real nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_pool_counts_a_late_client_certificate_refusal_as_a_failed_handshake() {
    let pki = Pki::new();
    let other = Pki::new();
    let (node_cert, node_key) = pki.server("node", &["node.internal"], KeyType::EcdsaP256);
    let weir_client = pki.client("weir", "weir-front");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut node = std::process::Command::new("openssl")
        .args(["s_server", "-accept", &format!("127.0.0.1:{port}")])
        .arg("-cert")
        .arg(&node_cert)
        .arg("-key")
        .arg(&node_key)
        .arg("-CAfile")
        .arg(other.ca_path())
        .args([
            "-Verify",
            "1",
            "-verify_return_error",
            "-alpn",
            "h2",
            "-tls1_3",
            "-quiet",
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("openssl (installed by scripts/test)");
    let address: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while tokio::net::TcpStream::connect(address).await.is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "openssl s_server never listened"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let front = TestProxy::start(&weir_testkit::config(
        &[address],
        &format!(
            "protocol = \"h2\"\nretries = 0\n\
             [pools.web.tls]\nca = \"{}\"\nserver_name = \"node.internal\"\n\
             certificate = \"{}\"\nkey = \"{}\"",
            toml_path(&pki.ca_path()),
            toml_path(&weir_client.0),
            toml_path(&weir_client.1)
        ),
        "",
    ))
    .await;
    for _ in 0..3 {
        let response = weir_testkit::client::get(front.addr, "/").await.unwrap();
        assert_eq!(response.status, 502);
    }
    // Counted when the connection's task sees it end, which may be just after the 502.
    let refusals = || metric(&front, "kind=\"failed\"");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while refusals() < 3.0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(refusals(), 3.0);
    assert_eq!(metric(&front, "weir_node_connect_failures_total"), 3.0);
    front.stop().await;
    let _ = node.kill();
    let _ = node.wait();
}

/// Sessions are remembered per node: two nodes with one `server_name` (the usual set-up)
/// each resume their own sessions. With one memory for the pool, each was offered the
/// other's ticket, which it cannot resume, and every connection was a full handshake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_sharing_a_server_name_each_resume_their_own_sessions() {
    let pki = Pki::new();
    let node_cert = pki.server("node", &["node.internal"], KeyType::EcdsaP256);
    let origin = TestOrigin::start("a").await;
    let first = TestProxy::start(&https_config(&origin, &certificates(&[&node_cert]))).await;
    let second = TestProxy::start(&https_config(&origin, &certificates(&[&node_cert]))).await;
    let front = TestProxy::start(&weir_testkit::config(
        &[first.addr, second.addr],
        &format!(
            "algorithm = \"round_robin\"\nretries = 0\n\
             [pools.web.connections]\nmax_requests_per_connection = 1\n\
             [pools.web.tls]\nca = \"{}\"\nserver_name = \"node.internal\"",
            toml_path(&pki.ca_path())
        ),
        "",
    ))
    .await;
    for _ in 0..8 {
        let response = weir_testkit::client::get(front.addr, "/").await.unwrap();
        assert_eq!(response.status, 200);
    }
    // One full handshake per node, then resumptions.
    assert_eq!(metric(&front, "kind=\"full\"}"), 2.0);
    assert_eq!(metric(&front, "kind=\"resumed\"}"), 6.0);
    for proxy in [front, first, second] {
        proxy.stop().await;
    }
    origin.stop().await;
}

/// A reload that re-reads a pool's CA file changed in place (same path, new contents)
/// retires the node connections made under the old trust: the next request makes a new
/// connection, verified against the new CA, instead of reusing one the new CA would refuse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ca_replaced_in_place_retires_the_node_connections_made_under_the_old_one() {
    let pki = Pki::new();
    let other = Pki::new();
    let node_cert = pki.server("node", &["node.internal"], KeyType::EcdsaP256);
    let origin = TestOrigin::start("a").await;
    let node = TestProxy::start(&https_config(&origin, &certificates(&[&node_cert]))).await;
    let ca = pki.path("pool-ca.pem");
    std::fs::copy(pki.ca_path(), &ca).unwrap();
    let text = weir_testkit::config(
        &[node.addr],
        &format!(
            "retries = 0\n[pools.web.tls]\nca = \"{}\"\nserver_name = \"node.internal\"",
            toml_path(&ca)
        ),
        "",
    );
    let front = TestProxy::start(&text).await;
    let response = weir_testkit::client::get(front.addr, "/").await.unwrap();
    assert_eq!(response.status, 200);

    std::fs::copy(other.ca_path(), &ca).unwrap();
    let candidate = weir_config::parse_str(&text, "test.toml").unwrap();
    front.live.apply(candidate).unwrap();
    let response = weir_testkit::client::get(front.addr, "/").await.unwrap();
    assert_eq!(response.status, 502, "the node is no longer trusted");
    for proxy in [front, node] {
        proxy.stop().await;
    }
    origin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_records_name_the_tls_version_suite_server_name_and_client_subject() {
    let pki = Pki::new();
    let cert = pki.server("site", &["site.test"], KeyType::EcdsaP256);
    let alice = pki.client("alice", "alice");
    let origin = TestOrigin::start("a").await;
    let tls_table = format!(
        "{}\nalpn = [\"h2\", \"http/1.1\"]\nclient_certificates = \"optional\"\nclient_ca = \"{}\"",
        certificates(&[&cert]),
        toml_path(&pki.ca_path())
    );
    let (config, log) =
        weir_testkit::with_access_log_file(&https_config(&origin, &tls_table), "tls-log", "json");
    let proxy = TestProxy::start(&config).await;

    // HTTP/1.1, TLS 1.2, a client certificate.
    let alice_tls12 = tls::client_config(&ClientOptions {
        client_cert: Some(alice.clone()),
        tls12_only: true,
        ..ClientOptions::default()
    });
    let mut stream = tls::connect(proxy.addr, "site.test", &alice_tls12)
        .await
        .unwrap();
    assert_eq!(tls::get(&mut stream, "/?one").await.unwrap().status, 200);
    drop(stream);
    // HTTP/2 (ALPN h2), TLS 1.3, no client certificate.
    let mut h2_config = (*tls::client_config(&ClientOptions::default())).clone();
    h2_config.alpn_protocols = vec![b"h2".to_vec()];
    let stream = tls::connect(proxy.addr, "site.test", &std::sync::Arc::new(h2_config))
        .await
        .unwrap();
    let (mut h2, connection) = h2::client::handshake(stream).await.unwrap();
    tokio::spawn(connection);
    let request = http::Request::get("https://site.test/?two")
        .body(())
        .unwrap();
    let (response, _) = h2.send_request(request, true).unwrap();
    assert_eq!(response.await.unwrap().status(), 200);

    let text = proxy.access_log(&log, 2).await;
    let records: Vec<&str> = text.lines().collect();
    assert_eq!(records.len(), 2, "{text}");
    let one = records.iter().find(|r| r.contains("\"/?one\"")).unwrap();
    assert!(
        one.ends_with(
            "\"tls_version\":\"TLSv1.2\",\
             \"tls_cipher\":\"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256\",\
             \"server_name\":\"site.test\",\"client_subject\":\"CN=alice\"}"
        ),
        "{one}"
    );
    let two = records.iter().find(|r| r.contains("\"/?two\"")).unwrap();
    assert!(two.contains("\"version\":\"HTTP/2.0\""), "{two}");
    assert!(
        two.ends_with(
            "\"tls_version\":\"TLSv1.3\",\"tls_cipher\":\"TLS_AES_128_GCM_SHA256\",\
             \"server_name\":\"site.test\"}"
        ),
        "{two}"
    );
    drop(h2);
    proxy.stop().await;
    origin.stop().await;
    let _ = std::fs::remove_file(&log);
}

/// Accepts any server certificate and keeps the OCSP response stapled to it.
#[derive(Debug)]
struct KeepsStaple {
    staples: std::sync::Mutex<Vec<Vec<u8>>>,
    provider: std::sync::Arc<weir_tls::rustls::crypto::CryptoProvider>,
}

impl weir_tls::rustls::client::danger::ServerCertVerifier for KeepsStaple {
    fn verify_server_cert(
        &self,
        _end_entity: &weir_tls::rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[weir_tls::rustls::pki_types::CertificateDer<'_>],
        _server_name: &weir_tls::rustls::pki_types::ServerName<'_>,
        ocsp: &[u8],
        _now: weir_tls::rustls::pki_types::UnixTime,
    ) -> Result<weir_tls::rustls::client::danger::ServerCertVerified, weir_tls::rustls::Error> {
        self.staples.lock().unwrap().push(ocsp.to_vec());
        Ok(weir_tls::rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &weir_tls::rustls::pki_types::CertificateDer<'_>,
        dss: &weir_tls::rustls::DigitallySignedStruct,
    ) -> Result<weir_tls::rustls::client::danger::HandshakeSignatureValid, weir_tls::rustls::Error>
    {
        weir_tls::rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &weir_tls::rustls::pki_types::CertificateDer<'_>,
        dss: &weir_tls::rustls::DigitallySignedStruct,
    ) -> Result<weir_tls::rustls::client::danger::HandshakeSignatureValid, weir_tls::rustls::Error>
    {
        weir_tls::rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<weir_tls::rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[tokio::test]
async fn an_ocsp_response_is_stapled_and_a_wrong_one_is_refused_at_reload() {
    use weir_tls::rustls;
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../weir-tls/testdata/ocsp");
    let dir = Pki::new();
    for name in ["good.test.pem", "good.test.key", "good.ocsp"] {
        std::fs::copy(fixtures.join(name), dir.path(name)).unwrap();
    }
    let staple_path = dir.path("good.ocsp");
    let good = std::fs::read(&staple_path).unwrap();
    let origin = TestOrigin::start("a").await;
    let tls_table = format!(
        "certificates = [{{ cert = \"{}\", key = \"{}\", ocsp = \"{}\" }}]",
        toml_path(&dir.path("good.test.pem")),
        toml_path(&dir.path("good.test.key")),
        toml_path(&staple_path),
    );
    let proxy = TestProxy::start(&https_config(&origin, &tls_table)).await;
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let verifier = std::sync::Arc::new(KeepsStaple {
        staples: std::sync::Mutex::new(Vec::new()),
        provider: std::sync::Arc::clone(&provider),
    });
    let handshake = |version: &'static rustls::SupportedProtocolVersion| {
        let mut config =
            rustls::ClientConfig::builder_with_provider(std::sync::Arc::clone(&provider))
                .with_protocol_versions(&[version])
                .unwrap()
                .dangerous()
                .with_custom_certificate_verifier(verifier.clone())
                .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = std::sync::Arc::new(config);
        let addr = proxy.addr;
        async move {
            let mut stream = tls::connect(addr, "good.test", &config).await.unwrap();
            assert_eq!(tls::get(&mut stream, "/").await.unwrap().status, 200);
        }
    };
    handshake(&rustls::version::TLS13).await;
    handshake(&rustls::version::TLS12).await;
    assert_eq!(
        *verifier.staples.lock().unwrap(),
        vec![good.clone(), good.clone()]
    );
    // Its nextUpdate is exported (the fixture's is a century away).
    let next_update = metric(&proxy, "weir_tls_ocsp_next_update_timestamp_seconds{");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(next_update > now + 50.0 * 365.0 * 86_400.0, "{next_update}");

    // A response about another certificate, then a revoked one's: each reload is refused,
    // naming the key, and the good response keeps being stapled.
    for wrong in ["revoked.ocsp", "trylater.ocsp"] {
        std::fs::copy(fixtures.join(wrong), &staple_path).unwrap();
        let error = proxy.live.reload_certificates().unwrap_err().to_string();
        assert!(
            error.contains("virtual_servers.web.tls.certificates[0].ocsp"),
            "{error}"
        );
        handshake(&rustls::version::TLS13).await;
        assert_eq!(verifier.staples.lock().unwrap().last(), Some(&good));
    }
    proxy.stop().await;
    origin.stop().await;
}

/// The expiry gauge shows the certificate clients get: during a rotation the one listed
/// second, with the same names, is never served and has no series (it set the gauge, last
/// written, to its own later date); one that shares only its first name gets a series of
/// its own.
#[tokio::test]
async fn the_expiry_gauge_follows_the_certificate_served() {
    let pki = Pki::new();
    let write = |stem: &str, names: &[&str], days: u32| {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let generated = weir_tls::certs::self_signed(&names, KeyType::EcdsaP256, days).unwrap();
        let (cert, key) = (
            pki.path(&format!("{stem}.pem")),
            pki.path(&format!("{stem}.key")),
        );
        std::fs::write(&cert, &generated.cert_pem).unwrap();
        std::fs::write(&key, &generated.key_pem).unwrap();
        (cert, key)
    };
    let served = write("served", &["site.test", "www.site.test"], 2);
    let next = write("next", &["www.site.test", "site.test"], 60);
    let more = write("more", &["site.test", "api.site.test"], 90);
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&https_config(
        &origin,
        &certificates(&[&served, &next, &more]),
    ))
    .await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let mut series: Vec<(String, f64)> = proxy
        .metrics
        .encode()
        .lines()
        .filter(|line| line.starts_with("weir_tls_certificate_expiry_timestamp_seconds{"))
        .filter_map(|line| {
            let name = line.split("certificate=\"").nth(1)?.split('"').next()?;
            let value = line.rsplit(' ').next()?.parse::<f64>().ok()?;
            Some((name.to_owned(), ((value - now) / 86_400.0).round()))
        })
        .collect();
    series.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        series,
        [
            ("site.test".to_owned(), 2.0),
            ("site.test #3".to_owned(), 90.0)
        ],
        "{series:?}"
    );
    proxy.stop().await;
    origin.stop().await;
}

/// A client that can verify none of the server's key types is counted as `incompatible`,
/// over TLS 1.3 and over TLS 1.2, where rustls reports it as a general error ("incompatible
/// signing key"). OpenSSL (installed by scripts/test) makes an Ed25519 certificate and is
/// the client, offering ECDSA suites and signature algorithms but not Ed25519.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_cannot_verify_the_key_type_is_incompatible() {
    use std::process::Command;
    let pki = Pki::new();
    let (cert, key) = (pki.path("ed.pem"), pki.path("ed.key"));
    let made = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "ed25519", "-nodes", "-days", "30",
        ])
        .args([
            "-subj",
            "/CN=ed.test",
            "-addext",
            "subjectAltName=DNS:ed.test",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl (installed by scripts/test)");
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&https_config(&origin, &certificates(&[&(cert, key)]))).await;
    let address = proxy.addr.to_string();
    for version in ["-tls1_2", "-tls1_3"] {
        let address = address.clone();
        let out = tokio::task::spawn_blocking(move || {
            Command::new("openssl")
                .args([
                    "s_client",
                    "-connect",
                    &address,
                    "-servername",
                    "ed.test",
                    version,
                ])
                .args(["-sigalgs", "ECDSA+SHA256:ECDSA+SHA384"])
                .stdin(std::process::Stdio::null())
                .output()
                .expect("openssl s_client")
        })
        .await
        .unwrap();
        assert!(
            !out.status.success(),
            "{version}: the handshake cannot succeed"
        );
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while metric(&proxy, "weir_tls_handshake_failures_total{") < 2.0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{}",
            proxy.metrics.encode()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        metric(&proxy, "reason=\"incompatible\""),
        2.0,
        "{}",
        proxy.metrics.encode()
    );
    proxy.stop().await;
    origin.stop().await;
}

/// A virtual server a reload keeps by name but turns from `https` to `http` serves no
/// certificate: its TLS series (the certificate's expiry, which the documented alert
/// watches, and its handshake counts) go, and a later `https` one exports only its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_virtual_server_turned_plain_drops_its_tls_series() {
    let pki = Pki::new();
    let first = pki.server("first", &["first.test"], KeyType::EcdsaP256);
    let second = pki.server("second", &["second.test"], KeyType::EcdsaP256);
    let origin = TestOrigin::start("a").await;
    let https = |cert| https_config(&origin, &certificates(&[cert]));
    let proxy = TestProxy::start(&https(&first)).await;
    let series = |proxy: &TestProxy| -> Vec<String> {
        proxy
            .metrics
            .encode()
            .lines()
            .filter(|line| line.starts_with("weir_tls_") && line.contains("virtual_server=\"web\""))
            .map(str::to_owned)
            .collect()
    };
    assert!(
        series(&proxy)
            .iter()
            .any(|line| line.contains("first.test"))
    );
    let apply = |text: &str| {
        proxy
            .live
            .apply(weir_config::parse_str(text, "test.toml").unwrap())
            .unwrap();
    };
    apply(&weir_testkit::config(&[origin.addr], "", ""));
    assert_eq!(series(&proxy), Vec::<String>::new());
    apply(&https(&second));
    let now = series(&proxy);
    assert!(
        now.iter().any(|line| line.contains("second.test")),
        "{now:?}"
    );
    assert!(
        !now.iter().any(|line| line.contains("first.test")),
        "{now:?}"
    );
    proxy.stop().await;
    origin.stop().await;
}

/// Certificates are exported once they are served: a dry run (`Live::check`, the admin
/// API's validate) and a refused reload build the TLS of what they check, and export
/// no expiry series for it (which the documented alert would watch for ever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_checked_but_not_served_export_no_series() {
    let pki = Pki::new();
    let cert = pki.server("site", &["site.test"], KeyType::EcdsaP256);
    let origin = TestOrigin::start("a").await;
    let plain = weir_testkit::config(&[origin.addr], "", "");
    let proxy = TestProxy::start(&plain).await;
    let expiry = |proxy: &TestProxy| {
        proxy
            .metrics
            .encode()
            .lines()
            .filter(|line| line.starts_with("weir_tls_certificate_expiry"))
            .count()
    };
    let https = https_config(&origin, &certificates(&[&cert]));
    // Refused after its TLS was built: it would listen where something else does.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let refused = https.replace("127.0.0.1:0", &taken.local_addr().unwrap().to_string());
    let candidate = weir_config::parse_str(&refused, "test.toml").unwrap();
    assert!(proxy.live.apply(candidate).is_err());
    assert_eq!(expiry(&proxy), 0, "a refused reload exported a certificate");
    let candidate = weir_config::parse_str(&https, "test.toml").unwrap();
    proxy.live.check(&candidate).expect("a valid candidate");
    assert_eq!(expiry(&proxy), 0, "a dry run exported a certificate");
    // Applied, it is served and exported.
    proxy
        .live
        .apply(weir_config::parse_str(&https, "test.toml").unwrap())
        .unwrap();
    assert_eq!(expiry(&proxy), 1);
    proxy.stop().await;
    origin.stop().await;
}

/// With TLS 1.2 alone, the suites must sign with each certificate's kind of key (an
/// ECDSA certificate with only `ECDHE_RSA` suites fails every handshake): refused when the
/// certificates are read, naming the certificate. With TLS 1.3 allowed it is no problem.
#[test]
fn tls12_suites_that_cannot_sign_with_the_certificate_are_refused() {
    let pki = Pki::new();
    let ecdsa = pki.server("ecdsa", &["site.test"], KeyType::EcdsaP256);
    let rsa = pki.server("rsa", &["site.test"], KeyType::Rsa2048);
    let build = |cert: &(std::path::PathBuf, std::path::PathBuf), tls: &str| {
        let text = format!(
            "[virtual_servers.s]\nlisten = \"127.0.0.1:1\"\nprotocol = \"https\"\npool = \"p\"\n\
             [virtual_servers.s.tls]\n{}\n{tls}\n\
             [pools.p]\nnodes = [{{ address = \"127.0.0.1:2\" }}]\n",
            certificates(&[cert])
        );
        let config = weir_config::parse_str(&text, "t.toml").expect("valid config");
        let tls = config.virtual_servers[0].tls.clone().expect("tls");
        weir_tls::Acceptor::new("s", &tls, "t.toml").map(|_| ())
    };
    let rsa_only =
        "versions = \"1.2\"\ncipher_suites = [\"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256\"]";
    let error = build(&ecdsa, rsa_only).unwrap_err().to_string();
    assert!(error.contains("no suite for this certificate"), "{error}");
    assert!(
        error.contains("tls.certificates[0].cert"),
        "names the certificate: {error}"
    );
    build(&rsa, rsa_only).unwrap();
    build(
        &ecdsa,
        "versions = \"1.2\"\ncipher_suites = [\"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256\"]",
    )
    .unwrap();
    build(
        &ecdsa,
        "versions = [\"1.2\", \"1.3\"]\n\
         cipher_suites = [\"TLS13_AES_128_GCM_SHA256\", \"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256\"]",
    )
    .unwrap();
}
