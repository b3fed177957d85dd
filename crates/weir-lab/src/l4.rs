//! `weir lab l4`: connection offload at layer 4. Many clients open TCP sessions at once
//! against a service that refuses connections past a cap (`weir origin --echo` with
//! `max_connections`): first directly, then through a weir TCP virtual server whose pool is
//! capped at the service's cap, with its queue in front. Each client connects, sends a
//! few bytes, reads them back and closes (`weir bench`, L4 connect mode).
//!
//! The service runs in the lab's process so its counters are exact: how many connections it
//! refused and the most it held at once. The claims checked: through weir no client is
//! refused or fails, and the service never holds more than its cap.

use std::time::{Duration, Instant};

use serde::Serialize;
use weir_bench::{ConnectionMode, L4Mode, Plan, Settings, Stop, TlsSettings, UrlOrder};
use weir_core::Shutdown;
use weir_origin::{Origin, OriginMode, OriginOptions};

use crate::error::LabError;
use crate::launch::Launcher;
use crate::model::Check;
use crate::process::{free_ports, loopback};
use crate::{Lab, http, template};

/// What `weir lab l4` is asked to do.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct L4LabSettings {
    /// Clients, all started at once.
    pub clients: u32,
    /// The service's cap, and weir's pool cap to it.
    pub cap: u32,
    /// Bytes each client sends and reads back.
    pub size: usize,
    /// A client gives up after this long (connect, exchange and close).
    pub timeout: Duration,
    /// weir's worker threads.
    pub proxy_threads: usize,
    /// Run the direct phase too.
    pub direct: bool,
}

impl L4LabSettings {
    /// The size: 5,000 clients, a service capped at 100 connections.
    pub fn full() -> L4LabSettings {
        L4LabSettings {
            clients: 5_000,
            cap: 100,
            size: 64,
            timeout: Duration::from_secs(60),
            proxy_threads: 1,
            direct: true,
        }
    }

    /// Refuses settings the lab cannot run (no clients, no cap, more clients than ports).
    pub fn validate(&self) -> Result<(), LabError> {
        if self.clients == 0 || self.cap == 0 {
            return Err(LabError::Invalid(
                "--clients and --cap must be at least 1".into(),
            ));
        }
        if self.clients > 15_000 {
            return Err(LabError::Invalid(
                "--clients above 15,000 would run out of loopback ports (one source address)"
                    .into(),
            ));
        }
        Ok(())
    }
}

/// One phase: direct or through weir.
#[derive(Debug, Clone, Serialize)]
pub struct L4Phase {
    /// `direct` or `through weir`.
    pub name: String,
    /// Clients started.
    pub clients: u32,
    /// Clients that had their bytes echoed whole.
    pub completed: u64,
    /// Clients that got no whole echo (refused, reset, timed out).
    pub failed: u64,
    /// Seconds from the first client's start to the last one's end.
    pub elapsed_s: f64,
    /// Median time a client took (connect, exchange, close), in milliseconds.
    pub p50_ms: f64,
    /// 99th percentile of the same, in milliseconds.
    pub p99_ms: f64,
    /// Connections the service reset at once because it was at its cap.
    pub service_refused: u64,
    /// The most connections the service held at once.
    pub service_peak: u64,
    /// weir's sessions by result, from its `/metrics` (through weir only).
    pub weir_sessions: Vec<(String, u64)>,
}

/// The experiment's results.
#[derive(Debug, Clone, Serialize)]
pub struct L4LabReport {
    /// What was asked.
    pub settings: L4LabSettings,
    /// Direct (unless skipped), then through weir.
    pub phases: Vec<L4Phase>,
    /// The claims checked on the phases, each passed or failed.
    pub checks: Vec<Check>,
}

/// Runs the phases (blocking) and checks the claims.
pub fn run(lab: &mut Lab, settings: &L4LabSettings) -> Result<L4LabReport, LabError> {
    settings.validate()?;
    crate::preflight::fit_l4(settings.clients, lab.open_files())?;
    let launcher = Launcher::new(&lab.supervisor, lab.weir.clone())?;
    let mut phases = Vec::new();
    if settings.direct {
        lab.say(&format!(
            "l4: {} clients directly against the service",
            settings.clients
        ));
        phases.push(phase(lab, &launcher, settings, false)?);
    }
    lab.say(&format!("l4: {} clients through weir", settings.clients));
    let through = phase(lab, &launcher, settings, true)?;
    let checks = vec![
        Check {
            name: "through weir: no client refused or failed".into(),
            passed: through.failed == 0 && through.completed == u64::from(settings.clients),
            detail: format!("{} completed, {} failed", through.completed, through.failed),
        },
        Check {
            name: format!(
                "through weir: the service never above its cap of {}",
                settings.cap
            ),
            passed: through.service_peak <= u64::from(settings.cap) && through.service_refused == 0,
            detail: format!(
                "peak {} connections, {} refused by the service",
                through.service_peak, through.service_refused
            ),
        },
    ];
    phases.push(through);
    Ok(L4LabReport {
        settings: settings.clone(),
        phases,
        checks,
    })
}

