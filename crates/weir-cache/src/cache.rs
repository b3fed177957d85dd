//! The cache of one virtual server: the store, the flights in progress, the
//! bans and the metrics, behind the two calls the pipeline makes —
//! [`Cache::lookup`] (in `lookup.rs`) at `cache_lookup` and
//! [`Cache::response`] (in `exchange.rs`) at `filter_response` — and the
//! purge API.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use weir_observe::{CacheMetrics, CompressionMetrics};

use crate::date::UnixTime;
use crate::flight::Flights;
use crate::key::{primary_key, primary_key_of_url};
use crate::object::Object;
use crate::purge::{BanInfo, Bans, PurgeError, PurgeLog, Purged};
use crate::store::{Store, StoreStats};
use crate::view::RequestView;

/// The settings that shape a store; a reload that keeps them keeps the
/// cache's contents (see [`Cache::fits`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreSettings {
    /// The bound on the bytes held.
    pub size: usize,
    /// The largest object stored.
    pub max_object_size: usize,
}

/// One virtual server's cache, shared by every thread (`Arc<Cache>`).
#[derive(Debug)]
pub struct Cache {
    pub(crate) store: Store,
    pub(crate) flights: Arc<Flights>,
    pub(crate) bans: Bans,
    /// The purges made lately: a response to a request made before one that reaches its
    /// object is not stored ([`Cache::withdrawn_between`]).
    purge_log: PurgeLog,
    /// Fills held out of the store while they receive their body (bodies of unknown
    /// length), by primary key: what a `PURGE` of their URL keeps out of the store.
    tee_fills: std::sync::Mutex<std::collections::HashMap<Arc<[u8]>, u32>>,
    /// Bytes of fills' bodies the store does not charge ([`Cache::hold_filling`]).
    filling: AtomicUsize,
    pub(crate) metrics: CacheMetrics,
    pub(crate) compression: CompressionMetrics,
    settings: StoreSettings,
}

impl Cache {
    /// An empty cache sized by `settings`, recording into `metrics` and `compression`.
    pub fn new(
        settings: StoreSettings,
        metrics: CacheMetrics,
        compression: CompressionMetrics,
    ) -> Arc<Cache> {
        Arc::new(Cache {
            store: Store::new(settings.size, settings.max_object_size),
            flights: Flights::new(),
            bans: Bans::default(),
            purge_log: PurgeLog::default(),
            tee_fills: std::sync::Mutex::default(),
            filling: AtomicUsize::new(0),
            metrics,
            compression,
            settings,
        })
    }

    /// Purges made so far.
    pub(crate) fn purges(&self) -> u64 {
        self.purge_log.made()
    }

    /// Where the purges and bans stand now: a request's marks, taken as it leaves for
    /// the node, tell later which of them were made while it was out.
    pub(crate) fn marks(&self) -> Marks {
        Marks {
            purges: self.purges(),
            bans: self.bans.latest(),
        }
    }

    /// Whether a purge or ban made between marks `from` and `to` reaches an object of
    /// `primary` with `tags`: a response to a request that left before them may be what
    /// they were meant to remove (the node's content changed and the purge followed while
    /// the request was out), so it is not stored. `true` when it cannot be told (the
    /// purges or bans of that time are no longer remembered).
    pub(crate) fn withdrawn_between(
        &self,
        from: Marks,
        to: Marks,
        primary: &[u8],
        tags: &[Box<[u8]>],
    ) -> bool {
        self.purge_log
            .reaches(from.purges, to.purges, primary, tags)
            || self.bans.banned_between(primary, from.bans, to.bans) != Some(false)
    }

    /// Removes `object`, just stored after a check at `checked` found nothing withdrawn, when
    /// a purge or ban made since reaches it: one made between that check and the insert
    /// found nothing to remove.
    pub(crate) fn keep_out_if_withdrawn(&self, object: &Arc<Object>, checked: Marks) {
        if self.withdrawn_between(checked, self.marks(), object.primary_key(), &object.tags) {
            self.store.remove(object);
            self.record_store();
        }
    }

    /// Whether this cache can serve a configuration with `settings`
    /// unchanged (a reload then keeps it, contents and all).
    pub fn fits(&self, settings: StoreSettings) -> bool {
        self.settings == settings
    }

    /// The object store, for the admin API and benchmarks.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The store's size and evictions now.
    pub fn stats(&self) -> StoreStats {
        self.store.stats()
    }

    /// Purges every variant stored for an absolute URL; returns how many.
    pub fn purge_url(&self, url: &str) -> Result<usize, PurgeError> {
        let key = primary_key_of_url(url).ok_or_else(|| PurgeError::Url(url.to_owned()))?;
        self.purge_log
            .record(Purged::Key(key.clone().into_boxed_slice()));
        let removed = self.store.remove_primary(&key);
        self.record_store();
        Ok(removed)
    }

    /// Purges the variants stored for `request`'s URL (the `PURGE` method); returns how
    /// many, with the fills of the URL receiving their body out of the store, which the
    /// purge keeps out (a body of unknown length is stored only once complete, and a purge
    /// made meanwhile keeps it out, docs/design/cache.md). Requests for the URL still
    /// waiting for the node's head are kept out of the store too
    /// (`Cache::withdrawn_between`), but not counted: nothing of theirs had begun.
    pub fn purge_request(&self, request: &impl RequestView) -> usize {
        let mut key = Vec::new();
        if !primary_key(request, &mut key) {
            return 0;
        }
        self.purge_log
            .record(Purged::Key(key.clone().into_boxed_slice()));
        let removed = self.store.remove_primary(&key);
        self.record_store();
        let filling = self.lock_tee_fills().get(&key[..]).copied().unwrap_or(0);
        removed + filling as usize
    }

