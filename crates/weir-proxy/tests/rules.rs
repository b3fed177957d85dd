//! Traffic rules through the pipeline (issue 14): every action kind, rule order, the
//! request id, the client address behind a trusted proxy, and a reload that changes the
//! rules under a kept-alive client. Limits are in `limits.rs`, persistence and hashing in
//! `persistence.rs`.

use std::net::SocketAddr;

use weir_origin::{EchoReport, parse_echo_json};
use weir_testkit::client::{Connection, Response};
use weir_testkit::{TestOrigin, TestProxy};

/// Pools `web` (node `a`) and `b` (node `b`); virtual server `web` with `vs_extra`.
fn two_pools(a: SocketAddr, b: SocketAddr, vs_extra: &str) -> String {
    format!(
        "[log]\naccess_log = false\nlevel = \"warn\"\n\n\
         [pools.web]\nnodes = [{{ address = \"{a}\" }}]\n\n\
         [pools.b]\nnodes = [{{ address = \"{b}\" }}]\n\n\
         [virtual_servers.web]\nlisten = [\"127.0.0.1:0\"]\npool = \"web\"\n{vs_extra}\n"
    )
}

/// The rules every action test runs against.
const RULES: &str = r#"
[[virtual_servers.web.rules]]
name = "tag-everything"
response_headers = { add = { X-Tag = "all" } }

[[virtual_servers.web.rules]]
name = "old-blog"
match = { host = "old.example.com", path_regex = "^/post/(?P<id>[0-9]+)$" }
redirect = { status = 301, location = "https://blog.example.com/p/${id}?from=${host}" }

[[virtual_servers.web.rules]]
name = "ping"
match = { path = "/ping", method = "GET" }
respond = { status = 200, headers = { Content-Type = "application/json" }, body = "{\"pong\":\"${request_id}\"}" }

[[virtual_servers.web.rules]]
name = "alive"
match = { path = "/alive" }
respond = { status = 200 }

[[virtual_servers.web.rules]]
name = "private"
match = { path_prefix = "/private/", not = { header = { name = "X-Key", equals = "letmein" } } }
deny = true

[[virtual_servers.web.rules]]
name = "api"
match = { path_prefix = "/api/" }
rewrite_path = { replace_prefix = "/api/", with = "/echo/v2/" }
request_headers = { set = { X-Client = "${client_address}" }, remove = ["X-Debug"] }
response_headers = { set = { X-Served-By = "weir" } }
pool = "b"

[[virtual_servers.web.rules]]
name = "never-reached"
match = { path_prefix = "/api/" }
deny = 410

[[virtual_servers.web.rules]]
name = "second-rewrite"
match = { path_prefix = "/echo/" }
rewrite_path = { regex = "^/echo/(.*)$", with = "/echo/x/${1}" }
"#;

async fn send(connection: &mut Connection, raw: &str) -> Response {
    connection.send(raw.as_bytes()).await.expect("sent");
    connection.response().await.expect("a response")
}

fn echo(response: &Response) -> EchoReport {
    parse_echo_json(&response.body).unwrap_or_else(|| panic!("not an echo: {}", response.text()))
}

