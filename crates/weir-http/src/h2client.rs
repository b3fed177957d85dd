//! The client side of an HTTP/2 connection to a node, as a sans-IO state
//! machine: requests go in ([`ClientConnection::send_request`] from the
//! HTTP/1.1 head weir wrote for the node, then bodies and trailers), the
//! node's bytes go in ([`ClientConnection::receive`]) and come out as
//! [`Event`]s (response heads as weir's [`ResponseHead`], body bytes,
//! trailers as HTTP/1.1 lines, resets, GOAWAY), and the bytes for the node
//! collect in [`ClientConnection::output`]. The counterpart of
//! `crate::h2server` on the node side (`docs/design/http2.md`, "The node
//! side on weir's codec"); stream states in `h2client/LIFECYCLE.md`. The
//! driver owns the socket, the timers, the pool's policy (how many streams a
//! new connection carries before the node's SETTINGS) and the tasks.

use crate::error::ParseError;
use crate::frame::{
    self, DEFAULT_MAX_FRAME_SIZE, ErrorCode, Frame, FrameError, MAX_WINDOW, PREFACE,
};
use crate::h2core::{Blocks, DEFAULT_WINDOW, Flow, State, StreamFlow};
use crate::h2server::StreamMap;
use crate::head::{Limits, ResponseHead};
use crate::hpack;
use crate::message::Method;

pub use crate::h2server::{ConnectionError, StreamGone};

mod receive;
mod send;
#[cfg(test)]
mod tests;

/// What weir offers a node, sent in its first SETTINGS.
#[derive(Debug, Clone)]
pub struct Config {
    /// SETTINGS_INITIAL_WINDOW_SIZE: what the node may send on a stream
    /// before weir has taken it.
    pub stream_window: u32,
    /// What the node may send on the whole connection (raised from 65,535 by
    /// a WINDOW_UPDATE at the start).
    pub connection_window: u32,
    /// SETTINGS_MAX_FRAME_SIZE: the largest frame weir reads.
    pub max_frame_size: u32,
    /// SETTINGS_MAX_HEADER_LIST_SIZE: a larger response is refused (the
    /// stream is reset, the pipeline answers 502).
    pub max_header_list_size: u32,
    /// SETTINGS_HEADER_TABLE_SIZE: the node's table for its responses.
    pub header_table_size: u32,
    /// Bounds on the HTTP/1.1 head each response becomes.
    pub head_limits: Limits,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            stream_window: 1024 * 1024,
            connection_window: 4 * 1024 * 1024,
            max_frame_size: DEFAULT_MAX_FRAME_SIZE,
            max_header_list_size: 256 * 1024,
            header_table_size: hpack::DEFAULT_TABLE_SIZE as u32,
            head_limits: Limits {
                max_head_bytes: 256 * 1024,
                max_headers: 1000,
            },
        }
    }
}

