//! Discovery: what a back's `[discover]` call says about where and how to call it (an agent's
//! card), kept per route for the mapping's `ttl`, read before the first back call and again,
//! once, when a back call fails in a way that says the agent has moved.
//!
//! ```text
//! call_back ─► discovered(route) ──cached?──► [discover] call ─► rules ─► discovered.*
//!     │                                        then: each [calls.NAME] ─► rules ─► discovered.*
//!     │  back form chosen and written with discovered.* in view (`when`, `target`, rules)
//!     └─ fails (no connection, 404, 405, 5xx) ─► discovered again, fresh ─► changed? ─► one retry
//! ```
//!
//! The discovery call always goes to the route's configured upstream: a path or URL it reads
//! (`target`) contributes its path and query only, so a card cannot send interlingua (and the
//! route's credential) to another host.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::{Map, Value};

use super::{parse_answer, request_header, Back};
use crate::engine::{Cx, Translated};
use crate::telemetry::trace;
use mapping::dialect::doc::text_of;
pub(in crate::engine) use mapping::dialect::doc::WithDiscovered;
use mapping::dialect::{self, Canonical, Decoded, Message};

/// What was discovered per route, with when and for how long.
#[derive(Default)]
pub(in crate::engine) struct Cache(Mutex<HashMap<String, Entry>>);

impl Cache {
    /// Forgets what was discovered for `route`, on whichever upstream.
    pub(in crate::engine) fn forget(&self, route: &str) {
        let prefix = format!("{route}\n");
        self.0.lock().retain(|k, _| !k.starts_with(&prefix));
    }
}

struct Entry {
    at: Instant,
    ttl: Duration,
    doc: Arc<Value>,
}

/// A failed discovery is tried again after at most this long (sooner when a back call fails).
const FAILED_TTL: Duration = Duration::from_secs(30);

impl Back {
    /// What the back's `[discover]` call says for route `t` (an empty object when it says
    /// nothing or could not be read; `None` when the back has no `[discover]`). Read from the
    /// cache unless it is stale or `fresh` is asked for.
    pub(in crate::engine) async fn discovered(
        &self,
        t: &Translated,
        cx: &mut Cx<'_>,
        fresh: bool,
    ) -> Option<Arc<Value>> {
        let d = t.back.discover.as_ref()?;
        // A reloaded route may have another upstream: what was learnt of the old one is not
        // about the new one.
        let key = format!("{}\n{}", t.route, t.upstream.config.name);
        if !fresh {
            let cache = self.discovery.0.lock();
            if let Some(e) = cache.get(&key).filter(|e| e.at.elapsed() < e.ttl) {
                return Some(e.doc.clone());
            }
        }
        // Boxed: made once per `ttl`, it would otherwise size every call's future (see
        // `Engine::handle`).
        let (doc, ttl) = match Box::pin(self.discover_once(t, d, cx)).await {
            Some(doc) => (doc, d.ttl),
            None => (Value::Object(Map::new()), d.ttl.min(FAILED_TTL)),
        };
        let doc = Arc::new(doc);
        self.discovery.0.lock().insert(
            key,
            Entry {
                at: Instant::now(),
                ttl,
                doc: doc.clone(),
            },
        );
        Some(doc)
    }

    /// One discovery: its call, then each of its `then` calls with what it read in view;
    /// `None` when any of them fails (the back is then called as if nothing had been
    /// discovered: the mapping's forms without `discovered.*`). A handshake half made is not
    /// one: a session whose `notifications/initialized` was refused is not used.
    async fn discover_once(
        &self,
        t: &Translated,
        d: &mapping::dialect::mapping::Discover,
        cx: &mut Cx<'_>,
    ) -> Option<Value> {
        let mut found = self.discovery_call(t, &d.call, cx).await?;
        for next in &d.then {
            let view = WithDiscovered {
                doc: &Canonical::empty(),
                discovered: &found,
            };
            if next
                .when
                .as_ref()
                .is_some_and(|w| !dialect::holds(w, &view, &t.back_ctx()))
            {
                continue;
            }
            let seed = Decoded::from(serde_json::json!({ "discovered": found.clone() }));
            let call = super::documents::call_of(next);
            match self
                .call_once(t, call, (&view, None), seed, cx, &mut false)
                .await
            {
                Ok(read) => found = read.discovered(),
                Err(e) => {
                    tracing::debug!(route = %t.route, call = %next.name, error = %e, "discovery failed");
                    return None;
                }
            }
        }
        Some(found)
    }

