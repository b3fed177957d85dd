//! The tunnel pipeline's hot path per kind of data: a flow's encoder (chunking, BLAKE3 ids,
//! mirror lookups, zstd, framing) and decoder, on 8 MiB, and the FEC layer's block encode.
//! `weir tunnel probe pipeline` measures the same encoder and decoder in CPU time on larger
//! inputs (BENCHMARKING.md).

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use rand::{RngCore, SeedableRng, rngs::SmallRng};
use weir_tunnel::pipeline::{Ends, default_settings, fec_send, log_lines, measure};

const SIZE: usize = 8 << 20;

/// Incompressible bytes.
fn random(len: usize, seed: u64) -> Vec<u8> {
    let mut data = vec![0u8; len];
    SmallRng::seed_from_u64(seed).fill_bytes(&mut data);
    data
}

fn pipeline(c: &mut Criterion) {
    let mut group = c.benchmark_group("pipeline");
    group.throughput(Throughput::Bytes(SIZE as u64));
    group.sample_size(10);
    let text = log_lines(SIZE, 3);
    let random = random(SIZE, 1);
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
    let datagrams: Vec<Vec<u8>> = (0..1024u64)
        .map(|number| {
            let mut bytes = random(1456, number);
            bytes[0] = 0x41;
            bytes
        })
        .collect();
    let mut group = c.benchmark_group("fec");
    group.throughput(Throughput::Bytes(1024 * 1456));
    group.bench_function("send 1024 datagrams, blocks of 32", |b| {
        b.iter(|| black_box(fec_send(black_box(&datagrams))))
    });
    group.finish();
}

criterion_group!(benches, pipeline, fec);
criterion_main!(benches);