/// What the connection tells its driver.
#[derive(Debug)]
pub enum Event<'a> {
    /// The node's SETTINGS (the first one tells that its limits are known).
    Settings {
        /// Streams the node takes at once (`u32::MAX`: it set no limit).
        max_concurrent_streams: u32,
        /// It takes extended CONNECT (RFC 8441).
        enable_connect_protocol: bool,
    },
    /// An interim (1xx) response; the final one follows on the stream.
    Interim {
        /// The stream.
        stream: u32,
        /// Its status (never 101).
        status: u16,
        /// Its fields as HTTP/1.1 lines, each ending in CRLF.
        lines: Vec<u8>,
    },
    /// A stream's final response head.
    Response {
        /// The stream.
        stream: u32,
        /// The head, framed for HTTP/1.1 (by its `content-length`, else
        /// chunked while a body follows).
        head: ResponseHead,
        /// No body follows.
        end_stream: bool,
    },
    /// A response head that breaks HTTP/2's rules or HTTP/1.1's: the stream
    /// is reset (PROTOCOL_ERROR) and the request fails at the node.
    Malformed {
        /// The stream.
        stream: u32,
        /// Why.
        error: ParseError,
    },
    /// Response body bytes. The driver hands them back with
    /// [`ClientConnection::release`] once consumed, which reopens the window.
    Data {
        /// The stream.
        stream: u32,
        /// The bytes.
        data: &'a [u8],
        /// The body ends here.
        end_stream: bool,
    },
    /// The response's trailer section, as HTTP/1.1 trailer lines (each
    /// ending in CRLF); the body ends with it.
    Trailers {
        /// The stream.
        stream: u32,
        /// The lines.
        lines: Vec<u8>,
    },
    /// A stream ended early: reset by the node, refused by its GOAWAY, or
    /// reset by weir for a rule the node broke (a body longer or shorter
    /// than its `content-length`, a window overrun, DATA before the head).
    Reset {
        /// The stream.
        stream: u32,
        /// The code sent or received.
        error: ErrorCode,
        /// The node reset it (or refused it with GOAWAY).
        by_node: bool,
        /// The node did not process the request (REFUSED_STREAM, or a stream
        /// above a GOAWAY's last one: RFC 9113 §8.7), so it may be sent
        /// again whatever its method.
        unprocessed: bool,
    },
    /// The node is going away: it processes no stream above `last_stream`
    /// (those are reset as unprocessed, before this event).
    GoAway {
        /// The last stream it may have processed.
        last_stream: u32,
        /// Why.
        error: ErrorCode,
    },
    /// The answer to a PING weir sent.
    PingAnswered {
        /// The PING's payload.
        payload: [u8; 8],
    },
    /// The node's windows grew: blocked sends may go on.
    WindowOpened,
}

/// Why a new stream was not opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The node sent GOAWAY, or weir did: the connection takes no new stream.
    GoingAway,
    /// The node's SETTINGS_MAX_CONCURRENT_STREAMS streams are open.
    Full,
    /// Every client stream id has been used (2^31 − 1): a new connection is
    /// needed.
    Exhausted,
    /// The connection failed.
    Failed,
}

/// Where a connection is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The preface went; the node's first frame must be SETTINGS.
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
    /// The request's method, which frames the response.
    method: Method,
    /// The final response head came: the next block is the trailers.
    answered: bool,
    /// What the response body must come to: its `content-length`, or 0
    /// for an answer without a body (RFC 9113 §8.1.1).
    expected: Option<u64>,
    received: u64,
}

/// The node's settings that shape what weir sends.
struct Peer {
    max_frame_size: u32,
    stream_window: i64,
    max_concurrent_streams: u32,
    enable_connect_protocol: bool,
}

/// The client side of one HTTP/2 connection to a node.
pub struct ClientConnection {
    config: Config,
    phase: Phase,
    decoder: hpack::Decoder,
    encoder: hpack::Encoder,
    streams: StreamMap<Stream>,
    /// The id the next stream takes: every odd id below it was opened.
    next_stream: u32,
    blocks: Blocks,
    peer: Peer,
    flow: Flow,
    /// weir's SETTINGS wait for their acknowledgement.
    settings_unacked: bool,
    /// The node's GOAWAY: streams above its last one were not processed.
    node_going_away: Option<u32>,
    /// weir sent GOAWAY: it opens no stream.
    going_away: bool,
    output: Vec<u8>,
    block_buffer: Vec<u8>,
}

/// The highest stream id (RFC 9113 §5.1.1).
const MAX_STREAM_ID: u32 = (1 << 31) - 1;

