//! Issue 14's keys: rules, limits, request id, client address, hashing and
//! persistence, each error checked with its file, line and key path.

use std::time::Duration;

use crate::model::*;
use crate::parse_str;

/// A valid file with two pools; `vs` goes into `[virtual_servers.web]`'s
/// section (after its keys), `pool` into `[pools.api]`.
fn file(vs: &str, pool: &str) -> String {
    format!(
        "[virtual_servers.web]\nlisten = \"127.0.0.1:8080\"\npool = \"web\"\n{vs}\n\
         [pools.web]\nnodes = [{{ address = \"127.0.0.1:8081\" }}]\n\n\
         [pools.api]\nnodes = [{{ address = \"127.0.0.1:8082\" }}]\n{pool}\n"
    )
}

fn valid(text: &str) -> Config {
    parse_str(text, "t.toml")
        .unwrap_or_else(|error| panic!("expected valid, got:\n{error}\n{text}"))
}

/// Asserts exactly one error, the whole line `t.toml:LINE: PATH: ...MESSAGE...`.
#[track_caller]
fn assert_error(text: &str, line: usize, path: &str, message: &str) {
    let lines: Vec<String> = match parse_str(text, "t.toml") {
        Ok(_) => panic!("expected an error for:\n{text}"),
        Err(error) => error.to_string().lines().map(str::to_owned).collect(),
    };
    assert_eq!(lines.len(), 1, "expected one error, got {lines:#?}");
    let start = format!("t.toml:{line}: {path}: ");
    assert!(
        lines[0].starts_with(&start) && lines[0].contains(message),
        "expected `{start}...{message}...`, got {:?}",
        lines[0]
    );
}

fn rules(config: &Config) -> &[Rule] {
    &config.virtual_servers[0].traffic.rules
}

#[test]
fn no_rules_by_default() {
    let config = valid(&file("", ""));
    let traffic = &config.virtual_servers[0].traffic;
    assert!(traffic.rules.is_empty());
    assert_eq!(traffic.request_id, RequestIdSettings::default());
    assert!(traffic.request_id.enabled);
    assert_eq!(traffic.request_id.header, "X-Request-Id");
    assert_eq!(traffic.client_address, ClientAddressSource::default());
    assert_eq!(traffic.client_connections, None);
    assert_eq!(config.pools[0].hash, None);
    assert_eq!(config.pools[0].persistence, None);
}

#[test]
fn a_rule_with_every_kind_of_match() {
    let text = file(
        r#"
[[virtual_servers.web.rules]]
name = "beta"
match.host = ["API.example.com", "*.example.org"]
match.path_prefix = "/v1/"
match.method = ["GET", "HEAD"]
match.header = [{ name = "X-Beta", equals = "1" }, { name = "X-Debug", present = false }]
match.query = { name = "lang", regex = "^(en|fr)$" }
match.cookie = { name = "session", present = true }
match.client_address = ["10.0.0.0/8", "2001:db8::/32"]
match.sni = "api.example.com"
match.client_subject = "CN=client"
match.any = [{ path = "/a" }, { path_regex = "^/b/([0-9]+)$" }]
match.not = { client_subject_regex = "^CN=bad" }
pool = "api"
"#,
        "",
    );
    let config = valid(&text);
    let rule = &rules(&config)[0];
    assert_eq!(rule.name, "beta");
    assert_eq!(rule.actions.terminal, Some(Terminal::Pool(PoolId(1))));
    assert_eq!(
        rule.captures, None,
        "a nested path_regex provides no captures"
    );
    let Condition::All(all) = &rule.condition else {
        panic!("expected All, got {:?}", rule.condition)
    };
    assert_eq!(
        all[0],
        Condition::Host(vec!["api.example.com".into(), "*.example.org".into()])
    );
    assert_eq!(all[1], Condition::PathPrefix(vec!["/v1/".into()]));
    assert_eq!(all[2], Condition::Method(vec!["GET".into(), "HEAD".into()]));
    assert_eq!(
        all[3],
        Condition::Header(FieldCondition {
            name: "x-beta".into(),
            test: ValueTest::Equals(vec!["1".into()]),
        })
    );
    assert_eq!(
        all[4],
        Condition::Header(FieldCondition {
            name: "x-debug".into(),
            test: ValueTest::Absent,
        })
    );
    assert!(matches!(&all[5], Condition::Query(field) if field.name == "lang"));
    assert!(matches!(&all[6], Condition::Cookie(field) if field.test == ValueTest::Present));
    assert!(matches!(&all[7], Condition::ClientAddress(networks) if networks.len() == 2));
    assert_eq!(all[8], Condition::Sni(vec!["api.example.com".into()]));
    assert_eq!(all[9], Condition::ClientSubject(vec!["CN=client".into()]));
    assert!(matches!(&all[10], Condition::Any(any) if any.len() == 2));
    assert!(matches!(&all[11], Condition::Not(_)));
}

