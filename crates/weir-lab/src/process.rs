//! Everything a lab starts, and how it is stopped: the one process supervisor of weir's
//! experiments.
//!
//! Child processes (origins, weir, peers, the WAN lab's tunnel sides and probes) sit behind
//! guards ([`Child`]) that stop them by PID when dropped; run directories ([`RunDir`]) and
//! the WAN lab's network namespaces are removed when their guards drop. The [`Supervisor`]
//! knows all of them, so SIGINT or SIGTERM stops every child by PID and removes every
//! leftover before the lab exits (130 or 143).
//!
//! Children are registered and reaped under one lock, which the signal watcher takes too, so
//! it never signals a PID that was already reaped (and may have been reused), and no child
//! starts after it has begun. Each child leads a process group of its own, so a terminal's
//! Ctrl-C reaches only the lab, which then stops its children in order, and stopping a child
//! reaches whatever it started in its group (nginx's workers, say).

use std::fs;
use std::io::{self, BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, mpsc};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::error::LabError;

/// How long a child gets to exit after SIGTERM before SIGKILL (a tunnel side drains its
/// flows and prints its counters in that time).
const STOP_GRACE: Duration = Duration::from_secs(5);

/// How often a stopping or awaited child is checked for its exit.
const POLL: Duration = Duration::from_millis(10);

/// The children and leftovers of one lab, shared with the signal watcher.
#[derive(Debug)]
pub struct Supervisor {
    /// PIDs of children not reaped yet.
    pids: Mutex<Vec<u32>>,
    leftovers: Mutex<Vec<Leftover>>,
    /// SIGINT or SIGTERM arrived: the signal thread is stopping everything and will end the
    /// process with 130 or 143.
    interrupted: AtomicBool,
}

/// What a lab made besides processes, removed on SIGINT or SIGTERM (and by its guard).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Leftover {
    /// A run directory.
    Directory(PathBuf),
    /// The network namespaces (and devices) of a `weir netem` link, by its name.
    Namespaces(String),
}

impl Supervisor {
    /// A supervisor with no children, shared by everything that starts one.
    pub fn new() -> Arc<Supervisor> {
        Arc::new(Supervisor {
            pids: Mutex::new(Vec::new()),
            leftovers: Mutex::new(Vec::new()),
            interrupted: AtomicBool::new(false),
        })
    }

    /// Whether SIGINT or SIGTERM arrived ([`Supervisor::watch_signals`]). A lab that fails
    /// then (its children were stopped under it) is not the failure to report: the signal
    /// thread ends the process with the signal's status once it has cleaned up.
    pub fn interrupted(&self) -> bool {
        self.interrupted.load(Ordering::SeqCst)
    }

    fn pids(&self) -> MutexGuard<'_, Vec<u32>> {
        self.pids.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn leftovers(&self) -> MutexGuard<'_, Vec<Leftover>> {
        self.leftovers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// PIDs of the children not reaped yet.
    pub fn running(&self) -> Vec<u32> {
        self.pids().clone()
    }

    /// Starts a thread that, on SIGINT, SIGTERM, SIGHUP (the terminal or ssh session went)
    /// or SIGQUIT, stops every child, removes every leftover and exits the process with 128
    /// plus the signal's number. The children run in process groups of their own, so no
    /// signal meant for the lab reaches them: without this they would outlive it.
    pub fn watch_signals(self: &Arc<Self>) -> io::Result<()> {
        use tokio::signal::unix::{SignalKind, signal};
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()?;
        // Registered here, before the thread starts, so no signal is missed.
        let (mut interrupt, mut terminate, mut hangup, mut quit) = runtime.block_on(async {
            Ok::<_, io::Error>((
                signal(SignalKind::interrupt())?,
                signal(SignalKind::terminate())?,
                signal(SignalKind::hangup())?,
                signal(SignalKind::quit())?,
            ))
        })?;
        let supervisor = Arc::clone(self);
        std::thread::Builder::new()
            .name("weir-lab-signals".to_owned())
            .spawn(move || {
                let code = runtime.block_on(async {
                    tokio::select! {
                        _ = interrupt.recv() => 130,
                        _ = terminate.recv() => 143,
                        _ = hangup.recv() => 129,
                        _ = quit.recv() => 131,
                    }
                });
                supervisor.interrupted.store(true, Ordering::SeqCst);
                let stopped = supervisor.stop_all();
                let leftovers = supervisor.leftovers().clone();
                leftovers.iter().for_each(Leftover::remove);
                eprintln!(
                    "weir lab: interrupted; stopped {stopped} process(es) it had started and \
                     removed what it had made"
                );
                std::process::exit(code);
            })?;
        Ok(())
    }

