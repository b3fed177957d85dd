//! A small mutation engine for the stable-toolchain fuzz runner
//! (`crates/weir/tests/fuzz.rs`): byte flips, insertions of the tokens the
//! parsers care about, deletions, duplications, splices between corpus
//! inputs. No coverage feedback — that is what `cargo fuzz` adds — but it
//! runs anywhere `cargo test` does, within a time budget.

/// xorshift64*: fast, seedable, good enough to pick mutations.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number below `bound` (which must not be zero).
    pub fn below(&mut self, bound: usize) -> usize {
        (self.next() % bound as u64) as usize
    }
}

/// Byte strings that matter to HTTP, TOML and varint parsers.
const TOKENS: &[&[u8]] = &[
    b"\r\n",
    b"\n",
    b"\r",
    b"\r\n\r\n",
    b" ",
    b"\t",
    b":",
    b";",
    b",",
    b"=",
    b"\"",
    b"\0",
    b"0\r\n\r\n",
    b"chunked",
    b"Transfer-Encoding: ",
    b"Content-Length: ",
    b"Host: ",
    b"Connection: ",
    b"upgrade",
    b"Expect: 100-continue",
    b"HTTP/1.1",
    b"HTTP/1.0",
    b"GET ",
    b"HEAD ",
    b"CONNECT ",
    b"ffffffffffffffff",
    b"18446744073709551616",
    b"\x80",
    b"\xff",
    b"\x7f",
    b"[",
    b"]",
    b"[[",
    b"]]",
    b"\"\"\"",
    b"= \"",
    b"{ }",
    b"listen = ",
    b"pool = ",
    b"nodes = [",
    b"address = ",
    b"\x00\x00\x00\x00",
    b"\xff\xff\xff\xff\x0f",
    b"\x81\x80\x80\x80\x80\x80\x80\x80\x80\x01",
];

/// A mutated copy of `input`; `other` is another corpus input to splice from.
pub fn mutate(input: &[u8], other: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut data = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        apply(&mut data, other, rng);
    }
    data.truncate(64 * 1024);
    data
}

fn apply(data: &mut Vec<u8>, other: &[u8], rng: &mut Rng) {
    let at = |rng: &mut Rng, data: &Vec<u8>| rng.below(data.len() + 1);
    match rng.below(9) {
        0 if !data.is_empty() => {
            let i = rng.below(data.len());
            data[i] ^= 1 << rng.below(8);
        }
        1 if !data.is_empty() => {
            let i = rng.below(data.len());
            data[i] = rng.next() as u8;
        }
        2 | 3 => {
            let token = TOKENS[rng.below(TOKENS.len())];
            let i = at(rng, data);
            data.splice(i..i, token.iter().copied());
        }
        4 if !data.is_empty() => {
            let start = rng.below(data.len());
            let end = (start + 1 + rng.below(16)).min(data.len());
            data.drain(start..end);
        }
        5 if !data.is_empty() => {
            let start = rng.below(data.len());
            let end = (start + 1 + rng.below(64)).min(data.len());
            let piece: Vec<u8> = data[start..end].to_vec();
            let i = at(rng, data);
            data.splice(i..i, piece);
        }
        6 if !other.is_empty() => {
            let start = rng.below(other.len());
            let end = (start + 1 + rng.below(128)).min(other.len());
            let i = at(rng, data);
            data.splice(i..i, other[start..end].iter().copied());
        }
        7 => {
            let i = at(rng, data);
            data.truncate(i);
        }
        _ => {
            // A digit run becomes a large number.
            if let Some(i) = data.iter().position(|b| b.is_ascii_digit()) {
                data.splice(i..i, b"9999999999".iter().copied());
            }
        }
    }
}
