//! Everything a `weir lab wan` run has started — child processes, the current cell's
//! namespaces, the work directory — so that SIGINT or SIGTERM stops every child by its PID
//! and removes the rest before the lab exits (130 or 143).
//!
//! Children are spawned and reaped under one lock, which the signal watcher takes too: it
//! never signals a PID that was already reaped (and possibly reused), and no child starts
//! after it has begun.

use std::io;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// How long a child gets after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// What the run has started.
#[derive(Debug)]
pub struct Supervisor {
    children: Mutex<Vec<u32>>,
    namespaces: Mutex<Option<String>>,
    work_dir: PathBuf,
}

impl Supervisor {
    pub fn new(work_dir: PathBuf) -> Arc<Supervisor> {
        Arc::new(Supervisor {
            children: Mutex::new(Vec::new()),
            namespaces: Mutex::new(None),
            work_dir,
        })
    }

    /// Starts a thread that, on SIGINT or SIGTERM, undoes everything and exits.
    pub fn watch_signals(self: &Arc<Self>) -> io::Result<()> {
        use tokio::signal::unix::{SignalKind, signal};
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()?;
        // Registered before the thread starts, so no signal is missed.
        let (mut interrupt, mut terminate) = runtime.block_on(async {
            Ok::<_, io::Error>((
                signal(SignalKind::interrupt())?,
                signal(SignalKind::terminate())?,
            ))
        })?;
        let supervisor = Arc::clone(self);
        std::thread::Builder::new()
            .name("weir-lab-wan-signals".into())
            .spawn(move || {
                let code = runtime.block_on(async {
                    tokio::select! {
                        _ = interrupt.recv() => 130,
                        _ = terminate.recv() => 143,
                    }
                });
                let stopped = supervisor.undo();
                eprintln!(
                    "weir lab wan: interrupted; stopped {stopped} process(es) it had started and \
                     removed its namespaces"
                );
                std::process::exit(code);
            })?;
        Ok(())
    }

    /// Spawns `command` and registers its PID.
    pub fn spawn(&self, command: &mut Command) -> io::Result<Child> {
        let mut children = self.children();
        let child = command.spawn()?;
        children.push(child.id());
        Ok(child)
    }

    /// Waits for `child` to exit; it is reaped under the lock, and its PID forgotten.
    pub fn wait(&self, child: &mut Child) -> Option<ExitStatus> {
        loop {
            {
                let mut children = self.children();
                let status = match child.try_wait() {
                    Ok(None) => None,
                    Ok(Some(status)) => Some(Some(status)),
                    Err(_) => Some(None),
                };
                if let Some(status) = status {
                    children.retain(|&pid| pid != child.id());
                    return status;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops `child`: SIGTERM, then SIGKILL after the grace period; reaped under the lock.
    pub fn stop(&self, child: &mut Child) {
        let mut children = self.children();
        if !children.contains(&child.id()) {
            return;
        }
        signal(child.id(), "TERM");
        let deadline = Instant::now() + STOP_GRACE;
        while Instant::now() < deadline {
            if matches!(child.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if !matches!(child.try_wait(), Ok(Some(_))) {
            let _ = child.kill();
            let _ = child.wait();
        }
        children.retain(|&pid| pid != child.id());
    }

    /// The cell's namespaces (by prefix), or `None` once they are removed.
    pub fn set_namespaces(&self, prefix: Option<String>) {
        *self
            .namespaces
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = prefix;
    }

    fn children(&self) -> MutexGuard<'_, Vec<u32>> {
        self.children.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Stops every child, removes the namespaces and the work directory; returns how many
    /// children there were. Keeps the children lock, so nothing new starts meanwhile.
    fn undo(&self) -> usize {
        let children = self.children();
        for &pid in children.iter() {
            signal(pid, "TERM");
        }
        let deadline = Instant::now() + STOP_GRACE;
        while Instant::now() < deadline && children.iter().any(|&pid| alive(pid)) {
            std::thread::sleep(Duration::from_millis(20));
        }
        for &pid in children.iter().filter(|&&pid| alive(pid)) {
            signal(pid, "KILL");
        }
        let namespaces = self
            .namespaces
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(prefix) = namespaces {
            let _ = weir_netem::namespace::remove_leftovers(&prefix);
        }
        let _ = std::fs::remove_dir_all(&self.work_dir);
        children.len()
    }
}

/// Sends a signal to one of our children by its PID (the shell's `kill`).
fn signal(pid: u32, name: &str) {
    let _ = Command::new("kill")
        .args([format!("-{name}"), pid.to_string()])
        .status();
}

/// Whether `pid` still runs (not a zombie: a zombie has exited and awaits reaping).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rfind(')')
            .and_then(|end| stat[end + 1..].split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}
