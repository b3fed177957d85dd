//! The FEC layer's frames, one per UDP datagram. A QUIC packet's first byte always has bit
//! 0x40 (the fixed bit; weir turns QUIC-bit greasing off) or 0x80 (long header) set, so any
//! datagram whose first byte is below 0x40 is a frame of this layer and anything else is a
//! bare QUIC packet. Frames (integers big-endian):
//!
//! ```text
//! data    0x01 | 0x02 (protected)   seq u32   QUIC datagram
//! repair  0x03   first u32   sources u8   repairs u8   index u8   shard (even, ≥ 4 bytes)
//! report  0x04   received u32   lost u32       (cumulative, wrapping)
//! ```
//!
//! A protected data datagram belongs to the block of the repair frames whose `first ..
//! first + sources` range holds its `seq`. A repair's shard is Reed-Solomon over the block's
//! source shards, each `len u16 | datagram | zero padding` to the shard size.

/// Bytes a data frame adds to a QUIC datagram.
pub const DATA_HEADER: usize = 5;
/// Bytes before a repair frame's shard.
pub const REPAIR_HEADER: usize = 8;
/// The most a frame adds to the longest QUIC datagram it carries or protects: a repair's
/// header, its shard's length prefix and the rounding to even. QUIC's packets must be this
/// much smaller than the path allows, or full-size blocks' repairs would not fit.
pub const MAX_OVERHEAD: usize = REPAIR_HEADER + 3;
/// The most sources and repairs a block may have.
pub const MAX_SOURCES: usize = 128;
/// The most repair shards a block may have.
pub const MAX_REPAIRS: usize = 64;
/// The largest UDP payload a source shard can describe.
pub const MAX_DATAGRAM: usize = 65_527;

const DATA: u8 = 0x01;
const DATA_PROTECTED: u8 = 0x02;
const REPAIR: u8 = 0x03;
const REPORT: u8 = 0x04;

/// One parsed datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    /// Not a frame: a QUIC packet sent without this layer's header.
    Bare(&'a [u8]),
    /// A QUIC datagram with its sequence number.
    Data {
        /// The data frame's sequence number, counting every data frame sent (wrapping).
        seq: u32,
        /// Whether a block of repair frames covers this datagram.
        protected: bool,
        /// The QUIC datagram carried.
        payload: &'a [u8],
    },
    /// One repair shard of a block.
    Repair {
        /// The block the shard repairs.
        block: BlockId,
        /// The shard's index among the block's repairs, from zero.
        index: u8,
        /// The Reed-Solomon shard (even length, at least 4 bytes).
        shard: &'a [u8],
    },
    /// The receiver's cumulative counts of data frames received and found missing.
    Report {
        /// Data frames received so far (wrapping).
        received: u32,
        /// Data frames found missing so far (wrapping).
        lost: u32,
    },
}

/// Which block a repair belongs to and its shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockId {
    /// Sequence number of the block's first source datagram.
    pub first: u32,
    /// How many source datagrams the block protects (at most `MAX_SOURCES`).
    pub sources: u8,
    /// How many repair shards the block has (at most `MAX_REPAIRS`).
    pub repairs: u8,
}

/// Why a datagram is not a valid frame (it is dropped and counted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The datagram has no bytes.
    #[error("empty datagram")]
    Empty,
    /// The first byte is below 0x40 but names no frame type.
    #[error("unknown frame type {0:#04x}")]
    UnknownType(u8),
    /// The datagram ends inside the frame's header.
    #[error("frame shorter than its header")]
    Truncated,
    /// The block's shape or the shard's size is out of range (no sources, too many, an index past
    /// the repairs, an odd or oversized shard).
    #[error("repair frame describes an impossible block")]
    BadBlock,
}

/// Parses one datagram.
pub fn parse(datagram: &[u8]) -> Result<Frame<'_>, FrameError> {
    let (&kind, rest) = datagram.split_first().ok_or(FrameError::Empty)?;
    if kind >= 0x40 {
        return Ok(Frame::Bare(datagram));
    }
    match kind {
        DATA | DATA_PROTECTED => {
            let (seq, payload) = split_u32(rest)?;
            if payload.is_empty() {
                return Err(FrameError::Truncated);
            }
            Ok(Frame::Data {
                seq,
                protected: kind == DATA_PROTECTED,
                payload,
            })
        }
        REPAIR => {
            let (first, rest) = split_u32(rest)?;
            let [sources, repairs, index, shard @ ..] = rest else {
                return Err(FrameError::Truncated);
            };
            let valid = (1..=MAX_SOURCES).contains(&usize::from(*sources))
                && (1..=MAX_REPAIRS).contains(&usize::from(*repairs))
                && index < repairs
                && shard.len() >= 4
                && shard.len() % 2 == 0
                && shard.len() <= MAX_DATAGRAM + 3;
            if !valid {
                return Err(FrameError::BadBlock);
            }
            Ok(Frame::Repair {
                block: BlockId {
                    first,
                    sources: *sources,
                    repairs: *repairs,
                },
                index: *index,
                shard,
            })
        }
        REPORT => {
            let (received, rest) = split_u32(rest)?;
            let (lost, _) = split_u32(rest)?;
            Ok(Frame::Report { received, lost })
        }
        other => Err(FrameError::UnknownType(other)),
    }
}

