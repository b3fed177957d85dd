//! The cache through the two calls the pipeline makes (`lookup`, `response`)
//! and the purge API, with a scripted node.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::{Bytes, BytesMut};
use weir_cache::testing::{Req, Resp};
use weir_cache::{
    Answer, Cache, CachePolicy, CacheStatus, Coding, CompressionPolicy, Exchange, Framing, Hit,
    HitBody, Lookup, Reply, SetCookie, StoreSettings, UnixTime,
};
use weir_observe::{CacheMetrics, CompressionMetrics};

const T0: UnixTime = UnixTime(1_700_000_000);

fn at(seconds: u64) -> UnixTime {
    UnixTime(T0.0 + seconds)
}

fn new_cache() -> (Arc<Cache>, CacheMetrics, CompressionMetrics) {
    let metrics = CacheMetrics::default();
    let compression = CompressionMetrics::default();
    let cache = Cache::new(
        StoreSettings {
            size: 4 << 20,
            max_object_size: 256 << 10,
        },
        metrics.clone(),
        compression.clone(),
    );
    (cache, metrics, compression)
}

fn policy() -> CachePolicy {
    CachePolicy {
        max_object_size: 256 << 10,
        ..CachePolicy::default()
    }
}

fn forward(lookup: Lookup) -> Exchange {
    match lookup {
        Lookup::Forward(exchange) => exchange,
        other => panic!("expected Forward, got {other:?}"),
    }
}

fn hit(lookup: Lookup) -> Hit {
    match lookup {
        Lookup::Hit(hit) => hit,
        other => panic!("expected Hit, got {other:?}"),
    }
}

/// The whole body of a hit that is complete.
fn body(hit: &Hit) -> Vec<u8> {
    match hit.body() {
        HitBody::Empty => Vec::new(),
        HitBody::Whole(rope) => rope.chunks().concat(),
        HitBody::Part(chunks) => chunks.concat(),
        HitBody::Growing(_) => panic!("body still growing"),
    }
}

/// A hit's head as written for an HTTP/1.1 client, kept alive, without edits.
fn head_text(hit: &Hit) -> String {
    let mut head = BytesMut::new();
    hit.write_http1_head(
        &mut head,
        (false, true),
        &[],
        &[],
        None::<&weir_http::Unedited>,
    );
    String::from_utf8(head.to_vec()).unwrap()
}

/// A node's answer: status, fields and body (Content-Length added).
fn node(status: u16, fields: &[(&str, &str)], body: &[u8]) -> (Resp, Bytes) {
    let mut response = Resp::new(status);
    for (name, value) in fields {
        response = response.header(name, value);
    }
    let length = body.len().to_string();
    (
        response.header("Content-Length", &length),
        Bytes::copy_from_slice(body),
    )
}

/// Hands the node's response to the cache and streams the body in; returns
/// what the client was answered with.
fn respond(
    cache: &Arc<Cache>,
    exchange: Exchange,
    compression: Option<&CompressionPolicy>,
    request: &Req,
    (response, body): (Resp, Bytes),
    now: UnixTime,
) -> (Option<Hit>, Vec<u8>) {
    match cache.response(exchange, &policy(), compression, request, &response, now) {
        Reply::Hit(hit) => (Some(hit), Vec::new()),
        Reply::Fill(mut fill) => {
            let hit = fill.take_hit();
            let mut passed = fill.push(body).unwrap().to_vec();
            passed.extend_from_slice(&fill.finish().unwrap());
            (hit, passed)
        }
        Reply::Forward(mut forward) => {
            let passed = match forward.compressor.as_mut() {
                Some(compressor) => {
                    let mut out = compressor.push(&body).unwrap().to_vec();
                    out.extend_from_slice(&forward.compressor.take().unwrap().finish().unwrap());
                    out
                }
                None => body.to_vec(),
            };
            (None, passed)
        }
        Reply::Refetch(_) => panic!("a refetch is asked only after a 304"),
    }
}

/// A miss filled with the node's response; returns the client's hit.
fn fill(cache: &Arc<Cache>, request: &Req, answer: (Resp, Bytes), now: UnixTime) -> Option<Hit> {
    let exchange = forward(cache.lookup(&policy(), None, request, now));
    respond(cache, exchange, None, request, answer, now).0
}

#[test]
fn miss_then_hit_with_age_head_and_conditionals() {
    let (cache, metrics, _) = new_cache();
    let request = Req::get("/a");
    let answer = node(
        200,
        &[
            ("Cache-Control", "max-age=60"),
            ("ETag", "\"v1\""),
            ("Content-Type", "text/plain"),
            ("Via", "1.1 weir"),
        ],
        b"hello world",
    );
    let first = fill(&cache, &request, answer, T0).expect("stored and served from the store");
    assert_eq!(first.cache_status(), CacheStatus::Miss);

    let second = hit(cache.lookup(&policy(), None, &request, at(10)));
    assert_eq!(
        (second.status(), second.age(), second.cache_status()),
        (200, 10, CacheStatus::Hit)
    );
    assert_eq!(body(&second), b"hello world");
    let mut head = BytesMut::new();
    assert_eq!(
        second.write_http1_head(
            &mut head,
            (false, true),
            &[("X-Cache", "HIT")],
            &[],
            None::<&weir_http::Unedited>
        ),
        Framing::Length(11)
    );
    let text = String::from_utf8(head.to_vec()).unwrap();
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    for field in [
        "Cache-Control: max-age=60\r\n",
        "Age: 10\r\n",
        "Content-Length: 11\r\n",
        "X-Cache: HIT\r\n",
        // The node sent no Date: the store added when it received the answer.
        "Date: Tue, 14 Nov 2023 22:13:20 GMT\r\n",
    ] {
        assert!(text.contains(field), "{field} missing in {text}");
    }
    assert!(text.ends_with("\r\n\r\n"));
    // The status line for an HTTP/1.0 client, and for a status other than 200.
    let line = |hit: &Hit, http10: bool| {
        let mut head = BytesMut::new();
        hit.write_http1_head(
            &mut head,
            (http10, true),
            &[],
            &[],
            None::<&weir_http::Unedited>,
        );
        let text = String::from_utf8(head.to_vec()).unwrap();
        text[..text.find("\r\n").unwrap()].to_string()
    };
    assert_eq!(line(&second, true), "HTTP/1.1 200 OK");
    let ranged = hit(cache.lookup(
        &policy(),
        None,
        &Req::get("/a").header("Range", "bytes=0-4"),
        at(10),
    ));
    assert_eq!(line(&ranged, false), "HTTP/1.1 206 Partial Content");

    // HEAD from the stored GET: same head, no body.
    let head_hit = hit(cache.lookup(&policy(), None, &Req::new("HEAD", "/a"), at(11)));
    assert_eq!(
        (
            head_hit.status(),
            head_hit.content_length(),
            head_hit.has_body()
        ),
        (200, Some(11), false)
    );

    // The client's own validator: 304 from the cache.
    let conditional = Req::get("/a").header("If-None-Match", "\"v1\"");
    let not_modified = hit(cache.lookup(&policy(), None, &conditional, at(12)));
    assert_eq!(
        (not_modified.status(), not_modified.answer()),
        (304, Answer::NotModified)
    );
    let names: Vec<&[u8]> = not_modified.headers().map(|(name, _)| name).collect();
    assert_eq!(
        names,
        [&b"Cache-Control"[..], b"ETag", b"Via", b"Date"],
        "a 304 carries no Content-Type, and the hops the object came through"
    );

    // If-Match that fails: 412.
    let failed = hit(cache.lookup(
        &policy(),
        None,
        &Req::get("/a").header("If-Match", "\"v0\""),
        at(12),
    ));
    assert_eq!(failed.status(), 412);
    // The cache's own answer, made now: none of the stored fields, but a `Date` of its
    // own (RFC 9110 section 6.6.1), over HTTP/1.1 as over HTTP/2 (written from this head).
    let text = head_text(&failed);
    assert_eq!(text.matches("\r\nDate: ").count(), 1, "{text}");
    assert!(!text.contains("ETag"), "{text}");
    assert_eq!((metrics.hits.get(), metrics.misses.get()), (5, 1));
}

