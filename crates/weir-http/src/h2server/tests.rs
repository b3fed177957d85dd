//! Unit tests of the server connection: frames in, events and frames out.

use super::*;
use crate::frame::{read_frame, write_headers, write_settings};
use crate::hpack::{Encoder, Indexing};

/// A client's side: its HPACK encoder, and frames it writes.
struct Client {
    encoder: Encoder,
}

impl Client {
    fn new() -> Self {
        Client {
            encoder: Encoder::new(),
        }
    }

    fn preface(settings: &[(u16, u32)]) -> Vec<u8> {
        let mut out = PREFACE.to_vec();
        write_settings(&mut out, settings);
        out
    }

    fn get(&mut self, stream: u32, extra: &[(&str, &str)], end_stream: bool) -> Vec<u8> {
        let mut block = Vec::new();
        let mut encoding = self.encoder.block(&mut block);
        for (name, value) in [
            (":method", "GET"),
            (":scheme", "https"),
            (":authority", "example.com"),
            (":path", "/"),
        ]
        .iter()
        .chain(extra)
        {
            encoding.field(name.as_bytes(), value.as_bytes(), Indexing::Index);
        }
        let mut out = Vec::new();
        write_headers(&mut out, stream, &block, end_stream, DEFAULT_MAX_FRAME_SIZE);
        out
    }
}

/// Feeds `input`, returning the events as text and whether it failed.
fn feed(server: &mut ServerConnection, input: &[u8]) -> (Vec<String>, Option<ConnectionError>) {
    let mut events = Vec::new();
    let result = server.receive(input, |event| {
        events.push(match event {
            Event::Request {
                stream, end_stream, ..
            } => format!("request {stream} {end_stream}"),
            Event::Malformed { stream, error, .. } => {
                format!("malformed {stream} {} {}", error.status(), error.reason)
            }
            Event::Data {
                stream,
                data,
                end_stream,
            } => format!("data {stream} {} {end_stream}", data.len()),
            Event::Trailers { stream, .. } => format!("trailers {stream}"),
            Event::Reset {
                stream,
                error,
                by_client,
            } => format!("reset {stream} {error:?} {by_client}"),
            Event::GoAway { .. } => "goaway".to_owned(),
            Event::PingAnswered { .. } => "pong".to_owned(),
            Event::WindowOpened => "window".to_owned(),
        });
    });
    match result {
        Ok(used) => {
            assert_eq!(used, input.len(), "all of the input taken");
            (events, None)
        }
        Err(error) => (events, Some(error)),
    }
}

/// The frames in the output, as (type, flags, stream, payload length).
fn frames_out(server: &mut ServerConnection) -> Vec<(&'static str, u32, usize)> {
    let output = std::mem::take(server.output());
    let mut rest = &output[..];
    let mut frames = Vec::new();
    while let Some((frame, used)) =
        read_frame(rest, frame::MAX_MAX_FRAME_SIZE).expect("valid frames")
    {
        frames.push(match frame {
            Frame::Data { stream, data, .. } => ("DATA", stream, data.len()),
            Frame::Headers {
                stream, fragment, ..
            } => ("HEADERS", stream, fragment.len()),
            Frame::RstStream { stream, .. } => ("RST_STREAM", stream, 0),
            Frame::Settings { ack, .. } => (if ack { "SETTINGS_ACK" } else { "SETTINGS" }, 0, 0),
            Frame::Ping { .. } => ("PING", 0, 0),
            Frame::GoAway { error, .. } => ("GOAWAY", error.0, 0),
            Frame::WindowUpdate { stream, .. } => ("WINDOW_UPDATE", stream, 0),
            _ => ("OTHER", 0, 0),
        });
        rest = &rest[used..];
    }
    frames
}

