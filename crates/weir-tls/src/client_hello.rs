//! Reading a TLS ClientHello without terminating TLS, for passthrough routing by SNI and ALPN.
//!
//! A passthrough virtual server forwards the client's TLS bytes untouched to a node chosen by
//! the name the client asked for (`server_name`) and the protocols it offers (ALPN). This
//! module is the sans-IO half: [`read_client_hello`] looks at the bytes a connection has sent
//! so far and answers [`Peek::Partial`] (read more), [`Peek::Complete`] or an error. It
//! consumes nothing: the driver forwards every byte it read to the node afterwards.
//!
//! The ClientHello may arrive in any number of TCP segments and may be spread over several
//! handshake records (RFC 8446 §5.1 lets a sender fragment any handshake message); a
//! ClientHello larger than one record (post-quantum key shares, padding, many tickets) is
//! reassembled. Everything is bounded by `max_length`, the largest ClientHello message read.

/// The largest record body a plaintext TLS record may carry (RFC 8446 §5.1).
pub const MAX_RECORD_PAYLOAD: usize = 16 * 1024;
/// A sensible default for `max_length`: far above any real ClientHello (a few KiB with
/// hybrid post-quantum key shares), small enough that a client cannot make weir buffer much.
pub const DEFAULT_MAX_CLIENT_HELLO: usize = 32 * 1024;

/// The most records a ClientHello may be fragmented into. Real clients use one, or two for a
/// ClientHello past 16 KiB; tools that split it to slip past middleboxes use a few dozen at
/// most. With this bound the bytes buffered before an answer stay below `max_length` + 256
/// record headers + one record. A hello in more records is refused
/// ([`HelloError::TooManyRecords`]), never taken for a malformed one.
pub const MAX_RECORDS: usize = 256;

const RECORD_HEADER: usize = 5;
const CONTENT_HANDSHAKE: u8 = 22;
const HANDSHAKE_CLIENT_HELLO: u8 = 1;
const EXTENSION_SERVER_NAME: u16 = 0;
const EXTENSION_ALPN: u16 = 16;
const NAME_TYPE_HOST: u8 = 0;

/// What a ClientHello asks for, as far as routing goes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClientHello {
    /// The `server_name` (SNI) host name, lower-cased; `None` when the client sent none.
    pub server_name: Option<String>,
    /// ALPN protocol names in the client's order; empty when the client offered none.
    pub alpn: Vec<Vec<u8>>,
}

/// The outcome of [`read_client_hello`] on the bytes received so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Peek {
    /// The bytes are a valid beginning of a ClientHello: read more.
    Partial,
    /// The whole ClientHello was read: what routing needs from it.
    Complete(ClientHello),
}

/// Why the bytes are not a ClientHello weir can route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HelloError {
    /// The connection does not start with a TLS handshake record.
    NotTls,
    /// The first handshake message is not a ClientHello.
    NotClientHello,
    /// The ClientHello is longer than `max_length`.
    TooLarge,
    /// The ClientHello is spread over more than [`MAX_RECORDS`] records: valid TLS, but more
    /// than weir reads to route one.
    TooManyRecords,
    /// A record or the ClientHello breaks the format; the text names what.
    Malformed(&'static str),
}

impl HelloError {
    /// A stable, lower-case name for metric labels and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            HelloError::NotTls => "not_tls",
            HelloError::NotClientHello => "not_client_hello",
            HelloError::TooLarge => "too_large",
            HelloError::TooManyRecords => "too_many_records",
            HelloError::Malformed(_) => "malformed",
        }
    }
}

impl std::fmt::Display for HelloError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HelloError::NotTls => f.write_str("not a TLS handshake"),
            HelloError::NotClientHello => {
                f.write_str("first handshake message is not a ClientHello")
            }
            HelloError::TooLarge => f.write_str("ClientHello too large"),
            HelloError::TooManyRecords => {
                write!(f, "ClientHello in more than {MAX_RECORDS} records")
            }
            HelloError::Malformed(what) => write!(f, "malformed ClientHello: {what}"),
        }
    }
}

impl std::error::Error for HelloError {}

