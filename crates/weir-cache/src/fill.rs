//! A storable body on its way into the store: put there at once when its
//! size is bounded in advance (clients read it as it grows), or once
//! complete when it is not (the client gets the bytes as they pass).

use std::io;
use std::sync::Arc;

use bytes::Bytes;

use crate::cache::{Cache, Marks, TeeFill};
use crate::compress::{Compressor, HeadEdits};
use crate::date::UnixTime;
use crate::flight::FlightGuard;
use crate::hit::{CacheStatus, Hit};
use crate::key::VarySpec;
use crate::object::{Follower, GrowingBody, NewObject, Object, ObjectBody, Rope, StoredHead};
use crate::policy::freshness::Freshness;
use crate::view::RequestView;

/// A storable body on its way into the store.
#[derive(Debug)]
pub struct Fill {
    pub(crate) cache: Arc<Cache>,
    mode: FillMode,
    pub(crate) compressor: Option<Compressor>,
    /// Bytes of (possibly compressed) body so far.
    pub(crate) received: u64,
    /// Past this the body is not stored.
    pub(crate) limit: u64,
    /// How long a key whose body went past `limit` is remembered as a pass, as one whose
    /// declared length did (`CachePolicy::pass_memory`).
    pub(crate) pass_memory: Option<std::time::Duration>,
    pub(crate) guard: Option<FlightGuard>,
    pub(crate) edits: Option<HeadEdits>,
    pub(crate) status: CacheStatus,
    /// The body's bytes (`received`, all of them) are held where the store does not charge
    /// them, taken from the cache's room for those ([`Cache::hold_filling`]) and given
    /// back when the fill ends.
    held_apart: bool,
}

#[derive(Debug)]
enum FillMode {
    /// In the store already; clients read the body as it grows.
    Growing {
        object: Arc<Object>,
        body: Arc<GrowingBody>,
        hit: Option<Hit>,
        /// The stored objects this one took the place of: put back if it fails.
        replaced: Vec<Arc<Object>>,
        /// The cache's purge count when it took their place: after a purge (by tag, say,
        /// which may have been meant for them), they are not put back.
        purges: u64,
    },
    /// Stored once complete; the client gets the bytes as they pass.
    Tee {
        pending: Box<Pending>,
        chunks: Vec<Bytes>,
        /// Where purges and bans stood when the head came: one made since that reaches
        /// the object keeps it out.
        marks: Marks,
        /// Counted among the cache's fills of the URL while this one lasts (a `PURGE` of
        /// it says it reached one).
        _counted: TeeFill,
    },
    /// Storing was given up; bytes still pass for the client.
    Abandoned,
}

/// An object waiting for its body.
#[derive(Debug)]
pub(crate) struct Pending {
    pub(crate) hash: u64,
    pub(crate) vary: Arc<VarySpec>,
    pub(crate) primary: Arc<[u8]>,
    pub(crate) secondary: Box<[u8]>,
    pub(crate) head: StoredHead,
    pub(crate) freshness: Freshness,
    pub(crate) tags: Box<[Box<[u8]>]>,
    pub(crate) stored_at: UnixTime,
    /// `Set-Cookie` lines left out of the stored head (`set_cookie = "strip"`): the
    /// client whose request filled the object still gets them.
    pub(crate) own_cookies: Option<Box<[u8]>>,
}

impl Fill {
    pub(crate) fn start(
        cache: &Arc<Cache>,
        guard: Option<FlightGuard>,
        status: CacheStatus,
    ) -> Fill {
        Fill {
            cache: Arc::clone(cache),
            mode: FillMode::Abandoned,
            compressor: None,
            received: 0,
            limit: 0,
            pass_memory: None,
            guard,
            edits: None,
            status,
            held_apart: false,
        }
    }

