//! The server side of an HTTP/2 connection as a sans-IO state machine: bytes
//! from the client go in ([`ServerConnection::receive`]) and come out as
//! [`Event`]s; responses go in through the `send_*` methods; the bytes for the
//! client collect in [`ServerConnection::output`]. Stream states, the header
//! block's CONTINUATIONs, flow control both ways, SETTINGS, PING and GOAWAY
//! live here; the driver owns the socket, the timers and the tasks. The
//! fourth part of weir's own HTTP/2 codec (`docs/design/http2.md`); stream
//! states in `h2server/LIFECYCLE.md`.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

use crate::error::ParseError;
use crate::frame::{
    self, DEFAULT_MAX_FRAME_SIZE, ErrorCode, Frame, FrameError, MAX_WINDOW, PREFACE,
};
use crate::h2core::{Blocks, DEFAULT_WINDOW, Flow, State, StreamFlow};
use crate::head::Limits;
use crate::hpack;
use crate::http2::H2Request;

mod receive;
mod send;
#[cfg(test)]
mod tests;

/// A map keyed by stream id, hashed by [`StreamIdHasher`].
pub type StreamMap<V> = HashMap<u32, V, BuildHasherDefault<StreamIdHasher>>;

/// Hashes a stream id for the maps of a connection's open streams with one
/// multiplication, where the standard library's SipHash took about 2,200
/// instructions per proxied request (`bench/insns --modes h2`). Keyed
/// hashing is not needed: at most `max_concurrent_streams` streams are open,
/// so ids a client chooses to collide cost a lookup no more than that many
/// comparisons.
#[derive(Debug, Default, Clone, Copy)]
pub struct StreamIdHasher(u64);

impl Hasher for StreamIdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(byte);
        }
        self.0 = self.0.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn write_u32(&mut self, id: u32) {
        // Fibonacci hashing; the high half folded down, as the table indexes
        // by the low bits (and client ids are all odd).
        let hash = u64::from(id).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 = hash ^ hash >> 32;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// What weir offers a client, sent in its first SETTINGS.
#[derive(Debug, Clone)]
pub struct Config {
    /// SETTINGS_MAX_CONCURRENT_STREAMS: streams past it are refused.
    pub max_concurrent_streams: u32,
    /// SETTINGS_INITIAL_WINDOW_SIZE: what each stream may send unread.
    pub stream_window: u32,
    /// What the whole connection may send unread (the default 65,535 is
    /// raised by a WINDOW_UPDATE at the start).
    pub connection_window: u32,
    /// SETTINGS_MAX_FRAME_SIZE: the largest frame weir reads.
    pub max_frame_size: u32,
    /// SETTINGS_MAX_HEADER_LIST_SIZE: a larger request is refused (431).
    pub max_header_list_size: u32,
    /// SETTINGS_HEADER_TABLE_SIZE: the client's table for its requests.
    pub header_table_size: u32,
    /// SETTINGS_ENABLE_CONNECT_PROTOCOL (RFC 8441).
    pub enable_connect_protocol: bool,
    /// Bounds on the HTTP/1.1 head each request becomes.
    pub head_limits: Limits,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_concurrent_streams: 100,
            stream_window: 256 * 1024,
            connection_window: 1024 * 1024,
            max_frame_size: DEFAULT_MAX_FRAME_SIZE,
            max_header_list_size: 64 * 1024,
            header_table_size: hpack::DEFAULT_TABLE_SIZE as u32,
            enable_connect_protocol: false,
            head_limits: Limits {
                max_head_bytes: 64 * 1024,
                max_headers: 100,
            },
        }
    }
}

/// What the connection tells its driver.
#[derive(Debug)]
pub enum Event<'a> {
    /// A new stream's request.
    Request {
        /// The stream.
        stream: u32,
        /// The request.
        request: H2Request,
        /// No body follows.
        end_stream: bool,
    },
    /// A new stream whose request HTTP/1.1's rules refuse too (a bad target,
    /// a bad `content-length`: 400) or whose header list is too large (431):
    /// the driver answers it with the error's status and ends it. A request
    /// that breaks HTTP/2's own rules on fields is reset instead, with no
    /// event (RFC 9113 §8.1.1).
    Malformed {
        /// The stream.
        stream: u32,
        /// Why.
        error: ParseError,
        /// The request is a HEAD: the answer has no body.
        head_request: bool,
        /// The request is a gRPC call: the answer is trailers-only, with a
        /// `grpc-status`.
        grpc: bool,
    },
    /// Request body bytes. The driver hands them back with
    /// [`ServerConnection::release`] once consumed, which reopens the window.
    Data {
        /// The stream.
        stream: u32,
        /// The bytes.
        data: &'a [u8],
        /// The body ends here.
        end_stream: bool,
    },
    /// The request's trailer section, as HTTP/1.1 trailer lines (each ending
    /// in CRLF); the body ends with it.
    Trailers {
        /// The stream.
        stream: u32,
        /// The lines.
        lines: Vec<u8>,
    },
    /// A stream ended early: reset by the client, or by weir for breaking a
    /// rule of its own (a body longer or shorter than its `content-length`,
    /// a window overrun).
    Reset {
        /// The stream.
        stream: u32,
        /// The code sent or received.
        error: ErrorCode,
        /// The client reset it.
        by_client: bool,
    },
    /// The client is going away: it opens no stream after `last_stream`.
    GoAway {
        /// The last stream the client may have processed (a server's own
        /// streams; 0 from a client that has none).
        last_stream: u32,
        /// Why.
        error: ErrorCode,
    },
    /// The answer to a PING weir sent.
    PingAnswered {
        /// The PING's payload.
        payload: [u8; 8],
    },
    /// The client's windows grew: blocked sends may go on.
    WindowOpened,
}

