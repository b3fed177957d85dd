use std::net::SocketAddr;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::*;

fn addr(text: &str) -> SocketAddr {
    text.parse().expect("test address")
}

fn complete(input: &[u8]) -> (Header, usize) {
    match parse(input) {
        Ok(Parsed::Complete { header, consumed }) => (header, consumed),
        other => panic!("{:?} parsed as {other:?}", String::from_utf8_lossy(input)),
    }
}

fn tcp(source: &str, destination: &str) -> Option<Addresses> {
    Some(Addresses {
        source: addr(source),
        destination: addr(destination),
    })
}

#[test]
fn v1_tcp4_and_tcp6() {
    let input = b"PROXY TCP4 192.0.2.7 198.51.100.1 51000 443\r\nGET /";
    let (header, consumed) = complete(input);
    assert_eq!(header.version, Version::V1);
    assert_eq!(header.addresses, tcp("192.0.2.7:51000", "198.51.100.1:443"));
    assert_eq!(&input[consumed..], b"GET /");
    let (header, _) = complete(b"PROXY TCP6 2001:db8::7 ::1 0 65535\r\n");
    assert_eq!(header.addresses, tcp("[2001:db8::7]:0", "[::1]:65535"));
}

#[test]
fn v1_unknown_has_no_addresses() {
    for input in [
        &b"PROXY UNKNOWN\r\n"[..],
        b"PROXY UNKNOWN 1.2.3.4 anything at all\r\n",
    ] {
        let (header, consumed) = complete(input);
        assert_eq!((header.addresses, consumed), (None, input.len()));
    }
}

#[test]
fn v1_rejections() {
    let cases: &[(&[u8], ParseError)] = &[
        (b"GET / HTTP/1.1\r\n", ParseError::NotProxyProtocol),
        (b"PROXZ", ParseError::NotProxyProtocol),
        (
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n",
            ParseError::InvalidV1("line does not end in CRLF"),
        ),
        (
            b"PROXY TCP4 1.2.3.4 5.6.7.8 01 2\r\n",
            ParseError::InvalidV1("bad port"),
        ),
        (
            b"PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n",
            ParseError::InvalidV1("bad port"),
        ),
        (
            b"PROXY TCP4 1.2.3.4 5.6.7.8 -1 2\r\n",
            ParseError::InvalidV1("bad port"),
        ),
        (
            b"PROXY TCP4 1.2.3.04 5.6.7.8 1 2\r\n",
            ParseError::InvalidV1("bad IPv4 address"),
        ),
        (
            b"PROXY TCP4 ::1 5.6.7.8 1 2\r\n",
            ParseError::InvalidV1("bad IPv4 address"),
        ),
        (
            b"PROXY TCP6 1.2.3.4 ::1 1 2\r\n",
            ParseError::InvalidV1("bad IPv6 address"),
        ),
        (
            b"PROXY TCP4  1.2.3.4 5.6.7.8 1 2\r\n",
            ParseError::InvalidV1("extra fields"),
        ),
        (
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 3\r\n",
            ParseError::InvalidV1("extra fields"),
        ),
        (
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n",
            ParseError::InvalidV1("missing destination port"),
        ),
        (
            b"PROXY UDP4 1.2.3.4 5.6.7.8 1 2\r\n",
            ParseError::InvalidV1("unknown protocol"),
        ),
    ];
    for (input, expected) in cases {
        assert_eq!(
            parse(input),
            Err(*expected),
            "{:?}",
            String::from_utf8_lossy(input)
        );
    }
}

#[test]
fn v1_line_is_bounded() {
    let mut longest = b"PROXY UNKNOWN ".to_vec();
    longest.resize(MAX_V1_LENGTH - 2, b'x');
    longest.extend_from_slice(b"\r\n");
    assert_eq!(complete(&longest).1, MAX_V1_LENGTH);
    let mut too_long = longest[..MAX_V1_LENGTH - 2].to_vec();
    too_long.extend_from_slice(b"x\r\n");
    assert_eq!(parse(&too_long), Err(ParseError::TooLong));
    // Without an end of line in sight: partial until the limit, then too long.
    assert_eq!(parse(&too_long[..MAX_V1_LENGTH - 1]), Ok(Parsed::Partial));
    assert_eq!(parse(&too_long[..MAX_V1_LENGTH]), Err(ParseError::TooLong));
}

