//! The `cache_lookup` stage's side of the cache: what a request finds in the
//! store — a hit, a stale hit, a flight to wait for, or an exchange to send
//! to the node — and the coalescing of concurrent misses.

use std::sync::Arc;

use crate::cache::{Cache, Marks};
use crate::compress::{AcceptEncoding, Coding, CompressionPolicy};
use crate::date::UnixTime;
use crate::directives::RequestDirectives;
use crate::exchange::{Exchange, ExchangeKind};
use crate::flight::{FlightGuard, Join, WaitOutcome, Waiter};
use crate::hit::{CacheStatus, Hit};
use crate::key::primary_key;
use crate::object::Object;
use crate::policy::CachePolicy;
use crate::policy::freshness::Usability;
use crate::store::Found;
use crate::view::{RequestView, Scanned};

/// What the cache says at `cache_lookup`.
#[derive(Debug)]
pub enum Lookup {
    /// Answer from the cache; the node is not asked.
    Hit(Hit),
    /// Answer from the cache with a stale object; when `refresh` is given,
    /// send it to the node in the background (stale-while-revalidate) and
    /// hand its response to [`Cache::response`] like any other.
    Stale {
        /// The stale object to answer with.
        hit: Hit,
        /// The background refresh to send, if one is due.
        refresh: Option<Exchange>,
    },
    /// Ask the node: apply the exchange's request edits, forward, and hand
    /// the response (or the failure) back with the exchange.
    Forward(Exchange),
    /// Another request is fetching this object: wait, then look up again
    /// ([`Cache::lookup_coalesced`] does both).
    Wait(Waiter),
    /// `only-if-cached` and nothing usable is stored: answer 504.
    OnlyIfCachedMiss,
}

/// What an exchange with the node would start from. It is made into one only
/// on the paths that go to the node: a fresh hit never builds (and moves) one.
#[derive(Debug, Clone, Copy)]
struct Asked {
    now: UnixTime,
    directives: RequestDirectives,
    coding: Coding,
}

impl Asked {
    /// The exchange to send; one that may store its response marks where purges and bans
    /// stand as it leaves.
    fn exchange(self, kind: ExchangeKind, cache: &Cache) -> Exchange {
        let marks = match kind {
            ExchangeKind::Pass => Marks::default(),
            ExchangeKind::Fill { .. } | ExchangeKind::Revalidate { .. } => cache.marks(),
        };
        Exchange::new(kind, self.now, self.directives, self.coding, marks)
    }
}

/// Scratch space for keys, reused across lookups on one thread.
#[derive(Debug, Default)]
struct Keys {
    hash: u64,
    primary: Vec<u8>,
    secondary: Vec<u8>,
}

thread_local! {
    static KEYS: std::cell::RefCell<Keys> = std::cell::RefCell::new(Keys::default());
}

impl Cache {
    /// `cache_lookup`: what to do with `request` (after routing, before
    /// select). `compression` is the route's, if it compresses: it decides the
    /// variant a client gets. Never waits; see [`Cache::lookup_coalesced`].
    pub fn lookup(
        self: &Arc<Self>,
        policy: &CachePolicy,
        compression: Option<&CompressionPolicy>,
        request: &impl RequestView,
        now: UnixTime,
    ) -> Lookup {
        let joining = match policy.coalesce {
            true => Joining::Coalesce,
            false => Joining::Alone,
        };
        self.lookup_with(policy, compression, request, now, joining)
    }

    /// [`Cache::lookup`], then waits (bounded) when another request is
    /// fetching the object, and looks up again. After two waits, or when the
    /// leader could not store the response, it goes to the node without
    /// coalescing. Never returns [`Lookup::Wait`].
    pub async fn lookup_coalesced(
        self: &Arc<Self>,
        policy: &CachePolicy,
        compression: Option<&CompressionPolicy>,
        request: &impl RequestView,
    ) -> Lookup {
        let first = self.lookup(policy, compression, request, UnixTime::now());
        self.coalesced_from(first, policy, compression, request)
            .await
    }