fn header<'a>(report: &'a EchoReport, name: &str) -> Vec<&'a str> {
    report
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_action_kind_on_one_kept_alive_connection() {
    let (a, b) = (TestOrigin::start("a").await, TestOrigin::start("b").await);
    let proxy = TestProxy::start(&two_pools(a.addr, b.addr, RULES)).await;
    let mut c = Connection::open(proxy.addr).await.unwrap();

    // redirect, with a named capture and a variable in the template
    let r = send(
        &mut c,
        "GET /post/42 HTTP/1.1\r\nHost: old.example.com\r\n\r\n",
    )
    .await;
    assert_eq!(r.status, 301);
    assert_eq!(
        r.header("location"),
        Some("https://blog.example.com/p/42?from=old.example.com")
    );
    assert_eq!(r.header("content-length"), Some("0"));
    // the first rule's response edit reaches weir's own answers too
    assert_eq!(r.header("x-tag"), Some("all"));

    // direct response: its own headers and a templated body with the request id
    let r = send(
        &mut c,
        "GET /ping HTTP/1.1\r\nHost: h\r\nX-Request-Id: ping-1\r\n\r\n",
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.text(), "{\"pong\":\"ping-1\"}");
    // a direct response without a body has none (not weir's short "error" text)
    let r = send(&mut c, "GET /alive HTTP/1.1\r\nHost: h\r\n\r\n").await;
    assert_eq!((r.status, r.text().as_str()), (200, ""));
    // the method is part of the match: POST /ping goes to the pool
    // (the origin knows no /ping: its 404 shows the request reached it)
    let r = send(
        &mut c,
        "POST /ping HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n",
    )
    .await;
    assert_eq!((r.status, r.header("x-origin")), (404, Some("a")));

    // deny, unless the header says otherwise
    let r = send(&mut c, "GET /private/x HTTP/1.1\r\nHost: h\r\n\r\n").await;
    assert_eq!(r.status, 403);
    let r = send(
        &mut c,
        "GET /private/x HTTP/1.1\r\nHost: h\r\nX-Key: letmein\r\n\r\n",
    )
    .await;
    assert_eq!((r.status, r.header("x-origin")), (404, Some("a")));

    // pool choice, path rewrite (query kept), header edits both ways; the first
    // terminal rule ends evaluation (410 never answers)
    let r = send(
        &mut c,
        "GET /api/users?id=7 HTTP/1.1\r\nHost: h\r\nX-Debug: 1\r\nX-Client: forged\r\n\r\n",
    )
    .await;
    assert_eq!((r.status, r.header("x-origin")), (200, Some("b")));
    assert_eq!(r.header("x-served-by"), Some("weir"));
    assert_eq!(r.header("x-tag"), Some("all"));
    let report = echo(&r);
    assert_eq!(report.target, "/echo/v2/users?id=7");
    assert_eq!(header(&report, "x-client"), vec!["127.0.0.1"]);
    assert!(header(&report, "x-debug").is_empty());

    // no terminal rule: the default pool, with the accumulated rewrite
    let r = send(&mut c, "GET /echo/abc?q=1 HTTP/1.1\r\nHost: h\r\n\r\n").await;
    assert_eq!((r.status, r.header("x-origin")), (200, Some("a")));
    assert_eq!(echo(&r).target, "/echo/x/abc?q=1");

    // every answer above kept the connection
    let text = proxy.metrics.encode();
    for (rule, count) in [("old-blog", 1), ("ping", 1), ("private", 1), ("api", 1)] {
        let line =
            format!("weir_rule_matches_total{{virtual_server=\"web\",rule=\"{rule}\"}} {count}\n");
        assert!(text.contains(&line), "{line} in\n{text}");
    }
    assert!(!text.contains("rule=\"never-reached\"} 1"));
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_ids_are_kept_or_generated_and_logged() {
    let (a, b) = (TestOrigin::start("a").await, TestOrigin::start("b").await);
    let (config, log) = weir_testkit::with_access_log_file(
        &two_pools(
            a.addr,
            b.addr,
            "[virtual_servers.web.request_id]\nto_client = true\n",
        ),
        "rules-ids",
        "json",
    );
    let proxy = TestProxy::start(&config).await;
    let mut c = Connection::open(proxy.addr).await.unwrap();

    // kept: a valid incoming id, to the node (once) and back
    let r = send(
        &mut c,
        "GET /echo HTTP/1.1\r\nHost: h\r\nX-Request-Id: abc-123\r\n\r\n",
    )
    .await;
    assert_eq!(r.header("x-request-id"), Some("abc-123"));
    assert_eq!(header(&echo(&r), "x-request-id"), vec!["abc-123"]);

    // generated: no id, or one that is not valid; the same one to the node, back and logged
    let mut generated = Vec::new();
    for sent in ["", "X-Request-Id: bad id\r\n"] {
        let raw = format!("GET /echo HTTP/1.1\r\nHost: h\r\n{sent}\r\n");
        let r = send(&mut c, &raw).await;
        let id = r.header("x-request-id").expect("an id").to_owned();
        assert_eq!(id.len(), 32, "{id}");
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(header(&echo(&r), "x-request-id"), vec![id.as_str()]);
        generated.push(id);
    }
    let logged = proxy.access_log(&log, 3).await;
    assert!(logged.contains("\"request_id\":\"abc-123\""), "{logged}");
    for id in &generated {
        assert!(
            logged.contains(&format!("\"request_id\":\"{id}\"")),
            "{logged}"
        );
    }
    assert_eq!(logged.matches("\"request_id\":\"").count(), 3, "{logged}");
    proxy.stop().await;
    let _ = std::fs::remove_file(&log);
}

/// A rule that sets a field weir writes itself (the forwarding fields, the request id)
/// replaces weir's own: the node gets one of each, the rule's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_that_set_weirs_own_fields_replace_them() {
    let (a, b) = (TestOrigin::start("a").await, TestOrigin::start("b").await);
    let rules = r#"
[[virtual_servers.web.rules]]
match = { path_prefix = "/echo/set" }
request_headers = { set = { X-Forwarded-Proto = "https", X-Forwarded-For = "${client_address}", Via = "1.1 edge", X-Request-Id = "edge-1" } }

[[virtual_servers.web.rules]]
match = { path_prefix = "/echo/remove" }
request_headers = { remove = ["Via", "X-Request-Id"] }
"#;
    let proxy = TestProxy::start(&two_pools(a.addr, b.addr, rules)).await;
    let mut c = Connection::open(proxy.addr).await.unwrap();
    let sent = "Host: h\r\nX-Forwarded-Proto: ftp\r\nVia: 1.0 c\r\nX-Request-Id: client-1\r\n\r\n";
    let r = send(&mut c, &format!("GET /echo/set HTTP/1.1\r\n{sent}")).await;
    let report = echo(&r);
    assert_eq!(header(&report, "x-forwarded-proto"), vec!["https"]);
    assert_eq!(header(&report, "x-forwarded-for"), vec!["127.0.0.1"]);
    assert_eq!(header(&report, "via"), vec!["1.1 edge"]);
    assert_eq!(header(&report, "x-request-id"), vec!["edge-1"]);

    let r = send(&mut c, &format!("GET /echo/remove HTTP/1.1\r\n{sent}")).await;
    let report = echo(&r);
    assert!(header(&report, "via").is_empty(), "{:?}", report.headers);
    assert!(
        header(&report, "x-request-id").is_empty(),
        "{:?}",
        report.headers
    );
    assert_eq!(header(&report, "x-forwarded-proto"), vec!["http"]);
    proxy.stop().await;
}

