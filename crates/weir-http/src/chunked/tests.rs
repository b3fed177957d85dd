use super::*;

/// Decodes `input` fed in pieces of the given sizes (cycled); returns the
/// body, the trailers, and what was left after the body.
fn decode_in_pieces(input: &[u8], piece: usize) -> Result<(Vec<u8>, Bytes, Vec<u8>), ParseError> {
    let mut decoder = ChunkedDecoder::new(1024);
    let mut buf = BytesMut::new();
    let mut body = Vec::new();
    let mut fed = 0;
    loop {
        match decoder.decode(&mut buf)? {
            Decoded::Data(data) => {
                assert!(!data.is_empty());
                body.extend_from_slice(&data);
            }
            Decoded::NeedMore => {
                assert!(
                    fed < input.len(),
                    "needs more after all input: {:?}",
                    String::from_utf8_lossy(input)
                );
                let end = (fed + piece).min(input.len());
                buf.extend_from_slice(&input[fed..end]);
                fed = end;
            }
            Decoded::Done { trailers } => {
                assert!(decoder.is_done());
                let mut rest = buf.to_vec();
                rest.extend_from_slice(&input[fed..]);
                return Ok((body, trailers, rest));
            }
        }
    }
}

fn decode_all(input: &[u8]) -> Result<(Vec<u8>, Bytes, Vec<u8>), ParseError> {
    decode_in_pieces(input, input.len().max(1))
}

#[test]
fn simple_body() {
    let (body, trailers, rest) =
        decode_all(b"5\r\nhello\r\n7\r\n, world\r\n0\r\n\r\nNEXT").unwrap();
    assert_eq!(body, b"hello, world");
    assert!(trailers.is_empty());
    assert_eq!(rest, b"NEXT");
}

#[test]
fn extensions_and_trailers() {
    let input = b"5;name=value\r\nhello\r\nA ; a ; b = \"q \\\" d\" ;c=d\r\n0123456789\r\n0;last\r\nExpires: never\r\nX-Sum:\tabc \r\n\r\nrest";
    let (body, trailers, rest) = decode_all(input).unwrap();
    assert_eq!(body, b"hello0123456789");
    assert_eq!(&trailers[..], b"Expires: never\r\nX-Sum:\tabc \r\n");
    assert_eq!(rest, b"rest");
}

#[test]
fn every_split_point_gives_the_same_result() {
    let input = b"1a;ext=\"v\"\r\nabcdefghijklmnopqrstuvwxyz\r\n3\r\n123\r\n0\r\nTrailer-A: 1\r\nB: 2\r\n\r\nafter";
    let whole = decode_all(input).unwrap();
    assert_eq!(whole.0, b"abcdefghijklmnopqrstuvwxyz123");
    assert_eq!(&whole.1[..], b"Trailer-A: 1\r\nB: 2\r\n");
    assert_eq!(whole.2, b"after");
    for piece in 1..input.len() {
        assert_eq!(
            decode_in_pieces(input, piece).unwrap(),
            whole,
            "pieces of {piece}"
        );
    }
    // Split once at every position.
    for split in 0..=input.len() {
        let mut decoder = ChunkedDecoder::new(1024);
        let mut buf = BytesMut::from(&input[..split]);
        let mut body = Vec::new();
        let mut fed_rest = false;
        let trailers = loop {
            match decoder.decode(&mut buf).unwrap() {
                Decoded::Data(data) => body.extend_from_slice(&data),
                Decoded::NeedMore => {
                    assert!(!fed_rest, "split {split}");
                    buf.extend_from_slice(&input[split..]);
                    fed_rest = true;
                }
                Decoded::Done { trailers } => break trailers,
            }
        };
        assert_eq!(body, whole.0, "split {split}");
        assert_eq!(trailers, whole.1, "split {split}");
    }
}

#[test]
fn data_is_zero_copy_and_as_large_as_available() {
    let mut buf = BytesMut::from(&b"10\r\n0123456789"[..]);
    let mut decoder = ChunkedDecoder::new(64);
    let start = buf.as_ptr() as usize;
    let Decoded::Data(data) = decoder.decode(&mut buf).unwrap() else {
        panic!("no data");
    };
    assert_eq!(&data[..], b"0123456789");
    assert_eq!(
        data.as_ptr() as usize,
        start + 4,
        "a slice of the read buffer"
    );
    assert_eq!(decoder.decode(&mut buf).unwrap(), Decoded::NeedMore);
    buf.extend_from_slice(b"abcdef\r\n0\r\n\r\n");
    assert_eq!(
        decoder.decode(&mut buf).unwrap(),
        Decoded::Data(Bytes::from_static(b"abcdef"))
    );
    assert!(matches!(
        decoder.decode(&mut buf).unwrap(),
        Decoded::Done { .. }
    ));
    assert!(decoder.is_done());
    assert!(matches!(
        decoder.decode(&mut buf).unwrap(),
        Decoded::Done { .. }
    ));
}

