//! The layer 4 keys, through the public `parse_str`.

use std::time::Duration;

use crate::model::*;
use crate::parse_str;

fn valid(text: &str) -> Config {
    parse_str(text, "t.toml").unwrap_or_else(|error| panic!("expected valid, got:\n{error}"))
}

fn errors(text: &str) -> Vec<String> {
    match parse_str(text, "t.toml") {
        Ok(_) => panic!("expected errors for:\n{text}"),
        Err(error) => error.to_string().lines().map(str::to_owned).collect(),
    }
}

#[track_caller]
fn assert_one_error(text: &str, path: &str, message: &str) {
    let lines = errors(text);
    assert_eq!(lines.len(), 1, "expected one error, got {lines:#?}");
    assert!(
        lines[0].contains(&format!("{path}: ")) && lines[0].contains(message),
        "expected `{path}: ...{message}...`, got {:?}",
        lines[0]
    );
}

const POOLS: &str = "[pools.db]\nnodes = [{ address = \"127.0.0.1:5432\" }]\n\
                     [pools.tls]\nnodes = [{ address = \"127.0.0.1:8443\" }]\n";

fn tcp(vs: &str) -> String {
    format!(
        "[virtual_servers.db]\nprotocol = \"tcp\"\nlisten = \"127.0.0.1:6432\"\npool = \"db\"\n{vs}\n{POOLS}"
    )
}

#[test]
fn a_tcp_virtual_server_takes_the_session_defaults() {
    let config = valid(&tcp(""));
    let server = &config.virtual_servers[0];
    assert_eq!(server.protocol, Protocol::Tcp);
    // the server may speak first: no deferred accept unless asked for
    assert!(!server.defer_accept);
    assert!(valid(&tcp("defer_accept = true")).virtual_servers[0].defer_accept);
    let settings = server.tcp.as_ref().expect("tcp settings");
    assert_eq!(settings.relay, crate::defaults::TCP_RELAY);
    assert_eq!((settings.buffer, settings.pipe), (16 * 1024, 32 * 1024));
    assert_eq!(settings.idle_timeout, Duration::from_secs(300));
    assert_eq!(
        (server.accept_proxy.as_ref(), server.passthrough.len()),
        (None, 0)
    );
}

#[test]
fn tcp_keys_proxy_protocol_and_passthrough() {
    let config = valid(&tcp(
        "[virtual_servers.db.tcp]\nrelay = \"copy\"\nbuffer = \"64KiB\"\npipe = \"1MiB\"\nidle_timeout = \"30s\"\n\
         [virtual_servers.db.proxy_protocol]\ntrusted = [\"127.0.0.0/8\", \"::1/128\"]\ntimeout = \"2s\"\n\
         [[virtual_servers.db.passthrough]]\nserver_names = [\"Secure.Example\", \"*.internal\"]\nalpn = [\"h2\"]\npool = \"tls\"\n\
         [virtual_servers.db.limits]\nmax_connections = 100\n",
    ));
    let server = &config.virtual_servers[0];
    let settings = server.tcp.as_ref().unwrap();
    assert_eq!(
        (settings.relay, settings.buffer, settings.pipe),
        (RelayMode::Copy, 64 * 1024, 1024 * 1024)
    );
    assert_eq!(settings.idle_timeout, Duration::from_secs(30));
    let accept = server.accept_proxy.as_ref().unwrap();
    assert_eq!(accept.timeout, Duration::from_secs(2));
    assert!(accept.trusted[0].contains("127.1.2.3".parse().unwrap()));
    assert!(accept.trusted[1].contains("::1".parse().unwrap()));
    assert_eq!(
        server.passthrough[0].server_names,
        vec!["secure.example", "*.internal"]
    );
    assert_eq!(server.passthrough[0].pool, PoolId(1));
    assert_eq!(server.limits.max_connections, 100);
}

