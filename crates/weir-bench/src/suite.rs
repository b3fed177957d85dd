//! `weir bench suite`: the Zeus test matrix in one command. Every row is a short run through
//! the one driver ([`crate::run`]); the rows are data ([`ROWS`]), not code per row.
//!
//! With two targets (`--compare`) each row runs in interleaved slices — A, B, A, B … — and the
//! slices of each target are summed, so drift in the machine (thermal, other load) falls on
//! both columns alike; latency percentiles come from the slices' HDR histograms merged. The TLS
//! rows run against an `https://` base URL of each target (certificate not verified): full
//! handshakes only (a connection per request, resumption off, guarded: a resumed handshake
//! fails the row), and throughput on resumed keep-alive connections. Each result measures the CPU time of the bench's own worker threads
//! during the row and flags itself "client-bound" when that reached [`CLIENT_BOUND`] of the
//! threads it ran (each thread at 90 % or more of a core, on average).

use std::fmt::Write;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::plan::{ConnectionMode, L4Mode, Plan, PlanError, Settings, Stop, UrlOrder};
use crate::report::{Report, percentiles};
use crate::tls::{HandshakeCounts, ResumptionViolation, TlsSettings};

/// The schema name and version of the suite's JSON document (2: TLS rows and targets'
/// `tls`; `p99_ms` from the merged slices, no longer the largest slice's).
pub const SUITE_SCHEMA: &str = "weir-bench-suite/2";
/// A result is client-bound when the bench used at least this share of its threads' CPU.
pub const CLIENT_BOUND: f64 = 0.9;

/// What a row measures and how its value is expressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowKind {
    /// L4 against the echo server: connections per second (`connect` mode).
    L4Connect,
    /// L4 against the echo server: request/response on persistent connections, `size` bytes.
    L4Rr {
        /// Bytes sent and echoed per exchange.
        size: usize,
    },
    /// HTTP/1.1 GET of `path`, whose body is `size` bytes; `close`: a connection per request.
    Http {
        /// The path asked for on the target.
        path: &'static str,
        /// The response body's size, bytes.
        size: usize,
        /// A new connection per request (the value is connections per second).
        close: bool,
        /// The value is bytes transferred (Gbit/s) rather than requests per second.
        throughput: bool,
    },
    /// HTTP/1.1 GET of `path` over TLS against the target's `https://` base; `close`: a
    /// connection (and handshake) per request; `resumption`: the client offers it (off: every
    /// handshake must be full).
    Https {
        /// The path asked for on the target.
        path: &'static str,
        /// The response body's size, bytes.
        size: usize,
        /// A new connection and handshake per request (the value is connections per second).
        close: bool,
        /// The value is bytes transferred (Gbit/s) rather than requests per second.
        throughput: bool,
        /// The client offers session resumption.
        resumption: bool,
    },
    /// HTTP/2 GETs of `path`, `streams` at once on each connection: h2c with prior
    /// knowledge on the target's `http://` base, or with `tls` ALPN `h2` on its `https://` base.
    Http2 {
        /// The path requested on the target's base URL.
        path: &'static str,
        /// Over TLS (ALPN `h2`) rather than h2c.
        tls: bool,
        /// Requests in flight on each connection.
        streams: usize,
    },
    /// HTTP/1.1 GET of `path` on the target's caching base URL (`cache`): the origin marks
    /// the answer cacheable (`?max_age=`), so after the first request every answer is a hit.
    Cache {
        /// The path (and query) asked for.
        path: &'static str,
        /// The response body's size, bytes.
        size: usize,
        /// The value is bytes transferred (Gbit/s) rather than requests per second.
        throughput: bool,
    },
    /// Not measured; the reason is shown in the row.
    NotAvailable(&'static str),
}

/// One row of the matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowSpec {
    /// The row's name, as shown in the table and the report.
    pub name: &'static str,
    /// What the row measures.
    pub kind: RowKind,
}

const NO_TLS: &str = "n/a (no TLS target given)";
const NO_CACHE: &str = "n/a (target does not cache)";
const NO_L4: &str = "n/a (no --l4)";
const NO_H2: &str = "n/a (target does not speak HTTP/2)";

