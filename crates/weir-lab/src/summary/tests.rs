use super::*;
use crate::model::{ClientSummary, ErrorCounts, Latency, OriginSummary};

pub(crate) fn settings(clients: u32, cap: u32) -> OffloadSettingsReport {
    OffloadSettingsReport {
        clients,
        clients_requested: clients,
        origin_cap: cap,
        pool_cap: cap,
        origin: "weir origin".into(),
        connection_memory: 256 * 1024,
        interval_s: 5.0,
        ramp_s: 30.0,
        duration_s: 60.0,
        sources: 8,
        proxy_threads: 1,
        path: "/".into(),
        steady_from_s: 36.0,
        steady_to_s: 55.0,
    }
}

pub(crate) fn sample(t_s: f64, held: u64, origin: u64, requests_ok: u64) -> Sample {
    Sample {
        t_s,
        clients_started: held,
        clients_connected: held,
        clients_held: held,
        origin_connections: origin,
        proxy_clients: None,
        proxy_upstream: None,
        requests_ok,
        errors: 0,
        connect_ms_p99: Some(0.2),
        origin_rss_kib: 1024,
        origin_cpu_s: t_s / 100.0,
        proxy_rss_kib: None,
    }
}

pub(crate) struct PhaseFigures {
    pub held: u64,
    pub origin_peak: u64,
    pub rate: f64,
    pub connect: (f64, f64),
    pub memory_kib: u64,
    pub errors: u64,
    pub refused: u64,
}

pub(crate) fn phase(figures: PhaseFigures) -> PhaseReport {
    PhaseReport {
        clients: ClientSummary {
            held_peak: figures.held,
            connected_peak: figures.held,
            connections_opened: figures.held,
            requests_ok: 1000,
            requests_per_s: figures.rate,
            errors: ErrorCounts {
                closed: figures.errors,
                ..ErrorCounts::default()
            },
            connect_ms: Latency {
                count: 10,
                p50: figures.connect.0,
                p99: figures.connect.1,
                max: figures.connect.1,
            },
            response_ms: Latency::default(),
            elapsed_s: 60.0,
        },
        origin: OriginSummary {
            connections_peak: figures.origin_peak,
            peak_source: "origin counter".into(),
            connections_refused: Some(figures.refused),
            connections_accepted: Some(figures.origin_peak),
            requests: Some(1000),
            memory_peak_kib: figures.memory_kib,
            cpu_s: 1.0,
        },
        proxy: None,
        samples: vec![
            sample(30.0, figures.held, figures.origin_peak, 0),
            sample(40.0, figures.held, figures.origin_peak, 100),
            sample(50.0, figures.held, figures.origin_peak, 300),
            sample(60.0, figures.held, figures.origin_peak, 600),
        ],
    }
}

pub(crate) fn direct() -> PhaseReport {
    phase(PhaseFigures {
        held: 500,
        origin_peak: 500,
        rate: 100.0,
        connect: (0.1, 4.0),
        memory_kib: 200_000,
        errors: 7_000,
        refused: 7_000,
    })
}

pub(crate) fn weir() -> PhaseReport {
    phase(PhaseFigures {
        held: 16_000,
        origin_peak: 40,
        rate: 3_200.0,
        connect: (0.2, 2.0),
        memory_kib: 20_000,
        errors: 0,
        refused: 0,
    })
}

#[test]
fn ratio_and_reduction_refuse_nonsense() {
    assert_eq!(ratio(10.0, 4.0), Some(2.5));
    assert_eq!(ratio(1.0, 0.0), None);
    assert_eq!(ratio(f64::NAN, 1.0), None);
    assert_eq!(reduction(10.0, 3.0), Some(0.7));
    assert_eq!(reduction(0.0, 3.0), None);
    assert!(reduction(10.0, 12.0).is_some_and(|r| r < 0.0));
}

#[test]
fn steady_figures_use_only_the_window() {
    let samples = vec![
        sample(1.0, 10, 5, 0),
        sample(2.0, 100, 4, 50),
        sample(3.0, 100, 2, 150),
        sample(4.0, 100, 10, 350),
        sample(5.0, 0, 0, 400),
    ];
    // From t=2 to t=4: 300 requests in 2 s.
    assert_eq!(steady_rate(&samples, 2.0, 4.0), 150.0);
    // Ratios 25, 50, 10 → median 25.
    assert_eq!(steady_offload(&samples, 2.0, 4.0), Some(25.0));
    assert_eq!(
        steady_rate(&samples, 4.0, 4.0),
        0.0,
        "one sample is no rate"
    );
    assert_eq!(
        steady_offload(&samples, 5.0, 6.0),
        None,
        "no origin connection"
    );
}

#[test]
fn the_papers_figures_from_two_phases() {
    let settings = settings(16_000, 500);
    let ratios = offload_ratios(&settings, Some(&direct()), &weir());
    assert_eq!(ratios.offload, Some(400.0));
    assert_eq!(ratios.offload_steady, Some(400.0));
    assert_eq!(ratios.capacity_gain, Some(32.0));
    assert_eq!(ratios.request_rate_gain, Some(32.0));
    assert_eq!(ratios.connect_p50_gain, Some(0.5));
    assert_eq!(ratios.connect_p99_gain, Some(2.0));
    assert_eq!(ratios.origin_memory_reduction, Some(0.9));
    let alone = offload_ratios(&settings, None, &weir());
    assert_eq!(alone.offload, Some(400.0));
    assert_eq!(alone.capacity_gain, None);
}

