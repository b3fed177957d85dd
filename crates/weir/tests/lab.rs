//! `weir lab` end to end, tiny: a few dozen clients for a few seconds on loopback. The
//! invariants come from counters (the origin's own, weir's, the clients'), never from speed:
//! through weir the origin never exceeds its cap and the clients see no error; direct, past
//! the cap, errors appear. The HTML report is rendered in headless Chromium (Debian
//! `chromium`, installed by scripts/test), which must draw every chart.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use weir_lab::model::LabReport;

fn weir() -> Command {
    Command::new(env!("CARGO_BIN_EXE_weir"))
}

/// The labs that load the machine run one at a time, so one's load (the suite saturates
/// both cores) does not starve another's clients of their timeouts.
fn one_lab_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LAB: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LAB.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A directory removed when the test ends.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let path =
            std::env::temp_dir().join(format!("weir-lab-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("temp dir");
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `weir lab ARGS --out DIR --quiet`, requires success, returns the JSON report.
fn lab(args: &[&str], out: &Path) -> LabReport {
    let output = weir()
        .arg("lab")
        .args(args)
        .arg("--out")
        .arg(out)
        .arg("--quiet")
        .output()
        .expect("weir runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "weir lab {args:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let json = std::fs::read_to_string(out.join("lab.json")).expect("lab.json written");
    serde_json::from_str(&json).expect("lab.json is a weir-lab/1 document")
}

/// The report's DOM after headless Chromium ran its script.
fn chromium_dom(html: &Path) -> String {
    let profile = TempDir::new(&format!(
        "chromium-{}",
        html.parent()
            .and_then(Path::file_name)
            .map_or("x".into(), |n| n.to_string_lossy().into_owned())
    ));
    let output = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
        ])
        .arg(format!("--user-data-dir={}", profile.0.display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", html.display()))
        .stdin(Stdio::null())
        .output()
        .expect("chromium runs (Debian package `chromium`; scripts/test installs it)");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn assert_charts_drawn(out: &Path, expected: usize) {
    let dom = chromium_dom(&out.join("report.html"));
    assert_eq!(
        weir_lab::html::check_drawn(&dom),
        Ok(expected),
        "charts not drawn"
    );
}

#[test]
fn tiny_offload_lab_keeps_the_origin_under_its_cap_through_weir() {
    let _lab = one_lab_at_a_time();
    let out = TempDir::new("offload");
    let report = lab(
        &[
            "offload",
            "--clients",
            "40",
            "--origin-cap",
            "8",
            "--duration",
            "4s",
            "--ramp",
            "1s",
            "--interval",
            "500ms",
            "--sample-every",
            "250ms",
            "--sources",
            "2",
            "--connection-memory",
            "64k",
        ],
        &out.0,
    );
    let offload = report.offload.expect("offload ran");
    assert_eq!(offload.settings.clients, 40);
    let weir = &offload.weir;
    // Through weir: every client held, none failed, the origin never past its cap.
    assert_eq!(weir.clients.errors.total(), 0, "{:?}", weir.clients.errors);
    assert_eq!(weir.clients.held_peak, 40);
    assert!(weir.clients.requests_ok >= 40);
    assert!(
        weir.origin.connections_peak <= 8,
        "origin peak {}",
        weir.origin.connections_peak
    );
    assert_eq!(weir.origin.peak_source, "origin counter");
    assert_eq!(weir.origin.connections_refused, Some(0));
    assert_eq!(
        weir.origin.requests,
        Some(weir.clients.requests_ok),
        "every answer came from the origin"
    );
    let proxy = weir.proxy.as_ref().expect("weir's figures");
    assert!(proxy.upstream_connections_peak <= 8);
    assert_eq!(proxy.client_connections_peak, 40);
    assert_eq!(proxy.responses_5xx, 0);
    assert!(weir.samples.len() >= 10);
    for sample in &weir.samples {
        assert!(sample.origin_connections <= 8, "{sample:?}");
    }
    assert!(
        offload.ratios.offload.is_some_and(|r| r >= 5.0),
        "{:?}",
        offload.ratios
    );
    // Direct, past the cap: errors, the origin refusing, at most the cap served at once.
    let direct = offload.direct.as_ref().expect("direct ran");
    assert!(direct.clients.errors.total() > 0);
    assert!(direct.origin.connections_refused.is_some_and(|n| n > 0));
    assert!(
        direct.clients.held_peak <= 8,
        "{}",
        direct.clients.held_peak
    );
    assert!(direct.origin.connections_peak <= 8);
    assert!(
        offload.checks.iter().all(|check| check.passed),
        "{:?}",
        offload.checks
    );
    assert_charts_drawn(&out.0, 6);
}

#[test]
fn tiny_tls_lab_moves_the_handshakes_off_the_origin() {
    let _lab = one_lab_at_a_time();
    let out = TempDir::new("tls");
    let report = lab(&["tls", "--clients", "20", "--duration", "2s"], &out.0);
    let tls = report.tls.expect("tls ran");
    for phase in [&tls.direct, &tls.offloaded] {
        assert_eq!(phase.errors, 0);
        assert!(phase.requests_ok >= 20, "{phase:?}");
        // A new connection, so a full handshake, per request.
        assert_eq!(phase.handshakes_full, phase.requests_ok);
        assert_eq!(phase.handshakes_resumed, 0);
    }
    // Serving HTTPS, the origin accepted a connection per request; behind weir, a few
    // reused ones (the pool's cap is 64).
    assert_eq!(
        tls.direct.origin_connections_accepted,
        tls.direct.requests_ok
    );
    assert!(tls.offloaded.origin_connections_accepted <= 64);
    assert!(tls.offloaded.proxy_cpu_s.is_some() && tls.direct.proxy_cpu_s.is_none());
    assert_charts_drawn(&out.0, 2);
}

#[test]
fn tiny_suite_lab_measures_direct_and_weir() {
    let _lab = one_lab_at_a_time();
    let out = TempDir::new("suite");
    let report = lab(
        &[
            "suite",
            "--row-duration",
            "200ms",
            "--connections",
            "4",
            "--bench-threads",
            "1",
        ],
        &out.0,
    );
    let suite = report.suite.expect("suite ran");
    let names: Vec<&str> = suite.targets.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["direct", "weir"]);
    let measured: Vec<_> = suite
        .rows
        .iter()
        .filter(|row| row.values.iter().any(Option::is_some))
        .collect();
    assert_eq!(measured.len(), 13, "HTTP, TLS, L4, HTTP/2 and cache rows");
    for row in measured {
        // The origin neither caches nor speaks HTTP/2: those rows are weir's alone.
        let from = usize::from(row.name.starts_with("cache") || row.name.starts_with("h2"));
        assert!(row.values[..from].iter().all(Option::is_none), "{row:?}");
        assert!(
            row.values[from..]
                .iter()
                .all(|v| v.is_some_and(|v| v > 0.0)),
            "{row:?}"
        );
        assert_eq!(row.errors, [0, 0], "{row:?}");
    }
    assert_charts_drawn(&out.0, 1);
}

#[test]
fn bad_lab_flags_get_a_clear_error() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["offload", "--duration", "1s"],
            "--duration 1s is too short",
        ),
        (
            &["offload", "--origin-cap", "5", "--pool-cap", "10"],
            "--pool-cap 10 is above --origin-cap 5",
        ),
        (
            &["offload", "--clients", "0"],
            "--clients must be at least 1",
        ),
        (&["offload", "--path", "nope"], "must start with /"),
        (
            &["offload", "--connection-memory", "lots"],
            "invalid value 'lots'",
        ),
        (&["suite", "--peers", "envoy"], "unknown peer \"envoy\""),
        (&["tls", "--clients", "0"], "--clients must be at least 1"),
    ];
    for (args, message) in cases {
        let output = weir().arg("lab").args(*args).output().expect("weir runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?} succeeded");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

/// PIDs whose parent is `parent`.
fn children_of(parent: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .is_some_and(|stat| {
                    stat.rfind(')').and_then(|end| {
                        stat[end + 1..]
                            .split_whitespace()
                            .nth(1)?
                            .parse::<u32>()
                            .ok()
                    }) == Some(parent)
                })
        })
        .collect()
}

fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rfind(')')
            .and_then(|end| stat[end + 1..].split_whitespace().next())
            .is_some_and(|state| state != "Z")
    })
}

