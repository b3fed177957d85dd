//! What weir sends: response heads, bodies as far as the client's windows
//! allow, trailers, resets, PING and GOAWAY, and the windows it gives back.

use super::{CLOSED_KEPT, Phase, ServerConnection, State, Stream, StreamGone, frame};
use crate::error::ParseError;
use crate::frame::ErrorCode;
use crate::http2::{encode_fields, encode_response_head};

impl ServerConnection {
    /// Gives received bytes back to the connection's window.
    pub(super) fn give_back(&mut self, len: u32) {
        self.flow.give_back(&mut self.output, len);
    }

    /// The driver consumed `len` bytes of `stream`'s body: the client may send
    /// as many more, told once half a window has been consumed.
    pub fn release(&mut self, stream: u32, len: u32) {
        let flow = self
            .streams
            .get_mut(&stream)
            .filter(|state| state.state != State::HalfClosedRemote)
            .map(|state| &mut state.flow);
        self.flow.release(&mut self.output, stream, flow, len);
    }

    /// Sends a response head: `written` is the HTTP/1.1 head weir wrote for
    /// it (`status` its status); `end_stream` when no body follows.
    pub fn send_head(
        &mut self,
        stream: u32,
        status: u16,
        written: &[u8],
        end_stream: bool,
    ) -> Result<Result<(), ParseError>, StreamGone> {
        self.sendable(stream)?;
        let mut block = std::mem::take(&mut self.block_buffer);
        block.clear();
        let mut encoding = self.encoder.block(&mut block);
        let encoded = encode_response_head(status, written, &mut encoding);
        // The encoder's table has taken the fields: the block goes out even
        // when a later field failed, cut short, so the client's table stays
        // in step; the caller resets the stream then.
        frame::write_headers(
            &mut self.output,
            stream,
            &block,
            end_stream,
            self.peer.max_frame_size,
        );
        self.block_buffer = block;
        if end_stream {
            self.end_local(stream);
        }
        Ok(encoded)
    }

    /// How many bytes of body `stream` may take now (both windows).
    pub fn send_capacity(&self, stream: u32) -> usize {
        self.streams
            .get(&stream)
            .map_or(0, |state| self.flow.capacity(&state.flow))
    }

    /// Sends as much of `data` as the windows allow, in frames the client
    /// takes, and returns how much went; `end_stream` ends the stream when
    /// all of it went (an empty `data` can end it at any time).
    pub fn send_data(
        &mut self,
        stream: u32,
        data: &[u8],
        end_stream: bool,
    ) -> Result<usize, StreamGone> {
        self.sendable(stream)?;
        let Some(state) = self.streams.get_mut(&stream) else {
            return Err(StreamGone);
        };
        let max_frame = self.peer.max_frame_size;
        let on = (stream, &mut state.flow);
        let sent = self
            .flow
            .send_data(&mut self.output, on, data, max_frame, end_stream);
        if end_stream && sent == data.len() {
            self.end_local(stream);
        }
        Ok(sent)
    }

    /// Ends `stream` with a trailer section (`lines` as HTTP/1.1 trailer
    /// lines, each ending in CRLF).
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

    /// Resets `stream` (a response that cannot go on, a client gone).
    pub fn reset(&mut self, stream: u32, error: ErrorCode) {
        if self.forget(stream).is_some() {
            frame::write_rst_stream(&mut self.output, stream, error);
        }
    }

    /// Sends a PING whose answer comes as [`Event::PingAnswered`].
    pub fn ping(&mut self, payload: [u8; 8]) {
        frame::write_ping(&mut self.output, false, payload);
    }

    /// Ends the connection gracefully: streams up to the last one opened
    /// finish, later ones are refused.
    pub fn go_away(&mut self, error: ErrorCode) {
        if self.going_away.is_none() && self.phase != Phase::Failed {
            self.going_away = Some(self.last_stream);
            frame::write_goaway(&mut self.output, self.last_stream, error, b"");
        }
    }

    /// Ends the connection at once (a flood the driver found): a GOAWAY with
    /// `error` even after a graceful one, and nothing more is read.
    pub fn abort(&mut self, error: ErrorCode) {
        if self.phase != Phase::Failed {
            self.going_away = Some(self.last_stream);
            frame::write_goaway(&mut self.output, self.last_stream, error, b"");
            self.phase = Phase::Failed;
        }
    }

    /// Closes a stream for good, remembering its id a while.
    pub(super) fn forget(&mut self, stream: u32) -> Option<Stream> {
        let state = self.streams.remove(&stream)?;
        self.remember_closed(stream);
        Some(state)
    }

    pub(super) fn remember_closed(&mut self, stream: u32) {
        if self.closed.len() == CLOSED_KEPT {
            self.closed.pop_front();
        }
        self.closed.push_back(stream);
    }

    /// Whether weir may still send on `stream` (open, or half-closed by the
    /// client).
    pub fn is_sendable(&self, stream: u32) -> bool {
        self.sendable(stream).is_ok()
    }

    pub(super) fn sendable(&self, stream: u32) -> Result<(), StreamGone> {
        match self.streams.get(&stream).map(|s| s.state) {
            Some(State::Open | State::HalfClosedRemote) if self.phase != Phase::Failed => Ok(()),
            _ => Err(StreamGone),
        }
    }
}
