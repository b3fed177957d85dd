//! One HTTP/2 exchange through the sans-IO server connection on a warm
//! connection, the work the `h2` crate, the `http` crate's maps and the
//! adapter's conversions do for each proxied HTTP/2 request today: the
//! client's HEADERS read and decoded into a request head, the response head
//! encoded, a 100-byte body framed, the output drained.
//!
//! `exchange` runs through an `#[inline(never)]` function, so that
//! `valgrind --tool=callgrind` on this bench counts its instructions per call
//! (`docs/design/http2.md`, "weir's own HPACK").

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use weir_http::frame::{self, DEFAULT_MAX_FRAME_SIZE, PREFACE};
use weir_http::h2server::{Config, Event, ServerConnection};
use weir_http::hpack::{Encoder, Indexing};

const HEAD: &[u8] = b"HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\n\
Date: Fri, 04 Dec 2026 17:00:00 GMT\r\nContent-Type: text/plain\r\nContent-Length: 100\r\n\
Last-Modified: Thu, 03 Dec 2026 10:00:00 GMT\r\nETag: \"692f8a40-64\"\r\n\
Accept-Ranges: bytes\r\nVia: 2 weir\r\n\r\n";

/// h2load's request on stream `stream`, from a client encoder that has sent
/// it before (all references after the first).
fn request(encoder: &mut Encoder, stream: u32) -> Vec<u8> {
    let mut block = Vec::new();
    let mut fields = encoder.block(&mut block);
    for (name, value) in [
        (":method", "GET"),
        (":scheme", "https"),
        (":authority", "127.0.0.1:8443"),
        (":path", "/"),
        ("accept", "*/*"),
        ("accept-encoding", "gzip, deflate"),
        ("user-agent", "h2load nghttp2/1.52.0"),
    ] {
        fields.field(name.as_bytes(), value.as_bytes(), Indexing::Index);
    }
    let mut out = Vec::new();
    frame::write_headers(&mut out, stream, &block, true, DEFAULT_MAX_FRAME_SIZE);
    out
}

#[inline(never)]
fn exchange(server: &mut ServerConnection, input: &[u8], body: &[u8]) -> usize {
    let mut opened = None;
    let used = server
        .receive(input, |event| {
            if let Event::Request { stream, .. } = event {
                opened = Some(stream);
            }
        })
        .expect("a valid request");
    let stream = opened.expect("a request");
    server
        .send_head(stream, 200, HEAD, false)
        .expect("open")
        .expect("a valid head");
    server.send_data(stream, body, true).expect("open");
    let written = server.output().len();
    server.output().clear();
    used + written
}

fn h2server(c: &mut Criterion) {
    let mut server = ServerConnection::new(Config::default());
    let mut client = Encoder::new();
    let mut start = PREFACE.to_vec();
    frame::write_settings(&mut start, &[(0x4, 1 << 30)]);
    frame::write_settings_ack(&mut start);
    frame::write_window_update(&mut start, 0, (1 << 31) - 1 - 65_535);
    server.receive(&start, |_| {}).expect("a valid start");
    server.output().clear();
    let body = [b'x'; 100];
    let mut stream = 1;
    // The first request fills the tables; the measured ones repeat it.
    exchange(&mut server, &request(&mut client, stream), &body);
    let mut group = c.benchmark_group("h2server");
    group.throughput(Throughput::Elements(1));
    group.bench_function("exchange", |b| {
        b.iter_batched(
            || {
                stream += 2;
                request(&mut client, stream)
            },
            |input| exchange(&mut server, black_box(&input), &body),
            criterion::BatchSize::SmallInput,
        )
    });
    group.finish();
}

criterion_group!(benches, h2server);
criterion_main!(benches);
