//! The tunnel pipeline's hot path per kind of data: a flow's encoder (chunking, BLAKE3 ids,
//! mirror lookups, zstd, framing) and decoder, on 8 MiB, and the FEC layer's block encode
//! and recovery. `weir tunnel probe pipeline` measures the same encoder and decoder in CPU
//! time on larger inputs (BENCHMARKING.md).

use std::hint::black_box;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use weir_tunnel::fec::{FecCore, FecSettings, Mode, Timing};
use weir_tunnel::lab::pipeline::{Ends, default_settings, log_lines, measure};
use weir_tunnel::lab::probe::pseudo_random;

const SIZE: usize = 8 << 20;

fn pipeline(c: &mut Criterion) {
    let mut group = c.benchmark_group("pipeline");
    group.throughput(Throughput::Bytes(SIZE as u64));
    group.sample_size(10);
    let text = log_lines(SIZE, 3);
    let random = pseudo_random(SIZE, 1);
    group.bench_function("log text, new (zstd 1)", |b| {
        b.iter(|| {
            measure(
                black_box(&text),
                default_settings(),
                &mut Ends::new(1 << 30),
            )
        })
    });
    group.bench_function("random, new", |b| {
        b.iter(|| {
            measure(
                black_box(&random),
                default_settings(),
                &mut Ends::new(1 << 30),
            )
        })
    });
    let mut warm = Ends::new(1 << 30);
    measure(&random, default_settings(), &mut warm);
    group.bench_function("random, repeat", |b| {
        b.iter(|| measure(black_box(&random), default_settings(), &mut warm))
    });
    group.finish();
}

fn fec(c: &mut Criterion) {
    let peer = SocketAddr::from(([127, 0, 0, 1], 4433));
    let settings = FecSettings {
        mode: Mode::On,
        ..FecSettings::default()
    };
    let timing = Timing::for_link(51_840_000, Duration::from_millis(500), 1500);
    let datagrams: Vec<Vec<u8>> = (0..1024u32)
        .map(|number| {
            let mut bytes = pseudo_random(1456, u64::from(number));
            bytes[0] = 0x41;
            bytes
        })
        .collect();
    let mut group = c.benchmark_group("fec");
    group.throughput(Throughput::Bytes(1024 * 1456));
    group.bench_function("send 1024 datagrams, blocks of 32", |b| {
        b.iter(|| {
            let mut core = FecCore::new(settings, timing);
            let mut out = Vec::new();
            let now = Instant::now();
            for datagram in &datagrams {
                core.frame(now, peer, datagram, datagram.len(), &mut out);
                core.commit(now, peer, datagram, datagram.len());
            }
            black_box(core.take_outgoing().len())
        })
    });
    group.finish();
}

criterion_group!(benches, pipeline, fec);
criterion_main!(benches);
