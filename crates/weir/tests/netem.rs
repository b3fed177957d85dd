//! End-to-end tests of `weir netem`: real network namespaces and TUN devices, with `ping` and a
//! TCP transfer through the emulated link.
//!
//! They need root, `/dev/net/tun`, `ip` (Debian package iproute2) and `ping` (iputils-ping).
//! Without them they fail and say what is missing: they never pass without running. Each test
//! uses its own link name and removes its namespaces even when it fails; the tests take turns
//! so that their timings do not disturb each other.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

mod support;
use support::require_link_environment;

const WEIR: &str = env!("CARGO_BIN_EXE_weir");
const B_ADDRESS: &str = "10.200.0.2";

/// One link at a time: these tests measure time.
static TURN: Mutex<()> = Mutex::new(());
static NEXT_NAME: AtomicU32 = AtomicU32::new(0);

/// A running `weir netem up`, stopped and cleaned up on drop.
struct RunningLink {
    name: String,
    child: Option<Child>,
    stdout: Receiver<String>,
    /// Lines read from its stdout so far.
    lines: Vec<String>,
}

#[test]
fn ping_rtt_is_twice_the_one_way_delay() {
    let _turn = take_turn();
    let link = RunningLink::up(&["--delay", "20ms"]);
    let output = link.exec(
        "a",
        &["ping", "-n", "-c", "40", "-i", "0.1", "-w", "20", B_ADDRESS],
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let mut rtts: Vec<f64> = stdout
        .lines()
        .filter_map(|line| line.split("time=").nth(1))
        .filter_map(|rest| rest.trim_end_matches(" ms").trim().parse().ok())
        .collect();
    assert!(rtts.len() >= 38, "too few replies:\n{stdout}");
    rtts.sort_by(f64::total_cmp);
    let median = rtts[rtts.len() / 2];
    let min = rtts[0];
    let mean = rtts.iter().sum::<f64>() / rtts.len() as f64;
    eprintln!(
        "ping through --delay 20ms: min {min:.3} ms, median {median:.3} ms, mean {mean:.3} ms, \
         max {:.3} ms",
        rtts[rtts.len() - 1]
    );
    // Never early, and (median, robust to a descheduled thread on a busy machine) within
    // 1 ms below and 2 ms above: each round trip waits on four of the emulator's thread
    // wake-ups, and on a VM whose host is busy each can run 0.3 ms late (medians of 41.1–41.5
    // ms seen then). A delay applied once, or three times, is 20 ms away.
    assert!(min >= 39.99, "a reply came back early: {min} ms");
    assert!(
        (39.0..=42.0).contains(&median),
        "median RTT {median} ms, expected 40 ms (−1, +2)"
    );
    link.stop();
}

#[test]
fn tcp_goodput_is_the_rate_at_10_mbit() {
    let _turn = take_turn();
    goodput_is_the_rate("10mbit", 10_000_000.0, "10ms");
}

#[test]
fn tcp_goodput_is_the_rate_at_t1() {
    let _turn = take_turn();
    goodput_is_the_rate("1544kbit", 1_544_000.0, "30ms");
}

#[test]
fn measured_loss_is_the_configured_rate() {
    let _turn = take_turn();
    let loss = 0.05;
    let link = RunningLink::up(&["--loss", "5%", "--delay", "2ms", "--seed", "7"]);
    let count = 2000u32;
    let output = link.exec(
        "a",
        &[
            "ping", "-n", "-q", "-c", "2000", "-i", "0.002", "-W", "1", B_ADDRESS,
        ],
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let (sent, received) = ping_counts(&stdout);
    assert_eq!(sent, count, "{stdout}");
    let stats = link.stop();

    // A ping is lost if either the request or the reply is: 1 − (1 − p)².
    let expected = 1.0 - (1.0 - loss) * (1.0 - loss);
    let measured = 1.0 - f64::from(received) / f64::from(sent);
    let sigma = (expected * (1.0 - expected) / f64::from(sent)).sqrt();
    eprintln!(
        "ping loss through --loss 5% both ways: {:.2} % (expected {:.2} % ± {:.2} % at 4σ)",
        measured * 100.0,
        expected * 100.0,
        4.0 * sigma * 100.0
    );
    assert!(
        (measured - expected).abs() <= 4.0 * sigma,
        "ping loss {measured}, expected {expected} ± {}",
        4.0 * sigma
    );

    // Only the pings crossed the link, and every request that got through was answered.
    assert_eq!(
        counter(&stats, "a-to-b", "received"),
        u64::from(sent),
        "{stats}"
    );
    assert_eq!(
        counter(&stats, "b-to-a", "received"),
        counter(&stats, "a-to-b", "delivered"),
        "{stats}"
    );
    assert_eq!(
        counter(&stats, "b-to-a", "delivered"),
        u64::from(received),
        "{stats}"
    );

    // The link's own counters, per direction.
    for direction in ["a-to-b", "b-to-a"] {
        let received = counter(&stats, direction, "received");
        let lost = counter(&stats, direction, "lost");
        assert!(
            received >= u64::from(count) * 9 / 10,
            "{direction}: {stats}"
        );
        let measured = lost as f64 / received as f64;
        let sigma = (loss * (1.0 - loss) / received as f64).sqrt();
        eprintln!(
            "{direction}: {lost} of {received} lost = {:.2} % (expected 5 % ± {:.2} %)",
            measured * 100.0,
            4.0 * sigma * 100.0
        );
        assert!(
            (measured - loss).abs() <= 4.0 * sigma,
            "{direction} loss {measured}: {stats}"
        );
        assert_eq!(counter(&stats, direction, "queue_drops"), 0, "{stats}");
        // Pings never fill the devices' queues: the kernel dropped nothing unseen.
        assert_eq!(counter(&stats, direction, "device_drops"), 0, "{stats}");
    }
}

#[test]
fn a_link_name_in_use_is_refused_and_down_removes_leftovers() {
    let _turn = take_turn();
    require_link_environment("weir netem");
    let name = unique_name();
    let _cleanup = Cleanup(name.clone());
    let namespace = format!("{name}-a");
    run_ok(Command::new("ip").args(["netns", "add", &namespace]));

    let output = Command::new(WEIR)
        .args(["netem", "up", "--name", &name])
        .stdin(Stdio::null())
        .output()
        .expect("run weir");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("already exists"), "{stderr}");

    let output = run_ok(Command::new(WEIR).args(["netem", "down", "--name", &name]));
    assert!(
        String::from_utf8_lossy(&output.stdout).contains(&namespace),
        "down should report what it removed"
    );
    assert!(!Path::new("/run/netns").join(&namespace).exists());
}

#[test]
fn without_root_up_fails_with_a_clear_message() {
    require_link_environment("weir netem");
    // The binary may sit under a directory nobody else can enter: run a copy.
    let directory = std::env::temp_dir().join(format!("weir-netem-{}", std::process::id()));
    std::fs::create_dir_all(&directory).expect("temp dir");
    let copy = directory.join("weir");
    std::fs::copy(WEIR, &copy).expect("copy the binary");
    run_ok(
        Command::new("chmod")
            .args(["755"])
            .arg(&directory)
            .arg(&copy),
    );
    let output = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&copy)
        .args(["netem", "up", "--name", &unique_name()])
        .output()
        .expect("setpriv (Debian package util-linux) must be installed");
    let _ = std::fs::remove_dir_all(&directory);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("needs root"), "{stderr}");
}

