//! The `weir` binary: argument parsing and wiring, nothing else.

mod bench;
mod cert;
mod cli;
mod lab;
mod logging;
mod netem;
mod origin;
mod serve;
mod tunnel;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => serve::run(args),
        Command::Check(args) => return serve::check(&args),
        Command::Origin(args) => origin::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Netem(args) => netem::run(args),
        Command::Cert(args) => cert::run(&args),
        Command::Lab(args) => lab::run(args),
        Command::Tunnel(args) => tunnel::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("weir: {error:#}");
            ExitCode::FAILURE
        }
    }
}
