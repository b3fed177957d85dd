//! The `weir` processes a test starts, shared by the binary's tests that signal them
//! (`cli.rs`, `tls_cli.rs`, `systemd.rs`).

use std::process::{Child, Command};

/// A process stopped at the end of the test whatever happens.
pub struct Running(pub Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Sends the signal `name` (`HUP`, `TERM`, ...) to `child`.
pub fn signal(child: &Child, name: &str) {
    let status = Command::new("kill")
        .args([format!("-{name}"), child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}
