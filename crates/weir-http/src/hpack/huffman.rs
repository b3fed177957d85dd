//! HPACK's static Huffman code (RFC 7541 §5.2, Appendix B): an encoder that
//! packs codes into a 64-bit accumulator, and a decoder that walks the code
//! tree four bits at a time through a table built at compile time.
//!
//! The code is canonical: codes of one length are consecutive in symbol order,
//! and each length starts where the previous one ended, shifted left by one. So
//! the code lengths alone (Appendix B's `len` column) fix every code, and both
//! tables here are derived from them by `const fn`s.

use super::HpackError;

/// Symbols: the 256 octets and EOS.
const SYMBOLS: usize = 257;
/// The end-of-string symbol; never valid inside a string (RFC 7541 §5.2).
const EOS: usize = 256;

/// The length in bits of each symbol's code, RFC 7541 Appendix B.
const LENGTHS: [u8; SYMBOLS] = [
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, // 0x00
    28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28, // 0x10
    6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, // 0x20 ' ' ..
    5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10, // 0x30 '0' ..
    13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, // 0x40 '@' ..
    7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6, // 0x50 'P' ..
    15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5, // 0x60 '`' ..
    6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, // 0x70 'p' ..
    20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23, // 0x80
    24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, // 0x90
    22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, // 0xa0
    21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23, // 0xb0
    26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, // 0xc0
    19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27, // 0xd0
    20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23, // 0xe0
    26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26, // 0xf0
    30, // EOS
];

/// Each symbol's code, right-aligned.
const CODES: [u32; SYMBOLS] = canonical_codes();

const fn canonical_codes() -> [u32; SYMBOLS] {
    let mut codes = [0u32; SYMBOLS];
    let mut code = 0u32;
    let mut length = 1;
    while length <= 30 {
        let mut symbol = 0;
        while symbol < SYMBOLS {
            if LENGTHS[symbol] as u32 == length {
                codes[symbol] = code;
                code += 1;
            }
            symbol += 1;
        }
        code <<= 1;
        length += 1;
    }
    codes
}

/// The number of bytes `input` takes Huffman-coded.
pub(super) fn encoded_len(input: &[u8]) -> usize {
    let bits: usize = input.iter().map(|&b| LENGTHS[b as usize] as usize).sum();
    bits.div_ceil(8)
}

/// Appends `input` Huffman-coded, padded with the most significant bits of
/// EOS (ones) to a whole byte.
pub(super) fn encode(input: &[u8], out: &mut Vec<u8>) {
    out.reserve(encoded_len(input));
    // Fewer than 32 bits wait in `bits` between symbols; a code adds at most
    // 30, so 62 at most are ever pending, and they leave 32 at a time.
    let mut bits: u64 = 0;
    let mut pending = 0u32;
    for &byte in input {
        let length = u32::from(LENGTHS[byte as usize]);
        bits = (bits << length) | u64::from(CODES[byte as usize]);
        pending += length;
        if pending >= 32 {
            pending -= 32;
            out.extend_from_slice(&((bits >> pending) as u32).to_be_bytes());
        }
    }
    let pad = (8 - pending % 8) % 8;
    bits = (bits << pad) | ((1 << pad) - 1);
    pending += pad;
    while pending >= 8 {
        pending -= 8;
        out.push((bits >> pending) as u8);
    }
}

/// Internal nodes of the code tree: a full binary tree over 257 leaves has 256.
const NODES: usize = 256;
/// A child that is a leaf carries this flag and its symbol.
const LEAF: u16 = 0x8000;

/// The code tree: each internal node's two children (bit 0, bit 1).
const fn tree() -> [[u16; 2]; NODES] {
    let mut nodes = [[0u16; 2]; NODES];
    let mut used = 1; // node 0 is the root
    let mut symbol = 0;
    while symbol < SYMBOLS {
        let length = LENGTHS[symbol] as u32;
        let code = CODES[symbol];
        let mut node = 0;
        let mut depth = length;
        while depth > 1 {
            depth -= 1;
            let bit = ((code >> depth) & 1) as usize;
            if nodes[node][bit] == 0 {
                nodes[node][bit] = used as u16;
                used += 1;
            }
            node = nodes[node][bit] as usize;
        }
        nodes[node][(code & 1) as usize] = LEAF | symbol as u16;
        symbol += 1;
    }
    nodes
}

/// A step of the four-bit walk: the next node, and the symbol completed on
/// the way (at most one: no code is shorter than five bits).
#[derive(Clone, Copy)]
struct Step {
    next: u8,
    /// `EMITS`, `FAILS` (EOS reached), `ACCEPTS` (the next node may end a string).
    flags: u8,
    symbol: u8,
}

const EMITS: u8 = 1;
const FAILS: u8 = 2;
const ACCEPTS: u8 = 4;

/// `STEPS[node][nibble]`: where reading four more bits from `node` leads.
static STEPS: [[Step; 16]; NODES] = steps();

