//! The process rows read from the kernel at each scrape: open descriptors against the
//! limit (an alert before accepts start failing), resident memory, and when the process
//! started. Linux `/proc`; elsewhere the rows stay at 0.

use std::sync::OnceLock;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::register;
use crate::names;

#[derive(Debug, Default)]
pub(crate) struct ProcessGauges {
    open_fds: Gauge,
    max_fds: Gauge,
    resident_memory_bytes: Gauge,
    start_time_seconds: Gauge,
    access_log_records_lost: Counter,
    log_lines_dropped: Counter,
}

/// Where the count of weir's own log lines dropped comes from: the binary owns that log's
/// writer and names it once ([`count_log_lines_dropped`]).
static LOG_LINES_DROPPED: OnceLock<Box<dyn Fn() -> u64 + Send + Sync>> = OnceLock::new();

/// Names where `weir_log_lines_dropped_total` is read from at each scrape (the first
/// call wins).
pub fn count_log_lines_dropped(source: impl Fn() -> u64 + Send + Sync + 'static) {
    let _ = LOG_LINES_DROPPED.set(Box::new(source));
}

/// Brings `counter` up to `total` (counters only go up).
fn catch_up(counter: &Counter, total: u64) {
    let have = counter.get();
    if total > have {
        counter.inc_by(total - have);
    }
}

impl ProcessGauges {
    pub(crate) fn register(&self, r: &mut Registry) {
        register(r, names::PROCESS_OPEN_FDS, self.open_fds.clone());
        register(r, names::PROCESS_MAX_FDS, self.max_fds.clone());
        register(
            r,
            names::PROCESS_RESIDENT_MEMORY_BYTES,
            self.resident_memory_bytes.clone(),
        );
        register(
            r,
            names::PROCESS_START_TIME_SECONDS,
            self.start_time_seconds.clone(),
        );
        register(
            r,
            names::ACCESS_LOG_RECORDS_LOST,
            self.access_log_records_lost.clone(),
        );
        register(r, names::LOG_LINES_DROPPED, self.log_lines_dropped.clone());
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_secs());
        self.start_time_seconds
            .set(i64::try_from(started).unwrap_or(i64::MAX));
    }

    /// Reads the values now (a few small reads of `/proc/self`, once per scrape).
    pub(crate) fn refresh(&self) {
        catch_up(&self.access_log_records_lost, crate::access::records_lost());
        if let Some(source) = LOG_LINES_DROPPED.get() {
            catch_up(&self.log_lines_dropped, source());
        }
        if let Some(open) = open_descriptors() {
            self.open_fds.set(i64::try_from(open).unwrap_or(i64::MAX));
        }
        if let Ok((soft, _)) =
            nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        {
            self.max_fds.set(i64::try_from(soft).unwrap_or(i64::MAX));
        }
        let pages = std::fs::read_to_string("/proc/self/statm")
            .ok()
            .and_then(|statm| statm.split_whitespace().nth(1)?.parse::<i64>().ok());
        let page_size = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
            .ok()
            .flatten()
            .unwrap_or(4096);
        if let Some(pages) = pages {
            self.resident_memory_bytes
                .set(pages.saturating_mul(page_size as i64));
        }
    }
}

/// How many descriptors the process has open.
///
/// Since Linux 6.2 the size `stat` gives for `/proc/self/fd` is that count, read from the
/// descriptor table's bitmap. Listing the directory instead builds a directory entry per
/// descriptor: with 16,000 client connections and one scrape a second, that listing took
/// 7.7 % of weir's CPU in `weir lab offload` (BENCHMARKING.md, "the metrics scrape"). The
/// listing stays as the fallback for older kernels, which report a size of 0.
pub(super) fn open_descriptors() -> Option<u64> {
    const DIRECTORY: &str = "/proc/self/fd";
    match std::fs::metadata(DIRECTORY) {
        Ok(metadata) if metadata.len() > 0 => Some(metadata.len()),
        // The listing's own descriptor is among the entries.
        _ => Some(std::fs::read_dir(DIRECTORY).ok()?.count().saturating_sub(1) as u64),
    }
}
