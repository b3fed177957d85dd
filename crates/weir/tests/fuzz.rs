//! The fuzz targets on the stable toolchain: every target of `fuzz/` (the
//! HTTP codec's request and response heads, chunked coding, HTTP/2 frames, HPACK and the HTTP/2 server and client connections, the config
//! loader, the tunnel's wire parsers, the PROXY protocol, the ClientHello reader) replays its corpus, then runs mutated
//! corpus inputs for a time budget: `WEIR_FUZZ_SECONDS` per target (1 s by
//! default; `.ci/run` gives each 20 s). An input whose check panics is saved
//! as `fuzz/corpus/<target>/crash-<hash>` — commit it once fixed and it stays
//! a regression case — and fails the test with its seed. `cargo fuzz` (see
//! `fuzz/README.md`) adds coverage guidance on a nightly toolchain.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[path = "../../../fuzz/src/lib.rs"]
mod http;

#[path = "../../../fuzz/src/config_check.rs"]
mod config_check;

#[path = "../../../fuzz/src/tunnel_check.rs"]
mod tunnel_check;

#[path = "../../../fuzz/src/proxy_protocol.rs"]
mod proxy_protocol;

#[path = "../../../fuzz/src/client_hello.rs"]
mod client_hello;

#[path = "../../../fuzz/src/mutate.rs"]
mod mutate;

use mutate::{Rng, mutate};

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(&manifest_dir())
        .join("../../fuzz/corpus")
        .join(target)
}

fn budget() -> Duration {
    let seconds = std::env::var("WEIR_FUZZ_SECONDS")
        .ok()
        .and_then(|text| text.parse::<f64>().ok())
        .unwrap_or(1.0);
    Duration::from_secs_f64(seconds.max(0.0))
}

fn seed() -> u64 {
    match std::env::var("WEIR_FUZZ_SEED")
        .ok()
        .and_then(|text| text.parse().ok())
    {
        Some(seed) => seed,
        None => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |elapsed| elapsed.as_nanos() as u64),
    }
}

/// The text of a caught panic.
fn message(payload: &Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| {
            payload
                .downcast_ref::<&str>()
                .map(|text| (*text).to_owned())
        })
        .unwrap_or_else(|| "a panic".to_owned())
}

/// A short stable name for a crashing input.
fn fingerprint(data: &[u8]) -> String {
    let hash = data.iter().fold(0xcbf2_9ce4_8422_2325_u64, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{hash:016x}")
}

/// Replays `target`'s corpus through `check`, then mutates it for the budget.
fn fuzz(target: &str, check: fn(&[u8])) {
    let dir = corpus_dir(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|error| panic!("corpus {} missing: {error}", dir.display()))
        .map(|entry| entry.expect("readable").path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    let corpus: Vec<Vec<u8>> = files
        .iter()
        .map(|path| std::fs::read(path).expect("readable"))
        .collect();
    assert!(!corpus.is_empty(), "corpus {} is empty", dir.display());
    for (path, input) in files.iter().zip(&corpus) {
        let replayed = std::panic::catch_unwind(|| check(input));
        assert!(
            replayed.is_ok(),
            "{target}: corpus file {} fails its check",
            path.display()
        );
    }

    let seed = seed();
    let mut rng = Rng::new(seed);
    let deadline = Instant::now() + budget();
    let mut runs = 0u64;
    let mut crash = None;
    while Instant::now() < deadline {
        for _ in 0..64 {
            let input = &corpus[rng.below(corpus.len())];
            let other = &corpus[rng.below(corpus.len())];
            let data = mutate(input, other, &mut rng);
            runs += 1;
            if let Err(payload) = std::panic::catch_unwind(|| check(&data)) {
                crash = Some((data, message(&payload)));
                break;
            }
        }
        if crash.is_some() {
            break;
        }
    }
    println!("fuzz {target}: {runs} inputs, seed {seed}");
    if let Some((data, why)) = crash {
        let path = dir.join(format!("crash-{}", fingerprint(&data)));
        let saved = std::fs::write(&path, &data);
        panic!(
            "{target}: a mutated input fails its check ({why}; seed {seed}); saved as {} ({saved:?}): {:?}",
            path.display(),
            String::from_utf8_lossy(&data)
        );
    }
}

#[test]
fn request_head() {
    fuzz("request_head", http::check_request_head);
}

#[test]
fn response_head() {
    fuzz("response_head", http::check_response_head);
}

#[test]
fn chunked() {
    fuzz("chunked", http::check_chunked);
}

#[test]
fn frames() {
    fuzz("frames", http::check_frames);
}

#[test]
fn h2server() {
    fuzz("h2server", http::check_h2server);
}

#[test]
fn h2client() {
    fuzz("h2client", http::check_h2client);
}

#[test]
fn hpack() {
    fuzz("hpack", http::check_hpack);
}

#[test]
fn config() {
    fuzz("config", config_check::check_config);
}

#[test]
fn tunnel_wire() {
    fuzz("tunnel_wire", tunnel_check::check_tunnel_wire);
}

#[test]
fn proxy_protocol() {
    fuzz("proxy_protocol", proxy_protocol::check_proxy_protocol);
}

#[test]
fn client_hello() {
    fuzz("client_hello", client_hello::check_client_hello);
}

/// This crate's directory as cargo gives it to the running test, not as it
/// was when the test was built: a build cache shared by two checkouts of the
/// repository may run a test binary built in the other one, and the test must
/// read this checkout's files.
fn manifest_dir() -> String {
    std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_owned())
}
