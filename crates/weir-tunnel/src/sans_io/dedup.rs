//! Deduplication, sans-IO: content-defined chunking of a byte stream (FastCDC 2020), chunk ids
//! (BLAKE3, 128 bits), and the bounded first-in-first-out store that both ends keep in step.
//!
//! The receiving end keeps chunk bytes in a [`ChunkStore`]; the sending end keeps a
//! [`ChunkStore`] of lengths only — a mirror — and applies the receiver's insertions in the
//! order the receiver reports them. The same rule (insert if new, then evict the oldest until
//! the total is within the budget) applied to the same sequence gives the same contents, so
//! the sender knows which chunks the receiver holds (as of the last report).

use std::collections::{HashMap, VecDeque};

use fastcdc::v2020::FastCDC;

/// A chunk's identity: the first 128 bits of its BLAKE3 hash.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ChunkId([u8; 16]);

/// Chunk size limits for content-defined chunking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkParams {
    pub min: u32,
    pub average: u32,
    pub max: u32,
}

/// A chunk found in the input: where it is and what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk {
    pub offset: usize,
    pub len: usize,
    pub id: ChunkId,
}

/// Splits a stream into content-defined chunks across calls, keeping the tail that may still
/// grow until more data (or a flush) decides where it ends.
#[derive(Debug)]
pub struct Chunker {
    params: ChunkParams,
    /// Bytes not yet cut into a chunk (the tentative tail of the previous call).
    pending: Vec<u8>,
}

/// Something that can hold chunk values and report their size for the budget.
pub trait Sized64 {
    fn size(&self) -> u64;
}

/// A bounded first-in-first-out map of chunks. Inserting a chunk that is present changes
/// nothing (no refresh), so two stores given the same insertions hold the same chunks.
#[derive(Debug)]
pub struct ChunkStore<V> {
    budget: u64,
    total: u64,
    map: HashMap<ChunkId, V>,
    order: VecDeque<ChunkId>,
}

impl ChunkId {
    pub const LEN: usize = 16;

    pub fn of(bytes: &[u8]) -> ChunkId {
        let hash = blake3::hash(bytes);
        let mut id = [0u8; 16];
        id.copy_from_slice(&hash.as_bytes()[..16]);
        ChunkId(id)
    }

    /// From exactly [`ChunkId::LEN`] bytes (callers check the length).
    pub fn from_slice(bytes: &[u8]) -> ChunkId {
        let mut id = [0u8; 16];
        id.copy_from_slice(&bytes[..16]);
        ChunkId(id)
    }

    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }
}

impl std::fmt::Debug for ChunkId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for byte in &self.0[..6] {
            write!(f, "{byte:02x}")?;
        }
        f.write_str("…")
    }
}

impl ChunkParams {
    /// 1 KiB minimum, 4 KiB average, 16 KiB maximum: small enough that an edit costs a few
    /// kilobytes, large enough that a reference (about 19 bytes) saves 99.5 % of a chunk.
    pub const DEFAULT: ChunkParams = ChunkParams::with_average(4096);

    /// Minimum a quarter and maximum four times `average`.
    pub const fn with_average(average: u32) -> ChunkParams {
        ChunkParams {
            min: average / 4,
            average,
            max: average * 4,
        }
    }
}

impl Default for ChunkParams {
    fn default() -> Self {
        ChunkParams::DEFAULT
    }
}

impl Chunker {
    /// `params` must be within FastCDC's limits (the config validates the average).
    pub fn new(params: ChunkParams) -> Chunker {
        Chunker {
            params,
            pending: Vec::new(),
        }
    }

