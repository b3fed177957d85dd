//! The name state on its own, and the resolver and the watch task against a tiny DNS server
//! on loopback UDP whose answers the test changes (`weir_testkit::dns`).

use std::net::{Ipv4Addr, Ipv6Addr};

use weir_testkit::dns::{Reply, TestDns};

use super::*;

fn name(host: &str) -> NodeName {
    NodeName {
        host: host.to_owned(),
        port: 5432,
        srv: false,
    }
}

fn service(host: &str) -> NodeName {
    NodeName {
        host: host.to_owned(),
        port: 0,
        srv: true,
    }
}

fn bounds(min_ms: u64, max_ms: u64) -> DnsSettings {
    DnsSettings {
        min_ttl: Duration::from_millis(min_ms),
        max_ttl: Duration::from_millis(max_ms),
        ..DnsSettings::default()
    }
}

fn answer(ips: &[&str], ttl_s: u64) -> Result<Answer, ResolveError> {
    Ok(Answer {
        addresses: ips
            .iter()
            .map(|ip| SocketAddr::new(ip.parse().unwrap(), 5432))
            .collect(),
        ttl: Duration::from_secs(ttl_s),
        partial: None,
        failed_family: None,
        surplus: 0,
        targets_left_out: 0,
    })
}

#[test]
fn ttl_is_kept_within_bounds_and_only_changes_are_reported() {
    let mut state = NameState::new(name("db"), &bounds(5_000, 60_000));
    let (update, next) = state.on_answer(answer(&["192.0.2.1", "192.0.2.2"], 30));
    let expected: Arc<[SocketAddr]> = Arc::from(vec![
        "192.0.2.1:5432".parse().unwrap(),
        "192.0.2.2:5432".parse().unwrap(),
    ]);
    assert_eq!(
        (update, next),
        (Update::Changed(expected), Duration::from_secs(30))
    );
    let (update, next) = state.on_answer(answer(&["192.0.2.1", "192.0.2.2"], 1));
    assert_eq!((update, next), (Update::Unchanged, Duration::from_secs(5)));
    let (update, next) = state.on_answer(answer(&["192.0.2.2"], 86_400));
    assert!(matches!(update, Update::Changed(set) if set.len() == 1));
    assert_eq!(next, Duration::from_secs(60));
}

#[test]
fn failures_keep_the_last_good_set_and_back_off() {
    let mut state = NameState::new(name("db"), &bounds(1_000, 5_000));
    state.on_answer(answer(&["192.0.2.1"], 10));
    let mut delays = Vec::new();
    for _ in 0..5 {
        let (update, next) = state.on_answer(Err(ResolveError::Failed("timeout".into())));
        assert!(matches!(update, Update::Failed(_)));
        delays.push(next.as_secs());
        assert_eq!(state.current().map(|set| set.len()), Some(1));
    }
    assert_eq!(delays, vec![1, 2, 4, 5, 5]);
    // A success resets the back-off.
    let (update, next) = state.on_answer(answer(&["192.0.2.1"], 0));
    assert_eq!((update, next), (Update::Unchanged, Duration::from_secs(1)));
    let (_, next) = state.on_answer(Err(ResolveError::NoRecords));
    assert_eq!(next, Duration::from_secs(1));
}

/// Resolver settings asking `dns` only, with short query timeouts.
fn settings(dns: &TestDns, min_ms: u64, max_ms: u64) -> DnsSettings {
    DnsSettings {
        servers: vec![dns.address],
        timeout: Duration::from_millis(200),
        ..bounds(min_ms, max_ms)
    }
}

fn v4(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(192, 0, 2, last))
}

#[tokio::test]
async fn resolves_a_and_aaaa_with_their_ttl() {
    let dns = TestDns::start();
    let v6 = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1));
    dns.set("db.test", Reply::Records(vec![v4(2), v4(1), v6], 30));
    let resolver = Resolver::new(&settings(&dns, 1_000, 60_000)).unwrap();
    let on = |ips: &[IpAddr]| -> Vec<SocketAddr> {
        ips.iter().map(|&ip| SocketAddr::new(ip, 5432)).collect()
    };
    let answer = resolver.resolve(&name("db.test.")).await.unwrap();
    assert_eq!(answer.addresses, on(&[v4(1), v4(2), v6]));
    assert!(answer.ttl > Duration::from_secs(25) && answer.ttl <= Duration::from_secs(30));
    let only_v4 = DnsSettings {
        families: Families::Ipv4,
        ..settings(&dns, 1_000, 60_000)
    };
    let answer = Resolver::new(&only_v4)
        .unwrap()
        .resolve(&name("db.test."))
        .await
        .unwrap();
    assert_eq!(answer.addresses, on(&[v4(1), v4(2)]));
    assert_eq!(
        resolver.resolve(&name("gone.test.")).await,
        Err(ResolveError::NoRecords)
    );
    dns.set("broken.test", Reply::ServerFailure);
    assert!(matches!(
        resolver.resolve(&name("broken.test.")).await,
        Err(ResolveError::Failed(_))
    ));
}

