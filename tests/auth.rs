//! Bearer JWTs through the real proxy: an attack table (each case the exact status and
//! `WWW-Authenticate` it must get), valid tokens for every key type, plans, and JWKS key sets
//! from a real local HTTP server (rotation, and a flood of unknown `kid`s).

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Once, OnceLock};
use std::time::{Duration, Instant};

use base64::Engine as _;
use common::secrets::{set_env, HS_ENV, HS_SECRET};
use common::{client, config, full, Proxy, Upstream, DEADLINE};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use rsa::pkcs1::EncodeRsaPublicKey;
use rsa::pkcs8::{EncodePrivateKey, EncodePublicKey, LineEnding};
use rsa::traits::PublicKeyParts;
use serde_json::{json, Value};

const ISSUER: &str = "interlingua-test";
const AUDIENCE: &str = "agents";

/// Test keys, made once per run (nothing secret is committed).
struct Keys {
    dir: tempfile::TempDir,
    rsa_private: String,
    rsa_public: String,
    rsa_n: String,
    rsa_e: String,
    ec_private: String,
    ed_private: String,
}

fn keys() -> &'static Keys {
    static K: OnceLock<Keys> = OnceLock::new();
    set_env();
    K.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let mut rng = rand::thread_rng();
        let rsa = rsa::RsaPrivateKey::new(&mut rng, 2048).unwrap();
        let public = rsa.to_public_key();
        let rsa_private = rsa.to_pkcs8_pem(LineEnding::LF).unwrap().to_string();
        let rsa_public = public.to_public_key_pem(LineEnding::LF).unwrap();
        let _ = public.to_pkcs1_pem(LineEnding::LF).unwrap();
        let b64 = |b: Vec<u8>| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
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
            dir,
        }
    })
}

