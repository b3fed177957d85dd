//! End-to-end L4: weir bench against `weir origin` in echo mode on loopback (the Zeus L4
//! tests), every run bounded in count or time.

mod common;

use std::time::Duration;

use common::{TestOrigin, plan, settings};
use weir_bench::{L4Mode, Stop};
use weir_origin::{OriginMode, OriginOptions};

fn echo_origin(max_connections: Option<u32>) -> TestOrigin {
    TestOrigin::with_options(OriginOptions {
        mode: OriginMode::Echo,
        max_connections,
        ..OriginOptions::default()
    })
}

#[test]
fn rr_transactions_agree_with_the_bytes_echoed() {
    let origin = echo_origin(None);
    let report =
        weir_bench::run(&plan(settings(vec![origin.tcp_url()], Stop::Count(1000)))).expect("run");
    assert_eq!(report.requests.completed, 1000);
    assert_eq!(report.errors.total, 0);
    assert_eq!(report.bytes_received, 1000 * 64);
    origin.eventually("every byte to be counted", |stats| {
        stats.bytes_echoed() == 1000 * 64
    });
    let stats = origin.stats.snapshot();
    origin.stop();
    // Persistent connections: one per slot.
    assert_eq!(report.connections_opened, 4);
    assert_eq!(stats.connections_accepted, 4);
    assert_eq!(stats.requests, 0);
    assert_eq!(report.settings.protocol, "tcp");
    assert_eq!(report.settings.l4_mode, Some("rr"));
    assert_eq!(report.settings.l4_size, Some(64));
    assert_eq!(report.settings.connection_mode, "keep-alive");
    assert_eq!(report.siege.transactions, 1000);
}

#[test]
fn rr_payloads_larger_than_socket_buffers() {
    let origin = echo_origin(None);
    let mut run = settings(vec![origin.tcp_url()], Stop::Count(6));
    run.l4_size = Some(4 * 1024 * 1024);
    run.connections = 2;
    let report = weir_bench::run(&plan(run)).expect("run");
    assert_eq!((report.requests.completed, report.errors.total), (6, 0));
    let expected = 6 * 4 * 1024 * 1024;
    assert_eq!(report.bytes_received, expected);
    origin.eventually("every byte to be counted", |stats| {
        stats.bytes_echoed() == expected
    });
    origin.stop();
}

#[test]
fn connect_transactions_agree_with_connections_accepted() {
    let origin = echo_origin(None);
    for size in [None, Some(100)] {
        let before = origin.stats.connections_accepted();
        let echoed_before = origin.stats.bytes_echoed();
        let mut run = settings(vec![origin.tcp_url()], Stop::Count(300));
        run.l4_mode = L4Mode::Connect;
        run.l4_size = size;
        let report = weir_bench::run(&plan(run)).expect("run");
        assert_eq!((report.requests.completed, report.errors.total), (300, 0));
        assert_eq!(report.connections_opened, 300);
        assert_eq!(report.settings.connection_mode, "close");
        assert_eq!(report.settings.l4_mode, Some("connect"));
        let size = size.unwrap_or(0) as u64;
        assert_eq!(report.settings.l4_size, Some(size as usize));
        assert_eq!(report.bytes_received, 300 * size);
        // The client waits for the server's close, so every connection was accepted.
        assert_eq!(origin.stats.connections_accepted() - before, 300);
        origin.eventually("the echoed bytes to be counted", |stats| {
            stats.bytes_echoed() - echoed_before == 300 * size
        });
    }
    origin.eventually("connections to close", |stats| {
        stats.connections_open() == 0
    });
    origin.stop();
}

#[test]
fn open_loop_and_duration_work_for_l4() {
    let origin = echo_origin(None);
    for mode in [L4Mode::RequestResponse, L4Mode::Connect] {
        let mut run = settings(
            vec![origin.tcp_url()],
            Stop::Duration(Duration::from_secs(1)),
        );
        run.l4_mode = mode;
        run.rate = Some(200.0);
        let report = weir_bench::run(&plan(run)).expect("run");
        // 200/s for 1 s on an even grid: exactly 200 intended before the end.
        assert_eq!(
            report.requests.completed + report.requests.unsent,
            200,
            "{mode:?}"
        );
        assert_eq!(report.errors.total, 0, "{mode:?}");
        assert_eq!(report.settings.pacing, "open");
        assert!(!report.timeline.is_empty());
    }
    origin.stop();
}

#[test]
fn refusals_are_counted_as_errors() {
    // A closed port: every connect fails.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let closed_url = format!("tcp://{}", closed.local_addr().expect("address"));
    drop(closed);
    for mode in [L4Mode::RequestResponse, L4Mode::Connect] {
        let mut run = settings(vec![closed_url.clone()], Stop::Count(40));
        run.l4_mode = mode;
        let report = weir_bench::run(&plan(run)).expect("run");
        assert_eq!(report.requests.completed, 0);
        assert_eq!(report.errors.connect, 40, "{mode:?}");
        assert_eq!(report.siege.availability_percent, 0.0);
    }

    // An origin at its cap resets the connections past it (after the handshake): connect
    // mode sees the reset when it waits for the close, rr mode when it reads the echo.
    let origin = echo_origin(Some(1));
    let hold = std::net::TcpStream::connect(origin.address).expect("hold the only slot");
    origin.eventually("the held connection", |stats| stats.connections_open() == 1);
    for mode in [L4Mode::RequestResponse, L4Mode::Connect] {
        let mut run = settings(vec![origin.tcp_url()], Stop::Count(20));
        run.l4_mode = mode;
        run.connections = 2;
        let report = weir_bench::run(&plan(run)).expect("run");
        assert_eq!(report.requests.completed, 0, "{mode:?}");
        assert_eq!(report.errors.total, 20, "{mode:?} {:?}", report.errors);
    }
    origin.eventually("the refusals to be counted", |stats| {
        stats.connections_refused() == 40
    });
    drop(hold);
    origin.stop();
}

#[test]
fn l4_json_validates_against_the_schema() {
    let schema: serde_json::Value =
        serde_json::from_str(include_str!("../schema/weir-bench-1.json")).expect("schema is JSON");
    let origin = echo_origin(None);
    let mut connect = settings(vec![origin.tcp_url()], Stop::Count(20));
    connect.l4_mode = L4Mode::Connect;
    for run in [settings(vec![origin.tcp_url()], Stop::Count(20)), connect] {
        let report = weir_bench::run(&plan(run)).expect("run");
        let document: serde_json::Value =
            serde_json::from_str(&report.to_json()).expect("output is JSON");
        let errors = common::schema::validate(&schema, &document);
        assert!(errors.is_empty(), "{errors:#?}");
        assert_eq!(document["settings"]["protocol"], "tcp");
        let text = weir_bench::render::text(&report);
        assert!(text.contains("(L4 "), "{text}");
        assert!(text.contains("trans/s"), "{text}");
    }
    origin.stop();
}
