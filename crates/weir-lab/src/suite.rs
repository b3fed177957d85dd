//! `weir lab suite`: the Zeus table (`weir bench suite`) against the origin directly, through
//! weir, and through each installed peer (HAProxy, nginx), side by side.
//!
//! One plain origin (`weir origin`) serves every proxy; a second, HTTPS origin serves the
//! direct column's TLS rows. weir, HAProxy and nginx run with the configs in `bench/lab/`:
//! the same threads, HTTP and HTTPS listeners with the same certificate, keep-alive reuse to
//! the origin, no logging, and a caching listener for the cache rows (weir's `[cache]`,
//! HAProxy's `cache`, nginx's `proxy_cache`). The suite runs against one target at a time,
//! in column order, and each proxy's CPU seconds over its own run are recorded.

use std::path::PathBuf;
use std::time::Duration;

use weir_bench::suite::{SuiteReport, SuiteSettings, SuiteTarget};

use crate::error::LabError;
use crate::launch::{Launcher, process_tree, tree_cpu_seconds};
use crate::model::{SuiteColumn, SuiteLabReport, SuiteLabRow};
use crate::peers::Peer;
use crate::process::{Child, free_ports, loopback};
use crate::{Lab, template};

/// Why a column has no L4 rows: only nginx without its stream module lacks them.
const NO_L4: &str =
    "n/a for nginx: its stream module is not installed (apt-get install libnginx-mod-stream)";
/// Why a column has no cache rows: only the direct column (the origin) lacks them.
const NO_CACHE: &str = "n/a for direct: weir origin does not cache";
/// Debian's nginx has the stream module as a dynamic module.
const NGINX_STREAM_MODULE: &str = "/usr/lib/nginx/modules/ngx_stream_module.so";

/// What `weir lab suite` is asked to do.
#[derive(Debug, Clone, PartialEq)]
pub struct SuiteLabSettings {
    /// How long each row of the table is measured, per column.
    pub row_duration: Duration,
    /// Concurrent connections the load generator keeps open.
    pub connections: usize,
    /// Load generator threads; `None`: one per core.
    pub bench_threads: Option<usize>,
    /// Threads (workers) of weir and each peer.
    pub proxy_threads: usize,
    /// Peer proxies measured beside weir, each in its own column.
    pub peers: Vec<Peer>,
    /// How long a request may take before it counts as an error.
    pub timeout: Duration,
}

impl SuiteLabSettings {
    /// 5 s a row, 50 connections, no peers unless asked.
    pub fn full() -> SuiteLabSettings {
        SuiteLabSettings {
            row_duration: Duration::from_secs(5),
            connections: 50,
            bench_threads: None,
            proxy_threads: 1,
            peers: Vec::new(),
            timeout: Duration::from_secs(5),
        }
    }

    /// The quick run of `weir lab`: 1 s a row.
    pub fn quick() -> SuiteLabSettings {
        SuiteLabSettings {
            row_duration: Duration::from_secs(1),
            ..SuiteLabSettings::full()
        }
    }

    /// Rejects settings that cannot work (no connections or threads, rows under 100 ms) before
    /// anything starts.
    pub fn validate(&self) -> Result<(), LabError> {
        if self.connections == 0 {
            return Err(LabError::Invalid("--connections must be at least 1".into()));
        }
        if self.row_duration < Duration::from_millis(100) {
            return Err(LabError::Invalid(
                "--row-duration must be at least 100ms".into(),
            ));
        }
        if self.proxy_threads == 0 {
            return Err(LabError::Invalid(
                "--proxy-threads must be at least 1".into(),
            ));
        }
        Ok(())
    }
}

