//! One test per validation rule, through the public `parse_str`.

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::time::Duration;

use crate::model::*;
use crate::parse_str;

/// A valid file with `vs` added to `[virtual_servers.web]`, `pool` to `[pools.web]`,
/// and `tail` after both.
fn file(vs: &str, pool: &str, tail: &str) -> String {
    format!(
        "[virtual_servers.web]\nlisten = \"127.0.0.1:8080\"\npool = \"web\"\n{vs}\n\
         [pools.web]\nnodes = [{{ address = \"127.0.0.1:8081\" }}]\n{pool}\n{tail}"
    )
}

fn valid(text: &str) -> Config {
    parse_str(text, "t.toml").unwrap_or_else(|error| panic!("expected valid, got:\n{error}"))
}

/// The error lines for `text` (panics when it is valid).
fn errors(text: &str) -> Vec<String> {
    match parse_str(text, "t.toml") {
        Ok(_) => panic!("expected errors for:\n{text}"),
        Err(error) => error.to_string().lines().map(str::to_owned).collect(),
    }
}

/// Asserts that `text` fails with exactly one error, at `path`, containing `message`.
#[track_caller]
fn assert_one_error(text: &str, path: &str, message: &str) {
    let lines = errors(text);
    assert_eq!(lines.len(), 1, "expected one error, got {lines:#?}");
    let needle = format!("{path}: ");
    assert!(
        lines[0].contains(&needle) && lines[0].contains(message),
        "expected `{path}: ...{message}...`, got {:?}",
        lines[0]
    );
}

#[test]
fn minimal_file_takes_every_default() {
    let config = valid(&file("", "", ""));
    assert_eq!(config.source, None);
    assert_eq!(config.runtime, Runtime::default());
    assert_eq!(config.admin, None);
    assert_eq!(config.log, Log::default());
    let server = &config.virtual_servers[0];
    assert_eq!(
        server.listen,
        vec!["127.0.0.1:8080".parse::<SocketAddr>().unwrap()]
    );
    assert_eq!(server.protocol, Protocol::Http);
    assert_eq!(server.default_pool, PoolId(0));
    assert_eq!(server.limits, ClientLimits::default());
    assert_eq!(server.timeouts, ClientTimeouts::default());
    assert!(server.forwarded_headers);
    assert_eq!(server.backlog, 1024);
    assert!(server.defer_accept);
    let pool = &config.pools[0];
    assert_eq!(pool.algorithm, Algorithm::RoundRobin);
    assert_eq!(pool.nodes[0].weight, NonZeroU32::MIN);
    assert_eq!(pool.connections, UpstreamConnections::default());
    assert_eq!(pool.timeouts, UpstreamTimeouts::default());
    assert_eq!(pool.retries, 2);
    assert_eq!(pool.health, None);
    assert_eq!(pool.passive_health, PassiveHealth::default());
    assert!(!pool.fail_open);
    assert!(config.origins.is_empty());
}

#[test]
fn every_key_set_is_converted() {
    let text = file(
        "protocol = \"http\"\nforwarded_headers = false\nbacklog = 128\ndefer_accept = false\n\
         [virtual_servers.web.limits]\nmax_connections = 5\nmax_header_bytes = \"8KiB\"\n\
         max_headers = 50\nmax_body_bytes = 2048\nrequest_buffer = \"4KB\"\n\
         response_buffer = \"1MiB\"\nmax_requests_per_connection = 7\n\
         [virtual_servers.web.timeouts]\nheader_read = \"1s\"\nidle = \"2s\"\n\
         body_read = \"3s\"\nwrite = \"250ms\"\n",
        "algorithm = \"perceptive\"\nretries = 0\nfail_open = true\n\
         [pools.web.connections]\nmax_connections = 8\nqueue_length = 0\n\
         queue_timeout = \"1s\"\nidle_timeout = \"2s\"\nmax_requests_per_connection = 100\n\
         [pools.web.timeouts]\nconnect = \"1s\"\nresponse = \"9s\"\n\
         [pools.web.health]\ntype = \"http\"\nmethod = \"HEAD\"\npath = \"/healthz\"\n\
         host = \"health.local\"\nexpect_status = [200, \"2xx\", \"300-302\"]\n\
         interval = \"3s\"\ntimeout = \"1s\"\nrise = 1\nfall = 4\n\
         [pools.web.passive_health]\nconsecutive_failures = 0\nbase_ejection = \"1s\"\n\
         max_ejection = \"1m\"\n",
        "[runtime]\nthreads = 4\ndrain_timeout = \"0s\"\n[admin]\nlisten = \"[::1]:9090\"\n\
         [log]\naccess_log = false\nlevel = \"info,weir_proxy=debug\"\nformat = \"json\"\n\
         [[origins]]\nname = \"o\"\nlisten = \"127.0.0.1:8081\"\nmax_connections = 3\n\
         keep_alive = false\n",
    );
    let config = valid(&text);
    assert_eq!(config.runtime.threads, NonZeroU32::new(4));
    assert_eq!(config.runtime.drain_timeout, Duration::ZERO);
    assert_eq!(config.admin.unwrap().listen, "[::1]:9090".parse().unwrap());
    assert_eq!(
        config.log,
        Log {
            access_log: false,
            level: "info,weir_proxy=debug".into(),
            format: LogFormat::Json
        }
    );
    let server = &config.virtual_servers[0];
    assert!(!server.forwarded_headers);
    assert_eq!(server.backlog, 128);
    assert!(!server.defer_accept);
    assert_eq!(
        server.limits,
        ClientLimits {
            max_connections: 5,
            max_header_bytes: 8192,
            max_headers: 50,
            max_body_bytes: 2048,
            request_buffer: 4000,
            response_buffer: 1 << 20,
            max_requests_per_connection: NonZeroU32::new(7),
            min_body_rate: 1024,
        }
    );
    assert_eq!(server.timeouts.write, Duration::from_millis(250));
    let pool = &config.pools[0];
    assert_eq!(pool.algorithm, Algorithm::Perceptive);
    assert_eq!(pool.retries, 0);
    assert!(pool.fail_open);
    assert_eq!(pool.connections.queue_length, 0);
    assert_eq!(
        pool.connections.max_requests_per_connection,
        NonZeroU32::new(100)
    );
    assert_eq!(pool.timeouts.response, Duration::from_secs(9));
    let health = pool.health.as_ref().unwrap();
    assert_eq!(
        health.check,
        HealthCheckKind::Http {
            method: "HEAD".into(),
            path: "/healthz".into(),
            host: Some("health.local".into()),
            expect_status: vec![(200, 200), (200, 299), (300, 302)],
        }
    );
    assert_eq!(health.rise.get(), 1);
    assert_eq!(health.fall.get(), 4);
    assert_eq!(pool.passive_health.consecutive_failures, 0);
    assert_eq!(pool.passive_health.max_ejection, Duration::from_secs(60));
    assert_eq!(
        config.origins,
        vec![Origin {
            name: "o".into(),
            listen: "127.0.0.1:8081".parse().unwrap(),
            max_connections: NonZeroU32::new(3),
            keep_alive: false,
        }]
    );
}

