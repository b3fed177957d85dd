//! The second call: what to do with the node's response (`filter_response`),
//! and the fill that streams a storable body into the store.

use std::io;
use std::sync::Arc;

use bytes::Bytes;

use crate::cache::Cache;
use crate::compress::{Coding, CompressionPolicy, Compressor, HeadEdits};
use crate::date::UnixTime;
use crate::directives::{RequestDirectives, ResponseDirectives};
use crate::flight::FlightGuard;
use crate::hit::{CacheStatus, Hit};
use crate::key::VarySpec;
use crate::object::{GrowingBody, NewObject, Object, ObjectBody, Rope, StoredHead, response_tags};
use crate::policy::CachePolicy;
use crate::policy::conditional::{
    CLIENT_CONDITIONAL_FIELDS, Validators, may_update, merge_not_modified,
};
use crate::policy::freshness::{Freshness, Timing};
use crate::policy::invalidate::{invalidated_keys, is_safe};
use crate::policy::storable::{NotStorable, content_length, storable};
use crate::view::{RequestView, ResponseView};

/// A request the cache sends on to the node; hand it back with the response.
#[derive(Debug)]
pub struct Exchange {
    pub(crate) kind: ExchangeKind,
    pub(crate) request_time: UnixTime,
    pub(crate) directives: RequestDirectives,
    /// The coding weir would use for this client.
    pub(crate) coding: Coding,
    /// (hash, primary key), once computed.
    pub(crate) key: Option<(u64, Arc<[u8]>)>,
    validators: Option<Validators>,
}

#[derive(Debug)]
pub(crate) enum ExchangeKind {
    /// Not for the cache: forward (an unsafe method still invalidates).
    Pass,
    /// A miss: fetch the whole object and store it if allowed.
    Fill { guard: Option<FlightGuard> },
    /// Validate a stored object; serve it on 304, or on failure within `stale-if-error`.
    Revalidate {
        stale: Arc<Object>,
        guard: Option<FlightGuard>,
        /// A stale-while-revalidate refresh: no client waits for it.
        background: bool,
    },
}

/// What the cache says at `filter_response`.
#[derive(Debug)]
pub enum Reply {
    /// Send this from the cache (a 304 from the node merged into the stored
    /// object, or a stale object because the node failed). Drain or drop the
    /// node's body (a 304 has none).
    Hit(Hit),
    /// Store the body: push each chunk from the node into the fill, then
    /// finish it. The client is answered by [`Fill::take_hit`] (reading the
    /// store as it fills), or, when that gives `None`, by the node's head
    /// edited with [`Fill::tee_edits`] and the bytes [`Fill::push`] returns.
    Fill(Fill),
    /// Send the node's response on; apply `edits` to its head and pass the
    /// body through `compressor` when given.
    Forward(Forward),
}

/// A response passed through, perhaps compressed.
#[derive(Debug)]
pub struct Forward {
    pub edits: Option<HeadEdits>,
    pub compressor: Option<Compressor>,
    pub status: CacheStatus,
}

/// A storable body on its way into the store.
#[derive(Debug)]
pub struct Fill {
    cache: Arc<Cache>,
    mode: FillMode,
    compressor: Option<Compressor>,
    /// Bytes of (possibly compressed) body so far.
    received: u64,
    /// Past this the body is not stored.
    limit: u64,
    guard: Option<FlightGuard>,
    edits: Option<HeadEdits>,
    status: CacheStatus,
}

#[derive(Debug)]
enum FillMode {
    /// In the store already; clients read the body as it grows.
    Growing {
        object: Arc<Object>,
        body: Arc<GrowingBody>,
        hit: Option<Hit>,
    },
    /// Stored once complete; the client gets the bytes as they pass.
    Tee {
        pending: Box<Pending>,
        chunks: Vec<Bytes>,
    },
    /// Storing was given up; bytes still pass for the client.
    Abandoned,
}

/// An object waiting for its body.
#[derive(Debug)]
struct Pending {
    hash: u64,
    vary: Arc<VarySpec>,
    primary: Arc<[u8]>,
    secondary: Box<[u8]>,
    head: StoredHead,
    freshness: Freshness,
    tags: Box<[Box<[u8]>]>,
    stored_at: UnixTime,
}

impl Exchange {
    pub(crate) fn new(
        kind: ExchangeKind,
        request_time: UnixTime,
        directives: RequestDirectives,
        coding: Coding,
    ) -> Exchange {
        Exchange {
            kind,
            request_time,
            directives,
            coding,
            key: None,
            validators: None,
        }
    }

