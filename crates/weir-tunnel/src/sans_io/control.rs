//! The control stream's messages, sans-IO: how the two ends keep their chunk stores in step.
//!
//! Each end is the encoder of the flows it sends and the decoder of the flows it receives, so
//! every message below travels in both directions of the one control stream (opened by the
//! near side when the connection starts):
//!
//! - `Hello`: first message each way; the sender's store budget for what it *receives*.
//! - `Inserted`: the decoder's new chunks in the order it stored them; the encoder applies
//!   them to its mirror in that order (see [`crate::sans_io::dedup`]).
//! - `Resolved`: the decoder has resolved the first `refs` references of a flow; the encoder
//!   may drop their pinned bytes.
//! - `Need`: a reference missed the decoder's store (it was evicted after the encoder last
//!   heard); the encoder answers with `Chunk` from its pins, or `Missing` if it has none.
//! - `Done`: the decoder finished a flow; the encoder drops everything it kept for it.

use bytes::{Buf, Bytes, BytesMut};

use crate::sans_io::dedup::ChunkId;
use crate::sans_io::wire::{WireError, get_varint, put_record, put_varint};

/// Most `Inserted` entries in one message.
pub const MAX_INSERTED: usize = 4096;

/// One control message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Control {
    /// The sender's store budget; first message each way.
    Hello {
        /// Bytes of chunks the sender keeps of what it receives; the peer sizes its mirror to it.
        store_budget: u64,
    },
    /// Chunks the decoder stored, in the order it stored them.
    Inserted {
        /// Each chunk's id and length in bytes (at most `MAX_INSERTED` entries).
        chunks: Vec<(ChunkId, u32)>,
    },
    /// The decoder has resolved a flow's first `refs` references.
    Resolved {
        /// The flow's QUIC stream id.
        stream: u64,
        /// How many of the flow's references, from its start, are resolved.
        refs: u64,
    },
    /// A reference missed the decoder's store; the encoder should send the chunk.
    Need {
        /// The flow's QUIC stream id.
        stream: u64,
        /// The reference's position among the flow's references, from zero.
        index: u64,
    },
    /// The encoder's answer to `Need`: the chunk's bytes from its pins.
    Chunk {
        /// The flow's QUIC stream id.
        stream: u64,
        /// The reference's position among the flow's references, from zero.
        index: u64,
        /// The chunk's content.
        bytes: Bytes,
    },
    /// The encoder's answer to `Need` when it no longer holds the chunk (the flow fails).
    Missing {
        /// The flow's QUIC stream id.
        stream: u64,
        /// The reference's position among the flow's references, from zero.
        index: u64,
    },
    /// The decoder finished a flow; the encoder drops what it kept for it.
    Done {
        /// The flow's QUIC stream id.
        stream: u64,
    },
}

const HELLO: u64 = 1;
const INSERTED: u64 = 2;
const RESOLVED: u64 = 3;
const NEED: u64 = 4;
const CHUNK: u64 = 5;
const MISSING: u64 = 6;
const DONE: u64 = 7;

impl Control {
    /// Appends the message as one record.
    pub fn encode(&self, out: &mut BytesMut) {
        let mut body = BytesMut::new();
        match self {
            Control::Hello { store_budget } => {
                put_varint(&mut body, HELLO);
                put_varint(&mut body, *store_budget);
            }
            Control::Inserted { chunks } => {
                put_varint(&mut body, INSERTED);
                put_varint(&mut body, chunks.len() as u64);
                for (id, len) in chunks {
                    body.extend_from_slice(id.as_bytes());
                    put_varint(&mut body, u64::from(*len));
                }
            }
            Control::Resolved { stream, refs } => {
                put_varint(&mut body, RESOLVED);
                put_varint(&mut body, *stream);
                put_varint(&mut body, *refs);
            }
            Control::Need { stream, index } | Control::Missing { stream, index } => {
                let kind = if matches!(self, Control::Need { .. }) {
                    NEED
                } else {
                    MISSING
                };
                put_varint(&mut body, kind);
                put_varint(&mut body, *stream);
                put_varint(&mut body, *index);
            }
            Control::Chunk {
                stream,
                index,
                bytes,
            } => {
                put_varint(&mut body, CHUNK);
                put_varint(&mut body, *stream);
                put_varint(&mut body, *index);
                body.extend_from_slice(bytes);
            }
            Control::Done { stream } => {
                put_varint(&mut body, DONE);
                put_varint(&mut body, *stream);
            }
        }
        put_record(out, &body);
    }