/// Reads the ClientHello at the start of `input` (all bytes the client sent so far), a
/// message of at most `max_length` bytes spread over any number of handshake records.
pub fn read_client_hello(input: &[u8], max_length: usize) -> Result<Peek, HelloError> {
    let mut message: Vec<u8> = Vec::new();
    let mut records = input;
    // The body of the ClientHello message once its 4-byte header is known.
    let mut expected: Option<usize> = None;
    for _ in 0..MAX_RECORDS {
        let Some((payload, rest)) = next_record(records)? else {
            return Ok(Peek::Partial);
        };
        records = rest;
        if message.is_empty() && expected.is_none() && payload.len() >= 4 {
            // The usual case, the whole message in the first record: no copy.
            let length = message_length(payload, max_length)?;
            if payload.len() >= 4 + length {
                return parse_message(&payload[4..4 + length]).map(Peek::Complete);
            }
        }
        message.extend_from_slice(payload);
        if expected.is_none() && message.len() >= 4 {
            expected = Some(message_length(&message, max_length)?);
        }
        if let Some(length) = expected
            && message.len() >= 4 + length
        {
            // Bytes past the ClientHello in its last record are not ours to read.
            return parse_message(&message[4..4 + length]).map(Peek::Complete);
        }
    }
    Err(HelloError::TooManyRecords)
}

/// A record's payload and the bytes after the record.
type Split<'a> = (&'a [u8], &'a [u8]);

/// The next whole handshake record's payload, and what follows it; `None` when the record
/// is not whole yet. Checks the header as soon as its bytes arrive.
fn next_record(input: &[u8]) -> Result<Option<Split<'_>>, HelloError> {
    if let Some(&content_type) = input.first()
        && content_type != CONTENT_HANDSHAKE
    {
        return Err(HelloError::NotTls);
    }
    if let Some(&major) = input.get(1)
        && major != 3
    {
        return Err(HelloError::NotTls);
    }
    let Some(header) = input.get(..RECORD_HEADER) else {
        return Ok(None);
    };
    let length = usize::from(u16::from_be_bytes([header[3], header[4]]));
    if length == 0 {
        return Err(HelloError::Malformed("empty handshake record"));
    }
    if length > MAX_RECORD_PAYLOAD {
        return Err(HelloError::Malformed("record longer than 16 KiB"));
    }
    Ok(input
        .get(RECORD_HEADER..RECORD_HEADER + length)
        .map(|payload| (payload, &input[RECORD_HEADER + length..])))
}

/// The body length of the ClientHello whose handshake header starts `message`.
fn message_length(message: &[u8], max_length: usize) -> Result<usize, HelloError> {
    if message[0] != HANDSHAKE_CLIENT_HELLO {
        return Err(HelloError::NotClientHello);
    }
    let length =
        usize::from(message[1]) << 16 | usize::from(message[2]) << 8 | usize::from(message[3]);
    if length + 4 > max_length {
        return Err(HelloError::TooLarge);
    }
    Ok(length)
}

