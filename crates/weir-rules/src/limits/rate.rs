//! A token bucket per key, kept as one number: GCRA (the generic cell rate
//! algorithm, the token bucket's exact twin) stores the key's "theoretical
//! arrival time", the moment its bucket will be full again. A request is
//! admitted when that moment is at most `burst - 1` intervals ahead, and
//! pushes it one interval further.
//!
//! A key whose moment has passed has a full bucket, the same as no entry, so
//! such entries are dropped by a sweep; the table never holds more than
//! `max_keys` (the stalest of a sample are evicted past it). Keys are hashed
//! with a per-process random key (no chosen-collision floods) and spread
//! over shards, each behind its own short lock.

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher, RandomState};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use weir_config::RateLimit;

use super::Refusal;
use crate::key::Key;

/// Entries looked at to choose one to evict when a shard is full.
const EVICTION_SAMPLE: usize = 32;
/// Most shards; small tables use fewer so each still holds a useful number of keys.
const MAX_SHARDS: usize = 64;

/// One rate limit's buckets.
#[derive(Debug)]
pub struct RateLimiter {
    config: RateLimit,
    /// Nanoseconds between two admitted requests at the steady rate.
    interval: u64,
    /// How far ahead a key's arrival time may run: `(burst - 1) × interval`.
    tolerance: u64,
    shards: Box<[Mutex<Shard>]>,
    per_shard: usize,
    hasher: RandomState,
    epoch: Instant,
}

#[derive(Debug, Default)]
struct Shard {
    /// Key hash → theoretical arrival time (ns after `epoch`).
    arrivals: HashMap<u64, u64, BuildHasherDefault<PassThrough>>,
    /// When this shard sweeps out full buckets next (ns after `epoch`).
    next_sweep: u64,
    /// Keys added since the last sweep: a full shard sweeps early only once an eighth of
    /// its bound came in, since a sweep reads every key (one per new key would cost each
    /// the whole table's time).
    added_since_sweep: usize,
    /// Sweeps so far (what the tests count).
    #[cfg(test)]
    sweeps: usize,
}

/// The key hashes are already keyed SipHash output: the table uses them as they are.
#[derive(Debug, Default)]
struct PassThrough(u64);

impl RateLimiter {
    /// A limiter whose clock counts from `epoch` (pass the same `Instant` to
    /// every limiter; tests pass a simulated clock's start).
    pub fn new(config: &RateLimit, epoch: Instant) -> RateLimiter {
        let per = config.per.as_nanos().min(u128::from(u64::MAX));
        let interval = (per / u128::from(config.rate.get())).max(1) as u64;
        let tolerance = interval.saturating_mul(u64::from(config.burst.get()) - 1);
        let max_keys = config.max_keys.get() as usize;
        let shards = (max_keys / 1024)
            .clamp(1, MAX_SHARDS)
            .next_power_of_two()
            .min(MAX_SHARDS);
        RateLimiter {
            config: config.clone(),
            interval,
            tolerance,
            shards: (0..shards).map(|_| Mutex::new(Shard::default())).collect(),
            per_shard: max_keys.div_ceil(shards),
            hasher: RandomState::new(),
            epoch,
        }
    }

    /// The limiter for `config` after a reload changed the settings of `previous` (a limit
    /// of the same name): each key keeps the requests its bucket has spent, now counted at
    /// the new rate, so lowering a limit under load does not hand every client a full
    /// bucket. A bucket spent past the new `burst` is empty. When the key changed, the old
    /// counts mean nothing for the new keys and every bucket starts full.
    pub fn carried(config: &RateLimit, previous: &RateLimiter, now: Instant) -> RateLimiter {
        let mut limiter = RateLimiter::new(config, previous.epoch);
        if config.key != previous.config.key {
            return limiter;
        }
        limiter.hasher = previous.hasher.clone();
        let now = limiter.nanos(now);
        // The keys whose buckets have not refilled, the most spent first: when a lower
        // `max_keys` cannot hold them all, the ones left out are those closest to full.
        let mut spending: Vec<(u64, u64)> = Vec::new();
        for shard in previous.shards.iter() {
            let shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
            spending.extend(
                shard
                    .arrivals
                    .iter()
                    .filter(|&(_, &arrival)| arrival > now)
                    .map(|(&hash, &arrival)| (hash, arrival)),
            );
        }
        spending.sort_unstable_by_key(|&(_, arrival)| std::cmp::Reverse(arrival));
        // An empty bucket: `burst` requests spent.
        let empty = u128::from(limiter.tolerance.saturating_add(limiter.interval));
        for (hash, arrival) in spending {
            // (arrival - now) / old interval requests spent, at the new interval each.
            let spent = u128::from(arrival - now) * u128::from(limiter.interval)
                / u128::from(previous.interval);
            let mut target = limiter.shards[limiter.shard_of(hash)]
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if target.arrivals.len() < limiter.per_shard {
                target
                    .arrivals
                    .insert(hash, now.saturating_add(spent.min(empty) as u64));
            }
        }
        limiter
    }