/// The Zeus matrix, in order.
pub const ROWS: &[RowSpec] = &[
    RowSpec {
        name: "L4 conn/s",
        kind: RowKind::L4Connect,
    },
    RowSpec {
        name: "L4 req/s (64 B)",
        kind: RowKind::L4Rr { size: 64 },
    },
    RowSpec {
        name: "HTTP conn/s",
        kind: RowKind::Http {
            path: "/bytes/0",
            size: 0,
            close: true,
            throughput: false,
        },
    },
    RowSpec {
        name: "HTTP req/s (0 B)",
        kind: RowKind::Http {
            path: "/bytes/0",
            size: 0,
            close: false,
            throughput: false,
        },
    },
    RowSpec {
        name: "2 KB req/s",
        kind: RowKind::Http {
            path: "/bytes/2048",
            size: 2048,
            close: false,
            throughput: false,
        },
    },
    RowSpec {
        name: "8 KB req/s",
        kind: RowKind::Http {
            path: "/bytes/8192",
            size: 8192,
            close: false,
            throughput: false,
        },
    },
    RowSpec {
        name: "1 MB throughput",
        kind: RowKind::Http {
            path: "/bytes/1048576",
            size: 1_048_576,
            close: false,
            throughput: true,
        },
    },
    RowSpec {
        name: "TLS conn/s (full handshakes)",
        kind: RowKind::Https {
            path: "/bytes/0",
            size: 0,
            close: true,
            throughput: false,
            resumption: false,
        },
    },
    RowSpec {
        name: "TLS throughput (resumed, keep-alive)",
        kind: RowKind::Https {
            path: "/bytes/1048576",
            size: 1_048_576,
            close: false,
            throughput: true,
            resumption: true,
        },
    },
    RowSpec {
        name: "h2c req/s (0 B, 10 streams)",
        kind: RowKind::Http2 {
            path: "/bytes/0",
            tls: false,
            streams: 10,
        },
    },
    RowSpec {
        name: "h2 req/s (TLS, 0 B, 10 streams)",
        kind: RowKind::Http2 {
            path: "/bytes/0",
            tls: true,
            streams: 10,
        },
    },
    RowSpec {
        name: "cache req/s",
        kind: RowKind::Cache {
            path: "/bytes/100?max_age=3600",
            size: 100,
            throughput: false,
        },
    },
    RowSpec {
        name: "cache throughput",
        kind: RowKind::Cache {
            path: "/bytes/1048576?max_age=3600",
            size: 1_048_576,
            throughput: true,
        },
    },
];

impl RowSpec {
    /// The unit of the row's value.
    pub fn unit(&self) -> &'static str {
        match self.kind {
            RowKind::L4Connect => "conn/s",
            RowKind::L4Rr { .. } => "trans/s",
            RowKind::Http { close: true, .. } | RowKind::Https { close: true, .. } => "conn/s",
            RowKind::Http {
                throughput: true, ..
            }
            | RowKind::Https {
                throughput: true, ..
            }
            | RowKind::Cache {
                throughput: true, ..
            } => "Gbit/s",
            RowKind::Http { .. }
            | RowKind::Https { .. }
            | RowKind::Http2 { .. }
            | RowKind::Cache { .. } => "req/s",
            RowKind::NotAvailable(_) => "",
        }
    }
}

/// One target of the suite: an HTTP base URL and, optionally, an echo server for L4 and an
/// HTTPS base URL for TLS.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SuiteTarget {
    /// `http://host:port` (a trailing `/` is ignored).
    pub base: String,
    /// `host:port` of an echo server; `None`: the L4 rows are n/a.
    pub l4: Option<String>,
    /// `https://host:port` serving the same paths; `None`: the TLS rows are n/a.
    pub tls: Option<String>,
    /// The target speaks HTTP/2: h2c (prior knowledge) on `base` (or on `h2c`), ALPN `h2` on
    /// `tls`; `false`: the HTTP/2 rows are n/a.
    pub http2: bool,
    /// `http://host:port` speaking h2c with prior knowledge, for a target that serves it on
    /// another port than `base` (nginx cannot serve HTTP/1.1 and h2c on one port); `None`:
    /// `base`.
    pub h2c: Option<String>,
    /// `http://host:port` through which the target caches what the origin marks cacheable;
    /// `None`: the cache rows are n/a.
    pub cache: Option<String>,
}

