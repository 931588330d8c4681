//! Bearer JWT authentication: who is calling (subject) and on which paid plan.
//!
//! A token is checked in this order, and the first failure is the reason given (never the token
//! itself): present, `Bearer`, not too large, a well-formed JWT, not `alg: none`, a known key (by
//! `kid`; a key set is fetched again for an unknown `kid`, at most once per its refresh interval),
//! an algorithm that key allows and that fits its type (an RSA key never verifies an HS256 token),
//! the signature, `exp` and `nbf` (with leeway), `iss` and `aud` when configured, and a subject.

mod error;
mod jwks;

use std::sync::Arc;

use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;

pub use error::AuthError;
use jwks::KeySet;

use crate::config::{Auth, ClaimPath, Key, KeyFamily, KeyKind};
use crate::engine::client::Client;

/// Who a verified token says is calling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub subject: String,
    pub plan: Option<String>,
}

/// A key ready to verify with.
struct StaticKey {
    id: String,
    algorithms: Vec<Algorithm>,
    key: DecodingKey,
}

/// Verifies bearer tokens against the configured keys.
pub struct Authenticator {
    settings: Auth,
    keys: Vec<StaticKey>,
    sets: Vec<KeySet>,
    /// Tokens that verified, by their text: a client sends the same token on every request, and
    /// checking a signature and parsing claims each time is work the answer does not change.
    verified: moka::sync::Cache<String, Verified>,
}

/// A verified token's identity and when the token expires (unix seconds).
#[derive(Clone)]
struct Verified {
    identity: Identity,
    expires: u64,
}

/// How many verified tokens are remembered.
const VERIFIED_CAPACITY: u64 = 10_000;
/// How long a verified token is trusted without checking it again: a key withdrawn from a key
/// set stops being accepted within this time.
const VERIFIED_TTL: std::time::Duration = std::time::Duration::from_secs(30);

impl Authenticator {
    /// Prepares the keys of `auth`. Key sets are fetched when first needed.
    pub fn new(auth: &Auth, client: Arc<Client>) -> Result<Authenticator, String> {
        let mut keys = Vec::new();
        let mut sets = Vec::new();
        for k in &auth.keys {
            match &k.kind {
                KeyKind::Jwks {
                    source,
                    refresh_interval,
                } => sets.push(KeySet::new(
                    k,
                    source.clone(),
                    *refresh_interval,
                    client.clone(),
                )),
                _ => keys.push(StaticKey {
                    id: k.id.clone(),
                    algorithms: k.algorithms.clone(),
                    key: decoding_key(k)?,
                }),
            }
        }
        Ok(Authenticator {
            settings: auth.clone(),
            keys,
            sets,
            verified: moka::sync::Cache::builder()
                .max_capacity(VERIFIED_CAPACITY)
                .time_to_live(VERIFIED_TTL)
                .build(),
        })
    }

    /// Checks the `Authorization` header value and returns who is calling.
    pub async fn verify(&self, authorization: Option<&[u8]>) -> Result<Identity, AuthError> {
        let value = authorization.ok_or(AuthError::Missing)?;
        let value = std::str::from_utf8(value).map_err(|_| AuthError::Scheme)?;
        let token = match value.split_once(' ') {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("bearer") => rest.trim(),
            _ => return Err(AuthError::Scheme),
        };
        if token.len() > self.settings.max_token_size {
            return Err(AuthError::TooLarge(self.settings.max_token_size));
        }
        let now = jsonwebtoken::get_current_timestamp();
        if let Some(v) = self.verified.get(token) {
            if now <= v.expires.saturating_add(self.settings.leeway.as_secs()) {
                return Ok(v.identity);
            }
            // Expired since it was verified: the full check below says so.
            self.verified.invalidate(token);
        }
        self.verify_token(token).await
    }

