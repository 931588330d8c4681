//! The committed corpus (`fuzz/corpus/<target>/`), replayed through each target as an ordinary
//! test: every input the fuzzer found interesting, and every crash it found (fixed since), runs
//! on each `cargo test`, on the stable toolchain, without the fuzzer.

use std::path::Path;

fn replay(target: &str, run: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target);
    let mut inputs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a corpus entry").path())
        .collect();
    inputs.sort();
    assert!(!inputs.is_empty(), "{} is empty", dir.display());
    for input in inputs {
        let data = std::fs::read(&input).expect("a corpus file");
        // A panic names the input it came from.
        eprintln!("{target}: {}", input.display());
        run(&data);
    }
}

#[test]
fn config_corpus_loads_without_panicking() {
    replay("config", interlingua_fuzz::config::run);
}

#[test]
fn dialects_corpus_translates_without_panicking() {
    replay("dialects", interlingua_fuzz::dialects::run);
}

#[test]
fn token_corpus_verifies_without_panicking() {
    replay("token", interlingua_fuzz::token::run);
}
