//! The cache and compression in the pipeline, end to end: a node that counts
//! its requests behind a proxy with `[cache]` (and `[compression]`).

#[path = "cache/node.rs"]
mod node;

#[path = "cache/http2.rs"]
mod http2;

use std::sync::Arc;
use std::time::Duration;

use node::{Answer, CountingNode};
use weir_testkit::client::{self, Connection, Response};
use weir_testkit::{TestProxy, config};

const CACHE: &str =
    "[virtual_servers.web.cache]\nstatus_header = \"X-Cache\"\npurge_from = [\"127.0.0.0/8\"]\n";

/// Waits until `done` holds; fails with `what` after `limit`.
async fn until(what: &str, limit: Duration, done: impl Fn() -> bool) {
    let waited = tokio::time::timeout(limit, async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "{what}");
}

/// How long a stale-while-revalidate refresh may take to reach the node.
const REFRESH: Duration = Duration::from_secs(2);

async fn proxy_for(node: &CountingNode, vs_extra: &str) -> TestProxy {
    TestProxy::start(&config(&[node.addr], "", vs_extra)).await
}

/// One request on a new connection, `fields` added to the head.
async fn request(proxy: &TestProxy, method: &str, path: &str, fields: &[&str]) -> Response {
    let mut connection = Connection::open(proxy.addr).await.unwrap();
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: cache.test\r\n");
    for field in fields {
        head.push_str(field);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    connection.send(head.as_bytes()).await.unwrap();
    connection.response_to(method == "HEAD").await.unwrap()
}

fn fresh(head: &str, _: usize) -> Answer {
    let path = head.split(' ').nth(1).unwrap_or("/");
    Answer::ok(format!("body of {path}").as_bytes())
        .field("Cache-Control", "max-age=60")
        .field("ETag", "\"v1\"")
        .field("Content-Type", "text/plain")
}

/// The second GET is a hit (Age, X-Cache: HIT, same body); HEAD and a
/// conditional GET are answered from the stored GET; the node saw one request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hits_conditionals_and_head_are_answered_from_the_store() {
    let node = CountingNode::start(fresh, Duration::ZERO).await;
    let proxy = proxy_for(&node, CACHE).await;
    let first = request(&proxy, "GET", "/a", &[]).await;
    assert_eq!(first.status, 200);
    assert_eq!(first.header("x-cache"), Some("MISS"));
    let second = request(&proxy, "GET", "/a", &[]).await;
    assert_eq!(
        (second.status, second.text()),
        (200, "body of /a".to_owned())
    );
    assert_eq!(second.header("x-cache"), Some("HIT"));
    assert!(second.header("age").is_some(), "{:?}", second.headers);
    let head = request(&proxy, "HEAD", "/a", &[]).await;
    assert_eq!((head.status, head.body.len()), (200, 0));
    assert_eq!(head.header("content-length"), Some("10"));
    let conditional = request(&proxy, "GET", "/a", &["If-None-Match: \"v1\""]).await;
    assert_eq!(conditional.status, 304);
    assert_eq!(conditional.header("etag"), Some("\"v1\""));
    let range = request(&proxy, "GET", "/a", &["Range: bytes=0-3"]).await;
    assert_eq!((range.status, range.text()), (206, "body".to_owned()));
    assert_eq!(node.requests(), 1);
    let metrics = proxy.metrics.cache("web");
    assert_eq!((metrics.hits.get(), metrics.misses.get()), (4, 1));
    assert_eq!(metrics.objects.get(), 1);
    assert!(metrics.bytes_stored.get() > 10);
    proxy.stop().await;
}

/// Small hits are written without waiting when the socket takes them; when it
/// does not (a client that pipelines requests and reads nothing until its
/// receive buffer and weir's send buffer are full), the rest of an answer
/// waits for the client, and every answer still arrives whole and in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_hits_to_a_client_that_stops_reading_all_arrive_whole() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const REQUESTS: usize = 30_000;
    let node = CountingNode::start(fresh, Duration::ZERO).await;
    let proxy = proxy_for(&node, CACHE).await;
    assert_eq!(request(&proxy, "GET", "/small", &[]).await.status, 200);
    let stream = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    let requests = "GET /small HTTP/1.1\r\nHost: cache.test\r\n\r\n".repeat(REQUESTS);
    let sending = tokio::spawn(async move {
        writer.write_all(requests.as_bytes()).await.unwrap();
        writer
    });
    // Nothing is read until weir's writes have had to wait for the client.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let one = request(&proxy, "GET", "/small", &[]).await;
    assert_eq!(
        one.header("x-cache"),
        Some("HIT"),
        "other clients are served"
    );
    // Each answer ends with its body: count them as they come.
    let marker = b"body of /small";
    let (mut received, mut from, mut bodies) = (Vec::new(), 0, 0);
    let mut buffer = vec![0_u8; 64 * 1024];
    while bodies < REQUESTS {
        let read = tokio::time::timeout(Duration::from_secs(10), reader.read(&mut buffer))
            .await
            .expect("the answers keep coming")
            .unwrap();
        assert!(read > 0, "weir closed after {bodies} answers");
        received.extend_from_slice(&buffer[..read]);
        while let Some(at) = received[from..]
            .windows(marker.len())
            .position(|window| window == marker)
        {
            bodies += 1;
            from += at + marker.len();
        }
    }
    assert_eq!(from, received.len(), "nothing after the last answer");
    let _writer = sending.await.unwrap();
    let text = String::from_utf8(received).unwrap();
    assert_eq!(text.matches("HTTP/1.1 200 OK\r\n").count(), REQUESTS);
    assert_eq!(text.matches("\r\n\r\nbody of /small").count(), REQUESTS);
    assert_eq!(node.requests(), 1, "every pipelined request was a hit");
    proxy.stop().await;
}

/// Requests that arrive together are answered in order whether the cache answers them
/// at once (small fresh hits, with no future of their own) or not: a burst of hits, a
/// miss between them, a close asked for by the last one. The connection closes after
/// the last answer, and only the miss reached the node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_hits_and_a_miss_is_answered_in_order() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let node = CountingNode::start(fresh, Duration::ZERO).await;
    let proxy = proxy_for(&node, CACHE).await;
    assert_eq!(request(&proxy, "GET", "/small", &[]).await.status, 200);
    let mut stream = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    let get = |path: &str, last: bool| {
        let close = if last { "Connection: close\r\n" } else { "" };
        format!("GET {path} HTTP/1.1\r\nHost: cache.test\r\n{close}\r\n")
    };
    let burst = [
        get("/small", false),
        get("/small", false),
        get("/other", false),
        get("/small", false),
        get("/small", true),
    ]
    .concat();
    stream.write_all(burst.as_bytes()).await.unwrap();
    let mut received = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut received))
        .await
        .expect("weir closes after the last answer")
        .unwrap();
    let text = String::from_utf8(received).unwrap();
    let answers: Vec<(&str, &str)> = text
        .split("HTTP/1.1 ")
        .skip(1)
        .map(|answer| {
            let cache = answer
                .lines()
                .find_map(|line| line.strip_prefix("X-Cache: "))
                .unwrap_or("-");
            let body = answer.rsplit("\r\n\r\n").next().unwrap_or("");
            (cache, body)
        })
        .collect();
    assert_eq!(
        answers,
        [
            ("HIT", "body of /small"),
            ("HIT", "body of /small"),
            ("MISS", "body of /other"),
            ("HIT", "body of /small"),
            ("HIT", "body of /small"),
        ],
        "{text}"
    );
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert_eq!(text.matches("Connection: close\r\n").count(), 1, "{text}");
    assert_eq!(node.requests(), 2, "the first fill and the miss");
    proxy.stop().await;
}

/// A client's conditional on a miss is not passed to the node (weir needs the
/// whole object); the client still gets its 304.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conditional_miss_fetches_the_whole_object() {
    let node = CountingNode::start(fresh, Duration::ZERO).await;
    let proxy = proxy_for(&node, CACHE).await;
    let conditional = request(&proxy, "GET", "/c", &["If-None-Match: \"v1\""]).await;
    assert_eq!(conditional.status, 304);
    assert!(
        !node.heads()[0]
            .to_ascii_lowercase()
            .contains("if-none-match")
    );
    assert_eq!(request(&proxy, "GET", "/c", &[]).await.text(), "body of /c");
    assert_eq!(node.requests(), 1);
    proxy.stop().await;
}

fn fresh_chunked(head: &str, count: usize) -> Answer {
    fresh(head, count).chunked()
}

/// The same for a node that sends its body chunked (the object is stored once the body
/// is whole): the conditional is still answered by weir, 304 for a matching
/// `If-None-Match` and 412 for a failed `If-Match`, the body still fills the store, and
/// a client without conditions gets the whole response.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conditional_miss_of_unknown_length_is_answered_and_still_stored() {
    let node = CountingNode::start(fresh_chunked, Duration::ZERO).await;
    let proxy = proxy_for(&node, CACHE).await;
    let conditional = request(&proxy, "GET", "/u", &["If-None-Match: \"v1\""]).await;
    assert_eq!(conditional.status, 304);
    let stored = || request(&proxy, "GET", "/u", &[]);
    assert_eq!(stored().await.header("x-cache"), Some("HIT"));
    assert_eq!(node.requests(), 1);
    let failed = request(&proxy, "GET", "/v", &["If-Match: \"other\""]).await;
    assert_eq!(failed.status, 412);
    let passed = request(&proxy, "GET", "/w", &["If-None-Match: \"v0\""]).await;
    assert_eq!((passed.status, passed.text().as_str()), (200, "body of /w"));
    assert_eq!(node.requests(), 3);
    proxy.stop().await;
}

fn by_language(head: &str, _: usize) -> Answer {
    let language = head
        .lines()
        .find_map(|line| line.strip_prefix("Accept-Language: "))
        .unwrap_or("none");
    Answer::ok(language.as_bytes())
        .field("Cache-Control", "max-age=60")
        .field("Vary", "Accept-Language")
}

/// Each Accept-Language is its own variant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vary_keeps_one_variant_per_value() {
    let node = CountingNode::start(by_language, Duration::ZERO).await;
    let proxy = proxy_for(&node, CACHE).await;
    for (language, misses) in [("en", 1), ("fr", 2), ("en", 2), ("fr", 2)] {
        let field = format!("Accept-Language: {language}");
        let response = request(&proxy, "GET", "/v", &[&field]).await;
        assert_eq!(response.text(), language);
        assert_eq!(node.requests(), misses, "after {language}");
    }
    proxy.stop().await;
}

fn private_or_not(head: &str, _: usize) -> Answer {
    let control = match head.split(' ').nth(1).unwrap_or("/") {
        "/no-store" => "no-store",
        "/private" => "private, max-age=60",
        _ => "max-age=60",
    };
    Answer::ok(b"x").field("Cache-Control", control)
}

