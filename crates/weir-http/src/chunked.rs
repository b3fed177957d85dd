//! Chunked transfer coding (RFC 9112 §7.1): an incremental, strict decoder
//! and the encoder pieces.
//!
//! The decoder consumes the connection's read buffer as it goes, hands out
//! chunk data as zero-copy slices of it, and keeps only a few counters between
//! calls, so bytes may arrive in any split.

use bytes::{Buf, Bytes, BytesMut};

use crate::error::{ParseError, ParseErrorKind};
use crate::syntax::{is_field_value_char, is_token_char};

/// The last-chunk and empty trailer section.
pub const CHUNKED_END: &[u8] = b"0\r\n\r\n";

/// The smallest bound on a chunk-size line, whatever `max_trailer_bytes` says.
const MIN_SIZE_LINE: usize = 64;

/// What one call to [`ChunkedDecoder::decode`] produced.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded {
    /// Some body data (never empty).
    Data(Bytes),
    /// The buffer holds no complete piece; read more.
    NeedMore,
    /// The body ended. `trailers` holds the raw, validated trailer field lines
    /// (each ending in CRLF, without the final empty line); empty if none.
    Done {
        /// The trailer field lines, raw and validated; empty if none.
        trailers: Bytes,
    },
}

/// An incremental chunked decoder. Feed it the connection's read buffer; it
/// consumes what it decodes and leaves any bytes after the body in place.
#[derive(Debug, Clone)]
pub struct ChunkedDecoder {
    state: State,
    max_trailer_bytes: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading a chunk-size line; the first `scanned` bytes hold no LF.
    Size {
        scanned: usize,
    },
    /// Inside a chunk's data.
    Data {
        remaining: u64,
    },
    /// After a chunk's data, expecting CRLF.
    DataEnd,
    /// After the last chunk: the first `checked` bytes are validated trailer
    /// lines, and up to `scanned` there is no further LF.
    Trailers {
        checked: usize,
        scanned: usize,
    },
    Done,
}

impl ChunkedDecoder {
    /// `max_trailer_bytes` bounds the trailer section (and chunk-size lines / extensions,
    /// which may always take at least 64 bytes).
    pub fn new(max_trailer_bytes: usize) -> Self {
        ChunkedDecoder {
            state: State::Size { scanned: 0 },
            max_trailer_bytes,
        }
    }

    /// The bytes the current chunk still announces (its chunk-size line read, its data
    /// not yet all decoded): a reader with a bound on the body can refuse a chunk that
    /// declares more than the bound allows before it arrives.
    pub fn announced(&self) -> u64 {
        match self.state {
            State::Data { remaining } => remaining,
            _ => 0,
        }
    }

    /// Decodes from the front of `buf`, removing what it used.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Decoded, ParseError> {
        loop {
            match self.state {
                State::Size { scanned } => {
                    let line_limit = self.max_trailer_bytes.max(MIN_SIZE_LINE);
                    let Some(lf) = find_lf(buf, scanned) else {
                        if buf.len() > line_limit + 1 {
                            return Err(ParseError::invalid("chunk-size line too long"));
                        }
                        self.state = State::Size { scanned: buf.len() };
                        return Ok(Decoded::NeedMore);
                    };
                    if lf > line_limit + 1 {
                        return Err(ParseError::invalid("chunk-size line too long"));
                    }
                    let line = line_before(buf, 0, lf, "bare LF in chunk-size line")?;
                    let size = parse_size_line(line)?;
                    buf.advance(lf + 1);
                    self.state = match size {
                        0 => State::Trailers {
                            checked: 0,
                            scanned: 0,
                        },
                        remaining => State::Data { remaining },
                    };
                }
                State::Data { remaining } => {
                    if buf.is_empty() {
                        return Ok(Decoded::NeedMore);
                    }
                    // Bounded by buf.len(), so it fits in usize.
                    let taken = remaining.min(buf.len() as u64) as usize;
                    let data = buf.split_to(taken).freeze();
                    self.state = match remaining - taken as u64 {
                        0 => State::DataEnd,
                        remaining => State::Data { remaining },
                    };
                    return Ok(Decoded::Data(data));
                }
                State::DataEnd => match buf.as_ref() {
                    [b'\r', b'\n', ..] => {
                        buf.advance(2);
                        self.state = State::Size { scanned: 0 };
                    }
                    [] | [b'\r'] => return Ok(Decoded::NeedMore),
                    _ => return Err(ParseError::invalid("missing CRLF after chunk data")),
                },
                State::Trailers { checked, scanned } => {
                    let Some(lf) = find_lf(buf, scanned) else {
                        if buf.len() > self.max_trailer_bytes + 2 {
                            return Err(trailers_too_large());
                        }
                        self.state = State::Trailers {
                            checked,
                            scanned: buf.len(),
                        };
                        return Ok(Decoded::NeedMore);
                    };
                    // The same bound as without an LF, checked before the line
                    // is validated, so the error does not depend on how the
                    // bytes were split across reads.
                    if lf > self.max_trailer_bytes + 2 {
                        return Err(trailers_too_large());
                    }
                    let line = line_before(buf, checked, lf, "bare LF in trailer section")?;
                    if line.is_empty() {
                        let trailers = buf.split_to(checked).freeze();
                        buf.advance(2);
                        self.state = State::Done;
                        return Ok(Decoded::Done { trailers });
                    }
                    validate_trailer_line(line)?;
                    let checked = lf + 1;
                    if checked > self.max_trailer_bytes {
                        return Err(trailers_too_large());
                    }
                    self.state = State::Trailers {
                        checked,
                        scanned: checked,
                    };
                }
                State::Done => {
                    return Ok(Decoded::Done {
                        trailers: Bytes::new(),
                    });
                }
            }
        }
    }

    /// True once the terminating chunk and trailers have been consumed.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }
}

