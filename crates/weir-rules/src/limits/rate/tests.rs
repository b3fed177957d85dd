//! The token bucket on a simulated clock: bursts, the steady rate over many
//! keys, recovery, and the bound on keys.

use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use weir_config::{KeySource, RateLimit};

use super::*;

fn limit(rate: u32, per: Duration, burst: u32, max_keys: u32) -> RateLimit {
    RateLimit {
        name: "t".into(),
        key: KeySource::ClientAddress,
        rate: NonZeroU32::new(rate).unwrap(),
        per,
        burst: NonZeroU32::new(burst).unwrap(),
        max_keys: NonZeroU32::new(max_keys).unwrap(),
        status: 429,
    }
}

fn key(index: u32) -> [u8; 4] {
    index.to_be_bytes()
}

#[test]
fn a_burst_then_the_steady_rate_then_recovery() {
    let start = Instant::now();
    let limiter = RateLimiter::new(&limit(10, Duration::from_secs(1), 5, 1000), start);
    let k = key(1);
    for _ in 0..5 {
        assert!(limiter.check(Key::Bytes(&k), start).is_ok());
    }
    let refusal = limiter.check(Key::Bytes(&k), start).unwrap_err();
    assert_eq!(refusal.status, 429);
    assert_eq!(refusal.retry_after, Duration::from_millis(100));
    assert_eq!(refusal.retry_after_seconds(), 1);
    // Another key is not affected.
    assert!(limiter.check(Key::Bytes(&key(2)), start).is_ok());
    // One interval later exactly one more request fits.
    let later = start + Duration::from_millis(100);
    assert!(limiter.check(Key::Bytes(&k), later).is_ok());
    assert!(limiter.check(Key::Bytes(&k), later).is_err());
    // After a full refill (burst × interval) the whole burst is back.
    let rested = later + Duration::from_millis(500);
    for _ in 0..5 {
        assert!(limiter.check(Key::Bytes(&k), rested).is_ok());
    }
    assert!(limiter.check(Key::Bytes(&k), rested).is_err());
}

#[test]
fn ten_thousand_keys_each_get_the_configured_rate_within_one_percent() {
    // 10,000 clients each send 2.5× their rate (50/s against 20/s, burst 5)
    // for 10 simulated seconds, interleaved as they would arrive.
    const KEYS: u32 = 10_000;
    const RATE: u32 = 20;
    const BURST: u32 = 5;
    let start = Instant::now();
    let limiter = RateLimiter::new(&limit(RATE, Duration::from_secs(1), BURST, 20_000), start);
    let seconds = 10u64;
    let sends_per_key = 50 * seconds;
    let step = Duration::from_secs(seconds) / sends_per_key as u32;
    let mut admitted = vec![0u32; KEYS as usize];
    for send in 0..sends_per_key {
        let now = start + step * send as u32;
        for index in 0..KEYS {
            if limiter.check(Key::Bytes(&key(index)), now).is_ok() {
                admitted[index as usize] += 1;
            }
        }
    }
    // Over the run a key may send its burst plus RATE per second.
    let allowed = f64::from(BURST) + f64::from(RATE) * seconds as f64;
    for (index, &count) in admitted.iter().enumerate() {
        let error = (f64::from(count) - allowed).abs() / allowed;
        assert!(
            error <= 0.01,
            "key {index}: {count} admitted, {allowed} allowed"
        );
    }
    let steady: f64 = admitted.iter().map(|&c| f64::from(c - BURST)).sum::<f64>()
        / f64::from(KEYS)
        / seconds as f64;
    println!("admitted rate per key after the burst: {steady:.2}/s (configured {RATE}/s)");
    assert!((steady - f64::from(RATE)).abs() / f64::from(RATE) <= 0.01);
    assert_eq!(limiter.len(), KEYS as usize);
}

#[test]
fn keys_expire_and_the_table_stays_bounded() {
    let start = Instant::now();
    let limiter = RateLimiter::new(&limit(10, Duration::from_secs(1), 10, 5_000), start);
    // A flood of 50,000 distinct keys never holds more than max_keys.
    for index in 0..50_000 {
        let now = start + Duration::from_micros(index);
        assert!(limiter.check(Key::Bytes(&key(index as u32)), now).is_ok());
        assert!(limiter.len() <= 5_000 + 64, "at {index}: {}", limiter.len());
    }
    // Once every bucket is full again, a sweep forgets them all.
    limiter.sweep(start + Duration::from_secs(3));
    assert_eq!(limiter.len(), 0);
    // A key that keeps sending is not evicted by its own traffic.
    let busy = key(u32::MAX);
    let now = start + Duration::from_secs(4);
    for _ in 0..10 {
        assert!(limiter.check(Key::Bytes(&busy), now).is_ok());
    }
    assert!(limiter.check(Key::Bytes(&busy), now).is_err());
}

/// A table full of keys whose buckets are still spent sweeps (reads every key) once per
/// eighth of its bound in new keys, not once per new key: each new key would otherwise
/// cost the whole table's time.
#[test]
fn a_full_table_of_live_keys_is_not_swept_for_every_new_key() {
    let start = Instant::now();
    // One key an hour: every bucket stays spent for the whole test.
    let limiter = RateLimiter::new(&limit(1, Duration::from_secs(3600), 1, 64_000), start);
    let now = start + Duration::from_millis(1);
    for index in 0..64_000 + 8_000 {
        let _ = limiter.check(Key::Bytes(&key(index)), now);
    }
    let sweeps: usize = limiter
        .shards
        .iter()
        .map(|shard| shard.lock().unwrap().sweeps)
        .sum();
    // 8,000 keys past full, over the shards: about one sweep per shard, plus the first.
    assert!(
        sweeps <= 4 * limiter.shards.len(),
        "{sweeps} sweeps over {} shards",
        limiter.shards.len()
    );
    assert!(limiter.len() <= 64_000 + 64);
}