/// A stored 404 (or any answer that is not a 2xx) is answered as it is: the client's
/// preconditions apply only where the answer without them would be a 2xx (RFC 9110
/// section 13.2.1), so neither a matching If-None-Match (304) nor a failing If-Match (412).
#[test]
fn preconditions_do_not_apply_to_a_stored_404() {
    let (cache, _, _) = new_cache();
    let request = Req::get("/gone");
    fill(
        &cache,
        &request,
        node(
            404,
            &[("Cache-Control", "max-age=60"), ("ETag", "\"v1\"")],
            b"not here",
        ),
        at(0),
    );
    for (name, value) in [("If-None-Match", "\"v1\""), ("If-Match", "\"v0\"")] {
        let answered = hit(cache.lookup(
            &policy(),
            None,
            &Req::get("/gone").header(name, value),
            at(1),
        ));
        assert_eq!(
            (answered.status(), answered.answer()),
            (404, Answer::Full),
            "{name}"
        );
    }
}

#[test]
fn ranges_from_a_whole_object() {
    let (cache, _, _) = new_cache();
    let request = Req::get("/r");
    fill(
        &cache,
        &request,
        node(200, &[("Cache-Control", "max-age=60")], b"0123456789"),
        T0,
    );
    let partial = hit(cache.lookup(
        &policy(),
        None,
        &Req::get("/r").header("Range", "bytes=2-4"),
        T0,
    ));
    assert_eq!((partial.status(), partial.content_length()), (206, Some(3)));
    assert_eq!(partial.content_range().as_deref(), Some("bytes 2-4/10"));
    assert_eq!(body(&partial), b"234");
    let several = hit(cache.lookup(
        &policy(),
        None,
        &Req::get("/r").header("Range", "bytes=0-1,4-5"),
        T0,
    ));
    assert_eq!(
        (several.status(), body(&several)),
        (200, b"0123456789".to_vec())
    );
    let beyond = hit(cache.lookup(
        &policy(),
        None,
        &Req::get("/r").header("Range", "bytes=10-"),
        T0,
    ));
    assert_eq!(
        (beyond.status(), beyond.content_range().as_deref()),
        (416, Some("bytes */10"))
    );
    let text = head_text(&beyond);
    assert_eq!(
        text.matches("\r\nDate: ").count(),
        1,
        "a 416 is dated: {text}"
    );
    // A miss with Range fetches the whole object: the range is not sent to the node.
    let exchange = forward(cache.lookup(
        &policy(),
        None,
        &Req::get("/other").header("Range", "bytes=0-1"),
        T0,
    ));
    assert!(exchange.remove_fields().contains(&"range"));
}

#[test]
fn not_storable_responses_pass() {
    let (cache, _, _) = new_cache();
    type Case<'a> = (&'a str, Req, &'a [(&'a str, &'a str)]);
    let cases: &[Case] = &[
        (
            "private",
            Req::get("/p1"),
            &[("Cache-Control", "private, max-age=60")],
        ),
        (
            "no-store",
            Req::get("/p2"),
            &[("Cache-Control", "no-store")],
        ),
        (
            "set-cookie",
            Req::get("/p3"),
            &[("Cache-Control", "max-age=60"), ("Set-Cookie", "id=1")],
        ),
        (
            "authorization",
            Req::get("/p4").header("Authorization", "Bearer x"),
            &[("Cache-Control", "max-age=60")],
        ),
        (
            "vary star",
            Req::get("/p5"),
            &[("Cache-Control", "max-age=60"), ("Vary", "*")],
        ),
        ("not reusable", Req::get("/p6"), &[]),
        (
            "too large",
            Req::get("/p7"),
            &[
                ("Cache-Control", "max-age=60"),
                ("Content-Length", "999999"),
            ],
        ),
    ];
    for (name, request, fields) in cases {
        let exchange = forward(cache.lookup(&policy(), None, request, T0));
        let mut response = Resp::new(200);
        for (field, value) in *fields {
            response = response.header(field, value);
        }
        match cache.response(exchange, &policy(), None, request, &response, T0) {
            Reply::Forward(forward) => assert_eq!(forward.status, CacheStatus::Pass, "{name}"),
            other => panic!("{name}: expected a pass, got {other:?}"),
        }
        assert!(
            matches!(
                cache.lookup(&policy(), None, request, T0),
                Lookup::Forward(_)
            ),
            "{name}"
        );
    }
    assert_eq!(cache.stats().objects, 0);
}

/// Requests whose answer the cache may not store keep their conditionals and `Range` on
/// the way to the node (RFC 9111 §4.3.2), so that the node answers its 304, 412 or 206:
/// one whose own `no-store` forbids storing (§5.2.1.5) from the first, and one with
/// `Authorization` once an answer to such a request for its key was not storable (§3.5).
/// Requests without `Authorization` go on filling that key.
#[test]
fn requests_whose_answer_is_not_stored_keep_their_conditionals() {
    let (cache, _, _) = new_cache();
    let conditional = |request: Req| {
        request
            .header("Range", "bytes=0-1")
            .header("If-None-Match", "\"a\"")
    };
    let no_store = conditional(Req::get("/n")).header("Cache-Control", "no-store");
    let exchange = forward(cache.lookup(&policy(), None, &no_store, T0));
    assert!(exchange.remove_fields().is_empty(), "no-store: a pass");

    let authorized = conditional(Req::get("/a")).header("Authorization", "Bearer x");
    let first = forward(cache.lookup(&policy(), None, &authorized, T0));
    assert!(
        first.remove_fields().contains(&"range"),
        "the first cannot know"
    );
    let (response, _) = node(200, &[("Cache-Control", "max-age=60")], b"0123");
    match cache.response(first, &policy(), None, &authorized, &response, T0) {
        Reply::Forward(forward) => assert_eq!(forward.status, CacheStatus::Pass),
        other => panic!("expected a pass, got {other:?}"),
    }
    let second = forward(cache.lookup(&policy(), None, &authorized, T0));
    assert!(second.remove_fields().is_empty(), "remembered as a pass");
    let anonymous = forward(cache.lookup(&policy(), None, &conditional(Req::get("/a")), T0));
    assert!(
        anonymous.remove_fields().contains(&"range"),
        "without Authorization the key still fills"
    );
}

#[test]
fn set_cookie_stripped_when_configured() {
    let (cache, _, _) = new_cache();
    let strip = CachePolicy {
        set_cookie: SetCookie::Strip,
        ..policy()
    };
    let request = Req::get("/c");
    let exchange = forward(cache.lookup(&strip, None, &request, T0));
    let (response, body) = node(
        200,
        &[("Cache-Control", "max-age=60"), ("Set-Cookie", "id=1")],
        b"x",
    );
    let Reply::Fill(mut fill) = cache.response(exchange, &strip, None, &request, &response, T0)
    else {
        panic!("expected a fill");
    };
    fill.push(body).unwrap();
    fill.finish().unwrap();
    let stored = hit(cache.lookup(&strip, None, &request, T0));
    assert!(
        stored
            .headers()
            .all(|(name, _)| !name.eq_ignore_ascii_case(b"set-cookie"))
    );
}

#[test]
fn vary_keeps_one_variant_per_value() {
    let (cache, _, _) = new_cache();
    let english = Req::get("/v").header("Accept-Language", "en");
    let french = Req::get("/v").header("Accept-Language", "fr");
    let answer = |text: &[u8]| {
        node(
            200,
            &[("Cache-Control", "max-age=60"), ("Vary", "Accept-Language")],
            text,
        )
    };
    fill(&cache, &english, answer(b"hello"), T0);
    let exchange = forward(cache.lookup(&policy(), None, &french, T0));
    respond(&cache, exchange, None, &french, answer(b"bonjour"), T0);
    assert_eq!(
        body(&hit(cache.lookup(&policy(), None, &english, T0))),
        b"hello"
    );
    assert_eq!(
        body(&hit(cache.lookup(&policy(), None, &french, T0))),
        b"bonjour"
    );
    assert!(matches!(
        cache.lookup(
            &policy(),
            None,
            &Req::get("/v").header("Accept-Language", "de"),
            T0
        ),
        Lookup::Forward(_)
    ));
    assert_eq!(cache.stats().objects, 2);
}

