//! The receiving half for one peer: counts data frames received and missing by their
//! sequence numbers (the link's loss before any repair, reported back to the sender), keeps
//! the recent protected datagrams, and rebuilds lost ones from a block's repairs.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use reed_solomon_simd::ReedSolomonDecoder;

use super::wire::{self, BlockId};

/// Sequence numbers remembered (and protected datagrams kept) behind the highest seen.
pub const WINDOW: u32 = 1024;
/// Blocks whose repairs are kept while their sources may still complete them.
const MAX_BLOCKS: usize = 32;
/// A report goes out after this many data frames, or this long after the last one.
const REPORT_EVERY: u32 = 128;
const REPORT_INTERVAL: Duration = Duration::from_millis(200);
/// Frames outside the window in a row after which the numbering is taken as restarted.
const MAX_STRAYS: u32 = 16;

/// One peer's receiving state.
#[derive(Debug)]
pub struct Receiver {
    highest: Option<u32>,
    /// Data frames received (cumulative, wrapping), recovered ones excluded.
    pub received: u32,
    /// Data frames found missing (cumulative, wrapping), recovered ones included.
    pub lost: u32,
    slots: Vec<Slot>,
    blocks: VecDeque<PendingBlock>,
    decoder: super::Reused<ReedSolomonDecoder>,
    shard: Vec<u8>,
    since_report: u32,
    last_report: Option<Instant>,
    strays: u32,
}

#[derive(Debug, Default, Clone)]
struct Slot {
    seq: u32,
    /// Whether this slot describes `seq` at all (fresh slots describe nothing).
    used: bool,
    seen: bool,
    stored: bool,
    bytes: Vec<u8>,
}

#[derive(Debug)]
struct PendingBlock {
    id: BlockId,
    shard_len: usize,
    repairs: Vec<(usize, Vec<u8>)>,
    done: bool,
}

impl Default for Receiver {
    fn default() -> Self {
        Receiver {
            highest: None,
            received: 0,
            lost: 0,
            slots: vec![Slot::default(); WINDOW as usize],
            blocks: VecDeque::new(),
            decoder: super::Reused::default(),
            shard: Vec::new(),
            since_report: 0,
            last_report: None,
            strays: 0,
        }
    }
}

impl Receiver {
    /// A data frame arrived: counts it and keeps a protected one for its block.
    pub fn data(
        &mut self,
        seq: u32,
        protected: bool,
        payload: &[u8],
        recovered: &mut Vec<Vec<u8>>,
    ) {
        self.note(seq, true);
        self.since_report = self.since_report.saturating_add(1);
        if protected && let Some(slot) = self.slot_for(seq) {
            slot.stored = true;
            slot.bytes.clear();
            slot.bytes.extend_from_slice(payload);
            // A source that arrives after its block's repairs may complete it.
            if let Some(index) = self.blocks.iter().position(|block| covers(block.id, seq)) {
                self.try_recover(index, recovered);
            }
        }
    }

    /// A repair arrived: kept with its block, which is rebuilt once enough is there.
    /// Rebuilt datagrams are appended to `recovered`.
    pub fn repair(&mut self, id: BlockId, index: u8, shard: &[u8], recovered: &mut Vec<Vec<u8>>) {
        let position = match self
            .blocks
            .iter()
            .position(|block| block.id.first == id.first)
        {
            Some(position) if self.blocks[position].id == id => position,
            // Another block with the same first number: stale or forged, either way unusable.
            Some(_) => return,
            None => {
                if self.blocks.len() >= MAX_BLOCKS {
                    self.blocks.pop_front();
                }
                self.blocks.push_back(PendingBlock {
                    id,
                    shard_len: shard.len(),
                    repairs: Vec::new(),
                    done: false,
                });
                self.blocks.len() - 1
            }
        };
        let block = &mut self.blocks[position];
        let index = usize::from(index);
        if block.done
            || shard.len() != block.shard_len
            || block.repairs.iter().any(|(have, _)| *have == index)
        {
            return;
        }
        block.repairs.push((index, shard.to_vec()));
        self.try_recover(position, recovered);
    }

    /// A report frame, if one is due.
    pub fn report(&mut self, now: Instant) -> Option<Vec<u8>> {
        let waited = self
            .last_report
            .is_none_or(|last| now.saturating_duration_since(last) >= REPORT_INTERVAL);
        if self.since_report >= REPORT_EVERY || (self.since_report > 0 && waited) {
            self.since_report = 0;
            self.last_report = Some(now);
            return Some(wire::report(self.received, self.lost));
        }
        None
    }

    /// When [`Receiver::report`] will be due with what has arrived so far.
    pub fn report_deadline(&self) -> Option<Instant> {
        if self.since_report == 0 {
            return None;
        }
        Some(
            self.last_report
                .map_or_else(Instant::now, |last| last + REPORT_INTERVAL),
        )
    }

