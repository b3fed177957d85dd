use super::*;
use crate::date::format_http_date;
use crate::testing::{Req, Resp};

const T0: UnixTime = UnixTime(1_700_000_000);

fn date(offset: i64) -> String {
    format_http_date(UnixTime(T0.0.saturating_add_signed(offset)))
}

/// Freshness of a response received at T0 (request sent at T0).
fn freshness(policy: &CachePolicy, response: &Resp) -> Freshness {
    let directives = ResponseDirectives::parse(response);
    Freshness::new(policy, response, &directives, Timing::new(response, T0, T0))
}

#[test]
#[allow(clippy::too_many_lines, reason = "a table of cases, one per line")]
fn lifetime_table() {
    let policy = CachePolicy::default();
    let heuristic = CachePolicy {
        heuristic_percent: 10,
        heuristic_max: 3600,
        ..CachePolicy::default()
    };
    let cases: Vec<(&str, &CachePolicy, Resp, u64)> = vec![
        (
            "max-age",
            &policy,
            Resp::new(200).header("Cache-Control", "max-age=60"),
            60,
        ),
        (
            "s-maxage wins",
            &policy,
            Resp::new(200).header("Cache-Control", "max-age=60, s-maxage=5"),
            5,
        ),
        (
            "max-age beats Expires",
            &policy,
            Resp::new(200)
                .header("Cache-Control", "max-age=7")
                .header("Expires", &date(100)),
            7,
        ),
        (
            "Expires - Date",
            &policy,
            Resp::new(200)
                .header("Date", &date(0))
                .header("Expires", &date(120)),
            120,
        ),
        (
            "Expires in the past",
            &policy,
            Resp::new(200)
                .header("Date", &date(0))
                .header("Expires", &date(-5)),
            0,
        ),
        (
            "Expires invalid",
            &policy,
            Resp::new(200).header("Expires", "0"),
            0,
        ),
        (
            "Expires twice",
            &policy,
            Resp::new(200)
                .header("Expires", &date(60))
                .header("Expires", &date(60)),
            0,
        ),
        (
            "nothing, heuristics off",
            &policy,
            Resp::new(200).header("Last-Modified", &date(-100_000)),
            0,
        ),
        (
            "heuristic 10%",
            &heuristic,
            Resp::new(200)
                .header("Date", &date(0))
                .header("Last-Modified", &date(-10_000)),
            1000,
        ),
        (
            "heuristic capped",
            &heuristic,
            Resp::new(200).header("Last-Modified", &date(-1_000_000)),
            3600,
        ),
        (
            "heuristic needs Last-Modified",
            &heuristic,
            Resp::new(200),
            0,
        ),
        (
            "heuristic not for 302",
            &heuristic,
            Resp::new(302).header("Last-Modified", &date(-10_000)),
            0,
        ),
        (
            "heuristic for public 302",
            &heuristic,
            Resp::new(302)
                .header("Cache-Control", "public")
                .header("Last-Modified", &date(-10_000)),
            1000,
        ),
    ];
    for (name, policy, response, expected) in cases {
        assert_eq!(freshness(policy, &response).lifetime, expected, "{name}");
    }
}

#[test]
fn age_calculation() {
    // §4.2.3 with every term: Age 10 from upstream, 2 s in flight, Date 5 s behind.
    let response = Resp::new(200).header("Age", "10").header("Date", &date(-5));
    let timing = Timing::new(&response, UnixTime(T0.0 - 2), T0);
    // apparent_age = 5; corrected_age_value = 10 + 2 = 12; initial = 12.
    assert_eq!(timing.current_age(T0), 12);
    assert_eq!(timing.current_age(UnixTime(T0.0 + 30)), 42);
    // A Date in the future does not make the age negative.
    let early = Resp::new(200).header("Date", &date(50));
    assert_eq!(Timing::new(&early, T0, T0).current_age(T0), 0);
    // Without Date, the response time stands in.
    let bare = Resp::new(200);
    assert_eq!(
        Timing::new(&bare, T0, T0).current_age(UnixTime(T0.0 + 3)),
        3
    );
    // A malformed Age is ignored.
    let bad = Resp::new(200).header("Age", "-4");
    assert_eq!(Timing::new(&bad, T0, T0).current_age(T0), 0);
    // A list counts by its first member (§5.1).
    let list = Resp::new(200).header("Age", "7200, 0");
    assert_eq!(Timing::new(&list, T0, T0).current_age(T0), 7200);
}

/// Usability at `elapsed` seconds after storing, for a response and request.
fn usable(response: &Resp, request: &Req, elapsed: u64, policy: &CachePolicy) -> Usability {
    freshness(policy, response)
        .usability(&RequestDirectives::parse(request), UnixTime(T0.0 + elapsed))
}