    /// Parses one control record.
    pub fn decode(mut record: Bytes) -> Result<Control, WireError> {
        let kind = get_varint(&mut record, "control kind")?;
        let message = match kind {
            HELLO => Control::Hello {
                store_budget: get_varint(&mut record, "store budget")?,
            },
            INSERTED => {
                let count = get_varint(&mut record, "inserted count")? as usize;
                if count > MAX_INSERTED {
                    return Err(invalid(format!("{count} inserted chunks")));
                }
                let mut chunks = Vec::with_capacity(count);
                for _ in 0..count {
                    if record.remaining() < ChunkId::LEN {
                        return Err(WireError::Truncated("inserted chunk id"));
                    }
                    let id = ChunkId::from_slice(&record.split_to(ChunkId::LEN));
                    let len = get_varint(&mut record, "inserted length")?;
                    let len = u32::try_from(len).map_err(|_| invalid(format!("length {len}")))?;
                    chunks.push((id, len));
                }
                Control::Inserted { chunks }
            }
            RESOLVED => Control::Resolved {
                stream: get_varint(&mut record, "stream")?,
                refs: get_varint(&mut record, "refs")?,
            },
            NEED | MISSING => {
                let stream = get_varint(&mut record, "stream")?;
                let index = get_varint(&mut record, "index")?;
                if kind == NEED {
                    Control::Need { stream, index }
                } else {
                    Control::Missing { stream, index }
                }
            }
            CHUNK => {
                let stream = get_varint(&mut record, "stream")?;
                let index = get_varint(&mut record, "index")?;
                return Ok(Control::Chunk {
                    stream,
                    index,
                    bytes: record,
                });
            }
            DONE => Control::Done {
                stream: get_varint(&mut record, "stream")?,
            },
            other => return Err(invalid(format!("unknown message kind {other}"))),
        };
        if record.has_remaining() {
            return Err(invalid(format!(
                "{} bytes after a kind-{kind} message",
                record.remaining()
            )));
        }
        Ok(message)
    }
}

fn invalid(detail: String) -> WireError {
    WireError::Invalid {
        what: "control message",
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sans_io::wire::take_record;

    #[test]
    fn every_message_round_trips() {
        let messages = vec![
            Control::Hello {
                store_budget: 256 << 20,
            },
            Control::Inserted {
                chunks: vec![(ChunkId::of(b"a"), 4096), (ChunkId::of(b"b"), 1)],
            },
            Control::Inserted { chunks: vec![] },
            Control::Resolved {
                stream: 4,
                refs: 1 << 40,
            },
            Control::Need {
                stream: 8,
                index: 3,
            },
            Control::Chunk {
                stream: 8,
                index: 3,
                bytes: Bytes::from_static(b"chunk bytes"),
            },
            Control::Missing {
                stream: 8,
                index: 3,
            },
            Control::Done { stream: 12 },
        ];
        let mut wire = BytesMut::new();
        for message in &messages {
            message.encode(&mut wire);
        }
        for message in messages {
            let record = take_record(&mut wire).unwrap().unwrap();
            assert_eq!(Control::decode(record).unwrap(), message);
        }
    }

    #[test]
    fn malformed_messages_are_errors() {
        for body in [
            vec![],
            vec![99],
            vec![1],
            vec![2, 1, 0, 0],
            vec![7, 1, 0],
            vec![2, 0xff, 0xff, 0x7f],
        ] {
            assert!(
                Control::decode(Bytes::from(body.clone())).is_err(),
                "{body:?}"
            );
        }
    }
}
