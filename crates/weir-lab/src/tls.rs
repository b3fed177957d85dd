//! `weir lab tls`: the Cisco ACE SSL-offload experiment on one machine.
//!
//! N simulated users, each making one request a second on a new connection (the source
//! document's "HTTP 1.0 request per second"), first against the origin serving HTTPS itself
//! (`weir origin --tls-cert ...`), then against weir terminating TLS in front of the same
//! origin serving plain HTTP. The load is `weir bench` in open loop at N requests/s with a
//! connection per request; the figures are the origin's CPU seconds over the load and its
//! peak resident memory, each origin a fresh process.

use std::path::PathBuf;
use std::time::Duration;

use tokio::runtime::Runtime;
use weir_bench::{ConnectionMode, L4Mode, Plan, Settings, Stop, TlsSettings, UrlOrder};

use crate::error::LabError;
use crate::launch::{Launcher, tree_cpu_seconds, tree_memory_kib};
use crate::model::{Latency, TlsPhase, TlsReport, TlsSettingsReport};
use crate::process::{Child, free_ports, loopback};
use crate::{Lab, http, procfs, summary, template};

/// What `weir lab tls` is asked to do.
#[derive(Debug, Clone, PartialEq)]
pub struct TlsLabSettings {
    /// Simulated users, each one request a second on a new connection.
    pub clients: u32,
    /// Length of each phase's load.
    pub duration: Duration,
    /// The path every request asks for.
    pub path: String,
    /// Offer session resumption (off: every handshake is full, the paper's worst case).
    pub resumption: bool,
    /// Worker threads of weir.
    pub proxy_threads: usize,
    /// Load generator threads.
    pub bench_threads: usize,
    /// How long a request may take before it counts as an error.
    pub timeout: Duration,
}

impl TlsLabSettings {
    /// The paper's size: 1,000 users for 30 s.
    pub fn full() -> TlsLabSettings {
        TlsLabSettings {
            clients: 1_000,
            duration: Duration::from_secs(30),
            path: "/bytes/1024".to_owned(),
            resumption: false,
            proxy_threads: 1,
            bench_threads: 1,
            timeout: Duration::from_secs(5),
        }
    }

    /// The quick run of `weir lab`: 300 users for 10 s.
    pub fn quick() -> TlsLabSettings {
        TlsLabSettings {
            clients: 300,
            duration: Duration::from_secs(10),
            ..TlsLabSettings::full()
        }
    }

    /// Rejects settings that cannot work (no clients, under 1 s, a path without `/`) before
    /// anything starts.
    pub fn validate(&self) -> Result<(), LabError> {
        if self.clients == 0 {
            return Err(LabError::Invalid("--clients must be at least 1".into()));
        }
        if self.duration < Duration::from_secs(1) {
            return Err(LabError::Invalid("--duration must be at least 1s".into()));
        }
        if !self.path.starts_with('/') {
            return Err(LabError::Invalid(format!(
                "--path {:?} must start with /",
                self.path
            )));
        }
        Ok(())
    }
}

/// Runs both sides (blocking) and returns the report.
pub fn run(lab: &mut Lab, settings: &TlsLabSettings) -> Result<TlsReport, LabError> {
    settings.validate()?;
    let launcher = Launcher::new(&lab.supervisor, lab.weir.clone())?;
    let names = vec!["127.0.0.1".to_owned(), "localhost".to_owned()];
    let certificate = weir_tls::certs::self_signed(&names, weir_tls::KeyType::EcdsaP256, 2)
        .map_err(|e| LabError::io("cannot make a certificate", std::io::Error::other(e)))?;
    let files = (
        launcher.dir.write("cert.pem", &certificate.cert_pem)?,
        launcher.dir.write("key.pem", &certificate.key_pem)?,
    );
    let runtime = lab.runtime()?;
    lab.say(&format!(
        "tls, origin serving HTTPS: {} clients × 1 request/s on new connections",
        settings.clients
    ));
    let direct = serving_https(&runtime, &launcher, settings, &files)?;
    lab.say("tls, origin behind weir (TLS at weir)");
    let offloaded = behind_weir(&runtime, &launcher, settings, &files)?;
    let checks = summary::tls_checks(&direct, &offloaded);
    Ok(TlsReport {
        settings: TlsSettingsReport {
            clients: settings.clients,
            duration_s: settings.duration.as_secs_f64(),
            path: settings.path.clone(),
            resumption: settings.resumption,
            certificate: "ECDSA P-256, TLS 1.2 and 1.3 offered".to_owned(),
            proxy_threads: settings.proxy_threads,
        },
        origin_cpu_reduction: summary::reduction(direct.origin_cpu_s, offloaded.origin_cpu_s),
        origin_memory_reduction: summary::reduction(
            direct.origin_memory_peak_kib as f64,
            offloaded.origin_memory_peak_kib as f64,
        ),
        direct,
        offloaded,
        checks,
    })
}

/// The certificate and key files.
type Files = (PathBuf, PathBuf);

