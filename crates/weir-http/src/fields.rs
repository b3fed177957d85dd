//! Header-field rules shared by requests, responses and trailers: which fields
//! matter to framing and forwarding, how their values are read, and the
//! strictness checks that `httparse` leaves to us (bare LF, obs-fold reasons).

use crate::error::{ParseError, ParseErrorKind};
use crate::message::{ConnectionInfo, Version};
use crate::syntax::{is_token_char, is_valid_host, list_elements};

/// The fields the codec itself interprets; everything else is `Other`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FieldKind {
    Other,
    Host,
    ContentLength,
    TransferEncoding,
    Connection,
    KeepAlive,
    ProxyConnection,
    Te,
    Upgrade,
    Expect,
    XForwardedFor,
    XForwardedProto,
    Via,
}

impl FieldKind {
    /// Classifies a field name (ASCII case-insensitive). Dispatches on length
    /// first so most names cost one comparison at most.
    pub(crate) fn of(name: &[u8]) -> FieldKind {
        let is = |expected: &[u8]| name.eq_ignore_ascii_case(expected);
        match name.len() {
            2 if is(b"te") => FieldKind::Te,
            3 if is(b"via") => FieldKind::Via,
            4 if is(b"host") => FieldKind::Host,
            6 if is(b"expect") => FieldKind::Expect,
            7 if is(b"upgrade") => FieldKind::Upgrade,
            10 if is(b"connection") => FieldKind::Connection,
            10 if is(b"keep-alive") => FieldKind::KeepAlive,
            14 if is(b"content-length") => FieldKind::ContentLength,
            15 if is(b"x-forwarded-for") => FieldKind::XForwardedFor,
            16 if is(b"proxy-connection") => FieldKind::ProxyConnection,
            17 if is(b"transfer-encoding") => FieldKind::TransferEncoding,
            17 if is(b"x-forwarded-proto") => FieldKind::XForwardedProto,
            _ => FieldKind::Other,
        }
    }
}

/// One header field: byte ranges into the head's raw bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub(crate) name: (u32, u32),
    pub(crate) value: (u32, u32),
    pub(crate) kind: FieldKind,
}

/// What the header section says, gathered in one pass over the fields.
#[derive(Debug, Default)]
pub(crate) struct Fields {
    pub(crate) headers: Vec<Header>,
    pub(crate) content_length: Option<u64>,
    pub(crate) transfer_encoding: TransferCodings,
    /// Index of the first `Host` field and how many there were.
    pub(crate) host: Option<usize>,
    pub(crate) host_count: u32,
    pub(crate) connection: ConnectionInfo,
    /// `Connection` names a field other than close/keep-alive/upgrade.
    pub(crate) connection_names_fields: bool,
    pub(crate) expect_continue: bool,
    /// An `Expect` expectation other than `100-continue` (→ 417).
    pub(crate) expect_other: bool,
    /// A field name holds `_`: CGI-style back ends read `Content_Length` as
    /// `Content-Length`, so the proxy rejects or drops such fields.
    pub(crate) underscore_names: bool,
}

/// The `Transfer-Encoding` fields, all combined.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct TransferCodings {
    present: bool,
    codings: u32,
    chunked: u32,
    last_is_chunked: bool,
    other: bool,
}

/// How the header section declares the body, before status/method rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Declared {
    Chunked,
    Length(u64),
    Nothing,
}

/// The `timeout` parameter of a `Keep-Alive` field value (`timeout=5, max=100`; the
/// value may be quoted), in whole seconds as sent. `None` without one, or with one that is
/// not a number.
pub(crate) fn keep_alive_timeout(value: &[u8]) -> Option<std::time::Duration> {
    list_elements(value).find_map(|parameter| {
        let (name, seconds) = parameter.split_at(memchr::memchr(b'=', parameter)?);
        if !crate::syntax::trim_ows(name).eq_ignore_ascii_case(b"timeout") {
            return None;
        }
        let seconds = crate::syntax::trim_ows(&seconds[1..]);
        let seconds = seconds
            .strip_prefix(b"\"")
            .and_then(|quoted| quoted.strip_suffix(b"\""))
            .unwrap_or(seconds);
        if seconds.is_empty() || seconds.len() > 9 || !seconds.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let seconds = std::str::from_utf8(seconds).ok()?.parse().ok()?;
        Some(std::time::Duration::from_secs(seconds))
    })
}

