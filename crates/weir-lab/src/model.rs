//! The lab's results as data: what each experiment measured, serialised as the `weir-lab/1`
//! JSON document and read back by the table and HTML renderers. Nothing here does I/O.

use serde::{Deserialize, Serialize};

/// The schema name and version of the JSON document.
pub const SCHEMA: &str = "weir-lab/1";

/// One `weir lab` run: the experiments it ran and where.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LabReport {
    /// Always `SCHEMA` (`weir-lab/1`) in documents this version writes.
    pub schema: String,
    /// `weir` version that ran the lab.
    pub weir_version: String,
    /// Start of the run, RFC 3339 UTC.
    pub date: String,
    /// The command line, as typed.
    pub command: String,
    /// The machine the run was on, for reading the figures in context.
    pub machine: Machine,
    /// `weir lab offload`'s results, if it ran.
    pub offload: Option<OffloadReport>,
    /// `weir lab tls`'s results, if it ran.
    pub tls: Option<TlsReport>,
    /// `weir lab suite`'s results, if it ran.
    pub suite: Option<SuiteLabReport>,
    /// Fallbacks taken and things worth knowing (a peer missing, a limit lowered).
    pub notes: Vec<String>,
}

/// The machine the lab ran on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// Logical CPUs the kernel reports.
    pub cores: usize,
    /// The CPU model name from `/proc/cpuinfo`.
    pub cpu: String,
    /// Total memory, GiB.
    pub memory_gib: f64,
    /// The kernel release (`uname -r`).
    pub kernel: String,
    /// The open-file limit the lab ran with (soft, after raising it to the hard one).
    pub open_files: u64,
    /// `/proc/loadavg` 1-minute figure at the start: how busy the machine already was.
    pub load_average: f64,
}

/// `weir lab offload`: the Cisco ACE TCP-offload experiment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OffloadReport {
    /// What the experiment was asked to do, after any lowering.
    pub settings: OffloadSettingsReport,
    /// The clients straight at the origin; `None` with `--no-direct`.
    pub direct: Option<PhaseReport>,
    /// The same clients through weir.
    pub weir: PhaseReport,
    /// The same clients through each peer of `--peers`, with the same cap to the origin.
    #[serde(default)]
    pub peers: Vec<PeerPhase>,
    /// The headline ratios, computed from the phases.
    pub ratios: OffloadRatios,
    /// Pass/fail statements about the run, counted in the exit code.
    pub checks: Vec<Check>,
}

/// The offload experiment's clients through a peer proxy (HAProxy, nginx).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerPhase {
    /// `haproxy`, `nginx`.
    pub name: String,
    /// The peer's version as it reports it.
    pub version: String,
    /// What the clients, the origin and the peer did in the phase.
    pub phase: PhaseReport,
}

/// What the offload experiment was asked to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OffloadSettingsReport {
    /// Clients run (after any lowering to fit the open-file limit).
    pub clients: u32,
    /// Clients asked for.
    pub clients_requested: u32,
    /// The origin refuses connections past this many open.
    pub origin_cap: u32,
    /// weir's pool `max_connections` to the origin.
    pub pool_cap: u32,
    /// `weir origin` or `nginx <version>`.
    pub origin: String,
    /// Bytes the built-in origin holds per open connection (0 for nginx).
    pub connection_memory: u64,
    /// Seconds between one client's requests.
    pub interval_s: f64,
    /// Seconds over which the clients started.
    pub ramp_s: f64,
    /// Seconds of load per phase, ramp included.
    pub duration_s: f64,
    /// 127.0.0.x source addresses the clients spread over.
    pub sources: u8,
    /// Worker threads of weir and of each peer.
    pub proxy_threads: usize,
    /// The path every request asked for.
    pub path: String,
    /// Start of the steady window (s from the start): every client had a chance to be served.
    pub steady_from_s: f64,
    /// End of the steady window: one interval before the end, when the first clients finish.
    pub steady_to_s: f64,
}

/// One phase of the offload experiment (direct or through weir).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseReport {
    /// What the clients saw.
    pub clients: ClientSummary,
    /// What the origin did.
    pub origin: OriginSummary,
    /// Through weir only.
    pub proxy: Option<ProxySummary>,
    /// One a sampling period, from the start of the load.
    pub samples: Vec<Sample>,
}

/// What the clients saw in one phase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientSummary {
    /// Most connections open at once that had been answered and had seen no error: the
    /// connections "held without errors".
    pub held_peak: u64,
    /// Most connections open at once as the clients counted them (TCP connected, whether or
    /// not they were ever answered).
    pub connected_peak: u64,
    /// TCP connections the clients opened in all (reconnects included).
    pub connections_opened: u64,
    /// Requests answered with 200.
    pub requests_ok: u64,
    /// Mean requests per second answered over the steady window.
    pub requests_per_s: f64,
    /// Failed connections and requests, by kind.
    pub errors: ErrorCounts,
    /// TCP connect time of every connection that was opened.
    pub connect_ms: Latency,
    /// From writing a request to reading its whole response.
    pub response_ms: Latency,
    /// Seconds from the start of the load until every client had finished.
    pub elapsed_s: f64,
}