#[test]
fn streams_past_the_limit_are_refused_while_others_wait_for_windows() {
    let mut server = ServerConnection::new(Config {
        max_concurrent_streams: 2,
        ..Config::default()
    });
    let mut client = Client::new();
    let mut input = Client::preface(&[(0x4, 0)]);
    for stream in [1, 3, 5] {
        input.extend(client.get(stream, &[], true));
    }
    let (events, error) = feed(&mut server, &input);
    assert_eq!(error, None);
    assert_eq!(
        events,
        vec!["request 1 true".to_owned(), "request 3 true".into()]
    );
    let frames = frames_out(&mut server);
    assert!(frames.contains(&("RST_STREAM", 5, 0)), "{frames:?}");
}

#[test]
fn answered_streams_waiting_for_windows_still_count() {
    let mut server = ServerConnection::new(Config::default());
    let mut client = Client::new();
    let mut input = Client::preface(&[]);
    let mut ack = Vec::new();
    frame::write_settings_ack(&mut ack);
    input.extend(ack);
    let mut zero = Vec::new();
    write_settings(&mut zero, &[(0x4, 0)]);
    input.extend(zero);
    feed(&mut server, &input);
    frames_out(&mut server);
    let head = b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\n";
    for n in 0..101u32 {
        let stream = 1 + 2 * n;
        let (events, error) = feed(&mut server, &client.get(stream, &[], true));
        assert_eq!(error, None);
        if n < 100 {
            assert_eq!(events, vec![format!("request {stream} true")]);
            assert!(server.send_head(stream, 200, head, false).unwrap().is_ok());
            assert_eq!(server.send_data(stream, b"abc", true), Ok(0));
        } else {
            assert!(events.is_empty(), "{events:?}");
            assert!(frames_out(&mut server).contains(&("RST_STREAM", stream, 0)));
        }
    }
}

fn open(server: &mut ServerConnection) {
    let mut input = Client::preface(&[]);
    frame::write_settings_ack(&mut input);
    let (_, error) = feed(server, &input);
    assert_eq!(error, None);
    frames_out(server);
}

fn data(stream: u32, bytes: &[u8], end_stream: bool) -> Vec<u8> {
    let mut out = Vec::new();
    frame::write_data_header(&mut out, stream, bytes.len(), end_stream);
    out.extend_from_slice(bytes);
    out
}

#[test]
fn the_first_frame_must_be_settings_after_the_preface() {
    let mut server = ServerConnection::new(Config::default());
    let (_, error) = feed(&mut server, b"GET / HTTP/1.1\r\n\r\n");
    assert_eq!(error.map(|e| e.code), Some(ErrorCode::PROTOCOL_ERROR));
    let mut server = ServerConnection::new(Config::default());
    let mut input = PREFACE.to_vec();
    frame::write_ping(&mut input, false, [0; 8]);
    let (_, error) = feed(&mut server, &input);
    assert_eq!(error.map(|e| e.code), Some(ErrorCode::PROTOCOL_ERROR));
    // The server's own SETTINGS and its connection window went first.
    let frames = frames_out(&mut server);
    assert_eq!(frames[0].0, "SETTINGS");
    assert_eq!(frames[1], ("WINDOW_UPDATE", 0, 0));
    assert_eq!(frames.last().map(|f| f.0), Some("GOAWAY"));
}

#[test]
fn a_body_is_read_and_its_window_given_back() {
    let config = Config {
        stream_window: 100,
        connection_window: 65_535,
        ..Config::default()
    };
    let mut server = ServerConnection::new(config);
    open(&mut server);
    let mut client = Client::new();
    let mut input = client.get(1, &[("content-length", "120")], false);
    input.extend(data(1, &[b'a'; 60], false));
    let (events, error) = feed(&mut server, &input);
    assert_eq!(error, None);
    assert_eq!(events, vec!["request 1 false", "data 1 60 false"]);
    // Given back, half the window is announced, and the next 60 bytes fit.
    server.release(1, 60);
    let frames = frames_out(&mut server);
    assert!(frames.contains(&("WINDOW_UPDATE", 1, 0)), "{frames:?}");
    let (events, _) = feed(&mut server, &data(1, &[b'b'; 60], true));
    assert_eq!(events, vec!["data 1 60 true"]);
    // The body matched its length; the stream waits for the answer.
    let head = b"HTTP/1.1 204 No Content\r\n\r\n";
    assert!(server.send_head(1, 204, head, true).unwrap().is_ok());
    assert_eq!(server.open_streams(), 0);
}

