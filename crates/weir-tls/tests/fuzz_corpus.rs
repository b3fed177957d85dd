//! Replays `fuzz/corpus/client_hello/` through the checks the fuzz target runs, so every
//! seed and every input the fuzzer kept is a regression test under plain `cargo test`.

use std::fs;
use std::path::PathBuf;

#[path = "../../../fuzz/src/client_hello.rs"]
mod checks;

#[test]
fn client_hello_corpus_replays() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/client_hello");
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|error| panic!("corpus {} missing: {error}", dir.display()))
        .map(|entry| entry.expect("readable corpus directory").path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    assert!(
        files.len() >= 15,
        "corpus {} has too few seeds",
        dir.display()
    );
    let failed: Vec<String> = files
        .iter()
        .filter(|path| {
            let input =
                fs::read(path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
            std::panic::catch_unwind(|| checks::check_client_hello(&input)).is_err()
        })
        .map(|path| path.display().to_string())
        .collect();
    assert!(failed.is_empty(), "checks failed on {failed:#?}");
}
