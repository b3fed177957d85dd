//! The rules stage (issue 14), between read_head and filter_request: the request id, the
//! client address behind trusted proxies, the virtual server's rules (header edits, a path
//! rewrite, a pool, or weir's own answer) and the rate and concurrency limits. What the
//! stage decides travels with the request in a [`RequestTraffic`]; select, forward and
//! respond apply it (`docs/design/rules.md`, "How the pipeline calls it"). The
//! per-client connection limit is applied at admit (`crate::listener`, `crate::refuse`).
//!
//! The `Decision` a request is evaluated into comes from a small per-thread pool, like
//! the buffers: it is cleared and reused, and an idle connection holds none. A virtual
//! server without rules takes none at all: its requests read one shared empty decision,
//! so the stage costs them a few loads, not a pool round trip.

use std::cell::RefCell;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, LazyLock, OnceLock};

use bytes::Bytes;
use tokio::time::Instant;
use weir_config::PoolId;
use weir_http::{BodyFraming, Method, RequestHead, ResponseHead, SimpleResponse};
use weir_observe::AccessRecord;
use weir_rules::limits::ConcurrencyPermit;
use weir_rules::{Answer, Decision, Facts, Outcome, Refusal, RequestId};
use weir_upstream::Pool;

use crate::answer::{Failure, body_for, grpc_fields, grpc_status_for, lossy};
use crate::client::Client;
use crate::request_body::is_grpc;
use crate::response::Sent;
use crate::route::VirtualServerRuntime;
use crate::traffic::{Edits, Upstream, VirtualServerTraffic};

/// Decisions kept per thread for reuse (as many as requests in flight on a thread, usually).
const POOLED_PER_THREAD: usize = 32;

thread_local! {
    // Boxed, so that taking one from the pool and giving it back moves a pointer, not
    // the few hundred bytes of a decision.
    #[allow(clippy::vec_box, reason = "a request holds the box; moving it must stay cheap")]
    static SCRATCH: RefCell<Vec<Box<Scratch>>> = const { RefCell::new(Vec::new()) };
}

/// What every request of a virtual server without rules is decided into: nothing.
static NO_DECISION: LazyLock<Decision> = LazyLock::new(Decision::default);

/// A request's id as text, generated on the first call when the request brought none.
fn id_text(id: &OnceLock<RequestId>) -> &str {
    id.get_or_init(RequestId::generate).as_str()
}

/// What the rules stage decided for one request, kept until the request ends.
#[derive(Debug)]
pub(crate) struct RequestTraffic {
    /// The request id (`None`: ids are off): the trusted incoming one, or one generated
    /// when something first asks for it (forward, the access log, the rules, the client's
    /// copy). A cache hit that nothing logs or echoes generates none.
    id: Option<OnceLock<RequestId>>,
    /// The client address rules, limits and persistence see.
    pub(crate) client: IpAddr,
    https: bool,
    /// The decision and concurrency slots; `None` when the virtual server has no rules
    /// (then nothing was decided and no limit applies).
    scratch: Option<Box<Scratch>>,
    /// The persistence cookie the response sets (learned at filter_response).
    set_cookie: Option<Bytes>,
}

/// Per-request lists reused between requests: the decision, and the concurrency slots
/// the request holds (freed when it ends).
#[derive(Debug, Default)]
struct Scratch {
    decision: Decision,
    permits: Vec<ConcurrencyPermit>,
}

/// Where the rules stage sends a request.
#[derive(Debug)]
pub(crate) enum Routed {
    Pool(Arc<Pool>),
    /// A rule's redirect, direct response or denial.
    Answer,
    /// A rate or concurrency limit refused the request.
    Refused(Refusal),
}

impl Routed {
    /// The pool the request went to, if any.
    pub(crate) fn pool(&self) -> Option<&Arc<Pool>> {
        match self {
            Routed::Pool(pool) => Some(pool),
            _ => None,
        }
    }
}

impl RequestTraffic {
    /// The request id, the client address and the rules' decision for `head`.
    pub(crate) fn begin(
        vs: &VirtualServerRuntime,
        client: &Client,
        head: &RequestHead,
    ) -> RequestTraffic {
        let settings = &vs.config.traffic;
        let id = settings.request_id.enabled.then(|| {
            weir_rules::incoming_request_id(&settings.request_id, head)
                .map_or_else(OnceLock::new, OnceLock::from)
        });
        let address = weir_rules::client_address(&settings.client_address, client.peer.ip(), head);
        let https = client.stream.is_tls();
        let mut scratch = None;
        if !vs.traffic.rules.is_empty() {
            let taken = scratch.insert(SCRATCH.with_borrow_mut(Vec::pop).unwrap_or_default());
            let facts = Facts {
                client_address: address,
                https,
                sni: client.stream.server_name(),
                tls_version: client.stream.tls_version(),
                client_subject: client.client_subject.as_deref(),
                request_id: id.as_ref().map_or("", id_text),
            };
            vs.traffic
                .rules
                .evaluate_into(head, &facts, &mut taken.decision);
        }
        RequestTraffic {
            id,
            client: address,
            https,
            scratch,
            set_cookie: None,
        }
    }

