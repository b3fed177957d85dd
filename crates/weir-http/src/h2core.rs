//! What the two sides of weir's own HTTP/2 codec share (`crate::h2server`,
//! `crate::h2client`): a stream's state as weir sees it, flow control in
//! both directions, and a header block gathered across CONTINUATION frames.
//! Each side keeps its own rules on which frames may come when; these parts
//! are the same whichever side opened the stream.

use crate::frame::{self, ErrorCode, MAX_WINDOW};

/// The default window both sides start from (RFC 9113 §6.9.2).
pub(crate) const DEFAULT_WINDOW: i64 = 65_535;

/// A stream's state (RFC 9113 §5.1); a closed stream is no longer kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// Both sides may send.
    Open,
    /// The peer ended its side.
    HalfClosedRemote,
    /// weir ended its side; the peer may still send.
    HalfClosedLocal,
}

impl State {
    /// The state once weir ends its side: `None` when the stream closes.
    pub(crate) fn end_local(self) -> Option<State> {
        match self {
            State::HalfClosedRemote => None,
            _ => Some(State::HalfClosedLocal),
        }
    }

    /// The state once the peer ends its side: `None` when the stream closes.
    pub(crate) fn end_remote(self) -> Option<State> {
        match self {
            State::HalfClosedLocal => None,
            _ => Some(State::HalfClosedRemote),
        }
    }
}

/// One stream's flow control.
#[derive(Debug)]
pub(crate) struct StreamFlow {
    /// What weir may send on it (RFC 9113 §6.9), which SETTINGS can drive
    /// below zero.
    pub(crate) send: i64,
    /// What the peer may still send on it.
    pub(crate) receive: i64,
    /// Bytes consumed and not yet given back with a WINDOW_UPDATE.
    pub(crate) released: u32,
}

impl StreamFlow {
    /// Counts a DATA frame on a stream that may take it: `flow_len` against
    /// its window, the body against `length` (its `content-length`, which the
    /// body must come to: RFC 9113 §8.1.1), `received` the body so far.
    /// Returns the frame's padding, consumed at once, or the stream error.
    pub(crate) fn take_data(
        &mut self,
        received: &mut u64,
        length: Option<u64>,
        (data_len, flow_len, end_stream): (usize, u32, bool),
    ) -> Result<u32, ErrorCode> {
        let flow = i64::from(flow_len);
        if flow > self.receive {
            return Err(ErrorCode::FLOW_CONTROL_ERROR);
        }
        self.receive -= flow;
        *received += data_len as u64;
        if length.is_some_and(|length| *received > length || (end_stream && *received != length)) {
            return Err(ErrorCode::PROTOCOL_ERROR);
        }
        Ok(flow_len - data_len as u32)
    }
}

/// The connection's flow control, and the windows weir offers.
#[derive(Debug)]
pub(crate) struct Flow {
    /// What weir may send on the connection.
    pub(crate) send: i64,
    /// What the peer may still send on the connection.
    pub(crate) receive: i64,
    released: u32,
    /// The connection window weir offers.
    connection_window: u32,
    /// The stream window weir offers (SETTINGS_INITIAL_WINDOW_SIZE).
    stream_window: u32,
}

impl Flow {
    /// A connection offering these windows; the peer's start at the default.
    pub(crate) fn new(connection_window: u32, stream_window: u32) -> Self {
        let connection_window = connection_window.min(MAX_WINDOW);
        Flow {
            send: DEFAULT_WINDOW,
            receive: i64::from(connection_window).max(DEFAULT_WINDOW),
            released: 0,
            connection_window,
            stream_window: stream_window.min(MAX_WINDOW),
        }
    }

    /// A new stream's flow control, `peer_window` being what the peer's
    /// SETTINGS_INITIAL_WINDOW_SIZE lets weir send.
    pub(crate) fn stream(&self, peer_window: i64) -> StreamFlow {
        StreamFlow {
            send: peer_window,
            receive: i64::from(self.stream_window),
            released: 0,
        }
    }

    /// Gives received bytes back to the connection's window, told once half
    /// of it has been consumed.
    pub(crate) fn give_back(&mut self, out: &mut Vec<u8>, len: u32) {
        self.released += len;
        if self.released > 0 && self.released >= self.connection_window / 2 {
            frame::write_window_update(out, 0, self.released);
            self.receive += i64::from(self.released);
            self.released = 0;
        }
    }

