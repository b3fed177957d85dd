//! `weir lab offload`: the Cisco ACE TCP-offload experiment on one machine.
//!
//! An origin that refuses connections past a cap (the built-in origin with
//! `--max-connections` and a per-connection memory cost, or nginx with `worker_connections`)
//! faces many slow keep-alive clients, ramped up over time: first directly, then through weir
//! (`weir serve`, its pool to the origin capped at the origin's own cap). Each phase starts
//! fresh processes; the clients run in the lab's process, the origin and weir in their own,
//! so their CPU time and memory are theirs alone. A sampler records, once a sampling
//! period, the clients' gauges, the connections the origin's processes hold open (their own
//! socket descriptors, less listeners), weir's gauges from its `/metrics`, and everyone's
//! memory.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use weir_origin::StatsSnapshot;

use crate::clients::{LoadCounters, LoadSettings};
use crate::error::LabError;
use crate::launch::{Launcher, process_tree, tree_cpu_seconds, tree_memory_kib};
use crate::model::{
    ClientSummary, OffloadReport, OffloadSettingsReport, OriginSummary, PeerPhase, PhaseReport,
    ProxySummary, Sample,
};
use crate::peers::Peer;
use crate::process::loopback;
use crate::{Lab, http, metrics, preflight, procfs, summary};

mod sample;
mod start;

use sample::{Probe, sample, weir_metrics};
use start::{RunningProxy, start};

/// The origin the clients face.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OriginKind {
    /// `weir origin --max-connections CAP --per-connection-memory BYTES`.
    Builtin,
    /// nginx from Debian with `worker_connections` = cap + 1.
    Nginx,
}

/// What `weir lab offload` is asked to do.
#[derive(Debug, Clone, PartialEq)]
pub struct OffloadSettings {
    /// Simulated clients, each holding one keep-alive connection and sending a request every
    /// `interval`.
    pub clients: u32,
    /// The most connections the origin accepts at once; past it, it refuses.
    pub origin_cap: u32,
    /// weir's pool cap to the origin; `None`: the origin's cap.
    pub pool_cap: Option<u32>,
    /// Which origin serves the clients.
    pub origin: OriginKind,
    /// Bytes the built-in origin allocates and touches per open connection.
    pub connection_memory: u64,
    /// Time between one client's requests.
    pub interval: Duration,
    /// Time over which the clients start, evenly spread.
    pub ramp: Duration,
    /// Length of each phase's load, ramp included.
    pub duration: Duration,
    /// How long a client waits for a connect or a response before counting a timeout.
    pub timeout: Duration,
    /// `None`: enough 127.0.0.x source addresses for the clients.
    pub sources: Option<u8>,
    /// Worker threads of weir and of each peer proxy.
    pub proxy_threads: usize,
    /// The path every request asks for.
    pub path: String,
    /// Run the direct phase too.
    pub direct: bool,
    /// Run the same clients through these peers too, each with the same cap to the origin.
    pub peers: Vec<Peer>,
    /// The sampling period of the phase's time series.
    pub sample_every: Duration,
}

impl OffloadSettings {
    /// The full size: 16,000 clients, an origin capped at 500.
    pub fn full() -> OffloadSettings {
        OffloadSettings {
            clients: 16_000,
            origin_cap: 500,
            pool_cap: None,
            origin: OriginKind::Builtin,
            connection_memory: 256 * 1024,
            interval: Duration::from_secs(5),
            ramp: Duration::from_secs(30),
            duration: Duration::from_secs(60),
            timeout: Duration::from_secs(5),
            sources: None,
            proxy_threads: 1,
            path: "/".to_owned(),
            direct: true,
            peers: Vec::new(),
            sample_every: Duration::from_secs(1),
        }
    }

    /// The quick run of `weir lab`: 2,000 clients, cap 62 (the same 32:1 ratio), 15 s a phase.
    pub fn quick() -> OffloadSettings {
        OffloadSettings {
            clients: 2_000,
            origin_cap: 62,
            interval: Duration::from_secs(2),
            ramp: Duration::from_secs(5),
            duration: Duration::from_secs(15),
            ..OffloadSettings::full()
        }
    }

    fn pool_cap(&self) -> u32 {
        self.pool_cap.unwrap_or(self.origin_cap)
    }

    /// From when every client has had a full interval after its start to be answered.
    fn steady_from(&self) -> Duration {
        self.ramp + self.interval + self.sample_every
    }

