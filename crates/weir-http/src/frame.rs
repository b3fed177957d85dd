//! HTTP/2 frames (RFC 9113 §4 and §6), sans-IO: [`read_frame`] takes one
//! frame off the front of a buffer, checked as far as one frame can be on its
//! own, and the `write_*` functions append frames to a buffer. The second part
//! of weir's own HTTP/2 codec (`docs/design/http2.md`); what needs the
//! connection's state (stream states, a header block's CONTINUATIONs, windows)
//! is the next part's.

use std::fmt;

#[cfg(test)]
mod tests;

/// What a client sends before its first frame (RFC 9113 §3.4).
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// The length of a frame's header.
pub const HEADER_LEN: usize = 9;
/// SETTINGS_MAX_FRAME_SIZE before SETTINGS say otherwise, and its least value.
pub const DEFAULT_MAX_FRAME_SIZE: u32 = 16_384;
/// The largest SETTINGS_MAX_FRAME_SIZE may be.
pub const MAX_MAX_FRAME_SIZE: u32 = (1 << 24) - 1;
/// The largest a flow-control window may be (RFC 9113 §6.9.1).
pub const MAX_WINDOW: u32 = (1 << 31) - 1;

/// An error code of RST_STREAM and GOAWAY (RFC 9113 §7).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ErrorCode(pub u32);

impl ErrorCode {
    /// Not an error: a graceful end.
    pub const NO_ERROR: ErrorCode = ErrorCode(0x0);
    /// The peer broke the protocol.
    pub const PROTOCOL_ERROR: ErrorCode = ErrorCode(0x1);
    /// Something went wrong inside weir.
    pub const INTERNAL_ERROR: ErrorCode = ErrorCode(0x2);
    /// The peer broke flow control.
    pub const FLOW_CONTROL_ERROR: ErrorCode = ErrorCode(0x3);
    /// SETTINGS were not acknowledged in time.
    pub const SETTINGS_TIMEOUT: ErrorCode = ErrorCode(0x4);
    /// A frame came on a stream already half-closed or closed.
    pub const STREAM_CLOSED: ErrorCode = ErrorCode(0x5);
    /// A frame of the wrong size.
    pub const FRAME_SIZE_ERROR: ErrorCode = ErrorCode(0x6);
    /// The stream was refused before any processing.
    pub const REFUSED_STREAM: ErrorCode = ErrorCode(0x7);
    /// The stream is no longer needed.
    pub const CANCEL: ErrorCode = ErrorCode(0x8);
    /// The header compression context cannot be kept.
    pub const COMPRESSION_ERROR: ErrorCode = ErrorCode(0x9);
    /// A CONNECT's connection failed.
    pub const CONNECT_ERROR: ErrorCode = ErrorCode(0xa);
    /// The peer is doing something that may cost too much.
    pub const ENHANCE_YOUR_CALM: ErrorCode = ErrorCode(0xb);
    /// The transport's security is too weak.
    pub const INADEQUATE_SECURITY: ErrorCode = ErrorCode(0xc);
    /// Use HTTP/1.1 for this request.
    pub const HTTP_1_1_REQUIRED: ErrorCode = ErrorCode(0xd);

    /// The code's name in RFC 9113 §7, or `UNKNOWN`.
    pub fn name(self) -> &'static str {
        const NAMES: [&str; 14] = [
            "NO_ERROR",
            "PROTOCOL_ERROR",
            "INTERNAL_ERROR",
            "FLOW_CONTROL_ERROR",
            "SETTINGS_TIMEOUT",
            "STREAM_CLOSED",
            "FRAME_SIZE_ERROR",
            "REFUSED_STREAM",
            "CANCEL",
            "COMPRESSION_ERROR",
            "CONNECT_ERROR",
            "ENHANCE_YOUR_CALM",
            "INADEQUATE_SECURITY",
            "HTTP_1_1_REQUIRED",
        ];
        NAMES.get(self.0 as usize).copied().unwrap_or("UNKNOWN")
    }
}

impl fmt::Debug for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({:#x})", self.name(), self.0)
    }
}