#[test]
fn revalidation_with_304_refreshes_the_object() {
    let (cache, metrics, _) = new_cache();
    let request = Req::get("/e");
    let answer = node(
        200,
        &[
            ("Cache-Control", "max-age=10"),
            ("ETag", "\"v1\""),
            ("Last-Modified", "Sun, 06 Nov 1994 08:49:37 GMT"),
            ("X-Version", "1"),
        ],
        b"body",
    );
    fill(&cache, &request, answer, T0);
    let mut exchange = forward(cache.lookup(&policy(), None, &request, at(20)));
    let added: Vec<(&str, Vec<u8>)> = exchange
        .add_fields()
        .map(|(n, v)| (n, v.to_vec()))
        .collect();
    assert_eq!(
        added,
        [
            ("If-None-Match", b"\"v1\"".to_vec()),
            (
                "If-Modified-Since",
                b"Sun, 06 Nov 1994 08:49:37 GMT".to_vec()
            )
        ]
    );
    let not_modified = Resp::new(304)
        .header("Cache-Control", "max-age=100")
        .header("ETag", "\"v1\"")
        .header("X-Version", "2");
    let Reply::Hit(revalidated) =
        cache.response(exchange, &policy(), None, &request, &not_modified, at(20))
    else {
        panic!("a 304 is answered from the cache");
    };
    assert_eq!(
        (
            revalidated.status(),
            revalidated.cache_status(),
            revalidated.age()
        ),
        (200, CacheStatus::Revalidated, 0)
    );
    assert_eq!(body(&revalidated), b"body");
    let refreshed = hit(cache.lookup(&policy(), None, &request, at(50)));
    assert_eq!(refreshed.age(), 30);
    let version = refreshed
        .headers()
        .find(|(n, _)| *n == b"X-Version")
        .map(|(_, v)| v.to_vec());
    assert_eq!(version, Some(b"2".to_vec()));
    assert_eq!(metrics.revalidated.get(), 1);
    assert_eq!(cache.stats().objects, 1);
}

/// A 304 is checked like a new response before the merged object is stored again (RFC 9111
/// §4.3.4 with §3): a cookie it sets reaches the client that asked, never the store; a 304
/// that makes the response `private` or `no-store`, sets a cookie under `set_cookie =
/// "pass"` or changes its `Vary` takes the object out of the cache.
#[test]
fn a_304_is_checked_again_before_it_is_stored() {
    // The cookies in the head this client is written (a hit's own lines included).
    let cookies = |hit: &Hit| {
        head_text(hit)
            .to_ascii_lowercase()
            .matches("set-cookie: session=alice\r\n")
            .count()
    };
    let revalidate =
        |cache: &Arc<Cache>, policy: &CachePolicy, request: &Req, fields: &[(&str, &str)]| {
            let exchange = forward(cache.lookup(policy, None, request, at(20)));
            let mut not_modified = Resp::new(304).header("ETag", "\"v1\"");
            for (name, value) in fields {
                not_modified = not_modified.header(name, value);
            }
            match cache.response(exchange, policy, None, request, &not_modified, at(20)) {
                Reply::Hit(hit) => hit,
                _ => panic!("a 304 is answered from the cache"),
            }
        };
    let stored = || {
        let (cache, _, _) = new_cache();
        let answer = node(
            200,
            &[("Cache-Control", "max-age=10"), ("ETag", "\"v1\"")],
            b"old",
        );
        fill(&cache, &Req::get("/c"), answer, T0);
        cache
    };
    let request = Req::get("/c");

    // set_cookie = "strip": stored again without the cookie, which this client gets.
    let strip = CachePolicy {
        set_cookie: SetCookie::Strip,
        ..policy()
    };
    let cache = stored();
    let first = revalidate(
        &cache,
        &strip,
        &request,
        &[
            ("Cache-Control", "max-age=100"),
            ("Set-Cookie", "session=ALICE"),
        ],
    );
    assert_eq!(
        (first.cache_status(), cookies(&first)),
        (CacheStatus::Revalidated, 1)
    );
    assert_eq!(body(&first), b"old");
    let next = hit(cache.lookup(&strip, None, &request, at(30)));
    assert_eq!((next.cache_status(), cookies(&next)), (CacheStatus::Hit, 0));

    // The same for a client whose own request was conditional: its 304 carries the cookie
    // (the stored fields a 304 repeats are only those RFC 9110 §15.4.5 lists).
    for cache_policy in [strip, policy()] {
        let cache = stored();
        let conditional = Req::get("/c").header("If-None-Match", "\"v1\"");
        let fields = [
            ("Cache-Control", "max-age=100"),
            ("Set-Cookie", "session=ALICE"),
        ];
        let answered = revalidate(&cache, &cache_policy, &conditional, &fields);
        assert_eq!(answered.status(), 304);
        assert_eq!(
            (answered.cache_status(), cookies(&answered)),
            (CacheStatus::Revalidated, 1)
        );
    }

    // Taken out: the client that asked is answered, the next one goes to the node.
    for fields in [
        &[
            ("Cache-Control", "max-age=100"),
            ("Set-Cookie", "session=ALICE"),
        ][..],
        &[("Cache-Control", "private, max-age=100")],
        &[("Cache-Control", "no-store, max-age=100")],
        &[("Cache-Control", "max-age=100"), ("Vary", "Cookie")],
        &[("Cache-Control", "max-age=100"), ("Vary", "*")],
    ] {
        let cache = stored();
        let first = revalidate(&cache, &policy(), &request, fields);
        assert_eq!(first.cache_status(), CacheStatus::Revalidated, "{fields:?}");
        assert_eq!(body(&first), b"old");
        assert!(
            matches!(
                cache.lookup(&policy(), None, &request, at(30)),
                Lookup::Forward(_)
            ),
            "{fields:?}: the object stays in the cache"
        );
        assert_eq!(cache.stats().objects, 0, "{fields:?}");
    }
}

/// A 304 whose strong validator is not the stored object's is about another representation
/// (RFC 9111 §4.3.4): the stored object is not served for it; the request goes again,
/// without validators, and what it brings is stored.
#[test]
fn a_304_for_another_representation_is_refetched_not_served() {
    let (cache, metrics, _) = new_cache();
    let request = Req::get("/r");
    let answer = node(
        200,
        &[("Cache-Control", "max-age=10"), ("ETag", "\"v1\"")],
        b"old",
    );
    fill(&cache, &request, answer, T0);
    let mut exchange = forward(cache.lookup(&policy(), None, &request, at(20)));
    assert_eq!(exchange.add_fields().count(), 1);
    let other = Resp::new(304)
        .header("Cache-Control", "max-age=100")
        .header("ETag", "\"v2\"");
    let mut again = match cache.response(exchange, &policy(), None, &request, &other, at(20)) {
        Reply::Refetch(again) => again,
        Reply::Hit(hit) => panic!("served {:?} for a 304 about another", hit.cache_status()),
        _ => panic!("neither refetched nor served"),
    };
    assert_eq!(
        again.add_fields().count(),
        0,
        "sent again without validators"
    );
    assert!(again.remove_fields().contains(&"if-none-match"));
    let (client, _) = respond(
        &cache,
        again,
        None,
        &request,
        node(
            200,
            &[("Cache-Control", "max-age=10"), ("ETag", "\"v2\"")],
            b"new",
        ),
        at(20),
    );
    let client = client.expect("stored and answered from the store");
    assert_eq!(client.cache_status(), CacheStatus::Expired);
    assert_eq!(body(&client), b"new");
    assert_eq!(
        body(&hit(cache.lookup(&policy(), None, &request, at(21)))),
        b"new"
    );
    assert_eq!(metrics.revalidated.get(), 0);
}

#[test]
fn a_stale_object_replaced_by_a_new_200() {
    let (cache, _, _) = new_cache();
    let request = Req::get("/n");
    fill(
        &cache,
        &request,
        node(
            200,
            &[("Cache-Control", "max-age=10"), ("ETag", "\"v1\"")],
            b"old",
        ),
        T0,
    );
    let exchange = forward(cache.lookup(&policy(), None, &request, at(20)));
    let (client, _) = respond(
        &cache,
        exchange,
        None,
        &request,
        node(
            200,
            &[("Cache-Control", "max-age=10"), ("ETag", "\"v2\"")],
            b"new",
        ),
        at(20),
    );
    assert_eq!(client.unwrap().cache_status(), CacheStatus::Expired);
    assert_eq!(
        body(&hit(cache.lookup(&policy(), None, &request, at(21)))),
        b"new"
    );
}

