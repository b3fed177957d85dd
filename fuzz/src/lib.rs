//! The properties the fuzz targets check, one function per parser.
//!
//! The same file is compiled into `crates/weir-http/tests/fuzz_corpus.rs`
//! (through `#[path]`), so `cargo test` replays every corpus file through
//! exactly these checks. Each function panics when a property fails.

use std::net::{IpAddr, Ipv4Addr};

use bytes::BytesMut;
use weir_http::hpack;
use weir_http::{
    BodyFraming, ChunkedDecoder, Decoded, ForwardRequest, ForwardResponse, Limits, Method,
    ParseErrorKind, Parsed, RequestHead, ResponseHead, Version, parse_request, parse_response,
    write_request_head, write_response_head,
};

/// Small limits, so that inputs of a few KiB reach the 431 paths.
const LIMITS: Limits = Limits {
    max_head_bytes: 1024,
    max_headers: 16,
};

/// For re-parsing a forwarded head, which may have grown past `LIMITS`.
const ROOMY: Limits = Limits {
    max_head_bytes: 64 * 1024,
    max_headers: 64,
};

/// The trailer bound the chunked target decodes with.
const MAX_TRAILER_BYTES: usize = 128;

/// `parse_request` and `RequestHead::split_from` agree; an accepted head is
/// still incomplete one byte short; and the forwarded head parses again with
/// the same method, framing and host.
pub fn check_request_head(data: &[u8]) {
    let parsed = parse_request(data, &LIMITS);
    let mut buf = BytesMut::from(data);
    let split = RequestHead::split_from(&mut buf, &LIMITS);
    let (head, used) = match (parsed, split) {
        (Ok(Parsed::Complete(head, used)), Ok(Some(split))) => {
            assert_eq!(head.raw(), split.raw(), "split_from kept other bytes");
            assert_eq!(buf.len(), data.len() - used, "split_from used other bytes");
            assert_eq!(head.framing(), split.framing());
            (head, used)
        }
        (Ok(Parsed::Partial), Ok(None)) => {
            assert_eq!(&buf[..], data, "split_from consumed a partial head");
            return;
        }
        (Err(parsed), Err(split)) => {
            assert_eq!(parsed, split, "different rejections");
            return;
        }
        (parsed, split) => panic!("parse_request {parsed:?} but split_from {split:?}"),
    };
    assert!(
        matches!(
            parse_request(&data[..used - 1], &LIMITS),
            Ok(Parsed::Partial)
        ),
        "a complete head minus its last byte is not partial"
    );

    let forward = ForwardRequest {
        framing: head.framing(),
        client_addr: Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        proto: "http",
        via: Some("weir"),
        via_version: None,
        upgrade: false,
        strip_expect: false,
        owned_header: Some(("X-Client-Subject", Some("CN=fuzz"))),
        drop_underscore_names: false,
    };
    let mut out = BytesMut::new();
    write_request_head(&head, &forward, &mut out);
    let again = match parse_request(&out, &ROOMY) {
        Ok(Parsed::Complete(again, used)) if used == out.len() => again,
        other => panic!("forwarded head {out:?} parsed as {other:?}"),
    };
    assert_eq!(again.method_bytes(), head.method_bytes(), "method changed");
    assert_eq!(again.framing(), head.framing(), "framing changed");
    assert_eq!(again.version(), Version::Http11);
    if let Some(host) = head.host() {
        assert_eq!(again.host(), Some(host), "host changed");
    }
}

/// For a GET and a HEAD request: `parse_response` and
/// `ResponseHead::split_from` agree, the framing follows the no-body rules,
/// and the forwarded head parses again with the same status and framing.
pub fn check_response_head(data: &[u8]) {
    for method in [Method::Get, Method::Head] {
        check_response_for(data, method);
    }
}