/// no-store and private responses, and requests with Authorization, are not
/// stored: every request reaches the node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_store_private_and_authorization_are_not_cached() {
    let node = CountingNode::start(private_or_not, Duration::ZERO).await;
    let proxy = proxy_for(&node, CACHE).await;
    for path in ["/no-store", "/private"] {
        for _ in 0..2 {
            let response = request(&proxy, "GET", path, &[]).await;
            assert_eq!(response.header("x-cache"), Some("PASS"), "{path}");
        }
    }
    assert_eq!(node.requests(), 4);
    // Passes, as logged: no miss counted for an answer that could not be stored.
    assert_eq!(proxy.metrics.cache("web").misses.get(), 0);
    for _ in 0..2 {
        request(&proxy, "GET", "/auth", &["Authorization: Bearer x"]).await;
    }
    assert_eq!(node.requests(), 6);
    // A client's no-cache goes to the node (and refreshes the object).
    request(&proxy, "GET", "/public", &[]).await;
    request(&proxy, "GET", "/public", &["Cache-Control: no-cache"]).await;
    assert_eq!(node.requests(), 8);
    // The two answers for /public were stored: the misses of this test.
    assert_eq!(proxy.metrics.cache("web").misses.get(), 2);
    proxy.stop().await;
}

/// A GET with a body is neither answered from the store nor stored: a node that reads the
/// body would otherwise have its answer to that body served to everyone asking for the URL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_with_a_body_neither_hits_nor_fills() {
    let node = CountingNode::start(fresh, Duration::ZERO).await;
    let proxy = proxy_for(&node, CACHE).await;
    const WITH_BODY: &[&str] = &["Content-Length: 11", "Content-Type: text/plain"];
    let send = |fields: &'static [&'static str], body: &'static [u8]| {
        let addr = proxy.addr;
        async move {
            let mut connection = Connection::open(addr).await.unwrap();
            let mut head = String::from("GET /search HTTP/1.1\r\nHost: cache.test\r\n");
            for field in fields {
                head.push_str(field);
                head.push_str("\r\n");
            }
            head.push_str("\r\n");
            let mut bytes = head.into_bytes();
            bytes.extend_from_slice(body);
            connection.send(&bytes).await.unwrap();
            connection.response().await.unwrap()
        }
    };
    let poisoning = send(WITH_BODY, b"q=POISONED!").await;
    assert_eq!(poisoning.status, 200);
    assert_eq!(poisoning.header("x-cache"), Some("PASS"));
    // Nothing stored: the next plain GET is a miss, then a hit.
    let plain = request(&proxy, "GET", "/search", &[]).await;
    assert_eq!(plain.header("x-cache"), Some("MISS"));
    let plain = request(&proxy, "GET", "/search", &[]).await;
    assert_eq!(plain.header("x-cache"), Some("HIT"));
    // Nor is a GET with a body answered from what is stored.
    let again = send(WITH_BODY, b"q=POISONED!").await;
    assert_eq!(again.header("x-cache"), Some("PASS"));
    assert_eq!(node.requests(), 3);
    // An empty body is no body.
    let empty = send(&["Content-Length: 0"], b"").await;
    assert_eq!(empty.header("x-cache"), Some("HIT"));
    assert_eq!(node.requests(), 3);
    proxy.stop().await;
}

fn for_cdns(_: &str, _: usize) -> Answer {
    Answer::ok(b"x")
        .field("Cache-Control", "no-store")
        .field("CDN-Cache-Control", "max-age=60")
}

/// RFC 9213: `CDN-Cache-Control` decides in place of `Cache-Control` by default, and is
/// passed on with it; `targeted_cache_control = []` turns it into a plain header.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cdn_cache_control_overrides_cache_control_unless_turned_off() {
    let node = CountingNode::start(for_cdns, Duration::ZERO).await;
    let proxy = proxy_for(&node, CACHE).await;
    let first = request(&proxy, "GET", "/", &[]).await;
    let second = request(&proxy, "GET", "/", &[]).await;
    assert_eq!(first.header("x-cache"), Some("MISS"));
    assert_eq!(second.header("x-cache"), Some("HIT"));
    assert_eq!(node.requests(), 1);
    assert_eq!(second.header("cdn-cache-control"), Some("max-age=60"));
    assert_eq!(second.header("cache-control"), Some("no-store"));
    proxy.stop().await;

    let node = CountingNode::start(for_cdns, Duration::ZERO).await;
    let off = format!("{CACHE}targeted_cache_control = []\n");
    let proxy = proxy_for(&node, &off).await;
    for _ in 0..2 {
        let response = request(&proxy, "GET", "/", &[]).await;
        assert_eq!(response.header("x-cache"), Some("PASS"));
        assert_eq!(response.header("cdn-cache-control"), Some("max-age=60"));
    }
    assert_eq!(node.requests(), 2);
    proxy.stop().await;
}

/// Once a key proved not storable, its next requests pass to the node as the client sent
/// them: the node answers the client's conditionals and Range (RFC 9111 §4.3.2), where a
/// fill would have removed them to fetch a whole object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_known_not_storable_passes_conditionals_and_range_on() {
    let node = CountingNode::start(private_or_not, Duration::ZERO).await;
    let proxy = proxy_for(&node, CACHE).await;
    let fields = ["If-None-Match: \"v1\"", "Range: bytes=0-0"];
    // The first request learns that /private is not storable (it was a fill).
    request(&proxy, "GET", "/private", &fields).await;
    let first = node.heads()[0].to_ascii_lowercase();
    assert!(
        !first.contains("if-none-match") && !first.contains("range:"),
        "{first}"
    );
    // The next one passes, fields and all.
    let response = request(&proxy, "GET", "/private", &fields).await;
    assert_eq!(response.header("x-cache"), Some("PASS"));
    let second = node.heads()[1].to_ascii_lowercase();
    assert!(second.contains("if-none-match: \"v1\""), "{second}");
    assert!(second.contains("range: bytes=0-0"), "{second}");
    proxy.stop().await;
}

fn with_cookie(_: &str, _: usize) -> Answer {
    Answer::ok(b"page")
        .field("Cache-Control", "max-age=60")
        .field("Set-Cookie", "sid=1; Path=/")
}

/// With `set_cookie = "strip"` the object is stored without the node's Set-Cookie, which
/// the client whose request filled it still gets; a hit gets none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stripped_cookie_still_reaches_the_client_that_filled() {
    let node = CountingNode::start(with_cookie, Duration::ZERO).await;
    let proxy = proxy_for(&node, &format!("{CACHE}set_cookie = \"strip\"\n")).await;
    let filled = request(&proxy, "GET", "/page", &[]).await;
    assert_eq!(filled.header("x-cache"), Some("MISS"));
    assert_eq!(filled.header("set-cookie"), Some("sid=1; Path=/"));
    assert_eq!(filled.text(), "page");
    let hit = request(&proxy, "GET", "/page", &[]).await;
    assert_eq!(hit.header("x-cache"), Some("HIT"));
    assert_eq!(hit.header("set-cookie"), None);
    assert_eq!(node.requests(), 1);
    proxy.stop().await;
}

fn via_named_by_connection(_: &str, _: usize) -> Answer {
    Answer::ok(b"relayed")
        .field("Cache-Control", "max-age=60")
        .field("Via", "1.1 inner")
        .field("Connection", "Via, X-Hop")
        .field("X-Hop", "h")
}

/// A node's `Connection` naming `Via` makes its own `Via` hop-by-hop, not weir's entry
/// (RFC 9110 §7.6.3: each hop that forwards a message adds one): the stored object keeps
/// weir's, so the miss and the hits carry it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_connection_naming_via_keeps_weirs_entry_in_the_store() {
    let node = CountingNode::start(via_named_by_connection, Duration::ZERO).await;
    let proxy = proxy_for(&node, CACHE).await;
    for expected in ["MISS", "HIT"] {
        let answer = request(&proxy, "GET", "/v", &[]).await;
        assert_eq!(answer.header("x-cache"), Some(expected));
        assert_eq!(
            answer.header("via"),
            Some("1.1 weir"),
            "{:?}",
            answer.headers
        );
        assert_eq!(answer.header("x-hop"), None);
        assert_eq!(answer.text(), "relayed");
    }
    assert_eq!(node.requests(), 1);
    proxy.stop().await;
}

/// Stale at once with a `Via` of its own; to a request that validates, a 304 with another
/// `Via` and a hop-by-hop field its `Connection` names.
fn revalidated_with_via(head: &str, _: usize) -> Answer {
    if head.to_ascii_lowercase().contains("if-none-match:") {
        return Answer::ok(b"")
            .status(304)
            .field("Cache-Control", "max-age=60")
            .field("ETag", "\"v1\"")
            .field("Via", "1.0 inner304")
            .field("Connection", "X-Hop")
            .field("X-Hop", "h");
    }
    Answer::ok(b"relayed")
        .field("Cache-Control", "max-age=0")
        .field("ETag", "\"v1\"")
        .field("Via", "1.0 inner")
}

/// A 304 that refreshes a stored object updates its fields, weir's own `Via` entry still
/// last (RFC 9110 §7.6.3), and stores none of the fields the 304's `Connection` names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refreshed_object_keeps_weirs_via_and_no_hop_by_hop_fields() {
    let node = CountingNode::start(revalidated_with_via, Duration::ZERO).await;
    let proxy = proxy_for(&node, CACHE).await;
    let first = request(&proxy, "GET", "/r", &[]).await;
    assert_eq!(first.header("x-cache"), Some("MISS"));
    let vias = |answer: &Response| -> Vec<String> {
        answer
            .headers
            .iter()
            .filter(|(name, _)| name.eq_ignore_ascii_case("via"))
            .map(|(_, value)| value.clone())
            .collect()
    };
    assert_eq!(
        vias(&first),
        ["1.0 inner", "1.1 weir"],
        "{:?}",
        first.headers
    );
    for expected in ["REVALIDATED", "HIT"] {
        let answer = request(&proxy, "GET", "/r", &[]).await;
        assert_eq!(
            answer.header("x-cache"),
            Some(expected),
            "{:?}",
            answer.headers
        );
        assert_eq!(
            vias(&answer),
            ["1.0 inner304", "1.1 weir"],
            "{:?}",
            answer.headers
        );
        assert_eq!(answer.header("x-hop"), None);
        assert_eq!(answer.text(), "relayed");
    }
    assert_eq!(node.requests(), 2);
    proxy.stop().await;
}

fn staging_answer(_: &str, _: usize) -> Answer {
    Answer::ok(b"staging").field("Cache-Control", "max-age=60")
}

