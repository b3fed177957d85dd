//! The encoding side: one per connection, writing each header block whole.

use super::table::{DynamicTable, FieldHash, entry_size, static_field_index, static_name_index};
use super::{DEFAULT_TABLE_SIZE, encode_integer, huffman};

/// Whether a field may enter the dynamic table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Indexing {
    /// Indexed when it fits: a field likely to repeat on the connection
    /// (`server`, `content-type`, `cache-control`).
    Index,
    /// Sent as a literal, not indexed: a field that changes each time
    /// (`date`, `content-length`, `etag`), which would only push others out.
    NotIndexed,
    /// Sent as a literal that no intermediary may index (RFC 7541 §6.2.3):
    /// secrets such as `authorization`, `cookie` and `set-cookie` values, and
    /// fields that arrived that way.
    Never,
}

/// Encodes header blocks for a peer, keeping the table the peer's decoder
/// mirrors.
pub struct Encoder {
    table: DynamicTable,
    /// Size updates to send at the start of the next block: the smallest bound
    /// since the last block, then the bound now (RFC 7541 §4.2).
    pending: Option<(usize, usize)>,
}

/// The table weir keeps for a peer, whatever more the peer allows: 4 KiB
/// holds a response's repeating fields many times over.
const OWN_TABLE_SIZE: usize = DEFAULT_TABLE_SIZE;

/// An entry larger than this share of the table is sent without indexing,
/// so one large value does not push out every small one.
const LARGEST_SHARE: usize = 4;

/// One header block being written; see [`Encoder::block`].
pub struct Block<'a> {
    encoder: &'a mut Encoder,
    out: &'a mut Vec<u8>,
}

impl Default for Encoder {
    fn default() -> Self {
        Self::new()
    }
}

impl Encoder {
    /// An encoder with the protocol's default table size.
    pub fn new() -> Self {
        Encoder {
            table: DynamicTable::with_lookup(DEFAULT_TABLE_SIZE),
            pending: None,
        }
    }

    /// The peer's SETTINGS_HEADER_TABLE_SIZE: weir's table for this peer
    /// becomes the smaller of it and 4 KiB, announced in the next block.
    pub fn set_peer_table_size(&mut self, size: usize) {
        let size = size.min(OWN_TABLE_SIZE);
        if size == self.table.max_size() {
            return;
        }
        let smallest = self
            .pending
            .map_or(size, |(smallest, _)| smallest.min(size));
        self.pending = Some((smallest, size));
        self.table.set_max_size(size);
    }

    /// Starts a header block in `out`, with any table size updates owed.
    pub fn block<'a>(&'a mut self, out: &'a mut Vec<u8>) -> Block<'a> {
        if let Some((smallest, now)) = self.pending.take() {
            if smallest < now {
                encode_integer(smallest, 5, 0x20, out);
            }
            encode_integer(now, 5, 0x20, out);
        }
        Block { encoder: self, out }
    }
}

impl Block<'_> {
    /// Appends a field. `name` must be lower case (RFC 9113 §8.2.1), as it is
    /// sent as given.
    pub fn field(&mut self, name: &[u8], value: &[u8], indexing: Indexing) {
        let table = &mut self.encoder.table;
        let hash = FieldHash::of(name, value);
        // The dynamic table first: in a connection's steady state it holds
        // most fields whole.
        let dynamic = table.find(name, value, hash);
        if let (Ok(index), false) = (dynamic, indexing == Indexing::Never) {
            encode_integer(62 + index, 7, 0x80, self.out);
            return;
        }
        let static_name = static_name_index(name);
        if let (Some(index), false) = (
            static_name.and_then(|i| static_field_index(i, value)),
            indexing == Indexing::Never,
        ) {
            encode_integer(index, 7, 0x80, self.out);
            return;
        }
        let name_index = static_name.or(dynamic.err().flatten().map(|i| 62 + i));
        let size = entry_size(name, value);
        let indexed = indexing == Indexing::Index && size <= table.max_size() / LARGEST_SHARE;
        let (prefix, flags) = match (indexed, indexing) {
            (true, _) => (6, 0x40),
            (false, Indexing::Never) => (4, 0x10),
            (false, _) => (4, 0x00),
        };
        match name_index {
            Some(index) => encode_integer(index, prefix, flags, self.out),
            None => {
                encode_integer(0, prefix, flags, self.out);
                string(name, self.out);
            }
        }
        string(value, self.out);
        if indexed {
            table.insert(name, value, hash);
        }
    }

    /// Appends `:status`: one byte for the seven the static table holds.
    pub fn status(&mut self, status: u16) {
        let index = match status {
            200 => 8,
            204 => 9,
            206 => 10,
            304 => 11,
            400 => 12,
            404 => 13,
            500 => 14,
            _ => {
                let mut digits = itoa::Buffer::new();
                self.field(
                    b":status",
                    digits.format(status).as_bytes(),
                    Indexing::Index,
                );
                return;
            }
        };
        encode_integer(index, 7, 0x80, self.out);
    }
}

/// Appends a string literal, Huffman-coded when that is shorter.
fn string(value: &[u8], out: &mut Vec<u8>) {
    let coded = huffman::encoded_len(value);
    if coded < value.len() {
        encode_integer(coded, 7, 0x80, out);
        huffman::encode(value, out);
    } else {
        encode_integer(value.len(), 7, 0x00, out);
        out.extend_from_slice(value);
    }
}