/// With both families asked, one that fails (SERVFAIL for AAAA, the A records answered)
/// makes a partial answer: taken for a name not resolved yet; for one with a last good set,
/// the failed family keeps its addresses from that set while the other's follow the answer
/// (so a resolver that always fails AAAA still moves the A nodes). One without records is a
/// whole answer. An SRV target whose lookup failed makes a partial answer that keeps the
/// last good set whole. Names with `_` in their labels are asked as written.
#[tokio::test]
async fn a_failed_family_or_target_makes_a_partial_answer() {
    let dns = TestDns::start();
    let resolver = Resolver::new(&settings(&dns, 1_000, 60_000)).unwrap();
    let v6 = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1));
    dns.set("dual.test", Reply::Records(vec![v4(1), v6], 30));
    let mut state = NameState::new(name("dual.test."), &settings(&dns, 1_000, 60_000));
    let whole = resolver.resolve(&name("dual.test.")).await;
    assert_eq!(whole.as_ref().unwrap().partial, None);
    assert!(matches!(state.on_answer(whole).0, Update::Changed(set) if set.len() == 2));
    // (Another name: the resolver's cache still holds the first one's AAAA records.)
    dns.set("half.test", Reply::AddressesButNoIpv6(vec![v4(1)], 30));
    let partial = resolver.resolve(&name("half.test.")).await.unwrap();
    assert_eq!(partial.addresses, vec![SocketAddr::new(v4(1), 5432)]);
    assert!(partial.partial.is_some());
    assert_eq!(partial.failed_family, Some(Families::Ipv6));
    // With a last good set: the IPv6 address kept, the A records as answered.
    assert_eq!(state.on_answer(Ok(partial.clone())).0, Update::Unchanged);
    assert_eq!(state.current().unwrap().len(), 2);
    dns.set("moved.test", Reply::AddressesButNoIpv6(vec![v4(3)], 30));
    let moved = resolver.resolve(&name("moved.test.")).await.unwrap();
    let expected: Arc<[SocketAddr]> = Arc::from(vec![
        SocketAddr::new(v4(3), 5432),
        SocketAddr::new(v6, 5432),
    ]);
    assert_eq!(state.on_answer(Ok(moved)).0, Update::Changed(expected));
    // The A query fails and AAAA has no records: the IPv6 node goes, the IPv4 one stays.
    dns.set("v6gone.test", Reply::Ipv4FailsIpv6Empty);
    let gone = resolver.resolve(&name("v6gone.test.")).await.unwrap();
    assert_eq!(gone.failed_family, Some(Families::Ipv4));
    assert!(gone.addresses.is_empty());
    let expected: Arc<[SocketAddr]> = Arc::from(vec![SocketAddr::new(v4(3), 5432)]);
    assert_eq!(
        state.on_answer(Ok(gone.clone())).0,
        Update::Changed(expected)
    );
    // For a name never resolved, nothing to keep: a failure.
    let mut fresh = NameState::new(name("v6gone.test."), &settings(&dns, 1_000, 60_000));
    assert!(matches!(fresh.on_answer(Ok(gone)).0, Update::Failed(_)));
    // Without one: taken, so a resolver that always fails AAAA still gives the A nodes.
    let mut first = NameState::new(name("dual.test."), &settings(&dns, 1_000, 60_000));
    assert!(matches!(first.on_answer(Ok(partial)).0, Update::Changed(set) if set.len() == 1));
    let only_v4 = DnsSettings {
        families: Families::Ipv4,
        ..settings(&dns, 1_000, 60_000)
    };
    let answer = Resolver::new(&only_v4)
        .unwrap()
        .resolve(&name("half.test."))
        .await
        .unwrap();
    assert_eq!(answer.addresses, vec![SocketAddr::new(v4(1), 5432)]);
    assert_eq!(answer.partial, None);
    dns.set(
        "_db._tcp.test",
        Reply::Services(
            vec![
                (10, 5, 5433, "a.test".to_owned()),
                (10, 5, 5434, "broken.test".to_owned()),
            ],
            60,
        ),
    );
    dns.set("a.test", Reply::Records(vec![v4(1)], 30));
    dns.set("broken.test", Reply::ServerFailure);
    let partial = resolver.resolve(&service("_db._tcp.test.")).await.unwrap();
    assert_eq!(partial.addresses, vec![SocketAddr::new(v4(1), 5433)]);
    assert!(partial.partial.is_some());
    // With a last good set: a failure, the set kept whole.
    let mut services = NameState::new(service("_db._tcp.test."), &settings(&dns, 1_000, 60_000));
    let two = Answer {
        addresses: vec![SocketAddr::new(v4(1), 5433), SocketAddr::new(v4(2), 5434)],
        ..partial.clone()
    };
    assert!(matches!(services.on_answer(Ok(two)).0, Update::Changed(_)));
    assert!(matches!(
        services.on_answer(Ok(partial)).0,
        Update::Failed(_)
    ));
    assert_eq!(services.current().unwrap().len(), 2);
    dns.set("proj_web_1.test", Reply::Records(vec![v4(7)], 30));
    let answer = resolver.resolve(&name("proj_web_1.test.")).await.unwrap();
    assert_eq!(answer.addresses, vec![SocketAddr::new(v4(7), 5432)]);
}

