//! The token attack table: every forgery and malformed token we know of, over every key kind
//! (HMAC, RSA/EC/Ed25519 PEM, JWKS from a file and from a URL), each row the exact status and the
//! exact `WWW-Authenticate` it must get; then key rotation behind a JWKS URL, and the `[auth]`
//! policy knobs that relax the defaults.

mod common;

use std::time::Instant;

use common::tokens::{
    b64, call, claims, hs, hs_key, invalid, jwks_server, keys, protected, protected_with, raw,
    rsa_jwk, set_key, sign, unsigned, AUDIENCE,
};
use common::{Proxy, DEADLINE};
use jsonwebtoken::{Algorithm, EncodingKey};
use serde_json::{json, Value};

/// One row: what is sent as `Authorization`, the status and the `WWW-Authenticate` expected.
struct Row {
    name: String,
    authorization: Option<String>,
    status: u16,
    www: Option<String>,
}

fn row(name: impl Into<String>, token: Option<String>, status: u16, www: Option<String>) -> Row {
    Row {
        name: name.into(),
        authorization: token,
        status,
        www,
    }
}

fn bearer(token: impl std::fmt::Display) -> Option<String> {
    Some(format!("Bearer {token}"))
}

const INSUFFICIENT: &str = "Bearer realm=\"interlingua\", error=\"insufficient_scope\", error_description=\"the token's plan may not use this route\"";
const SIGNATURE: &str = "the signature does not verify";

/// `claims` as JSON text with `extra` (members, JSON text) added at the end: for values a
/// `serde_json::Value` cannot hold twice.
fn with_text(claims: &Value, extra: &str) -> String {
    let text = claims.to_string();
    let body = text.trim_end_matches('}');
    if body.ends_with('{') {
        format!("{body}{extra}}}")
    } else {
        format!("{body},{extra}}}")
    }
}

/// An HS256 token (key `hs`) of exactly this header and payload text.
fn hs_raw(header: &str, payload: &str) -> String {
    raw(Algorithm::HS256, &hs_key(), header, payload)
}

/// An HS256 token naming `kid`, valid in every other way.
fn hs_kid(kid: &str) -> String {
    sign(Algorithm::HS256, Some(kid), &hs_key(), &claims(json!({})))
}

/// The three parts of a token.
fn parts(token: &str) -> (String, String, String) {
    let mut it = token.split('.').map(str::to_string);
    (it.next().unwrap(), it.next().unwrap(), it.next().unwrap())
}

fn decoded(part: &str) -> Value {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part)
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

/// A valid token, and the forgeries made from it: payload and header changed under the same
/// signature, the signature stripped or changed. Each forgery must fail on the signature.
fn forgeries(name: &str, token: &str, rows: &mut Vec<Row>) {
    let (h, p, s) = parts(token);
    rows.push(row(format!("{name}: valid"), bearer(token), 200, None));
    let mut payload = decoded(&p);
    payload["sub"] = json!("mallory");
    let mut header = decoded(&h);
    header["typ"] = json!("at+jwt");
    // A different signature that is still valid base64url: change its first character (the last
    // one carries padding bits, and a changed one may not decode at all).
    let first = if s.starts_with('A') { "B" } else { "A" };
    let forged = [
        (
            "tampered payload",
            format!("{h}.{}.{s}", b64(payload.to_string())),
        ),
        (
            "tampered header",
            format!("{}.{p}.{s}", b64(header.to_string())),
        ),
        ("stripped signature", format!("{h}.{p}.")),
        ("tampered signature", format!("{h}.{p}.{first}{}", &s[1..])),
    ];
    for (what, token) in forged {
        rows.push(row(
            format!("{name}: {what}"),
            bearer(token),
            401,
            invalid(SIGNATURE),
        ));
    }
}

