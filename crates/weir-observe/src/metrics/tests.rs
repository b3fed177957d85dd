use super::*;

#[test]
fn record_status_increments_the_right_class() {
    let metrics = Metrics::new();
    let vs = metrics.virtual_server("web");
    let pool = metrics.pool("app");
    for status in [101, 200, 204, 204, 302, 404, 404, 404, 503] {
        vs.record_status(status);
        pool.record_status(status);
    }
    let counts = |requests: &[Counter; 5]| requests.each_ref().map(Counter::get);
    assert_eq!(counts(&vs.requests), [1, 3, 1, 3, 1]);
    assert_eq!(counts(&pool.requests), [1, 3, 1, 3, 1]);
}

#[test]
fn statuses_outside_the_classes_are_not_counted() {
    let metrics = Metrics::new();
    let vs = metrics.virtual_server("web");
    for status in [0, 99, 600, 999, u16::MAX] {
        vs.record_status(status);
    }
    assert!(vs.requests.iter().all(|c| c.get() == 0));
}

#[test]
fn status_class_boundaries() {
    assert_eq!(StatusClass::of(100), Some(StatusClass::Informational));
    assert_eq!(StatusClass::of(199), Some(StatusClass::Informational));
    assert_eq!(StatusClass::of(200), Some(StatusClass::Success));
    assert_eq!(StatusClass::of(599), Some(StatusClass::ServerError));
    for (index, class) in StatusClass::ALL.iter().enumerate() {
        assert_eq!(class.index(), index);
        assert_eq!(class.as_str(), format!("{}xx", index + 1));
    }
}

#[test]
fn same_name_gives_same_series() {
    let metrics = Metrics::new();
    metrics.virtual_server("web").connections_accepted.inc();
    metrics.virtual_server("web").connections_accepted.inc();
    metrics.pool("app").retries.inc();
    metrics.pool("app").retries.inc();
    metrics.node("app", "10.0.0.1:80").ejections.inc();
    metrics.node("app", "10.0.0.1:80").ejections.inc();
    assert_eq!(metrics.virtual_server("web").connections_accepted.get(), 2);
    assert_eq!(metrics.pool("app").retries.get(), 2);
    assert_eq!(metrics.node("app", "10.0.0.1:80").ejections.get(), 2);
    assert_eq!(metrics.node("other", "10.0.0.1:80").ejections.get(), 0);
    let text = metrics.encode();
    assert!(text.contains("weir_client_connections_accepted_total{virtual_server=\"web\"} 2\n"));
}

#[test]
fn derived_ratios() {
    let metrics = Metrics::new();
    assert_eq!(metrics.reuse_ratio(), 0.0);
    assert_eq!(metrics.offload_ratio(), 0.0);

    let a = metrics.node("app", "10.0.0.1:80");
    let b = metrics.node("app", "10.0.0.2:80");
    let c = metrics.node("api", "10.0.1.1:80");
    // 300 requests over 4 connections.
    a.requests_forwarded.inc_by(100);
    a.connections_created.inc_by(1);
    b.requests_forwarded.inc_by(150);
    b.connections_created.inc_by(2);
    c.requests_forwarded.inc_by(50);
    c.connections_created.inc_by(1);
    assert_eq!(metrics.reuse_ratio(), 75.0);

    // Upstream connections open but no client: 0 / 4.
    a.connections_open.set(1);
    b.connections_open.set(2);
    c.connections_open.set(1);
    assert_eq!(metrics.offload_ratio(), 0.0);
    // 1000 client connections over two virtual servers share 4 upstream ones.
    metrics.virtual_server("web").connections_open.set(600);
    metrics.virtual_server("api").connections_open.set(400);
    assert_eq!(metrics.offload_ratio(), 250.0);

    let text = metrics.encode();
    assert!(text.contains("\nweir_reuse_ratio 75.0\n"), "{text}");
    assert!(text.contains("\nweir_offload_ratio 250.0\n"), "{text}");

    // Client connections but no upstream one open: 0, not infinity.
    for node in [&a, &b, &c] {
        node.connections_open.set(0);
    }
    assert_eq!(metrics.offload_ratio(), 0.0);
}

