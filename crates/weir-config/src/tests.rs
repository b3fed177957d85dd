//! Loading end to end: the embedded default, and the exact shape of error messages
//! for each kind of problem (syntax, schema, validation, reading).

use std::path::Path;

use super::*;

#[test]
fn embedded_default_parses() {
    let config = parse_str(EMBEDDED_DEFAULT, EMBEDDED_DEFAULT_NAME)
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(config, embedded_default());
    assert_eq!(config.source, None);
    assert_eq!(
        config.admin.as_ref().unwrap().listen,
        "127.0.0.1:9090".parse().unwrap()
    );
    let server = &config.virtual_servers[0];
    assert_eq!(server.name, "web");
    assert_eq!(server.listen, ["127.0.0.1:8080".parse().unwrap()]);
    let pool = config.pool(server.default_pool);
    assert_eq!(pool.name, "web");
    let nodes: Vec<String> = pool.nodes.iter().map(|n| n.address.to_string()).collect();
    assert_eq!(nodes, ["127.0.0.1:8081", "127.0.0.1:8082"]);
    assert!(pool.health.is_some());
    let origins: Vec<String> = config
        .origins
        .iter()
        .map(|o| o.listen.to_string())
        .collect();
    assert_eq!(origins, nodes);
    // The HTTPS listener offers h2 and keeps serving clients that offer only
    // http/1.0 (docs/design/hardening.md, "TLS closes").
    let https = &config.virtual_servers[1];
    assert_eq!(
        https.tls.as_ref().map(|tls| tls.alpn.clone()),
        Some(vec!["h2".into(), "http/1.1".into(), "http/1.0".into()])
    );
}

const GOOD: &str = "\
[virtual_servers.web]
listen = \"127.0.0.1:8080\"
pool = \"web\"