/// What `weir bench suite` was asked for.
#[derive(Debug, Clone)]
pub struct SuiteSettings {
    /// One target, or two with `--compare` (B is the second).
    pub targets: Vec<SuiteTarget>,
    /// Time per row per target, split over the slices.
    pub row_duration: Duration,
    /// How many interleaved slices each row is split into per target; at least 1.
    pub slices: u32,
    /// Connections kept open at once in each row.
    pub connections: usize,
    /// `None`: one per core.
    pub threads: Option<usize>,
    /// How long a connect or a response may take before it counts as a timeout.
    pub timeout: Duration,
}

/// Why the suite could not run.
#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    /// No target, or more than two.
    #[error("a suite needs one or two targets")]
    Targets,
    /// `--slices` is zero.
    #[error("--slices must be at least 1")]
    Slices,
    /// The time per row is zero.
    #[error("--row-duration must be longer than zero")]
    RowDuration,
    /// A TLS target's URL is not `https://`; names the option.
    #[error("{0} must be an https:// URL")]
    NotHttps(&'static str),
    /// A row's run could not be planned (checked for every row before the first runs).
    #[error("row {row:?}, {option}: {error}")]
    Plan {
        /// The row's name.
        row: &'static str,
        /// The option whose address the row's run was planned against.
        option: &'static str,
        /// Why the plan was refused (shown in the message, so not a `source`).
        error: PlanError,
    },
    /// A row's run failed to start or run.
    #[error("row {row:?}: {error}")]
    Run {
        /// The row's name.
        row: &'static str,
        /// The error from the run (shown in the message, so not a `source`).
        error: std::io::Error,
    },
    /// A TLS row without resumption saw a resumed handshake (the target broke the row's premise).
    #[error("row {row:?}: {error}")]
    Tls {
        /// The row's name.
        row: &'static str,
        /// The handshakes that contradict the row (shown in the message, so not a `source`).
        error: ResumptionViolation,
    },
}

/// One row's measurement against one target, summed over its slices.
#[derive(Debug, Clone, Serialize)]
pub struct RowResult {
    /// The row's value in its unit.
    pub value: f64,
    /// Responses received over the row's slices.
    pub requests: u64,
    /// Bytes received over the row's slices.
    pub bytes: u64,
    /// Seconds of load over the row's slices.
    pub elapsed_s: f64,
    /// `requests` per second of `elapsed_s`.
    pub requests_per_s: f64,
    /// `bytes` per second of `elapsed_s`.
    pub bytes_per_s: f64,
    /// p99 (corrected) of the slices' latency histograms merged.
    pub p99_ms: f64,
    /// Failed requests over the row's slices: socket, timeout, parse and TLS errors, and
    /// answers with status >= 400.
    pub errors: u64,
    /// Load generator threads used.
    pub threads: usize,
    /// CPU seconds the bench's worker threads used ÷ (elapsed seconds × threads), in
    /// percent; null where it cannot be read.
    pub client_cpu_percent: Option<f64>,
    /// Whether the bench itself was the bottleneck (`client_cpu_percent` at least `CLIENT_BOUND`).
    pub client_bound: bool,
    /// TLS rows: the handshakes; null for the others.
    pub tls: Option<RowTls>,
}

/// The TLS handshakes of a row's slices, as the client saw them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RowTls {
    /// Full handshakes.
    pub handshakes_full: u64,
    /// Resumed handshakes.
    pub handshakes_resumed: u64,
    /// p99 of TCP connect + TLS handshake, slices merged.
    pub handshake_p99_ms: f64,
}

