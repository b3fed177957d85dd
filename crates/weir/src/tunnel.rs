//! `weir tunnel client|server` (the WAN tunnel pair) and its hidden measuring probes.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use tokio::signal::unix::{SignalKind, signal};
use weir_lab::wan::probe;
use weir_tunnel::{Client, Metrics, Role, Server, load_file};

use crate::cli::{ProbeCommand, SideArgs, TunnelArgs, TunnelCommand};

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
    if args.check {
        // Certificates and keys as binding checks them, and no port taken: a new file can
        // be checked beside the side that runs the old one.
        let checked = match role {
            Role::Client => Client::check(&config),
            Role::Server => Server::check(&config),
        };
        checked?;
        let name = match role {
            Role::Client => "client",
            Role::Server => "server",
        };
        println!("weir tunnel {name}: {} is valid", args.config.display());
        return Ok(());
    }
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = args.threads {
        builder.worker_threads(threads.max(1));
    }
    let runtime = builder
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    runtime.block_on(async {
        let metrics = Metrics::new();
        let admin_address = config.metrics;
        let name = match role {
            Role::Client => "client",
            Role::Server => "server",
        };
        let side = match role {
            Role::Client => Side::Client(Client::bind(config, Arc::clone(&metrics)).await?),
            Role::Server => Side::Server(Server::bind(config, Arc::clone(&metrics))?),
        };
        // The admin listener, as `weir serve` runs it: `/metrics`, and `/healthz` answering
        // 503 once the side is stopping.
        let stopping = Arc::new(AtomicBool::new(false));
        let (admin_stop, admin_signal) = weir_core::Shutdown::new();
        if let Some(address) = admin_address {
            let listener = tokio::net::TcpListener::bind(address)
                .await
                .with_context(|| format!("cannot listen for metrics on {address}"))?;
            let health = Arc::clone(&stopping);
            let state = weir_admin::AdminState::new(
                Arc::clone(metrics.registry()),
                Arc::new(move || !health.load(Ordering::Relaxed)),
            );
            tokio::spawn(weir_admin::serve(listener, state, admin_signal));
        }
        // Listen for the signals before announcing: a SIGTERM right after the
        // "listening" line must stop the side cleanly, not kill it.
        let mut terminate = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
        let mut interrupt = signal(SignalKind::interrupt()).context("cannot listen for SIGINT")?;
        crate::serve::ignore_operator_signals("weir tunnel")?;
        announce(&side, &metrics)?;
        let stop = async {
            tokio::select! {
                _ = terminate.recv() => {}
                _ = interrupt.recv() => {}
            }
            stopping.store(true, Ordering::Relaxed);
        };
        match side {
            Side::Client(client) => client.run(stop).await,
            Side::Server(server) => server.run(stop).await,
        }
        admin_stop.trigger();
        println!("weir tunnel {name}: stopped: {}", metrics.summary());
        anyhow::Ok(())
    })
}

enum Side {
    Client(Client),
    Server(Server),
}

/// Prints where the side listens, and for the near side a line when its tunnel first comes
/// up (the lab waits for both).
fn announce(side: &Side, metrics: &Arc<Metrics>) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout();
    match side {
        Side::Client(client) => {
            for (service, address) in client.listen_addresses() {
                writeln!(
                    stdout,
                    "weir tunnel client: listening for {service} on {address}"
                )?;
            }
            let metrics = Arc::clone(metrics);
            tokio::spawn(async move {
                while metrics.handles().connected.get() == 0 {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                println!("weir tunnel client: connected");
                let _ = std::io::stdout().flush();
            });
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
    Ok(())
}

fn run_probe(command: ProbeCommand) -> anyhow::Result<()> {
    match command {
        ProbeCommand::Serve {
            listen,
            file,
            congestion,
        } => probe::serve(listen, file.into(), congestion.as_deref()).context("file server"),
        ProbeCommand::Fetch {
            to,
            variant,
            file,
            timeout,
            parallel,
        } => {
            let fetched =
                probe::fetch_many(to, file.into(), variant, timeout, parallel).context("fetch")?;
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
    use weir_tunnel::pipeline::{Ends, log_lines, measure, settings};
    let settings = settings(level);
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
