//! Every match and action, rule order and first-match semantics, through
//! configs parsed like `weir serve` parses them.

use std::net::IpAddr;

use weir_config::{PoolId, TlsVersion};

use super::*;
use crate::test_support::head;

/// The rules of a virtual server whose section ends with `rules`; pools
/// `web` (0), `api` (1) and `static` (2) exist.
fn rule_set(rules: &str) -> RuleSet {
    let text = format!(
        "[virtual_servers.web]\nlisten = \"127.0.0.1:8080\"\npool = \"web\"\n{rules}\n\
         [pools.web]\nnodes = [{{ address = \"127.0.0.1:8081\" }}]\n\
         [pools.api]\nnodes = [{{ address = \"127.0.0.1:8082\" }}]\n\
         [pools.static]\nnodes = [{{ address = \"127.0.0.1:8083\" }}]\n"
    );
    let config = weir_config::parse_str(&text, "t.toml").unwrap_or_else(|e| panic!("{e}"));
    RuleSet::new(&config.virtual_servers[0].traffic).unwrap()
}

fn get(target: &str, headers: &str) -> RequestHead {
    head(&format!(
        "GET {target} HTTP/1.1\r\nHost: www.example.com\r\n{headers}\r\n"
    ))
}

fn client() -> IpAddr {
    "192.0.2.10".parse().unwrap()
}

fn evaluate(rules: &RuleSet, request: &RequestHead) -> Decision {
    rules.evaluate(request, &Facts::plain(client()))
}

fn pool_of(rules: &RuleSet, request: &RequestHead) -> Outcome {
    evaluate(rules, request).outcome
}

const API: Outcome = Outcome::Pool(PoolId(1));
const STATIC: Outcome = Outcome::Pool(PoolId(2));

