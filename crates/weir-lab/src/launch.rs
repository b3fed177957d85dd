//! Starting what an experiment measures, each as its own process: `weir origin` and
//! `weir serve` (the running weir binary), nginx and HAProxy. Each start waits until the
//! process answers HTTP, and fails with the process's own last words if it does not.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use crate::error::LabError;
use crate::process::{Child, RunDir, Supervisor, loopback, wait_ready};
use crate::procfs;

/// How long a started process gets to answer.
const READY_TIMEOUT: Duration = Duration::from_secs(15);

/// The running weir binary, the lab's processes and its run directory.
#[derive(Debug)]
pub struct Launcher {
    pub supervisor: Arc<Supervisor>,
    pub weir: PathBuf,
    pub dir: RunDir,
}

impl Launcher {
    pub fn new(supervisor: &Arc<Supervisor>, weir: PathBuf) -> Result<Launcher, LabError> {
        Ok(Launcher {
            supervisor: Arc::clone(supervisor),
            weir,
            dir: RunDir::create(supervisor)?,
        })
    }

    /// `weir origin --listen 127.0.0.1:PORT --threads 1 ARGS...`, ready when `/healthz`
    /// answers 200 (over TLS the lab cannot probe it that way: `tls_ready` probes the TCP
    /// accept only).
    pub async fn weir_origin(
        &self,
        name: &str,
        port: u16,
        args: &[String],
        tls: bool,
    ) -> Result<Child, LabError> {
        let mut command = Command::new(&self.weir);
        command
            .arg("origin")
            .arg("--listen")
            .arg(loopback(port).to_string())
            .arg("--name")
            .arg(name)
            .arg("--threads")
            .arg("1")
            .args(args);
        let mut child = Child::spawn(&self.supervisor, &self.dir, name, command)?;
        if tls {
            wait_accepting(&mut child, loopback(port)).await?;
        } else {
            wait_ready(&mut child, loopback(port), "/healthz", READY_TIMEOUT).await?;
        }
        Ok(child)
    }

    /// `weir serve --config FILE` with `config` written to `<name>.toml`; ready when every
    /// `(address, path)` in `ready` answers 200 (an HTTPS listener: when it accepts).
    pub async fn weir_serve(
        &self,
        name: &str,
        config: &str,
        ready: &[(SocketAddr, &str)],
        accepting: &[SocketAddr],
    ) -> Result<Child, LabError> {
        let file = self.dir.write(&format!("{name}.toml"), config)?;
        let mut command = Command::new(&self.weir);
        command.arg("serve").arg("--config").arg(&file);
        let mut child = Child::spawn(&self.supervisor, &self.dir, name, command)?;
        for (address, path) in ready {
            wait_ready(&mut child, *address, path, READY_TIMEOUT).await?;
        }
        for address in accepting {
            wait_accepting(&mut child, *address).await?;
        }
        Ok(child)
    }

    /// nginx in the foreground with `config` as its whole configuration, its prefix a
    /// directory of its own in the run directory.
    pub async fn nginx(
        &self,
        program: &Path,
        name: &str,
        config: &str,
        ready: &[(SocketAddr, &str)],
    ) -> Result<Child, LabError> {
        let prefix = self.dir.path().join(name);
        for sub in [
            "tmp/client_body",
            "tmp/proxy",
            "tmp/fastcgi",
            "tmp/uwsgi",
            "tmp/scgi",
        ] {
            std::fs::create_dir_all(prefix.join(sub))
                .map_err(|e| LabError::io(format!("cannot create {}", prefix.display()), e))?;
        }
        let file = prefix.join("nginx.conf");
        std::fs::write(&file, config)
            .map_err(|e| LabError::io(format!("cannot write {}", file.display()), e))?;
        let mut command = Command::new(program);
        command
            .arg("-p")
            .arg(format!("{}/", prefix.display()))
            .arg("-c")
            .arg(&file)
            .arg("-e")
            .arg(prefix.join("error.log"))
            .arg("-g")
            .arg("daemon off;");
        let mut child = Child::spawn(&self.supervisor, &self.dir, name, command)?;
        for (address, path) in ready {
            wait_ready(&mut child, *address, path, READY_TIMEOUT).await?;
        }
        Ok(child)
    }

