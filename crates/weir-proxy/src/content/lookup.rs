//! The `cache_lookup` stage: `PURGE`, then the cache — a hit is answered from
//! it; a miss goes on to the node as a [`Flow`], with the request rewritten
//! where the cache needs a whole object or sends its own validators.

use bytes::BytesMut;
use weir_cache::compress::AcceptEncoding;
use weir_cache::directives::RequestDirectives;
use weir_cache::{
    Coding, Exchange as CacheExchange, Http1Request, Lookup, PurgeMethod, RequestView, Scheme,
    UnixTime, purge_method,
};
use weir_http::{Parsed, RequestHead, Version};

use super::{Content, RoutePolicy, deliver};
use crate::answer::Failure;
use crate::client::Client;
use crate::response::Sent;
use crate::route::VirtualServerRuntime;
use crate::traffic::Edits;

/// What `cache_lookup` made of a request.
#[derive(Debug)]
pub(crate) enum Looked<'vs> {
    /// Answered by weir (a hit, `PURGE`, `only-if-cached`): the request is
    /// done. `refresh` is a stale-while-revalidate refresh to run once the
    /// client has its answer.
    Answered {
        sent: Sent,
        refresh: Option<Flow<'vs>>,
    },
    /// Ask the node; with a flow when the cache or compression has a say in
    /// the response.
    Forward(Option<Flow<'vs>>),
}

/// A request on its way to the node, and what the response stage must do for
/// the cache and compression.
#[derive(Debug)]
pub(crate) struct Flow<'vs> {
    pub(super) content: &'vs Content,
    pub(super) policy: &'vs RoutePolicy,
    /// The exchange with the cache; `None` when the route only compresses.
    pub(super) cached: Option<CacheExchange>,
    /// The coding chosen for this client (compression without a cache).
    pub(super) coding: Coding,
    pub(super) scheme: Scheme,
    /// The request as the node gets it, when the cache changed it.
    pub(crate) forward_head: Option<RequestHead>,
}

/// What [`hit_now`] made of a request.
pub(crate) enum Early {
    /// Answered from the cache: what was sent, and whether all of it left
    /// (if not, the rest is in the client's `write_buf`, to be flushed).
    Answered(Sent, bool),
    /// Not answered: the request goes on through the stages, and
    /// [`lookup`] with the cache's answer for it, when it was looked up.
    /// Boxed: every request carries this through several stages' futures,
    /// and inline its few hundred bytes were copied at each, for requests
    /// that made no lookup too; a box costs only the requests that did.
    Later(Option<Box<Lookup>>),
}

/// The `cache_lookup` stage of a bodiless HTTP/1.1 request, made without
/// waiting: a fresh hit whose whole body is stored and small is answered
/// here, with one write that does not wait ([`deliver::hit_now`]). Anything
/// else — a PURGE, a miss, a stale or large object, a request to wait for
/// another's fill — is left to [`lookup`], with the lookup already made (it
/// is not made twice: a miss may have made this request the one to fill).
pub(crate) fn hit_now(
    client: &mut Client,
    vs: &VirtualServerRuntime,
    route: Option<usize>,
    head: &RequestHead,
    keep_alive: bool,
    edits: &Edits<'_>,
) -> Early {
    let Some(content) = vs.content.as_deref() else {
        return Early::Later(None);
    };
    let policy = content.policy(route);
    let (Some(cache), Some(cache_policy)) = (content.cache.as_ref(), policy.cache.as_ref()) else {
        return Early::Later(None);
    };
    if client.is_h2() || purge(content, client, head) != PurgeMethod::NotPurge {
        return Early::Later(None);
    }
    let view = Http1Request {
        head,
        scheme: scheme(client),
    };
    let compression = policy.compression.as_ref();
    let looked = cache.lookup(cache_policy, compression, &view, UnixTime::now());
    let Lookup::Hit(hit) = &looked else {
        return Early::Later(Some(Box::new(looked)));
    };
    match deliver::hit_now(
        client,
        (vs, content),
        hit,
        head.version(),
        keep_alive,
        edits,
    ) {
        Some((sent, written)) => Early::Answered(sent, written),
        None => Early::Later(Some(Box::new(looked))),
    }
}