fn check_response_for(data: &[u8], method: Method) {
    let parsed = parse_response(data, &LIMITS, method);
    let mut buf = BytesMut::from(data);
    let split = ResponseHead::split_from(&mut buf, &LIMITS, method);
    let (head, used) = match (parsed, split) {
        (Ok(Parsed::Complete(head, used)), Ok(Some(split))) => {
            assert_eq!(head.raw(), split.raw(), "split_from kept other bytes");
            assert_eq!(buf.len(), data.len() - used, "split_from used other bytes");
            assert_eq!(head.framing(), split.framing());
            (head, used)
        }
        (Ok(Parsed::Partial), Ok(None)) => {
            assert_eq!(&buf[..], data, "split_from consumed a partial head");
            return;
        }
        (Err(parsed), Err(split)) => {
            assert_eq!(parsed, split, "different rejections");
            return;
        }
        (parsed, split) => panic!("parse_response {parsed:?} but split_from {split:?}"),
    };
    assert!(
        matches!(
            parse_response(&data[..used - 1], &LIMITS, method),
            Ok(Parsed::Partial)
        ),
        "a complete head minus its last byte is not partial"
    );
    let status = head.status();
    assert!((100..=599).contains(&status));
    if method == Method::Head || (100..200).contains(&status) || status == 204 || status == 304 {
        assert_eq!(
            head.framing(),
            BodyFraming::None,
            "a body where none may be"
        );
    }

    let forward = ForwardResponse {
        framing: head.framing(),
        version: Version::Http11,
        keep_alive: head.keep_alive(),
        via: Some("weir"),
        via_version: None,
        upgrade: false,
        set_headers: &[("X-Content-Type-Options".to_owned(), "nosniff".to_owned())],
    };
    let mut out = BytesMut::new();
    write_response_head(&head, &forward, &mut out);
    let again = match parse_response(&out, &ROOMY, method) {
        Ok(Parsed::Complete(again, used)) if used == out.len() => again,
        other => panic!("forwarded head {out:?} parsed as {other:?}"),
    };
    assert_eq!(again.status(), status, "status changed");
    assert_eq!(again.framing(), head.framing(), "framing changed");
}

/// What decoding a chunked body produced, compared between feeding styles.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// The body ended with these trailers; `rest` is what followed it.
    Done {
        trailers: Vec<u8>,
        rest: Vec<u8>,
    },
    /// The input ran out before the body ended.
    NeedMore,
    Failed(ParseErrorKind),
}

/// The first byte chooses the sizes of the pieces the rest is fed in. The
/// decoder never panics, and whole or in pieces it yields the same data and
/// the same outcome (error kind, trailers, bytes left after the body).
pub fn check_chunked(data: &[u8]) {
    let Some((&seed, body)) = data.split_first() else {
        return;
    };
    let whole = decode_in_pieces(body, &[body.len().max(1)]);
    let sizes = [
        1 + usize::from(seed & 0x0f),
        1 + usize::from(seed >> 4),
        1,
        3,
    ];
    let pieces = decode_in_pieces(body, &sizes);
    assert_eq!(whole, pieces, "whole and piecewise decoding differ");
}

/// Feeds `body` in pieces of the given sizes (cycling) and decodes as far as it goes.
fn decode_in_pieces(body: &[u8], sizes: &[usize]) -> (Vec<u8>, Outcome) {
    let mut decoder = ChunkedDecoder::new(MAX_TRAILER_BYTES);
    let mut buf = BytesMut::new();
    let mut data = Vec::new();
    let mut unread = body;
    let mut size = sizes.iter().cycle();
    loop {
        match decoder.decode(&mut buf) {
            Ok(Decoded::Data(chunk)) => {
                assert!(!chunk.is_empty(), "empty Data");
                data.extend_from_slice(&chunk);
            }
            Ok(Decoded::NeedMore) if unread.is_empty() => return (data, Outcome::NeedMore),
            Ok(Decoded::NeedMore) => {
                let take = size.next().copied().unwrap_or(1).min(unread.len());
                buf.extend_from_slice(&unread[..take]);
                unread = &unread[take..];
            }
            Ok(Decoded::Done { trailers }) => {
                assert!(decoder.is_done());
                let mut rest = buf.to_vec();
                rest.extend_from_slice(unread);
                let trailers = trailers.to_vec();
                return (data, Outcome::Done { trailers, rest });
            }
            Err(error) => return (data, Outcome::Failed(error.kind)),
        }
    }
}