#[test]
fn encode_contains_every_metric() {
    let metrics = Metrics::new();
    metrics.virtual_server("web");
    metrics.pool("app");
    metrics.node("app", "10.0.0.1:80");
    let tls = metrics.tls("web");
    tls.record_handshake("TLSv1_3", "TLS13_AES_128_GCM_SHA256", false);
    tls.record_failure("timeout");
    tls.set_certificates(&[("example.test".to_owned(), "ecdsa", 30.0, Some(20.0))]);
    metrics.upstream_tls("app");
    metrics.cache("web");
    metrics.compression("web");
    metrics.traffic("web", &["old-blog"], (&["per-client"], &["api"]), true);
    metrics.http2("web");
    metrics.upstream_http2("app", "10.0.0.1:80");
    metrics.layer4("web");
    metrics.dns("app", "app.test:80").resolved("changed", 2);
    let text = metrics.encode();
    for spec in names::ALL {
        let name = spec.exposed_name();
        let family = format!("{}_{}", names::PREFIX, spec.name);
        assert!(
            text.contains(&format!("# HELP {family} ")),
            "no help for {name}"
        );
        assert!(
            text.contains(&format!("\n{name}")),
            "no sample of {name}:\n{text}"
        );
        for label in spec.labels {
            let sample = text
                .lines()
                .find(|line| line.starts_with(&name))
                .unwrap_or_default();
            assert!(
                sample.contains(&format!("{label}=\"")),
                "{name} lacks {label}"
            );
        }
    }
    assert!(text.contains(&format!(
        "weir_build_info{{version=\"{}\"}} 1\n",
        weir_core::VERSION
    )));
    assert!(text.contains("weir_requests_total{virtual_server=\"web\",class=\"2xx\"} 0\n"));
    assert!(text.contains("weir_pool_requests_total{pool=\"app\",class=\"5xx\"} 0\n"));
    assert!(text.contains("weir_upstream_connections_open{pool=\"app\",node=\"10.0.0.1:80\"} 0\n"));
    assert!(text.ends_with("# EOF\n"));
}

#[test]
fn label_values_are_escaped() {
    let metrics = Metrics::new();
    metrics.pool("a\"b\\c\nd").retries.inc();
    let text = metrics.encode();
    assert!(
        text.contains(r#"weir_retries_total{pool="a\"b\\c\nd"} 1"#),
        "{text}"
    );
}

#[test]
fn removed_series_disappear() {
    let metrics = Metrics::new();
    let node = metrics.node("app", "10.0.0.1:80");
    node.requests_forwarded.inc_by(10);
    node.connections_created.inc();
    metrics.virtual_server("web");
    metrics.pool("app");
    // TLS series too, whose labels (versions, suites, reasons, certificates) vary.
    let tls = metrics.tls("web");
    tls.record_handshake("TLSv1_3", "TLS13_AES_128_GCM_SHA256", false);
    tls.record_handshake("TLSv1_2", "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", true);
    tls.record_failure("timeout");
    tls.set_certificates(&[("example.test".to_owned(), "ecdsa", 30.0, Some(20.0))]);
    metrics.upstream_tls("app").failed.inc();
    metrics.remove_node("app", "10.0.0.1:80");
    metrics.remove_pool("app");
    metrics.remove_virtual_server("web");
    // Handles still held keep working, unexported.
    node.requests_forwarded.inc();
    assert_eq!(metrics.reuse_ratio(), 0.0);
    let text = metrics.encode();
    assert!(!text.contains("10.0.0.1:80"), "{text}");
    assert!(!text.contains("pool=\"app\""), "{text}");
    assert!(!text.contains("virtual_server=\"web\""), "{text}");
    // A handle still held (a handshake in progress when the reload removed it) makes
    // none of them again.
    tls.record_handshake("TLSv1_3", "TLS13_AES_128_GCM_SHA256", false);
    tls.record_failure("timeout");
    tls.set_certificates(&[("example.test".to_owned(), "ecdsa", 30.0, None)]);
    let text = metrics.encode();
    assert!(!text.contains("virtual_server=\"web\""), "{text}");
    // Back again, they start from zero.
    metrics.tls("web").record_failure("timeout");
    let text = metrics.encode();
    assert!(
        text.contains(
            "weir_tls_handshake_failures_total{virtual_server=\"web\",reason=\"timeout\"} 1\n"
        ),
        "{text}"
    );
}

/// TLS handles made for virtual servers that never served (a dry run's, a refused
/// reload's) are forgotten once dropped, however many such checks come; handles held, and
/// those that made series, are kept.
#[test]
fn tls_handles_of_checks_are_forgotten() {
    let metrics = Metrics::new();
    let serving = metrics.tls("serving");
    metrics.tls("counted").record_failure("timeout");
    for check in 0..100 {
        drop(metrics.tls(&format!("checked-{check}")));
    }
    let names: Vec<String> = metrics.handles().tls.keys().cloned().collect();
    assert!(names.len() <= 3, "{names:?}");
    assert!(names.contains(&"serving".to_owned()), "{names:?}");
    assert!(names.contains(&"counted".to_owned()), "{names:?}");
    serving.record_failure("timeout");
    assert!(metrics.encode().contains(
        "weir_tls_handshake_failures_total{virtual_server=\"serving\",reason=\"timeout\"} 1\n"
    ));
}

#[test]
fn metrics_are_shareable_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Metrics>();
    assert_send_sync::<VirtualServerMetrics>();
    assert_send_sync::<PoolMetrics>();
    assert_send_sync::<NodeMetrics>();
}