const fn steps() -> [[Step; 16]; NODES] {
    let nodes = tree();
    // A string may end on the root, or inside EOS's all-ones prefix at most
    // seven bits deep: padding is shorter than a byte (RFC 7541 §5.2).
    let mut accepting = [false; NODES];
    accepting[0] = true;
    let mut node = 0;
    let mut depth = 0;
    while depth < 7 {
        let child = nodes[node][1];
        if child & LEAF != 0 {
            break;
        }
        node = child as usize;
        accepting[node] = true;
        depth += 1;
    }
    let mut table = [[Step {
        next: 0,
        flags: 0,
        symbol: 0,
    }; 16]; NODES];
    let mut start = 0;
    while start < NODES {
        let mut nibble = 0;
        while nibble < 16 {
            let mut step = Step {
                next: 0,
                flags: 0,
                symbol: 0,
            };
            let mut node = start;
            let mut bit = 4;
            while bit > 0 {
                bit -= 1;
                let child = nodes[node][(nibble >> bit) & 1];
                if child & LEAF != 0 {
                    let symbol = (child & !LEAF) as usize;
                    if symbol == EOS {
                        step.flags |= FAILS;
                        break;
                    }
                    step.flags |= EMITS;
                    step.symbol = symbol as u8;
                    node = 0;
                } else {
                    node = child as usize;
                }
            }
            step.next = node as u8;
            if accepting[node] {
                step.flags |= ACCEPTS;
            }
            table[start][nibble] = step;
            nibble += 1;
        }
        start += 1;
    }
    table
}

/// Appends the Huffman-coded `input`, decoded. Fails on EOS inside the
/// string, and on padding longer than seven bits or not all ones.
pub(super) fn decode(input: &[u8], out: &mut Vec<u8>) -> Result<(), HpackError> {
    // Each four bits end at most one symbol.
    out.reserve(input.len() * 2);
    let mut node = 0usize;
    let mut accepts = true;
    for &byte in input {
        let high = STEPS[node][usize::from(byte >> 4)];
        let low = STEPS[usize::from(high.next)][usize::from(byte & 0x0f)];
        if (high.flags | low.flags) & FAILS != 0 {
            return Err(HpackError::Huffman);
        }
        if high.flags & EMITS != 0 {
            out.push(high.symbol);
        }
        if low.flags & EMITS != 0 {
            out.push(low.symbol);
        }
        node = usize::from(low.next);
        accepts = low.flags & ACCEPTS != 0;
    }
    match accepts {
        true => Ok(()),
        false => Err(HpackError::Huffman),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_match_appendix_b_samples() {
        // (symbol, code, length) rows of RFC 7541 Appendix B.
        for (symbol, code, length) in [
            (0usize, 0x1ff8u32, 13u8),
            (b' ' as usize, 0x14, 6),
            (b'0' as usize, 0x0, 5),
            (b'a' as usize, 0x3, 5),
            (b'z' as usize, 0x7b, 7),
            (b'~' as usize, 0x1ffd, 13),
            (10, 0x3fff_fffc, 30),
            (255, 0x3ff_ffee, 26),
            (EOS, 0x3fff_ffff, 30),
        ] {
            assert_eq!((CODES[symbol], LENGTHS[symbol]), (code, length), "{symbol}");
        }
    }

    #[test]
    fn the_code_is_complete_and_prefix_free() {
        // Kraft's sum is exactly one for a full tree.
        let sum: u64 = LENGTHS.iter().map(|&l| 1u64 << (30 - l)).sum();
        assert_eq!(sum, 1 << 30);
    }

    #[test]
    fn every_octet_round_trips() {
        let all: Vec<u8> = (0..=255).collect();
        let mut coded = Vec::new();
        encode(&all, &mut coded);
        assert_eq!(coded.len(), encoded_len(&all));
        let mut back = Vec::new();
        decode(&coded, &mut back).unwrap();
        assert_eq!(back, all);
    }

    #[test]
    fn padding_must_be_short_and_all_ones() {
        let mut out = Vec::new();
        // 'a' is 00011: padded with 111 is valid.
        decode(&[0b0001_1111], &mut out).unwrap();
        assert_eq!(out, b"a");
        // Padded with zeros, it is not.
        assert_eq!(decode(&[0b0001_1000], &mut out), Err(HpackError::Huffman));
        // A whole byte of padding is too long.
        assert_eq!(
            decode(&[0b0001_1111, 0xff], &mut out),
            Err(HpackError::Huffman)
        );
        // EOS itself (30 ones) inside a string.
        assert_eq!(
            decode(&[0xff, 0xff, 0xff, 0xff], &mut out),
            Err(HpackError::Huffman)
        );
        // Nothing at all is the empty string.
        out.clear();
        decode(&[], &mut out).unwrap();
        assert!(out.is_empty());
    }
}
