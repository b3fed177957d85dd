//! Which response each request gets: `/metrics`, `/healthz`, the dashboard, and the API
//! behind authentication.

use std::net::SocketAddr;

use weir_observe::{CONTENT_TYPE, TEXT_CONTENT_TYPE};

use crate::AdminState;
use crate::api;
use crate::auth::Verdict;
use crate::dashboard;
use crate::guard;
use crate::http::{Method, Request, Response};

const ALLOW: &str = "GET, HEAD";

/// Answers `request`, which came to the listener bound to `local`.
pub(crate) async fn respond(request: &Request, state: &AdminState, local: SocketAddr) -> Response {
    if let Some(refusal) = refusal(request, state, local) {
        audit(request, refusal.status);
        return refusal;
    }
    let path = request.path.as_str();
    if path == "/healthz" {
        return if (state.health)() {
            Response::text(200, "ok\n")
        } else {
            Response::text(503, "draining\n")
        };
    }
    if let Some(asset) = dashboard::asset(path) {
        // The page holds no data: it asks the API, with the token, for everything.
        return asset;
    }
    if path == "/metrics" {
        // OpenMetrics to a scraper that asks for it (Prometheus does); the classic text
        // format to anything else (promtool, curl, older scrapers), as Prometheus's own
        // clients negotiate.
        // Encoded off the worker: with thousands of nodes a scrape is milliseconds of CPU
        // that requests on this thread would otherwise wait behind.
        let metrics = std::sync::Arc::clone(&state.metrics);
        let openmetrics = request.accepts_openmetrics;
        let encoded = tokio::task::spawn_blocking(move || {
            let text = metrics.encode();
            match openmetrics {
                true => (CONTENT_TYPE, text),
                false => (TEXT_CONTENT_TYPE, weir_observe::openmetrics_to_text(&text)),
            }
        })
        .await;
        let Ok((content_type, body)) = encoded else {
            return Response::error(500, "the metrics could not be encoded");
        };
        return Response {
            status: 200,
            content_type,
            body: body.into_bytes(),
            allow: None,
            headers: Vec::new(),
        };
    }
    match &state.control {
        Some(control) => {
            let response = api::respond(request, control, &state.metrics).await;
            audit(request, response.status);
            response
        }
        None => Response::text(404, "not found\n"),
    }
}

/// Who changed what: an audit trail of every change tried through the API, answered or
/// refused (from its head too: another origin's page, a body too large). A dry run changes
/// nothing; a missing or wrong token is logged on its own budget ([`unauthorized`]).
pub(crate) fn audit(request: &Request, status: u16) {
    if matches!(request.method, Method::Post | Method::Put)
        && request.path.starts_with("/api/")
        && !request.path.ends_with("/validate")
        && status != 401
    {
        tracing::info!(
            peer = %Peer(request.peer),
            method = if request.method == Method::Put { "PUT" } else { "POST" },
            path = %request.path,
            status,
            "admin API change"
        );
    }
}

/// A client address for the log, `-` when unknown.
struct Peer(Option<SocketAddr>);

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(peer) => write!(f, "{peer}"),
            None => f.write_str("-"),
        }
    }
}

/// A request refused for a missing or wrong token: counted in
/// `weir_admin_unauthorized_total`, and logged at most once a second with how many were
/// refused since the last line (a guessing client cannot flood the log).
fn unauthorized(request: &Request, state: &AdminState) {
    use std::sync::Mutex;
    use std::time::{Duration, Instant};
    static LAST: Mutex<(Option<Instant>, u64)> = Mutex::new((None, 0));
    state.metrics.admin_unauthorized().inc();
    let mut last = LAST
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    last.1 += 1;
    let now = Instant::now();
    if last
        .0
        .is_none_or(|at| now.duration_since(at) >= Duration::from_secs(1))
    {
        tracing::warn!(
            peer = %Peer(request.peer),
            path = %request.path,
            refused = last.1,
            "admin API: request refused for a missing or wrong bearer token \
             (refused counts those since the last such line)"
        );
        *last = (Some(now), 0);
    }
}