/// A service name: the targets of its best-priority SRV records, each on its
/// record's port, expiring with the first of its records; a target that does
/// not resolve is left out, and a service with no usable record has none.
#[tokio::test]
async fn a_service_name_resolves_to_its_srv_targets_on_their_ports() {
    let dns = TestDns::start();
    dns.set(
        "_db._tcp.test",
        Reply::Services(
            vec![
                (10, 5, 5433, "a.test".to_owned()),
                (10, 5, 5434, "b.test".to_owned()),
                (10, 1, 5435, "missing.test".to_owned()),
                (10, 1, 0, "a.test".to_owned()),
                // a backup of lower priority: not used while the best ones are listed
                (20, 1, 6000, "backup.test".to_owned()),
            ],
            60,
        ),
    );
    dns.set("a.test", Reply::Records(vec![v4(1)], 30));
    dns.set("b.test", Reply::Records(vec![v4(2), v4(3)], 45));
    dns.set("backup.test", Reply::Records(vec![v4(9)], 30));
    let resolver = Resolver::new(&settings(&dns, 1_000, 60_000)).unwrap();
    let answer = resolver.resolve(&service("_db._tcp.test.")).await.unwrap();
    let expected: Vec<SocketAddr> = vec![
        SocketAddr::new(v4(1), 5433),
        SocketAddr::new(v4(2), 5434),
        SocketAddr::new(v4(3), 5434),
    ];
    assert_eq!(answer.addresses, expected);
    assert!(answer.ttl > Duration::from_secs(25) && answer.ttl <= Duration::from_secs(30));
    // Only the backup left: it is used.
    dns.set(
        "_backup._tcp.test",
        Reply::Services(vec![(20, 1, 6000, "backup.test".to_owned())], 60),
    );
    let answer = resolver
        .resolve(&service("_backup._tcp.test."))
        .await
        .unwrap();
    assert_eq!(answer.addresses, vec![SocketAddr::new(v4(9), 6000)]);
    // "." as the only target: the service is not offered.
    dns.set(
        "_off._tcp.test",
        Reply::Services(vec![(0, 0, 0, ".".to_owned())], 60),
    );
    assert_eq!(
        resolver.resolve(&service("_off._tcp.test.")).await,
        Err(ResolveError::NoRecords)
    );
    assert_eq!(
        resolver.resolve(&service("_gone._tcp.test.")).await,
        Err(ResolveError::NoRecords)
    );
}

/// A running watch sees a change at the record's TTL, keeps the last good set through a
/// failure, and sees the next change once the name resolves again.
#[tokio::test]
async fn a_running_watch_follows_changes_and_survives_failures() {
    let dns = TestDns::start();
    dns.set("web.test", Reply::Records(vec![v4(1), v4(2)], 1));
    // The TTL (1 s) is above min_ttl: changes are seen within about a second.
    let settings = settings(&dns, 100, 1_000);
    let resolver = Resolver::new(&settings).unwrap();
    let (_shutdown, signal) = weir_core::Shutdown::new();
    let (mut receiver, _task) = watch(resolver, name("web.test."), &settings, signal).await;
    let set = |last: &[u8]| -> Vec<SocketAddr> {
        last.iter().map(|&l| SocketAddr::new(v4(l), 5432)).collect()
    };
    assert_eq!(&receiver.borrow_and_update()[..], &set(&[1, 2])[..]);
    dns.set("web.test", Reply::Records(vec![v4(2), v4(3)], 1));
    tokio::time::timeout(Duration::from_secs(5), receiver.changed())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&receiver.borrow_and_update()[..], &set(&[2, 3])[..]);
    // Failures: SERVFAIL, then NXDOMAIN. The set stays and nothing is published.
    let before = dns.queries();
    dns.set("web.test", Reply::ServerFailure);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    dns.set("web.test", Reply::NameError);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(dns.queries() > before, "no re-resolution happened");
    assert!(!receiver.has_changed().unwrap());
    assert_eq!(&receiver.borrow()[..], &set(&[2, 3])[..]);
    // Back: the new set arrives.
    dns.set("web.test", Reply::Records(vec![v4(4)], 1));
    tokio::time::timeout(Duration::from_secs(5), receiver.changed())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&receiver.borrow_and_update()[..], &set(&[4])[..]);
}

