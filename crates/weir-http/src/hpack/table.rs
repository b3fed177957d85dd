//! HPACK's two tables (RFC 7541 §2.3): the static table of Appendix A and a
//! connection's dynamic table, a FIFO bounded in bytes.

use std::collections::VecDeque;

/// The static table, RFC 7541 Appendix A; index 1 is the first entry.
pub(super) const STATIC: [(&[u8], &[u8]); 61] = [
    (b":authority", b""),
    (b":method", b"GET"),
    (b":method", b"POST"),
    (b":path", b"/"),
    (b":path", b"/index.html"),
    (b":scheme", b"http"),
    (b":scheme", b"https"),
    (b":status", b"200"),
    (b":status", b"204"),
    (b":status", b"206"),
    (b":status", b"304"),
    (b":status", b"400"),
    (b":status", b"404"),
    (b":status", b"500"),
    (b"accept-charset", b""),
    (b"accept-encoding", b"gzip, deflate"),
    (b"accept-language", b""),
    (b"accept-ranges", b""),
    (b"accept", b""),
    (b"access-control-allow-origin", b""),
    (b"age", b""),
    (b"allow", b""),
    (b"authorization", b""),
    (b"cache-control", b""),
    (b"content-disposition", b""),
    (b"content-encoding", b""),
    (b"content-language", b""),
    (b"content-length", b""),
    (b"content-location", b""),
    (b"content-range", b""),
    (b"content-type", b""),
    (b"cookie", b""),
    (b"date", b""),
    (b"etag", b""),
    (b"expect", b""),
    (b"expires", b""),
    (b"from", b""),
    (b"host", b""),
    (b"if-match", b""),
    (b"if-modified-since", b""),
    (b"if-none-match", b""),
    (b"if-range", b""),
    (b"if-unmodified-since", b""),
    (b"last-modified", b""),
    (b"link", b""),
    (b"location", b""),
    (b"max-forwards", b""),
    (b"proxy-authenticate", b""),
    (b"proxy-authorization", b""),
    (b"range", b""),
    (b"referer", b""),
    (b"refresh", b""),
    (b"retry-after", b""),
    (b"server", b""),
    (b"set-cookie", b""),
    (b"strict-transport-security", b""),
    (b"transfer-encoding", b""),
    (b"user-agent", b""),
    (b"vary", b""),
    (b"via", b""),
    (b"www-authenticate", b""),
];

/// The static index of a (lower-case) name, the lowest when the name has
/// several entries.
pub(super) fn static_name_index(name: &[u8]) -> Option<usize> {
    let index = match name {
        b":authority" => 1,
        b":method" => 2,
        b":path" => 4,
        b":scheme" => 6,
        b":status" => 8,
        b"accept-charset" => 15,
        b"accept-encoding" => 16,
        b"accept-language" => 17,
        b"accept-ranges" => 18,
        b"accept" => 19,
        b"access-control-allow-origin" => 20,
        b"age" => 21,
        b"allow" => 22,
        b"authorization" => 23,
        b"cache-control" => 24,
        b"content-disposition" => 25,
        b"content-encoding" => 26,
        b"content-language" => 27,
        b"content-length" => 28,
        b"content-location" => 29,
        b"content-range" => 30,
        b"content-type" => 31,
        b"cookie" => 32,
        b"date" => 33,
        b"etag" => 34,
        b"expect" => 35,
        b"expires" => 36,
        b"from" => 37,
        b"host" => 38,
        b"if-match" => 39,
        b"if-modified-since" => 40,
        b"if-none-match" => 41,
        b"if-range" => 42,
        b"if-unmodified-since" => 43,
        b"last-modified" => 44,
        b"link" => 45,
        b"location" => 46,
        b"max-forwards" => 47,
        b"proxy-authenticate" => 48,
        b"proxy-authorization" => 49,
        b"range" => 50,
        b"referer" => 51,
        b"refresh" => 52,
        b"retry-after" => 53,
        b"server" => 54,
        b"set-cookie" => 55,
        b"strict-transport-security" => 56,
        b"transfer-encoding" => 57,
        b"user-agent" => 58,
        b"vary" => 59,
        b"via" => 60,
        b"www-authenticate" => 61,
        _ => return None,
    };
    Some(index)
}

