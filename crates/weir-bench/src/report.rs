//! Report: the numbers a run is judged by, computed from the merged record by pure functions,
//! serialised as the `weir-bench/1` JSON document (see `SCHEMA.md`).

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::driver::Outcome;
use crate::plan::{ConnectionMode, Pacing, Plan, Protocol, Stop};
use crate::record::{ErrorKind, Record};
use crate::tls::{ResumptionViolation, check_resumption};

/// The schema name and version of the JSON document.
pub const SCHEMA: &str = "weir-bench/1";
const MIB: f64 = 1024.0 * 1024.0;

/// One run's report; `serde_json::to_string` gives the `weir-bench/1` document.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Always `SCHEMA` (`weir-bench/1`).
    pub schema: &'static str,
    /// What the run was asked to do.
    pub settings: SettingsReport,
    /// Seconds from the start of the load until every connection had finished.
    pub elapsed_s: f64,
    /// Requests by outcome.
    pub requests: Requests,
    /// TCP connections opened, reconnects included.
    pub connections_opened: u64,
    /// HTTP/2: the fewest concurrent streams the server allowed on a connection (fewer than
    /// `settings.streams` means the other stream loops waited in the client); null otherwise.
    pub http2_streams_allowed: Option<u64>,
    /// Responses received per second of `elapsed_s`.
    pub requests_per_s: f64,
    /// Bytes received, heads and bodies (HTTP/2: the frames read, control frames
    /// included, after TLS; L4: the echoed bytes).
    pub bytes_received: u64,
    /// `bytes_received` per second of `elapsed_s`.
    pub bytes_per_s: f64,
    /// Latency from the intended send time (equal to `service` in a closed loop).
    pub latency_corrected: Percentiles,
    /// Latency from the actual send time.
    pub latency_service: Percentiles,
    /// Failed requests by cause.
    pub errors: Errors,
    /// The same run summarised with siege's definitions, for comparison with siege.
    pub siege: Siege,
    /// One entry per second of the run.
    pub timeline: Vec<TimelineSecond>,
    /// `https://` runs: handshakes as the client saw them; null otherwise.
    pub tls: Option<TlsReport>,
}

/// What the TLS handshakes of a run were.
#[derive(Debug, Clone, Serialize)]
pub struct TlsReport {
    /// Full handshakes (with or without a HelloRetryRequest).
    pub handshakes_full: u64,
    /// Of the full ones: those with a HelloRetryRequest.
    pub handshakes_full_with_hello_retry: u64,
    /// Handshakes that resumed a session.
    pub handshakes_resumed: u64,
    /// All handshakes, full and resumed.
    pub handshakes_total: u64,
    /// Handshakes that negotiated TLS 1.2 and TLS 1.3.
    pub tls1_2: u64,
    /// Handshakes that negotiated TLS 1.3.
    pub tls1_3: u64,
    /// From the start of the TCP connect to the end of the TLS handshake.
    pub handshake_latency: Percentiles,
}

/// The run's settings, as the report records them.
#[derive(Debug, Clone, Serialize)]
pub struct SettingsReport {
    /// The URLs, as given.
    pub urls: Vec<String>,
    /// The request method.
    pub method: String,
    /// Connections kept open at once.
    pub connections: usize,
    /// Load generator threads.
    pub threads: usize,
    /// `"closed"` or `"open"`.
    pub pacing: &'static str,
    /// Open loop: the requested total rate; closed loop: null.
    pub rate: Option<f64>,
    /// Stop condition: `duration_s` or `requests`, the other null.
    pub duration_s: Option<f64>,
    /// Stop condition: the number of requests; null for a timed run.
    pub requests: Option<u64>,
    /// `"keep-alive"` or `"close"`.
    pub connection_mode: &'static str,
    /// Seconds a connect or a response may take before it counts as a timeout.
    pub timeout_s: f64,
    /// `"http1"`, `"http2"` (`--h2`) or `"tcp"` (L4 against an echo server).
    pub protocol: &'static str,
    /// L4: `"connect"` or `"rr"`; HTTP: null.
    pub l4_mode: Option<&'static str>,
    /// L4: bytes sent (and read back) per transaction; HTTP: null.
    pub l4_size: Option<usize>,
    /// HTTP/2: streams per connection (`--streams`); otherwise null.
    pub streams: Option<usize>,
    /// `https://`: the TLS settings; null otherwise.
    pub tls: Option<TlsSettingsReport>,
}