    /// The discovery call itself: its request written (a body too: a handshake's POST), its
    /// answer read into `discovered.*`; `None` when it fails.
    async fn discovery_call(
        &self,
        t: &Translated,
        call: &mapping::dialect::mapping::Call,
        cx: &mut Cx<'_>,
    ) -> Option<Value> {
        let ctx = t.back_ctx();
        let empty = Canonical::empty();
        let msg = dialect::encode(&call.request, &empty, &ctx).ok()?;
        let target = call
            .target
            .as_ref()
            .and_then(|e| dialect::evaluate(e, &empty, &ctx))
            .map(|v| text_of(&v))
            .filter(|v| !v.is_empty());
        let path = match target {
            Some(target) => {
                let (path, query) = path_of(&target)?;
                join(&path, &query, "/", &msg)
            }
            None => join("", "", &call.path.render(&msg.params).ok()?, &msg),
        };
        let body = match &msg.body {
            Some(b) => Some(Bytes::from(serde_json::to_vec(b).ok()?)),
            None => None,
        };
        let span = trace::agent_call(
            &t.upstream.config,
            &t.back.name,
            Some(&call.name),
            &call.method,
        );
        let header = request_header(&call.method, &path, t, &msg, body.as_ref(), cx, &span).ok()?;
        let answer = match self.exchange(t, header, body, span).await {
            Ok(a) => a,
            Err(e) => {
                tracing::debug!(route = %t.route, error = %e, "discovery failed");
                return None;
            }
        };
        cx.spent.upstream += answer.took;
        if !(200..300).contains(&answer.status) {
            tracing::debug!(route = %t.route, status = answer.status, "discovery refused");
            return None;
        }
        let reply = Message {
            headers: answer.headers,
            body: parse_answer(&answer.body),
            ..Message::default()
        };
        let doc = dialect::decode(&call.response, &reply, &ctx)
            .map_err(|e| tracing::debug!(route = %t.route, error = %e, "discovery unreadable"))
            .ok()?;
        Some(Decoded::from(doc).discovered())
    }
}

/// The path and query of a path or absolute URL; `None` when it is neither.
pub(in crate::engine) fn path_of(target: &str) -> Option<(String, String)> {
    let uri: http::Uri = target.trim().parse().ok()?;
    let path = uri.path().to_string();
    if !path.starts_with('/') {
        return None;
    }
    Some((path, uri.query().unwrap_or("").to_string()))
}

