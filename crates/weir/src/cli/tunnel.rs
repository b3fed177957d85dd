//! Arguments of `weir tunnel` (with its hidden measuring probes) and `weir lab wan`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use weir_bench::parse_duration;
use weir_lab::wan::LinkRate;
use weir_lab::wan::probe::{FileSpec, Variant};

/// `weir tunnel`: one side of a WAN tunnel.
#[derive(Debug, Args)]
pub struct TunnelArgs {
    #[command(subcommand)]
    pub command: TunnelCommand,
}

#[derive(Debug, Subcommand)]
pub enum TunnelCommand {
    /// The near side: accepts TCP for each service and carries it to the far side.
    Client(SideArgs),
    /// The far side: accepts the near side's tunnel and connects to the real servers.
    Server(SideArgs),
    /// Measuring probes for `weir lab wan` and the tests.
    #[command(hide = true)]
    Probe(ProbeArgs),
}

#[derive(Debug, Args)]
pub struct SideArgs {
    /// The tunnel config file (TOML; see examples/tunnel/).
    #[arg(short, long)]
    pub config: PathBuf,
    /// Validate the config and its certificate files, then exit.
    #[arg(long)]
    pub check: bool,
    /// Worker threads [default: the number of cores].
    #[arg(long)]
    pub threads: Option<usize>,
}

#[derive(Debug, Args)]
pub struct ProbeArgs {
    #[command(subcommand)]
    pub command: ProbeCommand,
}

/// The generated file both probes agree on.
#[derive(Debug, Clone, Copy, Args)]
pub struct FileArgs {
    #[arg(long)]
    pub size: usize,
    #[arg(long)]
    pub seed: u64,
    #[arg(long)]
    pub edits: u32,
}

#[derive(Debug, Subcommand)]
pub enum ProbeCommand {
    /// Serve the original (`o`) and edited (`e`) files until killed.
    Serve {
        #[arg(long)]
        listen: SocketAddr,
        #[command(flatten)]
        file: FileArgs,
        /// TCP congestion control of the sending sockets.
        #[arg(long)]
        congestion: Option<String>,
    },
    /// Download one file, check it, print `bytes= seconds= complete= verified=`.
    Fetch {
        #[arg(long)]
        to: SocketAddr,
        #[arg(long, value_parser = parse_variant)]
        variant: Variant,
        #[command(flatten)]
        file: FileArgs,
        #[arg(long, value_parser = parse_duration, default_value = "60s")]
        timeout: Duration,
        /// Download this many copies at once (each checked).
        #[arg(long, default_value_t = 1)]
        parallel: usize,
    },
    /// CPU cost of the encode and decode pipeline (no I/O), per data kind.
    Pipeline {
        /// Bytes per pass.
        #[arg(long, default_value_t = 256 << 20)]
        size: usize,
        /// zstd level.
        #[arg(long, default_value_t = weir_tunnel::DEFAULT_LEVEL)]
        level: i32,
    },
}

/// `weir lab wan`: the WX report's WAN matrix (needs root).
#[derive(Debug, Clone, Args)]
pub struct LabWanArgs {
    /// A small subset for CI: T1 at 30 ms clean and 250 ms with 1 % loss, OC-1 at 100 ms
    /// with 1 % loss, 8 s per transfer.
    #[arg(long)]
    pub quick: bool,
    /// Rates to run [default: t1 and oc1].
    #[arg(long = "rate", value_parser = parse_rate)]
    pub rates: Vec<LinkRate>,
    /// One-way delays in ms [default: 0, 30, 100, 250].
    #[arg(long = "delay")]
    pub delays: Vec<u32>,
    /// Loss in percent, each direction [default: 0, 0.1, 1, 5].
    #[arg(long = "loss")]
    pub losses: Vec<f64>,
    /// The most one transfer may take [default: 20s; --quick: 8s].
    #[arg(long, value_parser = parse_duration)]
    pub transfer_time: Option<Duration>,
    /// Only the tunnel, no baseline.
    #[arg(long)]
    pub tunnel_only: bool,
    /// The tunnel's congestion controller: wan, bbr or cubic.
    #[arg(long, default_value = "wan")]
    pub congestion: String,
    /// The tunnel's forward error correction: auto, on or off.
    #[arg(long, default_value = "auto")]
    pub fec: String,
    /// The tunnel's transport: quic (over UDP) or tcp (the fallback for paths that block
    /// UDP).
    #[arg(long, default_value = "quic")]
    pub transport: String,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

impl From<FileArgs> for FileSpec {
    fn from(file: FileArgs) -> FileSpec {
        FileSpec {
            size: file.size,
            seed: file.seed,
            edits: file.edits,
        }
    }
}

fn parse_variant(text: &str) -> Result<Variant, String> {
    Variant::parse(text).ok_or_else(|| format!("invalid variant {text:?}: original or edited"))
}

fn parse_rate(text: &str) -> Result<LinkRate, String> {
    match text.to_ascii_lowercase().as_str() {
        "t1" => Ok(LinkRate::T1),
        "oc1" | "oc-1" => Ok(LinkRate::Oc1),
        _ => Err(format!("invalid rate {text:?}: t1 or oc1")),
    }
}
