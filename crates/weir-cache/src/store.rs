//! The in-memory store: bounded in bytes, sharded by primary key, with
//! S3-FIFO admission and eviction in each shard.
//!
//! A hit takes one shard's read lock, finds the resource and its variant,
//! bumps an atomic use count and clones an `Arc`: no writer is blocked for
//! longer than that, and no lock is shared by all threads. Inserts, purges
//! and evictions take the shard's write lock.
//!
//! S3-FIFO (Yang et al., SOSP 2023): new objects enter a small FIFO (a tenth
//! of the shard); when one reaches its head it moves to the main FIFO if it
//! was used since it came in, and is evicted otherwise, leaving its key in a
//! ghost FIFO so that it goes straight to main if it comes back soon. The
//! main FIFO gives each object at its head another round per use (up to 3).
//! A one-pass scan of cold keys therefore churns through the small FIFO and
//! never displaces the hot objects in main.
//!
//! Accounting: each object is charged its head, body (declared length while
//! it is still arriving), keys, tags and a fixed overhead; a shard evicts
//! until its charge is within its share of the bound, so the sum never
//! exceeds the bound.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard, Weak};

use hashbrown::HashTable;

use crate::key::VarySpec;
use crate::object::{NewObject, Object, ObjectBody, Rope};

/// Variants kept per URL, at most (Apache Traffic Server keeps 5 by default, its
/// `max_alts`): a lookup scans a URL's variants, so their number bounds a hit's cost.
pub const MAX_VARIANTS: usize = 32;

/// The store shared by every thread of a virtual server.
#[derive(Debug)]
pub struct Store {
    shards: Box<[RwLock<Shard>]>,
    shard_capacity: usize,
    hasher: ahash::RandomState,
    next_id: AtomicU64,
    evictions: AtomicU64,
}

/// What a lookup in the store found.
#[derive(Debug)]
pub enum Found {
    /// The variant for this request.
    Object(Arc<Object>),
    /// Stored variants exist, none for this request.
    NoVariant,
    /// Nothing stored under the primary key.
    Nothing,
}

/// What an insert did.
#[derive(Debug)]
pub struct Inserted {
    /// The object as stored, or `None` when it is larger than a shard may hold.
    pub object: Option<Arc<Object>>,
    /// Objects evicted to make room.
    pub evicted: u64,
    /// The stored variants the new object took the place of (its own key's, or every
    /// variant when the resource's `Vary` changed).
    pub replaced: Vec<Arc<Object>>,
}

/// A sample of the store's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StoreStats {
    /// Bytes the objects count against the store's size.
    pub bytes: usize,
    /// Objects stored, every variant counted.
    pub objects: usize,
    /// Objects evicted to make room since the start.
    pub evictions: u64,
}

#[derive(Debug)]
struct Resource {
    hash: u64,
    primary: Arc<[u8]>,
    /// Oldest first. Each variant keeps its own [`VarySpec`]: a node that compresses for
    /// some clients and not others, behind weir's compression, stores variants keyed by
    /// the node's choice beside variants keyed by weir's, under the same `Vary`.
    variants: Vec<Arc<Object>>,
}

#[derive(Debug, Default)]
struct Shard {
    resources: HashTable<Resource>,
    small: VecDeque<Weak<Object>>,
    main: VecDeque<Weak<Object>>,
    ghost: VecDeque<u64>,
    ghost_set: HashSet<u64>,
    small_bytes: usize,
    bytes: usize,
    objects: usize,
    /// Tag → the objects that carry it, by id.
    tags: HashMap<Box<[u8]>, HashMap<u64, Weak<Object>>>,
}