/// Appends a data frame holding `payload`.
pub fn write_data(out: &mut Vec<u8>, seq: u32, protected: bool, payload: &[u8]) {
    out.push(if protected { DATA_PROTECTED } else { DATA });
    out.extend_from_slice(&seq.to_be_bytes());
    out.extend_from_slice(payload);
}

/// A repair frame for `block`.
pub fn repair(block: BlockId, index: u8, shard: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(REPAIR_HEADER + shard.len());
    out.push(REPAIR);
    out.extend_from_slice(&block.first.to_be_bytes());
    out.extend_from_slice(&[block.sources, block.repairs, index]);
    out.extend_from_slice(shard);
    out
}

/// A report frame.
pub fn report(received: u32, lost: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(9);
    out.push(REPORT);
    out.extend_from_slice(&received.to_be_bytes());
    out.extend_from_slice(&lost.to_be_bytes());
    out
}

/// The shard size for datagrams of at most `longest` bytes: the length prefix, rounded up
/// to even (the Reed-Solomon library works on pairs of bytes).
pub fn shard_size(longest: usize) -> usize {
    (longest + 2).next_multiple_of(2).max(4)
}

/// Writes `datagram` as a source shard of `size` bytes into `shard`.
pub fn fill_shard(shard: &mut Vec<u8>, datagram: &[u8], size: usize) {
    shard.clear();
    // Callers never pass more than MAX_DATAGRAM bytes (UDP's limit), so it fits in u16.
    shard.extend_from_slice(&(datagram.len().min(MAX_DATAGRAM) as u16).to_be_bytes());
    shard.extend_from_slice(datagram);
    shard.resize(size, 0);
}

/// The datagram a recovered source shard holds, if its length prefix is consistent.
pub fn unshard(shard: &[u8]) -> Option<&[u8]> {
    let (length, rest) = shard.split_first_chunk::<2>()?;
    let length = usize::from(u16::from_be_bytes(*length));
    (length > 0).then_some(())?;
    rest.get(..length)
}

fn split_u32(bytes: &[u8]) -> Result<(u32, &[u8]), FrameError> {
    let (head, rest) = bytes
        .split_first_chunk::<4>()
        .ok_or(FrameError::Truncated)?;
    Ok((u32::from_be_bytes(*head), rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip() {
        let mut data = Vec::new();
        write_data(&mut data, 0xdead_beef, true, b"\x41quic");
        assert_eq!(data.len(), DATA_HEADER + 5);
        assert_eq!(
            parse(&data),
            Ok(Frame::Data {
                seq: 0xdead_beef,
                protected: true,
                payload: b"\x41quic"
            })
        );
        let block = BlockId {
            first: 7,
            sources: 32,
            repairs: 3,
        };
        let frame = repair(block, 2, &[1, 2, 3, 4]);
        assert_eq!(
            parse(&frame),
            Ok(Frame::Repair {
                block,
                index: 2,
                shard: &[1, 2, 3, 4]
            })
        );
        assert_eq!(
            parse(&report(10, 2)),
            Ok(Frame::Report {
                received: 10,
                lost: 2
            })
        );
        assert_eq!(parse(b"\x41abc"), Ok(Frame::Bare(b"\x41abc")));
        assert_eq!(parse(b"\xc0abc"), Ok(Frame::Bare(b"\xc0abc")));
    }

    #[test]
    fn bad_frames_are_refused() {
        assert_eq!(parse(b""), Err(FrameError::Empty));
        assert_eq!(parse(b"\x01\0\0"), Err(FrameError::Truncated));
        assert_eq!(parse(b"\x01\0\0\0\0"), Err(FrameError::Truncated));
        assert_eq!(parse(b"\x3f"), Err(FrameError::UnknownType(0x3f)));
        let block = BlockId {
            first: 0,
            sources: 4,
            repairs: 1,
        };
        // Index past the repairs, odd shard, zero sources.
        assert_eq!(parse(&repair(block, 1, &[0; 4])), Err(FrameError::BadBlock));
        assert_eq!(parse(&repair(block, 0, &[0; 5])), Err(FrameError::BadBlock));
        let empty = BlockId {
            sources: 0,
            ..block
        };
        assert_eq!(parse(&repair(empty, 0, &[0; 4])), Err(FrameError::BadBlock));
    }

    #[test]
    fn a_repair_is_at_most_max_overhead_longer_than_its_longest_source() {
        for longest in [1, 2, 1199, 1200, 1467] {
            let shard = vec![0; shard_size(longest)];
            let frame = repair(
                BlockId {
                    first: 0,
                    sources: 1,
                    repairs: 1,
                },
                0,
                &shard,
            );
            assert!(frame.len() <= longest + MAX_OVERHEAD, "{longest}");
        }
    }

    #[test]
    fn shards_keep_the_length() {
        let mut shard = Vec::new();
        fill_shard(&mut shard, b"hello", shard_size(9));
        assert_eq!(shard.len(), 12);
        assert_eq!(unshard(&shard), Some(&b"hello"[..]));
        assert_eq!(unshard(&[0, 9, 1, 2]), None);
        assert_eq!(unshard(&[0, 0, 1, 2]), None);
    }
}
