//! End-to-end: weir bench against the built-in origin on loopback, every run bounded in count
//! or time.

mod common;

use std::time::Duration;

use common::{TestOrigin, plan, settings};
use weir_bench::{ConnectionMode, Stop};

#[test]
fn request_counts_agree_with_the_origin() {
    let origin = TestOrigin::start();
    let report =
        weir_bench::run(&plan(settings(vec![origin.url("/")], Stop::Count(500)))).expect("run");
    let stats = origin.stats.snapshot();
    origin.stop();
    assert_eq!(report.requests.completed, 500);
    assert_eq!(report.errors.total, 0);
    assert_eq!(stats.requests, 500);
    // Keep-alive: one connection per slot, and the origin saw the same.
    assert_eq!(report.connections_opened, 4);
    assert_eq!(stats.connections_accepted, 4);
    assert_eq!(report.requests.successful, 500);
}

#[test]
fn close_mode_opens_one_connection_per_request() {
    let origin = TestOrigin::start();
    let mut run = settings(vec![origin.url("/")], Stop::Count(200));
    run.mode = ConnectionMode::Close;
    let report = weir_bench::run(&plan(run)).expect("run");
    let stats = origin.stats.snapshot();
    origin.stop();
    assert_eq!(report.requests.completed, 200);
    assert_eq!(report.connections_opened, 200);
    assert_eq!(stats.connections_accepted, 200);
    assert_eq!(stats.requests, 200);
}

#[test]
fn percentiles_match_a_fixed_delay() {
    let origin = TestOrigin::start();
    let report = weir_bench::run(&plan(settings(
        vec![origin.url("/delay/20")],
        Stop::Count(60),
    )))
    .expect("run");
    origin.stop();
    let latency = report.latency_corrected;
    assert_eq!(report.requests.completed, 60);
    // Never below the delay; above it only by scheduling noise (a generous bound, not a speed).
    assert!(latency.min_ms >= 20.0, "{latency:?}");
    assert!((20.0..30.0).contains(&latency.p50_ms), "{latency:?}");
    // Closed loop: intended = actual send, so corrected and service times are the same.
    assert_eq!(report.latency_corrected, report.latency_service);
}

#[test]
fn open_loop_sends_at_the_rate_and_counts_agree() {
    let origin = TestOrigin::start();
    let mut run = settings(
        vec![origin.url("/")],
        Stop::Duration(Duration::from_secs(1)),
    );
    run.rate = Some(200.0);
    let report = weir_bench::run(&plan(run)).expect("run");
    let stats = origin.stats.snapshot();
    origin.stop();
    // 200 req/s for 1 s on an even grid: exactly 200 intended before the end.
    assert_eq!(report.requests.completed + report.requests.unsent, 200);
    assert_eq!(stats.requests, report.requests.completed);
    assert_eq!(report.settings.pacing, "open");
}

#[test]
fn framings_head_chunked_and_errors_by_kind() {
    let origin = TestOrigin::start();
    let urls = vec![
        origin.url("/bytes/3000?chunked=1"),
        origin.url("/status/503"),
        origin.url("/bytes/10"),
    ];
    // One connection walks the URL list in order, so each URL gets exactly a third
    // (with several, how many requests each connection makes depends on scheduling).
    let mut sequence = settings(urls.clone(), Stop::Count(90));
    sequence.connections = 1;
    sequence.threads = Some(1);
    let report = weir_bench::run(&plan(sequence)).expect("run");
    assert_eq!(report.requests.completed, 90);
    assert_eq!(report.errors.total, 0);
    assert_eq!(report.requests.non_2xx, 30);
    assert!(report.bytes_received > 30 * 3000 + 30 * 10);

    let mut head = settings(vec![origin.url("/bytes/100000")], Stop::Count(50));
    head.method = "HEAD".to_owned();
    let report = weir_bench::run(&plan(head)).expect("run");
    assert_eq!((report.requests.completed, report.errors.total), (50, 0));
    // Heads only: far less than one body's worth per response.
    assert!(report.bytes_received < 50 * 1000);
    origin.stop();
}

