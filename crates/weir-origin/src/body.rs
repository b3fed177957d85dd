//! Sans-IO request body decoding for Content-Length and chunked framing, so a connection reads
//! exactly one body (to discard it or keep it for `/echo`) and stays in step for the next request.

/// Chunk extensions longer than this are refused.
const MAX_EXTENSION_BYTES: usize = 4 * 1024;
/// Trailer sections longer than this are refused.
const MAX_TRAILER_BYTES: usize = 16 * 1024;
/// Hex digits in one chunk size (leading zeros included).
const MAX_SIZE_DIGITS: u32 = 32;

/// Reads one body, piece by piece, from whatever bytes have arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BodyDecoder {
    state: State,
}

/// Why a chunked body was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BodyError {
    #[error("invalid chunk size line")]
    InvalidChunkSize,
    #[error("chunk size too large")]
    ChunkSizeOverflow,
    #[error("chunk data not followed by CRLF")]
    MissingChunkDelimiter,
    #[error("chunk extension or trailer section too long")]
    TooLong,
    #[error("bare LF or stray byte in chunk framing")]
    InvalidLineEnding,
}

/// The decoder's place in the body; chunked states follow RFC 9112 §7.1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Length {
        remaining: u64,
    },
    /// Hex digits of a chunk size.
    Size {
        size: u64,
        digits: u32,
    },
    /// After the size: optional whitespace and `;extension` up to CR.
    Extension {
        size: u64,
        length: usize,
    },
    /// CR of the size line seen; LF expected.
    SizeLf {
        size: u64,
    },
    Data {
        remaining: u64,
    },
    DataCr,
    DataLf,
    /// At the start of a trailer line or of the final empty line.
    TrailerStart {
        length: usize,
    },
    Trailer {
        length: usize,
    },
    TrailerLf {
        length: usize,
    },
    /// CR of the final empty line seen; LF expected.
    EndLf,
    Done,
}

impl BodyDecoder {
    pub(crate) fn length(length: u64) -> BodyDecoder {
        let state = if length == 0 {
            State::Done
        } else {
            State::Length { remaining: length }
        };
        BodyDecoder { state }
    }

    pub(crate) fn chunked() -> BodyDecoder {
        BodyDecoder {
            state: State::Size { size: 0, digits: 0 },
        }
    }

    pub(crate) fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Consumes body bytes from the start of `input`, appending the payload to `sink` when
    /// given, and returns how many bytes of `input` belonged to the body. Stops at the body's
    /// end, so what follows (a pipelined request) is left unconsumed.
    pub(crate) fn decode(
        &mut self,
        input: &[u8],
        mut sink: Option<&mut Vec<u8>>,
    ) -> Result<usize, BodyError> {
        let mut position = 0;
        while position < input.len() {
            match self.state {
                State::Done => break,
                State::Length { remaining } | State::Data { remaining } => {
                    let take = clamp(remaining, input.len() - position);
                    if let Some(sink) = sink.as_deref_mut() {
                        sink.extend_from_slice(&input[position..position + take]);
                    }
                    position += take;
                    let remaining = remaining - take as u64;
                    self.state = match self.state {
                        State::Length { .. } if remaining == 0 => State::Done,
                        State::Length { .. } => State::Length { remaining },
                        _ if remaining == 0 => State::DataCr,
                        _ => State::Data { remaining },
                    };
                }
                _ => {
                    self.state = self.step(input[position])?;
                    position += 1;
                }
            }
        }
        Ok(position)
    }

    /// One byte of chunk framing.
    fn step(&self, byte: u8) -> Result<State, BodyError> {
        let next = match self.state {
            State::Size { size, digits } => match hex_value(byte) {
                Some(value) if digits < MAX_SIZE_DIGITS => State::Size {
                    size: size
                        .checked_mul(16)
                        .and_then(|size| size.checked_add(value))
                        .ok_or(BodyError::ChunkSizeOverflow)?,
                    digits: digits + 1,
                },
                Some(_) => return Err(BodyError::ChunkSizeOverflow),
                None if digits == 0 => return Err(BodyError::InvalidChunkSize),
                None if byte == b'\r' => State::SizeLf { size },
                None if matches!(byte, b';' | b' ' | b'\t') => State::Extension { size, length: 1 },
                None => return Err(BodyError::InvalidChunkSize),
            },
            State::Extension { size, length } => match byte {
                b'\r' => State::SizeLf { size },
                b'\n' => return Err(BodyError::InvalidLineEnding),
                _ if length >= MAX_EXTENSION_BYTES => return Err(BodyError::TooLong),
                _ => State::Extension {
                    size,
                    length: length + 1,
                },
            },
            State::SizeLf { size: 0 } if byte == b'\n' => State::TrailerStart { length: 0 },
            State::SizeLf { size } if byte == b'\n' => State::Data { remaining: size },
            State::DataCr if byte == b'\r' => State::DataLf,
            State::DataLf if byte == b'\n' => State::Size { size: 0, digits: 0 },
            State::DataCr | State::DataLf => return Err(BodyError::MissingChunkDelimiter),
            State::TrailerStart { .. } if byte == b'\r' => State::EndLf,
            State::TrailerStart { length } | State::Trailer { length } => match byte {
                b'\r' => State::TrailerLf { length },
                b'\n' => return Err(BodyError::InvalidLineEnding),
                _ if length >= MAX_TRAILER_BYTES => return Err(BodyError::TooLong),
                _ => State::Trailer { length: length + 1 },
            },
            State::TrailerLf { length } if byte == b'\n' => State::TrailerStart { length },
            State::EndLf if byte == b'\n' => State::Done,
            State::SizeLf { .. } | State::TrailerLf { .. } | State::EndLf => {
                return Err(BodyError::InvalidLineEnding);
            }
            // Bulk states are handled by `decode` and never reach here.
            State::Length { .. } | State::Data { .. } | State::Done => self.state,
        };
        Ok(next)
    }
}

