//! What weir sends: response heads, bodies as far as the client's windows
//! allow, trailers, resets, PING and GOAWAY, and the windows it gives back.

use super::{CLOSED_KEPT, Phase, ServerConnection, State, Stream, StreamGone, frame};
use crate::error::ParseError;
use crate::frame::{ErrorCode, MAX_WINDOW};
use crate::http2::{encode_fields, encode_response_head};

impl ServerConnection {
    /// Gives received bytes back to the connection's window.
    pub(super) fn give_back(&mut self, len: u32) {
        self.released += len;
        if self.released > 0 && self.released >= self.config.connection_window.min(MAX_WINDOW) / 2 {
            frame::write_window_update(&mut self.output, 0, self.released);
            self.receive_window += i64::from(self.released);
            self.released = 0;
        }
    }

    /// The driver consumed `len` bytes of `stream`'s body: the client may send
    /// as many more, told once half a window has been consumed.
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
        match self.streams.get(&stream) {
            Some(state) => state.send_window.min(self.send_window).max(0) as usize,
            None => 0,
        }
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
