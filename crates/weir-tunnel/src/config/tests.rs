use super::*;

const BOTH: &str = r#"
[client]
server = "10.200.0.2:4433"
ca = "ca.pem"
cert = "client.pem"
key = "client.key"

[server]
listen = "0.0.0.0:4433"
cert = "server.pem"
key = "server.key"
ca = "ca.pem"

[link]
bandwidth = "1544kbit"
rtt = "500ms"
congestion = "bbr"

[dedup]
store = "64MiB"
chunk_size = "8KiB"

[services.files]
listen = "127.0.0.1:8445"
connect = "127.0.0.1:8080"
"#;

#[test]
fn one_file_serves_both_sides() {
    let client = parse_str(BOTH, "t.toml", Role::Client).unwrap();
    assert!(client.server.is_none());
    let side = client.client.as_ref().unwrap();
    assert_eq!(side.server, "10.200.0.2:4433");
    assert_eq!(side.server_name, "10.200.0.2");
    assert_eq!(side.ca.line, Some(4));
    assert_eq!(client.link.bandwidth, 1_544_000);
    assert_eq!(client.link.rtt, Duration::from_millis(500));
    assert_eq!(client.link.congestion, Congestion::Bbr);
    assert_eq!(client.link.transport, Transport::Quic);
    let tcp = BOTH.replace("congestion = \"bbr\"", "transport = \"tcp\"");
    let tcp = parse_str(&tcp, "t.toml", Role::Client).unwrap();
    assert_eq!(tcp.link.transport, Transport::Tcp);
    assert_eq!(client.bdp(), 96_500);
    assert_eq!(client.dedup.store, 64 << 20);
    assert_eq!(client.dedup.chunks.average, 8192);
    assert_eq!(client.compression, Some(DEFAULT_LEVEL));
    let server = parse_str(BOTH, "t.toml", Role::Server).unwrap();
    assert_eq!(
        server.server.unwrap().listen,
        "0.0.0.0:4433".parse().unwrap()
    );
    assert_eq!(
        server.services[0].connect.as_deref(),
        Some("127.0.0.1:8080")
    );
}

#[test]
fn every_problem_is_reported_with_line_and_key() {
    let text = r#"
[client]
server = "nowhere"
ca = "ca.pem"
drain_timeout = "soon"
[link]
bandwidth = "fast"
mtu = 100
congestion = "reno"
transport = "sctp"

[compression]
level = 40

[services.files]
connect = "127.0.0.1:8080"
"#;
    let error = parse_str(text, "t.toml", Role::Client)
        .unwrap_err()
        .to_string();
    for expected in [
        "t.toml:3: client.server: invalid address \"nowhere\"",
        "client.cert: missing required key",
        "client.key: missing required key",
        "t.toml:5: client.drain_timeout:",
        "t.toml:7: link.bandwidth:",
        "t.toml:8: link.mtu: must be between 1280 and 9000",
        "t.toml:9: link.congestion: unknown controller \"reno\"",
        "t.toml:10: link.transport: unknown transport \"sctp\"; expected quic or tcp",
        "t.toml:13: compression.level: must be between -7 and 19",
        "services.files.listen: the near side needs listen for each service",
    ] {
        assert!(
            error.contains(expected),
            "missing {expected:?} in:\n{error}"
        );
    }
}

/// A chunk runs to four times the average and a chunk sent literally must fit one block
/// (256 KiB): an average over 64 KiB could not carry incompressible data.
#[test]
fn chunk_sizes_that_cannot_fit_a_block_are_refused() {
    let config = |size: &str| {
        format!(
            "[server]\nlisten = \"127.0.0.1:4433\"\ncert = \"c.pem\"\nkey = \"k.pem\"\nca = \"ca.pem\"\n\
             [dedup]\nchunk_size = \"{size}\"\n[services.files]\nconnect = \"127.0.0.1:8080\"\n"
        )
    };
    for size in ["1KiB", "64KiB"] {
        parse_str(&config(size), "t.toml", Role::Server).unwrap();
    }
    for size in ["65KiB", "128KiB", "256KiB", "1023"] {
        let error = parse_str(&config(size), "t.toml", Role::Server)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("t.toml:7: dedup.chunk_size: must be between 1KiB and 64KiB"),
            "{size}: {error}"
        );
    }
}

