//! Why a lab could not run.

use std::io;

use crate::template::TemplateError;

/// Everything that stops an experiment, each with a message meant for the person at the
/// terminal.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// Settings that cannot work together (caught before anything starts).
    #[error("{0}")]
    Invalid(String),
    /// The machine cannot run what was asked (limits, ports), and no fallback applies.
    #[error("{0}")]
    Preflight(String),
    #[error("cannot start {what}: {source}")]
    Spawn { what: String, source: io::Error },
    #[error("{what} exited before it was ready ({status}); its last output:\n{output}")]
    Exited {
        what: String,
        status: String,
        output: String,
    },
    #[error("{what} did not answer on {address} within {seconds} s; its last output:\n{output}")]
    NotReady {
        what: String,
        address: String,
        seconds: u64,
        output: String,
    },
    #[error("{context}: {source}")]
    Io { context: String, source: io::Error },
    #[error("weir bench: {0}")]
    Bench(String),
    #[error("config template: {0}")]
    Template(#[from] TemplateError),
    /// The WAN lab's emulated link could not be set up (root, TUN, `ip`).
    #[error(transparent)]
    Netem(#[from] weir_netem::SetupError),
}

impl LabError {
    /// An I/O error with what the lab was doing.
    pub fn io(context: impl Into<String>, source: io::Error) -> LabError {
        LabError::Io {
            context: context.into(),
            source,
        }
    }
}
