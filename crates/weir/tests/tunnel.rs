//! End-to-end tests of `weir tunnel` and `weir lab wan` through `weir netem` links: real
//! namespaces, a lossy delayed link, separate processes for every part; and a tunnel side's
//! admin listener on loopback.
//!
//! Like the netem tests the link tests need root, `/dev/net/tun` and `ip` (iproute2); without
//! them they fail and say so, they never pass without running. They take turns (they measure
//! nothing against the clock, but share the link names' address space and the two cores).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::mpsc::{self, Receiver};
use std::thread;
use std::time::{Duration, Instant};

mod support;
use support::require_link_environment;

const WEIR: &str = env!("CARGO_BIN_EXE_weir");

static TURN: Mutex<()> = Mutex::new(());

/// A child process with its stdout lines, stopped by its PID on drop.
struct Running {
    child: Option<Child>,
    lines: Receiver<String>,
    seen: Vec<String>,
}

#[test]
fn concurrent_flows_arrive_intact_through_a_lossy_link() {
    let _turn = TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    require_link_environment("weir tunnel link");
    // 16 flows at once fetch the same 600 kB file, then 16 the edited copy, with a store
    // small enough that chunks are evicted while references to them are in flight.
    let run = Transfers {
        label: "lossy",
        loss: "5%",
        tunnel_toml: "[dedup]\nstore = \"1MiB\"\n",
        parallel: 16,
    }
    .run();
    assert_eq!(run.server("flows_total"), 32);
    assert_eq!(run.server("flows_failed_total"), 0);
    assert_eq!(run.client("flows_failed_total"), 0);
    assert!(
        run.server("lost_packets_total") > 0,
        "the link lost nothing?"
    );
    assert!(run.server("dedup_saved_bytes_total") > 0);
}

#[test]
fn fec_rebuilds_lost_datagrams_and_sends_no_repairs_on_a_clean_link() {
    let _turn = TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    require_link_environment("weir tunnel link");
    // 5 % loss each way, FEC on: the data arrives intact (checked by the fetch), the far
    // side learns the loss from the near side's reports, and the near side rebuilds most
    // of what the link lost from the far side's repairs.
    let lossy = Transfers {
        label: "fec-lossy",
        loss: "5%",
        tunnel_toml: "[fec]\nmode = \"on\"\n",
        parallel: 4,
    }
    .run();
    assert!(lossy.server("fec_repair_datagrams_sent_total") > 0);
    let lost = lossy.netem_lost("b-to-a");
    assert!(lost > 0, "the link lost nothing?");
    assert!(
        lossy.client("fec_repairs_total") * 3 > lost,
        "{} rebuilt of {lost} lost",
        lossy.client("fec_repairs_total")
    );
    assert_eq!(lossy.server("fec_send_failures_total"), 0);
    assert!(
        lossy.server("fec_link_loss_ppm") > 10_000,
        "loss not measured"
    );
    assert_eq!(lossy.client("fec_malformed_total"), 0);
    // A clean link: auto numbers datagrams but never sends a repair, either way.
    let clean = Transfers {
        label: "fec-clean",
        loss: "0%",
        tunnel_toml: "[fec]\nmode = \"auto\"\n",
        parallel: 4,
    }
    .run();
    assert_eq!(clean.server("fec_repair_datagrams_sent_total"), 0);
    assert_eq!(clean.client("fec_repair_datagrams_sent_total"), 0);
    assert_eq!(clean.client("fec_repairs_total"), 0);
    assert_eq!(clean.server("flows_failed_total"), 0);
}

#[test]
fn the_tcp_transport_carries_flows_intact_through_a_lossy_link() {
    let _turn = TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    require_link_environment("weir tunnel link");
    // QUIC framed on TCP: the link loses 2 % each way, TCP repairs it, so QUIC itself never
    // sees a loss, and every byte arrives (checked by the fetch).
    let run = Transfers {
        label: "tcp",
        loss: "2%",
        tunnel_toml: "transport = \"tcp\"\n",
        parallel: 4,
    }
    .run();
    assert!(run.netem_lost("b-to-a") > 0, "the link lost nothing?");
    assert_eq!(run.server("lost_packets_total"), 0);
    assert_eq!(run.server("flows_total"), 8);
    assert_eq!(run.server("flows_failed_total"), 0);
    assert_eq!(run.client("flows_failed_total"), 0);
}

