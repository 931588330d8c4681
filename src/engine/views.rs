//! The canonical documents mappings read and write, made from tasks, and the tasks and patches
//! made from documents.
//!
//! A mapping's `task.id` is the id *in that dialect's namespace*: the front sees interlingua's id,
//! the back its own. So the document for the back carries the upstream ids, and what the back
//! says of `task.id` is the upstream id.

use std::sync::OnceLock;

use serde_json::{json, Map, Value};

use crate::error::ProxyError;
use crate::upstream::UpstreamError;
use mapping::dialect::expr::walk;
use mapping::dialect::{canonical, Doc};
use mapping::task::time::serialize_rfc3339;
use mapping::task::{Input, Task, TaskPatch};

/// The document a front mapping sees for a task.
pub fn front_task(task: &Task) -> Value {
    serde_json::to_value(task).unwrap_or(Value::Null)
}

/// The document a back mapping sees for a task: ids are the upstream's (interlingua's until the
/// back has given its own).
pub fn back_task(task: &Task) -> Value {
    let mut v = front_task(task);
    if let Value::Object(o) = &mut v {
        o.insert("id".into(), Value::String(back_id(task).clone()));
        if let Some(steps) = o.get_mut("steps") {
            back_step_ids(steps, task);
        }
    }
    v
}

/// The task's id as the back knows it: before the back has named the task, interlingua's.
fn back_id(task: &Task) -> &String {
    task.upstream_id.as_ref().unwrap_or(&task.id)
}

/// Each step's id as the back knows it (none, until the back has named the step).
fn back_step_ids(steps: &mut Value, task: &Task) {
    let Value::Array(steps) = steps else { return };
    for (step, s) in steps.iter_mut().zip(&task.steps) {
        if let Value::Object(so) = step {
            match &s.upstream_id {
                Some(id) => so.insert("id".into(), Value::String(id.clone())),
                None => so.remove("id"),
            };
        }
    }
}

/// `{"task": back_task(task)}`, made a field at a time as the back's rules read it: a back's
/// request reads a few of a task's fields (MIP-003's status call, its id alone), and turning the
/// whole task into JSON values for each call was ≈ 4 % of a get_task's CPU.
pub struct BackDoc<'a> {
    task: &'a Task,
    /// One per name of [`canonical::TASK`] (the task's serde names, and a few patterns a mapping
    /// may name, which no path reads as one segment).
    fields: [OnceLock<Value>; canonical::TASK.len()],
    whole: OnceLock<Value>,
}

impl<'a> BackDoc<'a> {
    pub fn new(task: &'a Task) -> BackDoc<'a> {
        BackDoc {
            task,
            fields: std::array::from_fn(|_| OnceLock::new()),
            whole: OnceLock::new(),
        }
    }
}

impl Doc for BackDoc<'_> {
    fn get(&self, path: &[String]) -> Option<&Value> {
        match path {
            [root, name, rest @ ..] if root == "task" => {
                let i = canonical::TASK.iter().position(|f| f == name)?;
                let value = self.fields[i].get_or_init(|| task_field(self.task, name));
                walk(value, rest)
            }
            _ => walk(self.whole.get_or_init(|| Doc::to_value(self)), path),
        }
    }

    fn to_value(&self) -> Value {
        doc([("task", back_task(self.task))])
    }
}