/// A request a traffic rule sent to another pool, rewrote or edited for the node is neither
/// answered from the cache nor stored: its answer depends on what the rule looked at (here
/// a header), which the cache key does not hold. Users without the header never get the
/// staging page, and the other way round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_a_rule_reshaped_do_not_share_the_cache() {
    let production = CountingNode::start(fresh, Duration::ZERO).await;
    let staging = CountingNode::start(staging_answer, Duration::ZERO).await;
    let rules = format!(
        "{CACHE}[[virtual_servers.web.rules]]\nname = \"staging\"\n\
         match = {{ header = {{ name = \"X-Env\", equals = \"staging\" }} }}\npool = \"staging\"\n\
         [[virtual_servers.web.rules]]\nname = \"tagged\"\n\
         match = {{ header = {{ name = \"X-Tag\", equals = \"1\" }} }}\n\
         request_headers = {{ set = {{ X-Tagged = \"yes\" }} }}\n\
         [pools.staging]\nnodes = [{{ address = \"{}\" }}]\n",
        staging.addr
    );
    let proxy = proxy_for(&production, &rules).await;
    let staged = request(&proxy, "GET", "/p", &["X-Env: staging"]).await;
    assert_eq!(staged.text(), "staging");
    let plain = request(&proxy, "GET", "/p", &[]).await;
    assert_eq!(plain.text(), "body of /p");
    assert_eq!(plain.header("x-cache"), Some("MISS"));
    let staged = request(&proxy, "GET", "/p", &["X-Env: staging"]).await;
    assert_eq!(
        staged.text(),
        "staging",
        "a staging user got production's page"
    );
    assert_eq!(staging.requests(), 2, "the staging answers were not stored");
    // An edited request head: passed too, and the stored production page stays.
    let tagged = request(&proxy, "GET", "/p", &["X-Tag: 1"]).await;
    assert_eq!(tagged.header("x-cache"), None);
    assert!(production.heads()[1].contains("X-Tagged: yes"));
    let plain = request(&proxy, "GET", "/p", &[]).await;
    assert_eq!(plain.header("x-cache"), Some("HIT"));
    assert_eq!(production.requests(), 2);
    proxy.stop().await;
}

/// PURGE from an allowed address removes the object; the next GET misses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_method_removes_the_object() {
    let node = CountingNode::start(fresh, Duration::ZERO).await;
    let proxy = proxy_for(&node, CACHE).await;
    request(&proxy, "GET", "/p", &[]).await;
    assert_eq!(request(&proxy, "PURGE", "/p", &[]).await.status, 200);
    assert_eq!(request(&proxy, "PURGE", "/p", &[]).await.status, 404);
    assert_eq!(
        request(&proxy, "GET", "/p", &[]).await.header("x-cache"),
        Some("MISS")
    );
    assert_eq!(node.requests(), 2);
    proxy.stop().await;
}

fn numbered_slow_chunks(_: &str, count: usize) -> Answer {
    Answer::ok(format!("version {count}").as_bytes())
        .field("Cache-Control", "max-age=60")
        .chunked()
        .body_after(Duration::from_millis(300))
}

/// A purge made while a body of unknown length is still arriving (held out of the store
/// until it is complete) reaches it: the `PURGE` says so (200, not 404), the object is not
/// stored, and the next request gets the node's new answer, not the one from before the
/// purge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_during_a_fill_keeps_the_old_answer_out() {
    let node = CountingNode::start(numbered_slow_chunks, Duration::ZERO).await;
    let proxy = Arc::new(proxy_for(&node, CACHE).await);
    let filling = {
        let proxy = Arc::clone(&proxy);
        tokio::spawn(async move { request(&proxy, "GET", "/p", &[]).await })
    };
    until("the fill started", Duration::from_secs(5), || {
        node.requests() == 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(request(&proxy, "PURGE", "/p", &[]).await.status, 200);
    assert_eq!(filling.await.unwrap().body, b"version 0");
    let after = request(&proxy, "GET", "/p", &[]).await;
    assert_eq!(after.header("x-cache"), Some("MISS"));
    assert_eq!(after.body, b"version 1");
    // Without a purge, the same fill is stored.
    let again = request(&proxy, "GET", "/p", &[]).await;
    assert_eq!(again.header("x-cache"), Some("HIT"));
    assert_eq!(again.body, b"version 1");
    Arc::try_unwrap(proxy).ok().unwrap().stop().await;
}

fn numbered_paused_chunks(_: &str, count: usize) -> Answer {
    Answer::ok(format!("version {count}").as_bytes())
        .field("Cache-Control", "max-age=60")
        .chunked_with_pause(Duration::from_millis(500))
}

/// The client whose request fills a body of unknown length (stored once complete) leaves
/// in the middle of it: the rest is still read into the store, and a request waiting on
/// the fill is answered from it, not by a second request to the node (as for a body of
/// known length, read from the store as it grows).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fill_of_unknown_length_goes_on_when_its_client_leaves() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let node = CountingNode::start(numbered_paused_chunks, Duration::ZERO).await;
    let proxy = Arc::new(proxy_for(&node, CACHE).await);
    let mut leader = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    leader
        .write_all(b"GET /left HTTP/1.1\r\nHost: cache.test\r\n\r\n")
        .await
        .unwrap();
    until("the fill started", Duration::from_secs(5), || {
        node.requests() == 1
    })
    .await;
    let waiter = {
        let proxy = Arc::clone(&proxy);
        tokio::spawn(async move { request(&proxy, "GET", "/left", &[]).await })
    };
    // The head and the first chunk reach the client; it then resets its connection.
    let mut received = Vec::new();
    while !String::from_utf8_lossy(&received).contains("vers") {
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(5), leader.read(&mut chunk))
            .await
            .expect("the first chunk in time")
            .unwrap();
        assert!(n > 0, "closed before the first chunk");
        received.extend_from_slice(&chunk[..n]);
    }
    socket2::SockRef::from(&leader)
        .set_linger(Some(Duration::ZERO))
        .unwrap();
    drop(leader);
    let waited = waiter.await.unwrap();
    assert_eq!(waited.body, b"version 0");
    assert_eq!(node.requests(), 1, "the waiter went to the node again");
    let stored = request(&proxy, "GET", "/left", &[]).await;
    assert_eq!(stored.header("x-cache"), Some("HIT"));
    assert_eq!(stored.body, b"version 0");
    Arc::try_unwrap(proxy).ok().unwrap().stop().await;
}

/// A `PURGE` says 200 when it reached a fill receiving its body out of the store, with
/// coalescing off as well as on; one sent while the node has not answered yet reaches no
/// fill (404), but the answer to come, to a request made before the purge, may be what the
/// purge was meant to remove: it is not stored either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_says_whether_it_reached_a_fill() {
    let node = CountingNode::start(numbered_slow_chunks, Duration::ZERO).await;
    let uncoalesced = format!("{CACHE}coalesce = false\n");
    let proxy = Arc::new(proxy_for(&node, &uncoalesced).await);
    let filling = {
        let proxy = Arc::clone(&proxy);
        tokio::spawn(async move { request(&proxy, "GET", "/u", &[]).await })
    };
    until("the fill started", Duration::from_secs(5), || {
        node.requests() == 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(request(&proxy, "PURGE", "/u", &[]).await.status, 200);
    assert_eq!(filling.await.unwrap().body, b"version 0");
    let after = request(&proxy, "GET", "/u", &[]).await;
    assert_eq!(after.header("x-cache"), Some("MISS"));
    Arc::try_unwrap(proxy).ok().unwrap().stop().await;

    let slow = CountingNode::start(fresh, Duration::from_millis(600)).await;
    let proxy = Arc::new(proxy_for(&slow, CACHE).await);
    let waiting = {
        let proxy = Arc::clone(&proxy);
        tokio::spawn(async move { request(&proxy, "GET", "/w", &[]).await })
    };
    until(
        "the request reached the node",
        Duration::from_secs(5),
        || slow.requests() == 1,
    )
    .await;
    assert_eq!(request(&proxy, "PURGE", "/w", &[]).await.status, 404);
    assert_eq!(waiting.await.unwrap().status, 200);
    let after = request(&proxy, "GET", "/w", &[]).await;
    assert_eq!(after.header("x-cache"), Some("MISS"));
    let stored = request(&proxy, "GET", "/w", &[]).await;
    assert_eq!(stored.header("x-cache"), Some("HIT"));
    assert_eq!(slow.requests(), 2);
    Arc::try_unwrap(proxy).ok().unwrap().stop().await;
}

/// v0 is fresh for a second, then served stale for a minute while it is refreshed; the
/// refresh's answer (v1) is made when its request comes and sent 1.5 s later, the next
/// ones (v2, ...) at once.
fn refreshed_slowly(_: &str, count: usize) -> Answer {
    let answer = |count: usize| {
        Answer::ok(format!("v{count}").as_bytes())
            .field("Cache-Control", "max-age=60")
            .field("Surrogate-Key", "all-v")
    };
    match count {
        0 => Answer::ok(b"v0")
            .field("Cache-Control", "max-age=1, stale-while-revalidate=60")
            .field("Surrogate-Key", "all-v"),
        1 => answer(1).sent_after(REFRESH_ANSWERED),
        _ => answer(count),
    }
}

/// How long after its request the refresh's answer comes ([`refreshed_slowly`]).
const REFRESH_ANSWERED: Duration = Duration::from_millis(1500);

/// Serves /r stale, so that its background refresh goes to the node, and waits until it
/// has: its answer (v1) comes [`REFRESH_ANSWERED`] later.
async fn stale_with_a_refresh_out(proxy: &TestProxy, node: &CountingNode) {
    assert_eq!(request(proxy, "GET", "/r", &[]).await.text(), "v0");
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let stale = request(proxy, "GET", "/r", &[]).await;
    assert_eq!(stale.header("x-cache"), Some("STALE"));
    until("the refresh reaches the node", REFRESH, || {
        node.requests() == 2
    })
    .await;
}

/// A purge (by URL, by tag) or a ban made while a stale-while-revalidate refresh is out at
/// the node keeps the refresh's answer out of the store, as it does a 304's: the node's
/// content changed, then the purge came, and that answer was made before. With coalescing
/// off, it would have replaced the newer answer a request after the purge stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_or_ban_while_a_refresh_is_out_keeps_its_answer_out() {
    type Withdraw = fn(&TestProxy) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + '_>>;
    let by_url: Withdraw = |proxy| {
        Box::pin(async move {
            assert_eq!(request(proxy, "PURGE", "/r", &[]).await.status, 200);
        })
    };
    let by_ban: Withdraw = |proxy| {
        Box::pin(async move {
            let model = proxy.live.current();
            let cache = model.virtual_servers[0].cache().expect("a cache");
            cache
                .ban("^http://cache\\.test/r$", weir_cache::UnixTime::now())
                .unwrap();
        })
    };
    // By tag: the tag comes with the refresh's own answer, after the purge.
    let by_tag: Withdraw = |proxy| {
        Box::pin(async move {
            let model = proxy.live.current();
            model.virtual_servers[0]
                .cache()
                .expect("a cache")
                .purge_tag("all-v");
        })
    };
    for (name, withdraw, coalesce) in [
        ("purge", by_url, true),
        ("ban", by_ban, true),
        ("tag", by_tag, true),
        ("purge, uncoalesced", by_url, false),
    ] {
        let node = CountingNode::start(refreshed_slowly, Duration::ZERO).await;
        let proxy = proxy_for(&node, &format!("{CACHE}coalesce = {coalesce}\n")).await;
        stale_with_a_refresh_out(&proxy, &node).await;
        let withdrawn = std::time::Instant::now();
        withdraw(&proxy).await;
        // With coalescing, waits on the refresh, which is not stored, then goes to the node
        // itself; without, stores v2 while the refresh is still out.
        let after = request(&proxy, "GET", "/r", &[]).await;
        assert_eq!(after.text(), "v2", "{name}");
        assert_eq!(node.requests(), 3, "{name}");
        tokio::time::sleep(REFRESH_ANSWERED.saturating_sub(withdrawn.elapsed()) + REFRESH / 4)
            .await;
        let stored = request(&proxy, "GET", "/r", &[]).await;
        assert_eq!(
            (stored.text(), stored.header("x-cache")),
            ("v2".to_owned(), Some("HIT")),
            "{name}"
        );
        proxy.stop().await;
    }
}