impl Fields {
    /// Reads the fields `httparse` found. `base` is the address of the first
    /// byte of the head, so spans are offsets from it.
    pub(crate) fn scan(
        base: usize,
        head_len: usize,
        parsed: &[httparse::Header<'_>],
    ) -> Result<Fields, ParseError> {
        let mut fields = Fields {
            headers: Vec::with_capacity(parsed.len()),
            ..Fields::default()
        };
        for field in parsed {
            let name = span_of(base, head_len, field.name.as_bytes())?;
            let value = span_of(base, head_len, field.value)?;
            let kind = FieldKind::of(field.name.as_bytes());
            match kind {
                FieldKind::ContentLength => {
                    if fields.content_length.is_some() {
                        return Err(ParseError::invalid("duplicate Content-Length"));
                    }
                    let length = parse_content_length(field.value)
                        .ok_or(ParseError::invalid("invalid Content-Length value"))?;
                    fields.content_length = Some(length);
                }
                FieldKind::TransferEncoding => fields.transfer_encoding.add(field.value),
                FieldKind::Host => {
                    if !is_valid_host(field.value) {
                        return Err(ParseError::invalid("invalid Host value"));
                    }
                    if fields.host.is_none() {
                        fields.host = Some(fields.headers.len());
                    }
                    fields.host_count += 1;
                }
                FieldKind::Connection => {
                    for token in list_elements(field.value) {
                        if token.eq_ignore_ascii_case(b"close") {
                            fields.connection.close = true;
                        } else if token.eq_ignore_ascii_case(b"keep-alive") {
                            fields.connection.keep_alive = true;
                        } else if token.eq_ignore_ascii_case(b"upgrade") {
                            fields.connection.upgrade = true;
                        } else {
                            fields.connection_names_fields = true;
                        }
                    }
                }
                FieldKind::Expect => {
                    for expectation in list_elements(field.value) {
                        if expectation.eq_ignore_ascii_case(b"100-continue") {
                            fields.expect_continue = true;
                        } else {
                            fields.expect_other = true;
                        }
                    }
                }
                FieldKind::Other => {
                    fields.underscore_names |=
                        memchr::memchr(b'_', field.name.as_bytes()).is_some();
                }
                _ => {}
            }
            fields.headers.push(Header { name, value, kind });
        }
        Ok(fields)
    }

    /// Applies the framing rules that hold for any message (RFC 9112 §6.1, §6.3):
    /// no `Transfer-Encoding` in HTTP/1.0, never both it and `Content-Length`,
    /// and `chunked` as the one and only transfer coding.
    pub(crate) fn declared_body(&self, version: Version) -> Result<Declared, ParseError> {
        self.declared(version, true)
    }

    /// [`Fields::declared_body`] for a response that has no body whatever it declares
    /// (to HEAD, 1xx, 204, 304): RFC 9112 §6.1 lets a response to HEAD or a 304 name the
    /// codings the body would have had, so which codings they are is not checked; a
    /// `Transfer-Encoding` only says a chunked body would follow.
    pub(crate) fn declared_without_body(&self, version: Version) -> Result<Declared, ParseError> {
        self.declared(version, false)
    }

    fn declared(&self, version: Version, body_follows: bool) -> Result<Declared, ParseError> {
        let codings = self.transfer_encoding;
        if !codings.present {
            return Ok(match self.content_length {
                Some(length) => Declared::Length(length),
                None => Declared::Nothing,
            });
        }
        if version == Version::Http10 {
            return Err(ParseError::invalid(
                "Transfer-Encoding in an HTTP/1.0 message",
            ));
        }
        if self.content_length.is_some() {
            return Err(ParseError::invalid(
                "both Content-Length and Transfer-Encoding",
            ));
        }
        if codings.codings == 0 {
            return Err(ParseError::invalid("empty Transfer-Encoding"));
        }
        if !body_follows {
            return Ok(Declared::Chunked);
        }
        // RFC 9112 §6.3: without chunked last, the length cannot be known (400 and
        // close, not 501); chunked twice is never sent (§7.1). Only a coding weir
        // does not implement before a final chunked is "not implemented" (§6.1).
        if !codings.last_is_chunked {
            return Err(ParseError::invalid("final transfer coding is not chunked"));
        }
        if codings.chunked > 1 {
            return Err(ParseError::invalid("chunked applied more than once"));
        }
        if codings.other {
            return Err(unsupported_coding("transfer coding other than chunked"));
        }
        Ok(Declared::Chunked)
    }
}

impl TransferCodings {
    fn add(&mut self, value: &[u8]) {
        self.present = true;
        for coding in list_elements(value) {
            self.codings += 1;
            self.last_is_chunked = coding.eq_ignore_ascii_case(b"chunked");
            if self.last_is_chunked {
                self.chunked += 1;
            } else {
                self.other = true;
            }
        }
    }
}

fn unsupported_coding(reason: &'static str) -> ParseError {
    ParseError {
        kind: ParseErrorKind::UnsupportedTransferEncoding,
        reason,
    }
}

/// The offsets of `part` inside the head starting at address `base`.
#[inline]
pub(crate) fn span_of(base: usize, head_len: usize, part: &[u8]) -> Result<(u32, u32), ParseError> {
    let start = (part.as_ptr() as usize).wrapping_sub(base);
    match start.checked_add(part.len()) {
        // head_len never exceeds u32::MAX: the parse window is clamped to it.
        Some(end) if end <= head_len => Ok((start as u32, end as u32)),
        _ => Err(ParseError::invalid("field outside the head")),
    }
}

/// `1*DIGIT` without sign, spaces or commas, at most 2^63 − 1: the most a signed 64-bit
/// length holds, which is what other HTTP stacks keep it in (curl and nginx refuse larger
/// values), so a larger one is refused here rather than passed on to a peer that cannot
/// read it.
pub(crate) fn parse_content_length(value: &[u8]) -> Option<u64> {
    if value.is_empty() {
        return None;
    }
    let mut length: u64 = 0;
    for &byte in value {
        if !byte.is_ascii_digit() {
            return None;
        }
        length = length
            .checked_mul(10)?
            .checked_add(u64::from(byte - b'0'))?;
    }
    (length <= i64::MAX as u64).then_some(length)
}

/// Every LF must follow a CR and every CR must precede an LF. `httparse`
/// accepts LF-only line endings, which other parsers may split differently.
///
/// Branch-free over adjacent byte pairs so the compiler vectorises it: a head
/// has a line ending every few dozen bytes, too often for a memchr loop to win.
pub(crate) fn check_line_endings(head: &[u8]) -> Result<(), ParseError> {
    let (Some(&first), Some(&last)) = (head.first(), head.last()) else {
        return Ok(());
    };
    let mismatched = head[..head.len() - 1]
        .iter()
        .zip(&head[1..])
        .fold(0u8, |seen, (&before, &after)| {
            seen | (u8::from(before == b'\r') ^ u8::from(after == b'\n'))
        });
    if mismatched == 0 && first != b'\n' && last != b'\r' {
        return Ok(());
    }
    // Slow path, only for bad input: say which it was.
    let bare_lf = memchr::memchr_iter(b'\n', head).any(|at| at == 0 || head[at - 1] != b'\r');
    Err(ParseError::invalid(if bare_lf {
        "bare LF in head"
    } else {
        "bare CR in head"
    }))
}

/// Which start line is being parsed, for error reasons.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StartLine {
    Request,
    Status,
}

