//! The tunnel pipeline's CPU cost per byte: a flow's encoder (chunking, hashing, mirror
//! lookups, compression, framing) and decoder (parsing, decompression, hashing, store),
//! without I/O, on one thread, measured in that thread's CPU time (`/proc/thread-self/
//! schedstat`), so that the figure does not depend on what else the machine runs; and the
//! FEC layer's sending half. `weir tunnel probe pipeline` and this crate's benchmarks run it.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

pub use crate::sans_io::codec::EncoderSettings;
use crate::sans_io::codec::{FlowDecoder, FlowEncoder, MAX_CHUNK, Piece};
use crate::sans_io::dedup::{ChunkParams, ChunkStore};
use crate::sans_io::fec::{FecCore, FecSettings, Mode, Timing};
use crate::sans_io::wire::take_record;

/// What one measured pass did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PassCost {
    /// Stream bytes fed to the encoder.
    pub bytes: u64,
    /// Bytes the encoder produced (framed records, as they would go on the wire).
    pub encoded: u64,
    /// The encoding thread's CPU time for the pass.
    pub encode_cpu: Duration,
    /// The decoding thread's CPU time for the pass.
    pub decode_cpu: Duration,
}

impl PassCost {
    /// Stream megabytes (10⁶) per CPU second, encoding.
    pub fn encode_mb_per_cpu_second(&self) -> f64 {
        self.bytes as f64 / 1e6 / self.encode_cpu.as_secs_f64().max(1e-9)
    }

    /// Stream megabytes (10⁶) per CPU second, decoding.
    pub fn decode_mb_per_cpu_second(&self) -> f64 {
        self.bytes as f64 / 1e6 / self.decode_cpu.as_secs_f64().max(1e-9)
    }
}

/// The calling thread's CPU time so far, or the wall clock where schedstat is missing.
pub fn thread_cpu_time() -> Duration {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse::<u64>().ok())
        .map(Duration::from_nanos)
        .unwrap_or_else(|| {
            static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
            START.get_or_init(Instant::now).elapsed()
        })
}

/// A pair of stores, as the two ends of one direction keep them.
pub struct Ends {
    mirror: ChunkStore<u32>,
    store: ChunkStore<Bytes>,
}

impl Ends {
    /// Both stores, empty, each holding at most `budget` bytes of chunks.
    pub fn new(budget: u64) -> Ends {
        Ends {
            mirror: ChunkStore::new(budget),
            store: ChunkStore::new(budget),
        }
    }
}

/// Encodes `data` in 256 KiB reads with `settings`, then decodes it, checking the output;
/// returns the CPU time of each half. Panics if the round trip differs (a benchmark of a
/// wrong pipeline would be worthless).
pub fn measure(data: &[u8], settings: EncoderSettings, ends: &mut Ends) -> PassCost {
    let mut encoder = FlowEncoder::new(settings);
    let mut wire = BytesMut::with_capacity(data.len() + data.len() / 8);
    let start = thread_cpu_time();
    let reads: Vec<&[u8]> = data.chunks(256 << 10).collect();
    for (index, read) in reads.iter().enumerate() {
        let chunked = encoder.chunk(read, index + 1 == reads.len());
        let known: Vec<bool> = chunked.ids().map(|id| ends.mirror.contains(id)).collect();
        for block in encoder.emit(chunked, &known) {
            block.block.encode(&mut wire);
        }
    }
    let encode_cpu = thread_cpu_time().saturating_sub(start);
    let encoded = wire.len() as u64;

    let start = thread_cpu_time();
    let mut decoder = FlowDecoder::new(MAX_CHUNK).expect("a zstd context");
    let mut offset = 0usize;
    let mut inserted = Vec::new();
    while let Ok(Some(record)) = take_record(&mut wire) {
        for piece in decoder.decode(record).expect("a valid block") {
            let bytes = match piece {
                Piece::Literal { bytes, stored } => {
                    if let Some(id) = stored
                        && ends.store.insert(id, bytes.clone())
                    {
                        inserted.push((id, bytes.len() as u32));
                    }
                    bytes
                }
                Piece::Ref { id, .. } => ends.store.get(&id).cloned().expect("a stored chunk"),
            };
            assert_eq!(
                &data[offset..offset + bytes.len()],
                &bytes[..],
                "round trip differs"
            );
            offset += bytes.len();
        }
    }
    let decode_cpu = thread_cpu_time().saturating_sub(start);
    assert_eq!(offset, data.len(), "round trip lost bytes");
    // The receiver's reports reach the sender's mirror (outside the timed parts).
    for (id, len) in inserted {
        ends.mirror.insert(id, len);
    }
    PassCost {
        bytes: data.len() as u64,
        encoded,
        encode_cpu,
        decode_cpu,
    }
}

