//! Tracing set-up: the config's level and format, overridden by `RUST_LOG`.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;
use weir_config::{Log, LogFormat};

pub fn init(log: &Log) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(directives(&log.level)));
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
