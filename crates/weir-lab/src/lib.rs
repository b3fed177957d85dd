//! `weir lab`: the source documents' offload experiments, reproduced on one machine in one
//! command, with their tables, a JSON document and a self-contained HTML report.
//!
//! | experiment | module | what it shows |
//! |---|---|---|
//! | `weir lab offload` | [`offload`] | the Cisco ACE TCP-offload test: many slow keep-alive clients against a connection-capped origin, direct and through weir |
//! | `weir lab tls` | [`tls`] | the Cisco ACE SSL-offload test: the origin's CPU and memory serving HTTPS itself vs plain HTTP behind weir |
//! | `weir lab suite` | [`suite`] | the Zeus table (`weir bench suite`) direct, through weir and through HAProxy and nginx |
//! | `weir lab wan` | [`wan`] | the WX WAN-acceleration matrix: direct TCP vs `weir tunnel` through `weir netem` links (needs root) |
//!
//! Every experiment starts what it measures as separate processes — `weir origin`,
//! `weir serve` and `weir tunnel` from the running binary, nginx and HAProxy from Debian — so
//! each one's CPU seconds and memory are read from `/proc` on its own. Every process is stopped
//! by PID when its phase ends, when the lab fails, and on SIGINT or SIGTERM, by the one
//! supervisor of the labs ([`process::Supervisor`]), which also removes what they made (run
//! directories, the WAN lab's network namespaces).
//!
//! The results are data ([`model`]); ratios and checks are plain functions (`summary`);
//! the text tables ([`table`]) and the HTML report ([`html`]) render that data, so each is
//! tested without running anything.
//!
//! # Example
//!
//! ```no_run
//! use weir_lab::{Lab, offload::OffloadSettings};
//!
//! let supervisor = weir_lab::process::Supervisor::new();
//! supervisor.watch_signals()?;
//! let weir = std::env::current_exe()?;
//! let mut lab = Lab::new(supervisor, weir, true, false);
//! let offload = weir_lab::offload::run(&mut lab, &OffloadSettings::quick())?;
//! let report = lab.report("weir lab offload --quick", Some(offload), None, None);
//! print!("{}", weir_lab::table::lab_text(&report));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod clients;
mod error;
pub mod html;
mod http;
pub mod l4;
mod launch;
mod metrics;
pub mod model;
pub mod offload;
pub mod peers;
mod preflight;
pub mod process;
mod procfs;
pub mod suite;
mod summary;
pub mod table;
mod template;
pub mod tls;
pub mod wan;

use std::path::PathBuf;
use std::sync::Arc;

pub use error::LabError;
pub use model::LabReport;

use crate::model::{OffloadReport, SuiteLabReport, TlsReport};
use crate::peers::Peer;
use crate::process::Supervisor;

/// One `weir lab` invocation: the processes it may start, where the weir binary is, and
/// the notes it collects for the report.
#[derive(Debug)]
pub struct Lab {
    /// Starts and stops every child process of the lab, by PID.
    pub supervisor: Arc<Supervisor>,
    /// The weir binary that `weir origin` and `weir serve` are started from.
    pub weir: PathBuf,
    /// Print one progress line a sample to stderr.
    pub progress: bool,
    /// Install missing Debian packages (nginx, HAProxy) instead of going on without them.
    pub install: bool,
    /// Fallbacks taken and things worth knowing, copied into the report.
    pub notes: Vec<String>,
    open_files: u64,
    started: std::time::SystemTime,
}

impl Lab {
    /// Raises the open-file limit to the hard limit first (the children inherit it).
    pub fn new(supervisor: Arc<Supervisor>, weir: PathBuf, progress: bool, install: bool) -> Lab {
        let open_files = procfs::raise_open_file_limit();
        Lab {
            supervisor,
            weir,
            progress,
            install,
            notes: Vec::new(),
            open_files,
            started: std::time::SystemTime::now(),
        }
    }

    /// The open-file limit every process of the lab runs with.
    pub fn open_files(&self) -> u64 {
        self.open_files
    }

    /// Keeps a note for the report (and says it now).
    pub fn note(&mut self, note: impl Into<String>) {
        let note = note.into();
        eprintln!("weir lab: note: {note}");
        self.notes.push(note);
    }

    /// A progress line on stderr.
    pub fn say(&self, line: &str) {
        if self.progress {
            eprintln!("weir lab: {line}");
        }
    }

    /// The runtime the lab's own clients and samplers run on: one worker thread, so the
    /// load costs one core at most, plus the blocking pool for `/proc` reads.
    pub fn runtime(&self) -> Result<tokio::runtime::Runtime, LabError> {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("weir-lab")
            .enable_all()
            .build()
            .map_err(|e| LabError::io("cannot start the lab's runtime", e))
    }

    /// The program for `peer`, installing it first with `--install`; `None` (with a note
    /// saying how to get it) when it is not there.
    pub fn program(&mut self, peer: Peer) -> Option<PathBuf> {
        if let Some(program) = peers::find_program(peer.name()) {
            return Some(program);
        }
        if self.install {
            self.say(&format!("installing {} (apt-get)", peer.package()));
            match peers::install(&[peer.package()]) {
                Ok(()) => return peers::find_program(peer.name()),
                Err(error) => self.note(format!("--install {}: {error}", peer.name())),
            }
        }
        None
    }

    /// The whole run as one document.
    pub fn report(
        &self,
        command: &str,
        offload: Option<OffloadReport>,
        tls: Option<TlsReport>,
        suite: Option<SuiteLabReport>,
    ) -> LabReport {
        LabReport {
            schema: model::SCHEMA.to_owned(),
            weir_version: weir_core::VERSION.to_owned(),
            date: humantime::format_rfc3339_seconds(self.started).to_string(),
            command: command.to_owned(),
            machine: procfs::machine(self.open_files),
            offload,
            tls,
            suite,
            notes: self.notes.clone(),
        }
    }
}

/// Whether every check of every experiment in the report passed.
pub fn all_passed(report: &LabReport) -> bool {
    let offload = report.offload.iter().flat_map(|o| o.checks.iter());
    let tls = report.tls.iter().flat_map(|t| t.checks.iter());
    offload.chain(tls).all(|check| check.passed)
}

/// Writes `lab.json` and `report.html` into `dir` (created if missing); returns their paths.
pub fn write_outputs(
    report: &LabReport,
    dir: &std::path::Path,
) -> Result<(PathBuf, PathBuf), LabError> {
    std::fs::create_dir_all(dir)
        .map_err(|e| LabError::io(format!("cannot create {}", dir.display()), e))?;
    let json = dir.join("lab.json");
    let text = serde_json::to_string_pretty(report)
        .map_err(|e| LabError::io("cannot serialise the report", std::io::Error::other(e)))?;
    std::fs::write(&json, text + "\n")
        .map_err(|e| LabError::io(format!("cannot write {}", json.display()), e))?;
    let html = dir.join("report.html");
    std::fs::write(&html, html::render(report))
        .map_err(|e| LabError::io(format!("cannot write {}", html.display()), e))?;
    Ok((json, html))
}