/// A tunnel pair over a 10 Mbit/s, 20 ms link with `loss` each way; `parallel` flows fetch
/// a 600 kB file and then as many its edited copy, every byte checked.
struct Transfers {
    label: &'static str,
    loss: &'static str,
    /// Appended to both sides' configs.
    tunnel_toml: &'static str,
    parallel: usize,
}

/// The far and near sides' summary lines, and the link's.
struct Stopped {
    server: Vec<String>,
    client: Vec<String>,
    netem: Vec<String>,
}

impl Transfers {
    fn run(&self) -> Stopped {
        let name = format!("tun{}", std::process::id() % 100_000);
        let _cleanup = Cleanup(name.clone());
        let dir = TempDir::new(self.label);
        write_certificates(&dir.0);
        self.write_configs(&dir.0);
        let mut link = Running::start(
            Command::new(WEIR)
                .args(["netem", "up", "--name", &name, "--rate", "10mbit"])
                .args(["--delay", "20ms", "--loss", self.loss, "--seed", "11"]),
        );
        link.wait_for("weir netem: link up");
        let file = ["--size", "600000", "--seed", "5", "--edits", "4"];
        let mut origin = Running::start(
            in_side(
                &name,
                "b",
                &["tunnel", "probe", "serve", "--listen", "127.0.0.1:9000"],
            )
            .args(file),
        );
        origin.wait_for("serving");
        let server_config = dir.0.join("server.toml");
        let client_config = dir.0.join("client.toml");
        let mut server = Running::start(&mut in_side(
            &name,
            "b",
            &["tunnel", "server", "--config", path(&server_config)],
        ));
        server.wait_for("weir tunnel server: listening");
        let mut client = Running::start(&mut in_side(
            &name,
            "a",
            &["tunnel", "client", "--config", path(&client_config)],
        ));
        client.wait_for("weir tunnel client: connected");
        self.fetch_both(&name, file);
        let client = client.stop();
        let server = server.stop();
        origin.stop();
        let netem = link.stop();
        eprintln!(
            "{}: far side: {server:?}\nnear side: {client:?}\nnetem: {netem:?}",
            self.label
        );
        Stopped {
            server,
            client,
            netem,
        }
    }

    /// Both sides' configs: the test's link, plus `tunnel_toml`.
    fn write_configs(&self, dir: &Path) {
        let link = format!(
            "[link]\nbandwidth = \"10mbit\"\nrtt = \"40ms\"\n{}",
            self.tunnel_toml
        );
        std::fs::write(
            dir.join("server.toml"),
            format!(
                "[server]\nlisten = \"10.200.0.2:4433\"\ncert = \"server.pem\"\nkey = \"server.key\"\n\
                 ca = \"ca.pem\"\n{link}[services.files]\nconnect = \"127.0.0.1:9000\"\n"
            ),
        )
        .unwrap();
        std::fs::write(
            dir.join("client.toml"),
            format!(
                "[client]\nserver = \"10.200.0.2:4433\"\nca = \"ca.pem\"\ncert = \"client.pem\"\n\
                 key = \"client.key\"\n{link}[services.files]\nlisten = \"127.0.0.1:9001\"\n"
            ),
        )
        .unwrap();
    }

    /// Fetches the file and its edited copy, `parallel` at a time, each checked.
    fn fetch_both(&self, name: &str, file: [&str; 6]) {
        for variant in ["original", "edited"] {
            let output = in_side(
                name,
                "a",
                &[
                    "tunnel",
                    "probe",
                    "fetch",
                    "--to",
                    "127.0.0.1:9001",
                    "--variant",
                    variant,
                ],
            )
            .args(file)
            .args([
                "--parallel",
                &self.parallel.to_string(),
                "--timeout",
                "120s",
            ])
            .output()
            .expect("run the fetch probe");
            let stdout = String::from_utf8_lossy(&output.stdout);
            assert!(
                output.status.success(),
                "{stdout}{}",
                String::from_utf8_lossy(&output.stderr)
            );
            assert!(
                stdout.contains("complete=true verified=true"),
                "{variant}: {stdout}"
            );
        }
    }
}

impl Stopped {
    fn server(&self, key: &str) -> u64 {
        counter(&self.server, key)
    }

    fn client(&self, key: &str) -> u64 {
        counter(&self.client, key)
    }

