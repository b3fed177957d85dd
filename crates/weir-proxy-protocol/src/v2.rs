//! Version 2: a 16-byte binary preamble (signature, version and command, family and
//! transport, length), the address block, then type-length-value extensions (TLVs).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::v1::as_v6;
use crate::{Addresses, Header, ParseError, Parsed, V2_SIGNATURE, Version, agrees_with};

/// The longest v2 header accepted, preamble included. The format allows 65,551 bytes; real
/// senders put the addresses and a few TLVs (an authority, a TLS summary, a cloud endpoint id)
/// in far less, and a bound keeps a trusted but broken sender from making weir buffer 64 KiB.
pub const MAX_V2_LENGTH: usize = 4096;

const PREAMBLE: usize = 16;
const COMMAND_LOCAL: u8 = 0x0;
const COMMAND_PROXY: u8 = 0x1;
const FAMILY_UNSPEC: u8 = 0x0;
const FAMILY_INET: u8 = 0x1;
const FAMILY_INET6: u8 = 0x2;
const FAMILY_UNIX: u8 = 0x3;
const TRANSPORT_UNSPEC: u8 = 0x0;
const TRANSPORT_STREAM: u8 = 0x1;
const TRANSPORT_DGRAM: u8 = 0x2;
const INET_BLOCK: usize = 12;
const INET6_BLOCK: usize = 36;
const UNIX_BLOCK: usize = 216;
/// `PP2_TYPE_CRC32C`: a CRC32C of the whole header, computed with this TLV's 4 value bytes
/// as zeros.
const TLV_CRC32C: u8 = 0x03;
const CASTAGNOLI: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI);

pub(crate) fn parse(input: &[u8]) -> Result<Parsed, ParseError> {
    if !agrees_with(input, &V2_SIGNATURE) {
        return Err(ParseError::NotProxyProtocol);
    }
    if let Some(&version_command) = input.get(12) {
        if version_command >> 4 != 2 {
            return Err(ParseError::InvalidV2("version is not 2"));
        }
        if !matches!(version_command & 0x0f, COMMAND_LOCAL | COMMAND_PROXY) {
            return Err(ParseError::InvalidV2("unknown command"));
        }
    }
    if let Some(&family_transport) = input.get(13) {
        if family_transport >> 4 > FAMILY_UNIX {
            return Err(ParseError::InvalidV2("unknown address family"));
        }
        if family_transport & 0x0f > TRANSPORT_DGRAM {
            return Err(ParseError::InvalidV2("unknown transport"));
        }
    }
    let Some(length) = input.get(14..PREAMBLE) else {
        return Ok(Parsed::Partial);
    };
    let total = PREAMBLE + usize::from(u16::from_be_bytes([length[0], length[1]]));
    if total > MAX_V2_LENGTH {
        return Err(ParseError::TooLong);
    }
    let Some(header) = input.get(..total) else {
        return Ok(Parsed::Partial);
    };
    let addresses = if input[12] & 0x0f == COMMAND_LOCAL {
        // A connection the sender made for itself (a health check): no client to name, and
        // the receiver must ignore whatever the block holds.
        None
    } else {
        addresses(header)?
    };
    Ok(Parsed::Complete {
        header: Header {
            version: Version::V2,
            addresses,
        },
        consumed: total,
    })
}

/// The endpoints of a PROXY command's `header`, after checking its TLVs ([`check_tlvs`]).
fn addresses(header: &[u8]) -> Result<Option<Addresses>, ParseError> {
    let (family, transport) = (header[13] >> 4, header[13] & 0x0f);
    let block = &header[PREAMBLE..];
    let needed = match family {
        FAMILY_INET => INET_BLOCK,
        FAMILY_INET6 => INET6_BLOCK,
        FAMILY_UNIX => UNIX_BLOCK,
        // No addresses; the block can only hold TLVs, which nothing here reads.
        _ => return Ok(None),
    };
    if block.len() < needed {
        return Err(ParseError::InvalidV2(
            "address block shorter than its family",
        ));
    }
    check_tlvs(header, PREAMBLE + needed)?;
    if transport != TRANSPORT_STREAM {
        // A datagram or unspecified transport over a TCP connection: nothing weir can use.
        return Ok(None);
    }
    let port = |at: usize| u16::from_be_bytes([block[at], block[at + 1]]);
    let addresses = match family {
        FAMILY_INET => {
            let ip = |at: usize| {
                IpAddr::V4(Ipv4Addr::new(
                    block[at],
                    block[at + 1],
                    block[at + 2],
                    block[at + 3],
                ))
            };
            Addresses {
                source: SocketAddr::new(ip(0), port(8)),
                destination: SocketAddr::new(ip(4), port(10)),
            }
        }
        FAMILY_INET6 => {
            let ip = |at: usize| {
                let mut octets = [0u8; 16];
                octets.copy_from_slice(&block[at..at + 16]);
                IpAddr::V6(Ipv6Addr::from(octets))
            };
            Addresses {
                source: SocketAddr::new(ip(0), port(32)),
                destination: SocketAddr::new(ip(16), port(34)),
            }
        }
        // A Unix socket path names no client weir can use.
        _ => return Ok(None),
    };
    Ok(Some(addresses))
}

