//! End-to-end: `weir bench suite` against in-process origins (HTTP, HTTPS and echo) on loopback, with
//! tiny rows (200 ms) and few connections, so the load stays bounded.

mod common;

use std::time::Duration;

use common::TestOrigin;
use weir_bench::suite::{self, ROWS, RowKind, SuiteReport, SuiteSettings, SuiteTarget};
use weir_origin::{OriginMode, OriginOptions};

fn echo_origin() -> TestOrigin {
    TestOrigin::with_options(OriginOptions {
        mode: OriginMode::Echo,
        ..OriginOptions::default()
    })
}

fn target(http: &TestOrigin, echo: Option<&TestOrigin>) -> SuiteTarget {
    SuiteTarget {
        base: http.url(""),
        l4: echo.map(|echo| echo.address.to_string()),
        tls: None,
        http2: false,
        h2c: None,
        cache: None,
    }
}

fn settings(targets: Vec<SuiteTarget>, slices: u32) -> SuiteSettings {
    SuiteSettings {
        targets,
        row_duration: Duration::from_millis(200),
        slices,
        connections: 4,
        threads: Some(1),
        timeout: Duration::from_secs(5),
    }
}

/// Every measured row has a positive value, no errors, and bytes/s that agree with
/// req/s × the body size (heads add a little).
fn check_measured(report: &SuiteReport, columns: usize) {
    assert_eq!(report.rows.len(), ROWS.len());
    for (row, spec) in report.rows.iter().zip(ROWS) {
        assert_eq!(row.name, spec.name);
        if let RowKind::NotAvailable(note) = spec.kind {
            assert_eq!(row.status, "n/a");
            assert_eq!(row.note, Some(note));
            assert!(row.results.is_empty());
            continue;
        }
        if matches!(spec.kind, RowKind::Https { .. })
            && report.targets.iter().any(|target| target.tls.is_none())
        {
            assert_eq!(row.note, Some("n/a (no TLS target given)"));
            assert!(row.results.is_empty());
            continue;
        }
        if matches!(spec.kind, RowKind::Cache { .. })
            && report.targets.iter().any(|target| target.cache.is_none())
        {
            assert_eq!(row.note, Some("n/a (target does not cache)"));
            assert!(row.results.is_empty());
            continue;
        }
        if let RowKind::Http2 { tls, .. } = spec.kind {
            let no_tls = tls && report.targets.iter().any(|target| target.tls.is_none());
            if no_tls || report.targets.iter().any(|target| !target.http2) {
                let note = if no_tls {
                    "n/a (no TLS target given)"
                } else {
                    "n/a (target does not speak HTTP/2)"
                };
                assert_eq!(row.note, Some(note), "{}", row.name);
                assert!(row.results.is_empty());
                continue;
            }
        }
        assert_eq!(row.status, "measured", "{}", row.name);
        assert_eq!(row.results.len(), columns);
        for result in &row.results {
            assert!(result.value > 0.0, "{}: {result:?}", row.name);
            assert!(result.requests > 0, "{}", row.name);
            assert_eq!(result.errors, 0, "{}: {result:?}", row.name);
            assert!(result.p99_ms > 0.0, "{}", row.name);
            let sized = match spec.kind {
                RowKind::Http {
                    size, throughput, ..
                }
                | RowKind::Https {
                    size, throughput, ..
                }
                | RowKind::Cache {
                    size, throughput, ..
                } => Some((size, throughput)),
                _ => None,
            };
            if let Some((size, throughput)) = sized {
                let bodies = result.requests_per_s * size as f64;
                // At most a few hundred bytes of head per response.
                assert!(result.bytes_per_s >= bodies, "{}: {result:?}", row.name);
                assert!(
                    result.bytes_per_s <= bodies + result.requests_per_s * 400.0,
                    "{}: {result:?}",
                    row.name
                );
                if throughput {
                    let gbit = result.bytes_per_s * 8.0 / 1e9;
                    assert!((result.value - gbit).abs() <= 1e-9 * gbit.max(1.0));
                } else {
                    assert_eq!(result.value, result.requests_per_s);
                }
            }
        }
    }
}

#[test]
fn a_quick_suite_measures_every_row() {
    let http = TestOrigin::start();
    let echo = echo_origin();
    let (https, _certificate) = TestOrigin::https(true);
    let mut full = target(&http, Some(&echo));
    full.tls = Some(https.https_url(""));
    // The origin itself stands in for a cache: the rows only need the paths served.
    full.cache = Some(http.url(""));
    let report = suite::run(&settings(vec![full], 1)).expect("suite");
    http.stop();
    echo.stop();
    https.stop();
    check_measured(&report, 1);
    assert!(report.rows.iter().all(|row| row.ratio.is_none()));
    let text = suite::text(&report);
    assert!(text.contains("| p99 ms |"), "{text}");
    assert!(!text.contains("no TLS target"), "{text}");
    assert!(text.contains("TLS conn/s (full handshakes)"), "{text}");
    assert!(!text.contains("does not cache"), "{text}");
    assert!(text.contains("Gbit/s"), "{text}");
    let json: serde_json::Value = serde_json::from_str(&report.to_json()).expect("json");
    assert_eq!(json["schema"], "weir-bench-suite/2");
    let schema: serde_json::Value =
        serde_json::from_str(include_str!("../schema/weir-bench-suite-2.json"))
            .expect("the schema is JSON");
    let violations = common::schema::validate(&schema, &json);
    assert!(violations.is_empty(), "{violations:#?}");
    assert_eq!(json["rows"].as_array().map(Vec::len), Some(ROWS.len()));
}