    /// Until the first clients send their last request and close (each stops after its
    /// last tick before `duration`, so closes spread over the last interval).
    fn steady_to(&self) -> Duration {
        self.duration.saturating_sub(self.interval)
    }

    /// Settings that cannot work are refused before anything starts.
    pub fn validate(&self) -> Result<(), LabError> {
        let invalid = |message: String| Err(LabError::Invalid(message));
        if self.clients == 0 {
            return invalid("--clients must be at least 1".into());
        }
        if self.origin_cap == 0 || self.pool_cap() == 0 {
            return invalid("--origin-cap and --pool-cap must be at least 1".into());
        }
        if self.pool_cap() > self.origin_cap {
            return invalid(format!(
                "--pool-cap {} is above --origin-cap {}: the origin would refuse weir's own \
                 connections",
                self.pool_cap(),
                self.origin_cap
            ));
        }
        if self.interval.is_zero() || self.sample_every.is_zero() {
            return invalid("--interval and the sampling period must be more than 0".into());
        }
        let needed = self.steady_from() + self.sample_every * 2 + self.interval;
        if self.duration < needed {
            return invalid(format!(
                "--duration {:?} is too short: every client needs the ramp ({:?}) and one \
                 interval ({:?}) to be answered, the steady window two samples, and the \
                 clients one more interval to finish; use at least {:?}",
                self.duration, self.ramp, self.interval, needed
            ));
        }
        if !self.path.starts_with('/') {
            return invalid(format!("--path {:?} must start with /", self.path));
        }
        Ok(())
    }
}

/// Which way the clients go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Direct,
    Weir,
    Peer(Peer),
}

impl Route {
    fn label(self) -> &'static str {
        match self {
            Route::Direct => "direct",
            Route::Weir => "through weir",
            Route::Peer(Peer::Haproxy) => "through haproxy",
            Route::Peer(Peer::Nginx) => "through nginx",
        }
    }
}

/// One phase's plan: the settings fitted to the machine.
struct Plan<'a> {
    settings: &'a OffloadSettings,
    clients: u32,
    sources: u8,
    nginx: Option<PathBuf>,
    /// The peers that are installed, with their programs and versions.
    peers: Vec<(Peer, PathBuf, String)>,
}

/// Runs the experiment (blocking) and returns its report.
pub fn run(lab: &mut Lab, settings: &OffloadSettings) -> Result<OffloadReport, LabError> {
    settings.validate()?;
    let fit = preflight::fit_offload(
        settings.clients,
        settings.pool_cap(),
        settings.sources,
        lab.open_files(),
        procfs::local_port_range(),
    )?;
    lab.notes.extend(fit.notes.iter().cloned());
    if let Some(note) = preflight::backlog_note(procfs::somaxconn()) {
        lab.note(note);
    }
    let (nginx, origin_name) = match settings.origin {
        OriginKind::Builtin => (None, "weir origin".to_owned()),
        OriginKind::Nginx => match lab.program(crate::peers::Peer::Nginx) {
            Some(program) => {
                let version = crate::peers::version(&program, crate::peers::Peer::Nginx);
                (Some(program), format!("nginx {version}"))
            }
            None => {
                lab.note(
                    "--origin nginx: nginx is not installed (apt-get install nginx, or \
                          --install); the built-in origin ran instead",
                );
                (None, "weir origin".to_owned())
            }
        },
    };
    let mut peers = Vec::new();
    for &peer in &settings.peers {
        match lab.program(peer) {
            Some(program) => {
                let version = crate::peers::version(&program, peer);
                peers.push((peer, program, version));
            }
            None => lab.note(format!(
                "--peers {}: not installed (apt-get install {}, or --install); the offload \
                 experiment ran without it",
                peer.name(),
                peer.package()
            )),
        }
    }
    let plan = Plan {
        settings,
        clients: fit.clients,
        sources: fit.sources,
        nginx,
        peers,
    };
    let report_settings = OffloadSettingsReport {
        clients: fit.clients,
        clients_requested: settings.clients,
        origin_cap: settings.origin_cap,
        pool_cap: settings.pool_cap(),
        origin: origin_name,
        connection_memory: if plan.nginx.is_some() {
            0
        } else {
            settings.connection_memory
        },
        interval_s: settings.interval.as_secs_f64(),
        ramp_s: settings.ramp.as_secs_f64(),
        duration_s: settings.duration.as_secs_f64(),
        sources: fit.sources,
        proxy_threads: settings.proxy_threads,
        path: settings.path.clone(),
        steady_from_s: settings.steady_from().as_secs_f64(),
        steady_to_s: settings.steady_to().as_secs_f64(),
    };
    let runtime = lab.runtime()?;
    let launcher = Launcher::new(&lab.supervisor, lab.weir.clone())?;
    let (direct, weir, peers) = runtime.block_on(async {
        let direct = if settings.direct {
            Some(phase(lab, &launcher, &plan, Route::Direct).await?)
        } else {
            None
        };
        let weir = phase(lab, &launcher, &plan, Route::Weir).await?;
        let mut peers = Vec::new();
        for (peer, _, version) in &plan.peers {
            peers.push(PeerPhase {
                name: peer.name().to_owned(),
                version: version.clone(),
                phase: phase(lab, &launcher, &plan, Route::Peer(*peer)).await?,
            });
        }
        Ok::<_, LabError>((direct, weir, peers))
    })?;
    let ratios = summary::offload_ratios(&report_settings, direct.as_ref(), &weir);
    let mut checks = summary::offload_checks(&report_settings, direct.as_ref(), &weir, &ratios);
    checks.extend(summary::offload_peer_checks(&weir, &peers));
    Ok(OffloadReport {
        settings: report_settings,
        direct,
        weir,
        peers,
        ratios,
        checks,
    })
}