#[test]
fn stale_while_revalidate_serves_and_refreshes_once() {
    let (cache, metrics, _) = new_cache();
    let request = Req::get("/s");
    fill(
        &cache,
        &request,
        node(
            200,
            &[
                ("Cache-Control", "max-age=10, stale-while-revalidate=60"),
                ("ETag", "\"a\""),
            ],
            b"v1",
        ),
        T0,
    );
    let Lookup::Stale {
        hit: stale,
        refresh: Some(refresh),
    } = cache.lookup(&policy(), None, &request, at(20))
    else {
        panic!("expected a stale hit with a refresh");
    };
    assert_eq!(
        (stale.cache_status(), body(&stale)),
        (CacheStatus::Stale, b"v1".to_vec())
    );
    assert!(refresh.is_background());
    // A second request meanwhile: served stale, no second refresh.
    let Lookup::Stale { refresh: None, .. } = cache.lookup(&policy(), None, &request, at(21))
    else {
        panic!("only one refresh at a time");
    };
    respond(
        &cache,
        refresh,
        None,
        &request,
        node(200, &[("Cache-Control", "max-age=10")], b"v2"),
        at(22),
    );
    let fresh = hit(cache.lookup(&policy(), None, &request, at(23)));
    assert_eq!(body(&fresh), b"v2");
    assert_eq!(metrics.stale_served.get(), 2);
    // Past the window: validate first.
    assert!(matches!(
        cache.lookup(&policy(), None, &request, at(200)),
        Lookup::Forward(_)
    ));
}

/// Stores `body` for `request` at T0, fresh for 10 s and then servable on error for 100.
fn store_stale_if_error(cache: &Arc<Cache>, request: &Req, body: &[u8]) {
    let fields = [("Cache-Control", "max-age=10, stale-if-error=100")];
    fill(cache, request, node(200, &fields, body), T0);
}

/// A lookup for `request` at `now` goes to the node, which answers 503, and the cache
/// answers with its stale object (`stale-if-error`), whose body is `expected`.
fn assert_serves_stale_on_503(cache: &Arc<Cache>, request: &Req, now: UnixTime, expected: &[u8]) {
    let exchange = forward(cache.lookup(&policy(), None, request, now));
    let Reply::Hit(served) =
        cache.response(exchange, &policy(), None, request, &Resp::new(503), now)
    else {
        panic!("expected the stale object");
    };
    assert_eq!(
        (served.cache_status(), body(&served)),
        (CacheStatus::StaleIfError, expected.to_vec())
    );
}

#[test]
fn stale_if_error_with_a_failing_node() {
    let (cache, _, _) = new_cache();
    let request = Req::get("/f");
    store_stale_if_error(&cache, &request, b"kept");
    // The node answers 503: the stale object is served.
    assert_serves_stale_on_503(&cache, &request, at(20), b"kept");
    // The node is down (connect refused): the same.
    let exchange = forward(cache.lookup(&policy(), None, &request, at(30)));
    let served = cache
        .node_failed(exchange, &request, at(30))
        .expect("stale within stale-if-error");
    assert_eq!(served.status(), 200);
    // Past the window the error goes to the client.
    let exchange = forward(cache.lookup(&policy(), None, &request, at(200)));
    assert!(cache.node_failed(exchange, &request, at(200)).is_none());
    let exchange = forward(cache.lookup(&policy(), None, &request, at(200)));
    assert!(matches!(
        cache.response(
            exchange,
            &policy(),
            None,
            &request,
            &Resp::new(503),
            at(200)
        ),
        Reply::Forward(_)
    ));
}

#[test]
fn only_if_cached() {
    let (cache, _, _) = new_cache();
    let request = Req::get("/o").header("Cache-Control", "only-if-cached");
    assert!(matches!(
        cache.lookup(&policy(), None, &request, T0),
        Lookup::OnlyIfCachedMiss
    ));
    fill(
        &cache,
        &Req::get("/o"),
        node(200, &[("Cache-Control", "max-age=10")], b"x"),
        T0,
    );
    assert!(matches!(
        cache.lookup(&policy(), None, &request, at(5)),
        Lookup::Hit(_)
    ));
    assert!(matches!(
        cache.lookup(&policy(), None, &request, at(50)),
        Lookup::OnlyIfCachedMiss
    ));
}

#[test]
fn client_cache_control_can_be_ignored() {
    let (cache, _, _) = new_cache();
    fill(
        &cache,
        &Req::get("/i"),
        node(200, &[("Cache-Control", "max-age=60")], b"x"),
        T0,
    );
    let reload = Req::get("/i").header("Cache-Control", "no-cache");
    assert!(matches!(
        cache.lookup(&policy(), None, &reload, T0),
        Lookup::Forward(_)
    ));
    let deaf = CachePolicy {
        request_directives: false,
        ..policy()
    };
    assert!(matches!(
        cache.lookup(&deaf, None, &reload, T0),
        Lookup::Hit(_)
    ));
}

#[test]
fn unsafe_methods_invalidate() {
    let (cache, _, _) = new_cache();
    for path in ["/u", "/u/list"] {
        fill(
            &cache,
            &Req::get(path),
            node(200, &[("Cache-Control", "max-age=60")], b"x"),
            T0,
        );
    }
    let post = Req::new("POST", "/u");
    let exchange = forward(cache.lookup(&policy(), None, &post, T0));
    assert!(!exchange.is_cacheable());
    let created = Resp::new(201).header("Location", "/u/list");
    cache.response(exchange, &policy(), None, &post, &created, T0);
    assert_eq!(cache.stats().objects, 0);
}

#[test]
fn purge_by_url_prefix_tag_and_ban() {
    let (cache, _, _) = new_cache();
    let store = |path: &str, tags: &str| {
        fill(
            &cache,
            &Req::get(path),
            node(
                200,
                &[("Cache-Control", "max-age=600"), ("Surrogate-Key", tags)],
                b"x",
            ),
            T0,
        );
    };
    store("/a", "red");
    store("/static/1.css", "blue");
    store("/static/2.css", "blue red");
    store("/img/3.png", "green");
    store("/img/4.png", "green");
    assert_eq!(cache.stats().objects, 5);
    assert_eq!(cache.purge_url("http://EXAMPLE.com:80/a"), Ok(1));
    assert_eq!(cache.purge_url("http://example.com/a"), Ok(0));
    assert!(cache.purge_url("example.com/a").is_err());
    assert_eq!(cache.purge_tag("red"), 1);
    assert_eq!(cache.purge_prefix("http://example.com/static/"), Ok(1));
    assert_eq!(cache.stats().objects, 2);

    // A ban applies to objects stored before it, lazily at lookup.
    cache.ban("\\.png$", at(1)).unwrap();
    assert!(cache.ban("(", at(1)).is_err());
    assert!(matches!(
        cache.lookup(&policy(), None, &Req::get("/img/3.png"), at(2)),
        Lookup::Forward(_)
    ));
    // Stored after the ban: not banned.
    store("/img/5.png", "green");
    assert!(matches!(
        cache.lookup(&policy(), None, &Req::get("/img/5.png"), at(3)),
        Lookup::Hit(_)
    ));
    // The background walk removes the rest and drops the ban.
    assert_eq!(cache.bans().len(), 1);
    assert_eq!(cache.maintain(), 1);
    assert!(cache.bans().is_empty());
    assert!(matches!(
        cache.lookup(&policy(), None, &Req::get("/img/5.png"), at(4)),
        Lookup::Hit(_)
    ));
    assert_eq!(cache.purge_all(), 1);
}

#[test]
fn purge_by_origin_prefix() {
    let (cache, _, _) = new_cache();
    fill(
        &cache,
        &Req::get("/a"),
        node(200, &[("Cache-Control", "max-age=60")], b"x"),
        T0,
    );
    fill(
        &cache,
        &Req::get("/a").authority("example.com.evil"),
        node(200, &[("Cache-Control", "max-age=60")], b"x"),
        T0,
    );
    assert_eq!(
        cache.purge_prefix("http://example.com"),
        Ok(2),
        "a bare origin is a prefix of its host names"
    );
}

fn compression() -> CompressionPolicy {
    CompressionPolicy {
        min_size: 100,
        ..CompressionPolicy::default()
    }
}

fn text_body() -> Vec<u8> {
    (0..400)
        .flat_map(|i| format!("line {i} of a compressible page\n").into_bytes())
        .collect()
}