/// The origin serving HTTPS itself.
fn serving_https(
    runtime: &Runtime,
    launcher: &Launcher,
    settings: &TlsLabSettings,
    (cert, key): &Files,
) -> Result<TlsPhase, LabError> {
    let port = free_ports(1)?[0];
    let mut args = vec![
        "--tls-cert".to_owned(),
        cert.display().to_string(),
        "--tls-key".to_owned(),
        key.display().to_string(),
    ];
    if !settings.resumption {
        args.push("--tls-no-resumption".to_owned());
    }
    let mut origin = runtime.block_on(launcher.weir_origin("origin-https", port, &args, true))?;
    let phase = measure(
        settings,
        &origin,
        None,
        &format!("https://127.0.0.1:{port}"),
    )?;
    origin.stop();
    Ok(phase)
}

/// The origin serving plain HTTP behind weir, which terminates TLS.
fn behind_weir(
    runtime: &Runtime,
    launcher: &Launcher,
    settings: &TlsLabSettings,
    (cert, key): &Files,
) -> Result<TlsPhase, LabError> {
    let ports = free_ports(3)?;
    let (origin_port, proxy_port, admin_port) = (ports[0], ports[1], ports[2]);
    let config = template::render(
        template::WEIR_TLS,
        &[
            ("PROXY_PORT", proxy_port.to_string()),
            ("ADMIN_PORT", admin_port.to_string()),
            ("ORIGIN_PORT", origin_port.to_string()),
            ("THREADS", settings.proxy_threads.to_string()),
            ("CERT", cert.display().to_string()),
            ("KEY", key.display().to_string()),
            ("SESSION_TICKETS", settings.resumption.to_string()),
            (
                "SESSION_CACHE",
                if settings.resumption { "20000" } else { "0" }.to_owned(),
            ),
        ],
    )?;
    let (mut origin, mut proxy) = runtime.block_on(async {
        let origin = launcher
            .weir_origin("origin-http", origin_port, &[], false)
            .await?;
        let proxy = launcher
            .weir_serve(
                "weir-tls",
                &config,
                &[(loopback(admin_port), "/healthz")],
                &[loopback(proxy_port)],
            )
            .await?;
        Ok::<_, LabError>((origin, proxy))
    })?;
    let stats_before = runtime.block_on(plain_stats(origin_port));
    let mut phase = measure(
        settings,
        &origin,
        Some(&proxy),
        &format!("https://127.0.0.1:{proxy_port}"),
    )?;
    proxy.stop();
    let stats_after = runtime.block_on(plain_stats(origin_port));
    origin.stop();
    if let (Some(before), Some(after)) = (stats_before, stats_after) {
        // Less the closing /stats probe's own connection.
        phase.origin_connections_accepted =
            (after.connections_accepted - before.connections_accepted).saturating_sub(1);
    }
    Ok(phase)
}

async fn plain_stats(port: u16) -> Option<weir_origin::StatsSnapshot> {
    let response = http::get(loopback(port), "/stats", Duration::from_secs(2))
        .await
        .ok()?;
    weir_origin::parse_stats_json(&response.body)
}

/// Runs the load against `base` and reads the origin's (and weir's) CPU and memory.
fn measure(
    settings: &TlsLabSettings,
    origin: &Child,
    proxy: Option<&Child>,
    base: &str,
) -> Result<TlsPhase, LabError> {
    let plan = Plan::new(Settings {
        urls: vec![format!("{base}{}", settings.path)],
        method: "GET".to_owned(),
        headers: Vec::new(),
        body: Vec::new(),
        order: UrlOrder::Sequential,
        connections: settings.clients as usize,
        threads: Some(settings.bench_threads),
        stop: Stop::Duration(settings.duration),
        rate: Some(f64::from(settings.clients)),
        mode: ConnectionMode::Close,
        timeout: settings.timeout,
        progress: false,
        l4_mode: L4Mode::RequestResponse,
        l4_size: None,
        tls: TlsSettings {
            resumption: settings.resumption,
            ..TlsSettings::default()
        },
        http2_streams: None,
    })
    .map_err(|e| LabError::Bench(e.to_string()))?;
    let origin_pids = [origin.pid()];
    let origin_before = tree_cpu_seconds(&origin_pids);
    let proxy_before = proxy.and_then(|p| procfs::cpu_seconds(p.pid()));
    let report = weir_bench::run(&plan).map_err(|e| LabError::Bench(e.to_string()))?;
    let origin_cpu_s = tree_cpu_seconds(&origin_pids) - origin_before;
    let proxy_cpu_s = proxy.and_then(|p| Some(procfs::cpu_seconds(p.pid())? - proxy_before?));
    let latency = &report.latency_corrected;
    let tls = report.tls.as_ref();
    Ok(TlsPhase {
        requests_ok: report.requests.successful,
        errors: report.requests.failed + report.requests.non_2xx,
        requests_per_s: report.requests_per_s,
        latency_ms: Latency {
            count: report.requests.completed,
            p50: latency.p50_ms,
            p99: latency.p99_ms,
            max: latency.max_ms,
        },
        handshakes_full: tls.map_or(0, |t| t.handshakes_full),
        handshakes_resumed: tls.map_or(0, |t| t.handshakes_resumed),
        origin_cpu_s,
        origin_memory_peak_kib: tree_memory_kib(&origin_pids).1,
        // Direct, every client connection is one the origin accepted.
        origin_connections_accepted: report.connections_opened,
        proxy_cpu_s,
        proxy_memory_peak_kib: proxy.and_then(|p| procfs::memory_kib(p.pid()).map(|(_, hwm)| hwm)),
    })
}
