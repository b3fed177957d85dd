//! Log lines for events that can come many times a second, so that weir's log stays news
//! rather than a copy of the access log: a budget of lines per second for failures that
//! come once per request (a node down under load), and a listener's accept failures (out of
//! descriptors), said when they begin, once a second while they last, and when they end.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Lines written per second before the rest are only counted.
pub const LINES_PER_SECOND: u64 = 10;

/// A budget of [`LINES_PER_SECOND`] log lines each second, shared by every thread.
#[derive(Debug)]
pub struct LogBudget {
    start: Instant,
    /// The second (since `start`) in the high 32 bits, lines written in it in the low 32.
    window: AtomicU64,
    /// Lines left out since the last one written.
    left_out: AtomicU64,
}

impl Default for LogBudget {
    fn default() -> Self {
        LogBudget::new()
    }
}

impl LogBudget {
    /// A budget with nothing written yet.
    pub fn new() -> LogBudget {
        LogBudget {
            start: Instant::now(),
            window: AtomicU64::new(0),
            left_out: AtomicU64::new(0),
        }
    }

    /// Whether a line may be written now: `Some(n)` with the lines left out before it (0
    /// most of the time), `None` when this second's budget is spent (the line is counted).
    pub fn take(&self) -> Option<u64> {
        self.take_at(Instant::now())
    }

    /// The lines left out since the last one written, which no later line will report
    /// (at shutdown); zero afterwards.
    pub fn left_out(&self) -> u64 {
        self.left_out.swap(0, Ordering::Relaxed)
    }

    fn take_at(&self, now: Instant) -> Option<u64> {
        let second = now.saturating_duration_since(self.start).as_secs();
        let mut window = self.window.load(Ordering::Relaxed);
        loop {
            let (current, written) = (window >> 32, window & u64::from(u32::MAX));
            let next = if current == second {
                if written >= LINES_PER_SECOND {
                    self.left_out.fetch_add(1, Ordering::Relaxed);
                    return None;
                }
                window + 1
            } else {
                (second << 32) | 1
            };
            match self.window.compare_exchange_weak(
                window,
                next,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(self.left_out.swap(0, Ordering::Relaxed)),
                Err(seen) => window = seen,
            }
        }
    }
}

/// One listener's accept failures, for its accept loop (which pauses after each): logged
/// when they begin, once a second while they last (with their count), and when they end.
/// They end after a second with none: a listener at its descriptor limit while clients come
/// and go accepts one connection between failures, and each such accept is no end.
#[derive(Debug)]
pub struct AcceptFailures {
    /// The listener, as its lines name it.
    listener: String,
    /// The failures going on, if any.
    failing: Option<Failing>,
    /// Failures since the last line.
    unlogged: u64,
}

/// Since when accepts fail, when the last line was written, when the last one failed.
#[derive(Debug, Clone, Copy)]
struct Failing {
    since: Instant,
    logged: Instant,
    last: Instant,
}

/// A second without a failure ends them.
const QUIET: Duration = Duration::from_secs(1);

impl AcceptFailures {
    /// No failure yet, for the listener `listener` names.
    pub fn new(listener: impl Into<String>) -> AcceptFailures {
        AcceptFailures {
            listener: listener.into(),
            failing: None,
            unlogged: 0,
        }
    }

    /// An accept failed.
    pub fn failed(&mut self, error: &std::io::Error) {
        self.failed_at(error, Instant::now());
    }

    fn failed_at(&mut self, error: &std::io::Error, now: Instant) {
        let listener = &self.listener;
        match &mut self.failing {
            None => {
                tracing::warn!(listener, %error, "accept failed; pausing and trying again");
                self.failing = Some(Failing {
                    since: now,
                    logged: now,
                    last: now,
                });
            }
            Some(failing) if now.duration_since(failing.logged) >= Duration::from_secs(1) => {
                self.unlogged += 1;
                tracing::warn!(listener, %error, failures = self.unlogged, "accept still failing");
                failing.logged = now;
                failing.last = now;
                self.unlogged = 0;
            }
            Some(failing) => {
                failing.last = now;
                self.unlogged += 1;
            }
        }
    }

    /// An accept succeeded.
    pub fn accepted(&mut self) {
        self.accepted_at(Instant::now());
    }

    fn accepted_at(&mut self, now: Instant) {
        let Some(failing) = self.failing else {
            return;
        };
        if now.duration_since(failing.last) >= QUIET {
            let listener = &self.listener;
            let after = failing.last.duration_since(failing.since);
            tracing::info!(listener, after = ?after, "accepting again");
            self.failing = None;
            self.unlogged = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_first_lines_of_each_second_are_written_and_the_rest_counted() {
        let budget = LogBudget::new();
        let t0 = budget.start;
        let written: Vec<Option<u64>> = (0..25).map(|_| budget.take_at(t0)).collect();
        assert_eq!(
            written.iter().filter(|w| w.is_some()).count() as u64,
            LINES_PER_SECOND
        );
        assert!(
            written[..LINES_PER_SECOND as usize]
                .iter()
                .all(|w| *w == Some(0))
        );
        // The next second: the first line says how many were left out.
        let later = t0 + Duration::from_millis(1500);
        assert_eq!(budget.take_at(later), Some(25 - LINES_PER_SECOND));
        assert_eq!(budget.take_at(later), Some(0));
    }

    #[test]
    fn accept_failures_are_counted_between_lines_and_end_with_an_accept() {
        let mut failures = AcceptFailures::new("test");
        let error = std::io::Error::from_raw_os_error(24);
        failures.failed(&error);
        assert!(failures.failing.is_some());
        // Within the second: counted, not written.
        for _ in 0..5 {
            failures.failed(&error);
        }
        assert_eq!(failures.unlogged, 5);
        // An accept within a second of the last failure does not end them (a listener at
        // its limit while clients come and go): no line per accept and failure.
        let last = failures.failing.unwrap().last;
        failures.accepted_at(last + Duration::from_millis(20));
        assert!(failures.failing.is_some());
        failures.failed_at(&error, last + Duration::from_millis(40));
        assert_eq!(failures.unlogged, 6);
        // A second without one does.
        failures.accepted_at(last + Duration::from_millis(1_100));
        assert!(failures.failing.is_none());
        assert_eq!(failures.unlogged, 0);
    }
}