#[test]
#[allow(clippy::too_many_lines, reason = "a table of cases, one per line")]
fn usability_table() {
    use Usability::*;
    let policy = CachePolicy::default();
    let defaults = CachePolicy {
        stale_while_revalidate: 30,
        stale_if_error: 300,
        ..CachePolicy::default()
    };
    let cc = |value: &str| Resp::new(200).header("Cache-Control", value);
    let get = Req::get("/");
    let ask = |value: &str| Req::get("/").header("Cache-Control", value);
    let cases: Vec<(&str, Resp, Req, u64, &CachePolicy, Usability)> = vec![
        ("fresh", cc("max-age=60"), get.clone(), 59, &policy, Fresh),
        (
            "stale at the lifetime",
            cc("max-age=60"),
            get.clone(),
            60,
            &policy,
            Revalidate,
        ),
        (
            "stale",
            cc("max-age=60"),
            get.clone(),
            61,
            &policy,
            Revalidate,
        ),
        (
            "response no-cache",
            cc("max-age=60, no-cache"),
            get.clone(),
            0,
            &policy,
            Revalidate,
        ),
        (
            "request no-cache",
            cc("max-age=60"),
            ask("no-cache"),
            0,
            &policy,
            Revalidate,
        ),
        (
            "Pragma no-cache",
            cc("max-age=60"),
            Req::get("/").header("Pragma", "no-cache"),
            0,
            &policy,
            Revalidate,
        ),
        (
            "request max-age=0",
            cc("max-age=60"),
            ask("max-age=0"),
            1,
            &policy,
            Revalidate,
        ),
        (
            "request max-age met",
            cc("max-age=60"),
            ask("max-age=10"),
            10,
            &policy,
            Fresh,
        ),
        (
            "request max-age exceeded",
            cc("max-age=60"),
            ask("max-age=10"),
            11,
            &policy,
            Revalidate,
        ),
        (
            "min-fresh met",
            cc("max-age=60"),
            ask("min-fresh=20"),
            40,
            &policy,
            Fresh,
        ),
        (
            "min-fresh not met",
            cc("max-age=60"),
            ask("min-fresh=20"),
            41,
            &policy,
            Revalidate,
        ),
        (
            "max-stale any",
            cc("max-age=60"),
            ask("max-stale"),
            10_000,
            &policy,
            StaleAccepted,
        ),
        (
            "max-stale within",
            cc("max-age=60"),
            ask("max-stale=30"),
            90,
            &policy,
            StaleAccepted,
        ),
        (
            "max-stale beyond",
            cc("max-age=60"),
            ask("max-stale=30"),
            91,
            &policy,
            Revalidate,
        ),
        (
            "max-stale vs must-revalidate",
            cc("max-age=60, must-revalidate"),
            ask("max-stale"),
            61,
            &policy,
            Revalidate,
        ),
        (
            "max-stale vs proxy-revalidate",
            cc("max-age=60, proxy-revalidate"),
            ask("max-stale"),
            61,
            &policy,
            Revalidate,
        ),
        (
            "max-stale vs s-maxage",
            cc("s-maxage=60"),
            ask("max-stale"),
            61,
            &policy,
            Revalidate,
        ),
        (
            "max-stale vs no-cache",
            cc("max-age=60, no-cache"),
            ask("max-stale"),
            61,
            &policy,
            Revalidate,
        ),
        (
            "swr within",
            cc("max-age=60, stale-while-revalidate=30"),
            get.clone(),
            89,
            &policy,
            StaleWhileRevalidate,
        ),
        (
            "swr at its last second",
            cc("max-age=60, stale-while-revalidate=30"),
            get.clone(),
            90,
            &policy,
            StaleWhileRevalidate,
        ),
        (
            "swr beyond",
            cc("max-age=60, stale-while-revalidate=30"),
            get.clone(),
            91,
            &policy,
            Revalidate,
        ),
        (
            "swr=0 at the lifetime",
            cc("max-age=60, stale-while-revalidate=0"),
            get.clone(),
            60,
            &policy,
            Revalidate,
        ),
        (
            "swr default",
            cc("max-age=60"),
            get.clone(),
            70,
            &defaults,
            StaleWhileRevalidate,
        ),
        (
            "swr default vs must-revalidate",
            cc("max-age=60, must-revalidate"),
            get.clone(),
            70,
            &defaults,
            Revalidate,
        ),
        (
            "swr explicit with must-revalidate",
            cc("max-age=60, must-revalidate, stale-while-revalidate=30"),
            get.clone(),
            70,
            &policy,
            StaleWhileRevalidate,
        ),
        (
            "swr vs request no-cache",
            cc("max-age=60, stale-while-revalidate=30"),
            ask("no-cache"),
            70,
            &policy,
            Revalidate,
        ),
        (
            "swr vs request max-age",
            cc("max-age=60, stale-while-revalidate=30"),
            ask("max-age=60"),
            70,
            &policy,
            Revalidate,
        ),
        (
            "zero lifetime",
            Resp::new(200).header("ETag", "\"a\""),
            get.clone(),
            0,
            &policy,
            Revalidate,
        ),
    ];
    for (name, response, request, elapsed, policy, expected) in cases {
        assert_eq!(
            usable(&response, &request, elapsed, policy),
            expected,
            "{name}"
        );
    }
}

