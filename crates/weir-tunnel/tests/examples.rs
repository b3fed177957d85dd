//! The annotated tunnel configs in `examples/tunnel/` must validate for their side, and say
//! the defaults they claim.

use std::path::Path;
use std::time::Duration;

use weir_tunnel::config::{Congestion, DedupSettings, Role, load_file};

fn example(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
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
    let defaults = weir_tunnel::config::LinkParams::default();
    assert_eq!(client.link.mtu, defaults.mtu);
    assert_eq!(client.link.congestion, Congestion::Wan);
    assert_eq!(client.link.transport, defaults.transport);
    assert_eq!(client.link.idle_timeout, defaults.idle_timeout);
    assert_eq!(client.link.keep_alive, defaults.keep_alive);
    assert_eq!(client.dedup, DedupSettings::default());
    assert_eq!(client.fec, weir_tunnel::fec::FecSettings::default());
    assert_eq!(client.compression, Some(weir_tunnel::config::DEFAULT_LEVEL));
    let side = client.client.unwrap();
    assert_eq!(side.connect_timeout, Duration::from_secs(10));
    assert_eq!(
        side.drain_timeout,
        weir_tunnel::config::DEFAULT_DRAIN_TIMEOUT
    );
}
