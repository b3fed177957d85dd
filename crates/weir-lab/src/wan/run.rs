//! Runs the cells: namespaces and link in this process, the file server, fetches and tunnel
//! sides as child processes in the namespaces (`ip netns exec`), each stopped by its PID.

use std::process::Command;
use std::time::Duration;

use weir_netem::namespace::command_in;
use weir_netem::{
    DirectionConfig, Link, LinkConfig, LinkStats, Loss, Namespaces, Probability, QueueLimit, Side,
    Topology,
};
use weir_tls::{KeyType, TestCa};

use super::probe::{FileSpec, Variant};
use super::{Cell, CellResult, Plan, Transfer, file_for};
use crate::Lab;
use crate::error::LabError;
use crate::process::{Child, Leftover, RunDir};

const FILE_PORT: u16 = 9000;
const TUNNEL_PORT: u16 = 4433;
const SERVICE_PORT: u16 = 9001;

/// How long a started server or tunnel side gets to say it is ready.
const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// Runs every cell of the plan, with progress lines when the lab prints them. A cell that
/// fails is recorded in its result; an error here means the lab could not run at all.
pub fn run(lab: &Lab, plan: &Plan) -> Result<Vec<CellResult>, LabError> {
    weir_netem::namespace::require_root()?;
    let dir = RunDir::create(&lab.supervisor)?;
    write_certificates(&dir)?;
    let mut results = Vec::with_capacity(plan.cells.len());
    for (index, cell) in plan.cells.iter().enumerate() {
        lab.say(&format!(
            "wan: cell {}/{}: {} one-way {} ms, loss {} %",
            index + 1,
            plan.cells.len(),
            cell.rate.label(),
            cell.delay_ms,
            cell.loss_percent
        ));
        results.push(run_cell(lab, &dir, plan, cell, index as u64 + 1)?);
    }
    Ok(results)
}

fn run_cell(
    lab: &Lab,
    dir: &RunDir,
    plan: &Plan,
    cell: &Cell,
    seed: u64,
) -> Result<CellResult, LabError> {
    let spec = file_for(cell, plan.transfer_time, seed);
    let mut result = CellResult {
        cell: *cell,
        file_bytes: spec.size as u64,
        edits: spec.edits,
        baseline_original: None,
        baseline_edited: None,
        tunnel_original: None,
        tunnel_edited: None,
        tunnel_summary: None,
        errors: Vec::new(),
    };
    let name = format!("wan{}", std::process::id() % 100_000);
    let _ = weir_netem::namespace::remove_leftovers(&name);
    let leftover = Leftover::Namespaces(name.clone());
    lab.supervisor.remember(leftover.clone());
    let topology = Topology::new(&name)?;
    let (namespaces, a, b) = Namespaces::create(&topology)?;
    let link = Link::start(a, b, &link_config(cell, seed))
        .map_err(|error| LabError::io("cannot start the link", error))?;
    let cell_lab = CellLab {
        lab,
        dir,
        plan,
        cell,
        name: &name,
        b_address: topology.b_address.to_string(),
        spec,
        link: &link,
    };
    if let Err(error) = cell_lab.transfers(&mut result) {
        result.errors.push(error.to_string());
    }
    if link.has_failed() {
        result.errors.push("a link thread failed".into());
    }
    let _ = link.stop();
    let _ = namespaces.remove();
    lab.supervisor.forget(&leftover);
    Ok(result)
}

/// One cell's link, run directory and file.
struct CellLab<'a> {
    lab: &'a Lab,
    dir: &'a RunDir,
    plan: &'a Plan,
    cell: &'a Cell,
    name: &'a str,
    b_address: String,
    spec: FileSpec,
    link: &'a Link,
}