    /// Counts `seq` as received (`arrived`) or as lost and rebuilt.
    fn note(&mut self, seq: u32, arrived: bool) {
        let Some(highest) = self.highest else {
            self.restart(seq, arrived);
            return;
        };
        let ahead = seq.wrapping_sub(highest);
        let behind = highest.wrapping_sub(seq);
        if ahead == 0 {
            return;
        }
        if ahead < WINDOW {
            self.strays = 0;
            for skipped in 1..ahead {
                let slot = self.slot(highest.wrapping_add(skipped));
                slot.seq = highest.wrapping_add(skipped);
                slot.used = true;
                slot.seen = false;
                slot.stored = false;
                self.lost = self.lost.wrapping_add(1);
            }
            self.highest = Some(seq);
            self.mark(seq, arrived);
        } else if behind < WINDOW {
            // Behind the highest: a late arrival fills a hole counted as lost.
            self.strays = 0;
            let slot = self.slot(seq);
            if slot.used && slot.seq == seq && !slot.seen {
                slot.seen = true;
                if arrived {
                    self.lost = self.lost.wrapping_sub(1);
                    self.received = self.received.wrapping_add(1);
                }
            }
        } else {
            // Outside the window: a very late frame, a long outage, or the peer restarted
            // its numbering. Ignored, unless it keeps happening: then start again there.
            self.strays += 1;
            if self.strays >= MAX_STRAYS {
                self.restart(seq, arrived);
            }
        }
    }

    fn restart(&mut self, seq: u32, arrived: bool) {
        self.strays = 0;
        self.highest = Some(seq);
        for slot in &mut self.slots {
            slot.used = false;
        }
        self.mark(seq, arrived);
    }

    fn mark(&mut self, seq: u32, arrived: bool) {
        let slot = self.slot(seq);
        slot.seq = seq;
        slot.used = true;
        slot.seen = true;
        slot.stored = false;
        if arrived {
            self.received = self.received.wrapping_add(1);
        } else {
            self.lost = self.lost.wrapping_add(1);
        }
    }

    fn slot(&mut self, seq: u32) -> &mut Slot {
        &mut self.slots[(seq % WINDOW) as usize]
    }

    /// The slot holding `seq`, if it is still in the window.
    fn slot_for(&mut self, seq: u32) -> Option<&mut Slot> {
        let slot = self.slot(seq);
        (slot.used && slot.seq == seq).then_some(slot)
    }

    fn stored(&self, seq: u32) -> Option<&[u8]> {
        let slot = &self.slots[(seq % WINDOW) as usize];
        (slot.used && slot.seq == seq && slot.stored).then_some(&slot.bytes[..])
    }

    /// Rebuilds the block's missing sources if enough shards are there.
    fn try_recover(&mut self, position: usize, recovered: &mut Vec<Vec<u8>>) {
        let block = &self.blocks[position];
        if block.done {
            return;
        }
        let id = block.id;
        let sources = usize::from(id.sources);
        let present = (0..id.sources)
            .filter(|&index| {
                self.stored(id.first.wrapping_add(u32::from(index)))
                    .is_some()
            })
            .count();
        if present == sources {
            self.blocks[position].done = true;
            return;
        }
        if present + block.repairs.len() < sources {
            return;
        }
        self.blocks[position].done = true;
        let rebuilt = self.decode(position);
        for (index, datagram) in rebuilt {
            let seq = id.first.wrapping_add(index as u32);
            self.note(seq, false);
            if let Some(slot) = self.slot_for(seq) {
                slot.stored = true;
                slot.bytes.clear();
                slot.bytes.extend_from_slice(&datagram);
            }
            recovered.push(datagram);
        }
    }

    /// Runs the decoder over the block's shards; the rebuilt datagrams by source index.
    /// Shards that do not fit together (forged or corrupt) rebuild nothing.
    fn decode(&mut self, position: usize) -> Vec<(usize, Vec<u8>)> {
        let block = &self.blocks[position];
        let (id, size) = (block.id, block.shard_len);
        let sources = usize::from(id.sources);
        let repairs = usize::from(id.repairs);
        let decoder = match self.decoder.0.as_mut() {
            Some(decoder) => decoder.reset(sources, repairs, size).map(|()| decoder),
            None => ReedSolomonDecoder::new(sources, repairs, size)
                .map(|decoder| self.decoder.0.insert(decoder)),
        };
        let Ok(decoder) = decoder else {
            return Vec::new();
        };
        for index in 0..sources {
            let slot = &self.slots[(id.first.wrapping_add(index as u32) % WINDOW) as usize];
            let seq = id.first.wrapping_add(index as u32);
            if !(slot.used && slot.seq == seq && slot.stored) {
                continue;
            }
            if slot.bytes.len() + 2 > size {
                return Vec::new();
            }
            wire::fill_shard(&mut self.shard, &slot.bytes, size);
            if decoder.add_original_shard(index, &self.shard).is_err() {
                return Vec::new();
            }
        }
        for (index, shard) in &block.repairs {
            if decoder.add_recovery_shard(*index, shard).is_err() {
                return Vec::new();
            }
        }
        let Ok(result) = decoder.decode() else {
            return Vec::new();
        };
        result
            .restored_original_iter()
            .filter_map(|(index, shard)| Some((index, wire::unshard(shard)?.to_vec())))
            .collect()
    }
}

/// Whether `seq` is one of the block's sources.
fn covers(id: BlockId, seq: u32) -> bool {
    seq.wrapping_sub(id.first) < u32::from(id.sources)
}