/// The client's TLS settings.
#[derive(Debug, Clone, Serialize)]
pub struct TlsSettingsReport {
    /// Versions offered: `"1.2"`, `"1.3"`.
    pub versions: Vec<&'static str>,
    /// Whether the client offered resumption (off: every handshake must be full).
    pub resumption: bool,
    /// Whether the server's certificate was verified (against `cacert`).
    pub verify: bool,
    /// The CA file the certificate was verified against; null: the system's roots or no
    /// verification.
    pub cacert: Option<String>,
    /// `--sni` override; null: the URL's host.
    pub sni: Option<String>,
    /// The ALPN protocols offered, in order.
    pub alpn: Vec<&'static str>,
}

/// Requests by outcome.
#[derive(Debug, Clone, Serialize)]
pub struct Requests {
    /// Responses received, any status.
    pub completed: u64,
    /// Responses with status below 400 (every completed L4 transaction).
    pub successful: u64,
    /// Responses with status 400 or more.
    pub non_2xx: u64,
    /// Requests that got no response (sum of `errors`).
    pub failed: u64,
    /// Open loop: due before the end but never sent because the run ended.
    pub unsent: u64,
}

/// Percentiles in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Percentiles {
    /// Fastest, ms.
    pub min_ms: f64,
    /// Mean, ms.
    pub mean_ms: f64,
    /// Median, ms.
    pub p50_ms: f64,
    /// 90th percentile, ms.
    pub p90_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// 99.9th percentile, ms.
    pub p99_9_ms: f64,
    /// Slowest, ms.
    pub max_ms: f64,
}

/// Requests that got no response, by cause.
#[derive(Debug, Clone, Serialize)]
pub struct Errors {
    /// Connects that failed.
    pub connect: u64,
    /// Connects or responses slower than the timeout.
    pub timeout: u64,
    /// Reads that failed, or connections closed before the response ended.
    pub read: u64,
    /// Writes that failed.
    pub write: u64,
    /// Responses that do not parse as HTTP/1.1 (or L4 echoes that differ from what was sent).
    pub parse: u64,
    /// TLS handshake failures.
    pub tls: u64,
    /// All of the above together.
    pub total: u64,
}

/// The siege summary block, with siege's definitions.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Siege {
    /// Responses received (any status): siege's server hits.
    pub transactions: u64,
    /// transactions ÷ (transactions + socket failures) × 100.
    pub availability_percent: f64,
    /// Seconds the run took.
    pub elapsed_time_s: f64,
    /// Bytes received (heads and bodies) ÷ 2^20.
    pub data_transferred_mb: f64,
    /// Mean service time of the transactions.
    pub response_time_s: f64,
    /// transactions ÷ elapsed time.
    pub transaction_rate: f64,
    /// data transferred ÷ elapsed time.
    pub throughput_mb_s: f64,
    /// Sum of service times ÷ elapsed time: the mean number of requests in flight.
    pub concurrency: f64,
    /// Responses with status below 400.
    pub successful_transactions: u64,
    /// Responses with status 400 or more, plus socket failures.
    pub failed_transactions: u64,
    /// Longest service time, seconds.
    pub longest_transaction_s: f64,
    /// Shortest service time, seconds.
    pub shortest_transaction_s: f64,
}

/// One second of the run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TimelineSecond {
    /// Seconds from the start, from zero.
    pub second: u64,
    /// Responses received in that second.
    pub requests: u64,
    /// Failed requests in that second.
    pub errors: u64,
    /// 99th percentile (corrected) of that second's responses, ms.
    pub p99_ms: f64,
}

/// The counts the siege block is computed from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct SiegeInputs {
    /// Responses received, any status.
    pub responses: u64,
    /// Responses with status 400 or more.
    pub non_2xx: u64,
    /// Requests that got no response.
    pub socket_failures: u64,
    /// Bytes received.
    pub bytes: u64,
    /// The run's length.
    pub elapsed: Duration,
    /// Sum of the service times, µs.
    pub service_sum_us: u64,
    /// Shortest service time, µs.
    pub service_min_us: u64,
    /// Longest service time, µs.
    pub service_max_us: u64,
}

