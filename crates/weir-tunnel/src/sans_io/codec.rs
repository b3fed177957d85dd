//! A flow's encoding, sans-IO: the sending half turns stream bytes into [`Block`]s (chunked,
//! deduplicated against what the receiver holds, zstd-compressed when that pays), and the
//! receiving half turns blocks back into bytes.
//!
//! The encoder works in two steps so that the shared mirror of the receiver's store is locked
//! only for lookups: [`FlowEncoder::chunk`] (hashing, no shared state), then
//! [`FlowEncoder::emit`] with one known/unknown answer per chunk. The decoder likewise returns
//! [`Piece`]s for the driver to resolve against the shared store.

use bytes::{Bytes, BytesMut};

use crate::sans_io::compress::{Compression, CompressionPolicy};
use crate::sans_io::dedup::{ChunkId, ChunkParams, Chunker};
use crate::sans_io::wire::{Block, Item, MAX_BLOCK_ITEMS, MAX_BLOCK_PAYLOAD, WireError};

/// The largest average chunk size: a chunk runs to four times its average, and a chunk sent
/// literally must fit one block.
pub const MAX_AVERAGE_CHUNK: u32 = MAX_CHUNK / 4;

/// The longest chunk a decoder accepts a reference to: a block's most literal bytes.
pub const MAX_CHUNK: u32 = MAX_BLOCK_PAYLOAD as u32;

/// What an encoder does with a flow's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncoderSettings {
    /// Chunk parameters; `None` turns deduplication off.
    pub dedup: Option<ChunkParams>,
    /// zstd level; `None` turns compression off.
    pub compression: Option<i32>,
}

/// Bytes cut into chunks and waiting for [`FlowEncoder::emit`].
#[derive(Debug)]
pub struct Chunked {
    data: Vec<u8>,
    /// With deduplication: the chunks covering `data`. Without: empty.
    chunks: Vec<crate::sans_io::dedup::Chunk>,
}

/// The sending half of a flow.
#[derive(Debug)]
pub struct FlowEncoder {
    settings: EncoderSettings,
    chunker: Option<Chunker>,
    policy: CompressionPolicy,
    compression: Option<Compression>,
    /// References emitted so far (the next reference's index).
    refs: u64,
    /// The most literal bytes per block.
    block_limit: usize,
}

/// A block ready to send, and the chunks it references (kept by the driver until the
/// receiver says it resolved them, in case it asks for one).
#[derive(Debug)]
pub struct EncodedBlock {
    pub block: Block,
    /// `(reference index, chunk bytes)` for each reference in the block.
    pub refs: Vec<(u64, Bytes)>,
    /// Of those, bytes sent as references.
    pub deduplicated_bytes: u64,
}

/// One piece of a decoded block, in stream order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Literal bytes; `store` when the receiver keeps them under `id`.
    Literal {
        bytes: Bytes,
        stored: Option<ChunkId>,
    },
    /// A reference: the `index`-th of the flow, to a chunk of `len` bytes.
    Ref { index: u64, id: ChunkId, len: u32 },
}

/// The receiving half of a flow.
pub struct FlowDecoder {
    max_chunk: u32,
    refs: u64,
    decompressor: zstd::bulk::Decompressor<'static>,
}

/// Why a block cannot be decoded.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error(transparent)]
    Wire(#[from] WireError),
    #[error("cannot decompress a block: {0}")]
    Decompress(std::io::Error),
    #[error("a block decompressed to {got} bytes, expected {expected}")]
    Length { got: usize, expected: usize },
}

impl FlowEncoder {
    pub fn new(settings: EncoderSettings) -> FlowEncoder {
        FlowEncoder {
            settings,
            chunker: settings.dedup.map(Chunker::new),
            policy: CompressionPolicy::default(),
            compression: settings.compression.map(Compression::new),
            refs: 0,
            block_limit: MAX_BLOCK_PAYLOAD,
        }
    }

    /// Caps the literal bytes per block (1 KiB to [`MAX_BLOCK_PAYLOAD`]). The receiver writes
    /// a block's bytes only once the whole block is in, so on a slow link smaller blocks
    /// mean less delay: the tunnel sizes them to about 25 ms of the link.
    pub fn with_block_limit(mut self, limit: usize) -> FlowEncoder {
        self.block_limit = limit.clamp(1024, MAX_BLOCK_PAYLOAD);
        self
    }

    /// Takes new stream bytes; with `flush`, nothing is held back.
    pub fn chunk(&mut self, input: &[u8], flush: bool) -> Chunked {
        match &mut self.chunker {
            Some(chunker) => {
                let (data, chunks) = chunker.push(input, flush);
                Chunked { data, chunks }
            }
            None => Chunked {
                data: input.to_vec(),
                chunks: Vec::new(),
            },
        }
    }