/// Client errors by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorCounts {
    /// Connect refused or failed.
    pub connect: u64,
    /// Reset, or closed by the server, while writing or reading.
    pub closed: u64,
    /// An answer other than 200.
    pub status: u64,
    /// Connect or response slower than the timeout.
    pub timeout: u64,
    /// Bytes that do not parse as a response.
    pub malformed: u64,
}

impl ErrorCounts {
    /// Errors of every kind together.
    pub fn total(&self) -> u64 {
        self.connect + self.closed + self.status + self.timeout + self.malformed
    }
}

/// Percentiles in milliseconds; all 0 when nothing was measured (`count` 0).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// How many values were measured.
    pub count: u64,
    /// Median, ms.
    pub p50: f64,
    /// 99th percentile, ms.
    pub p99: f64,
    /// Largest value, ms.
    pub max: f64,
}

/// The origin's side of one phase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OriginSummary {
    /// Most connections open on the origin at once.
    pub connections_peak: u64,
    /// Where `connections_peak` comes from: `"origin counter"` (the built-in origin's own
    /// exact peak) or `"sampled"` (its open connections, once a sampling period).
    pub peak_source: String,
    /// The built-in origin: connections reset because the cap was reached.
    pub connections_refused: Option<u64>,
    /// The built-in origin: connections accepted and served.
    pub connections_accepted: Option<u64>,
    /// The built-in origin: requests it parsed.
    pub requests: Option<u64>,
    /// Peak resident memory (VmHWM) of the origin's processes, KiB.
    pub memory_peak_kib: u64,
    /// CPU seconds (user + system) the origin used during the load.
    pub cpu_s: f64,
}

/// The proxy's side of a phase through weir (or through a peer).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProxySummary {
    /// CPU seconds of the proxy's processes (nginx: master and workers) over the load.
    pub cpu_s: f64,
    /// Peak resident memory (VmHWM), summed over the proxy's processes, KiB.
    pub memory_peak_kib: u64,
    /// Resident memory once the proxy answered and before the load, KiB: the base that
    /// memory per client connection is counted from.
    #[serde(default)]
    pub memory_start_kib: u64,
    /// weir: peak of `weir_client_connections_open` over the samples; a peer: the clients'
    /// own peak of open connections.
    pub client_connections_peak: u64,
    /// weir: peak of `weir_upstream_connections_open` over the samples; a peer: peak of the
    /// origin's open connections.
    pub upstream_connections_peak: u64,
    /// weir: `weir_upstream_connections_created_total` at the end; a peer: connections the
    /// built-in origin accepted (0 with nginx as the origin).
    pub upstream_connections_created: u64,
    /// weir: answers with a 5xx status it sent (queue full or timed out, origin failures);
    /// a peer: answers other than 200 the clients got.
    pub responses_5xx: u64,
}

impl ProxySummary {
    /// (peak − start) memory ÷ client connections at the peak, KiB; `None` without clients.
    pub fn memory_per_client_kib(&self) -> Option<f64> {
        (self.client_connections_peak > 0).then(|| {
            self.memory_peak_kib.saturating_sub(self.memory_start_kib) as f64
                / self.client_connections_peak as f64
        })
    }
}

/// One sample of a phase, taken once a sampling period.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Seconds from the start of the load.
    pub t_s: f64,
    /// Clients that should be connected by now (the ramp).
    pub clients_started: u64,
    /// Clients with a TCP connection open now.
    pub clients_connected: u64,
    /// Clients whose connection is open, was answered and has seen no error.
    pub clients_held: u64,
    /// Connections the origin's processes hold open (their socket descriptors less
    /// listeners).
    pub origin_connections: u64,
    /// weir's open client connections (through weir only).
    pub proxy_clients: Option<u64>,
    /// weir's open connections to the origin (through weir only).
    pub proxy_upstream: Option<u64>,
    /// Requests answered so far.
    pub requests_ok: u64,
    /// Errors so far.
    pub errors: u64,
    /// p99 of the connects that completed since the previous sample, ms.
    pub connect_ms_p99: Option<f64>,
    /// Resident memory of the origin's processes now, KiB.
    pub origin_rss_kib: u64,
    /// CPU seconds the origin's processes used since the load started.
    #[serde(default)]
    pub origin_cpu_s: f64,
    /// Resident memory of the proxy's processes now, KiB (through a proxy only).
    pub proxy_rss_kib: Option<u64>,
}