#[test]
fn sigint_stops_everything_the_lab_started() {
    let _lab = one_lab_at_a_time();
    // SIGHUP: the terminal or ssh session went; SIGQUIT: Ctrl-\. The children run in their
    // own process groups and get neither.
    use nix::sys::signal::Signal;
    for (signal, expected) in [
        (Signal::SIGINT, 130),
        (Signal::SIGTERM, 143),
        (Signal::SIGHUP, 129),
        (Signal::SIGQUIT, 131),
    ] {
        let mut lab = weir()
            .args([
                "lab",
                "offload",
                "--no-direct",
                "--clients",
                "10",
                "--origin-cap",
                "4",
                "--duration",
                "60s",
                "--ramp",
                "1s",
                "--interval",
                "1s",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("weir runs");
        // Progress lines start once the origin and weir answer.
        let mut stderr = BufReader::new(lab.stderr.take().expect("stderr"));
        let mut line = String::new();
        while !line.contains("t=") {
            line.clear();
            assert!(
                stderr.read_line(&mut line).expect("stderr") > 0,
                "the lab ended early"
            );
        }
        let children = children_of(lab.id());
        assert_eq!(children.len(), 2, "origin and weir: {children:?}");
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(lab.id() as i32), signal)
            .expect("signal");
        let started = Instant::now();
        let status = loop {
            if let Some(status) = lab.try_wait().expect("wait") {
                break status;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the lab did not exit"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(status.code(), Some(expected), "{signal}");
        for pid in children {
            assert!(!running(pid), "child {pid} outlived the lab");
        }
    }
}

fn vm_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.split_whitespace().next()?.parse().ok())
        .expect("VmRSS")
}

/// The lab's connection-bound origin: `weir origin --per-connection-memory` holds that much
/// memory, touched, per open connection, so its resident memory grows with its connections
/// (like Apache's process per connection) and falls back when they close.
#[test]
fn the_origin_holds_its_per_connection_memory_while_connections_are_open() {
    use std::io::{Read, Write};
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("free port")
        .port();
    let mut origin = weir()
        .args([
            "origin",
            "--threads",
            "1",
            "--per-connection-memory",
            "4194304",
            "--listen",
        ])
        .arg(format!("127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("weir origin runs");
    let connect = || std::net::TcpStream::connect(("127.0.0.1", port));
    let started = Instant::now();
    while connect().is_err() {
        assert!(origin.try_wait().expect("wait").is_none(), "origin exited");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "origin did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(100));
    let before = vm_rss_kib(origin.id());
    let mut connections: Vec<_> = (0..10)
        .map(|_| {
            let mut stream = connect().expect("connect");
            stream
                .write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
                .expect("write");
            let mut answer = [0u8; 256];
            let read = stream.read(&mut answer).expect("answer");
            assert!(answer[..read].starts_with(b"HTTP/1.1 200"));
            stream
        })
        .collect();
    let open = vm_rss_kib(origin.id());
    // 10 connections × 4 MiB = 40 MiB touched; allow for rounding and the allocator.
    assert!(
        open >= before + 36 * 1024,
        "RSS {before} KiB → {open} KiB with 10 connections"
    );
    connections.clear();
    let started = Instant::now();
    while vm_rss_kib(origin.id()) > before + 8 * 1024 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "memory not released: {} KiB",
            vm_rss_kib(origin.id())
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = origin.kill();
    let _ = origin.wait();
}