fn four_mib_chunked(_: &str, _: usize) -> Answer {
    Answer::ok(&vec![b'x'; 4 << 20])
        .field("Cache-Control", "max-age=60")
        .chunked()
}

/// The client whose request fills a body of unknown length stops reading: the fill goes on
/// at the node's pace, so a request waiting on it gets the whole object at once, from the
/// one request to the node, not after the coalescing timeout from a second one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fill_of_unknown_length_does_not_wait_for_a_client_that_stopped_reading() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let node = CountingNode::start(four_mib_chunked, Duration::ZERO).await;
    let vs_extra = format!("{CACHE}coalesce_timeout = \"60s\"\n");
    let proxy = Arc::new(proxy_for(&node, &vs_extra).await);
    let mut stalled = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    stalled
        .write_all(b"GET /big HTTP/1.1\r\nHost: cache.test\r\n\r\n")
        .await
        .unwrap();
    // The head and some body come; then the client reads nothing more.
    let mut first = [0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), stalled.read(&mut first))
        .await
        .expect("the head in time")
        .unwrap();
    assert!(n > 0);
    let waiter = {
        let proxy = Arc::clone(&proxy);
        tokio::spawn(async move { request(&proxy, "GET", "/big", &[]).await })
    };
    let waited = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("the waiter was answered while the first client stalled")
        .unwrap();
    assert_eq!(waited.body.len(), 4 << 20);
    assert_eq!(node.requests(), 1, "the waiter went to the node again");
    drop(stalled);
    Arc::try_unwrap(proxy).ok().unwrap().stop().await;
}

fn digits_after_a_pause(_: &str, _: usize) -> Answer {
    Answer::ok(b"0123456789")
        .field("Cache-Control", "max-age=60")
        .body_after(Duration::from_millis(300))
}

/// Ranges asked while the object is still filling (its length declared by the node) get
/// 206 with their bytes, not the whole object: the request that started the fill (whose
/// `Range` the node never saw) and one that found the object growing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranges_are_answered_while_the_object_fills() {
    let node = CountingNode::start(digits_after_a_pause, Duration::ZERO).await;
    let proxy = Arc::new(proxy_for(&node, CACHE).await);
    let leader = {
        let proxy = Arc::clone(&proxy);
        tokio::spawn(async move { request(&proxy, "GET", "/g", &["Range: bytes=2-4"]).await })
    };
    until("the fill started", Duration::from_secs(5), || {
        node.requests() == 1
    })
    .await;
    assert!(!node.heads()[0].to_ascii_lowercase().contains("range:"));
    let tail = request(&proxy, "GET", "/g", &["Range: bytes=-3"]).await;
    assert_eq!((tail.status, tail.text()), (206, "789".to_owned()));
    assert_eq!(tail.header("content-range"), Some("bytes 7-9/10"));
    let leader = leader.await.unwrap();
    assert_eq!((leader.status, leader.text()), (206, "234".to_owned()));
    assert_eq!(leader.header("content-range"), Some("bytes 2-4/10"));
    let stored = request(&proxy, "GET", "/g", &["Range: bytes=0-0"]).await;
    assert_eq!((stored.status, stored.text()), (206, "0".to_owned()));
    assert_eq!(node.requests(), 1);
    Arc::try_unwrap(proxy).ok().unwrap().stop().await;
}

fn slow_by_path(head: &str, _: usize) -> Answer {
    let path = head.split(' ').nth(1).unwrap_or("/");
    if head.to_ascii_lowercase().contains("x-fail: 1") {
        return Answer::ok(b"down").status(503);
    }
    let cache_control = match path {
        "/no-cache" => "no-cache",
        "/stale" => "max-age=0",
        "/refreshed" => "max-age=0, stale-while-revalidate=60",
        "/failing" => "max-age=0, stale-if-error=60",
        _ => "max-age=60",
    };
    Answer::ok(b"0123456789")
        .field("Cache-Control", cache_control)
        .field("ETag", "\"v1\"")
        .body_after(Duration::from_millis(400))
}

/// An object whose body is still arriving is judged as a whole one is: a fresh one is a
/// hit; a `no-cache` response, one already stale, and a client's `no-cache` are validated
/// with the node (RFC 9111 §5.2.2.4, §4, §5.2.1.4), asked for the whole response;
/// `stale-while-revalidate` serves it and refreshes it behind, `stale-if-error` serves it
/// when the node fails (RFC 5861).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_still_filling_is_judged_as_a_whole_one() {
    let node = CountingNode::start(slow_by_path, Duration::ZERO).await;
    let proxy = Arc::new(proxy_for(&node, CACHE).await);
    for (path, fields, status, node_requests) in [
        ("/fresh", &[][..], "HIT", 1),
        ("/no-cache", &[][..], "EXPIRED", 2),
        ("/stale", &[][..], "EXPIRED", 2),
        (
            "/fresh-asked-again",
            &["Cache-Control: no-cache"][..],
            "EXPIRED",
            2,
        ),
        ("/refreshed", &[][..], "STALE", 2),
        ("/failing", &["X-Fail: 1"][..], "STALE-IF-ERROR", 2),
    ] {
        let before = node.requests();
        let leader = {
            let proxy = Arc::clone(&proxy);
            tokio::spawn(async move { request(&proxy, "GET", path, &[]).await })
        };
        until("the fill started", Duration::from_secs(5), || {
            node.requests() == before + 1
        })
        .await;
        // The head is in; the body follows 400 ms after it.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let second = request(&proxy, "GET", path, fields).await;
        assert_eq!(
            (second.status, second.text(), second.header("x-cache")),
            (200, "0123456789".to_owned(), Some(status)),
            "{path} {fields:?}"
        );
        let leader = leader.await.unwrap();
        assert_eq!(
            (leader.status, leader.text()),
            (200, "0123456789".to_owned())
        );
        until(path, Duration::from_secs(5), || {
            node.requests() == before + node_requests
        })
        .await;
        // Asked whole while it grows: a 304 could not refresh an object its fill still
        // writes. (The background refresh goes once the answer is out, the fill done.)
        if node_requests == 2 && status != "STALE" {
            let asked = node.heads()[before + 1].to_ascii_lowercase();
            assert!(!asked.contains("if-none-match"), "{path}: {asked}");
        }
    }
    Arc::try_unwrap(proxy).ok().unwrap().stop().await;
}

/// 1,000 concurrent misses for one cold object make exactly one request to
/// the node. The node holds its answer until every other request is waiting
/// for the leader's fill, so the count does not depend on timing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_misses_make_one_node_request() {
    const CLIENTS: usize = 1_000;
    let node = CountingNode::start_held(fresh, Duration::ZERO).await;
    let proxy = Arc::new(proxy_for(&node, &format!("{CACHE}coalesce_timeout = \"60s\"\n")).await);
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let addr = proxy.addr;
            tokio::spawn(async move { client::get(addr, "/cold").await })
        })
        .collect();
    let metrics = proxy.metrics.cache("web");
    let waited = tokio::time::timeout(Duration::from_secs(30), async {
        while metrics.waiting.get() < (CLIENTS - 1) as i64 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(
        waited.is_ok(),
        "{} of {} requests waiting, node saw {}",
        metrics.waiting.get(),
        CLIENTS - 1,
        node.requests()
    );
    assert_eq!(node.requests(), 1);
    node.release();
    for client in clients {
        let response = client.await.unwrap().expect("every client gets an answer");
        assert_eq!(
            (response.status, response.text()),
            (200, "body of /cold".to_owned())
        );
    }
    assert_eq!(node.requests(), 1);
    assert_eq!(metrics.misses.get(), 1);
    // Each waiter counted once, as answered from the fill; none waits any more.
    assert_eq!(metrics.coalesced.get(), (CLIENTS - 1) as u64);
    assert_eq!(metrics.waiting.get(), 0);
    Arc::into_inner(proxy).unwrap().stop().await;
}

fn large(_: &str, _: usize) -> Answer {
    let body: Vec<u8> = (0..4 << 20).map(|i: u32| (i % 251) as u8).collect();
    Answer::ok(&body).field("Cache-Control", "max-age=60")
}

/// A body larger than the response buffer reaches the first client whole
/// while it is stored, and the second from the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_bodies_stream_while_they_are_stored() {
    let node = CountingNode::start(large, Duration::ZERO).await;
    let proxy = proxy_for(&node, CACHE).await;
    let expected = large("", 0).body;
    for status in ["MISS", "HIT"] {
        let response = request(&proxy, "GET", "/big", &[]).await;
        assert_eq!(response.header("x-cache"), Some(status));
        assert!(response.body == expected, "{status}: body differs");
    }
    assert_eq!(node.requests(), 1);
    proxy.stop().await;
}

const HUGE: usize = 16 << 20;

fn huge(_: &str, _: usize) -> Answer {
    let body: Vec<u8> = (0..HUGE).map(|i| (i % 253) as u8).collect();
    Answer::ok(&body).field("Cache-Control", "max-age=60")
}

/// A client that sends `GET path` and then reads nothing: its receive buffer
/// is a few KiB, so almost all of a large answer stays on weir's side.
async fn stalled_client(addr: std::net::SocketAddr, path: &str) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket.connect(addr).await.unwrap();
    // The same Host as `client::get`, so that both ask for one object.
    let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n");
    tokio::io::AsyncWriteExt::write_all(&mut stream, request.as_bytes())
        .await
        .unwrap();
    stream
}