#[test]
fn without_l4_the_l4_rows_are_na() {
    let http = TestOrigin::start();
    let mut run = settings(vec![target(&http, None)], 1);
    run.row_duration = Duration::from_millis(100);
    let report = suite::run(&run).expect("suite");
    http.stop();
    for row in &report.rows[..2] {
        assert_eq!(row.status, "n/a");
        assert_eq!(row.note, Some("n/a (no --l4)"));
    }
    for row in &report.rows[7..9] {
        assert_eq!(row.status, "n/a");
        assert_eq!(row.note, Some("n/a (no TLS target given)"));
    }
    assert!(suite::text(&report).contains("n/a (no TLS target given)"));
    for row in &report.rows[11..] {
        assert_eq!(
            row.note,
            Some("n/a (target does not cache)"),
            "{}",
            row.name
        );
    }
    assert_eq!(report.rows[2].status, "measured");
}

/// A bad address for a late row is refused before the first row runs, naming its option;
/// so is a zero time per row.
#[test]
fn every_row_is_checked_before_the_first_runs() {
    let http = TestOrigin::start();
    let mut run = settings(
        vec![SuiteTarget {
            cache: Some("bogus".to_owned()),
            ..target(&http, None)
        }],
        1,
    );
    run.row_duration = Duration::from_secs(30);
    let started = std::time::Instant::now();
    let error = suite::run(&run).expect_err("a bad --cache").to_string();
    assert!(started.elapsed() < Duration::from_secs(5), "{error}");
    assert!(error.contains("--cache"), "{error}");
    run.row_duration = Duration::ZERO;
    let error = suite::run(&run).expect_err("no time per row").to_string();
    assert_eq!(error, "--row-duration must be longer than zero");
    run.row_duration = Duration::from_secs(30);
    run.targets[0].cache = None;
    run.targets[0].tls = Some(http.url(""));
    let error = suite::run(&run).expect_err("--tls over http").to_string();
    assert_eq!(error, "--tls must be an https:// URL");
    http.stop();
}

#[test]
fn compare_runs_both_targets_and_prints_ratios() {
    let (http_a, echo_a) = (TestOrigin::start(), echo_origin());
    let (http_b, echo_b) = (TestOrigin::start(), echo_origin());
    let targets = vec![
        target(&http_a, Some(&echo_a)),
        target(&http_b, Some(&echo_b)),
    ];
    let report = suite::run(&settings(targets, 2)).expect("suite");
    let served = (http_a.stats.snapshot(), http_b.stats.snapshot());
    for origin in [http_a, echo_a, http_b, echo_b] {
        origin.stop();
    }
    check_measured(&report, 2);
    assert!(served.0.requests > 0 && served.1.requests > 0);
    for row in report.rows.iter().filter(|row| row.status == "measured") {
        let ratio = row.ratio.expect("a ratio per measured row");
        let expected = row.results[1].value / row.results[0].value;
        assert!((ratio - expected).abs() < 1e-9, "{}", row.name);
        // Two slices of 100 ms each, summed.
        assert!(row.results[0].elapsed_s >= 0.15, "{}", row.name);
    }
    let json: serde_json::Value = serde_json::from_str(&report.to_json()).expect("json");
    let schema: serde_json::Value =
        serde_json::from_str(include_str!("../schema/weir-bench-suite-2.json")).expect("schema");
    let violations = common::schema::validate(&schema, &json);
    assert!(violations.is_empty(), "{violations:#?}");
    let text = suite::text(&report);
    assert!(text.contains(" B/A |"), "{text}");
    let first = format!("{:.2}", report.rows[0].ratio.unwrap_or_default());
    assert!(text.contains(&first), "{text}");
    assert!(text.contains("target B:"), "{text}");
}