#[test]
fn actions_and_templates() {
    let text = file(
        r#"
[[virtual_servers.web.rules]]
match.path_regex = "^/blog/(?P<year>[0-9]{4})/(.*)$"
redirect = { status = 301, location = "https://blog.example.com/${year}/${2}?from=${host}" }

[[virtual_servers.web.rules]]
match.path_prefix = "/api/"
rewrite_path = { strip_prefix = "/api" }
request_headers = { set = { X-Client = "${client_address}" }, add = { Via-Rule = "api" }, remove = "X-Debug" }
response_headers = { set = { X-Served-By = "weir" } }
rate_limit = "per-client"
concurrency_limit = "api"

[[virtual_servers.web.rules]]
match.path = "/healthz"
respond = { status = 200, headers = { Content-Type = "text/plain" }, body = "ok ${request_id}\n" }

[[virtual_servers.web.rules]]
match.path_prefix = "/admin"
deny = true

[[virtual_servers.web.rules]]
match.path_prefix = "/legal"
deny = 451

[virtual_servers.web.rate_limits.per-client]
rate = 100
burst = 20

[virtual_servers.web.concurrency_limits.api]
max = 50
"#,
        "",
    );
    let config = valid(&text);
    let rules = rules(&config);
    let Some(Terminal::Redirect { status, location }) = &rules[0].actions.terminal else {
        panic!("expected a redirect")
    };
    assert_eq!(*status, 301);
    assert_eq!(
        location.pieces,
        vec![
            Piece::Literal("https://blog.example.com/".into()),
            Piece::Variable(Variable::Capture(1)),
            Piece::Literal("/".into()),
            Piece::Variable(Variable::Capture(2)),
            Piece::Literal("?from=".into()),
            Piece::Variable(Variable::Host),
        ]
    );
    assert!(rules[0].captures.is_some());
    let api = &rules[1].actions;
    assert_eq!(api.terminal, None);
    assert_eq!(
        api.rewrite_path,
        Some(PathRewrite::StripPrefix("/api".into()))
    );
    assert_eq!(api.request_headers.remove, vec!["X-Debug".to_owned()]);
    assert_eq!(api.request_headers.set[0].0, "X-Client");
    assert_eq!(
        api.request_headers.set[0].1.pieces,
        vec![Piece::Variable(Variable::ClientAddress)]
    );
    assert_eq!(api.request_headers.add[0].1, Template::literal("api"));
    assert_eq!(api.rate_limits, vec![0]);
    assert_eq!(api.concurrency_limits, vec![0]);
    assert!(matches!(
        &rules[2].actions.terminal,
        Some(Terminal::Respond { status: 200, headers, .. }) if headers.len() == 1
    ));
    assert_eq!(
        rules[3].actions.terminal,
        Some(Terminal::Deny { status: 403 })
    );
    assert_eq!(
        rules[4].actions.terminal,
        Some(Terminal::Deny { status: 451 })
    );
    let traffic = &config.virtual_servers[0].traffic;
    let limit = &traffic.rate_limits[0];
    assert_eq!(
        (
            limit.name.as_str(),
            limit.rate.get(),
            limit.burst.get(),
            limit.per
        ),
        ("per-client", 100, 20, Duration::from_secs(1))
    );
    assert_eq!(
        (limit.key.clone(), limit.status),
        (KeySource::ClientAddress, 429)
    );
    assert_eq!(traffic.concurrency_limits[0].max.get(), 50);
    assert_eq!(traffic.concurrency_limits[0].status, 503);
}

