//! Unit tests of the client connection: requests in, frames out; the node's
//! frames in, events out.

use super::*;
use crate::frame::{
    read_frame, write_data_header, write_goaway, write_headers, write_ping, write_rst_stream,
    write_settings, write_window_update,
};
use crate::hpack::{Decoder, Encoder, Indexing};
use crate::http2::NodeRequest;

/// The node's side: its HPACK state both ways, and frames it writes.
struct Node {
    encoder: Encoder,
    decoder: Decoder,
}

impl Node {
    fn new() -> Self {
        Node {
            encoder: Encoder::new(),
            decoder: Decoder::new(),
        }
    }

    fn settings(settings: &[(u16, u32)]) -> Vec<u8> {
        let mut out = Vec::new();
        write_settings(&mut out, settings);
        out
    }

    /// A header block of `fields` (pseudo-header fields included) on `stream`.
    fn block(&mut self, stream: u32, fields: &[(&str, &str)], end_stream: bool) -> Vec<u8> {
        let mut block = Vec::new();
        let mut encoding = self.encoder.block(&mut block);
        for (name, value) in fields {
            encoding.field(name.as_bytes(), value.as_bytes(), Indexing::Index);
        }
        let mut out = Vec::new();
        write_headers(&mut out, stream, &block, end_stream, DEFAULT_MAX_FRAME_SIZE);
        out
    }

    /// The frames in `output`, as text; header blocks decoded as
    /// `name=value` pairs.
    /// A block that spans frames is shown with its HEADERS frame, and each
    /// CONTINUATION as `continuation`.
    fn read(&mut self, output: &[u8]) -> Vec<String> {
        let mut frames = Vec::new();
        let mut rest = output.strip_prefix(&PREFACE[..]).unwrap_or(output);
        // The block being read: its HEADERS frame's place in `frames`, its
        // stream and END_STREAM, and its bytes so far.
        let mut block: Option<(usize, u32, bool, Vec<u8>)> = None;
        while let Some((frame, len)) = read_frame(rest, 1 << 24).expect("weir writes valid frames")
        {
            let (fragment, end_headers) = match frame {
                Frame::Headers {
                    stream,
                    fragment,
                    end_stream,
                    end_headers,
                    ..
                } => {
                    block = Some((frames.len(), stream, end_stream, Vec::new()));
                    frames.push(String::new());
                    (fragment, end_headers)
                }
                Frame::Continuation {
                    fragment,
                    end_headers,
                    ..
                } => {
                    frames.push("continuation".to_owned());
                    (fragment, end_headers)
                }
                other => {
                    frames.push(Self::show(other));
                    rest = &rest[len..];
                    continue;
                }
            };
            let (at, stream, end_stream, mut bytes) = block.take().expect("a block open");
            bytes.extend_from_slice(fragment);
            if end_headers {
                let mut fields = Vec::new();
                self.decoder
                    .decode(&bytes, |field| {
                        fields.push(format!(
                            "{}={}",
                            String::from_utf8_lossy(field.name),
                            String::from_utf8_lossy(field.value)
                        ));
                    })
                    .expect("weir's blocks decode");
                frames[at] = format!("headers {stream} {end_stream} {}", fields.join(" "));
            } else {
                block = Some((at, stream, end_stream, bytes));
            }
            rest = &rest[len..];
        }
        frames
    }

    /// A frame other than a header block's, as text.
    fn show(frame: Frame<'_>) -> String {
        match frame {
            Frame::Data {
                stream,
                data,
                end_stream,
                ..
            } => format!("data {stream} {} {end_stream}", data.len()),
            Frame::RstStream { stream, error } => format!("rst {stream} {}", error.name()),
            Frame::Settings { ack: true, .. } => "settings-ack".to_owned(),
            Frame::Settings { settings, .. } => format!("settings {settings:?}"),
            Frame::WindowUpdate { stream, increment } => format!("window {stream} {increment}"),
            Frame::GoAway { error, .. } => format!("goaway {}", error.name()),
            Frame::Ping { ack, .. } => format!("ping {ack}"),
            other => format!("{other:?}"),
        }
    }
}