    /// Request fields to remove before forwarding: the client's conditionals
    /// and `Range` when weir fills or validates (it needs a whole object and
    /// sends its own validators); none otherwise.
    pub fn remove_fields(&self) -> &'static [&'static str] {
        match self.kind {
            ExchangeKind::Pass => &[],
            ExchangeKind::Fill { .. } | ExchangeKind::Revalidate { .. } => {
                CLIENT_CONDITIONAL_FIELDS
            }
        }
    }

    /// Request fields to add: the stored object's validators when revalidating.
    pub fn add_fields(&mut self) -> impl Iterator<Item = (&'static str, &[u8])> {
        if let ExchangeKind::Revalidate { stale, .. } = &self.kind
            && self.validators.is_none()
        {
            self.validators = Some(Validators::of(&stale.head));
        }
        self.validators.iter().flat_map(Validators::fields)
    }

    /// A background refresh (stale-while-revalidate): nobody waits on it.
    pub fn is_background(&self) -> bool {
        matches!(
            self.kind,
            ExchangeKind::Revalidate {
                background: true,
                ..
            }
        )
    }

    /// Whether the cache may store the response (else it only passes).
    pub fn is_cacheable(&self) -> bool {
        !matches!(self.kind, ExchangeKind::Pass)
    }
}

impl Cache {
    /// `filter_response`: what to do with the node's response to a
    /// forwarded exchange (after the response head, before respond).
    pub fn response(
        self: &Arc<Self>,
        exchange: Exchange,
        policy: &CachePolicy,
        compression: Option<&CompressionPolicy>,
        request: &impl RequestView,
        response: &impl ResponseView,
        now: UnixTime,
    ) -> Reply {
        if !is_safe(request.method()) {
            for key in invalidated_keys(request, response) {
                self.store.remove_primary(&key);
            }
            self.record_store();
        }
        let directives = ResponseDirectives::parse(response);
        let mut exchange = exchange;
        let kind = std::mem::replace(&mut exchange.kind, ExchangeKind::Pass);
        match kind {
            ExchangeKind::Pass => Reply::Forward(self.forward(
                &exchange,
                compression,
                request,
                response,
                &directives,
                CacheStatus::Pass,
            )),
            ExchangeKind::Fill { guard } => {
                let fill = Fill::start(self, guard, CacheStatus::Miss);
                self.fill(
                    fill,
                    &exchange,
                    policy,
                    compression,
                    request,
                    response,
                    &directives,
                    now,
                )
            }
            ExchangeKind::Revalidate { stale, guard, .. } => {
                let status = response.status();
                if status == 304 {
                    if let Some(guard) = guard {
                        guard.stored();
                    }
                    return Reply::Hit(
                        self.revalidated(&stale, &exchange, policy, request, response, now),
                    );
                }
                if matches!(status, 500 | 502 | 503 | 504)
                    && stale.freshness.usable_on_error(&exchange.directives, now)
                {
                    self.metrics.stale_served.inc();
                    return Reply::Hit(Hit::new(stale, request, now, CacheStatus::StaleIfError));
                }
                let fill = Fill::start(self, guard, CacheStatus::Expired);
                self.fill(
                    fill,
                    &exchange,
                    policy,
                    compression,
                    request,
                    response,
                    &directives,
                    now,
                )
            }
        }
    }

    /// The node could not be reached or did not answer: a stale object
    /// within `stale-if-error`, if there is one (else answer the error).
    /// Waiters on this exchange go to the node themselves.
    pub fn node_failed(
        &self,
        exchange: Exchange,
        request: &impl RequestView,
        now: UnixTime,
    ) -> Option<Hit> {
        let ExchangeKind::Revalidate { stale, .. } = exchange.kind else {
            return None;
        };
        if !stale.freshness.usable_on_error(&exchange.directives, now) {
            return None;
        }
        self.metrics.stale_served.inc();
        Some(Hit::new(stale, request, now, CacheStatus::StaleIfError))
    }

    /// A 304: the stored object's head merged and its age reset (§4.3.4).
    fn revalidated(
        self: &Arc<Self>,
        stale: &Arc<Object>,
        exchange: &Exchange,
        policy: &CachePolicy,
        request: &impl RequestView,
        not_modified: &impl ResponseView,
        now: UnixTime,
    ) -> Hit {
        self.metrics.revalidated.inc();
        let (Some(body), true) = (stale.body(), may_update(&stale.head, not_modified)) else {
            return Hit::new(Arc::clone(stale), request, now, CacheStatus::Revalidated);
        };
        let head = merge_not_modified(&stale.head, not_modified);
        let directives = ResponseDirectives::parse(&head);
        let timing = Timing::new(not_modified, exchange.request_time, now);
        let new = NewObject {
            primary: Arc::clone(&stale.primary),
            secondary: stale.secondary.clone(),
            freshness: Freshness::new(policy, &head, &directives, timing),
            tags: stale.tags.clone(),
            body: ObjectBody::Complete(body.clone()),
            head,
            stored_at: now,
        };
        let vary = self
            .store
            .vary_spec(stale.hash, &stale.primary)
            .unwrap_or_else(VarySpec::none);
        let inserted = self.store.insert(stale.hash, vary, new, self.bans.latest());
        self.metrics.evictions.inc_by(inserted.evicted);
        self.record_store();
        let object = inserted.object.unwrap_or_else(|| Arc::clone(stale));
        Hit::new(object, request, now, CacheStatus::Revalidated)
    }

