//! What the lab reads from `/proc`: a process's CPU time and memory, the established TCP
//! connections on a port, and the machine. Parsers are plain functions over the file text;
//! the readers around them are one line each.

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

/// Connections in state ESTABLISHED whose local port is `port`, from the text of
/// `/proc/net/tcp` (IPv4). On loopback both ends of a connection are listed; only the
/// server's end has the server's port as its local port.
pub fn count_established(net_tcp: &str, port: u16) -> u64 {
    let wanted = format!(":{port:04X}");
    net_tcp
        .lines()
        .skip(1)
        .filter(|line| {
            let mut fields = line.split_whitespace();
            let local = fields.nth(1).unwrap_or("");
            let state = fields.nth(1).unwrap_or("");
            state == "01" && local.ends_with(&wanted)
        })
        .count() as u64
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

/// Established connections on 127.0.0.1-style local port `port` right now.
pub fn established_on_port(port: u16) -> u64 {
    fs::read_to_string("/proc/net/tcp")
        .map(|text| count_established(&text, port))
        .unwrap_or(0)
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
    fn established_counts_only_the_server_end_in_state_01() {
        // Port 8080 = 0x1F90. Lines: server end established, client end (remote 1F90),
        // the listener (state 0A), a server end in TIME_WAIT (06), another port.
        let text = "  sl  local_address rem_address   st tx_queue rx_queue\n\
           0: 0100007F:1F90 0200007F:9C40 01 00000000:00000000 00:00000000 00000000\n\
           1: 0200007F:9C40 0100007F:1F90 01 00000000:00000000 00:00000000 00000000\n\
           2: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000\n\
           3: 0100007F:1F90 0300007F:9C41 06 00000000:00000000 00:00000000 00000000\n\
           4: 0100007F:1F91 0300007F:9C42 01 00000000:00000000 00:00000000 00000000\n\
           5: 0100007F:1F90 0300007F:9C43 01 00000000:00000000 00:00000000 00000000\n";
        assert_eq!(count_established(text, 8080), 2);
        assert_eq!(count_established(text, 8081), 1);
        assert_eq!(count_established(text, 80), 0);
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
