//! weir's own sans-IO HTTP/1.1 codec: request and response heads parsed with
//! `httparse` and checked strictly, body framing (content-length, chunked,
//! close-delimited), and writers that forward heads without re-allocating
//! header bytes and with the original header-name case.
//!
//! [`hpack`] (HTTP/2's header compression, RFC 7541) and [`frame`] (HTTP/2's
//! frames, RFC 9113) are the first parts of an HTTP/2 codec of weir's own
//! (`docs/design/http2.md`).
//!
//! Nothing here does I/O: parsers take a byte buffer and return what they
//! found; writers append to a `BytesMut`. On the hot path use
//! [`RequestHead::split_from`] / [`ResponseHead::split_from`], which split the
//! head off the connection's read buffer without copying.
//!
//! Strict by default, against request smuggling: bare LF or CR, obs-fold,
//! `Content-Length` with `Transfer-Encoding`, duplicate or malformed
//! `Content-Length`, transfer codings other than a single `chunked`, a missing
//! or repeated `Host`, and request targets in the wrong form for their method
//! are all rejected, each with its own [`ParseError::reason`].
//!
//! ```
//! use weir_http::{parse_request, Limits, Parsed};
//! let raw = b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n";
//! match parse_request(raw, &Limits::default()).unwrap() {
//!     Parsed::Complete(head, used) => {
//!         assert_eq!(head.target(), b"/a");
//!         assert_eq!(used, raw.len());
//!     }
//!     Parsed::Partial => unreachable!(),
//! }
//! ```

mod chunked;
pub mod date;
mod error;
mod fields;
pub mod frame;
pub mod h2client;
mod h2core;
pub mod h2server;
mod head;
pub mod hpack;
pub mod http2;
mod message;
mod scan;
mod syntax;
mod target;
mod trailers;
mod write;

pub use chunked::{
    CHUNKED_END, ChunkedDecoder, Decoded, encode_chunk, encode_chunk_header, encode_last_chunk,
};
pub use error::{ParseError, ParseErrorKind};
pub use fields::{Header, looks_like_version};
pub use head::{
    Limits, Parsed, RequestHead, RequestLine, ResponseHead, parse_request, parse_response,
    request_line,
};
pub use message::{BodyFraming, ConnectionInfo, Method, Version};
pub use scan::HeadScan;
pub use syntax::{
    FieldNames, Outside, find_outside_quotes, is_token_char, qvalue, split_list, upgrade_protocols,
};
pub use trailers::{filter_trailers, filter_trailers_but, is_forwardable_trailer};
pub use write::{
    ForwardRequest, ForwardResponse, HeaderEdit, SimpleResponse, Unedited, reason_phrase,
    status_has_content, write_connection, write_date, write_request_head,
    write_request_head_edited, write_response_head, write_response_head_edited,
    write_simple_response, write_simple_response_edited, write_status_line,
};