    /// Turns chunked bytes into blocks. `known[i]` says whether the receiver holds chunk `i`
    /// of `chunked.ids()` (as far as the sender knows); those become references.
    pub fn emit(&mut self, chunked: Chunked, known: &[bool]) -> Vec<EncodedBlock> {
        let mut blocks = Vec::new();
        let capacity = chunked.data.len().min(self.block_limit);
        let mut builder = BlockBuilder::with_capacity(capacity);
        let min_stored = self.settings.dedup.map_or(u32::MAX, |params| params.min) as usize;
        if chunked.chunks.is_empty() {
            for piece in chunked.data.chunks(self.block_limit) {
                if builder.is_full(piece.len(), self.block_limit) {
                    blocks.push(self.finish(std::mem::replace(
                        &mut builder,
                        BlockBuilder::with_capacity(capacity),
                    )));
                }
                builder.literal(piece, false);
            }
        }
        for (index, chunk) in chunked.chunks.iter().enumerate() {
            let bytes = &chunked.data[chunk.offset..chunk.offset + chunk.len];
            let is_ref = known.get(index).copied().unwrap_or(false);
            if builder.is_full(if is_ref { 0 } else { bytes.len() }, self.block_limit) {
                blocks.push(self.finish(std::mem::replace(
                    &mut builder,
                    BlockBuilder::with_capacity(capacity),
                )));
            }
            if is_ref {
                builder.reference(self.refs, chunk.id, bytes);
                self.refs += 1;
            } else {
                builder.literal(bytes, bytes.len() >= min_stored);
            }
        }
        if !builder.items.is_empty() {
            blocks.push(self.finish(builder));
        }
        blocks
    }

    fn finish(&mut self, builder: BlockBuilder) -> EncodedBlock {
        let raw_len = builder.payload.len();
        let (payload, compressed) = match &mut self.compression {
            Some(compression) if self.policy.should_try(raw_len) => {
                match compression.compress(&builder.payload) {
                    Some(compressed) if self.policy.record(raw_len, compressed.len()) => {
                        (Bytes::copy_from_slice(compressed), Some(raw_len as u32))
                    }
                    _ => (builder.payload.freeze(), None),
                }
            }
            _ => (builder.payload.freeze(), None),
        };
        EncodedBlock {
            block: Block {
                items: builder.items,
                payload,
                compressed,
            },
            refs: builder.refs,
            deduplicated_bytes: builder.deduplicated_bytes,
        }
    }
}

impl Chunked {
    /// The ids of the chunks, in order (empty without deduplication).
    pub fn ids(&self) -> impl Iterator<Item = &ChunkId> {
        self.chunks.iter().map(|chunk| &chunk.id)
    }
}

#[derive(Debug, Default)]
struct BlockBuilder {
    items: Vec<Item>,
    payload: BytesMut,
    refs: Vec<(u64, Bytes)>,
    deduplicated_bytes: u64,
}

impl BlockBuilder {
    /// A builder whose payload never grows (and so is never copied) below `capacity`.
    fn with_capacity(capacity: usize) -> BlockBuilder {
        BlockBuilder {
            payload: BytesMut::with_capacity(capacity),
            ..BlockBuilder::default()
        }
    }

    fn is_full(&self, literal: usize, limit: usize) -> bool {
        !self.items.is_empty()
            && (self.items.len() >= MAX_BLOCK_ITEMS || self.payload.len() + literal > limit)
    }

    fn literal(&mut self, bytes: &[u8], stored: bool) {
        let len = bytes.len() as u32;
        self.items.push(if stored {
            Item::Stored { len }
        } else {
            Item::Plain { len }
        });
        self.payload.extend_from_slice(bytes);
    }

    fn reference(&mut self, index: u64, id: ChunkId, bytes: &[u8]) {
        let len = bytes.len() as u32;
        self.items.push(Item::Ref { len, id });
        self.refs.push((index, Bytes::copy_from_slice(bytes)));
        self.deduplicated_bytes += u64::from(len);
    }
}

impl std::fmt::Debug for FlowDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlowDecoder")
            .field("refs", &self.refs)
            .finish_non_exhaustive()
    }
}

impl FlowDecoder {
    /// `max_chunk` bounds the length a reference may claim.
    pub fn new(max_chunk: u32) -> std::io::Result<FlowDecoder> {
        Ok(FlowDecoder {
            max_chunk,
            refs: 0,
            decompressor: zstd::bulk::Decompressor::new()?,
        })
    }