/// The proxy of the table: the PEM and HMAC keys, a JWKS file (`file-rsa`, RS256) and a JWKS URL
/// (`url-1`, ES256, read again at most every 200 ms).
async fn table_proxy(
    server: &common::tokens::JwksServer,
    extra: &str,
) -> (Proxy, common::Upstream, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("jwks.json");
    std::fs::write(&file, json!({"keys": [rsa_jwk("file-rsa")]}).to_string()).unwrap();
    let (proxy, upstream) = protected(&format!(
        "\n[[auth.keys]]\nid = \"file\"\ntype = \"jwks\"\njwks_file = \"{}\"\nalgorithms = [\"RS256\"]\n\
         \n[[auth.keys]]\nid = \"url\"\ntype = \"jwks\"\njwks_url = \"http://{}/jwks.json\"\nrefresh_interval = \"200ms\"\nalgorithms = [\"ES256\"]\n{extra}",
        file.display(),
        server.upstream.addr
    ))
    .await;
    (proxy, upstream, dir)
}

/// Sends every row and returns one line per row whose answer differs (all of them, not just the
/// first, so a run shows the whole picture).
async fn run(proxy: &Proxy, rows: &[Row]) -> Vec<String> {
    let mut wrong = Vec::new();
    for r in rows {
        let (status, www, body) = call(proxy, r.authorization.as_deref()).await;
        if status != r.status || www != r.www {
            wrong.push(format!(
                "{}: got {status} {www:?}, want {} {:?} ({body})",
                r.name, r.status, r.www
            ));
        }
        // RFC 6750 §3: one error code, and no `"` or `\` inside a parameter's value.
        if let Some(www) = &www {
            if www.contains('\\') || www.matches("error=").count() > 1 {
                wrong.push(format!("{}: not a clean challenge: {www}", r.name));
            }
        }
        let message = body["error"]["message"].as_str().unwrap_or_default();
        if let Some(token) = r.authorization.as_deref().and_then(|a| a.split(' ').nth(1)) {
            if !token.is_empty() && message.contains(token) {
                wrong.push(format!("{}: the token was echoed: {message}", r.name));
            }
        }
    }
    wrong
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attack_table() {
    let (jwk1, set_signer1) = set_key(0, "url-1");
    let server = jwks_server(json!({"keys": [jwk1]})).await;
    let (proxy, upstream, _dir) = table_proxy(&server, "").await;
    let k = keys();
    let ok = claims(json!({}));
    let now = chrono::Utc::now().timestamp();
    let rsa = EncodingKey::from_rsa_pem(k.rsa_private.as_bytes()).unwrap();
    let rsa_as_hmac = EncodingKey::from_secret(k.rsa_public.as_bytes());
    let mut rows: Vec<Row> = Vec::new();

    // Point 5 first, so that the URL key set has not been read yet: a token without a kid is
    // tried against the key sets' keys too (the set is fetched for it).
    let ec = EncodingKey::from_ec_pem(k.ec_private.as_bytes()).unwrap();
    let ed = EncodingKey::from_ed_pem(k.ed_private.as_bytes()).unwrap();
    let hmac = hs_key();
    let valid: [(&str, Algorithm, Option<&str>, &EncodingKey); 9] = [
        (
            "ES256, no kid, a JWKS URL key",
            Algorithm::ES256,
            None,
            &set_signer1,
        ),
        ("HS256", Algorithm::HS256, Some("hs"), &hmac),
        ("HS256, no kid", Algorithm::HS256, None, &hmac),
        ("RS256 PEM", Algorithm::RS256, Some("rs"), &rsa),
        ("PS256 PEM", Algorithm::PS256, Some("rs"), &rsa),
        ("ES256 PEM", Algorithm::ES256, Some("es"), &ec),
        ("EdDSA PEM", Algorithm::EdDSA, Some("ed"), &ed),
        ("RS256 JWKS file", Algorithm::RS256, Some("file-rsa"), &rsa),
        (
            "ES256 JWKS URL",
            Algorithm::ES256,
            Some("url-1"),
            &set_signer1,
        ),
    ];
    for (name, alg, kid, key) in valid {
        forgeries(name, &sign(alg, kid, key, &ok), &mut rows);
    }

    let realm = || Some("Bearer realm=\"interlingua\"".to_string());
    rows.push(row("no header", None, 401, realm()));
    rows.push(row(
        "wrong scheme",
        Some("Basic YWxpY2U6cHc=".into()),
        401,
        realm(),
    ));
    let malformed = || invalid("the token is not a well-formed JWT");
    rows.push(row("garbage", bearer("not.a.jwt"), 401, malformed()));
    let (h, p, _) = parts(&hs(&ok));
    rows.push(row(
        "two parts",
        bearer(format!("{h}.{p}")),
        401,
        malformed(),
    ));

    // alg none in every spelling, with and without a signature.
    for spelling in ["none", "None", "NONE", "nOnE"] {
        for (with, sig) in [("without", ""), ("with", "c2lnbmF0dXJl")] {
            rows.push(row(
                format!("alg {spelling}, {with} a signature"),
                bearer(format!(
                    "{}{sig}",
                    unsigned(json!({"alg": spelling, "kid": "hs", "typ": "JWT"}), &ok)
                )),
                401,
                invalid("tokens with alg `none` are never accepted"),
            ));
        }
    }
    rows.push(row(
        // A real signature is not needed: the algorithm is refused before any key is tried.
        "an algorithm interlingua has no verifier for (ES256K)",
        bearer(format!(
            "{}sig",
            unsigned(json!({"alg": "ES256K", "kid": "hs", "typ": "JWT"}), &ok)
        )),
        401,
        invalid("the algorithm ES256K is not allowed"),
    ));
    // RS→HS key confusion: HS256 signed with the RSA public key's PEM as the secret.
    rows.push(row(
        "HS256 signed with the RSA public key, naming the RSA key",
        bearer(sign(Algorithm::HS256, Some("rs"), &rsa_as_hmac, &ok)),
        401,
        invalid("the algorithm HS256 is not allowed for key `rs`"),
    ));
    rows.push(row(
        "HS256 signed with the RSA public key, naming the JWKS file's RSA key",
        bearer(sign(Algorithm::HS256, Some("file-rsa"), &rsa_as_hmac, &ok)),
        401,
        invalid("the algorithm HS256 is not allowed for key `file-rsa`"),
    ));
    rows.push(row(
        "HS256 signed with the RSA public key, no kid",
        bearer(sign(Algorithm::HS256, None, &rsa_as_hmac, &ok)),
        401,
        invalid(SIGNATURE),
    ));

    // Time.
    let hs_with = |overrides: Value| bearer(hs(&claims(overrides)));
    // Claims of HS256 tokens, otherwise valid.
    let claim_rows = [
        (
            "expired",
            json!({"exp": now - 60}),
            401,
            "the token has expired",
        ),
        (
            "not yet valid",
            json!({"nbf": now + 600}),
            401,
            "the token is not valid yet (nbf)",
        ),
        (
            "no exp",
            json!({"exp": null}),
            401,
            "the token has no exp claim",
        ),
        (
            "exp not a number",
            json!({"exp": "soon"}),
            401,
            "the token's `exp` claim is not a number",
        ),
        (
            "iat in the future",
            json!({"iat": now + 600}),
            401,
            "the token was issued in the future (iat)",
        ),
        (
            "iat not a number",
            json!({"iat": "yesterday"}),
            401,
            "the token's `iat` claim is not a number",
        ),
        (
            "wrong iss",
            json!({"iss": "someone-else"}),
            401,
            "the token's issuer is not the expected one",
        ),
        (
            "oversized",
            json!({"pad": "x".repeat(3000)}),
            401,
            "the token is longer than 2048 bytes",
        ),
        (
            "no subject",
            json!({"sub": null}),
            401,
            "the token has no `sub` claim",
        ),
    ];
    for (name, overrides, status, reason) in claim_rows {
        rows.push(row(name, hs_with(overrides), status, invalid(reason)));
    }
    rows.push(row(
        "expired, RS256",
        bearer(sign(
            Algorithm::RS256,
            Some("rs"),
            &rsa,
            &claims(json!({"exp": now - 60})),
        )),
        401,
        invalid("the token has expired"),
    ));
    rows.push(row(
        "iat within the leeway",
        hs_with(json!({"iat": now + 2})),
        200,
        None,
    ));

    // iss and aud are required when configured, of their JSON type (RFC 7519 §4.1.1, §4.1.3).
    let without = |claim: &str| {
        let mut c = claims(json!({}));
        c.as_object_mut().unwrap().remove(claim);
        c
    };
    let no_iss = invalid("the token has no `iss` claim");
    rows.push(row("no iss", bearer(hs(&without("iss"))), 401, no_iss));
    rows.push(row(
        "no aud",
        bearer(hs(&without("aud"))),
        401,
        invalid("the token has no `aud` claim"),
    ));
    let of_type = [
        (
            "iss",
            "a string",
            ["42", "{}", "null", "[\"interlingua-test\"]"],
        ),
        (
            "aud",
            "a string or an array of strings",
            ["42", "{}", "null", "[\"agents\",7]"],
        ),
    ];
    for (claim, expected, values) in of_type {
        for value in values {
            rows.push(row(
                format!("{claim} {value}"),
                bearer(hs_raw(
                    r#"{"alg":"HS256","kid":"hs"}"#,
                    &with_text(&without(claim), &format!("\"{claim}\":{value}")),
                )),
                401,
                invalid(&format!("the token's `{claim}` claim is not {expected}")),
            ));
        }
    }
    let wrong_aud = invalid("the token's audience is not the expected one");
    rows.push(row(
        "aud a list naming us",
        hs_with(json!({"aud": ["other", AUDIENCE]})),
        200,
        None,
    ));
    rows.push(row(
        "aud a list not naming us",
        hs_with(json!({"aud": ["other"]})),
        401,
        wrong_aud.clone(),
    ));
    rows.push(row(
        "aud an empty list",
        hs_with(json!({"aud": []})),
        401,
        wrong_aud.clone(),
    ));
    rows.push(row(
        "wrong aud",
        hs_with(json!({"aud": "other"})),
        401,
        wrong_aud,
    ));

    // crit (RFC 7515 §4.1.11): interlingua understands no extension.
    let ok_text = ok.to_string();
    let crit = |header: &str| bearer(hs_raw(header, &ok_text));
    let bad_crit = invalid("the token's `crit` header is not a non-empty list of names");
    rows.push(row(
        "crit naming an unknown extension",
        crit(r#"{"alg":"HS256","kid":"hs","crit":["http://example.com/ext"],"http://example.com/ext":true}"#),
        401,
        invalid("the token needs the extension `http???example.com?ext` (crit), which interlingua does not understand"),
    ));
    rows.push(row(
        "crit b64 with b64 false",
        crit(r#"{"alg":"HS256","kid":"hs","crit":["b64"],"b64":false}"#),
        401,
        invalid(
            "the token needs the extension `b64` (crit), which interlingua does not understand",
        ),
    ));
    for (what, value) in [
        ("empty", "[]"),
        ("a string", "\"b64\""),
        ("null", "null"),
        ("a list holding a number", "[1]"),
    ] {
        rows.push(row(
            format!("crit {what}"),
            crit(&format!(r#"{{"alg":"HS256","kid":"hs","crit":{value}}}"#)),
            401,
            bad_crit.clone(),
        ));
    }

    // A name twice (RFC 7519 §4, RFC 7515 §5.2): refused, never read as the last one.
    rows.push(row(
        "a claim twice",
        bearer(hs_raw(
            r#"{"alg":"HS256","kid":"hs"}"#,
            &with_text(&claims(json!({"plan": "free"})), "\"plan\":\"gold\""),
        )),
        401,
        invalid("the token's claims name `plan` twice"),
    ));
    rows.push(row(
        "a nested claim twice",
        bearer(hs_raw(
            r#"{"alg":"HS256","kid":"hs"}"#,
            &with_text(&ok, r#""org":{"id":1,"id":2}"#),
        )),
        401,
        invalid("the token's claims name `id` twice"),
    ));
    rows.push(row(
        "a header parameter twice",
        bearer(hs_raw(
            r#"{"alg":"HS256","kid":"nope","kid":"hs"}"#,
            &ok_text,
        )),
        401,
        invalid("the token's header names `kid` twice"),
    ));
    rows.push(row(
        "alg twice, none first",
        bearer(hs_raw(
            r#"{"alg":"none","alg":"HS256","kid":"hs"}"#,
            &ok_text,
        )),
        401,
        invalid("the token's header names `alg` twice"),
    ));

    // A kid is echoed in WWW-Authenticate only as far as `[A-Za-z0-9._-]` goes, its first 64
    // characters: RFC 6750 §3 allows neither `"` nor `\` in an error_description, and a client
    // reading `error="…"` with a pattern must not find one the token put there.
    for (what, kid) in [
        ("NUL", "a\0b"),
        ("CR", "a\rb"),
        ("LF", "a\nb"),
        ("DEL", "a\u{7f}b"),
        ("a tab", "a\tb"),
        ("non-ASCII", "a\u{e9}b"),
        ("a backslash", "a\\b"),
        ("a quote", "a\"b"),
    ] {
        rows.push(row(
            format!("kid holding {what}"),
            bearer(hs_kid(kid)),
            401,
            invalid("no key with kid `a?b`"),
        ));
    }
    rows.push(row(
        "kid breaking out of the quoted-string",
        bearer(hs_kid("a\", error=\"insufficient_scope")),
        401,
        invalid("no key with kid `a???error??insufficient_scope`"),
    ));
    rows.push(row(
        "kid escaping its own quote and naming an error",
        bearer(hs_kid("k\\\", error=\"x\"")),
        401,
        invalid("no key with kid `k????error??x?`"),
    ));
    rows.push(row(
        "kid of 100 characters",
        bearer(hs_kid(&"k".repeat(100))),
        401,
        invalid(&format!("no key with kid `{}...`", "k".repeat(64))),
    ));
    rows.push(row(
        "unknown kid",
        bearer(hs_kid("nope")),
        401,
        invalid("no key with kid `nope`"),
    ));

    rows.push(row(
        "valid, wrong plan",
        hs_with(json!({"plan": "bronze"})),
        403,
        Some(INSUFFICIENT.into()),
    ));
    rows.push(row(
        "valid, no plan",
        hs_with(json!({"plan": null})),
        403,
        Some(INSUFFICIENT.into()),
    ));

    let wrong = run(&proxy, &rows).await;
    assert!(
        wrong.is_empty(),
        "{} rows wrong:\n{}",
        wrong.len(),
        wrong.join("\n")
    );

    let count = |status: u16| rows.iter().filter(|r| r.status == status).count();
    assert_eq!(
        upstream.seen().len(),
        count(200),
        "only the valid tokens went upstream"
    );
    proxy
        .metrics_showing(&[
            &format!(
                r#"interlingua_rejections_total{{reason="401"}} {}"#,
                count(401)
            ),
            &format!(
                r#"interlingua_rejections_total{{reason="403"}} {}"#,
                count(403)
            ),
        ])
        .await;
}

/// Calls until the answer is not `while_status` (or the deadline passes), and returns it.
async fn until_not(proxy: &Proxy, token: &str, while_status: u16) -> (u16, Option<String>) {
    let started = Instant::now();
    loop {
        let (status, www, _) = call(proxy, Some(token)).await;
        if status != while_status || started.elapsed() > DEADLINE {
            return (status, www);
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// A key withdrawn from a JWKS URL stops verifying once the set is read again (at most one
/// refresh interval later), remembered tokens included; a key added is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_withdrawn_from_a_jwks_url_is_refused_after_the_refetch() {
    let (jwk1, signer1) = set_key(0, "url-1");
    let (jwk2, signer2) = set_key(1, "url-2");
    let server = jwks_server(json!({"keys": [jwk1]})).await;
    let (proxy, _up, _dir) = table_proxy(&server, "").await;
    let ok = claims(json!({}));
    let old = format!(
        "Bearer {}",
        sign(Algorithm::ES256, Some("url-1"), &signer1, &ok)
    );
    let old_no_kid = format!("Bearer {}", sign(Algorithm::ES256, None, &signer1, &ok));
    let new = format!(
        "Bearer {}",
        sign(Algorithm::ES256, Some("url-2"), &signer2, &ok)
    );
    let new_no_kid = format!("Bearer {}", sign(Algorithm::ES256, None, &signer2, &ok));
    let (status, _, body) = call(&proxy, Some(&old)).await;
    assert_eq!(status, 200, "{body}");

    *server.set.lock() = json!({"keys": [jwk2]});
    let before = server.hits();
    // Remembered as verified, the old token is still accepted until the set is read again.
    let (status, www) = until_not(&proxy, &old, 200).await;
    assert_eq!((status, www), (401, invalid("no key with kid `url-1`")));
    assert!(server.hits() > before, "refused only after a refetch");
    // Without a kid, the set's current keys are tried: the new one, not the old.
    let (status, www, _) = call(&proxy, Some(&old_no_kid)).await;
    assert_eq!((status, www), (401, invalid(SIGNATURE)));
    for token in [&new, &new_no_kid] {
        let (status, _, body) = call(&proxy, Some(token)).await;
        assert_eq!(status, 200, "{body}");
    }
}

/// A key set that can no longer be read keeps its last copy: its keys go on verifying (the key
/// server being down must not lock every client out), and it is tried again an interval later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_set_that_cannot_be_read_again_keeps_its_last_copy() {
    let (jwk1, signer1) = set_key(0, "url-1");
    let server = jwks_server(json!({"keys": [jwk1]})).await;
    let (proxy, _up, _dir) = table_proxy(&server, "").await;
    let token = format!(
        "Bearer {}",
        sign(
            Algorithm::ES256,
            Some("url-1"),
            &signer1,
            &claims(json!({}))
        )
    );
    let (status, _, body) = call(&proxy, Some(&token)).await;
    assert_eq!(status, 200, "{body}");
    *server.set.lock() = json!("not a key set");
    // Until two more reads have failed, and after: every answer is 200.
    let started = Instant::now();
    let before = server.hits();
    while server.hits() < before + 2 {
        let (status, _, body) = call(&proxy, Some(&token)).await;
        assert_eq!(status, 200, "{body}");
        assert!(started.elapsed() < DEADLINE, "the set was not read again");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let (status, _, body) = call(&proxy, Some(&token)).await;
    assert_eq!(status, 200, "{body}");
}

/// `allow_future_iat` and `allow_duplicate_claims` relax the defaults (a name twice: the last
/// one counts, as in most JSON parsers; the route wants plan `gold`, so a 200 says which won).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_knobs_let_a_future_iat_and_duplicate_claims_through() {
    let (proxy, _up) = protected_with(
        "allow_future_iat = true\nallow_duplicate_claims = true\n",
        "",
    )
    .await;
    let now = chrono::Utc::now().timestamp();
    let future = hs(&claims(json!({"iat": now + 600})));
    let twice = hs_raw(
        r#"{"alg":"HS256","kid":"hs"}"#,
        &with_text(&claims(json!({"plan": "free"})), "\"plan\":\"gold\""),
    );
    for (name, token) in [("future iat", future), ("plan twice", twice)] {
        let (status, _, body) = call(&proxy, bearer(token).as_deref()).await;
        assert_eq!(status, 200, "{name}: {body}");
        assert_eq!(body["x-interlingua-plan"], "gold", "{name}");
    }
}