#[test]
fn rewrites_in_three_forms() {
    let text = file(
        r#"
[[virtual_servers.web.rules]]
match.path_regex = "^/old/(.*)$"
rewrite_path = { replace_prefix = "/old/", with = "/new/" }
[[virtual_servers.web.rules]]
rewrite_path = { regex = "^/u/([0-9]+)$", with = "/users/${1}" }
"#,
        "",
    );
    let config = valid(&text);
    assert!(matches!(
        &rules(&config)[0].actions.rewrite_path,
        Some(PathRewrite::ReplacePrefix { prefix, .. }) if prefix == "/old/"
    ));
    assert!(matches!(
        &rules(&config)[1].actions.rewrite_path,
        Some(PathRewrite::Regex { with, .. })
            if with.pieces[1] == Piece::Variable(Variable::Capture(1))
    ));
    assert_eq!(rules(&config)[1].condition, Condition::Always);
    // The query is not the path's: a rewrite that would copy it into the path is refused.
    for with in ["/v2${uri}", "/s/${query}", "/a?b"] {
        let text = file(
            &format!(
                "\n[[virtual_servers.web.rules]]\nrewrite_path = {{ replace_prefix = \"/a/\", with = \"{with}\" }}\n"
            ),
            "",
        );
        assert_error(
            &text,
            6,
            "virtual_servers.web.rules[0].rewrite_path.with",
            "the query is kept as received",
        );
    }
}

#[test]
fn bad_regexes_and_variables_name_file_line_and_key() {
    let rule = |body: &str| file(&format!("\n[[virtual_servers.web.rules]]\n{body}\n"), "");
    assert_error(
        &rule("match.path_regex = \"^/(a\"\npool = \"api\""),
        6,
        "virtual_servers.web.rules[0].match.path_regex",
        "invalid regex \"^/(a\": unclosed group",
    );
    assert_error(
        &rule("match.path = \"/a\"\nredirect = { location = \"https://${hots}/\" }"),
        7,
        "virtual_servers.web.rules[0].redirect.location",
        "unknown variable \"${hots}\"",
    );
    assert_error(
        &rule("match.path_regex = \"^/(a)$\"\nredirect = { location = \"/${2}\" }"),
        7,
        "virtual_servers.web.rules[0].redirect.location",
        "has 1 capture group",
    );
    assert_error(
        &rule("match.path = \"/a\"\nrequest_headers = { set = { X-A = \"${1}\" } }"),
        7,
        "virtual_servers.web.rules[0].request_headers.set.X-A",
        "no regex here",
    );
    assert_error(
        &rule("match.header = { name = \"X-A\", regex = \"[\" }\npool = \"api\""),
        6,
        "virtual_servers.web.rules[0].match.header.regex",
        "invalid regex",
    );
    assert_error(
        &rule("rewrite_path = { regex = \"^/(x)\", with = \"/${name}\" }"),
        6,
        "virtual_servers.web.rules[0].rewrite_path.with",
        "unknown variable \"${name}\"",
    );
}

