//! Memory per key of the rate limiter, measured with a counting allocator:
//! the bytes the heap holds after 10,000 (and 100,000) distinct keys, divided
//! by the keys. Printed, and held to the bound of 128 bytes per key.

// A GlobalAlloc must be an `unsafe impl`; this one only counts and forwards
// to the system allocator, in this test binary alone.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use weir_config::{KeySource, RateLimit};
use weir_rules::Key;
use weir_rules::limits::RateLimiter;

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call forwards to `System` with the caller's own arguments.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded as received.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded as received.
        unsafe { System.dealloc(pointer, layout) }
    }

    unsafe fn realloc(&self, pointer: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: forwarded as received.
        unsafe { System.realloc(pointer, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn limit(max_keys: u32) -> RateLimit {
    RateLimit {
        name: "m".into(),
        key: KeySource::ClientAddress,
        rate: NonZeroU32::new(10).unwrap(),
        per: Duration::from_secs(1),
        burst: NonZeroU32::new(10).unwrap(),
        max_keys: NonZeroU32::new(max_keys).unwrap(),
        status: 429,
    }
}

/// Bytes per key held by a limiter that tracks `keys` client addresses.
fn bytes_per_key(keys: u32) -> f64 {
    let start = Instant::now();
    let before = LIVE.load(Ordering::Relaxed);
    let limiter = RateLimiter::new(&limit(keys * 2), start);
    for index in 0..keys {
        let address = IpAddr::from((0x0a00_0000 + index).to_be_bytes());
        limiter.check(Key::Address(address), start).unwrap();
    }
    assert_eq!(limiter.len(), keys as usize);
    let used = LIVE.load(Ordering::Relaxed) - before;
    drop(limiter);
    used as f64 / f64::from(keys)
}

#[test]
fn rate_limiter_memory_per_key_is_bounded() {
    for keys in [10_000, 100_000] {
        let per_key = bytes_per_key(keys);
        println!("rate limiter: {per_key:.1} bytes per key with {keys} keys");
        assert!(per_key <= 128.0, "{per_key:.1} bytes per key");
    }
}
