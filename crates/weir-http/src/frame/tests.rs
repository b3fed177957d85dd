//! Each frame type read back from what the writers write, split input, and
//! every rule of RFC 9113 §4 and §6 a single frame can break.

use super::*;

const MAX: u32 = DEFAULT_MAX_FRAME_SIZE;

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    write_header(&mut out, payload.len(), kind, flags, stream);
    out.extend_from_slice(payload);
    out
}

fn read_one(bytes: &[u8]) -> Result<Frame<'_>, FrameError> {
    let (frame, used) = read_frame(bytes, MAX)?.expect("a whole frame");
    assert_eq!(used, bytes.len());
    Ok(frame)
}

#[test]
fn a_frame_is_taken_only_when_whole() {
    let bytes = frame(PING, 0, 0, &[1, 2, 3, 4, 5, 6, 7, 8]);
    for cut in 0..bytes.len() {
        assert_eq!(read_frame(&bytes[..cut], MAX), Ok(None), "{cut}");
    }
    let mut two = bytes.clone();
    two.extend_from_slice(&bytes);
    let (_, used) = read_frame(&two, MAX).unwrap().unwrap();
    assert_eq!(used, HEADER_LEN + 8);
}

#[test]
fn writers_and_reader_agree() {
    let mut out = Vec::new();
    write_settings(&mut out, &[(0x3, 100), (0x4, 65_535), (0x8, 1), (0x99, 7)]);
    assert_eq!(
        read_one(&out),
        Ok(Frame::Settings {
            ack: false,
            settings: Settings {
                max_concurrent_streams: Some(100),
                initial_window_size: Some(65_535),
                enable_connect_protocol: Some(true),
                ..Settings::default()
            }
        })
    );
    out.clear();
    write_settings_ack(&mut out);
    assert_eq!(
        read_one(&out),
        Ok(Frame::Settings {
            ack: true,
            settings: Settings::default()
        })
    );
    out.clear();
    write_ping(&mut out, true, *b"weirping");
    assert_eq!(
        read_one(&out),
        Ok(Frame::Ping {
            ack: true,
            payload: *b"weirping"
        })
    );
    out.clear();
    write_goaway(&mut out, 7, ErrorCode::ENHANCE_YOUR_CALM, b"flood");
    assert_eq!(
        read_one(&out),
        Ok(Frame::GoAway {
            last_stream: 7,
            error: ErrorCode::ENHANCE_YOUR_CALM,
            debug: b"flood"
        })
    );
    out.clear();
    write_window_update(&mut out, 3, MAX_WINDOW);
    assert_eq!(
        read_one(&out),
        Ok(Frame::WindowUpdate {
            stream: 3,
            increment: MAX_WINDOW
        })
    );
    out.clear();
    write_rst_stream(&mut out, 5, ErrorCode::CANCEL);
    assert_eq!(
        read_one(&out),
        Ok(Frame::RstStream {
            stream: 5,
            error: ErrorCode::CANCEL
        })
    );
    out.clear();
    write_data_header(&mut out, 9, 3, true);
    out.extend_from_slice(b"abc");
    assert_eq!(
        read_one(&out),
        Ok(Frame::Data {
            stream: 9,
            data: b"abc",
            end_stream: true,
            flow_len: 3
        })
    );
}

#[test]
fn a_large_header_block_is_split_into_continuations() {
    let block: Vec<u8> = (0..40_000u32).map(|i| i as u8).collect();
    let mut out = Vec::new();
    write_headers(&mut out, 1, &block, true, MAX);
    let mut rest = &out[..];
    let mut joined = Vec::new();
    let mut kinds = Vec::new();
    while let Some((frame, used)) = read_frame(rest, MAX).unwrap() {
        match frame {
            Frame::Headers {
                fragment,
                end_stream,
                end_headers,
                ..
            } => {
                kinds.push(("HEADERS", end_stream, end_headers));
                joined.extend_from_slice(fragment);
            }
            Frame::Continuation {
                fragment,
                end_headers,
                ..
            } => {
                kinds.push(("CONTINUATION", false, end_headers));
                joined.extend_from_slice(fragment);
            }
            other => panic!("{other:?}"),
        }
        rest = &rest[used..];
    }
    assert_eq!(joined, block);
    assert_eq!(
        kinds,
        vec![
            ("HEADERS", true, false),
            ("CONTINUATION", false, false),
            ("CONTINUATION", false, true)
        ]
    );
    // A small block is one HEADERS frame with END_HEADERS.
    out.clear();
    write_headers(&mut out, 3, b"\x82", false, MAX);
    assert_eq!(
        read_one(&out),
        Ok(Frame::Headers {
            stream: 3,
            fragment: b"\x82",
            end_stream: false,
            end_headers: true,
            priority: None
        })
    );
}

