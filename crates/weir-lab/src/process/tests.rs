use super::*;

fn sleeper() -> Command {
    let mut command = Command::new("sleep");
    command.arg("30");
    command
}

#[test]
fn a_dropped_child_is_stopped_and_forgotten() {
    let supervisor = Supervisor::new();
    let dir = RunDir::create(&supervisor).expect("temp dir");
    let child = Child::spawn(&supervisor, &dir, "sleeper", sleeper()).expect("sleep runs");
    let pid = child.pid();
    assert!(alive(pid));
    assert_eq!(supervisor.running(), [pid]);
    drop(child);
    assert!(!alive(pid), "the child outlived its guard");
    assert!(supervisor.running().is_empty());
    let path = dir.path().to_owned();
    assert_eq!(supervisor.leftovers().len(), 1);
    drop(dir);
    assert!(!path.exists(), "the run directory outlived its guard");
    assert!(supervisor.leftovers().is_empty());
}

#[test]
fn stop_all_ends_every_child_and_their_groups() {
    let supervisor = Supervisor::new();
    let dir = RunDir::create(&supervisor).expect("temp dir");
    // A shell that starts a grandchild in its group, as nginx starts workers.
    let mut shell = Command::new("sh");
    shell.args(["-c", "sleep 30 & echo $!; wait"]);
    let mut parent = Child::spawn_reading(&supervisor, &dir, "shell", shell).expect("sh runs");
    let other = Child::spawn(&supervisor, &dir, "sleeper", sleeper()).expect("sleep runs");
    let grandchild: u32 = parent
        .lines
        .as_ref()
        .expect("stdout is read")
        .recv_timeout(Duration::from_secs(5))
        .expect("the grandchild's PID")
        .parse()
        .expect("a PID");
    let pids = [parent.pid(), other.pid()];
    assert_eq!(supervisor.stop_all(), 2);
    assert!(supervisor.running().is_empty());
    // The guards now only reap what stop_all ended.
    parent.stop();
    drop(other);
    assert!(pids.iter().all(|&pid| !alive(pid)));
    let deadline = Instant::now() + Duration::from_secs(2);
    while alive(grandchild) && Instant::now() < deadline {
        std::thread::sleep(POLL);
    }
    assert!(!alive(grandchild), "the group's other process survived");
}

#[test]
fn a_child_that_exits_is_reaped_with_what_it_printed() {
    let supervisor = Supervisor::new();
    let dir = RunDir::create(&supervisor).expect("temp dir");
    let mut command = Command::new("sh");
    command.args(["-c", "echo ready; echo bytes=3"]);
    let mut child = Child::spawn_reading(&supervisor, &dir, "printer", command).expect("sh runs");
    child
        .wait_for_line("ready", Duration::from_secs(5))
        .expect("the ready line");
    assert_eq!(child.finish(), ["bytes=3"]);
    assert!(supervisor.running().is_empty());
}

#[test]
fn waiting_for_a_line_fails_when_the_child_exits_without_it() {
    let supervisor = Supervisor::new();
    let dir = RunDir::create(&supervisor).expect("temp dir");
    let mut command = Command::new("sh");
    command.args(["-c", "echo something else; echo oops >&2; exit 3"]);
    let mut child = Child::spawn_reading(&supervisor, &dir, "quitter", command).expect("sh runs");
    let error = child
        .wait_for_line("ready", Duration::from_secs(5))
        .expect_err("it never says ready")
        .to_string();
    assert!(error.contains("quitter exited"), "{error}");
    assert!(error.contains("oops"), "{error}");
}

#[test]
fn free_ports_are_distinct() {
    let ports = free_ports(6).expect("ports");
    let mut unique = ports.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), 6);
}