/// Turns an `httparse` error into a typed error with a precise reason. Only
/// runs on the error path, so it may rescan the buffer.
pub(crate) fn rejection(
    window: &[u8],
    error: httparse::Error,
    start_line: StartLine,
) -> ParseError {
    let start = window
        .iter()
        .take_while(|&&b| b == b'\r' || b == b'\n')
        .count();
    let window = &window[start..];
    let region = match memchr::memmem::find(window, b"\r\n\r\n") {
        Some(end) => &window[..end + 4],
        None => window,
    };
    let bare_cr = memchr::memchr_iter(b'\r', region)
        .any(|at| matches!(region.get(at + 1), Some(&next) if next != b'\n'));
    if bare_cr {
        return ParseError::invalid("bare CR in head");
    }
    match error {
        httparse::Error::TooManyHeaders => ParseError {
            kind: ParseErrorKind::TooManyHeaders,
            reason: "too many header fields",
        },
        httparse::Error::Version => {
            if start_line == StartLine::Request && request_line_spaces(region) != 2 {
                // `GET /a b HTTP/1.1`: whitespace inside the target, not a version problem.
                ParseError::invalid("whitespace in request target")
            } else if is_unsupported_version(version_token(region, start_line)) {
                ParseError {
                    kind: ParseErrorKind::UnsupportedVersion,
                    reason: "unsupported HTTP version",
                }
            } else {
                ParseError::invalid("malformed HTTP version")
            }
        }
        httparse::Error::HeaderName => {
            if memchr::memmem::find(region, b"\n ").is_some()
                || memchr::memmem::find(region, b"\n\t").is_some()
            {
                ParseError::invalid("obs-fold line folding in header section")
            } else if has_space_before_colon(region) {
                ParseError::invalid("whitespace between field name and colon")
            } else {
                ParseError::invalid("invalid header field name")
            }
        }
        httparse::Error::HeaderValue => {
            ParseError::invalid("invalid character in header field value")
        }
        httparse::Error::NewLine => ParseError::invalid("malformed line ending"),
        httparse::Error::Status => ParseError::invalid("invalid status code or reason phrase"),
        httparse::Error::Token => match start_line {
            StartLine::Request => ParseError::invalid("invalid method or request target"),
            StartLine::Status => ParseError::invalid("malformed status line"),
        },
    }
}

