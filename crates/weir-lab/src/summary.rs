//! Ratios and checks from measured phases: plain functions over the model, so every figure
//! the tables print is computed once, here, and unit-tested.

use crate::model::{
    Check, OffloadRatios, OffloadSettingsReport, PeerPhase, PhaseReport, ProxySummary, Sample,
    TlsPhase,
};

/// `a ÷ b`, or `None` when `b` is not positive or either is not finite.
pub fn ratio(a: f64, b: f64) -> Option<f64> {
    (b > 0.0 && a.is_finite() && b.is_finite()).then(|| a / b)
}

/// `1 − after ÷ before` (0.7 = 70 % less), or `None` when `before` is not positive.
pub fn reduction(before: f64, after: f64) -> Option<f64> {
    ratio(after, before).map(|share| 1.0 - share)
}

/// The samples taken in `[from_s, to_s]`.
fn window(samples: &[Sample], from_s: f64, to_s: f64) -> impl Iterator<Item = &Sample> {
    samples
        .iter()
        .filter(move |sample| sample.t_s >= from_s && sample.t_s <= to_s)
}

/// Mean requests per second answered between the first and the last sample of the window;
/// 0 with fewer than two samples in it.
pub fn steady_rate(samples: &[Sample], from_s: f64, to_s: f64) -> f64 {
    let mut inside = window(samples, from_s, to_s);
    let Some(first) = inside.next() else {
        return 0.0;
    };
    let Some(last) = inside.last() else {
        return 0.0;
    };
    ratio(
        last.requests_ok.saturating_sub(first.requests_ok) as f64,
        last.t_s - first.t_s,
    )
    .unwrap_or(0.0)
}

/// Median over the window of client connections held ÷ origin connections (samples where
/// the origin had none are left out).
pub fn steady_offload(samples: &[Sample], from_s: f64, to_s: f64) -> Option<f64> {
    let mut ratios: Vec<f64> = window(samples, from_s, to_s)
        .filter_map(|sample| ratio(sample.clients_held as f64, sample.origin_connections as f64))
        .collect();
    if ratios.is_empty() {
        return None;
    }
    ratios.sort_by(f64::total_cmp);
    Some(ratios[(ratios.len() - 1) / 2])
}

/// The paper's figures from the two phases.
pub fn offload_ratios(
    settings: &OffloadSettingsReport,
    direct: Option<&PhaseReport>,
    weir: &PhaseReport,
) -> OffloadRatios {
    let offload = ratio(
        weir.clients.held_peak as f64,
        weir.origin.connections_peak as f64,
    );
    let offload_steady =
        steady_offload(&weir.samples, settings.steady_from_s, settings.steady_to_s);
    let Some(direct) = direct else {
        return OffloadRatios {
            offload,
            offload_steady,
            ..OffloadRatios::default()
        };
    };
    let gain = |weir: f64, direct: f64| ratio(weir, direct);
    // Latency: above 1 means connecting through weir is faster.
    let latency_gain = |direct: f64, weir: f64| ratio(direct, weir);
    let connects_measured =
        direct.clients.connect_ms.count > 0 && weir.clients.connect_ms.count > 0;
    OffloadRatios {
        offload,
        offload_steady,
        capacity_gain: gain(
            weir.clients.held_peak as f64,
            direct.clients.held_peak as f64,
        ),
        request_rate_gain: gain(weir.clients.requests_per_s, direct.clients.requests_per_s),
        connect_p50_gain: latency_gain(direct.clients.connect_ms.p50, weir.clients.connect_ms.p50)
            .filter(|_| connects_measured),
        connect_p99_gain: latency_gain(direct.clients.connect_ms.p99, weir.clients.connect_ms.p99)
            .filter(|_| connects_measured),
        origin_memory_reduction: reduction(
            direct.origin.memory_peak_kib as f64,
            weir.origin.memory_peak_kib as f64,
        ),
    }
}