#[test]
fn bad_link_parameters_are_refused_before_anything_is_created() {
    for args in [
        ["--rate", "10 parsecs"],
        ["--delay", "20"],
        ["--loss", "150%"],
        ["--gilbert", "1%"],
    ] {
        let output = Command::new(WEIR)
            .args(["netem", "up", "--name", "never"])
            .args(args)
            .output()
            .expect("run weir");
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("invalid"), "{args:?}: {stderr}");
    }
    // Addresses that make no link: refused before any namespace exists (and whatever the
    // user: the check comes before the one for root).
    for (a, b, why) in [
        ("10.201.0.1", "10.201.0.1", "both sides have the address"),
        ("127.0.0.1", "10.201.0.2", "not a unicast address"),
    ] {
        let output = Command::new(WEIR)
            .args([
                "netem",
                "up",
                "--name",
                "never",
                "--a-address",
                a,
                "--b-address",
                b,
            ])
            .output()
            .expect("run weir");
        assert!(!output.status.success(), "{a} {b}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(why), "{a} {b}: {stderr}");
    }
}

/// Bulk TCP from side a to a sink in side b: goodput after a 1 s warm-up, over 4 s.
fn goodput_is_the_rate(rate: &str, bits_per_second: f64, delay: &str) {
    let link = RunningLink::up(&["--rate", rate, "--delay", delay]);
    let listen = format!("{B_ADDRESS}:5001");
    let sink = link
        .command(
            "b",
            &[WEIR, "netem", "probe", "tcp-sink", "--listen", &listen],
        )
        .args(["--warmup", "1s", "--window", "4s", "--timeout", "15s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the sink");
    let sender = link
        .command("a", &[WEIR, "netem", "probe", "tcp-send", "--to", &listen])
        .args(["--duration", "20s"])
        .output()
        .expect("run the sender");
    let sink = sink.wait_with_output().expect("sink");
    let sink_out = String::from_utf8_lossy(&sink.stdout);
    assert!(
        sink.status.success() && sender.status.success(),
        "sink: {sink_out}{}\nsender: {}",
        String::from_utf8_lossy(&sink.stderr),
        String::from_utf8_lossy(&sender.stderr)
    );
    let goodput: f64 = sink_out
        .split_whitespace()
        .find_map(|field| field.strip_prefix("goodput_bps="))
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no goodput in {sink_out:?}"));
    let stats = link.stop();
    let ratio = goodput / bits_per_second;
    eprintln!(
        "TCP goodput at {rate}: {:.3} Mbit/s = {:.2} % of the rate \
         (TCP/IP headers alone cost 3.5 % at MTU 1500)",
        goodput / 1e6,
        ratio * 100.0
    );
    assert!(
        (ratio - 1.0).abs() <= 0.05,
        "goodput {goodput} bit/s is not within 5 % of {bits_per_second}: {stats}"
    );
}

impl RunningLink {
    /// Starts `weir netem up` with a fresh name and waits until it says the link is up.
    fn up(args: &[&str]) -> RunningLink {
        require_link_environment("weir netem");
        let name = unique_name();
        let mut child = Command::new(WEIR)
            .args(["netem", "up", "--name", &name])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start weir netem up");
        let (sender, stdout) = mpsc::channel();
        let reader = BufReader::new(child.stdout.take().expect("piped stdout"));
        thread::spawn(move || {
            for line in reader.lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        let mut link = RunningLink {
            name,
            child: Some(child),
            stdout,
            lines: Vec::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match link.stdout.recv_timeout(left) {
                Ok(line) => {
                    let ready = line.contains("link up");
                    link.lines.push(line);
                    if ready {
                        return link;
                    }
                }
                Err(_) => panic!(
                    "weir netem up did not come up within 15 s; it printed: {:?}",
                    link.lines
                ),
            }
        }
    }

    /// A command run inside `side` through `weir netem exec`.
    fn command(&self, side: &str, command: &[&str]) -> Command {
        let mut built = Command::new(WEIR);
        built
            .args(["netem", "exec", side, "--name", &self.name, "--"])
            .args(command)
            .stdin(Stdio::null());
        built
    }

    fn exec(&self, side: &str, command: &[&str]) -> Output {
        self.command(side, command)
            .output()
            .expect("weir netem exec")
    }

    /// Stops the link with SIGTERM and returns everything it printed (its counters last).
    fn stop(mut self) -> String {
        let child = self.child.take().expect("running");
        let status = terminate(child);
        while let Ok(line) = self.stdout.recv_timeout(Duration::from_secs(5)) {
            self.lines.push(line);
        }
        let printed = self.lines.join("\n");
        assert!(status, "weir netem up did not exit cleanly:\n{printed}");
        printed
    }
}

impl Drop for RunningLink {
    fn drop(&mut self) {
        if let Some(child) = self.child.take() {
            terminate(child);
        }
        remove_leftovers(&self.name);
    }
}

/// Removes a link's leftovers on drop.
struct Cleanup(String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        remove_leftovers(&self.0);
    }
}

fn remove_leftovers(name: &str) {
    let _ = Command::new(WEIR)
        .args(["netem", "down", "--name", name])
        .output();
}

/// SIGTERM, then SIGKILL if it has not exited within 10 s. Whether it exited successfully.
fn terminate(mut child: Child) -> bool {
    // The shell's own `kill`, so that procps is not needed.
    let _ = Command::new("sh")
        .args(["-c", &format!("kill -TERM {}", child.id())])
        .status();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return status.success();
        }
        thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    false
}

fn take_turn() -> MutexGuard<'static, ()> {
    TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A link name unique to this process and test: at most 13 characters.
fn unique_name() -> String {
    let count = NEXT_NAME.fetch_add(1, Ordering::Relaxed);
    format!("wn{}x{count}", std::process::id())
}

fn run_ok(command: &mut Command) -> Output {
    let output = command.output().expect("run a command");
    assert!(
        output.status.success(),
        "{command:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// `(transmitted, received)` from ping's summary.
fn ping_counts(stdout: &str) -> (u32, u32) {
    let summary = stdout
        .lines()
        .find(|line| line.contains("packets transmitted"))
        .unwrap_or_else(|| panic!("no ping summary in {stdout:?}"));
    let numbers: Vec<u32> = summary
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|part| part.parse().ok())
        .collect();
    (numbers[0], numbers[1])
}

/// A counter from the link's exit summary: `weir netem: a-to-b received=... lost=...`.
fn counter(printed: &str, direction: &str, key: &str) -> u64 {
    let line = printed
        .lines()
        .find(|line| line.starts_with(&format!("weir netem: {direction} ")))
        .unwrap_or_else(|| panic!("no {direction} counters in {printed:?}"));
    line.split_whitespace()
        .find_map(|field| field.strip_prefix(&format!("{key}=")))
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {line:?}"))
}
