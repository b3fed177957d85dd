//! What the node's frames do to the connection: SETTINGS, windows, DATA,
//! response heads, trailers, GOAWAY, and the stream states they move
//! (`LIFECYCLE.md`).

use super::{ClientConnection, ConnectionError, Event, State, frame};
use crate::frame::{ErrorCode, MAX_WINDOW, Settings};
use crate::h2core::HeaderBlock;
use crate::http2::{NodeHead, ResponseFields, is_field_name, is_field_value, may_be_trailer};
use crate::message::{BodyFraming, Method};
use crate::syntax::trim_ows;

impl ClientConnection {
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
        // RFC 9113 §6.5.2: a server never enables push.
        if settings.enable_push == Some(true) {
            return Err(self.fail(
                ErrorCode::PROTOCOL_ERROR,
                "SETTINGS_ENABLE_PUSH from a server",
            ));
        }
        if let Some(size) = settings.header_table_size {
            self.encoder.set_peer_table_size(size as usize);
        }
        if let Some(size) = settings.max_frame_size {
            self.peer.max_frame_size = size;
        }
        if let Some(max) = settings.max_concurrent_streams {
            self.peer.max_concurrent_streams = max;
        }
        if let Some(enabled) = settings.enable_connect_protocol {
            self.peer.enable_connect_protocol = enabled;
        }
        let mut opened = false;
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
            opened = change > 0;
        }
        frame::write_settings_ack(&mut self.output);
        on(Event::Settings {
            max_concurrent_streams: self.peer.max_concurrent_streams,
            enable_connect_protocol: self.peer.enable_connect_protocol,
        });
        if opened {
            on(Event::WindowOpened);
        }
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
        if stream == 0 {
            if !self.flow.open_send(increment) {
                return Err(self.fail(
                    ErrorCode::FLOW_CONTROL_ERROR,
                    "connection window above 2^31-1",
                ));
            }
            on(Event::WindowOpened);
            return Ok(());
        }
        if !self.was_opened(stream) {
            return Err(self.fail(ErrorCode::PROTOCOL_ERROR, "WINDOW_UPDATE on an idle stream"));
        }
        let Some(state) = self.streams.get_mut(&stream) else {
            return Ok(());
        };
        state.flow.send += i64::from(increment);
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
        if !self.was_opened(stream) {
            return Err(self.fail(ErrorCode::PROTOCOL_ERROR, "DATA on an idle stream"));
        }
        let Some(state) = self.streams.get_mut(&stream) else {
            // A stream weir closed: its DATA was in flight. It still counted
            // against the connection.
            self.give_back(flow_len);
            return Ok(());
        };
        let taken = match () {
            _ if state.state == State::HalfClosedRemote => Err(ErrorCode::STREAM_CLOSED),
            // DATA before the response head (RFC 9113 §8.1).
            _ if !state.answered => Err(ErrorCode::PROTOCOL_ERROR),
            _ => state.flow.take_data(
                &mut state.received,
                state.expected,
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
        if !self.was_opened(stream) {
            return Err(self.fail(
                ErrorCode::PROTOCOL_ERROR,
                "HEADERS on a stream weir did not open",
            ));
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
        match self.blocks.add(fragment, end_headers, max) {
            Ok(Some(block)) => {
                let result = self.header_block(&block, on);
                self.blocks.recycle(block);
                result
            }
            Ok(None) => Ok(()),
            Err((code, reason)) => Err(self.fail(code, reason)),
        }
    }

    /// A whole header block: a response head (interim or final), or the
    /// response's trailers.
    fn header_block<F>(&mut self, block: &HeaderBlock, on: &mut F) -> Result<(), ConnectionError>
    where
        F: FnMut(Event<'_>),
    {
        let stream = block.stream;
        let Some((answered, method)) = self.streams.get(&stream).map(|s| (s.answered, s.method))
        else {
            // A stream weir closed: the block is still decoded, as the
            // node's table moved with it.
            return self.discard_block(block);
        };
        if answered {
            return self.trailers_block(block, on);
        }
        if block.self_dependent {
            self.discard_block(block)?;
            self.reset_by_weir(stream, ErrorCode::PROTOCOL_ERROR, on);
            return Ok(());
        }
        let mut fields = ResponseFields::new(self.config.max_header_list_size as usize);
        if self
            .decoder
            .decode(&block.fragment, |field| fields.field(field))
            .is_err()
        {
            return Err(self.fail(ErrorCode::COMPRESSION_ERROR, "HPACK block not decodable"));
        }
        let head = match fields.finish(block.end_stream, method, &self.config.head_limits) {
            Ok(head) => head,
            Err(error) => {
                frame::write_rst_stream(&mut self.output, stream, ErrorCode::PROTOCOL_ERROR);
                self.forget(stream);
                on(Event::Malformed { stream, error });
                return Ok(());
            }
        };
        match head {
            NodeHead::Interim { status, lines } => on(Event::Interim {
                stream,
                status,
                lines,
            }),
            NodeHead::Final(head) => self.response(stream, head, block.end_stream, on),
        }
        Ok(())
    }

    /// Decodes a block only to keep the node's table in step.
    fn discard_block(&mut self, block: &HeaderBlock) -> Result<(), ConnectionError> {
        match self.decoder.decode(&block.fragment, |_| {}) {
            Ok(()) => Ok(()),
            Err(_) => Err(self.fail(ErrorCode::COMPRESSION_ERROR, "HPACK block not decodable")),
        }
    }

    /// A stream's final response head.
    fn response<F>(&mut self, stream: u32, head: crate::ResponseHead, end_stream: bool, on: &mut F)
    where
        F: FnMut(Event<'_>),
    {
        let Some(state) = self.streams.get_mut(&stream) else {
            return;
        };
        state.answered = true;
        let bodiless = state.method == Method::Head || matches!(head.status(), 204 | 304);
        state.expected = match head.framing() {
            _ if bodiless => Some(0),
            BodyFraming::Length(length) => Some(length),
            _ => None,
        };
        if end_stream {
            self.end_remote(stream);
        }
        on(Event::Response {
            stream,
            head,
            end_stream,
        });
    }

    /// A header block after the final head: the trailers, which end the
    /// stream (RFC 9113 §8.1).
    fn trailers_block<F>(&mut self, block: &HeaderBlock, on: &mut F) -> Result<(), ConnectionError>
    where
        F: FnMut(Event<'_>),
    {
        let stream = block.stream;
        let mut lines = Vec::new();
        let mut malformed = false;
        let decoded = self.decoder.decode(&block.fragment, |field| {
            // No pseudo-header field, names in lower case, values without
            // NUL, CR or LF (RFC 9113 §8.1 and §8.2.1).
            malformed |= !is_field_name(field.name) || !is_field_value(field.value);
            // Fields that may not be trailers are left out (RFC 9110 §6.5.1).
            if may_be_trailer(field.name) {
                lines.extend_from_slice(field.name);
                lines.extend_from_slice(b": ");
                lines.extend_from_slice(trim_ows(field.value));
                lines.extend_from_slice(b"\r\n");
            }
        });
        if decoded.is_err() {
            return Err(self.fail(ErrorCode::COMPRESSION_ERROR, "HPACK block not decodable"));
        }
        let Some(state) = self.streams.get(&stream) else {
            return Ok(());
        };
        let short = state
            .expected
            .is_some_and(|length| state.received != length);
        match state.state {
            State::HalfClosedRemote => self.reset_by_weir(stream, ErrorCode::STREAM_CLOSED, on),
            _ if !block.end_stream || malformed || short || block.self_dependent => {
                self.reset_by_weir(stream, ErrorCode::PROTOCOL_ERROR, on);
            }
            _ => {
                self.end_remote(stream);
                on(Event::Trailers { stream, lines });
            }
        }
        Ok(())
    }

    /// The node's GOAWAY: the streams above its last one were not processed
    /// and are reset as such; no new stream opens.
    pub(super) fn node_goaway<F>(&mut self, last_stream: u32, error: ErrorCode, on: &mut F)
    where
        F: FnMut(Event<'_>),
    {
        // A later GOAWAY may lower the last stream, never raise it (§6.8).
        let last = self
            .node_going_away
            .map_or(last_stream, |l| l.min(last_stream));
        self.node_going_away = Some(last);
        let mut refused: Vec<u32> = self.streams.keys().copied().filter(|&s| s > last).collect();
        refused.sort_unstable();
        for stream in refused {
            self.forget(stream);
            on(Event::Reset {
                stream,
                error: ErrorCode::REFUSED_STREAM,
                by_node: true,
                unprocessed: true,
            });
        }
        on(Event::GoAway {
            last_stream: last,
            error,
        });
    }

    /// The node ended its side of `stream`.
    pub(super) fn end_remote(&mut self, stream: u32) {
        let next = self.streams.get(&stream).map(|s| s.state.end_remote());
        match next {
            Some(Some(next)) => self.set_state(stream, next),
            Some(None) => {
                self.forget(stream);
            }
            None => {}
        }
    }

    /// Resets a stream for a rule the node broke, telling the driver.
    pub(super) fn reset_by_weir<F>(&mut self, stream: u32, error: ErrorCode, on: &mut F)
    where
        F: FnMut(Event<'_>),
    {
        if self.forget(stream).is_some() {
            frame::write_rst_stream(&mut self.output, stream, error);
            on(Event::Reset {
                stream,
                error,
                by_node: false,
                unprocessed: false,
            });
        }
    }
}
