//! Target `dialects`: every built-in mapping's decode and encode.
//!
//! The bytes are a message body (JSON; anything else is a message without a body). Each of the
//! body's top-level string members is also a path parameter, a query parameter and a header of
//! the same name, so rules that read those are reached too, and each one that starts with `/`
//! is matched as a request path against the mapping's front forms. Then, for every rule set of
//! every built-in mapping (each form's request and response, its further calls, `[discover]`,
//! `[request]`, `[error]`, stream frames, the `[answer.*]` replies):
//!
//! - decode the message into a canonical document, and encode that document back with the same
//!   rules (with the request's path and query rendered, as `interlingua translate` does);
//! - encode the body itself as if it were a canonical document (canonical → dialect from
//!   anything).
//!
//! A request a front form takes is also held to the `[request]` checks and the form's own, as
//! the engine does once it has read it.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use http::Method;
use mapping::dialect::mapping::Rules;
use mapping::dialect::template::{render_query, PathTemplate};
use mapping::dialect::{compile, decode, encode, holds, Context, Mapping, Message, BUILT_IN};
use serde_json::Value;

/// The built-in mappings, compiled once.
static MAPPINGS: LazyLock<Vec<Mapping>> = LazyLock::new(|| {
    BUILT_IN
        .iter()
        .map(|(name, text)| match compile::parse(text, name) {
            Ok(m) => m,
            Err(p) => panic!("the built-in mapping {name} does not compile:\n{p}"),
        })
        .collect()
});

/// One set of rules, with the path its requests are sent to (when it is a request's).
struct Form<'a> {
    rules: &'a Rules,
    path: Option<&'a PathTemplate>,
}

/// Every rule set of a mapping.
fn forms(m: &Mapping) -> Vec<Form<'_>> {
    let mut out = Vec::new();
    let mut push = |rules, path| out.push(Form { rules, path });
    for op in m.ops.iter().chain(&m.answers) {
        push(&op.request, Some(&op.path));
        push(&op.response, None);
        for call in &op.then {
            push(&call.request, Some(&call.path));
            push(&call.response, None);
        }
        for frame in op.stream.iter().flat_map(|s| &s.frames) {
            push(&frame.rules, None);
        }
    }
    if let Some(d) = &m.discover {
        push(&d.call.request, Some(&d.call.path));
        push(&d.call.response, None);
    }
    for rules in [&m.request, &m.error].into_iter().flatten() {
        push(rules, None);
    }
    out
}

/// Decodes and encodes `data` with every rule set of every built-in mapping.
pub fn run(data: &[u8]) {
    let body: Option<Value> = serde_json::from_slice(data).ok();
    let strings: Vec<(String, String)> = body
        .as_ref()
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
        .collect();
    let msg = Message {
        params: strings.iter().cloned().collect::<BTreeMap<_, _>>(),
        query: strings.clone(),
        headers: strings.clone(),
        body: body.clone(),
    };
    let canonical = body.unwrap_or(Value::Null);
    for m in MAPPINGS.iter() {
        let ctx = Context {
            mapping: m,
            vars: &m.vars,
            seal_key: &[],
        };
        for (_, path) in strings.iter().filter(|(_, s)| s.starts_with('/')) {
            for method in [Method::GET, Method::POST] {
                if let Some((op, params)) = m.match_front(&method, path, &msg) {
                    let routed = Message {
                        params,
                        ..msg.clone()
                    };
                    if let Ok(doc) = decode(&op.request, &routed, &ctx) {
                        for check in m.request_checks.iter().chain(&op.checks) {
                            let _ = holds(&check.holds, &doc, &ctx);
                        }
                    }
                }
            }
        }
        for op in m.ops.iter().chain(&m.answers) {
            let _ = op.waits(&canonical, &ctx);
            if let Some(when) = &op.when {
                let _ = holds(when, &canonical, &ctx);
            }
        }
        for check in m.ops.iter().chain(&m.answers).flat_map(|o| &o.checks) {
            let _ = holds(&check.holds, &canonical, &ctx);
        }
        for check in &m.request_checks {
            let _ = holds(&check.holds, &canonical, &ctx);
        }
        for form in forms(m) {
            if let Ok(doc) = decode(form.rules, &msg, &ctx) {
                if let Ok(out) = encode(form.rules, &doc, &ctx) {
                    if let Some(path) = form.path {
                        let _ = path.render(&out.params);
                        let _ = render_query(&out.query);
                    }
                }
            }
            let _ = encode(form.rules, &canonical, &ctx);
        }
    }
}