#[test]
fn keys_are_swept_as_time_passes() {
    let start = Instant::now();
    let limiter = RateLimiter::new(&limit(100, Duration::from_secs(1), 10, 1_000_000), start);
    for round in 0..20u32 {
        let now = start + Duration::from_secs(u64::from(round));
        for index in 0..1000 {
            let _ = limiter.check(Key::Bytes(&key(round * 1000 + index)), now);
        }
    }
    // Keys from rounds long past were dropped by the sweeps new keys trigger.
    assert!(limiter.len() <= 3000, "{} keys kept", limiter.len());
}

/// A reload that changes a rate limit's numbers keeps what each key spent: a client that
/// emptied its bucket is not handed a new one, and one that spent part keeps the rest.
#[test]
fn changed_settings_keep_what_each_key_spent() {
    let start = Instant::now();
    let old = RateLimiter::new(&limit(10, Duration::from_secs(1), 10, 1000), start);
    let (flooder, light, rested) = (key(1), key(2), key(3));
    while old.check(Key::Bytes(&flooder), start).is_ok() {}
    for _ in 0..2 {
        assert!(old.check(Key::Bytes(&light), start).is_ok());
    }
    assert!(old.check(Key::Bytes(&rested), start).is_ok());
    // Lowered at once to 2 per second, burst 4; and, a second later, to burst 4 alone.
    let slower = RateLimiter::carried(&limit(2, Duration::from_secs(1), 4, 1000), &old, start);
    let reload = start + Duration::from_secs(1);
    let lower = RateLimiter::carried(&limit(10, Duration::from_secs(1), 4, 1000), &old, reload);
    // The flooder spent ten, more than the new burst: its bucket is empty.
    assert!(slower.check(Key::Bytes(&flooder), start).is_err());
    // Two of ten spent at the old rate are two of four at the new: two more fit.
    assert!(slower.check(Key::Bytes(&light), start).is_ok());
    assert!(slower.check(Key::Bytes(&light), start).is_ok());
    assert!(slower.check(Key::Bytes(&light), start).is_err());
    // A full second later every bucket had refilled: nothing is carried, all start full.
    assert_eq!(lower.len(), 0);
    for _ in 0..4 {
        assert!(lower.check(Key::Bytes(&flooder), reload).is_ok());
    }
    assert!(lower.check(Key::Bytes(&flooder), reload).is_err());
    // The flooder's ten spent, counted at 2 per second: empty now, one more after 500 ms.
    let half = start + Duration::from_millis(500);
    assert!(slower.check(Key::Bytes(&flooder), half).is_ok());
    assert!(slower.check(Key::Bytes(&flooder), half).is_err());
}

/// A limit whose key changed counts different things: every bucket starts full.
#[test]
fn a_changed_key_starts_every_bucket_full() {
    let start = Instant::now();
    let old = RateLimiter::new(&limit(1, Duration::from_secs(1), 1, 1000), start);
    let k = key(7);
    assert!(old.check(Key::Bytes(&k), start).is_ok());
    assert!(old.check(Key::Bytes(&k), start).is_err());
    let mut by_route = limit(1, Duration::from_secs(1), 2, 1000);
    by_route.key = KeySource::Route;
    let new = RateLimiter::carried(&by_route, &old, start);
    assert!(new.is_empty());
    assert!(new.check(Key::Bytes(&k), start).is_ok());
}

/// A reload that lowers `max_keys` below the keys in the table keeps the most spent ones:
/// the flooders stay empty, the light clients (closest to full) are the ones left out.
#[test]
fn a_lower_max_keys_keeps_the_most_spent_keys() {
    let start = Instant::now();
    let old = RateLimiter::new(&limit(5, Duration::from_secs(1), 5, 100), start);
    for index in 0..50 {
        while old.check(Key::Bytes(&key(index)), start).is_ok() {}
    }
    for index in 50..100 {
        assert!(old.check(Key::Bytes(&key(index)), start).is_ok());
    }
    let new = RateLimiter::carried(&limit(5, Duration::from_secs(1), 5, 50), &old, start);
    assert_eq!(new.len(), 50);
    for index in 0..50 {
        assert!(
            new.check(Key::Bytes(&key(index)), start).is_err(),
            "flooder {index} was handed a full bucket"
        );
    }
}

#[test]
fn the_slowest_refill_the_config_accepts_still_refuses_past_its_burst() {
    // 1 a day with a burst of 3,650: ten years to refill, the longest weir-config
    // accepts. The limiter's nanosecond arithmetic must hold: burst requests at once,
    // then a refusal whose wait is one day.
    let start = Instant::now();
    let day = Duration::from_secs(86_400);
    let limiter = RateLimiter::new(&limit(1, day, 3650, 1000), start);
    let k = key(7);
    for _ in 0..3650 {
        assert!(limiter.check(Key::Bytes(&k), start).is_ok());
    }
    let refusal = limiter.check(Key::Bytes(&k), start).unwrap_err();
    assert_eq!(refusal.retry_after, day);
    // A day later exactly one more.
    assert!(limiter.check(Key::Bytes(&k), start + day).is_ok());
    assert!(limiter.check(Key::Bytes(&k), start + day).is_err());
}
