//! Child processes a command started (the labs' origins, proxies and emulated links), stopped
//! by PID: each one when the command is done with it, and every one still running when the
//! command gets SIGINT or SIGTERM.
//!
//! Children are registered and reaped under one lock, which the signal watcher takes too, so
//! it never signals a PID that was already reaped (and may have been reused), and no child
//! starts after it has begun. Each child leads a process group of its own, so a terminal's
//! Ctrl-C reaches only the command, which then stops its children in order, and stopping a
//! child reaches whatever it started in its group (nginx's workers, say).

use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// How often a stopping child is checked for its exit.
const POLL: Duration = Duration::from_millis(10);

/// The running children of one command.
#[derive(Debug)]
pub struct Children {
    /// PIDs of children not reaped yet.
    pids: Mutex<Vec<u32>>,
    /// How long a child gets to exit after SIGTERM before SIGKILL.
    grace: Duration,
}

impl Children {
    pub fn new(grace: Duration) -> Arc<Children> {
        Arc::new(Children {
            pids: Mutex::new(Vec::new()),
            grace,
        })
    }

    fn pids(&self) -> MutexGuard<'_, Vec<u32>> {
        self.pids.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// PIDs of the children not reaped yet.
    pub fn running(&self) -> Vec<u32> {
        self.pids().clone()
    }

    /// Spawns `command` as the leader of a new process group and registers it.
    pub fn spawn(&self, command: &mut Command) -> io::Result<Child> {
        let mut pids = self.pids();
        let child = command.process_group(0).spawn()?;
        pids.push(child.id());
        Ok(child)
    }

    /// `Some(status)` once `child` has exited; it is then reaped and forgotten.
    pub fn try_wait(&self, child: &mut Child) -> io::Result<Option<ExitStatus>> {
        let mut pids = self.pids();
        let status = child.try_wait();
        if !matches!(status, Ok(None)) {
            pids.retain(|&pid| pid != child.id());
        }
        status
    }

    /// Stops `child`: SIGTERM to its group, SIGKILL after the grace period, then reaps and
    /// forgets it. A child already stopped by [`Children::stop_all`] is only reaped.
    pub fn stop(&self, child: &mut Child) {
        let mut pids = self.pids();
        let pid = child.id();
        if pids.contains(&pid) {
            signal_group(pid, Signal::SIGTERM);
            let deadline = Instant::now() + self.grace;
            while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
                std::thread::sleep(POLL);
            }
            if matches!(child.try_wait(), Ok(None)) {
                signal_group(pid, Signal::SIGKILL);
            }
            // Anything left in the group (a worker whose master exited first).
            signal_group(pid, Signal::SIGKILL);
            pids.retain(|&other| other != pid);
        }
        let _ = child.wait();
    }

    /// Stops every registered child (SIGTERM to each group, SIGKILL to what is left after the
    /// grace period) and returns how many there were. The lock stays held, so no child starts
    /// meanwhile; the `Child` handles still reap them.
    pub fn stop_all(&self) -> usize {
        let mut pids = self.pids();
        for &pid in pids.iter() {
            signal_group(pid, Signal::SIGTERM);
        }
        let deadline = Instant::now() + self.grace;
        while Instant::now() < deadline && pids.iter().any(|&pid| alive(pid)) {
            std::thread::sleep(POLL);
        }
        for &pid in pids.iter() {
            signal_group(pid, Signal::SIGKILL);
        }
        let count = pids.len();
        pids.clear();
        count
    }

    /// Starts a thread that, on SIGINT or SIGTERM, stops every child, calls `cleanup` with
    /// how many there were (to remove what else the command made), and exits the process
    /// with 130 or 143.
    pub fn exit_on_signal(
        self: &Arc<Self>,
        thread_name: &str,
        cleanup: impl FnOnce(usize) + Send + 'static,
    ) -> io::Result<()> {
        use tokio::signal::unix::{SignalKind, signal};
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()?;
        // Registered here, before the thread starts, so no signal is missed.
        let (mut interrupt, mut terminate) = runtime.block_on(async {
            Ok::<_, io::Error>((
                signal(SignalKind::interrupt())?,
                signal(SignalKind::terminate())?,
            ))
        })?;
        let children = Arc::clone(self);
        std::thread::Builder::new()
            .name(thread_name.to_owned())
            .spawn(move || {
                let code = runtime.block_on(async {
                    tokio::select! {
                        _ = interrupt.recv() => 130,
                        _ = terminate.recv() => 143,
                    }
                });
                cleanup(children.stop_all());
                std::process::exit(code);
            })?;
        Ok(())
    }
}

/// Sends `signal` to the process group `pid` leads.
fn signal_group(pid: u32, signal: Signal) {
    if let Ok(pid) = i32::try_from(pid) {
        let _ = kill(Pid::from_raw(-pid), signal);
    }
}

/// Whether `pid` still runs: it exists and is not a zombie (a zombie has exited).
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rfind(')')
            .and_then(|end| stat[end + 1..].split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sleeper() -> Command {
        let mut command = Command::new("sleep");
        command.arg("30");
        command
    }

    #[test]
    fn stop_ends_and_forgets_a_child() {
        let children = Children::new(Duration::from_secs(2));
        let mut child = children.spawn(&mut sleeper()).expect("sleep runs");
        let pid = child.id();
        assert!(alive(pid));
        assert_eq!(children.running(), [pid]);
        children.stop(&mut child);
        assert!(!alive(pid), "the child outlived stop");
        assert!(children.running().is_empty());
    }

    #[test]
    fn stop_all_ends_every_child_and_their_groups() {
        let children = Children::new(Duration::from_secs(2));
        // A shell that starts a grandchild in its group, as nginx starts workers.
        let mut shell = Command::new("sh");
        shell.args(["-c", "sleep 30 & echo $!; wait"]);
        shell.stdout(std::process::Stdio::piped());
        let mut parent = children.spawn(&mut shell).expect("sh runs");
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(parent.stdout.take().expect("piped")),
            &mut line,
        )
        .expect("the grandchild's PID");
        let grandchild: u32 = line.trim().parse().expect("a PID");
        let mut other = children.spawn(&mut sleeper()).expect("sleep runs");
        assert_eq!(children.stop_all(), 2);
        assert!(children.running().is_empty());
        // The handles reap what stop_all ended.
        children.stop(&mut parent);
        children.stop(&mut other);
        assert!(!alive(parent.id()) && !alive(other.id()));
        let deadline = Instant::now() + Duration::from_secs(2);
        while alive(grandchild) && Instant::now() < deadline {
            std::thread::sleep(POLL);
        }
        assert!(!alive(grandchild), "the group's other process survived");
    }

    #[test]
    fn an_exited_child_is_reaped_and_forgotten() {
        let children = Children::new(Duration::from_secs(2));
        let mut child = children
            .spawn(&mut Command::new("true"))
            .expect("true runs");
        let deadline = Instant::now() + Duration::from_secs(5);
        let status = loop {
            if let Some(status) = children.try_wait(&mut child).expect("wait") {
                break status;
            }
            assert!(Instant::now() < deadline, "true did not exit");
            std::thread::sleep(POLL);
        };
        assert!(status.success());
        assert!(children.running().is_empty());
    }
}