/// A frame that breaks RFC 9113 on its own, with the error it calls for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    /// End the connection with GOAWAY and this code.
    Connection(ErrorCode, &'static str),
    /// Reset this stream with this code; the connection goes on. The frame
    /// was read whole (its length is the second field).
    Stream(u32, usize, ErrorCode, &'static str),
}

impl FrameError {
    /// A short, static explanation for the log line.
    pub fn reason(&self) -> &'static str {
        match self {
            FrameError::Connection(_, reason) | FrameError::Stream(_, _, _, reason) => reason,
        }
    }
}

/// A stream's priority as HEADERS or PRIORITY state it (RFC 9113 §5.3.2).
/// weir reads it to check it, and acts on none of it (RFC 9113 §5.3 lets
/// priorities go unused).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Priority {
    /// The stream this one depends on.
    pub dependency: u32,
    /// Whether the dependency is exclusive.
    pub exclusive: bool,
    /// The weight, 1 to 256, less one.
    pub weight: u8,
}

/// The settings one SETTINGS frame carries: a field for each setting it
/// names, with the last value when it names one twice. Unknown settings are
/// left out (RFC 9113 §6.5.2).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Settings {
    /// SETTINGS_HEADER_TABLE_SIZE (0x1).
    pub header_table_size: Option<u32>,
    /// SETTINGS_ENABLE_PUSH (0x2), 0 or 1.
    pub enable_push: Option<bool>,
    /// SETTINGS_MAX_CONCURRENT_STREAMS (0x3).
    pub max_concurrent_streams: Option<u32>,
    /// SETTINGS_INITIAL_WINDOW_SIZE (0x4), at most 2^31 − 1.
    pub initial_window_size: Option<u32>,
    /// SETTINGS_MAX_FRAME_SIZE (0x5), 2^14 to 2^24 − 1.
    pub max_frame_size: Option<u32>,
    /// SETTINGS_MAX_HEADER_LIST_SIZE (0x6).
    pub max_header_list_size: Option<u32>,
    /// SETTINGS_ENABLE_CONNECT_PROTOCOL (0x8, RFC 8441), 0 or 1.
    pub enable_connect_protocol: Option<bool>,
}

/// One frame, borrowing its payload from the buffer it was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    /// DATA (0x0).
    Data {
        /// The stream.
        stream: u32,
        /// The data, without padding.
        data: &'a [u8],
        /// END_STREAM.
        end_stream: bool,
        /// What the frame counts against flow control: its whole payload,
        /// padding included (RFC 9113 §6.1).
        flow_len: u32,
    },
    /// HEADERS (0x1).
    Headers {
        /// The stream.
        stream: u32,
        /// The start of the header block, without padding or priority.
        fragment: &'a [u8],
        /// END_STREAM.
        end_stream: bool,
        /// END_HEADERS: no CONTINUATION follows.
        end_headers: bool,
        /// The PRIORITY flag's fields.
        priority: Option<Priority>,
    },
    /// PRIORITY (0x2).
    Priority {
        /// The stream.
        stream: u32,
        /// Its priority.
        priority: Priority,
    },
    /// RST_STREAM (0x3).
    RstStream {
        /// The stream.
        stream: u32,
        /// Why.
        error: ErrorCode,
    },
    /// SETTINGS (0x4).
    Settings {
        /// ACK: the peer applied weir's settings; no settings then.
        ack: bool,
        /// The settings.
        settings: Settings,
    },
    /// PUSH_PROMISE (0x5): a client must not send it.
    PushPromise {
        /// The stream.
        stream: u32,
    },
    /// PING (0x6).
    Ping {
        /// ACK: the answer to weir's PING.
        ack: bool,
        /// The eight octets to send back.
        payload: [u8; 8],
    },
    /// GOAWAY (0x7).
    GoAway {
        /// The last stream the sender may have processed.
        last_stream: u32,
        /// Why.
        error: ErrorCode,
        /// Diagnostic octets.
        debug: &'a [u8],
    },
    /// WINDOW_UPDATE (0x8).
    WindowUpdate {
        /// The stream, or 0 for the connection.
        stream: u32,
        /// The increment, 1 to 2^31 − 1.
        increment: u32,
    },
    /// CONTINUATION (0x9).
    Continuation {
        /// The stream.
        stream: u32,
        /// The next part of the header block.
        fragment: &'a [u8],
        /// END_HEADERS.
        end_headers: bool,
    },
    /// A frame of a type weir does not know, to be ignored (RFC 9113 §5.5),
    /// except inside a header block.
    Unknown {
        /// Its type.
        kind: u8,
        /// Its stream.
        stream: u32,
    },
}