/// The TLVs of `header` from `start`: each a type byte, a 16-bit length and that many
/// bytes, together filling the rest of the block exactly. A `PP2_TYPE_CRC32C` TLV is
/// verified, as the specification asks of a receiver that supports it (a header whose
/// checksum does not match makes the connection invalid); the others are skipped. Only
/// PROXY headers of a known family get here: the block of a LOCAL header or of an
/// unspecified family is ignored, as the format says. A fault in the structure is reported
/// before a checksum's.
fn check_tlvs(header: &[u8], start: usize) -> Result<(), ParseError> {
    let mut rest = &header[start..];
    let mut at = start;
    let mut checksum = Ok(());
    while let [kind, high, low, tail @ ..] = rest {
        let length = usize::from(u16::from_be_bytes([*high, *low]));
        let Some(value) = tail.get(..length) else {
            return Err(ParseError::InvalidV2("TLV longer than the header"));
        };
        if *kind == TLV_CRC32C && checksum.is_ok() {
            checksum = check_crc(header, at + 3, value);
        }
        rest = &tail[length..];
        at += 3 + length;
    }
    if !rest.is_empty() {
        return Err(ParseError::InvalidV2("truncated TLV"));
    }
    checksum
}

/// Whether `value`, the CRC32C TLV's value at `field` in `header`, is the CRC32C of the whole
/// header with those 4 bytes as zeros.
fn check_crc(header: &[u8], field: usize, value: &[u8]) -> Result<(), ParseError> {
    let Ok(expected) = <[u8; 4]>::try_from(value) else {
        return Err(ParseError::InvalidV2("CRC32C TLV not 4 bytes long"));
    };
    let mut digest = CASTAGNOLI.digest();
    digest.update(&header[..field]);
    digest.update(&[0; 4]);
    digest.update(&header[field + 4..]);
    if digest.finalize() == u32::from_be_bytes(expected) {
        Ok(())
    } else {
        Err(ParseError::InvalidV2("CRC32C does not match the header"))
    }
}

/// Appends a v2 PROXY header (TCP) for a connection from `source` to `destination`. Two IPv4
/// addresses are written as `AF_INET`; otherwise both as `AF_INET6` (IPv4 in mapped form).
pub fn write_v2(source: SocketAddr, destination: SocketAddr, out: &mut Vec<u8>) {
    out.extend_from_slice(&V2_SIGNATURE);
    out.push(0x20 | COMMAND_PROXY);
    match (source.ip(), destination.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            out.push(FAMILY_INET << 4 | TRANSPORT_STREAM);
            out.extend_from_slice(&(INET_BLOCK as u16).to_be_bytes());
            out.extend_from_slice(&s.octets());
            out.extend_from_slice(&d.octets());
        }
        (s, d) => {
            out.push(FAMILY_INET6 << 4 | TRANSPORT_STREAM);
            out.extend_from_slice(&(INET6_BLOCK as u16).to_be_bytes());
            out.extend_from_slice(&as_v6(s).octets());
            out.extend_from_slice(&as_v6(d).octets());
        }
    }
    out.extend_from_slice(&source.port().to_be_bytes());
    out.extend_from_slice(&destination.port().to_be_bytes());
}

/// Appends a v2 LOCAL header: a connection the sender makes on its own behalf (a health
/// check), which the receiver serves with the connection's own addresses.
pub fn write_v2_local(out: &mut Vec<u8>) {
    out.extend_from_slice(&V2_SIGNATURE);
    out.push(0x20 | COMMAND_LOCAL);
    out.push(FAMILY_UNSPEC << 4 | TRANSPORT_UNSPEC);
    out.extend_from_slice(&0u16.to_be_bytes());
}
