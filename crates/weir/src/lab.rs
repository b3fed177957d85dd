//! `weir lab`: arguments → the experiments' settings, run them, print the tables, write the
//! JSON and HTML report with `--out` (`weir lab wan`: its own tables and JSON); exit non-zero
//! when a check or a cell failed.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use weir_lab::offload::{OffloadSettings, OriginKind};
use weir_lab::peers::Peer;
use weir_lab::process::Supervisor;
use weir_lab::suite::SuiteLabSettings;
use weir_lab::tls::TlsLabSettings;
use weir_lab::{Lab, model};

use crate::cli::{
    LabArgs, LabCommand, LabL4Args, LabOffloadArgs, LabOrigin, LabSuiteArgs, LabTlsArgs, LabWanArgs,
};

pub fn run(args: LabArgs) -> anyhow::Result<()> {
    let supervisor = Supervisor::new();
    supervisor
        .watch_signals()
        .context("cannot watch SIGINT and SIGTERM")?;
    let result = run_lab(args, &supervisor);
    if supervisor.interrupted() {
        // Interrupted: whatever the lab returned (most often a failure, its children having
        // been stopped under it), the signal thread is cleaning up and ends the process with
        // the signal's status (130, 143). The flag is set before any child is stopped.
        loop {
            std::thread::park();
        }
    }
    result
}

fn run_lab(args: LabArgs, supervisor: &Arc<Supervisor>) -> anyhow::Result<()> {
    // Settings are checked before anything starts: the directory the results go to too,
    // so a long run does not end without them.
    if let Some(dir) = &args.out {
        writable_dir(dir)?;
    }
    let weir = std::env::current_exe().context("cannot find the weir binary")?;
    let mut lab = Lab::new(Arc::clone(supervisor), weir, !args.quiet, args.install);
    // As typed, with the binary's path shortened to its name.
    let command = std::iter::once("weir".to_owned())
        .chain(std::env::args().skip(1))
        .collect::<Vec<_>>()
        .join(" ");
    let report = match &args.command {
        None => quick(&mut lab, &command)?,
        Some(LabCommand::Wan(wan)) => return run_wan(&lab, wan, args.out.as_deref(), &command),
        Some(LabCommand::L4(l4)) => return run_l4(&mut lab, l4, args.out.as_deref()),
        Some(LabCommand::Offload(offload)) => {
            let settings = offload_settings(offload);
            settings.validate()?;
            let result = weir_lab::offload::run(&mut lab, &settings)?;
            lab.report(&command, Some(result), None, None)
        }
        Some(LabCommand::Tls(tls)) => {
            let settings = tls_settings(tls);
            settings.validate()?;
            let result = weir_lab::tls::run(&mut lab, &settings)?;
            lab.report(&command, None, Some(result), None)
        }
        Some(LabCommand::Suite(suite)) => {
            let settings = suite_settings(suite);
            settings.validate()?;
            let result = weir_lab::suite::run(&mut lab, &settings)?;
            lab.report(&command, None, None, Some(result))
        }
    };
    finish(&report, &args)
}

/// `weir lab` alone: a quick version of all three, peers included when installed.
fn quick(lab: &mut Lab, command: &str) -> anyhow::Result<model::LabReport> {
    let offload = weir_lab::offload::run(lab, &OffloadSettings::quick())?;
    let tls = weir_lab::tls::run(lab, &TlsLabSettings::quick())?;
    let mut suite = SuiteLabSettings::quick();
    for peer in [Peer::Haproxy, Peer::Nginx] {
        if weir_lab::peers::find_program(peer.name()).is_some() || lab.install {
            suite.peers.push(peer);
        } else {
            lab.note(format!(
                "{} is not installed: the suite ran without it (apt-get install {}, or weir lab --install)",
                peer.name(),
                peer.package()
            ));
        }
    }
    let suite = weir_lab::suite::run(lab, &suite)?;
    Ok(lab.report(command, Some(offload), Some(tls), Some(suite)))
}

/// Makes `dir` (and its parents) if missing and checks that a file can be written in it.
fn writable_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("--out {}", dir.display()))?;
    let probe = dir.join(format!(".weir-lab-{}", std::process::id()));
    std::fs::write(&probe, b"")
        .with_context(|| format!("--out {}: cannot write in it", dir.display()))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

fn finish(report: &model::LabReport, args: &LabArgs) -> anyhow::Result<()> {
    print!("{}", weir_lab::table::lab_text(report));
    if let Some(dir) = &args.out {
        let (json, html) = weir_lab::write_outputs(report, dir)?;
        println!(
            "\nwritten: {} and {} (open it in a browser)",
            json.display(),
            html.display()
        );
    }
    if weir_lab::all_passed(report) {
        Ok(())
    } else {
        anyhow::bail!("a check failed (see FAIL above)")
    }
}