/// One row of the suite's output.
#[derive(Debug, Clone, Serialize)]
pub struct SuiteRow {
    /// The row's name, as in `ROWS`.
    pub name: &'static str,
    /// Empty for n/a rows.
    pub unit: &'static str,
    /// `"measured"` or `"n/a"`.
    pub status: &'static str,
    /// Why the row is n/a; null when measured.
    pub note: Option<&'static str>,
    /// One per target (empty when n/a).
    pub results: Vec<RowResult>,
    /// Compare: B's value ÷ A's; null otherwise or when A's is 0.
    pub ratio: Option<f64>,
}

/// The whole suite; `serde_json::to_string` gives the `weir-bench-suite/2` document.
#[derive(Debug, Clone, Serialize)]
pub struct SuiteReport {
    /// Always `SUITE_SCHEMA`.
    pub schema: &'static str,
    /// The targets, in column order (A, then B with `--compare`).
    pub targets: Vec<SuiteTarget>,
    /// Seconds per row per target.
    pub row_duration_s: f64,
    /// Slices each row was split into per target.
    pub slices: u32,
    /// Connections kept open at once in each row.
    pub connections: usize,
    /// The rows, in `ROWS` order.
    pub rows: Vec<SuiteRow>,
}

impl SuiteReport {
    /// The `weir-bench-suite/2` JSON document.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
}

/// Runs every row of [`ROWS`] against every target (blocking).
pub fn run(settings: &SuiteSettings) -> Result<SuiteReport, SuiteError> {
    if settings.targets.is_empty() || settings.targets.len() > 2 {
        return Err(SuiteError::Targets);
    }
    if settings.slices == 0 {
        return Err(SuiteError::Slices);
    }
    if settings.row_duration.is_zero() {
        return Err(SuiteError::RowDuration);
    }
    for (index, target) in settings.targets.iter().enumerate() {
        if target
            .tls
            .as_deref()
            .is_some_and(|url| !url.starts_with("https://"))
        {
            let option = if index > 0 { "--compare-tls" } else { "--tls" };
            return Err(SuiteError::NotHttps(option));
        }
    }
    // Every row is planned before the first runs: a bad address or option is refused at
    // once, not after the rows before it have run.
    let planned = ROWS
        .iter()
        .map(|spec| plans_for(settings, spec))
        .collect::<Result<Vec<_>, _>>()?;
    let mut rows = Vec::with_capacity(ROWS.len());
    for (spec, plans) in ROWS.iter().zip(planned) {
        rows.push(match plans {
            Err(note) => not_available(spec, note),
            Ok(plans) => run_row(settings, spec, &plans)?,
        });
    }
    Ok(SuiteReport {
        schema: SUITE_SCHEMA,
        targets: settings.targets.clone(),
        row_duration_s: settings.row_duration.as_secs_f64(),
        slices: settings.slices,
        connections: settings.connections,
        rows,
    })
}

fn not_available(spec: &RowSpec, note: &'static str) -> SuiteRow {
    SuiteRow {
        name: spec.name,
        unit: "",
        status: "n/a",
        note: Some(note),
        results: Vec::new(),
        ratio: None,
    }
}

