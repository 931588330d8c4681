//! Tokens for the auth tests: keys made once per run (nothing secret is committed), the `[auth]`
//! table naming them, token builders (signed, unsigned, or from raw JSON text, for the forgeries a
//! JSON serialiser would never write), a JWKS server whose set can be replaced, and one call
//! through the proxy returning the status and `WWW-Authenticate`.

#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use base64::Engine as _;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use rsa::pkcs8::{EncodePrivateKey, EncodePublicKey, LineEnding};
use rsa::traits::PublicKeyParts;
use serde_json::{json, Value};

use super::secrets::{set_env, HS_ENV, HS_SECRET};
use super::{client, config, full, Proxy, Upstream};

pub const ISSUER: &str = "interlingua-test";
pub const AUDIENCE: &str = "agents";

/// Test keys, made once per run.
pub struct Keys {
    pub dir: tempfile::TempDir,
    pub rsa_private: String,
    pub rsa_public: String,
    pub rsa_n: String,
    pub rsa_e: String,
    pub ec_private: String,
    pub ed_private: String,
    /// Two more EC keys that only a key set holds: `(private PEM, public JWK without kid)`.
    pub set_keys: [(String, Value); 2],
}

pub fn b64(bytes: impl AsRef<[u8]>) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn ec_key() -> (String, Value) {
    let ec = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    // The uncompressed point: 0x04, then x and y (32 bytes each).
    let raw = ec.public_key_raw();
    let jwk = json!({"kty": "EC", "crv": "P-256", "alg": "ES256", "use": "sig",
        "x": b64(&raw[1..33]), "y": b64(&raw[33..65])});
    (ec.serialize_pem(), jwk)
}

pub fn keys() -> &'static Keys {
    static K: OnceLock<Keys> = OnceLock::new();
    set_env();
    K.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let mut rng = rand::thread_rng();
        let rsa = rsa::RsaPrivateKey::new(&mut rng, 2048).unwrap();
        let public = rsa.to_public_key();
        let rsa_private = rsa.to_pkcs8_pem(LineEnding::LF).unwrap().to_string();
        let rsa_public = public.to_public_key_pem(LineEnding::LF).unwrap();
        let ec = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let ed = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
        std::fs::write(dir.path().join("rsa.pub.pem"), &rsa_public).unwrap();
        std::fs::write(dir.path().join("ec.pub.pem"), ec.public_key_pem()).unwrap();
        std::fs::write(dir.path().join("ed.pub.pem"), ed.public_key_pem()).unwrap();
        Keys {
            rsa_n: b64(public.n().to_bytes_be()),
            rsa_e: b64(public.e().to_bytes_be()),
            rsa_private,
            rsa_public,
            ec_private: ec.serialize_pem(),
            ed_private: ed.serialize_pem(),
            set_keys: [ec_key(), ec_key()],
            dir,
        }
    })
}

/// `[auth]` with issuer, audience, a 5 s leeway, a 2 KiB token limit and the keys `hs` (HMAC),
/// `rs` (RSA: RS256 and PS256), `es` (EC), `ed` (Ed25519), then `extra_keys` (TOML text).
pub fn auth_section(extra_keys: &str) -> String {
    auth_section_with("", extra_keys)
}

/// [`auth_section`] with more `[auth]` settings (TOML lines).
pub fn auth_section_with(settings: &str, extra_keys: &str) -> String {
    let k = keys();
    let d = k.dir.path().display();
    format!(
        r#"
[auth]
issuer = "{ISSUER}"
audience = "{AUDIENCE}"
leeway = "5s"
max_token_size = "2KiB"
plan_claim = "plan"
{settings}
[[auth.keys]]
id = "hs"
type = "hmac"
secret_env = "{HS_ENV}"
algorithms = ["HS256"]

[[auth.keys]]
id = "rs"
type = "rsa"
pem_file = "{d}/rsa.pub.pem"
algorithms = ["RS256", "PS256"]

[[auth.keys]]
id = "es"
type = "ec"
pem_file = "{d}/ec.pub.pem"
algorithms = ["ES256"]

[[auth.keys]]
id = "ed"
type = "ed25519"
pem_file = "{d}/ed.pub.pem"
algorithms = ["EdDSA"]
{extra_keys}
"#
    )
}

/// An upstream answering every request with the request's headers, as a JSON object.
pub async fn header_echo() -> Upstream {
    Upstream::start(|req: hyper::Request<hyper::body::Incoming>| async move {
        let headers: serde_json::Map<String, Value> = req
            .headers()
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v.to_str().unwrap_or(""))))
            .collect();
        hyper::Response::builder()
            .status(200)
            .body(full(serde_json::to_vec(&headers).unwrap()))
            .unwrap()
    })
    .await
}

/// A proxy with one passthrough route that needs a token with plan `gold`, and the upstream.
pub async fn protected(extra_keys: &str) -> (Proxy, Upstream) {
    protected_with("", extra_keys).await
}