#[test]
fn padding_and_priority_are_taken_off() {
    // DATA: pad length 2, "hi", two octets of padding.
    let bytes = frame(DATA, PADDED, 1, &[2, b'h', b'i', 0, 0]);
    assert_eq!(
        read_one(&bytes),
        Ok(Frame::Data {
            stream: 1,
            data: b"hi",
            end_stream: false,
            flow_len: 5
        })
    );
    // HEADERS with padding and priority (exclusive on stream 3, weight 16).
    let bytes = frame(
        HEADERS,
        PADDED | PRIORITY_FLAG | END_HEADERS,
        1,
        &[1, 0x80, 0, 0, 3, 15, 0x82, 0],
    );
    assert_eq!(
        read_one(&bytes),
        Ok(Frame::Headers {
            stream: 1,
            fragment: b"\x82",
            end_stream: false,
            end_headers: true,
            priority: Some(Priority {
                dependency: 3,
                exclusive: true,
                weight: 15
            })
        })
    );
}

#[test]
fn the_reserved_bit_is_ignored_and_unknown_types_pass() {
    let mut bytes = frame(0x42, 0xff, 0, b"anything");
    bytes[5] |= 0x80;
    assert_eq!(
        read_one(&bytes),
        Ok(Frame::Unknown {
            kind: 0x42,
            stream: 0
        })
    );
    let mut bytes = frame(WINDOW_UPDATE, 0, 1, &[0x80, 0, 0, 1]);
    bytes[5] |= 0x80;
    assert_eq!(
        read_one(&bytes),
        Ok(Frame::WindowUpdate {
            stream: 1,
            increment: 1
        })
    );
}

/// What a case expects of the reader's error.
type Expect = Box<dyn Fn(FrameError) -> bool>;

fn connection_error(code: ErrorCode) -> Expect {
    Box::new(move |e| matches!(e, FrameError::Connection(c, _) if c == code))
}

fn stream_error(stream: u32, len: usize, code: ErrorCode) -> Expect {
    Box::new(
        move |e| matches!(e, FrameError::Stream(s, l, c, _) if (s, l, c) == (stream, len, code)),
    )
}

fn check_refused(cases: Vec<(&str, Vec<u8>, Expect)>) {
    for (name, bytes, expected) in cases {
        match read_frame(&bytes, MAX) {
            Err(error) => assert!(expected(error), "{name}: {error:?}"),
            other => panic!("{name}: {other:?}"),
        }
    }
}

#[test]
fn stream_frames_that_break_the_rules_get_their_errors() {
    use ErrorCode as E;
    check_refused(vec![
        (
            "DATA on 0",
            frame(DATA, 0, 0, b"x"),
            connection_error(E::PROTOCOL_ERROR),
        ),
        (
            "DATA pad too long",
            frame(DATA, PADDED, 1, &[4, 1, 2, 3]),
            connection_error(E::PROTOCOL_ERROR),
        ),
        (
            "DATA pad = payload",
            frame(DATA, PADDED, 1, &[1]),
            connection_error(E::PROTOCOL_ERROR),
        ),
        (
            "HEADERS on 0",
            frame(HEADERS, END_HEADERS, 0, b"\x82"),
            connection_error(E::PROTOCOL_ERROR),
        ),
        (
            "HEADERS pad too long",
            frame(HEADERS, PADDED, 1, &[3, 0x82]),
            connection_error(E::PROTOCOL_ERROR),
        ),
        (
            "HEADERS short priority",
            frame(HEADERS, PRIORITY_FLAG, 1, &[0, 0]),
            connection_error(E::FRAME_SIZE_ERROR),
        ),
        (
            "PRIORITY on 0",
            frame(PRIORITY, 0, 0, &[0, 0, 0, 1, 0]),
            connection_error(E::PROTOCOL_ERROR),
        ),
        (
            "PRIORITY of 4 octets",
            frame(PRIORITY, 0, 1, &[0, 0, 0, 3]),
            stream_error(1, 13, E::FRAME_SIZE_ERROR),
        ),
        (
            "PRIORITY on itself",
            frame(PRIORITY, 0, 3, &[0, 0, 0, 3, 0]),
            stream_error(3, 14, E::PROTOCOL_ERROR),
        ),
        (
            "RST_STREAM on 0",
            frame(RST_STREAM, 0, 0, &[0, 0, 0, 8]),
            connection_error(E::PROTOCOL_ERROR),
        ),
        (
            "RST_STREAM of 3",
            frame(RST_STREAM, 0, 1, &[0, 0, 8]),
            connection_error(E::FRAME_SIZE_ERROR),
        ),
        (
            "WINDOW_UPDATE 0 on 1",
            frame(WINDOW_UPDATE, 0, 1, &[0; 4]),
            stream_error(1, 13, E::PROTOCOL_ERROR),
        ),
        (
            "CONTINUATION on 0",
            frame(CONTINUATION, END_HEADERS, 0, b"\x82"),
            connection_error(E::PROTOCOL_ERROR),
        ),
        (
            "PUSH_PROMISE on 0",
            frame(PUSH_PROMISE, 0, 0, &[0, 0, 0, 2]),
            connection_error(E::PROTOCOL_ERROR),
        ),
    ]);
}

