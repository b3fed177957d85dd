//! h2spec, HTTP/2's conformance suite (installed by `scripts/test`), run in strict mode
//! against a local server: the tests of weir's HTTP/2 driver and of its pipeline.

use std::process::Command;

/// h2spec's binary: on PATH, or where `go install` puts it.
pub fn binary() -> String {
    let home = std::env::var("HOME").unwrap_or_default();
    let installed = format!("{home}/go/bin/h2spec");
    if std::path::Path::new(&installed).exists() {
        installed
    } else {
        "h2spec".to_owned()
    }
}

/// Runs every h2spec case in strict mode against `127.0.0.1:port` (over TLS when `tls`,
/// certificates not checked) and panics unless all 146 pass, none skipped; returns the
/// summary line. Blocks: call it off the runtime's threads.
pub fn run_strict(port: u16, tls: bool) -> String {
    let mut command = Command::new(binary());
    command.args(["-h", "127.0.0.1", "-p", &port.to_string(), "-S", "-o", "5"]);
    if tls {
        command.args(["-t", "-k"]);
    }
    let output = command
        .output()
        .unwrap_or_else(|error| panic!("h2spec (installed by scripts/test): {error}"));
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let summary = text
        .lines()
        .rfind(|line| line.contains("tests,"))
        .unwrap_or_else(|| panic!("no h2spec summary:\n{text}"))
        .trim()
        .to_owned();
    assert!(
        summary.starts_with("146 tests, 146 passed, 0 skipped, 0 failed"),
        "tls {tls}: {summary}\n{text}"
    );
    summary
}
