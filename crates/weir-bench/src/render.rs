//! The text report: a headline, latency percentiles, errors by kind, siege's summary block and
//! the per-second timeline.

use std::fmt::Write;

use crate::report::{Percentiles, Report};

/// Renders `report` for a person.
#[allow(
    clippy::too_many_lines,
    reason = "the report, section by section, in the order it prints"
)]
pub fn text(report: &Report) -> String {
    let mut out = String::new();
    let settings = &report.settings;
    let pacing = match settings.rate {
        Some(rate) => format!("open loop at {rate} req/s"),
        None => "closed loop".to_owned(),
    };
    let urls = match settings.urls.as_slice() {
        [one] => one.clone(),
        many => format!("{} URLs", many.len()),
    };
    // HTTP: `GET http://...`; L4: `tcp://... (L4 rr, 64 B)`.
    let (what, unit, noun) = match (settings.l4_mode, settings.l4_size) {
        (Some(mode), Some(size)) => (
            format!("{urls} (L4 {mode}, {size} B)"),
            "trans/s",
            "transactions",
        ),
        _ => match settings.streams {
            Some(streams) => (
                match report
                    .http2_streams_allowed
                    .filter(|&allowed| (allowed as usize) < streams)
                {
                    Some(allowed) => format!(
                        "{} {urls} (HTTP/2, {streams} streams per connection asked, \
                         the server allowed {allowed}: the others waited in the client)",
                        settings.method
                    ),
                    None => format!(
                        "{} {urls} (HTTP/2, {streams} streams per connection)",
                        settings.method
                    ),
                },
                "req/s",
                "responses",
            ),
            None => (format!("{} {urls}", settings.method), "req/s", "responses"),
        },
    };
    let stop = match (settings.duration_s, settings.requests) {
        (Some(seconds), _) => format!("for {seconds} s"),
        (None, Some(count)) if settings.l4_mode.is_some() => format!("for {count} transactions"),
        (None, Some(count)) => format!("for {count} requests"),
        (None, None) => String::new(),
    };
    let _ = writeln!(
        out,
        "weir bench {what}: {pacing}, {} connections ({}) on {} threads, {stop}",
        settings.connections, settings.connection_mode, settings.threads
    );
    if let Some(tls) = &settings.tls {
        let verification = match &tls.cacert {
            Some(cacert) => format!("certificate verified against {cacert}"),
            None => "certificate verification off (no --cacert)".to_owned(),
        };
        let _ = writeln!(
            out,
            "  TLS {}, resumption {}, ALPN {}, SNI {}, {verification}",
            tls.versions.join("+"),
            if tls.resumption { "on" } else { "off" },
            tls.alpn.join(","),
            tls.sni.as_deref().unwrap_or("from the URL"),
        );
    }
    let _ = writeln!(
        out,
        "  {} {noun} in {:.2} s: {:.1} {unit}, {:.2} MB/s received, {} connections opened",
        report.requests.completed,
        report.elapsed_s,
        report.requests_per_s,
        report.bytes_per_s / (1024.0 * 1024.0),
        report.connections_opened
    );
    tls_lines(&mut out, report);
    let _ = writeln!(
        out,
        "\n  latency ms     {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "p50", "p90", "p99", "p99.9", "max", "mean"
    );
    if settings.rate.is_some() {
        percentile_row(&mut out, "corrected", &report.latency_corrected);
        percentile_row(&mut out, "uncorrected", &report.latency_service);
    } else {
        // Closed loop: each request is sent when the one before it is answered, so there is
        // no intended send time to correct from; the row is the service time (what wrk
        // without its own correction, h2load and ab report).
        percentile_row(&mut out, "service", &report.latency_service);
        let _ = writeln!(
            out,
            "  (closed loop: no correction for coordinated omission; --rate gives it)"
        );
    }
    let errors = &report.errors;
    let _ = writeln!(
        out,
        "\n  errors: connect {}, timeout {}, read {}, write {}, parse {}, tls {}; status >= 400 {}; unsent {}",
        errors.connect,
        errors.timeout,
        errors.read,
        errors.write,
        errors.parse,
        errors.tls,
        report.requests.non_2xx,
        report.requests.unsent
    );
    let siege = &report.siege;
    let rows: [(&str, String); 12] = [
        ("Transactions:", format!("{} hits", siege.transactions)),
        (
            "Availability:",
            format!("{:.2} %", siege.availability_percent),
        ),
        ("Elapsed time:", format!("{:.2} secs", siege.elapsed_time_s)),
        (
            "Data transferred:",
            format!("{:.2} MB", siege.data_transferred_mb),
        ),
        (
            "Response time:",
            format!("{:.4} secs", siege.response_time_s),
        ),
        (
            "Transaction rate:",
            format!("{:.2} trans/sec", siege.transaction_rate),
        ),
        (
            "Throughput:",
            format!("{:.2} MB/sec", siege.throughput_mb_s),
        ),
        ("Concurrency:", format!("{:.2}", siege.concurrency)),
        (
            "Successful transactions:",
            siege.successful_transactions.to_string(),
        ),
        (
            "Failed transactions:",
            siege.failed_transactions.to_string(),
        ),
        (
            "Longest transaction:",
            format!("{:.4}", siege.longest_transaction_s),
        ),
        (
            "Shortest transaction:",
            format!("{:.4}", siege.shortest_transaction_s),
        ),
    ];
    out.push('\n');
    for (label, value) in rows {
        let _ = writeln!(out, "{label:<25}{value:>20}");
    }
    let _ = writeln!(
        out,
        "\n  {:>6} {:>10} {:>8} {:>10}",
        "second", "req/s", "errors", "p99 ms"
    );
    for second in &report.timeline {
        let _ = writeln!(
            out,
            "  {:>6} {:>10} {:>8} {:>10.2}",
            second.second, second.requests, second.errors, second.p99_ms
        );
    }
    out
}

/// TLS runs: the handshakes by kind and version, and the connect + handshake time.
fn tls_lines(out: &mut String, report: &Report) {
    let Some(tls) = &report.tls else { return };
    let _ = writeln!(
        out,
        "  TLS handshakes: {} (full {}, of which {} with HelloRetryRequest; resumed {}); \
         TLS 1.3 {}, TLS 1.2 {}",
        tls.handshakes_total,
        tls.handshakes_full,
        tls.handshakes_full_with_hello_retry,
        tls.handshakes_resumed,
        tls.tls1_3,
        tls.tls1_2
    );
    let latency = &tls.handshake_latency;
    let _ = writeln!(
        out,
        "  TCP connect + TLS handshake ms: p50 {:.3}, p90 {:.3}, p99 {:.3}, max {:.3}, mean {:.3}",
        latency.p50_ms, latency.p90_ms, latency.p99_ms, latency.max_ms, latency.mean_ms
    );
}

fn percentile_row(out: &mut String, name: &str, values: &Percentiles) {
    let _ = writeln!(
        out,
        "  {name:<12} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3}",
        values.p50_ms, values.p90_ms, values.p99_ms, values.p99_9_ms, values.max_ms, values.mean_ms
    );
}