    /// Stops every registered child (SIGTERM to each group, SIGKILL to what is left after the
    /// grace period) and returns how many there were. The lock stays held, so no child starts
    /// meanwhile; the [`Child`] guards still reap them.
    pub fn stop_all(&self) -> usize {
        let mut pids = self.pids();
        for &pid in pids.iter() {
            signal_group(pid, Signal::SIGTERM);
        }
        let deadline = Instant::now() + STOP_GRACE;
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

    /// Remembers `leftover` until [`Supervisor::forget`].
    pub fn remember(&self, leftover: Leftover) {
        self.leftovers().push(leftover);
    }

    /// Stops remembering `leftover` (it was cleaned up another way).
    pub fn forget(&self, leftover: &Leftover) {
        self.leftovers().retain(|other| other != leftover);
    }

    /// Spawns `command` as the leader of a new process group and registers it.
    fn spawn(&self, command: &mut Command) -> io::Result<std::process::Child> {
        let mut pids = self.pids();
        let child = command.process_group(0).spawn()?;
        pids.push(child.id());
        Ok(child)
    }

    /// `Some(status)` once `child` has exited; it is then reaped and forgotten.
    fn try_wait(&self, child: &mut std::process::Child) -> io::Result<Option<ExitStatus>> {
        let mut pids = self.pids();
        let status = child.try_wait();
        if !matches!(status, Ok(None)) {
            pids.retain(|&pid| pid != child.id());
        }
        status
    }

    /// Stops `child`: SIGTERM to its group, SIGKILL after the grace period, then reaps and
    /// forgets it. A child already stopped by [`Supervisor::stop_all`] is only reaped.
    fn stop(&self, child: &mut std::process::Child) {
        let mut pids = self.pids();
        let pid = child.id();
        if pids.contains(&pid) {
            signal_group(pid, Signal::SIGTERM);
            let deadline = Instant::now() + STOP_GRACE;
            while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
                std::thread::sleep(POLL);
            }
            // SIGKILL to the group whatever happened: a child still running past the grace
            // period, or a worker left behind by a master that exited first.
            signal_group(pid, Signal::SIGKILL);
            pids.retain(|&other| other != pid);
        }
        let _ = child.wait();
    }
}

