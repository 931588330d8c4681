//! Checking what the config says about protected resource metadata (RFC 9728): `[auth]`'s
//! `authorization_servers`, `scopes_supported` and `resource_base`, and a route's
//! `auth_metadata`, which replaces the first two key by key.

use toml::Spanned;

use super::file::{self, AuthSection};
use super::model::{Auth, ResourceMetadata};
use super::url::Url;
use mapping::problem::Collector;

/// `[auth]`'s three keys, as `(authorization_servers, scopes_supported, resource_base)`; each
/// problem is recorded and the key left out.
pub fn defaults(
    a: &AuthSection,
    p: &mut Collector<'_>,
) -> (Vec<String>, Vec<String>, Option<String>) {
    let servers = servers(
        a.authorization_servers.as_ref(),
        "auth.authorization_servers",
        p,
    );
    let scopes = scopes(a.scopes_supported.as_ref(), "auth.scopes_supported", p);
    let base = a.resource_base.as_ref().and_then(|b| origin(b, p));
    (
        servers.unwrap_or_default(),
        scopes.unwrap_or_default(),
        base,
    )
}

/// A route's metadata: its `auth_metadata`, else `[auth]`'s. `Some(None)`: the route publishes
/// none (no auth, or no authorization servers anywhere); `None`: problems were recorded.
pub fn route(
    r: &file::RouteEntry,
    path: &str,
    auth: Option<&Auth>,
    p: &mut Collector<'_>,
) -> Option<Option<ResourceMetadata>> {
    let before = p.len();
    let own = r.auth_metadata.as_ref();
    if let Some(entry) = own {
        if !r.auth.unwrap_or(false) {
            p.at(
                Some(entry.span()),
                format!("{path}.auth_metadata"),
                "auth_metadata needs auth = true: it tells clients how to get the token the route requires",
            );
        }
    }
    let own_servers = own.and_then(|e| {
        servers(
            e.get_ref().authorization_servers.as_ref(),
            &format!("{path}.auth_metadata.authorization_servers"),
            p,
        )
    });
    let own_scopes = own.and_then(|e| {
        scopes(
            e.get_ref().scopes.as_ref(),
            &format!("{path}.auth_metadata.scopes"),
            p,
        )
    });
    if p.len() != before {
        return None;
    }
    // Without [auth] (or with a broken one) the route's `auth` is reported already.
    let (Some(auth), true) = (auth, r.auth.unwrap_or(false)) else {
        return Some(None);
    };
    let authorization_servers = own_servers.unwrap_or_else(|| auth.authorization_servers.clone());
    if authorization_servers.is_empty() {
        if let Some(entry) = own {
            p.at(
                Some(entry.span()),
                format!("{path}.auth_metadata.authorization_servers"),
                "no authorization servers to publish: name them here or in [auth] authorization_servers",
            );
            return None;
        }
        return Some(None);
    }
    Some(Some(ResourceMetadata {
        authorization_servers,
        scopes: own_scopes.unwrap_or_else(|| auth.scopes_supported.clone()),
    }))
}

/// A list of authorization server issuer URLs (`None` when absent or wrong, problems recorded).
fn servers(
    list: Option<&Vec<Spanned<String>>>,
    path: &str,
    p: &mut Collector<'_>,
) -> Option<Vec<String>> {
    let list = list?;
    if list.is_empty() {
        p.at(
            None,
            path,
            "must name at least one authorization server, or be left out",
        );
        return None;
    }
    let before = p.len();
    for (i, s) in list.iter().enumerate() {
        let text = s.get_ref();
        let problem = match Url::parse(text) {
            Err(e) => Some(e.to_string()),
            // RFC 8414 §2: an issuer identifier has no query or fragment.
            Ok(_) if text.contains(['?', '#']) => Some(format!(
                "`{text}` has a query or fragment; an issuer URL has neither"
            )),
            Ok(u) if u.host.contains(['@', ' ']) => Some(format!("`{text}` has no valid host")),
            Ok(_) => None,
        };
        if let Some(problem) = problem {
            p.at(Some(s.span()), format!("{path}[{i}]"), problem);
        }
    }
    (p.len() == before).then(|| list.iter().map(|s| s.get_ref().clone()).collect())
}

/// A list of OAuth scopes (RFC 6749 §3.3: printable ASCII without space, `"` and `\`).
fn scopes(
    list: Option<&Vec<Spanned<String>>>,
    path: &str,
    p: &mut Collector<'_>,
) -> Option<Vec<String>> {
    let list = list?;
    let before = p.len();
    for (i, s) in list.iter().enumerate() {
        let text = s.get_ref();
        let fits = |b: u8| b == 0x21 || (0x23..=0x5b).contains(&b) || (0x5d..=0x7e).contains(&b);
        if text.is_empty() || !text.bytes().all(fits) {
            p.at(
                Some(s.span()),
                format!("{path}[{i}]"),
                format!(
                    "`{text}` is not a scope: printable ASCII without spaces, quotes or backslashes"
                ),
            );
        }
    }
    (p.len() == before).then(|| list.iter().map(|s| s.get_ref().clone()).collect())
}

