//! Record: what one thread measured (HDR histograms in microseconds, counts, errors by kind,
//! a per-second timeline), and the merge of every thread's record into one.

use std::time::Duration;

use hdrhistogram::Histogram;

use crate::tls::{Handshake, HandshakeCounts};

/// Latencies up to an hour are kept exactly to 3 significant figures.
const HIGHEST_US: u64 = 3_600_000_000;
/// The per-second timeline keeps 2 significant figures up to a minute (smaller histograms).
const TIMELINE_HIGHEST_US: u64 = 60_000_000;

/// Why a request got no response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    Connect,
    Timeout,
    Read,
    Write,
    Parse,
    /// The TLS handshake failed (a certificate that did not verify, no common version…).
    Tls,
}

impl ErrorKind {
    pub const ALL: [ErrorKind; 6] = [
        ErrorKind::Connect,
        ErrorKind::Timeout,
        ErrorKind::Read,
        ErrorKind::Write,
        ErrorKind::Parse,
        ErrorKind::Tls,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Connect => "connect",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Read => "read",
            ErrorKind::Write => "write",
            ErrorKind::Parse => "parse",
            ErrorKind::Tls => "tls",
        }
    }
}

/// One second of the timeline (by completion time from the start).
#[derive(Debug, Clone)]
pub struct Second {
    pub responses: u64,
    pub errors: u64,
    /// Corrected latency, µs.
    pub latency: Histogram<u32>,
}

/// Everything one thread (or, merged, the whole run) measured.
#[derive(Debug, Clone)]
pub struct Record {
    /// Latency from the intended send time to the response's end, µs.
    pub corrected: Histogram<u64>,
    /// Latency from the actual send time to the response's end (service time), µs.
    pub service: Histogram<u64>,
    /// Sum of service times, µs (siege's Concurrency and Response time).
    pub service_sum_us: u64,
    /// Exact extremes of the service time, µs.
    pub service_min_us: u64,
    pub service_max_us: u64,
    /// Complete responses, any status.
    pub responses: u64,
    /// Responses with a status of 400 or more.
    pub non_2xx: u64,
    /// Bytes read from the sockets (heads and bodies).
    pub bytes: u64,
    pub errors: [u64; ErrorKind::ALL.len()],
    /// Open loop: requests due before the end that were never sent because the run ended.
    pub unsent: u64,
    pub connections_opened: u64,
    /// HTTP/2: the fewest concurrent streams a server allowed on one connection.
    pub streams_allowed: Option<u64>,
    /// TLS handshakes completed, by kind and version.
    pub handshakes: HandshakeCounts,
    /// TLS: from the start of the TCP connect to the end of the handshake, µs.
    pub handshake_time: Histogram<u64>,
    pub timeline: Vec<Second>,
}

impl Record {
    pub fn new() -> Record {
        Record {
            corrected: histogram(),
            service: histogram(),
            service_sum_us: 0,
            service_min_us: u64::MAX,
            service_max_us: 0,
            responses: 0,
            non_2xx: 0,
            bytes: 0,
            errors: [0; ErrorKind::ALL.len()],
            unsent: 0,
            connections_opened: 0,
            streams_allowed: None,
            handshakes: HandshakeCounts::default(),
            handshake_time: histogram(),
            timeline: Vec::new(),
        }
    }

    /// A completed TLS handshake.
    pub fn handshake(&mut self, handshake: &Handshake) {
        self.handshakes.count(handshake);
        self.handshake_time
            .saturating_record(micros(handshake.took));
    }

    /// A complete response; `at` is its end, from the run's start.
    pub fn response(&mut self, status: u16, corrected: Duration, service: Duration, at: Duration) {
        let corrected_us = micros(corrected);
        let service_us = micros(service);
        self.corrected.saturating_record(corrected_us);
        self.service.saturating_record(service_us);
        self.service_sum_us += service_us;
        self.service_min_us = self.service_min_us.min(service_us);
        self.service_max_us = self.service_max_us.max(service_us);
        self.responses += 1;
        if status >= 400 {
            self.non_2xx += 1;
        }
        let second = self.second(at);
        second.responses += 1;
        second.latency.saturating_record(corrected_us);
    }

