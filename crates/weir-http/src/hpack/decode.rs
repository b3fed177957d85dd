//! The decoding side: one per connection, fed each header block whole.

use std::ops::Range;

use super::table::{DynamicTable, FieldHash, STATIC};
use super::{DEFAULT_TABLE_SIZE, HpackError, decode_integer, huffman};

/// A decoded field. Its octets are as sent: HPACK does not check them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field<'a> {
    /// The field's name.
    pub name: &'a [u8],
    /// The field's value.
    pub value: &'a [u8],
    /// Sent as "never indexed" (RFC 7541 §6.2.3): an intermediary must send it
    /// on the same way.
    pub never_indexed: bool,
}

/// Decodes a peer's header blocks, keeping the peer's dynamic table.
pub struct Decoder {
    table: DynamicTable,
    /// The most a size update may ask for: what weir's settings allow.
    allowed: usize,
    /// The next block must open with a size update: the allowance fell below
    /// the table's size.
    update_due: bool,
    /// Huffman-decoded strings of the block being decoded.
    scratch: Vec<u8>,
}

/// Where a decoded string lies until the field is handed out.
#[derive(Clone)]
enum Source {
    Block(Range<usize>),
    Scratch(Range<usize>),
    Static(&'static [u8]),
    /// A dynamic entry's name (the value is never reused alone).
    DynamicName(usize),
}

/// What a literal does to the table (RFC 7541 §6.2).
#[derive(Clone, Copy, PartialEq)]
enum Literal {
    Indexed,
    NotIndexed,
    NeverIndexed,
}

/// Scratch space kept between blocks; more is freed after the block.
const SCRATCH_KEPT: usize = 4096;

impl Default for Decoder {
    fn default() -> Self {
        Self::new()
    }
}

impl Decoder {
    /// A decoder with the protocol's default table size.
    pub fn new() -> Self {
        Decoder {
            table: DynamicTable::new(DEFAULT_TABLE_SIZE),
            allowed: DEFAULT_TABLE_SIZE,
            update_due: false,
            scratch: Vec::new(),
        }
    }

    /// The peer acknowledged weir's SETTINGS_HEADER_TABLE_SIZE: size updates
    /// may ask for up to `size` from now on. Below the table's current bound,
    /// the peer must shrink the table at the start of its next block.
    pub fn set_allowed_table_size(&mut self, size: usize) {
        self.allowed = size;
        if size < self.table.max_size() {
            self.update_due = true;
        }
    }