/// The plans of a row's run against each target, or why the row is n/a.
fn plans_for(
    settings: &SuiteSettings,
    spec: &RowSpec,
) -> Result<Result<Vec<Plan>, &'static str>, SuiteError> {
    if let RowKind::NotAvailable(note) = spec.kind {
        return Ok(Err(note));
    }
    let is_l4 = matches!(spec.kind, RowKind::L4Connect | RowKind::L4Rr { .. });
    if is_l4 && settings.targets.iter().any(|target| target.l4.is_none()) {
        return Ok(Err(NO_L4));
    }
    let is_tls = matches!(
        spec.kind,
        RowKind::Https { .. } | RowKind::Http2 { tls: true, .. }
    );
    if is_tls && settings.targets.iter().any(|target| target.tls.is_none()) {
        return Ok(Err(NO_TLS));
    }
    let is_cache = matches!(spec.kind, RowKind::Cache { .. });
    if is_cache && settings.targets.iter().any(|target| target.cache.is_none()) {
        return Ok(Err(NO_CACHE));
    }
    let is_h2 = matches!(spec.kind, RowKind::Http2 { .. });
    if is_h2 && settings.targets.iter().any(|target| !target.http2) {
        return Ok(Err(NO_H2));
    }
    let plans = settings
        .targets
        .iter()
        .enumerate()
        .map(|(index, target)| {
            plan_for(settings, spec, target).map_err(|source| SuiteError::Plan {
                row: spec.name,
                option: option_of(spec, target, index),
                error: source,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Ok(plans))
}

/// The command-line option that gave the address `spec`'s run uses for the `index`th
/// target (the second is `--compare`'s).
fn option_of(spec: &RowSpec, target: &SuiteTarget, index: usize) -> &'static str {
    let compare = index > 0;
    match spec.kind {
        RowKind::L4Connect | RowKind::L4Rr { .. } if compare => "--compare-l4",
        RowKind::L4Connect | RowKind::L4Rr { .. } => "--l4",
        RowKind::Https { .. } | RowKind::Http2 { tls: true, .. } if compare => "--compare-tls",
        RowKind::Https { .. } | RowKind::Http2 { tls: true, .. } => "--tls",
        RowKind::Http2 { .. } if target.h2c.is_some() && compare => "--compare-h2c",
        RowKind::Http2 { .. } if target.h2c.is_some() => "--h2c",
        RowKind::Cache { .. } if compare => "--compare-cache",
        RowKind::Cache { .. } => "--cache",
        _ if compare => "--compare",
        _ => "the target",
    }
}

/// Runs one row: its slices against each target in turn, added up.
fn run_row(
    settings: &SuiteSettings,
    spec: &RowSpec,
    plans: &[Plan],
) -> Result<SuiteRow, SuiteError> {
    let mut sums: Vec<Sum> = plans.iter().map(|_| Sum::default()).collect();
    for _ in 0..settings.slices {
        for (plan, sum) in plans.iter().zip(&mut sums) {
            let outcome = crate::driver::execute(plan).map_err(|source| SuiteError::Run {
                row: spec.name,
                error: source,
            })?;
            let report = Report::new(plan, &outcome);
            report.check_tls().map_err(|source| SuiteError::Tls {
                row: spec.name,
                error: source,
            })?;
            sum.add(
                &report,
                &outcome.record,
                outcome.elapsed.as_secs_f64(),
                outcome.client_cpu_s,
                plan.threads,
            );
        }
    }
    let results: Vec<RowResult> = sums.iter().map(|sum| sum.result(spec)).collect();
    let ratio = match results.as_slice() {
        [a, b] if a.value > 0.0 => Some(b.value / a.value),
        _ => None,
    };
    Ok(SuiteRow {
        name: spec.name,
        unit: spec.unit(),
        status: "measured",
        note: None,
        results,
        ratio,
    })
}

/// One slice's plan for `spec` against `target`.
fn plan_for(
    settings: &SuiteSettings,
    spec: &RowSpec,
    target: &SuiteTarget,
) -> Result<Plan, PlanError> {
    let slice = settings.row_duration / settings.slices;
    let mut tls = TlsSettings::default();
    let (url, mode, l4_mode, l4_size) = match spec.kind {
        RowKind::L4Connect => (
            format!("tcp://{}", target.l4.as_deref().unwrap_or_default()),
            ConnectionMode::KeepAlive,
            L4Mode::Connect,
            None,
        ),
        RowKind::L4Rr { size } => (
            format!("tcp://{}", target.l4.as_deref().unwrap_or_default()),
            ConnectionMode::KeepAlive,
            L4Mode::RequestResponse,
            Some(size),
        ),
        RowKind::Http { path, close, .. } => (
            format!("{}{path}", target.base.trim_end_matches('/')),
            if close {
                ConnectionMode::Close
            } else {
                ConnectionMode::KeepAlive
            },
            L4Mode::RequestResponse,
            None,
        ),
        RowKind::Https {
            path,
            close,
            resumption,
            ..
        } => {
            tls.resumption = resumption;
            (
                format!(
                    "{}{path}",
                    target
                        .tls
                        .as_deref()
                        .unwrap_or_default()
                        .trim_end_matches('/')
                ),
                if close {
                    ConnectionMode::Close
                } else {
                    ConnectionMode::KeepAlive
                },
                L4Mode::RequestResponse,
                None,
            )
        }
        RowKind::Http2 { path, tls, .. } => {
            let base = if tls {
                target.tls.as_deref().unwrap_or_default()
            } else {
                target.h2c.as_deref().unwrap_or(&target.base)
            };
            (
                format!("{}{path}", base.trim_end_matches('/')),
                ConnectionMode::KeepAlive,
                L4Mode::RequestResponse,
                None,
            )
        }
        RowKind::Cache { path, .. } => (
            format!(
                "{}{path}",
                target
                    .cache
                    .as_deref()
                    .unwrap_or_default()
                    .trim_end_matches('/')
            ),
            ConnectionMode::KeepAlive,
            L4Mode::RequestResponse,
            None,
        ),
        RowKind::NotAvailable(_) => unreachable!("n/a rows are not planned"),
    };
    let http2_streams = match spec.kind {
        RowKind::Http2 { streams, .. } => Some(streams),
        _ => None,
    };
    Plan::new(Settings {
        urls: vec![url],
        method: "GET".to_owned(),
        headers: Vec::new(),
        body: Vec::new(),
        order: UrlOrder::Sequential,
        connections: settings.connections,
        threads: settings.threads,
        stop: Stop::Duration(slice),
        rate: None,
        mode,
        timeout: settings.timeout,
        progress: false,
        l4_mode,
        l4_size,
        tls,
        http2_streams,
    })
}

/// A row's slices against one target, added up.
#[derive(Debug, Default)]
struct Sum {
    requests: u64,
    bytes: u64,
    elapsed_s: f64,
    /// Corrected latency of every slice, merged (µs).
    latency: Option<Histogram<u64>>,
    /// TLS rows: handshakes of every slice and their times (µs).
    handshakes: HandshakeCounts,
    handshake_time: Option<Histogram<u64>>,
    tls: bool,
    errors: u64,
    wall_s: f64,
    cpu_s: f64,
    /// Some slice's CPU time could not be read.
    cpu_unknown: bool,
    threads: usize,
}

impl Sum {
    fn add(
        &mut self,
        report: &Report,
        record: &crate::record::Record,
        wall: f64,
        cpu: Option<f64>,
        threads: usize,
    ) {
        self.requests += report.requests.completed;
        self.bytes += report.bytes_received;
        self.elapsed_s += report.elapsed_s;
        merge_into(&mut self.latency, &record.corrected);
        if report.tls.is_some() {
            self.tls = true;
            self.handshakes.merge(&record.handshakes);
            merge_into(&mut self.handshake_time, &record.handshake_time);
        }
        // An answer with status >= 400 is no measurement of the row either (a 404 page
        // measured as the 2 KB row): counted with the socket errors.
        self.errors += report.errors.total + report.requests.non_2xx;
        self.wall_s += wall;
        self.threads = threads;
        match cpu {
            Some(cpu) => self.cpu_s += cpu,
            None => self.cpu_unknown = true,
        }
    }

    fn result(&self, spec: &RowSpec) -> RowResult {
        let per_second = |count: f64| {
            if self.elapsed_s > 0.0 {
                count / self.elapsed_s
            } else {
                0.0
            }
        };
        let requests_per_s = per_second(self.requests as f64);
        let bytes_per_s = per_second(self.bytes as f64);
        let value = match spec.kind {
            RowKind::Http {
                throughput: true, ..
            }
            | RowKind::Https {
                throughput: true, ..
            }
            | RowKind::Cache {
                throughput: true, ..
            } => bytes_per_s * 8.0 / 1e9,
            _ => requests_per_s,
        };
        let p99 = |histogram: &Option<Histogram<u64>>| {
            histogram
                .as_ref()
                .map_or(0.0, |histogram| percentiles(histogram).p99_ms)
        };
        let client_cpu_percent = (!self.cpu_unknown && self.wall_s > 0.0 && self.threads > 0)
            .then(|| self.cpu_s / (self.wall_s * self.threads as f64) * 100.0);
        RowResult {
            value,
            requests: self.requests,
            bytes: self.bytes,
            elapsed_s: self.elapsed_s,
            requests_per_s,
            bytes_per_s,
            p99_ms: p99(&self.latency),
            errors: self.errors,
            threads: self.threads,
            client_cpu_percent,
            client_bound: client_cpu_percent.is_some_and(|cpu| cpu >= CLIENT_BOUND * 100.0),
            tls: self.tls.then(|| RowTls {
                handshakes_full: self.handshakes.full,
                handshakes_resumed: self.handshakes.resumed,
                handshake_p99_ms: p99(&self.handshake_time),
            }),
        }
    }
}

/// Adds `histogram` into `sum` (a copy of it when `sum` is empty).
fn merge_into(sum: &mut Option<Histogram<u64>>, histogram: &Histogram<u64>) {
    match sum {
        // Same bounds on both sides (every record's histograms are made alike): cannot fail.
        Some(sum) => {
            let _ = sum.add(histogram);
        }
        None => *sum = Some(histogram.clone()),
    }
}

/// Renders the suite as a table: row | value | unit | p99 ms | errors | note, one value
/// column per target and a ratio column with `--compare`.
#[allow(
    clippy::too_many_lines,
    reason = "the table, column by column, in the order it prints"
)]
pub fn text(report: &SuiteReport) -> String {
    let compare = report.targets.len() == 2;
    let mut out = String::new();
    for (label, target) in ["A", "B"].iter().zip(&report.targets) {
        let l4 = target.l4.as_deref().unwrap_or("none");
        let tls = target.tls.as_deref().unwrap_or("none");
        let cache = target.cache.as_deref().unwrap_or("none");
        let _ = writeln!(
            out,
            "target {label}: {} (L4 echo: {l4}; TLS: {tls}; cache: {cache})",
            target.base
        );
    }
    let _ = writeln!(
        out,
        "{} s per row per target in {} slice(s), {} connections\n",
        report.row_duration_s, report.slices, report.connections
    );
    let mut lines: Vec<Vec<String>> = Vec::new();
    let mut header = vec!["row".to_owned()];
    if compare {
        header.extend(
            [
                "A", "B", "B/A", "unit", "p99 ms A", "p99 ms B", "errors", "note",
            ]
            .map(String::from),
        );
    } else {
        header.extend(["value", "unit", "p99 ms", "errors", "note"].map(String::from));
    }
    lines.push(header);
    for row in &report.rows {
        let mut line = vec![row.name.to_owned()];
        if let Some(note) = row.note {
            let blanks = if compare { 7 } else { 4 };
            line.extend(std::iter::repeat_n(String::new(), blanks));
            line.push(note.to_owned());
            lines.push(line);
            continue;
        }
        let values = row.results.iter().map(|result| format_value(result.value));
        line.extend(values);
        if compare {
            line.push(
                row.ratio
                    .map_or("-".to_owned(), |ratio| format!("{ratio:.2}")),
            );
        }
        line.push(row.unit.to_owned());
        line.extend(
            row.results
                .iter()
                .map(|result| format!("{:.2}", result.p99_ms)),
        );
        let errors: Vec<String> = row.results.iter().map(|r| r.errors.to_string()).collect();
        line.push(errors.join("/"));
        // The client's CPU always, flagged when it was the limit.
        let notes: Vec<String> = ["A", "B"]
            .iter()
            .zip(&row.results)
            .map(|(label, result)| {
                // Rounded down, so a percentage shown as 90 is always flagged.
                let label = if compare {
                    format!(" {label}")
                } else {
                    String::new()
                };
                match result.client_cpu_percent.map(f64::floor) {
                    Some(cpu) if result.client_bound => {
                        format!("client-bound{label} ({cpu:.0}% CPU)")
                    }
                    Some(cpu) => format!("client{label} {cpu:.0}% CPU"),
                    None => format!("client{label} CPU unknown"),
                }
            })
            .collect();
        line.push(notes.join(", "));
        lines.push(line);
    }
    let columns = lines.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|column| {
            lines
                .iter()
                .filter_map(|line| line.get(column))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for line in &lines {
        let cells: Vec<String> = line
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(column, (cell, width))| {
                // The row name and the note left-aligned, numbers right-aligned.
                if column == 0 || column + 1 == line.len() {
                    format!("{cell:<width$}")
                } else {
                    format!("{cell:>width$}")
                }
            })
            .collect();
        let _ = writeln!(out, "{}", cells.join(" | ").trim_end());
    }
    out
}

