//! interlingua's fuzz targets, one module per target. Each `run` takes the fuzzer's bytes and
//! returns normally whatever they are: a panic (or an abort, a hang, an allocation past the
//! fuzzer's limit) is a finding.
//!
//! | target     | what it feeds |
//! |------------|---------------|
//! | `config`   | the config loader and the mapping compiler: TOML text → validated model, or problems |
//! | `dialects` | every built-in mapping's decode and encode, of every form, request and response |
//! | `token`    | `Authenticator::verify` over `Bearer <bytes>`, with HMAC, PEM and JWKS keys configured |
//!
//! The libFuzzer binaries (`fuzz_targets/`) call these; `tests/corpus.rs` replays the committed
//! corpus (`corpus/<target>/`) through them as ordinary tests. `fuzz/run` builds and runs the
//! targets (see `docs/architecture.md`, "Fuzzing").

pub mod config;
pub mod dialects;
pub mod token;