/// The process rows are read at each scrape: descriptors opened since show, and the
/// limit and memory are the process's own.
#[test]
fn process_rows_follow_the_process() {
    let metrics = Metrics::new();
    let value = |text: &str, name: &str| -> i64 {
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("{name} in {text}"))
    };
    let before = metrics.encode();
    let files: Vec<std::fs::File> = (0..40)
        .map(|_| std::fs::File::open("/proc/self/statm").unwrap())
        .collect();
    let after = metrics.encode();
    let opened = value(&after, "weir_process_open_fds") - value(&before, "weir_process_open_fds");
    // Other tests of this binary open and close files meanwhile: a margin either way.
    assert!((30..=50).contains(&opened), "{opened} more open");
    drop(files);
    let (soft, _) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
    assert_eq!(value(&after, "weir_process_max_fds"), soft as i64);
    assert!(value(&after, "weir_process_resident_memory_bytes") > 1 << 20);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!((now - 60..=now).contains(&value(&after, "weir_process_start_time_seconds")));
}

/// The descriptor count read from the size of `/proc/self/fd` is the one a listing gives
/// (less the listing's own descriptor), on this kernel and with many descriptors open.
#[test]
fn the_descriptor_count_matches_the_listing() {
    let files: Vec<std::fs::File> = (0..300)
        .map(|_| std::fs::File::open("/proc/self/statm").unwrap())
        .collect();
    let listed = || std::fs::read_dir("/proc/self/fd").unwrap().count() as u64 - 1;
    // Other tests of this binary open and close files meanwhile: take the count between
    // two listings and allow that much drift.
    let (first, counted, second) = (listed(), process::open_descriptors().unwrap(), listed());
    let (low, high) = (first.min(second), first.max(second));
    assert!(
        (low.saturating_sub(8)..=high + 8).contains(&counted),
        "{counted} counted, {first} and {second} listed"
    );
    assert!(counted >= 300, "{counted}");
    drop(files);
}

/// The classic text format: counters named with `_total` in HELP and TYPE, no UNIT or
/// EOF, the samples unchanged; every family of the real exposition converts.
#[test]
fn openmetrics_converts_to_the_classic_text_format() {
    let openmetrics = "# HELP weir_requests Requests received.\n# TYPE weir_requests counter\n\
        weir_requests_total{virtual_server=\"web\"} 3\n\
        # HELP weir_uptime Seconds up.\n# TYPE weir_uptime gauge\n# UNIT weir_uptime seconds\n\
        weir_uptime 7.5\n# EOF\n";
    assert_eq!(
        openmetrics_to_text(openmetrics),
        "# HELP weir_requests_total Requests received.\n# TYPE weir_requests_total counter\n\
         weir_requests_total{virtual_server=\"web\"} 3\n\
         # HELP weir_uptime Seconds up.\n# TYPE weir_uptime gauge\nweir_uptime 7.5\n"
    );
    let metrics = Metrics::new();
    metrics.virtual_server("web").record_status(200);
    let text = openmetrics_to_text(&metrics.encode());
    assert!(!text.contains("# EOF") && !text.contains("# UNIT"));
    for line in text.lines().filter(|line| line.starts_with("# TYPE ")) {
        let mut parts = line.split(' ').skip(2);
        let (name, kind) = (parts.next().unwrap(), parts.next().unwrap());
        assert!(
            text.contains(&format!("# HELP {name} ")),
            "no help for {name}"
        );
        assert_eq!(kind == "counter", name.ends_with("_total"), "{line}");
    }
    assert!(
        text.contains("# TYPE weir_requests_total counter"),
        "{text}"
    );
}