/// What a stalled client had received (one read without waiting), then the
/// whole answer once it reads: (bytes it had, status line, body).
async fn drain_stalled(mut stream: tokio::net::TcpStream) -> (usize, String, Vec<u8>) {
    use tokio::io::AsyncReadExt;
    // One read without waiting takes what the client's receive buffer holds.
    let mut received = vec![0u8; HUGE];
    let had = stream.try_read(&mut received).unwrap_or(0);
    received.truncate(had);
    let mut chunk = vec![0u8; 64 << 10];
    let read_all = async {
        let end = loop {
            if let Some(at) = received.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            let n = stream.read(&mut chunk).await.unwrap();
            assert!(n > 0, "closed before the head");
            received.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8_lossy(&received[..end]).into_owned();
        let length: usize = head
            .lines()
            .find_map(|line| {
                line.to_ascii_lowercase()
                    .strip_prefix("content-length: ")
                    .map(str::to_owned)
            })
            .and_then(|value| value.trim().parse().ok())
            .expect("a Content-Length");
        while received.len() < end + length {
            let n = stream.read(&mut chunk).await.unwrap();
            assert!(n > 0, "closed before the end of the body");
            received.extend_from_slice(&chunk[..n]);
        }
        let status = head.lines().next().unwrap_or_default().to_owned();
        (status, received[end..end + length].to_vec())
    };
    let (status, body) = tokio::time::timeout(Duration::from_secs(20), read_all)
        .await
        .expect("the stalled client gets its answer once it reads");
    (had, status, body)
}

/// Four clients that each fetch `path` at once; all must be answered promptly.
async fn prompt_hits(proxy: &TestProxy, path: &'static str, expected: &[u8]) {
    let fetches: Vec<_> = (0..4)
        .map(|_| {
            let addr = proxy.addr;
            tokio::spawn(async move {
                let started = std::time::Instant::now();
                let response = client::get(addr, path).await.unwrap();
                (response, started.elapsed())
            })
        })
        .collect();
    for fetch in fetches {
        let (response, took) = tokio::time::timeout(Duration::from_secs(20), fetch)
            .await
            .expect("other clients are not held up by a stalled one")
            .unwrap();
        assert_eq!(response.status, 200);
        assert!(response.body == expected, "body differs");
        assert!(took < Duration::from_secs(10), "a hit took {took:?}");
    }
}

/// A client that reads nothing — first the one whose miss fills the object,
/// then one that asked for the stored object — holds up neither the fill nor
/// other clients' hits on the same object; it still gets the whole body
/// once it reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_reader_never_blocks_other_hits_on_the_object() {
    let node = CountingNode::start(huge, Duration::ZERO).await;
    let proxy = proxy_for(&node, &format!("{CACHE}max_object_size = \"32MiB\"\n")).await;
    let expected = huge("", 0).body;
    let leader = stalled_client(proxy.addr, "/huge").await;
    tokio::time::timeout(Duration::from_secs(10), async {
        while node.requests() == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the stalled client's miss reaches the node");
    prompt_hits(&proxy, "/huge", &expected).await;
    let stored = stalled_client(proxy.addr, "/huge").await;
    prompt_hits(&proxy, "/huge", &expected).await;
    assert_eq!(node.requests(), 1);
    for stalled in [leader, stored] {
        let (had, status, body) = drain_stalled(stalled).await;
        assert!(
            had < HUGE / 2,
            "the client was not stalled: it had {had} bytes"
        );
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert!(body == expected, "the stalled client's body differs");
    }
    proxy.stop().await;
}

/// A small store under many objects of random sizes (some bigger than a
/// shard's share allows twice) never holds more than its bound + 5 %, and
/// stays full.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_stays_within_its_bound_under_random_sizes() {
    const BOUND: i64 = 1 << 20;
    let node = CountingNode::start(sized, Duration::ZERO).await;
    let proxy = Arc::new(
        proxy_for(
            &node,
            &format!("{CACHE}size = \"1MiB\"\nmax_object_size = \"64KiB\"\n"),
        )
        .await,
    );
    let metrics = proxy.metrics.cache("web");
    let workers: Vec<_> = (0..4u64)
        .map(|worker| {
            let (addr, metrics) = (proxy.addr, metrics.clone());
            tokio::spawn(async move {
                let mut connection = Connection::open(addr).await.unwrap();
                // A small LCG per connection: sizes from 0 to 64 KiB.
                let mut state = 0x9e37_79b9_7f4a_7c15_u64 ^ worker;
                let mut peak = 0;
                for index in 0..150 {
                    state = state
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1_442_695_040_888_963_407);
                    let size = (state >> 33) % (64 << 10);
                    let path = format!("/r/{size}/{worker}-{index}");
                    let head = format!("GET {path} HTTP/1.1\r\nHost: cache.test\r\n\r\n");
                    connection.send(head.as_bytes()).await.unwrap();
                    let response = connection.response().await.unwrap();
                    assert_eq!(response.body.len() as u64, size, "{path}");
                    let held = metrics.bytes_stored.get();
                    assert!(held <= BOUND + BOUND / 20, "{held} bytes held after {path}");
                    peak = peak.max(held);
                }
                peak
            })
        })
        .collect();
    for worker in workers {
        worker.await.unwrap();
    }
    let held = metrics.bytes_stored.get();
    assert!(held <= BOUND + BOUND / 20, "{held} bytes held");
    // About 19 MiB went through a 1 MiB store: it evicted, and is still full
    // to within one of its largest objects per shard.
    assert!(
        metrics.evictions.get() > 100,
        "{} evictions",
        metrics.evictions.get()
    );
    assert!(held > BOUND / 2, "{held} bytes held");
    assert_eq!(node.requests(), 600);
    Arc::into_inner(proxy).unwrap().stop().await;
}

fn sized(head: &str, _: usize) -> Answer {
    let size: usize = head
        .split(' ')
        .nth(1)
        .and_then(|path| path.split('/').nth(2))
        .and_then(|size| size.parse().ok())
        .unwrap_or(0);
    Answer::ok(&vec![b'x'; size]).field("Cache-Control", "max-age=60")
}

fn fails_after_first(_: &str, count: usize) -> Answer {
    match count {
        0 => Answer::ok(b"kept")
            .field(
                "Cache-Control",
                "max-age=1, stale-if-error=60, stale-while-revalidate=0",
            )
            .field("ETag", "\"s\""),
        _ => Answer::ok(b"down").status(503),
    }
}

/// Once stale, the object is served while the node answers 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_if_error_serves_the_stored_object_while_the_node_fails() {
    let node = CountingNode::start(fails_after_first, Duration::ZERO).await;
    let proxy = proxy_for(&node, CACHE).await;
    request(&proxy, "GET", "/s", &[]).await;
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let response = request(&proxy, "GET", "/s", &[]).await;
    assert_eq!((response.status, response.text()), (200, "kept".to_owned()));
    assert_eq!(response.header("x-cache"), Some("STALE-IF-ERROR"));
    assert_eq!(node.requests(), 2);
    proxy.stop().await;
}

fn fails_after_first_swr(_: &str, count: usize) -> Answer {
    match count {
        0 => Answer::ok(b"kept").field(
            "Cache-Control",
            "max-age=1, stale-if-error=60, stale-while-revalidate=60",
        ),
        _ => Answer::ok(b"down").status(500),
    }
}

/// A background refresh the node fails answers no client (the one that set it off was
/// answered stale already): `weir_cache_stale_served_total` counts that client once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_background_refresh_is_no_stale_answer() {
    let node = CountingNode::start(fails_after_first_swr, Duration::ZERO).await;
    let proxy = proxy_for(&node, CACHE).await;
    let stale_served = proxy.metrics.cache("web").stale_served;
    request(&proxy, "GET", "/s", &[]).await;
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let response = request(&proxy, "GET", "/s", &[]).await;
    assert_eq!(response.header("x-cache"), Some("STALE"));
    until("the refresh reaches the node", REFRESH, || {
        node.requests() == 2
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(stale_served.get(), 1);
    proxy.stop().await;
}

fn fresh_then_failing(head: &str, count: usize) -> Answer {
    let cache_control = match head.contains("/windowed") {
        true => "max-age=60, stale-if-error=60",
        false => "max-age=60",
    };
    match count {
        0 | 1 => Answer::ok(b"kept").field("Cache-Control", cache_control),
        _ => Answer::ok(b"down").status(503),
    }
}

/// A client that demands a validation (`no-cache`) of a fresh object that the node then
/// fails gets the node's error, not the stored object labelled STALE-IF-ERROR: nothing
/// allowed it to be served on an error. With a `stale-if-error` window, it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demanded_validation_that_fails_serves_the_object_only_within_stale_if_error() {
    let node = CountingNode::start(fresh_then_failing, Duration::ZERO).await;
    let proxy = proxy_for(&node, CACHE).await;
    let stale_served = proxy.metrics.cache("web").stale_served;
    request(&proxy, "GET", "/plain", &[]).await;
    request(&proxy, "GET", "/windowed", &[]).await;
    let plain = request(&proxy, "GET", "/plain", &["Cache-Control: no-cache"]).await;
    assert_eq!((plain.status, plain.text()), (503, "down".to_owned()));
    let windowed = request(&proxy, "GET", "/windowed", &["Cache-Control: no-cache"]).await;
    assert_eq!(
        (windowed.status, windowed.text(), windowed.header("x-cache")),
        (200, "kept".to_owned(), Some("STALE-IF-ERROR"))
    );
    assert_eq!(stale_served.get(), 1);
    assert_eq!(node.requests(), 4);
    proxy.stop().await;
}

/// v0 is fresh for a second; the refreshed v1 for a minute, so that a slow
/// run does not find it stale again (ages count whole seconds).
fn versions(_: &str, count: usize) -> Answer {
    let max_age = if count == 0 { 1 } else { 60 };
    Answer::ok(format!("v{count}").as_bytes()).field(
        "Cache-Control",
        &format!("max-age={max_age}, stale-while-revalidate=60"),
    )
}

/// Within stale-while-revalidate the stale object is answered at once and
/// refreshed from the node after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_while_revalidate_refreshes_after_answering() {
    let node = CountingNode::start(versions, Duration::ZERO).await;
    let proxy = proxy_for(&node, CACHE).await;
    assert_eq!(request(&proxy, "GET", "/r", &[]).await.text(), "v0");
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let stale = request(&proxy, "GET", "/r", &[]).await;
    assert_eq!(
        (stale.text(), stale.header("x-cache")),
        ("v0".to_owned(), Some("STALE"))
    );
    until("the refresh reaches the node", REFRESH, || {
        node.requests() == 2
    })
    .await;
    let fresh = request(&proxy, "GET", "/r", &[]).await;
    assert_eq!(
        (fresh.text(), fresh.header("x-cache")),
        ("v1".to_owned(), Some("HIT"))
    );
    assert_eq!(node.requests(), 2);
    proxy.stop().await;
}

/// As `versions`, each answer after a `103 Early Hints`.
fn hinted_versions(head: &str, count: usize) -> Answer {
    versions(head, count).early_hints()
}