    fn lock_tee_fills(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<Arc<[u8]>, u32>> {
        // Counts change whole: a poisoned map is still consistent.
        self.tee_fills
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A fill of `primary` is held out of the store until its body is complete; counted
    /// until the returned guard drops.
    pub(crate) fn tee_fill(self: &Arc<Self>, primary: &Arc<[u8]>) -> TeeFill {
        *self
            .lock_tee_fills()
            .entry(Arc::clone(primary))
            .or_insert(0) += 1;
        TeeFill {
            cache: Arc::clone(self),
            primary: Arc::clone(primary),
        }
    }

    /// Purges every object whose URL starts with `prefix` (an absolute URL
    /// prefix such as `https://example.com/static/`); returns how many.
    pub fn purge_prefix(&self, prefix: &str) -> Result<usize, PurgeError> {
        let key = primary_key_of_url(prefix).ok_or_else(|| PurgeError::Url(prefix.to_owned()))?;
        // "http://h" normalises to "http://h/"; a prefix without a path matches the whole origin.
        let key = if !crate::key::split_scheme(prefix).is_some_and(|(_, rest)| rest.contains('/')) {
            key[..key.len() - 1].to_vec()
        } else {
            key
        };
        self.purge_log
            .record(Purged::Prefix(key.clone().into_boxed_slice()));
        let removed = self
            .store
            .remove_where(|object| object.primary_key().starts_with(&key));
        self.record_store();
        Ok(removed)
    }

    /// Purges every object tagged `tag` (`Surrogate-Key` or `Cache-Tag`); returns how many.
    pub fn purge_tag(&self, tag: &str) -> usize {
        self.purge_log.record(Purged::Tag(tag.as_bytes().into()));
        let removed = self.store.remove_tagged(tag.as_bytes());
        self.record_store();
        removed
    }

    /// Purges everything; returns how many objects.
    pub fn purge_all(&self) -> usize {
        self.purge_log.record(Purged::All);
        let removed = self.store.remove_where(|_| true);
        self.record_store();
        removed
    }

    /// Bans every object stored now whose primary key matches the regular
    /// expression `pattern`; returns the ban's sequence number.
    pub fn ban(&self, pattern: &str, now: UnixTime) -> Result<u64, PurgeError> {
        self.bans.add(pattern, now)
    }

    /// The bans in force, oldest first, for the admin API.
    pub fn bans(&self) -> Vec<BanInfo> {
        self.bans.list()
    }

    /// Background upkeep, every few seconds: tests stored objects against
    /// pending bans and drops the bans every object has been tested against,
    /// forgets expired pass markers, and refreshes the gauges. Returns the
    /// number of objects banned.
    pub fn maintain(&self) -> usize {
        let latest = self.bans.latest();
        let mut removed = 0;
        if !self.bans.list().is_empty() {
            removed = self
                .store
                .remove_where(|object| self.bans.is_banned(object));
            self.bans.expire_through(latest);
        }
        self.flights.tidy();
        self.record_store();
        removed
    }

    /// Takes `bytes` of the room for bodies being filled that the store does not charge:
    /// one of unknown length, held apart until complete, and the rest of one whose object
    /// left the store while it filled. All of them together hold at most `size`, as the
    /// store does; `false` (and nothing taken) past that: the fill stops storing.
    pub(crate) fn hold_filling(&self, bytes: usize) -> bool {
        let size = self.settings.size;
        let taken = self
            .filling
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_add(bytes).filter(|total| *total <= size)
            });
        // The gauge moves by the same steps as the count (setting it to a count read
        // earlier could leave a stale one last).
        if taken.is_ok() {
            self.metrics.bytes_filling.inc_by(bytes as i64);
        }
        taken.is_ok()
    }

    /// Gives back `bytes` taken with [`Cache::hold_filling`].
    pub(crate) fn release_filling(&self, bytes: usize) {
        if bytes > 0 {
            self.filling.fetch_sub(bytes, Ordering::AcqRel);
            self.metrics.bytes_filling.dec_by(bytes as i64);
        }
    }

    /// Refreshes the bytes and objects gauges.
    pub(crate) fn record_store(&self) {
        let stats = self.store.stats();
        self.metrics.bytes_stored.set(stats.bytes as i64);
        self.metrics.objects.set(stats.objects as i64);
    }
}

/// Where the purges and bans stood at one moment ([`Cache::marks`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Marks {
    purges: u64,
    bans: u64,
}

impl Marks {
    /// The ban sequence an object stored now starts from: bans after it are tested on it.
    pub(crate) fn bans(self) -> u64 {
        self.bans
    }

    /// The purges made by then.
    pub(crate) fn purges(self) -> u64 {
        self.purges
    }
}

/// A fill held out of the store while it receives its body ([`Cache::tee_fill`]).
#[derive(Debug)]
pub(crate) struct TeeFill {
    cache: Arc<Cache>,
    primary: Arc<[u8]>,
}

impl Drop for TeeFill {
    fn drop(&mut self) {
        let mut fills = self.cache.lock_tee_fills();
        if let Some(count) = fills.get_mut(&self.primary) {
            *count -= 1;
            if *count == 0 {
                fills.remove(&self.primary);
            }
        }
    }
}