// Frame types (RFC 9113 §6), for readers of the byte stream such as the
// proxy's flood watch (`crates/weir-proxy/src/http2/flood.rs`).
/// DATA.
pub const DATA: u8 = 0x0;
/// HEADERS.
pub const HEADERS: u8 = 0x1;
/// PRIORITY.
pub const PRIORITY: u8 = 0x2;
/// RST_STREAM.
pub const RST_STREAM: u8 = 0x3;
/// SETTINGS.
pub const SETTINGS: u8 = 0x4;
/// PUSH_PROMISE.
pub const PUSH_PROMISE: u8 = 0x5;
/// PING.
pub const PING: u8 = 0x6;
/// GOAWAY.
pub const GOAWAY: u8 = 0x7;
/// WINDOW_UPDATE.
pub const WINDOW_UPDATE: u8 = 0x8;
/// CONTINUATION.
pub const CONTINUATION: u8 = 0x9;

// Flags.
/// END_STREAM (DATA, HEADERS).
pub const END_STREAM: u8 = 0x1;
/// ACK (SETTINGS, PING).
pub const ACK: u8 = 0x1;
/// END_HEADERS (HEADERS, CONTINUATION).
pub const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY_FLAG: u8 = 0x20;

fn connection(code: ErrorCode, reason: &'static str) -> FrameError {
    FrameError::Connection(code, reason)
}

/// Takes the first frame off `buf`: `Ok(None)` until a whole frame is there,
/// else the frame and the bytes it took. `max_frame_size` is what weir's
/// SETTINGS allow (RFC 9113 §4.2); a longer frame is a connection error, read
/// no further.
pub fn read_frame(
    buf: &[u8],
    max_frame_size: u32,
) -> Result<Option<(Frame<'_>, usize)>, FrameError> {
    let Some(header) = buf.get(..HEADER_LEN) else {
        return Ok(None);
    };
    let len = u32::from_be_bytes([0, header[0], header[1], header[2]]);
    let (kind, flags) = (header[3], header[4]);
    // The reserved bit is ignored on receipt (RFC 9113 §4.1).
    let stream = u32::from_be_bytes([header[5], header[6], header[7], header[8]]) & MAX_WINDOW;
    if len > max_frame_size {
        return Err(connection(
            ErrorCode::FRAME_SIZE_ERROR,
            "frame larger than SETTINGS_MAX_FRAME_SIZE",
        ));
    }
    let total = HEADER_LEN + len as usize;
    let Some(payload) = buf.get(HEADER_LEN..total) else {
        return Ok(None);
    };
    let frame = match kind {
        DATA => data(stream, flags, payload)?,
        HEADERS => headers(stream, flags, payload)?,
        PRIORITY => {
            if stream == 0 {
                return Err(connection(
                    ErrorCode::PROTOCOL_ERROR,
                    "PRIORITY on stream 0",
                ));
            }
            if payload.len() != 5 {
                return Err(FrameError::Stream(
                    stream,
                    total,
                    ErrorCode::FRAME_SIZE_ERROR,
                    "PRIORITY not 5 octets",
                ));
            }
            let priority = priority(payload);
            // RFC 9113 §5.3.1: a stream may not depend on itself.
            if priority.dependency == stream {
                return Err(FrameError::Stream(
                    stream,
                    total,
                    ErrorCode::PROTOCOL_ERROR,
                    "stream depends on itself",
                ));
            }
            Frame::Priority { stream, priority }
        }
        RST_STREAM => {
            if stream == 0 {
                return Err(connection(
                    ErrorCode::PROTOCOL_ERROR,
                    "RST_STREAM on stream 0",
                ));
            }
            let code = u32_at(payload, 0, 4).ok_or(connection(
                ErrorCode::FRAME_SIZE_ERROR,
                "RST_STREAM not 4 octets",
            ))?;
            Frame::RstStream {
                stream,
                error: ErrorCode(code),
            }
        }
        SETTINGS => settings(stream, flags, payload)?,
        PUSH_PROMISE => {
            if stream == 0 {
                return Err(connection(
                    ErrorCode::PROTOCOL_ERROR,
                    "PUSH_PROMISE on stream 0",
                ));
            }
            Frame::PushPromise { stream }
        }
        PING => ping(stream, flags, payload)?,
        GOAWAY => goaway(stream, payload)?,
        WINDOW_UPDATE => window_update(stream, payload, total)?,
        CONTINUATION => {
            if stream == 0 {
                return Err(connection(
                    ErrorCode::PROTOCOL_ERROR,
                    "CONTINUATION on stream 0",
                ));
            }
            Frame::Continuation {
                stream,
                fragment: payload,
                end_headers: flags & END_HEADERS != 0,
            }
        }
        kind => Frame::Unknown { kind, stream },
    };
    Ok(Some((frame, total)))
}