/// A background refresh sends nothing to the client whose request started it: the node's
/// `103 Early Hints` to the refresh does not land on that kept-alive connection after its
/// answer, where it would be read as the answer to its next request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_refresh_sends_the_client_no_interim_answer() {
    use tokio::io::AsyncReadExt;
    let node = CountingNode::start(hinted_versions, Duration::ZERO).await;
    let proxy = proxy_for(&node, CACHE).await;
    assert_eq!(request(&proxy, "GET", "/h", &[]).await.text(), "v0");
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let mut connection = Connection::open(proxy.addr).await.unwrap();
    let get = b"GET /h HTTP/1.1\r\nHost: cache.test\r\n\r\n";
    connection.send(get).await.unwrap();
    let stale = connection.response().await.unwrap();
    assert_eq!(
        (stale.text(), stale.header("x-cache")),
        ("v0".to_owned(), Some("STALE"))
    );
    until("the refresh reaches the node", REFRESH, || {
        node.requests() == 2
    })
    .await;
    assert_eq!(node.requests(), 2, "the refresh reached the node");
    // Nothing more arrives on the connection before its next request.
    let mut byte = [0u8; 1];
    let unasked = tokio::time::timeout(
        Duration::from_millis(300),
        connection.stream.read(&mut byte),
    )
    .await;
    assert!(
        unasked.is_err(),
        "unasked bytes after the answer: {unasked:?}"
    );
    connection.send(get).await.unwrap();
    let fresh = connection.response().await.unwrap();
    assert_eq!((fresh.status, fresh.text()), (200, "v1".to_owned()));
    proxy.stop().await;
}

/// As `fresh`, with a field `TAG_RULE` takes off.
fn with_internal(head: &str, count: usize) -> Answer {
    fresh(head, count).field("X-Internal", "secret")
}

/// A rule that sets `X-Tag: t` on every response and takes `X-Internal` off.
const TAG_RULE: &str = "[[virtual_servers.web.rules]]\nname = \"tag\"\n\
                        response_headers = { set = { X-Tag = \"t\" }, remove = [\"X-Internal\"] }\n";

/// The rules' response edits and the request id reach answers from the cache as they reach
/// relayed ones: on the miss that stores, on hits, on a 304 from the store and on a stale
/// answer, each with its own request's id. None of it is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_edits_and_request_ids_reach_answers_from_the_cache() {
    let node = CountingNode::start(with_internal, Duration::ZERO).await;
    let request_ids = "[virtual_servers.web.request_id]\nto_client = true\n";
    let proxy = proxy_for(&node, &format!("{CACHE}{request_ids}{TAG_RULE}")).await;
    let count = |response: &Response, name: &str| {
        response
            .headers
            .iter()
            .filter(|(field, _)| field.eq_ignore_ascii_case(name))
            .count()
    };
    let check = |response: &Response, cache: &str, id: &str| {
        assert_eq!(
            response.header("x-cache"),
            Some(cache),
            "{:?}",
            response.headers
        );
        assert_eq!(response.header("x-tag"), Some("t"), "{cache}");
        assert_eq!(count(response, "x-tag"), 1, "{cache}");
        assert_eq!(response.header("x-internal"), None, "{cache}");
        assert_eq!(response.header("x-request-id"), Some(id), "{cache}");
        assert_eq!(count(response, "x-request-id"), 1, "{cache}");
    };
    let miss = request(&proxy, "GET", "/e", &["X-Request-Id: id-1"]).await;
    check(&miss, "MISS", "id-1");
    assert_eq!(miss.text(), "body of /e");
    let hit = request(&proxy, "GET", "/e", &["X-Request-Id: id-2"]).await;
    check(&hit, "HIT", "id-2");
    assert_eq!(hit.text(), "body of /e");
    let fields = ["X-Request-Id: id-3", "If-None-Match: \"v1\""];
    let not_modified = request(&proxy, "GET", "/e", &fields).await;
    assert_eq!(not_modified.status, 304);
    check(&not_modified, "HIT", "id-3");
    let head = request(&proxy, "HEAD", "/e", &["X-Request-Id: id-4"]).await;
    check(&head, "HIT", "id-4");
    // Without an incoming id, each hit gets one of its own.
    let generated: Vec<String> = [
        request(&proxy, "GET", "/e", &[]).await,
        request(&proxy, "GET", "/e", &[]).await,
    ]
    .iter()
    .map(|hit| {
        let id = hit.header("x-request-id").expect("an id").to_owned();
        check(hit, "HIT", &id);
        assert_eq!(id.len(), 32, "{id}");
        id
    })
    .collect();
    assert_ne!(generated[0], generated[1]);
    assert_eq!(node.requests(), 1);
    proxy.stop().await;
}

/// As `text`, with a field `TAG_RULE` takes off.
fn text_with_internal(head: &str, count: usize) -> Answer {
    text(head, count).field("X-Internal", "secret")
}

/// The rules' response edits reach a response compressed on its way (no cache).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_edits_reach_compressed_responses() {
    let node = CountingNode::start(text_with_internal, Duration::ZERO).await;
    let compression = "[virtual_servers.web.compression]\nalgorithms = [\"gzip\"]\n";
    let proxy = proxy_for(&node, &format!("{compression}{TAG_RULE}")).await;
    let gzip = request(&proxy, "GET", "/t", &["Accept-Encoding: gzip"]).await;
    assert_eq!(gzip.header("content-encoding"), Some("gzip"));
    assert_eq!(gzip.header("x-tag"), Some("t"));
    assert_eq!(gzip.header("x-internal"), None);
    proxy.stop().await;
}

/// A reload that keeps the cache settings keeps the objects; one that
/// changes them starts empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_keeps_the_cache_when_its_settings_stay() {
    let node = CountingNode::start(fresh, Duration::ZERO).await;
    let dir = tempfile_dir();
    let path = dir.join("weir.toml");
    let write = |extra: &str| std::fs::write(&path, config(&[node.addr], "", extra)).unwrap();
    write(CACHE);
    let proxy = TestProxy::start_file(&path).await;
    request(&proxy, "GET", "/k", &[]).await;
    write(&format!("{CACHE}stale_if_error = \"5s\"\n"));
    proxy.live.reload_file().unwrap();
    assert_eq!(
        request(&proxy, "GET", "/k", &[]).await.header("x-cache"),
        Some("HIT")
    );
    write(&format!("{CACHE}size = \"64MiB\"\n"));
    proxy.live.reload_file().unwrap();
    assert_eq!(
        request(&proxy, "GET", "/k", &[]).await.header("x-cache"),
        Some("MISS")
    );
    assert_eq!(node.requests(), 2);
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "weir-cache-test-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn text(_: &str, _: usize) -> Answer {
    Answer::ok(
        "the quick brown fox jumps over the lazy dog\n"
            .repeat(200)
            .as_bytes(),
    )
    .field("Cache-Control", "max-age=60")
    .field("Content-Type", "text/plain; charset=utf-8")
    .field("ETag", "\"t\"")
}

fn text_after_a_pause(head: &str, count: usize) -> Answer {
    text(head, count).body_after(Duration::from_millis(200))
}

/// A compressed miss whose body comes after its head: the length of what weir sends is
/// not known when the head goes (the node's `Content-Length` is the identity body's), so
/// the answer is chunked, and it decodes to the node's bytes; the same for a client that
/// joins the fill, and the stored variant has its actual length.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compressed_miss_is_framed_by_what_is_sent() {
    let node = CountingNode::start(text_after_a_pause, Duration::ZERO).await;
    let compression = "[virtual_servers.web.compression]\n";
    let proxy = proxy_for(&node, &format!("{CACHE}{compression}")).await;
    let expected = text("", 0).body;
    let url = format!("http://{}/slow", proxy.addr);
    let fetch = |url: String| {
        tokio::task::spawn_blocking(move || {
            std::process::Command::new("curl")
                .args([
                    "-s",
                    "--compressed",
                    "-H",
                    "Accept-Encoding: gzip",
                    "-D",
                    "-",
                ])
                .arg(&url)
                .output()
                .expect("run curl")
        })
    };
    let (first, joiner) = (fetch(url.clone()), {
        let url = url.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            fetch(url).await
        }
    });
    let (first, joiner) = tokio::join!(first, joiner);
    for output in [first.unwrap(), joiner.unwrap()] {
        assert!(output.status.success(), "curl: {:?}", output.status);
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").expect("a head");
        assert!(head.contains("Content-Encoding: gzip"), "{head}");
        if let Some(length) = head
            .lines()
            .find_map(|line| line.strip_prefix("Content-Length: "))
        {
            panic!("Content-Length {length} before the compressed length is known: {head}");
        }
        assert_eq!(body.as_bytes(), &expected[..]);
    }
    // Complete now: a hit carries the stored variant's actual length (the raw gzip bytes).
    let hit = tokio::task::spawn_blocking(move || {
        std::process::Command::new("curl")
            .args(["-s", "-H", "Accept-Encoding: gzip", "-D", "-"])
            .arg(&url)
            .output()
            .expect("run curl")
    })
    .await
    .unwrap();
    let (head, body) = hit
        .stdout
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|at| {
            (
                String::from_utf8_lossy(&hit.stdout[..at]).into_owned(),
                &hit.stdout[at + 4..],
            )
        })
        .expect("a head");
    assert!(head.contains("X-Cache: HIT"), "{head}");
    let length = format!("Content-Length: {}", body.len());
    assert!(head.lines().any(|line| line == length), "{head}");
    assert_eq!(node.requests(), 1);
    proxy.stop().await;
}

/// curl --compressed (an outside client) gets each coding it asks for,
/// decodes it to the node's bytes, and each variant is fetched once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_variants_are_stored_once_each() {
    let node = CountingNode::start(text, Duration::ZERO).await;
    let compression = "[virtual_servers.web.compression]\n";
    let proxy = proxy_for(&node, &format!("{CACHE}{compression}")).await;
    let expected = text("", 0).body;
    let url = format!("http://{}/t", proxy.addr);
    for (accept, coding) in [
        ("gzip", "gzip"),
        ("br", "br"),
        ("zstd", "zstd"),
        ("gzip", "gzip"),
    ] {
        let output = curl(&[
            "--compressed",
            "-H",
            &format!("Accept-Encoding: {accept}"),
            &url,
        ])
        .await;
        assert_eq!(output.body, expected, "{accept}");
        assert!(
            output.head.contains(&format!("content-encoding: {coding}")),
            "{}",
            output.head
        );
        assert!(
            output.head.contains("vary: accept-encoding"),
            "{}",
            output.head
        );
        assert!(output.head.contains("etag: w/\"t\""), "{}", output.head);
    }
    // Identity: not compressed, a variant of its own.
    let plain = request(&proxy, "GET", "/t", &[]).await;
    assert_eq!(plain.body, expected);
    assert_eq!(plain.header("content-encoding"), None);
    assert_eq!(node.requests(), 4);
    proxy.stop().await;
}

/// `"v1"` first, stale at once; then `"v2"`, and to a request that validates, a 304 that
/// names `"v2"` (a node whose object changed under a validator it no longer knows).
fn changed_under_validator(head: &str, count: usize) -> Answer {
    let validates = head
        .lines()
        .any(|line| line.to_ascii_lowercase().starts_with("if-none-match:"));
    match (count, validates) {
        (0, _) => Answer::ok(b"first")
            .field("Cache-Control", "max-age=0")
            .field("ETag", "\"v1\""),
        (_, true) => Answer::ok(b"")
            .status(304)
            .field("Cache-Control", "max-age=60")
            .field("ETag", "\"v2\""),
        (_, false) => Answer::ok(b"second")
            .field("Cache-Control", "max-age=60")
            .field("ETag", "\"v2\""),
    }
}