/// `prefix` (a target's path) with the form's rendered `path` after it (`/` adds nothing: the
/// target is the endpoint itself), then the target's query and the message's.
pub(in crate::engine) fn join(
    prefix: &str,
    target_query: &str,
    path: &str,
    msg: &Message,
) -> String {
    let mut out = if path == "/" && !prefix.is_empty() {
        prefix.to_string()
    } else {
        format!("{}{path}", prefix.trim_end_matches('/'))
    };
    let mut query: Vec<String> = Vec::new();
    if !target_query.is_empty() {
        query.push(target_query.to_string());
    }
    if !msg.query.is_empty() {
        query.push(mapping::dialect::template::render_query(&msg.query));
    }
    if !query.is_empty() {
        out.push('?');
        out.push_str(&query.join("&"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use mapping::dialect::Doc;

    #[test]
    fn a_target_gives_its_path_and_query_only() {
        assert_eq!(
            path_of("http://elsewhere.example:9/a2a/jsonrpc?x=1"),
            Some(("/a2a/jsonrpc".to_string(), "x=1".to_string()))
        );
        assert_eq!(
            path_of("/a2a/rest"),
            Some(("/a2a/rest".to_string(), String::new()))
        );
        assert_eq!(path_of("not a url"), None);
    }

    #[test]
    fn the_forms_path_is_appended_to_the_target() {
        let none = Message::default();
        assert_eq!(join("/a2a/jsonrpc", "", "/", &none), "/a2a/jsonrpc");
        assert_eq!(
            join("/a2a/rest/", "", "/message:send", &none),
            "/a2a/rest/message:send"
        );
        assert_eq!(join("", "", "/", &none), "/");
        let q = Message {
            query: vec![("a".to_string(), "b c".to_string())],
            ..Message::default()
        };
        assert_eq!(join("/r", "x=1", "/tasks/1", &q), "/r/tasks/1?x=1&a=b%20c");
    }

    #[test]
    fn discovered_fields_sit_beside_the_document() {
        let task = serde_json::json!({"task": {"id": "t1"}});
        let found = serde_json::json!({"url": "/rpc"});
        let view = WithDiscovered {
            doc: &task,
            discovered: &found,
        };
        let at = |p: &str| p.split('.').map(str::to_string).collect::<Vec<_>>();
        assert_eq!(view.get(&at("discovered.url")), Some(&Value::from("/rpc")));
        assert_eq!(view.get(&at("task.id")), Some(&Value::from("t1")));
        assert_eq!(view.to_value()["discovered"]["url"], "/rpc");
    }

    fn mapping(text: &str) -> mapping::dialect::Mapping {
        mapping::dialect::compile::parse(text, "test").unwrap_or_else(|p| panic!("{p}"))
    }

    #[test]
    fn a_discover_section_compiles_and_its_reads_feed_forms() {
        let m = mapping(
            r#"
dialect = "d"
[vars]
where = ""
[discover]
target = "var.where"
ttl = "90s"
response = [
  { json = "$.endpoint", field = "discovered.url" },
  { json = "$", field = "discovered.kind", read = "if($.endpoint, 'found', null)" },
]
[operations.get_task]
method = "GET"
path = "/tasks/{id}"
target = "discovered.url"
when = "discovered.kind == 'found'"
request = [ { param = "id", field = "task.id" }, { header = "X-Via", value = "discovered.kind" } ]
"#,
        );
        let d = m.discover.as_ref().unwrap();
        assert_eq!(d.ttl, Duration::from_secs(90));
        assert_eq!(d.call.method, http::Method::GET);
        assert_eq!(d.call.path.as_str(), "/.well-known/agent-card.json");
        let vars = m.vars.clone();
        let ctx = mapping::dialect::Context {
            mapping: &m,
            vars: &vars,
            seal_key: &[],
        };
        let read = dialect::decode(
            &d.call.response,
            &Message::with_body(serde_json::json!({"endpoint": "http://x:1/api"})),
            &ctx,
        )
        .unwrap();
        let found = read["discovered"].clone();
        assert_eq!(
            found,
            serde_json::json!({"url": "http://x:1/api", "kind": "found"})
        );
        let task = serde_json::json!({"task": {"id": "t 1"}});
        let view = WithDiscovered {
            doc: &task,
            discovered: &found,
        };
        let op = m.forms(mapping::task::Operation::GetTask).next().unwrap();
        assert!(dialect::holds(op.when.as_ref().unwrap(), &view, &ctx));
        let msg = dialect::encode(&op.request, &view, &ctx).unwrap();
        assert_eq!(msg.header("X-Via"), Some("found"));
        let to = dialect::evaluate(op.target.as_ref().unwrap(), &view, &ctx).unwrap();
        let (prefix, query) = path_of(to.as_str().unwrap()).unwrap();
        let path = op.path.render(&msg.params).unwrap();
        assert_eq!(join(&prefix, &query, &path, &msg), "/api/tasks/t%201");
        // Nothing discovered: the form's `when` does not hold.
        let nothing = Value::Object(Map::new());
        let bare = WithDiscovered {
            doc: &task,
            discovered: &nothing,
        };
        assert!(!dialect::holds(op.when.as_ref().unwrap(), &bare, &ctx));
    }

    #[test]
    fn a_discovery_may_post_a_body_and_name_calls_to_make_after_it() {
        let text = r#"
dialect = "d"
[calls.hello]
method = "POST"
path = "/"
request = [{ header = "Session", value = "discovered.session" }]
[discover]
method = "POST"
path = "/"
then = ["hello"]
request = [{ json = "$.method", value = "'initialize'" }]
response = [{ header = "Session", field = "discovered.session" }]
"#;
        let m = mapping(text);
        let d = m.discover.as_ref().unwrap();
        assert_eq!(d.call.method, http::Method::POST);
        assert_eq!(d.then.len(), 1);
        assert_eq!(d.then[0].name, "hello");
        let vars = m.vars.clone();
        let ctx = mapping::dialect::Context {
            mapping: &m,
            vars: &vars,
            seal_key: &[],
        };
        let msg = dialect::encode(&d.call.request, &Canonical::empty(), &ctx).unwrap();
        assert_eq!(msg.body, Some(serde_json::json!({"method": "initialize"})));
        // The call after it is written with what the discovery read in view.
        let found = serde_json::json!({"session": "s-1"});
        let view = WithDiscovered {
            doc: &Canonical::empty(),
            discovered: &found,
        };
        let next = dialect::encode(&d.then[0].request, &view, &ctx).unwrap();
        assert_eq!(next.header("Session"), Some("s-1"));
        let e = mapping::dialect::compile::parse(
            &text.replace("then = [\"hello\"]", "then = [\"nope\"]"),
            "test",
        )
        .unwrap_err();
        assert!(e.to_string().contains("discover.then"), "{e}");
    }

    #[test]
    fn a_call_after_another_may_hold_a_condition_on_what_was_read() {
        let text = r#"
dialect = "d"
[operations.get]
operation = "get_task"
side = "back"
method = "POST"
path = "/"
then = ["result"]
[calls.result]
when = "task.status == 'completed'"
method = "POST"
path = "/"
"#;
        let m = mapping(text);
        let vars = m.vars.clone();
        let ctx = mapping::dialect::Context {
            mapping: &m,
            vars: &vars,
            seal_key: &[],
        };
        let get = m
            .op(mapping::task::Operation::GetTask)
            .expect("the get form");
        let call = super::super::documents::call_of(&get.then[0]);
        let when = call.when.expect("the call's condition");
        let done = serde_json::json!({"task": {"status": "completed"}});
        let working = serde_json::json!({"task": {"status": "running"}});
        assert!(dialect::holds(when, &done, &ctx));
        assert!(!dialect::holds(when, &working, &ctx));
        let e = mapping::dialect::compile::parse(&text.replace("== 'completed'", "=="), "test")
            .unwrap_err();
        assert!(e.to_string().contains("calls.result.when"), "{e}");
    }

    #[test]
    fn a_bad_ttl_is_reported() {
        let e = mapping::dialect::compile::parse(
            "dialect = \"d\"\n[discover]\nttl = \"soon\"\n",
            "test",
        )
        .unwrap_err();
        assert!(e.to_string().contains("discover.ttl"), "{e}");
    }

    /// What the `a2a` mapping picks from a card (`vars.version` as given).
    fn a2a_choice(card: Value, version: &str) -> Value {
        let m = mapping(
            mapping::dialect::BUILT_IN
                .iter()
                .find(|(n, _)| *n == "a2a")
                .map(|(_, t)| *t)
                .unwrap(),
        );
        let mut vars = m.vars.clone();
        vars.insert("version".to_string(), Value::from(version));
        let ctx = mapping::dialect::Context {
            mapping: &m,
            vars: &vars,
            seal_key: &[],
        };
        let d = m.discover.as_ref().unwrap();
        let read = dialect::decode(&d.call.response, &Message::with_body(card), &ctx).unwrap();
        let found = &read["discovered"];
        serde_json::json!([found["binding"], found["url"], found["version"]])
    }

    #[test]
    fn the_mcp_handshake_reads_the_session_and_version_from_events_or_json() {
        use serde_json::json;
        let m = mapping(
            mapping::dialect::BUILT_IN
                .iter()
                .find(|(n, _)| *n == "mcp")
                .map(|(_, t)| *t)
                .unwrap(),
        );
        let vars = m.vars.clone();
        let ctx = mapping::dialect::Context {
            mapping: &m,
            vars: &vars,
            seal_key: &[],
        };
        let d = m.discover.as_ref().unwrap();
        let init = dialect::encode(&d.call.request, &Canonical::empty(), &ctx).unwrap();
        let body = init.body.clone().unwrap();
        assert_eq!(body["method"], "initialize");
        assert_eq!(body["params"]["protocolVersion"], "2025-11-25");
        assert_eq!(body["params"]["capabilities"], json!({}));
        assert_eq!(
            init.header("Accept"),
            Some("application/json, text/event-stream")
        );
        let result = json!({"protocolVersion": "2025-06-18", "capabilities": {}});
        let answers = [
            // Server-sent events: the array of their payloads, a notification first.
            json!([{"jsonrpc": "2.0", "method": "notifications/message", "params": {}},
                {"jsonrpc": "2.0", "id": 1, "result": result}]),
            // JSON: the one object.
            json!({"jsonrpc": "2.0", "id": 1, "result": result}),
        ];
        for answer in answers {
            let reply = Message {
                headers: vec![("mcp-session-id".to_string(), "abc".to_string())],
                body: Some(answer.clone()),
                ..Message::default()
            };
            let read = dialect::decode(&d.call.response, &reply, &ctx).unwrap();
            assert_eq!(
                read["discovered"],
                json!({"session": "abc", "version": "2025-06-18", "tasks": false}),
                "{answer}"
            );
        }
        // A server that takes task-augmented tool calls says so in its capabilities.
        let tasks = json!({"jsonrpc": "2.0", "id": 1, "result": {"protocolVersion": "2025-11-25",
            "capabilities": {"tasks": {"requests": {"tools": {"call": {}}}}}}});
        let reply = Message {
            body: Some(tasks),
            ..Message::default()
        };
        let read = dialect::decode(&d.call.response, &reply, &ctx).unwrap();
        assert_eq!(read["discovered"]["tasks"], true);
        // The calls after it carry the session.
        let found = json!({"session": "abc", "version": "2025-06-18"});
        let view = WithDiscovered {
            doc: &Canonical::empty(),
            discovered: &found,
        };
        let names: Vec<&str> = d.then.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["mcp_initialized", "mcp_tool"]);
        let initialized = dialect::encode(&d.then[0].request, &view, &ctx).unwrap();
        assert_eq!(initialized.header("Mcp-Session-Id"), Some("abc"));
        assert_eq!(
            initialized.header("MCP-Protocol-Version"),
            Some("2025-06-18")
        );
        assert_eq!(
            initialized.body,
            Some(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        );
    }

    #[test]
    fn the_a2a_card_choice_prefers_jsonrpc_1_then_rest_1_then_jsonrpc_0_3() {
        use serde_json::json;
        let iface = |url: &str, binding: &str, v: &str| json!({"url": url, "protocolBinding": binding, "protocolVersion": v});
        let all = json!({"supportedInterfaces": [
            iface("http://a/rest", "HTTP+JSON", "1.0"),
            iface("http://a/rpc03", "JSONRPC", "0.3.0"),
            iface("http://a/rpc", "JSONRPC", "1.0"),
        ], "url": "http://a/rpc03", "preferredTransport": "JSONRPC", "protocolVersion": "0.3.0"});
        assert_eq!(
            a2a_choice(all.clone(), ""),
            json!(["JSONRPC", "http://a/rpc", "1.0"])
        );
        assert_eq!(
            a2a_choice(all.clone(), "0.3"),
            json!(["JSONRPC", "http://a/rpc03", "0.3"])
        );
        let rest = json!({"supportedInterfaces": [iface("/a2a/rest", "HTTP+JSON", "1.0.0")]});
        assert_eq!(
            a2a_choice(rest, ""),
            json!(["HTTP+JSON", "/a2a/rest", "1.0"])
        );
        // A 0.3 card: url and preferredTransport, or an additional interface.
        let old = json!({"url": "http://a/v03", "protocolVersion": "0.3.0"});
        assert_eq!(
            a2a_choice(old.clone(), ""),
            json!(["JSONRPC", "http://a/v03", "0.3"])
        );
        assert_eq!(a2a_choice(old, "1.0"), json!([null, null, null]));
        let grpc = json!({"url": "grpc://a", "preferredTransport": "GRPC", "protocolVersion": "0.3.0",
            "additionalInterfaces": [{"url": "http://a/jsonrpc", "transport": "JSONRPC"}]});
        assert_eq!(
            a2a_choice(grpc, ""),
            json!(["JSONRPC", "http://a/jsonrpc", "0.3"])
        );
        assert_eq!(
            a2a_choice(json!({"name": "no interfaces"}), ""),
            json!([null, null, null])
        );
    }
}