/// The offload experiment's pass/fail statements. Through weir: no client error, the origin
/// never above its cap, every client held, offload at least clients ÷ cap. Direct, with more
/// clients than the cap: errors must appear (else the origin's cap did not bind and the
/// comparison shows nothing).
pub fn offload_checks(
    settings: &OffloadSettingsReport,
    direct: Option<&PhaseReport>,
    weir: &PhaseReport,
    ratios: &OffloadRatios,
) -> Vec<Check> {
    let clients = u64::from(settings.clients);
    let cap = u64::from(settings.origin_cap);
    let errors = weir.clients.errors.total();
    let refused = weir.origin.connections_refused.unwrap_or(0);
    let mut checks = vec![
        Check {
            name: "through weir: no client errors".to_owned(),
            passed: errors == 0,
            detail: format!("{errors} errors"),
        },
        Check {
            name: "through weir: origin never above its cap".to_owned(),
            passed: weir.origin.connections_peak <= cap && refused == 0,
            detail: format!(
                "origin peak {} ({}) ≤ cap {cap}; {refused} refused",
                weir.origin.connections_peak, weir.origin.peak_source
            ),
        },
        Check {
            name: "through weir: every client held".to_owned(),
            passed: weir.clients.held_peak >= clients,
            detail: format!("{} of {clients} held at once", weir.clients.held_peak),
        },
    ];
    let wanted = clients as f64 / cap.max(1) as f64;
    checks.push(Check {
        name: "through weir: offload ratio at least clients ÷ cap".to_owned(),
        passed: ratios.offload.is_some_and(|offload| offload >= wanted),
        detail: format!(
            "{} ≥ {wanted:.1}:1",
            ratios
                .offload
                .map_or("-".to_owned(), |r| format!("{r:.1}:1")),
        ),
    });
    if let Some(direct) = direct.filter(|_| clients > cap) {
        let errors = direct.clients.errors.total();
        checks.push(Check {
            name: "direct: errors past the origin's cap".to_owned(),
            passed: errors > 0,
            detail: format!(
                "{errors} errors; {} of {clients} held at most",
                direct.clients.held_peak
            ),
        });
    }
    checks
}

/// The targets against the peers (`--peers`): weir's peak memory at most nginx's, and its
/// CPU at most the better peer's, over the same clients.
pub fn offload_peer_checks(weir: &PhaseReport, peers: &[PeerPhase]) -> Vec<Check> {
    let Some(ours) = &weir.proxy else {
        return Vec::new();
    };
    let measured: Vec<(&str, &ProxySummary)> = peers
        .iter()
        .filter_map(|peer| Some((peer.name.as_str(), peer.phase.proxy.as_ref()?)))
        .collect();
    let mut checks = Vec::new();
    if let Some((_, nginx)) = measured.iter().find(|(name, _)| *name == "nginx") {
        checks.push(Check {
            name: "weir: peak memory at most nginx's".to_owned(),
            passed: ours.memory_peak_kib <= nginx.memory_peak_kib,
            detail: format!(
                "{:.1} MiB ≤ {:.1} MiB",
                ours.memory_peak_kib as f64 / 1024.0,
                nginx.memory_peak_kib as f64 / 1024.0
            ),
        });
    }
    let best = measured
        .iter()
        .min_by(|a, b| a.1.cpu_s.total_cmp(&b.1.cpu_s));
    if let Some((name, best)) = best {
        checks.push(Check {
            name: "weir: CPU at most the better peer's".to_owned(),
            passed: ours.cpu_s <= best.cpu_s,
            detail: format!("{:.2} s ≤ {name}'s {:.2} s", ours.cpu_s, best.cpu_s),
        });
    }
    checks
}

/// The TLS experiment's statements: both sides served every request without error, and the
/// origin accepted far fewer connections behind weir than it did serving HTTPS itself.
pub fn tls_checks(direct: &TlsPhase, offloaded: &TlsPhase) -> Vec<Check> {
    let phase = |name: &str, phase: &TlsPhase| Check {
        name: format!("{name}: no client errors"),
        passed: phase.errors == 0 && phase.requests_ok > 0,
        detail: format!("{} ok, {} errors", phase.requests_ok, phase.errors),
    };
    vec![
        phase("origin serving HTTPS", direct),
        phase("origin behind weir", offloaded),
    ]
}

#[cfg(test)]
pub(crate) mod tests;