#[test]
fn tls_rows_measure_full_handshakes_and_resumed_throughput() {
    let http = TestOrigin::start();
    let (https, _certificate) = TestOrigin::https(true);
    let mut tls_target = target(&http, None);
    tls_target.tls = Some(https.https_url("/"));
    let report = suite::run(&settings(vec![tls_target], 1)).expect("suite");
    let served = https.stats.snapshot();
    http.stop();
    https.stop();
    let rows: Vec<_> = report
        .rows
        .iter()
        .filter(|row| row.name.starts_with("TLS"))
        .collect();
    assert_eq!(rows.len(), 2);
    for row in &rows {
        assert_eq!(row.status, "measured", "{}", row.name);
        assert!(row.results[0].value > 0.0, "{}", row.name);
        assert_eq!(row.results[0].errors, 0, "{}", row.name);
    }
    // Full handshakes only: one per request, none resumed, though the origin would resume.
    let full = rows[0].results[0].tls.expect("handshake counts");
    assert_eq!(full.handshakes_resumed, 0);
    assert_eq!(full.handshakes_full, rows[0].results[0].requests);
    assert_eq!(rows[0].unit, "conn/s");
    // Keep-alive: a handshake per connection only.
    let kept = rows[1].results[0].tls.expect("handshake counts");
    assert_eq!(kept.handshakes_full + kept.handshakes_resumed, 4);
    assert_eq!(rows[1].unit, "Gbit/s");
    assert!(served.tls_handshakes_full >= full.handshakes_full);
    let json: serde_json::Value = serde_json::from_str(&report.to_json()).expect("json");
    let schema: serde_json::Value =
        serde_json::from_str(include_str!("../schema/weir-bench-suite-2.json")).expect("schema");
    let violations = common::schema::validate(&schema, &json);
    assert!(violations.is_empty(), "{violations:#?}");
    assert!(json["rows"][7]["results"][0]["tls"].is_object());
    assert!(json["rows"][2]["results"][0]["tls"].is_null());
}

#[test]
fn http2_rows_run_h2c_and_h2_against_an_http2_target() {
    let certificate = common::TestCertificate::new();
    let (h2c, h2c_counts) = common::h2::start_server(None);
    let (h2, h2_counts) = common::h2::start_server(Some(&certificate));
    let target = SuiteTarget {
        base: format!("http://{h2c}"),
        l4: None,
        tls: Some(format!("https://127.0.0.1:{}", h2.port())),
        http2: true,
        h2c: None,
        cache: None,
    };
    let report = suite::run(&settings(vec![target], 1)).expect("suite");
    let rows: Vec<_> = report
        .rows
        .iter()
        .filter(|row| row.name.starts_with("h2"))
        .collect();
    assert_eq!(rows.len(), 2);
    for row in &rows {
        assert_eq!(row.status, "measured", "{}", row.name);
        assert_eq!(row.unit, "req/s");
        assert!(row.results[0].requests > 0, "{}", row.name);
        assert_eq!(row.results[0].errors, 0, "{}", row.name);
    }
    // 4 connections, 10 streams each, on each server.
    assert_eq!(
        h2c_counts
            .connections
            .load(std::sync::atomic::Ordering::SeqCst),
        4
    );
    assert_eq!(
        h2_counts
            .connections
            .load(std::sync::atomic::Ordering::SeqCst),
        4
    );
    assert_eq!(
        h2c_counts
            .most_in_flight
            .load(std::sync::atomic::Ordering::SeqCst),
        10
    );
}

/// A target that serves h2c on another port than HTTP/1.1 (as nginx must): the h2c row goes
/// to `h2c`, the HTTP/1.1 rows to `base`, and both are measured without errors.
#[test]
fn the_h2c_row_goes_to_a_separate_h2c_base() {
    let http = TestOrigin::start();
    let (h2c, h2c_counts) = common::h2::start_server(None);
    let target = SuiteTarget {
        h2c: Some(format!("http://{h2c}")),
        http2: true,
        ..target(&http, None)
    };
    let report = suite::run(&settings(vec![target], 1)).expect("suite");
    let row = |name: &str| {
        report
            .rows
            .iter()
            .find(|row| row.name.starts_with(name))
            .unwrap_or_else(|| panic!("no row {name}"))
    };
    let h2c_row = row("h2c req/s");
    assert_eq!(h2c_row.status, "measured");
    assert!(h2c_row.results[0].requests > 0);
    assert_eq!(h2c_row.results[0].errors, 0);
    let http_row = row("HTTP req/s");
    assert_eq!(http_row.status, "measured");
    assert!(http_row.results[0].requests > 0);
    assert_eq!(http_row.results[0].errors, 0);
    // No TLS target: the TLS h2 row is n/a, and only the h2c row reached the h2c server.
    assert_eq!(row("h2 req/s (TLS").status, "n/a");
    assert_eq!(
        h2c_counts
            .connections
            .load(std::sync::atomic::Ordering::SeqCst),
        4
    );
}

/// A target that answers 404 for every row's path: the rows count those answers as errors
/// instead of reporting a clean measurement of 404 pages.
#[test]
fn answers_with_an_error_status_are_errors_of_the_row() {
    let http = TestOrigin::start();
    let mut run = settings(vec![target(&http, None)], 1);
    run.targets[0].base = http.url("/no-such-prefix");
    run.row_duration = Duration::from_millis(100);
    let report = suite::run(&run).expect("suite");
    http.stop();
    let measured: Vec<_> = report
        .rows
        .iter()
        .filter(|row| !row.results.is_empty())
        .collect();
    assert!(!measured.is_empty());
    for row in measured {
        let result = &row.results[0];
        assert!(result.requests > 0, "{}", row.name);
        assert_eq!(
            result.errors, result.requests,
            "{}: every answer was a 404",
            row.name
        );
    }
}