    /// Bytes held back waiting for their chunk's end.
    #[cfg(test)]
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Appends `input` and returns the bytes now decided, with their chunks (offsets into the
    /// returned buffer). Unless `flush`, a final chunk that ends only because the input ends is
    /// held back; with `flush` every byte is returned.
    pub fn push(&mut self, input: &[u8], flush: bool) -> (Vec<u8>, Vec<Chunk>) {
        let mut data = std::mem::take(&mut self.pending);
        data.extend_from_slice(input);
        let mut chunks = Vec::with_capacity(data.len() / self.params.average as usize + 1);
        let mut decided = 0;
        for found in FastCDC::new(&data, self.params.min, self.params.average, self.params.max) {
            let ends_input = found.offset + found.length == data.len();
            if ends_input && !flush && found.length < self.params.max as usize {
                break;
            }
            chunks.push(Chunk {
                offset: found.offset,
                len: found.length,
                id: ChunkId::of(&data[found.offset..found.offset + found.length]),
            });
            decided = found.offset + found.length;
        }
        self.pending = data.split_off(decided);
        (data, chunks)
    }
}

impl Sized64 for u32 {
    fn size(&self) -> u64 {
        u64::from(*self)
    }
}

impl Sized64 for bytes::Bytes {
    fn size(&self) -> u64 {
        self.len() as u64
    }
}

impl<V: Sized64> ChunkStore<V> {
    pub fn new(budget: u64) -> ChunkStore<V> {
        ChunkStore {
            budget,
            total: 0,
            map: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    /// Bytes of the chunks held.
    pub fn total(&self) -> u64 {
        self.total
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn contains(&self, id: &ChunkId) -> bool {
        self.map.contains_key(id)
    }

    pub fn get(&self, id: &ChunkId) -> Option<&V> {
        self.map.get(id)
    }

    /// Inserts a new chunk and evicts the oldest until within the budget. Returns whether it
    /// was new. A chunk larger than the whole budget is not kept (but still counts as new, so
    /// that both ends agree).
    pub fn insert(&mut self, id: ChunkId, value: V) -> bool {
        if self.map.contains_key(&id) {
            return false;
        }
        let size = value.size();
        if size > self.budget {
            return true;
        }
        self.total += size;
        self.map.insert(id, value);
        self.order.push_back(id);
        while self.total > self.budget {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            if let Some(evicted) = self.map.remove(&oldest) {
                self.total -= evicted.size();
            }
        }
        true
    }

    /// Sets a new budget (evicting if it shrank): for a mirror whose budget comes from the peer.
    pub fn set_budget(&mut self, budget: u64) {
        self.budget = budget;
        while self.total > self.budget {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            if let Some(evicted) = self.map.remove(&oldest) {
                self.total -= evicted.size();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use rand::{RngCore, SeedableRng, rngs::SmallRng};

    use super::*;

    fn random(len: usize, seed: u64) -> Vec<u8> {
        let mut data = vec![0u8; len];
        SmallRng::seed_from_u64(seed).fill_bytes(&mut data);
        data
    }

    fn chunk_all(data: &[u8], pieces: &[usize]) -> Vec<(usize, ChunkId)> {
        let mut chunker = Chunker::new(ChunkParams::DEFAULT);
        let mut out = Vec::new();
        let mut start = 0;
        for (index, &piece) in pieces.iter().enumerate() {
            let end = (start + piece).min(data.len());
            let last = index == pieces.len() - 1;
            let (bytes, chunks) = chunker.push(&data[start..end], last);
            for chunk in chunks {
                assert_eq!(ChunkId::of(&bytes[chunk.offset..][..chunk.len]), chunk.id);
                out.push((chunk.len, chunk.id));
            }
            start = end;
        }
        assert_eq!(chunker.pending(), 0);
        out
    }

    #[test]
    fn chunk_boundaries_do_not_depend_on_how_the_input_arrives() {
        let data = random(300_000, 1);
        let whole = chunk_all(&data, &[data.len()]);
        let pieces = chunk_all(&data, &[1, 4095, 100_000, 7, 50_000, 145_897]);
        assert_eq!(whole, pieces);
        assert_eq!(whole.iter().map(|(len, _)| len).sum::<usize>(), data.len());
        let params = ChunkParams::DEFAULT;
        for (len, _) in &whole[..whole.len() - 1] {
            assert!((params.min as usize..=params.max as usize).contains(len));
        }
        let average = data.len() / whole.len();
        assert!((2048..8192).contains(&average), "average chunk {average}");
    }

    #[test]
    fn an_edit_changes_only_nearby_chunks() {
        let data = random(1 << 20, 2);
        let mut edited = data.clone();
        edited.splice(
            500_000..500_010,
            b"an insertion longer than the removal".iter().copied(),
        );
        let before: std::collections::HashSet<ChunkId> = chunk_all(&data, &[data.len()])
            .into_iter()
            .map(|(_, id)| id)
            .collect();
        let after = chunk_all(&edited, &[edited.len()]);
        let new_bytes: usize = after
            .iter()
            .filter(|(_, id)| !before.contains(id))
            .map(|(len, _)| len)
            .sum();
        assert!(
            new_bytes > 0 && new_bytes <= 3 * 16384,
            "{new_bytes} new bytes"
        );
    }

    #[test]
    fn without_flush_a_short_input_is_held_back() {
        let mut chunker = Chunker::new(ChunkParams::DEFAULT);
        let (bytes, chunks) = chunker.push(b"short", false);
        assert!(bytes.is_empty() && chunks.is_empty());
        assert_eq!(chunker.pending(), 5);
        let (bytes, chunks) = chunker.push(b"", true);
        assert_eq!(bytes, b"short");
        assert_eq!(chunks.len(), 1);
    }

    #[test]
    fn stores_fed_the_same_insertions_agree() {
        let mut store: ChunkStore<Bytes> = ChunkStore::new(10_000);
        let mut mirror: ChunkStore<u32> = ChunkStore::new(10_000);
        for round in 0..200u64 {
            let chunk = random(100 + (round as usize * 37) % 900, round % 60);
            let id = ChunkId::of(&chunk);
            let len = chunk.len() as u32;
            assert_eq!(store.insert(id, Bytes::from(chunk)), mirror.insert(id, len));
            assert!(store.total() <= 10_000);
            assert_eq!(store.total(), mirror.total());
            assert_eq!(store.len(), mirror.len());
        }
        for (id, value) in &store.map {
            assert_eq!(mirror.get(id), Some(&(value.len() as u32)));
        }
    }

    #[test]
    fn store_evicts_oldest_first_and_never_refreshes() {
        let mut store: ChunkStore<u32> = ChunkStore::new(300);
        let ids: Vec<ChunkId> = (0..4u8).map(|n| ChunkId::of(&[n])).collect();
        assert!(store.insert(ids[0], 100));
        assert!(store.insert(ids[1], 100));
        assert!(!store.insert(ids[0], 100), "present: no change");
        assert!(store.insert(ids[2], 100));
        assert!(store.insert(ids[3], 100));
        assert!(!store.contains(&ids[0]), "the oldest went first");
        assert!(store.contains(&ids[1]) && store.contains(&ids[3]));
        assert!(
            store.insert(ChunkId::of(b"huge"), 1000),
            "new, but not kept"
        );
        assert_eq!(store.total(), 300);
        store.set_budget(100);
        assert_eq!(store.len(), 1);
        assert!(store.contains(&ids[3]));
    }
}
