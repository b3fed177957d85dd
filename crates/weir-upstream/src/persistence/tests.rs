//! Each persistence type: sticking, a tampered cookie ignored, a node that
//! goes down, expiry, the bound on entries, and reloads.

use std::net::SocketAddr;
use std::num::NonZeroU32;

use weir_config::PassiveHealth;
use weir_http::{Limits, Method, Parsed, parse_request, parse_response};
use weir_observe::Metrics;

use super::*;

fn nodes(count: usize) -> Vec<Arc<NodeState>> {
    (0..count)
        .map(|index| {
            let address = SocketAddr::from(([10, 0, 0, index as u8 + 1], 8080));
            let passive = PassiveHealth {
                consecutive_failures: 0,
                base_ejection: Duration::from_secs(1),
                max_ejection: Duration::from_secs(10),
                max_ejected_percent: 100,
            };
            let metrics = Metrics::new().node("p", &address.to_string());
            Arc::new(NodeState::new(address, 1, passive, metrics))
        })
        .collect()
}

fn config(mode: PersistenceMode) -> weir_config::Persistence {
    weir_config::Persistence {
        mode,
        key: None,
        timeout: Duration::from_secs(60),
        max_entries: NonZeroU32::new(1000).unwrap(),
    }
}

fn cookie_mode() -> PersistenceMode {
    PersistenceMode::Cookie(InsertedCookie {
        name: "WEIR_NODE".into(),
        secure: None,
        http_only: true,
        same_site: None,
        path: "/".into(),
        domain: None,
        max_age: None,
    })
}

fn request(headers: &str) -> RequestHead {
    let raw = format!("GET / HTTP/1.1\r\nHost: a\r\n{headers}\r\n");
    match parse_request(raw.as_bytes(), &Limits::default()) {
        Ok(Parsed::Complete(head, _)) => head,
        other => panic!("{other:?}"),
    }
}

fn response(headers: &str) -> ResponseHead {
    let raw = format!("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n{headers}\r\n");
    match parse_response(raw.as_bytes(), &Limits::default(), Method::Get) {
        Ok(Parsed::Complete(head, _)) => head,
        other => panic!("{other:?}"),
    }
}

fn up(_: usize) -> bool {
    true
}

const CLIENT: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 7));

#[test]
fn an_inserted_cookie_sticks_and_a_tampered_one_is_ignored() {
    let nodes = nodes(3);
    let key = PersistenceKey::generate();
    let now = Instant::now();
    let persistence = Persistence::new(&config(cookie_mode()), "web", &nodes, &key, None, now);
    assert_eq!(persistence.preferred(&request(""), CLIENT, &up, now), None);
    let set = persistence
        .on_response(&request(""), &response(""), 2, CLIENT, false, now)
        .unwrap();
    let set = std::str::from_utf8(&set).unwrap().to_owned();
    assert!(
        set.starts_with("WEIR_NODE=") && set.ends_with("; Path=/; HttpOnly"),
        "{set}"
    );
    let value = &set["WEIR_NODE=".len()..set.find(';').unwrap()];
    assert_eq!(value.len(), 32);
    // `same_site` adds its attribute; `SameSite=None` is always `Secure`, behind an http
    // virtual server too.
    let set_with = |same_site: &'static str| {
        let PersistenceMode::Cookie(mut cookie) = cookie_mode() else {
            unreachable!()
        };
        cookie.same_site = Some(same_site);
        let persistence = Persistence::new(
            &config(PersistenceMode::Cookie(cookie)),
            "web",
            &nodes,
            &key,
            None,
            now,
        );
        persistence
            .on_response(&request(""), &response(""), 2, CLIENT, false, now)
            .unwrap()
    };
    let set_lax = set_with("Lax");
    assert!(
        set_lax.ends_with(b"; HttpOnly; SameSite=Lax"),
        "{set_lax:?}"
    );
    let set_none = set_with("None");
    assert!(
        set_none.ends_with(b"; Secure; HttpOnly; SameSite=None"),
        "{set_none:?}"
    );
    assert!(
        !value.contains("10.0.0"),
        "the token must not reveal the node"
    );

    let sticky = request(&format!("Cookie: a=b; WEIR_NODE={value}\r\n"));
    assert_eq!(persistence.preferred(&sticky, CLIENT, &up, now), Some(2));
    // No new cookie while the client's one is right.
    assert_eq!(
        persistence.on_response(&sticky, &response(""), 2, CLIENT, false, now),
        None
    );

    // A client cannot choose a node: altered tokens and guesses are ignored.
    let mut altered = value.to_owned().into_bytes();
    altered[0] = if altered[0] == b'0' { b'1' } else { b'0' };
    let altered = String::from_utf8(altered).unwrap();
    for forged in [altered.as_str(), "0", "10.0.0.1:8080", "", &value[..31]] {
        let forged_request = request(&format!("Cookie: WEIR_NODE={forged}\r\n"));
        assert_eq!(
            persistence.preferred(&forged_request, CLIENT, &up, now),
            None,
            "{forged}"
        );
    }
    // Another key (another cluster, or no shared key) does not accept it either.
    let other = Persistence::new(
        &config(cookie_mode()),
        "web",
        &nodes,
        &PersistenceKey::generate(),
        None,
        now,
    );
    assert_eq!(other.preferred(&sticky, CLIENT, &up, now), None);
    // Secure on HTTPS.
    let secure = persistence
        .on_response(&request(""), &response(""), 0, CLIENT, true, now)
        .unwrap();
    assert!(std::str::from_utf8(&secure).unwrap().contains("; Secure"));
}

