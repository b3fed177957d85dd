//! The sending half for one peer: numbers datagrams, gathers the protected ones into blocks
//! and, when a block closes (full, old, or the sender went quiet), makes its Reed-Solomon
//! repairs.
//!
//! Framing is two-phase so that a send the socket refuses (`WouldBlock`, retried later by
//! quinn with the same bytes) leaves no gap in the numbers: [`Sender::frame`] writes headers
//! without changing anything, [`Sender::commit`] records what was actually sent.

use std::time::Instant;

use reed_solomon_simd::ReedSolomonEncoder;

use super::policy::{FecSettings, LossEstimator, Timing};
use super::wire::{self, BlockId};

/// One peer's sending state.
#[derive(Debug, Default)]
pub struct Sender {
    next_seq: u32,
    protecting: bool,
    block: Option<OpenBlock>,
    pub estimator: LossEstimator,
    encoder: super::Reused<ReedSolomonEncoder>,
    shard: Vec<u8>,
}

/// A block gathering source datagrams (their bytes back to back).
#[derive(Debug)]
struct OpenBlock {
    first: u32,
    bytes: Vec<u8>,
    lengths: Vec<usize>,
    opened: Instant,
    last: Instant,
}

/// What closing a block produced.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Repairs {
    pub frames: Vec<Vec<u8>>,
}

impl Sender {
    /// Whether any data frame went to this peer yet.
    pub fn has_sent(&self) -> bool {
        self.next_seq != 0
    }

    /// Writes the data frames for the datagrams of `contents` (`segment` bytes each, the
    /// last possibly shorter) into `out`; returns the framed segment size.
    pub fn frame(&self, contents: &[u8], segment: usize, out: &mut Vec<u8>) -> usize {
        out.clear();
        let mut seq = self.next_seq;
        for datagram in contents.chunks(segment.max(1)) {
            wire::write_data(out, seq, self.protecting, datagram);
            seq = seq.wrapping_add(1);
        }
        segment + wire::DATA_HEADER
    }

    /// Records that the datagrams of `contents` went out as framed by [`Sender::frame`];
    /// returns the repairs of any block that filled up.
    pub fn commit(
        &mut self,
        now: Instant,
        contents: &[u8],
        segment: usize,
        settings: &FecSettings,
    ) -> Repairs {
        let mut repairs = Repairs::default();
        for datagram in contents.chunks(segment.max(1)) {
            let seq = self.next_seq;
            self.next_seq = seq.wrapping_add(1);
            if !self.protecting || datagram.len() > wire::MAX_DATAGRAM {
                continue;
            }
            let block = self.block.get_or_insert_with(|| OpenBlock {
                first: seq,
                bytes: Vec::new(),
                lengths: Vec::new(),
                opened: now,
                last: now,
            });
            block.bytes.extend_from_slice(datagram);
            block.lengths.push(datagram.len());
            block.last = now;
            if block.lengths.len() >= settings.block_size() {
                repairs.frames.extend(self.close(settings));
            }
        }
        repairs
    }

    /// Closes the open block if it is old enough or the sender went quiet.
    pub fn poll(&mut self, now: Instant, settings: &FecSettings, timing: &Timing) -> Repairs {
        let due = self.block.as_ref().is_some_and(|block| {
            now.saturating_duration_since(block.opened) >= timing.max_delay
                || now.saturating_duration_since(block.last) >= timing.idle
        });
        Repairs {
            frames: if due {
                self.close(settings)
            } else {
                Vec::new()
            },
        }
    }

    /// When [`Sender::poll`] next has something to do.
    pub fn deadline(&self, timing: &Timing) -> Option<Instant> {
        self.block
            .as_ref()
            .map(|block| (block.opened + timing.max_delay).min(block.last + timing.idle))
    }

    /// Takes a report from the peer and decides whether to protect from now on; a block
    /// open when protection stops is closed with its repairs.
    pub fn report(&mut self, received: u32, lost: u32, settings: &FecSettings) -> Repairs {
        self.estimator.report(received, lost);
        self.update(settings)
    }

    /// Re-decides protection from the current estimate (also at start, for `mode = "on"`).
    pub fn update(&mut self, settings: &FecSettings) -> Repairs {
        self.protecting = settings.protect(self.protecting, self.estimator.estimate());
        Repairs {
            frames: if self.protecting {
                Vec::new()
            } else {
                self.close(settings)
            },
        }
    }

    /// Encodes the open block's repairs (none if there is no block).
    fn close(&mut self, settings: &FecSettings) -> Vec<Vec<u8>> {
        let Some(block) = self.block.take() else {
            return Vec::new();
        };
        let sources = block.lengths.len();
        let repairs = settings.repairs(sources, self.estimator.estimate());
        let longest = block.lengths.iter().copied().max().unwrap_or(0);
        let size = wire::shard_size(longest);
        let encoder = match self.encoder.0.as_mut() {
            Some(encoder) => encoder.reset(sources, repairs, size).map(|()| encoder),
            None => ReedSolomonEncoder::new(sources, repairs, size)
                .map(|encoder| self.encoder.0.insert(encoder)),
        };
        // Counts are within the library's limits (≤ 128 + 64) and the size is even and
        // non-zero, so this cannot fail; if it did, the block just goes unprotected.
        let Ok(encoder) = encoder else {
            return Vec::new();
        };
        let mut offset = 0;
        for &length in &block.lengths {
            wire::fill_shard(&mut self.shard, &block.bytes[offset..offset + length], size);
            offset += length;
            if encoder.add_original_shard(&self.shard).is_err() {
                return Vec::new();
            }
        }
        let Ok(result) = encoder.encode() else {
            return Vec::new();
        };
        let id = BlockId {
            first: block.first,
            // Both fit: sources ≤ MAX_SOURCES and repairs ≤ MAX_REPAIRS.
            sources: sources as u8,
            repairs: repairs as u8,
        };
        result
            .recovery_iter()
            .enumerate()
            .map(|(index, shard)| wire::repair(id, index as u8, shard))
            .collect()
    }
}
