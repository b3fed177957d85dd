//! Runs the cells: namespaces and link in this process, the file server, fetches and tunnel
//! sides as child processes in the namespaces (`ip netns exec`), each stopped by its PID.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use weir_netem::{
    DirectionConfig, Link, LinkConfig, LinkStats, Loss, Namespaces, Probability, QueueLimit, Side,
    Topology, namespace::command_in,
};
use weir_tls::{KeyType, TestCa};

use super::probe::{FileSpec, Variant};
use super::supervisor::Supervisor;
use super::{Cell, CellResult, Plan, Transfer, file_for};

const FILE_PORT: u16 = 9000;
const TUNNEL_PORT: u16 = 4433;
const SERVICE_PORT: u16 = 9001;

/// Why the lab could not run at all (a cell that fails is recorded in its result instead).
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    #[error(transparent)]
    Setup(#[from] weir_netem::SetupError),
    #[error("{0}")]
    Io(String),
}

/// A child process stopped (SIGTERM, then SIGKILL) when dropped.
struct Running {
    child: Child,
    lines: mpsc::Receiver<String>,
    supervisor: Arc<Supervisor>,
}

/// Runs every cell of the plan, printing progress to `progress`. SIGINT or SIGTERM stops
/// every process it started, removes the cell's namespaces and the work directory, and
/// exits (130 or 143).
pub fn run(plan: &Plan, progress: &mut dyn Write) -> Result<Vec<CellResult>, LabError> {
    weir_netem::namespace::require_root()?;
    let supervisor = Supervisor::new(plan.work_dir.clone());
    supervisor
        .watch_signals()
        .map_err(|error| LabError::Io(format!("cannot watch for signals: {error}")))?;
    std::fs::create_dir_all(&plan.work_dir).map_err(|error| {
        LabError::Io(format!(
            "cannot create {}: {error}",
            plan.work_dir.display()
        ))
    })?;
    write_certificates(&plan.work_dir)?;
    let mut results = Vec::with_capacity(plan.cells.len());
    for (index, cell) in plan.cells.iter().enumerate() {
        let _ = writeln!(
            progress,
            "weir lab wan: cell {}/{}: {} one-way {} ms, loss {} %",
            index + 1,
            plan.cells.len(),
            cell.rate.label(),
            cell.delay_ms,
            cell.loss_percent
        );
        let result = run_cell(plan, cell, index as u64 + 1, &supervisor, progress)?;
        results.push(result);
    }
    Ok(results)
}

fn run_cell(
    plan: &Plan,
    cell: &Cell,
    seed: u64,
    supervisor: &Arc<Supervisor>,
    progress: &mut dyn Write,
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
    supervisor.set_namespaces(Some(name.clone()));
    let topology = Topology::new(&name)?;
    let (namespaces, a, b) = Namespaces::create(&topology)?;
    let link = Link::start(a, b, &link_config(cell, seed))
        .map_err(|error| LabError::Io(format!("cannot start the link: {error}")))?;
    let lab = CellLab {
        plan,
        cell,
        name: &name,
        b_address: topology.b_address.to_string(),
        spec,
        link: &link,
        supervisor,
    };
    let outcome = lab.transfers(&mut result, progress);
    if let Err(error) = outcome {
        result.errors.push(error);
    }
    if link.has_failed() {
        result.errors.push("a link thread failed".into());
    }
    let _ = link.stop();
    let _ = namespaces.remove();
    supervisor.set_namespaces(None);
    Ok(result)
}

struct CellLab<'a> {
    plan: &'a Plan,
    cell: &'a Cell,
    name: &'a str,
    b_address: String,
    spec: FileSpec,
    link: &'a Link,
    supervisor: &'a Arc<Supervisor>,
}

