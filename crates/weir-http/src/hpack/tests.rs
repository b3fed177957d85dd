//! RFC 7541 Appendix C's examples, malformed blocks, and encoder ↔ decoder
//! round trips that keep the two tables in step.

use super::*;

type Fields = Vec<(Vec<u8>, Vec<u8>)>;

fn hex(text: &str) -> Vec<u8> {
    let digits: Vec<u8> = text.bytes().filter(u8::is_ascii_hexdigit).collect();
    digits
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
        .collect()
}

fn decode(decoder: &mut Decoder, block: &[u8]) -> Result<Fields, HpackError> {
    let mut fields = Vec::new();
    decoder.decode(block, |field| {
        fields.push((field.name.to_vec(), field.value.to_vec()));
    })?;
    Ok(fields)
}

fn fields(pairs: &[(&str, &str)]) -> Fields {
    pairs
        .iter()
        .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
        .collect()
}

/// A block in hex, the fields it decodes to, and the table's size after it.
type Step<'a> = (&'a str, &'a [(&'a str, &'a str)], usize);

/// Decodes a sequence of blocks on one connection, checking each block's
/// fields and the table's size after it.
fn check_sequence(mut decoder: Decoder, steps: &[Step<'_>]) {
    for (block, expected, size) in steps {
        assert_eq!(decode(&mut decoder, &hex(block)).unwrap(), fields(expected));
        assert_eq!(decoder.table().size(), *size);
    }
}

#[test]
fn c2_single_representations() {
    let mut decoder = Decoder::new();
    let block = hex("400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572");
    assert_eq!(
        decode(&mut decoder, &block).unwrap(),
        fields(&[("custom-key", "custom-header")])
    );
    assert_eq!(decoder.table().size(), 55);

    let mut decoder = Decoder::new();
    let block = hex("040c 2f73 616d 706c 652f 7061 7468");
    assert_eq!(
        decode(&mut decoder, &block).unwrap(),
        fields(&[(":path", "/sample/path")])
    );
    assert_eq!(decoder.table().len(), 0);

    let mut decoder = Decoder::new();
    let mut never = Vec::new();
    decoder
        .decode(&hex("1008 7061 7373 776f 7264 0673 6563 7265 74"), |f| {
            never.push((f.name.to_vec(), f.value.to_vec(), f.never_indexed));
        })
        .unwrap();
    assert_eq!(
        never,
        vec![(b"password".to_vec(), b"secret".to_vec(), true)]
    );
    assert_eq!(decoder.table().len(), 0);

    let mut decoder = Decoder::new();
    assert_eq!(
        decode(&mut decoder, &hex("82")).unwrap(),
        fields(&[(":method", "GET")])
    );
}

const REQUEST_1: &[(&str, &str)] = &[
    (":method", "GET"),
    (":scheme", "http"),
    (":path", "/"),
    (":authority", "www.example.com"),
];
const REQUEST_2: &[(&str, &str)] = &[
    (":method", "GET"),
    (":scheme", "http"),
    (":path", "/"),
    (":authority", "www.example.com"),
    ("cache-control", "no-cache"),
];
const REQUEST_3: &[(&str, &str)] = &[
    (":method", "GET"),
    (":scheme", "https"),
    (":path", "/index.html"),
    (":authority", "www.example.com"),
    ("custom-key", "custom-value"),
];

#[test]
fn c3_requests_without_huffman() {
    check_sequence(
        Decoder::new(),
        &[
            (
                "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
                REQUEST_1,
                57,
            ),
            ("8286 84be 5808 6e6f 2d63 6163 6865", REQUEST_2, 110),
            (
                "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
                REQUEST_3,
                164,
            ),
        ],
    );
}

#[test]
fn c4_requests_with_huffman() {
    check_sequence(
        Decoder::new(),
        &[
            ("8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff", REQUEST_1, 57),
            ("8286 84be 5886 a8eb 1064 9cbf", REQUEST_2, 110),
            (
                "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
                REQUEST_3,
                164,
            ),
        ],
    );
}

const RESPONSE_1: &[(&str, &str)] = &[
    (":status", "302"),
    ("cache-control", "private"),
    ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
    ("location", "https://www.example.com"),
];
const RESPONSE_2: &[(&str, &str)] = &[
    (":status", "307"),
    ("cache-control", "private"),
    ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
    ("location", "https://www.example.com"),
];
const RESPONSE_3: &[(&str, &str)] = &[
    (":status", "200"),
    ("cache-control", "private"),
    ("date", "Mon, 21 Oct 2013 20:13:22 GMT"),
    ("location", "https://www.example.com"),
    ("content-encoding", "gzip"),
    (
        "set-cookie",
        "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1",
    ),
];

#[test]
fn c5_responses_without_huffman_evict() {
    check_sequence(
        Decoder::with_table_size(256),
        &[
            (
                "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133
                 2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70
                 6c65 2e63 6f6d",
                RESPONSE_1,
                222,
            ),
            ("4803 3330 37c1 c0bf", RESPONSE_2, 222),
            (
                "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d
                 54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049
                 5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e
                 3d31",
                RESPONSE_3,
                215,
            ),
        ],
    );
}

#[test]
fn c6_responses_with_huffman_evict() {
    check_sequence(
        Decoder::with_table_size(256),
        &[
            (
                "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6
                 2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
                RESPONSE_1,
                222,
            ),
            ("4883 640e ffc1 c0bf", RESPONSE_2, 222),
            (
                "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab
                 77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f
                 9587 3160 65c0 03ed 4ee5 b106 3d50 07",
                RESPONSE_3,
                215,
            ),
        ],
    );
}

#[test]
fn integers_at_their_edges() {
    // RFC 7541 C.1: 10 and 1337 with a 5-bit prefix, 42 with an 8-bit one.
    for (value, prefix, encoded) in [
        (10usize, 5u32, vec![0x0a]),
        (1337, 5, vec![0x1f, 0x9a, 0x0a]),
        (42, 8, vec![0x2a]),
        (31, 5, vec![0x1f, 0x00]),
        (
            u32::MAX as usize,
            7,
            vec![0x7f, 0x80, 0xff, 0xff, 0xff, 0x0f],
        ),
    ] {
        let mut out = Vec::new();
        encode_integer(value, prefix, 0, &mut out);
        assert_eq!(out, encoded, "{value}");
        let mut pos = 0;
        assert_eq!(decode_integer(&out, &mut pos, prefix), Ok(value));
        assert_eq!(pos, out.len());
    }
    let mut pos = 0;
    // One past u32::MAX, and a sixth continuation byte.
    assert_eq!(
        decode_integer(&[0x7f, 0x81, 0xff, 0xff, 0xff, 0x0f], &mut pos, 7),
        Err(HpackError::IntegerOverflow)
    );
    pos = 0;
    assert_eq!(
        decode_integer(&[0x7f, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00], &mut pos, 7),
        Err(HpackError::IntegerOverflow)
    );
    pos = 0;
    assert_eq!(
        decode_integer(&[0x7f, 0x80], &mut pos, 7),
        Err(HpackError::Truncated)
    );
}

#[test]
fn malformed_blocks_are_refused() {
    for (block, error) in [
        // Index 0, and one past the static table with an empty dynamic one.
        ("80", HpackError::Index),
        ("be", HpackError::Index),
        // A literal whose name index is past the tables.
        ("7f00 0161", HpackError::Index),
        // A string longer than what is left.
        ("0003 6162", HpackError::Truncated),
        ("4003 6162 63", HpackError::Truncated),
        // A literal cut off before its value.
        ("0f", HpackError::Truncated),
        // EOS in a Huffman string.
        ("0084 ffff ffff 0161", HpackError::Huffman),
        // A size update above the default allowance (4,096).
        ("3fe2 1f", HpackError::TableSize),
        // A size update after a field.
        ("82 20", HpackError::TableSizeUpdate),
    ] {
        let mut decoder = Decoder::new();
        assert_eq!(decode(&mut decoder, &hex(block)), Err(error), "{block}");
    }
}

#[test]
fn size_updates_shrink_the_table_and_a_lowered_setting_needs_one() {
    let mut decoder = Decoder::new();
    decode(
        &mut decoder,
        &hex("400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572"),
    )
    .unwrap();
    assert_eq!(decoder.table().len(), 1);
    // Two updates at the start of a block are allowed; 0 empties the table.
    assert_eq!(
        decode(&mut decoder, &hex("20 3fe1 1f 82")).unwrap(),
        fields(&[(":method", "GET")])
    );
    assert_eq!(decoder.table().len(), 0);
    assert_eq!(decoder.table().max_size(), 4096);

    decoder.set_allowed_table_size(100);
    // The next block must open with an update to at most 100.
    assert_eq!(
        decode(&mut decoder, &hex("82")),
        Err(HpackError::TableSizeUpdate)
    );
    let mut decoder = Decoder::new();
    decoder.set_allowed_table_size(100);
    assert_eq!(
        decode(&mut decoder, &hex("3f46")),
        Err(HpackError::TableSize)
    );
    let mut decoder = Decoder::new();
    decoder.set_allowed_table_size(100);
    // An update alone is a valid (empty) block.
    assert_eq!(decode(&mut decoder, &hex("3f45")).unwrap(), fields(&[]));
    assert_eq!(decoder.table().max_size(), 100);
    assert_eq!(
        decode(&mut decoder, &hex("82")).unwrap(),
        fields(&[(":method", "GET")])
    );
}

#[test]
fn an_entry_larger_than_the_table_empties_it() {
    let mut decoder = Decoder::with_table_size(64);
    // custom-key: custom-header is 55: it fits.
    let block = hex("400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572");
    decode(&mut decoder, &block).unwrap();
    assert_eq!(decoder.table().len(), 1);
    // A 40-byte value does not fit in 64 with its name: the table empties,
    // and the field is still handed out.
    let mut block = hex("4001 61 28");
    block.extend_from_slice(&[b'v'; 40]);
    let decoded = decode(&mut decoder, &block).unwrap();
    assert_eq!(decoded, vec![(b"a".to_vec(), vec![b'v'; 40])]);
    assert_eq!(decoder.table().len(), 0);
    assert_eq!(decoder.table().size(), 0);
}

#[test]
fn a_name_from_an_entry_it_evicts_survives() {
    // Table of 64: custom-key: custom-header (55) is in it; a literal with
    // incremental indexing names it (index 62) with a new value, evicting it.
    let mut decoder = Decoder::with_table_size(64);
    let block = hex("400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572");
    decode(&mut decoder, &block).unwrap();
    let decoded = decode(&mut decoder, &hex("7e 03 6e65 77")).unwrap();
    assert_eq!(decoded, fields(&[("custom-key", "new")]));
    assert_eq!(decoder.table().len(), 1);
    assert_eq!(decoder.table().size(), 10 + 3 + 32);
}

/// A small deterministic generator for the round trips.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn random_field(rng: &mut XorShift) -> (Vec<u8>, Vec<u8>, Indexing) {
    const NAMES: &[&str] = &[
        ":status",
        ":path",
        "server",
        "content-type",
        "cache-control",
        "set-cookie",
        "x-request-id",
        "x-a",
        "date",
        "accept-encoding",
    ];
    const VALUES: &[&str] = &["200", "/", "weir", "text/html", "gzip, deflate", "", "404"];
    let name = match rng.below(4) {
        0 => (0..1 + rng.below(20))
            .map(|_| b"abcdefghijklmnopqrstuvwxyz-0123456789"[rng.below(37)])
            .collect(),
        _ => NAMES[rng.below(NAMES.len())].as_bytes().to_vec(),
    };
    let longest = if rng.below(10) == 0 { 3000 } else { 40 };
    let value = match rng.below(3) {
        0 => (0..rng.below(longest)).map(|_| rng.next() as u8).collect(),
        _ => VALUES[rng.below(VALUES.len())].as_bytes().to_vec(),
    };
    let indexing = [
        Indexing::Index,
        Indexing::Index,
        Indexing::NotIndexed,
        Indexing::Never,
    ][rng.below(4)];
    (name, value, indexing)
}