/// `weir lab wan`: the matrix's tables on stdout, its JSON to `--json` and `--out`'s
/// `wan.json`.
fn run_l4(lab: &mut Lab, args: &LabL4Args, out: Option<&Path>) -> anyhow::Result<()> {
    let settings = weir_lab::l4::L4LabSettings {
        clients: args.clients,
        cap: args.cap,
        size: args.size,
        timeout: args.timeout,
        proxy_threads: args.proxy_threads,
        direct: !args.no_direct,
    };
    settings.validate()?;
    let report = weir_lab::l4::run(lab, &settings)?;
    print!("{}", weir_lab::l4::text(&report));
    let out_json = out.map(|dir| dir.join("l4.json"));
    for path in args.json.iter().chain(&out_json) {
        if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
        }
        weir_lab::l4::write_json(&report, path)?;
    }
    let failed: Vec<&str> = report
        .checks
        .iter()
        .filter(|check| !check.passed)
        .map(|check| check.name.as_str())
        .collect();
    anyhow::ensure!(failed.is_empty(), "checks failed: {}", failed.join("; "));
    Ok(())
}

fn run_wan(lab: &Lab, args: &LabWanArgs, out: Option<&Path>, command: &str) -> anyhow::Result<()> {
    let plan = weir_lab::wan::Plan {
        tunnel_only: args.tunnel_only,
        congestion: args.congestion.clone(),
        fec: args.fec.clone(),
        transport: args.transport.clone(),
        ..weir_lab::wan::Plan::new(
            args.quick,
            &args.rates,
            &args.delays,
            &args.losses,
            args.transfer_time,
        )
    };
    plan.validate()?;
    let results = weir_lab::wan::run(lab, &plan)?;
    println!("{}", weir_lab::wan::table(&results));
    let out_json = match out {
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            Some(dir.join("wan.json"))
        }
        None => None,
    };
    let paths = args.json.iter().chain(&out_json).map(|path| path.as_path());
    weir_lab::wan::write_json(&results, command, paths)?;
    let failed = weir_lab::wan::failures(&results);
    anyhow::ensure!(failed.is_empty(), "cells failed:\n{}", failed.join("\n"));
    Ok(())
}

fn offload_settings(args: &LabOffloadArgs) -> OffloadSettings {
    let base = if args.quick {
        OffloadSettings::quick()
    } else {
        OffloadSettings::full()
    };
    OffloadSettings {
        clients: args.clients.unwrap_or(base.clients),
        origin_cap: args.origin_cap.unwrap_or(base.origin_cap),
        pool_cap: args.pool_cap.or(base.pool_cap),
        origin: match args.origin {
            LabOrigin::Builtin => OriginKind::Builtin,
            LabOrigin::Nginx => OriginKind::Nginx,
        },
        connection_memory: args.connection_memory.unwrap_or(base.connection_memory),
        interval: args.interval.unwrap_or(base.interval),
        ramp: args.ramp.unwrap_or(base.ramp),
        duration: args.duration.unwrap_or(base.duration),
        timeout: args.timeout.unwrap_or(base.timeout),
        sources: args.sources.or(base.sources),
        proxy_threads: args.proxy_threads.unwrap_or(base.proxy_threads),
        path: args.path.clone().unwrap_or(base.path),
        direct: !args.no_direct,
        peers: args.peers.clone(),
        sample_every: args.sample_every.unwrap_or(base.sample_every),
    }
}

fn tls_settings(args: &LabTlsArgs) -> TlsLabSettings {
    let base = if args.quick {
        TlsLabSettings::quick()
    } else {
        TlsLabSettings::full()
    };
    TlsLabSettings {
        clients: args.clients.unwrap_or(base.clients),
        duration: args.duration.unwrap_or(base.duration),
        path: args.path.clone().unwrap_or(base.path),
        resumption: args.resumption,
        proxy_threads: args.proxy_threads.unwrap_or(base.proxy_threads),
        bench_threads: args.bench_threads.unwrap_or(base.bench_threads),
        timeout: base.timeout,
    }
}

fn suite_settings(args: &LabSuiteArgs) -> SuiteLabSettings {
    let base = if args.quick {
        SuiteLabSettings::quick()
    } else {
        SuiteLabSettings::full()
    };
    SuiteLabSettings {
        row_duration: args.row_duration.unwrap_or(base.row_duration),
        connections: args.connections.unwrap_or(base.connections),
        bench_threads: args.bench_threads.or(base.bench_threads),
        proxy_threads: args.proxy_threads.unwrap_or(base.proxy_threads),
        peers: args.peers.clone(),
        timeout: base.timeout,
    }
}