/// The input is header blocks, each after a byte giving its length, decoded
/// in turn on one connection. The decoder never panics; the fields of each
/// block it accepts, encoded again by weir's encoder on a connection of its
/// own, decode back to the same fields (never-indexed ones still so marked);
/// taken as a request's fields, they are refused or make a head that parses.
pub fn check_hpack(data: &[u8]) {
    let mut decoder = hpack::Decoder::new();
    let mut encoder = hpack::Encoder::new();
    let mut mirror = hpack::Decoder::new();
    let mut rest = data;
    while let Some((&len, tail)) = rest.split_first() {
        let (block, tail) = tail.split_at(usize::from(len).min(tail.len()));
        rest = tail;
        let mut fields = Vec::new();
        let collect = |fields: &mut Vec<_>, field: hpack::Field<'_>| {
            fields.push((
                field.name.to_vec(),
                field.value.to_vec(),
                field.never_indexed,
            ));
        };
        if decoder
            .decode(block, |field| collect(&mut fields, field))
            .is_err()
        {
            // The connection ends at a COMPRESSION_ERROR.
            return;
        }
        // The same fields as a request: refused or a head the HTTP/1.1 parser
        // reads back the same.
        let mut request = weir_http::http2::RequestFields::new(16 * 1024);
        for (name, value, never_indexed) in &fields {
            request.field(hpack::Field {
                name,
                value,
                never_indexed: *never_indexed,
            });
        }
        if let Ok(built) = request.finish(false, &ROOMY) {
            match parse_request(built.head.raw(), &ROOMY) {
                Ok(Parsed::Complete(head, used)) => {
                    assert_eq!(head.raw(), built.head.raw(), "request head read back");
                    assert_eq!(used, built.head.raw().len());
                }
                other => panic!("a built request head does not parse: {other:?}"),
            }
        }
        let mut out = Vec::new();
        let mut again = encoder.block(&mut out);
        for (name, value, never) in &fields {
            let indexing = match never {
                true => hpack::Indexing::Never,
                false => hpack::Indexing::Index,
            };
            again.field(name, value, indexing);
        }
        let mut decoded = Vec::new();
        mirror
            .decode(&out, |field| collect(&mut decoded, field))
            .expect("a block weir encoded decodes");
        assert_eq!(fields, decoded, "re-encoded fields differ");
    }
}

/// The input is HTTP/2 frames, read one after another under a 16 KiB
/// SETTINGS_MAX_FRAME_SIZE until one fails or the input ends. The reader
/// never panics; a frame takes exactly its header and declared length; every
/// shorter prefix of it is incomplete, not an error; and control frames the
/// writers can make, written again, read back the same.
pub fn check_frames(data: &[u8]) {
    use weir_http::frame::{self, Frame, read_frame};
    const MAX: u32 = frame::DEFAULT_MAX_FRAME_SIZE;
    let mut rest = data;
    while let Ok(Some((read, used))) = read_frame(rest, MAX) {
        let declared = u32::from_be_bytes([0, rest[0], rest[1], rest[2]]) as usize;
        assert_eq!(used, frame::HEADER_LEN + declared, "frame length");
        for cut in [0, 1, frame::HEADER_LEN - 1, frame::HEADER_LEN, used - 1] {
            if cut < used {
                assert_eq!(read_frame(&rest[..cut], MAX), Ok(None), "prefix of {cut}");
            }
        }
        let mut again = Vec::new();
        match read {
            Frame::Ping { ack, payload } => frame::write_ping(&mut again, ack, payload),
            Frame::GoAway {
                last_stream,
                error,
                debug,
            } => frame::write_goaway(&mut again, last_stream, error, debug),
            Frame::WindowUpdate { stream, increment } => {
                frame::write_window_update(&mut again, stream, increment)
            }
            Frame::RstStream { stream, error } => {
                frame::write_rst_stream(&mut again, stream, error)
            }
            _ => {}
        }
        if !again.is_empty() {
            assert_eq!(
                read_frame(&again, MAX),
                Ok(Some((read, again.len()))),
                "written again"
            );
        }
        rest = &rest[used..];
    }
}

/// The input is what a client sends after its preface and SETTINGS. The
/// server connection never panics; every request it hands out is answered
/// with a head and a short body; what it writes is always whole, valid
/// frames; and once it fails, it reads nothing more and its last frame is
/// a GOAWAY.
pub fn check_h2server(data: &[u8]) {
    use weir_http::frame;
    use weir_http::h2server::{Config, Event, ServerConnection};
    let mut server = ServerConnection::new(Config {
        max_concurrent_streams: 8,
        stream_window: 1024,
        connection_window: 4096,
        max_header_list_size: 2048,
        ..Config::default()
    });
    let mut input = frame::PREFACE.to_vec();
    frame::write_settings(&mut input, &[]);
    input.extend_from_slice(data);
    // Fed in two pieces, so that frames split across reads are met too.
    let (first, second) = input.split_at(input.len() / 2);
    let mut buffer = Vec::new();
    let mut failed = false;
    for piece in [first, second] {
        buffer.extend_from_slice(piece);
        let mut answer = Vec::new();
        let mut consumed = Vec::new();
        let result = server.receive(&buffer, |event| match event {
            Event::Request { stream, .. } | Event::Malformed { stream, .. } => answer.push(stream),
            Event::Data { stream, data, .. } => consumed.push((stream, data.len() as u32)),
            _ => {}
        });
        for (stream, len) in consumed {
            server.release(stream, len);
        }
        for stream in answer {
            let head = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n";
            if let Ok(encoded) = server.send_head(stream, 200, head, false) {
                assert!(encoded.is_ok(), "weir's own head encodes");
                let _ = server.send_data(stream, b"ok", true);
            }
        }
        if taken(&mut buffer, result.map_err(drop)) {
            failed = true;
            break;
        }
    }
    whole_frames(server.output(), failed);
}