/// The version field of the first line: the last word of a request line, the
/// first word of a status line.
fn version_token(region: &[u8], start_line: StartLine) -> &[u8] {
    let line_end = memchr::memchr2(b'\r', b'\n', region).unwrap_or(region.len());
    let line = &region[..line_end];
    match start_line {
        StartLine::Request => line.rsplit(|&b| b == b' ').next().unwrap_or(line),
        StartLine::Status => line.split(|&b| b == b' ').next().unwrap_or(line),
    }
}

/// Where the minor digit of an `HTTP/1.2` to `HTTP/1.9` version sits in `buf`'s start
/// line (after leading empty lines): a later minor version of HTTP/1, which a recipient
/// should process as the highest one it implements (RFC 9112 §2.3), here HTTP/1.1.
/// `None` for any other version.
pub(crate) fn later_minor_version(buf: &[u8], start_line: StartLine) -> Option<usize> {
    let start = buf
        .iter()
        .take_while(|&&b| b == b'\r' || b == b'\n')
        .count();
    let region = &buf[start..];
    let token = version_token(region, start_line);
    let at = start + (token.as_ptr() as usize - region.as_ptr() as usize) + 7;
    matches!(
        token,
        [b'H', b'T', b'T', b'P', b'/', b'1', b'.', b'2'..=b'9']
    )
    .then_some(at)
}