    /// Keeps the fewest concurrent streams a server allowed.
    pub fn allow_streams(&mut self, allowed: Option<u64>) {
        if let Some(allowed) = allowed {
            self.streams_allowed = Some(
                self.streams_allowed
                    .map_or(allowed, |seen| seen.min(allowed)),
            );
        }
    }

    pub fn error(&mut self, kind: ErrorKind, at: Duration) {
        self.errors[kind as usize] += 1;
        self.second(at).errors += 1;
    }

    pub fn error_count(&self) -> u64 {
        self.errors.iter().sum()
    }

    /// Adds `other` into `self`.
    pub fn merge(&mut self, other: &Record) {
        // Same bounds on both sides, so adding cannot fail.
        let _ = self.corrected.add(&other.corrected);
        let _ = self.service.add(&other.service);
        self.service_sum_us += other.service_sum_us;
        self.service_min_us = self.service_min_us.min(other.service_min_us);
        self.service_max_us = self.service_max_us.max(other.service_max_us);
        self.responses += other.responses;
        self.non_2xx += other.non_2xx;
        self.bytes += other.bytes;
        for (mine, theirs) in self.errors.iter_mut().zip(other.errors) {
            *mine += theirs;
        }
        self.unsent += other.unsent;
        self.connections_opened += other.connections_opened;
        self.allow_streams(other.streams_allowed);
        self.handshakes.merge(&other.handshakes);
        let _ = self.handshake_time.add(&other.handshake_time);
        for (index, theirs) in other.timeline.iter().enumerate() {
            let second = self.second_at(index);
            second.responses += theirs.responses;
            second.errors += theirs.errors;
            let _ = second.latency.add(&theirs.latency);
        }
    }

    fn second(&mut self, at: Duration) -> &mut Second {
        self.second_at(at.as_secs() as usize)
    }

    fn second_at(&mut self, index: usize) -> &mut Second {
        while self.timeline.len() <= index {
            self.timeline.push(Second {
                responses: 0,
                errors: 0,
                latency: Histogram::new_with_bounds(1, TIMELINE_HIGHEST_US, 2)
                    .expect("constant, valid bounds"),
            });
        }
        &mut self.timeline[index]
    }
}

impl Default for Record {
    fn default() -> Record {
        Record::new()
    }
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIGHEST_US, 3).expect("constant, valid bounds")
}

/// Whole microseconds, at least 1 (the histograms' lowest value).
pub fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros())
        .unwrap_or(u64::MAX)
        .max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn records_and_merges() {
        let mut first = Record::new();
        first.response(200, 10 * MS, 4 * MS, 300 * MS);
        first.response(503, 20 * MS, 20 * MS, 1500 * MS);
        first.error(ErrorKind::Timeout, 2500 * MS);
        let mut second = Record::new();
        second.response(200, 30 * MS, 2 * MS, 100 * MS);
        second.error(ErrorKind::Connect, 100 * MS);

        let mut all = Record::new();
        all.merge(&first);
        all.merge(&second);
        assert_eq!(all.responses, 3);
        assert_eq!(all.non_2xx, 1);
        assert_eq!(all.error_count(), 2);
        assert_eq!(all.errors[ErrorKind::Timeout as usize], 1);
        assert_eq!(all.service_sum_us, 26_000);
        assert_eq!((all.service_min_us, all.service_max_us), (2_000, 20_000));
        assert_eq!(all.corrected.len(), 3);
        assert_eq!(
            all.corrected.max(),
            all.corrected.highest_equivalent(30_000)
        );
        let per_second: Vec<(u64, u64)> = all
            .timeline
            .iter()
            .map(|second| (second.responses, second.errors))
            .collect();
        assert_eq!(per_second, vec![(2, 1), (1, 0), (0, 1)]);
    }
}