#[test]
fn encoder_and_decoder_stay_in_step() {
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    for _connection in 0..20 {
        let mut encoder = Encoder::new();
        let mut decoder = Decoder::new();
        for block_number in 0..200 {
            if rng.below(50) == 0 {
                // The peer changes its setting: weir's table follows, up to 4 KiB.
                let size = [0, 100, 256, 4096, 65536][rng.below(5)];
                encoder.set_peer_table_size(size);
            }
            let sent: Vec<_> = (0..rng.below(12)).map(|_| random_field(&mut rng)).collect();
            let mut out = Vec::new();
            let mut block = encoder.block(&mut out);
            for (name, value, indexing) in &sent {
                block.field(name, value, *indexing);
            }
            let mut got = Vec::new();
            decoder
                .decode(&out, |f| {
                    got.push((f.name.to_vec(), f.value.to_vec(), f.never_indexed));
                })
                .unwrap_or_else(|e| panic!("block {block_number}: {e}"));
            let want: Vec<_> = sent
                .iter()
                .map(|(n, v, i)| (n.clone(), v.clone(), *i == Indexing::Never))
                .collect();
            assert_eq!(got, want, "block {block_number}");
            assert!(decoder.table().size() <= 4096);
        }
    }
}

#[test]
fn repeated_fields_become_one_byte_each() {
    let mut encoder = Encoder::new();
    let response = [
        (&b"server"[..], &b"weir"[..], Indexing::Index),
        (b"content-type", b"text/plain", Indexing::Index),
        (
            b"date",
            b"Thu, 03 Dec 2026 10:00:00 GMT",
            Indexing::NotIndexed,
        ),
    ];
    let mut first = Vec::new();
    let mut block = encoder.block(&mut first);
    block.status(200);
    for (name, value, indexing) in response {
        block.field(name, value, indexing);
    }
    let mut second = Vec::new();
    let mut block = encoder.block(&mut second);
    block.status(200);
    for (name, value, indexing) in response {
        block.field(name, value, indexing);
    }
    // :status 200, server and content-type are one byte each; the date is a
    // literal with a static name (index 33: two bytes with a 4-bit prefix),
    // a length byte and a Huffman value.
    let date_len = 3 + super::huffman::encoded_len(b"Thu, 03 Dec 2026 10:00:00 GMT");
    assert_eq!(second.len(), 3 + date_len);
    assert!(first.len() > second.len());
    let mut decoder = Decoder::new();
    decode(&mut decoder, &first).unwrap();
    let decoded = decode(&mut decoder, &second).unwrap();
    assert_eq!(decoded[1], (b"server".to_vec(), b"weir".to_vec()));
}

