//! HTTP/2 streams (h2c with prior knowledge) and the cache: a stream's miss
//! fills the store like an HTTP/1.1 one (stored, compressed, coalesced with
//! misses of either protocol, refreshed in the background), and its hits
//! come from the store. Clients: curl, and the `h2` crate where a test needs
//! to hold streams open or read slowly.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use h2::RecvStream;
use h2::client::SendRequest;
use weir_testkit::TestProxy;

use super::node::{self, CountingNode};
use super::{CACHE, curl, fresh, huge, large, proxy_for, request, text, until, versions};

const H2C: &str = "[virtual_servers.web.http2]\ncleartext = true\n";

/// An HTTP/2 connection to the proxy whose stream and connection windows
/// are `window` bytes (they open further only as the test reads).
async fn connect(proxy: &TestProxy, window: u32) -> SendRequest<Bytes> {
    let tcp = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    let (sender, connection) = h2::client::Builder::new()
        .initial_window_size(window)
        .initial_connection_window_size(window)
        .handshake(tcp)
        .await
        .expect("handshake");
    tokio::spawn(connection);
    sender
}

/// A GET for `path` on a new stream, with the authority `request` (the
/// HTTP/1.1 helper) sends as `Host`, so both ask for one object; returns the
/// response head once it arrives.
async fn get(sender: &SendRequest<Bytes>, path: &str) -> http::Response<RecvStream> {
    let request = http::Request::get(format!("http://cache.test{path}"))
        .body(())
        .unwrap();
    let mut sender = sender.clone().ready().await.expect("ready");
    let (response, _) = sender.send_request(request, true).expect("sent");
    tokio::time::timeout(Duration::from_secs(30), response)
        .await
        .expect("a response head in time")
        .expect("a response")
}

/// The rest of a stream's body, read (and its window reopened) to the end.
async fn read_body(response: http::Response<RecvStream>) -> Vec<u8> {
    let mut body = response.into_body();
    let mut out = Vec::new();
    let read = async {
        while let Some(data) = body.data().await {
            let data = data.expect("data");
            let _ = body.flow_control().release_capacity(data.len());
            out.extend_from_slice(&data);
        }
    };
    tokio::time::timeout(Duration::from_secs(30), read)
        .await
        .expect("the body in time");
    out
}

fn x_cache(response: &http::Response<RecvStream>) -> &str {
    response
        .headers()
        .get("x-cache")
        .and_then(|value| value.to_str().ok())
        .unwrap_or("")
}

/// How long these tests wait for the proxy's requests to reach the node.
const WAIT: Duration = Duration::from_secs(30);