/// A raw server on loopback: `serve` runs on a thread of its own for each connection.
fn raw_server(serve: impl Fn(std::net::TcpStream) + Send + Sync + 'static) -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let serve = std::sync::Arc::new(serve);
    std::thread::spawn(move || {
        for stream in listener.incoming().map_while(Result::ok) {
            let serve = std::sync::Arc::clone(&serve);
            std::thread::spawn(move || serve(stream));
        }
    });
    address
}

/// A server that sends more body than its Content-Length says (here 100 bytes after a
/// `Content-Length: 50`): a framing error, counted, not a success (wrk counts a read error).
#[test]
fn a_body_longer_than_its_content_length_is_an_error() {
    use std::io::{Read, Write};
    let address = raw_server(|mut stream| {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stream.read(&mut buf) {
            if n == 0 {
                break;
            }
            let mut answer = b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n".to_vec();
            answer.extend_from_slice(&[b'x'; 100]);
            if stream.write_all(&answer).is_err() {
                break;
            }
        }
    });
    let mut run = settings(vec![format!("http://{address}/")], Stop::Count(10));
    run.connections = 1;
    run.threads = Some(1);
    let report = weir_bench::run(&plan(run)).expect("run");
    assert_eq!(report.errors.parse, 10, "{:?}", report.errors);
    assert_eq!(report.requests.successful, 0);
}

/// A server that closes a kept-alive connection after 100 ms idle (a keep-alive timeout),
/// paced requests 250 ms apart on one connection: each finds its connection closed by the
/// server and goes again on a new one, so every request is answered and none counted as
/// an error (the server saw each once).
#[test]
fn a_connection_the_server_closed_while_idle_is_replaced_not_counted_as_an_error() {
    use std::io::{Read, Write};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let served = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = std::sync::Arc::clone(&served);
    let address = raw_server(move |mut stream| {
        let _ = stream.set_read_timeout(Some(Duration::from_millis(100)));
        let mut buf = [0u8; 4096];
        // A timeout (idle past 100 ms) or the client's close ends the connection.
        while let Ok(n) = stream.read(&mut buf) {
            if n == 0 {
                break;
            }
            counter.fetch_add(1, Ordering::SeqCst);
            let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
            if stream.write_all(answer).is_err() {
                break;
            }
        }
    });
    let mut run = settings(
        vec![format!("http://{address}/")],
        Stop::Duration(Duration::from_secs(2)),
    );
    run.connections = 1;
    run.threads = Some(1);
    run.rate = Some(4.0);
    let report = weir_bench::run(&plan(run)).expect("run");
    assert_eq!(report.errors.total, 0, "{:?}", report.errors);
    assert!(report.requests.successful >= 6, "{:?}", report.requests);
    assert_eq!(
        served.load(Ordering::SeqCst) as u64,
        report.requests.successful
    );
    assert!(
        report.connections_opened >= 6,
        "{}",
        report.connections_opened
    );
}

/// A server that reads each request and resets the connection at the second one: the
/// reset requests are read errors, as wrk and ab count them, never sent again unseen (the
/// server did their work). Only a connection found closed before a request is sent on it
/// is replaced without an error (the test above).
#[test]
fn a_request_the_server_read_and_reset_is_an_error_not_sent_again() {
    use std::io::{Read, Write};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let read = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = std::sync::Arc::clone(&read);
    let address = raw_server(move |mut stream| {
        let mut buf = [0u8; 4096];
        let mut requests = 0;
        while let Ok(n) = stream.read(&mut buf) {
            if n == 0 {
                break;
            }
            counter.fetch_add(1, Ordering::SeqCst);
            requests += 1;
            if requests == 2 {
                // A reset, not a FIN: SO_LINGER 0, then close.
                let _ = socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
                break;
            }
            let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
            if stream.write_all(answer).is_err() {
                break;
            }
        }
    });
    let mut run = settings(vec![format!("http://{address}/")], Stop::Count(100));
    run.connections = 2;
    run.threads = Some(1);
    let report = weir_bench::run(&plan(run)).expect("run");
    // Every request the server read is counted once: answered or failed.
    assert_eq!(
        report.requests.successful + report.errors.total,
        read.load(Ordering::SeqCst) as u64,
        "{:?} {:?}",
        report.requests,
        report.errors
    );
    // Each connection answers one, then resets on the next: about half and half (the
    // run may end either side of a pair on each connection).
    assert_eq!(report.requests.completed + report.errors.total, 100);
    assert_eq!(
        report.errors.read, report.errors.total,
        "{:?}",
        report.errors
    );
    assert!(
        (48..=52).contains(&report.errors.read),
        "{:?}",
        report.errors
    );
}