/// What the request's method is to the purge settings of `content`'s store.
fn purge(content: &Content, client: &Client, head: &RequestHead) -> PurgeMethod {
    match &content.store {
        Some(store) => purge_method(head.method_bytes(), client.peer.ip(), &store.purge_from),
        None => PurgeMethod::NotPurge,
    }
}

fn scheme(client: &Client) -> Scheme {
    match client.stream.is_tls() {
        true => Scheme::Https,
        false => Scheme::Http,
    }
}

/// The `cache_lookup` stage. `bodiless`: the request carried no body. A GET or HEAD
/// with one, however small, is neither answered from the cache nor stored: its body
/// cannot change what it asks for (RFC 9110 §9.3.1), but a node that reads it anyway
/// would have its answer to that body stored for everyone asking for the URL.
/// `cache_allowed`: false when a traffic rule reshaped the request for the node
/// (`RequestTraffic::reshapes_forwarding`): then only compression applies.
/// `prior`: the cache's answer when [`hit_now`] looked the request up already.
pub(crate) async fn lookup<'vs>(
    client: &mut Client,
    vs: &'vs VirtualServerRuntime,
    route: Option<usize>,
    head: &RequestHead,
    (bodiless, keep_alive, cache_allowed): (bool, bool, bool),
    edits: &Edits<'_>,
    prior: Option<Box<Lookup>>,
) -> Result<Looked<'vs>, Failure> {
    let Some(content) = vs.content.as_deref() else {
        return Ok(Looked::Forward(None));
    };
    let policy = content.policy(route);
    let scheme = scheme(client);
    let view = Http1Request { head, scheme };
    let status = match purge(content, client, head) {
        PurgeMethod::NotPurge => None,
        PurgeMethod::Forbidden => Some(403),
        PurgeMethod::Purge => Some(match content.cache.as_ref() {
            Some(cache) if cache.purge_request(&view) > 0 => 200,
            _ => 404,
        }),
    };
    if let Some(status) = status {
        let answering = (head.version(), keep_alive, is_head(head));
        let sent = answer(client, vs, status, answering, edits).await?;
        return Ok(Looked::Answered {
            sent,
            refresh: None,
        });
    }
    let flow = |cached: Option<CacheExchange>, coding: Coding| Flow {
        content,
        policy,
        cached,
        coding,
        scheme,
        forward_head: None,
    };
    let cacheable_body = bodiless || !matches!(head.method_bytes(), b"GET" | b"HEAD");
    let (Some(cache), Some(cache_policy), true) =
        (content.cache.as_ref(), policy.cache.as_ref(), cache_allowed)
    else {
        // Compression only: the coding is chosen now, from the request.
        return Ok(Looked::Forward(policy.compression.as_ref().map(
            |compression| {
                let no_transform = RequestDirectives::parse(&view).no_transform;
                let accept = AcceptEncoding::parse(view.header_values("accept-encoding"));
                let coding = match no_transform {
                    true => Coding::Identity,
                    false => compression.choose(&accept),
                };
                flow(None, coding)
            },
        )));
    };
    let compression = policy.compression.as_ref();
    let looked = match prior {
        _ if !cacheable_body => cache.pass(cache_policy, compression, &view),
        Some(first) => {
            cache
                .coalesced_from(*first, cache_policy, compression, &view)
                .await
        }
        None => {
            cache
                .lookup_coalesced(cache_policy, compression, &view)
                .await
        }
    };
    let (hit, refresh) = match looked {
        Lookup::Hit(hit) => (hit, None),
        // Answered now from the stale object, refreshed after.
        Lookup::Stale { hit, refresh } => (hit, refresh),
        Lookup::OnlyIfCachedMiss => {
            let answering = (head.version(), keep_alive, is_head(head));
            let sent = answer(client, vs, 504, answering, edits).await?;
            return Ok(Looked::Answered {
                sent,
                refresh: None,
            });
        }
        Lookup::Forward(exchange) => {
            let forward = with_head(flow(None, Coding::Identity), exchange, head, vs);
            return Ok(Looked::Forward(Some(forward)));
        }
        // lookup_coalesced waits itself; go to the node should it not.
        Lookup::Wait(_) => return Ok(Looked::Forward(None)),
    };
    let version = head.version();
    let sent = deliver::hit(client, (vs, content), &hit, version, keep_alive, edits).await?;
    let refresh =
        refresh.map(|exchange| with_head(flow(None, Coding::Identity), exchange, head, vs));
    Ok(Looked::Answered { sent, refresh })
}