    /// What the rules decided for this request (nothing, without rules).
    fn decision(&self) -> &Decision {
        self.scratch
            .as_ref()
            .map_or(&NO_DECISION, |scratch| &scratch.decision)
    }

    /// The route stage: the limits the matching rules name, then the rules' pool or
    /// answer, else the virtual server's routes and default pool.
    pub(crate) fn route(&mut self, vs: &VirtualServerRuntime, head: &RequestHead) -> Routed {
        let traffic = &vs.traffic;
        let Some(scratch) = self.scratch.as_mut() else {
            return Routed::Pool(Arc::clone(vs.route_pool(vs.matched_route(head))));
        };
        // A limit's refusal decides the request: no rule did (not counted, not logged).
        if let Err(refusal) = check_limits(scratch, self.client, traffic, head) {
            scratch.decision.rule = None;
            return Routed::Refused(refusal);
        }
        let rule = scratch.decision.rule;
        if let Some(counter) = rule.and_then(|rule| traffic.metrics.rules.get(rule)) {
            counter.inc();
        }
        match &scratch.decision.outcome {
            Outcome::Answer(_) => Routed::Answer,
            Outcome::Pool(PoolId(index)) => match traffic.pools.get(*index) {
                Some(pool) => Routed::Pool(Arc::clone(pool)),
                None => Routed::Pool(Arc::clone(vs.route_pool(vs.matched_route(head)))),
            },
            Outcome::Default => Routed::Pool(Arc::clone(vs.route_pool(vs.matched_route(head)))),
        }
    }
}

/// Counts the request against each rate limit its rules name, in rule order (the
/// first refusal answers), then takes a slot in each concurrency limit (all or none).
fn check_limits(
    scratch: &mut Scratch,
    client: IpAddr,
    traffic: &VirtualServerTraffic,
    head: &RequestHead,
) -> Result<(), Refusal> {
    let decision = &scratch.decision;
    if !decision.rate_limits.is_empty() {
        let now = Instant::now().into_std();
        for &index in &decision.rate_limits {
            if let Err(refusal) = traffic.limits.check_rate(index, head, client, now) {
                if let Some(counter) = traffic.metrics.rate_limit_refusals.get(index) {
                    counter.inc();
                }
                return Err(refusal);
            }
        }
    }
    for &index in &decision.concurrency_limits {
        match traffic
            .limits
            .acquire_one(index, head, client, &mut scratch.permits)
        {
            Ok(()) => {}
            Err(refusal) => {
                scratch.permits.clear();
                if let Some(counter) = traffic.metrics.concurrency_limit_refusals.get(index) {
                    counter.inc();
                }
                return Err(refusal);
            }
        }
    }
    Ok(())
}

impl RequestTraffic {
    /// The path to forward instead of the received one (a rule rewrote it).
    pub(crate) fn path(&self) -> Option<&[u8]> {
        self.decision().path.as_deref()
    }

