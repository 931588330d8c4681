//! Choosing a route: host first (a route naming the host wins over one that does not), then the
//! longest path prefix, matched whole segment by whole segment, then the first route in the
//! file whose methods include the request's. The cost of a lookup grows with the depth of the
//! path, not with the number of routes.

use std::collections::HashMap;

use http::Method;

use crate::config::Route;

/// The routes of one configuration, indexed for lookup.
pub struct RouteTable {
    by_host: HashMap<String, Node>,
    any_host: Node,
}

#[derive(Default)]
struct Node {
    children: HashMap<String, Node>,
    /// Routes whose prefix ends at this node, in config order (indexes into the route list).
    routes: Vec<usize>,
}

impl RouteTable {
    /// Indexes `routes`; lookups return indexes into the same slice.
    pub fn new(routes: &[Route]) -> RouteTable {
        let mut table = RouteTable {
            by_host: HashMap::new(),
            any_host: Node::default(),
        };
        for (i, route) in routes.iter().enumerate() {
            let root = match &route.matcher.host {
                Some(host) => table.by_host.entry(host.clone()).or_default(),
                None => &mut table.any_host,
            };
            let mut node = root;
            for segment in segments(&route.matcher.path_prefix) {
                node = node.children.entry(segment.to_string()).or_default();
            }
            node.routes.push(i);
        }
        table
    }

    /// The route for a request, if any. `host` may carry a port and any letter case.
    pub fn find(
        &self,
        routes: &[Route],
        host: Option<&str>,
        path: &str,
        method: &Method,
    ) -> Option<usize> {
        if let Some(root) = host.and_then(|h| self.host_root(h)) {
            if let Some(found) = deepest(root, routes, path, method) {
                return Some(found);
            }
        }
        deepest(&self.any_host, routes, path, method)
    }

    fn host_root(&self, host: &str) -> Option<&Node> {
        if self.by_host.is_empty() {
            return None;
        }
        let bare = strip_port(host);
        if bare.bytes().any(|b| b.is_ascii_uppercase()) {
            self.by_host.get(&bare.to_ascii_lowercase())
        } else {
            self.by_host.get(bare)
        }
    }
}

fn deepest(root: &Node, routes: &[Route], path: &str, method: &Method) -> Option<usize> {
    let mut best = pick(root, routes, method);
    let mut node = root;
    for segment in segments(path) {
        match node.children.get(segment) {
            Some(child) => {
                node = child;
                if let Some(found) = pick(node, routes, method) {
                    best = Some(found);
                }
            }
            None => break,
        }
    }
    best
}

fn pick(node: &Node, routes: &[Route], method: &Method) -> Option<usize> {
    node.routes.iter().copied().find(|&i| {
        routes.get(i).is_some_and(|r| {
            r.matcher
                .methods
                .as_ref()
                .is_none_or(|ms| ms.contains(method))
        })
    })
}

/// The non-empty segments of a path, without its query.
fn segments(path: &str) -> impl Iterator<Item = &str> {
    let path = path.split(['?', '#']).next().unwrap_or("");
    path.split('/').filter(|s| !s.is_empty())
}

fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        // [v6]:port
        return host
            .split_once(']')
            .map_or(host, |(h, _)| h.trim_start_matches('['));
    }
    match host.rsplit_once(':') {
        Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Dialect, RouteMatch, Translation, Validation};
    use std::time::Duration;

    fn route(name: &str, prefix: &str, host: Option<&str>, methods: Option<&[&str]>) -> Route {
        Route {
            name: name.to_string(),
            matcher: RouteMatch {
                path_prefix: prefix.to_string(),
                host: host.map(str::to_string),
                methods: methods.map(|ms| ms.iter().map(|m| m.parse().unwrap()).collect()),
            },
            upstream: 0,
            front: Dialect::Passthrough,
            back: Dialect::Passthrough,
            max_body: 0,
            translation: Translation {
                vars: Default::default(),
                input_schema: None,
                description: None,
                validation: Validation::Reference,
                sync_timeout: Duration::from_secs(1),
                poll_interval: Duration::from_secs(1),
                poll_max_interval: Duration::from_secs(1),
                input_timeout: Duration::from_secs(1),
                min_refresh: Duration::from_secs(1),
                lost_after: Duration::from_secs(60),
                max_json_depth: 64,
            },
            access: Default::default(),
            price: None,
            payment: None,
            x402: None,
            x402_pay: None,
            sell: None,
        }
    }

    fn find(routes: &[Route], host: Option<&str>, path: &str, method: &str) -> Option<String> {
        let table = RouteTable::new(routes);
        let method: Method = method.parse().unwrap();
        table
            .find(routes, host, path, &method)
            .map(|i| routes[i].name.clone())
    }

    #[test]
    fn longest_prefix_wins_segment_by_segment() {
        let routes = [
            route("root", "/", None, None),
            route("api", "/api", None, None),
            route("v1", "/api/v1", None, None),
        ];
        assert_eq!(
            find(&routes, None, "/api/v1/tasks?x=1", "GET").as_deref(),
            Some("v1")
        );
        assert_eq!(
            find(&routes, None, "/api/v2", "GET").as_deref(),
            Some("api")
        );
        assert_eq!(find(&routes, None, "/api", "GET").as_deref(), Some("api"));
        assert_eq!(find(&routes, None, "/apix", "GET").as_deref(), Some("root"));
    }

    #[test]
    fn no_route_without_a_matching_prefix() {
        let routes = [route("api", "/api", None, None)];
        assert_eq!(find(&routes, None, "/other", "GET"), None);
        assert_eq!(find(&routes, None, "/", "GET"), None);
    }

    #[test]
    fn host_routes_win_and_ignore_port_and_case() {
        let routes = [
            route("any", "/api/deep", None, None),
            route("host", "/", Some("agents.example.com"), None),
        ];
        assert_eq!(
            find(&routes, Some("Agents.Example.com:8443"), "/api/deep", "GET").as_deref(),
            Some("host")
        );
        assert_eq!(
            find(&routes, Some("other.example.com"), "/api/deep", "GET").as_deref(),
            Some("any")
        );
    }

    #[test]
    fn methods_narrow_a_route_and_fall_back_to_a_shorter_prefix() {
        let routes = [
            route("root", "/", None, None),
            route("get-only", "/jobs", None, Some(&["GET"])),
            route("post-only", "/jobs", None, Some(&["POST"])),
        ];
        assert_eq!(
            find(&routes, None, "/jobs/1", "GET").as_deref(),
            Some("get-only")
        );
        assert_eq!(
            find(&routes, None, "/jobs", "POST").as_deref(),
            Some("post-only")
        );
        assert_eq!(
            find(&routes, None, "/jobs", "DELETE").as_deref(),
            Some("root")
        );
    }
}