fn auth_section(extra_keys: &str) -> String {
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
async fn header_echo() -> Upstream {
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
async fn protected(extra_keys: &str) -> (Proxy, Upstream) {
    let upstream = header_echo().await;
    keys();
    let proxy = Proxy::start(&config(
        "",
        &format!(
            "{}\n[[upstreams]]\nname = \"up\"\naddress = \"{}\"\n\n[[routes]]\nname = \"paid\"\nmatch = {{ path_prefix = \"/\" }}\n\
             upstream = \"up\"\nauth = true\nplans = [\"gold\"]\nidentity_headers = {{}}\n",
            auth_section(extra_keys),
            upstream.addr
        ),
    ));
    (proxy, upstream)
}

fn claims(overrides: Value) -> Value {
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

fn sign(alg: Algorithm, kid: Option<&str>, key: &EncodingKey, claims: &Value) -> String {
    let mut h = Header::new(alg);
    h.kid = kid.map(str::to_string);
    jsonwebtoken::encode(&h, claims, key).unwrap()
}

fn hs(claims: &Value) -> String {
    sign(
        Algorithm::HS256,
        Some("hs"),
        &EncodingKey::from_secret(HS_SECRET.as_bytes()),
        claims,
    )
}

fn unsigned(header: Value, claims: &Value) -> String {
    let b = |v: &Value| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(serde_json::to_vec(v).unwrap())
    };
    format!("{}.{}.", b(&header), b(claims))
}

async fn call(proxy: &Proxy, authorization: Option<&str>) -> (u16, Option<String>, Value) {
    let mut req = client().get(proxy.url("/agent/x"));
    if let Some(a) = authorization {
        req = req.header("authorization", a);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let www = resp
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_string());
    let body = resp.json().await.unwrap_or(Value::Null);
    (status, www, body)
}

fn invalid(reason: &str) -> Option<String> {
    Some(format!(
        "Bearer realm=\"interlingua\", error=\"invalid_token\", error_description=\"{reason}\""
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attack_table() {
    let (proxy, upstream) = protected("").await;
    let k = keys();
    let ok = claims(json!({}));
    // A different signature that is still valid base64url: change its first character (the last
    // one carries padding bits, and a changed one may not decode at all).
    let token = hs(&ok);
    let sig = token.rfind('.').unwrap() + 1;
    let first = if token.as_bytes()[sig] == b'A' {
        "B"
    } else {
        "A"
    };
    let tampered = format!("{}{first}{}", &token[..sig], &token[sig + 1..]);
    let now = chrono::Utc::now().timestamp();
    let rsa_as_hmac = EncodingKey::from_secret(k.rsa_public.as_bytes());
    let cases: Vec<(&str, Option<String>, u16, Option<String>)> = vec![
        ("no header", None, 401, Some("Bearer realm=\"interlingua\"".into())),
        ("wrong scheme", Some("Basic YWxpY2U6cHc=".into()), 401, Some("Bearer realm=\"interlingua\"".into())),
        ("garbage", Some("Bearer not.a.jwt".into()), 401, invalid("the token is not a well-formed JWT")),
        (
            "alg none",
            Some(format!("Bearer {}", unsigned(json!({"alg": "none", "typ": "JWT"}), &ok))),
            401,
            invalid("tokens with alg `none` are never accepted"),
        ),
        (
            "alg None, any case",
            Some(format!("Bearer {}", unsigned(json!({"alg": "NoNe", "kid": "hs"}), &ok))),
            401,
            invalid("tokens with alg `none` are never accepted"),
        ),
        (
            // A real signature is not needed: the algorithm is refused before any key is tried.
            "an algorithm interlingua has no verifier for (ES256K)",
            Some(format!("Bearer {}sig", unsigned(json!({"alg": "ES256K", "kid": "hs", "typ": "JWT"}), &ok))),
            401,
            invalid("the algorithm ES256K is not allowed"),
        ),
        (
            "HS256 signed with the RSA public key, naming the RSA key",
            Some(format!("Bearer {}", sign(Algorithm::HS256, Some("rs"), &rsa_as_hmac, &ok))),
            401,
            invalid("the algorithm HS256 is not allowed for key `rs`"),
        ),
        (
            "HS256 signed with the RSA public key, no kid",
            Some(format!("Bearer {}", sign(Algorithm::HS256, None, &rsa_as_hmac, &ok))),
            401,
            invalid("the signature does not verify"),
        ),
        ("bad signature", Some(format!("Bearer {tampered}")), 401, invalid("the signature does not verify")),
        (
            "expired",
            Some(format!("Bearer {}", hs(&claims(json!({"exp": now - 60}))))),
            401,
            invalid("the token has expired"),
        ),
        (
            "not yet valid",
            Some(format!("Bearer {}", hs(&claims(json!({"nbf": now + 600}))))),
            401,
            invalid("the token is not valid yet (nbf)"),
        ),
        (
            "no exp",
            Some(format!("Bearer {}", hs(&claims(json!({"exp": null}))))),
            401,
            invalid("the token has no exp claim"),
        ),
        (
            "wrong iss",
            Some(format!("Bearer {}", hs(&claims(json!({"iss": "someone-else"}))))),
            401,
            invalid("the token's issuer is not the expected one"),
        ),
        (
            "wrong aud",
            Some(format!("Bearer {}", hs(&claims(json!({"aud": "other"}))))),
            401,
            invalid("the token's audience is not the expected one"),
        ),
        (
            "unknown kid",
            Some(format!(
                "Bearer {}",
                sign(Algorithm::HS256, Some("nope"), &EncodingKey::from_secret(HS_SECRET.as_bytes()), &ok)
            )),
            401,
            invalid("no key with kid `nope`"),
        ),
        (
            "oversized",
            Some(format!("Bearer {}", hs(&claims(json!({"pad": "x".repeat(3000)}))))),
            401,
            invalid("the token is longer than 2048 bytes"),
        ),
        (
            "no subject",
            Some(format!("Bearer {}", hs(&claims(json!({"sub": null}))))),
            401,
            invalid("the token has no `sub` claim"),
        ),
        (
            "valid, wrong plan",
            Some(format!("Bearer {}", hs(&claims(json!({"plan": "bronze"}))))),
            403,
            Some("Bearer realm=\"interlingua\", error=\"insufficient_scope\", error_description=\"the token's plan may not use this route\"".into()),
        ),
        (
            "valid, no plan",
            Some(format!("Bearer {}", hs(&claims(json!({"plan": null}))))),
            403,
            Some("Bearer realm=\"interlingua\", error=\"insufficient_scope\", error_description=\"the token's plan may not use this route\"".into()),
        ),
    ];
    for (name, authorization, status, www) in &cases {
        let (got, got_www, body) = call(&proxy, authorization.as_deref()).await;
        assert_eq!(got, *status, "{name}: {body}");
        assert_eq!(&got_www, www, "{name}");
        let message = body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if let Some(token) = authorization.as_deref().and_then(|a| a.split(' ').nth(1)) {
            assert!(
                !message.contains(token),
                "{name}: the token must not be echoed: {message}"
            );
        }
    }
    assert_eq!(upstream.seen().len(), 0, "nothing refused went upstream");

    proxy
        .metrics_showing(&[
            r#"interlingua_rejections_total{reason="401"} 17"#,
            r#"interlingua_rejections_total{reason="403"} 2"#,
        ])
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valid_tokens_of_every_key_type_pass_and_stay_out_of_the_upstream() {
    let (proxy, upstream) = protected("").await;
    let k = keys();
    let ok = claims(json!({}));
    let rsa = EncodingKey::from_rsa_pem(k.rsa_private.as_bytes()).unwrap();
    let tokens = vec![
        ("HS256", hs(&ok)),
        (
            "HS256 without kid",
            sign(
                Algorithm::HS256,
                None,
                &EncodingKey::from_secret(HS_SECRET.as_bytes()),
                &ok,
            ),
        ),
        ("RS256", sign(Algorithm::RS256, Some("rs"), &rsa, &ok)),
        ("PS256", sign(Algorithm::PS256, Some("rs"), &rsa, &ok)),
        (
            "ES256",
            sign(
                Algorithm::ES256,
                Some("es"),
                &EncodingKey::from_ec_pem(k.ec_private.as_bytes()).unwrap(),
                &ok,
            ),
        ),
        (
            "EdDSA",
            sign(
                Algorithm::EdDSA,
                Some("ed"),
                &EncodingKey::from_ed_pem(k.ed_private.as_bytes()).unwrap(),
                &ok,
            ),
        ),
        // Within the leeway.
        (
            "just expired",
            hs(&claims(json!({"exp": chrono::Utc::now().timestamp() - 2}))),
        ),
    ];
    for (name, token) in &tokens {
        let (status, _, body) = call(&proxy, Some(&format!("Bearer {token}"))).await;
        assert_eq!(status, 200, "{name}: {body}");
        assert!(
            body.get("authorization").is_none(),
            "{name}: the client's token went upstream"
        );
        assert_eq!(body["x-interlingua-subject"], "alice", "{name}");
        assert_eq!(body["x-interlingua-plan"], "gold", "{name}");
    }
    assert_eq!(upstream.seen().len(), tokens.len());
}

/// Verified tokens are remembered (the same token on every request is not checked again), but
/// never past their expiry: a token accepted within the leeway is refused once it runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remembered_token_is_refused_once_it_expires() {
    let (proxy, upstream) = protected("").await;
    // Expired 3 s ago: accepted within the 5 s leeway, refused about two seconds later.
    let exp = chrono::Utc::now().timestamp() - 3;
    let token = format!("Bearer {}", hs(&claims(json!({ "exp": exp }))));
    let (status, _, body) = call(&proxy, Some(&token)).await;
    assert_eq!(status, 200, "{body}");
    let started = Instant::now();
    loop {
        let (status, www, body) = call(&proxy, Some(&token)).await;
        if status == 401 {
            assert_eq!(www, invalid("the token has expired"));
            assert!(
                chrono::Utc::now().timestamp() > exp + 5,
                "refused too early"
            );
            break;
        }
        assert_eq!(status, 200, "{body}");
        assert!(
            started.elapsed() < DEADLINE,
            "an expired token was still accepted"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!upstream.seen().is_empty());
}

/// A JWKS server whose key set can be replaced, counting its requests.
struct JwksServer {
    upstream: Upstream,
    set: Arc<parking_lot::Mutex<Value>>,
    hits: Arc<AtomicUsize>,
}

async fn jwks_server(set: Value) -> JwksServer {
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

fn rsa_jwk(kid: &str) -> Value {
    let k = keys();
    json!({"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256", "n": k.rsa_n, "e": k.rsa_e})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_set_is_fetched_again_for_a_new_kid_but_not_more_than_once_per_interval() {
    let server = jwks_server(json!({"keys": [rsa_jwk("old")]})).await;
    let (proxy, _up) = protected(&format!(
        "\n[[auth.keys]]\nid = \"set\"\ntype = \"jwks\"\njwks_url = \"http://{}/jwks.json\"\nrefresh_interval = \"200ms\"\nalgorithms = [\"RS256\"]\n",
        server.upstream.addr
    ))
    .await;
    let rsa = EncodingKey::from_rsa_pem(keys().rsa_private.as_bytes()).unwrap();
    let ok = claims(json!({}));
    let (status, _, body) = call(
        &proxy,
        Some(&format!(
            "Bearer {}",
            sign(Algorithm::RS256, Some("old"), &rsa, &ok)
        )),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(server.hits.load(Ordering::SeqCst), 1);

    // The key is rotated: the set now has `new` only. A token for `new` is accepted once the
    // refresh interval allows the set to be read again.
    *server.set.lock() = json!({"keys": [rsa_jwk("new")]});
    let token = format!("Bearer {}", sign(Algorithm::RS256, Some("new"), &rsa, &ok));
    let started = Instant::now();
    loop {
        let (status, www, _) = call(&proxy, Some(&token)).await;
        if status == 200 {
            break;
        }
        assert_eq!(www, invalid("no key with kid `new`"));
        assert!(
            started.elapsed() < DEADLINE,
            "the new key was never picked up"
        );
        tokio::task::yield_now().await;
    }
    assert!(server.hits.load(Ordering::SeqCst) >= 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_unknown_kids_fetches_the_key_set_once_per_interval() {
    let server = jwks_server(json!({"keys": [rsa_jwk("only")]})).await;
    let (proxy, _up) = protected(&format!(
        "\n[[auth.keys]]\nid = \"set\"\ntype = \"jwks\"\njwks_url = \"http://{}/jwks.json\"\nrefresh_interval = \"1h\"\nalgorithms = [\"RS256\"]\n",
        server.upstream.addr
    ))
    .await;
    let rsa = EncodingKey::from_rsa_pem(keys().rsa_private.as_bytes()).unwrap();
    let ok = claims(json!({}));
    let flood: Vec<_> = (0..60)
        .map(|i| {
            let token = format!(
                "Bearer {}",
                sign(Algorithm::RS256, Some(&format!("random-{i}")), &rsa, &ok)
            );
            let url = proxy.url("/agent/x");
            tokio::spawn(async move {
                client()
                    .get(url)
                    .header("authorization", token)
                    .send()
                    .await
                    .unwrap()
                    .status()
                    .as_u16()
            })
        })
        .collect();
    for f in flood {
        assert_eq!(f.await.unwrap(), 401);
    }
    assert_eq!(
        server.hits.load(Ordering::SeqCst),
        1,
        "one fetch for the whole flood"
    );
    // The key the set does have still works, without another fetch.
    let (status, _, _) = call(
        &proxy,
        Some(&format!(
            "Bearer {}",
            sign(Algorithm::RS256, Some("only"), &rsa, &ok)
        )),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(server.hits.load(Ordering::SeqCst), 1);
}

const AGENT_CRED_ENV: &str = "INTERLINGUA_TEST_AUTH_AGENT_CREDENTIAL";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_gets_the_routes_own_credential_and_the_verified_identity() {
    keys();
    static ONCE: Once = Once::new();
    ONCE.call_once(|| std::env::set_var(AGENT_CRED_ENV, "agent-secret-42"));
    let upstream = header_echo().await;
    let proxy = Proxy::start(&config(
        "",
        &format!(
            "{}\n[[upstreams]]\nname = \"up\"\naddress = \"{}\"\n\n[[routes]]\nname = \"r\"\nmatch = {{ path_prefix = \"/\" }}\n\
             upstream = \"up\"\nauth = true\nupstream_auth = {{ bearer_env = \"{AGENT_CRED_ENV}\" }}\n\
             identity_headers = {{ subject = \"NVM-User-id\", plan = \"X-Plan\" }}\n",
            auth_section(""),
            upstream.addr
        ),
    ));
    let resp = client()
        .get(proxy.url("/x"))
        .bearer_auth(hs(&claims(json!({}))))
        // A client cannot speak for someone else.
        .header("nvm-user-id", "mallory")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let seen: Value = resp.json().await.unwrap();
    assert_eq!(seen["authorization"], "Bearer agent-secret-42");
    assert_eq!(seen["nvm-user-id"], "alice");
    assert_eq!(seen["x-plan"], "gold");
}
