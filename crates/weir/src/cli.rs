//! Command-line arguments.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

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
}