#[test]
fn rule_shapes_that_are_refused() {
    let rule = |body: &str| file(&format!("\n[[virtual_servers.web.rules]]\n{body}\n"), "");
    let prefix = "virtual_servers.web.rules[0]";
    assert_error(
        &rule("match.path = \"/a\""),
        5,
        prefix,
        "a rule needs an action",
    );
    assert_error(
        &rule("match.path = \"/a\"\npool = \"api\"\ndeny = true"),
        5,
        prefix,
        "at most one of pool, redirect, respond and deny",
    );
    assert_error(
        &rule("match = {}\npool = \"api\""),
        6,
        &format!("{prefix}.match"),
        "an empty match",
    );
    assert_error(
        &rule("match.path = \"/a\"\npool = \"apx\""),
        7,
        &format!("{prefix}.pool"),
        "unknown pool \"apx\" (did you mean \"api\"?)",
    );
    assert_error(
        &rule("match.path = \"/a\"\nredirect = { status = 200, location = \"/b\" }"),
        7,
        &format!("{prefix}.redirect.status"),
        "not a redirect status",
    );
    assert_error(
        &rule("match.header = { name = \"X-A\", present = true, equals = \"1\" }\npool = \"api\""),
        6,
        &format!("{prefix}.match.header"),
        "exactly one of present, equals or regex",
    );
    for status in [204, 205, 304] {
        assert_error(
            &rule(&format!("respond = {{ status = {status}, body = \"x\" }}")),
            6,
            &format!("{prefix}.respond.body"),
            "carries no content",
        );
    }
    for key in ["header", "query", "cookie"] {
        assert_error(
            &rule(&format!("match.{key} = []\ndeny = true")),
            6,
            &format!("{prefix}.match.{key}"),
            "must list at least one test",
        );
    }
    assert_error(
        &rule("match.client_address = \"10.1.0.0/8\"\npool = \"api\""),
        6,
        &format!("{prefix}.match.client_address"),
        "did you mean \"10.0.0.0/8\"",
    );
    assert_error(
        &rule("match.method = \"get\"\npool = \"api\""),
        6,
        &format!("{prefix}.match.method"),
        "write \"GET\"",
    );
    assert_error(
        &rule("response_headers = { set = { Content-Length = \"1\" } }"),
        6,
        &format!("{prefix}.response_headers.set.Content-Length"),
        "managed by weir",
    );
    assert_error(
        &rule("request_headers = { remove = \"Host\" }"),
        6,
        &format!("{prefix}.request_headers.remove"),
        "Host cannot be removed",
    );
    assert_error(
        &rule("rewrite_path = { strip_prefix = \"/a\", regex = \"x\", with = \"/\" }"),
        6,
        &format!("{prefix}.rewrite_path"),
        "exactly one of strip_prefix, replace_prefix or regex",
    );
    assert_error(
        &rule("match.path = \"/a\"\nrate_limit = \"slow\"\npool = \"api\""),
        7,
        &format!("{prefix}.rate_limit"),
        "unknown limit \"slow\"",
    );
}

/// Field names are the same in any case: one set twice is refused, in an edit's `set` and
/// in a direct answer's headers.
#[test]
fn a_field_set_twice_in_another_case_is_refused() {
    let rule = |body: &str| file(&format!("\n[[virtual_servers.web.rules]]\n{body}\n"), "");
    let prefix = "virtual_servers.web.rules[0]";
    assert_error(
        &rule("response_headers = { set = { X-B = \"1\", x-b = \"2\" } }"),
        6,
        &format!("{prefix}.response_headers.set.x-b"),
        "\"X-B\" is set already",
    );
    assert_error(
        &rule("respond = { status = 200, headers = { X-A = \"1\", x-a = \"2\" } }"),
        6,
        &format!("{prefix}.respond.headers.x-a"),
        "\"X-A\" is set already",
    );
}

#[test]
fn unreachable_and_duplicate_rules() {
    let text = file(
        "\n[[virtual_servers.web.rules]]\npool = \"api\"\n\
         [[virtual_servers.web.rules]]\nmatch.path = \"/a\"\npool = \"web\"\n",
        "",
    );
    assert_error(
        &text,
        7,
        "virtual_servers.web.rules[1]",
        "can never be reached",
    );
    let text = file(
        "\n[[virtual_servers.web.rules]]\nname = \"a\"\nmatch.path = \"/a\"\npool = \"api\"\n\
         [[virtual_servers.web.rules]]\nname = \"a\"\nmatch.path = \"/b\"\npool = \"api\"\n",
        "",
    );
    assert_error(
        &text,
        10,
        "virtual_servers.web.rules[1].name",
        "duplicate rule name",
    );
}