    /// Packets the link's random loss dropped in one direction ("a-to-b" or "b-to-a").
    fn netem_lost(&self, direction: &str) -> u64 {
        self.netem
            .iter()
            .find(|line| line.starts_with(&format!("weir netem: {direction} ")))
            .and_then(|line| {
                line.split_whitespace()
                    .find_map(|pair| pair.strip_prefix("lost="))
            })
            .and_then(|value| value.parse().ok())
            .unwrap_or_else(|| panic!("no {direction} lost= in {:?}", self.netem))
    }
}

/// A counter from a side's "stopped:" summary line.
fn counter(lines: &[String], key: &str) -> u64 {
    lines
        .iter()
        .find(|line| line.contains("stopped:"))
        .and_then(|line| {
            line.split_whitespace()
                .find_map(|pair| pair.strip_prefix(key)?.strip_prefix('='))
        })
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {lines:?}"))
}

#[test]
fn a_tunnel_side_serves_metrics_and_health_on_the_admin_listener() {
    let dir = TempDir::new("admin");
    write_certificates(&dir.0);
    let admin = free_port();
    let config = dir.0.join("server.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\ncert = \"server.pem\"\nkey = \"server.key\"\n\
             ca = \"ca.pem\"\n[services.files]\nconnect = \"127.0.0.1:9\"\n\
             [metrics]\nlisten = \"127.0.0.1:{admin}\"\n"
        ),
    )
    .unwrap();
    let mut server =
        Running::start(Command::new(WEIR).args(["tunnel", "server", "--config", path(&config)]));
    server.wait_for("weir tunnel server: listening");
    let metrics = http_get(admin, "/metrics");
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    for series in [
        "weir_tunnel_connections_total 0",
        "weir_tunnel_flows_active 0",
        "weir_build_info",
    ] {
        assert!(metrics.contains(series), "no {series} in {metrics}");
    }
    assert!(http_get(admin, "/healthz").starts_with("HTTP/1.1 200"));
    let stopped = server.stop();
    assert!(
        stopped
            .iter()
            .any(|line| line.starts_with("weir tunnel server: stopped: connections_total=0")),
        "{stopped:?}"
    );
}

