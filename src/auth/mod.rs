//! Bearer JWT authentication: who is calling (subject) and on which paid plan.
//!
//! A token is checked in this order, and the first failure is the reason given (never the token
//! itself): present, `Bearer`, not too large, not `alg: none`, a well-formed JWT whose header
//! and claims are JSON objects naming nothing twice ([`json`]; claims may, with
//! `allow_duplicate_claims`), no `crit` header (RFC 7515
//! §4.1.11: interlingua understands no extension), a known key (by `kid`; without one, every key
//! that allows the algorithm, key sets' included — see [`jwks`] for when a set is read), an
//! algorithm that key allows and that fits its type (an RSA key never verifies an HS256 token),
//! the signature, `iss` and `aud` present and of their type when configured, `exp` and `nbf`
//! (with leeway), the values of `iss` and `aud`, `iat` not in the future (unless
//! `allow_future_iat`), and a subject.

mod error;
mod json;
mod jwks;
pub mod metadata;

use std::sync::Arc;

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};

pub use error::{challenge, AuthError, Challenge};
use jwks::KeySet;
pub use metadata::{Resource, Resources};

use crate::config::{Auth, ClaimPath, Key, KeyFamily, KeyKind};
use crate::upstream::Client;

/// Who a verified token says is calling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub subject: String,
    pub plan: Option<String>,
}

impl Identity {
    /// The caller as a route names it to its agent.
    pub fn caller(&self) -> crate::upstream::Caller<'_> {
        crate::upstream::Caller {
            subject: &self.subject,
            plan: self.plan.as_deref(),
        }
    }
}

/// A key ready to verify with.
struct StaticKey {
    id: String,
    algorithms: Vec<Algorithm>,
    key: DecodingKey,
}

/// A key a token may have been signed with, and where it came from.
struct Candidate {
    id: String,
    algorithms: Vec<Algorithm>,
    key: DecodingKey,
    from: Option<SetCopy>,
}

/// A key set (by its place in `sets`) as read at one time (its generation).
#[derive(Clone, Copy, PartialEq, Eq)]
struct SetCopy {
    set: usize,
    generation: u64,
}

/// A JSON object: a token's header or its claims.
type Object = Map<String, Value>;

/// Verifies bearer tokens against the configured keys.
pub struct Authenticator {
    settings: Auth,
    keys: Vec<StaticKey>,
    sets: Vec<KeySet>,
    /// Tokens that verified, by their text: a client sends the same token on every request, and
    /// checking a signature and parsing claims each time is work the answer does not change.
    verified: moka::sync::Cache<String, Verified>,
}

/// A verified token's identity, when the token expires (unix seconds), and the key set copy
/// whose key verified it (a token verified by a set's key is checked again once the set has been
/// read again, so a withdrawn key's tokens stop being accepted with it).
#[derive(Clone)]
struct Verified {
    identity: Identity,
    expires: u64,
    from: Option<SetCopy>,
}

/// How many verified tokens are remembered.
const VERIFIED_CAPACITY: u64 = 10_000;
/// How long a verified token is trusted without checking it again.
const VERIFIED_TTL: std::time::Duration = std::time::Duration::from_secs(30);