/// A big-endian u32 at `at`, when the payload is exactly `len` long (`len`
/// 4), or at least `len` (GOAWAY's 8 and more).
fn u32_at(payload: &[u8], at: usize, len: usize) -> Option<u32> {
    let fits = match len {
        4 => payload.len() == 4,
        _ => payload.len() >= len,
    };
    let bytes: [u8; 4] = payload.get(at..at + 4)?.try_into().ok()?;
    fits.then(|| u32::from_be_bytes(bytes))
}

/// A padded payload without its padding (RFC 9113 §6.1): the pad length
/// must leave the rest (after `before` octets of other fields) whole.
fn unpad<'a>(
    flags: u8,
    payload: &'a [u8],
    before: usize,
    what: &'static str,
) -> Result<&'a [u8], FrameError> {
    if flags & PADDED == 0 {
        return Ok(payload);
    }
    let (&pad, rest) = payload
        .split_first()
        .ok_or(connection(ErrorCode::FRAME_SIZE_ERROR, what))?;
    let pad = usize::from(pad);
    if pad + before > rest.len() {
        return Err(connection(ErrorCode::PROTOCOL_ERROR, what));
    }
    Ok(&rest[..rest.len() - pad])
}

fn data(stream: u32, flags: u8, payload: &[u8]) -> Result<Frame<'_>, FrameError> {
    if stream == 0 {
        return Err(connection(ErrorCode::PROTOCOL_ERROR, "DATA on stream 0"));
    }
    Ok(Frame::Data {
        stream,
        data: unpad(flags, payload, 0, "DATA padding longer than its payload")?,
        end_stream: flags & END_STREAM != 0,
        flow_len: payload.len() as u32,
    })
}

fn headers(stream: u32, flags: u8, payload: &[u8]) -> Result<Frame<'_>, FrameError> {
    if stream == 0 {
        return Err(connection(ErrorCode::PROTOCOL_ERROR, "HEADERS on stream 0"));
    }
    let before = if flags & PRIORITY_FLAG != 0 { 5 } else { 0 };
    let mut fragment = unpad(
        flags,
        payload,
        before,
        "HEADERS padding longer than its payload",
    )?;
    let priority = match before {
        0 => None,
        _ => {
            let fields = fragment.get(..5).ok_or(connection(
                ErrorCode::FRAME_SIZE_ERROR,
                "HEADERS too short for its priority",
            ))?;
            // A HEADERS frame that depends on itself is a stream error too
            // (RFC 9113 §5.3.1), but its block must still be decoded to keep
            // the HPACK table in step: the connection, which decodes it,
            // checks `priority.dependency` against the stream.
            let priority = priority(fields);
            fragment = &fragment[5..];
            Some(priority)
        }
    };
    Ok(Frame::Headers {
        stream,
        fragment,
        end_stream: flags & END_STREAM != 0,
        end_headers: flags & END_HEADERS != 0,
        priority,
    })
}

/// Five octets of priority fields (RFC 9113 §5.3.2, §6.3).
fn priority(fields: &[u8]) -> Priority {
    let word = u32::from_be_bytes([fields[0], fields[1], fields[2], fields[3]]);
    Priority {
        dependency: word & MAX_WINDOW,
        exclusive: word & !MAX_WINDOW != 0,
        weight: fields[4],
    }
}

