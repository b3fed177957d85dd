//! What weir sends a node: requests, bodies as far as the node's windows
//! allow, trailers, resets, PING and GOAWAY, and the windows it gives back.

use super::{ClientConnection, Phase, Refused, State, Stream, StreamGone, frame};
use crate::error::ParseError;
use crate::frame::ErrorCode;
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
                flow: self.flow.stream(self.peer.stream_window),
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
        self.flow.give_back(&mut self.output, len);
    }

    /// The driver consumed `len` bytes of `stream`'s response body: the node
    /// may send as many more, told once half a window has been consumed.
    pub fn release(&mut self, stream: u32, len: u32) {
        let flow = self
            .streams
            .get_mut(&stream)
            .filter(|state| state.state != State::HalfClosedRemote)
            .map(|state| &mut state.flow);
        self.flow.release(&mut self.output, stream, flow, len);
    }

    /// How many bytes of request body `stream` may take now (both windows).
    pub fn send_capacity(&self, stream: u32) -> usize {
        self.streams
            .get(&stream)
            .map_or(0, |state| self.flow.capacity(&state.flow))
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
        let next = self.streams.get(&stream).map(|s| s.state.end_local());
        match next {
            Some(Some(next)) => self.set_state(stream, next),
            Some(None) => {
                self.forget(stream);
            }
            None => {}
        }
    }

    /// Moves a kept stream to `state`.
    pub(super) fn set_state(&mut self, stream: u32, state: State) {
        if let Some(kept) = self.streams.get_mut(&stream) {
            kept.state = state;
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