impl Authenticator {
    /// Prepares the keys of `auth`. Key sets are fetched when first needed.
    pub fn new(auth: &Auth, client: Arc<Client>) -> Result<Authenticator, KeyError> {
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
            if now <= v.expires.saturating_add(self.settings.leeway.as_secs())
                && self.still_current(v.from).await
            {
                return Ok(v.identity);
            }
            // Expired since it was verified, or its key set was read again: the full check
            // below says whether it still passes.
            self.verified.invalidate(token);
        }
        self.verify_token(token).await
    }

    /// Whether the key set copy that verified a token is still the current one (reading the set
    /// again first if it is due).
    async fn still_current(&self, from: Option<SetCopy>) -> bool {
        let Some(from) = from else {
            return true;
        };
        match self.sets[from.set].current(None).await {
            Ok(copy) => copy.generation == from.generation,
            Err(_) => false,
        }
    }

    /// The full check of a token (see the module's documentation for the order).
    async fn verify_token(&self, token: &str) -> Result<Identity, AuthError> {
        if declares_alg_none(token) {
            return Err(AuthError::AlgNone);
        }
        let (header_fields, claims) = self.parts(token)?;
        check_crit(&header_fields)?;
        let header = jsonwebtoken::decode_header(token).map_err(|_| match declared_alg(token) {
            // A well-formed token signed with an algorithm interlingua has no verifier for
            // (ES256K, say) is refused for that, not as malformed.
            Some(alg) if alg.parse::<Algorithm>().is_err() && plausible_alg_name(&alg) => {
                AuthError::AlgorithmNotAllowed { alg, key: None }
            }
            _ => AuthError::Malformed,
        })?;
        let alg = header.alg;
        let from = match &header.kid {
            Some(kid) => {
                let c = self.find(kid).await?;
                self.check(token, alg, &c, &claims)?;
                c.from
            }
            None => {
                // No kid: every key that allows the algorithm may have signed it.
                let candidates = self.candidates(alg).await?;
                let mut last = AuthError::BadSignature;
                let mut found = None;
                for c in candidates {
                    match self.check(token, alg, &c, &claims) {
                        Ok(()) => {
                            found = Some(c.from);
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
        let claims = Value::Object(claims);
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
                from,
            };
            self.verified.insert(token.to_string(), verified);
        }
        Ok(identity)
    }

    /// The header and the claims of a token, as JSON objects: a header naming a parameter twice
    /// is always refused, claims naming one twice unless `allow_duplicate_claims`.
    fn parts(&self, token: &str) -> Result<(Object, Object), AuthError> {
        use base64::Engine as _;
        let mut it = token.split('.');
        let (Some(header), Some(payload), Some(_), None) =
            (it.next(), it.next(), it.next(), it.next())
        else {
            return Err(AuthError::Malformed);
        };
        let read = |part: &str, unique: bool, name: &'static str| {
            let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(part)
                .map_err(|_| AuthError::Malformed)?;
            json::object(&bytes, unique).map_err(|p| match p {
                json::Problem::Invalid => AuthError::Malformed,
                json::Problem::Duplicate(name_twice) => AuthError::Duplicate {
                    part: name,
                    name: name_twice,
                },
            })
        };
        Ok((
            read(header, true, "header")?,
            read(payload, !self.settings.allow_duplicate_claims, "claims")?,
        ))
    }

    /// The key with this `kid`: a configured key, or one of a key set's.
    async fn find(&self, kid: &str) -> Result<Candidate, AuthError> {
        if let Some(k) = self.keys.iter().find(|k| k.id == kid) {
            return Ok(Candidate {
                id: k.id.clone(),
                algorithms: k.algorithms.clone(),
                key: k.key.clone(),
                from: None,
            });
        }
        for (i, set) in self.sets.iter().enumerate() {
            let copy = set.current(Some(kid)).await?;
            if let Some(k) = copy.get(kid) {
                return Ok(Candidate {
                    id: kid.to_string(),
                    algorithms: k.algorithms.clone(),
                    key: k.key.clone(),
                    from: Some(SetCopy {
                        set: i,
                        generation: copy.generation,
                    }),
                });
            }
        }
        Err(AuthError::UnknownKid(kid.to_string()))
    }

    /// The keys a token without a `kid` may have been signed with: configured keys and key
    /// sets' current keys that allow `alg` and are of its family. A set that cannot be read is
    /// skipped, unless no key at all is left.
    async fn candidates(&self, alg: Algorithm) -> Result<Vec<Candidate>, AuthError> {
        let mut out: Vec<Candidate> = self
            .keys
            .iter()
            .filter(|k| k.algorithms.contains(&alg) && k.key.family() == alg.family())
            .map(|k| Candidate {
                id: k.id.clone(),
                algorithms: k.algorithms.clone(),
                key: k.key.clone(),
                from: None,
            })
            .collect();
        let mut unreadable = None;
        for (i, set) in self.sets.iter().enumerate() {
            if !set.allows(alg) {
                continue;
            }
            let copy = match set.current(None).await {
                Ok(copy) => copy,
                Err(e) => {
                    unreadable = Some(e);
                    continue;
                }
            };
            for k in &copy.keys {
                if k.algorithms.contains(&alg) && k.key.family() == alg.family() {
                    out.push(Candidate {
                        id: k.kid.clone().unwrap_or_else(|| set.id().to_string()),
                        algorithms: k.algorithms.clone(),
                        key: k.key.clone(),
                        from: Some(SetCopy {
                            set: i,
                            generation: copy.generation,
                        }),
                    });
                }
            }
        }
        match (out.is_empty(), unreadable) {
            (true, Some(e)) => Err(e),
            (true, None) => Err(AuthError::AlgorithmNotAllowed {
                alg: format!("{alg:?}"),
                key: None,
            }),
            (false, _) => Ok(out),
        }
    }

    /// Verifies the signature and the registered claims with one key.
    fn check(
        &self,
        token: &str,
        alg: Algorithm,
        c: &Candidate,
        claims: &Object,
    ) -> Result<(), AuthError> {
        // The header's alg must be one this key allows, and of the key's own family: an RSA public
        // key used as an HMAC secret would otherwise verify a forged token.
        if !c.algorithms.contains(&alg) || alg.family() != c.key.family() {
            return Err(AuthError::AlgorithmNotAllowed {
                alg: format!("{alg:?}"),
                key: Some(c.id.clone()),
            });
        }
        let mut v = Validation::new(alg);
        v.leeway = self.settings.leeway.as_secs();
        v.validate_exp = true;
        v.validate_nbf = true;
        // jsonwebtoken checks iss and aud only when present (and of a type it reads): required
        // here, as docs/operating.md promises when they are configured.
        let mut required = vec!["exp"];
        match &self.settings.issuer {
            Some(iss) => {
                v.set_issuer(&[iss]);
                required.push("iss");
            }
            None => v.iss = None,
        }
        match &self.settings.audience {
            Some(aud) => {
                v.set_audience(&[aud]);
                required.push("aud");
            }
            None => v.validate_aud = false,
        }
        v.set_required_spec_claims(&required);
        match jsonwebtoken::decode::<serde::de::IgnoredAny>(token, &c.key, &v) {
            Ok(_) => {}
            // A missing iss or aud and one of a type jsonwebtoken cannot read look alike there:
            // say which it is.
            Err(e) if matches!(e.kind(), ErrorKind::MissingRequiredClaim(c) if c == "iss" || c == "aud") =>
            {
                self.registered_types(claims)?;
                return Err(AuthError::BadClaims);
            }
            // Likewise, an `exp` it cannot read as a number is there, of the wrong type.
            Err(e)
                if matches!(e.kind(), ErrorKind::MissingRequiredClaim(c) if c == "exp")
                    && claims.contains_key("exp") =>
            {
                return Err(AuthError::ClaimType {
                    claim: "exp",
                    expected: "a number",
                });
            }
            Err(e) => return Err(AuthError::from_jwt(e.kind())),
        }
        // jsonwebtoken also reads an `iss` list, which RFC 7519 §4.1.1 does not allow.
        self.registered_types(claims)?;
        self.check_iat(claims)
    }

    /// `iss` (a string) and `aud` (a string or a list of strings, RFC 7519 §4.1.3) are present
    /// and of their type when the config names an issuer or an audience.
    fn registered_types(&self, claims: &Object) -> Result<(), AuthError> {
        if self.settings.issuer.is_some() {
            match claims.get("iss") {
                None => return Err(AuthError::MissingClaim("iss")),
                Some(Value::String(_)) => {}
                Some(_) => {
                    return Err(AuthError::ClaimType {
                        claim: "iss",
                        expected: "a string",
                    })
                }
            }
        }
        if self.settings.audience.is_some() {
            let strings = |l: &Vec<Value>| l.iter().all(Value::is_string);
            match claims.get("aud") {
                None => return Err(AuthError::MissingClaim("aud")),
                Some(Value::String(_)) => {}
                Some(Value::Array(l)) if strings(l) => {}
                Some(_) => {
                    return Err(AuthError::ClaimType {
                        claim: "aud",
                        expected: "a string or an array of strings",
                    })
                }
            }
        }
        Ok(())
    }

    /// `iat`, when present, is a number and (unless `allow_future_iat`) not later than now plus
    /// the leeway.
    fn check_iat(&self, claims: &Object) -> Result<(), AuthError> {
        if self.settings.allow_future_iat {
            return Ok(());
        }
        match claims.get("iat") {
            None => Ok(()),
            Some(Value::Number(n)) => {
                let latest = jsonwebtoken::get_current_timestamp()
                    .saturating_add(self.settings.leeway.as_secs());
                match n.as_f64() {
                    Some(iat) if iat > latest as f64 => Err(AuthError::IssuedInFuture),
                    _ => Ok(()),
                }
            }
            Some(_) => Err(AuthError::ClaimType {
                claim: "iat",
                expected: "a number",
            }),
        }
    }
}

/// RFC 7515 §4.1.11: `crit` lists extensions the receiver must understand, or reject the token.
/// interlingua understands none, so any `crit` is refused, and one that is not a non-empty list
/// of names is malformed.
fn check_crit(header: &Object) -> Result<(), AuthError> {
    match header.get("crit") {
        None => Ok(()),
        Some(Value::Array(names)) if !names.is_empty() => {
            let names: Option<Vec<String>> = names
                .iter()
                .map(|n| n.as_str().map(str::to_string))
                .collect();
            Err(names.map_or(AuthError::MalformedCrit, AuthError::Critical))
        }
        Some(_) => Err(AuthError::MalformedCrit),
    }
}

/// A configured key that cannot verify anything.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("key `{0}` is a key set")]
    IsASet(String),
    #[error("key `{id}`: {detail}")]
    Unusable { id: String, detail: String },
}

/// The decoding key of a configured (non-set) key.
fn decoding_key(k: &Key) -> Result<DecodingKey, KeyError> {
    let r = match &k.kind {
        KeyKind::Hmac { secret } => return Ok(DecodingKey::from_secret(secret)),
        KeyKind::Pem { family, public, .. } => match family {
            KeyFamily::Rsa => DecodingKey::from_rsa_pem(public),
            KeyFamily::Ec => DecodingKey::from_ec_pem(public),
            KeyFamily::Ed25519 => DecodingKey::from_ed_pem(public),
        },
        KeyKind::Jwks { .. } => return Err(KeyError::IsASet(k.id.clone())),
    };
    r.map_err(|e| KeyError::Unusable {
        id: k.id.clone(),
        detail: e.to_string(),
    })
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
