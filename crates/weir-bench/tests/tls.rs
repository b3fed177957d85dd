//! End-to-end: weir bench against the built-in origin serving HTTPS on loopback. Handshake
//! counts (as the client saw them) agree with the connections opened and with the origin's own
//! counts; resumption off means every handshake is full.

mod common;

use common::{TestCertificate, TestOrigin, plan, settings};
use weir_bench::{ConnectionMode, Report, Stop, TlsVersions};

/// Waits until the origin has counted `requests` requests, then checks the report against it.
fn agree_with_origin(origin: &TestOrigin, report: &Report) {
    let requests = report.requests.completed;
    origin.eventually("the origin's request count", |stats| {
        stats.requests() == requests
    });
    let stats = origin.stats.snapshot();
    let tls = report.tls.as_ref().expect("a TLS section");
    assert_eq!(stats.tls_handshakes_full, tls.handshakes_full, "{stats:?}");
    assert_eq!(stats.tls_handshakes_resumed, tls.handshakes_resumed);
    assert_eq!(stats.connections_accepted, report.connections_opened);
}

#[test]
fn close_mode_with_resumption_resumes() {
    let (origin, _certificate) = TestOrigin::https(true);
    let mut run = settings(vec![origin.https_url("/bytes/100")], Stop::Count(200));
    run.mode = ConnectionMode::Close;
    let report = weir_bench::run(&plan(run)).expect("run");
    assert_eq!(report.requests.completed, 200, "{:?}", report.errors);
    assert_eq!(report.errors.total, 0);
    assert_eq!(report.connections_opened, 200);
    let tls = report.tls.clone().expect("a TLS section");
    assert!(tls.handshakes_full >= 1, "{tls:?}");
    assert!(tls.handshakes_resumed > 0, "{tls:?}");
    assert_eq!(tls.handshakes_total, 200);
    assert_eq!(tls.handshakes_full + tls.handshakes_resumed, 200);
    // rustls on both sides: TLS 1.3, no HelloRetryRequest (X25519 is offered first).
    assert_eq!(tls.tls1_3, 200);
    assert_eq!(tls.handshakes_full_with_hello_retry, 0);
    assert!(tls.handshake_latency.max_ms > 0.0);
    assert!(report.check_tls().is_ok());
    agree_with_origin(&origin, &report);
    origin.stop();
}

/// More connections than rustls' own store keeps tickets for (8 per server): after each
/// connection's first handshake, every handshake resumes, bursts of simultaneous new
/// connections included.
#[test]
fn many_connections_each_resume_after_their_first_handshake() {
    let (origin, _certificate) = TestOrigin::https(true);
    let connections = 32;
    let mut run = settings(vec![origin.https_url("/")], Stop::Count(960));
    run.mode = ConnectionMode::Close;
    run.connections = connections;
    run.tls.versions = TlsVersions::Tls13;
    let report = weir_bench::run(&plan(run)).expect("run");
    assert_eq!(report.requests.completed, 960, "{:?}", report.errors);
    let tls = report.tls.clone().expect("a TLS section");
    assert_eq!(tls.handshakes_total, 960);
    assert!(
        tls.handshakes_full <= connections as u64,
        "more full handshakes than connections: {tls:?}"
    );
    agree_with_origin(&origin, &report);
    origin.stop();
}

#[test]
fn resumption_off_makes_every_handshake_full() {
    // The origin would resume; the client offers nothing to resume.
    let (origin, _certificate) = TestOrigin::https(true);
    let mut run = settings(vec![origin.https_url("/")], Stop::Count(120));
    run.mode = ConnectionMode::Close;
    run.tls.resumption = false;
    let report = weir_bench::run(&plan(run)).expect("run");
    assert_eq!(report.requests.completed, 120, "{:?}", report.errors);
    let tls = report.tls.clone().expect("a TLS section");
    assert_eq!(tls.handshakes_resumed, 0, "{tls:?}");
    assert_eq!(tls.handshakes_full, report.connections_opened);
    assert_eq!(tls.handshakes_full, 120);
    assert!(report.check_tls().is_ok());
    let settings = report.settings.tls.as_ref().expect("TLS settings");
    assert!(!settings.resumption && !settings.verify);
    agree_with_origin(&origin, &report);
    origin.stop();
}

