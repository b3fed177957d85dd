//! Rule evaluation per request: no rules; 100 host-and-path rules with one
//! header rewrite; 1,000 regex routes. Plus a rate-limit check over 10,000
//! keys. Each figure is the CPU time of one call on one core.

use std::hint::black_box;
use std::net::IpAddr;
use std::time::Instant;

use criterion::{Criterion, criterion_group, criterion_main};
use weir_http::{Limits, Parsed, RequestHead, parse_request};
use weir_rules::{Decision, Facts, RuleSet, TrafficLimits, request_id};

const REQUEST: &[u8] = b"GET /app/users/12345?page=2 HTTP/1.1\r\nHost: www.site-77.example\r\n\
User-Agent: wrk/4.1.0\r\nAccept: */*\r\nAccept-Encoding: gzip\r\nCookie: session=abc123\r\n\r\n";

fn config(rules: &str) -> weir_config::Config {
    let text = format!(
        "[virtual_servers.web]\nlisten = \"127.0.0.1:8080\"\npool = \"web\"\n{rules}\n\
         [pools.web]\nnodes = [{{ address = \"127.0.0.1:8081\" }}]\n\
         [pools.api]\nnodes = [{{ address = \"127.0.0.1:8082\" }}]\n"
    );
    weir_config::parse_str(&text, "bench.toml").unwrap_or_else(|error| panic!("{error}"))
}

/// 99 rules that do not match this request, then one that does and sets a header.
fn hundred_host_path_rules() -> String {
    let mut text = String::new();
    for index in 0..100 {
        let site = if index == 77 { 77 } else { 1000 + index };
        text.push_str(&format!(
            "[[virtual_servers.web.rules]]\nmatch.host = \"www.site-{site}.example\"\n\
             match.path_prefix = \"/app/\"\npool = \"api\"\n\
             request_headers = {{ set = {{ X-Site = \"{index}\" }} }}\n"
        ));
    }
    text
}

/// 1,000 regex routes; the request matches number 900. `anchor` "^" gives
/// each a literal prefix (ruled out by a byte comparison); "" makes them all
/// go through the `RegexSet`.
fn thousand_regex_routes(anchor: &str) -> String {
    let mut text = String::new();
    for index in 0..1000 {
        let prefix = if index == 900 {
            "app".to_owned()
        } else {
            format!("app{index}")
        };
        text.push_str(&format!(
            "[[virtual_servers.web.rules]]\nmatch.path_regex = \"{anchor}/{prefix}/users/([0-9]+)$\"\n\
             pool = \"api\"\n"
        ));
    }
    text
}

fn head() -> RequestHead {
    match parse_request(REQUEST, &Limits::default()) {
        Ok(Parsed::Complete(head, _)) => head,
        other => panic!("bench request does not parse: {other:?}"),
    }
}

fn evaluations(c: &mut Criterion) {
    let head = head();
    let facts = Facts::plain(IpAddr::from([192, 0, 2, 1]));
    let mut group = c.benchmark_group("rules");
    for (name, rules) in [
        ("none", String::new()),
        ("100_host_path_1_header", hundred_host_path_rules()),
        ("1000_regex_routes", thousand_regex_routes("^")),
        ("1000_regex_routes_as_set", thousand_regex_routes("")),
    ] {
        let config = config(&rules);
        let set = RuleSet::new(&config.virtual_servers[0].traffic).unwrap();
        let mut decision = Decision::new();
        set.evaluate_into(&head, &facts, &mut decision);
        assert!(
            rules.is_empty() || decision.rule.is_some(),
            "{name}: no rule matched"
        );
        group.bench_function(name, |b| {
            b.iter(|| {
                set.evaluate_into(black_box(&head), black_box(&facts), &mut decision);
                black_box(&decision);
            })
        });
    }
    group.finish();
}

fn request_ids(c: &mut Criterion) {
    let head = head();
    let settings = weir_config::RequestIdSettings::default();
    c.bench_function("request_id/generate", |b| {
        b.iter(|| black_box(request_id(black_box(&settings), black_box(&head))))
    });
}

fn rate_limits(c: &mut Criterion) {
    let config = config(
        "[[virtual_servers.web.rules]]\nrate_limit = \"r\"\n\
         [virtual_servers.web.rate_limits.r]\nrate = 1000000\nmax_keys = 20000\n",
    );
    let traffic = &config.virtual_servers[0].traffic;
    let set = RuleSet::new(traffic).unwrap();
    let limits = TrafficLimits::new(traffic, None, Instant::now());
    let head = head();
    let clients: Vec<IpAddr> = (0..10_000u32)
        .map(|i| IpAddr::from(i.to_be_bytes()))
        .collect();
    let decision = set.evaluate(&head, &Facts::plain(clients[0]));
    let mut next = 0;
    c.bench_function("rate_limit/check_10000_keys", |b| {
        b.iter(|| {
            next = (next + 7919) % clients.len();
            let result = limits.check_rates(&decision, &head, clients[next], Instant::now());
            black_box(result.is_ok())
        })
    });
}

criterion_group!(benches, evaluations, request_ids, rate_limits);
criterion_main!(benches);
