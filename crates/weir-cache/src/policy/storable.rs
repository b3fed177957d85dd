//! May a response be stored (RFC 9111 §3), in a shared cache?

use crate::directives::{RequestDirectives, ResponseDirectives};
use crate::policy::{CachePolicy, SetCookie};
use crate::view::{RequestView, ResponseView, list_elements};

/// Why a response was not stored; shown in logs and the debug header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotStorable {
    /// Only responses to GET are stored (HEAD is answered from them).
    Method,
    /// The request said `no-store`.
    RequestNoStore,
    /// A status that is neither cacheable by default nor made so by explicit freshness.
    Status,
    /// Partial content (206 or `Content-Range`): only whole objects are stored.
    Partial,
    /// The response said `no-store`.
    NoStore,
    /// The response said `private` (a shared cache must not store it).
    Private,
    /// The request carried `Authorization` and the response did not allow sharing (§3.5).
    Authorization,
    /// The response sets a cookie and the policy does not strip them.
    SetCookie,
    /// `Vary: *`.
    VaryStar,
    /// Larger than the per-object limit.
    TooLarge,
    /// No freshness, no validator and no stale window: it could never be reused.
    NotReusable,
}

/// What storing a response involves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Storable {
    /// Remove `Set-Cookie` fields from the stored copy.
    pub strip_set_cookie: bool,
}

/// §3: whether `response` to `request` may be stored by a shared cache.
/// Freshness and Vary are checked by the caller, which needs them anyway.
pub fn storable(
    policy: &CachePolicy,
    request: &impl RequestView,
    request_directives: &RequestDirectives,
    response: &impl ResponseView,
    directives: &ResponseDirectives,
) -> Result<Storable, NotStorable> {
    if request.method() != b"GET" {
        return Err(NotStorable::Method);
    }
    if request_directives.no_store {
        return Err(NotStorable::RequestNoStore);
    }
    let status = response.status();
    if status == 206 || response.header("content-range").is_some() {
        return Err(NotStorable::Partial);
    }
    if !(200..600).contains(&status) || status == 304 {
        return Err(NotStorable::Status);
    }
    // §5.2.2.3: must-understand lets a cache that understands the status ignore no-store.
    if directives.no_store && !(directives.must_understand && understood(status)) {
        return Err(NotStorable::NoStore);
    }
    if directives.must_understand && !understood(status) {
        return Err(NotStorable::Status);
    }
    if directives.private {
        return Err(NotStorable::Private);
    }
    if request.header("authorization").is_some()
        && !(directives.must_revalidate || directives.public || directives.s_maxage.is_some())
    {
        return Err(NotStorable::Authorization);
    }
    let explicit = directives.max_age.is_some()
        || directives.s_maxage.is_some()
        || (!directives.targeted && response.header("expires").is_some());
    if !(explicit || directives.public || heuristically_cacheable(status)) {
        return Err(NotStorable::Status);
    }
    if list_elements(response.header_values("vary")).any(|name| name == b"*") {
        return Err(NotStorable::VaryStar);
    }
    if content_length(response).is_some_and(|length| length > policy.max_object_size) {
        return Err(NotStorable::TooLarge);
    }
    let sets_cookie = response.header("set-cookie").is_some();
    if sets_cookie && policy.set_cookie == SetCookie::Pass {
        return Err(NotStorable::SetCookie);
    }
    Ok(Storable {
        strip_set_cookie: sets_cookie,
    })
}

/// Statuses cacheable by default (RFC 9110 §15.1: "heuristically cacheable").
pub fn heuristically_cacheable(status: u16) -> bool {
    matches!(
        status,
        200 | 203 | 204 | 206 | 300 | 301 | 308 | 404 | 405 | 410 | 414 | 501
    )
}

/// Statuses whose caching semantics weir implements (for `must-understand`).
fn understood(status: u16) -> bool {
    matches!(
        status,
        200 | 203
            | 204
            | 300
            | 301
            | 302
            | 303
            | 307
            | 308
            | 404
            | 405
            | 410
            | 414
            | 451
            | 500
            | 501
            | 502
            | 503
            | 504
    )
}

