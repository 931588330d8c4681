//! Protected resource metadata (RFC 9728) through the real proxy: the documents at
//! `/.well-known/oauth-protected-resource[/prefix]`, answered without a token, naming the
//! resource under the request's `Host` or `resource_base`; the 401 and 403 challenges that point
//! at them; routes that publish nothing, unchanged; and the config errors.

mod common;

use common::tokens::{auth_section_with, claims, header_echo, hs, keys, sign};
use common::{client, config, error_of, Proxy, Upstream};
use jsonwebtoken::{Algorithm, EncodingKey};
use serde_json::json;

const SERVERS: &str = "authorization_servers = [\"https://auth.example.com\"]";
const SCOPES: &str = "scopes_supported = [\"agents:call\", \"tools:run\"]";

/// A proxy with `[auth]` (the test keys, plus `auth_settings`) and `routes` (TOML text naming
/// the upstream `up`), and the upstream, which echoes request headers.
async fn gateway(auth_settings: &str, routes: &str) -> (Proxy, Upstream) {
    let upstream = header_echo().await;
    keys();
    let proxy = Proxy::start(&config(
        "",
        &format!(
            "{}\n[[upstreams]]\nname = \"up\"\naddress = \"{}\"\n\n{routes}",
            auth_section_with(auth_settings, ""),
            upstream.addr
        ),
    ));
    (proxy, upstream)
}

/// A route `name` on `prefix` that needs a token with plan `gold`, with `settings` added.
fn protected_route(name: &str, prefix: &str, settings: &str) -> String {
    format!(
        "[[routes]]\nname = \"{name}\"\nmatch = {{ path_prefix = \"{prefix}\" }}\nupstream = \"up\"\n\
         auth = true\nplans = [\"gold\"]\n{settings}\n\n"
    )
}