#[test]
fn connection_frames_that_break_the_rules_get_their_errors() {
    use ErrorCode as E;
    check_refused(vec![
        (
            "SETTINGS on 1",
            frame(SETTINGS, 0, 1, &[]),
            connection_error(E::PROTOCOL_ERROR),
        ),
        (
            "SETTINGS ACK with payload",
            frame(SETTINGS, ACK, 0, &[0, 3, 0, 0, 0, 1]),
            connection_error(E::FRAME_SIZE_ERROR),
        ),
        (
            "SETTINGS of 5",
            frame(SETTINGS, 0, 0, &[0, 3, 0, 0, 0]),
            connection_error(E::FRAME_SIZE_ERROR),
        ),
        (
            "ENABLE_PUSH 2",
            frame(SETTINGS, 0, 0, &[0, 2, 0, 0, 0, 2]),
            connection_error(E::PROTOCOL_ERROR),
        ),
        (
            "INITIAL_WINDOW_SIZE 2^31",
            frame(SETTINGS, 0, 0, &[0, 4, 0x80, 0, 0, 0]),
            connection_error(E::FLOW_CONTROL_ERROR),
        ),
        (
            "MAX_FRAME_SIZE below 2^14",
            frame(SETTINGS, 0, 0, &[0, 5, 0, 0, 0x3f, 0xff]),
            connection_error(E::PROTOCOL_ERROR),
        ),
        (
            "MAX_FRAME_SIZE 2^24",
            frame(SETTINGS, 0, 0, &[0, 5, 1, 0, 0, 0]),
            connection_error(E::PROTOCOL_ERROR),
        ),
        (
            "PING on 1",
            frame(PING, 0, 1, &[0; 8]),
            connection_error(E::PROTOCOL_ERROR),
        ),
        (
            "PING of 7",
            frame(PING, 0, 0, &[0; 7]),
            connection_error(E::FRAME_SIZE_ERROR),
        ),
        (
            "GOAWAY on 1",
            frame(GOAWAY, 0, 1, &[0; 8]),
            connection_error(E::PROTOCOL_ERROR),
        ),
        (
            "GOAWAY of 7",
            frame(GOAWAY, 0, 0, &[0; 7]),
            connection_error(E::FRAME_SIZE_ERROR),
        ),
        (
            "WINDOW_UPDATE of 3",
            frame(WINDOW_UPDATE, 0, 0, &[0, 0, 1]),
            connection_error(E::FRAME_SIZE_ERROR),
        ),
        (
            "WINDOW_UPDATE 0 on 0",
            frame(WINDOW_UPDATE, 0, 0, &[0; 4]),
            connection_error(E::PROTOCOL_ERROR),
        ),
    ]);
}

#[test]
fn a_frame_over_the_size_limit_is_refused_from_its_header() {
    // Only the header is there: the length alone decides.
    let mut header = Vec::new();
    write_header(&mut header, MAX as usize + 1, DATA, 0, 1);
    assert!(matches!(
        read_frame(&header, MAX),
        Err(FrameError::Connection(ErrorCode::FRAME_SIZE_ERROR, _))
    ));
    // Under a larger setting the same frame is only incomplete.
    assert_eq!(read_frame(&header, MAX * 2), Ok(None));
}

#[test]
fn error_codes_print_their_names() {
    assert_eq!(
        format!("{:?}", ErrorCode::ENHANCE_YOUR_CALM),
        "ENHANCE_YOUR_CALM(0xb)"
    );
    assert_eq!(ErrorCode(0x42).name(), "UNKNOWN");
}

#[test]
fn a_headers_frame_that_depends_on_itself_is_read_for_its_block() {
    // The connection resets the stream after decoding the block.
    let bytes = frame(
        HEADERS,
        PRIORITY_FLAG | END_HEADERS,
        1,
        &[0, 0, 0, 1, 0, 0x82],
    );
    assert_eq!(
        read_one(&bytes),
        Ok(Frame::Headers {
            stream: 1,
            fragment: b"\x82",
            end_stream: false,
            end_headers: true,
            priority: Some(Priority {
                dependency: 1,
                exclusive: false,
                weight: 0
            })
        })
    );
}