#[test]
fn keep_alive_handshakes_once_per_connection() {
    let (origin, _certificate) = TestOrigin::https(true);
    let report = weir_bench::run(&plan(settings(
        vec![origin.https_url("/bytes/3000?chunked=1")],
        Stop::Count(300),
    )))
    .expect("run");
    assert_eq!(report.requests.completed, 300);
    assert_eq!(report.connections_opened, 4);
    let tls = report.tls.clone().expect("a TLS section");
    assert_eq!(tls.handshakes_total, 4);
    assert!(report.bytes_received > 300 * 3000);
    agree_with_origin(&origin, &report);
    origin.stop();
}

#[test]
fn tls12_only_and_resumed_by_ticket_or_session_id() {
    let (origin, _certificate) = TestOrigin::https(true);
    let mut run = settings(vec![origin.https_url("/")], Stop::Count(60));
    run.mode = ConnectionMode::Close;
    run.tls.versions = TlsVersions::Tls12;
    let report = weir_bench::run(&plan(run)).expect("run");
    let tls = report.tls.clone().expect("a TLS section");
    assert_eq!((tls.tls1_2, tls.tls1_3), (60, 0));
    assert!(tls.handshakes_resumed > 0, "{tls:?}");
    agree_with_origin(&origin, &report);
    origin.stop();
}

#[test]
fn cacert_verifies_and_a_wrong_ca_fails_every_handshake() {
    let (origin, certificate) = TestOrigin::https(true);
    let mut verified = settings(vec![origin.https_url("/")], Stop::Count(20));
    verified.tls.cacert = Some(certificate.pem_path.clone());
    let report = weir_bench::run(&plan(verified)).expect("run");
    assert_eq!((report.requests.completed, report.errors.total), (20, 0));
    assert!(report.settings.tls.as_ref().is_some_and(|tls| tls.verify));

    // The name sent must be one the certificate holds.
    let mut wrong_name = settings(vec![origin.https_url("/")], Stop::Count(4));
    wrong_name.tls.cacert = Some(certificate.pem_path.clone());
    wrong_name.tls.sni = Some("elsewhere.test".into());
    let report = weir_bench::run(&plan(wrong_name)).expect("run");
    assert_eq!(report.requests.completed, 0);
    assert_eq!(report.errors.tls, 4);

    let other = TestCertificate::new();
    let mut wrong = settings(vec![origin.https_url("/")], Stop::Count(8));
    wrong.tls.cacert = Some(other.pem_path.clone());
    let report = weir_bench::run(&plan(wrong)).expect("run");
    assert_eq!(report.requests.completed, 0);
    assert_eq!(report.errors.tls, 8, "{:?}", report.errors);
    let tls = report.tls.clone().expect("a TLS section");
    assert_eq!(tls.handshakes_total, 0);
    origin.stop();
}

#[test]
fn https_json_validates_and_the_text_names_the_handshakes() {
    let schema: serde_json::Value =
        serde_json::from_str(include_str!("../schema/weir-bench-1.json")).expect("schema is JSON");
    let (origin, _certificate) = TestOrigin::https(true);
    let mut run = settings(vec![origin.https_url("/")], Stop::Count(40));
    run.mode = ConnectionMode::Close;
    let report = weir_bench::run(&plan(run)).expect("run");
    origin.stop();
    let document: serde_json::Value =
        serde_json::from_str(&report.to_json()).expect("output is JSON");
    let errors = common::schema::validate(&schema, &document);
    assert!(errors.is_empty(), "{errors:#?}");
    assert_eq!(document["tls"]["handshakes_total"], 40);
    assert_eq!(document["settings"]["tls"]["verify"], false);
    let text = weir_bench::render::text(&report);
    assert!(text.contains("verification off"), "{text}");
    assert!(text.contains("handshakes: 40"), "{text}");
    assert!(text.contains("resumed"), "{text}");
}
