//! The tunnel's wire format, sans-IO: varints, the record framing shared by flow streams and
//! the control stream, a flow's open header, and the data blocks of a flow.
//!
//! Every parser here takes untrusted bytes from the peer and returns an error, never panics.
//! The layout is written down in `docs/design/tunnel.md`.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::sans_io::dedup::ChunkId;

/// The ALPN protocol of the tunnel, which is also its wire version.
pub const ALPN: &[u8] = b"weir-tunnel/1";

/// The largest record (a block or a control message) either side accepts.
pub const MAX_RECORD: usize = 4 << 20;

/// The largest total of literal bytes one block carries (before compression).
pub const MAX_BLOCK_PAYLOAD: usize = 256 << 10;

/// The most items one block carries (so a block of references stays small and is
/// acknowledged often).
pub const MAX_BLOCK_ITEMS: usize = 1024;

/// The longest service name an open header may carry.
pub const MAX_SERVICE_NAME: usize = 255;

/// Why bytes from the peer are not a valid record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The bytes end inside the named field.
    #[error("truncated {0}")]
    Truncated(&'static str),
    /// A varint runs past its longest encoding.
    #[error("varint longer than 10 bytes")]
    VarintTooLong,
    /// A record's declared length is over `MAX_RECORD`.
    #[error("record of {0} bytes is over the {MAX_RECORD}-byte limit")]
    RecordTooLarge(u64),
    /// A field's value is out of range or inconsistent.
    #[error("invalid {what}: {detail}")]
    Invalid {
        /// The field that is wrong.
        what: &'static str,
        /// What is wrong with it.
        detail: String,
    },
}

/// One item of a data block, in stream order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Item {
    /// `len` literal bytes of the payload that the receiver keeps in its chunk store.
    Stored {
        /// Payload bytes the item takes.
        len: u32,
    },
    /// `len` literal bytes of the payload that are not kept (short or undeduplicated data).
    Plain {
        /// Payload bytes the item takes.
        len: u32,
    },
    /// A chunk of `len` bytes the receiver has in its store under `id`.
    Ref {
        /// The chunk's length in bytes.
        len: u32,
        /// The chunk's content hash, as both stores key it.
        id: ChunkId,
    },
}

/// A data block as it travels: items, and their literal bytes, zstd-compressed or not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// The block's items, in stream order (at most `MAX_BLOCK_ITEMS`).
    pub items: Vec<Item>,
    /// The literal bytes of the items, in order, possibly compressed.
    pub payload: Bytes,
    /// `Some(raw length)` when `payload` is zstd-compressed.
    pub compressed: Option<u32>,
}

const KIND_STORED: u64 = 0;
const KIND_PLAIN: u64 = 1;
const KIND_REF: u64 = 2;
const FLAG_COMPRESSED: u8 = 1;