fn phase(
    lab: &Lab,
    launcher: &Launcher,
    settings: &L4LabSettings,
    through_weir: bool,
) -> Result<L4Phase, LabError> {
    // The service, on a runtime of its own in this process.
    let service_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("weir-lab-service")
        .enable_all()
        .build()
        .map_err(|e| LabError::io("cannot start the service's runtime", e))?;
    let origin = service_runtime
        .block_on(Origin::bind(OriginOptions {
            mode: OriginMode::Echo,
            max_connections: Some(settings.cap),
            ..OriginOptions::new("service", loopback(0))
        }))
        .map_err(|e| LabError::io("cannot start the service", e))?;
    let service = origin.local_addr();
    let stats = origin.stats();
    let (shutdown, signal) = Shutdown::new();
    service_runtime.spawn(origin.run(signal));

    let runtime = lab.runtime()?;
    let (target, proxy, admin) = if through_weir {
        let ports = free_ports(2)?;
        let config = template::render(
            template::WEIR_L4,
            &[
                ("PROXY_PORT", ports[0].to_string()),
                ("ADMIN_PORT", ports[1].to_string()),
                ("ORIGIN_PORT", service.port().to_string()),
                ("THREADS", settings.proxy_threads.to_string()),
                ("CLIENT_LIMIT", (settings.clients + 100).to_string()),
                ("POOL_CAP", settings.cap.to_string()),
                (
                    "QUEUE_TIMEOUT",
                    format!("{}s", settings.timeout.as_secs().max(1)),
                ),
            ],
        )?;
        let admin = loopback(ports[1]);
        let child = runtime.block_on(launcher.weir_serve(
            "weir-l4",
            &config,
            &[(admin, "/healthz")],
            &[loopback(ports[0])],
        ))?;
        (loopback(ports[0]), Some(child), Some(admin))
    } else {
        (service, None, None)
    };

    let started = Instant::now();
    let plan = Plan::new(Settings {
        urls: vec![format!("tcp://{target}")],
        method: "GET".to_owned(),
        headers: Vec::new(),
        body: Vec::new(),
        order: UrlOrder::Sequential,
        connections: settings.clients as usize,
        threads: Some(1),
        stop: Stop::Count(u64::from(settings.clients)),
        rate: None,
        mode: ConnectionMode::Close,
        timeout: settings.timeout,
        progress: false,
        l4_mode: L4Mode::Connect,
        l4_size: Some(settings.size),
        tls: TlsSettings::default(),
        http2_streams: None,
    })
    .map_err(|e| LabError::Bench(e.to_string()))?;
    let report = weir_bench::run(&plan).map_err(|e| LabError::Bench(e.to_string()))?;
    let elapsed_s = started.elapsed().as_secs_f64();
    let weir_sessions = match admin {
        Some(admin) => sessions(&runtime, admin)?,
        None => Vec::new(),
    };
    if let Some(mut child) = proxy {
        child.stop();
    }
    shutdown.trigger();
    let snapshot = stats.snapshot();
    Ok(L4Phase {
        name: if through_weir {
            "through weir"
        } else {
            "direct"
        }
        .to_owned(),
        clients: settings.clients,
        completed: report.requests.completed,
        failed: report.errors.total,
        elapsed_s,
        p50_ms: report.latency_service.p50_ms,
        p99_ms: report.latency_service.p99_ms,
        service_refused: snapshot.connections_refused,
        service_peak: snapshot.connections_peak,
        weir_sessions,
    })
}

/// `weir_tcp_sessions_total` by result, from weir's metrics.
fn sessions(
    runtime: &tokio::runtime::Runtime,
    admin: std::net::SocketAddr,
) -> Result<Vec<(String, u64)>, LabError> {
    let response = runtime
        .block_on(http::get(admin, "/metrics", Duration::from_secs(5)))
        .map_err(|e| LabError::io("cannot read weir's metrics", e))?;
    let text = String::from_utf8_lossy(&response.body).into_owned();
    Ok(text
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("weir_tcp_sessions_total{")?;
            let result = rest.split("result=\"").nth(1)?.split('"').next()?;
            let value: f64 = line.rsplit(' ').next()?.parse().ok()?;
            (value > 0.0).then(|| (result.to_owned(), value as u64))
        })
        .collect())
}

/// Writes the report as pretty JSON.
pub fn write_json(report: &L4LabReport, path: &std::path::Path) -> Result<(), LabError> {
    let text = serde_json::to_string_pretty(report)
        .map_err(|e| LabError::io("cannot serialise the report", std::io::Error::other(e)))?;
    std::fs::write(path, text + "\n")
        .map_err(|e| LabError::io(format!("cannot write {}", path.display()), e))
}

/// The experiment as a text table with its checks.
pub fn text(report: &L4LabReport) -> String {
    let s = &report.settings;
    let mut out = format!(
        "weir lab l4: {} clients at once, each: connect, {} B echoed, close; service capped at {} connections (resets past it)\n\n",
        s.clients, s.size, s.cap
    );
    out.push_str(&format!(
        "{:<14} {:>10} {:>8} {:>10} {:>16} {:>14} {:>16}\n",
        "", "completed", "failed", "elapsed s", "p50 / p99 ms", "service peak", "service refused"
    ));
    for phase in &report.phases {
        out.push_str(&format!(
            "{:<14} {:>10} {:>8} {:>10.2} {:>16} {:>14} {:>16}\n",
            phase.name,
            phase.completed,
            phase.failed,
            phase.elapsed_s,
            format!("{:.1} / {:.1}", phase.p50_ms, phase.p99_ms),
            phase.service_peak,
            phase.service_refused
        ));
        if !phase.weir_sessions.is_empty() {
            let results: Vec<String> = phase
                .weir_sessions
                .iter()
                .map(|(result, count)| format!("{result} {count}"))
                .collect();
            out.push_str(&format!(
                "{:<14} weir sessions: {}\n",
                "",
                results.join(", ")
            ));
        }
    }
    out.push('\n');
    for check in &report.checks {
        let verdict = if check.passed { "PASS" } else { "FAIL" };
        out.push_str(&format!("  {verdict}  {}: {}\n", check.name, check.detail));
    }
    out
}
