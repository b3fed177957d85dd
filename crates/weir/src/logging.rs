//! Tracing set-up: the config's level and format, overridden by `RUST_LOG`.

use std::io::IsTerminal;
use std::sync::Mutex;

use tracing_appender::non_blocking::{NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::EnvFilter;
use weir_config::{Log, LogFormat};

/// Lines queued for standard error before new ones are dropped (and counted in
/// `weir_log_lines_dropped_total`).
const QUEUED_LINES: usize = 16 * 1024;

/// The log writer's guard: dropped by [`flush`] at exit, which writes out what is queued.
static GUARD: Mutex<Option<WorkerGuard>> = Mutex::new(None);

/// Sends weir's own log to standard error through a thread of its own: a reader that
/// stops reading (a full pipe) then drops lines, counted, instead of stalling the worker
/// that logs and, behind it, the process (signals included).
pub fn init(log: &Log) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(directives(&log.level)));
    let (writer, guard) = NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(QUEUED_LINES)
        .thread_name("weir-log")
        .finish(std::io::stderr());
    let dropped = writer.error_counter();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        // Colours for a person at a terminal only: in a file, a pipe or the journal
        // the escape codes are noise.
        .with_ansi(std::io::stderr().is_terminal());
    // A second init (tests) is harmless: keep the first subscriber (and its writer).
    let installed = match log.format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    if installed.is_ok() {
        *GUARD.lock().unwrap_or_else(|e| e.into_inner()) = Some(guard);
        weir_observe::count_log_lines_dropped(move || dropped.dropped_lines() as u64);
    }
}

/// Writes out what weir's own log still holds (at exit; 1 s at most if its reader is stuck).
pub fn flush() {
    let guard = GUARD.lock().unwrap_or_else(|e| e.into_inner()).take();
    drop(guard);
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