/// The input is what a node sends after its SETTINGS, to a connection that
/// has opened four streams (two with bodies still to send). The client
/// connection never panics; it never sends more body than the node's
/// windows allow; what it writes is always whole, valid frames; and once it
/// fails, it reads nothing more and its last frame is a GOAWAY.
pub fn check_h2client(data: &[u8]) {
    use weir_http::frame;
    use weir_http::h2client::{ClientConnection, Config, Event};
    use weir_http::http2::NodeRequest;
    let mut client = ClientConnection::new(Config {
        stream_window: 1024,
        connection_window: 4096,
        max_header_list_size: 2048,
        ..Config::default()
    });
    let mut streams = Vec::new();
    for (written, ends) in [
        (&b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"[..], true),
        (
            b"POST /up HTTP/1.1\r\nHost: a\r\ncontent-length: 100000\r\n\r\n",
            false,
        ),
        (b"HEAD / HTTP/1.1\r\nHost: a\r\n\r\n", true),
        (b"POST /rpc HTTP/1.1\r\nHost: a\r\n\r\n", false),
    ] {
        let request = NodeRequest {
            written,
            scheme: b"http",
            te_trailers: !ends,
            protocol: None,
        };
        let stream = client
            .send_request(&request, ends)
            .expect("a new connection takes streams");
        streams.push(stream.expect("a valid head"));
    }
    let mut input = Vec::new();
    frame::write_settings(&mut input, &[]);
    input.extend_from_slice(data);
    let body = [b'b'; 100_000];
    let (first, second) = input.split_at(input.len() / 2);
    let mut buffer = Vec::new();
    let mut failed = false;
    for piece in [first, second] {
        buffer.extend_from_slice(piece);
        let mut consumed = Vec::new();
        let result = client.receive(&buffer, |event| {
            if let Event::Data { stream, data, .. } = event {
                consumed.push((stream, data.len() as u32));
            }
        });
        for (stream, len) in consumed {
            client.release(stream, len);
        }
        for &stream in &streams[1..] {
            let capacity = client.send_capacity(stream);
            if let Ok(sent) = client.send_data(stream, &body, false) {
                assert!(sent <= capacity, "sent past the windows");
            }
        }
        if taken(&mut buffer, result.map_err(drop)) {
            failed = true;
            break;
        }
    }
    let output = std::mem::take(client.output());
    let rest = output
        .strip_prefix(&frame::PREFACE[..])
        .expect("the preface first");
    whole_frames(&mut rest.to_vec(), failed);
}

/// Drops what a connection took from `buffer`; whether it failed instead.
fn taken(buffer: &mut Vec<u8>, result: Result<usize, ()>) -> bool {
    match result {
        Ok(used) => {
            assert!(used <= buffer.len(), "took more than it was given");
            buffer.drain(..used);
            false
        }
        Err(()) => true,
    }
}

/// What a connection wrote is whole, valid frames, and a failed one ends
/// with GOAWAY.
fn whole_frames(output: &mut Vec<u8>, failed: bool) {
    use weir_http::frame::{self, Frame, read_frame};
    let output = std::mem::take(output);
    let mut rest = &output[..];
    let mut last = None;
    while !rest.is_empty() {
        let (frame, used) = read_frame(rest, frame::MAX_MAX_FRAME_SIZE)
            .expect("weir writes valid frames")
            .expect("weir writes whole frames");
        last = Some(matches!(frame, Frame::GoAway { .. }));
        rest = &rest[used..];
    }
    if failed {
        assert_eq!(last, Some(true), "a failed connection ends with GOAWAY");
    }
}