fn v2(command: u8, family: u8, block: &[u8]) -> Vec<u8> {
    let mut out = V2_SIGNATURE.to_vec();
    out.extend_from_slice(&[0x20 | command, family]);
    out.extend_from_slice(&(block.len() as u16).to_be_bytes());
    out.extend_from_slice(block);
    out
}

fn inet_block() -> Vec<u8> {
    let mut block = vec![192, 0, 2, 7, 198, 51, 100, 1];
    block.extend_from_slice(&51000u16.to_be_bytes());
    block.extend_from_slice(&443u16.to_be_bytes());
    block
}

#[test]
fn v2_inet_with_tlvs_skipped() {
    let mut block = inet_block();
    block.extend_from_slice(&[0x02, 0, 3, b'a', b'.', b'b', 0x04, 0, 0]);
    let mut input = v2(1, 0x11, &block);
    let length = input.len();
    input.extend_from_slice(b"payload");
    let (header, consumed) = complete(&input);
    assert_eq!(consumed, length);
    assert_eq!(header.version, Version::V2);
    assert_eq!(header.addresses, tcp("192.0.2.7:51000", "198.51.100.1:443"));
}

/// CRC32C bit by bit (reflected polynomial 0x82F63B78), independent of the crate weir uses.
fn crc32c_bitwise(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in bytes {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// An INET PROXY header with a NOOP TLV, a CRC32C TLV and an authority TLV, its checksum
/// filled in unless `corrupt`.
fn v2_with_crc(corrupt: bool) -> Vec<u8> {
    let mut block = inet_block();
    block.extend_from_slice(&[0x04, 0, 1, 0]);
    block.extend_from_slice(&[0x03, 0, 4, 0, 0, 0, 0]);
    block.extend_from_slice(&[0x02, 0, 3, b'a', b'.', b'b']);
    let mut input = v2(1, 0x11, &block);
    let field = 16 + 12 + 4 + 3;
    let crc = crc32c_bitwise(&input) ^ u32::from(corrupt);
    input[field..field + 4].copy_from_slice(&crc.to_be_bytes());
    input
}

#[test]
fn v2_crc32c_is_checked_when_present() {
    assert_eq!(crc32c_bitwise(b"123456789"), 0xE306_9283, "the check value");
    let good = v2_with_crc(false);
    let (header, consumed) = complete(&good);
    assert_eq!(consumed, good.len());
    assert_eq!(header.addresses, tcp("192.0.2.7:51000", "198.51.100.1:443"));
    assert_eq!(
        parse(&v2_with_crc(true)),
        Err(ParseError::InvalidV2("CRC32C does not match the header"))
    );
    // One bit flipped anywhere else in the header breaks the checksum too.
    let mut flipped = v2_with_crc(false);
    flipped[17] ^= 0x01;
    assert_eq!(
        parse(&flipped),
        Err(ParseError::InvalidV2("CRC32C does not match the header"))
    );
    let mut block = inet_block();
    block.extend_from_slice(&[0x03, 0, 2, 0, 0]);
    assert_eq!(
        parse(&v2(1, 0x11, &block)),
        Err(ParseError::InvalidV2("CRC32C TLV not 4 bytes long"))
    );
    // A LOCAL header's block is ignored, checksum and all.
    let mut local = v2_with_crc(true);
    local[12] = 0x20;
    assert_eq!(complete(&local).0.addresses, None);
}

#[test]
fn v2_local_unspec_unix_and_dgram_have_no_addresses() {
    let unix = vec![0u8; 216];
    for input in [
        v2(0, 0x11, &[0xff; 3]),
        v2(1, 0x00, &[]),
        v2(1, 0x31, &unix),
        v2(1, 0x12, &inet_block()),
        v2(1, 0x10, &inet_block()),
    ] {
        let (header, consumed) = complete(&input);
        assert_eq!(
            (header.addresses, consumed),
            (None, input.len()),
            "{input:?}"
        );
    }
}

#[test]
fn v2_rejections() {
    let mut bad_version = v2(1, 0x11, &inet_block());
    bad_version[12] = 0x11;
    let mut block = inet_block();
    block.extend_from_slice(&[0x02, 0]);
    let truncated_tlv = v2(1, 0x11, &block);
    block.extend_from_slice(&[9, b'x']);
    let overrun = v2(1, 0x11, &block);
    let mut too_long = v2(1, 0x11, &inet_block());
    too_long[14..16].copy_from_slice(&(MAX_V2_LENGTH as u16).to_be_bytes());
    let cases = [
        (bad_version, ParseError::InvalidV2("version is not 2")),
        (
            v2(2, 0x11, &inet_block()),
            ParseError::InvalidV2("unknown command"),
        ),
        (
            v2(1, 0x41, &inet_block()),
            ParseError::InvalidV2("unknown address family"),
        ),
        (
            v2(1, 0x13, &inet_block()),
            ParseError::InvalidV2("unknown transport"),
        ),
        (
            v2(1, 0x21, &inet_block()),
            ParseError::InvalidV2("address block shorter than its family"),
        ),
        (truncated_tlv, ParseError::InvalidV2("truncated TLV")),
        (overrun, ParseError::InvalidV2("TLV longer than the header")),
        (too_long, ParseError::TooLong),
    ];
    for (input, expected) in cases {
        assert_eq!(parse(&input), Err(expected), "{input:?}");
    }
}

#[test]
fn emitted_headers_parse_back_in_both_versions() {
    let pairs = [
        (
            "192.0.2.7:51000",
            "198.51.100.1:443",
            "192.0.2.7:51000",
            "198.51.100.1:443",
        ),
        ("[2001:db8::7]:1", "[::1]:2", "[2001:db8::7]:1", "[::1]:2"),
        // Mixed families: both written as IPv6, the IPv4 one mapped.
        ("192.0.2.7:1", "[::1]:2", "[::ffff:192.0.2.7]:1", "[::1]:2"),
    ];
    for (source, destination, expected_source, expected_destination) in pairs {
        for write in [write_v1, write_v2] {
            let mut out = Vec::new();
            write(addr(source), addr(destination), &mut out);
            let (header, consumed) = complete(&out);
            assert_eq!(consumed, out.len());
            assert_eq!(header.addresses, tcp(expected_source, expected_destination));
        }
    }
    let mut local = Vec::new();
    write_v2_local(&mut local);
    assert_eq!(
        complete(&local),
        (
            Header {
                version: Version::V2,
                addresses: None
            },
            16
        )
    );
}

/// Every header fed one byte short of whole, at every length: partial, never wrong.
#[test]
fn truncated_headers_are_partial_at_every_length() {
    let mut inputs = Vec::new();
    for write in [write_v1, write_v2] {
        let mut out = Vec::new();
        write(addr("[2001:db8::7]:51000"), addr("[::1]:443"), &mut out);
        inputs.push(out);
    }
    let mut block = inet_block();
    block.extend_from_slice(&[0x20, 0, 1, 0x05]);
    inputs.push(v2(1, 0x11, &block));
    for input in inputs {
        let whole = complete(&input);
        for end in 0..input.len() {
            assert_eq!(
                parse(&input[..end]),
                Ok(Parsed::Partial),
                "{end} of {input:?}"
            );
        }
        assert_eq!(complete(&input), whole);
    }
}

/// Random bytes, random bytes behind each signature and corrupted valid headers: an answer
/// every time (no panic), and one a longer input never contradicts.
#[test]
fn random_and_corrupted_inputs_get_a_clean_answer() {
    let mut rng = SmallRng::seed_from_u64(13);
    let mut valid = Vec::new();
    write_v2(addr("192.0.2.7:1"), addr("198.51.100.1:2"), &mut valid);
    let mut valid_v1 = Vec::new();
    write_v1(addr("192.0.2.7:1"), addr("198.51.100.1:2"), &mut valid_v1);
    for round in 0..20_000 {
        let mut input: Vec<u8> = match round % 4 {
            0 => (0..rng.random_range(0..64)).map(|_| rng.random()).collect(),
            1 => V2_SIGNATURE
                .iter()
                .copied()
                .chain((0..rng.random_range(0..80)).map(|_| rng.random()))
                .collect(),
            2 => V1_PREFIX
                .iter()
                .copied()
                .chain((0..rng.random_range(0..120)).map(|_| rng.random_range(b' '..=b'z')))
                .collect(),
            _ => {
                if rng.random() {
                    valid.clone()
                } else {
                    valid_v1.clone()
                }
            }
        };
        if round % 4 == 3 {
            let at = rng.random_range(0..input.len());
            input[at] = rng.random();
            input.truncate(rng.random_range(0..=input.len()));
        }
        let outcome = parse(&input);
        for end in 0..input.len() {
            let prefix = parse(&input[..end]);
            assert!(
                prefix == Ok(Parsed::Partial) || prefix == outcome,
                "{input:?}"
            );
        }
        if let Ok(Parsed::Complete { consumed, .. }) = outcome {
            assert!(consumed <= input.len());
        }
    }
}
