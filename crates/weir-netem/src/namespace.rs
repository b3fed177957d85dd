//! The two network namespaces and their TUN devices: created in the root namespace, moved
//! into their namespaces (the open descriptors stay attached), configured with `ip`, removed.
//!
//! Everything goes through tun-rs and the `ip` command, so no unsafe code is needed here.

use std::ffi::OsStr;
use std::io;
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;

use tun_rs::{DeviceBuilder, SyncDevice};

/// Which end of the link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The first side, whose namespace and device are `PREFIX-a`.
    A,
    /// The second side, whose namespace and device are `PREFIX-b`.
    B,
}

/// Names and addresses of a link's two sides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    prefix: String,
    /// Address of side a's TUN device (default 10.200.0.1).
    pub a_address: Ipv4Addr,
    /// Address of side b's TUN device (default 10.200.0.2).
    pub b_address: Ipv4Addr,
    /// MTU of both TUN devices.
    pub mtu: u16,
}

/// Why the link's namespaces could not be set up or removed.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The process lacks the capabilities to create namespaces and devices.
    #[error(
        "weir netem needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) to create network namespaces \
         and TUN devices; run it with sudo"
    )]
    NotRoot,
    /// The TUN device node does not exist.
    #[error(
        "/dev/net/tun is missing: load the tun module (modprobe tun) or give the container the device"
    )]
    NoTun,
    /// The link name cannot form valid namespace and device names.
    #[error(
        "invalid link name {0:?}: 1 to 13 characters from a-z, A-Z, 0-9, '-' and '_' \
         (each side's namespace and device is NAME-a or NAME-b)"
    )]
    InvalidName(String),
    /// A namespace of that name is already there.
    #[error(
        "network namespace {0} already exists: another link of that name is up, or a previous \
         one was not cleaned up (weir netem down --name PREFIX)"
    )]
    Exists(String),
    /// iproute2's `ip` is not installed.
    #[error("the `ip` command is missing: install iproute2")]
    NoIpCommand,
    /// An `ip` command exited with failure.
    #[error("`{command}` failed: {stderr}")]
    Command {
        /// The command line that was run.
        command: String,
        /// What the command wrote to stderr.
        stderr: String,
    },
    /// A TUN device could not be created.
    #[error("cannot create TUN device {name}: {error}")]
    Tun {
        /// The device's name.
        name: String,
        /// The error from the device driver (shown in the message, so not a `source`).
        error: io::Error,
    },
    /// The two sides' addresses cannot make a link between them.
    #[error("{0}")]
    Addresses(String),
    /// Another system call failed.
    #[error("{context}: {error}")]
    Io {
        /// What was being done.
        context: &'static str,
        /// The error from the system (shown in the message, so not a `source`).
        error: io::Error,
    },
}

/// Packets each TUN device holds for weir to read (the kernel's default is 500): a burst
/// that outruns weir's reading thread past it is dropped before the link's model sees it,
/// and counted only in the device's statistics ([`Namespaces::device_drops`]).
pub const DEVICE_QUEUE: u32 = 10_000;

/// The link's namespaces, removed on drop (so a failed set-up or a panic leaves nothing).
#[derive(Debug)]
pub struct Namespaces {
    created: Vec<String>,
}

impl Side {
    /// The side's letter, as used in its namespace and device names.
    pub fn letter(self) -> char {
        match self {
            Side::A => 'a',
            Side::B => 'b',
        }
    }
}

impl Topology {
    /// The default addresses 10.200.0.1 (side a) and 10.200.0.2 (side b), MTU 1500.
    pub fn new(prefix: &str) -> Result<Self, SetupError> {
        validate_prefix(prefix)?;
        Ok(Topology {
            prefix: prefix.to_owned(),
            a_address: Ipv4Addr::new(10, 200, 0, 1),
            b_address: Ipv4Addr::new(10, 200, 0, 2),
            mtu: 1500,
        })
    }

    /// The link name the namespaces and devices are derived from.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The namespace of `side`, which is also the name of its TUN device: `PREFIX-a`.
    pub fn namespace(&self, side: Side) -> String {
        namespace_name(&self.prefix, side)
    }

    /// The address of `side`'s TUN device.
    pub fn address(&self, side: Side) -> Ipv4Addr {
        match side {
            Side::A => self.a_address,
            Side::B => self.b_address,
        }
    }

    /// Two different unicast addresses, neither loopback nor unspecified: with one address
    /// on both sides (or one each namespace already has) packets to the other side never
    /// leave the namespace, and the link applies to nothing.
    pub fn check_addresses(&self) -> Result<(), SetupError> {
        for side in [Side::A, Side::B] {
            let address = self.address(side);
            if address.is_loopback()
                || address.is_unspecified()
                || address.is_broadcast()
                || address.is_multicast()
            {
                return Err(SetupError::Addresses(format!(
                    "side {}'s address {address} is not a unicast address a link can carry \
                     (loopback, unspecified, broadcast and multicast are not)",
                    side.letter()
                )));
            }
        }
        if self.a_address == self.b_address {
            return Err(SetupError::Addresses(format!(
                "both sides have the address {}: each side's packets to the other would stay \
                 in its own namespace, never crossing the link",
                self.a_address
            )));
        }
        Ok(())
    }
}

