//! Every configuration in the repository's `examples/` directory must validate.

use std::path::{Path, PathBuf};

fn example_files() -> Vec<PathBuf> {
    let directory = Path::new(&manifest_dir()).join("../../examples");
    let entries = std::fs::read_dir(&directory)
        .unwrap_or_else(|error| panic!("cannot read {}: {error}", directory.display()));
    let mut files: Vec<PathBuf> = entries
        .map(|entry| entry.expect("a readable directory entry").path())
        .filter(|path| {
            path.extension()
                .is_some_and(|extension| extension == "toml")
        })
        .collect();
    files.sort();
    files
}

#[test]
fn every_example_validates() {
    let files = example_files();
    assert!(
        !files.is_empty(),
        "no *.toml files in the examples directory"
    );
    let failures: Vec<String> = files
        .iter()
        .filter_map(|path| weir_config::load_file(path).err())
        .map(|error| error.to_string())
        .collect();
    assert!(
        failures.is_empty(),
        "invalid examples:\n{}",
        failures.join("\n")
    );
}

#[test]
fn annotated_example_sets_every_default() {
    // examples/weir.toml claims to show each key at its default unless it says
    // otherwise; check the claims that matter against the model's defaults.
    let path = Path::new(&manifest_dir()).join("../../examples/weir.toml");
    let config = weir_config::load_file(&path).unwrap_or_else(|error| panic!("{error}"));
    let server = &config.virtual_servers[0];
    assert_eq!(server.limits, weir_config::ClientLimits::default());
    assert_eq!(server.timeouts, weir_config::ClientTimeouts::default());
    assert_eq!(server.http, weir_config::HttpPolicy::default());
    let secure = &config.virtual_servers[1];
    assert_eq!(
        secure.tls.as_ref().map(|tls| tls.alpn.clone()),
        Some(vec!["http/1.1".to_owned(), "http/1.0".to_owned()])
    );
    let pool = &config.pools[0];
    assert_eq!(
        pool.connections,
        weir_config::UpstreamConnections::default()
    );
    assert_eq!(pool.timeouts, weir_config::UpstreamTimeouts::default());
    assert_eq!(pool.passive_health, weir_config::PassiveHealth::default());
    assert_eq!(pool.dns, weir_config::PoolDns::default());
    // HTTP/2 (issue 11): the web virtual server's table and the api pool's.
    assert_eq!(server.http2, weir_config::Http2::default());
    let api = config
        .pools
        .iter()
        .find(|p| p.name == "api")
        .expect("pool api");
    assert_eq!(api.http2, weir_config::UpstreamHttp2::default());
    assert_eq!(pool.protocol, weir_config::UpstreamProtocol::Http1);
    assert_eq!(config.log, weir_config::Log::default());
    assert_eq!(
        config.runtime.drain_timeout,
        weir_config::Runtime::default().drain_timeout
    );
    // Cache and compression (issue 12).
    assert_eq!(
        server.content.cache,
        Some(weir_config::CacheRules::default())
    );
    assert_eq!(
        server.content.compression,
        Some(weir_config::Compression::default())
    );
    let store = server.cache.as_ref().expect("the example has a cache");
    assert_eq!(store.size, weir_config::defaults::CACHE_SIZE);
    assert_eq!(
        store.max_object_size,
        weir_config::defaults::CACHE_MAX_OBJECT_SIZE
    );
}

/// This crate's directory as cargo gives it to the running test, not as it
/// was when the test was built: a build cache shared by two checkouts of the
/// repository may run a test binary built in the other one, and the test must
/// read this checkout's files.
fn manifest_dir() -> String {
    std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_owned())
}
