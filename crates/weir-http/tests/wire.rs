//! Raw-bytes cases through the public API: request smuggling and bad framing,
//! pipelined messages, and a deterministic randomized run asserting that no
//! input panics and that every accepted head survives a forward round trip.

use bytes::BytesMut;
use weir_http::{
    BodyFraming, ChunkedDecoder, Decoded, ForwardRequest, Limits, Method, ParseErrorKind, Parsed,
    RequestHead, ResponseHead, parse_request, parse_response, write_request_head,
};

fn kind_of(raw: &[u8]) -> Result<BodyFraming, ParseErrorKind> {
    match parse_request(raw, &Limits::default()) {
        Ok(Parsed::Complete(head, _)) => Ok(head.framing()),
        Ok(Parsed::Partial) => panic!("partial: {:?}", String::from_utf8_lossy(raw)),
        Err(error) => Err(error.kind),
    }
}

#[test]
fn smuggling_vectors_are_rejected() {
    use ParseErrorKind::*;
    let cases: &[(&[u8], ParseErrorKind)] = &[
        // CL.TE and TE.CL
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n", Invalid),
        (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 6\r\n\r\n", Invalid),
        // Obfuscated Transfer-Encoding
        (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding : chunked\r\n\r\n", Invalid),
        (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\r\n chunked\r\n\r\n", Invalid),
        (b"POST / HTTP/1.1\r\nHost: a\r\n Transfer-Encoding: chunked\r\n\r\n", Invalid),
        (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n", Invalid),
        (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity, chunked\r\n\r\n", UnsupportedTransferEncoding),
        (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: \"chunked\"\r\n\r\n", Invalid),
        (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\x0b\r\n\r\n", Invalid),
        (b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", Invalid),
        // Conflicting or malformed lengths
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 6\r\nContent-Length: 6\r\n\r\n", Invalid),
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 6\r\nContent-Length: 7\r\n\r\n", Invalid),
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 6, 6\r\n\r\n", Invalid),
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 6 \x0b\r\n\r\n", Invalid),
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0x6\r\n\r\n", Invalid),
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 18446744073709551616\r\n\r\n", Invalid),
        // Line endings
        (b"GET / HTTP/1.1\r\nHost: a\nContent-Length: 5\r\n\r\n", Invalid),
        (b"GET / HTTP/1.1\r\nHost: a\r\nX: \rContent-Length: 5\r\n\r\n", Invalid),
        (b"GET / HTTP/1.1\r\nHost: a\r\nX: y\x00\r\n\r\n", Invalid),
        // Host ambiguity
        (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", Invalid),
        (b"GET http://a/ HTTP/1.1\r\nHost: b\r\n\r\n", Invalid),
        (b"GET / HTTP/1.1\r\n\r\n", Invalid),
        // Versions and forms
        (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", UnsupportedVersion),
        (b"GET / HTTP/2.1\r\nHost: a\r\n\r\n", UnsupportedVersion),
        (b"GET * HTTP/1.1\r\nHost: a\r\n\r\n", Invalid),
        (b"CONNECT / HTTP/1.1\r\nHost: a\r\n\r\n", Invalid),
    ];
    for (raw, kind) in cases {
        assert_eq!(
            kind_of(raw),
            Err(*kind),
            "{:?}",
            String::from_utf8_lossy(raw)
        );
    }
}

#[test]
fn underscored_names_are_just_other_fields() {
    // `Transfer_Encoding` is a different (valid) field name; it does not frame.
    let raw =
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer_Encoding: chunked\r\nContent-Length: 1\r\n\r\n";
    assert_eq!(kind_of(raw), Ok(BodyFraming::Length(1)));
}

#[test]
fn pipelined_requests_with_bodies() {
    let mut buf = BytesMut::from(
        &b"POST /a HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n\
           3;x=y\r\nabc\r\n0\r\nChecksum: 1\r\n\r\n\
           POST /b HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nxy\
           GET /c HTTP/1.1\r\nHost: h\r\n\r\n"[..],
    );
    let limits = Limits::default();

    let first = RequestHead::split_from(&mut buf, &limits).unwrap().unwrap();
    assert_eq!(first.target(), b"/a");
    assert_eq!(first.framing(), BodyFraming::Chunked);
    let mut decoder = ChunkedDecoder::new(1024);
    assert!(
        matches!(decoder.decode(&mut buf).unwrap(), Decoded::Data(data) if &data[..] == b"abc")
    );
    let Decoded::Done { trailers } = decoder.decode(&mut buf).unwrap() else {
        panic!("not done");
    };
    assert_eq!(&trailers[..], b"Checksum: 1\r\n");

    let second = RequestHead::split_from(&mut buf, &limits).unwrap().unwrap();
    assert_eq!(second.framing(), BodyFraming::Length(2));
    let body = buf.split_to(2);
    assert_eq!(&body[..], b"xy");

    let third = RequestHead::split_from(&mut buf, &limits).unwrap().unwrap();
    assert_eq!(third.path(), b"/c");
    assert!(buf.is_empty());
}

#[test]
fn interim_then_final_response() {
    let mut buf = BytesMut::from(
        &b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"[..],
    );
    let limits = Limits::default();
    let interim = ResponseHead::split_from(&mut buf, &limits, Method::Post)
        .unwrap()
        .unwrap();
    assert!(interim.is_interim());
    assert_eq!(interim.framing(), BodyFraming::None);
    let last = ResponseHead::split_from(&mut buf, &limits, Method::Post)
        .unwrap()
        .unwrap();
    assert_eq!(last.framing(), BodyFraming::Chunked);
    assert_eq!(&buf[..], b"0\r\n\r\n");
}

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `0..bound` (0 when `bound` is 0).
    fn below(&mut self, bound: usize) -> usize {
        (self.next() % (bound as u64).max(1)) as usize
    }
}

const SEEDS: &[&[u8]] = &[
    b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n",
    b"GET /a/b?c=d HTTP/1.1\r\nHost: h\r\nUser-Agent: x\r\nAccept: */*\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\n\r\n",
    b"POST /upload HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n",
    b"POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTE: trailers\r\nX-Forwarded-For: 10.0.0.1\r\n\r\n",
    b"GET http://h:8080/x HTTP/1.1\r\nHost: h:8080\r\nVia: 1.0 a\r\nKeep-Alive: 5\r\n\r\n",
    b"OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n",
    b"CONNECT h:443 HTTP/1.1\r\nHost: h:443\r\n\r\n",
    b"GET / HTTP/1.0\r\nX-Obs: \xe9\xff\r\nX-Tab:\ta\tb\r\n\r\n",
];

/// Bytes that matter to the grammar, for insertions and replacements.
const INTERESTING: &[u8] = b"\r\n \t:;,\"\\\x00\x7f\x80\xffaZ09-/?#*@";

fn mutate(rng: &mut Rng, input: &mut Vec<u8>) {
    for _ in 0..1 + rng.below(3) {
        let at = rng.below(input.len() + 1);
        let byte = if rng.below(2) == 0 {
            INTERESTING[rng.below(INTERESTING.len())]
        } else {
            rng.next() as u8
        };
        match rng.below(5) {
            0 if at < input.len() => input[at] = byte,
            1 => input.insert(at, byte),
            2 if at < input.len() => {
                input.remove(at);
            }
            3 => {
                // Duplicate a slice of the input somewhere else.
                let start = rng.below(input.len());
                let end = (start + rng.below(24)).min(input.len());
                let copied = input[start..end].to_vec();
                input.splice(at..at, copied);
            }
            _ => input.truncate(at),
        }
    }
}

/// The round trip: what a parsed head is forwarded as parses again, with the
/// same request line and framing, and no hop-by-hop field left.
fn check_round_trip(head: &RequestHead) {
    let forward = ForwardRequest {
        framing: head.framing(),
        client_addr: None,
        proto: "http",
        via: None,
        via_version: None,
        upgrade: false,
        strip_expect: false,
        owned_header: None,
        drop_underscore_names: false,
    };
    let mut out = BytesMut::new();
    write_request_head(head, &forward, &mut out);
    let again = match parse_request(&out, &Limits::default()) {
        Ok(Parsed::Complete(again, used)) => {
            assert_eq!(used, out.len());
            again
        }
        other => panic!(
            "forwarded head does not parse: {other:?}\nfrom {:?}\nwritten {:?}",
            String::from_utf8_lossy(head.raw()),
            String::from_utf8_lossy(&out)
        ),
    };
    assert_eq!(again.method_bytes(), head.method_bytes());
    // Absolute-form targets are forwarded in origin-form: same path, same query.
    assert_eq!(again.path(), head.path());
    let absolute = head.target().len() >= 4 && head.target()[..4].eq_ignore_ascii_case(b"http");
    if absolute {
        assert!(again.target().starts_with(b"/"));
    } else {
        assert_eq!(again.target(), head.target());
    }
    assert_eq!(again.framing(), head.framing());
    assert_eq!(again.host(), head.host().or(Some(b"")));
    for (name, _) in again.headers() {
        let hop_by_hop = [
            "connection",
            "keep-alive",
            "proxy-connection",
            "te",
            "upgrade",
        ];
        let lower = String::from_utf8_lossy(name).to_ascii_lowercase();
        assert!(!hop_by_hop.contains(&lower.as_str()), "{lower} forwarded");
    }
    // Every end-to-end field of the original survives, byte for byte.
    let kept = |name: &[u8]| {
        let lower = String::from_utf8_lossy(name).to_ascii_lowercase();
        let hop = [
            "connection",
            "keep-alive",
            "proxy-connection",
            "te",
            "upgrade",
            "transfer-encoding",
            "content-length",
        ];
        let named = head
            .headers()
            .filter(|(n, _)| n.eq_ignore_ascii_case(b"connection"))
            .any(|(_, v)| {
                v.split(|&b| b == b',')
                    .any(|t| t.trim_ascii().eq_ignore_ascii_case(name))
            });
        !hop.contains(&lower.as_str()) && (!named || lower == "host")
    };
    let expected: Vec<_> = head.headers().filter(|(name, _)| kept(name)).collect();
    let actual: Vec<_> = again
        .headers()
        .filter(|(name, _)| {
            !name.eq_ignore_ascii_case(b"content-length")
                && !name.eq_ignore_ascii_case(b"transfer-encoding")
        })
        // A Host the writer added for an HTTP/1.0 request without one.
        .filter(|(name, _)| !(name.eq_ignore_ascii_case(b"host") && head.header("host").is_none()))
        .collect();
    assert_eq!(
        actual,
        expected,
        "from {:?}",
        String::from_utf8_lossy(head.raw())
    );
}

#[test]
fn randomized_requests_never_panic_and_round_trip() {
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let limits = Limits {
        max_head_bytes: 512,
        max_headers: 8,
    };
    let (mut accepted, mut rejected, mut partial) = (0, 0, 0);
    for iteration in 0..6000 {
        let mut input = SEEDS[iteration % SEEDS.len()].to_vec();
        mutate(&mut rng, &mut input);
        match parse_request(&input, &limits) {
            Ok(Parsed::Complete(head, used)) => {
                assert!(used <= input.len());
                accepted += 1;
                check_round_trip(&head);
                // The zero-copy path agrees.
                let mut buf = BytesMut::from(&input[..]);
                let split = RequestHead::split_from(&mut buf, &limits).unwrap().unwrap();
                assert_eq!(split.raw(), head.raw());
                assert_eq!(buf.len(), input.len() - used);
            }
            Ok(Parsed::Partial) => partial += 1,
            Err(_) => rejected += 1,
        }
        // The same bytes as a response and as a chunked body must not panic either.
        let _ = parse_response(&input, &limits, Method::Get);
        let mut buf = BytesMut::from(&input[..]);
        let mut decoder = ChunkedDecoder::new(64);
        while let Ok(Decoded::Data(_)) = decoder.decode(&mut buf) {}
    }
    // The mutations must exercise all three outcomes.
    println!("accepted {accepted}, rejected {rejected}, partial {partial}");
    assert!(
        accepted > 500 && rejected > 500 && partial > 100,
        "{accepted} {rejected} {partial}"
    );
}

#[test]
fn randomized_chunked_bodies_split_anywhere() {
    let mut rng = Rng(0x0c4u64 << 40 | 7);
    for _ in 0..500 {
        let mut wire = Vec::new();
        let mut body = Vec::new();
        for _ in 0..rng.below(5) {
            let len = 1 + rng.below(40);
            let data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            wire.extend_from_slice(format!("{len:X}").as_bytes());
            if rng.below(3) == 0 {
                wire.extend_from_slice(b" ; ext=\"q\"");
            }
            wire.extend_from_slice(b"\r\n");
            wire.extend_from_slice(&data);
            wire.extend_from_slice(b"\r\n");
            body.extend_from_slice(&data);
        }
        wire.extend_from_slice(b"0\r\n");
        if rng.below(2) == 0 {
            wire.extend_from_slice(b"T: v\r\n");
        }
        wire.extend_from_slice(b"\r\n");

        let mut decoder = ChunkedDecoder::new(64);
        let mut buf = BytesMut::new();
        let mut decoded = Vec::new();
        let mut fed = 0;
        loop {
            match decoder.decode(&mut buf).unwrap() {
                Decoded::Data(data) => decoded.extend_from_slice(&data),
                Decoded::NeedMore => {
                    let end = (fed + 1 + rng.below(8)).min(wire.len());
                    assert!(fed < end, "needs more after the whole body");
                    buf.extend_from_slice(&wire[fed..end]);
                    fed = end;
                }
                Decoded::Done { .. } => break,
            }
        }
        assert_eq!(decoded, body);
        assert_eq!(fed, wire.len());
        assert!(buf.is_empty());
    }
}
