//! CPU time of the calling thread, from `/proc/thread-self/stat` (Linux): what the suite uses
//! to tell whether the client, not the target, was the limit. No unsafe code: the kernel's
//! text is parsed.

/// Clock ticks per second in `/proc` (`USER_HZ`, 100 on Linux whatever the kernel's HZ).
const USER_HZ: f64 = 100.0;

/// User plus system CPU seconds of the calling thread so far; `None` where the operating
/// system does not say. Resolution: 10 ms.
pub fn thread_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    parse_cpu_seconds(&stat)
}

/// Fields 14 and 15 (utime, stime) of a `/proc/…/stat` line, in seconds. The command name
/// (field 2) may hold spaces and parentheses, so fields are counted from its last `)`.
fn parse_cpu_seconds(stat: &str) -> Option<f64> {
    let after = &stat[stat.rfind(')')? + 1..];
    // After the name the state is field 3, so utime (field 14) is the twelfth.
    let mut fields = after.split_whitespace();
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) as f64 / USER_HZ)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_seconds_from_a_stat_line() {
        let line = "1234 (weir (bench) 0) R 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 9 0";
        assert_eq!(parse_cpu_seconds(line), Some(3.0));
        assert_eq!(parse_cpu_seconds("garbage"), None);
        assert_eq!(parse_cpu_seconds("1 (x) R 1 2"), None);
        if let Some(before) = thread_cpu_seconds() {
            // Spin until the thread's own CPU time moves (on a loaded machine 50 ms of wall
            // time may be far less CPU time), bounded so a clock that never moves fails.
            let spin = std::time::Instant::now();
            let mut x = 0u64;
            let mut after = before;
            while after < before + 0.02 && spin.elapsed() < std::time::Duration::from_secs(10) {
                for _ in 0..100_000 {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
                after = thread_cpu_seconds().expect("readable twice");
            }
            assert!(after >= before + 0.02, "{before} → {after}");
        }
    }
}