/// The built-in origin's `/stats`, retried briefly (a capped origin may be full for a moment).
async fn origin_stats(port: u16) -> Option<StatsSnapshot> {
    for _ in 0..20 {
        if let Ok(response) = http::get(loopback(port), "/stats", Duration::from_secs(1)).await
            && response.status == 200
            && let Some(stats) = weir_origin::parse_stats_json(&response.body)
        {
            return Some(stats);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

async fn phase(
    lab: &Lab,
    launcher: &Launcher,
    plan: &Plan<'_>,
    route: Route,
) -> Result<PhaseReport, LabError> {
    let settings = plan.settings;
    lab.say(&format!(
        "offload, {}: {} clients, origin capped at {}",
        route.label(),
        plan.clients,
        settings.origin_cap
    ));
    let mut running = start(launcher, plan, route).await?;
    let builtin = plan.nginx.is_none();
    let stats_before = if builtin {
        origin_stats(running.origin_port).await
    } else {
        None
    };
    let origin_pids = process_tree(&running.origin);
    let proxy_pids = running
        .proxy
        .as_ref()
        .map_or_else(Vec::new, |proxy| process_tree(&proxy.child));
    let origin_cpu_before = tree_cpu_seconds(&origin_pids);
    let proxy_cpu_before = tree_cpu_seconds(&proxy_pids);
    let proxy_memory_start = tree_memory_kib(&proxy_pids).0;

    // Read while the machine holds few sockets (its cost grows with every socket).
    let not_connections = procfs::NotConnections::read();
    let load = Arc::new(LoadSettings {
        target: running.target,
        clients: plan.clients,
        interval: settings.interval,
        ramp: settings.ramp,
        duration: settings.duration,
        timeout: settings.timeout,
        sources: plan.sources,
        path: settings.path.clone(),
    });
    let counters = Arc::new(LoadCounters::default());
    let start = Instant::now() + Duration::from_millis(50);
    let clients = tokio::spawn(crate::clients::run(
        Arc::clone(&load),
        Arc::clone(&counters),
        start,
    ));
    let probe = Probe {
        origin_pids: &origin_pids,
        origin_cpu_before,
        not_connections,
        proxy_pids: &proxy_pids,
        admin: running.proxy.as_ref().and_then(|proxy| proxy.admin),
    };
    let samples = sample(lab, route, &load, &counters, &probe, start, settings).await;
    clients
        .await
        .map_err(|e| LabError::io("the clients' task", std::io::Error::other(e)))?;
    let elapsed = start.elapsed().as_secs_f64();

    let origin_cpu = tree_cpu_seconds(&origin_pids) - origin_cpu_before;
    let (_, origin_hwm) = tree_memory_kib(&origin_pids);
    let clients = client_summary(&counters, &samples, settings, elapsed);
    let mut proxy = match running.proxy.take() {
        // The proxy stops first, so its connections to the origin close before the
        // origin's counters are read.
        Some(running) => Some(
            finish_proxy(
                running,
                &proxy_pids,
                proxy_cpu_before,
                proxy_memory_start,
                &samples,
            )
            .await,
        ),
        None => None,
    };
    let stats_after = if builtin {
        origin_stats(running.origin_port).await
    } else {
        None
    };
    running.origin.stop();
    let origin = origin_summary(
        stats_before.as_ref(),
        stats_after.as_ref(),
        &samples,
        origin_hwm,
        origin_cpu,
    );
    if let (Route::Peer(_), Some(proxy)) = (route, proxy.as_mut()) {
        // A peer has no gauges: its side is read from the clients and the origin.
        proxy.client_connections_peak = clients.connected_peak;
        proxy.upstream_connections_peak = origin.connections_peak;
        proxy.upstream_connections_created = origin.connections_accepted.unwrap_or(0);
        proxy.responses_5xx = clients.errors.status;
    }
    Ok(PhaseReport {
        clients,
        origin,
        proxy,
        samples,
    })
}

/// The proxy's figures at the end of a phase (weir's gauges, for weir); then it is stopped.
async fn finish_proxy(
    mut running: RunningProxy,
    pids: &[u32],
    cpu_before: f64,
    memory_start_kib: u64,
    samples: &[Sample],
) -> ProxySummary {
    let page = match running.admin {
        Some(admin) => weir_metrics(admin).await,
        None => String::new(),
    };
    let summary = ProxySummary {
        cpu_s: tree_cpu_seconds(pids) - cpu_before,
        memory_peak_kib: tree_memory_kib(pids).1,
        memory_start_kib,
        client_connections_peak: peak(samples, |s| s.proxy_clients),
        upstream_connections_peak: peak(samples, |s| s.proxy_upstream),
        upstream_connections_created: metric(
            &page,
            "weir_upstream_connections_created_total",
            None,
        ),
        responses_5xx: metric(&page, "weir_requests_total", Some(("class", "5xx"))),
    };
    running.child.stop();
    summary
}

/// What the clients saw, from their counters and the samples.
fn client_summary(
    counters: &LoadCounters,
    samples: &[Sample],
    settings: &OffloadSettings,
    elapsed_s: f64,
) -> ClientSummary {
    use std::sync::atomic::Ordering;
    ClientSummary {
        held_peak: counters.held_peak(),
        connected_peak: counters.connected_peak(),
        connections_opened: counters.connects.load(Ordering::Relaxed),
        requests_ok: counters.ok.load(Ordering::Relaxed),
        requests_per_s: summary::steady_rate(
            samples,
            settings.steady_from().as_secs_f64(),
            settings.steady_to().as_secs_f64(),
        ),
        errors: counters.errors(),
        connect_ms: counters.connect_latency(),
        response_ms: counters.response_latency(),
        elapsed_s,
    }
}

fn metric(page: &str, name: &str, label: Option<(&str, &str)>) -> u64 {
    metrics::sum(page, name, label).unwrap_or(0.0).max(0.0) as u64
}

fn peak(samples: &[Sample], field: impl Fn(&Sample) -> Option<u64>) -> u64 {
    samples.iter().filter_map(field).max().unwrap_or(0)
}

/// The origin's figures: its own counters where it has them (the built-in origin), the
/// sampled count of its connections otherwise.
fn origin_summary(
    before: Option<&StatsSnapshot>,
    after: Option<&StatsSnapshot>,
    samples: &[Sample],
    memory_peak_kib: u64,
    cpu_s: f64,
) -> OriginSummary {
    let sampled = peak(samples, |s| Some(s.origin_connections));
    match (before, after) {
        (Some(before), Some(after)) => OriginSummary {
            // The origin's exact peak over its life (the lab's probes hold at most one
            // connection, while nothing else is open). A sample may count one more: a
            // connection accepted only to be reset at the cap.
            connections_peak: after.connections_peak,
            peak_source: "origin counter".to_owned(),
            connections_refused: Some(after.connections_refused - before.connections_refused),
            // Less the closing /stats probe's own connection and request.
            connections_accepted: Some(
                (after.connections_accepted - before.connections_accepted).saturating_sub(1),
            ),
            requests: Some((after.requests - before.requests).saturating_sub(1)),
            memory_peak_kib,
            cpu_s,
        },
        _ => OriginSummary {
            connections_peak: sampled,
            peak_source: "sampled".to_owned(),
            connections_refused: None,
            connections_accepted: None,
            requests: None,
            memory_peak_kib,
            cpu_s,
        },
    }
}
