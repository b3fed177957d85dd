//! `weir tunnel client|server` (the WAN tunnel pair), its hidden lab probes, and
//! `weir lab wan` (the WAN matrix).

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use weir_tunnel::config::{Role, load_file};
use weir_tunnel::lab::probe::{self, FileSpec, Variant};
use weir_tunnel::{Client, Metrics, Server, metrics};

use crate::serve::wait_for_signal;

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
        #[arg(long, value_parser = weir_netem::parse_duration, default_value = "60s")]
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
        #[arg(long, default_value_t = weir_tunnel::config::DEFAULT_LEVEL)]
        level: i32,
    },
}

/// `weir lab wan`: the seed report's WAN matrix (needs root).
#[derive(Debug, Clone, Args)]
pub struct LabWanArgs {
    /// A small subset for CI: T1 at 30 ms clean and 250 ms with 1 % loss, OC-1 at 100 ms
    /// with 1 % loss, 8 s per transfer.
    #[arg(long)]
    pub quick: bool,
    /// Rates to run [default: t1 and oc1].
    #[arg(long = "rate", value_parser = parse_rate)]
    pub rates: Vec<weir_tunnel::lab::LinkRate>,
    /// One-way delays in ms [default: 0, 30, 100, 250].
    #[arg(long = "delay")]
    pub delays: Vec<u32>,
    /// Loss in percent, each direction [default: 0, 0.1, 1, 5].
    #[arg(long = "loss")]
    pub losses: Vec<f64>,
    /// The most one transfer may take [default: 20s; --quick: 8s].
    #[arg(long, value_parser = weir_netem::parse_duration)]
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

fn parse_variant(text: &str) -> Result<Variant, String> {
    Variant::parse(text).ok_or_else(|| format!("invalid variant {text:?}: original or edited"))
}

fn parse_rate(text: &str) -> Result<weir_tunnel::lab::LinkRate, String> {
    match text.to_ascii_lowercase().as_str() {
        "t1" => Ok(weir_tunnel::lab::LinkRate::T1),
        "oc1" | "oc-1" => Ok(weir_tunnel::lab::LinkRate::Oc1),
        _ => Err(format!("invalid rate {text:?}: t1 or oc1")),
    }
}

pub fn run(args: TunnelArgs) -> anyhow::Result<()> {
    crate::logging::init(&weir_config::Log {
        access_log: false,
        level: "info".into(),
        format: weir_config::LogFormat::Text,
    });
    match args.command {
        TunnelCommand::Client(side) => run_side(&side, Role::Client),
        TunnelCommand::Server(side) => run_side(&side, Role::Server),
        TunnelCommand::Probe(probe) => run_probe(probe.command),
    }
}

/// Loads the config (exits before binding anything if it or a certificate is bad), binds,
/// runs until SIGINT or SIGTERM, and prints the counters.
fn run_side(args: &SideArgs, role: Role) -> anyhow::Result<()> {
    let config = load_file(&args.config, role).map_err(|error| anyhow::anyhow!("{error}"))?;
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = args.threads {
        builder.worker_threads(threads.max(1));
    }
    let runtime = builder
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    runtime.block_on(async {
        let metrics = Arc::new(Metrics::default());
        let metrics_listen = config.metrics;
        let name = match role {
            Role::Client => "client",
            Role::Server => "server",
        };
        let side = match role {
            Role::Client => Side::Client(Client::bind(config, Arc::clone(&metrics)).await?),
            Role::Server => Side::Server(Server::bind(config, Arc::clone(&metrics))?),
        };
        if args.check {
            println!("weir tunnel {name}: {} is valid", args.config.display());
            return Ok(());
        }
        if let Some(address) = metrics_listen {
            let listener = weir_tunnel::metrics_http::bind(address)
                .await
                .with_context(|| format!("cannot listen for metrics on {address}"))?;
            tokio::spawn(weir_tunnel::metrics_http::serve(
                listener,
                Arc::clone(&metrics),
            ));
        }
        let mut stdout = std::io::stdout();
        match &side {
            Side::Client(client) => {
                for (service, address) in client.listen_addresses() {
                    writeln!(
                        stdout,
                        "weir tunnel client: listening for {service} on {address}"
                    )?;
                }
                tokio::spawn(announce_connected(Arc::clone(&metrics)));
            }
            Side::Server(server) => {
                writeln!(
                    stdout,
                    "weir tunnel server: listening on {}",
                    server.local_addr()?
                )?;
            }
        }
        stdout.flush()?;
        match side {
            Side::Client(client) => client.run(wait_for_signal()).await,
            Side::Server(server) => server.run(wait_for_signal()).await,
        }
        println!("weir tunnel {name}: stopped: {}", metrics.summary());
        anyhow::Ok(())
    })
}

enum Side {
    Client(Client),
    Server(Server),
}

/// Prints a line when the near side's tunnel first comes up (the lab waits for it).
async fn announce_connected(metrics: Arc<Metrics>) {
    while metrics.get(metrics::CONNECTED) == 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!("weir tunnel client: connected");
    let _ = std::io::stdout().flush();
}

fn run_probe(command: ProbeCommand) -> anyhow::Result<()> {
    match command {
        ProbeCommand::Serve {
            listen,
            file,
            congestion,
        } => probe::serve(listen, spec(file), congestion.as_deref()).context("file server"),
        ProbeCommand::Fetch {
            to,
            variant,
            file,
            timeout,
            parallel,
        } => {
            let fetched =
                probe::fetch_many(to, spec(file), variant, timeout, parallel).context("fetch")?;
            println!(
                "bytes={} seconds={:.6} first_byte={:.6} complete={} verified={}",
                fetched.bytes,
                fetched.seconds,
                fetched.first_byte_seconds,
                fetched.complete,
                fetched.verified
            );
            Ok(())
        }
        ProbeCommand::Pipeline { size, level } => {
            pipeline(size, level);
            Ok(())
        }
    }
}

/// Prints the pipeline's cost per data kind: stream MB per CPU second, one thread.
fn pipeline(size: usize, level: i32) {
    use weir_tunnel::lab::pipeline::{Ends, default_settings, log_lines, measure};
    let settings = weir_tunnel::codec::EncoderSettings {
        compression: Some(level),
        ..default_settings()
    };
    let random = probe::pseudo_random(size, 1);
    let mut edited = random.clone();
    probe::apply_edits(
        &mut edited,
        (size as f64 / (64 << 20) as f64 * 100.0) as u32,
        2,
    );
    let text = log_lines(size, 3);
    let budget = 2 * size as u64 + (64 << 20);
    let (mut ends, mut text_ends) = (Ends::new(budget), Ends::new(budget));
    println!("pass             MB     encoded MB  encode MB/CPU-s  decode MB/CPU-s");
    for (label, data, text) in [
        ("random, new", &random, false),
        ("random, repeat", &random, false),
        ("random, edited", &edited, false),
        ("log text, new", &text, true),
    ] {
        let ends = if text { &mut text_ends } else { &mut ends };
        let cost = measure(data, settings, ends);
        println!(
            "{label:15} {:>7.1} {:>13.2} {:>16.0} {:>16.0}",
            cost.bytes as f64 / 1e6,
            cost.encoded as f64 / 1e6,
            cost.encode_mb_per_cpu_second(),
            cost.decode_mb_per_cpu_second()
        );
    }
}

/// Writes the results as JSON, with the date and the command as typed, to each path.
fn write_json(
    paths: impl Iterator<Item = PathBuf>,
    results: &[weir_tunnel::lab::CellResult],
) -> anyhow::Result<()> {
    let command = std::iter::once("weir".to_owned())
        .chain(std::env::args().skip(1))
        .collect::<Vec<_>>()
        .join(" ");
    let date = std::process::Command::new("date")
        .arg("-u")
        .arg("+%Y-%m-%dT%H:%M:%SZ")
        .output()
        .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_owned())
        .unwrap_or_default();
    for path in paths {
        std::fs::write(&path, weir_tunnel::lab::json(results, &date, &command))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

fn spec(file: FileArgs) -> FileSpec {
    FileSpec {
        size: file.size,
        seed: file.seed,
        edits: file.edits,
    }
}

/// `weir lab wan`; `out` (`weir lab --out DIR`) also gets `wan.json`, `quiet` drops the
/// progress lines.
pub fn lab_wan(args: LabWanArgs, out: Option<PathBuf>, quiet: bool) -> anyhow::Result<()> {
    let mut cells = if args.quick {
        weir_tunnel::lab::quick_matrix()
    } else {
        weir_tunnel::lab::full_matrix()
    };
    cells.retain(|cell| {
        (args.rates.is_empty() || args.rates.contains(&cell.rate))
            && (args.delays.is_empty() || args.delays.contains(&cell.delay_ms))
            && (args.losses.is_empty() || args.losses.contains(&cell.loss_percent))
    });
    anyhow::ensure!(
        !cells.is_empty(),
        "no cell of the matrix matches --rate, --delay and --loss"
    );
    anyhow::ensure!(
        ["wan", "bbr", "cubic"].contains(&args.congestion.as_str()),
        "--congestion: wan, bbr or cubic"
    );
    anyhow::ensure!(
        ["auto", "on", "off"].contains(&args.fec.as_str()),
        "--fec: auto, on or off"
    );
    anyhow::ensure!(
        ["quic", "tcp"].contains(&args.transport.as_str()),
        "--transport: quic or tcp"
    );
    let transfer_time = args.transfer_time.unwrap_or(if args.quick {
        Duration::from_secs(8)
    } else {
        Duration::from_secs(20)
    });
    let work_dir = std::env::temp_dir().join(format!("weir-lab-wan-{}", std::process::id()));
    let plan = weir_tunnel::lab::Plan {
        cells,
        transfer_time,
        binary: std::env::current_exe().context("cannot find the weir binary")?,
        work_dir: work_dir.clone(),
        tunnel_only: args.tunnel_only,
        congestion: args.congestion.clone(),
        fec: args.fec.clone(),
        transport: args.transport.clone(),
    };
    let results = if quiet {
        weir_tunnel::lab::run(&plan, &mut std::io::sink())
    } else {
        weir_tunnel::lab::run(&plan, &mut std::io::stderr())
    };
    let _ = std::fs::remove_dir_all(&work_dir);
    let results = results?;
    println!("{}", weir_tunnel::lab::table(&results));
    if let Some(dir) = &out {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let json_paths = args
        .json
        .iter()
        .cloned()
        .chain(out.map(|dir| dir.join("wan.json")));
    write_json(json_paths, &results)?;
    let failed: Vec<String> = results
        .iter()
        .filter(|result| !result.errors.is_empty() || result.tunnel_original.is_none())
        .map(|result| format!("{:?}: {}", result.cell, result.errors.join("; ")))
        .collect();
    anyhow::ensure!(failed.is_empty(), "cells failed:\n{}", failed.join("\n"));
    Ok(())
}
