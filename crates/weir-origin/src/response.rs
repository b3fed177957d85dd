//! Sans-IO response writing: status line and headers into a reused buffer, chunk framing, the
//! cached `Date` value and the static body pattern that `/bytes/N` is cut from.

use std::time::{SystemTime, UNIX_EPOCH};

/// The 64 bytes that `/bytes/N` bodies repeat: byte `i` of a body is `BODY_PATTERN[i % 64]`.
pub const BODY_PATTERN: &[u8; 64] =
    b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-\n";

/// Size of [`PATTERN_BLOCK`], a multiple of 64 so consecutive blocks continue the pattern.
pub(crate) const PATTERN_BLOCK_BYTES: usize = 64 * 1024;

/// One shared block of the body pattern; large bodies are written from it piece by piece.
pub(crate) static PATTERN_BLOCK: [u8; PATTERN_BLOCK_BYTES] = pattern_block();

/// How the response body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResponseFraming {
    /// No body by definition (1xx, 204, 304): neither Content-Length nor Transfer-Encoding.
    Bodiless,
    Length(u64),
    Chunked,
}

/// What the connection header of a response says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConnectionHeader {
    /// HTTP/1.1 kept alive: no header needed.
    Omitted,
    /// HTTP/1.0 kept alive.
    KeepAlive,
    Close,
}

/// The parts of a response head that vary per response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ResponseHead {
    pub status: u16,
    pub content_type: &'static str,
    pub framing: ResponseFraming,
    pub connection: ConnectionHeader,
    /// `Some(S)`: `Cache-Control: public, max-age=S`.
    pub max_age: Option<u64>,
}

/// The formatted `Date` value, recomputed at most once a second.
#[derive(Debug, Clone)]
pub(crate) struct DateCache {
    second: u64,
    text: [u8; 29],
}