#[test]
fn host_exact_and_wildcard() {
    let rules = rule_set(
        "[[virtual_servers.web.rules]]\nmatch.host = \"api.example.com\"\npool = \"api\"\n\
         [[virtual_servers.web.rules]]\nmatch.host = \"*.cdn.example.com\"\npool = \"static\"\n",
    );
    let with_host = |host: &str| head(&format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n"));
    assert_eq!(pool_of(&rules, &with_host("API.Example.com:8443")), API);
    assert_eq!(pool_of(&rules, &with_host("api.example.com.")), API);
    assert_eq!(pool_of(&rules, &with_host("a.b.cdn.example.com")), STATIC);
    assert_eq!(
        pool_of(&rules, &with_host("cdn.example.com")),
        Outcome::Default
    );
    assert_eq!(
        pool_of(&rules, &with_host("xcdn.example.com")),
        Outcome::Default
    );
}

#[test]
fn path_exact_prefix_and_regex_on_the_normalised_path() {
    let rules = rule_set(
        "[[virtual_servers.web.rules]]\nmatch.path = \"/exact\"\npool = \"api\"\n\
         [[virtual_servers.web.rules]]\nmatch.path_prefix = [\"/static/\", \"/img/\"]\npool = \"static\"\n\
         [[virtual_servers.web.rules]]\nmatch.path_regex = \"^/admin(/|$)\"\ndeny = true\n",
    );
    assert_eq!(pool_of(&rules, &get("/exact", "")), API);
    assert_eq!(pool_of(&rules, &get("/exact?q=1", "")), API);
    assert_eq!(pool_of(&rules, &get("/exact/", "")), Outcome::Default);
    assert_eq!(pool_of(&rules, &get("/img/a.png", "")), STATIC);
    for sneaky in ["/admin", "/%61dmin/x", "//admin", "/static/../admin/"] {
        let decision = evaluate(&rules, &get(sneaky, ""));
        assert_eq!(decision.answer().map(|a| a.status), Some(403), "{sneaky}");
        assert_eq!(decision.rule, Some(2));
    }
    assert_eq!(
        pool_of(&rules, &get("/administrator", "")),
        Outcome::Default
    );
}

#[test]
fn methods_headers_queries_cookies() {
    let rules = rule_set(
        "[[virtual_servers.web.rules]]\nmatch.method = [\"PUT\", \"DELETE\"]\ndeny = 405\n\
         [[virtual_servers.web.rules]]\nmatch.header = { name = \"X-Beta\", equals = [\"1\", \"yes\"] }\npool = \"api\"\n\
         [[virtual_servers.web.rules]]\nmatch.header = { name = \"User-Agent\", regex = \"(?i)bot\" }\ndeny = true\n\
         [[virtual_servers.web.rules]]\nmatch.query = { name = \"v\", equals = \"2\" }\npool = \"static\"\n\
         [[virtual_servers.web.rules]]\nmatch.cookie = { name = \"canary\", present = true }\npool = \"api\"\n\
         [[virtual_servers.web.rules]]\nmatch.header = { name = \"Accept\", present = false }\npool = \"static\"\n",
    );
    let put = head("PUT / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nAccept: */*\r\n\r\n");
    assert_eq!(evaluate(&rules, &put).answer().map(|a| a.status), Some(405));
    // In any case: applications that upper-case the method would run `delete` as DELETE.
    for method in ["delete", "Delete", "put"] {
        let request = head(&format!(
            "{method} / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nAccept: */*\r\n\r\n"
        ));
        assert_eq!(
            evaluate(&rules, &request).answer().map(|a| a.status),
            Some(405),
            "{method}"
        );
    }
    let accept = "Accept: */*\r\n";
    assert_eq!(
        pool_of(&rules, &get("/", &format!("{accept}x-beta: yes\r\n"))),
        API
    );
    assert_eq!(
        pool_of(&rules, &get("/", &format!("{accept}X-Beta: 2\r\n"))),
        Outcome::Default
    );
    let bot = format!("{accept}User-Agent: GoogleBot/2.1\r\n");
    assert_eq!(
        evaluate(&rules, &get("/", &bot)).answer().map(|a| a.status),
        Some(403)
    );
    assert_eq!(pool_of(&rules, &get("/?a=1&v=2", accept)), STATIC);
    assert_eq!(pool_of(&rules, &get("/?v=22", accept)), Outcome::Default);
    let canary = format!("{accept}Cookie: a=b; canary=1\r\n");
    assert_eq!(pool_of(&rules, &get("/", &canary)), API);
    assert_eq!(pool_of(&rules, &get("/", "")), STATIC, "no Accept header");
}

/// A cookie or header condition tests every value the request carries, in any form:
/// a deny on `role=admin` is not dodged by sending `role=user` first, two lines, a list
/// or an escape.
#[test]
fn every_cookie_and_header_value_is_tested() {
    let rules = rule_set(
        "[[virtual_servers.web.rules]]\nmatch.cookie = { name = \"role\", equals = \"admin\" }\ndeny = true\n\
         [[virtual_servers.web.rules]]\nmatch.header = { name = \"X-Role\", equals = \"admin\" }\ndeny = true\n",
    );
    let denied = |headers: &str| evaluate(&rules, &get("/", headers)).rule.is_some();
    assert!(denied("Cookie: role=admin\r\n"));
    assert!(denied("Cookie: role=user; role=admin\r\n"));
    assert!(denied("Cookie: role=user\r\nCookie: role=admin\r\n"));
    assert!(denied("Cookie: role=%61dmin\r\n"));
    assert!(denied("Cookie: role=\"admin\"\r\n"));
    assert!(!denied("Cookie: role=user; xrole=admin\r\n"));
    assert!(denied("X-Role: admin\r\n"));
    assert!(denied("X-Role: user\r\nX-Role: admin\r\n"));
    assert!(denied("X-Role: user, admin\r\n"));
    assert!(denied("X-Role: user,admin\r\n"));
    assert!(!denied("X-Role: user, administrator\r\n"));
    // A field of one value is never split: an allow-list written with `not` sees all of it.
    let rules = rule_set(
        "[[virtual_servers.web.rules]]\nmatch.not = { header = { name = \"User-Agent\", regex = \"^Mozilla/\" } }\ndeny = true\n\
         [[virtual_servers.web.rules]]\nmatch.not = { header = { name = \"Origin\", equals = \"https://app.example\" } }\ndeny = true\n",
    );
    let denied = |headers: &str| evaluate(&rules, &get("/", headers)).rule.is_some();
    assert!(denied(
        "User-Agent: sqlmap/1.7, Mozilla/5.0\r\nOrigin: https://app.example\r\n"
    ));
    assert!(!denied(
        "User-Agent: Mozilla/5.0 (X11, Linux)\r\nOrigin: https://app.example\r\n"
    ));
    assert!(denied(
        "User-Agent: Mozilla/5.0\r\nOrigin: https://evil.example, https://app.example\r\n"
    ));
}

/// An IPv6 literal matches however either side spells it (RFC 5952 canonical form).
#[test]
fn ipv6_host_literals_match_in_any_spelling() {
    let rules =
        rule_set("[[virtual_servers.web.rules]]\nmatch.host = \"[2001:DB8:0::1]\"\ndeny = true\n");
    let denied = |host: &str| {
        let request = head(&format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n"));
        evaluate(&rules, &request).rule.is_some()
    };
    assert!(denied("[2001:db8::1]"));
    assert!(denied("[2001:db8:0:0::1]:8443"));
    assert!(denied("[2001:DB8::1]"));
    assert!(!denied("[2001:db8::2]"));
}

#[test]
fn client_address_sni_and_client_subject() {
    let rules = rule_set(
        "[[virtual_servers.web.rules]]\nmatch.client_address = \"10.0.0.0/8\"\npool = \"api\"\n\
         [[virtual_servers.web.rules]]\nmatch.sni = \"*.internal.example\"\npool = \"static\"\n\
         [[virtual_servers.web.rules]]\nmatch.client_subject = \"CN=ops\"\nrespond = { body = \"hello ops\" }\n\
         [[virtual_servers.web.rules]]\nmatch.client_subject_regex = \"^CN=svc-\"\ndeny = true\n",
    );
    let request = get("/", "");
    let mut facts = Facts::plain("10.2.3.4".parse().unwrap());
    assert_eq!(rules.evaluate(&request, &facts).outcome, API);
    facts.client_address = "::ffff:10.2.3.4".parse().unwrap();
    assert_eq!(rules.evaluate(&request, &facts).outcome, API);
    facts.client_address = client();
    assert_eq!(rules.evaluate(&request, &facts).outcome, Outcome::Default);
    facts.sni = Some("db.internal.example");
    assert_eq!(rules.evaluate(&request, &facts).outcome, STATIC);
    facts.sni = None;
    facts.client_subject = Some("CN=ops");
    let answer = rules.evaluate(&request, &facts).answer().cloned().unwrap();
    assert_eq!((answer.status, &answer.body[..]), (200, &b"hello ops"[..]));
    facts.client_subject = Some("CN=svc-billing");
    assert_eq!(
        rules.evaluate(&request, &facts).answer().map(|a| a.status),
        Some(403)
    );
}

#[test]
fn all_any_not() {
    let rules = rule_set(
        "[[virtual_servers.web.rules]]\n\
         match.all = [{ path_prefix = \"/api/\" }, { any = [{ method = \"POST\" }, { header = { name = \"X-Write\", present = true } }] }]\n\
         match.not = { client_address = \"10.0.0.0/8\" }\n\
         deny = true\n",
    );
    let post = head("POST /api/x HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n");
    assert!(evaluate(&rules, &post).answer().is_some());
    assert!(
        evaluate(&rules, &get("/api/x", "X-Write: 1\r\n"))
            .answer()
            .is_some()
    );
    assert!(evaluate(&rules, &get("/api/x", "")).answer().is_none());
    assert!(
        evaluate(&rules, &get("/other", "X-Write: 1\r\n"))
            .answer()
            .is_none()
    );
    let inside = Facts::plain("10.0.0.1".parse().unwrap());
    assert!(rules.evaluate(&post, &inside).answer().is_none());
}

#[test]
fn first_terminal_match_wins_and_edits_accumulate() {
    let rules = rule_set(
        "[[virtual_servers.web.rules]]\nrequest_headers = { set = { X-Seen = \"1\" }, add = { X-Trail = \"a\" } }\n\
         [[virtual_servers.web.rules]]\nmatch.path_prefix = \"/api/\"\nrate_limit = \"r\"\nrequest_headers = { add = { X-Trail = \"b\" }, remove = \"X-Seen\" }\n\
         [[virtual_servers.web.rules]]\nmatch.path_prefix = \"/api/\"\npool = \"api\"\nresponse_headers = { set = { X-Rule = \"api\" } }\n\
         [[virtual_servers.web.rules]]\nmatch.path_prefix = \"/api/\"\npool = \"static\"\nrequest_headers = { add = { X-Never = \"1\" } }\n\
         [virtual_servers.web.rate_limits.r]\nrate = 10\n",
    );
    let decision = evaluate(&rules, &get("/api/x", "X-Seen: client\r\n"));
    assert_eq!(decision.outcome, API);
    assert_eq!(decision.rule, Some(2));
    assert_eq!(rules.rule_name(2), Some("rules[2]"));
    let edits = &decision.request_headers;
    assert!(
        edits.removes(b"x-seen"),
        "the later remove also drops the client's field"
    );
    let appended: Vec<_> = edits.appended().collect();
    assert_eq!(
        appended,
        vec![(&b"X-Trail"[..], &b"a"[..]), (&b"X-Trail"[..], &b"b"[..])]
    );
    let response: Vec<_> = decision.response_headers.appended().collect();
    assert_eq!(response, vec![(&b"X-Rule"[..], &b"api"[..])]);
    assert_eq!(decision.rate_limits, vec![0]);

    let other = evaluate(&rules, &get("/x", ""));
    assert_eq!(other.outcome, Outcome::Default);
    assert_eq!(other.rule, None);
    assert_eq!(other.request_headers.appended().count(), 2);
    assert!(other.rate_limits.is_empty());
}

#[test]
fn redirects_with_captures_and_variables() {
    let rules = rule_set(
        "[[virtual_servers.web.rules]]\nmatch.path_regex = \"^/blog/(?P<year>[0-9]{4})/(.+)$\"\n\
         redirect = { status = 308, location = \"https://blog.example.com/${year}/${2}?from=${host}&${query}\" }\n\
         [[virtual_servers.web.rules]]\nmatch.path = \"/go\"\nredirect = { location = \"${scheme}://${host}/new${uri}\" }\n",
    );
    let decision = evaluate(&rules, &get("/blog/2024/hello-world?utm=x", ""));
    let answer = decision.answer().unwrap();
    assert_eq!(answer.status, 308);
    assert_eq!(
        answer.headers,
        vec![(
            Bytes::from_static(b"Location"),
            Bytes::from_static(
                b"https://blog.example.com/2024/hello-world?from=www.example.com&utm=x"
            )
        )]
    );
    let answer = evaluate(&rules, &get("/go?a=1", ""))
        .answer()
        .cloned()
        .unwrap();
    assert_eq!(answer.status, 302);
    assert_eq!(
        &answer.headers[0].1[..],
        b"http://www.example.com/new/go?a=1"
    );
}

#[test]
fn header_values_with_variables() {
    let rules = rule_set(
        "[[virtual_servers.web.rules]]\nmatch.path_regex = \"^/u/([0-9]+)\"\n\
         request_headers = { set = { X-User = \"${1}\", X-Client = \"${client_address}\", X-Id = \"${request_id}\", X-Tls = \"${tls_version}\", X-Sni = \"${sni}\", X-Subject = \"${client_subject}\", X-Lang = \"${query.lang}/${cookie.c}/${header.accept}\", X-Method = \"${method} ${path}\" } }\n",
    );
    let request = get("/u/77?lang=fr", "Accept: text/html\r\nCookie: c=v\r\n");
    let facts = Facts {
        client_address: "2001:db8::5".parse().unwrap(),
        https: true,
        sni: Some("www.example.com"),
        tls_version: Some(TlsVersion::Tls13),
        client_subject: Some("CN=a\nb"),
        request_id: "abc123",
    };
    let decision = rules.evaluate(&request, &facts);
    let values: Vec<(String, String)> = decision
        .request_headers
        .appended()
        .map(|(n, v)| {
            (
                String::from_utf8_lossy(n).into(),
                String::from_utf8_lossy(v).into(),
            )
        })
        .collect();
    let expected = [
        ("X-User", "77"),
        ("X-Client", "2001:db8::5"),
        ("X-Id", "abc123"),
        ("X-Tls", "1.3"),
        ("X-Sni", "www.example.com"),
        ("X-Subject", "CN=a?b"),
        ("X-Lang", "fr/v/text/html"),
        ("X-Method", "GET /u/77"),
    ];
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
    assert_eq!(values, expected);
}

#[test]
fn path_rewrites_compose() {
    let rules = rule_set(
        "[[virtual_servers.web.rules]]\nmatch.path_prefix = \"/api/\"\nrewrite_path = { strip_prefix = \"/api\" }\n\
         [[virtual_servers.web.rules]]\nmatch.path_prefix = \"/api/v1/\"\nrewrite_path = { replace_prefix = \"/v1/\", with = \"/version-1/\" }\n\
         [[virtual_servers.web.rules]]\nrewrite_path = { regex = \"^/version-1/users/([0-9]+)$\", with = \"/users/${1}/profile\" }\n\
         [[virtual_servers.web.rules]]\nmatch.path_regex = \"^/old/(.*)$\"\nrewrite_path = { replace_prefix = \"/old/\", with = \"/new/${1}/\" }\n",
    );
    let path = |target: &str| evaluate(&rules, &get(target, "")).path;
    assert_eq!(path("/api/v2/x").as_deref(), Some(&b"/v2/x"[..]));
    assert_eq!(
        path("/api/v1/items").as_deref(),
        Some(&b"/version-1/items"[..])
    );
    assert_eq!(
        path("/api/v1/users/5").as_deref(),
        Some(&b"/users/5/profile"[..])
    );
    assert_eq!(path("/old/a/b").as_deref(), Some(&b"/new/a/b/a/b"[..]));
    assert_eq!(path("/other"), None);
    assert_eq!(path("/api/").as_deref(), Some(&b"/"[..]));
}

/// What a rewrite takes from the request is encoded into one valid path: a header's
/// spaces, `?` or `/` cannot change the request line or climb out of its place.
#[test]
fn values_in_a_rewritten_path_are_encoded() {
    let rules = rule_set(
        "[[virtual_servers.web.rules]]\nmatch.path_prefix = \"/t/\"\n\
         rewrite_path = { replace_prefix = \"/t/\", with = \"/api/${header.X-Tenant}/\" }\n",
    );
    let path = |tenant: &str| {
        let decision = evaluate(&rules, &get("/t/x", &format!("X-Tenant: {tenant}\r\n")));
        String::from_utf8(decision.path.unwrap().to_vec()).unwrap()
    };
    assert_eq!(path("acme"), "/api/acme/x");
    assert_eq!(path("a b HTTP/1.1"), "/api/a%20b%20HTTP%2F1.1/x");
    assert_eq!(path("../../admin?"), "/api/..%2F..%2Fadmin%3F/x");
    assert_eq!(path("a#b%2F\\c"), "/api/a%23b%2F%5Cc/x");
    assert_eq!(path(".."), "/api//x");
    assert_eq!(path("é"), "/api/%C3%A9/x");
    // A value as sent is decoded before it is encoded: encoded once.
    assert_eq!(path("acme%20inc"), "/api/acme%20inc/x");
    assert_eq!(path("a%2Fb"), "/api/a%2Fb/x");
    assert_eq!(path("%2e%2e"), "/api//x");
    // A capture of the path keeps its slashes.
    let rules = rule_set(
        "[[virtual_servers.web.rules]]\nmatch.path_regex = \"^/old/(.*)$\"\n\
         rewrite_path = { regex = \"^/old/(.*)$\", with = \"/new/${1}\" }\n",
    );
    let decision = evaluate(&rules, &get("/old/a/b%2Fc", ""));
    assert_eq!(decision.path.as_deref(), Some(&b"/new/a/b%2Fc"[..]));
}

/// `${path}` and `${uri}` are the path rules matched: a `//host/..` path sent to a
/// trailing-slash redirect stays on the site.
#[test]
fn redirects_use_the_normalised_path() {
    let rules = rule_set(
        "[[virtual_servers.web.rules]]\nmatch.path_regex = \"^/dir/[a-z]+$\"\n\
         redirect = { location = \"${path}/\" }\n\
         [[virtual_servers.web.rules]]\nmatch.path_prefix = \"/go/\"\n\
         redirect = { location = \"${uri}\" }\n",
    );
    let location = |target: &str| {
        let decision = evaluate(&rules, &get(target, ""));
        String::from_utf8(decision.answer().unwrap().headers[0].1.to_vec()).unwrap()
    };
    assert_eq!(location("//evil.com/../dir/abc"), "/dir/abc/");
    assert_eq!(location("/dir/abc"), "/dir/abc/");
    assert_eq!(location("//evil.com/../go/x?a=1"), "/go/x?a=1");
    assert_eq!(location("/go/x?a=1"), "/go/x?a=1");
    // Browsers read a backslash as a slash: it goes out encoded.
    assert_eq!(location("/go/\\evil.com"), "/go/%5Cevil.com");
}

/// A capture is part of the same path: `/\evil.example` from a capture must not become
/// a `Location` a browser reads as `//evil.example`.
#[test]
fn redirects_escape_backslashes_in_captures() {
    let rules = rule_set(
        "[[virtual_servers.web.rules]]\nmatch.path_regex = \"^/cap/(?<rest>.*)$\"\n\
         redirect = { location = \"/${1}?r=${rest}\" }\n",
    );
    let decision = evaluate(&rules, &get("/cap/\\evil.example", ""));
    let location = &decision.answer().unwrap().headers[0].1;
    assert_eq!(&location[..], b"/%5Cevil.example?r=%5Cevil.example");
}

#[test]
fn direct_responses_render_templates() {
    let rules = rule_set(
        "[[virtual_servers.web.rules]]\nmatch.path = \"/whoami\"\n\
         respond = { status = 200, headers = { Content-Type = \"text/plain\", X-Id = \"${request_id}\" }, body = \"you are ${client_address}\\n\" }\n",
    );
    let mut facts = Facts::plain(client());
    facts.request_id = "rid-1";
    let decision = rules.evaluate(&get("/whoami", ""), &facts);
    let answer = decision.answer().unwrap();
    assert_eq!(answer.status, 200);
    assert_eq!(&answer.body[..], b"you are 192.0.2.10\n");
    assert_eq!(&answer.headers[1].1[..], b"rid-1");
}

#[test]
fn a_decision_is_reused_without_leftovers() {
    let rules = rule_set(
        "[[virtual_servers.web.rules]]\nmatch.path_prefix = \"/a\"\nrewrite_path = { strip_prefix = \"/a\" }\npool = \"api\"\n\
         [[virtual_servers.web.rules]]\nmatch.path_regex = \"^/b\"\nrequest_headers = { add = { X-B = \"1\" } }\n",
    );
    let mut decision = Decision::new();
    let facts = Facts::plain(client());
    rules.evaluate_into(&get("/a/x", ""), &facts, &mut decision);
    assert_eq!(
        (decision.outcome.clone(), decision.path.is_some()),
        (API, true)
    );
    rules.evaluate_into(&get("/b", ""), &facts, &mut decision);
    assert_eq!(decision.outcome, Outcome::Default);
    assert_eq!(decision.path, None);
    assert_eq!(decision.request_headers.appended().count(), 1);
    rules.evaluate_into(&get("/c", ""), &facts, &mut decision);
    assert!(decision.request_headers.is_empty());
}

#[test]
fn many_regex_routes_pick_the_first_that_matches() {
    let mut text = String::new();
    for index in 0..300 {
        let pool = if index == 250 { "api" } else { "static" };
        text.push_str(&format!(
            "[[virtual_servers.web.rules]]\nmatch.path_regex = \"^/r{index}/[a-z]+$\"\npool = \"{pool}\"\n"
        ));
    }
    let rules = rule_set(&text);
    let decision = evaluate(&rules, &get("/r250/abc", ""));
    assert_eq!((decision.outcome, decision.rule), (API, Some(250)));
    assert_eq!(
        evaluate(&rules, &get("/r250/ABC", "")).outcome,
        Outcome::Default
    );
}

#[test]
fn the_host_index_keeps_rule_order() {
    let rules = rule_set(
        "[[virtual_servers.web.rules]]\nmatch.path_prefix = \"/\"\nrequest_headers = { add = { X-First = \"1\" } }\n\
         [[virtual_servers.web.rules]]\nmatch.path_prefix = \"/late\"\npool = \"static\"\n\
         [[virtual_servers.web.rules]]\nmatch = { host = [\"a.example\", \"B.example\"], path_prefix = \"/\" }\npool = \"api\"\n\
         [[virtual_servers.web.rules]]\nmatch.host = \"*.example\"\npool = \"static\"\n",
    );
    let with_host =
        |host: &str, path: &str| head(&format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n"));
    let decision = evaluate(&rules, &with_host("A.EXAMPLE:80", "/x"));
    assert_eq!((decision.outcome.clone(), decision.rule), (API, Some(2)));
    assert_eq!(
        decision.request_headers.appended().count(),
        1,
        "rule 0 ran first"
    );
    assert_eq!(
        evaluate(&rules, &with_host("b.example", "/late")).rule,
        Some(1)
    );
    assert_eq!(
        evaluate(&rules, &with_host("c.example", "/x")).rule,
        Some(3)
    );
    assert_eq!(evaluate(&rules, &with_host("other", "/x")).rule, None);
}

#[test]
fn literal_prefixes_of_path_regexes() {
    use crate::condition::literal_prefix;
    assert_eq!(literal_prefix("^/api/v[0-9]+$").as_deref(), Some("/api/v"));
    assert_eq!(
        literal_prefix("^/users/([0-9]+)").as_deref(),
        Some("/users/")
    );
    assert_eq!(literal_prefix("^/ab?c").as_deref(), Some("/a"));
    assert_eq!(literal_prefix("^/a.b").as_deref(), Some("/a"));
    assert_eq!(literal_prefix("^(?i)/admin").as_deref(), Some(""));
    assert_eq!(literal_prefix("/admin"), None, "unanchored");
    // A top-level alternation's branches need not share a start.
    assert_eq!(literal_prefix("^/secret/|^/private/").as_deref(), Some(""));
    assert_eq!(literal_prefix("^/a/|/b").as_deref(), Some(""));
    // Bars in a group, a class or escaped leave the prefix as it is.
    assert_eq!(literal_prefix("^/api/(v1|v2)/").as_deref(), Some("/api/"));
    assert_eq!(literal_prefix("^/a/[|]x").as_deref(), Some("/a/"));
    assert_eq!(literal_prefix("^/a/\\|x").as_deref(), Some("/a/"));
    assert_eq!(literal_prefix("^/a/[\\]|]x").as_deref(), Some("/a/"));
    // Both kinds of path regex agree with each other.
    let rules = rule_set(
        "[[virtual_servers.web.rules]]\nmatch.path_regex = \"^/a/[0-9]+$\"\npool = \"api\"\n\
         [[virtual_servers.web.rules]]\nmatch.path_regex = \"/b/[0-9]+$\"\npool = \"static\"\n",
    );
    assert_eq!(pool_of(&rules, &get("/a/12", "")), API);
    assert_eq!(pool_of(&rules, &get("/a/x", "")), Outcome::Default);
    assert_eq!(pool_of(&rules, &get("/x/b/3", "")), STATIC);
    // Every branch of a top-level alternation matches, not only the first one's prefix.
    let rules = rule_set(
        "[[virtual_servers.web.rules]]\nmatch.path_regex = \"^/secret/|^/private/\"\ndeny = true\n\
         [[virtual_servers.web.rules]]\nmatch.path_regex = \"^/a/|/b\"\npool = \"api\"\n",
    );
    assert_eq!(evaluate(&rules, &get("/secret/x", "")).rule, Some(0));
    assert_eq!(evaluate(&rules, &get("/private/x", "")).rule, Some(0));
    assert_eq!(evaluate(&rules, &get("/x/b", "")).rule, Some(1));
    assert_eq!(evaluate(&rules, &get("/c", "")).rule, None);
}

#[test]
fn the_segment_index_keeps_rule_order() {
    let rules = rule_set(
        "[[virtual_servers.web.rules]]\nmatch.path_prefix = \"/shop/cart/\"\npool = \"api\"\n\
         [[virtual_servers.web.rules]]\nmatch.path_regex = \"/cart/\"\npool = \"static\"\n\
         [[virtual_servers.web.rules]]\nmatch.path_regex = \"^/shop/[a-z]+/\"\npool = \"web\"\n\
         [[virtual_servers.web.rules]]\nmatch.path = [\"/shop\", \"/other/x\"]\ndeny = true\n",
    );
    assert_eq!(evaluate(&rules, &get("/shop/cart/1", "")).rule, Some(0));
    assert_eq!(evaluate(&rules, &get("/x/cart/1", "")).rule, Some(1));
    assert_eq!(evaluate(&rules, &get("/shop/item/1", "")).rule, Some(2));
    assert_eq!(evaluate(&rules, &get("/shop", "")).rule, Some(3));
    assert_eq!(evaluate(&rules, &get("/other/x", "")).rule, Some(3));
    assert_eq!(
        evaluate(&rules, &get("//shop//item/", "")).rule,
        Some(2),
        "normalised first"
    );
}

#[test]
fn rules_filed_under_set_regexes_keep_rule_order() {
    // Unanchored regexes (run as one set) interleaved with rules tried for every request,
    // a segment rule, and a regex under `all` with another condition.
    let rules = rule_set(
        "[[virtual_servers.web.rules]]\nmatch.path_regex = \"/a/[0-9]+/\"\nrequest_headers = { add = { X-A = \"1\" } }\n\
         [[virtual_servers.web.rules]]\nmatch.header = { name = \"X-Early\", present = true }\npool = \"web\"\n\
         [[virtual_servers.web.rules]]\nmatch = { path_regex = \"/b/([0-9]+)$\", method = \"POST\" }\npool = \"static\"\n\
         [[virtual_servers.web.rules]]\nmatch.path_prefix = \"/x/\"\nrequest_headers = { add = { X-Segment = \"1\" } }\n\
         [[virtual_servers.web.rules]]\nmatch.path_regex = \"/b/([0-9]+)$\"\nrequest_headers = { set = { X-B = \"${1}\" } }\npool = \"api\"\n\
         [[virtual_servers.web.rules]]\nmatch.not = { path_regex = \"/c/\" }\ndeny = true\n",
    );
    // rule 0 (regex) applies, then rule 4 decides; rule 2 needs POST
    let decision = evaluate(&rules, &get("/x/a/1/b/42", ""));
    assert_eq!((decision.outcome.clone(), decision.rule), (API, Some(4)));
    let added: Vec<(&[u8], &[u8])> = decision.request_headers.appended().collect();
    let expected: [(&[u8], &[u8]); 3] = [(b"X-A", b"1"), (b"X-Segment", b"1"), (b"X-B", b"42")];
    assert_eq!(added, expected, "rules 0, 3 and 4 applied in rule order");
    // a rule tried for every request comes before the regex rules after it
    let early = evaluate(&rules, &get("/b/7", "X-Early: 1\r\n"));
    assert_eq!(early.rule, Some(1));
    // the regex under `all` is filed too, and still needs its other condition
    let post = head("POST /b/7 HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(evaluate(&rules, &post).rule, Some(2));
    // no regex matches: only `not` decides
    assert_eq!(evaluate(&rules, &get("/nothing", "")).rule, Some(5));
    assert_eq!(evaluate(&rules, &get("/c/", "")).rule, None);
    // a decision reused across requests keeps no regex rules from the last one
    let mut decision = Decision::new();
    let facts = Facts::plain(client());
    rules.evaluate_into(&get("/b/9", ""), &facts, &mut decision);
    assert_eq!(decision.rule, Some(4));
    rules.evaluate_into(&get("/c/1", ""), &facts, &mut decision);
    assert_eq!(decision.rule, None);
}