    /// Decodes one block record into pieces. Stored literals carry their id (the decoder
    /// hashes them itself: an id is never taken from the wire for bytes it can check).
    pub fn decode(&mut self, record: Bytes) -> Result<Vec<Piece>, DecodeError> {
        let block = Block::decode(record, self.max_chunk)?;
        let expected = block.raw_payload_len();
        let payload = match block.compressed {
            Some(_) => {
                let raw = self
                    .decompressor
                    .decompress(&block.payload, expected)
                    .map_err(DecodeError::Decompress)?;
                if raw.len() != expected {
                    return Err(DecodeError::Length {
                        got: raw.len(),
                        expected,
                    });
                }
                Bytes::from(raw)
            }
            None => block.payload,
        };
        let mut pieces = Vec::with_capacity(block.items.len());
        let mut offset = 0;
        for item in block.items {
            match item {
                Item::Stored { len } | Item::Plain { len } => {
                    let bytes = payload.slice(offset..offset + len as usize);
                    offset += len as usize;
                    let stored = matches!(item, Item::Stored { .. }).then(|| ChunkId::of(&bytes));
                    pieces.push(Piece::Literal { bytes, stored });
                }
                Item::Ref { len, id } => {
                    pieces.push(Piece::Ref {
                        index: self.refs,
                        id,
                        len,
                    });
                    self.refs += 1;
                }
            }
        }
        Ok(pieces)
    }