/// `--check` reads the certificates and keys and binds nothing, so a new file can be
/// checked beside the running side that holds its ports; a bad key still fails it.
#[test]
fn check_binds_nothing_and_still_reads_the_keys() {
    let dir = TempDir::new("check");
    write_certificates(&dir.0);
    // The ports the configs name, taken as a running tunnel would hold them.
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let udp_port = udp.local_addr().unwrap().port();
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let tcp_port = tcp.local_addr().unwrap().port();
    let server = dir.0.join("server.toml");
    std::fs::write(&server, far_side_toml(udp_port)).unwrap();
    let client = dir.0.join("client.toml");
    std::fs::write(
        &client,
        format!(
            "[client]\nserver = \"127.0.0.1:{udp_port}\"\nca = \"ca.pem\"\ncert = \"client.pem\"\n\
             key = \"client.key\"\n[services.files]\nlisten = \"127.0.0.1:{tcp_port}\"\n"
        ),
    )
    .unwrap();
    let check = |role: &str, config: &Path| {
        Command::new(WEIR)
            .args(["tunnel", role, "--config", path(config), "--check"])
            .output()
            .expect("run weir tunnel --check")
    };
    for (role, config) in [("server", &server), ("client", &client)] {
        let output = check(role, config);
        assert!(
            output.status.success(),
            "{role}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(stdout.contains("is valid"), "{role}: {stdout}");
    }
    // A key that is not one: refused by the check.
    std::fs::write(dir.0.join("server.key"), "not a key\n").unwrap();
    assert!(!check("server", &server).status.success());
    drop((udp, tcp));
}

/// A port on 127.0.0.1 that was free a moment ago.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

/// `GET path` on 127.0.0.1:`port` with `Connection: close`; the whole answer.
fn http_get(port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("an answer");
    answer
}

#[test]
fn lab_wan_quick_runs_every_cell_and_checks_every_byte() {
    let _turn = TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    require_link_environment("weir tunnel link");
    let dir = TempDir::new("lab");
    let json = dir.0.join("wan.json");
    let output = Command::new(WEIR)
        .args(["lab", "wan", "--quick", "--json", path(&json)])
        .stdin(Stdio::null())
        .output()
        .expect("run weir lab wan");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!("{stderr}{stdout}");
    assert!(output.status.success(), "weir lab wan --quick failed");
    assert!(stdout.contains("T1 (1.544 Mbit/s)") && stdout.contains("OC-1 (51.84 Mbit/s)"));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["format"], "weir-lab-wan/1");
    let cells = report["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 3);
    for cell in cells {
        assert!(cell["errors"].as_array().unwrap().is_empty(), "{cell}");
        for part in [
            "baseline_original",
            "baseline_edited",
            "tunnel_original",
            "tunnel_edited",
        ] {
            let transfer = &cell[part];
            assert!(transfer.is_object(), "{part} missing: {cell}");
            assert!(transfer["bytes"].as_u64().unwrap() > 0, "{part}: {cell}");
            // What arrived is the file's beginning, whether or not it all fit in the time.
            if transfer["complete"] == true {
                assert_eq!(transfer["verified"], true, "{part} corrupted: {cell}");
            }
        }
        // The edited copy crosses the link as references to what the first transfer left in
        // the store: its link bytes are at most what that transfer did not carry (if it hit
        // the time limit on a slow build), at the link bytes per byte that transfer took
        // (headers, and on a lossy cell retransmissions and FEC repairs; at least 1.15),
        // plus a tenth of the file.
        let edited = &cell["tunnel_edited"];
        assert_eq!(edited["complete"], true, "{cell}");
        assert_eq!(edited["verified"], true, "{cell}");
        let link_bytes = edited["link_bytes"].as_u64().unwrap() as f64;
        let file_bytes = edited["bytes"].as_u64().unwrap() as f64;
        let original = &cell["tunnel_original"];
        let first = original["bytes"].as_u64().unwrap() as f64;
        let overhead = (original["link_bytes"].as_u64().unwrap() as f64 / first).max(1.15);
        let unseen = (file_bytes - first).max(0.0);
        assert!(
            link_bytes < unseen * overhead + file_bytes / 10.0,
            "{link_bytes} link bytes for {file_bytes} ({unseen} not sent before, \
             {overhead:.3} link bytes per byte): {cell}"
        );
    }
}

#[test]
fn lab_wan_stops_its_children_and_removes_its_namespaces_on_sigint() {
    let _turn = TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    require_link_environment("weir tunnel link");
    let mut lab = Command::new(WEIR)
        .args(["lab", "wan", "--rate", "t1", "--delay", "0", "--loss", "0"])
        .args(["--transfer-time", "5s"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start weir lab wan");
    let pid = lab.id();
    // Wait until the cell runs: the file server and the first fetch are its children.
    let deadline = Instant::now() + Duration::from_secs(60);
    let children = loop {
        let children = children_of(pid);
        let running = |what: &str| {
            children.iter().any(|child| {
                std::fs::read(format!("/proc/{child}/cmdline"))
                    .is_ok_and(|line| String::from_utf8_lossy(&line).contains(what))
            })
        };
        if running("serve") && running("fetch") {
            break children;
        }
        assert!(Instant::now() < deadline, "the lab started no cell");
        thread::sleep(Duration::from_millis(50));
    };
    let prefix = format!("wan{}", pid % 100_000);
    assert!(namespaces().contains(&format!("{prefix}-a")));
    let _ = Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = lab.try_wait().expect("wait for the lab") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = lab.kill();
            panic!("weir lab wan did not exit within 30 s of SIGINT");
        }
        thread::sleep(Duration::from_millis(50));
    };
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.code(), Some(130), "{status:?}");
    assert!(status.signal().is_none());
    for child in children {
        assert!(!running(child), "child {child} of the lab still runs");
    }
    let left = namespaces();
    assert!(!left.contains(&prefix), "namespaces left behind: {left}");
}

/// PIDs whose parent is `parent`.
fn children_of(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                stat.rfind(')')
                    .and_then(|end| stat[end + 1..].split_whitespace().nth(1))
                    .and_then(|ppid| ppid.parse::<u32>().ok())
                    == Some(parent)
            })
        })
        .collect()
}

/// Whether `pid` exists and is not a zombie.
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rfind(')')
            .and_then(|end| stat[end + 1..].split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}

