//! The canonical documents mappings read and write, made from tasks, and the tasks and patches
//! made from documents.
//!
//! A mapping's `task.id` is the id *in that dialect's namespace*: the front sees interlingua's id,
//! the back its own. So the document for the back carries the upstream ids, and what the back
//! says of `task.id` is the upstream id.

use serde_json::{json, Map, Value};

use super::super::dialect::expr::walk;
use crate::error::ProxyError;
use crate::task::{Input, Task, TaskPatch};

/// The document a front mapping sees for a task.
pub fn front_task(task: &Task) -> Value {
    serde_json::to_value(task).unwrap_or(Value::Null)
}

/// The document a back mapping sees for a task: ids are the upstream's (interlingua's until the
/// back has given its own).
pub fn back_task(task: &Task) -> Value {
    let mut v = front_task(task);
    if let Value::Object(o) = &mut v {
        // Before the back has named the task, it knows it by interlingua's id (if at all).
        let id = task.upstream_id.as_ref().unwrap_or(&task.id);
        o.insert("id".into(), Value::String(id.clone()));
        if let Some(Value::Array(steps)) = o.get_mut("steps") {
            for (step, s) in steps.iter_mut().zip(&task.steps) {
                if let Value::Object(so) = step {
                    match &s.upstream_id {
                        Some(id) => so.insert("id".into(), Value::String(id.clone())),
                        None => so.remove("id"),
                    };
                }
            }
        }
    }
    v
}

/// A document with these roots (null ones left out).
pub fn doc<const N: usize>(parts: [(&str, Value); N]) -> Value {
    let mut m = Map::new();
    for (k, v) in parts {
        if !v.is_null() {
            m.insert(k.to_string(), v);
        }
    }
    Value::Object(m)
}

/// Merges `from` into `into`: objects key by key, recursively; anything else replaced.
pub fn merge_into(into: &mut Value, from: &Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                match a.get_mut(k) {
                    Some(existing) if existing.is_object() && v.is_object() => {
                        merge_into(existing, v)
                    }
                    _ => {
                        a.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (into, from) => *into = from.clone(),
    }
}

/// The value at a dotted path of a document.
pub fn at<'a>(doc: &'a Value, path: &str) -> Option<&'a Value> {
    let parts: Vec<String> = path.split('.').map(str::to_string).collect();
    walk(doc, &parts).filter(|v| !v.is_null())
}

/// A value as text: strings as they are, anything else as JSON.
pub fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A string at a dotted path.
pub fn text_at(doc: &Value, path: &str) -> Option<String> {
    at(doc, path).and_then(|v| match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    })
}

/// What a front's create request says about the task to create.
pub fn apply_draft(task: &mut Task, doc: &Value) {
    task.name = text_at(doc, "task.name");
    task.agent = text_at(doc, "task.agent").filter(|s| !s.is_empty());
    task.client_ref = text_at(doc, "task.client_ref");
    task.conversation = text_at(doc, "task.conversation");
    task.input = Input {
        text: text_at(doc, "task.input.text"),
        params: at(doc, "task.input.params").cloned(),
        artifacts: at(doc, "task.input.artifacts").cloned(),
    };
}

/// What a back's answer says about a task. `upstream` and `dialect` name it in errors.
pub fn patch_from_back(
    doc: &Value,
    upstream: &str,
    dialect: &str,
) -> Result<TaskPatch, ProxyError> {
    let Some(Value::Object(task)) = doc.get("task") else {
        return Ok(TaskPatch::default());
    };
    let mut task = task.clone();
    if let Some(id) = task.remove("id") {
        task.insert("upstream_id".into(), id);
    }
    serde_json::from_value(Value::Object(task)).map_err(|e| ProxyError::UpstreamInvalid {
        upstream: upstream.to_string(),
        dialect: dialect.to_string(),
        detail: format!("it does not fit the canonical task: {e}"),
    })
}

/// The canonical error document for `err`.
pub fn error_doc(err: &ProxyError, request_id: &str) -> Value {
    let status = err.status();
    let reason = http::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("Error");
    let mut e = json!({
        "status": status,
        "code": err.code(),
        "message": err.to_string(),
        "reason": reason,
        "request_id": request_id,
    });
    match err {
        ProxyError::InvalidInput { field_errors, .. } => e["field_errors"] = json!(field_errors),
        ProxyError::PaymentRequired { available, price } => {
            e["available"] = json!(available);
            e["price"] = json!(price);
        }
        ProxyError::RateLimited(r) => e["retry_after"] = json!(r.retry_after_secs()),
        _ => {}
    }
    json!({ "error": e })
}