/// The connection must end: a GOAWAY with this code is in the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionError {
    /// The GOAWAY's code.
    pub code: ErrorCode,
    /// A short, static explanation for the log line.
    pub reason: &'static str,
}

/// A send to a stream that is no longer there to take it (reset, or ended).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamGone;

/// Where a connection is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for the client's preface.
    Preface,
    /// The preface came; the next frame must be SETTINGS.
    FirstSettings,
    /// Frames flow.
    Open,
    /// A connection error was sent: nothing more is read.
    Failed,
}

#[derive(Debug)]
struct Stream {
    state: State,
    flow: StreamFlow,
    /// The request's `content-length`, which its DATA must match
    /// (RFC 9113 §8.1.1).
    content_length: Option<u64>,
    received: u64,
}

/// The client's settings that shape what weir sends.
struct Peer {
    max_frame_size: u32,
    stream_window: i64,
}

/// The server side of one HTTP/2 connection.
pub struct ServerConnection {
    config: Config,
    phase: Phase,
    decoder: hpack::Decoder,
    encoder: hpack::Encoder,
    streams: StreamMap<Stream>,
    /// The highest stream the client opened: streams above it are idle.
    last_stream: u32,
    /// Streams closed lately, newest last: HEADERS on one of them is a
    /// frame on a closed stream (STREAM_CLOSED), where HEADERS on another
    /// id below `last_stream` is a stream id out of order (PROTOCOL_ERROR).
    closed: VecDeque<u32>,
    blocks: Blocks,
    peer: Peer,
    flow: Flow,
    /// weir's SETTINGS wait for their acknowledgement.
    settings_unacked: bool,
    /// weir sent GOAWAY: streams after this one are ignored.
    going_away: Option<u32>,
    output: Vec<u8>,
    block_buffer: Vec<u8>,
}

/// Closed streams remembered, for telling a late frame from a bad id.
pub(crate) const CLOSED_KEPT: usize = 32;

impl ServerConnection {
    /// A connection whose SETTINGS (and connection WINDOW_UPDATE) are
    /// already in the output, as RFC 9113 §3.4 lets a server send them first.
    pub fn new(config: Config) -> Self {
        let mut output = Vec::with_capacity(64);
        frame::write_settings(
            &mut output,
            &[
                (0x1, config.header_table_size),
                (0x3, config.max_concurrent_streams),
                (0x4, config.stream_window.min(MAX_WINDOW)),
                (0x5, config.max_frame_size),
                (0x6, config.max_header_list_size),
                (0x8, u32::from(config.enable_connect_protocol)),
            ],
        );
        let connection_window = i64::from(config.connection_window.min(MAX_WINDOW));
        if connection_window > DEFAULT_WINDOW {
            frame::write_window_update(&mut output, 0, (connection_window - DEFAULT_WINDOW) as u32);
        }
        ServerConnection {
            phase: Phase::Preface,
            decoder: hpack::Decoder::new(),
            encoder: hpack::Encoder::new(),
            streams: StreamMap::default(),
            last_stream: 0,
            closed: VecDeque::with_capacity(CLOSED_KEPT),
            blocks: Blocks::default(),
            peer: Peer {
                max_frame_size: DEFAULT_MAX_FRAME_SIZE,
                stream_window: DEFAULT_WINDOW,
            },
            flow: Flow::new(config.connection_window, config.stream_window),
            settings_unacked: true,
            going_away: None,
            output,
            block_buffer: Vec::new(),
            config,
        }
    }

    /// The bytes to write to the client; the driver drains what it wrote.
    pub fn output(&mut self) -> &mut Vec<u8> {
        &mut self.output
    }

    /// Whether the client's preface and first SETTINGS have come (and no
    /// connection error since).
    pub fn is_open(&self) -> bool {
        self.phase == Phase::Open
    }