/// Spaces on the request line (a valid one has exactly two).
fn request_line_spaces(region: &[u8]) -> usize {
    let line_end = memchr::memchr2(b'\r', b'\n', region).unwrap_or(region.len());
    memchr::memchr_iter(b' ', &region[..line_end]).count()
}

/// `HTTP/` then a digit, then digits and dots: a version token, supported or not
/// (`HTTP/1.1`, `HTTP/2.0`, `HTTP/1.2`, `HTTP/3`).
pub fn looks_like_version(token: &[u8]) -> bool {
    match token.strip_prefix(b"HTTP/") {
        Some([first, rest @ ..]) => {
            first.is_ascii_digit() && rest.iter().all(|&b| b.is_ascii_digit() || b == b'.')
        }
        _ => false,
    }
}

/// A well-formed version the HTTP/1.1 parser does not take: `HTTP/` DIGIT `.` DIGIT (RFC
/// 9112 §2.3) other than 1.0 and 1.1, or `HTTP/` and one digit other than 1, as in
/// `HTTP/2`. Another major version is answered 505 (RFC 9110 §15.6.6); a later minor
/// version of HTTP/1 is read as HTTP/1.1 (`later_minor_version`). A malformed version
/// (`HTTP/01.1`, `HTTP/1.`, `HTTP/1.10`) is a client's syntax error: 400.
fn is_unsupported_version(token: &[u8]) -> bool {
    match token.strip_prefix(b"HTTP/") {
        Some([major, b'.', minor]) => major.is_ascii_digit() && minor.is_ascii_digit(),
        Some([major]) => major.is_ascii_digit() && *major != b'1',
        _ => false,
    }
}

