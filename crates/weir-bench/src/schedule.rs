//! Schedule: when each request is meant to go out (its intended send time) and whether the
//! stop condition still admits it. Pure: times are offsets from the run's start.
//!
//! Closed loop: a request is intended when its connection is free, so intended = actual.
//! Open loop: each connection slot owns a fixed grid of intended times, `connections / rate`
//! apart, starting at its own phase inside the first interval (the driver spreads the slots'
//! phases evenly, from a random offset, so together they send on one even grid). A late connection does not
//! move its grid: requests queue logically and their latency counts from the grid (as wrk2).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::plan::{Pacing, Stop};

/// The intended send times of one connection slot.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Cadence {
    Closed,
    Open { next: Duration, interval: Duration },
}

impl Cadence {
    /// The cadence of one of `connections` slots; `phase` in `[0, 1)` places its first request
    /// inside the first interval.
    pub fn new(pacing: Pacing, connections: usize, phase: f64) -> Cadence {
        match pacing {
            Pacing::Closed => Cadence::Closed,
            Pacing::Open { rate } => {
                let interval = Duration::from_secs_f64(connections as f64 / rate);
                Cadence::Open {
                    next: interval.mul_f64(phase.clamp(0.0, 1.0)),
                    interval,
                }
            }
        }
    }

    /// The intended send time of the next request; `now` is the slot's free time.
    pub fn next(&mut self, now: Duration) -> Duration {
        match self {
            Cadence::Closed => now,
            Cadence::Open { next, interval } => {
                let intended = *next;
                *next += *interval;
                intended
            }
        }
    }

    /// How many requests, from (and including) the one intended at `intended`, fall before `end`.
    pub fn due_before(&self, intended: Duration, end: Duration) -> u64 {
        match self {
            Cadence::Closed => 0,
            Cadence::Open { interval, .. } if intended < end && !interval.is_zero() => {
                ((end - intended).as_nanos().div_ceil(interval.as_nanos())) as u64
            }
            Cadence::Open { .. } => 0,
        }
    }
}

/// The stop condition shared by every connection of a run.
#[derive(Debug)]
pub struct Budget {
    stop: Stop,
    issued: AtomicU64,
}

impl Budget {
    pub fn new(stop: Stop) -> Budget {
        Budget {
            stop,
            issued: AtomicU64::new(0),
        }
    }

    /// Whether a request intended at `intended` may still be sent; takes it from the count.
    pub fn admit(&self, intended: Duration) -> bool {
        match self.stop {
            Stop::Duration(length) => intended < length,
            Stop::Count(count) => self.issued.fetch_add(1, Ordering::Relaxed) < count,
        }
    }

    /// The run's nominal end, if it has one in time.
    pub fn deadline(&self) -> Option<Duration> {
        match self.stop {
            Stop::Duration(length) => Some(length),
            Stop::Count(_) => None,
        }
    }
}

/// How many of `total` connections thread `index` of `threads` drives.
pub fn share(total: usize, threads: usize, index: usize) -> usize {
    total / threads + usize::from(index < total % threads)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn closed_loop_is_intended_when_free() {
        let mut cadence = Cadence::new(Pacing::Closed, 10, 0.5);
        assert_eq!(cadence.next(7 * MS), 7 * MS);
        assert_eq!(cadence.next(9 * MS), 9 * MS);
        assert_eq!(cadence.due_before(9 * MS, 100 * MS), 0);
    }

    #[test]
    fn open_loop_keeps_its_grid_when_late() {
        // 1000 req/s over 10 connections: each slot every 10 ms, phase half an interval.
        let mut cadence = Cadence::new(Pacing::Open { rate: 1000.0 }, 10, 0.5);
        assert_eq!(cadence.next(Duration::ZERO), 5 * MS);
        // The connection was free only at 40 ms: the next intended time stays on the grid.
        assert_eq!(cadence.next(40 * MS), 15 * MS);
        assert_eq!(cadence.next(40 * MS), 25 * MS);
        // Due before 100 ms from 35 ms on: 35, 45, ..., 95.
        assert_eq!(cadence.due_before(35 * MS, 100 * MS), 7);
        assert_eq!(cadence.due_before(100 * MS, 100 * MS), 0);
    }

    #[test]
    fn budgets() {
        let count = Budget::new(Stop::Count(2));
        assert!(count.admit(Duration::ZERO));
        assert!(count.admit(Duration::from_secs(99)));
        assert!(!count.admit(Duration::ZERO));
        assert_eq!(count.deadline(), None);
        let time = Budget::new(Stop::Duration(Duration::from_secs(1)));
        assert!(time.admit(999 * MS));
        assert!(!time.admit(1000 * MS));
    }

    #[test]
    fn connections_split_across_threads() {
        let shares: Vec<usize> = (0..3).map(|index| share(10, 3, index)).collect();
        assert_eq!(shares, vec![4, 3, 3]);
        assert_eq!(shares.iter().sum::<usize>(), 10);
    }
}
