//! Which response each request gets: `/metrics`, `/healthz`, the dashboard, and the API
//! behind authentication.

use std::net::SocketAddr;

use weir_observe::CONTENT_TYPE;

use crate::AdminState;
use crate::api;
use crate::auth::Verdict;
use crate::dashboard;
use crate::guard;
use crate::http::{Method, Request, Response};

const ALLOW: &str = "GET, HEAD";

/// Answers `request`, which came to the listener bound to `local`.
pub(crate) async fn respond(request: &Request, state: &AdminState, local: SocketAddr) -> Response {
    let path = request.path.as_str();
    let is_api = path.starts_with("/api/");
    let known = matches!(path, "/metrics" | "/healthz")
        || (state.control.is_some() && (is_api || dashboard::asset(path).is_some()));
    if !known {
        return Response::text(404, "not found\n");
    }
    if !is_api && !matches!(request.method, Method::Get | Method::Head) {
        return Response {
            allow: Some(ALLOW),
            ..Response::text(405, "method not allowed\n")
        };
    }
    if path == "/healthz" {
        return if (state.health)() {
            Response::text(200, "ok\n")
        } else {
            Response::text(503, "draining\n")
        };
    }
    let tokenless = state
        .control
        .as_ref()
        .is_none_or(|control| control.tokenless());
    if path != "/metrics"
        && let Some(refusal) = guard::refuse(request, tokenless)
    {
        return refusal;
    }
    if let Some(asset) = dashboard::asset(path) {
        // The page holds no data: it asks the API, with the token, for everything.
        return asset;
    }
    if let Some(control) = &state.control {
        // Validation and reloads keep this from happening; should it anyway, fail closed.
        if tokenless && !local.ip().is_loopback() {
            return Response::error(
                503,
                format!(
                    "the admin API listens on {local}, not a loopback address, and no \
                     admin.token_file is configured: only /healthz is served"
                ),
            );
        }
        match control.authorize(request.authorization.as_deref()) {
            Verdict::Allowed => {}
            Verdict::Denied => {
                return Response {
                    headers: vec![("WWW-Authenticate", "Bearer realm=\"weir\"".to_owned())],
                    ..Response::error(401, "a valid bearer token is required")
                };
            }
            Verdict::Unavailable(why) => {
                return Response::error(503, format!("admin token unavailable: {why}"));
            }
        }
    }
    if path == "/metrics" {
        return Response {
            status: 200,
            content_type: CONTENT_TYPE,
            body: state.metrics.encode().into_bytes(),
            allow: None,
            headers: Vec::new(),
        };
    }
    match &state.control {
        Some(control) => api::respond(request, control, &state.metrics).await,
        None => Response::text(404, "not found\n"),
    }
}
