//! Limits through the pipeline (issue 14): request rate (429, counted exactly, with curl
//! as the client), requests in progress (503), connections per client address (503 and
//! close), each with `Retry-After`, and each recovering.

use std::time::Duration;

use weir_testkit::client::{self, Connection};
use weir_testkit::{TestOrigin, TestProxy, config};

fn limit_refusals(proxy: &TestProxy, limit: &str) -> u64 {
    let text = proxy.metrics.encode();
    let prefix = format!("weir_limit_refusals_total{{virtual_server=\"web\",limit=\"{limit}\"}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no {prefix} in\n{text}"))
}

/// `curl` against the proxy: the status, and `Retry-After` when there is one.
async fn curl(url: String, headers: &[&str]) -> (u16, Option<String>) {
    let mut command = std::process::Command::new("curl");
    command.args(["-s", "-o", "/dev/null", "-D", "-", "--max-time", "5"]);
    for header in headers {
        command.args(["-H", header]);
    }
    command.arg(url);
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let retry_after = text.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("retry-after")
            .then(|| value.trim().to_owned())
    });
    (status, retry_after)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_admits_its_burst_then_answers_429_per_key() {
    let origin = TestOrigin::start("a").await;
    let vs = r#"
[[virtual_servers.web.rules]]
match = { path_prefix = "/echo/" }
rate_limit = "per-user"

[virtual_servers.web.rate_limits.per-user]
key = "header:X-User"
rate = 5
per = "1m"
"#;
    let proxy = TestProxy::start(&config(&[origin.addr], "", vs)).await;
    let url = format!("http://{}/echo/x", proxy.addr);
    let mut statuses = Vec::new();
    for _ in 0..8 {
        statuses.push(curl(url.clone(), &["X-User: alice"]).await);
    }
    let admitted = statuses.iter().filter(|(status, _)| *status == 200).count();
    assert_eq!(admitted, 5, "{statuses:?}");
    for (status, retry_after) in &statuses[5..] {
        assert_eq!(*status, 429);
        // one more request fits 12 s after the last admitted one
        let seconds: u64 = retry_after.as_deref().unwrap().parse().unwrap();
        assert!((1..=12).contains(&seconds), "{seconds}");
    }
    // another key has its own bucket; a path outside the rule is not limited
    assert_eq!(curl(url.clone(), &["X-User: bob"]).await.0, 200);
    assert_eq!(
        curl(format!("http://{}/", proxy.addr), &["X-User: alice"])
            .await
            .0,
        200
    );
    assert_eq!(limit_refusals(&proxy, "per-user"), 3);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_recovers_after_its_period() {
    let origin = TestOrigin::start("a").await;
    let vs = r#"
[[virtual_servers.web.rules]]
rate_limit = "fast"

[virtual_servers.web.rate_limits.fast]
rate = 2
per = "200ms"
burst = 2
"#;
    let proxy = TestProxy::start(&config(&[origin.addr], "", vs)).await;
    let mut c = Connection::open(proxy.addr).await.unwrap();
    let mut statuses = Vec::new();
    for _ in 0..3 {
        c.send(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n").await.unwrap();
        statuses.push(c.response().await.unwrap().status);
    }
    assert_eq!(statuses, vec![200, 200, 429]);
    // the refusal kept the connection; a bucket refills at 2 per 200 ms
    tokio::time::sleep(Duration::from_millis(250)).await;
    c.send(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n").await.unwrap();
    assert_eq!(c.response().await.unwrap().status, 200);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrency_limit_answers_503_while_full_and_frees_its_slot() {
    let origin = TestOrigin::start("a").await;
    let vs = r#"
[[virtual_servers.web.rules]]
match = { path_prefix = "/delay/" }
concurrency_limit = "slow"

[virtual_servers.web.concurrency_limits.slow]
max = 1
retry_after = "3s"
"#;
    let proxy = TestProxy::start(&config(&[origin.addr], "", vs)).await;
    let addr = proxy.addr;
    let slow = tokio::spawn(async move { client::get(addr, "/delay/600").await.unwrap() });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let refused = client::get(addr, "/delay/1").await.unwrap();
    assert_eq!(refused.status, 503);
    assert_eq!(refused.header("retry-after"), Some("3"));
    // outside the rule: not limited
    assert_eq!(client::get(addr, "/").await.unwrap().status, 200);
    assert_eq!(slow.await.unwrap().status, 200);
    assert_eq!(client::get(addr, "/delay/1").await.unwrap().status, 200);
    assert_eq!(limit_refusals(&proxy, "slow"), 1);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_per_client_past_the_limit_get_503_and_close() {
    let origin = TestOrigin::start("a").await;
    let vs = "[virtual_servers.web.client_connections]\nmax = 2\nretry_after = \"2s\"\n";
    let proxy = TestProxy::start(&config(&[origin.addr], "", vs)).await;
    let request = b"GET / HTTP/1.1\r\nHost: h\r\n\r\n";
    let mut kept = Vec::new();
    for _ in 0..2 {
        let mut c = Connection::open(proxy.addr).await.unwrap();
        c.send(request).await.unwrap();
        assert_eq!(c.response().await.unwrap().status, 200);
        kept.push(c);
    }
    let mut third = Connection::open(proxy.addr).await.unwrap();
    third.send(request).await.unwrap();
    let refused = third.response().await.unwrap();
    assert_eq!(refused.status, 503);
    assert_eq!(refused.header("retry-after"), Some("2"));
    assert!(third.is_closed(Duration::from_secs(3)).await);
    assert_eq!(limit_refusals(&proxy, "client_connections"), 1);
    // one kept connection closes: its place is free again
    drop(kept.pop());
    let mut admitted = None;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let mut c = Connection::open(proxy.addr).await.unwrap();
        c.send(request).await.unwrap();
        if c.response().await.unwrap().status == 200 {
            admitted = Some(c);
            break;
        }
    }
    assert!(
        admitted.is_some(),
        "a place freed by a close is given again"
    );
    proxy.stop().await;
}

/// A connection refused for its client's limit that sends nothing (or trickles its head)
/// is closed within a second, not held for the virtual server's `idle` or `header_read`:
/// it holds a place of `max_connections`, and one client must not fill them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_connection_past_the_client_limit_is_closed_within_a_second() {
    let origin = TestOrigin::start("a").await;
    let vs = "[virtual_servers.web.limits]\nmax_connections = 4\n\
              [virtual_servers.web.client_connections]\nmax = 1\n\
              [virtual_servers.web.timeouts]\nidle = \"60s\"\nheader_read = \"30s\"\n";
    let proxy = TestProxy::start(&config(&[origin.addr], "", vs)).await;
    let mut kept = Connection::open(proxy.addr).await.unwrap();
    kept.send(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(kept.response().await.unwrap().status, 200);
    let started = std::time::Instant::now();
    let mut silent = Connection::open(proxy.addr).await.unwrap();
    let mut trickling = Connection::open(proxy.addr).await.unwrap();
    trickling.send(b"GET / HT").await.unwrap();
    assert!(silent.is_closed(Duration::from_secs(3)).await);
    assert!(trickling.is_closed(Duration::from_secs(3)).await);
    assert!(
        started.elapsed() < Duration::from_millis(2_500),
        "held for {:?}",
        started.elapsed()
    );
    assert_eq!(limit_refusals(&proxy, "client_connections"), 2);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_keeps_the_buckets_of_an_unchanged_limit() {
    let origin = TestOrigin::start("a").await;
    let vs = |path: &str| {
        format!(
            "[[virtual_servers.web.rules]]\nmatch = {{ path_prefix = \"{path}\" }}\n\
             rate_limit = \"slow\"\n\
             [virtual_servers.web.rate_limits.slow]\nrate = 3\nper = \"1m\"\n"
        )
    };
    let proxy = TestProxy::start(&config(&[origin.addr], "", &vs("/"))).await;
    for _ in 0..2 {
        assert_eq!(client::get(proxy.addr, "/").await.unwrap().status, 200);
    }
    // the rules change, the limit does not: its bucket (one request left) carries over
    let changed = weir_config::parse_str(&config(&[origin.addr], "", &vs("/e")), "t.toml").unwrap();
    proxy.live.apply(changed).expect("reload applies");
    assert_eq!(client::get(proxy.addr, "/echo").await.unwrap().status, 200);
    assert_eq!(client::get(proxy.addr, "/echo").await.unwrap().status, 429);
    // outside the new rule's prefix: not limited any more
    assert_eq!(client::get(proxy.addr, "/").await.unwrap().status, 200);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_proxy_header_connections_count_per_original_client() {
    let origin = TestOrigin::start("a").await;
    let vs = "[virtual_servers.web.proxy_protocol]\ntrusted = [\"127.0.0.0/8\"]\n\
              [virtual_servers.web.client_connections]\nmax = 1\n";
    let proxy = TestProxy::start(&config(&[origin.addr], "", vs)).await;
    let open_as = |source: &'static str| {
        let addr = proxy.addr;
        async move {
            let mut c = Connection::open(addr).await.unwrap();
            let mut bytes = Vec::new();
            weir_proxy_protocol::write_v1(
                source.parse().unwrap(),
                "198.51.100.1:80".parse().unwrap(),
                &mut bytes,
            );
            bytes.extend_from_slice(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n");
            c.send(&bytes).await.unwrap();
            let status = c.response().await.unwrap().status;
            (c, status)
        }
    };
    let (_first, status) = open_as("192.0.2.1:5000").await;
    assert_eq!(status, 200);
    // another client behind the same proxy has its own count
    let (_other, status) = open_as("192.0.2.2:5000").await;
    assert_eq!(status, 200);
    // the first client's second connection is past its limit
    let (_second, status) = open_as("192.0.2.1:5001").await;
    assert_eq!(status, 503);
    assert_eq!(limit_refusals(&proxy, "client_connections"), 1);
    proxy.stop().await;
}

/// A virtual server's byte counters, (received, sent).
fn bytes_counted(proxy: &TestProxy) -> (u64, u64) {
    let text = proxy.metrics.encode();
    let value = |name: &str| {
        let prefix = format!("{name}{{virtual_server=\"web\"}} ");
        text.lines()
            .find_map(|line| line.strip_prefix(&prefix)?.parse().ok())
            .unwrap_or_else(|| panic!("no {prefix} in\n{text}"))
    };
    (
        value("weir_client_bytes_received_total"),
        value("weir_client_bytes_sent_total"),
    )
}

/// One request on a connection of its own: the bytes the client read back.
async fn exchange(proxy: &TestProxy, request: &[u8]) -> Vec<u8> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer))
        .await
        .expect("answered and closed in time")
        .unwrap();
    answer
}

/// weir's own answers (a rule's `respond`, a limit's refusal) count in the byte counters as
/// proxied answers do: what was read of the request, and every byte of the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weirs_own_answers_are_counted_in_bytes() {
    let origin = TestOrigin::start("a").await;
    let vs = r#"
[[virtual_servers.web.rules]]
match = { path = "/ping" }
respond = { status = 200, body = "pong\n" }

[[virtual_servers.web.rules]]
match = { path_prefix = "/echo/" }
rate_limit = "once"

[virtual_servers.web.rate_limits.once]
key = "route"
rate = 1
per = "1m"
"#;
    let proxy = TestProxy::start(&config(&[origin.addr], "", vs)).await;
    let ping = b"GET /ping HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    let limited = b"GET /echo/x HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    let answered = exchange(&proxy, ping).await;
    assert!(answered.starts_with(b"HTTP/1.1 200"), "{answered:?}");
    assert!(answered.ends_with(b"pong\n"));
    assert!(exchange(&proxy, limited).await.starts_with(b"HTTP/1.1 200"));
    let before = bytes_counted(&proxy);
    let refused = exchange(&proxy, limited).await;
    assert!(refused.starts_with(b"HTTP/1.1 429"), "{refused:?}");
    let answered_again = exchange(&proxy, ping).await;
    let after = bytes_counted(&proxy);
    assert_eq!(
        (after.0 - before.0, after.1 - before.1),
        (
            (limited.len() + ping.len()) as u64,
            (refused.len() + answered_again.len()) as u64
        )
    );
    proxy.stop().await;
    origin.stop().await;
}

/// The answer to a connection past its client's limit counts in the byte counters too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connections_answer_is_counted_in_bytes() {
    let origin = TestOrigin::start("a").await;
    let vs = "[virtual_servers.web.client_connections]\nmax = 1\n";
    let proxy = TestProxy::start(&config(&[origin.addr], "", vs)).await;
    let mut held = Connection::open(proxy.addr).await.unwrap();
    held.send(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(held.response().await.unwrap().status, 200);
    let before = bytes_counted(&proxy);
    let request = b"GET /refused HTTP/1.1\r\nHost: h\r\n\r\n";
    let refused = exchange(&proxy, request).await;
    assert!(refused.starts_with(b"HTTP/1.1 503"), "{refused:?}");
    // The record (and the counters with it) is written once the answer has gone.
    let mut after = bytes_counted(&proxy);
    for _ in 0..50 {
        if after != before {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        after = bytes_counted(&proxy);
    }
    assert_eq!(
        (after.0 - before.0, after.1 - before.1),
        (request.len() as u64, refused.len() as u64)
    );
    drop(held);
    proxy.stop().await;
    origin.stop().await;
}

/// An HTTP/2 client past its connection limit (h2c with prior knowledge here) gets the
/// refusal on its first stream, 503 with `Retry-After`, then GOAWAY and the close, as an
/// HTTP/1.1 client gets it in its first answer; before, it got a bare close, no answer and
/// no access record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_connection_past_the_client_limit_gets_503_on_its_stream() {
    let origin = TestOrigin::start("a").await;
    let vs = "[virtual_servers.web.client_connections]\nmax = 1\nretry_after = \"4s\"\n\
              [virtual_servers.web.http2]\ncleartext = true\n";
    let proxy = TestProxy::start(&config(&[origin.addr], "", vs)).await;
    let mut kept = Connection::open(proxy.addr).await.unwrap();
    kept.send(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(kept.response().await.unwrap().status, 200);
    let started = std::time::Instant::now();
    let tcp = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    let (sender, connection) = h2::client::handshake(tcp)
        .await
        .expect("the server's preface");
    let driver = tokio::spawn(connection);
    let mut sender = sender.ready().await.expect("ready");
    let request = http::Request::get("http://h/").body(()).unwrap();
    let (response, _) = sender.send_request(request, true).expect("sent");
    let response = response.await.expect("an answer on the stream");
    assert_eq!(response.status(), 503);
    assert_eq!(
        response.headers().get("retry-after").map(|v| v.as_bytes()),
        Some(&b"4"[..])
    );
    // GOAWAY follows: the connection ends by itself, soon.
    drop(sender);
    let ended = tokio::time::timeout(Duration::from_secs(3), driver).await;
    assert!(ended.is_ok(), "the refused connection was still open");
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(limit_refusals(&proxy, "client_connections"), 1);
    assert_eq!(
        origin.stats.snapshot().requests,
        1,
        "the refused stream reached no node"
    );
    proxy.stop().await;
}

/// A request a rate limit refuses was decided by the limit, not by the rule that would have
/// answered it: the later `deny` rule counts only the request it denied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_refusal_is_not_counted_for_the_rule_it_stopped() {
    let origin = TestOrigin::start("a").await;
    let vs = r#"
[[virtual_servers.web.rules]]
name = "limit-all"
rate_limit = "one"

[[virtual_servers.web.rules]]
name = "secret"
match = { path_prefix = "/secret" }
deny = true

[virtual_servers.web.rate_limits.one]
rate = 1
per = "1m"
burst = 1
"#;
    let proxy = TestProxy::start(&config(&[origin.addr], "", vs)).await;
    let url = format!("http://{}/secret", proxy.addr);
    assert_eq!(curl(url.clone(), &[]).await.0, 403);
    assert_eq!(curl(url, &[]).await.0, 429);
    let text = proxy.metrics.encode();
    let line = "weir_rule_matches_total{virtual_server=\"web\",rule=\"secret\"} 1\n";
    assert!(text.contains(line), "{line} in\n{text}");
    assert_eq!(limit_refusals(&proxy, "one"), 1);
    proxy.stop().await;
    origin.stop().await;
}
