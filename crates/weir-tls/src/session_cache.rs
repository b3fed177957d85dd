//! The stateful session cache: sessions kept in memory by weir, shared by all
//! threads of a virtual server, bounded in count and in age.
//!
//! rustls uses it for TLS 1.2 session-ID resumption and, when tickets are off,
//! for TLS 1.3 resumption (where a session is taken, so it resumes once).
//! Sharded by the session ID's first byte (random) so threads rarely meet on
//! a lock; each shard evicts its oldest entries first.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_rustls::rustls::server::StoresServerSessions;

const SHARDS: usize = 16;

/// Sessions for resumption, kept in memory by weir and shared by a virtual server's threads;
/// bounded in count and age.
#[derive(Debug)]
pub struct SessionCache {
    shards: Vec<Mutex<Shard>>,
    per_shard: usize,
    lifetime: Duration,
}

#[derive(Debug, Default)]
struct Shard {
    entries: HashMap<Vec<u8>, (Vec<u8>, Instant)>,
    /// Keys in insertion order, for eviction; may hold keys already removed.
    order: VecDeque<(Vec<u8>, Instant)>,
}

impl SessionCache {
    /// A cache of at most `size` sessions (rounded up to a multiple of the
    /// shard count), each resumable for `lifetime`.
    pub fn new(size: usize, lifetime: Duration) -> SessionCache {
        let per_shard = size.div_ceil(SHARDS).max(1);
        SessionCache {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            per_shard,
            lifetime,
        }
    }

    fn shard(&self, key: &[u8]) -> std::sync::MutexGuard<'_, Shard> {
        let index = key.first().map_or(0, |byte| usize::from(*byte) % SHARDS);
        self.shards[index]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Sessions held now (expired ones not yet evicted included).
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| {
                shard
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .entries
                    .len()
            })
            .sum()
    }

    /// Whether no session is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn fresh(&self, stored: Instant, now: Instant) -> bool {
        now.saturating_duration_since(stored) < self.lifetime
    }

    /// The sessions still fresh, each with its age, for a successor process
    /// (`crate::carry`).
    pub(crate) fn export(&self) -> Vec<CarriedSession> {
        let now = Instant::now();
        let mut sessions = Vec::new();
        for shard in &self.shards {
            let shard = shard
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            sessions.extend(
                shard
                    .entries
                    .iter()
                    .filter(|(_, (_, stored))| self.fresh(*stored, now))
                    .map(|(key, (value, stored))| CarriedSession {
                        key: key.clone(),
                        value: value.clone(),
                        age: now.saturating_duration_since(*stored),
                    }),
            );
        }
        sessions
    }

    /// Takes over a predecessor's sessions, each as old as it was there; this cache's
    /// bounds in count and age apply to them as to its own.
    pub(crate) fn adopt(&self, mut sessions: Vec<CarriedSession>) {
        let now = Instant::now();
        // Oldest first, the order eviction expects.
        sessions.sort_by_key(|session| std::cmp::Reverse(session.age));
        for session in sessions {
            let stored = now.checked_sub(session.age).unwrap_or(now);
            if !self.fresh(stored, now) {
                continue;
            }
            self.store(session.key, session.value, stored, now);
        }
    }

    /// Files `value` under `key` as stored at `stored`, evicting first what is past
    /// its bounds at `now`.
    fn store(&self, key: Vec<u8>, value: Vec<u8>, stored: Instant, now: Instant) {
        let mut shard = self.shard(&key);
        shard.evict(self.per_shard, self.lifetime, now);
        shard.order.push_back((key.clone(), stored));
        shard.entries.insert(key, (value, stored));
    }
}

/// A stored session as one process hands it to its successor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CarriedSession {
    /// The session ID with its context, as filed here.
    pub key: Vec<u8>,
    /// rustls' encoded session.
    pub value: Vec<u8>,
    pub age: Duration,
}

impl Shard {
    fn evict(&mut self, capacity: usize, lifetime: Duration, now: Instant) {
        while let Some((key, stored)) = self.order.front() {
            let expired = now.saturating_duration_since(*stored) >= lifetime;
            if !expired && self.entries.len() < capacity && self.order.len() < capacity * 2 {
                break;
            }
            let (key, stored) = (key.clone(), *stored);
            self.order.pop_front();
            // Only remove the entry this order record was made for, not a newer one.
            if self.entries.get(&key).is_some_and(|(_, at)| *at == stored) {
                self.entries.remove(&key);
            }
        }
    }
}

impl StoresServerSessions for SessionCache {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        let now = Instant::now();
        self.store(key, value, now, now);
        true
    }

    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        let shard = self.shard(key);
        let (value, stored) = shard.entries.get(key)?;
        self.fresh(*stored, Instant::now()).then(|| value.clone())
    }

    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        let mut shard = self.shard(key);
        let (value, stored) = shard.entries.remove(key)?;
        self.fresh(stored, Instant::now()).then_some(value)
    }

    fn can_cache(&self) -> bool {
        true
    }
}