/// A column of the table while it runs.
struct Column {
    name: String,
    version: String,
    base: String,
    tls: String,
    /// Speaks HTTP/2 (h2c on `h2c`, ALPN h2 on `tls`): the suite's HTTP/2 rows are measured.
    http2: bool,
    /// `http://host:port` of the h2c (prior knowledge) listener.
    h2c: Option<String>,
    /// `host:port` of the L4 listener (in front of the echo origin); `None`: no L4 rows.
    l4: Option<String>,
    /// `http://host:port` of the caching listener; `None` (the direct column): no cache rows.
    cache: Option<String>,
    process: Option<Child>,
}

/// Runs the suite against every column (blocking) and returns the table.
pub fn run(lab: &mut Lab, settings: &SuiteLabSettings) -> Result<SuiteLabReport, LabError> {
    settings.validate()?;
    let mut peers = Vec::new();
    for &peer in &settings.peers {
        match lab.program(peer) {
            Some(program) => peers.push((peer, program)),
            None => lab.note(format!(
                "{} is not installed (apt-get install {}, or --install): left out of the suite",
                peer.name(),
                peer.package()
            )),
        }
    }
    let launcher = Launcher::new(&lab.supervisor, lab.weir.clone())?;
    let files = Certificates::write(&launcher)?;
    let runtime = lab.runtime()?;
    let ports = free_ports(18)?;
    let echo_port = ports[8];
    let (origin_port, origin_tls_port) = (ports[0], ports[1]);
    let proxies = std::iter::once(None).chain(peers.iter().map(Some));
    let (_origin, _origin_tls, _echo, mut columns) = runtime.block_on(async {
        let origin = launcher
            .weir_origin("origin", origin_port, &[], false)
            .await?;
        let tls_args = [
            "--tls-cert".to_owned(),
            files.cert.display().to_string(),
            "--tls-key".to_owned(),
            files.key.display().to_string(),
        ];
        let origin_tls = launcher
            .weir_origin("origin-https", origin_tls_port, &tls_args, true)
            .await?;
        let echo = launcher
            .weir_origin("echo", echo_port, &["--echo".to_owned()], true)
            .await?;
        let mut columns = vec![Column {
            name: "direct".to_owned(),
            version: "weir origin".to_owned(),
            base: format!("http://{}", loopback(origin_port)),
            tls: format!("https://{}", loopback(origin_tls_port)),
            // weir origin speaks HTTP/1.1 only.
            http2: false,
            h2c: None,
            l4: Some(loopback(echo_port).to_string()),
            // weir origin does not cache.
            cache: None,
            process: None,
        }];
        for (index, peer) in proxies.enumerate() {
            let listen = (ports[2 + 2 * index], ports[3 + 2 * index]);
            let setup = ProxySetup {
                l4: (ports[9 + index], echo_port),
                cache: ports[12 + index],
                h2c: ports[15 + index],
                files: &files,
                origin_port,
                threads: settings.proxy_threads,
                listen,
            };
            columns.push(start_proxy(&launcher, &setup, peer).await?);
        }
        Ok::<_, LabError>((origin, origin_tls, echo, columns))
    })?;

    let mut reports = Vec::new();
    let mut targets = Vec::new();
    for column in &mut columns {
        let (report, proxy_cpu_s) = measure(lab, settings, column)?;
        reports.push(report);
        targets.push(SuiteColumn {
            name: column.name.clone(),
            version: column.version.clone(),
            proxy_cpu_s,
        });
    }
    Ok(merge(settings, targets, &reports))
}

/// The test certificate every HTTPS listener of the suite serves, as the peers want it.
struct Certificates {
    cert: PathBuf,
    key: PathBuf,
    /// Certificate and key in one file (HAProxy's `crt`).
    pem: PathBuf,
}