impl Store {
    /// A store bounded to `capacity` bytes, able to hold objects of up to
    /// `max_object` bytes (which decides how many shards it can have).
    pub fn new(capacity: usize, max_object: usize) -> Store {
        // Each shard holds at least four of the largest objects; up to 64 shards.
        let by_size = (capacity / max_object.max(1).saturating_mul(4)).clamp(1, 64);
        let shards = 1usize << (usize::BITS - 1 - by_size.leading_zeros());
        Store {
            shards: (0..shards).map(|_| RwLock::new(Shard::default())).collect(),
            shard_capacity: capacity / shards,
            hasher: ahash::RandomState::new(),
            next_id: AtomicU64::new(1),
            evictions: AtomicU64::new(0),
        }
    }

    /// The bound in bytes (the sum of the shards' shares).
    pub fn capacity(&self) -> usize {
        self.shard_capacity * self.shards.len()
    }

    /// How many shards the store is split into.
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// The hash of a primary key, which picks its shard.
    pub fn hash(&self, primary: &[u8]) -> u64 {
        self.hasher.hash_one(primary)
    }

    /// Finds the variant of `primary` that `secondary` selects, the newest when several
    /// do: called under the shard's read lock with each stored variant's [`VarySpec`] (once
    /// per distinct one), it writes the request's secondary key for it into the buffer.
    pub fn find(
        &self,
        hash: u64,
        primary: &[u8],
        mut secondary: impl FnMut(&VarySpec, &mut Vec<u8>),
        scratch: &mut Vec<u8>,
    ) -> Found {
        let shard = self.read(hash);
        let Some(resource) = shard
            .resources
            .find(hash, |resource| *resource.primary == *primary)
        else {
            return Found::Nothing;
        };
        let mut keyed: Option<&VarySpec> = None;
        for object in resource.variants.iter().rev() {
            if keyed.is_none_or(|spec| *spec != *object.vary) {
                scratch.clear();
                secondary(&object.vary, scratch);
                keyed = Some(&object.vary);
            }
            if same_key(&object.secondary, scratch) {
                object.touch();
                return Found::Object(Arc::clone(object));
            }
        }
        Found::NoVariant
    }

    /// Stores an object, replacing the variant with the same vary spec and secondary key
    /// (and every variant when the `Vary` field names changed: the node varies on
    /// something else now), then evicts to stay within the bound.
    pub fn insert(
        &self,
        hash: u64,
        vary: Arc<VarySpec>,
        new: NewObject,
        ban_sequence: u64,
    ) -> Inserted {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let object = Arc::new(Object::new(id, hash, (ban_sequence, vary), new));
        if object.charge() > self.shard_capacity {
            return Inserted {
                object: None,
                evicted: 0,
                replaced: Vec::new(),
            };
        }
        let mut shard = self.write(hash);
        let resource = match shard
            .resources
            .find_mut(hash, |resource| resource.primary == object.primary)
        {
            Some(resource) => resource,
            None => shard
                .resources
                .insert_unique(
                    hash,
                    Resource {
                        hash,
                        primary: Arc::clone(&object.primary),
                        variants: Vec::new(),
                    },
                    |resource| resource.hash,
                )
                .into_mut(),
        };
        let vary = &object.vary;
        let (replaced, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut resource.variants)
            .into_iter()
            .partition(|stored| {
                stored.vary.names != vary.names
                    || (stored.vary == *vary && same_key(&stored.secondary, &object.secondary))
            });
        resource.variants = kept;
        // At most MAX_VARIANTS per URL, the oldest stored going first: a lookup scans
        // them, and clients that each send another value of a field the node varies on
        // (`User-Agent`, say) would otherwise grow the list, and every hit's scan, without
        // bound.
        let surplus = (resource.variants.len() + 1).saturating_sub(MAX_VARIANTS);
        let crowded_out: Vec<_> = resource.variants.drain(..surplus).collect();
        resource.variants.push(Arc::clone(&object));
        for old in replaced.iter().chain(&crowded_out) {
            shard.forget(old);
        }
        shard.admit(&object, hash);
        // Not the new object itself: the requests waiting on its fill look it up next.
        let evicted =
            shard.evict_to(self.shard_capacity, Some(object.id)) + crowded_out.len() as u64;
        drop(shard);
        self.evictions.fetch_add(evicted, Ordering::Relaxed);
        Inserted {
            object: Some(object),
            evicted,
            replaced,
        }
    }

