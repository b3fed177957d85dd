//! What a limit counts per key (a client address, a request key's hash): a count per key
//! in sharded maps, each a short mutex, the entry gone when its key's count falls to zero,
//! so memory follows what is in progress now.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, RandomState};
use std::sync::{Mutex, MutexGuard, PoisonError};

const SHARDS: usize = 16;

/// Counts per key, each bounded by the `max` its caller gives.
#[derive(Debug)]
pub(super) struct KeyCounts<K> {
    shards: [Mutex<HashMap<K, u32>>; SHARDS],
    hasher: RandomState,
}

impl<K: Hash + Eq + Copy> KeyCounts<K> {
    pub(super) fn new() -> KeyCounts<K> {
        KeyCounts {
            shards: std::array::from_fn(|_| Mutex::new(HashMap::new())),
            hasher: RandomState::new(),
        }
    }

    /// Counts one more for `key`, unless it holds `max` already (then false).
    pub(super) fn take(&self, key: K, max: u32) -> bool {
        let mut shard = self.shard(key);
        let count = shard.entry(key).or_insert(0);
        if *count >= max {
            return false;
        }
        *count += 1;
        true
    }

    /// Counts one less for `key`; its entry goes with its last.
    pub(super) fn give_back(&self, key: K) {
        let mut shard = self.shard(key);
        if let Some(count) = shard.get_mut(&key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                shard.remove(&key);
            }
        }
    }

    /// What `key` holds now.
    pub(super) fn count(&self, key: K) -> u32 {
        self.shard(key).get(&key).copied().unwrap_or(0)
    }

    /// Keys holding at least one.
    pub(super) fn keys(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| shard.lock().unwrap_or_else(PoisonError::into_inner).len())
            .sum()
    }

    fn shard(&self, key: K) -> MutexGuard<'_, HashMap<K, u32>> {
        self.shards[self.hasher.hash_one(key) as usize % SHARDS]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}
