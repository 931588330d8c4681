//! Protected resource metadata (RFC 9728): what each route with auth publishes about getting a
//! token for it, built once when the config is loaded.
//!
//! A route on the prefix `/mcp` is the resource `<base>/mcp`; its document is served at
//! `<base>/.well-known/oauth-protected-resource/mcp` (§3.1: the well-known path goes between the
//! host and the resource's path), and at `/.well-known/oauth-protected-resource` too when it is
//! the only resource a host has. `<base>` is known only per request (the `Host` a client used,
//! or the configured `resource_base`), so each document is kept as the text that follows its
//! `resource` member.

use std::collections::HashMap;

use serde_json::json;

use crate::config::{Config, ResourceMetadata};

/// Where every document is served, the resource's path after it.
pub const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

/// One protected resource: a route with auth and authorization servers.
#[derive(Debug)]
pub struct Resource {
    /// The route's prefix, empty for `/` (the resource is then the origin itself).
    path: String,
    /// The route's host, when it names one.
    host: Option<String>,
    /// The scopes, space-separated as a challenge's `scope` wants them (RFC 6750 §3).
    scope: Option<String>,
    /// The document after `{"resource":"…"`.
    rest: String,
}

impl Resource {
    fn new(prefix: &str, host: Option<&str>, m: &ResourceMetadata) -> Resource {
        // In the order RFC 9728 §2 lists them (a Map would sort them).
        let mut fields = vec![("authorization_servers", json!(m.authorization_servers))];
        if !m.scopes.is_empty() {
            fields.push(("scopes_supported", json!(m.scopes)));
        }
        fields.push(("bearer_methods_supported", json!(["header"])));
        fields.push(("resource_name", json!("interlingua")));
        let mut rest = String::new();
        for (name, value) in fields {
            rest.push_str(&format!(",\"{name}\":{value}"));
        }
        rest.push('}');
        Resource {
            path: prefix.trim_end_matches('/').to_string(),
            host: host.map(str::to_string),
            scope: (!m.scopes.is_empty()).then(|| m.scopes.join(" ")),
            rest,
        }
    }

    /// The resource's identifier under `base` (an origin without a trailing `/`).
    pub fn url(&self, base: &str) -> String {
        format!("{base}{}", self.path)
    }

    /// Where its metadata document is, under `base`.
    pub fn metadata_url(&self, base: &str) -> String {
        format!("{base}{WELL_KNOWN}{}", self.path)
    }

    /// The scopes, space-separated; `None` when none are published.
    pub fn scope(&self) -> Option<&str> {
        self.scope.as_deref()
    }

    /// The metadata document (JSON) with the resource named under `base`.
    pub fn document(&self, base: &str) -> Vec<u8> {
        let mut out = String::with_capacity(self.rest.len() + base.len() + self.path.len() + 16);
        out.push_str("{\"resource\":");
        out.push_str(&json!(self.url(base)).to_string());
        out.push_str(&self.rest);
        out.into_bytes()
    }

    /// Whether a request for `host` (bare, lower-case) may see this resource.
    fn serves(&self, host: Option<&str>) -> bool {
        self.host.is_none() || self.host.as_deref() == host
    }
}

/// The resources of one configuration, and the origin they are named under when configured.
#[derive(Debug, Default)]
pub struct Resources {
    list: Vec<Resource>,
    /// Per route (by index), its resource in `list`.
    by_route: Vec<Option<usize>>,
    /// By the resource's path (`""` for `/`): its resources in config order.
    by_path: HashMap<String, Vec<usize>>,
    base: Option<String>,
}

impl Resources {
    /// Every route with metadata ([`crate::config::Access::metadata`]) is a resource.
    pub fn new(config: &Config) -> Resources {
        let mut r = Resources {
            base: config.auth.as_ref().and_then(|a| a.resource_base.clone()),
            ..Resources::default()
        };
        for route in &config.routes {
            let Some(m) = &route.access.metadata else {
                r.by_route.push(None);
                continue;
            };
            let resource =
                Resource::new(&route.matcher.path_prefix, route.matcher.host.as_deref(), m);
            let at = r.list.len();
            r.by_path.entry(resource.path.clone()).or_default().push(at);
            r.list.push(resource);
            r.by_route.push(Some(at));
        }
        r
    }

    /// The configured public origin (`resource_base`), if any.
    pub fn base(&self) -> Option<&str> {
        self.base.as_deref()
    }

    /// The resource of the route at `index`, if it publishes one.
    pub fn for_route(&self, index: usize) -> Option<&Resource> {
        self.by_route
            .get(index)
            .copied()
            .flatten()
            .and_then(|at| self.list.get(at))
    }

