//! `weir lab wan`: the WX WAN-acceleration report's matrix on one machine. For each cell
//! (rate × one-way delay × loss) a `weir netem` link joins two network namespaces; a file
//! server runs in side b, and side a downloads a pseudo-random file and then a lightly edited
//! copy, first directly over TCP (CUBIC, default buffers: the baseline), then through a
//! `weir tunnel` pair. Every transfer is bounded in time and checked byte for byte.
//!
//! The plan and the report are plain data ([`Plan`], [`CellResult`]); [`run()`] drives the
//! lab's binary through `ip netns exec`, every process under the lab's
//! [`Supervisor`](crate::process::Supervisor).

pub mod probe;
mod report;
mod run;

use std::path::Path;
use std::time::{Duration, SystemTime};

pub use report::{json, table};
pub use run::run;

use crate::error::LabError;

/// The report's two link rates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum LinkRate {
    /// 1.544 Mbit/s.
    T1,
    /// 51.84 Mbit/s.
    Oc1,
}

/// One cell of the matrix.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Cell {
    /// The bottleneck rate, both directions.
    pub rate: LinkRate,
    /// One-way delay added in each direction, ms.
    pub delay_ms: u32,
    /// Loss probability per packet, each direction, in percent.
    pub loss_percent: f64,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The matrix of link conditions to run, in order.
    pub cells: Vec<Cell>,
    /// The most one transfer may take.
    pub transfer_time: Duration,
    /// Skip the baseline (tunnel only).
    pub tunnel_only: bool,
    /// The tunnel's congestion controller.
    pub congestion: String,
    /// The tunnel's `[fec] mode` (both sides).
    pub fec: String,
    /// The tunnel's `[link] transport`: quic or tcp.
    pub transport: String,
}

/// One transfer's figures.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Transfer {
    /// Payload bytes received.
    pub bytes: u64,
    /// From the connect to the last byte (or the time limit).
    pub seconds: f64,
    /// From the connect to the first byte (a round trip and a half on the direct path).
    pub first_byte_seconds: f64,
    /// Whether the whole file arrived before the time limit.
    pub complete: bool,
    /// Whether what arrived is byte for byte the expected file.
    pub verified: bool,
    /// IP bytes the link carried during the transfer, both directions.
    pub link_bytes: u64,
    /// Packets the link dropped (loss and queue), both directions.
    pub link_drops: u64,
}

/// One cell's results.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CellResult {
    /// The link conditions of the cell.
    pub cell: Cell,
    /// Size of the transferred file, bytes.
    pub file_bytes: u64,
    /// Edits that turn the original file into the edited one.
    pub edits: u32,
    /// The original file over the emulated link without the tunnel; `None` when skipped or failed.
    pub baseline_original: Option<Transfer>,
    /// The edited file without the tunnel, after the original.
    pub baseline_edited: Option<Transfer>,
    /// The original file through the tunnel (its stores start empty).
    pub tunnel_original: Option<Transfer>,
    /// The edited file through the tunnel, after the original: what deduplication saves.
    pub tunnel_edited: Option<Transfer>,
    /// The tunnel's own counters at the end of the cell (far side, the sender).
    pub tunnel_summary: Option<String>,
    /// Why a part could not run.
    pub errors: Vec<String>,
}

impl LinkRate {
    /// The rate in bits per second.
    pub fn bits_per_second(self) -> u64 {
        match self {
            LinkRate::T1 => 1_544_000,
            LinkRate::Oc1 => 51_840_000,
        }
    }

    /// The rate as `weir netem` takes it.
    pub fn netem(self) -> &'static str {
        match self {
            LinkRate::T1 => "1544kbit",
            LinkRate::Oc1 => "51840kbit",
        }
    }

    /// The rate's name for tables.
    pub fn label(self) -> &'static str {
        match self {
            LinkRate::T1 => "T1 (1.544 Mbit/s)",
            LinkRate::Oc1 => "OC-1 (51.84 Mbit/s)",
        }
    }
}

impl Transfer {
    /// Payload kilobytes (1000 bytes) per second from the first byte to the last, as the
    /// report's tables measure (Δt of the first and last block).
    pub fn kilobytes_per_second(&self) -> f64 {
        self.bytes as f64 / 1000.0 / self.data_seconds()
    }

    /// Goodput from the first byte to the last as a share of the link rate.
    pub fn utilisation(&self, rate: LinkRate) -> f64 {
        self.bytes as f64 * 8.0 / self.data_seconds() / rate.bits_per_second() as f64
    }

    /// Payload kilobytes (1000 bytes) per second from the connect to the last byte (or the
    /// time limit): what the reader waited for. The report's tables use it, since the time
    /// to the first byte differs between the paths (the tunnel's first byte can wait behind
    /// its own start while the link already carries it), which can put a first-to-last rate
    /// above the link's.
    pub fn kilobytes_per_second_from_connect(&self) -> f64 {
        self.bytes as f64 / 1000.0 / self.seconds.max(1e-9)
    }

    /// Goodput over the whole transfer, from the connect, as a share of the link rate.
    pub fn utilisation_from_connect(&self, rate: LinkRate) -> f64 {
        self.bytes as f64 * 8.0 / self.seconds.max(1e-9) / rate.bits_per_second() as f64
    }

    fn data_seconds(&self) -> f64 {
        (self.seconds - self.first_byte_seconds).max(1e-6)
    }
}