/// Rules see the normalised path, so a path in another form is a mistake to report.
#[test]
fn a_rule_path_that_could_never_match_is_refused() {
    for (key, bad) in [
        ("path", "/a/../b"),
        ("path", "/a/./b"),
        ("path_prefix", "//admin"),
        ("path", "/%61dmin"),
        ("path", "/a/.."),
        ("path_prefix", "/a/../b"),
        ("path", "/caf%c3%a9"),
        ("path", "/a%zz"),
        ("path", "/a%"),
        ("path", "/a?b"),
        ("path", "/é"),
    ] {
        let text = file(
            &format!("\n[[virtual_servers.web.rules]]\nmatch.{key} = \"{bad}\"\ndeny = true\n"),
            "",
        );
        assert_error(
            &text,
            6,
            &format!("virtual_servers.web.rules[0].match.{key}"),
            "can never match",
        );
    }
    // A prefix's last segment may be the start of a longer one (`/.` covers `/.env`).
    for good in [
        "/",
        "/a/",
        "/a/b",
        "/a%2Fb",
        "/a.b/..c",
        "/%20x",
        "/.",
        "/a/..",
        "/caf%C3%A9",
        "/a%C3",
    ] {
        valid(&file(
            &format!(
                "\n[[virtual_servers.web.rules]]\nmatch.path_prefix = \"{good}\"\ndeny = true\n"
            ),
            "",
        ));
    }
}

/// A rule with an error of its own does not make every later rule look unreachable.
/// A `match` of the wrong type is set aside to find the file's other errors; the rule it
/// leaves, matching every request, must not make every later rule "unreachable".
#[test]
fn a_mistyped_match_hides_no_later_rule() {
    let text = file(
        "\n[[virtual_servers.web.rules]]\nmatch = \"/admin\"\ndeny = true\n\
         [[virtual_servers.web.rules]]\nmatch.path = \"/y\"\npool = \"web\"\n\
         [[virtual_servers.web.rules]]\nmatch.path = \"/z\"\npool = \"web\"\n",
        "",
    );
    assert_error(
        &text,
        6,
        "virtual_servers.web.rules[0].match",
        "invalid type",
    );
}

#[test]
fn a_broken_rule_hides_no_later_rule() {
    let text = file(
        "\n[[virtual_servers.web.rules]]\nmatch.path_regex = \"^/(a\"\npool = \"api\"\n\
         [[virtual_servers.web.rules]]\nmatch.path = \"/y\"\npool = \"web\"\n",
        "",
    );
    assert_error(
        &text,
        6,
        "virtual_servers.web.rules[0].match.path_regex",
        "regex",
    );
}

#[test]
fn limits_request_id_and_client_address() {
    let text = file(
        r#"
[virtual_servers.web.request_id]
header = "X-Trace"
trust_incoming = false
to_client = true

[virtual_servers.web.client_address]
header = "X-Forwarded-For"
trusted_proxies = ["10.0.0.0/8"]

[virtual_servers.web.client_connections]
max = 20

[virtual_servers.web.rate_limits.by-key]
key = "header:X-Api-Key"
rate = 10
per = "1m"
"#,
        "",
    );
    let config = valid(&text);
    let traffic = &config.virtual_servers[0].traffic;
    assert_eq!(traffic.request_id.header, "X-Trace");
    assert!(!traffic.request_id.trust_incoming && traffic.request_id.to_client);
    assert_eq!(
        traffic.client_address.header.as_deref(),
        Some("x-forwarded-for")
    );
    assert_eq!(traffic.client_address.trusted_proxies.len(), 1);
    let connections = traffic.client_connections.as_ref().unwrap();
    assert_eq!(
        (connections.max.get(), connections.retry_after),
        (20, Duration::from_secs(1))
    );
    let limit = &traffic.rate_limits[0];
    assert_eq!(limit.key, KeySource::Header("x-api-key".into()));
    assert_eq!(
        (limit.burst.get(), limit.per),
        (10, Duration::from_secs(60))
    );

    assert_error(
        &file(
            "[virtual_servers.web.client_address]\nheader = \"X-Forwarded-For\"",
            "",
        ),
        4,
        "virtual_servers.web.client_address.trusted_proxies",
        "only believed from the proxies listed here",
    );
    assert_error(
        &file("[virtual_servers.web.rate_limits.a]\nburst = 5", ""),
        4,
        "virtual_servers.web.rate_limits.a.rate",
        "missing required key",
    );
    // 1 a day with a burst of 3,650 refills in 10 years, the most accepted.
    valid(&file(
        "[virtual_servers.web.rate_limits.a]\nrate = 1\nper = \"1d\"\nburst = 3650",
        "",
    ));
    assert_error(
        &file(
            "[virtual_servers.web.rate_limits.a]\nrate = 1\nper = \"1d\"\nburst = 213505",
            "",
        ),
        7,
        "virtual_servers.web.rate_limits.a.burst",
        "more than 10 years to refill",
    );
    assert_error(
        &file(
            "[virtual_servers.web.rate_limits.a]\nrate = 5\nkey = \"ip\"",
            "",
        ),
        6,
        "virtual_servers.web.rate_limits.a.key",
        "invalid key \"ip\"",
    );
    assert_error(
        &file(
            "[virtual_servers.web.concurrency_limits.a]\nmax = 5\nretry_after = \"200ms\"",
            "",
        ),
        6,
        "virtual_servers.web.concurrency_limits.a.retry_after",
        "whole seconds",
    );
    assert_error(
        &file("[virtual_servers.web.request_id]\nheader = \"X Id\"", ""),
        5,
        "virtual_servers.web.request_id.header",
        "not a valid header name",
    );
    assert_error(
        &file(
            "[virtual_servers.web.request_id]\nheader = \"Content-Length\"",
            "",
        ),
        5,
        "virtual_servers.web.request_id.header",
        "writes itself",
    );
}