#[test]
fn each_compressed_variant_is_stored_once() {
    let (cache, _, counters) = new_cache();
    let compression = compression();
    let page = text_body();
    let answer = || {
        node(
            200,
            &[
                ("Cache-Control", "max-age=60"),
                ("Content-Type", "text/html"),
                ("ETag", "\"s\""),
            ],
            &page,
        )
    };
    let browser = Req::get("/page").header("Accept-Encoding", "gzip, deflate, br, zstd");
    let exchange = forward(cache.lookup(&policy(), Some(&compression), &browser, T0));
    let (served, _) = respond(&cache, exchange, Some(&compression), &browser, answer(), T0);
    assert_eq!(served.unwrap().cache_status(), CacheStatus::Miss);
    let zstd_in = counters.bytes_in[2].get();
    assert_eq!(zstd_in, page.len() as u64);

    // Another client with the same best coding (and a different header) shares the variant.
    let other = Req::get("/page").header("accept-encoding", "zstd, gzip");
    let shared = hit(cache.lookup(&policy(), Some(&compression), &other, T0));
    let fields: Vec<(Vec<u8>, Vec<u8>)> = shared
        .headers()
        .map(|(n, v)| (n.to_vec(), v.to_vec()))
        .collect();
    assert!(fields.contains(&(b"Content-Encoding".to_vec(), b"zstd".to_vec())));
    assert!(fields.contains(&(b"ETag".to_vec(), b"W/\"s\"".to_vec())));
    assert!(fields.contains(&(b"Vary".to_vec(), b"Accept-Encoding".to_vec())));
    assert_eq!(zstd::decode_all(&body(&shared)[..]).unwrap(), page);
    for _ in 0..10 {
        hit(cache.lookup(&policy(), Some(&compression), &other, T0));
    }
    assert_eq!(
        counters.bytes_in[2].get(),
        zstd_in,
        "hits are not compressed again"
    );

    // A gzip-only client and an identity client are other variants.
    let gzip_only = Req::get("/page").header("Accept-Encoding", "gzip");
    let exchange = forward(cache.lookup(&policy(), Some(&compression), &gzip_only, T0));
    respond(
        &cache,
        exchange,
        Some(&compression),
        &gzip_only,
        answer(),
        T0,
    );
    let plain = Req::get("/page");
    let exchange = forward(cache.lookup(&policy(), Some(&compression), &plain, T0));
    respond(&cache, exchange, Some(&compression), &plain, answer(), T0);
    let identity = hit(cache.lookup(&policy(), Some(&compression), &plain, T0));
    assert_eq!(body(&identity), page);
    assert!(identity.headers().all(|(n, _)| n != b"Content-Encoding"));
    assert_eq!(cache.stats().objects, 3);
    // The stored charge follows the compressed size, not the reservation.
    assert!(
        cache.stats().bytes < 2 * page.len() + 8 * 1024,
        "{:?}",
        cache.stats()
    );
}

#[test]
fn no_double_compression_and_no_transform() {
    let (cache, _, _) = new_cache();
    let compression = compression();
    let browser = Req::get("/gz").header("Accept-Encoding", "gzip, br");
    let exchange = forward(cache.lookup(&policy(), Some(&compression), &browser, T0));
    let (response, body) = node(
        200,
        &[
            ("Content-Type", "text/html"),
            ("Content-Encoding", "gzip"),
            ("Cache-Control", "no-store"),
        ],
        &text_body(),
    );
    let Reply::Forward(forward_reply) = cache.response(
        exchange,
        &policy(),
        Some(&compression),
        &browser,
        &response,
        T0,
    ) else {
        panic!("expected a pass");
    };
    assert!(forward_reply.edits.is_none() && forward_reply.compressor.is_none());
    let _ = body;

    let strict = Req::get("/nt")
        .header("Accept-Encoding", "gzip")
        .header("Cache-Control", "no-transform");
    let exchange = forward(cache.lookup(&policy(), Some(&compression), &strict, T0));
    let (response, _) = node(
        200,
        &[("Content-Type", "text/html"), ("Cache-Control", "no-store")],
        &text_body(),
    );
    let Reply::Forward(reply) = cache.response(
        exchange,
        &policy(),
        Some(&compression),
        &strict,
        &response,
        T0,
    ) else {
        panic!("expected a pass");
    };
    assert_eq!(
        reply.edits.map(|edits| edits.coding),
        Some(Coding::Identity)
    );
    assert!(reply.compressor.is_none());
}