/// A 304 that cannot update the stored object (its strong validator is another) is not
/// taken as one that can: the stored body is not served for it (RFC 9111 §4.3.4); the
/// request goes to the node again without validators, and its answer is served and stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_304_about_another_representation_refetches_instead_of_serving_the_stored_one() {
    let node = CountingNode::start(changed_under_validator, Duration::ZERO).await;
    let proxy = proxy_for(&node, CACHE).await;
    let first = request(&proxy, "GET", "/c", &[]).await;
    assert_eq!((first.status, first.text()), (200, "first".to_owned()));
    let second = request(&proxy, "GET", "/c", &[]).await;
    assert_eq!(second.status, 200);
    assert_eq!(second.text(), "second", "{:?}", second.headers);
    assert_eq!(second.header("etag"), Some("\"v2\""));
    assert_ne!(second.header("x-cache"), Some("REVALIDATED"));
    let heads = node.heads();
    assert_eq!(heads.len(), 3, "{heads:?}");
    assert!(
        heads[1]
            .to_ascii_lowercase()
            .contains("if-none-match: \"v1\""),
        "{heads:?}"
    );
    assert!(
        !heads[2].to_ascii_lowercase().contains("if-none-match"),
        "{heads:?}"
    );
    // What the refetch brought is what the cache holds now.
    let third = request(&proxy, "GET", "/c", &[]).await;
    assert_eq!(
        (third.text(), third.header("x-cache")),
        ("second".to_owned(), Some("HIT"))
    );
    assert_eq!(node.requests(), 3);
    proxy.stop().await;
}

/// One of two nodes that answer a validating request with a 304 about `"v2"` and any
/// other with a stale `"v1"` that names them.
fn validates_as_another(head: &str, name: &str) -> Answer {
    if head.to_ascii_lowercase().contains("if-none-match:") {
        return Answer::ok(b"")
            .status(304)
            .field("Cache-Control", "max-age=60")
            .field("ETag", "\"v2\"");
    }
    Answer::ok(format!("from {name}").as_bytes())
        .field("Cache-Control", "max-age=0")
        .field("ETag", "\"v1\"")
}

fn node_a(head: &str, _: usize) -> Answer {
    validates_as_another(head, "a")
}

fn node_b(head: &str, _: usize) -> Answer {
    validates_as_another(head, "b")
}

/// When the request a 304 could not serve goes again and another node answers it, the
/// access record names the node whose answer the client got, not the one that sent the 304.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refetch_answered_by_another_node_is_logged_with_that_node() {
    let (a, b) = (
        CountingNode::start(node_a, Duration::ZERO).await,
        CountingNode::start(node_b, Duration::ZERO).await,
    );
    let log = std::env::temp_dir().join(format!("weir-refetch-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let logging = format!(
        "[log]\naccess_log = true\naccess_log_format = \"json\"\naccess_log_file = \"{}\"\n",
        log.display()
    );
    let toml = config(&[a.addr, b.addr], "algorithm = \"round_robin\"\n", CACHE)
        .replace("[log]\naccess_log = false\n", &logging);
    let proxy = TestProxy::start(&toml).await;
    let first = request(&proxy, "GET", "/r", &[]).await;
    assert_eq!(first.status, 200);
    let second = request(&proxy, "GET", "/r", &[]).await;
    assert_eq!(second.status, 200);
    // Round robin: the revalidation went to the other node, the refetch back to the first.
    let (filled, validated) = if a.heads().len() == 2 {
        (&a, &b)
    } else {
        (&b, &a)
    };
    assert_eq!((filled.requests(), validated.requests()), (2, 1));
    assert!(
        validated.heads()[0]
            .to_ascii_lowercase()
            .contains("if-none-match"),
        "{:?}",
        validated.heads()
    );
    let name = if std::ptr::eq(filled, &a) { "a" } else { "b" };
    assert_eq!(second.text(), format!("from {name}"));
    let text = proxy.access_log(&log, 2).await;
    let records: Vec<&str> = text.lines().collect();
    assert_eq!(records.len(), 2, "{text}");
    let node = format!("\"node\":\"{}\"", filled.addr);
    assert!(records[1].contains(&node), "{} in {}", node, records[1]);
    proxy.stop().await;
    let _ = std::fs::remove_file(&log);
}

/// Compression without a cache: per request, streaming, never for ranges
/// or for a client that refuses every coding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compression_alone_negotiates_per_request() {
    let node = CountingNode::start(text, Duration::ZERO).await;
    let proxy = proxy_for(
        &node,
        "[virtual_servers.web.compression]\nalgorithms = [\"gzip\"]\n",
    )
    .await;
    let expected = text("", 0).body;
    let url = format!("http://{}/t", proxy.addr);
    let output = curl(&["--compressed", &url]).await;
    assert_eq!(output.body, expected);
    assert!(
        output.head.contains("content-encoding: gzip"),
        "{}",
        output.head
    );
    let refused = request(
        &proxy,
        "GET",
        "/t",
        &["Accept-Encoding: gzip;q=0, identity"],
    )
    .await;
    assert_eq!(refused.header("content-encoding"), None);
    assert_eq!(refused.header("vary"), Some("Accept-Encoding"));
    assert_eq!(refused.body, expected);
    assert_eq!(node.requests(), 2);
    proxy.stop().await;
}

/// `text`, or a 304 to a request whose `If-None-Match` names its tag (weakly, as a node
/// compares them for GET).
fn text_validated(head: &str, count: usize) -> Answer {
    let named = head.lines().any(|line| {
        line.to_ascii_lowercase().starts_with("if-none-match:") && line.contains("\"t\"")
    });
    match named {
        true => Answer::ok(b"")
            .status(304)
            .field("Cache-Control", "max-age=60")
            .field("ETag", "\"t\""),
        false => text(head, count),
    }
}

/// Compression without a cache answers HEAD and a relayed 304 with the head a GET's 200
/// gets: HEAD with the coding, `Vary` and the weakened tag (no identity length); a 304
/// with the weakened tag and `Vary` when the client would get the compressed copy, the
/// node's tag as it is when it would not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compression_alone_gives_head_and_304_the_head_of_the_compressed_200() {
    let node = CountingNode::start(text_validated, Duration::ZERO).await;
    let proxy = proxy_for(
        &node,
        "[virtual_servers.web.compression]\nalgorithms = [\"gzip\"]\n",
    )
    .await;
    let gzip = "Accept-Encoding: gzip";
    let get = request(&proxy, "GET", "/t", &[gzip]).await;
    assert_eq!(get.status, 200);
    assert_eq!(get.header("content-encoding"), Some("gzip"));
    assert_eq!(get.header("vary"), Some("Accept-Encoding"));
    assert_eq!(get.header("etag"), Some("W/\"t\""));

    let head = request(&proxy, "HEAD", "/t", &[gzip]).await;
    assert_eq!((head.status, head.body.len()), (200, 0));
    assert_eq!(head.header("content-encoding"), Some("gzip"));
    assert_eq!(head.header("vary"), Some("Accept-Encoding"));
    assert_eq!(head.header("etag"), Some("W/\"t\""));
    let identity_length = text("", 0).body.len().to_string();
    assert_ne!(
        head.header("content-length"),
        Some(identity_length.as_str()),
        "a HEAD names the length of the uncompressed body"
    );

    // The client revalidates the compressed copy it holds.
    let not_modified = request(&proxy, "GET", "/t", &[gzip, "If-None-Match: W/\"t\""]).await;
    assert_eq!(not_modified.status, 304);
    assert_eq!(not_modified.header("etag"), Some("W/\"t\""));
    assert_eq!(not_modified.header("vary"), Some("Accept-Encoding"));

    // A client that gets the identity copy keeps the node's tag.
    let identity = request(
        &proxy,
        "GET",
        "/t",
        &["Accept-Encoding: identity", "If-None-Match: \"t\""],
    )
    .await;
    assert_eq!(identity.status, 304);
    assert_eq!(identity.header("etag"), Some("\"t\""));
    assert_eq!(node.requests(), 4);
    proxy.stop().await;
}

struct CurlOutput {
    head: String,
    body: Vec<u8>,
}

/// Runs curl (lower-cased head on stderr via -D, body on stdout).
async fn curl(args: &[&str]) -> CurlOutput {
    let args: Vec<String> = args.iter().map(|arg| arg.to_string()).collect();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new("curl")
            .args(["-sS", "--max-time", "10", "-D", "/dev/stderr"])
            .args(&args)
            .output()
    })
    .await
    .unwrap()
    .expect("curl runs (scripts/test installs it)");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    CurlOutput {
        head: String::from_utf8_lossy(&output.stderr).to_ascii_lowercase(),
        body: output.stdout,
    }
}

/// Misses and hits follow one another on a kept-alive connection, pipelined too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_alive_connections_carry_misses_and_hits() {
    let node = CountingNode::start(fresh, Duration::ZERO).await;
    let proxy = proxy_for(&node, CACHE).await;
    let mut connection = Connection::open(proxy.addr).await.unwrap();
    let get = |path: &str| format!("GET {path} HTTP/1.1\r\nHost: cache.test\r\n\r\n");
    connection.send(get("/1").as_bytes()).await.unwrap();
    assert_eq!(connection.response().await.unwrap().text(), "body of /1");
    let pipelined = format!("{}{}{}", get("/1"), get("/2"), get("/1"));
    connection.send(pipelined.as_bytes()).await.unwrap();
    for (path, status) in [("/1", "HIT"), ("/2", "MISS"), ("/1", "HIT")] {
        let response = connection.response().await.unwrap();
        assert_eq!(response.text(), format!("body of {path}"));
        assert_eq!(response.header("x-cache"), Some(status));
    }
    assert_eq!(node.requests(), 2);
    proxy.stop().await;
}