/// One server config's view of a shared [`SessionCache`]: sessions filed under their ID and a
/// session context (see `crate::acceptor`), so one stored under other client certificate
/// checks is not found. The context follows the ID, which keeps the shard its first byte.
#[derive(Debug)]
pub struct InContext {
    cache: Arc<SessionCache>,
    context: [u8; 32],
}

impl InContext {
    /// `cache` as seen by sessions of `context`.
    pub fn new(cache: &Arc<SessionCache>, context: [u8; 32]) -> InContext {
        InContext {
            cache: Arc::clone(cache),
            context,
        }
    }

    fn key(&self, id: &[u8]) -> Vec<u8> {
        let mut key = Vec::with_capacity(id.len() + self.context.len());
        key.extend_from_slice(id);
        key.extend_from_slice(&self.context);
        key
    }
}

impl StoresServerSessions for InContext {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        self.cache.put(self.key(&key), value)
    }

    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.cache.get(&self.key(key))
    }

    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.cache.take(&self.key(key))
    }

    fn can_cache(&self) -> bool {
        self.cache.can_cache()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A successor's cache takes the sessions with their ages: fresh ones resume, ones
    /// past this cache's lifetime are dropped, and its bound holds (newest kept).
    #[test]
    fn adopted_sessions_keep_their_age_and_the_bounds() {
        let old = SessionCache::new(64, Duration::from_secs(60));
        old.put(b"a".to_vec(), b"one".to_vec());
        old.put(b"b".to_vec(), b"two".to_vec());
        let mut carried = old.export();
        carried.sort_by(|x, y| x.key.cmp(&y.key));
        assert_eq!(carried.len(), 2);
        assert_eq!(carried[0].value, b"one");
        carried.push(CarriedSession {
            key: b"stale".to_vec(),
            value: b"three".to_vec(),
            age: Duration::from_secs(61),
        });
        let new = SessionCache::new(64, Duration::from_secs(60));
        new.adopt(carried);
        assert_eq!(new.get(b"a").unwrap(), b"one");
        assert_eq!(new.take(b"b").unwrap(), b"two");
        assert!(new.get(b"stale").is_none());
        // More than fit in one shard: the newest stay.
        let small = SessionCache::new(1, Duration::from_secs(60));
        small.adopt(
            (0..5u64)
                .map(|age| CarriedSession {
                    key: vec![0, u8::try_from(age).unwrap()],
                    value: vec![1],
                    age: Duration::from_secs(age),
                })
                .collect(),
        );
        assert!(small.get(&[0, 0]).is_some());
        assert!(small.get(&[0, 4]).is_none());
    }

    #[test]
    fn stores_gets_and_takes_once() {
        let cache = SessionCache::new(100, Duration::from_secs(60));
        assert!(cache.put(b"a".to_vec(), b"1".to_vec()));
        assert_eq!(cache.get(b"a").unwrap(), b"1");
        assert_eq!(cache.take(b"a").unwrap(), b"1");
        assert!(cache.take(b"a").is_none());
        assert!(cache.get(b"b").is_none());
    }

    #[test]
    fn size_is_bounded_oldest_out_first() {
        let cache = SessionCache::new(SHARDS * 4, Duration::from_secs(60));
        // Same first byte: all in one shard of capacity 4.
        for i in 0..10u8 {
            cache.put(vec![7, i], vec![i]);
        }
        assert_eq!(cache.len(), 4);
        assert!(cache.get(&[7, 0]).is_none());
        assert_eq!(cache.get(&[7, 9]).unwrap(), vec![9]);
    }

    #[test]
    fn expired_sessions_are_not_resumed() {
        let cache = SessionCache::new(100, Duration::from_millis(20));
        cache.put(b"a".to_vec(), b"1".to_vec());
        std::thread::sleep(Duration::from_millis(40));
        assert!(cache.get(b"a").is_none());
        assert!(cache.take(b"a").is_none());
        cache.put(b"b".to_vec(), b"2".to_vec());
        assert!(cache.get(b"a").is_none());
    }

    #[test]
    fn a_session_is_found_only_in_its_own_context() {
        let cache = Arc::new(SessionCache::new(100, Duration::from_secs(60)));
        let here = InContext::new(&cache, [1; 32]);
        let there = InContext::new(&cache, [2; 32]);
        assert!(here.put(b"id".to_vec(), b"state".to_vec()));
        assert!(there.get(b"id").is_none());
        assert!(there.take(b"id").is_none());
        assert!(cache.get(b"id").is_none());
        assert_eq!(here.get(b"id").unwrap(), b"state");
        assert_eq!(here.take(b"id").unwrap(), b"state");
    }

    #[test]
    fn overwriting_a_key_keeps_the_newest() {
        let cache = SessionCache::new(SHARDS * 2, Duration::from_secs(60));
        cache.put(vec![1, 1], b"old".to_vec());
        cache.put(vec![1, 1], b"new".to_vec());
        cache.put(vec![1, 2], b"x".to_vec());
        cache.put(vec![1, 3], b"y".to_vec());
        // The stale order record of the first put must not remove the newer value.
        assert!(cache.len() <= 2);
    }
}
