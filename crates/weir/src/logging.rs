//! Tracing set-up: the config's level and format, overridden by `RUST_LOG`.

mod queue;

use std::io::IsTerminal;
use std::sync::{Arc, OnceLock};

use tracing_subscriber::EnvFilter;
use weir_config::{Log, LogFormat};

use self::queue::{Queue, Writer};

/// Lines queued for standard error before new ones are dropped (and counted in
/// `weir_log_lines_dropped_total`). Memory is taken only for lines in the queue.
const QUEUED_LINES: usize = 16 * 1024;

/// The installed subscriber's queue: [`flush`] writes out what it holds at exit.
static QUEUE: OnceLock<Arc<Queue>> = OnceLock::new();

/// Sends weir's own log to standard error through a thread of its own: a reader that
/// stops reading (a full pipe) then drops lines, counted, instead of stalling the worker
/// that logs and, behind it, the process (signals included).
pub fn init(log: &Log) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(directives(&log.level)));
    let queue = match QUEUE.get() {
        // A second init (tests) keeps the first subscriber, and so its queue.
        Some(_) => return,
        None => match Queue::start(std::io::stderr(), QUEUED_LINES, "weir-log") {
            Ok(queue) => queue,
            Err(error) => {
                eprintln!("weir: no thread for the log ({error}); logging nothing");
                return;
            }
        },
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(Writer(Arc::clone(&queue)))
        // Colours for a person at a terminal only: in a file, a pipe or the journal
        // the escape codes are noise.
        .with_ansi(std::io::stderr().is_terminal());
    let installed = match log.format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    if installed.is_ok() && QUEUE.set(Arc::clone(&queue)).is_ok() {
        weir_observe::count_log_lines_dropped(move || queue.dropped());
    }
}

/// Writes out what weir's own log still holds (at exit; 1 s at most if its reader is stuck).
pub fn flush() {
    if let Some(queue) = QUEUE.get() {
        queue.flush();
    }
}

/// The config's level, with rustls' own lines limited to errors unless the level names
/// rustls: rustls warns once per handshake about what any client may send (an IP address
/// as the server name, as wrk sends), which would bury weir's lines; the handshake
/// failures themselves are in `weir_tls_handshake_failures_total`.
fn directives(level: &str) -> String {
    match level.contains("rustls") {
        true => level.to_owned(),
        false => format!("{level},rustls=error"),
    }
}

#[cfg(test)]
mod tests {
    use super::directives;

    #[test]
    fn rustls_is_quiet_unless_named() {
        assert_eq!(directives("info"), "info,rustls=error");
        assert_eq!(directives("warn,rustls=debug"), "warn,rustls=debug");
        for level in ["info", "debug", "weir_proxy=debug,warn"] {
            assert!(tracing_subscriber::EnvFilter::try_new(directives(level)).is_ok());
        }
    }
}