/// A stream's miss is stored: the next stream and an HTTP/1.1 request are
/// hits (with `Via` as the relay wrote it); a stream that accepts gzip fills
/// the gzip variant, which HTTP/1.1 then gets from the store; a conditional,
/// a range and HEAD are answered from what streams stored; a conditional
/// miss fetches the whole object; a body far past the stream's window is
/// stored while the stream reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_misses_fill_the_store_for_both_protocols() {
    let node = CountingNode::start(text, Duration::ZERO).await;
    let compression = "[virtual_servers.web.compression]\nalgorithms = [\"gzip\"]\n";
    let proxy = proxy_for(&node, &format!("{CACHE}{compression}{H2C}")).await;
    let url = format!("http://{}/t", proxy.addr);
    let expected = text("", 0).body;
    let h2 = "--http2-prior-knowledge";
    let miss = curl(&[h2, &url]).await;
    assert!(miss.head.starts_with("http/2 200"), "{}", miss.head);
    assert!(miss.head.contains("x-cache: miss"), "{}", miss.head);
    assert!(miss.head.contains("via: 1.1 weir"), "{}", miss.head);
    assert_eq!(miss.body, expected);
    let hit = curl(&[h2, &url]).await;
    assert!(hit.head.contains("x-cache: hit"), "{}", hit.head);
    assert!(hit.head.contains("age: "), "{}", hit.head);
    assert!(hit.head.contains("via: 1.1 weir"), "{}", hit.head);
    assert!(!hit.head.contains("connection:"), "{}", hit.head);
    assert_eq!(hit.body, expected);
    let http1 = curl(&["--http1.1", &url]).await;
    assert!(http1.head.contains("x-cache: hit"), "{}", http1.head);
    assert_eq!(http1.head.matches("via: ").count(), 1, "{}", http1.head);
    assert_eq!(http1.body, expected);
    assert_eq!(node.requests(), 1);

    let gzip = ["--compressed", "-H", "Accept-Encoding: gzip"];
    for (protocol, status) in [(h2, "miss"), ("--http1.1", "hit"), (h2, "hit")] {
        let output = curl(&[&[protocol][..], &gzip, &[&url]].concat()).await;
        assert!(
            output.head.contains(&format!("x-cache: {status}")),
            "{protocol}: {}",
            output.head
        );
        assert!(
            output.head.contains("content-encoding: gzip"),
            "{}",
            output.head
        );
        assert!(
            output.head.contains("vary: accept-encoding"),
            "{}",
            output.head
        );
        assert_eq!(output.body, expected, "{protocol}");
    }
    assert_eq!(node.requests(), 2);

    let conditional = curl(&[h2, "-H", "If-None-Match: \"t\"", &url]).await;
    assert!(
        conditional.head.starts_with("http/2 304"),
        "{}",
        conditional.head
    );
    assert!(conditional.body.is_empty());
    assert!(
        conditional.head.contains("via: 1.1 weir"),
        "{}",
        conditional.head
    );
    let range = curl(&[h2, "-H", "Range: bytes=4-8", &url]).await;
    assert!(range.head.starts_with("http/2 206"), "{}", range.head);
    assert_eq!(range.body, expected[4..=8]);
    let head = curl(&[h2, "-I", &url]).await;
    assert!(head.head.starts_with("http/2 200"), "{}", head.head);
    assert!(head.head.contains("x-cache: hit"), "{}", head.head);
    assert_eq!(node.requests(), 2);

    // A stream's conditional miss: the node is asked for the whole object.
    let cold = format!("http://{}/c", proxy.addr);
    let conditional = curl(&[h2, "-H", "If-None-Match: \"t\"", &cold]).await;
    assert!(
        conditional.head.starts_with("http/2 304"),
        "{}",
        conditional.head
    );
    let last = node.heads().pop().unwrap_or_default().to_ascii_lowercase();
    assert!(!last.contains("if-none-match"), "{last}");
    let stored = curl(&["--http1.1", &cold]).await;
    assert!(stored.head.contains("x-cache: hit"), "{}", stored.head);
    assert_eq!(stored.body, expected);
    assert_eq!(node.requests(), 3);
    let metrics = proxy.metrics.cache("web");
    assert_eq!(metrics.misses.get(), 3, "one per stream that filled");
    proxy.stop().await;

    // 4 MiB: far past HTTP/2's initial 64 KiB window.
    let node = CountingNode::start(large, Duration::ZERO).await;
    let proxy = proxy_for(&node, &format!("{CACHE}{H2C}")).await;
    let url = format!("http://{}/big", proxy.addr);
    let big = curl(&[h2, &url]).await;
    assert!(big.head.contains("x-cache: miss"), "{}", big.head);
    assert!(
        big.body == large("", 0).body,
        "the HTTP/2 fill's body differs"
    );
    let http1 = curl(&["--http1.1", &url]).await;
    assert!(http1.head.contains("x-cache: hit"), "{}", http1.head);
    assert!(http1.body == large("", 0).body, "the stored body differs");
    assert_eq!(node.requests(), 1);
    proxy.stop().await;
}

/// Concurrent misses for one cold object over both protocols make one node
/// request, whichever protocol leads: the leader's request reaches the held
/// node first, then the node holds its answer until every other request
/// waits on the leader's fill (the count does not depend on timing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misses_over_both_protocols_make_one_node_request() {
    const STREAMS: usize = 60;
    const REQUESTS: usize = 60;
    for h2_leads in [true, false] {
        let node = CountingNode::start_held(fresh, Duration::ZERO).await;
        let extra = format!("{CACHE}coalesce_timeout = \"60s\"\n{H2C}");
        let proxy = Arc::new(proxy_for(&node, &extra).await);
        let sender = connect(&proxy, 65_535).await;
        let stream = || {
            let sender = sender.clone();
            tokio::spawn(async move {
                let response = get(&sender, "/cold").await;
                let status = (response.status().as_u16(), x_cache(&response).to_owned());
                (status, read_body(response).await)
            })
        };
        let http1 = || {
            let proxy = Arc::clone(&proxy);
            tokio::spawn(async move {
                let response = request(&proxy, "GET", "/cold", &[]).await;
                let status = response.header("x-cache").unwrap_or("").to_owned();
                ((response.status, status), response.body)
            })
        };
        let mut answers = vec![if h2_leads { stream() } else { http1() }];
        until("the leader's miss reaches the node", WAIT, || {
            node.requests() == 1
        })
        .await;
        answers.extend((0..STREAMS - usize::from(h2_leads)).map(|_| stream()));
        answers.extend((0..REQUESTS - usize::from(!h2_leads)).map(|_| http1()));
        let metrics = proxy.metrics.cache("web");
        let waiters = (STREAMS + REQUESTS - 1) as u64;
        until("every other request waits on the fill", WAIT, || {
            metrics.waiting.get() >= waiters as i64
        })
        .await;
        assert_eq!(node.requests(), 1);
        node.release();
        let mut statuses = Vec::new();
        for answer in answers {
            let ((status, cache), body) = answer.await.unwrap();
            assert_eq!((status, body), (200, b"body of /cold".to_vec()));
            statuses.push(cache);
        }
        let misses = statuses.iter().filter(|cache| *cache == "MISS").count();
        assert_eq!(misses, 1, "h2 leads: {h2_leads}: {statuses:?}");
        assert_eq!(node.requests(), 1, "h2 leads: {h2_leads}");
        assert_eq!(metrics.misses.get(), 1);
        Arc::into_inner(proxy).unwrap().stop().await;
    }
}

