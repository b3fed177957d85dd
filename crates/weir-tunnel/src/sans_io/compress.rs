//! zstd compression of block payloads, and the policy that stops trying on incompressible
//! data (sans-IO: the policy sees only sizes).
//!
//! A block is sent compressed only when that saves at least [`MIN_SAVING`] of it. After a
//! block that did not compress, the next one is sent as is without trying, then two, four …
//! up to [`MAX_SKIP`]: a flow of random or already-compressed bytes costs one attempt in 64
//! blocks, and a flow that turns compressible is noticed within 64 blocks (16 MiB).

/// Below this many bytes a payload is not worth a zstd frame.
pub const MIN_COMPRESS: usize = 64;

/// The share of a payload compression must save to be used.
pub const MIN_SAVING: f64 = 0.03;

/// The most blocks skipped after repeated failures.
pub const MAX_SKIP: u32 = 64;

/// A reusable zstd compression context at one level, with its output buffer (a fresh
/// buffer per block cost a large allocation and its page faults every time).
pub struct Compression {
    context: Option<zstd::bulk::Compressor<'static>>,
    output: Vec<u8>,
}

/// Decides whether to try compressing the next block.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompressionPolicy {
    /// Blocks still to send without trying.
    skip: u32,
    /// How many to skip after the next failure (0: none has failed lately).
    backoff: u32,
}

impl Compression {
    /// A context at `level`; if zstd cannot make one, compression is simply not used.
    pub fn new(level: i32) -> Compression {
        Compression {
            context: zstd::bulk::Compressor::new(level).ok(),
            output: Vec::new(),
        }
    }

    /// The compressed bytes (valid until the next call), or `None` when zstd fails.
    pub fn compress(&mut self, data: &[u8]) -> Option<&[u8]> {
        let context = self.context.as_mut()?;
        self.output.clear();
        self.output
            .reserve(zstd::zstd_safe::compress_bound(data.len()));
        context.compress_to_buffer(data, &mut self.output).ok()?;
        Some(&self.output)
    }
}

impl std::fmt::Debug for Compression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compression")
            .field("available", &self.context.is_some())
            .finish()
    }
}

impl CompressionPolicy {
    /// Whether to try compressing a payload of `len` bytes (counts a skipped block).
    pub fn should_try(&mut self, len: usize) -> bool {
        if len < MIN_COMPRESS {
            return false;
        }
        if self.skip > 0 {
            self.skip -= 1;
            return false;
        }
        true
    }

    /// Records an attempt; returns whether the compressed form is worth sending.
    pub fn record(&mut self, raw: usize, compressed: usize) -> bool {
        let worth = (compressed as f64) <= raw as f64 * (1.0 - MIN_SAVING);
        if worth {
            self.backoff = 0;
        } else {
            self.backoff = (self.backoff * 2).clamp(1, MAX_SKIP);
            self.skip = self.backoff;
        }
        worth
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_back_off_exponentially_up_to_the_cap() {
        let mut policy = CompressionPolicy::default();
        let mut tried = Vec::new();
        for _ in 0..300 {
            let attempt = policy.should_try(1000);
            tried.push(attempt);
            if attempt {
                assert!(!policy.record(1000, 1000));
            }
        }
        let attempts: Vec<usize> = tried
            .iter()
            .enumerate()
            .filter_map(|(index, &tried)| tried.then_some(index))
            .collect();
        // Skips of 1, 2, 4, 8, 16, 32, 64, 64 …
        assert_eq!(&attempts[..8], &[0, 2, 5, 10, 19, 36, 69, 134]);
        assert_eq!(attempts[8], 199);
    }

    #[test]
    fn a_success_resets_the_backoff() {
        let mut policy = CompressionPolicy::default();
        assert!(policy.should_try(1000));
        assert!(!policy.record(1000, 990));
        assert!(!policy.should_try(1000));
        assert!(policy.should_try(1000));
        assert!(policy.record(1000, 500));
        assert!(policy.should_try(1000));
        assert!(!policy.record(1000, 980));
        assert!(!policy.should_try(1000), "back to a skip of one");
        assert!(policy.should_try(1000));
    }

    #[test]
    fn tiny_payloads_are_never_tried() {
        let mut policy = CompressionPolicy::default();
        assert!(!policy.should_try(MIN_COMPRESS - 1));
        assert!(policy.should_try(MIN_COMPRESS));
    }

    #[test]
    fn compression_round_trips() {
        let data = b"abcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabc".repeat(100);
        let mut compression = Compression::new(1);
        let compressed = compression.compress(&data).unwrap();
        assert!(compressed.len() < data.len() / 10);
        let back = zstd::bulk::decompress(compressed, data.len()).unwrap();
        assert_eq!(back, data);
    }
}
