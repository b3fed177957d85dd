//! Command-line arguments.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// weir: an application delivery controller — traffic management, TCP
/// connection offload, and the tools to measure them.
#[derive(Debug, Parser)]
#[command(name = "weir", version, about, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the proxy (with no --config: the embedded default, a demo on 127.0.0.1:8080).
    Serve(ServeArgs),
    /// Validate a config file and print every error with file, line and key.
    Check(CheckArgs),
    /// Run the built-in origin server (for tests, benchmarks and labs).
    Origin(OriginArgs),
    /// Load generator: closed or open loop, latency corrected for coordinated omission.
    Bench(BenchArgs),
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The config file (TOML). Without it, the embedded default is used.
    #[arg(short, long)]
    pub config: Option<PathBuf>,
    /// Worker threads (overrides `runtime.threads`).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Print the embedded default config and exit.
    #[arg(long)]
    pub print_default: bool,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The config file to validate.
    pub file: PathBuf,
}

#[derive(Debug, Args)]
pub struct OriginArgs {
    /// Address to listen on.
    #[arg(short, long, default_value = "127.0.0.1:8081")]
    pub listen: SocketAddr,
    /// Name sent in `X-Origin` and on `/`.
    #[arg(long, default_value = "origin")]
    pub name: String,
    /// Refuse connections past this many open at once (like an overloaded Apache).
    #[arg(long)]
    pub max_connections: Option<u32>,
    /// Close the connection after every response.
    #[arg(long)]
    pub no_keep_alive: bool,
    /// Bytes of memory each open connection holds.
    #[arg(long, default_value_t = 0)]
    pub per_connection_memory: usize,
    /// Worker threads (default: one per core).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Raw TCP echo server instead of HTTP (for `weir bench tcp://...`): every byte read is
    /// written back.
    #[arg(long)]
    pub echo: bool,
}

/// `weir bench URL...` (or `weir bench selftest`).
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub command: Option<BenchCommand>,
    /// URLs to load, taken in turn by each connection: http://..., or tcp://HOST:PORT for L4
    /// against an echo server (`weir origin --echo`).
    #[arg(required_unless_present_any = ["url_file"])]
    pub urls: Vec<String>,
    /// Connections, split across the threads.
    #[arg(short, long, default_value_t = 50)]
    pub connections: usize,
    /// Run this long (default 10s unless --requests).
    #[arg(short, long, value_parser = weir_bench::parse_duration, conflicts_with = "requests")]
    pub duration: Option<Duration>,
    /// Send this many requests in all.
    #[arg(short = 'n', long)]
    pub requests: Option<u64>,
    /// Open loop: requests per second in all (latency from the intended send time).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Worker threads, each with its own runtime (default: one per core).
    #[arg(short, long)]
    pub threads: Option<usize>,
    /// A new connection per request, sent with `Connection: close`.
    #[arg(long)]
    pub close: bool,
    /// Request method.
    #[arg(short, long, default_value = "GET")]
    pub method: String,
    /// Extra request header `Name: value` (repeatable).
    #[arg(short = 'H', long = "header")]
    pub headers: Vec<String>,
    /// Request body.
    #[arg(long, conflicts_with = "body_file")]
    pub body: Option<String>,
    /// Request body read from a file.
    #[arg(long)]
    pub body_file: Option<PathBuf>,
    /// Read URLs from a file, one a line (like `siege -f`).
    #[arg(short = 'f', long)]
    pub url_file: Option<PathBuf>,
    /// Take URLs at random instead of in sequence.
    #[arg(long)]
    pub random: bool,
    /// Give up on a request (connect, send and response) after this long.
    #[arg(long, value_parser = weir_bench::parse_duration, default_value = "5s")]
    pub timeout: Duration,
    /// Print the `weir-bench/1` JSON document instead of the text report.
    #[arg(long)]
    pub json: bool,
    /// No live progress line (it is shown only when stderr is a terminal anyway).
    #[arg(long)]
    pub no_progress: bool,
    /// tcp:// URLs: connections per second (`connect`) or request/response on persistent
    /// connections (`rr`).
    #[arg(long, value_enum, default_value_t = L4ModeArg::Rr)]
    pub l4_mode: L4ModeArg,
    /// tcp:// URLs: bytes sent and read back per transaction (default: 64 for rr, 0 for connect).
    #[arg(long)]
    pub l4_size: Option<usize>,
}

/// `--l4-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum L4ModeArg {
    /// Connect, send/receive --l4-size bytes (if any), close: one transaction per connection.
    Connect,
    /// Send --l4-size bytes and read them back, repeatedly, on persistent connections.
    Rr,
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Prove the coordinated-omission correction against a server that stalls on a schedule.
    Selftest,
    /// The Zeus matrix against a target serving `weir origin`'s paths, in one table.
    Suite(Box<SuiteArgs>),
}

/// `weir bench suite TARGET [--compare TARGET2]`.
#[derive(Debug, Args)]
pub struct SuiteArgs {
    /// HTTP base URL serving `weir origin`'s paths (directly or through a proxy), e.g.
    /// http://127.0.0.1:8080.
    pub target: String,
    /// Run the same suite against this second target too, in interleaved slices, and print
    /// both with the ratio B/A.
    #[arg(long)]
    pub compare: Option<String>,
    /// Echo server (`weir origin --echo`) HOST:PORT for the L4 rows of TARGET (default: the
    /// L4 rows are n/a).
    #[arg(long)]
    pub l4: Option<String>,
    /// Echo server HOST:PORT for the L4 rows of the --compare target (default: --l4).
    #[arg(long, requires = "compare")]
    pub compare_l4: Option<String>,
    /// Time per row per target.
    #[arg(long, value_parser = weir_bench::parse_duration, default_value = "5s")]
    pub row_duration: Duration,
    /// Rows of 1 s (overrides --row-duration).
    #[arg(long)]
    pub quick: bool,
    /// Each row runs in this many slices per target, interleaved A, B, A, B …, summed.
    #[arg(long, default_value_t = 2)]
    pub slices: u32,
    /// Connections per row.
    #[arg(short, long, default_value_t = 50)]
    pub connections: usize,
    /// Worker threads (default: one per core).
    #[arg(short, long)]
    pub threads: Option<usize>,
    /// Give up on a request after this long.
    #[arg(long, value_parser = weir_bench::parse_duration, default_value = "5s")]
    pub timeout: Duration,
    /// Print the `weir-bench-suite/1` JSON document instead of the table.
    #[arg(long)]
    pub json: bool,
}