    /// [`Cache::lookup_coalesced`] for a request whose first [`Cache::lookup`]
    /// was made already (`first`, with the same policies): returns it unless
    /// it is [`Lookup::Wait`], else waits and looks up again as
    /// `lookup_coalesced` does. Never returns [`Lookup::Wait`].
    pub async fn coalesced_from(
        self: &Arc<Self>,
        first: Lookup,
        policy: &CachePolicy,
        compression: Option<&CompressionPolicy>,
        request: &impl RequestView,
    ) -> Lookup {
        let mut joining = match policy.coalesce {
            true => Joining::Coalesce,
            false => Joining::Alone,
        };
        let mut lookup = first;
        for round in 0..3 {
            let Lookup::Wait(waiter) = lookup else {
                // Counted once, and only when the wait spared the node a request.
                if round > 0 && matches!(lookup, Lookup::Hit(_) | Lookup::Stale { .. }) {
                    self.metrics.coalesced.inc();
                }
                return lookup;
            };
            // After two waits, or when the leader could not store, no more coalescing. A
            // leader that gave up is followed by a new flight (one waiter leads it), but the
            // third lookup never waits.
            joining = match waiter.wait().await {
                WaitOutcome::NodeFailed => Joining::AfterNodeFailure,
                WaitOutcome::GoToNode => Joining::Alone,
                WaitOutcome::LookUpAgain if round >= 1 => Joining::Alone,
                WaitOutcome::Abandoned if round >= 2 => Joining::Alone,
                WaitOutcome::LookUpAgain | WaitOutcome::Abandoned => joining,
            };
            lookup = self.lookup_with(policy, compression, request, UnixTime::now(), joining);
        }
        lookup
    }

    /// A request the cache must neither answer nor store, though its method is one the
    /// cache serves (a GET with a body): forwarded as a pass, compressed as any other.
    pub fn pass(
        &self,
        policy: &CachePolicy,
        compression: Option<&CompressionPolicy>,
        request: &impl RequestView,
    ) -> Lookup {
        let asked = Self::asked(policy, compression, &Scanned::new(request), UnixTime::now());
        Lookup::Forward(asked.exchange(ExchangeKind::Pass, self))
    }

    /// What an exchange for `request` starts from: its directives (as `policy` reads
    /// them) and the coding `compression` chooses for it.
    fn asked(
        policy: &CachePolicy,
        compression: Option<&CompressionPolicy>,
        request: &Scanned<'_, impl RequestView>,
        now: UnixTime,
    ) -> Asked {
        let directives = if policy.request_directives {
            RequestDirectives::parse(request)
        } else {
            RequestDirectives::default()
        };
        // A client's no-transform forbids weir to compress its response.
        let coding = match compression {
            Some(compression) if !directives.no_transform => compression.choose(
                &AcceptEncoding::parse(request.header_values("accept-encoding")),
            ),
            _ => Coding::Identity,
        };
        Asked {
            now,
            directives,
            coding,
        }
    }

    fn lookup_with(
        self: &Arc<Self>,
        policy: &CachePolicy,
        compression: Option<&CompressionPolicy>,
        request: &impl RequestView,
        now: UnixTime,
        joining: Joining,
    ) -> Lookup {
        let request = &Scanned::new(request);
        let asked = Self::asked(policy, compression, request, now);
        let method = request.method();
        if method != b"GET" && method != b"HEAD" {
            return Lookup::Forward(asked.exchange(ExchangeKind::Pass, self));
        }
        KEYS.with_borrow_mut(|keys| {
            keys.primary.clear();
            if !primary_key(request, &mut keys.primary) {
                return Lookup::Forward(asked.exchange(ExchangeKind::Pass, self));
            }
            let hash = self.store.hash(&keys.primary);
            let found = self.store.find(
                hash,
                &keys.primary,
                |spec, out| spec.secondary_key(request, asked.coding, out),
                &mut keys.secondary,
            );
            let found = match found {
                Found::Object(object) if self.bans.is_banned(&object) => {
                    self.store.remove(&object);
                    self.record_store();
                    Found::Nothing
                }
                other => other,
            };
            keys.hash = hash;
            match found {
                Found::Object(object) => {
                    self.lookup_found(policy, object, request, asked, keys, joining)
                }
                Found::NoVariant | Found::Nothing => {
                    if matches!(found, Found::Nothing) {
                        keys.secondary.clear();
                    }
                    let joins = (joining == Joining::Coalesce, authorized(request));
                    self.lookup_missing(policy, method, asked, keys, joins)
                }
            }
        })
    }

