//! The dashboard: one HTML page with its styles and script inline, embedded in the binary.
//! It asks only the admin listener's own API (its Content-Security-Policy forbids anything
//! else), polls `/api/v1/stats` and `/api/v1/status` each second, draws its charts on
//! canvases, and its drain/enable buttons call the node operations.

use crate::http::Response;

const PAGE: &str = include_str!("dashboard/index.html");

/// Everything a page may load: itself, and fetches to this origin.
const POLICY: &str = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
                      connect-src 'self'; img-src 'self' data:; base-uri 'none'; \
                      form-action 'none'; frame-ancestors 'none'";

/// The dashboard's response for `path`, if it is one of its paths.
pub(crate) fn asset(path: &str) -> Option<Response> {
    match path {
        "/" | "/dashboard" => Some(Response {
            content_type: "text/html; charset=utf-8",
            headers: vec![
                ("Content-Security-Policy", POLICY.to_owned()),
                ("X-Content-Type-Options", "nosniff".to_owned()),
                ("Referrer-Policy", "no-referrer".to_owned()),
            ],
            ..Response::text(200, PAGE)
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_is_small_and_self_contained() {
        assert!(PAGE.len() < 300 * 1024, "{} bytes", PAGE.len());
        // No request may leave the admin listener: no absolute URL is loaded.
        for needle in ["http://", "https://", "//cdn", "src=\"", "href=\"http"] {
            assert!(!PAGE.contains(needle), "the page mentions {needle}");
        }
    }
}
