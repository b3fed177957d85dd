//! Optional programs the lab can compare against or use as the origin: Debian's HAProxy and
//! nginx. Found on `PATH` (and in `/usr/sbin`, where Debian puts both); when missing, the lab
//! says how to install them and goes on without, or installs them with `--install`.

use std::path::PathBuf;
use std::process::{Command, Stdio};

/// A peer proxy for `weir lab suite --peers`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// HAProxy from Debian.
    Haproxy,
    /// nginx from Debian.
    Nginx,
}

impl Peer {
    /// The peer's program name, also its name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Peer::Haproxy => "haproxy",
            Peer::Nginx => "nginx",
        }
    }

    /// The Debian package that provides it.
    pub fn package(self) -> &'static str {
        self.name()
    }

    /// Parses one name of `--peers`.
    pub fn parse(name: &str) -> Result<Peer, String> {
        match name.trim().to_ascii_lowercase().as_str() {
            "haproxy" => Ok(Peer::Haproxy),
            "nginx" => Ok(Peer::Nginx),
            other => Err(format!("unknown peer {other:?}: expected haproxy or nginx")),
        }
    }
}

/// The path of `program` on `PATH` or in `/usr/sbin` and `/sbin`.
pub fn find_program(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into(), "/usr/bin".into()])
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

/// `nginx/1.22.1` from `nginx -v`, `2.6.12-1+deb12u4` from `haproxy -v`: the version text
/// after the program's name in its first line.
pub fn version(program: &PathBuf, peer: Peer) -> String {
    let output = Command::new(program)
        .arg("-v")
        .stdin(Stdio::null())
        .output();
    let Ok(output) = output else {
        return "unknown version".to_owned();
    };
    // nginx writes its version to stderr, HAProxy to stdout.
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    parse_version(&text, peer).unwrap_or_else(|| "unknown version".to_owned())
}

/// The version number in `-v` output.
pub fn parse_version(text: &str, peer: Peer) -> Option<String> {
    let line = text.lines().find(|line| !line.trim().is_empty())?;
    let version = match peer {
        Peer::Nginx => line.split("nginx/").nth(1)?,
        Peer::Haproxy => line.split("version ").nth(1)?,
    };
    Some(version.split_whitespace().next()?.to_owned())
}

/// Installs Debian packages with apt-get (as root, or through sudo).
pub fn install(packages: &[&str]) -> Result<(), String> {
    if packages.is_empty() {
        return Ok(());
    }
    let root = nix::unistd::geteuid().is_root();
    let run = |args: &[&str]| {
        let mut command = if root {
            Command::new("apt-get")
        } else {
            let mut sudo = Command::new("sudo");
            sudo.arg("apt-get");
            sudo
        };
        command
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .status()
            .map_err(|e| format!("cannot run apt-get: {e}"))
    };
    let mut args = vec!["install", "-y", "-q"];
    args.extend_from_slice(packages);
    if run(&args)?.success() {
        return Ok(());
    }
    // A fresh machine may need the package lists first.
    let _ = run(&["update", "-q"])?;
    if run(&args)?.success() {
        Ok(())
    } else {
        Err(format!("apt-get install {} failed", packages.join(" ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_from_dash_v_output() {
        assert_eq!(
            parse_version("nginx version: nginx/1.22.1\n", Peer::Nginx),
            Some("1.22.1".to_owned())
        );
        assert_eq!(
            parse_version(
                "HAProxy version 2.6.12-1+deb12u4 2025/04/10 - https://haproxy.org/\nStatus: long-term",
                Peer::Haproxy
            ),
            Some("2.6.12-1+deb12u4".to_owned())
        );
        assert_eq!(parse_version("", Peer::Nginx), None);
    }

    #[test]
    fn peer_names() {
        assert_eq!(Peer::parse(" HAProxy"), Ok(Peer::Haproxy));
        assert_eq!(Peer::parse("nginx"), Ok(Peer::Nginx));
        assert!(
            Peer::parse("envoy")
                .unwrap_err()
                .contains("haproxy or nginx")
        );
        assert!(find_program("sh").is_some());
        assert!(find_program("surely-not-a-program-weir").is_none());
    }
}