    /// Decodes one header block, calling `each` for every field in order.
    /// On an error the connection must end (COMPRESSION_ERROR): fields
    /// already handed out stand, and the table is out of step.
    pub fn decode<F>(&mut self, block: &[u8], mut each: F) -> Result<(), HpackError>
    where
        F: FnMut(Field<'_>),
    {
        self.scratch.clear();
        let mut pos = 0;
        let mut fields = false;
        while pos < block.len() {
            let first = block[pos];
            if first & 0xe0 == 0x20 {
                // A dynamic table size update: only before the first field.
                if fields {
                    return Err(HpackError::TableSizeUpdate);
                }
                let size = decode_integer(block, &mut pos, 5)?;
                if size > self.allowed {
                    return Err(HpackError::TableSize);
                }
                self.table.set_max_size(size);
                self.update_due = false;
                continue;
            }
            if self.update_due {
                return Err(HpackError::TableSizeUpdate);
            }
            fields = true;
            if first & 0x80 != 0 {
                let index = decode_integer(block, &mut pos, 7)?;
                let (name, value) = self.indexed(index)?;
                each(Field {
                    name,
                    value,
                    never_indexed: false,
                });
                continue;
            }
            let (prefix, kind) = match first & 0xf0 {
                0x40..=0x70 => (6, Literal::Indexed),
                0x10 => (4, Literal::NeverIndexed),
                _ => (4, Literal::NotIndexed),
            };
            self.literal(block, &mut pos, prefix, kind, &mut each)?;
        }
        if self.update_due {
            return Err(HpackError::TableSizeUpdate);
        }
        if self.scratch.capacity() > SCRATCH_KEPT {
            self.scratch = Vec::new();
        }
        Ok(())
    }

    /// The field at an index of either table (RFC 7541 §2.3.3).
    fn indexed(&self, index: usize) -> Result<(&[u8], &[u8]), HpackError> {
        match index {
            0 => Err(HpackError::Index),
            1..=61 => Ok(STATIC[index - 1]),
            _ => self.table.field(index - 62).ok_or(HpackError::Index),
        }
    }

    fn literal<F>(
        &mut self,
        block: &[u8],
        pos: &mut usize,
        prefix: u32,
        kind: Literal,
        each: &mut F,
    ) -> Result<(), HpackError>
    where
        F: FnMut(Field<'_>),
    {
        let name_index = decode_integer(block, pos, prefix)?;
        let name = match name_index {
            0 => string(block, pos, &mut self.scratch)?,
            1..=61 => Source::Static(STATIC[name_index - 1].0),
            _ if self.table.field(name_index - 62).is_some() => {
                Source::DynamicName(name_index - 62)
            }
            _ => return Err(HpackError::Index),
        };
        let value = string(block, pos, &mut self.scratch)?;
        let never_indexed = kind == Literal::NeverIndexed;
        if kind != Literal::Indexed {
            each(Field {
                name: self.resolve(block, &name),
                value: self.resolve(block, &value),
                never_indexed,
            });
            return Ok(());
        }
        // The table may evict the entry the name came from: copy it first.
        let name = match name {
            Source::DynamicName(index) => {
                let start = self.scratch.len();
                let (entry_name, _) = self.table.field(index).ok_or(HpackError::Index)?;
                self.scratch.extend_from_slice(entry_name);
                Source::Scratch(start..self.scratch.len())
            }
            other => other,
        };
        // Neither string lies in the table now, so it can change under them.
        let (Some(name), Some(value)) = (
            plain(block, &self.scratch, &name),
            plain(block, &self.scratch, &value),
        ) else {
            return Err(HpackError::Index);
        };
        // A decoder's entries are never looked up by hash.
        self.table.insert(name, value, FieldHash::default());
        each(Field {
            name,
            value,
            never_indexed,
        });
        Ok(())
    }

    fn resolve<'a>(&'a self, block: &'a [u8], source: &Source) -> &'a [u8] {
        resolve(block, &self.scratch, &self.table, source)
    }

    /// A decoder whose table starts at `size` (RFC 7541 Appendix C's responses use 256).
    #[cfg(test)]
    pub(super) fn with_table_size(size: usize) -> Self {
        Decoder {
            table: DynamicTable::new(size),
            allowed: size,
            ..Decoder::new()
        }
    }

    #[cfg(test)]
    pub(super) fn table(&self) -> &DynamicTable {
        &self.table
    }
}

fn resolve<'a>(
    block: &'a [u8],
    scratch: &'a [u8],
    table: &'a DynamicTable,
    source: &Source,
) -> &'a [u8] {
    match source {
        // Checked when the name was read; the table has not changed since.
        Source::DynamicName(index) => table.field(*index).map_or(&[], |(name, _)| name),
        other => plain(block, scratch, other).unwrap_or_default(),
    }
}

/// A string that does not lie in the dynamic table.
fn plain<'a>(block: &'a [u8], scratch: &'a [u8], source: &Source) -> Option<&'a [u8]> {
    match source {
        Source::Block(range) => Some(&block[range.clone()]),
        Source::Scratch(range) => Some(&scratch[range.clone()]),
        Source::Static(name) => Some(name),
        Source::DynamicName(_) => None,
    }
}

/// Reads a string literal (RFC 7541 §5.2) at `*pos`, Huffman-decoding it into
/// `scratch` when it is coded.
fn string(block: &[u8], pos: &mut usize, scratch: &mut Vec<u8>) -> Result<Source, HpackError> {
    let huffman_coded = block.get(*pos).ok_or(HpackError::Truncated)? & 0x80 != 0;
    let len = decode_integer(block, pos, 7)?;
    let end = pos.checked_add(len).ok_or(HpackError::Truncated)?;
    let raw = block.get(*pos..end).ok_or(HpackError::Truncated)?;
    *pos = end;
    if !huffman_coded {
        return Ok(Source::Block(end - len..end));
    }
    let start = scratch.len();
    huffman::decode(raw, scratch)?;
    Ok(Source::Scratch(start..scratch.len()))
}
