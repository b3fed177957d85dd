//! One HTTP/2 exchange through the sans-IO client connection on a warm
//! connection to a node: the work the `h2` crate's client, the `http`
//! crate's maps and the adapter's conversions do for each request weir
//! sends to an HTTP/2 node today. The request head weir wrote for the node
//! encoded, the node's HEADERS read and built into a response head, its
//! 100-byte body read and given back, the output drained.
//!
//! `exchange` runs through an `#[inline(never)]` function, so that
//! `valgrind --tool=callgrind` on this bench counts its instructions per call
//! (`docs/design/http2.md`, "The node side on weir's codec").

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use weir_http::frame::{self, DEFAULT_MAX_FRAME_SIZE};
use weir_http::h2client::{ClientConnection, Config, Event};
use weir_http::hpack::{Encoder, Indexing};
use weir_http::http2::NodeRequest;

/// The head weir writes for a node for h2load's request (bench/h2).
const WRITTEN: &[u8] = b"GET / HTTP/1.1\r\nHost: 127.0.0.1:8443\r\naccept: */*\r\n\
accept-encoding: gzip, deflate\r\nuser-agent: h2load nghttp2/1.52.0\r\n\
Via: 2 weir\r\n\r\n";

/// nginx's answer on stream `stream`, from a node encoder that has sent it
/// before (all references after the first), and its 100-byte body.
fn response(encoder: &mut Encoder, stream: u32) -> Vec<u8> {
    let mut block = Vec::new();
    let mut fields = encoder.block(&mut block);
    for (name, value) in [
        (":status", "200"),
        ("server", "nginx/1.22.1"),
        ("date", "Fri, 04 Dec 2026 17:00:00 GMT"),
        ("content-type", "text/plain"),
        ("content-length", "100"),
    ] {
        fields.field(name.as_bytes(), value.as_bytes(), Indexing::Index);
    }
    let mut out = Vec::new();
    frame::write_headers(&mut out, stream, &block, false, DEFAULT_MAX_FRAME_SIZE);
    frame::write_data_header(&mut out, stream, 100, true);
    out.extend_from_slice(&[b'x'; 100]);
    out
}

/// One exchange: `input` is the node's answer on the stream this request
/// opens.
#[inline(never)]
fn exchange(client: &mut ClientConnection, request: &NodeRequest<'_>, input: &[u8]) -> usize {
    let stream = client
        .send_request(request, true)
        .expect("room for a stream")
        .expect("a valid head");
    let mut body = 0;
    let used = client
        .receive(input, |event| {
            if let Event::Data { data, .. } = event {
                body += data.len();
            }
        })
        .expect("a valid response");
    client.release(stream, body as u32);
    assert_eq!(client.open_streams(), 0, "the answer was for this stream");
    let written = client.output().len();
    client.output().clear();
    used + written
}

fn h2client(c: &mut Criterion) {
    let mut client = ClientConnection::new(Config::default());
    let mut start = Vec::new();
    frame::write_settings(&mut start, &[(0x3, 1000), (0x4, 1 << 30)]);
    frame::write_settings_ack(&mut start);
    frame::write_window_update(&mut start, 0, (1 << 31) - 1 - 65_535);
    client.receive(&start, |_| {}).expect("a valid start");
    client.output().clear();
    let request = NodeRequest {
        written: WRITTEN,
        scheme: b"http",
        te_trailers: false,
        protocol: None,
    };
    let mut node = Encoder::new();
    let mut stream = 1;
    // The first exchange fills the tables; the measured ones repeat it.
    exchange(&mut client, &request, &response(&mut node, stream));
    let mut group = c.benchmark_group("h2client");
    group.throughput(Throughput::Elements(1));
    group.bench_function("exchange", |b| {
        b.iter_batched(
            || {
                stream += 2;
                response(&mut node, stream)
            },
            |input| exchange(&mut client, black_box(&request), &input),
            criterion::BatchSize::SmallInput,
        )
    });
    group.finish();
}

criterion_group!(benches, h2client);
criterion_main!(benches);