    /// The limit's settings.
    pub fn config(&self) -> &RateLimit {
        &self.config
    }

    /// Counts one request under `key` at `now`: admitted, or refused with how
    /// long until the key may send again.
    pub fn check(&self, key: Key<'_>, now: Instant) -> Result<(), Refusal> {
        let now = self.nanos(now);
        let hash = self.hash(key);
        let mut shard = self.shards[self.shard_of(hash)]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(&arrival) = shard.arrivals.get(&hash) {
            let allowed_from = arrival.saturating_sub(self.tolerance);
            if now < allowed_from {
                return Err(Refusal::new(self.config.status, allowed_from - now));
            }
            let next = arrival.max(now).saturating_add(self.interval);
            shard.arrivals.insert(hash, next);
            return Ok(());
        }
        self.make_room(&mut shard, now);
        shard
            .arrivals
            .insert(hash, now.saturating_add(self.interval));
        Ok(())
    }

    /// Keys tracked now (full buckets not yet swept included).
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| {
                shard
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .arrivals
                    .len()
            })
            .sum()
    }

    /// Whether no key is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops every key whose bucket is full again at `now`.
    pub fn sweep(&self, now: Instant) {
        let now = self.nanos(now);
        for shard in self.shards.iter() {
            sweep(
                &mut shard.lock().unwrap_or_else(PoisonError::into_inner),
                now,
            );
        }
    }

    /// Before a new key goes in: sweep when due, or when full and an eighth of the bound
    /// came in since the last sweep, then evict the stalest of a sample if still full.
    fn make_room(&self, shard: &mut Shard, now: u64) {
        let full = shard.arrivals.len() >= self.per_shard;
        let worth_a_sweep = shard.added_since_sweep >= (self.per_shard / 8).max(1);
        shard.added_since_sweep += 1;
        if (full && worth_a_sweep) || now >= shard.next_sweep {
            sweep(shard, now);
            // Sweep again once every bucket seen now could have refilled.
            let refill = self.tolerance.saturating_add(self.interval);
            shard.next_sweep =
                now.saturating_add(refill.max(Duration::from_secs(1).as_nanos() as u64));
        }
        while shard.arrivals.len() >= self.per_shard {
            let stalest = shard
                .arrivals
                .iter()
                .take(EVICTION_SAMPLE)
                .min_by_key(|&(_, &arrival)| arrival)
                .map(|(&hash, _)| hash);
            match stalest {
                Some(hash) => shard.arrivals.remove(&hash),
                None => break,
            };
        }
    }

    /// The shard of a key's hash: middle bits, since the table itself uses the top 7
    /// (tags) and the low ones (buckets).
    fn shard_of(&self, hash: u64) -> usize {
        (hash >> 40) as usize & (self.shards.len() - 1)
    }

    fn hash(&self, key: Key<'_>) -> u64 {
        let mut hasher = self.hasher.build_hasher();
        key.hash_into(&mut hasher);
        hasher.finish()
    }

    fn nanos(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.epoch)
            .as_nanos()
            .min(u128::from(u64::MAX / 2)) as u64
    }
}

fn sweep(shard: &mut Shard, now: u64) {
    shard.arrivals.retain(|_, arrival| *arrival > now);
    shard.added_since_sweep = 0;
    #[cfg(test)]
    {
        shard.sweeps += 1;
    }
    // Give memory back after a flood of keys has passed.
    let len = shard.arrivals.len();
    if shard.arrivals.capacity() > 64 && len < shard.arrivals.capacity() / 4 {
        shard.arrivals.shrink_to(len * 2);
    }
}

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only u64 keys are hashed; fold anything else in so it still works.
        for &byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(byte);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }
}

#[cfg(test)]
mod tests;