/// A stream that fills a 16 MiB object and reads nothing past its 16 KiB
/// window holds up none of the HTTP/1.1 requests that waited on its fill:
/// they get the whole object from the store while the stream is stalled;
/// the stream still gets all of it once it reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_http2_filler_never_blocks_http1_waiters() {
    const WAITERS: usize = 4;
    let node = CountingNode::start_held(huge, Duration::ZERO).await;
    let extra = format!("{CACHE}max_object_size = \"32MiB\"\ncoalesce_timeout = \"60s\"\n{H2C}");
    let proxy = Arc::new(proxy_for(&node, &extra).await);
    let expected = Arc::new(huge("", 0).body);
    let sender = connect(&proxy, 16 << 10).await;
    let slow = tokio::spawn(async move { get(&sender, "/huge").await });
    until("the stream's miss reaches the node", WAIT, || {
        node.requests() == 1
    })
    .await;
    let waiters: Vec<_> = (0..WAITERS)
        .map(|_| {
            let proxy = Arc::clone(&proxy);
            tokio::spawn(async move { request(&proxy, "GET", "/huge", &[]).await })
        })
        .collect();
    let metrics = proxy.metrics.cache("web");
    until(
        "the HTTP/1.1 requests wait on the stream's fill",
        WAIT,
        || metrics.waiting.get() >= WAITERS as i64,
    )
    .await;
    node.release();
    for waiter in waiters {
        let response = tokio::time::timeout(Duration::from_secs(20), waiter)
            .await
            .expect("a waiter is not held up by the stalled stream")
            .unwrap();
        assert_eq!(response.status, 200);
        assert!(response.body == *expected, "a waiter's body differs");
    }
    let response = slow.await.unwrap();
    assert_eq!(x_cache(&response), "MISS");
    assert!(
        read_body(response).await == *expected,
        "the stream's body differs"
    );
    assert_eq!(node.requests(), 1);
    Arc::into_inner(proxy).unwrap().stop().await;
}

/// A stale object within stale-while-revalidate is answered to a stream at
/// once, and the refresh starts from that stream: the next request (either
/// protocol) gets the new version from the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_while_revalidate_refreshes_from_a_stream() {
    let node = CountingNode::start(versions, Duration::ZERO).await;
    let proxy = proxy_for(&node, &format!("{CACHE}{H2C}")).await;
    let sender = connect(&proxy, 65_535).await;
    let first = get(&sender, "/r").await;
    assert_eq!(x_cache(&first), "MISS");
    assert_eq!(read_body(first).await, b"v0");
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let stale = get(&sender, "/r").await;
    assert_eq!(x_cache(&stale), "STALE");
    assert_eq!(read_body(stale).await, b"v0");
    until("the refresh reaches the node", WAIT, || {
        node.requests() == 2
    })
    .await;
    let refreshed = |text: &str, cache: Option<&str>| (text.to_owned(), cache.map(str::to_owned));
    let mut fresh = None;
    for _ in 0..100 {
        let response = request(&proxy, "GET", "/r", &[]).await;
        let seen = refreshed(&response.text(), response.header("x-cache"));
        if seen.0 == "v1" {
            fresh = Some(seen);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(fresh, Some(refreshed("v1", Some("HIT"))));
    let hit = get(&sender, "/r").await;
    assert_eq!(x_cache(&hit), "HIT");
    assert_eq!(read_body(hit).await, b"v1");
    assert_eq!(node.requests(), 2);
    proxy.stop().await;
}

/// About 100 KiB (past a stream's initial 64 KiB window), sent chunked.
fn streamed(_: &str, _: usize) -> node::Answer {
    node::Answer::ok("a body of unknown length\n".repeat(4000).as_bytes())
        .field("Cache-Control", "max-age=60")
        .field("Content-Type", "text/plain")
        .chunked()
}

/// A stream's miss of unknown length (chunked from the node) is stored as
/// it passes to the stream, identity and gzip alike; HTTP/1.1 then gets
/// each variant from the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_miss_of_unknown_length_is_stored_as_it_passes() {
    let node = CountingNode::start(streamed, Duration::ZERO).await;
    let compression = "[virtual_servers.web.compression]\nalgorithms = [\"gzip\"]\n";
    let proxy = proxy_for(&node, &format!("{CACHE}{compression}{H2C}")).await;
    let url = format!("http://{}/s", proxy.addr);
    let expected = streamed("", 0).body;
    let gzip: &[&str] = &["--compressed", "-H", "Accept-Encoding: gzip"];
    for (coding, fields) in [("", &[][..]), ("content-encoding: gzip", gzip)] {
        for (protocol, status) in [("--http2-prior-knowledge", "miss"), ("--http1.1", "hit")] {
            let output = curl(&[&[protocol][..], fields, &[&url]].concat()).await;
            let head = &output.head;
            assert!(head.contains(&format!("x-cache: {status}")), "{head}");
            assert!(head.contains(coding), "{head}");
            assert!(output.body == expected, "{protocol} {coding}: body differs");
        }
    }
    assert_eq!(node.requests(), 2);
    proxy.stop().await;
}

