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
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use weir_core::Children;

/// How long a child gets after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// What the run has started.
#[derive(Debug)]
pub struct Supervisor {
    children: Arc<Children>,
    namespaces: Mutex<Option<String>>,
    work_dir: PathBuf,
}

impl Supervisor {
    pub fn new(work_dir: PathBuf) -> Arc<Supervisor> {
        Arc::new(Supervisor {
            children: Children::new(STOP_GRACE),
            namespaces: Mutex::new(None),
            work_dir,
        })
    }

    /// Starts a thread that, on SIGINT or SIGTERM, undoes everything and exits.
    pub fn watch_signals(self: &Arc<Self>) -> io::Result<()> {
        let supervisor = Arc::clone(self);
        self.children
            .exit_on_signal("weir-lab-wan-signals", move |stopped| {
                supervisor.remove_namespaces_and_work_dir();
                eprintln!(
                    "weir lab wan: interrupted; stopped {stopped} process(es) it had started and \
                     removed its namespaces"
                );
            })
    }

    /// Spawns `command` (in a process group of its own) and registers its PID.
    pub fn spawn(&self, command: &mut Command) -> io::Result<Child> {
        self.children.spawn(command)
    }

    /// Waits for `child` to exit; it is reaped under the lock, and its PID forgotten.
    pub fn wait(&self, child: &mut Child) -> Option<ExitStatus> {
        loop {
            match self.children.try_wait(child) {
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Ok(Some(status)) => return Some(status),
                Err(_) => return None,
            }
        }
    }

    /// Stops `child`: SIGTERM, then SIGKILL after the grace period; reaped under the lock.
    pub fn stop(&self, child: &mut Child) {
        self.children.stop(child);
    }

    /// The cell's namespaces (by prefix), or `None` once they are removed.
    pub fn set_namespaces(&self, prefix: Option<String>) {
        *self
            .namespaces
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = prefix;
    }

    /// Removes the current cell's namespaces, if any, and the work directory (after every
    /// child has been stopped).
    fn remove_namespaces_and_work_dir(&self) {
        let namespaces = self
            .namespaces
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(prefix) = namespaces {
            let _ = weir_netem::namespace::remove_leftovers(&prefix);
        }
        let _ = std::fs::remove_dir_all(&self.work_dir);
    }
}
