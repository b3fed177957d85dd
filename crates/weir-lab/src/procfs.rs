//! What the lab reads from `/proc`: a process's CPU time and memory, the established TCP
//! connections on a port, and the machine. Parsers are plain functions over the file text;
//! the readers around them are one line each.

use std::collections::HashSet;
use std::fs;

use crate::model::Machine;

/// User + system CPU ticks from the text of `/proc/PID/stat`.
pub fn parse_stat_ticks(stat: &str) -> Option<u64> {
    // The command name is in parentheses and may hold spaces: count fields after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After ')': state is field 3 of the whole line; utime and stime are 14 and 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// The parent PID from the text of `/proc/PID/stat`.
pub fn parse_stat_parent(stat: &str) -> Option<u32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// A `kB` field (`VmRSS`, `VmHWM`) from the text of `/proc/PID/status`, in KiB.
pub fn parse_status_kib(status: &str, field: &str) -> Option<u64> {
    status.lines().find_map(|line| {
        let value = line.strip_prefix(field)?.strip_prefix(':')?;
        value.split_whitespace().next()?.parse().ok()
    })
}

/// Inodes of the sockets in state LISTEN, from the text of `/proc/net/tcp` or `tcp6`.
pub fn listening_inodes(net_tcp: &str) -> HashSet<u64> {
    net_tcp
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // sl local rem st tx:rx tr:when retrnsmt uid timeout inode
            (fields.get(3) == Some(&"0A")).then(|| fields.get(9)?.parse().ok())?
        })
        .collect()
}

/// Inodes of the Unix sockets, from the text of `/proc/net/unix`.
pub fn unix_inodes(net_unix: &str) -> HashSet<u64> {
    net_unix
        .lines()
        .skip(1)
        .filter_map(|line| line.split_whitespace().nth(6)?.parse().ok())
        .collect()
}

/// The inode of a `/proc/PID/fd` link target such as `socket:[12345]`.
pub fn socket_inode(link: &str) -> Option<u64> {
    link.strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// Inodes of every socket the processes hold open (each counted once).
pub fn socket_inodes(pids: &[u32]) -> HashSet<u64> {
    let mut inodes = HashSet::new();
    for pid in pids {
        let Ok(entries) = fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        for entry in entries.flatten() {
            if let Ok(target) = fs::read_link(entry.path())
                && let Some(inode) = target.to_str().and_then(socket_inode)
            {
                inodes.insert(inode);
            }
        }
    }
    inodes
}

/// The sockets of a server that are not its connections: listeners and Unix sockets
/// (nginx's channels to its workers), read once while the machine holds few sockets.
#[derive(Debug, Clone, Default)]
pub struct NotConnections(HashSet<u64>);

impl NotConnections {
    pub fn read() -> NotConnections {
        let mut inodes = HashSet::new();
        for file in ["/proc/net/tcp", "/proc/net/tcp6"] {
            inodes.extend(listening_inodes(
                &fs::read_to_string(file).unwrap_or_default(),
            ));
        }
        inodes.extend(unix_inodes(
            &fs::read_to_string("/proc/net/unix").unwrap_or_default(),
        ));
        NotConnections(inodes)
    }

    /// TCP connections the processes hold open right now: their sockets less listeners and
    /// Unix sockets. Cheap at any number of connections on the machine (it reads only the
    /// processes' own descriptors, unlike `/proc/net/tcp`, whose cost grows with every
    /// socket on the machine).
    pub fn connections_of(&self, pids: &[u32]) -> u64 {
        socket_inodes(pids)
            .iter()
            .filter(|inode| !self.0.contains(inode))
            .count() as u64
    }
}

/// Clock ticks per second for `/proc/PID/stat` times.
pub fn ticks_per_second() -> f64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .filter(|&ticks| ticks > 0)
        .map_or(100.0, |ticks| ticks as f64)
}

/// CPU seconds (user + system) of `pid` so far; `None` once it is gone.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(parse_stat_ticks(&stat)? as f64 / ticks_per_second())
}

/// Resident memory now and its peak (VmRSS, VmHWM) of `pid`, KiB.
pub fn memory_kib(pid: u32) -> Option<(u64, u64)> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    Some((
        parse_status_kib(&status, "VmRSS")?,
        parse_status_kib(&status, "VmHWM")?,
    ))
}

/// Resident pages only `pid` maps (`Private_Clean` + `Private_Dirty` of
/// `/proc/PID/smaps_rollup`), KiB.
pub fn private_kib(pid: u32) -> Option<u64> {
    let rollup = fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    Some(parse_status_kib(&rollup, "Private_Clean")? + parse_status_kib(&rollup, "Private_Dirty")?)
}

/// The PIDs whose parent is `parent` (nginx's workers).
pub fn children_of(parent: u32) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| parse_stat_parent(&stat))
                == Some(parent)
        })
        .collect()
}

