//! Everything the lab starts, and how it is stopped: child processes (origins, weir,
//! peers) behind guards that stop them by PID when dropped, a run directory removed at the
//! end, and a [`Supervisor`] that knows both, so SIGINT or SIGTERM stops every child by PID
//! and removes every run directory before the lab exits.

use std::fs;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use weir_core::Children;

use crate::error::LabError;

/// How long a child gets to exit after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(3);

/// The children and run directories of one lab, shared with the signal watcher.
#[derive(Debug)]
pub struct Supervisor {
    children: Arc<Children>,
    directories: Mutex<Vec<PathBuf>>,
}

impl Supervisor {
    pub fn new() -> Arc<Supervisor> {
        Arc::new(Supervisor {
            children: Children::new(STOP_GRACE),
            directories: Mutex::new(Vec::new()),
        })
    }

    /// Starts a thread that, on SIGINT or SIGTERM, stops every child, removes every run
    /// directory and exits the process (130 or 143).
    pub fn watch_signals(self: &Arc<Self>) -> io::Result<()> {
        let supervisor = Arc::clone(self);
        self.children
            .exit_on_signal("weir-lab-signals", move |stopped| {
                supervisor.remove_directories();
                eprintln!("weir lab: interrupted; stopped {stopped} process(es) it had started");
            })
    }

    /// Stops every registered child and returns how many there were.
    pub fn stop_all(&self) -> usize {
        self.children.stop_all()
    }

    fn remove_directories(&self) {
        let directories = self
            .directories
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for directory in directories.iter() {
            let _ = fs::remove_dir_all(directory);
        }
    }
}

/// A private directory for one lab's configs, certificates and child logs; removed on drop.
#[derive(Debug)]
pub struct RunDir {
    path: PathBuf,
    supervisor: Arc<Supervisor>,
}

impl RunDir {
    pub fn create(supervisor: &Arc<Supervisor>) -> Result<RunDir, LabError> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let path = std::env::temp_dir().join(format!(
            "weir-lab-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        fs::create_dir_all(&path)
            .map_err(|e| LabError::io(format!("cannot create {}", path.display()), e))?;
        supervisor
            .directories
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(path.clone());
        Ok(RunDir {
            path,
            supervisor: Arc::clone(supervisor),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `text` to `name` in the directory and returns its path.
    pub fn write(&self, name: &str, text: &str) -> Result<PathBuf, LabError> {
        let path = self.path.join(name);
        fs::write(&path, text)
            .map_err(|e| LabError::io(format!("cannot write {}", path.display()), e))?;
        Ok(path)
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
        self.supervisor
            .directories
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|path| path != &self.path);
    }
}

/// A running child process, stopped by PID when dropped.
#[derive(Debug)]
pub struct Child {
    name: String,
    child: std::process::Child,
    log: PathBuf,
    supervisor: Arc<Supervisor>,
    stopped: bool,
}

impl Child {
    /// Starts `command` in its own process group (so the terminal's Ctrl-C reaches only the
    /// lab, which then stops it in order), stdout discarded, stderr to `<dir>/<name>.log`.
    pub fn spawn(
        supervisor: &Arc<Supervisor>,
        dir: &RunDir,
        name: &str,
        mut command: Command,
    ) -> Result<Child, LabError> {
        let log = dir.path().join(format!("{name}.log"));
        let stderr = fs::File::create(&log)
            .map_err(|e| LabError::io(format!("cannot create {}", log.display()), e))?;
        command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        let child = supervisor
            .children
            .spawn(&mut command)
            .map_err(|source| LabError::Spawn {
                what: format!("{name} ({})", command.get_program().to_string_lossy()),
                source,
            })?;
        Ok(Child {
            name: name.to_owned(),
            child,
            log,
            supervisor: Arc::clone(supervisor),
            stopped: false,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The last lines the child wrote to stderr.
    pub fn output_tail(&self) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }

    /// `Some(error)` once the child has exited.
    pub fn exited(&mut self) -> Option<LabError> {
        match self.supervisor.children.try_wait(&mut self.child) {
            Ok(Some(status)) => Some(self.exit_error(status)),
            Ok(None) => None,
            Err(e) => Some(LabError::io(format!("cannot wait for {}", self.name), e)),
        }
    }

    fn exit_error(&self, status: ExitStatus) -> LabError {
        LabError::Exited {
            what: self.name.clone(),
            status: status.to_string(),
            output: self.output_tail(),
        }
    }

    /// SIGTERM, then SIGKILL after the grace period; waits for the exit.
    pub fn stop(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        self.supervisor.children.stop(&mut self.child);
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `count` distinct free TCP ports on 127.0.0.1, held together while chosen so no two
/// coincide. Another program may still take one before the child binds it; the child's
/// start then fails with its own message.
pub fn free_ports(count: usize) -> Result<Vec<u16>, LabError> {
    let listeners = (0..count)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<io::Result<Vec<_>>>()
        .map_err(|e| LabError::io("cannot find a free port on 127.0.0.1", e))?;
    listeners
        .iter()
        .map(|listener| listener.local_addr().map(|address| address.port()))
        .collect::<io::Result<Vec<_>>>()
        .map_err(|e| LabError::io("cannot read a bound port", e))
}

/// `127.0.0.1:port`.
pub fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// Waits until `GET path` on `address` answers 200, failing early if the child exits.
pub async fn wait_ready(
    child: &mut Child,
    address: SocketAddr,
    path: &str,
    timeout: Duration,
) -> Result<(), LabError> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(error) = child.exited() {
            return Err(error);
        }
        if let Ok(response) = crate::http::get(address, path, Duration::from_millis(500)).await
            && response.status == 200
        {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(LabError::NotReady {
                what: child.name().to_owned(),
                address: format!("http://{address}{path}"),
                seconds: timeout.as_secs(),
                output: child.output_tail(),
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[cfg(test)]
mod tests {
    use weir_core::children::alive;

    use super::*;

    #[test]
    fn a_dropped_child_is_stopped_and_forgotten() {
        let supervisor = Supervisor::new();
        let dir = RunDir::create(&supervisor).expect("temp dir");
        let mut command = Command::new("sleep");
        command.arg("30");
        let child = Child::spawn(&supervisor, &dir, "sleeper", command).expect("sleep runs");
        let pid = child.pid();
        assert!(alive(pid));
        assert_eq!(supervisor.children.running(), [pid]);
        drop(child);
        assert!(!alive(pid), "the child outlived its guard");
        assert!(supervisor.children.running().is_empty());
        let path = dir.path().to_owned();
        drop(dir);
        assert!(!path.exists(), "the run directory outlived its guard");
    }

    #[test]
    fn stop_all_stops_every_registered_child() {
        let supervisor = Supervisor::new();
        let dir = RunDir::create(&supervisor).expect("temp dir");
        let children: Vec<Child> = (0..2)
            .map(|i| {
                let mut command = Command::new("sleep");
                command.arg("30");
                Child::spawn(&supervisor, &dir, &format!("sleeper-{i}"), command).expect("spawn")
            })
            .collect();
        let pids: Vec<u32> = children.iter().map(Child::pid).collect();
        assert_eq!(supervisor.stop_all(), 2);
        for pid in pids {
            assert!(!alive(pid));
        }
        // The guards now find nothing left to stop.
        drop(children);
    }

    #[test]
    fn free_ports_are_distinct() {
        let ports = free_ports(6).expect("ports");
        let mut unique = ports.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), 6);
    }
}