    /// Puts the object in the store at once when its size is bounded in
    /// advance (a declared length; compressed, its input's), else holds it
    /// until the body is complete. Neither when a purge or ban made since the request
    /// left (`sent`: where they stood then) reaches it: the body then only passes.
    pub(crate) fn begin(
        &mut self,
        pending: Pending,
        declared: Option<u64>,
        sent: Marks,
        request: &impl RequestView,
        now: UnixTime,
    ) {
        let marks = self.cache.marks();
        if self
            .cache
            .withdrawn_between(sent, marks, &pending.primary, &pending.tags)
        {
            if let Some(guard) = self.guard.take() {
                guard.not_stored(None);
            }
            return;
        }
        let compressed = self.compressor.is_some();
        let reserve = declared.map(|length| {
            if compressed {
                // Worst-case expansion of the encoders is far below this.
                length + length / 64 + 1024
            } else {
                length
            }
        });
        let Some(reserve) =
            reserve.filter(|reserve| *reserve <= self.limit + self.limit / 64 + 1024)
        else {
            let counted = self.cache.tee_fill(&pending.primary);
            self.mode = FillMode::Tee {
                pending: Box::new(pending),
                chunks: Vec::new(),
                marks,
                _counted: counted,
            };
            return;
        };
        self.limit = reserve;
        let own_cookies = pending.own_cookies;
        let body = GrowingBody::new();
        let cache = Arc::clone(&self.cache);
        let new = NewObject {
            primary: pending.primary,
            secondary: pending.secondary,
            head: pending.head,
            freshness: pending.freshness,
            // Compressed on its way, the body's length is known only at its end.
            body: ObjectBody::Growing(Arc::clone(&body), reserve, declared.filter(|_| !compressed)),
            tags: pending.tags,
            stored_at: pending.stored_at,
        };
        let inserted = cache
            .store
            .insert(pending.hash, pending.vary, new, marks.bans());
        cache.metrics.evictions.inc_by(inserted.evicted);
        cache.record_store();
        let Some(object) = inserted.object else {
            // Larger than a shard may hold: pass it through.
            self.mode = FillMode::Abandoned;
            return;
        };
        cache.keep_out_if_withdrawn(&object, marks);
        let purges = marks.purges();
        if let Some(guard) = self.guard.take() {
            guard.stored();
        }
        let mut hit = Hit::new(Arc::clone(&object), request, now, self.status);
        if let Some(lines) = own_cookies {
            hit = hit.with_own_lines(lines);
        }
        self.mode = FillMode::Growing {
            object,
            body,
            hit: Some(hit),
            replaced: inserted.replaced,
            purges,
        };
    }

    /// The client's answer, read from the store as it fills; `None` when
    /// the client gets the node's bytes as they pass (see [`Fill::tee_edits`]).
    pub fn take_hit(&mut self) -> Option<Hit> {
        match &mut self.mode {
            FillMode::Growing { hit, .. } => hit.take(),
            FillMode::Tee { .. } | FillMode::Abandoned => None,
        }
    }

    /// A body stored once complete (its length unknown in advance): the client's answer
    /// when its preconditions settle it from the head alone, 304 for an `If-None-Match` or
    /// `If-Modified-Since` that matches, 412 for an `If-Match` or `If-Unmodified-Since`
    /// that fails. The cache took them off the request to fetch the whole response, so it
    /// answers them, as it does from a stored object; the body still goes into the fill.
    /// `None` when the client is to get the response itself.
    pub fn conditional_hit(&self, request: &impl RequestView, now: UnixTime) -> Option<Hit> {
        let FillMode::Tee { pending, .. } = &self.mode else {
            return None;
        };
        if !request.may_be_conditional() {
            return None;
        }
        let head_only = self.cache.store.detached(
            pending.hash,
            NewObject {
                primary: Arc::clone(&pending.primary),
                secondary: Box::new([]),
                head: pending.head.clone(),
                freshness: pending.freshness,
                body: ObjectBody::Complete(Rope::default()),
                tags: Box::new([]),
                stored_at: pending.stored_at,
            },
        );
        let hit = Hit::new(head_only, request, now, self.status);
        matches!(hit.status(), 304 | 412).then_some(hit)
    }

    /// When the client gets the node's response as it passes: the edits to
    /// its head (compression), if any.
    pub fn tee_edits(&self) -> Option<HeadEdits> {
        self.edits
    }

    /// What the cache did, for the status header and the metrics.
    pub fn cache_status(&self) -> CacheStatus {
        self.status
    }