impl Namespaces {
    /// Creates both namespaces, each with a TUN device (named like its namespace) holding its
    /// side's address with the other side as peer, and returns the devices, non-blocking, for
    /// [`crate::Link::start`].
    pub fn create(topology: &Topology) -> Result<(Namespaces, SyncDevice, SyncDevice), SetupError> {
        topology.check_addresses()?;
        require_root()?;
        if !Path::new("/dev/net/tun").exists() {
            return Err(SetupError::NoTun);
        }
        let mut namespaces = Namespaces {
            created: Vec::new(),
        };
        let mut devices = Vec::with_capacity(2);
        for side in [Side::A, Side::B] {
            let name = topology.namespace(side);
            if namespace_exists(&name) {
                return Err(SetupError::Exists(name));
            }
            ip(["netns", "add", &name])?;
            namespaces.created.push(name.clone());
            let device = DeviceBuilder::new()
                .name(&name)
                .mtu(topology.mtu)
                // Up only once configured in its namespace.
                .enable(false)
                .build_sync()
                .map_err(|source| SetupError::Tun {
                    name: name.clone(),
                    error: source,
                })?;
            device
                .set_nonblocking(true)
                .map_err(|source| SetupError::Io {
                    context: "cannot make the TUN device non-blocking",
                    error: source,
                })?;
            ip(["link", "set", "dev", &name, "netns", &name])?;
            configure(topology, side)?;
            devices.push(device);
        }
        let b = devices.pop();
        let a = devices.pop();
        match (a, b) {
            (Some(a), Some(b)) => Ok((namespaces, a, b)),
            // Both were pushed in the loop above.
            _ => unreachable!("two devices were created"),
        }
    }

    /// Packets `side`'s kernel dropped at its TUN device because weir had not read the ones
    /// before them yet (the device's queue of [`DEVICE_QUEUE`] was full): lost before the
    /// link's model saw them. `None` when the count cannot be read.
    pub fn device_drops(&self, topology: &Topology, side: Side) -> Option<u64> {
        let name = topology.namespace(side);
        let path = format!("/sys/class/net/{name}/statistics/tx_dropped");
        let output = Command::new("ip")
            .args(["netns", "exec", &name, "cat", &path])
            .output()
            .ok()?;
        String::from_utf8(output.stdout).ok()?.trim().parse().ok()
    }

    /// Removes the namespaces now, reporting the first failure.
    pub fn remove(mut self) -> Result<(), SetupError> {
        let created = std::mem::take(&mut self.created);
        let mut result = Ok(());
        for name in created {
            if namespace_exists(&name) {
                let removed = ip(["netns", "del", &name]);
                if result.is_ok() {
                    result = removed;
                }
            }
        }
        result
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for name in self.created.drain(..) {
            if namespace_exists(&name) {
                // Best effort: there is no one to report to from a drop.
                let _ = ip(["netns", "del", &name]);
            }
        }
    }
}

/// Removes whatever a link named `prefix` left: its namespaces, and TUN devices of the same
/// names still in the root namespace. Returns what was removed.
pub fn remove_leftovers(prefix: &str) -> Result<Vec<String>, SetupError> {
    validate_prefix(prefix)?;
    require_root()?;
    let mut removed = Vec::new();
    for side in [Side::A, Side::B] {
        let name = namespace_name(prefix, side);
        if namespace_exists(&name) {
            ip(["netns", "del", &name])?;
            removed.push(format!("network namespace {name}"));
        }
        if Path::new("/sys/class/net").join(&name).exists() {
            ip(["link", "del", "dev", &name])?;
            removed.push(format!("device {name}"));
        }
    }
    Ok(removed)
}

/// A command that runs `program` with `args` inside `side`'s namespace (`ip netns exec`).
pub fn command_in(
    prefix: &str,
    side: Side,
    program: impl AsRef<OsStr>,
    args: impl IntoIterator<Item = impl AsRef<OsStr>>,
) -> Result<Command, SetupError> {
    validate_prefix(prefix)?;
    require_root()?;
    let name = namespace_name(prefix, side);
    if !namespace_exists(&name) {
        return Err(SetupError::Command {
            command: format!("ip netns exec {name}"),
            stderr: format!(
                "no network namespace {name}: start the link first (weir netem up --name {prefix})"
            ),
        });
    }
    let mut command = Command::new("ip");
    command
        .args(["netns", "exec", &name])
        .arg(program)
        .args(args);
    Ok(command)
}

