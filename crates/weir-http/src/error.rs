//! Parse errors, each mapped to the status a client should get.

use std::fmt;

/// What kind of parse failure, which decides the status answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseErrorKind {
    /// Malformed syntax or a forbidden construct (→ 400; for responses → 502).
    Invalid,
    /// The head is larger than `max_head_bytes` (→ 431).
    HeadTooLarge,
    /// The request line alone is larger than `max_head_bytes`: its target is (→ 414,
    /// RFC 9112 §3).
    TargetTooLong,
    /// More header fields than `max_headers` (→ 431).
    TooManyHeaders,
    /// A transfer coding other than chunked (→ 501).
    UnsupportedTransferEncoding,
    /// An HTTP version other than 1.0/1.1 (→ 505).
    UnsupportedVersion,
    /// An `Expect` other than `100-continue` (→ 417).
    UnsupportedExpectation,
}

/// A parse failure with a short, static reason for the log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParseError {
    /// What kind of failure, which decides the status.
    pub kind: ParseErrorKind,
    /// A short, static explanation for the log line.
    pub reason: &'static str,
}

impl ParseError {
    pub(crate) fn invalid(reason: &'static str) -> Self {
        ParseError {
            kind: ParseErrorKind::Invalid,
            reason,
        }
    }

    /// The status to answer a client whose request failed this way.
    pub fn status(&self) -> u16 {
        match self.kind {
            ParseErrorKind::Invalid => 400,
            ParseErrorKind::HeadTooLarge | ParseErrorKind::TooManyHeaders => 431,
            ParseErrorKind::TargetTooLong => 414,
            ParseErrorKind::UnsupportedTransferEncoding => 501,
            ParseErrorKind::UnsupportedVersion => 505,
            ParseErrorKind::UnsupportedExpectation => 417,
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.reason)
    }
}

impl std::error::Error for ParseError {}