    /// `len` bytes of `stream`'s body were consumed: the connection's window
    /// takes them back, and the stream's (`flow`, when it is kept and the
    /// peer may still send on it), each told once half of it is used.
    pub(crate) fn release(
        &mut self,
        out: &mut Vec<u8>,
        stream: u32,
        flow: Option<&mut StreamFlow>,
        len: u32,
    ) {
        if len == 0 {
            return;
        }
        self.give_back(out, len);
        let Some(flow) = flow else {
            return;
        };
        flow.released += len;
        if flow.released >= self.stream_window / 2 {
            frame::write_window_update(out, stream, flow.released);
            flow.receive += i64::from(flow.released);
            flow.released = 0;
        }
    }

    /// How many bytes of body a stream may take now (both windows).
    pub(crate) fn capacity(&self, flow: &StreamFlow) -> usize {
        flow.send.min(self.send).max(0) as usize
    }

    /// Sends as much of `data` as both windows allow on `stream`, in frames
    /// of at most `max_frame` bytes, and returns how much went; `end_stream`
    /// marks the last frame when all of it went.
    pub(crate) fn send_data(
        &mut self,
        out: &mut Vec<u8>,
        (stream, flow): (u32, &mut StreamFlow),
        data: &[u8],
        max_frame: u32,
        end_stream: bool,
    ) -> usize {
        let take = data.len().min(self.capacity(flow));
        let sent = frame::write_data_frames(out, stream, data, take, max_frame, end_stream);
        self.send -= take as i64;
        flow.send -= take as i64;
        sent
    }

    /// Counts a DATA frame's length against the connection's window; `false`
    /// when it goes past it (a connection error).
    pub(crate) fn take_received(&mut self, flow_len: u32) -> bool {
        let flow = i64::from(flow_len);
        if flow > self.receive {
            return false;
        }
        self.receive -= flow;
        true
    }

    /// A WINDOW_UPDATE for the connection; `false` past 2^31 − 1 (a
    /// connection error).
    pub(crate) fn open_send(&mut self, increment: u32) -> bool {
        self.send += i64::from(increment);
        self.send <= i64::from(MAX_WINDOW)
    }
}

/// A header block being read: HEADERS, then CONTINUATION frames.
pub(crate) struct HeaderBlock {
    pub(crate) stream: u32,
    pub(crate) fragment: Vec<u8>,
    pub(crate) end_stream: bool,
    /// The HEADERS frame made the stream depend on itself (RFC 9113
    /// §5.3.1): once the block is decoded, the stream is reset.
    pub(crate) self_dependent: bool,
}

/// The header block being gathered, if any, and a buffer kept for the next.
#[derive(Default)]
pub(crate) struct Blocks {
    current: Option<HeaderBlock>,
    spare: Vec<u8>,
}

impl Blocks {
    /// The stream whose block is open: only its CONTINUATION may come next.
    pub(crate) fn open_on(&self) -> Option<u32> {
        self.current.as_ref().map(|block| block.stream)
    }

    /// A HEADERS frame starts a block on `stream`.
    pub(crate) fn start(&mut self, stream: u32, end_stream: bool, self_dependent: bool) {
        let mut fragment = std::mem::take(&mut self.spare);
        fragment.clear();
        self.current = Some(HeaderBlock {
            stream,
            fragment,
            end_stream,
            self_dependent,
        });
    }

    /// Adds a fragment to the open block; the block once END_HEADERS came.
    /// A block's compressed size is bounded as its decoded size is, by
    /// `max_size` (CVE-2024-27316 sends endless ones).
    pub(crate) fn add(
        &mut self,
        fragment: &[u8],
        end_headers: bool,
        max_size: usize,
    ) -> Result<Option<HeaderBlock>, (ErrorCode, &'static str)> {
        let Some(block) = self.current.as_mut() else {
            return Err((
                ErrorCode::PROTOCOL_ERROR,
                "CONTINUATION outside a header block",
            ));
        };
        if block.fragment.len() + fragment.len() > max_size {
            return Err((ErrorCode::ENHANCE_YOUR_CALM, "header block too large"));
        }
        block.fragment.extend_from_slice(fragment);
        Ok(if end_headers {
            self.current.take()
        } else {
            None
        })
    }

    /// A block handled: its buffer serves the next.
    pub(crate) fn recycle(&mut self, block: HeaderBlock) {
        let mut buffer = block.fragment;
        buffer.clear();
        self.spare = buffer;
    }
}
