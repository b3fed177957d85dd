//! What the client's frames do to the connection: SETTINGS, windows, DATA,
//! header blocks, and the stream states they move (`LIFECYCLE.md`).

use super::{ConnectionError, Event, ServerConnection, State, Stream, frame};
use crate::frame::{ErrorCode, MAX_WINDOW, Settings};
use crate::h2core::HeaderBlock;
use crate::http2::{RequestFields, is_field_name, is_field_value};
use crate::syntax::trim_ows;

impl ServerConnection {
    pub(super) fn settings<F>(
        &mut self,
        ack: bool,
        settings: Settings,
        on: &mut F,
    ) -> Result<(), ConnectionError>
    where
        F: FnMut(Event<'_>),
    {
        if ack {
            if self.settings_unacked {
                self.settings_unacked = false;
                self.decoder
                    .set_allowed_table_size(self.config.header_table_size as usize);
            }
            return Ok(());
        }
        if let Some(size) = settings.header_table_size {
            self.encoder.set_peer_table_size(size as usize);
        }
        if let Some(size) = settings.max_frame_size {
            self.peer.max_frame_size = size;
        }
        if let Some(window) = settings.initial_window_size {
            // RFC 9113 §6.9.2: every stream's window moves by the change.
            let change = i64::from(window) - self.peer.stream_window;
            self.peer.stream_window = i64::from(window);
            for stream in self.streams.values_mut() {
                stream.flow.send += change;
                if stream.flow.send > i64::from(MAX_WINDOW) {
                    return Err(self.fail(
                        ErrorCode::FLOW_CONTROL_ERROR,
                        "SETTINGS_INITIAL_WINDOW_SIZE overflows a window",
                    ));
                }
            }
            if change > 0 {
                on(Event::WindowOpened);
            }
        }
        frame::write_settings_ack(&mut self.output);
        Ok(())
    }

    pub(super) fn window_update<F>(
        &mut self,
        stream: u32,
        increment: u32,
        on: &mut F,
    ) -> Result<(), ConnectionError>
    where
        F: FnMut(Event<'_>),
    {
        let increment = i64::from(increment);
        if stream == 0 {
            if !self.flow.open_send(increment as u32) {
                return Err(self.fail(
                    ErrorCode::FLOW_CONTROL_ERROR,
                    "connection window above 2^31-1",
                ));
            }
            on(Event::WindowOpened);
            return Ok(());
        }
        if stream > self.last_stream {
            return Err(self.fail(ErrorCode::PROTOCOL_ERROR, "WINDOW_UPDATE on an idle stream"));
        }
        let Some(state) = self.streams.get_mut(&stream) else {
            return Ok(());
        };
        state.flow.send += increment;
        if state.flow.send > i64::from(MAX_WINDOW) {
            self.reset_by_weir(stream, ErrorCode::FLOW_CONTROL_ERROR, on);
            return Ok(());
        }
        on(Event::WindowOpened);
        Ok(())
    }

    pub(super) fn data<F>(
        &mut self,
        stream: u32,
        data: &[u8],
        end_stream: bool,
        flow_len: u32,
        on: &mut F,
    ) -> Result<(), ConnectionError>
    where
        F: FnMut(Event<'_>),
    {
        if !self.flow.take_received(flow_len) {
            return Err(self.fail(
                ErrorCode::FLOW_CONTROL_ERROR,
                "DATA beyond the connection window",
            ));
        }
        if stream > self.last_stream {
            return Err(self.fail(ErrorCode::PROTOCOL_ERROR, "DATA on an idle stream"));
        }
        let Some(state) = self.streams.get_mut(&stream) else {
            // A closed stream's DATA still counted against the connection.
            self.give_back(flow_len);
            self.reset_by_weir(stream, ErrorCode::STREAM_CLOSED, on);
            return Ok(());
        };
        let taken = match state.state {
            State::HalfClosedRemote => Err(ErrorCode::STREAM_CLOSED),
            _ => state.flow.take_data(
                &mut state.received,
                state.content_length,
                (data.len(), flow_len, end_stream),
            ),
        };
        // Padding is consumed here; the data when the driver releases it.
        match taken {
            Ok(padding) => self.release(stream, padding),
            Err(error) => {
                self.give_back(flow_len);
                self.reset_by_weir(stream, error, on);
                return Ok(());
            }
        }
        if end_stream {
            self.end_remote(stream);
        }
        on(Event::Data {
            stream,
            data,
            end_stream,
        });
        Ok(())
    }

    pub(super) fn headers<F>(
        &mut self,
        stream: u32,
        fragment: &[u8],
        (end_stream, end_headers, self_dependent): (bool, bool, bool),
        on: &mut F,
    ) -> Result<(), ConnectionError>
    where
        F: FnMut(Event<'_>),
    {
        let known = self.streams.contains_key(&stream);
        if !known {
            if stream.is_multiple_of(2) {
                return Err(self.fail(ErrorCode::PROTOCOL_ERROR, "a client stream with an even id"));
            }
            if self.closed.contains(&stream) {
                return Err(self.fail(ErrorCode::STREAM_CLOSED, "HEADERS on a closed stream"));
            }
            if stream <= self.last_stream {
                return Err(self.fail(ErrorCode::PROTOCOL_ERROR, "a stream id out of order"));
            }
            self.last_stream = stream;
        }
        self.blocks.start(stream, end_stream, self_dependent);
        self.continuation(stream, fragment, end_headers, on)
    }

    pub(super) fn continuation<F>(
        &mut self,
        stream: u32,
        fragment: &[u8],
        end_headers: bool,
        on: &mut F,
    ) -> Result<(), ConnectionError>
    where
        F: FnMut(Event<'_>),
    {
        debug_assert_eq!(self.blocks.open_on().unwrap_or(stream), stream);
        let max = self.config.max_header_list_size as usize;
        let block = match self.blocks.add(fragment, end_headers, max) {
            Ok(Some(block)) => block,
            Ok(None) => return Ok(()),
            Err((code, reason)) => return Err(self.fail(code, reason)),
        };
        let result = self.header_block(&block, on);
        self.blocks.recycle(block);
        result
    }

    /// A whole header block: a new stream's request, or a stream's trailers.
    pub(super) fn header_block<F>(
        &mut self,
        block: &HeaderBlock,
        on: &mut F,
    ) -> Result<(), ConnectionError>
    where
        F: FnMut(Event<'_>),
    {
        let stream = block.stream;
        if let Some(state) = self.streams.get(&stream).map(|s| s.state) {
            return self.trailers_block(block, state, on);
        }
        let mut request = RequestFields::new(self.config.max_header_list_size as usize);
        if self
            .decoder
            .decode(&block.fragment, |field| request.field(field))
            .is_err()
        {
            return Err(self.fail(ErrorCode::COMPRESSION_ERROR, "HPACK block not decodable"));
        }
        if block.self_dependent {
            frame::write_rst_stream(&mut self.output, stream, ErrorCode::PROTOCOL_ERROR);
            self.remember_closed(stream);
            return Ok(());
        }
        let refused = self.going_away.is_some_and(|last| stream > last)
            || self.streams.len() >= self.config.max_concurrent_streams as usize;
        if refused {
            frame::write_rst_stream(&mut self.output, stream, ErrorCode::REFUSED_STREAM);
            return Ok(());
        }
        if request.malformed().is_some() {
            frame::write_rst_stream(&mut self.output, stream, ErrorCode::PROTOCOL_ERROR);
            self.remember_closed(stream);
            return Ok(());
        }
        let (head_request, grpc) = request.answer_form();
        let built = request.finish(block.end_stream, &self.config.head_limits);
        let content_length = match &built {
            Ok(built) => match built.head.framing() {
                crate::BodyFraming::Length(length) => Some(length),
                _ => None,
            },
            Err(_) => None,
        };
        // A length the stream already ended without (RFC 9113 §8.1.1).
        if block.end_stream && content_length.is_some_and(|length| length > 0) {
            frame::write_rst_stream(&mut self.output, stream, ErrorCode::PROTOCOL_ERROR);
            self.remember_closed(stream);
            return Ok(());
        }
        self.streams.insert(
            stream,
            Stream {
                state: match block.end_stream {
                    true => State::HalfClosedRemote,
                    false => State::Open,
                },
                flow: self.flow.stream(self.peer.stream_window),
                content_length,
                received: 0,
            },
        );
        match built {
            Ok(request) => on(Event::Request {
                stream,
                request,
                end_stream: block.end_stream,
            }),
            Err(error) => on(Event::Malformed {
                stream,
                error,
                head_request,
                grpc,
            }),
        }
        Ok(())
    }

    /// A header block on a stream already open: its trailers, which end it.
    fn trailers_block<F>(
        &mut self,
        block: &HeaderBlock,
        state: State,
        on: &mut F,
    ) -> Result<(), ConnectionError>
    where
        F: FnMut(Event<'_>),
    {
        let stream = block.stream;
        let mut lines = Vec::new();
        let mut malformed = false;
        let decoded = self.decoder.decode(&block.fragment, |field| {
            // RFC 9113 §8.1 and §8.2.1: no pseudo-header field, names in
            // lower case, values without NUL, CR or LF.
            malformed |= !is_field_name(field.name) || !is_field_value(field.value);
            // Fields that may not be trailers are left out (RFC 9110 §6.5.1).
            if crate::http2::may_be_trailer(field.name) {
                lines.extend_from_slice(field.name);
                lines.extend_from_slice(b": ");
                lines.extend_from_slice(trim_ows(field.value));
                lines.extend_from_slice(b"\r\n");
            }
        });
        if decoded.is_err() {
            return Err(self.fail(ErrorCode::COMPRESSION_ERROR, "HPACK block not decodable"));
        }
        match state {
            State::HalfClosedRemote => self.reset_by_weir(stream, ErrorCode::STREAM_CLOSED, on),
            // RFC 9113 §8.1: trailers end the stream.
            _ if !block.end_stream || malformed || block.self_dependent => {
                self.reset_by_weir(stream, ErrorCode::PROTOCOL_ERROR, on);
            }
            _ => {
                let length_broken = self
                    .streams
                    .get(&stream)
                    .is_some_and(|s| s.content_length.is_some_and(|length| s.received != length));
                if length_broken {
                    self.reset_by_weir(stream, ErrorCode::PROTOCOL_ERROR, on);
                    return Ok(());
                }
                self.end_remote(stream);
                on(Event::Trailers { stream, lines });
            }
        }
        Ok(())
    }

    /// The client ended its side of `stream`.
    pub(super) fn end_remote(&mut self, stream: u32) {
        if let Some(state) = self.streams.get_mut(&stream) {
            match state.state.end_remote() {
                Some(next) => state.state = next,
                None => {
                    self.forget(stream);
                }
            }
        }
    }

    /// weir ended its side of `stream`.
    pub(super) fn end_local(&mut self, stream: u32) {
        if let Some(state) = self.streams.get_mut(&stream) {
            match state.state.end_local() {
                Some(next) => state.state = next,
                None => {
                    self.forget(stream);
                }
            }
        }
    }

    /// Resets a stream for a rule it broke, telling the driver if it knew it.
    pub(super) fn reset_by_weir<F>(&mut self, stream: u32, error: ErrorCode, on: &mut F)
    where
        F: FnMut(Event<'_>),
    {
        frame::write_rst_stream(&mut self.output, stream, error);
        if self.forget(stream).is_some() {
            on(Event::Reset {
                stream,
                error,
                by_client: false,
            });
        }
    }
}