/// Compression without a cache compresses a stream's response on its way
/// (the relay's HTTP/2 sink); a HEAD's answer ends the stream with its head.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compression_alone_compresses_http2_streams() {
    let node = CountingNode::start(text, Duration::ZERO).await;
    let compression = "[virtual_servers.web.compression]\nalgorithms = [\"gzip\"]\n";
    let proxy = proxy_for(&node, &format!("{compression}{H2C}")).await;
    let url = format!("http://{}/t", proxy.addr);
    let h2 = "--http2-prior-knowledge";
    let output = curl(&[h2, "--compressed", "-H", "Accept-Encoding: gzip", &url]).await;
    assert!(output.head.starts_with("http/2 200"), "{}", output.head);
    assert!(
        output.head.contains("content-encoding: gzip"),
        "{}",
        output.head
    );
    assert!(!output.head.contains("content-length"), "{}", output.head);
    assert_eq!(output.body, text("", 0).body);
    let head = curl(&[h2, "-I", "-H", "Accept-Encoding: gzip", &url]).await;
    assert!(head.head.starts_with("http/2 200"), "{}", head.head);
    assert!(head.head.contains("vary: accept-encoding"), "{}", head.head);
    assert_eq!(node.requests(), 2);
    proxy.stop().await;
}

/// A rule may remove `Via` from responses or replace weir's entry with its own (a gateway
/// need not send it, RFC 9110 §7.6.3): on misses and on hits, to HTTP/1.1 and HTTP/2
/// clients alike; a response no rule touches keeps weir's entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_removes_or_replaces_via_on_misses_and_hits() {
    let node = CountingNode::start(fresh, Duration::ZERO).await;
    let rules = "[[virtual_servers.web.rules]]\nmatch = { path_prefix = \"/none\" }\n\
                 response_headers = { remove = [\"Via\"] }\n\
                 [[virtual_servers.web.rules]]\nmatch = { path_prefix = \"/edge\" }\n\
                 response_headers = { set = { Via = \"1.1 edge\" } }\n";
    let proxy = proxy_for(&node, &format!("{CACHE}{H2C}{rules}")).await;
    let sender = connect(&proxy, 65_535).await;
    for (path, expected) in [
        ("/none", None),
        ("/edge", Some("1.1 edge")),
        ("/kept", Some("1.1 weir")),
    ] {
        for round in ["MISS", "HIT"] {
            let response = request(&proxy, "GET", path, &[]).await;
            assert_eq!(response.header("x-cache"), Some(round), "{path}");
            let vias: Vec<&str> = response
                .headers
                .iter()
                .filter(|(name, _)| name.eq_ignore_ascii_case("via"))
                .map(|(_, value)| value.as_str())
                .collect();
            assert_eq!(
                vias,
                expected.into_iter().collect::<Vec<_>>(),
                "{path} {round}"
            );
        }
        let streamed = get(&sender, path).await;
        assert_eq!(x_cache(&streamed), "HIT", "{path}");
        let vias: Vec<&str> = streamed
            .headers()
            .get_all("via")
            .iter()
            .map(|value| value.to_str().unwrap())
            .collect();
        assert_eq!(
            vias,
            expected.into_iter().collect::<Vec<_>>(),
            "{path} over HTTP/2"
        );
    }
    assert_eq!(node.requests(), 3);
    proxy.stop().await;
}