#[test]
fn a_node_that_goes_down_breaks_persistence_to_another() {
    let nodes = nodes(3);
    let key = PersistenceKey::from_secret(b"0123456789abcdef0123");
    let now = Instant::now();
    let persistence = Persistence::new(&config(cookie_mode()), "web", &nodes, &key, None, now);
    let set = persistence
        .on_response(&request(""), &response(""), 1, CLIENT, false, now)
        .unwrap();
    let cookie = std::str::from_utf8(&set)
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let sticky = request(&format!("Cookie: {cookie}\r\n"));
    let node_1_down = |index: usize| index != 1;
    assert_eq!(
        persistence.preferred(&sticky, CLIENT, &node_1_down, now),
        None
    );
    // The balancer sent it to node 0: the client gets node 0's cookie.
    let moved = persistence
        .on_response(&sticky, &response(""), 0, CLIENT, false, now)
        .unwrap();
    let moved = std::str::from_utf8(&moved)
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    assert_ne!(moved, cookie);
    let now_sticky = request(&format!("Cookie: {moved}\r\n"));
    assert_eq!(
        persistence.preferred(&now_sticky, CLIENT, &up, now),
        Some(0)
    );

    // Tokens depend on the key and the node's address, not its position.
    let mut reordered = nodes.clone();
    reordered.reverse();
    let after_reload = Persistence::new(&config(cookie_mode()), "web", &reordered, &key, None, now);
    assert_eq!(
        after_reload.preferred(&now_sticky, CLIENT, &up, now),
        Some(2)
    );
}

#[test]
fn client_addresses_stick_until_idle_past_the_timeout() {
    let nodes = nodes(4);
    let start = Instant::now();
    let key = PersistenceKey::generate();
    let persistence = Persistence::new(
        &config(PersistenceMode::ClientAddress),
        "web",
        &nodes,
        &key,
        None,
        start,
    );
    let plain = request("");
    assert_eq!(persistence.preferred(&plain, CLIENT, &up, start), None);
    assert_eq!(
        persistence.on_response(&plain, &response(""), 3, CLIENT, false, start),
        None
    );
    let later = start + Duration::from_secs(50);
    assert_eq!(persistence.preferred(&plain, CLIENT, &up, later), Some(3));
    // Each use refreshes the entry; idle past the timeout forgets it.
    assert_eq!(
        persistence.preferred(&plain, CLIENT, &up, later + Duration::from_secs(50)),
        Some(3)
    );
    let other: IpAddr = "192.0.2.8".parse().unwrap();
    assert_eq!(persistence.preferred(&plain, other, &up, later), None);
    assert_eq!(
        persistence.preferred(&plain, CLIENT, &up, later + Duration::from_secs(200)),
        None
    );
}

#[test]
fn application_cookies_and_headers_are_learned_from_responses() {
    let nodes = nodes(3);
    let now = Instant::now();
    let key = PersistenceKey::generate();
    let app = config(PersistenceMode::AppCookie("JSESSIONID".into()));
    let persistence = Persistence::new(&app, "web", &nodes, &key, None, now);
    let first = request("");
    let issued = response("Set-Cookie: JSESSIONID=s-123; Path=/; HttpOnly\r\n");
    assert_eq!(
        persistence.on_response(&first, &issued, 1, CLIENT, false, now),
        None
    );
    let returning = request("Cookie: theme=dark; JSESSIONID=s-123\r\n");
    // From any address: the session, not the client, sticks.
    let elsewhere: IpAddr = "198.51.100.3".parse().unwrap();
    assert_eq!(
        persistence.preferred(&returning, elsewhere, &up, now),
        Some(1)
    );
    assert_eq!(
        persistence.preferred(&request("Cookie: JSESSIONID=s-999\r\n"), CLIENT, &up, now),
        None
    );

    let header = config(PersistenceMode::AppHeader("x-session".into()));
    let persistence = Persistence::new(&header, "web", &nodes, &key, None, now);
    persistence.on_response(
        &first,
        &response("X-Session: abc\r\n"),
        2,
        CLIENT,
        false,
        now,
    );
    assert_eq!(
        persistence.preferred(&request("X-Session: abc\r\n"), CLIENT, &up, now),
        Some(2)
    );
    assert_eq!(
        persistence.preferred(&request("X-Session: abc\r\n"), CLIENT, &|i| i != 2, now),
        None
    );
}