/// Only what the answer says of the name asked becomes a node: an address record of another
/// name is left out (RFC 2181 §5.4.1), and so is an unspecified address (what a DNS sinkhole
/// answers).
#[tokio::test]
async fn strangers_and_unspecified_addresses_are_not_taken() {
    let dns = TestDns::start();
    let resolver = Resolver::new(&settings(&dns, 1_000, 60_000)).unwrap();
    dns.set(
        "app.test",
        Reply::RecordsAndStranger(vec![v4(1)], 30, "evil.test".to_owned(), v4(9)),
    );
    let answer = resolver.resolve(&name("app.test.")).await.unwrap();
    assert_eq!(answer.addresses, vec![SocketAddr::new(v4(1), 5432)]);
    dns.set(
        "sink.test",
        Reply::Records(vec![IpAddr::V4(Ipv4Addr::UNSPECIFIED), v4(2)], 30),
    );
    let answer = resolver.resolve(&name("sink.test.")).await.unwrap();
    assert_eq!(answer.addresses, vec![SocketAddr::new(v4(2), 5432)]);
    dns.set(
        "blocked.test",
        Reply::Records(vec![IpAddr::V4(Ipv4Addr::UNSPECIFIED)], 30),
    );
    assert_eq!(
        resolver.resolve(&name("blocked.test.")).await,
        Err(ResolveError::NoRecords)
    );
}

/// One name makes at most MAX_ADDRESSES_PER_NAME nodes: the lowest addresses, the same
/// ones from one answer to the next whatever their order.
#[test]
fn a_name_makes_a_bounded_number_of_nodes() {
    let many = |order: &mut dyn Iterator<Item = u32>| -> Vec<SocketAddr> {
        order
            .map(|n| SocketAddr::new(std::net::Ipv4Addr::from(0x0a00_0000 + n).into(), 80))
            .collect()
    };
    let total = MAX_ADDRESSES_PER_NAME as u32 + 500;
    let mut forward = many(&mut (0..total));
    let mut backward = many(&mut (0..total).rev().chain(0..10));
    assert_eq!(bounded(&mut forward), 500);
    assert_eq!(bounded(&mut backward), 500);
    assert_eq!(forward.len(), MAX_ADDRESSES_PER_NAME);
    assert_eq!(forward, backward);
    assert_eq!(forward[0], SocketAddr::new([10, 0, 0, 0].into(), 80));
    let mut few = many(&mut [3, 1, 3].into_iter());
    assert_eq!(bounded(&mut few), 0);
    assert_eq!(few.len(), 2);
}

/// A service asks at most MAX_SRV_TARGETS of its targets, the first by name whatever the
/// order of the records, and says how many it left out.
#[tokio::test]
async fn a_service_asks_a_bounded_number_of_targets() {
    let dns = TestDns::start();
    let targets = ["e.test", "c.test", "a.test", "d.test", "b.test"];
    dns.set(
        "_many._tcp.test",
        Reply::Services(
            targets
                .iter()
                .map(|target| (10, 1, 5433, (*target).to_owned()))
                .collect(),
            60,
        ),
    );
    for (n, target) in ["a.test", "b.test", "c.test", "d.test", "e.test"]
        .iter()
        .enumerate()
    {
        dns.set(target, Reply::Records(vec![v4(n as u8 + 1)], 30));
    }
    let resolver = Resolver::new(&settings(&dns, 1_000, 60_000)).unwrap();
    let answer = resolver
        .resolve(&service("_many._tcp.test."))
        .await
        .unwrap();
    assert_eq!(MAX_SRV_TARGETS, 3);
    let expected: Vec<SocketAddr> = (1..=3).map(|n| SocketAddr::new(v4(n), 5433)).collect();
    assert_eq!(answer.addresses, expected);
    assert_eq!(answer.targets_left_out, 2);
    assert_eq!(answer.surplus, 0);
}