#[test]
fn consistent_hash_pools() {
    let config = valid(&file(
        "",
        "algorithm = \"consistent_hash\"\n[pools.api.hash]\nkey = \"cookie:sid\"\nmax_load = 2",
    ));
    let hash = config.pools[1].hash.as_ref().unwrap();
    assert_eq!(hash.key, KeySource::Cookie("sid".into()));
    assert_eq!(hash.max_load, 2.0);
    let config = valid(&file("", "algorithm = \"consistent_hash\""));
    assert_eq!(
        config.pools[1].hash,
        Some(HashSettings {
            key: KeySource::ClientAddress,
            max_load: 1.25
        })
    );
    assert_error(
        &file("", "[pools.api.hash]\nkey = \"uri\""),
        10,
        "pools.api.hash",
        "needs algorithm = \"consistent_hash\"",
    );
    assert_error(
        &file(
            "",
            "algorithm = \"consistent_hash\"\n[pools.api.hash]\nmax_load = 0.5",
        ),
        12,
        "pools.api.hash.max_load",
        "between 1.0 and 100.0",
    );
    assert_error(
        &file(
            "",
            "algorithm = \"consistent_hash\"\n[pools.api.hash]\nkey = \"route\"",
        ),
        12,
        "pools.api.hash.key",
        "invalid key \"route\"",
    );
}

#[test]
fn persistence_types() {
    let config = valid(&file(
        "",
        "[pools.api.persistence]\ntype = \"cookie\"\nsecure = true\nmax_age = \"1h\"\n\
         key = \"0123456789abcdef0123\"",
    ));
    let persistence = config.pools[1].persistence.as_ref().unwrap();
    let PersistenceMode::Cookie(cookie) = &persistence.mode else {
        panic!("expected an inserted cookie")
    };
    assert_eq!(cookie.name, "WEIR_NODE");
    assert_eq!(cookie.secure, Some(true));
    assert!(cookie.http_only);
    assert_eq!(cookie.max_age, Some(Duration::from_secs(3600)));
    assert_eq!(
        persistence.key.as_deref(),
        Some(&b"0123456789abcdef0123"[..])
    );

    let config = valid(&file(
        "",
        "[pools.api.persistence]\ntype = \"app_cookie\"\ncookie = \"JSESSIONID\"\ntimeout = \"10m\"",
    ));
    let persistence = config.pools[1].persistence.as_ref().unwrap();
    assert_eq!(
        persistence.mode,
        PersistenceMode::AppCookie("JSESSIONID".into())
    );
    assert_eq!(persistence.timeout, Duration::from_secs(600));

    let persist = |body: &str| file("", &format!("[pools.api.persistence]\n{body}"));
    assert_error(
        &persist("type = \"sticky\""),
        11,
        "pools.api.persistence.type",
        "unknown persistence type",
    );
    assert_error(
        &persist("type = \"cookie\"\nkey = \"short\""),
        12,
        "pools.api.persistence.key",
        "at least 16 bytes",
    );
    assert_error(
        &persist("type = \"client_address\"\nsecure = true"),
        12,
        "pools.api.persistence.secure",
        "does not apply to this persistence type",
    );
    assert_error(
        &persist("type = \"app_header\""),
        10,
        "pools.api.persistence.header",
        "app_header needs header",
    );
    // A lifetime, not a timeout: days are fine, up to the 400 browsers keep.
    let week = valid(&persist("type = \"cookie\"\nmax_age = \"7d\""));
    let PersistenceMode::Cookie(cookie) = &week.pools[1].persistence.as_ref().unwrap().mode else {
        panic!("expected an inserted cookie")
    };
    assert_eq!(cookie.max_age, Some(Duration::from_secs(7 * 86_400)));
    assert_error(
        &persist("type = \"cookie\"\nmax_age = \"401d\""),
        12,
        "pools.api.persistence.max_age",
        "longer than 400 days",
    );
    assert_error(
        &persist("type = \"cookie\"\nmax_age = \"500ms\""),
        12,
        "pools.api.persistence.max_age",
        "whole seconds",
    );
}