#[test]
fn a_body_longer_or_shorter_than_its_length_resets_the_stream() {
    let mut server = ServerConnection::new(Config::default());
    open(&mut server);
    let mut client = Client::new();
    let mut input = client.get(1, &[("content-length", "3")], false);
    input.extend(data(1, b"abcd", false));
    let (events, _) = feed(&mut server, &input);
    assert_eq!(events[1], "reset 1 PROTOCOL_ERROR(0x1) false");
    let mut input = client.get(3, &[("content-length", "3")], false);
    input.extend(data(3, b"ab", true));
    let (events, _) = feed(&mut server, &input);
    assert_eq!(events[1], "reset 3 PROTOCOL_ERROR(0x1) false");
    assert!(frames_out(&mut server).contains(&("RST_STREAM", 3, 0)));
}

#[test]
fn trailers_end_the_body() {
    let mut server = ServerConnection::new(Config::default());
    open(&mut server);
    let mut client = Client::new();
    let mut input = client.get(1, &[("te", "trailers")], false);
    input.extend(data(1, b"abc", false));
    let mut block = Vec::new();
    client
        .encoder
        .block(&mut block)
        .field(b"grpc-status", b"0", Indexing::Index);
    write_headers(&mut input, 1, &block, true, DEFAULT_MAX_FRAME_SIZE);
    let (events, error) = feed(&mut server, &input);
    assert_eq!(error, None);
    assert_eq!(
        events,
        vec!["request 1 false", "data 1 3 false", "trailers 1"]
    );
}

#[test]
fn a_header_block_cannot_be_interrupted_nor_grow_without_end() {
    let mut server = ServerConnection::new(Config::default());
    open(&mut server);
    let mut client = Client::new();
    let block = client.get(1, &[], true);
    // HEADERS without END_HEADERS, then a PING: the block was interrupted.
    let mut input = block.clone();
    input[4] &= !0x4;
    frame::write_ping(&mut input, false, [0; 8]);
    let (_, error) = feed(&mut server, &input);
    assert_eq!(error.map(|e| e.code), Some(ErrorCode::PROTOCOL_ERROR));
    // CONTINUATION frames past the header list's size: a flood.
    let mut server = ServerConnection::new(Config {
        max_header_list_size: 4096,
        ..Config::default()
    });
    open(&mut server);
    let mut input = block;
    input[4] &= !0x4;
    for _ in 0..5 {
        frame::write_header(&mut input, 1000, 0x9, 0, 1);
        input.extend_from_slice(&[0x82; 1000]);
    }
    let (_, error) = feed(&mut server, &input);
    assert_eq!(error.map(|e| e.code), Some(ErrorCode::ENHANCE_YOUR_CALM));
}

#[test]
fn an_undecodable_block_is_a_compression_error() {
    let mut server = ServerConnection::new(Config::default());
    open(&mut server);
    let mut input = Vec::new();
    // Index 70: past the empty dynamic table.
    write_headers(&mut input, 1, &[0xc6], true, DEFAULT_MAX_FRAME_SIZE);
    let (_, error) = feed(&mut server, &input);
    assert_eq!(error.map(|e| e.code), Some(ErrorCode::COMPRESSION_ERROR));
    let frames = frames_out(&mut server);
    assert_eq!(frames.last(), Some(&("GOAWAY", 0x9, 0)));
}