    /// A response passed on, compressed when eligible.
    fn forward(
        &self,
        exchange: &Exchange,
        compression: Option<&CompressionPolicy>,
        request: &impl RequestView,
        response: &impl ResponseView,
        directives: &ResponseDirectives,
        status: CacheStatus,
    ) -> Forward {
        let eligible = compression.is_some_and(|policy| policy.eligible(response, directives));
        if !eligible {
            return Forward {
                edits: None,
                compressor: None,
                status,
            };
        }
        let coding = if exchange.directives.no_transform {
            Coding::Identity
        } else {
            exchange.coding
        };
        let compressor = if request.method() == b"HEAD" {
            None
        } else {
            self.compressor(coding, compression, content_length(response))
        };
        Forward {
            edits: Some(HeadEdits { coding }),
            compressor,
            status,
        }
    }

    fn compressor(
        &self,
        coding: Coding,
        compression: Option<&CompressionPolicy>,
        size: Option<u64>,
    ) -> Option<Compressor> {
        let levels = compression?.levels;
        // Building an encoder only fails when zstd cannot allocate its context.
        Compressor::new(coding, levels, size, self.compression.of(coding.label()))
            .ok()
            .flatten()
    }

    /// A response to a fill: stored when allowed, else forwarded.
    #[allow(clippy::too_many_arguments)]
    fn fill(
        self: &Arc<Self>,
        mut fill: Fill,
        exchange: &Exchange,
        policy: &CachePolicy,
        compression: Option<&CompressionPolicy>,
        request: &impl RequestView,
        response: &impl ResponseView,
        directives: &ResponseDirectives,
        now: UnixTime,
    ) -> Reply {
        match self.admit(
            exchange,
            policy,
            compression,
            request,
            response,
            directives,
            now,
        ) {
            Ok(pending) => {
                let eligible = compression.is_some_and(|c| c.eligible(response, directives));
                let coding = if eligible {
                    exchange.coding
                } else {
                    Coding::Identity
                };
                fill.edits = eligible.then_some(HeadEdits { coding });
                fill.compressor = self.compressor(coding, compression, content_length(response));
                fill.limit = policy.max_object_size;
                let declared = content_length(response);
                fill.begin(pending, declared, request, now);
                Reply::Fill(fill)
            }
            Err(reason) => {
                let remember = match reason {
                    // About this request only: others may well store it.
                    NotStorable::RequestNoStore
                    | NotStorable::Authorization
                    | NotStorable::Method => None,
                    _ => Some(policy.pass_memory),
                };
                if let Some(guard) = fill.guard.take() {
                    guard.not_stored(remember);
                }
                Reply::Forward(self.forward(
                    exchange,
                    compression,
                    request,
                    response,
                    directives,
                    CacheStatus::Pass,
                ))
            }
        }
    }

    /// Decides whether the response is stored and prepares its object.
    #[allow(clippy::too_many_arguments)]
    fn admit(
        &self,
        exchange: &Exchange,
        policy: &CachePolicy,
        compression: Option<&CompressionPolicy>,
        request: &impl RequestView,
        response: &impl ResponseView,
        directives: &ResponseDirectives,
        now: UnixTime,
    ) -> Result<Pending, NotStorable> {
        let rules = storable(policy, request, &exchange.directives, response, directives)?;
        let Some((hash, primary)) = exchange.key.clone() else {
            return Err(NotStorable::Method);
        };
        let eligible = compression.is_some_and(|c| c.eligible(response, directives));
        let vary = VarySpec::from_values(response.header_values("vary"), eligible)
            .map_err(|_| NotStorable::VaryStar)?;
        let mut secondary = Vec::new();
        vary.secondary_key(request, exchange.coding, &mut secondary);
        let coding = if eligible {
            exchange.coding
        } else {
            Coding::Identity
        };
        let drop_cookie =
            |name: &[u8]| rules.strip_set_cookie && name.eq_ignore_ascii_case(b"set-cookie");
        let head = if eligible {
            StoredHead::from_fields(response, HeadEdits { coding }.apply(response), drop_cookie)
        } else {
            StoredHead::from_response(response, drop_cookie)
        };
        let timing = Timing::new(response, exchange.request_time, now);
        let freshness = Freshness::new(policy, response, directives, timing);
        let reusable = freshness.lifetime > 0
            || freshness.stale_if_error > 0
            || freshness.stale_while_revalidate > 0
            || head.header("etag").is_some()
            || head.header("last-modified").is_some();
        if !reusable {
            return Err(NotStorable::NotReusable);
        }
        Ok(Pending {
            hash,
            vary: Arc::new(vary),
            primary,
            secondary: secondary.into_boxed_slice(),
            tags: response_tags(response),
            head,
            freshness,
            stored_at: now,
        })
    }
}