/// Appends `value` as an unsigned LEB128 varint.
pub fn put_varint(out: &mut BytesMut, mut value: u64) {
    while value >= 0x80 {
        out.put_u8((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.put_u8(value as u8);
}

/// Reads an unsigned LEB128 varint from the front of `input`.
pub fn get_varint(input: &mut impl Buf, what: &'static str) -> Result<u64, WireError> {
    let mut value = 0u64;
    for shift in (0..70).step_by(7) {
        if !input.has_remaining() {
            return Err(WireError::Truncated(what));
        }
        let byte = input.get_u8();
        if shift == 63 && byte > 1 {
            return Err(WireError::VarintTooLong);
        }
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(WireError::VarintTooLong)
}

/// Appends a record: its length as a varint, then `body`.
pub fn put_record(out: &mut BytesMut, body: &[u8]) {
    put_varint(out, body.len() as u64);
    out.extend_from_slice(body);
}

/// Takes one whole record from the front of `buffer`, if it holds one.
///
/// `Ok(None)` means more bytes are needed; an error means the peer sent a record over
/// [`MAX_RECORD`] or a broken length.
pub fn take_record(buffer: &mut BytesMut) -> Result<Option<Bytes>, WireError> {
    let mut peek = &buffer[..];
    let length = match get_varint(&mut peek, "record length") {
        Ok(length) => length,
        Err(WireError::Truncated(_)) => return Ok(None),
        Err(error) => return Err(error),
    };
    if length > MAX_RECORD as u64 {
        return Err(WireError::RecordTooLarge(length));
    }
    let header = buffer.len() - peek.len();
    let total = header + length as usize;
    if buffer.len() < total {
        return Ok(None);
    }
    buffer.advance(header);
    Ok(Some(buffer.split_to(length as usize).freeze()))
}

/// The header that opens a flow stream (near side to far side): the service to connect to.
pub fn encode_open(service: &str) -> BytesMut {
    let mut body = BytesMut::with_capacity(service.len() + 2);
    put_varint(&mut body, service.len() as u64);
    body.extend_from_slice(service.as_bytes());
    let mut out = BytesMut::with_capacity(body.len() + 2);
    put_record(&mut out, &body);
    out
}

/// Parses an open header's record.
pub fn decode_open(mut record: Bytes) -> Result<String, WireError> {
    let length = get_varint(&mut record, "service name length")? as usize;
    if length == 0 || length > MAX_SERVICE_NAME || record.remaining() != length {
        return Err(WireError::Invalid {
            what: "open header",
            detail: format!(
                "service name of {length} bytes in a {}-byte record",
                record.len()
            ),
        });
    }
    String::from_utf8(record.to_vec()).map_err(|_| WireError::Invalid {
        what: "open header",
        detail: "service name is not UTF-8".into(),
    })
}

impl Block {
    /// The total of literal bytes once the payload is decompressed.
    pub fn raw_payload_len(&self) -> usize {
        self.compressed
            .map_or(self.payload.len(), |raw| raw as usize)
    }

    /// Appends the block as one record.
    pub fn encode(&self, out: &mut BytesMut) {
        // The head (flags, items, raw length) is small; the payload is written once, straight
        // after the record's length, not copied through a body buffer.
        let mut head = BytesMut::with_capacity(self.items.len() * 20 + 16);
        head.put_u8(if self.compressed.is_some() {
            FLAG_COMPRESSED
        } else {
            0
        });
        put_varint(&mut head, self.items.len() as u64);
        for item in &self.items {
            match *item {
                Item::Stored { len } => put_varint(&mut head, u64::from(len) << 2 | KIND_STORED),
                Item::Plain { len } => put_varint(&mut head, u64::from(len) << 2 | KIND_PLAIN),
                Item::Ref { len, id } => {
                    put_varint(&mut head, u64::from(len) << 2 | KIND_REF);
                    head.extend_from_slice(id.as_bytes());
                }
            }
        }
        if let Some(raw) = self.compressed {
            put_varint(&mut head, u64::from(raw));
        }
        let length = head.len() + self.payload.len();
        out.reserve(length + 10);
        put_varint(out, length as u64);
        out.extend_from_slice(&head);
        out.extend_from_slice(&self.payload);
    }

    /// Parses a block record and checks that its items and payload agree.
    pub fn decode(mut record: Bytes, max_chunk: u32) -> Result<Block, WireError> {
        if !record.has_remaining() {
            return Err(WireError::Truncated("block flags"));
        }
        let flags = record.get_u8();
        if flags & !FLAG_COMPRESSED != 0 {
            return Err(invalid_block(format!("unknown flags {flags:#x}")));
        }
        let count = get_varint(&mut record, "item count")?;
        if count > MAX_BLOCK_ITEMS as u64 {
            return Err(invalid_block(format!("{count} items")));
        }
        let mut items = Vec::with_capacity(count as usize);
        let mut literal = 0usize;
        for _ in 0..count {
            let tag = get_varint(&mut record, "item")?;
            let len = u32::try_from(tag >> 2)
                .map_err(|_| invalid_block(format!("item length {}", tag >> 2)))?;
            match tag & 3 {
                KIND_STORED => {
                    literal += len as usize;
                    items.push(Item::Stored { len });
                }
                KIND_PLAIN => {
                    literal += len as usize;
                    items.push(Item::Plain { len });
                }
                KIND_REF => {
                    if len == 0 || len > max_chunk {
                        return Err(invalid_block(format!("reference to a {len}-byte chunk")));
                    }
                    if record.remaining() < ChunkId::LEN {
                        return Err(WireError::Truncated("chunk id"));
                    }
                    let id = ChunkId::from_slice(&record.split_to(ChunkId::LEN));
                    items.push(Item::Ref { len, id });
                }
                kind => return Err(invalid_block(format!("unknown item kind {kind}"))),
            }
        }
        let compressed = if flags & FLAG_COMPRESSED != 0 {
            let raw = get_varint(&mut record, "raw payload length")?;
            Some(u32::try_from(raw).map_err(|_| invalid_block(format!("raw length {raw}")))?)
        } else {
            None
        };
        let raw = compressed.map_or(record.len(), |raw| raw as usize);
        if raw != literal {
            return Err(invalid_block(format!(
                "items hold {literal} literal bytes, the payload {raw}"
            )));
        }
        if raw > MAX_BLOCK_PAYLOAD {
            return Err(invalid_block(format!(
                "{raw} literal bytes, more than a block carries ({MAX_BLOCK_PAYLOAD})"
            )));
        }
        Ok(Block {
            items,
            payload: record,
            compressed,
        })
    }
}

fn invalid_block(detail: String) -> WireError {
    WireError::Invalid {
        what: "block",
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_at_the_edges() {
        for value in [
            0,
            1,
            127,
            128,
            16_383,
            16_384,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            let mut out = BytesMut::new();
            put_varint(&mut out, value);
            let mut input = out.freeze();
            assert_eq!(get_varint(&mut input, "v"), Ok(value));
            assert!(input.is_empty());
        }
    }

    #[test]
    fn broken_varints_are_errors() {
        let mut truncated = Bytes::from_static(&[0x80, 0x80]);
        assert_eq!(
            get_varint(&mut truncated, "v"),
            Err(WireError::Truncated("v"))
        );
        let mut long = Bytes::from(vec![0xff; 11]);
        assert_eq!(get_varint(&mut long, "v"), Err(WireError::VarintTooLong));
        let mut overflow = Bytes::from(vec![
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02,
        ]);
        assert_eq!(
            get_varint(&mut overflow, "v"),
            Err(WireError::VarintTooLong)
        );
    }

    #[test]
    fn records_wait_for_their_last_byte() {
        let mut out = BytesMut::new();
        put_record(&mut out, b"hello");
        put_record(&mut out, b"");
        let whole = out.clone();
        let mut partial = BytesMut::from(&whole[..4]);
        assert_eq!(take_record(&mut partial), Ok(None));
        assert_eq!(
            partial.len(),
            4,
            "nothing is consumed before a record is whole"
        );
        let mut buffer = whole;
        assert_eq!(
            take_record(&mut buffer),
            Ok(Some(Bytes::from_static(b"hello")))
        );
        assert_eq!(take_record(&mut buffer), Ok(Some(Bytes::new())));
        assert_eq!(take_record(&mut buffer), Ok(None));
    }

    #[test]
    fn oversized_records_are_refused_before_buffering() {
        let mut out = BytesMut::new();
        put_varint(&mut out, MAX_RECORD as u64 + 1);
        assert_eq!(
            take_record(&mut out),
            Err(WireError::RecordTooLarge(MAX_RECORD as u64 + 1))
        );
    }

    #[test]
    fn open_header_round_trip_and_bad_names() {
        let mut encoded = encode_open("files");
        let record = take_record(&mut encoded).unwrap().unwrap();
        assert_eq!(decode_open(record).unwrap(), "files");
        assert!(decode_open(Bytes::from_static(&[0])).is_err());
        assert!(decode_open(Bytes::from_static(&[5, b'a'])).is_err());
        assert!(decode_open(Bytes::from_static(&[2, 0xff, 0xfe])).is_err());
    }

    #[test]
    fn blocks_round_trip() {
        let id = ChunkId::of(b"chunk");
        let block = Block {
            items: vec![
                Item::Stored { len: 3 },
                Item::Ref { len: 5, id },
                Item::Plain { len: 2 },
            ],
            payload: Bytes::from_static(b"abcde"),
            compressed: None,
        };
        let mut out = BytesMut::new();
        block.encode(&mut out);
        let record = take_record(&mut out).unwrap().unwrap();
        assert_eq!(Block::decode(record, 1 << 16).unwrap(), block);

        let compressed = Block {
            items: vec![Item::Plain { len: 100 }],
            payload: Bytes::from_static(b"xyz"),
            compressed: Some(100),
        };
        let mut out = BytesMut::new();
        compressed.encode(&mut out);
        let record = take_record(&mut out).unwrap().unwrap();
        assert_eq!(Block::decode(record, 1 << 16).unwrap(), compressed);
    }

    #[test]
    fn inconsistent_blocks_are_refused() {
        // Items claim 4 literal bytes, the payload has 5.
        let block = Block {
            items: vec![Item::Plain { len: 4 }],
            payload: Bytes::from_static(b"abcde"),
            compressed: None,
        };
        let mut out = BytesMut::new();
        block.encode(&mut out);
        let record = take_record(&mut out).unwrap().unwrap();
        assert!(Block::decode(record, 1 << 16).is_err());

        // A reference longer than any chunk, an unknown kind, unknown flags, a cut id.
        for body in [
            vec![0u8, 1, (70_000u32 << 2 | 2) as u8],
            vec![0, 1, 3],
            vec![0x80, 0],
            vec![0, 1, (4 << 2 | 2) as u8, 1, 2],
        ] {
            assert!(Block::decode(Bytes::from(body), 1 << 16).is_err());
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_parsers() {
        // A cheap deterministic fuzz: every prefix and many byte patterns.
        let mut state = 0x1234_5678_u32;
        for length in 0..200 {
            let bytes: Vec<u8> = (0..length)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 17;
                    state ^= state << 5;
                    state as u8
                })
                .collect();
            let _ = Block::decode(Bytes::from(bytes.clone()), 1 << 16);
            let _ = decode_open(Bytes::from(bytes.clone()));
            let _ = take_record(&mut BytesMut::from(&bytes[..]));
        }
    }
}
