//! The PROXY protocol (HAProxy's `proxy-protocol.txt`, versions 1 and 2) as a sans-IO codec.
//!
//! A proxy in front of weir (or weir in front of a node) opens each TCP connection with one
//! header that names the original client and the address it connected to. [`parse`] reads that
//! header from the first bytes of a connection, as many as have arrived: it answers
//! [`Parsed::Partial`] until the header is whole, then [`Parsed::Complete`] with the addresses
//! and the number of bytes the header took (everything after belongs to the application).
//! [`write_v1`] and [`write_v2`] emit a header for a connection weir opens.
//!
//! Limits are strict and fixed: a v1 line is at most 107 bytes, a v2 header at most
//! [`MAX_V2_LENGTH`] bytes; v2 TLVs are checked for structure, a CRC32C TLV is verified, the rest are skipped. Nothing here
//! allocates on the parse path or panics on any input.
//!
//! ```
//! use weir_proxy_protocol::{parse, write_v2, Parsed};
//!
//! let client = "192.0.2.7:51000".parse().unwrap();
//! let local = "198.51.100.1:443".parse().unwrap();
//! let mut header = Vec::new();
//! write_v2(client, local, &mut header);
//! header.extend_from_slice(b"GET / HTTP/1.1\r\n");
//! match parse(&header) {
//!     Ok(Parsed::Complete { header: h, consumed }) => {
//!         assert_eq!(h.source(), Some(client));
//!         assert_eq!(&header[consumed..consumed + 3], b"GET");
//!     }
//!     other => panic!("{other:?}"),
//! }
//! ```

use std::fmt;
use std::net::SocketAddr;

mod v1;
mod v2;

pub use v1::{MAX_V1_LENGTH, write_v1, write_v1_unknown};
pub use v2::{MAX_V2_LENGTH, write_v2, write_v2_local};

/// The protocol version a header was written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// The text form (`PROXY TCP4 ...\r\n`).
    V1,
    /// The binary form (12-byte signature, then a block).
    V2,
}

/// A parsed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The form the header was written in.
    pub version: Version,
    /// The connection's original endpoints, or `None` when the sender says it has none to
    /// give (v1 `UNKNOWN`, v2 `LOCAL` such as a health check, or a family or transport
    /// other than TCP over IPv4/IPv6): the receiver then uses the connection's own addresses.
    pub addresses: Option<Addresses>,
}

/// The endpoints a header carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Addresses {
    /// The original client.
    pub source: SocketAddr,
    /// The address the client connected to.
    pub destination: SocketAddr,
}

/// The outcome of [`parse`] on the bytes received so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed {
    /// A whole header: it took the first `consumed` bytes.
    Complete {
        /// The header read.
        header: Header,
        /// Its length in bytes: the connection's data starts after them.
        consumed: usize,
    },
    /// What arrived is a valid beginning of a header: read more.
    Partial,
}

/// Why the bytes are not a valid header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    /// The connection does not start with either version's signature.
    NotProxyProtocol,
    /// A v1 line that breaks the grammar; the text names what.
    InvalidV1(&'static str),
    /// A v2 header that breaks the format; the text names what.
    InvalidV2(&'static str),
    /// A header longer than the limit ([`MAX_V1_LENGTH`], [`MAX_V2_LENGTH`]).
    TooLong,
}

/// The 12-byte signature that opens a v2 header.
pub const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";
/// What opens a v1 header.
pub const V1_PREFIX: &[u8] = b"PROXY ";

/// Reads a PROXY protocol header (either version) from the start of `input`.
pub fn parse(input: &[u8]) -> Result<Parsed, ParseError> {
    let Some(&first) = input.first() else {
        return Ok(Parsed::Partial);
    };
    match first {
        b'P' => v1::parse(input),
        b'\r' => v2::parse(input),
        _ => Err(ParseError::NotProxyProtocol),
    }
}

impl Header {
    /// The original client, when the header carries one.
    pub fn source(&self) -> Option<SocketAddr> {
        self.addresses.map(|a| a.source)
    }
}

impl ParseError {
    /// A stable, lower-case name for metric labels and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            ParseError::NotProxyProtocol => "missing",
            ParseError::InvalidV1(_) | ParseError::InvalidV2(_) => "malformed",
            ParseError::TooLong => "too_long",
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::NotProxyProtocol => f.write_str("no PROXY protocol header"),
            ParseError::InvalidV1(what) => write!(f, "invalid PROXY v1 header: {what}"),
            ParseError::InvalidV2(what) => write!(f, "invalid PROXY v2 header: {what}"),
            ParseError::TooLong => f.write_str("PROXY protocol header too long"),
        }
    }
}

impl std::error::Error for ParseError {}

/// Whether `input` is a prefix of `expected` (or `expected` a prefix of it).
fn agrees_with(input: &[u8], expected: &[u8]) -> bool {
    let n = input.len().min(expected.len());
    input[..n] == expected[..n]
}

#[cfg(test)]
mod tests;
