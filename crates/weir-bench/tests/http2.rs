//! End-to-end: `weir bench --h2` against an in-process HTTP/2 server (the `h2` crate), as h2c
//! with prior knowledge and over TLS with ALPN `h2`. The server counts connections, streams
//! and the most streams it saw in flight at once on one connection: the report's counts agree
//! with them, and `--streams` really puts that many requests on a connection at once.

mod common;

use std::sync::atomic::Ordering;

use common::h2::{start_server, start_server_going_away, start_server_with};
use common::{TestCertificate, plan, settings};
use weir_bench::{ConnectionMode, Plan, PlanError, Stop};

#[test]
fn h2c_streams_share_each_connection() {
    let (address, counts) = start_server(None);
    let mut run = settings(vec![format!("http://{address}/")], Stop::Count(800));
    run.connections = 2;
    run.http2_streams = Some(8);
    let report = weir_bench::run(&plan(run)).expect("run");
    assert_eq!(report.requests.completed, 800, "{:?}", report.errors);
    assert_eq!(report.errors.total, 0);
    assert_eq!(report.requests.successful, 800);
    assert_eq!(report.connections_opened, 2);
    // What the connections received: every response's HEADERS and DATA frames (a
    // 9-byte frame header each, a 100-byte body), and the control frames.
    assert!(
        report.bytes_received >= 800 * (100 + 9 + 9 + 1),
        "{}",
        report.bytes_received
    );
    assert_eq!(report.settings.protocol, "http2");
    assert_eq!(report.settings.streams, Some(8));
    assert_eq!(counts.connections.load(Ordering::SeqCst), 2);
    assert_eq!(counts.streams.load(Ordering::SeqCst), 800);
    assert_eq!(
        counts.most_in_flight.load(Ordering::SeqCst),
        8,
        "8 streams at once"
    );
}

#[test]
fn h2_over_tls_negotiates_alpn() {
    let certificate = TestCertificate::new();
    let (address, counts) = start_server(Some(&certificate));
    let mut run = settings(
        vec![format!("https://127.0.0.1:{}/", address.port())],
        Stop::Count(300),
    );
    run.connections = 3;
    run.http2_streams = Some(4);
    let report = weir_bench::run(&plan(run)).expect("run");
    assert_eq!(report.requests.completed, 300, "{:?}", report.errors);
    assert_eq!(report.errors.total, 0);
    assert_eq!(report.connections_opened, 3);
    let tls = report.tls.as_ref().expect("a TLS section");
    assert_eq!(tls.handshakes_total, 3);
    assert_eq!(
        report.settings.tls.as_ref().expect("tls settings").alpn,
        ["h2"]
    );
    assert_eq!(counts.connections.load(Ordering::SeqCst), 3);
    assert_eq!(counts.streams.load(Ordering::SeqCst), 300);
}

#[test]
fn a_server_without_h2_is_a_tls_error_not_a_hang() {
    // An HTTP/1.1-only HTTPS server: ALPN does not choose h2.
    let (origin, _certificate) = common::TestOrigin::https(true);
    let mut run = settings(vec![origin.https_url("/")], Stop::Count(5));
    run.connections = 1;
    run.http2_streams = Some(2);
    let report = weir_bench::run(&plan(run)).expect("run");
    assert_eq!(report.requests.completed, 0);
    assert!(report.errors.tls > 0, "{:?}", report.errors);
    origin.stop();
}

#[test]
fn h2_plans_refuse_what_does_not_apply() {
    let mut run = settings(vec!["http://127.0.0.1:1/".into()], Stop::Count(1));
    run.http2_streams = Some(0);
    assert!(matches!(
        Plan::new(run.clone()),
        Err(PlanError::Zero("--streams"))
    ));
    run.http2_streams = Some(10_001);
    assert!(matches!(
        Plan::new(run.clone()),
        Err(PlanError::TooLarge("--streams", _))
    ));
    run.http2_streams = Some(4);
    run.mode = ConnectionMode::Close;
    assert!(matches!(
        Plan::new(run.clone()),
        Err(PlanError::CloseWithH2)
    ));
    run.mode = ConnectionMode::KeepAlive;
    run.headers = vec!["Connection: close".into()];
    assert!(matches!(Plan::new(run), Err(PlanError::H2Header(_))));
    let mut run = settings(vec!["tcp://127.0.0.1:1".into()], Stop::Count(1));
    run.http2_streams = Some(4);
    assert!(matches!(Plan::new(run), Err(PlanError::HttpOnly("--h2"))));
}