/// The node's answer to a miss, after 50 ms (the node takes a while): stored for a minute,
/// and what the missing client gets of it.
async fn slow_fill(
    cache: &Arc<Cache>,
    exchange: Exchange,
    request: &Req,
    answer: &'static [u8],
) -> Vec<u8> {
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let (response, body) = node(200, &[("Cache-Control", "max-age=60")], answer);
    let Reply::Fill(mut fill) = cache.response(
        exchange,
        &policy(),
        None,
        request,
        &response,
        UnixTime::now(),
    ) else {
        panic!("expected a fill");
    };
    let client = fill.take_hit().unwrap();
    fill.push(body).unwrap();
    fill.finish().unwrap();
    collect(client).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thousand_concurrent_misses_make_one_node_request() {
    let (cache, metrics, _) = new_cache();
    let node_requests = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(tokio::sync::Barrier::new(1000));
    let tasks: Vec<_> = (0..1000)
        .map(|_| {
            let (cache, node_requests, start) = (
                Arc::clone(&cache),
                Arc::clone(&node_requests),
                Arc::clone(&start),
            );
            tokio::spawn(async move {
                let request = Req::get("/cold");
                start.wait().await;
                match cache.lookup_coalesced(&policy(), None, &request).await {
                    Lookup::Hit(hit) => collect(hit).await,
                    Lookup::Forward(exchange) => {
                        node_requests.fetch_add(1, Ordering::SeqCst);
                        slow_fill(&cache, exchange, &request, b"the one answer").await
                    }
                    other => panic!("unexpected {other:?}"),
                }
            })
        })
        .collect();
    for task in tasks {
        assert_eq!(task.await.unwrap(), b"the one answer");
    }
    assert_eq!(node_requests.load(Ordering::SeqCst), 1);
    assert_eq!(metrics.misses.get(), 1);
    // Every other request was answered from the cache, most after waiting.
    assert_eq!(metrics.hits.get(), 999);
    assert!(metrics.coalesced.get() > 900, "{}", metrics.coalesced.get());
}

/// Reads a hit's body to the end, following a growing one.
async fn collect(hit: Hit) -> Vec<u8> {
    match hit.body() {
        HitBody::Growing(mut reader) => {
            let mut out = Vec::new();
            while let Some(chunk) = reader.next().await.unwrap() {
                out.extend_from_slice(&chunk);
            }
            out
        }
        _ => body(&hit),
    }
}

#[tokio::test]
async fn a_slow_reader_never_blocks_other_hits() {
    let (cache, _, _) = new_cache();
    let request = Req::get("/big");
    let exchange = forward(cache.lookup(&policy(), None, &request, T0));
    let response = Resp::new(200)
        .header("Cache-Control", "max-age=60")
        .header("Content-Length", "30000");
    let Reply::Fill(mut fill) = cache.response(exchange, &policy(), None, &request, &response, T0)
    else {
        panic!("expected a fill");
    };
    let slow = fill.take_hit().unwrap();
    let HitBody::Growing(mut slow_reader) = slow.body() else {
        panic!("the leader reads the growing body");
    };
    fill.push(Bytes::from(vec![b'a'; 10_000])).unwrap();
    // The slow client reads one chunk, then stops reading.
    assert_eq!(slow_reader.next().await.unwrap().unwrap().len(), 10_000);
    // Meanwhile another client hits the object that is still filling ...
    let fast = hit(cache.lookup(&policy(), None, &request, T0));
    assert_eq!(fast.content_length(), Some(30_000));
    let fast_body = tokio::spawn(collect(fast));
    // ... and the fill goes on at the node's pace.
    fill.push(Bytes::from(vec![b'b'; 10_000])).unwrap();
    fill.push(Bytes::from(vec![b'c'; 10_000])).unwrap();
    fill.finish().unwrap();
    assert_eq!(fast_body.await.unwrap().len(), 30_000);
    // Later hits read the completed object; the slow reader is still on chunk 2.
    assert_eq!(
        body(&hit(cache.lookup(&policy(), None, &request, T0))).len(),
        30_000
    );
    assert_eq!(slow_reader.next().await.unwrap().unwrap()[0], b'b');
}

/// A range asked of an object still filling, whose length the node declared, is answered
/// 206 as its bytes arrive: the leader's own range (which the fill did not send to the node)
/// and a later client's, each reading only its window of the growing body.
#[tokio::test]
async fn ranges_from_an_object_still_filling() {
    let (cache, _, _) = new_cache();
    let leader_request = Req::get("/growing").header("Range", "bytes=3-5");
    let exchange = forward(cache.lookup(&policy(), None, &leader_request, T0));
    assert!(exchange.remove_fields().contains(&"range"));
    let response = Resp::new(200)
        .header("Cache-Control", "max-age=60")
        .header("Content-Length", "10");
    let Reply::Fill(mut fill) =
        cache.response(exchange, &policy(), None, &leader_request, &response, T0)
    else {
        panic!("expected a fill");
    };
    let leader = fill.take_hit().unwrap();
    assert_eq!((leader.status(), leader.content_length()), (206, Some(3)));
    assert_eq!(leader.content_range().as_deref(), Some("bytes 3-5/10"));
    let leader_body = tokio::spawn(collect(leader));
    fill.push(Bytes::from_static(b"0123")).unwrap();
    // A second client asks for the tail while the object is still growing.
    let tail = hit(cache.lookup(
        &policy(),
        None,
        &Req::get("/growing").header("Range", "bytes=-2"),
        T0,
    ));
    assert_eq!(tail.content_range().as_deref(), Some("bytes 8-9/10"));
    let tail_body = tokio::spawn(collect(tail));
    let beyond = hit(cache.lookup(
        &policy(),
        None,
        &Req::get("/growing").header("Range", "bytes=10-"),
        T0,
    ));
    assert_eq!(
        (beyond.status(), beyond.content_range().as_deref()),
        (416, Some("bytes */10"))
    );
    fill.push(Bytes::from_static(b"456")).unwrap();
    // The leader's window is complete before the fill is: its body ends there.
    assert_eq!(leader_body.await.unwrap(), b"345");
    fill.push(Bytes::from_static(b"789")).unwrap();
    fill.finish().unwrap();
    assert_eq!(tail_body.await.unwrap(), b"89");
}

/// A miss for `request` answered by a cacheable 200 of unknown length (chunked), and a
/// second request for it waiting on that fill.
fn chunked_fill(cache: &Arc<Cache>, request: &Req) -> (weir_cache::Fill, weir_cache::Waiter) {
    let Lookup::Forward(exchange) = cache.lookup(&policy(), None, request, T0) else {
        panic!()
    };
    let Lookup::Wait(waiter) = cache.lookup(&policy(), None, request, T0) else {
        panic!("a second request waits");
    };
    let response = Resp::new(200)
        .header("Cache-Control", "max-age=60")
        .header("Transfer-Encoding", "chunked");
    let Reply::Fill(fill) = cache.response(exchange, &policy(), None, request, &response, T0)
    else {
        panic!()
    };
    (fill, waiter)
}

#[tokio::test]
async fn an_unknown_length_is_stored_once_complete() {
    let (cache, _, _) = new_cache();
    let request = Req::get("/chunked");
    let (mut fill, waiter) = chunked_fill(&cache, &request);
    assert!(
        fill.take_hit().is_none(),
        "the client gets the node's bytes as they pass"
    );
    assert_eq!(
        &fill.push(Bytes::from_static(b"part one, ")).unwrap()[..],
        b"part one, "
    );
    assert!(matches!(
        cache.lookup(
            &policy(),
            None,
            &Req::get("/chunked").header("Cache-Control", "only-if-cached"),
            T0
        ),
        Lookup::OnlyIfCachedMiss
    ));
    fill.push(Bytes::from_static(b"part two")).unwrap();
    fill.finish().unwrap();
    assert_eq!(waiter.wait().await, weir_cache::WaitOutcome::LookUpAgain);
    assert_eq!(
        body(&hit(cache.lookup(&policy(), None, &request, T0))),
        b"part one, part two"
    );
}

/// A body of unknown length that grows past `max_object_size` is remembered as a pass, as
/// one whose declared length is past it: the next requests go to the node as they are
/// (their ranges and conditionals with them), not each fetching the whole body again.
#[tokio::test]
async fn an_unknown_length_past_the_limit_is_remembered_as_a_pass() {
    let (cache, _, _) = new_cache();
    let request = Req::get("/big-chunked").header("Range", "bytes=0-9");
    let (mut fill, waiter) = chunked_fill(&cache, &request);
    for _ in 0..5 {
        fill.push(Bytes::from(vec![b'x'; 64 << 10])).unwrap();
    }
    assert_eq!(waiter.wait().await, weir_cache::WaitOutcome::GoToNode);
    fill.finish().unwrap();
    assert_eq!(cache.stats().objects, 0);
    for _ in 0..2 {
        let exchange = forward(cache.lookup(&policy(), None, &request, T0));
        assert!(
            exchange.remove_fields().is_empty(),
            "a pass: the request's Range goes to the node"
        );
    }
}

#[tokio::test]
async fn an_aborted_fill_stores_nothing_and_releases_waiters() {
    let (cache, _, _) = new_cache();
    let request = Req::get("/broken");
    let Lookup::Forward(exchange) = cache.lookup(&policy(), None, &request, T0) else {
        panic!()
    };
    let response = Resp::new(200)
        .header("Cache-Control", "max-age=60")
        .header("Content-Length", "100");
    let Reply::Fill(mut fill) = cache.response(exchange, &policy(), None, &request, &response, T0)
    else {
        panic!()
    };
    let client = fill.take_hit().unwrap();
    let HitBody::Growing(mut reader) = client.body() else {
        panic!()
    };
    fill.push(Bytes::from_static(b"partial")).unwrap();
    fill.abort();
    assert_eq!(reader.next().await.unwrap().unwrap(), &b"partial"[..]);
    assert!(
        reader.next().await.is_err(),
        "the reader learns the body broke"
    );
    assert_eq!(cache.stats().objects, 0);
    assert!(matches!(
        cache.lookup(&policy(), None, &request, T0),
        Lookup::Forward(_)
    ));
}

#[tokio::test]
async fn an_uncacheable_key_is_not_coalesced_for_a_while() {
    let (cache, _, _) = new_cache();
    let request = Req::get("/private");
    let Lookup::Forward(exchange) = cache.lookup(&policy(), None, &request, T0) else {
        panic!()
    };
    let Lookup::Wait(waiter) = cache.lookup(&policy(), None, &request, T0) else {
        panic!()
    };
    let private = Resp::new(200).header("Cache-Control", "private");
    assert!(matches!(
        cache.response(exchange, &policy(), None, &request, &private, T0),
        Reply::Forward(_)
    ));
    assert_eq!(waiter.wait().await, weir_cache::WaitOutcome::GoToNode);
    // Next misses go straight to the node, without queueing behind one another.
    assert!(matches!(
        cache.lookup(&policy(), None, &request, T0),
        Lookup::Forward(_)
    ));
    assert!(matches!(
        cache.lookup(&policy(), None, &request, T0),
        Lookup::Forward(_)
    ));
}

/// A request that waited for a fill that could not be stored goes on to the node as a pass,
/// with its conditionals and `Range`, so that the node answers its 304 or 206: the fill's
/// answer said the key is not storable before the waiter left for the node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_on_a_fill_that_was_not_stored_keeps_its_conditionals() {
    let (cache, _, _) = new_cache();
    let leader = Req::get("/w");
    let exchange = forward(cache.lookup(&policy(), None, &leader, T0));
    let conditional = Req::get("/w").header("If-None-Match", "\"v1\"");
    let first = cache.lookup(&policy(), None, &conditional, T0);
    assert!(matches!(first, Lookup::Wait(_)), "{first:?}");
    let waiting = {
        let cache = Arc::clone(&cache);
        tokio::spawn(async move {
            cache
                .coalesced_from(first, &policy(), None, &conditional)
                .await
        })
    };
    let private = Resp::new(200).header("Cache-Control", "private");
    assert!(matches!(
        cache.response(exchange, &policy(), None, &leader, &private, T0),
        Reply::Forward(_)
    ));
    let sent = forward(waiting.await.expect("the waiter's lookup"));
    assert!(sent.remove_fields().is_empty(), "a pass, as sent");
}