    /// Puts back complete objects that a fill took the place of and then failed to
    /// finish (a refresh whose body broke off), so a stale copy is still there for
    /// `stale-if-error` and revalidation. Each goes back as a new object with the same
    /// head, body and age, unless it would displace a variant stored meanwhile: one of
    /// its own key, or one that varies on other fields (the resource's `Vary` changed).
    /// The resource's other variants stay as they are. Returns how many objects were
    /// evicted to make room.
    pub fn reinstate(&self, replaced: Vec<Arc<Object>>) -> u64 {
        let mut evicted = 0;
        for old in replaced {
            let Some(body) = old.body() else {
                continue;
            };
            let displaces = {
                let shard = self.read(old.hash);
                shard
                    .resources
                    .find(old.hash, |resource| resource.primary == old.primary)
                    .is_some_and(|resource| {
                        resource.variants.iter().any(|stored| {
                            stored.vary.names != old.vary.names
                                || (stored.vary == old.vary
                                    && same_key(&stored.secondary, &old.secondary))
                        })
                    })
            };
            if displaces {
                continue;
            }
            let new = NewObject {
                primary: Arc::clone(&old.primary),
                secondary: old.secondary.clone(),
                head: old.head.clone(),
                freshness: old.freshness,
                body: ObjectBody::Complete(body.clone()),
                tags: old.tags.clone(),
                stored_at: old.stored_at,
            };
            let checked = old.ban_checked.load(Ordering::Acquire);
            evicted += self
                .insert(old.hash, Arc::clone(&old.vary), new, checked)
                .evicted;
        }
        evicted
    }

