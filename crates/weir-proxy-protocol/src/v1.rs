//! Version 1: one line of text, `PROXY TCP4 192.0.2.7 198.51.100.1 51000 443\r\n`.

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::{Addresses, Header, ParseError, Parsed, V1_PREFIX, Version, agrees_with};

/// The longest v1 line the specification allows, CRLF included.
pub const MAX_V1_LENGTH: usize = 107;

pub(crate) fn parse(input: &[u8]) -> Result<Parsed, ParseError> {
    if !agrees_with(input, V1_PREFIX) {
        return Err(ParseError::NotProxyProtocol);
    }
    let window = &input[..input.len().min(MAX_V1_LENGTH)];
    let Some(newline) = window.iter().position(|&b| b == b'\n') else {
        return if input.len() >= MAX_V1_LENGTH {
            Err(ParseError::TooLong)
        } else {
            Ok(Parsed::Partial)
        };
    };
    if newline == 0 || window[newline - 1] != b'\r' {
        return Err(ParseError::InvalidV1("line does not end in CRLF"));
    }
    let line = &window[..newline - 1];
    let header = parse_line(line)?;
    Ok(Parsed::Complete {
        header,
        consumed: newline + 1,
    })
}

/// The line without its CRLF.
fn parse_line(line: &[u8]) -> Result<Header, ParseError> {
    let rest = line
        .strip_prefix(V1_PREFIX)
        .ok_or(ParseError::NotProxyProtocol)?;
    if rest == b"UNKNOWN" || rest.starts_with(b"UNKNOWN ") {
        // The sender has no addresses to give; whatever follows is ignored by definition.
        return Ok(Header {
            version: Version::V1,
            addresses: None,
        });
    }
    let mut fields = rest.split(|&b| b == b' ');
    let mut next = |what| fields.next().ok_or(ParseError::InvalidV1(what));
    let family = next("missing protocol")?;
    let (source, destination) = (next("missing source")?, next("missing destination")?);
    let (source_port, destination_port) = (
        next("missing source port")?,
        next("missing destination port")?,
    );
    if fields.next().is_some() {
        return Err(ParseError::InvalidV1("extra fields"));
    }
    let (source, destination) = match family {
        b"TCP4" => (IpAddr::V4(ipv4(source)?), IpAddr::V4(ipv4(destination)?)),
        b"TCP6" => (IpAddr::V6(ipv6(source)?), IpAddr::V6(ipv6(destination)?)),
        _ => return Err(ParseError::InvalidV1("unknown protocol")),
    };
    Ok(Header {
        version: Version::V1,
        addresses: Some(Addresses {
            source: SocketAddr::new(source, port(source_port)?),
            destination: SocketAddr::new(destination, port(destination_port)?),
        }),
    })
}

fn ipv4(field: &[u8]) -> Result<Ipv4Addr, ParseError> {
    // The standard parser is strict: four decimal octets, no leading zeros.
    std::str::from_utf8(field)
        .ok()
        .and_then(|text| text.parse().ok())
        .ok_or(ParseError::InvalidV1("bad IPv4 address"))
}

fn ipv6(field: &[u8]) -> Result<Ipv6Addr, ParseError> {
    std::str::from_utf8(field)
        .ok()
        .and_then(|text| text.parse().ok())
        .ok_or(ParseError::InvalidV1("bad IPv6 address"))
}

/// A decimal port, 0 to 65535, without a leading zero.
fn port(field: &[u8]) -> Result<u16, ParseError> {
    const BAD: ParseError = ParseError::InvalidV1("bad port");
    let digits = !field.is_empty() && field.len() <= 5 && field.iter().all(u8::is_ascii_digit);
    if !digits || (field.len() > 1 && field[0] == b'0') {
        return Err(BAD);
    }
    let value = field
        .iter()
        .fold(0u32, |n, &d| n * 10 + u32::from(d - b'0'));
    u16::try_from(value).map_err(|_| BAD)
}

/// Appends a v1 line for a connection from `source` to `destination`. Two IPv4 addresses give
/// `TCP4`; otherwise both are written as IPv6 (an IPv4 one in its mapped form) under `TCP6`.
pub fn write_v1(source: SocketAddr, destination: SocketAddr, out: &mut Vec<u8>) {
    // Writing to a Vec cannot fail.
    let _ = match (source.ip(), destination.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => write!(
            out,
            "PROXY TCP4 {s} {d} {} {}\r\n",
            source.port(),
            destination.port()
        ),
        (s, d) => write!(
            out,
            "PROXY TCP6 {} {} {} {}\r\n",
            as_v6(s),
            as_v6(d),
            source.port(),
            destination.port()
        ),
    };
}

/// Appends the v1 line for a connection the sender makes on its own behalf (a health
/// check): `PROXY UNKNOWN`, which the receiver serves with the connection's own addresses.
pub fn write_v1_unknown(out: &mut Vec<u8>) {
    out.extend_from_slice(b"PROXY UNKNOWN\r\n");
}

pub(crate) fn as_v6(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}