/// The flow of a cache exchange, with the request rewritten for the node
/// when the exchange says so.
pub(super) fn with_head<'vs>(
    mut flow: Flow<'vs>,
    mut exchange: CacheExchange,
    head: &RequestHead,
    vs: &VirtualServerRuntime,
) -> Flow<'vs> {
    flow.forward_head = rewrite(head, &mut exchange, vs);
    flow.cached = Some(exchange);
    flow
}

/// `head` without the fields the exchange removes (the client's
/// conditionals and `Range` on a fill) and with those it adds (the stored
/// validators); `None` when nothing changes.
fn rewrite(
    head: &RequestHead,
    exchange: &mut CacheExchange,
    vs: &VirtualServerRuntime,
) -> Option<RequestHead> {
    let remove = exchange.remove_fields();
    let removed = |name: &[u8]| {
        remove
            .iter()
            .any(|field| name.eq_ignore_ascii_case(field.as_bytes()))
    };
    let removes = head.headers().any(|(name, _)| removed(name));
    let mut added = exchange.add_fields().peekable();
    if !removes && added.peek().is_none() {
        return None;
    }
    let raw = head.raw();
    let line_end = memchr_newline(raw)?;
    let mut out = BytesMut::with_capacity(raw.len() + 128);
    out.extend_from_slice(&raw[..=line_end]);
    let fields = head.headers().filter(|(name, _)| !removed(name));
    let added = added.map(|(name, value)| (name.as_bytes(), value));
    for (name, value) in fields.chain(added) {
        for piece in [name, b": ", value, b"\r\n"] {
            out.extend_from_slice(piece);
        }
    }
    out.extend_from_slice(b"\r\n");
    match weir_http::parse_request(&out, &vs.head_limits) {
        Ok(Parsed::Complete(rewritten, _)) => Some(rewritten),
        // Past the head limits with the validators added: sent as the client wrote it.
        _ => None,
    }
}

fn memchr_newline(raw: &[u8]) -> Option<usize> {
    raw.iter().position(|&byte| byte == b'\n')
}

fn is_head(head: &RequestHead) -> bool {
    head.method() == weir_http::Method::Head
}

/// One of weir's own short answers (`PURGE`, `only-if-cached`).
async fn answer(
    client: &mut Client,
    vs: &VirtualServerRuntime,
    status: u16,
    (version, keep_alive, head_method): (Version, bool, bool),
    edits: &Edits<'_>,
) -> Result<Sent, Failure> {
    let body: &[u8] = match status {
        200 => b"purged\n",
        403 => b"purge not allowed from this address\n",
        404 => b"not in the cache\n",
        _ => crate::answer::body_for(status),
    };
    let shape = weir_http::SimpleResponse {
        status,
        version,
        keep_alive,
        // only-if-cached's 504 to a HEAD: its head only, or the next answer on the
        // connection would be read as this one's body.
        head_request: head_method,
    };
    let timeout = vs.config.timeouts.write;
    // Either protocol: an HTTP/2 stream gets it as HEADERS and DATA.
    let own = crate::client::OwnAnswer {
        set: &vs.config.response_headers,
        edits,
    };
    let bytes = client
        .answer_simple(&shape, &[], &own, body, timeout)
        .await?;
    Ok(Sent {
        grpc_status: None,
        status,
        bytes,
        keep_alive,
        cache: None,
    })
}