    /// The full check of a token (see the module's documentation for the order).
    async fn verify_token(&self, token: &str) -> Result<Identity, AuthError> {
        if declares_alg_none(token) {
            return Err(AuthError::AlgNone);
        }
        let header = jsonwebtoken::decode_header(token).map_err(|_| match declared_alg(token) {
            // A well-formed token signed with an algorithm interlingua has no verifier for
            // (ES256K, say) is refused for that, not as malformed.
            Some(alg) if alg.parse::<Algorithm>().is_err() && plausible_alg_name(&alg) => {
                AuthError::AlgorithmNotAllowed { alg, key: None }
            }
            _ => AuthError::Malformed,
        })?;
        let alg = header.alg;
        let claims = match &header.kid {
            Some(kid) => {
                let (algorithms, key) = self.find(kid).await?;
                self.check(token, alg, &algorithms, &key, kid)?
            }
            None => {
                // No kid: every key that allows the algorithm may have signed it.
                let candidates: Vec<&StaticKey> = self
                    .keys
                    .iter()
                    .filter(|k| k.algorithms.contains(&alg))
                    .collect();
                if candidates.is_empty() {
                    return Err(AuthError::AlgorithmNotAllowed {
                        alg: format!("{alg:?}"),
                        key: None,
                    });
                }
                let mut last = AuthError::BadSignature;
                let mut found = None;
                for k in candidates {
                    match self.check(token, alg, &k.algorithms, &k.key, &k.id) {
                        Ok(c) => {
                            found = Some(c);
                            break;
                        }
                        Err(AuthError::BadSignature) => {}
                        Err(e) => {
                            last = e;
                            break;
                        }
                    }
                }
                found.ok_or(last)?
            }
        };
        let subject = claim_text(&claims, &self.settings.subject_claim)
            .ok_or_else(|| AuthError::NoSubject(self.settings.subject_claim.as_text()))?;
        let identity = Identity {
            subject,
            plan: claim_text(&claims, &self.settings.plan_claim),
        };
        // `exp` is required and was checked, so it is a number here.
        if let Some(expires) = claims.get("exp").and_then(Value::as_u64) {
            let verified = Verified {
                identity: identity.clone(),
                expires,
            };
            self.verified.insert(token.to_string(), verified);
        }
        Ok(identity)
    }

    /// The key with this `kid`: a configured key, or one of a key set's.
    async fn find(&self, kid: &str) -> Result<(Vec<Algorithm>, DecodingKey), AuthError> {
        if let Some(k) = self.keys.iter().find(|k| k.id == kid) {
            return Ok((k.algorithms.clone(), k.key.clone()));
        }
        for set in &self.sets {
            if let Some(found) = set.get(kid).await? {
                return Ok(found);
            }
        }
        Err(AuthError::UnknownKid(kid.to_string()))
    }

    /// Verifies the signature and the registered claims with one key.
    fn check(
        &self,
        token: &str,
        alg: Algorithm,
        allowed: &[Algorithm],
        key: &DecodingKey,
        id: &str,
    ) -> Result<Value, AuthError> {
        // The header's alg must be one this key allows, and of the key's own family: an RSA public
        // key used as an HMAC secret would otherwise verify a forged token.
        if !allowed.contains(&alg) || alg.family() != key.family() {
            return Err(AuthError::AlgorithmNotAllowed {
                alg: format!("{alg:?}"),
                key: Some(id.to_string()),
            });
        }
        let mut v = Validation::new(alg);
        v.leeway = self.settings.leeway.as_secs();
        v.validate_exp = true;
        v.validate_nbf = true;
        v.set_required_spec_claims(&["exp"]);
        match &self.settings.issuer {
            Some(iss) => v.set_issuer(&[iss]),
            None => v.iss = None,
        }
        match &self.settings.audience {
            Some(aud) => v.set_audience(&[aud]),
            None => v.validate_aud = false,
        }
        jsonwebtoken::decode::<Value>(token, key, &v)
            .map(|d| d.claims)
            .map_err(|e| AuthError::from_jwt(e.kind()))
    }
}

/// The decoding key of a configured (non-set) key.
fn decoding_key(k: &Key) -> Result<DecodingKey, String> {
    let r = match &k.kind {
        KeyKind::Hmac { secret } => return Ok(DecodingKey::from_secret(secret)),
        KeyKind::Pem { family, public, .. } => match family {
            KeyFamily::Rsa => DecodingKey::from_rsa_pem(public),
            KeyFamily::Ec => DecodingKey::from_ec_pem(public),
            KeyFamily::Ed25519 => DecodingKey::from_ed_pem(public),
        },
        KeyKind::Jwks { .. } => return Err(format!("key `{}` is a key set", k.id)),
    };
    r.map_err(|e| format!("key `{}`: {e}", k.id))
}

/// `alg: none` is refused outright, however it is spelled.
fn declares_alg_none(token: &str) -> bool {
    declared_alg(token).is_some_and(|a| a.eq_ignore_ascii_case("none"))
}

/// The `alg` a token's header declares, read without trusting anything else in it.
fn declared_alg(token: &str) -> Option<String> {
    use base64::Engine as _;
    let header = token.split('.').next()?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(header.trim_end_matches('='))
        .ok()?;
    let h: Value = serde_json::from_slice(&bytes).ok()?;
    h.get("alg").and_then(Value::as_str).map(str::to_string)
}

/// Whether `alg` looks like an algorithm's name (it is echoed in an error message and a
/// header, so nothing else is).
fn plausible_alg_name(alg: &str) -> bool {
    !alg.is_empty()
        && alg.len() <= 32
        && alg
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'+')
}

/// A claim as text (strings as they are, numbers printed).
fn claim_text(claims: &Value, path: &ClaimPath) -> Option<String> {
    let v = path.0.iter().try_fold(claims, |v, k| v.get(k))?;
    match v {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}
