//! h2flood — HTTP/2 floods for `bench/h2-flood` (loopback only).
//!
//! ```text
//! cargo run --release -p weir-testkit --example h2flood -- \
//!     --target 127.0.0.1:18443 --tls --kind rapid_reset --connections 4 --seconds 10
//! ```
//!
//! Kinds: rapid_reset, continuation, settings, ping, empty_frames, window_update,
//! ignored_frames
//! (`weir_testkit::h2flood`). Each connection floods until the server closes it, then
//! reconnects, until --duration. The summary (one JSON line) counts connections, frames
//! sent, and the GOAWAYs received (ENHANCE_YOUR_CALM or other) or closes without one.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use weir_testkit::h2flood::{self, FloodKind, FloodPlan};

#[derive(Parser, Debug)]
#[command(about = "HTTP/2 flood client (loopback only)")]
struct Args {
    /// The HTTP/2 server (a loopback address).
    #[arg(long)]
    target: SocketAddr,
    /// TLS with ALPN h2 (certificate not verified); without it, h2c prior knowledge.
    #[arg(long)]
    tls: bool,
    /// rapid_reset, continuation, settings, ping, empty_frames, window_update
    /// or ignored_frames.
    #[arg(long)]
    kind: String,
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// How long to flood, in seconds.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let Some(kind) = FloodKind::from_name(&args.kind) else {
        bail!("unknown kind {:?}", args.kind);
    };
    let plan = FloodPlan {
        target: args.target,
        tls: args.tls,
        kind,
        connections: args.connections,
        duration: Duration::from_secs(args.seconds),
    };
    let stats = h2flood::run(&plan).await.context("flood")?;
    println!("{}", stats.to_json());
    Ok(())
}
