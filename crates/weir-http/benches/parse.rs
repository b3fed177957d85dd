//! Hot-path costs: parsing a typical browser request head, and writing the
//! head forwarded to a node.

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};

use bytes::BytesMut;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use weir_http::{
    BodyFraming, ChunkedDecoder, Decoded, ForwardRequest, ForwardResponse, Limits, Method, Parsed,
    RequestHead, ResponseHead, Version, parse_request, write_request_head, write_response_head,
};

/// Eight headers, as a current browser sends for a sub-resource.
const BROWSER_REQUEST: &[u8] = b"GET /static/app.js?v=1234 HTTP/1.1\r\n\
Host: www.example.com\r\n\
User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0\r\n\
Accept: */*\r\n\
Accept-Language: en-US,en;q=0.5\r\n\
Accept-Encoding: gzip, deflate, br, zstd\r\n\
Referer: https://www.example.com/\r\n\
Connection: keep-alive\r\n\
Cookie: session=0123456789abcdef; theme=dark\r\n\
\r\n";

const ORIGIN_RESPONSE: &[u8] = b"HTTP/1.1 200 OK\r\n\
Server: nginx\r\n\
Date: Mon, 01 Jan 2024 00:00:00 GMT\r\n\
Content-Type: application/javascript\r\n\
Content-Length: 101\r\n\
Connection: keep-alive\r\n\
ETag: \"65920000-65\"\r\n\
Cache-Control: max-age=3600\r\n\
\r\n";

fn parsing(c: &mut Criterion) {
    let limits = Limits::default();
    let mut group = c.benchmark_group("parse");
    group.throughput(Throughput::Elements(1));
    // Reference point: httparse's tokenising alone, without our checks.
    group.bench_function("request/httparse_only", |b| {
        b.iter(|| {
            let mut headers = [httparse::EMPTY_HEADER; 16];
            let mut request = httparse::Request::new(&mut headers);
            request
                .parse(black_box(BROWSER_REQUEST))
                .expect("valid")
                .is_complete()
        })
    });
    group.bench_function("request/copy", |b| {
        b.iter(
            || match parse_request(black_box(BROWSER_REQUEST), &limits) {
                Ok(Parsed::Complete(head, used)) => (head, used),
                other => panic!("{other:?}"),
            },
        )
    });
    let mut buf = BytesMut::with_capacity(64 * 1024);
    group.bench_function("request/split_from", |b| {
        b.iter(|| {
            // As after a socket read into the connection's buffer.
            buf.extend_from_slice(black_box(BROWSER_REQUEST));
            RequestHead::split_from(&mut buf, &limits)
                .expect("valid")
                .expect("complete")
        })
    });
    let mut buf = BytesMut::with_capacity(64 * 1024);
    group.bench_function("response/split_from", |b| {
        b.iter(|| {
            buf.extend_from_slice(black_box(ORIGIN_RESPONSE));
            ResponseHead::split_from(&mut buf, &limits, Method::Get)
                .expect("valid")
                .expect("complete")
        })
    });
    group.finish();
}

fn writing(c: &mut Criterion) {
    let limits = Limits::default();
    let Ok(Parsed::Complete(request, _)) = parse_request(BROWSER_REQUEST, &limits) else {
        panic!("bench request does not parse");
    };
    let mut buf = BytesMut::from(ORIGIN_RESPONSE);
    let response = ResponseHead::split_from(&mut buf, &limits, Method::Get)
        .expect("valid")
        .expect("complete");
    let forward_request = ForwardRequest {
        framing: BodyFraming::None,
        client_addr: Some(IpAddr::V4(Ipv4Addr::new(203, 0, 113, 54))),
        proto: "https",
        via: None,
        via_version: None,
        upgrade: false,
        strip_expect: false,
        owned_header: None,
        drop_underscore_names: false,
    };
    let forward_response = ForwardResponse {
        framing: BodyFraming::Length(101),
        version: Version::Http11,
        keep_alive: true,
        via: None,
        via_version: None,
        upgrade: false,
        set_headers: &[],
    };
    let mut out = BytesMut::with_capacity(4096);
    let mut group = c.benchmark_group("write");
    group.throughput(Throughput::Elements(1));
    group.bench_function("request_head", |b| {
        b.iter(|| {
            out.clear();
            write_request_head(black_box(&request), &forward_request, &mut out);
            out.len()
        })
    });
    group.bench_function("response_head", |b| {
        b.iter(|| {
            out.clear();
            write_response_head(black_box(&response), &forward_response, &mut out);
            out.len()
        })
    });
    group.finish();
}

fn chunked(c: &mut Criterion) {
    let mut wire = Vec::new();
    for _ in 0..16 {
        wire.extend_from_slice(b"400\r\n");
        wire.extend_from_slice(&[b'x'; 1024]);
        wire.extend_from_slice(b"\r\n");
    }
    wire.extend_from_slice(b"0\r\n\r\n");
    let mut group = c.benchmark_group("chunked");
    group.throughput(Throughput::Bytes(16 * 1024));
    let mut buf = BytesMut::with_capacity(64 * 1024);
    group.bench_function("decode_16x1k", |b| {
        b.iter(|| {
            buf.extend_from_slice(&wire);
            let mut decoder = ChunkedDecoder::new(4096);
            let mut total = 0;
            loop {
                match decoder.decode(&mut buf).expect("valid") {
                    Decoded::Data(data) => total += data.len(),
                    Decoded::Done { .. } => break total,
                    Decoded::NeedMore => panic!("truncated"),
                }
            }
        })
    });
    group.finish();
}

criterion_group!(benches, parsing, writing, chunked);
criterion_main!(benches);