impl Certificates {
    fn write(launcher: &Launcher) -> Result<Certificates, LabError> {
        let names = vec!["127.0.0.1".to_owned(), "localhost".to_owned()];
        let certificate = weir_tls::certs::self_signed(&names, weir_tls::KeyType::EcdsaP256, 2)
            .map_err(|e| LabError::io("cannot make a certificate", std::io::Error::other(e)))?;
        Ok(Certificates {
            cert: launcher.dir.write("cert.pem", &certificate.cert_pem)?,
            key: launcher.dir.write("key.pem", &certificate.key_pem)?,
            pem: launcher.dir.write(
                "cert-and-key.pem",
                &format!("{}{}", certificate.cert_pem, certificate.key_pem),
            )?,
        })
    }
}

/// What every proxy of the suite is configured with.
struct ProxySetup<'a> {
    files: &'a Certificates,
    origin_port: u16,
    threads: usize,
    /// HTTP and HTTPS ports.
    listen: (u16, u16),
    /// The L4 listener's port and the echo origin's.
    l4: (u16, u16),
    /// The caching listener's port (the cache rows).
    cache: u16,
    /// The h2c listener's port (the h2c row).
    h2c: u16,
}

/// Starts weir (`peer` `None`) or a peer with its `bench/lab/` config.
async fn start_proxy(
    launcher: &Launcher,
    setup: &ProxySetup<'_>,
    peer: Option<&(Peer, PathBuf)>,
) -> Result<Column, LabError> {
    let (http, https) = setup.listen;
    let mut values = vec![
        ("HTTP_PORT", http.to_string()),
        ("HTTPS_PORT", https.to_string()),
        ("CACHE_PORT", setup.cache.to_string()),
        ("H2C_PORT", setup.h2c.to_string()),
        ("ORIGIN_PORT", setup.origin_port.to_string()),
        ("THREADS", setup.threads.to_string()),
        ("L4_PORT", setup.l4.0.to_string()),
        ("ECHO_PORT", setup.l4.1.to_string()),
    ];
    let mut l4 = Some(loopback(setup.l4.0).to_string());
    let cert = ("CERT", setup.files.cert.display().to_string());
    let key = ("KEY", setup.files.key.display().to_string());
    let ready = [(loopback(http), "/")];
    let (name, version, child) = match peer {
        None => {
            values.extend([cert, key]);
            let config = template::render(template::WEIR_SUITE, &values)?;
            let child = launcher
                .weir_serve("weir-suite", &config, &ready, &[loopback(https)])
                .await?;
            ("weir", weir_core::VERSION.to_owned(), child)
        }
        Some((Peer::Haproxy, program)) => {
            values.push(("PEM", setup.files.pem.display().to_string()));
            let config = template::render(template::HAPROXY_SUITE, &values)?;
            let child = launcher
                .haproxy(program, "haproxy", &config, &ready)
                .await?;
            (
                "haproxy",
                crate::peers::version(program, Peer::Haproxy),
                child,
            )
        }
        Some((Peer::Nginx, program)) => {
            values.extend([cert, key]);
            // The L4 ports go into the stream block, not the template.
            values.retain(|(name, _)| !matches!(*name, "L4_PORT" | "ECHO_PORT"));
            let (load, stream) = nginx_stream(setup.l4);
            if load.is_empty() {
                l4 = None;
            }
            values.extend([("LOAD_STREAM", load), ("STREAM", stream)]);
            let config = template::render(template::NGINX_SUITE, &values)?;
            let child = launcher.nginx(program, "nginx", &config, &ready).await?;
            ("nginx", crate::peers::version(program, Peer::Nginx), child)
        }
    };
    let mut column = column(name, &version, http, https, child);
    column.l4 = l4;
    column.cache = Some(format!("http://{}", loopback(setup.cache)));
    column.h2c = Some(format!("http://{}", loopback(setup.h2c)));
    column.http2 = true;
    Ok(column)
}