#[test]
fn checks_pass_when_weir_holds_every_client_under_the_cap() {
    let settings = settings(16_000, 500);
    let (direct, weir) = (direct(), weir());
    let ratios = offload_ratios(&settings, Some(&direct), &weir);
    let checks = offload_checks(&settings, Some(&direct), &weir, &ratios);
    assert_eq!(checks.len(), 5);
    assert!(checks.iter().all(|check| check.passed), "{checks:#?}");
}

#[test]
fn each_check_fails_on_its_own_fault() {
    let settings = settings(16_000, 500);
    let failed = |weir: &PhaseReport, direct: &PhaseReport| -> Vec<String> {
        let ratios = offload_ratios(&settings, Some(direct), weir);
        offload_checks(&settings, Some(direct), weir, &ratios)
            .into_iter()
            .filter(|check| !check.passed)
            .map(|check| check.name)
            .collect()
    };
    let mut errors = weir();
    errors.clients.errors.timeout = 1;
    assert_eq!(
        failed(&errors, &direct()),
        ["through weir: no client errors"]
    );

    let mut over = weir();
    over.origin.connections_peak = 501;
    assert_eq!(
        failed(&over, &direct()),
        [
            "through weir: origin never above its cap",
            "through weir: offload ratio at least clients ÷ cap"
        ]
    );
    let mut refused = weir();
    refused.origin.connections_refused = Some(1);
    assert_eq!(
        failed(&refused, &direct()),
        ["through weir: origin never above its cap"]
    );

    let mut short = weir();
    short.clients.held_peak = 15_999;
    short.origin.connections_peak = 500;
    assert_eq!(
        failed(&short, &direct()),
        [
            "through weir: every client held",
            "through weir: offload ratio at least clients ÷ cap"
        ]
    );

    let mut no_errors = direct();
    no_errors.clients.errors = ErrorCounts::default();
    assert_eq!(
        failed(&weir(), &no_errors),
        ["direct: errors past the origin's cap"]
    );
}

#[test]
fn no_direct_check_when_the_clients_fit_the_cap() {
    let settings = settings(100, 500);
    let mut weir = weir();
    weir.clients.held_peak = 100;
    let ratios = offload_ratios(&settings, Some(&direct()), &weir);
    let checks = offload_checks(&settings, Some(&direct()), &weir, &ratios);
    assert!(checks.iter().all(|check| !check.name.starts_with("direct")));
}

#[test]
fn tls_checks_need_answers_and_no_errors() {
    let ok = TlsPhase {
        requests_ok: 10,
        errors: 0,
        requests_per_s: 1.0,
        latency_ms: Latency::default(),
        handshakes_full: 10,
        handshakes_resumed: 0,
        origin_cpu_s: 1.0,
        origin_memory_peak_kib: 1,
        origin_connections_accepted: 10,
        proxy_cpu_s: None,
        proxy_memory_peak_kib: None,
    };
    assert!(tls_checks(&ok, &ok).iter().all(|check| check.passed));
    let failing = TlsPhase {
        errors: 1,
        ..ok.clone()
    };
    let silent = TlsPhase {
        requests_ok: 0,
        ..ok.clone()
    };
    assert!(!tls_checks(&failing, &ok)[0].passed);
    assert!(!tls_checks(&ok, &silent)[1].passed);
}

fn proxied(mut phase: PhaseReport, cpu_s: f64, memory_peak_kib: u64) -> PhaseReport {
    phase.proxy = Some(ProxySummary {
        cpu_s,
        memory_peak_kib,
        memory_start_kib: 10_000,
        client_connections_peak: 16_000,
        upstream_connections_peak: 40,
        upstream_connections_created: 40,
        responses_5xx: 0,
    });
    phase
}

pub(crate) fn peer(name: &str, cpu_s: f64, memory_peak_kib: u64) -> PeerPhase {
    PeerPhase {
        name: name.to_owned(),
        version: "1.0".to_owned(),
        phase: proxied(weir(), cpu_s, memory_peak_kib),
    }
}

#[test]
fn peer_checks_hold_weir_to_nginx_memory_and_the_better_cpu() {
    let ours = proxied(weir(), 7.0, 30_000);
    let peers = [peer("haproxy", 6.5, 40_000), peer("nginx", 9.0, 32_000)];
    let checks = offload_peer_checks(&ours, &peers);
    assert_eq!(checks.len(), 2);
    assert!(checks[0].passed, "{:?}", checks[0]);
    assert!(checks[0].name.contains("nginx"));
    assert!(!checks[1].passed, "7.0 s is above haproxy's 6.5 s");
    assert!(checks[1].detail.contains("haproxy"), "{}", checks[1].detail);
    // No peers ran: no such checks.
    assert!(offload_peer_checks(&ours, &[]).is_empty());
    // Memory per client connection counts from the start.
    let proxy = ours.proxy.as_ref().expect("set");
    assert_eq!(proxy.memory_per_client_kib(), Some(20_000.0 / 16_000.0));
}