    /// A stored variant was found: fresh, usable stale, or to be validated.
    fn lookup_found(
        self: &Arc<Self>,
        policy: &CachePolicy,
        object: Arc<Object>,
        request: &impl RequestView,
        asked: Asked,
        keys: &Keys,
        joining: Joining,
    ) -> Lookup {
        let now = asked.now;
        // A body still arriving is judged as a whole one is (a `no-cache` response, a
        // lifetime that ran out while it arrives, the client's own directives): one to be
        // validated is, and a 304 serves it as it is (`Cache::revalidated`).
        let usability = object.freshness.usability(&asked.directives, now);
        match usability {
            Usability::Fresh => {
                self.metrics.hits.inc();
                Lookup::Hit(Hit::new(object, request, now, CacheStatus::Hit))
            }
            Usability::StaleAccepted => {
                self.metrics.stale_served.inc();
                Lookup::Hit(Hit::new(object, request, now, CacheStatus::Stale))
            }
            Usability::StaleWhileRevalidate => {
                self.metrics.stale_served.inc();
                let hit = Hit::new(Arc::clone(&object), request, now, CacheStatus::Stale);
                // Whoever leads the refresh; nobody waits on it.
                let key = flight_key(keys, authorized(request));
                let refresh = match self.flights.join(&key, 0, policy.coalesce_timeout) {
                    Join::Leader(guard) => {
                        let mut exchange = asked.exchange(
                            ExchangeKind::Revalidate {
                                stale: object,
                                guard: Some(guard),
                                background: true,
                            },
                            self,
                        );
                        exchange.key = Some(keys.stored_key());
                        Some(exchange)
                    }
                    Join::Follower(_) | Join::Alone | Join::Pass => None,
                };
                Lookup::Stale { hit, refresh }
            }
            Usability::Revalidate => {
                if asked.directives.only_if_cached {
                    return Lookup::OnlyIfCachedMiss;
                }
                if joining == Joining::AfterNodeFailure
                    && object.freshness.usable_on_error(&asked.directives, now)
                {
                    // The node just failed this revalidation for the request waited on.
                    self.metrics.stale_served.inc();
                    let hit = Hit::new(object, request, now, CacheStatus::StaleIfError);
                    return Lookup::Stale { hit, refresh: None };
                }
                let joins = (joining == Joining::Coalesce, authorized(request));
                let guard = match self.join(policy, joins, keys) {
                    Joined::Lead(guard) => guard,
                    Joined::Pass => None,
                    Joined::Wait(waiter) => return Lookup::Wait(waiter),
                };
                let mut exchange = asked.exchange(
                    ExchangeKind::Revalidate {
                        stale: object,
                        guard,
                        background: false,
                    },
                    self,
                );
                exchange.key = Some(keys.stored_key());
                Lookup::Forward(exchange)
            }
        }
    }

