//! Target `token`: the bearer token parser, `Authenticator::verify`, fed `Bearer <bytes>`.
//!
//! The keys are those of a real config: an HMAC secret (from an environment variable, as
//! interlingua reads secrets), an RSA public key from a PEM file and an Ed25519 key in a JWKS
//! file, with an issuer and an audience required. The public keys are committed in `fuzz/keys/`;
//! the seed tokens of `corpus/token/` were signed with their private halves (see
//! `keys/README.md`), so the corpus holds tokens that verify, and the fuzzer starts from them.
//! `verify` is async (a key set may be fetched): a current-thread runtime drives it.

use std::path::Path;
use std::sync::{Arc, LazyLock};

use interlingua::auth::{AuthError, Authenticator, Identity};
use interlingua::upstream::Client;
use tokio::runtime::Runtime;

/// The environment variable the HMAC key is read from.
pub const HS_ENV: &str = "INTERLINGUA_FUZZ_HS_SECRET";
/// The HMAC secret of key `hs` (not a secret: it signs the seed tokens).
pub const HS_SECRET: &str = "interlingua-fuzz-hmac-secret-of-32-bytes";

/// The config the tokens are checked against, with `{keys}` for the keys' directory.
const CONFIG: &str = include_str!("../keys/config.toml");

struct Verifier {
    runtime: Runtime,
    auth: Authenticator,
}

static VERIFIER: LazyLock<Verifier> = LazyLock::new(|| {
    // Set before any thread of the fuzzer reads the environment.
    std::env::set_var(HS_ENV, HS_SECRET);
    let keys = Path::new(env!("CARGO_MANIFEST_DIR")).join("keys");
    let text = CONFIG.replace("{keys}", &keys.display().to_string());
    let config = match interlingua::config::parse(&text, "fuzz token keys") {
        Ok(c) => c,
        Err(p) => panic!("the fuzz target's [auth] does not load:\n{p}"),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => panic!("no runtime: {e}"),
    };
    let auth = config.auth.as_ref().map(|a| {
        // The client (for key sets at a URL) belongs to a runtime.
        let _inside = runtime.enter();
        Authenticator::new(a, Arc::new(Client::new(1)))
    });
    match auth {
        Some(Ok(auth)) => Verifier { runtime, auth },
        Some(Err(e)) => panic!("the fuzz target's keys do not load: {e}"),
        None => panic!("the fuzz target's config has no [auth]"),
    }
});

/// Verifies `Bearer <data>`.
pub fn run(data: &[u8]) {
    let _ = verify(data);
}

/// Who `Bearer <data>` says is calling, or why it is refused.
pub fn verify(data: &[u8]) -> Result<Identity, AuthError> {
    let v = &*VERIFIER;
    let mut header = b"Bearer ".to_vec();
    header.extend_from_slice(data);
    v.runtime.block_on(v.auth.verify(Some(&header)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seeds that verify: the fuzzer starts past the signature check from these, and the
    /// keys committed in `keys/` are the ones that signed them.
    #[test]
    fn the_valid_seed_tokens_verify_with_each_key() {
        let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/token");
        for seed in [
            "hs256",
            "hs512-nokid",
            "rs256-pem",
            "eddsa-jwks",
            "rs256-jwks",
        ] {
            let token = std::fs::read(corpus.join(seed)).expect("the seed is committed");
            let identity = verify(&token).unwrap_or_else(|e| panic!("{seed}: {e}"));
            assert_eq!(identity.subject, "alice", "{seed}");
        }
    }
}
