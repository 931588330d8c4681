//! Bearer JWTs through the real proxy: valid tokens for every key type, plans, remembered tokens,
//! and JWKS key sets from a real local HTTP server (a new `kid`, and a flood of unknown ones). The
//! forgeries and refusals, each with its exact status and `WWW-Authenticate`, are in
//! `auth_attacks.rs`.

mod common;

use std::sync::atomic::Ordering;
use std::sync::Once;
use std::time::{Duration, Instant};

use common::secrets::HS_SECRET;
use common::tokens::{
    auth_section, call, claims, header_echo, hs, invalid, jwks_server, keys, protected, rsa_jwk,
    sign,
};
use common::{client, config, Proxy, DEADLINE};
use jsonwebtoken::{Algorithm, EncodingKey};
use serde_json::{json, Value};

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
    // Expired 3 s ago: accepted within the 5 s leeway, refused about two seconds later. Real
    // time: the proxy checks `exp` against the system clock, in whole seconds, and 2 s is the
    // margin a loaded host needs between making the token and its first use.
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