#[test]
fn the_table_is_bounded_and_survives_a_reload() {
    let nodes = nodes(2);
    let now = Instant::now();
    let key = PersistenceKey::generate();
    let settings = config(PersistenceMode::ClientAddress);
    let persistence = Persistence::new(&settings, "web", &nodes, &key, None, now);
    for index in 0..5000u32 {
        let client = IpAddr::from((0xc000_0000 + index).to_be_bytes());
        persistence.on_response(&request(""), &response(""), 0, client, false, now);
    }
    assert!(
        persistence.remembered() <= 1000,
        "{}",
        persistence.remembered()
    );
    // Small tables too: the shards' bounds add up to max_entries exactly.
    for max in [1, 5, 20] {
        let settings = weir_config::Persistence {
            max_entries: NonZeroU32::new(max).unwrap(),
            ..config(PersistenceMode::ClientAddress)
        };
        let small = Persistence::new(&settings, "web", &nodes, &key, None, now);
        for index in 0..500u32 {
            let client = IpAddr::from((0xc000_0000 + index).to_be_bytes());
            small.on_response(&request(""), &response(""), 0, client, false, now);
        }
        assert!(
            small.remembered() <= max as usize && small.remembered() > 0,
            "max_entries {max}: {} remembered",
            small.remembered()
        );
    }
    let client = IpAddr::from([203, 0, 113, 1]);
    persistence.on_response(&request(""), &response(""), 1, client, false, now);
    let mut more = nodes.clone();
    more.insert(0, self::nodes(3).pop().unwrap());
    let reloaded = Persistence::new(&settings, "web", &more, &key, Some(&persistence), now);
    assert_eq!(
        reloaded.preferred(&request(""), client, &up, now),
        Some(2),
        "same node, new index"
    );
}

#[test]
fn a_reload_that_changes_only_the_bounds_keeps_the_learned_sessions() {
    let nodes = nodes(2);
    let now = Instant::now();
    let key = PersistenceKey::generate();
    let settings = config(PersistenceMode::ClientAddress);
    let persistence = Persistence::new(&settings, "web", &nodes, &key, None, now);
    let client = |index: u32| IpAddr::from((0xc000_0000 + index).to_be_bytes());
    for index in 0..100u32 {
        let node = (index % 2) as usize;
        let when = now + Duration::from_millis(u64::from(index));
        persistence.on_response(
            &request(""),
            &response(""),
            node,
            client(index),
            false,
            when,
        );
    }
    let later = now + Duration::from_millis(200);
    // Raised: every session carried, on its node.
    let raised = weir_config::Persistence {
        max_entries: NonZeroU32::new(5000).unwrap(),
        ..settings.clone()
    };
    let reloaded = Persistence::new(&raised, "web", &nodes, &key, Some(&persistence), later);
    assert_eq!(reloaded.remembered(), 100);
    for index in 0..100u32 {
        let expected = Some((index % 2) as usize);
        assert_eq!(
            reloaded.preferred(&request(""), client(index), &up, later),
            expected
        );
    }
    // Lowered: the most recently used sessions are kept, within the new bound.
    let lowered = weir_config::Persistence {
        max_entries: NonZeroU32::new(16).unwrap(),
        ..settings.clone()
    };
    let small = Persistence::new(&lowered, "web", &nodes, &key, Some(&persistence), later);
    assert!(small.remembered() <= 16 && small.remembered() > 0);
    let oldest = small.preferred(&request(""), client(0), &up, later);
    assert_eq!(oldest, None, "the least recently used went first");
    // A shorter timeout bounds what is carried: past it from the reload, all are forgotten.
    let brief = weir_config::Persistence {
        timeout: Duration::from_secs(1),
        ..settings.clone()
    };
    let short = Persistence::new(&brief, "web", &nodes, &key, Some(&persistence), later);
    assert_eq!(
        short.preferred(&request(""), client(99), &up, later),
        Some(1)
    );
    let past = Instant::now() + Duration::from_secs(2);
    assert_eq!(short.preferred(&request(""), client(98), &up, past), None);
    // Another way of keying sessions starts afresh.
    let other = config(PersistenceMode::AppHeader("x-session".into()));
    let fresh = Persistence::new(&other, "web", &nodes, &key, Some(&persistence), later);
    assert_eq!(fresh.remembered(), 0);
}

/// A full table of live sessions sweeps out expired ones (reading every entry) once per
/// eighth of its bound in new sessions, not once per new session.
#[test]
fn a_full_table_of_live_sessions_is_not_swept_for_every_new_one() {
    let now = Instant::now();
    let settings = weir_config::Persistence {
        max_entries: NonZeroU32::new(64_000).unwrap(),
        ..config(PersistenceMode::ClientAddress)
    };
    let table = StickTable::new(&settings, now);
    for index in 0..72_000u32 {
        table.insert(&index.to_be_bytes(), 1, now);
    }
    let sweeps: usize = table
        .shards
        .iter()
        .map(|shard| shard.lock().unwrap().sweeps)
        .sum();
    assert!(
        sweeps <= 4 * table.shards.len(),
        "{sweeps} sweeps over {} shards",
        table.shards.len()
    );
    assert!(table.len() <= 64_000);
}