#[test]
fn rejections() {
    let cases: &[(&[u8], &str)] = &[
        (b"\r\n", "missing chunk size"),
        (b"x\r\n", "missing chunk size"),
        (b"-1\r\n", "missing chunk size"),
        (b" 5\r\nhello\r\n0\r\n\r\n", "missing chunk size"),
        (b"5 \r\nhello\r\n0\r\n\r\n", "invalid chunk extension"),
        (b"5\nhello\r\n0\r\n\r\n", "bare LF in chunk-size line"),
        (b"5\r\nhello\n0\r\n\r\n", "missing CRLF after chunk data"),
        (b"5\r\nhelloX\r\n0\r\n\r\n", "missing CRLF after chunk data"),
        (b"5\r\nhello\rX0\r\n\r\n", "missing CRLF after chunk data"),
        (b"5\r\nhello0\r\n\r\n", "missing CRLF after chunk data"),
        (b"10000000000000000\r\n", "chunk size overflows"),
        (b"fffffffffffffffff\r\n", "chunk size overflows"),
        (b"5;\r\nhello\r\n0\r\n\r\n", "invalid chunk extension"),
        (b"5;a=\r\nhello\r\n0\r\n\r\n", "invalid chunk extension"),
        (b"5;a=\"x\r\nhello\r\n0\r\n\r\n", "invalid chunk extension"),
        (
            b"5;a=\"x\x01\"\r\nhello\r\n0\r\n\r\n",
            "invalid chunk extension",
        ),
        (b"5;a\x00\r\nhello\r\n0\r\n\r\n", "invalid chunk extension"),
        (b"5,a\r\nhello\r\n0\r\n\r\n", "invalid chunk extension"),
        (b"5\rX\nhello\r\n0\r\n\r\n", "bare LF in chunk-size line"),
        (b"5\rX\r\nhello\r\n0\r\n\r\n", "invalid chunk extension"),
        (b"0\r\nX: a\n\r\n", "bare LF in trailer section"),
        (b"0\r\n\n", "bare LF in trailer section"),
        (b"0\r\n folded\r\n\r\n", "invalid trailer field name"),
        (b"0\r\nX : a\r\n\r\n", "invalid trailer field name"),
        (b"0\r\nNoColon\r\n\r\n", "invalid trailer field name"),
        (
            b"0\r\nX: a\x00b\r\n\r\n",
            "invalid character in trailer field value",
        ),
        (
            b"0\r\nX: a\rb\r\n\r\n",
            "invalid character in trailer field value",
        ),
    ];
    for (input, reason) in cases {
        let error = decode_all(input).unwrap_err();
        assert_eq!(
            error.reason,
            *reason,
            "{:?}",
            String::from_utf8_lossy(input)
        );
        // The same error whatever the split.
        let error = decode_in_pieces(input, 1).unwrap_err();
        assert_eq!(
            error.reason,
            *reason,
            "one byte at a time: {:?}",
            String::from_utf8_lossy(input)
        );
    }
}

#[test]
fn bounds() {
    // A long size line (extensions) is bounded by max_trailer_bytes, at least 64.
    let mut decoder = ChunkedDecoder::new(0);
    let mut buf =
        BytesMut::from(&b"0;x=12345678901234567890123456789012345678901234567890\r\n\r\n"[..]);
    assert!(matches!(
        decoder.decode(&mut buf).unwrap(),
        Decoded::Done { .. }
    ));
    let mut buf = BytesMut::from(&[b"5;x=".as_slice(), &[b'a'; 100]].concat()[..]);
    let error = ChunkedDecoder::new(0).decode(&mut buf).unwrap_err();
    assert_eq!(error.reason, "chunk-size line too long");

    // Trailers: complete lines over the bound, and a partial one.
    let mut buf = BytesMut::from(&b"0\r\nA: 1234567890\r\nB: 1234567890\r\n\r\n"[..]);
    let error = ChunkedDecoder::new(20).decode(&mut buf).unwrap_err();
    assert_eq!(error.kind, ParseErrorKind::HeadTooLarge);
    let mut buf = BytesMut::from(&[b"0\r\nA: ".as_slice(), &[b'a'; 30]].concat()[..]);
    let error = ChunkedDecoder::new(20).decode(&mut buf).unwrap_err();
    assert_eq!(error.kind, ParseErrorKind::HeadTooLarge);
    let mut buf = BytesMut::from(&b"0\r\nA: 1234567890\r\nB: 1\r\n\r\n"[..]);
    assert!(matches!(
        ChunkedDecoder::new(24).decode(&mut buf).unwrap(),
        Decoded::Done { .. }
    ));
}

#[test]
fn huge_chunk_sizes_are_fine() {
    let mut decoder = ChunkedDecoder::new(64);
    let mut buf = BytesMut::from(&b"ffffffffffffffff\r\nabc"[..]);
    assert_eq!(
        decoder.decode(&mut buf).unwrap(),
        Decoded::Data(Bytes::from_static(b"abc"))
    );
    assert_eq!(decoder.decode(&mut buf).unwrap(), Decoded::NeedMore);
    let mut buf = BytesMut::from(&b"000000000000000000000000003\r\nabc\r\n0\r\n\r\n"[..]);
    assert_eq!(
        ChunkedDecoder::new(64).decode(&mut buf).unwrap(),
        Decoded::Data(Bytes::from_static(b"abc"))
    );
}

#[test]
fn encodes_chunk_headers() {
    let mut out = BytesMut::new();
    for len in [0, 1, 15, 16, 255, 4096, usize::MAX] {
        out.clear();
        encode_chunk_header(len, &mut out);
        assert_eq!(&out[..], format!("{len:x}\r\n").as_bytes());
    }
}

#[test]
fn encoded_body_decodes() {
    let mut wire = BytesMut::new();
    for piece in [&b"hello"[..], &[b'x'; 300], b"!"] {
        encode_chunk_header(piece.len(), &mut wire);
        wire.extend_from_slice(piece);
        wire.extend_from_slice(b"\r\n");
    }
    wire.extend_from_slice(CHUNKED_END);
    let (body, trailers, rest) = decode_all(&wire).unwrap();
    assert_eq!(body.len(), 306);
    assert!(trailers.is_empty());
    assert!(rest.is_empty());
}