impl Report {
    /// Builds the report from what the driver recorded for `plan`.
    pub fn new(plan: &Plan, outcome: &Outcome) -> Report {
        let record = &outcome.record;
        let elapsed_s = outcome.elapsed.as_secs_f64();
        let errors = errors(record);
        Report {
            schema: SCHEMA,
            settings: settings(plan),
            elapsed_s,
            requests: Requests {
                completed: record.responses,
                successful: record.responses - record.non_2xx,
                non_2xx: record.non_2xx,
                failed: errors.total,
                unsent: record.unsent,
            },
            connections_opened: record.connections_opened,
            http2_streams_allowed: record.streams_allowed,
            requests_per_s: per_second(record.responses as f64, elapsed_s),
            bytes_received: record.bytes,
            bytes_per_s: per_second(record.bytes as f64, elapsed_s),
            latency_corrected: percentiles(&record.corrected),
            latency_service: percentiles(&record.service),
            siege: Siege::new(SiegeInputs {
                responses: record.responses,
                non_2xx: record.non_2xx,
                socket_failures: errors.total,
                bytes: record.bytes,
                elapsed: outcome.elapsed,
                service_sum_us: record.service_sum_us,
                service_min_us: record.service_min_us,
                service_max_us: record.service_max_us,
            }),
            errors,
            timeline: record
                .timeline
                .iter()
                .enumerate()
                .map(|(second, counts)| TimelineSecond {
                    second: second as u64,
                    requests: counts.responses,
                    errors: counts.errors,
                    p99_ms: ms(counts.latency.value_at_quantile(0.99)),
                })
                .collect(),
            tls: plan.tls.as_ref().map(|_| TlsReport {
                handshakes_full: record.handshakes.full,
                handshakes_full_with_hello_retry: record.handshakes.full_with_hello_retry,
                handshakes_resumed: record.handshakes.resumed,
                handshakes_total: record.handshakes.total(),
                tls1_2: record.handshakes.tls12,
                tls1_3: record.handshakes.tls13,
                handshake_latency: percentiles(&record.handshake_time),
            }),
        }
    }

    /// Fails a run that had resumption off and saw a resumed handshake (its figures would not
    /// be full-handshake figures); `Ok` for every other run.
    pub fn check_tls(&self) -> Result<(), ResumptionViolation> {
        match (&self.settings.tls, &self.tls) {
            (Some(settings), Some(tls)) => check_resumption(
                settings.resumption,
                &crate::tls::HandshakeCounts {
                    full: tls.handshakes_full,
                    resumed: tls.handshakes_resumed,
                    ..Default::default()
                },
            ),
            _ => Ok(()),
        }
    }