/// A compressed answer whose node sends a line every 20 ms, never pausing the 50 ms after
/// which what the encoder holds is flushed, still reaches its client as it comes: the
/// flush is due 50 ms after the encoder began holding, not 50 ms after the last chunk
/// (the whole answer was held to its end). An HTTP/1.0 client gets the gzip stream with
/// no chunk framing, decoded here as it arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compressed_stream_without_pauses_reaches_its_client_as_it_comes() {
    use std::io::Write;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let node_addr = listener.local_addr().unwrap();
    let node = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut head = [0u8; 4096];
        let _ = stream.read(&mut head).await;
        let _ = stream
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n")
            .await;
        // 75 lines, one every 20 ms: 1.5 s.
        for n in 0..75 {
            let line = format!("line {n:03} of a stream that never pauses for long\n");
            let chunk = format!("{:x}\r\n{line}\r\n", line.len());
            if stream.write_all(chunk.as_bytes()).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = stream.write_all(b"0\r\n\r\n").await;
    });
    let proxy = TestProxy::start(&config(
        &[node_addr],
        "",
        "[virtual_servers.web.compression]\nalgorithms = [\"gzip\"]\n",
    ))
    .await;
    let started = std::time::Instant::now();
    let mut stream = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    stream
        .write_all(b"GET /stream HTTP/1.0\r\nHost: t\r\nAccept-Encoding: gzip\r\n\r\n")
        .await
        .unwrap();
    let mut received = Vec::new();
    let mut decoder = flate2::write::GzDecoder::new(Vec::new());
    let mut body_from = None;
    let first_line_at = loop {
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut chunk))
            .await
            .expect("bytes in time")
            .unwrap();
        assert!(n > 0, "closed before the first line: {received:?}");
        received.extend_from_slice(&chunk[..n]);
        if body_from.is_none() {
            body_from = received
                .windows(4)
                .position(|w| w == b"\r\n\r\n")
                .map(|at| at + 4);
            if let Some(at) = body_from {
                let head = String::from_utf8_lossy(&received[..at]).into_owned();
                assert!(head.contains("Content-Encoding: gzip"), "{head}");
                decoder.write_all(&received[at..]).unwrap();
            }
        } else {
            decoder.write_all(&chunk[..n]).unwrap();
        }
        decoder.flush().unwrap();
        if decoder.get_ref().starts_with(b"line 000") {
            break started.elapsed();
        }
    };
    assert!(
        first_line_at < Duration::from_millis(700),
        "the first line came after {first_line_at:?}, with the stream's end (1.5 s)"
    );
    node.abort();
    proxy.stop().await;
}

/// 96 KiB of text made of words in no pattern a compressor finds at once (a linear
/// congruential sequence picks them), cacheable.
fn words(_: &str, _: usize) -> Answer {
    const WORDS: [&str; 16] = [
        "proxy", "node", "pool", "stream", "cache", "header", "body", "client", "weir", "tls",
        "route", "rule", "queue", "health", "drain", "reload",
    ];
    let mut state: u32 = 12_345;
    let mut text = String::with_capacity(100_000);
    while text.len() < 96 * 1024 {
        state = state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        text.push_str(WORDS[(state >> 16) as usize % WORDS.len()]);
        text.push(if state.is_multiple_of(7) { '\n' } else { ' ' });
    }
    Answer::ok(text.as_bytes())
        .field("Cache-Control", "max-age=60")
        .field("Content-Type", "text/plain")
}

/// A slow compression level (brotli 11) runs off the workers' threads: while large
/// bodies are being compressed for several clients, small requests are answered at once,
/// not after the compressions' turns (with and without the cache storing what they make).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_compression_level_holds_up_no_other_request() {
    let node = CountingNode::start(words, Duration::ZERO).await;
    let compression =
        "[virtual_servers.web.compression]\nalgorithms = [\"br\"]\nbrotli_level = 11\n";
    for cached in [false, true] {
        let cache = if cached { CACHE } else { "" };
        let proxy = proxy_for(&node, &format!("{cache}{compression}")).await;
        let addr = proxy.addr;
        // A distinct object each, so that the cache does not coalesce them into one.
        let big: Vec<_> = (0..6)
            .map(|n| {
                let head = format!(
                    "GET /big-{cached}-{n} HTTP/1.1\r\nHost: cache.test\r\nAccept-Encoding: br\r\n\r\n"
                );
                tokio::spawn(async move {
                    let mut connection = Connection::open(addr).await.unwrap();
                    connection.send(head.as_bytes()).await.unwrap();
                    connection.response_to(false).await.unwrap()
                })
            })
            .collect();
        // By then the node has sent the bodies: the encoders are at their work.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut longest = Duration::ZERO;
        for _ in 0..5 {
            let started = std::time::Instant::now();
            let small = request(&proxy, "GET", "/small", &[]).await;
            assert_eq!(small.status, 200);
            longest = longest.max(started.elapsed());
        }
        for big in big {
            let big = big.await.expect("a response");
            assert_eq!(big.status, 200);
            assert_eq!(big.header("content-encoding"), Some("br"));
            assert!(!big.body.is_empty() && big.body.len() < 96 * 1024);
        }
        assert!(
            longest < Duration::from_secs(1),
            "a small request waited {longest:?} (cache {cached})"
        );
        proxy.stop().await;
    }
}

/// A fill whose object was purged after its client left stops reading the node at once,
/// though the node has paused: its connection closes and nothing more of the body is
/// held. (weir read a node's whole body, up to `max_object_size`, into an object no one
/// could read any more: an audit held 190 MiB past a 16 MiB cache so; and then, until the
/// node sent again, kept what it had.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fill_purged_after_its_client_left_stops_reading_the_node() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const CHUNK: usize = 64 << 10;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // The node answers with a length, sends four pieces of its body 50 ms apart, then
    // pauses for up to 5 s; it reports whether weir closed the connection meanwhile.
    let (closed, mut closed_in_pause) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let (mut tcp, _) = listener.accept().await.unwrap();
        let mut head = [0u8; 4096];
        let _ = tcp.read(&mut head).await;
        let answer = format!(
            "HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: {}\r\n\r\n",
            CHUNK * 60
        );
        tcp.write_all(answer.as_bytes()).await.unwrap();
        for _ in 0..4 {
            tcp.write_all(&[b'z'; CHUNK]).await.unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let ended = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut head)).await;
        let _ = closed.send(matches!(ended, Ok(Ok(0) | Err(_))));
    });
    let proxy = TestProxy::start(&config(
        &[addr],
        "",
        &format!("{CACHE}max_object_size = \"8MiB\"\n"),
    ))
    .await;
    // The client reads the head and leaves.
    let mut client = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    client
        .write_all(b"GET /dribble HTTP/1.1\r\nHost: cache.test\r\n\r\n")
        .await
        .unwrap();
    let mut some = [0u8; 1024];
    assert!(client.read(&mut some).await.unwrap() > 0);
    drop(client);
    // In the node's pause, the object is purged.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(request(&proxy, "PURGE", "/dribble", &[]).await.status, 200);
    let closed = tokio::time::timeout(Duration::from_secs(3), &mut closed_in_pause).await;
    assert!(
        matches!(closed, Ok(Ok(true))),
        "the node's connection stayed open through its pause"
    );
    let filling = proxy
        .metrics
        .encode()
        .lines()
        .find_map(|line| line.strip_prefix("weir_cache_bytes_filling{virtual_server=\"web\"} "))
        .map(str::to_owned);
    assert_eq!(filling.as_deref(), Some("0"));
    proxy.stop().await;
}

/// A compressed answer from a node that sends its body at once, which the encoder takes
/// slower than it comes (brotli 11), goes out at least once a second (the encoder is
/// flushed), so a client that left is noticed and the rest of the body is not compressed
/// for no one: brotli 11 put out nothing for megabytes, the head waited for its first
/// bytes, and weir compressed the whole body after the client had gone (an audit saw a
/// core busy 10 s after its clients went, and gigabytes held with zstd 19).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compressed_answer_stops_when_its_client_has_gone() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // Text that brotli 11 takes seconds over: words picked at random.
    let words = [
        "cache", "node", "pool", "weir", "stream", "answer", "client", "head",
    ];
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut body = Vec::with_capacity(2 << 20);
    while body.len() < 2 << 20 {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1);
        body.extend_from_slice(words[(state >> 61) as usize].as_bytes());
        body.push(b' ');
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // The node sends it all at once and reports whether weir took it all (through a
    // small send buffer: the kernel's would take much of it whatever weir does).
    let (taken, mut taken_whole) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let (mut tcp, _) = listener.accept().await.unwrap();
        socket2::SockRef::from(&tcp)
            .set_send_buffer_size(64 << 10)
            .unwrap();
        let mut head = [0u8; 4096];
        let _ = tcp.read(&mut head).await;
        let answer = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        let whole = async {
            tcp.write_all(answer.as_bytes()).await?;
            tcp.write_all(&body).await
        };
        let _ = taken.send(whole.await.is_ok());
    });
    let proxy = TestProxy::start(&config(
        &[addr],
        "",
        "[virtual_servers.web.compression]\nalgorithms = [\"br\"]\nbrotli_level = 11\n",
    ))
    .await;
    let mut client = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    client
        .write_all(b"GET /text HTTP/1.1\r\nHost: t\r\nAccept-Encoding: br\r\n\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(client);
    let whole = tokio::time::timeout(Duration::from_secs(30), &mut taken_whole)
        .await
        .expect("the node's body was neither taken nor refused")
        .unwrap();
    assert!(
        !whole,
        "weir read and compressed the whole body after its client had gone"
    );
    proxy.stop().await;
}

/// Text of `size` bytes that a slow encoder (brotli 11) takes its time over: words picked
/// at random, so it neither repeats nor is noise.
fn wordy_text(size: usize) -> Vec<u8> {
    let words = [
        "cache", "node", "pool", "weir", "stream", "answer", "client", "head",
    ];
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut text = Vec::with_capacity(size);
    while text.len() < size {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1);
        text.extend_from_slice(words[(state >> 61) as usize].as_bytes());
        text.push(b' ');
    }
    text.truncate(size);
    text
}

/// A cached answer compressed at a slow level (brotli 11, on a blocking thread) and purged
/// while its client reads it goes on to that client whole: the rest is kept for those
/// still reading it. The wait for the object to leave the store, raced against the
/// encoder's work, dropped that work and the fill with it, and the answer was cut short.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_compressed_fill_purged_while_read_goes_on_whole() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    fn text(_: &str, _: usize) -> Answer {
        Answer::ok(&wordy_text(512 << 10))
            .field("Cache-Control", "max-age=60")
            .field("Content-Type", "text/plain")
    }
    let node = CountingNode::start(text, Duration::ZERO).await;
    let proxy = proxy_for(
        &node,
        &format!(
            "{CACHE}[virtual_servers.web.compression]\nalgorithms = [\"br\"]\nbrotli_level = 11\n"
        ),
    )
    .await;
    let mut client = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    client
        .write_all(b"GET /text HTTP/1.1\r\nHost: cache.test\r\nAccept-Encoding: br\r\n\r\n")
        .await
        .unwrap();
    // Its first bytes come with the encoder's first flush, a second in; then the purge,
    // while the encoder works on.
    let mut answer = vec![0u8; 64 << 10];
    let first = client.read(&mut answer).await.unwrap();
    answer.truncate(first);
    assert_eq!(request(&proxy, "PURGE", "/text", &[]).await.status, 200);
    // To the last chunk, or to the end of a connection that was cut.
    let read = async {
        let mut buf = [0u8; 16 << 10];
        while !answer.ends_with(b"\r\n0\r\n\r\n") {
            match client.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(120), read)
        .await
        .expect("the answer ended");
    let text = String::from_utf8_lossy(&answer);
    assert!(
        text.contains("Transfer-Encoding: chunked"),
        "{}",
        &text[..200.min(text.len())]
    );
    assert!(
        answer.ends_with(b"\r\n0\r\n\r\n"),
        "the answer was cut short"
    );
    assert_eq!(node.requests(), 1);
    proxy.stop().await;
}
