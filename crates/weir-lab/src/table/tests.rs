use super::*;
use crate::model::{Machine, OffloadRatios, SuiteColumn, SuiteLabRow, TlsSettingsReport};
use crate::summary::tests::{direct, peer, settings, weir};
use crate::summary::{offload_checks, offload_ratios};

pub(crate) fn offload_report() -> OffloadReport {
    let settings = settings(16_000, 500);
    let (direct, weir) = (direct(), weir());
    let ratios = offload_ratios(&settings, Some(&direct), &weir);
    let checks = offload_checks(&settings, Some(&direct), &weir, &ratios);
    OffloadReport {
        settings,
        direct: Some(direct),
        weir,
        peers: Vec::new(),
        ratios,
        checks,
    }
}

pub(crate) fn tls_phase(cpu: f64, memory_kib: u64, proxy: bool) -> TlsPhase {
    TlsPhase {
        requests_ok: 30_000,
        errors: 0,
        requests_per_s: 1_000.0,
        latency_ms: Latency {
            count: 30_000,
            p50: 1.5,
            p99: 12.25,
            max: 20.0,
        },
        handshakes_full: 30_000,
        handshakes_resumed: 0,
        origin_cpu_s: cpu,
        origin_memory_peak_kib: memory_kib,
        origin_connections_accepted: if proxy { 4 } else { 30_000 },
        proxy_cpu_s: proxy.then_some(9.5),
        proxy_memory_peak_kib: proxy.then_some(40_960),
    }
}

pub(crate) fn tls_report() -> TlsReport {
    let direct = tls_phase(10.0, 40_960, false);
    let offloaded = tls_phase(3.0, 20_480, true);
    TlsReport {
        settings: TlsSettingsReport {
            clients: 1_000,
            duration_s: 30.0,
            path: "/bytes/1024".into(),
            resumption: false,
            certificate: "ECDSA P-256".into(),
            proxy_threads: 1,
        },
        origin_cpu_reduction: crate::summary::reduction(10.0, 3.0),
        origin_memory_reduction: crate::summary::reduction(40_960.0, 20_480.0),
        checks: crate::summary::tls_checks(&direct, &offloaded),
        direct,
        offloaded,
    }
}

pub(crate) fn suite_report() -> SuiteLabReport {
    let column = |name: &str, cpu: Option<f64>| SuiteColumn {
        name: name.into(),
        version: "v".into(),
        proxy_cpu_s: cpu,
    };
    SuiteLabReport {
        row_duration_s: 1.0,
        connections: 50,
        targets: vec![
            column("direct", None),
            column("weir", Some(3.0)),
            column("haproxy", Some(4.0)),
        ],
        rows: vec![
            SuiteLabRow {
                name: "L4 conn/s".into(),
                unit: "conn/s".into(),
                values: vec![None, None, None],
                p99_ms: vec![None, None, None],
                errors: vec![0, 0, 0],
                client_bound: vec![false, false, false],
                note: Some("n/a (no L4 here)".into()),
            },
            SuiteLabRow {
                name: "HTTP req/s (0 B)".into(),
                unit: "req/s".into(),
                values: vec![Some(80_000.0), Some(50_000.0), Some(40_000.0)],
                p99_ms: vec![Some(1.0), Some(2.0), Some(3.0)],
                errors: vec![0, 2, 0],
                client_bound: vec![true, false, false],
                note: None,
            },
            SuiteLabRow {
                name: "1 MB throughput".into(),
                unit: "Gbit/s".into(),
                values: vec![Some(20.0), Some(10.0), None],
                p99_ms: vec![Some(1.0), Some(2.0), None],
                errors: vec![0, 0, 0],
                client_bound: vec![false, false, false],
                note: Some("n/a for haproxy: not measured here".into()),
            },
        ],
    }
}

