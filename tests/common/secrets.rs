//! The tests' secrets: the HMAC key that signs their tokens and the admin API's token. Configs
//! name them by environment variable, as interlingua wants secrets, so [`set_env`] puts them in
//! this process's environment (once; the tests of one file share it) and [`interlingua`] in a
//! child's.
//!
//! [`interlingua`]: super::process::interlingua

#![allow(dead_code)]

use std::sync::Once;

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::json;

/// The environment variable holding [`HS_SECRET`].
pub const HS_ENV: &str = "INTERLINGUA_TEST_HS_SECRET";
/// The HMAC secret of the key `dev` in [`auth_table`].
pub const HS_SECRET: &str = "a-test-secret-that-is-long-enough-for-hs256";
/// The environment variable holding [`ADMIN_TOKEN`].
pub const ADMIN_ENV: &str = "INTERLINGUA_TEST_ADMIN_TOKEN";
/// The bearer token the admin API wants when a config names [`ADMIN_ENV`].
pub const ADMIN_TOKEN: &str = "admin-token-for-tests";
/// The plan every [`token`] is for.
pub const PLAN: &str = "gold";

/// Sets [`HS_ENV`] and [`ADMIN_ENV`] in this process's environment; only the first call does.
pub fn set_env() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        std::env::set_var(HS_ENV, HS_SECRET);
        std::env::set_var(ADMIN_ENV, ADMIN_TOKEN);
    });
}

/// A JWT for `sub` on plan [`PLAN`], signed HS256 with [`HS_SECRET`] under `kid` `dev`, valid
/// for an hour.
pub fn token(sub: &str) -> String {
    let now = chrono::Utc::now().timestamp();
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some("dev".into());
    jsonwebtoken::encode(
        &header,
        &json!({"sub": sub, "plan": PLAN, "iat": now, "exp": now + 3600}),
        &EncodingKey::from_secret(HS_SECRET.as_bytes()),
    )
    .expect("sign a test token")
}

/// The `[auth]` table that verifies a [`token`]: one HMAC key `dev` reading [`HS_ENV`]. Sets
/// the environment ([`set_env`]), which a proxy reads as it starts.
pub fn auth_table() -> String {
    set_env();
    format!("\n[auth]\n[[auth.keys]]\nid = \"dev\"\ntype = \"hmac\"\nsecret_env = \"{HS_ENV}\"\n")
}
