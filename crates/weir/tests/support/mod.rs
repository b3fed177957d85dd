//! Shared by the binary's tests that build emulated links (`weir netem`, `weir tunnel`).

use std::path::Path;
use std::process::{Command, Stdio};

/// Panics with what to install or how to run when `weir netem` cannot run here: root,
/// `/dev/net/tun`, `ip` and `ping`. `tests` names the tests in the message.
pub fn require_link_environment(tests: &str) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let effective_uid = status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1));
    assert_eq!(
        effective_uid,
        Some("0"),
        "the {tests} tests need root (network namespaces and TUN devices)"
    );
    assert!(
        Path::new("/dev/net/tun").exists(),
        "the {tests} tests need /dev/net/tun (modprobe tun)"
    );
    for (program, package) in [("ip", "iproute2"), ("ping", "iputils-ping")] {
        let found = Command::new(program)
            .arg("-V")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok();
        assert!(
            found,
            "the {tests} tests need `{program}`: install the Debian package {package}"
        );
    }
}