fn format_value(value: f64) -> String {
    if value >= 100.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_bound_at_ninety_percent_of_the_threads() {
        let spec = ROWS[3];
        let sum = |cpu: Option<f64>| Sum {
            requests: 1000,
            bytes: 100_000,
            elapsed_s: 1.0,
            errors: 0,
            wall_s: 1.0,
            cpu_s: cpu.unwrap_or(0.0),
            cpu_unknown: cpu.is_none(),
            threads: 2,
            ..Sum::default()
        };
        let busy = sum(Some(1.9)).result(&spec);
        assert!(busy.client_bound);
        assert!((busy.client_cpu_percent.unwrap_or(0.0) - 95.0).abs() < 1e-9);
        assert!(!sum(Some(1.7)).result(&spec).client_bound);
        let unknown = sum(None).result(&spec);
        assert!(!unknown.client_bound && unknown.client_cpu_percent.is_none());
        assert_eq!(busy.value, 1000.0);
        let gbit = sum(Some(0.0)).result(&ROWS[6]);
        assert!((gbit.value - 0.0008).abs() < 1e-12);
        assert!(busy.tls.is_none());
    }

    #[test]
    fn p99_is_of_the_merged_slices_not_the_worst_slice() {
        let mut fast = crate::record::Record::new();
        let mut slow = crate::record::Record::new();
        let ms = Duration::from_millis(1);
        for _ in 0..1000 {
            fast.response(200, ms, ms, ms);
        }
        for _ in 0..10 {
            slow.response(200, 50 * ms, 50 * ms, ms);
        }
        let mut sum = Sum::default();
        for record in [&fast, &slow] {
            merge_into(&mut sum.latency, &record.corrected);
        }
        let merged = sum.result(&ROWS[3]);
        // The slow slice alone has a p99 of 50 ms; 10 of 1010 samples are not 1 %.
        // (HDR histograms keep 3 significant figures: 50 ms reads back as up to 50.05.)
        assert!(percentiles(&slow.corrected).p99_ms >= 50.0);
        assert!(merged.p99_ms < 1.01, "{merged:?}");
        for _ in 0..10 {
            slow.response(200, 50 * ms, 50 * ms, ms);
        }
        merge_into(&mut sum.latency, &slow.corrected);
        // Now 30 of 1030 (2.9 %) are slow: the merged p99 is theirs.
        assert!(sum.result(&ROWS[3]).p99_ms >= 50.0);
    }

    #[test]
    fn rows_are_the_zeus_matrix() {
        assert_eq!(ROWS.len(), 13);
        let measured = ROWS
            .iter()
            .filter(|row| !matches!(row.kind, RowKind::NotAvailable(_)))
            .count();
        // Every row is measured now; a target without what a row needs makes it n/a.
        assert_eq!(measured, 13);
        assert_eq!(ROWS[6].unit(), "Gbit/s");
        assert_eq!(ROWS[0].unit(), "conn/s");
        assert_eq!(ROWS[7].unit(), "conn/s");
        assert_eq!(ROWS[8].unit(), "Gbit/s");
        assert_eq!(ROWS[9].unit(), "req/s");
        assert_eq!(ROWS[10].unit(), "req/s");
        assert_eq!(ROWS[11].unit(), "req/s");
        assert_eq!(ROWS[12].unit(), "Gbit/s");
    }
}
