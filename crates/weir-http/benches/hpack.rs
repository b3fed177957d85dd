//! HPACK's costs on the hot path: decoding a request's header block (a
//! browser's first, of literals, and a load generator's repeated one, of
//! table references) and encoding a proxied response's block.
//!
//! Each case runs through an `#[inline(never)]` function, so that
//! `valgrind --tool=callgrind` on this bench counts its instructions per call
//! (the method and figures: `docs/design/http2.md`, "weir's own HPACK").

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use weir_http::Limits;
use weir_http::hpack::{Decoder, Encoder, Field, Indexing};
use weir_http::http2::{RequestFields, encode_response_head, request_from_h2, response_head_to_h2};

/// A browser's first request on a connection: eight fields, each a literal
/// with incremental indexing, Huffman-coded (as Firefox and Chrome send them).
fn browser_block() -> Vec<u8> {
    let mut out = Vec::new();
    let mut block = Encoder::new();
    let mut block = block.block(&mut out);
    for (name, value) in [
        (&b":method"[..], &b"GET"[..]),
        (b":scheme", b"https"),
        (b":authority", b"www.example.com"),
        (b":path", b"/static/app.js?v=1234"),
        (
            b"user-agent",
            b"Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
        ),
        (b"accept", b"*/*"),
        (b"accept-language", b"en-US,en;q=0.5"),
        (b"accept-encoding", b"gzip, deflate, br, zstd"),
        (b"referer", b"https://www.example.com/"),
    ] {
        block.field(name, value, Indexing::Index);
    }
    out
}

/// h2load's request after its first: every field a one-byte reference (GET,
/// https, `/`, then four dynamic entries), what bench/h2 and bench/insns send.
const REPEATED_BLOCK: &[u8] = &[0x82, 0x87, 0x84, 0xc1, 0xc0, 0xbf, 0xbe];

/// The block that fills the table `REPEATED_BLOCK` refers to.
fn load_generator_first_block() -> Vec<u8> {
    let mut out = Vec::new();
    let mut encoder = Encoder::new();
    let mut block = encoder.block(&mut out);
    block.field(b":method", b"GET", Indexing::Index);
    block.field(b":scheme", b"https", Indexing::Index);
    block.field(b":path", b"/", Indexing::Index);
    block.field(b":authority", b"127.0.0.1:8443", Indexing::Index);
    block.field(b"accept", b"*/*", Indexing::Index);
    block.field(b"accept-encoding", b"gzip, deflate", Indexing::Index);
    block.field(b"user-agent", b"h2load nghttp2/1.52.0", Indexing::Index);
    block.field(b"x-bench", b"1", Indexing::Index);
    out
}

#[inline(never)]
fn decode_block(decoder: &mut Decoder, block: &[u8]) -> usize {
    let mut bytes = 0;
    decoder
        .decode(block, |field| bytes += field.name.len() + field.value.len())
        .expect("a valid block");
    bytes
}

/// A new connection's decoder, as each browser connection starts with.
#[inline(never)]
fn decode_on_new_connection(block: &[u8]) -> usize {
    let mut decoder = Decoder::new();
    decode_block(&mut decoder, block)
}

/// A proxied response's fields (an nginx origin's, and weir's `via`).
const RESPONSE: [(&[u8], &[u8]); 8] = [
    (b"server", b"nginx/1.22.1"),
    (b"date", b"Fri, 04 Dec 2026 17:00:00 GMT"),
    (b"content-type", b"text/plain"),
    (b"content-length", b"100"),
    (b"last-modified", b"Thu, 03 Dec 2026 10:00:00 GMT"),
    (b"etag", b"\"692f8a40-64\""),
    (b"accept-ranges", b"bytes"),
    (b"via", b"2 weir"),
];

/// Every field may be indexed: after the first response on a connection,
/// the same response is nine one-byte references.
#[inline(never)]
fn encode_response(encoder: &mut Encoder, out: &mut Vec<u8>) {
    out.clear();
    let mut block = encoder.block(out);
    block.status(200);
    for (name, value) in RESPONSE {
        block.field(name, value, Indexing::Index);
    }
}

/// The worst case: no field indexed, each value a literal coded again.
#[inline(never)]
fn encode_response_literally(encoder: &mut Encoder, out: &mut Vec<u8>) {
    out.clear();
    let mut block = encoder.block(out);
    block.status(200);
    for (name, value) in RESPONSE {
        block.field(name, value, Indexing::NotIndexed);
    }
}

