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
    /// A child process could not be started.
    #[error("cannot start {what}: {error}")]
    Spawn {
        /// The child, as named in messages.
        what: String,
        /// The error from `spawn` (shown in the message, so not a `source`).
        error: io::Error,
    },
    /// A child exited before it answered.
    #[error("{what} exited before it was ready ({status}); its last output:\n{output}")]
    Exited {
        /// The child, as named in messages.
        what: String,
        /// Its exit status, as text.
        status: String,
        /// The last lines it wrote, for the message.
        output: String,
    },
    /// A child did not answer on its address in time.
    #[error("{what} did not answer on {address} within {seconds} s; its last output:\n{output}")]
    NotReady {
        /// The child, as named in messages.
        what: String,
        /// The address it was expected to answer on.
        address: String,
        /// How long it was given, in seconds.
        seconds: u64,
        /// The last lines it wrote, for the message.
        output: String,
    },
    /// A file or system operation failed.
    #[error("{context}: {error}")]
    Io {
        /// What was being done.
        context: String,
        /// The error from the system (shown in the message, so not a `source`).
        error: io::Error,
    },
    /// The load generator (`weir bench`) failed or its output could not be read.
    #[error("weir bench: {0}")]
    Bench(String),
    /// A child's config could not be rendered from its template.
    #[error("config template: {0}")]
    Template(TemplateError),
    /// The WAN lab's emulated link could not be set up (root, TUN, `ip`).
    #[error(transparent)]
    Netem(#[from] weir_netem::SetupError),
}

impl From<TemplateError> for LabError {
    fn from(error: TemplateError) -> Self {
        LabError::Template(error)
    }
}

impl LabError {
    /// An I/O error with what the lab was doing.
    pub fn io(context: impl Into<String>, source: io::Error) -> LabError {
        LabError::Io {
            context: context.into(),
            error: source,
        }
    }
}
