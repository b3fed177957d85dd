//! `weir netem`: the user-space link emulator (`up`, `exec`, `down`, and hidden measuring
//! probes for its tests).

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::time::Duration;

use anyhow::Context;
use weir_netem::probe::{tcp_send, tcp_sink};
use weir_netem::{
    DirectionConfig, Link, LinkConfig, LinkStats, Loss, Namespaces, QueueLimit, Side, Topology,
};

use crate::cli::{
    NetemArgs, NetemCommand, NetemDownArgs, NetemExecArgs, NetemProbeCommand, NetemSide,
    NetemUpArgs,
};
use crate::serve::wait_for_signal;

/// How often the counters are logged at debug level.
const STATS_INTERVAL: Duration = Duration::from_secs(1);

pub fn run(args: NetemArgs) -> anyhow::Result<()> {
    crate::logging::init(&weir_config::Log {
        access_log: false,
        level: "info".into(),
        format: weir_config::LogFormat::Text,
    });
    match args.command {
        NetemCommand::Up(up) => up_link(*up),
        NetemCommand::Exec(exec) => exec_in(exec),
        NetemCommand::Down(down) => down_link(&down),
        NetemCommand::Probe(probe) => run_probe(probe.command),
    }
}

/// Sets up the namespaces, runs the link until a signal (or a device failure), prints the
/// counters and removes everything.
fn up_link(args: NetemUpArgs) -> anyhow::Result<()> {
    let config = link_config(&args);
    let mut topology = Topology::new(&args.name)?;
    topology.a_address = args.a_address;
    topology.b_address = args.b_address;
    topology.mtu = args.mtu;
    let (namespaces, a, b) = Namespaces::create(&topology)?;
    let link = Link::start(a, b, &config).context("cannot start the link")?;

    let mut stdout = std::io::stdout();
    writeln!(
        stdout,
        "weir netem: link up: {} ({}) <-> {} ({}), seed {}\n  a-to-b: {}\n  b-to-a: {}\n  \
         run a command inside: weir netem exec a|b --name {} -- COMMAND; stop with Ctrl-C",
        topology.namespace(Side::A),
        topology.a_address,
        topology.namespace(Side::B),
        topology.b_address,
        config.seed,
        config.a_to_b,
        config.b_to_a,
        topology.prefix(),
    )?;
    stdout.flush()?;

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot build the signal runtime")?;
    runtime.block_on(async {
        let mut tick = tokio::time::interval(STATS_INTERVAL);
        let signal = wait_for_signal();
        tokio::pin!(signal);
        loop {
            tokio::select! {
                _ = &mut signal => break,
                _ = tick.tick() => {
                    if link.has_failed() {
                        tracing::error!("a link thread stopped: stopping the link");
                        break;
                    }
                    let stats = link.stats();
                    tracing::debug!(a_to_b = %stats.a_to_b, b_to_a = %stats.b_to_a, "link");
                }
            }
        }
    });
    let stopped = link.stop();
    let device_drops = [Side::A, Side::B].map(|side| namespaces.device_drops(&topology, side));
    let removed = namespaces.remove();
    let mut stats = stopped.context("the link failed")?;
    stats.a_to_b.device_drops = device_drops[0].unwrap_or(0);
    stats.b_to_a.device_drops = device_drops[1].unwrap_or(0);
    print_stats(&stats)?;
    removed?;
    Ok(())
}

fn link_config(args: &NetemUpArgs) -> LinkConfig {
    let queue = match (args.queue, args.queue_bytes) {
        (_, Some(bytes)) => QueueLimit::Bytes(bytes),
        (Some(packets), None) => QueueLimit::Packets(packets),
        (None, None) => DirectionConfig::default().queue,
    };
    let loss = |bernoulli: Option<weir_netem::Probability>,
                gilbert: Option<weir_netem::GilbertElliott>| {
        match (bernoulli, gilbert) {
            (Some(probability), _) => Some(Loss::Bernoulli(probability)),
            (None, Some(model)) => Some(Loss::GilbertElliott(model)),
            (None, None) => None,
        }
    };
    let both_loss = loss(args.loss, args.gilbert).unwrap_or_default();
    let a_to_b = DirectionConfig {
        rate: args.a_to_b_rate.or(args.rate),
        delay: args.a_to_b_delay.unwrap_or(args.delay),
        jitter: args.a_to_b_jitter.unwrap_or(args.jitter),
        loss: loss(args.a_to_b_loss, args.a_to_b_gilbert).unwrap_or(both_loss),
        queue,
    };
    let b_to_a = DirectionConfig {
        rate: args.b_to_a_rate.or(args.rate),
        delay: args.b_to_a_delay.unwrap_or(args.delay),
        jitter: args.b_to_a_jitter.unwrap_or(args.jitter),
        loss: loss(args.b_to_a_loss, args.b_to_a_gilbert).unwrap_or(both_loss),
        queue,
    };
    LinkConfig {
        a_to_b,
        b_to_a,
        seed: args.seed.unwrap_or_else(rand_seed),
    }
}

/// A seed from the clock: good enough to vary runs, and printed so a run can be repeated.
fn rand_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|since| since.as_nanos() as u64)
        .unwrap_or(0)
}

fn print_stats(stats: &LinkStats) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout();
    writeln!(stdout, "weir netem: a-to-b {}", stats.a_to_b)?;
    writeln!(stdout, "weir netem: b-to-a {}", stats.b_to_a)?;
    stdout.flush()?;
    Ok(())
}

/// Replaces this process with the command, inside the side's namespace.
fn exec_in(args: NetemExecArgs) -> anyhow::Result<()> {
    let side = match args.side {
        NetemSide::A => Side::A,
        NetemSide::B => Side::B,
    };
    let (program, rest) = args
        .command
        .split_first()
        .context("no command to run (weir netem exec a -- COMMAND)")?;
    let mut command = weir_netem::namespace::command_in(&args.name, side, program, rest)?;
    let error = command.exec();
    Err(error).context("cannot run ip netns exec")
}

fn down_link(args: &NetemDownArgs) -> anyhow::Result<()> {
    let removed = weir_netem::namespace::remove_leftovers(&args.name)?;
    if removed.is_empty() {
        println!("weir netem: nothing to remove for {}", args.name);
    }
    for what in removed {
        println!("weir netem: removed {what}");
    }
    Ok(())
}

fn run_probe(command: NetemProbeCommand) -> anyhow::Result<()> {
    match command {
        NetemProbeCommand::TcpSink {
            listen,
            warmup,
            window,
            timeout,
        } => {
            let goodput = tcp_sink(listen, warmup, window, timeout).context("tcp sink")?;
            println!(
                "goodput_bps={:.0} bytes={} seconds={:.6}",
                goodput.bits_per_second(),
                goodput.bytes,
                goodput.elapsed.as_secs_f64()
            );
        }
        NetemProbeCommand::TcpSend { to, duration } => {
            let written = tcp_send(to, duration).context("tcp send")?;
            println!("sent_bytes={written}");
        }
    }
    Ok(())
}
