//! A budget of log lines per second, for events that can come once per request (a node
//! down under load, weir out of descriptors): the first lines of each second are written,
//! the rest only counted, and the next line written says how many were left out. Each
//! request's own record is in the access log; weir's log is for news, not a copy of it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

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
}