    /// The name of the rule that decided where the request went, for the access log.
    pub(crate) fn rule_name<'a>(&self, vs: &'a VirtualServerRuntime) -> Option<&'a str> {
        vs.traffic.rules.rule_name(self.decision().rule?)
    }

    /// The client address a trusted proxy's forwarding header gave, for the access log:
    /// `None` when the request's client is the connection's `peer` (or its PROXY address).
    pub(crate) fn forwarded_client(&self, peer: SocketAddr) -> Option<IpAddr> {
        (self.client != peer.ip().to_canonical()).then_some(self.client)
    }

    pub(crate) fn id(&self) -> Option<&str> {
        self.id.as_ref().map(id_text)
    }

    /// Whether a rule changed what goes to the node: chose the pool, rewrote the path or
    /// edited the request head. The answer can then depend on what the rule looked at (a
    /// header, a cookie, the client address), which the cache key does not hold, so such a
    /// request is neither answered from the cache nor stored in it.
    pub(crate) fn reshapes_forwarding(&self) -> bool {
        let decision = self.decision();
        matches!(decision.outcome, Outcome::Pool(_))
            || decision.path.is_some()
            || !decision.request_headers.is_empty()
    }

    /// The rules' edits of the request head forwarded to the node.
    pub(crate) fn request_edits(&self) -> &weir_rules::HeaderEdits {
        &self.decision().request_headers
    }

    /// What select and forward apply: the client address, the rewritten path, the
    /// request's header edits and the request id.
    pub(crate) fn upstream<'a>(&'a self, vs: &'a VirtualServerRuntime) -> Upstream<'a> {
        Upstream {
            client: self.client,
            path: self.path(),
            edits: Edits {
                edits: &self.decision().request_headers,
                id: self.id_header(vs, true),
                answer: None,
                set_cookie: None,
            },
        }
    }

    /// The edits of the response head sent to the client.
    pub(crate) fn response_edits<'a>(&'a self, vs: &'a VirtualServerRuntime) -> Edits<'a> {
        Edits {
            edits: &self.decision().response_headers,
            id: self.id_header(vs, vs.config.traffic.request_id.to_client),
            answer: None,
            set_cookie: self.set_cookie.as_deref(),
        }
    }

    fn id_header<'a>(
        &'a self,
        vs: &'a VirtualServerRuntime,
        wanted: bool,
    ) -> Option<(&'a str, &'a str)> {
        if !wanted {
            return None;
        }
        let header = vs.config.traffic.request_id.header.as_str();
        self.id().map(|id| (header, id))
    }

    /// At filter_response: what the pool's persistence learns from the response of
    /// `node`, and the cookie it sets.
    pub(crate) fn learn(
        &mut self,
        pool: &Pool,
        head: &RequestHead,
        response: &ResponseHead,
        node: usize,
    ) {
        if let Some(persistence) = &pool.persistence {
            let now = Instant::now().into_std();
            self.set_cookie =
                persistence.on_response(head, response, node, self.client, self.https, now);
        }
    }

    /// Writes weir's own answer (a rule's, a limit's refusal, or `own`: one weir gives as
    /// the request's final recipient) and logs it. The connection stays open only when the
    /// request has no body weir left unread.
    pub(crate) async fn answer(
        &self,
        client: &mut Client,
        vs: &VirtualServerRuntime,
        head: &RequestHead,
        (refusal, own): (Option<Refusal>, Option<&Answer>),
        keep_alive: bool,
        started: Instant,
    ) -> Result<Sent, Failure> {
        let no_body = matches!(head.framing(), BodyFraming::None | BodyFraming::Length(0));
        let keep_alive = keep_alive && no_body;
        let answer = own
            .or_else(|| self.decision().answer())
            .filter(|_| refusal.is_none());
        let status = refusal.map_or_else(|| answer.map_or(500, |a| a.status), |r| r.status);
        let own_body = answer.is_some_and(|answer| !answer.body.is_empty());
        // A refusal or a denial of a gRPC call is a trailers-only gRPC answer
        // (a status the client can read); a rule's own body is sent as written.
        let grpc = status >= 400 && !own_body && is_grpc(head.header("content-type"));
        let body: &[u8] = match answer {
            _ if grpc => b"",
            // A direct response's body as the rule wrote it (empty when it gave none).
            Some(answer) if answer.written => &answer.body,
            _ => short_body(status),
        };
        let retry_after = refusal.map(|r| r.retry_after_seconds().to_string());
        let mut extra: Vec<(&str, &str)> = match grpc {
            true => grpc_fields(status).to_vec(),
            false => Vec::new(),
        };
        if let Some(seconds) = &retry_after {
            extra.push(("Retry-After", seconds));
        }
        let grpc_status = grpc.then(|| grpc_status_for(status));
        let edits = Edits {
            answer,
            ..self.response_edits(vs)
        };
        let shape = SimpleResponse {
            status,
            version: head.version(),
            keep_alive,
            head_request: head.method() == Method::Head,
        };
        let timeout = vs.config.timeouts.write;
        let own = crate::client::OwnAnswer {
            set: &vs.config.response_headers,
            edits: &edits,
        };
        let bytes = client
            .answer_simple(&shape, &extra, &own, body, timeout)
            .await?;
        let done = client.answered();
        let duration = done.saturating_duration_since(started);
        // As for a proxied request (`pipeline::record`): the access record's bytes and
        // duration are the metrics' too. Only the head was read (a body left unread
        // closes the connection).
        vs.metrics
            .record_answer(status, head.raw().len() as u64, bytes, duration);
        if let Some(log) = &vs.access_log {
            log.write(&AccessRecord {
                virtual_server: &vs.config.name,
                client: client.peer,
                client_address: self.forwarded_client(client.peer),
                method: lossy(head.method_bytes()),
                target: lossy(head.target()),
                version: client.version_label(head.version()),
                status,
                bytes_sent: bytes,
                pool: None,
                node: None,
                duration,
                upstream_duration: None,
                error: refusal.map(|_| "limit"),
                request_id: self.id(),
                grpc_status,
                cache: None,
                rule: self.rule_name(vs),
                tls: client.tls_record(),
            });
        }
        Ok(Sent {
            status,
            bytes,
            keep_alive,
            grpc_status,
            cache: None,
        })
    }
}

impl Drop for RequestTraffic {
    /// The request is over: its concurrency slots are freed and its lists go back to
    /// this thread's pool.
    fn drop(&mut self) {
        let Some(mut scratch) = self.scratch.take() else {
            return;
        };
        scratch.permits.clear();
        scratch.decision.clear();
        SCRATCH.with_borrow_mut(|pool| {
            if pool.len() < POOLED_PER_THREAD {
                pool.push(scratch);
            }
        });
    }
}

/// The body of an answer without one of its own: none for redirects.
fn short_body(status: u16) -> &'static [u8] {
    match status {
        300..400 => b"",
        _ => body_for(status),
    }
}
