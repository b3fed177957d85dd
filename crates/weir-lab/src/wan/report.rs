//! The lab's report: per rate, a table like the WX report's (KB/s and benefit per cell), and the
//! same figures as JSON (`weir-lab-wan/1`).

use std::fmt::Write as _;

use super::{CellResult, LinkRate, Transfer};

/// The report-style tables: one per rate, one row per delay and loss.
pub fn table(results: &[CellResult]) -> String {
    let mut out = String::new();
    for rate in [LinkRate::T1, LinkRate::Oc1] {
        let rows: Vec<&CellResult> = results
            .iter()
            .filter(|result| result.cell.rate == rate)
            .collect();
        if rows.is_empty() {
            continue;
        }
        let _ = writeln!(
            out,
            "\n{}: random file (KB/s from the connect to the last byte; % = share of the \
             link rate), then the edited copy\n",
            rate.label()
        );
        let _ = writeln!(
            out,
            "{:>6} {:>5} | {:>17} {:>17} {:>9} | {:>17} {:>17} {:>9} {:>11}",
            "delay",
            "loss",
            "baseline",
            "tunnel",
            "benefit",
            "baseline edited",
            "tunnel edited",
            "benefit",
            "link saved"
        );
        for result in rows {
            let cell = result.cell;
            let _ = writeln!(
                out,
                "{:>4}ms {:>4}% | {:>17} {:>17} {:>9} | {:>17} {:>17} {:>9} {:>11}{}",
                cell.delay_ms,
                cell.loss_percent,
                rate_cell(result.baseline_original.as_ref(), rate),
                rate_cell(result.tunnel_original.as_ref(), rate),
                benefit(
                    result.baseline_original.as_ref(),
                    result.tunnel_original.as_ref()
                ),
                rate_cell(result.baseline_edited.as_ref(), rate),
                rate_cell(result.tunnel_edited.as_ref(), rate),
                benefit(
                    result.baseline_edited.as_ref(),
                    result.tunnel_edited.as_ref()
                ),
                link_saved(result),
                flags(result),
            );
        }
    }
    out.push_str(
        "\nbaseline: direct TCP (CUBIC, Linux default buffers); tunnel: weir tunnel (QUIC, \
         zstd, dedup);\nlink saved: IP bytes on the link for the edited copy through the \
         tunnel vs its size;\n* a transfer hit the time limit (rate = bytes so far ÷ limit); \
         ! content check failed or a part did not run\n",
    );
    out
}

fn rate_cell(transfer: Option<&Transfer>, rate: LinkRate) -> String {
    match transfer {
        Some(transfer) => format!(
            "{:.1} ({:.1}%){}",
            transfer.kilobytes_per_second_from_connect(),
            transfer.utilisation_from_connect(rate) * 100.0,
            if transfer.complete { "" } else { "*" }
        ),
        None => "—".to_owned(),
    }
}

fn benefit(baseline: Option<&Transfer>, tunnel: Option<&Transfer>) -> String {
    match (baseline, tunnel) {
        (Some(baseline), Some(tunnel)) if baseline.kilobytes_per_second_from_connect() > 0.0 => {
            format!(
                "{:+.1}%",
                (tunnel.kilobytes_per_second_from_connect()
                    / baseline.kilobytes_per_second_from_connect()
                    - 1.0)
                    * 100.0
            )
        }
        _ => "—".to_owned(),
    }
}

fn link_saved(result: &CellResult) -> String {
    match &result.tunnel_edited {
        Some(transfer) if transfer.complete && transfer.bytes > 0 => format!(
            "{:.2}%",
            (1.0 - transfer.link_bytes as f64 / transfer.bytes as f64) * 100.0
        ),
        _ => "—".to_owned(),
    }
}

fn flags(result: &CellResult) -> &'static str {
    let transfers = [
        &result.baseline_original,
        &result.baseline_edited,
        &result.tunnel_original,
        &result.tunnel_edited,
    ];
    let unverified = transfers
        .iter()
        .filter_map(|transfer| transfer.as_ref())
        .any(|transfer| transfer.complete && !transfer.verified);
    if unverified || !result.errors.is_empty() || result.tunnel_original.is_none() {
        " !"
    } else {
        ""
    }
}

/// The results as JSON.
pub fn json(results: &[CellResult], date: &str, command: &str) -> String {
    let value = serde_json::json!({
        "format": "weir-lab-wan/1",
        "date": date,
        "command": command,
        "cells": results,
    });
    serde_json::to_string_pretty(&value).unwrap_or_default()
}