    /// Streams not yet closed.
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    /// Reads what whole frames `input` holds, calling `on` for each event,
    /// and returns the bytes it took (the rest waits for more). On a
    /// connection error a GOAWAY is in the output and nothing more is read.
    pub fn receive<F>(&mut self, input: &[u8], mut on: F) -> Result<usize, ConnectionError>
    where
        F: FnMut(Event<'_>),
    {
        let mut used = 0;
        if self.phase == Phase::Failed {
            return Ok(input.len());
        }
        if self.phase == Phase::Preface {
            if input.len() < PREFACE.len() {
                if !PREFACE.starts_with(input) {
                    return Err(self.fail(ErrorCode::PROTOCOL_ERROR, "not the HTTP/2 preface"));
                }
                return Ok(0);
            }
            if &input[..PREFACE.len()] != PREFACE {
                return Err(self.fail(ErrorCode::PROTOCOL_ERROR, "not the HTTP/2 preface"));
            }
            used = PREFACE.len();
            self.phase = Phase::FirstSettings;
        }
        loop {
            match frame::read_frame(&input[used..], self.config.max_frame_size) {
                Ok(None) => return Ok(used),
                Ok(Some((frame, len))) => {
                    self.handle(frame, &mut on)?;
                    used += len;
                }
                Err(FrameError::Connection(code, reason)) => return Err(self.fail(code, reason)),
                Err(FrameError::Stream(stream, len, code, reason)) => {
                    if self.blocks.open_on().is_some() || self.phase == Phase::FirstSettings {
                        return Err(self.fail(ErrorCode::PROTOCOL_ERROR, reason));
                    }
                    self.reset_by_weir(stream, code, &mut on);
                    used += len;
                }
            }
        }
    }

    /// Ends the connection with GOAWAY and `code`.
    fn fail(&mut self, code: ErrorCode, reason: &'static str) -> ConnectionError {
        if self.phase != Phase::Failed {
            frame::write_goaway(&mut self.output, self.last_stream, code, reason.as_bytes());
            self.phase = Phase::Failed;
        }
        ConnectionError { code, reason }
    }

    fn handle<F>(&mut self, frame: Frame<'_>, on: &mut F) -> Result<(), ConnectionError>
    where
        F: FnMut(Event<'_>),
    {
        if self.phase == Phase::FirstSettings {
            if !matches!(frame, Frame::Settings { ack: false, .. }) {
                return Err(self.fail(ErrorCode::PROTOCOL_ERROR, "first frame not SETTINGS"));
            }
            self.phase = Phase::Open;
        }
        if let Some(open) = self.blocks.open_on() {
            match frame {
                Frame::Continuation { stream, .. } if stream == open => {}
                _ => {
                    return Err(self.fail(
                        ErrorCode::PROTOCOL_ERROR,
                        "a frame other than CONTINUATION inside a header block",
                    ));
                }
            }
        }
        match frame {
            Frame::Data {
                stream,
                data,
                end_stream,
                flow_len,
            } => self.data(stream, data, end_stream, flow_len, on),
            Frame::Headers {
                stream,
                fragment,
                end_stream,
                end_headers,
                priority,
            } => {
                let self_dependent = priority.is_some_and(|p| p.dependency == stream);
                let ends = (end_stream, end_headers, self_dependent);
                self.headers(stream, fragment, ends, on)
            }
            Frame::Continuation {
                stream,
                fragment,
                end_headers,
            } => self.continuation(stream, fragment, end_headers, on),
            Frame::Priority { .. } | Frame::Unknown { .. } => Ok(()),
            Frame::RstStream { stream, error } => {
                if stream > self.last_stream {
                    return Err(
                        self.fail(ErrorCode::PROTOCOL_ERROR, "RST_STREAM on an idle stream")
                    );
                }
                if self.forget(stream).is_some() {
                    on(Event::Reset {
                        stream,
                        error,
                        by_client: true,
                    });
                }
                Ok(())
            }
            Frame::Settings { ack, settings } => self.settings(ack, settings, on),
            Frame::PushPromise { .. } => {
                Err(self.fail(ErrorCode::PROTOCOL_ERROR, "PUSH_PROMISE from a client"))
            }
            Frame::Ping {
                ack: false,
                payload,
            } => {
                frame::write_ping(&mut self.output, true, payload);
                Ok(())
            }
            Frame::Ping { ack: true, payload } => {
                on(Event::PingAnswered { payload });
                Ok(())
            }
            Frame::GoAway {
                last_stream, error, ..
            } => {
                on(Event::GoAway { last_stream, error });
                Ok(())
            }
            Frame::WindowUpdate { stream, increment } => self.window_update(stream, increment, on),
        }
    }
}
