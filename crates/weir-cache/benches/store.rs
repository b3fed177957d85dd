//! The store's read path under contention: threads look up keys drawn from
//! a hot set while one thread keeps inserting, against quick_cache (sharded,
//! weighted, CLOCK-Pro) doing the same, as the reference a crate would give.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use weir_cache::UnixTime;
use weir_cache::key::VarySpec;
use weir_cache::object::{HeadBuilder, NewObject, ObjectBody};
use weir_cache::policy::freshness::{Freshness, Timing};
use weir_cache::store::{Found, Store};

const KEYS: usize = 10_000;
const READERS: usize = 2;

fn key(index: usize) -> Vec<u8> {
    format!("https://www.example.com/static/asset-{index}.js").into_bytes()
}

fn object(index: usize) -> NewObject {
    let mut head = HeadBuilder::default();
    head.push(b"Content-Type", b"application/javascript");
    head.push(b"Cache-Control", b"max-age=3600");
    NewObject {
        primary: Arc::from(key(index)),
        secondary: Box::new([]),
        head: head.finish(200),
        freshness: Freshness {
            timing: Timing {
                request_time: UnixTime(0),
                response_time: UnixTime(0),
                date: UnixTime(0),
                age_value: 0,
            },
            lifetime: 3600,
            stale_while_revalidate: 0,
            stale_if_error: 0,
            no_cache: false,
            forbids_stale: false,
        },
        body: ObjectBody::Complete(weir_cache::Rope::new(vec![Bytes::from(vec![b'x'; 1000])])),
        tags: Box::new([]),
        stored_at: UnixTime(0),
    }
}

/// Runs `READERS` reader threads for `iterations` lookups each while a writer
/// inserts; returns the wall time of the readers.
fn contended(
    iterations: u64,
    read: impl Fn(usize) + Sync,
    write: impl Fn(usize) + Sync,
) -> Duration {
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let mut index = 0;
            while !stop.load(Ordering::Relaxed) {
                write(KEYS + index % KEYS);
                index += 1;
            }
        });
        let start = Instant::now();
        let readers: Vec<_> = (0..READERS)
            .map(|thread| {
                let read = &read;
                scope.spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(thread as u64);
                    for _ in 0..iterations {
                        read(rng.random_range(0..KEYS));
                    }
                })
            })
            .collect();
        for reader in readers {
            let _ = reader.join();
        }
        let elapsed = start.elapsed();
        stop.store(true, Ordering::Relaxed);
        elapsed
    })
}

fn store(c: &mut Criterion) {
    let weir = Store::new(256 << 20, 1 << 20);
    for index in 0..KEYS {
        weir.insert(weir.hash(&key(index)), VarySpec::none(), object(index), 0);
    }
    let keys: Vec<Vec<u8>> = (0..2 * KEYS).map(key).collect();
    let quick: quick_cache::sync::Cache<Vec<u8>, Arc<Bytes>> =
        quick_cache::sync::Cache::new(4 * KEYS);
    for index in 0..KEYS {
        quick.insert(key(index), Arc::new(Bytes::from(vec![b'x'; 1000])));
    }

    let mut group = c.benchmark_group("store_contended");
    group.throughput(Throughput::Elements(READERS as u64));
    group.bench_function("weir_s3fifo", |b| {
        b.iter_custom(|iterations| {
            contended(
                iterations,
                |index| {
                    let mut scratch = Vec::new();
                    let key = &keys[index];
                    let found = weir.find(weir.hash(key), key, |_, _| {}, &mut scratch);
                    assert!(matches!(found, Found::Object(_)));
                },
                |index| {
                    weir.insert(weir.hash(&keys[index]), VarySpec::none(), object(index), 0);
                },
            )
        })
    });
    group.bench_function("quick_cache", |b| {
        b.iter_custom(|iterations| {
            contended(
                iterations,
                |index| {
                    assert!(quick.get(&keys[index]).is_some());
                },
                |index| quick.insert(keys[index].clone(), Arc::new(Bytes::from(vec![b'x'; 1000]))),
            )
        })
    });
    group.finish();
}

criterion_group!(benches, store);
criterion_main!(benches);