/// Clients behind a trusted proxy on loopback; those of 203.0.113.0/24 denied.
const BEHIND_A_PROXY: &str = r#"
[virtual_servers.web.client_address]
header = "X-Forwarded-For"
trusted_proxies = ["127.0.0.0/8"]

[[virtual_servers.web.rules]]
match = { client_address = "203.0.113.0/24" }
deny = true
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_see_the_client_behind_a_trusted_proxy() {
    let (a, b) = (TestOrigin::start("a").await, TestOrigin::start("b").await);
    let proxy = TestProxy::start(&two_pools(a.addr, b.addr, BEHIND_A_PROXY)).await;
    let mut c = Connection::open(proxy.addr).await.unwrap();
    let r = send(
        &mut c,
        "GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 203.0.113.9\r\n\r\n",
    )
    .await;
    assert_eq!(r.status, 403);
    // the rightmost untrusted hop is the client
    let raw = "GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 203.0.113.9, 198.51.100.1\r\n\r\n";
    assert_eq!(send(&mut c, raw).await.status, 200);
    assert_eq!(
        send(&mut c, "GET / HTTP/1.1\r\nHost: h\r\n\r\n")
            .await
            .status,
        200
    );
    proxy.stop().await;
}

/// A rule may remove `Via` from a relayed response, or replace weir's entry with its own;
/// a response no rule touches keeps weir's entry (the cache's writer is checked in
/// `tests/cache/http2.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_remove_or_replace_via_on_responses() {
    let (a, b) = (TestOrigin::start("a").await, TestOrigin::start("b").await);
    let rules = r#"