    /// The `weir-bench/1` JSON document.
    pub fn to_json(&self) -> String {
        // Plain structs of numbers and strings: serialising cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
}

impl Siege {
    /// Computes the block from the run's counts.
    pub(crate) fn new(inputs: SiegeInputs) -> Siege {
        let elapsed = inputs.elapsed.as_secs_f64();
        let transactions = inputs.responses;
        let attempts = transactions + inputs.socket_failures;
        let data_mb = inputs.bytes as f64 / MIB;
        let sum_s = inputs.service_sum_us as f64 / 1e6;
        Siege {
            transactions,
            availability_percent: if attempts == 0 {
                0.0
            } else {
                transactions as f64 * 100.0 / attempts as f64
            },
            elapsed_time_s: elapsed,
            data_transferred_mb: data_mb,
            response_time_s: if transactions == 0 {
                0.0
            } else {
                sum_s / transactions as f64
            },
            transaction_rate: per_second(transactions as f64, elapsed),
            throughput_mb_s: per_second(data_mb, elapsed),
            concurrency: per_second(sum_s, elapsed),
            successful_transactions: transactions - inputs.non_2xx,
            failed_transactions: inputs.non_2xx + inputs.socket_failures,
            longest_transaction_s: if transactions == 0 {
                0.0
            } else {
                inputs.service_max_us as f64 / 1e6
            },
            shortest_transaction_s: if transactions == 0 {
                0.0
            } else {
                inputs.service_min_us as f64 / 1e6
            },
        }
    }
}

fn settings(plan: &Plan) -> SettingsReport {
    let (pacing, rate) = match plan.pacing {
        Pacing::Closed => ("closed", None),
        Pacing::Open { rate } => ("open", Some(rate)),
    };
    let (duration_s, requests) = match plan.stop {
        Stop::Duration(length) => (Some(length.as_secs_f64()), None),
        Stop::Count(count) => (None, Some(count)),
    };
    SettingsReport {
        urls: plan
            .targets
            .iter()
            .map(|target| target.url.clone())
            .collect(),
        method: plan.method.clone(),
        connections: plan.connections,
        threads: plan.threads,
        pacing,
        rate,
        duration_s,
        requests,
        connection_mode: match plan.mode {
            ConnectionMode::KeepAlive => "keep-alive",
            ConnectionMode::Close => "close",
        },
        timeout_s: plan.timeout.as_secs_f64(),
        protocol: match plan.protocol {
            Protocol::Http1 => "http1",
            Protocol::Http2 { .. } => "http2",
            Protocol::Tcp { .. } => "tcp",
        },
        l4_mode: match plan.protocol {
            Protocol::Http1 | Protocol::Http2 { .. } => None,
            Protocol::Tcp { mode, .. } => Some(mode.name()),
        },
        l4_size: match plan.protocol {
            Protocol::Http1 | Protocol::Http2 { .. } => None,
            Protocol::Tcp { size, .. } => Some(size),
        },
        streams: match plan.protocol {
            Protocol::Http2 { streams } => Some(streams),
            _ => None,
        },
        tls: plan.tls.as_ref().map(|client| TlsSettingsReport {
            versions: client.settings.versions.names(),
            resumption: client.settings.resumption,
            verify: client.settings.cacert.is_some(),
            cacert: client
                .settings
                .cacert
                .as_ref()
                .map(|path| path.display().to_string()),
            sni: client.settings.sni.clone(),
            alpn: vec![client.alpn],
        }),
    }
}

fn errors(record: &Record) -> Errors {
    let count = |kind: ErrorKind| record.errors[kind as usize];
    Errors {
        connect: count(ErrorKind::Connect),
        timeout: count(ErrorKind::Timeout),
        read: count(ErrorKind::Read),
        write: count(ErrorKind::Write),
        parse: count(ErrorKind::Parse),
        tls: count(ErrorKind::Tls),
        total: record.error_count(),
    }
}

/// Percentiles of a µs histogram, in ms; all zero when it is empty.
pub fn percentiles(histogram: &Histogram<u64>) -> Percentiles {
    if histogram.is_empty() {
        return Percentiles {
            min_ms: 0.0,
            mean_ms: 0.0,
            p50_ms: 0.0,
            p90_ms: 0.0,
            p99_ms: 0.0,
            p99_9_ms: 0.0,
            max_ms: 0.0,
        };
    }
    Percentiles {
        min_ms: ms(histogram.min()),
        mean_ms: histogram.mean() / 1000.0,
        p50_ms: ms(histogram.value_at_quantile(0.50)),
        p90_ms: ms(histogram.value_at_quantile(0.90)),
        p99_ms: ms(histogram.value_at_quantile(0.99)),
        p99_9_ms: ms(histogram.value_at_quantile(0.999)),
        max_ms: ms(histogram.max()),
    }
}

fn ms(micros: u64) -> f64 {
    micros as f64 / 1000.0
}

fn per_second(amount: f64, elapsed_s: f64) -> f64 {
    if elapsed_s > 0.0 {
        amount / elapsed_s
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn siege_block_follows_siege_definitions() {
        let siege = Siege::new(SiegeInputs {
            responses: 1000,
            non_2xx: 10,
            socket_failures: 25,
            bytes: 2 * 1024 * 1024,
            elapsed: Duration::from_secs(4),
            service_sum_us: 8_000_000,
            service_min_us: 1_500,
            service_max_us: 250_000,
        });
        assert_eq!(siege.transactions, 1000);
        assert!((siege.availability_percent - 100_000.0 / 1025.0).abs() < 1e-9);
        assert_eq!(siege.data_transferred_mb, 2.0);
        assert_eq!(siege.response_time_s, 0.008);
        assert_eq!(siege.transaction_rate, 250.0);
        assert_eq!(siege.throughput_mb_s, 0.5);
        assert_eq!(siege.concurrency, 2.0);
        assert_eq!(siege.successful_transactions, 990);
        assert_eq!(siege.failed_transactions, 35);
        assert_eq!(siege.longest_transaction_s, 0.25);
        assert_eq!(siege.shortest_transaction_s, 0.0015);
    }

    #[test]
    fn empty_runs_report_zeros() {
        let siege = Siege::new(SiegeInputs {
            responses: 0,
            non_2xx: 0,
            socket_failures: 3,
            bytes: 0,
            elapsed: Duration::ZERO,
            service_sum_us: 0,
            service_min_us: u64::MAX,
            service_max_us: 0,
        });
        assert_eq!(siege.availability_percent, 0.0);
        assert_eq!(siege.transaction_rate, 0.0);
        assert_eq!(siege.shortest_transaction_s, 0.0);
        assert_eq!(siege.failed_transactions, 3);
        let empty = Histogram::<u64>::new(3).expect("valid");
        assert_eq!(percentiles(&empty).max_ms, 0.0);
    }
}