    /// An object made like a stored one but kept out of the store: an answer for one
    /// client that the cache may not keep.
    pub fn detached(&self, hash: u64, new: NewObject) -> Arc<Object> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        Arc::new(Object::new(id, hash, (0, VarySpec::none()), new))
    }

    /// Records a growing object's body as whole, charging its actual length.
    pub fn complete(&self, object: &Object, rope: Rope) {
        let charge = object.charge_for(rope.len());
        object.set_complete(rope);
        let mut shard = self.write(object.hash);
        let old = object.charge.swap(charge, Ordering::Relaxed);
        if object.is_removed() {
            return;
        }
        shard.bytes = shard.bytes - old + charge;
        if !object.in_main.load(Ordering::Relaxed) {
            shard.small_bytes = shard.small_bytes - old + charge;
        }
        let evicted = shard.evict_to(self.shard_capacity, Some(object.id));
        drop(shard);
        self.evictions.fetch_add(evicted, Ordering::Relaxed);
    }

    /// Removes one object (an aborted fill, a banned object); `false` when it
    /// was no longer stored.
    pub fn remove(&self, object: &Arc<Object>) -> bool {
        let mut shard = self.write(object.hash);
        shard.remove_object(object.hash, object)
    }

    /// Removes every variant of `primary`; returns how many.
    pub fn remove_primary(&self, primary: &[u8]) -> usize {
        let hash = self.hash(primary);
        let mut shard = self.write(hash);
        let Ok(entry) = shard
            .resources
            .find_entry(hash, |resource| *resource.primary == *primary)
        else {
            return 0;
        };
        let (resource, _) = entry.remove();
        for object in &resource.variants {
            shard.forget(object);
        }
        resource.variants.len()
    }

    /// Removes every object for which `doomed` is true; returns how many.
    /// Walks every shard, one write lock at a time.
    pub fn remove_where(&self, mut doomed: impl FnMut(&Object) -> bool) -> usize {
        let mut removed = 0;
        for shard in self.shards.iter() {
            let mut shard = shard.write().unwrap_or_else(PoisonError::into_inner);
            let mut victims: Vec<(u64, Arc<Object>)> = Vec::new();
            for resource in shard.resources.iter() {
                for object in &resource.variants {
                    if doomed(object) {
                        victims.push((resource.hash, Arc::clone(object)));
                    }
                }
            }
            for (hash, object) in victims {
                if shard.remove_object(hash, &object) {
                    removed += 1;
                }
            }
        }
        removed
    }

    /// Removes every object tagged `tag`; returns how many.
    pub fn remove_tagged(&self, tag: &[u8]) -> usize {
        let mut removed = 0;
        for shard in self.shards.iter() {
            let mut shard = shard.write().unwrap_or_else(PoisonError::into_inner);
            let Some(tagged) = shard.tags.get(tag) else {
                continue;
            };
            let victims: Vec<Arc<Object>> = tagged.values().filter_map(Weak::upgrade).collect();
            for object in victims {
                if shard.remove_object(object.hash, &object) {
                    removed += 1;
                }
            }
        }
        removed
    }

    /// Calls `visit` on every object, one shard's read lock at a time.
    pub fn for_each(&self, mut visit: impl FnMut(&Arc<Object>)) {
        for shard in self.shards.iter() {
            let shard = shard.read().unwrap_or_else(PoisonError::into_inner);
            for resource in shard.resources.iter() {
                resource.variants.iter().for_each(&mut visit);
            }
        }
    }

    /// Bytes and objects stored now, and evictions so far.
    pub fn stats(&self) -> StoreStats {
        let mut stats = StoreStats {
            evictions: self.evictions.load(Ordering::Relaxed),
            ..StoreStats::default()
        };
        for shard in self.shards.iter() {
            let shard = shard.read().unwrap_or_else(PoisonError::into_inner);
            stats.bytes += shard.bytes;
            stats.objects += shard.objects;
        }
        stats
    }

    fn shard_index(&self, hash: u64) -> usize {
        // The table uses the low bits; take the shard from the high ones.
        (hash >> 58) as usize & (self.shards.len() - 1)
    }

    fn read(&self, hash: u64) -> RwLockReadGuard<'_, Shard> {
        // A panic under the lock cannot leave a shard half-changed in a way
        // that breaks lookups: at worst, accounting is off until eviction.
        self.shards[self.shard_index(hash)]
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self, hash: u64) -> RwLockWriteGuard<'_, Shard> {
        self.shards[self.shard_index(hash)]
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl Shard {
    /// Queues and charges a new object.
    fn admit(&mut self, object: &Arc<Object>, hash: u64) {
        self.bytes += object.charge();
        self.objects += 1;
        if self.ghost_set.remove(&hash) {
            object.in_main.store(true, Ordering::Relaxed);
            self.main.push_back(Arc::downgrade(object));
        } else {
            self.small_bytes += object.charge();
            self.small.push_back(Arc::downgrade(object));
        }
        for tag in object.tags.iter() {
            self.tags
                .entry(tag.clone())
                .or_default()
                .insert(object.id, Arc::downgrade(object));
        }
        self.compact_queues();
    }

    /// Evicts until the shard holds at most `capacity` bytes; returns how many objects
    /// went. `keep`: the id of an object just stored, which is not evicted for its own
    /// room. An object larger than the small FIFO's tenth of the shard would otherwise
    /// be the first to go, before anyone read it.
    fn evict_to(&mut self, capacity: usize, keep: Option<u64>) -> u64 {
        let mut evicted = 0;
        while self.bytes > capacity {
            let from_small = self.small_bytes > capacity / 10 || self.main.is_empty();
            let progressed = if from_small {
                self.evict_small(&mut evicted, keep)
            } else {
                self.evict_main(&mut evicted)
            };
            if !(progressed
                || self.evict_small(&mut evicted, keep)
                || self.evict_main(&mut evicted))
            {
                break;
            }
        }
        evicted
    }

    /// One step at the small FIFO's head; `false` when it is empty, or when its head is
    /// `keep` (put back at its tail).
    fn evict_small(&mut self, evicted: &mut u64, keep: Option<u64>) -> bool {
        let Some(weak) = self.small.pop_front() else {
            return false;
        };
        let Some(object) = weak.upgrade().filter(|object| !object.is_removed()) else {
            return true;
        };
        if keep == Some(object.id) {
            self.small.push_back(weak);
            return false;
        }
        if object.frequency.load(Ordering::Relaxed) > 0 {
            object.frequency.store(0, Ordering::Relaxed);
            object.in_main.store(true, Ordering::Relaxed);
            self.small_bytes -= object.charge();
            self.main.push_back(weak);
        } else {
            self.remove_object(object.hash, &object);
            self.remember_ghost(object.hash);
            *evicted += 1;
        }
        true
    }

    /// One step at the main FIFO's head; `false` when it is empty.
    fn evict_main(&mut self, evicted: &mut u64) -> bool {
        let Some(weak) = self.main.pop_front() else {
            return false;
        };
        let Some(object) = weak.upgrade().filter(|object| !object.is_removed()) else {
            return true;
        };
        let frequency = object.frequency.load(Ordering::Relaxed);
        if frequency > 0 {
            object.frequency.store(frequency - 1, Ordering::Relaxed);
            self.main.push_back(weak);
        } else {
            self.remove_object(object.hash, &object);
            *evicted += 1;
        }
        true
    }

    fn remember_ghost(&mut self, hash: u64) {
        if self.ghost_set.insert(hash) {
            self.ghost.push_back(hash);
        }
        // Remember about as many evicted keys as there are objects.
        while self.ghost.len() > self.objects.max(64) {
            if let Some(old) = self.ghost.pop_front() {
                self.ghost_set.remove(&old);
            }
        }
    }

    /// Removes `object` from its resource and forgets it; `false` when it was not stored.
    fn remove_object(&mut self, hash: u64, object: &Arc<Object>) -> bool {
        let Ok(mut entry) = self
            .resources
            .find_entry(hash, |resource| resource.primary == object.primary)
        else {
            return false;
        };
        let variants = &mut entry.get_mut().variants;
        let Some(position) = variants
            .iter()
            .position(|stored| Arc::ptr_eq(stored, object))
        else {
            return false;
        };
        variants.swap_remove(position);
        if variants.is_empty() {
            entry.remove();
        }
        self.forget(object);
        true
    }

    /// Uncharges an object that has left its resource.
    fn forget(&mut self, object: &Arc<Object>) {
        if object.removed.swap(true, Ordering::AcqRel) {
            return;
        }
        object.left_store();
        self.bytes -= object.charge();
        self.objects -= 1;
        if !object.in_main.load(Ordering::Relaxed) {
            self.small_bytes -= object.charge();
        }
        for tag in object.tags.iter() {
            if let Some(tagged) = self.tags.get_mut(tag) {
                tagged.remove(&object.id);
                if tagged.is_empty() {
                    self.tags.remove(tag);
                }
            }
        }
    }

    /// Drops queue entries of objects already gone, once they outnumber the live ones.
    fn compact_queues(&mut self) {
        let live = |weak: &Weak<Object>| weak.upgrade().is_some_and(|object| !object.is_removed());
        if self.small.len() + self.main.len() > 2 * self.objects + 64 {
            self.small.retain(live);
            self.main.retain(live);
        }
    }
}

/// Whether two keys are equal, without calling `memcmp` for empty ones. The
/// secondary key of an object that varies on nothing is an empty
/// `Box<[u8]>`, whose pointer is dangling; glibc's AVX-512 `memcmp` still
/// issues a masked load from it for length 0, and the suppressed fault costs
/// a microcode assist of hundreds of cycles, about 2 % of a small hit's CPU.
fn same_key(stored: &[u8], wanted: &[u8]) -> bool {
    stored.len() == wanted.len() && (stored.is_empty() || stored == wanted)
}

#[cfg(test)]
mod tests;