/// The static index of a whole field, for the few entries with a value.
pub(super) fn static_field_index(name_index: usize, value: &[u8]) -> Option<usize> {
    let index = match (name_index, value) {
        (2, b"GET") => 2,
        (2, b"POST") => 3,
        (4, b"/") => 4,
        (4, b"/index.html") => 5,
        (6, b"http") => 6,
        (6, b"https") => 7,
        (8, b"200") => 8,
        (8, b"204") => 9,
        (8, b"206") => 10,
        (8, b"304") => 11,
        (8, b"400") => 12,
        (8, b"404") => 13,
        (8, b"500") => 14,
        (16, b"gzip, deflate") => 16,
        _ => return None,
    };
    Some(index)
}

/// What an entry costs in the table: its octets and 32 (RFC 7541 §4.1).
pub(super) fn entry_size(name: &[u8], value: &[u8]) -> usize {
    name.len() + value.len() + 32
}

/// A hash of a field's octets for the encoder's lookups: words of eight
/// bytes folded in with a multiply (as rustc's FxHash does), not proof of
/// equality; a match is confirmed byte by byte.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct FieldHash {
    name: u64,
    field: u64,
}

impl FieldHash {
    pub(super) fn of(name: &[u8], value: &[u8]) -> Self {
        let name_hash = fold(0, name);
        FieldHash {
            name: name_hash,
            field: fold(name_hash ^ 0xff, value),
        }
    }
}

fn fold(mut hash: u64, bytes: &[u8]) -> u64 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let mut at = 0;
    while at + 8 < bytes.len() {
        hash = (hash.rotate_left(5) ^ word(bytes, at)).wrapping_mul(K);
        at += 8;
    }
    // The last one to eight bytes: a word, two half-words or bytes, which
    // overlap what came before when the length is not a multiple of them.
    let tail = match bytes.len() {
        0 => 0,
        1..4 => bytes
            .iter()
            .fold(0u64, |word, &b| (word << 8) | u64::from(b)),
        4..8 => u64::from(half(bytes, 0)) << 32 | u64::from(half(bytes, bytes.len() - 4)),
        len => word(bytes, len - 8),
    };
    (hash.rotate_left(5) ^ tail ^ ((bytes.len() as u64) << 56)).wrapping_mul(K)
}

/// The eight bytes at `at` (which has eight after it).
fn word(bytes: &[u8], at: usize) -> u64 {
    let mut eight = [0u8; 8];
    eight.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(eight)
}

/// The four bytes at `at` (which has four after it).
fn half(bytes: &[u8], at: usize) -> u32 {
    let mut four = [0u8; 4];
    four.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(four)
}

/// Whether two strings are equal: short ones compared as one or two
/// overlapping words each, without a call to `memcmp`.
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    match a.len() {
        0..4 => a.iter().zip(b).all(|(x, y)| x == y),
        4..8 => half(a, 0) == half(b, 0) && half(a, a.len() - 4) == half(b, b.len() - 4),
        8..=16 => word(a, 0) == word(b, 0) && word(a, a.len() - 8) == word(b, b.len() - 8),
        _ => a == b,
    }
}

/// One dynamic entry: name and value in one allocation.
struct Entry {
    bytes: Box<[u8]>,
    name_len: usize,
    /// Set by an encoder's table (a decoder's never looks entries up).
    hash: FieldHash,
}

impl Entry {
    fn name(&self) -> &[u8] {
        &self.bytes[..self.name_len]
    }

    fn value(&self) -> &[u8] {
        &self.bytes[self.name_len..]
    }
}

/// Slots of the encoder's lookup by field hash.
const SLOTS: usize = 64;