/// A duration past a day is refused, as `weir serve`'s timeouts are: far past it the
/// timers' arithmetic overflowed (a panic on SIGTERM, an abort in the QUIC timers).
#[test]
fn durations_longer_than_a_day_are_refused() {
    for (table, key) in [
        ("client", "drain_timeout"),
        ("server", "connect_timeout"),
        ("link", "idle_timeout"),
        ("link", "keep_alive"),
        ("link", "rtt"),
    ] {
        let text = BOTH.replace("rtt = \"500ms\"\n", "").replace(
            &format!("[{table}]\n"),
            &format!("[{table}]\n{key} = \"500000000000y\"\n"),
        );
        let error = parse_str(&text, "t.toml", Role::Client)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains(&format!(
                "{table}.{key}: \"500000000000y\" is longer than a day"
            )),
            "{table}.{key}: {error}"
        );
    }
    let text = BOTH.replace("[link]\n", "[link]\nidle_timeout = \"24h\"\n");
    assert!(parse_str(&text, "t.toml", Role::Client).is_ok());
}

#[test]
fn unknown_keys_and_syntax_errors_name_the_place() {
    let error = parse_str("[link]\nbandwith = \"1mbit\"\n", "t.toml", Role::Server)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains(
            "t.toml:2: link.bandwith: unknown key \"bandwith\" (did you mean \"bandwidth\"?)"
        ),
        "{error}"
    );
    let error = parse_str("[link\n", "t.toml", Role::Server)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("t.toml:1") && error.contains("TOML syntax error"),
        "{error}"
    );
}

#[test]
fn each_side_needs_its_table_and_services() {
    let error = parse_str("", "t.toml", Role::Server)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("server: the far side needs a [server] table"),
        "{error}"
    );
    assert!(
        error.contains("services: at least one service is required"),
        "{error}"
    );
    let error = parse_str(
        "[services.a]\nlisten = \"127.0.0.1:1\"\n[services.b]\nlisten = \"127.0.0.1:1\"\n",
        "t.toml",
        Role::Client,
    )
    .unwrap_err()
    .to_string();
    assert!(
        error.contains("t.toml:4: services.b.listen: 127.0.0.1:1 is used by another service"),
        "{error}"
    );
    // A wildcard takes the port on every address of its family.
    let error = parse_str(
        "[services.a]\nlisten = \"0.0.0.0:1\"\n[services.b]\nlisten = \"127.0.0.1:1\"\n",
        "t.toml",
        Role::Client,
    )
    .unwrap_err()
    .to_string();
    assert!(error.contains("services.b.listen"), "{error}");
}

/// The metrics listener cannot take a service's address: `--check` says so, where the
/// start would fail to bind.
#[test]
fn the_metrics_listener_and_a_service_cannot_share_an_address() {
    for metrics in ["127.0.0.1:28810", "0.0.0.0:28810"] {
        let text = BOTH.replace(
            "[services.files]",
            &format!("[metrics]\nlisten = \"{metrics}\"\n\n[services.files]"),
        );
        let text = text.replace("127.0.0.1:8445", "127.0.0.1:28810");
        let error = parse_str(&text, "t.toml", Role::Client)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("metrics.listen") && error.contains("service \"files\""),
            "{metrics}: {error}"
        );
    }
}

#[test]
fn switches_turn_features_off() {
    let text = format!("{BOTH}\n[compression]\nenabled = false\n");
    let text = text.replace(
        "chunk_size = \"8KiB\"",
        "chunk_size = \"8KiB\"\nenabled = false",
    );
    let config = parse_str(&text, "t.toml", Role::Client).unwrap();
    assert_eq!(config.compression, None);
    assert!(!config.dedup.enabled);
}

