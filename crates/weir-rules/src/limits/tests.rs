//! The limits a virtual server's rules name, as the pipeline uses them.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use super::*;
use crate::RuleSet;
use crate::facts::Facts;
use crate::test_support::head;

fn traffic(extra: &str) -> weir_config::Traffic {
    let text = format!(
        "[virtual_servers.web]\nlisten = \"127.0.0.1:8080\"\npool = \"web\"\n{extra}\n\
         [pools.web]\nnodes = [{{ address = \"127.0.0.1:8081\" }}]\n"
    );
    let mut config = weir_config::parse_str(&text, "t.toml").unwrap_or_else(|e| panic!("{e}"));
    config.virtual_servers.remove(0).traffic
}

const RULES: &str = "\
[[virtual_servers.web.rules]]
match.path_prefix = \"/api/\"
rate_limit = [\"per-client\", \"per-key\"]
concurrency_limit = \"api\"
[virtual_servers.web.rate_limits.per-client]
rate = 2
burst = 2
[virtual_servers.web.rate_limits.per-key]
key = \"header:X-Api-Key\"
rate = 3
per = \"1m\"
status = 503
[virtual_servers.web.concurrency_limits.api]
max = 2
retry_after = \"3s\"
[virtual_servers.web.client_connections]
max = 2
retry_after = \"5s\"
";

#[test]
fn rates_answer_429_with_retry_after_and_recover() {
    let traffic = traffic(RULES);
    let rules = RuleSet::new(&traffic).unwrap();
    let start = Instant::now();
    let limits = TrafficLimits::new(&traffic, None, start);
    let client: IpAddr = "192.0.2.1".parse().unwrap();
    let request = head("GET /api/x HTTP/1.1\r\nHost: a\r\n\r\n");
    let decision = rules.evaluate(&request, &Facts::plain(client));
    assert!(
        limits
            .check_rates(&decision, &request, client, start)
            .is_ok()
    );
    assert!(
        limits
            .check_rates(&decision, &request, client, start)
            .is_ok()
    );
    let refusal = limits
        .check_rates(&decision, &request, client, start)
        .unwrap_err();
    assert_eq!((refusal.status, refusal.retry_after_seconds()), (429, 1));
    // Other paths name no limit.
    let other = head("GET /x HTTP/1.1\r\nHost: a\r\n\r\n");
    let free = rules.evaluate(&other, &Facts::plain(client));
    assert!(limits.check_rates(&free, &other, client, start).is_ok());
    // Half a second later one more request fits (2 per second).
    let later = start + Duration::from_millis(500);
    assert!(
        limits
            .check_rates(&decision, &request, client, later)
            .is_ok()
    );
}

#[test]
fn a_header_key_shared_across_clients() {
    let traffic = traffic(RULES);
    let rules = RuleSet::new(&traffic).unwrap();
    let start = Instant::now();
    let limits = TrafficLimits::new(&traffic, None, start);
    let request = head("GET /api/x HTTP/1.1\r\nHost: a\r\nX-Api-Key: k\r\n\r\n");
    for index in 0..3u8 {
        let client = IpAddr::from([192, 0, 2, index]);
        let decision = rules.evaluate(&request, &Facts::plain(client));
        assert!(
            limits
                .check_rates(&decision, &request, client, start)
                .is_ok()
        );
    }
    let client = IpAddr::from([192, 0, 2, 9]);
    let decision = rules.evaluate(&request, &Facts::plain(client));
    let refusal = limits
        .check_rates(&decision, &request, client, start)
        .unwrap_err();
    assert_eq!(refusal.status, 503);
    assert_eq!(
        refusal.retry_after_seconds(),
        20,
        "3 per minute: one every 20 s"
    );
}

#[test]
fn forwarded_client_addresses_are_limited_separately() {
    // Behind a trusted proxy every request comes from the proxy's address;
    // the limit must count the clients it reports.
    let traffic = traffic(&format!(
        "{RULES}[virtual_servers.web.client_address]\nheader = \"X-Forwarded-For\"\n\
         trusted_proxies = [\"10.0.0.0/8\"]\n"
    ));
    let rules = RuleSet::new(&traffic).unwrap();
    let start = Instant::now();
    let limits = TrafficLimits::new(&traffic, None, start);
    let proxy: IpAddr = "10.0.0.1".parse().unwrap();
    for client in ["203.0.113.1", "203.0.113.2"] {
        let request = head(&format!(
            "GET /api/x HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: {client}\r\n\r\n"
        ));
        let address = crate::client_address(&traffic.client_address, proxy, &request);
        assert_eq!(address, client.parse::<IpAddr>().unwrap());
        let decision = rules.evaluate(&request, &Facts::plain(address));
        for _ in 0..2 {
            assert!(
                limits
                    .check_rates(&decision, &request, address, start)
                    .is_ok()
            );
        }
        assert!(
            limits
                .check_rates(&decision, &request, address, start)
                .is_err()
        );
    }
}

#[test]
fn concurrency_answers_503_and_frees_slots() {
    let traffic = traffic(RULES);
    let rules = RuleSet::new(&traffic).unwrap();
    let limits = TrafficLimits::new(&traffic, None, Instant::now());
    let request = head("GET /api/x HTTP/1.1\r\nHost: a\r\n\r\n");
    let client: IpAddr = "192.0.2.1".parse().unwrap();
    let decision = rules.evaluate(&request, &Facts::plain(client));
    let acquire = || limits.acquire_concurrency(&decision, &request, client);
    let first = acquire().unwrap();
    let second = acquire().unwrap();
    assert_eq!(first.len(), 1);
    let refusal = acquire().unwrap_err();
    assert_eq!((refusal.status, refusal.retry_after_seconds()), (503, 3));
    drop(first);
    let third = acquire().unwrap();
    assert_eq!(limits.concurrency[0].in_progress(), 2);
    // Keyed by `route` (the default): another client shares the count.
    let other: IpAddr = "192.0.2.2".parse().unwrap();
    assert!(
        limits
            .acquire_concurrency(&decision, &request, other)
            .is_err()
    );
    drop((second, third));
    assert_eq!(limits.concurrency[0].in_progress(), 0);
}

/// `key = "client_address"`: each client has its own `max`, and a key's entry goes
/// with its last request.
#[test]
fn a_keyed_concurrency_limit_counts_each_key_apart() {
    let traffic = traffic(
        "[[virtual_servers.web.rules]]\nmatch.path_prefix = \"/\"\nconcurrency_limit = \"each\"\n\
         [virtual_servers.web.concurrency_limits.each]\nkey = \"client_address\"\nmax = 1",
    );
    let rules = RuleSet::new(&traffic).unwrap();
    let limits = TrafficLimits::new(&traffic, None, Instant::now());
    let request = head("GET /x HTTP/1.1\r\nHost: a\r\n\r\n");
    let (a, b): (IpAddr, IpAddr) = ("192.0.2.1".parse().unwrap(), "192.0.2.2".parse().unwrap());
    let decision = rules.evaluate(&request, &Facts::plain(a));
    let of_a = limits.acquire_concurrency(&decision, &request, a).unwrap();
    assert!(limits.acquire_concurrency(&decision, &request, a).is_err());
    // The same address written as IPv4-mapped IPv6 is the same client.
    let mapped: IpAddr = "::ffff:192.0.2.1".parse().unwrap();
    assert!(
        limits
            .acquire_concurrency(&decision, &request, mapped)
            .is_err()
    );
    let of_b = limits.acquire_concurrency(&decision, &request, b).unwrap();
    assert_eq!(limits.concurrency[0].in_progress(), 2);
    assert_eq!(limits.concurrency[0].keys(), 2);
    drop(of_a);
    assert_eq!(limits.concurrency[0].keys(), 1);
    assert!(limits.acquire_concurrency(&decision, &request, a).is_ok());
    drop(of_b);
    assert_eq!(limits.concurrency[0].keys(), 0);
}

/// A reload that changes a limit's numbers keeps what is in progress: the requests and
/// connections already counted count against the new `max`.
#[test]
fn a_reload_that_changes_a_limit_keeps_its_counts() {
    let before = traffic(RULES);
    let rules = RuleSet::new(&before).unwrap();
    let limits = TrafficLimits::new(&before, None, Instant::now());
    let request = head("GET /api/x HTTP/1.1\r\nHost: a\r\n\r\n");
    let client: IpAddr = "192.0.2.1".parse().unwrap();
    let decision = rules.evaluate(&request, &Facts::plain(client));
    let held = [
        limits
            .acquire_concurrency(&decision, &request, client)
            .unwrap(),
        limits
            .acquire_concurrency(&decision, &request, client)
            .unwrap(),
    ];
    let connections = [
        limits.admit_connection(client).unwrap(),
        limits.admit_connection(client).unwrap(),
    ];
    // Raised to 3: one more each, not three.
    let after = traffic(
        &RULES
            .replace(
                "max = 2\nretry_after = \"3s\"",
                "max = 3\nretry_after = \"4s\"",
            )
            .replace(
                "max = 2\nretry_after = \"5s\"",
                "max = 3\nretry_after = \"5s\"",
            ),
    );
    let reloaded = TrafficLimits::new(&after, Some(&limits), Instant::now());
    assert_eq!(reloaded.concurrency[0].config().max.get(), 3);
    assert_eq!(reloaded.concurrency[0].in_progress(), 2);
    let third = reloaded
        .acquire_concurrency(&decision, &request, client)
        .unwrap();
    let refusal = reloaded
        .acquire_concurrency(&decision, &request, client)
        .unwrap_err();
    assert_eq!(refusal.retry_after_seconds(), 4);
    let connection = reloaded.admit_connection(client).unwrap();
    assert!(reloaded.admit_connection(client).is_err());
    // The old generation's permits give their places back to the new counts.
    drop(held);
    drop(connections);
    assert_eq!(reloaded.concurrency[0].in_progress(), 1);
    assert!(
        reloaded
            .acquire_concurrency(&decision, &request, client)
            .is_ok()
    );
    assert!(reloaded.admit_connection(client).is_ok());
    drop((third, connection));
}

#[test]
fn connections_per_client_answer_503_and_recover() {
    let traffic = traffic(RULES);
    let limits = TrafficLimits::new(&traffic, None, Instant::now());
    let client: IpAddr = "192.0.2.1".parse().unwrap();
    let a = limits.admit_connection(client).unwrap();
    let b = limits
        .admit_connection("::ffff:192.0.2.1".parse().unwrap())
        .unwrap();
    let refusal = limits.admit_connection(client).unwrap_err();
    assert_eq!((refusal.status, refusal.retry_after_seconds()), (503, 5));
    assert!(
        limits
            .admit_connection("192.0.2.2".parse().unwrap())
            .is_ok()
    );
    drop(a);
    let c = limits.admit_connection(client).unwrap();
    let connections = limits.connections.as_ref().unwrap();
    assert_eq!(connections.open(client), 2);
    drop((b, c));
    assert_eq!(connections.open(client), 0);
    assert_eq!(connections.clients(), 0, "closed clients leave no entry");
}

/// Behind trusted proxies that report the client in a header, a proxy's connection carries
/// many clients: the connection limit counts only peers that are not such proxies.
#[test]
fn trusted_forwarders_are_not_held_to_the_connection_limit() {
    let traffic = traffic(&format!(
        "{RULES}[virtual_servers.web.client_address]\nheader = \"X-Forwarded-For\"\n\
         trusted_proxies = [\"10.0.0.0/8\"]\n"
    ));
    let limits = TrafficLimits::new(&traffic, None, Instant::now());
    let proxy: IpAddr = "10.0.0.1".parse().unwrap();
    let mapped: IpAddr = "::ffff:10.0.0.2".parse().unwrap();
    let held: Vec<_> = (0..10)
        .map(|_| limits.admit_connection(proxy).expect("a forwarder"))
        .chain((0..10).map(|_| limits.admit_connection(mapped).expect("a forwarder")))
        .collect();
    assert!(held.iter().all(Option::is_none), "not counted");
    // A peer outside the trusted networks is still limited (2 in RULES).
    let client: IpAddr = "192.0.2.1".parse().unwrap();
    let a = limits.admit_connection(client).unwrap();
    let b = limits.admit_connection(client).unwrap();
    assert!(limits.admit_connection(client).is_err());
    drop((a, b));
}

#[test]
fn unchanged_limiters_survive_a_reload() {
    let old_traffic = traffic(RULES);
    let start = Instant::now();
    let old = TrafficLimits::new(&old_traffic, None, start);
    let changed = traffic(&RULES.replace("rate = 2\n", "rate = 4\n"));
    let new = TrafficLimits::new(&changed, Some(&old), start);
    assert!(
        !Arc::ptr_eq(&old.rates[0], &new.rates[0]),
        "per-client changed"
    );
    assert!(Arc::ptr_eq(&old.rates[1], &new.rates[1]));
    assert!(Arc::ptr_eq(&old.concurrency[0], &new.concurrency[0]));
    assert!(Arc::ptr_eq(
        old.connections.as_ref().unwrap(),
        new.connections.as_ref().unwrap()
    ));
    assert!(
        TrafficLimits::new(&traffic(""), None, start)
            .admit_connection([127, 0, 0, 1].into())
            .unwrap()
            .is_none()
    );
}

/// A reload that raises a rate limit keeps what each key spent: the key that used its three
/// requests a minute gets the one more the new four allow, not four.
#[test]
fn a_reload_that_changes_a_rate_keeps_what_keys_spent() {
    let before = traffic(RULES);
    let rules = RuleSet::new(&before).unwrap();
    let start = Instant::now();
    let limits = TrafficLimits::new(&before, None, start);
    let request = head("GET /api/x HTTP/1.1\r\nHost: a\r\nX-Api-Key: k\r\n\r\n");
    let client: IpAddr = "192.0.2.1".parse().unwrap();
    // The rules name "per-key" second: index 1 of the virtual server's rate limits.
    assert_eq!(
        rules.evaluate(&request, &Facts::plain(client)).rate_limits,
        [0, 1]
    );
    let per_key = |limits: &TrafficLimits, millis: u64| {
        limits.check_rate(1, &request, client, start + Duration::from_millis(millis))
    };
    for _ in 0..3 {
        assert!(per_key(&limits, 0).is_ok());
    }
    assert!(per_key(&limits, 0).is_err());
    let after = traffic(&RULES.replace("rate = 3\nper = \"1m\"", "rate = 4\nper = \"1m\""));
    let reloaded = TrafficLimits::new(&after, Some(&limits), start);
    assert_eq!(reloaded.rates[1].config().burst.get(), 4);
    assert!(per_key(&reloaded, 10).is_ok());
    assert!(per_key(&reloaded, 10).is_err());
    // The limit that did not change is the same one, buckets and all.
    assert!(Arc::ptr_eq(&limits.rates[0], &reloaded.rates[0]));
}

/// A limit keyed on a query parameter or a cookie counts its value as applications read
/// it (percent-decoded: `%61lice` is `alice`), and a request that repeats it counts under
/// every value, so `?user=x&user=alice` cannot dodge `alice`'s limit (PHP reads the last).
#[test]
fn query_and_cookie_keys_are_decoded_and_every_repeated_value_counts() {
    const KEYED: &str = "\
[[virtual_servers.web.rules]]
match.path_prefix = \"/login\"
rate_limit = \"per-user\"
[[virtual_servers.web.rules]]
match.path_prefix = \"/c\"
rate_limit = \"per-session\"
[[virtual_servers.web.rules]]
match.path_prefix = \"/\"
concurrency_limit = \"per-user\"
[virtual_servers.web.rate_limits.per-user]
key = \"query:user\"
rate = 1
per = \"1m\"
[virtual_servers.web.rate_limits.per-session]
key = \"cookie:sid\"
rate = 1
per = \"1m\"
[virtual_servers.web.concurrency_limits.per-user]
key = \"query:user\"
max = 1
";
    let traffic = traffic(KEYED);
    let rules = RuleSet::new(&traffic).unwrap();
    let start = Instant::now();
    let limits = TrafficLimits::new(&traffic, None, start);
    let client: IpAddr = "192.0.2.1".parse().unwrap();
    let check = |line: &str| {
        let request = head(&format!("GET {line} HTTP/1.1\r\nHost: a\r\n\r\n"));
        let decision = rules.evaluate(&request, &Facts::plain(client));
        limits.check_rates(&decision, &request, client, start)
    };
    assert!(check("/login?user=alice").is_ok());
    for dodge in [
        "/login?user=%61lice",
        "/login?user=al%69ce",
        "/login?%75ser=alice",
        "/login?user=other&user=alice",
        "/login?user=alice&user=other2",
    ] {
        assert!(check(dodge).is_err(), "{dodge} escaped alice's limit");
    }
    // Another user still has its own allowance; one value twice is one key.
    assert!(check("/login?user=bob&user=bob").is_ok());
    let cookie = |value: &str| {
        let request = head(&format!(
            "GET /c HTTP/1.1\r\nHost: a\r\nCookie: sid={value}\r\n\r\n"
        ));
        let decision = rules.evaluate(&request, &Facts::plain(client));
        limits.check_rates(&decision, &request, client, start)
    };
    assert!(cookie("abc").is_ok());
    assert!(
        cookie("%61bc").is_err(),
        "an encoded cookie escaped the limit"
    );
    // Concurrency: a request holding alice's slot keeps out one that repeats her name,
    // and a refused request frees the slots it took.
    let request = head("GET /?user=alice HTTP/1.1\r\nHost: a\r\n\r\n");
    let decision = rules.evaluate(&request, &Facts::plain(client));
    let held = limits
        .acquire_concurrency(&decision, &request, client)
        .unwrap();
    let repeated = head("GET /?user=carol&user=alice HTTP/1.1\r\nHost: a\r\n\r\n");
    let decision = rules.evaluate(&repeated, &Facts::plain(client));
    assert!(
        limits
            .acquire_concurrency(&decision, &repeated, client)
            .is_err()
    );
    let carol = head("GET /?user=carol HTTP/1.1\r\nHost: a\r\n\r\n");
    let decision = rules.evaluate(&carol, &Facts::plain(client));
    assert!(
        limits
            .acquire_concurrency(&decision, &carol, client)
            .is_ok(),
        "the refused request kept carol's slot"
    );
    drop(held);
}

/// An IPv6 client is limited by its /64: one host holds a whole /64, and a new address
/// from it must not bring a new bucket or a new connection count. Another /64 is another
/// client.
#[test]
fn an_ipv6_client_is_limited_by_its_64() {
    let traffic = traffic(RULES);
    let rules = RuleSet::new(&traffic).unwrap();
    let start = Instant::now();
    let limits = TrafficLimits::new(&traffic, None, start);
    let address = |text: &str| text.parse::<IpAddr>().unwrap();
    let request = head("GET /api/x HTTP/1.1\r\nHost: a\r\n\r\n");
    let check = |client: IpAddr| {
        let decision = rules.evaluate(&request, &Facts::plain(client));
        limits.check_rates(&decision, &request, client, start)
    };
    assert!(check(address("2001:db8:1:2::1")).is_ok());
    assert!(check(address("2001:db8:1:2::2")).is_ok());
    let refusal = check(address("2001:db8:1:2:ffff::3")).unwrap_err();
    assert_eq!(refusal.status, 429);
    assert!(check(address("2001:db8:1:3::1")).is_ok());
    let a = limits.admit_connection(address("2001:db8:9:9::a")).unwrap();
    let b = limits.admit_connection(address("2001:db8:9:9::b")).unwrap();
    assert!(limits.admit_connection(address("2001:db8:9:9::c")).is_err());
    assert!(limits.admit_connection(address("2001:db8:9:8::c")).is_ok());
    drop((a, b));
}
