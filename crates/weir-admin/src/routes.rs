//! The admin endpoints: which response each request gets.

use weir_observe::CONTENT_TYPE;

use crate::AdminState;
use crate::http::{Method, Request, Response};

const ALLOW: &str = "GET, HEAD";

/// Answers `request`: `/metrics`, `/healthz`, 405 for other methods on those, 404 otherwise.
pub(crate) fn respond(request: &Request, state: &AdminState) -> Response {
    let known = matches!(request.path.as_str(), "/metrics" | "/healthz");
    if !known {
        return Response::text(404, "not found\n");
    }
    if request.method == Method::Other {
        return Response {
            allow: Some(ALLOW),
            ..Response::text(405, "method not allowed\n")
        };
    }
    match request.path.as_str() {
        "/metrics" => Response {
            status: 200,
            content_type: CONTENT_TYPE,
            body: state.metrics.encode().into_bytes(),
            allow: None,
        },
        _ if (state.health)() => Response::text(200, "ok\n"),
        _ => Response::text(503, "draining\n"),
    }
}