#[test]
fn relative_files_are_resolved_against_the_config_directory() {
    let directory = std::env::temp_dir().join(format!("weir-tunnel-config-{}", std::process::id()));
    std::fs::create_dir_all(&directory).unwrap();
    let path = directory.join("tunnel.toml");
    std::fs::write(&path, BOTH).unwrap();
    let config = load_file(&path, Role::Client).unwrap();
    assert_eq!(config.client.unwrap().ca.path, directory.join("ca.pem"));
    std::fs::remove_dir_all(&directory).unwrap();
    let error = load_file(&path, Role::Client).unwrap_err().to_string();
    assert!(error.contains("cannot read file"), "{error}");
}

#[test]
fn fec_keys_are_read_and_checked() {
    let defaults = parse_str(BOTH, "t.toml", Role::Client).unwrap();
    assert_eq!(defaults.fec, crate::sans_io::fec::FecSettings::default());
    let text = BOTH.replace(
        "[dedup]",
        "[fec]\nmode = \"on\"\nblock = 16\nmax_overhead = \"50%\"\nmin_loss = \"0.2%\"\n\n[dedup]",
    );
    let fec = parse_str(&text, "t.toml", Role::Client).unwrap().fec;
    assert_eq!(fec.mode, crate::sans_io::fec::Mode::On);
    assert_eq!(fec.block, 16);
    assert!((fec.max_overhead - 0.5).abs() < 1e-12);
    assert!((fec.min_loss - 0.002).abs() < 1e-12);

    let bad = BOTH.replace(
        "[dedup]",
        "[fec]\nmode = \"maybe\"\nblock = 0\nmax_overhead = \"0%\"\nmin_loss = \"lots\"\n\n[dedup]",
    );
    let error = parse_str(&bad, "t.toml", Role::Client)
        .unwrap_err()
        .to_string();
    for expected in [
        "t.toml:20: fec.mode: unknown mode \"maybe\"; expected auto, on or off",
        "t.toml:21: fec.block: must be between 1 and 128 datagrams",
        "t.toml:22: fec.max_overhead: must be between 1% and 100%",
        "t.toml:23: fec.min_loss:",
    ] {
        assert!(
            error.contains(expected),
            "missing {expected:?} in:\n{error}"
        );
    }
}

/// An annotated config of `examples/tunnel/`.
fn example(name: &str) -> PathBuf {
    Path::new(&manifest_dir())
        .join("../../examples/tunnel")
        .join(name)
}

#[test]
fn the_examples_validate() {
    let client = load_file(&example("client.toml"), Role::Client).unwrap_or_else(|e| panic!("{e}"));
    let server = load_file(&example("server.toml"), Role::Server).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(client.services.len(), 2);
    assert_eq!(server.services.len(), 2);
    // Both ends describe the same link.
    assert_eq!(client.link, server.link);
    assert_eq!(client.fec, server.fec);
    assert_eq!(client.link.bandwidth, 1_544_000);
    assert_eq!(client.link.rtt, Duration::from_millis(500));
}

#[test]
fn the_examples_show_the_defaults() {
    let client = load_file(&example("client.toml"), Role::Client).unwrap_or_else(|e| panic!("{e}"));
    let defaults = LinkParams::default();
    assert_eq!(client.link.mtu, defaults.mtu);
    assert_eq!(client.link.congestion, Congestion::Wan);
    assert_eq!(client.link.transport, defaults.transport);
    assert_eq!(client.link.idle_timeout, defaults.idle_timeout);
    assert_eq!(client.link.keep_alive, defaults.keep_alive);
    assert_eq!(client.dedup, DedupSettings::default());
    assert_eq!(client.fec, FecSettings::default());
    assert_eq!(client.compression, Some(DEFAULT_LEVEL));
    let side = client.client.unwrap();
    assert_eq!(side.connect_timeout, Duration::from_secs(10));
    assert_eq!(side.drain_timeout, DEFAULT_DRAIN_TIMEOUT);
}

/// This crate's directory as cargo gives it to the running test, not as it
/// was when the test was built: a build cache shared by two checkouts of the
/// repository may run a test binary built in the other one, and the test must
/// read this checkout's files.
fn manifest_dir() -> String {
    std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_owned())
}
