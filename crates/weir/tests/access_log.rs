//! The access log as an operator ships it: JSON lines in a file, reopened on SIGUSR1 after
//! logrotate moved it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use weir_testkit::{TestOrigin, client, free_ports};

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct Weir(Child);

impl Drop for Weir {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn signal(weir: &Weir, signal: Signal) {
    kill(Pid::from_raw(weir.0.id() as i32), signal).unwrap();
}

/// How many times the process's threads have gone to sleep and been woken (voluntary
/// context switches, all threads).
fn wake_ups(weir: &Weir) -> u64 {
    let tasks = format!("/proc/{}/task", weir.0.id());
    std::fs::read_dir(tasks)
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("status")).ok())
        .filter_map(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|count| count.trim().parse::<u64>().ok())
        })
        .sum()
}

/// The lines of `path` once it has `count` of them (the log is written out 200 ms after a
/// line arrives).
/// The records of the log at `path` but those of the readiness probes (`/ready`: a probe
/// the client gave up on while weir started on a loaded machine is a record too), once
/// there are `count` of them (or after 5 s).
async fn lines(path: &PathBuf, count: usize) -> Vec<serde_json::Value> {
    let start = Instant::now();
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let records: Vec<serde_json::Value> = text
            .lines()
            .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
            .filter(|record: &serde_json::Value| record["uri"] != "/ready")
            .collect();
        if records.len() >= count || start.elapsed() > Duration::from_secs(5) {
            return records;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A weir process with a JSON access log in `access.log` of a fresh directory (named for
/// `name`), over `origin`, serving once its address answers.
async fn start_weir(name: &str, origin: &TestOrigin) -> (Weir, TempDir, SocketAddr) {
    let dir = TempDir(std::env::temp_dir().join(format!("{name}-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let [port] = free_ports::<1>();
    let listen: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let config = dir.0.join("weir.toml");
    std::fs::write(
        &config,
        format!(
            "[log]\naccess_log_format = \"json\"\naccess_log_file = \"access.log\"\n\
             [pools.web]\nnodes = [{{ address = \"{}\" }}]\n\
             [virtual_servers.web]\nlisten = \"{listen}\"\npool = \"web\"\n",
            origin.addr
        ),
    )
    .unwrap();
    let weir = Weir(
        Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["serve", "--config"])
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let start = Instant::now();
    while client::get(listen, "/ready").await.is_err() {
        assert!(start.elapsed() < Duration::from_secs(10));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (weir, dir, listen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_lines_in_a_file_reopened_on_sigusr1() {
    let origin = TestOrigin::start("a").await;
    let (weir, dir, listen) = start_weir("weir-access-log", &origin).await;
    for path in ["/", "/?x=%22y%22"] {
        assert_eq!(client::get(listen, path).await.unwrap().status, 200);
    }
    let log = dir.0.join("access.log");
    let records = lines(&log, 2).await;
    assert_eq!(records.len(), 2, "{records:?}");
    // A request's line is written once its response is sent: the client may have sent the
    // next request, and weir's other thread logged it, first.
    let last = records
        .iter()
        .find(|record| record["uri"] == "/?x=%22y%22")
        .unwrap_or_else(|| panic!("{records:?}"));
    assert_eq!(last["status"], 200);
    assert_eq!(last["virtual_server"], "web");
    assert_eq!(last["pool"], "web");
    assert_eq!(last["node"], origin.addr.to_string());
    assert_eq!(last["method"], "GET");
    assert!(last["duration_us"].as_u64().is_some());
    assert!(last["time"].as_str().unwrap().ends_with('Z'));

    // With the lines written and nothing to log, weir sleeps: no flush timer wakes it
    // (it used to wake ten times a second for one).
    let before = wake_ups(&weir);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let idle = wake_ups(&weir) - before;
    assert!(idle <= 4, "{idle} wake-ups in 1.5 s of idling");

    // logrotate: move the file, then SIGUSR1.
    std::fs::rename(&log, dir.0.join("access.log.1")).unwrap();
    signal(&weir, Signal::SIGUSR1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        client::get(listen, "/?after=rotation")
            .await
            .unwrap()
            .status,
        200
    );
    let records = lines(&log, 1).await;
    assert_eq!(records.len(), 1);
    assert_eq!(records[0]["uri"], "/?after=rotation");
    assert_eq!(lines(&dir.0.join("access.log.1"), 2).await.len(), 2);
    signal(&weir, Signal::SIGTERM);
    drop(weir);
    origin.stop().await;
}

/// Under steady load the log is written out every 200 ms, one gathering after another; a
/// SIGUSR1 is acted on at once all the same, so a request made 100 ms after the signal is
/// in the new file, not in the one logrotate moved away (the reopen waited for the end of
/// a gathering, and under load for the end of several).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigusr1_reopens_at_once_under_load() {
    let origin = TestOrigin::start("a").await;
    let (weir, dir, listen) = start_weir("weir-access-load", &origin).await;
    // A request every 5 ms, for 2 s.
    let load = tokio::spawn(async move {
        for n in 0..400 {
            let _ = client::get(listen, &format!("/?load={n}")).await;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    tokio::time::sleep(Duration::from_millis(700)).await;
    let log = dir.0.join("access.log");
    std::fs::rename(&log, dir.0.join("access.log.1")).unwrap();
    signal(&weir, Signal::SIGUSR1);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        client::get(listen, "/?after=signal").await.unwrap().status,
        200
    );
    load.await.unwrap();
    // Everything is written out within 200 ms of the load's end.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let moved = std::fs::read_to_string(dir.0.join("access.log.1")).unwrap();
    let new = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        !moved.contains("after=signal"),
        "a request made 100 ms after the SIGUSR1 went to the moved file"
    );
    assert!(new.contains("after=signal"), "{new}");
    // Nothing lost or doubled around the rotation.
    let count = |text: &str| text.lines().filter(|l| l.contains("load=")).count();
    assert_eq!(count(&moved) + count(&new), 400);
    signal(&weir, Signal::SIGTERM);
    drop(weir);
    origin.stop().await;
}