impl Fill {
    fn start(cache: &Arc<Cache>, guard: Option<FlightGuard>, status: CacheStatus) -> Fill {
        Fill {
            cache: Arc::clone(cache),
            mode: FillMode::Abandoned,
            compressor: None,
            received: 0,
            limit: 0,
            guard,
            edits: None,
            status,
        }
    }

    /// Puts the object in the store at once when its size is bounded in
    /// advance (a declared length; compressed, its input's), else holds it
    /// until the body is complete.
    fn begin(
        &mut self,
        pending: Pending,
        declared: Option<u64>,
        request: &impl RequestView,
        now: UnixTime,
    ) {
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
            self.mode = FillMode::Tee {
                pending: Box::new(pending),
                chunks: Vec::new(),
            };
            return;
        };
        self.limit = reserve;
        let body = GrowingBody::new();
        let cache = Arc::clone(&self.cache);
        let new = NewObject {
            primary: pending.primary,
            secondary: pending.secondary,
            head: pending.head,
            freshness: pending.freshness,
            body: ObjectBody::Growing(Arc::clone(&body), reserve),
            tags: pending.tags,
            stored_at: pending.stored_at,
        };
        let inserted = cache
            .store
            .insert(pending.hash, pending.vary, new, cache.bans.latest());
        cache.metrics.evictions.inc_by(inserted.evicted);
        cache.record_store();
        let Some(object) = inserted.object else {
            // Larger than a shard may hold: pass it through.
            self.mode = FillMode::Abandoned;
            return;
        };
        if let Some(guard) = self.guard.take() {
            guard.stored();
        }
        let hit = Hit::new(Arc::clone(&object), request, now, self.status);
        self.mode = FillMode::Growing {
            object,
            body,
            hit: Some(hit),
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

    /// When the client gets the node's response as it passes: the edits to
    /// its head (compression), if any.
    pub fn tee_edits(&self) -> Option<HeadEdits> {
        self.edits
    }

    pub fn cache_status(&self) -> CacheStatus {
        self.status
    }

    /// Takes the next chunk of the node's body; returns the bytes for the
    /// client when it is not reading from the store (compressed if the
    /// response is). Never waits for any client.
    pub fn push(&mut self, chunk: Bytes) -> io::Result<Bytes> {
        let out = match &mut self.compressor {
            Some(compressor) => compressor.push(&chunk)?,
            None => chunk,
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
            FillMode::Tee { pending, chunks } => {
                let new = NewObject {
                    primary: pending.primary,
                    secondary: pending.secondary,
                    head: pending.head,
                    freshness: pending.freshness,
                    body: ObjectBody::Complete(Rope::new(chunks)),
                    tags: pending.tags,
                    stored_at: pending.stored_at,
                };
                let inserted =
                    cache
                        .store
                        .insert(pending.hash, pending.vary, new, cache.bans.latest());
                cache.metrics.evictions.inc_by(inserted.evicted);
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
        self.give_up();
    }

    fn store_chunk(&mut self, out: &Bytes) {
        if out.is_empty() {
            return;
        }
        self.received += out.len() as u64;
        if self.received > self.limit {
            self.give_up();
            return;
        }
        match &mut self.mode {
            FillMode::Growing { body, .. } => body.push(out.clone()),
            FillMode::Tee { chunks, .. } => chunks.push(out.clone()),
            FillMode::Abandoned => {}
        }
    }

    fn give_up(&mut self) {
        match std::mem::replace(&mut self.mode, FillMode::Abandoned) {
            FillMode::Growing { object, body, .. } => {
                body.abort();
                self.cache.store.remove(&object);
                self.cache.record_store();
            }
            FillMode::Tee { .. } | FillMode::Abandoned => {}
        }
        if let Some(guard) = self.guard.take() {
            guard.not_stored(None);
        }
    }
}

impl Drop for Fill {
    fn drop(&mut self) {
        self.give_up();
    }
}