fn hex_value(byte: u8) -> Option<u64> {
    match byte {
        b'0'..=b'9' => Some(u64::from(byte - b'0')),
        b'a'..=b'f' => Some(u64::from(byte - b'a' + 10)),
        b'A'..=b'F' => Some(u64::from(byte - b'A' + 10)),
        _ => None,
    }
}

/// The smaller of a body count and a buffer length, as a buffer length.
fn clamp(remaining: u64, available: usize) -> usize {
    usize::try_from(remaining).map_or(available, |remaining| remaining.min(available))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes `input` fed in pieces of `step` bytes; returns (payload, bytes consumed).
    fn decode_in_pieces(
        mut decoder: BodyDecoder,
        input: &[u8],
        step: usize,
    ) -> Result<(Vec<u8>, usize), BodyError> {
        let mut payload = Vec::new();
        let mut consumed = 0;
        while !decoder.is_done() && consumed < input.len() {
            let end = (consumed + step).min(input.len());
            let used = decoder.decode(&input[consumed..end], Some(&mut payload))?;
            assert!(
                decoder.is_done() || used == end - consumed,
                "consumes all until done"
            );
            consumed += used;
        }
        assert!(decoder.is_done(), "body incomplete");
        Ok((payload, consumed))
    }

    #[test]
    fn content_length_stops_at_the_body_end() {
        let input = b"hello worldGET / HTTP/1.1";
        for step in [1, 3, input.len()] {
            let (payload, consumed) =
                decode_in_pieces(BodyDecoder::length(11), input, step).unwrap();
            assert_eq!(payload, b"hello world");
            assert_eq!(consumed, 11);
        }
        assert!(BodyDecoder::length(0).is_done());
    }

    #[test]
    fn chunked_with_extensions_and_trailers() {
        let input = b"5;name=value\r\nhello\r\n6\r\n world\r\nA \r\n0123456789\r\n0\r\nX-Trailer: t\r\n\r\nNEXT";
        for step in [1, 2, 7, input.len()] {
            let (payload, consumed) =
                decode_in_pieces(BodyDecoder::chunked(), input, step).unwrap();
            assert_eq!(payload, b"hello world0123456789");
            assert_eq!(consumed, input.len() - 4);
        }
    }

    #[test]
    fn chunked_without_payload() {
        let (payload, consumed) =
            decode_in_pieces(BodyDecoder::chunked(), b"0\r\n\r\n", 1).unwrap();
        assert!(payload.is_empty());
        assert_eq!(consumed, 5);
    }

    #[test]
    fn refuses_bad_chunk_framing() {
        let cases: [(&[u8], BodyError); 7] = [
            (b"\r\n", BodyError::InvalidChunkSize),
            (b"x\r\n", BodyError::InvalidChunkSize),
            (b"5\nhello\r\n", BodyError::InvalidChunkSize),
            (b"5\r\nhelloXX", BodyError::MissingChunkDelimiter),
            (b"5;ext\nhello", BodyError::InvalidLineEnding),
            (b"0\r\n\n", BodyError::InvalidLineEnding),
            (b"11111111111111111\r\n", BodyError::ChunkSizeOverflow),
        ];
        for (input, expected) in cases {
            let mut decoder = BodyDecoder::chunked();
            assert_eq!(
                decoder.decode(input, None),
                Err(expected),
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn refuses_endless_trailers() {
        let mut decoder = BodyDecoder::chunked();
        let trailer = vec![b'a'; MAX_TRAILER_BYTES + 1];
        assert_eq!(decoder.decode(b"0\r\n", None), Ok(3));
        assert_eq!(decoder.decode(&trailer, None), Err(BodyError::TooLong));
    }
}
