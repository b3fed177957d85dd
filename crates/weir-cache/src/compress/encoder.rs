//! Streaming encoders for gzip, brotli and zstd. Each works chunk by chunk:
//! [`Compressor::push`] takes what arrived and returns what is ready, so memory
//! stays at the encoder's window and buffers whatever the body's size, and the
//! pipeline's backpressure applies unchanged.
//!
//! Memory per encoder at the defaults: gzip ≈ 270 KiB (zlib, 32 KiB window),
//! brotli ≈ 1–3 MiB (1 MiB window), zstd ≈ 1–2 MiB (level 3, 1 MiB window).

use std::io::{self, Write};

use bytes::Bytes;
use flate2::Compression;
use flate2::write::GzEncoder;
use weir_observe::Counter;

use super::Coding;

/// Compression level per algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Levels {
    /// 1–9.
    pub gzip: u32,
    /// 0–11.
    pub brotli: u32,
    /// 1–19.
    pub zstd: i32,
}

impl Default for Levels {
    /// Levels for on-the-fly compression: good ratios at a few hundred MB/s
    /// or more per core (see `bench/codecs`).
    fn default() -> Levels {
        Levels {
            gzip: 6,
            brotli: 4,
            zstd: 3,
        }
    }
}

/// log2 of the brotli and zstd windows: 1 MiB.
const WINDOW_LOG: u32 = 20;

/// The first brotli and zstd levels counted as slow ([`Compressor::is_slow`]).
const SLOW_BROTLI: u32 = 10;
const SLOW_ZSTD: i32 = 16;

/// One body being compressed.
pub struct Compressor {
    coding: Coding,
    /// A level that costs far more CPU per byte than the defaults ([`Compressor::is_slow`]).
    slow: bool,
    inner: Inner,
    /// Bytes in and out, counted as they pass.
    counters: Option<(Counter, Counter)>,
}

enum Inner {
    Gzip(GzEncoder<Vec<u8>>),
    Brotli(Box<brotli::CompressorWriter<Vec<u8>>>),
    Zstd(zstd::stream::write::Encoder<'static, Vec<u8>>),
}

impl std::fmt::Debug for Compressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compressor")
            .field("coding", &self.coding)
            .finish_non_exhaustive()
    }
}

impl Compressor {
    /// An encoder for `coding` (`None` for identity). `size` is the input's
    /// length when known (a declared `Content-Length`): brotli and zstd then
    /// size their windows and tables to it, which makes small bodies much
    /// cheaper; the input must then be exactly that long. `counters` are the
    /// bytes-in and bytes-out counters of this algorithm.
    pub fn new(
        coding: Coding,
        levels: Levels,
        size: Option<u64>,
        counters: Option<(Counter, Counter)>,
    ) -> io::Result<Option<Compressor>> {
        // The smallest window holding the whole input, within 2^10..=2^20.
        let window_log = size.map_or(WINDOW_LOG, |size| {
            (u64::BITS - size.max(1).saturating_sub(1).leading_zeros()).clamp(10, WINDOW_LOG)
        });
        let inner = match coding {
            Coding::Identity => return Ok(None),
            Coding::Gzip => Inner::Gzip(GzEncoder::new(
                Vec::new(),
                Compression::new(levels.gzip.min(9)),
            )),
            Coding::Brotli => {
                let mut params = brotli::enc::BrotliEncoderParams {
                    quality: levels.brotli.min(11) as i32,
                    lgwin: window_log as i32,
                    size_hint: size.map_or(0, |size| usize::try_from(size).unwrap_or(0)),
                    ..brotli::enc::BrotliEncoderParams::default()
                };
                params.mode = brotli::enc::backward_references::BrotliEncoderMode::BROTLI_MODE_TEXT;
                Inner::Brotli(Box::new(brotli::CompressorWriter::with_params(
                    Vec::new(),
                    16 * 1024,
                    &params,
                )))
            }
            Coding::Zstd => {
                let mut encoder = zstd::stream::write::Encoder::new(Vec::new(), levels.zstd)?;
                encoder.window_log(window_log)?;
                if size.is_some() {
                    encoder.set_pledged_src_size(size)?;
                }
                Inner::Zstd(encoder)
            }
        };
        let slow = match coding {
            Coding::Brotli => levels.brotli >= SLOW_BROTLI,
            Coding::Zstd => levels.zstd >= SLOW_ZSTD,
            Coding::Gzip | Coding::Identity => false,
        };
        Ok(Some(Compressor {
            coding,
            slow,
            inner,
            counters,
        }))
    }

    /// The coding this compressor produces.
    pub fn coding(&self) -> Coding {
        self.coding
    }

    /// Whether its level is one of the slow ones (brotli 10 and 11, zstd 16 and up: a
    /// megabyte or two a second), whose work on a large piece would hold the thread
    /// that does it for seconds; the caller runs it where that holds no one else up.
    pub fn is_slow(&self) -> bool {
        self.slow
    }

    /// Compresses `input`; returns the output ready so far (possibly empty).
    pub fn push(&mut self, input: &[u8]) -> io::Result<Bytes> {
        match &mut self.inner {
            Inner::Gzip(encoder) => encoder.write_all(input)?,
            Inner::Brotli(encoder) => encoder.write_all(input)?,
            Inner::Zstd(encoder) => encoder.write_all(input)?,
        }
        if let Some((bytes_in, _)) = &self.counters {
            bytes_in.inc_by(input.len() as u64);
        }
        Ok(self.take())
    }

