//! The `weir` binary: argument parsing and wiring, nothing else.

mod bench;
mod cert;
mod cli;
mod lab;
mod logging;
mod netem;
mod origin;
mod reload;
mod serve;
mod systemd;
mod tunnel;
mod upgrade;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command};

/// jemalloc rather than glibc's malloc: its size classes fit the 128-byte-aligned blocks
/// tokio allocates per connection (the task, the socket's registration) without the padding
/// glibc's aligned allocations leave, so an idle client connection costs 0.87 KiB of RSS
/// instead of 1.18 (`bench/idle`, 8,000 connections), for 2 MiB more at start and no
/// measurable change in CPU per request (`bench/compare`); see BENCHMARKING.md.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => serve::run(args),
        Command::Check(args) => {
            let code = serve::check(&args);
            logging::flush();
            return code;
        }
        Command::Reload(args) => return reload::run(&args),
        Command::Origin(args) => origin::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Netem(args) => netem::run(args),
        Command::Cert(args) => cert::run(&args),
        Command::Lab(args) => lab::run(args),
        Command::Tunnel(args) => tunnel::run(args),
    };
    // weir's own log is written by a thread of its own: what it still holds goes out first.
    logging::flush();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("weir: {error:#}");
            // A refused configuration exits as `weir check` does; anything else with 1.
            match error.downcast_ref::<weir_config::ConfigError>() {
                Some(_) => ExitCode::from(2),
                None => ExitCode::FAILURE,
            }
        }
    }
}