/// `weir_cache_coalesced_total` counts a waiter once, and only when the fill it waited for
/// answered it; one the fill could not answer goes to the node and is not counted. The
/// `waiting` gauge follows the waiters.
/// A leader whose client left before the node answered hands the flight on: one waiter goes
/// to the node and the others wait on it, where all of them went to the node at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_client_left_hands_the_flight_to_one_waiter() {
    let (cache, metrics, _) = new_cache();
    let request = Req::get("/abandoned");
    let now = UnixTime::now();
    let leader = forward(cache.lookup(&policy(), None, &request, now));
    let node_requests = Arc::new(AtomicUsize::new(0));
    let waiters: Vec<_> = (0..8)
        .map(|_| {
            let first = cache.lookup(&policy(), None, &request, now);
            assert!(matches!(first, Lookup::Wait(_)), "{first:?}");
            let (cache, node_requests) = (Arc::clone(&cache), Arc::clone(&node_requests));
            tokio::spawn(async move {
                let request = Req::get("/abandoned");
                match cache.coalesced_from(first, &policy(), None, &request).await {
                    Lookup::Hit(hit) => collect(hit).await,
                    Lookup::Forward(exchange) => {
                        node_requests.fetch_add(1, Ordering::SeqCst);
                        slow_fill(&cache, exchange, &request, b"second try").await
                    }
                    other => panic!("unexpected {other:?}"),
                }
            })
        })
        .collect();
    assert_eq!(metrics.waiting.get(), 8);
    // The leader's client leaves before the node's answer.
    cache.abandoned(leader);
    for waiter in waiters {
        assert_eq!(waiter.await.unwrap(), b"second try");
    }
    assert_eq!(node_requests.load(Ordering::SeqCst), 1, "one waiter led");
    assert_eq!(metrics.waiting.get(), 0);
}

#[tokio::test]
async fn coalesced_counts_the_waiters_a_fill_answered() {
    let (cache, metrics, _) = new_cache();
    // The waiter looks up again at the time of the day: the object is stored then too.
    let now = UnixTime::now();
    for (path, cache_control, spared) in [("/private", "private", 0), ("/shared", "max-age=60", 1)]
    {
        let request = Req::get(path);
        let exchange = forward(cache.lookup(&policy(), None, &request, now));
        let first = cache.lookup(&policy(), None, &request, now);
        assert!(matches!(first, Lookup::Wait(_)));
        assert_eq!(metrics.waiting.get(), 1);
        let waiter = {
            let cache = Arc::clone(&cache);
            let request = Req::get(path);
            tokio::spawn(async move {
                let after = cache.coalesced_from(first, &policy(), None, &request).await;
                matches!(after, Lookup::Forward(_))
            })
        };
        let (response, body) = node(200, &[("Cache-Control", cache_control)], b"answer");
        match cache.response(exchange, &policy(), None, &request, &response, now) {
            Reply::Fill(mut fill) => {
                drop(fill.take_hit());
                fill.push(body).unwrap();
                fill.finish().unwrap();
            }
            Reply::Forward(_) => {}
            other => panic!("unexpected {other:?}"),
        }
        let went_to_node = waiter.await.unwrap();
        assert_eq!(went_to_node, spared == 0, "{path}");
        assert_eq!(metrics.waiting.get(), 0, "{path}");
        assert_eq!(metrics.coalesced.get(), spared, "{path}");
    }
}

/// When the node fails a revalidation that others wait on, and the stale object may be
/// served on error, the waiters serve it at once: none asks the failing node again (and
/// none waits for its timeout a second time).
#[tokio::test]
async fn waiters_on_a_failed_revalidation_serve_the_stale_object() {
    let (cache, metrics, _) = new_cache();
    let request = Req::get("/w");
    let now = UnixTime::now();
    let response = node(
        200,
        &[("Cache-Control", "max-age=10, stale-if-error=100")],
        b"kept",
    );
    fill(&cache, &request, response, UnixTime(now.0 - 20));
    let leader = forward(cache.lookup(&policy(), None, &request, now));
    let first = cache.lookup(&policy(), None, &request, now);
    assert!(matches!(first, Lookup::Wait(_)), "{first:?}");
    let waiter = {
        let cache = Arc::clone(&cache);
        tokio::spawn(async move {
            let request = Req::get("/w");
            cache.coalesced_from(first, &policy(), None, &request).await
        })
    };
    let served = cache
        .node_failed(leader, &request, now)
        .expect("stale within stale-if-error");
    assert_eq!(served.cache_status(), CacheStatus::StaleIfError);
    let Lookup::Stale { hit, refresh } = waiter.await.unwrap() else {
        panic!("the waiter serves the stale object");
    };
    assert!(refresh.is_none(), "no request to the failing node");
    assert_eq!(
        (hit.cache_status(), body(&hit)),
        (CacheStatus::StaleIfError, b"kept".to_vec())
    );
    assert_eq!(metrics.stale_served.get(), 2);
}

/// A ban added while a body of unknown length fills (out of the store until complete)
/// applies to it even when the background check has dropped the ban before the fill
/// ends: the fill is tested at its end, and not stored when the ban matches or can no
/// longer be known. A ban that does not match it leaves it stored.
#[tokio::test]
async fn a_ban_during_a_fill_of_unknown_length_reaches_it() {
    let (cache, _, _) = new_cache();
    let request = Req::get("/banned-while-filling");
    let (mut fill, waiter) = chunked_fill(&cache, &request);
    fill.push(Bytes::from_static(b"before the ban")).unwrap();
    cache.ban("banned-while", at(1)).unwrap();
    // The background check runs before the body ends, and drops the ban.
    cache.maintain();
    assert!(cache.bans().is_empty());
    fill.finish().unwrap();
    assert_eq!(waiter.wait().await, weir_cache::WaitOutcome::GoToNode);
    assert_eq!(cache.stats().objects, 0);
    assert!(matches!(
        cache.lookup(&policy(), None, &request, at(2)),
        Lookup::Forward(_)
    ));
    // A ban for something else, still listed at the end: the fill is stored.
    let other = Req::get("/kept-while-filling");
    let (mut fill, _) = chunked_fill(&cache, &other);
    fill.push(Bytes::from_static(b"kept")).unwrap();
    cache.ban("^nothing-here$", at(3)).unwrap();
    fill.finish().unwrap();
    assert_eq!(
        body(&hit(cache.lookup(&policy(), None, &other, at(4)))),
        b"kept"
    );
}

/// A refresh whose body breaks off after its head (the object it fills took the stale
/// one's place) leaves the stale object stored, so `stale-if-error` still serves it.
#[tokio::test]
async fn a_refresh_that_breaks_off_keeps_the_stale_object() {
    let (cache, _, _) = new_cache();
    let request = Req::get("/refreshed");
    store_stale_if_error(&cache, &request, b"kept");
    let exchange = forward(cache.lookup(&policy(), None, &request, at(20)));
    let response = Resp::new(200)
        .header("Cache-Control", "max-age=10, stale-if-error=100")
        .header("Content-Length", "100");
    let Reply::Fill(mut refresh) =
        cache.response(exchange, &policy(), None, &request, &response, at(20))
    else {
        panic!("a fill for the new answer");
    };
    refresh
        .push(Bytes::from_static(b"part of the new"))
        .unwrap();
    refresh.abort();
    assert_eq!(cache.stats().objects, 1, "the stale object is back");
    // The node now fails: the stale object is served.
    assert_serves_stale_on_503(&cache, &request, at(21), b"kept");
}

/// A refresh whose body breaks off after a purge by a tag of the copy it replaced (the new
/// response no longer carries it) does not put that copy back: the purge was meant for it.
#[tokio::test]
async fn a_refresh_that_breaks_off_after_a_tag_purge_keeps_the_old_copy_out() {
    let (cache, _, _) = new_cache();
    let request = Req::get("/tagged");
    let fields = [
        ("Cache-Control", "max-age=10, stale-if-error=100"),
        ("Surrogate-Key", "release-41"),
    ];
    fill(&cache, &request, node(200, &fields, b"old"), T0);
    let exchange = forward(cache.lookup(&policy(), None, &request, at(20)));
    let response = Resp::new(200)
        .header("Cache-Control", "max-age=10")
        .header("Surrogate-Key", "release-42")
        .header("Content-Length", "100");
    let Reply::Fill(mut refresh) =
        cache.response(exchange, &policy(), None, &request, &response, at(20))
    else {
        panic!("a fill for the new answer");
    };
    refresh.push(Bytes::from_static(b"part")).unwrap();
    // The old copy is out of the store while the new one fills: the purge finds nothing.
    assert_eq!(cache.purge_tag("release-41"), 0);
    refresh.abort();
    assert_eq!(cache.stats().objects, 0, "the purged copy came back");
    forward(cache.lookup(&policy(), None, &request, at(21)));
}