    /// Takes the next chunk of the node's body; returns the bytes for the
    /// client when it is not reading from the store (compressed if the
    /// response is). Never waits for any client.
    pub fn push(&mut self, chunk: Bytes) -> io::Result<Bytes> {
        let storing = self.is_storing();
        let out = match &mut self.compressor {
            Some(compressor) => compressor.push(&chunk)?,
            // A chunk cut from a network read buffer would pin the whole buffer in the
            // store while being charged its own length: stored bytes get their own allocation.
            None if storing => Bytes::copy_from_slice(&chunk),
            None => chunk,
        };
        self.store_chunk(&out);
        Ok(out)
    }

    /// Whether the body is compressed on its way (the encoder may hold input back).
    pub fn compresses(&self) -> bool {
        self.compressor.is_some()
    }

    /// Whether the fill compresses at a slow level ([`Compressor::is_slow`]).
    pub fn compresses_slowly(&self) -> bool {
        self.compressor.as_ref().is_some_and(Compressor::is_slow)
    }

    /// Stores and returns what the encoder holds (a sync flush, for a body the node
    /// sends with pauses); nothing without an encoder.
    pub fn flush(&mut self) -> io::Result<Bytes> {
        let out = match &mut self.compressor {
            Some(compressor) => compressor.flush()?,
            None => return Ok(Bytes::new()),
        };
        self.store_chunk(&out);
        Ok(out)
    }

    /// The body is complete: stores it; returns the last bytes for the client.
    pub fn finish(mut self) -> io::Result<Bytes> {
        let tail = match self.compressor.take() {
            Some(compressor) => compressor.finish()?,
            None => Bytes::new(),
        };
        self.store_chunk(&tail);
        let cache = Arc::clone(&self.cache);
        match std::mem::replace(&mut self.mode, FillMode::Abandoned) {
            FillMode::Growing { object, body, .. } => {
                let rope = body.complete();
                cache.store.complete(&object, rope);
            }
            FillMode::Tee {
                pending,
                chunks,
                marks,
                ..
            } => {
                // Out of the store while it filled, the object was out of a purge's reach:
                // one made meanwhile may have been meant for it. Bans added meanwhile are
                // tested on it here, as the background check may have dropped them before
                // its first lookup would; when it has, the object is not stored.
                let latest = cache.marks();
                if cache.withdrawn_between(marks, latest, &pending.primary, &pending.tags) {
                    if let Some(guard) = self.guard.take() {
                        guard.not_stored(None);
                    }
                    cache.record_store();
                    return Ok(tail);
                }
                let new = NewObject {
                    primary: pending.primary,
                    secondary: pending.secondary,
                    head: pending.head,
                    freshness: pending.freshness,
                    body: ObjectBody::Complete(Rope::new(chunks)),
                    tags: pending.tags,
                    stored_at: pending.stored_at,
                };
                let inserted = cache
                    .store
                    .insert(pending.hash, pending.vary, new, latest.bans());
                cache.metrics.evictions.inc_by(inserted.evicted);
                if let Some(object) = &inserted.object {
                    cache.keep_out_if_withdrawn(object, latest);
                }
                if let (Some(guard), Some(_)) = (self.guard.take(), inserted.object) {
                    guard.stored();
                }
            }
            FillMode::Abandoned => {}
        }
        cache.record_store();
        Ok(tail)
    }

    /// The node failed mid-body: nothing is stored; readers of the growing
    /// body get an error, waiters go to the node. (Dropping a fill unfinished does the same.)
    pub fn abort(mut self) {
        self.give_up(None);
    }

    /// The client of the request that fills a body read from the store, as one who follows
    /// it from now until it is done with its answer (its reader comes a moment later): a
    /// fill whose object leaves the store goes on while someone follows it.
    pub fn follower(&self) -> Option<Follower> {
        match &self.mode {
            FillMode::Growing { body, .. } => Some(body.follower()),
            FillMode::Tee { .. } | FillMode::Abandoned => None,
        }
    }

    /// What to wait on beside the node, for a body read from the store: its object leaving
    /// the store, or its last follower leaving ([`Fill::settle`] then). `None` otherwise.
    pub fn orphan_watch(&self) -> Option<OrphanWatch> {
        match &self.mode {
            FillMode::Growing { body, .. } => Some(OrphanWatch(Arc::clone(body))),
            FillMode::Tee { .. } | FillMode::Abandoned => None,
        }
    }