/// The soft and hard open-file limits.
pub fn open_file_limits() -> Option<(u64, u64)> {
    nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).ok()
}

/// Raises the soft open-file limit to the hard one (children inherit it); returns the soft
/// limit after.
pub fn raise_open_file_limit() -> u64 {
    use nix::sys::resource::{Resource, setrlimit};
    let Some((soft, hard)) = open_file_limits() else {
        return 0;
    };
    if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        return hard;
    }
    soft
}

/// The ephemeral port range, `(low, high)` inclusive.
pub fn local_port_range() -> (u16, u16) {
    fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| {
            let mut parts = text.split_whitespace().map(str::parse::<u16>);
            Some((parts.next()?.ok()?, parts.next()?.ok()?))
        })
        .unwrap_or((32768, 60999))
}

/// The kernel's cap on a listen backlog.
pub fn somaxconn() -> Option<u32> {
    fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// What the lab ran on.
pub fn machine(open_files: u64) -> Machine {
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|line| line.strip_prefix("model name")?.split_once(':'))
        .map_or("unknown CPU".to_owned(), |(_, name)| name.trim().to_owned());
    let meminfo = fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let memory_kib = parse_status_kib(&meminfo, "MemTotal").unwrap_or(0);
    let load_average = fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    Machine {
        cores: std::thread::available_parallelism().map_or(1, usize::from),
        cpu,
        memory_gib: memory_kib as f64 / (1024.0 * 1024.0),
        kernel: fs::read_to_string("/proc/sys/kernel/osrelease")
            .map_or("unknown".to_owned(), |text| text.trim().to_owned()),
        open_files,
        load_average,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_ticks_skip_a_command_name_with_spaces_and_parentheses() {
        let stat = "4242 (weir (lab) x) S 1 4242 4242 0 -1 4194560 1000 0 0 0 \
                    250 75 0 0 20 0 3 0 12345 1000000 500 18446744073709551615";
        assert_eq!(parse_stat_ticks(stat), Some(325));
        assert_eq!(parse_stat_parent(stat), Some(1));
        assert_eq!(parse_stat_ticks("garbage"), None);
    }

    #[test]
    fn status_fields_in_kib() {
        let status = "Name:\tweir\nVmHWM:\t  20480 kB\nVmRSS:\t   10240 kB\n";
        assert_eq!(parse_status_kib(status, "VmHWM"), Some(20480));
        assert_eq!(parse_status_kib(status, "VmRSS"), Some(10240));
        assert_eq!(parse_status_kib(status, "VmSwap"), None);
    }

    #[test]
    fn listeners_and_unix_sockets_are_told_from_connections() {
        let tcp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
           0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1001 1 0\n\
           1: 0100007F:1F90 0200007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 1002 1 0\n";
        assert_eq!(listening_inodes(tcp), HashSet::from([1001]));
        let unix = "Num       RefCount Protocol Flags    Type St Inode Path\n\
            0000000000000000: 00000002 00000000 00000000 0001 03 2001\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 2002 /run/x.sock\n";
        assert_eq!(unix_inodes(unix), HashSet::from([2001, 2002]));
        assert_eq!(socket_inode("socket:[12345]"), Some(12345));
        assert_eq!(socket_inode("pipe:[12345]"), None);
        assert_eq!(socket_inode("/dev/null"), None);
    }

    /// The inode of one of this process's descriptors.
    fn inode_of(fd: &impl std::os::fd::AsRawFd) -> u64 {
        use std::os::unix::fs::MetadataExt;
        fs::metadata(format!("/proc/self/fd/{}", fd.as_raw_fd()))
            .expect("own descriptor")
            .ino()
    }

    #[test]
    fn a_process_connections_are_read_from_its_descriptors() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let not_connections = NotConnections::read();
        assert!(
            not_connections.0.contains(&inode_of(&listener)),
            "a listener is no connection"
        );
        let address = listener.local_addr().expect("address");
        let client = std::net::TcpStream::connect(address).expect("connect");
        let (server, _) = listener.accept().expect("accept");
        let pid = [std::process::id()];
        let sockets = socket_inodes(&pid);
        let ends = [inode_of(&client), inode_of(&server)];
        assert!(ends.iter().all(|inode| sockets.contains(inode)));
        assert!(ends.iter().all(|inode| !not_connections.0.contains(inode)));
        assert!(not_connections.connections_of(&pid) >= 2);
        drop((client, server));
        let sockets = socket_inodes(&pid);
        assert!(
            ends.iter().all(|inode| !sockets.contains(inode)),
            "closed ends are gone"
        );
    }

    #[test]
    fn this_process_can_be_read() {
        let pid = std::process::id();
        assert!(cpu_seconds(pid).is_some());
        let (rss, hwm) = memory_kib(pid).expect("own status");
        assert!(rss > 0 && hwm >= rss);
        assert!(ticks_per_second() > 0.0);
    }
}
