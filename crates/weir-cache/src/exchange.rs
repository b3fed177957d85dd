//! The second call: what to do with the node's response (`filter_response`).

use std::sync::Arc;

use crate::cache::{Cache, Marks};
use crate::compress::{Coding, CompressionPolicy, Compressor, HeadEdits};
use crate::date::UnixTime;
use crate::directives::{RequestDirectives, ResponseDirectives};
use crate::fill::{Fill, Pending};
use crate::flight::FlightGuard;
use crate::hit::{CacheStatus, Hit};
use crate::key::VarySpec;
use crate::object::{HeadBuilder, NewObject, Object, ObjectBody, StoredHead, response_tags};
use crate::policy::CachePolicy;
use crate::policy::conditional::{
    CLIENT_CONDITIONAL_FIELDS, Validators, may_update, merge_not_modified,
};
use crate::policy::freshness::{Freshness, Timing};
use crate::policy::invalidate::{invalidated_keys, is_safe};
use crate::policy::storable::{NotStorable, content_length, storable};
use crate::view::{RequestView, ResponseView};

/// `head`, with a `Date` of when it was received if the node sent none (RFC 9110 §6.6.1:
/// a cache with a clock that stores such an answer appends one), so hits carry it.
fn with_date(head: StoredHead, received: UnixTime) -> StoredHead {
    if head.header("date").is_some() {
        return head;
    }
    let mut builder = HeadBuilder::default();
    for (name, value) in head.headers() {
        builder.push(name, value);
    }
    builder.push(b"Date", crate::date::format_http_date(received).as_bytes());
    builder.finish(head.status())
}

/// `head` without its `Set-Cookie` lines.
fn without_set_cookie(head: &StoredHead) -> StoredHead {
    let mut builder = HeadBuilder::default();
    for (name, value) in head.headers() {
        if !name.eq_ignore_ascii_case(b"set-cookie") {
            builder.push(name, value);
        }
    }
    builder.finish(head.status())
}

/// The `Set-Cookie` fields of `response` as lines (`Name: value\r\n` each): what one
/// client is given after the stored fields ([`Hit::with_own_lines`]), never stored.
fn set_cookie_lines(response: &impl ResponseView) -> Box<[u8]> {
    let mut lines = Vec::new();
    for (name, value) in response
        .headers()
        .filter(|(name, _)| name.eq_ignore_ascii_case(b"set-cookie"))
    {
        for piece in [name, b": ", value, b"\r\n"] {
            lines.extend_from_slice(piece);
        }
    }
    lines.into_boxed_slice()
}

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
    /// Where purges and bans stood as the request left for the node: one made since that
    /// reaches the object keeps the response out of the store ([`Cache::withdrawn_between`]).
    pub(crate) marks: Marks,
}

#[derive(Debug)]
pub(crate) enum ExchangeKind {
    /// Not for the cache: forward (an unsafe method still invalidates).
    Pass,
    /// A miss: fetch the whole object and store it if allowed. `status`: `Miss`, or
    /// `Expired` for a stored object that could not be revalidated.
    Fill {
        guard: Option<FlightGuard>,
        status: CacheStatus,
    },
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
    /// The node's 304 is about another representation than the stored one (its strong
    /// validator is not the stored object's, RFC 9111 §4.3.4), so neither may answer:
    /// drop the 304, send the request again as this exchange says (without validators:
    /// [`Exchange::add_fields`] adds none), and hand its response back with it. Asked
    /// at most once per request: the new exchange fetches, it does not validate.
    Refetch(Exchange),
}

/// A response passed through, perhaps compressed.
#[derive(Debug)]
pub struct Forward {
    /// Changes to the response head when it is compressed (`Content-Encoding`, `Vary`, length).
    pub edits: Option<HeadEdits>,
    /// The compressor for the body; `None`: the body goes as it is.
    pub compressor: Option<Compressor>,
    /// What the cache did, for the status header and the metrics.
    pub status: CacheStatus,
}