    /// Takes in what happened while the fill waited for the node. Once its object has left
    /// the store (evicted, purged), what it has received is held apart from the store
    /// (`Cache::hold_filling`; past the room it stops storing), and once no one follows
    /// it either, it stops: the rest of the body would be read for no one.
    pub fn settle(&mut self) {
        let FillMode::Growing { object, body, .. } = &self.mode else {
            return;
        };
        if !object.is_removed() {
            return;
        }
        let stop = match self.held_apart {
            true => !body.is_followed(),
            false => !self.hold_apart(0),
        };
        if stop {
            self.give_up(None);
        }
    }

    /// Whether pushed bytes still go to the store.
    pub fn is_storing(&self) -> bool {
        !matches!(self.mode, FillMode::Abandoned)
    }

    fn store_chunk(&mut self, out: &Bytes) {
        if out.is_empty() {
            return;
        }
        let bytes = out.len() as u64;
        if self.received + bytes > self.limit {
            // Too large, as a length declared past the limit is: the next requests for
            // the key pass (their ranges and conditionals go to the node) instead of each
            // fetching the whole body again to find that out.
            let remember = self.pass_memory;
            self.give_up(remember);
            return;
        }
        if !self.hold_apart(bytes) {
            self.give_up(None);
            return;
        }
        self.received += bytes;
        match &mut self.mode {
            FillMode::Growing { body, .. } => body.push(out.clone()),
            FillMode::Tee { chunks, .. } => chunks.push(out.clone()),
            FillMode::Abandoned => {}
        }
    }

    /// Counts the next `bytes` of the body against the cache's room for bodies the store
    /// does not charge, when it does not: those of a body held apart until complete, and
    /// of one whose object left the store (evicted, purged) while it filled, from then on
    /// (what it had received moves there too). `false` when the fill is to stop storing:
    /// there is no more room, or its object left the store and no client reads it (one
    /// that did has gone: the rest would be read from the node for no one).
    fn hold_apart(&mut self, bytes: u64) -> bool {
        let taken = match &self.mode {
            FillMode::Tee { .. } => bytes,
            FillMode::Growing { object, body, .. } if object.is_removed() => {
                if !body.is_followed() {
                    return false;
                }
                match self.held_apart {
                    true => bytes,
                    // Its bytes so far were charged to the store until it left.
                    false => self.received + bytes,
                }
            }
            FillMode::Growing { .. } | FillMode::Abandoned => return true,
        };
        if !self
            .cache
            .hold_filling(usize::try_from(taken).unwrap_or(usize::MAX))
        {
            return false;
        }
        self.held_apart = true;
        true
    }

    fn give_up(&mut self, remember: Option<std::time::Duration>) {
        match std::mem::replace(&mut self.mode, FillMode::Abandoned) {
            FillMode::Growing {
                object,
                body,
                replaced,
                purges,
                ..
            } => {
                body.abort();
                if self.cache.store.remove(&object) && self.cache.purges() == purges {
                    // A refresh that broke off leaves the copy it was to replace, unless
                    // a purge came meanwhile (by tag, it may have been meant for it).
                    let evicted = self.cache.store.reinstate(replaced);
                    self.cache.metrics.evictions.inc_by(evicted);
                }
                self.cache.record_store();
            }
            FillMode::Tee { .. } | FillMode::Abandoned => {}
        }
        if std::mem::take(&mut self.held_apart) {
            let held = usize::try_from(self.received).unwrap_or(usize::MAX);
            self.cache.release_filling(held);
        }
        if let Some(guard) = self.guard.take() {
            guard.not_stored(remember);
        }
    }
}

/// A wait for a change to a fill that reads a body into the store ([`Fill::orphan_watch`]).
#[derive(Debug)]
pub struct OrphanWatch(Arc<GrowingBody>);

impl OrphanWatch {
    /// Ready at the next change: the object left the store, or its last follower left.
    /// Changes from the moment it is called on count, before it is first polled too.
    pub fn changed(&self) -> tokio::sync::futures::Notified<'_> {
        self.0.orphaning().notified()
    }
}

impl Drop for Fill {
    fn drop(&mut self) {
        self.give_up(None);
    }
}