impl CellLab<'_> {
    fn transfers(&self, result: &mut CellResult) -> Result<(), LabError> {
        let listen = format!("0.0.0.0:{FILE_PORT}");
        let file = self.spec.flags();
        let mut args = vec!["tunnel", "probe", "serve", "--listen", &listen];
        args.extend(file.iter().map(String::as_str));
        args.extend(["--congestion", "cubic"]);
        let server = self.start(Side::B, "file-server", &args, "serving")?;
        let direct = format!("{}:{FILE_PORT}", self.b_address);
        if !self.plan.tunnel_only {
            result.baseline_original = self.fetch(&direct, Variant::Original, "baseline");
            result.baseline_edited = self.fetch(&direct, Variant::Edited, "baseline");
        }
        let (client, tunnel_server) = self.start_tunnel()?;
        let through = format!("127.0.0.1:{SERVICE_PORT}");
        result.tunnel_original = self.fetch(&through, Variant::Original, "tunnel");
        result.tunnel_edited = self.fetch(&through, Variant::Edited, "tunnel");
        drop(client);
        result.tunnel_summary = tunnel_server
            .stop_and_read()
            .into_iter()
            .find(|line| line.starts_with("weir tunnel server: stopped"));
        if let Some(summary) = &result.tunnel_summary {
            let wanted = [
                "lost_packets_total",
                "fec_repairs_total",
                "fec_repair_datagrams",
            ];
            let fields: Vec<&str> = summary
                .split_whitespace()
                .filter(|field| wanted.iter().any(|name| field.starts_with(name)))
                .collect();
            self.lab
                .say(&format!("wan:   tunnel far side: {}", fields.join(" ")));
        }
        drop(server);
        Ok(())
    }

    /// `weir ARGS`, to run in `side`'s namespace.
    fn command(&self, side: Side, args: &[&str]) -> Result<Command, LabError> {
        Ok(command_in(self.name, side, &self.lab.weir, args)?)
    }

    fn start(&self, side: Side, name: &str, args: &[&str], ready: &str) -> Result<Child, LabError> {
        let command = self.command(side, args)?;
        let mut child = Child::spawn_reading(&self.lab.supervisor, self.dir, name, command)?;
        child.wait_for_line(ready, READY_TIMEOUT)?;
        Ok(child)
    }

    fn start_tunnel(&self) -> Result<(Child, Child), LabError> {
        let cell_link = self.link_toml();
        let server_toml = format!(
            "[server]\nlisten = \"{}:{TUNNEL_PORT}\"\ncert = \"server.pem\"\nkey = \"server.key\"\n\
             ca = \"ca.pem\"\n{cell_link}\n[services.files]\nconnect = \"127.0.0.1:{FILE_PORT}\"\n",
            self.b_address
        );
        let client_toml = format!(
            "[client]\nserver = \"{}:{TUNNEL_PORT}\"\nca = \"ca.pem\"\ncert = \"client.pem\"\n\
             key = \"client.key\"\n{cell_link}\n[services.files]\nlisten = \"127.0.0.1:{SERVICE_PORT}\"\n",
            self.b_address
        );
        let server_config = self.dir.write("server.toml", &server_toml)?;
        let client_config = self.dir.write("client.toml", &client_toml)?;
        let server = self.start(
            Side::B,
            "tunnel-server",
            &[
                "tunnel",
                "server",
                "--config",
                &server_config.to_string_lossy(),
            ],
            "weir tunnel server: listening",
        )?;
        let client = self.start(
            Side::A,
            "tunnel-client",
            &[
                "tunnel",
                "client",
                "--config",
                &client_config.to_string_lossy(),
            ],
            "weir tunnel client: connected",
        )?;
        Ok((client, server))
    }

    /// `[link]` for the cell (the rate, and the round trip its delays make) and `[fec]`.
    fn link_toml(&self) -> String {
        let rtt = (2 * self.cell.delay_ms).max(2);
        format!(
            "[link]\nbandwidth = \"{}\"\nrtt = \"{rtt}ms\"\nmtu = 1500\ncongestion = \"{}\"\n\
             transport = \"{}\"\n[fec]\nmode = \"{}\"\n",
            self.cell.rate.netem(),
            self.plan.congestion,
            self.plan.transport,
            self.plan.fec
        )
    }

    fn fetch(&self, to: &str, variant: Variant, mode: &str) -> Option<Transfer> {
        let file = self.spec.flags();
        let timeout = format!("{}ms", self.plan.transfer_time.as_millis());
        let variant_name = match variant {
            Variant::Original => "original",
            Variant::Edited => "edited",
        };
        let mut args = vec!["tunnel", "probe", "fetch", "--to", to];
        args.extend(["--variant", variant_name]);
        args.extend(file.iter().map(String::as_str));
        args.extend(["--timeout", timeout.as_str()]);
        let before = self.link.stats();
        let fetched = self.command(Side::A, &args).and_then(|command| {
            let name = format!("fetch-{mode}-{variant_name}");
            Child::spawn_reading(&self.lab.supervisor, self.dir, &name, command)
        });
        let (lines, tail) = match fetched {
            Ok(mut child) => (child.finish(), child.output_tail()),
            Err(error) => (Vec::new(), error.to_string()),
        };
        let transfer = parse_fetch(&lines.join("\n"), &before, &self.link.stats());
        self.lab.say(&match &transfer {
            Some(transfer) => format!(
                "wan:   {mode:8} {variant_name:8} {:>9.1} KB/s  {:>5.1} % of the link ({:.1} % \
                 from the connect)  {} bytes, first after {:.2} s, last after {:.1} s{}",
                transfer.kilobytes_per_second(),
                transfer.utilisation(self.cell.rate) * 100.0,
                transfer.utilisation_from_connect(self.cell.rate) * 100.0,
                transfer.bytes,
                transfer.first_byte_seconds,
                transfer.seconds,
                match (transfer.complete, transfer.verified) {
                    (true, true) => "",
                    (false, _) => " (stopped at the time limit)",
                    (true, false) => " (CONTENT DIFFERS)",
                },
            ),
            None => format!(
                "wan:   {mode:8} {variant_name:8} failed: {} {}",
                lines.join(" "),
                tail.trim()
            ),
        });
        transfer
    }
}