    /// Nothing stored for this request. `joins`: whether it may coalesce, and whether it
    /// carries `Authorization` ([`flight_key`]).
    fn lookup_missing(
        self: &Arc<Self>,
        policy: &CachePolicy,
        method: &[u8],
        asked: Asked,
        keys: &Keys,
        joins: (bool, bool),
    ) -> Lookup {
        if asked.directives.only_if_cached {
            return Lookup::OnlyIfCachedMiss;
        }
        // HEAD is answered from a stored GET, but never fills one; nor does a request
        // whose `no-store` forbids storing its answer (RFC 9111 §5.2.1.5): both go on as
        // sent, their conditionals and `Range` the node's to answer.
        if method != b"GET" || asked.directives.no_store {
            return Lookup::Forward(asked.exchange(ExchangeKind::Pass, self));
        }
        let guard = match self.join(policy, joins, keys) {
            Joined::Lead(guard) => guard,
            // Known not to be storable: no fill, and the node sees the client's
            // conditionals and Range (RFC 9111 §4.3.2: they are the node's to answer).
            Joined::Pass => return Lookup::Forward(asked.exchange(ExchangeKind::Pass, self)),
            Joined::Wait(waiter) => return Lookup::Wait(waiter),
        };
        let mut exchange = asked.exchange(
            ExchangeKind::Fill {
                guard,
                status: CacheStatus::Miss,
            },
            self,
        );
        exchange.key = Some(keys.stored_key());
        Lookup::Forward(exchange)
    }

    /// Joins the flight for this request's key: `(coalesce, authorized)`, whether it may
    /// wait for another request, and whether it carries `Authorization`.
    fn join(
        self: &Arc<Self>,
        policy: &CachePolicy,
        (coalesce, authorized): (bool, bool),
        keys: &Keys,
    ) -> Joined {
        // Without coalescing no answer is remembered as not storable.
        if !policy.coalesce {
            return Joined::Lead(None);
        }
        let key = flight_key(keys, authorized);
        if !coalesce {
            // Alone (after a wait), yet a pass all the same when the key's last answer was
            // not storable: a waiter its leader sent to the node keeps its conditionals and
            // `Range`.
            return match self.flights.is_pass(&key) {
                true => Joined::Pass,
                false => Joined::Lead(None),
            };
        }
        match self
            .flights
            .join(&key, policy.coalesce_max_waiters, policy.coalesce_timeout)
        {
            Join::Leader(guard) => Joined::Lead(Some(guard)),
            Join::Follower(waiter) => Joined::Wait(waiter.counted(&self.metrics.waiting)),
            Join::Alone => Joined::Lead(None),
            Join::Pass => Joined::Pass,
        }
    }
}

/// How a lookup joins its key's flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Joining {
    /// Wait for a request already fetching the object, or lead one.
    Coalesce,
    /// Go to the node alone (after waiting twice, or when the leader could not store).
    Alone,
    /// Alone, after the node failed the leader's revalidation: a stale object usable on
    /// error is served at once rather than each waiter asking the failing node again.
    AfterNodeFailure,
}

/// Where a request stands in its key's flight.
enum Joined {
    /// Go to the node (and lead the flight, with the guard).
    Lead(Option<FlightGuard>),
    /// Wait for the request that leads.
    Wait(Waiter),
    /// The key's last answer could not be stored: pass the request on as sent.
    Pass,
}

impl Keys {
    /// The hash and primary key an exchange keeps for storing the response.
    fn stored_key(&self) -> (u64, Arc<[u8]>) {
        (self.hash, Arc::from(&self.primary[..]))
    }
}

/// The coalescing key: the primary key, and the secondary one when known; apart for
/// requests with `Authorization` (`authorized`), whose answers a shared cache stores only
/// when they say it may (RFC 9111 §3.5). An answer it may not store is remembered as a
/// pass for them alone, so that their conditionals and `Range` reach the node (RFC 9111
/// §4.3.2), while requests without one go on filling.
fn flight_key(keys: &Keys, authorized: bool) -> Vec<u8> {
    let mut key = Vec::with_capacity(keys.primary.len() + keys.secondary.len() + 2);
    // A byte no primary key starts with (they start with the scheme).
    if authorized {
        key.push(0xff);
    }
    key.extend_from_slice(&keys.primary);
    key.push(0);
    key.extend_from_slice(&keys.secondary);
    key
}

/// Whether `request` carries `Authorization` ([`flight_key`]).
fn authorized(request: &impl RequestView) -> bool {
    request.header("authorization").is_some()
}