    /// HAProxy in the foreground (`-db`) with `config`.
    pub async fn haproxy(
        &self,
        program: &Path,
        name: &str,
        config: &str,
        ready: &[(SocketAddr, &str)],
    ) -> Result<Child, LabError> {
        let file = self.dir.write(&format!("{name}.cfg"), config)?;
        let mut command = Command::new(program);
        command.arg("-db").arg("-f").arg(&file);
        let mut child = Child::spawn(&self.supervisor, &self.dir, name, command)?;
        for (address, path) in ready {
            wait_ready(&mut child, *address, path, READY_TIMEOUT).await?;
        }
        Ok(child)
    }
}

/// Waits until `address` accepts a TCP connection (for TLS listeners).
async fn wait_accepting(child: &mut Child, address: SocketAddr) -> Result<(), LabError> {
    let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
    loop {
        if let Some(error) = child.exited() {
            return Err(error);
        }
        if tokio::net::TcpStream::connect(address).await.is_ok() {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(LabError::NotReady {
                what: child.name().to_owned(),
                address: address.to_string(),
                seconds: READY_TIMEOUT.as_secs(),
                output: child.output_tail(),
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A child and the processes it forked (nginx's workers), for CPU and memory.
pub fn process_tree(child: &Child) -> Vec<u32> {
    let mut pids = vec![child.pid()];
    pids.extend(procfs::children_of(child.pid()));
    pids
}

/// CPU seconds of a process tree so far.
pub fn tree_cpu_seconds(pids: &[u32]) -> f64 {
    pids.iter()
        .filter_map(|&pid| procfs::cpu_seconds(pid))
        .sum()
}

/// Resident memory now and its peak, KiB, of a process tree, each page counted once (see
/// [`tree_memory`]). A tree of one process (weir, HAProxy, the origin) costs one read of its
/// status per sample; only the others' private pages are read from `smaps_rollup`.
pub fn tree_memory_kib(pids: &[u32]) -> (u64, u64) {
    let processes: Vec<TreeMemory> = pids
        .iter()
        .filter_map(|&pid| {
            let (rss, hwm) = procfs::memory_kib(pid)?;
            Some(TreeMemory { pid, rss, hwm })
        })
        .collect();
    tree_memory(&processes, |process| {
        procfs::private_kib(process.pid).unwrap_or(process.rss)
    })
}

/// One process of a tree: its PID, VmRSS and VmHWM, KiB.
#[derive(Debug, Clone, Copy)]
pub struct TreeMemory {
    pub pid: u32,
    pub rss: u64,
    pub hwm: u64,
}

/// A tree's resident memory now and its peak: the largest process's (VmRSS, VmHWM) and the
/// pages `private` to each other one. nginx's master and workers share their code and what
/// the master built before it forked; summing their VmRSS counted those pages once per
/// process, where the one process of weir or HAProxy counts them once.
pub fn tree_memory(processes: &[TreeMemory], private: impl Fn(&TreeMemory) -> u64) -> (u64, u64) {
    let Some((main, largest)) = processes
        .iter()
        .enumerate()
        .max_by_key(|(_, process)| process.rss)
    else {
        return (0, 0);
    };
    let others: u64 = processes
        .iter()
        .enumerate()
        .filter(|(index, _)| *index != main)
        .map(|(_, process)| private(process))
        .sum();
    (largest.rss + others, largest.hwm + others)
}

#[cfg(test)]
mod tests {
    use super::{TreeMemory, tree_memory};

    #[test]
    fn a_tree_counts_its_shared_pages_once() {
        let process = |pid, rss, hwm| TreeMemory { pid, rss, hwm };
        // Private pages by PID; a process whose are asked for and not listed fails the test.
        let private = |listed: &'static [(u32, u64)]| {
            move |process: &TreeMemory| {
                listed
                    .iter()
                    .find(|(pid, _)| *pid == process.pid)
                    .map(|(_, kib)| *kib)
                    .unwrap_or_else(|| panic!("private pages of {} read", process.pid))
            }
        };
        assert_eq!(tree_memory(&[], private(&[])), (0, 0));
        // One process: its own figures, whatever it shares with others, and no private
        // pages read.
        assert_eq!(
            tree_memory(&[process(1, 9_000, 24_000)], private(&[])),
            (9_000, 24_000)
        );
        // nginx: a master (mostly pages its worker shares) and a busier worker.
        let master = process(1, 5_500, 5_600);
        let worker = process(2, 5_600, 27_000);
        assert_eq!(
            tree_memory(&[master, worker], private(&[(1, 1_000)])),
            (6_600, 28_000)
        );
    }
}