#[test]
fn sends_wait_for_the_client_windows() {
    let mut server = ServerConnection::new(Config::default());
    let mut input = Client::preface(&[(0x4, 10)]);
    frame::write_settings_ack(&mut input);
    feed(&mut server, &input);
    let mut client = Client::new();
    feed(&mut server, &client.get(1, &[], true));
    frames_out(&mut server);
    let head = b"HTTP/1.1 200 OK\r\ncontent-length: 25\r\n\r\n";
    assert!(server.send_head(1, 200, head, false).unwrap().is_ok());
    let body = [b'x'; 25];
    assert_eq!(server.send_data(1, &body, true), Ok(10));
    let mut update = Vec::new();
    frame::write_window_update(&mut update, 1, 100);
    let (events, _) = feed(&mut server, &update);
    assert_eq!(events, vec!["window"]);
    assert_eq!(server.send_data(1, &body[10..], true), Ok(15));
    let frames = frames_out(&mut server);
    assert_eq!(
        frames,
        vec![
            ("HEADERS", 1, frames[0].2),
            ("DATA", 1, 10),
            ("DATA", 1, 15)
        ]
    );
    assert_eq!(server.open_streams(), 0);
    assert_eq!(server.send_data(1, b"late", true), Err(StreamGone));
}

#[test]
fn going_away_refuses_later_streams_and_pings_are_answered() {
    let mut server = ServerConnection::new(Config::default());
    open(&mut server);
    let mut client = Client::new();
    feed(&mut server, &client.get(1, &[], false));
    server.go_away(ErrorCode::NO_ERROR);
    let mut input = client.get(3, &[], true);
    frame::write_ping(&mut input, false, *b"12345678");
    let (events, error) = feed(&mut server, &input);
    assert_eq!(error, None);
    assert!(events.is_empty(), "{events:?}");
    let frames = frames_out(&mut server);
    assert_eq!(
        frames,
        vec![("GOAWAY", 0, 0), ("RST_STREAM", 3, 0), ("PING", 0, 0)]
    );
    // Stream 1 goes on.
    assert_eq!(server.open_streams(), 1);
}

#[test]
fn malformed_fields_reset_the_stream_and_bad_targets_are_answered() {
    let mut server = ServerConnection::new(Config::default());
    open(&mut server);
    let mut client = Client::new();
    let (events, _) = feed(
        &mut server,
        &client.get(1, &[("connection", "close")], true),
    );
    assert!(events.is_empty(), "{events:?}");
    assert_eq!(frames_out(&mut server), vec![("RST_STREAM", 1, 0)]);
    let (events, _) = feed(
        &mut server,
        &client.get(3, &[("content-length", "x")], true),
    );
    assert_eq!(events.len(), 1);
    assert!(events[0].starts_with("malformed 3 400"), "{events:?}");
}

#[test]
fn a_length_the_headers_end_without_resets_the_stream_unseen() {
    let mut server = ServerConnection::new(Config::default());
    open(&mut server);
    let mut client = Client::new();
    let (events, _) = feed(
        &mut server,
        &client.get(1, &[("content-length", "5")], true),
    );
    assert!(events.is_empty(), "{events:?}");
    assert_eq!(frames_out(&mut server), vec![("RST_STREAM", 1, 0)]);
    assert_eq!(server.open_streams(), 0);
}

#[test]
fn a_stream_that_depends_on_itself_is_reset_after_its_block_is_read() {
    let mut server = ServerConnection::new(Config::default());
    open(&mut server);
    let mut client = Client::new();
    // The first request adds `:authority` to both tables; its HEADERS frame
    // makes stream 1 depend on itself.
    let first = client.get(1, &[], true);
    let (head, block) = first.split_at(frame::HEADER_LEN);
    let mut input = Vec::new();
    frame::write_header(&mut input, block.len() + 5, 0x1, head[4] | 0x20, 1);
    input.extend_from_slice(&[0, 0, 0, 1, 15]);
    input.extend_from_slice(block);
    let (events, error) = feed(&mut server, &input);
    assert_eq!(error, None);
    assert!(events.is_empty(), "{events:?}");
    assert_eq!(frames_out(&mut server), vec![("RST_STREAM", 1, 0)]);
    // The next one refers to that entry: the server's table kept step.
    let (events, error) = feed(&mut server, &client.get(3, &[], true));
    assert_eq!(error, None);
    assert_eq!(events, vec!["request 3 true"]);
}