/// `resource_base`: an `http://` or `https://` origin, without a path (the well-known path goes
/// right after the host, RFC 9728 §3.1); returned without a trailing `/`.
fn origin(value: &Spanned<String>, p: &mut Collector<'_>) -> Option<String> {
    let text = value.get_ref();
    let trimmed = text.trim_end_matches('/');
    let problem = match Url::parse(trimmed) {
        Err(e) => e.to_string(),
        Ok(u) if u.target == "/" && !u.host.contains(['@', ' ', '?', '#']) => {
            return Some(trimmed.to_string())
        }
        Ok(_) => format!("`{text}` is not an origin; write scheme://host[:port], without a path"),
    };
    p.at(Some(value.span()), "auth.resource_base", problem);
    None
}

#[cfg(test)]
mod tests {
    /// Parses a config with `[auth]` settings `auth` and one route with `route` settings; the
    /// route's metadata, or every problem as text.
    fn metadata(auth: &str, route: &str) -> Result<Option<super::ResourceMetadata>, String> {
        const ENV: &str = "INTERLINGUA_UNIT_METADATA_SECRET";
        std::env::set_var(ENV, "a-secret");
        let text = format!(
            "[auth]\n{auth}\n[[auth.keys]]\nid = \"k\"\ntype = \"hmac\"\nsecret_env = \"{ENV}\"\n\n\
             [[listeners]]\naddress = \"127.0.0.1:0\"\n\n\
             [[upstreams]]\nname = \"up\"\naddress = \"127.0.0.1:9\"\n\n\
             [[routes]]\nmatch = {{ path_prefix = \"/mcp\" }}\nupstream = \"up\"\n{route}\n"
        );
        crate::config::parse(&text, "t.toml")
            .map(|c| c.routes[0].access.metadata.clone())
            .map_err(|p| p.to_string())
    }

    #[test]
    fn a_route_with_auth_publishes_the_auth_sections_metadata() {
        let m = metadata(
            "authorization_servers = [\"https://auth.example.com\"]\nscopes_supported = [\"agents:call\"]",
            "auth = true",
        );
        assert_eq!(
            m,
            Ok(Some(super::ResourceMetadata {
                authorization_servers: vec!["https://auth.example.com".into()],
                scopes: vec!["agents:call".into()],
            }))
        );
    }

    #[test]
    fn a_routes_own_metadata_replaces_each_key_it_names() {
        let m = metadata(
            "authorization_servers = [\"https://auth.example.com\"]\nscopes_supported = [\"a\"]",
            "auth = true\nauth_metadata = { scopes = [\"b\", \"c\"] }",
        )
        .map(|m| m.map(|m| (m.authorization_servers, m.scopes)));
        assert_eq!(
            m,
            Ok(Some((
                vec!["https://auth.example.com".into()],
                vec!["b".into(), "c".into()]
            )))
        );
    }

    #[test]
    fn without_authorization_servers_nothing_is_published() {
        assert_eq!(
            metadata("scopes_supported = [\"a\"]", "auth = true"),
            Ok(None)
        );
        assert_eq!(
            metadata("authorization_servers = [\"https://a.example\"]", ""),
            Ok(None)
        );
    }

    #[test]
    fn every_bad_value_is_reported_at_its_key() {
        let problems = metadata(
            "authorization_servers = [\"https://ok.example\", \"auth.example.com\", \"https://a.example/?x=1\"]\n\
             scopes_supported = [\"has space\"]\nresource_base = \"https://gw.example.com/api\"",
            "auth_metadata = { authorization_servers = [] }",
        )
        .unwrap_err();
        for expected in [
            "auth.authorization_servers[1]: `auth.example.com` is not an http:// or https:// URL",
            "auth.authorization_servers[2]: `https://a.example/?x=1` has a query or fragment",
            "auth.scopes_supported[0]: `has space` is not a scope",
            "auth.resource_base: `https://gw.example.com/api` is not an origin",
            "routes[0].auth_metadata: auth_metadata needs auth = true",
            "routes[0].auth_metadata.authorization_servers: must name at least one",
        ] {
            assert!(
                problems.contains(expected),
                "no `{expected}` in:\n{problems}"
            );
        }
    }

    #[test]
    fn routes_of_one_resource_publish_the_same_metadata() {
        const ENV: &str = "INTERLINGUA_UNIT_METADATA_SECRET";
        std::env::set_var(ENV, "a-secret");
        let route = |methods: &str, extra: &str| {
            format!(
                "[[routes]]\nmatch = {{ path_prefix = \"/mcp\", methods = [\"{methods}\"] }}\n\
                 upstream = \"up\"\nauth = true\n{extra}\n"
            )
        };
        let text = format!(
            "[auth]\nauthorization_servers = [\"https://auth.example.com\"]\n\
             [[auth.keys]]\nid = \"k\"\ntype = \"hmac\"\nsecret_env = \"{ENV}\"\n\n\
             [[listeners]]\naddress = \"127.0.0.1:0\"\n\n\
             [[upstreams]]\nname = \"up\"\naddress = \"127.0.0.1:9\"\n\n{}{}",
            route("POST", ""),
            route("GET", "auth_metadata = { scopes = [\"other\"] }")
        );
        let problems = crate::config::parse(&text, "t.toml")
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert_eq!(
            problems,
            "t.toml:24:17: routes[1].auth_metadata: routes[0] has the same host and prefix, so it is the same protected resource, but publishes other metadata"
        );
    }

    #[test]
    fn a_route_naming_scopes_only_needs_servers_somewhere() {
        let problems =
            metadata("", "auth = true\nauth_metadata = { scopes = [\"a\"] }").unwrap_err();
        assert!(
            problems.contains("routes[0].auth_metadata.authorization_servers: no authorization servers to publish"),
            "{problems}"
        );
    }
}
