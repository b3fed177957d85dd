//! HPACK, HTTP/2's header compression (RFC 7541), sans-IO: a [`Decoder`]
//! that hands each field of a header block to a closure without copying it,
//! and an [`Encoder`] that appends a block to a buffer. Each keeps one side of
//! a connection's dynamic table. Design: `docs/design/http2.md` ("weir's own
//! HPACK").
//!
//! HPACK carries any octets: the HTTP/2 rules on fields (lower-case names,
//! pseudo-header fields first, no connection-specific fields) and the limit
//! on a header list's size are the caller's, who sees every field go by. A
//! decoded field borrows from the block, the table or the decoder's scratch
//! buffer, so a block of one-byte references to a large entry costs the
//! decoder nothing; a caller that collects fields must count them
//! (RFC 7541 §7.3) and stop collecting, not stop decoding, past its limit:
//! every block must be decoded whole to keep the table in step.
//!
//! ```
//! use weir_http::hpack::{Decoder, Encoder, Indexing};
//! let mut out = Vec::new();
//! let mut encoder = Encoder::new();
//! let mut block = encoder.block(&mut out);
//! block.field(b":status", b"200", Indexing::Index);
//! block.field(b"server", b"weir", Indexing::Index);
//! let mut fields = Vec::new();
//! Decoder::new()
//!     .decode(&out, |field| fields.push((field.name.to_vec(), field.value.to_vec())))
//!     .unwrap();
//! assert_eq!(fields[1], (b"server".to_vec(), b"weir".to_vec()));
//! ```

mod decode;
mod encode;
mod huffman;
mod table;
#[cfg(test)]
mod tests;

use std::fmt;

pub use decode::{Decoder, Field};
pub use encode::{Block, Encoder, Indexing};

/// The dynamic table's size before SETTINGS say otherwise (RFC 9113 §6.5.2).
pub const DEFAULT_TABLE_SIZE: usize = 4096;

/// Why a header block could not be decoded. Each is a connection error of
/// type COMPRESSION_ERROR (RFC 9113 §4.3): the table may be out of step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HpackError {
    /// The block ends inside a representation.
    Truncated,
    /// An integer longer than 32 bits.
    IntegerOverflow,
    /// Index 0, or past the end of the tables.
    Index,
    /// A Huffman-coded string with EOS in it or bad padding (RFC 7541 §5.2).
    Huffman,
    /// A table size update above the size weir allowed (RFC 7541 §6.3).
    TableSize,
    /// A table size update after a field, or a block without the update a
    /// lowered setting requires (RFC 7541 §4.2).
    TableSizeUpdate,
}

impl HpackError {
    /// A short, static explanation for the log line.
    pub fn reason(&self) -> &'static str {
        match self {
            HpackError::Truncated => "HPACK block ends inside a field",
            HpackError::IntegerOverflow => "HPACK integer too large",
            HpackError::Index => "HPACK index out of range",
            HpackError::Huffman => "invalid Huffman string",
            HpackError::TableSize => "HPACK table size above the setting",
            HpackError::TableSizeUpdate => "HPACK table size update out of place",
        }
    }
}

impl fmt::Display for HpackError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.reason())
    }
}

impl std::error::Error for HpackError {}

/// Reads an integer with an N-bit prefix (RFC 7541 §5.1) at `*pos`, moving
/// past it. Values above `u32::MAX` are refused: no HPACK quantity needs more.
fn decode_integer(input: &[u8], pos: &mut usize, prefix_bits: u32) -> Result<usize, HpackError> {
    let mask = u8::MAX >> (8 - prefix_bits);
    let first = *input.get(*pos).ok_or(HpackError::Truncated)? & mask;
    *pos += 1;
    if first < mask {
        return Ok(usize::from(first));
    }
    let mut value = u64::from(mask);
    let mut shift = 0;
    loop {
        let byte = *input.get(*pos).ok_or(HpackError::Truncated)?;
        *pos += 1;
        value += u64::from(byte & 0x7f) << shift;
        if value > u64::from(u32::MAX) {
            return Err(HpackError::IntegerOverflow);
        }
        if byte & 0x80 == 0 {
            return usize::try_from(value).map_err(|_| HpackError::IntegerOverflow);
        }
        shift += 7;
        if shift > 28 {
            return Err(HpackError::IntegerOverflow);
        }
    }
}

/// Appends `value` with an N-bit prefix; `flags` are the first byte's bits
/// above the prefix.
#[inline]
fn encode_integer(value: usize, prefix_bits: u32, flags: u8, out: &mut Vec<u8>) {
    let mask = usize::from(u8::MAX >> (8 - prefix_bits));
    if value < mask {
        out.push(flags | value as u8);
        return;
    }
    out.push(flags | mask as u8);
    let mut rest = value - mask;
    while rest >= 0x80 {
        out.push((rest as u8 & 0x7f) | 0x80);
        rest >>= 7;
    }
    out.push(rest as u8);
}