    /// References decoded so far.
    pub fn refs(&self) -> u64 {
        self.refs
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use rand::{RngCore, SeedableRng, rngs::SmallRng};

    use super::*;
    use crate::sans_io::dedup::ChunkStore;
    use crate::sans_io::wire::take_record;

    fn random(len: usize, seed: u64) -> Vec<u8> {
        let mut data = vec![0u8; len];
        SmallRng::seed_from_u64(seed).fill_bytes(&mut data);
        data
    }

    /// Sends `data` through an encoder and decoder sharing the given stores, in `piece`-byte
    /// reads, and returns (the output, bytes on the wire).
    fn transfer(
        data: &[u8],
        piece: usize,
        settings: EncoderSettings,
        mirror: &mut ChunkStore<u32>,
        store: &mut ChunkStore<Bytes>,
    ) -> (Vec<u8>, usize) {
        let mut encoder = FlowEncoder::new(settings);
        let mut decoder = FlowDecoder::new(1 << 20).unwrap();
        let mut wire = BytesMut::new();
        let mut pins: HashMap<u64, Bytes> = HashMap::new();
        let pieces: Vec<&[u8]> = data.chunks(piece).collect();
        for (index, input) in pieces.iter().enumerate() {
            let chunked = encoder.chunk(input, index == pieces.len() - 1);
            let known: Vec<bool> = chunked.ids().map(|id| mirror.contains(id)).collect();
            for block in encoder.emit(chunked, &known) {
                pins.extend(block.refs);
                block.block.encode(&mut wire);
            }
        }
        let on_wire = wire.len();
        let mut output = Vec::new();
        while let Some(record) = take_record(&mut wire).unwrap() {
            for piece in decoder.decode(record).unwrap() {
                match piece {
                    Piece::Literal { bytes, stored } => {
                        if let Some(id) = stored
                            && store.insert(id, bytes.clone())
                        {
                            // The receiver's report, applied by the sender in the same order.
                            mirror.insert(id, bytes.len() as u32);
                        }
                        output.extend_from_slice(&bytes);
                    }
                    Piece::Ref { index, id, len } => match store.get(&id) {
                        Some(bytes) => output.extend_from_slice(bytes),
                        None => {
                            // A miss: the sender's pin answers.
                            let pinned = &pins[&index];
                            assert_eq!(pinned.len(), len as usize);
                            output.extend_from_slice(pinned);
                        }
                    },
                }
            }
        }
        (output, on_wire)
    }

    const BOTH: EncoderSettings = EncoderSettings {
        dedup: Some(ChunkParams::DEFAULT),
        compression: Some(1),
    };

    #[test]
    fn round_trip_in_every_mode_and_read_size() {
        let mut text = Vec::new();
        for line in 0..20_000 {
            text.extend_from_slice(format!("line {line} of a compressible log\n").as_bytes());
        }
        let data = [random(200_000, 3), text].concat();
        for settings in [
            BOTH,
            EncoderSettings {
                dedup: None,
                compression: Some(3),
            },
            EncoderSettings {
                dedup: Some(ChunkParams::DEFAULT),
                compression: None,
            },
            EncoderSettings {
                dedup: None,
                compression: None,
            },
        ] {
            for piece in [777, 65_536, data.len()] {
                let mut mirror = ChunkStore::new(64 << 20);
                let mut store = ChunkStore::new(64 << 20);
                let (output, _) = transfer(&data, piece, settings, &mut mirror, &mut store);
                assert!(output == data, "{settings:?} in {piece}-byte reads");
            }
        }
    }

    #[test]
    fn a_repeated_transfer_is_almost_all_references() {
        let data = random(2 << 20, 4);
        let mut mirror = ChunkStore::new(64 << 20);
        let mut store = ChunkStore::new(64 << 20);
        let (first, first_wire) = transfer(&data, 65_536, BOTH, &mut mirror, &mut store);
        assert!(first == data);
        assert!(first_wire > data.len(), "random data does not compress");
        let (second, second_wire) = transfer(&data, 65_536, BOTH, &mut mirror, &mut store);
        assert!(second == data);
        let saved = 1.0 - second_wire as f64 / data.len() as f64;
        assert!(saved >= 0.99, "saved {:.4}", saved);
    }

    #[test]
    fn scattered_edits_cost_only_their_chunks() {
        let data = random(4 << 20, 5);
        let mut edited = data.clone();
        let mut rng = SmallRng::seed_from_u64(6);
        for _ in 0..12 {
            let at = (rng.next_u64() % (edited.len() as u64 - 100)) as usize;
            edited[at..at + 16].copy_from_slice(&random(16, rng.next_u64()));
        }
        let mut mirror = ChunkStore::new(64 << 20);
        let mut store = ChunkStore::new(64 << 20);
        transfer(&data, 65_536, BOTH, &mut mirror, &mut store);
        let (output, wire) = transfer(&edited, 65_536, BOTH, &mut mirror, &mut store);
        assert!(output == edited);
        let saved = 1.0 - wire as f64 / data.len() as f64;
        assert!(saved >= 0.97, "saved {saved:.4}");
    }

    #[test]
    fn references_that_miss_the_store_are_answered_by_pins() {
        // A tiny store: the second transfer's references mostly miss.
        let data = random(1 << 20, 7);
        let mut mirror = ChunkStore::new(64 << 20);
        let mut store = ChunkStore::new(64 << 20);
        transfer(&data, 65_536, BOTH, &mut mirror, &mut store);
        let mut small = ChunkStore::new(1 << 16);
        let (output, _) = transfer(&data, 65_536, BOTH, &mut mirror, &mut small);
        assert!(output == data);
    }

    /// With the largest average, chunks up to four times it travel literally (each alone in
    /// a block at most) and as references.
    #[test]
    fn the_largest_chunks_fit_a_block() {
        let data = random(8 << 20, 10);
        let settings = EncoderSettings {
            dedup: Some(ChunkParams::with_average(MAX_AVERAGE_CHUNK)),
            compression: Some(1),
        };
        let mut encoder = FlowEncoder::new(settings);
        let chunked = encoder.chunk(&data, true);
        let longest = chunked.chunks.iter().map(|chunk| chunk.len).max().unwrap();
        assert_eq!(
            longest, MAX_CHUNK as usize,
            "random data reaches the maximum"
        );
        let mut mirror = ChunkStore::new(64 << 20);
        let mut store = ChunkStore::new(64 << 20);
        for _ in 0..2 {
            let (output, _) = transfer(&data, 1 << 20, settings, &mut mirror, &mut store);
            assert!(output == data);
        }
    }

    #[test]
    fn blocks_respect_the_limit() {
        let data = random(100_000, 9);
        for settings in [
            BOTH,
            EncoderSettings {
                dedup: None,
                compression: None,
            },
        ] {
            let mut encoder = FlowEncoder::new(settings).with_block_limit(16 << 10);
            let chunked = encoder.chunk(&data, true);
            let blocks = encoder.emit(chunked, &[]);
            assert!(blocks.len() >= 7, "{settings:?}: {} blocks", blocks.len());
            for block in &blocks {
                assert!(block.block.raw_payload_len() <= 16 << 10);
            }
            // Nothing is known to the far end: every byte goes literally.
            let total: usize = blocks.iter().map(|b| b.block.raw_payload_len()).sum();
            assert_eq!(total, data.len());
        }
    }

    #[test]
    fn incompressible_data_is_sent_as_is() {
        let data = random(1 << 20, 8);
        let mut encoder = FlowEncoder::new(EncoderSettings {
            dedup: None,
            compression: Some(1),
        });
        let chunked = encoder.chunk(&data, true);
        let blocks = encoder.emit(chunked, &[]);
        assert!(blocks.iter().all(|block| block.block.compressed.is_none()));
    }

    #[test]
    fn corrupt_compressed_payloads_are_errors() {
        let block = Block {
            items: vec![Item::Plain { len: 10 }],
            payload: Bytes::from_static(b"not zstd at all"),
            compressed: Some(10),
        };
        let mut wire = BytesMut::new();
        block.encode(&mut wire);
        let record = take_record(&mut wire).unwrap().unwrap();
        assert!(FlowDecoder::new(1 << 16).unwrap().decode(record).is_err());
    }
}