#[test]
fn virtual_servers_and_pools_keep_file_order() {
    let text = "\
[virtual_servers.zulu]
listen = \"127.0.0.1:1\"
pool = \"zeta\"
[virtual_servers.alpha]
listen = \"127.0.0.1:2\"
pool = \"alpha\"
[pools.zeta]
nodes = [{ address = \"10.0.0.1:80\" }]
[pools.alpha]
nodes = [{ address = \"10.0.0.2:80\" }]
";
    let config = valid(text);
    let names: Vec<&str> = config
        .virtual_servers
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(names, ["zulu", "alpha"]);
    assert_eq!(config.pools[0].name, "zeta");
    assert_eq!(config.virtual_servers[0].default_pool, PoolId(0));
    assert_eq!(config.virtual_servers[1].default_pool, PoolId(1));
    assert_eq!(config.pool_id("alpha"), Some(PoolId(1)));
}

#[test]
fn listen_takes_one_address_or_many() {
    let config = valid(&file("", "", "").replace(
        "listen = \"127.0.0.1:8080\"",
        "listen = [\"127.0.0.1:8080\", \"[::1]:8080\"]",
    ));
    assert_eq!(config.virtual_servers[0].listen.len(), 2);
    let text = file("", "", "").replace("listen = \"127.0.0.1:8080\"", "listen = []");
    assert_one_error(
        &text,
        "virtual_servers.web.listen",
        "at least one listen address",
    );
    let text = file("", "", "").replace("listen = \"127.0.0.1:8080\"\n", "");
    assert_one_error(&text, "virtual_servers.web.listen", "missing required key");
}

#[test]
fn at_least_one_virtual_server() {
    let text = "[pools.web]\nnodes = [{ address = \"10.0.0.1:80\" }]\n";
    assert_eq!(
        errors(text),
        [
            "t.toml: virtual_servers: at least one virtual server is required, such as [virtual_servers.web]"
        ]
    );
}

#[test]
fn pool_references_must_resolve() {
    let text = file("", "", "").replace("pool = \"web\"", "pool = \"wbe\"");
    assert_one_error(
        &text,
        "virtual_servers.web.pool",
        "unknown pool \"wbe\" (did you mean \"web\"?); defined pools: web",
    );
    let text = file(
        "[[virtual_servers.web.routes]]\npath_prefix = \"/a\"\npool = \"api\"",
        "",
        "",
    );
    assert_one_error(
        &text,
        "virtual_servers.web.routes[0].pool",
        "unknown pool \"api\"",
    );
    let text = file("", "", "").replace("pool = \"web\"\n", "");
    assert_one_error(&text, "virtual_servers.web.pool", "missing required key");
}

#[test]
fn pools_need_nodes() {
    let text = file("", "", "[pools.empty]\n");
    assert_one_error(&text, "pools.empty.nodes", "a pool needs at least one node");
    let text = file("", "", "[pools.empty]\nnodes = []\n");
    assert_one_error(&text, "pools.empty.nodes", "a pool needs at least one node");
}

#[test]
fn node_rules() {
    let pool = |nodes: &str| {
        format!(
            "[virtual_servers.web]\nlisten = \"127.0.0.1:8080\"\npool = \"web\"\n\
             [pools.web]\nnodes = [{nodes}]\n"
        )
    };
    assert_one_error(
        &pool("{ address = \"10.0.0.1:80\", weight = 0 }"),
        "pools.web.nodes[0].weight",
        "must be between 1 and 10000",
    );
    assert_one_error(
        &pool("{ weight = 2 }"),
        "pools.web.nodes[0].address",
        "missing required key",
    );
    assert_one_error(
        &pool("{ address = \"10.0.0.1:0\" }"),
        "pools.web.nodes[0].address",
        "port must not be 0",
    );
    assert_one_error(
        &pool("{ address = \"0.0.0.0:80\" }"),
        "pools.web.nodes[0].address",
        "not an address a node can be reached at",
    );
    assert_one_error(
        &pool("{ address = \"10.0.0.1:80\" }, { address = \"10.0.0.1:80\" }"),
        "pools.web.nodes[1].address",
        "duplicate node: nodes[0] has the same address",
    );
    assert_one_error(
        &pool("{ address = \"back_end!.local:80\" }"),
        "pools.web.nodes[0].address",
        "invalid host name in \"back_end!.local:80\"",
    );
    assert_one_error(
        &pool("{ address = \"10.0.0.300:80\" }"),
        "pools.web.nodes[0].address",
        "is neither an IP address nor a host name",
    );
    assert_one_error(
        &pool("{ address = \"db.local:http\" }"),
        "pools.web.nodes[0].address",
        "invalid port \"http\"",
    );
    assert_one_error(
        &pool("{ address = \"db.local:80\" }, { address = \"DB.local.:80\" }"),
        "pools.web.nodes[1].address",
        "duplicate node: nodes[0] has the same name and port",
    );
    let config = valid(&pool("{ address = \"10.0.0.1:80\", weight = 5 }"));
    assert_eq!(config.pools[0].nodes[0].weight.get(), 5);
}

#[test]
fn nodes_given_by_name_are_kept_apart_with_their_resolver_settings() {
    let text = "[virtual_servers.web]\nlisten = \"127.0.0.1:8080\"\npool = \"web\"\n\
                [pools.web]\nnodes = [{ address = \"10.0.0.1:80\" }, \
                { address = \"Api.Internal.:8080\", weight = 3 }]\n\
                [pools.web.dns]\nservers = [\"127.0.0.1:5353\", \"10.0.0.53\"]\n\
                min_ttl = \"2s\"\nmax_ttl = \"1m\"\nfamilies = \"ipv4\"\n";
    let config = valid(text);
    let web = &config.pools[0];
    assert_eq!(web.nodes.len(), 1);
    assert_eq!(web.names.len(), 1);
    assert_eq!(web.names[0].label(), "api.internal:8080");
    assert_eq!(web.names[0].weight.get(), 3);
    assert_eq!(web.names[0].key.to_string(), "pools.web.nodes[1].address");
    assert!(web.names[0].line.is_some(), "the line is located");
    assert_eq!(
        web.dns.servers,
        vec![
            "127.0.0.1:5353".parse().unwrap(),
            "10.0.0.53:53".parse().unwrap()
        ]
    );
    assert_eq!(web.dns.min_ttl, Duration::from_secs(2));
    assert_eq!(web.dns.families, AddressFamilies::Ipv4);
    let resolved = [
        "10.0.0.1:8080".parse().unwrap(),
        "10.0.0.1:80".parse().unwrap(),
    ];
    let expanded = web.with_resolved(|_| &resolved[..]);
    let addresses: Vec<String> = expanded
        .nodes
        .iter()
        .map(|n| n.address.to_string())
        .collect();
    assert_eq!(
        addresses,
        ["10.0.0.1:80", "10.0.0.1:8080"],
        "no address twice"
    );
    assert_eq!(expanded.nodes[1].name.as_deref(), Some("api.internal:8080"));
    assert_eq!(expanded.nodes[1].weight.get(), 3);

    let bad = text.replace("max_ttl = \"1m\"", "max_ttl = \"1s\"");
    assert_one_error(
        &bad,
        "pools.web.dns.max_ttl",
        "must not be shorter than min_ttl",
    );
}

#[test]
fn a_node_given_as_a_service_takes_its_ports_from_srv_records() {
    let with = |node: &str| {
        format!(
            "[virtual_servers.web]\nlisten = \"127.0.0.1:8080\"\npool = \"web\"\n\
             [pools.web]\nnodes = [{node}]\n"
        )
    };
    let config = valid(&with("{ srv = \"_HTTP._tcp.Api.Internal.\", weight = 2 }"));
    let named = &config.pools[0].names[0];
    assert!(named.srv);
    assert_eq!(named.label(), "srv:_http._tcp.api.internal");
    assert_eq!(named.weight.get(), 2);
    assert_eq!(named.key.to_string(), "pools.web.nodes[0].srv");
    assert_one_error(
        &with("{ srv = \"_http._tcp.a\", address = \"10.0.0.1:80\" }"),
        "pools.web.nodes[0].srv",
        "either address or srv",
    );
    for bad in [
        "api.internal",
        "_http.api",
        "_http._tcp.bad name",
        "_http._tcp.x:80",
    ] {
        assert_one_error(
            &with(&format!("{{ srv = \"{bad}\" }}")),
            "pools.web.nodes[0].srv",
            "invalid service name",
        );
    }
    assert_one_error(
        &with("{ srv = \"_a._tcp.x\" }, { srv = \"_A._tcp.x.\" }"),
        "pools.web.nodes[1].srv",
        "duplicate node",
    );
}

#[test]
fn a_node_must_not_be_the_virtual_server_that_uses_it() {
    let text = file("", "", "").replace("127.0.0.1:8081", "127.0.0.1:8080");
    assert_one_error(
        &text,
        "pools.web.nodes[0].address",
        "is a listener of virtual server \"web\", which uses this pool: requests would loop",
    );
    let text = file("", "", "").replace("listen = \"127.0.0.1:8080\"", "listen = \"0.0.0.0:8081\"");
    assert_one_error(&text, "pools.web.nodes[0].address", "requests would loop");
    // An IPv4-mapped node address is its IPv4 one.
    let text = file("", "", "").replace("127.0.0.1:8081", "[::ffff:127.0.0.1]:8080");
    assert_one_error(&text, "pools.web.nodes[0].address", "requests would loop");
    let text = file("", "", "")
        .replace("listen = \"127.0.0.1:8080\"", "listen = \"[::]:8081\"")
        .replace("127.0.0.1:8081", "[::1]:8081");
    assert_one_error(&text, "pools.web.nodes[0].address", "requests would loop");
    // [::] is bound IPv6-only: an IPv4 node on its port is another socket, and
    // 0.0.0.0 does not take [::1].
    let text = file("", "", "").replace("listen = \"127.0.0.1:8080\"", "listen = \"[::]:8081\"");
    valid(&text);
    let text = file("", "", "")
        .replace("listen = \"127.0.0.1:8080\"", "listen = \"0.0.0.0:8081\"")
        .replace("127.0.0.1:8081", "[::1]:8081");
    valid(&text);
    // A listener on an IPv4-mapped address could never be bound.
    let text = file("", "", "").replace(
        "listen = \"127.0.0.1:8080\"",
        "listen = \"[::ffff:127.0.0.1]:8080\"",
    );
    assert_one_error(&text, "virtual_servers.web.listen", "write 127.0.0.1:8080");
}

#[test]
fn listeners_must_not_share_an_address() {
    let text = file("", "", "[admin]\nlisten = \"127.0.0.1:8080\"\n");
    assert_one_error(
        &text,
        "virtual_servers.web.listen",
        "address 127.0.0.1:8080 is already used by admin.listen",
    );
    let text = file(
        "",
        "",
        "[[origins]]\nname = \"o\"\nlisten = \"0.0.0.0:8080\"\n",
    );
    assert_one_error(
        &text,
        "origins[0].listen",
        "address 0.0.0.0:8080 overlaps 127.0.0.1:8080 of virtual_servers.web.listen",
    );
    let text = file(
        "",
        "",
        "[virtual_servers.api]\nlisten = [\"127.0.0.1:9\", \"127.0.0.1:8080\"]\npool = \"web\"\n",
    );
    assert_one_error(
        &text,
        "virtual_servers.api.listen[1]",
        "already used by virtual_servers.web.listen",
    );
    // Port 0 asks the system for a free port, so several may share it.
    let text = file(
        "",
        "",
        "[virtual_servers.a]\nlisten = \"127.0.0.1:0\"\npool = \"web\"\n\
                             [virtual_servers.b]\nlisten = \"127.0.0.1:0\"\npool = \"web\"\n",
    );
    valid(&text);
}

#[test]
fn names_must_be_sane() {
    let text = file(
        "",
        "",
        "[virtual_servers.\"my server\"]\nlisten = \"127.0.0.1:1\"\npool = \"web\"\n",
    );
    assert_one_error(
        &text,
        "virtual_servers.\"my server\"",
        "invalid name \"my server\"",
    );
    let text = file(
        "",
        "",
        "[pools.\"\"]\nnodes = [{ address = \"10.0.0.1:80\" }]\n",
    );
    assert_one_error(&text, "pools.\"\"", "invalid name \"\"");
}

#[test]
fn routes() {
    let route = |body: &str| {
        file(
            &format!("[[virtual_servers.web.routes]]\n{body}\npool = \"web\""),
            "",
            "",
        )
    };
    let config = valid(&route("host = \"API.Example.com\"\npath_prefix = \"/v1/\""));
    assert_eq!(
        config.virtual_servers[0].routes,
        vec![Route {
            host: Some("api.example.com".into()),
            path_prefix: Some("/v1/".into()),
            pool: PoolId(0),
            content: Default::default(),
        }]
    );
    valid(&route("host = \"*.example.com\""));
    assert_one_error(
        &route("path_prefix = \"v1/\""),
        "virtual_servers.web.routes[0].path_prefix",
        "must start with \"/\"",
    );
    // Routes match the normalised path: a prefix that is not normal could never match.
    for prefix in ["/a/../b/", "//x", "/%61dmin", "/caf%c3%a9", "/a?b"] {
        assert_one_error(
            &route(&format!("path_prefix = \"{prefix}\"")),
            "virtual_servers.web.routes[0].path_prefix",
            "can never match",
        );
    }
    valid(&route("path_prefix = \"/.\""));
    assert_one_error(
        &route("host = \"example.com:8080\""),
        "virtual_servers.web.routes[0].host",
        "leave out the port",
    );
    assert_one_error(
        &route("host = \"::1\""),
        "virtual_servers.web.routes[0].host",
        "write an IPv6 address in brackets, like \"[::1]\"",
    );
    assert_one_error(
        &route(""),
        "virtual_servers.web.routes[0]",
        "a route needs host, path_prefix or both",
    );
    let twice = file(
        "[[virtual_servers.web.routes]]\npath_prefix = \"/a\"\npool = \"web\"\n\
         [[virtual_servers.web.routes]]\npath_prefix = \"/a\"\npool = \"web\"",
        "",
        "",
    );
    assert_one_error(
        &twice,
        "virtual_servers.web.routes[1]",
        "can never match: routes[0]",
    );
}

#[test]
fn durations_parse_and_are_non_zero_where_needed() {
    assert_one_error(
        &file("[virtual_servers.web.timeouts]\nidle = \"soon\"", "", ""),
        "virtual_servers.web.timeouts.idle",
        "invalid duration \"soon\"",
    );
    assert_one_error(
        &file(
            "[virtual_servers.web.timeouts]\nheader_read = \"0s\"",
            "",
            "",
        ),
        "virtual_servers.web.timeouts.header_read",
        "must be longer than zero",
    );
    assert_one_error(
        &file("", "[pools.web.timeouts]\nconnect = \"5M\"", ""),
        "pools.web.timeouts.connect",
        "is longer than a day",
    );
    assert_one_error(
        &file(
            "[virtual_servers.web.timeouts]\nheader_read = \"1ns\"",
            "",
            "",
        ),
        "virtual_servers.web.timeouts.header_read",
        "is shorter than a millisecond",
    );
    let config = valid(&file("", "", "[runtime]\ndrain_timeout = \"0s\""));
    assert_eq!(config.runtime.drain_timeout, Duration::ZERO);
}

#[test]
fn sizes_parse_and_respect_bounds() {
    let limits = |body: &str| file(&format!("[virtual_servers.web.limits]\n{body}"), "", "");
    assert_one_error(
        &limits("max_header_bytes = 512"),
        "virtual_servers.web.limits.max_header_bytes",
        "must be at least 1KiB",
    );
    assert_one_error(
        &limits("max_header_bytes = \"2MiB\""),
        "virtual_servers.web.limits.max_header_bytes",
        "must be at most 1MiB",
    );
    assert_one_error(
        &limits("max_body_bytes = 0"),
        "virtual_servers.web.limits.max_body_bytes",
        "must be at least 1B",
    );
    assert_one_error(
        &limits("request_buffer = \"16K\""),
        "virtual_servers.web.limits.request_buffer",
        "invalid size \"16K\"",
    );
    assert_one_error(
        &limits("response_buffer = -5"),
        "virtual_servers.web.limits.response_buffer",
        "must not be negative",
    );
    let config = valid(&limits(
        "max_body_bytes = \"1GB\"\nmax_requests_per_connection = 0",
    ));
    assert_eq!(
        config.virtual_servers[0].limits.max_body_bytes,
        1_000_000_000
    );
    assert_eq!(
        config.virtual_servers[0].limits.max_requests_per_connection,
        None
    );
}

#[test]
fn counts_respect_bounds() {
    assert_one_error(
        &file("", "", "[runtime]\nthreads = 0"),
        "runtime.threads",
        "must be between 1 and 1024",
    );
    assert_one_error(
        &file("backlog = 0", "", ""),
        "virtual_servers.web.backlog",
        "between 1 and 65535",
    );
    assert_one_error(
        &file("", "retries = 1000", ""),
        "pools.web.retries",
        "between 0 and 100",
    );
    assert_one_error(
        &file("", "[pools.web.connections]\nmax_connections = 0", ""),
        "pools.web.connections.max_connections",
        "between 1 and 1000000",
    );
    // A count past what weir holds names that bound, not the lower one it does not miss.
    assert_one_error(
        &file(
            "[virtual_servers.web.limits]\nmax_connections = 4294967296",
            "",
            "",
        ),
        "virtual_servers.web.limits.max_connections",
        "between 1 and 4294967295",
    );
    assert_one_error(
        &file(
            "[virtual_servers.web.limits]\nmax_requests_per_connection = -1",
            "",
            "",
        ),
        "virtual_servers.web.limits.max_requests_per_connection",
        "between 0 (no limit)",
    );
}

#[test]
fn choices() {
    assert_one_error(
        &file("", "algorithm = \"random\"", ""),
        "pools.web.algorithm",
        "invalid value \"random\"; expected one of \"round_robin\", \"weighted_round_robin\", \"least_connections\", \"perceptive\", \"consistent_hash\"",
    );
    for (name, algorithm) in [
        ("round_robin", Algorithm::RoundRobin),
        ("weighted_round_robin", Algorithm::WeightedRoundRobin),
        ("least_connections", Algorithm::LeastConnections),
        ("perceptive", Algorithm::Perceptive),
    ] {
        let config = valid(&file("", &format!("algorithm = \"{name}\""), ""));
        assert_eq!(config.pools[0].algorithm, algorithm);
    }
    assert_one_error(
        &file("", "", "[log]\nformat = \"xml\""),
        "log.format",
        "expected one of \"text\", \"json\"",
    );
    assert_one_error(
        &file("", "", "[log]\nlevel = \"weir=loud\""),
        "log.level",
        "invalid log level",
    );
}

/// An HTTPS virtual server `web` whose `[tls]` table holds `tls`.
fn https(tls: &str) -> String {
    file(
        &format!("protocol = \"https\"\n[virtual_servers.web.tls]\n{tls}"),
        "",
        "",
    )
}

const CERT: &str = "certificates = [{ cert = \"site.pem\", key = \"site.key\" }]";

#[test]
fn https_takes_defaults_and_records_where_files_were_named() {
    let config = valid(&https(CERT));
    let server = &config.virtual_servers[0];
    assert_eq!(server.protocol, Protocol::Https);
    let tls = server.tls.as_ref().unwrap();
    assert_eq!(tls.versions, vec![TlsVersion::Tls12, TlsVersion::Tls13]);
    assert_eq!(
        tls.groups,
        vec![KeyExchangeGroup::X25519, KeyExchangeGroup::Secp256r1]
    );
    assert_eq!(tls.alpn, vec!["http/1.1".to_owned(), "http/1.0".to_owned()]);
    assert!(tls.session_tickets);
    assert_eq!(tls.session_cache_size, 20_000);
    assert_eq!(tls.client_auth, ClientAuth::None);
    let CertificateSource::Files { cert, key, .. } = &tls.certificates[0] else {
        panic!("{:?}", tls.certificates[0]);
    };
    assert_eq!(cert.path, std::path::PathBuf::from("site.pem"));
    assert_eq!(
        cert.key.to_string(),
        "virtual_servers.web.tls.certificates[0].cert"
    );
    assert_eq!(cert.line, Some(6));
    assert_eq!(
        key.key.to_string(),
        "virtual_servers.web.tls.certificates[0].key"
    );
}

#[test]
fn an_ocsp_response_is_named_with_its_certificate() {
    let config = valid(&https(
        "certificates = [\n  { cert = \"site.pem\", key = \"site.key\", ocsp = \"site.ocsp\" },\n]",
    ));
    let tls = config.virtual_servers[0].tls.as_ref().unwrap();
    let CertificateSource::Files {
        ocsp: Some(ocsp), ..
    } = &tls.certificates[0]
    else {
        panic!("{:?}", tls.certificates[0]);
    };
    assert_eq!(ocsp.path, std::path::PathBuf::from("site.ocsp"));
    assert_eq!(
        ocsp.key.to_string(),
        "virtual_servers.web.tls.certificates[0].ocsp"
    );
    assert_eq!(ocsp.line, Some(7));
    assert_one_error(
        &https("certificates = [{ self_signed = [\"localhost\"], ocsp = \"site.ocsp\" }]"),
        "virtual_servers.web.tls.certificates[0].ocsp",
        "not a self-signed one",
    );
    assert_one_error(
        &https("certificates = [{ cert = \"site.pem\", key = \"site.key\", ocsp = \" \" }]"),
        "virtual_servers.web.tls.certificates[0].ocsp",
        "must name a file",
    );
}

/// Ticket lifetimes are whole seconds on the wire: a part of a second would be cut off.
#[test]
fn ticket_rotation_counts_whole_seconds() {
    let config = valid(&https(&format!("{CERT}\nticket_rotation = \"90s\"")));
    let tls = config.virtual_servers[0].tls.as_ref().unwrap();
    assert_eq!(tls.ticket_rotation, std::time::Duration::from_secs(90));
    for rotation in ["100ms", "1500ms"] {
        assert_one_error(
            &https(&format!("{CERT}\nticket_rotation = \"{rotation}\"")),
            "virtual_servers.web.tls.ticket_rotation",
            "whole seconds",
        );
    }
}

#[test]
fn https_and_the_tls_table_go_together() {
    assert_one_error(
        &file("protocol = \"https\"", "", ""),
        "virtual_servers.web.tls",
        "missing required table",
    );
    assert_one_error(
        &file(&format!("[virtual_servers.web.tls]\n{CERT}"), "", ""),
        "virtual_servers.web.tls",
        "needs protocol = \"https\"",
    );
    assert_one_error(
        &file("protocol = \"spdy\"", "", ""),
        "virtual_servers.web.protocol",
        "expected one of \"http\", \"https\", \"tcp\", \"tls\"",
    );
}

#[test]
fn certificate_entries() {
    assert_one_error(
        &https(""),
        "virtual_servers.web.tls.certificates",
        "missing required key",
    );
    assert_one_error(
        &https("certificates = []"),
        "virtual_servers.web.tls.certificates",
        "at least one",
    );
    assert_one_error(
        &https("certificates = [{ cert = \"a.pem\" }]"),
        "virtual_servers.web.tls.certificates[0].key",
        "private key",
    );
    assert_one_error(
        &https("certificates = [{ cert = \"a.pem\", key = \"a.key\", self_signed = [\"x\"] }]"),
        "virtual_servers.web.tls.certificates[0].self_signed",
        "not both",
    );
    assert_one_error(
        &https("certificates = [{ self_signed = [\"bad name!\"] }]"),
        "virtual_servers.web.tls.certificates[0].self_signed[0]",
        "not a valid DNS name",
    );
    let config = valid(&https(
        "certificates = [{ self_signed = [\"localhost\", \"127.0.0.1\"] }]",
    ));
    assert!(matches!(
        &config.virtual_servers[0].tls.as_ref().unwrap().certificates[0],
        CertificateSource::SelfSigned { names, .. } if names.len() == 2
    ));
}

#[test]
fn versions_suites_and_groups() {
    assert_one_error(
        &https(&format!("{CERT}\nversions = [\"1.1\", \"1.3\"]")),
        "virtual_servers.web.tls.versions[0]",
        "insecure",
    );
    let config = valid(&https(&format!("{CERT}\nversions = \"1.3\"")));
    assert_eq!(
        config.virtual_servers[0].tls.as_ref().unwrap().versions,
        vec![TlsVersion::Tls13]
    );
    assert_one_error(
        &https(&format!(
            "{CERT}\ncipher_suites = [\"TLS_RSA_WITH_RC4_128_SHA\"]"
        )),
        "virtual_servers.web.tls.cipher_suites[0]",
        "AEAD suites only",
    );
    assert_one_error(
        &https(&format!(
            "{CERT}\ncipher_suites = [\"TLS13_AES_128_GCM_SHA256\"]"
        )),
        "virtual_servers.web.tls.cipher_suites",
        "no suite for TLS 1.2",
    );
    valid(&https(&format!(
        "{CERT}\nversions = [\"1.3\"]\ncipher_suites = [\"TLS13_AES_128_GCM_SHA256\"]"
    )));
    // TLS 1.3's suites by their IANA names too.
    let iana = valid(&https(&format!(
        "{CERT}\nversions = [\"1.3\"]\ncipher_suites = [\"TLS_AES_256_GCM_SHA384\", \"tls_chacha20_poly1305_sha256\"]"
    )));
    assert_eq!(
        iana.virtual_servers[0].tls.as_ref().unwrap().cipher_suites,
        Some(vec![
            "TLS13_AES_256_GCM_SHA384".to_owned(),
            "TLS13_CHACHA20_POLY1305_SHA256".to_owned()
        ])
    );
    assert_one_error(
        &https(&format!("{CERT}\ngroups = [\"ffdhe2048\"]")),
        "virtual_servers.web.tls.groups[0]",
        "unknown key exchange group",
    );
    assert_one_error(
        &https(&format!("{CERT}\nalpn = [\"h3\"]")),
        "virtual_servers.web.tls.alpn[0]",
        "is not served",
    );
}

#[test]
fn client_certificate_rules() {
    assert_one_error(
        &https(&format!("{CERT}\nclient_certificates = \"required\"")),
        "virtual_servers.web.tls.client_ca",
        "missing required key",
    );
    assert_one_error(
        &https(&format!("{CERT}\nclient_ca = \"ca.pem\"")),
        "virtual_servers.web.tls.client_ca",
        "has no effect",
    );
    assert_one_error(
        &https(&format!(
            "{CERT}\nclient_certificates = \"maybe\"\nclient_ca = \"ca.pem\""
        )),
        "virtual_servers.web.tls.client_certificates",
        "expected one of",
    );
    assert_one_error(
        &https(&format!("{CERT}\nclient_subject_header = \"X-Subject\"")),
        "virtual_servers.web.tls.client_subject_header",
        "needs client_certificates",
    );
    assert_one_error(
        &https(&format!("{CERT}\nclient_crl = \"clients.crl\"")),
        "virtual_servers.web.tls.client_crl",
        "has no effect",
    );
    // A field that frames the request, or that weir writes itself, would be sent twice.
    // So would one that CGI, WSGI and PHP read as such a field (`_` for `-`).
    for name in [
        "Content-Length",
        "transfer-encoding",
        "Host",
        "X-Forwarded-For",
        "Via",
        "X_Forwarded_For",
        "content_length",
    ] {
        assert_one_error(
            &https(&format!(
                "{CERT}\nclient_certificates = \"optional\"\nclient_ca = \"ca.pem\"\nclient_subject_header = \"{name}\""
            )),
            "virtual_servers.web.tls.client_subject_header",
            "writes itself",
        );
    }
    // The request id's field: a client's id would stand in for the verified subject.
    let subject = |name: &str| {
        format!(
            "{CERT}\nclient_certificates = \"optional\"\nclient_ca = \"ca.pem\"\nclient_subject_header = \"{name}\""
        )
    };
    assert_one_error(
        &https(&subject("x-request_id")),
        "virtual_servers.web.tls.client_subject_header",
        "request id header",
    );
    assert_one_error(
        &https(&format!(
            "{}\n[virtual_servers.web.request_id]\nheader = \"X-Trace\"",
            subject("X-Trace")
        )),
        "virtual_servers.web.tls.client_subject_header",
        "request id header",
    );
    valid(&https(&format!(
        "{}\n[virtual_servers.web.request_id]\nenabled = false",
        subject("X-Request-Id")
    )));
    // The request id's own field is held to the same names: a client's id would
    // otherwise reach a CGI node as X-Forwarded-For.
    assert_one_error(
        &https(&format!(
            "{CERT}\n[virtual_servers.web.request_id]\nheader = \"X_Forwarded_For\""
        )),
        "virtual_servers.web.request_id.header",
        "writes itself",
    );
    let config = valid(&https(&subject("X-Subject")));
    let tls = config.virtual_servers[0].tls.as_ref().unwrap();
    assert!(matches!(tls.client_auth, ClientAuth::Optional { .. }));
    assert_eq!(tls.client_subject_header.as_deref(), Some("X-Subject"));
}

#[test]
fn response_headers() {
    let config = valid(&file(
        "[virtual_servers.web.response_headers]\nStrict-Transport-Security = \"max-age=60\"\nX-A = \"b\"",
        "",
        "",
    ));
    assert_eq!(
        config.virtual_servers[0].response_headers,
        vec![
            (
                "Strict-Transport-Security".to_owned(),
                "max-age=60".to_owned()
            ),
            ("X-A".to_owned(), "b".to_owned())
        ]
    );
    assert_one_error(
        &file(
            "[virtual_servers.web.response_headers]\nX-Test = \"1\"\nx-test = \"2\"",
            "",
            "",
        ),
        "virtual_servers.web.response_headers.x-test",
        "\"X-Test\" is set already",
    );
    assert_one_error(
        &file(
            "[virtual_servers.web.response_headers]\nContent-Length = \"5\"",
            "",
            "",
        ),
        "virtual_servers.web.response_headers.Content-Length",
        "managed by weir",
    );
    assert_one_error(
        &file(
            "[virtual_servers.web.response_headers]\n\"Bad Name\" = \"5\"",
            "",
            "",
        ),
        "virtual_servers.web.response_headers.\"Bad Name\"",
        "not a valid header name",
    );
    assert_one_error(
        &file(
            "[virtual_servers.web.response_headers]\nX-A = \"a\\r\\nB: c\"",
            "",
            "",
        ),
        "virtual_servers.web.response_headers.X-A",
        "control characters",
    );
}

#[test]
fn upstream_tls_rules() {
    let config = valid(&file(
        "",
        "[pools.web.tls]\nserver_name = \"api.internal\"",
        "",
    ));
    let tls = config.pools[0].tls.as_ref().unwrap();
    assert!(tls.verify);
    assert!(tls.session_resumption);
    assert_eq!(tls.server_name.as_deref(), Some("api.internal"));
    assert_one_error(
        &file("", "[pools.web.tls]\nverify = false\nca = \"ca.pem\"", ""),
        "pools.web.tls.ca",
        "no effect",
    );
    assert_one_error(
        &file("", "[pools.web.tls]\ncertificate = \"c.pem\"", ""),
        "pools.web.tls.key",
        "missing required key",
    );
    assert_one_error(
        &file("", "[pools.web.tls]\nserver_name = \"bad_name\"", ""),
        "pools.web.tls.server_name",
        "not a valid DNS name",
    );
}

#[test]
fn health_monitor_rules() {
    let health = |body: &str| file("", &format!("[pools.web.health]\n{body}"), "");
    let config = valid(&health("type = \"tcp\""));
    let monitor = config.pools[0].health.clone().unwrap();
    assert_eq!(monitor.check, HealthCheckKind::Tcp);
    assert_eq!((monitor.rise.get(), monitor.fall.get()), (2, 3));
    let config = valid(&health("type = \"http\""));
    assert_eq!(
        config.pools[0].health.as_ref().unwrap().check,
        HealthCheckKind::Http {
            method: "GET".into(),
            path: "/".into(),
            host: None,
            expect_status: vec![(200, 399)]
        }
    );
    assert_one_error(
        &health("interval = \"5s\""),
        "pools.web.health.type",
        "missing required key",
    );
    assert_one_error(
        &health("type = \"udp\""),
        "pools.web.health.type",
        "expected \"http\" or \"tcp\"",
    );
    assert_one_error(
        &health("type = \"tcp\"\npath = \"/healthz\""),
        "pools.web.health.path",
        "applies only to HTTP checks",
    );
    assert_one_error(
        &health("type = \"http\"\npath = \"healthz\""),
        "pools.web.health.path",
        "must start with \"/\"",
    );
    assert_one_error(
        &health("type = \"http\"\nmethod = \"get\""),
        "pools.web.health.method",
        "write \"GET\"",
    );
    assert_one_error(
        &health("type = \"tcp\"\ninterval = \"2s\"\ntimeout = \"2s\""),
        "pools.web.health.timeout",
        "must be shorter than interval (2s)",
    );
    assert_one_error(
        &health("type = \"tcp\"\nrise = 0"),
        "pools.web.health.rise",
        "between 1 and 100",
    );
    assert_one_error(
        &health("type = \"tcp\"\nfall = 0"),
        "pools.web.health.fall",
        "between 1 and 100",
    );
}

#[test]
fn expected_statuses() {
    let expect = |list: &str| {
        file(
            "",
            &format!("[pools.web.health]\ntype = \"http\"\nexpect_status = {list}"),
            "",
        )
    };
    let statuses = |list: &str| match &valid(&expect(list)).pools[0].health.as_ref().unwrap().check
    {
        HealthCheckKind::Http { expect_status, .. } => expect_status.clone(),
        HealthCheckKind::Tcp => unreachable!("an http check was configured"),
    };
    assert_eq!(statuses("200"), [(200, 200)]);
    assert_eq!(statuses("\"2xx\""), [(200, 299)]);
    assert_eq!(statuses("[204, \"300-302\"]"), [(204, 204), (300, 302)]);
    assert_one_error(
        &expect("[200, 600]"),
        "pools.web.health.expect_status[1]",
        "statuses are between 100 and 599",
    );
    assert_one_error(
        &expect("\"399-200\""),
        "pools.web.health.expect_status",
        "the low end is above the high end",
    );
    assert_one_error(
        &expect("[]"),
        "pools.web.health.expect_status",
        "at least one status",
    );
    assert_one_error(
        &expect("[\"ok\"]"),
        "pools.web.health.expect_status[0]",
        "invalid status \"ok\"",
    );
}

#[test]
fn passive_health_rules() {
    let passive = |body: &str| file("", &format!("[pools.web.passive_health]\n{body}"), "");
    assert_one_error(
        &passive("base_ejection = \"10m\"\nmax_ejection = \"1m\""),
        "pools.web.passive_health.max_ejection",
        "must be at least base_ejection (10m)",
    );
    assert_one_error(
        &passive("base_ejection = \"0s\""),
        "pools.web.passive_health.base_ejection",
        "must be longer than zero",
    );
    assert_eq!(
        valid(&passive("consecutive_failures = 0")).pools[0]
            .passive_health
            .consecutive_failures,
        0
    );
}

#[test]
fn origin_rules() {
    let origins = |body: &str| file("", "", body);
    let config = valid(&origins(
        "[[origins]]\nname = \"o\"\nlisten = \"127.0.0.1:8081\"\nmax_connections = 0",
    ));
    assert_eq!(config.origins[0].max_connections, None);
    assert!(config.origins[0].keep_alive);
    assert_one_error(
        &origins("[[origins]]\nlisten = \"127.0.0.1:1\""),
        "origins[0].name",
        "missing required key",
    );
    assert_one_error(
        &origins("[[origins]]\nname = \"o\""),
        "origins[0].listen",
        "missing required key",
    );
    assert_one_error(
        &origins(
            "[[origins]]\nname = \"o\"\nlisten = \"127.0.0.1:1\"\n[[origins]]\nname = \"o\"\nlisten = \"127.0.0.1:2\"",
        ),
        "origins[1].name",
        "duplicate origin name: origins[0] is also \"o\"",
    );
}

#[test]
fn every_problem_is_reported_in_file_order() {
    let text = "\
[runtime]
threads = 0
[virtual_servers.web]
listen = \"127.0.0.1:8080\"
pool = \"missing\"
[pools.web]
algorithm = \"fastest\"
nodes = []
";
    assert_eq!(
        errors(text),
        [
            "t.toml:2: runtime.threads: must be between 1 and 1024",
            "t.toml:5: virtual_servers.web.pool: unknown pool \"missing\"; defined pools: web",
            "t.toml:7: pools.web.algorithm: invalid value \"fastest\"; expected one of \"round_robin\", \"weighted_round_robin\", \"least_connections\", \"perceptive\", \"consistent_hash\"",
            "t.toml:8: pools.web.nodes: a pool needs at least one node, like nodes = [{ address = \"127.0.0.1:8081\" }]",
        ]
    );
}

#[test]
fn admin_off_loopback_needs_a_token_file() {
    assert_one_error(
        &file("", "", "[admin]\nlisten = \"0.0.0.0:9090\"\n"),
        "admin.listen",
        "0.0.0.0:9090 is not a loopback address: the admin API can change the running \
         configuration, so set admin.token_file",
    );
    let config = valid(&file(
        "",
        "",
        "[admin]\nlisten = \"0.0.0.0:9090\"\ntoken_file = \"admin.token\"\n",
    ));
    let admin = config.admin.expect("admin set");
    assert_eq!(admin.token_file.map(|f| f.path), Some("admin.token".into()));
    // Loopback needs none.
    assert_eq!(
        valid(&file("", "", "[admin]\nlisten = \"127.0.0.1:9090\"\n"))
            .admin
            .and_then(|a| a.token_file),
        None
    );
}

#[test]
fn node_states_and_access_log_keys() {
    let config = valid(
        "[virtual_servers.web]\nlisten = \"127.0.0.1:8080\"\npool = \"web\"\n\
         [pools.web]\nnodes = [{ address = \"127.0.0.1:8081\", state = \"draining\" }, \
         { address = \"127.0.0.1:8082\" }]\n\
         [log]\naccess_log_format = \"json\"\naccess_log_file = \"/var/log/weir.log\"\n",
    );
    let states: Vec<NodeMode> = config.pools[0].nodes.iter().map(|n| n.state).collect();
    assert_eq!(states, vec![NodeMode::Draining, NodeMode::Active]);
    assert_eq!(config.access_log.format, AccessLogFormat::Json);
    assert_eq!(
        config.access_log.file.map(|f| f.path),
        Some("/var/log/weir.log".into())
    );
    assert_one_error(
        &file("", "", "").replace("8081\" }", "8081\", state = \"off\" }"),
        "pools.web.nodes[0].state",
        "invalid value \"off\"; expected one of \"active\", \"draining\", \"disabled\"",
    );
    assert_one_error(
        &file("", "", "[runtime]\nupgrade_socket = \"weir.sock\"\n"),
        "runtime.upgrade_socket",
        "must be an absolute path",
    );
    let long = format!("/run/{}/upgrade.sock", "w".repeat(100));
    assert_one_error(
        &file("", "", &format!("[runtime]\nupgrade_socket = \"{long}\"\n")),
        "runtime.upgrade_socket",
        "is longer than a Unix socket path may be (107 bytes)",
    );
}