pub(crate) fn lab_report() -> LabReport {
    LabReport {
        schema: crate::model::SCHEMA.into(),
        weir_version: "0.1.0".into(),
        date: "2026-11-23T10:00:00Z".into(),
        command: "weir lab".into(),
        machine: Machine {
            cores: 2,
            cpu: "Test CPU".into(),
            memory_gib: 24.0,
            kernel: "6.1".into(),
            open_files: 20_000,
            load_average: 0.5,
        },
        offload: Some(offload_report()),
        tls: Some(tls_report()),
        suite: Some(suite_report()),
        notes: vec!["haproxy is not installed".into()],
    }
}

#[test]
fn numbers_read_like_a_person_writes_them() {
    assert_eq!(thousands(0), "0");
    assert_eq!(thousands(999), "999");
    assert_eq!(thousands(16_000), "16,000");
    assert_eq!(thousands(1_234_567), "1,234,567");
    assert_eq!(number(3_200.0, 1), "3,200.0");
    assert_eq!(number(-1_500.25, 2), "-1,500.25");
    assert_eq!(number(f64::NAN, 1), "-");
    assert_eq!(times(Some(32.04)), "32.0×");
    assert_eq!(times(None), "-");
    assert_eq!(offload(Some(432.4)), "432:1");
    assert_eq!(offload(Some(32.04)), "32.0:1");
    assert_eq!(change(Some(0.7)), "−70 %");
    assert_eq!(change(Some(-0.25)), "+25 %");
    assert_eq!(mib(20_480), "20.0 MiB");
    assert_eq!(millis(0.1234), "0.123");
    assert_eq!(millis(12.34), "12.3");
    assert_eq!(millis(1234.0), "1,234");
    assert_eq!(speed(Some(2.0)), "2.0× faster");
    assert_eq!(speed(Some(0.5)), "2.0× slower");
    assert_eq!(speed(None), "-");
}

#[test]
fn tables_align_text_left_and_figures_right() {
    let mut table = Table::new(&["", "a", "bb"]);
    table.row(vec!["long name".into(), "1".into(), "22".into()]);
    table.row(vec!["x".into(), "333".into(), "−5 %".into()]);
    assert_eq!(
        table.render("  "),
        "               a    bb\n  long name    1    22\n  x          333  −5 %\n"
    );
}

fn line<'a>(text: &'a str, start: &str) -> &'a str {
    text.lines()
        .find(|line| line.starts_with(start))
        .unwrap_or_else(|| panic!("no line starting {start:?} in\n{text}"))
}

#[test]
fn offload_table_shows_both_phases_and_the_gains() {
    let text = offload_text(&offload_report());
    let cells = |start: &str| -> Vec<String> {
        line(&text, start)[start.len()..]
            .split("  ")
            .map(str::trim)
            .filter(|cell| !cell.is_empty())
            .map(str::to_owned)
            .collect()
    };
    assert!(text.starts_with("weir lab offload: 16,000 slow keep-alive clients, GET / every 5 s each, ramp 30 s, 60 s per phase\n"));
    assert_eq!(
        cells("client connections held without errors, peak"),
        ["500", "16,000", "32.0×"]
    );
    assert_eq!(cells("connections open on the origin, peak"), ["500", "40"]);
    assert_eq!(
        cells("offload ratio (clients : origin), peak / steady"),
        ["1:1", "400:1 / 400:1"]
    );
    assert_eq!(
        cells("requests/s served (steady)"),
        ["100.0", "3,200.0", "32.0×"]
    );
    assert_eq!(
        cells("connection setup ms, p50 / p99"),
        [
            "0.100 / 4.000",
            "0.200 / 2.000",
            "2.0× slower / 2.0× faster"
        ]
    );
    assert_eq!(cells("client errors"), ["7,000", "0"]);
    assert_eq!(
        cells("origin memory, peak (VmHWM)"),
        ["195.3 MiB", "19.5 MiB", "−90 %"]
    );
    assert_eq!(text.matches("  PASS  ").count(), 5);
    assert!(text.contains("direct: the origin reset 7,000 connections past its cap"));
}

#[test]
fn offload_table_without_the_direct_phase() {
    let mut report = offload_report();
    report.direct = None;
    report.ratios = OffloadRatios::default();
    let text = offload_text(&report);
    assert!(line(&text, "client connections held").contains("(not run)"));
}

