//! What the admin API's stats snapshot and the dashboard read besides the registry: sums
//! over every virtual server and node, and a histogram of request durations.
//!
//! The histogram is log-linear (8 buckets per power of two of microseconds, so a bucket
//! is at most 12.5 % wide) over atomic counters: recording is one relaxed atomic add, and
//! percentiles over any window come from the difference of two snapshots.
//!
//! ```
//! use std::time::Duration;
//! let histogram = weir_observe::LatencyHistogram::default();
//! for micros in [100, 200, 300, 400, 10_000] {
//!     histogram.record(Duration::from_micros(micros));
//! }
//! let counts = histogram.snapshot();
//! let p50 = weir_observe::stats::quantile(&counts, 0.5).unwrap();
//! assert!((300..=340).contains(&p50), "{p50}");
//! assert!(weir_observe::stats::quantile(&counts, 1.0).unwrap() >= 10_000);
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Sub-buckets per power of two.
const SUB_BITS: u32 = 3;
const SUB: usize = 1 << SUB_BITS;
/// Powers of two covered above the first linear range: up to 2^30 µs (about 18 minutes).
const POWERS: usize = 28;
/// Number of buckets.
pub const BUCKETS: usize = SUB * (POWERS + 1);

/// Request durations in microseconds, in log-linear buckets of atomic counters.
#[derive(Debug)]
pub struct LatencyHistogram {
    counts: Box<[AtomicU64]>,
}

/// Sums over every virtual server and node, now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// Client connections open now.
    pub client_connections_open: u64,
    /// Client connections accepted since the start.
    pub client_connections_accepted: u64,
    /// Responses to clients by status class (1xx..5xx).
    pub responses: [u64; 5],
    /// Client requests rejected while parsing.
    pub bad_requests: u64,
    /// Connections to nodes open now.
    pub upstream_connections_open: u64,
    /// Connections to nodes opened since the start.
    pub upstream_connections_created: u64,
    /// Requests sent on a reused connection to a node.
    pub upstream_connections_reused: u64,
    /// Requests sent to nodes.
    pub requests_forwarded: u64,
    /// Connects to nodes that failed.
    pub connect_failures: u64,
    /// Full TLS handshakes with clients.
    pub tls_handshakes_full: u64,
    /// Resumed TLS handshakes with clients.
    pub tls_handshakes_resumed: u64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram {
            counts: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl LatencyHistogram {
    /// Counts one request that took `duration`.
    #[inline]
    pub fn record(&self, duration: Duration) {
        let micros = u64::try_from(duration.as_micros()).unwrap_or(u64::MAX);
        self.counts[bucket_of(micros)].fetch_add(1, Ordering::Relaxed);
    }

    /// The count in every bucket now.
    pub fn snapshot(&self) -> Vec<u64> {
        self.counts
            .iter()
            .map(|count| count.load(Ordering::Relaxed))
            .collect()
    }
}

/// The bucket of a duration in microseconds.
fn bucket_of(micros: u64) -> usize {
    if micros < SUB as u64 {
        return micros as usize;
    }
    let power = 63 - micros.leading_zeros();
    let sub = (micros >> (power - SUB_BITS)) as usize & (SUB - 1);
    let index = (power - SUB_BITS + 1) as usize * SUB + sub;
    index.min(BUCKETS - 1)
}

/// The largest duration (µs) bucket `index` holds.
pub fn bucket_upper(index: usize) -> u64 {
    if index < SUB {
        return index as u64;
    }
    let power = (index / SUB) as u32 + SUB_BITS - 1;
    let sub = (index % SUB) as u64;
    let width = 1u64 << (power - SUB_BITS);
    (1u64 << power) + (sub + 1) * width - 1
}

/// The duration (µs, a bucket's upper bound) under which a fraction `q` of the counted
/// requests fall; `None` when `counts` is empty or all zero.
pub fn quantile(counts: &[u64], q: f64) -> Option<u64> {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
    let mut seen = 0;
    for (index, count) in counts.iter().enumerate() {
        seen += count;
        if seen >= rank {
            return Some(bucket_upper(index));
        }
    }
    Some(bucket_upper(counts.len().saturating_sub(1)))
}

/// Element-wise `now - before` (a window's counts from two snapshots).
pub fn delta(now: &[u64], before: &[u64]) -> Vec<u64> {
    now.iter()
        .zip(before.iter().chain(std::iter::repeat(&0)))
        .map(|(n, b)| n.saturating_sub(*b))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_ordered_and_contain_their_values() {
        let mut last = None;
        for index in 0..BUCKETS {
            let upper = bucket_upper(index);
            if let Some(previous) = last {
                assert!(upper > previous, "bucket {index}");
            }
            last = Some(upper);
        }
        for micros in [0, 1, 7, 8, 9, 15, 16, 100, 1_000, 123_456, 10_000_000] {
            let index = bucket_of(micros);
            assert!(micros <= bucket_upper(index), "{micros} in {index}");
            if index > 0 {
                assert!(micros > bucket_upper(index - 1), "{micros} in {index}");
            }
        }
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn quantiles_of_a_window() {
        let histogram = LatencyHistogram::default();
        for _ in 0..90 {
            histogram.record(Duration::from_micros(1000));
        }
        let before = histogram.snapshot();
        for _ in 0..99 {
            histogram.record(Duration::from_micros(50));
        }
        histogram.record(Duration::from_millis(20));
        let window = delta(&histogram.snapshot(), &before);
        let p50 = quantile(&window, 0.5).unwrap();
        assert!((50..=56).contains(&p50), "{p50}");
        let p99 = quantile(&window, 0.99).unwrap();
        assert!((50..=56).contains(&p99), "{p99}");
        let max = quantile(&window, 1.0).unwrap();
        assert!((20_000..=22_600).contains(&max), "{max}");
        assert_eq!(quantile(&[0; 4], 0.5), None);
    }
}