/// The answer `request` gets before anything it asks is done: an unknown path, a method
/// the path does not take, a cross-site or rebound request, a missing or wrong token, an
/// API resource that does not exist.
/// Made from the head alone, so a request with a body is refused before its body is read
/// (an unauthenticated client cannot make weir hold megabytes). `None`: it goes on.
pub(crate) fn refusal(
    request: &Request,
    state: &AdminState,
    local: SocketAddr,
) -> Option<Response> {
    let path = request.path.as_str();
    let is_api = path.starts_with("/api/");
    let known = matches!(path, "/metrics" | "/healthz")
        || (state.control.is_some() && (is_api || dashboard::asset(path).is_some()));
    if !known {
        return Some(Response::text(404, "not found\n"));
    }
    if !is_api && !matches!(request.method, Method::Get | Method::Head) {
        return Some(Response {
            allow: Some(ALLOW),
            ..Response::text(405, "method not allowed\n")
        });
    }
    if path == "/healthz" {
        return None;
    }
    let tokenless = state
        .control
        .as_ref()
        .is_none_or(|control| control.tokenless());
    if path != "/metrics"
        && let Some(refusal) = guard::refuse(request, tokenless)
    {
        return Some(refusal);
    }
    if dashboard::asset(path).is_some() {
        return None;
    }
    let control = state.control.as_ref()?;
    // Validation and reloads keep this from happening; should it anyway, fail closed.
    if tokenless && !local.ip().is_loopback() {
        return Some(Response::error(
            503,
            format!(
                "the admin API listens on {local}, not a loopback address, and no \
                 admin.token_file is configured: only /healthz is served"
            ),
        ));
    }
    match control.authorize(request.authorization.as_deref()) {
        // An API path that names no resource, or a method it does not take, is refused
        // here too, and only once the token passed: the pools and nodes a 404 names are
        // the running config's.
        Verdict::Allowed if is_api => api::refusal(request, control),
        Verdict::Allowed => None,
        Verdict::Denied => Some({
            unauthorized(request, state);
            Response {
                headers: vec![("WWW-Authenticate", "Bearer realm=\"weir\"".to_owned())],
                ..Response::error(401, "a valid bearer token is required")
            }
        }),
        // Why (the file's path, the system's error) is in weir's log, which said so when it
        // began: a client that has not shown a token learns nothing of the host's files.
        Verdict::Unavailable(_) => Some(Response::error(
            503,
            "the admin token cannot be read: see weir's log",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::audit;
    use crate::http::Request;
    use crate::test_log::logged;

    fn request(raw: &str) -> Request {
        let peer = "192.0.2.7:4000".parse().ok();
        match weir_http::parse_request(raw.as_bytes(), &weir_http::Limits::default()).unwrap() {
            weir_http::Parsed::Complete(head, _) => Request::new(&head, Vec::new(), peer),
            weir_http::Parsed::Partial => panic!("a partial head"),
        }
    }

    /// Every change tried is on the audit trail with who, what and the answer, refused ones
    /// too; reads, dry runs and a wrong token (logged on a budget of its own) are not.
    #[test]
    fn changes_tried_are_audited_whatever_the_answer() {
        let drain =
            request("POST /api/v1/pools/p/nodes/10.0.0.1:80/drain HTTP/1.1\r\nHost: a\r\n\r\n");
        for status in [200, 403, 413] {
            let line = logged(|| audit(&drain, status));
            assert!(line.contains("admin API change"), "{status}: {line}");
            assert!(
                line.contains("192.0.2.7:4000") && line.contains("/drain"),
                "{line}"
            );
            assert!(line.contains(&format!("status={status}")), "{line}");
        }
        assert_eq!(logged(|| audit(&drain, 401)), "");
        for raw in [
            "GET /api/v1/status HTTP/1.1\r\nHost: a\r\n\r\n",
            "POST /api/v1/config/validate HTTP/1.1\r\nHost: a\r\n\r\n",
        ] {
            assert_eq!(logged(|| audit(&request(raw), 200)), "", "{raw}");
        }
    }
}