/// Fails unless the effective user is root (read from `/proc/self/status`, no libc call).
pub fn require_root() -> Result<(), SetupError> {
    let status = std::fs::read_to_string("/proc/self/status").map_err(|source| SetupError::Io {
        context: "cannot read /proc/self/status",
        error: source,
    })?;
    let effective_uid = status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1));
    if effective_uid == Some("0") {
        Ok(())
    } else {
        Err(SetupError::NotRoot)
    }
}

/// Brings up loopback and the device, without IPv6 (so that no router solicitations or
/// listener reports cross the link and show in its counters), with the side's address and the
/// other side as peer.
fn configure(topology: &Topology, side: Side) -> Result<(), SetupError> {
    let name = topology.namespace(side);
    let other = match side {
        Side::A => Side::B,
        Side::B => Side::A,
    };
    let local = format!("{}/32", topology.address(side));
    let peer = format!("{}/32", topology.address(other));
    ip(["-n", &name, "link", "set", "dev", "lo", "up"])?;
    // Kernels without IPv6 refuse these; there is nothing to turn off then. The name was
    // checked (letters, digits, '-' and '_'), so it is safe in the shell line.
    let disable_ipv6 = format!("echo 1 > /proc/sys/net/ipv6/conf/{name}/disable_ipv6");
    let _ = ip(["netns", "exec", &name, "sh", "-c", &disable_ipv6]);
    let _ = ip([
        "-n",
        &name,
        "link",
        "set",
        "dev",
        &name,
        "addrgenmode",
        "none",
    ]);
    ip([
        "-n", &name, "addr", "add", &local, "peer", &peer, "dev", &name,
    ])?;
    // The device's own queue of packets weir has not read yet: a burst that outruns the
    // reading thread waits there, or is dropped there unseen by the link's model.
    let queue = DEVICE_QUEUE.to_string();
    ip([
        "-n",
        &name,
        "link",
        "set",
        "dev",
        &name,
        "txqueuelen",
        &queue,
    ])?;
    ip(["-n", &name, "link", "set", "dev", &name, "up"])
}

fn namespace_name(prefix: &str, side: Side) -> String {
    format!("{prefix}-{}", side.letter())
}

fn namespace_exists(name: &str) -> bool {
    Path::new("/run/netns").join(name).exists()
}

/// Interface names are at most 15 bytes; the prefix gets "-a" or "-b".
fn validate_prefix(prefix: &str) -> Result<(), SetupError> {
    let valid = (1..=13).contains(&prefix.len())
        && prefix
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_');
    if valid {
        Ok(())
    } else {
        Err(SetupError::InvalidName(prefix.to_owned()))
    }
}

/// Runs `ip ARGS`, turning a failure into its stderr.
fn ip<const N: usize>(args: [&str; N]) -> Result<(), SetupError> {
    let output = Command::new("ip").args(args).output().map_err(|source| {
        if source.kind() == io::ErrorKind::NotFound {
            SetupError::NoIpCommand
        } else {
            SetupError::Io {
                context: "cannot run ip",
                error: source,
            }
        }
    })?;
    if output.status.success() {
        Ok(())
    } else {
        Err(SetupError::Command {
            command: format!("ip {}", args.join(" ")),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_names_fit_an_interface_name() {
        assert!(Topology::new("weir").is_ok());
        assert!(Topology::new("wn4194304x99").is_ok());
        for bad in ["", "fourteen-chars", "a b", "a/b", "ünï"] {
            assert!(
                matches!(Topology::new(bad), Err(SetupError::InvalidName(_))),
                "{bad:?}"
            );
        }
        let topology = Topology::new("weir").unwrap();
        assert_eq!(topology.namespace(Side::A), "weir-a");
        assert_eq!(topology.namespace(Side::B), "weir-b");
    }

    #[test]
    fn the_sides_need_two_unicast_addresses() {
        let with = |a: [u8; 4], b: [u8; 4]| {
            let mut topology = Topology::new("weir").unwrap();
            topology.a_address = a.into();
            topology.b_address = b.into();
            topology.check_addresses()
        };
        assert!(with([10, 200, 0, 1], [10, 200, 0, 2]).is_ok());
        for (a, b) in [
            ([10, 201, 0, 1], [10, 201, 0, 1]),
            ([127, 0, 0, 1], [10, 200, 0, 2]),
            ([10, 200, 0, 1], [0, 0, 0, 0]),
            ([255, 255, 255, 255], [10, 200, 0, 2]),
            ([10, 200, 0, 1], [224, 0, 0, 1]),
        ] {
            assert!(
                matches!(with(a, b), Err(SetupError::Addresses(_))),
                "{a:?} {b:?}"
            );
        }
    }
}