/// A pipe past the kernel's limit for an unprivileged process could never be had, and one
/// under a page is not a size the kernel gives: both are refused with the key's line.
#[test]
fn tcp_pipe_is_between_a_page_and_a_mebibyte() {
    assert_one_error(
        &tcp("[virtual_servers.db.tcp]\npipe = \"2MiB\""),
        "virtual_servers.db.tcp.pipe",
        "must be at most 1MiB",
    );
    assert_one_error(
        &tcp("[virtual_servers.db.tcp]\npipe = \"1KiB\""),
        "virtual_servers.db.tcp.pipe",
        "must be at least 4KiB",
    );
}

/// SNI names hosts, never addresses (RFC 6066 §3): a passthrough rule for one could never
/// match, and is refused rather than left dead.
#[test]
fn passthrough_names_are_host_names_not_addresses() {
    for (name, index) in [("127.0.0.1", 1), ("[::1]", 1), ("[2001:DB8::1]", 1)] {
        assert_one_error(
            &tcp(&format!(
                "[[virtual_servers.db.passthrough]]\nserver_names = [\"a.example\", \"{name}\"]\npool = \"tls\""
            )),
            &format!("virtual_servers.db.passthrough[0].server_names[{index}]"),
            "is an IP address, which no ClientHello names",
        );
    }
    // A name made of digits and dots that is no address is a name.
    valid(&tcp(
        "[[virtual_servers.db.passthrough]]\nserver_names = [\"1.2.3.example\"]\npool = \"tls\"",
    ));
}

/// As in every other list of networks: a mistyped prefix would trust a whole network to
/// name its clients.
#[test]
fn proxy_protocol_trusted_refuses_networks_with_host_bits() {
    assert_one_error(
        &tcp("[virtual_servers.db.proxy_protocol]\ntrusted = [\"2001:db8::1/64\"]"),
        "virtual_servers.db.proxy_protocol.trusted[0]",
        "did you mean \"2001:db8::/64\"?",
    );
}

#[test]
fn http_settings_on_a_tcp_virtual_server_are_errors() {
    assert_one_error(
        &tcp("forwarded_headers = false"),
        "virtual_servers.db.forwarded_headers",
        "an HTTP setting",
    );
    assert_one_error(
        &tcp("[virtual_servers.db.limits]\nmax_body_bytes = \"1MiB\""),
        "virtual_servers.db.limits.max_body_bytes",
        "an HTTP setting",
    );
    // The traffic rules and limits act on HTTP requests: a deny rule that a TCP virtual
    // server ignored would let every connection through.
    for (table, key) in [
        (
            "[[virtual_servers.db.rules]]\nmatch.client_address = \"10.0.0.0/8\"\ndeny = true",
            "rules",
        ),
        (
            "[virtual_servers.db.client_connections]\nmax = 10",
            "client_connections",
        ),
        (
            "[virtual_servers.db.rate_limits.slow]\nrate = 10\nburst = 10",
            "rate_limits",
        ),
        (
            "[virtual_servers.db.request_id]\nenabled = true",
            "request_id",
        ),
        (
            "[virtual_servers.db.http2]\nmax_concurrent_streams = 10",
            "http2",
        ),
        (
            "[virtual_servers.db.limits]\nmin_body_rate = 100",
            "limits.min_body_rate",
        ),
    ] {
        assert_one_error(
            &tcp(table),
            &format!("virtual_servers.db.{key}"),
            "an HTTP setting",
        );
    }
    assert_one_error(
        &tcp("[virtual_servers.db.tls]\ncertificates = [{ self_signed = [\"a\"] }]"),
        "virtual_servers.db.tls",
        "needs protocol = \"https\" or \"tls\"",
    );
}

#[test]
fn tls_needs_certificates_and_offers_no_alpn_unless_told() {
    let text = "[virtual_servers.s]\nprotocol = \"tls\"\nlisten = \"127.0.0.1:6433\"\npool = \"db\"\n\
                [virtual_servers.s.tls]\ncertificates = [{ self_signed = [\"localhost\"] }]\n";
    let config = valid(&format!("{text}{POOLS}"));
    let server = &config.virtual_servers[0];
    assert_eq!(server.protocol, Protocol::Tls);
    assert!(server.tls.as_ref().unwrap().alpn.is_empty());
    assert!(server.tcp.is_some());
    assert_one_error(
        &format!(
            "[virtual_servers.s]\nprotocol = \"tls\"\nlisten = \"127.0.0.1:6433\"\npool = \"db\"\n{POOLS}"
        ),
        "virtual_servers.s.tls",
        "needs a [tls] table",
    );
    // A tls virtual server relays bytes: its ALPN may name what its nodes speak.
    let postgres = valid(&format!("{text}alpn = [\"postgresql\"]\n{POOLS}"));
    assert_eq!(
        postgres.virtual_servers[0].tls.as_ref().unwrap().alpn,
        vec!["postgresql".to_owned()]
    );
    assert_one_error(
        &format!("{text}alpn = [\"\"]\n{POOLS}"),
        "virtual_servers.s.tls.alpn[0]",
        "not an ALPN protocol name",
    );
}