fn has_space_before_colon(region: &[u8]) -> bool {
    region.split(|&b| b == b'\n').skip(1).any(|line| {
        let name_end = line
            .iter()
            .position(|&b| !is_token_char(b))
            .unwrap_or(line.len());
        name_end > 0 && matches!(line.get(name_end), Some(b' ' | b'\t'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_timeout_of_a_keep_alive_field() {
        let secs = |value: &[u8]| keep_alive_timeout(value).map(|d| d.as_secs());
        assert_eq!(secs(b"timeout=5, max=100"), Some(5));
        assert_eq!(secs(b"max=100, Timeout = 15"), Some(15));
        assert_eq!(secs(b"timeout=\"3\""), Some(3));
        assert_eq!(secs(b"timeout=0"), Some(0));
        assert_eq!(secs(b"max=100"), None);
        assert_eq!(secs(b"timeout=soon"), None);
        assert_eq!(secs(b"timeout=-1"), None);
        assert_eq!(secs(b"timeout="), None);
        assert_eq!(secs(b"timeout=99999999999999999999"), None);
        assert_eq!(secs(b"timeouts=5"), None);
    }

    #[test]
    fn classifies_names_case_insensitively() {
        assert_eq!(FieldKind::of(b"Content-Length"), FieldKind::ContentLength);
        assert_eq!(
            FieldKind::of(b"TRANSFER-ENCODING"),
            FieldKind::TransferEncoding
        );
        assert_eq!(
            FieldKind::of(b"x-forwarded-proto"),
            FieldKind::XForwardedProto
        );
        assert_eq!(FieldKind::of(b"tE"), FieldKind::Te);
        assert_eq!(FieldKind::of(b"Keep-Alive"), FieldKind::KeepAlive);
        assert_eq!(FieldKind::of(b"Content-Type"), FieldKind::Other);
        assert_eq!(FieldKind::of(b""), FieldKind::Other);
    }

    #[test]
    fn content_length_is_digits_only() {
        assert_eq!(parse_content_length(b"0"), Some(0));
        assert_eq!(parse_content_length(b"0012"), Some(12));
        assert_eq!(
            parse_content_length(b"9223372036854775807"),
            Some(i64::MAX as u64)
        );
        for bad in [
            &b""[..],
            b"9223372036854775808",
            b"18446744073709551615",
            b"18446744073709551616",
            b"+5",
            b"-5",
            b"5 5",
            b"5,5",
            b"0x10",
            b" 5",
        ] {
            assert_eq!(
                parse_content_length(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn list_elements_trim_and_skip_empty() {
        let elements: Vec<&[u8]> = list_elements(b" close ,, \tUpgrade,").collect();
        assert_eq!(elements, vec![&b"close"[..], b"Upgrade"]);
    }

    #[test]
    fn split_list_keeps_quoted_commas_and_empty_parts() {
        let parts: Vec<&[u8]> =
            crate::split_list(br#"for=1.2.3.4;host="a,b", private="x, \"y, z", ,last"#).collect();
        assert_eq!(
            parts,
            vec![
                &br#"for=1.2.3.4;host="a,b""#[..],
                br#"private="x, \"y, z""#,
                b"",
                b"last"
            ]
        );
    }

    #[test]
    fn line_endings() {
        assert!(check_line_endings(b"a\r\nb\r\n\r\n").is_ok());
        assert_eq!(
            check_line_endings(b"a\nb\r\n").unwrap_err().reason,
            "bare LF in head"
        );
        assert_eq!(
            check_line_endings(b"a\rb\r\n").unwrap_err().reason,
            "bare CR in head"
        );
        assert_eq!(
            check_line_endings(b"a\r").unwrap_err().reason,
            "bare CR in head"
        );
    }

    #[test]
    fn versions() {
        assert!(looks_like_version(b"HTTP/2.0"));
        assert!(looks_like_version(b"HTTP/3"));
        assert!(!looks_like_version(b"HTTP/"));
        assert!(!looks_like_version(b"http/1.1"));
        assert!(!looks_like_version(b"HTTP/x"));
        for unsupported in [&b"HTTP/2.0"[..], b"HTTP/0.9", b"HTTP/1.2", b"HTTP/3"] {
            assert!(is_unsupported_version(unsupported));
        }
        for malformed in [
            &b"HTTP/01.1"[..],
            b"HTTP/1.",
            b"HTTP/1",
            b"HTTP/1.10",
            b"HTTP/22.0",
        ] {
            assert!(!is_unsupported_version(malformed));
        }
    }

    #[test]
    fn hosts() {
        assert!(is_valid_host(b"example.com:8080"));
        assert!(is_valid_host(b"[::1]:443"));
        assert!(is_valid_host(b""));
        assert!(!is_valid_host(b"a b"));
        assert!(!is_valid_host(b"user@host"));
        assert!(!is_valid_host(b"host/path"));
        // Only a host and a port: what weir routes on is what the node reads.
        assert!(is_valid_host(b"[::1]"));
        assert!(is_valid_host(b"[2001:db8::7]:8443"));
        assert!(is_valid_host(b"[v1.fe80::a+en1]"));
        assert!(is_valid_host(b"192.0.2.1:80"));
        assert!(is_valid_host(b"example.com:"));
        assert!(is_valid_host(b"ex%41mple.com"));
        assert!(is_valid_host(b"%41:80"));
        assert!(is_valid_host(b"example.com:65535"));
        for bad in [
            &b"secure.example.com:1:2"[..],
            b"secure.example.com:abc",
            b"example.com:65536",
            b"example.com:000080",
            b"[::1]evil.example",
            b"[::1",
            b"::1",
            b"]]::[[",
            b"[::1]:99999",
            b"[::1]:80:80",
            b"[not-an-address]",
            b"[v1.]",
            // A port with no host (RFC 9110 §4.2.1: no empty host in an http URI).
            b":80",
            b":",
            b"ex%4mple.com",
            b"example.com%",
            b"a]b",
        ] {
            assert!(!is_valid_host(bad), "{}", String::from_utf8_lossy(bad));
        }
    }
}