[[virtual_servers.web.rules]]
match = { query = { name = "via", equals = "none" } }
response_headers = { remove = ["Via"] }

[[virtual_servers.web.rules]]
match = { query = { name = "via", equals = "edge" } }
response_headers = { set = { Via = "1.1 edge" } }
"#;
    let proxy = TestProxy::start(&two_pools(a.addr, b.addr, rules)).await;
    let mut c = Connection::open(proxy.addr).await.unwrap();
    for (query, expected) in [
        ("none", vec![]),
        ("edge", vec!["1.1 edge"]),
        ("kept", vec!["1.1 weir"]),
    ] {
        let r = send(
            &mut c,
            &format!("GET /?via={query} HTTP/1.1\r\nHost: h\r\n\r\n"),
        )
        .await;
        assert_eq!(r.status, 200);
        let vias: Vec<&str> = r
            .headers
            .iter()
            .filter(|(name, _)| name.eq_ignore_ascii_case("via"))
            .map(|(_, value)| value.as_str())
            .collect();
        assert_eq!(vias, expected, "{query}");
    }
    proxy.stop().await;
}

/// The access log names the client a trusted proxy reported next to the connection's
/// peer: for a proxied request, for a rule's own answer and for a failed request; a
/// request with no forwarding header logs the peer alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_access_log_names_the_client_behind_a_trusted_proxy() {
    let (a, b) = (TestOrigin::start("a").await, TestOrigin::start("b").await);
    let (config, log) = weir_testkit::with_access_log_file(
        &two_pools(a.addr, b.addr, BEHIND_A_PROXY),
        "rules-xff",
        "json",
    );
    let proxy = TestProxy::start(&config).await;
    let mut c = Connection::open(proxy.addr).await.unwrap();
    let denied = "GET /?denied HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 203.0.113.9\r\n\r\n";
    assert_eq!(send(&mut c, denied).await.status, 403);
    let proxied =
        "GET /?proxied HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 203.0.113.9, 198.51.100.1\r\n\r\n";
    assert_eq!(send(&mut c, proxied).await.status, 200);
    let direct = "GET /?direct HTTP/1.1\r\nHost: h\r\n\r\n";
    assert_eq!(send(&mut c, direct).await.status, 200);
    a.stop().await;
    let failed = "GET /?failed HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 192.0.2.44\r\n\r\n";
    assert_eq!(send(&mut c, failed).await.status, 502);
    let logged = proxy.access_log(&log, 4).await;
    let line = |path: &str| {
        logged
            .lines()
            .find(|line| line.contains(&format!("\"uri\":\"{path}\"")))
            .unwrap_or_else(|| panic!("{path} in {logged}"))
            .to_owned()
    };
    assert!(
        line("/?denied").contains("\"client_address\":\"203.0.113.9\""),
        "{logged}"
    );
    assert!(
        line("/?proxied").contains("\"client_address\":\"198.51.100.1\""),
        "{logged}"
    );
    assert!(
        line("/?failed").contains("\"client_address\":\"192.0.2.44\""),
        "{logged}"
    );
    assert!(!line("/?direct").contains("client_address"), "{logged}");
    for path in ["/?denied", "/?proxied", "/?direct", "/?failed"] {
        assert!(line(path).contains("\"client\":\"127.0.0.1:"), "{logged}");
    }
    proxy.stop().await;
    b.stop().await;
    let _ = std::fs::remove_file(&log);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_changes_the_rules_a_kept_alive_client_sees_next() {
    let (a, b) = (TestOrigin::start("a").await, TestOrigin::start("b").await);
    let proxy = TestProxy::start(&two_pools(a.addr, b.addr, "")).await;
    let mut c = Connection::open(proxy.addr).await.unwrap();
    let r = send(&mut c, "GET /echo/moved HTTP/1.1\r\nHost: h\r\n\r\n").await;
    assert_eq!((r.status, r.header("x-origin")), (200, Some("a")));

    let rules = r#"
[[virtual_servers.web.rules]]
match = { path = "/echo/moved" }
redirect = { status = 308, location = "/new${path}" }

[[virtual_servers.web.rules]]
match = { path = "/echo/other" }
pool = "b"
"#;
    let candidate = weir_config::parse_str(&two_pools(a.addr, b.addr, rules), "test.toml").unwrap();
    proxy.live.apply(candidate).expect("reload applies");

    let r = send(&mut c, "GET /echo/moved HTTP/1.1\r\nHost: h\r\n\r\n").await;
    assert_eq!(
        (r.status, r.header("location")),
        (308, Some("/new/echo/moved"))
    );
    let r = send(&mut c, "GET /echo/other HTTP/1.1\r\nHost: h\r\n\r\n").await;
    assert_eq!((r.status, r.header("x-origin")), (200, Some("b")));
    proxy.stop().await;
}