impl Leftover {
    /// Removes it, best effort (the lab is failing or interrupted; nothing is left to tell).
    fn remove(&self) {
        match self {
            Leftover::Directory(path) => {
                let _ = fs::remove_dir_all(path);
            }
            Leftover::Namespaces(name) => {
                let _ = weir_netem::namespace::remove_leftovers(name);
            }
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
    /// Creates a fresh directory under the system's temporary directory, removed on drop (or by the
    /// supervisor on a signal).
    pub fn create(supervisor: &Arc<Supervisor>) -> Result<RunDir, LabError> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let path = std::env::temp_dir().join(format!(
            "weir-lab-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        fs::create_dir_all(&path)
            .map_err(|e| LabError::io(format!("cannot create {}", path.display()), e))?;
        supervisor.remember(Leftover::Directory(path.clone()));
        Ok(RunDir {
            path,
            supervisor: Arc::clone(supervisor),
        })
    }

    /// The directory's path.
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
            .forget(&Leftover::Directory(self.path.clone()));
    }
}

/// A running child process, stopped by PID when dropped.
#[derive(Debug)]
pub struct Child {
    name: String,
    child: std::process::Child,
    log: PathBuf,
    /// Its stdout, a line at a time, when started with [`Child::spawn_reading`].
    lines: Option<mpsc::Receiver<String>>,
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
        command: Command,
    ) -> Result<Child, LabError> {
        Child::start(supervisor, dir, name, command, false)
    }

    /// As [`Child::spawn`], with stdout kept for [`Child::wait_for_line`],
    /// [`Child::finish`] and [`Child::stop_and_read`].
    pub fn spawn_reading(
        supervisor: &Arc<Supervisor>,
        dir: &RunDir,
        name: &str,
        command: Command,
    ) -> Result<Child, LabError> {
        Child::start(supervisor, dir, name, command, true)
    }

    fn start(
        supervisor: &Arc<Supervisor>,
        dir: &RunDir,
        name: &str,
        mut command: Command,
        read_stdout: bool,
    ) -> Result<Child, LabError> {
        let log = dir.path().join(format!("{name}.log"));
        let stderr = fs::File::create(&log)
            .map_err(|e| LabError::io(format!("cannot create {}", log.display()), e))?;
        let stdout = if read_stdout {
            Stdio::piped()
        } else {
            Stdio::null()
        };
        command.stdin(Stdio::null()).stdout(stdout).stderr(stderr);
        let mut child = supervisor
            .spawn(&mut command)
            .map_err(|source| LabError::Spawn {
                what: format!("{name} ({})", command.get_program().to_string_lossy()),
                error: source,
            })?;
        let lines = child.stdout.take().map(|stdout| {
            let (sender, lines) = mpsc::channel();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    if sender.send(line).is_err() {
                        break;
                    }
                }
            });
            lines
        });
        Ok(Child {
            name: name.to_owned(),
            child,
            log,
            lines,
            supervisor: Arc::clone(supervisor),
            stopped: false,
        })
    }

    /// The child's process id (also its process group id).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The child's name, as used in messages and log file names.
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
        match self.supervisor.try_wait(&mut self.child) {
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

    /// Waits until the child prints a line that starts with `ready` (started with
    /// [`Child::spawn_reading`]), failing if it exits or `limit` passes first.
    pub fn wait_for_line(&mut self, ready: &str, limit: Duration) -> Result<(), LabError> {
        let deadline = Instant::now() + limit;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let Some(lines) = self.lines.as_ref().filter(|_| !left.is_zero()) else {
                return Err(LabError::NotReady {
                    what: self.name.clone(),
                    address: format!("its output (a line {ready:?})"),
                    seconds: limit.as_secs(),
                    output: seen.join("\n") + "\n" + &self.output_tail(),
                });
            };
            match lines.recv_timeout(left.min(Duration::from_millis(100))) {
                Ok(line) if line.starts_with(ready) => return Ok(()),
                Ok(line) => seen.push(line),
                // Nothing new, or stdout closed: fail at once if the child is gone.
                Err(error) => {
                    if let Some(exited) = self.exited() {
                        return Err(exited);
                    }
                    if error == mpsc::RecvTimeoutError::Disconnected {
                        std::thread::sleep(POLL);
                    }
                }
            }
        }
    }

    /// Waits for the child to exit by itself and returns what it printed on stdout since
    /// the last read.
    pub fn finish(&mut self) -> Vec<String> {
        while matches!(self.supervisor.try_wait(&mut self.child), Ok(None)) {
            std::thread::sleep(POLL);
        }
        self.stopped = true;
        self.lines()
    }

    /// SIGTERM, then SIGKILL after the grace period; waits for the exit.
    pub fn stop(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        self.supervisor.stop(&mut self.child);
    }

    /// Stops the child and returns what it printed on stdout since the last read.
    pub fn stop_and_read(mut self) -> Vec<String> {
        self.stop();
        self.lines()
    }

    /// The stdout lines not read yet, once the child has exited (the reader thread gets
    /// up to 2 s to pass on the last ones).
    fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(lines) = &self.lines {
            while let Ok(line) = lines.recv_timeout(Duration::from_secs(2)) {
                out.push(line);
            }
        }
        out
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        self.stop();
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
    fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rfind(')')
            .and_then(|end| stat[end + 1..].split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
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
mod tests;