/// A GET of `path` with `headers`: status, `WWW-Authenticate`, body as text.
async fn get(proxy: &Proxy, path: &str, headers: &[(&str, &str)]) -> (u16, Option<String>, String) {
    let mut req = client().get(proxy.url(path));
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let resp = req.send().await.expect("an answer");
    let status = resp.status().as_u16();
    let www = resp
        .headers()
        .get("www-authenticate")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    (status, www, resp.text().await.expect("a body"))
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// The document of a resource at `resource` published with the test's servers and scopes.
fn document(resource: &str) -> String {
    format!(
        r#"{{"resource":"{resource}","authorization_servers":["https://auth.example.com"],"scopes_supported":["agents:call","tools:run"],"bearer_methods_supported":["header"],"resource_name":"interlingua"}}"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_without_a_token_is_pointed_at_the_metadata_with_its_scope_and_no_error() {
    let (proxy, upstream) = gateway(
        &format!("{SERVERS}\n{SCOPES}"),
        &protected_route("mcp", "/mcp", ""),
    )
    .await;
    let (status, www, body) = get(&proxy, "/mcp/x", &[]).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(
        www.as_deref(),
        Some(
            format!(
                "Bearer realm=\"interlingua\", resource_metadata=\"http://{}/.well-known/oauth-protected-resource/mcp\", scope=\"agents:call tools:run\"",
                proxy.addr
            )
            .as_str()
        )
    );
    assert_eq!(error_of(&body).0, "unauthorized");
    // The document's URL follows the Host the client used.
    let (status, www, _) = get(&proxy, "/mcp/x", &[("host", "gw.example.com")]).await;
    assert_eq!(status, 401);
    assert_eq!(
        www.as_deref(),
        Some("Bearer realm=\"interlingua\", resource_metadata=\"http://gw.example.com/.well-known/oauth-protected-resource/mcp\", scope=\"agents:call tools:run\"")
    );
    // The token checks are as they were: a valid token goes through.
    let (status, _, body) = get(
        &proxy,
        "/mcp/x",
        &[("authorization", &bearer(&hs(&claims(json!({})))))],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(upstream.seen().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_token_and_a_wrong_plan_name_the_metadata_after_their_own_parameters() {
    let (proxy, upstream) = gateway(
        &format!("{SERVERS}\n{SCOPES}"),
        &protected_route("mcp", "/mcp", ""),
    )
    .await;
    let metadata = format!(
        "resource_metadata=\"http://{}/.well-known/oauth-protected-resource/mcp\"",
        proxy.addr
    );
    let forged = sign(
        Algorithm::HS256,
        Some("hs"),
        &EncodingKey::from_secret(b"not-the-secret"),
        &claims(json!({})),
    );
    let (status, www, _) = get(&proxy, "/mcp/x", &[("authorization", &bearer(&forged))]).await;
    assert_eq!(status, 401);
    assert_eq!(
        www,
        Some(format!(
            "Bearer realm=\"interlingua\", error=\"invalid_token\", error_description=\"the signature does not verify\", {metadata}"
        ))
    );
    let silver = hs(&claims(json!({"plan": "silver"})));
    let (status, www, _) = get(&proxy, "/mcp/x", &[("authorization", &bearer(&silver))]).await;
    assert_eq!(status, 403);
    assert_eq!(
        www,
        Some(format!(
            "Bearer realm=\"interlingua\", error=\"insufficient_scope\", error_description=\"the token's plan may not use this route\", {metadata}"
        ))
    );
    assert!(upstream.seen().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_is_served_without_a_token_at_its_path_and_the_root() {
    let (proxy, upstream) = gateway(
        &format!("{SERVERS}\n{SCOPES}"),
        &protected_route("mcp", "/mcp", ""),
    )
    .await;
    let here = document(&format!("http://{}/mcp", proxy.addr));
    for path in [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ] {
        let resp = client().get(proxy.url(path)).send().await.unwrap();
        assert_eq!(resp.status(), 200, "{path}");
        assert_eq!(
            resp.headers().get("content-type").map(|v| v.as_bytes()),
            Some(&b"application/json"[..]),
            "{path}"
        );
        assert!(resp.headers().contains_key("x-request-id"), "{path}");
        assert_eq!(resp.text().await.unwrap(), here, "{path}");
    }
    // `resource` follows the Host header.
    let (status, _, body) = get(
        &proxy,
        "/.well-known/oauth-protected-resource/mcp",
        &[("host", "gw.example.com:8443")],
    )
    .await;
    assert_eq!(
        (status, body),
        (200, document("http://gw.example.com:8443/mcp"))
    );
    // HEAD: the same header, no body; another method: 405 with `Allow`.
    let resp = client()
        .head(proxy.url("/.well-known/oauth-protected-resource/mcp"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.headers().get("content-length").map(|v| v.as_bytes()),
        Some(here.len().to_string().as_bytes())
    );
    assert!(resp.bytes().await.unwrap().is_empty());
    let resp = client()
        .post(proxy.url("/.well-known/oauth-protected-resource/mcp"))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 405);
    assert_eq!(
        resp.headers().get("allow").map(|v| v.as_bytes()),
        Some(&b"GET, HEAD"[..])
    );
    assert_eq!(
        error_of(&resp.text().await.unwrap()).0,
        "method_not_allowed"
    );
    assert!(
        upstream.seen().is_empty(),
        "the documents never go upstream"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_base_names_the_resource_whatever_the_host() {
    let (proxy, _upstream) = gateway(
        &format!("{SERVERS}\n{SCOPES}\nresource_base = \"https://gw.example.com/\""),
        &protected_route("mcp", "/mcp", ""),
    )
    .await;
    let (status, _, body) = get(&proxy, "/.well-known/oauth-protected-resource/mcp", &[]).await;
    assert_eq!(
        (status, body),
        (200, document("https://gw.example.com/mcp"))
    );
    let (status, www, _) = get(&proxy, "/mcp", &[("host", "elsewhere.example")]).await;
    assert_eq!(status, 401);
    assert_eq!(
        www.as_deref(),
        Some("Bearer realm=\"interlingua\", resource_metadata=\"https://gw.example.com/.well-known/oauth-protected-resource/mcp\", scope=\"agents:call tools:run\"")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_two_resources_each_has_its_document_and_the_root_form_has_none() {
    let routes = format!(
        "{}{}[[routes]]\nname = \"open\"\nmatch = {{ path_prefix = \"/open\" }}\nupstream = \"up\"\n",
        protected_route("mcp", "/mcp", ""),
        protected_route(
            "a2a",
            "/a2a",
            "auth_metadata = { authorization_servers = [\"https://other.example.com/tenant\"] }"
        ),
    );
    let (proxy, _upstream) = gateway(&format!("{SERVERS}\n{SCOPES}"), &routes).await;
    let (status, _, body) = get(&proxy, "/.well-known/oauth-protected-resource/mcp", &[]).await;
    assert_eq!(
        (status, body),
        (200, document(&format!("http://{}/mcp", proxy.addr)))
    );
    let (status, _, body) = get(&proxy, "/.well-known/oauth-protected-resource/a2a", &[]).await;
    assert_eq!(status, 200);
    assert_eq!(
        body,
        format!(
            r#"{{"resource":"http://{}/a2a","authorization_servers":["https://other.example.com/tenant"],"scopes_supported":["agents:call","tools:run"],"bearer_methods_supported":["header"],"resource_name":"interlingua"}}"#,
            proxy.addr
        )
    );
    // Two resources: the root form cannot say which, and neither can a route without auth.
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/open",
    ] {
        let (status, _, body) = get(&proxy, path, &[]).await;
        assert_eq!(status, 404, "{path}: {body}");
        assert_eq!(error_of(&body).0, "no_route", "{path}");
    }
    // The route without auth goes on as before.
    let (status, www, _) = get(&proxy, "/open/x", &[]).await;
    assert_eq!((status, www), (200, None));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_authorization_servers_nothing_is_published_and_the_challenge_is_unchanged() {
    let (proxy, _upstream) = gateway(SCOPES, &protected_route("mcp", "/mcp", "")).await;
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ] {
        let (status, _, body) = get(&proxy, path, &[]).await;
        assert_eq!(status, 404, "{path}: {body}");
        assert_eq!(error_of(&body).0, "no_route", "{path}");
    }
    let (status, www, _) = get(&proxy, "/mcp/x", &[]).await;
    assert_eq!(status, 401);
    assert_eq!(www.as_deref(), Some("Bearer realm=\"interlingua\""));
    let silver = hs(&claims(json!({"plan": "silver"})));
    let (status, www, _) = get(&proxy, "/mcp/x", &[("authorization", &bearer(&silver))]).await;
    assert_eq!(status, 403);
    assert_eq!(
        www.as_deref(),
        Some("Bearer realm=\"interlingua\", error=\"insufficient_scope\", error_description=\"the token's plan may not use this route\"")
    );
}

#[test]
fn config_errors_name_the_key_with_its_line_and_column() {
    keys();
    let text = config(
        "",
        &format!(
            "{}\n[[upstreams]]\nname = \"up\"\naddress = \"127.0.0.1:9\"\n\n\
             [[routes]]\nmatch = {{ path_prefix = \"/open\" }}\nupstream = \"up\"\n\
             auth_metadata = {{ scopes = [\"a\"] }}\n\n\
             [[routes]]\nmatch = {{ path_prefix = \"/mcp\" }}\nupstream = \"up\"\nauth = true\n\
             auth_metadata = {{ authorization_servers = [\"https://ok.example\"], issuer = \"x\" }}\n",
            auth_section_with(
                "authorization_servers = [\"auth.example.com\"]\nresource_base = \"https://gw.example.com/api\"",
                ""
            ),
        ),
    );
    let problems = interlingua::config::parse(&text, "t.toml")
        .expect_err("the config is invalid")
        .to_string();
    let expected = [
        ": auth.authorization_servers[0]: `auth.example.com` is not an http:// or https:// URL",
        ": auth.resource_base: `https://gw.example.com/api` is not an origin; write scheme://host[:port], without a path",
        ": routes[0].auth_metadata: auth_metadata needs auth = true",
        ": routes[1]: unknown field `issuer`, expected `authorization_servers` or `scopes`",
    ];
    for e in expected {
        let line = problems.lines().find(|l| l.contains(e));
        assert!(
            line.is_some_and(|l| l.starts_with("t.toml:")),
            "no `t.toml:LINE:COL{e}` in:\n{problems}"
        );
    }
}