/// A server that accepts and never speaks: each request times out, and the connections
/// opened for them are still counted (they were lost with the timed-out request).
#[test]
fn requests_that_time_out_still_count_their_connections() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = listener.local_addr().expect("address");
    listener.set_nonblocking(true).expect("nonblocking");
    let server = std::thread::spawn(move || {
        let mut held = Vec::new();
        let until = std::time::Instant::now() + std::time::Duration::from_millis(1500);
        while std::time::Instant::now() < until {
            match listener.accept() {
                Ok((stream, _)) => held.push(stream),
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
            }
        }
    });
    let mut run = settings(vec![format!("http://{address}/")], Stop::Count(2));
    run.connections = 1;
    run.threads = Some(1);
    run.http2_streams = Some(1);
    run.timeout = std::time::Duration::from_millis(300);
    let report = weir_bench::run(&plan(run)).expect("run");
    assert_eq!(report.errors.timeout, 2, "{:?}", report.errors);
    assert!(
        report.connections_opened >= 1,
        "{}",
        report.connections_opened
    );
    server.join().expect("server");
}

/// A server that allows fewer concurrent streams than `--streams`: the report says so, no
/// more streams than it allows are open at once, and the service time is the server's
/// (as h2load measures it), the wait for a stream counted only from the intended send time.
#[test]
fn a_server_allowing_fewer_streams_is_reported_and_its_time_measured() {
    let pause = std::time::Duration::from_millis(40);
    let (address, counts) = start_server_with(None, Some(4), pause);
    let mut run = settings(vec![format!("http://{address}/")], Stop::Count(64));
    run.connections = 1;
    run.threads = Some(1);
    run.http2_streams = Some(16);
    let report = weir_bench::run(&plan(run)).expect("run");
    assert_eq!(report.requests.completed, 64, "{:?}", report.errors);
    assert_eq!(report.http2_streams_allowed, Some(4));
    assert!(counts.most_in_flight.load(Ordering::SeqCst) <= 4);
    // Four at a time, 40 ms each: the service time is about one pause, the time from the
    // intended send about four.
    let (service, corrected) = (
        report.latency_service.p50_ms,
        report.latency_corrected.p50_ms,
    );
    assert!(service < 80.0, "service p50 {service} ms");
    assert!(corrected > 120.0, "corrected p50 {corrected} ms");
    assert!(weir_bench::render::text(&report).contains("the server allowed 4"));
}

/// A server whose connections go away after 10 streams (a limit on requests per
/// connection): the streams it did not process go again on a new connection, so every
/// request is answered once and none is counted as an error.
#[test]
fn streams_the_server_did_not_process_go_again() {
    let (address, counts) = start_server_going_away(10);
    let mut run = settings(vec![format!("http://{address}/")], Stop::Count(200));
    run.connections = 2;
    run.http2_streams = Some(4);
    let report = weir_bench::run(&plan(run)).expect("run");
    assert_eq!(report.errors.total, 0, "{:?}", report.errors);
    assert_eq!(report.requests.successful, 200);
    // Connections went away and were replaced (each served its 10 streams and those
    // opened before its final GOAWAY, whose last stream id the server sets after a PING).
    assert!(
        report.connections_opened > 2,
        "{}",
        report.connections_opened
    );
    // Each stream the server accepted was answered: it processed 200 and no more.
    assert_eq!(counts.streams.load(Ordering::SeqCst), 200);
}