/// A dynamic table: the newest entry has the lowest index (62).
pub(super) struct DynamicTable {
    entries: VecDeque<Entry>,
    /// The sum of the entries' sizes.
    size: usize,
    /// The bound the last size update set.
    max_size: usize,
    /// Entries inserted so far (wrapping): an entry inserted as the Nth sits
    /// at index `inserted - N` while it lasts.
    inserted: u32,
    /// The encoder's lookup: by the low bits of a field's hash, the number
    /// the newest entry with that hash was inserted as (0: none). A stale or
    /// colliding slot only sends the lookup to the full scan. A decoder's
    /// table has none (it never looks a field up), and keeps 256 bytes less
    /// for each connection.
    slots: Option<Box<[u32; SLOTS]>>,
}

impl DynamicTable {
    /// A decoder's table.
    pub(super) fn new(max_size: usize) -> Self {
        DynamicTable {
            entries: VecDeque::new(),
            size: 0,
            max_size,
            inserted: 0,
            slots: None,
        }
    }

    /// An encoder's table, with the lookup by hash.
    pub(super) fn with_lookup(max_size: usize) -> Self {
        DynamicTable {
            slots: Some(Box::new([0; SLOTS])),
            ..DynamicTable::new(max_size)
        }
    }

    pub(super) fn max_size(&self) -> usize {
        self.max_size
    }

    #[cfg(test)]
    pub(super) fn size(&self) -> usize {
        self.size
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Sets the bound, evicting the oldest entries that no longer fit.
    pub(super) fn set_max_size(&mut self, max_size: usize) {
        self.max_size = max_size;
        self.evict_to(max_size);
    }

    /// The field at a dynamic index (0 is the newest).
    pub(super) fn field(&self, index: usize) -> Option<(&[u8], &[u8])> {
        self.entries.get(index).map(|e| (e.name(), e.value()))
    }

    /// Adds a field (RFC 7541 §4.4): older entries make room; a field larger
    /// than the whole table empties it and is not added.
    pub(super) fn insert(&mut self, name: &[u8], value: &[u8], hash: FieldHash) {
        let size = entry_size(name, value);
        if size > self.max_size {
            self.entries.clear();
            self.size = 0;
            return;
        }
        self.evict_to(self.max_size - size);
        let mut bytes = Vec::with_capacity(name.len() + value.len());
        bytes.extend_from_slice(name);
        bytes.extend_from_slice(value);
        self.entries.push_front(Entry {
            bytes: bytes.into_boxed_slice(),
            name_len: name.len(),
            hash,
        });
        self.size += size;
        self.inserted = self.inserted.wrapping_add(1).max(1);
        if let Some(slots) = &mut self.slots {
            slots[hash.field as usize % SLOTS] = self.inserted;
        }
    }

    /// Where an entry with this name and value sits, if any; else the newest
    /// entry with this name, if any (`Err`). A field inserted lately is found
    /// through its slot; the rest by a scan that compares hashes before bytes.
    pub(super) fn find(
        &self,
        name: &[u8],
        value: &[u8],
        hash: FieldHash,
    ) -> Result<usize, Option<usize>> {
        let slot = self
            .slots
            .as_ref()
            .map_or(0, |slots| slots[hash.field as usize % SLOTS]);
        let newest = self.inserted.wrapping_sub(slot) as usize;
        if slot != 0
            && let Some(entry) = self.entries.get(newest)
            && entry.hash.field == hash.field
            && same(entry.name(), name)
            && same(entry.value(), value)
        {
            return Ok(newest);
        }
        let mut same_name = None;
        for (index, entry) in self.entries.iter().enumerate() {
            if entry.hash.field == hash.field
                && same(entry.name(), name)
                && same(entry.value(), value)
            {
                return Ok(index);
            }
            if same_name.is_none() && entry.hash.name == hash.name && entry.name() == name {
                same_name = Some(index);
            }
        }
        Err(same_name)
    }

    fn evict_to(&mut self, bound: usize) {
        while self.size > bound {
            let Some(oldest) = self.entries.pop_back() else {
                break;
            };
            self.size -= entry_size(oldest.name(), oldest.value());
        }
    }
}