/// The declared `Content-Length`, when there is exactly one valid value.
pub fn content_length(response: &impl ResponseView) -> Option<u64> {
    let value = response.header("content-length")?;
    if value.is_empty() || value.len() > 19 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(
        value
            .iter()
            .fold(0u64, |total, digit| total * 10 + u64::from(digit - b'0')),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{Req, Resp};

    fn check(
        request: &Req,
        response: &Resp,
        policy: &CachePolicy,
    ) -> Result<Storable, NotStorable> {
        storable(
            policy,
            request,
            &RequestDirectives::parse(request),
            response,
            &ResponseDirectives::parse(response),
        )
    }

    #[test]
    #[allow(clippy::too_many_lines, reason = "a table of cases, one per line")]
    fn storability_table() {
        use NotStorable::*;
        let ok = Ok(Storable {
            strip_set_cookie: false,
        });
        let get = Req::get("/");
        let auth = Req::get("/").header("Authorization", "Basic eDp5");
        let cc = |status, value: &str| Resp::new(status).header("Cache-Control", value);
        let cases: Vec<(&str, Req, Resp, Result<Storable, NotStorable>)> = vec![
            ("200 max-age", get.clone(), cc(200, "max-age=60"), ok),
            (
                "200 no directives (heuristic status)",
                get.clone(),
                Resp::new(200),
                ok,
            ),
            ("404 by default", get.clone(), Resp::new(404), ok),
            (
                "302 without freshness",
                get.clone(),
                Resp::new(302),
                Err(Status),
            ),
            ("302 with max-age", get.clone(), cc(302, "max-age=5"), ok),
            (
                "503 with Expires",
                get.clone(),
                Resp::new(503).header("Expires", "Sun, 06 Nov 1994 08:49:37 GMT"),
                ok,
            ),
            ("500 public", get.clone(), cc(500, "public"), ok),
            ("304 never", get.clone(), cc(304, "max-age=5"), Err(Status)),
            ("206 never", get.clone(), cc(206, "max-age=5"), Err(Partial)),
            (
                "Content-Range never",
                get.clone(),
                cc(200, "max-age=5").header("Content-Range", "bytes 0-1/2"),
                Err(Partial),
            ),
            (
                "POST",
                Req::new("POST", "/"),
                cc(200, "max-age=5"),
                Err(Method),
            ),
            (
                "HEAD",
                Req::new("HEAD", "/"),
                cc(200, "max-age=5"),
                Err(Method),
            ),
            (
                "no-store",
                get.clone(),
                cc(200, "max-age=5, no-store"),
                Err(NoStore),
            ),
            (
                "must-understand overrides no-store",
                get.clone(),
                cc(200, "max-age=5, no-store, must-understand"),
                ok,
            ),
            (
                "must-understand, unknown status",
                get.clone(),
                cc(299, "max-age=5, no-store, must-understand"),
                Err(NoStore),
            ),
            (
                "private",
                get.clone(),
                cc(200, "max-age=5, private"),
                Err(Private),
            ),
            (
                "private qualified",
                get.clone(),
                cc(200, "max-age=5, private=\"X\""),
                Err(Private),
            ),
            ("no-cache is storable", get.clone(), cc(200, "no-cache"), ok),
            (
                "request no-store",
                get.clone().header("Cache-Control", "no-store"),
                cc(200, "max-age=5"),
                Err(RequestNoStore),
            ),
            (
                "authorization",
                auth.clone(),
                cc(200, "max-age=5"),
                Err(Authorization),
            ),
            (
                "authorization + public",
                auth.clone(),
                cc(200, "max-age=5, public"),
                ok,
            ),
            (
                "authorization + s-maxage",
                auth.clone(),
                cc(200, "s-maxage=5"),
                ok,
            ),
            (
                "authorization + must-revalidate",
                auth.clone(),
                cc(200, "max-age=5, must-revalidate"),
                ok,
            ),
            (
                "vary star",
                get.clone(),
                cc(200, "max-age=5").header("Vary", "Accept, *"),
                Err(VaryStar),
            ),
            (
                "too large",
                get.clone(),
                cc(200, "max-age=5").header("Content-Length", "8388609"),
                Err(TooLarge),
            ),
            (
                "at the limit",
                get.clone(),
                cc(200, "max-age=5").header("Content-Length", "8388608"),
                ok,
            ),
            (
                "set-cookie",
                get.clone(),
                cc(200, "max-age=5").header("Set-Cookie", "a=b"),
                Err(SetCookie),
            ),
        ];
        let policy = CachePolicy::default();
        for (name, request, response, expected) in cases {
            assert_eq!(check(&request, &response, &policy), expected, "{name}");
        }
    }

    #[test]
    fn set_cookie_stripped_when_configured() {
        let policy = CachePolicy {
            set_cookie: SetCookie::Strip,
            ..CachePolicy::default()
        };
        let response = Resp::new(200)
            .header("Cache-Control", "max-age=5")
            .header("Set-Cookie", "a=b");
        assert_eq!(
            check(&Req::get("/"), &response, &policy),
            Ok(Storable {
                strip_set_cookie: true
            })
        );
    }
}