#[test]
fn a_rule_pool_that_loops_is_refused() {
    let text = "[virtual_servers.web]\nlisten = \"127.0.0.1:8080\"\npool = \"web\"\n\
                [[virtual_servers.web.rules]]\npool = \"self\"\n\
                [pools.web]\nnodes = [{ address = \"127.0.0.1:8081\" }]\n\
                [pools.self]\nnodes = [{ address = \"127.0.0.1:8080\" }]\n";
    assert_error(
        text,
        9,
        "pools.self.nodes[0].address",
        "requests would loop",
    );
}

/// Two pools inserting one cookie name for overlapping paths would overwrite each other's
/// cookies: refused at the later pool's `cookie`; apart by name or path, both are fine.
#[test]
fn persistence_cookies_of_two_pools_must_be_told_apart() {
    let both = |web: &str, api: &str| {
        file(
            "",
            &format!(
                "[pools.api.persistence]\ntype = \"cookie\"\n{api}\n\
                 [pools.web.persistence]\ntype = \"cookie\"\n{web}\n"
            ),
        )
    };
    let text = both("", "");
    let error = parse_str(&text, "t.toml").unwrap_err().to_string();
    assert!(
        error.contains("pools.api.persistence.cookie: pool \"web\" inserts the persistence cookie \"WEIR_NODE\""),
        "{error}"
    );
    valid(&both("", "cookie = \"API_NODE\""));
    valid(&both("path = \"/app\"", "path = \"/api\""));
    assert!(parse_str(&both("path = \"/\"", "path = \"/api\""), "t.toml").is_err());
    // Paths as browsers match them (RFC 6265 §5.1.4): `/a` is not sent on `/ab`.
    valid(&both("path = \"/a\"", "path = \"/ab\""));
    assert!(parse_str(&both("path = \"/a\"", "path = \"/a/b\""), "t.toml").is_err());
    // Domains as browsers read them (§5.2.3): no leading dot, any case.
    for (web, api) in [
        ("domain = \"example.com\"", "domain = \"EXAMPLE.com\""),
        ("domain = \"example.com\"", "domain = \".example.com\""),
    ] {
        let error = parse_str(&both(web, api), "t.toml")
            .unwrap_err()
            .to_string();
        assert!(error.contains("inserts the persistence cookie"), "{error}");
    }
}

#[test]
fn persistence_same_site() {
    let with = |lines: &str| {
        file(
            "",
            &format!("[pools.api.persistence]\ntype = \"cookie\"\n{lines}"),
        )
    };
    let config = valid(&with("same_site = \"Strict\""));
    let Some(Persistence {
        mode: PersistenceMode::Cookie(cookie),
        ..
    }) = &config.pools[1].persistence
    else {
        panic!("expected an inserted cookie")
    };
    assert_eq!(cookie.same_site, Some("Strict"));
    assert!(parse_str(&with("same_site = \"sometimes\""), "t.toml").is_err());
    let error = parse_str(&with("same_site = \"none\"\nsecure = false"), "t.toml")
        .unwrap_err()
        .to_string();
    assert!(error.contains("pools.api.persistence.same_site"), "{error}");
    valid(&with("same_site = \"none\""));
}
