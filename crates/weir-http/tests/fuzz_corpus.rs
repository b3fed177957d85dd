//! Replays the fuzz corpora (`fuzz/corpus/<target>/`) through the checks the
//! fuzz targets run, so every seed and every input the fuzzers kept is a
//! regression test under plain `cargo test`, no nightly needed.

use std::fs;
use std::path::PathBuf;

#[path = "../../../fuzz/src/lib.rs"]
mod checks;

/// Runs `check` on every file of `fuzz/corpus/<target>`; fails when the
/// directory is missing or empty, and lists the files whose check panicked.
fn replay(target: &str, check: fn(&[u8])) {
    let dir = PathBuf::from(manifest_dir())
        .join("../../fuzz/corpus")
        .join(target);
    let entries = fs::read_dir(&dir)
        .unwrap_or_else(|error| panic!("corpus {} missing: {error}", dir.display()));
    let mut files: Vec<PathBuf> = entries
        .map(|entry| entry.expect("readable corpus directory").path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "corpus {} is empty", dir.display());
    let failed: Vec<String> = files
        .iter()
        .filter(|path| {
            let input =
                fs::read(path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
            std::panic::catch_unwind(|| check(&input)).is_err()
        })
        .map(|path| path.display().to_string())
        .collect();
    assert!(failed.is_empty(), "checks failed on {failed:#?}");
}

#[test]
fn request_head_corpus_replays() {
    replay("request_head", checks::check_request_head);
}

#[test]
fn response_head_corpus_replays() {
    replay("response_head", checks::check_response_head);
}

#[test]
fn chunked_corpus_replays() {
    replay("chunked", checks::check_chunked);
}

/// This crate's directory as cargo gives it to the running test, not as it
/// was when the test was built: a build cache shared by two checkouts of the
/// repository may run a test binary built in the other one, and the test must
/// read this checkout's files.
fn manifest_dir() -> String {
    std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_owned())
}

#[test]
fn hpack_corpus_replays() {
    replay("hpack", checks::check_hpack);
}

#[test]
fn frames_corpus_replays() {
    replay("frames", checks::check_frames);
}

#[test]
fn h2server_corpus_replays() {
    replay("h2server", checks::check_h2server);
}

#[test]
fn h2client_corpus_replays() {
    replay("h2client", checks::check_h2client);
}