impl Exchange {
    pub(crate) fn new(
        kind: ExchangeKind,
        request_time: UnixTime,
        directives: RequestDirectives,
        coding: Coding,
        marks: Marks,
    ) -> Exchange {
        Exchange {
            kind,
            request_time,
            directives,
            coding,
            key: None,
            validators: None,
            marks,
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
    /// A stored object whose body is still arriving is validated without them: the node
    /// answers the whole response, which replaces it (a 304 could not refresh an object its
    /// fill still writes).
    pub fn add_fields(&mut self) -> impl Iterator<Item = (&'static str, &[u8])> {
        if let ExchangeKind::Revalidate { stale, .. } = &self.kind
            && self.validators.is_none()
            && stale.body().is_some()
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
        let directives = ResponseDirectives::for_cache(response, &policy.targeted);
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
            ExchangeKind::Fill { guard, status } => {
                let fill = Fill::start(self, guard, status);
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
            ExchangeKind::Revalidate {
                stale,
                guard,
                background,
            } => {
                let status = response.status();
                if status == 304 && !may_update(&stale.head, response) {
                    // Not about the stored object: fetched whole, like one never stored
                    // (its answer counts as a miss when it is stored, as any fill's).
                    exchange.kind = ExchangeKind::Fill {
                        guard,
                        status: CacheStatus::Expired,
                    };
                    exchange.validators = None;
                    return Reply::Refetch(exchange);
                }
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
                    // Waiters serve the stale object too, rather than ask the node again.
                    if let Some(guard) = guard {
                        guard.node_failed();
                    }
                    // A background refresh answers no one: its client was served already.
                    if !background {
                        self.metrics.stale_served.inc();
                    }
                    return Reply::Hit(Hit::new(stale, request, now, CacheStatus::StaleIfError));
                }
                // The stored object could not be used: a miss, like one with nothing stored.
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

    /// The client of `exchange` left before the node's answer came: a flight it led goes
    /// on with one of its waiters leading (see [`crate::flight`]).
    pub fn abandoned(&self, exchange: Exchange) {
        match exchange.kind {
            ExchangeKind::Fill {
                guard: Some(guard), ..
            }
            | ExchangeKind::Revalidate {
                guard: Some(guard), ..
            } => guard.abandoned(),
            _ => {}
        }
    }

    /// The node could not be reached or did not answer: a stale object
    /// within `stale-if-error`, if there is one (else answer the error).
    /// Waiters on this exchange serve that stale object too where they may; without one
    /// they go to the node themselves.
    pub fn node_failed(
        &self,
        exchange: Exchange,
        request: &impl RequestView,
        now: UnixTime,
    ) -> Option<Hit> {
        let ExchangeKind::Revalidate {
            stale,
            guard,
            background,
        } = exchange.kind
        else {
            return None;
        };
        if !stale.freshness.usable_on_error(&exchange.directives, now) {
            return None;
        }
        // Waiters serve the stale object too, rather than each wait for the failing node.
        if let Some(guard) = guard {
            guard.node_failed();
        }
        // A background refresh answers no one: its client was served already.
        if !background {
            self.metrics.stale_served.inc();
        }
        Some(Hit::new(stale, request, now, CacheStatus::StaleIfError))
    }

    /// A 304 about the stored object ([`may_update`]): its head merged and its age reset
    /// (§4.3.4). The merged response is checked as a new one would be before it is stored
    /// again: a 304 that makes it `private` or `no-store`, sets a cookie under
    /// `set_cookie = "pass"` or changes its `Vary` takes the object out of the cache (this
    /// client is answered from it, once). A cookie the 304 sets goes to this client only,
    /// never into the store.
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
        // A body still arriving is served as it is, refreshed by the next revalidation.
        let Some(body) = stale.body() else {
            return Hit::new(Arc::clone(stale), request, now, CacheStatus::Revalidated);
        };
        let merged = merge_not_modified(&stale.head, not_modified);
        let directives = ResponseDirectives::for_cache(&merged, &policy.targeted);
        let timing = Timing::new(not_modified, exchange.request_time, now);
        let object = |head: StoredHead| NewObject {
            primary: Arc::clone(&stale.primary),
            secondary: stale.secondary.clone(),
            freshness: Freshness::new(policy, &head, &directives, timing),
            tags: stale.tags.clone(),
            body: ObjectBody::Complete(body.clone()),
            head,
            stored_at: now,
        };
        let same_vary = merged
            .header_values("vary")
            .eq(stale.head.header_values("vary"));
        // What the response now says, not how this request was made: a HEAD, or a
        // request's own no-store, leaves the stored object as it is.
        let keep = same_vary
            && match storable(policy, request, &exchange.directives, &merged, &directives) {
                Ok(_) | Err(NotStorable::Method | NotStorable::RequestNoStore) => true,
                Err(_) => false,
            };
        // A cookie goes to this client after the stored fields, whatever its answer (a
        // 200, or a 304 to its own conditional request, which carries only the fields
        // RFC 9110 §15.4.5 lists of the stored ones).
        let sets_cookie = not_modified.header("set-cookie").is_some();
        let answered = |answer: Arc<Object>| {
            let hit = Hit::new(answer, request, now, CacheStatus::Revalidated);
            match sets_cookie {
                true => hit.with_own_lines(set_cookie_lines(not_modified)),
                false => hit,
            }
        };
        let stored_head = match sets_cookie {
            true => without_set_cookie(&merged),
            false => merged,
        };
        // A purge or a ban made while the check was out may have been meant for the stored
        // object: it stays out (the next request fetches the whole response), and this
        // client, whose request came before, is answered from it alone.
        let marks = self.marks();
        let withdrawn = stale.is_removed() || self.bans.is_banned(stale);
        if !keep || withdrawn {
            self.store.remove(stale);
            self.record_store();
            return answered(self.store.detached(stale.hash, object(stored_head)));
        }
        let vary = Arc::clone(&stale.vary);
        let inserted = self
            .store
            .insert(stale.hash, vary, object(stored_head), marks.bans());
        self.metrics.evictions.inc_by(inserted.evicted);
        // A purge that came between the check above and the insert missed the new copy.
        if let Some(object) = &inserted.object {
            self.keep_out_if_withdrawn(object, marks);
        }
        self.record_store();
        answered(inserted.object.unwrap_or_else(|| Arc::clone(stale)))
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
        let coding = if exchange.directives.no_transform {
            Coding::Identity
        } else {
            exchange.coding
        };
        let passed =
            compression.and_then(|policy| policy.passed_on(request, response, directives, coding));
        let Some(passed) = passed else {
            return Forward {
                edits: None,
                compressor: None,
                status,
            };
        };
        let compressor = passed
            .body
            .then(|| self.compressor(coding, compression, content_length(response)))
            .flatten();
        Forward {
            edits: Some(passed.edits),
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
                // A miss is counted when its answer is stored: one that cannot be is a
                // pass (logged PASS), and one whose node failed is no answer at all.
                self.metrics.misses.inc();
                let eligible = compression.is_some_and(|c| c.eligible(response, directives));
                let coding = if eligible {
                    exchange.coding
                } else {
                    Coding::Identity
                };
                fill.edits = eligible.then_some(HeadEdits { coding });
                fill.compressor = self.compressor(coding, compression, content_length(response));
                fill.limit = policy.max_object_size;
                fill.pass_memory = Some(policy.pass_memory);
                let declared = content_length(response);
                fill.begin(pending, declared, exchange.marks, request, now);
                Reply::Fill(fill)
            }
            Err(reason) => {
                let remember = match reason {
                    // About this request only: others may well store it.
                    NotStorable::RequestNoStore | NotStorable::Method => None,
                    // Remembered for requests with `Authorization` alone: they have a
                    // flight of their own (`lookup::flight_key`).
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
        let head = with_date(head, now);
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
        let own_cookies = rules.strip_set_cookie.then(|| set_cookie_lines(response));
        Ok(Pending {
            hash,
            vary: Arc::new(vary),
            primary,
            secondary: secondary.into_boxed_slice(),
            tags: response_tags(response),
            head,
            freshness,
            stored_at: now,
            own_cookies: own_cookies.filter(|lines| !lines.is_empty()),
        })
    }
}