/// h2load's request as fields, and as the `http` crate's parts the `h2`
/// crate hands the adapter.
const REQUEST_FIELDS: [(&str, &str); 7] = [
    (":method", "GET"),
    (":scheme", "https"),
    (":authority", "127.0.0.1:8443"),
    (":path", "/"),
    ("accept", "*/*"),
    ("accept-encoding", "gzip, deflate"),
    ("user-agent", "h2load nghttp2/1.52.0"),
];

const LIMITS: Limits = Limits {
    max_head_bytes: 64 * 1024,
    max_headers: 100,
};

/// Today's path after the `h2` crate decoded the block: the `http` crate's
/// parts built (as the crate builds them), then the adapter's head.
#[inline(never)]
fn request_through_parts() -> usize {
    let mut builder = http::Request::builder()
        .method("GET")
        .uri("https://127.0.0.1:8443/");
    for (name, value) in &REQUEST_FIELDS[4..] {
        builder = builder.header(*name, *value);
    }
    let (parts, ()) = builder.body(()).expect("valid").into_parts();
    request_from_h2(&parts, true, &LIMITS)
        .expect("valid")
        .raw()
        .len()
}

/// The own codec's path after its decoder: fields straight into the head.
#[inline(never)]
fn request_from_fields() -> usize {
    let mut request = RequestFields::new(64 * 1024);
    for (name, value) in REQUEST_FIELDS {
        request.field(Field {
            name: name.as_bytes(),
            value: value.as_bytes(),
            never_indexed: false,
        });
    }
    request
        .finish(true, &LIMITS)
        .expect("valid")
        .head
        .raw()
        .len()
}

/// A response head as weir writes it for a proxied response.
const WRITTEN_RESPONSE: &[u8] = b"HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\n\
Date: Fri, 04 Dec 2026 17:00:00 GMT\r\nContent-Type: text/plain\r\nContent-Length: 100\r\n\
Last-Modified: Thu, 03 Dec 2026 10:00:00 GMT\r\nETag: \"692f8a40-64\"\r\n\
Accept-Ranges: bytes\r\nVia: 1.1 weir\r\n\r\n";

/// Today's path before the `h2` crate encodes: the written head as the
/// `http` crate's response (its encoding not counted here).
#[inline(never)]
fn response_through_map() -> usize {
    response_head_to_h2(WRITTEN_RESPONSE)
        .expect("valid")
        .headers()
        .len()
}

/// The own codec's path: the written head straight into a block, encoding
/// included, in a connection's steady state.
#[inline(never)]
fn response_into_block(encoder: &mut Encoder, out: &mut Vec<u8>) -> usize {
    out.clear();
    let mut block = encoder.block(out);
    encode_response_head(200, WRITTEN_RESPONSE, &mut block).expect("valid");
    out.len()
}

fn hpack(c: &mut Criterion) {
    let mut group = c.benchmark_group("hpack");
    group.throughput(Throughput::Elements(1));
    let browser = browser_block();
    group.bench_function("decode/browser_first_request", |b| {
        // A new connection each time: every field goes into the table.
        b.iter(|| decode_on_new_connection(black_box(&browser)))
    });
    let mut decoder = Decoder::new();
    decode_block(&mut decoder, &load_generator_first_block());
    group.bench_function("decode/repeated_request", |b| {
        b.iter(|| decode_block(&mut decoder, black_box(REPEATED_BLOCK)))
    });
    let mut encoder = Encoder::new();
    let mut out = Vec::with_capacity(256);
    group.bench_function("encode/response_indexed", |b| {
        b.iter(|| encode_response(&mut encoder, black_box(&mut out)))
    });
    let mut encoder = Encoder::new();
    group.bench_function("encode/response_literal", |b| {
        b.iter(|| encode_response_literally(&mut encoder, black_box(&mut out)))
    });
    group.finish();

    let mut group = c.benchmark_group("heads");
    group.throughput(Throughput::Elements(1));
    group.bench_function("request/through_parts", |b| b.iter(request_through_parts));
    group.bench_function("request/from_fields", |b| b.iter(request_from_fields));
    group.bench_function("response/through_map", |b| b.iter(response_through_map));
    let mut encoder = Encoder::new();
    group.bench_function("response/into_block", |b| {
        b.iter(|| response_into_block(&mut encoder, black_box(&mut out)))
    });
    group.finish();
}

criterion_group!(benches, hpack);
criterion_main!(benches);