/// The figures the paper draws its conclusions from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct OffloadRatios {
    /// Client connections held ÷ origin connections, both at their peak, through weir.
    pub offload: Option<f64>,
    /// Median over the steady window of client connections ÷ origin connections.
    pub offload_steady: Option<f64>,
    /// Connections held through weir ÷ held direct (the paper's "17-fold").
    pub capacity_gain: Option<f64>,
    /// Requests/s answered through weir ÷ direct (the paper's "20-fold").
    pub request_rate_gain: Option<f64>,
    /// Direct connect p50 ÷ through weir (above 1: weir accepts faster).
    pub connect_p50_gain: Option<f64>,
    /// Direct connect p99 ÷ through weir (the paper's "12 times faster").
    pub connect_p99_gain: Option<f64>,
    /// 1 − origin peak memory through weir ÷ direct.
    pub origin_memory_reduction: Option<f64>,
}

/// A pass/fail statement about a run, shown under the table and counted in the exit code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Check {
    /// A short name for what is checked.
    pub name: String,
    /// Whether the run satisfies it.
    pub passed: bool,
    /// The figures behind the verdict, for the reader.
    pub detail: String,
}

/// `weir lab tls`: the Cisco ACE SSL-offload experiment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TlsReport {
    /// What the experiment was asked to do.
    pub settings: TlsSettingsReport,
    /// The origin serving HTTPS itself.
    pub direct: TlsPhase,
    /// The origin serving plain HTTP behind weir, which terminates TLS.
    pub offloaded: TlsPhase,
    /// 1 − origin CPU offloaded ÷ direct (paper: 0.70).
    pub origin_cpu_reduction: Option<f64>,
    /// 1 − origin peak memory offloaded ÷ direct (paper: 0.50).
    pub origin_memory_reduction: Option<f64>,
    /// Pass/fail statements about the run, counted in the exit code.
    pub checks: Vec<Check>,
}

/// What the TLS experiment was asked to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TlsSettingsReport {
    /// Simulated users, each making one request a second on a new connection.
    pub clients: u32,
    /// Seconds of load per phase.
    pub duration_s: f64,
    /// The path every request asked for.
    pub path: String,
    /// Whether the clients offer session resumption (off: every handshake is full).
    pub resumption: bool,
    /// The server certificate's key type and size.
    pub certificate: String,
    /// Worker threads of weir.
    pub proxy_threads: usize,
}

/// One side of the TLS experiment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TlsPhase {
    /// Requests answered with 200.
    pub requests_ok: u64,
    /// Requests that failed (connect, handshake, status or timeout).
    pub errors: u64,
    /// Mean requests per second answered.
    pub requests_per_s: f64,
    /// Request latency, new connection and handshake included.
    pub latency_ms: Latency,
    /// Full TLS handshakes the server side made.
    pub handshakes_full: u64,
    /// Resumed TLS handshakes the server side made.
    pub handshakes_resumed: u64,
    /// CPU seconds (user + system) the origin used during the load.
    pub origin_cpu_s: f64,
    /// Peak resident memory (VmHWM) of the origin's processes, KiB.
    pub origin_memory_peak_kib: u64,
    /// Connections the origin accepted during the load.
    pub origin_connections_accepted: u64,
    /// Through weir: weir's CPU seconds and peak memory.
    pub proxy_cpu_s: Option<f64>,
    /// Through weir: weir's peak resident memory (VmHWM), KiB.
    pub proxy_memory_peak_kib: Option<u64>,
}

/// `weir lab suite`: the Zeus table, direct and through each proxy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SuiteLabReport {
    /// Seconds each row was measured, per column.
    pub row_duration_s: f64,
    /// Concurrent connections of the load generator.
    pub connections: usize,
    /// Columns, in order: `direct` first, then `weir`, then the peers that ran.
    pub targets: Vec<SuiteColumn>,
    /// The measured rows, in the suite's order.
    pub rows: Vec<SuiteLabRow>,
}

/// One column of the suite table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SuiteColumn {
    /// `direct`, `weir`, `haproxy`, `nginx`.
    pub name: String,
    /// What ran, with its version.
    pub version: String,
    /// CPU seconds of the proxy's processes over the whole suite (none for direct).
    pub proxy_cpu_s: Option<f64>,
}

/// One row of the suite table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SuiteLabRow {
    /// What the row measures.
    pub name: String,
    /// The unit of `values` (`req/s`, `conn/s`, `trans/s`, ...).
    pub unit: String,
    /// One per column; `None`: not measured (see `note`).
    pub values: Vec<Option<f64>>,
    /// p99 latency per column, ms.
    pub p99_ms: Vec<Option<f64>>,
    /// Failed requests per column.
    pub errors: Vec<u64>,
    /// Columns where the bench itself was the bottleneck.
    pub client_bound: Vec<bool>,
    /// Why some columns were not measured, if any were not.
    pub note: Option<String>,
}
