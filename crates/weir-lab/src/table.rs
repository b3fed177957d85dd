//! The lab's tables as text: pure functions from the model to what `weir lab` prints.

use std::fmt::Write;

use crate::model::{
    Check, LabReport, Latency, OffloadReport, PhaseReport, ProxySummary, SuiteLabReport, TlsPhase,
    TlsReport,
};
use crate::summary::ratio;

/// A grid of cells; the first column is left-aligned, the others right-aligned.
#[derive(Debug, Default)]
pub struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with `header` as its first row.
    pub fn new(header: &[&str]) -> Table {
        Table {
            rows: vec![header.iter().map(|cell| (*cell).to_owned()).collect()],
        }
    }

    /// Appends a row; rows may have fewer cells than the widest.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table, two spaces between columns, each line indented by `indent`.
    pub fn render(&self, indent: &str) -> String {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..columns)
            .map(|column| {
                self.rows
                    .iter()
                    .filter_map(|row| row.get(column))
                    .map(|cell| cell.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for row in &self.rows {
            let mut line = indent.to_owned();
            for (column, width) in widths.iter().enumerate() {
                let cell = row.get(column).map_or("", String::as_str);
                let pad = width - cell.chars().count();
                if column == 0 {
                    line.push_str(cell);
                    line.push_str(&" ".repeat(pad));
                } else {
                    line.push_str("  ");
                    line.push_str(&" ".repeat(pad));
                    line.push_str(cell);
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// `16000` → `16,000`.
pub fn thousands(value: u64) -> String {
    let digits = value.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// A rate or count with thousands separators and `decimals` places.
pub fn number(value: f64, decimals: usize) -> String {
    if !value.is_finite() {
        return "-".to_owned();
    }
    let text = format!("{:.*}", decimals, value.abs());
    let (whole, fraction) = text.split_once('.').unwrap_or((&text, ""));
    let sign = if value < 0.0 && !text.trim_matches(['0', '.']).is_empty() {
        "-"
    } else {
        ""
    };
    let whole = thousands(whole.parse().unwrap_or(0));
    if fraction.is_empty() {
        format!("{sign}{whole}")
    } else {
        format!("{sign}{whole}.{fraction}")
    }
}

/// `32.04` → `32.0×`; `None` → `-`.
pub fn times(value: Option<f64>) -> String {
    value.map_or("-".to_owned(), |value| format!("{}×", number(value, 1)))
}

/// `Some(432.4)` → `432:1` (one decimal below 100).
pub fn offload(value: Option<f64>) -> String {
    match value {
        Some(value) if value >= 100.0 => format!("{}:1", number(value, 0)),
        Some(value) => format!("{value:.1}:1"),
        None => "-".to_owned(),
    }
}

/// A reduction as a change: `Some(0.7)` → `−70 %`, `Some(-0.2)` → `+20 %`.
pub fn change(reduction: Option<f64>) -> String {
    match reduction {
        Some(reduction) if reduction >= 0.0 => format!("−{:.0} %", reduction * 100.0),
        Some(reduction) => format!("+{:.0} %", -reduction * 100.0),
        None => "-".to_owned(),
    }
}

/// KiB as MiB with one decimal.
pub fn mib(kib: u64) -> String {
    format!("{} MiB", number(kib as f64 / 1024.0, 1))
}

fn latency_pair(latency: &Latency) -> String {
    if latency.count == 0 {
        return "-".to_owned();
    }
    format!("{} / {}", millis(latency.p50), millis(latency.p99))
}

/// Milliseconds with three significant-ish places.
pub fn millis(value: f64) -> String {
    if value >= 100.0 {
        number(value, 0)
    } else if value >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.3}")
    }
}

/// A latency gain (direct ÷ weir) in words: `2.1× faster`, `1.9× slower`.
pub fn speed(gain: Option<f64>) -> String {
    match gain {
        Some(gain) if gain >= 1.0 => format!("{} faster", times(Some(gain))),
        Some(gain) if gain > 0.0 => format!("{} slower", times(Some(1.0 / gain))),
        _ => "-".to_owned(),
    }
}

/// The checks, one a line.
pub fn checks(checks: &[Check]) -> String {
    let mut out = String::new();
    for check in checks {
        let verdict = if check.passed { "PASS" } else { "FAIL" };
        let _ = writeln!(out, "  {verdict}  {} ({})", check.name, check.detail);
    }
    out
}

fn seconds(value: f64) -> String {
    let rounded = value.round();
    if (value - rounded).abs() < 1e-9 {
        format!("{rounded:.0} s")
    } else {
        format!("{value} s")
    }
}

/// The offload experiment's table, its ratios and its checks.
pub fn offload_text(report: &OffloadReport) -> String {
    offload_table(report) + &checks(&report.checks)
}

/// The offload experiment's table and ratios, without the checks.
pub fn offload_table(report: &OffloadReport) -> String {
    let settings = &report.settings;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "weir lab offload: {} slow keep-alive clients, GET {} every {} each, ramp {}, {} per phase",
        thousands(u64::from(settings.clients)),
        settings.path,
        seconds(settings.interval_s),
        seconds(settings.ramp_s),
        seconds(settings.duration_s),
    );
    let memory = if settings.connection_memory > 0 {
        format!(", {} KiB per connection", settings.connection_memory / 1024)
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        "origin: {} capped at {} connections{memory}; weir: pool cap {}, {} thread(s); {} source addresses",
        settings.origin,
        thousands(u64::from(settings.origin_cap)),
        thousands(u64::from(settings.pool_cap)),
        settings.proxy_threads,
        settings.sources,
    );
    out.push('\n');
    out.push_str(&offload_grid(report).render(""));
    out.push('\n');
    out.push_str(&offload_footer(report));
    out
}

/// The offload table proper: a row per figure, direct, through weir and through each peer.
#[allow(
    clippy::too_many_lines,
    reason = "one row per figure, in the order the table prints them"
)]
fn offload_grid(report: &OffloadReport) -> Table {
    let direct = report.direct.as_ref();
    let cell = |f: &dyn Fn(&PhaseReport) -> String| direct.map_or("(not run)".to_owned(), f);
    // weir first, then the peers: the same clients through each proxy.
    let proxied: Vec<&PhaseReport> = std::iter::once(&report.weir)
        .chain(report.peers.iter().map(|peer| &peer.phase))
        .collect();
    let each = |f: &dyn Fn(&PhaseReport) -> String| proxied.iter().map(|p| f(p)).collect();
    let ratios = &report.ratios;
    let mut header = vec![
        "".to_owned(),
        "direct".to_owned(),
        "through weir".to_owned(),
    ];
    header.extend(
        report
            .peers
            .iter()
            .map(|peer| format!("through {}", peer.name)),
    );
    header.push("weir vs direct".to_owned());
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut table = Table::new(&header);
    let mut row = |name: &str, direct: String, proxied: Vec<String>, versus: String| {
        let mut cells = vec![name.to_owned(), direct];
        cells.extend(proxied);
        cells.push(versus);
        table.row(cells);
    };
    row(
        "client connections held without errors, peak",
        cell(&|p| thousands(p.clients.held_peak)),
        each(&|p| thousands(p.clients.held_peak)),
        times(ratios.capacity_gain),
    );
    row(
        "connections open on the origin, peak",
        cell(&|p| thousands(p.origin.connections_peak)),
        each(&|p| thousands(p.origin.connections_peak)),
        String::new(),
    );
    let settings = &report.settings;
    row(
        "offload ratio (clients : origin), peak / steady",
        cell(&|_| "1:1".to_owned()),
        each(&|p| {
            let r = crate::summary::offload_ratios(settings, None, p);
            format!("{} / {}", offload(r.offload), offload(r.offload_steady))
        }),
        String::new(),
    );
    row(
        "requests/s served (steady)",
        cell(&|p| number(p.clients.requests_per_s, 1)),
        each(&|p| number(p.clients.requests_per_s, 1)),
        times(ratios.request_rate_gain),
    );
    row(
        "connection setup ms, p50 / p99",
        cell(&|p| latency_pair(&p.clients.connect_ms)),
        each(&|p| latency_pair(&p.clients.connect_ms)),
        format!(
            "{} / {}",
            speed(ratios.connect_p50_gain),
            speed(ratios.connect_p99_gain)
        ),
    );
    row(
        "response ms, p50 / p99",
        cell(&|p| latency_pair(&p.clients.response_ms)),
        each(&|p| latency_pair(&p.clients.response_ms)),
        String::new(),
    );
    row(
        "client errors",
        cell(&|p| thousands(p.clients.errors.total())),
        each(&|p| thousands(p.clients.errors.total())),
        String::new(),
    );
    row(
        "origin memory, peak (VmHWM)",
        cell(&|p| mib(p.origin.memory_peak_kib)),
        each(&|p| mib(p.origin.memory_peak_kib)),
        change(ratios.origin_memory_reduction),
    );
    row(
        "origin CPU s",
        cell(&|p| format!("{:.2}", p.origin.cpu_s)),
        each(&|p| format!("{:.2}", p.origin.cpu_s)),
        String::new(),
    );
    let proxy =
        |f: &dyn Fn(&ProxySummary) -> String| each(&|p| p.proxy.as_ref().map_or("—".to_owned(), f));
    row(
        "proxy CPU s",
        cell(&|_| "—".to_owned()),
        proxy(&|p| format!("{:.2}", p.cpu_s)),
        String::new(),
    );
    row(
        "proxy memory, start / peak (VmHWM)",
        cell(&|_| "—".to_owned()),
        proxy(&|p| format!("{} / {}", mib(p.memory_start_kib), mib(p.memory_peak_kib))),
        String::new(),
    );
    row(
        "proxy memory per client connection",
        cell(&|_| "—".to_owned()),
        proxy(&|p| {
            p.memory_per_client_kib()
                .map_or("—".to_owned(), |kib| format!("{kib:.2} KiB"))
        }),
        String::new(),
    );
    table
}

/// Errors by kind, the origin's refusals, weir's pool.
fn offload_footer(report: &OffloadReport) -> String {
    let (weir, direct) = (&report.weir, report.direct.as_ref());
    let mut out = String::new();
    let errors = |phase: &PhaseReport| {
        let e = &phase.clients.errors;
        format!(
            "connect {}, closed/reset {}, status {}, timeout {}, malformed {}",
            e.connect, e.closed, e.status, e.timeout, e.malformed
        )
    };
    if let Some(direct) = direct {
        let _ = writeln!(out, "direct errors by kind: {}", errors(direct));
        if let Some(refused) = direct.origin.connections_refused {
            let _ = writeln!(
                out,
                "direct: the origin reset {} connections past its cap",
                thousands(refused)
            );
        }
    }
    if let Some(proxy) = &weir.proxy {
        let _ = writeln!(
            out,
            "through weir: {} origin connections created in all, {} open at most; {} requests per origin connection; {} 5xx answers",
            thousands(proxy.upstream_connections_created),
            thousands(proxy.upstream_connections_peak),
            number(
                ratio(
                    weir.clients.requests_ok as f64,
                    proxy.upstream_connections_created as f64
                )
                .unwrap_or(0.0),
                0
            ),
            thousands(proxy.responses_5xx),
        );
    }
    out
}

/// The TLS experiment's table and checks.
pub fn tls_text(report: &TlsReport) -> String {
    tls_table(report) + "\n" + &checks(&report.checks)
}

/// The TLS experiment's table, without the checks.
pub fn tls_table(report: &TlsReport) -> String {
    let settings = &report.settings;
    let mut out = String::new();
    let handshakes = if settings.resumption {
        "resumption offered"
    } else {
        "full handshakes only"
    };
    let _ = writeln!(
        out,
        "weir lab tls: {} clients, each one request a second on a new connection ({handshakes}, {}), GET {}, {} per side",
        thousands(u64::from(settings.clients)),
        settings.certificate,
        settings.path,
        seconds(settings.duration_s),
    );
    out.push('\n');
    let (a, b) = (&report.direct, &report.offloaded);
    let mut table = Table::new(&[
        "",
        "origin serves HTTPS",
        "origin behind weir (TLS at weir)",
        "change",
    ]);
    let both = |f: &dyn Fn(&TlsPhase) -> String| [f(a), f(b)];
    let mut row = |name: &str, cells: [String; 2], change: String| {
        let [left, right] = cells;
        table.row(vec![name.to_owned(), left, right, change]);
    };
    row(
        "requests ok / errors",
        both(&|p| format!("{} / {}", thousands(p.requests_ok), thousands(p.errors))),
        String::new(),
    );
    row(
        "requests/s",
        both(&|p| number(p.requests_per_s, 1)),
        String::new(),
    );
    row(
        "latency ms, p50 / p99",
        both(&|p| latency_pair(&p.latency_ms)),
        String::new(),
    );
    row(
        "TLS handshakes full / resumed (client side)",
        both(&|p| {
            format!(
                "{} / {}",
                thousands(p.handshakes_full),
                thousands(p.handshakes_resumed)
            )
        }),
        String::new(),
    );
    row(
        "origin CPU s",
        both(&|p| format!("{:.2}", p.origin_cpu_s)),
        format!("{} (paper: −70 %)", change(report.origin_cpu_reduction)),
    );
    row(
        "origin memory, peak (VmHWM)",
        both(&|p| mib(p.origin_memory_peak_kib)),
        format!("{} (paper: −50 %)", change(report.origin_memory_reduction)),
    );
    row(
        "origin connections accepted",
        both(&|p| thousands(p.origin_connections_accepted)),
        String::new(),
    );
    row(
        "weir CPU s / memory peak",
        both(&|p| match (p.proxy_cpu_s, p.proxy_memory_peak_kib) {
            (Some(cpu), Some(memory)) => format!("{cpu:.2} / {}", mib(memory)),
            _ => "—".to_owned(),
        }),
        String::new(),
    );
    out.push_str(&table.render(""));
    out
}

/// A suite value in its unit.
fn suite_value(value: Option<f64>, unit: &str) -> String {
    match value {
        Some(value) if unit == "Gbit/s" => format!("{value:.2}"),
        Some(value) => number(value, 0),
        None => "n/a".to_owned(),
    }
}

/// The Zeus table: one column per target, then weir's ratio to each other column.
pub fn suite_text(report: &SuiteLabReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "weir lab suite: the Zeus table, {} connections, {} per row per target",
        report.connections,
        seconds(report.row_duration_s),
    );
    let names: Vec<String> = report
        .targets
        .iter()
        .map(|t| format!("{} ({})", t.name, t.version))
        .collect();
    let _ = writeln!(out, "targets: {}", names.join(", "));
    out.push('\n');
    let weir = report.targets.iter().position(|t| t.name == "weir");
    let mut header: Vec<String> = vec![String::new(), "unit".to_owned()];
    header.extend(report.targets.iter().map(|t| t.name.clone()));
    let others: Vec<usize> = (0..report.targets.len())
        .filter(|&i| Some(i) != weir)
        .collect();
    if weir.is_some() {
        header.extend(
            others
                .iter()
                .map(|&i| format!("weir/{}", report.targets[i].name)),
        );
    }
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut table = Table::new(&header);
    // Rows not measured for some target: "n/a" in the table, the reason once below it.
    let mut reasons: Vec<(String, Vec<&str>)> = Vec::new();
    for row in &report.rows {
        let mut cells = vec![row.name.clone(), row.unit.clone()];
        let nowhere = row.values.iter().all(Option::is_none);
        let reason = match &row.note {
            Some(note) if row.values.iter().any(Option::is_none) => Some(note.clone()),
            _ => nowhere.then(|| "n/a".to_owned()),
        };
        if let Some(reason) = reason {
            match reasons.iter_mut().find(|(known, _)| *known == reason) {
                Some((_, rows)) => rows.push(&row.name),
                None => reasons.push((reason, vec![&row.name])),
            }
        }
        if nowhere {
            cells.extend(report.targets.iter().map(|_| "n/a".to_owned()));
            table.row(cells);
            continue;
        }
        for (index, value) in row.values.iter().enumerate() {
            let bound = row.client_bound.get(index).copied().unwrap_or(false);
            let errors = row.errors.get(index).copied().unwrap_or(0);
            let mut cell = suite_value(*value, &row.unit);
            if errors > 0 {
                cell.push_str(&format!(" ({} err)", thousands(errors)));
            }
            if bound {
                cell.push('*');
            }
            cells.push(cell);
        }
        if let Some(weir) = weir {
            for &other in &others {
                let pair = (
                    row.values.get(weir).copied().flatten(),
                    row.values.get(other).copied().flatten(),
                );
                let cell = match pair {
                    (Some(w), Some(o)) => format!("{:.2}", ratio(w, o).unwrap_or(f64::NAN)),
                    _ => "-".to_owned(),
                };
                cells.push(cell);
            }
        }
        table.row(cells);
    }
    out.push_str(&table.render(""));
    for (reason, rows) in &reasons {
        let _ = writeln!(out, "{}: {reason}", rows.join(", "));
    }
    if report
        .rows
        .iter()
        .any(|row| row.client_bound.iter().any(|&b| b))
    {
        out.push_str("* client-bound: the load generator used ≥ 90 % of its threads (the figure is a lower bound)\n");
    }
    let cpu: Vec<String> = report
        .targets
        .iter()
        .filter_map(|t| t.proxy_cpu_s.map(|cpu| format!("{} {cpu:.1} s", t.name)))
        .collect();
    if !cpu.is_empty() {
        let _ = writeln!(out, "proxy CPU over the whole suite: {}", cpu.join(", "));
    }
    out
}

/// Everything `weir lab` prints: a header, each experiment's table, the notes.
pub fn lab_text(report: &LabReport) -> String {
    let machine = &report.machine;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "weir lab — weir {} — {} — {} cores ({}), {:.0} GiB, kernel {}, open files {}, load {:.2}",
        report.weir_version,
        report.date,
        machine.cores,
        machine.cpu,
        machine.memory_gib,
        machine.kernel,
        thousands(machine.open_files),
        machine.load_average,
    );
    let sections = [
        report.offload.as_ref().map(offload_text),
        report.tls.as_ref().map(tls_text),
        report.suite.as_ref().map(suite_text),
    ];
    for section in sections.into_iter().flatten() {
        out.push('\n');
        out.push_str(&section);
    }
    if !report.notes.is_empty() {
        out.push_str("\nnotes:\n");
        for note in &report.notes {
            let _ = writeln!(out, "  - {note}");
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests;