impl Plan {
    /// The cells of the full matrix (or `quick`'s) with the rates, delays and losses asked
    /// for (all when none is), 20 s per transfer (8 s `quick`) unless `transfer_time` says,
    /// and the tunnel's defaults.
    pub fn new(
        quick: bool,
        rates: &[LinkRate],
        delays: &[u32],
        losses: &[f64],
        transfer_time: Option<Duration>,
    ) -> Plan {
        let mut cells = if quick { quick_matrix() } else { full_matrix() };
        cells.retain(|cell| {
            (rates.is_empty() || rates.contains(&cell.rate))
                && (delays.is_empty() || delays.contains(&cell.delay_ms))
                && (losses.is_empty() || losses.contains(&cell.loss_percent))
        });
        let default_time = Duration::from_secs(if quick { 8 } else { 20 });
        Plan {
            cells,
            transfer_time: transfer_time.unwrap_or(default_time),
            tunnel_only: false,
            congestion: "wan".to_owned(),
            fec: "auto".to_owned(),
            transport: "quic".to_owned(),
        }
    }

    /// Settings that cannot work, caught before anything starts.
    pub fn validate(&self) -> Result<(), LabError> {
        let invalid = |message: &str| Err(LabError::Invalid(message.to_owned()));
        if self.cells.is_empty() {
            return invalid("no cell of the matrix matches --rate, --delay and --loss");
        }
        if !["wan", "bbr", "cubic"].contains(&self.congestion.as_str()) {
            return invalid("--congestion: wan, bbr or cubic");
        }
        if !["auto", "on", "off"].contains(&self.fec.as_str()) {
            return invalid("--fec: auto, on or off");
        }
        if !["quic", "tcp"].contains(&self.transport.as_str()) {
            return invalid("--transport: quic or tcp");
        }
        if self.transfer_time < Duration::from_secs(1) {
            return invalid("--transfer-time must be at least 1s");
        }
        Ok(())
    }
}

/// The cells that failed (an error, or no tunnel transfer), one line each.
pub fn failures(results: &[CellResult]) -> Vec<String> {
    results
        .iter()
        .filter(|result| !result.errors.is_empty() || result.tunnel_original.is_none())
        .map(|result| format!("{:?}: {}", result.cell, result.errors.join("; ")))
        .collect()
}

/// Writes [`json`] of the results, dated now and with the command as typed, to each path.
pub fn write_json<'a>(
    results: &[CellResult],
    command: &str,
    paths: impl IntoIterator<Item = &'a Path>,
) -> Result<(), LabError> {
    let date = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
    let text = json(results, &date, command);
    for path in paths {
        std::fs::write(path, &text)
            .map_err(|e| LabError::io(format!("cannot write {}", path.display()), e))?;
    }
    Ok(())
}

/// The full matrix: T1 and OC-1 × 0/30/100/250 ms × 0/0.1/1/5 % loss.
pub fn full_matrix() -> Vec<Cell> {
    let mut cells = Vec::new();
    for rate in [LinkRate::T1, LinkRate::Oc1] {
        for delay_ms in [0, 30, 100, 250] {
            for loss_percent in [0.0, 0.1, 1.0, 5.0] {
                cells.push(Cell {
                    rate,
                    delay_ms,
                    loss_percent,
                });
            }
        }
    }
    cells
}

/// The quick subset for CI: the hardest corner at T1 (250 ms, 1 %) and OC-1 at 100 ms with
/// 1 % loss, plus a clean T1 cell.
pub fn quick_matrix() -> Vec<Cell> {
    vec![
        Cell {
            rate: LinkRate::T1,
            delay_ms: 30,
            loss_percent: 0.0,
        },
        Cell {
            rate: LinkRate::T1,
            delay_ms: 250,
            loss_percent: 1.0,
        },
        Cell {
            rate: LinkRate::Oc1,
            delay_ms: 100,
            loss_percent: 1.0,
        },
    ]
}

/// The file for a cell: what the link carries in 80 % of the transfer time, at most 64 MiB,
/// at least 256 KiB; 100 edits per 64 MiB (at least 3).
pub fn file_for(cell: &Cell, transfer_time: Duration, seed: u64) -> probe::FileSpec {
    let bytes = cell.rate.bits_per_second() as f64 / 8.0 * transfer_time.as_secs_f64() * 0.8;
    let size = (bytes as usize).clamp(256 << 10, 64 << 20);
    let edits = ((size as f64 / (64 << 20) as f64 * 100.0).round() as u32).max(3);
    probe::FileSpec { size, seed, edits }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_full_matrix_is_the_reports() {
        let cells = full_matrix();
        assert_eq!(cells.len(), 32);
        assert!(cells.contains(&Cell {
            rate: LinkRate::Oc1,
            delay_ms: 250,
            loss_percent: 5.0
        }));
    }

    #[test]
    fn files_fit_the_transfer_time() {
        let cell = quick_matrix()[2];
        let spec = file_for(&cell, Duration::from_secs(20), 1);
        assert_eq!(spec.size, 64 << 20);
        assert_eq!(spec.edits, 100);
        let t1 = file_for(&quick_matrix()[0], Duration::from_secs(20), 1);
        assert_eq!(t1.size, 3_088_000);
        assert_eq!(t1.edits, 5);
    }

    #[test]
    fn rates_and_utilisation() {
        let transfer = Transfer {
            bytes: 193_000,
            seconds: 1.5,
            first_byte_seconds: 0.5,
            complete: true,
            verified: true,
            link_bytes: 0,
            link_drops: 0,
        };
        assert!((transfer.utilisation(LinkRate::T1) - 1.0).abs() < 0.001);
        assert!((transfer.kilobytes_per_second() - 193.0).abs() < 1e-9);
        assert!((transfer.utilisation_from_connect(LinkRate::T1) - 2.0 / 3.0).abs() < 0.001);
        assert!((transfer.kilobytes_per_second_from_connect() - 193.0 * 2.0 / 3.0).abs() < 1e-9);
    }
}