/// nginx's L4 listener: the `load_module` line and the `stream` block, or nothing (and a
/// comment saying why) when Debian's stream module is not installed.
fn nginx_stream((listen, echo): (u16, u16)) -> (String, String) {
    if !std::path::Path::new(NGINX_STREAM_MODULE).exists() {
        return (
            String::new(),
            "# No L4 rows: the stream module (libnginx-mod-stream) is not installed.".to_owned(),
        );
    }
    (
        format!("load_module {NGINX_STREAM_MODULE};"),
        format!(
            "stream {{\n    server {{\n        listen 127.0.0.1:{listen} backlog=4096;\n        \
             proxy_pass 127.0.0.1:{echo};\n        proxy_timeout 300s;\n    }}\n}}"
        ),
    )
}

/// Runs the suite against one column, then stops its proxy; returns the report and the
/// proxy's CPU seconds over it.
fn measure(
    lab: &Lab,
    settings: &SuiteLabSettings,
    column: &mut Column,
) -> Result<(SuiteReport, Option<f64>), LabError> {
    lab.say(&format!("suite: {} ({})", column.name, column.version));
    let pids = column.process.as_ref().map(process_tree);
    let before = pids.as_deref().map(tree_cpu_seconds);
    let report = weir_bench::suite::run(&SuiteSettings {
        targets: vec![SuiteTarget {
            base: column.base.clone(),
            l4: column.l4.clone(),
            tls: Some(column.tls.clone()),
            http2: column.http2,
            h2c: column.h2c.clone(),
            cache: column.cache.clone(),
        }],
        row_duration: settings.row_duration,
        slices: 1,
        connections: settings.connections,
        threads: settings.bench_threads,
        timeout: settings.timeout,
    })
    .map_err(|e| LabError::Bench(format!("suite against {}: {e}", column.name)))?;
    let cpu = pids
        .as_deref()
        .zip(before)
        .map(|(pids, before)| tree_cpu_seconds(pids) - before);
    if let Some(mut process) = column.process.take() {
        process.stop();
    }
    Ok((report, cpu))
}

fn column(name: &str, version: &str, http: u16, https: u16, process: Child) -> Column {
    Column {
        name: name.to_owned(),
        version: version.to_owned(),
        base: format!("http://{}", loopback(http)),
        tls: format!("https://{}", loopback(https)),
        // Set by `start_proxy` once the listeners are known.
        http2: false,
        h2c: None,
        l4: None,
        cache: None,
        process: Some(process),
    }
}

/// One table from one single-target suite report per column (rows in the same order).
pub fn merge(
    settings: &SuiteLabSettings,
    targets: Vec<SuiteColumn>,
    reports: &[SuiteReport],
) -> SuiteLabReport {
    let rows = weir_bench::suite::ROWS
        .iter()
        .enumerate()
        .map(|(index, spec)| {
            let cells: Vec<_> = reports
                .iter()
                .map(|report| report.rows.get(index).and_then(|row| row.results.first()))
                .collect();
            let note = reports
                .iter()
                .filter_map(|report| report.rows.get(index))
                .find_map(|row| row.note)
                .map(|note| match spec.kind {
                    weir_bench::suite::RowKind::L4Connect
                    | weir_bench::suite::RowKind::L4Rr { .. } => NO_L4.to_owned(),
                    weir_bench::suite::RowKind::Cache { .. } => NO_CACHE.to_owned(),
                    _ => note.to_owned(),
                });
            SuiteLabRow {
                name: spec.name.to_owned(),
                unit: spec.unit().to_owned(),
                values: cells.iter().map(|cell| cell.map(|r| r.value)).collect(),
                p99_ms: cells.iter().map(|cell| cell.map(|r| r.p99_ms)).collect(),
                errors: cells
                    .iter()
                    .map(|cell| cell.map_or(0, |r| r.errors))
                    .collect(),
                client_bound: cells
                    .iter()
                    .map(|cell| cell.is_some_and(|r| r.client_bound))
                    .collect(),
                note,
            }
        })
        .collect();
    SuiteLabReport {
        row_duration_s: settings.row_duration.as_secs_f64(),
        connections: settings.connections,
        targets,
        rows,
    }
}
