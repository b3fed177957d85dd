//! What weir sends a node: requests, bodies as far as the node's windows
//! allow, trailers, resets, PING and GOAWAY, and the windows it gives back.

use super::{ClientConnection, Phase, Refused, State, Stream, StreamGone, frame};
use crate::error::ParseError;
use crate::frame::{ErrorCode, MAX_WINDOW};
use crate::http2::{NodeRequest, encode_fields, encode_request_head};

impl ClientConnection {
    /// Opens a stream for `request` and sends its head; `end_stream` when no
    /// body follows. Returns the stream's id, or why no stream opened. A
    /// head that cannot be put in HTTP/2 form still took its stream (the
    /// block went out cut short, so the node's table stays in step, and the
    /// stream was reset): the error comes inside.
    pub fn send_request(
        &mut self,
        request: &NodeRequest<'_>,
        end_stream: bool,
    ) -> Result<Result<u32, ParseError>, Refused> {
        self.can_open()?;
        let stream = self.next_stream;
        self.next_stream += 2;
        let mut block = std::mem::take(&mut self.block_buffer);
        block.clear();
        let mut encoding = self.encoder.block(&mut block);
        let encoded = encode_request_head(request, &mut encoding);
        let failed = encoded.is_err();
        frame::write_headers(
            &mut self.output,
            stream,
            &block,
            end_stream || failed,
            self.peer.max_frame_size,
        );
        self.block_buffer = block;
        let method = match encoded {
            Ok(method) => method,
            Err(error) => {
                frame::write_rst_stream(&mut self.output, stream, ErrorCode::CANCEL);
                return Ok(Err(error));
            }
        };
        self.streams.insert(
            stream,
            Stream {
                state: match end_stream {
                    true => State::HalfClosedLocal,
                    false => State::Open,
                },
                send_window: self.peer.stream_window,
                receive_window: i64::from(self.config.stream_window.min(MAX_WINDOW)),
                released: 0,
                method,
                answered: false,
                expected: None,
                received: 0,
            },
        );
        Ok(Ok(stream))
    }

    /// Gives received bytes back to the connection's window.
    pub(super) fn give_back(&mut self, len: u32) {
        self.released += len;
        if self.released > 0 && self.released >= self.config.connection_window.min(MAX_WINDOW) / 2 {
            frame::write_window_update(&mut self.output, 0, self.released);
            self.receive_window += i64::from(self.released);
            self.released = 0;
        }
    }

    /// The driver consumed `len` bytes of `stream`'s response body: the node
    /// may send as many more, told once half a window has been consumed.
    pub fn release(&mut self, stream: u32, len: u32) {
        if len == 0 {
            return;
        }
        self.give_back(len);
        let threshold = self.config.stream_window.min(MAX_WINDOW) / 2;
        let Some(state) = self.streams.get_mut(&stream) else {
            return;
        };
        if state.state == State::HalfClosedRemote {
            return;
        }
        state.released += len;
        if state.released >= threshold {
            frame::write_window_update(&mut self.output, stream, state.released);
            state.receive_window += i64::from(state.released);
            state.released = 0;
        }
    }

    /// How many bytes of request body `stream` may take now (both windows).
    pub fn send_capacity(&self, stream: u32) -> usize {
        match self.streams.get(&stream) {
            Some(state) => state.send_window.min(self.send_window).max(0) as usize,
            None => 0,
        }
    }

    /// Sends as much of `data` as the windows allow, in frames the node
    /// takes, and returns how much went; `end_stream` ends the request when
    /// all of it went (an empty `data` can end it at any time).
    pub fn send_data(
        &mut self,
        stream: u32,
        data: &[u8],
        end_stream: bool,
    ) -> Result<usize, StreamGone> {
        self.sendable(stream)?;
        let take = data.len().min(self.send_capacity(stream));
        let sent = frame::write_data_frames(
            &mut self.output,
            stream,
            data,
            take,
            self.peer.max_frame_size,
            end_stream,
        );
        self.send_window -= take as i64;
        if let Some(state) = self.streams.get_mut(&stream) {
            state.send_window -= take as i64;
        }
        if end_stream && sent == data.len() {
            self.end_local(stream);
        }
        Ok(sent)
    }

    /// Ends the request on `stream` with a trailer section (`lines` as
    /// HTTP/1.1 trailer lines, each ending in CRLF; fields that may not be
    /// trailers are left out).
    pub fn send_trailers(&mut self, stream: u32, lines: &[u8]) -> Result<(), StreamGone> {
        self.sendable(stream)?;
        let mut block = std::mem::take(&mut self.block_buffer);
        block.clear();
        let mut encoding = self.encoder.block(&mut block);
        let kept = crate::http2::trailer_lines(lines);
        // A line that cannot be encoded is left out; the rest still go.
        let _ = encode_fields(&kept, &mut encoding);
        frame::write_headers(
            &mut self.output,
            stream,
            &block,
            true,
            self.peer.max_frame_size,
        );
        self.block_buffer = block;
        self.end_local(stream);
        Ok(())
    }

    /// Resets `stream` (a request abandoned: the client went, a timeout).
    pub fn reset(&mut self, stream: u32, error: ErrorCode) {
        if self.forget(stream).is_some() {
            frame::write_rst_stream(&mut self.output, stream, error);
        }
    }

    /// Sends a PING whose answer comes as [`super::Event::PingAnswered`].
    pub fn ping(&mut self, payload: [u8; 8]) {
        frame::write_ping(&mut self.output, false, payload);
    }

    /// Ends the connection gracefully: the open streams finish, no new one
    /// opens. (A client's GOAWAY names stream 0: the node opened none.)
    pub fn go_away(&mut self, error: ErrorCode) {
        if !self.going_away && self.phase != Phase::Failed {
            self.going_away = true;
            frame::write_goaway(&mut self.output, 0, error, b"");
        }
    }

    /// weir ended its side of `stream`.
    fn end_local(&mut self, stream: u32) {
        let Some(state) = self.streams.get_mut(&stream) else {
            return;
        };
        match state.state {
            State::HalfClosedRemote => {
                self.forget(stream);
            }
            _ => state.state = State::HalfClosedLocal,
        }
    }

    /// Closes a stream for good.
    pub(super) fn forget(&mut self, stream: u32) -> Option<Stream> {
        self.streams.remove(&stream)
    }

    /// Whether weir may still send on `stream` (open, or half-closed by the
    /// node: it answered before the request was whole).
    pub fn is_sendable(&self, stream: u32) -> bool {
        self.sendable(stream).is_ok()
    }

    fn sendable(&self, stream: u32) -> Result<(), StreamGone> {
        match self.streams.get(&stream).map(|s| s.state) {
            Some(State::Open | State::HalfClosedRemote) if self.phase != Phase::Failed => Ok(()),
            _ => Err(StreamGone),
        }
    }
}