#[test]
#[allow(clippy::too_many_lines, reason = "a table of cases, one per line")]
fn stale_if_error_table() {
    let policy = CachePolicy::default();
    let defaults = CachePolicy {
        stale_if_error: 300,
        ..CachePolicy::default()
    };
    let cc = |value: &str| Resp::new(200).header("Cache-Control", value);
    let get = Req::get("/");
    let ask = |value: &str| Req::get("/").header("Cache-Control", value);
    let cases: Vec<(&str, Resp, Req, u64, &CachePolicy, bool)> = vec![
        (
            "fresh, validated at the request's demand, no window",
            cc("max-age=60"),
            ask("no-cache"),
            10,
            &policy,
            false,
        ),
        (
            "fresh, validated at the request's demand, a window",
            cc("max-age=60, stale-if-error=100"),
            ask("no-cache"),
            10,
            &policy,
            true,
        ),
        (
            "fresh, validated at the request's demand, the default window",
            cc("max-age=60"),
            ask("max-age=0"),
            10,
            &defaults,
            true,
        ),
        (
            "stale, no window",
            cc("max-age=60"),
            get.clone(),
            61,
            &policy,
            false,
        ),
        (
            "response window",
            cc("max-age=60, stale-if-error=100"),
            get.clone(),
            160,
            &policy,
            true,
        ),
        (
            "beyond response window",
            cc("max-age=60, stale-if-error=100"),
            get.clone(),
            161,
            &policy,
            false,
        ),
        (
            "default window",
            cc("max-age=60"),
            get.clone(),
            360,
            &defaults,
            true,
        ),
        (
            "default vs must-revalidate",
            cc("max-age=60, must-revalidate"),
            get.clone(),
            61,
            &defaults,
            false,
        ),
        (
            "explicit with must-revalidate",
            cc("max-age=60, must-revalidate, stale-if-error=10"),
            get.clone(),
            70,
            &policy,
            true,
        ),
        (
            "client window",
            cc("max-age=60"),
            ask("stale-if-error=20"),
            80,
            &policy,
            true,
        ),
        (
            "client window vs must-revalidate",
            cc("max-age=60, must-revalidate"),
            ask("stale-if-error=20"),
            80,
            &policy,
            false,
        ),
    ];
    for (name, response, request, elapsed, policy, expected) in cases {
        let fresh = freshness(policy, &response);
        assert_eq!(
            fresh.usable_on_error(
                &RequestDirectives::parse(&request),
                UnixTime(T0.0 + elapsed)
            ),
            expected,
            "{name}"
        );
    }
}

/// A `no-cache` response is used only after a validation that succeeded (§5.2.2.4): never
/// because the node failed, fresh or within a stale-if-error window.
#[test]
fn no_cache_is_never_served_on_error() {
    let defaults = CachePolicy {
        stale_if_error: 300,
        ..CachePolicy::default()
    };
    let response = Resp::new(200).header("Cache-Control", "max-age=60, no-cache");
    let request = RequestDirectives::parse(&Req::get("/"));
    for (policy, elapsed) in [(&CachePolicy::default(), 10), (&defaults, 70)] {
        let fresh = freshness(policy, &response);
        assert!(
            !fresh.usable_on_error(&request, UnixTime(T0.0 + elapsed)),
            "{elapsed}"
        );
    }
}

/// RFC 9213 §2.1: with a targeted field, `Expires` is set aside with `Cache-Control`.
#[test]
fn a_targeted_field_sets_expires_aside() {
    let policy = CachePolicy::default();
    let lifetime = |response: &Resp| {
        let directives = ResponseDirectives::for_cache(response, &policy.targeted);
        Freshness::new(
            &policy,
            response,
            &directives,
            Timing::new(response, T0, T0),
        )
        .lifetime
    };
    let expires_later = |cdn: &str| {
        Resp::new(200)
            .header("Date", &date(0))
            .header("Expires", &date(10_000))
            .header("CDN-Cache-Control", cdn)
    };
    assert_eq!(lifetime(&expires_later("max-age=0")), 0);
    assert_eq!(lifetime(&expires_later("public")), 0);
    assert_eq!(lifetime(&expires_later("max-age=60")), 60);
    let expired = Resp::new(200)
        .header("Date", &date(0))
        .header("Expires", "0")
        .header("CDN-Cache-Control", "max-age=3600");
    assert_eq!(lifetime(&expired), 3600);
    // an invalid targeted field: Expires counts again
    assert_eq!(lifetime(&expires_later("max-age=\u{1}")), 10_000);
}