/// [`protected`] with more `[auth]` settings (TOML lines).
pub async fn protected_with(settings: &str, extra_keys: &str) -> (Proxy, Upstream) {
    let upstream = header_echo().await;
    keys();
    let proxy = Proxy::start(&config(
        "",
        &format!(
            "{}\n[[upstreams]]\nname = \"up\"\naddress = \"{}\"\n\n[[routes]]\nname = \"paid\"\nmatch = {{ path_prefix = \"/\" }}\n\
             upstream = \"up\"\nauth = true\nplans = [\"gold\"]\nidentity_headers = {{}}\n",
            auth_section_with(settings, extra_keys),
            upstream.addr
        ),
    ));
    (proxy, upstream)
}

/// Valid claims for `alice` on plan `gold`, with `overrides` set (a `null` removes the claim).
pub fn claims(overrides: Value) -> Value {
    let now = chrono::Utc::now().timestamp();
    let mut c = json!({"sub": "alice", "plan": "gold", "iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + 600});
    for (k, v) in overrides.as_object().unwrap() {
        if v.is_null() {
            c.as_object_mut().unwrap().remove(k);
        } else {
            c[k] = v.clone();
        }
    }
    c
}

pub fn sign(alg: Algorithm, kid: Option<&str>, key: &EncodingKey, claims: &Value) -> String {
    let mut h = Header::new(alg);
    h.kid = kid.map(str::to_string);
    jsonwebtoken::encode(&h, claims, key).unwrap()
}

pub fn hs_key() -> EncodingKey {
    EncodingKey::from_secret(HS_SECRET.as_bytes())
}

/// Signed HS256 with the key `hs`, naming it.
pub fn hs(claims: &Value) -> String {
    sign(Algorithm::HS256, Some("hs"), &hs_key(), claims)
}

/// A token made of exactly this header and payload text, signed with `key` under `alg`: for
/// JSON no serialiser writes (a name twice, a value of the wrong type).
pub fn raw(alg: Algorithm, key: &EncodingKey, header: &str, payload: &str) -> String {
    let message = format!("{}.{}", b64(header), b64(payload));
    let signature = jsonwebtoken::crypto::sign(message.as_bytes(), key, alg).unwrap();
    format!("{message}.{signature}")
}

/// A token with this header and no signature.
pub fn unsigned(header: Value, claims: &Value) -> String {
    let b = |v: &Value| b64(serde_json::to_vec(v).unwrap());
    format!("{}.{}.", b(&header), b(claims))
}

/// A GET through the proxy: status, `WWW-Authenticate` (`None` when absent), body.
pub async fn call(proxy: &Proxy, authorization: Option<&str>) -> (u16, Option<String>, Value) {
    let mut req = client().get(proxy.url("/agent/x"));
    if let Some(a) = authorization {
        req = req.header("authorization", a);
    }
    // No answer at all (the connection closed) is status 0, so a table can report it beside
    // the other rows.
    let Ok(resp) = req.send().await else {
        return (0, None, Value::Null);
    };
    let status = resp.status().as_u16();
    let www = resp
        .headers()
        .get("www-authenticate")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let body = resp.json().await.unwrap_or(Value::Null);
    (status, www, body)
}

/// The `WWW-Authenticate` of a refused token, `reason` being the quoted-string's content as sent.
pub fn invalid(reason: &str) -> Option<String> {
    Some(format!(
        "Bearer realm=\"interlingua\", error=\"invalid_token\", error_description=\"{reason}\""
    ))
}

/// A JWKS server whose key set can be replaced, counting its requests.
pub struct JwksServer {
    pub upstream: Upstream,
    pub set: Arc<parking_lot::Mutex<Value>>,
    pub hits: Arc<AtomicUsize>,
}

impl JwksServer {
    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

pub async fn jwks_server(set: Value) -> JwksServer {
    let set = Arc::new(parking_lot::Mutex::new(set));
    let hits = Arc::new(AtomicUsize::new(0));
    let (s, h) = (set.clone(), hits.clone());
    let upstream = Upstream::start(move |_req| {
        let body = serde_json::to_vec(&*s.lock()).unwrap();
        h.fetch_add(1, Ordering::SeqCst);
        async move {
            hyper::Response::builder()
                .status(200)
                .body(full(body))
                .unwrap()
        }
    })
    .await;
    JwksServer {
        upstream,
        set,
        hits,
    }
}

/// The RSA test key as a JWK under `kid`.
pub fn rsa_jwk(kid: &str) -> Value {
    let k = keys();
    json!({"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256", "n": k.rsa_n, "e": k.rsa_e})
}

/// The `i`th set-only EC key as a JWK under `kid`, and its signing key.
pub fn set_key(i: usize, kid: &str) -> (Value, EncodingKey) {
    let (private, jwk) = &keys().set_keys[i];
    let mut jwk = jwk.clone();
    jwk["kid"] = json!(kid);
    (jwk, EncodingKey::from_ec_pem(private.as_bytes()).unwrap())
}