#[test]
fn layer4_rules_that_fail() {
    let http = "[virtual_servers.web]\nlisten = \"127.0.0.1:8080\"\npool = \"db\"\n";
    assert_one_error(
        &format!("{http}[virtual_servers.web.tcp]\nrelay = \"copy\"\n{POOLS}"),
        "virtual_servers.web.tcp",
        "needs protocol = \"tcp\" or \"tls\"",
    );
    assert_one_error(
        &format!(
            "{http}[[virtual_servers.web.passthrough]]\nserver_names = [\"a\"]\npool = \"db\"\n{POOLS}"
        ),
        "virtual_servers.web.passthrough",
        "TLS passthrough needs",
    );
    assert_one_error(
        &tcp("[virtual_servers.db.tcp]\nrelay = \"sendfile\""),
        "virtual_servers.db.tcp.relay",
        "expected one of \"auto\", \"splice\", \"copy\"",
    );
    assert_one_error(
        &tcp("[virtual_servers.db.proxy_protocol]\ntrusted = [\"10.0.0.0/33\"]"),
        "virtual_servers.db.proxy_protocol.trusted[0]",
        "",
    );
    assert_one_error(
        &tcp("[virtual_servers.db.proxy_protocol]\ntimeout = \"1s\""),
        "virtual_servers.db.proxy_protocol.trusted",
        "required",
    );
    assert_one_error(
        &tcp("[[virtual_servers.db.passthrough]]\nserver_names = [\"a.example\"]\npool = \"nope\""),
        "virtual_servers.db.passthrough[0].pool",
        "nope",
    );
}

#[test]
fn a_pool_sending_the_proxy_protocol_serves_tcp_only() {
    let pools = POOLS.replace("[pools.db]\n", "[pools.db]\nproxy_protocol = \"v2\"\n");
    let config = valid(&format!(
        "[virtual_servers.db]\nprotocol = \"tcp\"\nlisten = \"127.0.0.1:6432\"\npool = \"db\"\n{pools}"
    ));
    assert_eq!(config.pools[0].proxy_protocol, Some(ProxyVersion::V2));
    assert_one_error(
        &format!("[virtual_servers.web]\nlisten = \"127.0.0.1:8080\"\npool = \"db\"\n{pools}"),
        "pools.db.proxy_protocol",
        "HTTP virtual server \"web\" uses this pool",
    );
    // A rule's pool carries HTTP requests as the default pool does.
    assert_one_error(
        &format!(
            "[virtual_servers.web]\nlisten = \"127.0.0.1:8080\"\npool = \"tls\"\n\
             [[virtual_servers.web.rules]]\nmatch.path_prefix = \"/db/\"\npool = \"db\"\n\
             [virtual_servers.db]\nprotocol = \"tcp\"\nlisten = \"127.0.0.1:6432\"\npool = \"db\"\n{pools}"
        ),
        "pools.db.proxy_protocol",
        "HTTP virtual server \"web\" uses this pool",
    );
    assert_one_error(
        &POOLS.replace("[pools.db]\n", "[pools.db]\nproxy_protocol = \"v3\"\n").replace(
            "[pools.tls]",
            "[virtual_servers.x]\nprotocol = \"tcp\"\nlisten = \"127.0.0.1:1\"\npool = \"db\"\n[pools.tls]",
        ),
        "pools.db.proxy_protocol",
        "expected one of \"v1\", \"v2\"",
    );
}