fn ping(stream: u32, flags: u8, payload: &[u8]) -> Result<Frame<'_>, FrameError> {
    if stream != 0 {
        return Err(connection(ErrorCode::PROTOCOL_ERROR, "PING on a stream"));
    }
    let payload: [u8; 8] = payload
        .try_into()
        .map_err(|_| connection(ErrorCode::FRAME_SIZE_ERROR, "PING not 8 octets"))?;
    Ok(Frame::Ping {
        ack: flags & ACK != 0,
        payload,
    })
}

fn goaway(stream: u32, payload: &[u8]) -> Result<Frame<'_>, FrameError> {
    if stream != 0 {
        return Err(connection(ErrorCode::PROTOCOL_ERROR, "GOAWAY on a stream"));
    }
    let (Some(last), Some(code)) = (u32_at(payload, 0, 8), u32_at(payload, 4, 8)) else {
        return Err(connection(
            ErrorCode::FRAME_SIZE_ERROR,
            "GOAWAY shorter than 8 octets",
        ));
    };
    Ok(Frame::GoAway {
        last_stream: last & MAX_WINDOW,
        error: ErrorCode(code),
        debug: &payload[8..],
    })
}

fn window_update(stream: u32, payload: &[u8], total: usize) -> Result<Frame<'_>, FrameError> {
    let increment = u32_at(payload, 0, 4).ok_or(connection(
        ErrorCode::FRAME_SIZE_ERROR,
        "WINDOW_UPDATE not 4 octets",
    ))? & MAX_WINDOW;
    if increment == 0 {
        return Err(match stream {
            0 => connection(ErrorCode::PROTOCOL_ERROR, "WINDOW_UPDATE of 0"),
            _ => FrameError::Stream(
                stream,
                total,
                ErrorCode::PROTOCOL_ERROR,
                "WINDOW_UPDATE of 0",
            ),
        });
    }
    Ok(Frame::WindowUpdate { stream, increment })
}

fn settings(stream: u32, flags: u8, payload: &[u8]) -> Result<Frame<'_>, FrameError> {
    if stream != 0 {
        return Err(connection(
            ErrorCode::PROTOCOL_ERROR,
            "SETTINGS on a stream",
        ));
    }
    if flags & ACK != 0 {
        if !payload.is_empty() {
            return Err(connection(
                ErrorCode::FRAME_SIZE_ERROR,
                "SETTINGS ACK with a payload",
            ));
        }
        return Ok(Frame::Settings {
            ack: true,
            settings: Settings::default(),
        });
    }
    if !payload.len().is_multiple_of(6) {
        return Err(connection(
            ErrorCode::FRAME_SIZE_ERROR,
            "SETTINGS not a multiple of 6 octets",
        ));
    }
    let mut settings = Settings::default();
    for entry in payload.chunks_exact(6) {
        let id = u16::from_be_bytes([entry[0], entry[1]]);
        let value = u32::from_be_bytes([entry[2], entry[3], entry[4], entry[5]]);
        let flag = || match value {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(connection(
                ErrorCode::PROTOCOL_ERROR,
                "SETTINGS flag other than 0 or 1",
            )),
        };
        match id {
            0x1 => settings.header_table_size = Some(value),
            0x2 => settings.enable_push = Some(flag()?),
            0x3 => settings.max_concurrent_streams = Some(value),
            0x4 if value > MAX_WINDOW => {
                return Err(connection(
                    ErrorCode::FLOW_CONTROL_ERROR,
                    "SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1",
                ));
            }
            0x4 => settings.initial_window_size = Some(value),
            0x5 if !(DEFAULT_MAX_FRAME_SIZE..=MAX_MAX_FRAME_SIZE).contains(&value) => {
                return Err(connection(
                    ErrorCode::PROTOCOL_ERROR,
                    "SETTINGS_MAX_FRAME_SIZE out of range",
                ));
            }
            0x5 => settings.max_frame_size = Some(value),
            0x6 => settings.max_header_list_size = Some(value),
            0x8 => settings.enable_connect_protocol = Some(flag()?),
            _ => {}
        }
    }
    Ok(Frame::Settings {
        ack: false,
        settings,
    })
}

/// Appends a frame header.
pub fn write_header(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream: u32) {
    debug_assert!(len <= MAX_MAX_FRAME_SIZE as usize);
    let len = (len as u32).to_be_bytes();
    out.extend_from_slice(&[len[1], len[2], len[3], kind, flags]);
    out.extend_from_slice(&(stream & MAX_WINDOW).to_be_bytes());
}