#[test]
fn offload_table_gains_a_column_per_peer_and_each_proxys_memory() {
    let mut report = offload_report();
    report.peers = vec![peer("haproxy", 6.5, 40_000), peer("nginx", 9.0, 32_000)];
    let text = offload_text(&report);
    let header = text
        .lines()
        .find(|l| l.contains("through weir"))
        .expect("header");
    assert!(
        header.contains("through haproxy") && header.contains("through nginx"),
        "{header}"
    );
    assert!(line(&text, "proxy CPU s").contains("6.50"));
    let per_client = line(&text, "proxy memory per client connection");
    // (40,000 − 10,000) KiB over 16,000 clients, and (32,000 − 10,000) KiB.
    assert!(
        per_client.contains("1.88 KiB") && per_client.contains("1.38 KiB"),
        "{per_client}"
    );
}

#[test]
fn a_failed_check_says_fail() {
    let mut report = offload_report();
    report.checks[0].passed = false;
    assert!(offload_text(&report).contains("  FAIL  through weir: no client errors (0 errors)"));
}

#[test]
fn tls_table_shows_the_reductions_beside_the_papers() {
    let text = tls_text(&tls_report());
    assert!(
        line(&text, "origin CPU s")
            .ends_with("10.00                              3.00  −70 % (paper: −70 %)")
    );
    assert!(line(&text, "origin memory, peak (VmHWM)").contains("40.0 MiB"));
    assert!(line(&text, "origin memory, peak (VmHWM)").ends_with("−50 % (paper: −50 %)"));
    assert!(line(&text, "weir CPU s / memory peak").ends_with("9.50 / 40.0 MiB"));
    assert!(line(&text, "origin connections accepted").contains("30,000"));
    assert!(text.contains("full handshakes only"));
}

#[test]
fn suite_table_has_a_column_per_target_and_weirs_ratios() {
    let text = suite_text(&suite_report());
    let header = text.lines().nth(3).expect("header line");
    for column in ["direct", "weir", "haproxy", "weir/direct", "weir/haproxy"] {
        assert!(header.contains(column), "{header}");
    }
    let http = line(&text, "HTTP req/s (0 B)");
    assert!(http.contains("80,000*"), "{http}");
    assert!(http.contains("50,000 (2 err)"), "{http}");
    let tail: Vec<&str> = http.split_whitespace().rev().take(2).collect();
    assert_eq!(tail, ["1.25", "0.62"], "{http}");
    let throughput = line(&text, "1 MB throughput");
    assert!(throughput.contains("20.00") && throughput.contains("n/a"));
    let tail: Vec<&str> = throughput.split_whitespace().rev().take(2).collect();
    assert_eq!(tail, ["-", "0.50"], "{throughput}");
    assert_eq!(
        line(&text, "L4 conn/s")
            .split_whitespace()
            .collect::<Vec<_>>(),
        ["L4", "conn/s", "conn/s", "n/a", "n/a", "n/a"]
    );
    assert!(text.contains("\nL4 conn/s: n/a (no L4 here)\n"), "{text}");
    // A row measured for some targets only still says why the others are n/a.
    assert!(
        text.contains("\n1 MB throughput: n/a for haproxy: not measured here\n"),
        "{text}"
    );
    assert!(text.contains("* client-bound"));
    assert!(text.contains("proxy CPU over the whole suite: weir 3.0 s, haproxy 4.0 s"));
}

#[test]
fn the_lab_text_has_every_section_and_the_notes() {
    let text = lab_text(&lab_report());
    assert!(text.starts_with("weir lab — weir 0.1.0 — 2026-11-23T10:00:00Z — 2 cores (Test CPU)"));
    for part in [
        "weir lab offload:",
        "weir lab tls:",
        "weir lab suite:",
        "notes:\n  - haproxy is not installed",
    ] {
        assert!(text.contains(part), "missing {part:?}");
    }
}