/// A reload that renames a rule and removes a limit takes their series away; the rule
/// that stays keeps counting in its series.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_drops_the_metric_series_of_renamed_rules_and_removed_limits() {
    let (a, b) = (TestOrigin::start("a").await, TestOrigin::start("b").await);
    let rules = |name: &str, limit: bool| {
        let mut rules = format!(
            "[[virtual_servers.web.rules]]\nname = \"{name}\"\nmatch = {{ path = \"/gone\" }}\ndeny = 410\n\n\
             [[virtual_servers.web.rules]]\nname = \"kept\"\nmatch = {{ path = \"/echo/b\" }}\npool = \"b\"\n"
        );
        if limit {
            rules.push_str(
                "rate_limit = \"per-client\"\n\n\
                 [virtual_servers.web.rate_limits.per-client]\nrate = 1000\nburst = 1000\n",
            );
        }
        rules
    };
    let proxy = TestProxy::start(&two_pools(a.addr, b.addr, &rules("old-name", true))).await;
    let mut c = Connection::open(proxy.addr).await.unwrap();
    assert_eq!(
        send(&mut c, "GET /gone HTTP/1.1\r\nHost: h\r\n\r\n")
            .await
            .status,
        410
    );
    let r = send(&mut c, "GET /echo/b HTTP/1.1\r\nHost: h\r\n\r\n").await;
    assert_eq!((r.status, r.header("x-origin")), (200, Some("b")));
    let text = proxy.metrics.encode();
    for line in [
        "weir_rule_matches_total{virtual_server=\"web\",rule=\"old-name\"} 1\n",
        "weir_limit_refusals_total{virtual_server=\"web\",limit=\"per-client\"} 0\n",
    ] {
        assert!(text.contains(line), "{line} missing from\n{text}");
    }

    let candidate = weir_config::parse_str(
        &two_pools(a.addr, b.addr, &rules("new-name", false)),
        "test.toml",
    )
    .unwrap();
    proxy.live.apply(candidate).expect("reload applies");
    assert_eq!(
        send(&mut c, "GET /gone HTTP/1.1\r\nHost: h\r\n\r\n")
            .await
            .status,
        410
    );
    let r = send(&mut c, "GET /echo/b HTTP/1.1\r\nHost: h\r\n\r\n").await;
    assert_eq!((r.status, r.header("x-origin")), (200, Some("b")));
    let text = proxy.metrics.encode();
    assert!(!text.contains("old-name"), "{text}");
    assert!(!text.contains("per-client"), "{text}");
    for line in [
        "weir_rule_matches_total{virtual_server=\"web\",rule=\"new-name\"} 1\n",
        "weir_rule_matches_total{virtual_server=\"web\",rule=\"kept\"} 2\n",
    ] {
        assert!(text.contains(line), "{line} missing from\n{text}");
    }
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_to_a_request_with_a_body_closes_the_connection() {
    let (a, b) = (TestOrigin::start("a").await, TestOrigin::start("b").await);
    let rules = "[[virtual_servers.web.rules]]\nmatch = { path = \"/gone\" }\ndeny = 410\n";
    let proxy = TestProxy::start(&two_pools(a.addr, b.addr, rules)).await;
    let mut c = Connection::open(proxy.addr).await.unwrap();
    let raw = "POST /gone HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello";
    let r = send(&mut c, raw).await;
    assert_eq!((r.status, r.header("connection")), (410, Some("close")));
    assert!(c.is_closed(std::time::Duration::from_secs(3)).await);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weirs_error_answers_carry_the_request_id_and_response_edits() {
    let (a, b) = (TestOrigin::start("a").await, TestOrigin::start("b").await);
    let b_addr = b.addr;
    b.stop().await;
    let rules = r#"
[virtual_servers.web.request_id]
to_client = true

[[virtual_servers.web.rules]]
match = { path_prefix = "/down/" }
response_headers = { set = { X-Tag = "t" } }
pool = "b"
"#;
    let proxy = TestProxy::start(&two_pools(a.addr, b_addr, rules)).await;
    let mut c = Connection::open(proxy.addr).await.unwrap();
    let r = send(
        &mut c,
        "GET /down/x HTTP/1.1\r\nHost: h\r\nX-Request-Id: err-1\r\n\r\n",
    )
    .await;
    assert_eq!(r.status, 502);
    assert_eq!(r.header("x-request-id"), Some("err-1"));
    assert_eq!(r.header("x-tag"), Some("t"));
    proxy.stop().await;
}

/// The virtual server's `response_headers` ("set on every response to clients") are on
/// weir's own answers too: a rule's denial and direct response, a refused method, a body
/// too large, a node that cannot be reached, over HTTP/1.1 and HTTP/2, as on a relayed one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_virtual_servers_response_headers_are_on_weirs_own_answers() {
    let origin = TestOrigin::start("a").await;
    let closed = weir_testkit::ClosedPort::new();
    let dead = closed.addr();
    let config = format!(
        "[log]\naccess_log = false\nlevel = \"warn\"\n\n\
         [pools.web]\nnodes = [{{ address = \"{}\" }}]\n\n\
         [pools.dead]\nnodes = [{{ address = \"{dead}\" }}]\n\n\
         [virtual_servers.web]\nlisten = [\"127.0.0.1:0\"]\npool = \"web\"\n\
         [virtual_servers.web.http2]\ncleartext = true\n\
         [virtual_servers.web.limits]\nmax_body_bytes = \"1KiB\"\n\
         [virtual_servers.web.response_headers]\nStrict-Transport-Security = \"max-age=63072000\"\n\
         [[virtual_servers.web.rules]]\nname = \"closed\"\nmatch = {{ path = \"/closed\" }}\ndeny = true\n\
         [[virtual_servers.web.rules]]\nname = \"pong\"\nmatch = {{ path = \"/ping\" }}\nrespond = {{ status = 200 }}\n\
         [[virtual_servers.web.rules]]\nname = \"down\"\nmatch = {{ path = \"/down\" }}\npool = \"dead\"\n",
        origin.addr
    );
    let proxy = TestProxy::start(&config).await;
    let cases = [
        ("GET /echo HTTP/1.1\r\nHost: t\r\n\r\n".to_owned(), 200),
        ("GET /closed HTTP/1.1\r\nHost: t\r\n\r\n".to_owned(), 403),
        ("GET /ping HTTP/1.1\r\nHost: t\r\n\r\n".to_owned(), 200),
        ("TRACE / HTTP/1.1\r\nHost: t\r\n\r\n".to_owned(), 405),
        (
            format!(
                "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5000\r\n\r\n{}",
                "x".repeat(5000)
            ),
            413,
        ),
        ("GET /down HTTP/1.1\r\nHost: t\r\n\r\n".to_owned(), 502),
    ];
    for (raw, status) in cases {
        let mut connection = Connection::open(proxy.addr).await.unwrap();
        let response = send(&mut connection, &raw).await;
        assert_eq!(response.status, status, "{raw:.40}");
        assert_eq!(
            response.header("strict-transport-security"),
            Some("max-age=63072000"),
            "{raw:.40}"
        );
    }
    // HTTP/2: weir's own 502 and 403 carry it too.
    let tcp = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    let (sender, connection) = h2::client::handshake(tcp).await.expect("handshake");
    tokio::spawn(connection);
    for (path, status) in [("/down", 502), ("/closed", 403)] {
        let mut sender = sender.clone().ready().await.expect("ready");
        let request = http::Request::get(format!("http://t{path}"))
            .body(())
            .unwrap();
        let (response, _) = sender.send_request(request, true).expect("sent");
        let response = response.await.expect("an answer");
        assert_eq!(response.status(), status);
        assert_eq!(
            response
                .headers()
                .get("strict-transport-security")
                .map(|v| v.as_bytes()),
            Some(&b"max-age=63072000"[..]),
            "{path}"
        );
    }
    proxy.stop().await;
    origin.stop().await;
}