/// One field of `back_task(task)` (null for one it leaves out).
fn task_field(task: &Task, name: &str) -> Value {
    fn json<T: serde::Serialize>(v: &T) -> Value {
        serde_json::to_value(v).unwrap_or(Value::Null)
    }
    let time = |t| serialize_rfc3339(t, serde_json::value::Serializer).unwrap_or(Value::Null);
    match name {
        "id" => Value::String(back_id(task).clone()),
        "upstream_id" => json(&task.upstream_id),
        "agent" => json(&task.agent),
        "route" => json(&task.route),
        "subject" => json(&task.subject),
        "plan" => json(&task.plan),
        "status" => json(&task.status),
        "reason" => json(&task.reason),
        "name" => json(&task.name),
        "input" => json(&task.input),
        "output" => json(&task.output),
        "input_request" => json(&task.input_request),
        "status_ref" => json(&task.status_ref),
        "message" => json(&task.message),
        "conversation" => json(&task.conversation),
        "steps" => {
            let mut steps = json(&task.steps);
            back_step_ids(&mut steps, task);
            steps
        }
        "cost" => json(&task.cost),
        "created_at" => time(&task.created_at),
        "updated_at" => time(&task.updated_at),
        "client_ref" => json(&task.client_ref),
        "turn" => json(&task.turn),
        "status_since" => task.status_since.as_ref().map_or(Value::Null, time),
        "payment" => json(&task.payment),
        _ => Value::Null,
    }
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
    serde_json::from_value(Value::Object(task)).map_err(|e| {
        ProxyError::Upstream(UpstreamError::Invalid {
            upstream: upstream.to_string(),
            dialect: dialect.to_string(),
            detail: format!("it does not fit the canonical task: {e}"),
        })
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
        ProxyError::InvalidField { field, .. } => {
            e["location"] = json!(field.location);
            e["field"] = json!(field.name);
            e["problem"] = json!(field.problem);
            if let Some(t) = field.expected {
                e["expected"] = json!(t);
            }
        }
        ProxyError::PaymentRequired { available, price } => {
            e["available"] = json!(available);
            e["price"] = json!(price);
        }
        ProxyError::RateLimited(r) => e["retry_after"] = json!(r.retry_after_secs()),
        _ => {}
    }
    json!({ "error": e })
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};

    use super::*;
    use mapping::task::{Output, Status, Step};

    /// Every field set, so that each one's JSON is compared (a field added to `Task` must be
    /// added here, and then to `canonical::TASK` and `task_field`, or this test fails).
    fn full_task() -> Task {
        let at = Utc.with_ymd_and_hms(2026, 11, 23, 12, 0, 0).unwrap();
        let step = |id: &str, upstream: Option<&str>, order: u32| Step {
            id: id.to_string(),
            task_id: "t-1".to_string(),
            upstream_id: upstream.map(str::to_string),
            order,
            name: Some(format!("step {order}")),
            status: Status::Completed,
            predecessor: None,
            is_last: order == 2,
            input: Input {
                text: Some("in".to_string()),
                params: None,
                artifacts: None,
            },
            output: Output {
                text: Some("out".to_string()),
                additional: Some(json!({"k": [1, 2]})),
                artifacts: None,
            },
            cost: 1,
            created_at: at,
            updated_at: at + chrono::Duration::milliseconds(1500),
        };
        Task {
            id: "t-1".to_string(),
            upstream_id: Some("job-9".to_string()),
            agent: Some("did:nv:a".to_string()),
            route: "r".to_string(),
            subject: Some("alice".to_string()),
            plan: Some("gold".to_string()),
            status: Status::AwaitingInput,
            reason: Some("rejected".to_string()),
            name: Some("a task".to_string()),
            input: Input {
                text: Some("question".to_string()),
                params: Some(json!({"a": 1, "b": {"c": [true, null]}})),
                artifacts: Some(json!([{"uri": "x"}])),
            },
            output: Output {
                text: Some("answer".to_string()),
                additional: Some(json!({"score": 0.5})),
                artifacts: Some(json!([])),
            },
            input_request: Some(json!({"type": "object"})),
            status_ref: Some("s-3".to_string()),
            message: Some("what next?".to_string()),
            conversation: Some("c-7".to_string()),
            steps: vec![step("st-1", Some("up-1"), 1), step("st-2", None, 2)],
            cost: 5,
            created_at: at,
            updated_at: at + chrono::Duration::seconds(3),
            client_ref: Some("mine".to_string()),
            turn: 2,
            status_since: Some(at + chrono::Duration::seconds(2)),
            payment: Some(json!({"blockchainIdentifier": "b-1", "payByTime": 1795398344446_u64})),
        }
    }

    fn paths(v: &Value, at: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        out.push(at.clone());
        let children: Vec<(String, &Value)> = match v {
            Value::Object(o) => o.iter().map(|(k, v)| (k.clone(), v)).collect(),
            Value::Array(a) => a
                .iter()
                .enumerate()
                .map(|(i, v)| (i.to_string(), v))
                .collect(),
            _ => Vec::new(),
        };
        for (key, child) in children {
            at.push(key);
            paths(child, at, out);
            at.pop();
        }
    }

    fn present(v: Option<&Value>) -> Option<&Value> {
        v.filter(|v| !v.is_null())
    }

    #[test]
    fn the_back_doc_reads_as_the_back_task_does() {
        let now = Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap();
        for task in [full_task(), Task::new("r", now)] {
            let whole = doc([("task", back_task(&task))]);
            let lazy = BackDoc::new(&task);
            let Some(Value::Object(fields)) = whole.get("task") else {
                panic!("no task in {whole}");
            };
            for name in fields.keys() {
                assert!(
                    canonical::TASK.contains(&name.as_str()),
                    "`{name}` is not in canonical::TASK"
                );
            }
            let mut all = Vec::new();
            paths(&whole, &mut Vec::new(), &mut all);
            for name in canonical::TASK {
                all.push(vec!["task".to_string(), name.to_string()]);
            }
            all.push(vec!["task".to_string(), "no_such_field".to_string()]);
            all.push(vec!["step".to_string()]);
            for path in &all {
                assert_eq!(
                    present(Doc::get(&lazy, path)),
                    present(Doc::get(&whole, path)),
                    "at {path:?}"
                );
            }
            assert_eq!(Doc::to_value(&lazy), whole);
        }
    }

    #[test]
    fn the_back_doc_has_the_upstream_ids() {
        let task = full_task();
        let lazy = BackDoc::new(&task);
        let at = |p: &str| {
            let path: Vec<String> = p.split('.').map(str::to_string).collect();
            Doc::get(&lazy, &path).cloned()
        };
        assert_eq!(at("task.id"), Some(json!("job-9")));
        assert_eq!(at("task.steps.0.id"), Some(json!("up-1")));
        assert_eq!(at("task.steps.1.id"), None);
        assert_eq!(at("task.steps.1.order"), Some(json!(2)));
        let mut fresh = Task::new("r", Utc::now());
        let id = fresh.id.clone();
        fresh.upstream_id = None;
        let lazy = BackDoc::new(&fresh);
        assert_eq!(
            Doc::get(&lazy, &["task".to_string(), "id".to_string()]),
            Some(&json!(id))
        );
    }
}