fn namespaces() -> String {
    let output = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("run ip netns list");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn in_side(name: &str, side: &str, args: &[&str]) -> Command {
    let mut command = Command::new(WEIR);
    command
        .args(["netem", "exec", side, "--name", name, "--", WEIR])
        .args(args)
        .stdin(Stdio::null());
    command
}

/// A near side whose certificate the far side refuses never says it connected: under TLS
/// 1.3 its own handshake ends before the far side checks the certificate, and only the
/// far side's hello tells it that it was accepted.
#[test]
fn a_refused_near_side_does_not_say_it_connected() {
    let dir = TempDir::new("refused");
    write_certificates(&dir.0);
    // A client certificate of another CA, which the far side does not trust.
    let stranger = TempDir::new("stranger");
    write_certificates(&stranger.0);
    let udp_port = {
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        udp.local_addr().unwrap().port()
    };
    let server = dir.0.join("server.toml");
    std::fs::write(&server, far_side_toml(udp_port)).unwrap();
    let client = dir.0.join("client.toml");
    std::fs::write(
        &client,
        format!(
            "[client]\nserver = \"127.0.0.1:{udp_port}\"\nserver_name = \"10.200.0.2\"\nca = \"ca.pem\"\ncert = \"{}\"\n\
             key = \"{}\"\n[services.files]\nlisten = \"127.0.0.1:{}\"\n",
            path(&stranger.0.join("client.pem")),
            path(&stranger.0.join("client.key")),
            free_port(),
        ),
    )
    .unwrap();
    let mut far =
        Running::start(Command::new(WEIR).args(["tunnel", "server", "--config", path(&server)]));
    far.wait_for("weir tunnel server: listening");
    let log = dir.0.join("client.log");
    let out = dir.0.join("client.out");
    let near = Command::new(WEIR)
        .args(["tunnel", "client", "--config", path(&client)])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("start the near side");
    // Two refusals (the second after the backoff) are enough to see what it says.
    let deadline = Instant::now() + Duration::from_secs(20);
    let printed = loop {
        let printed = std::fs::read_to_string(&log).unwrap_or_default();
        if printed.matches("before its hello").count() >= 2 || Instant::now() > deadline {
            break printed;
        }
        thread::sleep(Duration::from_millis(50));
    };
    terminate(near);
    far.stop();
    assert!(
        printed.matches("before its hello").count() >= 2,
        "no refusal reported: {printed}"
    );
    assert!(!printed.contains("tunnel connected"), "{printed}");
    // Nor on standard output, which scripts (and `weir lab`) wait on: the connection
    // counts as established only once the far side's hello accepted it.
    let stdout = std::fs::read_to_string(&out).unwrap_or_default();
    assert!(
        !stdout.contains("weir tunnel client: connected"),
        "{stdout}"
    );
}

/// A far side on `127.0.0.1:udp_port` with the certificates of [`write_certificates`] and
/// one service, `files` (nothing listens there).
fn far_side_toml(udp_port: u16) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:{udp_port}\"\ncert = \"server.pem\"\nkey = \"server.key\"\n\
         ca = \"ca.pem\"\n[services.files]\nconnect = \"127.0.0.1:9\"\n"
    )
}

fn path(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 temporary path")
}

fn write_certificates(dir: &Path) {
    let output = Command::new(WEIR)
        .args([
            "cert",
            "--out",
            path(dir),
            "--name",
            "10.200.0.2",
            "--key-type",
            "ecdsa",
        ])
        .args(["--client", "near side"])
        .output()
        .expect("run weir cert");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    std::fs::rename(dir.join("server-ecdsa.pem"), dir.join("server.pem")).unwrap();
    std::fs::rename(dir.join("server-ecdsa.key"), dir.join("server.key")).unwrap();
}

impl Running {
    fn start(command: &mut Command) -> Running {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start a weir process");
        let (sender, lines) = mpsc::channel();
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        thread::spawn(move || {
            for line in stdout.lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        Running {
            child: Some(child),
            lines,
            seen: Vec::new(),
        }
    }

    fn wait_for(&mut self, prefix: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let found = line.starts_with(prefix);
                    self.seen.push(line);
                    if found {
                        return;
                    }
                }
                Err(_) => panic!("no {prefix:?} within 30 s; printed {:?}", self.seen),
            }
        }
    }

    /// SIGTERM; returns every line it printed.
    fn stop(mut self) -> Vec<String> {
        if let Some(child) = self.child.take() {
            terminate(child);
        }
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(2)) {
            self.seen.push(line);
        }
        std::mem::take(&mut self.seen)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(child) = self.child.take() {
            terminate(child);
        }
    }
}

/// SIGTERM by PID, then SIGKILL after 10 s.
fn terminate(mut child: Child) {
    let _ = Command::new("sh")
        .args(["-c", &format!("kill -TERM {}", child.id())])
        .status();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Removes a link's leftovers on drop.
struct Cleanup(String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = Command::new(WEIR)
            .args(["netem", "down", "--name", &self.0])
            .output();
    }
}

struct TempDir(PathBuf);

impl TempDir {
    fn new(label: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("weir-tunnel-{label}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