impl ResponseHead {
    /// Appends the status line and headers, ending with the blank line.
    /// `fixed_headers` are complete `Name: value\r\n` lines sent in every response.
    pub(crate) fn write(&self, out: &mut Vec<u8>, fixed_headers: &[u8], date: &[u8]) {
        let mut code = itoa::Buffer::new();
        out.extend_from_slice(b"HTTP/1.1 ");
        out.extend_from_slice(code.format(self.status).as_bytes());
        out.push(b' ');
        out.extend_from_slice(reason(self.status).as_bytes());
        out.extend_from_slice(b"\r\nDate: ");
        out.extend_from_slice(date);
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(fixed_headers);
        if self.framing != ResponseFraming::Bodiless {
            out.extend_from_slice(b"Content-Type: ");
            out.extend_from_slice(self.content_type.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        match self.framing {
            ResponseFraming::Bodiless => {}
            ResponseFraming::Length(length) => {
                let mut digits = itoa::Buffer::new();
                out.extend_from_slice(b"Content-Length: ");
                out.extend_from_slice(digits.format(length).as_bytes());
                out.extend_from_slice(b"\r\n");
            }
            ResponseFraming::Chunked => out.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
        }
        if let Some(max_age) = self.max_age {
            let mut digits = itoa::Buffer::new();
            out.extend_from_slice(b"Cache-Control: public, max-age=");
            out.extend_from_slice(digits.format(max_age).as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        match self.connection {
            ConnectionHeader::Omitted => {}
            ConnectionHeader::KeepAlive => out.extend_from_slice(b"Connection: keep-alive\r\n"),
            ConnectionHeader::Close => out.extend_from_slice(b"Connection: close\r\n"),
        }
        out.extend_from_slice(b"\r\n");
    }
}

impl DateCache {
    pub(crate) fn new() -> DateCache {
        let second = unix_seconds();
        DateCache {
            second,
            text: http_date(second),
        }
    }

    /// Today's `Date` value, e.g. `Sun, 06 Nov 1994 08:49:37 GMT`.
    pub(crate) fn current(&mut self) -> &[u8] {
        let second = unix_seconds();
        if second != self.second {
            self.second = second;
            self.text = http_date(second);
        }
        &self.text
    }
}

/// Appends one chunk (size line, data, CRLF); an empty `data` appends nothing, since a
/// zero-size chunk would end the body.
pub(crate) fn write_chunk(out: &mut Vec<u8>, data: &[u8]) {
    if data.is_empty() {
        return;
    }
    write_chunk_size(out, data.len());
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// Appends a chunk size line: lowercase hex and CRLF.
pub(crate) fn write_chunk_size(out: &mut Vec<u8>, size: usize) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut digits = [0u8; 16];
    let mut start = digits.len();
    let mut rest = size;
    loop {
        start -= 1;
        digits[start] = HEX[rest & 0xf];
        rest >>= 4;
        if rest == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[start..]);
    out.extend_from_slice(b"\r\n");
}

/// The last chunk and the end of an (empty) trailer section.
pub(crate) const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// The reason phrase of a status code; empty for codes without a registered one.
pub(crate) fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        103 => "Early Hints",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        203 => "Non-Authoritative Information",
        204 => "No Content",
        205 => "Reset Content",
        206 => "Partial Content",
        300 => "Multiple Choices",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        416 => "Range Not Satisfiable",
        417 => "Expectation Failed",
        421 => "Misdirected Request",
        422 => "Unprocessable Content",
        425 => "Too Early",
        426 => "Upgrade Required",
        428 => "Precondition Required",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "",
    }
}

/// True for statuses whose responses never have a body.
pub(crate) fn is_bodiless(status: u16) -> bool {
    status < 200 || status == 204 || status == 304
}

const fn pattern_block() -> [u8; PATTERN_BLOCK_BYTES] {
    let mut block = [0u8; PATTERN_BLOCK_BYTES];
    let mut index = 0;
    while index < PATTERN_BLOCK_BYTES {
        block[index] = BODY_PATTERN[index % BODY_PATTERN.len()];
        index += 1;
    }
    block
}

fn unix_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

/// IMF-fixdate (RFC 9110 §5.6.7) of a Unix time in seconds, by the `httpdate` crate
/// (not weir-http's: this crate shares no HTTP code with the proxy, see ARCHITECTURE.md).
fn http_date(unix_seconds: u64) -> [u8; 29] {
    // The crate panics past 9999-12-31T23:59:59Z.
    let seconds = unix_seconds.min(253_402_300_799);
    let text = httpdate::fmt_http_date(UNIX_EPOCH + std::time::Duration::from_secs(seconds));
    let mut date = [b' '; 29];
    let len = text.len().min(date.len());
    date[..len].copy_from_slice(&text.as_bytes()[..len]);
    date
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(&http_date(0), b"Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(&http_date(784_111_777), b"Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(&http_date(951_782_400), b"Tue, 29 Feb 2000 00:00:00 GMT");
        assert_eq!(&http_date(1_709_251_199), b"Thu, 29 Feb 2024 23:59:59 GMT");
        assert_eq!(&http_date(4_102_444_800), b"Fri, 01 Jan 2100 00:00:00 GMT");
        assert_eq!(DateCache::new().current().len(), 29);
    }

    #[test]
    fn head_lines() {
        let mut out = Vec::new();
        let head = ResponseHead {
            status: 200,
            content_type: "text/plain",
            framing: ResponseFraming::Length(5),
            connection: ConnectionHeader::KeepAlive,
            max_age: None,
        };
        head.write(
            &mut out,
            b"X-Origin: a\r\n",
            b"Thu, 01 Jan 1970 00:00:00 GMT",
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HTTP/1.1 200 OK\r\nDate: Thu, 01 Jan 1970 00:00:00 GMT\r\nX-Origin: a\r\n\
             Content-Type: text/plain\r\nContent-Length: 5\r\nConnection: keep-alive\r\n\r\n"
        );
        let mut out = Vec::new();
        let head = ResponseHead {
            status: 204,
            content_type: "text/plain",
            framing: ResponseFraming::Bodiless,
            connection: ConnectionHeader::Omitted,
            max_age: None,
        };
        head.write(&mut out, b"", b"D");
        assert_eq!(out, b"HTTP/1.1 204 No Content\r\nDate: D\r\n\r\n");
        let mut out = Vec::new();
        let head = ResponseHead {
            status: 200,
            content_type: "text/plain",
            framing: ResponseFraming::Length(0),
            connection: ConnectionHeader::Omitted,
            max_age: Some(60),
        };
        head.write(&mut out, b"", b"D");
        assert_eq!(
            out,
            b"HTTP/1.1 200 OK\r\nDate: D\r\nContent-Type: text/plain\r\nContent-Length: 0\r\n\
              Cache-Control: public, max-age=60\r\n\r\n"
        );
    }

    #[test]
    fn chunks() {
        let mut out = Vec::new();
        write_chunk(&mut out, b"");
        write_chunk(&mut out, &[b'a'; 26]);
        write_chunk_size(&mut out, 0x10000);
        assert_eq!(
            out,
            [&b"1a\r\n"[..], &[b'a'; 26], b"\r\n10000\r\n"].concat()
        );
    }

    #[test]
    fn pattern_repeats_across_blocks() {
        assert_eq!(PATTERN_BLOCK_BYTES % BODY_PATTERN.len(), 0);
        assert_eq!(&PATTERN_BLOCK[64..128], BODY_PATTERN);
        assert_eq!(PATTERN_BLOCK[PATTERN_BLOCK_BYTES - 1], b'\n');
    }
}