    /// The resource whose document `path` asks for, on `host` (as sent: any case, maybe a
    /// port). `None`: `path` is not a document's, or no resource on this host has it; the
    /// root form answers only when the host has exactly one resource (or one on `/`).
    pub fn find(&self, host: Option<&str>, path: &str) -> Option<&Resource> {
        let rest = path.strip_prefix(WELL_KNOWN)?;
        if !(rest.is_empty() || rest.starts_with('/')) {
            return None;
        }
        let host = host.map(|h| strip_port(h).to_ascii_lowercase());
        let host = host.as_deref();
        // A route naming the host wins over one that does not, as in routing.
        let pick = |candidates: &[usize]| -> Option<&Resource> {
            let mut fitting = candidates
                .iter()
                .filter_map(|&at| self.list.get(at))
                .filter(|r| r.serves(host));
            let first = fitting.next()?;
            Some(if first.host.is_some() {
                first
            } else {
                fitting.find(|r| r.host.is_some()).unwrap_or(first)
            })
        };
        let wanted = rest.trim_end_matches('/');
        if let Some(found) = self.by_path.get(wanted).and_then(|c| pick(c)) {
            return Some(found);
        }
        if !wanted.is_empty() {
            return None;
        }
        let mut paths = self
            .by_path
            .iter()
            .filter(|(_, c)| c.iter().any(|&at| self.list[at].serves(host)));
        match (paths.next(), paths.next()) {
            (Some((_, only)), None) => pick(only),
            _ => None,
        }
    }
}

/// `host` without its port (`[::1]:8080` → `::1`).
fn strip_port(host: &str) -> &str {
    if let Some(v6) = host.strip_prefix('[') {
        return v6.split_once(']').map_or(host, |(h, _)| h);
    }
    match host.rsplit_once(':') {
        Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resources(routes: &[(&str, Option<&str>)]) -> Resources {
        let m = ResourceMetadata {
            authorization_servers: vec!["https://auth.example.com".into()],
            scopes: vec!["a".into(), "b".into()],
        };
        let mut r = Resources::default();
        for (i, (prefix, host)) in routes.iter().enumerate() {
            let resource = Resource::new(prefix, *host, &m);
            r.by_path.entry(resource.path.clone()).or_default().push(i);
            r.list.push(resource);
            r.by_route.push(Some(i));
        }
        r
    }

    #[test]
    fn the_document_names_the_resource_under_the_base() {
        let r = resources(&[("/mcp", None)]);
        let doc = r.for_route(0).map(|r| r.document("https://gw.example.com"));
        assert_eq!(
            doc.as_deref().map(String::from_utf8_lossy).as_deref(),
            Some(
                r#"{"resource":"https://gw.example.com/mcp","authorization_servers":["https://auth.example.com"],"scopes_supported":["a","b"],"bearer_methods_supported":["header"],"resource_name":"interlingua"}"#
            )
        );
        assert_eq!(
            r.for_route(0).map(|r| r.metadata_url("http://h:1")),
            Some("http://h:1/.well-known/oauth-protected-resource/mcp".to_string())
        );
    }

    #[test]
    fn the_path_form_finds_its_route_and_the_root_form_only_a_single_one() {
        let one = resources(&[("/mcp", None)]);
        let path = |r: &Resources, host, p| r.find(host, p).map(|r| r.path.clone());
        assert_eq!(
            path(&one, None, "/.well-known/oauth-protected-resource/mcp"),
            Some("/mcp".into())
        );
        assert_eq!(
            path(&one, None, "/.well-known/oauth-protected-resource"),
            Some("/mcp".into())
        );
        assert_eq!(
            path(&one, None, "/.well-known/oauth-protected-resource/other"),
            None
        );
        assert_eq!(
            path(&one, None, "/.well-known/oauth-protected-resourcex"),
            None
        );
        assert_eq!(path(&one, None, "/mcp"), None);
        let two = resources(&[("/a", None), ("/b", None)]);
        assert_eq!(
            path(&two, None, "/.well-known/oauth-protected-resource"),
            None
        );
        assert_eq!(
            path(&two, None, "/.well-known/oauth-protected-resource/b"),
            Some("/b".into())
        );
        let root = resources(&[("/", None), ("/b", None)]);
        assert_eq!(
            path(&root, None, "/.well-known/oauth-protected-resource"),
            Some("".into())
        );
    }

    #[test]
    fn a_host_sees_only_its_own_and_hostless_resources() {
        let r = resources(&[("/a", Some("one.example")), ("/b", None)]);
        let path = |host, p| r.find(host, p).map(|r| r.path.clone());
        let a = "/.well-known/oauth-protected-resource/a";
        assert_eq!(path(Some("ONE.example:8080"), a), Some("/a".into()));
        assert_eq!(path(Some("two.example"), a), None);
        let root = "/.well-known/oauth-protected-resource";
        assert_eq!(path(Some("two.example"), root), Some("/b".into()));
        assert_eq!(path(Some("one.example"), root), None);
    }
}