impl CellLab<'_> {
    fn transfers(&self, result: &mut CellResult, progress: &mut dyn Write) -> Result<(), String> {
        let spec = self.spec;
        let listen = format!("0.0.0.0:{FILE_PORT}");
        let file = spec.flags();
        let mut args = vec!["tunnel", "probe", "serve", "--listen", &listen];
        args.extend(file.iter().map(String::as_str));
        args.extend(["--congestion", "cubic"]);
        let server = self.start(Side::B, &args, "serving")?;
        let direct = format!("{}:{FILE_PORT}", self.b_address);
        if !self.plan.tunnel_only {
            result.baseline_original = self.fetch(&direct, Variant::Original, "baseline", progress);
            result.baseline_edited = self.fetch(&direct, Variant::Edited, "baseline", progress);
        }
        let (client, tunnel_server) = self.start_tunnel()?;
        let through = format!("127.0.0.1:{SERVICE_PORT}");
        result.tunnel_original = self.fetch(&through, Variant::Original, "tunnel", progress);
        result.tunnel_edited = self.fetch(&through, Variant::Edited, "tunnel", progress);
        drop(client.stop());
        result.tunnel_summary = tunnel_server
            .stop()
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
            let _ = writeln!(progress, "  tunnel far side: {}", fields.join(" "));
        }
        drop(server.stop());
        Ok(())
    }

    fn start(&self, side: Side, args: &[&str], ready: &str) -> Result<Running, String> {
        let mut command = command_in(self.name, side, &self.plan.binary, args)
            .map_err(|error| error.to_string())?;
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let running = Running::spawn(command, self.supervisor)?;
        running.wait_for(ready, Duration::from_secs(20))?;
        Ok(running)
    }

    fn start_tunnel(&self) -> Result<(Running, Running), String> {
        let dir = &self.plan.work_dir;
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
        write_file(&dir.join("server.toml"), &server_toml)?;
        write_file(&dir.join("client.toml"), &client_toml)?;
        let server_config = dir.join("server.toml").display().to_string();
        let client_config = dir.join("client.toml").display().to_string();
        let server = self.start(
            Side::B,
            &["tunnel", "server", "--config", &server_config],
            "weir tunnel server: listening",
        )?;
        let client = self.start(
            Side::A,
            &["tunnel", "client", "--config", &client_config],
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

    fn fetch(
        &self,
        to: &str,
        variant: Variant,
        mode: &str,
        progress: &mut dyn Write,
    ) -> Option<Transfer> {
        let file = self.spec.flags();
        let timeout = format!("{}ms", self.plan.transfer_time.as_millis());
        let variant_name = match variant {
            Variant::Original => "original",
            Variant::Edited => "edited",
        };
        let before = self.link.stats();
        let mut command = command_in(
            self.name,
            Side::A,
            &self.plan.binary,
            [
                "tunnel",
                "probe",
                "fetch",
                "--to",
                to,
                "--variant",
                variant_name,
            ]
            .into_iter()
            .chain(file.iter().map(String::as_str))
            .chain(["--timeout", timeout.as_str()]),
        )
        .ok()?;
        command.stdin(Stdio::null()).stderr(Stdio::null());
        let running = Running::spawn(command, self.supervisor).ok()?;
        let text = running.finish();
        let after = self.link.stats();
        let transfer = parse_fetch(&text, &before, &after);
        let _ = match &transfer {
            Some(transfer) => writeln!(
                progress,
                "  {mode:8} {variant_name:8} {:>9.1} KB/s  {:>5.1} % of the link ({:.1} % from \
                 the connect)  {} bytes, first after {:.2} s, last after {:.1} s{}",
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
            None => writeln!(
                progress,
                "  {mode:8} {variant_name:8} failed: {}",
                text.trim()
            ),
        };
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
fn write_certificates(dir: &Path) -> Result<(), LabError> {
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
        write_file(&dir.join(name), text).map_err(LabError::Io)?;
    }
    Ok(())
}

fn error(error: impl std::fmt::Display) -> LabError {
    LabError::Io(format!("cannot make certificates: {error}"))
}

fn write_file(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|error| format!("cannot write {}: {error}", path.display()))
}

impl Running {
    fn spawn(mut command: Command, supervisor: &Arc<Supervisor>) -> Result<Running, String> {
        command.stdout(Stdio::piped());
        let mut child = supervisor
            .spawn(&mut command)
            .map_err(|error| format!("cannot start {command:?}: {error}"))?;
        let (sender, lines) = mpsc::channel();
        if let Some(stdout) = child.stdout.take() {
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    if sender.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        Ok(Running {
            child,
            lines,
            supervisor: Arc::clone(supervisor),
        })
    }

    /// Waits for the child to exit; returns what it printed.
    fn finish(mut self) -> String {
        self.supervisor.wait(&mut self.child);
        let mut text = String::new();
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(2)) {
            text.push_str(&line);
            text.push('\n');
        }
        text
    }

    /// Waits for a line that starts with `ready`.
    fn wait_for(&self, ready: &str, limit: Duration) -> Result<(), String> {
        let deadline = Instant::now() + limit;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.starts_with(ready) => return Ok(()),
                Ok(line) => seen.push(line),
                Err(_) => {
                    return Err(format!(
                        "no \"{ready}\" within {limit:?}; it printed {seen:?}"
                    ));
                }
            }
        }
    }

    /// SIGTERM, then SIGKILL after the grace period; returns the lines printed meanwhile.
    fn stop(mut self) -> Vec<String> {
        self.supervisor.stop(&mut self.child);
        let mut lines = Vec::new();
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(2)) {
            lines.push(line);
        }
        lines
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.supervisor.stop(&mut self.child);
    }
}