    /// Makes everything pushed so far decodable by the client (for bodies
    /// that pause, such as event streams); costs some ratio.
    pub fn flush(&mut self) -> io::Result<Bytes> {
        match &mut self.inner {
            Inner::Gzip(encoder) => encoder.flush()?,
            Inner::Brotli(encoder) => encoder.flush()?,
            Inner::Zstd(encoder) => encoder.flush()?,
        }
        Ok(self.take())
    }

    /// Ends the stream; returns the last output.
    pub fn finish(mut self) -> io::Result<Bytes> {
        let rest = match std::mem::replace(
            &mut self.inner,
            Inner::Gzip(GzEncoder::new(Vec::new(), Compression::none())),
        ) {
            Inner::Gzip(encoder) => encoder.finish()?,
            Inner::Brotli(encoder) => encoder.into_inner(),
            Inner::Zstd(encoder) => encoder.finish()?,
        };
        if let Some((_, bytes_out)) = &self.counters {
            bytes_out.inc_by(rest.len() as u64);
        }
        Ok(Bytes::from(rest))
    }

    fn take(&mut self) -> Bytes {
        let buffer = match &mut self.inner {
            Inner::Gzip(encoder) => encoder.get_mut(),
            Inner::Brotli(encoder) => encoder.get_mut(),
            Inner::Zstd(encoder) => encoder.get_mut(),
        };
        let out = std::mem::take(buffer);
        if let Some((_, bytes_out)) = &self.counters {
            bytes_out.inc_by(out.len() as u64);
        }
        Bytes::from(out)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    fn sample() -> Vec<u8> {
        (0..20_000)
            .map(|i| format!("line {i}: the quick brown fox jumps over the lazy dog\n"))
            .collect::<String>()
            .into_bytes()
    }

    fn decode(coding: Coding, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        match coding {
            Coding::Gzip => {
                flate2::read::GzDecoder::new(data)
                    .read_to_end(&mut out)
                    .unwrap();
            }
            Coding::Brotli => {
                brotli::Decompressor::new(data, 4096)
                    .read_to_end(&mut out)
                    .unwrap();
            }
            Coding::Zstd => out = zstd::decode_all(data).unwrap(),
            Coding::Identity => out = data.to_vec(),
        }
        out
    }

    #[test]
    fn every_coding_round_trips_chunk_by_chunk() {
        let input = sample();
        let sizes = [None, Some(input.len() as u64)];
        for (coding, size) in Coding::COMPRESSED
            .into_iter()
            .flat_map(|c| sizes.map(|s| (c, s)))
        {
            let bytes_in = Counter::default();
            let bytes_out = Counter::default();
            let mut compressor = Compressor::new(
                coding,
                Levels::default(),
                size,
                Some((bytes_in.clone(), bytes_out.clone())),
            )
            .unwrap()
            .unwrap();
            let mut output = Vec::new();
            let mut largest = 0;
            for chunk in input.chunks(7_000) {
                let out = compressor.push(chunk).unwrap();
                largest = largest.max(out.len());
                output.extend_from_slice(&out);
            }
            output.extend_from_slice(&compressor.finish().unwrap());
            assert_eq!(decode(coding, &output), input, "{coding:?}");
            assert!(
                output.len() * 5 < input.len(),
                "{coding:?} compressed {} to {}",
                input.len(),
                output.len()
            );
            assert_eq!(bytes_in.get(), input.len() as u64);
            assert_eq!(bytes_out.get(), output.len() as u64);
            // Output leaves with the input, not all at the end.
            assert!(largest < output.len(), "{coding:?} held everything back");
        }
    }

    #[test]
    fn flush_makes_a_prefix_decodable() {
        for coding in [Coding::Gzip, Coding::Zstd, Coding::Brotli] {
            let mut compressor = Compressor::new(coding, Levels::default(), None, None)
                .unwrap()
                .unwrap();
            let mut output = compressor.push(b"data: hello\n\n").unwrap().to_vec();
            output.extend_from_slice(&compressor.flush().unwrap());
            let mut partial = Vec::new();
            match coding {
                Coding::Gzip => {
                    let mut decoder = flate2::read::GzDecoder::new(&output[..]);
                    let mut buffer = [0u8; 64];
                    let n = decoder.read(&mut buffer).unwrap();
                    partial.extend_from_slice(&buffer[..n]);
                }
                Coding::Zstd => {
                    let mut decoder = zstd::stream::read::Decoder::new(&output[..]).unwrap();
                    let mut buffer = [0u8; 64];
                    let n = decoder.read(&mut buffer).unwrap();
                    partial.extend_from_slice(&buffer[..n]);
                }
                _ => {
                    let mut decoder = brotli::Decompressor::new(&output[..], 4096);
                    let mut buffer = [0u8; 64];
                    let n = decoder.read(&mut buffer).unwrap();
                    partial.extend_from_slice(&buffer[..n]);
                }
            }
            assert_eq!(partial, b"data: hello\n\n", "{coding:?}");
        }
    }

    #[test]
    fn identity_needs_no_encoder() {
        assert!(
            Compressor::new(Coding::Identity, Levels::default(), None, None)
                .unwrap()
                .is_none()
        );
    }
}