/// Appends one whole chunk (size line, data, CRLF); nothing for empty data,
/// which would read as the last chunk.
pub fn encode_chunk(data: &[u8], out: &mut BytesMut) {
    if !data.is_empty() {
        encode_chunk_header(data.len(), out);
        out.extend_from_slice(data);
        out.extend_from_slice(b"\r\n");
    }
}

/// Appends the last chunk, the raw trailer lines (each ending in CRLF, as
/// [`Decoded::Done`] returns them) and the final CRLF.
pub fn encode_last_chunk(trailers: &[u8], out: &mut BytesMut) {
    out.extend_from_slice(b"0\r\n");
    out.extend_from_slice(trailers);
    out.extend_from_slice(b"\r\n");
}

/// Appends a chunk-size line (`{len:x}\r\n`) for a chunk of `len` bytes.
/// The caller appends the data and then `\r\n`.
pub fn encode_chunk_header(len: usize, out: &mut BytesMut) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut line = [0u8; 18];
    line[16] = b'\r';
    line[17] = b'\n';
    let mut start = 16;
    let mut rest = len as u64;
    loop {
        start -= 1;
        line[start] = HEX[(rest & 0xf) as usize];
        rest >>= 4;
        if rest == 0 {
            break;
        }
    }
    out.extend_from_slice(&line[start..]);
}

fn find_lf(buf: &[u8], from: usize) -> Option<usize> {
    let rest = buf.get(from..)?;
    memchr::memchr(b'\n', rest).map(|at| from + at)
}

/// The line from `start` to the LF at `lf`, without its CRLF; the LF must
/// follow a CR.
fn line_before<'b>(
    buf: &'b [u8],
    start: usize,
    lf: usize,
    bare_lf: &'static str,
) -> Result<&'b [u8], ParseError> {
    match buf.get(start..lf) {
        Some([line @ .., b'\r']) => Ok(line),
        _ => Err(ParseError::invalid(bare_lf)),
    }
}

/// `chunk-size [ chunk-ext ]` (RFC 9112 §7.1.1), without the CRLF.
fn parse_size_line(line: &[u8]) -> Result<u64, ParseError> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 {
        return Err(ParseError::invalid("missing chunk size"));
    }
    let mut size: u64 = 0;
    for &digit in &line[..digits] {
        // Only hex digits were counted above.
        let value = (digit as char).to_digit(16).unwrap_or_default();
        size = size
            .checked_mul(16)
            .and_then(|size| size.checked_add(u64::from(value)))
            .ok_or(ParseError::invalid("chunk size overflows"))?;
    }
    check_extensions(&line[digits..])?;
    Ok(size)
}

/// `*( BWS ";" BWS name [ BWS "=" BWS ( token / quoted-string ) ] )`.
fn check_extensions(mut rest: &[u8]) -> Result<(), ParseError> {
    const BAD: ParseError = ParseError {
        kind: ParseErrorKind::Invalid,
        reason: "invalid chunk extension",
    };
    while !rest.is_empty() {
        rest = match skip_bws(rest) {
            [b';', after @ ..] => skip_bws(after),
            _ => return Err(BAD),
        };
        rest = skip_token(rest).ok_or(BAD)?;
        if let [b'=', after @ ..] = skip_bws(rest) {
            rest = match skip_bws(after) {
                [b'"', quoted @ ..] => skip_quoted(quoted).ok_or(BAD)?,
                value => skip_token(value).ok_or(BAD)?,
            };
        }
    }
    Ok(())
}

fn skip_bws(mut rest: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', after @ ..] = rest {
        rest = after;
    }
    rest
}

/// Skips a non-empty token.
fn skip_token(rest: &[u8]) -> Option<&[u8]> {
    let length = rest.iter().take_while(|&&b| is_token_char(b)).count();
    (length > 0).then(|| &rest[length..])
}

/// Skips the rest of a quoted-string whose opening quote was consumed.
fn skip_quoted(mut rest: &[u8]) -> Option<&[u8]> {
    loop {
        match rest {
            [b'"', after @ ..] => return Some(after),
            [b'\\', escaped, after @ ..] if is_field_value_char(*escaped) => rest = after,
            [byte, after @ ..] if *byte != b'\\' && is_field_value_char(*byte) => rest = after,
            _ => return None,
        }
    }
}

/// `field-name ":" OWS field-value OWS` with no obs-fold and no CTLs.
fn validate_trailer_line(line: &[u8]) -> Result<(), ParseError> {
    let name = line.iter().take_while(|&&b| is_token_char(b)).count();
    if name == 0 || line.get(name) != Some(&b':') {
        return Err(ParseError::invalid("invalid trailer field name"));
    }
    if !line[name + 1..].iter().all(|&b| is_field_value_char(b)) {
        return Err(ParseError::invalid(
            "invalid character in trailer field value",
        ));
    }
    Ok(())
}

fn trailers_too_large() -> ParseError {
    ParseError {
        kind: ParseErrorKind::HeadTooLarge,
        reason: "trailer section larger than max_trailer_bytes",
    }
}

#[cfg(test)]
mod tests;