/// A cursor over a ClientHello body; every read is bounds-checked.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], HelloError> {
        let (head, rest) = self
            .bytes
            .split_at_checked(n)
            .ok_or(HelloError::Malformed(what))?;
        self.bytes = rest;
        Ok(head)
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, HelloError> {
        Ok(self.take(1, what)?[0])
    }

    fn u16(&mut self, what: &'static str) -> Result<u16, HelloError> {
        let b = self.take(2, what)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    /// A vector with a one-byte length.
    fn vec8(&mut self, what: &'static str) -> Result<Reader<'a>, HelloError> {
        let length = self.u8(what)?;
        Ok(Reader {
            bytes: self.take(usize::from(length), what)?,
        })
    }

    /// A vector with a two-byte length.
    fn vec16(&mut self, what: &'static str) -> Result<Reader<'a>, HelloError> {
        let length = self.u16(what)?;
        Ok(Reader {
            bytes: self.take(usize::from(length), what)?,
        })
    }

    fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

/// The ClientHello body (RFC 8446 §4.1.2): version, random, session id, suites,
/// compression methods, then the extensions this module reads.
fn parse_message(body: &[u8]) -> Result<ClientHello, HelloError> {
    let mut reader = Reader { bytes: body };
    let version = reader.u16("truncated version")?;
    if version >> 8 != 3 {
        return Err(HelloError::Malformed("not a TLS version"));
    }
    reader.take(32, "truncated random")?;
    if reader.vec8("truncated session id")?.bytes.len() > 32 {
        return Err(HelloError::Malformed("session id longer than 32 bytes"));
    }
    let suites = reader.vec16("truncated cipher suites")?;
    if suites.bytes.is_empty() || suites.bytes.len() % 2 != 0 {
        return Err(HelloError::Malformed("bad cipher suite list"));
    }
    if reader.vec8("truncated compression methods")?.is_empty() {
        return Err(HelloError::Malformed("no compression method"));
    }
    let mut hello = ClientHello::default();
    if reader.is_empty() {
        // A hello without extensions (SSL 3.0-era clients): nothing to route by.
        return Ok(hello);
    }
    let mut extensions = reader.vec16("truncated extensions")?;
    if !reader.is_empty() {
        return Err(HelloError::Malformed("bytes after the extensions"));
    }
    let (mut seen_name, mut seen_alpn) = (false, false);
    while !extensions.is_empty() {
        let kind = extensions.u16("truncated extension")?;
        let mut data = extensions.vec16("truncated extension")?;
        // A repeated extension is forbidden (RFC 8446 §4.2); for the two that route, it
        // would let the node see another name than the one weir routed by.
        match kind {
            EXTENSION_SERVER_NAME if seen_name => {
                return Err(HelloError::Malformed("repeated server_name"));
            }
            EXTENSION_ALPN if seen_alpn => return Err(HelloError::Malformed("repeated ALPN")),
            EXTENSION_SERVER_NAME => {
                seen_name = true;
                hello.server_name = server_name(&mut data)?;
            }
            EXTENSION_ALPN => {
                seen_alpn = true;
                hello.alpn = alpn(&mut data)?;
            }
            _ => {}
        }
    }
    Ok(hello)
}

/// The `host_name` of a `server_name` extension (RFC 6066 §3): letters, digits, `-`, `_` and
/// dots, lower-cased, without the one trailing dot RFC 6066 says is not sent but that
/// rustls (which terminates the connection when no passthrough name matches) removes too,
/// so that a connection is one name for passthrough, rules and logs alike. Other name
/// types are skipped.
fn server_name(data: &mut Reader<'_>) -> Result<Option<String>, HelloError> {
    let mut list = data.vec16("truncated server name list")?;
    if list.is_empty() || !data.is_empty() {
        return Err(HelloError::Malformed("bad server name list"));
    }
    let mut host = None;
    while !list.is_empty() {
        let name_type = list.u8("truncated server name")?;
        let name = list.vec16("truncated server name")?.bytes;
        if name_type != NAME_TYPE_HOST {
            continue;
        }
        let name = name.strip_suffix(b".").unwrap_or(name);
        // Labels are not empty: no dot first or last (the one trailing dot is gone), none
        // after another.
        let valid = !name.is_empty()
            && name.len() <= 253
            && !name.starts_with(b".")
            && !name.ends_with(b".")
            && !name.windows(2).any(|pair| pair == b"..")
            && name
                .iter()
                .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
        if !valid || host.is_some() {
            return Err(HelloError::Malformed("bad host name"));
        }
        // Checked to be ASCII just above.
        host = Some(String::from_utf8_lossy(name).to_ascii_lowercase());
    }
    Ok(host)
}

/// The protocol names of an ALPN extension (RFC 7301 §3.1), none empty.
fn alpn(data: &mut Reader<'_>) -> Result<Vec<Vec<u8>>, HelloError> {
    let mut list = data.vec16("truncated ALPN list")?;
    if list.is_empty() || !data.is_empty() {
        return Err(HelloError::Malformed("bad ALPN list"));
    }
    let mut protocols = Vec::new();
    while !list.is_empty() {
        let name = list.vec8("truncated ALPN name")?.bytes;
        if name.is_empty() {
            return Err(HelloError::Malformed("empty ALPN name"));
        }
        protocols.push(name.to_vec());
    }
    Ok(protocols)
}

#[cfg(test)]
mod tests;