/// The default settings: dedup with 4 KiB chunks and zstd level 1.
pub fn default_settings() -> EncoderSettings {
    settings(crate::config::DEFAULT_LEVEL)
}

/// Dedup with 4 KiB chunks and zstd at `level`.
pub fn settings(level: i32) -> EncoderSettings {
    EncoderSettings {
        dedup: Some(ChunkParams::DEFAULT),
        compression: Some(level),
    }
}

/// Sends `datagrams` through the FEC layer with protection on (OC-1, 500 ms round trip,
/// MTU 1,500: blocks of 32), as QUIC's socket would; returns how many repairs and reports
/// it queued.
pub fn fec_send(datagrams: &[Vec<u8>]) -> usize {
    let peer = SocketAddr::from(([127, 0, 0, 1], 4433));
    let settings = FecSettings {
        mode: Mode::On,
        ..FecSettings::default()
    };
    let timing = Timing::for_link(51_840_000, Duration::from_millis(500), 1500);
    let mut core = FecCore::new(settings, timing);
    let mut out = Vec::new();
    let now = Instant::now();
    for datagram in datagrams {
        out.clear();
        core.frame(now, peer, datagram, datagram.len(), &mut out);
        core.commit(now, peer, datagram, datagram.len());
    }
    core.take_outgoing().len()
}

/// Text-like compressible data: log lines with varying numbers.
pub fn log_lines(len: usize, seed: u64) -> Vec<u8> {
    let mut data = Vec::with_capacity(len + 128);
    let mut state = seed | 1;
    let mut line = 0u64;
    while data.len() < len {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1);
        line += 1;
        data.extend_from_slice(
            format!(
                "2026-11-23T12:{:02}:{:02}Z INFO request id={:016x} path=/api/v1/items/{} status=200 bytes={} took_ms={}\n",
                (line / 60) % 60,
                line % 60,
                state,
                state % 10_000,
                state % 65_536,
                state % 300
            )
            .as_bytes(),
        );
    }
    data.truncate(len);
    data
}

#[cfg(test)]
mod tests {
    use rand::{RngCore, SeedableRng, rngs::SmallRng};

    use super::*;

    fn pseudo_random(len: usize, seed: u64) -> Vec<u8> {
        let mut data = vec![0u8; len];
        SmallRng::seed_from_u64(seed).fill_bytes(&mut data);
        data
    }

    #[test]
    fn a_repeat_costs_references_only_and_round_trips() {
        let data = pseudo_random(1 << 20, 1);
        let mut ends = Ends::new(64 << 20);
        let first = measure(&data, default_settings(), &mut ends);
        assert!(first.encoded > data.len() as u64);
        let second = measure(&data, default_settings(), &mut ends);
        assert!(second.encoded * 100 < data.len() as u64);
        let text = log_lines(1 << 20, 2);
        let compressed = measure(&text, default_settings(), &mut Ends::new(64 << 20));
        assert!(compressed.encoded * 3 < text.len() as u64);
    }

    #[test]
    fn protected_datagrams_get_repairs() {
        let datagrams: Vec<Vec<u8>> = (0..64)
            .map(|number| {
                let mut bytes = pseudo_random(1200, number);
                bytes[0] = 0x41;
                bytes
            })
            .collect();
        assert!(fec_send(&datagrams) > 0);
    }
}
