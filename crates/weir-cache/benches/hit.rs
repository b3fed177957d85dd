//! The hit path: a fresh small object with a Vary variant (weir compresses,
//! so the variant is keyed by the coding chosen from `Accept-Encoding`),
//! looked up from a parsed HTTP/1.1 request head and written back.

use std::hint::black_box;

use bytes::{Bytes, BytesMut};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use weir_cache::{
    Cache, CachePolicy, CompressionPolicy, HitBody, Http1Request, Lookup, Reply, Scheme,
    StoreSettings, UnixTime,
};
use weir_http::{Limits, Parsed, RequestHead, parse_request};

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

const NOW: UnixTime = UnixTime(1_700_000_000);

fn request() -> RequestHead {
    match parse_request(BROWSER_REQUEST, &Limits::default()) {
        Ok(Parsed::Complete(head, _)) => head,
        other => panic!("the benchmark request does not parse: {other:?}"),
    }
}

/// A cache holding the zstd variant of /static/app.js and 10,000 other objects.
fn filled_cache(policy: &CachePolicy, compression: &CompressionPolicy) -> std::sync::Arc<Cache> {
    let cache = Cache::new(
        StoreSettings {
            size: 64 << 20,
            max_object_size: 1 << 20,
        },
        Default::default(),
        Default::default(),
    );
    let head = request();
    let view = Http1Request {
        head: &head,
        scheme: Scheme::Https,
    };
    let response = weir_cache::testing::Resp::new(200)
        .header("Content-Type", "application/javascript")
        .header("Cache-Control", "max-age=3600")
        .header("ETag", "\"65920000-65\"")
        .header("Vary", "Accept-Encoding")
        .header("Content-Length", "2000");
    let Lookup::Forward(exchange) = cache.lookup(policy, Some(compression), &view, NOW) else {
        panic!("expected a miss");
    };
    let Reply::Fill(mut fill) =
        cache.response(exchange, policy, Some(compression), &view, &response, NOW)
    else {
        panic!("expected a fill");
    };
    fill.push(Bytes::from(vec![b'a'; 2000])).unwrap();
    fill.finish().unwrap();
    for index in 0..10_000 {
        let other = weir_cache::testing::Req::get(&format!("/other/{index}"));
        if let Lookup::Forward(exchange) = cache.lookup(policy, None, &other, NOW)
            && let Reply::Fill(mut fill) = cache.response(
                exchange,
                policy,
                None,
                &other,
                &weir_cache::testing::Resp::new(200)
                    .header("Cache-Control", "max-age=3600")
                    .header("Content-Length", "100"),
                NOW,
            )
        {
            fill.push(Bytes::from(vec![b'b'; 100])).unwrap();
            fill.finish().unwrap();
        }
    }
    cache
}

fn hits(c: &mut Criterion) {
    let policy = CachePolicy::default();
    let compression = CompressionPolicy::default();
    let cache = filled_cache(&policy, &compression);
    let head = request();
    let view = Http1Request {
        head: &head,
        scheme: Scheme::Https,
    };
    let mut group = c.benchmark_group("hit");
    group.throughput(Throughput::Elements(1));
    group.bench_function("lookup_vary_variant", |b| {
        b.iter(
            || match cache.lookup(&policy, Some(&compression), black_box(&view), NOW) {
                Lookup::Hit(hit) => black_box(hit),
                other => panic!("expected a hit, got {other:?}"),
            },
        )
    });
    let mut out = BytesMut::with_capacity(4096);
    group.bench_function("lookup_and_write_http1", |b| {
        b.iter(|| {
            let Lookup::Hit(hit) = cache.lookup(&policy, Some(&compression), black_box(&view), NOW)
            else {
                panic!("expected a hit");
            };
            out.clear();
            hit.write_http1_head(
                &mut out,
                (false, true),
                &[],
                &[],
                None::<&weir_http::Unedited>,
            );
            match hit.body() {
                HitBody::Whole(rope) => black_box(rope),
                other => panic!("expected a whole body, got {other:?}"),
            };
            black_box(out.len())
        })
    });
    let conditional = match parse_request(
        b"GET /static/app.js?v=1234 HTTP/1.1\r\nHost: www.example.com\r\nAccept-Encoding: gzip, deflate, br, zstd\r\nIf-None-Match: W/\"65920000-65\"\r\n\r\n",
        &Limits::default(),
    ) {
        Ok(Parsed::Complete(head, _)) => head,
        other => panic!("{other:?}"),
    };
    let conditional = Http1Request {
        head: &conditional,
        scheme: Scheme::Https,
    };
    group.bench_function("lookup_not_modified", |b| {
        b.iter(
            || match cache.lookup(&policy, Some(&compression), black_box(&conditional), NOW) {
                Lookup::Hit(hit) if hit.status() == 304 => black_box(hit),
                other => panic!("expected a 304, got {other:?}"),
            },
        )
    });
    group.finish();
}

criterion_group!(benches, hits);
criterion_main!(benches);