/// A purge, or a ban, made while a revalidation is out keeps the object out of the store
/// when the node's 304 comes: this client, whose request came first, is answered from it;
/// the next one fetches the whole response again.
#[test]
fn a_purge_or_a_ban_during_a_revalidation_keeps_the_object_out() {
    for withdraw in ["purge", "ban"] {
        let (cache, _, _) = new_cache();
        let request = Req::get("/doc");
        let answer = node(
            200,
            &[("Cache-Control", "max-age=10"), ("ETag", "\"v1\"")],
            b"v1",
        );
        fill(&cache, &request, answer, T0);
        let exchange = forward(cache.lookup(&policy(), None, &request, at(20)));
        match withdraw {
            "purge" => assert_eq!(cache.purge_url("http://example.com/doc"), Ok(1)),
            _ => {
                cache.ban("^http://example.com/doc", at(20)).unwrap();
            }
        }
        let not_modified = Resp::new(304)
            .header("Cache-Control", "max-age=100")
            .header("ETag", "\"v1\"");
        let Reply::Hit(answered) =
            cache.response(exchange, &policy(), None, &request, &not_modified, at(20))
        else {
            panic!("{withdraw}: the 304 answers this client");
        };
        assert_eq!(body(&answered), b"v1");
        forward(cache.lookup(&policy(), None, &request, at(21)));
        assert_eq!(cache.stats().objects, 0, "{withdraw}: stored again");
    }
}

/// In a full store, a new object larger than the small queue's share is not evicted by
/// its own insertion: the requests waiting on its fill find it.
#[tokio::test]
async fn a_large_new_object_survives_its_own_insertion() {
    let metrics = CacheMetrics::default();
    let cache = Cache::new(
        StoreSettings {
            size: 4 << 20,
            max_object_size: 1 << 20,
        },
        metrics,
        CompressionMetrics::default(),
    );
    let policy = CachePolicy {
        max_object_size: 1 << 20,
        ..CachePolicy::default()
    };
    let store = |path: &str, size: usize| {
        let request = Req::get(path);
        let exchange = forward(cache.lookup(&policy, None, &request, T0));
        let answer = node(200, &[("Cache-Control", "max-age=600")], &vec![b'x'; size]);
        match cache.response(exchange, &policy, None, &request, &answer.0, T0) {
            Reply::Fill(mut fill) => {
                fill.push(answer.1).unwrap();
                fill.finish().unwrap();
            }
            _ => panic!("expected a fill"),
        }
    };
    // Fill the store with objects that are hit (so they go to the main queue).
    for index in 0..60 {
        let path = format!("/hot/{index}");
        store(&path, 64 << 10);
        let _ = cache.lookup(&policy, None, &Req::get(&path), T0);
    }
    store("/large", 600 << 10);
    assert!(
        matches!(
            cache.lookup(&policy, None, &Req::get("/large"), T0),
            Lookup::Hit(_)
        ),
        "the new object was evicted by its own insertion"
    );
}

/// The same with other variants of the resource stored: the refresh of one variant that
/// breaks off puts that variant back beside the others.
#[tokio::test]
async fn a_refresh_of_one_variant_that_breaks_off_keeps_it() {
    let (cache, _, _) = new_cache();
    let fields = [
        ("Cache-Control", "max-age=10, stale-if-error=100"),
        ("Vary", "X-V"),
    ];
    let variant = |value: &str| Req::get("/varied").header("X-V", value);
    fill(&cache, &variant("a"), node(200, &fields, b"variant a"), T0);
    fill(&cache, &variant("b"), node(200, &fields, b"variant b"), T0);
    let exchange = forward(cache.lookup(&policy(), None, &variant("a"), at(20)));
    let response = Resp::new(200)
        .header("Cache-Control", "max-age=10, stale-if-error=100")
        .header("Vary", "X-V")
        .header("Content-Length", "100");
    let Reply::Fill(refresh) =
        cache.response(exchange, &policy(), None, &variant("a"), &response, at(20))
    else {
        panic!("a fill for the new answer");
    };
    refresh.abort();
    assert_eq!(cache.stats().objects, 2, "variant a is back beside b");
    assert_serves_stale_on_503(&cache, &variant("a"), at(21), b"variant a");
    assert_serves_stale_on_503(&cache, &variant("b"), at(21), b"variant b");
}

/// Bodies of unknown length, held apart from the store until complete, hold at most the
/// cache's `size` all together (`weir_cache_bytes_filling`): past it a fill stops storing
/// and its client still gets the bytes as they pass. Each held up to `max_object_size`,
/// with no bound on how many (fills whose clients had left kept reading for the store).
#[tokio::test]
async fn fills_of_unknown_length_hold_at_most_the_cache_size_apart() {
    let (cache, metrics, _) = new_cache();
    let chunk = Bytes::from(vec![b'x'; 200 << 10]);
    let mut fills = Vec::new();
    for index in 0..25 {
        let request = Req::get(&format!("/chunked/{index}"));
        let (mut fill, _waiter) = chunked_fill(&cache, &request);
        assert_eq!(fill.push(chunk.clone()).unwrap(), chunk, "fill {index}");
        fills.push(fill);
    }
    // 4 MiB holds twenty of them, not the next five.
    let storing = fills.iter().filter(|fill| fill.is_storing()).count();
    assert_eq!(storing, 20);
    assert_eq!(metrics.bytes_filling.get(), 20 * (200 << 10));
    assert!(!fills[20].is_storing() && !fills[24].is_storing());
    // One that ends gives its room back; the others are stored as they complete.
    drop(fills.remove(0));
    assert_eq!(metrics.bytes_filling.get(), 19 * (200 << 10));
    for fill in fills {
        fill.finish().unwrap();
    }
    assert_eq!(metrics.bytes_filling.get(), 0);
    // (Each shard holds a quarter of the size: some of them evicted others.)
    let stats = cache.stats();
    assert_eq!(stats.objects as u64 + stats.evictions, 19);
}

/// A body of known length that left the store while filling (evicted or purged) ends its
/// fill at once when no client reads it any more: the rest would be read from the node
/// for no one. One a client still reads goes on, its bytes counted apart from the store.
#[tokio::test]
async fn a_fill_that_left_the_store_ends_when_no_one_reads_it() {
    let (cache, metrics, _) = new_cache();
    let half = Bytes::from(vec![b'y'; 100 << 10]);
    let start = |path: &str| {
        let request = Req::get(path);
        let exchange = forward(cache.lookup(&policy(), None, &request, T0));
        let response = Resp::new(200)
            .header("Cache-Control", "max-age=60")
            .header("Content-Length", &(200 << 10).to_string());
        let Reply::Fill(mut fill) =
            cache.response(exchange, &policy(), None, &request, &response, T0)
        else {
            panic!("a fill");
        };
        let client = fill.take_hit().expect("the client reads the store");
        let HitBody::Growing(reader) = client.body() else {
            panic!("a growing body");
        };
        fill.push(half.clone()).unwrap();
        (fill, reader)
    };
    // Its client left, then the object was purged: the next bytes end the fill.
    let (mut abandoned, reader) = start("/left");
    drop(reader);
    assert_eq!(cache.purge_url("http://example.com/left"), Ok(1));
    fill_rest(&mut abandoned, &half);
    assert!(!abandoned.is_storing());
    assert_eq!(metrics.bytes_filling.get(), 0);
    // Or, while the node pauses, the watch the relay waits on beside it says so at once.
    let (mut paused, reader) = start("/paused");
    let watch = paused.orphan_watch().expect("a body read from the store");
    let changed = watch.changed();
    assert_eq!(cache.purge_url("http://example.com/paused"), Ok(1));
    changed.await;
    paused.settle();
    assert!(paused.is_storing(), "its reader still follows it");
    assert_eq!(
        metrics.bytes_filling.get(),
        100 << 10,
        "what it holds is held apart"
    );
    let changed = watch.changed();
    drop(reader);
    changed.await;
    paused.settle();
    assert!(!paused.is_storing());
    assert_eq!(metrics.bytes_filling.get(), 0);
    // Its client stays: the fill goes on, all its bytes now held apart, until it ends.
    let (mut read, mut reader) = start("/read");
    assert_eq!(cache.purge_url("http://example.com/read"), Ok(1));
    fill_rest(&mut read, &half);
    assert!(read.is_storing());
    assert_eq!(metrics.bytes_filling.get(), 200 << 10);
    read.finish().unwrap();
    assert_eq!(metrics.bytes_filling.get(), 0);
    let mut got = 0;
    while let Some(chunk) = reader.next().await.unwrap() {
        got += chunk.len();
    }
    assert_eq!(got, 200 << 10, "the reader got the whole body");
}

fn fill_rest(fill: &mut weir_cache::Fill, rest: &Bytes) {
    assert_eq!(&fill.push(rest.clone()).unwrap(), rest);
}