impl ClientConnection {
    /// A connection whose preface, SETTINGS (push off) and connection
    /// WINDOW_UPDATE are already in the output; requests may follow them
    /// before the node's SETTINGS come (RFC 9113 §3.4).
    pub fn new(config: Config) -> Self {
        let mut output = Vec::with_capacity(128);
        output.extend_from_slice(PREFACE);
        frame::write_settings(
            &mut output,
            &[
                (0x1, config.header_table_size),
                (0x2, 0),
                (0x4, config.stream_window.min(MAX_WINDOW)),
                (0x5, config.max_frame_size),
                (0x6, config.max_header_list_size),
            ],
        );
        let connection_window = i64::from(config.connection_window.min(MAX_WINDOW));
        if connection_window > DEFAULT_WINDOW {
            frame::write_window_update(&mut output, 0, (connection_window - DEFAULT_WINDOW) as u32);
        }
        ClientConnection {
            phase: Phase::FirstSettings,
            decoder: hpack::Decoder::new(),
            encoder: hpack::Encoder::new(),
            streams: StreamMap::default(),
            next_stream: 1,
            blocks: Blocks::default(),
            peer: Peer {
                max_frame_size: DEFAULT_MAX_FRAME_SIZE,
                stream_window: DEFAULT_WINDOW,
                max_concurrent_streams: u32::MAX,
                enable_connect_protocol: false,
            },
            flow: Flow::new(config.connection_window, config.stream_window),
            settings_unacked: true,
            node_going_away: None,
            going_away: false,
            output,
            block_buffer: Vec::new(),
            config,
        }
    }

    /// The bytes to write to the node; the driver drains what it wrote.
    pub fn output(&mut self) -> &mut Vec<u8> {
        &mut self.output
    }

    /// Whether the node's first SETTINGS came (and no connection error
    /// since): its limits are known.
    pub fn is_open(&self) -> bool {
        self.phase == Phase::Open
    }

    /// Whether a connection error ended it.
    pub fn is_failed(&self) -> bool {
        self.phase == Phase::Failed
    }

    /// Streams not yet closed.
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    /// Streams the node takes at once, as its SETTINGS say (`u32::MAX`
    /// before they come or when it set no limit).
    pub fn max_concurrent_streams(&self) -> u32 {
        self.peer.max_concurrent_streams
    }

    /// Whether the node takes extended CONNECT (RFC 8441), as its SETTINGS say.
    pub fn enables_connect_protocol(&self) -> bool {
        self.peer.enable_connect_protocol
    }

    /// Whether a new stream may be opened now, and if not, why.
    pub fn can_open(&self) -> Result<(), Refused> {
        match () {
            _ if self.phase == Phase::Failed => Err(Refused::Failed),
            _ if self.going_away || self.node_going_away.is_some() => Err(Refused::GoingAway),
            _ if self.next_stream > MAX_STREAM_ID => Err(Refused::Exhausted),
            _ if self.streams.len() >= self.peer.max_concurrent_streams as usize => {
                Err(Refused::Full)
            }
            _ => Ok(()),
        }
    }

    /// Reads what whole frames `input` holds, calling `on` for each event,
    /// and returns the bytes it took (the rest waits for more). On a
    /// connection error a GOAWAY is in the output and nothing more is read.
    pub fn receive<F>(&mut self, input: &[u8], mut on: F) -> Result<usize, ConnectionError>
    where
        F: FnMut(Event<'_>),
    {
        if self.phase == Phase::Failed {
            return Ok(input.len());
        }
        let mut used = 0;
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
            frame::write_goaway(&mut self.output, 0, code, reason.as_bytes());
            self.phase = Phase::Failed;
        }
        ConnectionError { code, reason }
    }

    /// Whether `stream` is one weir opened and has since closed (frames on
    /// it are late and ignored), as against one never opened (idle).
    fn was_opened(&self, stream: u32) -> bool {
        stream % 2 == 1 && stream < self.next_stream
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
                if !self.was_opened(stream) {
                    return Err(
                        self.fail(ErrorCode::PROTOCOL_ERROR, "RST_STREAM on an idle stream")
                    );
                }
                if self.forget(stream).is_some() {
                    on(Event::Reset {
                        stream,
                        error,
                        by_node: true,
                        unprocessed: error == ErrorCode::REFUSED_STREAM,
                    });
                }
                Ok(())
            }
            Frame::Settings { ack, settings } => self.settings(ack, settings, on),
            // weir's SETTINGS turned push off (RFC 9113 §8.4).
            Frame::PushPromise { .. } => {
                Err(self.fail(ErrorCode::PROTOCOL_ERROR, "PUSH_PROMISE with push disabled"))
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
                self.node_goaway(last_stream, error, on);
                Ok(())
            }
            Frame::WindowUpdate { stream, increment } => self.window_update(stream, increment, on),
        }
    }
}
