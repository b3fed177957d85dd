//! attackers — resource-exhaustion load for `bench/exhaustion`.
//!
//! ```text
//! # the misbehaving nodes: one that never reads, one that sends late bodies, one that
//! # switches to WebSocket and idles
//! cargo run --release -p weir-testkit --example attackers -- nodes \
//!     --stalled 127.0.0.1:18391 --late 127.0.0.1:18392 --websocket 127.0.0.1:18393 --duration 60s
//! # attacking connections of every kind against weir
//! cargo run --release -p weir-testkit --example attackers -- attack \
//!     --target 127.0.0.1:18390 --connections 10000 --sources 8 --ramp 10s --duration 40s
//! ```
//!
//! The kinds (`weir_testkit::attack`): slowloris, slow POST, slow read, idle upgrade
//! (`/ws`), upload to a node that stops reading (`/sink`), HEAD to a node that sends late
//! bodies (`/late`); `--heavy` (100) each of the last two, which move data, and the rest
//! of `--connections` split evenly among the four that only hold connections. Every attacker reconnects when weir
//! closes it, until `--duration`; targets are 127.0.0.0/8 only. The summary (one JSON
//! line) gives the peak of open attacking connections and how many weir closed.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::bail;
use clap::{Parser, Subcommand};
use tokio::net::TcpListener;
use weir_testkit::attack::{self, Attack, AttackPlan};

#[derive(Parser, Debug)]
#[command(about = "Resource-exhaustion attackers and misbehaving nodes (loopback only)")]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve the misbehaving nodes until --duration.
    Nodes {
        #[arg(long)]
        stalled: SocketAddr,
        #[arg(long)]
        late: SocketAddr,
        #[arg(long)]
        websocket: SocketAddr,
        #[arg(long, value_parser = parse_seconds)]
        duration: Duration,
    },
    /// Attack --target with --connections connections of every kind.
    Attack {
        #[arg(long)]
        target: SocketAddr,
        #[arg(long, default_value_t = 600)]
        connections: u32,
        /// Of them, uploads to the stalled node and HEADs to the late-body node, each (they
        /// move data, the rest only hold connections).
        #[arg(long, default_value_t = 100)]
        heavy: u32,
        /// 127.0.0.x source addresses (10.., for more than ~28k local ports).
        #[arg(long, default_value_t = 1)]
        sources: u8,
        #[arg(long, default_value = "5s", value_parser = parse_seconds)]
        ramp: Duration,
        #[arg(long, default_value = "30s", value_parser = parse_seconds)]
        duration: Duration,
        #[arg(long, default_value_t = 2)]
        threads: usize,
    },
}

fn parse_seconds(text: &str) -> Result<Duration, String> {
    let number = text.trim_end_matches('s');
    number
        .parse::<f64>()
        .map(Duration::from_secs_f64)
        .map_err(|_| format!("\"{text}\": seconds, like 30s"))
}

fn main() -> anyhow::Result<()> {
    // The open-file limit is the caller's: bench/exhaustion raises it before starting us.
    let args = Args::parse();
    let threads = match &args.command {
        Command::Attack { threads, .. } => *threads,
        Command::Nodes { .. } => 1,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()?;
    runtime.block_on(run(args.command))
}

async fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Nodes {
            stalled,
            late,
            websocket,
            duration,
        } => {
            for address in [stalled, late, websocket] {
                if !address.ip().is_loopback() {
                    bail!("{address}: loopback addresses only");
                }
            }
            tokio::spawn(attack::stalled_node(TcpListener::bind(stalled).await?));
            tokio::spawn(attack::late_body_node(TcpListener::bind(late).await?));
            tokio::spawn(attack::websocket_node(TcpListener::bind(websocket).await?));
            tokio::time::sleep(duration).await;
            Ok(())
        }
        Command::Attack {
            target,
            connections,
            heavy,
            sources,
            ramp,
            duration,
            ..
        } => {
            if !target.ip().is_loopback() {
                bail!("{target}: loopback targets only");
            }
            let heavy = heavy.min(connections / 6);
            let holding = (connections - 2 * heavy) / 4;
            let per_attack: Vec<(Attack, u32)> = Attack::ALL
                .iter()
                .map(|&kind| match kind {
                    Attack::Upload | Attack::LateBody => (kind, heavy),
                    _ => (kind, holding),
                })
                .collect();
            let total: u32 = per_attack.iter().map(|(_, n)| n).sum();
            let plan = AttackPlan {
                target,
                per_attack: per_attack.clone(),
                sources,
                ramp,
                duration,
            };
            let stats = attack::run(plan).await;
            println!(
                "{{\"connections\": {total}, \"per_kind\": {{{}}}, \"peak_open\": {}, \"opened\": {}, \"closed_by_weir\": {}, \"connect_failures\": {}}}",
                per_attack
                    .iter()
                    .map(|(kind, n)| format!("\"{}\": {n}", kind.name()))
                    .collect::<Vec<_>>()
                    .join(", "),
                stats.peak.load(Ordering::Relaxed),
                stats.opened.load(Ordering::Relaxed),
                stats.closed_by_target.load(Ordering::Relaxed),
                stats.connect_failures.load(Ordering::Relaxed)
            );
            Ok(())
        }
    }
}