#[test]
fn siege_block_is_consistent() {
    let origin = TestOrigin::start();
    // A closed port on loopback gives connect errors (socket failures) beside real responses.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let closed_url = format!("http://{}/", closed.local_addr().expect("address"));
    drop(closed);
    let urls = vec![origin.url("/"), origin.url("/status/404"), closed_url];
    let mut run = settings(urls, Stop::Count(300));
    run.connections = 3;
    run.threads = Some(1);
    let report = weir_bench::run(&plan(run)).expect("run");
    origin.stop();
    let siege = report.siege;
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0);
    assert_eq!(siege.transactions, report.requests.completed);
    assert!(report.errors.connect > 0, "{:?}", report.errors);
    assert_eq!(siege.transactions + report.errors.total, 300);
    assert!(close(
        siege.availability_percent,
        100.0 * siege.transactions as f64 / (siege.transactions + report.errors.total) as f64
    ));
    assert_eq!(
        siege.successful_transactions + report.requests.non_2xx,
        siege.transactions
    );
    assert_eq!(
        siege.failed_transactions,
        report.requests.non_2xx + report.errors.total
    );
    assert!(close(siege.elapsed_time_s, report.elapsed_s));
    assert!(close(
        siege.transaction_rate,
        siege.transactions as f64 / siege.elapsed_time_s
    ));
    assert!(close(
        siege.throughput_mb_s,
        siege.data_transferred_mb / siege.elapsed_time_s
    ));
    assert!(close(
        siege.data_transferred_mb,
        report.bytes_received as f64 / (1024.0 * 1024.0)
    ));
    // Concurrency × elapsed = sum of response times = response time × transactions.
    assert!(close(
        siege.concurrency * siege.elapsed_time_s,
        siege.response_time_s * siege.transactions as f64
    ));
    assert!(siege.shortest_transaction_s <= siege.response_time_s);
    assert!(siege.response_time_s <= siege.longest_transaction_s);
}

#[test]
fn json_output_validates_against_the_schema() {
    let schema: serde_json::Value =
        serde_json::from_str(include_str!("../schema/weir-bench-1.json")).expect("schema is JSON");
    let origin = TestOrigin::start();
    let mut open = settings(
        vec![origin.url("/"), origin.url("/status/500")],
        Stop::Duration(Duration::from_millis(1500)),
    );
    open.rate = Some(100.0);
    let runs = [settings(vec![origin.url("/")], Stop::Count(50)), open];
    for run in runs {
        let report = weir_bench::run(&plan(run)).expect("run");
        let document: serde_json::Value =
            serde_json::from_str(&report.to_json()).expect("output is JSON");
        assert_eq!(document["schema"], "weir-bench/1");
        let errors = common::schema::validate(&schema, &document);
        assert!(errors.is_empty(), "{errors:#?}");
        // The validator does catch a broken document.
        let mut broken = document.clone();
        broken["requests"]["completed"] = serde_json::json!(-1);
        broken["surprise"] = serde_json::json!(true);
        assert_eq!(common::schema::validate(&schema, &broken).len(), 2);
    }
    origin.stop();
}
