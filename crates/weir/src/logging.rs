//! Tracing set-up: the config's level and format, overridden by `RUST_LOG`.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;
use weir_config::{Log, LogFormat};

pub fn init(log: &Log) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&log.level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colours for a person at a terminal only: in a file, a pipe or the journal
        // the escape codes are noise.
        .with_ansi(std::io::stderr().is_terminal());
    // A second init (tests) is harmless: keep the first subscriber.
    let _ = match log.format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}