[pools.web]
algorithm = \"round_robin\"
nodes = [
  { address = \"127.0.0.1:8081\" },
  { address = \"127.0.0.1:8082\" },
  { address = \"127.0.0.1:8083\" },
]
";

/// A name from the file that holds a line break (a quoted TOML key) is shown escaped: the
/// error, written to weir's log on a refused reload, stays one line per problem.
#[test]
fn names_with_line_breaks_cannot_forge_log_lines() {
    let text = format!(
        "{GOOD}\n[pools.\"x\\nFAKE INFO forged line\"]\nnodes = [{{ address = \"127.0.0.1:1\" }}]\n"
    );
    let error = parse_str(&text, "weir.toml").unwrap_err().to_string();
    assert_eq!(error.lines().count(), 1, "{error}");
    assert!(error.contains("x\\nFAKE"), "{error}");
}

#[test]
fn invalid_node_address_names_file_line_and_path() {
    let text = GOOD.replace("127.0.0.1:8083", "10.0.0.1:99999");
    let error = parse_str(&text, "weir.toml").unwrap_err();
    assert_eq!(
        error.to_string(),
        "weir.toml:10: pools.web.nodes[2].address: invalid socket address \"10.0.0.1:99999\""
    );
    assert_eq!(
        error.errors,
        [Diagnostic {
            line: Some(10),
            path: "pools.web.nodes[2].address".into(),
            message: "invalid socket address \"10.0.0.1:99999\"".into(),
        }]
    );
}

#[test]
fn unknown_key_is_named_with_the_valid_ones() {
    let text = GOOD.replace("algorithm", "algoritm");
    let error = parse_str(&text, "weir.toml").unwrap_err();
    assert_eq!(
        error.to_string(),
        "weir.toml:6: pools.web.algoritm: unknown key \"algoritm\" (did you mean \"algorithm\"?); \
         valid keys: algorithm, nodes, retries, fail_open, connections, timeouts, health, \
         passive_health, tls, protocol, http2, hash, persistence, proxy_protocol, dns"
    );
}

#[test]
fn unknown_key_in_an_inline_table() {
    let text = GOOD.replace(
        "{ address = \"127.0.0.1:8082\" }",
        "{ adress = \"127.0.0.1:8082\" }",
    );
    let error = parse_str(&text, "weir.toml").unwrap_err();
    assert_eq!(
        error.to_string(),
        "weir.toml:9: pools.web.nodes[1].adress: unknown key \"adress\" (did you mean \"address\"?); \
         valid keys: address, srv, weight, state"
    );
}

#[test]
fn wrong_type_names_file_line_and_path() {
    let text = format!("{GOOD}retries = \"two\"\n");
    let error = parse_str(&text, "weir.toml").unwrap_err();
    assert_eq!(
        error.to_string(),
        "weir.toml:12: pools.web.retries: invalid type: string \"two\", expected a whole number"
    );
    let text = format!("{GOOD}[pools.web.timeouts]\nconnect = 3\n");
    let error = parse_str(&text, "weir.toml").unwrap_err();
    assert_eq!(
        error.to_string(),
        "weir.toml:13: pools.web.timeouts.connect: invalid type: integer `3`, expected a \
         duration string such as \"250ms\", \"5s\" or \"2m\""
    );
    // A date is named a date, not the table the TOML reader hands it on as.
    let text = format!("{GOOD}retries = 1979-05-27\n");
    let error = parse_str(&text, "weir.toml").unwrap_err();
    assert_eq!(
        error.to_string(),
        "weir.toml:12: pools.web.retries: invalid type: date-time, expected a whole number"
    );
    let text = format!("{GOOD}timeouts = 1979-05-27T07:32:00Z\n");
    let error = parse_str(&text, "weir.toml").unwrap_err();
    assert_eq!(
        error.to_string(),
        "weir.toml:12: pools.web.timeouts: invalid type: date-time, expected a table"
    );
    // Where a table of names belongs, the reader's key must not become a name (a header).
    let text = "[virtual_servers.web]\nlisten = \"127.0.0.1:8080\"\npool = \"web\"\n\
                response_headers = 1979-05-27\n\n\
                [pools.web]\nnodes = [{ address = \"127.0.0.1:8081\" }]\n";
    let error = parse_str(text, "weir.toml").unwrap_err().to_string();
    assert!(
        error.ends_with("response_headers: invalid type: date-time, expected a table"),
        "{error}"
    );
}

/// The line and key of each problem `error` reports, in order.
fn lines_and_keys(error: &ConfigError) -> Vec<(Option<usize>, &str)> {
    error
        .errors
        .iter()
        .map(|d| (d.line, d.path.as_str()))
        .collect()
}

/// Every unknown key and wrong value is reported, in file order, not only the first (each
/// one's line is set aside and the file read again), with the validation problems of the
/// rest of the file.
#[test]
fn every_unknown_key_and_wrong_value_is_reported() {
    let text = GOOD
        .replace("pool = \"web\"\n", "pool = \"web\"\nbogus = 1\n")
        .replace("round_robin", "nope")
        .replace(
            "{ address = \"127.0.0.1:8082\" }",
            "{ adress = \"127.0.0.1:8082\" }",
        )
        + "retries = \"two\"\n[pools.web.timeouts]\nconnect = 3\n";
    let error = parse_str(&text, "weir.toml").unwrap_err();
    assert_eq!(
        lines_and_keys(&error),
        [
            (Some(4), "virtual_servers.web.bogus"),
            (Some(7), "pools.web.algorithm"),
            (Some(10), "pools.web.nodes[1].adress"),
            (Some(13), "pools.web.retries"),
            (Some(15), "pools.web.timeouts.connect"),
        ],
        "{error}"
    );
    // An unknown key written as a dotted key (`timeouts.client = ...`) is set aside whole,
    // so the errors after it are reported too.
    let text = GOOD.replace(
        "pool = \"web\"\n",
        "pool = \"web\"\n  timeouts . client = \"1s\"\nbogus = 1\n",
    );
    let error = parse_str(&text, "weir.toml").unwrap_err();
    assert_eq!(
        lines_and_keys(&error),
        [
            (Some(4), "virtual_servers.web.timeouts.client"),
            (Some(5), "virtual_servers.web.bogus"),
        ],
        "{error}"
    );
    // An unknown table, as a dotted key's first part, a header or an array of tables, is set
    // aside with everything under it, and the report goes on.
    let text = GOOD.replace(
        "pool = \"web\"\n",
        "pool = \"web\"\nzz.a = 3\nhelth.type.deep = 1\nqq = 1\n",
    ) + "[pools.web.helth]\ntype = \"tcp\"\n[[pools.web.nodez]]\naddress = \"x\"\n\
         [pools.web.timeouts]\nconnect = 3\n";
    let error = parse_str(&text, "weir.toml").unwrap_err();
    let found: Vec<&str> = error.errors.iter().map(|d| d.path.as_str()).collect();
    assert_eq!(
        found,
        [
            "virtual_servers.web.zz",
            "virtual_servers.web.helth",
            "virtual_servers.web.qq",
            "pools.web.helth",
            "pools.web.nodez",
            "pools.web.timeouts.connect",
        ],
        "{error}"
    );
    // A line set aside that holds characters of several bytes moves nothing after it.
    let text = GOOD.replace(
        "pool = \"web\"\n",
        "pool = \"web\"\nnote = \"éèà — ✓\"\nbogus = 1\n",
    );
    let error = parse_str(&text, "weir.toml").unwrap_err();
    assert_eq!(
        lines_and_keys(&error),
        [
            (Some(4), "virtual_servers.web.note"),
            (Some(5), "virtual_servers.web.bogus"),
        ],
        "{error}"
    );

    // A blanked line whose key is required is not reported again as missing.
    let text = GOOD.replace("pool = \"web\"", "pool = 5");
    let error = parse_str(&text, "weir.toml").unwrap_err();
    assert_eq!(error.errors.len(), 1, "{error}");
    assert_eq!(error.errors[0].path, "virtual_servers.web.pool");
    // A missing key that is the file's own is (at its table's header, line 1).
    let text = GOOD.replace("pool = \"web\"", "pol = \"web\"");
    let error = parse_str(&text, "weir.toml").unwrap_err();
    let found: Vec<&str> = error.errors.iter().map(|d| d.path.as_str()).collect();
    assert_eq!(
        found,
        ["virtual_servers.web.pool", "virtual_servers.web.pol"],
        "{error}"
    );
}

#[test]
fn syntax_error_names_file_line_and_path() {
    let text = format!("{GOOD}[pools.web.health]\ntype = tcp\n");
    let error = parse_str(&text, "weir.toml").unwrap_err();
    assert_eq!(error.errors.len(), 1);
    let diagnostic = &error.errors[0];
    assert_eq!(diagnostic.line, Some(13));
    assert_eq!(diagnostic.path, "pools.web.health.type");
    assert!(
        diagnostic.message.starts_with("TOML syntax error: ")
            && diagnostic.message.ends_with("(strings need quotes)"),
        "{diagnostic:?}"
    );
    assert!(
        error
            .to_string()
            .starts_with("weir.toml:13: pools.web.health.type: TOML syntax error: ")
    );

    let error = parse_str("[pools.web\nretries = 1\n", "weir.toml").unwrap_err();
    assert_eq!(error.errors[0].line, Some(1));
    assert!(error.to_string().starts_with("weir.toml:1: "), "{error}");
}

/// A table header nested past the parser's limit, which gives no place for it, is
/// reported on its own line, not on line 1.
#[test]
fn a_key_nested_too_deep_is_reported_on_its_line() {
    let deep = format!(
        "[virtual_servers.web.rules.match{}]\nx = 1\n",
        ".not".repeat(200)
    );
    let text = format!("{GOOD}{deep}");
    let error = parse_str(&text, "weir.toml").unwrap_err();
    assert_eq!(error.errors[0].line, Some(12), "{error}");
    assert!(error.errors[0].message.contains("recursion"), "{error}");
}

#[test]
fn duplicate_tables_are_syntax_errors() {
    let text = format!("{GOOD}[pools.web]\nretries = 1\n");
    let error = parse_str(&text, "weir.toml").unwrap_err();
    assert_eq!(error.errors[0].line, Some(12), "{error}");
    assert!(
        error.errors[0].message.contains("TOML syntax error"),
        "{error}"
    );
}

#[test]
fn dangling_pool_reference() {
    let text =
        format!("{GOOD}[[virtual_servers.web.routes]]\npath_prefix = \"/api/\"\npool = \"api\"\n");
    let error = parse_str(&text, "weir.toml").unwrap_err();
    assert_eq!(
        error.to_string(),
        "weir.toml:14: virtual_servers.web.routes[0].pool: unknown pool \"api\"; defined pools: web"
    );
}

#[test]
fn missing_required_key_points_at_its_table() {
    let text = GOOD.replace("pool = \"web\"\n", "");
    let error = parse_str(&text, "weir.toml").unwrap_err();
    assert_eq!(
        error.to_string(),
        "weir.toml:1: virtual_servers.web.pool: missing required key: the name of a pool"
    );
}

#[test]
fn multiple_errors_are_reported_at_once() {
    let text = GOOD
        .replace("127.0.0.1:8081", "10.0.0.1")
        .replace("127.0.0.1:8083", "10.0.0.1:99999")
        .replace("pool = \"web\"", "pool = \"wbe\"")
        .replace("round_robin", "fastest");
    let error = parse_str(&text, "weir.toml").unwrap_err();
    assert_eq!(
        error.to_string(),
        "weir.toml:3: virtual_servers.web.pool: unknown pool \"wbe\" (did you mean \"web\"?); defined pools: web\n\
         weir.toml:6: pools.web.algorithm: invalid value \"fastest\"; expected one of \"round_robin\", \"weighted_round_robin\", \"least_connections\", \"perceptive\", \"consistent_hash\"\n\
         weir.toml:8: pools.web.nodes[0].address: invalid socket address \"10.0.0.1\": the port is missing; write it like \"10.0.0.1:8080\"\n\
         weir.toml:10: pools.web.nodes[2].address: invalid socket address \"10.0.0.1:99999\""
    );
}

#[test]
fn load_file_sets_source_and_reports_read_errors() {
    let directory = std::env::temp_dir().join(format!("weir-config-test-{}", std::process::id()));
    std::fs::create_dir_all(&directory).unwrap();
    let path = directory.join("weir.toml");
    std::fs::write(&path, GOOD).unwrap();
    let config = load_file(&path).unwrap();
    assert_eq!(config.source.as_deref(), Some(path.as_path()));

    std::fs::write(&path, GOOD.replace("127.0.0.1:8083", "10.0.0.1:99999")).unwrap();
    let error = load_file(&path).unwrap_err();
    assert_eq!(error.file, path.display().to_string());
    assert_eq!(error.errors[0].line, Some(10));
    // A byte that is not UTF-8 (Latin-1 "é" in a comment) is placed by line and byte.
    let mut latin1 = b"[log]\naccess_log = false\n# caf".to_vec();
    latin1.extend_from_slice(&[0xe9, b'\n']);
    std::fs::write(&path, latin1).unwrap();
    let error = load_file(&path).unwrap_err();
    assert_eq!(error.errors[0].line, Some(3));
    assert!(
        error.to_string().contains("not UTF-8") && error.to_string().contains("byte 6"),
        "{error}"
    );
    std::fs::remove_dir_all(&directory).unwrap();

    let missing = Path::new("/nonexistent/weir.toml");
    let error = load_file(missing).unwrap_err();
    assert_eq!(error.errors.len(), 1);
    assert_eq!(error.errors[0].line, None);
    assert!(
        error
            .to_string()
            .starts_with("/nonexistent/weir.toml: cannot read file: "),
        "{error}"
    );
}

/// An input on which toml_edit 0.23 panicked while reporting its second error (found by
/// `fuzz/`, kept in its corpus): a clear syntax error naming the first problem, no panic.
#[test]
fn a_file_that_broke_the_toml_parser_is_a_syntax_error() {
    let text = include_str!("../../../fuzz/corpus/config/toml-edit-span-panic.toml");
    let error = parse_str(text, "weir.toml").unwrap_err();
    assert_eq!(error.errors.len(), 1, "{error}");
    assert_eq!(error.errors[0].line, Some(2), "{error}");
    assert!(
        error.errors[0].message.starts_with("TOML syntax error: "),
        "{error}"
    );
    assert!(
        crate::edit::edit_node(
            text,
            "web",
            crate::edit::NodeRef::Address("127.0.0.1:8081".parse().unwrap()),
            crate::edit::NodeEdit::Weight(2)
        )
        .is_err()
    );
}

/// A file the configuration names that is a FIFO (nobody writes to it) is refused at once,
/// not read: reading it would hold a start, a reload or `weir check` for ever.
#[test]
fn a_named_fifo_is_refused_without_waiting() {
    let dir = std::env::temp_dir().join(format!("weir-config-fifo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("token");
    let _ = std::fs::remove_file(&fifo);
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let file = FileRef {
        path: fifo.clone(),
        key: KeyPath::root().key("admin").key("token_file"),
        line: None,
    };
    let started = std::time::Instant::now();
    let error = file.read().unwrap_err();
    assert!(error.to_string().contains("not a regular file"), "{error}");
    assert!(started.elapsed() < std::time::Duration::from_secs(1));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A file past the size bound is refused by its size, with the file named, before it is
/// read: a reload asked to parse a huge file by mistake must not cost the running weir
/// its memory.
#[test]
fn a_config_past_the_size_bound_is_refused_unread() {
    let dir = std::env::temp_dir().join(format!("weir-config-huge-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("weir.toml");
    let file = std::fs::File::create(&path).unwrap();
    // Sparse: no disk is used for the length.
    file.set_len(crate::MAX_CONFIG_BYTES + 1).unwrap();
    let error = crate::load_file(&path).unwrap_err().to_string();
    assert!(error.contains("weir.toml"), "{error}");
    assert!(error.contains("larger than 64 MiB"), "{error}");
    file.set_len(1024).unwrap();
    let error = crate::load_file(&path).unwrap_err().to_string();
    assert!(!error.contains("larger than"), "{error}");
    let _ = std::fs::remove_dir_all(&dir);
}