#[test]
fn never_indexed_fields_stay_literal() {
    let mut encoder = Encoder::new();
    let mut out = Vec::new();
    for _ in 0..2 {
        out.clear();
        let mut block = encoder.block(&mut out);
        block.field(b"authorization", b"secret", Indexing::Never);
        // Static name index 23 with a 4-bit prefix: 0x1f 0x08; then the value.
        assert_eq!(&out[..2], &[0x1f, 0x08]);
    }
    let mut decoder = Decoder::new();
    let mut flags = Vec::new();
    decoder
        .decode(&out, |f| flags.push(f.never_indexed))
        .unwrap();
    assert_eq!(flags, vec![true]);
    assert_eq!(decoder.table().len(), 0);
}

#[test]
fn a_lowered_peer_setting_is_announced_once_with_its_minimum() {
    let mut encoder = Encoder::new();
    encoder.set_peer_table_size(0);
    encoder.set_peer_table_size(1000);
    let mut out = Vec::new();
    let mut block = encoder.block(&mut out);
    block.field(b"server", b"weir", Indexing::Index);
    // Updates to 0 then 1000 open the block.
    assert_eq!(&out[..4], &[0x20, 0x3f, 0xc9, 0x07]);
    let mut decoder = Decoder::new();
    decode(&mut decoder, &out).unwrap();
    assert_eq!(decoder.table().max_size(), 1000);
    assert_eq!(decoder.table().len(), 1);
}