/// The cell's link, the same both ways: the rate, the one-way delay, Bernoulli loss, and a
/// drop-tail queue of one bandwidth-delay product (at least 64 packets).
fn link_config(cell: &Cell, seed: u64) -> LinkConfig {
    let rate = weir_netem::parse_rate(cell.rate.netem()).ok();
    let delay = Duration::from_millis(u64::from(cell.delay_ms));
    let bdp_packets =
        (cell.rate.bits_per_second() as f64 / 8.0 * 2.0 * delay.as_secs_f64() / 1500.0) as usize;
    let loss = Probability::new(cell.loss_percent / 100.0).map_or(Loss::None, Loss::Bernoulli);
    let direction = DirectionConfig {
        rate,
        delay,
        jitter: Duration::ZERO,
        loss,
        queue: QueueLimit::Packets(bdp_packets.max(64)),
    };
    LinkConfig {
        a_to_b: direction.clone(),
        b_to_a: direction,
        seed,
    }
}

/// Parses the fetch probe's `key=value` line and adds the link's counters.
fn parse_fetch(text: &str, before: &LinkStats, after: &LinkStats) -> Option<Transfer> {
    let field = |key: &str| {
        text.split_whitespace()
            .find_map(|pair| pair.strip_prefix(key)?.strip_prefix('='))
    };
    let link_bytes = after.a_to_b.received_bytes - before.a_to_b.received_bytes
        + after.b_to_a.received_bytes
        - before.b_to_a.received_bytes;
    let drops = |stats: &LinkStats| {
        stats.a_to_b.lost_packets
            + stats.a_to_b.queue_drops
            + stats.b_to_a.lost_packets
            + stats.b_to_a.queue_drops
    };
    Some(Transfer {
        bytes: field("bytes")?.parse().ok()?,
        seconds: field("seconds")?.parse().ok()?,
        first_byte_seconds: field("first_byte")?.parse().ok()?,
        complete: field("complete")? == "true",
        verified: field("verified")? == "true",
        link_bytes,
        link_drops: drops(after) - drops(before),
    })
}

/// A CA, a far-side certificate for the b address and a near-side client certificate.
fn write_certificates(dir: &RunDir) -> Result<(), LabError> {
    let error = |e| LabError::io("cannot make certificates", std::io::Error::other(e));
    let ca = TestCa::new("weir lab wan CA").map_err(error)?;
    let server = ca
        .server(&["10.200.0.2".to_owned()], KeyType::EcdsaP256, 2)
        .map_err(error)?;
    let client = ca
        .client("weir lab wan near side", KeyType::EcdsaP256, 2)
        .map_err(error)?;
    for (name, text) in [
        ("ca.pem", &ca.certificate().cert_pem),
        ("server.pem", &server.cert_pem),
        ("server.key", &server.key_pem),
        ("client.pem", &client.cert_pem),
        ("client.key", &client.key_pem),
    ] {
        dir.write(name, text)?;
    }
    Ok(())
}