/// One field of a name, never two: the virtual server's `response_headers` replace weir's
/// own field of the same name (`Retry-After` on a refusal), and a rule that sets the same
/// name replaces the virtual server's, on weir's own answers and relayed ones alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_set_twice_is_sent_once() {
    let origin = TestOrigin::start("a").await;
    let config = format!(
        "[log]\naccess_log = false\nlevel = \"warn\"\n\n\
         [pools.web]\nnodes = [{{ address = \"{}\" }}]\n\n\
         [virtual_servers.web]\nlisten = [\"127.0.0.1:0\"]\npool = \"web\"\n\
         [virtual_servers.web.http2]\ncleartext = true\n\
         [virtual_servers.web.response_headers]\nRetry-After = \"99\"\nX-Own = \"vs\"\n\
         [virtual_servers.web.rate_limits.tight]\nrate = 1\nburst = 1\n\
         [[virtual_servers.web.rules]]\nname = \"closed\"\nmatch = {{ path = \"/closed\" }}\ndeny = true\n\
         response_headers = {{ set = {{ X-Own = \"rule\" }} }}\n\
         [[virtual_servers.web.rules]]\nname = \"tagged\"\nmatch = {{ path = \"/echo\" }}\n\
         response_headers = {{ set = {{ X-Own = \"rule\" }} }}\n\
         [[virtual_servers.web.rules]]\nname = \"limited\"\nmatch = {{ path = \"/limited\" }}\nrate_limit = \"tight\"\n",
        origin.addr
    );
    let proxy = TestProxy::start(&config).await;
    let fields = |response: &Response, name: &str| -> Vec<String> {
        response
            .headers
            .iter()
            .filter(|(field, _)| field.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.clone())
            .collect()
    };
    let mut connection = Connection::open(proxy.addr).await.unwrap();
    let denied = send(&mut connection, "GET /closed HTTP/1.1\r\nHost: t\r\n\r\n").await;
    assert_eq!(denied.status, 403);
    assert_eq!(fields(&denied, "x-own"), ["rule"]);
    let mut connection = Connection::open(proxy.addr).await.unwrap();
    let relayed = send(&mut connection, "GET /echo HTTP/1.1\r\nHost: t\r\n\r\n").await;
    assert_eq!(relayed.status, 200);
    assert_eq!(fields(&relayed, "x-own"), ["rule"]);
    let mut refused = None;
    for _ in 0..3 {
        let mut connection = Connection::open(proxy.addr).await.unwrap();
        let response = send(&mut connection, "GET /limited HTTP/1.1\r\nHost: t\r\n\r\n").await;
        if response.status == 429 {
            refused = Some(response);
            break;
        }
    }
    let refused = refused.expect("a 429 past the burst");
    assert_eq!(fields(&refused, "retry-after"), ["99"]);
    assert_eq!(fields(&refused, "x-own"), ["vs"]);
    // The same over HTTP/2.
    let tcp = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    let (sender, connection) = h2::client::handshake(tcp).await.expect("handshake");
    tokio::spawn(connection);
    let mut sender = sender.ready().await.expect("ready");
    let request = http::Request::get("http://t/limited").body(()).unwrap();
    let (response, _) = sender.send_request(request, true).expect("sent");
    let response = response.await.expect("an answer");
    assert_eq!(response.status(), 429);
    let values: Vec<_> = response.headers().get_all("retry-after").iter().collect();
    assert_eq!(values, ["99"]);
    proxy.stop().await;
    origin.stop().await;
}