/// Feeds `input`, returning the events as text and whether it failed.
fn feed(client: &mut ClientConnection, input: &[u8]) -> (Vec<String>, Option<ConnectionError>) {
    let mut events = Vec::new();
    let result = client.receive(input, |event| {
        events.push(match event {
            Event::Settings {
                max_concurrent_streams,
                ..
            } => format!("settings {max_concurrent_streams}"),
            Event::Interim { stream, status, .. } => format!("interim {stream} {status}"),
            Event::Response {
                stream,
                head,
                end_stream,
            } => format!(
                "response {stream} {} {:?} {end_stream}",
                head.status(),
                head.framing()
            ),
            Event::Malformed { stream, error } => format!("malformed {stream} {}", error.reason),
            Event::Data {
                stream,
                data,
                end_stream,
            } => format!("data {stream} {} {end_stream}", data.len()),
            Event::Trailers { stream, lines } => {
                format!(
                    "trailers {stream} {}",
                    String::from_utf8_lossy(&lines).trim_end()
                )
            }
            Event::Reset {
                stream,
                error,
                by_node,
                unprocessed,
            } => format!("reset {stream} {} {by_node} {unprocessed}", error.name()),
            Event::GoAway { last_stream, .. } => format!("goaway {last_stream}"),
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

const GET: &[u8] = b"GET /items?id=7 HTTP/1.1\r\nHost: example.com\r\nUser-Agent: test\r\nConnection: keep-alive\r\nX-Forwarded-For: 192.0.2.1\r\n\r\n";

fn request(written: &[u8]) -> NodeRequest<'_> {
    NodeRequest {
        written,
        scheme: b"http",
        te_trailers: false,
        protocol: None,
    }
}

/// A connection past the node's SETTINGS, with its output read so far.
fn open(node: &mut Node) -> ClientConnection {
    let mut client = ClientConnection::new(Config::default());
    let (events, failed) = feed(&mut client, &Node::settings(&[]));
    assert_eq!(events, ["settings 4294967295"]);
    assert!(failed.is_none() && client.is_open());
    node.read(&std::mem::take(client.output()));
    client
}

fn send(client: &mut ClientConnection, written: &[u8], end_stream: bool) -> u32 {
    client
        .send_request(&request(written), end_stream)
        .expect("a stream opens")
        .expect("the head encodes")
}

#[test]
fn the_preface_settings_and_window_go_first_and_push_is_off() {
    let mut node = Node::new();
    let mut client = ClientConnection::new(Config::default());
    assert!(client.output().starts_with(PREFACE));
    let frames = node.read(&std::mem::take(client.output()));
    assert_eq!(frames.len(), 2, "{frames:?}");
    assert!(frames[0].contains("enable_push: Some(false)"), "{frames:?}");
    assert_eq!(frames[1], format!("window 0 {}", 4 * 1024 * 1024 - 65_535));
    // A request may go before the node's SETTINGS.
    assert_eq!(send(&mut client, GET, true), 1);
    assert!(!client.is_open());
}

#[test]
fn a_node_whose_first_frame_is_not_settings_fails_the_connection() {
    let mut client = ClientConnection::new(Config::default());
    let mut ping = Vec::new();
    write_ping(&mut ping, false, [0; 8]);
    let (_, failed) = feed(&mut client, &ping);
    assert_eq!(failed.map(|e| e.code), Some(ErrorCode::PROTOCOL_ERROR));
    assert_eq!(client.can_open(), Err(Refused::Failed));
}

#[test]
fn a_request_is_encoded_from_the_written_head_in_http2_form() {
    let mut node = Node::new();
    let mut client = open(&mut node);
    let stream = send(&mut client, GET, true);
    let frames = node.read(&std::mem::take(client.output()));
    assert_eq!(
        frames,
        [format!(
            "headers {stream} true :method=GET :scheme=http :authority=example.com \
             :path=/items?id=7 user-agent=test x-forwarded-for=192.0.2.1"
        )]
    );
    // TE: trailers goes on; HTTP/1.0 without Host goes without :authority.
    let te = NodeRequest {
        te_trailers: true,
        ..request(b"POST /rpc HTTP/1.0\r\nContent-Length: 2\r\n\r\n")
    };
    let stream = client.send_request(&te, false).unwrap().unwrap();
    let frames = node.read(&std::mem::take(client.output()));
    assert_eq!(
        frames,
        [format!(
            "headers {stream} false :method=POST :scheme=http :path=/rpc content-length=2 te=trailers"
        )]
    );
}

#[test]
fn connect_and_extended_connect_take_their_own_pseudo_header_fields() {
    let mut node = Node::new();
    let mut client = open(&mut node);
    send(
        &mut client,
        b"CONNECT db.example:5432 HTTP/1.1\r\nHost: db.example:5432\r\n\r\n",
        false,
    );
    let websocket = NodeRequest {
        protocol: Some(b"websocket"),
        scheme: b"https",
        ..request(b"GET /chat HTTP/1.1\r\nHost: example.com\r\nSec-WebSocket-Version: 13\r\n\r\n")
    };
    client.send_request(&websocket, false).unwrap().unwrap();
    let frames = node.read(&std::mem::take(client.output()));
    assert_eq!(
        frames,
        [
            "headers 1 false :method=CONNECT :authority=db.example:5432",
            "headers 3 false :method=CONNECT :protocol=websocket :scheme=https :path=/chat \
             :authority=example.com sec-websocket-version=13",
        ]
    );
}

#[test]
fn a_response_with_a_length_and_its_body_close_the_stream() {
    let mut node = Node::new();
    let mut client = open(&mut node);
    let stream = send(&mut client, GET, true);
    let mut input = node.block(
        stream,
        &[(":status", "200"), ("content-length", "5")],
        false,
    );
    write_data_header(&mut input, stream, 5, true);
    input.extend_from_slice(b"hello");
    let (events, failed) = feed(&mut client, &input);
    assert!(failed.is_none());
    assert_eq!(
        events,
        [
            format!("response {stream} 200 Length(5) false"),
            format!("data {stream} 5 true"),
        ]
    );
    assert_eq!(client.open_streams(), 0);
}

#[test]
fn a_response_without_a_length_is_framed_by_its_stream() {
    let mut node = Node::new();
    let mut client = open(&mut node);
    let (a, b, c) = (
        send(&mut client, GET, true),
        send(&mut client, GET, true),
        send(
            &mut client,
            b"HEAD / HTTP/1.1\r\nHost: example.com\r\n\r\n",
            true,
        ),
    );
    let mut input = node.block(a, &[(":status", "200")], false);
    input.extend(node.block(b, &[(":status", "404")], true));
    input.extend(node.block(c, &[(":status", "200"), ("content-length", "9")], true));
    let (events, _) = feed(&mut client, &input);
    assert_eq!(
        events,
        [
            format!("response {a} 200 Chunked false"),
            format!("response {b} 404 Length(0) true"),
            format!("response {c} 200 None true"),
        ]
    );
}

#[test]
fn an_interim_response_comes_before_the_final_one() {
    let mut node = Node::new();
    let mut client = open(&mut node);
    let stream = send(&mut client, GET, true);
    let mut input = node.block(stream, &[(":status", "103"), ("link", "</a.css>")], false);
    input.extend(node.block(stream, &[(":status", "204")], true));
    let (events, _) = feed(&mut client, &input);
    assert_eq!(
        events,
        [
            format!("interim {stream} 103"),
            format!("response {stream} 204 None true")
        ]
    );
}

#[test]
fn malformed_response_heads_reset_their_stream_and_keep_the_table_in_step() {
    let cases: &[&[(&str, &str)]] = &[
        &[(":status", "200"), ("X-Upper", "1")],
        &[(":status", "200"), ("connection", "close")],
        &[(":status", "200"), ("te", "trailers")],
        &[("server", "x"), (":status", "200")],
        &[(":status", "200"), (":path", "/")],
        &[(":status", "2000")],
        &[(":status", "101")],
        &[(":status", "200"), ("x-padded", " value")],
        &[(":status", "200"), ("content-length", "x")],
        &[("server", "no status")],
    ];
    for fields in cases {
        let mut node = Node::new();
        let mut client = open(&mut node);
        let stream = send(&mut client, GET, true);
        let (events, failed) = feed(&mut client, &node.block(stream, fields, false));
        assert!(failed.is_none(), "{fields:?}");
        assert_eq!(events.len(), 1, "{fields:?}: {events:?}");
        assert!(
            events[0].starts_with(&format!("malformed {stream}")),
            "{fields:?}: {events:?}"
        );
        let frames = node.read(&std::mem::take(client.output()));
        assert_eq!(
            frames.last(),
            Some(&format!("rst {stream} PROTOCOL_ERROR")),
            "{fields:?}"
        );
        // The fields went into both tables: the next block still decodes.
        let next = send(&mut client, GET, true);
        let (events, _) = feed(&mut client, &node.block(next, fields, true));
        assert!(events[0].starts_with("malformed"), "{events:?}");
        let last = send(&mut client, GET, true);
        let (events, _) = feed(&mut client, &node.block(last, &[(":status", "200")], true));
        assert_eq!(events, [format!("response {last} 200 Length(0) true")]);
    }
}

#[test]
fn trailers_end_the_response_and_must_end_the_stream() {
    let mut node = Node::new();
    let mut client = open(&mut node);
    let (a, b) = (send(&mut client, GET, true), send(&mut client, GET, true));
    let mut input = node.block(
        a,
        &[(":status", "200"), ("content-type", "application/grpc")],
        false,
    );
    write_data_header(&mut input, a, 2, false);
    input.extend_from_slice(b"ok");
    input.extend(node.block(a, &[("grpc-status", "0"), ("content-type", "x")], true));
    input.extend(node.block(b, &[(":status", "200")], false));
    input.extend(node.block(b, &[("grpc-status", "0")], false));
    let (events, _) = feed(&mut client, &input);
    assert_eq!(
        events,
        [
            format!("response {a} 200 Chunked false"),
            format!("data {a} 2 false"),
            format!("trailers {a} grpc-status: 0"),
            format!("response {b} 200 Chunked false"),
            format!("reset {b} PROTOCOL_ERROR false false"),
        ]
    );
}

#[test]
fn a_body_that_breaks_its_length_or_comes_before_the_head_is_reset() {
    let mut node = Node::new();
    let mut client = open(&mut node);
    let (a, b) = (send(&mut client, GET, true), send(&mut client, GET, true));
    let mut input = node.block(a, &[(":status", "200"), ("content-length", "1")], false);
    write_data_header(&mut input, a, 2, true);
    input.extend_from_slice(b"no");
    write_data_header(&mut input, b, 2, true);
    input.extend_from_slice(b"no");
    let (events, _) = feed(&mut client, &input);
    assert_eq!(
        events,
        [
            format!("response {a} 200 Length(1) false"),
            format!("reset {a} PROTOCOL_ERROR false false"),
            format!("reset {b} PROTOCOL_ERROR false false"),
        ]
    );
}

#[test]
fn goaway_refuses_the_streams_above_its_last_and_stops_new_ones() {
    let mut node = Node::new();
    let mut client = open(&mut node);
    let streams: Vec<u32> = (0..3).map(|_| send(&mut client, GET, true)).collect();
    let mut input = Vec::new();
    write_goaway(&mut input, streams[0], ErrorCode::NO_ERROR, b"");
    let (events, _) = feed(&mut client, &input);
    assert_eq!(
        events,
        [
            format!("reset {} REFUSED_STREAM true true", streams[1]),
            format!("reset {} REFUSED_STREAM true true", streams[2]),
            format!("goaway {}", streams[0]),
        ]
    );
    assert_eq!(client.can_open(), Err(Refused::GoingAway));
    assert_eq!(client.open_streams(), 1, "the processed stream finishes");
    let (events, _) = feed(
        &mut client,
        &node.block(streams[0], &[(":status", "200")], true),
    );
    assert_eq!(
        events,
        [format!("response {} 200 Length(0) true", streams[0])]
    );
    // RST_STREAM REFUSED_STREAM says the same of one stream.
    let mut node = Node::new();
    let mut client = open(&mut node);
    let stream = send(&mut client, GET, true);
    let mut input = Vec::new();
    write_rst_stream(&mut input, stream, ErrorCode::REFUSED_STREAM);
    assert_eq!(
        feed(&mut client, &input).0,
        [format!("reset {stream} REFUSED_STREAM true true")]
    );
}

#[test]
fn the_nodes_stream_limit_and_windows_bound_what_weir_sends() {
    let mut node = Node::new();
    let mut client = ClientConnection::new(Config::default());
    let (events, _) = feed(&mut client, &Node::settings(&[(0x3, 1), (0x4, 10)]));
    assert_eq!(events, ["settings 1"]);
    node.read(&std::mem::take(client.output()));
    let stream = send(&mut client, b"POST / HTTP/1.1\r\nHost: a\r\n\r\n", false);
    assert_eq!(client.can_open(), Err(Refused::Full));
    assert_eq!(client.send_capacity(stream), 10);
    assert_eq!(client.send_data(stream, &[b'x'; 25], true), Ok(10));
    let mut update = Vec::new();
    write_window_update(&mut update, stream, 100);
    assert_eq!(feed(&mut client, &update).0, ["window"]);
    assert_eq!(client.send_data(stream, &[b'x'; 15], true), Ok(15));
    let frames = node.read(&std::mem::take(client.output()));
    assert_eq!(
        frames[1..],
        [
            format!("data {stream} 10 false"),
            format!("data {stream} 15 true")
        ]
    );
    assert!(!client.is_sendable(stream), "the request ended");
}

#[test]
fn consumed_response_bytes_reopen_the_windows_at_half() {
    let mut node = Node::new();
    let config = Config {
        stream_window: 100,
        connection_window: 65_535,
        ..Config::default()
    };
    let mut client = ClientConnection::new(config);
    feed(&mut client, &Node::settings(&[]));
    let stream = send(&mut client, GET, true);
    node.read(&std::mem::take(client.output()));
    let mut input = node.block(stream, &[(":status", "200")], false);
    write_data_header(&mut input, stream, 60, false);
    input.extend_from_slice(&[b'y'; 60]);
    feed(&mut client, &input);
    client.release(stream, 60);
    let frames = node.read(&std::mem::take(client.output()));
    assert_eq!(frames, [format!("window {stream} 60")]);
    // More than the stream's window is a stream error.
    let mut input = Vec::new();
    write_data_header(&mut input, stream, 101, false);
    input.extend_from_slice(&[b'y'; 101]);
    assert_eq!(
        feed(&mut client, &input).0,
        [format!("reset {stream} FLOW_CONTROL_ERROR false false")]
    );
}

#[test]
fn late_frames_on_closed_streams_are_ignored_and_idle_ones_fail() {
    let mut node = Node::new();
    let mut client = open(&mut node);
    let stream = send(&mut client, GET, true);
    client.reset(stream, ErrorCode::CANCEL);
    let mut input = node.block(stream, &[(":status", "200")], false);
    write_data_header(&mut input, stream, 3, true);
    input.extend_from_slice(b"abc");
    write_rst_stream(&mut input, stream, ErrorCode::NO_ERROR);
    write_window_update(&mut input, stream, 10);
    let (events, failed) = feed(&mut client, &input);
    assert!(events.is_empty() && failed.is_none(), "{events:?}");
    for frame in [
        {
            let mut out = Vec::new();
            write_data_header(&mut out, 9, 0, true);
            out
        },
        node.block(2, &[(":status", "200")], true),
        {
            let mut out = Vec::new();
            write_rst_stream(&mut out, 11, ErrorCode::CANCEL);
            out
        },
    ] {
        let mut client = open(&mut Node::new());
        send(&mut client, GET, true);
        let (_, failed) = feed(&mut client, &frame);
        assert_eq!(failed.map(|e| e.code), Some(ErrorCode::PROTOCOL_ERROR));
    }
}

#[test]
fn push_is_refused_and_pings_are_answered() {
    let mut client = ClientConnection::new(Config::default());
    let (_, failed) = feed(&mut client, &Node::settings(&[(0x2, 1)]));
    assert_eq!(failed.map(|e| e.code), Some(ErrorCode::PROTOCOL_ERROR));

    let mut node = Node::new();
    let mut client = open(&mut node);
    let mut input = Vec::new();
    write_ping(&mut input, false, [1; 8]);
    write_ping(&mut input, true, [2; 8]);
    assert_eq!(feed(&mut client, &input).0, ["pong"]);
    assert_eq!(node.read(&std::mem::take(client.output())), ["ping true"]);
    client.go_away(ErrorCode::NO_ERROR);
    assert_eq!(client.can_open(), Err(Refused::GoingAway));
    assert_eq!(
        node.read(&std::mem::take(client.output())),
        ["goaway NO_ERROR"]
    );
}

#[test]
fn request_trailers_end_the_request() {
    let mut node = Node::new();
    let mut client = open(&mut node);
    let stream = send(&mut client, b"POST /rpc HTTP/1.1\r\nHost: a\r\n\r\n", false);
    assert_eq!(client.send_data(stream, b"abc", false), Ok(3));
    client
        .send_trailers(stream, b"grpc-timeout: 1S\r\nContent-Type: x\r\n")
        .unwrap();
    let frames = node.read(&std::mem::take(client.output()));
    assert_eq!(
        frames[1..],
        [
            format!("data {stream} 3 false"),
            format!("headers {stream} true grpc-timeout=1S"),
        ]
    );
    assert_eq!(client.send_data(stream, b"x", true), Err(StreamGone));
}

#[test]
fn a_head_that_makes_its_stream_depend_on_itself_resets_it() {
    let mut node = Node::new();
    let mut client = open(&mut node);
    let stream = send(&mut client, GET, true);
    let plain = node.block(stream, &[(":status", "200")], true);
    // The same block behind the PRIORITY flag, depending on its own stream.
    let block = &plain[9..];
    let mut payload = stream.to_be_bytes().to_vec();
    payload.push(15);
    payload.extend_from_slice(block);
    let mut input = Vec::new();
    frame::write_header(
        &mut input,
        payload.len(),
        frame::HEADERS,
        0x4 | 0x1 | 0x20,
        stream,
    );
    input.extend_from_slice(&payload);
    let (events, failed) = feed(&mut client, &input);
    assert!(failed.is_none());
    assert_eq!(
        events,
        [format!("reset {stream} PROTOCOL_ERROR false false")]
    );
}

#[test]
fn heads_span_continuation_frames_both_ways() {
    let mut node = Node::new();
    let mut client = open(&mut node);
    let long = "v".repeat(40_000);
    let written = format!("GET / HTTP/1.1\r\nHost: a\r\nX-Long: {long}\r\n\r\n");
    let stream = send(&mut client, written.as_bytes(), true);
    let frames = node.read(&std::mem::take(client.output()));
    assert!(
        frames.len() >= 3,
        "HEADERS and CONTINUATION frames: {frames:?}"
    );
    assert!(
        frames[0].contains(&format!("x-long={long}")),
        "the block decodes whole"
    );
    let mut block = Vec::new();
    let mut encoding = node.encoder.block(&mut block);
    encoding.field(b":status", b"200", Indexing::Index);
    encoding.field(b"x-long", long.as_bytes(), Indexing::NotIndexed);
    let mut input = Vec::new();
    write_headers(&mut input, stream, &block, true, 16_384);
    let (events, _) = feed(&mut client, &input);
    assert_eq!(events, [format!("response {stream} 200 Length(0) true")]);
}

#[test]
fn a_new_initial_window_moves_the_open_streams_windows() {
    let mut node = Node::new();
    let mut client = open(&mut node);
    let stream = send(&mut client, b"POST / HTTP/1.1\r\nHost: a\r\n\r\n", false);
    assert_eq!(client.send_capacity(stream), 65_535);
    assert_eq!(
        feed(&mut client, &Node::settings(&[(0x4, 100)])).0,
        ["settings 4294967295"]
    );
    assert_eq!(client.send_capacity(stream), 100);
    let (events, _) = feed(&mut client, &Node::settings(&[(0x4, 1000)]));
    assert_eq!(events, ["settings 4294967295", "window"]);
    assert_eq!(client.send_capacity(stream), 1000);
    // A stream window past 2^31 - 1 ends the connection.
    let mut update = Vec::new();
    write_window_update(&mut update, stream, (1 << 31) - 1 - 1000);
    let (_, failed) = feed(
        &mut client,
        &[update, Node::settings(&[(0x4, 2000)])].concat(),
    );
    assert_eq!(failed.map(|e| e.code), Some(ErrorCode::FLOW_CONTROL_ERROR));
}