/// Appends a DATA frame's header; its `len` octets of data follow.
pub fn write_data_header(out: &mut Vec<u8>, stream: u32, len: usize, end_stream: bool) {
    write_header(
        out,
        len,
        DATA,
        if end_stream { END_STREAM } else { 0 },
        stream,
    );
}

/// Appends the first `take` bytes of `data` as DATA frames of at most
/// `max_frame` bytes each and returns `take`; `end_stream` marks the last
/// frame when `take` is all of `data` (an empty `data` ends the stream with
/// an empty frame).
pub fn write_data_frames(
    out: &mut Vec<u8>,
    stream: u32,
    data: &[u8],
    take: usize,
    max_frame: u32,
    end_stream: bool,
) -> usize {
    let max = max_frame as usize;
    let mut sent = 0;
    while sent < take {
        let piece = (take - sent).min(max);
        let last = sent + piece == data.len();
        write_data_header(out, stream, piece, end_stream && last);
        out.extend_from_slice(&data[sent..sent + piece]);
        sent += piece;
    }
    if data.is_empty() && end_stream {
        write_data_header(out, stream, 0, true);
    }
    sent
}

/// Appends a header block as HEADERS and as many CONTINUATION frames as
/// `max_frame_size` (the peer's setting) needs.
pub fn write_headers(
    out: &mut Vec<u8>,
    stream: u32,
    block: &[u8],
    end_stream: bool,
    max_frame_size: u32,
) {
    let max = max_frame_size.clamp(DEFAULT_MAX_FRAME_SIZE, MAX_MAX_FRAME_SIZE) as usize;
    let mut pieces = block.chunks(max);
    let first = pieces.next().unwrap_or_default();
    let mut rest = pieces.peekable();
    let mut flags = if end_stream { END_STREAM } else { 0 };
    if rest.peek().is_none() {
        flags |= END_HEADERS;
    }
    write_header(out, first.len(), HEADERS, flags, stream);
    out.extend_from_slice(first);
    while let Some(piece) = rest.next() {
        let flags = if rest.peek().is_none() {
            END_HEADERS
        } else {
            0
        };
        write_header(out, piece.len(), CONTINUATION, flags, stream);
        out.extend_from_slice(piece);
    }
}

/// Appends RST_STREAM.
pub fn write_rst_stream(out: &mut Vec<u8>, stream: u32, error: ErrorCode) {
    write_header(out, 4, RST_STREAM, 0, stream);
    out.extend_from_slice(&error.0.to_be_bytes());
}

/// Appends SETTINGS with the given (identifier, value) pairs.
pub fn write_settings(out: &mut Vec<u8>, settings: &[(u16, u32)]) {
    write_header(out, settings.len() * 6, SETTINGS, 0, 0);
    for (id, value) in settings {
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&value.to_be_bytes());
    }
}

/// Appends a SETTINGS acknowledgement.
pub fn write_settings_ack(out: &mut Vec<u8>) {
    write_header(out, 0, SETTINGS, ACK, 0);
}

/// Appends PING, or its answer with `ack`.
pub fn write_ping(out: &mut Vec<u8>, ack: bool, payload: [u8; 8]) {
    write_header(out, 8, PING, if ack { ACK } else { 0 }, 0);
    out.extend_from_slice(&payload);
}

/// Appends GOAWAY.
pub fn write_goaway(out: &mut Vec<u8>, last_stream: u32, error: ErrorCode, debug: &[u8]) {
    write_header(out, 8 + debug.len(), GOAWAY, 0, 0);
    out.extend_from_slice(&(last_stream & MAX_WINDOW).to_be_bytes());
    out.extend_from_slice(&error.0.to_be_bytes());
    out.extend_from_slice(debug);
}

/// Appends WINDOW_UPDATE (`increment` 1 to 2^31 − 1).
pub fn write_window_update(out: &mut Vec<u8>, stream: u32, increment: u32) {
    debug_assert!((1..=MAX_WINDOW).contains(&increment));
    write_header(out, 4, WINDOW_UPDATE, 0, stream);
    out.extend_from_slice(&(increment & MAX_WINDOW).to_be_bytes());
}
